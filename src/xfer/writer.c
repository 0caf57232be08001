/* The streaming writer (s3f_writer_*): bytes copied into pool chunks, parts sealed as
 * they fill (growing part sizes for an unknown total), sent by the upload session
 * (upload.c) while the caller goes on writing. */
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

/* ---- the adapter: parts from pool chunks ---------------------------------------------- */

/* Body (I/O threads): the bytes of part q at `offset` of its body, from its chunks. */
static long read_chunks(void *ud, char *buf, size_t len, uint64_t offset) {
    struct upreq *q = ud;
    size_t cs = q->u->x->pool.chunk_size;
    size_t ci = (size_t)(offset / cs), in = (size_t)(offset % cs);
    size_t n = cs - in < len ? cs - in : len;
    memcpy(buf, (const char *)q->chunks[ci] + in, n);
    return (long)n;
}

static enum s3f_status chunks_request(struct upload *u, struct upreq *q, size_t i) {
    S3F_ASSERT_HELD(&u->lock);
    return s3f__up_read_request(u, q, i, read_chunks);
}

static const struct up_source chunks_source = {
    .name = "writer",
    .request = chunks_request,
};

/* ---- the streaming writer ------------------------------------------------------------- */

struct s3f_writer {
    struct upload *u;
};

/* Make room for part `i` (lock held). */
static enum s3f_status add_part(struct upload *u, uint64_t offset) {
    S3F_ASSERT_HELD(&u->lock);
    size_t i = u->n_parts;
    uint64_t planned = s3f__plan_stream_part_size(u->part_size, u->part_cap, (uint32_t)i + 1);
    if (planned == 0) {
        struct s3f_error e;
        s3f_error_clear(&e);
        s3f__error_set(&e, S3F_ERR_INVALID_ARGUMENT, "upload", u->resource,
                       "the stream is larger than 10000 parts hold (%" PRIu64 " bytes with "
                       "these part and memory limits)",
                       s3f__plan_stream_capacity(u->part_size, u->part_cap, S3F__MAX_PARTS));
        s3f__up_fail(u, S3F_ERR_INVALID_ARGUMENT, &e);
        return S3F_ERR_INVALID_ARGUMENT;
    }
    if (i == u->cap_parts) {
        size_t cap = u->cap_parts ? u->cap_parts * 2 : 16;
        struct upart *np = realloc(u->parts, cap * sizeof(*np));
        if (!np)
            return s3f__up_fail_msg(u, S3F_ERR_NO_MEMORY, "upload", "out of memory");
        u->parts = np;
        u->cap_parts = cap;
    }
    struct upart *p = &u->parts[i];
    memset(p, 0, sizeof(*p));
    size_t cs = u->x->pool.chunk_size;
    p->cap_chunks = (size_t)((planned + cs - 1) / cs);
    p->chunks = calloc(p->cap_chunks, sizeof(*p->chunks));
    if (!p->chunks)
        return s3f__up_fail_msg(u, S3F_ERR_NO_MEMORY, "upload", "out of memory");
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
    enum s3f_status st = s3f__upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->source = &chunks_source;
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
        s3f__upload_free(u);
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
        if (s3f__up_build_ctl(u, CTL_CREATE) == S3F_OK)
            s3f__up_start_ctl(u, CTL_CREATE, &act);
    }
    part_set_state(u, cur, PART_PREPARED);
    s3f__up_try_queue(u, cur, &act);
    struct upart *p = &u->parts[cur];
    if (add_part(u, p->offset + p->size) == S3F_OK)
        u->cur = cur + 1;
out:;
    enum s3f_status st = u->status;
    pthread_mutex_unlock(&u->lock);
    s3f__up_do_actions(u, &act);
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
                char msg[400];
                double wait_s = (double)(u->x->pool.wait_timeout_ms
                                             ? u->x->pool.wait_timeout_ms
                                             : 60000) / 1000.0;
                snprintf(msg, sizeof(msg),
                         "no room in the buffer pool (memory_limit %" PRIu64 " MiB) for a "
                         "part buffer of %zu MiB: nothing was given back for %.1f s and no "
                         "request is in flight (other writers of this client hold it: close "
                         "or abort them, or raise memory_limit)",
                         u->x->memory_limit >> 20, p->cap_chunks * cs >> 20, wait_s);
                if (st == S3F_ERR_TIMEOUT)
                    s3f__up_fail_msg(u, S3F_ERR_NO_MEMORY, "upload", msg);
                else
                    s3f__up_fail_msg(u, st, "upload", "out of memory for a part buffer");
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
    s3f__up_report_progress(u); /* of the parts sent meanwhile, on this (the caller's) thread */
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
        s3f__up_release_chunks(u, p);
    pthread_mutex_unlock(&u->lock);
    s3f__upload_free(u);
    free(w);
}

/* The end of close and abort (u->lock held, released here): take the next step, wait for
 * the upload to settle, free the writer. */
static enum s3f_status writer_settle(struct s3f_writer *w, struct actions *act,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    struct upload *u = w->u;
    S3F_ASSERT_HELD(&u->lock);
    s3f__up_advance(u, act);
    pthread_mutex_unlock(&u->lock);
    s3f__up_do_actions(u, act);
    enum s3f_status st = s3f__upload_wait(u, info, err);
    writer_finish(w);
    return st;
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
        s3f__up_try_queue(u, u->cur, &act);
    } else {
        struct upart *p = &u->parts[u->cur];
        if (p->state == PART_FILLING)
            s3f__up_release_chunks(u, p);
    }
    return writer_settle(w, &act, info, err);
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
        s3f__up_fail(u, S3F_ERR_ABORTED, &e);
    }
    struct upart *p = &u->parts[u->cur];
    if (p->state == PART_FILLING)
        s3f__up_release_chunks(u, p);
    writer_settle(w, &act, NULL, NULL);
}
