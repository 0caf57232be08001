/* AWS Signature Version 4 (header, presigned query).
 *
 * Canonical request (all lines joined with '\n'):
 *   method, canonical URI, canonical query, one "name:value" line per header (sorted by
 *   lowercase name), an empty line, the signed header names joined with ';', payload hash.
 * String to sign: "AWS4-HMAC-SHA256", X-Amz-Date, scope "date/region/service/aws4_request",
 * hex sha256 of the canonical request. Signing key: HMAC chain from "AWS4" + secret over the
 * date, region, service and "aws4_request"; it and its intermediates are wiped after use. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "auth/sigv4.h"

#define OP "SigV4 signing"
#define SIGV4_BUF_MAX ((size_t)1 << 20) /* cap of every string built while signing */
#define TIME_MAX_S INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* ---- small character helpers (ASCII, locale-independent) ------------------------------------ */

static bool is_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == '~';
}

static char ascii_lower(char c) {
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* RFC 7230 token character (header names, methods). */
static bool is_tchar(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool has_ctl_or_space(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s == 0x7f)
            return true;
    return false;
}

static bool is_lower_hex64(const char *s) {
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= 64 || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == 64;
}

/* Map a failed s3f__buf append to the signer's errors. */
static enum s3f_status buf_fail(enum s3f_status st, struct s3f_error *err) {
    if (st == S3F_ERR_NO_MEMORY)
        return s3f__error_set(err, st, OP, NULL, "out of memory");
    return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                          "request too large to sign (a part exceeds %zu bytes)", SIGV4_BUF_MAX);
}

static void wipe(void *p, size_t n) {
    OPENSSL_cleanse(p, n);
}

/* ---- validation ----------------------------------------------------------------------------- */

static enum s3f_status check_scope_name(const char *v, const char *field, struct s3f_error *err) {
    if (!v || !*v)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "%s is empty", field);
    if (strlen(v) > S3F__SIGV4_NAME_MAX)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "%s is longer than %d characters", field, S3F__SIGV4_NAME_MAX);
    if (has_ctl_or_space(v) || strchr(v, '/'))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "%s contains a space, '/' or a control character", field);
    return S3F_OK;
}

/* Credentials and configuration, shared by every entry point. Never prints a value of the
 * credentials. */
static enum s3f_status check_common(const struct s3f__sigv4_credentials *creds,
                                    const struct s3f__sigv4_config *cfg, struct s3f_error *err) {
    if (!creds)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "credentials are NULL");
    if (!cfg)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "config is NULL");
    if (!creds->access_key_id || !*creds->access_key_id)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "access_key_id is empty");
    if (has_ctl_or_space(creds->access_key_id) || strchr(creds->access_key_id, '/'))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "access_key_id contains a space, '/' or a control character");
    if (!creds->secret_access_key || !*creds->secret_access_key)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "secret_access_key is empty");
    if (creds->session_token && has_ctl_or_space(creds->session_token))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "session_token contains a space or a control character");
    enum s3f_status st = cfg->region_set ? check_scope_name(cfg->region_set, "region set", err)
                                         : check_scope_name(cfg->region, "region", err);
    if (st)
        return st;
    st = check_scope_name(cfg->service, "service", err);
    if (st)
        return st;
    if (cfg->time < 0 || cfg->time > TIME_MAX_S)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "time %" PRId64 " is out of range (years 1970..9999)", cfg->time);
    return S3F_OK;
}

