/*
 * The file system of `s3flash mount`: every FUSE operation (libfuse3's path API), the
 * metadata cache, and the open file and directory handles. docs/SEMANTICS.md is the
 * contract: each refusal below returns the errno that file names.
 *
 * Lock order: a handle's mutex, then fs->mu (never the other way round).
 *
 * Shared state (struct mnt_fs, guarded by fs->mu): the metadata cache (path -> kind, size,
 * mtime, ETag, expiry; negative entries for missing names), the directories made by mkdir,
 * and the files open for writing. fs->mu is never held across a request to S3. Each open
 * file handle (struct fh) has its own mutex and its own s3f_reader or s3f_writer; FUSE may
 * call on many handles at once from its worker threads.
 *
 * Calls only the public <s3flash/s3flash.h> API (see mount.h).
 *
 * Why one file of ~1,900 lines: the handlers of libfuse's path API share the metadata cache,
 * the local directories, the writers' table and the stale-handle state, all under fs->mu with
 * the lock order above, and several fixes (a path's versions pinned through direct_io and
 * attribute timeouts, emptied directories invalidated in the kernel) cut across lookup,
 * readdir, open and rename; keeping them together keeps that order checkable in one place.
 * The natural split, once the mount moves to the low-level API (an inode per version, which
 * would replace those workarounds), is the cache, directories and file handles apart.
 */
#define FUSE_USE_VERSION 314
#include <fuse3/fuse.h>
#include <fuse3/fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "mount.h"

#define META_BUCKETS 65536u
#define META_MAX_ENTRIES 1000000u /* beyond it the cache is emptied (a bound, not an LRU) */
#define NAME_MAX_BYTES 255

enum kind { K_MISSING = 0, K_FILE = 1, K_DIR = 2 };

struct meta {
    struct meta *next;
    char *path;
    enum kind kind;
    uint64_t size;
    int64_t mtime;
    char etag[128];
    double expires;        /* monotonic seconds; the entry is used while now < expires */
    char open_etag[128];   /* ETag at the last open for reading (keep_cache) */
};

struct fh;

struct localdir {
    struct localdir *next;
    char *path;
};

struct dent;

/* A complete listing of a directory, served to opendir while fresh (the listing cache). */
struct listing {
    struct listing *next;
    char *path;
    struct dent *ents;
    size_t n;
    double expires;
};
#define LISTINGS_MAX 64             /* directories whose listing is kept */
#define LISTING_MAX_ENTRIES 100000  /* a larger directory is listed every time */

struct mnt_fs {
    struct mnt_options o;
    char *bucket, *prefix;
    struct s3f_client *c;     /* readers, listings, HEADs */
    struct s3f_client *cw;    /* writers, copies, deletes: a pool of its own, so open
                                 readers' windows never make a writer wait */
    uint64_t part_size;
    int64_t start_time;
    pthread_mutex_t mu;
    struct meta **meta;       /* META_BUCKETS chains */
    size_t n_meta;
    struct localdir *localdirs;
    struct fh *writers;       /* open write handles, through fh->next_writer */
    pthread_cond_t released;  /* broadcast when a writer leaves fs->writers */
    uint64_t writer_reserved, writer_budget;
    struct listing *listings; /* most recent first */
    size_t n_listings;
    /* open read and directory handles, freed by mnt_fs_free when the session ends with
     * some still open (the kernel's RELEASE of the last ones may never come) */
    struct fh *readers;
    struct dh *dirs;
    /* Read handles (page cache) of a path overwritten in place since their open: while
     * there are any, every attribute reply is good for 0 s (fs->cfg), so that the kernel
     * asks again, with the handle, before each read past the size it holds (see op_getattr) */
    size_t n_stale;
    struct fuse_config *cfg;  /* libfuse's, from init: its timeouts are read at each reply */
};

struct fh {
    pthread_mutex_t mu;
    int is_write;
    int rdwr;                 /* read handle opened O_RDWR: writes get EBADF */
    char *path, *key;
    struct s3f_reader *r;
    uint64_t size;            /* read handles: the attributes at open */
    int64_t mtime;
    char etag[128];           /* read handles: the ETag pinned at open */
    int direct;               /* read handles: opened with direct_io (not in the page cache) */
    int stale;                /* read handles: their path was overwritten in place (fs->n_stale) */
    /* write handles */
    struct s3f_writer *w;
    uint64_t written;
    int done;                 /* upload completed or failed: no more writes */
    int status;               /* 0 or -errno of the upload */
    pid_t opener;
    int64_t opened;
    uint64_t reserved;
    int listed;               /* in fs->writers */
    int closed;               /* the opener closed it (flush): only release is to come */
    struct fh *next_writer;
    struct fh *rd_prev, *rd_next; /* read handles: in fs->readers */
};

static struct mnt_fs *FS(void) { return fuse_get_context()->private_data; }

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int errno_of(enum s3f_status st, int open_handle) {
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

/* PREFIX + path without its leading '/' + suffix; NULL when out of memory. */
static char *key_of(const struct mnt_fs *fs, const char *path, const char *suffix) {
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

/* The key prefix of a directory's children: "" for the root of a bucket, else "...dir/". */
static char *dir_key_of(const struct mnt_fs *fs, const char *path) {
    if (strcmp(path, "/") == 0)
        return strdup(fs->prefix);
    return key_of(fs, path, "/");
}

static char *child_path(const char *dir, const char *name, size_t name_len) {
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

/* The parent of "/a/b" is "/a", of "/a" is "/". Writes into out[PATH_MAX]. */
static void parent_of(const char *path, char *out) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0) {
        strcpy(out, "/");
        return;
    }
    if (n >= PATH_MAX)
        n = PATH_MAX - 1;
    memcpy(out, path, n);
    out[n] = 0;
}

/* Is `path` strictly under directory `dir`? */
static int is_under(const char *dir, const char *path) {
    size_t ld = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
    return strncmp(path, dir, ld) == 0 && path[ld] == '/' && path[ld + 1];
}

static int valid_name(const char *name, size_t len) {
    if (len == 0 || len > NAME_MAX_BYTES)
        return 0;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    return memchr(name, '/', len) == NULL;
}

/* ---- the metadata cache (fs->mu held) --------------------------------------------- */

static uint32_t hash_str(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static struct meta *meta_find(struct mnt_fs *fs, const char *path) {
    for (struct meta *m = fs->meta[hash_str(path) % META_BUCKETS]; m; m = m->next)
        if (strcmp(m->path, path) == 0)
            return m;
    return NULL;
}

static void meta_clear(struct mnt_fs *fs) {
    for (uint32_t i = 0; i < META_BUCKETS; i++) {
        struct meta *m = fs->meta[i];
        while (m) {
            struct meta *n = m->next;
            free(m->path);
            free(m);
            m = n;
        }
        fs->meta[i] = NULL;
    }
    fs->n_meta = 0;
}

/* The entry of `path`, created when missing (NULL when out of memory). */
static struct meta *meta_get(struct mnt_fs *fs, const char *path) {
    struct meta *m = meta_find(fs, path);
    if (m)
        return m;
    if (fs->n_meta >= META_MAX_ENTRIES)
        meta_clear(fs);
    m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return NULL;
    }
    uint32_t b = hash_str(path) % META_BUCKETS;
    m->next = fs->meta[b];
    fs->meta[b] = m;
    fs->n_meta++;
    return m;
}

static void meta_set(struct mnt_fs *fs, const char *path, enum kind kind, uint64_t size,
                     int64_t mtime, const char *etag) {
    double ttl = kind == K_MISSING ? fs->o.negative_ttl_s : fs->o.metadata_ttl_s;
    struct meta *m = meta_get(fs, path);
    if (!m)
        return;
    m->kind = kind;
    m->size = size;
    m->mtime = mtime;
    snprintf(m->etag, sizeof(m->etag), "%s", etag ? etag : "");
    m->expires = ttl > 0 ? now_mono() + ttl : 0;
}

static void meta_set_locked(struct mnt_fs *fs, const char *path, enum kind kind,
                            uint64_t size, int64_t mtime, const char *etag) {
    pthread_mutex_lock(&fs->mu);
    meta_set(fs, path, kind, size, mtime, etag);
    pthread_mutex_unlock(&fs->mu);
}

/* ---- local directories and writers (fs->mu held) ----------------------------------- */

static struct localdir *localdir_find(struct mnt_fs *fs, const char *path) {
    for (struct localdir *d = fs->localdirs; d; d = d->next)
        if (strcmp(d->path, path) == 0)
            return d;
    return NULL;
}

static void localdir_remove(struct mnt_fs *fs, const char *path) {
    for (struct localdir **pp = &fs->localdirs; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->path, path) == 0) {
            struct localdir *d = *pp;
            *pp = d->next;
            free(d->path);
            free(d);
            return;
        }
    }
}

