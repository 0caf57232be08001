/*
 * s3flash mount: a bucket (or a prefix of one) as a FUSE file system (libfuse3).
 *
 * What this folder owns: the daemon of `s3flash mount` (mount.c: start-up checks, going to
 * the background, logging, signals, the FUSE session) and the file system itself, on
 * libfuse's low-level API (fs.h lists its files, the lock order and the rule that no
 * handler re-enters the mount). The behaviour is specified in docs/SEMANTICS.md; change
 * both together.
 *
 * What it may call: the public <s3flash/s3flash.h> API (readers, writers, listings, HEAD,
 * copy, delete) and libfuse3, nothing of the library's internals. The CLI (src/cli/
 * cmd_mount.c) parses the command line into struct mnt_options and calls mnt_run.
 */
#ifndef S3FLASH_MOUNT_H
#define S3FLASH_MOUNT_H

#include <stdint.h>
#include <sys/types.h>

#include <s3flash/s3flash.h>

enum { MNT_BUCKET_GENERAL_PURPOSE = 1, MNT_BUCKET_DIRECTORY = 2 };

struct mnt_options {
    struct s3f_client_options client; /* endpoint, credentials...; memory_limit_bytes is
                                         set from memory_target by mnt_run (7/16 of what
                                         FUSE's buffers leave, for the readers' client and
                                         as much for the writers') */
    const char *bucket;
    const char *prefix;      /* "" or ends with '/' */
    const char *mountpoint;
    int foreground;
    int debug;
    int debug_crt;           /* --debug-crt: the library's TRACE lines (request headers) */
    int no_log;              /* --no-log: no log at all */
    const char *log_file;    /* NULL: stderr in the foreground, syslog in the background */
    const char *log_directory; /* --log-directory: a new file mountpoint-s3-TIME.RAND.log
                                  there (Mountpoint's name); excludes log_file */
    int read_only;
    int allow_delete;
    int allow_overwrite;
    int allow_rename;
    int incremental_upload;  /* directory buckets: open(O_APPEND) appends (write.c) */
    int allow_other;
    int allow_root;          /* FUSE allow_root: the owner and root */
    int auto_unmount;        /* FUSE auto_unmount: unmounted when the daemon dies */
    int infer_content_type;  /* Content-Type of new objects from the extension */
    int bucket_type;         /* MNT_BUCKET_*: 0 from the name (s3f_bucket_is_directory) */
    enum s3f_checksum_algorithm upload_checksum; /* DEFAULT: the client's (CRC32C) */
    uid_t uid;
    gid_t gid;
    mode_t dir_mode;
    mode_t file_mode;
    double metadata_ttl_s;
    double negative_ttl_s;
    const char *cache_dir;   /* NULL: no block cache */
    const char *cache_xz_bucket; /* --cache-xz: the shared cache's directory bucket, NULL: none */
    uint64_t max_cache_size_bytes; /* 0: the library's default */
    uint64_t memory_target_bytes;  /* 0: an eighth of RAM or of the cgroup's
                                      limit if less, 64 MiB..8 GiB */
    unsigned max_threads;    /* 0: one per 16 MiB of memory_target, 4..16 */
    uint64_t part_size_bytes; /* 0: the client's default (8 MiB) */
    uint64_t read_part_size_bytes;  /* 0: part_size_bytes (the readers' client) */
    uint64_t write_part_size_bytes; /* 0: part_size_bytes (the writers' client, uploads) */
    unsigned prefetch_listed; /* --prefetch-listed N: 0 off (prefetch.c) */
    int page_size;           /* keys per LIST page, 0: 1000 (tests use small pages) */
    uint64_t metadata_budget_bytes; /* the inode table, metadata and listing caches: set
                                       by mnt_run from memory_target (0: 8 MiB) */
    /* the metrics exporter (docs/METRICS.md): --metrics-listen ADDR (NULL: none),
     * --metrics-allow-remote, --log-metrics (a "metrics:" line every 5 s in the log) */
    const char *metrics_listen;
    int metrics_allow_remote;
    int log_metrics;
    /* --otlp-endpoint URL (NULL: none), --otlp-export-interval (0: 60 s) */
    const char *otlp_endpoint;
    uint32_t otlp_interval_ms;
};

/* Mount and serve until unmounted or signalled. Returns the process exit status: 0, or 1
 * after printing why the mount failed. In the background (not foreground), the calling
 * process returns once the mount is up (0) or failed (1); the daemon goes on in a child. */
int mnt_run(const struct mnt_options *opts);

/* ---- between mount.c and fs.c ---- */
struct fuse_lowlevel_ops;
struct fuse_session;
extern const struct fuse_lowlevel_ops mnt_ll_ops;
/* mnt_ll_ops with every handler metered (metrics.c): the table the session runs. */
extern const struct fuse_lowlevel_ops mnt_ll_ops_metered;

struct mnt_fs;
/* The file system's state; `client` serves reads, listings and HEADs, `wclient` writers,
 * copies and deletes (each its own buffer pool). NULL when out of memory. */
struct mnt_fs *mnt_fs_new(const struct mnt_options *opts, struct s3f_client *client,
                          struct s3f_client *wclient);
/* The session is mounted: start the notifier threads (kernel invalidations). 0 or -errno. */
int mnt_fs_start(struct mnt_fs *fs, struct fuse_session *se);
/* The mount's own metrics (metrics.c), owned by fs. */
struct s3f_metrics *mnt_fs_metrics(struct mnt_fs *fs);
/* Stop the notifier, abort uploads still open (no object), close readers, free. */
void mnt_fs_free(struct mnt_fs *fs);

/* The kernel's read-ahead of the mount: fs.c's max_readahead (op_init, every mount), and
 * what mount.c writes to sysfs when it may (root). Twice a FUSE request (max_write, 1 MiB):
 * the kernel takes a read longer than its read-ahead for the start of a stream, and a
 * 1 MiB read at an offset not page-aligned spans 257 pages. With 1 MiB that random read
 * became three 1 MiB requests, one after the other (the read, the async read-ahead of the
 * next 1 MiB, whose first page the read needs, and the one that page's read-ahead mark
 * starts, which the next read waited behind): 3 MiB and three round trips a read. With
 * 2 MiB it is one request of 1 MiB and one of 4 KiB, sent together; a sequential read
 * still reaches the daemon as 1 MiB requests, two in flight. */
#define MNT_READ_AHEAD_KIB 2048u

/* Log through the daemon's sink (log file, syslog or stderr). */
void mnt_log(enum s3f_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Would mnt_log write a line at `level`? (tested before a TRACE line is built) */
int mnt_log_on(enum s3f_log_level level);
/* Content-Type of a new object named `key`, from its extension (--infer-content-type), or
 * NULL when the extension is not known (content_type.c). */
const char *mnt_content_type(const char *key);

/* Log an s3flash error at WARN with its context ("read a/b: <formatted error>"). */
void mnt_log_error(const char *what, const char *path, const struct s3f_error *err);

#endif /* S3FLASH_MOUNT_H */
