/* Clocks and time formats. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

uint64_t s3f__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t s3f__now_ms(void) {
    return s3f__now_ns() / 1000000ull;
}

int64_t s3f__wall_time_s(void) {
    int64_t t = (int64_t)time(NULL);
#ifdef S3F_TEST_HOOKS
    /* test builds only (meson -Dtest_hooks) */
    const char *off = getenv("S3FLASH_TEST_CLOCK_OFFSET_S");
    if (off && *off)
        t += strtoll(off, NULL, 10);
#endif
    return t;
}

void s3f__time_amz(int64_t t, char *buf) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm);
}

int s3f__cond_init_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timespec s3f__deadline_ms(uint64_t ms) {
    uint64_t ns = s3f__now_ns() + ms * 1000000ull;
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    return ts;
}

void s3f__sleep_ms(uint64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int64_t to_epoch(int y, int mo, int d, int h, int mi, int s) {
    return days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + s;
}

/* Exactly n ASCII digits at *p (advanced past them) into *v. */
static bool digits(const char **p, int n, int *v) {
    int x = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return false;
        x = x * 10 + (c - '0');
    }
    *p += n;
    *v = x;
    return true;
}

/* One or two ASCII digits at *p (advanced past them) into *v. */
static bool digits12(const char **p, int *v) {
    if (!digits(p, 1, v))
        return false;
    int d;
    if (**p >= '0' && **p <= '9' && digits(p, 1, &d))
        *v = *v * 10 + d;
    return true;
}

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

static bool lit(const char **p, char c) {
    if (**p != c)
        return false;
    (*p)++;
    return true;
}

static bool time_ok(int mo, int d, int h, int mi, int sec) {
    return mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && sec <= 60;
}

/* Every field is a fixed number of digits and range-checked before any arithmetic, so no
 * input (tests/fuzz/fuzz_time.c) can overflow or read past the string. */
int s3f__time_parse(const char *s, int64_t *out) {
    if (!s)
        return -1;
    int y, mo, d, h, mi, sec;
    const char *p = skip_ws(s);
    if (p[0] >= '0' && p[0] <= '9') {
        /* ISO-8601: YYYY-MM-DDTHH:MM:SS[.fff][Z|+HH:MM|-HH:MM] */
        if (!digits(&p, 4, &y) || !lit(&p, '-') || !digits(&p, 2, &mo) || !lit(&p, '-') ||
            !digits(&p, 2, &d) || !lit(&p, 'T') || !digits(&p, 2, &h) || !lit(&p, ':') ||
            !digits(&p, 2, &mi) || !lit(&p, ':') || !digits(&p, 2, &sec))
            return -1;
        if (*p == '.') {
            p++;
            while (*p >= '0' && *p <= '9')
                p++;
        }
        int64_t off = 0;
        if (*p == 'Z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int sign = *p++ == '+' ? 1 : -1, oh, om;
            if (!digits(&p, 2, &oh) || !lit(&p, ':') || !digits(&p, 2, &om) || oh > 23 ||
                om > 59)
                return -1;
            off = (int64_t)(oh * 3600 + om * 60) * sign;
        }
        if (*skip_ws(p) != '\0' || !time_ok(mo, d, h, mi, sec))
            return -1;
        *out = to_epoch(y, mo, d, h, mi, sec) - off;
        return 0;
    }
    /* RFC 1123: "Sun, 30 Aug 2015 12:36:00 GMT" (UTC also taken) */
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int nwd = 0;
    while ((p[nwd] >= 'A' && p[nwd] <= 'Z') || (p[nwd] >= 'a' && p[nwd] <= 'z'))
        nwd++;
    if (nwd == 0 || nwd > 9)
        return -1;
    p += nwd;
    if (!lit(&p, ','))
        return -1;
    p = skip_ws(p);
    if (!digits12(&p, &d))
        return -1;
    p = skip_ws(p);
    mo = 0;
    for (int i = 0; i < 12 && !mo; i++)
        if (strncmp(p, months[i], 3) == 0)
            mo = i + 1;
    if (!mo)
        return -1;
    p = skip_ws(p + 3);
    if (!digits(&p, 4, &y))
        return -1;
    p = skip_ws(p);
    if (!digits12(&p, &h) || !lit(&p, ':') || !digits12(&p, &mi) || !lit(&p, ':') ||
        !digits12(&p, &sec))
        return -1;
    p = skip_ws(p);
    if (strncmp(p, "GMT", 3) != 0 && strncmp(p, "UTC", 3) != 0)
        return -1;
    if (*skip_ws(p + 3) != '\0' || !time_ok(mo, d, h, mi, sec))
        return -1;
    *out = to_epoch(y, mo, d, h, mi, sec);
    return 0;
}
