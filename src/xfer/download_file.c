/* The file destination of a download (s3f_download_file; the session is download.c's).
 * The object is written into a temporary file beside the destination ("<dir>/.<name>.
 * s3flash-<random>"), sized once the first response tells the size, and renamed into place
 * only when every byte is in and verified: a failed download leaves the old file as it was.
 *
 * Invariants: the I/O threads copy response bytes into pool chunks (dreq.stage) and queue
 * full ones on d->wq under d->lock; the caller's thread writes them (download_run). An I/O
 * thread writes itself only when the pool has no chunk to spare or WQ_MAX chunks wait. The
 * offsets of one request's chunk are contiguous. d->wq_n and d->write_errno are also read
 * without the lock (atomically). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/assert.h"
#include "cache/cache.h"
#include "xfer/download_internal.h"


/* Write all of [p, p+len) at `off`: 0 or an errno value. */
int s3f__download_pwrite_all(int fd, const char *p, size_t len, uint64_t off) {
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : ENOSPC;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* Hand the request's chunk to the caller's thread (lock held), or give it back if empty. */
void s3f__download_stage_queue_locked(struct download *d, struct dreq *q) {
    S3F_ASSERT_HELD(&d->lock);
    if (!q->stage)
        return;
    if (q->stage_len == 0) {
        s3f__pool_release(&d->x->pool, 1, &q->stage);
    } else {
        /* never full: at most pool-size chunks exist */
        d->wq[(d->wq_head + d->wq_n) % d->wq_cap] =
            (struct wchunk){q->stage, q->stage_off, q->stage_len};
        __atomic_store_n(&d->wq_n, d->wq_n + 1, __ATOMIC_RELAXED); /* s3f__download_sink_file reads it */
        pthread_cond_broadcast(&d->cond);
    }
    q->stage = NULL;
}

static void stage_queue(struct download *d, struct dreq *q) {
    pthread_mutex_lock(&d->lock);
    s3f__download_stage_queue_locked(d, q);
    pthread_mutex_unlock(&d->lock);
}

/* File bytes: copied into the request's chunk, queued when it is full (the offsets of one
 * request are contiguous, also across retries, which resume where the last attempt
 * stopped). */
int s3f__download_sink_file(struct dreq *q, const char *p, size_t len, uint64_t offset) {
    struct download *d = q->d;
    int werr = __atomic_load_n(&d->write_errno, __ATOMIC_RELAXED);
    if (werr) {
        q->io_errno = werr;
        return 1;
    }
    size_t cs = d->x->pool.chunk_size;
    while (len) {
        if (q->stage && (q->stage_len == cs || offset != q->stage_off + q->stage_len))
            stage_queue(d, q);
        if (!q->stage) {
            if (__atomic_load_n(&d->wq_n, __ATOMIC_RELAXED) >= WQ_MAX ||
                s3f__pool_acquire(&d->x->pool, 1, &q->stage, false) != S3F_OK) {
                /* the caller's thread is behind, or the pool is busy: write it here */
                q->stage = NULL;
                if ((q->io_errno = s3f__download_pwrite_all(d->fd, p, len, offset)))
                    return 1;
                return 0;
            }
            q->stage_off = offset;
            q->stage_len = 0;
        }
        size_t n = cs - q->stage_len < len ? cs - q->stage_len : len;
        memcpy((char *)q->stage + q->stage_len, p, n);
        q->stage_len += n;
        p += n;
        len -= n;
        offset += n;
    }
    return 0;
}

/* Create "<dir>/.<name>.s3flash-<random>" next to `path`, mode 0666 & ~umask.
 * *tmp receives its malloc'ed name. Returns the fd or -1 (errno set). */
static int create_temp(const char *path, char **tmp) {
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(path) + 32;
    char *name = malloc(n);
    if (!name) {
        errno = ENOMEM;
        return -1;
    }
    for (int tries = 0; tries < 100; tries++) {
        unsigned r = (unsigned)(s3f__random_unit() * 4294967295.0);
        snprintf(name, n, "%.*s.%s.s3flash-%08x", (int)dir_len, path, base, r);
        int fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* read back: verify_other */
        if (fd >= 0) {
            *tmp = name;
            return fd;
        }
        if (errno != EEXIST)
            break;
    }
    free(name);
    return -1;
}

enum s3f_status s3f_download_file(struct s3f_client *c, const char *bucket, const char *key,
                                  const char *path, const struct s3f_download_options *opts,
                                  struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    static const struct s3f_download_options defaults;
    if (!opts)
        opts = &defaults;
    if (!path || !*path)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL, "path is empty");
    size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", path,
                              "%s names a directory", path);
    struct download d;
    enum s3f_status st = s3f__download_init(&d, c, bucket, key, opts, err);
    if (st) {
        s3f__download_cleanup(&d);
        return st;
    }
    char *tmp = NULL;
    d.dst = DST_FILE;
    d.wq_cap = d.x->pool.max_chunks;
    d.wq = calloc(d.wq_cap, sizeof(*d.wq));
    if (!d.wq) {
        s3f__download_cleanup(&d);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "download", NULL, "out of memory");
    }
    d.path = path;
    d.fd = create_temp(path, &tmp);
    if (d.fd < 0) {
        st = errno == ENOMEM ? s3f__error_set(err, S3F_ERR_NO_MEMORY, "download", path,
                                              "out of memory")
                             : s3f__error_set(err, S3F_ERR_IO, "download", path,
                                              "cannot create a file beside %s: %s", path,
                                              strerror(errno));
        s3f__download_cleanup(&d);
        return st;
    }
    struct s3f_object_info cinfo; /* the block cache: served from it, or filled after */
    bool cached = d.x->cache && !d.ranged && s3f__cache_serve_fd(&s3f__xfer_cache_origin, c, d.x->cache, bucket, key, opts->version_id,
                                                    opts->if_match, d.fd, info ? info : &cinfo);
    st = cached ? S3F_OK : s3f__download_run(&d, info, err);
    if (st == S3F_OK && !cached && d.x->cache && !d.ranged)
        s3f__cache_fill_fd(d.x->cache, bucket, key, d.etag, d.size, d.fd);
    if (st == S3F_OK && opts->fsync && fsync(d.fd) != 0)
        st = s3f__error_set(err, S3F_ERR_IO, "download", path, "fsync: %s", strerror(errno));
    if (close(d.fd) != 0 && st == S3F_OK)
        st = s3f__error_set(err, S3F_ERR_IO, "download", path, "close: %s", strerror(errno));
    if (st == S3F_OK && rename(tmp, path) != 0)
        st = s3f__error_set(err, S3F_ERR_IO, "download", path, "cannot rename into %s: %s",
                            path, strerror(errno));
    if (st)
        unlink(tmp);
    free(tmp);
    s3f__download_cleanup(&d);
    return st;
}
