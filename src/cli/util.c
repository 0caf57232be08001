/* Helpers shared by the s3flash commands: error reporting, URIs, paths, listing. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

void cli_report(const struct s3f_error *err, const char *resource) {
    struct s3f_error copy = *err;
    if (!copy.resource[0] && resource)
        snprintf(copy.resource, sizeof(copy.resource), "%s", resource);
    char line[2048];
    s3f_error_format(&copy, line, sizeof(line));
    fprintf(stderr, "s3flash: %s\n", line);
}

void cli_errorf(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "s3flash: %s\n", msg);
}

void cli_error_set(struct s3f_error *err, enum s3f_status status, const char *operation,
                   const char *resource, const char *fmt, ...) {
    s3f_error_clear(err);
    err->status = status;
    if (operation)
        snprintf(err->operation, sizeof(err->operation), "%s", operation);
    if (resource)
        snprintf(err->resource, sizeof(err->resource), "%s", resource);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
}

int cli_is_s3(const char *arg) {
    return strncasecmp(arg, "s3:", 3) == 0;
}

int cli_parse_s3(const char *arg, char *bucket, char *key) {
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_uri_parse(arg, bucket, CLI_BUCKET_MAX, key, CLI_KEY_MAX, &err);
    if (st == S3F_OK)
        return CLI_EXIT_OK;
    if (err.status == S3F_OK)
        err.status = st;
    /* Always name the URI the user typed (at most 160 bytes of it), whatever the parser
     * put in the message. */
    char line[2048], shown[161];
    s3f_error_format(&err, line, sizeof(line));
    snprintf(shown, sizeof(shown), "%s", arg);
    if (strstr(line, shown))
        fprintf(stderr, "s3flash: %s\n", line);
    else
        fprintf(stderr, "s3flash: %s%s: %s\n", shown, strlen(arg) > 160 ? "..." : "", line);
    return CLI_EXIT_USAGE;
}

int cli_exit_for(enum s3f_status status) {
    return (status == S3F_ERR_INVALID_URI) ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

int cli_fail(struct s3f_error *err, enum s3f_status st, const char *resource) {
    if (err->status == S3F_OK)
        err->status = st;
    cli_report(err, resource);
    return cli_exit_for(st);
}

const char *cli_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

char *cli_strcat2(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

char *cli_path_join(const char *a, const char *b) {
    if (!a[0])
        return cli_strcat2("", b);
    size_t la = strlen(a);
    while (*b == '/')
        b++;
    size_t lb = strlen(b);
    int slash = a[la - 1] != '/';
    char *s = malloc(la + (size_t)slash + lb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    if (slash)
        s[la] = '/';
    memcpy(s + la + (size_t)slash, b, lb + 1);
    return s;
}

int cli_mkdirs(const char *path) {
    if (!path[0])
        return 0;
    char *p = strdup(path);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                rc = -1;
                break;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    if (rc == 0) {
        struct stat st;
        if (stat(p, &st) != 0) {
            rc = -1;
        } else if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            rc = -1;
        }
    }
    int saved = errno;
    free(p);
    errno = saved;
    return rc;
}

int cli_mkdirs_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return 0;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    int rc = cli_mkdirs(dir);
    int saved = errno;
    free(dir);
    errno = saved;
    return rc;
}

void cli_format_time(int64_t t, int iso8601, char *buf, size_t len) {
    time_t tt = (time_t)t;
    struct tm tm;
    size_t n = 0;
    if (gmtime_r(&tt, &tm))
        n = iso8601 ? strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm)
                    : strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
    if (n == 0)
        snprintf(buf, len, "?");
}

int cli_safe_relative_path(const char *rel) {
    if (!rel[0] || rel[0] == '/')
        return 0;
    const char *p = rel;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0)
            return 0; /* "a//b" */
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (!end)
            break;
        p = end + 1; /* a trailing '/' ends the loop with *p == 0 */
    }
    return 1;
}

int cli_strlist_push(struct cli_strlist *l, const char *s) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **items = realloc(l->items, cap * sizeof(*items));
        if (!items)
            return -1;
        l->items = items;
        l->cap = cap;
    }
    char *copy = strdup(s);
    if (!copy)
        return -1;
    l->items[l->n++] = copy;
    return 0;
}

