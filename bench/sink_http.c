/*
 * s3flash-sink: connections: HTTP/1.1 request heads and bodies, sending responses, and the
 * worker threads with their epoll loops. See sink.h and, for the threading, sink.c.
 */
#include "sink.h"

/* Parses decimal digits [p, p+n) into *out; false on empty, non-digit or overflow past 2^62. */
bool parse_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 19)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (UINT64_C(1) << 62))
        return false;
    *out = v;
    return true;
}

int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes [s, s+n) into out (room for n bytes); '+' is kept (S3 keys). Returns the
 * decoded length; malformed escapes are copied through. */
size_t pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

void http_date(time_t t, char *buf, size_t n)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

char g_listen_tag, g_stop_tag;

static void conn_close(struct conn *c)
{
    struct worker *w = c->w;
    /* Read what the peer already sent, so that closing does not answer it with an RST that
     * could destroy our last response (e.g. a 431 sent before the whole head arrived). */
    for (int i = 0; i < 64; i++)
        if (recv(c->fd, w->rbuf, g_opt.recv_buf, MSG_DONTWAIT) <= 0)
            break;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->cbody);
    buf_put(c->sb.p, c->sb.cap);
    blob_unref(c->blob);
    if (c->busy)
        atomic_fetch_sub(&g_lim.active, 1);
    free(c);
    atomic_fetch_sub(&w->load, 1);
    atomic_fetch_sub(&g_nconns, 1);
}

static bool set_interest(struct conn *c, uint32_t ev)
{
    if (c->interest == ev)
        return true;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
        return false;
    c->interest = ev;
    return true;
}

bool hv_eq(struct hdrval v, const char *s)
{
    size_t n = strlen(s);
    return v.n == n && strncasecmp(v.p, s, n) == 0;
}

static bool hv_contains_token(struct hdrval v, const char *tok)
{
    size_t n = strlen(tok);
    for (size_t i = 0; i + n <= v.n; i++)
        if (strncasecmp(v.p + i, tok, n) == 0)
            return true;
    return false;
}

/* Parses the query string [q, q+n). */
static void parse_query(struct conn *c, const char *q, size_t n)
{
    struct req *r = &c->rq;
    const char *end = q + n;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        if (!amp)
            amp = end;
        const char *eq = memchr(q, '=', (size_t)(amp - q));
        struct hdrval name = {q, (size_t)((eq ? eq : amp) - q)};
        struct hdrval val = {eq ? eq + 1 : amp, eq ? (size_t)(amp - eq - 1) : 0};
        if (hv_eq(name, "uploads"))
            r->q_uploads = true;
        else if (hv_eq(name, "delete"))
            r->q_delete = true;
        else if (hv_eq(name, "location"))
            r->q_location = true;
        else if (hv_eq(name, "uploadId"))
            r->upload_id = val;
        else if (hv_eq(name, "partNumber")) {
            r->has_part_number = true;
            if (!parse_u64(val.p, val.n, &r->part_number))
                r->part_number = 0;
        } else if (hv_eq(name, "list-type"))
            r->q_list_type2 = val.n == 1 && val.p[0] == '2';
        else if (hv_eq(name, "prefix"))
            r->prefix = val;
        else if (hv_eq(name, "delimiter"))
            r->delimiter = val;
        else if (hv_eq(name, "continuation-token"))
            r->cont_token = val;
        else if (hv_eq(name, "start-after") || hv_eq(name, "marker"))
            r->start_after = val;
        else if (hv_eq(name, "max-keys"))
            r->max_keys = val;
        else if (hv_eq(name, "session"))
            r->q_session = true;
        else if (hv_eq(name, "renameObject"))
            r->q_rename = true;
        else if (hv_eq(name, "sink-stats"))
            r->q_sink_stats = true;
        else if (hv_eq(name, "sink-revoke-sessions"))
            r->q_sink_revoke = true;
        else if (name.n)
            r->q_other = true;
        q = amp + 1;
    }
}

/* Parses the request head in[0, hdr_end). Returns 0, or an HTTP status for a malformed
 * request (400, 431, 501, 505). */
