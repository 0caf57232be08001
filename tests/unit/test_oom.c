/* Allocation-failure injection for the s3/ parsers and the endpoint resolver: the test is
 * linked with -Wl,--wrap=malloc,calloc,realloc,strdup (tests/unit/meson.build), so every
 * allocation the library makes goes through the wrappers below. Each operation is run once to
 * count its allocations, then once per allocation with that one failing: it must report
 * S3F_ERR_NO_MEMORY (or NULL) and free everything (ASan's leak check in the sanitizer build).
 * expat's own allocations are not wrapped (it reports XML_ERROR_NO_MEMORY itself). */
#include <stdlib.h>
#include <string.h>

#include "s3/endpoint.h"
#include "s3/xml.h"
#include "testutil.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

static long alloc_count; /* allocations seen since arm() */
static long fail_at;     /* 1-based allocation to fail; 0: none */
static bool armed;

static bool should_fail(void) {
    if (!armed)
        return false;
    alloc_count++;
    return fail_at && alloc_count == fail_at;
}

void *__wrap_malloc(size_t n) {
    return should_fail() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
    return should_fail() ? NULL : __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
    return should_fail() ? NULL : __real_realloc(p, n);
}
char *__wrap_strdup(const char *s) {
    return should_fail() ? NULL : __real_strdup(s);
}

static void arm(long at) {
    alloc_count = 0;
    fail_at = at;
    armed = true;
}
static void disarm(void) {
    armed = false;
}

/* An operation under test: returns its status (S3F_OK on success) and frees its results. */
typedef enum s3f_status (*op_fn)(const void *arg);

static void torture(const char *name, op_fn op, const void *arg) {
    arm(0);
    enum s3f_status st = op(arg);
    long n = alloc_count;
    disarm();
    CHECK_INT(st, S3F_OK);
    CHECK(n > 0);
    int bad = 0;
    for (long i = 1; i <= n; i++) {
        arm(i);
        st = op(arg);
        disarm();
        if (st != S3F_ERR_NO_MEMORY) {
            if (bad++ < 3)
                test_fail(__FILE__, __LINE__, "%s: allocation %ld of %ld failing gave %s", name,
                          i, n, s3f_status_name(st));
        } else {
            test_checks_passed++;
        }
    }
    printf("  %-34s %3ld allocations, each failed once\n", name, n);
}

struct doc {
    const char *body;
    size_t len;
};

static enum s3f_status op_list(const void *arg) {
    const struct doc *d = arg;
    struct s3f_list_page *pg = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__xml_parse_list_objects_v2(d->body, d->len, &pg, &err);
    if (st == S3F_OK && !pg)
        st = S3F_ERR_INTERNAL;
    if (st != S3F_OK && pg)
        st = S3F_ERR_INTERNAL;
    s3f_list_page_free(pg);
    return st;
}

static enum s3f_status op_parts(const void *arg) {
    const struct doc *d = arg;
    struct s3f_parts_page *pg = NULL;
    enum s3f_status st = s3f__xml_parse_list_parts(d->body, d->len, &pg, NULL);
    s3f_parts_page_free(pg);
    return st;
}

static enum s3f_status op_uploads(const void *arg) {
    const struct doc *d = arg;
    struct s3f_uploads_page *pg = NULL;
    enum s3f_status st = s3f__xml_parse_list_multipart_uploads(d->body, d->len, &pg, NULL);
    s3f_uploads_page_free(pg);
    return st;
}

static enum s3f_status op_buckets(const void *arg) {
    const struct doc *d = arg;
    struct s3f_bucket_list *l = NULL;
    enum s3f_status st = s3f__xml_parse_list_buckets(d->body, d->len, &l, NULL);
    s3f_bucket_list_free(l);
    return st;
}

static enum s3f_status op_initiate(const void *arg) {
    const struct doc *d = arg;
    char *id = NULL;
    enum s3f_status st = s3f__xml_parse_initiate_multipart(d->body, d->len, &id, NULL);
    free(id);
    return st;
}

