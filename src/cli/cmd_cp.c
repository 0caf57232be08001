/* s3flash cp: every copy goes through the transfer engine of the library.
 *   local -> S3   files with s3f_upload_file (one PutObject, or a parallel multipart upload),
 *                 stdin with the streaming writer (multipart, any length);
 *   S3 -> local   s3f_download_file (parallel ranged GETs with If-Match) inside a private
 *                 temporary directory beside the destination, renamed into place; stdout,
 *                 FIFOs and character devices are streamed with one GetObject;
 *   S3 -> S3      s3f_copy (server side: CopyObject, or UploadPartCopy parts in parallel).
 * With --recursive the objects are planned first (a directory walk or a listing), then a
 * small pool of worker threads runs whole-object transfers on the one shared client, so
 * many files are in flight at once; a failed object is reported and the others go on
 * (exit status 1 at the end), as the AWS CLI does. Output lines and error lines of the
 * workers are serialized with the progress bar's lock. */
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
#include <unistd.h>

#include "cli.h"
#include "progress.h"

#define STDIN_CHUNK (1u << 20)  /* bytes read from stdin per write to the writer */
#define MAX_WORKERS 64          /* objects in flight at once with --recursive */

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
static enum s3f_status tmp_dir_create(const char *path, char **dir, struct s3f_error *err) {
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
static void tmp_dir_remove(char *dir) {
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

/* Errors of s3f_download_file name the path it was given (inside the temporary directory):
 * name the user's destination instead. */
static void rename_in(char *s, size_t cap, const char *from, const char *to) {
    char *at = strstr(s, from);
    if (!at)
        return;
    char *rest = strdup(at + strlen(from));
    if (!rest)
        return;
    snprintf(at, cap - (size_t)(at - s), "%s%s", to, rest);
    free(rest);
}

static void error_names_path(struct s3f_error *err, const char *tmp_path, const char *path) {
    rename_in(err->resource, sizeof(err->resource), tmp_path, path);
    rename_in(err->message, sizeof(err->message), tmp_path, path);
}

/* ------------------------------------------------------------------------------------
 * Downloads
 * ---------------------------------------------------------------------------------- */

struct fd_sink {
    int fd;
    int write_errno; /* set when a write failed */
};

static int sink_write(void *user_data, const void *data, size_t len, uint64_t offset) {
    struct fd_sink *s = user_data;
    const char *p = data;
    (void)offset; /* s3f_get_object delivers the bytes in order */
    while (len > 0) {
        ssize_t n = write(s->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            s->write_errno = errno;
            return 1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Stream the object into `fd` (stdout, a FIFO, a character device): one GetObject. */
static enum s3f_status download_stream(struct cli_ctx *ctx, struct s3f_client *c,
                                       const char *bucket, const char *key, int fd,
                                       const char *name, struct s3f_error *err) {
    struct s3f_get_options go;
    memset(&go, 0, sizeof(go));
    go.verify_checksum = ctx->engine.checksum == S3F_CHECKSUM_NONE ? 0 : 1;
    struct fd_sink sink = {.fd = fd, .write_errno = 0};
    enum s3f_status st = s3f_get_object(c, bucket, key, &go, sink_write, &sink, NULL, err);
    if (st != S3F_OK && sink.write_errno) {
        if (sink.write_errno == EPIPE && fd == STDOUT_FILENO)
            return S3F_ERR_ABORTED; /* the reader went away: nothing to say */
        cli_error_set(err, S3F_ERR_IO, "write", name, "%s", strerror(sink.write_errno));
        return S3F_ERR_IO;
    }
    return st;
}

/* Download into the regular file `path` through the engine (see above). */
static enum s3f_status download_to_file(struct cli_ctx *ctx, struct s3f_client *c,
                                        const char *bucket, const char *key, const char *path,
                                        struct cli_progress_item *item,
                                        struct s3f_error *err) {
    char *dir = NULL, *obj = NULL;
    enum s3f_status st = tmp_dir_create(path, &dir, err);
    if (st != S3F_OK)
        return st;
    obj = cli_path_join(dir, "object");
    if (!obj) {
        cli_error_set(err, S3F_ERR_NO_MEMORY, "download", path, "out of memory");
        st = S3F_ERR_NO_MEMORY;
        goto out;
    }
    struct s3f_download_options o;
    memset(&o, 0, sizeof(o));
    /* verify the stored whole-object checksum (a HEAD beside the GETs) even when one GET
     * brings the whole object: a ranged GET carries no checksum */
    o.verify_checksum = ctx->engine.checksum == S3F_CHECKSUM_NONE ? -1 : 1;
    if (item) {
        o.progress = cli_progress_cb;
        o.progress_user_data = item;
    }
    st = s3f_download_file(c, bucket, key, obj, &o, NULL, err);
    if (st != S3F_OK) {
        error_names_path(err, obj, path);
        goto out;
    }
    if (rename(obj, path) != 0) {
        cli_error_set(err, S3F_ERR_IO, "rename", path, "%s", strerror(errno));
        st = S3F_ERR_IO;
    }
out:
    tmp_dir_remove(dir);
    free(obj);
    return st;
}

static enum s3f_status download(struct cli_ctx *ctx, const char *bucket, const char *key,
                                const char *path, struct cli_progress_item *item,
                                struct s3f_error *err) {
    struct s3f_client *c = cli_client(ctx);
    if (!c) {
        cli_error_set(err, S3F_ERR_CONFIG, "client", NULL, "could not create the client");
        return S3F_ERR_CONFIG; /* cli_client printed the reason */
    }
    if (strcmp(path, "-") == 0) {
        fflush(stdout);
        return download_stream(ctx, c, bucket, key, STDOUT_FILENO, "stdout", err);
    }
    /* an existing FIFO or device (/dev/null) is written to, not replaced */
    struct stat sb;
    if (stat(path, &sb) == 0 && (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode))) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            cli_error_set(err, S3F_ERR_IO, "open", path, "%s", strerror(errno));
            return S3F_ERR_IO;
        }
        enum s3f_status st = download_stream(ctx, c, bucket, key, fd, path, err);
        if (close(fd) != 0 && st == S3F_OK) {
            cli_error_set(err, S3F_ERR_IO, "close", path, "%s", strerror(errno));
            st = S3F_ERR_IO;
        }
        return st;
    }
    return download_to_file(ctx, c, bucket, key, path, item, err);
}

enum s3f_status cli_download(struct cli_ctx *ctx, const char *bucket, const char *key,
                             const char *path, struct s3f_error *err) {
    return download(ctx, bucket, key, path, NULL, err);
}

/* ------------------------------------------------------------------------------------
 * Uploads
 * ---------------------------------------------------------------------------------- */

static void upload_options(const struct cli_ctx *ctx, struct cli_progress_item *item,
                           struct s3f_upload_options *uo) {
    memset(uo, 0, sizeof(*uo));
    uo->content_type = ctx->args->value[OPT_CONTENT_TYPE];
    uo->checksum = ctx->engine.checksum; /* DEFAULT: the client's, which is the same */
    if (item) {
        uo->progress = cli_progress_cb;
        uo->progress_user_data = item;
    }
}

/* stdin through the streaming writer: multipart once past one part, any length. On any
 * failure the writer is aborted, so no object is created. */
static enum s3f_status upload_stdin(struct cli_ctx *ctx, struct s3f_client *c,
                                    const char *bucket, const char *key,
                                    struct cli_progress_item *item, struct s3f_error *err) {
    struct s3f_upload_options uo;
    upload_options(ctx, item, &uo);
    char *buf = malloc(STDIN_CHUNK);
    if (!buf) {
        cli_error_set(err, S3F_ERR_NO_MEMORY, "read", "stdin", "out of memory");
        return S3F_ERR_NO_MEMORY;
    }
    struct s3f_writer *w = NULL;
    enum s3f_status st = s3f_writer_open(c, bucket, key, &uo, &w, err);
    if (st != S3F_OK)
        goto out;
    for (;;) {
        ssize_t r = read(STDIN_FILENO, buf, STDIN_CHUNK);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cli_error_set(err, S3F_ERR_IO, "read", "stdin", "%s", strerror(errno));
            st = S3F_ERR_IO;
            break;
        }
        if (r == 0)
            break;
        st = s3f_writer_write(w, buf, (size_t)r, err);
        if (st != S3F_OK)
            break;
    }
    if (st != S3F_OK) {
        s3f_writer_abort(w);
        goto out;
    }
    st = s3f_writer_close(w, NULL, err);
out:
    free(buf);
    return st;
}

/* A regular file through the engine: one PutObject when it fits a part, else a parallel
 * multipart upload read with pread (no file in memory); `path` "-" is stdin. */
static enum s3f_status upload(struct cli_ctx *ctx, const char *path, const char *bucket,
                              const char *key, struct cli_progress *prog,
                              struct cli_progress_item *item, struct s3f_error *err) {
    struct s3f_client *c = cli_client(ctx);
    if (!c) {
        cli_error_set(err, S3F_ERR_CONFIG, "client", NULL, "could not create the client");
        return S3F_ERR_CONFIG;
    }
    if (strcmp(path, "-") == 0) {
        cli_progress_item_init(prog, item, UINT64_MAX);
        return upload_stdin(ctx, c, bucket, key, item, err);
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        cli_error_set(err, S3F_ERR_IO, "open", path, "%s", strerror(errno));
        return S3F_ERR_IO;
    }
    if (S_ISDIR(sb.st_mode)) {
        cli_error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", path,
                      "is a directory (use --recursive)");
        return S3F_ERR_INVALID_ARGUMENT;
    }
    if (!S_ISREG(sb.st_mode)) {
        cli_error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", path, "not a regular file");
        return S3F_ERR_INVALID_ARGUMENT;
    }
    cli_progress_item_init(prog, item, (uint64_t)sb.st_size);
    struct s3f_upload_options uo;
    upload_options(ctx, item, &uo);
    return s3f_upload_file(c, bucket, key, path, &uo, NULL, err);
}

