/* The operations only directory buckets (S3 Express One Zone) have: appends (PutObject with
 * x-amz-write-offset-bytes) and RenameObject (AWS, "Appending data to objects in directory
 * buckets", "Renaming objects in directory buckets" and the API reference of RenameObject).
 * Neither is idempotent (a repeat after a lost response finds the object already moved):
 * both are of the RECONCILE class, and a lost response is reconciled with a HEAD. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/ops_common.h"

enum s3f_status s3f_append_object(struct s3f_client *c, const char *bucket, const char *key,
                                  uint64_t offset, const void *data, size_t len,
                                  struct s3f_object_info *info, struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("PutObject", bucket, key, true, err);
    if (st)
        return st;
    if (len > ((uint64_t)5 << 30))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL,
                              "%zu bytes is over the 5 GiB limit of one append", len);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL, "data is NULL");
    struct s3f__checksum ck;
    if ((st = s3f__op_checksum_start(S3F_CHECKSUM_CRC32C, &ck, "PutObject", err)))
        return st;
    s3f__checksum_update(&ck, data, len);
    char off[24];
    snprintf(off, sizeof(off), "%" PRIu64, offset);
    struct s3f__op op;
    s3f__op_put_object(&op, bucket, key, NULL, &ck);
    op.r.body = data ? data : "";
    op.r.body_len = len;
    s3f__s3_request_header(&op.r, "x-amz-write-offset-bytes", off);
    st = s3f__s3_execute(c, &op.r, err);
    if (st && op.r.lost_response && err && strcmp(err->code, "InvalidWriteOffset") == 0) {
        /* our first attempt may have been applied: the object then ends at offset + len */
        struct s3f_object_info head;
        struct s3f_error he;
        if (s3f_head_object(c, bucket, key, NULL, &head, &he) == S3F_OK &&
            head.size == offset + len) {
            op.info = head;
            s3f_error_clear(err);
            st = S3F_OK;
        }
    }
    if (st == S3F_OK) {
        op.info.size = offset + len;
        if (info)
            *info = op.info;
    }
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_rename_object(struct s3f_client *c, const char *bucket,
                                  const char *src_key, const char *dst_key,
                                  const char *if_none_match, struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("RenameObject", bucket, dst_key, true, err);
    if (st)
        return st;
    if (!src_key || !*src_key)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "RenameObject", bucket,
                              "source key is empty");
    if (!s3f__bucket_is_directory(bucket))
        return s3f__error_set(err, S3F_ERR_UNSUPPORTED, "RenameObject", bucket,
                              "RenameObject is only for directory buckets (S3 Express One "
                              "Zone, NAME--ZONE--x-s3): %s is a general purpose bucket", bucket);
    struct s3f__buf src;
    s3f__buf_init(&src, 8192);
    /* x-amz-rename-source: "/bucket/key", URL-encoded ('/' kept), as x-amz-copy-source */
    st = s3f__buf_append(&src, "/", 1);
    if (!st)
        st = s3f__uri_encode(&src, bucket, strlen(bucket), false);
    if (!st)
        st = s3f__buf_append(&src, "/", 1);
    if (!st)
        st = s3f__uri_encode(&src, src_key, strlen(src_key), true);
    if (st) {
        s3f__buf_cleanup(&src);
        return s3f__op_oom(err, "RenameObject");
    }
    /* a client token makes S3's repeats of this rename idempotent */
    char token[33];
    uint8_t rnd[16];
    for (size_t i = 0; i < sizeof(rnd); i++)
        rnd[i] = (uint8_t)(s3f__random_unit() * 256.0);
    s3f__hex(rnd, sizeof(rnd), token);
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "RenameObject", "PUT", bucket, dst_key);
    r.query = "renameObject=";
    r.body = "";
    s3f__s3_request_header(&r, "x-amz-rename-source", src.data);
    s3f__s3_request_header(&r, "x-amz-client-token", token);
    if (if_none_match)
        s3f__s3_request_header(&r, "if-none-match", if_none_match);
    st = s3f__s3_execute(c, &r, err);
    if (st == S3F_ERR_NOT_FOUND && r.lost_response) {
        /* the first attempt may have renamed it: the source gone, the destination there */
        struct s3f_object_info head;
        struct s3f_error he;
        if (s3f_head_object(c, bucket, dst_key, NULL, &head, &he) == S3F_OK &&
            s3f_head_object(c, bucket, src_key, NULL, &head, &he) == S3F_ERR_NOT_FOUND) {
            s3f_error_clear(err);
            st = S3F_OK;
        }
    }
    s3f__buf_cleanup(&src);
    return st;
}
