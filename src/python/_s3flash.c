/*
 * s3flash._s3flash — the CPython extension over the public C API (include/s3flash/s3flash.h).
 *
 * Types:
 *   Client  owns a `struct s3f_client`, built on first use from the options given to the
 *           constructor. It remembers the process id it was built in: after fork() (DataLoader
 *           workers) the child builds a fresh client on its next call and never touches the
 *           parent's I/O threads (the inherited client is left allocated, never freed: freeing
 *           it would join threads that do not exist in the child).
 *   Writer  a streaming upload (s3f_writer). write() takes any buffer-protocol object; its
 *           bytes are copied once, into the engine's part buffers, with the GIL released.
 *           An unclosed writer that is garbage-collected is aborted: no object appears.
 *   Reader  a random-access reader (s3f_reader): read, readinto (straight into the caller's
 *           buffer), pread/preadinto, seek, tell, size. The GIL is released for every wait.
 *
 * Every call that may wait or copy a large buffer releases the GIL. Writers and readers may
 * be shared between threads: each has a lock, taken with the GIL released, so calls on one
 * object are serialized as the C API requires.
 *
 * Errors raise S3Exception or one of its subclasses, which also derive from the builtin
 * exception that fits (FileNotFoundError, PermissionError, ValueError, TimeoutError,
 * ConnectionError, MemoryError, OSError). The message is s3f_error_format's line: operation,
 * resource, S3 error code, HTTP status, message, request id. A local file error (S3F_ERR_IO)
 * is an OSError with the errno the library's message names (S3IOError; S3NotFoundError for
 * ENOENT, S3PermissionError for EACCES): a full disk is OSError(ENOSPC). Never a secret: the
 * library keeps them out of errors, and the secret key given to Client is stored only in C
 * memory, wiped on free.
 *
 * Files are moved by the library (upload_file, download_file: pread/pwrite), never through a
 * mapping of the file: a full disk or a file truncated meanwhile is an exception, not SIGBUS.
 *
 * Only the CPython limited API of 3.11 is used (Py_LIMITED_API, set by the Meson build): one
 * build, named _s3flash.abi3.so, loads in every CPython from 3.11 on. So the types are heap
 * types made from PyType_Spec at import (their instances hold a reference to the type, dropped
 * in each dealloc), and no macro that reads an object's fields (PyBytes_AS_STRING...) is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <s3flash/s3flash.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- exceptions --------------------------------------------------------------------- */

static PyObject *S3Exception;         /* base of all */
static PyObject *S3NotFoundError;     /* + FileNotFoundError */
static PyObject *S3PermissionError;   /* + PermissionError */
static PyObject *S3ValueError;        /* + ValueError: bad URI or argument */
static PyObject *S3TimeoutError;      /* + TimeoutError */
static PyObject *S3ConnectionError;   /* + ConnectionError */
static PyObject *S3MemoryError;       /* + MemoryError */
static PyObject *S3IOError;           /* + OSError: a local file error (errno when known) */

static PyObject *exception_type(enum s3f_status st) {
    switch (st) {
    case S3F_ERR_NOT_FOUND:
    case S3F_ERR_NO_SUCH_BUCKET:
        return S3NotFoundError;
    case S3F_ERR_ACCESS_DENIED:
    case S3F_ERR_EXPIRED_CREDENTIALS:
    case S3F_ERR_NO_CREDENTIALS:
        return S3PermissionError;
    case S3F_ERR_INVALID_ARGUMENT:
    case S3F_ERR_INVALID_URI:
    case S3F_ERR_INVALID_RANGE:
        return S3ValueError;
    case S3F_ERR_TIMEOUT:
        return S3TimeoutError;
    case S3F_ERR_CONNECT:
    case S3F_ERR_NETWORK:
    case S3F_ERR_TLS:
        return S3ConnectionError;
    case S3F_ERR_NO_MEMORY:
        return S3MemoryError;
    case S3F_ERR_IO:
        return S3IOError;
    default:
        return S3Exception;
    }
}

static int set_str_attr(PyObject *obj, const char *name, const char *value) {
    PyObject *v = PyUnicode_DecodeUTF8(value, (Py_ssize_t)strlen(value), "replace");
    if (!v)
        return -1;
    int rc = PyObject_SetAttrString(obj, name, v);
    Py_DECREF(v);
    return rc;
}

