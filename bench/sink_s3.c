/*
 * s3flash-sink: the S3 protocol: what a parsed request means and the response it gets (headers,
 * XML documents, S3 error documents, ETags, ranges). Runs on the connection's worker thread.
 * See sink.h.
 */
#include "sink.h"

/* ---- output buffer (bounded; overflow is remembered, never written past; sink.h) ---- */
void ob_put(struct ob *b, const char *s, size_t n)
{
    if (n == 0) /* s may be NULL (an absent list prefix): memcpy must not see it */
        return;
    if (b->overflow || n > b->cap - b->len) {
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void ob_str(struct ob *b, const char *s)
{
    ob_put(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) void ob_printf(struct ob *b, const char *fmt, ...)
{
    va_list ap;
    if (b->overflow)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->overflow = true;
    else
        b->len += (size_t)n;
}

/* Appends s XML-escaped. */
void ob_xml(struct ob *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = NULL;
        switch (s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        case '\'': e = "&apos;"; break;
        default: break;
        }
        if (e) {
            ob_put(b, s + run, i - run);
            ob_str(b, e);
            run = i + 1;
        }
    }
    ob_put(b, s + run, n - run);
}

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 416: return "Requested Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}

static const char *worker_date(struct worker *w)
{
    time_t now = time(NULL);
    if (now != w->date_t) {
        w->date_t = now;
        http_date(now, w->date, sizeof(w->date));
    }
    return w->date;
}

/* Starts a response in c->out: status line and the common headers, Content-Length clen.
 * The caller adds its headers, then end_head(). */
static void begin_head(struct conn *c, struct ob *b, int status, uint64_t clen)
{
    struct worker *w = c->w;
    b->p = c->out;
    b->len = 0;
    b->cap = sizeof(c->out);
    b->overflow = false;
    ob_printf(b,
              "HTTP/1.1 %d %s\r\nServer: s3flash-sink\r\nDate: %s\r\n"
              "x-amz-request-id: %02X%014" PRIX64 "\r\n",
              status, reason(status), worker_date(w), (unsigned)w->idx, w->nreq);
    if (status != 204)
        ob_printf(b, "Content-Length: %" PRIu64 "\r\n", clen);
    if (c->close_after)
        ob_str(b, "Connection: close\r\n");
}

/* The request's x-amz-checksum-* headers, sent back as S3 does on a PUT. */
static void echo_checksums(const struct conn *c, struct ob *b)
{
    for (int i = 0; i < c->rq.ncks; i++) {
        ob_put(b, c->rq.ck_name[i].p, c->rq.ck_name[i].n);
        ob_str(b, ": ");
        ob_put(b, c->rq.ck_val[i].p, c->rq.ck_val[i].n);
        ob_str(b, "\r\n");
    }
}

static void end_head(struct conn *c, struct ob *b)
{
    ob_str(b, "\r\n");
    c->out_len = b->len;
    c->out_off = 0;
}

/* Headers + an XML body from w->xml (xlen bytes). Falls back to a bare 500 on overflow. */
static void respond_xml2(struct conn *c, int status, size_t xlen, bool echo_cks,
                         const char *extra)
{
    struct ob b;
    bool head = c->rq.method == M_HEAD;
    begin_head(c, &b, status, head ? 0 : xlen);
    if (xlen)
        ob_str(&b, "Content-Type: application/xml\r\n");
    if (extra)
        ob_str(&b, extra);
    if (echo_cks)
        echo_checksums(c, &b);
    end_head(c, &b);
    if (!head)
        ob_put(&b, c->w->xml, xlen);
    if (b.overflow) {
        c->close_after = true;
        c->out_len = (size_t)snprintf(c->out, sizeof(c->out),
                                      "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                                      "Connection: close\r\n\r\n");
        return;
    }
    c->out_len = b.len;
}

void respond_xml(struct conn *c, int status, size_t xlen, bool echo_cks)
{
    respond_xml2(c, status, xlen, echo_cks, NULL);
}

void xml_begin(struct ob *x, struct worker *w)
{
    x->p = w->xml;
    x->len = 0;
    x->cap = sizeof(w->xml);
    x->overflow = false;
    ob_str(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
}

/* An S3 error document; extra: more header lines (each ending in CRLF) or NULL. */
static void respond_error2(struct conn *c, int status, const char *code, const char *msg,
                           const char *extra)
{
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<Error><Code>");
    ob_str(&x, code);
    ob_str(&x, "</Code><Message>");
    ob_str(&x, msg);
    ob_str(&x, "</Message>");
    if (c->rq.key_len) {
        ob_str(&x, "<Key>");
        ob_xml(&x, c->rq.key, c->rq.key_len);
        ob_str(&x, "</Key>");
    }
    ob_printf(&x, "<RequestId>%02X%014" PRIX64 "</RequestId></Error>", (unsigned)c->w->idx,
              c->w->nreq);
    respond_xml2(c, status, x.overflow ? 0 : x.len, false, extra);
}

void respond_error(struct conn *c, int status, const char *code, const char *msg)
{
    respond_error2(c, status, code, msg, NULL);
}

void respond_empty(struct conn *c, int status, bool echo_cks, const char *etag)
{
    struct ob b;
    begin_head(c, &b, status, 0);
    if (etag)
        ob_printf(&b, "ETag: \"%s\"\r\n", etag);
    if (echo_cks)
        echo_checksums(c, &b);
    end_head(c, &b);
    c->out_len = b.len; /* bounded inputs: cannot overflow OUT_CAP */
}

/* The ETag body (no quotes) of an object: stable for (name, size) outside store mode; in store
 * mode the version (a new one for every write) changes it too. "-N" for N parts. */
void object_etag(const char *name, size_t n, uint64_t size, uint64_t ver,
                        uint32_t nparts, char out[48])
{
    fake_etag(name, n, size ^ (ver * 0x9e3779b97f4a7c15ULL), out);
    if (nparts)
        snprintf(out + 32, 48 - 32, "-%" PRIu32, nparts);
}

/* Parses a single Range (bytes=a-b, bytes=a-, bytes=-n) for an object of size. Returns 0 with
 * [*a, *b] set, 1 to ignore the header (send the whole object), 2 if unsatisfiable. */
static int parse_range(struct hdrval v, uint64_t size, uint64_t *a, uint64_t *b)
{
    if (v.n < 7 || strncasecmp(v.p, "bytes=", 6) != 0 || memchr(v.p, ',', v.n))
        return 1;
    const char *s = v.p + 6, *e = v.p + v.n;
    const char *dash = memchr(s, '-', (size_t)(e - s));
    if (!dash)
        return 1;
    uint64_t x, y;
    if (dash == s) {
        if (!parse_u64(dash + 1, (size_t)(e - dash - 1), &y))
            return 1;
        if (y == 0 || size == 0)
            return 2;
        *a = y >= size ? 0 : size - y;
        *b = size - 1;
        return 0;
    }
    if (!parse_u64(s, (size_t)(dash - s), &x))
        return 1;
    if (dash + 1 == e) {
        y = UINT64_MAX;
    } else {
        if (!parse_u64(dash + 1, (size_t)(e - dash - 1), &y))
            return 1;
        if (y < x)
            return 1;
    }
    if (x >= size)
        return 2;
    *a = x;
    *b = y >= size ? size - 1 : y;
    return 0;
}

/* The whole-object checksum a write carries, as a header line for ck_set, or NULL: the first
 * x-amz-checksum-<alg> of an algorithm (not -type, -algorithm, -mode); for a Complete only
 * with x-amz-checksum-type: FULL_OBJECT (else S3 keeps a checksum of checksums). */
static const char *req_checksum(const struct req *r, bool complete, char *out, size_t cap)
{
    static const char *const algs[] = {"x-amz-checksum-crc32c", "x-amz-checksum-crc32",
                                       "x-amz-checksum-crc64nvme", "x-amz-checksum-sha256",
                                       "x-amz-checksum-sha1"};
    bool full = !complete;
    const char *line = NULL;
    for (int i = 0; i < r->ncks; i++) {
        if (hv_eq(r->ck_name[i], "x-amz-checksum-type"))
            full = full || (r->ck_val[i].n == 11 && !strncasecmp(r->ck_val[i].p, "FULL_OBJECT", 11));
        for (size_t j = 0; j < sizeof(algs) / sizeof(algs[0]) && !line; j++)
            if (hv_eq(r->ck_name[i], algs[j])) {
                snprintf(out, cap, "%s: %.*s", algs[j], (int)r->ck_val[i].n, r->ck_val[i].p);
                line = out;
            }
    }
    return full ? line : NULL;
}

static void handle_get_object(struct conn *c)
{
    struct req *r = &c->rq;
    uint64_t size, ver;
    uint32_t nparts;
    struct blob *data = NULL;
    if (!object_size(r->name, r->name_len, &size, &nparts, &ver,
                     r->method == M_GET ? &data : NULL)) {
        respond_error(c, 404, "NoSuchKey", "The specified key does not exist.");
        return;
    }
    char etag[48];
    object_etag(r->name, r->name_len, size, ver, nparts, etag);
    c->blob = data; /* released when the response is done (request_done, conn_close) */
    if (r->if_match.n) {
        struct hdrval m = r->if_match;
        if (m.n >= 2 && m.p[0] == '"' && m.p[m.n - 1] == '"') {
            m.p++;
            m.n -= 2;
        }
        if (!(m.n == 1 && m.p[0] == '*') && !(m.n == strlen(etag) && !memcmp(m.p, etag, m.n))) {
            respond_error(c, 412, "PreconditionFailed",
                          "At least one of the pre-conditions you specified did not hold");
            return;
        }
    }
    uint64_t a = 0, b = size ? size - 1 : 0;
    int rr = r->range.n ? parse_range(r->range, size, &a, &b) : 1;
    if (rr == 2) {
        char cr[64];
        snprintf(cr, sizeof(cr), "Content-Range: bytes */%" PRIu64 "\r\n", size);
        respond_error2(c, 416, "InvalidRange", "The requested range is not satisfiable", cr);
        return;
    }
    uint64_t len = rr == 0 ? b - a + 1 : size;
    struct ob o;
    begin_head(c, &o, rr == 0 ? 206 : 200, len);
    ob_printf(&o,
              "Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n"
              "ETag: \"%s\"\r\nLast-Modified: %s\r\n",
              etag, g_last_modified);
    if (g_opt.keep_checksums) {
        char ck[sizeof(((struct ckrec *)0)->hdr)];
        ck_get(r->name, r->name_len, ck, sizeof(ck));
        if (ck[0])
            ob_printf(&o, "%s\r\n", ck);
    }
    if (rr == 0)
        ob_printf(&o, "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n", a, b, size);
    end_head(c, &o);
    if (r->method == M_GET && len) {
        c->pat_off = a;
        c->pat_left = len;
    }
}

/* 507 for a write that store mode cannot keep: over --store (want: the bytes asked for) or,
 * with want 0, the object map full (--max-objects). */
static void respond_store_full(struct conn *c, uint64_t want)
{
    char msg[256];
    if (want) {
        pthread_mutex_lock(&g_pool.mu);
        uint64_t held = g_pool.held;
        pthread_mutex_unlock(&g_pool.mu);
        snprintf(msg, sizeof(msg),
                 "The sink's --store limit of %" PRIu64 " bytes is reached: %" PRIu64
                 " bytes are held and this body needs %" PRIu64 " more.",
                 g_opt.store_max, held, want);
    } else {
        snprintf(msg, sizeof(msg),
                 "The sink's object map is full (--max-objects %zu): the object is not kept.",
                 g_opt.max_objects);
    }
    respond_error(c, 507, "InsufficientStorage", msg);
}

/* Decodes the five XML entities and &#N; / &#xN; (ASCII) of [s, s+n) into out (n bytes of
 * room); returns the length. */
static size_t xml_unescape(const char *s, size_t n, char *out)
{
    static const struct { const char *e; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&') {
            bool done = false;
            for (size_t j = 0; j < sizeof(ents) / sizeof(ents[0]) && !done; j++) {
                size_t el = strlen(ents[j].e);
                if (i + el <= n && memcmp(s + i, ents[j].e, el) == 0) {
                    out[o++] = ents[j].c;
                    i += el - 1;
                    done = true;
                }
            }
            const char *semi = memchr(s + i, ';', n - i);
            if (!done && semi && i + 2 < n && s[i + 1] == '#') {
                bool hex = s[i + 2] == 'x';
                const char *d = s + i + (hex ? 3 : 2);
                unsigned v = 0;
                bool okd = d < semi;
                for (; okd && d < semi; d++) {
                    int h = hex ? hexval(*d) : (*d >= '0' && *d <= '9' ? *d - '0' : -1);
                    if (h < 0 || v > 0x10FFFF)
                        okd = false;
                    else
                        v = v * (hex ? 16 : 10) + (unsigned)h;
                }
                if (okd && v > 0 && v < 128) {
                    out[o++] = (char)v;
                    i = (size_t)(semi - s);
                    done = true;
                }
            }
            if (done)
                continue;
        }
        out[o++] = s[i];
    }
    return o;
}

/* POST /b?delete (DeleteObjects): forgets every <Key> listed (and frees its bytes in store
 * mode). The result lists nothing (as with <Quiet>true</Quiet>). */
static void handle_delete_objects(struct conn *c)
{
    struct req *r = &c->rq;
    struct worker *w = c->w;
    if (c->cbody_toobig) {
        respond_error(c, 400, "MalformedXML", "The DeleteObjects body is too large.");
        return;
    }
    static const char tag[] = "<Key>", etag_[] = "</Key>";
    char name[KEY_MAX + 256 + 2];
    const char *p = c->cbody ? c->cbody : "", *end = p + c->cbody_len;
    for (;;) {
        const char *t = memmem(p, (size_t)(end - p), tag, sizeof(tag) - 1);
        if (!t)
            break;
        t += sizeof(tag) - 1;
        const char *e = memmem(t, (size_t)(end - t), etag_, sizeof(etag_) - 1);
        if (!e)
            break;
        size_t kn = (size_t)(e - t);
        if (r->bucket_len + 1 + kn <= sizeof(name)) {
            memcpy(name, r->bucket, r->bucket_len);
            name[r->bucket_len] = '/';
            size_t dn = xml_unescape(t, kn, name + r->bucket_len + 1);
            objmap_del(name, r->bucket_len + 1 + dn);
        }
        p = e + sizeof(etag_) - 1;
    }
    struct ob x;
    xml_begin(&x, w);
    ob_str(&x, "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></DeleteResult>");
    respond_xml(c, 200, x.len, false);
}

void list_result_begin(struct conn *c, struct ob *x)
{
    struct req *r = &c->rq;
    xml_begin(x, c->w);
    ob_str(x, "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>");
    ob_xml(x, r->bucket, r->bucket_len);
    ob_str(x, "</Name><Prefix>");
    ob_xml(x, r->prefix.p, r->prefix.n);
    ob_str(x, "</Prefix>");
}

/* ---- --synth-list: N keys that exist only as a formula ---- */

static uint64_t synth_size(uint64_t i)
{
    return 1 + ((i * UINT64_C(2654435761)) & 0xffffffffu) % 8192;
}

/* The key (no bucket) of synthetic object i into out (KEY_MAX); returns its length. */
static size_t synth_key(uint64_t i, char *out, size_t cap)
{
    const char *pfx = memchr(g_opt.synth_name, '/', g_opt.synth_name_len) + 1;
    size_t pn = g_opt.synth_name_len - (size_t)(pfx - g_opt.synth_name);
    int n = snprintf(out, cap, "%.*sk%07" PRIu64 "-size-%" PRIu64, (int)pn, pfx, i,
                     synth_size(i));
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

/* The first synthetic index whose key sorts after `key` (start-after, continuation). */
static uint64_t synth_after(const char *key, size_t n)
{
    uint64_t lo = 0, hi = g_opt.synth_n;
    char k[KEY_MAX];
    while (lo < hi) { /* keys sort by index: fixed-width digits after one prefix */
        uint64_t mid = lo + (hi - lo) / 2;
        size_t kn = synth_key(mid, k, sizeof(k));
        size_t m = kn < n ? kn : n;
        int c = memcmp(k, key, m);
        if (c < 0 || (c == 0 && kn <= n))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ListObjectsV2 of the --synth-list bucket and a prefix under its PREFIX: a page of the keys
 * that start with the prefix, as many as max-keys asks (default 1000) and one response
 * holds (S3 too may answer fewer than max-keys with IsTruncated). True when answered. */
static bool synth_list(struct conn *c)
{
    struct req *r = &c->rq;
    if (!g_opt.synth_n)
        return false;
    const char *slash = memchr(g_opt.synth_name, '/', g_opt.synth_name_len);
    size_t bn = (size_t)(slash - g_opt.synth_name);
    size_t pn = g_opt.synth_name_len - bn - 1;
    if (!r->q_list_type2 || r->bucket_len != bn ||
        memcmp(r->bucket, g_opt.synth_name, bn))
        return false;
    if (r->prefix.n < pn && !memcmp(r->prefix.p, slash + 1, r->prefix.n) && r->delimiter.n) {
        /* a shorter prefix with a delimiter (a client looking for PREFIX's directory): its
         * common prefix, PREFIX up to the delimiter after the asked prefix (only "/") */
        const char *d = memchr(slash + 1 + r->prefix.n, '/', pn - r->prefix.n);
        size_t cn = d ? (size_t)(d - slash) : pn;
        struct ob x;
        list_result_begin(c, &x);
        ob_str(&x, "<CommonPrefixes><Prefix>");
        ob_xml(&x, slash + 1, cn);
        ob_str(&x, "</Prefix></CommonPrefixes><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>"
                   "<IsTruncated>false</IsTruncated></ListBucketResult>");
        atomic_fetch_add(&g_synth_pages, 1);
        respond_xml(c, 200, x.overflow ? 0 : x.len, false);
        return true;
    }
    if (r->prefix.n < pn || memcmp(r->prefix.p, slash + 1, pn))
        return false;
    uint64_t max = 1000, i = 0;
    if (r->max_keys.n && (!parse_u64(r->max_keys.p, r->max_keys.n, &max) || max > 1000))
        max = 1000;
    char k[KEY_MAX], after[KEY_MAX];
    if (r->cont_token.n) {
        if (!parse_u64(r->cont_token.p, r->cont_token.n, &i)) {
            respond_error(c, 400, "InvalidArgument", "The continuation token is not valid.");
            return true;
        }
    } else if (r->start_after.n && r->start_after.n < sizeof(after)) {
        memcpy(after, r->start_after.p, r->start_after.n);
        i = synth_after(after, r->start_after.n);
    }
    /* a longer prefix: the keys that start with it are one index range (by the sort) */
    uint64_t end = g_opt.synth_n;
    if (r->prefix.n > pn) {
        uint64_t first = synth_after(r->prefix.p, r->prefix.n);
        size_t kn = first > 0 ? synth_key(first - 1, k, sizeof(k)) : 0;
        if (first > 0 && kn == r->prefix.n && !memcmp(k, r->prefix.p, kn))
            first--; /* the prefix is a whole key */
        uint64_t last = first;
        while (last < end && (kn = synth_key(last, k, sizeof(k))) >= r->prefix.n &&
               !memcmp(k, r->prefix.p, r->prefix.n) && last - first < 2)
            last++;
        if (i < first)
            i = first;
        end = last; /* every key name is unique past its digits: at most one matches */
    }
    struct ob x;
    list_result_begin(c, &x);
    uint64_t n = 0;
    /* room kept for the tail: IsTruncated, the next token, the closing tags */
    while (i < end && n < max && x.cap - x.len > 512) {
        size_t kn = synth_key(i, k, sizeof(k));
        char etag[48], name[KEY_MAX + 256];
        int nn = snprintf(name, sizeof(name), "%.*s/%.*s", (int)bn, g_opt.synth_name, (int)kn, k);
        object_etag(name, nn > 0 ? (size_t)nn : 0, synth_size(i), 0, 0, etag);
        ob_str(&x, "<Contents><Key>");
        ob_xml(&x, k, kn);
        ob_printf(&x, "</Key><LastModified>%s</LastModified><ETag>&quot;%s&quot;</ETag>"
                      "<Size>%" PRIu64 "</Size><StorageClass>STANDARD</StorageClass></Contents>",
                  g_last_modified_iso, etag, synth_size(i));
        i++;
        n++;
    }
    ob_printf(&x, "<KeyCount>%" PRIu64 "</KeyCount><MaxKeys>%" PRIu64 "</MaxKeys>", n, max);
    if (i < end)
        ob_printf(&x, "<IsTruncated>true</IsTruncated><NextContinuationToken>%" PRIu64
                      "</NextContinuationToken>", i);
    else
        ob_str(&x, "<IsTruncated>false</IsTruncated>");
    ob_str(&x, "</ListBucketResult>");
    atomic_fetch_add(&g_synth_pages, 1);
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
    return true;
}

#define LIST_PAGE_MAX 100 /* keys per page: what OUT_CAP holds with room to spare */

/* ListObjects(V2) of the objects the sink remembers (PUT or completed; with --store, the
 * ones it keeps), LIST_PAGE_MAX keys a page at most, in byte order. Continuation tokens
 * are the last key of the page. The query's values arrive percent-decoded (sink_http.c). */
static void handle_list(struct conn *c)
{
    if (synth_list(c))
        return;
    struct req *r = &c->rq;
    const char *prefix = r->prefix.p;
    size_t pn = r->prefix.n;
    struct hdrval afterv = r->cont_token.n ? r->cont_token : r->start_after;
    const char *after = afterv.p;
    size_t an = afterv.n;
    uint64_t max = LIST_PAGE_MAX;
    if (r->max_keys.n && parse_u64(r->max_keys.p, r->max_keys.n, &max) && max > LIST_PAGE_MAX)
        max = LIST_PAGE_MAX;
    struct list_ent ents[LIST_PAGE_MAX + 1];
    size_t n = max ? objmap_list(r->bucket, r->bucket_len, prefix, pn, after, an,
                                 (size_t)max + 1, ents) : 0;
    bool truncated = n > max;
    if (truncated) {
        free(ents[n - 1].key);
        n--;
    }
    struct ob x;
    list_result_begin(c, &x);
    if (r->q_list_type2)
        ob_printf(&x, "<KeyCount>%zu</KeyCount>", n);
    else
        ob_str(&x, "<Marker></Marker>");
    ob_printf(&x, "<MaxKeys>%" PRIu64 "</MaxKeys><IsTruncated>%s</IsTruncated>", max,
              truncated ? "true" : "false");
    if (truncated && n) {
        ob_str(&x, r->q_list_type2 ? "<NextContinuationToken>" : "<NextMarker>");
        ob_xml(&x, ents[n - 1].key, ents[n - 1].klen);
        ob_str(&x, r->q_list_type2 ? "</NextContinuationToken>" : "</NextMarker>");
    }
    char now[32]; /* LastModified: the listing's time (sync sees the objects as fresh) */
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
    for (size_t i = 0; i < n; i++) {
        char name[1200], etag[48];
        size_t nn = 0;
        if (r->bucket_len + 1 + ents[i].klen <= sizeof(name)) {
            memcpy(name, r->bucket, r->bucket_len);
            name[r->bucket_len] = '/';
            memcpy(name + r->bucket_len + 1, ents[i].key, ents[i].klen);
            nn = r->bucket_len + 1 + ents[i].klen;
        }
        object_etag(name, nn, ents[i].size, ents[i].ver, ents[i].nparts, etag);
        ob_str(&x, "<Contents><Key>");
        ob_xml(&x, ents[i].key, ents[i].klen);
        ob_printf(&x, "</Key><LastModified>%s</LastModified>"
                      "<ETag>&quot;%s&quot;</ETag><Size>%" PRIu64 "</Size>"
                      "<StorageClass>STANDARD</StorageClass></Contents>", now, etag,
                  ents[i].size);
        free(ents[i].key);
    }
    ob_str(&x, "</ListBucketResult>");
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
}

static void handle_initiate(struct conn *c)
{
    struct req *r = &c->rq;
    char id[UPLOAD_ID_LEN + 1];
    int rc = upload_new(r->name, r->name_len, id);
    if (rc == 503) {
        respond_error(c, 503, "SlowDown", "Too many multipart uploads in progress.");
        return;
    }
    if (rc) {
        respond_error(c, 500, "InternalError", "Out of memory.");
        return;
    }
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<InitiateMultipartUploadResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
    ob_xml(&x, r->bucket, r->bucket_len);
    ob_str(&x, "</Bucket><Key>");
    ob_xml(&x, r->key, r->key_len);
    ob_printf(&x, "</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>", id);
    respond_xml(c, 200, x.overflow ? 0 : x.len, true);
}

static void handle_complete(struct conn *c)
{
    struct req *r = &c->rq;
    if (c->cbody_toobig) {
        respond_error(c, 400, "MalformedXML", "The CompleteMultipartUpload body is too large.");
        return;
    }
    uint64_t size = 0, ver = 0;
    uint32_t nparts = 0;
    const char *code = NULL;
    int rc = upload_complete(r->upload_id.p, r->upload_id.n, r->name, r->name_len,
                             c->cbody ? c->cbody : "", c->cbody_len, &size, &nparts, &ver,
                             &code);
    if (rc == 404) {
        respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
        return;
    }
    if (rc == 507) {
        respond_store_full(c, 0);
        return;
    }
    if (rc) {
        respond_error(c, rc, code, "The CompleteMultipartUpload request was not accepted.");
        return;
    }
    char etag[48], ck[64 + CK_VAL_MAX + 8];
    ck_set(r->name, r->name_len, req_checksum(r, true, ck, sizeof(ck)));
    object_etag(r->name, r->name_len, size, ver, 0, etag);
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<CompleteMultipartUploadResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>/");
    ob_xml(&x, r->name, r->name_len);
    ob_str(&x, "</Location><Bucket>");
    ob_xml(&x, r->bucket, r->bucket_len);
    ob_str(&x, "</Bucket><Key>");
    ob_xml(&x, r->key, r->key_len);
    ob_printf(&x, "</Key><ETag>&quot;%s-%" PRIu32 "&quot;</ETag></CompleteMultipartUploadResult>",
              etag, nparts);
    respond_xml(c, 200, x.overflow ? 0 : x.len, true);
}

static void handle_copy(struct conn *c)
{
    struct req *r = &c->rq;
    char src[KEY_MAX + 256];
    struct hdrval s = r->copy_source;
    const char *q = memchr(s.p, '?', s.n);
    if (q)
        s.n = (size_t)(q - s.p);
    if (s.n && s.p[0] == '/') {
        s.p++;
        s.n--;
    }
    if (s.n > sizeof(src)) {
        respond_error(c, 400, "InvalidArgument", "Copy source too long.");
        return;
    }
    size_t n = pct_decode(s.p, s.n, src);
    uint64_t size, ver;
    uint32_t nparts;
    struct blob *data = NULL;
    if (!object_size(src, n, &size, &nparts, &ver, &data)) {
        respond_error(c, 404, "NoSuchKey", "The specified key does not exist.");
        return;
    }
    /* store mode: the copy shares the source's bytes (the reference taken above) */
    if (!objmap_put(r->name, r->name_len, size, 0, data, &ver) && g_opt.store_max) {
        respond_store_full(c, 0);
        return;
    }
    if (g_opt.keep_checksums) { /* the copy has the source's checksum */
        char ck[sizeof(((struct ckrec *)0)->hdr)];
        ck_get(src, n, ck, sizeof(ck));
        ck_set(r->name, r->name_len, ck[0] ? ck : NULL);
    }
    char etag[48];
    object_etag(r->name, r->name_len, size, ver, 0, etag);
    struct ob x;
    xml_begin(&x, c->w);
    ob_printf(&x, "<CopyObjectResult><LastModified>%s</LastModified><ETag>&quot;%s&quot;</ETag>"
                  "</CopyObjectResult>", g_last_modified_iso, etag);
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
}

/* Builds the response to the request whose body has just been consumed, and updates state. */
void finish_request(struct conn *c)
{
    struct req *r = &c->rq;
    struct worker *w = c->w;
    w->nreq++;
    c->pat_left = 0;
    c->state = ST_SEND;
    if (g_opt.verbose) {
        /* the request line, and how its body was framed */
        char cl[32] = "-";
        if (r->has_cl)
            snprintf(cl, sizeof(cl), "%" PRIu64, r->content_length);
        fprintf(stderr, "[%d] %.*s %.*s content-length=%s transfer-encoding=%.*s "
                        "content-encoding=%.*s body=%" PRIu64 "%s\n",
                w->idx, (int)r->method_raw.n, r->method_raw.p, (int)r->target.n, r->target.p,
                cl, r->te.n ? (int)r->te.n : 1, r->te.n ? r->te.p : "-",
                r->content_encoding.n ? (int)r->content_encoding.n : 1,
                r->content_encoding.n ? r->content_encoding.p : "-",
                c->chunked ? c->decoded : r->has_cl ? r->content_length : 0,
                c->chunked ? " (decoded)" : "");
    }
    if (!limit_prefix_admit(r)) { /* over its prefix's request rate (sink_limits.c) */
        respond_error(c, 503, "SlowDown", "Please reduce your request rate.");
        return;
    }
    if (express_handle(c)) /* --express: sessions, listings, appends, renames */
        return;
    if (r->bucket_len == 0) {
        if (r->method == M_GET || r->method == M_HEAD) {
            struct ob x;
            xml_begin(&x, w);
            ob_str(&x, "<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Owner><ID>sink</ID><DisplayName>sink</DisplayName></Owner><Buckets>"
                       "</Buckets></ListAllMyBucketsResult>");
            respond_xml(c, 200, x.len, false);
        } else {
            respond_error(c, 405, "MethodNotAllowed", "Not allowed on the service.");
        }
        return;
    }
    if (r->key_len > KEY_MAX) {
        respond_error(c, 400, "KeyTooLongError", "Your key is too long.");
        return;
    }
    if (r->key_len == 0) { /* bucket operations */
        switch (r->method) {
        case M_GET:
            if (r->q_location) {
                struct ob x;
                xml_begin(&x, w);
                ob_str(&x, "<LocationConstraint xmlns="
                           "\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>");
                respond_xml(c, 200, x.len, false);
            } else if (r->q_uploads) {
                struct ob x;
                xml_begin(&x, w);
                ob_str(&x, "<ListMultipartUploadsResult "
                           "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
                ob_xml(&x, r->bucket, r->bucket_len);
                ob_str(&x, "</Bucket><IsTruncated>false</IsTruncated>"
                           "</ListMultipartUploadsResult>");
                respond_xml(c, 200, x.overflow ? 0 : x.len, false);
            } else {
                handle_list(c);
            }
            return;
        case M_HEAD:
        case M_PUT:
            respond_empty(c, 200, false, NULL);
            return;
        case M_DELETE:
            respond_empty(c, 204, false, NULL);
            return;
        case M_POST:
            if (r->q_delete) {
                handle_delete_objects(c);
                return;
            }
            break;
        default:
            break;
        }
        respond_error(c, 501, "NotImplemented", "The sink does not implement this request.");
        return;
    }
    switch (r->method) {
    case M_GET:
    case M_HEAD:
        if (r->upload_id.n || r->has_part_number || r->q_other)
            break;
        handle_get_object(c);
        return;
    case M_PUT: {
        /* CopyObject has no body: the CRT (s3torchconnector's DCP writer) sends it without
         * Content-Length, which HTTP/1.1 allows (no length, no chunking: an empty body) */
        if (!r->has_cl && !c->chunked && !r->copy_source.n) {
            respond_error(c, 411, "MissingContentLength", "You must provide the Content-Length.");
            return;
        }
        uint64_t size = r->has_decoded_len ? r->decoded_len : r->content_length;
        if (c->chunked) {
            if (r->has_decoded_len && c->decoded != r->decoded_len) {
                char msg[160];
                snprintf(msg, sizeof(msg), "The chunked body has %" PRIu64 " bytes, "
                         "x-amz-decoded-content-length says %" PRIu64 ".", c->decoded,
                         r->decoded_len);
                respond_error(c, 400, "IncompleteBody", msg);
                return;
            }
            size = c->decoded;
        }
        if (c->store_err == 507) {
            respond_store_full(c, c->store_want);
            return;
        }
        if (c->storing) {
            if (!c->sb.p) { /* an empty body: one byte of buffer stands for it */
                c->sb.p = buf_get(1, &c->sb.cap);
                if (!c->sb.p) {
                    respond_store_full(c, 1);
                    return;
                }
            }
            size = c->sb.len;
        }
        if (r->upload_id.n || r->has_part_number) {
            if (r->part_number < 1 || r->part_number > MAX_PARTS || !r->upload_id.n) {
                respond_error(c, 400, "InvalidArgument", "Part number must be 1 to 10000.");
                return;
            }
            int rc = upload_part(r->upload_id.p, r->upload_id.n, r->name, r->name_len,
                                 (uint32_t)r->part_number, size, &c->sb);
            if (rc == 404) {
                respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
                return;
            }
            if (rc) {
                respond_error(c, 500, "InternalError", "Out of memory.");
                return;
            }
            char etag[33], tmp[64];
            int tn = snprintf(tmp, sizeof(tmp), "%.*s#%" PRIu64, (int)r->upload_id.n,
                              r->upload_id.p, r->part_number);
            fake_etag(tmp, (size_t)tn, size, etag);
            respond_empty(c, 200, true, etag);
            return;
        }
        if (r->copy_source.n) {
            handle_copy(c);
            return;
        }
        struct blob *data = NULL;
        if (c->storing) {
            data = blob_new(1);
            if (!data) {
                respond_error(c, 500, "InternalError", "Out of memory.");
                return;
            }
            data->seg[0] = c->sb;
            data->size = c->sb.len;
            c->sb = (struct seg){0};
        }
        uint64_t ver;
        if (!objmap_put(r->name, r->name_len, size, 0, data, &ver) && g_opt.store_max) {
            respond_store_full(c, 0);
            return;
        }
        char etag[48], ck[64 + CK_VAL_MAX + 8];
        ck_set(r->name, r->name_len, req_checksum(r, false, ck, sizeof(ck)));
        object_etag(r->name, r->name_len, size, ver, 0, etag);
        respond_empty(c, 200, true, etag);
        return;
    }
    case M_POST:
        if (r->q_uploads) {
            handle_initiate(c);
            return;
        }
        if (r->upload_id.n) {
            handle_complete(c);
            return;
        }
        break;
    case M_DELETE:
        if (r->upload_id.n) {
            if (upload_abort(r->upload_id.p, r->upload_id.n, r->name, r->name_len) != 0)
                respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
            else
                respond_empty(c, 204, false, NULL);
            return;
        }
        objmap_del(r->name, r->name_len);
        ck_set(r->name, r->name_len, NULL);
        respond_empty(c, 204, false, NULL);
        return;
    default:
        break;
    }
    respond_error(c, 501, "NotImplemented", "The sink does not implement this request.");
}

/* A response to a request that could not be read; the connection closes after it. */
void fail_request_msg(struct conn *c, int status, const char *code, const char *msg)
{
    c->close_after = true;
    c->state = ST_SEND;
    c->pat_left = 0;
    c->rq.key_len = 0;
    c->rq.method = M_OTHER;
    respond_error(c, status, code, msg);
}

/* A response to a request that could not be parsed; the connection closes after it. */
void fail_request(struct conn *c, int status)
{
    switch (status) {
    case 431:
        fail_request_msg(c, 431, "RequestHeaderSectionTooLarge",
                         "Request header section too large.");
        break;
    case 501:
        fail_request_msg(c, 501, "NotImplemented",
                         "Only Transfer-Encoding: chunked is supported.");
        break;
    case 505:
        fail_request_msg(c, 505, "HttpVersionNotSupported", "Only HTTP/1.0 and 1.1.");
        break;
    default:
        fail_request_msg(c, 400, "BadRequest", "Malformed request.");
        break;
    }
}
