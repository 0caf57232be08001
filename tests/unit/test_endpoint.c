/* S3 endpoint resolution against botocore's endpoint-rules suite
 * (tests/vectors/s3/endpoint-tests.json), plus hand-written cases for what the suite does not
 * cover (IPv6 and ports of custom endpoints, object URLs, partitions, bucket name checks).
 *
 * Every case of the suite is run, and every one must give exactly the suite's URL and
 * signing scope (the first auth scheme's name, signing name, region or region set: sigv4,
 * sigv4-s3express, sigv4a), or an error containing the suite's text. No case is left
 * unsupported: access points, Multi-Region Access Points, S3 on Outposts (ARNs and bucket
 * aliases), Object Lambda and S3 Express all resolve.
 * Parameters read but without effect on the URL: Key, Prefix, CopySource (operation
 * context). Any other parameter appearing in the suite fails the test, so that a new rule
 * input is not silently ignored. */
#include <stdlib.h>
#include <string.h>

#include "s3/endpoint.h"
#include "testutil.h"
#include "vecjson.h"

static const char *const ignored_params[] = {"Key", "Prefix", "CopySource"};
static const char *const known_params[] = {"Region",           "Bucket",
                                           "Endpoint",         "ForcePathStyle",
                                           "UseFIPS",          "UseDualStack",
                                           "Accelerate",       "UseGlobalEndpoint",
                                           "UseObjectLambdaEndpoint",
                                           "UseS3ExpressControlEndpoint",
                                           "DisableS3ExpressSessionAuth",
                                           "UseArnRegion",
                                           "DisableAccessPoints",
                                           "DisableMultiRegionAccessPoints"};

static bool in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return true;
    return false;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Category of a supported case, for the summary table. */
static const char *supported_category(const struct vj *params, const struct vj *expect) {
    const char *bk = vj_str(params, "Bucket");
    bool arn = bk && strncmp(bk, "arn:", 4) == 0;
    if (vj_get(expect, "error"))
        return arn ? "ARN error" : "validation error";
    if (arn && strstr(bk, ".mrap"))
        return "ARN: MRAP";
    if (arn && strstr(bk, ":s3-outposts:"))
        return "ARN: Outposts";
    if (arn && strstr(bk, ":s3-object-lambda:"))
        return "ARN: Object Lambda";
    if (arn)
        return "ARN: access point";
    if (bk && strlen(bk) >= 50 && ends_with(bk, "--op-s3"))
        return "Outposts alias";
    if (vj_bool(params, "UseObjectLambdaEndpoint") && !bk)
        return "Object Lambda";
    if (vj_bool(params, "UseS3ExpressControlEndpoint") ||
        (bk && (ends_with(bk, "--x-s3") || ends_with(bk, "--xa-s3"))))
        return "S3 Express";
    if (vj_str(params, "Endpoint"))
        return "custom endpoint";
    if (!vj_str(params, "Bucket"))
        return "no bucket";
    const char *url = vj_str(vj_get(expect, "endpoint"), "url");
    const char *b = vj_str(params, "Bucket");
    /* virtual-hosted when the URL host starts with the bucket */
    if (url && strncmp(url, "https://", 8) == 0 && strncmp(url + 8, b, strlen(b)) == 0 &&
        url[8 + strlen(b)] == '.')
        return "virtual-hosted";
    return "path-style";
}

#define MAX_CATS 16
struct cat {
    const char *name;
    int passed, failed;
};
static struct cat cats[MAX_CATS];
static int n_cats;

static struct cat *cat_get(const char *name) {
    for (int i = 0; i < n_cats; i++)
        if (strcmp(cats[i].name, name) == 0)
            return &cats[i];
    if (n_cats == MAX_CATS)
        return &cats[MAX_CATS - 1];
    cats[n_cats].name = name;
    return &cats[n_cats++];
}

/* Host header and path expected from a URL, derived independently of the resolver. */
static void split_url(const char *url, char *host, size_t hlen, char *path, size_t plen) {
    const char *a = strstr(url, "://");
    bool https = strncmp(url, "https", 5) == 0;
    a = a ? a + 3 : url;
    size_t n = strcspn(a, "/");
    snprintf(host, hlen, "%.*s", (int)n, a);
    snprintf(path, plen, "%s", a + n);
    char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon) {
        char *port = colon + (host[0] == '[' ? 2 : 1);
        if ((https && strcmp(port, "443") == 0) || (!https && strcmp(port, "80") == 0))
            *(host[0] == '[' ? colon + 1 : colon) = '\0';
    }
}

