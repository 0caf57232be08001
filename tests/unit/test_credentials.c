/* The credentials providers and the default chain, against files in temporary directories,
 * small shell scripts (credential_process) and tests/servers/fake_aws.py, which plays STS,
 * the container endpoint and IMDSv2 on a local port. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/credentials.h"
#include "auth/credentials_internal.h"
#include "auth/json.h"
#include "core/core.h"
#include "testutil.h"

#define ROLE_ARN "arn:aws:iam::123456789012:role/s3flash-test"
#define WI_TOKEN "good-web-identity-token"
#define CONTAINER_AUTH "Bearer container-auth-token"

static char tmpdir[256];
static char empty_home[320];
static pid_t server_pid = -1;
static char server_url[64];
static int case_no;

/* ---- log and message capture (checked for secrets at the end) ---------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct s3f__buf log_text;

static void log_fn(void *ud, enum s3f_log_level level, const char *msg) {
    (void)ud;
    (void)level;
    pthread_mutex_lock(&log_lock);
    s3f__buf_appends(&log_text, msg);
    s3f__buf_appends(&log_text, "\n");
    pthread_mutex_unlock(&log_lock);
}

static struct s3f__logger test_logger = {log_fn, NULL, S3F_LOG_TRACE};

static void record_error(const struct s3f_error *err) {
    char line[1500];
    s3f_error_format(err, line, sizeof(line));
    log_fn(NULL, S3F_LOG_ERROR, line);
}

/* ---- environment and files ---------------------------------------------------------------- */

static const char *const env_vars[] = {
    "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "S3FLASH_CONTAINER_CREDENTIALS_HOST", "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
    "AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS", "AWS_CA_BUNDLE",
    "S3FLASH_TEST_CLOCK_OFFSET_S", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
    "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
};

/* A clean slate: nothing configured, HOME empty, IMDS disabled (so that no test waits on
 * 169.254.169.254 unless it means to). */