/* ------------------------------------------------------------------------------------
 * Jobs: one object each, run by the calling thread or by a pool of workers
 * ---------------------------------------------------------------------------------- */

enum job_kind { JOB_UPLOAD, JOB_DOWNLOAD, JOB_COPY };

struct job {
    enum job_kind kind;
    char *src;     /* local path (upload) or source key */
    char *dst;     /* destination key, or local path (download) */
    uint64_t size; /* known size (listing, stat), for the progress bar; 0 when unknown */
};

struct cp_run {
    struct cli_ctx *ctx;
    const char *sb, *db; /* source and destination buckets ("" for local) */
    struct job *jobs;
    size_t n_jobs, cap_jobs;
    struct cli_progress prog;
    pthread_mutex_t lock;
    /* ---- guarded by lock ---- */
    size_t next;   /* the next job to start */
    size_t failed; /* jobs (and planning steps) that failed */
    int rc;        /* exit status of the last failure */
};

static int run_add(struct cp_run *r, enum job_kind kind, const char *src, const char *dst,
                   uint64_t size) {
    if (r->n_jobs == r->cap_jobs) {
        size_t cap = r->cap_jobs ? r->cap_jobs * 2 : 64;
        struct job *jobs = realloc(r->jobs, cap * sizeof(*jobs));
        if (!jobs)
            return -1;
        r->jobs = jobs;
        r->cap_jobs = cap;
    }
    struct job *j = &r->jobs[r->n_jobs];
    j->kind = kind;
    j->size = size;
    j->src = strdup(src);
    j->dst = strdup(dst);
    if (!j->src || !j->dst) {
        free(j->src);
        free(j->dst);
        return -1;
    }
    r->n_jobs++;
    return 0;
}

