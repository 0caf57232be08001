/* The metrics registry (s3flash.h: s3f_metrics_*). A registry is a fixed array of at most
 * MAX_METRICS metrics, each with one array of atomic cells allocated at registration: a
 * counter or gauge has one cell per series, a histogram N_BUCKETS + 2 (a count per bucket,
 * the +Inf bucket, the sum in nanoseconds). Updates are relaxed atomic adds on a cell, from
 * any thread, with no lock; registration publishes a metric with a release store of the
 * count, which a snapshot reads with acquire. Memory is bounded by max_series. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/metrics.h"

#define MAX_METRICS 64
#define MAX_LABEL_VALUES 64
#define MAX_COLLECTORS 4
#define HIST_CELLS (S3F_METRIC_N_BUCKETS + 2)

static const double bucket_bounds[S3F_METRIC_N_BUCKETS] = S3F_METRIC_BUCKET_BOUNDS;

struct metric {
    struct s3f_metric_def def;
    size_t n_labels;
    size_t n_values[S3F_METRIC_MAX_LABELS];
    size_t n_series;
    _Atomic int64_t *cells;
};

struct s3f_metrics {
    char *label_name, *label_value; /* the constant label (s3f_metrics_set_label), or NULL */
    size_t max_series, used_series;
    struct metric metrics[MAX_METRICS];
    _Atomic size_t n_metrics;
    struct {
        s3f_metrics_collect_fn fn;
        void *ud;
    } collectors[MAX_COLLECTORS];
    _Atomic size_t n_collectors;
    pthread_mutex_t collect_lock; /* one snapshot's collectors at a time (the snapshot path) */
};

struct s3f_metrics *s3f_metrics_new(size_t max_series) {
    struct s3f_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->max_series = max_series ? max_series : 4096;
    pthread_mutex_init(&m->collect_lock, NULL);
    return m;
}

void s3f_metrics_free(struct s3f_metrics *m) {
    if (!m)
        return;
    for (size_t i = 0; i < atomic_load(&m->n_metrics); i++)
        free(m->metrics[i].cells);
    pthread_mutex_destroy(&m->collect_lock);
    free(m->label_name);
    free(m->label_value);
    free(m);
}

static bool valid_name(const char *s) {
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

enum s3f_status s3f_metrics_set_label(struct s3f_metrics *m, const char *name,
                                      const char *value) {
    if (!m || !valid_name(name) || !value)
        return S3F_ERR_INVALID_ARGUMENT;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return S3F_ERR_NO_MEMORY;
    }
    free(m->label_name);
    free(m->label_value);
    m->label_name = n;
    m->label_value = v;
    return S3F_OK;
}

int s3f_metrics_register(struct s3f_metrics *m, const struct s3f_metric_def *def) {
    if (!m || !def || !valid_name(def->name) || def->type > S3F_METRIC_HISTOGRAM)
        return -1;
    size_t n = atomic_load(&m->n_metrics);
    if (n >= MAX_METRICS)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->metrics[i].def.name, def->name) == 0)
            return -1;
    struct metric *x = &m->metrics[n];
    memset(x, 0, sizeof(*x));
    x->def = *def;
    x->n_series = 1;
    for (size_t l = 0; l < S3F_METRIC_MAX_LABELS && def->label_names[l]; l++) {
        if (!valid_name(def->label_names[l]) || !def->label_values[l])
            return -1;
        size_t k = 0;
        while (def->label_values[l][k])
            k++;
        if (k == 0 || k > MAX_LABEL_VALUES)
            return -1;
        x->n_values[l] = k;
        x->n_series *= k;
        x->n_labels = l + 1;
    }
    if (x->n_series > m->max_series - m->used_series)
        return -1; /* the bound on label combinations */
    size_t cells = x->n_series * (def->type == S3F_METRIC_HISTOGRAM ? HIST_CELLS : 1);
    x->cells = calloc(cells, sizeof(*x->cells));
    if (!x->cells)
        return -1;
    m->used_series += x->n_series;
    atomic_store_explicit(&m->n_metrics, n + 1, memory_order_release);
    return (int)n;
}

size_t s3f_metrics_series(const struct s3f_metrics *m, int id, size_t i0, size_t i1) {
    if (!m || id < 0 || (size_t)id >= atomic_load(&((struct s3f_metrics *)m)->n_metrics))
        return SIZE_MAX;
    const struct metric *x = &m->metrics[id];
    if (x->n_labels == 0)
        return 0;
    if (i0 >= x->n_values[0])
        return SIZE_MAX;
    if (x->n_labels == 1)
        return i0;
    return i1 < x->n_values[1] ? i0 * x->n_values[1] + i1 : SIZE_MAX;
}

