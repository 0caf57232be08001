/*
 * Writes and uploads: create, open for writing, write, flush, fsync, release.
 *
 * Invariants:
 * - At most one writer per path (fs->writers, fs->mu); a path being written resolves to
 *   the writer's attributes (its bytes so far), never to S3's object.
 * - A writer opens only on the inode its path resolves to now (in->current, same path),
 *   never on one a rename moved there and the kernel has not looked up under it since
 *   (in->moved) nor one the name let go of: those opens are answered ESTALE (create:
 *   EBUSY), so a write reaches the object of the name the kernel looked up, and the
 *   name's current inode is the one written. Such an ESTALE's retry is not refused again:
 *   its name is pinned from its lookup until its OPEN is answered (no unlink, rename or
 *   create of it meanwhile), and that lookup hands out no inode a page-cache reader
 *   holds (fs.c, guard.c).
 * - A writer never opens on an inode a handle reads through the page cache (that open is
 *   answered ESTALE, the name lets go of the inode): checked under the fs->mu section
 *   that lists the writer, as a read open checks for a writer under the one that lists
 *   the reader (read.c), so one of the two always sees the other.
 * - create makes a new inode (the new version) current for the path: handles of the
 *   version it replaces keep theirs. An overwrite in place (OPEN with O_TRUNC of an inode
 *   the kernel holds) writes on that inode; its read handles become stale (read.c).
 * - Writers never use the page cache (direct_io): their bytes reach the inode's pages
 *   only as the object they became, read back.
 * - Every open writer holds 2 x part size of the writers' pool (writer_reserved <=
 *   writer_budget), returned when its upload completes or fails.
 * - A handle's fields are changed under its mutex (fh->mu, taken before fs->mu); `done`
 *   and `written` are also read atomically by others under fs->mu.
 * - An append handle (--incremental-upload, directory buckets) has no s3f_writer: its
 *   bytes are buffered (at most part_size) and appended with s3f_append_object at offset
 *   apos, the object's size seen at open plus what this handle appended (a concurrent
 *   append elsewhere makes the next one fail: InvalidWriteOffset, EIO). written = apos +
 *   alen.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

struct fh *mnt_writer_find(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        if (strcmp(h->path, path) == 0)
            return h;
    return NULL;
}

static void writer_unlist(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_HELD(&fs->mu);
    enum fh_state s = fh_state(h);
    if (!fh_listed(s))
        return;
    for (struct fh **pp = &fs->writers; *pp; pp = &(*pp)->next_writer) {
        if (*pp == h) {
            *pp = h->next_writer;
            break;
        }
    }
    mnt_fh_set_state(h, fh_done(s) ? FH_DONE : FH_ABANDONED);
    fs->writer_reserved -= h->reserved;
    h->reserved = 0;
    pthread_cond_broadcast(&fs->released);
}

/* A writer's upload ends (h->mu held): done from now on, its result in h->status; still
 * listed until writer_unlist. */
static void writer_end(struct fh *h) {
    S3F_ASSERT_HELD(&h->mu);
    mnt_fh_set_state(h, fh_state(h) == FH_CLOSED ? FH_ENDING_CLOSED : FH_ENDING);
}

/* Is `path` being written (fs->mu held)? A file its opener has closed but whose upload
 * completes at release (an empty one: the kernel sends release just after close returns)
 * is waited for, up to 5 s, so that a rename or open right after close (rsync's temporary
 * file) finds the object. */
int mnt_writer_busy(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    struct timespec until = mnt_deadline(5);
    for (;;) {
        struct fh *h = mnt_writer_find(fs, path);
        if (!h)
            return 0;
        enum fh_state s = fh_state(h);
        if ((s != FH_CLOSED && s != FH_ENDING_CLOSED) ||
            __atomic_load_n(&h->written, __ATOMIC_RELAXED) > 0)
            return 1; /* open, or written since by another process holding it */
        if (pthread_cond_timedwait(&fs->released, &fs->mu, &until) == ETIMEDOUT)
            return mnt_writer_find(fs, path) != NULL;
    }
}

/* The process (thread group) of the thread `tid` that FUSE names as the caller, from
 * /proc (not inside the mount); `tid` itself when that cannot be read. 0 for 0: FUSE
 * names no thread for a caller outside the daemon's PID namespace, and such a caller is
 * no process in particular (it is never taken for a writer's opener). */
