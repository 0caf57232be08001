/* libcurl multi transport driven by a small pool of I/O threads.
 *
 * Each I/O thread owns one CURLM (and so one connection cache) and a queue of submitted
 * requests. Submitters push onto the least-loaded thread's queue and wake it with
 * curl_multi_wakeup(). DNS entries and TLS sessions are shared between the threads through
 * a CURLSH. Easy handles are recycled per thread.
 *
 * Admission: a thread hands curl at most as many requests as it has connections
 * (`conn_limit`, its share of max_connections), so no request waits inside libcurl for a
 * connection (where its stall clock would run). The others wait in the thread's own queues:
 * control requests (`control`: small metadata requests) first, and data requests may use
 * only `conn_limit - reserved` connections, so the reserved ones are always free for control
 * requests (a CompleteMultipartUpload is not stuck behind the parts of other transfers). */
#include "core/assert.h"
#include "core/metrics.h"
#include "http/http.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct io_thread {
    struct s3f__http_pool *pool;
    pthread_t thread;
    CURLM *multi;
    /* synced: guarded by lock */
    pthread_mutex_t lock;
    struct s3f__http_request *queue_head, *queue_tail;
    bool stop;
    /* owned by the I/O thread */
    struct s3f__http_request *delayed; /* waiting for not_before_ns, sorted by it */
    /* ready, waiting for a connection (FIFO each) */
    struct s3f__http_request *wait_control, **wait_control_tail;
    struct s3f__http_request *wait_data, **wait_data_tail;
    uint32_t conn_limit;      /* requests handed to curl at most (its connection limit) */
    uint32_t data_limit;      /* of which data requests at most (conn_limit - reserved) */
    uint32_t running;         /* requests handed to curl now */
    uint32_t running_data;    /* of which data requests */
    CURL *free_easy[64];
    int n_free_easy;
    /* the sockets curl opened for this thread's multi handle (its connections), to find a
     * request's socket by local port: curl tells a socket only after a transfer ends */
    curl_socket_t socks[128];
    int n_socks;
    atomic_int load; /* queued + running, read by submitters to pick a thread */
};

struct s3f__http_pool {
    struct s3f__http_pool_options opts;
    char *ca_bundle;
    char *http_proxy, *https_proxy, *no_proxy, *proxy_ca_bundle; /* copies of opts' */
    /* test builds: CURLOPT_CONNECT_TO "::HOST:PORT" from S3FLASH_TEST_CONNECT_TO=HOST:PORT,
     * every host reached at a loopback server while URLs, Host and TLS names stay AWS's */
    struct curl_slist *connect_to;
    char *ifaces, *iface[16];     /* opts.interfaces copied and split; the next one to use */
    uint32_t n_iface;
    _Atomic uint32_t next_iface;
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    struct io_thread *threads;
    uint32_t n_threads;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;
static void curl_init_once(void) {
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud) {
    (void)h;
    (void)access;
    struct s3f__http_pool *p = ud;
    pthread_mutex_lock(&p->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud) {
    (void)h;
    struct s3f__http_pool *p = ud;
    pthread_mutex_unlock(&p->share_locks[data]);
}

/* ---- per-request callbacks (I/O thread) -------------------------------------------- */

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
    struct s3f__http_request *req = ud;
    size_t len = size * n;
    if (len >= 5 && memcmp(buf, "HTTP/", 5) == 0)
        return len; /* status line; curl tracks the code */
    const char *colon = memchr(buf, ':', len);
    if (!colon || !req->on_header)
        return len;
    const char *name = buf, *v = colon + 1, *end = buf + len;
    size_t name_len = (size_t)(colon - buf);
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    req->on_header(req->cb_ud, name, name_len, v, (size_t)(end - v));
    return len;
}

static size_t on_write(char *buf, size_t size, size_t n, void *ud) {
    struct s3f__http_request *req = ud;
    size_t len = size * n;
    req->bytes_received += len;
    if (req->on_body && req->on_body(req->cb_ud, buf, len) != 0)
        return 0; /* aborts with CURLE_WRITE_ERROR */
    return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *ud) {
    struct s3f__http_request *req = ud;
    size_t want = size * n;
    uint64_t left = req->body_len - req->body_pos;
    if (want > left)
        want = (size_t)left;
    if (want == 0)
        return 0;
    if (req->body) {
        memcpy(buf, (const char *)req->body + req->body_pos, want);
    } else {
        long got = req->read_body(req->read_ud, buf, want, req->body_pos);
        if (got < 0)
            return CURL_READFUNC_ABORT;
        want = (size_t)got;
    }
    req->body_pos += want;
    req->bytes_sent += want;
    return want;
}

static int on_seek(void *ud, curl_off_t offset, int origin) {
    struct s3f__http_request *req = ud;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    req->body_pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
    struct io_thread *t = ud;
    (void)purpose;
    curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    struct s3f__http_pool *p = t->pool;
    if (fd != CURL_SOCKET_BAD && p->n_iface) {
        const char *name = p->iface[atomic_fetch_add(&p->next_iface, 1) % p->n_iface];
        if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, name, (socklen_t)strlen(name) + 1)) {
            s3f__log(p->opts.logger, S3F_LOG_WARN, "http: bind to interface %s: %s", name,
                     strerror(errno));
            close(fd);
            return CURL_SOCKET_BAD;
        }
    }
    if (fd != CURL_SOCKET_BAD) {
        S3F__METRIC_ADD(t->pool->opts.metrics, S3F__M_CONNECTIONS, 0, 1);
        S3F__METRIC_ADD(t->pool->opts.metrics, S3F__M_CONNECTIONS_OPENED, 0, 1);
    }
    if (fd != CURL_SOCKET_BAD && t->n_socks < (int)S3F_ARRAY_LEN(t->socks))
        t->socks[t->n_socks++] = fd;
    return fd;
}

