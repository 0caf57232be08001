/* s3flash sync: make a destination directory or prefix hold what the source holds, as
 * `aws s3 sync` does. Both ends are listed (a directory walk or ListObjectsV2, filtered by
 * --exclude/--include), matched by relative path, and an object is copied when it is
 * missing at the destination or cli_sync_needs_copy says so (size, modification time;
 * --size-only, --exact-timestamps). The copies run as one cli_run (many in flight, one
 * progress bar, failures reported while the rest go on); with --delete the destination's
 * entries that the source lacks are removed afterwards. --dryrun prints what would be done. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transfer.h"

struct sync_plan {
    struct cli_run *r;
    enum cli_sync_dir dir;
    const char *src, *dst; /* the arguments (local directories) */
    const char *sprefix, *dprefix; /* S3 prefixes as directories ("p/") */
    uint64_t total;
};

/* Add the copy of source entry `e`. -1 when out of memory. */
static int plan_copy(struct sync_plan *p, const struct cli_entry *e) {
    struct cli_run *r = p->r;
    char *from = NULL, *to = NULL;
    int rc = 0;
    switch (p->dir) {
    case CLI_SYNC_UPLOAD:
        from = cli_path_join(p->src, e->rel);
        to = cli_strcat2(p->dprefix, e->rel);
        rc = (!from || !to) ? -1 : cli_run_add(r, CLI_JOB_UPLOAD, from, to, e->size);
        break;
    case CLI_SYNC_COPY:
        from = cli_strcat2(p->sprefix, e->rel);
        to = cli_strcat2(p->dprefix, e->rel);
        rc = (!from || !to) ? -1 : cli_run_add(r, CLI_JOB_COPY, from, to, e->size);
        break;
    case CLI_SYNC_DOWNLOAD:
        if (!cli_safe_relative_path(e->rel)) {
            cli_run_errorf(r, "skipping s3://%s/%s%s: its name is not a safe local path", r->sb,
                           p->sprefix, e->rel);
            cli_run_failed(r, CLI_EXIT_FAIL);
            return 0;
        }
        from = cli_strcat2(p->sprefix, e->rel);
        to = cli_path_join(p->dst, e->rel);
        if (!from || !to) {
            rc = -1;
        } else if (to[strlen(to) - 1] == '/') {
            /* a "directory marker" key: the directory, no file */
            if (!r->dryrun && cli_mkdirs(to) != 0) {
                cli_run_errorf(r, "mkdir %s: %s", to, strerror(errno));
                cli_run_failed(r, CLI_EXIT_FAIL);
            }
            goto out;
        } else {
            rc = cli_run_add(r, CLI_JOB_DOWNLOAD, from, to, e->size);
        }
        break;
    }
    if (rc == 0)
        p->total += e->size;
out:
    free(from);
    free(to);
    return rc;
}

/* Add the deletion of destination entry `e` (--delete). -1 when out of memory. */
static int plan_delete(struct sync_plan *p, const struct cli_entry *e) {
    char *what = p->dir == CLI_SYNC_DOWNLOAD ? cli_path_join(p->dst, e->rel)
                                             : cli_strcat2(p->dprefix, e->rel);
    int rc = what ? cli_run_add(p->r, CLI_JOB_DELETE, NULL, what, 0) : -1;
    free(what);
    return rc;
}