static pid_t process_of(pid_t tid) {
    if (tid <= 0)
        return 0;
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

/* Open a write handle on `path` for inode `in` (whose nopen reference the handle takes
 * over on success; `existing`: an OPEN of an inode the kernel held, not create's new
 * one). The checks of create/open are the caller's. 0 or -errno; the caller replies. */
static int writer_open(fuse_req_t req, struct mnt_fs *fs, struct inode *in, const char *path,
                       const struct attr *append, int existing, struct fuse_file_info *fi) {
    struct fh *h = mnt_fh_new(fs, NULL, path);
    if (!h)
        return -ENOMEM;
    h->is_write = 1;
    h->opener = process_of(fuse_req_ctx(req)->pid);
    h->opened = (int64_t)time(NULL);
    pthread_mutex_lock(&fs->mu);
    if (mnt_writer_find(fs, path)) {
        pthread_mutex_unlock(&fs->mu);
        mnt_fh_free(fs, h);
        return -EBUSY;
    }
    /* an inode is one version: while a reader reads this one through the page cache, the
     * overwrite gets a new inode. The path lets go of this one and the VFS, told ESTALE,
     * looks the name up again (a new inode) and opens that; read opens of the name are
     * EBUSY until then. Checked under the lock that lists this writer (as a reader's open
     * checks for a writer under the lock that lists it, read.c): a reader listed between
     * a check made earlier and this writer kept the page cache of an inode cut in place
     * (a read of 0 bytes). */
    if (existing && mnt_read_cached(fs, in)) {
        if (in->current && strcmp(in->path, path) == 0)
            mnt_inode_detach(fs, path); /* not freed: the caller holds it (nopen) */
        mnt_overwrite_pending(fs, in, path, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&fs->mu);
        mnt_fh_free(fs, h);
        return -ESTALE;
    }
    if (mnt_renaming(fs, path)) {
        pthread_mutex_unlock(&fs->mu);
        mnt_fh_free(fs, h);
        return -EBUSY;
    }
    if (!in->current || in->moved || strcmp(in->path, path) != 0) {
        /* not the name's inode now (an unlink, a rename over it, a reader's ESTALE
         * above let go of it: the kernel may even hold it under another name since a
         * rename), or moved to the name by a rename and not looked up under it since
         * (the kernel's lookup may be of the source name): the open would write the
         * object of another name, or an inode the name does not resolve to. The VFS,
         * told ESTALE, looks the name up again (which takes a moved inode as the
         * name's: mnt_inode_get) and opens what it finds (create makes it EBUSY); read
         * opens meanwhile are EBUSY, so the retry meets no new reader that would refuse
         * it again (read.c, meta.c). */
        if (existing) /* create answers EBUSY instead: no retry comes */
            mnt_overwrite_pending(fs, in, path, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&fs->mu);
        mnt_fh_free(fs, h);
        return -ESTALE;
    }
    uint64_t need = 2 * fs->part_size;
    if (fs->writer_reserved + need > fs->writer_budget) {
        uint64_t held = fs->writer_reserved;
        pthread_mutex_unlock(&fs->mu);
        mnt_log(S3F_LOG_WARN, "open %s for writing: ENOMEM (%llu bytes of write buffers "
                "held by open files, the memory target allows %llu)", path,
                (unsigned long long)held, (unsigned long long)fs->writer_budget);
        mnt_fh_free(fs, h);
        return -ENOMEM;
    }
    struct s3f_upload_options uo = {
        .part_size_bytes = fs->o.part_size_bytes,
        .content_type = fs->o.infer_content_type ? mnt_content_type(h->key) : NULL};
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    if (append) {
        h->append = 1;
        h->apos = h->written = append->size;
        snprintf(h->etag, sizeof(h->etag), "%s", append->etag);
    } else {
        st = s3f_writer_open(fs->cw, fs->bucket, h->key, &uo, &h->w, &err);
    }
    if (st != S3F_OK) {
        pthread_mutex_unlock(&fs->mu);
        mnt_log_error("open for writing", path, &err);
        mnt_fh_free(fs, h);
        return -mnt_errno_of(st, 0);
    }
    h->in = in;
    h->reserved = need;
    fs->writer_reserved += need;
    mnt_fh_set_state(h, FH_WRITING);
    h->next_writer = fs->writers;
    fs->writers = h;
    /* the inode is being written: its open readers hold a version being replaced */
    for (struct fh *o = fs->readers; o; o = o->rd_next) {
        if (o->in == in && !o->direct && fh_state(o) == FH_READING) {
            mnt_fh_set_state(o, FH_STALE);
            in->n_stale++;
        }
    }
    h->in_place = !append && in->a.etag[0] != 0;
    h->prev = in->a;
    in->a.kind = K_FILE;
    in->a.size = h->written;
    in->a.mtime = h->opened;
    in->a.etag[0] = 0;
    in->open_etag[0] = 0;
    mnt_meta_expire(fs, path);
    pthread_mutex_unlock(&fs->mu);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;
    fi->keep_cache = 0;
    return 0;
}

/* The upload of `h` failed (fs->mu held): the name is looked up again, and an inode that
 * was being overwritten in place is its old version again, in the kernel too (which
 * truncated it at the open). Returns the invalidation to wait for when `wait` (or NULL). */
static struct note *upload_failed(struct mnt_fs *fs, struct fh *h, int wait) {
    S3F_ASSERT_HELD(&fs->mu);
    writer_unlist(fs, h);
    mnt_meta_expire(fs, h->path);
    if (!h->in || !h->in_place)
        return NULL;
    h->in->a = h->prev;
    return mnt_notify_inode(fs, h->in, wait);
}

/* A writer whose open never reached the caller: no object. */
static void writer_abandon(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    s3f_writer_abort(h->w);
    h->w = NULL;
    pthread_mutex_lock(&fs->mu);
    upload_failed(fs, h, 0);
    pthread_mutex_unlock(&fs->mu);
    mnt_fh_free(fs, h);
}

int mnt_open_writer(fuse_req_t req, struct mnt_fs *fs, struct inode *in, const char *path,
                    const struct attr *append, struct fuse_file_info *fi) {
    int rc = writer_open(req, fs, in, path, append, 1, fi);
    if (rc)
        return rc;
    if (fuse_reply_open(req, fi) != 0)
        writer_abandon(fs, (struct fh *)(uintptr_t)fi->fh);
    return 0;
}

void mnt_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                   struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    if (fs->o.read_only) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (!S_ISREG(mode) && (mode & S_IFMT)) {
        fuse_reply_err(req, ENOTSUP);
        return;
    }
    pthread_mutex_lock(&fs->mu);
    mnt_overwrite_retried(fs, fuse_req_ctx(req)->pid); /* if this is one (read.c) */
    pthread_mutex_unlock(&fs->mu);
    char *path = mnt_req_path_at(req, fs, parent, name);
    if (!path)
        return;
    struct attr a;
    int rc = mnt_parent_ok(fs, path);
    if (rc == 0) {
        rc = mnt_resolve(fs, path, &a, 0);
        if (rc == 0) {
            pthread_mutex_lock(&fs->mu);
            int busy = a.kind != K_DIR && !(fi->flags & O_EXCL) &&
                       (mnt_writer_busy(fs, path) ||
                        mnt_overwrite_pinned(fs, path, fuse_req_ctx(req)->pid));
            pthread_mutex_unlock(&fs->mu);
            rc = a.kind == K_DIR ? -EISDIR
                 : (fi->flags & O_EXCL) ? -EEXIST
                 : busy ? -EBUSY
                 : (!fs->o.allow_overwrite || !(fi->flags & O_TRUNC)) ? -EPERM : 0;
        } else if (rc == -ENOENT) {
            rc = 0;
        }
    }
    struct inode *in = NULL;
    if (rc == 0) {
        /* a new inode: handles of a version this one replaces keep theirs */
        struct attr wa = {.kind = K_FILE, .mtime = (int64_t)time(NULL)};
        pthread_mutex_lock(&fs->mu);
        in = mnt_inode_replace(fs, path, &wa);
        if (in)
            in->nopen++;
        pthread_mutex_unlock(&fs->mu);
        rc = in ? writer_open(req, fs, in, path, NULL, 0, fi) : -ENOMEM;
        if (rc == -ESTALE)
            rc = -EBUSY; /* a rename or unlink of the name took it since the replace */
        if (rc && in) {
            pthread_mutex_lock(&fs->mu);
            mnt_inode_unref(fs, in, 0, 1);
            pthread_mutex_unlock(&fs->mu);
        }
    }
    if (rc) {
        fuse_reply_err(req, -rc);
        free(path);
        return;
    }
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof(ep));
    pthread_mutex_lock(&fs->mu);
    in->nlookup++;
    ep.ino = in->ino;
    mnt_fill_stat(fs, &in->a, in->ino, &ep.attr);
    pthread_mutex_unlock(&fs->mu);
    ep.attr_timeout = ep.entry_timeout = fs->o.metadata_ttl_s;
    if (fuse_reply_create(req, &ep, fi) != 0) {
        pthread_mutex_lock(&fs->mu);
        mnt_inode_unref(fs, in, 1, 0);
        pthread_mutex_unlock(&fs->mu);
        writer_abandon(fs, (struct fh *)(uintptr_t)fi->fh);
    }
    free(path);
}

