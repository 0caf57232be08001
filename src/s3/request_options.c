/* The request options of a client: server-side encryption, storage class, canned ACL,
 * expected bucket owner, User-Agent suffix (the headers each operation carries), and the
 * HTTP(S) proxy of its requests. docs/CONFIGURATION.md has the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/assert.h"
#include "s3/request_options.h"

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* strdup of an option, NULL staying NULL; false when out of memory */
static bool dup_opt(char **out, const char *v) {
    *out = NULL;
    if (!v || !*v)
        return true;
    return (*out = strdup(v)) != NULL;
}

/* Printable ASCII without CR/LF: a header value that cannot split the request. */
static bool header_safe(const char *v, size_t max) {
    size_t n = 0;
    for (; v[n]; n++)
        if ((unsigned char)v[n] < 0x20 || (unsigned char)v[n] > 0x7e || n >= max)
            return false;
    return true;
}

/* An SSE-C key: base64 of 32 bytes. Its base64 (normalised) and the base64 of its MD5 into
 * key_b64 / md5_b64. The error never quotes the key. */
static enum s3f_status customer_key(const char *what, const char *v, char key_b64[48],
                                    char md5_b64[32], struct s3f_error *err) {
    uint8_t raw[48], md5[16];
    long n = s3f__base64_decode(v, strlen(v), raw, sizeof(raw));
    enum s3f_status st = S3F_OK;
    if (n != 32) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", what,
                            "an SSE-C key must be 32 bytes (AES-256) in base64 (44 "
                            "characters); the one given is not (%s)",
                            n < 0 ? "not base64" : "wrong length");
        goto out;
    }
    if (s3f__md5(raw, 32, md5)) {
        st = s3f__error_set(err, s3f__crypto_status(), "configuration", what,
                            "MD5 of the SSE-C key failed (OpenSSL; S3 requires "
                            "x-amz-server-side-encryption-customer-key-MD5)");
        goto out;
    }
    s3f__base64(raw, 32, key_b64);
    s3f__base64(md5, 16, md5_b64);
out:
    explicit_bzero(raw, sizeof(raw));
    return st;
}

