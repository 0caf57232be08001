/* Clocks and time formats. */
#include <errno.h>
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

int s3f__time_parse(const char *s, int64_t *out) {
    if (!s)
        return -1;
    int y, mo, d, h, mi, sec, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) == 6 && n >= 19) {
        const char *p = s + n;
        if (*p == '.') {
            p++;
            while (*p >= '0' && *p <= '9')
                p++;
        }
        int64_t off = 0;
        if (*p == 'Z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int oh, om;
            if (sscanf(p + 1, "%2d:%2d", &oh, &om) != 2)
                return -1;
            off = (oh * 3600 + om * 60) * (*p == '+' ? 1 : -1);
            p += 6;
        } else if (*p != '\0') {
            return -1;
        }
        if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
            return -1;
        *out = to_epoch(y, mo, d, h, mi, sec) - off;
        return 0;
    }
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char wd[8], mon[8], tz[8];
    if (sscanf(s, "%7[A-Za-z], %d %7s %d %d:%d:%d %7s", wd, &d, mon, &y, &h, &mi, &sec, tz) == 8) {
        for (int i = 0; i < 12; i++)
            if (strcmp(mon, months[i]) == 0) {
                if (strcmp(tz, "GMT") != 0 && strcmp(tz, "UTC") != 0)
                    return -1;
                *out = to_epoch(y, i + 1, d, h, mi, sec);
                return 0;
            }
    }
    return -1;
}
