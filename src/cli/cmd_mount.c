/* s3flash mount: parse the mount's options (every one a flag on the command line) and hand
 * them to the daemon in src/mount/ (built when libfuse3 is found; else the command says
 * so). docs/CLI.md lists the options, docs/SEMANTICS.md the file system's behaviour. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
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

/* Mountpoint's TTL: SECONDS (fractions allowed, up to a year), "minimal" (s3flash's 1 s:
 * the kernel asks again after a second, s3flash checks S3 then) or "indefinite" (kept
 * until the mount changes it itself). */
#define TTL_MINIMAL_S 1.0
#define TTL_INDEFINITE_S 1e9 /* ~31 years: never, for a mount */

static int parse_ttl(const char *v, double *out) {
    if (v && strcmp(v, "minimal") == 0) {
        *out = TTL_MINIMAL_S;
        return 0;
    }
    if (v && strcmp(v, "indefinite") == 0) {
        *out = TTL_INDEFINITE_S;
        return 0;
    }
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

/* --read-part-size / --write-part-size: Mountpoint's, each instead of --part-size for its
 * direction (the readers' client and the writers'). */
static int part_sizes(const struct cli_ctx *ctx, struct mnt_options *o) {
    static const struct {
        enum cli_opt_id id;
        const char *name;
    } dir[2] = {{OPT_READ_PART_SIZE, "--read-part-size"}, {OPT_WRITE_PART_SIZE, "--write-part-size"}};
    for (int i = 0; i < 2; i++) {
        const char *v = ctx->args->value[dir[i].id];
        uint64_t *out = i == 0 ? &o->read_part_size_bytes : &o->write_part_size_bytes;
        if (!v)
            continue;
        if (ctx->args->value[OPT_PART_SIZE])
            return cli_usage_error(ctx->cmd, "%s cannot be combined with --part-size", dir[i].name);
        if (cli_parse_size(v, out) != 0 || *out < (5ull << 20) || *out > (5ull << 30))
            return cli_usage_error(ctx->cmd, "%s must be a size from 5M to 5G (bytes, or with "
                                   "K, M, G), not '%s'", dir[i].name, v);
    }
    return CLI_EXIT_OK;
}

/* The client's options and Mountpoint's flags about the endpoint and the transport, with
 * the combinations no store takes refused before anything is mounted. */
static int client_flags(struct cli_ctx *ctx, struct mnt_options *o) {
    const struct cli_args *a = ctx->args;
    if (a->value[OPT_UPLOAD_CHECKSUMS]) {
        const char *v = a->value[OPT_UPLOAD_CHECKSUMS];
        if (strcmp(v, "crc32c") == 0)
            o->upload_checksum = S3F_CHECKSUM_CRC32C;
        else if (strcmp(v, "crc64nvme") == 0)
            o->upload_checksum = S3F_CHECKSUM_CRC64NVME;
        else if (strcmp(v, "off") == 0)
            o->upload_checksum = S3F_CHECKSUM_NONE;
        else
            return cli_usage_error(ctx->cmd, "--upload-checksums takes crc32c, crc64nvme or off, "
                                   "not '%s'", v);
    }
    cli_client_options(ctx, &o->client);
    o->client.log_level = S3F_LOG_OFF; /* set by mnt_run from --debug */
    o->client.user_agent_prefix = a->value[OPT_USER_AGENT_PREFIX];
    o->client.use_accelerate_endpoint = a->set[OPT_TRANSFER_ACCELERATION] ? 1 : 0;
    o->client.use_dualstack_endpoint = a->set[OPT_DUAL_STACK] ? 1 : 0;
    const char *ep = a->value[OPT_ENDPOINT_URL];
    if (a->set[OPT_TRANSFER_ACCELERATION]) {
        const char *why = ep ? "--endpoint-url (Transfer Acceleration has AWS's endpoint only)"
                          : o->client.force_path_style
                              ? "path-style addressing (it needs BUCKET.s3-accelerate.amazonaws.com)"
                          : strchr(o->bucket, '.')
                              ? "a bucket name with dots (not a valid accelerate host name)"
                          : s3f_bucket_is_directory(o->bucket)
                              ? "a directory bucket (S3 Express One Zone has no acceleration)"
                              : NULL;
        if (why)
            return cli_usage_error(ctx->cmd, "--transfer-acceleration cannot be used with %s",
                                   why);
    }
    if (a->set[OPT_DUAL_STACK] && ep)
        return cli_usage_error(ctx->cmd, "--dual-stack cannot be used with --endpoint-url (it "
                               "picks AWS's s3.dualstack.REGION.amazonaws.com)");
    if (a->value[OPT_MAX_THROUGHPUT]) {
        unsigned long n;
        if (parse_ulong(a->value[OPT_MAX_THROUGHPUT], 100000, 10, &n) != 0 || n < 1)
            return cli_usage_error(ctx->cmd, "--maximum-throughput-gbps must be a whole number "
                                   "of Gbit/s from 1, not '%s'", a->value[OPT_MAX_THROUGHPUT]);
        o->client.throughput_target_gbps = (double)n;
    }
    /* --bind: each interface must exist now (the kernel would refuse every connection) */
    static char ifaces[CLI_BIND_MAX * (IF_NAMESIZE + 1)];
    size_t off = 0;
    for (size_t i = 0; i < a->n_bind; i++) {
        const char *name = a->bind[i];
        if (!*name || strlen(name) >= IF_NAMESIZE || strchr(name, ',') ||
            if_nametoindex(name) == 0)
            return cli_usage_error(ctx->cmd, "--bind %s: no such network interface on this "
                                   "machine", name);
        off += (size_t)snprintf(ifaces + off, sizeof(ifaces) - off, "%s%s", off ? "," : "", name);
    }
    o->client.network_interfaces = a->n_bind ? ifaces : NULL;
    if (a->value[OPT_CA_BUNDLE] && access(a->value[OPT_CA_BUNDLE], R_OK) != 0)
        return cli_usage_error(ctx->cmd, "--ca-bundle %s: %s", a->value[OPT_CA_BUNDLE],
                               strerror(errno));
    return CLI_EXIT_OK;
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
    if (a->value[OPT_PREFIX]) { /* Mountpoint's --prefix: with a bare bucket only */
        const char *fp = a->value[OPT_PREFIX];
        size_t fl = strlen(fp);
        if (pl)
            return cli_usage_error(ctx->cmd, "--prefix cannot be combined with a source that "
                                   "has a prefix ('%s')", a->pos[0]);
        if (fl == 0 || fp[fl - 1] != '/' || fp[0] == '/' || strstr(fp, "//") ||
            fl > CLI_KEY_MAX)
            return cli_usage_error(ctx->cmd, "--prefix must end in '/' and have no empty path "
                                   "component (e.g. data/2024/), not '%s'", fp);
        memcpy(prefix, fp, fl + 1);
    }
    o.bucket = bucket;
    o.prefix = prefix;
    o.mountpoint = a->pos[1];

    if ((rc = client_flags(ctx, &o)) != CLI_EXIT_OK)
        return rc;
    o.foreground = a->set[OPT_FOREGROUND] ? 1 : 0;
    o.debug = a->set[OPT_DEBUG] ? 1 : 0;
    o.debug_crt = a->set[OPT_DEBUG_CRT] ? 1 : 0;
    o.no_log = a->set[OPT_NO_LOG] ? 1 : 0;
    o.log_file = a->value[OPT_LOG_FILE];
    o.log_directory = a->value[OPT_LOG_DIRECTORY];
    if (o.log_file && o.log_directory)
        return cli_usage_error(ctx->cmd, "--log-file and --log-directory exclude each other");
    if (o.no_log && (o.log_file || o.log_directory || o.debug || o.debug_crt ||
                     a->set[OPT_LOG_METRICS]))
        return cli_usage_error(ctx->cmd, "--no-log cannot be combined with --log-file, "
                               "--log-directory, --debug, --debug-crt or --log-metrics");
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
    o.allow_root = a->set[OPT_ALLOW_ROOT] ? 1 : 0;
    o.auto_unmount = a->set[OPT_AUTO_UNMOUNT] ? 1 : 0;
    if (o.auto_unmount && strncmp(o.mountpoint, "/dev/fd/", 8) == 0)
        return cli_usage_error(ctx->cmd, "--auto-unmount does nothing on a /dev/fd/N mount point: "
                               "the process that mounted it unmounts it (as Mountpoint says)");
    o.infer_content_type = a->set[OPT_INFER_CONTENT_TYPE] ? 1 : 0;
    if (o.allow_other && o.allow_root)
        return cli_usage_error(ctx->cmd, "--allow-root and --allow-other exclude each other "
                               "(--allow-other lets root in too)");
    if (a->value[OPT_BUCKET_TYPE]) {
        const char *bt = a->value[OPT_BUCKET_TYPE];
        if (strcmp(bt, "general-purpose") == 0)
            o.bucket_type = MNT_BUCKET_GENERAL_PURPOSE;
        else if (strcmp(bt, "directory") == 0)
            o.bucket_type = MNT_BUCKET_DIRECTORY;
        else
            return cli_usage_error(ctx->cmd, "--bucket-type takes general-purpose or directory, "
                                   "not '%s'", bt);
    }
    int directory = o.bucket_type ? o.bucket_type == MNT_BUCKET_DIRECTORY
                                  : s3f_bucket_is_directory(bucket);
    if (o.incremental_upload && !directory)
        return cli_usage_error(ctx->cmd, "--incremental-upload appends to objects of directory "
                               "buckets (S3 Express One Zone) only, and %s is a general-purpose "
                               "bucket (a directory bucket is named NAME--ZONE-ID--x-s3, or "
                               "given --bucket-type directory)", bucket);
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
    /* the block cache: --cache DIR, --max-cache-size (cli_engine_parse: MiB; 0 turns the
     * cache off, as in Mountpoint) */
    o.cache_dir = ctx->engine.cache_dir;
    o.max_cache_size_bytes = ctx->engine.cache_max_bytes;
    if (a->value[OPT_CACHE_BLOCK_SIZE]) {
        if (parse_ulong(a->value[OPT_CACHE_BLOCK_SIZE], 65536, 10, &n) != 0 || n < 64 ||
            (n & (n - 1)) != 0)
            return cli_usage_error(ctx->cmd, "--cache-block-size must be KiB, a power of two "
                                   "from 64 to 65536, not '%s'", a->value[OPT_CACHE_BLOCK_SIZE]);
        if (!a->value[OPT_CACHE] && !a->value[OPT_CACHE_XZ])
            return cli_usage_error(ctx->cmd, "--cache-block-size needs --cache DIR or "
                                   "--cache-xz BUCKET");
        o.client.cache_block_bytes = (uint64_t)n << 10;
    }
    /* Mountpoint's defaults: minimal, 60 s with a data cache (--cache or --cache-xz); the
     * negative TTL follows */
    o.metadata_ttl_s = a->value[OPT_CACHE] || a->value[OPT_CACHE_XZ] ? 60.0 : TTL_MINIMAL_S;
    if (a->value[OPT_METADATA_TTL] && parse_ttl(a->value[OPT_METADATA_TTL], &o.metadata_ttl_s))
        return cli_usage_error(ctx->cmd, "--metadata-ttl must be seconds (0 or more), minimal "
                               "or indefinite, not '%s'", a->value[OPT_METADATA_TTL]);
    o.negative_ttl_s = o.metadata_ttl_s;
    if (a->value[OPT_NEGATIVE_METADATA_TTL] &&
        parse_ttl(a->value[OPT_NEGATIVE_METADATA_TTL], &o.negative_ttl_s))
        return cli_usage_error(ctx->cmd, "--negative-metadata-ttl must be seconds (0 or more), "
                               "minimal or indefinite, not '%s'",
                               a->value[OPT_NEGATIVE_METADATA_TTL]);
    if (a->value[OPT_MEMORY_TARGET]) {
        if (cli_parse_size_mib(a->value[OPT_MEMORY_TARGET], &o.memory_target_bytes) != 0 ||
            o.memory_target_bytes < (32ull << 20))
            return cli_usage_error(ctx->cmd, "--memory-target must be MiB (at least 32), or a "
                                   "size such as 512M or 4G, not '%s'",
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
    if ((rc = part_sizes(ctx, &o)) != CLI_EXIT_OK)
        return rc;
    return mnt_run(&o);
}

#else

int cli_cmd_mount(struct cli_ctx *ctx) {
    cli_errorf("this s3flash was built without libfuse3: install libfuse3-dev (and fuse3) "
               "and build again to get 'mount'");
    return CLI_EXIT_FAIL;
}

#endif
