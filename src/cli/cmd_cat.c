/* s3flash cat: write an object to stdout. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_cmd_cat(struct cli_ctx *ctx) {
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX], key[CLI_KEY_MAX];
    int rc = cli_parse_s3_object(ctx, uri, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = cli_download(ctx, bucket, key, "-", &err);
    if (st == S3F_OK)
        return CLI_EXIT_OK;
    if (ctx->client_failed || (st == S3F_ERR_ABORTED && err.status == S3F_OK))
        return CLI_EXIT_FAIL; /* already reported, or stdout was closed */
    return cli_fail(&err, st, uri);
}
