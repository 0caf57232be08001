/* The S3 operations of the public API, each a request description for the executor. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3/client.h"
#include "s3/endpoint.h"
#include "s3/ops_internal.h"
#include "s3/xml.h"

#define XML_BODY_MAX S3F__XML_BODY_MAX
#define DELETE_BATCH 1000

enum s3f_status s3f__op_check_args(const char *op, const char *bucket, const char *key,
                                   bool key_required, struct s3f_error *err) {
    s3f_error_clear(err);
    if (!bucket || !*bucket)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL, "bucket is empty");
    if (!s3f__bucket_name_valid(bucket, false))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, bucket,
                              "invalid bucket name '%s'", bucket);
    if (key_required && (!key || !*key))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, bucket, "key is empty");
    if (key && strlen(key) > 1024)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, bucket,
                              "key is longer than 1024 bytes");
    return S3F_OK;
}

static enum s3f_status check_args(const char *op, const char *bucket, const char *key,
                                  bool key_required, struct s3f_error *err) {
    return s3f__op_check_args(op, bucket, key, key_required, err);
}

static void request_init(struct s3f__s3_request *r, const char *op, const char *method,
                         const char *bucket, const char *key) {
    memset(r, 0, sizeof(*r));
    r->operation = op;
    r->method = method;
    r->bucket = bucket;
    r->key = key;
}

/* Append "&name=value" (value percent-encoded) to a query string under construction. */
static enum s3f_status query_add(struct s3f__buf *q, const char *name, const char *value) {
    enum s3f_status st;
    if (q->len && (st = s3f__buf_append(q, "&", 1)))
        return st;
    if ((st = s3f__buf_appends(q, name)))
        return st;
    if (!value)
        return S3F_OK;
    if ((st = s3f__buf_append(q, "=", 1)))
        return st;
    return s3f__uri_encode(q, value, strlen(value), false);
}

static enum s3f_status oom(struct s3f_error *err, const char *op) {
    return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
}

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
    request_init(&op->r, operation, method, bucket, key);
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

static enum s3f_status upload_query(struct s3f__buf *q, const char *upload_id, int part_number) {
    char pn[16];
    snprintf(pn, sizeof(pn), "%d", part_number);
    if (part_number > 0 && query_add(q, "partNumber", pn))
        return S3F_ERR_NO_MEMORY;
    return query_add(q, "uploadId", upload_id);
}

enum s3f_status s3f__op_upload_part(struct s3f__op *op, const char *bucket, const char *key,
                                    const char *upload_id, int part_number,
                                    const struct s3f__checksum *ck, struct s3f_error *err) {
    op_init(op, "UploadPart", "PUT", bucket, key);
    if (part_number < 1 || part_number > 10000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "part number %d is outside 1..10000", part_number);
    if (upload_query(&op->query, upload_id, part_number))
        return oom(err, "UploadPart");
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
    enum s3f_status st = check_args(op_name, src_bucket, src_key, true, err);
    if (st)
        return st;
    if (part_number < 1 || part_number > 10000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "part number %d is outside 1..10000", part_number);
    if (has_range && (last < first || last - first >= ((uint64_t)5 << 30)))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op_name, NULL,
                              "range %" PRIu64 "-%" PRIu64 " is empty or over 5 GiB",
                              first, last);
    if (upload_query(&op->query, upload_id, part_number) ||
        copy_source_header(op, src_bucket, src_key, src_version_id, src_if_match))
        return oom(err, op_name);
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
    enum s3f_status st = check_args("CopyObject", src_bucket, src_key, true, err);
    if (st)
        return st;
    if (copy_source_header(op, src_bucket, src_key, src_version_id, src_if_match))
        return oom(err, "CopyObject");
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
    enum s3f_status st = upload_query(&op->query, upload_id, 0);
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
        return oom(err, op_name);
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
    if (upload_query(&op->query, upload_id, 0))
        return oom(err, "AbortMultipartUpload");
    op->r.query = op->query.data;
    return S3F_OK;
}

