/* s3flash stat: an object's metadata from HeadObject, one "name: value" line each. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_cmd_stat(struct cli_ctx *ctx) {
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX], key[CLI_KEY_MAX];
    int rc = cli_parse_s3_object(ctx, uri, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_head_object(c, bucket, key, NULL, &info, &err);
    if (st != S3F_OK)
        return cli_fail(&err, st, uri);
    printf("size: %" PRIu64 "\n", info.size);
    printf("etag: %s\n", info.etag);
    if (info.last_modified) {
        char when[32];
        cli_format_time(info.last_modified, 1, when, sizeof(when));
        printf("last-modified: %s\n", when);
    }
    if (info.content_type[0])
        printf("content-type: %s\n", info.content_type);
    if (info.version_id[0])
        printf("version-id: %s\n", info.version_id);
    if (info.storage_class[0])
        printf("storage-class: %s\n", info.storage_class);
    if (info.checksum_crc32c[0])
        printf("checksum-crc32c: %s\n", info.checksum_crc32c);
    if (info.checksum_crc32[0])
        printf("checksum-crc32: %s\n", info.checksum_crc32);
    if (info.checksum_crc64nvme[0])
        printf("checksum-crc64nvme: %s\n", info.checksum_crc64nvme);
    if (info.checksum_sha256[0])
        printf("checksum-sha256: %s\n", info.checksum_sha256);
    return CLI_EXIT_OK;
}