static int on_close_socket(void *ud, curl_socket_t fd) {
    struct io_thread *t = ud;
    for (int i = 0; i < t->n_socks; i++)
        if (t->socks[i] == fd) {
            t->socks[i] = t->socks[--t->n_socks];
            break;
        }
    S3F__METRIC_ADD(t->pool->opts.metrics, S3F__M_CONNECTIONS, 0, -1);
    return close(fd);
}

static int socket_port(curl_socket_t fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* Bytes the kernel still holds in the request's socket send queue (not yet acknowledged
 * by the peer), or -1 when it cannot tell. The socket is the thread's one bound to the
 * request's local port (remembered, and checked again each time: curl may have moved the
 * request to a new connection). */
static int64_t send_queue(struct s3f__http_request *req) {
    const struct io_thread *t = req->io;
    long port = 0;
    int n = 0;
    if (curl_easy_getinfo(req->easy, CURLINFO_LOCAL_PORT, &port) != CURLE_OK || port <= 0)
        return -1;
    if (req->sock < 0 || socket_port(req->sock) != port) {
        req->sock = -1;
        for (int i = 0; i < t->n_socks && req->sock < 0; i++)
            if (socket_port(t->socks[i]) == port)
                req->sock = t->socks[i];
    }
    return req->sock >= 0 && ioctl(req->sock, SIOCOUTQ, &n) == 0 ? n : -1;
}

/* The stall timeout: no byte moved, either way, for stall_timeout_ms. curl's low-speed
 * check (kept as a backstop) averages the speed over the last 5 s, so alone it fired about
 * 5 s late. Called at least every 100 ms while the request runs (io_main's poll).
 *
 * The clock starts when the request has a connection and is about to send (curl's
 * pretransfer time is set), or when a first byte moved: not at submission, not while the
 * connection is being made (connect_timeout_ms covers that).
 *
 * curl's upload count is what it handed to the kernel: on a slow link the last few MiB of a
 * body (the send buffer) are still on their way when it stops moving. So while curl's counts
 * stand still, bytes leaving the socket's send queue (SIOCOUTQ) count as movement too: 4 MiB
 * at 2 MB/s is 2 s that would otherwise read as a stall. */