static struct fh *writer_find(struct mnt_fs *fs, const char *path) {
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        if (strcmp(h->path, path) == 0)
            return h;
    return NULL;
}

static void writer_unlist(struct mnt_fs *fs, struct fh *h) {
    if (!h->listed)
        return;
    for (struct fh **pp = &fs->writers; *pp; pp = &(*pp)->next_writer) {
        if (*pp == h) {
            *pp = h->next_writer;
            break;
        }
    }
    h->listed = 0;
    fs->writer_reserved -= h->reserved;
    h->reserved = 0;
    pthread_cond_broadcast(&fs->released);
}

/* Is `path` being written (fs->mu held)? A file its opener has closed but whose upload
 * completes at release (an empty one: the kernel sends release just after close returns)
 * is waited for, up to 5 s, so that a rename or open right after close (rsync's temporary
 * file) finds the object. */
static int writer_busy(struct mnt_fs *fs, const char *path) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    for (;;) {
        struct fh *h = writer_find(fs, path);
        if (!h)
            return 0;
        if (!__atomic_load_n(&h->closed, __ATOMIC_RELAXED) ||
            __atomic_load_n(&h->written, __ATOMIC_RELAXED) > 0)
            return 1; /* open, or written since by another process holding it */
        if (pthread_cond_timedwait(&fs->released, &fs->mu, &until) == ETIMEDOUT)
            return writer_find(fs, path) != NULL;
    }
}

/* Is a local directory or a file being written strictly under `dir` (fs->mu held)? Such a
 * directory exists whatever S3 lists. */
static int holds_local(struct mnt_fs *fs, const char *dir) {
    for (struct localdir *d = fs->localdirs; d; d = d->next)
        if (is_under(dir, d->path))
            return 1;
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        if (is_under(dir, h->path))
            return 1;
    return 0;
}

/* ---- attributes -------------------------------------------------------------------- */

struct attr {
    enum kind kind;
    uint64_t size;
    int64_t mtime;
    char etag[128];
};

struct dent {
    char *name;
    struct attr a;
};

static void dents_free(struct dent *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

/* ---- the listing cache (fs->mu held) ------------------------------------------------ */

static void listing_free(struct listing *l) {
    dents_free(l->ents, l->n);
    free(l->path);
    free(l);
}

/* Forget the listings of `path`'s directory and of every directory above it (a change
 * through this mount: a new, replaced, deleted or renamed name). */
static void listings_drop_above(struct mnt_fs *fs, const char *path) {
    for (struct listing **pp = &fs->listings; *pp;) {
        struct listing *l = *pp;
        if (strcmp(l->path, "/") == 0 || is_under(l->path, path)) {
            *pp = l->next;
            listing_free(l);
            fs->n_listings--;
        } else {
            pp = &l->next;
        }
    }
}

/* Keep a complete listing (takes `ents`). */
static void listing_put(struct mnt_fs *fs, const char *path, struct dent *ents, size_t n) {
    struct listing *l = calloc(1, sizeof(*l));
    if (!l || !(l->path = strdup(path))) {
        free(l);
        dents_free(ents, n);
        return;
    }
    l->ents = ents;
    l->n = n;
    l->expires = now_mono() + fs->o.metadata_ttl_s;
    for (struct listing **pp = &fs->listings; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->path, path) == 0) {
            struct listing *old = *pp;
            *pp = old->next;
            listing_free(old);
            fs->n_listings--;
            break;
        }
    }
    l->next = fs->listings;
    fs->listings = l;
    if (++fs->n_listings > LISTINGS_MAX) {
        struct listing **pp = &fs->listings;
        while ((*pp)->next)
            pp = &(*pp)->next;
        listing_free(*pp);
        *pp = NULL;
        fs->n_listings--;
    }
}

static void fill_stat(const struct mnt_fs *fs, const struct attr *a, struct stat *st) {
    memset(st, 0, sizeof(*st));
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

struct head_job {
    struct mnt_fs *fs;
    char *key;
    enum s3f_status st;
    struct s3f_object_info info;
    struct s3f_error err;
};

static void *head_job_run(void *arg) {
    struct head_job *j = arg;
    j->st = s3f_head_object(j->fs->c, j->fs->bucket, j->key, NULL, &j->info, &j->err);
    return NULL;
}

/* What `path` is: 0 with *a filled, or -errno (-ENOENT when missing). `fresh`: ignore the
 * metadata cache (O_DIRECT). Sends one LIST and one HEAD, at the same time. */
static int resolve(struct mnt_fs *fs, const char *path, struct attr *a, int fresh) {
    memset(a, 0, sizeof(*a));
    if (strcmp(path, "/") == 0) {
        a->kind = K_DIR;
        return 0;
    }
    pthread_mutex_lock(&fs->mu);
    struct fh *w = writer_find(fs, path);
    if (w) {
        a->kind = K_FILE;
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED); /* a snapshot for stat */
        a->mtime = w->opened;
        pthread_mutex_unlock(&fs->mu);
        return 0;
    }
    if (localdir_find(fs, path) || holds_local(fs, path)) {
        a->kind = K_DIR;
        pthread_mutex_unlock(&fs->mu);
        return 0;
    }
    struct meta *m = fresh ? NULL : meta_find(fs, path);
    if (m && m->expires > now_mono()) {
        a->kind = m->kind;
        a->size = m->size;
        a->mtime = m->mtime;
        memcpy(a->etag, m->etag, sizeof(a->etag));
        pthread_mutex_unlock(&fs->mu);
        return m->kind == K_MISSING ? -ENOENT : 0;
    }
    pthread_mutex_unlock(&fs->mu);

    /* The HEAD of the key runs on a helper thread while this one LISTs key/: one round
     * trip. A directory shadows a file of the same name. */
    struct head_job hj;
    memset(&hj, 0, sizeof(hj));
    hj.fs = fs;
    hj.key = key_of(fs, path, "");
    char *dkey = key_of(fs, path, "/");
    if (!hj.key || !dkey) {
        free(hj.key);
        free(dkey);
        return -ENOMEM;
    }
    s3f_error_clear(&hj.err);
    pthread_t th;
    int threaded = pthread_create(&th, NULL, head_job_run, &hj) == 0;
    if (!threaded)
        head_job_run(&hj);
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_list_options lo = {.prefix = dkey, .max_keys = 1};
    struct s3f_list_page *page = NULL;
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
    free(dkey);
    if (threaded)
        pthread_join(th, NULL);
    free(hj.key);
    if (st != S3F_OK) {
        mnt_log_error("lookup", path, &err);
        return -errno_of(st, 0);
    }
    int is_dir = page->n_objects > 0 || page->n_common_prefixes > 0;
    s3f_list_page_free(page);
    if (is_dir) {
        a->kind = K_DIR;
        meta_set_locked(fs, path, K_DIR, 0, 0, NULL);
        return 0;
    }
    if (hj.st == S3F_ERR_NOT_FOUND) {
        meta_set_locked(fs, path, K_MISSING, 0, 0, NULL);
        return -ENOENT;
    }
    if (hj.st != S3F_OK) {
        mnt_log_error("lookup", path, &hj.err);
        return -errno_of(hj.st, 0);
    }
    a->kind = K_FILE;
    a->size = hj.info.size;
    a->mtime = hj.info.last_modified;
    snprintf(a->etag, sizeof(a->etag), "%s", hj.info.etag);
    meta_set_locked(fs, path, K_FILE, hj.info.size, hj.info.last_modified, hj.info.etag);
    return 0;
}

