/* The response side of one attempt of the executor (request_response.c): the response's
 * headers, every response checked against what was asked, its body to the sink, to
 * body_out or to the error buffer. Private to request.c and request_response.c. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "s3/request_internal.h"

/* ---- one attempt's response state ---------------------------------------------------- */


static void copy_hdr(char *dst, size_t dst_len, const char *v, size_t vlen) {
    s3f__strlcpyn(dst, v, vlen, dst_len);
}

static bool name_is(const char *name, size_t n, const char *want) {
    return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

void s3f__s3_attempt_on_header(void *ud, const char *name, size_t n, const char *v, size_t vlen) {
    struct s3f__s3_attempt *a = ud;
    char tmp[128];
    if (name_is(name, n, "etag")) {
        copy_hdr(a->etag, sizeof(a->etag), v, vlen);
    } else if (name_is(name, n, "x-amz-request-id")) {
        copy_hdr(a->request_id, sizeof(a->request_id), v, vlen);
    } else if (name_is(name, n, "x-amz-id-2")) {
        copy_hdr(a->host_id, sizeof(a->host_id), v, vlen);
    } else if (name_is(name, n, "content-type")) {
        copy_hdr(a->content_type, sizeof(a->content_type), v, vlen);
    } else if (name_is(name, n, "x-amz-version-id")) {
        copy_hdr(a->version_id, sizeof(a->version_id), v, vlen);
    } else if (name_is(name, n, "x-amz-storage-class")) {
        copy_hdr(a->storage_class, sizeof(a->storage_class), v, vlen);
    } else if (name_is(name, n, "x-amz-checksum-crc32c")) {
        copy_hdr(a->checksum_crc32c, sizeof(a->checksum_crc32c), v, vlen);
    } else if (name_is(name, n, "x-amz-checksum-crc32")) {
        copy_hdr(a->checksum_crc32, sizeof(a->checksum_crc32), v, vlen);
    } else if (name_is(name, n, "x-amz-checksum-crc64nvme")) {
        copy_hdr(a->checksum_crc64nvme, sizeof(a->checksum_crc64nvme), v, vlen);
    } else if (name_is(name, n, "x-amz-checksum-sha256")) {
        copy_hdr(a->checksum_sha256, sizeof(a->checksum_sha256), v, vlen);
    } else if (name_is(name, n, "last-modified")) {
        copy_hdr(tmp, sizeof(tmp), v, vlen);
        int64_t t;
        if (s3f__time_parse(tmp, &t) == 0)
            a->last_modified = t;
    } else if (name_is(name, n, "date")) {
        copy_hdr(tmp, sizeof(tmp), v, vlen);
        int64_t t;
        if (s3f__time_parse(tmp, &t) == 0)
            a->date = t;
    } else if (name_is(name, n, "content-length")) {
        copy_hdr(tmp, sizeof(tmp), v, vlen);
        char *end;
        unsigned long long x = strtoull(tmp, &end, 10);
        if (end != tmp && *end == '\0') {
            a->content_length = x;
            a->has_content_length = true;
        }
    } else if (name_is(name, n, "content-range")) {
        /* "bytes 0-9/1234" */
        copy_hdr(tmp, sizeof(tmp), v, vlen);
        unsigned long long first, last;
        int got = sscanf(tmp, "bytes %llu-%llu", &first, &last);
        if (got >= 1) {
            a->range_first = first;
            a->has_range_first = true;
        }
        if (got == 2) {
            a->range_last = last;
            a->has_range_last = true;
        }
        const char *slash = strrchr(tmp, '/');
        if (slash && slash[1] != '*') {
            char *end;
            unsigned long long x = strtoull(slash + 1, &end, 10);
            if (end != slash + 1 && *end == '\0') {
                a->total_size = x;
                a->has_total_size = true;
            }
        }
    }
}

void s3f__s3_response_head(const struct s3f__s3_request *r, struct s3f__s3_response_head *out) {
    const struct s3f__s3_attempt *a = &s3f__s3_call_of_const(r)->a;
    memset(out, 0, sizeof(*out));
    s3f__strlcpy(out->etag, a->etag, sizeof(out->etag));
    s3f__strlcpy(out->request_id, a->request_id, sizeof(out->request_id));
    s3f__strlcpy(out->checksum_crc32c, a->checksum_crc32c, sizeof(out->checksum_crc32c));
    s3f__strlcpy(out->checksum_crc32, a->checksum_crc32, sizeof(out->checksum_crc32));
    s3f__strlcpy(out->checksum_crc64nvme, a->checksum_crc64nvme,
                 sizeof(out->checksum_crc64nvme));
    out->content_length = a->content_length;
    out->has_content_length = a->has_content_length;
    out->total_size = a->total_size;
    out->has_total_size = a->has_total_size;
}

static int current_http_status(struct s3f__s3_attempt *a) {
    long code = 0;
    if (a->http.easy)
        curl_easy_getinfo(a->http.easy, CURLINFO_RESPONSE_CODE, &code);
    return (int)code;
}

/* ---- every response checked against what was asked (GET with a sink) ----------------- */

#define MAX_SHORT_RESPONSES 256 /* consistent but short answers continued, per request */

/* The ETag without a weak prefix and quotes, for comparing. */
static const char *etag_core(const char *e, size_t *n) {
    if (e[0] == 'W' && e[1] == '/')
        e += 2;
    size_t len = strlen(e);
    if (len >= 2 && e[0] == '"' && e[len - 1] == '"') {
        e++;
        len -= 2;
    }
    *n = len;
    return e;
}

/* Does the response's ETag `got` differ from the pinned `pin` (an If-Match value)? A list
 * or "*" pins nothing to compare with. */
bool s3f__s3_etag_differs(const char *pin, const char *got) {
    if (!pin[0] || !got[0] || strchr(pin, ',') || strcmp(pin, "*") == 0)
        return false;
    size_t np, ng;
    const char *p = etag_core(pin, &np), *g = etag_core(got, &ng);
    return np != ng || memcmp(p, g, np) != 0;
}

static void asked_range(const struct s3f__s3_attempt *a, char *buf, size_t len) {
    uint64_t last = s3f__s3_call_of(a->r)->range_end;
    if (last == UINT64_MAX)
        snprintf(buf, len, "bytes %" PRIu64 "-", a->want_first);
    else
        snprintf(buf, len, "bytes %" PRIu64 "-%" PRIu64, a->want_first, last);
}

/* The one place an attempt's state changes: the transition checked (request_internal.h
 * lists the allowed ones), logged at TRACE. */
static void attempt_set(struct s3f__s3_attempt *a, enum s3f__attempt_state to) {
    static const char *const name[] = {"head", "checked", "body", "rest skipped",
                                       "sink failed", "body out of memory", "body over its cap"};
    enum s3f__attempt_state from = a->state;
    S3F_ASSERT((from == S3F__ATTEMPT_HEAD &&
                (to == S3F__ATTEMPT_CHECKED || to == S3F__ATTEMPT_BODY_OOM ||
                 to == S3F__ATTEMPT_BODY_OVERFLOW)) ||
               (from == S3F__ATTEMPT_CHECKED && to == S3F__ATTEMPT_BODY) ||
               (from == S3F__ATTEMPT_BODY &&
                (to == S3F__ATTEMPT_REST_SKIPPED || to == S3F__ATTEMPT_SINK_FAILED)));
    const struct s3f__s3_call *k = s3f__s3_call_of(a->r);
    if (k->c && s3f__log_enabled(&k->c->logger, S3F_LOG_TRACE))
        s3f__log(&k->c->logger, S3F_LOG_TRACE, "%s %s: attempt %d: response %s -> %s",
                 a->r->operation, k->resource, k->attempt, name[from], name[to]);
    a->state = to;
}

S3F_PRINTF(4, 5)
static bool bad_response(struct s3f__s3_attempt *a, enum s3f_status st, bool retryable,
                         const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->bad_msg, sizeof(a->bad_msg), fmt, ap);
    va_end(ap);
    a->bad = st;
    a->bad_retryable = retryable;
    return false;
}

