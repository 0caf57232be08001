/* The cache's users in the engine: the reader's reads in whole blocks (s3f__cache_pread)
 * and whole-object downloads served from the cache or filled into it after the download.
 * Uses the block store (store.c) and what the caller passes: the reader's fetch function,
 * the downloads' origin (struct s3f__cache_origin: a HEAD for the ETag of a download, a
 * ranged GET for a block lost between the check and the read). No S3 operation here. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "core/assert.h"

#define RUN_MAX ((uint64_t)256 << 20) /* missing blocks fetched by one call of `fetch` */

static char *scratch(struct s3f__cache_object *o) {
    if (!o->scratch)
        o->scratch = malloc((size_t)o->block_bytes);
    return o->scratch;
}

enum s3f_status s3f__cache_pread(struct s3f__cache_object *o, void *buf, size_t len,
                                 uint64_t offset, s3f__cache_fetch_fn fetch, void *ud,
                                 size_t *n_read, struct s3f_error *err) {
    *n_read = 0;
    if (offset >= o->size || !len)
        return S3F_OK;
    uint64_t end = o->size - offset < len ? o->size : offset + len;
    uint64_t bs = o->block_bytes;
    char *out = buf;
    uint64_t pos = offset;
    enum s3f_status st = S3F_OK;
    while (pos < end) {
        uint64_t b = pos / bs, bstart = b * bs, blen = s3f__cache_block_len(o, b);
        uint64_t bend = bstart + blen;
        if (bstart == pos && bend <= end) {
            /* whole blocks: straight into buf */
            if (s3f__cache_get(o, b, out + (pos - offset))) {
                pos = bend;
                continue;
            }
            uint64_t run_end = bend;
            for (uint64_t nb = b + 1; run_end < end && run_end - pos < RUN_MAX; nb++) {
                uint64_t nlen = s3f__cache_block_len(o, nb);
                if (run_end + nlen > end || s3f__cache_has(o, nb))
                    break;
                run_end += nlen;
            }
            if ((st = fetch(ud, out + (pos - offset), (size_t)(run_end - pos), pos, err)))
                break;
            for (uint64_t p = pos; p < run_end; p += bs)
                s3f__cache_put(o, p / bs, out + (p - offset));
            pos = run_end;
            continue;
        }
        /* a part of a block: through the scratch block */
        char *s = scratch(o);
        uint64_t stop = bend < end ? bend : end;
        if (!s) {
            if ((st = fetch(ud, out + (pos - offset), (size_t)(stop - pos), pos, err)))
                break;
        } else {
            /* small sequential reads take one block from disk once, not once per read */
            if (o->scratch_block != b && !s3f__cache_get(o, b, s)) {
                o->scratch_block = UINT64_MAX;
                if ((st = fetch(ud, s, (size_t)blen, bstart, err)))
                    break;
                s3f__cache_put(o, b, s);
            }
            o->scratch_block = b;
            memcpy(out + (pos - offset), s + (pos - bstart), (size_t)(stop - pos));
        }
        pos = stop;
    }
    S3F_ASSERT(pos <= end);
    *n_read = (size_t)(pos - offset);
    return st;
}

/* ---- whole-object downloads -------------------------------------------------------------- */

/* Block `b` into dst: from the cache, else by a ranged GET pinned to the ETag (the block
 * was evicted or found corrupt since the check), then inserted. */
static enum s3f_status block_fetch(const struct s3f__cache_origin *origin, void *ud,
                                   struct s3f__cache_object *o, uint64_t b, char *dst,
                                   struct s3f_error *err) {
    if (s3f__cache_get(o, b, dst))
        return S3F_OK;
    uint64_t bs = s3f__cache_block_bytes(o->cache), len = s3f__cache_block_len(o, b);
    enum s3f_status st = origin->get(ud, o->bucket, o->key, o->etag, dst, (size_t)len, b * bs,
                                     err);
    if (st == S3F_OK)
        s3f__cache_put(o, b, dst);
    return st;
}

static bool block_into(const struct s3f__cache_origin *origin, void *ud,
                       struct s3f__cache_object *o, uint64_t b, char *dst) {
    return block_fetch(origin, ud, o, b, dst, NULL) == S3F_OK;
}

static uint64_t n_blocks(const struct s3f__cache_object *o) {
    uint64_t bs = s3f__cache_block_bytes(o->cache);
    return (o->size + bs - 1) / bs;
}

