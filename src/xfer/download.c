/* Downloads to memory regions or to a file: a first ranged GET of one part learns the size
 * and the ETag, then the other parts go in parallel with If-Match, each written straight
 * to its place by the response callback (memcpy, or pwrite for files). With verification,
 * a HEAD beside the parts fetches the whole-object checksum, compared at the end with the
 * combination of the parts' checksums computed as the bytes arrived.
 *
 * A file is not written by the I/O threads: they copy each response into 1 MiB pool chunks
 * and queue the full ones, and the caller's thread, which only waits otherwise, writes them
 * with pwrite. Buffered writes to one file take its inode lock; two I/O threads writing
 * 16-256 KiB pieces spun on that lock (rwsem_spin_on_owner, a third of the cycles) and read
 * no socket meanwhile. When the pool has no chunk to spare, or WQ_MAX chunks already wait
 * (the caller's thread is behind: the file system is the bottleneck, and memory need not
 * grow), the I/O thread writes itself. 4 GiB from the sink into tmpfs: 2.6 s and 2.6 CPU s
 * against 2.8 s and 4.0 CPU s writing from the I/O threads.
 *
 * Threads and locks as in upload.c: the caller's thread sets up and waits, I/O threads run
 * the requests; fields under "guarded by lock" need d->lock; the scheduler and request
 * submission are used with no lock held.
 *
 * This file owns the session (states, the part plan, the requests, the caller's wait) and
 * the memory destination; download_file.c the file destination, download_alloc.c the
 * buffer the download allocates (see download_internal.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/assert.h"
#include "cache/cache.h"
#include "xfer/download_internal.h"

static const char *const dl_state_names[] = {"FIRST", "PARTS", "DONE", "FAILED"};

/* FIRST -> PARTS (the size is known) -> DONE; FIRST or PARTS -> FAILED. Staying in a
 * state is always allowed. */
static const unsigned dl_allowed[] = {
    [DL_FIRST] = 1u << DL_PARTS | 1u << DL_FAILED,
    [DL_PARTS] = 1u << DL_DONE | 1u << DL_FAILED,
    [DL_DONE] = 0,
    [DL_FAILED] = 0,
};

/* Every change of the state goes through here (lock held): checked against dl_allowed and
 * traced at S3FLASH_LOG=trace with the line that made it. */
#define set_state(d, s) set_state_at(d, s, __LINE__)
static void set_state_at(struct download *d, enum dl_state s, int line) {
    S3F_ASSERT_HELD(&d->lock);
    S3F_ASSERT(d->state == s || (dl_allowed[d->state] & (1u << s)));
    if (d->state != s)
        s3f__log(&d->c->logger, S3F_LOG_TRACE, "download %s: %s -> %s (download.c:%d)",
                 d->resource, dl_state_names[d->state], dl_state_names[s], line);
    d->state = s;
}

/* First failure (lock held). */
static void fail(struct download *d, enum s3f_status st, const struct s3f_error *e) {
    S3F_ASSERT_HELD(&d->lock);
    if (d->status)
        return;
    d->status = st ? st : S3F_ERR_INTERNAL;
    if (e)
        d->err = *e;
    else
        s3f_error_clear(&d->err);
    d->err.status = d->status;
    if (!d->err.operation[0])
        s3f__strlcpy(d->err.operation, "download", sizeof(d->err.operation));
    if (!d->err.resource[0])
        s3f__strlcpy(d->err.resource, d->resource, sizeof(d->err.resource));
    if (d->status == S3F_ERR_PRECONDITION_FAILED && !d->user_if_match &&
        d->err.http_status == 412) /* else the executor's message says what differed */
        s3f__strlcpy(d->err.message, "the object changed during the download (ETag differs)",
                     sizeof(d->err.message));
    s3f__log(&d->c->logger, S3F_LOG_DEBUG, "download %s failed: %s %s", d->resource,
             s3f_status_name(d->status), d->err.message);
    s3f__sched_cancel(&d->x->sched, &d->entry);
}

