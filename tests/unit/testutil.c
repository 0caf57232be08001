#include "testutil.h"

#include <stdarg.h>
#include <stdlib.h>

int test_checks_passed;
int test_checks_failed;

void test_fail(const char *file, int line, const char *fmt, ...) {
    test_checks_failed++;
    fprintf(stderr, "%s:%d: failed: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

const char *test_src_path(const char *rel) {
    static _Thread_local char path[4096];
    const char *root = getenv("S3F_SOURCE_ROOT");
    snprintf(path, sizeof(path), "%s/%s", root && *root ? root : ".", rel);
    return path;
}

int test_summary(void) {
    printf("%d passed, %d failed\n", test_checks_passed, test_checks_failed);
    return (test_checks_failed == 0 && test_checks_passed > 0) ? 0 : 1;
}
