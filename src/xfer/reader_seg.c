/* A reader's segments (the read path is reader.c's): a segment is a range [start, end) of
 * the object fetched by one ranged GET with If-Match, into pool chunks (read-ahead, fills,
 * the tail) or straight into the caller's buffer (direct reads).
 *
 * Invariants: every field of a segment but its bytes is guarded by rd->lock. Its bytes
 * below `filled` are stable and read without the lock; the sink writes only above it. A
 * queued segment is on rd's start queue (q_head..q_tail) and nowhere else in flight; a
 * segment dropped while its request is in flight is cancelled, moved to rd->dead, and freed
 * by its completion (never by the reader's thread). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "xfer/reader_internal.h"

static const char *const seg_state_names[] = {"NEW", "QUEUED", "SENDING", "CANCELLED",
                                              "DONE", "FAILED"};

/* The transitions allowed from each state (reader_internal.h draws them). */
static const unsigned seg_allowed[] = {
    [SEG_NEW] = 1u << SEG_QUEUED,
    [SEG_QUEUED] = 1u << SEG_SENDING | 1u << SEG_FAILED,
    [SEG_SENDING] = 1u << SEG_DONE | 1u << SEG_FAILED | 1u << SEG_CANCELLED,
    [SEG_CANCELLED] = 0,
    [SEG_DONE] = 0,
    [SEG_FAILED] = 0,
};

/* Every change of a segment's state goes through here (rd->lock held): checked against
 * seg_allowed and traced at S3FLASH_LOG=trace with the line that made it. */
#define seg_set_state(rd, s, to) seg_set_state_at(rd, s, to, __LINE__)
static void seg_set_state_at(struct s3f_reader *rd, struct seg *s, enum seg_state to, int line) {
    S3F_ASSERT_HELD(&rd->lock);
    S3F_ASSERT(seg_allowed[s->state] & (1u << to));
    if (s3f__log_enabled(&rd->c->logger, S3F_LOG_TRACE))
        s3f__log(&rd->c->logger, S3F_LOG_TRACE,
                 "reader %s: segment [%" PRIu64 ", %" PRIu64 ") %s -> %s (reader_seg.c:%d)",
                 rd->resource, s->start, s->end, seg_state_names[s->state],
                 seg_state_names[to], line);
    s->state = to;
}

static void seg_free(struct s3f_reader *rd, struct seg *s) {
    if (s->n_chunks)
        s3f__pool_release(&rd->x->pool, s->n_chunks, s->chunks);
    free(s->chunks);
    s3f__op_cleanup(&s->op);
    free(s);
}

/* A segment for [start, end): into pool chunks (try only; NULL when the pool is full) or,
 * with `direct`, into the caller's memory. Lock held. */
struct seg *s3f__reader_seg_new(struct s3f_reader *rd, uint64_t start, uint64_t end, char *direct) {
    S3F_ASSERT_HELD(&rd->lock);
    struct seg *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->rd = rd;
    s->start = start;
    s->end = end;
    s->direct = direct;
    if (!direct && end > start) {
        size_t cs = rd->x->pool.chunk_size;
        size_t n = (size_t)((end - start + cs - 1) / cs);
        s->chunks = calloc(n, sizeof(*s->chunks));
        if (!s->chunks || s3f__pool_acquire(&rd->x->pool, n, s->chunks, false) != S3F_OK) {
            free(s->chunks);
            free(s);
            return NULL;
        }
        s->n_chunks = n;
    }
    return s;
}

/* Queue for a request slot (lock held); returns 1 to pass to s3f__sched_add. */
uint32_t s3f__reader_seg_queue(struct s3f_reader *rd, struct seg *s) {
    S3F_ASSERT_HELD(&rd->lock);
    seg_set_state(rd, s, SEG_QUEUED);
    s->qnext = NULL;
    if (rd->q_tail)
        rd->q_tail->qnext = s;
    else
        rd->q_head = s;
    rd->q_tail = s;
    return 1;
}

/* Queue `s` ahead of the others (lock held): a read waits for it, read-ahead and fills
 * do not. */
uint32_t s3f__reader_seg_queue_front(struct s3f_reader *rd, struct seg *s) {
    S3F_ASSERT_HELD(&rd->lock);
    seg_set_state(rd, s, SEG_QUEUED);
    s->qnext = rd->q_head;
    rd->q_head = s;
    if (!rd->q_tail)
        rd->q_tail = s;
    return 1;
}

/* The reader no longer wants `s` (already unlinked from its list; lock held). */
void s3f__reader_seg_drop(struct s3f_reader *rd, struct seg *s) {
    S3F_ASSERT_HELD(&rd->lock);
    if (s->state == SEG_QUEUED) {
        struct seg **pp = &rd->q_head, *prev = NULL;
        while (*pp && *pp != s) {
            prev = *pp;
            pp = &(*pp)->qnext;
        }
        if (*pp)
            *pp = s->qnext;
        if (rd->q_tail == s)
            rd->q_tail = prev;
        seg_free(rd, s);
    } else if (s->state == SEG_SENDING) {
        seg_set_state(rd, s, SEG_CANCELLED);
        s->next = rd->dead;
        rd->dead = s;
    } else {
        seg_free(rd, s);
    }
}

