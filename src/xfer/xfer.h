/* src/xfer: the transfer engine (docs/TRANSFER.md), the top of the library.
 * Owns: the engine of each client: its options and state, and s3f_client_new and
 *   s3f_client_free, which compose the s3 client with it (xfer.c); part plans (plan.c), the
 *   bounded buffer pool (pool.c), fair request slots (sched.c); uploads: the multipart
 *   session (upload.c, upload_ctl.c: Create, Complete, HEAD, Abort) fed by one source
 *   adapter per kind (upload_known.c: memory regions, files, server-side copies;
 *   writer.c: the streaming writer); downloads (download.c), the reader (reader.c), aborts
 *   retried in the background (janitor.c).
 * May call: core/; s3/ through client.h (submit, execute, the response head) and
 *   ops_internal.h (prepared requests); of http/ only s3f__http_pool_data_connections.
 *   Never libcurl, nor the executor's per-attempt state. Called by the front ends through
 *   the public header.
 *
 * The transfer engine's internals: part planning, the bounded buffer pool, the request
 * scheduler shared fairly by all transfers of a client, and the per-client state.
 * See docs/TRANSFER.md for the design. */
#ifndef S3F_XFER_H
#define S3F_XFER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/checksum.h"
#include "core/core.h"

struct s3f_client;
struct s3f__cache;
struct s3f__xz;
/* The block cache's origin (xfer.c): its HEAD and ranged GET, `ud` the client. */
struct s3f__cache_origin;
extern const struct s3f__cache_origin s3f__xfer_cache_origin;

#define S3F__MIB ((uint64_t)1 << 20)
#define S3F__GIB ((uint64_t)1 << 30)
#define S3F__PART_MIN (5 * S3F__MIB)        /* S3's minimum part size (all but the last) */
#define S3F__PART_MAX (5 * S3F__GIB)        /* S3's maximum part size and PutObject size */
#define S3F__COPY_PART_DEFAULT (128 * S3F__MIB) /* s3f_copy: default part (and one-copy) size */
#define S3F__MAX_PARTS 10000u
#define S3F__STREAM_GROWTH_PARTS 1000u      /* unknown length: part size doubles this often */
#define S3F__POOL_CHUNK ((size_t)1 << 20)   /* granule of the buffer pool */

/* ---- part planning (plan.c) --------------------------------------------------------- */

/* Part size for an object of known `size`: `configured` (already validated, >= 5 MiB)
 * grown, in whole MiB, until the object fits in 10,000 parts. S3F_ERR_INVALID_ARGUMENT
 * (with err set) when even 5 GiB parts are not enough. */
enum s3f_status s3f__plan_part_size(uint64_t size, uint64_t configured, uint64_t *part_size,
                                    struct s3f_error *err);
/* Number of parts for `size` bytes in parts of `part_size` (0 bytes: 1 part). */
uint32_t s3f__plan_part_count(uint64_t size, uint64_t part_size);

/* Size of part `part_number` (1-based) of a stream of unknown length whose first parts are
 * `base` bytes: base doubled every 1000 parts, never above `cap` (which is >= base). With
 * an 8 MiB base and no cap 10,000 parts hold about 8 TiB. Returns 0 past part 10,000. */
uint64_t s3f__plan_stream_part_size(uint64_t base, uint64_t cap, uint32_t part_number);
/* Total bytes parts 1..n of such a stream hold (used to document and test the limit). */
uint64_t s3f__plan_stream_capacity(uint64_t base, uint64_t cap, uint32_t n_parts);

/* Requests to keep in flight for a throughput target: ceil(gbps / 0.4) (the AWS CRT's
 * estimate of one connection to S3), at least 4, at most `max_connections`. */
uint32_t s3f__plan_inflight(double gbps, uint32_t max_connections);

/* ---- the bandwidth-delay estimator (bdp.c) ------------------------------------------ */

