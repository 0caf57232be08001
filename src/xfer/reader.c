/* The random-access reader: a read-ahead window of segments (ranged GETs into pool
 * chunks) that grows while reads are sequential and is dropped on a jump, a cached tail,
 * near misses merged into the window, and large misses fetched straight into the caller's
 * buffer. docs/TRANSFER.md describes the policy.
 *
 * Threads: the reader's own thread (the caller) creates, consumes and drops segments; I/O
 * threads fill them. A segment's bytes below `filled` are stable and read without the lock;
 * the sink writes only above it. Everything else is guarded by rd->lock. A dropped segment
 * still in flight is cancelled (its sink stops the transfer) and freed by its completion.
 *
 * The read-ahead and the tail are loans from the client's pool (xfer.h): the reader is a
 * lender, and when a blocked acquirer (a writer) is short, an idle reader (no read call
 * for 100 ms) drops them; its next read starts a new window.
 *
 * This file owns the read path and the public calls; reader_seg.c a segment's life and its
 * request (see reader_internal.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "xfer/reader_internal.h"

static bool ends_before(struct seg *s, uint64_t pos) {
    return s->end <= pos;
}

/* The pool is short (a blocked acquirer waits; no pool lock held): an idle reader (no
 * read call for IDLE_NS) gives its read-ahead and tail back. One in a read call keeps them
 * (its thread copies out of them without the lock) and gives them back as it reads past
 * them; one between two calls of a stream keeps them too (its window is about to be
 * read), while read-ahead's new requests wait behind the blocked acquirer. */
static void reader_reclaim(struct s3f__pool_lender *l) {
    struct s3f_reader *rd =
        (struct s3f_reader *)((char *)l - offsetof(struct s3f_reader, lender));
    pthread_mutex_lock(&rd->lock);
    if (!rd->active && s3f__now_ns() - rd->last_read_ns >= IDLE_NS) {
        s3f__reader_drop_window(rd, NULL, 0);
        if (rd->tail) {
            s3f__reader_seg_drop(rd, rd->tail);
            rd->tail = NULL;
        }
        rd->window = WINDOW_MIN < rd->window_max ? WINDOW_MIN : rd->window_max;
        rd->filling = false;
        rd->jumps = 0;
    }
    pthread_mutex_unlock(&rd->lock);
}

/* ---- the read path (the reader's thread) --------------------------------------------- */

static struct seg *find_seg(struct s3f_reader *rd, uint64_t pos) {
    for (struct seg *s = rd->window_segs; s; s = s->next)
        if (s->start <= pos && pos < s->end)
            return s;
    return NULL;
}

/* First window segment starting after pos, for the limit of a new fetch. */
static uint64_t next_start(struct s3f_reader *rd, uint64_t pos) {
    uint64_t lim = rd->tail_start;
    for (struct seg *s = rd->window_segs; s; s = s->next)
        if (s->start > pos && s->start < lim)
            lim = s->start;
    return lim;
}

static uint64_t window_end(struct s3f_reader *rd) {
    uint64_t e = 0;
    for (struct seg *s = rd->window_segs; s; s = s->next)
        if (s->end > e)
            e = s->end;
    return e;
}

static void insert_seg(struct s3f_reader *rd, struct seg *s) {
    struct seg **pp = &rd->window_segs;
    while (*pp && (*pp)->start < s->start)
        pp = &(*pp)->next;
    s->next = *pp;
    *pp = s;
}

/* Unlock, hand `n` new requests to the scheduler, lock again. */
static void kick(struct s3f_reader *rd, uint32_t n) {
    if (!n)
        return;
    pthread_mutex_unlock(&rd->lock);
    s3f__sched_add(&rd->x->sched, &rd->entry, n);
    pthread_mutex_lock(&rd->lock);
}