static enum s3f_status check_request(const struct s3f__sigv4_request *req, struct s3f_error *err) {
    if (!req)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "request is NULL");
    if (!req->method || !*req->method)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "method is empty");
    for (const char *p = req->method; *p; p++)
        if (!is_tchar((unsigned char)*p))
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "method has an invalid character");
    if (req->n_headers && !req->headers)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "headers is NULL");
    const char *h = req->payload_hash;
    if (!h || !*h)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "payload_hash is empty");
    static const char *const named[] = {
        S3F__SIGV4_UNSIGNED_PAYLOAD, S3F__SIGV4_STREAMING_PAYLOAD,
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"};
    if (is_lower_hex64(h))
        return S3F_OK;
    for (size_t i = 0; i < S3F_ARRAY_LEN(named); i++)
        if (strcmp(h, named[i]) == 0)
            return S3F_OK;
    return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                          "payload_hash must be 64 lowercase hex digits, UNSIGNED-PAYLOAD or a "
                          "STREAMING-* value");
}

/* ---- signing key and scope ------------------------------------------------------------------ */

/* HMAC chain "AWS4"+secret -> date -> region -> service -> "aws4_request". The temporary
 * copy of the secret and the intermediate keys are wiped. */
static enum s3f_status derive_key(const char *secret, const char *date8, const char *region,
                                  const char *service, uint8_t key[32], struct s3f_error *err) {
    size_t n = strlen(secret);
    char *k = malloc(n + 4);
    if (!k)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    memcpy(k, "AWS4", 4);
    memcpy(k + 4, secret, n);
    uint8_t a[32], b[32];
    int rc = s3f__hmac_sha256(k, n + 4, date8, 8, a);
    wipe(k, n + 4);
    free(k);
    rc = rc ? rc : s3f__hmac_sha256(a, sizeof(a), region, strlen(region), b);
    rc = rc ? rc : s3f__hmac_sha256(b, sizeof(b), service, strlen(service), a);
    rc = rc ? rc : s3f__hmac_sha256(a, sizeof(a), "aws4_request", 12, key);
    wipe(a, sizeof(a));
    wipe(b, sizeof(b));
    if (rc) {
        wipe(key, 32);
        return s3f__error_set(err, s3f__crypto_status(), OP, NULL,
                              "HMAC-SHA256 failed (OpenSSL)");
    }
    return S3F_OK;
}

enum s3f_status s3f__sigv4_derive_key(const char *secret, const char *date8, const char *region,
                                      const char *service, uint8_t key[32],
                                      struct s3f_error *err) {
    if (!secret || !*secret || !date8 || strlen(date8) < 8 || !region || !service)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "signing key: missing secret, date, region or service");
    enum s3f_status st = check_scope_name(region, "region", err);
    if (st || (st = check_scope_name(service, "service", err)))
        return st;
    return derive_key(secret, date8, region, service, key, err);
}

/* X-Amz-Date and the credential scope of cfg (already checked). */
static void make_scope(const struct s3f__sigv4_config *cfg, char amz_date[17],
                       char scope[S3F__SIGV4_SCOPE_MAX]) {
    s3f__time_amz(cfg->time, amz_date);
    if (cfg->region_set) /* SigV4a: no region in the scope */
        snprintf(scope, S3F__SIGV4_SCOPE_MAX, "%.8s/%s/aws4_request", amz_date, cfg->service);
    else
        snprintf(scope, S3F__SIGV4_SCOPE_MAX, "%.8s/%s/%s/aws4_request", amz_date, cfg->region,
                 cfg->service);
}

static const char *algorithm_of(const struct s3f__sigv4_config *cfg) {
    return cfg->region_set ? S3F__SIGV4A_ALGORITHM : S3F__SIGV4_ALGORITHM;
}

/* ---- canonical URI -------------------------------------------------------------------------- */

/* RFC 3986 dot-segment removal as botocore and aws-c-auth do it for non-S3 services: empty
 * and "." segments dropped, ".." pops; the leading '/' kept, a trailing '/' kept when
 * something is left; "/" if nothing is. Writes the result into the empty buffer out. */
