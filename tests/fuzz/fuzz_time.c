/* HTTP (RFC 1123) and ISO-8601 dates (src/core/time.c), as they come from Last-Modified and
 * Date headers, listings, copy results and credential Expirations. A date that parses is
 * formatted back (X-Amz-Date form) when it is within the years SigV4 can carry. */
#include <string.h>

#include "core/core.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    int64_t t = 0;
    if (s3f__time_parse(s, &t) == 0 && t >= -30610224000 && t <= 253402300799) {
        char buf[17];
        s3f__time_amz(t, buf); /* years 1000..9999 */
        FUZZ_CHECK(strlen(buf) == 16);
    }
    free(s);
    return 0;
}