enum s3f_status s3f__op_get(struct s3f__op *op, bool head, const char *bucket, const char *key,
                            const char *version_id, const char *if_match, bool checksum_mode,
                            struct s3f_error *err) {
    const char *name = head ? "HeadObject" : "GetObject";
    op_init(op, name, head ? "HEAD" : "GET", bucket, key);
    if (version_id && query_add(&op->query, "versionId", version_id))
        return oom(err, name);
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
    if (ok) {
        uint8_t md5[16];
        char hex[33];
        s3f__md5(all, n * 16, md5);
        s3f__hex(md5, 16, hex);
        snprintf(out, out_len, "\"%s-%zu\"", hex, n);
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

/* ---- HeadObject / GetObject ---------------------------------------------------------- */

/* A known checksum algorithm for a public option, or S3F_ERR_INVALID_ARGUMENT. */
static enum s3f_status checksum_start(enum s3f_checksum_algorithm alg, struct s3f__checksum *ck,
                                      const char *op, struct s3f_error *err) {
    if (s3f__checksum_init(ck, alg))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL,
                              "unknown checksum algorithm %d", (int)alg);
    return S3F_OK;
}

enum s3f_status s3f_head_object(struct s3f_client *c, const char *bucket, const char *key,
                                const char *version_id, struct s3f_object_info *info,
                                struct s3f_error *err) {
    enum s3f_status st = check_args("HeadObject", bucket, key, true, err);
    if (st)
        return st;
    struct s3f__op op;
    if ((st = s3f__op_get(&op, true, bucket, key, version_id, NULL, true, err)) == S3F_OK)
        st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_OK && info)
        *info = op.info;
    s3f__op_cleanup(&op);
    return st;
}

struct verify_sink {
    s3f_write_fn sink;
    void *ud;
    struct s3f__checksum crc32c, crc32, crc64;
    uint64_t bytes;
};

static int verify_write(void *ud, const void *data, size_t len, uint64_t offset) {
    struct verify_sink *v = ud;
    s3f__checksum_update(&v->crc32c, data, len);
    s3f__checksum_update(&v->crc32, data, len);
    s3f__checksum_update(&v->crc64, data, len);
    v->bytes += len;
    return v->sink ? v->sink(v->ud, data, len, offset) : 0;
}

/* Compare a computed checksum with the server's value (`want`, may be ""). */
static enum s3f_status verify_one(const struct s3f__checksum *got, const char *want,
                                  const char *op, struct s3f_error *err) {
    char b64[S3F__CHECKSUM_B64_MAX];
    if (!want[0] || strchr(want, '-')) /* absent, or a checksum of part checksums */
        return S3F_OK;
    s3f__checksum_b64(got, b64);
    if (strcmp(b64, want) != 0)
        return s3f__error_set(err, S3F_ERR_CHECKSUM, op, NULL,
                              "%s of the data is %s, the server says %s",
                              s3f__checksum_algorithm_name(got->alg), b64, want);
    return S3F_OK;
}

enum s3f_status s3f_get_object(struct s3f_client *c, const char *bucket, const char *key,
                               const struct s3f_get_options *opts, s3f_write_fn sink,
                               void *sink_user_data, struct s3f_object_info *info,
                               struct s3f_error *err) {
    static const struct s3f_get_options defaults;
    if (!opts)
        opts = &defaults;
    enum s3f_status st = check_args("GetObject", bucket, key, true, err);
    if (st)
        return st;
    if (opts->has_range && opts->range_end < opts->range_start)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "GetObject", NULL,
                              "range end %" PRIu64 " is before its start %" PRIu64,
                              opts->range_end, opts->range_start);
    struct s3f__op op;
    struct verify_sink v = {.sink = sink, .ud = sink_user_data};
    bool verify = opts->verify_checksum != 0;
    s3f__checksum_init(&v.crc32c, verify ? S3F_CHECKSUM_CRC32C : S3F_CHECKSUM_NONE);
    s3f__checksum_init(&v.crc32, verify ? S3F_CHECKSUM_CRC32 : S3F_CHECKSUM_NONE);
    s3f__checksum_init(&v.crc64, verify ? S3F_CHECKSUM_CRC64NVME : S3F_CHECKSUM_NONE);
    st = s3f__op_get(&op, false, bucket, key, opts->version_id, opts->if_match, verify, err);
    if (st)
        goto out;
    op.r.sink = verify_write;
    op.r.sink_ud = &v;
    op.r.has_range = opts->has_range != 0;
    op.r.range_start = opts->range_start;
    op.r.range_end = opts->range_end;
    st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_ERR_ABORTED && err)
        s3f__strlcpy(err->message, "the data callback stopped the download",
                     sizeof(err->message));
    if (st == S3F_ERR_PRECONDITION_FAILED && err && !opts->if_match && err->http_status == 412)
        s3f__strlcpy(err->message, "the object changed during the download (ETag differs)",
                     sizeof(err->message));
    if (st)
        goto out;
    if (info)
        *info = op.info;
    /* full-object checksum check: only when the whole object was read */
    bool whole = !opts->has_range || (opts->range_start == 0 && v.bytes == op.info.size);
    if (verify && whole &&
        ((st = verify_one(&v.crc32c, op.info.checksum_crc32c, "GetObject", err)) ||
         (st = verify_one(&v.crc32, op.info.checksum_crc32, "GetObject", err)) ||
         (st = verify_one(&v.crc64, op.info.checksum_crc64nvme, "GetObject", err))))
        goto out;
