/* s3flash presign: print a presigned URL for one object. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

int cli_cmd_presign(struct cli_ctx *ctx) {
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX], key[CLI_KEY_MAX];
    int rc = cli_parse_s3_object(ctx, uri, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;

    unsigned long expires = 3600;
    const char *ev = ctx->args->value[OPT_EXPIRES_IN];
    if (ev) {
        char *end = NULL;
        errno = 0;
        expires = strtoul(ev, &end, 10);
        if (errno || !end || *end || ev[0] == '-' || ev[0] == '\0' || expires < 1 ||
            expires > 604800)
            return cli_usage_error(ctx->cmd,
                                   "--expires-in must be 1..604800 seconds, not '%s'", ev);
    }
    static const char *const methods[] = {"GET", "PUT", "HEAD", "DELETE"};
    const char *method = "GET";
    const char *mv = ctx->args->value[OPT_METHOD];
    if (mv) {
        method = NULL;
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
            if (strcasecmp(mv, methods[i]) == 0)
                method = methods[i];
        if (!method)
            return cli_usage_error(ctx->cmd, "--method must be GET, PUT, HEAD or DELETE, not '%s'",
                                   mv);
    }

    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_error err;
    s3f_error_clear(&err);
    char *url = NULL;
    enum s3f_status st = s3f_presign(c, method, bucket, key, (uint32_t)expires, &url, &err);
    if (st != S3F_OK)
        return cli_fail(&err, st, uri);
    printf("%s\n", url);
    free(url);
    return CLI_EXIT_OK;
}
