/* The network providers' HTTP helper, and the STS fetches: one small blocking HTTP helper
 * (s3f__fetch_perform, with its retries s3f__fetch_retried) serves every network provider
 * of the default chain (here web identity, STS AssumeRoleWithWebIdentity, and S3 Express's
 * CreateSession; the container endpoint and IMDSv2 in credentials_metadata.c): one libcurl
 * easy transfer with its own timeouts, a 64 KiB response cap, no redirects, http/https
 * only, and the transport's CURLcode map (s3f__http_status_of_curl). It runs on the
 * provider's refresher thread. */
#include <curl/curl.h>
#include <expat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/credentials_internal.h"
#include "http/http.h"

#define OP "credentials"
#define HTTP_BODY_MAX ((size_t)64 << 10)

#define XML_FIELD_MAX ((size_t)16 << 10)

/* ---- one HTTP request ------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

bool s3f__fetch_curl_init(void) {
    pthread_once(&curl_once, curl_init);
    return curl_init_rc == CURLE_OK;
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
    struct s3f__fetch_response *rs = ud;
    size_t n = size * nmemb;
    enum s3f_status st = s3f__buf_append(&rs->body, ptr, n);
    if (st == S3F_ERR_NO_MEMORY)
        rs->oom = true;
    return st == S3F_OK ? n : 0;
}

static void wipe_slist(struct curl_slist *l) {
    for (struct curl_slist *i = l; i; i = i->next)
        explicit_bzero(i->data, strlen(i->data));
    curl_slist_free_all(l);
}

void s3f__fetch_response_init(struct s3f__fetch_response *rs) {
    rs->status = 0;
    rs->oom = false;
    s3f__buf_init(&rs->body, HTTP_BODY_MAX);
}

void s3f__fetch_response_cleanup(struct s3f__fetch_response *rs) {
    if (rs->body.data)
        explicit_bzero(rs->body.data, rs->body.cap);
    s3f__buf_cleanup(&rs->body);
}

/* Perform the request. S3F_OK when a response arrived (any HTTP status, in rs->status);
 * else S3F_ERR_CONNECT, S3F_ERR_TIMEOUT, S3F_ERR_TLS, S3F_ERR_NETWORK, S3F_ERR_BAD_RESPONSE
 * (body too large), S3F_ERR_INVALID_URI or S3F_ERR_NO_MEMORY, with a short reason in `why`
 * (never a header or body). rs->body is reset first. */
