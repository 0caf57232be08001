/*
 * The file system's glue (libfuse3's low-level API): the ops table, init, lookup,
 * forget, getattr, setattr, statfs, the refusals, and the state's life (mnt_fs_new/free).
 * fs.h lists the other files, the lock order and the no-re-entry rule.
 *
 * Invariants:
 * - Every reply that hands the kernel a node id (lookup, mkdir, create; readdirplus in
 *   readdir.c) adds one to that inode's nlookup before the reply; a reply that fails takes it
 *   back. forget/forget_multi take back what the kernel says.
 * - Attribute and entry timeouts are per reply (--metadata-ttl; the negative TTL for a
 *   missing name; 0 for an inode whose version was overwritten in place while read
 *   handles of the old one are open): nothing of libfuse's is rewritten at run time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/assert.h"
#include "fs.h"

double mnt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int mnt_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timespec mnt_deadline(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (int64_t)(s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

int mnt_errno_of(enum s3f_status st, int open_handle) {
    switch (st) {
    case S3F_OK: return 0;
    case S3F_ERR_NOT_FOUND: return open_handle ? EIO : ENOENT;
    case S3F_ERR_ACCESS_DENIED:
    case S3F_ERR_EXPIRED_CREDENTIALS: return EACCES;
    case S3F_ERR_NO_MEMORY: return ENOMEM;
    default: return EIO;
    }
}

/* ---- paths and keys -------------------------------------------------------------- */

char *mnt_key_of(const struct mnt_fs *fs, const char *path, const char *suffix) {
    const char *rel = path[0] == '/' ? path + 1 : path;
    size_t lp = strlen(fs->prefix), lr = strlen(rel), ls = strlen(suffix);
    char *k = malloc(lp + lr + ls + 1);
    if (!k)
        return NULL;
    memcpy(k, fs->prefix, lp);
    memcpy(k + lp, rel, lr);
    memcpy(k + lp + lr, suffix, ls + 1);
    return k;
}

char *mnt_child_path(const char *dir, const char *name, size_t name_len) {
    size_t ld = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
    char *p = malloc(ld + 1 + name_len + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, ld);
    p[ld] = '/';
    memcpy(p + ld + 1, name, name_len);
    p[ld + 1 + name_len] = 0;
    return p;
}

void mnt_parent_of(const char *path, char *out) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0) {
        out[0] = '/';
        out[1] = 0;
        return;
    }
    if (n >= PATH_MAX)
        n = PATH_MAX - 1;
    memcpy(out, path, n);
    out[n] = 0;
}

int mnt_is_under(const char *dir, const char *path) {
    size_t ld = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
    return strncmp(path, dir, ld) == 0 && path[ld] == '/' && path[ld + 1];
}

void mnt_fill_stat(const struct mnt_fs *fs, const struct attr *a, fuse_ino_t ino,
                   struct stat *st) {
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    if (a->kind == K_DIR) {
        st->st_mode = S_IFDIR | fs->o.dir_mode;
        st->st_nlink = 2;
        st->st_mtime = st->st_atime = st->st_ctime = (time_t)fs->start_time;
    } else {
        st->st_mode = S_IFREG | fs->o.file_mode;
        st->st_nlink = 1;
        st->st_size = (off_t)a->size;
        st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
        st->st_mtime = st->st_atime = st->st_ctime = (time_t)a->mtime;
    }
    st->st_blksize = 1 << 20;
    st->st_uid = fs->o.uid;
    st->st_gid = fs->o.gid;
}

int mnt_reply_entry(fuse_req_t req, struct mnt_fs *fs, const char *path,
                    const struct attr *a) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_get(fs, path, a);
    if (!in) {
        pthread_mutex_unlock(&fs->mu);
        fuse_reply_err(req, ENOMEM);
        return -1;
    }
    in->nlookup++;
    e.ino = in->ino;
    double t = in->n_stale ? 0 : fs->o.metadata_ttl_s;
    /* Past the memory budget the kernel is asked not to keep the entry: with a zero
     * entry timeout it drops the dentry at its last use and forgets the inode, so a walk
     * of a huge directory does not pin an inode per name (the metadata cache still
     * answers the next lookup of it while it holds the name). */
    int full = mnt_inodes_full(fs);
    double et = full ? 0 : fs->o.metadata_ttl_s;
    mnt_fill_stat(fs, a, in->ino, &e.attr);
    pthread_mutex_unlock(&fs->mu);
    e.attr_timeout = et == 0 ? 0 : t;
    e.entry_timeout = et;
    if (fuse_reply_entry(req, &e) != 0) {
        pthread_mutex_lock(&fs->mu);
        struct inode *again = mnt_inode_find(fs, e.ino);
        if (again)
            mnt_inode_unref(fs, again, 1, 0);
        pthread_mutex_unlock(&fs->mu);
        return -1;
    }
    return full ? 0 : 1;
}

