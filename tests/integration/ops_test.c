/* Every S3 operation of the public API against a real server (Ceph RGW), through the public
 * header only. Needs S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY (and _OTHER_*);
 * run by tests/integration/test_library.py. Each case works in its own bucket. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "s3flash/s3flash.h"
#include "testutil.h"

static const char *endpoint, *access_key, *secret_key, *other_access, *other_secret;
static char bucket[64];

static struct s3f_client *client_with(const char *akid, const char *secret, const char *ep) {
    struct s3f_client_options o = {0};
    o.endpoint_url = ep;
    o.region = "us-east-1";
    o.force_path_style = 1;
    o.access_key_id = akid;
    o.secret_access_key = secret;
    struct s3f_client *c = NULL;
    struct s3f_error e;
    enum s3f_status st = s3f_client_new(&o, &c, &e);
    if (st) {
        char line[1024];
        s3f_error_format(&e, line, sizeof(line));
        fprintf(stderr, "client: %s\n", line);
    }
    return c;
}

static struct s3f_client *client(void) {
    return client_with(access_key, secret_key, endpoint);
}

struct mem_sink {
    unsigned char *data;
    size_t len, cap;
    uint64_t first_offset;
    int calls;
};

static int mem_write(void *ud, const void *data, size_t len, uint64_t offset) {
    struct mem_sink *m = ud;
    if (m->calls++ == 0)
        m->first_offset = offset;
    if (m->len + len > m->cap) {
        m->cap = (m->len + len) * 2;
        m->data = realloc(m->data, m->cap);
    }
    memcpy(m->data + m->len, data, len);
    m->len += len;
    return 0;
}

static unsigned char *pattern(size_t n, unsigned seed) {
    unsigned char *p = malloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

static void print_err(const char *what, const struct s3f_error *e) {
    char line[1400];
    s3f_error_format(e, line, sizeof(line));
    fprintf(stderr, "  %s: %s\n", what, line);
}

static void test_put_get_head(void) {
    struct s3f_client *c = client();
    CHECK(c != NULL);
    size_t sizes[] = {0, 1, 4096, (1u << 20) + 7};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char key[64];
        snprintf(key, sizeof(key), "dir/obj-%zu", sizes[i]);
        unsigned char *data = pattern(sizes[i], (unsigned)i + 1);
        struct s3f_error e;
        struct s3f_object_info pi;
        struct s3f_put_options po = {.content_type = "application/x-test", .content_md5 = 1};
        enum s3f_status st = s3f_put_object(c, bucket, key, data, sizes[i], &po, &pi, &e);
        if (st)
            print_err("put", &e);
        CHECK_INT(st, S3F_OK);
        CHECK(pi.etag[0] == '"');
        CHECK(pi.checksum_crc32c[0] != '\0');

        struct s3f_object_info hi;
        st = s3f_head_object(c, bucket, key, NULL, &hi, &e);
        CHECK_INT(st, S3F_OK);
        CHECK_INT(hi.size, sizes[i]);
        CHECK_STR(hi.etag, pi.etag);
        CHECK_STR(hi.content_type, "application/x-test");
        CHECK(hi.last_modified > 1700000000);

        struct mem_sink m = {0};
        struct s3f_object_info gi;
        st = s3f_get_object(c, bucket, key, NULL, mem_write, &m, &gi, &e);
        if (st)
            print_err("get", &e);
        CHECK_INT(st, S3F_OK);
        CHECK_INT(m.len, sizes[i]);
        CHECK(m.len == sizes[i] && (sizes[i] == 0 || memcmp(m.data, data, sizes[i]) == 0));
        CHECK_INT(gi.size, sizes[i]);
        CHECK_STR(gi.etag, pi.etag);

        if (sizes[i] > 10) {
            /* a range in the middle, and an open-ended one */
            struct s3f_get_options go = {.has_range = 1, .range_start = 3, .range_end = 9};
            struct mem_sink r = {0};
            st = s3f_get_object(c, bucket, key, &go, mem_write, &r, &gi, &e);
            CHECK_INT(st, S3F_OK);
            CHECK_INT(r.len, 7);
            CHECK_INT(r.first_offset, 3);
            CHECK(r.len == 7 && memcmp(r.data, data + 3, 7) == 0);
            CHECK_INT(gi.size, sizes[i]); /* total size from Content-Range */
            free(r.data);
            struct s3f_get_options go2 = {.has_range = 1, .range_start = sizes[i] - 5,
                                          .range_end = UINT64_MAX};
            struct mem_sink r2 = {0};
            st = s3f_get_object(c, bucket, key, &go2, mem_write, &r2, NULL, &e);
            CHECK_INT(st, S3F_OK);
            CHECK(r2.len == 5 && memcmp(r2.data, data + sizes[i] - 5, 5) == 0);
            free(r2.data);
            /* If-Match with a wrong ETag */
            struct s3f_get_options go3 = {.if_match = "\"0123456789abcdef0123456789abcdef\""};
            struct mem_sink r3 = {0};
            st = s3f_get_object(c, bucket, key, &go3, mem_write, &r3, NULL, &e);
            CHECK_INT(st, S3F_ERR_PRECONDITION_FAILED);
            CHECK_INT(r3.len, 0);
            free(r3.data);
        }
        free(m.data);
        free(data);
        CHECK_INT(s3f_delete_object(c, bucket, key, &e), S3F_OK);
        CHECK_INT(s3f_head_object(c, bucket, key, NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    }
    s3f_client_free(c);
}