static void run_init(struct cp_run *r, struct cli_ctx *ctx, const char *sb, const char *db) {
    memset(r, 0, sizeof(*r));
    r->ctx = ctx;
    r->sb = sb;
    r->db = db;
    pthread_mutex_init(&r->lock, NULL);
    cli_progress_init(&r->prog, !ctx->quiet && isatty(STDERR_FILENO), stderr);
}

static void run_cleanup(struct cp_run *r) {
    for (size_t i = 0; i < r->n_jobs; i++) {
        free(r->jobs[i].src);
        free(r->jobs[i].dst);
    }
    free(r->jobs);
    cli_progress_finish(&r->prog);
    pthread_mutex_destroy(&r->lock);
}

static void run_failed(struct cp_run *r, int rc) {
    pthread_mutex_lock(&r->lock);
    r->failed++;
    r->rc = rc;
    pthread_mutex_unlock(&r->lock);
}

/* An error line of the command, serialized with the other workers' output. */
static void run_errorf(struct cp_run *r, const char *fmt, ...) CLI_PRINTF(2, 3);
static void run_errorf(struct cp_run *r, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cli_progress_suspend(&r->prog);
    fprintf(stderr, "s3flash: %s\n", msg);
    cli_progress_resume(&r->prog);
}

/* Report a failed object and return its exit status. A client that could not be created
 * has been reported already; a closed stdout needs no message. */
