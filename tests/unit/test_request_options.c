/* The request options (src/s3/request_options.c): which headers each operation carries,
 * what is refused at creation (never quoting an SSE-C key), which header lines are logged
 * redacted, the hints of an SSE-C read, and the proxy taken from the options or the
 * environment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "s3/request_options.h"
#include "testutil.h"

#define KEY "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" /* bytes 0..31 */
#define KEY_MD5 "tP/LI3N87DFaSk0aoqYgzg=="               /* base64 of their MD5 */

static const char *find(const struct s3f__header *h, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(h[i].name, name) == 0)
            return h[i].value;
    return NULL;
}

static size_t headers(const struct s3f__request_options *o, const char *op, bool copy_source,
                      struct s3f__header *h) {
    return s3f__request_options_headers(o, op, "bucket", copy_source, h);
}

static void test_sse_kms_on_writes_only(void) {
    struct s3f_client_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.sse = "aws:kms";
    opts.sse_kms_key_id = "key-1";
    opts.sse_kms_encryption_context = "{\"a\":\"b\"}";
    opts.sse_bucket_key_enabled = 1;
    opts.storage_class = "STANDARD_IA";
    opts.acl = "bucket-owner-full-control";
    opts.expected_bucket_owner = "111122223333";
    struct s3f__request_options o;
    struct s3f_error err;
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    struct s3f__header h[S3F_REQUEST_OPTION_HEADERS_MAX];
    static const char *const writes[] = {"PutObject", "CreateMultipartUpload", "CopyObject"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(writes); i++) {
        size_t n = headers(&o, writes[i], false, h);
        CHECK_STR(find(h, n, "x-amz-server-side-encryption"), "aws:kms");
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-aws-kms-key-id"), "key-1");
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-context"), "eyJhIjoiYiJ9");
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-bucket-key-enabled"), "true");
        CHECK_STR(find(h, n, "x-amz-storage-class"), "STANDARD_IA");
        CHECK_STR(find(h, n, "x-amz-acl"), "bucket-owner-full-control");
        CHECK_STR(find(h, n, "x-amz-expected-bucket-owner"), "111122223333");
        CHECK_INT((int)n, 7);
    }
    static const char *const others[] = {"UploadPart", "UploadPartCopy",
                                         "CompleteMultipartUpload", "GetObject", "HeadObject",
                                         "ListObjectsV2", "DeleteObject", "DeleteObjects"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(others); i++) {
        size_t n = headers(&o, others[i], false, h);
        CHECK_INT((int)n, 1); /* the owner alone */
        CHECK_STR(find(h, n, "x-amz-expected-bucket-owner"), "111122223333");
    }
    CHECK_INT((int)headers(&o, "CreateBucket", false, h), 0);
    CHECK_INT((int)s3f__request_options_headers(&o, "ListBuckets", NULL, false, h), 0);
    CHECK_STR(o.user_agent, "s3flash/" S3FLASH_VERSION);
    s3f__request_options_cleanup(&o);
}