static void test_errors(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    struct mem_sink m = {0};
    enum s3f_status st = s3f_get_object(c, bucket, "no/such/key", NULL, mem_write, &m, NULL, &e);
    CHECK_INT(st, S3F_ERR_NOT_FOUND);
    CHECK_STR(e.code, "NoSuchKey");
    CHECK_INT(e.http_status, 404);
    CHECK(e.request_id[0] != '\0');
    CHECK_INT(e.attempts, 1); /* 404 is never retried */
    CHECK_INT(m.len, 0);
    char line[1400];
    s3f_error_format(&e, line, sizeof(line));
    CHECK(strstr(line, "NoSuchKey") && strstr(line, "request id") &&
          strstr(line, "no/such/key"));

    st = s3f_head_object(c, bucket, "no/such/key", NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_NOT_FOUND);
    CHECK_INT(e.http_status, 404);

    st = s3f_put_object(c, "s3flash-no-such-bucket-xyz", "k", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_NO_SUCH_BUCKET);
    CHECK_STR(e.code, "NoSuchBucket");

    st = s3f_put_object(c, "Bad_Bucket!", "k", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_INVALID_ARGUMENT);
    st = s3f_put_object(c, bucket, "", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_INVALID_ARGUMENT);
    s3f_client_free(c);

    /* wrong secret: RGW checks SigV4 */
    c = client_with(access_key, "wrong-secret-wrong-secret-wrong-secret00", endpoint);
    st = s3f_put_object(c, bucket, "denied", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_ACCESS_DENIED);
    CHECK_STR(e.code, "SignatureDoesNotMatch");
    CHECK_INT(e.http_status, 403);
    CHECK_INT(e.attempts, 1);
    s3f_error_format(&e, line, sizeof(line));
    CHECK(strstr(line, "wrong-secret") == NULL);
    s3f_client_free(c);

    /* another user's bucket */
    c = client_with(other_access, other_secret, endpoint);
    st = s3f_put_object(c, bucket, "denied", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_ACCESS_DENIED);
    CHECK_STR(e.code, "AccessDenied");
    s3f_client_free(c);

    /* nothing was written by any of those */
    c = client();
    st = s3f_head_object(c, bucket, "denied", NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_NOT_FOUND);
    s3f_client_free(c);
}

