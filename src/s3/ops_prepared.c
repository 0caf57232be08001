/* The S3 operations prepared as requests (ops_internal.h): builders and result parsers of
 * the requests the transfer engine submits, also used by the blocking public functions;
 * and the identity checks after a lost response (multipart ETag, same object). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/ops_common.h"

/* ---- prepared requests (ops_internal.h) ---------------------------------------------- */

void s3f__op_cleanup(struct s3f__op *op) {
    s3f__buf_cleanup(&op->query);
    s3f__buf_cleanup(&op->body);
    s3f__buf_cleanup(&op->resp);
    s3f__buf_cleanup(&op->copy_source);
}

/* Reset `op` for a new request (its buffers must have been released). */
static void op_init(struct s3f__op *op, const char *operation, const char *method,
                    const char *bucket, const char *key) {
    memset(op, 0, sizeof(*op));
    s3f__op_request_init(&op->r, operation, method, bucket, key);
    s3f__buf_init(&op->query, 8192);
    s3f__buf_init(&op->body, XML_BODY_MAX);
    s3f__buf_init(&op->resp, XML_BODY_MAX);
    s3f__buf_init(&op->copy_source, 8192);
    op->r.info = &op->info;
}

/* The checksum header of `ck` (nothing for NULL or NONE). */
static void op_checksum_header(struct s3f__op *op, const struct s3f__checksum *ck, bool sdk) {
    const char *name = ck ? s3f__checksum_header_name(ck->alg) : NULL;
    if (!name || ck->alg == S3F_CHECKSUM_NONE)
        return;
    s3f__checksum_b64(ck, op->checksum);
    s3f__s3_request_header(&op->r, name, op->checksum);
    if (sdk) /* what SDKs send with it; some servers (moto) only keep the value then */
        s3f__s3_request_header(&op->r, "x-amz-sdk-checksum-algorithm",
                               s3f__checksum_algorithm_name(ck->alg));
}

void s3f__op_put_object(struct s3f__op *op, const char *bucket, const char *key,
                        const char *content_type, const struct s3f__checksum *ck) {
    op_init(op, "PutObject", "PUT", bucket, key);
    op->r.body = "";
    s3f__s3_request_header(&op->r, "content-type",
                           content_type ? content_type : "application/octet-stream");
    op_checksum_header(op, ck, true);
}

void s3f__op_create_multipart(struct s3f__op *op, const char *bucket, const char *key,
                              const char *content_type, enum s3f_checksum_algorithm alg,
                              bool full_object) {
    op_init(op, "CreateMultipartUpload", "POST", bucket, key);
    op->r.query = "uploads=";
    op->r.body = "";
    op->r.body_out = &op->resp;
    s3f__s3_request_header(&op->r, "content-type",
                           content_type ? content_type : "application/octet-stream");
    const char *name = s3f__checksum_algorithm_name(alg);
    if (name && alg != S3F_CHECKSUM_NONE) {
        s3f__s3_request_header(&op->r, "x-amz-checksum-algorithm", name);
        if (full_object)
            s3f__s3_request_header(&op->r, "x-amz-checksum-type", "FULL_OBJECT");
    }
}

enum s3f_status s3f__op_create_multipart_result(struct s3f__op *op, char **upload_id,
                                                struct s3f_error *err) {
    enum s3f_status st =
        s3f__xml_parse_initiate_multipart(op->resp.data, op->resp.len, upload_id, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "CreateMultipartUpload", sizeof(err->operation));
    return st;
}

enum s3f_status s3f__op_upload_query(struct s3f__buf *q, const char *upload_id, int part_number) {
    char pn[16];
    snprintf(pn, sizeof(pn), "%d", part_number);
    if (part_number > 0 && s3f__op_query_add(q, "partNumber", pn))
        return S3F_ERR_NO_MEMORY;
    return s3f__op_query_add(q, "uploadId", upload_id);
}