/* ---- lookup, forget, attributes ---------------------------------------------------- */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    if (!mnt_valid_name(name, strlen(name))) {
        fuse_reply_err(req, strlen(name) > MNT_NAME_MAX ? ENAMETOOLONG : ENOENT);
        return;
    }
    char *path = mnt_req_path_at(req, fs, parent, name);
    if (!path)
        return;
    /* an overwrite's retry (told ESTALE: read.c, write.c): the name is pinned for it from
     * now until its OPEN is answered (guard.c), so that the inode given here is the one it
     * opens. A rename or unlink of the name in flight is waited for (the kernel holds the
     * name's directory for it, so it holds none for this lookup): what it leaves is what
     * the retry opens. An inode of the name that a handle reads through the page cache (a
     * rename brought it in since the ESTALE) is let go of, as the open would (write.c):
     * the lookup hands out a new one, which no reader holds, and the OPEN writes that. */
    pthread_mutex_lock(&fs->mu);
    if (mnt_overwrite_lookup(fs, path, fuse_req_ctx(req)->pid)) {
        mnt_renaming_wait(fs, path);
        struct inode *cur = mnt_inode_current(fs, path);
        if (cur && mnt_read_cached(fs, cur))
            mnt_inode_detach(fs, path); /* not freed: its readers hold it */
    }
    pthread_mutex_unlock(&fs->mu);
    struct attr a;
    int rc = mnt_resolve(fs, path, &a, 0);
    if (rc) {
        /* an overwrite's retry (read.c) that finds nothing ends here: no OPEN comes */
        pthread_mutex_lock(&fs->mu);
        mnt_overwrite_retried(fs, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&fs->mu);
    }
    if (rc == -ENOENT && fs->o.negative_ttl_s > 0) {
        struct fuse_entry_param ne;
        memset(&ne, 0, sizeof(ne));
        ne.entry_timeout = fs->o.negative_ttl_s; /* a negative entry the kernel keeps */
        fuse_reply_entry(req, &ne);
    } else if (rc) {
        fuse_reply_err(req, -rc);
    } else if (mnt_reply_entry(req, fs, path, &a) == 0) {
        /* an entry the kernel was asked not to keep: it drops it (and forgets the inode)
         * when the notifier's invalidation comes, once this reply is used */
        pthread_mutex_lock(&fs->mu);
        mnt_notify_entry_at(fs, parent, name);
        pthread_mutex_unlock(&fs->mu);
    }
    free(path);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, ino);
    if (in)
        mnt_inode_unref(fs, in, nlookup, 0);
    pthread_mutex_unlock(&fs->mu);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    pthread_mutex_lock(&fs->mu);
    for (size_t i = 0; i < count; i++) {
        struct inode *in = mnt_inode_find(fs, forgets[i].ino);
        if (in)
            mnt_inode_unref(fs, in, forgets[i].nlookup, 0);
    }
    pthread_mutex_unlock(&fs->mu);
    fuse_reply_none(req);
}

/* The attributes of inode `ino` as a handle `h` (or none) sees them: 0, or -errno. */
static int inode_attr(struct mnt_fs *fs, fuse_ino_t ino, struct fh *h, struct stat *st,
                      double *timeout) {
    struct attr a;
    *timeout = fs->o.metadata_ttl_s;
    if (h && h->is_write) {
        memset(&a, 0, sizeof(a));
        a.kind = K_FILE;
        a.size = __atomic_load_n(&h->written, __ATOMIC_RELAXED);
        a.mtime = h->opened;
        mnt_fill_stat(fs, &a, ino, st);
        return 0;
    }
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, ino);
    if (!in) {
        pthread_mutex_unlock(&fs->mu);
        return -ENOENT;
    }
    a = in->a;
    if (in->n_stale)
        *timeout = 0;
    if (h && h->r) {
        /* the handle's own version (a stale one too: the kernel asks with the handle
         * before a read past the size it holds, and gets this one's) */
        a.size = h->size;
        a.mtime = h->mtime;
    } else if (a.kind == K_FILE) {
        struct fh *w = mnt_writer_find(fs, in->path);
        if (w && (w->in == in || in->current)) {
            a.size = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
            a.mtime = w->opened;
        }
    }
    pthread_mutex_unlock(&fs->mu);
    mnt_fill_stat(fs, &a, ino, st);
    return 0;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct stat st;
    double t;
    struct fh *h = fi && fi->fh ? (struct fh *)(uintptr_t)fi->fh : NULL;
    int rc = inode_attr(fs, ino, h, &st, &t);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, t);
}