/* Compare the combined checksum with the server's (lock held, all parts done). */
static void verify(struct download *d) {
    S3F_ASSERT_HELD(&d->lock);
    if (!d->expected[0] || strchr(d->expected, '-'))
        return; /* no whole-object checksum of our algorithm to compare with */
    struct s3f__checksum full = d->parts[0].ck;
    for (size_t i = 1; i < d->n_parts; i++)
        s3f__checksum_combine(&full, &d->parts[i].ck, d->parts[i].size);
    char got[S3F__CHECKSUM_B64_MAX];
    s3f__checksum_b64(&full, got);
    if (strcmp(got, d->expected) != 0) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_CHECKSUM, "download", d->resource,
                       "%s of the downloaded bytes is %s, the server's is %s",
                       s3f__checksum_algorithm_name(d->alg), got, d->expected);
        fail(d, S3F_ERR_CHECKSUM, &e);
        return;
    }
    s3f__xfer_report_checksum(&d->info, &full);
    s3f__log(&d->c->logger, S3F_LOG_DEBUG, "download %s: %s %s verified", d->resource,
             s3f__checksum_algorithm_name(d->alg), got);
}

/* Settle the state once nothing is in flight (lock held). */
static void advance(struct download *d) {
    S3F_ASSERT_HELD(&d->lock);
    if (d->state == DL_DONE || d->state == DL_FAILED)
        return;
    if (d->status) {
        if (d->outstanding == 0)
            set_state(d, DL_FAILED);
        return;
    }
    if (d->state == DL_PARTS && d->parts_done == d->n_parts && !d->head_running) {
        verify(d);
        set_state(d, d->status ? DL_FAILED : DL_DONE);
    }
}

/* Call the progress callback if parts completed since the last call. Only on the caller's
 * thread (s3f__download_run), never on an I/O thread: the I/O threads only count bytes_done
 * and wake the caller, so a callback that blocks delays no request. */
static void report_progress(struct download *d) {
    if (!d->progress)
        return;
    pthread_mutex_lock(&d->progress_lock);
    pthread_mutex_lock(&d->lock);
    uint64_t done = d->bytes_done, total = d->state == DL_FIRST ? UINT64_MAX : d->size;
    bool moved = d->parts_done != d->progress_parts;
    d->progress_parts = d->parts_done;
    pthread_mutex_unlock(&d->lock);
    if (moved)
        d->progress(d->progress_ud, done, total);
    pthread_mutex_unlock(&d->progress_lock);
}

static void callback_exit(struct download *d) {
    pthread_mutex_lock(&d->lock);
    d->callbacks--;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

/* The first response told the object's size and ETag (lock held): pin them and set the
 * bytes to download (a range must lie within the object). false: failed. */
static bool take_size(struct download *d, uint64_t total, const char *etag) {
    S3F_ASSERT_HELD(&d->lock);
    d->object_size = total;
    s3f__strlcpy(d->etag, d->user_if_match ? d->user_if_match : etag, sizeof(d->etag));
    if (!d->ranged) {
        d->size = total;
        return true;
    }
    if (d->range_offset > total ||
        (d->range_bytes && d->range_bytes > total - d->range_offset)) {
        struct s3f_error e;
        s3f_error_clear(&e);
        char last[24] = "";
        if (d->range_bytes)
            snprintf(last, sizeof(last), "%" PRIu64, d->range_offset + d->range_bytes - 1);
        s3f__error_set(&e, S3F_ERR_INVALID_RANGE, "download", d->resource,
                       "bytes %" PRIu64 "-%s asked, the object has %" PRIu64 " bytes",
                       d->range_offset, last, total);
        fail(d, S3F_ERR_INVALID_RANGE, &e);
        return false;
    }
    d->size = d->range_bytes ? d->range_bytes : total - d->range_offset;
    return true;
}

/* The size and the ETag are known (d->size, d->etag; lock held): check them against the
 * destination, lay out the parts (part 0 is the first request, still in flight or done)
 * and decide the checksum HEAD. *queue: parts to hand to the scheduler; *send_head: the
 * HEAD to submit (counted in outstanding already). Both with no lock held. */
static void plan_parts(struct download *d, uint32_t *queue, bool *send_head) {
    S3F_ASSERT_HELD(&d->lock);
    if (d->dst == DST_MEMORY && d->size > d->capacity) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_INVALID_ARGUMENT, "download", d->resource,
                       "the %s has %" PRIu64 " bytes, more than the %" PRIu64
                       " bytes of the buffer",
                       d->ranged ? "range" : "object", d->size, d->capacity);
        fail(d, S3F_ERR_INVALID_ARGUMENT, &e);
        return;
    }
    if (d->dst == DST_FILE && ftruncate(d->fd, (off_t)d->size) != 0) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_IO, "download", d->resource, "cannot size the file: %s",
                       strerror(errno));
        fail(d, S3F_ERR_IO, &e);
        return;
    }
    uint32_t n = s3f__plan_part_count(d->size, d->part_size);
    d->parts = calloc(n, sizeof(*d->parts));
    if (!d->parts) {
        fail(d, S3F_ERR_NO_MEMORY, NULL);
        return;
    }
    d->n_parts = n;
    for (uint32_t i = 0; i < n; i++) {
        d->parts[i].offset = (uint64_t)i * d->part_size;
        d->parts[i].size = i + 1 < n ? d->part_size : d->size - (uint64_t)i * d->part_size;
        s3f__checksum_init(&d->parts[i].ck, d->alg);
    }
    d->parts[0].state = DP_SENDING;
    d->parts_done = 0;
    d->next_part = 1;
    *queue = n - 1;
    set_state(d, DL_PARTS);
    s3f__log(&d->c->logger, S3F_LOG_DEBUG,
             "download %s: %" PRIu64 " bytes, %u part%s of %" PRIu64 ", ETag %s", d->resource,
             d->size, n, n == 1 ? "" : "s", d->part_size, d->etag);
    bool want = d->alg != S3F_CHECKSUM_NONE && (d->verify > 0 || (d->verify == 0 && n > 1));
    if (want && !d->head_running) {
        struct s3f_error e;
        s3f_error_clear(&e);
        if (s3f__op_get(&d->head, true, d->bucket, d->key, d->version_id,
                        d->etag[0] ? d->etag : NULL, true, &e) == S3F_OK) {
            d->head_running = true;
            d->outstanding++;
            *send_head = true;
        }
    }
}