enum s3f_status s3f__fetch_perform(const struct s3f__chain_settings *s,
                                   const struct s3f__fetch_request *rq, struct s3f__fetch_response *rs,
                                   char *why, size_t why_len) {
    bool curl_ok = s3f__fetch_curl_init();
    why[0] = '\0';
    s3f__buf_reset(&rs->body);
    rs->status = 0;
    rs->oom = false;
    if (!curl_ok) {
        snprintf(why, why_len, "libcurl initialisation failed");
        return S3F_ERR_INTERNAL;
    }
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(why, why_len, "out of memory");
        return S3F_ERR_NO_MEMORY;
    }
    enum s3f_status st = S3F_OK;
    struct curl_slist *hdrs = NULL;
    char ebuf[CURL_ERROR_SIZE] = "";
    for (size_t i = 0; i < S3F_ARRAY_LEN(rq->headers) && rq->headers[i]; i++) {
        struct curl_slist *n = curl_slist_append(hdrs, rq->headers[i]);
        if (!n)
            goto nomem;
        hdrs = n;
    }
    const char *extra[] = {"Expect:", strcmp(rq->method, "PUT") == 0 ? "Content-Type:" : NULL};
    for (size_t i = 0; i < S3F_ARRAY_LEN(extra) && extra[i]; i++) {
        struct curl_slist *n = curl_slist_append(hdrs, extra[i]);
        if (!n)
            goto nomem;
        hdrs = n;
    }
    /* the options that copy a string can fail for want of memory; the others cannot */
    if (curl_easy_setopt(h, CURLOPT_URL, rq->url) == CURLE_OUT_OF_MEMORY ||
        curl_easy_setopt(h, CURLOPT_USERAGENT, "s3flash/" S3FLASH_VERSION) ==
            CURLE_OUT_OF_MEMORY ||
        (s->ca_bundle &&
         curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_bundle) == CURLE_OUT_OF_MEMORY) ||
        (rq->no_proxy && curl_easy_setopt(h, CURLOPT_NOPROXY, "*") == CURLE_OUT_OF_MEMORY))
        goto nomem;
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)rq->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)rq->timeout_ms);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, rs);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    if (strcmp(rq->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
    } else if (strcmp(rq->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        if (curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT") == CURLE_OUT_OF_MEMORY)
            goto nomem;
    }
    uint64_t t0 = s3f__now_ms();
    CURLcode rc = curl_easy_perform(h);
    /* the transport's CURLcode map (http/http.c), with this helper's own cases: its body
     * cap (a write error) and a URL the caller built */
    const char *detail = ebuf[0] ? ebuf : curl_easy_strerror(rc);
    if (rc == CURLE_UNSUPPORTED_PROTOCOL)
        st = S3F_ERR_INVALID_ARGUMENT;
    else
        st = s3f__http_status_of_curl((int)rc);
    switch (st) {
    case S3F_OK:
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &rs->status);
        break;
    case S3F_ERR_CONNECT:
        snprintf(why, why_len, "connect failed: %s", detail);
        break;
    case S3F_ERR_TIMEOUT:
        snprintf(why, why_len, "timed out: %s", detail);
        break;
    case S3F_ERR_TLS:
        snprintf(why, why_len, "TLS: %s", detail);
        break;
    case S3F_ERR_ABORTED:
        if (rs->oom) {
            st = S3F_ERR_NO_MEMORY;
            snprintf(why, why_len, "out of memory");
            break;
        }
        st = S3F_ERR_BAD_RESPONSE;
        snprintf(why, why_len, "response larger than %zu bytes", HTTP_BODY_MAX);
        break;
    case S3F_ERR_INVALID_ARGUMENT:
        st = S3F_ERR_INVALID_URI;
        snprintf(why, why_len, "invalid URL: %s", detail);
        break;
    case S3F_ERR_NO_MEMORY:
        snprintf(why, why_len, "out of memory");
        break;
    default:
        st = S3F_ERR_NETWORK;
        snprintf(why, why_len, "%s", detail);
        break;
    }
    s3f__log(s->logger, S3F_LOG_DEBUG, "credentials: %s %s -> %ld%s%s (%llu ms)", rq->method,
             rq->url, rs->status, why[0] ? " " : "", why,
             (unsigned long long)(s3f__now_ms() - t0));
    goto out;
nomem:
    st = S3F_ERR_NO_MEMORY;
    snprintf(why, why_len, "out of memory");
out:
    curl_easy_cleanup(h);
    wipe_slist(hdrs);
    return st;
}

/* Whether a failed attempt is worth repeating. */
bool s3f__fetch_retryable(enum s3f_status st, long http_status) {
    if (st == S3F_OK)
        return http_status >= 500 || http_status == 429;
    return st == S3F_ERR_CONNECT || st == S3F_ERR_TIMEOUT || st == S3F_ERR_NETWORK;
}

/* Between the attempts of one fetch. Fetches run on the provider's refresher thread (see
 * credentials.c), never on a data (I/O) thread, so this short sleep (50, 100, 200 ... ms)
 * delays no transfer; only a provider whose refresher could not start fetches on the
 * requesting thread. */
void s3f__fetch_backoff(int attempt) {
    s3f__sleep_ms((uint64_t)((50u << attempt) * (0.5 + s3f__random_unit())));
}

enum s3f_status s3f__fetch_retried(const struct s3f__chain_settings *s,
                                   const struct s3f__fetch_request *rq,
                                   struct s3f__fetch_response *rs, int attempts, char *why,
                                   size_t why_len) {
    enum s3f_status st = S3F_OK;
    for (int a = 0; a < attempts; a++) {
        if (a)
            s3f__fetch_backoff(a);
        st = s3f__fetch_perform(s, rq, rs, why, why_len);
        if (!s3f__fetch_retryable(st, rs->status))
            break;
    }
    return st;
}

/* ---- web identity (STS AssumeRoleWithWebIdentity) ------------------------------------------ */

/* STS's AssumeRoleWithWebIdentityResult and S3 Express's CreateSessionResult alike */
enum sts_field { F_AKID, F_SECRET, F_TOKEN, F_EXPIRATION, F_CODE, F_MESSAGE, F_REQUEST_ID, F_N };

static const char *const sts_suffixes[F_N] = {
    [F_AKID] = "Result/Credentials/AccessKeyId",
    [F_SECRET] = "Result/Credentials/SecretAccessKey",
    [F_TOKEN] = "Result/Credentials/SessionToken",
    [F_EXPIRATION] = "Result/Credentials/Expiration",
    [F_CODE] = "/Error/Code",
    [F_MESSAGE] = "/Error/Message",
    [F_REQUEST_ID] = "/RequestId",
};

struct sts_doc {
    char path[512];
    size_t path_len;
    int overflow_depth;      /* elements entered past the path's room */
    struct s3f__buf text;
    char *fields[F_N];
    bool oom;
    XML_Parser parser;
};

static const char *local_name(const char *name) {
    const char *c = strrchr(name, ':');
    return c ? c + 1 : name;
}

static void XMLCALL sts_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
    (void)attrs;
    struct sts_doc *d = ud;
    const char *ln = local_name(name);
    size_t n = strlen(ln);
    if (d->overflow_depth || d->path_len + 1 + n >= sizeof(d->path)) {
        d->overflow_depth++;
    } else {
        d->path[d->path_len++] = '/';
        memcpy(d->path + d->path_len, ln, n + 1);
        d->path_len += n;
    }
    s3f__buf_reset(&d->text);
}

