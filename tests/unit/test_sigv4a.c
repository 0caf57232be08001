/* SigV4a: aws-c-auth's v4a suite run as data (tests/vectors/sigv4/aws-c-auth/v4a), the key
 * derivation, and signatures checked by verification.
 *
 * Each case: context.json (credentials, region = the region set, service, time),
 * request.txt, public-key.json (the public key of the credentials' derived key) and, for the
 * header and query (presigned) forms, the canonical request, the string to sign, a signature
 * and the signed request. ECDSA signatures are randomised, so:
 *  - the canonical request and the string to sign must equal the suite's byte for byte;
 *  - the key derived from the credentials must have the suite's public key;
 *  - our signature must verify with the suite's public key over the string to sign, and the
 *    suite's own signature too (so the verifier is checked against aws-c-auth's signer);
 *  - the signed request must equal the suite's once its signature is replaced by ours.
 * Two cases (get-vanilla-query-order-key, -value) come without expectations: they are signed
 * in both forms and the signatures verified with the derived key. */
#include <string.h>

#include "auth/sigv4.h"
#include "auth/sigv4a.h"
#include "core/core.h"
#include "sigv4_vectors.h"
#include "testutil.h"

static int cases_passed, cases_failed, cases_without_expectations;

static bool unhex32(const char *hex, uint8_t out[32]) {
    if (!hex || strlen(hex) != 64)
        return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

/* Copy of `text` with the hex value after each "Signature=" replaced by `sig`. */
static char *with_signature(const char *text, const char *sig) {
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    const char *p = text;
    for (;;) {
        const char *s = strstr(p, "Signature=");
        if (!s) {
            s3f__buf_appends(&b, p);
            break;
        }
        s += 10;
        s3f__buf_append(&b, p, (size_t)(s - p));
        s3f__buf_appends(&b, sig);
        p = s + strspn(s, "0123456789abcdef");
    }
    return s3f__buf_take(&b);
}

struct v4a_case {
    const char *dir;
    const struct raw_req *r;
    const struct json *ctx;
    uint8_t x[32], y[32]; /* the public key the signatures must verify with */
};

/* One form (header or query) of one case. expect: the suite has its expectations. */
static void run_form(const struct v4a_case *c, bool query_form, bool expect, const char *label) {
    struct cauth_expect x = {0};
    if (expect) {
        cauth_expect_read(c->dir, query_form, &x);
        CHECK(x.creq && x.sts && x.sig && x.sreq);
    }
    const struct raw_req *r = c->r;
    struct s3f__sigv4_credentials creds = cauth_credentials(c->ctx);
    const char *secret = creds.secret_access_key;
    struct s3f__sigv4_config cfg = cauth_config(c->ctx, json_true(c->ctx, "normalize"));
    cfg.region_set = cfg.region; /* SigV4a: the context's region is the region set */
    cfg.region = NULL;
    char body_hash[65];
    s3f__sha256_hex(r->body, r->body_len, body_hash);
    struct s3f__header hdrs[MAX_HEADERS];
    size_t nh = raw_req_headers(r, hdrs);
    char *path = cfg.normalize_path ? xstrdup(r->path) : encode_path(r->path);
    struct s3f__sigv4_request req = {r->method, path, r->query, hdrs, nh, body_hash};
    struct s3f_error err = {0};
    struct s3f__buf sreq;
    s3f__buf_init(&sreq, 0);
    char *creq = NULL, *sts = NULL, *query = NULL, *sig = NULL;
    struct s3f__sigv4_signed out;
    memset(&out, 0, sizeof(out));

    if (!query_form) {
        enum s3f_status st = s3f__sigv4_sign_headers(&req, &creds, &cfg, &out, &err);
        CHECK_INT(st, S3F_OK);
        if (st) {
            fprintf(stderr, "  %s: %s\n", label, err.message);
            goto out;
        }
        creq = out.canonical_request;
        sts = out.string_to_sign;
        sig = out.signature;
        CHECK(strncmp(out.authorization, S3F__SIGV4A_ALGORITHM " Credential=", 34) == 0);
        cauth_header_request(&sreq, r, &out);
        check_no_secret(out.authorization, secret);
    } else {
        enum s3f_status st = s3f__sigv4_presign(&req, &creds, &cfg, &query, &creq, &sts, &err);
        CHECK_INT(st, S3F_OK);
        if (st) {
            fprintf(stderr, "  %s: %s\n", label, err.message);
            goto out;
        }
        const char *s = strstr(query, "&X-Amz-Signature=");
        CHECK(s != NULL);
        sig = s ? (char *)s + 17 : NULL;
        CHECK(strstr(query, "X-Amz-Algorithm=" S3F__SIGV4A_ALGORITHM "&") != NULL);
        cauth_query_request(&sreq, r, query);
        check_no_secret(query, secret);
    }
    check_no_secret(creq, secret);
    check_no_secret(sts, secret);
    /* ours verifies with the public key */
    CHECK(sig && s3f__sigv4a_verify(c->x, c->y, sts, strlen(sts), sig));
    if (expect) {
        CHECK_STR(creq, x.creq);
        CHECK_STR(sts, x.sts);
        /* the suite's signature verifies with the same key over its string to sign */
        CHECK(s3f__sigv4a_verify(c->x, c->y, x.sts, strlen(x.sts), x.sig));
        char *want = with_signature(x.sreq, sig ? sig : "");
        CHECK_STR(sreq.data, want);
        free(want);
    }
out:
    if (query_form) {
        free(creq);
        free(sts);
        free(query);
    }
    s3f__sigv4_signed_cleanup(&out);
    s3f__buf_cleanup(&sreq);
    free(path);
    cauth_expect_free(&x);
}

static void test_aws_c_auth_v4a_suite(void) {
    char root[4096];
    s3f__strlcpy(root, test_src_path("tests/vectors/sigv4/aws-c-auth/v4a"), sizeof(root));
    char **subs;
    size_t n = list_subdirs(root, &subs);
    for (size_t i = 0; i < n; i++) {
        int before = test_checks_failed;
        struct cauth_case k;
        cauth_case_open(root, subs[i], &k);
        char *pk_text = read_rel(k.dir, "public-key.json");
        struct json pk;
        bool expect = pk_text != NULL;
        if (k.ok) {
            struct v4a_case c = {.dir = k.dir, .r = &k.r, .ctx = &k.ctx};
            uint8_t priv[32], dx[32], dy[32];
            struct s3f_error err = {0};
            CHECK_INT(s3f__sigv4a_derive_key(json_get(&k.ctx, "credentials.access_key_id"),
                                             json_get(&k.ctx, "credentials.secret_access_key"),
                                             priv, &err),
                      S3F_OK);
            CHECK_INT(s3f__sigv4a_public_key(priv, dx, dy, &err), S3F_OK);
            if (expect) { /* the derived key is the suite's */
                CHECK(json_parse(pk_text, &pk) == 0);
                CHECK(unhex32(json_get(&pk, "X"), c.x) && unhex32(json_get(&pk, "Y"), c.y));
                CHECK(memcmp(c.x, dx, 32) == 0 && memcmp(c.y, dy, 32) == 0);
            } else {
                memcpy(c.x, dx, 32);
                memcpy(c.y, dy, 32);
                cases_without_expectations++;
            }
            for (int form = 0; form < 2; form++)
                run_form(&c, form == 1, expect, subs[i]);
        }
        bool pass = test_checks_failed == before;
        if (pass)
            cases_passed++;
        else
            cases_failed++;
        printf("%s aws-c-auth/v4a/%s (header + query forms%s)\n", pass ? "PASS" : "FAIL",
               subs[i], expect ? "" : ", no expectations: verified with the derived key");
        cauth_case_close(&k);
        free(pk_text);
        free(subs[i]);
    }
    free(subs);
    printf("aws-c-auth v4a suite: %d passed, %d failed of %zu (%d without expectations)\n",
           cases_passed, cases_failed, n, cases_without_expectations);
    CHECK_INT(n, 40); /* every case of the suite; none skipped */
    CHECK_INT(cases_without_expectations, 2);
}

/* A signature is bound to the string to sign and to the key. */
static void test_verify_rejects(void) {
    uint8_t priv[32], x[32], y[32], x2[32], y2[32];
    struct s3f_error err = {0};
    CHECK_INT(s3f__sigv4a_derive_key("AKIDEXAMPLE", "secret-one", priv, &err), S3F_OK);
    CHECK_INT(s3f__sigv4a_public_key(priv, x, y, &err), S3F_OK);
    const char *msg = "AWS4-ECDSA-P256-SHA256\n20150830T123600Z\n20150830/s3/aws4_request\nab";
    char sig[S3F__SIGV4A_SIGNATURE_HEX_MAX], sig2[S3F__SIGV4A_SIGNATURE_HEX_MAX];
    CHECK_INT(s3f__sigv4a_sign(priv, msg, strlen(msg), sig, &err), S3F_OK);
    CHECK_INT(s3f__sigv4a_sign(priv, msg, strlen(msg), sig2, &err), S3F_OK);
    CHECK(strcmp(sig, sig2) != 0); /* randomised */
    CHECK(s3f__sigv4a_verify(x, y, msg, strlen(msg), sig));
    CHECK(s3f__sigv4a_verify(x, y, msg, strlen(msg), sig2));
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg) - 1, sig));
    /* another secret, another key */
    uint8_t priv2[32];
    CHECK_INT(s3f__sigv4a_derive_key("AKIDEXAMPLE", "secret-two", priv2, &err), S3F_OK);
    CHECK_INT(s3f__sigv4a_public_key(priv2, x2, y2, &err), S3F_OK);
    CHECK(memcmp(x, x2, 32) != 0);
    CHECK(!s3f__sigv4a_verify(x2, y2, msg, strlen(msg), sig));
    /* the access key id is part of the derivation */
    CHECK_INT(s3f__sigv4a_derive_key("AKIDOTHER", "secret-one", priv2, &err), S3F_OK);
    CHECK(memcmp(priv, priv2, 32) != 0);
    /* malformed signatures */
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg), ""));
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg), "3045"));
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg), "zz"));
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg), NULL));
    char flipped[S3F__SIGV4A_SIGNATURE_HEX_MAX];
    memcpy(flipped, sig, sizeof(flipped));
    size_t n = strlen(flipped);
    flipped[n - 1] = flipped[n - 1] == '0' ? '1' : '0';
    CHECK(!s3f__sigv4a_verify(x, y, msg, strlen(msg), flipped));
    /* errors */
    CHECK_INT(s3f__sigv4a_derive_key("", "s", priv, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f__sigv4a_derive_key("A", NULL, priv, &err), S3F_ERR_INVALID_ARGUMENT);
}