/* Check a 2xx response's head against the request, before its first body byte reaches the
 * sink (or at its end when it has no body), and pin the ETag and the size it tells.
 * - the ETag must be the pinned one: the If-Match sent, or the first response's (a server
 *   or gateway that ignores If-Match, or an object replaced): S3F_ERR_PRECONDITION_FAILED;
 * - a 206 must carry a Content-Range "bytes F-L/T" with L < T, Content-Length L-F+1, F the
 *   first byte asked for and L not past the last: else S3F_ERR_BAD_RESPONSE, retried as a
 *   server fault (the range is asked again);
 * - a 200 (or other 2xx) is the whole object (a server that ignores Range): accepted when it
 *   covers the first byte asked for; its head is skipped as it arrives;
 * - the total (T, or a 200's Content-Length) must equal the object size the caller pinned
 *   or the first response told: else S3F_ERR_PRECONDITION_FAILED.
 * A 206 that ends before the range does is consistent: check_complete continues it. */
static bool check_response(struct s3f__s3_attempt *a, int code) {
    struct s3f__s3_request *r = a->r;
    struct s3f__s3_call *k = s3f__s3_call_of(r);
    char asked[64];
    attempt_set(a, S3F__ATTEMPT_CHECKED);
    asked_range(a, asked, sizeof(asked));
    const char *pin = k->user_if_match ? k->user_if_match : k->pinned_etag;
    if (s3f__s3_etag_differs(pin, a->etag))
        return bad_response(a, S3F_ERR_PRECONDITION_FAILED, false,
                            "the response is of ETag %s, not of the pinned %s%s: the object "
                            "changed (or the server ignored If-Match)",
                            a->etag, pin, k->user_if_match ? " (If-Match)" : "");
    uint64_t first, last, total = 0;
    bool has_total;
    if (code == 206) {
        if (!a->has_range_first || !a->has_range_last || a->range_last < a->range_first)
            return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                                "asked for %s, the 206 response has no valid Content-Range",
                                asked);
        first = a->range_first;
        last = a->range_last;
        has_total = a->has_total_size;
        total = a->total_size;
        if (has_total && last >= total)
            return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                                "Content-Range bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
                                " ends past the object",
                                first, last, total);
        if (!has_total && k->has_pinned_size && last >= k->pinned_size)
            return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                                "Content-Range bytes %" PRIu64 "-%" PRIu64 " of an unknown "
                                "total ends past the object of %" PRIu64 " bytes",
                                first, last, k->pinned_size);
        if (a->has_content_length && a->content_length != last - first + 1)
            return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                                "Content-Length %" PRIu64 " does not match Content-Range bytes "
                                "%" PRIu64 "-%" PRIu64,
                                a->content_length, first, last);
        a->resp_end = last + 1;
    } else {
        first = 0;
        has_total = a->has_content_length;
        total = a->content_length;
        /* without a length, the body may not run past the object's known size */
        a->resp_end = has_total             ? total
                      : k->has_pinned_size ? k->pinned_size
                                           : UINT64_MAX;
    }
    if (has_total && k->has_pinned_size && total != k->pinned_size)
        return bad_response(a, S3F_ERR_PRECONDITION_FAILED, false,
                            "asked for %s of an object of %" PRIu64 " bytes, the %d response "
                            "is of an object of %" PRIu64 " bytes: the object changed",
                            asked, k->pinned_size, code, total);
    if (code == 206 &&
        (first != a->want_first || (k->range_end != UINT64_MAX && last > k->range_end))) {
        char tot[24];
        if (has_total)
            snprintf(tot, sizeof(tot), "%" PRIu64, total);
        else
            snprintf(tot, sizeof(tot), "*");
        return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                            "asked for %s, the server answered bytes %" PRIu64 "-%" PRIu64
                            "/%s",
                            asked, first, last, tot);
    }
    if (code != 206 && has_total && a->want_first > 0 && a->want_first >= total)
        return bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                            "asked for %s, the server answered %d with %" PRIu64 " bytes",
                            asked, code, total);
    if (!k->pinned_etag[0] && a->etag[0])
        s3f__strlcpy(k->pinned_etag, a->etag, sizeof(k->pinned_etag));
    if (has_total && !k->has_pinned_size) {
        k->pinned_size = total;
        k->has_pinned_size = true;
    }
    attempt_set(a, S3F__ATTEMPT_BODY);
    a->resp_pos = first;
    return true;
}

