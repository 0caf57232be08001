/* Uploads: from memory regions, from a file, and the streaming writer, and server-side
 * copies (s3f_copy: parts are UploadPartCopy requests of ranges of the source), as one
 * state machine. docs/TRANSFER.md describes the states.
 *
 * Threads: the caller's thread prepares parts (checksums, or copies into pool chunks for the
 * writer) and waits; I/O threads run the requests and their completions. Everything under
 * "guarded by lock" below is touched only with u->lock held, except the writer's part being
 * filled (parts[cur] while FILLING), which only the writer's thread touches. Lock order:
 * u->lock, then the scheduler's or the pool's lock; s3f__sched_add/_done and request
 * submission happen with no lock held. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define SCRATCH_SIZE ((size_t)1 << 20)

enum part_state {
    PART_FILLING,   /* the writer is copying bytes into it */
    PART_PREPARED,  /* bytes and checksum ready; waits for the upload id (or for close) */
    PART_QUEUED,    /* in the send queue, counted by the scheduler */
    PART_SENDING,   /* its request is in flight */
    PART_DONE,      /* uploaded, ETag known */
};

static const char *const part_state_names[] = {"FILLING", "PREPARED", "QUEUED", "SENDING",
                                               "DONE"};

enum up_state {
    UP_RUNNING,     /* parts being prepared and sent (CreateMultipartUpload maybe in flight) */
    UP_VERIFYING,   /* copy: HEAD of the source with If-Match before Complete */
    UP_COMPLETING,  /* CompleteMultipartUpload in flight */
    UP_HEADING,     /* HEAD for the ETag the server did not return with Complete */
    UP_ABORTING,    /* failed; AbortMultipartUpload in flight */
    UP_DONE,        /* the object exists */
    UP_FAILED,      /* nothing was created */
};

static const char *const up_state_names[] = {"RUNNING", "VERIFYING", "COMPLETING", "HEADING", "ABORTING",
                                             "DONE", "FAILED"};

enum src_kind { SRC_MEMORY, SRC_FILE, SRC_CHUNKS, SRC_COPY };
enum ctl_kind { CTL_NONE, CTL_CREATE, CTL_VERIFY, CTL_COMPLETE, CTL_HEAD, CTL_ABORT };

struct upart {
    uint64_t offset;
    uint64_t size;
    uint64_t planned;            /* writer: size at which the part is full */
    struct s3f__checksum ck;
    void **chunks;               /* writer: pool chunks holding the bytes */
    size_t n_chunks, cap_chunks;
    enum part_state state;
    int32_t qnext;               /* next part in the send queue, -1 for none */
    char etag[128];
};

struct upload {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    char *bucket, *key, *content_type;
    char resource[600];
    enum s3f_checksum_algorithm alg;      /* never DEFAULT */
    enum src_kind src;
    const struct s3f_iovec *iov;          /* SRC_MEMORY */
    size_t n_iov;
    uint64_t *iov_end;                    /* end offset of each region in the object */
    int fd;                               /* SRC_FILE */
    char *src_bucket, *src_key;           /* SRC_COPY: the source object, */
    char *src_version_id, *src_etag;      /* its version (or NULL) and the pinned ETag */
    uint64_t single_max;                  /* SRC_COPY: up to this size, one CopyObject */
    uint64_t part_size;                   /* known size: the plan; writer: first parts */
    uint64_t part_cap;                    /* writer: largest part */
    s3f_progress_fn progress;
    void *progress_ud;
    pthread_mutex_t progress_lock;        /* progress calls never overlap */
    size_t progress_parts;                /* parts_done as the last progress call saw it */
    uint64_t start_ns;
    size_t cur;                           /* writer: the part being filled */
    uint64_t written;                     /* writer: bytes written (writer thread) */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- guarded by lock ---- */
    enum up_state state;
    bool multipart;                       /* CreateMultipartUpload sent or to be sent */
    bool input_done;                      /* every part is known */
    bool abort_sent;
    bool verified;                        /* copy: the source still had its ETag at the end */
    bool complete_unparsed;               /* Complete said 200 with a body we could not read */
    bool reconciling;                     /* Complete failed after a lost response: HEAD decides */
    struct s3f_error complete_err;        /* ... and what was wrong with it */
    /* CreateMultipartUpload needed a retry after a lost response: the first attempt may
     * have made an upload nobody knows the id of. upload_wait looks for it (see
     * abort_orphans). Times in Unix seconds; server_date from the answer's Date, or 0. */
    bool orphan_check;
    int64_t create_sent_s, create_done_s, create_server_date;
    char *upload_id;
    struct upart *parts;
    size_t n_parts, cap_parts;
    int32_t q_head, q_tail;
    uint32_t outstanding;                 /* requests in flight, data and control */
    uint32_t callbacks;                   /* completions still running */
    size_t parts_done;
    uint64_t bytes_done;
    enum s3f_status status;               /* first failure */
    struct s3f_error err;
    enum ctl_kind ctl_kind;               /* the control request in flight */
    struct s3f__op ctl;
    struct s3f_error ctl_err;
    struct s3f_object_info result;
    struct s3f__sched_entry entry;
};

/* One data request (UploadPart or the single PutObject). */
struct upreq {
    struct s3f__op op;
    struct upload *u;
    size_t part;
    uint64_t off;                         /* object offset of the body */
    void **chunks;                        /* SRC_CHUNKS: the part's chunks */
    struct s3f_error err;
    int read_errno;                       /* SRC_FILE: pread failed (errno), or -1: the
                                           * file ended early (it shrank) */
    uint64_t read_at;                     /* file offset of that read */
};

/* What to do once u->lock is released. */
struct actions {
    uint32_t queued;                      /* parts newly queued: tell the scheduler */
    bool submit_ctl;                      /* u->ctl was built: submit it */
};

static void ctl_done(struct s3f__s3_request *r, enum s3f_status st, void *ud);

/* ---- state changes (traced) ----------------------------------------------------------- */

