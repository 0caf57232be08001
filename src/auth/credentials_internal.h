/* Shared between credentials.c (values, snapshots, the cached provider),
 * credentials_chain.c (the chain's settings and order; environment, profile, process) and
 * credentials_http.c (the network providers' HTTP helper, web identity/STS, CreateSession)
 * and credentials_metadata.c (container, IMDS). Not for other layers. */
#ifndef S3F_AUTH_CREDENTIALS_INTERNAL_H
#define S3F_AUTH_CREDENTIALS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "auth/credentials.h"
#include "auth/json.h"

/* Everything the default chain needs, copied from the environment and the profile when the
 * provider is created; immutable afterwards (read by the fetching thread only). Strings are
 * NULL when unset or empty. */
struct s3f__chain_settings {
    char *profile;
    bool profile_found;
    char *config_path;        /* display forms for messages */
    char *credentials_path;

    char *env_akid, *env_secret, *env_token;
    char *prof_akid, *prof_secret, *prof_token;
    char *credential_process;
    char *unsupported;        /* why the profile asks for an unsupported provider */

    /* web identity, each from the environment, else the profile */
    char *wi_token_file;
    const char *wi_token_file_from; /* "AWS_WEB_IDENTITY_TOKEN_FILE" or "web_identity_token_file" */
    char *wi_role_arn;
    char *wi_session_name;
    char *sts_endpoint;       /* resolved, never NULL */

    /* container */
    char *container_relative;
    char *container_full;
    char *container_host;     /* S3FLASH_CONTAINER_CREDENTIALS_HOST (test builds only), else NULL */
    char *container_token_file;
    char *container_token;

    /* IMDS */
    bool imds_disabled;
    char *imds_endpoint;      /* resolved, never NULL, without a trailing '/' */
    uint32_t imds_timeout_ms;
    int imds_attempts;

    char *ca_bundle;
    uint32_t connect_timeout_ms;
    uint32_t timeout_ms;
    uint32_t process_timeout_ms;
    const struct s3f__logger *logger;
    atomic_bool *cancel;      /* the provider's: set when it is freed (stop a fetch early) */
};

/* A provider of the chain. Returns S3F_OK with *out filled, S3F_ERR_NO_CREDENTIALS when it
 * is not configured or not available (with why in `note`, e.g. "AWS_ROLE_ARN unset"), or an
 * error status with err filled (a configured provider that failed). */
typedef enum s3f_status (*s3f__chain_fetch_fn)(const struct s3f__chain_settings *s,
                                               struct s3f__credentials *out, char *note,
                                               size_t note_len, struct s3f_error *err);

/* The chain's settings from the options, the environment and the profile `c` (may be NULL).
 * Caller frees with s3f__chain_settings_free. S3F_ERR_NO_MEMORY, S3F_ERR_CONFIG. */
enum s3f_status s3f__chain_settings_new(const struct s3f__credentials_options *o,
                                        const struct s3f__aws_config *c,
                                        struct s3f__chain_settings **out, struct s3f_error *err);
void s3f__chain_settings_free(struct s3f__chain_settings *s);
/* Run the chain from the start (only = -1) or just provider `only`. On success *chosen is
 * the index of the provider that answered; credentials already expired are an error. */
enum s3f_status s3f__chain_run(const struct s3f__chain_settings *s, int only,
                               struct s3f__credentials *out, int *chosen, struct s3f_error *err);

enum s3f_status s3f__chain_fetch_web_identity(const struct s3f__chain_settings *s,
                                              struct s3f__credentials *out, char *note,
                                              size_t note_len, struct s3f_error *err);
enum s3f_status s3f__chain_fetch_container(const struct s3f__chain_settings *s,
                                           struct s3f__credentials *out, char *note,
                                           size_t note_len, struct s3f_error *err);
enum s3f_status s3f__chain_fetch_imds(const struct s3f__chain_settings *s,
                                      struct s3f__credentials *out, char *note, size_t note_len,
                                      struct s3f_error *err);

/* Fill *out from a JSON credentials document: AccessKeyId, SecretAccessKey, the token under
 * `token_key` ("Token" or "SessionToken"; optional) and Expiration (optional ISO-8601).
 * `what` names the document in messages. S3F_ERR_CREDENTIALS when a required field is
 * missing or Expiration is invalid; S3F_ERR_NO_MEMORY. On failure *out is zeroed. */
enum s3f_status s3f__credentials_from_json(const struct s3f__json_object *o,
                                           const char *token_key, const char *source,
                                           const char *what, struct s3f__credentials *out,
                                           struct s3f_error *err);

/* Whether credentials a source answered are usable: NULL, or what is wrong with them (a
 * static string for a message; never the values). Refused: an AccessKeyId or
 * SecretAccessKey that is missing, empty or has a control character (they go into
 * headers), a SessionToken with one, or missing or empty where `need_token` (STS and
 * CreateSession always give one: an empty one would be sent as no token), and an
 * Expiration at or before the epoch where `has_expiration` (0 means "never expires"). */
