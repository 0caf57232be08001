/* The metrics registry (src/core/metrics.c, metrics_lib.c): counter, gauge and histogram
 * semantics, the bound on label combinations, the Prometheus text format, and 16 threads
 * updating one histogram and one counter with exact totals (run under ThreadSanitizer by
 * the tsan-unit step). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "testutil.h"

static const char *const ops[] = {"get", "put", NULL};
static const char *const classes[] = {"2xx", "4xx", "5xx", NULL};

struct found {
    const char *name, *l0, *l1;
    int hits;
    struct s3f_metric_sample s;
    uint64_t counts[S3F_METRIC_N_BUCKETS];
};

static int find(const struct s3f_metric_sample *s, void *ud) {
    struct found *f = ud;
    if (strcmp(s->name, f->name) ||
        (f->l0 && (s->n_labels < 1 || strcmp(s->label_values[0], f->l0))) ||
        (f->l1 && (s->n_labels < 2 || strcmp(s->label_values[1], f->l1))))
        return 0;
    f->hits++;
    f->s = *s;
    if (s->counts)
        memcpy(f->counts, s->counts, sizeof(f->counts));
    return 0;
}

static struct found lookup(struct s3f_metrics *m, const char *name, const char *l0,
                           const char *l1) {
    struct found f = {.name = name, .l0 = l0, .l1 = l1};
    s3f_metrics_foreach(m, find, &f);
    return f;
}

static void test_semantics(void) {
    struct s3f_metrics *m = s3f_metrics_new(0);
    CHECK(m != NULL);
    struct s3f_metric_def reqs = {"t_requests_total", "requests", S3F_METRIC_COUNTER,
                                  {"op", "status"}, {ops, classes}};
    struct s3f_metric_def depth = {"t_depth", "queue depth", S3F_METRIC_GAUGE, {NULL}, {NULL}};
    struct s3f_metric_def lat = {"t_seconds", "latency", S3F_METRIC_HISTOGRAM, {"op"}, {ops}};
    int r = s3f_metrics_register(m, &reqs), d = s3f_metrics_register(m, &depth),
        h = s3f_metrics_register(m, &lat);
    CHECK_INT(r, 0);
    CHECK_INT(d, 1);
    CHECK_INT(h, 2);
    CHECK_INT(s3f_metrics_register(m, &reqs), -1); /* a name once */
    size_t put4 = s3f_metrics_series(m, r, 1, 1);
    CHECK_INT(put4, 1 * 3 + 1);
    CHECK(s3f_metrics_series(m, r, 2, 0) == SIZE_MAX);
    CHECK(s3f_metrics_series(m, r, 0, 3) == SIZE_MAX);
    s3f_metrics_add(m, r, put4, 3);
    s3f_metrics_add(m, r, put4, 2);
    s3f_metrics_add(m, r, put4, -1);         /* a counter never goes down */
    s3f_metrics_add(m, r, 99, 1);            /* unknown series: ignored */
    s3f_metrics_add(m, 17, 0, 1);            /* unknown id: ignored */
    s3f_metrics_observe(m, r, 0, 1.0);       /* not a histogram: ignored */
    struct found f = lookup(m, "t_requests_total", "put", "4xx");
    CHECK_INT(f.hits, 1);
    CHECK(f.s.value == 5);
    CHECK_INT(f.s.n_labels, 2);
    CHECK_STR(f.s.label_names[1], "status");
    CHECK(lookup(m, "t_requests_total", "get", "2xx").s.value == 0);

    s3f_metrics_add(m, d, 0, 5);
    s3f_metrics_add(m, d, 0, -7);
    CHECK(lookup(m, "t_depth", NULL, NULL).s.value == -2);
    s3f_metrics_set(m, d, 0, 42);
    CHECK(lookup(m, "t_depth", NULL, NULL).s.value == 42);

    /* buckets: <= bound, cumulative; +Inf is the count; the sum in seconds */
    s3f_metrics_observe(m, h, 1, 0.0005);  /* the first bucket (le 0.0005) */
    s3f_metrics_observe(m, h, 1, 0.003);   /* le 0.005 */
    s3f_metrics_observe(m, h, 1, 100);     /* +Inf only */
    s3f_metrics_observe(m, h, 1, -1);      /* refused */
    f = lookup(m, "t_seconds", "put", NULL);
    CHECK_INT(f.s.count, 3);
    CHECK_INT(f.counts[0], 1);
    CHECK_INT(f.counts[2], 1); /* le 0.0025 */
    CHECK_INT(f.counts[3], 2); /* le 0.005 */
    CHECK_INT(f.counts[S3F_METRIC_N_BUCKETS - 1], 2);
    CHECK(f.s.sum > 100.0035 - 1e-6 && f.s.sum < 100.0035 + 1e-6);
    CHECK_INT(lookup(m, "t_seconds", "get", NULL).s.count, 0);

    /* the Prometheus text */
    char *text = NULL;
    size_t len = 0;
    struct s3f_metrics *regs[] = {m};
    CHECK_INT(s3f_metrics_prometheus(regs, 1, &text, &len), S3F_OK);
    CHECK(text && strlen(text) == len);
    CHECK(strstr(text, "# TYPE t_requests_total counter\n") != NULL);
    CHECK(strstr(text, "t_requests_total{op=\"put\",status=\"4xx\"} 5\n") != NULL);
    CHECK(strstr(text, "# TYPE t_depth gauge\nt_depth 42\n") != NULL);
    CHECK(strstr(text, "t_seconds_bucket{op=\"put\",le=\"0.005\"} 2\n") != NULL);
    CHECK(strstr(text, "t_seconds_bucket{op=\"put\",le=\"+Inf\"} 3\n") != NULL);
    CHECK(strstr(text, "t_seconds_count{op=\"put\"} 3\n") != NULL);
    free(text);
    s3f_metrics_free(m);
}

