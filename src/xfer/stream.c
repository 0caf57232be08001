/* Stream downloads (s3f_download_stream): a whole object delivered to a sink in order, for
 * destinations that cannot be written out of order (stdout, a pipe). One GET would use one
 * connection, which on S3 carries tens of MB/s; this reads an object larger than a part
 * (one of at most a part goes in one GET, as it arrives) front to back through
 * a reader (reader.c), whose read-ahead keeps as many ranged GETs in flight as the
 * bandwidth-delay estimate (bdp.c) says fill the link, and hands the bytes to the sink on
 * the caller's thread as they become contiguous.
 *
 * The HEAD that sizes the object also asks for its checksum (x-amz-checksum-mode); a
 * whole-object one is computed over the bytes delivered and compared at the end. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"
#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define READ_BYTES ((size_t)1 << 20) /* bytes handed to the sink per call, at most */

/* An object of at most one part goes in one GET, streamed as it arrives (s3f_get_object:
 * resumed from the byte reached after a broken connection, its checksum verified). */
struct one_get {
    s3f_write_fn sink;
    void *sink_ud;
    const struct s3f_download_options *opts;
    uint64_t size, done;
};

static int one_get_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct one_get *g = ud;
    if (g->sink(g->sink_ud, data, len, offset) != 0)
        return 1;
    g->done = offset + len;
    if (g->opts->progress)
        g->opts->progress(g->opts->progress_user_data, g->done, g->size);
    return 0;
}

static int discard_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    return 0;
}

/* A HEAD's error answer has no body, so no S3 code (the executor derives "NotFound" or
 * "Forbidden" from the status: NoSuchKey and NoSuchBucket read alike). For the refusals
 * (400, 403, 404) ask once more with a GET of one byte, whose error document names S3's
 * code, and report that answer instead when it is the same refusal. */
static void explain_head_error(struct s3f_client *c, const char *bucket, const char *key,
                               const struct s3f_download_options *opts,
                               struct s3f_error *err) {
    if (!err || strcmp(err->operation, "HeadObject") != 0 ||
        (err->http_status != 400 && err->http_status != 403 && err->http_status != 404))
        return;
    struct s3f_get_options go = {
        .has_range = 1,
        .range_start = 0,
        .range_end = 0,
        .if_match = opts->if_match,
        .version_id = opts->version_id,
    };
    struct s3f_error gerr;
    s3f_error_clear(&gerr);
    if (s3f_get_object(c, bucket, key, &go, discard_sink, NULL, NULL, &gerr) != S3F_OK &&
        gerr.http_status == err->http_status)
        *err = gerr;
}

