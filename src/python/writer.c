/* Writer: a streaming upload (s3f_writer) and Client.open_writer. */
#include "s3flash_py.h"

/* ---- Writer ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ClientObject *owner;
    struct s3f_writer *w; /* NULL once closed or aborted */
    PyThread_type_lock lock;
    pid_t pid;
    unsigned long long pos;
    int failed; /* a write failed: the upload is doomed */
} WriterObject;

static int writer_check(WriterObject *self) {
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this S3 writer was opened in another process (before fork()); "
                        "open a new one in this process");
        return -1;
    }
    if (!self->w) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed S3 writer");
        return -1;
    }
    return 0;
}

/* Get a C-contiguous view of `obj`: in place when it is contiguous, else a copy (the only
 * case with a second copy; memoryviews of tensors are contiguous). */
int get_contiguous(PyObject *obj, Py_buffer *view, void **copy) {
    *copy = NULL;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
        return -1;
    PyErr_Clear();
    if (PyObject_GetBuffer(obj, view, PyBUF_FULL_RO) < 0)
        return -1;
    void *tmp = malloc(view->len ? (size_t)view->len : 1);
    if (!tmp) {
        PyBuffer_Release(view);
        PyErr_NoMemory();
        return -1;
    }
    if (PyBuffer_ToContiguous(tmp, view, view->len, 'C') < 0) {
        free(tmp);
        PyBuffer_Release(view);
        return -1;
    }
    *copy = tmp;
    return 0;
}

static PyObject *Writer_write(WriterObject *self, PyObject *data) {
    if (writer_check(self) < 0)
        return NULL;
    Py_buffer view;
    void *copy;
    if (get_contiguous(data, &view, &copy) < 0)
        return NULL;
    const void *buf = copy ? copy : view.buf;
    size_t len = (size_t)view.len;
    lock_take(self->lock);
    enum s3f_status st = S3F_OK;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_writer *w = self->w;
    if (w && len) {
        Py_BEGIN_ALLOW_THREADS
        st = s3f_writer_write(w, buf, len, &err);
        Py_END_ALLOW_THREADS
        if (st == S3F_OK)
            self->pos += len;
        else
            self->failed = 1;
    }
    PyThread_release_lock(self->lock);
    free(copy);
    PyBuffer_Release(&view);
    if (!w) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed S3 writer");
        return NULL;
    }
    if (st)
        return raise_s3(st, &err);
    return PyLong_FromSize_t(len);
}

static PyObject *Writer_close(WriterObject *self, PyObject *unused) {
    if (self->pid != getpid()) {
        self->w = NULL; /* the parent's: leave it to the parent */
        Py_RETURN_NONE;
    }
    lock_take(self->lock);
    struct s3f_writer *w = self->w;
    self->w = NULL;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    if (w) {
        Py_BEGIN_ALLOW_THREADS
        st = s3f_writer_close(w, &info, &err);
        Py_END_ALLOW_THREADS
    }
    PyThread_release_lock(self->lock);
    if (!w)
        Py_RETURN_NONE; /* closing twice is a no-op, as for files */
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

static void writer_abort_locked(WriterObject *self) {
    struct s3f_writer *w = self->w;
    self->w = NULL;
    if (w && self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        s3f_writer_abort(w);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *Writer_abort(WriterObject *self, PyObject *unused) {
    if (self->pid != getpid()) {
        self->w = NULL;
        Py_RETURN_NONE;
    }
    lock_take(self->lock);
    writer_abort_locked(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *Writer_tell(WriterObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(self->pos);
}

static PyObject *Writer_get_closed(WriterObject *self, void *unused) {
    return PyBool_FromLong(self->w == NULL);
}

static PyObject *Writer_get_failed(WriterObject *self, void *unused) {
    return PyBool_FromLong(self->failed);
}

static void Writer_dealloc(WriterObject *self) {
    writer_abort_locked(self); /* an abandoned upload creates nothing */
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF((PyObject *)self->owner);
    free_instance((PyObject *)self);
}

static PyMethodDef Writer_methods[] = {
    {"write", (PyCFunction)Writer_write, METH_O,
     "write(data) -> int\nAppend the bytes of any buffer-protocol object (copied once)."},
    {"close", (PyCFunction)Writer_close, METH_NOARGS,
     "close() -> dict | None\nUpload what is left and create the object; its info."},
    {"abort", (PyCFunction)Writer_abort, METH_NOARGS,
     "abort()\nCancel the upload; nothing is created."},
    {"tell", (PyCFunction)Writer_tell, METH_NOARGS, "tell() -> int\nBytes written so far."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Writer_getset[] = {
    {"closed", (getter)Writer_get_closed, NULL, "True once closed or aborted", NULL},
    {"failed", (getter)Writer_get_failed, NULL, "True after a failed write", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Writer_slots[] = {
    {Py_tp_dealloc, (void *)Writer_dealloc},
    {Py_tp_doc, (void *)"A streaming upload; made by Client.open_writer."},
    {Py_tp_methods, Writer_methods},
    {Py_tp_getset, Writer_getset},
    {0, NULL},
};

PyType_Spec Writer_spec = {
    .name = "s3flash._s3flash.Writer",
    .basicsize = sizeof(WriterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Writer_slots,
};

PyObject *Client_open_writer(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "part_size", "checksum", "content_type", NULL};
    const char *bucket, *key, *checksum = NULL, *ctype = NULL;
    unsigned long long part = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|Kzz", kwlist, &bucket, &key, &part,
                                     &checksum, &ctype))
        return NULL;
    struct s3f_upload_options o;
    if (upload_options(&o, part, checksum, ctype) < 0)
        return NULL;
    CLIENT_OR_NULL(self, c);
    WriterObject *wo = PyObject_New(WriterObject, WriterType);
    if (!wo)
        return NULL;
    wo->owner = NULL;
    wo->w = NULL;
    wo->pos = 0;
    wo->failed = 0;
    wo->pid = getpid();
    wo->lock = PyThread_allocate_lock();
    if (!wo->lock) {
        Py_DECREF(wo);
        return PyErr_NoMemory();
    }
    Py_INCREF((PyObject *)self);
    wo->owner = self;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_writer *w = NULL;
    enum s3f_status st;
    /* the first use of a client starts its engine (threads, the shared transfer state,
     * whose lock other transfers hold): never with the GIL held */
    Py_BEGIN_ALLOW_THREADS
    st = s3f_writer_open(c, bucket, key, &o, &w, &err);
    Py_END_ALLOW_THREADS
    if (st) {
        Py_DECREF(wo);
        return raise_s3(st, &err);
    }
    wo->w = w;
    return (PyObject *)wo;
}