static int run_report(struct cp_run *r, const struct s3f_error *err, enum s3f_status st,
                      const char *resource) {
    if (st == S3F_ERR_ABORTED && err->status == S3F_OK)
        return CLI_EXIT_FAIL;
    if (r->ctx->client_failed)
        return CLI_EXIT_FAIL;
    struct s3f_error e = *err;
    if (e.status == S3F_OK)
        e.status = st;
    cli_progress_suspend(&r->prog);
    cli_report(&e, resource);
    cli_progress_resume(&r->prog);
    return cli_exit_for(st);
}

static char *s3_uri(const char *bucket, const char *key) {
    size_t n = strlen(bucket) + strlen(key) + 8;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "s3://%s/%s", bucket, key);
    return s;
}

/* Run one job on the calling thread; returns its exit status (0 on success). */
static int run_job(struct cp_run *r, const struct job *j) {
    struct cli_ctx *ctx = r->ctx;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct cli_progress_item item;
    memset(&item, 0, sizeof(item));
    item.p = &r->prog;
    item.total = UINT64_MAX;
    enum s3f_status st = S3F_OK;
    int rc = CLI_EXIT_OK;
    const char *sb = r->sb, *db = r->db;
    char *src = j->kind == JOB_UPLOAD ? strdup(j->src) : s3_uri(sb, j->src);
    char *dst = j->kind == JOB_DOWNLOAD ? strdup(j->dst) : s3_uri(db, j->dst);
    if (!src || !dst) {
        run_errorf(r, "out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    const char *verb = "";
    const char *blame = src; /* the resource an error names when the library names none */
    switch (j->kind) {
    case JOB_UPLOAD:
        verb = "upload";
        blame = dst;
        st = upload(ctx, j->src, db, j->dst, &r->prog, &item, &err);
        break;
    case JOB_DOWNLOAD:
        verb = "download";
        if (strcmp(j->dst, "-") != 0 && cli_mkdirs_parent(j->dst) != 0) {
            cli_error_set(&err, S3F_ERR_IO, "mkdir", j->dst, "%s", strerror(errno));
            st = S3F_ERR_IO;
            break;
        }
        cli_progress_item_init(&r->prog, &item, UINT64_MAX);
        st = download(ctx, sb, j->src, j->dst, &item, &err);
        break;
    case JOB_COPY: {
        verb = "copy";
        struct s3f_client *c = cli_client(ctx);
        if (!c) {
            st = S3F_ERR_CONFIG;
            break;
        }
        /* any size: one CopyObject, or UploadPartCopy parts through the engine's request
         * slots; --part-size sets the part size (and so the threshold), else the
         * library's default for copies */
        struct s3f_copy_options co;
        memset(&co, 0, sizeof(co));
        co.part_size_bytes = ctx->engine.part_size_bytes;
        co.progress = cli_progress_cb;
        co.progress_user_data = &item;
        cli_progress_item_init(&r->prog, &item, UINT64_MAX);
        st = s3f_copy(c, sb, j->src, db, j->dst, &co, NULL, &err);
        if (st == S3F_OK)
            cli_progress_item_done(&item, j->size);
        break;
    }
    }
    if (st != S3F_OK) {
        rc = run_report(r, &err, st, blame);
    } else if (!ctx->quiet && !(j->kind == JOB_DOWNLOAD && strcmp(j->dst, "-") == 0)) {
        cli_progress_suspend(&r->prog);
        printf("%s: %s to %s\n", verb, src, dst);
        cli_progress_resume(&r->prog);
    }
out:
    free(src);
    free(dst);
    if (rc != CLI_EXIT_OK)
        run_failed(r, rc);
    return rc;
}

static void *worker_main(void *arg) {
    struct cp_run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        size_t i = r->next < r->n_jobs ? r->next++ : SIZE_MAX;
        pthread_mutex_unlock(&r->lock);
        if (i == SIZE_MAX)
            return NULL;
        run_job(r, &r->jobs[i]);
    }
}

/* Run every job: `workers` threads at most (each one object at a time), the calling thread
 * alone when there is one job or one worker. Returns the command's exit status. */
static int run_all(struct cp_run *r, size_t workers) {
    if (workers > r->n_jobs)
        workers = r->n_jobs;
    pthread_t threads[MAX_WORKERS];
    size_t started = 0;
    if (workers > 1) {
        for (; started < workers && started < MAX_WORKERS; started++)
            if (pthread_create(&threads[started], NULL, worker_main, r) != 0)
                break;
    }
    if (started == 0)
        worker_main(r); /* one job, one worker, or no thread could start */
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    if (r->failed == 0)
        return CLI_EXIT_OK;
    /* one object: its own status (2 for a bad argument); several: 1, as the AWS CLI */
    return r->n_jobs <= 1 && r->failed == 1 ? r->rc : CLI_EXIT_FAIL;
}

/* Objects in flight at once with --recursive: the requests the engine keeps in flight
 * (--concurrency, else its default), so that small objects fill the request slots too. */
static size_t recursive_workers(struct cli_ctx *ctx) {
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return 1;
    struct s3f_client_stats stats;
    s3f_client_stats(c, &stats, 0);
    size_t n = stats.max_inflight_requests ? stats.max_inflight_requests : 4;
    return n > MAX_WORKERS ? MAX_WORKERS : n;
}

/* ------------------------------------------------------------------------------------
 * --recursive: planning
 * ---------------------------------------------------------------------------------- */

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* "" stays "", "p" becomes "p/", "p/" stays. Caller frees. */
static char *dir_prefix(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || key[n - 1] == '/')
        return strdup(key);
    return cli_strcat2(key, "/");
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Plan an upload of every regular file under `dir` to `key_prefix` + its path relative to
 * `dir`, in name order. Symbolic links to files are followed; links to directories are
 * skipped (no loops). A directory that cannot be read is reported and counted as failed,
 * and the walk goes on. Returns -1 only when out of memory. */
static int plan_tree(struct cp_run *r, const char *dir, const char *key_prefix,
                     uint64_t *total) {
    DIR *d = opendir(dir);
    if (!d) {
        run_errorf(r, "opendir %s: %s", dir, strerror(errno));
        run_failed(r, CLI_EXIT_FAIL);
        return 0;
    }
    struct cli_strlist names = {0};
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (cli_strlist_push(&names, de->d_name) != 0) {
            rc = -1;
            goto out;
        }
        errno = 0;
    }
    if (errno != 0) {
        run_errorf(r, "readdir %s: %s", dir, strerror(errno));
        run_failed(r, CLI_EXIT_FAIL);
    }
    if (names.n > 1)
        qsort(names.items, names.n, sizeof(*names.items), by_name);
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        char *path = cli_path_join(dir, names.items[i]);
        char *key = cli_strcat2(key_prefix, names.items[i]);
        struct stat lsb, sb;
        if (!path || !key) {
            rc = -1;
        } else if (lstat(path, &lsb) != 0) {
            run_errorf(r, "stat %s: %s", path, strerror(errno));
            run_failed(r, CLI_EXIT_FAIL);
        } else if (S_ISDIR(lsb.st_mode)) {
            char *sub = cli_strcat2(key, "/");
            rc = sub ? plan_tree(r, path, sub, total) : -1;
            free(sub);
        } else if (S_ISREG(lsb.st_mode) ||
                   (S_ISLNK(lsb.st_mode) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))) {
            uint64_t size = S_ISREG(lsb.st_mode) ? (uint64_t)lsb.st_size : (uint64_t)sb.st_size;
            rc = run_add(r, JOB_UPLOAD, path, key, size);
            *total += size;
        } else if (!r->ctx->quiet) {
            run_errorf(r, "skipping %s: not a regular file or directory", path);
        }
        free(path);
        free(key);
    }