/* One auth scheme of the suite against the endpoint: sigv4a gives the region set (and the
 * endpoint must be signed with SigV4a when it is the first scheme), sigv4 and
 * sigv4-s3express the signing region; the signing name always. */
static bool scheme_matches(const struct vj *s, const struct s3f__endpoint *e, bool first,
                           char *why, size_t wlen) {
    const char *name = vj_str(s, "name");
    const char *sn = vj_str(s, "signingName");
    if (!name || !sn || strcmp(sn, e->signing_name) != 0) {
        snprintf(why, wlen, "signing name: got %s want %s", e->signing_name, sn ? sn : "-");
        return false;
    }
    if (strcmp(name, "sigv4a") == 0) {
        const struct vj *set = vj_get(s, "signingRegionSet");
        char want[256] = "";
        for (size_t i = 0; set && set->type == VJ_ARRAY && i < set->n; i++) {
            const char *r = set->items[i]->type == VJ_STRING ? set->items[i]->str : "?";
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s", i ? "," : "", r);
        }
        if (!e->signing_region_set || strcmp(want, e->signing_region_set) != 0) {
            snprintf(why, wlen, "sigv4a region set: got %s want %s",
                     e->signing_region_set ? e->signing_region_set : "(SigV4)", want);
            return false;
        }
        return true;
    }
    if (strcmp(name, "sigv4") != 0 && strcmp(name, "sigv4-s3express") != 0) {
        snprintf(why, wlen, "unknown auth scheme %s", name);
        return false;
    }
    const char *sr = vj_str(s, "signingRegion");
    if (!sr || strcmp(sr, e->signing_region) != 0) {
        snprintf(why, wlen, "signing region: got %s want %s", e->signing_region, sr ? sr : "-");
        return false;
    }
    if (first && e->signing_region_set) {
        snprintf(why, wlen, "signed with SigV4a where the suite wants %s", name);
        return false;
    }
    return true;
}