static void test_list(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    const char *keys[] = {"list/a", "list/b", "list/sub/c", "list/sub/d", "list/z z+%",
                          "list/\xc3\xa9t\xc3\xa9"};
    for (size_t i = 0; i < 6; i++)
        CHECK_INT(s3f_put_object(c, bucket, keys[i], "x", 1, NULL, NULL, &e), S3F_OK);

    struct s3f_list_options lo = {.prefix = "list/", .delimiter = "/"};
    struct s3f_list_page *p = NULL;
    CHECK_INT(s3f_list_objects_v2(c, bucket, &lo, &p, &e), S3F_OK);
    CHECK_INT(p->n_objects, 4);
    CHECK_INT(p->n_common_prefixes, 1);
    if (p->n_common_prefixes == 1)
        CHECK_STR(p->common_prefixes[0], "list/sub/");
    bool saw_space = false, saw_utf8 = false;
    for (size_t i = 0; i < p->n_objects; i++) {
        saw_space |= strcmp(p->objects[i].key, "list/z z+%") == 0;
        saw_utf8 |= strcmp(p->objects[i].key, "list/\xc3\xa9t\xc3\xa9") == 0;
        CHECK_INT(p->objects[i].size, 1);
    }
    CHECK(saw_space);
    CHECK(saw_utf8);
    CHECK(!p->is_truncated);
    s3f_list_page_free(p);

    /* pagination with continuation tokens: 2 per page over 6 keys */
    size_t total = 0;
    int pages = 0;
    char *token = NULL;
    do {
        struct s3f_list_options po = {.prefix = "list/", .max_keys = 2,
                                      .continuation_token = token};
        p = NULL;
        CHECK_INT(s3f_list_objects_v2(c, bucket, &po, &p, &e), S3F_OK);
        free(token);
        token = NULL;
        if (!p)
            break;
        total += p->n_objects;
        pages++;
        if (p->is_truncated)
            token = strdup(p->next_continuation_token);
        s3f_list_page_free(p);
    } while (token && pages < 10);
    CHECK_INT(total, 6);
    CHECK_INT(pages, 3);

    struct s3f_list_options sa = {.prefix = "list/", .start_after = "list/sub/c"};
    CHECK_INT(s3f_list_objects_v2(c, bucket, &sa, &p, &e), S3F_OK);
    CHECK_INT(p->n_objects, 3);
    if (p->n_objects)
        CHECK_STR(p->objects[0].key, "list/sub/d");
    s3f_list_page_free(p);

    CHECK_INT(s3f_delete_objects(c, bucket, keys, 6, NULL, &e), S3F_OK);
    CHECK_INT(s3f_list_objects_v2(c, bucket, &lo, &p, &e), S3F_OK);
    CHECK_INT(p->n_objects + p->n_common_prefixes, 0);
    s3f_list_page_free(p);
    s3f_client_free(c);
}

