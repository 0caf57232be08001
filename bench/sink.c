/*
 * s3flash-sink: a minimal, fast S3-compatible HTTP/1.1 endpoint for loopback benchmarks.
 *
 * It exists so that the speed of an S3 client can be measured on its own: it checks no
 * signatures, throws request bodies away (one large recv() into a per-thread buffer that is
 * reused), and answers GETs from a precomputed synthetic pattern (no per-byte work, one
 * sendmsg() of the headers and up to eight pattern windows). It remembers only the size of each
 * object put to it, so a benchmark can upload and then download the same keys. See
 * bench/README.md for the protocol subset and the data pattern.
 *
 * Threads: N workers, each with its own epoll loop (level-triggered), all sharing one listening
 * socket registered with EPOLLEXCLUSIVE. The worker that accepts a connection gives it to the
 * worker with the fewest connections (through that worker's hand-off pipe), so that two
 * connections arriving together do not both land on one thread; from then on a connection
 * belongs to one worker. Only the object map, the multipart table and, with S3-like limits, the
 * total byte-rate buckets and the per-prefix table are shared (mutexes). The main thread waits
 * for SIGINT/SIGTERM (writing a --trace line every 100 ms meanwhile), then wakes the workers
 * through an eventfd.
 *
 * With --s3-like (or the limit options) it behaves like S3 from a client's side: paced
 * connections, first-byte latency, 503 SlowDown per prefix (sink_limits.c).
 *
 * Deliberately standalone (libc, libm and pthreads only): the reference server must not share
 * code, and so bugs, with the client it measures.
 *
 * This file holds the options and main(); the HTTP, S3, limits and store parts are
 * sink_http.c, sink_s3.c, sink_limits.c and sink_store.c (sink.h lists what each owns).
 */
#include "sink.h"

uint8_t *g_pat;
struct opts g_opt = {.bind_addr = "127.0.0.1", .threads = 2, .max_conns = 1024,
                     .max_objects = 1000000, .max_uploads = 4096, .recv_buf = 256u << 10,
                     .prefix_depth = 1, .prefix_burst_ms = 100, .session_seconds = 300};