/* Append `len` bytes to the object of an append handle at h->apos (h->mu held). 0 or
 * -errno (logged; the object keeps what was appended before). */
static int append_send(struct mnt_fs *fs, struct fh *h, const void *data, size_t len) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    S3F_ASSERT_HELD(&h->mu);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_append_object(fs->cw, fs->bucket, h->key, h->apos, data, len,
                                           &info, &err);
    if (st != S3F_OK) {
        mnt_log_error("append", h->path, &err);
        return -mnt_errno_of(st, 1);
    }
    h->apos += len;
    if (info.etag[0])
        snprintf(h->etag, sizeof(h->etag), "%s", info.etag);
    return 0;
}

/* An append handle's failure (h->mu held): later writes get `rc`. */
static int append_failed(struct mnt_fs *fs, struct fh *h, int rc) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    S3F_ASSERT_HELD(&h->mu);
    h->status = rc;
    h->alen = 0;
    writer_end(h);
    pthread_mutex_lock(&fs->mu);
    mnt_notify_wait(fs, upload_failed(fs, h, 1));
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

/* Append what the handle buffered (flush, fsync; h->mu held). 0 or -errno. */
static int append_flush(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_HELD(&h->mu);
    if (fh_done(fh_state(h)))
        return h->status;
    if (h->alen == 0)
        return 0;
    int rc = append_send(fs, h, h->abuf, h->alen);
    if (rc)
        return append_failed(fs, h, rc);
    h->alen = 0;
    return 0;
}