static void test_copy_and_batch_delete(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    unsigned char *data = pattern(100000, 9);
    CHECK_INT(s3f_put_object(c, bucket, "copy/src key", data, 100000, NULL, NULL, &e), S3F_OK);
    struct s3f_object_info ci;
    CHECK_INT(s3f_copy_object(c, bucket, "copy/src key", bucket, "copy/dst", &ci, &e), S3F_OK);
    CHECK(ci.etag[0] == '"');
    struct mem_sink m = {0};
    CHECK_INT(s3f_get_object(c, bucket, "copy/dst", NULL, mem_write, &m, NULL, &e), S3F_OK);
    CHECK(m.len == 100000 && memcmp(m.data, data, 100000) == 0);
    free(m.data);
    CHECK_INT(s3f_copy_object(c, bucket, "copy/missing", bucket, "copy/dst2", NULL, &e),
              S3F_ERR_NOT_FOUND);
    free(data);

    /* 1500 keys: two DeleteObjects batches */
    enum { N = 1500 };
    char **keys = calloc(N, sizeof(char *));
    for (int i = 0; i < N; i++) {
        keys[i] = malloc(32);
        snprintf(keys[i], 32, "batch/%05d", i);
    }
    /* create only a few of them: deleting missing keys is not an error in S3 */
    for (int i = 0; i < N; i += 250)
        CHECK_INT(s3f_put_object(c, bucket, keys[i], "x", 1, NULL, NULL, &e), S3F_OK);
    CHECK_INT(s3f_put_object(c, bucket, keys[N - 1], "x", 1, NULL, NULL, &e), S3F_OK);
    size_t failed = 99;
    CHECK_INT(s3f_delete_objects(c, bucket, (const char *const *)keys, N, &failed, &e), S3F_OK);
    CHECK_INT(failed, 0);
    struct s3f_list_options lo = {.prefix = "batch/"};
    struct s3f_list_page *p = NULL;
    CHECK_INT(s3f_list_objects_v2(c, bucket, &lo, &p, &e), S3F_OK);
    CHECK_INT(p ? p->n_objects : 99, 0);
    s3f_list_page_free(p);
    for (int i = 0; i < N; i++)
        free(keys[i]);
    free(keys);
    CHECK_INT(s3f_delete_object(c, bucket, "copy/src key", &e), S3F_OK);
    CHECK_INT(s3f_delete_object(c, bucket, "copy/dst", &e), S3F_OK);
    s3f_client_free(c);
}