#define set_state(u, s) set_state_at(u, s, __LINE__)
static void set_state_at(struct upload *u, enum up_state s, int line) {
    if (u->state != s)
        s3f__log(&u->c->logger, S3F_LOG_TRACE, "upload %s: %s -> %s (upload.c:%d)",
                 u->resource, up_state_names[u->state], up_state_names[s], line);
    u->state = s;
}

#define part_set_state(u, i, s) part_set_state_at(u, i, s, __LINE__)
static void part_set_state_at(struct upload *u, size_t i, enum part_state s, int line) {
    struct upart *p = &u->parts[i];
    if (p->state != s && s3f__log_enabled(&u->c->logger, S3F_LOG_TRACE))
        s3f__log(&u->c->logger, S3F_LOG_TRACE, "upload %s part %zu: %s -> %s (upload.c:%d)",
                 u->resource, i + 1, part_state_names[p->state], part_state_names[s], line);
    p->state = s;
}

static void release_chunks(struct upload *u, struct upart *p) {
    if (p->n_chunks)
        s3f__pool_release(&u->x->pool, p->n_chunks, p->chunks);
    p->n_chunks = 0;
}

/* Record the first failure (lock held): stop queued work and free the memory of parts no
 * one is using (the writer's FILLING part is its own to free). */
static void fail(struct upload *u, enum s3f_status st, const struct s3f_error *e) {
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
            release_chunks(u, p);
            part_set_state(u, i, PART_PREPARED);
        }
    }
    u->q_head = u->q_tail = -1;
}

static enum s3f_status fail_msg(struct upload *u, enum s3f_status st, const char *op,
                                const char *msg) {
    struct s3f_error e;
    s3f_error_clear(&e);
    s3f__error_set(&e, st, op, u->resource, "%s", msg);
    fail(u, st, &e);
    return st;
}