static int set_int_attr(PyObject *obj, const char *name, long value) {
    PyObject *v = PyLong_FromLong(value);
    if (!v)
        return -1;
    int rc = PyObject_SetAttrString(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* The errno whose strerror text the library put in an S3F_ERR_IO message ("cannot write the
 * file: No space left on device"), the longest that matches; 0 if none does. The library
 * reports local errors with strerror(), so this recovers the errno for OSError. */
static int errno_in_message(const char *msg) {
    int best = 0;
    size_t best_len = 0;
    for (int e = 1; e < 200; e++) {
        const char *t = strerror(e);
        size_t n = t ? strlen(t) : 0;
        if (n > best_len && strncmp(t, "Unknown error", 13) != 0 && strstr(msg, t)) {
            best = e;
            best_len = n;
        }
    }
    return best;
}

/* Raise the exception for `st` described by `err` (which may be empty), with `extra`
 * (optional) appended to the message. A local file error (S3F_ERR_IO) is an OSError whose
 * errno is the one the message names: S3NotFoundError for ENOENT, S3PermissionError for
 * EACCES/EPERM, else S3IOError; `path` (optional) becomes its `filename` when the errno is
 * known (OSError's str() shows errno and filename only then). Returns NULL. */
static PyObject *raise_s3_ex(enum s3f_status st, const struct s3f_error *err, const char *path,
                             const char *extra) {
    struct s3f_error e = *err;
    if (e.status == S3F_OK)
        e.status = st;
    char line[2600];
    if (e.operation[0] || e.message[0] || e.code[0])
        s3f_error_format(&e, line, sizeof(line));
    else
        snprintf(line, sizeof(line), "%s", s3f_strerror(st));
    if (extra) {
        size_t n = strlen(line);
        snprintf(line + n, sizeof(line) - n, "%s", extra);
    }
    PyObject *type = exception_type(st);
    int eno = 0;
    if (st == S3F_ERR_IO) {
        eno = errno_in_message(e.message);
        if (eno == ENOENT)
            type = S3NotFoundError;
        else if (eno == EACCES || eno == EPERM)
            type = S3PermissionError;
    }
    PyObject *msg = PyUnicode_DecodeUTF8(line, (Py_ssize_t)strlen(line), "replace");
    if (!msg)
        return NULL;
    PyObject *exc;
    if (eno && path) { /* OSError(errno, strerror, filename) */
        PyObject *fn = PyUnicode_DecodeFSDefault(path);
        exc = fn ? PyObject_CallFunction(type, "iOO", eno, msg, fn) : NULL;
        Py_XDECREF(fn);
    } else if (eno) {
        exc = PyObject_CallFunction(type, "iO", eno, msg);
    } else {
        exc = PyObject_CallFunctionObjArgs(type, msg, NULL);
    }
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    if (set_str_attr(exc, "status", s3f_status_name(st)) < 0 ||
        set_str_attr(exc, "code", e.code) < 0 ||
        set_int_attr(exc, "http_status", e.http_status) < 0 ||
        set_str_attr(exc, "request_id", e.request_id) < 0 ||
        set_str_attr(exc, "operation", e.operation) < 0 ||
        set_str_attr(exc, "resource", e.resource) < 0 ||
        set_int_attr(exc, "attempts", e.attempts) < 0) {
        Py_DECREF(exc);
        return NULL;
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_s3(enum s3f_status st, const struct s3f_error *err) {
    return raise_s3_ex(st, err, NULL, NULL);
}

/* ---- helpers ------------------------------------------------------------------------ */

static char *dup_or_null(const char *s) {
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        PyErr_NoMemory();
    return d;
}

static void free_secret(char *s) {
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = 0;
        free(s);
    }
}

/* Take `lk`; waits with the GIL released. */
static void lock_take(PyThread_type_lock lk) {
    if (!PyThread_acquire_lock(lk, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(lk, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *info_to_dict(const struct s3f_object_info *info) {
    return Py_BuildValue("{s:K,s:L,s:s,s:s,s:s,s:s,s:s,s:s,s:s}",
                         "size", (unsigned long long)info->size,
                         "last_modified", (long long)info->last_modified,
                         "etag", info->etag,
                         "content_type", info->content_type,
                         "version_id", info->version_id,
                         "storage_class", info->storage_class,
                         "checksum_crc32c", info->checksum_crc32c,
                         "checksum_crc32", info->checksum_crc32,
                         "checksum_crc64nvme", info->checksum_crc64nvme);
}

static int parse_checksum(const char *name, enum s3f_checksum_algorithm *out) {
    if (!name || !*name || !strcmp(name, "default"))
        *out = S3F_CHECKSUM_DEFAULT;
    else if (!strcasecmp(name, "none"))
        *out = S3F_CHECKSUM_NONE;
    else if (!strcasecmp(name, "crc32c"))
        *out = S3F_CHECKSUM_CRC32C;
    else if (!strcasecmp(name, "crc32"))
        *out = S3F_CHECKSUM_CRC32;
    else if (!strcasecmp(name, "crc64nvme"))
        *out = S3F_CHECKSUM_CRC64NVME;
    else {
        PyErr_Format(PyExc_ValueError,
                     "checksum must be one of 'crc32c', 'crc32', 'crc64nvme', 'none', got '%s'",
                     name);
        return -1;
    }
    return 0;
}

/* ---- Client ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    struct s3f_client *client; /* NULL until first use, and in a child after fork */
    pid_t pid;                 /* process that built `client` */
    unsigned long forks_seen;  /* how many times a fork was detected (tests) */
    char *region, *endpoint, *profile, *akid, *secret, *token, *ca_bundle;
    int initialized, force_path_style, anonymous, max_attempts, tls_insecure, requester_pays;
    enum s3f_checksum_algorithm checksum;
    double gbps;
    unsigned long long part_size, memory_limit;
    unsigned int max_inflight, io_threads, max_connections;
} ClientObject;

static PyTypeObject *ClientType; /* heap types, made in PyInit__s3flash */

/* tp_dealloc's last step for our heap types: free the object, then drop the reference to
 * its type that every instance of a heap type holds. */
static void free_instance(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* The C client for this process, built if needed. GIL held throughout, so two threads never
 * build one each. */
static struct s3f_client *client_get(ClientObject *self) {
    pid_t pid = getpid();
    if (self->client && self->pid != pid) {
        /* Inherited through fork: its I/O threads live only in the parent. Leave it alone. */
        self->client = NULL;
        self->forks_seen++;
    }
    if (self->client)
        return self->client;
    struct s3f_client_options o;
    memset(&o, 0, sizeof(o));
    o.region = self->region;
    o.endpoint_url = self->endpoint;
    o.profile = self->profile;
    o.force_path_style = self->force_path_style;
    o.anonymous = self->anonymous;
    o.access_key_id = self->akid;
    o.secret_access_key = self->secret;
    o.session_token = self->token;
    o.ca_bundle = self->ca_bundle;
    o.tls_insecure = self->tls_insecure;
    o.max_attempts = self->max_attempts;
    o.throughput_target_gbps = self->gbps;
    o.part_size_bytes = self->part_size;
    o.memory_limit_bytes = self->memory_limit;
    o.max_inflight_requests = self->max_inflight;
    o.io_threads = self->io_threads;
    o.max_connections = self->max_connections;
    o.checksum = self->checksum;
    o.requester_pays = self->requester_pays;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_client *c = NULL;
    enum s3f_status st = s3f_client_new(&o, &c, &err);
    if (st) {
        raise_s3(st, &err);
        return NULL;
    }
    self->client = c;
    self->pid = pid;
    return c;
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"region", "endpoint", "profile", "force_path_style", "unsigned",
                             "access_key_id", "secret_access_key", "session_token",
                             "max_attempts", "throughput_target_gbps", "part_size",
                             "memory_limit", "max_inflight_requests", "io_threads",
                             "max_connections", "checksum", "ca_bundle", "tls_insecure",
                             "requester_pays", NULL};
    const char *region = NULL, *endpoint = NULL, *profile = NULL, *akid = NULL,
               *secret = NULL, *token = NULL, *checksum = NULL, *ca_bundle = NULL;
    int fps = 0, anon = 0, attempts = 0, insecure = 0, payer = 0;
    double gbps = 0;
    unsigned long long part = 0, mem = 0;
    unsigned int inflight = 0, io = 0, conns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzppzzzidKKIIIzzpp", kwlist, &region,
                                     &endpoint, &profile, &fps, &anon, &akid, &secret, &token,
                                     &attempts, &gbps, &part, &mem, &inflight, &io, &conns,
                                     &checksum, &ca_bundle, &insecure, &payer))
        return -1;
    if (self->initialized) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already initialized");
        return -1;
    }
    if (attempts < 0 || gbps < 0) {
        PyErr_SetString(PyExc_ValueError, "max_attempts and throughput_target_gbps must be >= 0");
        return -1;
    }
    if (parse_checksum(checksum, &self->checksum) < 0)
        return -1;
    if (endpoint && !*endpoint)
        endpoint = NULL; /* s3torchconnector passes "" for "the default" */
    if (region && !*region)
        region = NULL;
    if ((region && !(self->region = dup_or_null(region))) ||
        (endpoint && !(self->endpoint = dup_or_null(endpoint))) ||
        (profile && !(self->profile = dup_or_null(profile))) ||
        (akid && !(self->akid = dup_or_null(akid))) ||
        (secret && !(self->secret = dup_or_null(secret))) ||
        (token && !(self->token = dup_or_null(token))) ||
        (ca_bundle && !(self->ca_bundle = dup_or_null(ca_bundle))))
        return -1;
    self->initialized = 1;
    self->force_path_style = fps;
    self->anonymous = anon;
    self->max_attempts = attempts;
    self->tls_insecure = insecure;
    self->requester_pays = payer;
    self->gbps = gbps;
    self->part_size = part;
    self->memory_limit = mem;
    self->max_inflight = inflight;
    self->io_threads = io;
    self->max_connections = conns;
    return 0;
}

static void Client_dealloc(ClientObject *self) {
    if (self->client && self->pid == getpid()) {
        struct s3f_client *c = self->client;
        Py_BEGIN_ALLOW_THREADS
        s3f_client_free(c);
        Py_END_ALLOW_THREADS
    }
    self->client = NULL;
    free(self->region);
    free(self->endpoint);
    free(self->profile);
    free(self->akid);
    free_secret(self->secret);
    free_secret(self->token);
    free(self->ca_bundle);
    free_instance((PyObject *)self);
}

#define CLIENT_OR_NULL(self, c)                                                               \
    struct s3f_client *c = client_get(self);                                                 \
    if (!c)                                                                                   \
        return NULL

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

static PyTypeObject *WriterType;

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
static int get_contiguous(PyObject *obj, Py_buffer *view, void **copy) {
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

static PyType_Spec Writer_spec = {
    .name = "s3flash._s3flash.Writer",
    .basicsize = sizeof(WriterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Writer_slots,
};

static PyObject *Client_open_writer(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "part_size", "checksum", "content_type", NULL};
    const char *bucket, *key, *checksum = NULL, *ctype = NULL;
    unsigned long long part = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|Kzz", kwlist, &bucket, &key, &part,
                                     &checksum, &ctype))
        return NULL;
    struct s3f_upload_options o;
    memset(&o, 0, sizeof(o));
    o.part_size_bytes = part;
    o.content_type = ctype;
    if (parse_checksum(checksum, &o.checksum) < 0)
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
    enum s3f_status st = s3f_writer_open(c, bucket, key, &o, &w, &err);
    if (st) {
        Py_DECREF(wo);
        return raise_s3(st, &err);
    }
    wo->w = w;
    return (PyObject *)wo;
}

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

static PyTypeObject *ReaderType;

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

static PyType_Spec Reader_spec = {
    .name = "s3flash._s3flash.Reader",
    .basicsize = sizeof(ReaderObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Reader_slots,
};

static PyObject *Client_open_reader(ClientObject *self, PyObject *args, PyObject *kw) {
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

/* ---- Client: object and bucket operations ------------------------------------------- */

static PyObject *Client_head_object(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "version_id", NULL};
    const char *bucket, *key, *version = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|z", kwlist, &bucket, &key, &version))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_head_object(c, bucket, key, version, &info, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

static PyObject *Client_delete_object(ClientObject *self, PyObject *args) {
    const char *bucket, *key;
    if (!PyArg_ParseTuple(args, "ss:delete_object", &bucket, &key))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_delete_object(c, bucket, key, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

static PyObject *Client_create_bucket(ClientObject *self, PyObject *args) {
    const char *bucket;
    if (!PyArg_ParseTuple(args, "s:create_bucket", &bucket))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_create_bucket(c, bucket, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

static PyObject *Client_delete_bucket(ClientObject *self, PyObject *args) {
    const char *bucket;
    if (!PyArg_ParseTuple(args, "s:delete_bucket", &bucket))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_delete_bucket(c, bucket, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

/* copy_object(src_bucket, src_key, dst_bucket, dst_key) -> info: server-side CopyObject
 * (at most 5 GiB). */
static PyObject *Client_copy_object(ClientObject *self, PyObject *args) {
    const char *sb, *sk, *db, *dk;
    if (!PyArg_ParseTuple(args, "ssss:copy_object", &sb, &sk, &db, &dk))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_copy_object(c, sb, sk, db, dk, &info, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

/* delete_objects(bucket, keys) -> None: DeleteObjects in batches of 1000. A key S3 reports
 * as not deleted raises (the first one's error). */
static PyObject *Client_delete_objects(ClientObject *self, PyObject *args) {
    const char *bucket;
    PyObject *seq_in;
    if (!PyArg_ParseTuple(args, "sO:delete_objects", &bucket, &seq_in))
        return NULL;
    PyObject *seq = PySequence_Tuple(seq_in); /* a snapshot: keys stay alive without the GIL */
    if (!seq)
        return NULL;
    Py_ssize_t n = PyTuple_Size(seq);
    const char **keys = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(*keys));
    if (!keys) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        keys[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(seq, i), NULL);
        if (!keys[i]) {
            PyMem_Free(keys);
            Py_DECREF(seq);
            return NULL;
        }
    }
    struct s3f_client *c = n > 0 ? client_get(self) : NULL;
    if (n > 0 && !c) {
        PyMem_Free(keys);
        Py_DECREF(seq);
        return NULL;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    size_t failed = 0;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = s3f_delete_objects(c, bucket, keys, (size_t)n, &failed, &err);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(keys);
    Py_DECREF(seq); /* the UTF-8 buffers lived as long as the str objects in `seq` */
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

/* upload(bucket, key, data, part_size=0, checksum=None) -> info: the buffer is sent in
 * place (no copy), parts in parallel, GIL released. */
static PyObject *Client_upload(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "data", "part_size", "checksum", NULL};
    const char *bucket, *key, *checksum = NULL;
    PyObject *data;
    unsigned long long part = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssO|Kz", kwlist, &bucket, &key, &data, &part,
                                     &checksum))
        return NULL;
    struct s3f_upload_options o;
    memset(&o, 0, sizeof(o));
    o.part_size_bytes = part;
    if (parse_checksum(checksum, &o.checksum) < 0)
        return NULL;
    CLIENT_OR_NULL(self, c);
    Py_buffer view;
    void *copy;
    if (get_contiguous(data, &view, &copy) < 0)
        return NULL;
    const void *buf = copy ? copy : view.buf;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_upload_buffer(c, bucket, key, buf, (size_t)view.len, &o, &info, &err);
    Py_END_ALLOW_THREADS
    free(copy);
    PyBuffer_Release(&view);
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

/* download_into(bucket, key, buffer) -> int: the object's bytes straight into a writable
 * buffer (parallel ranged GETs); an object larger than the buffer is a ValueError. */
static PyObject *Client_download_into(ClientObject *self, PyObject *args) {
    const char *bucket, *key;
    PyObject *target;
    if (!PyArg_ParseTuple(args, "ssO:download_into", &bucket, &key, &target))
        return NULL;
    CLIENT_OR_NULL(self, c);
    Py_buffer view;
    if (PyObject_GetBuffer(target, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_download_buffer(c, bucket, key, view.buf, (size_t)view.len, NULL, &info, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (st)
        return raise_s3(st, &err);
    return PyLong_FromUnsignedLongLong(info.size);
}

/* The destination of download_whole: a bytes object of exactly the object's size, made on
 * the calling thread (s3f_download_alloc calls its allocator there) with the GIL taken back
 * for the moment, so the bytes land in the object that is returned: no second copy. */
struct whole_alloc {
    PyThreadState *ts;     /* the calling thread's state while the GIL is released */
    PyObject *bytes;
    long long max_size;    /* < 0: any size */
    int too_big;
};

static void *whole_alloc_bytes(void *ud, size_t size) {
    struct whole_alloc *a = ud;
    if ((a->max_size >= 0 && (unsigned long long)size > (unsigned long long)a->max_size) ||
        size > (size_t)PY_SSIZE_T_MAX) {
        a->too_big = 1;
        return NULL;
    }
    PyEval_RestoreThread(a->ts);
    a->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    void *p = a->bytes ? PyBytes_AsString(a->bytes) : NULL;
    a->ts = PyEval_SaveThread(); /* a MemoryError stays set for the caller */
    return p;
}

/* download_whole(bucket, key, max_size=-1) -> (bytes, info) or None: the whole object in
 * one GET without a Range (no HEAD: the size comes from the response), into a bytes object
 * made for it. None when the object has more than max_size bytes (>= 0): the GET is then
 * stopped after its headers. */
static PyObject *Client_download_whole(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "max_size", NULL};
    const char *bucket, *key;
    long long max_size = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|L:download_whole", kwlist, &bucket, &key,
                                     &max_size))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    struct whole_alloc a = {.max_size = max_size};
    void *data = NULL;
    size_t len = 0;
    a.ts = PyEval_SaveThread();
    enum s3f_status st = s3f_download_alloc(c, bucket, key, NULL, whole_alloc_bytes, &a, &data,
                                            &len, &info, &err);
    PyEval_RestoreThread(a.ts);
    if (st) {
        Py_XDECREF(a.bytes);
        if (a.too_big) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (st == S3F_ERR_NO_MEMORY && PyErr_Occurred())
            return NULL; /* the MemoryError of the allocation */
        return raise_s3(st, &err);
    }
    if (!a.bytes) { /* cannot happen: success means the allocator ran */
        PyErr_SetString(PyExc_SystemError, "download_whole: no buffer");
        return NULL;
    }
    PyObject *d = info_to_dict(&info);
    if (!d) {
        Py_DECREF(a.bytes);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, a.bytes, d);
    Py_DECREF(a.bytes);
    Py_DECREF(d);
    return r;
}

/* Size and modification time of a file, for telling whether it changed during an upload;
 * 0 on success. */
static int file_identity(const char *path, long long *size, long long *mtime_ns) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    *size = (long long)sb.st_size;
    *mtime_ns = (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
    return 0;
}

/* upload_file(bucket, key, path, part_size=0, checksum=None, content_type=None) -> info:
 * the library's file upload (s3f_upload_file): parts read with pread by the I/O threads, no
 * mapping of the file (a file truncated meanwhile is an error, never SIGBUS). GIL released.
 * A failed upload creates nothing. When the file changed during the call, the error says so
 * and names it; a part whose read found the file short (the request stopped by its read
 * callback, S3F_ERR_ABORTED) is then reported as the local file error it is (S3IOError). */
static PyObject *Client_upload_file(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "path", "part_size", "checksum", "content_type",
                             NULL};
    const char *bucket, *key, *checksum = NULL, *ctype = NULL;
    PyObject *pathb = NULL;
    unsigned long long part = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssO&|Kzz:upload_file", kwlist, &bucket, &key,
                                     PyUnicode_FSConverter, &pathb, &part, &checksum, &ctype))
        return NULL;
    PyObject *res = NULL;
    struct s3f_upload_options o;
    memset(&o, 0, sizeof(o));
    o.part_size_bytes = part;
    o.content_type = ctype;
    if (parse_checksum(checksum, &o.checksum) < 0)
        goto out;
    struct s3f_client *c = client_get(self);
    if (!c)
        goto out;
    const char *path = PyBytes_AsString(pathb);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    long long size0 = -1, mt0 = 0, size1 = -1, mt1 = 0;
    int id0, id1 = -1;
    Py_BEGIN_ALLOW_THREADS
    id0 = file_identity(path, &size0, &mt0);
    st = s3f_upload_file(c, bucket, key, path, &o, &info, &err);
    if (st && id0 == 0)
        id1 = file_identity(path, &size1, &mt1);
    Py_END_ALLOW_THREADS
    if (st) {
        char extra[1400] = "";
        if (id0 == 0 && (id1 != 0 || size1 != size0 || mt1 != mt0)) {
            if (id1 != 0)
                snprintf(extra, sizeof(extra), " (the file %s was removed during the upload)",
                         path);
            else
                snprintf(extra, sizeof(extra),
                         " (the file %s changed during the upload: %lld bytes at the start, "
                         "%lld now)", path, size0, size1);
            if (st == S3F_ERR_ABORTED) { /* a part's read found the file short */
                err.status = S3F_ERR_IO;
                st = S3F_ERR_IO;
            }
        }
        res = raise_s3_ex(st, &err, path, extra[0] ? extra : NULL);
        goto out;
    }
    res = info_to_dict(&info);
out:
    Py_XDECREF(pathb);
    return res;
}

/* download_file(bucket, key, path, part_size=0, verify_checksum=0, fsync=False,
 * if_match=None, version_id=None) -> info: the library's download to a file
 * (s3f_download_file): parts written with pwrite into a temporary file beside `path`,
 * renamed into place at the end; on failure (a full disk: OSError ENOSPC) the temporary
 * file is removed and `path` is untouched. GIL released. */
static PyObject *Client_download_file(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "path", "part_size", "verify_checksum", "fsync",
                             "if_match", "version_id", NULL};
    const char *bucket, *key;
    PyObject *pathb = NULL;
    struct s3f_download_options o;
    memset(&o, 0, sizeof(o));
    unsigned long long part = 0;
    int fsync_ = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssO&|Kipzz:download_file", kwlist, &bucket,
                                     &key, PyUnicode_FSConverter, &pathb, &part,
                                     &o.verify_checksum, &fsync_, &o.if_match, &o.version_id))
        return NULL;
    o.part_size_bytes = part;
    o.fsync = fsync_;
    PyObject *res = NULL;
    struct s3f_client *c = client_get(self);
    if (!c)
        goto out;
    const char *path = PyBytes_AsString(pathb);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_download_file(c, bucket, key, path, &o, &info, &err);
    Py_END_ALLOW_THREADS
    res = st ? raise_s3_ex(st, &err, path, NULL) : info_to_dict(&info);
out:
    Py_XDECREF(pathb);
    return res;
}

/* copy(src_bucket, src_key, dst_bucket, dst_key, part_size=0, multipart_threshold=0,
 * src_version_id=None, src_if_match=None) -> info: a server-side copy of any size (s3f_copy:
 * one CopyObject, or UploadPartCopy parts in parallel), pinned to the source's ETag. GIL
 * released. A failed copy creates nothing. */
static PyObject *Client_copy(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"src_bucket", "src_key", "dst_bucket", "dst_key", "part_size",
                             "multipart_threshold", "src_version_id", "src_if_match", NULL};
    const char *sb, *sk, *db, *dk;
    struct s3f_copy_options o;
    memset(&o, 0, sizeof(o));
    unsigned long long part = 0, threshold = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssss|KKzz:copy", kwlist, &sb, &sk, &db, &dk,
                                     &part, &threshold, &o.src_version_id, &o.src_if_match))
        return NULL;
    o.part_size_bytes = part;
    o.multipart_threshold_bytes = threshold;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_copy(c, sb, sk, db, dk, &o, &info, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

static PyObject *Client_list_objects(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "prefix", "delimiter", "continuation_token",
                             "start_after", "max_keys", NULL};
    const char *bucket;
    struct s3f_list_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzzi", kwlist, &bucket, &o.prefix,
                                     &o.delimiter, &o.continuation_token, &o.start_after,
                                     &o.max_keys))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_list_page *page = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_list_objects_v2(c, bucket, &o, &page, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    PyObject *objs = PyList_New((Py_ssize_t)page->n_objects);
    PyObject *prefixes = objs ? PyList_New((Py_ssize_t)page->n_common_prefixes) : NULL;
    PyObject *res = NULL;
    if (!prefixes)
        goto out;
    for (size_t i = 0; i < page->n_objects; i++) {
        const struct s3f_list_entry *e = &page->objects[i];
        PyObject *t = Py_BuildValue("(sKLss)", e->key, (unsigned long long)e->size,
                                    (long long)e->last_modified, e->etag ? e->etag : "",
                                    e->storage_class ? e->storage_class : "");
        if (!t)
            goto out;
        PyList_SetItem(objs, (Py_ssize_t)i, t);
    }
    for (size_t i = 0; i < page->n_common_prefixes; i++) {
        PyObject *s = PyUnicode_FromString(page->common_prefixes[i]);
        if (!s)
            goto out;
        PyList_SetItem(prefixes, (Py_ssize_t)i, s);
    }
    res = Py_BuildValue("(OOz)", objs, prefixes,
                        page->is_truncated ? page->next_continuation_token : NULL);
out:
    Py_XDECREF(objs);
    Py_XDECREF(prefixes);
    s3f_list_page_free(page);
    return res;
}

static PyObject *Client_list_multipart_uploads(ClientObject *self, PyObject *args,
                                               PyObject *kw) {
    static char *kwlist[] = {"bucket", "prefix", "key_marker", "upload_id_marker", NULL};
    const char *bucket, *prefix = NULL, *km = NULL, *um = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzz", kwlist, &bucket, &prefix, &km, &um))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_uploads_page *page = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_list_multipart_uploads(c, bucket, prefix, km, um, &page, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    PyObject *res = NULL;
    PyObject *ups = PyList_New((Py_ssize_t)page->n_uploads);
    if (!ups)
        goto out;
    for (size_t i = 0; i < page->n_uploads; i++) {
        const struct s3f_upload_entry *e = &page->uploads[i];
        PyObject *t = Py_BuildValue("(ssL)", e->key, e->upload_id, (long long)e->initiated);
        if (!t)
            goto out;
        PyList_SetItem(ups, (Py_ssize_t)i, t);
    }
    res = Py_BuildValue("(Ozz)", ups, page->is_truncated ? page->next_key_marker : NULL,
                        page->is_truncated ? page->next_upload_id_marker : NULL);
out:
    Py_XDECREF(ups);
    s3f_uploads_page_free(page);
    return res;
}

/* ---- multipart uploads, low level (fsspec's append: a copy of the object as the first
 * parts, then the appended bytes). The upload is created without a checksum, as the
 * engine's own server-side copies are (a copied part has no checksum to send back). */

static PyObject *Client_create_multipart_upload(ClientObject *self, PyObject *args,
                                                PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "content_type", NULL};
    const char *bucket, *key, *ctype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|z", kwlist, &bucket, &key, &ctype))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_put_options po;
    memset(&po, 0, sizeof(po));
    po.content_type = ctype;
    po.checksum = S3F_CHECKSUM_NONE;
    char *upload_id = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_create_multipart_upload(c, bucket, key, &po, &upload_id, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    PyObject *res = PyUnicode_FromString(upload_id);
    free(upload_id);
    return res;
}

static PyObject *Client_upload_part(ClientObject *self, PyObject *args) {
    const char *bucket, *key, *upload_id;
    int part_number;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "sssiy*:upload_part", &bucket, &key, &upload_id, &part_number,
                          &data))
        return NULL;
    struct s3f_client *c = client_get(self);
    if (!c) {
        PyBuffer_Release(&data);
        return NULL;
    }
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_upload_part(c, bucket, key, upload_id, part_number, data.buf,
                         (size_t)data.len, S3F_CHECKSUM_NONE, &part, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (st)
        return raise_s3(st, &err);
    return Py_BuildValue("(is)", part.part_number, part.etag);
}

static PyObject *Client_upload_part_copy(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "upload_id", "part_number", "src_bucket",
                             "src_key", "first", "last", "if_match", NULL};
    const char *bucket, *key, *upload_id, *sb, *sk, *if_match = NULL;
    int part_number;
    unsigned long long first, last;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sssissKK|z", kwlist, &bucket, &key,
                                     &upload_id, &part_number, &sb, &sk, &first, &last,
                                     &if_match))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_upload_part_copy(c, bucket, key, upload_id, part_number, sb, sk, NULL, first,
                              last, if_match, &part, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    return Py_BuildValue("(is)", part.part_number, part.etag);
}