enum s3f_status s3f__request_options_init(struct s3f__request_options *o,
                                          const struct s3f_client_options *opts,
                                          struct s3f_error *err) {
    memset(o, 0, sizeof(*o));
    enum s3f_status st = S3F_OK;
    const char *sse = opts->sse && *opts->sse ? opts->sse : NULL;
    if (sse && strcmp(sse, "AES256") != 0 && strcmp(sse, "aws:kms") != 0 &&
        strcmp(sse, "aws:kms:dsse") != 0) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse", "server-side encryption must be AES256, aws:kms or aws:kms:dsse, "
                             "not '%s'", sse);
        goto fail;
    }
    bool kms = sse && strncmp(sse, "aws:kms", 7) == 0;
    if (!kms && opts->sse_kms_key_id && *opts->sse_kms_key_id) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse_kms_key_id", "a KMS key id needs sse aws:kms or aws:kms:dsse");
        goto fail;
    }
    if (!kms && opts->sse_kms_encryption_context && *opts->sse_kms_encryption_context) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse_kms_encryption_context",
                 "an encryption context needs sse aws:kms or aws:kms:dsse");
        goto fail;
    }
    if (!dup_opt(&o->sse, sse) || !dup_opt(&o->sse_kms_key_id, opts->sse_kms_key_id))
        goto oom;
    if (o->sse_kms_key_id && !header_safe(o->sse_kms_key_id, 2048)) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse_kms_key_id", "the KMS key id '%s' has characters a header cannot "
                                        "carry", o->sse_kms_key_id);
        goto fail;
    }
    const char *ctx = opts->sse_kms_encryption_context;
    if (ctx && *ctx) {
        size_t n = strlen(ctx);
        if (ctx[0] != '{' || ctx[n - 1] != '}' || n > 2048) {
            st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse_kms_encryption_context",
                     "the encryption context must be a JSON object of at most 2048 bytes, "
                     "like {\"project\":\"x\"}, not '%.100s'", ctx);
            goto fail;
        }
        if (!(o->sse_context_b64 = malloc(4 * ((n + 2) / 3) + 1)))
            goto oom;
        s3f__base64((const uint8_t *)ctx, n, o->sse_context_b64);
    }
    o->bucket_key = opts->sse_bucket_key_enabled > 0 ? 1 : opts->sse_bucket_key_enabled < 0 ? -1 : 0;

    const char *key = opts->sse_customer_key;
    if (key && *key) {
        if (sse) {
            st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "sse_customer_key", "SSE-C (a customer key) and sse %s exclude each "
                                              "other", sse);
            goto fail;
        }
        if ((st = customer_key("sse_customer_key", key, o->sse_c_key, o->sse_c_md5, err)))
            goto fail;
        o->sse_c = true;
    }
    const char *src = opts->sse_copy_source_customer_key;
    if (src && *src) {
        if ((st = customer_key("sse_copy_source_customer_key", src, o->copy_source_key,
                               o->copy_source_md5, err)))
            goto fail;
        o->copy_source_sse_c = true;
    } else if (!src && o->sse_c) { /* one key for everything */
        memcpy(o->copy_source_key, o->sse_c_key, sizeof(o->copy_source_key));
        memcpy(o->copy_source_md5, o->sse_c_md5, sizeof(o->copy_source_md5));
        o->copy_source_sse_c = true;
    }

    static const struct {
        const char *what;
        size_t off;
    } plain[] = {
        {"storage_class", offsetof(struct s3f_client_options, storage_class)},
        {"expected_bucket_owner", offsetof(struct s3f_client_options, expected_bucket_owner)},
        {"acl", offsetof(struct s3f_client_options, acl)},
    };
    char **dst[] = {&o->storage_class, &o->expected_bucket_owner, &o->acl};
    for (size_t i = 0; i < S3F_ARRAY_LEN(plain); i++) {
        const char *v = *(const char *const *)((const char *)opts + plain[i].off);
        if (v && *v && !header_safe(v, 256)) {
            st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", plain[i].what, "'%.100s' has characters a header cannot carry", v);
            goto fail;
        }
        if (!dup_opt(dst[i], v))
            goto oom;
    }

    const char *extra = opts->user_agent_extra;
    if (extra && *extra && !header_safe(extra, 256)) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "configuration", "user_agent_extra", "the User-Agent suffix must be printable ASCII of at "
                                          "most 256 bytes, not '%.100s'", extra);
        goto fail;
    }
    size_t ua_len = sizeof("s3flash/" S3FLASH_VERSION) + (extra ? strlen(extra) + 1 : 0);
    if (!(o->user_agent = malloc(ua_len)))
        goto oom;
    snprintf(o->user_agent, ua_len, "s3flash/%s%s%s", S3FLASH_VERSION,
             extra && *extra ? " " : "", extra && *extra ? extra : "");
    return S3F_OK;

oom:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
fail:
    s3f__request_options_cleanup(o);
    return st;
}

void s3f__request_options_cleanup(struct s3f__request_options *o) {
    free(o->sse);
    free(o->sse_kms_key_id);
    free(o->sse_context_b64);
    free(o->storage_class);
    free(o->expected_bucket_owner);
    free(o->acl);
    free(o->user_agent);
    explicit_bzero(o, sizeof(*o));
}

/* ---- the headers of each operation ------------------------------------------------------ */

enum {
    WRITES = 1,      /* creates an object: encryption, storage class, ACL */
    CUSTOMER = 2,    /* reads or writes an object's bytes: the SSE-C key */
    COPY_SOURCE = 4, /* reads a copy source: its SSE-C key */
    NO_OWNER = 8,    /* S3 takes no x-amz-expected-bucket-owner */
    READS = 16,      /* reads an existing object (an SSE-C object needs its key) */
    COPY_SOURCE_AS_OWN = 32, /* a HEAD of a copy's source: its key in the plain headers */
};