/* 0 when the parent of `path` is a directory, else -ENOENT / -ENOTDIR / -errno. */
static int parent_ok(struct mnt_fs *fs, const char *path) {
    char parent[PATH_MAX];
    parent_of(path, parent);
    struct attr a;
    int rc = resolve(fs, parent, &a, 0);
    if (rc)
        return rc;
    return a.kind == K_DIR ? 0 : -ENOTDIR;
}

/* ---- operations: attributes -------------------------------------------------------- */

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    struct attr a;
    if (fi && fi->fh) {
        struct fh *h = (struct fh *)(uintptr_t)fi->fh;
        if (h->is_write) {
            memset(&a, 0, sizeof(a));
            a.kind = K_FILE;
            pthread_mutex_lock(&h->mu);
            a.size = h->written;
            pthread_mutex_unlock(&h->mu);
            a.mtime = h->opened;
            fill_stat(fs, &a, st);
            return 0;
        }
        if (h->r) {
            /* the attributes the handle was opened with (the same as lookup's: a changed
             * mtime would make the kernel drop the file's pages) */
            memset(&a, 0, sizeof(a));
            a.kind = K_FILE;
            a.size = h->size;
            a.mtime = h->mtime;
            /* a stale handle (its path overwritten since) too: the kernel asks with the
             * handle before a read past the size it holds, and the reply (good for 0 s
             * while stale handles are open) lets that read reach the handle's version */
            fill_stat(fs, &a, st);
            return 0;
        }
    }
    if (!path)
        return -ENOENT;
    int rc = resolve(fs, path, &a, 0);
    if (rc)
        return rc;
    fill_stat(fs, &a, st);
    return 0;
}

static int op_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    struct attr a;
    int rc = path ? resolve(fs, path, &a, 0) : 0;
    if (rc)
        return rc;
    if (!path)
        a.kind = K_FILE;
    mode_t want = a.kind == K_DIR ? fs->o.dir_mode : fs->o.file_mode;
    return (mode & 07777) == want ? 0 : -EPERM;
}

static int op_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    if ((uid != (uid_t)-1 && uid != fs->o.uid) || (gid != (gid_t)-1 && gid != fs->o.gid))
        return -EPERM;
    return 0;
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    /* fs->mu keeps a listed writer alive while we look at it; h->mu is not taken under it
     * (the lock order is h->mu, then fs->mu), so its fields are read atomically */
    pthread_mutex_lock(&fs->mu);
    struct fh *h = NULL;
    if (fi && fi->fh && ((struct fh *)(uintptr_t)fi->fh)->is_write)
        h = (struct fh *)(uintptr_t)fi->fh;
    else if (path)
        h = writer_find(fs, path);
    int rc = -EPERM;
    if (h && !__atomic_load_n(&h->done, __ATOMIC_RELAXED) && size >= 0 &&
        (uint64_t)size == __atomic_load_n(&h->written, __ATOMIC_RELAXED))
        rc = 0;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

/* Accepted and ignored (times are S3's Last-Modified), so that tar, cp -p and rsync -t
 * do not fail on a time they cannot keep; docs/SEMANTICS.md says so. */
static int op_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    if (fi && fi->fh)
        return 0;
    struct attr a;
    return path ? resolve(fs, path, &a, 0) : 0;
}

/* ---- operations: files ------------------------------------------------------------- */

static void fh_free(struct fh *h) {
    if (!h)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h->path);
    free(h->key);
    free(h);
}

static struct fh *fh_new(struct mnt_fs *fs, const char *path) {
    struct fh *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    h->path = strdup(path);
    h->key = key_of(fs, path, "");
    if (!h->path || !h->key) {
        fh_free(h);
        return NULL;
    }
    return h;
}

/* The process (thread group) of the thread `tid` that FUSE names as the caller, from
 * /proc; `tid` itself when that cannot be read. So that open and close on two threads of
 * one process count as the same process. */
static pid_t process_of(pid_t tid) {
    char name[64], line[256];
    snprintf(name, sizeof(name), "/proc/%d/status", (int)tid);
    FILE *f = fopen(name, "re");
    if (!f)
        return tid;
    pid_t tgid = tid;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Tgid:", 5) == 0) {
            tgid = (pid_t)strtol(line + 5, NULL, 10);
            break;
        }
    }
    fclose(f);
    return tgid > 0 ? tgid : tid;
}

/* The attribute timeouts libfuse gives the kernel: the mount's TTL, or 0 while a stale
 * read handle is open (fs->mu held). */
static void set_attr_timeout(struct mnt_fs *fs) {
    if (!fs->cfg)
        return;
    double t = fs->n_stale ? 0.0 : fs->o.metadata_ttl_s;
    __atomic_store(&fs->cfg->attr_timeout, &t, __ATOMIC_RELAXED);
}

/* A writer replaces `path` in place (fs->mu held): its page-cache read handles are stale.
 * The kernel holds one size per inode; from now on it must ask for it again (with the
 * handle, which gets its own version's size) at each read past it, and stat must see
 * the new file's. */
static void readers_stale(struct mnt_fs *fs, const char *path) {
    for (struct fh *o = fs->readers; o; o = o->rd_next) {
        if (!o->direct && !o->stale && strcmp(o->path, path) == 0) {
            o->stale = 1;
            fs->n_stale++;
        }
    }
    set_attr_timeout(fs);
}

/* Open a write handle on `path` (the checks of create/open done by the caller). */
static int open_writer(struct mnt_fs *fs, const char *path, struct fuse_file_info *fi) {
    struct fh *h = fh_new(fs, path);
    if (!h)
        return -ENOMEM;
    h->is_write = 1;
    h->opener = process_of(fuse_get_context()->pid);
    h->opened = (int64_t)time(NULL);
    pthread_mutex_lock(&fs->mu);
    if (writer_find(fs, path)) {
        pthread_mutex_unlock(&fs->mu);
        fh_free(h);
        return -EBUSY;
    }
    uint64_t need = 2 * fs->part_size;
    if (fs->writer_reserved + need > fs->writer_budget) {
        pthread_mutex_unlock(&fs->mu);
        mnt_log(S3F_LOG_WARN, "open %s for writing: ENOMEM (%llu bytes of write buffers "
                "held by open files, the memory target allows %llu)", path,
                (unsigned long long)fs->writer_reserved, (unsigned long long)fs->writer_budget);
        fh_free(h);
        return -ENOMEM;
    }
    struct s3f_upload_options uo = {.part_size_bytes = fs->o.part_size_bytes};
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_writer_open(fs->cw, fs->bucket, h->key, &uo, &h->w, &err);
    if (st != S3F_OK) {
        pthread_mutex_unlock(&fs->mu);
        mnt_log_error("open for writing", path, &err);
        fh_free(h);
        return -errno_of(st, 0);
    }
    h->reserved = need;
    fs->writer_reserved += need;
    h->listed = 1;
    h->next_writer = fs->writers;
    fs->writers = h;
    readers_stale(fs, path);
    pthread_mutex_unlock(&fs->mu);
    fi->fh = (uint64_t)(uintptr_t)h;
    /* direct_io: the bytes being written never enter the inode's page cache, where a
     * handle still open on the version being replaced would read them */
    fi->direct_io = 1;
    fi->keep_cache = 0;
    return 0;
}

