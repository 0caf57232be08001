/* The metrics exporter (s3flash.h: s3f_metrics_exporter_*): one thread that serves the
 * Prometheus text of its registries over HTTP/1.0-style exchanges (one request per
 * connection, GET /metrics, answered and closed; one connection at a time, each bounded in
 * time and size) and, every log interval, writes the series that changed as "metrics:"
 * lines. It polls the listening socket and a pipe that stop writes to, so it never sleeps
 * past a stop. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/metrics.h"

#define REQUEST_MAX 8192          /* a request's head */
#define REQUEST_TIMEOUT_MS 5000   /* for a client to send it, and to take the answer */
#define LOG_LINE_MAX 1800         /* s3f__log's lines are 2048 bytes */
#define MAX_REGISTRIES 8
#define OTLP_INTERVAL_MS 60000    /* Mountpoint's --otlp-export-interval default */
#define OTLP_WARN_EVERY_MS 60000  /* a failing push is logged at most this often */

struct seen { /* a series' value at the last log line, in walk order */
    const char *name;
    const char *labels[S3F_METRIC_MAX_LABELS + 1];
    double value;
};

struct s3f_metrics_exporter {
    struct s3f_metrics *regs[MAX_REGISTRIES];
    size_t n_regs;
    int listen_fd, port;
    int wake[2];
    uint32_t log_interval_ms;
    struct s3f__logger logger;
    pthread_t thread;
    /* the log lines' state: the exporter thread's own */
    struct seen *seen;
    size_t n_seen, cap_seen, walk;
    struct s3f__buf line;
    /* OTLP push: the exporter thread's own, then stop's */
    char *otlp_url;
    const char *const *otlp_resource;
    uint32_t otlp_interval_ms;
    uint64_t otlp_start_ns, otlp_warned_ms;
    bool otlp_failing;
};

/* ---- the address ---------------------------------------------------------------------- */

static enum s3f_status parse_listen(const char *spec, bool allow_remote,
                                    struct sockaddr_storage *ss, socklen_t *len,
                                    struct s3f_error *err) {
    static const char *op = "metrics exporter";
    char host[64] = "127.0.0.1";
    const char *port = spec;
    const char *colon = strrchr(spec, ':');
    if (colon) {
        const char *h = spec;
        size_t hl = (size_t)(colon - spec);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
            h++;
            hl -= 2;
        }
        if (hl == 0 || hl >= sizeof(host))
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, spec,
                                  "not PORT, IP:PORT or [IPv6]:PORT");
        memcpy(host, h, hl);
        host[hl] = '\0';
        port = colon + 1;
    }
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (!*port || *end || errno || p < 0 || p > 65535)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, spec,
                              "the port is not a number from 0 to 65535");
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE,
                             .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%ld", p);
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, spec,
                              "'%s' is not a numeric IPv4 or IPv6 address", host);
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    bool loopback = ss->ss_family == AF_INET
        ? (ntohl(((struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127
        : IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ss)->sin6_addr);
    if (!loopback && !allow_remote)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, spec,
                              "%s is not a loopback address: the metrics endpoint has no "
                              "authentication, so other addresses must be allowed explicitly",
                              host);
    return S3F_OK;
}

/* ---- the log lines ---------------------------------------------------------------------- */

static void flush_line(struct s3f_metrics_exporter *e) {
    if (e->line.len > strlen("metrics:"))
        s3f__log(&e->logger, S3F_LOG_INFO, "%s", e->line.data);
    s3f__buf_reset(&e->line);
    s3f__buf_appends(&e->line, "metrics:");
}

static void log_value(struct s3f_metrics_exporter *e, const struct s3f_metric_sample *s,
                      const char *suffix, double v) {
    if (e->line.len > LOG_LINE_MAX)
        flush_line(e);
    s3f__buf_appendf(&e->line, " %s%s", s->name, suffix);
    for (size_t l = 0; l < s->n_labels; l++)
        s3f__buf_appendf(&e->line, "%c%s=\"%s\"", l ? ',' : '{', s->label_names[l],
                         s->label_values[l]);
    s3f__buf_appendf(&e->line, "%s=%.12g", s->n_labels ? "}" : "", v);
}