/* Per-client EWMAs of one connection's throughput and of the first-byte latency, from
 * completed data requests. Thread-safe (its own lock, taken briefly; no other lock is
 * taken inside it). */
struct s3f__bdp {
    pthread_mutex_t lock;
    double conn_bps;              /* bytes/s of one connection's body */
    double latency_s;             /* start of a request to its first body byte */
    uint32_t samples, bps_samples;
};
struct s3f__bdp_estimate {
    double conn_bps, latency_s;
    uint32_t samples;             /* requests measured (0: the prior) */
};
/* Prior: 50 MB/s (0.4 Gbit/s) per connection, 30 ms to the first byte. */
void s3f__bdp_init(struct s3f__bdp *b);
void s3f__bdp_cleanup(struct s3f__bdp *b);
/* A request completed: `bytes` of body, its first byte `latency_ns` after it started, its
 * body over `body_ns`. Bodies under 256 KiB or 1 ms update only the latency; latency_ns
 * UINT64_MAX (unknown: an upload) updates only the throughput. */
void s3f__bdp_sample(struct s3f__bdp *b, uint64_t bytes, uint64_t latency_ns, uint64_t body_ns);
void s3f__bdp_get(struct s3f__bdp *b, struct s3f__bdp_estimate *out);
/* Requests of `request_bytes` to keep in flight for `target_bps` (bytes/s):
 * ceil(target x (latency + request_bytes / conn_bps) / request_bytes), at least 1, at
 * most max_requests and (when memory_bytes is not 0) memory_bytes / request_bytes. */
uint32_t s3f__bdp_inflight(const struct s3f__bdp_estimate *e, double target_bps,
                           uint64_t request_bytes, uint32_t max_requests, uint64_t memory_bytes);
/* A read-ahead: *requests of *request_bytes (part_bytes, or smaller in whole min_bytes
 * when that many parts would not fit in budget_bytes; 0: no budget). */
void s3f__bdp_plan_window(const struct s3f__bdp_estimate *e, double target_bps,
                          uint64_t part_bytes, uint64_t min_bytes, uint32_t max_requests,
                          uint64_t budget_bytes, uint64_t *request_bytes, uint32_t *requests);

/* ---- the bounded buffer pool (pool.c) ---------------------------------------------- */

/* Fixed-size chunks, allocated on first need and then reused for the life of the pool
 * (never freed per part: fresh pages fault in slowly). At most `max_chunks` exist. Blocked
 * acquirers are served first come, first served, so a transfer asking for memory cannot be
 * overtaken forever by another one.
 *
 * Loans: what a holder keeps only to be faster (a reader's read-ahead and cached tail) is
 * a loan, registered as a lender (s3f__pool_lender_add). While a blocked acquirer at the
 * head of the queue is short, the pool asks every lender to give back what it can
 * (`reclaim`, called with no pool lock held; an idle reader drops its window), and the
 * non-blocking acquirers that read-ahead uses are refused until the waiter is served, so
 * the memory given back goes to it. A blocked acquirer that still gets nothing fails
 * (S3F_ERR_TIMEOUT) once `wait_timeout_ms` passed with no chunk given back and nothing in
 * flight that could give one back (`busy`, the engine's requests): it never waits forever.
 * The fields below `lock` are guarded by it; the lender list by `lenders_lock` (taken
 * before a lender's own lock, never while holding `lock`). */
struct s3f__pool_lender {
    /* Give back what can be given back (any thread; no pool lock held). */
    void (*reclaim)(struct s3f__pool_lender *l);
    struct s3f__pool_lender *next, *prev;
};

