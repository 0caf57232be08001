/* Client.metrics(): a snapshot of the client's metrics registry (s3f_client_metrics) as a
 * dict, docs/METRICS.md's Python section. The snapshot runs the registry's collectors,
 * which take the pool's and the cache's locks: it is copied into C memory with the GIL
 * released, then turned into Python objects with the GIL held. */
#include "s3flash_py.h"

#include <math.h>

/* One series of the snapshot, its strings copied (a sample's are valid during the callback
 * only). */
struct msample {
    char *name;
    enum s3f_metric_type type;
    size_t n_labels;
    char *label_names[S3F_METRIC_MAX_LABELS + 1], *label_values[S3F_METRIC_MAX_LABELS + 1];
    double value;
    size_t n_buckets;
    double bounds[S3F_METRIC_N_BUCKETS];
    uint64_t counts[S3F_METRIC_N_BUCKETS];
    uint64_t count;
    double sum;
};

struct msnap {
    struct msample *v;
    size_t n, cap;
    int oom;
};

static void msample_free(struct msample *s) {
    free(s->name);
    for (size_t i = 0; i < s->n_labels; i++) {
        free(s->label_names[i]);
        free(s->label_values[i]);
    }
}

static int copy_sample(const struct s3f_metric_sample *in, void *ud) {
    struct msnap *sn = ud;
    if (sn->n == sn->cap) {
        size_t cap = sn->cap ? sn->cap * 2 : 64;
        struct msample *v = realloc(sn->v, cap * sizeof(*v));
        if (!v)
            return sn->oom = 1;
        sn->v = v;
        sn->cap = cap;
    }
    struct msample *s = &sn->v[sn->n];
    memset(s, 0, sizeof(*s));
    s->type = in->type;
    s->value = in->value;
    s->count = in->count;
    s->sum = in->sum;
    s->n_buckets = in->n_buckets < S3F_METRIC_N_BUCKETS ? in->n_buckets : S3F_METRIC_N_BUCKETS;
    for (size_t i = 0; i < s->n_buckets; i++) {
        s->bounds[i] = in->bounds[i];
        s->counts[i] = in->counts[i];
    }
    sn->n++; /* counted now, so that msample_free sees what was copied */
    if (!(s->name = strdup(in->name)))
        return sn->oom = 1;
    for (size_t i = 0; i < in->n_labels && i < S3F_METRIC_MAX_LABELS + 1; i++) {
        s->label_names[i] = strdup(in->label_names[i]);
        s->label_values[i] = strdup(in->label_values[i]);
        s->n_labels = i + 1;
        if (!s->label_names[i] || !s->label_values[i])
            return sn->oom = 1;
    }
    return 0;
}

/* set d[key] = v, v's reference taken; -1 with the exception set */
static int set_steal(PyObject *d, const char *key, PyObject *v) {
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* {"labels": {...}, "value": int} or {"labels", "buckets": [(le, cumulative)...], "count",
 * "sum"} */
static PyObject *series_dict(const struct msample *s) {
    PyObject *d = PyDict_New(), *labels = PyDict_New();
    if (!d || !labels)
        goto fail;
    for (size_t i = 0; i < s->n_labels; i++) {
        PyObject *v = PyUnicode_FromString(s->label_values[i]);
        if (set_steal(labels, s->label_names[i], v) < 0)
            goto fail;
    }
    if (set_steal(d, "labels", labels) < 0) {
        labels = NULL; /* released by set_steal */
        goto fail;
    }
    labels = NULL;
    if (s->type != S3F_METRIC_HISTOGRAM) {
        if (set_steal(d, "value", PyLong_FromLongLong((long long)s->value)) < 0)
            goto fail;
        return d;
    }
    PyObject *buckets = PyList_New(0);
    if (!buckets)
        goto fail;
    for (size_t i = 0; i <= s->n_buckets; i++) {
        double le = i < s->n_buckets ? s->bounds[i] : INFINITY;
        unsigned long long n = i < s->n_buckets ? s->counts[i] : s->count;
        PyObject *pair = Py_BuildValue("(dK)", le, n);
        if (!pair || PyList_Append(buckets, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(buckets);
            goto fail;
        }
        Py_DECREF(pair);
    }
    if (set_steal(d, "buckets", buckets) < 0 ||
        set_steal(d, "count", PyLong_FromUnsignedLongLong(s->count)) < 0 ||
        set_steal(d, "sum", PyFloat_FromDouble(s->sum)) < 0)
        goto fail;
    return d;
fail:
    Py_XDECREF(labels);
    Py_XDECREF(d);
    return NULL;
}

static PyObject *snapshot_dict(const struct msnap *sn) {
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (size_t i = 0; i < sn->n; i++) {
        PyObject *list = PyDict_GetItemString(out, sn->v[i].name); /* borrowed */
        if (!list) {
            if (set_steal(out, sn->v[i].name, PyList_New(0)) < 0)
                goto fail;
            list = PyDict_GetItemString(out, sn->v[i].name);
        }
        PyObject *series = series_dict(&sn->v[i]);
        if (!series || PyList_Append(list, series) < 0) {
            Py_XDECREF(series);
            goto fail;
        }
        Py_DECREF(series);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyObject *Client_metrics(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->initialized) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Client.metrics(): this Client was never initialized (Client.__init__ "
                        "was not called), so it has no metrics");
        return NULL;
    }
    CLIENT_OR_NULL(self, c);
    struct msnap sn = {NULL, 0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    s3f_client_metrics(c, copy_sample, &sn);
    Py_END_ALLOW_THREADS
    PyObject *out = sn.oom ? PyErr_NoMemory() : snapshot_dict(&sn);
    for (size_t i = 0; i < sn.n; i++)
        msample_free(&sn.v[i]);
    free(sn.v);
    return out;
}
