/* Client's transfers: uploads (a buffer in place, one PutObject, a file read by the I/O
 * threads), downloads (into a writable buffer, into a bytes object made for the object, to
 * a file renamed into place) and server-side copies of any size. Each waits with the GIL
 * released; the method table is client.c's. */
#include "s3flash_py.h"

/* Send the bytes of `data` (in place when contiguous, else from a copy) to bucket/key with
 * the GIL released: s3f_put_object with `put` (one PutObject), else s3f_upload_buffer with
 * `up` (parts in parallel). Returns the info dict, or NULL with the exception set. */
static PyObject *send_buffer(ClientObject *self, const char *bucket, const char *key,
                             PyObject *data, const struct s3f_put_options *put,
                             const struct s3f_upload_options *up) {
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
    if (put)
        st = s3f_put_object(c, bucket, key, buf, (size_t)view.len, put, &info, &err);
    else
        st = s3f_upload_buffer(c, bucket, key, buf, (size_t)view.len, up, &info, &err);
    Py_END_ALLOW_THREADS
    free(copy);
    PyBuffer_Release(&view);
    return info_or_raise(st, &err, &info);
}

/* upload(bucket, key, data, part_size=0, checksum=None) -> info: the buffer is sent in
 * place (no copy), parts in parallel, GIL released. */
PyObject *Client_upload(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "data", "part_size", "checksum", NULL};
    const char *bucket, *key, *checksum = NULL;
    PyObject *data;
    unsigned long long part = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssO|Kz", kwlist, &bucket, &key, &data, &part,
                                     &checksum))
        return NULL;
    struct s3f_upload_options o;
    if (upload_options(&o, part, checksum, NULL) < 0)
        return NULL;
    return send_buffer(self, bucket, key, data, NULL, &o);
}

/* put_object(bucket, key, data, if_none_match=None, content_type=None) -> info: one
 * PutObject of a small buffer (s3f_put_object), GIL released. if_none_match="*": the key
 * must not exist; an existing one fails with S3F_ERR_PRECONDITION_FAILED (412), which is
 * how a commit record is written without overwriting another writer's. */
PyObject *Client_put_object(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "data", "if_none_match", "content_type", NULL};
    const char *bucket, *key;
    PyObject *data;
    struct s3f_put_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssO|zz:put_object", kwlist, &bucket, &key,
                                     &data, &o.if_none_match, &o.content_type))
        return NULL;
    return send_buffer(self, bucket, key, data, &o, NULL);
}

/* download_into(bucket, key, buffer) -> int: the object's bytes straight into a writable
 * buffer (parallel ranged GETs); an object larger than the buffer is a ValueError. */
PyObject *Client_download_into(ClientObject *self, PyObject *args) {
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
    CALL_NOGIL(st, err, s3f_download_buffer(c, bucket, key, view.buf, (size_t)view.len, NULL, &info,
                                            &err));
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
PyObject *Client_download_whole(ClientObject *self, PyObject *args, PyObject *kw) {
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
PyObject *Client_upload_file(ClientObject *self, PyObject *args, PyObject *kw) {
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
    if (upload_options(&o, part, checksum, ctype) < 0)
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
PyObject *Client_download_file(ClientObject *self, PyObject *args, PyObject *kw) {
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
    CALL_NOGIL(st, err, s3f_download_file(c, bucket, key, path, &o, &info, &err));
    res = st ? raise_s3_ex(st, &err, path, NULL) : info_to_dict(&info);
out:
    Py_XDECREF(pathb);
    return res;
}

/* copy(src_bucket, src_key, dst_bucket, dst_key, part_size=0, multipart_threshold=0,
 * src_version_id=None, src_if_match=None) -> info: a server-side copy of any size (s3f_copy:
 * one CopyObject, or UploadPartCopy parts in parallel), pinned to the source's ETag. GIL
 * released. A failed copy creates nothing. */
PyObject *Client_copy(ClientObject *self, PyObject *args, PyObject *kw) {
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
    CALL_NOGIL(st, err, s3f_copy(c, sb, sk, db, dk, &o, &info, &err));
    return info_or_raise(st, &err, &info);
}
