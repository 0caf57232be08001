/* What s3flash.safetensors (python/s3flash/safetensors.py) needs of the library: a ranged
 * GET of a file's first bytes (its header), a ranged download of a byte range straight into
 * the tensors' memory (s3f_download_iov with range_offset: parallel parts, each answer
 * checked, pinned to the header's ETag), and the header's parser (s3f_safetensors_parse).
 * Every wait is done with the GIL released. */
#include "s3flash_py.h"

/* download_range_into(bucket, key, offset, buffers, if_match=None, part_size=0,
 * version_id=None) -> info: the bytes [offset, offset + total length of `buffers`) of the
 * object, straight into the writable buffers (one after the other), with parallel ranged
 * GETs pinned to if_match. info["size"] is the bytes written. An object replaced since
 * if_match's ETag: S3PreconditionFailed (ValueError); a range past the object's end:
 * S3ValueError naming the object's size. */
PyObject *Client_download_range_into(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "offset", "buffers", "if_match", "part_size",
                             "version_id", NULL};
    const char *bucket, *key;
    unsigned long long offset, part = 0;
    PyObject *seq;
    struct s3f_download_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssKO|zKz:download_range_into", kwlist, &bucket,
                                     &key, &offset, &seq, &o.if_match, &part, &o.version_id))
        return NULL;
    CLIENT_OR_NULL(self, c);
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0)
        return NULL;
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*views));
    struct s3f_iovec *iov = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*iov));
    PyObject *res = NULL;
    Py_ssize_t got = 0;
    unsigned long long total = 0;
    if (!views || !iov) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        PyObject *item = PySequence_GetItem(seq, got);
        if (!item)
            goto out;
        int r = PyObject_GetBuffer(item, &views[got], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
        Py_DECREF(item);
        if (r < 0)
            goto out;
        iov[got].base = views[got].buf;
        iov[got].len = (size_t)views[got].len;
        total += (unsigned long long)views[got].len;
    }
    if (total == 0) {
        PyErr_SetString(PyExc_ValueError, "download_range_into: the buffers hold no byte");
        goto out;
    }
    o.range_offset = offset;
    o.range_bytes = total;
    o.part_size_bytes = part;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_download_iov(c, bucket, key, iov, (size_t)n, &o, &info, &err));
    res = st ? raise_s3(st, &err) : info_to_dict(&info);
out:
    for (Py_ssize_t k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyMem_Free(iov);
    return res;
}

struct range_sink {
    char *buf;
    uint64_t start, cap, end;
};

static int range_write(void *ud, const void *data, size_t len, uint64_t offset) {
    struct range_sink *s = ud;
    if (offset < s->start || offset - s->start > s->cap || len > s->cap - (offset - s->start))
        return 1; /* cannot happen: the executor hands over only the range asked */
    memcpy(s->buf + (offset - s->start), data, len);
    if (offset - s->start + len > s->end)
        s->end = offset - s->start + len;
    return 0;
}

/* get_range(bucket, key, offset, length, if_match=None) -> (bytes, info): one ranged GET
 * of at most `length` bytes from `offset` (fewer when the object ends first);
 * info["size"] is the whole object's size, info["etag"] its ETag. */
PyObject *Client_get_range(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "offset", "length", "if_match", NULL};
    const char *bucket, *key;
    unsigned long long offset, length;
    struct s3f_get_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssKK|z:get_range", kwlist, &bucket, &key,
                                     &offset, &length, &o.if_match))
        return NULL;
    if (length == 0 || length > (unsigned long long)PY_SSIZE_T_MAX ||
        offset + length < offset) {
        PyErr_SetString(PyExc_ValueError, "get_range: length must be 1 to PY_SSIZE_T_MAX");
        return NULL;
    }
    CLIENT_OR_NULL(self, c);
    struct range_sink s = {.start = offset, .cap = length};
    if (!(s.buf = PyMem_Malloc((size_t)length)))
        return PyErr_NoMemory();
    o.has_range = 1;
    o.range_start = offset;
    o.range_end = offset + length - 1;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_get_object(c, bucket, key, &o, range_write, &s, &info, &err));
    PyObject *res = NULL;
    if (st) {
        raise_s3(st, &err);
    } else {
        PyObject *b = PyBytes_FromStringAndSize(s.buf, (Py_ssize_t)s.end);
        PyObject *d = b ? info_to_dict(&info) : NULL;
        if (d)
            res = PyTuple_Pack(2, b, d);
        Py_XDECREF(b);
        Py_XDECREF(d);
    }
    PyMem_Free(s.buf);
    return res;
}