static int op_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    if (!S_ISREG(mode) && (mode & S_IFMT))
        return -ENOTSUP;
    int rc = parent_ok(fs, path);
    if (rc)
        return rc;
    struct attr a;
    rc = resolve(fs, path, &a, 0);
    if (rc == 0) {
        if (a.kind == K_DIR)
            return -EISDIR;
        if (fi->flags & O_EXCL)
            return -EEXIST;
        pthread_mutex_lock(&fs->mu);
        int busy = writer_busy(fs, path);
        pthread_mutex_unlock(&fs->mu);
        if (busy)
            return -EBUSY;
        if (!fs->o.allow_overwrite || !(fi->flags & O_TRUNC))
            return -EPERM;
    } else if (rc != -ENOENT) {
        return rc;
    }
    return open_writer(fs, path, fi);
}

static int op_open(const char *path, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    int acc = fi->flags & O_ACCMODE;
    int trunc = (fi->flags & O_TRUNC) != 0;
    if (acc == O_WRONLY || (acc == O_RDWR && trunc)) {
        if (fs->o.read_only)
            return -EROFS;
        pthread_mutex_lock(&fs->mu);
        int busy = writer_busy(fs, path);
        pthread_mutex_unlock(&fs->mu);
        if (busy)
            return -EBUSY;
        struct attr a;
        int rc = resolve(fs, path, &a, 0);
        if (rc)
            return rc;
        if (a.kind == K_DIR)
            return -EISDIR;
        if (!fs->o.allow_overwrite || !trunc)
            return -EPERM;
        return open_writer(fs, path, fi);
    }
    pthread_mutex_lock(&fs->mu);
    int busy = writer_busy(fs, path);
    pthread_mutex_unlock(&fs->mu);
    if (busy)
        return -EBUSY;
    int direct = (fi->flags & O_DIRECT) != 0;
    struct attr a;
    int rc = resolve(fs, path, &a, direct);
    if (rc)
        return rc;
    if (a.kind == K_DIR)
        return -EISDIR;
    struct fh *h = fh_new(fs, path);
    if (!h)
        return -ENOMEM;
    h->rdwr = acc == O_RDWR;
    h->size = a.size;
    h->mtime = a.mtime;
    struct s3f_reader_options ro = {.known = 1, .known_size = a.size, .known_etag = a.etag};
    if (!a.etag[0])
        ro.known = 0; /* never happens from a listing or HEAD; the reader HEADs */
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_reader_open(fs->c, fs->bucket, h->key, &ro, &h->r, &err);
    if (st != S3F_OK) {
        mnt_log_error("open", path, &err);
        fh_free(h);
        return -errno_of(st, 0);
    }
    const char *etag = s3f_reader_info(h->r)->etag;
    snprintf(h->etag, sizeof(h->etag), "%s", etag);
    int keep = 0;
    pthread_mutex_lock(&fs->mu);
    /* The kernel has one page cache per path (inode). A handle of another version still
     * open on it with the page cache: this one reads around it (direct_io) and leaves its
     * pages alone, so that neither ever reads the other's bytes. */
    int other = 0;
    for (struct fh *o = fs->readers; o && !other; o = o->rd_next)
        other = !o->direct && strcmp(o->path, path) == 0 && strcmp(o->etag, etag) != 0;
    if (other) {
        direct = 1;
        keep = 1;
    } else if (!direct) {
        struct meta *m = meta_get(fs, path);
        if (m) {
            keep = m->open_etag[0] && strcmp(m->open_etag, etag) == 0;
            snprintf(m->open_etag, sizeof(m->open_etag), "%s", etag);
        }
    }
    h->direct = direct;
    pthread_mutex_unlock(&fs->mu);
    fi->keep_cache = keep;
    fi->direct_io = direct;
    fi->fh = (uint64_t)(uintptr_t)h;
    pthread_mutex_lock(&fs->mu);
    h->rd_next = fs->readers;
    if (fs->readers)
        fs->readers->rd_prev = h;
    fs->readers = h;
    pthread_mutex_unlock(&fs->mu);
    return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || h->is_write || !h->r)
        return -EBADF;
    if (off < 0)
        return -EINVAL;
    struct s3f_error err;
    s3f_error_clear(&err);
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    enum s3f_status st = s3f_reader_pread(h->r, buf, size, (uint64_t)off, &n, &err);
    pthread_mutex_unlock(&h->mu);
    if (st != S3F_OK) {
        mnt_log_error("read", h->path, &err);
        return -errno_of(st, 1);
    }
    if (n > INT_MAX)
        n = INT_MAX;
    return (int)n;
}

/* A new object at `path` (fs->mu held): the local directories above it are now prefixes
 * in S3, no longer local. */
static void promote_parents(struct mnt_fs *fs, const char *path) {
    char dir[PATH_MAX];
    parent_of(path, dir);
    while (strcmp(dir, "/") != 0) {
        localdir_remove(fs, dir);
        meta_set(fs, dir, K_DIR, 0, 0, NULL);
        char up[PATH_MAX];
        parent_of(dir, up);
        strcpy(dir, up);
    }
}

/* Complete (or, after a failure, abort) the upload of a write handle; h->mu held. Returns
 * 0 or -errno; the result is kept for later calls. */
static int finish_upload(struct mnt_fs *fs, struct fh *h) {
    if (h->done)
        return h->status;
    __atomic_store_n(&h->done, 1, __ATOMIC_RELAXED);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    if (h->w) {
        struct s3f_error err;
        s3f_error_clear(&err);
        enum s3f_status st = s3f_writer_close(h->w, &info, &err);
        h->w = NULL;
        if (st != S3F_OK) {
            mnt_log_error("upload", h->path, &err);
            h->status = -errno_of(st, 1);
        }
    }
    pthread_mutex_lock(&fs->mu);
    writer_unlist(fs, h);
    listings_drop_above(fs, h->path);
    if (h->status == 0) {
        meta_set(fs, h->path, K_FILE, h->written, (int64_t)time(NULL), info.etag);
        promote_parents(fs, h->path);
    } else {
        struct meta *m = meta_find(fs, h->path);
        if (m)
            m->expires = 0; /* whatever was there before is looked up again */
    }
    pthread_mutex_unlock(&fs->mu);
    return h->status;
}

