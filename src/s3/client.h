/* src/s3: the S3 protocol over the transport.
 * Owns: the client's configuration (client.c: s3f__s3_client_new, the s3 half of
 *   s3f_client_new), endpoints and addressing (endpoint.c), s3:// URIs (uri.c); the
 *   executor that signs, sends, checks and retries (request.c, with request_response.c
 *   for what an attempt does with the response, retry.c for the status mapping, the retry
 *   decision, quota and backoff, idempotency.c for each operation's class); the operations
 *   (ops.c: object operations and presign, ops_multipart.c, ops_list.c: listings and
 *   buckets, ops_prepared.c: the prepared requests of ops_internal.h that the engine
 *   submits); the XML documents (xml.c, xml_list.c, xml_delete.c).
 * May call: core/, auth/, http/; libcurl (client.c, the executor's URLs and header lists,
 *   endpoint.c's URL parser), expat (xml*.c). Never xfer/: the engine of a client is only a
 *   pointer here (struct s3f__xfer_engine), created and freed by xfer/.
 * Called by: xfer/ (this header and ops_internal.h) and, for the public functions it
 *   implements, the front ends.
 *
 * The S3 client: configuration resolved at creation, the request executor with signing and
 * AWS standard-mode retries, and the operations built on it. */
#ifndef S3F_S3_CLIENT_H
#define S3F_S3_CLIENT_H

#include <pthread.h>

#include "core/core.h"
#include "s3/endpoint.h"
#include "s3/request_options.h"

/* Of auth/ and http/, this header names only pointers and a callback's type, so that what
 * includes it (xfer/) sees neither folder (tests/layering.py checks includes transitively):
 * the executor's state in each request is opaque storage here, defined in
 * s3/request_internal.h. */
struct s3f__aws_config;
struct s3f__credentials_provider;
struct s3f__http_pool;

/* AWS standard retry mode token bucket. Guarded by its own lock. */
struct s3f__retry_bucket {
    pthread_mutex_t lock;
    int tokens;     /* starts at capacity */
    int capacity;   /* 500 */
};

struct s3f__xfer_engine; /* the transfer engine's own (src/xfer/xfer.h) */
struct s3f__express;     /* S3 Express sessions per directory bucket (express.c) */

struct s3f_client {
    struct s3f__logger logger;
    char *region;
    char *endpoint_url;       /* NULL: AWS */
    bool force_path_style;
    bool use_fips, use_dual_stack, accelerate; /* AWS endpoint variants */
    bool anonymous;
    bool requester_pays;      /* x-amz-request-payer: requester on every request */
    struct s3f__request_options ropts; /* encryption, storage class, ACL, owner, User-Agent */
    int max_attempts;
    char *ca_bundle;
    uint32_t connect_timeout_ms;
    /* S3 Express One Zone (express.c): the sessions of the directory buckets used, the mode
     * CreateSession asks for, and whether sessions are used at all */
    struct s3f__express *express;
    bool express_read_only;
    bool express_session_auth_disabled;
    struct s3f__aws_config *config;           /* may be NULL when no files exist */
    struct s3f__credentials_provider *creds;  /* NULL when anonymous */
    struct s3f__http_pool *http;
    struct s3f__retry_bucket retry;
    /* The transfer engine of this client: its options and state, created and freed by the
     * engine (s3f_client_new and s3f_client_free in src/xfer/xfer.c compose the s3 client
     * and the engine). The s3 layer never reads it. */
    struct s3f__xfer_engine *xfer;
    /* The client's metrics (core/metrics.h: the S3F__M_* ids; docs/METRICS.md), updated by
     * every layer with atomics; created first, freed last. */
    struct s3f_metrics *metrics;
};

/* The s3 layer's part of s3f_client_new and s3f_client_free (src/xfer/xfer.c calls them
 * around the engine's): configuration, credentials chain and transport. `opts` is not
 * NULL; on failure *out is NULL and err says why. */
enum s3f_status s3f__s3_client_new(const struct s3f_client_options *opts,
                                   struct s3f_client **out, struct s3f_error *err);
void s3f__s3_client_free(struct s3f_client *c);
/* Connections data requests may use across the transport's threads (the engine's plan). */
uint32_t s3f__s3_data_connections(const struct s3f_client *c);

#define S3F_MAX_EXTRA_HEADERS 16


struct s3f__s3_request;
/* A request body streamed by a callback (the transport's s3f__http_read_fn, the same type):
 * fill up to `len` bytes at `offset` of the body; return the count, or -1 on error. Called
 * on an I/O thread. */
typedef long (*s3f__s3_read_fn)(void *ud, char *buf, size_t len, uint64_t offset);
/* Bytes of the executor's per-request state (checked in s3/request_internal.h) */
#define S3F__S3_CALL_BYTES 4544
/* Completion of an asynchronous request: runs on an I/O thread exactly once, never inside
 * s3f__s3_submit; `st` is the final status after retries (the err passed to submit is filled
 * on failure). It must not block; it may submit further requests. */