/* A partly cached object is served from the cache when at most this many of its blocks
 * are missing (each fetched with one ranged GET, one after another); with more, the
 * parallel download of the whole object is faster. */
#define SERVE_MISSING_MAX 8

/* The object's ETag and size by HEAD, and whether it is served from the cache: every
 * block of it has a file, or at most SERVE_MISSING_MAX are missing. */
static bool head_all_cached(const struct s3f__cache_origin *origin, void *ud,
                            struct s3f__cache *c,
                            const char *bucket, const char *key, const char *version_id,
                            const char *if_match, struct s3f_object_info *info,
                            struct s3f__cache_object *o) {
    S3F_ASSERT(origin && origin->head && origin->get); /* given by the engine */
    memset(o, 0, sizeof(*o));
    if (origin->head(ud, bucket, key, version_id, info) != S3F_OK)
        return false; /* the download reports it */
    if (!info->etag[0] || (if_match && strcmp(if_match, info->etag) != 0))
        return false;
    if (s3f__cache_object_init(o, c, bucket, key, info->etag, info->size))
        return false;
    uint64_t missing = 0, n = n_blocks(o);
    for (uint64_t b = 0; b < n && missing <= SERVE_MISSING_MAX; b++)
        missing += !s3f__cache_has(o, b);
    return missing <= SERVE_MISSING_MAX && (missing < n || !n);
}

/* A position in an iovec stream, moved forward only (blocks are visited in order, so a
 * download into many regions costs one pass over them, not one per block). */
struct iov_cursor {
    const struct s3f_iovec *iov;
    size_t n_iov, i; /* the region holding `at`.. */
    uint64_t at;     /* ..which starts at this stream offset */
};

/* Move to the region holding stream offset `start` (>= every earlier one). */
static void iov_seek(struct iov_cursor *k, uint64_t start) {
    while (k->i < k->n_iov && start >= k->at + k->iov[k->i].len) {
        k->at += k->iov[k->i].len;
        k->i++;
    }
}

/* Where bytes [start, start+len) of the stream are, when in one region. */
static char *iov_place(struct iov_cursor *k, uint64_t start, uint64_t len) {
    iov_seek(k, start);
    if (k->i == k->n_iov || start + len > k->at + k->iov[k->i].len)
        return NULL;
    return (char *)k->iov[k->i].base + (start - k->at);
}

/* Copy between a flat block and the stream at `start` (to_iov: into the regions). */
static void iov_copy(struct iov_cursor *k, uint64_t start, char *flat, uint64_t len,
                     bool to_iov) {
    iov_seek(k, start);
    uint64_t at = k->at;
    for (size_t i = k->i; i < k->n_iov && len; i++) {
        uint64_t rend = at + k->iov[i].len;
        if (start < rend) {
            uint64_t n = rend - start < len ? rend - start : len;
            char *p = (char *)k->iov[i].base + (start - at);
            if (to_iov)
                memcpy(p, flat, (size_t)n);
            else
                memcpy(flat, p, (size_t)n);
            flat += n;
            start += n;
            len -= n;
        }
        at = rend;
    }
}

bool s3f__cache_serve_iov(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c, const char *bucket,
                          const char *key, const char *version_id, const char *if_match,
                          const struct s3f_iovec *iov, size_t n_iov,
                          struct s3f_object_info *info) {
    struct s3f__cache_object o;
    bool ok = head_all_cached(origin, origin_ud, c, bucket, key, version_id, if_match, info, &o);
    uint64_t capacity = 0;
    for (size_t i = 0; i < n_iov; i++)
        capacity += iov[i].len;
    if (ok && o.size > capacity)
        ok = false; /* the download reports it */
    uint64_t bs = s3f__cache_block_bytes(c);
    struct iov_cursor k = {iov, n_iov, 0, 0};
    for (uint64_t b = 0; ok && b < n_blocks(&o); b++) {
        uint64_t len = s3f__cache_block_len(&o, b);
        char *p = iov_place(&k, b * bs, len);
        if (p) {
            ok = block_into(origin, origin_ud, &o, b, p);
        } else if ((p = scratch(&o)) && (ok = block_into(origin, origin_ud, &o, b, p))) {
            iov_copy(&k, b * bs, p, len, true);
        } else {
            ok = false;
        }
    }
    s3f__cache_object_cleanup(&o);
    return ok;
}

