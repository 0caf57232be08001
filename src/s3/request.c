/* The request executor: endpoint, signing, sending, error documents, retries. What an
 * attempt does with the response as it arrives (headers, the checks against what was
 * asked, the body) is in request_response.c. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/metrics.h"
#include "s3/request_internal.h"
#include "s3/endpoint.h"
#include "s3/idempotency.h"
#include "s3/retry.h"
#include "s3/xml.h"

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
        if (s3f__header_is_secret(h->data)) /* the name, never the value */
            s3f__log(&c->logger, S3F_LOG_TRACE, "   %.*s: <redacted>",
                     (int)strcspn(h->data, ":"), h->data);
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

/* Build URL, headers and signature for one attempt. No usable credentials: *parked, and
 * nothing built; `w` is called when the refresher's fetch completed. */
static enum s3f_status prepare(struct s3f_client *c, struct s3f__s3_request *r,
                               const char *range, const char *if_match,
                               char **url_out, struct curl_slist **headers_out,
                               struct s3f__credentials_waiter *w, bool *parked,
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
    struct s3f__endpoint_params ep_params = s3f__client_endpoint_params(c, r->bucket);
    ep_params.use_s3express_control_endpoint = r->s3express_control;
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
    struct s3f__credentials_snapshot *snap = NULL;
    if (!url) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, r->operation, resource, "out of memory");
        goto out;
    }

    /* the headers the request carries, signed in full */
    struct s3f__header hdrs[S3F_MAX_EXTRA_HEADERS + 6 + S3F_REQUEST_OPTION_HEADERS_MAX];
    size_t nh = 0;
    hdrs[nh++] = (struct s3f__header){"host", ep.host};
    for (size_t i = 0; i < r->n_headers; i++)
        hdrs[nh++] = r->headers[i];
    if (range)
        hdrs[nh++] = (struct s3f__header){"range", range};
    if (if_match)
        hdrs[nh++] = (struct s3f__header){"if-match", if_match};
    if (c->requester_pays) /* signed with the rest: a Requester Pays bucket's consent */
        hdrs[nh++] = (struct s3f__header){"x-amz-request-payer", "requester"};
    nh += s3f__request_options_headers(&c->ropts, r->operation, r->bucket, r->copy_source,
                                       hdrs + nh);
    char content_len[32];
    if (r->body || strcmp(r->method, "PUT") == 0 || strcmp(r->method, "POST") == 0) {
        snprintf(content_len, sizeof(content_len), "%zu", r->body_len);
        hdrs[nh++] = (struct s3f__header){"content-length", content_len};
    }

    char payload_hash[65] = "UNSIGNED-PAYLOAD";
    if (r->sign_payload &&
        s3f__sha256_hex(r->body ? r->body : "", r->body ? r->body_len : 0, payload_hash)) {
        st = s3f__error_set(err, s3f__crypto_status(), r->operation, resource,
                            "SHA-256 failed (OpenSSL)");
        goto out;
    }

    for (size_t i = 1; i < nh; i++) { /* host is set by curl from the URL */
        if ((st = add_header(&hl, hdrs[i].name, hdrs[i].value)))
            goto oom;
    }
    if (!c->anonymous) {
        /* an immutable snapshot: no provider runs here while usable credentials exist;
         * without one the request parks (this may be an I/O thread: it must not wait);
         * a directory bucket's zonal requests sign with its session's (express.c) */
        struct s3f__credentials_provider *prov = c->creds;
        st = S3F_OK;
        if (ep.s3express_session)
            st = s3f__express_provider(c, r->bucket, &prov, err);
        if (st == S3F_OK)
            st = s3f__credentials_acquire_or_park(prov, &snap, w, parked, err);
        if (st == S3F_OK && *parked)
            goto out;
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
        s3f__s3_call_of(r)->creds_generation = snap->generation;
        s3f__s3_call_of(r)->creds_provider = prov;
        struct s3f__sigv4_credentials sc = {snap->creds.access_key_id,
                                            snap->creds.secret_access_key,
                                            snap->creds.session_token};
        if (ep.s3express_session) { /* the session token: its own header, signed */
            sc.session_token = NULL;
            hdrs[nh++] = (struct s3f__header){"x-amz-s3session-token", snap->creds.session_token};
            sreq.n_headers = nh;
            if ((st = add_header(&hl, "x-amz-s3session-token", snap->creds.session_token)))
                goto oom;
        }
        struct s3f__sigv4_config cfg = {
            .region = ep.signing_region ? ep.signing_region : c->region,
            .service = ep.signing_name ? ep.signing_name : "s3",
            .time = s3f__wall_time_s(),
            .normalize_path = false,
            .add_content_sha256_header = true,
            .region_set = ep.signing_region_set, /* SigV4a: MRAP, Outposts */
        };
        /* the signing key, derived once per (date, region, service, credentials); SigV4a's
         * ECDSA key from the credentials alone */
        char amz_date[17];
        uint8_t key[32];
        s3f__time_amz(cfg.time, amz_date);
        amz_date[8] = '\0';
        if (cfg.region_set)
            st = s3f__sigv4a_derive_key(snap->creds.access_key_id,
                                        snap->creds.secret_access_key, key, err);
        else
            st = s3f__credentials_signing_key(snap, amz_date, cfg.region, cfg.service, key,
                                              err);
        if (st == S3F_OK) {
            cfg.signing_key = key;
            st = s3f__sigv4_sign_headers(&sreq, &sc, &cfg, &sig, err);
        }
        explicit_bzero(key, sizeof(key));
        if (st) {
            if (err) {
                s3f__strlcpy(err->operation, r->operation, sizeof(err->operation));
                s3f__strlcpy(err->resource, resource, sizeof(err->resource));
            }
            goto out;
        }
        if ((st = add_header(&hl, "x-amz-date", sig.amz_date)) ||
            (sig.region_set && (st = add_header(&hl, "x-amz-region-set", sig.region_set))) ||
            (st = add_header(&hl, "x-amz-content-sha256", payload_hash)) ||
            (sig.security_token &&
             (st = add_header(&hl, "x-amz-security-token", sig.security_token))) ||
            (st = add_header(&hl, "authorization", sig.authorization)))
            goto oom;
    } else {
        if ((st = add_header(&hl, "x-amz-content-sha256", payload_hash)))
            goto oom;
    }
    if ((st = add_header(&hl, "user-agent", c->ropts.user_agent))) /* not signed */
        goto oom;
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
    s3f__credentials_release(snap); /* the headers hold copies of the token */
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
    s3f__request_options_hint(&s3f__s3_call_of(r)->c->ropts, r->operation, r->copy_source, e);
}