/* The first request's first body bytes (I/O thread, in the sink): its head tells the
 * object's size and ETag, so the other parts can start now instead of after the whole
 * first part (at tens of MB/s per connection, a part takes as long as all the others
 * together on a wide link). The caller's thread queues them (s3f__download_run). */
static void first_head(struct dreq *q) {
    struct download *d = q->d;
    q->head_seen = true;
    struct s3f__s3_response_head h;
    s3f__s3_response_head(&q->op.r, &h);
    uint64_t total;
    if (h.has_total_size)
        total = h.total_size;
    else if (h.has_content_length)
        total = h.content_length; /* a 200: the whole object */
    else
        return; /* planned when the request completes */
    pthread_mutex_lock(&d->lock);
    if (d->state == DL_FIRST && !d->status && take_size(d, total, h.etag)) {
        uint32_t queue = 0;
        bool send_head = false;
        plan_parts(d, &queue, &send_head);
        d->early_queue += queue;
        d->early_head = d->early_head || send_head;
        pthread_cond_broadcast(&d->cond);
    }
    pthread_mutex_unlock(&d->lock);
}

static int sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct dreq *q = ud;
    struct download *d = q->d;
    s3f__checksum_update(&q->ck, data, len);
    q->bytes += len;
    s3f__xfer_timing_body(&q->t, len);
    if (q->part == SIZE_MAX && !q->head_seen)
        first_head(q);
    offset -= d->range_offset; /* the executor hands over nothing before the range asked */
    if (d->dst == DST_FILE)
        return s3f__download_sink_file(q, data, len, offset);
    if (offset + len > d->capacity) {
        q->too_small = true;
        if (offset >= d->capacity)
            return 0;
        len = (size_t)(d->capacity - offset);
    }
    const char *p = data;
    for (size_t i = s3f__xfer_iov_find(d->iov_end, d->n_iov, offset); i < d->n_iov && len; i++) {
        if (!d->iov[i].len)
            continue;
        uint64_t in = offset - (d->iov_end[i] - d->iov[i].len);
        size_t n = (size_t)(d->iov[i].len - in) < len ? (size_t)(d->iov[i].len - in) : len;
        memcpy((char *)d->iov[i].base + in, p, n);
        p += n;
        offset += n;
        len -= n;
    }
    return 0;
}

/* ---- requests ------------------------------------------------------------------------- */

