/* S3 operations prepared as requests, for callers that submit them asynchronously (the
 * transfer engine) as well as for the blocking public functions in ops*.c; built in
 * ops_prepared.c.
 *
 * A `struct s3f__op` is one request plus the small buffers it owns (query string, a request
 * body the builder made, the XML answer, response metadata, computed header values). The
 * pattern is:
 *     s3f__op_upload_part(&op, ...);            build (strings passed in must outlive op)
 *     op.r.body = ...; or op.r.read_body = ...; the payload, where the operation has one
 *     s3f__s3_submit(c, &op.r, &err, done, ud); or s3f__s3_execute(c, &op.r, &err)
 *     ... in done: s3f__op_..._result(&op, ...) parse what came back
 *     s3f__op_cleanup(&op);
 * An op must not move in memory while its request is in flight. Builders start by
 * resetting the op (calling s3f__op_cleanup on an op that was built before is required
 * to release its buffers; a zeroed or cleaned-up op may be built again).
 * Thread-safety: an op is used by one request at a time; builders touch nothing shared. */
#ifndef S3F_S3_OPS_INTERNAL_H
#define S3F_S3_OPS_INTERNAL_H

#include "core/checksum.h"
#include "s3/client.h"

#define S3F__XML_BODY_MAX (16u << 20)

struct s3f__op {
    struct s3f__s3_request r;      /* submit &op->r */
    struct s3f__buf query;         /* r.query points into it */
    struct s3f__buf body;          /* request body made by the builder (Complete XML) */
    struct s3f__buf resp;          /* the XML answer (r.body_out) where one is expected */
    struct s3f_object_info info;   /* response metadata (r.info) */
    char checksum[S3F__CHECKSUM_B64_MAX];      /* value of the checksum header */
    char full_checksum[S3F__CHECKSUM_B64_MAX]; /* whole-object value on Complete */
    char md5[25];                  /* Content-MD5, base64 */
    struct s3f__buf copy_source;   /* x-amz-copy-source value (UploadPartCopy, CopyObject) */
    char copy_range[64];           /* x-amz-copy-source-range value */
};

/* Free the op's buffers; the op may be built again. Zeroed ops are fine. */
void s3f__op_cleanup(struct s3f__op *op);

/* Validate bucket (non-empty, valid name) and key (required: non-empty; at most 1024
 * bytes). Clears err first. S3F_ERR_INVALID_ARGUMENT naming the problem. */
enum s3f_status s3f__op_check_args(const char *operation, const char *bucket, const char *key,
                                   bool key_required, struct s3f_error *err);

/* PutObject. `content_type` NULL: application/octet-stream. `ck` (may be NULL or NONE):
 * its value goes as x-amz-checksum-<alg> (with x-amz-sdk-checksum-algorithm). The caller
 * sets the payload (r.body/body_len or r.read_body/read_ud/body_len). */
void s3f__op_put_object(struct s3f__op *op, const char *bucket, const char *key,
                        const char *content_type, const struct s3f__checksum *ck);

/* CreateMultipartUpload. `alg` other than NONE is announced as x-amz-checksum-algorithm;
 * `full_object` adds x-amz-checksum-type: FULL_OBJECT (the parts' checksums combine into one
 * checksum of the whole object, instead of S3's default checksum-of-checksums). */
void s3f__op_create_multipart(struct s3f__op *op, const char *bucket, const char *key,
                              const char *content_type, enum s3f_checksum_algorithm alg,
                              bool full_object);
/* After success: *upload_id receives a malloc'ed copy of the id (caller frees).
 * S3F_ERR_BAD_RESPONSE for a document without one. */
enum s3f_status s3f__op_create_multipart_result(struct s3f__op *op, char **upload_id,
                                                struct s3f_error *err);

/* UploadPart `part_number` (1..10000) of `upload_id`; `ck` as for PutObject (no sdk header).
 * The caller sets the payload. S3F_ERR_NO_MEMORY, S3F_ERR_INVALID_ARGUMENT (part number). */
enum s3f_status s3f__op_upload_part(struct s3f__op *op, const char *bucket, const char *key,
                                    const char *upload_id, int part_number,
                                    const struct s3f__checksum *ck, struct s3f_error *err);

/* UploadPartCopy: part `part_number` (1..10000) of `upload_id` is bytes [first, last] of
 * the object src_bucket/src_key (version `src_version_id` if not NULL), copied by the
 * server. `has_range` 0 copies the whole source (it must then be at most 5 GiB).
 * `src_if_match` (may be NULL) is sent as x-amz-copy-source-if-match: a source that
 * changed fails with 412 (S3F_ERR_PRECONDITION_FAILED). The answer is an XML document and
 * may be a 200 carrying an <Error> (check_200_error is set). The op keeps its own copy of
 * the encoded source. S3F_ERR_INVALID_ARGUMENT (names, part number, range), NO_MEMORY. */