/* ---- the asynchronous state machine ---------------------------------------------------
 * submit -> start_attempt (build, sign) -> transport -> attempt_done (classify)
 *        -> finish | start_attempt again after a backoff (a transport timer, no sleep). */

static void attempt_done(struct s3f__http_request *req, void *ud);

/* Whether this failure is the server rejecting the session token (ExpiredToken,
 * TokenRefreshRequired, InvalidToken) of a signed request not re-sent for it yet. */
static bool token_rejected(const struct s3f_client *c, const struct s3f__s3_call *k,
                           const struct s3f_error *last) {
    static const char *const codes[] = {"ExpiredToken", "TokenRefreshRequired", "InvalidToken"};
    if (c->anonymous || !c->creds || k->token_resent || !last->code[0])
        return false;
    if (k->creds_provider && k->creds_provider != c->creds) /* a directory bucket's session */
        return s3f__express_session_rejected(last->code);
    for (size_t i = 0; i < S3F_ARRAY_LEN(codes); i++)
        if (strcmp(last->code, codes[i]) == 0)
            return true;
    return false;
}

static void attempt_release(struct s3f__s3_call *k) {
    s3f__buf_cleanup(&k->a.err_body);
    curl_slist_free_all(k->headers);
    k->headers = NULL;
    free(k->url);
    k->url = NULL;
}

static void finish(struct s3f__s3_request *r, enum s3f_status st) {
    struct s3f__s3_call *k = s3f__s3_call_of(r);
    attempt_release(k);
    if (st == S3F_OK)
        s3f__retry_refund(k->c, k->used_retry_token ? k->last_cost : 1);
    s3f__s3_done_fn done = k->done;
    void *ud = k->done_ud;
    S3F_ASSERT(done != NULL); /* `done` runs exactly once per submit (client.h) */
    k->done = NULL;
    done(r, st, ud); /* r may be gone from here on */
}

static void start_attempt(struct s3f__s3_request *r, uint64_t not_before_ns);

/* The refresher's fetch completed (its thread, no lock held): build the parked attempt
 * again, with the new credentials (or fail it with the fetch's error). */