static int op_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || !h->is_write)
        return -EBADF;
    pthread_mutex_lock(&h->mu);
    int rc;
    if (h->done) {
        rc = h->status ? h->status : -EINVAL; /* failed upload: its errno; completed: EINVAL */
        goto out;
    }
    if (off < 0 || (uint64_t)off != h->written) {
        mnt_log(S3F_LOG_WARN, "write %s at offset %lld: EINVAL (out of order; the next "
                "write must be at %llu)", h->path, (long long)off,
                (unsigned long long)h->written);
        rc = -EINVAL;
        goto out;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_writer_write(h->w, buf, size, &err);
    if (st != S3F_OK) {
        mnt_log_error("write", h->path, &err);
        s3f_writer_abort(h->w);
        h->w = NULL;
        h->status = -errno_of(st, 1);
        rc = h->status;
        struct mnt_fs *fs = FS();
        __atomic_store_n(&h->done, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&fs->mu);
        writer_unlist(fs, h);
        struct meta *m = meta_find(fs, h->path);
        if (m)
            m->expires = 0;
        pthread_mutex_unlock(&fs->mu);
        goto out;
    }
    __atomic_store_n(&h->written, h->written + size, __ATOMIC_RELAXED);
    rc = size > INT_MAX ? INT_MAX : (int)size;
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static int op_flush(const char *path, struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || !h->is_write)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    if (process_of(fuse_get_context()->pid) == h->opener) {
        if (h->written > 0)
            rc = finish_upload(FS(), h);
        else
            __atomic_store_n(&h->closed, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static int op_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || !h->is_write)
        return 0;
    pthread_mutex_lock(&h->mu);
    int rc = finish_upload(FS(), h);
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static int op_release(const char *path, struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h)
        return 0;
    if (h->is_write) {
        pthread_mutex_lock(&h->mu);
        finish_upload(FS(), h);
        pthread_mutex_unlock(&h->mu);
    } else {
        struct mnt_fs *fs = FS();
        pthread_mutex_lock(&fs->mu);
        if (h->rd_prev)
            h->rd_prev->rd_next = h->rd_next;
        else if (fs->readers == h)
            fs->readers = h->rd_next;
        if (h->rd_next)
            h->rd_next->rd_prev = h->rd_prev;
        if (h->stale) {
            fs->n_stale--;
            set_attr_timeout(fs);
        }
        pthread_mutex_unlock(&fs->mu);
        s3f_reader_close(h->r);
        h->r = NULL;
    }
    fh_free(h);
    return 0;
}

/* After the key `path` was deleted: each directory above it that no key, local directory
 * or file being written keeps any more is gone. Its cached attributes are dropped and the
 * kernel's entry of it invalidated (else the kernel would go on showing a directory for
 * --metadata-ttl). Costs one LIST (max-keys 1) per directory checked. The kernel holds
 * the lock of the removed name's directory (unlink), or of both directories (rename), and
 * invalidating an entry takes the lock of the directory holding it: an entry inside
 * `locked` (rename's destination directory, or NULL) is left to the TTL, the daemon's
 * cache is updated all the same. */
static void forget_emptied_parents(struct mnt_fs *fs, const char *path, const char *locked) {
    char dir[PATH_MAX];
    parent_of(path, dir);
    while (strcmp(dir, "/") != 0) {
        pthread_mutex_lock(&fs->mu);
        int kept = localdir_find(fs, dir) || holds_local(fs, dir);
        pthread_mutex_unlock(&fs->mu);
        if (kept)
            return;
        char *dkey = key_of(fs, dir, "/");
        if (!dkey)
            return;
        struct s3f_list_options lo = {.prefix = dkey, .max_keys = 1};
        struct s3f_list_page *page = NULL;
        struct s3f_error err;
        s3f_error_clear(&err);
        enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
        free(dkey);
        if (st != S3F_OK)
            return; /* the TTLs will tell */
        int empty = page->n_objects == 0 && page->n_common_prefixes == 0;
        s3f_list_page_free(page);
        if (!empty)
            return;
        char up[PATH_MAX];
        parent_of(dir, up);
        pthread_mutex_lock(&fs->mu);
        struct meta *m = meta_find(fs, dir);
        if (m)
            m->expires = 0; /* looked up again: missing, or a file it shadowed */
        listings_drop_above(fs, dir);
        pthread_mutex_unlock(&fs->mu);
        /* the kernel's node id of the parent: with use_ino off, libfuse reports it as
         * st_ino (the root is 1) */
        fuse_ino_t parent = FUSE_ROOT_ID;
        if (locked && strcmp(up, locked) == 0) {
            strcpy(dir, up);
            continue;
        }
        if (strcmp(up, "/") != 0) {
            char full[PATH_MAX];
            struct stat sb;
            if ((size_t)snprintf(full, sizeof(full), "%s%s", fs->o.mountpoint, up) >=
                    sizeof(full) || stat(full, &sb) != 0)
                return;
            parent = (fuse_ino_t)sb.st_ino;
        }
        const char *name = strrchr(dir, '/') + 1;
        struct fuse_context *ctx = fuse_get_context();
        if (ctx && ctx->fuse)
            fuse_lowlevel_notify_inval_entry(fuse_get_session(ctx->fuse), parent, name,
                                             strlen(name));
        strcpy(dir, up);
    }
}

static int op_unlink(const char *path) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    if (!fs->o.allow_delete)
        return -EPERM;
    pthread_mutex_lock(&fs->mu);
    int busy = writer_busy(fs, path);
    pthread_mutex_unlock(&fs->mu);
    if (busy)
        return -EBUSY;
    struct attr a;
    int rc = resolve(fs, path, &a, 0);
    if (rc)
        return rc;
    if (a.kind == K_DIR)
        return -EISDIR;
    char *key = key_of(fs, path, "");
    if (!key)
        return -ENOMEM;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_delete_object(fs->cw, fs->bucket, key, &err);
    free(key);
    if (st != S3F_OK) {
        mnt_log_error("unlink", path, &err);
        return -errno_of(st, 0);
    }
    pthread_mutex_lock(&fs->mu);
    meta_set(fs, path, K_MISSING, 0, 0, NULL);
    listings_drop_above(fs, path);
    pthread_mutex_unlock(&fs->mu);
    forget_emptied_parents(fs, path, NULL);
    return 0;
}

static int op_rename(const char *from, const char *to, unsigned int flags) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    if (!fs->o.allow_rename)
        return -EPERM;
    if (flags & RENAME_EXCHANGE)
        return -EINVAL;
    struct attr a, b;
    int rc = resolve(fs, from, &a, 0);
    if (rc)
        return rc;
    if (a.kind == K_DIR)
        return -ENOTSUP;
    pthread_mutex_lock(&fs->mu);
    int busy = writer_busy(fs, from) || writer_busy(fs, to);
    pthread_mutex_unlock(&fs->mu);
    if (busy)
        return -EBUSY;
    rc = resolve(fs, to, &b, 0);
    if (rc == 0) {
        if (b.kind == K_DIR)
            return -EISDIR;
        if (flags & RENAME_NOREPLACE)
            return -EEXIST;
        if (!fs->o.allow_overwrite)
            return -EPERM;
    } else if (rc != -ENOENT) {
        return rc;
    }
    if (strcmp(from, to) == 0)
        return 0;
    char *src = key_of(fs, from, ""), *dst = key_of(fs, to, "");
    if (!src || !dst) {
        free(src);
        free(dst);
        return -ENOMEM;
    }
    struct s3f_copy_options co = {.src_if_match = a.etag[0] ? a.etag : NULL};
    struct s3f_object_info info;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_copy(fs->cw, fs->bucket, src, fs->bucket, dst, &co, &info, &err);
    if (st != S3F_OK) {
        mnt_log_error("rename (copy)", from, &err);
        rc = st == S3F_ERR_NOT_FOUND ? -ENOENT : -errno_of(st, 1);
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    meta_set(fs, to, K_FILE, info.size ? info.size : a.size,
             info.last_modified ? info.last_modified : (int64_t)time(NULL), info.etag);
    promote_parents(fs, to);
    listings_drop_above(fs, to);
    listings_drop_above(fs, from);
    pthread_mutex_unlock(&fs->mu);
    st = s3f_delete_object(fs->cw, fs->bucket, src, &err);
    if (st != S3F_OK) {
        mnt_log_error("rename (delete of the source)", from, &err);
        rc = -EIO;
        goto out;
    }
    meta_set_locked(fs, from, K_MISSING, 0, 0, NULL);
    char to_dir[PATH_MAX];
    parent_of(to, to_dir);
    forget_emptied_parents(fs, from, to_dir);
    rc = 0;
out:
    free(src);
    free(dst);
    return rc;
}

/* ---- operations: directories ------------------------------------------------------- */

static int op_mkdir(const char *path, mode_t mode) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    struct attr a;
    int rc = resolve(fs, path, &a, 0);
    if (rc == 0)
        return -EEXIST;
    if (rc != -ENOENT)
        return rc;
    rc = parent_ok(fs, path);
    if (rc)
        return rc;
    struct localdir *d = calloc(1, sizeof(*d));
    if (!d || !(d->path = strdup(path))) {
        free(d);
        return -ENOMEM;
    }
    pthread_mutex_lock(&fs->mu);
    if (localdir_find(fs, path)) {
        pthread_mutex_unlock(&fs->mu);
        free(d->path);
        free(d);
        return -EEXIST;
    }
    d->next = fs->localdirs;
    fs->localdirs = d;
    struct meta *m = meta_find(fs, path);
    if (m)
        m->expires = 0;
    pthread_mutex_unlock(&fs->mu);
    return 0;
}

