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
/* Start a server (argv[0] looked up in PATH) with its stdout on a pipe and read, within
 * timeout_ms, the line "<word> N" it prints once it listens (docs/TESTING.md: a server is
 * waited for by asking it, never by polling for a port file). Returns N, with the child in
 * *pid (its stdout stays open: it writes nothing more), or -1 when it exited first, printed
 * something else or nothing in time (the child is then killed and reaped, *pid -1). */
int test_spawn_port(char *const argv[], const char *word, int timeout_ms, int *pid);
/* Print the summary line and return the exit code (0 iff no failure and >0 checks). */
int test_summary(void);

#endif
