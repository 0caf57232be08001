/* AWS Signature Version 4: header signing and presigned query strings. (No aws-chunked
 * chunk signer: Ceph RGW 16.2 stores an aws-chunked body with a trailer as it came, framing
 * included, so trailing checksums cannot replace the checksum pass before a part is sent;
 * nothing else needed it.)
 *
 * The signer is pure: it takes the request as it will go on the wire and returns what to
 * add to it. It never logs. The secret key and the signing key derived from it never appear
 * in any string it returns, in error messages, or in memory it leaves behind (intermediate
 * keys are wiped). Thread-safe: no shared state (a cached signing key is the caller's). */
#ifndef S3F_AUTH_SIGV4_H
#define S3F_AUTH_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/sigv4a.h"
#include "core/core.h"

#define S3F__SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define S3F__SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define S3F__SIGV4_STREAMING_PAYLOAD "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
#define S3F__SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3F__SIGV4_MAX_EXPIRES_S 604800u /* 7 days, the longest presigned URL AWS accepts */
#define S3F__SIGV4_NAME_MAX 64           /* longest region / service name accepted */
/* "YYYYMMDD/" region "/" service "/aws4_request" */
#define S3F__SIGV4_SCOPE_MAX (9 + S3F__SIGV4_NAME_MAX + 1 + S3F__SIGV4_NAME_MAX + 13 + 1)

struct s3f__sigv4_credentials {
    const char *access_key_id;
    const char *secret_access_key;
    const char *session_token; /* NULL or "" for none */
};

struct s3f__sigv4_request {
    const char *method; /* "GET", "PUT", ... */
    /* As sent on the wire, already percent-encoded, starting with '/' (NULL or "" = "/").
     * S3 (normalize_path false): each key byte encoded once with the AWS rules, '/' kept; the
     * signer uses it as is and rejects a byte that is neither unreserved, '/' nor %XX. */
    const char *path;
    /* As sent on the wire, without '?'; NULL or "" for none. The signer builds the
     * canonical query: split on '&', each name and value percent-decoded and re-encoded
     * with the AWS rules ('+' is a literal plus), sorted by name then value; "a" with no
     * '=' means "a=". Empty pieces ("a&&b") are ignored. */
    const char *query;
    /* Headers to sign; must include host. Names are case-insensitive; duplicates are
     * allowed (their values joined with ',' in the order given); values are trimmed and
     * each run of spaces/tabs inside becomes one space. Headers the signer adds itself
     * (x-amz-date, authorization, x-amz-security-token when a token is signed,
     * x-amz-content-sha256 when add_content_sha256_header) must not be given. */
    const struct s3f__header *headers;
    size_t n_headers;
    /* Lowercase hex SHA-256 of the body, or UNSIGNED-PAYLOAD,
     * STREAMING-AWS4-HMAC-SHA256-PAYLOAD (and the -TRAILER / STREAMING-UNSIGNED-PAYLOAD-TRAILER
     * variants). */
    const char *payload_hash;
};

struct s3f__sigv4_config {
    const char *region;  /* "us-east-1" */
    const char *service; /* "s3" */
    int64_t time;        /* seconds since the epoch (year 0000..9999) */
    /* false for S3: the path is used as given (no dot-segment removal, no second encoding).
     * true for other services: remove dot segments and empty segments, then percent-encode
     * the path again ('/' kept). */
    bool normalize_path;
    uint32_t expires_s; /* presign only: 1..604800 */
    /* Header signing only: add x-amz-content-sha256: payload_hash as a signed header
     * (S3 requires it; presigned URLs never carry it). */
    bool add_content_sha256_header;
    /* With a session token: false (default, what S3 wants) signs it (x-amz-security-token
     * header / X-Amz-Security-Token query parameter in the canonical request). true leaves
     * it out of the signature; it is still returned to be sent (header) or still appended to
     * the query before X-Amz-Signature (presign). */
    bool omit_session_token;
    /* Optional: the signing key for these credentials and the date, region and service of
     * this config, as s3f__sigv4_derive_key returns it (callers cache it per credentials
     * generation, date, region and service: see s3f__credentials_signing_key). NULL: the
     * signer derives it (4 HMACs). Never logged; the signer's copy is wiped. */
    const uint8_t *signing_key;
    /* SigV4a (sigv4a.h) when non-NULL: the region set ("*", or regions joined with ','),
     * signed as X-Amz-Region-Set; the algorithm is AWS4-ECDSA-P256-SHA256, the scope
     * "YYYYMMDD/service/aws4_request" (region is then not used), and signing_key, when
     * given, is the 32-byte private key of s3f__sigv4a_derive_key. */
    const char *region_set;
};

