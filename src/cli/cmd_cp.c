/* s3flash cp: local -> S3 (files through the transfer engine, stdin as one PutObject), S3 -> local (GetObject into a temporary file renamed
 * into place), S3 -> S3 (CopyObject); with --recursive for directories and prefixes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"

#define MAX_PUT_BYTES (5ULL * 1024 * 1024 * 1024) /* PutObject limit: 5 GiB */

/* ------------------------------------------------------------------------------------
 * Removing the temporary file of a download when a signal ends the process
 * ---------------------------------------------------------------------------------- */

static char tmp_path_for_signal[PATH_MAX + 64];
static volatile sig_atomic_t tmp_active;
static int handlers_installed;

static void on_fatal_signal(int sig) {
    if (tmp_active)
        unlink(tmp_path_for_signal); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    if (handlers_installed)
        return;
    handlers_installed = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ------------------------------------------------------------------------------------
 * Downloads
 * ---------------------------------------------------------------------------------- */

struct fd_sink {
    int fd;
    int use_pwrite; /* 0 for stdout (pipes cannot seek) */
    int write_errno; /* set when a write failed */
};

static int sink_write(void *user_data, const void *data, size_t len, uint64_t offset) {
    struct fd_sink *s = user_data;
    const char *p = data;
    while (len > 0) {
        ssize_t n = s->use_pwrite ? pwrite(s->fd, p, len, (off_t)offset) : write(s->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            s->write_errno = errno;
            return 1;
        }
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

enum s3f_status cli_download(struct cli_ctx *ctx, const char *bucket, const char *key,
                             const char *path, struct s3f_error *err) {
    struct s3f_client *c = cli_client(ctx);
    if (!c) {
        cli_error_set(err, S3F_ERR_CONFIG, "client", NULL, "could not create the client");
        return S3F_ERR_CONFIG; /* cli_client printed the reason */
    }
    struct s3f_get_options go;
    memset(&go, 0, sizeof(go));
    go.verify_checksum = 1;
    struct fd_sink sink = {.fd = -1, .use_pwrite = 1, .write_errno = 0};
    enum s3f_status st;

    if (strcmp(path, "-") == 0) {
        sink.fd = STDOUT_FILENO;
        sink.use_pwrite = 0;
        fflush(stdout);
        st = s3f_get_object(c, bucket, key, &go, sink_write, &sink, NULL, err);
        if (st != S3F_OK && sink.write_errno) {
            if (sink.write_errno == EPIPE)
                return S3F_ERR_ABORTED; /* the reader went away: nothing to say */
            cli_error_set(err, S3F_ERR_IO, "write", "stdout", "%s", strerror(sink.write_errno));
            return S3F_ERR_IO;
        }
        return st;
    }

    char *tmp = cli_strcat2(path, ".s3flash-tmp-XXXXXX");
    if (!tmp) {
        cli_error_set(err, S3F_ERR_NO_MEMORY, "download", path, "out of memory");
        return S3F_ERR_NO_MEMORY;
    }
    if (strlen(tmp) >= sizeof(tmp_path_for_signal)) {
        cli_error_set(err, S3F_ERR_IO, "open", path, "%s", strerror(ENAMETOOLONG));
        st = S3F_ERR_IO;
        goto out;
    }
    install_handlers();
    sink.fd = mkostemp(tmp, O_CLOEXEC);
    if (sink.fd < 0) {
        cli_error_set(err, S3F_ERR_IO, "create temporary file", tmp, "%s", strerror(errno));
        st = S3F_ERR_IO;
        goto out;
    }
    memcpy(tmp_path_for_signal, tmp, strlen(tmp) + 1);
    tmp_active = 1;
    /* mkstemp creates 0600; give the file the mode a plain creat() would. */
    if (fchmod(sink.fd, 0666 & ~ctx->umask_bits) != 0) {
        cli_error_set(err, S3F_ERR_IO, "chmod", tmp, "%s", strerror(errno));
        st = S3F_ERR_IO;
        goto out;
    }
    st = s3f_get_object(c, bucket, key, &go, sink_write, &sink, NULL, err);
    if (st != S3F_OK && sink.write_errno) {
        cli_error_set(err, S3F_ERR_IO, "write", tmp, "%s", strerror(sink.write_errno));
        st = S3F_ERR_IO;
    }
    if (st != S3F_OK)
        goto out;
    int fd = sink.fd;
    sink.fd = -1;
    if (close(fd) != 0) {
        cli_error_set(err, S3F_ERR_IO, "close", tmp, "%s", strerror(errno));
        st = S3F_ERR_IO;
        goto out;
    }
    if (rename(tmp, path) != 0) {
        cli_error_set(err, S3F_ERR_IO, "rename", path, "%s", strerror(errno));
        st = S3F_ERR_IO;
        goto out;
    }
    tmp_active = 0;

out:
    if (sink.fd >= 0)
        close(sink.fd);
    if (tmp_active) {
        unlink(tmp);
        tmp_active = 0;
    }
    free(tmp);
    return st;
}

/* ------------------------------------------------------------------------------------
 * Uploads
 * ---------------------------------------------------------------------------------- */

static enum s3f_status too_big(struct s3f_error *err, const char *path, uint64_t size) {
    cli_error_set(err, S3F_ERR_UNSUPPORTED, "upload", path,
                  "%" PRIu64 " bytes is over the 5 GiB limit of a single PutObject "
                  "(multipart upload is not supported by s3flash cp yet)",
                  size);
    return S3F_ERR_UNSUPPORTED;
}

/* Read all of stdin (at most 5 GiB) into a malloc'ed buffer. */
static enum s3f_status read_stdin(char **data, size_t *len, struct s3f_error *err) {
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        goto oom;
    for (;;) {
        if (n == cap) {
            if ((uint64_t)cap > MAX_PUT_BYTES) {
                free(buf);
                return too_big(err, "stdin", (uint64_t)n);
            }
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb)
                goto oom;
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(STDIN_FILENO, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cli_error_set(err, S3F_ERR_IO, "read", "stdin", "%s", strerror(errno));
            free(buf);
            return S3F_ERR_IO;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if ((uint64_t)n > MAX_PUT_BYTES) {
        free(buf);
        return too_big(err, "stdin", (uint64_t)n);
    }
    *data = buf;
    *len = n;
    return S3F_OK;
oom:
    free(buf);
    cli_error_set(err, S3F_ERR_NO_MEMORY, "read", "stdin", "out of memory");
    return S3F_ERR_NO_MEMORY;
}

static enum s3f_status upload_file(struct cli_ctx *ctx, const char *path, const char *bucket,
                                   const char *key, struct s3f_error *err) {
    struct s3f_put_options po;
    memset(&po, 0, sizeof(po));
    po.content_type = ctx->args->value[OPT_CONTENT_TYPE];
    enum s3f_status st;
    char *heap = NULL;
    size_t len = 0;
    int fd = -1;

    if (strcmp(path, "-") == 0) {
        st = read_stdin(&heap, &len, err);
        if (st != S3F_OK)
            return st;
    } else {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            cli_error_set(err, S3F_ERR_IO, "open", path, "%s", strerror(errno));
            return S3F_ERR_IO;
        }
        struct stat sb;
        if (fstat(fd, &sb) != 0) {
            cli_error_set(err, S3F_ERR_IO, "stat", path, "%s", strerror(errno));
            st = S3F_ERR_IO;
            goto out;
        }
        if (S_ISDIR(sb.st_mode)) {
            cli_error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", path,
                          "is a directory (use --recursive)");
            st = S3F_ERR_INVALID_ARGUMENT;
            goto out;
        }
        if (!S_ISREG(sb.st_mode)) {
            cli_error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", path,
                          "not a regular file");
            st = S3F_ERR_INVALID_ARGUMENT;
            goto out;
        }
        /* a regular file goes through the transfer engine: one PutObject when it fits
         * a part, else a parallel multipart upload read with pread (no file in memory) */
        close(fd);
        fd = -1;
        struct s3f_client *fc = cli_client(ctx);
        if (!fc) {
            cli_error_set(err, S3F_ERR_CONFIG, "client", NULL, "could not create the client");
            st = S3F_ERR_CONFIG;
            goto out;
        }
        struct cli_progress prog;
        cli_progress_init(&prog, !ctx->quiet && isatty(STDERR_FILENO), stderr);
        struct cli_progress_item item;
        cli_progress_item_init(&prog, &item, (uint64_t)sb.st_size);
        struct s3f_upload_options uo;
        memset(&uo, 0, sizeof(uo));
        uo.content_type = po.content_type;
        uo.progress = cli_progress_cb;
        uo.progress_user_data = &item;
        st = s3f_upload_file(fc, bucket, key, path, &uo, NULL, err);
        cli_progress_finish(&prog);
        goto out;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c) {
        cli_error_set(err, S3F_ERR_CONFIG, "client", NULL, "could not create the client");
        st = S3F_ERR_CONFIG;
        goto out;
    }
    const void *data = heap ? heap : "";
    st = s3f_put_object(c, bucket, key, data, len, &po, NULL, err);
out:
    free(heap);
    if (fd >= 0)
        close(fd);
    return st;
}

/* ------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------- */

/* Report a failed step. A client that could not be created has been reported already. */
static int fail(const struct cli_ctx *ctx, const struct s3f_error *err, enum s3f_status st,
                const char *resource) {
    if (st == S3F_ERR_ABORTED && err->status == S3F_OK)
        return CLI_EXIT_FAIL; /* stdout was closed: nothing to say */
    if (ctx->client_failed)
        return CLI_EXIT_FAIL; /* cli_client() reported it */
    struct s3f_error e = *err;
    if (e.status == S3F_OK)
        e.status = st;
    cli_report(&e, resource);
    return cli_exit_for(st);
}

static char *s3_uri(const char *bucket, const char *key) {
    size_t n = strlen(bucket) + strlen(key) + 8;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "s3://%s/%s", bucket, key);
    return s;
}

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

static int cp_one_upload(struct cli_ctx *ctx, const char *src, const char *bucket,
                         const char *key) {
    struct s3f_error err;
    s3f_error_clear(&err);
    char *uri = s3_uri(bucket, key);
    if (!uri) {
        cli_errorf("out of memory");
        return CLI_EXIT_FAIL;
    }
    enum s3f_status st = upload_file(ctx, src, bucket, key, &err);
    int rc = CLI_EXIT_OK;
    if (st != S3F_OK)
        rc = fail(ctx, &err, st, uri);
    else if (!ctx->quiet)
        printf("upload: %s to %s\n", src, uri);
    free(uri);
    return rc;
}

static int cp_one_download(struct cli_ctx *ctx, const char *bucket, const char *key,
                           const char *path) {
    struct s3f_error err;
    s3f_error_clear(&err);
    char *uri = s3_uri(bucket, key);
    if (!uri) {
        cli_errorf("out of memory");
        return CLI_EXIT_FAIL;
    }
    int rc = CLI_EXIT_OK;
    if (strcmp(path, "-") != 0 && cli_mkdirs_parent(path) != 0) {
        cli_error_set(&err, S3F_ERR_IO, "mkdir", path, "%s", strerror(errno));
        rc = fail(ctx, &err, S3F_ERR_IO, path);
        goto out;
    }
    enum s3f_status st = cli_download(ctx, bucket, key, path, &err);
    if (st != S3F_OK)
        rc = fail(ctx, &err, st, uri);
    else if (!ctx->quiet && strcmp(path, "-") != 0)
        printf("download: %s to %s\n", uri, path);
out:
    free(uri);
    return rc;
}

static int cp_one_copy(struct cli_ctx *ctx, const char *sb, const char *sk, const char *db,
                       const char *dk) {
    struct s3f_error err;
    s3f_error_clear(&err);
    char *src = s3_uri(sb, sk), *dst = s3_uri(db, dk);
    int rc = CLI_EXIT_OK;
    if (!src || !dst) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    enum s3f_status st = s3f_copy_object(c, sb, sk, db, dk, NULL, &err);
    if (st != S3F_OK)
        rc = fail(ctx, &err, st, src);
    else if (!ctx->quiet)
        printf("copy: %s to %s\n", src, dst);
out:
    free(src);
    free(dst);
    return rc;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Upload every regular file under `dir` to `key_prefix` + its path relative to `dir`.
 * Symbolic links to files are followed; links to directories are skipped (no loops). */
static int upload_tree(struct cli_ctx *ctx, const char *dir, const char *bucket,
                       const char *key_prefix) {
    DIR *d = opendir(dir);
    if (!d) {
        struct s3f_error err;
        cli_error_set(&err, S3F_ERR_IO, "opendir", dir, "%s", strerror(errno));
        return fail(ctx, &err, S3F_ERR_IO, dir);
    }
    struct cli_strlist names = {0};
    int rc = CLI_EXIT_OK;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (cli_strlist_push(&names, de->d_name) != 0) {
            cli_errorf("out of memory");
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        errno = 0;
    }
    if (errno != 0) {
        cli_errorf("readdir %s: %s", dir, strerror(errno));
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (names.n > 1)
        qsort(names.items, names.n, sizeof(*names.items), by_name);
    for (size_t i = 0; i < names.n && rc == CLI_EXIT_OK; i++) {
        char *path = cli_path_join(dir, names.items[i]);
        char *key = cli_strcat2(key_prefix, names.items[i]);
        if (!path || !key) {
            cli_errorf("out of memory");
            rc = CLI_EXIT_FAIL;
        } else {
            struct stat lsb, sb;
            if (lstat(path, &lsb) != 0) {
                cli_errorf("stat %s: %s", path, strerror(errno));
                rc = CLI_EXIT_FAIL;
            } else if (S_ISDIR(lsb.st_mode)) {
                char *sub = cli_strcat2(key, "/");
                if (!sub) {
                    cli_errorf("out of memory");
                    rc = CLI_EXIT_FAIL;
                } else {
                    rc = upload_tree(ctx, path, bucket, sub);
                }
                free(sub);
            } else if (S_ISREG(lsb.st_mode) ||
                       (S_ISLNK(lsb.st_mode) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))) {
                rc = cp_one_upload(ctx, path, bucket, key);
            } else if (!ctx->quiet) {
                fprintf(stderr, "s3flash: skipping %s: not a regular file or directory\n", path);
            }
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
    int rc = CLI_EXIT_OK;
    if (!s3src) {
        if (strcmp(src, "-") == 0)
            return cli_usage_error(ctx->cmd, "--recursive cannot read from stdin");
        if (!is_dir(src)) {
            struct s3f_error err;
            cli_error_set(&err, S3F_ERR_IO, "cp --recursive", src, "%s",
                          access(src, F_OK) == 0 ? "not a directory" : strerror(errno));
            return fail(ctx, &err, S3F_ERR_IO, src);
        }
        char *prefix = dir_prefix(dk);
        if (!prefix) {
            cli_errorf("out of memory");
            return CLI_EXIT_FAIL;
        }
        rc = upload_tree(ctx, src, db, prefix);
        free(prefix);
        return rc;
    }
    if (!s3dst && strcmp(dst, "-") == 0)
        return cli_usage_error(ctx->cmd, "--recursive cannot write to stdout");
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    char *prefix = dir_prefix(sk);
    char *dprefix = s3dst ? dir_prefix(dk) : NULL;
    struct cli_strlist keys = {0};
    if (!prefix || (s3dst && !dprefix)) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = cli_list_all(c, sb, prefix, page_size, &keys, &err);
    if (st != S3F_OK) {
        rc = fail(ctx, &err, st, src);
        goto out;
    }
    int skipped = 0;
    for (size_t i = 0; i < keys.n && rc == CLI_EXIT_OK; i++) {
        const char *key = keys.items[i];
        const char *rel = key + strlen(prefix);
        if (!rel[0])
            continue; /* the "directory marker" object of the prefix itself */
        if (s3dst) {
            char *dkey = cli_strcat2(dprefix, rel);
            if (!dkey) {
                cli_errorf("out of memory");
                rc = CLI_EXIT_FAIL;
                break;
            }
            rc = cp_one_copy(ctx, sb, key, db, dkey);
            free(dkey);
            continue;
        }
        if (!cli_safe_relative_path(rel)) {
            cli_errorf("skipping s3://%s/%s: its name is not a safe local path", sb, key);
            skipped++;
            continue;
        }
        char *path = cli_path_join(dst, rel);
        if (!path) {
            cli_errorf("out of memory");
            rc = CLI_EXIT_FAIL;
            break;
        }
        size_t pl = strlen(path);
        if (path[pl - 1] == '/') {
            /* a "directory marker" key: create the directory */
            if (cli_mkdirs(path) != 0) {
                cli_errorf("mkdir %s: %s", path, strerror(errno));
                rc = CLI_EXIT_FAIL;
            }
        } else {
            rc = cp_one_download(ctx, sb, key, path);
        }
        free(path);
    }
    if (rc == CLI_EXIT_OK && skipped)
        rc = CLI_EXIT_FAIL;
out:
    cli_strlist_free(&keys);
    free(prefix);
    free(dprefix);
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
        return cp_one_upload(ctx, src, db, dk);
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
        return cp_one_copy(ctx, sb, sk, db, dk);
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
    rc = cp_one_download(ctx, sb, sk, path);
    free(path);
    return rc;
}
