/* s3f_download_alloc: one GET, no Range, of an object of unknown size, into memory the
 * caller's allocator gives once the size is known. No session and no parts (download.c
 * has those): one request, staged until the destination exists.
 *
 * The bytes of one GET arrive on an I/O thread; the destination is allocated on the
 * caller's thread (where the caller's allocator may take its own locks, such as Python's
 * GIL, which an I/O thread must never wait for) as soon as the first body bytes tell the
 * size. Bytes that arrive before that are staged in a malloc'ed buffer, copied over once
 * the destination exists; later ones go straight to their place. A small object is often
 * complete before the caller's thread wakes up: then it was staged whole (one extra copy
 * of a small object); a large one is staged only for the caller's wake-up time. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "cache/cache.h"
#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

/* The request's life: WAITING (for a request slot) -> SENT -> RECEIVING (the first body
 * bytes came: the size, if announced, is known) -> DONE; SENT -> DONE without a body. */
enum whole_state { W_WAITING, W_SENT, W_RECEIVING, W_DONE };
static const char *const whole_state_names[] = {"WAITING", "SENT", "RECEIVING", "DONE"};
static const unsigned whole_allowed[] = {
    [W_WAITING] = 1u << W_SENT,
    [W_SENT] = 1u << W_RECEIVING | 1u << W_DONE,
    [W_RECEIVING] = 1u << W_DONE,
    [W_DONE] = 0,
};

/* The destination's: NONE -> TRYING (the caller's allocator runs, lock dropped) -> READY
 * (dst) or FAILED; FAILED also when staging the early bytes ran out of memory (from NONE
 * or TRYING): the next bytes stop the request. */
enum whole_dst { WD_NONE, WD_TRYING, WD_READY, WD_FAILED };
static const char *const whole_dst_names[] = {"NONE", "TRYING", "READY", "FAILED"};
static const unsigned whole_dst_allowed[] = {
    [WD_NONE] = 1u << WD_TRYING | 1u << WD_FAILED,
    [WD_TRYING] = 1u << WD_READY | 1u << WD_FAILED,
    [WD_READY] = 0,
    [WD_FAILED] = 0,
};

struct whole {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    struct s3f__op op;
    struct s3f_error req_err;
    char resource[600];
    bool verify;
    enum s3f_checksum_algorithm pref_alg;
    struct s3f__sched_entry entry;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- guarded by lock ---- */
    enum whole_state state;     /* changed by whole_set_state only */
    enum s3f_status status;
    bool size_known;
    uint64_t size;
    char *dst;                  /* the destination, once allocated (caller's thread) */
    enum whole_dst dst_state;   /* changed by whole_set_dst only */
    bool too_long;
    char *stage;                /* body bytes received before dst existed */
    size_t stage_len, stage_cap;
    uint64_t received;
    bool ck_chosen;
    struct s3f__checksum ck;
    char ck_want[S3F__CHECKSUM_B64_MAX + 8];
    char request_id[128];
};

/* Every change of the request's state or the destination's goes through these two (lock
 * held): checked against the tables above and traced at S3FLASH_LOG=trace with the line
 * that made it. */
#define whole_set_state(w, to) whole_set_state_at(w, to, __LINE__)
static void whole_set_state_at(struct whole *w, enum whole_state to, int line) {
    S3F_ASSERT_HELD(&w->lock);
    S3F_ASSERT(whole_allowed[w->state] & (1u << to));
    if (s3f__log_enabled(&w->c->logger, S3F_LOG_TRACE))
        s3f__log(&w->c->logger, S3F_LOG_TRACE, "download %s: %s -> %s (download_alloc.c:%d)",
                 w->resource, whole_state_names[w->state], whole_state_names[to], line);
    w->state = to;
}

#define whole_set_dst(w, to) whole_set_dst_at(w, to, __LINE__)
static void whole_set_dst_at(struct whole *w, enum whole_dst to, int line) {
    S3F_ASSERT_HELD(&w->lock);
    S3F_ASSERT(whole_dst_allowed[w->dst_state] & (1u << to));
    if (s3f__log_enabled(&w->c->logger, S3F_LOG_TRACE))
        s3f__log(&w->c->logger, S3F_LOG_TRACE,
                 "download %s: destination %s -> %s (download_alloc.c:%d)", w->resource,
                 whole_dst_names[w->dst_state], whole_dst_names[to], line);
    w->dst_state = to;
}

/* Pick the whole-object checksum to verify from the response's headers (lock held; see
 * s3f__xfer_choose_checksum). */
static void whole_choose_checksum(struct whole *w, const char *crc32c, const char *crc32,
                                  const char *crc64) {
    S3F_ASSERT_HELD(&w->lock);
    w->ck_chosen = true;
    if (!w->verify) {
        s3f__checksum_init(&w->ck, S3F_CHECKSUM_NONE);
        return;
    }
    s3f__xfer_choose_checksum(crc32c, crc32, crc64, w->pref_alg, &w->ck, w->ck_want,
                              sizeof(w->ck_want));
}

