/* Uploads: from memory regions, from a file, and the streaming writer, and server-side
 * copies (s3f_copy: parts are UploadPartCopy requests of ranges of the source), as one
 * state machine fed by one source adapter per kind (struct up_source, upload_internal.h).
 * docs/TRANSFER.md describes the states.
 *
 * Threads: the caller's thread prepares parts (checksums, or copies into pool chunks for the
 * writer) and waits; I/O threads run the requests and their completions. Everything under
 * "guarded by lock" below is touched only with u->lock held, except the writer's part being
 * filled (parts[cur] while FILLING), which only the writer's thread touches. Lock order:
 * u->lock, then the scheduler's or the pool's lock; s3f__sched_add/_done and request
 * submission happen with no lock held.
 *
 * This file is the session: states, the send queue, data requests and the life cycle;
 * upload_internal.h lists the other files of the upload. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/assert.h"
#include "xfer/upload_internal.h"

static const char *const part_state_names[] = {"FILLING", "PREPARED", "QUEUED", "SENDING",
                                               "DONE"};
static const char *const up_state_names[] = {"RUNNING", "VERIFYING", "COMPLETING", "HEADING", "ABORTING",
                                             "DONE", "FAILED"};

/* ---- state changes (traced) ----------------------------------------------------------- */

/* The transitions allowed from each state; staying in a state is always allowed. Any
 * state before the end may fail (ABORTING when an upload id exists, else FAILED). */
#define FAILS (1u << UP_ABORTING | 1u << UP_FAILED)
static const unsigned up_allowed[] = {
    [UP_RUNNING] = 1u << UP_VERIFYING | 1u << UP_COMPLETING | 1u << UP_DONE | FAILS,
    [UP_VERIFYING] = 1u << UP_RUNNING | FAILS,
    [UP_COMPLETING] = 1u << UP_HEADING | 1u << UP_RUNNING | 1u << UP_DONE | FAILS,
    [UP_HEADING] = 1u << UP_RUNNING | 1u << UP_DONE | FAILS,
    [UP_ABORTING] = 1u << UP_FAILED,
    [UP_DONE] = 0,
    [UP_FAILED] = 0,
};
#undef FAILS

/* A part is filled (the writer's) or planned, then PREPARED; queued, sent, DONE; a part
 * whose request failed, or that was queued when the upload failed, goes back to PREPARED. */
static const unsigned part_allowed[] = {
    [PART_FILLING] = 1u << PART_PREPARED,
    [PART_PREPARED] = 1u << PART_QUEUED,
    [PART_QUEUED] = 1u << PART_SENDING | 1u << PART_PREPARED,
    [PART_SENDING] = 1u << PART_DONE | 1u << PART_PREPARED,
    [PART_DONE] = 0,
};

void s3f__up_set_state_at(struct upload *u, enum up_state s, const char *file, int line) {
    S3F_ASSERT_HELD(&u->lock);
    S3F_ASSERT(u->state == s || (up_allowed[u->state] & (1u << s)));
    if (u->state != s)
        s3f__log(&u->c->logger, S3F_LOG_TRACE, "upload %s: %s -> %s (%s:%d)",
                 u->resource, up_state_names[u->state], up_state_names[s], file, line);
    u->state = s;
}

void s3f__up_part_set_state_at(struct upload *u, size_t i, enum part_state s, const char *file,
                               int line) {
    struct upart *p = &u->parts[i];
    S3F_ASSERT_HELD(&u->lock);
    S3F_ASSERT(p->state == s || (part_allowed[p->state] & (1u << s)));
    if (p->state != s && s3f__log_enabled(&u->c->logger, S3F_LOG_TRACE))
        s3f__log(&u->c->logger, S3F_LOG_TRACE, "upload %s part %zu: %s -> %s (%s:%d)",
                 u->resource, i + 1, part_state_names[p->state], part_state_names[s], file, line);
    p->state = s;
}

void s3f__up_release_chunks(struct upload *u, struct upart *p) {
    if (p->n_chunks)
        s3f__pool_release(&u->x->pool, p->n_chunks, p->chunks);
    p->n_chunks = 0;
}

/* Record the first failure (lock held): stop queued work and free the memory of parts no
 * one is using (the writer's FILLING part is its own to free). */
