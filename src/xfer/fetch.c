/* s3f_fetch: many whole objects fetched at once, taken in the order they were added.
 *
 * What a dataset that reads ahead needs: N small objects, each one GET without a Range
 * (no HEAD), all in flight together through the client's scheduler (the engine's I/O
 * threads run them; no thread per object), their bytes delivered in the order they were
 * queued whatever the order they complete in. Each item's bytes land in one malloc'ed
 * buffer of the object's size, allocated by the I/O thread as soon as the response's
 * headers tell the size (malloc from an I/O thread is fine; what must not run there is a
 * caller's allocator that takes a lock such as Python's GIL).
 *
 * Threads and locks: the caller's thread adds and takes; I/O threads run the sinks and the
 * completions. Everything an item shares with the I/O threads is guarded by the fetch's
 * one lock (items are small and short-lived: one lock is cheaper than one per item). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

/* An item's life: QUEUED (added, waiting for a request slot) -> SENDING (its GET in
 * flight) -> DONE (status says how it ended); changed only by item_set_state. */
enum item_state { IT_QUEUED, IT_SENDING, IT_DONE };
static const char *const item_state_names[] = {"QUEUED", "SENDING", "DONE"};
static const unsigned item_allowed[] = {
    [IT_QUEUED] = 1u << IT_SENDING,
    [IT_SENDING] = 1u << IT_DONE,
    [IT_DONE] = 0,
};

/* Why the sink stopped a response (at most one reason: a stopped request ends). */
enum item_stop {
    STOP_NONE,
    STOP_TOO_LARGE,   /* more than max_size bytes: left to the caller's reader */
    STOP_TOO_LONG,    /* more bytes than the headers announced */
    STOP_NO_MEMORY,   /* the buffer could not grow */
};

struct item {
    struct s3f_fetch *f;
    struct item *next;           /* the queue, in the order added */
    struct s3f__op op;
    struct s3f__sched_entry entry;
    struct s3f_error err;        /* filled by the executor on failure */
    char resource[600];
    char *names;                 /* bucket, key and if_match, copied: the op points into it */
    uint64_t max_size;
    struct s3f__xfer_timing t;   /* for the bandwidth-delay estimator */
    /* ---- guarded by f->lock ---- */
    enum item_state state;
    enum s3f_status status;
    bool head_seen, size_known;
    enum item_stop stop;
    uint64_t size, received;
    char *data;                  /* size bytes once the size is known; grown when unknown */
    size_t cap;
    struct s3f__checksum ck;
    char ck_want[S3F__CHECKSUM_B64_MAX + 8];
    char request_id[128];
};

struct s3f_fetch {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    bool verify;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- owned by the caller's thread ---- */
    struct item *head, *tail;    /* added and not yet taken */
    size_t n;
    /* ---- guarded by lock ---- */
    bool stopping;               /* s3f_fetch_free: sinks stop their requests */
    uint64_t held, held_high_water; /* bytes of the items' buffers, not yet taken */
};

/* Every change of an item's state goes through here (f->lock held): checked against
 * item_allowed and traced at S3FLASH_LOG=trace with the line that made it. */
#define item_set_state(it, to) item_set_state_at(it, to, __LINE__)
static void item_set_state_at(struct item *it, enum item_state to, int line) {
    S3F_ASSERT_HELD(&it->f->lock);
    S3F_ASSERT(item_allowed[it->state] & (1u << to));
    if (s3f__log_enabled(&it->f->c->logger, S3F_LOG_TRACE))
        s3f__log(&it->f->c->logger, S3F_LOG_TRACE, "fetch %s: %s -> %s (fetch.c:%d)",
                 it->resource, item_state_names[it->state], item_state_names[to], line);
    it->state = to;
}

/* Grow (or first allocate) the item's buffer to hold `need` bytes (f->lock held). */
static bool item_reserve(struct item *it, uint64_t need) {
    S3F_ASSERT_HELD(&it->f->lock);
    if (need <= it->cap && it->data)
        return true;
    uint64_t cap = it->size_known ? it->size : (it->cap ? it->cap * 2 : 64 << 10);
    while (cap < need)
        cap *= 2;
    if (cap > SIZE_MAX - 1)
        return false;
    char *p = realloc(it->data, cap ? (size_t)cap : 1);
    if (!p)
        return false;
    struct s3f_fetch *f = it->f;
    f->held += cap - it->cap;
    if (f->held > f->held_high_water)
        f->held_high_water = f->held;
    it->data = p;
    it->cap = (size_t)cap;
    return true;
}

/* Response bytes (I/O thread); offsets are contiguous from 0, also across a resumed
 * attempt (the executor asks for the rest with a Range and If-Match on the first ETag). */