/* Response bytes (I/O thread). Offsets are contiguous from 0, also across a resumed
 * attempt (the executor asks for the rest with a Range and If-Match on the first ETag). */
static int whole_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct whole *w = ud;
    int stop = 0;
    pthread_mutex_lock(&w->lock);
    if (w->state == W_SENT) {
        /* The executor's view of this response's head, parsed before the body. */
        struct s3f__s3_response_head h;
        s3f__s3_response_head(&w->op.r, &h);
        whole_set_state(w, W_RECEIVING);
        if (h.has_total_size) {
            w->size = h.total_size;
            w->size_known = true;
        } else if (h.has_content_length) {
            w->size = offset + h.content_length;
            w->size_known = true;
        }
        s3f__strlcpy(w->request_id, h.request_id, sizeof(w->request_id));
        whole_choose_checksum(w, h.checksum_crc32c, h.checksum_crc32, h.checksum_crc64nvme);
        pthread_cond_broadcast(&w->cond);
    }
    if (w->dst_state == WD_FAILED || offset != w->received) {
        stop = 1;
    } else if (w->size_known && offset + len > w->size) {
        w->too_long = true;
        stop = 1;
    } else {
        s3f__checksum_update(&w->ck, data, len);
        if (w->dst) {
            memcpy(w->dst + offset, data, len);
        } else {
            if (w->stage_len + len > w->stage_cap) {
                size_t cap = w->stage_cap ? w->stage_cap * 2 : 64 << 10;
                while (cap < w->stage_len + len)
                    cap *= 2;
                if (w->size_known && cap > w->size)
                    cap = (size_t)w->size;
                char *p = realloc(w->stage, cap);
                if (!p) {
                    whole_set_dst(w, WD_FAILED);
                    pthread_mutex_unlock(&w->lock);
                    return 1;
                }
                w->stage = p;
                w->stage_cap = cap;
            }
            memcpy(w->stage + w->stage_len, data, len);
            w->stage_len += len;
        }
        w->received = offset + len;
    }
    pthread_mutex_unlock(&w->lock);
    return stop;
}

static void whole_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct whole *w = ud;
    (void)r;
    s3f__sched_done(&w->x->sched);
    pthread_mutex_lock(&w->lock);
    w->status = st;
    whole_set_state(w, W_DONE);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static bool whole_start(struct s3f__sched_entry *e) {
    struct whole *w = (struct whole *)((char *)e - offsetof(struct whole, entry));
    pthread_mutex_lock(&w->lock);
    bool go = w->state == W_WAITING;
    if (go)
        whole_set_state(w, W_SENT);
    pthread_mutex_unlock(&w->lock);
    if (go)
        s3f__s3_submit(w->c, &w->op.r, &w->req_err, whole_done, w);
    return go;
}

/* Allocate the destination and move the staged bytes into it (caller's thread, lock held;
 * dropped around the allocator). */
static void whole_allocate(struct whole *w, s3f_alloc_fn alloc, void *alloc_ud) {
    S3F_ASSERT_HELD(&w->lock);
    whole_set_dst(w, WD_TRYING);
    uint64_t size = w->size;
    pthread_mutex_unlock(&w->lock);
    void *p = NULL;
    if (size <= SIZE_MAX)
        p = alloc ? alloc(alloc_ud, (size_t)size) : malloc(size ? (size_t)size : 1);
    pthread_mutex_lock(&w->lock);
    if (!p) {
        if (w->dst_state == WD_TRYING) /* else staging failed meanwhile */
            whole_set_dst(w, WD_FAILED); /* the next bytes stop the request */
        return;
    }
    if (w->dst_state == WD_TRYING)
        whole_set_dst(w, WD_READY);
    w->dst = p;
    if (w->stage_len)
        memcpy(w->dst, w->stage, w->stage_len);
    free(w->stage);
    w->stage = NULL;
    w->stage_len = w->stage_cap = 0;
}