const char *s3f__credentials_refused(const char *akid, const char *secret, const char *token,
                                     bool need_token, int64_t expiration,
                                     bool has_expiration);

/* Set all four strings; copies them. S3F_ERR_NO_MEMORY leaves *out zeroed. */
enum s3f_status s3f__credentials_set(struct s3f__credentials *out, const char *akid,
                                     const char *secret, const char *token, int64_t expiration,
                                     const char *source);

/* Read a small file whose content is a token (trimmed); at most `max` bytes. On success
 * *out is a malloc'ed string (caller frees it with s3f__wipe_free). Errors:
 * S3F_ERR_CREDENTIALS naming `what`, the path and the errno text (never the content) for a
 * missing, unreadable, empty or too large file; S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__read_token_file(const char *path, size_t max, const char *what, char **out,
                                     struct s3f_error *err);

/* The STS AssumeRoleWithWebIdentity response or error document parser of the web identity
 * provider, for tests/fuzz/fuzz_sts.c: returns 0 when `body` is well-formed XML (no DTD);
 * fields[] receives the text (malloc'ed, free each with s3f__wipe_free; NULL when absent)
 * of Credentials/AccessKeyId, SecretAccessKey, SessionToken, Expiration, Error/Code,
 * Error/Message and RequestId, in that order, also when it returns -1. */
#define S3F__STS_FIELDS 7
int s3f__sts_parse_fields(const char *body, size_t len, char *fields[S3F__STS_FIELDS]);

/* The credentials of an STS AssumeRoleWithWebIdentity or S3 Express CreateSession answer,
 * its fields as s3f__sts_parse_fields gives them (trimmed here): all four required,
 * Expiration ISO-8601, checked by s3f__credentials_refused. S3F_ERR_BAD_RESPONSE with what
 * is wrong in `why`; S3F_ERR_NO_MEMORY. On failure *out is zeroed. */
enum s3f_status s3f__sts_credentials(char *const fields[S3F__STS_FIELDS], const char *source,
                                     struct s3f__credentials *out, char *why, size_t why_len);

/* ---- the network providers' HTTP helper (credentials_http.c) ---- */

#define S3F__TOKEN_FILE_MAX ((size_t)64 << 10) /* a token file's bytes read at most */

struct s3f__fetch_request {
    const char *method;        /* "GET", "PUT" (empty body), "POST" */
    const char *url;
    const char *headers[8];    /* "Name: value", NULL-terminated; may hold secrets */
    const char *body;          /* POST only */
    size_t body_len;
    uint32_t connect_timeout_ms;
    uint32_t timeout_ms;
    bool no_proxy;             /* link-local metadata endpoints never go through a proxy */
};

struct s3f__fetch_response {
    long status;
    struct s3f__buf body;      /* capped at 64 KiB (credentials_http.c) */
    bool oom;                  /* the body stopped for want of memory, not at the cap */
};

/* libcurl's global initialisation, once per process; false when it failed. */
bool s3f__fetch_curl_init(void);
void s3f__fetch_response_init(struct s3f__fetch_response *rs);
/* Wipes the body (it may hold secrets) and frees it. */
void s3f__fetch_response_cleanup(struct s3f__fetch_response *rs);
/* Perform the request. S3F_OK when a response arrived (any HTTP status, in rs->status);
 * else S3F_ERR_CONNECT, S3F_ERR_TIMEOUT, S3F_ERR_TLS, S3F_ERR_NETWORK, S3F_ERR_BAD_RESPONSE
 * (body too large), S3F_ERR_INVALID_URI or S3F_ERR_NO_MEMORY, with a short reason in `why`
 * (never a header or body). rs->body is reset first. */
enum s3f_status s3f__fetch_perform(const struct s3f__chain_settings *s,
                                   const struct s3f__fetch_request *rq,
                                   struct s3f__fetch_response *rs, char *why, size_t why_len);
/* Whether a failed attempt is worth repeating (a transport failure, a 5xx, a 429). */
bool s3f__fetch_retryable(enum s3f_status st, long http_status);
/* The sleep before attempt `attempt` (1: the first retry): 50, 100, 200 ... ms, jittered. */
void s3f__fetch_backoff(int attempt);
/* The one retry loop of the container and IMDS fetches: up to `attempts` attempts, backoff
 * between them, while s3f__fetch_retryable; the last attempt's status (rs, why its own). */
enum s3f_status s3f__fetch_retried(const struct s3f__chain_settings *s,
                                   const struct s3f__fetch_request *rq,
                                   struct s3f__fetch_response *rs, int attempts, char *why,
                                   size_t why_len);

/* Free with wiping (for secrets). NULL ok. */
void s3f__wipe_free(char *s);

#endif