static void reset_env(void) {
    for (size_t i = 0; i < S3F_ARRAY_LEN(env_vars); i++)
        unsetenv(env_vars[i]);
    setenv("HOME", empty_home, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

/* A fresh directory for one case; returns its path (static buffer per call site is fine:
 * the caller copies). */
static void case_dir(char *out, size_t len) {
    snprintf(out, len, "%s/case%d", tmpdir, ++case_no);
    CHECK_INT(mkdir(out, 0700), 0);
}

static void write_file(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void iso_time(int64_t t, char out[32]) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* ---- the fake server ----------------------------------------------------------------------- */

static long ctl(const char *path, struct s3f__buf *body);

/* Ready when it printed its port (after it listens) and answered its control API. */
static bool server_start(void) {
    char script[4096];
    s3f__strlcpy(script, test_src_path("tests/servers/fake_aws.py"), sizeof(script));
    char *argv[] = {"python3", script, "--print-port", NULL};
    int pid;
    int port = test_spawn_port(argv, "port", 30000, &pid);
    if (port < 0)
        return false;
    server_pid = pid;
    snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%d", port);
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    long code = ctl("/_stats", &b);
    s3f__buf_cleanup(&b);
    if (code != 200) {
        fprintf(stderr, "fake_aws.py printed port %d but its /_stats answered %ld\n", port,
                code);
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
        return false;
    }
    return true;
}

static void server_stop(void) {
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
}

static size_t ctl_write(char *p, size_t s, size_t n, void *ud) {
    s3f__buf_append(ud, p, s * n);
    return s * n;
}

/* GET a control path of the server; returns the HTTP status and the body in *body. */
static long ctl(const char *path, struct s3f__buf *body) {
    char url[512];
    snprintf(url, sizeof(url), "%s%s", server_url, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ctl_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    return status;
}

static void server_config(const char *query) {
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    char path[512];
    snprintf(path, sizeof(path), "/_config?%s", query);
    CHECK_INT(ctl(path, &b), 200);
    s3f__buf_cleanup(&b);
}

static void server_reset(void) {
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    CHECK_INT(ctl("/_reset", &b), 200);
    s3f__buf_cleanup(&b);
}

static int64_t stat_of(const char *name) {
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    int64_t v = -1;
    if (ctl("/_stats", &b) == 200) {
        struct s3f__json_object o;
        if (s3f__json_parse_object(b.data, b.len, &o, NULL, 0) == S3F_OK) {
            s3f__json_get_int64(&o, name, &v);
            s3f__json_cleanup(&o);
        }
    }
    s3f__buf_cleanup(&b);
    return v;
}

#define NEED_SERVER()                                                                          \
    do {                                                                                       \
        if (server_pid <= 0) {                                                                 \
            printf("skip %s: fake_aws.py did not start (python3 missing?)\n", __func__);       \
            return;                                                                            \
        }                                                                                      \
        server_reset();                                                                        \
    } while (0)

/* ---- helpers around the API ----------------------------------------------------------------- */

static uint64_t current_generation(struct s3f__credentials_provider *p) {
    struct s3f__credentials_snapshot *s = NULL;
    struct s3f_error err;
    if (s3f__credentials_acquire(p, &s, &err))
        return 0;
    uint64_t g = s->generation;
    s3f__credentials_release(s);
    return g;
}

/* Until the refresher has completed n fetches (10 s at most): the state it reports, not a
 * guess at how long it takes. */
static bool wait_background(struct s3f__credentials_provider *p, uint64_t n) {
    for (int i = 0; i < 2000; i++) {
        if (s3f__credentials_provider_background_count(p) >= n)
            return true;
        s3f__sleep_ms(5);
    }
    return false;
}

static struct s3f__credentials_provider *make(const char *profile, uint32_t process_timeout_ms) {
    struct s3f__credentials_options o = {.profile = profile,
                                         .logger = &test_logger,
                                         .process_timeout_ms = process_timeout_ms};
    struct s3f__credentials_provider *p = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__credentials_provider_new_default(&o, &p, &err);
    CHECK_INT(st, S3F_OK);
    if (st) {
        fprintf(stderr, "  new_default: %s\n", err.message);
        record_error(&err);
    }
    return p;
}

/* Get credentials from a fresh default provider: returns the status; creds and err filled. */
static enum s3f_status get_once(const char *profile, struct s3f__credentials *c,
                                struct s3f_error *err) {
    struct s3f__credentials_provider *p = make(profile, 0);
    s3f_error_clear(err);
    enum s3f_status st = p ? s3f__credentials_get(p, c, err) : S3F_ERR_INTERNAL;
    if (st)
        record_error(err);
    s3f__credentials_provider_free(p);
    return st;
}

static bool starts_with(const char *s, const char *prefix) {
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- cases ---------------------------------------------------------------------------------- */

static void test_static(void) {
    struct s3f__credentials_provider *p = NULL;
    struct s3f_error err;
    CHECK_INT(s3f__credentials_provider_new_static("AKIDSTATIC", "staticsecret", NULL, &p, &err),
              S3F_OK);
    struct s3f__credentials c;
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDSTATIC");
    CHECK_STR(c.secret_access_key, "staticsecret");
    CHECK(c.session_token == NULL);
    CHECK_INT(c.expiration, 0);
    CHECK_STR(c.source, "static");
    s3f__credentials_cleanup(&c);
    CHECK(c.access_key_id == NULL && c.secret_access_key == NULL && c.source[0] == '\0');
    s3f__credentials_cleanup(&c); /* twice is fine */
    CHECK_INT(s3f__credentials_provider_fetch_count(p), 0);
    s3f__credentials_provider_free(p);

    CHECK_INT(s3f__credentials_provider_new_static("AKID", "s", "tok", &p, &err), S3F_OK);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.session_token, "tok");
    s3f__credentials_cleanup(&c);
    s3f__credentials_provider_free(p);

    CHECK_INT(s3f__credentials_provider_new_static("", "s", NULL, &p, &err),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_INT(s3f__credentials_provider_new_static("AKID", NULL, NULL, &p, &err),
              S3F_ERR_INVALID_ARGUMENT);
    s3f__credentials_provider_free(NULL);
    s3f__credentials_cleanup(NULL);
}

static void test_env(void) {
    reset_env();
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    struct s3f__credentials c;
    struct s3f_error err;
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDENV");
    CHECK_STR(c.secret_access_key, "envsecret");
    CHECK_STR(c.session_token, "envtoken");
    CHECK_STR(c.source, "environment");
    CHECK_INT(c.expiration, 0);
    s3f__credentials_cleanup(&c);

    unsetenv("AWS_SESSION_TOKEN");
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK(c.session_token == NULL);
    s3f__credentials_cleanup(&c);

    /* a key id without its secret is an error that names the missing variable */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "AWS_SECRET_ACCESS_KEY") != NULL);
    CHECK(c.access_key_id == NULL);
    /* an empty key id counts as unset */
    setenv("AWS_ACCESS_KEY_ID", "", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
}

static void test_profile_keys(void) {
    reset_env();
    char dir[400], cfg[500], cred[500];
    case_dir(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    snprintf(cred, sizeof(cred), "%s/credentials", dir);
    write_file(cred,
               "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = defsecret\n"
               "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = devsecret\n"
               "aws_session_token = devtoken\n"
               "[partial]\naws_access_key_id = AKIDPARTIAL\n",
               0600);
    write_file(cfg,
               "[profile cfg]\naws_access_key_id = AKIDCFG\naws_secret_access_key = cfgsecret\n"
               "[profile partial]\nregion = us-east-1\n",
               0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    struct s3f__credentials c;
    struct s3f_error err;

    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDDEFAULT");
    CHECK_STR(c.secret_access_key, "defsecret");
    CHECK_STR(c.source, "profile:default");
    s3f__credentials_cleanup(&c);

    setenv("AWS_PROFILE", "dev", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDDEV");
    CHECK_STR(c.session_token, "devtoken");
    CHECK_STR(c.source, "profile:dev");
    s3f__credentials_cleanup(&c);

    /* an explicit profile beats AWS_PROFILE; keys may live in the config file */
    CHECK_INT(get_once("cfg", &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDCFG");
    CHECK_STR(c.source, "profile:cfg");
    s3f__credentials_cleanup(&c);

    CHECK_INT(get_once("partial", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "aws_secret_access_key") != NULL);
    CHECK(strstr(err.message, "partial") != NULL);

    /* a named profile that exists nowhere fails at creation */
    struct s3f__credentials_options o = {.profile = "ghost"};
    struct s3f__credentials_provider *p = NULL;
    CHECK_INT(s3f__credentials_provider_new_default(&o, &p, &err), S3F_ERR_CONFIG);
    CHECK(p == NULL);
    CHECK(strstr(err.message, "profile 'ghost' not found") != NULL);

    /* a loaded config may be passed in, and freed before the provider is used */
    struct s3f__aws_config *config = NULL;
    CHECK_INT(s3f__aws_config_load("dev", &config, &err), S3F_OK);
    o = (struct s3f__credentials_options){.config = config, .profile = "ignored"};
    CHECK_INT(s3f__credentials_provider_new_default(&o, &p, &err), S3F_OK);
    s3f__aws_config_free(config);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.source, "profile:dev");
    s3f__credentials_cleanup(&c);
    /* static credentials are fetched once */
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);
    CHECK_INT(s3f__credentials_provider_fetch_count(p), 1);
    s3f__credentials_provider_free(p);
}

static void test_process(void) {
    reset_env();
    char dir[400], cfg[500], path[600], script[1200], future[32];
    case_dir(dir, sizeof(dir));
    iso_time(time(NULL) + 3600, future);
    struct {
        const char *name;
        const char *body;
    } scripts[] = {
        {"good", NULL}, /* written below, with the expiration */
        {"noexp", "echo '{\"Version\":1,\"AccessKeyId\":\"AKIDNOEXP\",\"SecretAccessKey\":\"procsecret\"}'\n"},
        {"fail", "echo 'boom: the vault is locked' >&2\necho 'second line' >&2\nexit 3\n"},
        {"badjson", "echo '{\"Version\": 1, \"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"procsecret\"'\n"},
        {"v2", "echo '{\"Version\": 2, \"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"procsecret\"}'\n"},
        {"noakid", "echo '{\"Version\": 1, \"SecretAccessKey\": \"procsecret\"}'\n"},
        {"expired", "echo '{\"Version\": 1, \"AccessKeyId\": \"AKID\", \"SecretAccessKey\": "
                    "\"procsecret\", \"Expiration\": \"2001-02-03T04:05:06Z\"}'\n"},
        {"slow", "sleep 10\n"},
        {"signal", "kill -9 $$\n"},
        {"huge", "yes aaaaaaaaaaaaaaa | head -c 100000\n"},
        {"badexp", "echo '{\"Version\": 1, \"AccessKeyId\": \"AKID\", \"SecretAccessKey\": "
                   "\"procsecret\", \"Expiration\": \"tomorrow\"}'\n"},
    };
    struct s3f__buf config;
    s3f__buf_init(&config, 0);
    for (size_t i = 0; i < S3F_ARRAY_LEN(scripts); i++) {
        snprintf(path, sizeof(path), "%s/%s.sh", dir, scripts[i].name);
        if (i == 0)
            snprintf(script, sizeof(script),
                     "printf '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", "
                     "\"SecretAccessKey\": \"procsecret\", \"SessionToken\": \"proctoken\", "
                     "\"Expiration\": \"%s\"}'\n",
                     future);
        else
            s3f__strlcpy(script, scripts[i].body, sizeof(script));
        write_file(path, script, 0700);
        s3f__buf_appendf(&config, "[profile %s]\ncredential_process = /bin/sh %s --flag\n",
                         scripts[i].name, path);
    }
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    write_file(cfg, config.data, 0600);
    s3f__buf_cleanup(&config);
    setenv("AWS_CONFIG_FILE", cfg, 1);

    struct s3f__credentials c;
    struct s3f_error err;
    CHECK_INT(get_once("good", &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDPROC");
    CHECK_STR(c.secret_access_key, "procsecret");
    CHECK_STR(c.session_token, "proctoken");
    CHECK_STR(c.source, "process");
    int64_t want = 0;
    s3f__time_parse(future, &want);
    CHECK_INT(c.expiration, want);
    s3f__credentials_cleanup(&c);

    CHECK_INT(get_once("noexp", &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, "AKIDNOEXP");
    CHECK(c.session_token == NULL);
    CHECK_INT(c.expiration, 0);
    s3f__credentials_cleanup(&c);

    CHECK_INT(get_once("fail", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_STR(err.message, "credential_process exited with status 3: boom: the vault is locked");

    CHECK_INT(get_once("badjson", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "not a JSON object") != NULL);
    CHECK(strstr(err.message, "procsecret") == NULL);

    CHECK_INT(get_once("v2", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "Version must be 1") != NULL);

    CHECK_INT(get_once("noakid", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "AccessKeyId") != NULL);

    CHECK_INT(get_once("expired", &c, &err), S3F_ERR_EXPIRED_CREDENTIALS);
    CHECK(strstr(err.message, "2001-02-03T04:05:06Z") != NULL);
    CHECK(c.access_key_id == NULL);

    CHECK_INT(get_once("badexp", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "Expiration") != NULL);

    CHECK_INT(get_once("signal", &c, &err), S3F_ERR_CREDENTIALS);
    /* the inner shell dies of SIGKILL; /bin/sh -c reports it as 137 or passes the signal */
    CHECK(strstr(err.message, "signal 9") != NULL || strstr(err.message, "status 137") != NULL);

    CHECK_INT(get_once("huge", &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "larger than") != NULL);

    /* a hung process is killed at the timeout */
    struct s3f__credentials_provider *p = make("slow", 300);
    uint64_t t0 = s3f__now_ms();
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_ERR_CREDENTIALS);
    uint64_t took = s3f__now_ms() - t0;
    CHECK(took >= 300 && took < 3000);
    CHECK(strstr(err.message, "timed out after 300 ms") != NULL);
    s3f__credentials_provider_free(p);
}

static void write_token(const char *path, const char *token) {
    char text[256];
    snprintf(text, sizeof(text), "%s\n", token);
    write_file(path, text, 0600);
}

static void test_web_identity(void) {
    NEED_SERVER();
    reset_env();
    char dir[400], tok[500], cfg[500];
    case_dir(dir, sizeof(dir));
    snprintf(tok, sizeof(tok), "%s/token", dir);
    write_token(tok, WI_TOKEN);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tok, 1);
    setenv("AWS_ROLE_ARN", ROLE_ARN, 1);
    setenv("AWS_ROLE_SESSION_NAME", "unit-test", 1);
    setenv("AWS_ENDPOINT_URL_STS", server_url, 1);
    struct s3f__credentials c;
    struct s3f_error err;

    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK(starts_with(c.access_key_id, "ASIASTS"));
    CHECK(starts_with(c.secret_access_key, "secret-sts-"));
    CHECK(starts_with(c.session_token, "token-sts-"));
    CHECK_STR(c.source, "web-identity");
    int64_t now = s3f__wall_time_s();
    CHECK(c.expiration > now + 3500 && c.expiration < now + 3700);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("sts"), 1);

    /* no session name: a generated one (the server requires one) */
    unsetenv("AWS_ROLE_SESSION_NAME");
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);

    /* a rejected token: STS's error document lands in err */
    write_token(tok, "forged-token-value");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_STR(err.code, "InvalidIdentityToken");
    CHECK_INT(err.http_status, 400);
    CHECK_STR(err.request_id, "fake-request-id-0001");
    CHECK_STR(err.operation, "AssumeRoleWithWebIdentity");
    CHECK(strstr(err.message, "The web identity token is not valid") != NULL);
    CHECK(strstr(err.message, "forged-token-value") == NULL);
    CHECK_INT(stat_of("sts_rejected"), 1); /* not retried */
    write_token(tok, WI_TOKEN);

    setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/other", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_STR(err.code, "AccessDenied");
    CHECK_INT(err.http_status, 403);
    setenv("AWS_ROLE_ARN", ROLE_ARN, 1);

    server_config("sts_status=400&sts_code=ExpiredTokenException");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_EXPIRED_CREDENTIALS);
    CHECK_STR(err.code, "ExpiredTokenException");

    /* 5xx is retried (3 attempts), then reported */
    server_reset();
    server_config("sts_status=503&sts_code=ServiceUnavailable");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_INT(err.http_status, 503);
    CHECK_INT(stat_of("sts_rejected"), 3);
    server_reset();

    /* a token file that is not there */
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/missing-token", dir);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", missing, 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "missing-token") != NULL);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tok, 1);

    /* a token file without a role */
    unsetenv("AWS_ROLE_ARN");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "AWS_ROLE_ARN") != NULL);

    /* STS unreachable: configured, so an error rather than a skip */
    setenv("AWS_ROLE_ARN", ROLE_ARN, 1);
    char closed[64];
    snprintf(closed, sizeof(closed), "http://127.0.0.1:%d", closed_port());
    setenv("AWS_ENDPOINT_URL_STS", closed, 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "connect failed") != NULL);

    /* everything from the profile, with the STS endpoint in a services section */
    reset_env();
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    char text[1500];
    snprintf(text, sizeof(text),
             "[profile wi]\nweb_identity_token_file = %s\nrole_arn = %s\n"
             "role_session_name = from-profile\nservices = fake\n"
             "[services fake]\nsts =\n  endpoint_url = %s\n",
             tok, ROLE_ARN, server_url);
    write_file(cfg, text, 0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    server_reset();
    CHECK_INT(get_once("wi", &c, &err), S3F_OK);
    CHECK_STR(c.source, "web-identity");
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("sts"), 1);
}

static void test_container(void) {
    NEED_SERVER();
    reset_env();
    char dir[400], tokfile[500], full[200];
    case_dir(dir, sizeof(dir));
    snprintf(tokfile, sizeof(tokfile), "%s/auth", dir);
    setenv("S3FLASH_CONTAINER_CREDENTIALS_HOST", server_url, 1);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/container/v2/credentials/abc", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", CONTAINER_AUTH, 1);
    struct s3f__credentials c;
    struct s3f_error err;

    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK(starts_with(c.access_key_id, "ASIACONTAINER"));
    CHECK(starts_with(c.session_token, "token-container-"));
    CHECK_STR(c.source, "container");
    CHECK(c.expiration > s3f__wall_time_s() + 3500);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("container"), 1);

    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer wrong", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_INT(err.http_status, 401);
    CHECK_STR(err.code, "AccessDenied");
    CHECK(strstr(err.message, "invalid authorization token") != NULL);
    CHECK(strstr(err.message, "wrong") == NULL);
    CHECK_INT(stat_of("container_rejected"), 1);

    /* the full URI, with the token from a file (which beats the variable) */
    unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    snprintf(full, sizeof(full), "%s/container/full", server_url);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", full, 1);
    write_token(tokfile, CONTAINER_AUTH);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokfile, 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "container");
    s3f__credentials_cleanup(&c);

    /* the token file is read at each fetch (a rejected snapshot forces one) */
    server_config("expiration_s=3600");
    struct s3f__credentials_provider *p = make(NULL, 0);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);
    write_token(tokfile, "Bearer rotated-but-wrong");
    s3f__credentials_invalidate(p, current_generation(p));
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_INT(err.http_status, 401);
    write_token(tokfile, CONTAINER_AUTH);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);
    CHECK_INT(s3f__credentials_provider_fetch_count(p), 3);
    s3f__credentials_provider_free(p);

    /* a background refresh that fails keeps the current credentials in use (and logs a
     * warning); the refresher tries again later */
    server_config("expiration_s=200");
    p = make(NULL, 0);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    char first[64];
    s3f__strlcpy(first, c.access_key_id, sizeof(first));
    s3f__credentials_cleanup(&c);
    write_token(tokfile, "Bearer wrong-again");
    s3f__credentials_refresh_now(p);
    CHECK(wait_background(p, 1));
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, first);
    s3f__credentials_cleanup(&c);
    CHECK_INT(s3f__credentials_provider_fetch_count(p), 2);
    pthread_mutex_lock(&log_lock);
    CHECK(strstr(log_text.data, "background refresh failed") != NULL);
    CHECK(strstr(log_text.data, "wrong-again") == NULL);
    pthread_mutex_unlock(&log_lock);
    s3f__credentials_provider_free(p);
    write_token(tokfile, CONTAINER_AUTH);

    /* plain http only to loopback and the ECS/EKS addresses */
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.169.254/creds", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "169.254.169.254") != NULL);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CONFIG);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "ftp://127.0.0.1/creds", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CONFIG);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "not a url", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CONFIG);

    /* the endpoint unreachable: an error, not a skip */
    unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/container/x", 1);
    char closed[64];
    snprintf(closed, sizeof(closed), "http://127.0.0.1:%d", closed_port());
    setenv("S3FLASH_CONTAINER_CREDENTIALS_HOST", closed, 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "connect failed") != NULL);
}