out:
    s3f__op_cleanup(&op);
    return st;
}

/* ---- PutObject / DeleteObject / CopyObject -------------------------------------------- */

/* Servers that ignore checksums (Ceph RGW) echo nothing: report what was sent. */
static void report_sent_checksum(struct s3f_object_info *info, const struct s3f__checksum *ck) {
    char b64[S3F__CHECKSUM_B64_MAX];
    s3f__checksum_b64(ck, b64);
    char *field = NULL;
    size_t n = 0;
    switch (ck->alg) {
    case S3F_CHECKSUM_CRC32C: field = info->checksum_crc32c; n = sizeof(info->checksum_crc32c); break;
    case S3F_CHECKSUM_CRC32: field = info->checksum_crc32; n = sizeof(info->checksum_crc32); break;
    case S3F_CHECKSUM_CRC64NVME: field = info->checksum_crc64nvme; n = sizeof(info->checksum_crc64nvme); break;
    default: return;
    }
    if (!field[0])
        s3f__strlcpy(field, b64, n);
}

/* A conditional PutObject (If-None-Match) got 412 on a retry after an attempt whose response
 * was lost: the first attempt may have written the object, and the 412 is then about our own
 * write. HEAD decides: size and identity (the checksum we sent, else the ETag S3 gives a
 * single PUT: the MD5 of the body) equal means the object is ours: S3F_OK, with *info from
 * the HEAD. Otherwise the 412 stands: someone else wrote the key. */
static enum s3f_status put_reconcile(struct s3f_client *c, const char *bucket,
                                     const char *key, const void *data, size_t len,
                                     const struct s3f__checksum *ck,
                                     struct s3f_object_info *info, struct s3f_error *err) {
    struct s3f_error e412 = *err, he;
    s3f_error_clear(&he);
    struct s3f_object_info head, ours;
    memset(&head, 0, sizeof(head));
    memset(&ours, 0, sizeof(ours));
    report_sent_checksum(&ours, ck);
    uint8_t md5[16];
    char etag[35];
    s3f__md5(data ? data : "", len, md5);
    etag[0] = '"';
    s3f__hex(md5, 16, etag + 1);
    etag[33] = '"';
    etag[34] = '\0';
    char why[400];
    int same = -1;
    enum s3f_status hst = s3f_head_object(c, bucket, key, NULL, &head, &he);
    if (hst == S3F_OK)
        same = s3f__same_object(&head, &ours, ck->alg, len, etag, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "HEAD failed (%s)", s3f_status_name(hst));
    if (same == 1) {
        *info = head;
        s3f_error_clear(err);
        return S3F_OK;
    }
    *err = e412;
    char msg[1024];
    snprintf(msg, sizeof(msg), "someone else wrote the key (checked after a lost response: "
             "%s)", why);
    s3f__strlcpy(err->message, msg, sizeof(err->message));
    return S3F_ERR_PRECONDITION_FAILED;
}