/* Queue part i if it is prepared and may be sent (lock held). */
static void try_queue(struct upload *u, size_t i, struct actions *act) {
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
static enum s3f_status build_ctl(struct upload *u, enum ctl_kind kind) {
    enum s3f_status st = S3F_OK;
    s3f__op_cleanup(&u->ctl);
    switch (kind) {
    case CTL_CREATE:
        s3f__op_create_multipart(&u->ctl, u->bucket, u->key, u->content_type, u->alg, true);
        break;
    case CTL_COMPLETE: {
        struct s3f_part_info *pi = calloc(u->n_parts, sizeof(*pi));
        if (!pi)
            return fail_msg(u, S3F_ERR_NO_MEMORY, "CompleteMultipartUpload", "out of memory");
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
            fail(u, st, &e);
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
        fail_msg(u, st, u->ctl.r.operation ? u->ctl.r.operation : "upload", "out of memory");
    return st;
}

static void start_ctl(struct upload *u, enum ctl_kind kind, struct actions *act) {
    u->ctl_kind = kind;
    if (kind == CTL_CREATE)
        u->create_sent_s = s3f__wall_time_s();
    u->outstanding++;
    act->submit_ctl = true;
}

/* Take the next step the state allows (lock held). */
static void advance(struct upload *u, struct actions *act) {
    if (u->ctl_kind != CTL_NONE || act->submit_ctl)
        return; /* wait for the control request in flight */
    if (u->status) {
        if (u->outstanding)
            return; /* abort only after the parts in flight settled */
        if (u->upload_id && !u->abort_sent) {
            u->abort_sent = true;
            if (build_ctl(u, CTL_ABORT) == S3F_OK) {
                set_state(u, UP_ABORTING);
                start_ctl(u, CTL_ABORT, act);
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
    if (u->src == SRC_COPY && !u->verified) {
        /* Some servers (Ceph RGW) ignore x-amz-copy-source-if-match on UploadPartCopy: a
         * source replaced during the copy would give an object of two versions. Every
         * part is copied now; if the source still has the ETag it had at the start, no
         * part saw another version (a replacement back to the same bytes aside). */
        if (build_ctl(u, CTL_VERIFY) != S3F_OK) {
            advance(u, act);
            return;
        }
        set_state(u, UP_VERIFYING);
        start_ctl(u, CTL_VERIFY, act);
        return;
    }
    if (build_ctl(u, CTL_COMPLETE) != S3F_OK) {
        advance(u, act);
        return;
    }
    set_state(u, UP_COMPLETING);
    start_ctl(u, CTL_COMPLETE, act);
}

static void do_actions(struct upload *u, const struct actions *act) {
    if (act->submit_ctl)
        s3f__s3_submit(u->c, &u->ctl.r, &u->ctl_err, ctl_done, u);
    if (act->queued)
        s3f__sched_add(&u->x->sched, &u->entry, act->queued);
}

/* Progress, as the next call should report it (u->lock held). */
static void progress_now(struct upload *u, uint64_t *done, uint64_t *total) {
    *done = u->bytes_done;
    *total = u->input_done ? u->parts[u->n_parts - 1].offset + u->parts[u->n_parts - 1].size
                           : UINT64_MAX;
}

/* Whether parts completed since the last call (u->lock held). */
static bool progress_moved(struct upload *u) {
    return u->progress && u->parts_done != u->progress_parts;
}

/* Call the progress callback if parts completed since the last call. Only on the caller's threads (the one
 * waiting in upload_wait, or in s3f_writer_write), never on an I/O thread: the I/O
 * threads only count bytes_done and wake the waiter, so a callback that blocks (a stopped
 * terminal, a GIL held elsewhere) delays no request. */
static void report_progress(struct upload *u) {
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
static void callback_exit(struct upload *u) {
    pthread_mutex_lock(&u->lock);
    u->callbacks--;
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
}

/* ---- request bodies (I/O threads) --------------------------------------------------- */

static long read_iov(void *ud, char *buf, size_t len, uint64_t offset) {
    struct upreq *q = ud;
    struct upload *u = q->u;
    uint64_t pos = q->off + offset;
    /* first region whose end is past pos */
    size_t lo = 0, hi = u->n_iov;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (u->iov_end[mid] <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t done = 0;
    for (size_t i = lo; i < u->n_iov && done < len; i++) {
        uint64_t start = u->iov_end[i] - u->iov[i].len;
        if (u->iov[i].len == 0)
            continue;
        uint64_t in = pos + done - start;
        size_t n = (size_t)(u->iov[i].len - in);
        if (n > len - done)
            n = len - done;
        memcpy(buf + done, (const char *)u->iov[i].base + in, n);
        done += n;
    }
    return done ? (long)done : -1;
}

static long read_file(void *ud, char *buf, size_t len, uint64_t offset) {
    struct upreq *q = ud;
    ssize_t n;
    do {
        n = pread(q->u->fd, buf, len, (off_t)(q->off + offset));
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        return (long)n;
    q->read_errno = n < 0 ? errno : -1; /* 0: the file shrank; part_done says so */
    q->read_at = q->off + offset;
    return -1;
}

static long read_chunks(void *ud, char *buf, size_t len, uint64_t offset) {
    struct upreq *q = ud;
    size_t cs = q->u->x->pool.chunk_size;
    size_t ci = (size_t)(offset / cs), in = (size_t)(offset % cs);
    size_t n = cs - in < len ? cs - in : len;
    memcpy(buf, (const char *)q->chunks[ci] + in, n);
    return (long)n;
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
    release_chunks(u, p);
    if (st == S3F_OK && u->src == SRC_COPY) /* the ETag is in the XML answer */
        st = u->multipart ? s3f__op_upload_part_copy_result(&q->op, &q->op.info, &q->err)
                          : s3f__op_copy_object_result(&q->op, &q->op.info, &q->err);
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
        if (q->read_errno) { /* the transport saw an aborted read: say why */
            const char *op = u->multipart ? "UploadPart" : "PutObject";
            st = S3F_ERR_IO;
            s3f_error_clear(&q->err);
            if (q->read_errno < 0)
                s3f__error_set(&q->err, st, op, u->resource,
                               "the source file ended at offset %" PRIu64 ", before part %zu "
                               "did: it shrank during the upload",
                               q->read_at, q->part + 1);
            else
                s3f__error_set(&q->err, st, op, u->resource,
                               "reading the source file at offset %" PRIu64 ": %s",
                               q->read_at, strerror(q->read_errno));
        }
        fail(u, st, &q->err);
    }
    advance(u, &act);
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    s3f__op_cleanup(&q->op);
    free(q);
    do_actions(u, &act);
    s3f__sched_done(&u->x->sched);
    callback_exit(u); /* the waiter reports the progress (report_progress) */
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
        if (u->src == SRC_COPY && u->multipart) {
            st = s3f__op_upload_part_copy(&q->op, u->bucket, u->key, u->upload_id, (int)i + 1,
                                          u->src_bucket, u->src_key, u->src_version_id, true,
                                          p->offset, p->offset + p->size - 1, u->src_etag,
                                          &q->err);
        } else if (u->src == SRC_COPY) {
            st = s3f__op_copy_object(&q->op, u->bucket, u->key, u->src_bucket, u->src_key,
                                     u->src_version_id, u->src_etag, &q->err);
        } else if (u->multipart) {
            st = s3f__op_upload_part(&q->op, u->bucket, u->key, u->upload_id, (int)i + 1,
                                     &p->ck, &q->err);
        } else {
            s3f__op_put_object(&q->op, u->bucket, u->key, u->content_type, &p->ck);
        }
    }
    if (st) {
        if (q) {
            s3f__op_cleanup(&q->op);
            fail(u, st, &q->err);
            free(q);
        } else {
            fail_msg(u, st, "upload", "out of memory");
        }
        advance(u, &act);
        pthread_cond_broadcast(&u->cond);
        pthread_mutex_unlock(&u->lock);
        do_actions(u, &act);
        return false;
    }
    struct s3f__s3_request *r = &q->op.r;
    r->body_len = (size_t)p->size;
    switch (u->src) {
    case SRC_MEMORY: {
        /* a part inside one region is sent from it directly */
        size_t lo = 0, hi = u->n_iov;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (u->iov_end[mid] <= p->offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (p->size == 0) {
            r->body = "";
        } else if (lo < u->n_iov && p->offset + p->size <= u->iov_end[lo]) {
            uint64_t start = u->iov_end[lo] - u->iov[lo].len;
            r->body = (const char *)u->iov[lo].base + (p->offset - start);
        } else {
            r->body = NULL;
            r->read_body = read_iov;
            r->read_ud = q;
        }
        break;
    }
    case SRC_FILE:
        r->body = p->size ? NULL : "";
        r->read_body = p->size ? read_file : NULL;
        r->read_ud = q;
        break;
    case SRC_CHUNKS:
        r->body = p->size ? NULL : "";
        r->read_body = p->size ? read_chunks : NULL;
        r->read_ud = q;
        break;
    case SRC_COPY: /* no body: the server reads the source */
        r->body = "";
        r->body_len = 0;
        break;
    }
    part_set_state(u, i, PART_SENDING);
    u->outstanding++;
    pthread_mutex_unlock(&u->lock);
    s3f__s3_submit(u->c, r, &q->err, part_done, q);
    return true;
}

/* ---- control requests ----------------------------------------------------------------- */

/* The HEAD after a Complete that failed once a response had been lost (lock held): the
 * object is ours when its size and identity match (s3f__same_object: the whole-object
 * checksum, else the multipart ETag computed from the part ETags). Then the upload is done
 * and no Abort is sent. Otherwise the Complete's error stands, with what the HEAD found. */
static void reconcile_head(struct upload *u, enum s3f_status st) {
    u->reconciling = false;
    uint64_t size = 0;
    for (size_t i = 0; i < u->n_parts; i++)
        size += u->parts[i].size;
    char etag[48] = "";
    const char **tags = calloc(u->n_parts, sizeof(*tags));
    if (tags) {
        for (size_t i = 0; i < u->n_parts; i++)
            tags[i] = u->parts[i].etag;
        if (!s3f__multipart_etag(tags, u->n_parts, etag, sizeof(etag)))
            etag[0] = '\0';
        free(tags);
    }
    char why[400];
    int same = -1;
    if (st == S3F_OK)
        same = s3f__same_object(&u->ctl.info, &u->result, u->alg, size, etag, why,
                                sizeof(why));
    else
        snprintf(why, sizeof(why), "HEAD found no object (%s)", s3f_status_name(st));
    if (same == 1) {
        s3f__log(&u->c->logger, S3F_LOG_INFO,
                 "upload %s: the object is ours (size and %s match): the first "
                 "CompleteMultipartUpload succeeded and its response was lost",
                 u->resource, etag[0] && !u->ctl.info.checksum_crc32c[0] &&
                 !u->ctl.info.checksum_crc32[0] && !u->ctl.info.checksum_crc64nvme[0]
                     ? "multipart ETag" : "identity");
        s3f__strlcpy(u->result.etag, u->ctl.info.etag, sizeof(u->result.etag));
        u->result.last_modified = u->ctl.info.last_modified;
        set_state(u, UP_DONE);
        return;
    }
    struct s3f_error e = u->complete_err;
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s%sCompleteMultipartUpload failed after a lost response "
             "and %s is not the object uploaded: %s", e.message, e.message[0] ? "; " : "",
             u->resource, why);
    s3f__strlcpy(e.message, msg, sizeof(e.message));
    if (strcmp(e.code, "NoSuchUpload") == 0)
        u->abort_sent = true; /* the upload is gone (completed or aborted): nothing to abort */
    fail(u, e.status, &e);
    set_state(u, UP_RUNNING);
}

static void ctl_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct upload *u = ud;
    (void)r;
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    u->callbacks++;
    u->outstanding--;
    enum ctl_kind kind = u->ctl_kind;
    u->ctl_kind = CTL_NONE;
    switch (kind) {
    case CTL_CREATE:
        if (st == S3F_OK)
            st = s3f__op_create_multipart_result(&u->ctl, &u->upload_id, &u->ctl_err);
        if (u->ctl.r.lost_response) { /* an attempt may have made an upload: find it */
            u->orphan_check = true;
            u->create_done_s = s3f__wall_time_s();
            u->create_server_date = u->ctl.r.server_date;
        }
        if (st) {
            fail(u, st, &u->ctl_err);
            break;
        }
        s3f__log(&u->c->logger, S3F_LOG_DEBUG, "upload %s: multipart upload %s", u->resource,
                 u->upload_id);
        for (size_t i = 0; i < u->n_parts; i++)
            try_queue(u, i, &act);
        break;
    case CTL_VERIFY:
        if (st == S3F_OK && u->src_etag && strcmp(u->ctl.info.etag, u->src_etag) != 0)
            st = S3F_ERR_PRECONDITION_FAILED; /* a server that ignored If-Match too */
        if (st) {
            struct s3f_error e = u->ctl_err;
            if (st == S3F_ERR_PRECONDITION_FAILED || st == S3F_ERR_NOT_FOUND) {
                s3f_error_clear(&e);
                s3f__error_set(&e, st, "UploadPartCopy", NULL,
                               "the source s3://%s/%s changed during the copy (its ETag is "
                               "no longer %s)", u->src_bucket, u->src_key, u->src_etag);
                e.http_status = u->ctl.r.http_status;
            }
            fail(u, st, &e);
        } else {
            u->verified = true;
        }
        set_state(u, UP_RUNNING);
        break;
    case CTL_COMPLETE: {
        struct s3f_object_info info = u->result;
        if (st == S3F_OK)
            st = s3f__op_complete_multipart_result(&u->ctl, &info, &u->ctl_err);
        if (st == S3F_ERR_BAD_RESPONSE && u->ctl.r.http_status == 200) {
            /* a 200 that is no error document but not the expected one either (moto
             * answers <CompleteMultipartUploadResponse>): the upload most likely
             * completed; HEAD decides */
            s3f__log(&u->c->logger, S3F_LOG_WARN, "upload %s: %s; checking with HEAD",
                     u->resource, u->ctl_err.message);
            u->complete_unparsed = true;
            u->complete_err = u->ctl_err;
            st = S3F_OK;
        }
        if (st && (u->ctl.r.lost_response || strcmp(u->ctl_err.code, "NoSuchUpload") == 0) &&
            build_ctl(u, CTL_HEAD) == S3F_OK) {
            /* An earlier attempt may have completed the upload and lost its answer; a
             * repeat then answers NoSuchUpload (AWS) or fails again. The object decides.
             * NoSuchUpload for our own upload id, which we never aborted, is checked even
             * without a retry the executor saw (a proxy's or a library's own re-send). */
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: CompleteMultipartUpload failed (%s%s%s) after a lost "
                     "response; checking the object with HEAD",
                     u->resource, u->ctl_err.code[0] ? u->ctl_err.code : s3f_status_name(st),
                     u->ctl_err.message[0] ? ": " : "", u->ctl_err.message);
            u->reconciling = true;
            u->complete_err = u->ctl_err;
            u->complete_err.status = st;
            set_state(u, UP_HEADING);
            start_ctl(u, CTL_HEAD, &act);
            break;
        }
        if (st) {
            fail(u, st, &u->ctl_err);
            set_state(u, UP_RUNNING);
            break;
        }
        u->result = info;
        if ((!u->result.etag[0] || u->complete_unparsed) && build_ctl(u, CTL_HEAD) == S3F_OK) {
            /* Ceph RGW answers Complete without an ETag; HEAD shows it */
            set_state(u, UP_HEADING);
            start_ctl(u, CTL_HEAD, &act);
        } else {
            set_state(u, UP_DONE);
        }
        break;
    }
    case CTL_HEAD: {
        if (u->reconciling) {
            reconcile_head(u, st);
            break;
        }
        const char *dash = strrchr(u->ctl.info.etag, '-');
        if (u->complete_unparsed &&
            (st || !dash || strtoul(dash + 1, NULL, 10) != u->n_parts)) {
            /* not our object: report what Complete answered */
            fail(u, S3F_ERR_BAD_RESPONSE, &u->complete_err);
            set_state(u, UP_RUNNING);
            break;
        }
        if (st == S3F_OK) {
            s3f__strlcpy(u->result.etag, u->ctl.info.etag, sizeof(u->result.etag));
            u->result.last_modified = u->ctl.info.last_modified;
        }
        set_state(u, UP_DONE); /* the object exists either way */
        break;
    }
    case CTL_ABORT:
        if (st && st != S3F_ERR_NOT_FOUND && s3f__janitor_worth_retrying(st))
            s3f__janitor_add(u->x, u->bucket, u->key, u->upload_id); /* server away */
        else if (st && st != S3F_ERR_NOT_FOUND)
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: AbortMultipartUpload %s failed (%s): its parts may stay "
                     "until a lifecycle rule removes them",
                     u->resource, u->upload_id, u->ctl_err.message);
        set_state(u, UP_FAILED);
        break;
    case CTL_NONE:
        break;
    }
    advance(u, &act);
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &act);
    callback_exit(u);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void upload_free(struct upload *u) {
    if (!u)
        return;
    s3f__sched_detach(&u->x->sched, &u->entry);
    for (size_t i = 0; i < u->n_parts; i++) {
        release_chunks(u, &u->parts[i]);
        free(u->parts[i].chunks);
    }
    free(u->parts);
    s3f__op_cleanup(&u->ctl);
    free(u->upload_id);
    free(u->iov_end);
    if (u->src == SRC_FILE && u->fd >= 0)
        close(u->fd);
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

static enum s3f_status upload_new(struct s3f_client *c, const char *bucket, const char *key,
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
        upload_free(u);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
    }
    *out = u;
    return S3F_OK;
}

/* Wait until the upload reached DONE or FAILED and no callback runs; hand out the result. */
/* Seconds of clock skew allowed around the window of a CreateMultipartUpload's attempts:
 * the server's Initiated and Date have one-second resolution. Without a Date in the answer
 * the client's clock is all there is, and SigV4 lets it be 15 minutes off. */
#define ORPHAN_MARGIN_S 2
#define ORPHAN_MARGIN_NO_DATE_S 900

/* CreateMultipartUpload was retried after a lost response, and then succeeded or failed
 * (caller's thread, no lock held, the upload settled): an earlier attempt may have created
 * an upload that nobody knows.
 * Abort every upload of exactly this key, other than ours, that the server initiated
 * within the window of our attempts: from the first attempt's send to the answer, in the
 * server's clock (the answer's Date tells the skew), widened by ORPHAN_MARGIN_S. Another
 * writer's upload of the same key started in those few seconds would be aborted too: two
 * writers racing for one key within a second is taken to be one writer retrying. Failures
 * are logged, never the upload's. */
static void abort_orphans(struct upload *u) {
    if (!u->upload_id && !u->create_server_date) {
        /* Create failed and no answer told the server's time: a window 15 minutes wide
         * could take another writer's upload. Leave it to cleanup_uploads or a rule. */
        s3f__log(&u->c->logger, S3F_LOG_WARN,
                 "upload %s: CreateMultipartUpload failed after a lost response; an upload "
                 "it made may be left (see ListMultipartUploads)", u->resource);
        return;
    }
    int64_t lo = u->create_sent_s, hi = u->create_done_s, margin = ORPHAN_MARGIN_NO_DATE_S;
    if (u->create_server_date) {
        int64_t skew = u->create_server_date - u->create_done_s; /* server minus client */
        lo += skew;
        hi = u->create_server_date;
        margin = ORPHAN_MARGIN_S;
    }
    lo -= margin;
    hi += margin;
    char *key_marker = NULL, *id_marker = NULL;
    int aborted = 0;
    for (int page = 0; page < 100; page++) {
        struct s3f_uploads_page *pg = NULL;
        struct s3f_error e;
        s3f_error_clear(&e);
        if (s3f_list_multipart_uploads(u->c, u->bucket, u->key, key_marker, id_marker, &pg,
                                       &e) != S3F_OK) {
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: could not list multipart uploads to abort the one a lost "
                     "CreateMultipartUpload response may have left: %s", u->resource,
                     e.message);
            break;
        }
        for (size_t i = 0; i < pg->n_uploads; i++) {
            const struct s3f_upload_entry *x = &pg->uploads[i];
            if (strcmp(x->key, u->key) != 0 || (u->upload_id && !strcmp(x->upload_id, u->upload_id)))
                continue;
            if (x->initiated < lo || x->initiated > hi)
                continue;
            s3f_error_clear(&e);
            enum s3f_status ast =
                s3f_abort_multipart_upload(u->c, u->bucket, u->key, x->upload_id, &e);
            s3f__log(&u->c->logger, ast ? S3F_LOG_WARN : S3F_LOG_INFO,
                     "upload %s: multipart upload %s, initiated during our retried "
                     "CreateMultipartUpload (its response was lost): %s%s", u->resource,
                     x->upload_id, ast ? "abort failed: " : "aborted",
                     ast ? e.message : "");
            aborted += ast == S3F_OK;
        }
        free(key_marker);
        free(id_marker);
        key_marker = id_marker = NULL;
        bool more = pg->is_truncated && pg->next_key_marker &&
                    strcmp(pg->next_key_marker, u->key) == 0;
        if (more) {
            key_marker = s3f__strdup(pg->next_key_marker);
            id_marker = pg->next_upload_id_marker ? s3f__strdup(pg->next_upload_id_marker)
                                                  : NULL;
        }
        s3f_uploads_page_free(pg);
        if (!more || !key_marker)
            break;
    }
    free(key_marker);
    free(id_marker);
    (void)aborted;
}

static enum s3f_status upload_wait(struct upload *u, struct s3f_object_info *info,
                                   struct s3f_error *err) {
    pthread_mutex_lock(&u->lock);
    for (;;) {
        if (progress_moved(u)) {
            pthread_mutex_unlock(&u->lock);
            report_progress(u);
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
        abort_orphans(u);
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

/* ---- uploads of known size ----------------------------------------------------------- */

/* Checksum of bytes [off, off+len) of a file, read with pread into `scratch`. */
static enum s3f_status file_checksum(struct upload *u, uint64_t off, uint64_t len,
                                     char *scratch, struct s3f__checksum *ck) {
    while (len) {
        size_t want = len < SCRATCH_SIZE ? (size_t)len : SCRATCH_SIZE;
        ssize_t n = pread(u->fd, scratch, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? S3F_ERR_IO : S3F_ERR_BAD_RESPONSE;
        s3f__checksum_update(ck, scratch, (size_t)n);
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return S3F_OK;
}

static void iov_checksum(struct upload *u, uint64_t off, uint64_t len, struct s3f__checksum *ck) {
    uint64_t start = 0;
    for (size_t i = 0; i < u->n_iov && len; i++) {
        uint64_t end = u->iov_end[i];
        if (end > off) {
            uint64_t in = off - start;
            uint64_t n = u->iov[i].len - in < len ? u->iov[i].len - in : len;
            s3f__checksum_update(ck, (const char *)u->iov[i].base + in, (size_t)n);
            off += n;
            len -= n;
        }
        start = end;
    }
}

/* Plan the parts of `size` bytes, start CreateMultipartUpload when there are several, then
 * compute each part's checksum and queue it while the earlier ones are being sent. */
static enum s3f_status upload_known(struct upload *u, uint64_t size,
                                    struct s3f_object_info *info, struct s3f_error *err) {
    struct s3f_error e;
    s3f_error_clear(&e);
    uint64_t ps;
    enum s3f_status st = s3f__plan_part_size(size, u->part_size, &ps, &e);
    if (st) {
        if (err)
            *err = e;
        return st;
    }
    uint32_t n = s3f__plan_part_count(size, ps);
    if (u->src == SRC_COPY && size <= u->single_max) { /* one CopyObject */
        n = 1;
        ps = size;
    }
    u->part_size = ps;
    u->parts = calloc(n, sizeof(*u->parts));
    char *scratch = NULL;
    if (!u->parts || (u->src == SRC_FILE && u->alg != S3F_CHECKSUM_NONE &&
                      !(scratch = malloc(SCRATCH_SIZE))))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "upload", u->resource, "out of memory");
    u->cap_parts = u->n_parts = n;
    for (uint32_t i = 0; i < n; i++) {
        u->parts[i].offset = (uint64_t)i * ps;
        u->parts[i].size = i + 1 < n ? ps : size - (uint64_t)i * ps;
        u->parts[i].state = PART_FILLING;
        u->parts[i].qnext = -1;
        s3f__checksum_init(&u->parts[i].ck, u->alg);
    }
    s3f__log(&u->c->logger, S3F_LOG_DEBUG, "upload %s: %" PRIu64 " bytes, %u part%s of %" PRIu64,
             u->resource, size, n, n == 1 ? "" : "s", ps);
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    u->input_done = true;
    u->multipart = n > 1;
    if (u->multipart && build_ctl(u, CTL_CREATE) == S3F_OK)
        start_ctl(u, CTL_CREATE, &act);
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &act);

    for (uint32_t i = 0; i < n; i++) {
        struct upart *p = &u->parts[i];
        struct actions a = {0};
        enum s3f_status cst = S3F_OK;
        pthread_mutex_lock(&u->lock);
        bool failed = u->status != S3F_OK;
        pthread_mutex_unlock(&u->lock);
        if (failed)
            break;
        if (u->alg != S3F_CHECKSUM_NONE) {
            if (u->src == SRC_MEMORY)
                iov_checksum(u, p->offset, p->size, &p->ck);
            else
                cst = file_checksum(u, p->offset, p->size, scratch, &p->ck);
        }
        pthread_mutex_lock(&u->lock);
        if (cst) {
            char msg[256];
            snprintf(msg, sizeof(msg), "could not read the file: %s",
                     cst == S3F_ERR_IO ? strerror(errno) : "it became shorter");
            fail_msg(u, S3F_ERR_IO, "upload", msg);
        } else {
            part_set_state(u, i, PART_PREPARED);
            try_queue(u, i, &a);
        }
        advance(u, &a);
        pthread_mutex_unlock(&u->lock);
        do_actions(u, &a);
    }
    free(scratch);
    pthread_mutex_lock(&u->lock);
    struct actions a = {0};
    advance(u, &a);
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &a);
    return upload_wait(u, info, err);
}

enum s3f_status s3f_upload_iov(struct s3f_client *c, const char *bucket, const char *key,
                               const struct s3f_iovec *iov, size_t n_iov,
                               const struct s3f_upload_options *opts,
                               struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    if (n_iov && !iov)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", NULL, "iov is NULL");
    for (size_t i = 0; i < n_iov; i++)
        if (iov[i].len && !iov[i].base)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", NULL,
                                  "region %zu has no base pointer", i);
    struct upload *u;
    enum s3f_status st = upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->src = SRC_MEMORY;
    u->iov = iov;
    u->n_iov = n_iov;
    u->iov_end = calloc(n_iov ? n_iov : 1, sizeof(*u->iov_end));
    if (!u->iov_end) {
        upload_free(u);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "upload", NULL, "out of memory");
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n_iov; i++) {
        total += iov[i].len;
        u->iov_end[i] = total;
    }
    st = upload_known(u, total, info, err);
    upload_free(u);
    return st;
}

enum s3f_status s3f_upload_buffer(struct s3f_client *c, const char *bucket, const char *key,
                                  const void *data, size_t len,
                                  const struct s3f_upload_options *opts,
                                  struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", NULL, "data is NULL");
    struct s3f_iovec one = {(void *)(uintptr_t)data, len};
    return s3f_upload_iov(c, bucket, key, &one, len ? 1 : 0, opts, info, err);
}

enum s3f_status s3f_upload_file(struct s3f_client *c, const char *bucket, const char *key,
                                const char *path, const struct s3f_upload_options *opts,
                                struct s3f_object_info *info, struct s3f_error *err) {
    s3f_error_clear(err);
    if (!path || !*path)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", NULL, "path is empty");
    struct upload *u;
    enum s3f_status st = upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->src = SRC_FILE;
    u->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (u->fd < 0 || fstat(u->fd, &sb) != 0) {
        st = s3f__error_set(err, S3F_ERR_IO, "upload", path, "cannot open %s: %s", path,
                            strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = s3f__error_set(err, S3F_ERR_IO, "upload", path, "%s is not a regular file", path);
    } else {
#ifdef POSIX_FADV_SEQUENTIAL
        posix_fadvise(u->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
        st = upload_known(u, (uint64_t)sb.st_size, info, err);
    }
    upload_free(u);
    return st;
}

/* ---- server-side copies ------------------------------------------------------------- */

enum s3f_status s3f_copy(struct s3f_client *c, const char *src_bucket, const char *src_key,
                         const char *dst_bucket, const char *dst_key,
                         const struct s3f_copy_options *opts, struct s3f_object_info *info,
                         struct s3f_error *err) {
    static const struct s3f_copy_options defaults;
    if (!opts)
        opts = &defaults;
    s3f_error_clear(err);
    enum s3f_status st = s3f__op_check_args("copy", src_bucket, src_key, true, err);
    if (st)
        return st;
    if (opts->part_size_bytes &&
        (opts->part_size_bytes < S3F__PART_MIN || opts->part_size_bytes > S3F__PART_MAX))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "copy", NULL,
                              "part_size_bytes must be 5 MiB to 5 GiB, got %" PRIu64,
                              opts->part_size_bytes);
    struct s3f_upload_options uo;
    memset(&uo, 0, sizeof(uo));
    uo.checksum = S3F_CHECKSUM_NONE; /* the server copies the bytes; nothing to compute */
    uo.progress = opts->progress;
    uo.progress_user_data = opts->progress_user_data;
    struct upload *u;
    if ((st = upload_new(c, dst_bucket, dst_key, &uo, "copy", &u, err)))
        return st;
    u->src = SRC_COPY;
    u->part_size = opts->part_size_bytes ? opts->part_size_bytes
                   : u->x->part_size > S3F__COPY_PART_DEFAULT ? u->x->part_size
                                                               : S3F__COPY_PART_DEFAULT;
    u->single_max = opts->multipart_threshold_bytes ? opts->multipart_threshold_bytes
                                                     : u->part_size;
    if (u->single_max > S3F__PART_MAX)
        u->single_max = S3F__PART_MAX; /* CopyObject's limit */
    /* the source: its size, ETag (every request is pinned to it) and content type */
    struct s3f_object_info src;
    memset(&src, 0, sizeof(src));
    st = s3f_head_object(c, src_bucket, src_key, opts->src_version_id, &src, err);
    if (st == S3F_OK && opts->src_if_match && *opts->src_if_match &&
        strcmp(opts->src_if_match, src.etag) != 0)
        st = s3f__error_set(err, S3F_ERR_PRECONDITION_FAILED, "copy", NULL,
                            "the source's ETag is %s, not %s", src.etag, opts->src_if_match);
    if (st) {
        if (err && !err->resource[0])
            s3f__s3_resource(err->resource, sizeof(err->resource), src_bucket, src_key);
        goto out;
    }
    free(u->content_type);
    u->content_type = s3f__strdup(src.content_type[0] ? src.content_type
                                                      : "application/octet-stream");
    u->src_bucket = s3f__strdup(src_bucket);
    u->src_key = s3f__strdup(src_key);
    u->src_etag = src.etag[0] ? s3f__strdup(src.etag) : NULL;
    u->src_version_id = opts->src_version_id ? s3f__strdup(opts->src_version_id) : NULL;
    if (!u->content_type || !u->src_bucket || !u->src_key || (src.etag[0] && !u->src_etag) ||
        (opts->src_version_id && !u->src_version_id)) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "copy", NULL, "out of memory");
        goto out;
    }
    struct s3f_object_info res;
    memset(&res, 0, sizeof(res));
    st = upload_known(u, src.size, &res, err);
    if (st == S3F_OK && info) {
        *info = res;
        s3f__strlcpy(info->content_type, u->content_type, sizeof(info->content_type));
    }
out:
    upload_free(u);
    return st;
}

/* ---- the streaming writer ------------------------------------------------------------- */

struct s3f_writer {
    struct upload *u;
};

/* Make room for part `i` (lock held). */
static enum s3f_status add_part(struct upload *u, uint64_t offset) {
    size_t i = u->n_parts;
    uint64_t planned = s3f__plan_stream_part_size(u->part_size, u->part_cap, (uint32_t)i + 1);
    if (planned == 0) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_INVALID_ARGUMENT, "upload", u->resource,
                       "the stream is larger than 10000 parts hold (%" PRIu64 " bytes with "
                       "these part and memory limits)",
                       s3f__plan_stream_capacity(u->part_size, u->part_cap, S3F__MAX_PARTS));
        fail(u, S3F_ERR_INVALID_ARGUMENT, &e);
        return S3F_ERR_INVALID_ARGUMENT;
    }
    if (i == u->cap_parts) {
        size_t cap = u->cap_parts ? u->cap_parts * 2 : 16;
        struct upart *np = realloc(u->parts, cap * sizeof(*np));
        if (!np)
            return fail_msg(u, S3F_ERR_NO_MEMORY, "upload", "out of memory");
        u->parts = np;
        u->cap_parts = cap;
    }
    struct upart *p = &u->parts[i];
    memset(p, 0, sizeof(*p));
    size_t cs = u->x->pool.chunk_size;
    p->cap_chunks = (size_t)((planned + cs - 1) / cs);
    p->chunks = calloc(p->cap_chunks, sizeof(*p->chunks));
    if (!p->chunks)
        return fail_msg(u, S3F_ERR_NO_MEMORY, "upload", "out of memory");
    p->offset = offset;
    p->planned = planned;
    p->state = PART_FILLING;
    p->qnext = -1;
    s3f__checksum_init(&p->ck, u->alg);
    u->n_parts++;
    return S3F_OK;
}

