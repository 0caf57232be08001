/* The listings and bucket operations of the public API: ListObjectsV2, CreateBucket,
 * ListBuckets, DeleteBucket. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/ops_common.h"

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
    enum s3f_status st = s3f__op_check_args("ListObjectsV2", bucket, NULL, false, err);
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
    if (s3f__op_query_add(&q, "list-type", "2") ||
        s3f__op_query_add(&q, "encoding-type", "url") ||
        (opts->prefix && *opts->prefix && s3f__op_query_add(&q, "prefix", opts->prefix)) ||
        (opts->delimiter && *opts->delimiter &&
         s3f__op_query_add(&q, "delimiter", opts->delimiter)) ||
        (opts->continuation_token && *opts->continuation_token &&
         s3f__op_query_add(&q, "continuation-token", opts->continuation_token)) ||
        (opts->start_after && *opts->start_after &&
         s3f__op_query_add(&q, "start-after", opts->start_after)) ||
        (opts->max_keys && s3f__op_query_add(&q, "max-keys", max_keys))) {
        s3f__buf_cleanup(&q);
        return s3f__op_oom(err, "ListObjectsV2");
    }
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "ListObjectsV2", "GET", bucket, NULL);
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

/* ---- the tokens a listing followed ---------------------------------------------------
 * An open-addressing set of 16-byte digests (the first 16 bytes of the token's SHA-256, its
 * first byte's low bit set so that an all-zero slot means empty), at most half full. */
struct s3f_list_tokens {
    uint8_t (*slot)[16];
    size_t cap, n;
    char *current;
};

static size_t token_home(const uint8_t d[16], size_t cap) {
    uint64_t h;
    memcpy(&h, d + 8, sizeof(h));
    return (size_t)h & (cap - 1);
}

/* Add d; 1 if it was there already, 0 added, -1 out of memory. */
static int tokens_add(struct s3f_list_tokens *t, const uint8_t d[16]) {
    static const uint8_t empty[16];
    if ((t->n + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        uint8_t(*slot)[16] = calloc(cap, sizeof(*slot));
        if (!slot)
            return -1;
        for (size_t i = 0; i < t->cap; i++) {
            if (memcmp(t->slot[i], empty, 16) == 0)
                continue;
            size_t j = token_home(t->slot[i], cap);
            while (memcmp(slot[j], empty, 16) != 0)
                j = (j + 1) & (cap - 1);
            memcpy(slot[j], t->slot[i], 16);
        }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t j = token_home(d, t->cap);
    for (; memcmp(t->slot[j], empty, 16) != 0; j = (j + 1) & (t->cap - 1))
        if (memcmp(t->slot[j], d, 16) == 0)
            return 1;
    memcpy(t->slot[j], d, 16);
    t->n++;
    return 0;
}

enum s3f_status s3f_list_tokens_next(struct s3f_list_tokens **t,
                                     const struct s3f_list_page *page, const char *bucket,
                                     const char **next, struct s3f_error *err) {
    *next = NULL;
    if (!t || !page)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "ListObjectsV2", bucket,
                              "the token set or the page is NULL");
    if (!page->is_truncated)
        return S3F_OK;
    const char *tok = page->next_continuation_token;
    if (!tok || !*tok)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, "ListObjectsV2", bucket,
                              "the server's page is truncated but names no "
                              "NextContinuationToken: the listing cannot go on");
    if (!*t && !(*t = calloc(1, sizeof(**t))))
        return s3f__op_oom(err, "ListObjectsV2");
    uint8_t sum[32];
    if (s3f__sha256(tok, strlen(tok), sum) != 0)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "ListObjectsV2", bucket,
                              "SHA-256 of a continuation token failed");
    sum[0] |= 1;
    int seen = tokens_add(*t, sum);
    if (seen < 0)
        return s3f__op_oom(err, "ListObjectsV2");
    if (seen)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, "ListObjectsV2", bucket,
                              "the server's page %zu is truncated and hands back a "
                              "continuation token the listing already followed (the "
                              "listing would never end): the server's fault",
                              (*t)->n + 1);
    char *cur = s3f__strdup(tok);
    if (!cur)
        return s3f__op_oom(err, "ListObjectsV2");
    free((*t)->current);
    (*t)->current = cur;
    *next = cur;
    return S3F_OK;
}

void s3f_list_tokens_free(struct s3f_list_tokens *t) {
    if (!t)
        return;
    free(t->slot);
    free(t->current);
    free(t);
}

/* ---- buckets ------------------------------------------------------------------------ */

enum s3f_status s3f_create_bucket(struct s3f_client *c, const char *bucket,
                                  struct s3f_error *err) {
    enum s3f_status st = s3f__op_check_args("CreateBucket", bucket, NULL, false, err);
    if (st)
        return st;
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "CreateBucket", NULL,
                              "client is NULL");
    struct s3f__buf body;
    s3f__buf_init(&body, 4096);
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "CreateBucket", "PUT", bucket, NULL);
    char zone[64];
    if (s3f__directory_bucket_zone(bucket, zone, sizeof(zone))) {
        /* a directory bucket: on the control endpoint, in its Availability Zone (AWS,
         * CreateBucket: Location Type AvailabilityZone, Bucket Type Directory) */
        r.s3express_control = true;
        if (s3f__buf_appendf(&body,
                             "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/"
                             "2006-03-01/\"><Location><Name>%s</Name><Type>AvailabilityZone"
                             "</Type></Location><Bucket><DataRedundancy>SingleAvailabilityZone"
                             "</DataRedundancy><Type>Directory</Type></Bucket>"
                             "</CreateBucketConfiguration>",
                             zone)) {
            s3f__buf_cleanup(&body);
            return s3f__op_oom(err, "CreateBucket");
        }
    } else if (strcmp(c->region, "us-east-1") != 0 && !c->endpoint_url) {
        /* us-east-1 takes no LocationConstraint; a custom endpoint may know no AWS region */
        if (s3f__buf_appendf(&body,
                             "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/"
                             "2006-03-01/\"><LocationConstraint>%s</LocationConstraint>"
                             "</CreateBucketConfiguration>",
                             c->region)) {
            s3f__buf_cleanup(&body);
            return s3f__op_oom(err, "CreateBucket");
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
    s3f__op_request_init(&r, "ListBuckets", "GET", NULL, NULL);
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
    enum s3f_status st = s3f__op_check_args("DeleteBucket", bucket, NULL, false, err);
    if (st)
        return st;
    struct s3f__s3_request r;
    s3f__op_request_init(&r, "DeleteBucket", "DELETE", bucket, NULL);
    r.s3express_control = s3f__bucket_is_directory(bucket); /* the control endpoint */
    return s3f__s3_execute(c, &r, err);
}