enum s3f_status s3f_put_object(struct s3f_client *c, const char *bucket, const char *key,
                               const void *data, size_t len, const struct s3f_put_options *opts,
                               struct s3f_object_info *info, struct s3f_error *err) {
    static const struct s3f_put_options defaults;
    if (!opts)
        opts = &defaults;
    enum s3f_status st = check_args("PutObject", bucket, key, true, err);
    if (st)
        return st;
    if (len > ((uint64_t)5 << 30))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL,
                              "%zu bytes is over the 5 GiB limit of one PutObject", len);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL, "data is NULL");
    struct s3f__checksum ck;
    if ((st = checksum_start(opts->checksum, &ck, "PutObject", err)))
        return st;
    /* without MD5 (a FIPS host) the integrity check Content-MD5 asked for is a CRC32C */
    bool md5 = opts->content_md5 && s3f__md5_available();
    if (opts->content_md5 && !md5 && ck.alg == S3F_CHECKSUM_NONE)
        (void)s3f__checksum_init(&ck, S3F_CHECKSUM_CRC32C);
    s3f__checksum_update(&ck, data, len);
    struct s3f__op op;
    s3f__op_put_object(&op, bucket, key, opts->content_type, &ck);
    op.r.body = data ? data : "";
    op.r.body_len = len;
    op.r.sign_payload = opts->sign_payload != 0;
    if (md5) {
        uint8_t d[16];
        if (s3f__md5(data ? data : "", len, d)) {
            s3f__op_cleanup(&op);
            return s3f__error_set(err, s3f__crypto_status(), "PutObject", NULL,
                                  "MD5 failed (OpenSSL)");
        }
        s3f__base64(d, 16, op.md5);
        s3f__s3_request_header(&op.r, "content-md5", op.md5);
    }
    if (opts->if_none_match)
        s3f__s3_request_header(&op.r, "if-none-match", opts->if_none_match);
    st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_ERR_PRECONDITION_FAILED && op.r.lost_response && opts->if_none_match)
        st = put_reconcile(c, bucket, key, data, len, &ck, &op.info, err);
    if (st == S3F_OK) {
        op.info.size = len;
        report_sent_checksum(&op.info, &ck);
        if (info)
            *info = op.info;
    }
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_delete_object(struct s3f_client *c, const char *bucket, const char *key,
                                  struct s3f_error *err) {
    enum s3f_status st = check_args("DeleteObject", bucket, key, true, err);
    if (st)
        return st;
    struct s3f__s3_request r;
    request_init(&r, "DeleteObject", "DELETE", bucket, key);
    return s3f__s3_execute(c, &r, err);
}

enum s3f_status s3f_copy_object(struct s3f_client *c, const char *src_bucket,
                                const char *src_key, const char *dst_bucket,
                                const char *dst_key, struct s3f_object_info *info,
                                struct s3f_error *err) {
    enum s3f_status st = check_args("CopyObject", dst_bucket, dst_key, true, err);
    if (st)
        return st;
    struct s3f__op op;
    st = s3f__op_copy_object(&op, dst_bucket, dst_key, src_bucket, src_key, NULL, NULL, err);
    if (st == S3F_OK)
        st = s3f__s3_execute(c, &op.r, err);
    if (st == S3F_OK) {
        memset(&op.info, 0, sizeof(op.info));
        st = s3f__op_copy_object_result(&op, &op.info, err);
    }
    if (st == S3F_OK && info)
        *info = op.info;
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "CopyObject", sizeof(err->operation));
    s3f__op_cleanup(&op);
    return st;
}

/* ---- DeleteObjects ---------------------------------------------------------------------- */