enum s3f_status s3f_writer_open(struct s3f_client *c, const char *bucket, const char *key,
                                const struct s3f_upload_options *opts, struct s3f_writer **out,
                                struct s3f_error *err) {
    s3f_error_clear(err);
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_writer_open", NULL,
                              "out is NULL");
    *out = NULL;
    struct upload *u;
    enum s3f_status st = upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->src = SRC_CHUNKS;
    /* a part must fit in the pool at least twice over, so that one can fill while one
     * is sent */
    uint64_t cap = u->x->memory_limit / 2 / S3F__POOL_CHUNK * S3F__POOL_CHUNK;
    u->part_cap = cap < S3F__PART_MIN ? S3F__PART_MIN : cap;
    if (u->part_size > u->part_cap)
        u->part_size = u->part_cap;
    struct s3f_writer *w = calloc(1, sizeof(*w));
    pthread_mutex_lock(&u->lock);
    st = w ? add_part(u, 0) : S3F_ERR_NO_MEMORY;
    pthread_mutex_unlock(&u->lock);
    if (st) {
        free(w);
        upload_free(u);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "upload", NULL, "out of memory");
    }
    w->u = u;
    *out = w;
    return S3F_OK;
}

/* The current part is full and more bytes come: send it (the first time, start the
 * multipart upload) and begin the next. */