/* chmod, chown, truncate, utimens. chmod/chown: accepted when they change nothing;
 * truncate: only to the size written so far of a file being written; times: accepted and
 * ignored (S3's Last-Modified), so that tar, cp -p and rsync -t do not fail. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    if (fs->o.read_only) {
        fuse_reply_err(req, EROFS);
        return;
    }
    struct fh *fh = fi && fi->fh ? (struct fh *)(uintptr_t)fi->fh : NULL;
    int rc = 0;
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, ino);
    if (!in) {
        pthread_mutex_unlock(&fs->mu);
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (to_set & FUSE_SET_ATTR_MODE) {
        mode_t want = in->a.kind == K_DIR ? fs->o.dir_mode : fs->o.file_mode;
        if ((attr->st_mode & 07777) != want)
            rc = -EPERM;
    }
    if (!rc && (to_set & FUSE_SET_ATTR_UID) && attr->st_uid != fs->o.uid)
        rc = -EPERM;
    if (!rc && (to_set & FUSE_SET_ATTR_GID) && attr->st_gid != fs->o.gid)
        rc = -EPERM;
    if (!rc && (to_set & FUSE_SET_ATTR_SIZE)) {
        /* fs->mu keeps a listed writer alive while we look at it; its fields are read
         * atomically (h->mu is not taken under fs->mu) */
        struct fh *h = fh && fh->is_write ? fh : mnt_writer_find(fs, in->path);
        if (!h || fh_done(fh_state(h)) || attr->st_size < 0 ||
            (uint64_t)attr->st_size != __atomic_load_n(&h->written, __ATOMIC_RELAXED))
            rc = -EPERM;
    }
    pthread_mutex_unlock(&fs->mu);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct stat st;
    double t;
    rc = inode_attr(fs, ino, fh, &st, &t);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, t);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    struct statvfs sv;
    memset(&sv, 0, sizeof(sv));
    sv.f_bsize = 1 << 20;
    sv.f_frsize = 1 << 20;
    sv.f_blocks = sv.f_bfree = sv.f_bavail = (fsblkcnt_t)1 << 40;
    sv.f_files = sv.f_ffree = sv.f_favail = (fsfilcnt_t)1 << 40;
    sv.f_namemax = MNT_NAME_MAX;
    fuse_reply_statfs(req, &sv);
}

/* ---- refusals (docs/SEMANTICS.md, "Not supported") --------------------------------- */

static void op_readlink(fuse_req_t req, fuse_ino_t ino) { fuse_reply_err(req, EINVAL); }
static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *name) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    fuse_reply_err(req, fs->o.read_only ? EROFS : ENOTSUP);
}
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
#ifdef S3F_TEST_HOOKS
    /* test builds only (meson -Dtest_hooks): the state the tests count, on any inode */
    if (strcmp(name, "user.s3flash.test.stats") == 0) {
        struct mnt_fs *fs = fuse_req_userdata(req);
        char buf[512];
        pthread_mutex_lock(&fs->mu);
        int n = snprintf(buf, sizeof(buf),
                         "inodes=%zu mem_inodes=%llu mem_used=%llu mem_budget=%llu meta=%zu "
                         "listings=%zu dir_held=%llu\n",
                         fs->n_inodes, (unsigned long long)fs->mem_inodes,
                         (unsigned long long)fs->mem_used, (unsigned long long)fs->mem_budget,
                         fs->n_meta, fs->n_listings,
                         (unsigned long long)mnt_dirs_held(fs));
        pthread_mutex_unlock(&fs->mu);
        if (size == 0)
            fuse_reply_xattr(req, (size_t)n);
        else if (size < (size_t)n)
            fuse_reply_err(req, ERANGE);
        else
            fuse_reply_buf(req, buf, (size_t)n);
        return;
    }
