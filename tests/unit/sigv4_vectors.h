/* Shared by the SigV4 and SigV4a vector runners (test_sigv4.c, test_sigv4a.c): reading the
 * suites' files, a raw HTTP request parser (request.txt, botocore's .req) and a tiny reader
 * for the flat context.json files. Test code: failures of malloc stop the program. */
#ifndef S3F_TESTS_SIGV4_VECTORS_H
#define S3F_TESTS_SIGV4_VECTORS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "auth/sigv4.h"

#define MAX_HEADERS 64

/* snprintf that stops the test program on truncation (paths and labels here are short). */
#define FMT(buf, ...)                                                                      \
    do {                                                                                   \
        int n_ = snprintf((buf), sizeof(buf), __VA_ARGS__);                                \
        if (n_ < 0 || (size_t)n_ >= sizeof(buf)) {                                         \
            fprintf(stderr, "%s:%d: string too long\n", __FILE__, __LINE__);               \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

struct raw_req {
    char *method, *target, *path, *query; /* query NULL when the target has no '?' */
    char *names[MAX_HEADERS], *values[MAX_HEADERS];
    size_t n;
    char *header_text; /* the header lines verbatim, each ending in '\n' */
    char *body;
    size_t body_len;
};

struct json_kv {
    char key[128];
    char val[1024];
};

struct json {
    struct json_kv kv[32];
    size_t n;
    const char *p;
    int bad;
};

char *xstrdup(const char *s);
char *read_rel(const char *dir, const char *name);
char *encode_path(const char *raw);
bool path_is_normal(const char *path);
void check_no_secret(const char *s, const char *secret);
void raw_req_free(struct raw_req *r);
int raw_req_parse(const char *text, struct raw_req *r);
char *raw_req_take(struct raw_req *r, const char *name);
size_t raw_req_headers(const struct raw_req *r, struct s3f__header *h);
char *raw_header_value(const char *text, const char *name);
int json_parse(const char *text, struct json *j);
const char *json_get(const struct json *j, const char *key);
bool json_true(const struct json *j, const char *key);
size_t list_subdirs(const char *dir, char ***out);

/* aws-c-auth's expectations of one form ("header" or "query") of a case: the canonical
 * request, string to sign, signature and signed request (each NULL when absent). */
struct cauth_expect {
    char *creq, *sts, *sig, *sreq;
};
void cauth_expect_read(const char *dir, bool query_form, struct cauth_expect *x);
void cauth_expect_free(struct cauth_expect *x);
/* The signing config of a context.json (region and service, time, expiration, sign_body,
 * omit_session_token); normalize_path from `normalize`. */
struct s3f__sigv4_config cauth_config(const struct json *ctx, bool normalize);
/* The credentials of a context.json (pointing into ctx). */
struct s3f__sigv4_credentials cauth_credentials(const struct json *ctx);
/* The signed request as aws-c-auth writes it: the header form (the request plus the signer's
 * headers in its order) or the query form (the presigned query on the request line). */
void cauth_header_request(struct s3f__buf *b, const struct raw_req *r,
                          const struct s3f__sigv4_signed *out);
void cauth_query_request(struct s3f__buf *b, const struct raw_req *r, const char *query);

/* One case folder of an aws-c-auth suite: its context.json and request.txt read and parsed
 * (ok: both were; CHECKed). Close with cauth_case_close. */
struct cauth_case {
    char dir[4096];
    char *ctx_text, *req_text;
    struct json ctx;
    struct raw_req r;
    bool ok;
};
void cauth_case_open(const char *root, const char *name, struct cauth_case *c);
void cauth_case_close(struct cauth_case *c);

#endif /* S3F_TESTS_SIGV4_VECTORS_H */
