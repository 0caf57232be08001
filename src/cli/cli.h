/*
 * src/cli: the s3flash command-line tool, a front end.
 * Owns: the command line and help texts (main.c, args.c), one file per command (cmd_*.c),
 *   one-object transfers that cp, mv, sync and cat share (object_io.c), the --recursive job
 *   pool (transfer.c), the downloads' temporary directories and their signal thread
 *   (tmpdirs.c), filters (filter.c), progress (progress.c), shared helpers (util.c).
 * May call: the public header <s3flash/s3flash.h> only, and its own helpers.
 *
 * The s3flash command-line tool: shared declarations of its parts.
 *
 * The CLI is a front end: it uses only the public header <s3flash/s3flash.h>, never the
 * library's internals. Exit statuses: CLI_EXIT_OK (0), CLI_EXIT_FAIL (1: the operation
 * failed), CLI_EXIT_USAGE (2: bad command line).
 */
#ifndef S3FLASH_CLI_H
#define S3FLASH_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <s3flash/s3flash.h>

#include "filter.h"

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,
    CLI_EXIT_USAGE = 2,
};

/* Buffer sizes for parsed s3:// URIs (bucket names are at most 63 bytes, keys 1024). */
#define CLI_BUCKET_MAX 256
#define CLI_KEY_MAX 1100

/* ------------------------------------------------------------------------------------
 * Arguments (args.c)
 * ---------------------------------------------------------------------------------- */

/* Every option the tool knows; each command accepts the global ones plus its own. */
enum cli_opt_id {
    OPT_NONE = 0,
    /* global */
    OPT_ENDPOINT_URL,
    OPT_REGION,
    OPT_PROFILE,
    OPT_NO_SIGN_REQUEST,
    OPT_REQUEST_PAYER,
    OPT_FORCE_PATH_STYLE,
    OPT_SSE,              /* request options (request_opts.c) */
    OPT_SSE_KMS_KEY_ID,
    OPT_SSE_KMS_CONTEXT,
    OPT_BUCKET_KEY,
    OPT_SSE_C,
    OPT_SSE_C_KEY,
    OPT_SSE_C_COPY_SOURCE,
    OPT_SSE_C_COPY_SOURCE_KEY,
    OPT_STORAGE_CLASS,
    OPT_EXPECTED_OWNER,
    OPT_ACL,
    OPT_USER_AGENT_EXTRA,
    OPT_MAX_ATTEMPTS,
    OPT_DEBUG,
    OPT_QUIET,
    OPT_HELP,
    OPT_VERSION,
    /* per command */
    OPT_RECURSIVE,
    OPT_CONTENT_TYPE,
    OPT_EXPIRES_IN,
    OPT_METHOD,
    OPT_PAGE_SIZE,
    OPT_PART_SIZE,
    OPT_CONCURRENCY,
    OPT_MEMORY_LIMIT,
    OPT_CHECKSUM,
    OPT_IO_THREADS,
    OPT_SIZE,
    OPT_NUM_OBJECTS, /* bench --count */
    OPT_WRITER,
    OPT_KEEP,
    OPT_NO_VERIFY,
    OPT_JSON,             /* bench: the phases as one JSON document */
    OPT_EXCLUDE,          /* cp, mv, rm, sync: kept in order in cli_args.filter */
    OPT_INCLUDE,
    OPT_DELETE,           /* sync */
    OPT_EXACT_TIMESTAMPS, /* sync */
    OPT_SIZE_ONLY,        /* sync */
    OPT_DRYRUN,           /* cp, mv, rm, sync */
    /* mount */
    OPT_FOREGROUND,
    OPT_LOG_FILE,
    OPT_READ_ONLY,
    OPT_ALLOW_DELETE,
    OPT_ALLOW_OVERWRITE,
    OPT_ALLOW_RENAME,
    OPT_INCREMENTAL_UPLOAD,
    OPT_ALLOW_OTHER,
    OPT_UID,
    OPT_GID,
    OPT_DIR_MODE,
    OPT_FILE_MODE,
    OPT_METADATA_TTL,
    OPT_NEGATIVE_METADATA_TTL,
    OPT_CACHE,            /* mount; cp, mv, sync: the block cache's directory */
    OPT_CACHE_XZ,         /* mount: the shared cache's directory bucket */
    OPT_MAX_CACHE_SIZE,
    OPT_MEMORY_TARGET,
    OPT_MAX_THREADS,
    OPT_PREFETCH_LISTED,
    OPT_USER_AGENT_PREFIX, /* mount */
    /* mount: Mountpoint's (mount-s3) flags s3flash had no spelling of (docs/CLI.md,
     * "mount-s3 compatibility") */
    OPT_ALLOW_ROOT,
    OPT_AUTO_UNMOUNT,
    OPT_BIND,              /* repeated: kept in order in cli_args.bind */
    OPT_BUCKET_TYPE,
    OPT_CA_BUNDLE,
    OPT_CACHE_BLOCK_SIZE,
    OPT_DEBUG_CRT,
    OPT_DUAL_STACK,
    OPT_INFER_CONTENT_TYPE,
    OPT_LOG_DIRECTORY,
    OPT_MAX_THROUGHPUT,
    OPT_NO_LOG,
    OPT_PREFIX,
    OPT_READ_PART_SIZE,
    OPT_REQUESTER_PAYS,
    OPT_TRANSFER_ACCELERATION,
    OPT_UPLOAD_CHECKSUMS,
    OPT_WRITE_PART_SIZE,
    OPT_METRICS_LISTEN,    /* cp, mv, sync, bench, mount: the metrics exporter (metrics.c) */
    OPT_METRICS_ALLOW_REMOTE,
    OPT_LOG_METRICS,
    OPT_OTLP_ENDPOINT,     /* cp, mv, sync, bench, mount: OTLP/HTTP push (metrics.c) */
    OPT_OTLP_EXPORT_INTERVAL,
    OPT_METRICS_LINGER,    /* cp, mv, sync, bench */
    OPT_COUNT_,
};

