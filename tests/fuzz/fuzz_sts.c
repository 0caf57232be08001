/* The STS document parser shared by the web identity provider and S3 Express's CreateSession
 * (src/auth/credentials_http.c, s3f__sts_parse_fields): AssumeRoleWithWebIdentity and
 * CreateSession responses and error documents, then the credentials taken from them
 * (s3f__sts_credentials: the Expiration trimmed and ISO-8601, the strings checked by
 * s3f__credentials_refused). Checks what is accepted: non-empty key, secret and token with
 * no control character, an Expiration after the epoch. */
#include <string.h>

#include "auth/credentials_internal.h"
#include "fuzz.h"

static int usable(const char *s) {
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *fields[S3F__STS_FIELDS];
    int rc = s3f__sts_parse_fields((const char *)data, size, fields);
    if (rc == 0) {
        struct s3f__credentials c;
        char why[96];
        if (s3f__sts_credentials(fields, "fuzz", &c, why, sizeof(why)) == S3F_OK) {
            FUZZ_CHECK(usable(c.access_key_id) && usable(c.secret_access_key));
            FUZZ_CHECK(usable(c.session_token));
            FUZZ_CHECK(c.expiration > 0);
            s3f__credentials_cleanup(&c);
        } else {
            FUZZ_CHECK(!c.access_key_id && !c.secret_access_key && !c.session_token);
            FUZZ_CHECK(why[0] != 0);
        }
    }
    for (int i = 0; i < S3F__STS_FIELDS; i++)
        s3f__wipe_free(fields[i]);
    return 0;
}