/* Two registries of the same metrics, told apart by their constant labels: one group per
 * name in the text (HELP and TYPE once), the constant label first. */
static void test_two_registries(void) {
    struct s3f_metrics *a = s3f_metrics_new(0), *b = s3f_metrics_new(0);
    struct s3f_metric_def reqs = {"t_requests_total", "requests", S3F_METRIC_COUNTER,
                                  {"op"}, {ops}};
    struct s3f_metric_def depth = {"t_depth", "queue depth", S3F_METRIC_GAUGE, {NULL}, {NULL}};
    CHECK_INT(s3f_metrics_set_label(a, "client", "read"), S3F_OK);
    CHECK_INT(s3f_metrics_set_label(b, "client", "write"), S3F_OK);
    CHECK_INT(s3f_metrics_set_label(b, "bad name", "x"), S3F_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 2; i++) {
        struct s3f_metrics *m = i ? b : a;
        CHECK_INT(s3f_metrics_register(m, &reqs), 0);
        CHECK_INT(s3f_metrics_register(m, &depth), 1);
        s3f_metrics_add(m, 0, 1, 10 + i);
        s3f_metrics_set(m, 1, 0, 7 + i);
    }
    struct s3f_metrics *regs[] = {a, b};
    char *text = NULL;
    CHECK_INT(s3f_metrics_prometheus(regs, 2, &text, NULL), S3F_OK);
    CHECK(strstr(text, "# TYPE t_requests_total counter\n"
                       "t_requests_total{client=\"read\",op=\"get\"} 0\n"
                       "t_requests_total{client=\"read\",op=\"put\"} 10\n"
                       "t_requests_total{client=\"write\",op=\"get\"} 0\n"
                       "t_requests_total{client=\"write\",op=\"put\"} 11\n"
                       "# HELP t_depth") != NULL);
    CHECK(strstr(text, "t_depth{client=\"read\"} 7\nt_depth{client=\"write\"} 8\n") != NULL);
    const char *first = strstr(text, "# TYPE t_depth");
    CHECK(first && !strstr(first + 1, "# TYPE t_depth"));
    free(text);
    s3f_metrics_free(a);
    s3f_metrics_free(b);
}

static void test_bound_refused(void) {
    static const char *const many[] = {"a", "b", "c", "d", "e", "f", "g", "h", NULL};
    struct s3f_metrics *m = s3f_metrics_new(20);
    struct s3f_metric_def big = {"t_big_total", "", S3F_METRIC_COUNTER, {"x", "y"}, {many, many}};
    CHECK_INT(s3f_metrics_register(m, &big), -1); /* 64 series > 20 */
    struct s3f_metric_def ok = {"t_ok_total", "", S3F_METRIC_COUNTER, {"x", "y"}, {many, ops}};
    CHECK_INT(s3f_metrics_register(m, &ok), 0);   /* 16 */
    struct s3f_metric_def more = {"t_more", "", S3F_METRIC_GAUGE, {"x"}, {many}};
    CHECK_INT(s3f_metrics_register(m, &more), -1); /* 16 + 8 > 20 */
    struct s3f_metric_def four = {"t_four", "", S3F_METRIC_HISTOGRAM, {"op", "c"}, {ops, ops}};
    CHECK_INT(s3f_metrics_register(m, &four), 1);  /* 16 + 4 = 20: the bound exactly */
    struct s3f_metric_def one = {"t_one", "", S3F_METRIC_GAUGE, {NULL}, {NULL}};
    CHECK_INT(s3f_metrics_register(m, &one), -1);
    /* bad definitions */
    struct s3f_metric_def badname = {"t bad", "", S3F_METRIC_GAUGE, {NULL}, {NULL}};
    CHECK_INT(s3f_metrics_register(m, &badname), -1);
    static const char *const none[] = {NULL};
    struct s3f_metric_def empty = {"t_empty", "", S3F_METRIC_GAUGE, {"x"}, {none}};
    CHECK_INT(s3f_metrics_register(m, &empty), -1);
    s3f_metrics_free(m);
    s3f_metrics_free(NULL);
}

