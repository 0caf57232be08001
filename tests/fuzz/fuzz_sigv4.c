/* SigV4 canonical path and query (src/auth/sigv4.c) and the percent-encoding under them
 * (src/core/encode.c). Input: a flags byte, then path, NUL, query, NUL, a header name, NUL,
 * its value. The request is signed for the Authorization header and presigned, with the
 * S3 path rules and with normalisation; the path and the query are also URI-encoded and
 * decoded, which must round-trip. */
#include <string.h>

#include "auth/sigv4.h"
#include "fuzz.h"

static void roundtrip(const char *s, size_t len, bool keep_slash) {
    struct s3f__buf b;
    s3f__buf_init(&b, 1 << 20);
    if (s3f__uri_encode(&b, s, len, keep_slash) == S3F_OK) {
        char *d = s3f__uri_decode(b.data ? b.data : "", b.len);
        FUZZ_CHECK(d && memcmp(d, s, len) == 0);
        free(d);
    }
    s3f__buf_cleanup(&b);
    free(s3f__uri_decode(s, len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t f = data[0];
    size_t pos = 1;
    char *path = fuzz_field(data, size, &pos);
    char *query = fuzz_field(data, size, &pos);
    char *hname = fuzz_field(data, size, &pos);
    char *hvalue = fuzz_field(data, size, &pos);
    struct s3f__header hdrs[3] = {
        {"host", "bucket.s3.us-east-1.amazonaws.com"},
        {hname, hvalue},
        {"x-amz-meta-a", hvalue},
    };
    struct s3f__sigv4_request req = {
        .method = (f & 1) ? "PUT" : "GET",
        .path = path,
        .query = query,
        .headers = hdrs,
        .n_headers = hname[0] ? 3 : 1,
        .payload_hash = S3F__SIGV4_UNSIGNED_PAYLOAD,
    };
    struct s3f__sigv4_credentials creds = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                                           (f & 2) ? "token" : NULL};
    struct s3f__sigv4_config cfg = {
        .region = "us-east-1",
        .service = "s3",
        .time = 1440938160,
        .normalize_path = f & 4,
        .expires_s = 3600,
        .add_content_sha256_header = f & 8,
        .omit_session_token = f & 16,
    };
    struct s3f__sigv4_signed out;
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    if (s3f__sigv4_sign_headers(&req, &creds, &cfg, &out, &err) == S3F_OK) {
        FUZZ_CHECK(out.authorization && out.canonical_request && strlen(out.signature) == 64);
        struct s3f__header add[4];
        size_t n = s3f__sigv4_signed_headers(&out, add);
        FUZZ_CHECK(n >= 2 && n <= 4);
    }
    s3f__sigv4_signed_cleanup(&out);
    char *q = NULL, *cr = NULL, *sts = NULL;
    if (s3f__sigv4_presign(&req, &creds, &cfg, &q, &cr, &sts, &err) == S3F_OK) {
        FUZZ_CHECK(q && strstr(q, "X-Amz-Signature="));
        free(q);
        free(cr);
        free(sts);
    }
    roundtrip(path, strlen(path), true);
    roundtrip(query, strlen(query), false);
    free(path);
    free(query);
    free(hname);
    free(hvalue);
    return 0;
}