void cli_strlist_free(struct cli_strlist *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

void cli_sizes_free(struct cli_sizes *l) {
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

static int sizes_push(struct cli_sizes *l, uint64_t v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint64_t *items = realloc(l->items, cap * sizeof(*items));
        if (!items)
            return -1;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return 0;
}

enum s3f_status cli_list_all(struct s3f_client *c, const char *bucket, const char *prefix,
                             int page_size, struct cli_strlist *keys, struct s3f_error *err) {
    return cli_list_all_sizes(c, bucket, prefix, page_size, keys, NULL, err);
}

struct sizes_acc {
    struct cli_strlist *keys;
    struct cli_sizes *sizes;
};

static int sizes_acc_add(void *user, const struct s3f_list_entry *e) {
    struct sizes_acc *a = user;
    if (cli_strlist_push(a->keys, e->key) != 0)
        return -1;
    return a->sizes ? sizes_push(a->sizes, e->size) : 0;
}

enum s3f_status cli_list_all_sizes(struct s3f_client *c, const char *bucket,
                                   const char *prefix, int page_size, struct cli_strlist *keys,
                                   struct cli_sizes *sizes, struct s3f_error *err) {
    struct sizes_acc a = {.keys = keys, .sizes = sizes};
    return cli_list_each(c, bucket, prefix, page_size, sizes_acc_add, &a, err);
}

enum s3f_status cli_list_each(struct s3f_client *c, const char *bucket, const char *prefix,
                              int page_size, int (*fn)(void *user, const struct s3f_list_entry *e),
                              void *user, struct s3f_error *err) {
    struct s3f_list_tokens *seen = NULL;
    const char *token = NULL;
    enum s3f_status st = S3F_OK;
    for (;;) {
        struct s3f_list_options lo;
        memset(&lo, 0, sizeof(lo));
        lo.prefix = prefix[0] ? prefix : NULL;
        lo.continuation_token = token;
        lo.max_keys = page_size;
        struct s3f_list_page *page = NULL;
        st = s3f_list_objects_v2(c, bucket, &lo, &page, err);
        if (st != S3F_OK)
            break;
        for (size_t i = 0; i < page->n_objects; i++) {
            if (fn(user, &page->objects[i]) != 0) {
                st = S3F_ERR_NO_MEMORY;
                cli_error_set(err, st, "ListObjectsV2", NULL, "out of memory");
                break;
            }
        }
        if (st == S3F_OK)
            st = s3f_list_tokens_next(&seen, page, bucket, &token, err);
        s3f_list_page_free(page);
        if (st != S3F_OK || !token)
            break;
    }
    s3f_list_tokens_free(seen);
    return st;
}

int cli_page_size(const struct cli_ctx *ctx) {
    const char *v = ctx->args->value[OPT_PAGE_SIZE];
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || !end || *end || n < 1 || n > 1000) {
        cli_usage_error(ctx->cmd, "--page-size must be a number from 1 to 1000, not '%s'", v);
        return -1;
    }
    return (int)n;
}

int cli_parse_s3_object(const struct cli_ctx *ctx, const char *arg, char *bucket, char *key) {
    int rc = cli_parse_s3(arg, bucket, key);
    if (rc != CLI_EXIT_OK)
        return rc;
    size_t n = strlen(key);
    if (n == 0 || key[n - 1] == '/')
        return cli_usage_error(ctx->cmd, "%s needs s3://bucket/key, and '%s' names no object",
                               ctx->cmd->name, arg);
    return CLI_EXIT_OK;
}

int cli_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    static const char units[] = "KMGT";
    unsigned shift = 0;
    if (*p) {
        const char *u = strchr(units, toupper((unsigned char)*p));
        if (!u)
            return -1;
        shift = 10u * (unsigned)(u - units + 1);
        p++;
        /* "M", "Mi", "MiB", "MB" all mean 2^20 */
        if (*p == 'i' || *p == 'I')
            p++;
        if (*p == 'b' || *p == 'B')
            p++;
        if (*p)
            return -1;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

int cli_parse_size_mib(const char *s, uint64_t *out) {
    uint64_t v;
    if (cli_parse_size(s, &v) != 0)
        return -1;
    size_t n = strlen(s);
    if (s[n - 1] >= '0' && s[n - 1] <= '9') { /* no suffix: MiB */
        if (v > (UINT64_MAX >> 20))
            return -1;
        v <<= 20;
    }
    *out = v;
    return 0;
}

const char *cli_checksum_name(enum s3f_checksum_algorithm alg) {
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
    case S3F_CHECKSUM_CRC32C:
        return "crc32c";
    case S3F_CHECKSUM_NONE:
        return "none";
    case S3F_CHECKSUM_CRC32:
        return "crc32";
    case S3F_CHECKSUM_CRC64NVME:
        return "crc64nvme";
    }
    return "?";
}

#define MIN_PART_SIZE (5ULL << 20)
#define MAX_PART_SIZE (5ULL << 30)
#define MIN_MEMORY_LIMIT (16ULL << 20)
#define MAX_CONCURRENCY 256

int cli_engine_parse(struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    struct cli_engine *e = &ctx->engine;
    const char *v;
    if ((v = a->value[OPT_PART_SIZE])) {
        if (cli_parse_size(v, &e->part_size_bytes) != 0 || e->part_size_bytes < MIN_PART_SIZE ||
            e->part_size_bytes > MAX_PART_SIZE)
            return cli_usage_error(ctx->cmd,
                                   "--part-size must be a size from 5M to 5G (e.g. 8M, 64MiB), "
                                   "not '%s'",
                                   v);
    }
    if ((v = a->value[OPT_MEMORY_LIMIT])) {
        if (cli_parse_size(v, &e->memory_limit_bytes) != 0 ||
            e->memory_limit_bytes < MIN_MEMORY_LIMIT)
            return cli_usage_error(ctx->cmd,
                                   "--memory-limit must be a size of at least 16M (e.g. 256M, "
                                   "1G), not '%s'",
                                   v);
    }
    e->cache_dir = a->value[OPT_CACHE];
    /* MiB as Mountpoint reads it (1024 = 1 GiB), or a size with its unit (10G); 0: no
     * cache at all (Mountpoint's "fall back to no data cache") */
    if ((v = a->value[OPT_MAX_CACHE_SIZE])) {
        if (cli_parse_size_mib(v, &e->cache_max_bytes) != 0)
            return cli_usage_error(ctx->cmd,
                                   "--max-cache-size must be MiB (e.g. 1024) or a size with "
                                   "its unit (e.g. 10G, 500M), not '%s'",
                                   v);
        if (!e->cache_dir)
            return cli_usage_error(ctx->cmd, "--max-cache-size needs --cache DIR");
        if (e->cache_max_bytes == 0)
            e->cache_dir = NULL;
    }
    if ((v = a->value[OPT_CONCURRENCY])) {
        char *end = NULL;
        errno = 0;
        long n = (*v >= '0' && *v <= '9') ? strtol(v, &end, 10) : -1;
        if (errno || !end || *end || n < 1 || n > MAX_CONCURRENCY)
            return cli_usage_error(ctx->cmd, "--concurrency must be a number from 1 to %d, not '%s'",
                                   MAX_CONCURRENCY, v);
        e->max_inflight_requests = (uint32_t)n;
    }
    if ((v = a->value[OPT_IO_THREADS])) {
        char *end = NULL;
        errno = 0;
        long n = (*v >= '0' && *v <= '9') ? strtol(v, &end, 10) : -1;
        if (errno || !end || *end || n < 1 || n > 64)
            return cli_usage_error(ctx->cmd, "--io-threads must be a number from 1 to 64, not '%s'",
                                   v);
        e->io_threads = (uint32_t)n;
    }
    if ((v = a->value[OPT_CHECKSUM])) {
        static const enum s3f_checksum_algorithm algs[] = {
            S3F_CHECKSUM_CRC32C, S3F_CHECKSUM_CRC32, S3F_CHECKSUM_CRC64NVME, S3F_CHECKSUM_NONE};
        size_t i = 0;
        for (; i < sizeof(algs) / sizeof(algs[0]); i++)
            if (strcasecmp(v, cli_checksum_name(algs[i])) == 0)
                break;
        if (i == sizeof(algs) / sizeof(algs[0]))
            return cli_usage_error(ctx->cmd,
                                   "--checksum must be crc32c, crc32, crc64nvme or none, not '%s'",
                                   v);
        e->checksum = algs[i];
    }
    return CLI_EXIT_OK;
}

void cli_engine_apply(const struct cli_ctx *ctx, struct s3f_client_options *opts) {
    const struct cli_engine *e = &ctx->engine;
    opts->part_size_bytes = e->part_size_bytes;
    opts->memory_limit_bytes = e->memory_limit_bytes;
    opts->max_inflight_requests = e->max_inflight_requests;
    opts->checksum = e->checksum;
    opts->io_threads = e->io_threads;
    opts->cache_dir = e->cache_dir;
    opts->cache_max_bytes = e->cache_max_bytes;
    /* every request in flight needs a connection (the library's default is 64); a
     * many-object run may raise its requests in flight to CLI_MANY_INFLIGHT once it knows
     * its objects are small (cli_run_workers), so its client has the connections for
     * them (opened only when used) */
    if (e->max_inflight_requests > 64)
        opts->max_connections = e->max_inflight_requests;
    else if (e->many && !e->max_inflight_requests)
        opts->max_connections = CLI_MANY_INFLIGHT + 8;
}