/* Copy `n` bytes at object offset `pos` out of segment `s` (below its filled mark). */
static void seg_copy(struct s3f_reader *rd, struct seg *s, uint64_t pos, char *dst, size_t n) {
    uint64_t rel = pos - s->start;
    if (s->direct) {
        memcpy(dst, s->direct + rel, n);
        return;
    }
    size_t cs = rd->x->pool.chunk_size;
    while (n) {
        size_t ci = (size_t)(rel / cs), in = (size_t)(rel % cs);
        size_t k = cs - in < n ? cs - in : n;
        memcpy(dst, (const char *)s->chunks[ci] + in, k);
        dst += k;
        rel += k;
        n -= k;
    }
}

static enum s3f_status seg_error(struct s3f_reader *rd, struct seg *s, struct s3f_error *err) {
    if (err) {
        *err = s->err;
        err->status = s->status;
        if (!err->resource[0])
            s3f__strlcpy(err->resource, rd->resource, sizeof(err->resource));
    }
    return s->status;
}

/* Fetch [pos, end) straight into dst with parallel requests of at most a part; wait. */
static enum s3f_status fetch_direct(struct s3f_reader *rd, uint64_t pos, uint64_t end, char *dst,
                                    struct s3f_error *err) {
    struct seg *list = NULL, **tail = &list;
    uint32_t n = 0;
    enum s3f_status st = S3F_OK;
    for (uint64_t f = pos; f < end;) {
        uint64_t e = end - f > rd->part_size ? f + rd->part_size : end;
        struct seg *s = s3f__reader_seg_new(rd, f, e, dst + (f - pos));
        if (!s) {
            st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "read", rd->resource, "out of memory");
            break;
        }
        *tail = s;
        tail = &s->next;
        f = e;
    }
    /* ahead of queued read-ahead and fill segments, in order: the caller waits for these */
    struct seg *rev = NULL;
    for (struct seg *s = list; s; s = s->next) {
        s->qnext = rev;
        rev = s;
    }
    while (rev) {
        struct seg *s = rev;
        rev = s->qnext;
        n += s3f__reader_seg_queue_front(rd, s);
    }
    kick(rd, n);
    for (struct seg *s = list; s; s = s->next) {
        while (s->state != SEG_DONE && s->state != SEG_FAILED)
            pthread_cond_wait(&rd->cond, &rd->lock);
        if (s->state == SEG_FAILED && !st)
            st = seg_error(rd, s, err);
    }
    while (list) {
        struct seg *s = list;
        list = s->next;
        s3f__reader_seg_drop(rd, s); /* all settled: freed */
    }
    return st;
}

/* fetch_direct of [*pos, end) into buf + *out, both advanced past it on success. */
static enum s3f_status read_direct(struct s3f_reader *rd, uint64_t *pos, uint64_t end, char *buf,
                                   size_t *out, struct s3f_error *err) {
    enum s3f_status st = fetch_direct(rd, *pos, end, buf + *out, err);
    if (st == S3F_OK) {
        *out += (size_t)(end - *pos);
        *pos = end;
    }
    return st;
}

/* The read-ahead's shape from the client's bandwidth-delay estimate (lock held): k
 * segments of *seg bytes in flight fill the link for the throughput target, within the
 * request slots and the window's cap. */
static void plan_segments(struct s3f_reader *rd, uint64_t *seg, uint32_t *k) {
    S3F_ASSERT_HELD(&rd->lock);
    struct s3f__bdp_estimate e;
    s3f__bdp_get(&rd->x->bdp, &e);
    pthread_mutex_lock(&rd->x->sched.lock);
    uint32_t slots = rd->x->sched.max_inflight;
    pthread_mutex_unlock(&rd->x->sched.lock);
    s3f__bdp_plan_window(&e, s3f__xfer_target_bps(rd->x), rd->part_size, S3F__MIB, slots,
                         rd->window_max, seg, k);
}

