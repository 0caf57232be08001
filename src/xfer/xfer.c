/* The transfer engine of a client: its own options, checked by s3f_client_new, which
 * composes the s3 client (src/s3/client.c) with the engine, and its teardown in
 * s3f_client_free; the per-client state (resolved settings, the buffer pool, the request
 * scheduler, the janitor) created on the client's first transfer. */
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "core/metrics.h"
#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define DEFAULT_PART_SIZE (8 * S3F__MIB)
#define DEFAULT_MEMORY_LIMIT (512 * S3F__MIB)

/* 512 MiB, or a quarter of the memory this process may use (its cgroup's limit, a
 * container's, where that is less than the RAM) if that is less; at least 16 MiB. */
static uint64_t default_memory_limit(void) {
    uint64_t q = s3f_memory_available() / 4 / S3F__MIB * S3F__MIB;
    if (q > DEFAULT_MEMORY_LIMIT)
        return DEFAULT_MEMORY_LIMIT;
    return q < 16 * S3F__MIB ? 16 * S3F__MIB : q;
}

/* ---- the engine's options and the client's composition -------------------------------- */

/* Check and keep the engine's options (they resolve on the first transfer). */
static enum s3f_status engine_new(const struct s3f_client_options *opts,
                                  struct s3f__xfer_engine **out, struct s3f_error *err) {
    *out = NULL;
    if (opts->part_size_bytes &&
        (opts->part_size_bytes < (5ull << 20) || opts->part_size_bytes > (5ull << 30))) {
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "part_size_bytes must be 5 MiB to 5 GiB, got %llu",
                              (unsigned long long)opts->part_size_bytes);
    }
    if (opts->memory_limit_bytes && opts->memory_limit_bytes < (16ull << 20)) {
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "memory_limit_bytes must be at least 16 MiB, got %llu",
                              (unsigned long long)opts->memory_limit_bytes);
    }
    if (opts->throughput_target_gbps < 0 ||
        opts->throughput_target_gbps != opts->throughput_target_gbps) {
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "throughput_target_gbps must be positive (or 0 for the default)");
    }
    if ((unsigned)opts->checksum > S3F_CHECKSUM_CRC64NVME) {
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "unknown checksum algorithm %d", (int)opts->checksum);
    }
    if (opts->cache_block_bytes &&
        (opts->cache_block_bytes < (64ull << 10) || opts->cache_block_bytes > (64ull << 20) ||
         (opts->cache_block_bytes & (opts->cache_block_bytes - 1)))) {
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "cache_block_bytes must be a power of two from 64 KiB to 64 MiB, "
                              "got %llu",
                              (unsigned long long)opts->cache_block_bytes);
    }
    struct s3f__xfer_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    if (opts->cache_dir && opts->cache_dir[0] && !(e->cache_dir = strdup(opts->cache_dir))) {
        free(e);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    }
    if (opts->cache_xz_bucket && opts->cache_xz_bucket[0] &&
        !(e->cache_xz_bucket = strdup(opts->cache_xz_bucket))) {
        free(e->cache_dir);
        free(e);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    }
    e->cache_max_bytes = opts->cache_max_bytes;
    e->cache_min_free_bytes = opts->cache_min_free_bytes;
    e->cache_block_bytes = opts->cache_block_bytes;
    e->throughput_target_gbps = opts->throughput_target_gbps;
    e->part_size_bytes = opts->part_size_bytes;
    e->memory_limit_bytes = opts->memory_limit_bytes;
    e->memory_wait_timeout_ms = opts->memory_wait_timeout_ms;
    e->max_inflight_requests = opts->max_inflight_requests;
    e->checksum = opts->checksum;
    pthread_mutex_init(&e->lock, NULL);
    *out = e;
    return S3F_OK;
}

/* The pool's question before it fails a blocked acquirer: are data requests in flight or
 * queued (they give their memory back when they finish)? */
static bool engine_busy(void *ud) {
    struct s3f__sched *s = ud;
    pthread_mutex_lock(&s->lock);
    bool busy = s->inflight > 0 || s->cursor != NULL;
    pthread_mutex_unlock(&s->lock);
    return busy;
}

static void shared_free(struct s3f__xfer_shared *x) {
    s3f__janitor_cleanup(&x->janitor);
    s3f__sched_cleanup(&x->sched);
    s3f__bdp_cleanup(&x->bdp);
    s3f__pool_cleanup(&x->pool);
    s3f__cache_free(x->cache);
    s3f__xz_free(x->xz);
    free(x);
}