out:
    closedir(d);
    cli_strlist_free(&names);
    return rc;
}

static int cp_recursive(struct cli_ctx *ctx, const char *src, const char *dst, int s3src,
                        int s3dst, const char *sb, const char *sk, const char *db,
                        const char *dk) {
    if (!s3src && strcmp(src, "-") == 0)
        return cli_usage_error(ctx->cmd, "--recursive cannot read from stdin");
    if (s3src && !s3dst && strcmp(dst, "-") == 0)
        return cli_usage_error(ctx->cmd, "--recursive cannot write to stdout");
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    if (!s3src && !is_dir(src)) {
        struct s3f_error err;
        cli_error_set(&err, S3F_ERR_IO, "cp --recursive", src, "%s",
                      access(src, F_OK) == 0 ? "not a directory" : strerror(errno));
        cli_report(&err, src);
        return CLI_EXIT_FAIL;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;

    struct cp_run r;
    run_init(&r, ctx, s3src ? sb : "", s3dst ? db : "");
    struct cli_strlist keys = {0};
    struct cli_sizes sizes = {0};
    char *prefix = NULL, *dprefix = NULL;
    int rc = CLI_EXIT_OK, oom = 0;
    uint64_t total = 0;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;

    if (!s3src) {
        prefix = dir_prefix(dk);
        oom = !prefix || plan_tree(&r, src, prefix, &total) != 0;
        goto run;
    }
    prefix = dir_prefix(sk);
    dprefix = s3dst ? dir_prefix(dk) : NULL;
    if (!prefix || (s3dst && !dprefix)) {
        oom = 1;
        goto run;
    }
    st = cli_list_all_sizes(c, sb, prefix, page_size, &keys, &sizes, &err);
    if (st != S3F_OK) {
        rc = run_report(&r, &err, st, src);
        goto out;
    }
    for (size_t i = 0; i < keys.n && !oom; i++) {
        const char *key = keys.items[i];
        const char *rel = key + strlen(prefix);
        if (!rel[0])
            continue; /* the "directory marker" object of the prefix itself */
        if (s3dst) {
            char *dkey = cli_strcat2(dprefix, rel);
            oom = !dkey || run_add(&r, JOB_COPY, key, dkey, sizes.items[i]) != 0;
            total += sizes.items[i];
            free(dkey);
            continue;
        }
        if (!cli_safe_relative_path(rel)) {
            run_errorf(&r, "skipping s3://%s/%s: its name is not a safe local path", sb, key);
            run_failed(&r, CLI_EXIT_FAIL);
            continue;
        }
        char *path = cli_path_join(dst, rel);
        if (!path) {
            oom = 1;
            break;
        }
        size_t pl = strlen(path);
        if (path[pl - 1] == '/') {
            /* a "directory marker" key: create the directory */
            if (cli_mkdirs(path) != 0) {
                run_errorf(&r, "mkdir %s: %s", path, strerror(errno));
                run_failed(&r, CLI_EXIT_FAIL);
            }
        } else {
            oom = run_add(&r, JOB_DOWNLOAD, key, path, sizes.items[i]) != 0;
            total += sizes.items[i];
        }
        free(path);
    }

run:
    if (oom) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    cli_progress_set_total(&r.prog, total);
    rc = run_all(&r, recursive_workers(ctx));
    if (r.failed)
        rc = CLI_EXIT_FAIL; /* a skipped key or an unreadable directory counts too */
out:
    run_cleanup(&r);
    cli_strlist_free(&keys);
    cli_sizes_free(&sizes);
    free(prefix);
    free(dprefix);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------- */

static int cp_one(struct cli_ctx *ctx, enum job_kind kind, const char *sb, const char *src,
                  const char *db, const char *dst) {
    struct cp_run r;
    run_init(&r, ctx, sb, db);
    int rc;
    if (run_add(&r, kind, src, dst, 0) != 0) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
    } else {
        rc = run_all(&r, 1);
    }
    run_cleanup(&r);
    return rc;
}

int cli_cmd_cp(struct cli_ctx *ctx) {
    const char *src = ctx->args->pos[0], *dst = ctx->args->pos[1];
    int s3src = cli_is_s3(src), s3dst = cli_is_s3(dst);
    int recursive = ctx->args->set[OPT_RECURSIVE] != 0;
    char sb[CLI_BUCKET_MAX] = "", sk[CLI_KEY_MAX] = "", db[CLI_BUCKET_MAX] = "",
         dk[CLI_KEY_MAX] = "";
    int rc;
    if (!s3src && !s3dst)
        return cli_usage_error(ctx->cmd, "cp needs an s3:// source or destination");
    if (s3src && (rc = cli_parse_s3(src, sb, sk)) != CLI_EXIT_OK)
        return rc;
    if (s3dst && (rc = cli_parse_s3(dst, db, dk)) != CLI_EXIT_OK)
        return rc;
    if (ctx->args->value[OPT_CONTENT_TYPE] && s3src)
        return cli_usage_error(ctx->cmd, "--content-type applies to uploads only");
    if ((rc = cli_engine_parse(ctx)) != CLI_EXIT_OK)
        return rc;
    /* before the client starts its I/O threads: they must not take these signals */
    if (!s3dst && strcmp(dst, "-") != 0 && cli_download_signals() != 0) {
        cli_errorf("cannot set up the signal handling of downloads: %s", strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (recursive)
        return cp_recursive(ctx, src, dst, s3src, s3dst, sb, sk, db, dk);

    if (!s3src) {
        /* local -> S3: a key that is empty or ends in '/' receives the file's name */
        size_t kl = strlen(dk);
        if (kl == 0 || dk[kl - 1] == '/') {
            if (strcmp(src, "-") == 0)
                return cli_usage_error(ctx->cmd, "an upload from stdin needs a full key, not %s",
                                       dst);
            const char *base = cli_basename(src);
            if (!base[0])
                return cli_usage_error(ctx->cmd, "'%s' is a directory (use --recursive)", src);
            if (kl + strlen(base) >= sizeof(dk))
                return cli_usage_error(ctx->cmd, "key too long");
            memcpy(dk + kl, base, strlen(base) + 1);
        }
        return cp_one(ctx, JOB_UPLOAD, "", src, db, dk);
    }

    if (!sk[0] || sk[strlen(sk) - 1] == '/')
        return cli_usage_error(ctx->cmd, "%s is a prefix, not an object (use --recursive)", src);
    if (s3dst) {
        size_t kl = strlen(dk);
        if (kl == 0 || dk[kl - 1] == '/') {
            const char *base = cli_basename(sk);
            if (kl + strlen(base) >= sizeof(dk))
                return cli_usage_error(ctx->cmd, "key too long");
            memcpy(dk + kl, base, strlen(base) + 1);
        }
        return cp_one(ctx, JOB_COPY, sb, sk, db, dk);
    }

    /* S3 -> local */
    size_t dl = strlen(dst);
    char *path = NULL;
    if (strcmp(dst, "-") != 0 && (dst[dl - 1] == '/' || is_dir(dst)))
        path = cli_path_join(dst, cli_basename(sk));
    else
        path = strdup(dst);
    if (!path) {
        cli_errorf("out of memory");
        return CLI_EXIT_FAIL;
    }
    rc = cp_one(ctx, JOB_DOWNLOAD, sb, sk, "", path);
    free(path);
    return rc;
}