/* The size of the read-ahead's next segments (lock held): while the window is too small
 * for k planned segments (its ramp), the window split over the k requests it may have in
 * flight, in whole MiB, at least WINDOW_MIN (never past the window) and at most the planned
 * segment; then the planned segment. Splitting a window that holds k of them was measured
 * slower (`s3flash cp` to a pipe, which reads through this reader: 0.74x with 16 segments
 * of 4 MiB for 64 MiB instead of 8 of 8 MiB). Each segment is one connection's request, read at one
 * connection's rate: a window opened to 16 MiB as two part-sized segments is read at the
 * rate of one connection while the second fills, where sixteen of 1 MiB fill in parallel.
 * The segments grow with the window, up to the plan's. */
static uint64_t ramp_step(const struct s3f_reader *rd, uint64_t from, uint64_t seg, uint32_t k) {
    S3F_ASSERT_HELD(&rd->lock);
    if (rd->window >= (uint64_t)(k ? k : 1) * seg)
        return seg < rd->window ? seg : rd->window; /* k whole segments fit: the plan's (an
                                                     * 8 MiB part each, as `cp` fetches) */
    uint64_t span = rd->window;
    if (from < rd->tail_start && rd->tail_start - from < span)
        span = rd->tail_start - from; /* near the end: what is left, split the same way
                                       * (once per top-up: not shrinking segment by segment) */
    uint64_t step = span / (k ? k : 1) / WINDOW_MIN * WINDOW_MIN;
    if (step < WINDOW_MIN)
        step = WINDOW_MIN;
    if (step > seg)
        step = seg;
    if (step > rd->window)
        step = rd->window;
    return step ? step : 1;
}

/* Read-ahead after a sequential read that ended at pos (lock held): keep [pos, pos+window)
 * covered with segments, each on its own request, so that up to k of them are in flight
 * at once (plan_segments); topped up as soon as one completes, while the pool has room.
 * The window doubles with each top-up, up to what k segments and the one being read need
 * (and never past window_max). */
static void prefetch(struct s3f_reader *rd, uint64_t pos) {
    S3F_ASSERT_HELD(&rd->lock);
    if (!rd->window_max)
        return;
    uint64_t seg;
    uint32_t k;
    plan_segments(rd, &seg, &k);
    if (k < 2)
        k = 2; /* one being read, one coming: a fast link still overlaps the two */
    uint64_t cap = ((uint64_t)k + 2) * seg;
    if (cap > rd->window_max)
        cap = rd->window_max;
    if (rd->window > cap)
        rd->window = cap;
    /* the window counts from the start of the segment being read, so that what it holds
     * (that segment's bytes behind pos too) stays within the window */
    uint64_t base = pos;
    for (struct seg *s = rd->window_segs; s; s = s->next)
        if (s->end > pos) {
            if (s->start < base)
                base = s->start;
            break;
        }
    uint64_t target = base + rd->window;
    if (target > rd->tail_start)
        target = rd->tail_start;
    uint64_t f = window_end(rd);
    if (f < pos)
        f = pos;
    uint32_t busy = 0;
    for (struct seg *s = rd->window_segs; s; s = s->next)
        if (s->end > pos && s->state != SEG_DONE && s->state != SEG_FAILED)
            busy++;
    uint32_t n = 0;
    uint64_t step = ramp_step(rd, f, seg, k); /* one size for this top-up's segments */
    while (f < target && busy < k) {
        uint64_t e = f + step < rd->tail_start ? f + step : rd->tail_start;
        if (e > base + cap && f > base)
            break; /* past the window's cap (never past window_max): it waits for the
                    * next top-up. Up to the cap a segment may run past the growing
                    * window, so that k are in flight while the window still doubles */
        struct seg *s = s3f__reader_seg_new(rd, f, e, NULL);
        if (!s)
            break; /* the pool is full: read-ahead is optional */
        insert_seg(rd, s);
        n += s3f__reader_seg_queue(rd, s);
        busy++;
        f = e;
    }
    if (f >= rd->tail_start && !rd->tail && rd->tail_start < rd->size && busy < k) {
        /* the read-ahead reached the cached tail: fetch it now, not when the reader gets
         * there (it would wait for a whole request then) */
        rd->tail = s3f__reader_seg_new(rd, rd->tail_start, rd->size, NULL);
        if (rd->tail)
            n += s3f__reader_seg_queue(rd, rd->tail);
    }
    if (n && rd->window < cap)
        rd->window = rd->window * 2 < cap ? rd->window * 2 : cap;
    kick(rd, n);
}