static void call_creds_ready(struct s3f__credentials_waiter *w) {
    struct s3f__s3_call *k = (struct s3f__s3_call *)((char *)w -
                                                     offsetof(struct s3f__s3_call, creds_wait));
    struct s3f__s3_request *r =
        (struct s3f__s3_request *)((char *)k - offsetof(struct s3f__s3_request, call));
    k->parks++;
    s3f__log(&k->c->logger, S3F_LOG_DEBUG, "%s %s: credentials fetched, attempt %d goes on",
             r->operation, k->resource, k->attempt);
    start_attempt(r, k->parked_not_before_ns);
}

/* Build and send attempt k->attempt, to start not before `not_before_ns`. */
static void start_attempt(struct s3f__s3_request *r, uint64_t not_before_ns) {
    struct s3f__s3_call *k = s3f__s3_call_of(r);
    struct s3f__s3_attempt *a = &k->a;
    memset(a, 0, sizeof(*a));
    a->r = r;
    a->sink_pos = k->range_start + k->delivered;
    a->want_first = a->sink_pos;
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
    if (r->sink && k->pinned_etag[0] && !k->user_if_match)
        if_match = k->pinned_etag; /* a retry or the rest: of the object already seen */
    k->prep_failed = false;
    k->parked_not_before_ns = not_before_ns; /* before it can be parked (and re-queued) */
    bool parked = false;
    r->attempts = k->attempt;
    enum s3f_status st =
        k->idem == S3F__IDEM_UNKNOWN
            ? s3f__error_set(k->err, S3F_ERR_INTERNAL, r->operation, k->resource,
                             "operation %s has no idempotency class (s3/idempotency.c)",
                             r->operation ? r->operation : "(null)")
            : prepare(k->c, r, range_hdr, if_match, &k->url, &k->headers, &k->creds_wait,
                      &parked, k->err);
    if (st == S3F_OK && parked) {
        /* no usable credentials: the refresher fetches, and call_creds_ready re-queues
         * this attempt when it is done (the request waits on no thread). It may already
         * run on the refresher's thread: r is not touched here any more. */
        return;
    }
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
        a->http.on_header = s3f__s3_attempt_on_header;
        a->http.on_body = s3f__s3_attempt_on_body;
        a->http.cb_ud = a;
        /* curl silently re-sends a request whose reused connection died before any
         * response byte: for a request that is not idempotent that would hide a lost
         * response, so it gets a connection of its own */
        a->http.fresh_connect = k->idem != S3F__IDEM_IDEMPOTENT;
        /* control: Create/Complete/Abort, HEAD, List...; data: PUTs and GETs to a sink */
        a->http.control = strcmp(r->method, "PUT") != 0 && !r->sink;
        log_request(k->c, r, k->url, k->attempt, k->headers);
    }
    a->http.not_before_ns = not_before_ns;
    a->http.timeout_ms = r->timeout_ms;
    s3f__http_submit(k->c->http, &a->http, attempt_done, r);
}

/* An attempt's metrics (docs/METRICS.md): the request by operation and status class (network:
 * the transport failed, even after a status line), its times, and the object data it moved:
 * the body sent by PutObject and UploadPart, the 2xx body received by GetObject, also of an
 * attempt broken mid-body (its bytes were delivered: the next asks for the rest); not the
 * XML of the other operations, nor error documents. */
static void count_attempt(struct s3f_client *c, const struct s3f__s3_request *r,
                          const struct s3f__s3_attempt *a, enum s3f_status tst, int http_status) {
    size_t op = s3f__metrics_op_index(r->operation);
    enum s3f__metric_status cls =
        tst == S3F_OK ? s3f__metrics_status_class(http_status) : S3F__MS_NETWORK;
    S3F__METRIC_ADD(c->metrics, S3F__M_REQUESTS, s3f_metrics_series(c->metrics, S3F__M_REQUESTS,
                                                                     op, cls), 1);
    S3F__METRIC_OBSERVE(c->metrics, S3F__M_REQUEST_SECONDS, op, (double)a->http.total_us / 1e6);
    if (a->http.first_byte_us)
        S3F__METRIC_OBSERVE(c->metrics, S3F__M_FIRST_BYTE_SECONDS, op,
                            (double)a->http.first_byte_us / 1e6);
    if (op == S3F__MOP_PUT_OBJECT || op == S3F__MOP_UPLOAD_PART)
        S3F__METRIC_ADD(c->metrics, S3F__M_BYTES, S3F__MD_UP, (int64_t)a->http.bytes_sent);
    else if (op == S3F__MOP_GET_OBJECT && http_status >= 200 && http_status < 300)
        S3F__METRIC_ADD(c->metrics, S3F__M_BYTES, S3F__MD_DOWN, (int64_t)a->http.bytes_received);
}