struct cli_opt_spec {
    const char *long_name; /* without the leading "--" */
    char short_name;       /* 0: none */
    int takes_value;       /* 1: "--name VALUE" or "--name=VALUE" */
    enum cli_opt_id id;
    const char *value_name; /* for the help text, e.g. "URL" */
    const char *help;
};

#define CLI_MAX_POSITIONALS 16
#define CLI_BIND_MAX 16

/* The parsed command line. Strings point into argv (nothing is allocated). */
struct cli_args {
    const char *command;                     /* NULL: none given */
    int set[OPT_COUNT_];                     /* how many times each option was given */
    const char *value[OPT_COUNT_];           /* last value of each value option */
    const char *pos[CLI_MAX_POSITIONALS];    /* positional arguments after the command */
    size_t n_pos;
    struct cli_filter filter;                /* --exclude/--include, in command-line order */
    const char *bind[CLI_BIND_MAX];          /* mount --bind IFACE, in command-line order */
    size_t n_bind;
};

struct cli_command;

/* Parse argv[1..argc-1]. Global options are accepted before and after the command name,
 * the command's own options only after it; "--" ends the options; a lone "-" is a
 * positional. `commands` is a NULL-name-terminated table used to find the command (and
 * so its options). On a usage error prints one line to stderr (with a hint to use --help)
 * and returns CLI_EXIT_USAGE; otherwise returns CLI_EXIT_OK and sets *cmd (NULL when no
 * or an unknown command was named: the caller decides what to print). */
int cli_args_parse(int argc, char **argv, const struct cli_command *commands,
                   struct cli_args *out, const struct cli_command **cmd);

/* Print a command's usage and options (or the tool's overview when cmd is NULL) to `fp`.
 * `fp` is a FILE *, passed as void * to keep <stdio.h> out of this header. */
void cli_print_help(void *fp, const struct cli_command *commands, const struct cli_command *cmd);

/* Print "s3flash: <message>" then "Try 's3flash [CMD] --help'." to stderr; returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(const struct cli_command *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

extern const struct cli_opt_spec cli_global_opts[];

/* ------------------------------------------------------------------------------------
 * Commands (cmd_*.c)
 * ---------------------------------------------------------------------------------- */

/* Settings of the transfer engine a command asked for (--part-size, --concurrency,
 * --memory-limit, --checksum, --io-threads); 0 / S3F_CHECKSUM_DEFAULT: the library's
 * default. */
#define CLI_MANY_INFLIGHT 256        /* requests in flight of a run of many small objects */
#define CLI_SMALL_OBJECT (1ULL << 20) /* "small": one request each, latency-bound */

struct cli_engine {
    uint64_t part_size_bytes;
    uint64_t memory_limit_bytes;
    uint32_t max_inflight_requests;
    uint32_t io_threads;
    enum s3f_checksum_algorithm checksum;
    const char *cache_dir;     /* --cache (NULL: none) */
    uint64_t cache_max_bytes;  /* --max-cache-size (0: the library's default) */
    bool many;                 /* a many-object run (cp/mv --recursive, sync): the client
                                  gets connections for CLI_MANY_INFLIGHT requests */
};