static const struct {
    const char *operation;
    int what;
} kinds[] = {
    {"PutObject", WRITES | CUSTOMER},
    {"CreateMultipartUpload", WRITES | CUSTOMER},
    {"UploadPart", CUSTOMER},
    /* S3 needs the key again when the upload has a checksum (s3flash's always do) */
    {"CompleteMultipartUpload", CUSTOMER},
    {"CopyObject", WRITES | CUSTOMER | COPY_SOURCE | READS},
    {"UploadPartCopy", CUSTOMER | COPY_SOURCE | READS},
    {"GetObject", CUSTOMER | READS},
    {"HeadObject", CUSTOMER | READS},
    {"CreateBucket", NO_OWNER},
    {"CreateSession", NO_OWNER},
};

static int kind_of(const char *operation) {
    for (size_t i = 0; i < S3F_ARRAY_LEN(kinds); i++)
        if (strcmp(kinds[i].operation, operation) == 0)
            return kinds[i].what;
    return 0;
}

/* The three SSE-C headers of a key (an object's own, or a copy source's) at hdrs[n]. */
static size_t customer_key_headers(struct s3f__header *hdrs, size_t n, bool copy_source,
                                   const char *key, const char *md5) {
    static const char *const names[2][3] = {
        {"x-amz-server-side-encryption-customer-algorithm",
         "x-amz-server-side-encryption-customer-key",
         "x-amz-server-side-encryption-customer-key-md5"},
        {"x-amz-copy-source-server-side-encryption-customer-algorithm",
         "x-amz-copy-source-server-side-encryption-customer-key",
         "x-amz-copy-source-server-side-encryption-customer-key-md5"},
    };
    hdrs[n++] = (struct s3f__header){names[copy_source][0], "AES256"};
    hdrs[n++] = (struct s3f__header){names[copy_source][1], key};
    hdrs[n++] = (struct s3f__header){names[copy_source][2], md5};
    return n;
}

size_t s3f__request_options_headers(const struct s3f__request_options *o, const char *operation,
                                    const char *bucket, bool copy_source,
                                    struct s3f__header *hdrs) {
    size_t n = 0;
    int what = kind_of(operation);
    if (copy_source) /* a HEAD of the source: the source's key as its own */
        what = (what & ~CUSTOMER) | COPY_SOURCE_AS_OWN;
    if (o->expected_bucket_owner && bucket && *bucket && !(what & NO_OWNER))
        hdrs[n++] = (struct s3f__header){"x-amz-expected-bucket-owner", o->expected_bucket_owner};
    if (what & WRITES) {
        if (o->sse)
            hdrs[n++] = (struct s3f__header){"x-amz-server-side-encryption", o->sse};
        if (o->sse_kms_key_id)
            hdrs[n++] = (struct s3f__header){"x-amz-server-side-encryption-aws-kms-key-id",
                                             o->sse_kms_key_id};
        if (o->sse_context_b64)
            hdrs[n++] = (struct s3f__header){"x-amz-server-side-encryption-context",
                                             o->sse_context_b64};
        if (o->bucket_key)
            hdrs[n++] = (struct s3f__header){"x-amz-server-side-encryption-bucket-key-enabled",
                                             o->bucket_key > 0 ? "true" : "false"};
        if (o->storage_class)
            hdrs[n++] = (struct s3f__header){"x-amz-storage-class", o->storage_class};
        if (o->acl)
            hdrs[n++] = (struct s3f__header){"x-amz-acl", o->acl};
    }
    if ((what & CUSTOMER) && o->sse_c)
        n = customer_key_headers(hdrs, n, false, o->sse_c_key, o->sse_c_md5);
    if ((what & COPY_SOURCE_AS_OWN) && o->copy_source_sse_c)
        n = customer_key_headers(hdrs, n, false, o->copy_source_key, o->copy_source_md5);
    if ((what & COPY_SOURCE) && o->copy_source_sse_c)
        n = customer_key_headers(hdrs, n, true, o->copy_source_key, o->copy_source_md5);
    S3F_ASSERT(n <= S3F_REQUEST_OPTION_HEADERS_MAX);
    return n;
}

