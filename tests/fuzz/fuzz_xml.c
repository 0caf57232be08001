/* Every S3 XML response parser (src/s3/xml*.c) on the same bytes: error documents,
 * ListObjectsV2, CreateMultipartUpload, CompleteMultipartUpload, CopyObject, UploadPartCopy
 * (the three with 200-with-error), ListParts, ListMultipartUploads, DeleteObjects. Each
 * parser refuses a wrong root quickly, so one input exercises all of them. Also checks the
 * documented contracts: success leaves a consistent result; failure writes nothing. */
#include <string.h>

#include "fuzz.h"
#include "s3/xml.h"

static void check_info(const struct s3f_object_info *info) {
    /* fixed-size fields are always NUL-terminated */
    FUZZ_CHECK(memchr(info->etag, 0, sizeof(info->etag)));
    FUZZ_CHECK(memchr(info->checksum_crc32c, 0, sizeof(info->checksum_crc32c)));
    FUZZ_CHECK(memchr(info->checksum_crc32, 0, sizeof(info->checksum_crc32)));
    FUZZ_CHECK(memchr(info->checksum_crc64nvme, 0, sizeof(info->checksum_crc64nvme)));
    FUZZ_CHECK(memchr(info->checksum_sha256, 0, sizeof(info->checksum_sha256)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    struct s3f_error err;

    memset(&err, 0, sizeof(err));
    if (s3f__xml_parse_error(body, size, &err))
        FUZZ_CHECK(memchr(err.code, 0, sizeof(err.code)) && memchr(err.message, 0, sizeof(err.message)));

    struct s3f_list_page *lp = NULL;
    memset(&err, 0, sizeof(err));
    if (s3f__xml_parse_list_objects_v2(body, size, &lp, &err) == S3F_OK) {
        FUZZ_CHECK(lp);
        for (size_t i = 0; i < lp->n_objects; i++)
            FUZZ_CHECK(lp->objects[i].key);
        for (size_t i = 0; i < lp->n_common_prefixes; i++)
            FUZZ_CHECK(lp->common_prefixes[i]);
        FUZZ_CHECK(!lp->is_truncated || lp->next_continuation_token);
        s3f_list_page_free(lp);
    } else {
        FUZZ_CHECK(!lp);
    }

    char *upload_id = NULL;
    if (s3f__xml_parse_initiate_multipart(body, size, &upload_id, &err) == S3F_OK) {
        FUZZ_CHECK(upload_id && upload_id[0]);
        free(upload_id);
    } else {
        FUZZ_CHECK(!upload_id);
    }

    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    err.http_status = 200;
    (void)s3f__xml_parse_complete_multipart(body, size, &info, &err);
    check_info(&info);
    memset(&info, 0, sizeof(info));
    (void)s3f__xml_parse_copy_object(body, size, &info, &err);
    check_info(&info);
    memset(&info, 0, sizeof(info));
    (void)s3f__xml_parse_copy_part(body, size, &info, &err);
    check_info(&info);

    struct s3f_parts_page *pp = NULL;
    if (s3f__xml_parse_list_parts(body, size, &pp, &err) == S3F_OK) {
        FUZZ_CHECK(pp);
        for (size_t i = 0; i < pp->n_parts; i++)
            FUZZ_CHECK(memchr(pp->parts[i].etag, 0, sizeof(pp->parts[i].etag)));
        s3f_parts_page_free(pp);
    } else {
        FUZZ_CHECK(!pp);
    }

    struct s3f_uploads_page *up = NULL;
    if (s3f__xml_parse_list_multipart_uploads(body, size, &up, &err) == S3F_OK) {
        FUZZ_CHECK(up);
        for (size_t i = 0; i < up->n_uploads; i++)
            FUZZ_CHECK(up->uploads[i].key && up->uploads[i].upload_id);
        s3f_uploads_page_free(up);
    } else {
        FUZZ_CHECK(!up);
    }

    size_t n_deleted = 0, n_errors = 0;
    struct s3f_error first;
    memset(&first, 0, sizeof(first));
    (void)s3f__xml_parse_delete_result(body, size, &n_deleted, &n_errors, &first, &err);
    return 0;
}
