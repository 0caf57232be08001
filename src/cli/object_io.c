/* One object at a time, through the transfer engine: downloads to a file (in a temporary
 * directory of tmpdirs.c, renamed into place) or to stdout (s3f_download_stream), uploads
 * of a file (s3f_upload_file) or of stdin (the streaming writer). cp, mv, sync and cat use
 * them, and the job pool of transfer.c runs them for --recursive. */
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
    (void)offset; /* s3f_download_stream delivers the bytes in order */
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

/* Stream the object into `fd` (stdout, a FIFO, a character device): ranged GETs in
 * flight as the link needs them, the bytes written in order (s3f_download_stream). */
static enum s3f_status download_stream(struct cli_ctx *ctx, struct s3f_client *c,
                                       const char *bucket, const char *key, int fd,
                                       const char *name, struct s3f_error *err) {
    struct s3f_download_options o;
    memset(&o, 0, sizeof(o));
    o.verify_checksum = ctx->engine.checksum == S3F_CHECKSUM_NONE ? -1 : 1;
    struct fd_sink sink = {.fd = fd, .write_errno = 0};
    enum s3f_status st = s3f_download_stream(c, bucket, key, &o, sink_write, &sink, NULL, err);
    if (st != S3F_OK && sink.write_errno) {
        if (sink.write_errno == EPIPE && fd == STDOUT_FILENO)
            return S3F_ERR_ABORTED; /* the reader went away: nothing to say */
        cli_error_set(err, S3F_ERR_IO, "write", name, "%s", strerror(sink.write_errno));
        return S3F_ERR_IO;
    }
    return st;
}

/* The destination of a small download: malloc, unless the object grew past what the
 * listing said is small (then refused: the caller takes the parallel path). */
struct small_alloc {
    int too_big;
};

static void *small_alloc(void *ud, size_t size) {
    struct small_alloc *a = ud;
    if (size > 2 * CLI_SMALL_OBJECT) {
        a->too_big = 1;
        return NULL;
    }
    return malloc(size ? size : 1);
}

/* A small object (by its listed size) into the new file `obj`: one GET without a Range
 * (s3f_download_alloc: no HEAD, the whole-object checksum the response carries verified),
 * then one write. 1 when the object turned out large (nothing written): take the
 * parallel path. */
static int download_small(struct cli_ctx *ctx, struct s3f_client *c, const char *bucket,
                          const char *key, const char *obj, struct s3f_object_info *info,
                          enum s3f_status *st, struct s3f_error *err) {
    struct s3f_download_options o;
    memset(&o, 0, sizeof(o));
    o.verify_checksum = ctx->engine.checksum == S3F_CHECKSUM_NONE ? -1 : 1;
    struct small_alloc a = {0};
    void *data = NULL;
    size_t len = 0;
    *st = s3f_download_alloc(c, bucket, key, &o, small_alloc, &a, &data, &len, info, err);
    if (*st != S3F_OK && a.too_big) {
        free(data);
        s3f_error_clear(err);
        return 1;
    }
    if (*st == S3F_OK) {
        int fd = open(obj, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        struct fd_sink sink = {.fd = fd, .write_errno = fd < 0 ? errno : 0};
        if (fd >= 0)
            sink_write(&sink, data, len, 0);
        if (fd >= 0 && close(fd) != 0 && !sink.write_errno)
            sink.write_errno = errno;
        if (sink.write_errno) {
            cli_error_set(err, S3F_ERR_IO, "write", obj, "%s", strerror(sink.write_errno));
            *st = S3F_ERR_IO;
        }
    }
    free(data); /* small_alloc's malloc */
    return 0;
}

/* Download into the regular file `path` through the engine (see above). An object listed
 * as small (0 < size_hint <= CLI_SMALL_OBJECT) is one GET (download_small); others, and
 * objects of unknown size (0 or UINT64_MAX: a job's size is 0 when not listed), go through
 * s3f_download_file. */
static enum s3f_status download_to_file(struct cli_ctx *ctx, struct s3f_client *c,
                                        const char *bucket, const char *key, const char *path,
                                        uint64_t size_hint, struct cli_progress_item *item,
                                        struct s3f_error *err) {
    char *dir = NULL, *obj = NULL;
    enum s3f_status st = cli_tmp_dir_create(path, &dir, err);
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
    if (size_hint == 0 || size_hint > CLI_SMALL_OBJECT ||
        download_small(ctx, c, bucket, key, obj, &info, &st, err) != 0)
        st = s3f_download_file(c, bucket, key, obj, &o, &info, err);
    else if (st == S3F_OK && item)
        cli_progress_item_done(item, info.size);
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
    cli_tmp_dir_remove(dir);
    free(obj);
    return st;
}

enum s3f_status cli_download_item(struct cli_ctx *ctx, const char *bucket, const char *key,
                                  const char *path, uint64_t size_hint,
                                  struct cli_progress_item *item, struct s3f_error *err) {
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
    return download_to_file(ctx, c, bucket, key, path, size_hint, item, err);
}

enum s3f_status cli_download(struct cli_ctx *ctx, const char *bucket, const char *key,
                             const char *path, struct s3f_error *err) {
    return cli_download_item(ctx, bucket, key, path, UINT64_MAX, NULL, err);
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
