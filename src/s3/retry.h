/* What S3's answers mean for a request: error statuses, the retry decision of AWS standard
 * mode, the retry quota and the backoff (retry.c). Used by the executor (s3/request.c) and by
 * the XML parsers for the status of an <Error> document. */
#ifndef S3F_S3_RETRY_H
#define S3F_S3_RETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"

struct s3f_client;

#define S3F__RETRY_COST 5          /* tokens a retry takes from the client's quota */
#define S3F__RETRY_TIMEOUT_COST 10 /* ... a retry after a time-out or transport failure */
#define S3F__RETRY_MAX_BACKOFF_MS 20000u

/* Status for an S3 error code and HTTP status (either may be 0/NULL/""). The code decides
 * first: NoSuchKey, NoSuchUpload, NoSuchVersion -> NOT_FOUND; NoSuchBucket -> NO_SUCH_BUCKET;
 * AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, AllAccessDisabled,
 * AccountProblem, NotSignedUp, InvalidSecurity, RequestTimeTooSkewed -> ACCESS_DENIED;
 * ExpiredToken, RequestExpired, TokenRefreshRequired -> EXPIRED_CREDENTIALS;
 * PreconditionFailed -> PRECONDITION_FAILED; InvalidRange -> INVALID_RANGE; SlowDown and the
 * AWS throttling codes -> THROTTLED; InternalError, ServiceUnavailable -> SERVER. Then the
 * HTTP status: 404 -> NOT_FOUND, 403 -> ACCESS_DENIED, 412 -> PRECONDITION_FAILED,
 * 416 -> INVALID_RANGE, 429 -> THROTTLED, 5xx -> SERVER. Else S3F_ERR_S3. */
enum s3f_status s3f__s3_error_status(int http_status, const char *code);

/* Whether AWS standard retry mode retries this error: the transient codes InternalError,
 * ServiceUnavailable, RequestTimeout, RequestTimeoutException, PriorRequestNotComplete, the
 * throttling codes (SlowDown, Throttling, ThrottlingException, RequestThrottled, ...), HTTP
 * 500, 502, 503, 504, and 429. Not retried: RequestTimeTooSkewed (standard mode retries it
 * only after correcting its clock offset, which s3flash does not do: a skewed clock must be
 * fixed), ExpiredToken (the executor, s3/request.c, fetches new credentials and re-sends
 * once, as for TokenRefreshRequired and InvalidToken), and every other
 * 4xx, 501 NotImplemented included. */
bool s3f__s3_error_retryable(int http_status, const char *code);

/* Take `cost` tokens from the client's retry quota; false (nothing taken) when it has fewer. */
bool s3f__retry_acquire(struct s3f_client *c, int cost);
/* Give `amount` tokens back (after a success), up to the quota's capacity. */
void s3f__retry_refund(struct s3f_client *c, int amount);
/* Full-jitter exponential backoff before attempt `attempt` + 1: random(0,1) *
 * min(base * 2^(attempt-1), 20 s), base 1 s (S3FLASH_RETRY_BASE_MS for tests). */
uint64_t s3f__retry_backoff_ms(int attempt);

#endif /* S3F_S3_RETRY_H */