enum s3f_status s3f_delete_objects(struct s3f_client *c, const char *bucket,
                                   const char *const *keys, size_t n_keys, size_t *failed,
                                   struct s3f_error *err) {
    if (failed)
        *failed = 0;
    enum s3f_status st = check_args("DeleteObjects", bucket, NULL, false, err);
    if (st)
        return st;
    if (n_keys && !keys)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                              "keys is NULL");
    struct s3f__buf body, resp;
    s3f__buf_init(&body, XML_BODY_MAX);
    s3f__buf_init(&resp, XML_BODY_MAX);
    size_t n_failed = 0;
    struct s3f_error first_failure;
    s3f_error_clear(&first_failure);
    for (size_t off = 0; off < n_keys && st == S3F_OK; off += DELETE_BATCH) {
        size_t n = n_keys - off < DELETE_BATCH ? n_keys - off : DELETE_BATCH;
        s3f__buf_reset(&body);
        if ((st = s3f__xml_build_delete(keys + off, n, true, &body, err)))
            break;
        /* S3 requires Content-MD5 or an x-amz-checksum-* here; on a FIPS host (no MD5)
         * send the CRC32C of the body */
        uint8_t md5[16];
        char md5_b64[25], crc_b64[9];
        bool use_md5 = s3f__md5_available();
        if (use_md5 && s3f__md5(body.data, body.len, md5)) {
            st = s3f__error_set(err, s3f__crypto_status(), "DeleteObjects", bucket,
                                "MD5 failed (OpenSSL)");
            break;
        }
        if (use_md5)
            s3f__base64(md5, 16, md5_b64);
        else
            s3f__crc32_b64(s3f__crc32c(0, body.data, body.len), crc_b64);
        struct s3f__s3_request r;
        request_init(&r, "DeleteObjects", "POST", bucket, NULL);
        r.query = "delete=";
        r.body = body.data;
        r.body_len = body.len;
        r.body_out = &resp;
        r.check_200_error = true;
        if (use_md5) {
            s3f__s3_request_header(&r, "content-md5", md5_b64);
        } else {
            s3f__s3_request_header(&r, "x-amz-sdk-checksum-algorithm", "CRC32C");
            s3f__s3_request_header(&r, "x-amz-checksum-crc32c", crc_b64);
        }
        s3f__s3_request_header(&r, "content-type", "application/xml");
        if ((st = s3f__s3_execute(c, &r, err)))
            break;
        size_t n_deleted = 0, n_errors = 0;
        struct s3f_error fe;
        s3f_error_clear(&fe);
        if ((st = s3f__xml_parse_delete_result(resp.data, resp.len, &n_deleted, &n_errors, &fe,
                                               err)))
            break;
        if (n_errors && !n_failed)
            first_failure = fe;
        n_failed += n_errors;
    }
    s3f__buf_cleanup(&body);
    s3f__buf_cleanup(&resp);
    if (failed)
        *failed = n_failed;
    if (st == S3F_OK && n_failed) {
        if (err) {
            *err = first_failure;
            s3f__strlcpy(err->operation, "DeleteObjects", sizeof(err->operation));
            if (!err->status)
                err->status = S3F_ERR_S3;
            st = err->status;
        } else {
            st = first_failure.status ? first_failure.status : S3F_ERR_S3;
        }
    }
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "DeleteObjects", sizeof(err->operation));
    return st;
}

/* ---- ListObjectsV2 -------------------------------------------------------------------- */