void s3f__up_fail(struct upload *u, enum s3f_status st, const struct s3f_error *e) {
    S3F_ASSERT_HELD(&u->lock);
    if (u->status)
        return;
    u->status = st ? st : S3F_ERR_INTERNAL;
    if (e)
        u->err = *e;
    else
        s3f_error_clear(&u->err);
    u->err.status = u->status;
    if (!u->err.operation[0])
        s3f__strlcpy(u->err.operation, "upload", sizeof(u->err.operation));
    if (!u->err.resource[0])
        s3f__strlcpy(u->err.resource, u->resource, sizeof(u->err.resource));
    s3f__log(&u->c->logger, S3F_LOG_DEBUG, "upload %s failed: %s %s", u->resource,
             s3f_status_name(u->status), u->err.message);
    s3f__sched_cancel(&u->x->sched, &u->entry);
    for (size_t i = 0; i < u->n_parts; i++) {
        struct upart *p = &u->parts[i];
        if (p->state == PART_PREPARED || p->state == PART_QUEUED) {
            s3f__up_release_chunks(u, p);
            part_set_state(u, i, PART_PREPARED);
        }
    }
    u->q_head = u->q_tail = -1;
}

enum s3f_status s3f__up_fail_msg(struct upload *u, enum s3f_status st, const char *op,
                                 const char *msg) {
    struct s3f_error e;
    s3f_error_clear(&e);
    s3f__error_set(&e, st, op, u->resource, "%s", msg);
    s3f__up_fail(u, st, &e);
    return st;
}

/* Queue part i if it is prepared and may be sent (lock held). */
void s3f__up_try_queue(struct upload *u, size_t i, struct actions *act) {
    S3F_ASSERT_HELD(&u->lock);
    struct upart *p = &u->parts[i];
    if (u->status || p->state != PART_PREPARED)
        return;
    bool sendable = u->multipart ? u->upload_id != NULL : u->input_done;
    if (!sendable)
        return;
    part_set_state(u, i, PART_QUEUED);
    p->qnext = -1;
    if (u->q_tail >= 0)
        u->parts[u->q_tail].qnext = (int32_t)i;
    else
        u->q_head = (int32_t)i;
    u->q_tail = (int32_t)i;
    act->queued++;
}

/* Build the control request `kind` into u->ctl (lock held, none in flight). */
enum s3f_status s3f__up_build_ctl(struct upload *u, enum ctl_kind kind) {
    S3F_ASSERT_HELD(&u->lock);
    enum s3f_status st = S3F_OK;
    s3f__op_cleanup(&u->ctl);
    switch (kind) {
    case CTL_CREATE:
        s3f__op_create_multipart(&u->ctl, u->bucket, u->key, u->content_type, u->alg, true);
        break;
    case CTL_COMPLETE: {
        struct s3f_part_info *pi = calloc(u->n_parts, sizeof(*pi));
        if (!pi)
            return s3f__up_fail_msg(u, S3F_ERR_NO_MEMORY, "CompleteMultipartUpload",
                                    "out of memory");
        struct s3f__checksum full;
        s3f__checksum_init(&full, u->alg);
        for (size_t i = 0; i < u->n_parts; i++) {
            pi[i].part_number = (int)i + 1;
            pi[i].size = u->parts[i].size;
            s3f__strlcpy(pi[i].etag, u->parts[i].etag, sizeof(pi[i].etag));
            s3f__checksum_b64(&u->parts[i].ck, pi[i].checksum);
            if (i == 0)
                full = u->parts[i].ck;
            else
                s3f__checksum_combine(&full, &u->parts[i].ck, u->parts[i].size);
        }
        struct s3f_error e;
        s3f_error_clear(&e);
        st = s3f__op_complete_multipart(&u->ctl, u->bucket, u->key, u->upload_id, pi,
                                        u->n_parts, u->alg,
                                        u->alg == S3F_CHECKSUM_NONE ? NULL : &full, &e);
        free(pi);
        if (st) {
            s3f__up_fail(u, st, &e);
            return st;
        }
        s3f__xfer_report_checksum(&u->result, &full);
        break;
    }
    case CTL_HEAD:
        st = s3f__op_get(&u->ctl, true, u->bucket, u->key, NULL, NULL, true, NULL);
        break;
    case CTL_VERIFY:
        st = s3f__op_get(&u->ctl, true, u->src_bucket, u->src_key, u->src_version_id,
                         u->src_etag, false, NULL);
        break;
    case CTL_ABORT:
        st = s3f__op_abort_multipart(&u->ctl, u->bucket, u->key, u->upload_id, NULL);
        break;
    case CTL_NONE:
        break;
    }
    if (st && kind != CTL_COMPLETE)
        s3f__up_fail_msg(u, st, u->ctl.r.operation ? u->ctl.r.operation : "upload",
                         "out of memory");
    return st;
}