static void test_imds(void) {
    NEED_SERVER();
    reset_env();
    unsetenv("AWS_EC2_METADATA_DISABLED");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server_url, 1);
    struct s3f__credentials c;
    struct s3f_error err;

    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK(starts_with(c.access_key_id, "ASIAIMDS"));
    CHECK(starts_with(c.secret_access_key, "secret-imds-"));
    CHECK(starts_with(c.session_token, "token-imds-"));
    CHECK_STR(c.source, "imds");
    CHECK(c.expiration > s3f__wall_time_s() + 3500);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_token"), 1);
    CHECK_INT(stat_of("imds_role"), 1);
    CHECK_INT(stat_of("imds_creds"), 1);
    CHECK_INT(stat_of("imds_unauthorized"), 0);

    /* the token PUT fails: no IMDSv1 fallback (no GET without a token) */
    server_reset();
    server_config("imds_token_status=403");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
    CHECK(strstr(err.message, "imds (token request: HTTP 403)") != NULL);
    CHECK_INT(stat_of("imds_token"), 1);
    CHECK_INT(stat_of("imds_unauthorized"), 0);
    CHECK_INT(stat_of("imds_role"), 0);
    CHECK_INT(stat_of("imds_creds"), 0);

    /* no role attached */
    server_reset();
    server_config("imds_role=");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
    CHECK(strstr(err.message, "imds (no IAM role attached to the instance)") != NULL);

    /* a role name that is not an IAM name is refused, not pasted into a URL */
    server_reset();
    server_config("imds_role=..%2F..%2Fdynamic");
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK(strstr(err.message, "invalid IAM role name") != NULL);
    CHECK_INT(stat_of("imds_creds") + stat_of("other"), 0);

    /* disabled: not even asked */
    server_reset();
    setenv("AWS_EC2_METADATA_DISABLED", "TRUE", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
    CHECK(strstr(err.message, "imds (disabled by AWS_EC2_METADATA_DISABLED)") != NULL);
    CHECK_INT(stat_of("imds_token"), 0);

    /* the endpoint from the profile */
    unsetenv("AWS_EC2_METADATA_DISABLED");
    unsetenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    char dir[400], cfg[500], text[300];
    case_dir(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    snprintf(text, sizeof(text), "[default]\nec2_metadata_service_endpoint = %s/\n", server_url);
    write_file(cfg, text, 0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "imds");
    s3f__credentials_cleanup(&c);
}

static void test_refresh(void) {
    NEED_SERVER();
    reset_env();
    unsetenv("AWS_EC2_METADATA_DISABLED");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server_url, 1);
    server_config("expiration_s=60");
    struct s3f__credentials c;
    struct s3f_error err;
    char a1[64] = "", a2[64] = "", a3[64] = "";
    struct s3f__credentials_provider *p = make(NULL, 0);

    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__strlcpy(a1, c.access_key_id, sizeof(a1));
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_creds"), 1);
    /* less than 5 minutes left, but still usable: a get never fetches, the refresher does
     * (at half the lifetime; here asked to go now) */
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, a1);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_creds"), 1);
    s3f__credentials_refresh_now(p);
    CHECK(wait_background(p, 1));
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__strlcpy(a2, c.access_key_id, sizeof(a2));
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_creds"), 2);
    CHECK(strcmp(a1, a2) != 0);

    server_config("expiration_s=3600");
    s3f__credentials_refresh_now(p);
    CHECK(wait_background(p, 2));
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__strlcpy(a3, c.access_key_id, sizeof(a3));
    s3f__credentials_cleanup(&c);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK_STR(c.access_key_id, a3);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_creds"), 3);
    CHECK_INT(s3f__credentials_provider_fetch_count(p), 3);

    /* time passes (the test clock): 10 s left of 3600, no longer usable -> the get fetches
     * (or waits for the refresher's fetch) */
    setenv("S3FLASH_TEST_CLOCK_OFFSET_S", "3590", 1);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK(strcmp(c.access_key_id, a3) != 0);
    s3f__credentials_cleanup(&c);
    CHECK(stat_of("imds_creds") >= 4);
    unsetenv("S3FLASH_TEST_CLOCK_OFFSET_S");
    s3f__credentials_provider_free(p);
    /* each change of the refresher's state is made by one function, which logs it at TRACE:
     * started, asked by refresh_now, asked by a request without usable credentials (the
     * clock offset above), the order taken, stopped by _free */
    pthread_mutex_lock(&log_lock);
    static const char *const transitions[] = {
        "credentials: refresher none -> running",
        "credentials: refresher order none -> refresh",
        "credentials: refresher order refresh -> none",
        "credentials: refresher order none -> demand",
        "credentials: refresher order demand -> none",
        "credentials: refresher running -> stopping",
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(transitions); i++) {
        if (!log_text.data || !strstr(log_text.data, transitions[i]))
            fprintf(stderr, "not logged: %s\n", transitions[i]);
        CHECK(log_text.data && strstr(log_text.data, transitions[i]));
    }
    pthread_mutex_unlock(&log_lock);

    /* the signing key is derived once per (date, region, service) of a snapshot */
    server_reset();
    server_config("expiration_s=3600");
    p = make(NULL, 0);
    struct s3f__credentials_snapshot *snap;
    CHECK_INT(s3f__credentials_acquire(p, &snap, &err), S3F_OK);
    uint8_t k1[32], k2[32], k3[32];
    CHECK_INT(s3f__credentials_signing_key(snap, "20261203", "us-east-1", "s3", k1, &err), S3F_OK);
    CHECK_INT(s3f__credentials_signing_key(snap, "20261203", "us-east-1", "s3", k2, &err), S3F_OK);
    CHECK_INT(s3f__credentials_signing_key(snap, "20261204", "us-east-1", "s3", k3, &err), S3F_OK);
    CHECK(memcmp(k1, k2, 32) == 0 && memcmp(k1, k3, 32) != 0);
    uint8_t direct[32];
    CHECK_INT(s3f__sigv4_derive_key(snap->creds.secret_access_key, "20261203", "us-east-1", "s3",
                                    direct, &err), S3F_OK);
    CHECK(memcmp(k1, direct, 32) == 0);
    CHECK_INT((int)snap->key_derivations, 2);
    CHECK_INT((int)snap->key_hits, 1);
    s3f__credentials_release(snap);
    s3f__credentials_provider_free(p);

    /* while the refresher fetches (the server takes 1.5 s), requests keep the current
     * credentials without waiting */
    server_reset();
    server_config("expiration_s=60");
    p = make(NULL, 0);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__strlcpy(a1, c.access_key_id, sizeof(a1));
    s3f__credentials_cleanup(&c);
    server_config("expiration_s=60&delay_ms=1500");
    s3f__credentials_refresh_now(p);
    for (int i = 0; i < 200 && stat_of("imds_token") < 2; i++)
        s3f__sleep_ms(5); /* the refresher has started its fetch */
    uint64_t t0 = s3f__now_ms();
    for (int i = 0; i < 100; i++) {
        CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
        CHECK_STR(c.access_key_id, a1);
        s3f__credentials_cleanup(&c);
    }
    CHECK(s3f__now_ms() - t0 < 500);
    CHECK(wait_background(p, 1));
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    CHECK(strcmp(c.access_key_id, a1) != 0);
    s3f__credentials_cleanup(&c);
    s3f__credentials_provider_free(p);

    /* a shorter refresh window (an options field) */
    server_reset();
    server_config("expiration_s=60");
    struct s3f__credentials_options o = {.logger = &test_logger, .refresh_window_s = 30};
    CHECK_INT(s3f__credentials_provider_new_default(&o, &p, &err), S3F_OK);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_creds"), 1);
    s3f__credentials_provider_free(p);
}