/* The metric of an update, NULL (ignored) for an unknown id or series or the wrong type. */
static struct metric *target(struct s3f_metrics *m, int id, size_t series, bool hist) {
    if (!m || id < 0 || (size_t)id >= atomic_load_explicit(&m->n_metrics, memory_order_acquire))
        return NULL;
    struct metric *x = &m->metrics[id];
    if (series >= x->n_series || (x->def.type == S3F_METRIC_HISTOGRAM) != hist)
        return NULL;
    return x;
}

void s3f_metrics_add(struct s3f_metrics *m, int id, size_t series, int64_t n) {
    struct metric *x = target(m, id, series, false);
    if (x && (n >= 0 || x->def.type == S3F_METRIC_GAUGE))
        atomic_fetch_add_explicit(&x->cells[series], n, memory_order_relaxed);
}

void s3f_metrics_set(struct s3f_metrics *m, int id, size_t series, int64_t v) {
    struct metric *x = target(m, id, series, false);
    if (x)
        atomic_store_explicit(&x->cells[series], v, memory_order_relaxed);
}

void s3f_metrics_observe(struct s3f_metrics *m, int id, size_t series, double seconds) {
    struct metric *x = target(m, id, series, true);
    if (!x || !(seconds >= 0)) /* NaN too */
        return;
    size_t b = 0;
    while (b < S3F_METRIC_N_BUCKETS && seconds > bucket_bounds[b])
        b++;
    _Atomic int64_t *h = &x->cells[series * HIST_CELLS];
    atomic_fetch_add_explicit(&h[b], 1, memory_order_relaxed);
    double ns = seconds * 1e9;
    int64_t add = ns < 9e18 ? (int64_t)(ns + 0.5) : INT64_MAX / 2;
    atomic_fetch_add_explicit(&h[HIST_CELLS - 1], add, memory_order_relaxed);
}

enum s3f_status s3f_metrics_add_collector(struct s3f_metrics *m, s3f_metrics_collect_fn fn,
                                          void *ud) {
    if (!m || !fn)
        return S3F_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&m->collect_lock);
    size_t n = atomic_load(&m->n_collectors);
    enum s3f_status st = S3F_ERR_INVALID_ARGUMENT;
    if (n < MAX_COLLECTORS) {
        m->collectors[n].fn = fn;
        m->collectors[n].ud = ud;
        atomic_store(&m->n_collectors, n + 1);
        st = S3F_OK;
    }
    pthread_mutex_unlock(&m->collect_lock);
    return st;
}

/* One series' labels into s: the registry's constant one, then the metric's. */
static void labels_of(const struct s3f_metrics *m, const struct metric *x, size_t series,
                      struct s3f_metric_sample *s) {
    size_t first = m->label_name ? 1 : 0;
    if (first) {
        s->label_names[0] = m->label_name;
        s->label_values[0] = m->label_value;
    }
    s->n_labels = first + x->n_labels;
    size_t rest = series;
    for (size_t l = x->n_labels; l-- > 0;) {
        s->label_names[first + l] = x->def.label_names[l];
        s->label_values[first + l] = x->def.label_values[l][rest % x->n_values[l]];
        rest /= x->n_values[l];
    }
}

int s3f_metrics_foreach(struct s3f_metrics *m, s3f_metric_fn fn, void *ud) {
    if (!m || !fn)
        return 0;
    pthread_mutex_lock(&m->collect_lock);
    for (size_t i = 0; i < atomic_load(&m->n_collectors); i++)
        m->collectors[i].fn(m, m->collectors[i].ud);
    pthread_mutex_unlock(&m->collect_lock);
    size_t n = atomic_load_explicit(&m->n_metrics, memory_order_acquire);
    uint64_t counts[S3F_METRIC_N_BUCKETS];
    for (size_t i = 0; i < n; i++) {
        const struct metric *x = &m->metrics[i];
        for (size_t k = 0; k < x->n_series; k++) {
            struct s3f_metric_sample s = {.name = x->def.name, .help = x->def.help,
                                          .type = x->def.type};
            labels_of(m, x, k, &s);
            if (x->def.type == S3F_METRIC_HISTOGRAM) {
                _Atomic int64_t *h = &x->cells[k * HIST_CELLS];
                uint64_t cum = 0;
                for (size_t b = 0; b < S3F_METRIC_N_BUCKETS; b++) {
                    cum += (uint64_t)atomic_load_explicit(&h[b], memory_order_relaxed);
                    counts[b] = cum;
                }
                cum += (uint64_t)atomic_load_explicit(&h[S3F_METRIC_N_BUCKETS],
                                                      memory_order_relaxed);
                s.n_buckets = S3F_METRIC_N_BUCKETS;
                s.bounds = bucket_bounds;
                s.counts = counts;
                s.count = cum;
                s.sum = (double)atomic_load_explicit(&h[HIST_CELLS - 1], memory_order_relaxed) /
                        1e9;
            } else {
                s.value = (double)atomic_load_explicit(&x->cells[k], memory_order_relaxed);
            }
            int rc = fn(&s, ud);
            if (rc)
                return rc;
        }
    }
    return 0;
}
