/* The multipart operations of the public API: Create, UploadPart, UploadPartCopy, Complete,
 * Abort, ListParts and ListMultipartUploads, each through the prepared requests of
 * ops_prepared.c where the engine shares them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/ops_common.h"

/* ---- multipart ------------------------------------------------------------------------ */

static enum s3f_status check_upload_id(const char *op, const char *upload_id,
                                       struct s3f_error *err) {
    if (!upload_id || !*upload_id)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL, "upload id is empty");
    return S3F_OK;
}

enum s3f_status s3f_create_multipart_upload(struct s3f_client *c, const char *bucket,
                                            const char *key,
                                            const struct s3f_put_options *opts,
                                            char **upload_id, struct s3f_error *err) {
    static const struct s3f_put_options defaults;
    if (!opts)
        opts = &defaults;
    enum s3f_status st = s3f__op_check_args("CreateMultipartUpload", bucket, key, true, err);
    if (st)
        return st;
    *upload_id = NULL;
    struct s3f__checksum ck;
    if ((st = s3f__op_checksum_start(opts->checksum, &ck, "CreateMultipartUpload", err)))
        return st;
    struct s3f__op op;
    s3f__op_create_multipart(&op, bucket, key, opts->content_type, ck.alg, false);
    st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_OK)
        st = s3f__op_create_multipart_result(&op, upload_id, err);
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_upload_part(struct s3f_client *c, const char *bucket, const char *key,
                                const char *upload_id, int part_number, const void *data,
                                size_t len, enum s3f_checksum_algorithm checksum,
                                struct s3f_part_info *out, struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("UploadPart", bucket, key, true, err);
    if (st || (st = check_upload_id("UploadPart", upload_id, err)))
        return st;
    if (len > ((uint64_t)5 << 30))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "part of %zu bytes is over the 5 GiB limit", len);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "data is NULL");
    struct s3f__checksum ck;
    if ((st = s3f__op_checksum_start(checksum, &ck, "UploadPart", err)))
        return st;
    s3f__checksum_update(&ck, data, len);
    struct s3f__op op;
    st = s3f__op_upload_part(&op, bucket, key, upload_id, part_number, &ck, err);
    if (st == S3F_OK) {
        op.r.body = data ? data : "";
        op.r.body_len = len;
        st = s3f__s3_execute(c, &op.r, err);
    }
    if (st == S3F_OK && out) {
        memset(out, 0, sizeof(*out));
        out->part_number = part_number;
        out->size = len;
        s3f__strlcpy(out->etag, op.info.etag, sizeof(out->etag));
        out->checksum_algorithm = ck.alg;
        if (ck.alg != S3F_CHECKSUM_NONE)
            s3f__checksum_b64(&ck, out->checksum);
    }
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_upload_part_copy(struct s3f_client *c, const char *bucket, const char *key,
                                     const char *upload_id, int part_number,
                                     const char *src_bucket, const char *src_key,
                                     const char *src_version_id, uint64_t first,
                                     uint64_t last, const char *src_if_match,
                                     struct s3f_part_info *out, struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("UploadPartCopy", bucket, key, true, err);
    if (st || (st = check_upload_id("UploadPartCopy", upload_id, err)))
        return st;
    bool has_range = last != UINT64_MAX;
    struct s3f__op op;
    st = s3f__op_upload_part_copy(&op, bucket, key, upload_id, part_number, src_bucket,
                                  src_key, src_version_id, has_range, first, last,
                                  src_if_match, err);
    if (st == S3F_OK)
        st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_OK) {
        memset(&op.info, 0, sizeof(op.info));
        st = s3f__op_upload_part_copy_result(&op, &op.info, err);
    }
    if (st == S3F_OK && out) {
        memset(out, 0, sizeof(*out));
        out->part_number = part_number;
        out->size = has_range ? last - first + 1 : 0;
        out->last_modified = op.info.last_modified;
        s3f__strlcpy(out->etag, op.info.etag, sizeof(out->etag));
        out->checksum_algorithm = S3F_CHECKSUM_NONE;
        static const struct {
            enum s3f_checksum_algorithm alg;
            size_t off;
        } fields[] = {
            {S3F_CHECKSUM_CRC32C, offsetof(struct s3f_object_info, checksum_crc32c)},
            {S3F_CHECKSUM_CRC32, offsetof(struct s3f_object_info, checksum_crc32)},
            {S3F_CHECKSUM_CRC64NVME, offsetof(struct s3f_object_info, checksum_crc64nvme)},
        };
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            const char *v = (const char *)&op.info + fields[i].off;
            if (*v) {
                s3f__strlcpy(out->checksum, v, sizeof(out->checksum));
                out->checksum_algorithm = fields[i].alg;
                break;
            }
        }
    }
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "UploadPartCopy", sizeof(err->operation));
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_complete_multipart_upload(struct s3f_client *c, const char *bucket,
                                              const char *key, const char *upload_id,
                                              const struct s3f_part_info *parts,
                                              size_t n_parts, struct s3f_object_info *info,
                                              struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("CompleteMultipartUpload", bucket, key, true, err);
    if (st || (st = check_upload_id("CompleteMultipartUpload", upload_id, err)))
        return st;
    struct s3f__op op;
    /* the parts say which checksum they carry (DEFAULT: CRC32C, as UploadPart sends) */
    enum s3f_checksum_algorithm alg = n_parts && parts ? parts[0].checksum_algorithm
                                                       : S3F_CHECKSUM_DEFAULT;
    st = s3f__op_complete_multipart(&op, bucket, key, upload_id, parts, n_parts,
                                    alg == S3F_CHECKSUM_DEFAULT ? S3F_CHECKSUM_CRC32C : alg,
                                    NULL, err);
    if (st == S3F_OK)
        st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_OK) {
        st = s3f__op_complete_multipart_result(&op, &op.info, err);
        if (st == S3F_OK && info)
            *info = op.info;
    }
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_abort_multipart_upload(struct s3f_client *c, const char *bucket,
                                           const char *key, const char *upload_id,
                                           struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("AbortMultipartUpload", bucket, key, true, err);
    if (st || (st = check_upload_id("AbortMultipartUpload", upload_id, err)))
        return st;
    struct s3f__op op;
    if ((st = s3f__op_abort_multipart(&op, bucket, key, upload_id, err)) == S3F_OK)
        st = s3f__s3_execute(c, &op.r, err);
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_list_parts(struct s3f_client *c, const char *bucket, const char *key,
                               const char *upload_id, int part_number_marker,
                               struct s3f_parts_page **out, struct s3f_error *err) {
    *out = NULL;
    enum s3f_status st = s3f__op_check_args("ListParts", bucket, key, true, err);
    if (st || (st = check_upload_id("ListParts", upload_id, err)))
        return st;
    struct s3f__buf q, body;
    s3f__buf_init(&q, 4096);
    s3f__buf_init(&body, XML_BODY_MAX);
    char marker[16];
    snprintf(marker, sizeof(marker), "%d", part_number_marker);
    if ((part_number_marker > 0 && s3f__op_query_add(&q, "part-number-marker", marker)) ||
        s3f__op_upload_query(&q, upload_id, 0)) {
        s3f__buf_cleanup(&q);
        return s3f__op_oom(err, "ListParts");
    }
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "ListParts", "GET", bucket, key);
    r.query = q.data;
    r.body_out = &body;
    st = s3f__s3_execute(c, &r, err);
    if (st == S3F_OK)
        st = s3f__xml_parse_list_parts(body.data, body.len, out, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "ListParts", sizeof(err->operation));
    s3f__buf_cleanup(&q);
    s3f__buf_cleanup(&body);
    return st;
}