static void head_done(struct s3f__s3_request *r, enum s3f_status st, void *ud);

static void part_finished(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct dreq *q = ud;
    struct download *d = q->d;
    (void)r;
    uint32_t queue = 0;
    bool send_head = false;
    pthread_mutex_lock(&d->lock);
    d->callbacks++;
    d->outstanding--;
    s3f__download_stage_queue_locked(d, q);
    if (st == S3F_ERR_ABORTED && q->io_errno) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_IO, "download", d->resource, "cannot write %s: %s",
                       d->path ? d->path : "the file", strerror(q->io_errno));
        fail(d, S3F_ERR_IO, &e);
    } else if (q->part == SIZE_MAX && st == S3F_ERR_INVALID_RANGE && !d->no_range &&
               !d->ranged && !d->status) {
        /* S3 answers 416 to a range of an empty object: ask again without one */
        d->no_range = true;
        d->first_sent = false;
        queue = 1;
    } else if (st) {
        fail(d, st, &q->err);
    } else if (q->part == SIZE_MAX) {
        /* the first response: size, ETag and the plan, unless its head gave them already */
        d->info = q->op.info;
        if (d->state == DL_FIRST && take_size(d, q->op.info.size, q->op.info.etag))
            plan_parts(d, &queue, &send_head);
        uint64_t first = d->size < d->part_size ? d->size : d->part_size;
        if (d->status || d->state != DL_PARTS) {
            /* failed while planning */
        } else if (q->bytes != first) {
            struct s3f_error e;
            s3f_error_clear(&e);
            s3f__error_set(&e, S3F_ERR_BAD_RESPONSE, "download", d->resource,
                           "the first response had %" PRIu64 " bytes, %" PRIu64 " expected",
                           q->bytes, first);
            fail(d, S3F_ERR_BAD_RESPONSE, &e);
        } else {
            d->parts[0].ck = q->ck;
            d->parts[0].state = DP_DONE;
            d->parts_done++;
            d->bytes_done += q->bytes;
        }
    } else if (q->bytes != d->parts[q->part].size) {
        /* the executor checks every response; this is the last guard against a hole */
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_BAD_RESPONSE, "download", d->resource,
                       "part %zu at offset %" PRIu64 " got %" PRIu64 " bytes, %" PRIu64
                       " expected",
                       q->part, d->parts[q->part].offset, q->bytes, d->parts[q->part].size);
        fail(d, S3F_ERR_BAD_RESPONSE, &e);
    } else {
        struct dpart *p = &d->parts[q->part];
        p->ck = q->ck;
        p->state = DP_DONE;
        d->parts_done++;
        d->bytes_done += q->bytes;
    }
    advance(d);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    if (st == S3F_OK)
        s3f__xfer_observe_timing(d->x, &q->t);
    s3f__op_cleanup(&q->op);
    free(q);
    if (send_head)
        s3f__s3_submit(d->c, &d->head.r, &d->head_err, head_done, d);
    if (queue)
        s3f__sched_add(&d->x->sched, &d->entry, queue);
    s3f__sched_done(&d->x->sched);
    callback_exit(d); /* the caller's thread reports the progress (report_progress) */
}

static void head_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct download *d = ud;
    (void)r;
    pthread_mutex_lock(&d->lock);
    d->callbacks++;
    d->outstanding--;
    d->head_running = false;
    if (st == S3F_OK) {
        size_t n;
        char *v = s3f__xfer_checksum_field(&d->head.info, d->alg, &n);
        if (v)
            s3f__strlcpy(d->expected, v, sizeof(d->expected));
        static const enum s3f_checksum_algorithm others[] = {
            S3F_CHECKSUM_CRC64NVME, S3F_CHECKSUM_CRC32C, S3F_CHECKSUM_CRC32};
        for (size_t i = 0; !d->expected[0] && i < sizeof(others) / sizeof(others[0]); i++) {
            char *o = s3f__xfer_checksum_field(&d->head.info, others[i], &n);
            if (others[i] != d->alg && o && o[0] && !strchr(o, '-')) {
                d->other_alg = others[i];
                s3f__strlcpy(d->other_expected, o, sizeof(d->other_expected));
                s3f__log(&d->c->logger, S3F_LOG_DEBUG,
                         "download %s: the server keeps %s, not %s: verified in a second pass",
                         d->resource, s3f__checksum_algorithm_name(others[i]),
                         s3f__checksum_algorithm_name(d->alg));
            }
        }
        if (!d->expected[0] && !d->other_alg)
            s3f__log(&d->c->logger, S3F_LOG_DEBUG,
                     "download %s: the server keeps no %s checksum, nothing to verify",
                     d->resource, s3f__checksum_algorithm_name(d->alg));
    } else if (st == S3F_ERR_PRECONDITION_FAILED) {
        fail(d, st, &d->head_err);
    } else {
        s3f__log(&d->c->logger, S3F_LOG_INFO,
                 "download %s: HEAD for the checksum failed (%s), not verified", d->resource,
                 s3f_status_name(st));
    }
    advance(d);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    callback_exit(d);
}