/* Fill: random reads of an object no larger than fill_max fetch all of it (but the tail,
 * which has its own segment) in the background, as segments of at most 4 MiB queued from the
 * one holding pos to the end, then from the start; they stay until the reader is closed
 * or the pool asks for them back (reader_reclaim). Reads are served from what has arrived
 * (read_at). Chunks come from the pool, try only: what does not fit is not filled, and
 * reads there fetch what they need. Lock held. */
static void fill_start(struct s3f_reader *rd, uint64_t pos) {
    S3F_ASSERT_HELD(&rd->lock);
    rd->filling = true;
    uint64_t step = rd->part_size < (4u << 20) ? rd->part_size : (4u << 20);
    uint64_t first = pos / step * step;
    uint32_t n = 0;
    bool full = false;
    for (int pass = 0; pass < 2 && !full; pass++) {
        uint64_t to = pass ? first : rd->tail_start;
        for (uint64_t f = pass ? 0 : first; f < to;) {
            struct seg *s = find_seg(rd, f);
            if (s) {
                f = s->end;
                continue;
            }
            uint64_t limit = next_start(rd, f);
            uint64_t e = (f / step + 1) * step;
            if (e > limit)
                e = limit;
            if (e > to)
                e = to;
            if (!(s = s3f__reader_seg_new(rd, f, e, NULL))) {
                full = true;
                break;
            }
            insert_seg(rd, s);
            n += s3f__reader_seg_queue(rd, s);
            f = e;
        }
    }
    if (!full && !rd->tail && rd->tail_start < rd->size &&
        (rd->tail = s3f__reader_seg_new(rd, rd->tail_start, rd->size, NULL)))
        n += s3f__reader_seg_queue(rd, rd->tail);
    kick(rd, n);
}

/* Whether this object may be filled: no larger than fill_max, and no more than half of
 * what the pool has free (so that many handles reading at random share the pool: each
 * later fill finds less free, and the reads of the others still find room). */
static bool fill_fits(struct s3f_reader *rd) {
    if (!rd->fill_max || rd->size > rd->fill_max)
        return false;
    struct s3f__pool_stats ps;
    s3f__pool_stats(&rd->x->pool, &ps);
    uint64_t free_bytes = (uint64_t)(ps.max_chunks - ps.in_use) * ps.chunk_size;
    return rd->size <= free_bytes / 2;
}

static void unlink_seg(struct s3f_reader *rd, struct seg *s) {
    if (s == rd->tail) {
        rd->tail = NULL;
        return;
    }
    struct seg **pp = &rd->window_segs;
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp)
        *pp = s->next;
}