bool s3f__cache_serve_fd(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c, const char *bucket,
                         const char *key, const char *version_id, const char *if_match,
                         int fd, struct s3f_object_info *info) {
    struct s3f__cache_object o;
    bool ok = head_all_cached(origin, origin_ud, c, bucket, key, version_id, if_match, info, &o);
    uint64_t bs = s3f__cache_block_bytes(c);
    char *p = ok ? scratch(&o) : NULL;
    ok = ok && p;
    for (uint64_t b = 0; ok && b < n_blocks(&o); b++) {
        uint64_t len = s3f__cache_block_len(&o, b);
        ok = block_into(origin, origin_ud, &o, b, p);
        for (uint64_t done = 0; ok && done < len;) {
            ssize_t n = pwrite(fd, p + done, (size_t)(len - done), (off_t)(b * bs + done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                ok = false; /* the download meets the same error and reports it */
            else
                done += (uint64_t)n;
        }
    }
    if (!ok && ftruncate(fd, 0) != 0)
        ok = false;
    s3f__cache_object_cleanup(&o);
    return ok;
}

bool s3f__cache_serve_alloc(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c,
                            const char *bucket, const char *key, const char *version_id,
                            const char *if_match, void *(*alloc)(void *, size_t),
                            void *alloc_ud, void **data, size_t *len,
                            struct s3f_object_info *info, enum s3f_status *st,
                            struct s3f_error *err) {
    *st = S3F_OK;
    struct s3f__cache_object o;
    if (!head_all_cached(origin, origin_ud, c, bucket, key, version_id, if_match, info, &o) ||
        o.size > SIZE_MAX) {
        s3f__cache_object_cleanup(&o);
        return false;
    }
    /* from here on the call is answered here: the allocator runs at most once */
    char *dst = alloc ? alloc(alloc_ud, (size_t)o.size) : malloc(o.size ? (size_t)o.size : 1);
    if (!dst)
        *st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "GetObject", NULL,
                             "cannot allocate %" PRIu64 " bytes for the object", o.size);
    uint64_t bs = s3f__cache_block_bytes(c);
    for (uint64_t b = 0; !*st && b < n_blocks(&o); b++)
        *st = block_fetch(origin, origin_ud, &o, b, dst + b * bs, err);
    if (!*st) {
        *data = dst;
        *len = (size_t)o.size;
    } else if (dst && !alloc) {
        free(dst); /* the caller's allocator's memory stays the caller's */
    }
    s3f__cache_object_cleanup(&o);
    return true;
}

void s3f__cache_fill_iov(struct s3f__cache *c, const char *bucket, const char *key,
                         const char *etag, uint64_t size, const struct s3f_iovec *iov,
                         size_t n_iov) {
    struct s3f__cache_object o;
    if (!etag || !etag[0] || s3f__cache_object_init(&o, c, bucket, key, etag, size))
        return;
    uint64_t bs = s3f__cache_block_bytes(c);
    struct iov_cursor k = {iov, n_iov, 0, 0};
    for (uint64_t b = 0; b < n_blocks(&o); b++) {
        if (s3f__cache_has(&o, b))
            continue;
        uint64_t len = s3f__cache_block_len(&o, b);
        char *p = iov_place(&k, b * bs, len);
        if (!p && (p = scratch(&o)))
            iov_copy(&k, b * bs, p, len, false);
        s3f__cache_count_miss(c);
        if (p)
            s3f__cache_put_wait(&o, b, p);
    }
    s3f__cache_object_cleanup(&o);
}

void s3f__cache_fill_fd(struct s3f__cache *c, const char *bucket, const char *key,
                        const char *etag, uint64_t size, int fd) {
    struct s3f__cache_object o;
    if (!etag || !etag[0] || s3f__cache_object_init(&o, c, bucket, key, etag, size))
        return;
    uint64_t bs = s3f__cache_block_bytes(c);
    char *p = scratch(&o);
    for (uint64_t b = 0; p && b < n_blocks(&o); b++) {
        if (s3f__cache_has(&o, b))
            continue;
        uint64_t len = s3f__cache_block_len(&o, b);
        ssize_t n = pread(fd, p, (size_t)len, (off_t)(b * bs));
        if (n != (ssize_t)len)
            break;
        s3f__cache_count_miss(c);
        s3f__cache_put_wait(&o, b, p);
    }
    s3f__cache_object_cleanup(&o);
}
