/* The operations layer: every operation it builds has an idempotency class (a source scan
 * of the builders, so that a new operation cannot forget one), the executor refuses an
 * operation without one, the CompleteMultipartUpload body escapes what the server gave,
 * and the identity checks used after a lost response (multipart ETag, size/checksum/ETag). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "s3/idempotency.h"
#include "s3/ops_internal.h"
#include "testutil.h"

/* Operation names the sources hand to the request builders: the string literals right
 * after op_init( / request_init( and in `op_name = "..."` / `name = head ? "..." : "..."`. */
static size_t scan_names(const char *rel, char names[][64], size_t n, size_t cap) {
    size_t len;
    char *src = test_read_file(test_src_path(rel), &len);
    if (!src) {
        test_fail(__FILE__, __LINE__, "cannot read %s", rel);
        return n;
    }
    static const char *const marks[] = {"op_init(", "request_init(", "op_name = ",
                                        "*name = head ?"};
    for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
        for (const char *p = strstr(src, marks[m]); p; p = strstr(p + 1, marks[m])) {
            const char *end = p + strcspn(p, ";{");
            if (strncmp(p, "op_init(struct", 14) == 0 || strncmp(p, "request_init(struct", 19) == 0)
                continue; /* the definitions */
            for (const char *q = strchr(p, '"'); q && q < end; q = strchr(q + 1, '"')) {
                const char *e = strchr(q + 1, '"');
                if (!e || e > end)
                    break;
                size_t l = (size_t)(e - q - 1);
                if (l && l < 64 && n < cap) {
                    memcpy(names[n], q + 1, l);
                    names[n][l] = '\0';
                    if (strcmp(names[n], "GET") && strcmp(names[n], "PUT") &&
                        strcmp(names[n], "POST") && strcmp(names[n], "DELETE") &&
                        strcmp(names[n], "HEAD"))
                        n++;
                }
                q = e;
            }
        }
    }
    free(src);
    return n;
}

static void test_every_operation_has_a_class(void) {
    static char names[256][64];
    size_t n = 0;
    static const char *const files[] = {
        "src/s3/ops.c",          "src/s3/ops_prepared.c", "src/s3/ops_multipart.c",
        "src/s3/ops_list.c",     "src/xfer/upload.c",     "src/xfer/upload_ctl.c",
        "src/xfer/upload_known.c", "src/xfer/writer.c",   "src/xfer/download.c",
        "src/xfer/download_file.c", "src/xfer/download_alloc.c",
        "src/xfer/reader.c",     "src/xfer/reader_seg.c", "src/xfer/janitor.c"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        n = scan_names(files[i], names, n, 256);
    CHECK(n >= 16); /* the scan itself works: the ops*.c files build more than 16 */
    for (size_t i = 0; i < n; i++) {
        if (s3f__idempotency(names[i]) == S3F__IDEM_UNKNOWN)
            test_fail(__FILE__, __LINE__, "operation \"%s\" has no idempotency class: add it "
                      "to the table in src/s3/idempotency.c", names[i]);
        else
            test_checks_passed++;
    }
    /* and the table holds nothing twice */
    enum s3f__idem_class c;
    for (size_t i = 0; s3f__idempotency_entry(i, &c); i++) {
        CHECK(c != S3F__IDEM_UNKNOWN);
        for (size_t j = i + 1; s3f__idempotency_entry(j, NULL); j++)
            CHECK(strcmp(s3f__idempotency_entry(i, NULL), s3f__idempotency_entry(j, NULL)));
    }
}

static void test_classes(void) {
    CHECK_INT(s3f__idempotency("CreateMultipartUpload"), S3F__IDEM_RECONCILE);
    CHECK_INT(s3f__idempotency("CompleteMultipartUpload"), S3F__IDEM_RECONCILE);
    CHECK_INT(s3f__idempotency("UploadPart"), S3F__IDEM_IDEMPOTENT);
    CHECK_INT(s3f__idempotency("PutObject"), S3F__IDEM_IDEMPOTENT);
    CHECK_INT(s3f__idempotency("NoSuchOperation"), S3F__IDEM_UNKNOWN);
    CHECK_INT(s3f__idempotency(NULL), S3F__IDEM_UNKNOWN);
    struct s3f__op op;
    memset(&op, 0, sizeof(op));
    s3f__op_put_object(&op, "b", "k", NULL, NULL);
    CHECK_INT(s3f__idempotency_of(&op.r), S3F__IDEM_IDEMPOTENT);
    s3f__s3_request_header(&op.r, "If-None-Match", "*");
    CHECK_INT(s3f__idempotency_of(&op.r), S3F__IDEM_CONDITIONAL);
    s3f__op_cleanup(&op);
    CHECK_STR(s3f__idem_class_name(S3F__IDEM_CONDITIONAL), "CONDITIONAL");
}

/* The executor fails a request whose operation has no class, before sending anything. */
static void test_executor_refuses_unknown(void) {
    struct s3f_client_options o = {0};
    o.endpoint_url = "http://127.0.0.1:9"; /* never reached */
    o.anonymous = 1;
    o.region = "us-east-1";
    o.force_path_style = 1;
    struct s3f_client *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f_client_new(&o, &c, &err), S3F_OK);
    if (!c)
        return;
    struct s3f__op op;
    memset(&op, 0, sizeof(op));
    s3f__op_put_object(&op, "bkt", "key", NULL, NULL);
    op.r.operation = "BrandNewOperation";
    CHECK_INT(s3f__s3_execute(c, &op.r, &err), S3F_ERR_INTERNAL);
    CHECK(strstr(err.message, "no idempotency class") != NULL);
    CHECK_STR(err.operation, "BrandNewOperation");
    s3f__op_cleanup(&op);
    s3f_client_free(c);
}