enum s3f_status s3f_list_objects_v2(struct s3f_client *c, const char *bucket,
                                    const struct s3f_list_options *opts,
                                    struct s3f_list_page **out, struct s3f_error *err) {
    static const struct s3f_list_options defaults;
    if (!opts)
        opts = &defaults;
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "ListObjectsV2", NULL,
                              "out is NULL");
    *out = NULL;
    enum s3f_status st = check_args("ListObjectsV2", bucket, NULL, false, err);
    if (st)
        return st;
    if (opts->max_keys < 0 || opts->max_keys > 1000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "ListObjectsV2", bucket,
                              "max_keys must be 0..1000, got %d", opts->max_keys);
    struct s3f__buf q, body;
    s3f__buf_init(&q, 8192);
    s3f__buf_init(&body, XML_BODY_MAX);
    char max_keys[16];
    snprintf(max_keys, sizeof(max_keys), "%d", opts->max_keys);
    if (query_add(&q, "list-type", "2") || query_add(&q, "encoding-type", "url") ||
        (opts->prefix && *opts->prefix && query_add(&q, "prefix", opts->prefix)) ||
        (opts->delimiter && *opts->delimiter && query_add(&q, "delimiter", opts->delimiter)) ||
        (opts->continuation_token && *opts->continuation_token &&
         query_add(&q, "continuation-token", opts->continuation_token)) ||
        (opts->start_after && *opts->start_after &&
         query_add(&q, "start-after", opts->start_after)) ||
        (opts->max_keys && query_add(&q, "max-keys", max_keys))) {
        s3f__buf_cleanup(&q);
        return oom(err, "ListObjectsV2");
    }
    struct s3f__s3_request r;
    request_init(&r, "ListObjectsV2", "GET", bucket, NULL);
    r.query = q.data;
    r.body_out = &body;
    st = s3f__s3_execute(c, &r, err);
    if (st == S3F_OK)
        st = s3f__xml_parse_list_objects_v2(body.data, body.len, out, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "ListObjectsV2", sizeof(err->operation));
    s3f__buf_cleanup(&q);
    s3f__buf_cleanup(&body);
    return st;
}

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
    enum s3f_status st = check_args("CreateMultipartUpload", bucket, key, true, err);
    if (st)
        return st;
    *upload_id = NULL;
    struct s3f__checksum ck;
    if ((st = checksum_start(opts->checksum, &ck, "CreateMultipartUpload", err)))
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
    enum s3f_status st = check_args("UploadPart", bucket, key, true, err);
    if (st || (st = check_upload_id("UploadPart", upload_id, err)))
        return st;
    if (len > ((uint64_t)5 << 30))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "part of %zu bytes is over the 5 GiB limit", len);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "UploadPart", NULL,
                              "data is NULL");
    struct s3f__checksum ck;
    if ((st = checksum_start(checksum, &ck, "UploadPart", err)))
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
    enum s3f_status st = check_args("UploadPartCopy", bucket, key, true, err);
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
    enum s3f_status st = check_args("CompleteMultipartUpload", bucket, key, true, err);
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
    enum s3f_status st = check_args("AbortMultipartUpload", bucket, key, true, err);
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
    enum s3f_status st = check_args("ListParts", bucket, key, true, err);
    if (st || (st = check_upload_id("ListParts", upload_id, err)))
        return st;
    struct s3f__buf q, body;
    s3f__buf_init(&q, 4096);
    s3f__buf_init(&body, XML_BODY_MAX);
    char marker[16];
    snprintf(marker, sizeof(marker), "%d", part_number_marker);
    if ((part_number_marker > 0 && query_add(&q, "part-number-marker", marker)) ||
        upload_query(&q, upload_id, 0)) {
        s3f__buf_cleanup(&q);
        return oom(err, "ListParts");
    }
    struct s3f__s3_request r;
    request_init(&r, "ListParts", "GET", bucket, key);
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
    enum s3f_status st = check_args("ListMultipartUploads", bucket, NULL, false, err);
    if (st)
        return st;
    struct s3f__buf q, body;
    s3f__buf_init(&q, 8192);
    s3f__buf_init(&body, XML_BODY_MAX);
    if (query_add(&q, "uploads", "") ||
        (prefix && *prefix && query_add(&q, "prefix", prefix)) ||
        (key_marker && *key_marker && query_add(&q, "key-marker", key_marker)) ||
        (upload_id_marker && *upload_id_marker &&
         query_add(&q, "upload-id-marker", upload_id_marker))) {
        s3f__buf_cleanup(&q);
        return oom(err, "ListMultipartUploads");
    }
    struct s3f__s3_request r;
    request_init(&r, "ListMultipartUploads", "GET", bucket, NULL);
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

/* ---- presigned URLs ------------------------------------------------------------------- */

enum s3f_status s3f_presign(struct s3f_client *c, const char *method, const char *bucket,
                            const char *key, uint32_t expires_s, char **url,
                            struct s3f_error *err) {
    *url = NULL;
    enum s3f_status st = check_args("presign", bucket, key, true, err);
    if (st)
        return st;
    if (!method || (strcmp(method, "GET") && strcmp(method, "PUT") && strcmp(method, "DELETE") &&
                    strcmp(method, "HEAD")))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL,
                              "method must be GET, PUT, DELETE or HEAD");
    if (expires_s < 1 || expires_s > 604800)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL,
                              "expiry must be 1..604800 seconds (7 days), got %u", expires_s);
    if (c->anonymous)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL,
                              "presigning needs credentials, the client is anonymous");
    char resource[600];
    s3f__s3_resource(resource, sizeof(resource), bucket, key);
    struct s3f__endpoint ep;
    memset(&ep, 0, sizeof(ep));
    struct s3f__endpoint_params p = s3f__client_endpoint_params(c, bucket);
    struct s3f__credentials creds;
    memset(&creds, 0, sizeof(creds));
    char *base = NULL, *query = NULL, *path = NULL;
    if ((st = s3f__endpoint_resolve(&p, &ep, err)))
        goto out;
    if ((st = s3f__credentials_get(c->creds, &creds, err)))
        goto out;
    base = s3f__endpoint_object_url(&ep, key, NULL);
    if (!base) {
        st = oom(err, "presign");
        goto out;
    }
    path = s3f__endpoint_object_path(&ep, key);
    if (!path) {
        st = oom(err, "presign");
        goto out;
    }
    struct s3f__header hdrs[1] = {{"host", ep.host}};
    struct s3f__sigv4_request sreq = {.method = method, .path = path,
                                      .query = NULL, .headers = hdrs, .n_headers = 1,
                                      .payload_hash = "UNSIGNED-PAYLOAD"};
    struct s3f__sigv4_credentials sc = {creds.access_key_id, creds.secret_access_key,
                                        creds.session_token};
    struct s3f__sigv4_config cfg = {.region = ep.signing_region ? ep.signing_region : c->region,
                                    .service = ep.signing_name ? ep.signing_name : "s3",
                                    .time = s3f__wall_time_s(), .expires_s = expires_s};
    if ((st = s3f__sigv4_presign(&sreq, &sc, &cfg, &query, NULL, NULL, err)))
        goto out;
    struct s3f__buf u;
    s3f__buf_init(&u, 1 << 16);
    if (s3f__buf_appendf(&u, "%s?%s", base, query)) {
        s3f__buf_cleanup(&u);
        st = oom(err, "presign");
        goto out;
    }
    *url = s3f__buf_take(&u);