static int parse_head(struct conn *c, size_t hdr_end)
{
    struct req *r = &c->rq;
    memset(r, 0, sizeof(*r));
    const char *p = c->in, *end = c->in + hdr_end;
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!eol)
        return 400;
    /* request line */
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1)
        return 400;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (!sp2)
        return 400;
    r->method_raw = (struct hdrval){p, (size_t)(sp1 - p)};
    r->target = (struct hdrval){sp1 + 1, (size_t)(sp2 - sp1 - 1)};
    struct hdrval ver = {sp2 + 1, (size_t)(eol - sp2 - 1)};
    if (hv_eq(ver, "HTTP/1.1"))
        r->http_minor = 1;
    else if (hv_eq(ver, "HTTP/1.0"))
        r->http_minor = 0;
    else
        return 505;
    if (hv_eq(r->method_raw, "GET"))
        r->method = M_GET;
    else if (hv_eq(r->method_raw, "HEAD"))
        r->method = M_HEAD;
    else if (hv_eq(r->method_raw, "PUT"))
        r->method = M_PUT;
    else if (hv_eq(r->method_raw, "POST"))
        r->method = M_POST;
    else if (hv_eq(r->method_raw, "DELETE"))
        r->method = M_DELETE;
    /* headers */
    for (p = eol + 2; p < end; p = eol + 2) {
        eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if (eol == p)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon || colon == p)
            return 400;
        struct hdrval name = {p, (size_t)(colon - p)};
        const char *v = colon + 1, *ve = eol;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        struct hdrval val = {v, (size_t)(ve - v)};
        if (hv_eq(name, "content-length")) {
            uint64_t cl;
            if (!parse_u64(val.p, val.n, &cl) || (r->has_cl && cl != r->content_length))
                return 400;
            r->has_cl = true;
            r->content_length = cl;
        } else if (hv_eq(name, "transfer-encoding")) {
            r->has_te = true;
            r->te = val;
            r->te_chunked = hv_eq(val, "chunked");
        } else if (hv_eq(name, "content-encoding")) {
            r->content_encoding = val;
            if (hv_contains_token(val, "aws-chunked"))
                r->aws_chunked = true;
        } else if (hv_eq(name, "expect")) {
            r->expect_continue = hv_eq(val, "100-continue");
        } else if (hv_eq(name, "connection")) {
            if (hv_contains_token(val, "close"))
                r->conn_close = true;
            if (hv_contains_token(val, "keep-alive"))
                r->conn_keep_alive = true;
        } else if (hv_eq(name, "range")) {
            r->range = val;
        } else if (hv_eq(name, "if-match")) {
            r->if_match = val;
        } else if (hv_eq(name, "x-amz-copy-source")) {
            r->copy_source = val;
        } else if (hv_eq(name, "x-amz-s3session-token")) {
            r->s3session_token = val;
        } else if (hv_eq(name, "x-amz-security-token")) {
            r->security_token = val;
        } else if (hv_eq(name, "authorization")) {
            r->authorization = val;
        } else if (hv_eq(name, "x-amz-create-session-mode")) {
            r->session_mode = val;
        } else if (hv_eq(name, "x-amz-write-offset-bytes")) {
            r->write_offset = val;
        } else if (hv_eq(name, "x-amz-rename-source")) {
            r->rename_source = val;
        } else if (hv_eq(name, "if-none-match")) {
            r->if_none_match = val;
        } else if (hv_eq(name, "x-amz-decoded-content-length")) {
            r->has_decoded_len = parse_u64(val.p, val.n, &r->decoded_len);
        } else if (name.n > 15 && strncasecmp(name.p, "x-amz-checksum-", 15) == 0) {
            if (r->ncks < MAX_CKS && val.n <= CK_VAL_MAX && name.n <= 64) {
                r->ck_name[r->ncks] = name;
                r->ck_val[r->ncks] = val;
                r->ncks++;
            }
        }
    }
    /* target: origin-form, or absolute-form (skip scheme and authority) */
    const char *t = r->target.p, *te = t + r->target.n;
    if (te - t > 7 && strncasecmp(t, "http://", 7) == 0) {
        t = memchr(t + 7, '/', (size_t)(te - t - 7));
        if (!t)
            t = te;
    }
    if (t == te || *t != '/') {
        if (t != te)
            return 400;
    }
    const char *qm = memchr(t, '?', (size_t)(te - t));
    const char *pe = qm ? qm : te;
    if (pe > t)
        t++; /* leading '/' */
    size_t nl = pct_decode(t, (size_t)(pe - t), c->name);
    c->name[nl] = 0;
    char *slash = memchr(c->name, '/', nl);
    r->bucket = c->name;
    r->bucket_len = slash ? (size_t)(slash - c->name) : nl;
    r->key = slash ? slash + 1 : c->name + nl;
    r->key_len = slash ? nl - r->bucket_len - 1 : 0;
    r->name = c->name;
    r->name_len = nl;
    if (qm)
        parse_query(c, qm + 1, (size_t)(te - qm - 1));
    /* decoded in place: decoding never lengthens, and nothing else reads these bytes */
    struct hdrval *decode[] = {&r->prefix, &r->delimiter, &r->cont_token, &r->start_after};
    for (size_t i = 0; i < sizeof(decode) / sizeof(decode[0]); i++) {
        if (decode[i]->n) {
            char *pp = c->in + (decode[i]->p - c->in);
            size_t n = pct_decode(pp, decode[i]->n, pp);
            *decode[i] = (struct hdrval){pp, n};
        }
    }
    if (r->start_after.n) {
        char *pp = c->in + (r->start_after.p - c->in);
        size_t n = pct_decode(pp, r->start_after.n, pp);
        r->start_after = (struct hdrval){pp, n};
    }
    if (r->has_te && !r->te_chunked)
        return 501; /* only plain "chunked" is understood */
    if (g_opt.express)
        r->head_t = time(NULL);
    return 0;
}