/* After the transport is gone: the state, then the options. NULL ok. */
static void engine_free(struct s3f__xfer_engine *e) {
    if (!e)
        return;
    if (e->shared)
        shared_free(e->shared);
    pthread_mutex_destroy(&e->lock);
    free(e->cache_dir);
    free(e->cache_xz_bucket);
    free(e);
}

/* ---- the block cache's origin: the S3 operations it needs, given to it (cache/ calls no
 * operation itself) ---- */

static enum s3f_status origin_head(void *ud, const char *bucket, const char *key,
                                   const char *version_id, struct s3f_object_info *info) {
    return s3f_head_object(ud, bucket, key, version_id, info, NULL);
}

struct region_sink {
    char *dst;
    uint64_t start, len;
};

static int region_write(void *ud, const void *data, size_t len, uint64_t offset) {
    struct region_sink *r = ud;
    if (offset < r->start || offset + len > r->start + r->len)
        return 1;
    memcpy(r->dst + (offset - r->start), data, len);
    return 0;
}

static enum s3f_status origin_get(void *ud, const char *bucket, const char *key,
                                  const char *etag, void *dst, size_t len, uint64_t offset,
                                  struct s3f_error *err) {
    struct region_sink r = {dst, offset, len};
    struct s3f_get_options go;
    memset(&go, 0, sizeof(go));
    go.has_range = 1;
    go.range_start = offset;
    go.range_end = offset + len - 1;
    go.if_match = etag;
    return s3f_get_object(ud, bucket, key, &go, region_write, &r, NULL, err);
}

const struct s3f__cache_origin s3f__xfer_cache_origin = {origin_head, origin_get};

/* ---- the shared cache's requests (cache/xz.c calls no operation itself) ---- */

struct split_sink {
    char *hdr, *data;
    uint64_t hdr_len, data_len, got;
};

/* The body's first hdr_len bytes into hdr, the next data_len into data; more: stop. */
static int split_write(void *ud, const void *data, size_t len, uint64_t offset) {
    struct split_sink *s = ud;
    if (offset + len > s->hdr_len + s->data_len)
        return 1;
    const char *p = data;
    for (uint64_t at = offset; at < offset + len;) {
        uint64_t n;
        if (at < s->hdr_len) {
            n = s->hdr_len - at < offset + len - at ? s->hdr_len - at : offset + len - at;
            memcpy(s->hdr + at, p + (at - offset), (size_t)n);
        } else {
            n = offset + len - at;
            memcpy(s->data + (at - s->hdr_len), p + (at - offset), (size_t)n);
        }
        at += n;
    }
    if (offset + len > s->got)
        s->got = offset + len;
    return 0;
}

static enum s3f_status xz_get(void *ud, const char *bucket, const char *key, void *hdr,
                              size_t hdr_len, void *data, size_t data_len, uint64_t *got,
                              struct s3f_error *err) {
    struct split_sink s = {hdr, data, hdr_len, data_len, 0};
    enum s3f_status st = s3f_get_object(ud, bucket, key, NULL, split_write, &s, NULL, err);
    *got = s.got;
    return st;
}

static enum s3f_status xz_put(void *ud, const char *bucket, const char *key, const void *data,
                              size_t len, struct s3f_error *err) {
    return s3f_put_object(ud, bucket, key, data, len, NULL, NULL, err);
}

static const struct s3f__xz_ops xz_ops = {xz_get, xz_put};

/* The shared cache (cache_xz_bucket), its PUT queue inside the memory limit as the block
 * cache's is. Without memory for the queue it is not used (a WARN line). */
static void open_xz(struct s3f_client *c, const struct s3f__xfer_engine *o,
                    struct s3f__xfer_shared *x) {
    if (!o->cache_xz_bucket)
        return;
    /* half the local cache's share of what is left, and room for the blocks' headers (each
     * body is a block, its names and 56 bytes: a queue of one 1 MiB block must take one) */
    uint64_t q = s3f__cache_queue_bytes(x->memory_limit, S3F__CACHE_BLOCK_DEFAULT) / 2;
    struct s3f__xz_options zo = {
        .bucket = o->cache_xz_bucket,
        .scope = s3f_client_endpoint(c),
        .block_bytes = o->cache_block_bytes,
        .queue_bytes = q ? q + ((uint64_t)128 << 10) : 0,
        .logger = &c->logger,
        .ops = &xz_ops,
        .ops_ud = c,
    };
    struct s3f_error zerr;
    s3f_error_clear(&zerr);
    if (!zo.queue_bytes)
        s3f__log(&c->logger, S3F_LOG_WARN,
                 "shared cache %s is not used: memory_limit_bytes (%llu MiB) leaves no room "
                 "for its queue; raise memory_limit_bytes",
                 o->cache_xz_bucket, (unsigned long long)(x->memory_limit >> 20));
    else if (s3f__xz_open(&zo, &x->xz, &zerr))
        s3f__log(&c->logger, S3F_LOG_WARN, "shared cache %s is not used: %s",
                 o->cache_xz_bucket, zerr.message);
    else
        x->memory_limit -= zo.queue_bytes;
}

