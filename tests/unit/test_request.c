/* The request executor's checks before anything is sent (too many headers), and endpoint
 * URLs with user information kept out of logs and errors. The client points at a closed
 * loopback port: a request that were sent would fail with S3F_ERR_CONNECT instead. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "s3/client.h"
#include "testutil.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];

static void log_fn(void *ud, enum s3f_log_level level, const char *msg) {
    (void)ud;
    (void)level;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%s\n", msg);
    pthread_mutex_unlock(&log_lock);
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

static struct s3f_client *client_at(const char *endpoint, struct s3f_error *err) {
    struct s3f_client_options o;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = endpoint;
    o.region = "us-east-1";
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    o.force_path_style = 1;
    o.max_attempts = 1;
    o.log_fn = log_fn;
    o.log_level = S3F_LOG_TRACE;
    struct s3f_client *c = NULL;
    s3f_error_clear(err);
    if (s3f_client_new(&o, &c, err) != S3F_OK)
        return NULL;
    return c;
}

static void test_too_many_headers(void) {
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", closed_port());
    struct s3f_error err;
    struct s3f_client *c = client_at(endpoint, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    static char names[S3F_MAX_EXTRA_HEADERS + 2][32];
    struct s3f__s3_request r;
    memset(&r, 0, sizeof(r));
    r.operation = "HeadObject";
    r.method = "HEAD";
    r.bucket = "bucket";
    r.key = "key";
    for (int i = 0; i < S3F_MAX_EXTRA_HEADERS + 2; i++) {
        snprintf(names[i], sizeof(names[i]), "x-amz-meta-h%d", i);
        s3f__s3_request_header(&r, names[i], "v");
    }
    enum s3f_status st = s3f__s3_execute(c, &r, &err);
    CHECK_INT(st, S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(err.status, S3F_ERR_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof(want), "x-amz-meta-h%d", S3F_MAX_EXTRA_HEADERS);
    CHECK(strstr(err.message, want) != NULL);
    CHECK_STR(err.operation, "HeadObject");
    CHECK_STR(err.resource, "s3://bucket/key");

    /* exactly the limit is fine: the request is sent (and finds the port closed) */
    memset(&r, 0, sizeof(r));
    r.operation = "HeadObject";
    r.method = "HEAD";
    r.bucket = "bucket";
    r.key = "key";
    for (int i = 0; i < S3F_MAX_EXTRA_HEADERS; i++)
        s3f__s3_request_header(&r, names[i], "v");
    st = s3f__s3_execute(c, &r, &err);
    CHECK_INT(st, S3F_ERR_CONNECT);
    s3f_client_free(c);
}

static void test_url_redact(void) {
    char out[128];
    s3f__url_redact("http://user:pass@host:9000/p?q#f", out, sizeof(out));
    CHECK_STR(out, "http://***@host:9000/p?q#f");
    s3f__url_redact("https://a@b@host", out, sizeof(out));
    CHECK_STR(out, "https://***@host");
    s3f__url_redact("http://host/path@x", out, sizeof(out)); /* '@' past the authority */
    CHECK_STR(out, "http://host/path@x");
    s3f__url_redact("http://host:1", out, sizeof(out));
    CHECK_STR(out, "http://host:1");
    s3f__url_redact("ftp://u:p@h", out, sizeof(out));
    CHECK_STR(out, "ftp://***@h");
    s3f__url_redact(NULL, out, sizeof(out));
    CHECK_STR(out, "");
}

/* The password of an endpoint URL never reaches a log line or an error. */
static void test_endpoint_password_not_logged(void) {
    char endpoint[96];
    snprintf(endpoint, sizeof(endpoint), "http://someone:hunter2-secret@127.0.0.1:%d",
             closed_port());
    log_text[0] = '\0';
    struct s3f_error err;
    struct s3f_client *c = client_at(endpoint, &err);
    CHECK(c != NULL);
    if (c) {
        struct s3f__s3_request r;
        memset(&r, 0, sizeof(r));
        r.operation = "HeadObject";
        r.method = "HEAD";
        r.bucket = "bucket";
        r.key = "key";
        enum s3f_status st = s3f__s3_execute(c, &r, &err);
        CHECK(st != S3F_OK);
        char line[2048];
        s3f_error_format(&err, line, sizeof(line));
        CHECK(strstr(line, "hunter2") == NULL);
        s3f_client_free(c);
    }
    CHECK(strstr(log_text, "***@127.0.0.1") != NULL); /* the client's DEBUG line */
    CHECK(strstr(log_text, "hunter2") == NULL);

    /* a scheme that is refused at creation: the error names the URL without the password */
    c = client_at("ftp://someone:hunter2-secret@127.0.0.1", &err);
    CHECK(c == NULL);
    char line[2048];
    s3f_error_format(&err, line, sizeof(line));
    CHECK(strstr(line, "hunter2") == NULL);
    CHECK(strstr(line, "ftp://***@127.0.0.1") != NULL);
    s3f_client_free(c);
}

int main(void) {
    RUN(test_too_many_headers);
    RUN(test_url_redact);
    RUN(test_endpoint_password_not_logged);
    return test_summary();
}