static int item_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct item *it = ud;
    struct s3f_fetch *f = it->f;
    s3f__xfer_timing_body(&it->t, len);
    pthread_mutex_lock(&f->lock);
    int stop = f->stopping;
    if (!it->head_seen) {
        struct s3f__s3_response_head h;
        s3f__s3_response_head(&it->op.r, &h);
        it->head_seen = true;
        if (h.has_total_size || h.has_content_length) {
            it->size = h.has_total_size ? h.total_size : offset + h.content_length;
            it->size_known = true;
        }
        s3f__strlcpy(it->request_id, h.request_id, sizeof(it->request_id));
        if (f->verify)
            s3f__xfer_choose_checksum(h.checksum_crc32c, h.checksum_crc32,
                                      h.checksum_crc64nvme, f->x->checksum, &it->ck,
                                      it->ck_want, sizeof(it->ck_want));
        if (it->size_known && it->size > it->max_size) {
            it->stop = STOP_TOO_LARGE; /* left to the caller's reader: stop after the headers */
            stop = 1;
        }
    }
    if (!stop && offset != it->received)
        stop = 1;
    if (!stop && it->size_known && offset + len > it->size) {
        it->stop = STOP_TOO_LONG;
        stop = 1;
    }
    if (!stop && !it->size_known && offset + len > it->max_size) {
        it->stop = STOP_TOO_LARGE;
        stop = 1;
    }
    if (!stop && !item_reserve(it, offset + len)) {
        it->stop = STOP_NO_MEMORY;
        stop = 1;
    }
    if (!stop) {
        memcpy(it->data + offset, data, len);
        s3f__checksum_update(&it->ck, data, len);
        it->received = offset + len;
    }
    pthread_mutex_unlock(&f->lock);
    return stop;
}

static void item_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct item *it = ud;
    struct s3f_fetch *f = it->f;
    (void)r;
    if (st == S3F_OK)
        s3f__xfer_observe_timing(f->x, &it->t);
    s3f__sched_done(&f->x->sched);
    pthread_mutex_lock(&f->lock);
    it->status = st;
    item_set_state(it, IT_DONE);
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static bool item_start(struct s3f__sched_entry *e) {
    struct item *it = (struct item *)((char *)e - offsetof(struct item, entry));
    struct s3f_fetch *f = it->f;
    pthread_mutex_lock(&f->lock);
    bool go = it->state == IT_QUEUED && !f->stopping;
    if (go)
        item_set_state(it, IT_SENDING);
    pthread_mutex_unlock(&f->lock);
    if (go) {
        it->t.start_ns = s3f__now_ns();
        s3f__s3_submit(f->c, &it->op.r, &it->err, item_done, it);
    }
    return go;
}

static void item_free(struct s3f_fetch *f, struct item *it) {
    s3f__sched_detach(&f->x->sched, &it->entry);
    pthread_mutex_lock(&f->lock);
    f->held -= it->cap; /* handed over or dropped: no longer the fetch's */
    pthread_mutex_unlock(&f->lock);
    free(it->data);
    s3f__op_cleanup(&it->op);
    free(it->names);
    free(it);
}

enum s3f_status s3f_fetch_new(struct s3f_client *c, const struct s3f_fetch_options *opts,
                              struct s3f_fetch **out, struct s3f_error *err) {
    s3f_error_clear(err);
    if (!c || !out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "GetObject", NULL,
                              "client and out are required");
    *out = NULL;
    struct s3f__xfer_shared *x;
    enum s3f_status st = s3f__xfer_shared_get(c, &x, err);
    if (st)
        return st;
    struct s3f_fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "GetObject", NULL, "out of memory");
    f->c = c;
    f->x = x;
    f->verify = !opts || opts->verify_checksum >= 0;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    *out = f;
    return S3F_OK;
}

enum s3f_status s3f_fetch_add(struct s3f_fetch *f, const char *bucket, const char *key,
                              const char *if_match, uint64_t max_size,
                              struct s3f_error *err) {
    s3f_error_clear(err);
    if (!f)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "GetObject", NULL,
                              "fetch is NULL");
    enum s3f_status st = s3f__op_check_args("GetObject", bucket, key, true, err);
    if (st)
        return st;
    if (!if_match || !if_match[0])
        if_match = NULL;
    size_t nb = strlen(bucket) + 1, nk = strlen(key) + 1, ne = if_match ? strlen(if_match) + 1 : 0;
    struct item *it = calloc(1, sizeof(*it));
    char *names = malloc(nb + nk + ne);
    if (!it || !names) {
        free(it);
        free(names);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "GetObject", NULL, "out of memory");
    }
    memcpy(names, bucket, nb);
    memcpy(names + nb, key, nk);
    if (if_match)
        memcpy(names + nb + nk, if_match, ne);
    it->names = names;
    bucket = names;
    key = names + nb;
    if_match = if_match ? names + nb + nk : NULL;
    it->f = f;
    it->max_size = max_size ? max_size : UINT64_MAX;
    it->entry.start = item_start;
    s3f__s3_resource(it->resource, sizeof(it->resource), bucket, key);
    s3f__checksum_init(&it->ck, S3F_CHECKSUM_NONE);
    st = s3f__op_get(&it->op, false, bucket, key, NULL, if_match, f->verify, err);
    if (st) {
        s3f__op_cleanup(&it->op);
        free(it->names);
        free(it);
        return st;
    }
    it->op.r.sink = item_sink;
    it->op.r.sink_ud = it;
    it->op.r.has_range = false;
    if (f->tail)
        f->tail->next = it;
    else
        f->head = it;
    f->tail = it;
    f->n++;
    s3f__sched_add(&f->x->sched, &it->entry, 1);
    return S3F_OK;
}

