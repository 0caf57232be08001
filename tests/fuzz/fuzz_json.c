/* The credential providers' JSON (src/auth/json.c): the documents of credential_process,
 * the container endpoint and IMDS, then what the providers read from them
 * (s3f__credentials_from_json: AccessKeyId, SecretAccessKey, Token/SessionToken, an
 * ISO-8601 Expiration; Version as an integer). */
#include <string.h>

#include "auth/credentials_internal.h"
#include "auth/json.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct s3f__json_object o;
    char msg[96];
    memset(&o, 0, sizeof(o));
    enum s3f_status st = s3f__json_parse_object((const char *)data, size, &o, msg, sizeof(msg));
    if (st != S3F_OK) {
        FUZZ_CHECK(o.n == 0 && o.members == NULL);
        FUZZ_CHECK(memchr(msg, 0, sizeof(msg)));
        return 0;
    }
    for (size_t i = 0; i < o.n; i++) {
        const struct s3f__json_member *m = &o.members[i];
        FUZZ_CHECK(m->key);
        FUZZ_CHECK((m->type == S3F__JSON_STRING || m->type == S3F__JSON_NUMBER) == (m->value != NULL));
        if (m->value)
            FUZZ_CHECK(m->value[m->value_len] == '\0');
        FUZZ_CHECK(s3f__json_get(&o, m->key) != NULL);
    }
    int64_t v;
    (void)s3f__json_get_int64(&o, "Version", &v);
    (void)s3f__json_get_int64(&o, "Expiration", &v);
    struct s3f__credentials c;
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    if (s3f__credentials_from_json(&o, "Token", "fuzz", "fuzz", &c, &err) == S3F_OK)
        s3f__credentials_cleanup(&c);
    if (s3f__credentials_from_json(&o, "SessionToken", "fuzz", "fuzz", &c, &err) == S3F_OK)
        s3f__credentials_cleanup(&c);
    s3f__json_cleanup(&o);
    return 0;
}