static int on_xferinfo(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    struct s3f__http_request *req = ud;
    (void)dltotal;
    (void)ultotal;
    uint64_t moved = (uint64_t)dlnow + (uint64_t)ulnow, now = s3f__now_ns();
    if (!req->moving) {
        curl_off_t pretransfer_us = 0;
        if (moved == 0 &&
            (curl_easy_getinfo(req->easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_us) !=
                 CURLE_OK ||
             pretransfer_us <= 0))
            return 0;
        req->moving = true;
        req->moved = moved;
        req->moved_ns = now;
        return 0;
    }
    if (moved != req->moved) {
        req->moved = moved;
        req->moved_ns = now;
        req->unsent = -1;
        return 0;
    }
    int64_t unsent = req->unsent != 0 ? send_queue(req) : 0;
    if (unsent >= 0 && unsent != req->unsent) {
        req->unsent = unsent; /* a first look, or the queue drained some: the link moves */
        req->moved_ns = now;
    } else if (now - req->moved_ns >= req->stall_ns) {
        req->stalled = true;
        return 1;
    }
    return 0;
}

/* ---- request setup and completion (I/O thread) -------------------------------------- */

static CURL *easy_acquire(struct io_thread *t) {
    if (t->n_free_easy > 0) {
        CURL *e = t->free_easy[--t->n_free_easy];
        curl_easy_reset(e);
        return e;
    }
    return curl_easy_init();
}

static void easy_release(struct io_thread *t, CURL *e) {
    if (t->n_free_easy < (int)S3F_ARRAY_LEN(t->free_easy))
        t->free_easy[t->n_free_easy++] = e;
    else
        curl_easy_cleanup(e);
}


/* The proxy of a request, always set: an empty CURLOPT_PROXY keeps libcurl from reading
 * http_proxy & co. itself, so that only what the s3 layer resolved applies (and an empty
 * CURLOPT_NOPROXY exempts no host). False when out of memory. */
static bool set_proxy(CURL *e, const struct s3f__http_pool *pool,
                      struct s3f__http_request *req) {
    const char *proxy = strncasecmp(req->url, "https:", 6) == 0 ? pool->https_proxy
                                                                : pool->http_proxy;
    req->proxy = proxy;
    const char *ca = pool->proxy_ca_bundle ? pool->proxy_ca_bundle : pool->ca_bundle;
    if (curl_easy_setopt(e, CURLOPT_PROXY, proxy ? proxy : "") == CURLE_OUT_OF_MEMORY ||
        curl_easy_setopt(e, CURLOPT_NOPROXY, pool->no_proxy ? pool->no_proxy : "") ==
            CURLE_OUT_OF_MEMORY)
        return false;
    if (proxy && ca && curl_easy_setopt(e, CURLOPT_PROXY_CAINFO, ca) == CURLE_OUT_OF_MEMORY)
        return false;
    return true;
}

static bool setup_easy(struct io_thread *t, struct s3f__http_request *req) {
    const struct s3f__http_pool_options *o = &t->pool->opts;
    CURL *e = easy_acquire(t);
    if (!e)
        return false;
    req->easy = e;
    req->io = t;
    curl_easy_setopt(e, CURLOPT_PRIVATE, req);
    /* Options that copy a string fail only for want of memory: the request then completes
     * with CURLE_OUT_OF_MEMORY (complete() releases the handle), instead of going out
     * without its URL or method. */
    if (curl_easy_setopt(e, CURLOPT_URL, req->url) == CURLE_OUT_OF_MEMORY)
        return false;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->headers);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->error);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L); /* keys like a/../b are sent as they are */
    curl_easy_setopt(e, CURLOPT_SHARE, t->pool->share);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, req->fresh_connect ? 1L : 0L);
    /* HTTP/1.1 only: one request per connection, as admission and the stall clock assume.
     * An HTTPS endpoint that negotiated HTTP/2 would multiplex every part over one
     * connection (one TCP window for all of them). */
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, req);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
    /* Each easy handle keeps both buffers for life, one handle per request in flight: 25
     * in flight with a 1 MiB upload buffer cost 31 MiB beyond the buffer pool (a writer
     * with a 256 MiB pool peaked at 289 MiB). 256 KiB each: 12.5 MiB, upload speed to the
     * sink within noise (2.27 against 2.38 GB/s, 3 runs each). */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
    /* curl's low-speed check is only a backstop behind the engine's own stall clock
     * (on_xferinfo): set at the stall timeout itself it raced that clock, and on a loaded
     * machine fired first with curl's "Operation too slow" instead of the stall message */
    long stall_s = (long)((o->stall_timeout_ms + 999) / 1000);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 2 * (stall_s > 0 ? stall_s : 1L) + 5);
    req->stall_ns = (uint64_t)o->stall_timeout_ms * 1000000ull;
    req->moved = 0;
    req->moved_ns = 0;
    req->unsent = -1;
    req->sock = -1;
    req->moving = false; /* the stall clock starts in on_xferinfo */
    req->stalled = false;
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, t);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, req);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    if (req->timeout_ms)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    if (t->pool->ca_bundle &&
        curl_easy_setopt(e, CURLOPT_CAINFO, t->pool->ca_bundle) == CURLE_OUT_OF_MEMORY)
        return false;
    if (!set_proxy(e, t->pool, req))
        return false;
    if (t->pool->connect_to)
        curl_easy_setopt(e, CURLOPT_CONNECT_TO, t->pool->connect_to);
    if (o->tls_insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    bool has_body = req->body || req->read_body || strcmp(req->method, "PUT") == 0 ||
                    strcmp(req->method, "POST") == 0;
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        req->body_pos = 0;
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, req);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, req);
        if (strcmp(req->method, "PUT") != 0 &&
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method) == CURLE_OUT_OF_MEMORY)
            return false;
    } else if (strcmp(req->method, "GET") != 0) {
        if (curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method) == CURLE_OUT_OF_MEMORY)
            return false;
    }
    return true;
}

