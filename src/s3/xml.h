/* S3 XML: response documents parsed with expat, the DeleteObjects request body, and the
 * mapped statuses of error documents (s3/retry.h has the mapping).
 *
 * Every parser takes the whole body (`body`, `len`; it need not be NUL-terminated), accepts
 * the S3 namespace or none (element prefixes are ignored), refuses DTDs, and answers
 *   S3F_ERR_BAD_RESPONSE   malformed or truncated XML, an unexpected root element, a missing
 *                          or invalid required field, more than S3F__XML_MAX_ENTRIES entries;
 *                          err->message names the operation, the element and the line
 *   S3F_ERR_NO_MEMORY
 *   the mapped status      when the body is an <Error> document (err->code, message,
 *                          request_id, host_id filled; the mapping uses err->http_status as
 *                          the caller set it, else the code alone)
 * Nothing is written to the outputs unless the call succeeds. `err` may be NULL.
 * ETags are handed out with their quotes, as S3 sends them; an unquoted ETag (Ceph RGW's
 * CopyObject answer) is quoted; an empty one stays empty. Continuation tokens and markers are
 * returned as sent (RGW sends raw keys there): the caller URI-encodes them for the next
 * request. */
#ifndef S3F_S3_XML_H
#define S3F_S3_XML_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"

#define S3F__XML_MAX_ENTRIES 10000  /* per list in one page */
#define S3F__XML_MAX_TEXT (64 << 10) /* bytes of text in one element */
#define S3F__XML_MAX_DEPTH 16

/* True if `body` is a well-formed S3 error document <Error><Code/><Message/><RequestId/>
 * <HostId/>...</Error> (also used to detect 200-with-error); then err->code, message,
 * request_id and host_id are filled (truncated to their fields) and nothing else changes.
 * False, with err untouched, for anything else (HTML, truncated, empty). */
bool s3f__xml_parse_error(const char *body, size_t len, struct s3f_error *err);

/* ListObjectsV2 (<ListBucketResult>). *out: caller frees with s3f_list_page_free. Keys,
 * prefixes and the start-after/delimiter are URL-decoded when the response says
 * <EncodingType>url</EncodingType>. A truncated page without NextContinuationToken is
 * S3F_ERR_BAD_RESPONSE; next_continuation_token is NULL when the page is not truncated. */
enum s3f_status s3f__xml_parse_list_objects_v2(const char *body, size_t len,
                                               struct s3f_list_page **out,
                                               struct s3f_error *err);

/* CreateMultipartUpload (<InitiateMultipartUploadResult>): *upload_id receives a malloc'ed
 * copy of <UploadId> (caller frees); missing or empty is S3F_ERR_BAD_RESPONSE. */
enum s3f_status s3f__xml_parse_initiate_multipart(const char *body, size_t len,
                                                  char **upload_id, struct s3f_error *err);

/* CompleteMultipartUpload (<CompleteMultipartUploadResult>), also for 200 responses that
 * carry an <Error> (then the mapped error status). Sets info->etag (may be empty: Ceph RGW)
 * and the checksum_* fields present in the document; other fields of *info are left as
 * they were. A value longer than its field is S3F_ERR_BAD_RESPONSE (never truncated). */
enum s3f_status s3f__xml_parse_complete_multipart(const char *body, size_t len,
                                                  struct s3f_object_info *info,
                                                  struct s3f_error *err);

/* CopyObject (<CopyObjectResult>), 200-with-error as above. Sets etag, last_modified and the
 * checksum_* fields present; leaves the rest of *info. ETag is required. */
enum s3f_status s3f__xml_parse_copy_object(const char *body, size_t len,
                                           struct s3f_object_info *info,
                                           struct s3f_error *err);

/* UploadPartCopy (<CopyPartResult>), 200-with-error as above. Sets etag, last_modified and
 * the checksum_* fields present; leaves the rest of *info. ETag is required. */
enum s3f_status s3f__xml_parse_copy_part(const char *body, size_t len,
                                         struct s3f_object_info *info,
                                         struct s3f_error *err);

/* ListParts (<ListPartsResult>). *out: free with s3f_parts_page_free. part.checksum holds the
 * first Checksum* element of the part, part.checksum_algorithm its algorithm (NONE for SHA-1 /
 * SHA-256). A truncated page needs NextPartNumberMarker. */
enum s3f_status s3f__xml_parse_list_parts(const char *body, size_t len,
                                          struct s3f_parts_page **out, struct s3f_error *err);

/* ListMultipartUploads (<ListMultipartUploadsResult>). *out: free with
 * s3f_uploads_page_free. next_key_marker / next_upload_id_marker are NULL when absent or
 * empty; a truncated page needs NextKeyMarker. URL-decodes keys with EncodingType url. */
enum s3f_status s3f__xml_parse_list_multipart_uploads(const char *body, size_t len,
                                                      struct s3f_uploads_page **out,
                                                      struct s3f_error *err);

/* ListBuckets (<ListAllMyBucketsResult>). *out: free with s3f_bucket_list_free. A <Bucket>
 * without <Name> is S3F_ERR_BAD_RESPONSE. */
enum s3f_status s3f__xml_parse_list_buckets(const char *body, size_t len,
                                            struct s3f_bucket_list **out,
                                            struct s3f_error *err);

/* DeleteObjects (<DeleteResult>): counts <Deleted> and <Error> entries. When n_errors > 0,
 * first_error (optional) receives the first entry's Code, Message and Key (the key in
 * first_error->resource) and its mapped status in first_error->status. Returns S3F_OK when
 * the document parsed, whatever the per-key errors; the caller decides. */
enum s3f_status s3f__xml_parse_delete_result(const char *body, size_t len, size_t *n_deleted,
                                             size_t *n_errors, struct s3f_error *first_error,
                                             struct s3f_error *err);

/* Append the DeleteObjects body to `out` (an initialised buffer, whose cap applies):
 * <?xml ...?><Delete xmlns="..."><Quiet>true</Quiet><Object><Key>k</Key></Object>...</Delete>
 * (Quiet only when `quiet`). Keys are XML-escaped (& < > " ', and TAB LF CR as character
 * references so that they survive XML end-of-line handling). S3F_ERR_INVALID_ARGUMENT for
 * n outside 1..1000, an empty key, a key that is not UTF-8 or holds a character XML 1.0
 * cannot carry (other C0 controls, U+FFFE, U+FFFF: delete those with DeleteObject), or a
 * body over the buffer's cap. On failure `out` is restored to its previous length. */
enum s3f_status s3f__xml_build_delete(const char *const *keys, size_t n, bool quiet,
                                      struct s3f__buf *out, struct s3f_error *err);

/* Append `s` to `b` with & < > " ' as entity references (for element text such as the
 * ETags of a CompleteMultipartUpload body). S3F_ERR_NO_MEMORY past the buffer's cap. */
enum s3f_status s3f__xml_append_escaped(struct s3f__buf *b, const char *s);

#include "s3/retry.h" /* the status of an <Error> document */

#endif /* S3F_S3_XML_H */