/* A header refused by the parser: ValueError with its message (MemoryError for memory). */
static PyObject *header_error(enum s3f_status st, const struct s3f_error *err) {
    PyErr_SetString(st == S3F_ERR_NO_MEMORY ? PyExc_MemoryError : PyExc_ValueError,
                    err->message);
    return NULL;
}

/* safetensors_header_length(first8, file_size, max_header_bytes=0) -> int */
PyObject *mod_safetensors_header_length(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"first8", "file_size", "max_header_bytes", NULL};
    Py_buffer view;
    unsigned long long size, max = 0;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*K|K:safetensors_header_length", kwlist,
                                     &view, &size, &max))
        return NULL;
    if (view.len < 8 && size >= 8) { /* the C call reads 8 bytes: never past the buffer */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "fewer than the 8 bytes of the header's length given");
        return NULL;
    }
    struct s3f_error err;
    uint64_t n = 0;
    enum s3f_status st = s3f_safetensors_header_length(view.buf, size, max, &n, &err);
    PyBuffer_Release(&view);
    if (st)
        return header_error(st, &err);
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *tensor_tuple(const struct s3f_safetensors_tensor *t) {
    PyObject *shape = PyTuple_New((Py_ssize_t)t->n_dims);
    if (!shape)
        return NULL;
    for (size_t d = 0; d < t->n_dims; d++) {
        PyObject *v = PyLong_FromUnsignedLongLong(t->shape[d]);
        if (!v || PyTuple_SetItem(shape, (Py_ssize_t)d, v) < 0) {
            Py_DECREF(shape);
            return NULL;
        }
    }
    PyObject *name = PyUnicode_DecodeUTF8(t->name, (Py_ssize_t)t->name_len, "strict");
    PyObject *r = name ? Py_BuildValue("(OsOKK)", name, t->dtype, shape,
                                       (unsigned long long)t->begin,
                                       (unsigned long long)t->end)
                       : NULL;
    Py_XDECREF(name);
    Py_DECREF(shape);
    return r;
}

static PyObject *header_to_dict(const struct s3f_safetensors_header *h) {
    PyObject *tensors = PyList_New(0), *meta = NULL, *res = NULL;
    if (!tensors)
        return NULL;
    for (size_t k = 0; k < h->n_tensors; k++) {
        PyObject *t = tensor_tuple(&h->tensors[k]);
        int r = t ? PyList_Append(tensors, t) : -1;
        Py_XDECREF(t);
        if (r < 0)
            goto out;
    }
    if (h->has_metadata) {
        if (!(meta = PyDict_New()))
            goto out;
        for (size_t k = 0; k < h->n_metadata; k++) {
            const struct s3f_safetensors_kv *kv = &h->metadata[k];
            PyObject *key = PyUnicode_DecodeUTF8(kv->key, (Py_ssize_t)kv->key_len, "strict");
            PyObject *v = key ? PyUnicode_DecodeUTF8(kv->value, (Py_ssize_t)kv->value_len,
                                                     "strict")
                              : NULL;
            int r = v ? PyDict_SetItem(meta, key, v) : -1;
            Py_XDECREF(key);
            Py_XDECREF(v);
            if (r < 0)
                goto out;
        }
    } else {
        meta = Py_NewRef(Py_None);
    }
    res = Py_BuildValue("{s:K,s:K,s:K,s:O,s:O}", "header_bytes",
                        (unsigned long long)h->header_bytes, "data_offset",
                        (unsigned long long)h->data_offset, "data_bytes",
                        (unsigned long long)h->data_bytes, "tensors", tensors, "metadata", meta);
out:
    Py_DECREF(tensors);
    Py_XDECREF(meta);
    return res;
}

/* parse_safetensors_header(data, file_size, max_header_bytes=0) -> dict: header_bytes,
 * data_offset, data_bytes, tensors [(name, dtype, shape, begin, end)] in file order,
 * metadata (a dict of str, or None). ValueError naming what was wrong. */
PyObject *mod_parse_safetensors_header(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"data", "file_size", "max_header_bytes", NULL};
    Py_buffer view;
    unsigned long long size, max = 0;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*K|K:parse_safetensors_header", kwlist, &view,
                                     &size, &max))
        return NULL;
    struct s3f_safetensors_header *h = NULL;
    struct s3f_error err;
    enum s3f_status st;
    Py_BEGIN_ALLOW_THREADS
    st = s3f_safetensors_parse(view.buf, (size_t)view.len, size, max, &h, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (st)
        return header_error(st, &err);
    PyObject *res = header_to_dict(h);
    s3f_safetensors_free(h);
    return res;
}
