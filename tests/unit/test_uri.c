/* s3:// URI parsing. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "s3/uri.h"
#include "testutil.h"

static void test_valid(void) {
    static const char *const cases[][3] = {
        {"s3://bucket/key/with/slashes", "bucket", "key/with/slashes"},
        {"s3://bucket", "bucket", ""},
        {"s3://bucket/", "bucket", ""},
        {"s3://bucket//double", "bucket", "/double"},
        {"s3://bucket/dir/", "bucket", "dir/"},
        {"S3://Legacy_Bucket.v2/k", "Legacy_Bucket.v2", "k"},
        {"s3://b-1/a b?c#d%20e", "b-1", "a b?c#d%20e"}, /* verbatim, not decoded */
        {"s3://bkt/caf\xc3\xa9/\xf0\x9f\x98\x80", "bkt", "caf\xc3\xa9/\xf0\x9f\x98\x80"},
        /* ARN buckets, split as aws-cli splits them: up to the access point's name */
        {"s3://arn:aws:s3:us-west-2:123456789012:accesspoint/myap/dir/key.bin",
         "arn:aws:s3:us-west-2:123456789012:accesspoint/myap", "dir/key.bin"},
        {"s3://arn:aws:s3:us-west-2:123456789012:accesspoint:myap/k",
         "arn:aws:s3:us-west-2:123456789012:accesspoint:myap", "k"},
        {"s3://arn:aws:s3:us-west-2:123456789012:accesspoint/myap",
         "arn:aws:s3:us-west-2:123456789012:accesspoint/myap", ""},
        {"s3://arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap/a/b",
         "arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap", "a/b"},
        {"s3://arn:aws:s3-outposts:us-east-1:123456789012:outpost/op-01234567890123456/"
         "accesspoint/reports/x/y",
         "arn:aws:s3-outposts:us-east-1:123456789012:outpost/op-01234567890123456/accesspoint/"
         "reports",
         "x/y"},
        {"s3://arn:aws:s3-object-lambda:us-east-1:123456789012:accesspoint/mybanner/k",
         "arn:aws:s3-object-lambda:us-east-1:123456789012:accesspoint/mybanner", "k"},
        {"s3://plain-bucket/arn:aws:s3:x", "plain-bucket", "arn:aws:s3:x"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        char bucket[256], key[1025];
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f_uri_parse(cases[i][0], bucket, sizeof(bucket), key, sizeof(key), &err),
                  S3F_OK);
        CHECK_STR(bucket, cases[i][1]);
        CHECK_STR(key, cases[i][2]);
        CHECK_INT(err.status, S3F_OK);
    }
    /* a key of exactly 1024 bytes */
    char uri[1100], bucket[64], key[1025];
    s3f__strlcpy(uri, "s3://bkt/", sizeof(uri));
    memset(uri + 9, 'k', 1024);
    uri[9 + 1024] = '\0';
    CHECK_INT(s3f_uri_parse(uri, bucket, sizeof(bucket), key, sizeof(key), NULL), S3F_OK);
    CHECK_INT(strlen(key), 1024);
}

struct bad_case {
    const char *uri;
    const char *reason;
};