static enum s3f_status map_curl(CURLcode c) {
    switch (c) {
    case CURLE_OK:
        return S3F_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        return S3F_ERR_CONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return S3F_ERR_TIMEOUT;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
        return S3F_ERR_TLS;
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK:
        return S3F_ERR_ABORTED;
    case CURLE_READ_ERROR:
        return S3F_ERR_IO;
    case CURLE_OUT_OF_MEMORY:
        return S3F_ERR_NO_MEMORY;
    case CURLE_URL_MALFORMAT:
        return S3F_ERR_INVALID_ARGUMENT;
    default:
        return S3F_ERR_NETWORK;
    }
}

enum s3f_status s3f__http_status_of_curl(int curl_code) {
    return map_curl((CURLcode)curl_code);
}

static void complete(struct io_thread *t, struct s3f__http_request *req, CURLcode code) {
    req->end_ns = s3f__now_ns();
    req->curl_code = (int)code;
    req->status = map_curl(code);
    if (code == CURLE_ABORTED_BY_CALLBACK && req->stalled) {
        req->status = S3F_ERR_TIMEOUT;
        snprintf(req->error, sizeof(req->error), "no byte moved for %" PRIu64 " ms (stall timeout)",
                 (uint64_t)(req->stall_ns / 1000000u));
    }
    if (req->easy) {
        long http = 0;
        curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &http);
        req->http_status = (int)http;
        curl_off_t us = 0;
        if (curl_easy_getinfo(req->easy, CURLINFO_STARTTRANSFER_TIME_T, &us) == CURLE_OK)
            req->first_byte_us = (uint64_t)us;
        if (curl_easy_getinfo(req->easy, CURLINFO_TOTAL_TIME_T, &us) == CURLE_OK)
            req->total_us = (uint64_t)us;
        curl_multi_remove_handle(t->multi, req->easy);
        curl_easy_setopt(req->easy, CURLOPT_SHARE, NULL);
        curl_easy_setopt(req->easy, CURLOPT_ERRORBUFFER, NULL);
        easy_release(t, req->easy);
        req->easy = NULL;
    }
    if (code != CURLE_OK && !req->error[0])
        s3f__strlcpy(req->error, curl_easy_strerror(code), sizeof(req->error));
    if ((code == CURLE_COULDNT_RESOLVE_PROXY ||
         (code == CURLE_COULDNT_CONNECT && req->proxy && !t->pool->no_proxy)) && req->proxy) {
        /* libcurl's text names the host it tried, not that it is the proxy */
        char shown[256];
        s3f__url_redact(req->proxy, shown, sizeof(shown));
        size_t n = strlen(req->error);
        snprintf(req->error + n, sizeof(req->error) - n, " (the proxy %s)", shown);
    }
    atomic_fetch_sub(&t->load, 1);
    s3f__http_done_fn done = req->done;
    void *ud = req->done_ud;
    done(req, ud); /* req may be freed from here on */
}