size_t s3f_fetch_pending(const struct s3f_fetch *f) {
    return f ? f->n : 0;
}

void s3f_fetch_held(struct s3f_fetch *f, uint64_t *held, uint64_t *high_water) {
    *held = *high_water = 0;
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    *held = f->held;
    *high_water = f->held_high_water;
    pthread_mutex_unlock(&f->lock);
}

/* The outcome of a finished item (caller's thread; no I/O thread touches it any more). */
static enum s3f_status item_result(struct s3f_fetch *f, struct item *it, void **data,
                                   size_t *len, struct s3f_object_info *info,
                                   struct s3f_error *err) {
    const char *op = "GetObject";
    enum s3f_status st = it->status;
    if (it->stop == STOP_TOO_LARGE) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, it->resource,
                            "the object has more than the %" PRIu64 " bytes asked for",
                            it->max_size);
        if (info)
            info->size = it->size_known ? it->size : it->received;
        return st;
    }
    if (it->stop == STOP_NO_MEMORY)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, it->resource,
                              "cannot allocate %" PRIu64 " bytes for the object", it->size);
    if (it->stop == STOP_TOO_LONG)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op, it->resource,
                              "the response carries more than the %" PRIu64
                              " bytes its headers announced", it->size);
    if (st) {
        if (err)
            *err = it->err;
        return st;
    }
    if (it->size_known && it->received != it->size)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op, it->resource,
                              "the response had %" PRIu64 " bytes, %" PRIu64 " announced",
                              it->received, it->size);
    if (!it->head_seen && f->verify) /* no body: the checksum headers are in the info */
        s3f__xfer_choose_checksum(it->op.info.checksum_crc32c, it->op.info.checksum_crc32,
                                  it->op.info.checksum_crc64nvme, f->x->checksum, &it->ck,
                                  it->ck_want, sizeof(it->ck_want));
    if (it->ck_want[0]) {
        char got[S3F__CHECKSUM_B64_MAX];
        s3f__checksum_b64(&it->ck, got);
        if (strcmp(got, it->ck_want) != 0) {
            st = s3f__error_set(err, S3F_ERR_CHECKSUM, op, it->resource,
                                "%s of the downloaded bytes is %s, the server's is %s",
                                s3f__checksum_algorithm_name(it->ck.alg), got, it->ck_want);
            if (err) {
                err->http_status = it->op.r.http_status;
                s3f__strlcpy(err->request_id, it->request_id, sizeof(err->request_id));
            }
            return st;
        }
    }
    pthread_mutex_lock(&f->lock); /* an empty object: a buffer of its own all the same */
    bool have = it->data || item_reserve(it, 1);
    pthread_mutex_unlock(&f->lock);
    if (!have)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, it->resource, "out of memory");
    if (info) {
        *info = it->op.info;
        info->size = it->received;
    }
    *data = it->data;
    *len = (size_t)it->received;
    it->data = NULL;
    return S3F_OK;
}

enum s3f_status s3f_fetch_take(struct s3f_fetch *f, void **data, size_t *len,
                               struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    if (!f || !data || !len)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "GetObject", NULL,
                              "fetch, data and len are required");
    *data = NULL;
    *len = 0;
    if (info)
        memset(info, 0, sizeof(*info));
    struct item *it = f->head;
    if (!it)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "GetObject", NULL,
                              "nothing was added to take");
    pthread_mutex_lock(&f->lock);
    while (it->state != IT_DONE)
        pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    f->head = it->next;
    if (!f->head)
        f->tail = NULL;
    f->n--;
    enum s3f_status st = item_result(f, it, data, len, info, err);
    item_free(f, it);
    return st;
}

void s3f_fetch_free(struct s3f_fetch *f) {
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true; /* queued items never start, running ones stop at their next bytes */
    pthread_mutex_unlock(&f->lock);
    for (struct item *it = f->head; it; it = it->next)
        s3f__sched_detach(&f->x->sched, &it->entry);
    pthread_mutex_lock(&f->lock);
    for (struct item *it = f->head; it; it = it->next)
        while (it->state == IT_SENDING)
            pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    while (f->head) {
        struct item *it = f->head;
        f->head = it->next;
        item_free(f, it);
    }
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
}