struct s3f__pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t chunk_size;
    size_t max_chunks;
    size_t n_allocated;       /* chunks malloc'ed so far */
    size_t in_use;            /* chunks handed out */
    size_t high_water;        /* most chunks in use at once */
    void **free;              /* stack of n_free free chunks (capacity max_chunks) */
    size_t n_free;
    uint64_t next_ticket;     /* FIFO of blocked acquirers */
    uint64_t now_serving;
    uint64_t releases;        /* calls of s3f__pool_release, ever (progress) */
    uint64_t reclaims;        /* times the lenders were asked, ever (stats, tests) */
    uint64_t wait_timeout_ms; /* set after init; 0: 60000 */
    /* set after init, read-only then: are requests in flight that will give memory back?
     * (called with no pool lock held) */
    bool (*busy)(void *ud);
    void *busy_ud;
    pthread_mutex_t lenders_lock;
    struct s3f__pool_lender *lenders; /* under lenders_lock */
};

/* Limit of `limit_bytes` (rounded down to chunks, at least one chunk). Allocates only the
 * free-list array. S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__pool_init(struct s3f__pool *p, size_t chunk_size, uint64_t limit_bytes);
/* Frees every chunk; all must have been released and every lender removed. */
void s3f__pool_cleanup(struct s3f__pool *p);
/* Take `n` chunks (1..max_chunks) into chunks[]. wait: block until they are available and
 * every earlier blocked caller was served, asking the lenders for their loans while short;
 * S3F_ERR_TIMEOUT after wait_timeout_ms without progress (see above). Without wait:
 * S3F_ERR_ABORTED at once when they are not available (or someone is waiting). S3F_ERR_NO_MEMORY when malloc fails, S3F_ERR_INVALID_ARGUMENT for n
 * beyond the pool. Thread-safe. Must not be called with wait while holding a lender's
 * lock. */
enum s3f_status s3f__pool_acquire(struct s3f__pool *p, size_t n, void **chunks, bool wait);
/* Give back `n` chunks (kept for reuse). Thread-safe, never blocks for long. */
void s3f__pool_release(struct s3f__pool *p, size_t n, void *const *chunks);
/* Register / remove a lender (see above). Remove waits for a reclaim of it that runs. */
void s3f__pool_lender_add(struct s3f__pool *p, struct s3f__pool_lender *l);
void s3f__pool_lender_remove(struct s3f__pool *p, struct s3f__pool_lender *l);

struct s3f__pool_stats {
    size_t chunk_size, max_chunks, n_allocated, in_use, high_water;
    uint64_t reclaims;
    uint64_t waiters;         /* acquirers blocked now */
};
void s3f__pool_stats(struct s3f__pool *p, struct s3f__pool_stats *out);
void s3f__pool_reset_high_water(struct s3f__pool *p);

/* ---- the request scheduler (sched.c) ---------------------------------------------- */

/* Transfers queue data requests here instead of submitting them: at most `max_inflight`
 * run at once across the client, and free slots go round-robin to the transfers that have
 * work, one request per transfer per turn, so a small transfer waits behind at most one
 * request of each other transfer, never behind a big transfer's whole queue.
 * Control requests (CreateMultipartUpload, Complete, Abort, HEAD) bypass it. */
struct s3f__sched_entry {
    /* Start one request of the transfer and return true (the transfer then calls
     * s3f__sched_done when it completes), or return false when it has nothing to start
     * after all (failed meanwhile). Called from any thread with no scheduler lock held;
     * must not block for long. */
    bool (*start)(struct s3f__sched_entry *e);
    /* guarded by the scheduler's lock */
    struct s3f__sched_entry *prev, *next;
    uint32_t pending;   /* requests ready to start */
    uint32_t starting;  /* calls of start() running right now */
    bool linked;
};

struct s3f__sched {
    pthread_mutex_t lock;
    pthread_cond_t idle;           /* signalled when an entry's `starting` drops to 0 */
    uint32_t max_inflight;
    uint32_t inflight;
    uint32_t inflight_high_water;
    uint64_t started;              /* requests started, ever */
    struct s3f__sched_entry *cursor; /* next entry served; NULL when none has work */
};

