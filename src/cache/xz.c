/* The shared block cache in an S3 Express One Zone directory bucket (`--cache-xz BUCKET`,
 * Mountpoint's shared cache; docs/CACHE.md "The shared cache"): every node that reads an
 * object of at most XZ_MAX_OBJECT bytes through a reader looks for its blocks there after its
 * local cache, before the source bucket, and a block read from the source is PUT there in the
 * background, for the other nodes.
 *
 * A block is one object,
 *     s3flash-v1/<sha256(scope \0 bucket \0 block size)>/<sha256(key \0 ETag \0 size)>/<index>
 * (the index in ten digits), whose body is a block file of the local cache (store.c: the
 * 56-byte header naming the source bucket, key, ETag, object size, offset, length and the
 * CRC32C of the data, then the names and the data). Every block read is checked against
 * the block asked for, byte for byte in its names and by the CRC32C of its data, before a
 * byte of it is used: a foreign, stale, truncated or corrupt object is a miss (counted in
 * `invalid`, logged once) and the block comes from the source, whose PUT then replaces it.
 * The ETag is part of the name, so an object replaced at the source never meets its old
 * blocks.
 *
 * Errors never fail a read: a GET or PUT that fails (after the client's retries) is counted,
 * logged once, and the shared cache is bypassed for XZ_BYPASS_NS (reads go to the source,
 * fills are dropped), so an unreachable bucket costs one failed request per interval, not one
 * per read, and does not drain the client's retry quota. PUTs are queued (a copy of the
 * block, bounded by queue_bytes, dropped when full, never waited for) and sent one at a time
 * by the cache's own thread. The S3 requests themselves are the caller's (struct
 * s3f__xz_ops, given by xfer/): nothing here calls an S3 operation. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "core/assert.h"

#define XZ_BYPASS_NS (10ull * 1000000000ull) /* after a failed request */
#define XZ_QUEUE_DEFAULT ((uint64_t)8 << 20)

struct xz_job {
    struct xz_job *next;
    char key[200];
    size_t len;         /* of body */
    uint64_t data_len;  /* of the block's data (the counters) */
    char body[];  /* the header, the names and the data */
};

struct s3f__xz {
    char *bucket;
    char *scope;
    uint64_t max_object, block_bytes;
    const struct s3f__logger *logger;
    const struct s3f__xz_ops *ops;
    void *ops_ud;
    struct s3f__xz_counters n;   /* atomics */
    uint64_t bypass_until_ns;    /* atomic: no request before this */
    int warned_get, warned_put, warned_invalid; /* atomic: logged once */
    /* the PUT queue, under q_lock */
    pthread_mutex_t q_lock;
    pthread_cond_t q_work, q_idle;
    struct xz_job *q_head, *q_tail;
    uint64_t q_bytes, q_max;     /* queued and being sent; the bound */
    bool q_stop, thread_ok;
    pthread_t thread;
};