static enum s3f_status remove_dot_segments(const char *path, struct s3f__buf *out) {
    size_t len = strlen(path), nseg = 1;
    for (size_t i = 0; i < len; i++)
        nseg += path[i] == '/';
    size_t *seg = malloc(nseg * 2 * sizeof(*seg)); /* (start, length) pairs */
    if (!seg)
        return S3F_ERR_NO_MEMORY;
    size_t top = 0;
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        size_t n = j - i;
        if (n == 2 && path[i] == '.' && path[i + 1] == '.') {
            if (top)
                top--;
        } else if (n && !(n == 1 && path[i] == '.')) {
            seg[2 * top] = i;
            seg[2 * top + 1] = n;
            top++;
        }
        i = j + 1;
    }
    enum s3f_status st = S3F_OK;
    if (path[0] == '/')
        st = s3f__buf_append(out, "/", 1);
    for (size_t k = 0; k < top && !st; k++) {
        if (k)
            st = s3f__buf_append(out, "/", 1);
        if (!st)
            st = s3f__buf_append(out, path + seg[2 * k], seg[2 * k + 1]);
    }
    if (!st && top && path[len - 1] == '/')
        st = s3f__buf_append(out, "/", 1);
    if (!st && out->len == 0) /* nothing left: an empty path is "/" */
        st = s3f__buf_append(out, "/", 1);
    free(seg);
    return st;
}

static enum s3f_status canonical_path(const char *path, bool normalize, struct s3f__buf *out,
                                      struct s3f_error *err) {
    enum s3f_status st;
    if (!path || !*path) {
        st = s3f__buf_append(out, "/", 1);
        return st ? buf_fail(st, err) : S3F_OK;
    }
    if (!normalize) {
        /* S3: used as is, so it must already be in the AWS encoding. */
        if (path[0] != '/')
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "path must start with '/'");
        for (size_t i = 0; path[i]; i++) {
            unsigned char c = (unsigned char)path[i];
            if (c == '%' && s3f__hex_digit((unsigned char)path[i + 1]) >= 0 &&
                s3f__hex_digit((unsigned char)path[i + 2]) >= 0) {
                i += 2;
                continue;
            }
            if (!is_unreserved(c) && c != '/')
                return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                      "path is not percent-encoded (byte 0x%02x at offset %zu)",
                                      c, i);
        }
        st = s3f__buf_appends(out, path);
        return st ? buf_fail(st, err) : S3F_OK;
    }
    struct s3f__buf norm;
    s3f__buf_init(&norm, SIGV4_BUF_MAX);
    st = remove_dot_segments(path, &norm);
    if (!st)
        st = s3f__uri_encode(out, norm.data, norm.len, true);
    s3f__buf_cleanup(&norm);
    return st ? buf_fail(st, err) : S3F_OK;
}

/* ---- canonical query ------------------------------------------------------------------------ */

struct qparam {
    size_t name_off, value_off;
    const char *name, *value;
};

static int qparam_cmp(const void *a, const void *b) {
    const struct qparam *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

/* Percent-decode s[0..len) and append it re-encoded with the AWS rules (every byte but the
 * unreserved ones as %XX, '/' included), NUL-terminated. */
static enum s3f_status append_reencoded(struct s3f__buf *arena, const char *s, size_t len,
                                        struct s3f_error *err) {
    static const char hexu[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int h = i + 1 < len ? s3f__hex_digit((unsigned char)s[i + 1]) : -1;
            int l = i + 2 < len ? s3f__hex_digit((unsigned char)s[i + 2]) : -1;
            if (h < 0 || l < 0)
                return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                      "query has an invalid percent-encoding");
            c = (unsigned char)(h << 4 | l);
            i += 2;
        }
        enum s3f_status st;
        if (is_unreserved(c)) {
            char ch = (char)c;
            st = s3f__buf_append(arena, &ch, 1);
        } else {
            char e[3] = {'%', hexu[c >> 4], hexu[c & 15]};
            st = s3f__buf_append(arena, e, 3);
        }
        if (st)
            return buf_fail(st, err);
    }
    enum s3f_status st = s3f__buf_append(arena, "", 1);
    return st ? buf_fail(st, err) : S3F_OK;
}