#define N_THREADS 8

struct thread_arg {
    struct s3f__credentials_provider *p;
    pthread_barrier_t *barrier;
    enum s3f_status st;
    char akid[64];
};

static void *getter(void *v) {
    struct thread_arg *a = v;
    pthread_barrier_wait(a->barrier);
    struct s3f__credentials c;
    struct s3f_error err;
    a->st = s3f__credentials_get(a->p, &c, &err);
    if (a->st == S3F_OK)
        s3f__strlcpy(a->akid, c.access_key_id, sizeof(a->akid));
    s3f__credentials_cleanup(&c);
    return NULL;
}

/* 8 threads ask at once: with no usable credentials (rejected by the server), exactly one
 * fetch that all of them wait for; with usable ones, no fetch at all. */
static void run_threads(bool rejected) {
    server_reset();
    server_config("expiration_s=3600&delay_ms=0");
    struct s3f__credentials_provider *p = make(NULL, 0);
    struct s3f__credentials c;
    struct s3f_error err;
    CHECK_INT(s3f__credentials_get(p, &c, &err), S3F_OK);
    char old[64] = "";
    s3f__strlcpy(old, c.access_key_id, sizeof(old));
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("container"), 1);

    server_config("expiration_s=3600&delay_ms=300");
    if (rejected)
        s3f__credentials_invalidate(p, current_generation(p));
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, N_THREADS);
    pthread_t th[N_THREADS];
    struct thread_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (struct thread_arg){.p = p, .barrier = &barrier, .st = S3F_ERR_INTERNAL};
        pthread_create(&th[i], NULL, getter, &args[i]);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    CHECK_INT(stat_of("container"), rejected ? 2 : 1);
    CHECK_INT(s3f__credentials_provider_fetch_count(p), rejected ? 2 : 1);
    int n_new = 0;
    for (int i = 0; i < N_THREADS; i++) {
        CHECK_INT(args[i].st, S3F_OK);
        CHECK(starts_with(args[i].akid, "ASIACONTAINER"));
        n_new += strcmp(args[i].akid, old) != 0;
    }
    CHECK_INT(n_new, rejected ? N_THREADS : 0);
    s3f__credentials_provider_free(p);
}