static enum s3f_status read_at(struct s3f_reader *rd, char *buf, size_t len, uint64_t pos,
                               size_t *n_read, struct s3f_error *err) {
    size_t out = 0;
    enum s3f_status st = S3F_OK;
    s3f_error_clear(err);
    pthread_mutex_lock(&rd->lock);
    rd->active++;
    /* sequential: where the last read ended, or a long read a little past it (a zip's
     * records, as torch.load reads them: each read of a record's data skips the rest of
     * its local header, its name and padding, tens of bytes; a small read there, as a
     * meta-device load's of the header's extra field, is not a stream) */
    bool sequential = pos == rd->seq_next ||
                      (pos > rd->seq_next && pos - rd->seq_next <= SEQ_GAP && len >= SEQ_LEN);
    /* ... or a long read in the stream's window, or a little behind its front: the kernel
     * sends the read-ahead of one file as several requests at once (FUSE's async reads),
     * which may reach the reader in any order */
    bool in_stream = !sequential && !rd->filling && rd->window_segs && len >= SEQ_LEN &&
                     pos + STREAM_BEHIND >= rd->seq_next && pos < window_end(rd);
    if (in_stream && pos < rd->seq_next && rd->seq_next - pos > rd->behind)
        rd->behind = rd->seq_next - pos; /* keep this much behind the front from now on */
    sequential = sequential || in_stream;
    /* a stream confirmed (a second long sequential read in a row, or a long first read at
     * the start, as the kernel's read-ahead of a file read from its start; not through the
     * block cache, whose misses may be the only blocks it lacks): its read-ahead opens to
     * 16 MiB at once (prefetch trims it to what the link needs), then doubles, instead of
     * doubling from 1 MiB with a first-byte wait at each step. Not wider: 32 readers of
     * 8 MiB each would hold and fetch far more than they read. Also before the client
     * has measured its link (a fresh mount's first read): the window goes out split over
     * the requests it may have in flight (ramp_step), 1 MiB segments at first, so that
     * they fill the link in parallel and measure it (part-sized segments kept 2 of 14
     * slow connections busy, tests/integration/test_link_fill.py) */
    if (sequential && len >= SEQ_LEN && !rd->filling) {
        if ((++rd->streak >= 2 || (pos == 0 && !rd->cobj)) && rd->window < STREAM_OPEN)
            rd->window = STREAM_OPEN < rd->window_max ? STREAM_OPEN : rd->window_max;
    } else if (!sequential) {
        rd->streak = 0;
    }
    while (out < len && pos < rd->size) {
        uint64_t want = len - out < rd->size - pos ? len - out : rd->size - pos;
        struct seg *s;
        if (pos >= rd->tail_start) {
            if (!rd->tail) {
                rd->tail = s3f__reader_seg_new(rd, rd->tail_start, rd->size, NULL);
                if (!rd->tail) { /* pool full: read what is asked for, uncached */
                    if ((st = read_direct(rd, &pos, pos + want, buf, &out, err)))
                        break;
                    continue;
                }
                kick(rd, s3f__reader_seg_queue(rd, rd->tail));
            }
            s = rd->tail;
        } else {
            s = find_seg(rd, pos);
        }
        if (!s && !rd->filling) {
            /* a miss: merge with the window when just past it, else it is a jump */
            uint64_t wend = window_end(rd);
            bool merge = rd->window_segs && pos >= wend && pos - wend <= MERGE_GAP;
            if (!merge && !sequential) {
                s3f__reader_drop_window(rd, NULL, 0);
                rd->window = WINDOW_MIN;
                /* a jump near the last read (the two first reads of a stream started
                 * mid-object, reaching the reader in the other order) is no sign of
                 * random reads */
                uint64_t d = pos > rd->seq_next ? pos - rd->seq_next : rd->seq_next - pos;
                if (d > STREAM_BEHIND && ++rd->jumps >= FILL_JUMPS && fill_fits(rd)) {
                    fill_start(rd, pos);
                    s = find_seg(rd, pos);
                }
            }
        }
        if (s && rd->filling && s != rd->tail && s->state != SEG_DONE &&
            s->state != SEG_FAILED && (s->state == SEG_QUEUED || pos - s->start > s->filled + FILL_WAIT)) {
            /* its fill segment is not there yet: fetch what this read needs of it */
            uint64_t need_end = pos + want < s->end ? pos + want : s->end;
            if ((st = read_direct(rd, &pos, need_end, buf, &out, err)))
                break;
            continue;
        }
        if (!s) {
            uint64_t wend = window_end(rd);
            bool merge = !rd->filling && rd->window_segs && pos >= wend &&
                         pos - wend <= MERGE_GAP;
            uint64_t limit = next_start(rd, pos);
            uint64_t need_end = pos + want < limit ? pos + want : limit;
            /* a large miss goes straight to the caller, but for a sequential read that
             * the window holds (the mount's 1 MiB reads of a stream): it starts the
             * window's segments with its own, instead of waiting for its bytes first */
            bool windowed = sequential && rd->window_max && need_end - pos <= rd->window;
            if ((need_end - pos >= DIRECT_MIN && !windowed) || rd->filling) {
                if ((st = read_direct(rd, &pos, need_end, buf, &out, err)))
                    break;
                continue;
            }
            uint64_t f = merge ? wend : pos;
            uint64_t pseg;
            uint32_t pk;
            plan_segments(rd, &pseg, &pk);
            uint64_t step = ramp_step(rd, f, pseg, pk < 2 ? 2 : pk);
            if (!merge && !sequential && rd->jumps >= FILL_JUMPS)
                /* random (a second jump): about what it needs, no read-ahead. A first jump
                 * may start a stream (a reader of a shard: its first request is short
                 * where the page cache holds the pages before it), which needs the step */
                step = (need_end - pos + RANDOM_ROUND - 1) / RANDOM_ROUND * RANDOM_ROUND;
            if (step < RANDOM_MIN)
                step = RANDOM_MIN;
            uint64_t e = f + step;
            if (e < need_end)
                e = need_end;
            if (e > limit)
                e = limit;
            s = s3f__reader_seg_new(rd, f, e, NULL);
            if (!s) {
                if ((st = read_direct(rd, &pos, need_end, buf, &out, err)))
                    break;
                continue;
            }
            insert_seg(rd, s);
            kick(rd, s3f__reader_seg_queue(rd, s));
            /* a sequential read's read-ahead goes out now, behind this segment, not after
             * the read got its bytes: the next read's segment then has its first byte
             * (one round trip) by the time it comes, from the stream's first read on */
            if (sequential)
                prefetch(rd, pos);
        }
        while (s->state != SEG_FAILED && s->filled <= pos - s->start)
            pthread_cond_wait(&rd->cond, &rd->lock);
        if (s->state == SEG_FAILED) {
            unlink_seg(rd, s);
            if (rd->filling && s != rd->tail) {
                s3f__reader_seg_drop(rd, s); /* a fill's: this read fetches what it needs (above) */
                continue;
            }
            st = seg_error(rd, s, err);
            s3f__reader_seg_drop(rd, s);
            break;
        }
        uint64_t avail = s->start + s->filled - pos;
        size_t n = (size_t)(want < avail ? want : avail);
        pthread_mutex_unlock(&rd->lock);
        seg_copy(rd, s, pos, buf + out, n);
        pthread_mutex_lock(&rd->lock);
        pos += n;
        out += n;
        if (rd->filling || s == rd->tail)
            continue; /* a fill's segments stay; a read of the tail (a zip's directory)
                       * passes no window segment: they stay for the reads that follow */
        /* segments read past are done with (those a read served out of order may still
         * need, rd->behind, a little later) */
        s3f__reader_drop_window(rd, ends_before, pos > rd->behind ? pos - rd->behind : 0);
        /* a long sequential read tops the read-ahead up as it consumes it, so that the
         * requests past its end are in flight before it returns */
        if (sequential && out < len)
            prefetch(rd, pos);
    }
    if (st == S3F_OK && !rd->filling) {
        if (sequential || pos == rd->seq_next)
            prefetch(rd, pos);
        if (!in_stream || pos > rd->seq_next)
            rd->seq_next = pos;
    }
    rd->active--;
    rd->last_read_ns = s3f__now_ns();
    pthread_mutex_unlock(&rd->lock);
    *n_read = out;
    return st;
}