static bool is_signing_param(const char *name) {
    static const char *const names[] = {"X-Amz-Algorithm",     "X-Amz-Credential",
                                        "X-Amz-Date",          "X-Amz-Expires",
                                        "X-Amz-SignedHeaders", "X-Amz-Security-Token",
                                        "X-Amz-Signature",     "X-Amz-Region-Set"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(names); i++)
        if (s3f__strieq(name, names[i]))
            return true;
    return false;
}

/* Canonical query of the wire query `query` plus `extra` (raw, unencoded name/value pairs),
 * appended to out. presign: reject a query that already has signing parameters. */
static enum s3f_status canonical_query(const char *query, const struct s3f__header *extra,
                                       size_t n_extra, bool presign, struct s3f__buf *out,
                                       struct s3f_error *err) {
    enum s3f_status st = S3F_OK;
    struct s3f__buf arena;
    s3f__buf_init(&arena, SIGV4_BUF_MAX);
    size_t cap = n_extra + 1, n = 0;
    for (const char *p = query; p && *p; p++)
        cap += *p == '&';
    struct qparam *params = calloc(cap, sizeof(*params));
    if (!params) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    for (const char *p = query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len) {
            const char *eq = memchr(p, '=', len);
            size_t nlen = eq ? (size_t)(eq - p) : len;
            params[n].name_off = arena.len;
            if ((st = append_reencoded(&arena, p, nlen, err)))
                goto out;
            params[n].value_off = arena.len;
            if ((st = append_reencoded(&arena, eq ? eq + 1 : p + len,
                                       eq ? len - nlen - 1 : 0, err)))
                goto out;
            if (presign && is_signing_param(arena.data + params[n].name_off)) {
                st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                    "query already has %s (presign adds it)",
                                    arena.data + params[n].name_off);
                goto out;
            }
            n++;
        }
        p += len + (amp ? 1 : 0);
    }
    for (size_t i = 0; i < n_extra; i++, n++) {
        params[n].name_off = arena.len;
        if ((st = s3f__uri_encode(&arena, extra[i].name, strlen(extra[i].name), false)) ||
            (st = s3f__buf_append(&arena, "", 1))) {
            st = buf_fail(st, err);
            goto out;
        }
        params[n].value_off = arena.len;
        if ((st = s3f__uri_encode(&arena, extra[i].value, strlen(extra[i].value), false)) ||
            (st = s3f__buf_append(&arena, "", 1))) {
            st = buf_fail(st, err);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        params[i].name = arena.data + params[i].name_off;
        params[i].value = arena.data + params[i].value_off;
    }
    if (n > 1)
        qsort(params, n, sizeof(*params), qparam_cmp);
    for (size_t i = 0; i < n && !st; i++)
        st = s3f__buf_appendf(out, "%s%s=%s", i ? "&" : "", params[i].name, params[i].value);
    if (st)
        st = buf_fail(st, err);
out:
    free(params);
    s3f__buf_cleanup(&arena);
    return st;
}

/* ---- canonical headers ---------------------------------------------------------------------- */

struct hent {
    size_t name_off, value_off, idx;
    const char *name, *value;
};