int cli_cmd_sync(struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    const char *src = a->pos[0], *dst = a->pos[1];
    int s3src = cli_is_s3(src), s3dst = cli_is_s3(dst);
    char sb[CLI_BUCKET_MAX] = "", sk[CLI_KEY_MAX] = "", db[CLI_BUCKET_MAX] = "",
         dk[CLI_KEY_MAX] = "";
    int rc;
    if (!s3src && !s3dst)
        return cli_usage_error(ctx->cmd, "sync needs an s3:// source or destination");
    if ((!s3src && strcmp(src, "-") == 0) || (!s3dst && strcmp(dst, "-") == 0))
        return cli_usage_error(ctx->cmd, "sync cannot read from stdin or write to stdout");
    if (s3src && (rc = cli_parse_s3(src, sb, sk)) != CLI_EXIT_OK)
        return rc;
    if (s3dst && (rc = cli_parse_s3(dst, db, dk)) != CLI_EXIT_OK)
        return rc;
    if (a->value[OPT_CONTENT_TYPE] && s3src)
        return cli_usage_error(ctx->cmd, "--content-type applies to uploads only");
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    if ((rc = cli_engine_parse(ctx)) != CLI_EXIT_OK)
        return rc;
    ctx->engine.many = true;
    if (!s3src && !cli_is_dir(src)) {
        struct s3f_error err;
        cli_error_set(&err, S3F_ERR_IO, "sync", src, "%s",
                      access(src, F_OK) == 0 ? "not a directory" : strerror(errno));
        cli_report(&err, src);
        return CLI_EXIT_FAIL;
    }
    /* before the client starts its I/O threads: they must not take these signals */
    if (!s3dst && cli_download_signals() != 0) {
        cli_errorf("cannot set up the signal handling of downloads: %s", strerror(errno));
        return CLI_EXIT_FAIL;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;

    struct cli_sync_rules rules = {.size_only = a->set[OPT_SIZE_ONLY] != 0,
                                   .exact_timestamps = a->set[OPT_EXACT_TIMESTAMPS] != 0};
    struct cli_run r;
    cli_run_init(&r, ctx, sb, db);
    struct sync_plan p = {.r = &r, .src = src, .dst = dst};
    p.dir = !s3src ? CLI_SYNC_UPLOAD : s3dst ? CLI_SYNC_COPY : CLI_SYNC_DOWNLOAD;
    const struct cli_filter *filter = &a->filter;
    struct cli_entries se = {0}, de = {0};
    char *sprefix = s3src ? cli_dir_prefix(sk) : NULL;
    char *dprefix = s3dst ? cli_dir_prefix(dk) : NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    int oom = (s3src && !sprefix) || (s3dst && !dprefix);
    rc = CLI_EXIT_OK;
    if (oom)
        goto run;
    p.sprefix = sprefix;
    p.dprefix = dprefix;
    if (s3src && s3dst && strcmp(sb, db) == 0 && strcmp(sprefix, dprefix) == 0) {
        rc = cli_usage_error(ctx->cmd, "cannot sync %s with itself", src);
        goto out;
    }

    /* both sides, filtered the same way (an excluded object is neither copied nor
     * deleted), in byte order */
    if (!s3src) {
        oom = cli_walk_local(&r, src, filter, false, &se) != 0;
    } else if ((st = cli_list_entries(c, sb, sprefix, page_size, filter, &se, &err)) != S3F_OK) {
        rc = cli_run_report(&r, &err, st, src);
        goto out;
    }
    if (oom)
        goto run;
    if (!s3dst) {
        oom = cli_walk_local(&r, dst, filter, true, &de) != 0;
    } else if ((st = cli_list_entries(c, db, dprefix, page_size, filter, &de, &err)) != S3F_OK) {
        rc = cli_run_report(&r, &err, st, dst);
        goto out;
    }
    if (oom)
        goto run;
    cli_entries_sort(&se);
    cli_entries_sort(&de);

    /* copies: missing at the destination, or changed */
    size_t i = 0, j = 0;
    while (i < se.n && !oom) {
        int cmp = j < de.n ? strcmp(se.items[i].rel, de.items[j].rel) : -1;
        if (cmp > 0) {
            j++;
            continue;
        }
        const struct cli_entry *s = &se.items[i++];
        if (cmp == 0) {
            const struct cli_entry *d = &de.items[j++];
            if (!cli_sync_needs_copy(&rules, p.dir, s->size, s->mtime, d->size, d->mtime))
                continue;
        }
        oom = plan_copy(&p, s) != 0;
    }

run:
    if (oom) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    cli_progress_set_total(&r.prog, p.total);
    size_t workers = cli_run_workers(ctx, &r);
    if (r.n_jobs)
        cli_run_all(&r, workers);

    /* --delete: after the copies, what the destination has and the source lacks */
    if (a->set[OPT_DELETE]) {
        size_t first = r.n_jobs;
        for (i = 0, j = 0; j < de.n && !oom;) {
            int cmp = i < se.n ? strcmp(se.items[i].rel, de.items[j].rel) : 1;
            if (cmp < 0) {
                i++;
            } else if (cmp == 0) {
                i++;
                j++;
            } else {
                oom = plan_delete(&p, &de.items[j++]) != 0;
            }
        }
        if (oom) {
            cli_errorf("out of memory");
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        if (r.n_jobs > first)
            cli_run_all(&r, workers);
    }
    rc = r.failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
out:
    cli_run_cleanup(&r);
    cli_entries_free(&se);
    cli_entries_free(&de);
    free(sprefix);
    free(dprefix);
    return rc;
}
