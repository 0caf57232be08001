/* s3:// URIs (src/s3/uri.c): the length-taking parser on the raw bytes (NUL bytes
 * included) and the public s3f_uri_parse on the string up to the first NUL, into buffers
 * of the sizes the CLI uses and into small ones. The input as a user's key then goes into
 * a DeleteObjects body (src/s3/xml_delete.c: UTF-8 check, XML escaping), as `s3flash rm` sends it. */
#include <string.h>

#include "fuzz.h"
#include "s3/uri.h"
#include "s3/xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char bucket[256], key[1025];
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    enum s3f_status st = s3f__uri_parse_len((const char *)data, size, bucket, sizeof(bucket), key,
                                            sizeof(key), &err);
    if (st == S3F_OK) {
        FUZZ_CHECK(bucket[0] && strlen(bucket) < sizeof(bucket) && strlen(key) < sizeof(key));
        FUZZ_CHECK(memchr(data, 0, size) == NULL);
    } else {
        FUZZ_CHECK(bucket[0] == '\0' && key[0] == '\0');
    }
    char *s = fuzz_cstr(data, size);
    char b2[8], k2[8];
    (void)s3f_uri_parse(s, bucket, sizeof(bucket), key, sizeof(key), &err);
    st = s3f_uri_parse(s, b2, sizeof(b2), k2, sizeof(k2), &err);
    if (st != S3F_OK)
        FUZZ_CHECK(b2[0] == '\0' && k2[0] == '\0');
    struct s3f__buf b;
    s3f__buf_init(&b, 1 << 20);
    const char *keys[2] = {s, "k"};
    if (s3f__xml_build_delete(keys, 2, size & 1, &b, &err) == S3F_OK)
        FUZZ_CHECK(b.len > 0 && memchr(b.data, 0, b.len) == NULL);
    else
        FUZZ_CHECK(b.len == 0);
    (void)s3f__xml_append_escaped(&b, s);
    s3f__buf_cleanup(&b);
    free(s);
    return 0;
}