/* Has the series at this point of the walk changed since the last line? Records it. */
static bool changed(struct s3f_metrics_exporter *e, const struct s3f_metric_sample *s,
                    double v) {
    const char *labels[S3F_METRIC_MAX_LABELS + 1] = {NULL};
    for (size_t l = 0; l < s->n_labels; l++)
        labels[l] = s->label_values[l];
    size_t i = e->walk++;
    if (i >= e->cap_seen) {
        size_t cap = e->cap_seen ? e->cap_seen * 2 : 256;
        struct seen *n = realloc(e->seen, cap * sizeof(*n));
        if (!n)
            return v != 0; /* no memory for the state: every non-zero one */
        e->seen = n;
        e->cap_seen = cap;
    }
    struct seen *x = &e->seen[i];
    bool same_series = i < e->n_seen && x->name == s->name &&
                       memcmp(x->labels, labels, sizeof(labels)) == 0;
    bool diff = same_series ? x->value != v : v != 0;
    x->name = s->name;
    memcpy(x->labels, labels, sizeof(labels));
    x->value = v;
    if (i >= e->n_seen)
        e->n_seen = i + 1;
    return diff;
}

static int log_sample(const struct s3f_metric_sample *s, void *ud) {
    struct s3f_metrics_exporter *e = ud;
    if (s->type != S3F_METRIC_HISTOGRAM) {
        if (changed(e, s, s->value))
            log_value(e, s, "", s->value);
    } else if (changed(e, s, (double)s->count)) {
        log_value(e, s, "_count", (double)s->count);
        log_value(e, s, "_sum", s->sum);
    }
    return 0;
}

static void log_metrics(struct s3f_metrics_exporter *e) {
    e->walk = 0;
    s3f__buf_reset(&e->line);
    s3f__buf_appends(&e->line, "metrics:");
    for (size_t i = 0; i < e->n_regs; i++)
        s3f_metrics_foreach(e->regs[i], log_sample, e);
    flush_line(e);
}

static bool send_all(int fd, const char *p, size_t n) {
    uint64_t deadline = s3f__now_ms() + REQUEST_TIMEOUT_MS;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        uint64_t now = s3f__now_ms();
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) < 0)
            return false;
    }
    return true;
}

static void answer(int fd, const char *status, const char *type, const char *body, size_t len) {
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", status, type, len);
    if (send_all(fd, head, (size_t)n))
        send_all(fd, body, len);
}

/* ---- the OTLP push ------------------------------------------------------------------------ */

static uint64_t unix_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* http://HOST[:PORT][/PATH] split; false if it is not that */
static bool split_url(const char *url, char *host, size_t host_max, char *port,
                      const char **path) {
    static const char scheme[] = "http://";
    if (strncasecmp(url, scheme, strlen(scheme)) != 0)
        return false;
    const char *h = url + strlen(scheme), *end = h + strcspn(h, "/?#");
    *path = *end == '/' ? end : "/";
    const char *colon = NULL;
    if (*h == '[') {
        const char *close = memchr(h, ']', (size_t)(end - h));
        if (!close)
            return false;
        colon = close[1] == ':' ? close + 1 : NULL;
        if (!colon && close + 1 != end)
            return false;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
    }
    const char *hend = colon ? colon : end;
    if (*h == '[') {
        h++;
        hend--;
    }
    size_t hl = (size_t)(hend - h), pl = colon ? (size_t)(end - colon - 1) : 2;
    if (hl == 0 || hl >= host_max || pl == 0 || pl > 5 || *end == '?' || *end == '#')
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (colon) {
        memcpy(port, colon + 1, pl);
        port[pl] = '\0';
    } else {
        strncpy(port, "80", 6);
    }
    return strspn(port, "0123456789") == strlen(port) && atoi(port) > 0 && atoi(port) <= 65535;
}