static PyObject *Client_complete_multipart_upload(ClientObject *self, PyObject *args) {
    const char *bucket, *key, *upload_id;
    PyObject *seq_in;
    if (!PyArg_ParseTuple(args, "sssO:complete_multipart_upload", &bucket, &key, &upload_id,
                          &seq_in))
        return NULL;
    CLIENT_OR_NULL(self, c);
    /* a list of its own (limited API: no PySequence_Fast macros) */
    PyObject *seq = PySequence_List(seq_in);
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    struct s3f_part_info *parts = calloc(n ? (size_t)n : 1, sizeof(*parts));
    if (!parts) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *etag;
        PyObject *item = PyList_GetItem(seq, i); /* borrowed */
        if (!item || !PyArg_ParseTuple(item, "is", &parts[i].part_number, &etag)) {
            free(parts);
            Py_DECREF(seq);
            return NULL;
        }
        if (strlen(etag) >= sizeof(parts[i].etag)) {
            free(parts);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "ETag too long");
            return NULL;
        }
        strcpy(parts[i].etag, etag);
        parts[i].checksum_algorithm = S3F_CHECKSUM_NONE;
    }
    Py_DECREF(seq);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_complete_multipart_upload(c, bucket, key, upload_id, parts, (size_t)n, &info,
                                       &err);
    Py_END_ALLOW_THREADS
    free(parts);
    if (st)
        return raise_s3(st, &err);
    return info_to_dict(&info);
}