static void test_multipart(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    size_t p1 = 5u << 20, p2 = 1234;
    unsigned char *data = pattern(p1 + p2, 77);
    char *uid = NULL;
    CHECK_INT(s3f_create_multipart_upload(c, bucket, "mp/object", NULL, &uid, &e), S3F_OK);
    CHECK(uid && *uid);
    struct s3f_part_info parts[2];
    CHECK_INT(s3f_upload_part(c, bucket, "mp/object", uid, 1, data, p1, S3F_CHECKSUM_DEFAULT,
                              &parts[0], &e),
              S3F_OK);
    CHECK_INT(s3f_upload_part(c, bucket, "mp/object", uid, 2, data + p1, p2,
                              S3F_CHECKSUM_DEFAULT, &parts[1], &e),
              S3F_OK);
    CHECK(parts[0].etag[0] == '"' && parts[1].etag[0] == '"');

    struct s3f_parts_page *pp = NULL;
    CHECK_INT(s3f_list_parts(c, bucket, "mp/object", uid, 0, &pp, &e), S3F_OK);
    CHECK_INT(pp ? pp->n_parts : 0, 2);
    if (pp && pp->n_parts == 2) {
        CHECK_INT(pp->parts[0].part_number, 1);
        CHECK_INT(pp->parts[0].size, p1);
        CHECK_STR(pp->parts[1].etag, parts[1].etag);
    }
    s3f_parts_page_free(pp);

    struct s3f_uploads_page *up = NULL;
    CHECK_INT(s3f_list_multipart_uploads(c, bucket, "mp/", NULL, NULL, &up, &e), S3F_OK);
    bool found = false;
    for (size_t i = 0; up && i < up->n_uploads; i++)
        found |= strcmp(up->uploads[i].upload_id, uid) == 0 &&
                 strcmp(up->uploads[i].key, "mp/object") == 0;
    CHECK(found);
    s3f_uploads_page_free(up);

    /* the object is not visible before completion */
    CHECK_INT(s3f_head_object(c, bucket, "mp/object", NULL, NULL, &e), S3F_ERR_NOT_FOUND);

    /* a wrong ETag is refused and changes nothing */
    struct s3f_part_info bad[2] = {parts[0], parts[1]};
    snprintf(bad[1].etag, sizeof(bad[1].etag), "\"00000000000000000000000000000000\"");
    enum s3f_status st =
        s3f_complete_multipart_upload(c, bucket, "mp/object", uid, bad, 2, NULL, &e);
    CHECK(st != S3F_OK);
    CHECK(e.code[0] != '\0');

    struct s3f_object_info ci;
    st = s3f_complete_multipart_upload(c, bucket, "mp/object", uid, parts, 2, &ci, &e);
    if (st)
        print_err("complete", &e);
    CHECK_INT(st, S3F_OK);
    struct s3f_object_info hi;
    CHECK_INT(s3f_head_object(c, bucket, "mp/object", NULL, &hi, &e), S3F_OK);
    CHECK_INT(hi.size, p1 + p2);
    CHECK(strstr(hi.etag, "-2\"") != NULL);
    struct mem_sink m = {0};
    CHECK_INT(s3f_get_object(c, bucket, "mp/object", NULL, mem_write, &m, NULL, &e), S3F_OK);
    CHECK(m.len == p1 + p2 && memcmp(m.data, data, p1 + p2) == 0);
    free(m.data);
    free(uid);

    /* abort: the upload disappears, no object appears */
    uid = NULL;
    CHECK_INT(s3f_create_multipart_upload(c, bucket, "mp/aborted", NULL, &uid, &e), S3F_OK);
    CHECK_INT(s3f_upload_part(c, bucket, "mp/aborted", uid, 1, data, 1000, S3F_CHECKSUM_DEFAULT,
                              &parts[0], &e),
              S3F_OK);
    CHECK_INT(s3f_abort_multipart_upload(c, bucket, "mp/aborted", uid, &e), S3F_OK);
    up = NULL;
    CHECK_INT(s3f_list_multipart_uploads(c, bucket, "mp/aborted", NULL, NULL, &up, &e), S3F_OK);
    CHECK_INT(up ? up->n_uploads : 99, 0);
    s3f_uploads_page_free(up);
    CHECK_INT(s3f_head_object(c, bucket, "mp/aborted", NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    CHECK_INT(s3f_list_parts(c, bucket, "mp/aborted", uid, 0, &pp, &e), S3F_ERR_NOT_FOUND);
    /* AWS says NoSuchUpload; Ceph RGW says NoSuchKey */
    CHECK(strcmp(e.code, "NoSuchUpload") == 0 || strcmp(e.code, "NoSuchKey") == 0);
    free(uid);
    free(data);
    CHECK_INT(s3f_delete_object(c, bucket, "mp/object", &e), S3F_OK);
    s3f_client_free(c);
}

struct thread_arg {
    struct s3f_client *c;
    int id;
    int failures;
};

static int bucket_listed(struct s3f_client *c, const char *name, int64_t *created) {
    struct s3f_bucket_list *l = NULL;
    struct s3f_error e;
    enum s3f_status st = s3f_list_buckets(c, &l, &e);
    if (st) {
        print_err("list buckets", &e);
        return -1;
    }
    int found = 0;
    for (size_t i = 0; i < l->n_buckets; i++)
        if (strcmp(l->buckets[i].name, name) == 0) {
            found = 1;
            if (created)
                *created = l->buckets[i].creation_date;
        }
    s3f_bucket_list_free(l);
    return found;
}

/* ListBuckets: the caller's buckets (this test's among them, with its creation time), not
 * another user's; a wrong secret is ACCESS_DENIED. */
static void test_list_buckets(void) {
    struct s3f_client *c = client();
    int64_t created = 0;
    CHECK_INT(bucket_listed(c, bucket, &created), 1);
    CHECK(created > 1700000000);
    struct s3f_client *other = client_with(other_access, other_secret, endpoint);
    CHECK_INT(bucket_listed(other, bucket, NULL), 0);
    struct s3f_client *bad = client_with(access_key, "wrong-secret", endpoint);
    struct s3f_bucket_list *l = NULL;
    struct s3f_error e;
    CHECK_INT(s3f_list_buckets(bad, &l, &e), S3F_ERR_ACCESS_DENIED);
    CHECK(l == NULL);
    CHECK_STR(e.operation, "ListBuckets");
    s3f_client_free(bad);
    s3f_client_free(other);
    s3f_client_free(c);
}

static void *worker(void *arg) {
    struct thread_arg *t = arg;
    for (int i = 0; i < 10; i++) {
        char key[64];
        snprintf(key, sizeof(key), "threads/%d/%d", t->id, i);
        size_t n = 10000 + (size_t)t->id * 1000 + (size_t)i;
        unsigned char *data = pattern(n, (unsigned)(t->id * 100 + i));
        struct s3f_error e;
        struct mem_sink m = {0};
        if (s3f_put_object(t->c, bucket, key, data, n, NULL, NULL, &e) ||
            s3f_get_object(t->c, bucket, key, NULL, mem_write, &m, NULL, &e) || m.len != n ||
            memcmp(m.data, data, n) != 0 || s3f_delete_object(t->c, bucket, key, &e))
            t->failures++;
        free(m.data);
        free(data);
    }
    return NULL;
}

static void test_threads(void) {
    struct s3f_client *c = client();
    pthread_t th[8];
    struct thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct thread_arg){c, i, 0};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    int failures = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        failures += args[i].failures;
    }
    CHECK_INT(failures, 0);
    s3f_client_free(c);
}

