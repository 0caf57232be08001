/* Reader: a random-access reader (s3f_reader) and Client.open_reader. */
#include "s3flash_py.h"

/* ---- Reader ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ClientObject *owner;
    struct s3f_reader *r; /* NULL once closed */
    PyThread_type_lock lock;
    pid_t pid;
    unsigned long long size;
    unsigned long long bytes_read; /* returned to the caller, all calls */
    unsigned long long calls;      /* read/readinto/pread calls */
    PyObject *info;                /* dict, from open */
} ReaderObject;

static int reader_check(ReaderObject *self) {
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this S3 reader was opened in another process (before fork()); "
                        "open a new one in this process");
        return -1;
    }
    if (!self->r) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed S3 reader");
        return -1;
    }
    return 0;
}

/* Read `len` bytes into `buf` at the position (offset < 0) or at `offset`. GIL released. */
static int reader_do(ReaderObject *self, void *buf, size_t len, long long offset,
                     size_t *got) {
    lock_take(self->lock);
    struct s3f_reader *r = self->r;
    enum s3f_status st = S3F_OK;
    struct s3f_error err;
    s3f_error_clear(&err);
    *got = 0;
    if (r) {
        Py_BEGIN_ALLOW_THREADS
        if (offset < 0)
            st = s3f_reader_read(r, buf, len, got, &err);
        else
            st = s3f_reader_pread(r, buf, len, (uint64_t)offset, got, &err);
        Py_END_ALLOW_THREADS
        self->bytes_read += *got;
        self->calls++;
    }
    PyThread_release_lock(self->lock);
    if (!r) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed S3 reader");
        return -1;
    }
    if (st) {
        raise_s3(st, &err);
        return -1;
    }
    return 0;
}

static PyObject *reader_read_bytes(ReaderObject *self, Py_ssize_t n, long long offset) {
    if (reader_check(self) < 0)
        return NULL;
    unsigned long long pos = offset >= 0 ? (unsigned long long)offset : s3f_reader_tell(self->r);
    unsigned long long left = pos < self->size ? self->size - pos : 0;
    if (n < 0 || (unsigned long long)n > left)
        n = (Py_ssize_t)left;
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (!b)
        return NULL;
    size_t got = 0;
    if (n > 0 && reader_do(self, PyBytes_AsString(b), (size_t)n, offset, &got) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    if ((Py_ssize_t)got != n) { /* short (the object shrank): a copy, as no resize is public */
        PyObject *shorter = PyBytes_FromStringAndSize(PyBytes_AsString(b), (Py_ssize_t)got);
        Py_DECREF(b);
        b = shorter;
    }
    return b;
}

static PyObject *Reader_read(ReaderObject *self, PyObject *args) {
    Py_ssize_t n = -1;
    PyObject *arg = Py_None;
    if (!PyArg_ParseTuple(args, "|O:read", &arg))
        return NULL;
    if (arg != Py_None) {
        n = PyLong_AsSsize_t(arg);
        if (n == -1 && PyErr_Occurred())
            return NULL;
    }
    return reader_read_bytes(self, n, -1);
}

static PyObject *Reader_pread(ReaderObject *self, PyObject *args) {
    Py_ssize_t n;
    long long offset;
    if (!PyArg_ParseTuple(args, "nL:pread", &n, &offset))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offset must be >= 0");
        return NULL;
    }
    return reader_read_bytes(self, n, offset);
}