static enum s3f_status seal_and_next(struct upload *u) {
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    if (u->status)
        goto out;
    size_t cur = u->cur;
    if (cur == 0 && !u->multipart) {
        u->multipart = true;
        if (build_ctl(u, CTL_CREATE) == S3F_OK)
            start_ctl(u, CTL_CREATE, &act);
    }
    part_set_state(u, cur, PART_PREPARED);
    try_queue(u, cur, &act);
    struct upart *p = &u->parts[cur];
    if (add_part(u, p->offset + p->size) == S3F_OK)
        u->cur = cur + 1;
out:;
    enum s3f_status st = u->status;
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &act);
    return st;
}

static enum s3f_status writer_error(struct upload *u, struct s3f_error *err) {
    pthread_mutex_lock(&u->lock);
    enum s3f_status st = u->status;
    if (st && err)
        *err = u->err;
    pthread_mutex_unlock(&u->lock);
    return st;
}

enum s3f_status s3f_writer_write(struct s3f_writer *w, const void *data, size_t len,
                                 struct s3f_error *err) {
    s3f_error_clear(err);
    if (!w)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_writer_write", NULL,
                              "writer is NULL");
    struct upload *u = w->u;
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_writer_write", NULL,
                              "data is NULL");
    enum s3f_status st = writer_error(u, err);
    if (st)
        return st;
    const char *src = data;
    size_t cs = u->x->pool.chunk_size;
    while (len) {
        struct upart *p = &u->parts[u->cur];
        if (p->size == p->planned) {
            if ((st = seal_and_next(u)))
                return writer_error(u, err);
            continue;
        }
        size_t ci = (size_t)(p->size / cs), in = (size_t)(p->size % cs);
        if (ci == p->n_chunks) {
            /* The whole part's buffer is taken at once, when its first byte comes, and
             * the call blocks while the pool cannot supply it (back-pressure). Taking it
             * chunk by chunk would let several writers each hold part of a part and wait
             * for the rest forever; this way a waiting writer holds only sealed parts,
             * which are sent and give their memory back. */
            st = s3f__pool_acquire(&u->x->pool, p->cap_chunks, p->chunks, true);
            if (st) {
                pthread_mutex_lock(&u->lock);
                fail_msg(u, st, "upload", "out of memory for a part buffer");
                pthread_mutex_unlock(&u->lock);
                return writer_error(u, err);
            }
            p->n_chunks = p->cap_chunks;
            if ((st = writer_error(u, err)))
                return st;
        }
        size_t n = cs - in;
        if (n > len)
            n = len;
        if (n > p->planned - p->size)
            n = (size_t)(p->planned - p->size);
        memcpy((char *)p->chunks[ci] + in, src, n);
        s3f__checksum_update(&p->ck, src, n);
        p->size += n;
        u->written += n;
        src += n;
        len -= n;
    }
    report_progress(u); /* of the parts sent meanwhile, on this (the caller's) thread */
    return S3F_OK;
}

