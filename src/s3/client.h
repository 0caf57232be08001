/* The S3 client: configuration resolved at creation, the request executor with signing and
 * AWS standard-mode retries, and the operations built on it. */
#ifndef S3F_S3_CLIENT_H
#define S3F_S3_CLIENT_H

#include <pthread.h>

#include "auth/credentials.h"
#include "auth/profile.h"
#include "auth/sigv4.h"
#include "core/core.h"
#include "http/http.h"

/* AWS standard retry mode token bucket. Guarded by its own lock. */
struct s3f__retry_bucket {
    pthread_mutex_t lock;
    int tokens;     /* starts at capacity */
    int capacity;   /* 500 */
};

struct s3f_client {
    struct s3f__logger logger;
    char *region;
    char *endpoint_url;       /* NULL: AWS */
    bool force_path_style;
    bool anonymous;
    int max_attempts;
    char *ca_bundle;
    struct s3f__aws_config *config;           /* may be NULL when no files exist */
    struct s3f__credentials_provider *creds;  /* NULL when anonymous */
    struct s3f__http_pool *http;
    struct s3f__retry_bucket retry;
};

#define S3F_MAX_EXTRA_HEADERS 16

/* One S3 request as the operations describe it; the executor adds host, date, content
 * sha256, security token and authorization, sends it and retries it. */
struct s3f__s3_request {
    const char *operation;        /* "GetObject" — for errors and logs */
    const char *method;
    const char *bucket;
    const char *key;              /* NULL or "" for bucket-level requests */
    const char *query;            /* wire-encoded, without '?', or NULL */
    struct s3f__header headers[S3F_MAX_EXTRA_HEADERS];
    size_t n_headers;
    const void *body;
    size_t body_len;
    bool sign_payload;            /* sign SHA-256 of the body instead of UNSIGNED-PAYLOAD */
    /* Response body: streamed to `sink` (2xx only; resumed after a broken connection with a
     * Range from the byte reached and If-Match), or collected in `body_out` (capped). */
    s3f_write_fn sink;
    void *sink_ud;
    struct s3f__buf *body_out;
    bool check_200_error;         /* a 200 body may be an <Error> document */
    /* Range for GET with a sink: [range_start, range_end], has_range. */
    bool has_range;
    uint64_t range_start, range_end;
    /* Output: response metadata (optional). */
    struct s3f_object_info *info;
    int http_status;              /* set by the executor */
};

/* Add an extra header (name and value must outlive the request). */
void s3f__s3_request_header(struct s3f__s3_request *r, const char *name, const char *value);

/* Send with retries. On failure fills err (operation, s3://bucket/key, HTTP status, S3 code,
 * message, request id, attempts) and returns its status. */
enum s3f_status s3f__s3_execute(struct s3f_client *c, struct s3f__s3_request *r,
                                struct s3f_error *err);

/* "s3://bucket/key" into buf. */
void s3f__s3_resource(char *buf, size_t len, const char *bucket, const char *key);

#endif
