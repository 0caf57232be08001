/*
 * s3flash-sink: S3-like limits, so that a client sees on loopback what it sees from S3 (see
 * bench/README.md, "The S3-like mode", for the options, their defaults and their sources):
 *   - a byte rate per connection, what the sink sends (pacing) and what it receives (a read
 *     budget: the sink stops reading, TCP's flow control stops the sender), and optionally one
 *     for all connections together: token buckets (struct bucket), because this kernel has no
 *     fq qdisc for SO_MAX_PACING_RATE;
 *   - a first-byte latency per response, drawn from a lognormal distribution given by its
 *     median and p99 (seeded, one generator per worker), never below a floor;
 *   - request rates per key prefix, GET/HEAD and the rest (PUT, POST, DELETE, copies)
 *     counted apart as S3 documents them; a request over its prefix's rate is answered
 *     503 SlowDown (after its body is read);
 *   - --trace: a line every 100 ms with the connections open and busy and the bytes moved.
 * A connection that must wait sleeps: no epoll interest and a wake time (conn->wake_ns) that
 * its worker's loop honours (sink_http.c). Nothing here runs without an option that asks.
 */
#include "sink.h"

struct lim_stats g_lim;
bool g_lim_bytes, g_lim_timers;

static struct {
    pthread_mutex_t mu;
    struct bucket send, recv;
} g_total = {.mu = PTHREAD_MUTEX_INITIALIZER};

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A bucket for rate bytes/s: it moves at least a quantum (5 ms of its rate, 16 KiB to
 * 1 MiB) at a time, so that a paced connection wakes a few hundred times a second at most,
 * and saves up to four quanta (20 ms) while idle. */
static void bucket_init(struct bucket *b, double rate, uint64_t now)
{
    b->rate = rate;
    b->quantum = rate / 200;
    if (b->quantum < 16384)
        b->quantum = 16384;
    if (b->quantum > 1048576)
        b->quantum = 1048576;
    b->burst = 4 * b->quantum;
    b->tokens = b->burst;
    b->last_ns = now;
}

static void bucket_refill(struct bucket *b, uint64_t now)
{
    if (now > b->last_ns) {
        b->tokens += (double)(now - b->last_ns) * b->rate / 1e9;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ns = now;
    }
}

/* How many of want bytes the bucket allows now: all it holds (up to want) once it holds a
 * quantum or want, else 0 and *wake set to when it will. */
static size_t bucket_allow(struct bucket *b, size_t want, uint64_t now, uint64_t *wake)
{
    bucket_refill(b, now);
    double need = (double)want < b->quantum ? (double)want : b->quantum;
    if (b->tokens >= need)
        return b->tokens >= (double)want ? want : (size_t)b->tokens;
    uint64_t w = now + (uint64_t)((need - b->tokens) * 1e9 / b->rate) + 1;
    if (w > *wake)
        *wake = w;
    return 0;
}

void limits_conn_init(struct conn *c)
{
    uint64_t now = g_lim_bytes ? now_ns() : 0;
    memset(&c->lim_send, 0, sizeof(c->lim_send));
    memset(&c->lim_recv, 0, sizeof(c->lim_recv));
    if (g_opt.conn_send_rate > 0)
        bucket_init(&c->lim_send, g_opt.conn_send_rate, now);
    if (g_opt.conn_recv_rate > 0)
        bucket_init(&c->lim_recv, g_opt.conn_recv_rate, now);
    c->wake_ns = c->fb_due = 0;
    c->fb_done = false;
    c->busy = false;
}

/* How many of want bytes connection c may move in direction d now (its own bucket and the
 * total's); 0 with *wake set (an absolute CLOCK_MONOTONIC time) when it must wait. The caller
 * reports what it moved with limit_used. */
size_t limit_io(struct conn *c, enum dir d, size_t want, uint64_t *wake)
{
    if (!g_lim_bytes || want == 0)
        return want;
    uint64_t now = now_ns();
    *wake = 0;
    struct bucket *cb = d == DIR_SEND ? &c->lim_send : &c->lim_recv;
    if (cb->rate > 0)
        want = bucket_allow(cb, want, now, wake);
    struct bucket *tb = d == DIR_SEND ? &g_total.send : &g_total.recv;
    if (want && tb->rate > 0) {
        pthread_mutex_lock(&g_total.mu);
        want = bucket_allow(tb, want, now, wake);
        pthread_mutex_unlock(&g_total.mu);
    }
    return want;
}