enum s3f_status s3f__op_upload_part_copy(struct s3f__op *op, const char *bucket,
                                         const char *key, const char *upload_id,
                                         int part_number, const char *src_bucket,
                                         const char *src_key, const char *src_version_id,
                                         bool has_range, uint64_t first, uint64_t last,
                                         const char *src_if_match, struct s3f_error *err);
/* After success: parse <CopyPartResult> into *info (etag, checksum_* fields, last_modified;
 * other fields untouched). S3F_ERR_BAD_RESPONSE without an ETag. */
enum s3f_status s3f__op_upload_part_copy_result(struct s3f__op *op,
                                                struct s3f_object_info *info,
                                                struct s3f_error *err);

/* CopyObject of src_bucket/src_key (version if not NULL) to bucket/key; metadata and
 * content type are copied (MetadataDirective COPY). `src_if_match` as above. check_200_error
 * is set; parse with s3f__op_copy_object_result. S3F_ERR_INVALID_ARGUMENT, NO_MEMORY. */
enum s3f_status s3f__op_copy_object(struct s3f__op *op, const char *bucket, const char *key,
                                    const char *src_bucket, const char *src_key,
                                    const char *src_version_id, const char *src_if_match,
                                    struct s3f_error *err);
enum s3f_status s3f__op_copy_object_result(struct s3f__op *op, struct s3f_object_info *info,
                                           struct s3f_error *err);

/* CompleteMultipartUpload of `n` parts (ascending part numbers, 1..10000 of them). Each
 * part's non-empty `checksum` is listed as Checksum<ALG> of `alg` (DEFAULT: CRC32C).
 * `full` (may be NULL): the whole-object checksum, sent as x-amz-checksum-<alg> with
 * x-amz-checksum-type: FULL_OBJECT. S3F_ERR_INVALID_ARGUMENT, S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__op_complete_multipart(struct s3f__op *op, const char *bucket,
                                           const char *key, const char *upload_id,
                                           const struct s3f_part_info *parts, size_t n,
                                           enum s3f_checksum_algorithm alg,
                                           const struct s3f__checksum *full,
                                           struct s3f_error *err);
/* After success: parse the answer (a 200 with an <Error> was already caught by the
 * executor's check_200_error) into *info (etag, checksums). */
enum s3f_status s3f__op_complete_multipart_result(struct s3f__op *op,
                                                  struct s3f_object_info *info,
                                                  struct s3f_error *err);

/* AbortMultipartUpload. S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__op_abort_multipart(struct s3f__op *op, const char *bucket,
                                        const char *key, const char *upload_id,
                                        struct s3f_error *err);

/* GetObject (or HeadObject with `head`). version_id, if_match may be NULL; checksum_mode
 * asks the server for the object's checksum (x-amz-checksum-mode: ENABLED). For GET the
 * caller sets r.sink/sink_ud and r.has_range/range_start/range_end. Response metadata lands
 * in op->info. S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__op_get(struct s3f__op *op, bool head, const char *bucket, const char *key,
                            const char *version_id, const char *if_match, bool checksum_mode,
                            struct s3f_error *err);

/* HeadObject of the source of a copy (s3f_copy): s3f_head_object, but the request carries
 * the SSE-C key of copy sources (sse_copy_source_customer_key) instead of the client's. */
enum s3f_status s3f__head_copy_source(struct s3f_client *c, const char *bucket, const char *key,
                                      const char *version_id, struct s3f_object_info *info,
                                      struct s3f_error *err);

/* ---- identity of an object after a lost response (s3/idempotency.h) ----------------- */

/* The ETag S3 gives an object completed from parts with these ETags: the MD5 of the
 * concatenated binary part MD5s, "-N", quoted, into out (at least 48 bytes). false when a
 * part ETag is not a 32-digit MD5 hex (quoted or not): then the server's ETags are not MD5s
 * (SSE-KMS, some gateways) and nothing can be computed; false too when MD5 is refused
 * (FIPS). */
bool s3f__multipart_etag(const char *const *part_etags, size_t n, char *out, size_t out_len);

/* Whether the object a HEAD described (`head`, asked with x-amz-checksum-mode) is the one
 * this client wrote: `size` bytes, and then the first identity that can be compared:
 *   1. the whole-object checksum of algorithm `alg` in `ours` (its checksum_* field, as
 *      s3f__xfer_report_checksum fills it), when the server keeps one of that algorithm
 *      that is not a checksum of checksums ("...-N");
 *   2. else the ETag `etag` (NULL or "": none), quotes ignored.
 * 1: ours; 0: it differs (`why` says what: sizes, checksums or ETags, both values);
 * -1: the size matches but there is nothing to compare (why says so). */
int s3f__same_object(const struct s3f_object_info *head, const struct s3f_object_info *ours,
                     enum s3f_checksum_algorithm alg, uint64_t size, const char *etag,
                     char *why, size_t why_len);

#endif