static enum s3f_status op_complete(const void *arg) {
    const struct doc *d = arg;
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    return s3f__xml_parse_complete_multipart(d->body, d->len, &info, NULL);
}

static enum s3f_status op_build_delete(const void *arg) {
    (void)arg;
    const char *keys[] = {"a&b", "c<d>", "plain"};
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    enum s3f_status st = s3f__xml_build_delete(keys, 3, true, &b, NULL);
    s3f__buf_cleanup(&b);
    return st;
}

static enum s3f_status op_endpoint(const void *arg) {
    const struct s3f__endpoint_params *p = arg;
    struct s3f__endpoint e;
    enum s3f_status st = s3f__endpoint_resolve(p, &e, NULL);
    if (st == S3F_OK) {
        char *u = s3f__endpoint_object_url(&e, "dir/a b", "x=1");
        char *path = s3f__endpoint_object_path(&e, "dir/a b");
        if (!u || !path)
            st = S3F_ERR_NO_MEMORY;
        free(u);
        free(path);
    }
    s3f__endpoint_cleanup(&e);
    return st;
}

static void test_xml_oom(void) {
    static const struct {
        const char *file;
        op_fn op;
    } cases[] = {
        {"aws-list-objects-v2.xml", op_list},       {"aws-list-objects-v2-url.xml", op_list},
        {"rgw-list-objects-v2.xml", op_list},       {"aws-list-parts.xml", op_parts},
        {"aws-list-multipart-uploads.xml", op_uploads},
        {"rgw-list-multipart-uploads.xml", op_uploads},
        {"aws-initiate-multipart.xml", op_initiate}, {"aws-complete-multipart.xml", op_complete},
        {"aws-list-buckets.xml", op_buckets},       {"rgw-list-buckets.xml", op_buckets},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "tests/data/xml/%s", cases[i].file);
        struct doc d;
        char *body = test_read_file(test_src_path(rel), &d.len);
        CHECK(body != NULL);
        if (!body)
            continue;
        d.body = body;
        torture(cases[i].file, cases[i].op, &d);
        free(body);
    }
    torture("DeleteObjects body", op_build_delete, NULL);
}

static void test_endpoint_oom(void) {
    static const struct s3f__endpoint_params cases[] = {
        {.region = "us-west-2", .bucket = "bkt"},
        {.region = "us-west-2", .bucket = "my.bucket"},
        {.region = "us-east-1", .bucket = "bkt", .endpoint_url = "http://127.0.0.1:7480/base"},
        {.region = "us-east-1", .bucket = "bkt", .endpoint_url = "http://minio:9000"},
        {.region = "aws-global"},
        /* ARN buckets: access point (custom endpoint too), MRAP and Outposts (SigV4a region
         * set), Outposts alias, the Object Lambda endpoint */
        {.region = "us-east-1", .bucket = "arn:aws:s3:us-west-2:123456789012:accesspoint/ap"},
        {.region = "us-west-2", .bucket = "arn:aws:s3:us-west-2:123456789012:accesspoint/ap",
         .endpoint_url = "https://beta.example.com/base"},
        {.region = "us-east-1", .bucket = "arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap"},
        {.region = "us-east-1",
         .bucket = "arn:aws:s3-outposts:us-east-1:123456789012:outpost/op-01234567890123456/"
                   "accesspoint/reports"},
        {.region = "us-west-1",
         .bucket = "test-accessp-o0b1d075431d83bebde8xz5w8ijx1qzlbp3i3kuse10--op-s3"},
        {.region = "us-west-2", .use_object_lambda_endpoint = true},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        char name[64];
        snprintf(name, sizeof(name), "endpoint case %zu", i);
        torture(name, op_endpoint, &cases[i]);
    }
}

int main(void) {
    RUN(test_xml_oom);
    RUN(test_endpoint_oom);
    return test_summary();
}
