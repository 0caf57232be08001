/* Client: its configuration, the C client of this process (rebuilt after fork), the type
 * and its method table, and the calls that take strings only (head, delete, buckets,
 * rename, copy_object, abort): one row each in a table, one wrapper for them all
 * (str_method). Each call waits with the GIL released. The transfers are in
 * client_transfer.c, the listings and the low-level multipart calls in client_multipart.c;
 * the methods of all three are in Client_methods here. */
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
    const char **ropt_fields[ROPT_COUNT_] = {
        [ROPT_SSE] = &o.sse,
        [ROPT_SSE_KMS_KEY_ID] = &o.sse_kms_key_id,
        [ROPT_SSE_KMS_CONTEXT] = &o.sse_kms_encryption_context,
        [ROPT_SSE_C_KEY] = &o.sse_customer_key,
        [ROPT_SSE_C_COPY_SOURCE_KEY] = &o.sse_copy_source_customer_key,
        [ROPT_STORAGE_CLASS] = &o.storage_class,
        [ROPT_EXPECTED_OWNER] = &o.expected_bucket_owner,
        [ROPT_ACL] = &o.acl,
        [ROPT_USER_AGENT_EXTRA] = &o.user_agent_extra,
        [ROPT_PROXY] = &o.proxy,
        [ROPT_NO_PROXY] = &o.no_proxy,
        [ROPT_PROXY_CA_BUNDLE] = &o.proxy_ca_bundle,
    };
    for (int i = 0; i < ROPT_COUNT_; i++)
        *ropt_fields[i] = self->ropt[i];
    o.sse_bucket_key_enabled = self->bucket_key_enabled;
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
                             "disable_express_session_auth", "memory_wait_timeout_ms",
                             /* the request options, in ROPT_ order */
                             "sse", "sse_kms_key_id", "sse_kms_encryption_context",
                             "sse_customer_key", "sse_copy_source_customer_key",
                             "storage_class", "expected_bucket_owner", "acl",
                             "user_agent_extra", "proxy", "no_proxy", "proxy_ca_bundle",
                             "bucket_key_enabled", NULL};
    const char *region = NULL, *endpoint = NULL, *profile = NULL, *akid = NULL,
               *secret = NULL, *token = NULL, *checksum = NULL, *ca_bundle = NULL,
               *cache_dir = NULL;
    int fps = 0, anon = 0, attempts = 0, insecure = 0, payer = 0, xro = 0, xdisable = 0;
    double gbps = 0;
    unsigned long long part = 0, mem = 0, cache_max = 0, cache_free = 0;
    long long wait_ms = 0;
    unsigned int inflight = 0, io = 0, conns = 0;
    const char *r[ROPT_COUNT_] = {NULL}; /* "" kept: a proxy of "" means none */
    int bucket_key = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzppzzzidKKIIIzzppzKKpiLzzzzzzzzzzzzi",
                                     kwlist, &region, &endpoint, &profile, &fps, &anon, &akid,
                                     &secret, &token, &attempts, &gbps, &part, &mem, &inflight,
                                     &io, &conns, &checksum, &ca_bundle, &insecure, &payer,
                                     &cache_dir, &cache_max, &cache_free, &xro, &xdisable,
                                     &wait_ms, &r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6],
                                     &r[7], &r[8], &r[9], &r[10], &r[11], &bucket_key))
        return -1;
    _Static_assert(ROPT_COUNT_ == 12, "one &r[i] above per request option");
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
    for (int i = 0; i < ROPT_COUNT_; i++)
        if (r[i] && !(self->ropt[i] = dup_or_null(r[i])))
            return -1;
    self->bucket_key_enabled = bucket_key > 0 ? 1 : bucket_key < 0 ? -1 : 0;
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
    for (int i = 0; i < ROPT_COUNT_; i++)
        free_secret(self->ropt[i]); /* wipes the SSE-C keys (and the rest, harmlessly) */
    free_instance((PyObject *)self);
}

/* The client of a call that holds `view` (an argument parsed with "y*"): NULL, with the
 * view released and the exception set, when there is none. */
struct s3f_client *client_holding(ClientObject *self, Py_buffer *view) {
    struct s3f_client *c = client_get(self);
    if (!c)
        PyBuffer_Release(view);
    return c;
}

/* ---- Client: the calls that take strings only ----------------------------------------- */

/* One C call that takes strings only (a[i]; NULL for an optional one not given) and
 * returns nothing, or an object's info in *info. */
typedef enum s3f_status (*str_call_fn)(struct s3f_client *c, const char *const *a,
                                       struct s3f_object_info *info, struct s3f_error *err);

