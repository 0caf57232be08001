/* S3 XML parsing and building, with the documents under tests/data/xml/ (AWS and Ceph RGW
 * shapes), every truncation of every document, garbage, hostile XML, and the S3 error code
 * table tests/vectors/s3/error-codes.tsv. */
#include <expat.h>
#include <stdlib.h>
#include <string.h>

#include "s3/xml.h"
#include "testutil.h"

static char *load(const char *name, size_t *len) {
    char rel[256];
    snprintf(rel, sizeof(rel), "tests/data/xml/%s", name);
    char *p = test_read_file(test_src_path(rel), len);
    if (!p)
        test_fail(__FILE__, __LINE__, "cannot read %s", rel);
    return p;
}

/* ---- documents ------------------------------------------------------------------------------ */
static void test_list_objects_aws(void) {
    size_t len;
    char *body = load("aws-list-objects-v2.xml", &len);
    struct s3f_list_page *pg = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, &err), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_objects, 2);
        CHECK_STR(pg->objects[0].key, "run-42/model.safetensors");
        CHECK_INT(pg->objects[0].size, 100663296);
        CHECK_INT(pg->objects[0].last_modified, 1730797964);
        CHECK_STR(pg->objects[0].etag, "\"3b9e52b3b4f4d9b2c9f1e3b2a1c0d9e8-12\"");
        CHECK_STR(pg->objects[0].storage_class, "STANDARD");
        CHECK_STR(pg->objects[1].key, "run-42/optim & sched <v2>.pt");
        CHECK_INT(pg->objects[1].size, 0);
        CHECK_STR(pg->objects[1].storage_class, "INTELLIGENT_TIERING");
        CHECK_INT(pg->n_common_prefixes, 2);
        CHECK_STR(pg->common_prefixes[0], "run-42/shards/");
        CHECK_STR(pg->common_prefixes[1], "run-42/tb/");
        CHECK_INT(pg->is_truncated, 1);
        CHECK_STR(pg->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    }
    s3f_list_page_free(pg);
    free(body);
}

static void test_list_objects_url_encoded(void) {
    size_t len;
    char *body = load("aws-list-objects-v2-url.xml", &len);
    struct s3f_list_page *pg = NULL;
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_objects, 3);
        CHECK_STR(pg->objects[0].key, "caf\xc3\xa9/menu du jour.txt");
        CHECK_STR(pg->objects[1].key, "caf\xc3\xa9/a+b=c&d");
        CHECK_STR(pg->objects[2].key, "caf\xc3\xa9/ctl\x01\x1fx"); /* not XML 1.0 chars */
        CHECK_INT(pg->n_common_prefixes, 1);
        CHECK_STR(pg->common_prefixes[0], "caf\xc3\xa9/sub dir/");
        CHECK_INT(pg->is_truncated, 0);
        CHECK(pg->next_continuation_token == NULL);
    }
    s3f_list_page_free(pg);
    free(body);
}

/* Recorded from Ceph RGW (tests/servers/rgw.sh) with EncodingType=url: RGW encodes spaces
 * as %20, sends <EncodingType> first and <CommonPrefixes> before <Contents>, and puts the raw
 * (not encoded) marker in NextContinuationToken. */
static void test_list_objects_rgw(void) {
    size_t len;
    char *body = load("rgw-list-objects-v2.xml", &len);
    struct s3f_list_page *pg = NULL;
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_objects, 1);
        CHECK_STR(pg->objects[0].key, "big file.bin");
        CHECK_INT(pg->objects[0].size, 5);
        CHECK_INT(pg->objects[0].last_modified, 1796231366);
        CHECK_STR(pg->objects[0].etag, "\"5d41402abc4b2a76b9719d911017c592\"");
        CHECK_STR(pg->objects[0].storage_class, "STANDARD");
        CHECK_INT(pg->n_common_prefixes, 1);
        CHECK_STR(pg->common_prefixes[0], "caf\xc3\xa9/");
        CHECK_INT(pg->is_truncated, 1);
        CHECK_STR(pg->next_continuation_token, "caf\xc3\xa9/");
    }
    s3f_list_page_free(pg);
    free(body);

    body = load("rgw-list-objects-v2-url.xml", &len);
    pg = NULL;
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        static const char *const keys[] = {"big file.bin", "caf\xc3\xa9/a+b=c&d", "dir/small.txt",
                                           "dir/sub/x.txt"};
        CHECK_INT(pg->n_objects, 4);
        for (size_t i = 0; i < 4 && i < pg->n_objects; i++)
            CHECK_STR(pg->objects[i].key, keys[i]);
        CHECK_INT(pg->n_common_prefixes, 0);
        CHECK(pg->common_prefixes == NULL);
        CHECK_INT(pg->is_truncated, 0);
        CHECK(pg->next_continuation_token == NULL);
    }
    s3f_list_page_free(pg);
    free(body);
    s3f_list_page_free(NULL);
}

static void test_initiate(void) {
    static const char *const cases[][2] = {
        {"aws-initiate-multipart.xml", "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"},
        {"rgw-initiate-multipart.xml", "2~KNLVzCld2wRuRU7UTfh_uyu59I-1tXg"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        size_t len;
        char *body = load(cases[i][0], &len);
        char *id = NULL;
        CHECK_INT(s3f__xml_parse_initiate_multipart(body, len, &id, NULL), S3F_OK);
        CHECK_STR(id, cases[i][1]);
        free(id);
        free(body);
    }
    const char *no_id = "<InitiateMultipartUploadResult><Bucket>b</Bucket>"
                        "<UploadId></UploadId></InitiateMultipartUploadResult>";
    char *id = (char *)"sentinel";
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_initiate_multipart(no_id, strlen(no_id), &id, &err),
              S3F_ERR_BAD_RESPONSE);
    CHECK(id == NULL);
    CHECK(strstr(err.message, "UploadId") != NULL);
}