static int hent_cmp(const void *a, const void *b) {
    const struct hent *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

/* Lowercased name and normalized value (trimmed, runs of SP/HT collapsed to one space), each
 * NUL-terminated, appended to the arena. */
static enum s3f_status add_header(struct s3f__buf *arena, struct hent *e,
                                  const struct s3f__header *h, size_t idx,
                                  struct s3f_error *err) {
    if (!h->name || !*h->name)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "header %zu has an empty name", idx);
    for (const char *p = h->name; *p; p++)
        if (!is_tchar((unsigned char)*p))
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "header %zu has an invalid name", idx);
    if (!h->value)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "header %s has a NULL value", h->name);
    enum s3f_status st = S3F_OK;
    e->idx = idx;
    e->name_off = arena->len;
    for (const char *p = h->name; *p && !st; p++) {
        char c = ascii_lower(*p);
        st = s3f__buf_append(arena, &c, 1);
    }
    if (!st)
        st = s3f__buf_append(arena, "", 1);
    e->value_off = arena->len;
    const char *v = h->value;
    bool pending_space = false, any = false;
    for (; *v && !st; v++) {
        unsigned char c = (unsigned char)*v;
        if (c == ' ' || c == '\t') {
            pending_space = any;
            continue;
        }
        if (c < ' ' || c == 0x7f)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "header %s has a control character in its value", h->name);
        if (pending_space)
            st = s3f__buf_append(arena, " ", 1);
        if (!st)
            st = s3f__buf_append(arena, v, 1);
        pending_space = false;
        any = true;
    }
    if (!st)
        st = s3f__buf_append(arena, "", 1);
    return st ? buf_fail(st, err) : S3F_OK;
}

/* Canonical header lines into canon ("name:v1,v2\n" each) and the signed header list into
 * signed_list. The caller's headers must not use a name in `reserved` (NULL-terminated) and
 * must include host; `extra` are the signer's own headers. */
static enum s3f_status canonical_headers(const struct s3f__header *hdrs, size_t n_hdrs,
                                         const struct s3f__header *extra, size_t n_extra,
                                         const char *const *reserved, struct s3f__buf *canon,
                                         struct s3f__buf *signed_list, struct s3f_error *err) {
    enum s3f_status st = S3F_OK;
    struct s3f__buf arena;
    s3f__buf_init(&arena, SIGV4_BUF_MAX);
    size_t n = n_hdrs + n_extra;
    struct hent *ents = calloc(n ? n : 1, sizeof(*ents));
    if (!ents) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    bool host = false;
    for (size_t i = 0; i < n; i++) {
        const struct s3f__header *h = i < n_hdrs ? &hdrs[i] : &extra[i - n_hdrs];
        if ((st = add_header(&arena, &ents[i], h, i, err)))
            goto out;
        const char *lname = arena.data + ents[i].name_off;
        if (i < n_hdrs) {
            for (size_t r = 0; reserved[r]; r++)
                if (strcmp(lname, reserved[r]) == 0) {
                    st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                        "header %s is added by the signer", reserved[r]);
                    goto out;
                }
            host = host || strcmp(lname, "host") == 0;
        }
    }
    if (!host) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                            "headers must include host");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        ents[i].name = arena.data + ents[i].name_off;
        ents[i].value = arena.data + ents[i].value_off;
    }
    qsort(ents, n, sizeof(*ents), hent_cmp);
    for (size_t i = 0; i < n && !st; i++) {
        bool first = i == 0 || strcmp(ents[i].name, ents[i - 1].name) != 0;
        bool last = i + 1 == n || strcmp(ents[i].name, ents[i + 1].name) != 0;
        if (first) {
            st = s3f__buf_appendf(canon, "%s:", ents[i].name);
            if (!st)
                st = s3f__buf_appendf(signed_list, "%s%s", i ? ";" : "", ents[i].name);
        }
        if (!st)
            st = s3f__buf_appendf(canon, "%s%s%s", first ? "" : ",", ents[i].value,
                                  last ? "\n" : "");
    }
    if (st)
        st = buf_fail(st, err);
out:
    free(ents);
    s3f__buf_cleanup(&arena);
    return st;
}

/* ---- shared core ---------------------------------------------------------------------------- */

struct parts {
    struct s3f__buf headers, signed_list, creq, sts;
};

static void parts_init(struct parts *p) {
    s3f__buf_init(&p->headers, SIGV4_BUF_MAX);
    s3f__buf_init(&p->signed_list, SIGV4_BUF_MAX);
    s3f__buf_init(&p->creq, SIGV4_BUF_MAX);
    s3f__buf_init(&p->sts, SIGV4_BUF_MAX);
}

