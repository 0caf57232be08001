/* The temporary directories of the downloads in progress, and the signal thread that removes
 * them when SIGINT/SIGTERM/SIGHUP ends the process (cli_download_signals). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "transfer.h"

/* ------------------------------------------------------------------------------------
 * Temporary directories of the downloads in progress, and the signal thread that removes
 * them when SIGINT/SIGTERM/SIGHUP ends the process.
 *
 * s3f_download_file writes into a temporary file of its own, beside the path it is given,
 * and renames it over that path at the end. Its name is random, so the CLI gives it a path
 * inside a directory of its own ("DST.s3flash-tmp-XXXXXX/object"): whatever the library
 * created there is ours to remove, and the finished file is renamed from there over DST.
 * The signals are blocked in every thread (the mask is set before the client starts its
 * I/O threads) and taken by one thread with sigwait, which may lock, list directories and
 * unlink — none of which a signal handler could do.
 * ---------------------------------------------------------------------------------- */

static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cli_strlist tmp_dirs; /* guarded by tmp_lock */
static sigset_t fatal_signals;

/* Remove a temporary directory and the files in it (it holds no subdirectory). */
static void remove_tmp_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

static void *signal_main(void *arg) {
    (void)arg;
    int sig = 0;
    while (sigwait(&fatal_signals, &sig) != 0) {
    }
    /* keep the lock: no download registers a new directory while the process ends */
    pthread_mutex_lock(&tmp_lock);
    for (size_t i = 0; i < tmp_dirs.n; i++)
        remove_tmp_dir(tmp_dirs.items[i]);
    /* end the process the way the signal would have (status as for an unhandled signal) */
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig);
}

int cli_download_signals(void) {
    static int started;
    if (started)
        return 0;
    sigemptyset(&fatal_signals);
    sigaddset(&fatal_signals, SIGINT);
    sigaddset(&fatal_signals, SIGTERM);
    sigaddset(&fatal_signals, SIGHUP);
    int rc = pthread_sigmask(SIG_BLOCK, &fatal_signals, NULL);
    pthread_attr_t attr;
    if (rc == 0 && (rc = pthread_attr_init(&attr)) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        rc = pthread_create(&t, &attr, signal_main, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        pthread_sigmask(SIG_UNBLOCK, &fatal_signals, NULL);
        errno = rc;
        return -1;
    }
    started = 1;
    return 0;
}

/* Create "PATH.s3flash-tmp-XXXXXX" (mode 0700) and register it; *dir receives its
 * malloc'ed name. */
enum s3f_status cli_tmp_dir_create(const char *path, char **dir, struct s3f_error *err) {
    char *d = cli_strcat2(path, ".s3flash-tmp-XXXXXX");
    if (!d) {
        cli_error_set(err, S3F_ERR_NO_MEMORY, "download", path, "out of memory");
        return S3F_ERR_NO_MEMORY;
    }
    enum s3f_status st = S3F_OK;
    pthread_mutex_lock(&tmp_lock);
    if (!mkdtemp(d)) {
        cli_error_set(err, S3F_ERR_IO, "create temporary directory", d, "%s", strerror(errno));
        st = S3F_ERR_IO;
    } else if (cli_strlist_push(&tmp_dirs, d) != 0) {
        rmdir(d);
        cli_error_set(err, S3F_ERR_NO_MEMORY, "download", path, "out of memory");
        st = S3F_ERR_NO_MEMORY;
    }
    pthread_mutex_unlock(&tmp_lock);
    if (st != S3F_OK) {
        free(d);
        return st;
    }
    *dir = d;
    return S3F_OK;
}

/* Remove a registered temporary directory (and what is left in it), unregister, free. */
void cli_tmp_dir_remove(char *dir) {
    pthread_mutex_lock(&tmp_lock);
    remove_tmp_dir(dir);
    for (size_t i = 0; i < tmp_dirs.n; i++) {
        if (strcmp(tmp_dirs.items[i], dir) == 0) {
            free(tmp_dirs.items[i]);
            tmp_dirs.items[i] = tmp_dirs.items[--tmp_dirs.n];
            break;
        }
    }
    if (tmp_dirs.n == 0)
        cli_strlist_free(&tmp_dirs);
    pthread_mutex_unlock(&tmp_lock);
    free(dir);
}