/* The host a client with these settings presigns a GET for (no network); "" when the
 * endpoint cannot be resolved. */
static void presigned_host(const struct s3f_client_options *o, char *host, size_t len) {
    struct s3f_client *c = NULL;
    struct s3f_error err;
    char *url = NULL;
    host[0] = '\0';
    CHECK_INT(s3f_client_new(o, &c, &err), S3F_OK);
    if (!c)
        return;
    if (s3f_presign(c, "GET", "bkt", "k", 60, &url, &err) == S3F_OK && url) { /* else "" */
        const char *h = strstr(url, "://");
        size_t n = h ? strcspn(h + 3, "/?") : 0;
        if (h && n < len) {
            memcpy(host, h + 3, n);
            host[n] = '\0';
        }
        free(url);
    }
    s3f_client_free(c);
}

/* FIPS, dual-stack and Transfer Acceleration reach the endpoint resolver from the options,
 * the environment (AWS_USE_FIPS_ENDPOINT, AWS_USE_DUALSTACK_ENDPOINT) and the profile
 * (use_fips_endpoint, s3.use_dualstack_endpoint, s3.use_accelerate_endpoint); an option of
 * -1 turns one off whatever the environment says. */
static void test_endpoint_variants(void) {
    char dir[] = "/tmp/s3f-variants-XXXXXX", cfg[64], host[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    FILE *f = fopen(cfg, "w");
    if (f) {
        fputs("[default]\n", f);
        fclose(f);
    }
    struct s3f_client_options o;
    memset(&o, 0, sizeof(o));
    o.region = "us-west-2";
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "secret";
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3.us-west-2.amazonaws.com");
    o.use_fips_endpoint = 1;
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3-fips.us-west-2.amazonaws.com");
    o.use_dualstack_endpoint = 1;
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3-fips.dualstack.us-west-2.amazonaws.com");
    memset(&o, 0, sizeof(o));
    o.region = "us-west-2";
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "secret";
    o.use_accelerate_endpoint = 1;
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3-accelerate.amazonaws.com");
    o.use_accelerate_endpoint = 0;
    /* the environment */
    setenv("AWS_USE_DUALSTACK_ENDPOINT", "true", 1);
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3.dualstack.us-west-2.amazonaws.com");
    o.use_dualstack_endpoint = -1; /* off, whatever the environment says */
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3.us-west-2.amazonaws.com");
    o.use_dualstack_endpoint = 0;
    unsetenv("AWS_USE_DUALSTACK_ENDPOINT");
    /* the profile */
    f = fopen(cfg, "w");
    if (f) {
        fputs("[default]\nuse_fips_endpoint = true\ns3 =\n  use_accelerate_endpoint = true\n",
              f);
        fclose(f);
    }
    presigned_host(&o, host, sizeof(host));
    /* FIPS and Accelerate together are refused by the resolver: the client says so */
    CHECK_STR(host, "");
    f = fopen(cfg, "w");
    if (f) {
        fputs("[default]\ns3 =\n  use_dualstack_endpoint = true\n", f);
        fclose(f);
    }
    presigned_host(&o, host, sizeof(host));
    CHECK_STR(host, "bkt.s3.dualstack.us-west-2.amazonaws.com");
    /* a custom endpoint: FIPS is refused, as by the AWS SDKs */
    o.endpoint_url = "http://127.0.0.1:9";
    o.use_fips_endpoint = 1;
    struct s3f_client *c = NULL;
    struct s3f_error err;
    char *url = NULL;
    if (s3f_client_new(&o, &c, &err) == S3F_OK) {
        CHECK_INT(s3f_presign(c, "GET", "bkt", "k", 60, &url, &err), S3F_ERR_INVALID_ARGUMENT);
        free(url);
        s3f_client_free(c);
    }
    unlink(cfg);
    rmdir(dir);
    unsetenv("AWS_CONFIG_FILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static void test_complete_body_escaped(void) {
    struct s3f_part_info parts[2];
    memset(parts, 0, sizeof(parts));
    parts[0].part_number = 1;
    s3f__strlcpy(parts[0].etag, "\"0cc175b9c0f1b6a831c399e269772661\"", sizeof(parts[0].etag));
    parts[1].part_number = 2;
    s3f__strlcpy(parts[1].etag, "odd<&>'etag", sizeof(parts[1].etag));
    s3f__strlcpy(parts[1].checksum, "a&b", sizeof(parts[1].checksum));
    struct s3f__op op;
    memset(&op, 0, sizeof(op));
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__op_complete_multipart(&op, "b", "k", "id", parts, 2, S3F_CHECKSUM_CRC32C,
                                         NULL, &err), S3F_OK);
    char body[1024];
    size_t n = op.body.len < sizeof(body) - 1 ? op.body.len : sizeof(body) - 1;
    memcpy(body, op.body.data, n);
    body[n] = '\0';
    CHECK(strstr(body, "<ETag>&quot;0cc175b9c0f1b6a831c399e269772661&quot;</ETag>") != NULL);
    CHECK(strstr(body, "<ETag>odd&lt;&amp;&gt;&apos;etag</ETag>") != NULL);
    CHECK(strstr(body, "<ChecksumCRC32C>a&amp;b</ChecksumCRC32C>") != NULL);
    CHECK(strstr(body, "odd<") == NULL);
    s3f__op_cleanup(&op);
}

static void test_multipart_etag(void) {
    /* md5("a"), md5("b"): python3 -c "hashlib.md5(bytes.fromhex(a) + bytes.fromhex(b))" */
    const char *tags[] = {"\"0cc175b9c0f1b6a831c399e269772661\"",
                          "92EB5FFEE6AE2FEC3AD71C777531578F"};
    char out[48];
    CHECK(s3f__multipart_etag(tags, 2, out, sizeof(out)));
    CHECK_STR(out, "\"96e024ba2074fe77e8e965ba43a704be-2\"");
    const char *bad[] = {"\"0cc175b9c0f1b6a831c399e269772661\"", "\"abc-3\""};
    CHECK(!s3f__multipart_etag(bad, 2, out, sizeof(out)));
    const char *nothex[] = {"\"0cc175b9c0f1b6a831c399e26977266g\""};
    CHECK(!s3f__multipart_etag(nothex, 1, out, sizeof(out)));
    CHECK(!s3f__multipart_etag(tags, 0, out, sizeof(out)));
}

static void test_same_object(void) {
    struct s3f_object_info head, ours;
    memset(&head, 0, sizeof(head));
    memset(&ours, 0, sizeof(ours));
    char why[400];
    head.size = 10;
    s3f__strlcpy(head.etag, "\"96e024ba2074fe77e8e965ba43a704be-2\"", sizeof(head.etag));
    /* size first */
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 11, head.etag, why,
                               sizeof(why)), 0);
    CHECK(strstr(why, "10 bytes, not 11") != NULL);
    /* ETag (quotes and case ignored) */
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10,
                               "96E024BA2074FE77E8E965BA43A704BE-2", why, sizeof(why)), 1);
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10, "\"abc-2\"", why,
                               sizeof(why)), 0);
    CHECK(strstr(why, "ETag") != NULL);
    /* nothing to compare */
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10, "", why, sizeof(why)),
              -1);
    /* the whole-object checksum goes before the ETag */
    s3f__strlcpy(head.checksum_crc32c, "AAAAAA==", sizeof(head.checksum_crc32c));
    s3f__strlcpy(ours.checksum_crc32c, "AAAAAA==", sizeof(ours.checksum_crc32c));
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10, "\"other\"", why,
                               sizeof(why)), 1);
    s3f__strlcpy(ours.checksum_crc32c, "BBBBBB==", sizeof(ours.checksum_crc32c));
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10, head.etag, why,
                               sizeof(why)), 0);
    CHECK(strstr(why, "CRC32C checksum is AAAAAA==, not BBBBBB==") != NULL);
    /* a checksum of checksums is no identity of the bytes: the ETag decides */
    s3f__strlcpy(head.checksum_crc32c, "AAAAAA==-2", sizeof(head.checksum_crc32c));
    CHECK_INT(s3f__same_object(&head, &ours, S3F_CHECKSUM_CRC32C, 10, head.etag, why,
                               sizeof(why)), 1);
}