bool s3f__header_is_secret(const char *line) {
    static const char *const secret[] = {
        "authorization:",
        "x-amz-security-token:",
        "x-amz-s3session-token:",
        "x-amz-server-side-encryption-customer-key:",
        "x-amz-copy-source-server-side-encryption-customer-key:",
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(secret); i++)
        if (strncasecmp(line, secret[i], strlen(secret[i])) == 0)
            return true;
    return false;
}

void s3f__request_options_hint(const struct s3f__request_options *o, const char *operation,
                               bool copy_source, struct s3f_error *e) {
    int what = kind_of(operation);
    if (!(what & READS))
        return;
    const char *hint = NULL;
    bool source = copy_source || (what & COPY_SOURCE);
    bool keyed = source ? o->copy_source_sse_c : o->sse_c;
    if (e->http_status == 400 && !keyed && source)
        hint = "if the copy's source is encrypted with a customer-provided key (SSE-C), give "
               "the key: --sse-c-copy-source AES256 --sse-c-copy-source-key fileb://PATH (or "
               "S3FLASH_SSE_C_COPY_SOURCE_KEY), sse_copy_source_customer_key in the library";
    else if (e->http_status == 400 && !keyed)
        hint = "if the object is encrypted with a customer-provided key (SSE-C), give the key: "
               "--sse-c AES256 --sse-c-key fileb://PATH (or S3FLASH_SSE_C_KEY), "
               "sse_customer_key in the library";
    else if ((e->http_status == 400 || e->http_status == 403) && keyed)
        hint = "the SSE-C key given may not be the one the object was written with";
    if (!hint)
        return;
    size_t n = strlen(e->message);
    snprintf(e->message + n, sizeof(e->message) - n, "%s(hint: %s)", n ? " " : "", hint);
}

/* ---- the proxy -------------------------------------------------------------------------- */

/* lower case first, as libcurl and Python's urllib read them */
static const char *env2(const char *lower, const char *upper) {
    const char *v = getenv(lower);
    return v ? v : getenv(upper);
}

enum s3f_status s3f__proxy_resolve(const struct s3f_client_options *opts,
                                   const char *profile_ca_bundle, struct s3f__proxy_config *out,
                                   struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    const char *http = opts->proxy, *https = opts->proxy;
    if (!opts->proxy) {
        const char *all = env2("all_proxy", "ALL_PROXY");
        http = env2("http_proxy", "HTTP_PROXY");
        https = env2("https_proxy", "HTTPS_PROXY");
        if (!http)
            http = all;
        if (!https)
            https = all;
    }
    const char *no = opts->no_proxy ? opts->no_proxy : env2("no_proxy", "NO_PROXY");
    const char *ca = opts->proxy_ca_bundle ? opts->proxy_ca_bundle : env("S3FLASH_PROXY_CA_BUNDLE");
    if (!ca)
        ca = profile_ca_bundle;
    if (!dup_opt(&out->http_proxy, http) || !dup_opt(&out->https_proxy, https) ||
        !dup_opt(&out->no_proxy, no) || !dup_opt(&out->ca_bundle, ca)) {
        s3f__proxy_cleanup(out);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    }
    return S3F_OK;
}

void s3f__proxy_log(const struct s3f__proxy_config *p, const struct s3f__logger *logger) {
    if (!p->http_proxy && !p->https_proxy)
        return;
    char h[256], hs[256];
    s3f__url_redact(p->http_proxy ? p->http_proxy : "none", h, sizeof(h));
    s3f__url_redact(p->https_proxy ? p->https_proxy : "none", hs, sizeof(hs));
    s3f__log(logger, S3F_LOG_DEBUG, "client: proxy %s for http://, %s for https://; not for %s",
             h, hs, p->no_proxy ? p->no_proxy : "(no NO_PROXY)");
}

void s3f__proxy_cleanup(struct s3f__proxy_config *p) {
    free(p->http_proxy);
    free(p->https_proxy);
    free(p->no_proxy);
    free(p->ca_bundle);
    memset(p, 0, sizeof(*p));
}