static bool ends_with(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

static void XMLCALL sts_end(void *ud, const XML_Char *name) {
    (void)name;
    struct sts_doc *d = ud;
    if (d->overflow_depth) {
        d->overflow_depth--;
        return;
    }
    for (int f = 0; f < F_N; f++) {
        if (!d->fields[f] && ends_with(d->path, d->path_len, sts_suffixes[f])) {
            d->fields[f] = s3f__strdup(d->text.data ? d->text.data : "");
            if (!d->fields[f])
                d->oom = true;
        }
    }
    while (d->path_len && d->path[d->path_len - 1] != '/')
        d->path_len--;
    if (d->path_len)
        d->path_len--;
    d->path[d->path_len] = '\0';
    s3f__buf_reset(&d->text);
}

static void XMLCALL sts_chars(void *ud, const XML_Char *s, int len) {
    struct sts_doc *d = ud;
    /* past the cap: the field truncated; out of memory: the document is (an empty token
     * must not read as the server's fault, nor be refused as one) */
    if (s3f__buf_append(&d->text, s, (size_t)len) == S3F_ERR_NO_MEMORY)
        d->oom = true;
}

static void XMLCALL sts_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                                const XML_Char *pubid, int has_internal_subset) {
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)has_internal_subset;
    struct sts_doc *d = ud;
    XML_StopParser(d->parser, XML_FALSE); /* no DTDs, no entity tricks */
}

static void sts_doc_cleanup(struct sts_doc *d) {
    for (int f = 0; f < F_N; f++)
        s3f__wipe_free(d->fields[f]);
    if (d->text.data)
        explicit_bzero(d->text.data, d->text.cap);
    s3f__buf_cleanup(&d->text);
}

/* expat allocates through the library's malloc/realloc/free (as src/s3/xml.c). */
static const XML_Memory_Handling_Suite sts_xml_mem = {malloc, realloc, free};

/* Parse an STS response or error document; 0 if it is well-formed XML. */
static int sts_parse(struct sts_doc *d, const char *body, size_t len) {
    memset(d, 0, sizeof(*d));
    s3f__buf_init(&d->text, XML_FIELD_MAX);
    XML_Parser p = XML_ParserCreate_MM("UTF-8", &sts_xml_mem, NULL);
    if (!p) {
        d->oom = true;
        return -1;
    }
    d->parser = p;
    XML_SetUserData(p, d);
    XML_SetElementHandler(p, sts_start, sts_end);
    XML_SetCharacterDataHandler(p, sts_chars);
    XML_SetStartDoctypeDeclHandler(p, sts_doctype);
    int ok = len <= INT32_MAX && XML_Parse(p, body ? body : "", (int)len, XML_TRUE) == XML_STATUS_OK;
    if (!ok && XML_GetErrorCode(p) == XML_ERROR_NO_MEMORY)
        d->oom = true;
    XML_ParserFree(p);
    return ok && !d->oom ? 0 : -1;
}