static bool start_get(struct s3f__sched_entry *e) {
    struct download *d = (struct download *)((char *)e - offsetof(struct download, entry));
    S3F_ASSERT_NOT_HELD(&d->lock);
    S3F_ASSERT_NOT_HELD(&d->x->sched.lock);
    pthread_mutex_lock(&d->lock);
    size_t part;
    if (d->status) {
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    if (d->state == DL_FIRST && !d->first_sent) {
        part = SIZE_MAX;
        d->first_sent = true;
    } else if (d->state == DL_PARTS && d->next_part < d->n_parts) {
        part = d->next_part++;
    } else {
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    struct dreq *q = calloc(1, sizeof(*q));
    enum s3f_status st = S3F_ERR_NO_MEMORY;
    if (q) {
        q->d = d;
        q->part = part;
        s3f__checksum_init(&q->ck, d->alg);
        const char *if_match = part == SIZE_MAX ? d->user_if_match : (d->etag[0] ? d->etag : NULL);
        st = s3f__op_get(&q->op, false, d->bucket, d->key, d->version_id, if_match, false,
                         &q->err);
    }
    if (st) {
        fail(d, st, q ? &q->err : NULL);
        if (q) {
            s3f__op_cleanup(&q->op);
            free(q);
        }
        advance(d);
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    struct s3f__s3_request *r = &q->op.r;
    r->sink = sink;
    r->sink_ud = q;
    if (part == SIZE_MAX) {
        uint64_t n = d->range_bytes && d->range_bytes < d->part_size ? d->range_bytes
                                                                      : d->part_size;
        r->has_range = !d->no_range;
        r->range_start = d->range_offset;
        r->range_end = d->range_offset + n - 1;
    } else {
        r->has_range = true;
        r->range_start = d->range_offset + d->parts[part].offset;
        r->range_end = r->range_start + d->parts[part].size - 1;
        r->has_object_size = true; /* pinned by the first response, as the ETag */
        r->object_size = d->object_size;
        d->parts[part].state = DP_SENDING;
    }
    d->outstanding++;
    pthread_mutex_unlock(&d->lock);
    q->t.start_ns = s3f__now_ns();
    s3f__s3_submit(d->c, r, &q->err, part_finished, q);
    return true;
}

/* ---- the calls ---------------------------------------------------------------------- */

enum s3f_status s3f__download_init(struct download *d, struct s3f_client *c,
                                   const char *bucket, const char *key,
                                   const struct s3f_download_options *opts,
                                   struct s3f_error *err) {
    memset(d, 0, sizeof(*d));
    d->fd = -1;
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL, "client is NULL");
    enum s3f_status st = s3f__op_check_args("download", bucket, key, true, err);
    if (st)
        return st;
    if (opts->range_bytes && opts->range_offset + opts->range_bytes < opts->range_offset)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL,
                              "range_offset + range_bytes overflows");
    struct s3f__xfer_shared *x;
    if ((st = s3f__xfer_shared_get(c, &x, err)))
        return st;
    d->c = c;
    d->x = x;
    d->bucket = bucket;
    d->key = key;
    d->version_id = opts->version_id;
    d->user_if_match = opts->if_match;
    s3f__s3_resource(d->resource, sizeof(d->resource), bucket, key);
    d->part_size = opts->part_size_bytes ? opts->part_size_bytes : x->part_size;
    if (d->part_size < MIN_RANGE)
        d->part_size = MIN_RANGE;
    d->verify = opts->verify_checksum;
    d->range_offset = opts->range_offset;
    d->range_bytes = opts->range_bytes;
    d->ranged = d->range_offset || d->range_bytes;
    if (d->ranged)
        d->verify = -1; /* the server's checksum is of the whole object */
    d->alg = x->checksum;
    d->progress = opts->progress;
    d->progress_ud = opts->progress_user_data;
    d->start_ns = s3f__now_ns();
    d->entry.start = start_get;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->progress_lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    return S3F_OK;
}

void s3f__download_cleanup(struct download *d) {
    if (!d->c)
        return;
    s3f__sched_detach(&d->x->sched, &d->entry);
    s3f__op_cleanup(&d->head);
    free(d->parts);
    free(d->iov_end);
    free(d->wq);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->progress_lock);
}