#endif
    fuse_reply_err(req, ENOTSUP);
}
static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                     struct flock *lock) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                     struct flock *lock, int sleep) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op) {
    fuse_reply_err(req, ENOTSUP);
}
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi) {
    fuse_reply_err(req, EOPNOTSUPP);
}
static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi) {
    fuse_reply_err(req, 0);
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    /* The kernel sends a file's read-ahead as several requests at once; the handle's
     * reader serves them in any order as one stream (read.c, reader.c). */
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->max_write = 1u << 20;
    conn->max_readahead = MNT_READ_AHEAD_KIB * 1024u; /* every mount, root or not */
}

const struct fuse_lowlevel_ops mnt_ll_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = mnt_op_mkdir,
    .unlink = mnt_op_unlink,
    .rmdir = mnt_op_rmdir,
    .symlink = op_symlink,
    .rename = mnt_op_rename,
    .link = op_link,
    .open = mnt_op_open,
    .read = mnt_op_read,
    .write = mnt_op_write,
    .flush = mnt_op_flush,
    .release = mnt_op_release,
    .fsync = mnt_op_fsync,
    .opendir = mnt_op_opendir,
    .readdir = mnt_op_readdir,
    .readdirplus = mnt_op_readdirplus,
    .releasedir = mnt_op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .create = mnt_op_create,
    .getlk = op_getlk,
    .setlk = op_setlk,
    .flock = op_flock,
    .fallocate = op_fallocate,
};

struct mnt_fs *mnt_fs_new(const struct mnt_options *opts, struct s3f_client *client,
                          struct s3f_client *wclient) {
    struct mnt_fs *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return NULL;
    fs->o = *opts;
    fs->c = client;
    fs->cw = wclient;
    pthread_mutex_init(&fs->mu, NULL);
    mnt_notify_init(fs);
    mnt_cond_init(&fs->released);
    fs->mem_budget = opts->metadata_budget_bytes ? opts->metadata_budget_bytes : 8u << 20;
    fs->bucket = strdup(opts->bucket);
    fs->directory_bucket = opts->bucket_type ? opts->bucket_type == MNT_BUCKET_DIRECTORY
                                             : s3f_bucket_is_directory(opts->bucket);
    fs->prefix = strdup(opts->prefix ? opts->prefix : "");
    int bad = !fs->bucket || !fs->prefix;
    if (!bad) {
        pthread_mutex_lock(&fs->mu); /* no other thread yet, but the account is fs->mu's */
        bad = mnt_meta_init(fs) || mnt_inodes_init(fs);
        pthread_mutex_unlock(&fs->mu);
    }
    if (bad) {
        mnt_fs_free(fs);
        return NULL;
    }
    fs->start_time = (int64_t)time(NULL);
    fs->metrics = mnt_metrics_new(fs);
    if (!fs->metrics) {
        mnt_fs_free(fs);
        return NULL;
    }
    struct s3f_client_stats cs;
    s3f_client_stats(wclient, &cs, 0);
    fs->part_size = opts->part_size_bytes ? opts->part_size_bytes : cs.part_size_bytes;
    fs->writer_budget = cs.pool_limit_bytes;
    if (mnt_pf_init(fs)) {
        mnt_fs_free(fs);
        return NULL;
    }
    return fs;
}

int mnt_fs_start(struct mnt_fs *fs, struct fuse_session *se) {
    fs->se = se;
    if (mnt_heads_start(fs))
        return -1;
    return mnt_notifier_start(fs);
}

void mnt_fs_free(struct mnt_fs *fs) {
    if (!fs)
        return;
    mnt_notifier_stop(fs);
    mnt_heads_stop(fs);
    mnt_pf_free(fs);
    /* the session has ended: no operation runs or will run on these handles */
    mnt_writers_free(fs);
    mnt_readers_free(fs);
    pthread_mutex_lock(&fs->mu);
    mnt_dirs_free(fs);
    mnt_listings_free(fs);
    mnt_localdirs_free(fs);
    mnt_overwrites_free(fs);
    mnt_meta_free(fs);
    pthread_mutex_unlock(&fs->mu);
    mnt_inodes_free(fs);
    mnt_notify_free(fs);
    free(fs->bucket);
    free(fs->prefix);
    pthread_cond_destroy(&fs->released);
    pthread_mutex_destroy(&fs->mu);
    s3f_metrics_free(fs->metrics);
    free(fs);
}