/* At the end of a 2xx response to a GET with a sink: 0 when every byte asked for (within
 * the object) reached the sink; 1 when the answer was consistent but ended early (a short
 * 206): the rest is to be asked for; -1 with *e filled when the response is wrong. */
int s3f__s3_check_complete(struct s3f__s3_attempt *a, int code, struct s3f_error *e,
                          bool *retryable) {
    struct s3f__s3_call *k = s3f__s3_call_of(a->r);
    if (a->state == S3F__ATTEMPT_HEAD)
        check_response(a, code);
    if (!a->bad) {
        uint64_t end = k->range_end == UINT64_MAX ? UINT64_MAX : k->range_end + 1;
        if (k->has_pinned_size && k->pinned_size < end)
            end = k->pinned_size;
        if (end == UINT64_MAX ||
            (code != 206 && a->resp_end == UINT64_MAX && !k->has_pinned_size)) {
            /* no size known (an open range, a 206 whose total is "*", a 200 without a
             * length, and no size pinned before): the object ends with this body, but not before the end its head
             * announced (a 206 of bytes 0-99 of "*" whose body stops at 50 is short, not
             * complete: the body ended early) */
            end = a->resp_end != UINT64_MAX && a->resp_pos < a->resp_end ? a->resp_end
                                                                         : a->resp_pos;
        }
        if (a->sink_pos >= end)
            return 0;
        char asked[64];
        asked_range(a, asked, sizeof(asked));
        if (a->resp_end != UINT64_MAX && a->resp_pos != a->resp_end)
            bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                         "asked for %s, the body ended at offset %" PRIu64
                         " before the %" PRIu64 " its head announced",
                         asked, a->resp_pos, a->resp_end);
        else if (a->sink_pos == a->want_first)
            bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                         "asked for %s, the %d response brought none of it", asked, code);
        else if (k->short_responses >= MAX_SHORT_RESPONSES)
            bad_response(a, S3F_ERR_BAD_RESPONSE, false,
                         "asked for %s, the server answered short %d times", asked,
                         k->short_responses + 1);
        else
            return 1;
    }
    s3f_error_clear(e);
    e->status = a->bad;
    e->http_status = code;
    s3f__strlcpy(e->message, a->bad_msg, sizeof(e->message));
    s3f__strlcpy(e->request_id, a->request_id, sizeof(e->request_id));
    s3f__strlcpy(e->host_id, a->host_id, sizeof(e->host_id));
    *retryable = a->bad_retryable;
    return -1;
}

