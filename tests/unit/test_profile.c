/* The shared config/credentials file parser: sections, comments, sub-properties, services,
 * malformed lines, profile selection and the files on disk. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/profile.h"
#include "core/core.h"
#include "testutil.h"

static struct s3f__aws_config *parse_ok(const char *cfg, const char *cred, const char *profile) {
    struct s3f__aws_config *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__aws_config_parse(cfg, NULL, cred, NULL, profile, &c, &err);
    CHECK_INT(st, S3F_OK);
    if (st)
        fprintf(stderr, "  parse error: %s\n", err.message);
    return c;
}

/* Parse that must fail with S3F_ERR_CONFIG; returns the message in a static buffer. */
static const char *parse_fail(const char *cfg, const char *cred, const char *profile) {
    static char msg[512];
    struct s3f__aws_config *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__aws_config_parse(cfg, NULL, cred, NULL, profile, &c, &err);
    CHECK_INT(st, S3F_ERR_CONFIG);
    CHECK(c == NULL);
    CHECK_INT(err.status, S3F_ERR_CONFIG);
    s3f__strlcpy(msg, err.message, sizeof(msg));
    s3f__aws_config_free(c);
    return msg;
}

static void test_sections_and_precedence(void) {
    const char *cfg = "[default]\n"
                      "region = us-west-2\n"
                      "output = json\n"
                      "\n"
                      "[profile dev]\n"
                      "region = eu-central-1\n"
                      "aws_access_key_id = AKIDCONFIG\n"
                      "[dev]\n"                  /* bare name in config: not a profile */
                      "region = wrong\n"
                      "[profile  \"with space\"]\n"
                      "region = ap-south-1\n";
    const char *cred = "[default]\n"
                       "aws_access_key_id = AKIDDEFAULT\n"
                       "aws_secret_access_key = secretdefault\n"
                       "[dev]\n"
                       "aws_access_key_id = AKIDCRED\n"
                       "region = from-credentials\n";
    struct s3f__aws_config *c = parse_ok(cfg, cred, NULL);
    CHECK_STR(s3f__aws_config_profile_name(c), "default");
    CHECK(s3f__aws_config_profile_found(c));
    CHECK_STR(s3f__aws_config_get(c, "region"), "us-west-2");
    CHECK_STR(s3f__aws_config_get(c, "aws_access_key_id"), "AKIDDEFAULT");
    CHECK_STR(s3f__aws_config_get(c, "AWS_Secret_Access_Key"), "secretdefault");
    CHECK(s3f__aws_config_get(c, "nope") == NULL);
    s3f__aws_config_free(c);

    c = parse_ok(cfg, cred, "dev");
    CHECK_STR(s3f__aws_config_profile_name(c), "dev");
    /* the credentials file wins for keys set in both */
    CHECK_STR(s3f__aws_config_get(c, "aws_access_key_id"), "AKIDCRED");
    CHECK_STR(s3f__aws_config_get(c, "region"), "from-credentials");
    s3f__aws_config_free(c);

    c = parse_ok(cfg, NULL, "with space");
    CHECK_STR(s3f__aws_config_get(c, "region"), "ap-south-1");
    s3f__aws_config_free(c);

    /* [profile default] and [default] are one profile; duplicate sections merge */
    c = parse_ok("[profile default]\nregion = a\n[default]\noutput = text\n"
                 "[profile default]\nregion = b\n",
                 NULL, NULL);
    CHECK_STR(s3f__aws_config_get(c, "region"), "b");
    CHECK_STR(s3f__aws_config_get(c, "output"), "text");
    s3f__aws_config_free(c);

    /* [profile x] in the credentials file is the profile named "profile x" */
    c = parse_ok(NULL, "[profile x]\naws_access_key_id = A\n", NULL);
    CHECK(!s3f__aws_config_profile_found(c));
    s3f__aws_config_free(c);
}