/* Buffer (or append) a write of an append handle (h->mu held). 0 or -errno. */
static int append_write(struct mnt_fs *fs, struct fh *h, const char *buf, size_t size) {
    S3F_ASSERT_HELD(&h->mu);
    size_t cap = fs->part_size;
    if (h->alen && h->alen + size > cap) {
        int rc = append_flush(fs, h);
        if (rc)
            return rc;
    }
    if (size >= cap) { /* a whole part: straight from the caller's buffer */
        int rc = append_send(fs, h, buf, size);
        return rc ? append_failed(fs, h, rc) : 0;
    }
    if (!h->abuf && !(h->abuf = malloc(cap)))
        return -ENOMEM;
    memcpy(h->abuf + h->alen, buf, size);
    h->alen += size;
    return 0;
}

/* Complete (or, after a failure, abort) the upload of a write handle; h->mu held. Returns
 * 0 or -errno; the result is kept for later calls. */
static int finish_upload(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    S3F_ASSERT_HELD(&h->mu);
    if (fh_done(fh_state(h)))
        return h->status;
    if (h->append) {
        int rc = append_flush(fs, h);
        if (rc)
            return rc;
    }
    writer_end(h);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    if (h->append)
        snprintf(info.etag, sizeof(info.etag), "%s", h->etag);
    if (h->w) {
        struct s3f_error err;
        s3f_error_clear(&err);
        enum s3f_status st = s3f_writer_close(h->w, &info, &err);
        h->w = NULL;
        if (st != S3F_OK) {
            mnt_log_error("upload", h->path, &err);
            h->status = -mnt_errno_of(st, 1);
        }
    }
    pthread_mutex_lock(&fs->mu);
    writer_unlist(fs, h);
    if (h->status == 0) {
        int64_t now = (int64_t)time(NULL);
        mnt_meta_change(fs, h->path, K_FILE, h->written, now, info.etag);
        if (h->in) {
            h->in->a.kind = K_FILE;
            h->in->a.size = h->written;
            h->in->a.mtime = now;
            snprintf(h->in->a.etag, sizeof(h->in->a.etag), "%s", info.etag);
        }
        mnt_promote_parents(fs, h->path, NULL, NULL, NULL);
    } else {
        mnt_notify_wait(fs, upload_failed(fs, h, 1));
    }
    pthread_mutex_unlock(&fs->mu);
    return h->status;
}