void s3f__up_start_ctl(struct upload *u, enum ctl_kind kind, struct actions *act) {
    u->ctl_kind = kind;
    if (kind == CTL_CREATE)
        u->create_sent_s = s3f__wall_time_s();
    u->outstanding++;
    act->submit_ctl = true;
}

/* Take the next step the state allows (lock held). */
void s3f__up_advance(struct upload *u, struct actions *act) {
    S3F_ASSERT_HELD(&u->lock);
    if (u->ctl_kind != CTL_NONE || act->submit_ctl)
        return; /* wait for the control request in flight */
    if (u->status) {
        if (u->outstanding)
            return; /* abort only after the parts in flight settled */
        if (u->upload_id && !u->abort_sent) {
            u->abort_sent = true;
            if (s3f__up_build_ctl(u, CTL_ABORT) == S3F_OK) {
                set_state(u, UP_ABORTING);
                s3f__up_start_ctl(u, CTL_ABORT, act);
                return;
            }
        }
        set_state(u, UP_FAILED);
        return;
    }
    if (u->state != UP_RUNNING || !u->input_done || u->parts_done < u->n_parts)
        return;
    if (!u->multipart) {
        set_state(u, UP_DONE);
        return;
    }
    if (u->source->verify_before_complete && !u->verified) {
        /* Some servers (Ceph RGW) ignore x-amz-copy-source-if-match on UploadPartCopy: a
         * source replaced during the copy would give an object of two versions. Every
         * part is copied now; if the source still has the ETag it had at the start, no
         * part saw another version (a replacement back to the same bytes aside). */
        if (s3f__up_build_ctl(u, CTL_VERIFY) != S3F_OK) {
            s3f__up_advance(u, act);
            return;
        }
        set_state(u, UP_VERIFYING);
        s3f__up_start_ctl(u, CTL_VERIFY, act);
        return;
    }
    if (s3f__up_build_ctl(u, CTL_COMPLETE) != S3F_OK) {
        s3f__up_advance(u, act);
        return;
    }
    set_state(u, UP_COMPLETING);
    s3f__up_start_ctl(u, CTL_COMPLETE, act);
}

void s3f__up_do_actions(struct upload *u, const struct actions *act) {
    if (act->submit_ctl)
        s3f__s3_submit(u->c, &u->ctl.r, &u->ctl_err, s3f__up_ctl_done, u);
    if (act->queued)
        s3f__sched_add(&u->x->sched, &u->entry, act->queued);
}

/* Progress, as the next call should report it (u->lock held). */
static void progress_now(struct upload *u, uint64_t *done, uint64_t *total) {
    S3F_ASSERT_HELD(&u->lock);
    *done = u->bytes_done;
    *total = u->input_done ? u->parts[u->n_parts - 1].offset + u->parts[u->n_parts - 1].size
                           : UINT64_MAX;
}

/* Whether parts completed since the last call (u->lock held). */
static bool progress_moved(struct upload *u) {
    S3F_ASSERT_HELD(&u->lock);
    return u->progress && u->parts_done != u->progress_parts;
}

/* Call the progress callback if parts completed since the last call. Only on the caller's
 * threads (the one waiting in s3f__upload_wait, or in s3f_writer_write), never on an I/O
 * thread: the I/O
 * threads only count bytes_done and wake the waiter, so a callback that blocks (a stopped
 * terminal, a GIL held elsewhere) delays no request. */
void s3f__up_report_progress(struct upload *u) {
    if (!u->progress)
        return;
    pthread_mutex_lock(&u->progress_lock);
    pthread_mutex_lock(&u->lock);
    uint64_t done, total;
    progress_now(u, &done, &total);
    bool moved = progress_moved(u);
    u->progress_parts = u->parts_done;
    pthread_mutex_unlock(&u->lock);
    if (moved)
        u->progress(u->progress_ud, done, total);
    pthread_mutex_unlock(&u->progress_lock);
}

/* End of a completion callback: the waiter may free u once this returns. */
void s3f__up_callback_exit(struct upload *u) {
    pthread_mutex_lock(&u->lock);
    u->callbacks--;
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
}