/* n bytes moved in direction d: taken from the buckets (they may go into debt: bytes that
 * arrived with a request head are counted after the fact). */
void limit_used(struct conn *c, enum dir d, size_t n)
{
    if (g_opt.trace_file)
        atomic_fetch_add_explicit(d == DIR_SEND ? &g_lim.bytes_out : &g_lim.bytes_in, n,
                                  memory_order_relaxed);
    if (!g_lim_bytes || n == 0)
        return;
    struct bucket *cb = d == DIR_SEND ? &c->lim_send : &c->lim_recv;
    if (cb->rate > 0)
        cb->tokens -= (double)n;
    struct bucket *tb = d == DIR_SEND ? &g_total.send : &g_total.recv;
    if (tb->rate > 0) {
        pthread_mutex_lock(&g_total.mu);
        tb->tokens -= (double)n;
        pthread_mutex_unlock(&g_total.mu);
    }
}

/* ---- first-byte latency ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    return mix64(*s);
}

static double rng_unit(uint64_t *s) /* (0, 1) */
{
    return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

/* The first-byte delay of the next response on worker w, in ns: exp(mu + sigma * z) with
 * mu = ln(median) and sigma = ln(p99 / median) / 2.3263 (z's 99th percentile), z a standard
 * normal (Box-Muller); at least --first-byte-min-ms; 0 when no latency is set. */
uint64_t limit_first_byte_ns(struct worker *w)
{
    if (g_opt.fb_median_ms <= 0)
        return g_opt.fb_min_ms > 0 ? (uint64_t)(g_opt.fb_min_ms * 1e6) : 0;
    double sigma = 0;
    if (g_opt.fb_p99_ms > g_opt.fb_median_ms)
        sigma = log(g_opt.fb_p99_ms / g_opt.fb_median_ms) / 2.3263478740;
    double u1 = rng_unit(&w->rng), u2 = rng_unit(&w->rng);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    double ms = g_opt.fb_median_ms * exp(sigma * z);
    if (ms < g_opt.fb_min_ms)
        ms = g_opt.fb_min_ms;
    if (ms > 600000)
        ms = 600000;
    return (uint64_t)(ms * 1e6);
}

/* ---- request rates per prefix ----
 * A prefix is "bucket/" and the key up to and including its Nth '/' (--prefix-depth N; 0:
 * the whole bucket is one prefix; a key with fewer '/' has the prefix up to its last '/').
 * S3 partitions a bucket by key prefix and gives each partition the documented rates; which
 * prefixes it splits off depends on the load it has seen, so a fixed depth stands for a
 * bucket S3 has already partitioned at that level (documented in bench/README.md). */
struct pfx {
    struct pfx *next;
    uint64_t hash;
    struct bucket get, put;
    size_t len;
    char name[];
};
#define PFX_SLOTS 4096u
#define PFX_MAX 100000u
static struct {
    pthread_mutex_t mu;
    struct pfx *slot[PFX_SLOTS];
    size_t count;
} g_pfx = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void rate_init(struct bucket *b, double rate, uint64_t now)
{
    b->rate = rate;
    b->burst = rate * g_opt.prefix_burst_ms / 1000;
    if (b->burst < 1)
        b->burst = 1;
    b->quantum = 1;
    b->tokens = b->burst;
    b->last_ns = now;
}

/* Whether request r may go ahead under its prefix's rate (true when no rate applies);
 * counts it either way. Bucket-level requests (no key) are not limited. */
bool limit_prefix_admit(const struct req *r)
{
    bool get = r->method == M_GET || r->method == M_HEAD;
    double rate = get ? g_opt.prefix_get_rate : g_opt.prefix_put_rate;
    if (rate <= 0 || r->key_len == 0)
        return true;
    size_t n = r->bucket_len + 1, slashes = 0;
    size_t last = n; /* the prefix's end: after the last '/' seen within the depth */
    for (size_t i = 0; i < r->key_len && slashes < (size_t)g_opt.prefix_depth; i++)
        if (r->key[i] == '/') {
            slashes++;
            last = r->bucket_len + 1 + i + 1;
        }
    n = last;
    const char *name = r->name; /* "bucket/key": the prefix is its first n bytes */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)name[i];
        h *= 0x100000001b3ULL;
    }
    uint64_t now = now_ns();
    bool ok = true;
    pthread_mutex_lock(&g_pfx.mu);
    struct pfx **pp = &g_pfx.slot[h % PFX_SLOTS];
    while (*pp && !((*pp)->hash == h && (*pp)->len == n && !memcmp((*pp)->name, name, n)))
        pp = &(*pp)->next;
    struct pfx *p = *pp;
    if (!p && g_pfx.count < PFX_MAX && (p = calloc(1, sizeof(*p) + n)) != NULL) {
        p->hash = h;
        p->len = n;
        memcpy(p->name, name, n);
        rate_init(&p->get, g_opt.prefix_get_rate, now);
        rate_init(&p->put, g_opt.prefix_put_rate, now);
        *pp = p;
        g_pfx.count++;
    }
    if (p) { /* (no memory for a new prefix: not limited) */
        struct bucket *b = get ? &p->get : &p->put;
        bucket_refill(b, now);
        if (b->tokens >= 1)
            b->tokens -= 1;
        else
            ok = false;
    }
    pthread_mutex_unlock(&g_pfx.mu);
    if (get)
        atomic_fetch_add(ok ? &g_lim.admitted_get : &g_lim.slowdown_get, 1);
    else
        atomic_fetch_add(ok ? &g_lim.admitted_put : &g_lim.slowdown_put, 1);
    if (!ok && g_opt.verbose)
        fprintf(stderr, "SlowDown %.*s %s\n", (int)n, name, get ? "GET/HEAD" : "PUT/POST/DELETE");
    return ok;
}