enum s3f_status s3f_download_alloc(struct s3f_client *c, const char *bucket, const char *key,
                                   const struct s3f_download_options *opts,
                                   s3f_alloc_fn alloc, void *alloc_user_data, void **data,
                                   size_t *len, struct s3f_object_info *info,
                                   struct s3f_error *err) {
    static const char *op_name = "GetObject";
    s3f_error_clear(err);
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL, "client is NULL");
    if (!data || !len)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "data and len are required");
    *data = NULL;
    *len = 0;
    struct s3f__xfer_shared *x;
    enum s3f_status st = s3f__xfer_whole_get_args(c, op_name, bucket, key, &opts, &x, err);
    if (st)
        return st;
    struct s3f_object_info cinfo; /* the block cache: served from it, or filled after */
    if (x->cache && s3f__cache_serve_alloc(&s3f__xfer_cache_origin, c, x->cache, bucket, key, opts->version_id,
                                           opts->if_match, alloc, alloc_user_data, data, len,
                                           &cinfo, &st, err)) {
        if (info && st == S3F_OK)
            *info = cinfo;
        else if (info)
            memset(info, 0, sizeof(*info));
        return st;
    }
    struct whole *w = calloc(1, sizeof(*w));
    if (!w)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op_name, NULL, "out of memory");
    w->c = c;
    w->x = x;
    w->verify = opts->verify_checksum >= 0;
    w->pref_alg = x->checksum;
    s3f__s3_resource(w->resource, sizeof(w->resource), bucket, key);
    s3f__checksum_init(&w->ck, S3F_CHECKSUM_NONE);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->entry.start = whole_start;
    st = s3f__op_get(&w->op, false, bucket, key, opts->version_id, opts->if_match, w->verify,
                     err);
    if (st)
        goto out;
    w->op.r.sink = whole_sink;
    w->op.r.sink_ud = w;
    w->op.r.has_range = false;
    uint64_t t0 = s3f__now_ns();
    s3f__sched_add(&x->sched, &w->entry, 1);

    pthread_mutex_lock(&w->lock);
    for (;;) {
        if (w->size_known && w->dst_state == WD_NONE && !(w->state == W_DONE && w->status)) {
            whole_allocate(w, alloc, alloc_user_data);
            continue;
        }
        if (w->state == W_DONE)
            break;
        pthread_cond_wait(&w->cond, &w->lock);
    }
    st = w->status;
    if (st == S3F_OK && w->dst_state == WD_NONE) {
        /* no body bytes (an empty object), or no Content-Length: all of it is staged */
        w->size = w->received;
        w->size_known = true;
        whole_allocate(w, alloc, alloc_user_data);
    }
    pthread_mutex_unlock(&w->lock);
    /* the request is over: no I/O thread touches w from here on */
    if (w->dst_state == WD_FAILED) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, op_name, w->resource,
                            "cannot allocate %" PRIu64 " bytes for the object", w->size);
    } else if (w->too_long) {
        st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op_name, w->resource,
                            "the response carries more than the %" PRIu64
                            " bytes its headers announced",
                            w->size);
    } else if (st) {
        if (err)
            *err = w->req_err;
        if (st == S3F_ERR_PRECONDITION_FAILED && err && !opts->if_match &&
            err->http_status == 412)
            s3f__strlcpy(err->message, "the object changed during the download (ETag differs)",
                         sizeof(err->message));
    } else if (w->received != w->size) {
        st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op_name, w->resource,
                            "the response had %" PRIu64 " bytes, %" PRIu64 " announced",
                            w->received, w->size);
    } else {
        if (!w->ck_chosen) { /* no body: the checksum headers are in the response's info */
            pthread_mutex_lock(&w->lock); /* no I/O thread is left: taken so that the
                                           * rule of whole_choose_checksum has no exception */
            whole_choose_checksum(w, w->op.info.checksum_crc32c, w->op.info.checksum_crc32,
                                  w->op.info.checksum_crc64nvme);
            pthread_mutex_unlock(&w->lock);
        }
        if (w->ck_want[0]) {
            char got[S3F__CHECKSUM_B64_MAX];
            s3f__checksum_b64(&w->ck, got);
            if (strcmp(got, w->ck_want) != 0) {
                st = s3f__error_set(err, S3F_ERR_CHECKSUM, op_name, w->resource,
                                    "%s of the downloaded bytes is %s, the server's is %s",
                                    s3f__checksum_algorithm_name(w->ck.alg), got, w->ck_want);
                if (err) {
                    err->http_status = w->op.r.http_status;
                    s3f__strlcpy(err->request_id, w->request_id, sizeof(err->request_id));
                }
            } else {
                s3f__log(&c->logger, S3F_LOG_DEBUG, "download %s: %s %s verified",
                         w->resource, s3f__checksum_algorithm_name(w->ck.alg), got);
            }
        }
    }
    if (st == S3F_OK) {
        if (info) {
            *info = w->op.info;
            info->size = w->size;
        }
        *data = w->dst;
        *len = (size_t)w->size;
        w->dst = NULL;
        if (x->cache) {
            struct s3f_iovec one = {*data, *len};
            s3f__cache_fill_iov(x->cache, bucket, key, w->op.info.etag, w->size, &one, 1);
        }
        double s = (double)(s3f__now_ns() - t0) / 1e9;
        s3f__log(&c->logger, S3F_LOG_DEBUG,
                 "download %s: %" PRIu64 " bytes in one GET, %.3f s", w->resource, w->size, s);
    } else if (info) {
        memset(info, 0, sizeof(*info));
    }
out:
    s3f__sched_detach(&x->sched, &w->entry);
    if (w->dst && !alloc)
        free(w->dst); /* the caller's allocator's memory stays the caller's */
    free(w->stage);
    s3f__op_cleanup(&w->op);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return st;
}