atomic_bool g_stop;
atomic_int g_nconns;
atomic_uint_fast64_t g_synth_pages;
char g_last_modified[64];
char g_last_modified_iso[64];
uint32_t g_salt;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: s3flash-sink [options]\n"
            "A minimal S3-compatible HTTP/1.1 endpoint for measuring client speed: no\n"
            "signatures are checked, request bodies are discarded, GET bodies are a synthetic\n"
            "pattern (byte i = ((i %% 1048573) * 2654435761 mod 2^32) >> 24).\n"
            "\n"
            "  --bind ADDR         IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N            TCP port, 0 for an ephemeral one (default 0)\n"
            "  --port-file F       write the port to F once listening\n"
            "  --print-port        print \"port N\" on stdout once listening (tests read it\n"
            "                      from the pipe instead of polling for a file)\n"
            "  --threads N         I/O threads, each its own epoll loop (default 2)\n"
            "  --max-conns N       connections at once; more are closed (default 1024)\n"
            "  --max-objects N     keys remembered (default 1000000)\n"
            "  --max-uploads N     multipart uploads in progress (default 4096)\n"
            "  --recv-buffer BYTES discard buffer per thread (default 262144)\n"
            "  --keep-checksums    remember the x-amz-checksum-<alg> of a PUT or of a\n"
            "                      FULL_OBJECT CompleteMultipartUpload and send it back on\n"
            "                      HEAD and GET (for tests; GET bodies do not match it\n"
            "                      without --store)\n"
            "  --store BYTES       keep the bytes of objects and parts (up to BYTES in all;\n"
            "                      K/M/G/T suffixes) and serve them back; writes over the\n"
            "                      limit get 507 (default: bodies are discarded)\n"
            "S3-like limits (off by default; see bench/README.md for the numbers' sources):\n"
            "  --s3-like           the preset: --conn-rate 80M --first-byte-ms 20\n"
            "                      --first-byte-p99-ms 100 --first-byte-min-ms 5\n"
            "                      --prefix-get-rate 5500 --prefix-put-rate 3500\n"
            "                      (options after it override it)\n"
            "  --conn-rate RATE    bytes/s each connection sends and receives (K/M/G: 1024s)\n"
            "  --conn-send-rate RATE, --conn-recv-rate RATE   one direction only\n"
            "  --total-rate RATE   bytes/s all connections together, each direction\n"
            "  --total-send-rate RATE, --total-recv-rate RATE one direction only\n"
            "  --first-byte-ms MS  median first-byte latency of each response (lognormal)\n"
            "  --first-byte-p99-ms MS   its 99th percentile (default: the median: constant)\n"
            "  --first-byte-min-ms MS   its floor (default 0)\n"
            "  --seed N            of the latency draws (default 1)\n"
            "  --prefix-get-rate N GET/HEAD requests/s per key prefix; more get 503 SlowDown\n"
            "  --prefix-put-rate N PUT/POST/DELETE requests/s per key prefix\n"
            "  --prefix-depth N    a prefix is the key up to its Nth '/' (default 1; 0: the\n"
            "                      bucket)\n"
            "  --prefix-burst-ms MS  requests a prefix may save up, in ms of its rate\n"
            "                      (default 100; at least 1 request)\n"
            "S3 Express One Zone (directory buckets; bench/sink_express.c):\n"
            "  --express           sessions (CreateSession, x-amz-s3session-token checked,\n"
            "                      expired: 403 ExpiredToken), unordered ListObjectsV2 with\n"
            "                      '/'-only delimiters, appends (x-amz-write-offset-bytes),\n"
            "                      RenameObject, If-None-Match; GET /?sink-stats and\n"
            "                      POST /?sink-revoke-sessions for tests\n"
            "  --session-seconds N lifetime of a session's credentials (default 300)\n"
            "  --revoke-after N    revoke every session once, after N requests were let\n"
            "                      through with one (tests: a revoked session)\n"
            "  --express-like      --express with a same-zone store's limits: --conn-rate 80M\n"
            "                      --first-byte-ms 3 --first-byte-p99-ms 5\n"
            "                      --first-byte-min-ms 2, and per bucket (--prefix-depth 0)\n"
            "                      200000 GET and 100000 PUT requests/s\n"
            "  --trace FILE        every 100 ms a line: ms, connections open, connections\n"
            "                      with a request in progress, body bytes in, bytes out\n"
            "  --verbose           log every request to stderr\n"
            "  --quiet             no statistics at exit\n"
            "  --help              this text\n"
            "  --synth-list BUCKET/PREFIX:N  ListObjectsV2 of BUCKET with a prefix under\n"
            "                      PREFIX lists N synthetic keys PREFIXk<7 digits>-size-<S>\n"
            "                      (S = 1 + (i * 2654435761 mod 2^32) mod 8192; pages of up to\n"
            "                      max-keys, as many as one response holds), which HEAD and\n"
            "                      GET serve as any size-N key (also with --store)\n"
            "Objects put are remembered by size; unknown keys ending in size-N have N bytes\n"
            "(not with --store: there only the objects written exist).\n"
            "SIGINT or SIGTERM stops it and prints byte and request counts; SIGUSR1 prints\n"
            "the S3-like limits' counts (a 'stats:' line) and goes on.\n");
}

static bool opt_num(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A byte count: decimal digits with an optional K, M, G or T (powers of 1024). */
static bool opt_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return false;
    int sh = 0;
    switch (*end) {
    case 'K': case 'k': sh = 10; end++; break;
    case 'M': case 'm': sh = 20; end++; break;
    case 'G': case 'g': sh = 30; end++; break;
    case 'T': case 't': sh = 40; end++; break;
    default: break;
    }
    if (*end || v == 0 || v > (UINT64_C(1) << (62 - sh)))
        return false;
    *out = (uint64_t)v << sh;
    return true;
}

/* A non-negative decimal number (milliseconds, requests per second). */
static bool opt_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e12)
        return false;
    *out = v;
    return true;
}

/* --s3-like: what S3 looks like to one client (sources in bench/README.md). */
static void s3_like(void)
{
    g_opt.conn_send_rate = g_opt.conn_recv_rate = 80.0 * 1048576;
    g_opt.fb_median_ms = 20;
    g_opt.fb_p99_ms = 100;
    g_opt.fb_min_ms = 5;
    g_opt.prefix_get_rate = 5500;
    g_opt.prefix_put_rate = 3500;
}