static void test_comments(void) {
    const char *cfg = "# a comment\n"
                      "; another\n"
                      "[default] # comment after a header\n"
                      "region = us-east-1 # inline\n"
                      "output = json ; inline too\n"
                      "keep = a#b;c\n"
                      "tabbed = v\t# after a tab\n"
                      "empty = # only a comment\n"
                      "  # an indented comment\n"
                      "url: http://host:9000/path\n"
                      "spaced   =    padded value   \n"
                      "CamelKey = Value\n";
    struct s3f__aws_config *c = parse_ok(cfg, NULL, NULL);
    CHECK_STR(s3f__aws_config_get(c, "region"), "us-east-1");
    CHECK_STR(s3f__aws_config_get(c, "output"), "json");
    CHECK_STR(s3f__aws_config_get(c, "keep"), "a#b;c");
    CHECK_STR(s3f__aws_config_get(c, "tabbed"), "v");
    CHECK_STR(s3f__aws_config_get(c, "empty"), "");
    CHECK_STR(s3f__aws_config_get(c, "url"), "http://host:9000/path");
    CHECK_STR(s3f__aws_config_get(c, "spaced"), "padded value");
    CHECK_STR(s3f__aws_config_get(c, "camelkey"), "Value");
    s3f__aws_config_free(c);

    /* CRLF line endings and a byte order mark */
    c = parse_ok("\xef\xbb\xbf[default]\r\nregion = eu-west-1\r\nother = x\r\n", NULL, NULL);
    CHECK_STR(s3f__aws_config_get(c, "region"), "eu-west-1");
    CHECK_STR(s3f__aws_config_get(c, "other"), "x");
    s3f__aws_config_free(c);
}

static void test_sub_properties(void) {
    const char *cfg = "[default]\n"
                      "  region = us-east-2\n"          /* indented, but no property yet */
                      "s3 =\n"
                      "  endpoint_url = http://127.0.0.1:7480 # rgw\n"
                      "  Addressing_Style = path\n"
                      "\n"
                      "  max_concurrent_requests = 20\n" /* blank lines keep it open */
                      "region2 = x\n"
                      "multi = first\n"
                      "  second\n"
                      "\tthird\n"
                      "endpoint_url = http://top\n"
                      "[profile indented]\n"
                      "  a = 1\n"
                      "  b = 2\n"                        /* same indent: a new property */
                      "    c = 3\n";                     /* deeper: continues b */
    struct s3f__aws_config *c = parse_ok(cfg, NULL, NULL);
    CHECK_STR(s3f__aws_config_get(c, "region"), "us-east-2");
    CHECK_STR(s3f__aws_config_get(c, "s3"), "");
    CHECK_STR(s3f__aws_config_get(c, "s3.endpoint_url"), "http://127.0.0.1:7480");
    CHECK_STR(s3f__aws_config_get(c, "s3.addressing_style"), "path");
    CHECK_STR(s3f__aws_config_get(c, "S3.Max_Concurrent_Requests"), "20");
    CHECK_STR(s3f__aws_config_get(c, "region2"), "x");
    CHECK_STR(s3f__aws_config_get(c, "multi"), "first\nsecond\nthird");
    CHECK_STR(s3f__aws_config_get(c, "endpoint_url"), "http://top");
    /* no services setting: service_get finds nothing, even with s3.endpoint_url present */
    CHECK(s3f__aws_config_service_get(c, "s3", "endpoint_url") == NULL);
    s3f__aws_config_free(c);

    c = parse_ok(cfg, NULL, "indented");
    CHECK_STR(s3f__aws_config_get(c, "a"), "1");
    CHECK_STR(s3f__aws_config_get(c, "b"), "2\nc = 3");
    s3f__aws_config_free(c);
}

static void test_services(void) {
    const char *cfg = "[profile rgw]\n"
                      "services = local-ceph\n"
                      "region = default\n"
                      "[services local-ceph]\n"
                      "s3 =\n"
                      "  endpoint_url = http://127.0.0.1:7480\n"
                      "sts =\n"
                      "  endpoint_url = http://127.0.0.1:7481\n"
                      "[services other]\n"
                      "s3 =\n"
                      "  endpoint_url = http://wrong\n"
                      "[sso-session corp]\n"
                      "sso_start_url = https://example.awsapps.com/start\n"
                      "[profile noservices]\n"
                      "services = missing\n";
    struct s3f__aws_config *c = parse_ok(cfg, NULL, "rgw");
    CHECK_STR(s3f__aws_config_get(c, "services"), "local-ceph");
    CHECK_STR(s3f__aws_config_service_get(c, "s3", "endpoint_url"), "http://127.0.0.1:7480");
    CHECK_STR(s3f__aws_config_service_get(c, "S3", "ENDPOINT_URL"), "http://127.0.0.1:7480");
    CHECK_STR(s3f__aws_config_service_get(c, "sts", "endpoint_url"), "http://127.0.0.1:7481");
    CHECK(s3f__aws_config_service_get(c, "dynamodb", "endpoint_url") == NULL);
    /* services sub-properties do not leak into the profile */
    CHECK(s3f__aws_config_get(c, "s3.endpoint_url") == NULL);
    CHECK(s3f__aws_config_get(c, "sso_start_url") == NULL);
    s3f__aws_config_free(c);

    c = parse_ok(cfg, NULL, "noservices");
    CHECK(s3f__aws_config_service_get(c, "s3", "endpoint_url") == NULL);
    s3f__aws_config_free(c);
    /* sso-session sections are not profiles */
    const char *msg = parse_fail(cfg, NULL, "corp");
    CHECK(strstr(msg, "profile 'corp' not found") != NULL);
}

