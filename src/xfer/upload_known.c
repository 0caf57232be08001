/* Upload sources of known size, one adapter each (struct up_source): memory regions
 * (s3f_upload_iov, s3f_upload_buffer), a file (s3f_upload_file, read by offset on the I/O
 * threads), and server-side copies (s3f_copy: UploadPartCopy of ranges of the source).
 * Parts and checksums are planned here; the session (upload.c) sends them.
 *
 * A file's bytes are read twice: once on the caller's thread for the part's checksum,
 * which goes in the request's headers, then by the I/O thread that sends the part.
 * Trailing checksums (aws-chunked, STREAMING-UNSIGNED-PAYLOAD-TRAILER) would need only the
 * second read, but Ceph RGW 16.2 stores such a body with its chunk framing. */
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

#define SCRATCH_SIZE ((size_t)1 << 20) /* file reads for part checksums */

/* ---- the adapters: memory regions, a file, a server-side copy ----------------------- */

/* Bodies (I/O threads): the bytes of part q at `offset` of its body. */
static long read_iov(void *ud, char *buf, size_t len, uint64_t offset) {
    struct upreq *q = ud;
    struct upload *u = q->u;
    uint64_t pos = q->off + offset;
    size_t done = 0;
    for (size_t i = s3f__xfer_iov_find(u->iov_end, u->n_iov, pos); i < u->n_iov && done < len; i++) {
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

static enum s3f_status memory_request(struct upload *u, struct upreq *q, size_t i) {
    S3F_ASSERT_HELD(&u->lock);
    enum s3f_status st = s3f__up_data_request(u, q, i);
    const struct upart *p = &u->parts[i];
    if (st || !p->size)
        return st;
    /* a part inside one region is sent from it directly */
    size_t lo = s3f__xfer_iov_find(u->iov_end, u->n_iov, p->offset);
    struct s3f__s3_request *r = &q->op.r;
    if (lo < u->n_iov && p->offset + p->size <= u->iov_end[lo]) {
        uint64_t start = u->iov_end[lo] - u->iov[lo].len;
        r->body = (const char *)u->iov[lo].base + (p->offset - start);
    } else {
        r->body = NULL;
        r->read_body = read_iov;
        r->read_ud = q;
    }
    return S3F_OK;
}

static void memory_cleanup(struct upload *u) {
    free(u->iov_end);
    u->iov_end = NULL;
}

static const struct up_source memory_source = {
    .name = "memory",
    .request = memory_request,
    .cleanup = memory_cleanup,
};

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

static enum s3f_status file_request(struct upload *u, struct upreq *q, size_t i) {
    S3F_ASSERT_HELD(&u->lock);
    return s3f__up_read_request(u, q, i, read_file);
}

/* The transport saw an aborted read of the file: say why. */
static enum s3f_status file_done(struct upload *u, struct upreq *q, enum s3f_status st) {
    S3F_ASSERT_HELD(&u->lock);
    if (st == S3F_OK || !q->read_errno)
        return st;
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
    return st;
}

static void file_cleanup(struct upload *u) {
    if (u->fd >= 0)
        close(u->fd);
    u->fd = -1;
}

static const struct up_source file_source = {
    .name = "file",
    .request = file_request,
    .done = file_done,
    .cleanup = file_cleanup,
};

/* UploadPartCopy of the part's range of the source, or one CopyObject; no body: the server
 * reads the source. */
static enum s3f_status copy_request(struct upload *u, struct upreq *q, size_t i) {
    S3F_ASSERT_HELD(&u->lock);
    const struct upart *p = &u->parts[i];
    enum s3f_status st;
    if (u->multipart)
        st = s3f__op_upload_part_copy(&q->op, u->bucket, u->key, u->upload_id, (int)i + 1,
                                      u->src_bucket, u->src_key, u->src_version_id, true,
                                      p->offset, p->offset + p->size - 1, u->src_etag,
                                      &q->err);
    else
        st = s3f__op_copy_object(&q->op, u->bucket, u->key, u->src_bucket, u->src_key,
                                 u->src_version_id, u->src_etag, &q->err);
    q->op.r.body = "";
    q->op.r.body_len = 0;
    return st;
}

/* The ETag is in the XML answer. */
static enum s3f_status copy_done(struct upload *u, struct upreq *q, enum s3f_status st) {
    S3F_ASSERT_HELD(&u->lock);
    if (st == S3F_OK)
        st = u->multipart ? s3f__op_upload_part_copy_result(&q->op, &q->op.info, &q->err)
                          : s3f__op_copy_object_result(&q->op, &q->op.info, &q->err);
    return st;
}

static const struct up_source copy_source = {
    .name = "copy",
    .request = copy_request,
    .done = copy_done,
    .verify_before_complete = true,
    .server_side = true,
};

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
    if (u->source == &copy_source && size <= u->single_max) { /* one CopyObject */
        n = 1;
        ps = size;
    }
    u->part_size = ps;
    u->parts = calloc(n, sizeof(*u->parts));
    char *scratch = NULL;
    if (!u->parts || (u->source == &file_source && u->alg != S3F_CHECKSUM_NONE &&
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
    if (u->multipart && s3f__up_build_ctl(u, CTL_CREATE) == S3F_OK)
        s3f__up_start_ctl(u, CTL_CREATE, &act);
    pthread_mutex_unlock(&u->lock);
    s3f__up_do_actions(u, &act);

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
            if (u->source == &memory_source)
                iov_checksum(u, p->offset, p->size, &p->ck);
            else
                cst = file_checksum(u, p->offset, p->size, scratch, &p->ck);
        }
        pthread_mutex_lock(&u->lock);
        if (cst) {
            char msg[256];
            if (cst == S3F_ERR_IO)
                snprintf(msg, sizeof(msg), "could not read the file: %s", strerror(errno));
            else /* the same words as a short read on an I/O thread (upload.c) */
                snprintf(msg, sizeof(msg),
                         "the source file ended before part %zu did (it was to end at offset "
                         "%" PRIu64 "): it shrank during the upload",
                         (size_t)i + 1, p->offset + p->size);
            s3f__up_fail_msg(u, S3F_ERR_IO, "upload", msg);
        } else {
            part_set_state(u, i, PART_PREPARED);
            s3f__up_try_queue(u, i, &a);
        }
        s3f__up_advance(u, &a);
        pthread_mutex_unlock(&u->lock);
        s3f__up_do_actions(u, &a);
    }
    free(scratch);
    pthread_mutex_lock(&u->lock);
    struct actions a = {0};
    s3f__up_advance(u, &a);
    pthread_mutex_unlock(&u->lock);
    s3f__up_do_actions(u, &a);
    return s3f__upload_wait(u, info, err);
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
    enum s3f_status st = s3f__upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->source = &memory_source;
    u->iov = iov;
    u->n_iov = n_iov;
    u->iov_end = calloc(n_iov ? n_iov : 1, sizeof(*u->iov_end));
    if (!u->iov_end) {
        s3f__upload_free(u);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "upload", NULL, "out of memory");
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n_iov; i++) {
        total += iov[i].len;
        u->iov_end[i] = total;
    }
    st = upload_known(u, total, info, err);
    s3f__upload_free(u);
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
    enum s3f_status st = s3f__upload_new(c, bucket, key, opts, "upload", &u, err);
    if (st)
        return st;
    u->source = &file_source;
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
    s3f__upload_free(u);
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
    if ((st = s3f__upload_new(c, dst_bucket, dst_key, &uo, "copy", &u, err)))
        return st;
    u->source = &copy_source;
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
    st = s3f__head_copy_source(c, src_bucket, src_key, opts->src_version_id, &src, err);
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
    s3f__upload_free(u);
    return st;
}