static bool run_case(size_t idx, const struct vj *tc) {
    const struct vj *params = vj_get(tc, "params");
    const struct vj *expect = vj_get(tc, "expect");
    const char *doc = vj_str(tc, "documentation");
    if (!params || !expect) {
        test_fail(__FILE__, __LINE__, "case %zu: no params/expect", idx);
        return false;
    }
    for (size_t i = 0; i < params->n; i++) {
        const char *k = params->keys[i];
        if (!in_list(k, known_params, S3F_ARRAY_LEN(known_params)) &&
            !in_list(k, ignored_params, S3F_ARRAY_LEN(ignored_params))) {
            test_fail(__FILE__, __LINE__, "case %zu (%s): unknown parameter %s", idx, doc, k);
            return false;
        }
    }
    struct s3f__endpoint_params p = {
        .region = vj_str(params, "Region"),
        .bucket = vj_str(params, "Bucket"),
        .endpoint_url = vj_str(params, "Endpoint"),
        .force_path_style = vj_bool(params, "ForcePathStyle"),
        .use_fips = vj_bool(params, "UseFIPS"),
        .use_dual_stack = vj_bool(params, "UseDualStack"),
        .accelerate = vj_bool(params, "Accelerate"),
        .use_global_endpoint = vj_bool(params, "UseGlobalEndpoint"),
        .use_object_lambda_endpoint = vj_bool(params, "UseObjectLambdaEndpoint"),
        .use_s3express_control_endpoint = vj_bool(params, "UseS3ExpressControlEndpoint"),
        .disable_s3express_session_auth = vj_bool(params, "DisableS3ExpressSessionAuth"),
        .reject_arn_region = vj_get(params, "UseArnRegion") && !vj_bool(params, "UseArnRegion"),
        .disable_access_points = vj_bool(params, "DisableAccessPoints"),
        .disable_mrap = vj_bool(params, "DisableMultiRegionAccessPoints"),
    };
    struct s3f__endpoint e;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__endpoint_resolve(&p, &e, &err);
    const char *want_err = vj_str(expect, "error");
    const struct vj *want_ep = vj_get(expect, "endpoint");
    bool ok = false;
    char why[4096] = "";

    {
        struct cat *c = cat_get(supported_category(params, expect));
        if (want_err) {
            if (st == S3F_OK)
                snprintf(why, sizeof(why), "want error \"%s\", got url %s", want_err, e.url);
            else if (!strstr(err.message, want_err))
                snprintf(why, sizeof(why), "want error \"%s\", got %s: \"%s\"", want_err,
                         s3f_status_name(st), err.message);
            else if (st == S3F_ERR_UNSUPPORTED || err.status != st)
                snprintf(why, sizeof(why), "bad status %s", s3f_status_name(st));
            else
                ok = true;
        } else if (want_ep) {
            const char *url = vj_str(want_ep, "url");
            const struct vj *schemes = vj_get(vj_get(want_ep, "properties"), "authSchemes");
            const struct vj *s0 = schemes && schemes->n ? schemes->items[0] : NULL;
            if (st != S3F_OK) {
                snprintf(why, sizeof(why), "want %s, got %s: %s", url, s3f_status_name(st),
                         err.message);
            } else if (!url || strcmp(url, e.url) != 0) {
                snprintf(why, sizeof(why), "url: got %s want %s", e.url, url ? url : "-");
            } else if (vj_get(want_ep, "headers")) {
                snprintf(why, sizeof(why), "endpoint headers not supported");
            } else if (s0 && !scheme_matches(s0, &e, true, why, sizeof(why))) {
                /* why says what differs */
            } else if (schemes && schemes->n > 1 &&
                       !scheme_matches(schemes->items[1], &e, false, why, sizeof(why))) {
                /* the SigV4 fallback of SigV4a (Outposts): its region */
            } else if (s0 && e.s3express_session !=
                                 (vj_str(s0, "name") &&
                                  strcmp(vj_str(s0, "name"), "sigv4-s3express") == 0)) {
                snprintf(why, sizeof(why), "s3express_session %d for auth scheme %s",
                         e.s3express_session, vj_str(s0, "name"));
            } else if (s0 && !vj_bool(s0, "disableDoubleEncoding")) {
                snprintf(why, sizeof(why), "S3 signs with single encoding");
            } else {
                /* Host header, object URL and path, derived from the expected URL. */
                char host[512], path[1024], want_url[2048], want_path[1100];
                split_url(url, host, sizeof(host), path, sizeof(path));
                snprintf(want_url, sizeof(want_url), "%s/dir/a%%20b", url);
                snprintf(want_path, sizeof(want_path), "%s/dir/a%%20b", path);
                char *ou = s3f__endpoint_object_url(&e, "dir/a b", NULL);
                char *op = s3f__endpoint_object_path(&e, "dir/a b");
                if (strcmp(host, e.host) != 0)
                    snprintf(why, sizeof(why), "host: got %s want %s", e.host, host);
                else if (!ou || strcmp(ou, want_url) != 0)
                    snprintf(why, sizeof(why), "object url: got %s want %s", ou ? ou : "-",
                             want_url);
                else if (!op || strcmp(op, want_path) != 0)
                    snprintf(why, sizeof(why), "object path: got %s want %s", op ? op : "-",
                             want_path);
                else if (p.bucket && !e.arn &&
                         e.path_style != (strstr(e.host, p.bucket) != e.host))
                    snprintf(why, sizeof(why), "path_style flag wrong");
                else if (p.bucket && e.arn && e.path_style)
                    snprintf(why, sizeof(why), "ARN endpoint marked path style");
                else
                    ok = true;
                free(ou);
                free(op);
            }
        } else {
            snprintf(why, sizeof(why), "case without endpoint or error");
        }
        if (ok)
            c->passed++;
        else
            c->failed++;
    }
    if (ok)
        test_checks_passed++;
    else
        test_fail(__FILE__, __LINE__, "case %zu (%s): %s", idx, doc ? doc : "", why);
    s3f__endpoint_cleanup(&e);
    return ok;
}