out:
    if (st && err) {
        s3f__strlcpy(err->operation, "presign", sizeof(err->operation));
        s3f__strlcpy(err->resource, resource, sizeof(err->resource));
    }
    free(base);
    free(path);
    free(query);
    s3f__credentials_cleanup(&creds);
    s3f__endpoint_cleanup(&ep);
    return st;
}

/* ---- buckets ------------------------------------------------------------------------ */

enum s3f_status s3f_create_bucket(struct s3f_client *c, const char *bucket,
                                  struct s3f_error *err) {
    enum s3f_status st = check_args("CreateBucket", bucket, NULL, false, err);
    if (st)
        return st;
    struct s3f__buf body;
    s3f__buf_init(&body, 4096);
    struct s3f__s3_request r;
    request_init(&r, "CreateBucket", "PUT", bucket, NULL);
    /* us-east-1 takes no LocationConstraint; a custom endpoint may know no AWS region */
    if (strcmp(c->region, "us-east-1") != 0 && !c->endpoint_url) {
        if (s3f__buf_appendf(&body,
                             "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/"
                             "2006-03-01/\"><LocationConstraint>%s</LocationConstraint>"
                             "</CreateBucketConfiguration>",
                             c->region)) {
            s3f__buf_cleanup(&body);
            return oom(err, "CreateBucket");
        }
    }
    r.body = body.data ? body.data : "";
    r.body_len = body.len;
    st = s3f__s3_execute(c, &r, err);
    s3f__buf_cleanup(&body);
    if (st && err && strcmp(err->code, "BucketAlreadyOwnedByYou") == 0) {
        s3f_error_clear(err);
        return S3F_OK;
    }
    return st;
}

enum s3f_status s3f_list_buckets(struct s3f_client *c, struct s3f_bucket_list **out,
                                 struct s3f_error *err) {
    s3f_error_clear(err);
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "ListBuckets", NULL,
                              "out is NULL");
    *out = NULL;
    struct s3f__buf body;
    s3f__buf_init(&body, XML_BODY_MAX);
    struct s3f__s3_request r;
    request_init(&r, "ListBuckets", "GET", NULL, NULL);
    r.body_out = &body;
    enum s3f_status st = s3f__s3_execute(c, &r, err);
    if (st == S3F_OK)
        st = s3f__xml_parse_list_buckets(body.data, body.len, out, err);
    if (st && err && !err->operation[0])
        s3f__strlcpy(err->operation, "ListBuckets", sizeof(err->operation));
    s3f__buf_cleanup(&body);
    return st;
}

enum s3f_status s3f_delete_bucket(struct s3f_client *c, const char *bucket,
                                  struct s3f_error *err) {
    enum s3f_status st = check_args("DeleteBucket", bucket, NULL, false, err);
    if (st)
        return st;
    struct s3f__s3_request r;
    request_init(&r, "DeleteBucket", "DELETE", bucket, NULL);
    return s3f__s3_execute(c, &r, err);
}
