/* The flat JSON object reader: credential documents, escapes, numbers, nesting, and
 * malformed input (which must fail without echoing the input). */
#include <stdlib.h>
#include <string.h>

#include "auth/json.h"
#include "core/core.h"
#include "testutil.h"

static enum s3f_status parse(const char *text, struct s3f__json_object *o, char *msg,
                             size_t msg_len) {
    return s3f__json_parse_object(text, strlen(text), o, msg, msg_len);
}

static void test_credentials_document(void) {
    const char *doc = "{\n"
                      "  \"Code\" : \"Success\",\n"
                      "  \"LastUpdated\" : \"2024-01-01T00:00:00Z\",\n"
                      "  \"Type\" : \"AWS-HMAC\",\n"
                      "  \"AccessKeyId\" : \"ASIAEXAMPLE\",\n"
                      "  \"SecretAccessKey\" : \"wJalr/K7MDENG+bPxRfiCYEXAMPLEKEY\",\n"
                      "  \"Token\" : \"IQoJb3JpZ2luX2VjEXAMPLE==\",\n"
                      "  \"Expiration\" : \"2024-01-01T06:00:00Z\",\n"
                      "  \"Version\": 1\n"
                      "}\n";
    struct s3f__json_object o;
    char msg[128];
    CHECK_INT(parse(doc, &o, msg, sizeof(msg)), S3F_OK);
    CHECK_INT(o.n, 8);
    CHECK_STR(s3f__json_get_string(&o, "AccessKeyId"), "ASIAEXAMPLE");
    CHECK_STR(s3f__json_get_string(&o, "SecretAccessKey"), "wJalr/K7MDENG+bPxRfiCYEXAMPLEKEY");
    CHECK_STR(s3f__json_get_string(&o, "Token"), "IQoJb3JpZ2luX2VjEXAMPLE==");
    CHECK(s3f__json_get_string(&o, "Version") == NULL); /* a number, not a string */
    int64_t v = 0;
    CHECK_INT(s3f__json_get_int64(&o, "Version", &v), 0);
    CHECK_INT(v, 1);
    CHECK_INT(s3f__json_get_int64(&o, "Code", &v), -1);
    CHECK_INT(s3f__json_get_int64(&o, "Missing", &v), -1);
    CHECK(s3f__json_get(&o, "accesskeyid") == NULL); /* names are case-sensitive */
    s3f__json_cleanup(&o);
    CHECK(o.members == NULL);
    CHECK_INT(o.n, 0);
    s3f__json_cleanup(&o); /* twice is fine */
}

static void test_values(void) {
    const char *doc = "{\"s\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\",\"u\":\"\\u00e9\\u20ac\\ud83d\\ude00\","
                      "\"z\":\"x\\u0000y\",\"n\":-12,\"f\":1.5e3,\"big\":123456789012345678901,"
                      "\"t\":true,\"fa\":false,\"nu\":null,\"obj\":{\"a\":[1,{\"b\":[]},\"]\"]},"
                      "\"arr\":[],\"empty\":\"\",\"utf8\":\"h\xc3\xa9\"}";
    struct s3f__json_object o;
    char msg[128];
    CHECK_INT(parse(doc, &o, msg, sizeof(msg)), S3F_OK);
    CHECK_STR(s3f__json_get_string(&o, "s"), "a\"b\\c/d\b\f\n\r\t");
    CHECK_STR(s3f__json_get_string(&o, "u"), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    const struct s3f__json_member *z = s3f__json_get(&o, "z");
    CHECK(z && z->value_len == 3 && memcmp(z->value, "x\0y", 3) == 0);
    int64_t v;
    CHECK_INT(s3f__json_get_int64(&o, "n", &v), 0);
    CHECK_INT(v, -12);
    CHECK_INT(s3f__json_get_int64(&o, "f", &v), -1);  /* not an integer */
    CHECK_INT(s3f__json_get_int64(&o, "big", &v), -1); /* overflow */
    CHECK_STR(s3f__json_get(&o, "f")->value, "1.5e3");
    CHECK_INT(s3f__json_get(&o, "t")->type, S3F__JSON_TRUE);
    CHECK_INT(s3f__json_get(&o, "fa")->type, S3F__JSON_FALSE);
    CHECK_INT(s3f__json_get(&o, "nu")->type, S3F__JSON_NULL);
    CHECK_INT(s3f__json_get(&o, "obj")->type, S3F__JSON_OTHER);
    CHECK(s3f__json_get(&o, "obj")->value == NULL);
    CHECK_INT(s3f__json_get(&o, "arr")->type, S3F__JSON_OTHER);
    CHECK_STR(s3f__json_get_string(&o, "empty"), "");
    CHECK_STR(s3f__json_get_string(&o, "utf8"), "h\xc3\xa9");
    s3f__json_cleanup(&o);

    CHECK_INT(parse("  {}  \n", &o, msg, sizeof(msg)), S3F_OK);
    CHECK_INT(o.n, 0);
    s3f__json_cleanup(&o);
}

static void test_malformed(void) {
    static const char *bad[] = {
        "",
        "   ",
        "[]",
        "\"str\"",
        "{",
        "{\"a\"",
        "{\"a\":",
        "{\"a\":1",
        "{\"a\":1,}",
        "{,}",
        "{\"a\" 1}",
        "{a:1}",
        "{'a':1}",
        "{\"a\":1}x",
        "{\"a\":1}{}",
        "{\"a\":01}",
        "{\"a\":-}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":+1}",
        "{\"a\":tru}",
        "{\"a\":nul}",
        "{\"a\":\"unterminated}",
        "{\"a\":\"bad \\x escape\"}",
        "{\"a\":\"\\u12\"}",
        "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800\\u0041\"}",
        "{\"a\":\"tab\there\"}",
        "{\"a\":[1,2}",
        "{\"a\":{\"b\":1]}",
        "{\"a\":[1,]}",
        "{\"a\":1 \"b\":2}",
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(bad); i++) {
        struct s3f__json_object o;
        char msg[128] = "";
        enum s3f_status st = parse(bad[i], &o, msg, sizeof(msg));
        if (st != S3F_ERR_BAD_RESPONSE)
            fprintf(stderr, "  accepted: %s\n", bad[i]);
        CHECK_INT(st, S3F_ERR_BAD_RESPONSE);
        CHECK(strncmp(msg, "offset ", 7) == 0);
        CHECK(o.members == NULL && o.n == 0);
    }
    /* the error names the offset, never the content */
    struct s3f__json_object o;
    char msg[128];
    CHECK_INT(parse("{\"SecretAccessKey\": \"topsecret\" x}", &o, msg, sizeof(msg)),
              S3F_ERR_BAD_RESPONSE);
    CHECK_STR(msg, "offset 32: expected ',' or '}'");
    CHECK(strstr(msg, "topsecret") == NULL);
    /* a NUL inside the input is not the end of it */
    CHECK_INT(s3f__json_parse_object("{}\0{}", 5, &o, msg, sizeof(msg)), S3F_ERR_BAD_RESPONSE);
    /* truncated input (length shorter than the string) */
    CHECK_INT(s3f__json_parse_object("{\"a\":\"bc\"}", 7, &o, msg, sizeof(msg)),
              S3F_ERR_BAD_RESPONSE);
    CHECK_INT(s3f__json_parse_object(NULL, 0, &o, msg, sizeof(msg)), S3F_ERR_BAD_RESPONSE);
    /* NULL errmsg is allowed */
    CHECK_INT(s3f__json_parse_object("{", 1, &o, NULL, 0), S3F_ERR_BAD_RESPONSE);
}

