/* A minimal test harness: CHECK macros count failures; each test program ends with
 * test_summary(), which prints "N passed, N failed" and returns the exit status. */
#ifndef S3F_TESTUTIL_H
#define S3F_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

extern int test_checks_passed;
extern int test_checks_failed;

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (cond)                                                                          \
            test_checks_passed++;                                                          \
        else                                                                               \
            test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                             \
    } while (0)

#define CHECK_INT(a, b)                                                                    \
    do {                                                                                   \
        long long va_ = (long long)(a), vb_ = (long long)(b);                              \
        if (va_ == vb_)                                                                    \
            test_checks_passed++;                                                          \
        else                                                                               \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, va_, vb_);     \
    } while (0)

#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *sa_ = (a), *sb_ = (b);                                                 \
        if (sa_ && sb_ && strcmp(sa_, sb_) == 0)                                           \
            test_checks_passed++;                                                          \
        else                                                                               \
            test_fail(__FILE__, __LINE__, "%s == %s:\n  got:  \"%s\"\n  want: \"%s\"", #a, \
                      #b, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                     \
    } while (0)

/* Run a named test case (a void function); prints its name on failure. */
#define RUN(fn)                                                                            \
    do {                                                                                   \
        int before_ = test_checks_failed;                                                  \
        fn();                                                                              \
        printf("%s %s\n", test_checks_failed == before_ ? "ok  " : "FAIL", #fn);           \
    } while (0)

/* Read a whole file (malloc'ed, NUL-terminated); NULL if missing. */
char *test_read_file(const char *path, size_t *len);
/* Path under the source tree ($S3F_SOURCE_ROOT, else "."), into a static buffer. */
const char *test_src_path(const char *rel);
/* Print the summary line and return the exit code (0 iff no failure and >0 checks). */
int test_summary(void);

#endif