/* ---- data requests ------------------------------------------------------------------- */

static void part_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct upreq *q = ud;
    struct upload *u = q->u;
    (void)r;
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    u->callbacks++;
    u->outstanding--;
    struct upart *p = &u->parts[q->part];
    uint64_t p_size = p->size;
    s3f__up_release_chunks(u, p);
    if (u->source->done)
        st = u->source->done(u, q, st);
    if (st == S3F_OK) {
        s3f__strlcpy(p->etag, q->op.info.etag, sizeof(p->etag));
        part_set_state(u, q->part, PART_DONE);
        u->parts_done++;
        u->bytes_done += p->size;
        if (!u->multipart) {
            u->result = q->op.info;
            s3f__xfer_report_checksum(&u->result, &p->ck);
        }
    } else {
        part_set_state(u, q->part, PART_PREPARED);
        s3f__up_fail(u, st, &q->err);
    }
    s3f__up_advance(u, &act);
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    if (st == S3F_OK && !u->source->server_side && q->start_ns)
        s3f__xfer_observe(u->x, p_size, UINT64_MAX, s3f__now_ns() - q->start_ns);
    s3f__op_cleanup(&q->op);
    free(q);
    s3f__up_do_actions(u, &act);
    s3f__sched_done(&u->x->sched);
    s3f__up_callback_exit(u); /* the waiter reports the progress (s3f__up_report_progress) */
}

enum s3f_status s3f__up_data_request(struct upload *u, struct upreq *q, size_t i) {
    S3F_ASSERT_HELD(&u->lock);
    struct upart *p = &u->parts[i];
    enum s3f_status st = S3F_OK;
    if (u->multipart)
        st = s3f__op_upload_part(&q->op, u->bucket, u->key, u->upload_id, (int)i + 1, &p->ck,
                                 &q->err);
    else
        s3f__op_put_object(&q->op, u->bucket, u->key, u->content_type, &p->ck);
    q->op.r.body_len = (size_t)p->size;
    if (!p->size)
        q->op.r.body = "";
    return st;
}

enum s3f_status s3f__up_read_request(struct upload *u, struct upreq *q, size_t i,
                                     s3f__s3_read_fn read) {
    enum s3f_status st = s3f__up_data_request(u, q, i);
    if (st || !u->parts[i].size)
        return st;
    q->op.r.body = NULL;
    q->op.r.read_body = read;
    q->op.r.read_ud = q;
    return S3F_OK;
}

/* Scheduler callback: send the next queued part. */
static bool start_part(struct s3f__sched_entry *e) {
    struct upload *u = (struct upload *)((char *)e - offsetof(struct upload, entry));
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    if (u->status || u->q_head < 0) {
        pthread_mutex_unlock(&u->lock);
        return false;
    }
    size_t i = (size_t)u->q_head;
    struct upart *p = &u->parts[i];
    u->q_head = p->qnext;
    if (u->q_head < 0)
        u->q_tail = -1;
    struct upreq *q = calloc(1, sizeof(*q));
    enum s3f_status st = q ? S3F_OK : S3F_ERR_NO_MEMORY;
    if (q) {
        q->u = u;
        q->part = i;
        q->off = p->offset;
        q->chunks = p->chunks;
        st = u->source->request(u, q, i);
    }
    if (st) {
        if (q) {
            s3f__op_cleanup(&q->op);
            s3f__up_fail(u, st, &q->err);
            free(q);
        } else {
            s3f__up_fail_msg(u, st, "upload", "out of memory");
        }
        s3f__up_advance(u, &act);
        pthread_cond_broadcast(&u->cond);
        pthread_mutex_unlock(&u->lock);
        s3f__up_do_actions(u, &act);
        return false;
    }
    struct s3f__s3_request *r = &q->op.r;
    part_set_state(u, i, PART_SENDING);
    u->outstanding++;
    pthread_mutex_unlock(&u->lock);
    q->start_ns = s3f__now_ns();
    s3f__s3_submit(u->c, r, &q->err, part_done, q);
    return true;
}

/* ---- life cycle ------------------------------------------------------------------------ */