static void test_threads(void) {
    NEED_SERVER();
    reset_env();
    setenv("S3FLASH_CONTAINER_CREDENTIALS_HOST", server_url, 1);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/container/threads", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", CONTAINER_AUTH, 1);
    run_threads(true);
    run_threads(false);
}

static void test_chain_order(void) {
    NEED_SERVER();
    reset_env();
    char dir[400], cfg[500], cred[500], tok[500], script[500], text[1500];
    case_dir(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    snprintf(cred, sizeof(cred), "%s/credentials", dir);
    snprintf(tok, sizeof(tok), "%s/token", dir);
    snprintf(script, sizeof(script), "%s/proc.sh", dir);
    write_token(tok, WI_TOKEN);
    write_file(script,
               "echo '{\"Version\":1,\"AccessKeyId\":\"AKIDPROC\",\"SecretAccessKey\":\"procsecret\"}'\n",
               0700);
    write_file(cred, "[default]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profsecret\n",
               0600);
    snprintf(text, sizeof(text), "[default]\ncredential_process = /bin/sh %s\n", script);
    write_file(cfg, text, 0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tok, 1);
    setenv("AWS_ROLE_ARN", ROLE_ARN, 1);
    setenv("AWS_ENDPOINT_URL_STS", server_url, 1);
    setenv("S3FLASH_CONTAINER_CREDENTIALS_HOST", server_url, 1);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/container/chain", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", CONTAINER_AUTH, 1);
    unsetenv("AWS_EC2_METADATA_DISABLED");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server_url, 1);
    struct s3f__credentials c;
    struct s3f_error err;

    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "environment");
    s3f__credentials_cleanup(&c);

    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "profile:default");
    s3f__credentials_cleanup(&c);

    write_file(cred, "[default]\nregion = us-east-1\n", 0600);
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "process");
    CHECK_STR(c.access_key_id, "AKIDPROC");
    s3f__credentials_cleanup(&c);
    /* nothing lower in the chain was asked */
    CHECK_INT(stat_of("sts") + stat_of("container") + stat_of("imds_token"), 0);

    write_file(cfg, "[default]\nregion = us-east-1\n", 0600);
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "web-identity");
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("container") + stat_of("imds_token"), 0);

    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "container");
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("imds_token"), 0);

    unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    CHECK_INT(get_once(NULL, &c, &err), S3F_OK);
    CHECK_STR(c.source, "imds");
    s3f__credentials_cleanup(&c);
    CHECK_INT(stat_of("sts"), 1);
    CHECK_INT(stat_of("container"), 1);
    CHECK_INT(stat_of("imds_creds"), 1);

    /* a configured provider that fails stops the chain (no fallback to IMDS) */
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/container/chain", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer wrong", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_CREDENTIALS);
    CHECK_INT(stat_of("imds_token"), 1);
}