typedef void (*s3f__s3_done_fn)(struct s3f__s3_request *r, enum s3f_status st, void *ud);


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
    const char *header_overflow;  /* the first header past S3F_MAX_EXTRA_HEADERS: an error */
    const void *body;
    size_t body_len;
    bool sign_payload;            /* sign SHA-256 of the body instead of UNSIGNED-PAYLOAD */
    /* Response body: streamed to `sink` (2xx only; resumed after a broken connection with a
     * Range from the byte reached and If-Match), or collected in `body_out` (capped). */
    s3f_write_fn sink;
    void *sink_ud;
    struct s3f__buf *body_out;
    bool check_200_error;         /* a 200 body may be an <Error> document */
    /* Range for GET with a sink: [range_start, range_end], has_range. Every response is
     * checked against it (status, Content-Range, Content-Length, bytes received, the ETag
     * against If-Match or the first response's); a consistent but short answer is
     * continued with a request for the rest. docs/TRANSFER.md lists the checks. */
    bool has_range;
    uint64_t range_start, range_end;
    /* The object's size when the caller knows it (HEAD, a listing, an earlier response):
     * every response's total must equal it (else S3F_ERR_PRECONDITION_FAILED). */
    bool has_object_size;
    uint64_t object_size;
    /* Output: response metadata (optional). */
    struct s3f_object_info *info;
    int http_status;              /* set by the executor */
    /* Set by the executor (s3/idempotency.h): an attempt before the last one failed after
     * its request was sent in full (a transport failure past connecting, or a 5xx), so the
     * server may have acted on it and the last answer may be the answer to a repeat. Set
     * only for operations whose class is not IDEMPOTENT; the caller reconciles. */
    bool lost_response;
    int attempts;                 /* attempts sent (1 without retries) */
    int64_t server_date;          /* Date of the latest response that had one (Unix s), or 0 */
    /* Request body streamed by a callback instead of `body` (fill up to len bytes at
     * `offset` of the body; return the count or -1). Called on an I/O thread. */
    s3f__s3_read_fn read_body;
    void *read_ud;
    /* Limits of this request: attempts (0: the client's max_attempts) and the time each
     * attempt may take in all, connection included (0: none beyond the stall timeout). */
    int max_attempts;
    uint32_t timeout_ms;
    /* S3 Express: a bucket operation of the regional control endpoint (CreateBucket,
     * DeleteBucket of a directory bucket), signed with the caller's credentials */
    bool s3express_control;
    /* A HeadObject of a copy's source: it carries the SSE-C key of copy sources
     * (request_options.h) instead of the client's. */
    bool copy_source;
    /* private: the executor's state (struct s3f__s3_call, s3/request_internal.h), kept in
     * the request so that a transfer allocates nothing per request */
    union {
        max_align_t align;
        unsigned char bytes[S3F__S3_CALL_BYTES];
    } call;
};

/* Add an extra header (name and value must outlive the request). Past
 * S3F_MAX_EXTRA_HEADERS the request fails when it is sent (S3F_ERR_INVALID_ARGUMENT naming
 * the header), never silently without it. */
void s3f__s3_request_header(struct s3f__s3_request *r, const char *name, const char *value);

/* Start `r` asynchronously with retries (backoff timers live on the I/O threads; no thread
 * sleeps). `r` and `err` (may be NULL) must stay valid until `done` ran. */
void s3f__s3_submit(struct s3f_client *c, struct s3f__s3_request *r, struct s3f_error *err,
                    s3f__s3_done_fn done, void *ud);

/* Send with retries and wait. On failure fills err (operation, s3://bucket/key, HTTP status, S3 code,
 * message, request id, attempts) and returns its status. */
enum s3f_status s3f__s3_execute(struct s3f_client *c, struct s3f__s3_request *r,
                                struct s3f_error *err);

/* The endpoint resolver's inputs for a request to `bucket` (NULL: none) by this client. */
struct s3f__endpoint_params s3f__client_endpoint_params(const struct s3f_client *c,
                                                        const char *bucket);

/* What the transfer engine may know of the response being received: its head as the
 * executor parsed it, copied out (the attempt's own state stays private to request.c). */
struct s3f__s3_response_head {
    char etag[128];
    char request_id[128];
    char checksum_crc32c[16], checksum_crc32[16], checksum_crc64nvme[24];
    uint64_t content_length;
    bool has_content_length;
    uint64_t total_size; /* from Content-Range */
    bool has_total_size;
};
/* The head of the response `r` is receiving now: call from its sink (I/O thread), where
 * the head has been parsed and checked before the first body byte. */
void s3f__s3_response_head(const struct s3f__s3_request *r, struct s3f__s3_response_head *out);

/* S3 Express sessions (express.c): the table is created with the client and freed with it;
 * s3f__express_provider returns (creating it on first use) the credentials provider of a
 * directory bucket's sessions, owned by the table. Thread-safe. */
enum s3f_status s3f__express_new(struct s3f_client *c, struct s3f_error *err);
void s3f__express_free(struct s3f_client *c);
enum s3f_status s3f__express_provider(struct s3f_client *c, const char *bucket,
                                      struct s3f__credentials_provider **out,
                                      struct s3f_error *err);
/* Whether an error code answered to a session's request means "create a new session and
 * send it again once": ExpiredToken, TokenRefreshRequired, InvalidToken, AccessDenied. */
bool s3f__express_session_rejected(const char *code);

/* "s3://bucket/key" into buf. */
void s3f__s3_resource(char *buf, size_t len, const char *bucket, const char *key);

#endif