/* The block cache (cache_dir), its insert queue inside the memory limit: the queue takes
 * its share (s3f__cache_queue_bytes) off x->memory_limit, and the buffer pool gets the
 * rest. A cache that cannot be opened is bypassed (a WARN line), never an error of the
 * transfers; the pool then keeps the whole limit. */
static void open_cache(struct s3f_client *c, const struct s3f__xfer_engine *o,
                       struct s3f__xfer_shared *x) {
    if (!o->cache_dir)
        return;
    uint64_t bs = o->cache_block_bytes ? o->cache_block_bytes : S3F__CACHE_BLOCK_DEFAULT;
    struct s3f__cache_options co = {
        .dir = o->cache_dir,
        .max_bytes = o->cache_max_bytes,
        .min_free_bytes = o->cache_min_free_bytes,
        .block_bytes = o->cache_block_bytes,
        .logger = &c->logger,
        .scope = s3f_client_endpoint(c),
        .queue_bytes = s3f__cache_queue_bytes(x->memory_limit, bs),
    };
    struct s3f_error cerr;
    s3f_error_clear(&cerr);
    if (!co.queue_bytes)
        s3f__log(&c->logger, S3F_LOG_WARN,
                 "cache %s is not used: two blocks of cache_block_bytes (%llu MiB each) are "
                 "more than half of memory_limit_bytes (%llu MiB), which holds the cache's "
                 "insert queue; lower cache_block_bytes or raise memory_limit_bytes",
                 o->cache_dir, (unsigned long long)(bs >> 20),
                 (unsigned long long)(x->memory_limit >> 20));
    else if (s3f__cache_open(&co, &x->cache, &cerr))
        s3f__log(&c->logger, S3F_LOG_WARN, "cache %s is not used: %s", o->cache_dir,
                 cerr.message);
    else
        x->memory_limit -= co.queue_bytes;
}

enum s3f_status s3f__xfer_shared_get(struct s3f_client *c, struct s3f__xfer_shared **out,
                                     struct s3f_error *err) {
    if (!c) /* a public call with the NULL a failed s3f_client_new leaves */
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "transfer", NULL,
                              "client is NULL");
    enum s3f_status st = S3F_OK;
    struct s3f__xfer_engine *e = c->xfer;
    pthread_mutex_lock(&e->lock);
    if (e->shared) {
        *out = e->shared;
        goto out;
    }
    struct s3f__xfer_shared *x = calloc(1, sizeof(*x));
    if (!x) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "transfer", NULL, "out of memory");
        goto out;
    }
    const struct s3f__xfer_engine *o = e;
    x->target_gbps = o->throughput_target_gbps > 0 ? o->throughput_target_gbps : 10;
    x->part_size = o->part_size_bytes ? o->part_size_bytes : DEFAULT_PART_SIZE;
    x->memory_limit = o->memory_limit_bytes ? o->memory_limit_bytes : default_memory_limit();
    x->data_connections = s3f__s3_data_connections(c);
    x->inflight_fixed = o->max_inflight_requests != 0;
    x->max_inflight = o->max_inflight_requests
                          ? o->max_inflight_requests
                          : s3f__plan_inflight(x->target_gbps, x->data_connections);
    x->checksum = o->checksum == S3F_CHECKSUM_DEFAULT ? S3F_CHECKSUM_CRC32C : o->checksum;
    open_cache(c, o, x);
    open_xz(c, o, x);
    if (s3f__pool_init(&x->pool, S3F__POOL_CHUNK, x->memory_limit)) {
        s3f__cache_free(x->cache);
        s3f__xz_free(x->xz);
        free(x);
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "transfer", NULL, "out of memory");
        goto out;
    }
    s3f__sched_init(&x->sched, x->max_inflight);
    x->pool.wait_timeout_ms = o->memory_wait_timeout_ms;
    x->pool.busy = engine_busy;
    x->pool.busy_ud = &x->sched;
    s3f__bdp_init(&x->bdp);
    s3f__janitor_init(&x->janitor);
    x->client = c;
    s3f__log(&c->logger, S3F_LOG_DEBUG,
             "transfers: part size %llu, memory limit %llu, %u requests in flight (%.1f Gbit/s "
             "target), checksum %s",
             (unsigned long long)x->part_size, (unsigned long long)x->memory_limit,
             x->max_inflight, x->target_gbps,
             x->checksum == S3F_CHECKSUM_NONE ? "none" : s3f__checksum_algorithm_name(x->checksum));
    e->shared = x;
    *out = x;