static void parts_cleanup(struct parts *p) {
    s3f__buf_cleanup(&p->headers);
    s3f__buf_cleanup(&p->signed_list);
    s3f__buf_cleanup(&p->creq);
    s3f__buf_cleanup(&p->sts);
}

/* With p->headers and p->signed_list built: the canonical request (method, path, query of
 * the request plus extra_query, headers, signed list, payload hash) into p->creq, the string
 * to sign into p->sts, and the hex signature into sig. */
static enum s3f_status finish(const struct s3f__sigv4_request *req,
                              const struct s3f__sigv4_credentials *creds,
                              const struct s3f__sigv4_config *cfg, const char *amz_date,
                              const char *scope, const struct s3f__header *extra_query,
                              size_t n_extra_query, bool presign, struct parts *p,
                              char sig[S3F__SIGV4A_SIGNATURE_HEX_MAX], struct s3f_error *err) {
    enum s3f_status st = S3F_OK;
    if ((st = s3f__buf_appendf(&p->creq, "%s\n", req->method)))
        return buf_fail(st, err);
    if ((st = canonical_path(req->path, cfg->normalize_path, &p->creq, err)))
        return st;
    if ((st = s3f__buf_append(&p->creq, "\n", 1)))
        return buf_fail(st, err);
    if ((st = canonical_query(req->query, extra_query, n_extra_query, presign, &p->creq, err)))
        return st;
    st = s3f__buf_appendf(&p->creq, "\n%s\n%s\n%s", p->headers.data, p->signed_list.data,
                          req->payload_hash);
    if (st)
        return buf_fail(st, err);

    char creq_hash[65];
    if (s3f__sha256_hex(p->creq.data, p->creq.len, creq_hash))
        return s3f__error_set(err, s3f__crypto_status(), OP, NULL, "SHA-256 failed (OpenSSL)");
    st = s3f__buf_appendf(&p->sts, "%s\n%s\n%s\n%s", algorithm_of(cfg), amz_date, scope,
                          creq_hash);
    if (st)
        return buf_fail(st, err);
    if (cfg->region_set) { /* SigV4a: ECDSA with the key of the credentials */
        uint8_t priv[32];
        if (cfg->signing_key)
            memcpy(priv, cfg->signing_key, sizeof(priv));
        else if ((st = s3f__sigv4a_derive_key(creds->access_key_id, creds->secret_access_key,
                                              priv, err)))
            return st;
        st = s3f__sigv4a_sign(priv, p->sts.data, p->sts.len, sig, err);
        wipe(priv, sizeof(priv));
        return st;
    }

    uint8_t key[32], mac[32];
    if (cfg->signing_key)
        memcpy(key, cfg->signing_key, sizeof(key));
    else if ((st = derive_key(creds->secret_access_key, amz_date, cfg->region, cfg->service,
                              key, err)))
        return st;
    int rc = s3f__hmac_sha256(key, sizeof(key), p->sts.data, p->sts.len, mac);
    wipe(key, sizeof(key));
    if (rc)
        return s3f__error_set(err, s3f__crypto_status(), OP, NULL,
                              "HMAC-SHA256 failed (OpenSSL)");
    s3f__hex(mac, sizeof(mac), sig);
    return S3F_OK;
}

static const char *token_of(const struct s3f__sigv4_credentials *creds) {
    return creds->session_token && *creds->session_token ? creds->session_token : NULL;
}

/* ---- header signing ------------------------------------------------------------------------- */

