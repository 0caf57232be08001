/* s3flash mount: parse the mount's options (every one a flag on the command line) and hand
 * them to the daemon in src/mount/ (built when libfuse3 is found; else the command says
 * so). docs/CLI.md lists the options, docs/SEMANTICS.md the file system's behaviour. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifdef S3F_HAVE_FUSE
#include "mount/mount.h"

static int parse_ulong(const char *v, unsigned long max, int base, unsigned long *out) {
    if (!v || !*v || (*v < '0' || *v > '9'))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long n = strtoul(v, &end, base);
    if (errno || !end || *end || n > max)
        return -1;
    *out = n;
    return 0;
}

static int parse_seconds(const char *v, double *out) {
    if (!v || !*v || ((*v < '0' || *v > '9') && *v != '.'))
        return -1;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || !end || *end || d < 0 || d > 31536000.0)
        return -1;
    *out = d;
    return 0;
}

int cli_cmd_mount(struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    struct mnt_options o;
    memset(&o, 0, sizeof(o));
    int rc = cli_engine_parse(ctx);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (a->set[OPT_MEMORY_LIMIT] || a->set[OPT_CONCURRENCY])
        return cli_usage_error(ctx->cmd, "mount takes --memory-target, not --memory-limit");

    /* BUCKET[/PREFIX/], with or without s3:// */
    const char *src = a->pos[0];
    if (strncasecmp(src, "s3://", 5) == 0)
        src += 5;
    static char bucket[CLI_BUCKET_MAX], prefix[CLI_KEY_MAX + 2], cache_xz[CLI_BUCKET_MAX];
    const char *slash = strchr(src, '/');
    if (strncmp(src, "arn:", 4) == 0) { /* an ARN bucket runs to its access point's name */
        static char uri[CLI_BUCKET_MAX + CLI_KEY_MAX + 8], key[CLI_KEY_MAX + 1];
        snprintf(uri, sizeof(uri), "s3://%s", src);
        if (s3f_uri_parse(uri, bucket, sizeof(bucket), key, sizeof(key), NULL) == S3F_OK)
            slash = src[strlen(bucket)] == '/' ? src + strlen(bucket) : NULL;
    }
    size_t bl = slash ? (size_t)(slash - src) : strlen(src);
    if (bl == 0 || bl >= sizeof(bucket))
        return cli_usage_error(ctx->cmd, "'%s' does not name a bucket (BUCKET or BUCKET/PREFIX/)",
                               a->pos[0]);
    memcpy(bucket, src, bl);
    bucket[bl] = 0;
    const char *p = slash ? slash + 1 : "";
    size_t pl = strlen(p);
    if (pl > CLI_KEY_MAX)
        return cli_usage_error(ctx->cmd, "the prefix of '%s' is too long", a->pos[0]);
    memcpy(prefix, p, pl);
    if (pl && prefix[pl - 1] != '/')
        prefix[pl++] = '/';
    prefix[pl] = 0;
    if (strstr(prefix, "//") || prefix[0] == '/')
        return cli_usage_error(ctx->cmd, "the prefix '%s' has an empty path component", prefix);
    o.bucket = bucket;
    o.prefix = prefix;
    o.mountpoint = a->pos[1];

    cli_client_options(ctx, &o.client);
    o.client.log_level = S3F_LOG_OFF; /* set by mnt_run from --debug */
    o.client.user_agent_prefix = a->value[OPT_USER_AGENT_PREFIX];
    o.foreground = a->set[OPT_FOREGROUND] ? 1 : 0;
    o.debug = a->set[OPT_DEBUG] ? 1 : 0;
    o.log_file = a->value[OPT_LOG_FILE];
    o.metrics_listen = a->value[OPT_METRICS_LISTEN];
    o.metrics_allow_remote = a->set[OPT_METRICS_ALLOW_REMOTE] ? 1 : 0;
    o.log_metrics = a->set[OPT_LOG_METRICS] ? 1 : 0;
    o.otlp_endpoint = a->value[OPT_OTLP_ENDPOINT];
    o.otlp_interval_ms = cli_otlp_interval_ms(ctx);
    o.read_only = a->set[OPT_READ_ONLY] ? 1 : 0;
    o.allow_delete = a->set[OPT_ALLOW_DELETE] ? 1 : 0;
    o.allow_overwrite = a->set[OPT_ALLOW_OVERWRITE] ? 1 : 0;
    o.allow_rename = a->set[OPT_ALLOW_RENAME] ? 1 : 0;
    o.incremental_upload = a->set[OPT_INCREMENTAL_UPLOAD] ? 1 : 0;
    o.allow_other = a->set[OPT_ALLOW_OTHER] ? 1 : 0;
    if (o.read_only && (o.allow_delete || o.allow_overwrite || o.allow_rename ||
                        o.incremental_upload))
        return cli_usage_error(ctx->cmd, "--read-only cannot be combined with --allow-delete, "
                                         "--allow-overwrite, --allow-rename or "
                                         "--incremental-upload");
    unsigned long n;
    o.uid = getuid();
    o.gid = getgid();
    if (a->value[OPT_UID]) {
        if (parse_ulong(a->value[OPT_UID], 4294967294ul, 10, &n) != 0)
            return cli_usage_error(ctx->cmd, "--uid must be a number, not '%s'", a->value[OPT_UID]);
        o.uid = (uid_t)n;
    }
    if (a->value[OPT_GID]) {
        if (parse_ulong(a->value[OPT_GID], 4294967294ul, 10, &n) != 0)
            return cli_usage_error(ctx->cmd, "--gid must be a number, not '%s'", a->value[OPT_GID]);
        o.gid = (gid_t)n;
    }
    o.dir_mode = 0755;
    o.file_mode = 0644;
    if (a->value[OPT_DIR_MODE]) {
        if (parse_ulong(a->value[OPT_DIR_MODE], 07777, 8, &n) != 0)
            return cli_usage_error(ctx->cmd, "--dir-mode must be an octal mode such as 0755, "
                                             "not '%s'", a->value[OPT_DIR_MODE]);
        o.dir_mode = (mode_t)n;
    }
    if (a->value[OPT_FILE_MODE]) {
        if (parse_ulong(a->value[OPT_FILE_MODE], 07777, 8, &n) != 0)
            return cli_usage_error(ctx->cmd, "--file-mode must be an octal mode such as 0644, "
                                             "not '%s'", a->value[OPT_FILE_MODE]);
        o.file_mode = (mode_t)n;
    }
    o.metadata_ttl_s = 1.0;
    o.negative_ttl_s = 1.0;
    if (a->value[OPT_METADATA_TTL] && parse_seconds(a->value[OPT_METADATA_TTL], &o.metadata_ttl_s))
        return cli_usage_error(ctx->cmd, "--metadata-ttl must be seconds (0 or more), not '%s'",
                               a->value[OPT_METADATA_TTL]);
    if (a->value[OPT_NEGATIVE_METADATA_TTL] &&
        parse_seconds(a->value[OPT_NEGATIVE_METADATA_TTL], &o.negative_ttl_s))
        return cli_usage_error(ctx->cmd,
                               "--negative-metadata-ttl must be seconds (0 or more), not '%s'",
                               a->value[OPT_NEGATIVE_METADATA_TTL]);
    o.cache_dir = a->value[OPT_CACHE];
    if (a->value[OPT_CACHE_XZ]) {
        /* a bucket name or s3://BUCKET, as Mountpoint takes it; no prefix */
        const char *xz = a->value[OPT_CACHE_XZ];
        if (strncasecmp(xz, "s3://", 5) == 0)
            xz += 5;
        size_t xn = strlen(xz);
        if (xn && xz[xn - 1] == '/')
            xn--;
        if (!xn || xn >= sizeof(cache_xz) || memchr(xz, '/', xn))
            return cli_usage_error(ctx->cmd, "--cache-xz takes a bucket (BUCKET or s3://BUCKET), "
                                             "with no prefix, not '%s'",
                                   a->value[OPT_CACHE_XZ]);
        snprintf(cache_xz, sizeof(cache_xz), "%.*s", (int)xn, xz);
        if (!s3f_bucket_is_directory(cache_xz))
            return cli_usage_error(ctx->cmd,
                                   "--cache-xz needs an S3 Express One Zone directory bucket "
                                   "(NAME--ZONE-ID--x-s3, e.g. cache--usw2-az1--x-s3): '%s' is "
                                   "a general purpose bucket's name",
                                   cache_xz);
        o.cache_xz_bucket = cache_xz;
    }
    if (a->value[OPT_MAX_CACHE_SIZE]) {
        if (!o.cache_dir)
            return cli_usage_error(ctx->cmd, "--max-cache-size needs --cache DIR");
        if (cli_parse_size(a->value[OPT_MAX_CACHE_SIZE], &o.max_cache_size_bytes) != 0 ||
            o.max_cache_size_bytes == 0)
            return cli_usage_error(ctx->cmd, "--max-cache-size must be a size (e.g. 10G), not '%s'",
                                   a->value[OPT_MAX_CACHE_SIZE]);
    }
    if (a->value[OPT_MEMORY_TARGET]) {
        if (cli_parse_size(a->value[OPT_MEMORY_TARGET], &o.memory_target_bytes) != 0 ||
            o.memory_target_bytes < (32ull << 20))
            return cli_usage_error(ctx->cmd, "--memory-target must be a size of at least 32M "
                                             "(e.g. 512M, 4G), not '%s'",
                                   a->value[OPT_MEMORY_TARGET]);
    }
    if (a->value[OPT_MAX_THREADS]) {
        if (parse_ulong(a->value[OPT_MAX_THREADS], 1024, 10, &n) != 0 || n < 1)
            return cli_usage_error(ctx->cmd, "--max-threads must be a number from 1 to 1024, "
                                             "not '%s'", a->value[OPT_MAX_THREADS]);
        o.max_threads = (unsigned)n;
    }
    if (a->value[OPT_PREFETCH_LISTED]) {
        if (parse_ulong(a->value[OPT_PREFETCH_LISTED], 1024, 10, &n) != 0)
            return cli_usage_error(ctx->cmd, "--prefetch-listed must be a number from 0 to "
                                             "1024, not '%s'", a->value[OPT_PREFETCH_LISTED]);
        o.prefetch_listed = (unsigned)n;
    }
    int ps = cli_page_size(ctx);
    if (ps < 0)
        return CLI_EXIT_USAGE;
    o.page_size = ps;
    o.part_size_bytes = ctx->engine.part_size_bytes;
    return mnt_run(&o);
}

#else

int cli_cmd_mount(struct cli_ctx *ctx) {
    cli_errorf("this s3flash was built without libfuse3: install libfuse3-dev (and fuse3) "
               "and build again to get 'mount'");
    return CLI_EXIT_FAIL;
}

#endif
