/* Logging: to a caller's sink or stderr. Callers must never pass secrets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

enum s3f_log_level s3f__log_level_from_env(void) {
    const char *v = getenv("S3FLASH_LOG");
    if (!v || !*v)
        return S3F_LOG_OFF;
    static const char *names[] = {"off", "error", "warn", "info", "debug", "trace"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(names); i++)
        if (s3f__strieq(v, names[i]))
            return (enum s3f_log_level)i;
    return S3F_LOG_WARN;
}

void s3f__log(const struct s3f__logger *lg, enum s3f_log_level level, const char *fmt, ...) {
    if (!s3f__log_enabled(lg, level))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (lg->fn) {
        lg->fn(lg->user_data, level, msg);
        return;
    }
    static const char *tags[] = {"", "error", "warn", "info", "debug", "trace"};
    uint64_t ms = s3f__now_ms();
    fprintf(stderr, "[s3flash %llu.%03llu %s] %s\n", (unsigned long long)(ms / 1000),
            (unsigned long long)(ms % 1000), tags[level], msg);
}
