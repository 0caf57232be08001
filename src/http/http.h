/* src/http: the transport.
 * Owns: the I/O threads, their libcurl multi handles and connections, admission and the
 *   control lane, the stall clock, the map of CURLcode to statuses (http.c).
 * May call: core/, libcurl. Never auth/, s3/, xfer/. Called by s3/ (the executor and the
 *   client that creates the pool), auth/ (the CURLcode map only), xfer/ (the count of data
 *   connections only).
 *
 * The HTTP transport: libcurl multi handles driven by a small pool of I/O threads.
 *
 * A request is a `struct s3f__http_request` owned by the caller. It is submitted to the pool
 * and completes on an I/O thread, which calls its `done` (the s3 layer's executor waits
 * there, or goes on asynchronously). Connections are kept
 * per I/O thread and reused; DNS and TLS sessions are shared across threads. HTTP/1.1 only.
 *
 * Each I/O thread hands curl at most as many requests as it has connections (its share of
 * max_connections); the rest wait in the thread's queue, where no time-out runs. A few of
 * each thread's connections (1 from 4 per thread, 2 from 16) are reserved for control
 * requests (`control`), which also go first. The stall time-out of a request starts only
 * when it has a connection and its bytes start to move.
 *
 * Thread-safety: the pool may be used from any number of threads. A request must not be
 * touched by the caller between submit and completion, except through its callbacks, which
 * run on the I/O thread that drives it. */
#ifndef S3F_HTTP_H
#define S3F_HTTP_H

#include <curl/curl.h>
#include <pthread.h>

#include "core/core.h"

struct s3f__http_pool;

struct s3f__http_pool_options {
    uint32_t io_threads;         /* 0: 2 */
    uint32_t max_connections;    /* 0: 64, across all threads */
    uint32_t connect_timeout_ms; /* 0: 10000 */
    uint32_t stall_timeout_ms;   /* 0: 30000 (checked about every 100 ms, from the moment
                                    the request has a connection) */
    const char *ca_bundle;       /* NULL: system default */
    bool tls_insecure;
    /* Proxies, set on every request (the environment is never read here: the s3 layer
     * resolved it): for http:// and https:// URLs (NULL: none), the hosts reached directly
     * (CURLOPT_NOPROXY; NULL: none), the CA bundle of an https:// proxy (NULL: ca_bundle). */
    const char *http_proxy, *https_proxy, *no_proxy, *proxy_ca_bundle;
    const char *interfaces;       /* SO_BINDTODEVICE, comma-separated, in turn; NULL: none */
    const struct s3f__logger *logger; /* must outlive the pool */
    struct s3f_metrics *metrics;      /* connections (core/metrics.h); must outlive the pool */
};

enum s3f_status s3f__http_pool_new(const struct s3f__http_pool_options *opts,
                                   struct s3f__http_pool **out, struct s3f_error *err);
/* Connections data requests may use across all threads: max_connections less those kept
 * for control requests (1 per thread from 4 per thread, 2 from 16). */
uint32_t s3f__http_pool_data_connections(const struct s3f__http_pool *pool);
/* Stops the threads (requests still queued complete with S3F_ERR_ABORTED) and frees. */
void s3f__http_pool_free(struct s3f__http_pool *pool);

struct s3f__http_request;
/* Header callback: one call per response header (name and value trimmed, not NUL-terminated). */
typedef void (*s3f__http_header_fn)(void *ud, const char *name, size_t name_len,
                                    const char *value, size_t value_len);
/* Body callback: return 0 to continue, non-zero to abort the transfer (S3F_ERR_ABORTED). */
typedef int (*s3f__http_body_fn)(void *ud, const char *data, size_t len);
/* Request body source for bodies not in memory: fill up to `len` bytes at `offset` of the
 * body; return the count, or -1 on error. Called on the I/O thread. */
