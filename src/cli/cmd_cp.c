/* s3flash cp: every copy goes through the transfer engine of the library.
 *   local -> S3   files with s3f_upload_file (one PutObject, or a parallel multipart upload),
 *                 stdin with the streaming writer (multipart, any length);
 *   S3 -> local   s3f_download_file (parallel ranged GETs with If-Match) inside a private
 *                 temporary directory beside the destination, renamed into place; stdout,
 *                 FIFOs and character devices are streamed with one GetObject;
 *   S3 -> S3      s3f_copy (server side: CopyObject, or UploadPartCopy parts in parallel).
 * With --recursive the objects are planned first (a directory walk or a listing, filtered
 * by --exclude/--include), then the job pool of transfer.c runs whole-object transfers on
 * the one shared client, so many files are in flight at once; a failed object is reported
 * and the others go on (exit status 1 at the end), as the AWS CLI does. mv is cp that
 * removes each source once its copy succeeded. Downloaded files get the object's
 * Last-Modified as their times (sync compares them). */
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

#define STDIN_CHUNK (1u << 20)  /* bytes read from stdin per write to the writer */

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
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    st = s3f_download_file(c, bucket, key, obj, &o, &info, err);
    if (st != S3F_OK) {
        error_names_path(err, obj, path);
        goto out;
    }
    /* the object's Last-Modified becomes the file's times, as the AWS CLI does: sync then
     * sees an unchanged object as up to date */
    if (info.last_modified > 0) {
        struct timespec ts[2] = {{.tv_sec = (time_t)info.last_modified, .tv_nsec = 0},
                                 {.tv_sec = (time_t)info.last_modified, .tv_nsec = 0}};
        if (utimensat(AT_FDCWD, obj, ts, 0) != 0) {
            cli_error_set(err, S3F_ERR_IO, "utimensat", path, "%s", strerror(errno));
            st = S3F_ERR_IO;
            goto out;
        }
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

enum s3f_status cli_download_item(struct cli_ctx *ctx, const char *bucket, const char *key,
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
    return cli_download_item(ctx, bucket, key, path, NULL, err);
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
enum s3f_status cli_upload(struct cli_ctx *ctx, const char *path, const char *bucket,
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
 * --recursive
 * ---------------------------------------------------------------------------------- */

/* Plan and run the copy (or move) of every object under a directory or prefix. */
static int cp_recursive(struct cli_ctx *ctx, bool move, const char *src, const char *dst,
                        int s3src, int s3dst, const char *sb, const char *sk, const char *db,
                        const char *dk) {
    if (!s3src && strcmp(src, "-") == 0)
        return cli_usage_error(ctx->cmd, "--recursive cannot read from stdin");
    if (s3src && !s3dst && strcmp(dst, "-") == 0)
        return cli_usage_error(ctx->cmd, "--recursive cannot write to stdout");
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    if (!s3src && !cli_is_dir(src)) {
        struct s3f_error err;
        cli_error_set(&err, S3F_ERR_IO, move ? "mv --recursive" : "cp --recursive", src, "%s",
                      access(src, F_OK) == 0 ? "not a directory" : strerror(errno));
        cli_report(&err, src);
        return CLI_EXIT_FAIL;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;

    struct cli_run r;
    cli_run_init(&r, ctx, s3src ? sb : "", s3dst ? db : "");
    r.move = move;
    const struct cli_filter *filter = &ctx->args->filter;
    struct cli_entries entries = {0};
    char *prefix = s3src ? cli_dir_prefix(sk) : NULL;
    char *dprefix = s3dst ? cli_dir_prefix(dk) : NULL;
    int rc = CLI_EXIT_OK, oom = 0;
    uint64_t total = 0;
    struct s3f_error err;
    s3f_error_clear(&err);

    if ((s3src && !prefix) || (s3dst && !dprefix)) {
        oom = 1;
        goto run;
    }
    if (move && s3src && s3dst && strcmp(sb, db) == 0 && strcmp(prefix, dprefix) == 0) {
        /* every object onto itself: the copies would change nothing and the deletions
         * would lose everything */
        rc = cli_usage_error(ctx->cmd, "cannot move %s onto itself", src);
        goto out;
    }
    if (!s3src) {
        oom = cli_walk_local(&r, src, filter, false, &entries) != 0;
    } else {
        enum s3f_status st = cli_list_entries(c, sb, prefix, page_size, filter, &entries, &err);
        if (st != S3F_OK) {
            rc = cli_run_report(&r, &err, st, src);
            goto out;
        }
    }
    for (size_t i = 0; i < entries.n && !oom; i++) {
        const struct cli_entry *e = &entries.items[i];
        if (s3dst) {
            /* the job's source: the whole key, or the local path */
            char *from = s3src ? cli_strcat2(prefix, e->rel) : cli_path_join(src, e->rel);
            char *dkey = cli_strcat2(dprefix, e->rel);
            oom = !from || !dkey ||
                  cli_run_add(&r, s3src ? CLI_JOB_COPY : CLI_JOB_UPLOAD, from, dkey, e->size) != 0;
            total += e->size;
            free(from);
            free(dkey);
            continue;
        }
        if (!cli_safe_relative_path(e->rel)) {
            cli_run_errorf(&r, "skipping s3://%s/%s%s: its name is not a safe local path", sb,
                           prefix, e->rel);
            cli_run_failed(&r, CLI_EXIT_FAIL);
            continue;
        }
        char *path = cli_path_join(dst, e->rel);
        char *key = cli_strcat2(prefix, e->rel);
        if (!path || !key) {
            oom = 1;
        } else if (path[strlen(path) - 1] == '/') {
            /* a "directory marker" key: create the directory */
            if (!r.dryrun && cli_mkdirs(path) != 0) {
                cli_run_errorf(&r, "mkdir %s: %s", path, strerror(errno));
                cli_run_failed(&r, CLI_EXIT_FAIL);
            }
        } else {
            oom = cli_run_add(&r, CLI_JOB_DOWNLOAD, key, path, e->size) != 0;
            total += e->size;
        }
        free(path);
        free(key);
    }

run:
    if (oom) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    cli_progress_set_total(&r.prog, total);
    rc = cli_run_all(&r, cli_run_workers(ctx));
    if (r.failed)
        rc = CLI_EXIT_FAIL; /* a skipped key or an unreadable directory counts too */
out:
    cli_run_cleanup(&r);
    cli_entries_free(&entries);
    free(prefix);
    free(dprefix);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * The commands
 * ---------------------------------------------------------------------------------- */

static int cp_one(struct cli_ctx *ctx, bool move, enum cli_job_kind kind, const char *sb,
                  const char *src, const char *db, const char *dst) {
    struct cli_run r;
    cli_run_init(&r, ctx, sb, db);
    r.move = move;
    int rc;
    if (cli_run_add(&r, kind, src, dst, 0) != 0) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
    } else {
        rc = cli_run_all(&r, 1);
    }
    cli_run_cleanup(&r);
    return rc;
}

/* cp and mv: the same copies; mv removes each source once its copy succeeded. */
static int cp_or_mv(struct cli_ctx *ctx, bool move) {
    const char *name = move ? "mv" : "cp";
    const char *src = ctx->args->pos[0], *dst = ctx->args->pos[1];
    int s3src = cli_is_s3(src), s3dst = cli_is_s3(dst);
    int recursive = ctx->args->set[OPT_RECURSIVE] != 0;
    char sb[CLI_BUCKET_MAX] = "", sk[CLI_KEY_MAX] = "", db[CLI_BUCKET_MAX] = "",
         dk[CLI_KEY_MAX] = "";
    int rc;
    if (!s3src && !s3dst)
        return cli_usage_error(ctx->cmd, "%s needs an s3:// source or destination", name);
    if (s3src && (rc = cli_parse_s3(src, sb, sk)) != CLI_EXIT_OK)
        return rc;
    if (s3dst && (rc = cli_parse_s3(dst, db, dk)) != CLI_EXIT_OK)
        return rc;
    if (ctx->args->value[OPT_CONTENT_TYPE] && s3src)
        return cli_usage_error(ctx->cmd, "--content-type applies to uploads only");
    if (ctx->args->filter.n && !recursive)
        return cli_usage_error(ctx->cmd, "--exclude and --include need --recursive");
    if (move && ((!s3src && strcmp(src, "-") == 0) || (!s3dst && strcmp(dst, "-") == 0)))
        return cli_usage_error(ctx->cmd, "mv cannot read from stdin or write to stdout");
    if ((rc = cli_engine_parse(ctx)) != CLI_EXIT_OK)
        return rc;
    /* before the client starts its I/O threads: they must not take these signals */
    if (!s3dst && strcmp(dst, "-") != 0 && cli_download_signals() != 0) {
        cli_errorf("cannot set up the signal handling of downloads: %s", strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (recursive)
        return cp_recursive(ctx, move, src, dst, s3src, s3dst, sb, sk, db, dk);

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
        return cp_one(ctx, move, CLI_JOB_UPLOAD, "", src, db, dk);
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
        if (move && strcmp(sb, db) == 0 && strcmp(sk, dk) == 0)
            return cli_usage_error(ctx->cmd, "cannot move %s onto itself", src);
        return cp_one(ctx, move, CLI_JOB_COPY, sb, sk, db, dk);
    }

    /* S3 -> local */
    size_t dl = strlen(dst);
    char *path = NULL;
    if (strcmp(dst, "-") != 0 && (dst[dl - 1] == '/' || cli_is_dir(dst)))
        path = cli_path_join(dst, cli_basename(sk));
    else
        path = strdup(dst);
    if (!path) {
        cli_errorf("out of memory");
        return CLI_EXIT_FAIL;
    }
    rc = cp_one(ctx, move, CLI_JOB_DOWNLOAD, sb, sk, "", path);
    free(path);
    return rc;
}

int cli_cmd_cp(struct cli_ctx *ctx) {
    return cp_or_mv(ctx, false);
}

int cli_cmd_mv(struct cli_ctx *ctx) {
    return cp_or_mv(ctx, true);
}