/* --express-like: a directory bucket in the client's zone (bench/README.md). */
static void express_like(void)
{
    s3_like(); /* the same connections; then a same-zone store's latency and rates */
    g_opt.express = true;
    g_opt.fb_median_ms = 3;
    g_opt.fb_p99_ms = 5;
    g_opt.fb_min_ms = 2;
    g_opt.prefix_depth = 0;
    g_opt.prefix_get_rate = 200000;
    g_opt.prefix_put_rate = 100000;
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--verbose")) {
            g_opt.verbose = true;
        } else if (!strcmp(a, "--quiet")) {
            g_opt.quiet = true;
        } else if (!strcmp(a, "--print-port")) {
            g_opt.print_port = true;
        } else if (!strcmp(a, "--keep-checksums")) {
            g_opt.keep_checksums = true;
        } else if (!strcmp(a, "--s3-like")) {
            s3_like();
        } else if (!strcmp(a, "--express")) {
            g_opt.express = true;
        } else if (!strcmp(a, "--express-like")) {
            express_like();
        } else if (i + 1 < argc) {
            const char *val = argv[++i];
            uint64_t b;
            if (!strcmp(a, "--bind"))
                g_opt.bind_addr = val;
            else if (!strcmp(a, "--port-file"))
                g_opt.port_file = val;
            else if (!strcmp(a, "--port") && opt_num(val, 0, 65535, &v))
                g_opt.port = (int)v;
            else if (!strcmp(a, "--threads") && opt_num(val, 1, 256, &v))
                g_opt.threads = (int)v;
            else if (!strcmp(a, "--max-conns") && opt_num(val, 1, 1 << 20, &v))
                g_opt.max_conns = (int)v;
            else if (!strcmp(a, "--max-objects") && opt_num(val, 0, 1LL << 32, &v))
                g_opt.max_objects = (size_t)v;
            else if (!strcmp(a, "--max-uploads") && opt_num(val, 1, 1 << 20, &v))
                g_opt.max_uploads = (uint32_t)v;
            else if (!strcmp(a, "--recv-buffer") && opt_num(val, 4096, 64LL << 20, &v))
                g_opt.recv_buf = (size_t)v;
            else if (!strcmp(a, "--store") && opt_bytes(val, &g_opt.store_max))
                ;
            else if (!strcmp(a, "--conn-rate") && opt_bytes(val, &b))
                g_opt.conn_send_rate = g_opt.conn_recv_rate = (double)b;
            else if (!strcmp(a, "--conn-send-rate") && opt_bytes(val, &b))
                g_opt.conn_send_rate = (double)b;
            else if (!strcmp(a, "--conn-recv-rate") && opt_bytes(val, &b))
                g_opt.conn_recv_rate = (double)b;
            else if (!strcmp(a, "--total-rate") && opt_bytes(val, &b))
                g_opt.total_send_rate = g_opt.total_recv_rate = (double)b;
            else if (!strcmp(a, "--total-send-rate") && opt_bytes(val, &b))
                g_opt.total_send_rate = (double)b;
            else if (!strcmp(a, "--total-recv-rate") && opt_bytes(val, &b))
                g_opt.total_recv_rate = (double)b;
            else if (!strcmp(a, "--first-byte-ms") && opt_double(val, &g_opt.fb_median_ms))
                ;
            else if (!strcmp(a, "--first-byte-p99-ms") && opt_double(val, &g_opt.fb_p99_ms))
                ;
            else if (!strcmp(a, "--first-byte-min-ms") && opt_double(val, &g_opt.fb_min_ms))
                ;
            else if (!strcmp(a, "--seed") && opt_num(val, 0, LLONG_MAX, &v))
                g_opt.seed = (uint64_t)v;
            else if (!strcmp(a, "--prefix-get-rate") && opt_double(val, &g_opt.prefix_get_rate))
                ;
            else if (!strcmp(a, "--prefix-put-rate") && opt_double(val, &g_opt.prefix_put_rate))
                ;
            else if (!strcmp(a, "--prefix-depth") && opt_num(val, 0, 1000, &v))
                g_opt.prefix_depth = (int)v;
            else if (!strcmp(a, "--prefix-burst-ms") && opt_double(val, &g_opt.prefix_burst_ms))
                ;
            else if (!strcmp(a, "--trace"))
                g_opt.trace_file = val;
            else if (!strcmp(a, "--session-seconds") && opt_num(val, 1, 1LL << 31, &v))
                g_opt.session_seconds = v;
            else if (!strcmp(a, "--revoke-after") && opt_num(val, 1, LLONG_MAX, &v))
                g_opt.revoke_after = (uint64_t)v;
            else if (!strcmp(a, "--synth-list") && strrchr(val, ':') &&
                     strchr(val, '/') && strchr(val, '/') < strrchr(val, ':') &&
                     opt_num(strrchr(val, ':') + 1, 1, 100000000, &v)) {
                g_opt.synth_name = val;
                g_opt.synth_name_len = (size_t)(strrchr(val, ':') - val);
                g_opt.synth_n = (uint64_t)v;
            }
            else {
                fprintf(stderr, "s3flash-sink: bad option or value: %s %s\n", a, val);
                return -1;
            }
        } else {
            fprintf(stderr, "s3flash-sink: unknown option or missing value: %s\n", a);
            return -1;
        }
    }
    return 0;
}