enum s3f_status s3f__op_upload_part(struct s3f__op *op, const char *bucket, const char *key,
                                    const char *upload_id, int part_number,
                                    const struct s3f__checksum *ck, struct s3f_error *err) {
    op_init(op, "UploadPart", "PUT", bucket, key);
    if (part_number < 1 || part_number > 10000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "part number %d is outside 1..10000", part_number);
    if (s3f__op_upload_query(&op->query, upload_id, part_number))
        return s3f__op_oom(err, "UploadPart");
    op->r.query = op->query.data;
    op->r.body = "";
    op_checksum_header(op, ck, false);
    return S3F_OK;
}

/* x-amz-copy-source: "/bucket/key" with the key URI-encoded ('/' kept), and
 * "?versionId=..." when a version is named. */
static enum s3f_status copy_source_header(struct s3f__op *op, const char *src_bucket,
                                          const char *src_key, const char *src_version_id,
                                          const char *src_if_match) {
    if (s3f__buf_appendf(&op->copy_source, "/%s/", src_bucket) ||
        s3f__uri_encode(&op->copy_source, src_key, strlen(src_key), true))
        return S3F_ERR_NO_MEMORY;
    if (src_version_id && *src_version_id &&
        (s3f__buf_appends(&op->copy_source, "?versionId=") ||
         s3f__uri_encode(&op->copy_source, src_version_id, strlen(src_version_id), false)))
        return S3F_ERR_NO_MEMORY;
    s3f__s3_request_header(&op->r, "x-amz-copy-source", op->copy_source.data);
    if (src_if_match && *src_if_match)
        s3f__s3_request_header(&op->r, "x-amz-copy-source-if-match", src_if_match);
    op->r.body = "";
    op->r.body_len = 0;
    op->r.body_out = &op->resp;
    op->r.check_200_error = true;
    return S3F_OK;
}

enum s3f_status s3f__op_upload_part_copy(struct s3f__op *op, const char *bucket,
                                         const char *key, const char *upload_id,
                                         int part_number, const char *src_bucket,
                                         const char *src_key, const char *src_version_id,
                                         bool has_range, uint64_t first, uint64_t last,
                                         const char *src_if_match, struct s3f_error *err) {
    static const char *op_name = "UploadPartCopy";
    op_init(op, op_name, "PUT", bucket, key);
    enum s3f_status st = s3f__op_check_args(op_name, src_bucket, src_key, true, err);
    if (st)
        return st;
    if (part_number < 1 || part_number > 10000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "part number %d is outside 1..10000", part_number);
    if (has_range && (last < first || last - first >= ((uint64_t)5 << 30)))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "range %" PRIu64 "-%" PRIu64 " is empty or over 5 GiB",
                              first, last);
    if (s3f__op_upload_query(&op->query, upload_id, part_number) ||
        copy_source_header(op, src_bucket, src_key, src_version_id, src_if_match))
        return s3f__op_oom(err, op_name);
    op->r.query = op->query.data;
    if (has_range) {
        snprintf(op->copy_range, sizeof(op->copy_range), "bytes=%" PRIu64 "-%" PRIu64, first,
                 last);
        s3f__s3_request_header(&op->r, "x-amz-copy-source-range", op->copy_range);
    }
    return S3F_OK;
}

enum s3f_status s3f__op_upload_part_copy_result(struct s3f__op *op,
                                                struct s3f_object_info *info,
                                                struct s3f_error *err) {
    enum s3f_status st = s3f__xml_parse_copy_part(op->resp.data, op->resp.len, info, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "UploadPartCopy", sizeof(err->operation));
    return st;
}

enum s3f_status s3f__op_copy_object(struct s3f__op *op, const char *bucket, const char *key,
                                    const char *src_bucket, const char *src_key,
                                    const char *src_version_id, const char *src_if_match,
                                    struct s3f_error *err) {
    op_init(op, "CopyObject", "PUT", bucket, key);
    enum s3f_status st = s3f__op_check_args("CopyObject", src_bucket, src_key, true, err);
    if (st)
        return st;
    if (copy_source_header(op, src_bucket, src_key, src_version_id, src_if_match))
        return s3f__op_oom(err, "CopyObject");
    return S3F_OK;
}