/* Attempts of one STS or CreateSession fetch. */
#define STS_ATTEMPTS 3

/* Attempt `a` (0: the first) of an STS or CreateSession fetch: the backoff before a retry,
 * doc emptied (the previous answer's fields), the request. s3f__fetch_perform's status. */
static enum s3f_status sts_attempt(int a, const struct s3f__chain_settings *s,
                                   const struct s3f__fetch_request *rq, struct s3f__fetch_response *rs,
                                   struct sts_doc *doc, char *why, size_t why_len) {
    if (a)
        s3f__fetch_backoff(a);
    sts_doc_cleanup(doc);
    memset(doc, 0, sizeof(*doc));
    return s3f__fetch_perform(s, rq, rs, why, why_len);
}

int s3f__sts_parse_fields(const char *body, size_t len, char *fields[S3F__STS_FIELDS]) {
    _Static_assert(F_N == S3F__STS_FIELDS, "s3f__sts_parse_fields: field count");
    struct sts_doc d;
    int rc = sts_parse(&d, body, len);
    for (int f = 0; f < F_N; f++) {
        fields[f] = d.fields[f];
        d.fields[f] = NULL;
    }
    sts_doc_cleanup(&d);
    return rc;
}

enum s3f_status s3f__sts_credentials(char *const fields[S3F__STS_FIELDS], const char *source,
                                     struct s3f__credentials *out, char *why, size_t why_len) {
    memset(out, 0, sizeof(*out));
    if (!fields[F_AKID] || !fields[F_SECRET] || !fields[F_TOKEN] || !fields[F_EXPIRATION]) {
        snprintf(why, why_len, "no complete Credentials element");
        return S3F_ERR_BAD_RESPONSE;
    }
    int64_t exp;
    if (s3f__time_parse(s3f__trim(fields[F_EXPIRATION]), &exp) != 0) {
        snprintf(why, why_len, "the Expiration is not an ISO-8601 time");
        return S3F_ERR_BAD_RESPONSE;
    }
    const char *akid = s3f__trim(fields[F_AKID]), *secret = s3f__trim(fields[F_SECRET]);
    const char *token = s3f__trim(fields[F_TOKEN]);
    const char *bad = s3f__credentials_refused(akid, secret, token, true, exp, true);
    if (bad) {
        snprintf(why, why_len, "%s", bad);
        return S3F_ERR_BAD_RESPONSE;
    }
    if (s3f__credentials_set(out, akid, secret, token, exp, source)) {
        snprintf(why, why_len, "out of memory");
        return S3F_ERR_NO_MEMORY;
    }
    return S3F_OK;
}

/* Append `name=<encoded value>&` to b. */
static enum s3f_status form_param(struct s3f__buf *b, const char *name, const char *value) {
    enum s3f_status st;
    if ((st = s3f__buf_appendf(b, "%s%s=", b->len ? "&" : "", name)))
        return st;
    return s3f__uri_encode(b, value, strlen(value), false);
}