out:
    pthread_mutex_unlock(&e->lock);
    return st;
}

enum s3f_status s3f__xfer_whole_get_args(struct s3f_client *c, const char *op_name,
                                         const char *bucket, const char *key,
                                         const struct s3f_download_options **opts,
                                         struct s3f__xfer_shared **x, struct s3f_error *err) {
    static const struct s3f_download_options defaults;
    if (!*opts)
        *opts = &defaults;
    if ((*opts)->range_offset || (*opts)->range_bytes)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "a range is for s3f_download_iov, _buffer and _file");
    enum s3f_status st = s3f__op_check_args(op_name, bucket, key, true, err);
    if (st)
        return st;
    return s3f__xfer_shared_get(c, x, err);
}

/* The snapshot's collector of the engine (docs/METRICS.md): what s3f_client_stats reads, the
 * pool, the scheduler and the block cache, set into the client's gauges and counters. */
static void collect_metrics(struct s3f_metrics *m, void *ud) {
    struct s3f_client *c = ud;
    struct s3f__xfer_shared *x = NULL;
    if (s3f__xfer_shared_get(c, &x, NULL))
        return;
    struct s3f_client_stats s;
    s3f_client_stats(c, &s, 0);
    struct s3f__pool_stats ps;
    s3f__pool_stats(&x->pool, &ps);
    const struct {
        enum s3f__metric_id id;
        uint64_t v;
    } set[] = {
        {S3F__M_INFLIGHT, s.inflight_requests}, {S3F__M_INFLIGHT_MAX, s.max_inflight_requests},
        {S3F__M_POOL_IN_USE, s.pool_in_use_bytes}, {S3F__M_POOL_LIMIT, s.pool_limit_bytes},
        {S3F__M_POOL_WAITERS, ps.waiters}, {S3F__M_CACHE_HITS, s.cache_hits},
        {S3F__M_CACHE_MISSES, s.cache_misses}, {S3F__M_CACHE_HIT_BYTES, s.cache_hit_bytes},
        {S3F__M_CACHE_INSERTED_BYTES, s.cache_inserted_bytes},
        {S3F__M_CACHE_DROPPED_BYTES, s.cache_insert_dropped_bytes},
        {S3F__M_CACHE_EVICTED_BYTES, s.cache_evicted_bytes},
        {S3F__M_CACHE_ERRORS, s.cache_errors},
        {S3F__M_CACHE_XZ_HITS, s.cache_xz_hits},
        {S3F__M_CACHE_XZ_MISSES, s.cache_xz_misses},
        {S3F__M_CACHE_XZ_HIT_BYTES, s.cache_xz_hit_bytes},
        {S3F__M_CACHE_XZ_INVALID, s.cache_xz_invalid},
        {S3F__M_CACHE_XZ_ERRORS, s.cache_xz_errors + s.cache_xz_put_errors},
        {S3F__M_CACHE_XZ_PUT_BYTES, s.cache_xz_put_bytes},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(set); i++)
        s3f_metrics_set(m, set[i].id, 0, (int64_t)set[i].v);
}

enum s3f_status s3f_client_new(const struct s3f_client_options *opts, struct s3f_client **out,
                               struct s3f_error *err) {
    static const struct s3f_client_options defaults;
    if (!opts)
        opts = &defaults;
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_client_new", NULL,
                              "out must not be NULL");
    *out = NULL;
    s3f_error_clear(err);
    struct s3f__xfer_engine *e;
    enum s3f_status st = engine_new(opts, &e, err);
    if (st)
        return st;
    if ((st = s3f__s3_client_new(opts, out, err))) {
        engine_free(e);
        return st;
    }
    (*out)->xfer = e;
    if (s3f_metrics_add_collector((*out)->metrics, collect_metrics, *out)) {
        s3f_client_free(*out);
        *out = NULL;
        return s3f__error_set(err, S3F_ERR_INTERNAL, "s3f_client_new", NULL,
                              "no room for the engine's metrics collector");
    }
    return S3F_OK;
}