static PyObject *Client_list_buckets(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CLIENT_OR_NULL(self, c);
    struct s3f_bucket_list *list = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_list_buckets(c, &list, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    PyObject *res = PyList_New((Py_ssize_t)list->n_buckets);
    for (size_t i = 0; res && i < list->n_buckets; i++) {
        const struct s3f_bucket_entry *b = &list->buckets[i];
        PyObject *t = Py_BuildValue("(sL)", b->name, (long long)b->creation_date);
        if (!t) {
            Py_CLEAR(res);
            break;
        }
        if (PyList_SetItem(res, (Py_ssize_t)i, t) != 0) { /* steals t */
            Py_CLEAR(res);
            break;
        }
    }
    s3f_bucket_list_free(list);
    return res;
}

static PyObject *Client_abort_multipart_upload(ClientObject *self, PyObject *args) {
    const char *bucket, *key, *upload_id;
    if (!PyArg_ParseTuple(args, "sss:abort_multipart_upload", &bucket, &key, &upload_id))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_abort_multipart_upload(c, bucket, key, upload_id, &err);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_s3(st, &err);
    Py_RETURN_NONE;
}

static PyObject *Client_stats(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"reset_high_water", NULL};
    int reset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &reset))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_client_stats s;
    memset(&s, 0, sizeof(s));
    s3f_client_stats(c, &s, reset);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:K}",
                         "part_size_bytes", (unsigned long long)s.part_size_bytes,
                         "pool_limit_bytes", (unsigned long long)s.pool_limit_bytes,
                         "pool_in_use_bytes", (unsigned long long)s.pool_in_use_bytes,
                         "pool_high_water_bytes", (unsigned long long)s.pool_high_water_bytes,
                         "pool_allocated_bytes", (unsigned long long)s.pool_allocated_bytes,
                         "max_inflight_requests", (unsigned int)s.max_inflight_requests,
                         "inflight_requests", (unsigned int)s.inflight_requests,
                         "inflight_high_water", (unsigned int)s.inflight_high_water,
                         "requests_started", (unsigned long long)s.requests_started);
}

