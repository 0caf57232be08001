/* src/s3: the request options of a client (request_options.c): server-side encryption
 * (SSE-S3, SSE-KMS, DSSE-KMS, SSE-C), storage class, canned ACL, expected bucket owner,
 * the User-Agent suffix, and the HTTP(S) proxy. Resolved once at client creation; the
 * executor (request.c) asks, per request, which headers its operation carries, so that
 * every operation builder stays unaware of them (docs/CONFIGURATION.md has the table). */
#ifndef S3F_S3_REQUEST_OPTIONS_H
#define S3F_S3_REQUEST_OPTIONS_H

#include "core/core.h"

/* The most headers s3f__request_options_headers adds to one request. */
#define S3F_REQUEST_OPTION_HEADERS_MAX 16

struct s3f__request_options {
    char *sse;                  /* x-amz-server-side-encryption, or NULL */
    char *sse_kms_key_id;
    char *sse_context_b64;      /* base64 of the encryption context's JSON */
    int bucket_key;             /* 1: true, -1: false, 0: not sent */
    bool sse_c;                 /* a customer key (SSE-C) for the objects read and written */
    char sse_c_key[48];         /* its base64 (a secret: wiped at cleanup) */
    char sse_c_md5[32];         /* base64 of its MD5 */
    bool copy_source_sse_c;     /* a customer key for the sources of copies */
    char copy_source_key[48];
    char copy_source_md5[32];
    char *storage_class;
    char *expected_bucket_owner;
    char *acl;
    char *user_agent;           /* "[PREFIX ]s3flash/VERSION[ EXTRA]" */
};

/* Validate and copy the request options of `opts`. On failure `o` is cleaned and err says
 * which option was wrong (never quoting a key). */
enum s3f_status s3f__request_options_init(struct s3f__request_options *o,
                                          const struct s3f_client_options *opts,
                                          struct s3f_error *err);
/* Free and wipe (the SSE-C keys). */
void s3f__request_options_cleanup(struct s3f__request_options *o);

/* The headers the options put on a request of `operation` to `bucket` (NULL: none;
 * copy_source: a HeadObject of a copy's source, which carries the copy source's SSE-C key),
 * appended to hdrs (room for S3F_REQUEST_OPTION_HEADERS_MAX); returns how many. Values
 * point into `o`. */
size_t s3f__request_options_headers(const struct s3f__request_options *o, const char *operation,
                                    const char *bucket, bool copy_source,
                                    struct s3f__header *hdrs);

/* Whether a header line ("name: value") carries a secret and must be logged redacted:
 * Authorization, the security and session tokens, the SSE-C keys. */
bool s3f__header_is_secret(const char *line);

/* Add to an error answered to `operation` a hint naming the option it may lack (an SSE-C
 * object read without its key, or with another one). */
void s3f__request_options_hint(const struct s3f__request_options *o, const char *operation,
                               bool copy_source, struct s3f_error *e);

/* The proxy of a client's S3 requests (request_options.c, s3f__proxy_resolve). */
struct s3f__proxy_config {
    char *http_proxy;           /* for http:// URLs; NULL: none */
    char *https_proxy;          /* for https:// URLs; NULL: none */
    char *no_proxy;             /* hosts reached directly; NULL: none */
    char *ca_bundle;            /* to verify an https:// proxy; NULL: the endpoint's */
};
/* The proxies from `opts`, else the environment; profile_ca_bundle: the profile's
 * proxy_ca_bundle (or NULL). */
enum s3f_status s3f__proxy_resolve(const struct s3f_client_options *opts,
                                   const char *profile_ca_bundle, struct s3f__proxy_config *out,
                                   struct s3f_error *err);
void s3f__proxy_cleanup(struct s3f__proxy_config *p);
/* One DEBUG line of the proxies in use (passwords in their URLs redacted). */
void s3f__proxy_log(const struct s3f__proxy_config *p, const struct s3f__logger *logger);

#endif