/* The whole-object checksum of another algorithm than the parts', computed over the
 * destination once everything is in place (caller's thread). */
static enum s3f_status verify_other(struct download *d, struct s3f_error *err) {
    struct s3f__checksum ck;
    s3f__checksum_init(&ck, d->other_alg);
    if (d->dst == DST_MEMORY) {
        uint64_t left = d->size;
        for (size_t i = 0; i < d->n_iov && left; i++) {
            size_t n = d->iov[i].len < left ? d->iov[i].len : (size_t)left;
            s3f__checksum_update(&ck, d->iov[i].base, n);
            left -= n;
        }
    } else {
        size_t bs = 1 << 20;
        char *buf = malloc(bs);
        if (!buf)
            return s3f__error_set(err, S3F_ERR_NO_MEMORY, "download", d->resource,
                                  "out of memory");
        for (uint64_t off = 0; off < d->size;) {
            size_t want = d->size - off < bs ? (size_t)(d->size - off) : bs;
            ssize_t n = pread(d->fd, buf, want, (off_t)off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                free(buf);
                return s3f__error_set(err, S3F_ERR_IO, "download", d->resource,
                                      "cannot read the file back to verify it: %s",
                                      n < 0 ? strerror(errno) : "it is shorter");
            }
            s3f__checksum_update(&ck, buf, (size_t)n);
            off += (uint64_t)n;
        }
        free(buf);
    }
    char got[S3F__CHECKSUM_B64_MAX];
    s3f__checksum_b64(&ck, got);
    if (strcmp(got, d->other_expected) != 0)
        return s3f__error_set(err, S3F_ERR_CHECKSUM, "download", d->resource,
                              "%s of the downloaded bytes is %s, the server's is %s",
                              s3f__checksum_algorithm_name(d->other_alg), got,
                              d->other_expected);
    s3f__xfer_report_checksum(&d->info, &ck);
    s3f__log(&d->c->logger, S3F_LOG_DEBUG, "download %s: %s %s verified", d->resource,
             s3f__checksum_algorithm_name(d->other_alg), got);
    return S3F_OK;
}