/* ---- set-up, trace and report ---- */

bool limits_init(void)
{
    uint64_t now = now_ns();
    if (g_opt.total_send_rate > 0)
        bucket_init(&g_total.send, g_opt.total_send_rate, now);
    if (g_opt.total_recv_rate > 0)
        bucket_init(&g_total.recv, g_opt.total_recv_rate, now);
    g_lim_bytes = g_opt.conn_send_rate > 0 || g_opt.conn_recv_rate > 0 ||
                  g_opt.total_send_rate > 0 || g_opt.total_recv_rate > 0;
    g_lim_timers = g_lim_bytes || g_opt.fb_median_ms > 0 || g_opt.fb_min_ms > 0;
    return true;
}

void limits_free(void)
{
    for (size_t i = 0; i < PFX_SLOTS; i++)
        while (g_pfx.slot[i]) {
            struct pfx *p = g_pfx.slot[i];
            g_pfx.slot[i] = p->next;
            free(p);
        }
}

/* One --trace line: ms since t0, connections open, connections with a request in
 * progress, body bytes received and bytes sent (heads and bodies) so far. */
void limits_trace(FILE *f, uint64_t t0)
{
    fprintf(f, "%" PRIu64 " %d %d %" PRIu64 " %" PRIu64 "\n", (now_ns() - t0) / 1000000,
            atomic_load(&g_nconns), atomic_load(&g_lim.active),
            (uint64_t)atomic_load(&g_lim.bytes_in), (uint64_t)atomic_load(&g_lim.bytes_out));
    fflush(f);
}

/* The limits' counts at exit (stderr), when any limit was set. */
void limits_report(void)
{
    if (g_opt.prefix_get_rate > 0 || g_opt.prefix_put_rate > 0)
        fprintf(stderr, "s3flash-sink: prefix limits: %" PRIu64 " GET/HEAD and %" PRIu64
                        " other requests admitted, %" PRIu64 " GET/HEAD and %" PRIu64
                        " other answered 503 SlowDown, %zu prefixes\n",
                (uint64_t)atomic_load(&g_lim.admitted_get),
                (uint64_t)atomic_load(&g_lim.admitted_put),
                (uint64_t)atomic_load(&g_lim.slowdown_get),
                (uint64_t)atomic_load(&g_lim.slowdown_put), g_pfx.count);
}