/* Sends a small interim response directly (100 Continue). */
static bool send_small(struct conn *c, const char *s, size_t n)
{
    ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL);
    return k == (ssize_t)n;
}

/* ---- request bodies: where their bytes go ---- */
enum bdst { BD_DISCARD, BD_KEEP, BD_STORE };

/* Grows the store buffer of a body of unknown size (chunked) to take at least `more` bytes.
 * False (and store_err set: the rest is discarded) when --store does not allow it. */
static bool store_grow(struct conn *c, uint64_t more)
{
    uint64_t ncap = c->sb.cap * 2;
    if (ncap < c->sb.len + more)
        ncap = c->sb.len + more;
    if (ncap < (64u << 10))
        ncap = 64u << 10;
    uint64_t cap;
    uint8_t *p = buf_get(ncap, &cap);
    if (!p) {
        c->store_err = 507;
        c->store_want = ncap;
        return false;
    }
    if (c->sb.len)
        memcpy(p, c->sb.p, (size_t)c->sb.len);
    buf_put(c->sb.p, c->sb.cap);
    c->sb.p = p;
    c->sb.cap = cap;
    return true;
}

/* Where the next body bytes go, at most want of them (*room set, > 0 for want > 0): the kept
 * body (CompleteMultipartUpload, DeleteObjects), the store buffer, or the discard buffer. */
static uint8_t *body_dst(struct conn *c, uint64_t want, size_t *room, enum bdst *kind)
{
    if (c->cbody) {
        size_t left = c->cbody_cap - c->cbody_len;
        if (left) {
            *room = want < left ? (size_t)want : left;
            *kind = BD_KEEP;
            return (uint8_t *)c->cbody + c->cbody_len;
        }
        c->cbody_toobig = true; /* a chunked body over COMPLETE_BODY_CAP */
    } else if (c->storing && !c->store_err &&
               (c->sb.len < c->sb.cap || store_grow(c, want))) {
        uint64_t left = c->sb.cap - c->sb.len;
        *room = (size_t)(want < left ? want : left);
        *kind = BD_STORE;
        return c->sb.p + c->sb.len;
    }
    *room = want < g_opt.recv_buf ? (size_t)want : g_opt.recv_buf;
    *kind = BD_DISCARD;
    return c->w->rbuf;
}

static void body_got(struct conn *c, enum bdst kind, size_t n)
{
    if (kind == BD_KEEP)
        c->cbody_len += n;
    else if (kind == BD_STORE)
        c->sb.len += n;
    c->w->bytes_in += n;
    limit_used(c, DIR_RECV, n);
}

/* Body bytes that arrived with the head (or a chunk line) in in[]. */
static void body_take(struct conn *c, const char *p, size_t n)
{
    while (n) {
        size_t room;
        enum bdst kind;
        uint8_t *d = body_dst(c, n, &room, &kind);
        if (kind != BD_DISCARD)
            memcpy(d, p, room);
        body_got(c, kind, room);
        p += room;
        n -= room;
    }
}

/* What a recv() that returned n <= 0 means to a body step: 0 wait for EPOLLIN, 1 try again,
 * -1 the connection is over (closed or failed). */
