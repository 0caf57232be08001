/* What the CLI does differently for S3 Express One Zone directory buckets
 * (NAME--ZONE--x-s3, recognised by s3f_bucket_is_directory):
 *   ls      their listings come in no particular order: every page is collected, then the
 *           prefixes and the objects are each shown sorted by key, as aws s3 ls shows a
 *           general purpose bucket. With a delimiter a directory bucket takes only prefixes
 *           ending in '/': `ls s3://b/dir/pre` lists "dir/" and keeps the names starting
 *           with "pre".
 *   mv      within one directory bucket: RenameObject, one atomic request per object.
 *   append  PutObject with x-amz-write-offset-bytes at the object's current size. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* ---- ls ----------------------------------------------------------------------------- */

struct ls_line {
    char *name; /* the key or common prefix */
    uint64_t size;
    int64_t mtime;
};

struct ls_lines {
    struct ls_line *v;
    size_t n, cap;
};

static int ls_add(struct ls_lines *l, const char *name, uint64_t size, int64_t mtime) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        struct ls_line *nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = nc;
    }
    if (!(l->v[l->n].name = strdup(name)))
        return -1;
    l->v[l->n].size = size;
    l->v[l->n].mtime = mtime;
    l->n++;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct ls_line *)a)->name, ((const struct ls_line *)b)->name);
}

static void ls_free(struct ls_lines *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].name);
    free(l->v);
}

static int starts_with(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}

struct collect {
    const char *prefix; /* the names kept start with it */
    struct ls_lines pres, objs;
};

static int collect_page(void *ud, const struct s3f_list_page *page) {
    struct collect *k = ud;
    for (size_t i = 0; i < page->n_common_prefixes; i++)
        if (starts_with(page->common_prefixes[i], k->prefix) &&
            ls_add(&k->pres, page->common_prefixes[i], 0, 0) != 0)
            return -1;
    for (size_t i = 0; i < page->n_objects; i++) {
        const struct s3f_list_entry *e = &page->objects[i];
        if (starts_with(e->key, k->prefix) && ls_add(&k->objs, e->key, e->size, e->last_modified))
            return -1;
    }
    return 0;
}

int cli_express_ls(struct cli_ctx *ctx, struct s3f_client *c, const char *uri,
                   const char *bucket, const char *prefix, int recursive, int page_size) {
    (void)ctx;
    /* without --recursive: the listing's prefix is the "directory" of the one asked
     * (up to its last '/'), and names are shown relative to it */
    size_t strip = 0;
    if (!recursive) {
        const char *slash = strrchr(prefix, '/');
        strip = slash ? (size_t)(slash - prefix) + 1 : 0;
    }
    char dir[CLI_KEY_MAX];
    snprintf(dir, sizeof(dir), "%.*s", (int)(recursive ? strlen(prefix) : strip), prefix);
    struct collect k = {.prefix = prefix};
    int rc = cli_list_pages(c, uri, bucket, dir, recursive ? NULL : "/", page_size,
                            collect_page, &k);
    if (rc == CLI_EXIT_OK) {
        if (k.pres.n) /* qsort of NULL is undefined even for no element */
            qsort(k.pres.v, k.pres.n, sizeof(*k.pres.v), by_name);
        if (k.objs.n)
            qsort(k.objs.v, k.objs.n, sizeof(*k.objs.v), by_name);
        for (size_t i = 0; i < k.pres.n; i++)
            if (i == 0 || strcmp(k.pres.v[i].name, k.pres.v[i - 1].name) != 0)
                printf("%27sPRE %s\n", "", k.pres.v[i].name + strip);
        for (size_t i = 0; i < k.objs.n; i++) {
            struct s3f_list_entry e = {.key = k.objs.v[i].name, .size = k.objs.v[i].size,
                                       .last_modified = k.objs.v[i].mtime};
            cli_ls_print_object(&e, strip);
        }
    }
    ls_free(&k.pres);
    ls_free(&k.objs);
    return rc;
}

/* ---- mv: RenameObject ------------------------------------------------------------------ */

int cli_express_rename(struct cli_ctx *ctx, const char *bucket, const char *src_key,
                       const char *dst_key) {
    if (ctx->args->set[OPT_DRYRUN]) {
        printf("(dryrun) move: s3://%s/%s to s3://%s/%s\n", bucket, src_key, bucket, dst_key);
        return CLI_EXIT_OK;
    }
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_rename_object(c, bucket, src_key, dst_key, NULL, &err);
    char uri[CLI_BUCKET_MAX + CLI_KEY_MAX + 8];
    snprintf(uri, sizeof(uri), "s3://%s/%s", bucket, src_key);
    if (st != S3F_OK)
        return cli_fail(&err, st, uri);
    if (!ctx->quiet)
        printf("move: %s to s3://%s/%s\n", uri, bucket, dst_key);
    return CLI_EXIT_OK;
}

/* ---- append --------------------------------------------------------------------------- */

#define APPEND_CHUNK ((size_t)64 << 20)

/* Fill buf with up to cap bytes from fd (short only at end of input); -1 on error. */
static ssize_t read_full(int fd, char *buf, size_t cap) {
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int cli_cmd_append(struct cli_ctx *ctx) {
    const char *src = ctx->args->pos[0], *dst = ctx->args->pos[1];
    char bucket[CLI_BUCKET_MAX], key[CLI_KEY_MAX];
    int rc = cli_parse_s3(dst, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (!key[0] || key[strlen(key) - 1] == '/')
        return cli_usage_error(ctx->cmd, "%s is not an object key", dst);
    if (!s3f_bucket_is_directory(bucket))
        return cli_usage_error(ctx->cmd, "append needs an S3 Express One Zone directory bucket "
                               "(NAME--ZONE--x-s3); %s is a general purpose bucket", bucket);
    int fd = strcmp(src, "-") == 0 ? 0 : open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        struct s3f_error e;
        cli_error_set(&e, S3F_ERR_IO, "append", src, "%s", strerror(errno));
        cli_report(&e, src);
        return CLI_EXIT_FAIL;
    }
    struct s3f_client *c = cli_client(ctx);
    char *buf = c ? malloc(APPEND_CHUNK) : NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    uint64_t offset = 0, sent = 0;
    if (!c) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (!buf) {
        cli_errorf("out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    struct s3f_object_info info;
    st = s3f_head_object(c, bucket, key, NULL, &info, &err);
    if (st == S3F_OK)
        offset = info.size;
    else if (st == S3F_ERR_NOT_FOUND)
        st = S3F_OK; /* a new object */
    bool first = true;
    while (st == S3F_OK) {
        ssize_t n = read_full(fd, buf, APPEND_CHUNK);
        if (n < 0) {
            st = S3F_ERR_IO;
            cli_error_set(&err, st, "append", src, "read: %s", strerror(errno));
            break;
        }
        if (n == 0 && !first)
            break;
        if (n == 0 && offset > 0)
            break; /* nothing to add */
        st = s3f_append_object(c, bucket, key, offset, buf, (size_t)n, &info, &err);
        if (st == S3F_OK) {
            offset += (uint64_t)n;
            sent += (uint64_t)n;
        }
        first = false;
        if ((size_t)n < APPEND_CHUNK)
            break;
    }
    if (st != S3F_OK) {
        rc = cli_fail(&err, st, dst);
    } else if (!ctx->quiet) {
        printf("append: %s to %s (%" PRIu64 " bytes, now %" PRIu64 ")\n", src, dst, sent,
               offset);
    }
out:
    free(buf);
    if (fd > 0)
        close(fd);
    return rc;
}