enum s3f_status s3f__chain_fetch_web_identity(const struct s3f__chain_settings *s,
                                              struct s3f__credentials *out, char *note,
                                              size_t note_len, struct s3f_error *err) {
    if (!s->wi_token_file) {
        snprintf(note, note_len, "web identity (AWS_WEB_IDENTITY_TOKEN_FILE unset)");
        return S3F_ERR_NO_CREDENTIALS;
    }
    if (!s->wi_role_arn)
        return s3f__error_set(err, S3F_ERR_CONFIG, OP, s->wi_token_file,
                              "web identity: %s is set but no role: set AWS_ROLE_ARN or the "
                              "profile's role_arn",
                              s->wi_token_file_from);
    char *token = NULL;
    enum s3f_status st = s3f__read_token_file(s->wi_token_file, S3F__TOKEN_FILE_MAX,
                                              "web identity token file", &token, err);
    if (st)
        return st;
    char session[64];
    if (s->wi_session_name)
        s3f__strlcpy(session, s->wi_session_name, sizeof(session));
    else
        snprintf(session, sizeof(session), "s3flash-%lld", (long long)s3f__wall_time_s());

    struct s3f__buf body;
    s3f__buf_init(&body, S3F__TOKEN_FILE_MAX * 4);
    struct s3f__fetch_response rs;
    s3f__fetch_response_init(&rs);
    struct sts_doc doc;
    memset(&doc, 0, sizeof(doc));
    char url[1024];
    /* The endpoint as libcurl reads it (a "/" path where it has none); as given when curl
     * cannot read it, and the request then fails as curl says. */
    snprintf(url, sizeof(url), "%s", s->sts_endpoint);
    CURLU *cu = curl_url();
    char *norm = NULL;
    if (cu && curl_url_set(cu, CURLUPART_URL, s->sts_endpoint, 0) == CURLUE_OK &&
        curl_url_get(cu, CURLUPART_URL, &norm, 0) == CURLUE_OK)
        snprintf(url, sizeof(url), "%s", norm);
    curl_free(norm);
    curl_url_cleanup(cu);

    if (form_param(&body, "Action", "AssumeRoleWithWebIdentity") ||
        form_param(&body, "Version", "2011-06-15") ||
        form_param(&body, "RoleArn", s->wi_role_arn) ||
        form_param(&body, "RoleSessionName", session) ||
        form_param(&body, "WebIdentityToken", token)) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    struct s3f__fetch_request rq = {
        .method = "POST",
        .url = url,
        .headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
                    "Accept: text/xml"},
        .body = body.data,
        .body_len = body.len,
        .connect_timeout_ms = s->connect_timeout_ms,
        .timeout_ms = s->timeout_ms,
    };
    char why[CURL_ERROR_SIZE + 64];
    for (int a = 0; a < STS_ATTEMPTS; a++) {
        st = sts_attempt(a, s, &rq, &rs, &doc, why, sizeof(why));
        if (st == S3F_OK && rs.status != 200)
            (void)sts_parse(&doc, rs.body.data, rs.body.len);
        bool idp_flaky = doc.fields[F_CODE] &&
                         (strcmp(doc.fields[F_CODE], "IDPCommunicationError") == 0 ||
                          strcmp(doc.fields[F_CODE], "Throttling") == 0);
        if (!(s3f__fetch_retryable(st, rs.status) || (st == S3F_OK && idp_flaky)))
            break;
    }
    if (st) {
        st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS,
                            "AssumeRoleWithWebIdentity", url, "STS: %s", why);
        goto out;
    }
    if (rs.status != 200) {
        const char *code = doc.fields[F_CODE];
        const char *msg = doc.fields[F_MESSAGE];
        st = s3f__error_set(err,
                            code && strcmp(code, "ExpiredTokenException") == 0
                                ? S3F_ERR_EXPIRED_CREDENTIALS
                                : S3F_ERR_CREDENTIALS,
                            "AssumeRoleWithWebIdentity", url, "%s (role %s)",
                            msg && *msg ? msg : "STS returned an error", s->wi_role_arn);
        if (err) {
            err->http_status = (int)rs.status;
            s3f__strlcpy(err->code, code ? code : "", sizeof(err->code));
            s3f__strlcpy(err->request_id, doc.fields[F_REQUEST_ID] ? doc.fields[F_REQUEST_ID] : "",
                         sizeof(err->request_id));
        }
        goto out;
    }
    char bad[96] = "no complete Credentials element";
    if (sts_parse(&doc, rs.body.data, rs.body.len) != 0)
        st = doc.oom ? S3F_ERR_NO_MEMORY : S3F_ERR_BAD_RESPONSE;
    else
        st = s3f__sts_credentials(doc.fields, "web-identity", out, bad, sizeof(bad));
    if (st) {
        st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS,
                            "AssumeRoleWithWebIdentity", url, "STS response refused: %s",
                            st == S3F_ERR_NO_MEMORY ? "out of memory" : bad);
        if (err) {
            err->http_status = (int)rs.status;
            s3f__strlcpy(err->request_id, doc.fields[F_REQUEST_ID] ? doc.fields[F_REQUEST_ID] : "",
                         sizeof(err->request_id));
        }
    }
