/* AWS Signature Version 4a: ECDSA P-256 over SHA-256, the key derived from the credentials
 * as the AWS SDKs derive it (aws-c-auth's key_derivation.c). The canonical request and the
 * string to sign are SigV4's (sigv4.c, with s3f__sigv4_config.region_set set): the algorithm
 * AWS4-ECDSA-P256-SHA256, a scope without region ("YYYYMMDD/service/aws4_request") and the
 * region set signed as X-Amz-Region-Set. Signatures are randomised (ECDSA): check them by
 * verifying, never by comparing.
 *
 * The secret and the private key never appear in what these return, in errors or in memory
 * left behind. Thread-safe: no shared state. */
#ifndef S3F_AUTH_SIGV4A_H
#define S3F_AUTH_SIGV4A_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#define S3F__SIGV4A_ALGORITHM "AWS4-ECDSA-P256-SHA256"
/* hex of a DER ECDSA P-256 signature: at most 72 bytes */
#define S3F__SIGV4A_SIGNATURE_HEX_MAX (2 * 72 + 1)

/* The private key (32 bytes, big-endian) of the credentials: the counter-mode HMAC-SHA256
 * KDF (NIST SP 800-108) keyed with "AWS4A"+secret over
 * 00000001 || "AWS4-ECDSA-P256-SHA256" || 00 || access_key_id || counter || 00000100,
 * counter 1, 2, ... until the candidate k0 <= n-2 (n the order of P-256); the key is k0+1.
 * Depends on the credentials only (not on date, region or service): cache it per
 * credentials. Errors: S3F_ERR_INVALID_ARGUMENT (empty key id or secret),
 * S3F_ERR_NO_MEMORY, S3F_ERR_INTERNAL (OpenSSL failed, or 254 counters rejected). */
enum s3f_status s3f__sigv4a_derive_key(const char *access_key_id, const char *secret,
                                       uint8_t priv[32], struct s3f_error *err);

/* The public key (affine x, y, big-endian) of a private key. S3F_ERR_INTERNAL, NO_MEMORY. */
enum s3f_status s3f__sigv4a_public_key(const uint8_t priv[32], uint8_t x[32], uint8_t y[32],
                                       struct s3f_error *err);

/* ECDSA-SHA256 signature of msg (the string to sign) with priv, DER, as lowercase hex into
 * sig_hex (S3F__SIGV4A_SIGNATURE_HEX_MAX bytes). */
enum s3f_status s3f__sigv4a_sign(const uint8_t priv[32], const void *msg, size_t len,
                                 char sig_hex[S3F__SIGV4A_SIGNATURE_HEX_MAX],
                                 struct s3f_error *err);

/* Whether sig_hex (DER, hex) is a valid ECDSA-SHA256 signature of msg by the public key
 * (x, y). false for a malformed signature or key. */
bool s3f__sigv4a_verify(const uint8_t x[32], const uint8_t y[32], const void *msg, size_t len,
                        const char *sig_hex);

#endif /* S3F_AUTH_SIGV4A_H */