void s3f_client_free(struct s3f_client *c) {
    if (!c)
        return;
    struct s3f__xfer_engine *e = c->xfer;
    /* the janitor's last tries need the transport; the pool and scheduler outlive it (a
     * request's completion may still hand back buffers while the transport stops) */
    if (e && e->shared) {
        s3f__janitor_stop(e->shared);
        s3f__xz_stop(e->shared->xz); /* its queued PUTs need the transport too */
    }
    s3f__s3_client_free(c);
    engine_free(e);
}

double s3f__xfer_target_bps(const struct s3f__xfer_shared *x) {
    return x->target_gbps * 1e9 / 8;
}

void s3f__xfer_observe(struct s3f__xfer_shared *x, uint64_t bytes, uint64_t latency_ns,
                       uint64_t body_ns) {
    s3f__bdp_sample(&x->bdp, bytes, latency_ns, body_ns);
    if (__atomic_load_n(&x->inflight_fixed, __ATOMIC_RELAXED))
        return;
    struct s3f__bdp_estimate e;
    s3f__bdp_get(&x->bdp, &e);
    if (e.samples < 4)
        return; /* the plan stands until a few requests were measured */
    /* at most twice the plan: a slow server (not a slow link) also measures slow
     * connections, and more requests would only queue there */
    uint32_t ceiling = x->data_connections < 2 * x->max_inflight ? x->data_connections
                                                                 : 2 * x->max_inflight;
    if (ceiling < x->max_inflight)
        ceiling = x->max_inflight;
    uint32_t n = s3f__bdp_inflight(&e, s3f__xfer_target_bps(x), x->part_size, ceiling, 0);
    if (n < x->max_inflight)
        n = x->max_inflight;
    pthread_mutex_lock(&x->sched.lock);
    uint32_t cur = x->sched.max_inflight;
    pthread_mutex_unlock(&x->sched.lock);
    if (n != cur) {
        if (x->client)
            s3f__log(&x->client->logger, S3F_LOG_DEBUG,
                     "transfers: %u requests in flight (was %u): %.1f MB/s per connection, "
                     "%.1f ms to the first byte, %u requests measured",
                     n, cur, e.conn_bps / 1e6, e.latency_s * 1e3, e.samples);
        s3f__sched_set_max(&x->sched, n);
    }
}

void s3f__xfer_observe_timing(struct s3f__xfer_shared *x, const struct s3f__xfer_timing *t) {
    if (!t->first_ns || t->first_ns < t->start_ns)
        return;
    /* the first piece arrived with the first byte: the body's rate is over the rest */
    s3f__xfer_observe(x, t->bytes - t->first_len, t->first_ns - t->start_ns,
                      t->last_ns - t->first_ns);
}

void s3f_client_set_max_inflight_requests(struct s3f_client *c, uint32_t n) {
    struct s3f__xfer_shared *x = NULL;
    if (!c || s3f__xfer_shared_get(c, &x, NULL))
        return;
    if (n > x->data_connections)
        n = x->data_connections;
    if (n < 1)
        n = 1;
    __atomic_store_n(&x->inflight_fixed, true, __ATOMIC_RELAXED);
    s3f__sched_set_max(&x->sched, n);
}

void s3f_client_cache_flush(struct s3f_client *c) {
    struct s3f__xfer_shared *x = NULL;
    if (!c || s3f__xfer_shared_get(c, &x, NULL))
        return;
    if (x->cache)
        s3f__cache_flush(x->cache);
    s3f__xz_flush(x->xz);
}