/* Queue a ready request for a connection, or complete it now if it cannot be sent. */
static void enqueue_ready(struct io_thread *t, struct s3f__http_request *q, bool stop) {
    q->next = NULL;
    if (!q->url) {
        if (!q->error[0])
            s3f__strlcpy(q->error, "request could not be built", sizeof(q->error));
        complete(t, q, CURLE_URL_MALFORMAT);
    } else if (stop) {
        s3f__strlcpy(q->error, "client is shutting down", sizeof(q->error));
        complete(t, q, CURLE_ABORTED_BY_CALLBACK);
    } else if (q->control) {
        *t->wait_control_tail = q;
        t->wait_control_tail = &q->next;
    } else {
        *t->wait_data_tail = q;
        t->wait_data_tail = &q->next;
    }
}

/* Hand a waiting request to curl (it has a connection slot). */
static void start_request(struct io_thread *t, struct s3f__http_request *q) {
    if (!setup_easy(t, q)) {
        complete(t, q, CURLE_OUT_OF_MEMORY);
        return;
    }
    q->start_ns = s3f__now_ns();
    CURLMcode mc = curl_multi_add_handle(t->multi, q->easy);
    if (mc != CURLM_OK) {
        s3f__strlcpy(q->error, curl_multi_strerror(mc), sizeof(q->error));
        curl_easy_setopt(q->easy, CURLOPT_SHARE, NULL);
        easy_release(t, q->easy);
        q->easy = NULL;
        complete(t, q, CURLE_FAILED_INIT);
        return;
    }
    t->running++;
    if (!q->control)
        t->running_data++;
    /* admission: curl holds at most as many requests as the thread has connections, data
     * requests at most the unreserved ones (admit) */
    S3F_ASSERT(t->running <= t->conn_limit && t->running_data <= t->data_limit);
}

/* Admission: control requests first, into any free slot; data requests into the slots
 * not reserved for control requests. */
static void admit(struct io_thread *t) {
    while (t->wait_control && t->running < t->conn_limit) {
        struct s3f__http_request *q = t->wait_control;
        t->wait_control = q->next;
        if (!t->wait_control)
            t->wait_control_tail = &t->wait_control;
        q->next = NULL;
        start_request(t, q);
    }
    while (t->wait_data && t->running < t->conn_limit && t->running_data < t->data_limit) {
        struct s3f__http_request *q = t->wait_data;
        t->wait_data = q->next;
        if (!t->wait_data)
            t->wait_data_tail = &t->wait_data;
        q->next = NULL;
        start_request(t, q);
    }
}

static void *io_main(void *arg) {
    struct io_thread *t = arg;
    t->wait_control_tail = &t->wait_control;
    t->wait_data_tail = &t->wait_data;
    for (;;) {
        pthread_mutex_lock(&t->lock);
        struct s3f__http_request *q = t->queue_head;
        t->queue_head = t->queue_tail = NULL;
        bool stop = t->stop;
        pthread_mutex_unlock(&t->lock);

        /* requests whose backoff has not elapsed wait in `delayed`; the others wait for a
         * connection */
        uint64_t now = s3f__now_ns();
        while (q) {
            struct s3f__http_request *next = q->next;
            q->next = NULL;
            if (!stop && q->not_before_ns > now) {
                struct s3f__http_request **pp = &t->delayed;
                while (*pp && (*pp)->not_before_ns <= q->not_before_ns)
                    pp = &(*pp)->next;
                q->next = *pp;
                *pp = q;
            } else {
                enqueue_ready(t, q, stop);
            }
            q = next;
        }
        while (t->delayed && (stop || t->delayed->not_before_ns <= now)) {
            struct s3f__http_request *d = t->delayed;
            t->delayed = d->next;
            enqueue_ready(t, d, stop);
        }
        if (stop) {
            /* nothing waiting is sent any more */
            while (t->wait_control || t->wait_data) {
                struct s3f__http_request *w = t->wait_control ? t->wait_control : t->wait_data;
                if (w == t->wait_control)
                    t->wait_control = w->next;
                else
                    t->wait_data = w->next;
                enqueue_ready(t, w, true);
            }
            t->wait_control_tail = &t->wait_control;
            t->wait_data_tail = &t->wait_data;
        }
        admit(t);
        if (stop && t->running == 0 && !t->delayed)
            break;

        int still_running = 0;
        curl_multi_perform(t->multi, &still_running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(t->multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct s3f__http_request *req = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req);
            CURLcode rc = msg->data.result;
            S3F_ASSERT(t->running > 0 && (req->control || t->running_data > 0));
            t->running--;
            if (!req->control)
                t->running_data--;
            complete(t, req, rc);
        }
        /* slots freed: start the next ones at once, not after the poll */
        /* (curl_multi_poll returns at once for the handles just added: their timer is 0) */
        if (!stop)
            admit(t);
        if (t->running > 0 || !stop) {
            int wait_ms = t->running > 0 ? 100 : 1000;
            if (t->delayed) {
                uint64_t now2 = s3f__now_ns();
                uint64_t due = t->delayed->not_before_ns;
                int until = due > now2 ? (int)((due - now2) / 1000000ull) + 1 : 0;
                if (until < wait_ms)
                    wait_ms = until;
            }
            curl_multi_poll(t->multi, NULL, 0, wait_ms, NULL);
        }
    }
    return NULL;
}

