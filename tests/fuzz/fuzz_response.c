/* Response completeness (src/s3/request_response.c): the head of a GET's 2xx answer checked
 * against the range asked for (check_response), its body placed by object offset
 * (s3f__s3_attempt_body) and, at its end, the verdict complete / short / wrong
 * (s3f__s3_check_complete), with sizes known and unknown (a Content-Range whose total is "*",
 * an open range "bytes=F-", a 200 without Content-Length).
 * Input: flags byte, range start, NUL, range end ("" for an open range), NUL, pinned object
 * size ("" for none), NUL, response header lines ("Name: value", LF), NUL, body.
 * flags: bit 0: status 206 (else 200); bits 1-3: the body comes in pieces of 1 << (2 * n)
 * bytes (n = 0: whole).
 * The transport's part is played as curl plays it: a body longer than its Content-Length is
 * cut there, one shorter is a transport error (never checked for completeness).
 * Checked (FUZZ_CHECK): the sink receives the bytes in order from the first asked for,
 * never past the range; and a response taken as complete brought every byte its head
 * announced and every byte of the range within the object when the size is known. */
#include <inttypes.h>
#include <stdbool.h>

#include "fuzz.h"
#include "s3/request_internal.h"

struct sink_state {
    uint64_t next;  /* next offset expected */
    uint64_t stop;  /* past the last byte asked for */
};

static int fuzz_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct sink_state *s = ud;
    (void)data;
    FUZZ_CHECK(offset == s->next);
    FUZZ_CHECK(len > 0 && offset + len <= s->stop);
    s->next = offset + len;
    return 0;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t pos = 1;
    char *f_start = fuzz_field(data, size, &pos);
    char *f_end = fuzz_field(data, size, &pos);
    char *f_pinned = fuzz_field(data, size, &pos);
    char *f_head = fuzz_field(data, size, &pos);
    const uint8_t *body = data + pos;
    size_t body_len = pos < size ? size - pos : 0;
    if (pos > size)
        body_len = 0;

    struct s3f__s3_request r;
    memset(&r, 0, sizeof(r));
    struct s3f__s3_call *k = s3f__s3_call_of(&r);
    struct s3f__s3_attempt *a = &k->a;
    uint64_t start = 0, end = UINT64_MAX, pinned = 0;
    if (f_start[0] && !parse_u64(f_start, &start))
        goto out;
    if (f_end[0] && (!parse_u64(f_end, &end) || end < start || end == UINT64_MAX))
        goto out;
    r.operation = "GetObject";
    r.method = "GET";
    r.has_range = true;
    struct sink_state ss = {.next = start, .stop = end == UINT64_MAX ? UINT64_MAX : end + 1};
    r.sink = fuzz_sink;
    r.sink_ud = &ss;
    k->range_start = start;
    k->range_end = end;
    if (f_pinned[0]) {
        if (!parse_u64(f_pinned, &pinned))
            goto out;
        k->pinned_size = pinned;
        k->has_pinned_size = true;
    }
    a->r = &r;
    a->sink_pos = start;
    a->want_first = start;

    /* the head, line by line, as curl hands it over */
    for (char *p = f_head; *p;) {
        char *nl = strchr(p, '\n');
        char *le = nl ? nl : p + strlen(p);
        char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            char *ve = le;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
                ve--;
            s3f__s3_attempt_on_header(a, p, (size_t)(colon - p), v, (size_t)(ve - v));
        }
        p = nl ? nl + 1 : le;
    }
    int code = flags & 1 ? 206 : 200;
    if (a->has_content_length) {
        if (body_len < a->content_length)
            goto out; /* curl: CURLE_PARTIAL_FILE, a transport error */
        if (body_len > a->content_length)
            body_len = (size_t)a->content_length;
    }
    size_t piece = ((flags >> 1) & 7) ? (size_t)1 << (2 * ((flags >> 1) & 7)) : body_len;
    bool stopped = false;
    for (size_t off = 0; off < body_len && !stopped;) {
        size_t n = body_len - off < piece ? body_len - off : piece;
        if (s3f__s3_attempt_body(a, code, (const char *)body + off, n) != 0)
            stopped = true;
        off += n;
    }
    FUZZ_CHECK(a->sink_pos == ss.next);
    if (stopped && a->state != S3F__ATTEMPT_REST_SKIPPED)
        goto out; /* the transfer stopped: a->bad says why, or the sink did */
    struct s3f_error e;
    bool retryable = false;
    int verdict = s3f__s3_check_complete(a, code, &e, &retryable);
    FUZZ_CHECK(verdict >= -1 && verdict <= 1);
    if (verdict == -1)
        FUZZ_CHECK(e.status != S3F_OK && memchr(e.message, 0, sizeof(e.message)));
    if (verdict == 0) {
        uint64_t stop = ss.stop;
        /* every byte the head announced (within the range) reached the sink */
        if (a->resp_end != UINT64_MAX) {
            uint64_t want = a->resp_end < stop ? a->resp_end : stop;
            FUZZ_CHECK(a->sink_pos >= want);
        }
        /* every byte of the range within the object, when its size is known */
        if (k->has_pinned_size) {
            uint64_t want = k->pinned_size < stop ? k->pinned_size : stop;
            FUZZ_CHECK(a->sink_pos >= want);
        }
    }
out:
    s3f__buf_cleanup(&a->err_body);
    free(f_start);
    free(f_end);
    free(f_pinned);
    free(f_head);
    return 0;
}
