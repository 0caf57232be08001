/* Client: its configuration, the C client of this process (rebuilt after fork) and the
 * object, bucket, file, listing and multipart operations; each waits with the GIL released.
 * Over 800 lines because it is one type: one thin method per C operation and the type's
 * method table, as each type of CPython's Modules/_io/ keeps to its own file. */
#include "s3flash_py.h"

/* The C client for this process, built if needed. GIL held throughout, so two threads never
 * build one each. */
struct s3f_client *client_get(ClientObject *self) {
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
    o.memory_wait_timeout_ms = self->memory_wait_timeout_ms;
    o.max_inflight_requests = self->max_inflight;
    o.io_threads = self->io_threads;
    o.max_connections = self->max_connections;
    o.checksum = self->checksum;
    o.requester_pays = self->requester_pays;
    o.cache_dir = self->cache_dir;
    o.cache_max_bytes = self->cache_max_bytes;
    o.cache_min_free_bytes = self->cache_min_free_bytes;
    o.express_read_only = self->express_read_only;
    o.disable_express_session_auth = self->disable_express_session_auth;
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
                             "requester_pays", "cache_dir", "cache_max_bytes",
                             "cache_min_free_bytes", "express_read_only",
                             "disable_express_session_auth", "memory_wait_timeout_ms", NULL};
    const char *region = NULL, *endpoint = NULL, *profile = NULL, *akid = NULL,
               *secret = NULL, *token = NULL, *checksum = NULL, *ca_bundle = NULL,
               *cache_dir = NULL;
    int fps = 0, anon = 0, attempts = 0, insecure = 0, payer = 0, xro = 0, xdisable = 0;
    double gbps = 0;
    unsigned long long part = 0, mem = 0, cache_max = 0, cache_free = 0;
    long long wait_ms = 0;
    unsigned int inflight = 0, io = 0, conns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzppzzzidKKIIIzzppzKKpiL", kwlist, &region,
                                     &endpoint, &profile, &fps, &anon, &akid, &secret, &token,
                                     &attempts, &gbps, &part, &mem, &inflight, &io, &conns,
                                     &checksum, &ca_bundle, &insecure, &payer, &cache_dir,
                                     &cache_max, &cache_free, &xro, &xdisable, &wait_ms))
        return -1;
    if (self->initialized) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already initialized");
        return -1;
    }
    if (attempts < 0 || gbps < 0) {
        PyErr_SetString(PyExc_ValueError, "max_attempts and throughput_target_gbps must be >= 0");
        return -1;
    }
    if (wait_ms < 0 || wait_ms > (long long)UINT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "memory_wait_timeout_ms must be 0 (the default, 60 s) to %u milliseconds, "
                     "got %lld",
                     (unsigned)UINT32_MAX, wait_ms);
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
        (ca_bundle && !(self->ca_bundle = dup_or_null(ca_bundle))) ||
        (cache_dir && *cache_dir && !(self->cache_dir = dup_or_null(cache_dir))))
        return -1;
    self->cache_max_bytes = cache_max;
    self->cache_min_free_bytes = cache_free;
    self->initialized = 1;
    self->force_path_style = fps;
    self->anonymous = anon;
    self->max_attempts = attempts;
    self->tls_insecure = insecure;
    self->requester_pays = payer;
    self->express_read_only = xro;
    self->disable_express_session_auth = xdisable;
    self->gbps = gbps;
    self->part_size = part;
    self->memory_limit = mem;
    self->memory_wait_timeout_ms = (uint32_t)wait_ms;
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
    free(self->cache_dir);
    free_instance((PyObject *)self);
}

/* ---- Client: object and bucket operations ------------------------------------------- */

/* The result of a call (CALL_NOGIL) that returns nothing: None, or its error raised. */
static PyObject *none_or_raise(enum s3f_status st, const struct s3f_error *err) {
    if (st)
        return raise_s3(st, err);
    Py_RETURN_NONE;
}

/* The result of a call that returns an object's info: the dict, or its error raised. */
static PyObject *info_or_raise(enum s3f_status st, const struct s3f_error *err,
                               const struct s3f_object_info *info) {
    return st ? raise_s3(st, err) : info_to_dict(info);
}

/* The result of a call that uploads a part: (part_number, etag), or its error raised. */
static PyObject *part_or_raise(enum s3f_status st, const struct s3f_error *err,
                               const struct s3f_part_info *part) {
    return st ? raise_s3(st, err) : Py_BuildValue("(is)", part->part_number, part->etag);
}

/* The client of a call that holds `view` (an argument parsed with "y*"): NULL, with the
 * view released and the exception set, when there is none. */
