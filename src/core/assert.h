/* src/core/assert.h: runtime assertions, on in the test builds and off in release.
 *
 *   S3F_ASSERT(cond)            cond holds here (curl's DEBUGASSERT)
 *   S3F_ASSERT_HELD(&mu)        this thread holds the mutex mu (aws-c-s3's
 *                               ASSERT_SYNCED_DATA_LOCK_HELD): the "called with X held" rules
 *   S3F_ASSERT_NOT_HELD(&mu)    this thread does not hold mu (a rule against re-entry, or a
 *                               lock that must not be held across a call)
 *
 * On when meson's `asserts` option is (auto: debug and sanitizer builds, and every build
 * with the test hooks; tests/run.sh builds all of its trees with them on); then S3F_ASSERTS
 * is defined and a failed assertion prints what failed and where, and aborts. Off, each
 * macro still type-checks its argument and evaluates nothing.
 *
 * Self-contained (libc and pthreads only), so that every folder of src/, front ends too,
 * may include it (tests/layering.py allows it everywhere, as the public header). Whether a
 * mutex is held is read from glibc's record of its owner (the thread id that glibc writes
 * into every mutex kind it locks); on another libc S3F_ASSERT_HELD checks nothing. */
#ifndef S3F_CORE_ASSERT_H
#define S3F_CORE_ASSERT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(S3F_ASSERTS)

__attribute__((noreturn, cold, unused)) static void
s3f__assert_fail(const char *what, const char *file, int line, const char *func)
{
    fprintf(stderr, "s3flash: assertion failed: %s (%s:%d, %s)\n", what, file, line, func);
    fflush(stderr);
    abort();
}

#if defined(__GLIBC__)
/* 1 when this thread holds mu, 0 when it does not. */
__attribute__((unused)) static inline bool s3f__mutex_held(const pthread_mutex_t *mu)
{
    return mu->__data.__owner == (int)gettid();
}
#define S3F__HELD_KNOWN 1
#else
__attribute__((unused)) static inline bool s3f__mutex_held(const pthread_mutex_t *mu)
{
    (void)mu;
    return true;
}
#define S3F__HELD_KNOWN 0
#endif

#define S3F_ASSERT(cond)                                                                   \
    ((cond) ? (void)0 : s3f__assert_fail(#cond, __FILE__, __LINE__, __func__))
#define S3F_ASSERT_HELD(mu)                                                                \
    (s3f__mutex_held(mu) ? (void)0                                                         \
                         : s3f__assert_fail("lock " #mu " held", __FILE__, __LINE__, __func__))
#define S3F_ASSERT_NOT_HELD(mu)                                                            \
    (!S3F__HELD_KNOWN || !s3f__mutex_held(mu)                                              \
         ? (void)0                                                                         \
         : s3f__assert_fail("lock " #mu " not held", __FILE__, __LINE__, __func__))

#else /* assertions off: no code, but the argument must still compile */

#define S3F_ASSERT(cond) ((void)sizeof(!(cond)))
#define S3F_ASSERT_HELD(mu) ((void)sizeof(mu))
#define S3F_ASSERT_NOT_HELD(mu) ((void)sizeof(mu))

#endif

#endif /* S3F_CORE_ASSERT_H */
