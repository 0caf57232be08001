/* The library's metrics (the S3F__M_* of metrics.h, docs/METRICS.md) and the Prometheus
 * text exposition format of registries (s3f_metrics_prometheus). */
#include <inttypes.h>
#include <stdlib.h>

#include "core/metrics.h"

static const char *const ops[] = {
    "GetObject", "HeadObject", "PutObject", "CopyObject", "DeleteObject", "DeleteObjects",
    "RenameObject", "CreateMultipartUpload", "UploadPart", "UploadPartCopy",
    "CompleteMultipartUpload", "AbortMultipartUpload", "ListParts", "ListMultipartUploads",
    "ListObjectsV2", "ListBuckets", "CreateBucket", "DeleteBucket", "HeadBucket",
    "CreateSession", "Other", NULL};
static const char *const statuses[] = {"2xx", "3xx", "4xx", "5xx", "network", NULL};
static const char *const directions[] = {"up", "down", NULL};
static const char *const reasons[] = {"throttle", "server", "network", "timeout",
                                      "bad_response", "credentials", NULL};

#define C S3F_METRIC_COUNTER
#define G S3F_METRIC_GAUGE
#define H S3F_METRIC_HISTOGRAM
static const struct s3f_metric_def defs[S3F__M_COUNT] = {
    [S3F__M_REQUESTS] = {"s3flash_requests_total",
                         "HTTP requests (attempts) sent to S3, by operation and status class",
                         C, {"op", "status"}, {ops, statuses}},
    [S3F__M_REQUEST_SECONDS] = {"s3flash_request_duration_seconds",
                                "Time of one attempt, from its start to its last byte", H,
                                {"op"}, {ops}},
    [S3F__M_FIRST_BYTE_SECONDS] = {"s3flash_request_first_byte_seconds",
                                   "Time of one attempt from its start to the first byte of "
                                   "the response", H, {"op"}, {ops}},
    [S3F__M_BYTES] = {"s3flash_bytes_total",
                      "Object data moved: bodies sent by PutObject and UploadPart (up, "
                      "retried attempts too), 2xx bodies received by GetObject (down)", C,
                      {"direction"}, {directions}},
    [S3F__M_RETRIES] = {"s3flash_retries_total", "Attempts retried, by reason", C, {"reason"},
                        {reasons}},
    [S3F__M_THROTTLES] = {"s3flash_throttles_total",
                          "Throttled attempts: HTTP 503 or 429, or a throttling error code "
                          "(SlowDown)", C, {NULL}, {NULL}},
    [S3F__M_CONNECTIONS] = {"s3flash_connections", "Connections (sockets) open now", G, {NULL},
                            {NULL}},
    [S3F__M_CONNECTIONS_OPENED] = {"s3flash_connections_opened_total", "Connections opened", C,
                                   {NULL}, {NULL}},
    [S3F__M_INFLIGHT] = {"s3flash_parts_in_flight", "Data requests (parts) in flight now", G,
                         {NULL}, {NULL}},
    [S3F__M_INFLIGHT_MAX] = {"s3flash_parts_in_flight_limit",
                             "The limit on data requests in flight", G, {NULL}, {NULL}},
    [S3F__M_POOL_IN_USE] = {"s3flash_pool_in_use_bytes",
                            "Bytes of the buffer pool held by transfers now", G, {NULL},
                            {NULL}},
    [S3F__M_POOL_LIMIT] = {"s3flash_pool_limit_bytes", "The buffer pool's limit", G, {NULL},
                           {NULL}},
    [S3F__M_POOL_WAITERS] = {"s3flash_pool_waiters",
                             "Threads waiting for buffer pool memory now", G, {NULL}, {NULL}},
    [S3F__M_CREDS_REFRESHES] = {"s3flash_credentials_refreshes_total",
                                "Credentials fetched by the provider (first fetch and "
                                "refreshes, failed ones too)", C, {NULL}, {NULL}},
    [S3F__M_CACHE_HITS] = {"s3flash_cache_hits_total", "Block cache blocks served", C, {NULL},
                           {NULL}},
    [S3F__M_CACHE_MISSES] = {"s3flash_cache_misses_total", "Block cache blocks not found", C,
                             {NULL}, {NULL}},
    [S3F__M_CACHE_HIT_BYTES] = {"s3flash_cache_hit_bytes_total",
                                "Bytes served from the block cache", C, {NULL}, {NULL}},
    [S3F__M_CACHE_INSERTED_BYTES] = {"s3flash_cache_inserted_bytes_total",
                                     "Bytes written into the block cache", C, {NULL}, {NULL}},
    [S3F__M_CACHE_DROPPED_BYTES] = {"s3flash_cache_insert_dropped_bytes_total",
                                    "Bytes not cached: queue full, no room, or a write error",
                                    C, {NULL}, {NULL}},
    [S3F__M_CACHE_EVICTED_BYTES] = {"s3flash_cache_evicted_bytes_total",
                                    "Bytes evicted from the block cache", C, {NULL}, {NULL}},
    [S3F__M_CACHE_ERRORS] = {"s3flash_cache_errors_total",
                             "Block cache operations that failed and were bypassed", C, {NULL},
                             {NULL}},
    [S3F__M_CACHE_XZ_HITS] = {"s3flash_cache_xz_hits_total",
                              "Blocks served from the shared cache (--cache-xz)", C, {NULL},
                              {NULL}},
    [S3F__M_CACHE_XZ_MISSES] = {"s3flash_cache_xz_misses_total",
                                "Blocks looked up in the shared cache and not served", C,
                                {NULL}, {NULL}},
    [S3F__M_CACHE_XZ_HIT_BYTES] = {"s3flash_cache_xz_hit_bytes_total",
                                   "Bytes served from the shared cache", C, {NULL}, {NULL}},
    [S3F__M_CACHE_XZ_INVALID] = {"s3flash_cache_xz_invalid_total",
                                 "Shared cache blocks refused by their checks", C, {NULL},
                                 {NULL}},
    [S3F__M_CACHE_XZ_ERRORS] = {"s3flash_cache_xz_errors_total",
                                "Shared cache GETs and PUTs that failed and were bypassed", C,
                                {NULL}, {NULL}},
    [S3F__M_CACHE_XZ_PUT_BYTES] = {"s3flash_cache_xz_put_bytes_total",
                                   "Bytes PUT into the shared cache", C, {NULL}, {NULL}},
};