void s3f__sched_init(struct s3f__sched *s, uint32_t max_inflight);
void s3f__sched_cleanup(struct s3f__sched *s);
/* `n` more requests of `e` are ready; starts what the free slots allow. */
void s3f__sched_add(struct s3f__sched *s, struct s3f__sched_entry *e, uint32_t n);
/* Forget the pending requests of `e` (it is failing); start() may still be running or be
 * called once more by a pump that picked it just before: it must answer false then. */
void s3f__sched_cancel(struct s3f__sched *s, struct s3f__sched_entry *e);
/* Before freeing `e`: cancel and wait until no start() call of it runs. Must not be called
 * while holding a lock that start() takes. */
void s3f__sched_detach(struct s3f__sched *s, struct s3f__sched_entry *e);
/* A request started through start() finished: frees its slot and starts the next. */
void s3f__sched_done(struct s3f__sched *s);
/* Change the number of requests in flight (at least 1); starts what a raise allows.
 * No lock held by the caller. */
void s3f__sched_set_max(struct s3f__sched *s, uint32_t max_inflight);

/* ---- aborts retried in the background (janitor.c) ------------------------------------ */

#define S3F__ABORT_GIVE_UP_S 600 /* a pending abort is retried this long, then left */

struct s3f__abort_job;
struct s3f__janitor {
    pthread_mutex_t lock;
    pthread_cond_t cond;              /* CLOCK_MONOTONIC; signalled to stop */
    struct s3f__abort_job *jobs;      /* guarded by lock (but see janitor_main) */
    uint32_t n_jobs;                  /* pending, including those being tried */
    bool running, joinable, stopping;
    pthread_t thread;
};

void s3f__janitor_init(struct s3f__janitor *j);
void s3f__janitor_cleanup(struct s3f__janitor *j);
/* Statuses of a failed abort that a later try may cure (the server was away, busy...). */
bool s3f__janitor_worth_retrying(enum s3f_status st);
struct s3f__xfer_shared;
/* Retry AbortMultipartUpload of `upload_id` in the background (copies the strings). */
void s3f__janitor_add(struct s3f__xfer_shared *x, const char *bucket, const char *key,
                      const char *upload_id);
uint32_t s3f__janitor_pending(struct s3f__janitor *j);
/* Stop the thread, try what is pending once more, log what is left. Before the transport
 * goes away (s3f_client_free). */
void s3f__janitor_stop(struct s3f__xfer_shared *x);

/* ---- per-client state (xfer.c) ------------------------------------------------------ */

struct s3f__xfer_shared {
    struct s3f_client *client;
    uint64_t part_size;            /* default part size */
    uint64_t memory_limit;
    uint32_t max_inflight;         /* as planned at creation (the floor when adaptive) */
    bool inflight_fixed;           /* max_inflight_requests was configured: never adapted */
    uint32_t data_connections;     /* connections data requests may use: the ceiling */
    double target_gbps;
    enum s3f_checksum_algorithm checksum; /* never DEFAULT */
    struct s3f__pool pool;
    struct s3f__sched sched;
    struct s3f__janitor janitor;
    struct s3f__cache *cache;      /* the block cache (src/cache), NULL: none or unusable */
    struct s3f__xz *xz;            /* the shared cache (cache/xz.c), NULL: none */
    struct s3f__bdp bdp;
};

/* The engine of one client: its options as the caller gave them (resolved into a
 * s3f__xfer_shared on the first transfer) and that state. Created by s3f_client_new before
 * the s3 client, stopped before the transport goes away and freed after it, by
 * s3f_client_free (xfer.c); the s3 client holds only the pointer. */