static void test_sse_c_where_needed(void) {
    struct s3f_client_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.sse_customer_key = KEY;
    opts.user_agent_extra = "app/2";
    struct s3f__request_options o;
    struct s3f_error err;
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    CHECK_STR(o.user_agent, "s3flash/" S3FLASH_VERSION " app/2");
    struct s3f__header h[S3F_REQUEST_OPTION_HEADERS_MAX];
    static const char *const keyed[] = {"PutObject", "CreateMultipartUpload", "UploadPart",
                                        "CompleteMultipartUpload", "GetObject", "HeadObject",
                                        "CopyObject", "UploadPartCopy"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(keyed); i++) {
        size_t n = headers(&o, keyed[i], false, h);
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-customer-algorithm"), "AES256");
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-customer-key"), KEY);
        CHECK_STR(find(h, n, "x-amz-server-side-encryption-customer-key-md5"), KEY_MD5);
        bool copy = strstr(keyed[i], "Copy") != NULL; /* the source: the same key (NULL) */
        CHECK(!find(h, n, "x-amz-copy-source-server-side-encryption-customer-key") == !copy);
        CHECK(!find(h, n, "x-amz-server-side-encryption"));
    }
    CHECK_INT((int)headers(&o, "ListObjectsV2", false, h), 0);
    CHECK_INT((int)headers(&o, "DeleteObject", false, h), 0);
    s3f__request_options_cleanup(&o);

    /* a copy's source with its own key, none for the destination: the HEAD of the source
     * carries the source's key as its own */
    memset(&opts, 0, sizeof(opts));
    opts.sse_copy_source_customer_key = KEY;
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    size_t n = headers(&o, "HeadObject", true, h);
    CHECK_STR(find(h, n, "x-amz-server-side-encryption-customer-key"), KEY);
    CHECK(!find(h, n, "x-amz-copy-source-server-side-encryption-customer-key"));
    CHECK_INT((int)headers(&o, "HeadObject", false, h), 0);
    n = headers(&o, "UploadPartCopy", false, h);
    CHECK_STR(find(h, n, "x-amz-copy-source-server-side-encryption-customer-key"), KEY);
    CHECK(!find(h, n, "x-amz-server-side-encryption-customer-key"));
    s3f__request_options_cleanup(&o);

    /* "" : the source has no key */
    memset(&opts, 0, sizeof(opts));
    opts.sse_customer_key = KEY;
    opts.sse_copy_source_customer_key = "";
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    n = headers(&o, "CopyObject", false, h);
    CHECK(!find(h, n, "x-amz-copy-source-server-side-encryption-customer-key"));
    s3f__request_options_cleanup(&o);
}

static void test_refused(void) {
    struct {
        const char *sse, *kms, *ctx, *key, *extra;
        const char *want;
    } cases[] = {
        {"AES128", NULL, NULL, NULL, NULL, "must be AES256, aws:kms or aws:kms:dsse"},
        {"AES256", "k", NULL, NULL, NULL, "needs sse aws:kms"},
        {NULL, NULL, "{}", NULL, NULL, "needs sse aws:kms"},
        {"aws:kms", NULL, "[1]", NULL, NULL, "must be a JSON object"},
        {NULL, NULL, NULL, "c2hvcnQ=", NULL, "must be 32 bytes"},
        {NULL, NULL, NULL, "not base64 at all!", NULL, "must be 32 bytes"},
        {"AES256", NULL, NULL, KEY, NULL, "exclude each other"},
        {NULL, NULL, NULL, NULL, "bad\r\nheader", "printable ASCII"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        struct s3f_client_options opts;
        memset(&opts, 0, sizeof(opts));
        opts.sse = cases[i].sse;
        opts.sse_kms_key_id = cases[i].kms;
        opts.sse_kms_encryption_context = cases[i].ctx;
        opts.sse_customer_key = cases[i].key;
        opts.user_agent_extra = cases[i].extra;
        struct s3f__request_options o;
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_ERR_INVALID_ARGUMENT);
        char line[1024];
        s3f_error_format(&err, line, sizeof(line));
        CHECK(strstr(line, cases[i].want) != NULL);
        if (cases[i].key) /* a key, even a wrong one, is never quoted */
            CHECK(strstr(line, cases[i].key) == NULL);
    }
}

static void test_secret_lines(void) {
    CHECK(s3f__header_is_secret("x-amz-server-side-encryption-customer-key: " KEY));
    CHECK(s3f__header_is_secret("X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key: k"));
    CHECK(s3f__header_is_secret("authorization: AWS4-HMAC-SHA256 ..."));
    CHECK(s3f__header_is_secret("x-amz-security-token: t"));
    CHECK(!s3f__header_is_secret("x-amz-server-side-encryption-customer-key-md5: " KEY_MD5));
    CHECK(!s3f__header_is_secret("x-amz-server-side-encryption: aws:kms"));
}