static struct s3f_client *client_holding(ClientObject *self, Py_buffer *view) {
    struct s3f_client *c = client_get(self);
    if (!c)
        PyBuffer_Release(view);
    return c;
}

static PyObject *Client_head_object(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "version_id", NULL};
    const char *bucket, *key, *version = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|z", kwlist, &bucket, &key, &version))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_head_object(c, bucket, key, version, &info, &err));
    return info_or_raise(st, &err, &info);
}

static PyObject *Client_delete_object(ClientObject *self, PyObject *args) {
    const char *bucket, *key;
    if (!PyArg_ParseTuple(args, "ss:delete_object", &bucket, &key))
        return NULL;
    CLIENT_OR_NULL(self, c);
    CALL_NOGIL(st, err, s3f_delete_object(c, bucket, key, &err));
    return none_or_raise(st, &err);
}

/* An operation on a bucket that returns nothing (`format`: "s:<name>"). */
static PyObject *bucket_op(ClientObject *self, PyObject *args, const char *format,
                           enum s3f_status (*op)(struct s3f_client *, const char *,
                                                 struct s3f_error *)) {
    const char *bucket;
    if (!PyArg_ParseTuple(args, format, &bucket))
        return NULL;
    CLIENT_OR_NULL(self, c);
    CALL_NOGIL(st, err, op(c, bucket, &err));
    return none_or_raise(st, &err);
}

static PyObject *Client_create_bucket(ClientObject *self, PyObject *args) {
    return bucket_op(self, args, "s:create_bucket", s3f_create_bucket);
}

static PyObject *Client_delete_bucket(ClientObject *self, PyObject *args) {
    return bucket_op(self, args, "s:delete_bucket", s3f_delete_bucket);
}

/* copy_object(src_bucket, src_key, dst_bucket, dst_key) -> info: server-side CopyObject
 * (at most 5 GiB). */
static PyObject *Client_rename_object(ClientObject *self, PyObject *args) {
    const char *bucket, *sk, *dk, *inm = NULL;
    if (!PyArg_ParseTuple(args, "sss|z:rename_object", &bucket, &sk, &dk, &inm))
        return NULL;
    CLIENT_OR_NULL(self, c);
    CALL_NOGIL(st, err, s3f_rename_object(c, bucket, sk, dk, inm, &err));
    return none_or_raise(st, &err);
}

static PyObject *Client_append_object(ClientObject *self, PyObject *args) {
    const char *bucket, *key;
    unsigned long long offset;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "ssKy*:append_object", &bucket, &key, &offset, &data))
        return NULL;
    struct s3f_client *c = client_holding(self, &data);
    if (!c)
        return NULL;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_append_object(c, bucket, key, offset, data.buf, (size_t)data.len, &info,
                                          &err));
    PyBuffer_Release(&data);
    return info_or_raise(st, &err, &info);
}

static PyObject *Client_copy_object(ClientObject *self, PyObject *args) {
    const char *sb, *sk, *db, *dk;
    if (!PyArg_ParseTuple(args, "ssss:copy_object", &sb, &sk, &db, &dk))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_copy_object(c, sb, sk, db, dk, &info, &err));
    return info_or_raise(st, &err, &info);
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
    return none_or_raise(st, &err);
}

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
    return send_buffer(self, bucket, key, data, NULL, &o);
}

/* put_object(bucket, key, data, if_none_match=None, content_type=None) -> info: one
 * PutObject of a small buffer (s3f_put_object), GIL released. if_none_match="*": the key
 * must not exist; an existing one fails with S3F_ERR_PRECONDITION_FAILED (412), which is
 * how a commit record is written without overwriting another writer's. */
static PyObject *Client_put_object(ClientObject *self, PyObject *args, PyObject *kw) {
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
    CALL_NOGIL(st, err, s3f_copy(c, sb, sk, db, dk, &o, &info, &err));
    return info_or_raise(st, &err, &info);
}