static void test_unsupported(void) {
    reset_env();
    char dir[400], cfg[500];
    case_dir(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    write_file(cfg,
               "[profile assume]\nrole_arn = " ROLE_ARN "\nsource_profile = default\n"
               "[profile sso]\nsso_session = corp\nsso_account_id = 1\n"
               "[sso-session corp]\nsso_start_url = https://example.awsapps.com/start\n",
               0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    struct s3f__credentials c;
    struct s3f_error err;
    CHECK_INT(get_once("assume", &c, &err), S3F_ERR_UNSUPPORTED);
    CHECK(strstr(err.message, "source_profile") != NULL);
    CHECK_INT(get_once("sso", &c, &err), S3F_ERR_UNSUPPORTED);
    CHECK(strstr(err.message, "SSO") != NULL);
    /* the environment still comes first */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    CHECK_INT(get_once("assume", &c, &err), S3F_OK);
    CHECK_STR(c.source, "environment");
    s3f__credentials_cleanup(&c);
}

static void test_no_credentials(void) {
    reset_env();
    unsetenv("AWS_EC2_METADATA_DISABLED");
    char closed[64];
    snprintf(closed, sizeof(closed), "http://127.0.0.1:%d", closed_port());
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed, 1);
    struct s3f__credentials c;
    struct s3f_error err;
    uint64_t t0 = s3f__now_ms();
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
    CHECK(s3f__now_ms() - t0 < 3000);
    CHECK_STR(err.message,
              "no credentials: environment (AWS_ACCESS_KEY_ID unset), profile 'default' (not in "
              "~/.aws/credentials or ~/.aws/config), credential_process (not set), web identity "
              "(AWS_WEB_IDENTITY_TOKEN_FILE unset), container "
              "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset), imds (connect "
              "failed)");
    CHECK_STR(err.operation, "credentials");
    CHECK(c.access_key_id == NULL);

    /* a profile without keys says so */
    char dir[400], cfg[500];
    case_dir(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    write_file(cfg, "[default]\nregion = eu-west-3\n", 0600);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    CHECK_INT(get_once(NULL, &c, &err), S3F_ERR_NO_CREDENTIALS);
    char want[1200];
    snprintf(want, sizeof(want), "profile 'default' (no keys in ~/.aws/credentials or %s)", cfg);
    CHECK(strstr(err.message, want) != NULL);
    CHECK(strstr(err.message, "imds (disabled by AWS_EC2_METADATA_DISABLED)") != NULL);
}

/* Nothing secret reached a log line or an error message in any case above. */
static void test_no_secrets_logged(void) {
    static const char *const secrets[] = {
        "secret-sts-", "secret-container-", "secret-imds-", "token-sts-", "token-container-",
        "token-imds-", WI_TOKEN, "container-auth-token", "imds-token-", "procsecret",
        "proctoken", "envsecret", "envtoken", "defsecret", "devsecret", "devtoken",
        "forged-token-value", "rotated-but-wrong", "staticsecret",
    };
    pthread_mutex_lock(&log_lock);
    const char *text = log_text.data ? log_text.data : "";
    CHECK(strstr(text, "credentials: GET") != NULL || server_pid <= 0); /* logging worked */
    for (size_t i = 0; i < S3F_ARRAY_LEN(secrets); i++) {
        bool found = strstr(text, secrets[i]) != NULL;
        if (found)
            test_fail(__FILE__, __LINE__, "secret #%zu in the log", i);
        else
            test_checks_passed++;
    }
    pthread_mutex_unlock(&log_lock);
}

/* Issue 28, D5: what a credentials source answers is refused when a string that goes into a
 * header is empty or has a control character, or the Expiration is at the epoch (which
 * reads as "never expires"): the JSON sources (process, container, IMDS) and the STS /
 * CreateSession documents share the check. */
static void test_refused_answers(void) {
    static const struct {
        const char *json;
        const char *why; /* NULL: accepted */
    } docs[] = {
        {"{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"s\", \"Token\": \"t\", "
         "\"Expiration\": \"2099-01-01T00:00:00Z\"}", NULL},
        {"{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"s\"}", NULL},
        {"{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"s\", \"Token\": \"t\", "
         "\"Expiration\": \"1970-01-01T00:00:00Z\"}", "before 1970"},
        {"{\"AccessKeyId\": \"AK\\nID\", \"SecretAccessKey\": \"s\"}",
         "AccessKeyId has a control character"},
        {"{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"s\\u007f\"}",
         "SecretAccessKey has a control character"},
        {"{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"s\", \"Token\": \"t\\r\\nX: y\"}",
         "SessionToken has a control character"},
        {"{\"AccessKeyId\": \"\", \"SecretAccessKey\": \"s\"}", "no AccessKeyId"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(docs); i++) {
        struct s3f__json_object o;
        char msg[128];
        CHECK_INT(s3f__json_parse_object(docs[i].json, strlen(docs[i].json), &o, msg,
                                         sizeof(msg)), S3F_OK);
        struct s3f__credentials c;
        struct s3f_error err;
        s3f_error_clear(&err);
        enum s3f_status st = s3f__credentials_from_json(&o, "Token", "container", "container",
                                                        &c, &err);
        if (!docs[i].why) {
            CHECK_INT(st, S3F_OK);
            s3f__credentials_cleanup(&c);
        } else {
            CHECK_INT(st, S3F_ERR_CREDENTIALS);
            CHECK(strstr(err.message, docs[i].why) != NULL);
            CHECK(c.access_key_id == NULL);
        }
        s3f__json_cleanup(&o);
    }
    /* the STS / CreateSession document: the token is required there */
    static const char *const xml[][2] = {
        {"<CreateSessionResult><Credentials><SessionToken>tok</SessionToken><SecretAccessKey>s"
         "</SecretAccessKey><AccessKeyId>AKID</AccessKeyId><Expiration>2099-01-01T00:00:00Z"
         "</Expiration></Credentials></CreateSessionResult>", NULL},
        {"<CreateSessionResult><Credentials><SessionToken></SessionToken><SecretAccessKey>s"
         "</SecretAccessKey><AccessKeyId>AKID</AccessKeyId><Expiration>2099-01-01T00:00:00Z"
         "</Expiration></Credentials></CreateSessionResult>", "no SessionToken"},
        {"<CreateSessionResult><Credentials><SessionToken>t</SessionToken><SecretAccessKey>s"
         "</SecretAccessKey><AccessKeyId>AKID</AccessKeyId><Expiration>1970-01-01T00:00:00Z"
         "</Expiration></Credentials></CreateSessionResult>", "before 1970"},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(xml); i++) {
        char *fields[S3F__STS_FIELDS];
        CHECK_INT(s3f__sts_parse_fields(xml[i][0], strlen(xml[i][0]), fields), 0);
        struct s3f__credentials c;
        char why[96] = "";
        enum s3f_status st = s3f__sts_credentials(fields, "s3express-session", &c, why,
                                                  sizeof(why));
        if (!xml[i][1]) {
            CHECK_INT(st, S3F_OK);
            CHECK_STR(c.session_token, "tok");
            s3f__credentials_cleanup(&c);
        } else {
            CHECK_INT(st, S3F_ERR_BAD_RESPONSE);
            CHECK(strstr(why, xml[i][1]) != NULL);
        }
        for (int f = 0; f < S3F__STS_FIELDS; f++)
            s3f__wipe_free(fields[f]);
    }
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/s3f-cred-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(empty_home, sizeof(empty_home), "%s/empty-home", tmpdir);
    mkdir(empty_home, 0700);
    s3f__buf_init(&log_text, 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    reset_env();
    if (!server_start())
        fprintf(stderr, "fake_aws.py did not start: the network cases are skipped\n");

    RUN(test_refused_answers);
    RUN(test_static);
    RUN(test_env);
    RUN(test_profile_keys);
    RUN(test_process);
    RUN(test_web_identity);
    RUN(test_container);
    RUN(test_imds);
    RUN(test_refresh);
    RUN(test_threads);
    RUN(test_chain_order);
    RUN(test_unsupported);
    RUN(test_no_credentials);
    RUN(test_no_secrets_logged);

    server_stop();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    s3f__buf_cleanup(&log_text);
    curl_global_cleanup();
    return test_summary();
}