/* Issue 28, D4: the tokens a listing followed. Every distinct token goes on (thousands:
 * the set grows), a token seen before at any distance ends it, as does a truncated page
 * with no token; a page that is not truncated ends it cleanly. */
static void test_list_tokens(void) {
    struct s3f_list_tokens *t = NULL;
    struct s3f_list_page page;
    memset(&page, 0, sizeof(page));
    char tok[64];
    const char *next = "x";
    struct s3f_error err;
    page.is_truncated = 1;
    page.next_continuation_token = tok;
    for (int i = 0; i < 5000; i++) {
        snprintf(tok, sizeof(tok), "token-%d", i);
        s3f_error_clear(&err);
        CHECK_INT(s3f_list_tokens_next(&t, &page, "b", &next, &err), S3F_OK);
        CHECK(next && strcmp(next, tok) == 0 && next != tok);
    }
    snprintf(tok, sizeof(tok), "token-%d", 3); /* a cycle of 4997 pages */
    CHECK_INT(s3f_list_tokens_next(&t, &page, "b", &next, &err), S3F_ERR_BAD_RESPONSE);
    CHECK(next == NULL);
    CHECK(strstr(err.message, "already followed") != NULL);
    CHECK_STR(err.operation, "ListObjectsV2");
    page.next_continuation_token = NULL;
    CHECK_INT(s3f_list_tokens_next(&t, &page, "b", &next, &err), S3F_ERR_BAD_RESPONSE);
    page.next_continuation_token = (char *)"";
    CHECK_INT(s3f_list_tokens_next(&t, &page, "b", &next, &err), S3F_ERR_BAD_RESPONSE);
    page.is_truncated = 0;
    CHECK_INT(s3f_list_tokens_next(&t, &page, "b", &next, &err), S3F_OK);
    CHECK(next == NULL);
    s3f_list_tokens_free(t);
    /* the same token twice in a row, and a page that is not truncated allocates nothing */
    t = NULL;
    page.is_truncated = 1;
    page.next_continuation_token = (char *)"again";
    CHECK_INT(s3f_list_tokens_next(&t, &page, NULL, &next, &err), S3F_OK);
    CHECK_INT(s3f_list_tokens_next(&t, &page, NULL, &next, &err), S3F_ERR_BAD_RESPONSE);
    s3f_list_tokens_free(t);
    t = NULL;
    page.is_truncated = 0;
    CHECK_INT(s3f_list_tokens_next(&t, &page, NULL, &next, &err), S3F_OK);
    CHECK(t == NULL && next == NULL);
    s3f_list_tokens_free(NULL);
}

int main(void) {
    RUN(test_every_operation_has_a_class);
    RUN(test_classes);
    RUN(test_executor_refuses_unknown);
    RUN(test_endpoint_variants);
    RUN(test_complete_body_escaped);
    RUN(test_multipart_etag);
    RUN(test_same_object);
    RUN(test_list_tokens);
    return test_summary();
}
