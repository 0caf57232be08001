/* The S3 operations of the public API, each a request description for the executor.
 * This file: the helpers the ops*.c files share (ops_common.h), HeadObject, GetObject,
 * PutObject, DeleteObject, CopyObject, DeleteObjects and presigned URLs. Multipart uploads
 * are in ops_multipart.c, listings and buckets in ops_list.c, the prepared requests of the
 * transfer engine (ops_internal.h) in ops_prepared.c. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/credentials.h"
#include "auth/sigv4.h"
#include "s3/client.h"
#include "s3/endpoint.h"
#include "s3/ops_common.h"
#include "s3/xml.h"

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

void s3f__op_request_init(struct s3f__s3_request *r, const char *op, const char *method,
                          const char *bucket, const char *key) {
    memset(r, 0, sizeof(*r));
    r->operation = op;
    r->method = method;
    r->bucket = bucket;
    r->key = key;
}

/* Append "&name=value" (value percent-encoded) to a query string under construction. */
enum s3f_status s3f__op_query_add(struct s3f__buf *q, const char *name, const char *value) {
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

enum s3f_status s3f__op_oom(struct s3f_error *err, const char *op) {
    return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
}

/* ---- HeadObject / GetObject ---------------------------------------------------------- */

/* A known checksum algorithm for a public option, or S3F_ERR_INVALID_ARGUMENT. */
enum s3f_status s3f__op_checksum_start(enum s3f_checksum_algorithm alg,
                                       struct s3f__checksum *ck, const char *op,
                                       struct s3f_error *err) {
    if (s3f__checksum_init(ck, alg))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL,
                              "unknown checksum algorithm %d", (int)alg);
    return S3F_OK;
}

static enum s3f_status head_object(struct s3f_client *c, const char *bucket, const char *key,
                                   const char *version_id, bool copy_source,
                                   struct s3f_object_info *info, struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("HeadObject", bucket, key, true, err);
    if (st)
        return st;
    struct s3f__op op;
    if ((st = s3f__op_get(&op, true, bucket, key, version_id, NULL, true, err)) == S3F_OK) {
        op.r.copy_source = copy_source;
        st = s3f__s3_execute(c, &op.r, err);
    }
    if (st == S3F_OK && info)
        *info = op.info;
    s3f__op_cleanup(&op);
    return st;
}

enum s3f_status s3f_head_object(struct s3f_client *c, const char *bucket, const char *key,
                                const char *version_id, struct s3f_object_info *info,
                                struct s3f_error *err) {
    return head_object(c, bucket, key, version_id, false, info, err);
}

enum s3f_status s3f__head_copy_source(struct s3f_client *c, const char *bucket, const char *key,
                                      const char *version_id, struct s3f_object_info *info,
                                      struct s3f_error *err) {
    return head_object(c, bucket, key, version_id, true, info, err);
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
    enum s3f_status st = s3f__op_check_args("GetObject", bucket, key, true, err);
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
    char etag[35] = ""; /* none when MD5 is refused (FIPS): the checksum alone decides */
    bool have_md5 = s3f__md5(data ? data : "", len, md5) == 0;
    if (have_md5) {
        etag[0] = '"';
        s3f__hex(md5, 16, etag + 1);
        etag[33] = '"';
        etag[34] = '\0';
    }
    char why[400];
    int same = -1;
    enum s3f_status hst = s3f_head_object(c, bucket, key, NULL, &head, &he);
    if (hst == S3F_OK) {
        same = s3f__same_object(&head, &ours, ck->alg, len, etag, why, sizeof(why));
        if (same == -1 && !have_md5)
            snprintf(why, sizeof(why), "it has our size, but no checksum to compare and no "
                     "MD5 of ours for its ETag (MD5 is unavailable here)");
    } else
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
    enum s3f_status st = s3f__op_check_args("PutObject", bucket, key, true, err);
    if (st)
        return st;
    if (len > ((uint64_t)5 << 30))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL,
                              "%zu bytes is over the 5 GiB limit of one PutObject", len);
    if (len && !data)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "PutObject", NULL, "data is NULL");
    struct s3f__checksum ck;
    if ((st = s3f__op_checksum_start(opts->checksum, &ck, "PutObject", err)))
        return st;
    /* without MD5 (a FIPS host) the integrity check Content-MD5 asked for is a CRC32C */
    /* directory buckets take no Content-MD5 (AWS, "Data protection in directory buckets":
     * CRC32, CRC32C... instead): a CRC32C stands in, as on a FIPS host */
    bool md5 = opts->content_md5 && s3f__md5_available() && !s3f__bucket_is_directory(bucket);
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
    enum s3f_status st = s3f__op_check_args("DeleteObject", bucket, key, true, err);
    if (st)
        return st;
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "DeleteObject", "DELETE", bucket, key);
    return s3f__s3_execute(c, &r, err);
}

enum s3f_status s3f_copy_object(struct s3f_client *c, const char *src_bucket,
                                const char *src_key, const char *dst_bucket,
                                const char *dst_key, struct s3f_object_info *info,
                                struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("CopyObject", dst_bucket, dst_key, true, err);
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
    enum s3f_status st = s3f__op_check_args("DeleteObjects", bucket, NULL, false, err);
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
        /* S3 requires Content-MD5 or an x-amz-checksum-* here; on a FIPS host (no MD5) or a
         * directory bucket (no Content-MD5) send the CRC32C of the body */
        uint8_t md5[16];
        char md5_b64[25], crc_b64[9];
        bool use_md5 = s3f__md5_available() && !s3f__bucket_is_directory(bucket);
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
        s3f__op_request_init(&r, "DeleteObjects", "POST", bucket, NULL);
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

/* ---- presigned URLs ------------------------------------------------------------------- */

enum s3f_status s3f_presign(struct s3f_client *c, const char *method, const char *bucket,
                            const char *key, uint32_t expires_s, char **url,
                            struct s3f_error *err) {
    *url = NULL;
    enum s3f_status st = s3f__op_check_args("presign", bucket, key, true, err);
    if (st)
        return st;
    if (!method || (strcmp(method, "GET") && strcmp(method, "PUT") && strcmp(method, "DELETE") &&
                    strcmp(method, "HEAD")))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL,
                              "method must be GET, PUT, DELETE or HEAD");
    if (expires_s < 1 || expires_s > 604800)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL,
                              "expiry must be 1..604800 seconds (7 days), got %u", expires_s);
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "presign", NULL, "client is NULL");
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
        st = s3f__op_oom(err, "presign");
        goto out;
    }
    path = s3f__endpoint_object_path(&ep, key);
    if (!path) {
        st = s3f__op_oom(err, "presign");
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
                                    .time = s3f__wall_time_s(), .expires_s = expires_s,
                                    .region_set = ep.signing_region_set};
    if ((st = s3f__sigv4_presign(&sreq, &sc, &cfg, &query, NULL, NULL, err)))
        goto out;
    struct s3f__buf u;
    s3f__buf_init(&u, 1 << 16);
    if (s3f__buf_appendf(&u, "%s?%s", base, query)) {
        s3f__buf_cleanup(&u);
        st = s3f__op_oom(err, "presign");
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
