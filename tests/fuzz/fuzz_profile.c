/* The shared config and credentials files (src/auth/profile.c). Input: the config file's
 * text, NUL, the credentials file's text, NUL, a profile name (empty: the default). */
#include <string.h>

#include "auth/profile.h"
#include "fuzz.h"

static const char *const keys[] = {
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region",
    "endpoint_url", "s3.endpoint_url", "s3.addressing_style", "credential_process",
    "role_arn", "web_identity_token_file", "services", "s3", "max_attempts",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0;
    char *config = fuzz_field(data, size, &pos);
    char *creds = fuzz_field(data, size, &pos);
    char *profile = fuzz_field(data, size, &pos);
    struct s3f__aws_config *c = NULL;
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    enum s3f_status st = s3f__aws_config_parse(config, "config", creds, "credentials",
                                               profile[0] ? profile : NULL, &c, &err);
    if (st == S3F_OK) {
        FUZZ_CHECK(c);
        FUZZ_CHECK(s3f__aws_config_profile_name(c));
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            (void)s3f__aws_config_get(c, keys[i]);
            (void)s3f__aws_config_service_get(c, "s3", keys[i]);
            (void)s3f__aws_config_service_get(c, "S3", keys[i]);
        }
        (void)s3f__aws_config_profile_found(c);
        s3f__aws_config_free(c);
    } else {
        FUZZ_CHECK(memchr(err.message, 0, sizeof(err.message)));
    }
    free(config);
    free(creds);
    free(profile);
    return 0;
}
