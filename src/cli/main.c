/* s3flash: the command-line tool. Parses the command line, creates the client on demand
 * and runs one command (cmd_*.c). Uses only the public header. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const struct cli_opt_spec ls_opts[] = {
    {"recursive", 'r', 0, OPT_RECURSIVE, NULL, "list every key under the prefix (no PRE lines)"},
    {"page-size", 0, 1, OPT_PAGE_SIZE, "N", "keys per ListObjectsV2 request (1..1000)"},
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

/* Options shared by cp, mv and sync (the transfer engine's settings), and by the commands
 * that select objects (--exclude/--include, --dryrun). */
#define ENGINE_OPTS                                                                          \
    {"part-size", 0, 1, OPT_PART_SIZE, "SIZE",                                               \
     "part of multipart uploads and ranged GETs, 5M..5G (default 8M)"},                      \
    {"concurrency", 0, 1, OPT_CONCURRENCY, "N",                                              \
     "requests in flight, 1..256 (default 25); -r: objects in flight too (max 64)"},          \
    {"memory-limit", 0, 1, OPT_MEMORY_LIMIT, "SIZE",                                         \
     "buffer pool of stdin uploads, at least 16M (default 512M)"},                           \
    {"checksum", 0, 1, OPT_CHECKSUM, "ALG",                                                  \
     "crc32c (default), crc32, crc64nvme or none: sent with uploads, verified on downloads"}, \
    {"cache", 0, 1, OPT_CACHE, "DIR",                                                        \
     "downloads keep their blocks in this node-local cache and read them from it while "     \
     "the object's ETag is the same (docs/CACHE.md)"},                                        \
    {"max-cache-size", 0, 1, OPT_MAX_CACHE_SIZE, "SIZE",                                     \
     "bound of the --cache directory, least recently used blocks evicted (default 10G)"}

#define METRICS_OPTS                                                                         \
    {"metrics-listen", 0, 1, OPT_METRICS_LISTEN, "ADDR",                                     \
     "serve the metrics in the Prometheus text format at http://ADDR/metrics: PORT "         \
     "(127.0.0.1), IP:PORT or [IPv6]:PORT (docs/METRICS.md)"},                               \
    {"metrics-allow-remote", 0, 0, OPT_METRICS_ALLOW_REMOTE, NULL,                           \
     "let --metrics-listen use an address other than loopback (no authentication)"},         \
    {"log-metrics", 0, 0, OPT_LOG_METRICS, NULL,                                             \
     "log the metrics that changed every 5 seconds (\"metrics: ...\" lines)"},             \
    {"otlp-endpoint", 0, 1, OPT_OTLP_ENDPOINT, "URL",                                        \
     "push the metrics to this OTLP/HTTP collector (http://HOST:PORT; POSTed to "            \
     "URL/v1/metrics, protobuf)"},                                                           \
    {"otlp-export-interval", 0, 1, OPT_OTLP_EXPORT_INTERVAL, "SECONDS",                      \
     "seconds between OTLP pushes (default 60; one more at the end)"}
/* cp, mv, sync, bench: the metrics options and --metrics-linger */
#define COMMAND_METRICS_OPTS                                                                 \
    METRICS_OPTS,                                                                            \
    {"metrics-linger", 0, 1, OPT_METRICS_LINGER, "SECONDS",                                  \
     "after the command, keep serving the last metrics this long (or until SIGTERM)"}

#define FILTER_OPTS(when)                                                                    \
    {"exclude", 0, 1, OPT_EXCLUDE, "PATTERN",                                                \
     "leave out what matches (path relative to the source" when ")"},                        \
    {"include", 0, 1, OPT_INCLUDE, "PATTERN",                                                \
     "take back in what matches; the last matching --exclude/--include wins"},               \
    {"dryrun", 0, 0, OPT_DRYRUN, NULL, "print what would be done, change nothing"}