static void test_vectors(void) {
    size_t len;
    char *text = test_read_file(test_src_path("tests/vectors/s3/endpoint-tests.json"), &len);
    CHECK(text != NULL);
    if (!text)
        return;
    struct vj *root = vj_parse(text, len);
    free(text);
    CHECK(root != NULL);
    const struct vj *cases = vj_get(root, "testCases");
    CHECK(cases && cases->type == VJ_ARRAY && cases->n > 300);
    if (!cases) {
        vj_free(root);
        return;
    }
    for (size_t i = 0; i < cases->n; i++)
        run_case(i, cases->items[i]);
    int tp = 0, tf = 0;
    printf("%-22s %7s %7s\n", "category", "passed", "failed");
    for (int i = 0; i < n_cats; i++) {
        printf("%-22s %7d %7d\n", cats[i].name, cats[i].passed, cats[i].failed);
        tp += cats[i].passed;
        tf += cats[i].failed;
    }
    printf("%-22s %7d %7d   (%zu cases)\n", "total", tp, tf, cases->n);
    CHECK_INT(tp + tf, cases->n);
    CHECK_INT(tf, 0);
    vj_free(root);
}

/* ---- hand-written cases ----------------------------------------------------------------- */
struct hand {
    const char *region, *bucket, *endpoint;
    bool path_style;
    const char *url, *host, *obj_path; /* obj_path for key "k/x y" */
};

static void test_custom_endpoints(void) {
    static const struct hand cases[] = {
        {"us-east-1", "b1", "http://[::1]:9000", false, "http://[::1]:9000/b1", "[::1]:9000",
         "/b1/k/x%20y"},
        {"us-east-1", "bkt", "https://minio.local:443", false, "https://bkt.minio.local:443",
         "bkt.minio.local", "/k/x%20y"},
        {"us-east-1", "bkt", "http://minio.local:80/", false, "http://bkt.minio.local:80",
         "bkt.minio.local", "/k/x%20y"},
        {"us-east-1", "bkt", "http://127.0.0.1:7480", false, "http://127.0.0.1:7480/bkt",
         "127.0.0.1:7480", "/bkt/k/x%20y"},
        {"us-east-1", "my.bucket", "http://10.1.2.3:9000", false,
         "http://10.1.2.3:9000/my.bucket", "10.1.2.3:9000", "/my.bucket/k/x%20y"},
        {"us-east-1", "my.bucket", "https://s3.example.com", false,
         "https://s3.example.com/my.bucket", "s3.example.com", "/my.bucket/k/x%20y"},
        {"us-east-1", "my.bucket", "http://base.example.com/base/", true,
         "http://base.example.com/base/my.bucket", "base.example.com",
         "/base/my.bucket/k/x%20y"},
        {"us-east-1", "bkt", "http://base.example.com:8080/base", false,
         "http://bkt.base.example.com:8080/base", "bkt.base.example.com:8080", "/base/k/x%20y"},
        {"us-east-1", "Legacy_Bucket", "http://rgw:7480", false, "http://rgw:7480/Legacy_Bucket",
         "rgw:7480", "/Legacy_Bucket/k/x%20y"},
        {"us-east-1", NULL, "http://h:9000/", false, "http://h:9000", "h:9000", "/k/x%20y"},
        {"us-east-1", "", "http://h:9000", false, "http://h:9000", "h:9000", "/k/x%20y"},
        /* as libcurl sends them (curl_url()): an abbreviated IPv4 address, dot segments, a
         * port with a leading zero, a link-local address with its zone */
        {"us-east-1", "bkt", "http://127.1:7480", false, "http://127.0.0.1:7480/bkt",
         "127.0.0.1:7480", "/bkt/k/x%20y"},
        {"us-east-1", "bkt", "http://h:9000/a/../b/./", true, "http://h:9000/b/bkt", "h:9000",
         "/b/bkt/k/x%20y"},
        {"us-east-1", "bkt", "http://h:09000", true, "http://h:9000/bkt", "h:9000",
         "/bkt/k/x%20y"},
        {"us-east-1", "bkt", "http://[fe80::1%25eth0]:9000", false,
         "http://[fe80::1%25eth0]:9000/bkt", "[fe80::1%25eth0]:9000", "/bkt/k/x%20y"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        struct s3f__endpoint_params p = {.region = cases[i].region,
                                         .bucket = cases[i].bucket,
                                         .endpoint_url = cases[i].endpoint,
                                         .force_path_style = cases[i].path_style};
        struct s3f__endpoint e;
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f__endpoint_resolve(&p, &e, &err), S3F_OK);
        if (!e.url) {
            fprintf(stderr, "  case %zu: %s\n", i, err.message);
            continue;
        }
        CHECK_STR(e.url, cases[i].url);
        CHECK_STR(e.host, cases[i].host);
        char *op = s3f__endpoint_object_path(&e, "k/x y");
        CHECK_STR(op, cases[i].obj_path);
        free(op);
        s3f__endpoint_cleanup(&e);
    }
}

