/* The response-header path of the request executor (src/s3/request.c,
 * s3f__s3_attempt_on_header): ETag, request ids, checksums, Last-Modified, Date,
 * Content-Length, Content-Range. Input: "Name: value" lines (LF or CRLF), as curl hands
 * them over one by one. The parsed values keep the invariants check_response relies on. */
#include <string.h>

#include "fuzz.h"
#include "s3/request_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct s3f__s3_attempt a;
    memset(&a, 0, sizeof(a));
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            const char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = le;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            s3f__s3_attempt_on_header(&a, p, (size_t)(colon - p), v, (size_t)(ve - v));
        }
        p = nl ? nl + 1 : end;
    }
    FUZZ_CHECK(memchr(a.etag, 0, sizeof(a.etag)));
    FUZZ_CHECK(memchr(a.request_id, 0, sizeof(a.request_id)));
    FUZZ_CHECK(memchr(a.host_id, 0, sizeof(a.host_id)));
    FUZZ_CHECK(memchr(a.checksum_crc32c, 0, sizeof(a.checksum_crc32c)));
    FUZZ_CHECK(memchr(a.checksum_crc64nvme, 0, sizeof(a.checksum_crc64nvme)));
    FUZZ_CHECK(memchr(a.checksum_sha256, 0, sizeof(a.checksum_sha256)));
    FUZZ_CHECK(memchr(a.storage_class, 0, sizeof(a.storage_class)));
    FUZZ_CHECK(!a.has_range_last || a.has_range_first);
    return 0;
}