static int op_rmdir(const char *path) {
    struct mnt_fs *fs = FS();
    if (fs->o.read_only)
        return -EROFS;
    struct attr a;
    int rc = resolve(fs, path, &a, 0);
    if (rc)
        return rc;
    if (a.kind != K_DIR)
        return -ENOTDIR;
    if (strcmp(path, "/") == 0)
        return -EBUSY;
    pthread_mutex_lock(&fs->mu);
    int local = localdir_find(fs, path) != NULL, busy = 0;
    for (struct localdir *d = fs->localdirs; d && !busy; d = d->next)
        busy = is_under(path, d->path);
    for (struct fh *h = fs->writers; h && !busy; h = h->next_writer)
        busy = is_under(path, h->path);
    pthread_mutex_unlock(&fs->mu);
    if (busy)
        return -ENOTEMPTY;
    char *dkey = key_of(fs, path, "/");
    if (!dkey)
        return -ENOMEM;
    struct s3f_list_options lo = {.prefix = dkey, .max_keys = 2};
    struct s3f_list_page *page = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
    if (st != S3F_OK) {
        free(dkey);
        mnt_log_error("rmdir", path, &err);
        return -errno_of(st, 0);
    }
    int marker = 0, others = 0;
    for (size_t i = 0; i < page->n_objects; i++) {
        if (strcmp(page->objects[i].key, dkey) == 0)
            marker = 1;
        else
            others = 1;
    }
    others |= page->n_common_prefixes > 0;
    s3f_list_page_free(page);
    free(dkey);
    if (others)
        return -ENOTEMPTY;
    if (marker)
        return -EPERM;
    if (!local)
        return -ENOENT;
    pthread_mutex_lock(&fs->mu);
    localdir_remove(fs, path);
    meta_set(fs, path, K_MISSING, 0, 0, NULL);
    listings_drop_above(fs, path);
    pthread_mutex_unlock(&fs->mu);
    return 0;
}

struct dh {
    pthread_mutex_t mu;
    char *path, *dkey;
    struct dent *ents;
    size_t n, cap;
    uint64_t base;        /* global index of ents[0] */
    char *token;
    int started, listing_done, complete;
    int from_cache;       /* served from the listing cache */
    /* every entry of the listing so far, for the listing cache (dropped past the bound) */
    struct dent *all;
    size_t n_all, cap_all;
    int all_over;
    /* files of the last page that a directory of the same name on a later page would
     * shadow (the page ended among names that start with theirs): handed out, or dropped,
     * with the next page */
    struct dent *held;
    size_t n_held, cap_held;
    /* local directories and files being written in this directory, from opendir */
    char **extra;
    int *extra_seen;
    enum kind *extra_kind;
    size_t n_extra;
    struct dh *prev, *next;   /* in fs->dirs */
};

static void dh_reset(struct dh *d) {
    for (size_t i = 0; i < d->n; i++)
        free(d->ents[i].name);
    d->n = 0;
    dents_free(d->all, d->n_all);
    d->all = NULL;
    d->n_all = d->cap_all = 0;
    d->all_over = 0;
    dents_free(d->held, d->n_held);
    d->held = NULL;
    d->n_held = d->cap_held = 0;
    d->from_cache = 0;
    d->base = 0;
    free(d->token);
    d->token = NULL;
    d->started = d->listing_done = d->complete = 0;
    for (size_t i = 0; i < d->n_extra; i++)
        d->extra_seen[i] = 0;
}

static void dh_free(struct dh *d) {
    if (!d)
        return;
    dh_reset(d);
    free(d->ents);
    free(d->all);
    for (size_t i = 0; i < d->n_extra; i++)
        free(d->extra[i]);
    free(d->extra);
    free(d->extra_seen);
    free(d->extra_kind);
    free(d->path);
    free(d->dkey);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Append a copy of `name` with its attributes to a growing array of entries (first
 * allocation `first` entries, doubling; never past `max` entries). -ENOMEM on failure (the
 * array is left as it was). */
static int dents_append(struct dent **v, size_t *n, size_t *cap, size_t first, size_t max,
                        const char *name, size_t len, const struct attr *a) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : first;
        struct dent *e = c > max ? NULL : realloc(*v, c * sizeof(*e));
        if (!e)
            return -ENOMEM;
        *v = e;
        *cap = c;
    }
    char *s = strndup(name, len);
    if (!s)
        return -ENOMEM;
    (*v)[*n].name = s;
    (*v)[*n].a = *a;
    (*n)++;
    return 0;
}

/* Record an entry of the listing for the listing cache (best effort: once an entry cannot
 * be kept, the listing is not cached). */
static void dh_keep(struct dh *d, const char *name, size_t len, const struct attr *a) {
    if (d->all_over)
        return;
    if (dents_append(&d->all, &d->n_all, &d->cap_all, 256, LISTING_MAX_ENTRIES, name, len,
                     a)) {
        dents_free(d->all, d->n_all);
        d->all = NULL;
        d->n_all = d->cap_all = 0;
        d->all_over = 1;
    }
}

static int dh_push(struct dh *d, const char *name, size_t len, const struct attr *a) {
    int rc = dents_append(&d->ents, &d->n, &d->cap, 256, SIZE_MAX, name, len, a);
    if (rc)
        return rc;
    const char *s = d->ents[d->n - 1].name;
    for (size_t i = 0; i < d->n_extra; i++)
        if (!d->extra_seen[i] && strcmp(d->extra[i], s) == 0)
            d->extra_seen[i] = 1;
    return 0;
}

/* Add the name below `dir` that leads to `path` to d->extra (once): `kind` when `path` is
 * a child of `dir`, else a directory. */
static void dh_extra(struct dh *d, const char *dir, const char *path, enum kind kind) {
    const char *name = path + (strcmp(dir, "/") == 0 ? 1 : strlen(dir) + 1);
    const char *slash = strchr(name, '/');
    size_t len = slash ? (size_t)(slash - name) : strlen(name);
    for (size_t i = 0; i < d->n_extra; i++)
        if (strlen(d->extra[i]) == len && memcmp(d->extra[i], name, len) == 0)
            return;
    if ((d->extra[d->n_extra] = strndup(name, len)))
        d->extra_kind[d->n_extra++] = slash ? K_DIR : kind;
}

static int op_opendir(const char *path, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    struct attr a;
    int rc = resolve(fs, path, &a, 0);
    if (rc)
        return rc;
    if (a.kind != K_DIR)
        return -ENOTDIR;
    struct dh *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    pthread_mutex_init(&d->mu, NULL);
    d->path = strdup(path);
    d->dkey = dir_key_of(fs, path);
    if (!d->path || !d->dkey)
        goto nomem;
    pthread_mutex_lock(&fs->mu);
    size_t n = 0;
    for (struct localdir *l = fs->localdirs; l; l = l->next)
        n += is_under(path, l->path);
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        n += is_under(path, h->path);
    d->extra = calloc(n + 1, sizeof(*d->extra));
    d->extra_seen = calloc(n + 1, sizeof(*d->extra_seen));
    d->extra_kind = calloc(n + 1, sizeof(*d->extra_kind));
    if (d->extra && d->extra_seen && d->extra_kind) {
        /* local directories and files being written, and the directories that hold them
         * deeper down (they exist whatever S3 lists: their keys may all be gone) */
        for (struct localdir *l = fs->localdirs; l; l = l->next)
            if (is_under(path, l->path))
                dh_extra(d, path, l->path, K_DIR);
        for (struct fh *h = fs->writers; h; h = h->next_writer)
            if (is_under(path, h->path))
                dh_extra(d, path, h->path, K_FILE);
    }
    int cached_rc = 0;
    if (d->extra && d->extra_seen && d->extra_kind) {
        for (struct listing *l = fs->listings; l; l = l->next) {
            if (strcmp(l->path, path) != 0)
                continue;
            if (l->expires > now_mono()) {
                for (size_t i = 0; i < l->n && cached_rc == 0; i++)
                    cached_rc = dh_push(d, l->ents[i].name, strlen(l->ents[i].name),
                                        &l->ents[i].a);
                d->started = d->listing_done = d->from_cache = 1;
            }
            break;
        }
    }
    pthread_mutex_unlock(&fs->mu);
    if (!d->extra || !d->extra_seen || !d->extra_kind || cached_rc)
        goto nomem;
    fi->fh = (uint64_t)(uintptr_t)d;
    pthread_mutex_lock(&fs->mu);
    d->next = fs->dirs;
    if (fs->dirs)
        fs->dirs->prev = d;
    fs->dirs = d;
    pthread_mutex_unlock(&fs->mu);
    return 0;
nomem:
    dh_free(d);
    return -ENOMEM;
}

