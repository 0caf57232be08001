/* Shared by the executor (request.c) and the response side of its attempts
 * (request_response.c); private to them. */
#ifndef S3F_S3_REQUEST_INTERNAL_H
#define S3F_S3_REQUEST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "auth/credentials.h"
#include "http/http.h"
#include "s3/client.h"

/* Where an attempt's response is (request_response.c; changed only by its attempt_set,
 * which checks the transition and logs it at TRACE). A new attempt starts at HEAD (0):
 *   HEAD -> CHECKED     a 2xx response to a request with a sink: its head is being checked
 *                       against the request (check_response); a->bad says if it failed
 *   CHECKED -> BODY     the head passed: its body goes to the sink
 *   BODY -> REST_SKIPPED  a whole-object 200 past the range asked for: all asked for came,
 *                       the rest is not read (the transfer is stopped, a success)
 *   BODY -> SINK_FAILED   the caller's sink refused the bytes (the transfer is stopped)
 *   HEAD -> BODY_OOM      a 2xx body for body_out that could not grow (stopped)
 *   HEAD -> BODY_OVERFLOW a 2xx body for body_out past its cap (stopped) */
enum s3f__attempt_state {
    S3F__ATTEMPT_HEAD,
    S3F__ATTEMPT_CHECKED,
    S3F__ATTEMPT_BODY,
    S3F__ATTEMPT_REST_SKIPPED,
    S3F__ATTEMPT_SINK_FAILED,
    S3F__ATTEMPT_BODY_OOM,
    S3F__ATTEMPT_BODY_OVERFLOW,
};

/* One attempt's response state (private to the executor). */
struct s3f__s3_attempt {
    struct s3f__s3_request *r;
    struct s3f__http_request http;
    struct s3f__buf err_body;      /* body of a non-2xx response */
    uint64_t sink_pos;             /* next object offset the sink expects */
    enum s3f__attempt_state state;
    /* response headers */
    char etag[128];
    char request_id[128];
    char host_id[256];
    char content_type[128];
    char version_id[128];
    char storage_class[32];
    char checksum_crc32c[16], checksum_crc32[16], checksum_crc64nvme[24], checksum_sha256[48];
    int64_t last_modified;
    int64_t date;                  /* the response's Date (Unix seconds), 0 if none */
    uint64_t content_length;
    bool has_content_length;
    uint64_t total_size;           /* from Content-Range */
    bool has_total_size;
    uint64_t range_first;          /* first byte of a 206 response, from Content-Range */
    bool has_range_first;
    uint64_t range_last;           /* last byte of a 206 response, from Content-Range */
    bool has_range_last;
    uint64_t resp_pos;             /* object offset of the next response byte */
    /* With a sink, the response head is checked against the request before the first
     * body byte reaches the sink (request.c, check_response). */
    uint64_t want_first;           /* the first object byte this attempt asks for */
    uint64_t resp_end;             /* object offset past the response's last byte, or
                                    * UINT64_MAX when its length is not announced */
    enum s3f_status bad;           /* not what was asked: the error, its message */
    bool bad_retryable;
    char bad_msg[400];
};

/* The executor's response-header callback (an s3f__http_header_fn, `ud` the attempt):
 * records one header of the response (ETag, request ids, content type, version, storage
 * class, the x-amz-checksum-* values, Last-Modified and Date, Content-Length, Content-Range
 * "bytes F-L/T") in *ud. Pure: no I/O, no allocation; exposed for tests/fuzz/fuzz_headers.c. */
void s3f__s3_attempt_on_header(void *ud, const char *name, size_t n, const char *v, size_t vlen);

/* The executor's state for one request across its attempts (private to request.c). */
struct s3f__s3_call {
    struct s3f_client *c;
    struct s3f_error *err;          /* the caller's, or local_err */
    struct s3f_error local_err;
    s3f__s3_done_fn done;
    void *done_ud;
    int attempt;
    int max_attempts;
    uint64_t range_start, range_end;
    uint64_t delivered;             /* bytes already handed to the sink */
    char pinned_etag[128];          /* ETag of the first response, for resumed GETs */
    uint64_t pinned_size;           /* object size: the caller's, or the first response's */
    bool has_pinned_size;
    int short_responses;            /* consistent responses that ended before the range */
    const char *user_if_match;
    bool used_retry_token;
    int last_cost;
    bool prep_failed;               /* this attempt could not be built; err says why */
    int idem;                       /* enum s3f__idem_class of the request */
    uint64_t creds_generation;      /* credentials snapshot that signed this attempt */
    struct s3f__credentials_provider *creds_provider; /* ...and its provider (a session's) */
    bool token_resent;              /* re-sent once after ExpiredToken & co. */
    /* parked while the refresher fetches credentials (none usable: expired, or the server
     * rejected the token): re-queued by it, never waiting on an I/O thread */
    struct s3f__credentials_waiter creds_wait;
    uint64_t parked_not_before_ns;
    uint32_t parks;                 /* times parked (tests, logs) */
    char resource[600];
    char range[80];
    char *url;
    struct curl_slist *headers;
    struct s3f__s3_attempt a;
};

_Static_assert(sizeof(struct s3f__s3_call) <= S3F__S3_CALL_BYTES,
               "struct s3f__s3_call outgrew its storage in struct s3f__s3_request: raise "
               "S3F__S3_CALL_BYTES in s3/client.h");
_Static_assert(_Alignof(struct s3f__s3_call) <= _Alignof(max_align_t),
               "struct s3f__s3_call needs more alignment than its storage has");

/* The executor's state of request `r`. */
static inline struct s3f__s3_call *s3f__s3_call_of(struct s3f__s3_request *r) {
    return (struct s3f__s3_call *)(void *)r->call.bytes;
}
static inline const struct s3f__s3_call *s3f__s3_call_of_const(const struct s3f__s3_request *r) {
    return (const struct s3f__s3_call *)(const void *)r->call.bytes;
}

#define ERROR_BODY_MAX (64u << 10) /* bytes of a non-2xx body kept */

/* The attempt's body callback (an s3f__http_body_fn, `ud` the attempt): a 2xx body to the
 * sink (checked first, placed by object offset) or to body_out, an error body to err_body. */
int s3f__s3_attempt_on_body(void *ud, const char *data, size_t len);
/* The same for a response of HTTP status `code` (exposed for tests/fuzz/fuzz_response.c):
 * 0 to go on, 1 to stop the transfer (a->bad or a->state says why). */
int s3f__s3_attempt_body(struct s3f__s3_attempt *a, int code, const char *data, size_t len);
/* At the end of a 2xx response to a GET with a sink: 0 when every byte asked for (within
 * the object) reached the sink; 1 when the answer was consistent but ended early (a short
 * 206): the rest is to be asked for; -1 with *e filled when the response is wrong. */
int s3f__s3_check_complete(struct s3f__s3_attempt *a, int code, struct s3f_error *e,
                           bool *retryable);
/* Does the response's ETag `got` differ from the pinned `pin` (an If-Match value)? A list
 * or "*" pins nothing to compare with. */
bool s3f__s3_etag_differs(const char *pin, const char *got);

#endif
