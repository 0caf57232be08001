/* Credentials values: setting, copying and wiping them, the checks every provider's
 * answer passes (s3f__credentials_refused), the JSON form of the container, IMDS and
 * credential_process answers, and token files. No state, no lock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/credentials_internal.h"

#define OP "credentials"

/* ---- credentials values ----------------------------------------------------------------- */

void s3f__wipe_free(char *s) {
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void s3f__credentials_cleanup(struct s3f__credentials *c) {
    if (!c)
        return;
    free(c->access_key_id);
    s3f__wipe_free(c->secret_access_key);
    s3f__wipe_free(c->session_token);
    memset(c, 0, sizeof(*c));
}

enum s3f_status s3f__credentials_set(struct s3f__credentials *out, const char *akid,
                                     const char *secret, const char *token, int64_t expiration,
                                     const char *source) {
    memset(out, 0, sizeof(*out));
    out->access_key_id = s3f__strdup(akid);
    out->secret_access_key = s3f__strdup(secret);
    out->session_token = token && *token ? s3f__strdup(token) : NULL;
    if (!out->access_key_id || !out->secret_access_key || (token && *token && !out->session_token)) {
        s3f__credentials_cleanup(out);
        return S3F_ERR_NO_MEMORY;
    }
    out->expiration = expiration;
    s3f__strlcpy(out->source, source, sizeof(out->source));
    return S3F_OK;
}

enum s3f_status s3f__credentials_copy(struct s3f__credentials *dst,
                                      const struct s3f__credentials *src) {
    return s3f__credentials_set(dst, src->access_key_id, src->secret_access_key,
                                src->session_token, src->expiration, src->source);
}

static bool has_control(const char *s) {
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

const char *s3f__credentials_refused(const char *akid, const char *secret, const char *token,
                                     bool need_token, int64_t expiration,
                                     bool has_expiration) {
    if (!akid || !*akid)
        return "no AccessKeyId";
    if (has_control(akid))
        return "the AccessKeyId has a control character";
    if (!secret || !*secret)
        return "no SecretAccessKey";
    if (has_control(secret))
        return "the SecretAccessKey has a control character";
    if (need_token && (!token || !*token))
        return "no SessionToken (or an empty one)";
    if (has_control(token))
        return "the SessionToken has a control character";
    if (has_expiration && expiration <= 0)
        return "the Expiration is at or before 1970-01-01 (it would never expire)";
    return NULL;
}

enum s3f_status s3f__credentials_from_json(const struct s3f__json_object *o,
                                           const char *token_key, const char *source,
                                           const char *what, struct s3f__credentials *out,
                                           struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    const char *akid = s3f__json_get_string(o, "AccessKeyId");
    const char *secret = s3f__json_get_string(o, "SecretAccessKey");
    const char *token = s3f__json_get_string(o, token_key);
    const char *exp = s3f__json_get_string(o, "Expiration");
    int64_t expiration = 0;
    if (exp && *exp && s3f__time_parse(exp, &expiration) != 0)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL,
                              "%s: Expiration is not an ISO-8601 time", what);
    const char *why = s3f__credentials_refused(akid, secret, token, false, expiration,
                                               exp && *exp);
    if (why)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "%s: %s", what, why);
    if (s3f__credentials_set(out, akid, secret, token, expiration, source))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    return S3F_OK;
}

enum s3f_status s3f__read_token_file(const char *path, size_t max, const char *what, char **out,
                                     struct s3f_error *err) {
    struct s3f__buf b;
    s3f__buf_init(&b, max);
    enum s3f_status st = S3F_OK;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: %s", what, path,
                              strerror(errno));
    for (;;) {
        char chunk[4096];
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: %s", what, path,
                                strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        enum s3f_status ast = s3f__buf_append(&b, chunk, (size_t)r);
        explicit_bzero(chunk, sizeof(chunk));
        if (ast == S3F_ERR_NO_MEMORY) {
            st = s3f__error_set(err, ast, OP, path, "out of memory");
            goto out;
        }
        if (ast) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path,
                                "%s %s: larger than %zu bytes", what, path, max);
            goto out;
        }
    }
    if (b.data && strlen(b.data) != b.len) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: contains a NUL byte",
                            what, path);
        goto out;
    }
    if (!b.data || !*s3f__trim(b.data)) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: empty", what, path);
        goto out;
    }
    *out = s3f__strdup(s3f__trim(b.data));
    if (!*out)
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, path, "out of memory");
out:
    close(fd);
    if (b.data)
        explicit_bzero(b.data, b.cap);
    s3f__buf_cleanup(&b);
    return st;
}
