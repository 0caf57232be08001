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

#include "xfer/reader_internal.h"

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
    s->queued = true;
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
    s->queued = true;
    s->qnext = rd->q_head;
    rd->q_head = s;
    if (!rd->q_tail)
        rd->q_tail = s;
    return 1;
}

/* The reader no longer wants `s` (already unlinked from its list; lock held). */
void s3f__reader_seg_drop(struct s3f_reader *rd, struct seg *s) {
    if (s->queued) {
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
    } else if (s->in_flight) {
        s->cancelled = true;
        s->next = rd->dead;
        rd->dead = s;
    } else {
        seg_free(rd, s);
    }
}

void s3f__reader_drop_window(struct s3f_reader *rd, bool (*pred)(struct seg *, uint64_t),
                        uint64_t arg) {
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
    bool stop = s->cancelled;
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
    s->in_flight = false;
    if (s->cancelled) {
        struct seg **pp = &rd->dead;
        while (*pp && *pp != s)
            pp = &(*pp)->next;
        if (*pp)
            *pp = s->next;
        seg_free(rd, s);
    } else if (st == S3F_OK && s->filled == s->end - s->start) {
        s->done = true;
        measured = true;
    } else {
        s->failed = true;
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
    pthread_mutex_lock(&rd->lock);
    struct seg *s = rd->q_head;
    if (!s) {
        pthread_mutex_unlock(&rd->lock);
        return false;
    }
    rd->q_head = s->qnext;
    if (!rd->q_head)
        rd->q_tail = NULL;
    s->queued = false;
    enum s3f_status st = s3f__op_get(&s->op, false, rd->bucket, rd->key, rd->version_id,
                                     rd->etag, false, &s->err);
    if (st) {
        s->failed = true;
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
    s->in_flight = true;
    s->t.start_ns = s3f__now_ns();
    rd->outstanding++;
    pthread_mutex_unlock(&rd->lock);
    s3f__s3_submit(rd->c, &s->op.r, &s->err, seg_done, s);
    return true;
}