enum s3f_status s3f__op_copy_object_result(struct s3f__op *op, struct s3f_object_info *info,
                                           struct s3f_error *err) {
    enum s3f_status st = s3f__xml_parse_copy_object(op->resp.data, op->resp.len, info, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "CopyObject", sizeof(err->operation));
    return st;
}

static const char *checksum_element(enum s3f_checksum_algorithm alg) {
    switch (alg) {
    case S3F_CHECKSUM_CRC32: return "ChecksumCRC32";
    case S3F_CHECKSUM_CRC64NVME: return "ChecksumCRC64NVME";
    default: return "ChecksumCRC32C";
    }
}

enum s3f_status s3f__op_complete_multipart(struct s3f__op *op, const char *bucket,
                                           const char *key, const char *upload_id,
                                           const struct s3f_part_info *parts, size_t n,
                                           enum s3f_checksum_algorithm alg,
                                           const struct s3f__checksum *full,
                                           struct s3f_error *err) {
    static const char *op_name = "CompleteMultipartUpload";
    op_init(op, op_name, "POST", bucket, key);
    if (n == 0 || n > 10000 || !parts)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "%zu parts: an upload needs 1..10000", n);
    const char *elem = checksum_element(alg);
    enum s3f_status st = s3f__op_upload_query(&op->query, upload_id, 0);
    if (!st)
        st = s3f__buf_appends(&op->body, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (size_t i = 0; i < n && !st; i++) {
        if (i && parts[i].part_number <= parts[i - 1].part_number)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                                  "part numbers must ascend (%d after %d)",
                                  parts[i].part_number, parts[i - 1].part_number);
        /* the ETag as the server gave it (quotes and all), escaped: a server's ETag is
         * not ours to trust to be hex */
        st = s3f__buf_appendf(&op->body, "<Part><PartNumber>%d</PartNumber><ETag>",
                              parts[i].part_number);
        if (!st)
            st = s3f__xml_append_escaped(&op->body, parts[i].etag);
        if (!st)
            st = s3f__buf_appends(&op->body, "</ETag>");
        if (!st && parts[i].checksum[0]) {
            st = s3f__buf_appendf(&op->body, "<%s>", elem);
            if (!st)
                st = s3f__xml_append_escaped(&op->body, parts[i].checksum);
            if (!st)
                st = s3f__buf_appendf(&op->body, "</%s>", elem);
        }
        if (!st)
            st = s3f__buf_appends(&op->body, "</Part>");
    }
    if (!st)
        st = s3f__buf_appends(&op->body, "</CompleteMultipartUpload>");
    if (st)
        return s3f__op_oom(err, op_name);
    op->r.query = op->query.data;
    op->r.body = op->body.data;
    op->r.body_len = op->body.len;
    op->r.body_out = &op->resp;
    op->r.check_200_error = true;
    s3f__s3_request_header(&op->r, "content-type", "application/xml");
    const char *name = full ? s3f__checksum_header_name(full->alg) : NULL;
    if (name && full->alg != S3F_CHECKSUM_NONE) {
        s3f__checksum_b64(full, op->full_checksum);
        s3f__s3_request_header(&op->r, name, op->full_checksum);
        s3f__s3_request_header(&op->r, "x-amz-checksum-type", "FULL_OBJECT");
    }
    return S3F_OK;
}

enum s3f_status s3f__op_complete_multipart_result(struct s3f__op *op,
                                                  struct s3f_object_info *info,
                                                  struct s3f_error *err) {
    enum s3f_status st =
        s3f__xml_parse_complete_multipart(op->resp.data, op->resp.len, info, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "CompleteMultipartUpload", sizeof(err->operation));
    return st;
}

enum s3f_status s3f__op_abort_multipart(struct s3f__op *op, const char *bucket,
                                        const char *key, const char *upload_id,
                                        struct s3f_error *err) {
    op_init(op, "AbortMultipartUpload", "DELETE", bucket, key);
    if (s3f__op_upload_query(&op->query, upload_id, 0))
        return s3f__op_oom(err, "AbortMultipartUpload");
    op->r.query = op->query.data;
    return S3F_OK;
}