static void count(uint64_t *counter, uint64_t n) {
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static bool once(int *flag) {
    return __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0;
}

static bool bypassed(struct s3f__xz *z) {
    return s3f__now_ns() < __atomic_load_n(&z->bypass_until_ns, __ATOMIC_RELAXED);
}

/* A request failed: log it once, and go to the source alone for a while. */
static void failed(struct s3f__xz *z, int *warned, const char *what, const char *key,
                   const struct s3f_error *err) {
    __atomic_store_n(&z->bypass_until_ns, s3f__now_ns() + XZ_BYPASS_NS, __ATOMIC_RELAXED);
    if (!once(warned))
        return;
    s3f__log(z->logger, S3F_LOG_WARN,
             "shared cache %s: %s s3://%s/%s failed: %s%s(HTTP %d) %s%s%s; reads go to the "
             "source bucket, the shared cache is tried again in %llu s (logged once)",
             z->bucket, what, z->bucket, key, err->code, err->code[0] ? " " : "",
             err->http_status, err->message,
             err->request_id[0] ? " request id " : "", err->request_id,
             (unsigned long long)(XZ_BYPASS_NS / 1000000000ull));
}

enum s3f_status s3f__xz_open(const struct s3f__xz_options *o, struct s3f__xz **out,
                             struct s3f_error *err) {
    *out = NULL;
    S3F_ASSERT(o->ops && o->ops->get && o->ops->put); /* given by the engine */
    struct s3f__xz *z = calloc(1, sizeof(*z));
    if (!z || !(z->bucket = s3f__strdup(o->bucket)) ||
        !(z->scope = s3f__strdup(o->scope ? o->scope : ""))) {
        if (z)
            free(z->bucket);
        free(z);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache-xz", NULL, "out of memory");
    }
    z->max_object = o->max_object_bytes ? o->max_object_bytes : S3F__XZ_MAX_OBJECT_DEFAULT;
    z->block_bytes = o->block_bytes ? o->block_bytes : S3F__CACHE_BLOCK_DEFAULT;
    z->logger = o->logger;
    z->ops = o->ops;
    z->ops_ud = o->ops_ud;
    z->q_max = o->queue_bytes ? o->queue_bytes : XZ_QUEUE_DEFAULT;
    pthread_mutex_init(&z->q_lock, NULL);
    pthread_cond_init(&z->q_work, NULL);
    pthread_cond_init(&z->q_idle, NULL);
    *out = z;
    return S3F_OK;
}

/* ---- names and bodies ------------------------------------------------------------------ */

/* The object of block `index`; false when out of memory. */
static bool block_key(const struct s3f__xz *z, const struct s3f__cache_object *o,
                      uint64_t index, char *out, size_t cap) {
    struct s3f__buf id;
    s3f__buf_init(&id, (size_t)1 << 20);
    char num[48], prefix[65], obj[65];
    snprintf(num, sizeof(num), "%" PRIu64, o->block_bytes);
    bool ok = !s3f__buf_append(&id, z->scope, strlen(z->scope) + 1) &&
              !s3f__buf_append(&id, o->bucket, strlen(o->bucket) + 1) &&
              !s3f__buf_append(&id, num, strlen(num)) &&
              !s3f__sha256_hex(id.data, id.len, prefix);
    id.len = 0;
    snprintf(num, sizeof(num), "%" PRIu64, o->size);
    ok = ok && !s3f__buf_append(&id, o->key, strlen(o->key) + 1) &&
         !s3f__buf_append(&id, o->etag, strlen(o->etag) + 1) &&
         !s3f__buf_append(&id, num, strlen(num)) && !s3f__sha256_hex(id.data, id.len, obj);
    s3f__buf_cleanup(&id);
    return ok && (size_t)snprintf(out, cap, "s3flash-v1/%s/%s/%010" PRIu64, prefix, obj,
                                  index) < cap;
}

static size_t names_len(const struct s3f__cache_object *o) {
    return strlen(o->bucket) + strlen(o->key) + strlen(o->etag);
}

bool s3f__xz_get(struct s3f__xz *z, struct s3f__cache_object *o, uint64_t index, void *dst) {
    uint64_t len = s3f__cache_block_len(o, index);
    char key[200];
    if (!len)
        return false;
    if (bypassed(z) || !block_key(z, o, index, key, sizeof(key))) {
        count(&z->n.misses, 1);
        return false;
    }
    size_t hlen = S3F__CACHE_HEADER_FIXED + names_len(o);
    char *head = malloc(hlen);
    if (!head) {
        count(&z->n.misses, 1);
        return false;
    }
    struct s3f_error e;
    memset(&e, 0, sizeof(e));
    uint64_t got = 0;
    enum s3f_status st = z->ops->get(z->ops_ud, z->bucket, key, head, hlen, dst, (size_t)len,
                                     &got, &e);
    const char *why = NULL;
    uint32_t crc = 0;
    struct s3f__cache_block_id want = {o->bucket, o->key,  o->etag,
                                       o->size,   index * o->block_bytes, len};
    if (st == S3F_ERR_NOT_FOUND) {
        free(head);
        count(&z->n.misses, 1);
        return false;
    }
    if (st == S3F_ERR_ABORTED || (st == S3F_OK && got != hlen + len)) {
        why = "its length is not the block's";
    } else if (st != S3F_OK) {
        free(head);
        count(&z->n.errors, 1);
        count(&z->n.misses, 1);
        failed(z, &z->warned_get, "GET", key, &e);
        return false;
    } else if (!(why = s3f__cache_header_check(head, hlen, got, &want, &crc)) &&
               s3f__crc32c(0, dst, (size_t)len) != crc) {
        why = "the CRC32C of its data does not match";
    }
    free(head);
    if (why) {
        count(&z->n.invalid, 1);
        count(&z->n.misses, 1);
        if (once(&z->warned_invalid))
            s3f__log(z->logger, S3F_LOG_WARN,
                     "shared cache %s: s3://%s/%s is not block %" PRIu64 " of s3://%s/%s "
                     "(ETag %s): %s; not used, the block is read from the source and "
                     "replaced (logged once)",
                     z->bucket, z->bucket, key, index, o->bucket, o->key, o->etag, why);
        return false;
    }
    count(&z->n.hits, 1);
    count(&z->n.hit_bytes, len);
    return true;
}

/* ---- the PUT queue and its thread ------------------------------------------------------ */

static void *writer_main(void *arg) {
    struct s3f__xz *z = arg;
    pthread_mutex_lock(&z->q_lock);
    for (;;) {
        while (!z->q_head && !z->q_stop)
            pthread_cond_wait(&z->q_work, &z->q_lock);
        struct xz_job *j = z->q_head;
        if (!j)
            break; /* stopped, and everything queued is sent */
        z->q_head = j->next;
        if (!z->q_head)
            z->q_tail = NULL;
        pthread_mutex_unlock(&z->q_lock);
        uint64_t data_len = j->data_len;
        if (bypassed(z)) {
            count(&z->n.put_dropped_bytes, data_len);
        } else {
            struct s3f_error e;
            memset(&e, 0, sizeof(e));
            if (z->ops->put(z->ops_ud, z->bucket, j->key, j->body, j->len, &e) == S3F_OK) {
                count(&z->n.put_bytes, data_len);
                count(&z->n.puts, 1);
            } else {
                count(&z->n.put_errors, 1);
                count(&z->n.put_dropped_bytes, data_len);
                failed(z, &z->warned_put, "PUT", j->key, &e);
            }
        }
        pthread_mutex_lock(&z->q_lock);
        z->q_bytes -= j->len;
        free(j);
        if (!z->q_bytes)
            pthread_cond_broadcast(&z->q_idle);
    }
    pthread_mutex_unlock(&z->q_lock);
    return NULL;
}

void s3f__xz_put(struct s3f__xz *z, struct s3f__cache_object *o, uint64_t index,
                 const void *data) {
    uint64_t len = s3f__cache_block_len(o, index);
    if (!len || o->size > z->max_object)
        return;
    size_t bl = strlen(o->bucket), kl = strlen(o->key), el = strlen(o->etag);
    size_t body = S3F__CACHE_HEADER_FIXED + bl + kl + el + (size_t)len;
    if (bypassed(z)) {
        count(&z->n.put_dropped_bytes, len);
        return;
    }
    pthread_mutex_lock(&z->q_lock);
    bool room = !z->q_stop && z->q_bytes + body <= z->q_max;
    if (room && !z->thread_ok) /* started with the first block to send */
        z->thread_ok = pthread_create(&z->thread, NULL, writer_main, z) == 0;
    room = room && z->thread_ok;
    if (room)
        z->q_bytes += body; /* reserved before the copy, so the bound holds meanwhile */
    pthread_mutex_unlock(&z->q_lock);
    struct xz_job *j = room ? malloc(sizeof(*j) + body) : NULL;
    if (j && !block_key(z, o, index, j->key, sizeof(j->key))) {
        free(j);
        j = NULL;
    }
    if (!j) {
        count(&z->n.put_dropped_bytes, len);
        if (room) {
            pthread_mutex_lock(&z->q_lock);
            z->q_bytes -= body;
            if (!z->q_bytes)
                pthread_cond_broadcast(&z->q_idle);
            pthread_mutex_unlock(&z->q_lock);
        }
        return;
    }
    j->next = NULL;
    j->len = body;
    j->data_len = len;
    char *p = j->body + S3F__CACHE_HEADER_FIXED;
    s3f__cache_header_make(j->body, o->size, index * o->block_bytes, len, bl, kl, el,
                           s3f__crc32c(0, data, (size_t)len));
    memcpy(p, o->bucket, bl);
    memcpy(p + bl, o->key, kl);
    memcpy(p + bl + kl, o->etag, el);
    memcpy(p + bl + kl + el, data, (size_t)len);
    pthread_mutex_lock(&z->q_lock);
    if (z->q_tail)
        z->q_tail->next = j;
    else
        z->q_head = j;
    z->q_tail = j;
    pthread_cond_signal(&z->q_work);
    pthread_mutex_unlock(&z->q_lock);
}

void s3f__xz_flush(struct s3f__xz *z) {
    if (!z)
        return;
    pthread_mutex_lock(&z->q_lock);
    while (z->q_bytes)
        pthread_cond_wait(&z->q_idle, &z->q_lock);
    pthread_mutex_unlock(&z->q_lock);
}

void s3f__xz_stop(struct s3f__xz *z) {
    if (!z)
        return;
    pthread_mutex_lock(&z->q_lock);
    z->q_stop = true;
    bool join = z->thread_ok;
    z->thread_ok = false;
    pthread_cond_broadcast(&z->q_work);
    pthread_mutex_unlock(&z->q_lock);
    if (join)
        pthread_join(z->thread, NULL); /* it sends what is queued first */
}

void s3f__xz_free(struct s3f__xz *z) {
    if (!z)
        return;
    s3f__xz_stop(z);
    S3F_ASSERT(!z->q_head && !z->q_bytes);
    pthread_cond_destroy(&z->q_work);
    pthread_cond_destroy(&z->q_idle);
    pthread_mutex_destroy(&z->q_lock);
    free(z->bucket);
    free(z->scope);
    free(z);
}

void s3f__xz_counters(struct s3f__xz *z, struct s3f__xz_counters *out) {
    memset(out, 0, sizeof(*out));
    if (!z)
        return;
    const uint64_t *from = &z->n.hits;
    uint64_t *to = &out->hits;
    for (size_t i = 0; i < S3F__XZ_COUNTERS - 1; i++) /* all but put_pending_bytes */
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
    pthread_mutex_lock(&z->q_lock);
    out->put_pending_bytes = z->q_bytes;
    pthread_mutex_unlock(&z->q_lock);
}

/* ---- the tier between the local cache and the source ------------------------------------ */

enum s3f_status s3f__xz_fetch(void *ud, void *dst, size_t len, uint64_t offset,
                              struct s3f_error *err) {
    struct s3f__xz_source *s = ud;
    struct s3f__cache_object *o = s->object;
    struct s3f__xz *z = s->xz;
    uint64_t bs = o->block_bytes, end = offset + len;
    if (!z || o->size > z->max_object || offset % bs || (end % bs && end != o->size) ||
        end > o->size)
        return s->fetch(s->ud, dst, len, offset, err); /* not whole blocks: the source */
    char *out = dst;
    uint64_t pos = offset;
    while (pos < end) {
        uint64_t b = pos / bs, blen = s3f__cache_block_len(o, b);
        if (s3f__xz_get(z, o, b, out + (pos - offset))) {
            pos += blen;
            continue;
        }
        /* a run of blocks the shared cache lacks: one read of the source, then each PUT */
        uint64_t run_end = pos + blen, after = run_end;
        while (run_end < end) {
            uint64_t nlen = s3f__cache_block_len(o, run_end / bs);
            if (s3f__xz_get(z, o, run_end / bs, out + (run_end - offset))) {
                after = run_end + nlen;
                break;
            }
            run_end += nlen;
            after = run_end;
        }
        enum s3f_status st = s->fetch(s->ud, out + (pos - offset), (size_t)(run_end - pos),
                                      pos, err);
        if (st)
            return st;
        for (uint64_t p = pos; p < run_end; p += bs)
            s3f__xz_put(z, o, p / bs, out + (p - offset));
        pos = after;
    }
    return S3F_OK;
}

bool s3f__xz_serves(const struct s3f__xz *z, uint64_t object_size) {
    return z && object_size <= z->max_object;
}

uint64_t s3f__xz_block_bytes(const struct s3f__xz *z) {
    return z->block_bytes;
}