void s3f_client_stats(struct s3f_client *c, struct s3f_client_stats *out, int reset_high_water) {
    memset(out, 0, sizeof(*out));
    struct s3f__xfer_shared *x = NULL;
    if (!c || s3f__xfer_shared_get(c, &x, NULL))
        return;
    struct s3f__pool_stats ps;
    s3f__pool_stats(&x->pool, &ps);
    out->part_size_bytes = x->part_size;
    out->pool_limit_bytes = (uint64_t)ps.max_chunks * ps.chunk_size;
    out->pool_in_use_bytes = (uint64_t)ps.in_use * ps.chunk_size;
    out->pool_high_water_bytes = (uint64_t)ps.high_water * ps.chunk_size;
    out->pool_allocated_bytes = (uint64_t)ps.n_allocated * ps.chunk_size;
    pthread_mutex_lock(&x->sched.lock);
    out->max_inflight_requests = x->sched.max_inflight;
    out->inflight_requests = x->sched.inflight;
    out->inflight_high_water = x->sched.inflight_high_water;
    out->requests_started = x->sched.started;
    if (reset_high_water)
        x->sched.inflight_high_water = x->sched.inflight;
    pthread_mutex_unlock(&x->sched.lock);
    out->pending_aborts = s3f__janitor_pending(&x->janitor);
    struct s3f__bdp_estimate e;
    s3f__bdp_get(&x->bdp, &e);
    out->connection_bytes_per_s = e.conn_bps;
    out->first_byte_latency_s = e.latency_s;
    out->estimate_samples = e.samples;
    if (reset_high_water)
        s3f__pool_reset_high_water(&x->pool);
    if (x->cache) {
        struct s3f__cache_counters n;
        s3f__cache_counters(x->cache, &n);
        out->cache_hits = n.hits;
        out->cache_misses = n.misses;
        out->cache_hit_bytes = n.hit_bytes;
        out->cache_inserted_bytes = n.inserted_bytes;
        out->cache_errors = n.errors;
        out->cache_insert_pending_bytes = n.insert_pending_bytes;
        out->cache_insert_dropped_bytes = n.insert_dropped_bytes;
        out->cache_evicted_bytes = n.evicted_bytes;
    }
    if (x->xz) {
        struct s3f__xz_counters z;
        s3f__xz_counters(x->xz, &z);
        out->cache_xz_hits = z.hits;
        out->cache_xz_misses = z.misses;
        out->cache_xz_hit_bytes = z.hit_bytes;
        out->cache_xz_invalid = z.invalid;
        out->cache_xz_errors = z.errors;
        out->cache_xz_puts = z.puts;
        out->cache_xz_put_bytes = z.put_bytes;
        out->cache_xz_put_errors = z.put_errors;
        out->cache_xz_put_dropped_bytes = z.put_dropped_bytes;
        out->cache_xz_put_pending_bytes = z.put_pending_bytes;
    }
}

char *s3f__xfer_checksum_field(struct s3f_object_info *info, enum s3f_checksum_algorithm alg,
                               size_t *len) {
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
    case S3F_CHECKSUM_CRC32C:
        *len = sizeof(info->checksum_crc32c);
        return info->checksum_crc32c;
    case S3F_CHECKSUM_CRC32:
        *len = sizeof(info->checksum_crc32);
        return info->checksum_crc32;
    case S3F_CHECKSUM_CRC64NVME:
        *len = sizeof(info->checksum_crc64nvme);
        return info->checksum_crc64nvme;
    default:
        *len = 0;
        return NULL;
    }
}

size_t s3f__xfer_iov_find(const uint64_t *iov_end, size_t n, uint64_t pos) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (iov_end[mid] <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void s3f__xfer_choose_checksum(const char *crc32c, const char *crc32, const char *crc64nvme,
                               enum s3f_checksum_algorithm pref, struct s3f__checksum *ck,
                               char *want, size_t want_len) {
    static const enum s3f_checksum_algorithm order[] = {
        S3F_CHECKSUM_CRC64NVME, S3F_CHECKSUM_CRC32C, S3F_CHECKSUM_CRC32};
    const char *vals[] = {crc64nvme, crc32c, crc32};
    int pick = -1;
    for (int i = 0; i < 3; i++)
        if (vals[i][0] && !strchr(vals[i], '-') && (pick < 0 || order[i] == pref))
            pick = i;
    s3f__checksum_init(ck, pick < 0 ? S3F_CHECKSUM_NONE : order[pick]);
    want[0] = '\0';
    if (pick >= 0)
        s3f__strlcpy(want, vals[pick], want_len);
}

void s3f__xfer_report_checksum(struct s3f_object_info *info, const struct s3f__checksum *ck) {
    size_t n;
    char *field = s3f__xfer_checksum_field(info, ck->alg, &n);
    if (!field || (field[0] && !strchr(field, '-')))
        return;
    char b64[S3F__CHECKSUM_B64_MAX];
    s3f__checksum_b64(ck, b64);
    s3f__strlcpy(field, b64, n);
}