/* Run the download and wait for it. */
enum s3f_status s3f__download_run(struct download *d, struct s3f_object_info *info,
                                  struct s3f_error *err) {
    s3f__sched_add(&d->x->sched, &d->entry, 1);
    pthread_mutex_lock(&d->lock);
    for (;;) {
        if (d->early_queue || d->early_head) {
            uint32_t n = d->early_queue;
            bool head = d->early_head;
            d->early_queue = 0;
            d->early_head = false;
            if (head && d->status) { /* failed meanwhile: the HEAD is not needed */
                head = false;
                d->head_running = false;
                d->outstanding--;
                advance(d);
            }
            pthread_mutex_unlock(&d->lock);
            if (head)
                s3f__s3_submit(d->c, &d->head.r, &d->head_err, head_done, d);
            if (n)
                s3f__sched_add(&d->x->sched, &d->entry, n);
            pthread_mutex_lock(&d->lock);
            continue;
        }
        if (d->wq_n) {
            /* a file's chunk to write (after a failure: only to give back) */
            struct wchunk w = d->wq[d->wq_head];
            d->wq_head = (d->wq_head + 1) % d->wq_cap;
            __atomic_store_n(&d->wq_n, d->wq_n - 1, __ATOMIC_RELAXED);
            bool write = !d->status;
            pthread_mutex_unlock(&d->lock);
            int e = write ? s3f__download_pwrite_all(d->fd, w.buf, w.len, w.off) : 0;
            s3f__pool_release(&d->x->pool, 1, &w.buf);
            pthread_mutex_lock(&d->lock);
            if (e) {
                __atomic_store_n(&d->write_errno, e, __ATOMIC_RELAXED);
                struct s3f_error ferr;
                s3f_error_clear(&ferr);
                s3f__error_set(&ferr, S3F_ERR_IO, "download", d->resource,
                               "cannot write %s: %s", d->path ? d->path : "the file",
                               strerror(e));
                fail(d, S3F_ERR_IO, &ferr);
                advance(d);
            }
            continue;
        }
        if (d->progress && d->parts_done != d->progress_parts) {
            pthread_mutex_unlock(&d->lock);
            report_progress(d);
            pthread_mutex_lock(&d->lock);
            continue;
        }
        if ((d->state == DL_DONE || d->state == DL_FAILED) && d->outstanding == 0 &&
            d->callbacks == 0)
            break;
        pthread_cond_wait(&d->cond, &d->lock);
    }
    /* a write may fail after the last part arrived (state DONE): the status decides */
    enum s3f_status st = d->status ? d->status : d->state == DL_DONE ? S3F_OK : S3F_ERR_INTERNAL;
    pthread_mutex_unlock(&d->lock);
    if (st == S3F_OK && d->other_alg && (st = verify_other(d, &d->err)))
        d->status = st;
    if (info) {
        *info = d->info;
        info->size = d->size;
    }
    if (st) {
        if (err)
            *err = d->err;
        return st;
    }
    double s = (double)(s3f__now_ns() - d->start_ns) / 1e9;
    s3f__log(&d->c->logger, S3F_LOG_DEBUG,
             "download %s: %" PRIu64 " bytes in %zu part%s, %.3f s, %.1f MB/s", d->resource,
             d->size, d->n_parts, d->n_parts == 1 ? "" : "s", s,
             s > 0 ? (double)d->size / s / 1e6 : 0);
    return S3F_OK;
}

enum s3f_status s3f_download_iov(struct s3f_client *c, const char *bucket, const char *key,
                                 const struct s3f_iovec *iov, size_t n_iov,
                                 const struct s3f_download_options *opts,
                                 struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    static const struct s3f_download_options defaults;
    if (!opts)
        opts = &defaults;
    if (n_iov && !iov)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL, "iov is NULL");
    for (size_t i = 0; i < n_iov; i++)
        if (iov[i].len && !iov[i].base)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL,
                                  "region %zu has no base pointer", i);
    struct download d;
    enum s3f_status st = s3f__download_init(&d, c, bucket, key, opts, err);
    if (st) {
        s3f__download_cleanup(&d);
        return st;
    }
    d.dst = DST_MEMORY;
    d.iov = iov;
    d.n_iov = n_iov;
    d.iov_end = calloc(n_iov ? n_iov : 1, sizeof(*d.iov_end));
    if (!d.iov_end) {
        s3f__download_cleanup(&d);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "download", NULL, "out of memory");
    }
    for (size_t i = 0; i < n_iov; i++) {
        d.capacity += iov[i].len;
        d.iov_end[i] = d.capacity;
    }
    struct s3f_object_info cinfo; /* the block cache: served from it, or filled after */
    if (d.x->cache && !d.ranged && s3f__cache_serve_iov(&s3f__xfer_cache_origin, c, d.x->cache, bucket, key, opts->version_id,
                                           opts->if_match, iov, n_iov, info ? info : &cinfo)) {
        s3f__download_cleanup(&d);
        return S3F_OK;
    }
    st = s3f__download_run(&d, info, err);
    if (st == S3F_OK && d.x->cache && !d.ranged)
        s3f__cache_fill_iov(d.x->cache, bucket, key, d.etag, d.size, iov, n_iov);
    s3f__download_cleanup(&d);
    return st;
}

enum s3f_status s3f_download_buffer(struct s3f_client *c, const char *bucket, const char *key,
                                    void *buf, size_t buf_len,
                                    const struct s3f_download_options *opts,
                                    struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    if (buf_len && !buf)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "download", NULL, "buf is NULL");
    struct s3f_iovec one = {buf, buf_len};
    return s3f_download_iov(c, bucket, key, &one, buf_len ? 1 : 0, opts, info, err);
}
