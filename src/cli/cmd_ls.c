/* s3flash ls: list a bucket or prefix, like `aws s3 ls`. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* `s3flash ls` with no URI (or "s3://"): the buckets, as `aws s3 ls` shows them. */
static int list_buckets(struct cli_ctx *ctx) {
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_bucket_list *list = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    if (s3f_list_buckets(c, &list, &err) != S3F_OK) {
        cli_report(&err, "s3://");
        return CLI_EXIT_FAIL;
    }
    for (size_t i = 0; i < list->n_buckets; i++) {
        char when[32];
        cli_format_time(list->buckets[i].creation_date, 0, when, sizeof(when));
        printf("%s %s\n", when, list->buckets[i].name);
    }
    s3f_bucket_list_free(list);
    return CLI_EXIT_OK;
}

int cli_list_pages(struct s3f_client *c, const char *uri, const char *bucket,
                   const char *prefix, const char *delimiter, int page_size,
                   int (*on_page)(void *ud, const struct s3f_list_page *page), void *ud) {
    struct s3f_list_tokens *seen = NULL;
    const char *token = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    for (;;) {
        struct s3f_list_options lo;
        memset(&lo, 0, sizeof(lo));
        lo.prefix = prefix[0] ? prefix : NULL;
        lo.delimiter = delimiter;
        lo.continuation_token = token;
        lo.max_keys = page_size;
        struct s3f_list_page *page = NULL;
        st = s3f_list_objects_v2(c, bucket, &lo, &page, &err);
        if (st != S3F_OK)
            break;
        if (on_page(ud, page) != 0) {
            st = S3F_ERR_NO_MEMORY;
            cli_error_set(&err, st, "ListObjectsV2", uri, "out of memory");
        } else {
            st = s3f_list_tokens_next(&seen, page, bucket, &token, &err);
        }
        s3f_list_page_free(page);
        if (st != S3F_OK || !token)
            break;
    }
    s3f_list_tokens_free(seen);
    if (st != S3F_OK)
        return cli_fail(&err, st, uri);
    return CLI_EXIT_OK;
}

struct print_ctx {
    size_t strip; /* bytes of each name not shown (the prefix's "directory") */
};

/* aws s3 ls's lines for one page, as it comes. */
static int print_page(void *ud, const struct s3f_list_page *page) {
    const struct print_ctx *pc = ud;
    for (size_t i = 0; i < page->n_common_prefixes; i++) {
        const char *p = page->common_prefixes[i];
        printf("%27sPRE %s\n", "", strlen(p) >= pc->strip ? p + pc->strip : p);
    }
    for (size_t i = 0; i < page->n_objects; i++)
        cli_ls_print_object(&page->objects[i], pc->strip);
    return 0;
}

void cli_ls_print_object(const struct s3f_list_entry *e, size_t strip) {
    char when[32];
    cli_format_time(e->last_modified, 0, when, sizeof(when));
    printf("%s %10" PRIu64 " %s\n", when, e->size,
           strlen(e->key) >= strip ? e->key + strip : e->key);
}

int cli_cmd_ls(struct cli_ctx *ctx) {
    if (ctx->args->n_pos == 0 || strcmp(ctx->args->pos[0], "s3://") == 0)
        return list_buckets(ctx);
    const char *uri = ctx->args->pos[0];
    char bucket[CLI_BUCKET_MAX], prefix[CLI_KEY_MAX];
    int rc = cli_parse_s3(uri, bucket, prefix);
    if (rc != CLI_EXIT_OK)
        return rc;
    int page_size = cli_page_size(ctx);
    if (page_size < 0)
        return CLI_EXIT_USAGE;
    int recursive = ctx->args->set[OPT_RECURSIVE] != 0;
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    if (s3f_bucket_is_directory(bucket)) /* unordered listings: sorted before shown */
        return cli_express_ls(ctx, c, uri, bucket, prefix, recursive, page_size);

    /* Without --recursive, names are shown relative to the "directory" of the prefix
     * (everything up to its last '/'), as aws s3 ls does. */
    struct print_ctx pc = {0};
    if (!recursive) {
        const char *slash = strrchr(prefix, '/');
        pc.strip = slash ? (size_t)(slash - prefix) + 1 : 0;
    }
    return cli_list_pages(c, uri, bucket, prefix, recursive ? NULL : "/", page_size,
                          print_page, &pc);
}