struct s3f_metrics *s3f__metrics_new_client(void) {
    struct s3f_metrics *m = s3f_metrics_new(0);
    if (!m)
        return NULL;
    for (int i = 0; i < S3F__M_COUNT; i++)
        if (s3f_metrics_register(m, &defs[i]) != i) {
            s3f_metrics_free(m);
            return NULL;
        }
    return m;
}

size_t s3f__metrics_op_index(const char *operation) {
    size_t i = 0;
    for (; ops[i + 1]; i++)
        if (operation && strcmp(ops[i], operation) == 0)
            return i;
    return i; /* "Other" */
}

enum s3f__metric_status s3f__metrics_status_class(int http_status) {
    if (http_status >= 200 && http_status < 600)
        return (enum s3f__metric_status)(http_status / 100 - 2);
    return S3F__MS_NETWORK;
}

/* ---- the Prometheus text format ---------------------------------------------------- */

/* The samples of every registry, captured (histograms' counts copied), then written name
 * by name in the order the names first appear, so that each name is one group. */
struct prom {
    struct s3f__buf out;
    struct s3f__metrics_captured *v;
    size_t n, cap;
    enum s3f_status st;
};

static void put(struct prom *p, enum s3f_status st) {
    if (st && !p->st)
        p->st = st;
}

static int capture(const struct s3f_metric_sample *s, void *ud) {
    struct prom *p = ud;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 512;
        struct s3f__metrics_captured *v = realloc(p->v, cap * sizeof(*v));
        if (!v) {
            put(p, S3F_ERR_NO_MEMORY);
            return 1;
        }
        p->v = v;
        p->cap = cap;
    }
    struct s3f__metrics_captured *c = &p->v[p->n++];
    c->s = *s;
    c->written = false;
    if (s->counts) {
        memcpy(c->counts, s->counts, s->n_buckets * sizeof(*s->counts));
        c->s.counts = NULL; /* pointed at again when written (v may move) */
    }
    return 0;
}