static void test_hints(void) {
    struct s3f_client_options opts;
    memset(&opts, 0, sizeof(opts));
    struct s3f__request_options o;
    struct s3f_error err;
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    s3f_error_clear(&err);
    err.http_status = 400;
    s3f__request_options_hint(&o, "GetObject", false, &err);
    CHECK(strstr(err.message, "--sse-c-key fileb://PATH") != NULL);
    s3f_error_clear(&err);
    err.http_status = 400;
    s3f__request_options_hint(&o, "HeadObject", true, &err); /* a copy's source */
    CHECK(strstr(err.message, "--sse-c-copy-source-key") != NULL);
    s3f_error_clear(&err);
    err.http_status = 400;
    s3f__request_options_hint(&o, "PutObject", false, &err); /* not a read */
    CHECK_STR(err.message, "");
    s3f_error_clear(&err);
    err.http_status = 404;
    s3f__request_options_hint(&o, "GetObject", false, &err);
    CHECK_STR(err.message, "");
    s3f__request_options_cleanup(&o);

    opts.sse_customer_key = KEY;
    CHECK_INT(s3f__request_options_init(&o, &opts, &err), S3F_OK);
    s3f_error_clear(&err);
    err.http_status = 403;
    snprintf(err.message, sizeof(err.message), "Forbidden");
    s3f__request_options_hint(&o, "GetObject", false, &err);
    CHECK(strstr(err.message, "Forbidden (hint: the SSE-C key given may not be") != NULL);
    s3f__request_options_cleanup(&o);
}

static void test_proxy_from_environment(void) {
    static const char *const vars[] = {"http_proxy", "HTTP_PROXY", "https_proxy",
                                       "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                       "no_proxy", "NO_PROXY", "S3FLASH_PROXY_CA_BUNDLE"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
    struct s3f_client_options opts;
    memset(&opts, 0, sizeof(opts));
    struct s3f__proxy_config p;
    struct s3f_error err;
    CHECK_INT(s3f__proxy_resolve(&opts, NULL, &p, &err), S3F_OK);
    CHECK(!p.http_proxy && !p.https_proxy && !p.no_proxy && !p.ca_bundle);
    s3f__proxy_cleanup(&p);

    setenv("HTTP_PROXY", "http://upper:1", 1);
    setenv("https_proxy", "http://lower:2", 1);
    setenv("HTTPS_PROXY", "http://upper:2", 1);
    setenv("NO_PROXY", "localhost", 1);
    CHECK_INT(s3f__proxy_resolve(&opts, "/profile/ca.pem", &p, &err), S3F_OK);
    CHECK_STR(p.http_proxy, "http://upper:1");
    CHECK_STR(p.https_proxy, "http://lower:2"); /* lower case first */
    CHECK_STR(p.no_proxy, "localhost");
    CHECK_STR(p.ca_bundle, "/profile/ca.pem");
    s3f__proxy_cleanup(&p);

    unsetenv("HTTP_PROXY");
    setenv("ALL_PROXY", "http://all:3", 1);
    setenv("S3FLASH_PROXY_CA_BUNDLE", "/env/ca.pem", 1);
    CHECK_INT(s3f__proxy_resolve(&opts, "/profile/ca.pem", &p, &err), S3F_OK);
    CHECK_STR(p.http_proxy, "http://all:3");
    CHECK_STR(p.ca_bundle, "/env/ca.pem");
    s3f__proxy_cleanup(&p);

    opts.proxy = ""; /* no proxy, whatever the environment says */
    opts.no_proxy = "example.com";
    CHECK_INT(s3f__proxy_resolve(&opts, NULL, &p, &err), S3F_OK);
    CHECK(!p.http_proxy && !p.https_proxy);
    CHECK_STR(p.no_proxy, "example.com");
    s3f__proxy_cleanup(&p);
    for (size_t i = 0; i < S3F_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
}

int main(void) {
    RUN(test_sse_kms_on_writes_only);
    RUN(test_sse_c_where_needed);
    RUN(test_refused);
    RUN(test_secret_lines);
    RUN(test_hints);
    RUN(test_proxy_from_environment);
    return test_summary();
}