static void test_malformed(void) {
    const char *msg;
    msg = parse_fail("[default]\nregion = x\nthis line is garbage\n", NULL, NULL);
    CHECK(strstr(msg, "config:3:") != NULL);
    msg = parse_fail("[default\nregion = x\n", NULL, NULL);
    CHECK(strstr(msg, "config:1:") != NULL);
    CHECK(strstr(msg, "']'") != NULL);
    msg = parse_fail("[default] junk\n", NULL, NULL);
    CHECK(strstr(msg, "config:1:") != NULL);
    msg = parse_fail("[]\n", NULL, NULL);
    CHECK(strstr(msg, "config:1:") != NULL);
    msg = parse_fail("# header comment\nregion = x\n[default]\n", NULL, NULL);
    CHECK(strstr(msg, "config:2: property outside of any section") != NULL);
    msg = parse_fail("[default]\n= value\n", NULL, NULL);
    CHECK(strstr(msg, "config:2:") != NULL);
    msg = parse_fail("[default]\ns3 =\n  endpoint_url\n", NULL, NULL);
    CHECK(strstr(msg, "config:3:") != NULL);
    CHECK(strstr(msg, "'s3'") != NULL);
    /* errors in the credentials file name it, and never echo the line (a secret) */
    msg = parse_fail("[default]\n", "[default]\naws_secret_access_key\nAKIDSECRETVALUE\n", NULL);
    CHECK(strstr(msg, "credentials:2:") != NULL);
    CHECK(strstr(msg, "AKIDSECRETVALUE") == NULL);
    CHECK(strstr(msg, "aws_secret_access_key") == NULL);
    /* a malformed line in another profile still fails the whole file, as botocore does */
    msg = parse_fail("[profile a]\nx = 1\n[profile b]\nbroken\n", NULL, "a");
    CHECK(strstr(msg, "config:4:") != NULL);
}

static void test_missing_profile(void) {
    const char *msg = parse_fail("[default]\nregion = x\n", "[default]\n", "nope");
    CHECK_STR(msg, "profile 'nope' not found in config or credentials");
    /* the default profile may be absent */
    struct s3f__aws_config *c = parse_ok("[profile other]\nregion = x\n", NULL, NULL);
    CHECK(!s3f__aws_config_profile_found(c));
    CHECK(s3f__aws_config_get(c, "region") == NULL);
    s3f__aws_config_free(c);
    /* no files at all */
    c = parse_ok(NULL, NULL, NULL);
    CHECK(!s3f__aws_config_profile_found(c));
    s3f__aws_config_free(c);
    msg = parse_fail(NULL, NULL, "x");
    CHECK(strstr(msg, "profile 'x' not found") != NULL);
    /* an empty section still counts as found */
    c = parse_ok("[profile empty]\n", NULL, "empty");
    CHECK(s3f__aws_config_profile_found(c));
    s3f__aws_config_free(c);
}

/* ---- files on disk ---------------------------------------------------------------------- */

