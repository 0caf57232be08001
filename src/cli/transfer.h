/* Many-object transfers of the CLI (cp --recursive, mv, sync): a run of jobs — uploads,
 * downloads, server-side copies and deletions, one object each — worked off by a pool of
 * threads on the one shared client, with one aggregate progress bar. A failed job is
 * reported on its own line (naming the object and what S3 said) and the others go on; the
 * run's exit status is 1 when anything failed. A job answered SlowDown through all its
 * attempts halves the client's requests in flight and is run again after a pause (up to
 * 6 times): a run of many small objects finds the rate the server takes. Also the listings the runs are planned
 * from: a local directory walk and an S3 listing, both as paths relative to their root,
 * with size and modification time, filtered by --exclude/--include. */
#ifndef S3F_CLI_TRANSFER_H
#define S3F_CLI_TRANSFER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "progress.h"

#define CLI_MAX_WORKERS 256 /* objects in flight at once (--concurrency's maximum) */

enum cli_job_kind {
    CLI_JOB_UPLOAD,   /* src: local path, dst: key in db */
    CLI_JOB_DOWNLOAD, /* src: key in sb, dst: local path */
    CLI_JOB_COPY,     /* src: key in sb, dst: key in db (server side) */
    CLI_JOB_DELETE,   /* dst: key in db, or a local file when db is "" (sync --delete) */
};

struct cli_job {
    enum cli_job_kind kind;
    char *src; /* NULL for CLI_JOB_DELETE */
    char *dst;
    uint64_t size; /* known size (listing, stat), for the progress bar; 0 when unknown */
};

struct cli_run {
    struct cli_ctx *ctx;
    const char *sb, *db; /* source and destination buckets ("" for local) */
    bool move;           /* mv: remove each source once its copy succeeded */
    bool dryrun;         /* print "(dryrun) ..." lines, change nothing */
    struct cli_job *jobs;
    size_t n_jobs, cap_jobs;
    struct cli_progress prog;
    pthread_mutex_t lock;
    /* ---- guarded by lock ---- */
    size_t next;   /* the next job to start */
    size_t failed; /* jobs (and planning steps) that failed */
    int rc;        /* exit status of the last failure */
    uint64_t throttled_ms; /* when the requests in flight were last halved (SlowDown) */
};

void cli_run_init(struct cli_run *r, struct cli_ctx *ctx, const char *sb, const char *db);
void cli_run_cleanup(struct cli_run *r);
/* Add a job (src may be NULL for a deletion); 0, or -1 when out of memory. */
int cli_run_add(struct cli_run *r, enum cli_job_kind kind, const char *src, const char *dst,
                uint64_t size);
/* Count a failure (of a job or of a planning step) with its exit status. */
void cli_run_failed(struct cli_run *r, int rc);
/* An error line, serialized with the workers' output and the progress bar. */
void cli_run_errorf(struct cli_run *r, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Report a failure (cli_report, serialized) and return its exit status. */
int cli_run_report(struct cli_run *r, const struct s3f_error *err, enum s3f_status st,
                   const char *resource);
/* Run the jobs added since the last call: `workers` threads at most, the calling thread
 * alone for one job or one worker. Returns the exit status of the whole run so far: 0,
 * the one job's own status when the run has one job, else 1 when anything failed. */
int cli_run_all(struct cli_run *r, size_t workers);
/* Objects in flight for the run's jobs: --concurrency when given. Else, when its objects are
 * small (on average at most CLI_SMALL_OBJECT bytes: each is one request, and the rate is
 * the requests in flight over the first-byte latency), CLI_MANY_INFLIGHT (at most one per
 * job), the client's requests in flight raised to match (s3f_client_set_max_inflight_
 * requests), as s5cmd keeps 256 workers; else the requests the engine keeps in flight
 * (its bandwidth plan). At most CLI_MAX_WORKERS. */
size_t cli_run_workers(struct cli_ctx *ctx, const struct cli_run *r);

/* Transfers of one object, in object_io.c (used by the jobs). The progress item is set up
 * by them (prog: the run's bar). A download into a regular file gets the object's
 * Last-Modified as its modification (and access) time, as the AWS CLI does. size_hint: the
 * listed size (0 or UINT64_MAX: unknown): a small object is one GET, no HEAD. */
enum s3f_status cli_upload(struct cli_ctx *ctx, const char *path, const char *bucket,
                           const char *key, struct cli_progress *prog,
                           struct cli_progress_item *item, struct s3f_error *err);
enum s3f_status cli_download_item(struct cli_ctx *ctx, const char *bucket, const char *key,
                                  const char *path, uint64_t size_hint,
                                  struct cli_progress_item *item, struct s3f_error *err);

/* ------------------------------------------------------------------------------------
 * Listings to plan from
 * ---------------------------------------------------------------------------------- */

struct cli_entry {
    char *rel;      /* path relative to the root, '/'-separated */
    uint64_t size;
    int64_t mtime;  /* seconds since the epoch (local: st_mtime; S3: LastModified) */
};

struct cli_entries {
    struct cli_entry *items;
    size_t n, cap;
};

void cli_entries_free(struct cli_entries *e);
/* Sort by rel in byte order (strcmp), the order of S3 listings. */
void cli_entries_sort(struct cli_entries *e);

/* Every regular file under `dir` (symbolic links to files followed, to directories
 * skipped: no loops), each directory in name order, that `filter` selects (NULL: all).
 * A directory that cannot be read is reported through `r` and counted as failed; the walk
 * goes on. A missing `dir` gives no entries when missing_ok. -1 only when out of memory. */
int cli_walk_local(struct cli_run *r, const char *dir, const struct cli_filter *filter,
                   bool missing_ok, struct cli_entries *out);

/* Every key under `prefix` (all pages) that `filter` selects, rel = the key without the
 * prefix; the prefix's own marker (rel "") is left out. On failure fills err. */
enum s3f_status cli_list_entries(struct s3f_client *c, const char *bucket, const char *prefix,
                                 int page_size, const struct cli_filter *filter,
                                 struct cli_entries *out, struct s3f_error *err);

/* "" stays "", "p" becomes "p/", "p/" stays: a prefix as a directory. Caller frees. */
char *cli_dir_prefix(const char *key);
/* "s3://bucket/key", malloc'ed (caller frees); NULL when out of memory. */
char *cli_s3_uri(const char *bucket, const char *key);
/* Is `path` a directory (following links)? */
bool cli_is_dir(const char *path);

#endif
