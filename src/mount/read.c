/*
 * Reads: open for reading, read, and the end of a read handle.
 *
 * Invariants:
 * - A read handle reads one version: the ETag and size of the inode it was opened on
 *   (O_DIRECT: of a fresh lookup), and every GET carries If-Match. An inode is one
 *   version, so its page cache is kept across opens (keep_cache) while that ETag is the
 *   one of the inode's previous open.
 * - The one case where an inode changes version is an overwrite in place (open with
 *   O_TRUNC of a file the kernel already knows: the kernel sends OPEN on that inode, not
 *   CREATE). With a page-cache reader open, that open is answered ESTALE after the path
 *   let go of the inode, so the VFS looks the name up again and writes a new inode. Else
 *   its (O_DIRECT) read handles are stale (fh->stale, inode->n_stale): the inode's
 *   attributes go out with a 0 s timeout while any is open, so the kernel asks again,
 *   with the handle, before a read past the size it holds. An open of another version on
 *   an inode with an open page-cache reader reads around the page cache (direct_io).
 * - A read handle opens only on an inode its name still resolves to (in->current): an
 *   open of one the name let go of is answered ESTALE, so the VFS looks the name up again
 *   (the kernel may hold such an inode under another name since a rename: its path is
 *   no longer the key it stands for); so is one a rename still running moved to a new
 *   name (the open came from the old one).
 * - Each handle has its own s3f_reader, used under its mutex (fh->mu); any number of
 *   handles read at once. Reads are asynchronous (FUSE_CAP_ASYNC_READ): the kernel sends a
 *   file's read-ahead as several requests at once, served one at a time by the handle's
 *   reader, in any order (the reader keeps them one stream). The reply is sent outside
 *   fh->mu, from the worker thread's own buffer. The handle holds a reference on its
 *   inode (nopen).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "fs.h"

struct fh *mnt_fh_new(struct mnt_fs *fs, struct inode *in, const char *path) {
    struct fh *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    h->path = strdup(path);
    h->key = mnt_key_of(fs, path, "");
    if (!h->path || !h->key) {
        free(h->path);
        free(h->key);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    h->in = in;
    return h;
}

void mnt_fh_free(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    if (!h)
        return;
    if (h->in) {
        pthread_mutex_lock(&fs->mu);
        mnt_inode_unref(fs, h->in, 0, 1);
        pthread_mutex_unlock(&fs->mu);
    }
    pthread_mutex_destroy(&h->mu);
    free(h->path);
    free(h->key);
    free(h->abuf);
    free(h->pf_data);
    free(h);
}

static const char *const fh_state_name[] = {
    [FH_NEW] = "new",         [FH_READING] = "reading", [FH_STALE] = "stale",
    [FH_RELEASED] = "released", [FH_WRITING] = "writing", [FH_CLOSED] = "closed",
    [FH_ENDING] = "ending",   [FH_ENDING_CLOSED] = "ending (closed)",
    [FH_DONE] = "done",       [FH_ABANDONED] = "abandoned",
};

void mnt_fh_set_state(struct fh *h, enum fh_state to) {
    /* allowed[from] is the set of states `from` may go to (fs.h's diagram) */
#define S(x) (1u << (x))
    static const unsigned allowed[] = {
        [FH_NEW] = S(FH_READING) | S(FH_WRITING),
        [FH_READING] = S(FH_STALE) | S(FH_RELEASED),
        [FH_STALE] = S(FH_RELEASED),
        [FH_RELEASED] = 0,
        [FH_WRITING] = S(FH_CLOSED) | S(FH_ENDING) | S(FH_ABANDONED),
        [FH_CLOSED] = S(FH_ENDING_CLOSED),
        [FH_ENDING] = S(FH_DONE),
        [FH_ENDING_CLOSED] = S(FH_DONE),
        [FH_DONE] = 0,
        [FH_ABANDONED] = 0,
    };
#undef S
    enum fh_state from = fh_state(h);
    S3F_ASSERT(allowed[from] & (1u << to));
    MNT_TRACE("handle %s (%p): %s -> %s", h->path, (void *)h, fh_state_name[from],
              fh_state_name[to]);
    __atomic_store_n(&h->state, to, __ATOMIC_RELAXED);
}