enum s3f_status s3f_download_stream(struct s3f_client *c, const char *bucket, const char *key,
                                    const struct s3f_download_options *opts, s3f_write_fn sink,
                                    void *sink_user_data, struct s3f_object_info *info,
                                    struct s3f_error *err) {
    static const char *op_name = "GetObject";
    s3f_error_clear(err);
    if (!c || !sink)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "client and sink are required");
    struct s3f__xfer_shared *x;
    enum s3f_status st = s3f__xfer_whole_get_args(c, op_name, bucket, key, &opts, &x, err);
    if (st)
        return st;
    bool verify = opts->verify_checksum >= 0 && x->checksum != S3F_CHECKSUM_NONE;
    char resource[600];
    s3f__s3_resource(resource, sizeof(resource), bucket, key);

    struct s3f__op head;
    memset(&head, 0, sizeof(head));
    st = s3f__op_get(&head, true, bucket, key, opts->version_id, opts->if_match, verify, err);
    if (st == S3F_OK)
        st = s3f__s3_execute(c, &head.r, err);
    struct s3f_object_info oi = head.info;
    s3f__op_cleanup(&head);
    if (st) {
        explain_head_error(c, bucket, key, opts, err);
        return st;
    }

    struct s3f__checksum ck;
    char want[S3F__CHECKSUM_B64_MAX + 8] = "";
    s3f__checksum_init(&ck, S3F_CHECKSUM_NONE);
    if (verify)
        s3f__xfer_choose_checksum(oi.checksum_crc32c, oi.checksum_crc32, oi.checksum_crc64nvme,
                                  x->checksum, &ck, want, sizeof(want));

    if (oi.size <= x->part_size) {
        struct s3f_get_options go;
        memset(&go, 0, sizeof(go));
        go.if_match = opts->if_match ? opts->if_match : (oi.etag[0] ? oi.etag : NULL);
        go.version_id = opts->version_id;
        go.verify_checksum = verify;
        struct one_get g = {sink, sink_user_data, opts, oi.size, 0};
        if (opts->progress)
            opts->progress(opts->progress_user_data, 0, oi.size);
        st = s3f_get_object(c, bucket, key, &go, one_get_sink, &g, NULL, err);
        if (st == S3F_OK && g.done != oi.size) /* the GET's answer sized nothing: the HEAD did */
            st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op_name, resource,
                                "the object has %" PRIu64 " bytes (HEAD), the GET brought "
                                "%" PRIu64,
                                oi.size, g.done);
        if (info) {
            if (st == S3F_OK)
                *info = oi;
            else
                memset(info, 0, sizeof(*info));
        }
        return st;
    }

    struct s3f_reader_options ro;
    memset(&ro, 0, sizeof(ro));
    ro.version_id = opts->version_id;
    ro.tail_bytes = UINT64_MAX; /* read front to back: no tail to cache */
    ro.known = 1;
    ro.known_size = oi.size;
    ro.known_etag = opts->if_match ? opts->if_match : oi.etag;
    struct s3f_reader *rd = NULL;
    char *buf = NULL;
    if (!ro.known_etag[0]) {
        st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, "HeadObject", resource,
                            "the answer carries no ETag to pin the object with");
        goto out;
    }
    if ((st = s3f_reader_open(c, bucket, key, &ro, &rd, err)))
        goto out;
    s3f__reader_sequential(rd);
    buf = malloc(READ_BYTES);
    if (!buf) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, op_name, resource, "out of memory");
        goto out;
    }
    uint64_t done = 0, t0 = s3f__now_ns();
    if (opts->progress)
        opts->progress(opts->progress_user_data, 0, oi.size);
    while (done < oi.size) {
        size_t n = 0;
        if ((st = s3f_reader_read(rd, buf, READ_BYTES, &n, err)))
            goto out;
        if (n == 0) {
            st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, op_name, resource,
                                "the object ended after %" PRIu64 " of %" PRIu64 " bytes",
                                done, oi.size);
            goto out;
        }
        s3f__checksum_update(&ck, buf, n);
        if (sink(sink_user_data, buf, n, done) != 0) {
            st = s3f__error_set(err, S3F_ERR_ABORTED, op_name, resource,
                                "stopped by the sink at byte %" PRIu64, done);
            goto out;
        }
        done += n;
        if (opts->progress)
            opts->progress(opts->progress_user_data, done, oi.size);
    }
    if (want[0]) {
        char got[S3F__CHECKSUM_B64_MAX];
        s3f__checksum_b64(&ck, got);
        if (strcmp(got, want) != 0) {
            st = s3f__error_set(err, S3F_ERR_CHECKSUM, op_name, resource,
                                "%s of the downloaded bytes is %s, the server's is %s",
                                s3f__checksum_algorithm_name(ck.alg), got, want);
            goto out;
        }
    }
    s3f__log(&c->logger, S3F_LOG_DEBUG, "download %s: %" PRIu64 " bytes streamed, %.3f s%s%s",
             resource, oi.size, (double)(s3f__now_ns() - t0) / 1e9,
             want[0] ? ", verified " : "", want[0] ? s3f__checksum_algorithm_name(ck.alg) : "");
out:
    free(buf);
    s3f_reader_close(rd);
    if (info) {
        if (st == S3F_OK)
            *info = oi;
        else
            memset(info, 0, sizeof(*info));
    }
    return st;
}
