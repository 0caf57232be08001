/* Every public call that takes a client, given the NULL that a failed s3f_client_new
 * leaves in *out (the CLI once passed a NULL on to a helper after AWS_PROFILE=nosuch and
 * crashed): an error status naming the problem, never a crash (issue 20, item 6). */
#include <string.h>

#include "s3flash/s3flash.h"
#include "testutil.h"

static int sink(void *ud, const void *data, size_t len, uint64_t offset) {
    (void)ud;
    (void)data;
    (void)len;
    (void)offset;
    return 0;
}

#define FAILS(call)                                                                        \
    do {                                                                                   \
        s3f_error_clear(&e);                                                               \
        CHECK((call) != S3F_OK);                                                           \
    } while (0)

static void test_null_client(void) {
    struct s3f_client *c = NULL;
    struct s3f_error e;
    struct s3f_object_info info;
    char buf[64], *s = NULL;
    void *data = NULL;
    size_t n = 0;
    struct s3f_iovec iov = {.base = buf, .len = sizeof(buf)};
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    const char *keys[] = {"k"};
    CHECK(s3f_client_region(c) != NULL);
    CHECK(s3f_client_endpoint(c) != NULL);
    FAILS(s3f_client_credentials_source(c, buf, sizeof(buf), NULL, 0, &e));
    CHECK(strstr(e.message, "client is NULL") != NULL);
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    CHECK(cs.pool_limit_bytes == 0);
    s3f_client_cache_flush(c); /* returns at once */
    CHECK(s3f_client_metrics_registry(c) == NULL);
    CHECK(s3f_client_metrics(c, NULL, NULL) == 0); /* no series, no call */
    FAILS(s3f_head_object(c, "bucket", "k", NULL, &info, &e));
    CHECK(strstr(e.message, "client is NULL") != NULL);
    FAILS(s3f_get_object(c, "bucket", "k", NULL, sink, NULL, NULL, &e));
    FAILS(s3f_put_object(c, "bucket", "k", "x", 1, NULL, NULL, &e));
    FAILS(s3f_delete_object(c, "bucket", "k", &e));
    FAILS(s3f_copy_object(c, "bucket", "k", "bucket", "k2", NULL, &e));
    FAILS(s3f_delete_objects(c, "bucket", keys, 1, NULL, &e));
    FAILS(s3f_upload_buffer(c, "bucket", "k", buf, sizeof(buf), NULL, NULL, &e));
    CHECK(strstr(e.message, "client is NULL") != NULL);
    FAILS(s3f_upload_iov(c, "bucket", "k", &iov, 1, NULL, NULL, &e));
    FAILS(s3f_upload_file(c, "bucket", "k", "/dev/null", NULL, NULL, &e));
    FAILS(s3f_copy(c, "bucket", "k", "bucket", "k2", NULL, NULL, &e));
    struct s3f_writer *w = NULL;
    FAILS(s3f_writer_open(c, "bucket", "k", NULL, &w, &e));
    CHECK(w == NULL);
    FAILS(s3f_download_buffer(c, "bucket", "k", buf, sizeof(buf), NULL, NULL, &e));
    FAILS(s3f_download_alloc(c, "bucket", "k", NULL, NULL, NULL, &data, &n, NULL, &e));
    FAILS(s3f_download_stream(c, "bucket", "k", NULL, sink, NULL, NULL, &e));
    FAILS(s3f_download_iov(c, "bucket", "k", &iov, 1, NULL, NULL, &e));
    FAILS(s3f_download_file(c, "bucket", "k", "/tmp/s3flash-null-client", NULL, NULL, &e));
    struct s3f_reader *r = NULL;
    FAILS(s3f_reader_open(c, "bucket", "k", NULL, &r, &e));
    CHECK(r == NULL);
    FAILS(s3f_create_bucket(c, "bucket", &e));
    FAILS(s3f_delete_bucket(c, "bucket", &e));
    struct s3f_bucket_list *bl = NULL;
    FAILS(s3f_list_buckets(c, &bl, &e));
    struct s3f_list_page *lp = NULL;
    FAILS(s3f_list_objects_v2(c, "bucket", NULL, &lp, &e));
    FAILS(s3f_create_multipart_upload(c, "bucket", "k", NULL, &s, &e));
    FAILS(s3f_upload_part(c, "bucket", "k", "id", 1, buf, sizeof(buf), S3F_CHECKSUM_NONE,
                          &part, &e));
    FAILS(s3f_upload_part_copy(c, "bucket", "k", "id", 1, "bucket", "k2", NULL, 0, 9, NULL,
                               &part, &e));
    FAILS(s3f_complete_multipart_upload(c, "bucket", "k", "id", &part, 1, NULL, &e));
    FAILS(s3f_abort_multipart_upload(c, "bucket", "k", "id", &e));
    struct s3f_parts_page *pp = NULL;
    FAILS(s3f_list_parts(c, "bucket", "k", "id", 0, &pp, &e));
    struct s3f_uploads_page *up = NULL;
    FAILS(s3f_list_multipart_uploads(c, "bucket", NULL, NULL, NULL, &up, &e));
    FAILS(s3f_presign(c, "GET", "bucket", "k", 60, &s, &e));
    s3f_client_free(c);
}

int main(void) {
    RUN(test_null_client);
    return test_summary();
}
