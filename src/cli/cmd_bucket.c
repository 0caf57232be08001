/* s3flash mb / rb: create and remove buckets. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int bucket_arg(const char *uri, char *bucket) {
    char key[CLI_KEY_MAX];
    int rc = cli_parse_s3(uri, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (key[0]) {
        cli_errorf("%s names an object; give a bucket: s3://bucket", uri);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int bucket_cmd(struct cli_ctx *ctx, bool create) {
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX];
    int rc = bucket_arg(uri, bucket);
    if (rc != CLI_EXIT_OK)
        return rc;
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = create ? s3f_create_bucket(c, bucket, &err)
                                : s3f_delete_bucket(c, bucket, &err);
    if (st != S3F_OK) {
        cli_report(&err, uri);
        return cli_exit_for(st);
    }
    if (!ctx->quiet)
        printf("%s: s3://%s\n", create ? "make_bucket" : "remove_bucket", bucket);
    return CLI_EXIT_OK;
}

int cli_cmd_mb(struct cli_ctx *ctx) {
    return bucket_cmd(ctx, true);
}

int cli_cmd_rb(struct cli_ctx *ctx) {
    return bucket_cmd(ctx, false);
}