void s3f__reader_sequential(struct s3f_reader *rd) {
    pthread_mutex_lock(&rd->lock);
    if (!rd->window_segs && rd->window_max) {
        rd->window = rd->window_max; /* prefetch trims it to what the link needs */
        prefetch(rd, 0);
        rd->seq_next = 0;
    }
    pthread_mutex_unlock(&rd->lock);
}

/* ---- the public calls ---------------------------------------------------------------- */

enum s3f_status s3f_reader_open(struct s3f_client *c, const char *bucket, const char *key,
                                const struct s3f_reader_options *opts, struct s3f_reader **out,
                                struct s3f_error *err) {
    s3f_error_clear(err);
    static const struct s3f_reader_options defaults;
    if (!opts)
        opts = &defaults;
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_reader_open", NULL,
                              "out is NULL");
    *out = NULL;
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_reader_open", NULL,
                              "client is NULL");
    enum s3f_status st = s3f__op_check_args("HeadObject", bucket, key, true, err);
    if (st)
        return st;
    struct s3f__xfer_shared *x;
    if ((st = s3f__xfer_shared_get(c, &x, err)))
        return st;
    if (opts->known && (!opts->known_etag || !opts->known_etag[0]))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_reader_open", NULL,
                              "known needs known_etag: without it nothing pins the object");
    struct s3f__op op;
    memset(&op, 0, sizeof(op));
    if (!opts->known) {
        st = s3f__op_get(&op, true, bucket, key, opts->version_id, opts->if_match, false, err);
        if (st == S3F_OK)
            st = s3f__s3_execute(c, &op.r, err);
        if (st) {
            s3f__op_cleanup(&op);
            return st;
        }
    } else {
        op.info.size = opts->known_size;
        s3f__strlcpy(op.info.etag, opts->known_etag, sizeof(op.info.etag));
    }
    struct s3f_reader *rd = calloc(1, sizeof(*rd));
    if (!rd) {
        if (!opts->known)
            s3f__op_cleanup(&op);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_reader_open", NULL, "out of memory");
    }
    rd->c = c;
    rd->x = x;
    rd->info = op.info;
    if (!opts->known)
        s3f__op_cleanup(&op);
    rd->size = rd->info.size;
    rd->bucket = s3f__strdup(bucket);
    rd->key = s3f__strdup(key);
    rd->version_id = opts->version_id ? s3f__strdup(opts->version_id) : NULL;
    const char *etag = opts->if_match ? opts->if_match : rd->info.etag;
    rd->etag = etag[0] ? s3f__strdup(etag) : NULL;
    pthread_mutex_init(&rd->lock, NULL);
    pthread_cond_init(&rd->cond, NULL);
    rd->entry.start = s3f__reader_start_seg;
    rd->lender.reclaim = reader_reclaim;
    if (!rd->bucket || !rd->key || (opts->version_id && !rd->version_id) ||
        (etag[0] && !rd->etag)) {
        s3f_reader_close(rd);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_reader_open", NULL, "out of memory");
    }
    s3f__s3_resource(rd->resource, sizeof(rd->resource), bucket, key);
    rd->part_size = x->part_size;
    uint64_t quarter = x->memory_limit / 4, half = x->memory_limit / 2;
    /* the window itself follows the bandwidth-delay product (prefetch); this is its cap */
    rd->window_max = opts->readahead_max_bytes ? opts->readahead_max_bytes : half;
    if (rd->window_max > half)
        rd->window_max = half;
    rd->window = WINDOW_MIN < rd->window_max ? WINDOW_MIN : rd->window_max;
    rd->fill_max = opts->fill_max_bytes < half ? opts->fill_max_bytes : half;
    uint64_t tail = opts->tail_bytes == UINT64_MAX ? 0
                    : opts->tail_bytes               ? opts->tail_bytes
                                                     : TAIL_DEFAULT;
    if (tail > quarter)
        tail = quarter;
    rd->tail_start = rd->size > tail ? rd->size - tail : 0;
    if (tail == 0)
        rd->tail_start = rd->size;
    /* without memory for it, no cache; the shared cache alone only for the objects it
     * serves (the others read as without a cache, not in blocks) */
    if ((x->cache || s3f__xz_serves(x->xz, rd->size)) && rd->etag) {
        rd->cobj = malloc(sizeof(*rd->cobj));
        if (rd->cobj && s3f__cache_object_init(rd->cobj, x->cache, bucket, key, rd->etag,
                                               rd->size)) {
            free(rd->cobj);
            rd->cobj = NULL;
        } else if (rd->cobj && !x->cache) {
            rd->cobj->block_bytes = s3f__xz_block_bytes(x->xz); /* cache_block_bytes */
        }
    }
    s3f__pool_lender_add(&x->pool, &rd->lender);
    *out = rd;
    return S3F_OK;
}