static int recv_failed(ssize_t n) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n < 0 && errno == EINTR)
        return 1;
    return -1;
}

/* One step of reading a chunked body (RFC 9112 7.1; also aws-chunked, whose chunk extensions
 * carry signatures and whose trailers carry checksums: both ignored). Data goes to body_dst;
 * size lines and trailers are read into in[] after the head, so that bytes of the next
 * request read with them stay in in[]. Returns 1 on progress (the request may be finished or
 * failed: c->state says), 0 when the socket has nothing more now, -1 to close. */
static int chunked_step(struct conn *c, size_t *budget)
{
    if (c->ch_state == CH_DATA) {
        if (c->ch_left == 0) {
            c->ch_state = CH_DATA_END;
            return 1;
        }
        if (c->in_len > c->req_used) {
            size_t take = c->in_len - c->req_used;
            if (take > c->ch_left)
                take = (size_t)c->ch_left;
            body_take(c, c->in + c->req_used, take);
            c->req_used += take;
            c->ch_left -= take;
            c->decoded += take;
            return 1;
        }
        if (*budget == 0)
            return 0;
        size_t room;
        enum bdst kind;
        uint8_t *d = body_dst(c, c->ch_left, &room, &kind);
        if (!(room = limit_io(c, DIR_RECV, room, &c->wake_ns)))
            return 0; /* the read budget: asleep until c->wake_ns */
        ssize_t n = recv(c->fd, d, room, 0);
        if (n > 0) {
            body_got(c, kind, (size_t)n);
            c->ch_left -= (uint64_t)n;
            c->decoded += (uint64_t)n;
            *budget = (size_t)n >= *budget ? 0 : *budget - (size_t)n;
            return 1;
        }
        return recv_failed(n);
    }
    /* a line: a chunk size, the CRLF after a chunk's data, a trailer or the final CRLF */
    char *b = c->in + c->req_used;
    size_t avail = c->in_len - c->req_used;
    char *nl = memchr(b, '\n', avail);
    if (!nl) {
        if (c->req_used > c->hdr_end) { /* make room: drop what was consumed after the head */
            memmove(c->in + c->hdr_end, b, avail);
            c->in_len = c->hdr_end + avail;
            c->req_used = c->hdr_end;
        }
        if (c->in_len >= sizeof(c->in)) {
            fail_request_msg(c, 400, "BadRequest",
                             "A chunk-size or trailer line of the chunked body is too long.");
            return 1;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            return 1;
        }
        return recv_failed(n);
    }
    size_t ll = (size_t)(nl - b);
    c->req_used += ll + 1;
    if (ll && b[ll - 1] == '\r')
        ll--;
    switch (c->ch_state) {
    case CH_SIZE: {
        uint64_t v = 0;
        size_t i = 0;
        for (; i < ll && hexval(b[i]) >= 0; i++) {
            if (v >> 58) {
                fail_request_msg(c, 400, "BadRequest", "A chunk size is too large.");
                return 1;
            }
            v = v * 16 + (uint64_t)hexval(b[i]);
        }
        if (i == 0 || (i < ll && b[i] != ';' && b[i] != ' ' && b[i] != '\t')) {
            fail_request_msg(c, 400, "BadRequest",
                             "Malformed chunk-size line in the chunked body.");
            return 1;
        }
        c->ch_left = v;
        c->ch_state = v ? CH_DATA : CH_TRAILER;
        return 1;
    }
    case CH_DATA_END:
        if (ll != 0) {
            fail_request_msg(c, 400, "BadRequest",
                             "A chunk's data is longer than its size (no CRLF after it).");
            return 1;
        }
        c->ch_state = CH_SIZE;
        return 1;
    case CH_TRAILER:
        if (ll == 0) { /* the end of the body */
            c->ch_state = CH_DONE;
            finish_request(c);
        }
        return 1;
    default:
        return 1;
    }
}

/* Looks for a complete head in in[]; on success parses it and moves to ST_BODY (or ST_SEND).
 * Returns 1 if progress was made, 0 if more input is needed, -1 to close. */