static char tmpdir[256];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void clear_env(void) {
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_CONFIG_FILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static void test_load_files(void) {
    char home[512], aws[600], path[700];
    snprintf(home, sizeof(home), "%s/home", tmpdir);
    snprintf(aws, sizeof(aws), "%s/.aws", home);
    CHECK_INT(mkdir(home, 0700), 0);
    clear_env();
    setenv("HOME", home, 1);

    /* no ~/.aws at all: fine, empty default profile */
    struct s3f__aws_config *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_OK);
    CHECK(!s3f__aws_config_profile_found(c));
    CHECK_STR(s3f__aws_config_config_path(c), "~/.aws/config");
    CHECK_STR(s3f__aws_config_credentials_path(c), "~/.aws/credentials");
    s3f__aws_config_free(c);

    /* an explicit profile that is nowhere */
    CHECK_INT(s3f__aws_config_load("ghost", &c, &err), S3F_ERR_CONFIG);
    CHECK_STR(err.message, "profile 'ghost' not found in ~/.aws/config or ~/.aws/credentials");

    CHECK_INT(mkdir(aws, 0700), 0);
    snprintf(path, sizeof(path), "%s/config", aws);
    write_file(path, "[default]\nregion = eu-north-1\n[profile dev]\nregion = us-west-1\n");
    snprintf(path, sizeof(path), "%s/credentials", aws);
    write_file(path, "[dev]\naws_access_key_id = AKIDDEV\n");

    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_OK);
    CHECK_STR(s3f__aws_config_get(c, "region"), "eu-north-1");
    s3f__aws_config_free(c);

    /* AWS_PROFILE selects, and is explicit (must exist) */
    setenv("AWS_PROFILE", "dev", 1);
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_OK);
    CHECK_STR(s3f__aws_config_profile_name(c), "dev");
    CHECK_STR(s3f__aws_config_get(c, "region"), "us-west-1");
    CHECK_STR(s3f__aws_config_get(c, "aws_access_key_id"), "AKIDDEV");
    s3f__aws_config_free(c);
    /* an explicit argument beats AWS_PROFILE */
    CHECK_INT(s3f__aws_config_load("default", &c, &err), S3F_OK);
    CHECK_STR(s3f__aws_config_profile_name(c), "default");
    s3f__aws_config_free(c);
    setenv("AWS_PROFILE", "missing", 1);
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "profile 'missing' not found") != NULL);
    unsetenv("AWS_PROFILE");

    /* AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE with ~ */
    snprintf(path, sizeof(path), "%s/alt-config", home);
    write_file(path, "[profile alt]\nregion = sa-east-1\n");
    setenv("AWS_CONFIG_FILE", "~/alt-config", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "~/does-not-exist", 1);
    CHECK_INT(s3f__aws_config_load("alt", &c, &err), S3F_OK);
    CHECK_STR(s3f__aws_config_get(c, "region"), "sa-east-1");
    CHECK_STR(s3f__aws_config_config_path(c), "~/alt-config");
    s3f__aws_config_free(c);

    /* a malformed file names the file and line */
    write_file(path, "[profile alt]\nregion = sa-east-1\nbad line\n");
    CHECK_INT(s3f__aws_config_load("alt", &c, &err), S3F_ERR_CONFIG);
    CHECK_STR(err.message, "~/alt-config:3: expected '[section]', 'key = value' or a comment");
    CHECK_STR(err.resource, "~/alt-config");
    CHECK_STR(err.operation, "config");

    /* too large */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("[default]\n", f);
        for (size_t i = 0; i < S3F__AWS_CONFIG_MAX_FILE_BYTES / 10 + 1; i++)
            fputs("# padding\n", f);
        fclose(f);
    }
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "larger than") != NULL);

    /* a NUL byte */
    f = fopen(path, "w");
    if (f) {
        fwrite("[default]\nregion = a\0b\n", 1, 23, f);
        fclose(f);
    }
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "NUL") != NULL);

    /* a directory where the file should be */
    setenv("AWS_CONFIG_FILE", home, 1);
    CHECK_INT(s3f__aws_config_load(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "not a regular file") != NULL);
    clear_env();
}

static void test_expand_home(void) {
    setenv("HOME", "/home/someone", 1);
    char *p = s3f__expand_home("~/.aws/config");
    CHECK_STR(p, "/home/someone/.aws/config");
    free(p);
    p = s3f__expand_home("~");
    CHECK_STR(p, "/home/someone");
    free(p);
    p = s3f__expand_home("~other/x");
    CHECK_STR(p, "~other/x");
    free(p);
    p = s3f__expand_home("/abs/path");
    CHECK_STR(p, "/abs/path");
    free(p);
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "%s/s3f-profile-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_sections_and_precedence);
    RUN(test_comments);
    RUN(test_sub_properties);
    RUN(test_services);
    RUN(test_malformed);
    RUN(test_missing_profile);
    RUN(test_load_files);
    RUN(test_expand_home);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return test_summary();
}
