/* src/core/assert.h: each assertion passes where its condition holds and aborts the process
 * (SIGABRT, with the failed condition on stderr) where it does not. The failing cases run in
 * a forked child. The test builds always have the assertions on (meson's `asserts` option is
 * on wherever the test hooks are); a build without them fails this test at its first check. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include "core/assert.h"
#include "testutil.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Runs fn in a child; returns the signal that ended it, 0 if it exited. */
static int in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        if (fd >= 0)
            dup2(fd, 2); /* the child's assertion message is expected */
        fn();
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void false_cond(void) { S3F_ASSERT(1 + 1 == 3); }
static void true_cond(void) { S3F_ASSERT(1 + 1 == 2); }
static void held_unlocked(void) { S3F_ASSERT_HELD(&mu); }
static void held_locked(void)
{
    pthread_mutex_lock(&mu);
    S3F_ASSERT_HELD(&mu);
    pthread_mutex_unlock(&mu);
}
static void not_held_locked(void)
{
    pthread_mutex_lock(&mu);
    S3F_ASSERT_NOT_HELD(&mu);
}
static void *lock_forever(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;)
        pause();
    return NULL;
}
/* another thread holds mu: held is false here, and not-held true */
static void held_by_another(void)
{
    pthread_t t;
    pthread_create(&t, NULL, lock_forever, NULL);
    while (pthread_mutex_trylock(&mu) == 0) {
        pthread_mutex_unlock(&mu);
        usleep(1000);
    }
    S3F_ASSERT_NOT_HELD(&mu);
    S3F_ASSERT_HELD(&mu);
}

static void test_on(void)
{
#if defined(S3F_ASSERTS)
    CHECK(1);
#else
    CHECK(!"the test builds have S3F_ASSERTS (meson option asserts)");
#endif
}

static void test_cond(void)
{
    CHECK_INT(in_child(true_cond), 0);
    CHECK_INT(in_child(false_cond), SIGABRT);
}

static void test_held(void)
{
    CHECK_INT(in_child(held_locked), 0);
    CHECK_INT(in_child(held_unlocked), SIGABRT);
    CHECK_INT(in_child(not_held_locked), SIGABRT);
    CHECK_INT(in_child(held_by_another), SIGABRT);
}

int main(void)
{
    RUN(test_on);
    RUN(test_cond);
    RUN(test_held);
    return test_summary();
}