static int op_releasedir(const char *path, struct fuse_file_info *fi) {
    struct mnt_fs *fs = FS();
    struct dh *d = (struct dh *)(uintptr_t)fi->fh;
    if (!d)
        return 0;
    pthread_mutex_lock(&fs->mu);
    if (d->prev)
        d->prev->next = d->next;
    else if (fs->dirs == d)
        fs->dirs = d->next;
    if (d->next)
        d->next->prev = d->prev;
    pthread_mutex_unlock(&fs->mu);
    dh_free(d);
    return 0;
}

/* Hand out the file `name` of a listing (fs->mu held): to the caller, to the listing
 * cache and to the metadata cache; a file being written there shows its bytes so far. */
static int dh_emit_file(struct mnt_fs *fs, struct dh *d, const char *name, size_t len,
                        struct attr *a) {
    dh_keep(d, name, len, a);
    char *cp = child_path(d->path, name, len);
    struct fh *w = cp ? writer_find(fs, cp) : NULL;
    if (w) {
        /* being overwritten: the kernel gets the new file's size so far */
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
        a->mtime = w->opened;
        a->etag[0] = 0;
    } else if (cp) {
        meta_set(fs, cp, K_FILE, a->size, a->mtime, a->etag);
    }
    free(cp);
    return dh_push(d, name, len, a);
}

static int dh_hold(struct dh *d, const char *name, size_t len, const struct attr *a) {
    return dents_append(&d->held, &d->n_held, &d->cap_held, 8, SIZE_MAX, name, len, a);
}

/* Does the page list the directory `name` (key dkey + name + "/")? */
static int page_has_dir(const struct s3f_list_page *page, size_t lk, const char *name,
                        size_t len) {
    for (size_t j = 0; j < page->n_common_prefixes; j++) {
        const char *p = page->common_prefixes[j] + lk;
        if (strncmp(p, name, len) == 0 && p[len] == '/' && !p[len + 1])
            return 1;
    }
    return 0;
}

/* Fetch the next LIST page into d->ents (dropping the previous page). 0 or -errno. */
static int dh_fetch(struct mnt_fs *fs, struct dh *d) {
    for (size_t i = 0; i < d->n; i++)
        free(d->ents[i].name);
    d->base += d->n;
    d->n = 0;
    struct s3f_list_options lo = {.prefix = d->dkey, .delimiter = "/",
                                  .continuation_token = d->token,
                                  .max_keys = fs->o.page_size};
    struct s3f_list_page *page = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
    if (st != S3F_OK) {
        mnt_log_error("readdir", d->path, &err);
        return st == S3F_ERR_NOT_FOUND ? -EIO : -errno_of(st, 0);
    }
    d->started = 1;
    size_t lk = strlen(d->dkey);
    size_t io = 0, ip = 0;
    int rc = 0;
    /* the page's last name (keys and prefixes in S3's order): a file whose name starts it
     * may still meet its directory on the next page (only names that start with the
     * file's sort between "name" and "name/") */
    const char *last = NULL;
    if (page->is_truncated && page->next_continuation_token) {
        const char *lo_ = page->n_objects ? page->objects[page->n_objects - 1].key : NULL;
        const char *lp_ = page->n_common_prefixes ?
            page->common_prefixes[page->n_common_prefixes - 1] : NULL;
        last = !lo_ ? lp_ : !lp_ ? lo_ : strcmp(lo_, lp_) > 0 ? lo_ : lp_;
        if (last && strlen(last) >= lk)
            last += lk;
        else
            last = NULL;
    }
    pthread_mutex_lock(&fs->mu);
    size_t n_prev = d->n_held;
    struct dent *prev = d->held;
    d->held = NULL;
    d->n_held = d->cap_held = 0;
    for (size_t i = 0; i < n_prev; i++) {
        struct dent *e = &prev[i];
        size_t len = strlen(e->name);
        if (rc || page_has_dir(page, lk, e->name, len))
            continue; /* shadowed by its directory */
        if (last && strncmp(last, e->name, len) == 0)
            rc = dh_hold(d, e->name, len, &e->a);
        else
            rc = dh_emit_file(fs, d, e->name, len, &e->a);
    }
    dents_free(prev, n_prev);
    while (rc == 0 && (io < page->n_objects || ip < page->n_common_prefixes)) {
        const char *ok = io < page->n_objects ? page->objects[io].key : NULL;
        const char *pk = ip < page->n_common_prefixes ? page->common_prefixes[ip] : NULL;
        int take_obj = ok && (!pk || strcmp(ok, pk) < 0);
        struct attr a;
        memset(&a, 0, sizeof(a));
        if (take_obj) {
            const struct s3f_list_entry *e = &page->objects[io++];
            if (strlen(e->key) <= lk)
                continue; /* the directory's own marker */
            const char *name = e->key + lk;
            size_t len = strlen(name);
            if (!valid_name(name, len))
                continue;
            if (page_has_dir(page, lk, name, len))
                continue; /* a directory of the same name on this page shadows it */
            a.kind = K_FILE;
            a.size = e->size;
            a.mtime = e->last_modified;
            snprintf(a.etag, sizeof(a.etag), "%s", e->etag ? e->etag : "");
            if (last && strncmp(last, name, len) == 0)
                rc = dh_hold(d, name, len, &a); /* its directory may be on the next page */
            else
                rc = dh_emit_file(fs, d, name, len, &a);
        } else {
            const char *name = pk + lk;
            ip++;
            size_t len = strlen(name);
            if (len == 0)
                continue;
            len--; /* the trailing '/' */
            if (!valid_name(name, len))
                continue;
            a.kind = K_DIR;
            rc = dh_push(d, name, len, &a);
            dh_keep(d, name, len, &a);
            char *cp = child_path(d->path, name, len);
            if (cp)
                meta_set(fs, cp, K_DIR, 0, 0, NULL);
            free(cp);
        }
    }
    pthread_mutex_unlock(&fs->mu);
    free(d->token);
    d->token = NULL;
    if (page->is_truncated && page->next_continuation_token) {
        d->token = strdup(page->next_continuation_token);
        if (!d->token)
            rc = -ENOMEM;
    } else {
        d->listing_done = 1;
        if (rc == 0 && !d->all_over && fs->o.metadata_ttl_s > 0) {
            pthread_mutex_lock(&fs->mu);
            listing_put(fs, d->path, d->all, d->n_all);
            pthread_mutex_unlock(&fs->mu);
            d->all = NULL;
            d->n_all = d->cap_all = 0;
        }
    }
    s3f_list_page_free(page);
    return rc;
}