/* The block cache's source: read_at, all of [offset, offset+len) or an error. */
static enum s3f_status cache_fetch(void *ud, void *dst, size_t len, uint64_t offset,
                                   struct s3f_error *err) {
    struct s3f_reader *rd = ud;
    size_t n = 0;
    enum s3f_status st = read_at(rd, dst, len, offset, &n, err);
    if (st == S3F_OK && n != len)
        st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, "read", rd->resource,
                            "%zu of %zu bytes read", n, len);
    return st;
}

enum s3f_status s3f_reader_pread(struct s3f_reader *r, void *buf, size_t len, uint64_t offset,
                                 size_t *n_read, struct s3f_error *err) {
    s3f_error_clear(err);
    size_t dummy;
    if (!n_read)
        n_read = &dummy;
    *n_read = 0;
    if (!r)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "read", NULL, "reader is NULL");
    if (len && !buf)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "read", NULL, "buf is NULL");
    if (r->cobj && r->x->xz) { /* local cache, then the shared cache, then the source */
        struct s3f__xz_source src = {r->x->xz, r->cobj, cache_fetch, r};
        return s3f__cache_pread(r->cobj, buf, len, offset, s3f__xz_fetch, &src, n_read, err);
    }
    if (r->cobj)
        return s3f__cache_pread(r->cobj, buf, len, offset, cache_fetch, r, n_read, err);
    return read_at(r, buf, len, offset, n_read, err);
}

