/* The web identity provider's STS document parser (src/auth/credentials_http.c,
 * s3f__sts_parse_fields): AssumeRoleWithWebIdentity responses and STS error documents,
 * then the Expiration as the provider reads it (trimmed, ISO-8601). */
#include <string.h>

#include "auth/credentials_internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *fields[S3F__STS_FIELDS];
    (void)s3f__sts_parse_fields((const char *)data, size, fields);
    if (fields[3]) {
        int64_t t;
        (void)s3f__time_parse(s3f__trim(fields[3]), &t);
    }
    for (int i = 0; i < S3F__STS_FIELDS; i++)
        s3f__wipe_free(fields[i]);
    return 0;
}