/* The attributes of the file being written at dir/name, if one is (takes fs->mu). */
static void writer_attr(struct mnt_fs *fs, const char *dir, const char *name, size_t len,
                        struct attr *a) {
    char *cp = child_path(dir, name, len);
    if (!cp)
        return;
    pthread_mutex_lock(&fs->mu);
    struct fh *w = writer_find(fs, cp);
    if (w) {
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
        a->mtime = w->opened;
    }
    pthread_mutex_unlock(&fs->mu);
    free(cp);
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t offset,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    struct mnt_fs *fs = FS();
    struct dh *d = (struct dh *)(uintptr_t)fi->fh;
    if (!d)
        return -EBADF;
    struct stat st;
    struct attr da = {.kind = K_DIR};
    int rc = 0;
    pthread_mutex_lock(&d->mu);
    if (offset == 0) {
        fill_stat(fs, &da, &st);
        st.st_ino = 1; /* libfuse passes "." and ".." through: an inode 0 is skipped by readdir(3) */
        if (filler(buf, ".", &st, 1, FUSE_FILL_DIR_PLUS))
            goto out;
        offset = 1;
    }
    if (offset == 1) {
        fill_stat(fs, &da, &st);
        st.st_ino = 1;
        if (filler(buf, "..", &st, 2, FUSE_FILL_DIR_PLUS))
            goto out;
        offset = 2;
    }
    uint64_t g = (uint64_t)offset - 2;
    if ((g < d->base || (g == 0 && d->started)) && !(d->from_cache && d->base == 0))
        dh_reset(d);
    int emitted = 0;
    for (;;) {
        while (g < d->base + d->n) {
            const struct dent *e = &d->ents[g - d->base];
            fill_stat(fs, &e->a, &st);
            if (filler(buf, e->name, &st, (off_t)(g + 3), FUSE_FILL_DIR_PLUS))
                goto out;
            emitted = 1;
            g++;
        }
        if (d->complete)
            break;
        if (d->listing_done) {
            for (size_t i = 0; i < d->n; i++)
                free(d->ents[i].name);
            d->base += d->n;
            d->n = 0;
            for (size_t i = 0; i < d->n_extra && rc == 0; i++) {
                if (d->extra_seen[i])
                    continue;
                struct attr a = {.kind = d->extra_kind[i], .mtime = (int64_t)time(NULL)};
                if (a.kind == K_FILE)
                    writer_attr(fs, d->path, d->extra[i], strlen(d->extra[i]), &a);
                rc = dh_push(d, d->extra[i], strlen(d->extra[i]), &a);
            }
            d->complete = 1;
            if (rc)
                break;
            continue;
        }
        if (emitted)
            break; /* hand what we have to the caller before the next page */
        rc = dh_fetch(fs, d);
        if (rc)
            break;
    }
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static int op_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) { return 0; }

/* ---- operations: the rest ---------------------------------------------------------- */

static int op_statfs(const char *path, struct statvfs *sv) {
    memset(sv, 0, sizeof(*sv));
    sv->f_bsize = 1 << 20;
    sv->f_frsize = 1 << 20;
    sv->f_blocks = sv->f_bfree = sv->f_bavail = (fsblkcnt_t)1 << 40;
    sv->f_files = sv->f_ffree = sv->f_favail = (fsfilcnt_t)1 << 40;
    sv->f_namemax = NAME_MAX_BYTES;
    return 0;
}

static int op_notsup(void) { return -ENOTSUP; }
static int op_symlink(const char *a, const char *b) { return op_notsup(); }
static int op_link(const char *a, const char *b) { return op_notsup(); }
static int op_readlink(const char *p, char *b, size_t n) { return -EINVAL; }
static int op_mknod(const char *p, mode_t m, dev_t d) {
    return FS()->o.read_only ? -EROFS : op_notsup();
}
static int op_setxattr(const char *p, const char *n, const char *v, size_t s, int f) {
    return op_notsup();
}
static int op_getxattr(const char *p, const char *n, char *v, size_t s) { return op_notsup(); }
static int op_listxattr(const char *p, char *l, size_t s) { return op_notsup(); }
static int op_removexattr(const char *p, const char *n) { return op_notsup(); }
static int op_lock(const char *p, struct fuse_file_info *fi, int cmd, struct flock *l) {
    return op_notsup();
}
static int op_flock(const char *p, struct fuse_file_info *fi, int op) { return op_notsup(); }
static int op_fallocate(const char *p, int mode, off_t off, off_t len,
                        struct fuse_file_info *fi) {
    return -EOPNOTSUPP;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    struct mnt_fs *fs = fuse_get_context()->private_data;
    cfg->entry_timeout = fs->o.metadata_ttl_s;
    cfg->attr_timeout = fs->o.metadata_ttl_s;
    fs->cfg = cfg; /* libfuse's own (struct fuse's conf), read at each reply */
    cfg->negative_timeout = fs->o.negative_ttl_s;
    cfg->hard_remove = 1;     /* unlink of an open file deletes, no .fuse_hidden rename */
    cfg->nullpath_ok = 1;     /* handles work without a path (their key is in fh) */
    cfg->use_ino = 0;
    cfg->kernel_cache = 0;
    cfg->auto_cache = 0;
    /* Reads of one handle arrive in order (the reader's window sees them sequential). */
    conn->want &= ~FUSE_CAP_ASYNC_READ;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->max_write = 1u << 20;
    conn->max_readahead = 1u << 20;
    return fs;
}

const struct fuse_operations mnt_fs_ops = {
    .getattr = op_getattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .chmod = op_chmod,
    .chown = op_chown,
    .truncate = op_truncate,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .statfs = op_statfs,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .init = op_init,
    .create = op_create,
    .lock = op_lock,
    .utimens = op_utimens,
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
    fs->bucket = strdup(opts->bucket);
    fs->prefix = strdup(opts->prefix ? opts->prefix : "");
    fs->meta = calloc(META_BUCKETS, sizeof(*fs->meta));
    if (!fs->bucket || !fs->prefix || !fs->meta) {
        free(fs->bucket);
        free(fs->prefix);
        free(fs->meta);
        free(fs);
        return NULL;
    }
    pthread_mutex_init(&fs->mu, NULL);
    pthread_cond_init(&fs->released, NULL);
    fs->start_time = (int64_t)time(NULL);
    struct s3f_client_stats cs;
    s3f_client_stats(wclient, &cs, 0);
    fs->part_size = opts->part_size_bytes ? opts->part_size_bytes : cs.part_size_bytes;
    fs->writer_budget = cs.pool_limit_bytes;
    return fs;
}

void mnt_fs_free(struct mnt_fs *fs) {
    if (!fs)
        return;
    pthread_mutex_lock(&fs->mu);
    size_t aborted = 0;
    /* The session has ended: no operation runs or will run on these handles. */
    while (fs->writers) {
        struct fh *h = fs->writers;
        fs->writers = h->next_writer;
        s3f_writer_abort(h->w); /* the daemon is ending: no half-written object */
        fh_free(h);
        aborted++;
    }
    pthread_mutex_unlock(&fs->mu);
    while (fs->readers) {
        struct fh *h = fs->readers;
        fs->readers = h->rd_next;
        s3f_reader_close(h->r);
        fh_free(h);
    }
    while (fs->dirs) {
        struct dh *d = fs->dirs;
        fs->dirs = d->next;
        dh_free(d);
    }
    if (aborted)
        mnt_log(S3F_LOG_WARN, "unmounted with %zu file(s) still open for writing: their "
                "uploads were aborted (no object created)", aborted);
    meta_clear(fs);
    while (fs->listings) {
        struct listing *l = fs->listings;
        fs->listings = l->next;
        listing_free(l);
    }
    while (fs->localdirs) {
        struct localdir *d = fs->localdirs;
        fs->localdirs = d->next;
        free(d->path);
        free(d);
    }
    free(fs->meta);
    free(fs->bucket);
    free(fs->prefix);
    pthread_cond_destroy(&fs->released);
    pthread_mutex_destroy(&fs->mu);
    free(fs);
}