static PyObject *Client_list_objects(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "prefix", "delimiter", "continuation_token",
                             "start_after", "max_keys", "tokens", NULL};
    PyObject *tokens = Py_None;
    const char *bucket;
    struct s3f_list_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzziO", kwlist, &bucket, &o.prefix,
                                     &o.delimiter, &o.continuation_token, &o.start_after,
                                     &o.max_keys, &tokens))
        return NULL;
    struct s3f_list_tokens **seen = NULL;
    if (tokens != Py_None && !(seen = list_tokens_of(tokens)))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_list_page *page = NULL;
    CALL_NOGIL(st, err, s3f_list_objects_v2(c, bucket, &o, &page, &err));
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
    const char *next = page->is_truncated ? page->next_continuation_token : NULL;
    if (seen) { /* a token this listing followed already: the server's loop, refused */
        s3f_error_clear(&err);
        st = s3f_list_tokens_next(seen, page, bucket, &next, &err);
        if (st) {
            raise_s3(st, &err);
            goto out;
        }
    }
    res = Py_BuildValue("(OOz)", objs, prefixes, next);
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
    CALL_NOGIL(st, err, s3f_list_multipart_uploads(c, bucket, prefix, km, um, &page, &err));
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
    CALL_NOGIL(st, err, s3f_create_multipart_upload(c, bucket, key, &po, &upload_id, &err));
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
    struct s3f_client *c = client_holding(self, &data);
    if (!c)
        return NULL;
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    CALL_NOGIL(st, err, s3f_upload_part(c, bucket, key, upload_id, part_number, data.buf,
                                        (size_t)data.len, S3F_CHECKSUM_NONE, &part, &err));
    PyBuffer_Release(&data);
    return part_or_raise(st, &err, &part);
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
    CALL_NOGIL(st, err, s3f_upload_part_copy(c, bucket, key, upload_id, part_number, sb, sk, NULL,
                                             first, last, if_match, &part, &err));
    return part_or_raise(st, &err, &part);
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
        snprintf(parts[i].etag, sizeof(parts[i].etag), "%s", etag);
        parts[i].checksum_algorithm = S3F_CHECKSUM_NONE;
    }
    Py_DECREF(seq);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_complete_multipart_upload(c, bucket, key, upload_id, parts, (size_t)n,
                                                      &info, &err));
    free(parts);
    return info_or_raise(st, &err, &info);
}

static PyObject *Client_list_buckets(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CLIENT_OR_NULL(self, c);
    struct s3f_bucket_list *list = NULL;
    CALL_NOGIL(st, err, s3f_list_buckets(c, &list, &err));
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
    CALL_NOGIL(st, err, s3f_abort_multipart_upload(c, bucket, key, upload_id, &err));
    return none_or_raise(st, &err);
}

/* set_max_inflight_requests(n): s3f_client_set_max_inflight_requests (clamped by it). */
static PyObject *Client_set_max_inflight_requests(ClientObject *self, PyObject *arg) {
    unsigned long n = PyLong_AsUnsignedLong(arg);
    if (n == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    CLIENT_OR_NULL(self, c);
    s3f_client_set_max_inflight_requests(c, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n);
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
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:I,s:K,s:K,s:K}",
                         "part_size_bytes", (unsigned long long)s.part_size_bytes,
                         "pool_limit_bytes", (unsigned long long)s.pool_limit_bytes,
                         "pool_in_use_bytes", (unsigned long long)s.pool_in_use_bytes,
                         "pool_high_water_bytes", (unsigned long long)s.pool_high_water_bytes,
                         "pool_allocated_bytes", (unsigned long long)s.pool_allocated_bytes,
                         "max_inflight_requests", (unsigned int)s.max_inflight_requests,
                         "inflight_requests", (unsigned int)s.inflight_requests,
                         "inflight_high_water", (unsigned int)s.inflight_high_water,
                         "requests_started", (unsigned long long)s.requests_started,
                         "cache_hits", (unsigned long long)s.cache_hits,
                         "cache_misses", (unsigned long long)s.cache_misses,
                         "cache_hit_bytes", (unsigned long long)s.cache_hit_bytes,
                         "cache_inserted_bytes", (unsigned long long)s.cache_inserted_bytes,
                         "cache_errors", (unsigned long long)s.cache_errors,
                         "connection_bytes_per_s", s.connection_bytes_per_s,
                         "first_byte_latency_s", s.first_byte_latency_s,
                         "estimate_samples", (unsigned int)s.estimate_samples,
                         "cache_insert_pending_bytes",
                         (unsigned long long)s.cache_insert_pending_bytes,
                         "cache_insert_dropped_bytes",
                         (unsigned long long)s.cache_insert_dropped_bytes,
                         "cache_evicted_bytes", (unsigned long long)s.cache_evicted_bytes);
}