int s3f__s3_attempt_on_body(void *ud, const char *data, size_t len) {
    struct s3f__s3_attempt *a = ud;
    return s3f__s3_attempt_body(a, current_http_status(a), data, len);
}

int s3f__s3_attempt_body(struct s3f__s3_attempt *a, int code, const char *data, size_t len) {
    if (code >= 200 && code < 300) {
        if (a->r->sink) {
            /* Place the bytes by their object offset: a server that ignores Range answers
             * 200 with the whole object, whose head we then skip. */
            if (a->state == S3F__ATTEMPT_HEAD && !check_response(a, code))
                return 1;
            uint64_t pos = a->resp_pos, end = pos + len;
            a->resp_pos = end;
            if (end > a->resp_end) {
                char asked[64];
                asked_range(a, asked, sizeof(asked));
                bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                             "asked for %s, the body goes past the offset %" PRIu64
                             " its head announced",
                             asked, a->resp_end);
                return 1;
            }
            uint64_t stop = s3f__s3_call_of(a->r)->range_end == UINT64_MAX ? UINT64_MAX
                                                               : s3f__s3_call_of(a->r)->range_end + 1;
            if (pos >= stop && a->sink_pos >= stop) {
                /* a whole-object answer past the range: all asked for came, stop reading */
                attempt_set(a, S3F__ATTEMPT_REST_SKIPPED);
                return 1;
            }
            if (pos > a->sink_pos) {
                bad_response(a, S3F_ERR_BAD_RESPONSE, true,
                             "the server answered from offset %" PRIu64 ", past %" PRIu64, pos,
                             a->sink_pos);
                return 1;
            }
            if (end > stop)
                end = stop;
            if (end <= a->sink_pos)
                return 0;
            size_t skip = (size_t)(a->sink_pos - pos);
            size_t n = (size_t)(end - a->sink_pos);
            if (a->r->sink(a->r->sink_ud, data + skip, n, a->sink_pos) != 0) {
                attempt_set(a, S3F__ATTEMPT_SINK_FAILED);
                return 1;
            }
            a->sink_pos += n;
            return 0;
        }
        if (a->r->body_out) {
            enum s3f_status bst = s3f__buf_append(a->r->body_out, data, len);
            if (bst != S3F_OK) {
                attempt_set(a, bst == S3F_ERR_NO_MEMORY ? S3F__ATTEMPT_BODY_OOM
                                                        : S3F__ATTEMPT_BODY_OVERFLOW);
                return 1;
            }
            return 0;
        }
        return 0;
    }
    /* error documents are small; keep the first 64 KiB */
    if (a->err_body.len < ERROR_BODY_MAX) {
        size_t room = ERROR_BODY_MAX - a->err_body.len;
        s3f__buf_append(&a->err_body, data, len < room ? len : room);
    }
    return 0;
}