/* The request options' values that are not plain argv strings (request_opts.c). */
struct cli_request_opts {
    char sse_c_key[64];          /* base64 of the SSE-C key ("" none); wiped at exit */
    char copy_source_key[64];    /* of copy sources */
    int max_attempts;            /* --aws-max-attempts (0: the library's default) */
};

struct cli_ctx {
    const struct cli_args *args;
    struct cli_request_opts req; /* checked and read before the command runs */
    const struct cli_command *cmd;
    struct s3f_client *client; /* created on first use by cli_client() */
    int client_failed;         /* cli_client() failed and printed why */
    int quiet;
    mode_t umask_bits;         /* the process umask, read at start-up */
    struct cli_engine engine;  /* set by the command before the client is created */
    struct s3f_metrics_exporter *metrics; /* --metrics-listen, --log-metrics (metrics.c) */
};

struct cli_command {
    const char *name;
    const char *synopsis;                 /* e.g. "SRC DST [--recursive]" */
    const char *summary;                  /* one line */
    const char *description;              /* a few lines, may be NULL */
    const struct cli_opt_spec *opts;      /* own options, terminated by long_name == NULL */
    size_t min_pos, max_pos;
    int (*run)(struct cli_ctx *ctx);
};

int cli_cmd_ls(struct cli_ctx *ctx);
int cli_cmd_cp(struct cli_ctx *ctx);
int cli_cmd_rm(struct cli_ctx *ctx);
int cli_cmd_mv(struct cli_ctx *ctx);
int cli_cmd_sync(struct cli_ctx *ctx);
int cli_cmd_cat(struct cli_ctx *ctx);
int cli_cmd_append(struct cli_ctx *ctx); /* cmd_express.c */
/* mv within one directory bucket: RenameObject per object (cmd_express.c). `keys` NULL:
 * the one object src_key -> dst_key; else every keys[i] under src_prefix, renamed to
 * dst_prefix + the rest. */
int cli_express_rename(struct cli_ctx *ctx, const char *bucket, const char *src_key,
                       const char *dst_key);
/* ListObjectsV2 of bucket/prefix page after page (continuation tokens), each page given to
 * on_page (nonzero: out of memory, stop); errors reported naming uri. Returns the exit
 * status (cmd_ls.c). cli_ls_print_object prints one object line of ls. */
int cli_list_pages(struct s3f_client *c, const char *uri, const char *bucket,
                   const char *prefix, const char *delimiter, int page_size,
                   int (*on_page)(void *ud, const struct s3f_list_page *page), void *ud);
void cli_ls_print_object(const struct s3f_list_entry *e, size_t strip);
/* ls of a directory bucket: every page collected, then sorted (cmd_express.c). */
int cli_express_ls(struct cli_ctx *ctx, struct s3f_client *c, const char *uri,
                   const char *bucket, const char *prefix, int recursive, int page_size);
int cli_cmd_mb(struct cli_ctx *ctx);
int cli_cmd_rb(struct cli_ctx *ctx);
int cli_cmd_stat(struct cli_ctx *ctx);
int cli_cmd_presign(struct cli_ctx *ctx);
int cli_cmd_bench(struct cli_ctx *ctx);
int cli_cmd_mount(struct cli_ctx *ctx);

/* ------------------------------------------------------------------------------------
 * Helpers (main.c, util.c)
 * ---------------------------------------------------------------------------------- */

/* The client for this run, created from the global options on first call. On failure
 * prints the error and returns NULL (the command then returns CLI_EXIT_FAIL). The client
 * is freed by main. */
struct s3f_client *cli_client(struct cli_ctx *ctx);

/* The options cli_client creates its client with (endpoint, region, profile, credentials,
 * path style, request payer, --debug, the engine settings), for a command that creates
 * the client itself (mount: after going to the background). */
void cli_client_options(const struct cli_ctx *ctx, struct s3f_client_options *opts);
/* Check the request options (--sse & co.) and read the SSE-C keys (fileb://PATH or the
 * environment; never argv) into ctx->req: CLI_EXIT_OK, or a usage error printed. */
int cli_request_options_read(struct cli_ctx *ctx);
/* Put them into the client's options; cli_request_options_wipe clears the keys. */
void cli_request_options_apply(const struct cli_ctx *ctx, struct s3f_client_options *opts);
void cli_request_options_wipe(struct cli_ctx *ctx);