static void test_limits(void) {
    /* nesting: 31 levels inside a member are fine, 40 are not */
    char deep[256];
    for (int levels = 31; levels <= 40; levels += 9) {
        size_t n = 0;
        n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"a\":");
        for (int i = 0; i < levels; i++)
            deep[n++] = '[';
        for (int i = 0; i < levels; i++)
            deep[n++] = ']';
        deep[n++] = '}';
        deep[n] = '\0';
        struct s3f__json_object o;
        char msg[128];
        enum s3f_status st = parse(deep, &o, msg, sizeof(msg));
        CHECK_INT(st, levels == 31 ? S3F_OK : S3F_ERR_BAD_RESPONSE);
        if (st == S3F_ERR_BAD_RESPONSE)
            CHECK(strstr(msg, "too deep") != NULL);
        s3f__json_cleanup(&o);
    }
    /* too many members */
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    s3f__buf_appends(&b, "{");
    for (int i = 0; i < 1100; i++)
        s3f__buf_appendf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
    s3f__buf_appends(&b, "}");
    struct s3f__json_object o;
    char msg[128];
    CHECK_INT(s3f__json_parse_object(b.data, b.len, &o, msg, sizeof(msg)), S3F_ERR_BAD_RESPONSE);
    CHECK(strstr(msg, "too many members") != NULL);
    s3f__buf_cleanup(&b);
}

/* Every prefix of a valid document is rejected and nothing leaks (run under ASan). */
static void test_truncations(void) {
    const char *doc = "{\"AccessKeyId\":\"AKID\",\"n\":-1.25e+2,\"o\":{\"x\":[true,null]},"
                      "\"u\":\"\\u00e9\"}";
    size_t len = strlen(doc);
    int rejected = 0;
    for (size_t i = 0; i < len; i++) {
        char *copy = malloc(i ? i : 1);
        memcpy(copy, doc, i);
        struct s3f__json_object o;
        if (s3f__json_parse_object(copy, i, &o, NULL, 0) == S3F_ERR_BAD_RESPONSE)
            rejected++;
        s3f__json_cleanup(&o);
        free(copy);
    }
    CHECK_INT(rejected, (int)len);
    struct s3f__json_object o;
    CHECK_INT(s3f__json_parse_object(doc, len, &o, NULL, 0), S3F_OK);
    s3f__json_cleanup(&o);
}

int main(void) {
    RUN(test_credentials_document);
    RUN(test_values);
    RUN(test_malformed);
    RUN(test_limits);
    RUN(test_truncations);
    return test_summary();
}