void s3f__reader_drop_window(struct s3f_reader *rd, bool (*pred)(struct seg *, uint64_t),
                             uint64_t arg) {
    S3F_ASSERT_HELD(&rd->lock);
    struct seg **pp = &rd->window_segs;
    while (*pp) {
        struct seg *s = *pp;
        if (!pred || pred(s, arg)) {
            *pp = s->next;
            s3f__reader_seg_drop(rd, s);
        } else {
            pp = &s->next;
        }
    }
}

/* ---- requests (I/O threads) -------------------------------------------------------- */

static int seg_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct seg *s = ud;
    struct s3f_reader *rd = s->rd;
    pthread_mutex_lock(&rd->lock);
    bool stop = s->state == SEG_CANCELLED;
    pthread_mutex_unlock(&rd->lock);
    if (stop)
        return 1;
    if (offset < s->start || offset + len > s->end)
        return 1; /* cannot happen: the executor places bytes by their offset */
    uint64_t rel = offset - s->start;
    if (s->direct) {
        memcpy(s->direct + rel, data, len);
    } else {
        size_t cs = rd->x->pool.chunk_size;
        const char *p = data;
        size_t left = len;
        while (left) {
            size_t ci = (size_t)(rel / cs), in = (size_t)(rel % cs);
            size_t n = cs - in < left ? cs - in : left;
            memcpy((char *)s->chunks[ci] + in, p, n);
            p += n;
            rel += n;
            left -= n;
        }
    }
    s3f__xfer_timing_body(&s->t, len);
    pthread_mutex_lock(&rd->lock);
    s->filled = offset + len - s->start;
    pthread_cond_broadcast(&rd->cond);
    pthread_mutex_unlock(&rd->lock);
    return 0;
}

static void seg_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct seg *s = ud;
    struct s3f_reader *rd = s->rd;
    (void)r;
    struct s3f__xfer_timing t = s->t;
    bool measured = false;
    pthread_mutex_lock(&rd->lock);
    rd->callbacks++;
    rd->outstanding--;
    if (s->state == SEG_CANCELLED) {
        struct seg **pp = &rd->dead;
        while (*pp && *pp != s)
            pp = &(*pp)->next;
        if (*pp)
            *pp = s->next;
        seg_free(rd, s);
    } else if (st == S3F_OK && s->filled == s->end - s->start) {
        seg_set_state(rd, s, SEG_DONE);
        measured = true;
    } else {
        seg_set_state(rd, s, SEG_FAILED);
        s->status = st ? st : S3F_ERR_BAD_RESPONSE;
        if (st == S3F_OK)
            s3f__error_set(&s->err, S3F_ERR_BAD_RESPONSE, "GetObject", rd->resource,
                           "the response ended after %" PRIu64 " of %" PRIu64 " bytes",
                           s->filled, s->end - s->start);
        if (s->status == S3F_ERR_PRECONDITION_FAILED && s->err.http_status == 412)
            s3f__strlcpy(s->err.message, "the object changed while it was read (ETag differs)",
                         sizeof(s->err.message));
    }
    pthread_cond_broadcast(&rd->cond);
    pthread_mutex_unlock(&rd->lock);
    if (measured)
        s3f__xfer_observe_timing(rd->x, &t);
    s3f__sched_done(&rd->x->sched);
    pthread_mutex_lock(&rd->lock);
    rd->callbacks--;
    pthread_cond_broadcast(&rd->cond);
    pthread_mutex_unlock(&rd->lock);
}

bool s3f__reader_start_seg(struct s3f__sched_entry *e) {
    struct s3f_reader *rd = (struct s3f_reader *)((char *)e - offsetof(struct s3f_reader, entry));
    S3F_ASSERT_NOT_HELD(&rd->lock);
    S3F_ASSERT_NOT_HELD(&rd->x->sched.lock);
    pthread_mutex_lock(&rd->lock);
    struct seg *s = rd->q_head;
    if (!s) {
        pthread_mutex_unlock(&rd->lock);
        return false;
    }
    rd->q_head = s->qnext;
    if (!rd->q_head)
        rd->q_tail = NULL;
    enum s3f_status st = s3f__op_get(&s->op, false, rd->bucket, rd->key, rd->version_id,
                                     rd->etag, false, &s->err);
    if (st) {
        seg_set_state(rd, s, SEG_FAILED);
        s->status = st;
        pthread_cond_broadcast(&rd->cond);
        pthread_mutex_unlock(&rd->lock);
        return false;
    }
    s->op.r.sink = seg_sink;
    s->op.r.sink_ud = s;
    s->op.r.has_range = true;
    s->op.r.range_start = s->start;
    s->op.r.range_end = s->end - 1;
    s->op.r.has_object_size = true; /* pinned at open, as the ETag (If-Match) */
    s->op.r.object_size = rd->size;
    seg_set_state(rd, s, SEG_SENDING);
    s->t.start_ns = s3f__now_ns();
    rd->outstanding++;
    pthread_mutex_unlock(&rd->lock);
    s3f__s3_submit(rd->c, &s->op.r, &s->err, seg_done, s);
    return true;
}