static int try_head(struct conn *c)
{
    size_t from = c->scan > 3 ? c->scan - 3 : 0;
    char *e = memmem(c->in + from, c->in_len - from, "\r\n\r\n", 4);
    if (!e) {
        c->scan = c->in_len;
        if (c->in_len >= sizeof(c->in)) {
            fail_request(c, 431);
            return 1;
        }
        return 0;
    }
    size_t hdr_end = (size_t)(e - c->in) + 4;
    c->scan = 0;
    c->req_used = hdr_end;
    int st = parse_head(c, hdr_end);
    if (st) {
        fail_request(c, st);
        return 1;
    }
    struct req *r = &c->rq;
    if (!c->busy) {
        c->busy = true;
        atomic_fetch_add(&g_lim.active, 1);
    }
    c->close_after = r->conn_close || (r->http_minor == 0 && !r->conn_keep_alive);
    c->hdr_end = hdr_end;
    /* Transfer-Encoding: chunked overrides Content-Length (RFC 9112 6.3). An aws-chunked body
     * (Content-Length = its encoded size) is decoded only when its bytes are stored; else it
     * is counted as Content-Length bytes and x-amz-decoded-content-length is its size. */
    c->chunked = r->te_chunked || (g_opt.store_max && r->aws_chunked && r->method == M_PUT);
    c->ch_state = CH_SIZE;
    c->ch_left = c->decoded = 0;
    c->body_left = !c->chunked && r->has_cl ? r->content_length : 0;
    c->cbody_len = c->cbody_cap = 0;
    c->cbody_toobig = false;
    c->storing = false;
    c->store_err = 0;
    bool keep = r->method == M_POST && (r->upload_id.n || (r->q_delete && r->key_len == 0));
    if (keep && (c->body_left || c->chunked)) {
        if (c->body_left > COMPLETE_BODY_CAP) {
            c->cbody_toobig = true;
        } else {
            size_t cap = c->chunked ? COMPLETE_BODY_CAP : (size_t)c->body_left;
            free(c->cbody);
            c->cbody = malloc(cap);
            if (!c->cbody)
                return -1;
            c->cbody_cap = cap;
        }
    }
    if (g_opt.store_max && r->method == M_PUT && r->key_len && !r->copy_source.n &&
        (r->has_cl || c->chunked)) {
        /* store mode: the body's buffer now (its size known), or as chunks arrive */
        uint64_t want = c->chunked ? (r->has_decoded_len ? r->decoded_len : 0) : c->body_left;
        c->storing = true;
        c->sb = (struct seg){0};
        if (want && !(c->sb.p = buf_get(want, &c->sb.cap))) {
            c->store_err = 507; /* answered once the body is read (and discarded) */
            c->store_want = want;
        }
    }
    /* body bytes already in in[] (a chunked body reads them itself) */
    size_t have = c->in_len - hdr_end;
    size_t take = have < c->body_left ? have : (size_t)c->body_left;
    if (take) {
        body_take(c, c->in + hdr_end, take);
        c->body_left -= take;
        c->req_used += take;
    }
    if ((c->body_left || (c->chunked && !have)) && r->expect_continue &&
        !send_small(c, "HTTP/1.1 100 Continue\r\n\r\n", 25))
        return -1;
    c->state = ST_BODY;
    return 1;
}

/* The request is answered: drop its bytes from in[], back to reading a head. */
static void request_done(struct conn *c)
{
    memmove(c->in, c->in + c->req_used, c->in_len - c->req_used);
    c->in_len -= c->req_used;
    c->req_used = 0;
    c->scan = 0;
    free(c->cbody);
    c->cbody = NULL;
    buf_put(c->sb.p, c->sb.cap); /* a body that was not kept (an error) */
    c->sb = (struct seg){0};
    c->storing = false;
    c->chunked = false;
    blob_unref(c->blob);
    c->blob = NULL;
    c->state = ST_HEAD;
    if (c->busy) {
        c->busy = false;
        atomic_fetch_sub(&g_lim.active, 1);
    }
    c->fb_done = false;
    c->fb_due = 0;
}

/* Puts c to sleep until `until` (CLOCK_MONOTONIC ns): no epoll interest; its worker drives
 * it again then. False if the connection was closed. */
bool conn_sleep(struct conn *c, uint64_t until)
{
    c->wake_ns = until ? until : 1;
    return set_interest(c, 0) || (conn_close(c), false);
}

/* Runs the connection's state machine until it would block or has used its budget.
 * Returns false if the connection was closed. */