void s3f__upload_free(struct upload *u) {
    if (!u)
        return;
    s3f__sched_detach(&u->x->sched, &u->entry);
    for (size_t i = 0; i < u->n_parts; i++) {
        s3f__up_release_chunks(u, &u->parts[i]);
        free(u->parts[i].chunks);
    }
    free(u->parts);
    s3f__op_cleanup(&u->ctl);
    free(u->upload_id);
    if (u->source && u->source->cleanup)
        u->source->cleanup(u);
    free(u->bucket);
    free(u->key);
    free(u->content_type);
    free(u->src_bucket);
    free(u->src_key);
    free(u->src_version_id);
    free(u->src_etag);
    pthread_cond_destroy(&u->cond);
    pthread_mutex_destroy(&u->lock);
    pthread_mutex_destroy(&u->progress_lock);
    free(u);
}

enum s3f_status s3f__upload_new(struct s3f_client *c, const char *bucket, const char *key,
                                const struct s3f_upload_options *opts, const char *op,
                                struct upload **out, struct s3f_error *err) {
    static const struct s3f_upload_options defaults;
    if (!opts)
        opts = &defaults;
    *out = NULL;
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL, "client is NULL");
    enum s3f_status st = s3f__op_check_args(op, bucket, key, true, err);
    if (st)
        return st;
    if (opts->part_size_bytes &&
        (opts->part_size_bytes < S3F__PART_MIN || opts->part_size_bytes > S3F__PART_MAX))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL,
                              "part_size_bytes must be 5 MiB to 5 GiB, got %" PRIu64,
                              opts->part_size_bytes);
    if ((unsigned)opts->checksum > S3F_CHECKSUM_CRC64NVME)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL,
                              "unknown checksum algorithm %d", (int)opts->checksum);
    struct s3f__xfer_shared *x;
    if ((st = s3f__xfer_shared_get(c, &x, err)))
        return st;
    struct upload *u = calloc(1, sizeof(*u));
    if (!u)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
    pthread_mutex_init(&u->lock, NULL);
    pthread_mutex_init(&u->progress_lock, NULL);
    pthread_cond_init(&u->cond, NULL);
    u->c = c;
    u->x = x;
    u->fd = -1;
    u->q_head = u->q_tail = -1;
    u->entry.start = start_part;
    u->start_ns = s3f__now_ns();
    u->alg = opts->checksum == S3F_CHECKSUM_DEFAULT ? x->checksum : opts->checksum;
    u->part_size = opts->part_size_bytes ? opts->part_size_bytes : x->part_size;
    u->progress = opts->progress;
    u->progress_ud = opts->progress_user_data;
    s3f__s3_resource(u->resource, sizeof(u->resource), bucket, key);
    u->bucket = s3f__strdup(bucket);
    u->key = s3f__strdup(key);
    u->content_type = s3f__strdup(opts->content_type ? opts->content_type
                                                     : "application/octet-stream");
    if (!u->bucket || !u->key || !u->content_type) {
        s3f__upload_free(u);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
    }
    *out = u;
    return S3F_OK;
}

/* Wait until the upload reached DONE or FAILED and no callback runs; hand out the result. */
enum s3f_status s3f__upload_wait(struct upload *u, struct s3f_object_info *info,
                                 struct s3f_error *err) {
    pthread_mutex_lock(&u->lock);
    for (;;) {
        if (progress_moved(u)) {
            pthread_mutex_unlock(&u->lock);
            s3f__up_report_progress(u);
            pthread_mutex_lock(&u->lock);
            continue;
        }
        if ((u->state == UP_DONE || u->state == UP_FAILED) && u->outstanding == 0 &&
            u->callbacks == 0)
            break;
        pthread_cond_wait(&u->cond, &u->lock);
    }
    enum s3f_status st = u->state == UP_DONE ? S3F_OK : u->status;
    bool orphans = u->orphan_check;
    u->orphan_check = false;
    pthread_mutex_unlock(&u->lock);
    if (orphans)
        s3f__up_abort_orphans(u);
    if (st) {
        if (err)
            *err = u->err;
        return st;
    }
    uint64_t size = 0;
    for (size_t i = 0; i < u->n_parts; i++)
        size += u->parts[i].size;
    u->result.size = size;
    if (info)
        *info = u->result;
    double s = (double)(s3f__now_ns() - u->start_ns) / 1e9;
    s3f__log(&u->c->logger, S3F_LOG_DEBUG,
             "upload %s: %" PRIu64 " bytes in %zu part%s, %.3f s, %.1f MB/s", u->resource,
             size, u->n_parts, u->n_parts == 1 ? "" : "s", s, s > 0 ? (double)size / s / 1e6 : 0);
    return S3F_OK;
}