/* cp's and mv's options after --recursive */
#define COPY_OPTS                                                                            \
    {"content-type", 0, 1, OPT_CONTENT_TYPE, "TYPE",                                         \
     "Content-Type of uploaded objects (default application/octet-stream)"},                 \
    {"page-size", 0, 1, OPT_PAGE_SIZE, "N", "keys per listing request with --recursive"},     \
    FILTER_OPTS("; with -r"), ENGINE_OPTS, COMMAND_METRICS_OPTS,                              \
    {NULL, 0, 0, OPT_NONE, NULL, NULL}

static const struct cli_opt_spec cp_opts[] = {
    {"recursive", 'r', 0, OPT_RECURSIVE, NULL,
     "copy a local directory to a prefix, or a prefix to a local directory"},
    COPY_OPTS,
};

static const struct cli_opt_spec mv_opts[] = {
    {"recursive", 'r', 0, OPT_RECURSIVE, NULL,
     "move a local directory to a prefix, or a prefix to a local directory or prefix"},
    COPY_OPTS,
};

static const struct cli_opt_spec sync_opts[] = {
    {"delete", 0, 0, OPT_DELETE, NULL,
     "after the copies, delete what the destination has and the source lacks"},
    {"size-only", 0, 0, OPT_SIZE_ONLY, NULL, "copy when missing or the size differs, only"},
    {"exact-timestamps", 0, 0, OPT_EXACT_TIMESTAMPS, NULL,
     "S3 -> local: download a same-sized object unless the times are equal"},
    {"content-type", 0, 1, OPT_CONTENT_TYPE, "TYPE",
     "Content-Type of uploaded objects (default application/octet-stream)"},
    {"page-size", 0, 1, OPT_PAGE_SIZE, "N", "keys per listing request"},
    FILTER_OPTS(""),
    ENGINE_OPTS,
    COMMAND_METRICS_OPTS,
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec rm_opts[] = {
    {"recursive", 'r', 0, OPT_RECURSIVE, NULL, "delete every key under the prefix"},
    {"page-size", 0, 1, OPT_PAGE_SIZE, "N", "keys per listing request with --recursive"},
    FILTER_OPTS("; with -r"),
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec no_opts[] = {
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec presign_opts[] = {
    {"expires-in", 0, 1, OPT_EXPIRES_IN, "SECONDS", "validity of the URL, 1..604800 (default 3600)"},
    {"method", 0, 1, OPT_METHOD, "METHOD", "GET, PUT, HEAD or DELETE (default GET)"},
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec bench_opts[] = {
    {"size", 0, 1, OPT_SIZE, "SIZE", "bytes per object, with K/M/G/T (binary) (default 64M)"},
    {"count", 0, 1, OPT_NUM_OBJECTS, "N", "objects (default 4)"},
    {"part-size", 0, 1, OPT_PART_SIZE, "SIZE", "part size, 5M..5G (default: the client's, 8M)"},
    {"concurrency", 0, 1, OPT_CONCURRENCY, "N", "data requests in flight, 1..256 (default: the "
                                                "client's)"},
    {"memory-limit", 0, 1, OPT_MEMORY_LIMIT, "SIZE", "buffer pool bound, at least 16M "
                                                     "(default 512M)"},
    {"io-threads", 0, 1, OPT_IO_THREADS, "N", "I/O threads of the client, 1..64 (default 2)"},
    {"checksum", 0, 1, OPT_CHECKSUM, "ALG", "crc32c (default), crc32, crc64nvme or none"},
    {"writer", 0, 0, OPT_WRITER, NULL, "upload through the streaming writer (1 MiB writes)"},
    {"keep", 0, 0, OPT_KEEP, NULL, "keep the objects (default: delete them at the end)"},
    {"no-verify", 0, 0, OPT_NO_VERIFY, NULL, "do not compare downloaded bytes with the uploaded"},
    {"json", 0, 0, OPT_JSON, NULL, "print the phases as JSON records (bench/plot.py reads them)"},
    COMMAND_METRICS_OPTS,
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec mount_opts[] = {
    {"foreground", 'f', 0, OPT_FOREGROUND, NULL, "stay attached (default: background once mounted)"},
    {"prefix", 0, 1, OPT_PREFIX, "PREFIX",
     "prefix inside the bucket to mount, ending in '/' (or BUCKET/PREFIX/ as the source)"},
    {"bucket-type", 0, 1, OPT_BUCKET_TYPE, "TYPE",
     "general-purpose or directory (default: from the name, NAME--ZONE--x-s3 is a directory "
     "bucket)"},
    {"log-file", 0, 1, OPT_LOG_FILE, "PATH",
     "log here (default: stderr in the foreground, syslog in the background)"},
    {"log-directory", 'l', 1, OPT_LOG_DIRECTORY, "DIR",
     "log to a new file mountpoint-s3-TIMESTAMP.RANDOM.log in DIR (Mountpoint's naming)"},
    {"no-log", 0, 0, OPT_NO_LOG, NULL, "log nothing (start-up errors still go to stderr)"},
    {"debug-crt", 0, 0, OPT_DEBUG_CRT, NULL,
     "log the transport's detail too: every request's headers, each attempt's outcome (TRACE)"},
    {"read-only", 0, 0, OPT_READ_ONLY, NULL, "refuse every change (EROFS)"},
    {"allow-delete", 0, 0, OPT_ALLOW_DELETE, NULL, "let unlink delete objects"},
    {"allow-overwrite", 0, 0, OPT_ALLOW_OVERWRITE, NULL,
     "let open(O_TRUNC) replace existing objects"},
    {"allow-rename", 0, 0, OPT_ALLOW_RENAME, NULL,
     "let rename move files (server-side copy, then delete: not atomic; one atomic\n"
     "RenameObject on a directory bucket)"},
    {"incremental-upload", 0, 0, OPT_INCREMENTAL_UPLOAD, NULL,
     "directory buckets: open(O_APPEND) of an existing file appends to its object"},
    {"allow-other", 0, 0, OPT_ALLOW_OTHER, NULL, "let other users use the mount"},
    {"allow-root", 0, 0, OPT_ALLOW_ROOT, NULL, "let root use the mount too (FUSE allow_root)"},
    {"auto-unmount", 0, 0, OPT_AUTO_UNMOUNT, NULL,
     "unmount when the daemon ends, even when killed (FUSE auto_unmount)"},
    {"uid", 0, 1, OPT_UID, "UID", "owner of every file and directory (default: yours)"},
    {"gid", 0, 1, OPT_GID, "GID", "group of every file and directory (default: yours)"},
    {"dir-mode", 0, 1, OPT_DIR_MODE, "MODE", "permissions of directories, octal (default 0755)"},
    {"file-mode", 0, 1, OPT_FILE_MODE, "MODE", "permissions of files, octal (default 0644)"},
    {"metadata-ttl", 0, 1, OPT_METADATA_TTL, "SECONDS",
     "keep attributes and entries this long: SECONDS, minimal (1 s) or indefinite "
     "(default: minimal, 60 with --cache; 0: ask S3 every time)"},
    {"negative-metadata-ttl", 0, 1, OPT_NEGATIVE_METADATA_TTL, "SECONDS",
     "keep 'no such file' this long: SECONDS, minimal or indefinite (default: --metadata-ttl)"},
    {"cache", 0, 1, OPT_CACHE, "DIR", "node-local block cache of object data, kept across mounts"},
    {"cache-xz", 0, 1, OPT_CACHE_XZ, "BUCKET",
     "shared block cache of objects up to 1 MiB in an S3 Express One Zone directory bucket "
     "(NAME--ZONE-ID--x-s3), read by every node that mounts with it (docs/CACHE.md)"},
    {"max-cache-size", 0, 1, OPT_MAX_CACHE_SIZE, "MiB",
     "bound of --cache: MiB, or a size such as 10G (default 10G; 0: no cache)"},
    {"cache-block-size", 0, 1, OPT_CACHE_BLOCK_SIZE, "KiB",
     "block of --cache in KiB, 64..65536, a power of two (default 1024)"},
    {"memory-target", 0, 1, OPT_MEMORY_TARGET, "MiB",
     "memory the daemon stays within: MiB, or a size such as 4G (default: 1/8 of RAM or of "
     "the cgroup limit, 64M..8G)"},
    {"max-threads", 0, 1, OPT_MAX_THREADS, "N", "FUSE worker threads, 1..1024 (default: one per 16M of --memory-target, 4..16)"},
    {"prefetch-listed", 0, 1, OPT_PREFETCH_LISTED, "N", "mount: when listed files are opened in the listing's order, fetch the next N small ones ahead, 0..1024 (default 0: off)"},
    {"part-size", 0, 1, OPT_PART_SIZE, "SIZE",
     "part of multipart uploads and ranged GETs, 5M..5G (default 8M)"},
    {"read-part-size", 0, 1, OPT_READ_PART_SIZE, "SIZE",
     "part of ranged GETs, 5M..5G (default: --part-size)"},
    {"write-part-size", 0, 1, OPT_WRITE_PART_SIZE, "SIZE",
     "part of multipart uploads, 5M..5G (default: --part-size)"},
    {"maximum-throughput-gbps", 0, 1, OPT_MAX_THROUGHPUT, "N",
     "throughput the requests in flight are sized for, Gbit/s (default 10)"},
    {"upload-checksums", 0, 1, OPT_UPLOAD_CHECKSUMS, "ALG",
     "checksum sent with uploads: crc32c (default), crc64nvme or off"},
    {"infer-content-type", 0, 0, OPT_INFER_CONTENT_TYPE, NULL,
     "Content-Type of new objects from the file name's extension (default "
     "application/octet-stream)"},
    {"requester-pays", 0, 0, OPT_REQUESTER_PAYS, NULL, "= --request-payer requester"},
    {"transfer-acceleration", 0, 0, OPT_TRANSFER_ACCELERATION, NULL,
     "use S3 Transfer Acceleration (BUCKET.s3-accelerate.amazonaws.com)"},
    {"dual-stack", 0, 0, OPT_DUAL_STACK, NULL, "use the dual-stack (IPv4/IPv6) AWS endpoints"},
    {"ca-bundle", 0, 1, OPT_CA_BUNDLE, "PATH",
     "CA certificates to verify HTTPS with (default: AWS_CA_BUNDLE, else the system's)"},
    {"bind", 0, 1, OPT_BIND, "IFACE",
     "open connections through this network interface (SO_BINDTODEVICE); repeat to spread "
     "them over several"},
    {"page-size", 0, 1, OPT_PAGE_SIZE, "N", "keys per listing request, 1..1000 (default 1000)"},
    {"user-agent-prefix", 0, 1, OPT_USER_AGENT_PREFIX, "TEXT",
     "put before the User-Agent of every request (Mountpoint's option)"},
    METRICS_OPTS,
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_command commands[] = {
    {"ls", "[s3://bucket[/prefix]] [--recursive]", "List buckets, or objects and prefixes.",
     "Without a bucket: the buckets the credentials own, 'YYYY-MM-DD HH:MM:SS NAME'.\n"
     "Without --recursive, keys are grouped at '/' like directories and shown as\n"
     "'PRE name/' lines. Object lines are 'YYYY-MM-DD HH:MM:SS SIZE KEY' (UTC).",
     ls_opts, 0, 1, cli_cmd_ls},
    {"cp", "SRC DST [--recursive] [--part-size SIZE] [--concurrency N] [--checksum ALG]",
     "Copy local -> S3, S3 -> local ('-' is stdin/stdout) or S3 -> S3.",
     "A DST that ends in '/' or is an existing directory receives the source's base name.\n"
     "Uploads (files and stdin) and downloads go through the parallel transfer engine:\n"
     "multipart above one part, ranged GETs in parallel, a progress bar on a terminal.\n"
     "Downloads are renamed into place on success: a failed or interrupted download never\n"
     "leaves a partial file. --recursive keeps many objects in flight; a failed object is\n"
     "reported, the others go on, and the exit status is 1. --exclude/--include PATTERN\n"
     "(with --recursive) select by the path relative to the source, as the AWS CLI: '*'\n"
     "matches across '/', and the last matching rule wins.\n"
     "Checksums: uploads send the --checksum value of every part and of the whole object\n"
     "(the server verifies it: AWS S3, MinIO); downloads compare the bytes with the\n"
     "server's stored whole-object checksum (of that algorithm as they arrive, of another\n"
     "one the server keeps in a second pass over the file). A server that stores none\n"
     "(Ceph RGW), or a checksum of part checksums, leaves only the size and the ETag\n"
     "(If-Match) checked. SIZE: bytes, or with K, M, G, T (powers of 1024; Ki/KiB, MB...\n"
     "mean the same): 8M = 8 MiB.",
     cp_opts, 2, 2, cli_cmd_cp},
    {"mv", "SRC DST [--recursive] [--exclude PATTERN] [--include PATTERN] [--dryrun]",
     "Move local -> S3, S3 -> local or S3 -> S3 (server side).",
     "Copies as cp does, then deletes each source (the local file, or the object with\n"
     "DeleteObject) once its copy succeeded: a failed copy keeps its source. Within one\n"
     "S3 Express directory bucket (NAME--ZONE--x-s3) each object is renamed instead, in\n"
     "one atomic request (RenameObject: no copy, never a moment without it). With\n"
     "--recursive many objects are in flight; a failed one is reported, the others go\n"
     "on, and the exit status is 1.",
     mv_opts, 2, 2, cli_cmd_mv},
    {"sync", "SRC DST [--delete] [--size-only] [--exact-timestamps] [--exclude PATTERN] "
             "[--include PATTERN] [--dryrun]",
     "Copy what is missing or changed from a directory or prefix to another.",
     "Local -> S3, S3 -> local or S3 -> S3, as 'aws s3 sync': an object is copied when it\n"
     "is missing at the destination or its size differs; at equal sizes, uploads and S3\n"
     "copies when the source is newer, downloads when the local file is newer than the\n"
     "object (--exact-timestamps: when the times differ at all). --size-only: the size\n"
     "alone. Downloaded files get the object's Last-Modified as their time, so a second\n"
     "sync copies nothing. --delete removes, after the copies, what the destination has\n"
     "and the source lacks (except what --exclude leaves out).",
     sync_opts, 2, 2, cli_cmd_sync},
    {"rm", "s3://bucket/key | --recursive s3://bucket/prefix", "Delete objects.",
     "With --recursive, every key under the prefix (as a directory: 'prefix/') is listed,\n"
     "filtered by --exclude/--include, then deleted with DeleteObjects in batches of 1000.",
     rm_opts, 1, 1, cli_cmd_rm},
    {"cat", "s3://bucket/key", "Write an object to stdout.", NULL, no_opts, 1, 1, cli_cmd_cat},
    {"append", "SRC s3://bucket/key", "Append a file or stdin ('-') to an object of a "
     "directory bucket.",
     "S3 Express One Zone directory buckets (NAME--ZONE--x-s3) only: the bytes go after the\n"
     "object's current end (PutObject with x-amz-write-offset-bytes; a missing object is\n"
     "created), in requests of at most 64 MiB; each request adds one of the object's\n"
     "10,000 parts. Another writer that appended meanwhile makes it fail with\n"
     "InvalidWriteOffset, with nothing of that request written.",
     no_opts, 2, 2, cli_cmd_append},
    {"stat", "s3://bucket/key", "Show an object's metadata (HeadObject).",
     "Prints size, etag, last-modified, content-type and the checksums the server stores.",
     no_opts, 1, 1, cli_cmd_stat},
    {"presign", "s3://bucket/key [--expires-in SECONDS] [--method GET|PUT]",
     "Print a presigned URL (as the last line of output).", NULL, presign_opts, 1, 1,
     cli_cmd_presign},
    {"mb", "s3://bucket", "Create a bucket in the client's region.",
     "An existing bucket you own is not an error.", no_opts, 1, 1, cli_cmd_mb},
    {"rb", "s3://bucket", "Remove an empty bucket.",
     "Empty it first with 'rm --recursive s3://bucket/'.", no_opts, 1, 1, cli_cmd_rb},
    {"bench", "s3://bucket[/prefix] [--size SIZE] [--count N] [--writer] [--keep]",
     "Upload and download N objects; print GB/s, requests/s, CPU s/GB, peak memory.",
     "Objects go up from one pre-faulted buffer (s3f_upload_buffer, or the streaming writer\n"
     "with --writer) and come back into another (s3f_download_buffer), compared unless\n"
     "--no-verify; then they are deleted unless --keep. See docs/CLI.md.",
     bench_opts, 1, 1, cli_cmd_bench},
    {"mount", "BUCKET[/PREFIX/] DIR [--read-only] [--allow-delete] [--allow-overwrite] "
              "[--allow-rename] [--incremental-upload] [--cache DIR] [--foreground]",
     "Mount a bucket (or a prefix) as a file system (FUSE).",
     "Reads any object (sequential and random); writes new files sequentially, uploaded\n"
     "while written and visible at close; deletes, overwrites and renames only when\n"
     "allowed. Unmount with 'fusermount3 -u DIR', SIGTERM or SIGINT. docs/SEMANTICS.md has\n"
     "every operation and its errno; docs/CLI.md every option.\n"
     "Every flag of Mountpoint's mount-s3 is taken, also in its fstab style:\n"
     "'s3flash mount BUCKET DIR -o OPTIONS', OPTIONS the flags without their dashes,\n"
     "comma-separated (allow-delete,uid=1000,ro; '\\,' for a comma in a value).",
     mount_opts, 2, 2, cli_cmd_mount},
    {NULL, NULL, NULL, NULL, NULL, 0, 0, NULL},
};

/* The endpoint URL as an error may show it: user information (user:password@) hidden.
 * NULL (no --endpoint-url): an empty string. */
static void endpoint_shown(const char *url, char *out, size_t len) {
    if (!url) {
        if (len)
            out[0] = '\0';
        return;
    }
    const char *sep = strstr(url, "://");
    const char *auth = sep ? sep + 3 : url;
    const char *at = NULL;
    for (const char *p = auth; *p && !strchr("/?#", *p); p++)
        if (*p == '@')
            at = p;
    if (at)
        snprintf(out, len, "%.*s***%s", (int)(auth - url), url, at);
    else
        snprintf(out, len, "%s", url);
}

void cli_client_options(const struct cli_ctx *ctx, struct s3f_client_options *opts) {
    const struct cli_args *a = ctx->args;
    memset(opts, 0, sizeof(*opts));
    opts->endpoint_url = a->value[OPT_ENDPOINT_URL];
    opts->region = a->value[OPT_REGION];
    opts->profile = a->value[OPT_PROFILE];
    opts->anonymous = a->set[OPT_NO_SIGN_REQUEST] ? 1 : 0;
    /* "requester", checked; mount's --requester-pays is Mountpoint's spelling */
    opts->requester_pays = a->value[OPT_REQUEST_PAYER] || a->set[OPT_REQUESTER_PAYS] ? 1 : 0;
    opts->ca_bundle = a->value[OPT_CA_BUNDLE];
    const char *fps = getenv("S3FLASH_FORCE_PATH_STYLE");
    opts->force_path_style =
        (a->set[OPT_FORCE_PATH_STYLE] || (fps && (strcmp(fps, "1") == 0 ||
                                                 strcmp(fps, "true") == 0 ||
                                                 strcmp(fps, "yes") == 0)))
            ? 1
            : 0;
    if (a->set[OPT_DEBUG])
        opts->log_level = S3F_LOG_DEBUG; /* log_fn NULL: the library writes to stderr */
    /* the commands that only read ask directory buckets for ReadOnly sessions */
    static const char *const readers[] = {"ls", "cat", "stat"};
    for (size_t i = 0; ctx->cmd && i < sizeof(readers) / sizeof(readers[0]); i++)
        if (strcmp(ctx->cmd->name, readers[i]) == 0)
            opts->express_read_only = 1;
    cli_request_options_apply(ctx, opts);
    cli_engine_apply(ctx, opts);
}

struct s3f_client *cli_client(struct cli_ctx *ctx) {
    if (ctx->client)
        return ctx->client;
    struct s3f_client_options opts;
    cli_client_options(ctx, &opts);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_client_new(&opts, &ctx->client, &err);
    if (st != S3F_OK) {
        if (err.status == S3F_OK)
            err.status = st;
        if (!err.operation[0])
            snprintf(err.operation, sizeof(err.operation), "%s", "client");
        char shown[512];
        endpoint_shown(opts.endpoint_url, shown, sizeof(shown));
        cli_report(&err, opts.endpoint_url ? shown : NULL);
        ctx->client = NULL;
        ctx->client_failed = 1;
        return NULL;
    }
    if (ctx->cmd && strcmp(ctx->cmd->name, "mount") != 0 &&
        cli_metrics_start(ctx, ctx->client, NULL, NULL, NULL) != CLI_EXIT_OK) {
        s3f_client_free(ctx->client);
        ctx->client = NULL;
        ctx->client_failed = 1;
    }
    return ctx->client;
}

int main(int argc, char **argv) {
    /* Writes to a closed pipe ("s3flash cat ... | head") fail with EPIPE instead of
     * killing the process, so downloads can clean up their temporary files. */
    signal(SIGPIPE, SIG_IGN);

    struct cli_args args;
    const struct cli_command *cmd = NULL;
    int rc = cli_fstab_expand(argc, argv, &argc, &argv);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = cli_args_parse(argc, argv, commands, &args, &cmd);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (args.set[OPT_HELP]) {
        cli_print_help(stdout, commands, cmd);
        return CLI_EXIT_OK;
    }
    if (args.set[OPT_VERSION]) {
        printf("s3flash %s\n", S3FLASH_VERSION);
        return CLI_EXIT_OK;
    }
    if (!cmd) {
        cli_print_help(stderr, commands, NULL);
        return CLI_EXIT_USAGE;
    }
    if (args.value[OPT_REQUEST_PAYER] && strcmp(args.value[OPT_REQUEST_PAYER], "requester") != 0)
        return cli_usage_error(cmd, "--request-payer takes 'requester', not '%s'",
                               args.value[OPT_REQUEST_PAYER]);
    if (args.n_pos < cmd->min_pos || args.n_pos > cmd->max_pos) {
        if (args.n_pos < cmd->min_pos)
            return cli_usage_error(cmd, "%s needs %s", cmd->name, cmd->synopsis);
        return cli_usage_error(cmd, "too many arguments for %s", cmd->name);
    }

    struct cli_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.args = &args;
    ctx.cmd = cmd;
    ctx.quiet = args.set[OPT_QUIET] ? 1 : 0;
    ctx.umask_bits = umask(0);
    umask(ctx.umask_bits);
    if ((rc = cli_metrics_options_check(&ctx)) != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_request_options_read(&ctx)) != CLI_EXIT_OK) {
        cli_request_options_wipe(&ctx); /* a key read before the error */
        return rc;
    }

    rc = cmd->run(&ctx);
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_FAIL;
    cli_metrics_finish(&ctx);
    s3f_client_free(ctx.client);
    cli_request_options_wipe(&ctx);
    return rc;
}