enum s3f_status s3f_list_multipart_uploads(struct s3f_client *c, const char *bucket,
                                           const char *prefix, const char *key_marker,
                                           const char *upload_id_marker,
                                           struct s3f_uploads_page **out,
                                           struct s3f_error *err) {
    *out = NULL;
    enum s3f_status st = s3f__op_check_args("ListMultipartUploads", bucket, NULL, false, err);
    if (st)
        return st;
    struct s3f__buf q, body;
    s3f__buf_init(&q, 8192);
    s3f__buf_init(&body, XML_BODY_MAX);
    if (s3f__op_query_add(&q, "uploads", "") ||
        (prefix && *prefix && s3f__op_query_add(&q, "prefix", prefix)) ||
        (key_marker && *key_marker && s3f__op_query_add(&q, "key-marker", key_marker)) ||
        (upload_id_marker && *upload_id_marker &&
         s3f__op_query_add(&q, "upload-id-marker", upload_id_marker))) {
        s3f__buf_cleanup(&q);
        return s3f__op_oom(err, "ListMultipartUploads");
    }
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "ListMultipartUploads", "GET", bucket, NULL);
    r.query = q.data;
    r.body_out = &body;
    st = s3f__s3_execute(c, &r, err);
    if (st == S3F_OK)
        st = s3f__xml_parse_list_multipart_uploads(body.data, body.len, out, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "ListMultipartUploads", sizeof(err->operation));
    s3f__buf_cleanup(&q);
    s3f__buf_cleanup(&body);
    return st;
}
