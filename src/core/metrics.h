/* The metrics registry (metrics.c) and the library's own metrics (metrics_lib.c): each
 * client owns one registry (struct s3f_client's `metrics`) with the metrics below,
 * registered in this order, so each S3F__M_* is its id. docs/METRICS.md lists them.
 *
 * Updates go through the S3F__METRIC_* macros: relaxed atomics on a cell of a fixed array,
 * no lock, no allocation; a build with -Dmetrics=false compiles them out (no-ops). */
#ifndef S3F_CORE_METRICS_H
#define S3F_CORE_METRICS_H

#include "core/core.h"

enum s3f__metric_id {
    S3F__M_REQUESTS,            /* counter {op, status} */
    S3F__M_REQUEST_SECONDS,     /* histogram {op} */
    S3F__M_FIRST_BYTE_SECONDS,  /* histogram {op} */
    S3F__M_BYTES,               /* counter {direction} */
    S3F__M_RETRIES,             /* counter {reason} */
    S3F__M_THROTTLES,           /* counter */
    S3F__M_CONNECTIONS,         /* gauge */
    S3F__M_CONNECTIONS_OPENED,  /* counter */
    S3F__M_INFLIGHT,            /* gauge: data requests in flight */
    S3F__M_INFLIGHT_MAX,        /* gauge */
    S3F__M_POOL_IN_USE,         /* gauge, bytes */
    S3F__M_POOL_LIMIT,          /* gauge, bytes */
    S3F__M_POOL_WAITERS,        /* gauge */
    S3F__M_CREDS_REFRESHES,     /* counter */
    S3F__M_CACHE_HITS,
    S3F__M_CACHE_MISSES,
    S3F__M_CACHE_HIT_BYTES,
    S3F__M_CACHE_INSERTED_BYTES,
    S3F__M_CACHE_DROPPED_BYTES,
    S3F__M_CACHE_EVICTED_BYTES,
    S3F__M_CACHE_ERRORS,
    S3F__M_CACHE_XZ_HITS,
    S3F__M_CACHE_XZ_MISSES,
    S3F__M_CACHE_XZ_HIT_BYTES,
    S3F__M_CACHE_XZ_INVALID,
    S3F__M_CACHE_XZ_ERRORS,
    S3F__M_CACHE_XZ_PUT_BYTES,
    S3F__M_COUNT
};

/* label values, in the order of the definitions' lists (ops: those named here) */
enum s3f__metric_op { S3F__MOP_GET_OBJECT = 0, S3F__MOP_PUT_OBJECT = 2, S3F__MOP_UPLOAD_PART = 8 };
enum s3f__metric_status { S3F__MS_2XX, S3F__MS_3XX, S3F__MS_4XX, S3F__MS_5XX, S3F__MS_NETWORK };
enum s3f__metric_direction { S3F__MD_UP, S3F__MD_DOWN };
enum s3f__metric_retry {
    S3F__MR_THROTTLE, S3F__MR_SERVER, S3F__MR_NETWORK, S3F__MR_TIMEOUT, S3F__MR_BAD_RESPONSE,
    S3F__MR_CREDENTIALS
};

/* A registry with the library's metrics (ids S3F__M_*); NULL when out of memory. */
struct s3f_metrics *s3f__metrics_new_client(void);
/* The op label's index of an S3 operation's name ("Other" for one not in the list). */
size_t s3f__metrics_op_index(const char *operation);
/* The status label of an attempt: its HTTP status, 0 when none came (transport failure). */
enum s3f__metric_status s3f__metrics_status_class(int http_status);

/* A snapshot of registries, in walk order, histograms' counts copied (the sample's
 * `counts` is NULL: use the copy); `written` is the caller's, false. Free *out. */
struct s3f__metrics_captured {
    struct s3f_metric_sample s;
    uint64_t counts[S3F_METRIC_N_BUCKETS];
    bool written;
};
enum s3f_status s3f__metrics_capture(struct s3f_metrics *const *regs, size_t n_regs,
                                     struct s3f__metrics_captured **out, size_t *n_out);

/* OTLP (otlp.c): the ExportMetricsServiceRequest (opentelemetry-proto, protobuf) of the
 * registries' values: one ResourceMetrics with service.name=s3flash and the `resource`
 * attributes (name, value pairs, NULL-terminated; may be NULL), one scope "s3flash",
 * one Metric per name (counters: monotonic cumulative Sum; gauges: Gauge; histograms:
 * cumulative explicit-bounds Histogram), its series as data points with their labels as
 * attributes, start_ns and now_ns (Unix nanoseconds) as their times. */
enum s3f_status s3f__otlp_encode(struct s3f_metrics *const *regs, size_t n_regs,
                                 const char *const *resource, uint64_t start_ns,
                                 uint64_t now_ns, struct s3f__buf *out);
/* The URL to POST to: the endpoint + "/v1/metrics" unless it ends with it already. Checks
 * it is http://HOST[:PORT][/PATH]; NULL (and err) if not, else malloc'd. */
char *s3f__otlp_url(const char *endpoint, struct s3f_error *err);

#ifdef S3F_METRICS
#define S3F__METRIC_ADD(m, id, series, n) s3f_metrics_add((m), (id), (series), (n))
#define S3F__METRIC_SET(m, id, series, v) s3f_metrics_set((m), (id), (series), (v))
#define S3F__METRIC_OBSERVE(m, id, series, s) s3f_metrics_observe((m), (id), (series), (s))
#else
#define S3F__METRIC_ADD(m, id, series, n) ((void)(m), (void)(series), (void)(n))
#define S3F__METRIC_SET(m, id, series, v) ((void)(m), (void)(series), (void)(v))
#define S3F__METRIC_OBSERVE(m, id, series, s) ((void)(m), (void)(series), (void)(s))
#endif

#endif