static bool drive(struct conn *c)
{
    struct worker *w = c->w;
    size_t budget = DRIVE_BUDGET;
    for (;;) {
        switch (c->state) {
        case ST_HEAD: {
            if (c->in_len > 0) {
                int t = try_head(c);
                if (t < 0)
                    goto close;
                if (t > 0)
                    continue;
            }
            ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
            if (n > 0) {
                c->in_len += (size_t)n;
                int t = try_head(c);
                if (t < 0)
                    goto close;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close; /* EOF or error */
        }
        case ST_BODY: {
            if (c->chunked) {
                int t = chunked_step(c, &budget);
                if (t < 0)
                    goto close;
                if (t == 0 && c->wake_ns)
                    return conn_sleep(c, c->wake_ns);
                if (t == 0)
                    return set_interest(c, EPOLLIN) || (conn_close(c), false);
                continue;
            }
            if (c->body_left == 0) {
                finish_request(c);
                continue;
            }
            if (budget == 0)
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            size_t want;
            enum bdst kind;
            uint8_t *dst = body_dst(c, c->body_left, &want, &kind);
            uint64_t wake;
            if (!(want = limit_io(c, DIR_RECV, want, &wake)))
                return conn_sleep(c, wake); /* the read budget */
            ssize_t n = recv(c->fd, dst, want, 0);
            if (n > 0) {
                c->body_left -= (uint64_t)n;
                body_got(c, kind, (size_t)n);
                budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close;
        }
        case ST_SEND: {
            if (c->out_off == c->out_len && c->pat_left == 0) {
                if (c->close_after)
                    goto close;
                request_done(c);
                continue;
            }
            if (budget == 0)
                return set_interest(c, EPOLLOUT) || (conn_close(c), false);
            if (g_lim_timers && !c->fb_done) { /* the first-byte latency */
                uint64_t now = now_ns();
                if (!c->fb_due)
                    c->fb_due = now + limit_first_byte_ns(w);
                if (now < c->fb_due)
                    return conn_sleep(c, c->fb_due);
                c->fb_done = true;
            }
            struct iovec iov[SEND_IOVS + 1];
            int niov = 0;
            if (c->out_off < c->out_len)
                iov[niov++] = (struct iovec){c->out + c->out_off, c->out_len - c->out_off};
            uint64_t off = c->pat_off, left = c->pat_left;
            if (c->blob && left) { /* stored bytes, across the object's segments */
                const struct blob *bl = c->blob;
                for (uint32_t i = blob_seg_at(bl, off); left && niov < SEND_IOVS + 1 &&
                                                        i < bl->nseg; i++) {
                    const struct seg *sg = &bl->seg[i];
                    if (off >= sg->start + sg->len)
                        continue;
                    uint64_t in = off - sg->start, len = sg->len - in;
                    if (len > left)
                        len = left;
                    if (len > (1u << 30))
                        len = 1u << 30;
                    iov[niov++] = (struct iovec){sg->p + in, (size_t)len};
                    off += len;
                    left -= len;
                    if (off < sg->start + sg->len)
                        break; /* capped: the rest of this segment in the next sendmsg */
                }
            }
            while (!c->blob && left && niov < SEND_IOVS + 1) {
                size_t pos = (size_t)(off % PAT_PERIOD);
                size_t len = left < PAT_PERIOD ? (size_t)left : PAT_PERIOD;
                iov[niov++] = (struct iovec){g_pat + pos, len};
                off += len;
                left -= len;
            }
            if (g_lim_bytes) { /* pacing: send what the buckets allow, sleep if nothing */
                size_t total = 0;
                for (int i = 0; i < niov; i++)
                    total += iov[i].iov_len;
                uint64_t wake;
                size_t allow = limit_io(c, DIR_SEND, total, &wake);
                if (!allow)
                    return conn_sleep(c, wake);
                for (int i = 0; i < niov; i++) {
                    if (iov[i].iov_len >= allow) {
                        iov[i].iov_len = allow;
                        niov = i + 1;
                        break;
                    }
                    allow -= iov[i].iov_len;
                }
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (n > 0) {
                limit_used(c, DIR_SEND, (size_t)n);
                size_t k = (size_t)n;
                size_t hdr = c->out_len - c->out_off;
                if (k <= hdr) {
                    c->out_off += k;
                } else {
                    c->out_off = c->out_len;
                    c->pat_off += k - hdr;
                    c->pat_left -= k - hdr;
                    w->bytes_out += k - hdr;
                }
                budget = k >= budget ? 0 : budget - k;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLOUT) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close;
        }
        }
    }
close:
    conn_close(c);
    return false;
}

struct worker *g_workers;

/* Takes ownership of the accepted socket fd (its counts already taken): sets it up on w, or
 * closes it when memory runs out. Runs on w's thread. */
static void conn_add(struct worker *w, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = malloc(sizeof(*c));
    if (!c) {
        close(fd);
        atomic_fetch_sub(&w->load, 1);
        atomic_fetch_sub(&g_nconns, 1);
        return;
    }
    c->w = w;
    c->fd = fd;
    c->state = ST_HEAD;
    c->interest = EPOLLIN;
    c->close_after = false;
    c->in_len = c->scan = c->req_used = 0;
    c->body_left = 0;
    c->chunked = false;
    c->cbody = NULL;
    c->cbody_len = c->cbody_cap = 0;
    c->storing = false;
    c->store_err = 0;
    c->sb = (struct seg){0};
    c->blob = NULL;
    c->out_len = c->out_off = 0;
    c->pat_left = 0;
    limits_conn_init(c);
    c->prev = NULL;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e) != 0)
        conn_close(c);
}

/* Accepts what is pending on the listener and gives each connection to the least-loaded
 * worker (ties: this one). Over --max-conns, connections are closed at once. */
static void accept_some(struct worker *w)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "s3flash-sink: accept: out of file descriptors\n");
            return;
        }
        if (atomic_fetch_add(&g_nconns, 1) >= g_opt.max_conns) {
            atomic_fetch_sub(&g_nconns, 1);
            close(fd);
            continue;
        }
        struct worker *t = w;
        int best = atomic_load(&w->load);
        for (int j = 0; j < g_opt.threads; j++) {
            int l = atomic_load(&g_workers[j].load);
            if (l < best) {
                best = l;
                t = &g_workers[j];
            }
        }
        atomic_fetch_add(&t->load, 1);
        if (t != w && write(t->hand_wr, &fd, sizeof(fd)) == (ssize_t)sizeof(fd))
            continue;
        if (t != w) { /* hand-off pipe full: keep it here */
            atomic_fetch_sub(&t->load, 1);
            atomic_fetch_add(&w->load, 1);
        }
        conn_add(w, fd);
    }
}