static int write_port_file(const char *path, int port)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 1, lfd = -1, sfd = -1;
    FILE *tf = NULL; /* --trace */
    uint64_t t0 = 0;
    struct worker *ws = NULL;
    int nstarted = 0;
    if (parse_args(argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    time_t now = time(NULL);
    http_date(now, g_last_modified, sizeof(g_last_modified));
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(g_last_modified_iso, sizeof(g_last_modified_iso), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
    g_salt = (uint32_t)mix64((uint64_t)now ^ ((uint64_t)getpid() << 32));

    g_pat = malloc(2 * (size_t)PAT_PERIOD);
    g_up.slots = calloc(g_opt.max_uploads, sizeof(*g_up.slots));
    if (!g_pat || !g_up.slots || !objmap_init() || !limits_init() ||
        !express_init()) {
        fprintf(stderr, "s3flash-sink: out of memory\n");
        goto out;
    }
    for (uint32_t i = 0; i < 2 * PAT_PERIOD; i++)
        g_pat[i] = (uint8_t)(((i % PAT_PERIOD) * PAT_MULT) >> 24);

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        perror("s3flash-sink: socket");
        goto out;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_opt.port)};
    if (inet_pton(AF_INET, g_opt.bind_addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "s3flash-sink: bad --bind address %s\n", g_opt.bind_addr);
        goto out;
    }
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1024) != 0) {
        perror("s3flash-sink: bind/listen");
        goto out;
    }
    socklen_t sl = sizeof(sa);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    int port = ntohs(sa.sin_port);

    sfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ws = calloc((size_t)g_opt.threads, sizeof(*ws));
    if (sfd < 0 || !ws) {
        fprintf(stderr, "s3flash-sink: cannot set up the workers\n");
        goto out;
    }
    g_workers = ws;
    for (int i = 0; i < g_opt.threads; i++)
        ws[i].ep = ws[i].hand_rd = ws[i].hand_wr = -1;
    for (int i = 0; i < g_opt.threads; i++) {
        struct worker *w = &ws[i];
        int pfd[2];
        w->idx = i;
        w->rng = mix64((g_opt.seed ? g_opt.seed : 1) * 0x9e3779b97f4a7c15ULL + (uint64_t)i);
        w->listen_fd = lfd;
        w->stop_fd = sfd;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->rbuf = malloc(g_opt.recv_buf);
        if (w->ep < 0 || !w->rbuf || pipe2(pfd, O_NONBLOCK | O_CLOEXEC) != 0) {
            fprintf(stderr, "s3flash-sink: cannot set up worker %d\n", i);
            goto out;
        }
        w->hand_rd = pfd[0];
        w->hand_wr = pfd[1];
        struct epoll_event el = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &g_listen_tag};
        struct epoll_event es = {.events = EPOLLIN, .data.ptr = &g_stop_tag};
        struct epoll_event eh = {.events = EPOLLIN, .data.ptr = &w->hand_rd};
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, lfd, &el) != 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, sfd, &es) != 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->hand_rd, &eh) != 0) {
            fprintf(stderr, "s3flash-sink: cannot set up worker %d\n", i);
            goto out;
        }
    }
    /* all workers exist before any can hand a connection to another */
    for (int i = 0; i < g_opt.threads; i++) {
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "s3flash-sink: cannot start worker %d\n", i);
            goto stop;
        }
        nstarted++;
    }
    if (g_opt.port_file && write_port_file(g_opt.port_file, port) != 0) {
        fprintf(stderr, "s3flash-sink: cannot write %s\n", g_opt.port_file);
        goto stop;
    }
    if (g_opt.print_port && (printf("port %d\n", port) < 0 || fflush(stdout) != 0)) {
        fprintf(stderr, "s3flash-sink: cannot write the port on stdout\n");
        goto stop;
    }
    if (!g_opt.quiet) {
        fprintf(stderr, "s3flash-sink: listening on %s:%d with %d threads", g_opt.bind_addr,
                port, g_opt.threads);
        if (g_opt.store_max)
            fprintf(stderr, ", storing up to %" PRIu64 " bytes", g_opt.store_max);
        fputc('\n', stderr);
    }
    /* until SIGINT/SIGTERM: a --trace line every 100 ms, the counts on SIGUSR1 */
    if (g_opt.trace_file && !(tf = fopen(g_opt.trace_file, "w"))) {
        fprintf(stderr, "s3flash-sink: cannot write %s\n", g_opt.trace_file);
        goto stop;
    }
    t0 = now_ns();
    struct timespec tick = {0, 100 * 1000000L};
    for (;;) {
        int sig = tf ? sigtimedwait(&set, NULL, &tick) : sigwaitinfo(&set, NULL);
        if (sig < 0 && tf && errno == EAGAIN)
            limits_trace(tf, t0);
        else if (sig == SIGUSR1)
            limits_stats();
        else if (sig >= 0)
            break;
    }
    rc = 0;