enum s3f_status s3f_reader_read(struct s3f_reader *r, void *buf, size_t len, size_t *n_read,
                                struct s3f_error *err) {
    s3f_error_clear(err);
    size_t n = 0;
    enum s3f_status st = s3f_reader_pread(r, buf, len, r ? r->pos : 0, &n, err);
    if (r)
        r->pos += n;
    if (n_read)
        *n_read = n;
    return st;
}

enum s3f_status s3f_reader_seek(struct s3f_reader *r, int64_t offset, int whence,
                                uint64_t *new_position, struct s3f_error *err) {
    s3f_error_clear(err);
    if (!r)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "seek", NULL, "reader is NULL");
    int64_t base;
    switch (whence) {
    case 0: base = 0; break;
    case 1: base = (int64_t)r->pos; break;
    case 2: base = (int64_t)r->size; break;
    default:
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "seek", NULL,
                              "whence must be 0, 1 or 2, got %d", whence);
    }
    if ((offset < 0 && base + offset < 0) || (offset > 0 && base > INT64_MAX - offset))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "seek", NULL,
                              "position out of range");
    r->pos = (uint64_t)(base + offset);
    if (new_position)
        *new_position = r->pos;
    return S3F_OK;
}

uint64_t s3f_reader_tell(const struct s3f_reader *r) {
    return r ? r->pos : 0;
}

uint64_t s3f_reader_size(const struct s3f_reader *r) {
    return r ? r->size : 0;
}

const struct s3f_object_info *s3f_reader_info(const struct s3f_reader *r) {
    return r ? &r->info : NULL;
}

void s3f_reader_close(struct s3f_reader *r) {
    if (!r)
        return;
    s3f__pool_lender_remove(&r->x->pool, &r->lender); /* waits for a reclaim of it */
    pthread_mutex_lock(&r->lock);
    s3f__reader_drop_window(r, NULL, 0);
    if (r->tail) {
        s3f__reader_seg_drop(r, r->tail);
        r->tail = NULL;
    }
    while (r->outstanding || r->callbacks)
        pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    s3f__sched_detach(&r->x->sched, &r->entry);
    free(r->bucket);
    free(r->key);
    free(r->version_id);
    free(r->etag);
    if (r->cobj)
        s3f__cache_object_cleanup(r->cobj);
    free(r->cobj);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