static void test_library_metrics(void) {
    struct s3f_metrics *m = s3f__metrics_new_client();
    CHECK(m != NULL);
    CHECK_INT(s3f__metrics_op_index("GetObject"), S3F__MOP_GET_OBJECT);
    CHECK_INT(s3f__metrics_op_index("PutObject"), S3F__MOP_PUT_OBJECT);
    CHECK_INT(s3f__metrics_op_index("UploadPart"), S3F__MOP_UPLOAD_PART);
    size_t other = s3f__metrics_op_index("NoSuchOperation");
    CHECK_INT(other, s3f__metrics_op_index(NULL));
    CHECK_INT(s3f__metrics_status_class(204), S3F__MS_2XX);
    CHECK_INT(s3f__metrics_status_class(503), S3F__MS_5XX);
    CHECK_INT(s3f__metrics_status_class(0), S3F__MS_NETWORK);
    s3f_metrics_add(m, S3F__M_REQUESTS, s3f_metrics_series(m, S3F__M_REQUESTS, other,
                                                            S3F__MS_NETWORK), 1);
    CHECK(lookup(m, "s3flash_requests_total", "Other", "network").s.value == 1);
    s3f_metrics_free(m);
}

/* ---- 16 threads, one histogram ------------------------------------------------------ */
#define THREADS 16
#define PER_THREAD 20000

struct shared {
    struct s3f_metrics *m;
    int h, c;
    pthread_barrier_t go;
};

static void *hammer(void *arg) {
    struct shared *s = arg;
    pthread_barrier_wait(&s->go);
    for (int i = 0; i < PER_THREAD; i++) {
        s3f_metrics_observe(s->m, s->h, 0, (i % 4) * 0.001); /* 0, 1, 2, 3 ms */
        s3f_metrics_add(s->m, s->c, 0, 1);
    }
    return NULL;
}

static int scrape_during(const struct s3f_metric_sample *s, void *ud) {
    (void)s;
    (void)ud;
    return 0;
}

static void test_threads(void) {
    struct shared s = {.m = s3f_metrics_new(0)};
    struct s3f_metric_def h = {"t_h_seconds", "", S3F_METRIC_HISTOGRAM, {NULL}, {NULL}};
    struct s3f_metric_def c = {"t_c_total", "", S3F_METRIC_COUNTER, {NULL}, {NULL}};
    s.h = s3f_metrics_register(s.m, &h);
    s.c = s3f_metrics_register(s.m, &c);
    pthread_barrier_init(&s.go, NULL, THREADS + 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, hammer, &s);
    pthread_barrier_wait(&s.go);
    for (int i = 0; i < 20; i++) /* snapshots while they update: no lock, no race */
        s3f_metrics_foreach(s.m, scrape_during, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct found f = lookup(s.m, "t_h_seconds", NULL, NULL);
    CHECK_INT(f.s.count, (long long)THREADS * PER_THREAD);
    CHECK_INT(f.counts[0], (long long)THREADS * PER_THREAD / 4);     /* 0 (le 0.0005) */
    CHECK_INT(f.counts[1], (long long)THREADS * PER_THREAD / 2);     /* 1 ms (le 0.001) */
    CHECK_INT(f.counts[3], (long long)THREADS * PER_THREAD);         /* 2, 3 ms (le 0.005) */
    double want = THREADS * (PER_THREAD / 4) * 0.006;
    CHECK(f.s.sum > want - 1e-3 && f.s.sum < want + 1e-3);
    CHECK(lookup(s.m, "t_c_total", NULL, NULL).s.value == (double)THREADS * PER_THREAD);
    pthread_barrier_destroy(&s.go);
    s3f_metrics_free(s.m);
}

int main(void) {
    test_semantics();
    test_two_registries();
    test_bound_refused();
    test_library_metrics();
    test_threads();
    return test_summary();
}
