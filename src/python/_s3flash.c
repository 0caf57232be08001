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
 *
 * Files (s3flash_py.h lists what they share): this one (module init, parse_uri, the shared
 * helpers), errors.c, client.c (with client_transfer.c and client_multipart.c), writer.c,
 * reader.c, fetch.c, safetensors.c.
 */
#include "s3flash_py.h"

PyTypeObject *ClientType, *WriterType, *ReaderType, *FetchType;

/* ---- helpers ------------------------------------------------------------------------ */

char *dup_or_null(const char *s) {
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        PyErr_NoMemory();
    return d;
}

void free_secret(char *s) {
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = 0;
        free(s);
    }
}

/* Take `lk`; waits with the GIL released. */
void lock_take(PyThread_type_lock lk) {
    if (!PyThread_acquire_lock(lk, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(lk, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

PyObject *info_to_dict(const struct s3f_object_info *info) {
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

int parse_checksum(const char *name, enum s3f_checksum_algorithm *out) {
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

int upload_options(struct s3f_upload_options *o, unsigned long long part_size,
                   const char *checksum, const char *content_type) {
    memset(o, 0, sizeof(*o));
    o->part_size_bytes = part_size;
    o->content_type = content_type;
    return parse_checksum(checksum, &o->checksum);
}

/* tp_dealloc's last step for our heap types: free the object, then drop the reference to
 * its type that every instance of a heap type holds. */
void free_instance(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

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

#define LIST_TOKENS_CAPSULE "s3flash.list_tokens"

static void list_tokens_destroy(PyObject *cap) {
    struct s3f_list_tokens **t = PyCapsule_GetPointer(cap, LIST_TOKENS_CAPSULE);
    if (t) {
        s3f_list_tokens_free(*t);
        free(t);
    }
}

static PyObject *mod_list_tokens(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    struct s3f_list_tokens **t = calloc(1, sizeof(*t));
    if (!t)
        return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(t, LIST_TOKENS_CAPSULE, list_tokens_destroy);
    if (!cap)
        free(t);
    return cap;
}

struct s3f_list_tokens **list_tokens_of(PyObject *obj) {
    return PyCapsule_GetPointer(obj, LIST_TOKENS_CAPSULE);
}

static PyMethodDef module_methods[] = {
    {"list_tokens", (PyCFunction)mod_list_tokens, METH_NOARGS,
     "list_tokens() -> the continuation tokens of one listing, to pass as list_objects's "
     "tokens=\n(one listing, one thread at a time)."},
    {"safetensors_header_length", (PyCFunction)(void (*)(void))mod_safetensors_header_length,
     METH_VARARGS | METH_KEYWORDS,
     "safetensors_header_length(first8, file_size, max_header_bytes=0) -> int\nThe header's "
     "length from a safetensors file's first 8 bytes, checked; ValueError naming what is wrong."},
    {"parse_safetensors_header", (PyCFunction)(void (*)(void))mod_parse_safetensors_header,
     METH_VARARGS | METH_KEYWORDS,
     "parse_safetensors_header(data, file_size, max_header_bytes=0) -> dict\nA safetensors "
     "header (data: the file's first 8 + N bytes) parsed and validated; ValueError naming what "
     "is wrong."},
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
    if (!FetchType && !(FetchType = (PyTypeObject *)PyType_FromSpec(&Fetch_spec)))
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
    if (PyModule_AddObjectRef(m, "Fetch", (PyObject *)FetchType) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "LIBRARY_VERSION", S3FLASH_VERSION) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