static void test_server_down(void) {
    /* a port nothing listens on: bounded retries, then a connect error */
    struct s3f_client *c = client_with(access_key, secret_key, "http://127.0.0.1:9");
    struct s3f_error e;
    enum s3f_status st = s3f_put_object(c, bucket, "k", "x", 1, NULL, NULL, &e);
    CHECK_INT(st, S3F_ERR_CONNECT);
    CHECK_INT(e.attempts, 3);
    CHECK_INT(e.http_status, 0);
    s3f_client_free(c);
}

/* The x-amz-checksum-* field of `info` for `alg`. */
static const char *info_checksum(const struct s3f_object_info *info,
                                 enum s3f_checksum_algorithm alg) {
    switch (alg) {
    case S3F_CHECKSUM_CRC32:
        return info->checksum_crc32;
    case S3F_CHECKSUM_CRC64NVME:
        return info->checksum_crc64nvme;
    default:
        return info->checksum_crc32c;
    }
}

/* PutObject, UploadPart and a verified GetObject with each checksum algorithm. A server that
 * checks checksums (moto) refuses a wrong one; one that stores them returns them on HEAD and
 * GET, where they are verified. */
static void test_checksums(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    static const struct {
        enum s3f_checksum_algorithm alg;
        const char *check; /* of "123456789", ../shared/vectors/README.md */
    } algs[] = {{S3F_CHECKSUM_CRC32C, "4waSgw=="},
                {S3F_CHECKSUM_CRC32, "y/Q5Jg=="},
                {S3F_CHECKSUM_CRC64NVME, "rosUhgp5mIg="}};
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        enum s3f_checksum_algorithm alg = algs[i].alg;
        char key[64];
        snprintf(key, sizeof(key), "ck/small-%d", (int)alg);
        struct s3f_put_options po = {.checksum = alg};
        struct s3f_object_info pi, hi, gi;
        enum s3f_status st = s3f_put_object(c, bucket, key, "123456789", 9, &po, &pi, &e);
        if (st)
            print_err("put", &e);
        CHECK_INT(st, S3F_OK);
        CHECK_STR(info_checksum(&pi, alg), algs[i].check);
        CHECK_INT(s3f_head_object(c, bucket, key, NULL, &hi, &e), S3F_OK);
        const char *stored = info_checksum(&hi, alg);
        CHECK(!stored[0] || strcmp(stored, algs[i].check) == 0);
        printf("  %s: the server stored '%s'\n", key, stored);
        struct s3f_get_options go = {.verify_checksum = 1};
        struct mem_sink m = {0};
        st = s3f_get_object(c, bucket, key, &go, mem_write, &m, &gi, &e);
        if (st)
            print_err("get", &e);
        CHECK_INT(st, S3F_OK);
        CHECK(m.len == 9 && memcmp(m.data, "123456789", 9) == 0);
        free(m.data);
        CHECK_INT(s3f_delete_object(c, bucket, key, &e), S3F_OK);

        /* multipart: two parts with the algorithm announced on creation */
        size_t p1 = 5u << 20, p2 = 4321;
        unsigned char *data = pattern(p1 + p2, 100 + (unsigned)i);
        snprintf(key, sizeof(key), "ck/mp-%d", (int)alg);
        char *uid = NULL;
        st = s3f_create_multipart_upload(c, bucket, key, &po, &uid, &e);
        CHECK_INT(st, S3F_OK);
        struct s3f_part_info parts[2];
        memset(parts, 0, sizeof(parts));
        if (!st) {
            st = s3f_upload_part(c, bucket, key, uid, 1, data, p1, alg, &parts[0], &e);
            if (!st)
                st = s3f_upload_part(c, bucket, key, uid, 2, data + p1, p2, alg, &parts[1], &e);
            if (st)
                print_err("upload part", &e);
            CHECK_INT(st, S3F_OK);
            CHECK_INT(parts[0].checksum_algorithm, alg);
            CHECK(parts[0].checksum[0] && parts[1].checksum[0]);
            struct s3f_object_info ci;
            st = s3f_complete_multipart_upload(c, bucket, key, uid, parts, 2, &ci, &e);
            if (st)
                print_err("complete", &e);
            CHECK_INT(st, S3F_OK);
            struct mem_sink g = {0};
            st = s3f_get_object(c, bucket, key, &go, mem_write, &g, &gi, &e);
            if (st)
                print_err("get multipart", &e);
            CHECK_INT(st, S3F_OK);
            printf("  %s: the server returned '%s'\n", key, info_checksum(&gi, alg));
            CHECK(g.len == p1 + p2 && memcmp(g.data, data, p1 + p2) == 0);
            free(g.data);
            s3f_delete_object(c, bucket, key, &e);
        }
        free(uid);
        free(data);
    }
    /* NONE sends no checksum and reports none */
    struct s3f_put_options none = {.checksum = S3F_CHECKSUM_NONE};
    struct s3f_object_info pi;
    CHECK_INT(s3f_put_object(c, bucket, "ck/none", "abc", 3, &none, &pi, &e), S3F_OK);
    CHECK_STR(pi.checksum_crc32c, "");
    CHECK_STR(pi.checksum_crc64nvme, "");
    CHECK_INT(s3f_delete_object(c, bucket, "ck/none", &e), S3F_OK);
    s3f_client_free(c);
}