/* The reason label of a retry of an attempt that failed with `last`. */
static enum s3f__metric_retry retry_reason(const struct s3f__s3_attempt *a, enum s3f_status tst,
                                           const struct s3f_error *last, bool throttled) {
    if (throttled)
        return S3F__MR_THROTTLE;
    if (tst != S3F_OK && !a->bad)
        return s3f__http_error_is_timeout(&a->http) ? S3F__MR_TIMEOUT : S3F__MR_NETWORK;
    return last->http_status >= 500 || last->status == S3F_ERR_SERVER ? S3F__MR_SERVER
                                                                      : S3F__MR_BAD_RESPONSE;
}

static void attempt_done(struct s3f__http_request *req, void *ud) {
    struct s3f__s3_request *r = ud;
    struct s3f__s3_call *k = s3f__s3_call_of(r);
    struct s3f__s3_attempt *a = &k->a;
    struct s3f_client *c = k->c;
    (void)req;
    if (k->prep_failed) {
        finish(r, k->err->status);
        return;
    }
    enum s3f_status tst = a->http.status;
    if (tst == S3F_ERR_ABORTED && a->state == S3F__ATTEMPT_REST_SKIPPED)
        tst = S3F_OK; /* the range came whole; the rest of a whole-object answer was not read */
    int http_status = a->http.http_status;
    r->http_status = http_status;
    if (a->date)
        r->server_date = a->date;
    double ms = (double)(a->http.end_ns - a->http.start_ns) / 1e6;
    s3f__log(&c->logger, S3F_LOG_DEBUG,
             "<- %s %d %s in %.1f ms (%" PRIu64 " bytes received, request id %s)%s%s",
             r->operation, http_status, tst ? s3f_status_name(tst) : "OK", ms,
             a->http.bytes_received, a->request_id[0] ? a->request_id : "-",
             a->http.error[0] ? ": " : "", a->http.error);
    count_attempt(c, r, a, tst, http_status);

    bool retryable = false;
    int cost = S3F__RETRY_COST;
    bool resumed = k->delivered > 0; /* this attempt asked for the rest of a broken body */
    int sc;
    struct s3f_error last;
    s3f_error_clear(&last);
    if (r->sink && a->sink_pos > k->range_start + k->delivered)
        k->delivered = a->sink_pos - k->range_start; /* ETag and size pinned: check_response */

    if (tst != S3F_OK) {
        /* transport failure (or our callback stopped it) */
        last.status = tst;
        last.http_status = http_status;
        s3f__strlcpy(last.request_id, a->request_id, sizeof(last.request_id));
        if (tst == S3F_ERR_ABORTED && a->bad) {
            /* not what was asked (check_response) */
            last.status = a->bad;
            s3f__strlcpy(last.message, a->bad_msg, sizeof(last.message));
            s3f__strlcpy(last.host_id, a->host_id, sizeof(last.host_id));
        } else if (tst == S3F_ERR_ABORTED && a->state == S3F__ATTEMPT_BODY_OOM) {
            last.status = S3F_ERR_NO_MEMORY;
            snprintf(last.message, sizeof(last.message), "out of memory");
        } else if (tst == S3F_ERR_ABORTED && a->state == S3F__ATTEMPT_BODY_OVERFLOW) {
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
        if (tst == S3F_ERR_ABORTED && a->bad)
            retryable = a->bad_retryable;
        if (s3f__http_error_is_timeout(&a->http))
            cost = S3F__RETRY_TIMEOUT_COST;
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
    } else if (r->sink && (sc = s3f__s3_check_complete(a, http_status, &last, &retryable)) != 0) {
        if (sc > 0) {
            /* a consistent answer that ended before the range did (a short 206): ask for
             * the rest at once, as for a broken body; not a failed attempt */
            k->short_responses++;
            s3f__log(&c->logger, S3F_LOG_INFO,
                     "%s %s: the server answered up to offset %" PRIu64 " of %" PRIu64
                     ", asking for the rest",
                     r->operation, k->resource, a->sink_pos,
                     k->range_end == UINT64_MAX ? k->pinned_size : k->range_end + 1);
            attempt_release(k);
            start_attempt(r, 0);
            return;
        }
        /* else wrong: retried or failed below */
    } else if (!r->sink && k->user_if_match && s3f__s3_etag_differs(k->user_if_match, a->etag) &&
               (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0)) {
        /* a server or gateway that ignored If-Match */
        last.status = S3F_ERR_PRECONDITION_FAILED;
        last.http_status = http_status;
        snprintf(last.message, sizeof(last.message),
                 "the response is of ETag %s, not of the pinned %s (If-Match): the object "
                 "changed (or the server ignored If-Match)",
                 a->etag, k->user_if_match);
        s3f__strlcpy(last.request_id, a->request_id, sizeof(last.request_id));
        s3f__strlcpy(last.host_id, a->host_id, sizeof(last.host_id));
    } else {
        /* success */
        fill_info(r->info, a, (r->has_range || resumed) && http_status == 206);
        if (r->info && resumed && k->pinned_etag[0])
            s3f__strlcpy(r->info->etag, k->pinned_etag, sizeof(r->info->etag));
        finish(r, S3F_OK);
        return;
    }
    attempt_release(k);
    bool throttled = http_status == 503 || http_status == 429 ||
                     last.status == S3F_ERR_THROTTLED;
    if (throttled)
        S3F__METRIC_ADD(c->metrics, S3F__M_THROTTLES, 0, 1);

    if (token_rejected(c, k, &last)) {
        /* the credentials' token expired early or was revoked: new credentials, re-sent
         * once, now (no backoff, no retry token: this is not a server fault) */
        s3f__log(&c->logger, S3F_LOG_INFO, "%s %s: %s; re-sending with new credentials",
                 r->operation, k->resource, last.code);
        s3f__credentials_invalidate(k->creds_provider ? k->creds_provider : c->creds,
                                    k->creds_generation);
        k->token_resent = true;
        S3F__METRIC_ADD(c->metrics, S3F__M_RETRIES, S3F__MR_CREDENTIALS, 1);
        k->attempt++;
        k->max_attempts++;
        start_attempt(r, 0);
        return;
    }

    bool give_up = !retryable || k->attempt >= k->max_attempts;
    if (!give_up && !s3f__retry_acquire(c, cost)) {
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
    S3F__METRIC_ADD(c->metrics, S3F__M_RETRIES, retry_reason(a, tst, &last, throttled), 1);
    /* Could the server have acted on this attempt? A 5xx or a 200 carrying an error may
     * come after it did; a transport failure only once it had the whole request (a refused
     * connection or a body cut short cannot have been acted on). */
    bool maybe_acted = tst == S3F_OK ? http_status >= 500 || http_status < 300
                                     : tst != S3F_ERR_CONNECT &&
                                           a->http.bytes_sent >= (uint64_t)r->body_len;
    if (maybe_acted && k->idem != S3F__IDEM_IDEMPOTENT && !r->lost_response) {
        r->lost_response = true;
        s3f__log(&c->logger, S3F_LOG_INFO,
                 "%s %s: the server may have acted on attempt %d (%s): the answer to the "
                 "next is checked (%s)", r->operation, k->resource, k->attempt,
                 s3f_status_name(last.status), s3f__idem_class_name(k->idem));
    }
    uint64_t wait = s3f__retry_backoff_ms(k->attempt);
    s3f__log(&c->logger, S3F_LOG_INFO,
             "%s %s: attempt %d failed (%s%s%s), retrying in %" PRIu64 " ms", r->operation,
             k->resource, k->attempt, last.code[0] ? last.code : s3f_status_name(last.status),
             last.message[0] ? ": " : "", last.message, wait);
    k->attempt++;
    start_attempt(r, s3f__now_ns() + wait * 1000000ull);
}

void s3f__s3_submit(struct s3f_client *c, struct s3f__s3_request *r, struct s3f_error *err,
                    s3f__s3_done_fn done, void *ud) {
    struct s3f__s3_call *k = s3f__s3_call_of(r);
    memset(k, 0, sizeof(*k));
    k->c = c;
    k->err = err ? err : &k->local_err;
    s3f_error_clear(k->err);
    k->done = done;
    k->done_ud = ud;
    k->attempt = 1;
    k->idem = (int)s3f__idempotency_of(r);
    k->creds_wait.ready = call_creds_ready;
    r->lost_response = false;
    r->attempts = 0;
    r->server_date = 0;
    k->max_attempts = r->max_attempts > 0 ? r->max_attempts : c->max_attempts > 0 ? c->max_attempts : 3;
    k->range_start = r->has_range ? r->range_start : 0;
    k->range_end = r->has_range ? r->range_end : UINT64_MAX;
    k->pinned_size = r->object_size;
    k->has_pinned_size = r->has_object_size;
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
    if (!c) /* a public call with the NULL a failed s3f_client_new leaves */
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, r->operation, NULL,
                              "client is NULL");
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
