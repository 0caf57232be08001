/* src/auth: who the requests are signed as, and how.
 * Owns: SigV4 header signing and presigning (sigv4.c, sigv4.h); the credentials: values,
 *   snapshots with their signing keys, the cached provider and its refresher thread
 *   (credentials.c, this header), the default chain and its local providers
 *   (credentials_chain.c), the network providers STS, container and IMDS
 *   (credentials_http.c); the shared config and credentials files (profile.c) and the
 *   providers' JSON (json.c).
 * May call: core/; libcurl and expat (the network providers' own small fetches and STS
 *   XML); of http/ only s3f__http_status_of_curl (one map of CURLcode to statuses).
 *   Never s3/ or xfer/. Called by s3/ (client.c, the executor).
 */
/* AWS credentials: static credentials and the standard default chain, with caching and
 * refresh of temporary credentials.
 *
 * The default chain, in order (the first provider that is configured answers; a provider
 * that is configured but fails is an error, not a skip, as in the AWS SDKs):
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
 *   2. the profile's static keys: aws_access_key_id, aws_secret_access_key,
 *      aws_session_token (credentials file or config file)
 *   3. the profile's credential_process (run with /bin/sh -c; JSON on stdout)
 *   4. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME),
 *      else the profile's web_identity_token_file / role_arn / role_session_name; STS
 *      AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS, the profile's services `sts`
 *      endpoint_url, else https://sts.<region>.amazonaws.com (region: AWS_REGION,
 *      AWS_DEFAULT_REGION, the profile's region; none: https://sts.amazonaws.com)
 *   5. container (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on
 *      http://169.254.170.2 (S3FLASH_CONTAINER_CREDENTIALS_HOST overrides the host in test builds, -Dtest_hooks),
 *      or AWS_CONTAINER_CREDENTIALS_FULL_URI (http only for loopback and the ECS/EKS
 *      addresses); Authorization from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at each
 *      fetch) or AWS_CONTAINER_AUTHORIZATION_TOKEN
 *   6. EC2 instance metadata, IMDSv2 only (no IMDSv1 fallback) at
 *      AWS_EC2_METADATA_SERVICE_ENDPOINT or the profile's ec2_metadata_service_endpoint,
 *      else http://169.254.169.254; AWS_EC2_METADATA_DISABLED=true skips it;
 *      AWS_METADATA_SERVICE_TIMEOUT (s, default 1) and AWS_METADATA_SERVICE_NUM_ATTEMPTS
 *      (default 1) as in botocore.
 * A profile whose only credentials setting is unsupported here (role_arn with
 * source_profile or credential_source, SSO) fails with S3F_ERR_UNSUPPORTED.
 * The environment and the profile are read when the provider is created. The provider that
 * answered first is remembered, and refreshes go to it alone (as botocore does).
 * Secrets and tokens are never logged nor put into error messages. */
#ifndef S3F_AUTH_CREDENTIALS_H
#define S3F_AUTH_CREDENTIALS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth/profile.h"
#include "auth/sigv4.h"
#include "core/core.h"

struct s3f__credentials {
    char *access_key_id;
    char *secret_access_key;
    char *session_token;     /* NULL when none */
    int64_t expiration;      /* seconds since the epoch; 0 = never expires */
    char source[48];         /* "environment", "profile:NAME", "process", "web-identity",
                                "container", "imds", "static" */
};

/* Free the strings, wiping the secret and the token first (explicit_bzero); the struct is
 * zeroed and can be reused. NULL is accepted. */
void s3f__credentials_cleanup(struct s3f__credentials *c);

/* Deep copy of src into dst (dst is overwritten, not cleaned first). S3F_ERR_NO_MEMORY
 * leaves dst zeroed. */
enum s3f_status s3f__credentials_copy(struct s3f__credentials *dst,
                                      const struct s3f__credentials *src);

struct s3f__credentials_options {
    /* Profile name; NULL: AWS_PROFILE, else "default". Ignored when `config` is set. */
    const char *profile;
    /* An already loaded profile (read at creation; need not outlive the provider). NULL:
     * the provider loads it with s3f__aws_config_load(profile). */
    const struct s3f__aws_config *config;
    /* 0: 2000 ms (STS, container). IMDS uses its own 1 s default. */
    uint32_t connect_timeout_ms;
    /* 0: 5000 ms for a whole request (STS, container). */
    uint32_t timeout_ms;
    /* 0: 60000 ms for credential_process to finish. */
    uint32_t process_timeout_ms;
    /* CA bundle for the https providers. NULL: AWS_CA_BUNDLE, the profile's ca_bundle,
     * else the system default. */
    const char *ca_bundle;
    /* 0: 300 s. Temporary credentials are refreshed in the background when fewer seconds
     * than this (or than half their lifetime, if shorter) remain. */
    uint32_t refresh_window_s;
    /* Optional; the provider keeps the pointer, which must outlive it. */
    const struct s3f__logger *logger;
};