void mnt_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                  struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || !h->is_write) {
        fuse_reply_err(req, EBADF);
        return;
    }
    pthread_mutex_lock(&h->mu);
    int rc;
    if (fh_done(fh_state(h))) {
        rc = h->status ? h->status : -EINVAL; /* failed upload: its errno; completed: EINVAL */
        goto out;
    }
    if (h->append) {
        /* O_APPEND: every write goes at the end, whatever offset the kernel took from
         * its idea of the size */
        rc = append_write(fs, h, buf, size);
        if (rc == 0)
            __atomic_store_n(&h->written, h->written + size, __ATOMIC_RELAXED);
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
        h->status = -mnt_errno_of(st, 1);
        rc = h->status;
        writer_end(h);
        pthread_mutex_lock(&fs->mu);
        mnt_notify_wait(fs, upload_failed(fs, h, 1));
        pthread_mutex_unlock(&fs->mu);
        goto out;
    }
    __atomic_store_n(&h->written, h->written + size, __ATOMIC_RELAXED);
    rc = 0;
out:
    pthread_mutex_unlock(&h->mu);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
}

void mnt_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    int rc = 0;
    if (h) {
        /* under h->mu even for a reader: release (which takes it) comes after, in the
         * kernel's order, and the sanitizers see it */
        pthread_mutex_lock(&h->mu);
        /* an opener that FUSE could not name (pid 0, another PID namespace) is never
         * this caller: two such processes are not one */
        int opener = h->is_write && h->opener != 0 &&
                     process_of(fuse_req_ctx(req)->pid) == h->opener;
        if (opener && h->append) {
            rc = append_flush(fs, h); /* each close by the opener appends what it wrote */
        } else if (opener) {
            if (h->written > 0)
                rc = finish_upload(fs, h);
            else if (fh_state(h) == FH_WRITING)
                mnt_fh_set_state(h, FH_CLOSED);
        }
        pthread_mutex_unlock(&h->mu);
    }
    fuse_reply_err(req, rc ? -rc : 0);
}

void mnt_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    int rc = 0;
    if (h) {
        pthread_mutex_lock(&h->mu);
        if (h->is_write)
            rc = h->append ? append_flush(fs, h) : finish_upload(fs, h);
        pthread_mutex_unlock(&h->mu);
    }
    fuse_reply_err(req, rc ? -rc : 0);
}

void mnt_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (h && h->is_write) {
        pthread_mutex_lock(&h->mu);
        finish_upload(fs, h);
        pthread_mutex_unlock(&h->mu);
        mnt_fh_free(fs, h);
    } else if (h) {
        mnt_reader_release(fs, h);
    }
    fuse_reply_err(req, 0);
}

void mnt_writers_free(struct mnt_fs *fs) {
    size_t aborted = 0;
    pthread_mutex_lock(&fs->mu);
    struct fh *list = fs->writers;
    fs->writers = NULL;
    pthread_mutex_unlock(&fs->mu);
    /* the session has ended: no operation runs or will run on these handles */
    while (list) {
        struct fh *h = list;
        list = h->next_writer;
        s3f_writer_abort(h->w); /* the daemon is ending: no half-written object */
        h->in = NULL;
        mnt_fh_free(fs, h);
        aborted++;
    }
    if (aborted)
        mnt_log(S3F_LOG_WARN, "unmounted with %zu file(s) still open for writing: their "
                "uploads were aborted (no object created)", aborted);
}
