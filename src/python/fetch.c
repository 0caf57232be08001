/* Fetch: many whole objects fetched concurrently, taken in order (s3f_fetch), and
 * Client.open_fetch. What the datasets read ahead with (python/s3flash/_dataset.py). */
#include "s3flash_py.h"

typedef struct {
    PyObject_HEAD
    ClientObject *owner;
    struct s3f_fetch *f;   /* NULL once closed */
    PyThread_type_lock lock;
    pid_t pid;
} FetchObject;

static int fetch_check(FetchObject *self) {
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError, "this S3 fetch was opened in another process "
                                            "(before fork()); open a new one in this process");
        return -1;
    }
    if (!self->f) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed S3 fetch");
        return -1;
    }
    return 0;
}

/* add(bucket, key, etag=None, max_size=0): queue the GET of one whole object. */
static PyObject *Fetch_add(FetchObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "etag", "max_size", NULL};
    const char *bucket, *key, *etag = NULL;
    unsigned long long max_size = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|zK:add", kwlist, &bucket, &key, &etag,
                                     &max_size))
        return NULL;
    if (fetch_check(self))
        return NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    lock_take(self->lock);
    enum s3f_status st = s3f_fetch_add(self->f, bucket, key, etag, max_size, &err);
    PyThread_release_lock(self->lock);
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

/* take() -> (bytes, info) of the oldest object not taken, or None when it is larger than
 * its max_size; raises that object's own error. GIL released while waiting. */
static PyObject *Fetch_take(FetchObject *self, PyObject *unused) {
    (void)unused;
    if (fetch_check(self))
        return NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_object_info info;
    void *data = NULL;
    size_t len = 0;
    enum s3f_status st;
    lock_take(self->lock);
    Py_BEGIN_ALLOW_THREADS
    st = s3f_fetch_take(self->f, &data, &len, &info, &err);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(self->lock);
    if (st == S3F_ERR_INVALID_ARGUMENT && info.size > 0)
        Py_RETURN_NONE; /* over max_size: the caller reads it with a reader */
    if (st)
        return raise_s3(st, &err);
    PyObject *b = len <= (size_t)PY_SSIZE_T_MAX
                      ? PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len)
                      : PyErr_NoMemory();
    free(data);
    PyObject *d = b ? info_to_dict(&info) : NULL;
    PyObject *r = d ? PyTuple_Pack(2, b, d) : NULL;
    Py_XDECREF(b);
    Py_XDECREF(d);
    return r;
}

static PyObject *Fetch_get_pending(FetchObject *self, void *unused) {
    (void)unused;
    return PyLong_FromSize_t(self->f && self->pid == getpid() ? s3f_fetch_pending(self->f) : 0);
}

static PyObject *Fetch_get_held(FetchObject *self, void *unused) {
    (void)unused;
    uint64_t held = 0, hw = 0;
    if (self->f && self->pid == getpid())
        s3f_fetch_held(self->f, &held, &hw);
    return Py_BuildValue("(KK)", (unsigned long long)held, (unsigned long long)hw);
}

static void fetch_free(FetchObject *self) {
    struct s3f_fetch *f = self->f;
    self->f = NULL;
    if (f && self->pid == getpid()) { /* a parent's fetch in a forked child: left alone */
        Py_BEGIN_ALLOW_THREADS
        s3f_fetch_free(f);
        Py_END_ALLOW_THREADS
    }
}

/* close(): stop what is in flight, drop what was not taken. */
static PyObject *Fetch_close(FetchObject *self, PyObject *unused) {
    (void)unused;
    lock_take(self->lock);
    fetch_free(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static void Fetch_dealloc(FetchObject *self) {
    fetch_free(self);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF((PyObject *)self->owner);
    free_instance((PyObject *)self);
}

static PyMethodDef Fetch_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Fetch_add, METH_VARARGS | METH_KEYWORDS,
     "add(bucket, key, etag=None, max_size=0)\nQueue the GET of a whole object; it starts "
     "as soon as a request slot is free. etag: If-Match. max_size: larger objects are not "
     "read (take returns None for them)."},
    {"take", (PyCFunction)Fetch_take, METH_NOARGS,
     "take() -> (bytes, info) or None\nWait for the oldest object added and not taken; "
     "raises its own error."},
    {"close", (PyCFunction)Fetch_close, METH_NOARGS,
     "close()\nStop the GETs in flight, drop what was not taken."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Fetch_getset[] = {
    {"pending", (getter)Fetch_get_pending, NULL, "objects added and not yet taken", NULL},
    {"held", (getter)Fetch_get_held, NULL,
     "(bytes held now, most ever held): buffers of objects not yet taken", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Fetch_slots[] = {
    {Py_tp_dealloc, (void *)Fetch_dealloc},
    {Py_tp_doc, (void *)"Whole objects fetched concurrently, taken in the order added; made "
                        "by Client.open_fetch."},
    {Py_tp_methods, Fetch_methods},
    {Py_tp_getset, Fetch_getset},
    {0, NULL},
};

PyType_Spec Fetch_spec = {
    .name = "s3flash._s3flash.Fetch",
    .basicsize = sizeof(FetchObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Fetch_slots,
};

/* open_fetch(verify_checksum=0) -> Fetch */
PyObject *Client_open_fetch(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"verify_checksum", NULL};
    int verify = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:open_fetch", kwlist, &verify))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_fetch_options o = {.verify_checksum = verify};
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_fetch *f = NULL;
    enum s3f_status st = s3f_fetch_new(c, &o, &f, &err);
    if (st)
        return raise_s3(st, &err);
    FetchObject *fo = PyObject_New(FetchObject, FetchType);
    PyThread_type_lock lk = fo ? PyThread_allocate_lock() : NULL;
    if (!lk) {
        s3f_fetch_free(f);
        if (fo) {
            fo->f = NULL;
            fo->lock = NULL;
            fo->owner = NULL;
            Py_DECREF(fo);
            PyErr_NoMemory();
        }
        return NULL;
    }
    fo->f = f;
    fo->lock = lk;
    fo->pid = getpid();
    Py_INCREF((PyObject *)self);
    fo->owner = self;
    return (PyObject *)fo;
}
