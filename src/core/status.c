/* Status codes and the error struct. */
#include <stdio.h>
#include <string.h>

#include "core.h"

struct status_desc {
    const char *name;
    const char *text;
};

static const struct status_desc descs[] = {
    [S3F_OK] = {"S3F_OK", "success"},
    [S3F_ERR_INVALID_ARGUMENT] = {"S3F_ERR_INVALID_ARGUMENT", "invalid argument"},
    [S3F_ERR_INVALID_URI] = {"S3F_ERR_INVALID_URI", "invalid URI"},
    [S3F_ERR_NO_MEMORY] = {"S3F_ERR_NO_MEMORY", "out of memory"},
    [S3F_ERR_NO_CREDENTIALS] = {"S3F_ERR_NO_CREDENTIALS", "no credentials found"},
    [S3F_ERR_CREDENTIALS] = {"S3F_ERR_CREDENTIALS", "credentials provider failed"},
    [S3F_ERR_CONFIG] = {"S3F_ERR_CONFIG", "invalid configuration"},
    [S3F_ERR_CONNECT] = {"S3F_ERR_CONNECT", "could not connect"},
    [S3F_ERR_TIMEOUT] = {"S3F_ERR_TIMEOUT", "timed out"},
    [S3F_ERR_NETWORK] = {"S3F_ERR_NETWORK", "network error"},
    [S3F_ERR_TLS] = {"S3F_ERR_TLS", "TLS error"},
    [S3F_ERR_S3] = {"S3F_ERR_S3", "S3 error"},
    [S3F_ERR_NOT_FOUND] = {"S3F_ERR_NOT_FOUND", "not found"},
    [S3F_ERR_NO_SUCH_BUCKET] = {"S3F_ERR_NO_SUCH_BUCKET", "no such bucket"},
    [S3F_ERR_ACCESS_DENIED] = {"S3F_ERR_ACCESS_DENIED", "access denied"},
    [S3F_ERR_EXPIRED_CREDENTIALS] = {"S3F_ERR_EXPIRED_CREDENTIALS", "credentials expired"},
    [S3F_ERR_PRECONDITION_FAILED] = {"S3F_ERR_PRECONDITION_FAILED", "precondition failed"},
    [S3F_ERR_THROTTLED] = {"S3F_ERR_THROTTLED", "throttled by the server"},
    [S3F_ERR_SERVER] = {"S3F_ERR_SERVER", "server error"},
    [S3F_ERR_BAD_RESPONSE] = {"S3F_ERR_BAD_RESPONSE", "malformed response"},
    [S3F_ERR_IO] = {"S3F_ERR_IO", "local I/O error"},
    [S3F_ERR_CHECKSUM] = {"S3F_ERR_CHECKSUM", "checksum mismatch"},
    [S3F_ERR_ABORTED] = {"S3F_ERR_ABORTED", "aborted"},
    [S3F_ERR_UNSUPPORTED] = {"S3F_ERR_UNSUPPORTED", "not supported"},
    [S3F_ERR_INVALID_RANGE] = {"S3F_ERR_INVALID_RANGE", "invalid range"},
    [S3F_ERR_INTERNAL] = {"S3F_ERR_INTERNAL", "internal error"},
};

const char *s3f_strerror(enum s3f_status status) {
    if ((unsigned)status < S3F_ARRAY_LEN(descs) && descs[status].text)
        return descs[status].text;
    return "unknown status";
}

const char *s3f_status_name(enum s3f_status status) {
    if ((unsigned)status < S3F_ARRAY_LEN(descs) && descs[status].name)
        return descs[status].name;
    return "S3F_ERR_UNKNOWN";
}

void s3f_error_clear(struct s3f_error *err) {
    if (err)
        memset(err, 0, sizeof(*err));
}

void s3f__strlcpyn(char *dst, const char *src, size_t src_len, size_t dst_len) {
    if (!dst || dst_len == 0)
        return;
    if (!src)
        src_len = 0;
    size_t n = src_len < dst_len - 1 ? src_len : dst_len - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

void s3f__strlcpy(char *dst, const char *src, size_t dst_len) {
    s3f__strlcpyn(dst, src, src ? strlen(src) : 0, dst_len);
}

enum s3f_status s3f__error_set(struct s3f_error *err, enum s3f_status status,
                               const char *operation, const char *resource, const char *fmt,
                               ...) {
    if (!err)
        return status;
    err->status = status;
    if (operation)
        s3f__strlcpy(err->operation, operation, sizeof(err->operation));
    if (resource)
        s3f__strlcpy(err->resource, resource, sizeof(err->resource));
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return status;
}

size_t s3f_error_format(const struct s3f_error *err, char *buf, size_t len) {
    if (!err)
        return (size_t)snprintf(buf, len, "no error");
    char http[32] = "";
    if (err->http_status)
        snprintf(http, sizeof(http), " (HTTP %d)", err->http_status);
    char attempts[48] = "";
    if (err->attempts > 1)
        snprintf(attempts, sizeof(attempts), " after %d attempts", err->attempts);
    char rid[200] = "";
    if (err->request_id[0])
        snprintf(rid, sizeof(rid), " [request id: %s]", err->request_id);
    const char *what = err->code[0] ? err->code : s3f_strerror(err->status);
    int n = snprintf(buf, len, "%s%s%s%s: %s%s%s%s%s", err->operation[0] ? err->operation : "s3flash",
                     err->resource[0] ? " " : "", err->resource, attempts, what, http,
                     err->message[0] ? ": " : "", err->message, rid);
    return n < 0 ? 0 : (size_t)n;
}
