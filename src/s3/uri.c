/* s3:// URIs: "s3://bucket/key/with/slashes". The key is taken verbatim (no percent-decoding,
 * '?' and '#' are key characters), as the AWS CLI does. Not through libcurl's curl_url(),
 * the parser of endpoint URLs: it would cut the key at '?' and '#' and refuse spaces and
 * control characters, which keys may hold. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "s3/endpoint.h"
#include "s3/uri.h"

#define S3F_KEY_MAX 1024

static enum s3f_status bad(struct s3f_error *err, const char *uri, size_t len,
                           const char *reason) {
    char shown[200];
    /* the URI is not a secret; show at most 160 bytes of it, and no control characters */
    size_t n = len < 160 ? len : 160, o = 0;
    for (size_t i = 0; i < n && o + 1 < sizeof(shown); i++)
        shown[o++] = (unsigned char)uri[i] < 0x20 || uri[i] == 0x7f ? '?' : uri[i];
    shown[o] = '\0';
    return s3f__error_set(err, S3F_ERR_INVALID_URI, "parse URI", NULL, "invalid S3 URI \"%s%s\": %s", shown, len > n ? "..." : "", reason);
}

enum s3f_status s3f__uri_parse_len(const char *uri, size_t len, char *bucket, size_t bucket_len,
                                   char *key, size_t key_len, struct s3f_error *err) {
    if (bucket && bucket_len)
        bucket[0] = '\0';
    if (key && key_len)
        key[0] = '\0';
    if (!uri)
        return s3f__error_set(err, S3F_ERR_INVALID_URI, "parse URI", NULL, "no URI given");
    if (!bucket || !bucket_len || !key || !key_len)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "parse URI", NULL,
                              "no output buffer for the bucket or key");
    if (memchr(uri, '\0', len))
        return bad(err, uri, len, "contains a NUL byte");
    if (len < 5 || strncasecmp(uri, "s3://", 5) != 0) {
        const char *sep = memchr(uri, ':', len);
        const char *slash = memchr(uri, '/', len);
        if (sep && (!slash || sep < slash) && sep > uri) {
            char reason[64];
            size_t n = (size_t)(sep - uri);
            snprintf(reason, sizeof(reason), "the scheme must be s3://, not %.*s%s:",
                     (int)(n < 16 ? n : 16), uri, n > 16 ? "..." : "");
            return bad(err, uri, len, reason);
        }
        return bad(err, uri, len, "missing the s3:// scheme (want s3://bucket/key)");
    }
    const char *b = uri + 5, *end = uri + len;
    const char *slash = memchr(b, '/', (size_t)(end - b));
    size_t arn_len = s3f__arn_bucket_len(b, (size_t)(end - b)); /* s3://ARN/KEY */
    if (arn_len)
        slash = b + arn_len < end ? b + arn_len : NULL;
    size_t blen = slash ? (size_t)(slash - b) : (size_t)(end - b);
    const char *k = slash ? slash + 1 : end;
    size_t klen = (size_t)(end - k);
    if (blen == 0)
        return bad(err, uri, len, "empty bucket name");
    char bname[300];
    if (blen >= sizeof(bname))
        return bad(err, uri, len, "bucket name longer than 255 bytes");
    memcpy(bname, b, blen);
    bname[blen] = '\0';
    if (!s3f__bucket_name_valid(bname, false)) {
        const char *why = "invalid bucket name (want 3 to 255 of A-Z a-z 0-9 . _ -)";
        if (blen < 3)
            why = "bucket name shorter than 3 bytes";
        else if (blen > 255)
            why = "bucket name longer than 255 bytes";
        else
            for (size_t i = 0; i < blen; i++) {
                unsigned char c = (unsigned char)bname[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_')) {
                    char reason[64];
                    if (c >= 0x21 && c < 0x7f)
                        snprintf(reason, sizeof(reason),
                                 "invalid character '%c' in the bucket name", c);
                    else
                        snprintf(reason, sizeof(reason),
                                 "invalid byte 0x%02x in the bucket name", c);
                    return bad(err, uri, len, reason);
                }
            }
        return bad(err, uri, len, why);
    }
    if (klen > S3F_KEY_MAX) {
        char reason[64];
        snprintf(reason, sizeof(reason), "the key is %zu bytes, S3 allows at most %d", klen,
                 S3F_KEY_MAX);
        return bad(err, uri, len, reason);
    }
    if (s3f__utf8_valid_prefix((const unsigned char *)k, klen) != klen)
        return bad(err, uri, len, "the key is not valid UTF-8");
    if (blen + 1 > bucket_len || klen + 1 > key_len)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "parse URI", NULL,
                              "output buffer too small for the %s of the URI",
                              blen + 1 > bucket_len ? "bucket" : "key");
    memcpy(bucket, bname, blen + 1);
    memcpy(key, k, klen);
    key[klen] = '\0';
    return S3F_OK;
}

enum s3f_status s3f_uri_parse(const char *uri, char *bucket, size_t bucket_len, char *key,
                              size_t key_len, struct s3f_error *err) {
    return s3f__uri_parse_len(uri, uri ? strlen(uri) : 0, bucket, bucket_len, key, key_len,
                              err);
}