static PyObject *Client_get_region(ClientObject *self, void *unused) {
    CLIENT_OR_NULL(self, c);
    return PyUnicode_FromString(s3f_client_region(c));
}

static PyObject *Client_get_endpoint(ClientObject *self, void *unused) {
    CLIENT_OR_NULL(self, c);
    return PyUnicode_FromString(s3f_client_endpoint(c));
}

static PyObject *Client_get_pid(ClientObject *self, void *unused) {
    if (!self->client)
        Py_RETURN_NONE;
    return PyLong_FromLong((long)self->pid);
}

static PyObject *Client_get_forks_seen(ClientObject *self, void *unused) {
    return PyLong_FromUnsignedLong(self->forks_seen);
}

static PyMethodDef Client_methods[] = {
    {"open_writer", (PyCFunction)(void (*)(void))Client_open_writer,
     METH_VARARGS | METH_KEYWORDS,
     "open_writer(bucket, key, part_size=0, checksum=None, content_type=None) -> Writer"},
    {"open_reader", (PyCFunction)(void (*)(void))Client_open_reader,
     METH_VARARGS | METH_KEYWORDS,
     "open_reader(bucket, key, readahead_max=0, tail_bytes=0, version_id=None) -> Reader\n"
     "One HEAD request. tail_bytes < 0 disables the tail cache."},
    {"head_object", (PyCFunction)(void (*)(void))Client_head_object,
     METH_VARARGS | METH_KEYWORDS, "head_object(bucket, key, version_id=None) -> dict"},
    {"delete_object", (PyCFunction)Client_delete_object, METH_VARARGS,
     "delete_object(bucket, key)"},
    {"create_bucket", (PyCFunction)Client_create_bucket, METH_VARARGS, "create_bucket(bucket)"},
    {"delete_bucket", (PyCFunction)Client_delete_bucket, METH_VARARGS,
     "delete_bucket(bucket)\nDeleteBucket (the bucket must be empty)."},
    {"copy_object", (PyCFunction)Client_copy_object, METH_VARARGS,
     "copy_object(src_bucket, src_key, dst_bucket, dst_key) -> dict\nServer-side CopyObject."},
    {"delete_objects", (PyCFunction)Client_delete_objects, METH_VARARGS,
     "delete_objects(bucket, keys)\nDeleteObjects, batches of 1000."},
    {"upload", (PyCFunction)(void (*)(void))Client_upload, METH_VARARGS | METH_KEYWORDS,
     "upload(bucket, key, data, part_size=0, checksum=None) -> dict\n"
     "Upload a buffer in place (no copy), parts in parallel."},
    {"upload_file", (PyCFunction)(void (*)(void))Client_upload_file,
     METH_VARARGS | METH_KEYWORDS,
     "upload_file(bucket, key, path, part_size=0, checksum=None, content_type=None) -> dict\n"
     "Upload a local file, parts read with pread in parallel (no mapping). A file that\n"
     "cannot be read or changes meanwhile raises OSError naming it; nothing is created."},
    {"download_file", (PyCFunction)(void (*)(void))Client_download_file,
     METH_VARARGS | METH_KEYWORDS,
     "download_file(bucket, key, path, part_size=0, verify_checksum=0, fsync=False,\n"
     "              if_match=None, version_id=None) -> dict\n"
     "The object into a temporary file beside `path` (pwrite, parts in parallel), renamed\n"
     "into place; on failure (OSError ENOSPC for a full disk) nothing is left."},
    {"copy", (PyCFunction)(void (*)(void))Client_copy, METH_VARARGS | METH_KEYWORDS,
     "copy(src_bucket, src_key, dst_bucket, dst_key, part_size=0, multipart_threshold=0,\n"
     "     src_version_id=None, src_if_match=None) -> dict\n"
     "Server-side copy of any size (CopyObject, or UploadPartCopy parts in parallel)."},
    {"download_into", (PyCFunction)Client_download_into, METH_VARARGS,
     "download_into(bucket, key, buffer) -> int\nThe whole object into a writable buffer."},
    {"download_whole", (PyCFunction)(void (*)(void))Client_download_whole,
     METH_VARARGS | METH_KEYWORDS,
     "download_whole(bucket, key, max_size=-1) -> (bytes, info) or None\nThe whole object "
     "in one GET without a Range (no HEAD); None when it has more than max_size bytes."},
    {"list_objects", (PyCFunction)(void (*)(void))Client_list_objects,
     METH_VARARGS | METH_KEYWORDS,
     "list_objects(bucket, prefix=None, delimiter=None, continuation_token=None, "
     "start_after=None, max_keys=0)\n-> (objects, common_prefixes, next_token); objects are "
     "(key, size, last_modified, etag, storage_class)"},
    {"list_multipart_uploads", (PyCFunction)(void (*)(void))Client_list_multipart_uploads,
     METH_VARARGS | METH_KEYWORDS,
     "list_multipart_uploads(bucket, prefix=None, key_marker=None, upload_id_marker=None)\n"
     "-> (uploads, next_key_marker, next_upload_id_marker); uploads are "
     "(key, upload_id, initiated)"},
    {"create_multipart_upload", (PyCFunction)(void (*)(void))Client_create_multipart_upload,
     METH_VARARGS | METH_KEYWORDS,
     "create_multipart_upload(bucket, key, content_type=None) -> upload_id\n"
     "CreateMultipartUpload without a checksum (low level: parts are sent by upload_part "
     "and upload_part_copy, in one thread)."},
    {"upload_part", (PyCFunction)Client_upload_part, METH_VARARGS,
     "upload_part(bucket, key, upload_id, part_number, data) -> (part_number, etag)"},
    {"upload_part_copy", (PyCFunction)(void (*)(void))Client_upload_part_copy,
     METH_VARARGS | METH_KEYWORDS,
     "upload_part_copy(bucket, key, upload_id, part_number, src_bucket, src_key, first, "
     "last, if_match=None) -> (part_number, etag)\nUploadPartCopy of bytes [first, last] "
     "(inclusive, at most 5 GiB) of the source; if_match pins the source's ETag."},
    {"complete_multipart_upload", (PyCFunction)Client_complete_multipart_upload, METH_VARARGS,
     "complete_multipart_upload(bucket, key, upload_id, parts) -> info dict\n"
     "parts: [(part_number, etag)] in ascending order."},
    {"list_buckets", (PyCFunction)Client_list_buckets, METH_NOARGS,
     "list_buckets()\n-> [(name, creation_date)]: the buckets the credentials own "
     "(ListBuckets)"},
    {"abort_multipart_upload", (PyCFunction)Client_abort_multipart_upload, METH_VARARGS,
     "abort_multipart_upload(bucket, key, upload_id)"},
    {"stats", (PyCFunction)(void (*)(void))Client_stats, METH_VARARGS | METH_KEYWORDS,
     "stats(reset_high_water=False) -> dict\nEngine counters (s3f_client_stats)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Client_getset[] = {
    {"region", (getter)Client_get_region, NULL, "the resolved region", NULL},
    {"endpoint", (getter)Client_get_endpoint, NULL, "the resolved endpoint ('' for AWS)", NULL},
    {"pid", (getter)Client_get_pid, NULL, "process that built the C client, or None", NULL},
    {"forks_seen", (getter)Client_get_forks_seen, NULL,
     "times a fork was detected and the client rebuilt", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Client_slots[] = {
    {Py_tp_dealloc, (void *)Client_dealloc},
    {Py_tp_doc, (void *)"An S3 client (struct s3f_client), built on first use and after fork()."},
    {Py_tp_methods, Client_methods},
    {Py_tp_getset, Client_getset},
    {Py_tp_init, (void *)Client_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec Client_spec = {
    .name = "s3flash._s3flash.Client",
    .basicsize = sizeof(ClientObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = Client_slots,
};

/* ---- module functions --------------------------------------------------------------- */

static PyObject *mod_parse_uri(PyObject *mod, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyObject *tn = PyType_GetName(Py_TYPE(arg));
        if (tn)
            PyErr_Format(PyExc_TypeError, "S3 URI must be a str, not %U", tn);
        Py_XDECREF(tn);
        return NULL;
    }
    Py_ssize_t n;
    const char *uri = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!uri)
        return NULL;
    char bucket[256], key[1100];
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_ERR_INVALID_URI;
    if ((size_t)n == strlen(uri)) /* no NUL inside */
        st = s3f_uri_parse(uri, bucket, sizeof(bucket), key, sizeof(key), &err);
    else
        snprintf(err.message, sizeof(err.message), "contains a NUL character");
    if (st) {
        /* name the URI as the caller wrote it (the library's message may already) */
        PyObject *msg = err.message[0] && strstr(err.message, uri)
                            ? PyUnicode_FromString(err.message)
                            : PyUnicode_FromFormat("invalid S3 URI %R: %s", arg,
                                                   err.message[0] ? err.message
                                                                  : s3f_strerror(st));
        if (!msg)
            return NULL;
        PyObject *exc = PyObject_CallFunctionObjArgs(S3ValueError, msg, NULL);
        Py_DECREF(msg);
        if (!exc)
            return NULL;
        if (set_str_attr(exc, "status", s3f_status_name(st)) < 0 ||
            set_str_attr(exc, "code", "") < 0 || set_int_attr(exc, "http_status", 0) < 0 ||
            set_str_attr(exc, "request_id", "") < 0 ||
            set_str_attr(exc, "operation", "parse_uri") < 0 ||
            PyObject_SetAttrString(exc, "resource", arg) < 0 ||
            set_int_attr(exc, "attempts", 0) < 0) {
            Py_DECREF(exc);
            return NULL;
        }
        PyErr_SetObject(S3ValueError, exc);
        Py_DECREF(exc);
        return NULL;
    }
    return Py_BuildValue("(ss)", bucket, key);
}

static PyMethodDef module_methods[] = {
    {"parse_uri", (PyCFunction)mod_parse_uri, METH_O,
     "parse_uri(uri) -> (bucket, key)\nSplit 's3://bucket/key'; ValueError naming the URI."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "s3flash._s3flash",
    .m_doc = "CPython bindings of libs3flash (include/s3flash/s3flash.h).",
    .m_size = -1,
    .m_methods = module_methods,
};

static PyObject *new_exception(PyObject *mod, const char *name, PyObject *builtin,
                               const char *doc) {
    char full[128];
    snprintf(full, sizeof(full), "s3flash.%s", name);
    PyObject *bases = builtin ? PyTuple_Pack(2, S3Exception, builtin)
                              : PyTuple_Pack(1, PyExc_Exception);
    if (!bases)
        return NULL;
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!e)
        return NULL;
    Py_INCREF(e);
    if (PyModule_AddObject(mod, name, e) < 0) {
        Py_DECREF(e);
        Py_DECREF(e);
        return NULL;
    }
    return e;
}

PyMODINIT_FUNC PyInit__s3flash(void);
PyMODINIT_FUNC PyInit__s3flash(void) {
    if (!ClientType && !(ClientType = (PyTypeObject *)PyType_FromSpec(&Client_spec)))
        return NULL;
    if (!WriterType && !(WriterType = (PyTypeObject *)PyType_FromSpec(&Writer_spec)))
        return NULL;
    if (!ReaderType && !(ReaderType = (PyTypeObject *)PyType_FromSpec(&Reader_spec)))
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    if (!(S3Exception = new_exception(m, "S3Exception", NULL,
                                      "An error talking to S3 (code, http_status, request_id "
                                      "and status attributes).")) ||
        !(S3NotFoundError = new_exception(m, "S3NotFoundError", PyExc_FileNotFoundError,
                                          "No such key or bucket.")) ||
        !(S3PermissionError = new_exception(m, "S3PermissionError", PyExc_PermissionError,
                                            "Access denied, bad or missing credentials.")) ||
        !(S3ValueError = new_exception(m, "S3ValueError", PyExc_ValueError,
                                       "A bad URI, bucket name, key or argument.")) ||
        !(S3TimeoutError = new_exception(m, "S3TimeoutError", PyExc_TimeoutError,
                                         "Connect or stall timeout.")) ||
        !(S3ConnectionError = new_exception(m, "S3ConnectionError", PyExc_ConnectionError,
                                            "Could not connect, or the connection broke.")) ||
        !(S3MemoryError = new_exception(m, "S3MemoryError", PyExc_MemoryError,
                                        "Out of memory in the engine.")) ||
        !(S3IOError = new_exception(m, "S3IOError", PyExc_OSError,
                                    "A local file error (errno set when known: ENOSPC for a "
                                    "full disk).")))
        goto fail;
    if (PyModule_AddObjectRef(m, "Client", (PyObject *)ClientType) < 0)
        goto fail;
    if (PyModule_AddObjectRef(m, "Writer", (PyObject *)WriterType) < 0)
        goto fail;
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)ReaderType) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "LIBRARY_VERSION", S3FLASH_VERSION) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