struct s3f__xfer_engine {
    double throughput_target_gbps;
    uint64_t part_size_bytes;
    uint64_t memory_limit_bytes;
    uint32_t memory_wait_timeout_ms;
    uint32_t max_inflight_requests;
    enum s3f_checksum_algorithm checksum;
    char *cache_dir;              /* the block cache (src/cache), NULL: none */
    uint64_t cache_max_bytes, cache_min_free_bytes, cache_block_bytes;
    char *cache_xz_bucket;        /* the shared cache's directory bucket, NULL: none */
    pthread_mutex_t lock;
    struct s3f__xfer_shared *shared; /* NULL until the first transfer; under `lock` */
};

/* The client's transfer state, created on first use from its options. S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__xfer_shared_get(struct s3f_client *c, struct s3f__xfer_shared **out,
                                     struct s3f_error *err);

/* The checks of a call that GETs one whole object without a Range (s3f_download_alloc,
 * s3f_download_stream; op_name names it in errors): *opts NULL becomes the defaults, no
 * range in them, the bucket and the key; then the client's transfer state into *x. */
enum s3f_status s3f__xfer_whole_get_args(struct s3f_client *c, const char *op_name,
                                         const char *bucket, const char *key,
                                         const struct s3f_download_options **opts,
                                         struct s3f__xfer_shared **x, struct s3f_error *err);

/* A data request completed (any thread, no lock held): feed the estimator and, unless the
 * number in flight was configured, raise or lower the scheduler's limit to what the link
 * needs for the throughput target with requests of the default part size, never below
 * the planned x->max_inflight nor above the data connections or twice the plan. */
void s3f__xfer_observe(struct s3f__xfer_shared *x, uint64_t bytes, uint64_t latency_ns,
                       uint64_t body_ns);
/* The times of one data request, for s3f__xfer_observe: set start_ns when it is started,
 * call s3f__xfer_timing_body from its sink (one thread at a time), then
 * s3f__xfer_observe_timing when it succeeded. */
struct s3f__xfer_timing {
    uint64_t start_ns, first_ns, last_ns;
    uint64_t first_len, bytes;
};
static inline void s3f__xfer_timing_body(struct s3f__xfer_timing *t, size_t len) {
    uint64_t now = s3f__now_ns();
    if (!t->first_ns) {
        t->first_ns = now;
        t->first_len = len;
    }
    t->last_ns = now;
    t->bytes += len;
}
void s3f__xfer_observe_timing(struct s3f__xfer_shared *x, const struct s3f__xfer_timing *t);
/* The throughput target in bytes/s. */
double s3f__xfer_target_bps(const struct s3f__xfer_shared *x);

/* A reader about to be read front to back (s3f_download_stream): start the read-ahead at
 * offset 0 now, as wide as the link needs, instead of growing it from 1 MiB. Before the
 * first read, on the reader's thread. */
struct s3f_reader;
void s3f__reader_sequential(struct s3f_reader *rd);

/* Of regions whose end offsets in the object are iov_end[0..n) (ascending), the first whose
 * end is past `pos` (the one holding byte pos; empty regions skipped), n if none. */
size_t s3f__xfer_iov_find(const uint64_t *iov_end, size_t n, uint64_t pos);
/* The whole-object checksum a download verifies, from the server's values ("" where it
 * sent none): the client's algorithm `pref` first, else another one the server keeps; a
 * checksum of part checksums ("...-N") is not one of the bytes and is skipped. ck is
 * initialised for the algorithm picked (S3F_CHECKSUM_NONE for none) and want holds the
 * expected base64 value ("" for none). */
void s3f__xfer_choose_checksum(const char *crc32c, const char *crc32, const char *crc64nvme,
                               enum s3f_checksum_algorithm pref, struct s3f__checksum *ck,
                               char *want, size_t want_len);
/* Fill `info`'s checksum field for ck's algorithm when the server left it empty. */
void s3f__xfer_report_checksum(struct s3f_object_info *info, const struct s3f__checksum *ck);
/* The info field holding the checksum of `alg` (and its size), NULL for NONE. */
char *s3f__xfer_checksum_field(struct s3f_object_info *info, enum s3f_checksum_algorithm alg,
                               size_t *len);

#endif
