/* s3flash cp: every copy goes through the transfer engine of the library.
 *   local -> S3   files with s3f_upload_file (one PutObject, or a parallel multipart upload),
 *                 stdin with the streaming writer (multipart, any length);
 *   S3 -> local   s3f_download_file (parallel ranged GETs with If-Match) inside a private
 *                 temporary directory beside the destination, renamed into place; stdout,
 *                 FIFOs and character devices are streamed in order (s3f_download_stream:
 *                 several ranged GETs in flight);
 *   S3 -> S3      s3f_copy (server side: CopyObject, or UploadPartCopy parts in parallel).
 * With --recursive the objects are planned first (a directory walk or a listing, filtered
 * by --exclude/--include), then the job pool of transfer.c runs whole-object transfers on
 * the one shared client, so many files are in flight at once; a failed object is reported
 * and the others go on (exit status 1 at the end), as the AWS CLI does. mv is cp that
 * removes each source once its copy succeeded. Downloaded files get the object's
 * Last-Modified as their times (sync compares them).
 * The single-object transfers are in object_io.c, the temporary directories and the signal
 * thread in tmpdirs.c, the job pool in transfer.c. */
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
    if (s3src && s3f_bucket_is_directory(sb))
        cli_entries_sort(&entries); /* an unordered listing: objects in key order */
    if (move && s3src && s3dst && strcmp(sb, db) == 0 && s3f_bucket_is_directory(sb)) {
        /* within one directory bucket: each object renamed (RenameObject) */
        for (size_t i = 0; i < entries.n && !oom; i++) {
            char *from = cli_strcat2(prefix, entries.items[i].rel);
            char *to = cli_strcat2(dprefix, entries.items[i].rel);
            if (!from || !to)
                oom = 1;
            else if (cli_express_rename(ctx, sb, from, to) != CLI_EXIT_OK)
                rc = CLI_EXIT_FAIL;
            free(from);
            free(to);
        }
        if (oom) {
            cli_errorf("out of memory");
            rc = CLI_EXIT_FAIL;
        }
        goto out;
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
    rc = cli_run_all(&r, cli_run_workers(ctx, &r));
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
    ctx->engine.many = recursive;
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
        if (move && strcmp(sb, db) == 0 && s3f_bucket_is_directory(sb))
            return cli_express_rename(ctx, sb, sk, dk); /* one RenameObject */
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