enum s3f_status s3f__metrics_capture(struct s3f_metrics *const *regs, size_t n_regs,
                                     struct s3f__metrics_captured **out, size_t *n_out) {
    struct prom p = {.st = S3F_OK};
    for (size_t i = 0; i < n_regs && !p.st; i++)
        s3f_metrics_foreach(regs[i], capture, &p);
    if (p.st) {
        free(p.v);
        p.v = NULL;
        p.n = 0;
    }
    *out = p.v;
    *n_out = p.n;
    return p.st;
}

/* `{a="x",b="y"` then le, closed; values escaped: \, " and newline */
static void labels(struct prom *p, const struct s3f_metric_sample *s, const char *le) {
    for (size_t l = 0; l < s->n_labels; l++) {
        put(p, s3f__buf_appendf(&p->out, "%c%s=\"", l ? ',' : '{', s->label_names[l]));
        for (const char *v = s->label_values[l]; *v; v++)
            put(p, *v == '\\'   ? s3f__buf_appends(&p->out, "\\\\")
                   : *v == '"'  ? s3f__buf_appends(&p->out, "\\\"")
                   : *v == '\n' ? s3f__buf_appends(&p->out, "\\n")
                                : s3f__buf_append(&p->out, v, 1));
        put(p, s3f__buf_appends(&p->out, "\""));
    }
    if (le)
        put(p, s3f__buf_appendf(&p->out, "%sle=\"%s\"", s->n_labels ? "," : "{", le));
    if (s->n_labels || le)
        put(p, s3f__buf_appends(&p->out, "}"));
}

static void write_sample(struct prom *p, const struct s3f_metric_sample *s,
                         const uint64_t *counts) {
    if (s->type != S3F_METRIC_HISTOGRAM) {
        put(p, s3f__buf_appends(&p->out, s->name));
        labels(p, s, NULL);
        put(p, s3f__buf_appendf(&p->out, " %.17g\n", s->value));
        return;
    }
    char le[32];
    for (size_t b = 0; b < s->n_buckets; b++) {
        snprintf(le, sizeof(le), "%g", s->bounds[b]);
        put(p, s3f__buf_appendf(&p->out, "%s_bucket", s->name));
        labels(p, s, le);
        put(p, s3f__buf_appendf(&p->out, " %" PRIu64 "\n", counts[b]));
    }
    put(p, s3f__buf_appendf(&p->out, "%s_bucket", s->name));
    labels(p, s, "+Inf");
    put(p, s3f__buf_appendf(&p->out, " %" PRIu64 "\n%s_sum", s->count, s->name));
    labels(p, s, NULL);
    put(p, s3f__buf_appendf(&p->out, " %.17g\n%s_count", s->sum, s->name));
    labels(p, s, NULL);
    put(p, s3f__buf_appendf(&p->out, " %" PRIu64 "\n", s->count));
}

enum s3f_status s3f_metrics_prometheus(struct s3f_metrics *const *regs, size_t n_regs,
                                       char **out, size_t *out_len) {
    if (!out)
        return S3F_ERR_INVALID_ARGUMENT;
    *out = NULL;
    static const char *const types[] = {"counter", "gauge", "histogram"};
    struct prom p = {.st = S3F_OK};
    s3f__buf_init(&p.out, 64u << 20);
    p.st = s3f__metrics_capture(regs, n_regs, &p.v, &p.n);
    for (size_t i = 0; i < p.n && !p.st; i++) {
        if (p.v[i].written)
            continue;
        const struct s3f_metric_sample *g = &p.v[i].s;
        put(&p, s3f__buf_appendf(&p.out, "# HELP %s %s\n# TYPE %s %s\n", g->name,
                                 g->help ? g->help : "", g->name, types[g->type]));
        for (size_t j = i; j < p.n; j++)
            if (!p.v[j].written && strcmp(p.v[j].s.name, g->name) == 0) {
                write_sample(&p, &p.v[j].s, p.v[j].counts);
                p.v[j].written = true;
            }
    }
    put(&p, s3f__buf_append(&p.out, "", 0));
    free(p.v);
    if (p.st) {
        s3f__buf_cleanup(&p.out);
        return p.st;
    }
    size_t len = p.out.len;
    *out = s3f__buf_take(&p.out);
    if (!*out)
        return S3F_ERR_NO_MEMORY;
    if (out_len)
        *out_len = len;
    return S3F_OK;
}
