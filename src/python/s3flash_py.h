/* src/python: the CPython extension s3flash._s3flash, a front end (docs/PYTHON.md; the
 * Python package on top of it is python/s3flash/).
 * May call: the public header <s3flash/s3flash.h> and the limited C API of Python only.
 *
 * What the files of the extension s3flash._s3flash share (see _s3flash.c for the whole
 * picture): the Client object, the exceptions and the helpers every type uses.
 *
 *   _s3flash.c  module init, parse_uri, the shared helpers
 *   errors.c    the exception types and raising an S3 error as one of them
 *   client.c    Client: configuration, the C client per process, the type and its method
 *               table, the calls that take strings only (one table, one wrapper)
 *   client_transfer.c  Client's uploads, downloads and copies (buffers, files)
 *   client_multipart.c Client's listings and the low-level multipart calls
 *   writer.c    Writer (a streaming upload) and Client.open_writer
 *   reader.c    Reader (a random-access reader) and Client.open_reader
 *   metrics.c   Client.metrics(): the registry's snapshot as a dict
 *   fetch.c     Fetch (many whole objects fetched concurrently) and Client.open_fetch
 *   safetensors.c  ranged downloads into regions, a ranged GET, the safetensors header's
 *               parser (for python/s3flash/safetensors.py)
 * As CPython's Modules/_io/ splits its types. Private to src/python. */
#ifndef S3FLASH_PY_H
#define S3FLASH_PY_H

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

/* The request options of a Client (docs/CONFIGURATION.md), strings of s3f_client_options,
 * in the order of Client_init's keywords (client.c). The SSE-C keys are secrets: wiped when
 * freed. */
enum {
    ROPT_SSE,
    ROPT_SSE_KMS_KEY_ID,
    ROPT_SSE_KMS_CONTEXT,
    ROPT_SSE_C_KEY,
    ROPT_SSE_C_COPY_SOURCE_KEY,
    ROPT_STORAGE_CLASS,
    ROPT_EXPECTED_OWNER,
    ROPT_ACL,
    ROPT_USER_AGENT_EXTRA,
    ROPT_PROXY,
    ROPT_NO_PROXY,
    ROPT_PROXY_CA_BUNDLE,
    ROPT_COUNT_
};

typedef struct {
    PyObject_HEAD
    struct s3f_client *client; /* NULL until first use, and in a child after fork */
    pid_t pid;                 /* process that built `client` */
    unsigned long forks_seen;  /* how many times a fork was detected (tests) */
    char *region, *endpoint, *profile, *akid, *secret, *token, *ca_bundle;
    int initialized, force_path_style, anonymous, max_attempts, tls_insecure, requester_pays;
    int express_read_only, disable_express_session_auth; /* S3 Express One Zone */
    enum s3f_checksum_algorithm checksum;
    double gbps;
    unsigned long long part_size, memory_limit;
    uint32_t memory_wait_timeout_ms; /* 0: the library's 60 s */
    unsigned int max_inflight, io_threads, max_connections;
    char *cache_dir;           /* the block cache (cache_dir), NULL: none */
    unsigned long long cache_max_bytes, cache_min_free_bytes;
    char *ropt[ROPT_COUNT_];   /* the request options (ROPT_), NULL: unset */
    int bucket_key_enabled;    /* sse_bucket_key_enabled: 1, -1, 0 */
} ClientObject;

/* heap types, made in PyInit__s3flash */
extern PyTypeObject *ClientType, *WriterType, *ReaderType, *FetchType;
extern PyType_Spec Client_spec, Writer_spec, Reader_spec, Fetch_spec;

/* the exceptions (errors.c), made in PyInit__s3flash */
extern PyObject *S3Exception, *S3NotFoundError, *S3PermissionError, *S3ValueError,
    *S3TimeoutError, *S3ConnectionError, *S3MemoryError, *S3IOError;

PyObject *raise_s3_ex(enum s3f_status st, const struct s3f_error *err, const char *path,
                      const char *extra);
PyObject *raise_s3(enum s3f_status st, const struct s3f_error *err);
/* A call's result (errors.c): None, the info dict or (part_number, etag); or its error
 * raised when st is not S3F_OK. */
PyObject *none_or_raise(enum s3f_status st, const struct s3f_error *err);
PyObject *info_or_raise(enum s3f_status st, const struct s3f_error *err,
                        const struct s3f_object_info *info);
PyObject *part_or_raise(enum s3f_status st, const struct s3f_error *err,
                        const struct s3f_part_info *part);
int set_str_attr(PyObject *obj, const char *name, const char *value);
int set_int_attr(PyObject *obj, const char *name, long value);
char *dup_or_null(const char *s);
void free_secret(char *s);
void lock_take(PyThread_type_lock lk);
PyObject *info_to_dict(const struct s3f_object_info *info);
int parse_checksum(const char *name, enum s3f_checksum_algorithm *out);
/* *o for an upload: part_size (0: the client's), checksum by name (parse_checksum),
 * content_type (NULL: none); -1 with ValueError set for an unknown checksum. */
int upload_options(struct s3f_upload_options *o, unsigned long long part_size,
                   const char *checksum, const char *content_type);
void free_instance(PyObject *self);
struct s3f_client *client_get(ClientObject *self);
/* The client of a call that holds `view` (an argument parsed with "y*"): NULL, with the
 * view released and the exception set, when there is none. */
struct s3f_client *client_holding(ClientObject *self, Py_buffer *view);
/* client_transfer.c */
PyObject *Client_upload(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_put_object(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_download_into(ClientObject *self, PyObject *args);
PyObject *Client_download_whole(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_upload_file(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_download_file(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_copy(ClientObject *self, PyObject *args, PyObject *kw);
/* metrics.c */
PyObject *Client_metrics(ClientObject *self, PyObject *Py_UNUSED(ignored));
/* client_multipart.c */
PyObject *Client_list_objects(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_list_multipart_uploads(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_list_buckets(ClientObject *self, PyObject *Py_UNUSED(ignored));
PyObject *Client_create_multipart_upload(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_upload_part(ClientObject *self, PyObject *args);
PyObject *Client_upload_part_copy(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_complete_multipart_upload(ClientObject *self, PyObject *args);
PyObject *Client_open_writer(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_open_reader(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_open_fetch(ClientObject *self, PyObject *args, PyObject *kw);
/* safetensors.c */
PyObject *Client_download_range_into(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_get_range(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *mod_safetensors_header_length(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *mod_parse_safetensors_header(PyObject *mod, PyObject *args, PyObject *kw);
int get_contiguous(PyObject *obj, Py_buffer *view, void **copy);
/* The token set inside a list_tokens() capsule (borrowed), or NULL with TypeError set. */
struct s3f_list_tokens **list_tokens_of(PyObject *obj);

#define CLIENT_OR_NULL(self, c)                                                               \
    struct s3f_client *c = client_get(self);                                                 \
    if (!c)                                                                                   \
        return NULL

/* Call the C API with the GIL released: `call`, an expression of it that fills `err` and
 * yields its status. Declares `err` (cleared first) and `st` (the status) in the enclosing
 * block, for the result that follows (raise_s3(st, &err) when st is not S3F_OK). */
#define CALL_NOGIL(st, err, call)                                                             \
    struct s3f_error err;                                                                     \
    s3f_error_clear(&err);                                                                    \
    enum s3f_status st;                                                                       \
    Py_BEGIN_ALLOW_THREADS                                                                    \
    st = (call);                                                                              \
    Py_END_ALLOW_THREADS

#endif /* S3FLASH_PY_H */
