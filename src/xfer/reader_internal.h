/* The random-access reader's segments and state, shared by its two files (xfer/reader.c;
 * see there and docs/TRANSFER.md):
 *
 *   reader.c      the read path: the read-ahead window's policy, fills, the tail, direct
 *                 reads of large misses, and the public calls
 *   reader_seg.c  a segment's life: made from pool chunks or the caller's memory, queued
 *                 for a request slot, its ranged GET on the I/O threads, dropped (freed, or
 *                 cancelled while in flight and freed by its completion)
 * Private to src/xfer. */
#ifndef S3F_XFER_READER_INTERNAL_H
#define S3F_XFER_READER_INTERNAL_H

#include <pthread.h>

#include "cache/cache.h"
#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define WINDOW_MIN S3F__MIB               /* first read-ahead, and after a jump */
#define TAIL_DEFAULT S3F__MIB
#define MERGE_GAP (256u << 10)            /* a miss this close past the window extends it */
#define DIRECT_MIN S3F__MIB               /* misses this large go straight to the caller */
#define SEQ_GAP 4096u                     /* a read this close past the last still sequential */
#define SEQ_LEN (64u << 10)               /* ... when it is at least this long */
#define IDLE_NS (100ull * 1000 * 1000)    /* no read call for this long: an idle reader */
#define RANDOM_ROUND (64u << 10)          /* a random miss fetches its bytes rounded up to */
#define RANDOM_MIN (128u << 10)           /* ... this granule, at least this much */
#define STREAM_BEHIND (4u << 20)          /* a read this far behind the stream's front (reads
                                           * of one handle served out of order) is in it */
#define STREAM_OPEN (16u << 20)          /* a confirmed stream's window, at once */
#define FILL_JUMPS 2                      /* random misses before an object is filled */
#define PAIR_SCORE_MAX 4u                 /* jumps without their other half that it takes
                                           * to stop fetching it (fetch_pair) */
#define FILL_WAIT (1u << 20)              /* a read at most this far past a fill segment's
                                           * arrived bytes waits for them, else fetches */

/* A segment's life (reader_seg.c changes it, in seg_set_state only):
 *
 *   NEW --queue--> QUEUED --slot--> SENDING --all bytes--> DONE
 *                    |                 |-----error-------> FAILED
 *                    '--no request---> FAILED
 *                                      '--dropped--------> CANCELLED (freed by its completion)
 *
 * A NEW, DONE or FAILED segment that the reader drops is freed at once, a QUEUED one taken
 * off the queue and freed. */
enum seg_state {
    SEG_NEW,        /* made, not yet queued */
    SEG_QUEUED,     /* on the start queue, waiting for a request slot */
    SEG_SENDING,    /* its ranged GET is in flight */
    SEG_CANCELLED,  /* dropped while in flight: on rd->dead until its completion frees it */
    SEG_DONE,       /* every byte of [start, end) arrived */
    SEG_FAILED,     /* status and err say why */
};

struct seg {
    struct s3f_reader *rd;
    uint64_t start, end;                  /* object range [start, end) */
    void **chunks;                        /* pool chunks, or NULL */
    size_t n_chunks;
    char *direct;                         /* or the caller's buffer for [start, end) */
    uint64_t filled;                      /* bytes arrived from start */
    enum seg_state state;
    enum s3f_status status;
    struct s3f_error err;
    struct s3f__op op;
    struct s3f__xfer_timing t;            /* for the bandwidth-delay estimator */
    struct seg *next;                     /* in the window, the private list or dead list */
    struct seg *qnext;                    /* in the start queue */
};

struct s3f_reader {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    char *bucket, *key, *version_id, *etag;
    char resource[600];
    struct s3f_object_info info;
    uint64_t size;
    uint64_t pos;                         /* of read/seek */
    uint64_t seq_next;                    /* where a sequential read continues */
    uint64_t window, window_max;
    uint64_t tail_start;                  /* == size when there is no tail cache */
    uint64_t part_size;
    struct s3f__cache_object *cobj;       /* the client's block cache: this object's blocks */
    uint64_t fill_max;                    /* random reads fill objects up to this size */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- guarded by lock ---- */
    struct seg *window_segs;              /* sorted by start, disjoint */
    struct seg *tail;
    struct seg *dead;                     /* cancelled, waiting for their completion */
    struct seg *q_head, *q_tail;
    uint32_t outstanding, callbacks;
    uint32_t active;                      /* read calls running (segments in use) */
    uint64_t last_read_ns;                /* when the last read call ended */
    uint32_t jumps;                       /* random misses since the last fill or reclaim */
    uint64_t behind;                      /* reads came this far behind the stream's front */
    uint32_t streak;                      /* long sequential reads in a row */
    bool after_jump;                      /* the last read call was a jump ... */
    uint64_t jump_start;                  /* ... that started here */
    uint64_t jump_len;                    /* ... and asked for this much */
    bool pair_seen;                       /* the last jump's other half came */
    uint32_t pair_score;                  /* + 2 a jump with its other half, - 1 one
                                           * without (at most PAIR_SCORE_MAX) */
    uint64_t pair_long, pair_short;       /* the lengths of the longer and the shorter half
                                           * of the last random read split in two */
    bool filling;                         /* the window is the whole object (fill) */
    struct s3f__sched_entry entry;
    struct s3f__pool_lender lender;       /* the pool asks for the loans back */
};

/* Segments (reader_seg.c); every one with rd->lock held. */
struct seg *s3f__reader_seg_new(struct s3f_reader *rd, uint64_t start, uint64_t end, char *direct);
uint32_t s3f__reader_seg_queue(struct s3f_reader *rd, struct seg *s);
uint32_t s3f__reader_seg_queue_front(struct s3f_reader *rd, struct seg *s);
void s3f__reader_seg_drop(struct s3f_reader *rd, struct seg *s);
void s3f__reader_drop_window(struct s3f_reader *rd, bool (*pred)(struct seg *, uint64_t),
                             uint64_t arg);
/* The scheduler's start for the reader's entry (no lock held): the next queued segment's
 * request. */
bool s3f__reader_start_seg(struct s3f__sched_entry *e);

#endif