int main(int argc, char **argv) {
    endpoint = getenv("S3FLASH_TEST_ENDPOINT");
    access_key = getenv("S3FLASH_TEST_ACCESS_KEY");
    secret_key = getenv("S3FLASH_TEST_SECRET_KEY");
    other_access = getenv("S3FLASH_TEST_OTHER_ACCESS_KEY");
    other_secret = getenv("S3FLASH_TEST_OTHER_SECRET_KEY");
    if (!endpoint || !access_key || !secret_key || !other_access || !other_secret) {
        fprintf(stderr, "set S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY, _OTHER_*\n");
        return 2;
    }
    snprintf(bucket, sizeof(bucket), "ops-test-%d", (int)getpid());
    struct s3f_client *c = client();
    struct s3f_error e;
    if (!c || s3f_create_bucket(c, bucket, &e) != S3F_OK) {
        print_err("create bucket", &e);
        return 1;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(fn)                                                                          \
    if (!only || strcmp(only, #fn) == 0)                                                   \
    RUN(fn)
    MAYBE(test_put_get_head);
    MAYBE(test_errors);
    MAYBE(test_list);
    MAYBE(test_copy_and_batch_delete);
    MAYBE(test_multipart);
    MAYBE(test_list_buckets);
    MAYBE(test_checksums);
    MAYBE(test_threads);
    MAYBE(test_server_down);
    enum s3f_status st = s3f_delete_bucket(c, bucket, &e);
    if (st)
        print_err("delete bucket", &e);
    CHECK_INT(st, S3F_OK);
    s3f_client_free(c);
    return test_summary();
}