char *s3f__otlp_url(const char *endpoint, struct s3f_error *err) {
    static const char *op = "OTLP endpoint", suffix[] = "/v1/metrics";
    char host[256], port[6];
    const char *path;
    if (!endpoint || !split_url(endpoint, host, sizeof(host), port, &path)) {
        s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, endpoint,
                       "not http://HOST[:PORT][/PATH] (https is not supported: point it at "
                       "a local collector or agent)");
        return NULL;
    }
    size_t n = strlen(endpoint);
    while (n > strlen("http://") && endpoint[n - 1] == '/')
        n--;
    bool has = n >= strlen(suffix) && strncmp(endpoint + n - strlen(suffix), suffix,
                                              strlen(suffix)) == 0;
    char *url = malloc(n + sizeof(suffix));
    if (!url) {
        s3f__error_set(err, S3F_ERR_NO_MEMORY, op, endpoint, "out of memory");
        return NULL;
    }
    memcpy(url, endpoint, n);
    memcpy(url + n, suffix, has ? 1 : sizeof(suffix));
    if (has)
        url[n] = '\0';
    return url;
}

/* Connect (bounded by the deadline); -1 and errno-ish text in why. */
static int connect_to(const char *host, const char *port, uint64_t deadline, const char **why) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc) {
        *why = gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    *why = "no address";
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EINPROGRESS) {
            uint64_t now = s3f__now_ms();
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int e = 0;
            socklen_t el = sizeof(e);
            if (now < deadline && poll(&pf, 1, (int)(deadline - now)) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
                break;
            errno = e ? e : ETIMEDOUT;
        } else if (errno == 0 || errno == EISCONN) {
            break;
        }
        *why = strerror(errno);
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* POST the body; S3F_OK on a 2xx answer, else err names the URL and what went wrong. */
static enum s3f_status otlp_post(const char *url, const struct s3f__buf *body,
                                 struct s3f_error *err) {
    static const char *op = "OTLP push";
    char host[256], port[6];
    const char *path, *why = NULL;
    if (!split_url(url, host, sizeof(host), port, &path))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, url, "bad URL");
    uint64_t deadline = s3f__now_ms() + REQUEST_TIMEOUT_MS;
    int fd = connect_to(host, port, deadline, &why);
    if (fd < 0)
        return s3f__error_set(err, S3F_ERR_NETWORK, op, url, "cannot connect: %s", why);
    char head[512];
    bool v6 = strchr(host, ':') != NULL;
    int hn = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nContent-Type: "
                      "application/x-protobuf\r\nContent-Length: %zu\r\nUser-Agent: s3flash"
                      "\r\nConnection: close\r\n\r\n", path, v6 ? "[" : "", host, v6 ? "]" : "",
                      port, body->len);
    enum s3f_status st = S3F_OK;
    if (hn < 0 || (size_t)hn >= sizeof(head) || !send_all(fd, head, (size_t)hn) ||
        (body->len && !send_all(fd, body->data, body->len))) {
        st = s3f__error_set(err, S3F_ERR_NETWORK, op, url, "cannot send the request: %s",
                            strerror(errno));
        goto out;
    }
    char resp[256];
    size_t got = 0;
    while (got < sizeof(resp) - 1 && !memchr(resp, '\n', got)) {
        uint64_t now = s3f__now_ms();
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
            break;
        ssize_t r = recv(fd, resp + got, sizeof(resp) - 1 - got, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (r > 0)
            got += (size_t)r;
    }
    resp[got] = '\0';
    resp[strcspn(resp, "\r\n")] = '\0';
    int status = 0;
    if (sscanf(resp, "HTTP/%*d.%*d %d", &status) != 1)
        st = s3f__error_set(err, S3F_ERR_NETWORK, op, url, "no HTTP answer within %d s",
                            REQUEST_TIMEOUT_MS / 1000);
    else if (status < 200 || status > 299)
        st = s3f__error_set(err, S3F_ERR_NETWORK, op, url, "the collector answered '%s'", resp);
out:
    close(fd);
    return st;
}