out:
    sts_doc_cleanup(&doc);
    s3f__fetch_response_cleanup(&rs);
    if (body.data)
        explicit_bzero(body.data, body.cap);
    s3f__buf_cleanup(&body);
    s3f__wipe_free(token);
    return st;
}

/* ---- S3 Express One Zone: CreateSession --------------------------------------------------- */

enum s3f_status s3f__credentials_fetch_session(const struct s3f__session_fetch *f,
                                               struct s3f__credentials *out,
                                               struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    struct s3f__chain_settings s;
    memset(&s, 0, sizeof(s));
    s.ca_bundle = (char *)f->ca_bundle;
    s.logger = f->logger;
    struct s3f__fetch_request rq = {
        .method = "GET",
        .url = f->url,
        .connect_timeout_ms = f->connect_timeout_ms ? f->connect_timeout_ms : 2000,
        .timeout_ms = f->timeout_ms ? f->timeout_ms : 5000,
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(rq.headers) - 1 && f->headers[i]; i++)
        rq.headers[i] = f->headers[i];
    struct s3f__fetch_response rs;
    s3f__fetch_response_init(&rs);
    struct sts_doc doc;
    memset(&doc, 0, sizeof(doc));
    char why[CURL_ERROR_SIZE + 64];
    enum s3f_status st = S3F_OK;
    /* A 5xx, a 429, a transport failure, or a 200 whose credentials are refused (empty or
     * control-character strings, an Expiration at the epoch: s3f__sts_credentials) is
     * tried again, three attempts in all; what the last one said is the error. */
    for (int a = 0; a < STS_ATTEMPTS; a++) {
        st = sts_attempt(a, &s, &rq, &rs, &doc, why, sizeof(why));
        if (st) {
            st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS,
                                "CreateSession", f->resource, "%s", why);
            if (!s3f__fetch_retryable(st, 0))
                break;
            continue;
        }
        int parsed = sts_parse(&doc, rs.body.data, rs.body.len);
        if (rs.status != 200) {
            const char *code = doc.fields[F_CODE];
            const char *msg = doc.fields[F_MESSAGE];
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, "CreateSession", f->resource,
                                "%s", msg && *msg ? msg : "S3 refused to create a session");
            if (err) {
                err->http_status = (int)rs.status;
                s3f__strlcpy(err->code, code ? code : "", sizeof(err->code));
                s3f__strlcpy(err->request_id,
                             doc.fields[F_REQUEST_ID] ? doc.fields[F_REQUEST_ID] : "",
                             sizeof(err->request_id));
                if (rs.status == 403)
                    err->status = st = S3F_ERR_ACCESS_DENIED;
                else if (rs.status == 404)
                    err->status = st = S3F_ERR_NO_SUCH_BUCKET;
            }
            if (!s3f__fetch_retryable(S3F_OK, rs.status))
                break;
            continue;
        }
        char bad[96] = "no complete Credentials element";
        st = parsed != 0 ? (doc.oom ? S3F_ERR_NO_MEMORY : S3F_ERR_BAD_RESPONSE)
                         : s3f__sts_credentials(doc.fields, f->source, out, bad, sizeof(bad));
        if (st == S3F_OK)
            break;
        if (st == S3F_ERR_NO_MEMORY) {
            st = s3f__error_set(err, st, OP, NULL, "out of memory");
            break;
        }
        st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, "CreateSession", f->resource,
                            "the CreateSession response is refused: %s", bad);
        s3f__log(f->logger, S3F_LOG_WARN, "CreateSession %s: the response is refused (%s)%s",
                 f->resource, bad, a + 1 < STS_ATTEMPTS ? ": asking again" : "");
    }
    sts_doc_cleanup(&doc);
    s3f__fetch_response_cleanup(&rs);
    return st;
}