static void test_complete(void) {
    size_t len;
    char *body = load("aws-complete-multipart.xml", &len);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    s3f__strlcpy(info.version_id, "v1", sizeof(info.version_id)); /* from a header: left alone */
    CHECK_INT(s3f__xml_parse_complete_multipart(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
    CHECK_STR(info.checksum_crc32c, "xU+Krw==-3");
    CHECK_STR(info.version_id, "v1");
    free(body);

    /* moto 5: <CompleteMultipartUploadResponse> as the root */
    body = load("moto-complete-multipart.xml", &len);
    memset(&info, 0, sizeof(info));
    CHECK_INT(s3f__xml_parse_complete_multipart(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"62109206880d38a4010a98e11243924a-1\"");
    free(body);

    body = load("rgw-complete-multipart.xml", &len);
    memset(&info, 0, sizeof(info));
    s3f__strlcpy(info.etag, "old", sizeof(info.etag));
    CHECK_INT(s3f__xml_parse_complete_multipart(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, ""); /* RGW: empty ETag, HEAD shows the real one */
    free(body);

    /* RGW answers a wrong part ETag with 400 InvalidPart */
    body = load("rgw-complete-multipart-badpart.xml", &len);
    struct s3f_error e400;
    s3f_error_clear(&e400);
    e400.http_status = 400;
    CHECK_INT(s3f__xml_parse_complete_multipart(body, len, &info, &e400), S3F_ERR_S3);
    CHECK_STR(e400.code, "InvalidPart");
    CHECK_STR(e400.request_id, "tx00000791a845493634263-006b1050c8-100e-default");
    CHECK(!s3f__s3_error_retryable(400, e400.code));
    free(body);

    /* 200 OK carrying an error document */
    static const char *const errs[][4] = {
        {"aws-complete-multipart-200-error.xml", "InternalError", "656c76696e6727732072657175657374",
         "We encountered an internal error. Please try again."},
        {"aws-complete-multipart-padded-error.xml", "InvalidPart", "4442587FB7D0A2F9",
         "One or more of the specified parts could not be found."},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(errs); i++) {
        body = load(errs[i][0], &len);
        memset(&info, 0, sizeof(info));
        s3f__strlcpy(info.etag, "untouched", sizeof(info.etag));
        struct s3f_error err;
        s3f_error_clear(&err);
        err.http_status = 200;
        enum s3f_status st = s3f__xml_parse_complete_multipart(body, len, &info, &err);
        CHECK_INT(st, i == 0 ? S3F_ERR_SERVER : S3F_ERR_S3);
        CHECK_INT(err.status, st);
        CHECK_STR(err.code, errs[i][1]);
        CHECK_STR(err.request_id, errs[i][2]);
        CHECK(strncmp(err.message, errs[i][3], strlen(errs[i][3])) == 0);
        CHECK(err.host_id[0] != '\0');
        CHECK_STR(info.etag, "untouched");
        CHECK(s3f__s3_error_retryable(200, err.code) == (i == 0));
        free(body);
    }
    /* an ETag longer than the field is refused, not truncated */
    char big[600];
    snprintf(big, sizeof(big), "<CompleteMultipartUploadResult><ETag>\"%0200d\"</ETag>"
                               "</CompleteMultipartUploadResult>", 7);
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_complete_multipart(big, strlen(big), &info, &err),
              S3F_ERR_BAD_RESPONSE);
    CHECK(strstr(err.message, "<ETag>") != NULL);
    CHECK(strstr(err.message, "CompleteMultipartUpload") != NULL);
}

static void test_copy(void) {
    size_t len;
    char *body = load("aws-copy-object.xml", &len);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CHECK_INT(s3f__xml_parse_copy_object(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"9b2cf535f27731c974343645a3985328\"");
    CHECK_INT(info.last_modified, 1255369830);
    CHECK_STR(info.checksum_crc32, "y/Q5Jg==");
    free(body);

    body = load("rgw-copy-object.xml", &len); /* RGW sends the ETag without quotes */
    memset(&info, 0, sizeof(info));
    CHECK_INT(s3f__xml_parse_copy_object(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"5d41402abc4b2a76b9719d911017c592\"");
    CHECK_INT(info.last_modified, 1796231368);
    free(body);

    body = load("aws-copy-object-200-error.xml", &len);
    struct s3f_error err;
    s3f_error_clear(&err);
    err.http_status = 200;
    CHECK_INT(s3f__xml_parse_copy_object(body, len, &info, &err), S3F_ERR_THROTTLED);
    CHECK_STR(err.code, "SlowDown");
    CHECK_STR(err.message, "Please reduce your request rate.");
    CHECK(s3f__s3_error_retryable(200, err.code));
    free(body);

    const char *no_etag = "<CopyObjectResult><LastModified>2009-10-12T17:50:30.000Z"
                          "</LastModified></CopyObjectResult>";
    CHECK_INT(s3f__xml_parse_copy_object(no_etag, strlen(no_etag), &info, &err),
              S3F_ERR_BAD_RESPONSE);
}

static void test_copy_part(void) {
    size_t len;
    char *body = load("aws-copy-part.xml", &len);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    s3f__strlcpy(info.content_type, "kept", sizeof(info.content_type));
    CHECK_INT(s3f__xml_parse_copy_part(body, len, &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"9b2cf535f27731c974343645a3985328\"");
    CHECK_INT(info.last_modified, 1302554096);
    CHECK_STR(info.checksum_crc32c, "zaIHQw==");
    CHECK_STR(info.content_type, "kept"); /* other fields untouched */
    free(body);

    /* RGW: unquoted ETag, quoted on the way out */
    const char *rgw = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CopyPartResult xmlns="
                      "\"http://s3.amazonaws.com/doc/2006-03-01/\"><LastModified>"
                      "2026-12-02T17:09:28.475Z</LastModified><ETag>"
                      "5d41402abc4b2a76b9719d911017c592</ETag></CopyPartResult>";
    memset(&info, 0, sizeof(info));
    CHECK_INT(s3f__xml_parse_copy_part(rgw, strlen(rgw), &info, NULL), S3F_OK);
    CHECK_STR(info.etag, "\"5d41402abc4b2a76b9719d911017c592\"");

    /* 200 with an <Error>: the mapped status, retryable, nothing written */
    body = load("aws-copy-part-200-error.xml", &len);
    struct s3f_error err;
    s3f_error_clear(&err);
    err.http_status = 200;
    memset(&info, 0, sizeof(info));
    CHECK_INT(s3f__xml_parse_copy_part(body, len, &info, &err), S3F_ERR_SERVER);
    CHECK_STR(err.code, "InternalError");
    CHECK_STR(err.request_id, "656c76696e6727732072657175657374");
    CHECK(s3f__s3_error_retryable(200, err.code));
    CHECK_STR(info.etag, "");
    /* the executor's check_200_error sees the same document as an error */
    struct s3f_error e2;
    s3f_error_clear(&e2);
    CHECK(s3f__xml_parse_error(body, len, &e2));
    CHECK_STR(e2.code, "InternalError");
    free(body);

    const char *no_etag = "<CopyPartResult><LastModified>2011-04-11T20:34:56.000Z"
                          "</LastModified></CopyPartResult>";
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_copy_part(no_etag, strlen(no_etag), &info, &err),
              S3F_ERR_BAD_RESPONSE);
    CHECK(strstr(err.message, "UploadPartCopy") != NULL);
    /* a CopyObject answer is not a CopyPartResult */
    const char *wrong = "<CopyObjectResult><ETag>\"x\"</ETag></CopyObjectResult>";
    CHECK_INT(s3f__xml_parse_copy_part(wrong, strlen(wrong), &info, &err),
              S3F_ERR_BAD_RESPONSE);
}

static void test_list_parts(void) {
    size_t len;
    char *body = load("aws-list-parts.xml", &len);
    struct s3f_parts_page *pg = NULL;
    CHECK_INT(s3f__xml_parse_list_parts(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_parts, 2);
        CHECK_INT(pg->parts[0].part_number, 2);
        CHECK_INT(pg->parts[0].size, 5242880);
        CHECK_STR(pg->parts[0].etag, "\"7778aef83f66abc1fa1e8477f296d394\"");
        CHECK_STR(pg->parts[0].checksum, "TH4EZg==");
        CHECK_INT(pg->parts[0].checksum_algorithm, S3F_CHECKSUM_CRC32C);
        CHECK_INT(pg->parts[0].last_modified, 1289422114);
        CHECK_INT(pg->parts[1].part_number, 3);
        CHECK_STR(pg->parts[1].checksum, "Z7mBIQ==");
        CHECK_INT(pg->is_truncated, 1);
        CHECK_INT(pg->next_part_number_marker, 3);
    }
    s3f_parts_page_free(pg);
    free(body);

    body = load("rgw-list-parts.xml", &len);
    pg = NULL;
    CHECK_INT(s3f__xml_parse_list_parts(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_parts, 1);
        CHECK_INT(pg->parts[0].part_number, 1);
        CHECK_INT(pg->parts[0].size, 5242880);
        CHECK_STR(pg->parts[0].etag, "\"b8fc857a25e7958868c2f003d5e0952d\"");
        CHECK_STR(pg->parts[0].checksum, "");
        CHECK_INT(pg->is_truncated, 1);
        CHECK_INT(pg->next_part_number_marker, 1);
    }
    s3f_parts_page_free(pg);
    free(body);
    s3f_parts_page_free(NULL);

    static const char *const bad[] = {
        "<ListPartsResult><Part><PartNumber>0</PartNumber></Part></ListPartsResult>",
        "<ListPartsResult><Part><PartNumber>10001</PartNumber></Part></ListPartsResult>",
        "<ListPartsResult><Part><Size>5</Size></Part></ListPartsResult>",
        "<ListPartsResult><IsTruncated>true</IsTruncated></ListPartsResult>",
        "<ListPartsResult><Part><PartNumber>1</PartNumber><Size>-5</Size></Part>"
        "</ListPartsResult>",
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(bad); i++) {
        pg = NULL;
        CHECK_INT(s3f__xml_parse_list_parts(bad[i], strlen(bad[i]), &pg, NULL),
                  S3F_ERR_BAD_RESPONSE);
        CHECK(pg == NULL);
    }
}

static void test_list_uploads(void) {
    size_t len;
    char *body = load("aws-list-multipart-uploads.xml", &len);
    struct s3f_uploads_page *pg = NULL;
    CHECK_INT(s3f__xml_parse_list_multipart_uploads(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_uploads, 3);
        CHECK_STR(pg->uploads[0].key, "run-41/model.safetensors");
        CHECK_STR(pg->uploads[0].upload_id,
                  "VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
        CHECK_INT(pg->uploads[0].initiated, 1289422113);
        CHECK_STR(pg->uploads[2].key, "run-43/model.safetensors");
        CHECK_INT(pg->is_truncated, 1);
        CHECK_STR(pg->next_key_marker, "run-43/model.safetensors");
        CHECK_STR(pg->next_upload_id_marker, "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ");
    }
    s3f_uploads_page_free(pg);
    free(body);

    body = load("rgw-list-multipart-uploads.xml", &len);
    pg = NULL;
    CHECK_INT(s3f__xml_parse_list_multipart_uploads(body, len, &pg, NULL), S3F_OK);
    if (pg) {
        CHECK_INT(pg->n_uploads, 1);
        CHECK_STR(pg->uploads[0].key, "mp key.bin");
        CHECK_STR(pg->uploads[0].upload_id, "2~KNLVzCld2wRuRU7UTfh_uyu59I-1tXg");
        CHECK_INT(pg->uploads[0].initiated, 1796231368);
        CHECK_INT(pg->is_truncated, 1);
        CHECK_STR(pg->next_key_marker, "mp key.bin");
        CHECK_STR(pg->next_upload_id_marker, "2~KNLVzCld2wRuRU7UTfh_uyu59I-1tXg");
    }
    s3f_uploads_page_free(pg);
    free(body);
    s3f_uploads_page_free(NULL);

    const char *bad = "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                      "<NextKeyMarker></NextKeyMarker></ListMultipartUploadsResult>";
    pg = NULL;
    CHECK_INT(s3f__xml_parse_list_multipart_uploads(bad, strlen(bad), &pg, NULL),
              S3F_ERR_BAD_RESPONSE);
    const char *no_id = "<ListMultipartUploadsResult><Upload><Key>k</Key></Upload>"
                        "</ListMultipartUploadsResult>";
    CHECK_INT(s3f__xml_parse_list_multipart_uploads(no_id, strlen(no_id), &pg, NULL),
              S3F_ERR_BAD_RESPONSE);
    CHECK(pg == NULL);
}

static void test_list_buckets_recorded(void) {
    size_t len;
    char *body = load("aws-list-buckets.xml", &len);
    struct s3f_bucket_list *l = NULL;
    CHECK_INT(s3f__xml_parse_list_buckets(body, len, &l, NULL), S3F_OK);
    if (l) {
        CHECK_INT(l->n_buckets, 2);
        CHECK_STR(l->buckets[0].name, "DOC-EXAMPLE-BUCKET");
        CHECK_INT(l->buckets[0].creation_date, 1576107167);
        CHECK_STR(l->buckets[1].name, "DOC-EXAMPLE-BUCKET2");
    }
    s3f_bucket_list_free(l);
    free(body);
    body = load("rgw-list-buckets.xml", &len);
    l = NULL;
    CHECK_INT(s3f__xml_parse_list_buckets(body, len, &l, NULL), S3F_OK);
    if (l) {
        CHECK_INT(l->n_buckets, 1);
        CHECK_STR(l->buckets[0].name, "s3fpy-test-fsspec-119b397b");
        CHECK_INT(l->buckets[0].creation_date, 1796306476);
    }
    s3f_bucket_list_free(l);
    free(body);
}

static void test_list_buckets(void) {
    /* AWS's documented shape, with the namespace and an Owner */
    const char *doc =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Owner><ID>abc</ID><DisplayName>me</DisplayName></Owner><Buckets>"
        "<Bucket><Name>ckpt-a</Name><CreationDate>2010-11-10T20:48:33.000Z</CreationDate>"
        "</Bucket><Bucket><Name>ckpt-b</Name></Bucket></Buckets>"
        "</ListAllMyBucketsResult>";
    struct s3f_bucket_list *l = NULL;
    CHECK_INT(s3f__xml_parse_list_buckets(doc, strlen(doc), &l, NULL), S3F_OK);
    if (l) {
        CHECK_INT(l->n_buckets, 2);
        CHECK_STR(l->buckets[0].name, "ckpt-a");
        CHECK_INT(l->buckets[0].creation_date, 1289422113);
        CHECK_STR(l->buckets[1].name, "ckpt-b");
        CHECK_INT(l->buckets[1].creation_date, 0);
    }
    s3f_bucket_list_free(l);
    s3f_bucket_list_free(NULL);
    const char *none = "<ListAllMyBucketsResult><Buckets/></ListAllMyBucketsResult>";
    l = NULL;
    CHECK_INT(s3f__xml_parse_list_buckets(none, strlen(none), &l, NULL), S3F_OK);
    CHECK(l != NULL && l->n_buckets == 0);
    s3f_bucket_list_free(l);
    const char *no_name = "<ListAllMyBucketsResult><Buckets><Bucket><CreationDate>"
                          "2010-11-10T20:48:33.000Z</CreationDate></Bucket></Buckets>"
                          "</ListAllMyBucketsResult>";
    l = NULL;
    CHECK_INT(s3f__xml_parse_list_buckets(no_name, strlen(no_name), &l, NULL),
              S3F_ERR_BAD_RESPONSE);
    CHECK(l == NULL);
    const char *other = "<ListBucketResult><Name>x</Name></ListBucketResult>";
    CHECK_INT(s3f__xml_parse_list_buckets(other, strlen(other), &l, NULL),
              S3F_ERR_BAD_RESPONSE);
    const char *denied = "<Error><Code>AccessDenied</Code><Message>no</Message>"
                         "<RequestId>r1</RequestId></Error>";
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_list_buckets(denied, strlen(denied), &l, &err),
              S3F_ERR_ACCESS_DENIED);
    CHECK_STR(err.code, "AccessDenied");
    CHECK(l == NULL);
}

static void test_delete_result(void) {
    size_t len;
    char *body = load("aws-delete-result.xml", &len);
    size_t nd = 99, ne = 99;
    struct s3f_error first;
    s3f_error_clear(&first);
    CHECK_INT(s3f__xml_parse_delete_result(body, len, &nd, &ne, &first, NULL), S3F_OK);
    CHECK_INT(nd, 2);
    CHECK_INT(ne, 2);
    CHECK_STR(first.code, "AccessDenied");
    CHECK_STR(first.message, "Access Denied");
    CHECK_STR(first.resource, "run-41/locked.pt");
    CHECK_INT(first.status, S3F_ERR_ACCESS_DENIED);
    free(body);

    body = load("rgw-delete-result.xml", &len);
    s3f_error_clear(&first);
    CHECK_INT(s3f__xml_parse_delete_result(body, len, &nd, &ne, &first, NULL), S3F_OK);
    CHECK_INT(nd, 2); /* RGW reports a missing key as deleted */
    CHECK_INT(ne, 0);
    CHECK_INT(first.status, S3F_OK);
    CHECK_STR(first.code, "");
    free(body);

    /* quiet mode with nothing to report */
    const char *empty = "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>";
    CHECK_INT(s3f__xml_parse_delete_result(empty, strlen(empty), &nd, &ne, NULL, NULL), S3F_OK);
    CHECK_INT(nd + ne, 0);

    /* the whole request refused */
    body = load("aws-error-signature.xml", &len);
    struct s3f_error err;
    s3f_error_clear(&err);
    err.http_status = 403;
    CHECK_INT(s3f__xml_parse_delete_result(body, len, &nd, &ne, NULL, &err),
              S3F_ERR_ACCESS_DENIED);
    CHECK_STR(err.code, "SignatureDoesNotMatch");
    CHECK_STR(err.request_id, "QPE0S8NQS7M3R9Z2");
    free(body);
}

static void test_error_docs(void) {
    struct {
        const char *file, *code, *message, *request_id, *host_id;
    } cases[] = {
        {"aws-error-nosuchkey.xml", "NoSuchKey", "The specified key does not exist.",
         "4442587FB7D0A2F9",
         "RUZUSPWRlaM+n0sUvUCXNTrWqGs8CfKy9lQ5rmpMGZSAcXN5XMIGJv1pdW7ZyD7PtJ5TV7pvH5k="},
        {"rgw-error-nosuchkey.xml", "NoSuchKey", "",
         "tx000005fd464a8e2e8fcbe-006b1050c8-100e-default", "100e-default-default"},
        {"rgw-error-nosuchbucket.xml", "NoSuchBucket", "",
         "tx00000868e8db557baeae1-006b1050c8-100e-default", "100e-default-default"},
        {"rgw-error-nosuchupload.xml", "NoSuchKey", "", /* RGW's answer to a bad upload id */
         "tx000006fc8595555a24e1e-006b1050c8-100e-default", "100e-default-default"},
        {"rgw-error-signature.xml", "SignatureDoesNotMatch", "",
         "tx00000612f0d6d2b7a546f-006b1050c8-100e-default", "100e-default-default"},
        {"aws-error-signature.xml", "SignatureDoesNotMatch",
         "The request signature we calculated does not match the signature you provided. "
         "Check your key and signing method.",
         "QPE0S8NQS7M3R9Z2",
         "x1q4uI+jXyX0Wb5pFpcQ0aIhsM7mkX8sMW5I7WeoZrzZp4VvR2x7mU5gX7y2T4tU="},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        size_t len;
        char *body = load(cases[i].file, &len);
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK(s3f__xml_parse_error(body, len, &err));
        CHECK_STR(err.code, cases[i].code);
        CHECK_STR(err.message, cases[i].message);
        CHECK_STR(err.request_id, cases[i].request_id);
        CHECK_STR(err.host_id, cases[i].host_id);
        CHECK_INT(err.status, S3F_OK); /* the caller decides */
        free(body);
    }
    /* not error documents: err untouched */
    static const char *const not_errors[] = {"html-503.html", "aws-list-objects-v2.xml",
                                             "aws-copy-object.xml"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(not_errors); i++) {
        size_t len;
        char *body = load(not_errors[i], &len);
        struct s3f_error err;
        s3f_error_clear(&err);
        s3f__strlcpy(err.code, "keep", sizeof(err.code));
        CHECK(!s3f__xml_parse_error(body, len, &err));
        CHECK_STR(err.code, "keep");
        free(body);
    }
    CHECK(!s3f__xml_parse_error(NULL, 0, NULL));
    CHECK(!s3f__xml_parse_error("", 0, NULL));
    CHECK(s3f__xml_parse_error("<Error/>", 8, NULL));
    /* a list parser given an error document (e.g. a 403) maps it */
    size_t len;
    char *body = load("rgw-error-nosuchkey.xml", &len);
    struct s3f_list_page *pg = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    err.http_status = 404;
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, &err), S3F_ERR_NOT_FOUND);
    CHECK(pg == NULL);
    CHECK_STR(err.code, "NoSuchKey");
    free(body);
    /* and an HTML page is a bad response naming the element */
    body = load("html-503.html", &len);
    s3f_error_clear(&err);
    CHECK_INT(s3f__xml_parse_list_objects_v2(body, len, &pg, &err), S3F_ERR_BAD_RESPONSE);
    CHECK(strstr(err.message, "<html>") != NULL);
    CHECK(strstr(err.message, "ListObjectsV2") != NULL);
    free(body);
}

/* ---- truncation, garbage, hostile documents ------------------------------------------------- */
enum kind { K_LIST, K_INIT, K_COMPLETE, K_COPY, K_PARTS, K_UPLOADS, K_DELETE, K_ERROR };

/* Run one parser; frees what it returns. For K_ERROR: S3F_OK iff parse_error is true. */
static enum s3f_status parse_kind(enum kind k, const char *body, size_t len,
                                  struct s3f_error *err) {
    enum s3f_status st = S3F_ERR_INTERNAL;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    switch (k) {
    case K_LIST: {
        struct s3f_list_page *pg = NULL;
        st = s3f__xml_parse_list_objects_v2(body, len, &pg, err);
        if ((st == S3F_OK) != (pg != NULL))
            st = S3F_ERR_INTERNAL;
        s3f_list_page_free(pg);
        break;
    }
    case K_INIT: {
        char *id = NULL;
        st = s3f__xml_parse_initiate_multipart(body, len, &id, err);
        if ((st == S3F_OK) != (id != NULL))
            st = S3F_ERR_INTERNAL;
        free(id);
        break;
    }
    case K_COMPLETE: st = s3f__xml_parse_complete_multipart(body, len, &info, err); break;
    case K_COPY: st = s3f__xml_parse_copy_object(body, len, &info, err); break;
    case K_PARTS: {
        struct s3f_parts_page *pg = NULL;
        st = s3f__xml_parse_list_parts(body, len, &pg, err);
        if ((st == S3F_OK) != (pg != NULL))
            st = S3F_ERR_INTERNAL;
        s3f_parts_page_free(pg);
        break;
    }
    case K_UPLOADS: {
        struct s3f_uploads_page *pg = NULL;
        st = s3f__xml_parse_list_multipart_uploads(body, len, &pg, err);
        if ((st == S3F_OK) != (pg != NULL))
            st = S3F_ERR_INTERNAL;
        s3f_uploads_page_free(pg);
        break;
    }
    case K_DELETE: {
        size_t nd, ne;
        struct s3f_error first;
        s3f_error_clear(&first);
        st = s3f__xml_parse_delete_result(body, len, &nd, &ne, &first, err);
        break;
    }
    case K_ERROR: st = s3f__xml_parse_error(body, len, err) ? S3F_OK : S3F_ERR_BAD_RESPONSE; break;
    }
    return st;
}

static const struct {
    const char *file;
    enum kind kind;
    enum s3f_status full; /* status of the whole document */
} docs[] = {
    {"aws-list-objects-v2.xml", K_LIST, S3F_OK},
    {"aws-list-objects-v2-url.xml", K_LIST, S3F_OK},
    {"rgw-list-objects-v2.xml", K_LIST, S3F_OK},
    {"rgw-list-objects-v2-url.xml", K_LIST, S3F_OK},
    {"aws-initiate-multipart.xml", K_INIT, S3F_OK},
    {"rgw-initiate-multipart.xml", K_INIT, S3F_OK},
    {"aws-complete-multipart.xml", K_COMPLETE, S3F_OK},
    {"rgw-complete-multipart.xml", K_COMPLETE, S3F_OK},
    {"moto-complete-multipart.xml", K_COMPLETE, S3F_OK},
    {"rgw-complete-multipart-badpart.xml", K_COMPLETE, S3F_ERR_S3},
    {"aws-complete-multipart-200-error.xml", K_COMPLETE, S3F_ERR_SERVER},
    {"aws-complete-multipart-padded-error.xml", K_COMPLETE, S3F_ERR_S3},
    {"aws-copy-object.xml", K_COPY, S3F_OK},
    {"rgw-copy-object.xml", K_COPY, S3F_OK},
    {"aws-copy-object-200-error.xml", K_COPY, S3F_ERR_THROTTLED},
    {"aws-list-parts.xml", K_PARTS, S3F_OK},
    {"rgw-list-parts.xml", K_PARTS, S3F_OK},
    {"aws-list-multipart-uploads.xml", K_UPLOADS, S3F_OK},
    {"rgw-list-multipart-uploads.xml", K_UPLOADS, S3F_OK},
    {"aws-delete-result.xml", K_DELETE, S3F_OK},
    {"rgw-delete-result.xml", K_DELETE, S3F_OK},
    {"aws-error-nosuchkey.xml", K_ERROR, S3F_OK},
    {"rgw-error-nosuchkey.xml", K_ERROR, S3F_OK},
    {"rgw-error-nosuchbucket.xml", K_ERROR, S3F_OK},
    {"rgw-error-nosuchupload.xml", K_ERROR, S3F_OK},
    {"rgw-error-signature.xml", K_ERROR, S3F_OK},
    {"aws-error-signature.xml", K_ERROR, S3F_OK},
};

/* Every prefix of every document that stops before the end of its root element is
 * BAD_RESPONSE (never a crash, a leak or a partial result); every longer prefix parses like
 * the whole document. Each prefix is copied into an exactly sized allocation so that ASan
 * catches any read past its end. */
static void test_truncated(void) {
    size_t cuts = 0;
    for (size_t i = 0; i < S3F_ARRAY_LEN(docs); i++) {
        size_t len;
        char *body = load(docs[i].file, &len);
        if (!body)
            continue;
        size_t end = len;
        while (end && body[end - 1] != '>')
            end--; /* just after the root's closing '>' */
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(parse_kind(docs[i].kind, body, len, &err), docs[i].full);
        int bad = 0;
        for (size_t n = 0; n <= len; n++) {
            char *cut = malloc(n ? n : 1);
            memcpy(cut, body, n);
            s3f_error_clear(&err);
            enum s3f_status st = parse_kind(docs[i].kind, n ? cut : NULL, n, &err);
            enum s3f_status want = n < end ? S3F_ERR_BAD_RESPONSE : docs[i].full;
            if (st != want) {
                if (bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s cut at %zu: got %s want %s (%s)",
                              docs[i].file, n, s3f_status_name(st), s3f_status_name(want),
                              err.message);
            } else {
                test_checks_passed++;
            }
            /* the message says where, for the parsers that report one */
            if (want == S3F_ERR_BAD_RESPONSE && docs[i].kind != K_ERROR && n > 60 &&
                !(strstr(err.message, "line ") && strstr(err.message, "response")))
                if (bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s cut at %zu: message \"%s\"",
                              docs[i].file, n, err.message);
            free(cut);
            cuts++;
        }
        free(body);
    }
    printf("  %zu truncated documents checked\n", cuts);
}

static void test_garbage(void) {
    /* deterministic pseudo-random bytes, and pseudo-random mutations of real documents */
    uint32_t x = 12345;
    char buf[512];
    for (int round = 0; round < 400; round++) {
        size_t n = 1 + round % 500;
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (char)(x >> 16);
        }
        if (round % 4 == 0)
            buf[0] = '<';
        for (int k = K_LIST; k <= K_ERROR; k++) {
            char *copy = malloc(n);
            memcpy(copy, buf, n);
            CHECK_INT(parse_kind((enum kind)k, copy, n, NULL), S3F_ERR_BAD_RESPONSE);
            free(copy);
        }
    }
    for (size_t d = 0; d < S3F_ARRAY_LEN(docs); d++) {
        size_t len;
        char *body = load(docs[d].file, &len);
        for (int round = 0; round < 60; round++) {
            char *m = malloc(len);
            memcpy(m, body, len);
            for (int j = 0; j < 3; j++) {
                x = x * 1103515245u + 12345u;
                m[(x >> 8) % len] = (char)(x >> 24);
            }
            /* anything but a crash or leak is fine here; most are BAD_RESPONSE */
            enum s3f_status st = parse_kind(docs[d].kind, m, len, NULL);
            CHECK(st != S3F_ERR_INTERNAL && st != S3F_ERR_NO_MEMORY);
            free(m);
        }
        free(body);
    }
}

static void test_hostile(void) {
    struct s3f_error err;
    static const char *const cases[][2] = {
        {"<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b "
         "\"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><ListBucketResult><Name>&b;</Name>"
         "</ListBucketResult>",
         "DOCTYPE"},
        {"<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><ListBucketResult/>", "DOCTYPE"},
        {"<ListBucketResult><Contents><Key>k</Key><Size>18446744073709551616</Size>"
         "</Contents></ListBucketResult>",
         "<Size>"},
        {"<ListBucketResult><Contents><Key>k</Key><Size>12a</Size></Contents>"
         "</ListBucketResult>",
         "<Size>"},
        {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
         "without <Key>"},
        {"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>", "IsTruncated"},
        {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
         "NextContinuationToken"},
        {"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%zz</Key>"
         "</Contents></ListBucketResult>",
         "URL encoding"},
        {"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%00b</Key>"
         "</Contents></ListBucketResult>",
         "URL encoding"},
        {"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%4</Key>"
         "</Contents></ListBucketResult>",
         "URL encoding"},
        {"<ListBucketResult><Name>a\x01</Name></ListBucketResult>", "line 1"},
        {"<ListBucketResult><Name>\xff\xfe</Name></ListBucketResult>", "line 1"},
        {"<ListBucketResult><Name>a&#0;</Name></ListBucketResult>", "line 1"},
        {"<ListBucketResult></ListBucketResult><ListBucketResult/>", "junk after document"},
        {"<ListBucketResult><Name>x</Nam></ListBucketResult>", "mismatched tag"},
        {"<CopyObjectResult/>", "unexpected root element <CopyObjectResult>"},
        {"   \r\n\t ", "empty body"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        s3f_error_clear(&err);
        struct s3f_list_page *pg = NULL;
        CHECK_INT(s3f__xml_parse_list_objects_v2(cases[i][0], strlen(cases[i][0]), &pg, &err),
                  S3F_ERR_BAD_RESPONSE);
        CHECK(pg == NULL);
        if (!strstr(err.message, cases[i][1]))
            test_fail(__FILE__, __LINE__, "case %zu: \"%s\" lacks \"%s\"", i, err.message,
                      cases[i][1]);
    }
    /* an embedded NUL byte */
    static const char nul[] = "<ListBucketResult><Name>a\0b</Name></ListBucketResult>";
    CHECK_INT(parse_kind(K_LIST, nul, sizeof(nul) - 1, NULL), S3F_ERR_BAD_RESPONSE);

    /* nesting: 16 levels are fine, 17 are not */
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    for (int depth = 16; depth <= 17; depth++) {
        s3f__buf_reset(&b);
        s3f__buf_appends(&b, "<ListBucketResult>");
        for (int i = 1; i < depth; i++)
            s3f__buf_appends(&b, "<a>");
        for (int i = 1; i < depth; i++)
            s3f__buf_appends(&b, "</a>");
        s3f__buf_appends(&b, "</ListBucketResult>");
        s3f_error_clear(&err);
        CHECK_INT(parse_kind(K_LIST, b.data, b.len, &err),
                  depth == 16 ? S3F_OK : S3F_ERR_BAD_RESPONSE);
        if (depth == 17)
            CHECK(strstr(err.message, "nested") != NULL);
    }
    /* element text over the cap */
    s3f__buf_reset(&b);
    s3f__buf_appends(&b, "<ListBucketResult><Contents><Key>");
    for (int i = 0; i < S3F__XML_MAX_TEXT / 16 + 1; i++)
        s3f__buf_appends(&b, "0123456789abcdef");
    s3f__buf_appends(&b, "</Key></Contents></ListBucketResult>");
    s3f_error_clear(&err);
    CHECK_INT(parse_kind(K_LIST, b.data, b.len, &err), S3F_ERR_BAD_RESPONSE);
    CHECK(strstr(err.message, "<Key> longer than") != NULL);
    /* entry cap: exactly 10000 entries pass, 10001 do not */
    for (int n = S3F__XML_MAX_ENTRIES; n <= S3F__XML_MAX_ENTRIES + 1; n++) {
        s3f__buf_reset(&b);
        s3f__buf_appends(&b, "<ListBucketResult>");
        for (int i = 0; i < n; i++)
            s3f__buf_appendf(&b, "<Contents><Key>k%d</Key><Size>%d</Size></Contents>", i, i);
        s3f__buf_appends(&b, "</ListBucketResult>");
        struct s3f_list_page *pg = NULL;
        s3f_error_clear(&err);
        enum s3f_status st = s3f__xml_parse_list_objects_v2(b.data, b.len, &pg, &err);
        CHECK_INT(st, n == S3F__XML_MAX_ENTRIES ? S3F_OK : S3F_ERR_BAD_RESPONSE);
        if (pg) {
            CHECK_INT(pg->n_objects, n);
            CHECK_STR(pg->objects[n - 1].key, "k9999");
            CHECK_INT(pg->objects[n - 1].size, 9999);
        } else {
            CHECK(strstr(err.message, "more than 10000") != NULL);
        }
        s3f_list_page_free(pg);
    }
    s3f__buf_cleanup(&b);
    /* namespace prefixes are ignored */
    const char *pfx = "<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                      "<s3:Contents><s3:Key>k</s3:Key><s3:Size>3</s3:Size></s3:Contents>"
                      "</s3:ListBucketResult>";
    struct s3f_list_page *pg = NULL;
    CHECK_INT(s3f__xml_parse_list_objects_v2(pfx, strlen(pfx), &pg, NULL), S3F_OK);
    CHECK(pg && pg->n_objects == 1 && strcmp(pg->objects[0].key, "k") == 0);
    s3f_list_page_free(pg);
    /* UTF-16 documents are converted by expat */
    static const char u16[] = "\xff\xfe<\0E\0r\0r\0o\0r\0>\0<\0C\0o\0d\0e\0>\0X\0<\0/\0C\0o\0"
                              "d\0e\0>\0<\0/\0E\0r\0r\0o\0r\0>\0";
    s3f_error_clear(&err);
    CHECK(s3f__xml_parse_error(u16, sizeof(u16) - 1, &err));
    CHECK_STR(err.code, "X");
}

/* ---- DeleteObjects body --------------------------------------------------------------------- */
struct collect {
    char keys[8][64];
    int n, in_key;
    char quiet[8];
    int in_quiet;
};

static void XMLCALL c_start(void *ud, const XML_Char *name, const XML_Char **atts) {
    (void)atts;
    struct collect *c = ud;
    if (strcmp(name, "Key") == 0 && c->n < 8)
        c->in_key = 1;
    if (strcmp(name, "Quiet") == 0)
        c->in_quiet = 1;
}

static void XMLCALL c_end(void *ud, const XML_Char *name) {
    struct collect *c = ud;
    if (strcmp(name, "Key") == 0 && c->in_key) {
        c->in_key = 0;
        c->n++;
    }
    c->in_quiet = 0;
}

static void XMLCALL c_text(void *ud, const XML_Char *s, int len) {
    struct collect *c = ud;
    char *dst = c->in_key ? c->keys[c->n] : c->in_quiet ? c->quiet : NULL;
    if (dst)
        strncat(dst, s, (size_t)len);
}

static void test_build_delete(void) {
    const char *keys[] = {"plain/key.bin", "a&b<c>d\"e'f", "tab\there\nnl\rcr",
                          "caf\xc3\xa9 \xf0\x9f\x98\x80", "]]>"};
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    s3f__buf_appends(&b, "prefix|");
    CHECK_INT(s3f__xml_build_delete(keys, 5, true, &b, NULL), S3F_OK);
    CHECK(strncmp(b.data, "prefix|<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete xmlns=\"http"
                          "://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet><Object><Key>"
                          "plain/key.bin</Key></Object>",
                  strlen("prefix|<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete xmlns=\"http"
                         "://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet><Object><Key>"
                         "plain/key.bin</Key></Object>")) == 0);
    CHECK(strstr(b.data, "<Key>a&amp;b&lt;c&gt;d&quot;e&apos;f</Key>") != NULL);
    CHECK(strstr(b.data, "<Key>tab&#9;here&#10;nl&#13;cr</Key>") != NULL);
    CHECK(strstr(b.data, "<Key>]]&gt;</Key>") != NULL);
    CHECK(strcmp(b.data + b.len - 9, "</Delete>") == 0);
    /* round trip through a conforming parser gives the keys back byte for byte */
    struct collect c;
    memset(&c, 0, sizeof(c));
    XML_Parser p = XML_ParserCreate(NULL);
    XML_SetUserData(p, &c);
    XML_SetElementHandler(p, c_start, c_end);
    XML_SetCharacterDataHandler(p, c_text);
    CHECK_INT(XML_Parse(p, b.data + 7, (int)(b.len - 7), 1), XML_STATUS_OK);
    XML_ParserFree(p);
    CHECK_INT(c.n, 5);
    for (int i = 0; i < 5 && i < c.n; i++)
        CHECK_STR(c.keys[i], keys[i]);
    CHECK_STR(c.quiet, "true");

    s3f__buf_reset(&b);
    CHECK_INT(s3f__xml_build_delete(keys, 1, false, &b, NULL), S3F_OK);
    CHECK(strstr(b.data, "Quiet") == NULL);

    /* refusals leave the buffer as it was */
    struct {
        const char *key;
        const char *text;
    } bad[] = {
        {"ctl\x01", "U+0001"},       {"del\x1f", "U+001F"},  {"bad\xff", "not valid UTF-8"},
        {"ov\xc0\xaf", "not valid UTF-8"}, {"nc\xef\xbf\xbe", "U+FFFE"},
        {"nc\xef\xbf\xbf", "U+FFFF"}, {"", "empty"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(bad); i++) {
        s3f__buf_reset(&b);
        s3f__buf_appends(&b, "keep");
        const char *two[] = {"fine", bad[i].key};
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f__xml_build_delete(two, 2, true, &b, &err), S3F_ERR_INVALID_ARGUMENT);
        CHECK_STR(b.data, "keep");
        CHECK(strstr(err.message, bad[i].text) != NULL);
        CHECK(strstr(err.message, "#1") != NULL);
    }
    struct s3f_error err;
    CHECK_INT(s3f__xml_build_delete(keys, 0, true, &b, &err), S3F_ERR_INVALID_ARGUMENT);
    const char **many = calloc(1001, sizeof(*many));
    for (int i = 0; i < 1001; i++)
        many[i] = "k";
    s3f__buf_reset(&b);
    CHECK_INT(s3f__xml_build_delete(many, 1001, true, &b, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f__xml_build_delete(many, 1000, true, &b, &err), S3F_OK);
    free(many);
    s3f__buf_cleanup(&b);
    /* the buffer's cap */
    s3f__buf_init(&b, 100);
    CHECK_INT(s3f__xml_build_delete(keys, 5, true, &b, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "larger than 100") != NULL);
    CHECK_INT(b.len, 0);
    s3f__buf_cleanup(&b);
}

/* ---- error codes ---------------------------------------------------------------------------- */
static void test_error_status(void) {
    struct {
        int http;
        const char *code;
        enum s3f_status st;
        bool retry;
    } cases[] = {
        {404, "NoSuchKey", S3F_ERR_NOT_FOUND, false},
        {404, "NoSuchUpload", S3F_ERR_NOT_FOUND, false},
        {404, "", S3F_ERR_NOT_FOUND, false},
        {404, "NoSuchBucket", S3F_ERR_NO_SUCH_BUCKET, false},
        {403, "AccessDenied", S3F_ERR_ACCESS_DENIED, false},
        {403, "SignatureDoesNotMatch", S3F_ERR_ACCESS_DENIED, false},
        {403, "InvalidAccessKeyId", S3F_ERR_ACCESS_DENIED, false},
        {403, NULL, S3F_ERR_ACCESS_DENIED, false},
        {403, "RequestTimeTooSkewed", S3F_ERR_ACCESS_DENIED, false},
        {400, "ExpiredToken", S3F_ERR_EXPIRED_CREDENTIALS, false},
        {403, "RequestExpired", S3F_ERR_EXPIRED_CREDENTIALS, false},
        {400, "TokenRefreshRequired", S3F_ERR_EXPIRED_CREDENTIALS, false},
        {412, "PreconditionFailed", S3F_ERR_PRECONDITION_FAILED, false},
        {412, "", S3F_ERR_PRECONDITION_FAILED, false},
        {416, "InvalidRange", S3F_ERR_INVALID_RANGE, false},
        {416, NULL, S3F_ERR_INVALID_RANGE, false},
        {503, "SlowDown", S3F_ERR_THROTTLED, true},
        {400, "Throttling", S3F_ERR_THROTTLED, true},
        {429, "", S3F_ERR_THROTTLED, true},
        {503, "ServiceUnavailable", S3F_ERR_SERVER, true},
        {500, "InternalError", S3F_ERR_SERVER, true},
        {200, "InternalError", S3F_ERR_SERVER, true},
        {502, "", S3F_ERR_SERVER, true},
        {504, NULL, S3F_ERR_SERVER, true},
        {501, "NotImplemented", S3F_ERR_SERVER, false},
        {400, "RequestTimeout", S3F_ERR_S3, true},
        {400, "InvalidArgument", S3F_ERR_S3, false},
        {400, "", S3F_ERR_S3, false},
        {409, "BucketNotEmpty", S3F_ERR_S3, false},
        {301, "PermanentRedirect", S3F_ERR_S3, false},
        {0, NULL, S3F_ERR_S3, false},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        CHECK_INT(s3f__s3_error_status(cases[i].http, cases[i].code), cases[i].st);
        if (s3f__s3_error_retryable(cases[i].http, cases[i].code) != cases[i].retry)
            test_fail(__FILE__, __LINE__, "retryable(%d, %s) != %d", cases[i].http,
                      cases[i].code ? cases[i].code : "NULL", cases[i].retry);
    }
}

/* Is `st` a sensible status for an error that came with HTTP `http`? */
static bool consistent(int http, enum s3f_status st) {
    switch (http) {
    case 404: return st == S3F_ERR_NOT_FOUND || st == S3F_ERR_NO_SUCH_BUCKET;
    case 403:
        return st == S3F_ERR_ACCESS_DENIED || st == S3F_ERR_EXPIRED_CREDENTIALS ||
               st == S3F_ERR_S3;
    case 412: return st == S3F_ERR_PRECONDITION_FAILED;
    case 416: return st == S3F_ERR_INVALID_RANGE;
    case 503: return st == S3F_ERR_SERVER || st == S3F_ERR_THROTTLED;
    default: break;
    }
    if (http >= 500)
        return st == S3F_ERR_SERVER;
    if (http == 400)
        return st == S3F_ERR_S3 || st == S3F_ERR_EXPIRED_CREDENTIALS || st == S3F_ERR_THROTTLED;
    return st == S3F_ERR_S3; /* 3xx, 405, 409, 411 ... */
}

static void test_error_codes_tsv(void) {
    size_t len;
    char *text = test_read_file(test_src_path("tests/vectors/s3/error-codes.tsv"), &len);
    CHECK(text != NULL);
    if (!text)
        return;
    int rows = 0, checked = 0, skipped = 0, retryable = 0;
    bool seen[4] = {false, false, false, false};
    static const char *const aws_retryable[] = {"InternalError", "ServiceUnavailable",
                                                "SlowDown", "RequestTimeout"};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        rows++;
        char *tab1 = strchr(line, '\t');
        char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (!tab1 || !tab2) {
            skipped++;
            continue;
        }
        *tab1 = *tab2 = '\0';
        const char *code = line, *http_s = tab1 + 1;
        int http = atoi(http_s);
        /* rows without a code or a numeric status ("N/A", "?") say nothing to check */
        if (http < 100 || !(code[0] >= 'A' && code[0] <= 'Z') || strcmp(code, "N/A") == 0) {
            skipped++;
            continue;
        }
        checked++;
        enum s3f_status st = s3f__s3_error_status(http, code);
        bool retry = s3f__s3_error_retryable(http, code);
        if (!consistent(http, st))
            test_fail(__FILE__, __LINE__, "%s (HTTP %d) -> %s, inconsistent", code, http,
                      s3f_status_name(st));
        else
            test_checks_passed++;
        bool want_retry = http == 500 || http == 502 || http == 503 || http == 504;
        for (int i = 0; i < 4; i++)
            if (strcmp(code, aws_retryable[i]) == 0) {
                want_retry = true;
                seen[i] = true;
            }
        if (retry != want_retry)
            test_fail(__FILE__, __LINE__, "%s (HTTP %d): retryable %d, want %d", code, http,
                      retry, want_retry);
        else
            test_checks_passed++;
        retryable += retry;
        /* without the code, the HTTP status alone: 403/404/400 are never retried */
        if (http == 403 || http == 404 || http == 400)
            CHECK(!s3f__s3_error_retryable(http, ""));
    }
    for (int i = 0; i < 4; i++)
        if (!seen[i])
            test_fail(__FILE__, __LINE__, "%s missing from error-codes.tsv", aws_retryable[i]);
    printf("  error-codes.tsv: %d rows, %d checked, %d skipped (no code or HTTP status), "
           "%d retryable\n",
           rows, checked, skipped, retryable);
    CHECK(checked >= 70);
    free(text);
}

int main(void) {
    RUN(test_list_objects_aws);
    RUN(test_list_objects_url_encoded);
    RUN(test_list_objects_rgw);
    RUN(test_initiate);
    RUN(test_complete);
    RUN(test_copy);
    RUN(test_copy_part);
    RUN(test_list_parts);
    RUN(test_list_uploads);
    RUN(test_list_buckets);
    RUN(test_list_buckets_recorded);
    RUN(test_delete_result);
    RUN(test_error_docs);
    RUN(test_truncated);
    RUN(test_garbage);
    RUN(test_hostile);
    RUN(test_build_delete);
    RUN(test_error_status);
    RUN(test_error_codes_tsv);
    return test_summary();
}
