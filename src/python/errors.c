/* The exception types of s3flash._s3flash and raising an S3 error as one of them: the
 * message is s3f_error_format's line; a local file error is an OSError with its errno. */
#include "s3flash_py.h"

/* ---- exceptions --------------------------------------------------------------------- */

PyObject *S3Exception;         /* base of all */
PyObject *S3NotFoundError;     /* + FileNotFoundError */
PyObject *S3PermissionError;   /* + PermissionError */
PyObject *S3ValueError;        /* + ValueError: bad URI or argument */
PyObject *S3TimeoutError;      /* + TimeoutError */
PyObject *S3ConnectionError;   /* + ConnectionError */
PyObject *S3MemoryError;       /* + MemoryError */
PyObject *S3IOError;           /* + OSError: a local file error (errno when known) */

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

int set_str_attr(PyObject *obj, const char *name, const char *value) {
    PyObject *v = PyUnicode_DecodeUTF8(value, (Py_ssize_t)strlen(value), "replace");
    if (!v)
        return -1;
    int rc = PyObject_SetAttrString(obj, name, v);
    Py_DECREF(v);
    return rc;
}

int set_int_attr(PyObject *obj, const char *name, long value) {
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
PyObject *raise_s3_ex(enum s3f_status st, const struct s3f_error *err, const char *path,
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

PyObject *raise_s3(enum s3f_status st, const struct s3f_error *err) {
    return raise_s3_ex(st, err, NULL, NULL);
}

/* The result of a call (CALL_NOGIL) that returns nothing: None, or its error raised. */
PyObject *none_or_raise(enum s3f_status st, const struct s3f_error *err) {
    if (st)
        return raise_s3(st, err);
    Py_RETURN_NONE;
}

/* The result of a call that returns an object's info: the dict, or its error raised. */
PyObject *info_or_raise(enum s3f_status st, const struct s3f_error *err,
                        const struct s3f_object_info *info) {
    return st ? raise_s3(st, err) : info_to_dict(info);
}

/* The result of a call that uploads a part: (part_number, etag), or its error raised. */
PyObject *part_or_raise(enum s3f_status st, const struct s3f_error *err,
                        const struct s3f_part_info *part) {
    return st ? raise_s3(st, err) : Py_BuildValue("(is)", part->part_number, part->etag);
}