enum s3f_status s3f__sigv4_sign_headers(const struct s3f__sigv4_request *req,
                                        const struct s3f__sigv4_credentials *creds,
                                        const struct s3f__sigv4_config *cfg,
                                        struct s3f__sigv4_signed *out, struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "output is NULL");
    memset(out, 0, sizeof(*out));
    enum s3f_status st;
    if ((st = check_common(creds, cfg, err)) || (st = check_request(req, err)))
        return st;

    char amz_date[17], scope[S3F__SIGV4_SCOPE_MAX];
    make_scope(cfg, amz_date, scope);
    const char *token = token_of(creds);
    bool sign_token = token && !cfg->omit_session_token;

    struct s3f__header extra[4];
    size_t n_extra = 0;
    const char *reserved[6];
    size_t n_reserved = 0;
    reserved[n_reserved++] = "authorization";
    reserved[n_reserved++] = "x-amz-date";
    extra[n_extra++] = (struct s3f__header){"x-amz-date", amz_date};
    if (token)
        reserved[n_reserved++] = "x-amz-security-token";
    if (sign_token)
        extra[n_extra++] = (struct s3f__header){"x-amz-security-token", token};
    if (cfg->region_set) {
        reserved[n_reserved++] = "x-amz-region-set";
        extra[n_extra++] = (struct s3f__header){"x-amz-region-set", cfg->region_set};
    }
    if (cfg->add_content_sha256_header) {
        reserved[n_reserved++] = "x-amz-content-sha256";
        extra[n_extra++] = (struct s3f__header){"x-amz-content-sha256", req->payload_hash};
    }
    reserved[n_reserved] = NULL;

    struct parts p;
    parts_init(&p);
    struct s3f__buf authz;
    s3f__buf_init(&authz, SIGV4_BUF_MAX);
    if ((st = canonical_headers(req->headers, req->n_headers, extra, n_extra, reserved,
                                &p.headers, &p.signed_list, err)))
        goto out;
    if ((st = finish(req, creds, cfg, amz_date, scope, NULL, 0, false, &p, out->signature,
                     err)))
        goto out;
    st = s3f__buf_appendf(&authz, "%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                          algorithm_of(cfg), creds->access_key_id, scope, p.signed_list.data,
                          out->signature);
    if (st) {
        st = buf_fail(st, err);
        goto out;
    }
    out->authorization = s3f__buf_take(&authz);
    out->canonical_request = s3f__buf_take(&p.creq);
    out->string_to_sign = s3f__buf_take(&p.sts);
    if (!out->authorization || !out->canonical_request || !out->string_to_sign) {
        s3f__sigv4_signed_cleanup(out);
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    memcpy(out->amz_date, amz_date, sizeof(out->amz_date));
    out->security_token = token;
    out->region_set = cfg->region_set;
    out->content_sha256 = cfg->add_content_sha256_header ? req->payload_hash : NULL;
out:
    if (st)
        memset(out, 0, sizeof(*out));
    s3f__buf_cleanup(&authz);
    parts_cleanup(&p);
    return st;
}

void s3f__sigv4_signed_cleanup(struct s3f__sigv4_signed *s) {
    if (!s)
        return;
    free(s->authorization);
    free(s->canonical_request);
    free(s->string_to_sign);
    memset(s, 0, sizeof(*s));
}

size_t s3f__sigv4_signed_headers(const struct s3f__sigv4_signed *s, struct s3f__header out[5]) {
    size_t n = 0;
    if (s->security_token)
        out[n++] = (struct s3f__header){"X-Amz-Security-Token", s->security_token};
    out[n++] = (struct s3f__header){"X-Amz-Date", s->amz_date};
    if (s->region_set)
        out[n++] = (struct s3f__header){"X-Amz-Region-Set", s->region_set};
    if (s->content_sha256)
        out[n++] = (struct s3f__header){"x-amz-content-sha256", s->content_sha256};
    out[n++] = (struct s3f__header){"Authorization", s->authorization};
    return n;
}

/* ---- presign -------------------------------------------------------------------------------- */