/* Thread-safe. Credentials are handed out as immutable, reference-counted snapshots
 * (s3f__credentials_acquire); a request never runs a provider while the current snapshot
 * is usable (more than min(60 s, lifetime / 8) left, and not rejected by the server).
 * Temporary credentials are refreshed in the background, by one refresher thread per
 * provider (started with the first temporary snapshot, again in a forked child; stopped by
 * _free), min(refresh_window_s, lifetime / 2) before they expire; a failed refresh is
 * retried after 1, 2, 4 ... 60 s on that thread's timer while the current snapshot stays in
 * use. Only a caller that finds no usable snapshot at all (the first request, credentials
 * that expired before a refresh could succeed, or a token the server rejected) blocks: it
 * asks the refresher to fetch now and waits, with every other such caller, for that one
 * fetch (the thread is then started for any provider of the chain; it idles while the
 * credentials do not expire). The provider's retries and backoff thus never sleep on a
 * request's thread. */
struct s3f__credentials_provider;

/* A provider that always returns these credentials (source "static"); the strings are
 * copied. S3F_ERR_INVALID_ARGUMENT when akid or secret is NULL or empty; token may be NULL.
 * Free with s3f__credentials_provider_free. */
enum s3f_status s3f__credentials_provider_new_static(const char *akid, const char *secret,
                                                     const char *token,
                                                     struct s3f__credentials_provider **out,
                                                     struct s3f_error *err);

/* The default chain (see above). Reads the environment and the profile now; fetches
 * nothing until the first s3f__credentials_get. Errors: those of s3f__aws_config_load
 * (S3F_ERR_CONFIG for a bad file or a missing named profile), S3F_ERR_NO_MEMORY.
 * `o` may be NULL (all defaults). Free with s3f__credentials_provider_free. */
enum s3f_status s3f__credentials_provider_new_default(const struct s3f__credentials_options *o,
                                                      struct s3f__credentials_provider **out,
                                                      struct s3f_error *err);

/* One generation of credentials. Immutable except the signing-key cache (own lock); freed
 * when the provider and every holder have released it. */
struct s3f__signing_key_slot {
    bool used;
    char date[9];
    char region[S3F__SIGV4_NAME_MAX + 1];
    char service[S3F__SIGV4_NAME_MAX + 1];
    uint8_t key[32]; /* secret: wiped when the snapshot is freed */
};
struct s3f__credentials_snapshot {
    struct s3f__credentials creds;
    uint64_t generation; /* 1, 2, ... per provider: which credentials signed a request */
    int64_t fetched_at;  /* wall seconds */
    atomic_uint refs;
    pthread_mutex_t key_lock;
    struct s3f__signing_key_slot keys[4]; /* guarded by key_lock */
    unsigned next_key;
    uint64_t key_hits, key_derivations;   /* for tests */
};

/* The current snapshot, with a reference the caller drops with s3f__credentials_release.
 * Blocks only when no usable snapshot exists, until the refresher's fetch (or, without a
 * refresher, this thread's) completes. Errors as for s3f__credentials_get; *out is NULL
 * then. */
enum s3f_status s3f__credentials_acquire(struct s3f__credentials_provider *p,
                                         struct s3f__credentials_snapshot **out,
                                         struct s3f_error *err);
void s3f__credentials_release(struct s3f__credentials_snapshot *s); /* NULL ok */

/* A request parked until the next fetch completes (s3f__credentials_acquire_or_park). */
struct s3f__credentials_waiter {
    /* Called once, after the fetch completed (successfully or not), on the thread that
     * fetched (the refresher) with no lock of the provider held: re-queue the request (it
     * calls s3f__credentials_acquire_or_park again). Must not block for long. */
    void (*ready)(struct s3f__credentials_waiter *w);
    struct s3f__credentials_waiter *next; /* the provider's */
    uint64_t seen;                         /* fetches completed when parked */
    bool parked_before;                    /* parked once: a failed fetch since is the error */
};

/* As s3f__credentials_acquire, without blocking on a fetch: S3F_OK with *out set when
 * usable credentials exist; an error (that of the fetch that completed since `w` was
 * parked, or the client being freed); or S3F_OK with *out NULL and *parked true: no usable
 * credentials, the refresher was asked to fetch and `w` waits for that fetch (w->ready).
 * This is what the executor uses, so that a request whose credentials expired or were
 * rejected (ExpiredToken) waits off its I/O thread. Without a refresher thread (it could
 * not start) it blocks as s3f__credentials_acquire does. Clear `w` (zero) before its first
 * use by a request. */