static void test_object_urls(void) {
    struct s3f__endpoint e;
    struct s3f__endpoint_params p = {.region = "us-west-2", .bucket = "bkt"};
    CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
    char *u = s3f__endpoint_object_url(&e, NULL, "list-type=2&prefix=a%2F");
    CHECK_STR(u, "https://bkt.s3.us-west-2.amazonaws.com/?list-type=2&prefix=a%2F");
    free(u);
    u = s3f__endpoint_object_path(&e, "");
    CHECK_STR(u, "/");
    free(u);
    u = s3f__endpoint_object_url(&e, "/lead//x~y+z=\xc3\xa9", "uploads");
    CHECK_STR(u, "https://bkt.s3.us-west-2.amazonaws.com//lead//x~y%2Bz%3D%C3%A9?uploads");
    free(u);
    u = s3f__endpoint_object_url(&e, "k", "");
    CHECK_STR(u, "https://bkt.s3.us-west-2.amazonaws.com/k");
    free(u);
    CHECK(!e.path_style && e.tls);
    s3f__endpoint_cleanup(&e);

    p.force_path_style = true;
    CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
    CHECK(e.path_style);
    u = s3f__endpoint_object_url(&e, NULL, "location");
    CHECK_STR(u, "https://s3.us-west-2.amazonaws.com/bkt?location");
    free(u);
    u = s3f__endpoint_object_path(&e, NULL);
    CHECK_STR(u, "/bkt");
    free(u);
    s3f__endpoint_cleanup(&e);
    s3f__endpoint_cleanup(&e); /* twice is fine */
    s3f__endpoint_cleanup(NULL);
    CHECK(s3f__endpoint_object_url(NULL, "k", NULL) == NULL);
    CHECK(s3f__endpoint_object_path(&e, "k") == NULL); /* cleaned up */
}

static void test_partitions(void) {
    static const char *const cases[][2] = {
        {"us-gov-west-1", "https://b-1.s3.us-gov-west-1.amazonaws.com"},
        {"cn-northwest-1", "https://b-1.s3.cn-northwest-1.amazonaws.com.cn"},
        {"us-iso-east-1", "https://b-1.s3.us-iso-east-1.c2s.ic.gov"},
        {"us-isob-east-1", "https://b-1.s3.us-isob-east-1.sc2s.sgov.gov"},
        {"eu-isoe-west-1", "https://b-1.s3.eu-isoe-west-1.cloud.adc-e.uk"},
        {"us-isof-south-1", "https://b-1.s3.us-isof-south-1.csp.hci.ic.gov"},
        {"cn-south-9", "https://b-1.s3.cn-south-9.amazonaws.com.cn"},     /* by regex */
        {"mx-central-1", "https://b-1.s3.mx-central-1.amazonaws.com"},    /* by regex */
        {"eusc-de-east-1", "https://b-1.s3.eusc-de-east-1.amazonaws.eu"}, /* by regex */
        {"local", "https://b-1.s3.local.amazonaws.com"},                  /* default: aws */
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        struct s3f__endpoint_params p = {.region = cases[i][0], .bucket = "b-1"};
        struct s3f__endpoint e;
        CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
        CHECK_STR(e.url, cases[i][1]);
        CHECK_STR(e.signing_region, cases[i][0]);
        s3f__endpoint_cleanup(&e);
    }
    /* FIPS in GovCloud; accelerate on the global endpoint */
    struct s3f__endpoint_params p = {.region = "us-gov-east-1", .use_fips = true};
    struct s3f__endpoint e;
    CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
    CHECK_STR(e.url, "https://s3-fips.us-gov-east-1.amazonaws.com");
    s3f__endpoint_cleanup(&e);
}

