/* The OTLP encoding of the metrics (metrics.h: s3f__otlp_encode): a minimal protobuf
 * writer (varints, length-delimited fields, fixed64 and doubles little-endian) producing
 * opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest. Each nested
 * message is written into a buffer of its own, then appended to its parent with its length.
 * Field numbers: opentelemetry/proto/{collector/metrics/v1/metrics_service,metrics/v1/
 * metrics,common/v1/common,resource/v1/resource}.proto. */
#include <stdlib.h>

#include "core/metrics.h"

#define OUT_MAX (64u << 20)

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

struct pb {
    enum s3f_status st;
};

static void pb_put(struct pb *p, enum s3f_status st) {
    if (st && !p->st)
        p->st = st;
}

static void varint(struct pb *p, struct s3f__buf *b, uint64_t v) {
    uint8_t x[10];
    size_t n = 0;
    do {
        x[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            x[n] |= 0x80;
        n++;
    } while (v);
    pb_put(p, s3f__buf_append(b, x, n));
}

static void tag(struct pb *p, struct s3f__buf *b, unsigned field, unsigned wt) {
    varint(p, b, (uint64_t)field << 3 | wt);
}

static void bytes(struct pb *p, struct s3f__buf *b, unsigned field, const void *d, size_t n) {
    tag(p, b, field, WT_LEN);
    varint(p, b, n);
    if (n)
        pb_put(p, s3f__buf_append(b, d, n));
}

static void str(struct pb *p, struct s3f__buf *b, unsigned field, const char *s) {
    bytes(p, b, field, s, strlen(s));
}

static void raw64(struct pb *p, struct s3f__buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    pb_put(p, s3f__buf_append(b, x, 8));
}

static uint64_t bits(double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

static void fixed64(struct pb *p, struct s3f__buf *b, unsigned field, uint64_t v) {
    tag(p, b, field, WT_I64);
    raw64(p, b, v);
}

/* a sub-message: its buffer appended as a length-delimited field, then emptied */
static void msg(struct pb *p, struct s3f__buf *b, unsigned field, struct s3f__buf *sub) {
    bytes(p, b, field, sub->data, sub->len);
    s3f__buf_reset(sub);
}

/* KeyValue{key, AnyValue{string_value}} as field `field` of b */
static void attr(struct pb *p, struct s3f__buf *b, unsigned field, const char *k,
                 const char *v) {
    struct s3f__buf kv, any;
    s3f__buf_init(&kv, OUT_MAX);
    s3f__buf_init(&any, OUT_MAX);
    str(p, &kv, 1, k);
    str(p, &any, 1, v);
    msg(p, &kv, 2, &any);
    msg(p, b, field, &kv);
    s3f__buf_cleanup(&kv);
    s3f__buf_cleanup(&any);
}

static void histogram(struct pb *p, struct s3f__buf *dp, const struct s3f__metrics_captured *c) {
    const struct s3f_metric_sample *s = &c->s;
    fixed64(p, dp, 4, s->count);
    fixed64(p, dp, 5, bits(s->sum));
    /* bucket_counts (packed fixed64): per bucket, the +Inf one last; explicit_bounds */
    tag(p, dp, 6, WT_LEN);
    varint(p, dp, 8 * (s->n_buckets + 1));
    uint64_t below = 0;
    for (size_t i = 0; i < s->n_buckets; i++) {
        raw64(p, dp, c->counts[i] - below);
        below = c->counts[i];
    }
    raw64(p, dp, s->count - below);
    tag(p, dp, 7, WT_LEN);
    varint(p, dp, 8 * s->n_buckets);
    for (size_t i = 0; i < s->n_buckets; i++)
        raw64(p, dp, bits(s->bounds[i]));
}

/* one data point of a series into dp (NumberDataPoint or HistogramDataPoint) */
static void data_point(struct pb *p, struct s3f__buf *dp, const struct s3f__metrics_captured *c,
                       uint64_t start_ns, uint64_t now_ns) {
    const struct s3f_metric_sample *s = &c->s;
    bool hist = s->type == S3F_METRIC_HISTOGRAM;
    if (s->type != S3F_METRIC_GAUGE)
        fixed64(p, dp, 2, start_ns);
    fixed64(p, dp, 3, now_ns);
    if (!hist)
        fixed64(p, dp, 4, bits(s->value)); /* as_double */
    else
        histogram(p, dp, c);
    /* the attributes last, as protobuf's own encoders order fields by number */
    for (size_t l = 0; l < s->n_labels; l++)
        attr(p, dp, hist ? 9 : 7, s->label_names[l], s->label_values[l]);
}

static const char *unit_of(const char *name) {
    return strstr(name, "_seconds") ? "s" : strstr(name, "_bytes") ? "By" : NULL;
}

enum s3f_status s3f__otlp_encode(struct s3f_metrics *const *regs, size_t n_regs,
                                 const char *const *resource, uint64_t start_ns,
                                 uint64_t now_ns, struct s3f__buf *out) {
    struct s3f__metrics_captured *v = NULL;
    size_t n = 0;
    struct pb p = {.st = s3f__metrics_capture(regs, n_regs, &v, &n)};
    if (p.st)
        return p.st;
    struct s3f__buf rm, sub, scope, metric, data, dp;
    struct s3f__buf *bufs[] = {&rm, &sub, &scope, &metric, &data, &dp};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
        s3f__buf_init(bufs[i], OUT_MAX);
    /* Resource{attributes} */
    attr(&p, &sub, 1, "service.name", "s3flash");
    for (size_t i = 0; resource && resource[i] && resource[i + 1]; i += 2)
        attr(&p, &sub, 1, resource[i], resource[i + 1]);
    msg(&p, &rm, 1, &sub);
    /* ScopeMetrics{scope: InstrumentationScope{name}, metrics} */
    str(&p, &sub, 1, "s3flash");
    msg(&p, &scope, 1, &sub);
    for (size_t i = 0; i < n && !p.st; i++) {
        if (v[i].written)
            continue;
        const struct s3f_metric_sample *g = &v[i].s;
        str(&p, &metric, 1, g->name);
        if (g->help)
            str(&p, &metric, 2, g->help);
        if (unit_of(g->name))
            str(&p, &metric, 3, unit_of(g->name));
        for (size_t j = i; j < n; j++)
            if (!v[j].written && strcmp(v[j].s.name, g->name) == 0) {
                data_point(&p, &dp, &v[j], start_ns, now_ns);
                msg(&p, &data, 1, &dp);
                v[j].written = true;
            }
        if (g->type != S3F_METRIC_GAUGE) {
            tag(&p, &data, 2, WT_VARINT);
            varint(&p, &data, 2); /* AGGREGATION_TEMPORALITY_CUMULATIVE */
        }
        if (g->type == S3F_METRIC_COUNTER) {
            tag(&p, &data, 3, WT_VARINT);
            varint(&p, &data, 1); /* is_monotonic */
        }
        /* gauge 5, sum 7, histogram 9 */
        msg(&p, &metric, g->type == S3F_METRIC_GAUGE ? 5 : g->type == S3F_METRIC_COUNTER ? 7 : 9,
            &data);
        msg(&p, &scope, 2, &metric);
    }
    msg(&p, &rm, 2, &scope);
    msg(&p, out, 1, &rm);
    for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
        s3f__buf_cleanup(bufs[i]);
    free(v);
    return p.st;
}
