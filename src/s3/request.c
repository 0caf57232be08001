/* The request executor: endpoint, signing, sending, error documents, retries. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/client.h"
#include "s3/endpoint.h"
#include "s3/xml.h"

#define ERROR_BODY_MAX (64u << 10)
#define RETRY_COST 5
#define RETRY_TIMEOUT_COST 10
#define MAX_BACKOFF_MS 20000u

void s3f__s3_request_header(struct s3f__s3_request *r, const char *name, const char *value) {
    if (r->n_headers < S3F_MAX_EXTRA_HEADERS) {
        r->headers[r->n_headers].name = name;
        r->headers[r->n_headers].value = value;
        r->n_headers++;
    } else if (!r->header_overflow) {
        r->header_overflow = name; /* the request fails in prepare, naming it */
    }
}

void s3f__s3_resource(char *buf, size_t len, const char *bucket, const char *key) {
    snprintf(buf, len, "s3://%s%s%s", bucket ? bucket : "", key && *key ? "/" : "",
             key ? key : "");
}

/* ---- one attempt's response state ---------------------------------------------------- */


static void copy_hdr(char *dst, size_t dst_len, const char *v, size_t vlen) {
    s3f__strlcpyn(dst, v, vlen, dst_len);
}

static bool name_is(const char *name, size_t n, const char *want) {
    return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

static void on_header(void *ud, const char *name, size_t n, const char *v, size_t vlen) {
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
        unsigned long long first;
        if (sscanf(tmp, "bytes %llu-", &first) == 1) {
            a->range_first = first;
            a->has_range_first = true;
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

static int current_http_status(struct s3f__s3_attempt *a) {
    long code = 0;
    if (a->http.easy)
        curl_easy_getinfo(a->http.easy, CURLINFO_RESPONSE_CODE, &code);
    return (int)code;
}

static int on_body(void *ud, const char *data, size_t len) {
    struct s3f__s3_attempt *a = ud;
    int code = current_http_status(a);
    if (code >= 200 && code < 300) {
        if (a->r->sink) {
            /* Place the bytes by their object offset: a server that ignores Range answers
             * 200 with the whole object, whose head we then skip. */
            if (!a->body_started) {
                a->body_started = true;
                a->resp_pos = (code == 206 && a->has_range_first) ? a->range_first : 0;
            }
            uint64_t pos = a->resp_pos, end = pos + len;
            a->resp_pos = end;
            if (pos > a->sink_pos) {
                a->range_gap = true;
                return 1;
            }
            uint64_t stop = a->r->call.range_end == UINT64_MAX ? UINT64_MAX
                                                               : a->r->call.range_end + 1;
            if (end > stop)
                end = stop;
            if (end <= a->sink_pos)
                return 0;
            size_t skip = (size_t)(a->sink_pos - pos);
            size_t n = (size_t)(end - a->sink_pos);
            if (a->r->sink(a->r->sink_ud, data + skip, n, a->sink_pos) != 0) {
                a->sink_failed = true;
                return 1;
            }
            a->sink_pos += n;
            return 0;
        }
        if (a->r->body_out) {
            if (s3f__buf_append(a->r->body_out, data, len) != S3F_OK) {
                a->body_overflow = true;
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

/* ---- retries ------------------------------------------------------------------------ */

static bool retry_acquire(struct s3f_client *c, int cost) {
    bool ok;
    pthread_mutex_lock(&c->retry.lock);
    ok = c->retry.tokens >= cost;
    if (ok)
        c->retry.tokens -= cost;
    pthread_mutex_unlock(&c->retry.lock);
    return ok;
}

static void retry_refund(struct s3f_client *c, int amount) {
    pthread_mutex_lock(&c->retry.lock);
    c->retry.tokens += amount;
    if (c->retry.tokens > c->retry.capacity)
        c->retry.tokens = c->retry.capacity;
    pthread_mutex_unlock(&c->retry.lock);
}

/* Full-jitter exponential backoff: random(0,1) * min(2^(attempt-1), 20) seconds. The
 * base can be scaled down for tests with S3FLASH_RETRY_BASE_MS (default 1000). */
static uint64_t backoff_base_ms = 1000;
static pthread_once_t backoff_once = PTHREAD_ONCE_INIT;
static void backoff_init(void) {
    const char *b = getenv("S3FLASH_RETRY_BASE_MS");
    uint64_t v = b && *b ? strtoull(b, NULL, 10) : 1000;
    backoff_base_ms = v ? v : 1;
}

static uint64_t backoff_ms(int attempt) {
    pthread_once(&backoff_once, backoff_init); /* read by every I/O thread */
    uint64_t base = backoff_base_ms;
    uint64_t cap = base << (attempt - 1 < 16 ? attempt - 1 : 16);
    if (cap > MAX_BACKOFF_MS)
        cap = MAX_BACKOFF_MS;
    return (uint64_t)(s3f__random_unit() * (double)cap);
}

/* ---- building the request ------------------------------------------------------------ */

static void log_request(struct s3f_client *c, const struct s3f__s3_request *r, const char *url,
                        int attempt, const struct curl_slist *headers) {
    if (!s3f__log_enabled(&c->logger, S3F_LOG_DEBUG))
        return;
    s3f__log(&c->logger, S3F_LOG_DEBUG, "-> %s %s %s (%s, attempt %d, %zu body bytes)",
             r->operation, r->method, url, r->bucket ? r->bucket : "", attempt, r->body_len);
    if (!s3f__log_enabled(&c->logger, S3F_LOG_TRACE))
        return;
    for (const struct curl_slist *h = headers; h; h = h->next) {
        if (strncasecmp(h->data, "authorization:", 14) == 0)
            s3f__log(&c->logger, S3F_LOG_TRACE, "   authorization: <redacted>");
        else if (strncasecmp(h->data, "x-amz-security-token:", 21) == 0)
            s3f__log(&c->logger, S3F_LOG_TRACE, "   x-amz-security-token: <redacted>");
        else
            s3f__log(&c->logger, S3F_LOG_TRACE, "   %s", h->data);
    }
}

static enum s3f_status add_header(struct curl_slist **list, const char *name, const char *value) {
    char line[4096];
    int n = snprintf(line, sizeof(line), "%s: %s", name, value);
    if (n < 0 || (size_t)n >= sizeof(line))
        return S3F_ERR_INVALID_ARGUMENT;
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return S3F_ERR_NO_MEMORY;
    *list = l;
    return S3F_OK;
}

/* Build URL, headers and signature for one attempt. */
static enum s3f_status prepare(struct s3f_client *c, struct s3f__s3_request *r,
                               const char *range, const char *if_match,
                               char **url_out, struct curl_slist **headers_out,
                               struct s3f_error *err) {
    enum s3f_status st;
    char resource[600];
    s3f__s3_resource(resource, sizeof(resource), r->bucket, r->key);
    if (r->header_overflow)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, r->operation, resource,
                              "too many headers: %s would be past the %d allowed",
                              r->header_overflow, S3F_MAX_EXTRA_HEADERS);
    struct s3f__endpoint ep;
    memset(&ep, 0, sizeof(ep));
    struct s3f__endpoint_params ep_params = {
        .region = c->region,
        .bucket = r->bucket,
        .endpoint_url = c->endpoint_url,
        .force_path_style = c->force_path_style,
    };
    st = s3f__endpoint_resolve(&ep_params, &ep, err);
    if (st) {
        if (err) {
            s3f__strlcpy(err->operation, r->operation, sizeof(err->operation));
            s3f__strlcpy(err->resource, resource, sizeof(err->resource));
        }
        return st;
    }
    char *url = s3f__endpoint_object_url(&ep, r->key ? r->key : "", r->query);
    char *path = NULL;
    struct curl_slist *hl = NULL;
    struct s3f__sigv4_signed sig;
    memset(&sig, 0, sizeof(sig));
    struct s3f__credentials creds;
    memset(&creds, 0, sizeof(creds));
    if (!url) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, r->operation, resource, "out of memory");
        goto out;
    }

    /* the headers the request carries, signed in full */
    struct s3f__header hdrs[S3F_MAX_EXTRA_HEADERS + 4];
    size_t nh = 0;
    hdrs[nh++] = (struct s3f__header){"host", ep.host};
    for (size_t i = 0; i < r->n_headers; i++)
        hdrs[nh++] = r->headers[i];
    if (range)
        hdrs[nh++] = (struct s3f__header){"range", range};
    if (if_match)
        hdrs[nh++] = (struct s3f__header){"if-match", if_match};
    char content_len[32];
    if (r->body || strcmp(r->method, "PUT") == 0 || strcmp(r->method, "POST") == 0) {
        snprintf(content_len, sizeof(content_len), "%zu", r->body_len);
        hdrs[nh++] = (struct s3f__header){"content-length", content_len};
    }

    char payload_hash[65] = "UNSIGNED-PAYLOAD";
    if (r->sign_payload)
        s3f__sha256_hex(r->body ? r->body : "", r->body ? r->body_len : 0, payload_hash);

    for (size_t i = 1; i < nh; i++) { /* host is set by curl from the URL */
        if ((st = add_header(&hl, hdrs[i].name, hdrs[i].value)))
            goto oom;
    }
    if (!c->anonymous) {
        st = s3f__credentials_get(c->creds, &creds, err);
        if (st) {
            if (err) {
                s3f__strlcpy(err->operation, r->operation, sizeof(err->operation));
                if (!err->resource[0])
                    s3f__strlcpy(err->resource, resource, sizeof(err->resource));
            }
            goto out;
        }
        /* the path and query exactly as they go on the wire */
        path = s3f__endpoint_object_path(&ep, r->key ? r->key : "");
        if (!path) {
            st = S3F_ERR_NO_MEMORY;
            goto oom;
        }
        struct s3f__sigv4_request sreq = {
            .method = r->method,
            .path = path,
            .query = r->query,
            .headers = hdrs,
            .n_headers = nh,
            .payload_hash = payload_hash,
        };
        struct s3f__sigv4_credentials sc = {creds.access_key_id, creds.secret_access_key,
                                            creds.session_token};
        struct s3f__sigv4_config cfg = {
            .region = ep.signing_region ? ep.signing_region : c->region,
            .service = ep.signing_name ? ep.signing_name : "s3",
            .time = s3f__wall_time_s(),
            .normalize_path = false,
            .add_content_sha256_header = true,
        };
        st = s3f__sigv4_sign_headers(&sreq, &sc, &cfg, &sig, err);
        if (st)
            goto out;
        if ((st = add_header(&hl, "x-amz-date", sig.amz_date)) ||
            (st = add_header(&hl, "x-amz-content-sha256", payload_hash)) ||
            (sig.security_token &&
             (st = add_header(&hl, "x-amz-security-token", sig.security_token))) ||
            (st = add_header(&hl, "authorization", sig.authorization)))
            goto oom;
    } else {
        if ((st = add_header(&hl, "x-amz-content-sha256", payload_hash)))
            goto oom;
    }
    /* no 100-continue round trip; an empty Accept keeps curl from adding its own */
    struct curl_slist *l = curl_slist_append(hl, "Expect:");
    if (!l) {
        st = S3F_ERR_NO_MEMORY;
        goto oom;
    }
    hl = l;
    *url_out = url;
    *headers_out = hl;
    url = NULL;
    hl = NULL;
    st = S3F_OK;
    goto out;

oom:
    if (st == S3F_ERR_NO_MEMORY)
        s3f__error_set(err, st, r->operation, resource, "out of memory");
    else
        s3f__error_set(err, st, r->operation, resource, "header too long");
out:
    s3f__sigv4_signed_cleanup(&sig);
    s3f__credentials_cleanup(&creds);
    curl_slist_free_all(hl);
    free(path);
    free(url);
    s3f__endpoint_cleanup(&ep);
    return st;
}

static void fill_info(struct s3f_object_info *info, const struct s3f__s3_attempt *a, bool ranged) {
    if (!info)
        return;
    if (a->has_total_size)
        info->size = a->total_size;
    else if (a->has_content_length && !ranged)
        info->size = a->content_length;
    info->last_modified = a->last_modified;
    s3f__strlcpy(info->etag, a->etag, sizeof(info->etag));
    s3f__strlcpy(info->content_type, a->content_type, sizeof(info->content_type));
    s3f__strlcpy(info->version_id, a->version_id, sizeof(info->version_id));
    s3f__strlcpy(info->storage_class, a->storage_class, sizeof(info->storage_class));
    s3f__strlcpy(info->checksum_crc32c, a->checksum_crc32c, sizeof(info->checksum_crc32c));
    s3f__strlcpy(info->checksum_crc32, a->checksum_crc32, sizeof(info->checksum_crc32));
    s3f__strlcpy(info->checksum_crc64nvme, a->checksum_crc64nvme,
                 sizeof(info->checksum_crc64nvme));
    s3f__strlcpy(info->checksum_sha256, a->checksum_sha256, sizeof(info->checksum_sha256));
}

/* Error from an HTTP error response (or a 200 carrying an error document). */
static void error_from_response(struct s3f__s3_request *r, struct s3f__s3_attempt *a, const char *body,
                                size_t body_len, int http_status, struct s3f_error *e) {
    s3f_error_clear(e);
    e->http_status = http_status;
    if (!(body_len && s3f__xml_parse_error(body, body_len, e))) {
        /* HEAD and some proxies give no body: derive the code from the status */
        const char *code = "";
        switch (http_status) {
        case 301: code = "PermanentRedirect"; break;
        case 304: code = "NotModified"; break;
        case 400: code = "BadRequest"; break;
        case 403: code = "Forbidden"; break;
        case 404: code = r->key && *r->key ? "NotFound" : "NoSuchBucket"; break;
        case 412: code = "PreconditionFailed"; break;
        case 416: code = "InvalidRange"; break;
        case 500: code = "InternalError"; break;
        case 503: code = "ServiceUnavailable"; break;
        default: break;
        }
        s3f__strlcpy(e->code, code, sizeof(e->code));
        if (body_len && !e->message[0]) {
            /* not XML: show the start of what came back */
            size_t n = body_len < 200 ? body_len : 200;
            char snippet[201];
            size_t j = 0;
            for (size_t i = 0; i < n; i++)
                snippet[j++] = (body[i] >= 0x20 && body[i] < 0x7f) ? body[i] : ' ';
            snippet[j] = '\0';
            snprintf(e->message, sizeof(e->message), "unexpected response body: %s", snippet);
        }
    }
    if (!e->request_id[0])
        s3f__strlcpy(e->request_id, a->request_id, sizeof(e->request_id));
    if (!e->host_id[0])
        s3f__strlcpy(e->host_id, a->host_id, sizeof(e->host_id));
    e->status = s3f__s3_error_status(http_status, e->code);
}

/* ---- the asynchronous state machine ---------------------------------------------------
 * submit -> start_attempt (build, sign) -> transport -> attempt_done (classify)
 *        -> finish | start_attempt again after a backoff (a transport timer, no sleep). */

static void attempt_done(struct s3f__http_request *req, void *ud);

static void attempt_release(struct s3f__s3_call *k) {
    s3f__buf_cleanup(&k->a.err_body);
    curl_slist_free_all(k->headers);
    k->headers = NULL;
    free(k->url);
    k->url = NULL;
}

static void finish(struct s3f__s3_request *r, enum s3f_status st) {
    struct s3f__s3_call *k = &r->call;
    attempt_release(k);
    if (st == S3F_OK)
        retry_refund(k->c, k->used_retry_token ? k->last_cost : 1);
    s3f__s3_done_fn done = k->done;
    void *ud = k->done_ud;
    done(r, st, ud); /* r may be gone from here on */
}

/* Build and send attempt k->attempt, to start not before `not_before_ns`. */
static void start_attempt(struct s3f__s3_request *r, uint64_t not_before_ns) {
    struct s3f__s3_call *k = &r->call;
    struct s3f__s3_attempt *a = &k->a;
    memset(a, 0, sizeof(*a));
    a->r = r;
    a->sink_pos = k->range_start + k->delivered;
    s3f__buf_init(&a->err_body, ERROR_BODY_MAX + 1);
    if (r->body_out)
        s3f__buf_reset(r->body_out);
    const char *range_hdr = NULL, *if_match = NULL;
    if (r->sink && (r->has_range || k->delivered > 0)) {
        if (k->range_end == UINT64_MAX)
            snprintf(k->range, sizeof(k->range), "bytes=%" PRIu64 "-",
                     k->range_start + k->delivered);
        else
            snprintf(k->range, sizeof(k->range), "bytes=%" PRIu64 "-%" PRIu64,
                     k->range_start + k->delivered, k->range_end);
        range_hdr = k->range;
    }
    if (k->delivered > 0 && k->pinned_etag[0] && !k->user_if_match)
        if_match = k->pinned_etag;
    k->prep_failed = false;
    enum s3f_status st = prepare(k->c, r, range_hdr, if_match, &k->url, &k->headers, k->err);
    if (st) {
        /* complete through the transport, so that `done` is never called synchronously */
        k->prep_failed = true;
        k->err->status = st;
        k->err->attempts = k->attempt;
        a->http.url = NULL;
    } else {
        a->http.method = r->method;
        a->http.url = k->url;
        a->http.headers = k->headers;
        a->http.body = r->body;
        a->http.body_len = r->body_len;
        a->http.read_body = r->read_body;
        a->http.read_ud = r->read_ud;
        a->http.on_header = on_header;
        a->http.on_body = on_body;
        a->http.cb_ud = a;
        /* control: Create/Complete/Abort, HEAD, List...; data: PUTs and GETs to a sink */
        a->http.control = strcmp(r->method, "PUT") != 0 && !r->sink;
        log_request(k->c, r, k->url, k->attempt, k->headers);
    }
    a->http.not_before_ns = not_before_ns;
    a->http.timeout_ms = r->timeout_ms;
    s3f__http_submit(k->c->http, &a->http, attempt_done, r);
}

static void attempt_done(struct s3f__http_request *req, void *ud) {
    struct s3f__s3_request *r = ud;
    struct s3f__s3_call *k = &r->call;
    struct s3f__s3_attempt *a = &k->a;
    struct s3f_client *c = k->c;
    (void)req;
    if (k->prep_failed) {
        finish(r, k->err->status);
        return;
    }
    enum s3f_status tst = a->http.status;
    int http_status = a->http.http_status;
    r->http_status = http_status;
    double ms = (double)(a->http.end_ns - a->http.start_ns) / 1e6;
    s3f__log(&c->logger, S3F_LOG_DEBUG,
             "<- %s %d %s in %.1f ms (%" PRIu64 " bytes received, request id %s)%s%s",
             r->operation, http_status, tst ? s3f_status_name(tst) : "OK", ms,
             a->http.bytes_received, a->request_id[0] ? a->request_id : "-",
             a->http.error[0] ? ": " : "", a->http.error);

    bool retryable = false;
    int cost = RETRY_COST;
    bool resumed = k->delivered > 0; /* this attempt asked for the rest of a broken body */
    struct s3f_error last;
    s3f_error_clear(&last);
    if (r->sink && a->sink_pos > k->range_start + k->delivered) {
        k->delivered = a->sink_pos - k->range_start;
        if (!k->pinned_etag[0])
            s3f__strlcpy(k->pinned_etag, a->etag, sizeof(k->pinned_etag));
    }

    if (tst != S3F_OK) {
        /* transport failure (or our callback stopped it) */
        last.status = tst;
        last.http_status = http_status;
        s3f__strlcpy(last.request_id, a->request_id, sizeof(last.request_id));
        if (tst == S3F_ERR_ABORTED && a->range_gap) {
            last.status = S3F_ERR_BAD_RESPONSE;
            snprintf(last.message, sizeof(last.message),
                     "the server answered a range from offset %" PRIu64 ", past %" PRIu64,
                     a->range_first, a->sink_pos);
        } else if (tst == S3F_ERR_ABORTED && a->body_overflow) {
            last.status = S3F_ERR_BAD_RESPONSE;
            snprintf(last.message, sizeof(last.message),
                     "response body larger than the %zu bytes allowed", r->body_out->max);
        } else if (tst == S3F_ERR_ABORTED) {
            snprintf(last.message, sizeof(last.message), "stopped by the data callback");
        } else if (a->http.curl_code == CURLE_PARTIAL_FILE) {
            last.status = S3F_ERR_NETWORK;
            snprintf(last.message, sizeof(last.message),
                     "response body cut short: received %" PRIu64 " of %" PRIu64 " bytes",
                     a->http.bytes_received, a->content_length);
        } else {
            snprintf(last.message, sizeof(last.message), "%s", a->http.error);
        }
        retryable = s3f__http_error_retryable(&a->http);
        if (s3f__http_error_is_timeout(&a->http))
            cost = RETRY_TIMEOUT_COST;
    } else if (http_status >= 300 || http_status < 200) {
        error_from_response(r, a, a->err_body.data, a->err_body.len, http_status, &last);
        retryable = s3f__s3_error_retryable(http_status, last.code);
    } else if (r->check_200_error && r->body_out && r->body_out->len &&
               s3f__xml_parse_error(r->body_out->data, r->body_out->len, &last)) {
        last.http_status = http_status;
        if (!last.request_id[0])
            s3f__strlcpy(last.request_id, a->request_id, sizeof(last.request_id));
        last.status = s3f__s3_error_status(500, last.code);
        retryable = s3f__s3_error_retryable(500, last.code);
        if (!last.message[0])
            snprintf(last.message, sizeof(last.message), "error document in a 200 response");
    } else {
        /* success */
        fill_info(r->info, a, (r->has_range || resumed) && http_status == 206);
        if (r->info && resumed && k->pinned_etag[0])
            s3f__strlcpy(r->info->etag, k->pinned_etag, sizeof(r->info->etag));
        finish(r, S3F_OK);
        return;
    }
    attempt_release(k);

    bool give_up = !retryable || k->attempt >= k->max_attempts;
    if (!give_up && !retry_acquire(c, cost)) {
        s3f__log(&c->logger, S3F_LOG_WARN, "%s %s: retry quota exhausted, not retrying",
                 r->operation, k->resource);
        give_up = true;
    }
    if (give_up) {
        struct s3f_error *err = k->err;
        *err = last;
        if (!err->status)
            err->status = S3F_ERR_INTERNAL;
        err->attempts = k->attempt;
        s3f__strlcpy(err->operation, r->operation, sizeof(err->operation));
        s3f__strlcpy(err->resource, k->resource, sizeof(err->resource));
        if (retryable && err->code[0] && strcmp(err->code, "SlowDown") == 0)
            err->status = S3F_ERR_THROTTLED;
        finish(r, err->status);
        return;
    }
    k->used_retry_token = true;
    k->last_cost = cost;
    uint64_t wait = backoff_ms(k->attempt);
    s3f__log(&c->logger, S3F_LOG_INFO,
             "%s %s: attempt %d failed (%s%s%s), retrying in %" PRIu64 " ms", r->operation,
             k->resource, k->attempt, last.code[0] ? last.code : s3f_status_name(last.status),
             last.message[0] ? ": " : "", last.message, wait);
    k->attempt++;
    start_attempt(r, s3f__now_ns() + wait * 1000000ull);
}

void s3f__s3_submit(struct s3f_client *c, struct s3f__s3_request *r, struct s3f_error *err,
                    s3f__s3_done_fn done, void *ud) {
    struct s3f__s3_call *k = &r->call;
    memset(k, 0, sizeof(*k));
    k->c = c;
    k->err = err ? err : &k->local_err;
    s3f_error_clear(k->err);
    k->done = done;
    k->done_ud = ud;
    k->attempt = 1;
    k->max_attempts = r->max_attempts > 0 ? r->max_attempts : c->max_attempts > 0 ? c->max_attempts : 3;
    k->range_start = r->has_range ? r->range_start : 0;
    k->range_end = r->has_range ? r->range_end : UINT64_MAX;
    s3f__s3_resource(k->resource, sizeof(k->resource), r->bucket, r->key);
    for (size_t i = 0; i < r->n_headers; i++)
        if (s3f__strieq(r->headers[i].name, "if-match"))
            k->user_if_match = r->headers[i].value;
    start_attempt(r, 0);
}

struct sync_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    enum s3f_status st;
};

static void sync_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    (void)r;
    struct sync_wait *w = ud;
    pthread_mutex_lock(&w->lock);
    w->done = true;
    w->st = st;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

enum s3f_status s3f__s3_execute(struct s3f_client *c, struct s3f__s3_request *r,
                                struct s3f_error *err) {
    struct sync_wait w = {.done = false};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    s3f__s3_submit(c, r, err, sync_done, &w);
    pthread_mutex_lock(&w.lock);
    while (!w.done)
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return w.st;
}