/* Sets up the connections other workers handed to w. */
static void take_handoffs(struct worker *w)
{
    int fds[64];
    ssize_t n = read(w->hand_rd, fds, sizeof(fds));
    for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++)
        conn_add(w, fds[i]);
}

/* Closes connections handed to w that it never took (shutdown). */
void drop_handoffs(struct worker *w)
{
    int fds[64];
    ssize_t n;
    while ((n = read(w->hand_rd, fds, sizeof(fds))) > 0)
        for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++) {
            close(fds[i]);
            atomic_fetch_sub(&g_nconns, 1);
        }
}

/* Milliseconds until the earliest wake time of w's sleeping connections (rounded up), or -1
 * when none sleeps. */
static int next_wake_ms(struct worker *w)
{
    uint64_t first = 0;
    for (struct conn *c = w->conns; c; c = c->next)
        if (c->wake_ns && (!first || c->wake_ns < first))
            first = c->wake_ns;
    if (!first)
        return -1;
    uint64_t now = now_ns();
    if (first <= now)
        return 0;
    uint64_t ms = (first - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

/* Drives w's connections whose wake time has come. */
static void wake_due(struct worker *w)
{
    uint64_t now = now_ns();
    struct conn *nx;
    for (struct conn *c = w->conns; c; c = nx) {
        nx = c->next;
        if (c->wake_ns && c->wake_ns <= now) {
            c->wake_ns = 0;
            drive(c);
        }
    }
}

void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event ev[64];
    while (!atomic_load(&g_stop)) {
        int n = epoll_wait(w->ep, ev, 64, g_lim_timers ? next_wake_ms(w) : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("s3flash-sink: epoll_wait");
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &g_stop_tag)
                goto out;
            if (p == &g_listen_tag) {
                accept_some(w);
                continue;
            }
            if (p == &w->hand_rd) {
                take_handoffs(w);
                continue;
            }
            struct conn *c = p;
            if (c->wake_ns) { /* asleep: only a dead socket wakes it early */
                if (ev[i].events & (EPOLLERR | EPOLLHUP))
                    conn_close(c);
                continue;
            }
            drive(c);
        }
        if (g_lim_timers)
            wake_due(w);
    }
out:
    while (w->conns)
        conn_close(w->conns);
    return NULL;
}