/* The SigV4 signing key: HMAC chain "AWS4"+secret -> date8 ("YYYYMMDD") -> region ->
 * service -> "aws4_request". Secret: the caller wipes it. Errors: S3F_ERR_INVALID_ARGUMENT
 * (empty secret, bad date, region or service), S3F_ERR_NO_MEMORY, S3F_ERR_INTERNAL (OpenSSL
 * failed). */
enum s3f_status s3f__sigv4_derive_key(const char *secret, const char *date8, const char *region,
                                      const char *service, uint8_t key[32],
                                      struct s3f_error *err);

/* Output of header signing. Headers to add to the request, in this order (see
 * s3f__sigv4_signed_headers): X-Amz-Security-Token (if any), X-Amz-Date,
 * X-Amz-Region-Set (SigV4a), x-amz-content-sha256 (if asked), Authorization. */
struct s3f__sigv4_signed {
    char amz_date[17];          /* X-Amz-Date value, "20150830T123600Z" */
    char *authorization;        /* Authorization value, malloc'ed */
    const char *security_token; /* X-Amz-Security-Token to send (points into the
                                   credentials), NULL if none */
    const char *content_sha256; /* x-amz-content-sha256 to send (points at the request's
                                   payload_hash), NULL unless add_content_sha256_header */
    const char *region_set;     /* X-Amz-Region-Set to send (points into the config), NULL
                                   unless SigV4a */
    /* lowercase hex: HMAC-SHA256 (64 digits; the seed signature of a streaming upload), or
     * SigV4a's DER ECDSA signature (up to 144 digits) */
    char signature[S3F__SIGV4A_SIGNATURE_HEX_MAX];
    char *canonical_request;    /* malloc'ed, for tests and TRACE logs (no secret in it) */
    char *string_to_sign;       /* malloc'ed, idem */
};

/* Sign a request for the Authorization header. On success fills *out (release it with
 * s3f__sigv4_signed_cleanup); on failure *out holds nothing to free (cleanup is still safe).
 * Errors: S3F_ERR_INVALID_ARGUMENT (message names the bad field or header, never a
 * secret), S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__sigv4_sign_headers(const struct s3f__sigv4_request *req,
                                        const struct s3f__sigv4_credentials *creds,
                                        const struct s3f__sigv4_config *cfg,
                                        struct s3f__sigv4_signed *out, struct s3f_error *err);

/* Frees the strings of *s and zeroes it. NULL and a zeroed struct are accepted. */
void s3f__sigv4_signed_cleanup(struct s3f__sigv4_signed *s);

/* The headers to add to the request after s3f__sigv4_sign_headers, in order, into
 * out[0..4]; returns how many (2..5). The values point into *s, the credentials, the config
 * and the request, so they live as long as those. */
size_t s3f__sigv4_signed_headers(const struct s3f__sigv4_signed *s, struct s3f__header out[5]);

/* Presign: returns in *query_out (malloc'ed, caller frees) the complete query string to put
 * after '?': the request's query as given, then X-Amz-Algorithm, X-Amz-Credential,
 * X-Amz-Date, X-Amz-SignedHeaders, X-Amz-Expires, [X-Amz-Security-Token,]
 * [X-Amz-Region-Set (SigV4a),] X-Amz-Signature (the order aws-c-auth uses). The signed headers are the request's headers only (host at
 * least); add_content_sha256_header is ignored. S3 presigned URLs use payload_hash
 * UNSIGNED-PAYLOAD. canonical_request_out and string_to_sign_out are optional (NULL), and
 * malloc'ed when given. The request's query must not already have X-Amz-* signing
 * parameters. Errors as for s3f__sigv4_sign_headers, plus expires_s out of 1..604800; on
 * error nothing is returned. */
enum s3f_status s3f__sigv4_presign(const struct s3f__sigv4_request *req,
                                   const struct s3f__sigv4_credentials *creds,
                                   const struct s3f__sigv4_config *cfg, char **query_out,
                                   char **canonical_request_out, char **string_to_sign_out,
                                   struct s3f_error *err);

#endif /* S3F_AUTH_SIGV4_H */
