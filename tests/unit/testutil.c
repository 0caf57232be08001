#include "testutil.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int test_spawn_port(char *const argv[], const char *word, int timeout_ms, int *pid) {
    int fds[2];
    *pid = -1;
    if (pipe(fds) != 0)
        return -1;
    pid_t p = fork();
    if (p < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (p == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    char line[256];
    size_t n = 0;
    int port = -1;
    long end = now_ms() + timeout_ms;
    size_t wl = strlen(word);
    for (;;) {
        char *nl = memchr(line, '\n', n);
        if (nl) {
            *nl = 0;
            if (!strncmp(line, word, wl) && line[wl] == ' ' && atoi(line + wl + 1) > 0)
                port = atoi(line + wl + 1);
            break; /* its first line, the port or not */
        }
        long left = end - now_ms();
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        if (left <= 0 || n == sizeof(line) - 1 || poll(&pf, 1, (int)left) <= 0)
            break;
        ssize_t r = read(fds[0], line + n, sizeof(line) - 1 - n);
        if (r <= 0)
            break; /* it exited (or closed its stdout) first */
        n += (size_t)r;
    }
    /* the read end is left open: a server that writes no more never sees EPIPE */
    if (port < 0) {
        close(fds[0]);
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        return -1;
    }
    *pid = p;
    return port;
}