/* SigV4a through the SigV4 entry points: the region set header, a scope without region,
 * the cached private key gives the same public key, and the secret is never printed. */
static void test_sign_s3_request(void) {
    const char *secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    struct s3f__sigv4_credentials creds = {"AKIDEXAMPLE", secret, NULL};
    struct s3f__header hdrs[] = {{"host", "mfzwi23gnjvgw.mrap.accesspoint.s3-global.amazonaws.com"}};
    struct s3f__sigv4_request req = {"GET", "/key", NULL, hdrs, 1, S3F__SIGV4_UNSIGNED_PAYLOAD};
    uint8_t priv[32], x[32], y[32];
    struct s3f_error err = {0};
    CHECK_INT(s3f__sigv4a_derive_key("AKIDEXAMPLE", secret, priv, &err), S3F_OK);
    CHECK_INT(s3f__sigv4a_public_key(priv, x, y, &err), S3F_OK);
    struct s3f__sigv4_config cfg = {.service = "s3",
                                    .time = 1440938160,
                                    .add_content_sha256_header = true,
                                    .region_set = "*",
                                    .signing_key = priv};
    struct s3f__sigv4_signed out;
    CHECK_INT(s3f__sigv4_sign_headers(&req, &creds, &cfg, &out, &err), S3F_OK);
    CHECK(strstr(out.authorization, "AWS4-ECDSA-P256-SHA256 Credential=AKIDEXAMPLE/20150830/s3/"
                                    "aws4_request, SignedHeaders=host;x-amz-content-sha256;"
                                    "x-amz-date;x-amz-region-set, Signature=") ==
          out.authorization);
    CHECK(strstr(out.canonical_request, "\nx-amz-region-set:*\n") != NULL);
    CHECK_STR(out.region_set, "*");
    CHECK(s3f__sigv4a_verify(x, y, out.string_to_sign, strlen(out.string_to_sign),
                             out.signature));
    check_no_secret(out.authorization, secret);
    s3f__sigv4_signed_cleanup(&out);
    /* SigV4 is unchanged without a region set (the regional scope, HMAC signature) */
    cfg.region_set = NULL;
    cfg.signing_key = NULL;
    cfg.region = "us-east-1";
    CHECK_INT(s3f__sigv4_sign_headers(&req, &creds, &cfg, &out, &err), S3F_OK);
    CHECK(strstr(out.authorization, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/"
                                    "s3/aws4_request") == out.authorization);
    CHECK_INT(strlen(out.signature), 64);
    CHECK(out.region_set == NULL);
    s3f__sigv4_signed_cleanup(&out);
    /* a bad region set is refused */
    cfg.region_set = "us east";
    CHECK_INT(s3f__sigv4_sign_headers(&req, &creds, &cfg, &out, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "region set") != NULL);
}

int main(void) {
    RUN(test_aws_c_auth_v4a_suite);
    RUN(test_verify_rejects);
    RUN(test_sign_s3_request);
    return test_summary();
}