/* ---- public (internal) API --------------------------------------------------------- */

void s3f__http_submit(struct s3f__http_pool *pool, struct s3f__http_request *req,
                      s3f__http_done_fn done, void *ud) {
    req->done = done;
    req->done_ud = ud;
    req->next = NULL;
    req->status = S3F_OK;
    req->http_status = 0;
    req->curl_code = 0;
    req->error[0] = '\0';
    req->bytes_sent = req->bytes_received = 0;
    req->easy = NULL;
    struct io_thread *best = &pool->threads[0];
    for (uint32_t i = 1; i < pool->n_threads; i++)
        if (atomic_load(&pool->threads[i].load) < atomic_load(&best->load))
            best = &pool->threads[i];
    atomic_fetch_add(&best->load, 1);
    pthread_mutex_lock(&best->lock);
    if (best->queue_tail)
        best->queue_tail->next = req;
    else
        best->queue_head = req;
    best->queue_tail = req;
    pthread_mutex_unlock(&best->lock);
    curl_multi_wakeup(best->multi);
}

bool s3f__http_error_retryable(const struct s3f__http_request *req) {
    switch (req->status) {
    case S3F_ERR_CONNECT:
    case S3F_ERR_TIMEOUT:
    case S3F_ERR_NETWORK:
        return true;
    default:
        return false;
    }
}

bool s3f__http_error_is_timeout(const struct s3f__http_request *req) {
    return req->status == S3F_ERR_TIMEOUT;
}

static bool copy_string(char **out, const char *v) {
    *out = NULL;
    return !v || (*out = strdup(v)) != NULL;
}

static void free_strings(struct s3f__http_pool *pool) {
    free(pool->ca_bundle);
    free(pool->http_proxy);
    free(pool->https_proxy);
    free(pool->no_proxy);
    free(pool->proxy_ca_bundle);
    free(pool->ifaces);
}

static void pool_destroy(struct s3f__http_pool *pool, uint32_t started) {
    for (uint32_t i = 0; i < started; i++) {
        struct io_thread *t = &pool->threads[i];
        pthread_mutex_lock(&t->lock);
        t->stop = true;
        pthread_mutex_unlock(&t->lock);
        curl_multi_wakeup(t->multi);
        pthread_join(t->thread, NULL);
    }
    for (uint32_t i = 0; i < pool->n_threads; i++) {
        struct io_thread *t = &pool->threads[i];
        for (int j = 0; j < t->n_free_easy; j++)
            curl_easy_cleanup(t->free_easy[j]);
        if (t->multi)
            curl_multi_cleanup(t->multi);
        pthread_mutex_destroy(&t->lock);
    }
    if (pool->share)
        curl_share_cleanup(pool->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&pool->share_locks[i]);
    free(pool->threads);
    free_strings(pool);
    curl_slist_free_all(pool->connect_to);
    free(pool);
}