/* Take a handle's reference on the inode `ino` (NULL when the kernel forgot it). */
static struct inode *inode_open(struct mnt_fs *fs, fuse_ino_t ino, struct attr *a) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, ino);
    if (in) {
        in->nopen++;
        *a = in->a;
    }
    pthread_mutex_unlock(&fs->mu);
    return in;
}

static void reader_unlist(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_HELD(&fs->mu);
    if (h->rd_prev)
        h->rd_prev->rd_next = h->rd_next;
    else if (fs->readers == h)
        fs->readers = h->rd_next;
    if (h->rd_next)
        h->rd_next->rd_prev = h->rd_prev;
    h->rd_prev = h->rd_next = NULL;
    if (fh_state(h) == FH_STALE && h->in && h->in->n_stale)
        h->in->n_stale--;
    mnt_fh_set_state(h, FH_RELEASED);
}

/* mnt_op_open: the errno it answered (0: a handle) */
static int op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    int acc = fi->flags & O_ACCMODE;
    int trunc = (fi->flags & O_TRUNC) != 0;
    int e;
    char *path = mnt_path_of(fs, ino, &e);
    if (!path) {
        fuse_reply_err(req, e);
        return e;
    }
    struct attr ia, a;
    struct inode *in = inode_open(fs, ino, &ia);
    struct fh *h = NULL;
    int rc = 0;
    if (!in) {
        rc = -ENOENT;
        goto out;
    }
    /* an existing object of a directory bucket opened for appending (--incremental-upload) */
    int append = (fi->flags & O_APPEND) && !trunc && acc != O_RDONLY &&
                 fs->o.incremental_upload && fs->directory_bucket;
    int writing = acc == O_WRONLY || (acc == O_RDWR && trunc) || append;
    pthread_mutex_lock(&fs->mu);
    /* a read open of an inode its name let go of (an unlink, a rename over it, a new
     * version, an overwrite's ESTALE below): its path is the name it had, and the kernel
     * may hold it under another name since (a rename moves the kernel's entry, not this
     * inode, which is no name's any more). Reading its path would read another name's
     * key (or none: EIO), and the checks below would be of that name. The VFS, told
     * ESTALE, looks the name up again (the name's inode now) and opens that. Opens for
     * writing are refused the same way in writer_open. So is a read open of an inode a
     * rename still running moved to its path: it came from the old name (the kernel moves
     * its entry once the rename is answered), and the checks below would be of the new
     * one (a read of the source was EBUSY for a write of the target). */
    int let_go = !writing && (!in->current || (in->moved && mnt_renaming(fs, in->path)));
    int busy = !let_go && mnt_writer_busy(fs, path);
    pthread_mutex_unlock(&fs->mu);
    if (let_go) {
        rc = -ESTALE;
        goto out;
    }
    if (busy) {
        rc = -EBUSY;
        goto out;
    }
    if (writing) {
        if (fs->o.read_only)
            rc = -EROFS;
        else if ((rc = mnt_resolve(fs, path, &a, 0)) == 0)
            rc = a.kind == K_DIR ? -EISDIR
                 : append ? 0
                 : (!fs->o.allow_overwrite || !trunc) ? -EPERM : 0;
        else if (rc == -ENOENT)
            rc = -ESTALE; /* unlinked or renamed away since the kernel's lookup: the VFS
                           * walks the path again (an O_CREAT open then creates it) */
        if (rc == -ESTALE) {
            /* read opens are EBUSY until the retry: a rename onto the name may come
             * before it, and a reader of what it brings would refuse the retry */
            pthread_mutex_lock(&fs->mu);
            mnt_overwrite_pending(fs, in, path, fuse_req_ctx(req)->pid);
            pthread_mutex_unlock(&fs->mu);
        }
        if (rc == 0) {
            rc = mnt_open_writer(req, fs, in, path, append ? &a : NULL, fi); /* replies */
            if (rc == 0)
                in = NULL; /* the writer holds the reference */
        }
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    busy = mnt_overwriting(fs, path); /* an overwrite's retry comes (write.c) */
    pthread_mutex_unlock(&fs->mu);
    if (busy) {
        rc = -EBUSY;
        goto out;
    }
    int direct = (fi->flags & O_DIRECT) != 0;
    a = ia;
    if (direct || a.kind != K_FILE || !a.etag[0]) {
        rc = mnt_resolve(fs, path, &a, direct);
        if (rc)
            goto out;
    }
    if (a.kind == K_DIR) {
        rc = -EISDIR;
        goto out;
    }
    h = mnt_fh_new(fs, in, path);
    if (!h) {
        rc = -ENOMEM;
        goto out;
    }
    in = NULL; /* the handle holds the reference */
    h->rdwr = acc == O_RDWR;
    h->size = a.size;
    h->mtime = a.mtime;
    /* random reads of an object that fits fill it in the background (the reader caps the
     * size at half its pool: docs/SEMANTICS.md, "open for reading") */
    struct s3f_reader_options ro = {.known = a.etag[0] != 0, .known_size = a.size,
                                    .known_etag = a.etag, .fill_max_bytes = UINT64_MAX};
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_reader_open(fs->c, fs->bucket, h->key, &ro, &h->r, &err);
    if (st != S3F_OK) {
        mnt_log_error("open", path, &err);
        rc = -mnt_errno_of(st, 0);
        goto out;
    }
    snprintf(h->etag, sizeof(h->etag), "%s", s3f_reader_info(h->r)->etag);
    int pf_hit = mnt_pf_open(fs, path, h->etag, &h->pf_data, &h->pf_len);
    if (pf_hit && h->pf_len != h->size) {
        free(h->pf_data); /* not the size this version has: read it from S3 */
        h->pf_data = NULL;
        pf_hit = 0;
    }
    if (fs->pf)
        mnt_metrics_prefetch(fs, pf_hit);
    int keep = 0;
    pthread_mutex_lock(&fs->mu);
    if (mnt_writer_find(fs, path)) {
        /* a writer opened since the busy check above: it did not see this reader (it
         * would have answered ESTALE), and its O_TRUNC cuts the inode this one reads */
        pthread_mutex_unlock(&fs->mu);
        rc = -EBUSY;
        goto out;
    }
    /* another version open on this inode with the page cache: read around it. So too
     * when the inode's name is being overwritten (the ESTALE came after the check above,
     * or a rename moved this inode to that name since): the overwrite's retry opens the
     * inode its lookup gave, which must hold no page cache that it would cut (write.c) */
    int other = h->in->current && mnt_overwriting(fs, h->in->path);
    for (struct fh *o = fs->readers; o && !other; o = o->rd_next)
        other = o->in == h->in && !o->direct && strcmp(o->etag, h->etag) != 0;
    if (other) {
        direct = 1;
        keep = 1;
    } else if (!direct) {
        keep = h->in->open_etag[0] && strcmp(h->in->open_etag, h->etag) == 0;
        snprintf(h->in->open_etag, sizeof(h->in->open_etag), "%s", h->etag);
    }
    h->direct = direct;
    mnt_fh_set_state(h, FH_READING);
    h->rd_next = fs->readers;
    if (fs->readers)
        fs->readers->rd_prev = h;
    fs->readers = h;
    pthread_mutex_unlock(&fs->mu);
    fi->keep_cache = keep;
    fi->direct_io = direct;
    fi->fh = (uint64_t)(uintptr_t)h;
    if (fuse_reply_open(req, fi) != 0)
        mnt_reader_release(fs, h); /* interrupted: no release will come */
    free(path);
    return 0;
out:
    if (h) {
        s3f_reader_close(h->r);
        mnt_fh_free(fs, h);
    }
    if (in) {
        pthread_mutex_lock(&fs->mu);
        mnt_inode_unref(fs, in, 0, 1);
        pthread_mutex_unlock(&fs->mu);
    }
    if (rc)
        fuse_reply_err(req, -rc);
    free(path);
    return -rc;
}