enum s3f_status s3f__sigv4_presign(const struct s3f__sigv4_request *req,
                                   const struct s3f__sigv4_credentials *creds,
                                   const struct s3f__sigv4_config *cfg, char **query_out,
                                   char **canonical_request_out, char **string_to_sign_out,
                                   struct s3f_error *err) {
    if (!query_out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "output is NULL");
    *query_out = NULL;
    if (canonical_request_out)
        *canonical_request_out = NULL;
    if (string_to_sign_out)
        *string_to_sign_out = NULL;
    enum s3f_status st;
    if ((st = check_common(creds, cfg, err)) || (st = check_request(req, err)))
        return st;
    if (cfg->expires_s < 1 || cfg->expires_s > S3F__SIGV4_MAX_EXPIRES_S)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "expires_s %" PRIu32 " is out of range (1..%u seconds)",
                              cfg->expires_s, S3F__SIGV4_MAX_EXPIRES_S);

    char amz_date[17], scope[S3F__SIGV4_SCOPE_MAX], expires[16];
    char sig[S3F__SIGV4A_SIGNATURE_HEX_MAX];
    make_scope(cfg, amz_date, scope);
    snprintf(expires, sizeof(expires), "%" PRIu32, cfg->expires_s);
    const char *token = token_of(creds);
    static const char *const reserved[] = {"authorization", "x-amz-date", NULL};

    struct parts p;
    parts_init(&p);
    struct s3f__buf credential, q;
    s3f__buf_init(&credential, SIGV4_BUF_MAX);
    s3f__buf_init(&q, SIGV4_BUF_MAX);
    if ((st = canonical_headers(req->headers, req->n_headers, NULL, 0, reserved, &p.headers,
                                &p.signed_list, err)))
        goto out;
    if ((st = s3f__buf_appendf(&credential, "%s/%s", creds->access_key_id, scope))) {
        st = buf_fail(st, err);
        goto out;
    }
    /* on the wire in this order; signed: all but an omitted session token */
    struct s3f__header params[7] = {
        {"X-Amz-Algorithm", algorithm_of(cfg)}, {"X-Amz-Credential", credential.data},
        {"X-Amz-Date", amz_date},               {"X-Amz-SignedHeaders", p.signed_list.data},
        {"X-Amz-Expires", expires},
    };
    struct s3f__header signed_params[7];
    size_t n_params = 5, n_signed = 0;
    if (token)
        params[n_params++] = (struct s3f__header){"X-Amz-Security-Token", token};
    if (cfg->region_set)
        params[n_params++] = (struct s3f__header){"X-Amz-Region-Set", cfg->region_set};
    for (size_t i = 0; i < n_params; i++)
        if (!(cfg->omit_session_token && strcmp(params[i].name, "X-Amz-Security-Token") == 0))
            signed_params[n_signed++] = params[i];
    if ((st = finish(req, creds, cfg, amz_date, scope, signed_params, n_signed, true, &p, sig,
                     err)))
        goto out;

    /* The query on the wire: the request's own, then the signing parameters. */
    if (req->query && *req->query)
        st = s3f__buf_appendf(&q, "%s&", req->query);
    for (size_t i = 0; i < n_params && !st; i++) {
        st = s3f__buf_appendf(&q, "%s=", params[i].name);
        if (!st)
            st = s3f__uri_encode(&q, params[i].value, strlen(params[i].value), false);
        if (!st)
            st = s3f__buf_append(&q, "&", 1);
    }
    if (!st)
        st = s3f__buf_appendf(&q, "X-Amz-Signature=%s", sig);
    if (st) {
        st = buf_fail(st, err);
        goto out;
    }
    char *query = s3f__buf_take(&q);
    char *creq = canonical_request_out ? s3f__buf_take(&p.creq) : NULL;
    char *sts = string_to_sign_out ? s3f__buf_take(&p.sts) : NULL;
    if (!query || (canonical_request_out && !creq) || (string_to_sign_out && !sts)) {
        free(query);
        free(creq);
        free(sts);
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    *query_out = query;
    if (canonical_request_out)
        *canonical_request_out = creq;
    if (string_to_sign_out)
        *string_to_sign_out = sts;
out:
    s3f__buf_cleanup(&credential);
    s3f__buf_cleanup(&q);
    parts_cleanup(&p);
    return st;
}