static void test_invalid(void) {
    static const struct bad_case cases[] = {
        {"bucket/key", "missing the s3:// scheme"},
        {"", "missing the s3:// scheme"},
        {"/local/path", "missing the s3:// scheme"},
        {"s3:/bucket/key", "the scheme must be s3://, not s3:"},
        {"https://bucket.s3.amazonaws.com/key", "the scheme must be s3://, not https:"},
        {"gs://bucket/key", "the scheme must be s3://, not gs:"},
        {"s3://", "empty bucket name"},
        {"s3:///key", "empty bucket name"},
        {"s3://ab/key", "shorter than 3"},
        {"s3://buck et/key", "invalid byte 0x20"},
        {"s3://bucket!/key", "invalid character '!'"},
        {"s3://b\xc3\xa9t/key", "invalid byte 0xc3"},
        {"s3://bucket:80/key", "invalid character ':'"},
        {"s3://bkt/\xff\xfe", "not valid UTF-8"},
        {"s3://bkt/\xc0\xaf", "not valid UTF-8"},       /* overlong '/' */
        {"s3://bkt/\xed\xa0\x80", "not valid UTF-8"},   /* surrogate */
        {"s3://bkt/\xe2\x82", "not valid UTF-8"},       /* truncated */
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        char bucket[256] = "x", key[1025] = "y";
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f_uri_parse(cases[i].uri, bucket, sizeof(bucket), key, sizeof(key), &err),
                  S3F_ERR_INVALID_URI);
        CHECK_INT(err.status, S3F_ERR_INVALID_URI);
        if (!strstr(err.message, cases[i].reason))
            test_fail(__FILE__, __LINE__, "%s: message \"%s\" lacks \"%s\"", cases[i].uri,
                      err.message, cases[i].reason);
        /* the message names the URI (control bytes shown as '?') */
        char want[64];
        snprintf(want, sizeof(want), "invalid S3 URI \"%s\": ", cases[i].uri);
        CHECK(strncmp(err.message, want, strlen(want)) == 0);
        CHECK_STR(bucket, "");
        CHECK_STR(key, "");
    }
    /* too long key */
    char uri[1200], bucket[64], key[2048];
    s3f__strlcpy(uri, "s3://bkt/", sizeof(uri));
    memset(uri + 9, 'k', 1025);
    uri[9 + 1025] = '\0';
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f_uri_parse(uri, bucket, sizeof(bucket), key, sizeof(key), &err),
              S3F_ERR_INVALID_URI);
    CHECK(strstr(err.message, "1025 bytes") != NULL);
    CHECK(strstr(err.message, "...") != NULL); /* long URIs are shortened in the message */
    /* too long bucket */
    char ub[400] = "s3://";
    memset(ub + 5, 'b', 256);
    ub[5 + 256] = '\0';
    CHECK_INT(s3f_uri_parse(ub, bucket, sizeof(bucket), key, sizeof(key), &err),
              S3F_ERR_INVALID_URI);
    CHECK(strstr(err.message, "longer than 255") != NULL);
    /* NULL err is fine */
    CHECK_INT(s3f_uri_parse("nope", bucket, sizeof(bucket), key, sizeof(key), NULL),
              S3F_ERR_INVALID_URI);
    CHECK_INT(s3f_uri_parse(NULL, bucket, sizeof(bucket), key, sizeof(key), &err),
              S3F_ERR_INVALID_URI);
}

static void test_nul_and_buffers(void) {
    char bucket[64], key[64];
    struct s3f_error err;
    s3f_error_clear(&err);
    static const char with_nul[] = "s3://bkt/a\0b";
    CHECK_INT(s3f__uri_parse_len(with_nul, sizeof(with_nul) - 1, bucket, sizeof(bucket), key,
                                 sizeof(key), &err),
              S3F_ERR_INVALID_URI);
    CHECK(strstr(err.message, "NUL") != NULL);
    CHECK(strstr(err.message, "s3://bkt/a") != NULL);
    /* not NUL-terminated input: only `len` bytes are read */
    char raw[12];
    memcpy(raw, "s3://bkt/keyXXX", 12);
    CHECK_INT(s3f__uri_parse_len(raw, 12, bucket, sizeof(bucket), key, sizeof(key), NULL),
              S3F_OK);
    CHECK_STR(key, "key");
    /* buffers */
    CHECK_INT(s3f_uri_parse("s3://bucket/key", bucket, 6, key, sizeof(key), &err),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "bucket") != NULL);
    CHECK_INT(s3f_uri_parse("s3://bucket/key", bucket, 7, key, 3, &err),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "key") != NULL);
    CHECK_INT(s3f_uri_parse("s3://bucket/key", bucket, 7, key, 4, &err), S3F_OK);
    CHECK_STR(bucket, "bucket");
    CHECK_STR(key, "key");
    CHECK_INT(s3f_uri_parse("s3://bucket/key", NULL, 7, key, 4, &err),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_uri_parse("s3://bucket/key", bucket, 7, NULL, 0, &err),
              S3F_ERR_INVALID_ARGUMENT);
}

int main(void) {
    RUN(test_valid);
    RUN(test_invalid);
    RUN(test_nul_and_buffers);
    return test_summary();
}