/* The metrics exporter of --metrics-listen and --log-metrics (metrics.c). cli_metrics_start
 * starts it on the client's registry (`extra`: another registry rendered after it, or NULL)
 * and prints "s3flash: metrics at http://ADDR:PORT/metrics" to stderr: CLI_EXIT_OK, or the
 * error printed and CLI_EXIT_USAGE / CLI_EXIT_FAIL. cli_metrics_finish: --metrics-linger's
 * wait (the last values stay served), then the exporter's stop; NULL-safe. */
int cli_metrics_options_check(const struct cli_ctx *ctx);
int cli_metrics_start(struct cli_ctx *ctx, struct s3f_client *client, struct s3f_metrics *extra,
                      s3f_log_fn log_fn, void *log_ud);
void cli_metrics_finish(struct cli_ctx *ctx);
/* --otlp-export-interval in ms (0: not given: the library's default, 60 s); checked by
 * cli_metrics_options_check. */
uint32_t cli_otlp_interval_ms(const struct cli_ctx *ctx);

/* Print "s3flash: <s3f_error_format(err)>" to stderr. When err->resource is empty and
 * `resource` is not NULL, `resource` is named instead. */
void cli_report(const struct s3f_error *err, const char *resource);

/* Print "s3flash: <message>" to stderr. */
void cli_errorf(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Fill `err` for a failure of the CLI itself (local file error, bad argument...). */
void cli_error_set(struct s3f_error *err, enum s3f_status status, const char *operation,
                   const char *resource, const char *fmt, ...) CLI_PRINTF(5, 6);

/* Does `arg` name an S3 location ("s3:" prefix, any case)? Malformed ones ("s3:/b") count
 * as S3 too, so that s3f_uri_parse reports what is wrong with them. */
int cli_is_s3(const char *arg);

/* Parse an s3:// argument with s3f_uri_parse into bucket[CLI_BUCKET_MAX] and
 * key[CLI_KEY_MAX]. On failure prints the error (naming the URI) and returns
 * CLI_EXIT_USAGE; else CLI_EXIT_OK. */
int cli_parse_s3(const char *arg, char *bucket, char *key);

/* cli_parse_s3 for commands that need one object: an empty key or one ending in '/' is
 * a usage error too. */
int cli_parse_s3_object(const struct cli_ctx *ctx, const char *arg, char *bucket, char *key);

/* Exit status for a failed library call: CLI_EXIT_USAGE for a bad argument or URI,
 * else CLI_EXIT_FAIL. */
int cli_exit_for(enum s3f_status status);
/* A library call failed with `st`: err->status set to it when the call left it unset,
 * cli_report(err, resource), and the exit status for it (cli_exit_for). */
int cli_fail(struct s3f_error *err, enum s3f_status st, const char *resource);

/* The last component of a '/'-separated path or key ("a/b/c" -> "c", "a/b/" -> ""). */
const char *cli_basename(const char *path);

/* Join `a` and `b` with exactly one '/' between them (none when `a` is empty).
 * Returns a malloc'ed string (caller frees) or NULL when out of memory. */
char *cli_path_join(const char *a, const char *b);

/* Concatenate two strings into a malloc'ed one (caller frees); NULL when out of memory. */
char *cli_strcat2(const char *a, const char *b);

/* Create directory `path` and its parents (mode 0777 & ~umask). 0 or -1 with errno. */
int cli_mkdirs(const char *path);

/* Create the parent directories of file `path`. 0 or -1 with errno. */
int cli_mkdirs_parent(const char *path);

/* Format `t` (seconds since the epoch) in UTC into buf[len]: "2026-12-02 12:00:00", or
 * with iso8601 "2026-12-02T12:00:00Z". */
void cli_format_time(int64_t t, int iso8601, char *buf, size_t len);

/* Does `key`, used as a relative local path, stay inside its directory (no "..", not
 * absolute, no empty component other than a trailing '/')? */
int cli_safe_relative_path(const char *rel);

/* A growable list of malloc'ed strings. */
struct cli_strlist {
    char **items;
    size_t n, cap;
};
/* Append a copy of `s`; 0 or -1 when out of memory. */
int cli_strlist_push(struct cli_strlist *l, const char *s);
void cli_strlist_free(struct cli_strlist *l);

/* A growable array of sizes. */
struct cli_sizes {
    uint64_t *items;
    size_t n, cap;
};
void cli_sizes_free(struct cli_sizes *l);

/* List every key under `prefix` (no delimiter, all pages) into `keys`. `page_size` 0:
 * server default. On failure fills err and returns its status. */
enum s3f_status cli_list_all(struct s3f_client *c, const char *bucket, const char *prefix,
                             int page_size, struct cli_strlist *keys, struct s3f_error *err);
/* cli_list_all, and the objects' sizes into `sizes` (same order) when not NULL. */
enum s3f_status cli_list_all_sizes(struct s3f_client *c, const char *bucket,
                                   const char *prefix, int page_size, struct cli_strlist *keys,
                                   struct cli_sizes *sizes, struct s3f_error *err);

/* Call fn for every object under `prefix` (all pages, in listing order); fn returns 0 to go
 * on, non-zero when out of memory (the call then fails with S3F_ERR_NO_MEMORY). */
enum s3f_status cli_list_each(struct s3f_client *c, const char *bucket, const char *prefix,
                              int page_size, int (*fn)(void *user, const struct s3f_list_entry *e),
                              void *user, struct s3f_error *err);

/* Value of --page-size (0 when not given); -1 after printing a usage error. */
int cli_page_size(const struct cli_ctx *ctx);

/* Mountpoint's fstab style (fstab.c): every "-o OPTIONS" of a mount command line replaced
 * by the flags it spells ("allow-delete,uid=1000" -> --allow-delete --uid=1000; "ro" ->
 * --read-only; mount(8)'s own options dropped). *out_argv is argv itself when there is
 * none, else a new array (kept for the process's life). CLI_EXIT_OK, or CLI_EXIT_USAGE
 * after printing what is wrong. */
int cli_fstab_expand(int argc, char **argv, int *out_argc, char ***out_argv);

/* Parse a size: a whole number of bytes with an optional suffix K, M, G or T (also written
 * Ki/Mi/Gi/Ti, KiB/MiB/GiB/TiB or KB/MB/GB/TB; any case), every one a power of 1024:
 * "8M" = "8MiB" = 8388608. 0 on success, -1 when malformed or over UINT64_MAX. */
int cli_parse_size(const char *s, uint64_t *out);
/* cli_parse_size for the sizes Mountpoint reads in MiB (--max-cache-size, --memory-target):
 * a bare number is MiB ("1024" = 1 GiB), a number with a suffix is read as cli_parse_size
 * reads it ("10G"). 0 on success, -1 when malformed or too large. */
int cli_parse_size_mib(const char *s, uint64_t *out);

/* Parse --part-size, --concurrency, --memory-limit and --checksum into ctx->engine (before
 * the client is created). Returns CLI_EXIT_OK, or CLI_EXIT_USAGE after printing what is
 * wrong with a value. */
int cli_engine_parse(struct cli_ctx *ctx);

/* Copy ctx->engine into the options the client is created with (called by cli_client). */
void cli_engine_apply(const struct cli_ctx *ctx, struct s3f_client_options *opts);

/* Name of a checksum algorithm as --checksum spells it ("crc32c", "none"...). */
const char *cli_checksum_name(enum s3f_checksum_algorithm alg);

/* ------------------------------------------------------------------------------------
 * Downloads to local files (object_io.c, tmpdirs.c; shared by cp, mv, sync and cat)
 * ---------------------------------------------------------------------------------- */

/* Download s3://bucket/key to stdout ("-": streamed, one GetObject resumed after a broken
 * connection) or into the file `path` through the transfer engine (s3f_download_file,
 * inside a temporary directory "PATH.s3flash-tmp-XXXXXX" beside it, renamed over `path`
 * on success; on any failure, or SIGINT/SIGTERM/SIGHUP once cli_download_signals ran,
 * nothing is left and `path` is untouched). The checksum is verified unless
 * ctx->engine.checksum is NONE. */
enum s3f_status cli_download(struct cli_ctx *ctx, const char *bucket, const char *key,
                             const char *path, struct s3f_error *err);

/* Route SIGINT, SIGTERM and SIGHUP to a thread that removes the temporary files of the
 * downloads in progress and then ends the process with the signal. Must run before the
 * client (and so its I/O threads) exists: the signals are blocked in every other thread.
 * 0, or -1 with errno. */
int cli_download_signals(void);

/* Create "PATH.s3flash-tmp-XXXXXX" (mode 0700) and register it for the signal thread;
 * *dir receives its malloc'ed name (tmpdirs.c). */
enum s3f_status cli_tmp_dir_create(const char *path, char **dir, struct s3f_error *err);
/* Remove a registered temporary directory (and what is left in it), unregister, free. */
void cli_tmp_dir_remove(char *dir);

#endif /* S3FLASH_CLI_H */