/* One push of the registries' values; a failure is logged (WARN, at most once a minute
 * while it lasts, and its end at INFO), never more. */
static void otlp_push(struct s3f_metrics_exporter *e) {
    struct s3f__buf body;
    s3f__buf_init(&body, 64u << 20);
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f__otlp_encode(e->regs, e->n_regs, e->otlp_resource,
                                          e->otlp_start_ns, unix_ns(), &body);
    if (st)
        s3f__error_set(&err, st, "OTLP push", e->otlp_url, "cannot encode the metrics");
    else
        st = otlp_post(e->otlp_url, &body, &err);
    s3f__buf_cleanup(&body);
    uint64_t now = s3f__now_ms();
    if (st && (!e->otlp_failing || now - e->otlp_warned_ms >= OTLP_WARN_EVERY_MS)) {
        s3f__log(&e->logger, S3F_LOG_WARN, "metrics: %s to %s failed: %s (tried again every %u s)",
                 err.operation, err.resource, err.message, e->otlp_interval_ms / 1000);
        e->otlp_warned_ms = now;
    } else if (!st && e->otlp_failing) {
        s3f__log(&e->logger, S3F_LOG_INFO, "metrics: OTLP push to %s works again", e->otlp_url);
    }
    e->otlp_failing = st != S3F_OK;
}

/* ---- the HTTP server ------------------------------------------------------------------- */

