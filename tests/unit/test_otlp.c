/* The OTLP encoding (src/core/otlp.c) and the push URL (metrics_export.c): a small
 * registry encoded byte for byte as the reference protobuf encoder writes it (bytes made by
 * opentelemetry-proto's ExportMetricsServiceRequest.SerializeToString()), a histogram's
 * buckets, and the endpoint's "/v1/metrics". The integration test
 * (tests/integration/test_metrics_otlp.py) decodes real pushes with that package. */
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "testutil.h"

static const char *const ops[] = {"get", NULL};

/* c_total{op="get"} 3 (counter), g -2 (gauge); resource k=v; start 1 ns, now 2 ns */
static const uint8_t expected[] = {
    0x0a, 0x90, 0x01, 0x0a, 0x25, 0x0a, 0x19, 0x0a, 0x0c, 0x73, 0x65, 0x72,
    0x76, 0x69, 0x63, 0x65, 0x2e, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x09, 0x0a,
    0x07, 0x73, 0x33, 0x66, 0x6c, 0x61, 0x73, 0x68, 0x0a, 0x08, 0x0a, 0x01,
    0x6b, 0x12, 0x03, 0x0a, 0x01, 0x76, 0x12, 0x67, 0x0a, 0x09, 0x0a, 0x07,
    0x73, 0x33, 0x66, 0x6c, 0x61, 0x73, 0x68, 0x12, 0x3c, 0x0a, 0x07, 0x63,
    0x5f, 0x74, 0x6f, 0x74, 0x61, 0x6c, 0x12, 0x01, 0x68, 0x3a, 0x2e, 0x0a,
    0x28, 0x11, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x19, 0x02,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x08, 0x40, 0x3a, 0x0b, 0x0a, 0x02, 0x6f, 0x70, 0x12, 0x05,
    0x0a, 0x03, 0x67, 0x65, 0x74, 0x10, 0x02, 0x18, 0x01, 0x12, 0x1c, 0x0a,
    0x01, 0x67, 0x12, 0x01, 0x68, 0x2a, 0x14, 0x0a, 0x12, 0x19, 0x02, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0xc0,
};

static void test_known_encoding(void) {
    struct s3f_metrics *m = s3f_metrics_new(16);
    struct s3f_metric_def c = {"c_total", "h", S3F_METRIC_COUNTER, {"op"}, {ops}};
    struct s3f_metric_def g = {"g", "h", S3F_METRIC_GAUGE, {NULL}, {NULL}};
    int ci = s3f_metrics_register(m, &c), gi = s3f_metrics_register(m, &g);
    CHECK(ci >= 0 && gi >= 0);
    s3f_metrics_add(m, ci, 0, 3);
    s3f_metrics_set(m, gi, 0, -2);
    const char *resource[] = {"k", "v", NULL};
    struct s3f__buf out;
    s3f__buf_init(&out, 0);
    CHECK_INT(s3f__otlp_encode(&m, 1, resource, 1, 2, &out), S3F_OK);
    CHECK_INT(out.len, sizeof(expected));
    CHECK(out.len == sizeof(expected) && memcmp(out.data, expected, out.len) == 0);
    for (size_t i = 0; i < out.len && i < sizeof(expected); i++)
        if ((uint8_t)out.data[i] != expected[i]) {
            test_fail(__FILE__, __LINE__, "byte %zu: 0x%02x, expected 0x%02x", i,
                      (uint8_t)out.data[i], expected[i]);
            break;
        }
    s3f__buf_cleanup(&out);
    s3f_metrics_free(m);
}

/* a histogram: bucket counts per bucket (not cumulative), +Inf last, then the bounds */
static void test_histogram(void) {
    struct s3f_metrics *m = s3f_metrics_new(16);
    struct s3f_metric_def h = {"h_seconds", NULL, S3F_METRIC_HISTOGRAM, {NULL}, {NULL}};
    int hi = s3f_metrics_register(m, &h);
    CHECK(hi >= 0);
    s3f_metrics_observe(m, hi, 0, 0.0001); /* bucket 0 (<= 0.0005) */
    s3f_metrics_observe(m, hi, 0, 0.0002);
    s3f_metrics_observe(m, hi, 0, 0.7);    /* <= 1: bucket 10 */
    s3f_metrics_observe(m, hi, 0, 100);    /* +Inf */
    struct s3f__buf out;
    s3f__buf_init(&out, 0);
    CHECK_INT(s3f__otlp_encode(&m, 1, NULL, 5, 6, &out), S3F_OK);
    /* the packed bucket_counts: tag 6|LEN (0x32), 17 * 8 bytes (0x88 0x01) */
    const uint8_t head[] = {0x32, 0x88, 0x01};
    const char *b = memmem(out.data, out.len, head, sizeof(head));
    CHECK(b != NULL);
    if (b) {
        uint64_t want[S3F_METRIC_N_BUCKETS + 1] = {[0] = 2, [10] = 1, [16] = 1};
        for (int i = 0; i <= S3F_METRIC_N_BUCKETS; i++) {
            uint64_t v = 0;
            for (int k = 0; k < 8; k++)
                v |= (uint64_t)(uint8_t)b[3 + 8 * i + k] << (8 * k);
            CHECK_INT(v, want[i]);
        }
        /* explicit_bounds: 16 doubles, the first 0.0005 */
        const char *e = b + 3 + 8 * (S3F_METRIC_N_BUCKETS + 1);
        CHECK_INT((uint8_t)e[0], 0x3a);
        CHECK_INT((uint8_t)e[1], 0x80);
        CHECK_INT((uint8_t)e[2], 0x01);
        double first;
        memcpy(&first, e + 3, 8);
        CHECK(first == 0.0005);
    }
    /* its unit */
    CHECK(memmem(out.data, out.len, "\x1a\x01s", 3) != NULL);
    s3f__buf_cleanup(&out);
    s3f_metrics_free(m);
}

static void url(const char *endpoint, const char *want) {
    struct s3f_error err;
    s3f_error_clear(&err);
    char *u = s3f__otlp_url(endpoint, &err);
    if (!want) {
        CHECK(u == NULL);
        CHECK_INT(err.status, S3F_ERR_INVALID_ARGUMENT);
    } else {
        CHECK(u != NULL);
        CHECK_STR(u ? u : "(null)", want);
    }
    free(u);
}

static void test_url(void) {
    url("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/metrics");
    url("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/metrics");
    url("http://collector/v1/metrics", "http://collector/v1/metrics");
    url("http://[::1]:4318/otlp", "http://[::1]:4318/otlp/v1/metrics");
    url("https://collector:4318", NULL);
    url("collector:4318", NULL);
    url("http://:4318", NULL);
    url("http://h:99999", NULL);
    url("http://h:12x", NULL);
}

int main(void) {
    test_known_encoding();
    test_histogram();
    test_url();
    return test_summary();
}