static PyObject *Client_cache_flush(ClientObject *self, PyObject *unused) {
    CLIENT_OR_NULL(self, c);
    Py_BEGIN_ALLOW_THREADS
    s3f_client_cache_flush(c);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
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
    {"open_fetch", (PyCFunction)(void (*)(void))Client_open_fetch,
     METH_VARARGS | METH_KEYWORDS,
     "open_fetch(verify_checksum=0) -> Fetch\nWhole objects fetched concurrently on the "
     "engine's I/O threads, taken in the order added."},
    {"head_object", (PyCFunction)(void (*)(void))Client_head_object,
     METH_VARARGS | METH_KEYWORDS, "head_object(bucket, key, version_id=None) -> dict"},
    {"delete_object", (PyCFunction)Client_delete_object, METH_VARARGS,
     "delete_object(bucket, key)"},
    {"create_bucket", (PyCFunction)Client_create_bucket, METH_VARARGS, "create_bucket(bucket)"},
    {"delete_bucket", (PyCFunction)Client_delete_bucket, METH_VARARGS,
     "delete_bucket(bucket)\nDeleteBucket (the bucket must be empty)."},
    {"rename_object", (PyCFunction)Client_rename_object, METH_VARARGS,
     "rename_object(bucket, src_key, dst_key, if_none_match=None)\n"
     "RenameObject (directory buckets): one atomic request, no copy."},
    {"append_object", (PyCFunction)Client_append_object, METH_VARARGS,
     "append_object(bucket, key, offset, data) -> dict\n"
     "Append (directory buckets): PutObject with x-amz-write-offset-bytes = offset."},
    {"copy_object", (PyCFunction)Client_copy_object, METH_VARARGS,
     "copy_object(src_bucket, src_key, dst_bucket, dst_key) -> dict\nServer-side CopyObject."},
    {"delete_objects", (PyCFunction)Client_delete_objects, METH_VARARGS,
     "delete_objects(bucket, keys)\nDeleteObjects, batches of 1000."},
    {"upload", (PyCFunction)(void (*)(void))Client_upload, METH_VARARGS | METH_KEYWORDS,
     "upload(bucket, key, data, part_size=0, checksum=None) -> dict\n"
     "Upload a buffer in place (no copy), parts in parallel."},
    {"put_object", (PyCFunction)(void (*)(void))Client_put_object, METH_VARARGS | METH_KEYWORDS,
     "put_object(bucket, key, data, if_none_match=None, content_type=None) -> dict\n"
     "One PutObject (at most 5 GiB); if_none_match='*' fails with a 412 (S3Exception,\n"
     "status S3F_ERR_PRECONDITION_FAILED) when the key exists."},
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
    {"download_range_into", (PyCFunction)(void (*)(void))Client_download_range_into,
     METH_VARARGS | METH_KEYWORDS,
     "download_range_into(bucket, key, offset, buffers, if_match=None, part_size=0,\n"
     "version_id=None) -> info\nBytes [offset, offset + total length of buffers) into the "
     "writable buffers, parallel ranged GETs pinned to if_match."},
    {"get_range", (PyCFunction)(void (*)(void))Client_get_range, METH_VARARGS | METH_KEYWORDS,
     "get_range(bucket, key, offset, length, if_match=None) -> (bytes, info)\nOne ranged GET "
     "of at most length bytes; info['size'] is the object's size."},
    {"download_whole", (PyCFunction)(void (*)(void))Client_download_whole,
     METH_VARARGS | METH_KEYWORDS,
     "download_whole(bucket, key, max_size=-1) -> (bytes, info) or None\nThe whole object "
     "in one GET without a Range (no HEAD); None when it has more than max_size bytes."},
    {"list_objects", (PyCFunction)(void (*)(void))Client_list_objects,
     METH_VARARGS | METH_KEYWORDS,
     "list_objects(bucket, prefix=None, delimiter=None, continuation_token=None, "
     "start_after=None, max_keys=0, tokens=None)\n-> (objects, common_prefixes, next_token); "
     "objects are (key, size, last_modified, etag, storage_class). tokens (from "
     "list_tokens()) holds the tokens the listing followed: a next_token already followed "
     "raises S3Exception (the server's loop)"},
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
    {"set_max_inflight_requests", (PyCFunction)Client_set_max_inflight_requests, METH_O,
     "set_max_inflight_requests(n)\nData requests in flight from now on, no longer adapted "
     "(at most the data connections)."},
    {"stats", (PyCFunction)(void (*)(void))Client_stats, METH_VARARGS | METH_KEYWORDS,
     "stats(reset_high_water=False) -> dict\nEngine counters (s3f_client_stats)."},
    {"cache_flush", (PyCFunction)Client_cache_flush, METH_NOARGS,
     "cache_flush() -> None\nWait until the block cache's queued inserts are written or "
     "dropped (s3f_client_cache_flush)."},
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

PyType_Spec Client_spec = {
    .name = "s3flash._s3flash.Client",
    .basicsize = sizeof(ClientObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = Client_slots,
};
