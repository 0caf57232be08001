/* The ranged download session shared by the destinations (xfer/download.c; see there and
 * docs/TRANSFER.md): its states, parts and requests, and the functions the destinations call.
 *
 *   download.c        the session: states, the first GET and the part plan, the part
 *                     requests, the checksum HEAD, the caller's wait; memory regions
 *   download_file.c   the file destination: chunks staged for the caller's thread to
 *                     write, the temporary file renamed into place
 *   download_alloc.c  s3f_download_alloc: one GET of an object of unknown size into a
 *                     buffer the caller's allocator gives (no session, no parts)
 * Private to src/xfer. */
#ifndef S3F_XFER_DOWNLOAD_INTERNAL_H
#define S3F_XFER_DOWNLOAD_INTERNAL_H

#include <pthread.h>

#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define MIN_RANGE ((uint64_t)64 << 10)
#define WQ_MAX 16 /* chunks queued for the caller's thread to write, at most */

enum dl_state {
    DL_FIRST,   /* the first ranged GET: size and ETag unknown */
    DL_PARTS,   /* the other parts (and the checksum HEAD) */
    DL_DONE,
    DL_FAILED,
};

enum dpart_state { DP_WAITING, DP_SENDING, DP_DONE };

struct dpart {
    uint64_t offset, size;
    struct s3f__checksum ck;
    enum dpart_state state;
};

enum dst_kind { DST_MEMORY, DST_FILE };

/* A filled chunk waiting for the caller's thread to write it to the file. */
struct wchunk {
    void *buf;
    uint64_t off;
    size_t len;
};

struct download {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    const char *bucket, *key, *version_id, *user_if_match; /* the caller's, valid during the call */
    char resource[600];
    enum dst_kind dst;
    const struct s3f_iovec *iov;
    size_t n_iov;
    uint64_t *iov_end;
    uint64_t capacity;
    /* a range (s3f_download_options.range_*): its first byte in the object, its length (0:
     * to the end); parts, d->size and the destination count from range_offset */
    bool ranged;
    uint64_t range_offset, range_bytes;
    int fd;
    const char *path;           /* the destination file (the caller's), for errors */
    uint64_t part_size;
    int verify;                 /* 1 always, 0 when several requests, -1 never */
    enum s3f_checksum_algorithm alg;
    s3f_progress_fn progress;
    void *progress_ud;
    pthread_mutex_t progress_lock;
    size_t progress_parts;           /* parts_done as the last progress call saw it */
    uint64_t start_ns;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- guarded by lock ---- */
    enum dl_state state;
    bool first_sent;
    bool no_range;              /* the ranged first GET got 416 (empty object): plain GET */
    uint64_t size;              /* the bytes to download: the object's, or the range's */
    uint64_t object_size;       /* the object's (pinned on every part) */
    char etag[128];             /* pinned: sent as If-Match */
    struct s3f_object_info info;
    struct dpart *parts;
    size_t n_parts, next_part, parts_done;
    uint64_t bytes_done;
    uint32_t outstanding, callbacks;
    enum s3f_status status;
    struct s3f_error err;
    bool head_running;                  /* the checksum HEAD is in flight */
    struct s3f__op head;
    struct s3f_error head_err;
    char expected[S3F__CHECKSUM_B64_MAX + 8];
    /* the server keeps a whole-object checksum of another algorithm only: checked by the
     * caller's thread at the end, over the destination (one more pass) */
    enum s3f_checksum_algorithm other_alg;
    char other_expected[S3F__CHECKSUM_B64_MAX + 8];
    struct s3f__sched_entry entry;
    struct wchunk *wq;          /* DST_FILE: ring of chunks to write, wq_cap = pool size */
    size_t wq_cap, wq_head;
    size_t wq_n;                /* also read without the lock (atomically) by s3f__download_sink_file */
    int write_errno;            /* the caller's pwrite failed (also read by I/O threads) */
    /* planned from the first response's head, before its body is in (plan_parts): parts to
     * queue and the checksum HEAD to send, by the caller's thread (not from a sink) */
    uint32_t early_queue;
    bool early_head;
};

struct dreq {
    struct s3f__op op;
    struct download *d;
    size_t part;                /* SIZE_MAX: the first request */
    struct s3f__checksum ck;
    uint64_t bytes;
    bool too_small;
    int io_errno;
    void *stage;                /* DST_FILE: the pool chunk being filled, bytes at stage_off */
    uint64_t stage_off;
    size_t stage_len;
    struct s3f_error err;
    struct s3f__xfer_timing t;  /* for the bandwidth-delay estimator */
    bool head_seen;             /* the first request: its response's head was looked at */
};

/* The session (download.c). init: *d set up from the options (s3f__download_cleanup also
 * after a failed init); run: send, wait for every request, verify; info and err as the
 * public calls'. */
enum s3f_status s3f__download_init(struct download *d, struct s3f_client *c,
                                   const char *bucket, const char *key,
                                   const struct s3f_download_options *opts,
                                   struct s3f_error *err);
void s3f__download_cleanup(struct download *d);
enum s3f_status s3f__download_run(struct download *d, struct s3f_object_info *info,
                                  struct s3f_error *err);

/* The file destination (download_file.c). */
int s3f__download_pwrite_all(int fd, const char *p, size_t len, uint64_t off);
void s3f__download_stage_queue_locked(struct download *d, struct dreq *q);
int s3f__download_sink_file(struct dreq *q, const char *p, size_t len, uint64_t offset);

#endif