void mnt_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    pid_t tid = fuse_req_ctx(req)->pid;
    int e = op_open(req, ino, fi);
    if (e != ESTALE) {
        /* an overwrite's retry has come (guard.c): answered, and a writer it opened is
         * listed (read opens are EBUSY for it from now on) */
        pthread_mutex_lock(&fs->mu);
        mnt_overwrite_retried(fs, tid);
        pthread_mutex_unlock(&fs->mu);
    }
}

/* Each worker thread's read buffer, kept for its next read: fresh memory for every read
 * (1 MiB, the largest the kernel sends) cost page faults on each. fuse_reply_buf has copied
 * it to the kernel when it returns, so one per thread is enough; freed when the thread
 * ends. It counts in the mount's fixed share of the target (mount.c, 3 MiB a thread). */
static pthread_key_t read_buf_key;
static pthread_once_t read_buf_once = PTHREAD_ONCE_INIT;
static int read_buf_ok;
struct read_buf {
    size_t cap;
    char data[];
};

static void read_buf_key_init(void) {
    read_buf_ok = pthread_key_create(&read_buf_key, free) == 0;
}

static char *read_buf(size_t size) {
    pthread_once(&read_buf_once, read_buf_key_init);
    if (!read_buf_ok)
        return NULL; /* no keys left in the process: ENOMEM */
    struct read_buf *b = pthread_getspecific(read_buf_key);
    if (b && b->cap >= size)
        return b->data;
    size_t cap = size < (1u << 20) ? (1u << 20) : size;
    struct read_buf *nb = malloc(sizeof(*nb) + cap);
    if (!nb)
        return NULL;
    nb->cap = cap;
    if (pthread_setspecific(read_buf_key, nb) != 0) {
        free(nb);
        return NULL;
    }
    free(b);
    return nb->data;
}