enum s3f_status s3f__http_pool_new(const struct s3f__http_pool_options *opts,
                                   struct s3f__http_pool **out, struct s3f_error *err) {
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_result != CURLE_OK)
        return s3f__error_set(err, S3F_ERR_INTERNAL, "http", NULL, "curl_global_init: %s",
                              curl_easy_strerror(curl_init_result));
    struct s3f__http_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "http", NULL, "out of memory");
    pool->opts = *opts;
    if (!pool->opts.io_threads)
        pool->opts.io_threads = 2;
    if (pool->opts.io_threads > 64)
        pool->opts.io_threads = 64;
    if (!pool->opts.max_connections)
        pool->opts.max_connections = 64;
    if (!pool->opts.connect_timeout_ms)
        pool->opts.connect_timeout_ms = 10000;
    if (!pool->opts.stall_timeout_ms)
        pool->opts.stall_timeout_ms = 30000;
    pool->opts.ca_bundle = NULL;
    pool->opts.http_proxy = pool->opts.https_proxy = NULL;
    pool->opts.no_proxy = pool->opts.proxy_ca_bundle = NULL;
    if (!copy_string(&pool->ca_bundle, opts->ca_bundle) ||
        !copy_string(&pool->http_proxy, opts->http_proxy) ||
        !copy_string(&pool->https_proxy, opts->https_proxy) ||
        !copy_string(&pool->no_proxy, opts->no_proxy) ||
        !copy_string(&pool->proxy_ca_bundle, opts->proxy_ca_bundle) ||
        !copy_string(&pool->ifaces, opts->interfaces))
        goto oom;
    pool->opts.interfaces = NULL;
    for (char *sv, *n = pool->ifaces ? strtok_r(pool->ifaces, ",", &sv) : NULL;
         n && pool->n_iface < S3F_ARRAY_LEN(pool->iface); n = strtok_r(NULL, ",", &sv))
        pool->iface[pool->n_iface++] = n;
#ifdef S3F_TEST_HOOKS
    const char *ct = getenv("S3FLASH_TEST_CONNECT_TO"); /* test builds only */
    if (ct && *ct) {
        char spec[300];
        snprintf(spec, sizeof(spec), "::%s", ct);
        if (!(pool->connect_to = curl_slist_append(NULL, spec)))
            goto oom;
    }
#endif
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&pool->share_locks[i], NULL);
    pool->share = curl_share_init();
    if (!pool->share)
        goto oom;
    curl_share_setopt(pool->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(pool->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(pool->share, CURLSHOPT_USERDATA, pool);
    curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);

    pool->n_threads = pool->opts.io_threads;
    pool->threads = calloc(pool->n_threads, sizeof(*pool->threads));
    if (!pool->threads)
        goto oom;
    long per_thread = (long)((pool->opts.max_connections + pool->n_threads - 1) / pool->n_threads);
    uint32_t reserved = per_thread >= 16 ? 2 : per_thread >= 4 ? 1 : 0;
    for (uint32_t i = 0; i < pool->n_threads; i++) {
        struct io_thread *t = &pool->threads[i];
        t->pool = pool;
        t->conn_limit = (uint32_t)per_thread;
        t->data_limit = (uint32_t)per_thread - reserved;
        pthread_mutex_init(&t->lock, NULL);
        t->multi = curl_multi_init();
        if (!t->multi)
            goto oom_threads;
        curl_multi_setopt(t->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, per_thread);
        curl_multi_setopt(t->multi, CURLMOPT_MAXCONNECTS, per_thread);
    }
    uint32_t started = 0;
    for (; started < pool->n_threads; started++) {
        if (pthread_create(&pool->threads[started].thread, NULL, io_main,
                           &pool->threads[started]) != 0) {
            pool_destroy(pool, started);
            return s3f__error_set(err, S3F_ERR_INTERNAL, "http", NULL,
                                  "could not start an I/O thread");
        }
    }
    *out = pool;
    return S3F_OK;

oom_threads:
    pool_destroy(pool, 0);
    return s3f__error_set(err, S3F_ERR_NO_MEMORY, "http", NULL, "out of memory");
oom:
    if (pool->share)
        curl_share_cleanup(pool->share);
    free(pool->threads);
    free_strings(pool);
    curl_slist_free_all(pool->connect_to);
    free(pool);
    return s3f__error_set(err, S3F_ERR_NO_MEMORY, "http", NULL, "out of memory");
}

uint32_t s3f__http_pool_data_connections(const struct s3f__http_pool *pool) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < pool->n_threads; i++)
        n += pool->threads[i].data_limit;
    return n;
}

void s3f__http_pool_free(struct s3f__http_pool *pool) {
    if (pool)
        pool_destroy(pool, pool->n_threads);
}
