/* What S3's answers mean for a request: the status of an error (code and HTTP status), whether
 * AWS standard retry mode retries it, the client's retry quota (a token bucket) and the
 * backoff between attempts. The executor (s3/request.c) asks; nothing here sends. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "s3/client.h"
#include "s3/retry.h"

/* ---- error codes -------------------------------------------------------------------------- */
static bool code_in(const char *code, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(code, list[i]) == 0)
            return true;
    return false;
}

static const char *const throttling_codes[] = {
    "SlowDown",          "Throttling",          "ThrottlingException",
    "ThrottledException", "RequestThrottledException", "TooManyRequestsException",
    "ProvisionedThroughputExceededException",     "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException",
    "RequestThrottled",  "EC2ThrottledException",
};

enum s3f_status s3f__s3_error_status(int http_status, const char *code) {
    static const char *const not_found[] = {"NoSuchKey", "NoSuchUpload", "NoSuchVersion"};
    static const char *const denied[] = {"AccessDenied",      "SignatureDoesNotMatch",
                                         "InvalidAccessKeyId", "AllAccessDisabled",
                                         "AccountProblem",    "NotSignedUp",
                                         "InvalidSecurity",   "RequestTimeTooSkewed"};
    static const char *const expired[] = {"ExpiredToken", "RequestExpired",
                                          "TokenRefreshRequired", "ExpiredTokenException"};
    static const char *const server[] = {"InternalError", "ServiceUnavailable"};
    if (code && *code) {
        if (code_in(code, not_found, S3F_ARRAY_LEN(not_found)))
            return S3F_ERR_NOT_FOUND;
        if (strcmp(code, "NoSuchBucket") == 0)
            return S3F_ERR_NO_SUCH_BUCKET;
        if (code_in(code, denied, S3F_ARRAY_LEN(denied)))
            return S3F_ERR_ACCESS_DENIED;
        if (code_in(code, expired, S3F_ARRAY_LEN(expired)))
            return S3F_ERR_EXPIRED_CREDENTIALS;
        if (strcmp(code, "PreconditionFailed") == 0)
            return S3F_ERR_PRECONDITION_FAILED;
        if (strcmp(code, "InvalidRange") == 0)
            return S3F_ERR_INVALID_RANGE;
        if (code_in(code, throttling_codes, S3F_ARRAY_LEN(throttling_codes)))
            return S3F_ERR_THROTTLED;
        if (code_in(code, server, S3F_ARRAY_LEN(server)))
            return S3F_ERR_SERVER;
    }
    switch (http_status) {
    case 404: return S3F_ERR_NOT_FOUND;
    case 403: return S3F_ERR_ACCESS_DENIED;
    case 412: return S3F_ERR_PRECONDITION_FAILED;
    case 416: return S3F_ERR_INVALID_RANGE;
    case 429: return S3F_ERR_THROTTLED;
    default: break;
    }
    if (http_status >= 500 && http_status <= 599)
        return S3F_ERR_SERVER;
    return S3F_ERR_S3;
}

bool s3f__s3_error_retryable(int http_status, const char *code) {
    static const char *const transient[] = {"InternalError", "ServiceUnavailable",
                                            "RequestTimeout", "RequestTimeoutException",
                                            "PriorRequestNotComplete"};
    if (code && *code &&
        (code_in(code, transient, S3F_ARRAY_LEN(transient)) ||
         code_in(code, throttling_codes, S3F_ARRAY_LEN(throttling_codes))))
        return true;
    return http_status == 500 || http_status == 502 || http_status == 503 ||
           http_status == 504 || http_status == 429;
}

/* ---- the retry quota and backoff -------------------------------------------------- */

bool s3f__retry_acquire(struct s3f_client *c, int cost) {
    bool ok;
    S3F_ASSERT(cost > 0);
    pthread_mutex_lock(&c->retry.lock);
    ok = c->retry.tokens >= cost;
    if (ok)
        c->retry.tokens -= cost;
    pthread_mutex_unlock(&c->retry.lock);
    return ok;
}

void s3f__retry_refund(struct s3f_client *c, int amount) {
    pthread_mutex_lock(&c->retry.lock);
    c->retry.tokens += amount;
    if (c->retry.tokens > c->retry.capacity)
        c->retry.tokens = c->retry.capacity;
    S3F_ASSERT(c->retry.tokens >= 0);
    pthread_mutex_unlock(&c->retry.lock);
}

/* Full-jitter exponential backoff: random(0,1) * min(2^(attempt-1), 20) seconds. The
 * base can be scaled down for tests with S3FLASH_RETRY_BASE_MS (default 1000). */
static uint64_t backoff_base_ms = 1000;
static pthread_once_t backoff_once = PTHREAD_ONCE_INIT;
static void backoff_init(void) {
    const char *b = getenv("S3FLASH_RETRY_BASE_MS");
    uint64_t v = b && *b ? strtoull(b, NULL, 10) : 1000;
    backoff_base_ms = v ? v : 1;
}

uint64_t s3f__retry_backoff_ms(int attempt) {
    pthread_once(&backoff_once, backoff_init); /* read by every I/O thread */
    uint64_t base = backoff_base_ms;
    uint64_t cap = base << (attempt - 1 < 16 ? attempt - 1 : 16);
    if (cap > S3F__RETRY_MAX_BACKOFF_MS)
        cap = S3F__RETRY_MAX_BACKOFF_MS;
    return (uint64_t)(s3f__random_unit() * (double)cap);
}