static void test_errors(void) {
    struct s3f__endpoint e;
    struct s3f_error err;
    struct {
        struct s3f__endpoint_params p;
        enum s3f_status st;
        const char *text;
    } cases[] = {
        {{.region = "us-east-1", .bucket = "b", .endpoint_url = "http://user:s3cr3t@host"},
         S3F_ERR_INVALID_URI, "user information"},
        {{.region = "us-east-1", .endpoint_url = "http://host/?x=1"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "ftp://host"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://host:99999"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://host:"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://[::1"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://ho st"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http:/host"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http:///host"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://host:0"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://host/#"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "us-east-1", .endpoint_url = "http://h\xc3\xa9st"}, S3F_ERR_INVALID_URI,
         "not a valid URI"},
        {{.region = "", .bucket = "b"}, S3F_ERR_INVALID_ARGUMENT, "region must be set"},
        {{.region = "us-east-1", .bucket = "arn:aws:s3:us-west-2:123456789012:accesspoint:x:y"},
         S3F_ERR_INVALID_ARGUMENT, "single resource component"},
        {{.region = "us-east-1", .bucket = "b--useaz4--x-s3"}, S3F_ERR_INVALID_ARGUMENT,
         "Unrecognized S3Express bucket name format."},
        {{.region = "us-east-1", .bucket = "--use1-az4--x-s3"}, S3F_ERR_INVALID_ARGUMENT,
         "S3Express"},
        {{.region = "us-east-1", .use_object_lambda_endpoint = true, .use_dual_stack = true},
         S3F_ERR_INVALID_ARGUMENT, "Object Lambda does not support Dual-stack"},
        {{.region = "us-east-1", .bucket = "b.b", .accelerate = true},
         S3F_ERR_INVALID_ARGUMENT, "Path-style addressing cannot be used with S3 Accelerate"},
        {{.region = "bad region", .bucket = "b.b"}, S3F_ERR_INVALID_ARGUMENT, "Invalid region"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        s3f_error_clear(&err);
        CHECK_INT(s3f__endpoint_resolve(&cases[i].p, &e, &err), cases[i].st);
        CHECK_INT(err.status, cases[i].st);
        CHECK(strstr(err.message, cases[i].text) != NULL);
        CHECK(strstr(err.message, "s3cr3t") == NULL && strstr(err.resource, "s3cr3t") == NULL);
        CHECK_STR(err.operation, "endpoint");
        CHECK(e.url == NULL);
        s3f__endpoint_cleanup(&e);
    }
    /* a short bucket ending in --op-s3 is an ordinary bucket for the rules */
    struct s3f__endpoint_params p = {.region = "us-east-1", .bucket = "abc--op-s3"};
    CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
    CHECK_STR(e.url, "https://abc--op-s3.s3.us-east-1.amazonaws.com");
    s3f__endpoint_cleanup(&e);
    CHECK_INT(s3f__endpoint_resolve(NULL, &e, NULL), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f__endpoint_resolve(&p, NULL, NULL), S3F_ERR_INVALID_ARGUMENT);
}

static void test_bucket_names(void) {
    /* DNS compatible (virtual host) */
    CHECK(s3f__bucket_dns_compatible("abc", false));
    CHECK(s3f__bucket_dns_compatible("a-b-1", false));
    CHECK(!s3f__bucket_dns_compatible("ab", false));
    CHECK(!s3f__bucket_dns_compatible("Abc", false));
    CHECK(!s3f__bucket_dns_compatible("a_b", false));
    CHECK(!s3f__bucket_dns_compatible("-ab", false));
    CHECK(!s3f__bucket_dns_compatible("ab-", false));
    CHECK(!s3f__bucket_dns_compatible("a.b.c", false));
    CHECK(s3f__bucket_dns_compatible("a.b.c", true));
    CHECK(!s3f__bucket_dns_compatible("a..b", true));
    CHECK(!s3f__bucket_dns_compatible("a.-b", true));
    CHECK(!s3f__bucket_dns_compatible("192.168.1.1", true));
    CHECK(s3f__bucket_dns_compatible("192.168.1.256", true));
    CHECK(!s3f__bucket_dns_compatible(NULL, true));
    char long_label[80];
    memset(long_label, 'a', 64);
    long_label[64] = '\0';
    CHECK(!s3f__bucket_dns_compatible(long_label, false));
    long_label[63] = '\0';
    CHECK(s3f__bucket_dns_compatible(long_label, false));
    /* strict AWS rules */
    CHECK(s3f__bucket_name_valid("my-bucket.v2", true));
    CHECK(s3f__bucket_name_valid(long_label, true)); /* 63 */
    CHECK(!s3f__bucket_name_valid("ab", true));
    CHECK(!s3f__bucket_name_valid("My-Bucket", true));
    CHECK(!s3f__bucket_name_valid("my_bucket", true));
    CHECK(!s3f__bucket_name_valid("my..bucket", true));
    CHECK(!s3f__bucket_name_valid(".bucket", true));
    CHECK(!s3f__bucket_name_valid("bucket-", true));
    CHECK(!s3f__bucket_name_valid("10.0.0.1", true));
    CHECK(!s3f__bucket_name_valid("xn--bucket", true));
    CHECK(!s3f__bucket_name_valid("sthree-bucket", true));
    CHECK(!s3f__bucket_name_valid("bucket-s3alias", true));
    CHECK(!s3f__bucket_name_valid("bucket--ol-s3", true));
    CHECK(!s3f__bucket_name_valid("bucket--x-s3", true));
    CHECK(!s3f__bucket_name_valid("bucket.mrap", true));
    CHECK(!s3f__bucket_name_valid(NULL, true));
    /* relaxed (legacy / RGW) */
    CHECK(s3f__bucket_name_valid("My_Legacy.Bucket", false));
    CHECK(!s3f__bucket_name_valid("ab", false));
    CHECK(!s3f__bucket_name_valid("a b c", false));
    CHECK(!s3f__bucket_name_valid("a/bc", false));
    CHECK(!s3f__bucket_name_valid("abc!", false));
    char big[300];
    memset(big, 'a', 255);
    big[255] = '\0';
    CHECK(s3f__bucket_name_valid(big, false));
    big[255] = 'a';
    big[256] = '\0';
    CHECK(!s3f__bucket_name_valid(big, false));
}

/* S3 Express cases the suite does not cover. AWS, "Directory bucket naming rules": names are
 * base-name--zone-id--x-s3 (zone ids like use1-az4; Local Zones: usw2-lax1-az1); "Regional
 * and Zonal endpoints for directory buckets": zonal endpoints are virtual-hosted only; a
 * custom endpoint (the loopback sink, an IP: path style) still wins, signed for s3express
 * with the session. */
static void test_express(void) {
    char zone[64];
    CHECK(s3f__directory_bucket_zone("data--use1-az4--x-s3", zone, sizeof(zone)));
    CHECK_STR(zone, "use1-az4");
    CHECK(s3f__directory_bucket_zone("my--ckpt--usw2-lax1-az1--x-s3", zone, sizeof(zone)));
    CHECK_STR(zone, "usw2-lax1-az1");
    CHECK(s3f__directory_bucket_zone("ap--use1-az4--xa-s3", zone, sizeof(zone)));
    CHECK_STR(zone, "use1-az4");
    CHECK(!s3f__directory_bucket_zone("data--useaz4--x-s3", zone, sizeof(zone)));
    CHECK(!s3f__directory_bucket_zone("data-use1-az4-x-s3", zone, sizeof(zone)));
    CHECK(!s3f__directory_bucket_zone("data--use1-az4--x-s3", zone, 5));
    CHECK(s3f__bucket_is_directory("d--use1-az4--x-s3"));
    CHECK(!s3f__bucket_is_directory("plain-bucket"));
    CHECK(!s3f__bucket_name_valid("d--use1-az4--x-s3", true)); /* not a general-purpose name */

    struct {
        struct s3f__endpoint_params p;
        const char *url, *host;
        bool path_style, session;
    } cases[] = {
        {{.region = "us-west-2", .bucket = "ckpt--usw2-lax1-az1--x-s3"},
         "https://ckpt--usw2-lax1-az1--x-s3.s3express-usw2-lax1-az1.us-west-2.amazonaws.com",
         "ckpt--usw2-lax1-az1--x-s3.s3express-usw2-lax1-az1.us-west-2.amazonaws.com", false,
         true},
        /* path style is not offered by zonal endpoints: the AWS URL stays virtual-hosted */
        {{.region = "us-east-1", .bucket = "d--use1-az4--x-s3", .force_path_style = true},
         "https://d--use1-az4--x-s3.s3express-use1-az4.us-east-1.amazonaws.com",
         "d--use1-az4--x-s3.s3express-use1-az4.us-east-1.amazonaws.com", false, true},
        {{.region = "us-east-1", .bucket = "d--use1-az4--x-s3",
          .endpoint_url = "http://127.0.0.1:9000"},
         "http://127.0.0.1:9000/d--use1-az4--x-s3", "127.0.0.1:9000", true, true},
        {{.region = "us-east-1", .bucket = "d--use1-az4--x-s3",
          .endpoint_url = "http://localhost:9000", .force_path_style = true},
         "http://localhost:9000/d--use1-az4--x-s3", "localhost:9000", true, true},
        {{.region = "us-east-1", .bucket = "d--use1-az4--x-s3",
          .endpoint_url = "http://127.0.0.1:9000", .disable_s3express_session_auth = true},
         "http://127.0.0.1:9000/d--use1-az4--x-s3", "127.0.0.1:9000", true, false},
        {{.region = "eu-north-1", .bucket = "d--eun1-az1--x-s3",
          .use_s3express_control_endpoint = true},
         "https://s3express-control.eu-north-1.amazonaws.com/d--eun1-az1--x-s3",
         "s3express-control.eu-north-1.amazonaws.com", true, false},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        struct s3f__endpoint e;
        struct s3f_error err;
        s3f_error_clear(&err);
        CHECK_INT(s3f__endpoint_resolve(&cases[i].p, &e, &err), S3F_OK);
        if (e.url) {
            CHECK_STR(e.url, cases[i].url);
            CHECK_STR(e.host, cases[i].host);
            CHECK_STR(e.signing_name, "s3express");
            CHECK(e.s3express);
            CHECK_INT(e.path_style, cases[i].path_style);
            CHECK_INT(e.s3express_session, cases[i].session);
        }
        s3f__endpoint_cleanup(&e);
    }
    /* a plain bucket is not affected */
    struct s3f__endpoint e;
    struct s3f__endpoint_params pp = {.region = "us-east-1", .bucket = "plain"};
    CHECK_INT(s3f__endpoint_resolve(&pp, &e, NULL), S3F_OK);
    CHECK_STR(e.signing_name, "s3");
    CHECK(!e.s3express && !e.s3express_session);
    s3f__endpoint_cleanup(&e);
}

/* ARN buckets in s3:// URIs (the split itself: test_uri.c): what is no ARN stays refused,
 * ARN buckets pass the relaxed name check, and the bucket of an s3://ARN/KEY resolves to the
 * access point. */
static void test_arn_uris(void) {
    /* not an ARN: fewer than 6 fields, a space; still refused as bucket names */
    char bucket[256], key[1100];
    CHECK_INT(s3f_uri_parse("s3://arn:aws:s3/k", bucket, sizeof(bucket), key, sizeof(key), NULL),
              S3F_ERR_INVALID_URI);
    CHECK_INT(s3f_uri_parse("s3://arn:aws:s3:r:1:access point/x/k", bucket, sizeof(bucket), key,
                            sizeof(key), NULL),
              S3F_ERR_INVALID_URI);
    CHECK(!s3f__bucket_name_valid("arn:aws:s3:us-west-2:123456789012:accesspoint/myap", true));
    CHECK(s3f__bucket_name_valid("arn:aws:s3:us-west-2:123456789012:accesspoint/myap", false));
    CHECK(!s3f__bucket_name_valid("arn:aws:s3:us-west-2:1:accesspoint/a/b", false));
    /* the bucket of the first URI resolves to the access point */
    struct s3f__endpoint e;
    struct s3f__endpoint_params p = {.region = "us-east-1",
                                     .bucket = "arn:aws:s3:us-west-2:123456789012:accesspoint/myap"};
    CHECK_INT(s3f__endpoint_resolve(&p, &e, NULL), S3F_OK);
    CHECK_STR(e.host, "myap-123456789012.s3-accesspoint.us-west-2.amazonaws.com");
    CHECK_STR(e.signing_region, "us-west-2");
    CHECK(e.signing_region_set == NULL && e.arn && !e.path_style);
    char *op = s3f__endpoint_object_path(&e, "dir/key.bin");
    CHECK_STR(op, "/dir/key.bin");
    free(op);
    s3f__endpoint_cleanup(&e);
}

int main(void) {
    RUN(test_arn_uris);
    RUN(test_vectors);
    RUN(test_express);
    RUN(test_custom_endpoints);
    RUN(test_object_urls);
    RUN(test_partitions);
    RUN(test_errors);
    RUN(test_bucket_names);
    return test_summary();
}