typedef long (*s3f__http_read_fn)(void *ud, char *buf, size_t len, uint64_t offset);
typedef void (*s3f__http_done_fn)(struct s3f__http_request *req, void *ud);

struct s3f__http_request {
    /* ---- input, set by the caller ---- */
    const char *method;           /* "GET", "PUT", "POST", "HEAD", "DELETE" */
    const char *url;
    struct curl_slist *headers;   /* owned by the caller */
    const void *body;             /* request body in memory, or NULL */
    uint64_t body_len;            /* length of body (or of what read_body provides) */
    s3f__http_read_fn read_body;  /* alternative to `body` */
    void *read_ud;
    s3f__http_header_fn on_header;
    s3f__http_body_fn on_body;
    void *cb_ud;
    uint32_t timeout_ms;          /* 0: no overall limit (the stall timeout still applies);
                                     counted from the moment it has a connection slot */
    bool fresh_connect;           /* on a new connection: curl re-sends a request whose
                                     reused connection died before any response byte, and
                                     the caller would never know a response was lost */
    uint64_t not_before_ns;       /* s3f__now_ns() time before which it is not sent (backoff);
                                     0: at once */
    bool control;                 /* a small control request (Create/Complete/Abort
                                     MultipartUpload, HEAD, List...): may use the connections
                                     reserved for them and goes before waiting data requests */

    /* ---- output, valid after completion ---- */
    enum s3f_status status;       /* S3F_OK when an HTTP response was fully received */
    int http_status;              /* 0 if none */
    int curl_code;                /* CURLcode */
    char error[CURL_ERROR_SIZE];  /* transport error text, empty on success */
    const char *proxy;            /* the proxy this attempt was given (the pool's), or NULL */
    uint64_t bytes_sent;
    uint64_t bytes_received;      /* body bytes */
    uint64_t start_ns, end_ns;
    uint64_t first_byte_us;       /* from the transfer's start (not the queue's) to the
                                     response's first byte (CURLINFO_STARTTRANSFER_TIME_T);
                                     0: none came */
    uint64_t total_us;            /* ... to its end (CURLINFO_TOTAL_TIME_T) */

    /* ---- private to the transport ---- */
    CURL *easy;
    struct io_thread *io;         /* the I/O thread running it */
    uint64_t body_pos;
    uint64_t stall_ns;            /* the stall timeout */
    uint64_t moved;               /* bytes moved, up and down, as of moved_ns */
    uint64_t moved_ns;
    int64_t unsent;               /* the socket's send queue (SIOCOUTQ) as last seen; -1 unknown */
    int sock;                     /* its socket as last found, -1 none */
    bool moving;                  /* the stall clock runs (a connection, bytes about to move) */
    bool stalled;                 /* stopped by the stall check */
    s3f__http_done_fn done;
    void *done_ud;
    struct s3f__http_request *next;
};

/* Queue the request; `done` runs on an I/O thread when it completes (always, also on
 * failure). Never calls `done` synchronously. A request whose url is NULL completes at once
 * (on the I/O thread) with S3F_ERR_INVALID_ARGUMENT: callers use that to report a failure
 * asynchronously. */
void s3f__http_submit(struct s3f__http_pool *pool, struct s3f__http_request *req,
                      s3f__http_done_fn done, void *ud);

/* Whether a transport failure may succeed when retried (reset, timeout, refused...). */
bool s3f__http_error_retryable(const struct s3f__http_request *req);

/* The one CURLcode -> status map of the library (the transport's, and the credentials
 * providers' easy transfers): CONNECT (resolve, connect), TIMEOUT, TLS, ABORTED (a callback
 * stopped it, also CURLE_WRITE_ERROR), IO (read callback), NO_MEMORY, INVALID_ARGUMENT
 * (malformed URL), else NETWORK. */
enum s3f_status s3f__http_status_of_curl(int curl_code);
/* Whether a transport failure was a timeout (costs more retry tokens). */
bool s3f__http_error_is_timeout(const struct s3f__http_request *req);

#endif