enum s3f_status s3f__credentials_acquire_or_park(struct s3f__credentials_provider *p,
                                                 struct s3f__credentials_snapshot **out,
                                                 struct s3f__credentials_waiter *w,
                                                 bool *parked, struct s3f_error *err);

/* The server rejected the token of snapshot `generation` (ExpiredToken,
 * TokenRefreshRequired, InvalidToken): when it is still the current one, the next acquire
 * fetches new credentials instead of handing it out. No-op for a static provider. */
void s3f__credentials_invalidate(struct s3f__credentials_provider *p, uint64_t generation);

/* Ask the refresher (when running: temporary credentials were fetched) to refresh now
 * rather than at the scheduled time; returns at once. No-op for a static provider. */
void s3f__credentials_refresh_now(struct s3f__credentials_provider *p);

/* The SigV4 signing key of the snapshot's secret for (date8 "YYYYMMDD", region, service),
 * derived once and cached in the snapshot (so per credentials generation). Errors as for
 * s3f__sigv4_derive_key. */
enum s3f_status s3f__credentials_signing_key(struct s3f__credentials_snapshot *s,
                                             const char *date8, const char *region,
                                             const char *service, uint8_t key[32],
                                             struct s3f_error *err);

/* Current credentials, fetching them when no usable ones exist. *out receives a copy the
 * caller frees with s3f__credentials_cleanup (on failure *out is zeroed). Errors:
 * S3F_ERR_NO_CREDENTIALS (no provider configured; the message lists what was tried),
 * S3F_ERR_CREDENTIALS (a configured provider failed: bad process output, STS error with
 * its code/message/request id in err, unreachable container endpoint...),
 * S3F_ERR_EXPIRED_CREDENTIALS (the provider returned expired credentials),
 * S3F_ERR_UNSUPPORTED, S3F_ERR_CONFIG, S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__credentials_get(struct s3f__credentials_provider *p,
                                     struct s3f__credentials *out, struct s3f_error *err);

/* Number of fetches the provider has made (successful or not), and how many of them the
 * refresher thread made; for tests and logs. */
uint64_t s3f__credentials_provider_fetch_count(struct s3f__credentials_provider *p);
uint64_t s3f__credentials_provider_background_count(struct s3f__credentials_provider *p);

/* A provider whose credentials come from `fetch` (S3 Express sessions: CreateSession):
 * cached, refreshed in the background and invalidated exactly as the chain's temporary
 * credentials are (see above); `fetch` runs on the provider's refresher thread (or the
 * caller's, when no thread can be started) and must fill *out with credentials that carry
 * an expiration, or return an error with err filled. `ud` must outlive the provider.
 * `refresh_window_s` 0: 300 s. Free with s3f__credentials_provider_free. */
typedef enum s3f_status (*s3f__credentials_fetch_fn)(void *ud, struct s3f__credentials *out,
                                                     struct s3f_error *err);
enum s3f_status s3f__credentials_provider_new_fn(s3f__credentials_fetch_fn fetch, void *ud,
                                                 uint32_t refresh_window_s,
                                                 const struct s3f__logger *logger,
                                                 struct s3f__credentials_provider **out,
                                                 struct s3f_error *err);

/* S3 Express One Zone's CreateSession, as one blocking GET (its own libcurl handle, never
 * the client's I/O threads, so a request waiting for a session cannot starve the request
 * that makes it): the caller has built and signed the request (url, headers "Name: value",
 * at most 7, wiped after use by the caller). A 200's CreateSessionResult/Credentials become
 * *out (source `source`); an error document gives S3F_ERR_ACCESS_DENIED (403),
 * S3F_ERR_NOT_FOUND (404) or S3F_ERR_CREDENTIALS with S3's code, message and request id in
 * err; transport failures S3F_ERR_CREDENTIALS naming what failed. */
struct s3f__session_fetch {
    const char *url;
    const char *headers[8];
    const char *resource;     /* "s3://bucket", for errors */
    const char *source;       /* credentials' source, "s3express" */
    const char *ca_bundle;    /* NULL: the system store */
    uint32_t connect_timeout_ms, timeout_ms; /* 0: 2000 ms, 5000 ms */
    const struct s3f__logger *logger;
};
enum s3f_status s3f__credentials_fetch_session(const struct s3f__session_fetch *f,
                                               struct s3f__credentials *out,
                                               struct s3f_error *err);

/* Stop the refresher (a credential_process it runs is killed), free the provider and drop
 * its snapshot (wiped once the last holder releases it). No call may be in flight. NULL ok. */
void s3f__credentials_provider_free(struct s3f__credentials_provider *p);

#endif