enum s3f_status s3f__op_get(struct s3f__op *op, bool head, const char *bucket, const char *key,
                            const char *version_id, const char *if_match, bool checksum_mode,
                            struct s3f_error *err) {
    const char *name = head ? "HeadObject" : "GetObject";
    op_init(op, name, head ? "HEAD" : "GET", bucket, key);
    if (version_id && s3f__op_query_add(&op->query, "versionId", version_id))
        return s3f__op_oom(err, name);
    op->r.query = op->query.data;
    if (if_match)
        s3f__s3_request_header(&op->r, "if-match", if_match);
    if (checksum_mode)
        s3f__s3_request_header(&op->r, "x-amz-checksum-mode", "ENABLED");
    return S3F_OK;
}

/* ---- identity after a lost response ------------------------------------------------- */

/* The 16 bytes of a 32-digit MD5 hex ETag, quoted or not; false for anything else. */
static bool etag_md5(const char *etag, uint8_t out[16]) {
    size_t n = strlen(etag);
    if (n == 34 && etag[0] == '"' && etag[33] == '"') {
        etag++;
        n = 32;
    }
    if (n != 32)
        return false;
    for (size_t i = 0; i < 16; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char ch = etag[2 * i + (size_t)j];
            int d = ch >= '0' && ch <= '9'   ? ch - '0'
                    : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                             : -1;
            if (d < 0)
                return false;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return true;
}

bool s3f__multipart_etag(const char *const *part_etags, size_t n, char *out, size_t out_len) {
    if (n == 0 || out_len < 48)
        return false;
    uint8_t *all = malloc(n * 16);
    if (!all)
        return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = etag_md5(part_etags[i], all + i * 16);
    if (ok) { /* MD5 may be refused (FIPS): then there is no ETag to compute */
        uint8_t md5[16];
        char hex[33];
        ok = s3f__md5(all, n * 16, md5) == 0;
        if (ok) {
            s3f__hex(md5, 16, hex);
            snprintf(out, out_len, "\"%s-%zu\"", hex, n);
        }
    }
    free(all);
    return ok;
}

/* Compare two ETags, quotes and case of hex digits ignored. */
static bool etag_equal(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na >= 2 && a[0] == '"' && a[na - 1] == '"') {
        a++;
        na -= 2;
    }
    if (nb >= 2 && b[0] == '"' && b[nb - 1] == '"') {
        b++;
        nb -= 2;
    }
    return na == nb && strncasecmp(a, b, na) == 0;
}

static const char *info_checksum(const struct s3f_object_info *info,
                                 enum s3f_checksum_algorithm alg) {
    switch (alg) {
    case S3F_CHECKSUM_CRC32C: return info->checksum_crc32c;
    case S3F_CHECKSUM_CRC32: return info->checksum_crc32;
    case S3F_CHECKSUM_CRC64NVME: return info->checksum_crc64nvme;
    default: return "";
    }
}

int s3f__same_object(const struct s3f_object_info *head, const struct s3f_object_info *ours,
                     enum s3f_checksum_algorithm alg, uint64_t size, const char *etag,
                     char *why, size_t why_len) {
    if (head->size != size) {
        snprintf(why, why_len, "it has %" PRIu64 " bytes, not %" PRIu64, head->size, size);
        return 0;
    }
    const char *theirs = info_checksum(head, alg);
    const char *mine = ours ? info_checksum(ours, alg) : "";
    if (theirs[0] && mine[0] && !strchr(theirs, '-') && !strchr(mine, '-')) {
        if (strcmp(theirs, mine) == 0)
            return 1;
        snprintf(why, why_len, "its %s checksum is %s, not %s",
                 s3f__checksum_algorithm_name(alg), theirs, mine);
        return 0;
    }
    if (etag && etag[0] && head->etag[0]) {
        if (etag_equal(head->etag, etag))
            return 1;
        snprintf(why, why_len, "its ETag is %s, not %s", head->etag, etag);
        return 0;
    }
    snprintf(why, why_len, "it has our size, but neither a checksum nor an ETag to compare");
    return -1;
}