stop:
    atomic_store(&g_stop, true);
    uint64_t one64 = 1;
    if (write(sfd, &one64, sizeof(one64)) < 0)
        perror("s3flash-sink: eventfd");
    uint64_t nreq = 0, bin = 0, bout = 0;
    for (int i = 0; i < nstarted; i++) {
        pthread_join(ws[i].tid, NULL);
        nreq += ws[i].nreq;
        bin += ws[i].bytes_in;
        bout += ws[i].bytes_out;
    }
    if (tf) { /* and a last --trace line once the workers are done */
        limits_trace(tf, t0);
        fclose(tf);
    }
    for (int i = 0; i < g_opt.threads; i++)
        drop_handoffs(&ws[i]);
    if (!g_opt.quiet) {
        if (g_opt.store_max)
            fprintf(stderr, "s3flash-sink: store: %" PRIu64 " bytes held, %" PRIu64
                            " pooled for reuse, peak %" PRIu64 " of %" PRIu64 "\n",
                    g_pool.held, g_pool.pooled, g_pool.peak, g_opt.store_max);
        fprintf(stderr, "s3flash-sink: %" PRIu64 " requests, %" PRIu64 " body bytes in, %" PRIu64
                        " body bytes out\n", nreq, bin, bout);
        if (g_opt.synth_n)
            fprintf(stderr, "s3flash-sink: synth-list: %" PRIu64 " pages served\n",
                    (uint64_t)atomic_load(&g_synth_pages));
        limits_report();
        express_report(stderr);
    }
out:
    if (ws)
        for (int i = 0; i < g_opt.threads; i++) {
            if (ws[i].ep >= 0)
                close(ws[i].ep);
            if (ws[i].hand_rd >= 0) {
                close(ws[i].hand_rd);
                close(ws[i].hand_wr);
            }
            free(ws[i].rbuf);
        }
    free(ws);
    if (sfd >= 0)
        close(sfd);
    if (lfd >= 0)
        close(lfd);
    if (g_up.slots)
        for (uint32_t i = 0; i < g_opt.max_uploads; i++)
            if (g_up.slots[i].used)
                upload_release(&g_up.slots[i]);
    free(g_up.slots);
    objmap_free();
    ck_free();
    pool_free();
    limits_free();
    express_free();
    free(g_pat);
    return rc;
}

