/* s3flash rm: delete one object, or (--recursive) every object under a prefix that the
 * --exclude/--include rules select. --dryrun prints what would be deleted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DELETE_BATCH 1000 /* DeleteObjects takes at most 1000 keys */

static int rm_one(struct cli_ctx *ctx, const char *uri, const char *bucket, const char *key) {
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_delete_object(c, bucket, key, &err);
    if (st != S3F_OK)
        return cli_fail(&err, st, uri);
    if (!ctx->quiet)
        printf("delete: s3://%s/%s\n", bucket, key);
    return CLI_EXIT_OK;
}

static int rm_recursive(struct cli_ctx *ctx, const char *uri, const char *bucket,
                        const char *key) {
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    /* The prefix is a "directory": "p" means "p/" so that rm -r s3://b/p spares "pq". */
    size_t kl = strlen(key);
    char *prefix = (kl == 0 || key[kl - 1] == '/') ? strdup(key) : cli_strcat2(key, "/");
    if (!prefix) {
        cli_errorf("out of memory");
        return CLI_EXIT_FAIL;
    }
    struct cli_strlist keys = {0};
    struct s3f_error err;
    s3f_error_clear(&err);
    int rc = CLI_EXIT_OK;
    enum s3f_status st = cli_list_all(c, bucket, prefix, page_size, &keys, &err);
    /* --exclude/--include on the path relative to the prefix */
    const struct cli_filter *filter = &ctx->args->filter;
    size_t kept = 0, pl = strlen(prefix);
    for (size_t i = 0; st == S3F_OK && i < keys.n; i++) {
        if (cli_filter_selects(filter, keys.items[i] + pl))
            keys.items[kept++] = keys.items[i];
        else
            free(keys.items[i]);
    }
    if (st == S3F_OK)
        keys.n = kept;
    if (st == S3F_OK && ctx->args->set[OPT_DRYRUN]) {
        for (size_t i = 0; i < keys.n && !ctx->quiet; i++)
            printf("(dryrun) delete: s3://%s/%s\n", bucket, keys.items[i]);
        cli_strlist_free(&keys);
    }
    for (size_t i = 0; st == S3F_OK && i < keys.n; i += DELETE_BATCH) {
        size_t n = keys.n - i < DELETE_BATCH ? keys.n - i : DELETE_BATCH;
        size_t failed = 0;
        st = s3f_delete_objects(c, bucket, (const char *const *)keys.items + i, n, &failed,
                                &err);
        if (st == S3F_OK && failed) {
            st = S3F_ERR_S3;
            cli_error_set(&err, st, "DeleteObjects", uri, "%zu keys were not deleted", failed);
        }
        if (st == S3F_OK && !ctx->quiet)
            for (size_t j = 0; j < n; j++)
                printf("delete: s3://%s/%s\n", bucket, keys.items[i + j]);
    }
    if (st != S3F_OK)
        rc = cli_fail(&err, st, uri);
    cli_strlist_free(&keys);
    free(prefix);
    return rc;
}

int cli_cmd_rm(struct cli_ctx *ctx) {
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX], key[CLI_KEY_MAX];
    if (ctx->args->set[OPT_RECURSIVE]) {
        int rc = cli_parse_s3(uri, bucket, key);
        if (rc != CLI_EXIT_OK)
            return rc;
        return rm_recursive(ctx, uri, bucket, key);
    }
    if (ctx->args->filter.n)
        return cli_usage_error(ctx->cmd, "--exclude and --include need --recursive");
    int rc = cli_parse_s3_object(ctx, uri, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (ctx->args->set[OPT_DRYRUN]) {
        if (!ctx->quiet)
            printf("(dryrun) delete: %s\n", uri);
        return CLI_EXIT_OK;
    }
    return rm_one(ctx, uri, bucket, key);
}