/* One connection: read the request's head (bounded in size and time), answer, close. */
static void serve(struct s3f_metrics_exporter *e, int fd) {
    char req[REQUEST_MAX + 1];
    size_t got = 0;
    uint64_t deadline = s3f__now_ms() + REQUEST_TIMEOUT_MS;
    while (got < REQUEST_MAX && !memmem(req, got, "\r\n\r\n", 4)) {
        uint64_t now = s3f__now_ms();
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
            return;
        ssize_t r = recv(fd, req + got, REQUEST_MAX - got, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return;
        if (r > 0)
            got += (size_t)r;
    }
    req[got] = '\0';
    static const char text[] = "text/plain; charset=utf-8";
    bool get = strncmp(req, "GET ", 4) == 0, head = strncmp(req, "HEAD ", 5) == 0;
    const char *path = get ? req + 4 : head ? req + 5 : NULL;
    if (!path) {
        answer(fd, "405 Method Not Allowed", text, "GET /metrics only\n", 18);
        return;
    }
    if (strncmp(path, "/metrics ", 9) != 0 && strncmp(path, "/metrics? ", 9) != 0 &&
        strncmp(path, "/metrics?", 9) != 0) {
        answer(fd, "404 Not Found", text, "GET /metrics only\n", 18);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    if (s3f_metrics_prometheus(e->regs, e->n_regs, &body, &len)) {
        answer(fd, "500 Internal Server Error", text, "out of memory\n", 14);
        return;
    }
    answer(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", head ? "" : body,
           head ? 0 : len);
    free(body);
}

static void *exporter_main(void *arg) {
    struct s3f_metrics_exporter *e = arg;
    uint64_t next_log = e->log_interval_ms ? s3f__now_ms() + e->log_interval_ms : UINT64_MAX;
    uint64_t next_push = e->otlp_url ? s3f__now_ms() + e->otlp_interval_ms : UINT64_MAX;
    for (;;) {
        struct pollfd pf[2] = {{.fd = e->wake[0], .events = POLLIN},
                               {.fd = e->listen_fd, .events = POLLIN}};
        uint64_t now = s3f__now_ms(), next = next_log < next_push ? next_log : next_push;
        int timeout = next == UINT64_MAX ? -1 : next > now ? (int)(next - now) : 0;
        int n = poll(pf, e->listen_fd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (pf[0].revents)
            break;
        if (e->listen_fd >= 0 && (pf[1].revents & POLLIN)) {
            int fd = accept4(e->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                serve(e, fd);
                close(fd);
            }
        }
        if (e->log_interval_ms && s3f__now_ms() >= next_log) {
            log_metrics(e);
            next_log = s3f__now_ms() + e->log_interval_ms;
        }
        if (e->otlp_url && s3f__now_ms() >= next_push) {
            otlp_push(e);
            next_push = s3f__now_ms() + e->otlp_interval_ms;
        }
    }
    return NULL;
}

static void exporter_free(struct s3f_metrics_exporter *e) {
    if (e->listen_fd >= 0)
        close(e->listen_fd);
    for (int i = 0; i < 2; i++)
        if (e->wake[i] >= 0)
            close(e->wake[i]);
    s3f__buf_cleanup(&e->line);
    free(e->seen);
    free(e->otlp_url);
    free(e);
}

enum s3f_status s3f_metrics_exporter_start(const struct s3f_metrics_exporter_options *o,
                                           struct s3f_metrics_exporter **out,
                                           struct s3f_error *err) {
    static const char *op = "metrics exporter";
    if (!out || !o || o->n_registries > MAX_REGISTRIES || (o->n_registries && !o->registries))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, op, NULL,
                              "bad options (at most %d registries)", MAX_REGISTRIES);
    *out = NULL;
    struct s3f_metrics_exporter *e = calloc(1, sizeof(*e));
    if (!e)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "out of memory");
    e->listen_fd = e->wake[0] = e->wake[1] = -1;
    e->n_regs = o->n_registries;
    for (size_t i = 0; i < e->n_regs; i++)
        e->regs[i] = o->registries[i];
    e->log_interval_ms = o->log_interval_ms;
    e->logger = (struct s3f__logger){o->log_fn, o->log_user_data, S3F_LOG_INFO};
    s3f__buf_init(&e->line, 4096);
    enum s3f_status st = S3F_OK;
    if (o->otlp_endpoint) {
        if (!(e->otlp_url = s3f__otlp_url(o->otlp_endpoint, err))) {
            st = err ? err->status : S3F_ERR_INVALID_ARGUMENT;
            goto fail;
        }
        e->otlp_resource = o->otlp_resource;
        e->otlp_interval_ms = o->otlp_interval_ms ? o->otlp_interval_ms : OTLP_INTERVAL_MS;
        e->otlp_start_ns = unix_ns();
    }
    if (o->listen) {
        struct sockaddr_storage ss;
        socklen_t len;
        if ((st = parse_listen(o->listen, o->allow_remote != 0, &ss, &len, err)))
            goto fail;
        int one = 1;
        e->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (e->listen_fd < 0 ||
            setsockopt(e->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
            bind(e->listen_fd, (struct sockaddr *)&ss, len) != 0 || listen(e->listen_fd, 16) != 0) {
            st = s3f__error_set(err, S3F_ERR_NETWORK, op, o->listen, "cannot listen: %s",
                                strerror(errno));
            goto fail;
        }
        len = sizeof(ss);
        getsockname(e->listen_fd, (struct sockaddr *)&ss, &len);
        e->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                : ((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    if (pipe2(e->wake, O_CLOEXEC) != 0 || pthread_create(&e->thread, NULL, exporter_main, e)) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, op, NULL, "cannot start its thread");
        goto fail;
    }
    *out = e;
    return S3F_OK;
fail:
    exporter_free(e);
    return st;
}

int s3f_metrics_exporter_port(const struct s3f_metrics_exporter *e) {
    return e ? e->port : 0;
}

void s3f_metrics_exporter_stop(struct s3f_metrics_exporter *e) {
    if (!e)
        return;
    ssize_t w;
    do
        w = write(e->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(e->thread, NULL);
    if (e->log_interval_ms)
        log_metrics(e); /* the last values, after the thread (its state is ours now) */
    if (e->otlp_url)
        otlp_push(e);
    exporter_free(e);
}