uint64_t s3f_writer_tell(const struct s3f_writer *w) {
    return w ? w->u->written : 0;
}

static void writer_finish(struct s3f_writer *w) {
    struct upload *u = w->u;
    /* the part being filled is the writer's own: free its memory now that nothing writes */
    pthread_mutex_lock(&u->lock);
    struct upart *p = &u->parts[u->cur];
    if (p->state == PART_FILLING)
        release_chunks(u, p);
    pthread_mutex_unlock(&u->lock);
    upload_free(u);
    free(w);
}

enum s3f_status s3f_writer_close(struct s3f_writer *w, struct s3f_object_info *info,
                                 struct s3f_error *err) {
    s3f_error_clear(err);
    if (!w)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "s3f_writer_close", NULL,
                              "writer is NULL");
    struct upload *u = w->u;
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    if (!u->status) {
        /* the last part: the only one (a single PutObject) or the tail of the multipart */
        u->input_done = true;
        part_set_state(u, u->cur, PART_PREPARED);
        try_queue(u, u->cur, &act);
    } else {
        struct upart *p = &u->parts[u->cur];
        if (p->state == PART_FILLING)
            release_chunks(u, p);
    }
    advance(u, &act);
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &act);
    enum s3f_status st = upload_wait(u, info, err);
    writer_finish(w);
    return st;
}

void s3f_writer_abort(struct s3f_writer *w) {
    if (!w)
        return;
    struct upload *u = w->u;
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    if (u->state != UP_DONE) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_ABORTED, "upload", u->resource, "the upload was aborted");
        fail(u, S3F_ERR_ABORTED, &e);
    }
    struct upart *p = &u->parts[u->cur];
    if (p->state == PART_FILLING)
        release_chunks(u, p);
    advance(u, &act);
    pthread_mutex_unlock(&u->lock);
    do_actions(u, &act);
    upload_wait(u, NULL, NULL);
    writer_finish(w);
}