static PyObject *reader_into(ReaderObject *self, PyObject *target, long long offset) {
    if (reader_check(self) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(target, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    size_t got = 0;
    int rc = view.len ? reader_do(self, view.buf, (size_t)view.len, offset, &got) : 0;
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    return PyLong_FromSize_t(got);
}

static PyObject *Reader_readinto(ReaderObject *self, PyObject *target) {
    return reader_into(self, target, -1);
}

static PyObject *Reader_preadinto(ReaderObject *self, PyObject *args) {
    PyObject *target;
    long long offset;
    if (!PyArg_ParseTuple(args, "OL:preadinto", &target, &offset))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offset must be >= 0");
        return NULL;
    }
    return reader_into(self, target, offset);
}

static PyObject *Reader_seek(ReaderObject *self, PyObject *args) {
    long long offset;
    int whence = 0;
    if (!PyArg_ParseTuple(args, "L|i:seek", &offset, &whence))
        return NULL;
    if (reader_check(self) < 0)
        return NULL;
    if (whence < 0 || whence > 2) {
        PyErr_Format(PyExc_ValueError, "invalid whence (%d, should be 0, 1 or 2)", whence);
        return NULL;
    }
    lock_take(self->lock);
    uint64_t pos = 0;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_ERR_INVALID_ARGUMENT;
    if (self->r)
        st = s3f_reader_seek(self->r, offset, whence, &pos, &err);
    PyThread_release_lock(self->lock);
    if (st == S3F_ERR_INVALID_ARGUMENT) {
        PyErr_Format(PyExc_ValueError, "negative seek position %lld (whence %d)", offset,
                     whence);
        return NULL;
    }
    if (st)
        return raise_s3(st, &err);
    return PyLong_FromUnsignedLongLong(pos);
}

static PyObject *Reader_tell(ReaderObject *self, PyObject *unused) {
    if (reader_check(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(s3f_reader_tell(self->r));
}

static PyObject *Reader_close(ReaderObject *self, PyObject *unused) {
    if (self->pid != getpid()) {
        self->r = NULL;
        Py_RETURN_NONE;
    }
    lock_take(self->lock);
    struct s3f_reader *r = self->r;
    self->r = NULL;
    if (r) {
        Py_BEGIN_ALLOW_THREADS
        s3f_reader_close(r);
        Py_END_ALLOW_THREADS
    }
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *Reader_get_size(ReaderObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->size);
}
static PyObject *Reader_get_closed(ReaderObject *self, void *unused) {
    return PyBool_FromLong(self->r == NULL);
}
static PyObject *Reader_get_info(ReaderObject *self, void *unused) {
    Py_INCREF(self->info);
    return self->info;
}
static PyObject *Reader_get_bytes_read(ReaderObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->bytes_read);
}
static PyObject *Reader_get_calls(ReaderObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->calls);
}

static void Reader_dealloc(ReaderObject *self) {
    if (self->r && self->pid == getpid()) {
        struct s3f_reader *r = self->r;
        Py_BEGIN_ALLOW_THREADS
        s3f_reader_close(r);
        Py_END_ALLOW_THREADS
    }
    self->r = NULL;
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->info);
    Py_XDECREF((PyObject *)self->owner);
    free_instance((PyObject *)self);
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)Reader_read, METH_VARARGS,
     "read(size=-1) -> bytes\nUp to `size` bytes from the position (all that is left if < 0)."},
    {"readinto", (PyCFunction)Reader_readinto, METH_O,
     "readinto(buffer) -> int\nFill a writable buffer from the position; bytes read."},
    {"pread", (PyCFunction)Reader_pread, METH_VARARGS,
     "pread(size, offset) -> bytes\nRead at `offset` without moving the position."},
    {"preadinto", (PyCFunction)Reader_preadinto, METH_VARARGS,
     "preadinto(buffer, offset) -> int\nFill a buffer from `offset`; the position stays."},
    {"seek", (PyCFunction)Reader_seek, METH_VARARGS,
     "seek(offset, whence=0) -> int\nMove the position (no request is sent)."},
    {"tell", (PyCFunction)Reader_tell, METH_NOARGS, "tell() -> int"},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "close()\nStop read-ahead, free."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"size", (getter)Reader_get_size, NULL, "object size in bytes", NULL},
    {"closed", (getter)Reader_get_closed, NULL, "True once closed", NULL},
    {"info", (getter)Reader_get_info, NULL, "object metadata from open (dict)", NULL},
    {"bytes_read", (getter)Reader_get_bytes_read, NULL, "bytes returned to the caller", NULL},
    {"calls", (getter)Reader_get_calls, NULL, "read calls made", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Reader_slots[] = {
    {Py_tp_dealloc, (void *)Reader_dealloc},
    {Py_tp_doc, (void *)"A random-access reader; made by Client.open_reader."},
    {Py_tp_methods, Reader_methods},
    {Py_tp_getset, Reader_getset},
    {0, NULL},
};

PyType_Spec Reader_spec = {
    .name = "s3flash._s3flash.Reader",
    .basicsize = sizeof(ReaderObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Reader_slots,
};

PyObject *Client_open_reader(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "readahead_max", "tail_bytes", "version_id",
                             "size", "etag", NULL};
    const char *bucket, *key, *version = NULL, *etag = NULL;
    unsigned long long readahead = 0;
    long long tail = 0, size = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|KLzLz", kwlist, &bucket, &key, &readahead,
                                     &tail, &version, &size, &etag))
        return NULL;
    if ((size >= 0) != (etag != NULL)) {
        PyErr_SetString(PyExc_ValueError, "open_reader: size and etag go together (both known "
                                          "from a listing, or neither)");
        return NULL;
    }
    CLIENT_OR_NULL(self, c);
    struct s3f_reader_options o;
    memset(&o, 0, sizeof(o));
    o.readahead_max_bytes = readahead;
    o.tail_bytes = tail < 0 ? UINT64_MAX : (uint64_t)tail;
    o.version_id = version;
    if (etag) { /* known: no HEAD at open */
        o.known = 1;
        o.known_size = (uint64_t)size;
        o.known_etag = etag;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_reader *r = NULL;
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_reader_open(c, bucket, key, &o, &r, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    PyObject *info = info_to_dict(s3f_reader_info(r));
    ReaderObject *ro = info ? PyObject_New(ReaderObject, ReaderType) : NULL;
    PyThread_type_lock lk = ro ? PyThread_allocate_lock() : NULL;
    if (!lk) {
        Py_BEGIN_ALLOW_THREADS
        s3f_reader_close(r);
        Py_END_ALLOW_THREADS
        Py_XDECREF(info);
        if (ro) {
            ro->r = NULL;
            ro->lock = NULL;
            ro->info = NULL;
            ro->owner = NULL;
            Py_DECREF(ro);
            PyErr_NoMemory();
        }
        return NULL;
    }
    ro->r = r;
    ro->lock = lk;
    ro->pid = getpid();
    ro->size = s3f_reader_size(r);
    ro->bytes_read = 0;
    ro->calls = 0;
    ro->info = info;
    Py_INCREF((PyObject *)self);
    ro->owner = self;
    return (PyObject *)ro;
}