struct str_op {
    const char *format;     /* PyArg_ParseTuple's: "s" and "z" only, at most STR_ARGS */
    char **kwlist;          /* the keywords (METH_KEYWORDS), or NULL: positional only */
    int returns_info;       /* 1: the info dict, 0: None */
    str_call_fn call;
};

#define STR_ARGS 5

/* The shape every such method has, written once: parse the strings, the client, the call
 * with the GIL released, its result or its error raised. */
static PyObject *str_method(ClientObject *self, PyObject *args, PyObject *kw,
                            const struct str_op *op) {
    const char *a[STR_ARGS] = {NULL};
    int ok = op->kwlist ? PyArg_ParseTupleAndKeywords(args, kw, op->format, op->kwlist, &a[0],
                                                      &a[1], &a[2], &a[3], &a[4])
                        : PyArg_ParseTuple(args, op->format, &a[0], &a[1], &a[2], &a[3], &a[4]);
    if (!ok)
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, op->call(c, a, &info, &err));
    return op->returns_info ? info_or_raise(st, &err, &info) : none_or_raise(st, &err);
}

static enum s3f_status head_object(struct s3f_client *c, const char *const *a,
                                   struct s3f_object_info *info, struct s3f_error *err) {
    return s3f_head_object(c, a[0], a[1], a[2], info, err);
}

static enum s3f_status delete_object(struct s3f_client *c, const char *const *a,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    (void)info;
    return s3f_delete_object(c, a[0], a[1], err);
}

static enum s3f_status create_bucket(struct s3f_client *c, const char *const *a,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    (void)info;
    return s3f_create_bucket(c, a[0], err);
}

static enum s3f_status delete_bucket(struct s3f_client *c, const char *const *a,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    (void)info;
    return s3f_delete_bucket(c, a[0], err);
}

static enum s3f_status rename_object(struct s3f_client *c, const char *const *a,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    (void)info;
    return s3f_rename_object(c, a[0], a[1], a[2], a[3], err);
}

/* server-side CopyObject (at most 5 GiB) */
static enum s3f_status copy_object(struct s3f_client *c, const char *const *a,
                                   struct s3f_object_info *info, struct s3f_error *err) {
    return s3f_copy_object(c, a[0], a[1], a[2], a[3], info, err);
}

static enum s3f_status abort_multipart_upload(struct s3f_client *c, const char *const *a,
                                              struct s3f_object_info *info,
                                              struct s3f_error *err) {
    (void)info;
    return s3f_abort_multipart_upload(c, a[0], a[1], a[2], err);
}

static char *head_object_kw[] = {"bucket", "key", "version_id", NULL};

/* The table: one row per method (its docstring is in Client_methods). */
static const struct str_op op_head_object = {"ss|z", head_object_kw, 1, head_object},
                           op_delete_object = {"ss:delete_object", NULL, 0, delete_object},
                           op_create_bucket = {"s:create_bucket", NULL, 0, create_bucket},
                           op_delete_bucket = {"s:delete_bucket", NULL, 0, delete_bucket},
                           op_rename_object = {"sss|z:rename_object", NULL, 0, rename_object},
                           op_copy_object = {"ssss:copy_object", NULL, 1, copy_object},
                           op_abort_multipart_upload = {"sss:abort_multipart_upload", NULL, 0,
                                                        abort_multipart_upload};

/* The methods: Client_<name> calls str_method with the row op_<name> (STR_METHOD_KW: with
 * keywords, METH_VARARGS | METH_KEYWORDS; STR_METHOD: positional only, METH_VARARGS). */
#define STR_METHOD_KW(name)                                                                    \
    static PyObject *Client_##name(ClientObject *self, PyObject *args, PyObject *kw) {          \
        return str_method(self, args, kw, &op_##name);                                         \
    }
#define STR_METHOD(name)                                                                       \
    static PyObject *Client_##name(ClientObject *self, PyObject *args) {                       \
        return str_method(self, args, NULL, &op_##name);                                       \
    }
STR_METHOD_KW(head_object)
STR_METHOD(delete_object)
STR_METHOD(create_bucket)
STR_METHOD(delete_bucket)
STR_METHOD(rename_object)
STR_METHOD(copy_object)
STR_METHOD(abort_multipart_upload)

/* ---- Client: object and bucket operations ------------------------------------------- */

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
    {"metrics", (PyCFunction)Client_metrics, METH_NOARGS,
     "metrics() -> dict\nA snapshot of the client's metrics registry (s3f_client_metrics): "
     "{name: [{'labels': {...}, 'value': int} or {'labels', 'buckets': [(le, n)...], 'count', "
     "'sum'}]}, docs/METRICS.md."},
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