void mnt_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                 struct fuse_file_info *fi) {
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (!h || h->is_write || !h->r) {
        fuse_reply_err(req, EBADF);
        return;
    }
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    char *buf = read_buf(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    if (h->pf_data) { /* prefetched whole (prefetch.c): no GET */
        n = (uint64_t)off < h->pf_len ? h->pf_len - (size_t)off : 0;
        if (n > size)
            n = size;
        memcpy(buf, (char *)h->pf_data + (n ? off : 0), n);
        pthread_mutex_unlock(&h->mu);
        fuse_reply_buf(req, buf, n);
        return;
    }
    MNT_TRACE("read %s: %zu bytes at %lld", h->path, size, (long long)off);
    enum s3f_status st = s3f_reader_pread(h->r, buf, size, (uint64_t)off, &n, &err);
    pthread_mutex_unlock(&h->mu);
    MNT_TRACE("read %s: %zu bytes at %lld: %zu bytes, status %d", h->path, size,
              (long long)off, n, (int)st);
    if (st != S3F_OK) {
        mnt_log_error("read", h->path, &err);
        fuse_reply_err(req, mnt_errno_of(st, 1));
    } else {
        fuse_reply_buf(req, buf, n);
    }
}

int mnt_read_cached(struct mnt_fs *fs, const struct inode *in) {
    S3F_ASSERT_HELD(&fs->mu);
    for (const struct fh *o = fs->readers; o; o = o->rd_next)
        if (o->in == in && !o->direct)
            return 1;
    return 0;
}

void mnt_reader_release(struct mnt_fs *fs, struct fh *h) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&h->mu); /* after the last read (the kernel's order, made visible) */
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&fs->mu);
    reader_unlist(fs, h);
    pthread_mutex_unlock(&fs->mu);
    s3f_reader_close(h->r);
    h->r = NULL;
    mnt_fh_free(fs, h);
}

void mnt_readers_free(struct mnt_fs *fs) {
    while (fs->readers) {
        struct fh *h = fs->readers;
        fs->readers = h->rd_next;
        s3f_reader_close(h->r);
        h->in = NULL; /* the inode table goes with the mount */
        mnt_fh_free(fs, h);
    }
}
