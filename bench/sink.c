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
 * belongs to one worker. Only the object map and the multipart table are shared (mutexes). The
 * main thread waits for SIGINT/SIGTERM, then wakes the workers through an eventfd.
 *
 * Deliberately standalone (libc + pthreads only): the reference server must not share code, and
 * so bugs, with the client it measures.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- the data pattern ----
 * Byte i of every GET body (i = offset in the object) is
 *     pattern(i) = ((i mod 1048573) * 2654435761 mod 2^32) >> 24
 * 1048573 is a prime just under 1 MiB, so part-sized shifts (multiples of 2^k) of the data are
 * never invisible, as they would be with a 1 MiB period. The buffer holds two periods so that
 * any window of up to one period starting anywhere is contiguous. */
#define PAT_PERIOD 1048573u
#define PAT_MULT 2654435761u
static uint8_t *g_pat; /* 2 * PAT_PERIOD bytes, read-only once built */

#define HDR_CAP 16384u           /* request line + headers; more is 431 */
#define OUT_CAP 24576u           /* response headers + XML body (keys escaped: 6x) */
#define KEY_MAX 1024u            /* S3's key length limit */
#define MAX_CKS 8                /* echoed x-amz-checksum-* headers */
#define CK_VAL_MAX 256u          /* longest echoed checksum value */
#define MAX_PARTS 10000u
#define COMPLETE_BODY_CAP (4u << 20)
#define DRIVE_BUDGET (8u << 20)  /* bytes one connection may move per wakeup (fairness) */
#define SEND_IOVS 8

/* ---- options ---- */
struct opts {
    const char *bind_addr;
    int port;
    const char *port_file;
    int threads;
    int max_conns;
    size_t max_objects;
    uint32_t max_uploads;
    size_t recv_buf;
    bool verbose;
    bool quiet;
    uint64_t store_max; /* --store: 0 = discard bodies (the default), else keep up to this */
    bool keep_checksums; /* --keep-checksums: whole-object checksums served on HEAD/GET */
};
static struct opts g_opt = {"127.0.0.1", 0, NULL, 2, 1024, 1000000, 4096, 256u << 10, false,
                            false, 0, false};

static atomic_bool g_stop;
static atomic_int g_nconns;
static char g_last_modified[64]; /* HTTP date of the sink's start, the Last-Modified of all */
static char g_last_modified_iso[64];
static uint32_t g_salt;

/* ---- small helpers ---- */

/* 64-bit mix (splitmix64's finalizer). */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* FNV-1a over bytes, then mixed; seed separates uses. */
static uint64_t hash_bytes(const char *p, size_t n, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 0x100000001b3ULL;
    }
    return mix64(h);
}

/* Writes a 32-hex-digit fake ETag body (no quotes) for (name, size) into out[33]. */
static void fake_etag(const char *name, size_t n, uint64_t size, char *out)
{
    uint64_t h1 = hash_bytes(name, n, size);
    uint64_t h2 = mix64(h1 ^ (size * 0x9e3779b97f4a7c15ULL));
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, h1, h2);
}

/* Parses decimal digits [p, p+n) into *out; false on empty, non-digit or overflow past 2^62. */
static bool parse_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 19)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (UINT64_C(1) << 62))
        return false;
    *out = v;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes [s, s+n) into out (room for n bytes); '+' is kept (S3 keys). Returns the
 * decoded length; malformed escapes are copied through. */
static size_t pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static void http_date(time_t t, char *buf, size_t n)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* ---- output buffer (bounded; overflow is remembered, never written past) ---- */
struct ob {
    char *p;
    size_t len, cap;
    bool overflow;
};

static void ob_put(struct ob *b, const char *s, size_t n)
{
    if (n == 0) /* s may be NULL (an absent list prefix): memcpy must not see it */
        return;
    if (b->overflow || n > b->cap - b->len) {
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void ob_str(struct ob *b, const char *s)
{
    ob_put(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void ob_printf(struct ob *b, const char *fmt, ...)
{
    va_list ap;
    if (b->overflow)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->overflow = true;
    else
        b->len += (size_t)n;
}

/* Appends s XML-escaped. */
static void ob_xml(struct ob *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = NULL;
        switch (s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        case '\'': e = "&apos;"; break;
        default: break;
        }
        if (e) {
            ob_put(b, s + run, i - run);
            ob_str(b, e);
            run = i + 1;
        }
    }
    ob_put(b, s + run, n - run);
}

/* ---- store mode (--store MAX): the bytes of objects and parts, in reusable buffers ----
 * Every buffer is counted by its capacity. held = buffers holding data (objects, parts, bodies
 * being received); pooled = freed buffers kept for reuse (pages already faulted in: fresh
 * memory faults slowly). held + pooled never exceeds --store: a buffer that does not fit
 * evicts pooled ones, and if it still does not fit the request is refused (507). Buffers over
 * 4 KiB come in size classes of 8 steps per power of two (at most 12.5% slack); a freed
 * buffer goes back to its class's list. Smaller ones are plain malloc/free. */
#define POOL_MIN 4096u
#define POOL_CLASSES (64 * 8)
struct pooled {
    struct pooled *next;
};
static struct {
    pthread_mutex_t mu;
    uint64_t held, pooled, peak;
    struct pooled *cls[POOL_CLASSES];
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER};
static atomic_uint_fast64_t g_ver; /* store mode: version of each object written (ETag) */

/* The capacity a request for n bytes gets, and its class index (-1: plain malloc). */
static uint64_t pool_cap(uint64_t n, int *cls)
{
    if (n <= POOL_MIN) {
        *cls = -1;
        return n ? n : 1;
    }
    int e = 63 - __builtin_clzll(n - 1); /* 2^e <= n-1 < 2^(e+1), e >= 12 */
    int shift = e - 3;
    uint64_t m = ((n - 1) >> shift) + 1; /* 9..16 */
    *cls = shift * 8 + (int)(m - 9);
    return m << shift;
}

/* A buffer of at least n bytes (*cap set), or NULL when it would exceed --store (or malloc
 * fails). Thread-safe. */
static uint8_t *buf_get(uint64_t n, uint64_t *cap)
{
    int cls;
    uint64_t c = pool_cap(n, &cls);
    uint8_t *p = NULL;
    pthread_mutex_lock(&g_pool.mu);
    if (cls >= 0 && g_pool.cls[cls]) {
        struct pooled *b = g_pool.cls[cls];
        g_pool.cls[cls] = b->next;
        g_pool.pooled -= c;
        p = (uint8_t *)b;
    } else {
        /* make room: free pooled buffers, largest classes first */
        for (int i = POOL_CLASSES - 1; i >= 0 && g_pool.held + g_pool.pooled + c >
                                                     g_opt.store_max; i--) {
            while (g_pool.cls[i] && g_pool.held + g_pool.pooled + c > g_opt.store_max) {
                struct pooled *b = g_pool.cls[i];
                g_pool.cls[i] = b->next;
                g_pool.pooled -= (uint64_t)(9 + i % 8) << (i / 8);
                free(b);
            }
        }
        if (g_pool.held + g_pool.pooled + c > g_opt.store_max) {
            pthread_mutex_unlock(&g_pool.mu);
            return NULL;
        }
    }
    g_pool.held += c;
    if (g_pool.held > g_pool.peak)
        g_pool.peak = g_pool.held;
    pthread_mutex_unlock(&g_pool.mu);
    if (!p && (c > SIZE_MAX || !(p = malloc((size_t)c)))) {
        pthread_mutex_lock(&g_pool.mu);
        g_pool.held -= c;
        pthread_mutex_unlock(&g_pool.mu);
        return NULL;
    }
    *cap = c;
    return p;
}

/* Gives back a buffer from buf_get (cap as returned). NULL is ignored. */
static void buf_put(uint8_t *p, uint64_t cap)
{
    if (!p)
        return;
    int cls;
    pool_cap(cap, &cls);
    pthread_mutex_lock(&g_pool.mu);
    g_pool.held -= cap;
    if (cls >= 0) {
        struct pooled *b = (struct pooled *)(void *)p;
        b->next = g_pool.cls[cls];
        g_pool.cls[cls] = b;
        g_pool.pooled += cap;
        p = NULL;
    }
    pthread_mutex_unlock(&g_pool.mu);
    free(p);
}

static void pool_free(void)
{
    for (int i = 0; i < POOL_CLASSES; i++)
        while (g_pool.cls[i]) {
            struct pooled *b = g_pool.cls[i];
            g_pool.cls[i] = b->next;
            free(b);
        }
    g_pool.pooled = 0;
}

/* A stretch of stored bytes: object data, a part, or a body being received. */
struct seg {
    uint8_t *p;
    uint64_t len, cap;
    uint64_t start; /* offset in its object (blobs only) */
};

/* An object's bytes: its parts in part-number order (one segment for a PutObject). Shared by
 * the map and the GETs sending from it; freed when the last reference goes. */
struct blob {
    atomic_uint refs;
    uint32_t nseg;
    uint64_t size;
    struct seg seg[];
};

static struct blob *blob_new(uint32_t nseg)
{
    struct blob *b = calloc(1, sizeof(*b) + (size_t)nseg * sizeof(struct seg));
    if (b) {
        atomic_init(&b->refs, 1);
        b->nseg = nseg;
    }
    return b;
}

static void blob_unref(struct blob *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    for (uint32_t i = 0; i < b->nseg; i++)
        buf_put(b->seg[i].p, b->seg[i].cap);
    free(b);
}

/* The index of the segment holding offset off (off < size). */
static uint32_t blob_seg_at(const struct blob *b, uint64_t off)
{
    uint32_t lo = 0, hi = b->nseg; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->seg[mid].start <= off)
            lo = mid;
        else
            hi = mid;
    }
    while (lo + 1 < b->nseg && b->seg[lo].len == 0) /* skip empty parts */
        lo++;
    return lo;
}

/* ---- the object map: "bucket/key" -> size (and, in store mode, the bytes), sharded ---- */
struct obj {
    struct obj *next;
    uint64_t hash;
    uint64_t size;
    uint64_t ver;       /* store mode: a new number for every write (ETag); else 0 */
    struct blob *data;  /* store mode: the bytes; else NULL */
    uint32_t nparts; /* 0: single PUT; N: completed from N parts (ETag "...-N") */
    uint32_t klen;
    char key[];
};

#define NSHARDS 64
struct shard {
    pthread_mutex_t mu;
    struct obj **tab;
    size_t mask;
    size_t count;
};
static struct shard g_shards[NSHARDS];
static atomic_size_t g_nobjs;
static atomic_bool g_objs_full_warned;

static bool objmap_init(void)
{
    for (int i = 0; i < NSHARDS; i++) {
        pthread_mutex_init(&g_shards[i].mu, NULL);
        g_shards[i].tab = calloc(256, sizeof(struct obj *));
        if (!g_shards[i].tab)
            return false;
        g_shards[i].mask = 255;
    }
    return true;
}

static void objmap_free(void)
{
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &g_shards[i];
        if (!s->tab)
            continue;
        for (size_t j = 0; j <= s->mask; j++) {
            struct obj *o = s->tab[j], *nx;
            for (; o; o = nx) {
                nx = o->next;
                blob_unref(o->data);
                free(o);
            }
        }
        free(s->tab);
        s->tab = NULL;
        pthread_mutex_destroy(&s->mu);
    }
}

static struct obj **objmap_slot(struct shard *s, uint64_t h, const char *k, size_t n)
{
    struct obj **pp = &s->tab[h & s->mask];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == n && memcmp((*pp)->key, k, n) == 0)
            break;
    return pp;
}

/* Doubles a shard's table; on allocation failure keeps the old one (longer chains). Lock held. */
static void objmap_grow(struct shard *s)
{
    size_t ncap = (s->mask + 1) * 2;
    struct obj **nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return;
    for (size_t j = 0; j <= s->mask; j++) {
        struct obj *o = s->tab[j], *nx;
        for (; o; o = nx) {
            nx = o->next;
            o->next = nt[o->hash & (ncap - 1)];
            nt[o->hash & (ncap - 1)] = o;
        }
    }
    free(s->tab);
    s->tab = nt;
    s->mask = ncap - 1;
}

/* Records key -> (size, nparts, data); the map takes over the reference to data (NULL
 * outside store mode) and *ver gets the object's version (0 outside store mode). When the map
 * is full (or memory runs out) the key is not remembered: false, and a warning is printed
 * once (data is then released). Thread-safe. */
static bool objmap_put(const char *k, size_t n, uint64_t size, uint32_t nparts,
                       struct blob *data, uint64_t *ver)
{
    uint64_t h = hash_bytes(k, n, 0);
    struct shard *s = &g_shards[h >> 58];
    struct blob *old = NULL;
    bool ok = true;
    uint64_t v = g_opt.store_max ? atomic_fetch_add(&g_ver, 1) + 1 : 0;
    if (ver)
        *ver = v;
    pthread_mutex_lock(&s->mu);
    struct obj **pp = objmap_slot(s, h, k, n);
    if (*pp) {
        (*pp)->size = size;
        (*pp)->nparts = nparts;
        (*pp)->ver = v;
        old = (*pp)->data;
        (*pp)->data = data;
        goto out;
    }
    if (atomic_fetch_add(&g_nobjs, 1) >= g_opt.max_objects) {
        atomic_fetch_sub(&g_nobjs, 1);
        goto full;
    }
    struct obj *o = malloc(sizeof(*o) + n);
    if (!o) {
        atomic_fetch_sub(&g_nobjs, 1);
        goto full;
    }
    o->hash = h;
    o->size = size;
    o->nparts = nparts;
    o->ver = v;
    o->data = data;
    o->klen = (uint32_t)n;
    memcpy(o->key, k, n);
    o->next = NULL;
    *pp = o;
    if (++s->count > (s->mask + 1) / 4 * 3)
        objmap_grow(s);
    goto out;
full:
    ok = false;
    old = data;
    if (!atomic_exchange(&g_objs_full_warned, true))
        fprintf(stderr, "s3flash-sink: object map full (%zu keys): new keys are %s\n",
                g_opt.max_objects, g_opt.store_max ? "refused (507)"
                                                   : "accepted but not remembered");
out:
    pthread_mutex_unlock(&s->mu);
    blob_unref(old);
    return ok;
}

/* Looks key up: its size, part count and version; with data non-NULL also a reference to its
 * bytes (store mode; the caller unrefs it). */
static bool objmap_get(const char *k, size_t n, uint64_t *size, uint32_t *nparts, uint64_t *ver,
                       struct blob **data)
{
    uint64_t h = hash_bytes(k, n, 0);
    struct shard *s = &g_shards[h >> 58];
    pthread_mutex_lock(&s->mu);
    struct obj **pp = objmap_slot(s, h, k, n);
    bool found = *pp != NULL;
    if (found) {
        *size = (*pp)->size;
        *nparts = (*pp)->nparts;
        *ver = (*pp)->ver;
        if (data) {
            *data = (*pp)->data;
            if (*data)
                atomic_fetch_add(&(*data)->refs, 1);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static bool objmap_del(const char *k, size_t n)
{
    uint64_t h = hash_bytes(k, n, 0);
    struct shard *s = &g_shards[h >> 58];
    pthread_mutex_lock(&s->mu);
    struct obj **pp = objmap_slot(s, h, k, n);
    struct obj *o = *pp;
    if (o) {
        *pp = o->next;
        s->count--;
        atomic_fetch_sub(&g_nobjs, 1);
    }
    pthread_mutex_unlock(&s->mu);
    if (o)
        blob_unref(o->data);
    free(o);
    return o != NULL;
}

/* Looks the object up; unknown keys whose last "size-" is followed by digits only (to the end)
 * have that size (not in store mode: there only what was written exists). False: no such
 * key. data: as for objmap_get. */
static bool object_size(const char *k, size_t n, uint64_t *size, uint32_t *nparts,
                        uint64_t *ver, struct blob **data)
{
    if (data)
        *data = NULL;
    *ver = 0;
    if (objmap_get(k, n, size, nparts, ver, data))
        return true;
    if (g_opt.store_max)
        return false;
    for (size_t i = n; i >= 5; i--) {
        if (memcmp(k + i - 5, "size-", 5) == 0) {
            *nparts = 0;
            return parse_u64(k + i, n - i, size);
        }
    }
    return false;
}

/* ---- multipart uploads: a slot table; the id names the slot and its generation ---- */
struct upload {
    bool used;
    uint32_t gen;
    char *key; /* "bucket/key" */
    size_t klen;
    uint64_t *parts; /* parts[i] = size of part i+1, UINT64_MAX if not uploaded */
    struct seg *pdata; /* store mode: pdata[i] = the bytes of part i+1 (p NULL: none) */
    uint32_t parts_cap;
};
static struct {
    pthread_mutex_t mu;
    struct upload *slots;
    uint32_t next;
    uint32_t used;
} g_up = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define UPLOAD_ID_LEN 24

static void upload_release(struct upload *u)
{
    if (u->pdata)
        for (uint32_t i = 0; i < u->parts_cap; i++)
            buf_put(u->pdata[i].p, u->pdata[i].cap);
    free(u->key);
    free(u->parts);
    free(u->pdata);
    u->key = NULL;
    u->parts = NULL;
    u->pdata = NULL;
    u->parts_cap = 0;
    u->used = false;
    g_up.used--;
}

/* Creates an upload for key; writes its id (UPLOAD_ID_LEN chars + NUL) to id.
 * Returns 0, or 503 when the table is full, 500 when memory runs out. */
static int upload_new(const char *k, size_t n, char *id)
{
    int rc = 0;
    pthread_mutex_lock(&g_up.mu);
    if (g_up.used >= g_opt.max_uploads) {
        rc = 503;
        goto out;
    }
    uint32_t i = g_up.next;
    while (g_up.slots[i].used)
        i = (i + 1) % g_opt.max_uploads;
    struct upload *u = &g_up.slots[i];
    u->key = malloc(n ? n : 1);
    if (!u->key) {
        rc = 500;
        goto out;
    }
    memcpy(u->key, k, n);
    u->klen = n;
    u->gen++;
    u->used = true;
    g_up.used++;
    g_up.next = (i + 1) % g_opt.max_uploads;
    snprintf(id, UPLOAD_ID_LEN + 1, "%08" PRIx32 "%08" PRIx32 "%08" PRIx32, i, u->gen, g_salt);
out:
    pthread_mutex_unlock(&g_up.mu);
    return rc;
}

/* Finds the upload named by id for key. Lock held by the caller. */
static struct upload *upload_find(const char *id, size_t idlen, const char *k, size_t n)
{
    char tmp[9];
    uint32_t v[3];
    if (idlen != UPLOAD_ID_LEN)
        return NULL;
    for (int j = 0; j < 3; j++) {
        memcpy(tmp, id + 8 * j, 8);
        tmp[8] = 0;
        for (int c = 0; c < 8; c++)
            if (hexval(tmp[c]) < 0)
                return NULL;
        v[j] = (uint32_t)strtoul(tmp, NULL, 16);
    }
    if (v[0] >= g_opt.max_uploads || v[2] != g_salt)
        return NULL;
    struct upload *u = &g_up.slots[v[0]];
    if (!u->used || u->gen != v[1] || u->klen != n || memcmp(u->key, k, n) != 0)
        return NULL;
    return u;
}

/* Records the size of part pn, and in store mode its bytes (*data, taken over on success:
 * then cleared). Returns 0, 404 (no such upload) or 500 (no memory). */
static int upload_part(const char *id, size_t idlen, const char *k, size_t n, uint32_t pn,
                       uint64_t size, struct seg *data)
{
    int rc = 0;
    struct seg old = {0};
    pthread_mutex_lock(&g_up.mu);
    struct upload *u = upload_find(id, idlen, k, n);
    if (!u) {
        rc = 404;
        goto out;
    }
    if (pn > u->parts_cap) {
        uint32_t ncap = u->parts_cap ? u->parts_cap : 16;
        while (ncap < pn)
            ncap *= 2;
        if (ncap > MAX_PARTS)
            ncap = MAX_PARTS;
        uint64_t *np = realloc(u->parts, ncap * sizeof(*np));
        if (!np) {
            rc = 500;
            goto out;
        }
        u->parts = np;
        if (g_opt.store_max) {
            struct seg *nd = realloc(u->pdata, ncap * sizeof(*nd));
            if (!nd) {
                rc = 500;
                goto out;
            }
            for (uint32_t j = u->parts_cap; j < ncap; j++)
                nd[j] = (struct seg){0};
            u->pdata = nd;
        }
        for (uint32_t j = u->parts_cap; j < ncap; j++)
            np[j] = UINT64_MAX;
        u->parts_cap = ncap;
    }
    u->parts[pn - 1] = size;
    if (u->pdata) {
        old = u->pdata[pn - 1];
        u->pdata[pn - 1] = *data;
        *data = (struct seg){0};
    }
out:
    pthread_mutex_unlock(&g_up.mu);
    buf_put(old.p, old.cap); /* a re-sent part: the bytes it replaces */
    return rc;
}

/* Aborts an upload. Returns 0 or 404. */
static int upload_abort(const char *id, size_t idlen, const char *k, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&g_up.mu);
    struct upload *u = upload_find(id, idlen, k, n);
    if (u)
        upload_release(u);
    else
        rc = 404;
    pthread_mutex_unlock(&g_up.mu);
    return rc;
}

/* The next <PartNumber>N</PartNumber> of a CompleteMultipartUpload body at or after *p:
 * 1 with *pn set and *p past the digits, 0 when there is none, -1 when N is not a number. */
static int next_part_number(const char **p, const char *end, uint64_t *pn)
{
    static const char tag[] = "<PartNumber>";
    const char *t = memmem(*p, (size_t)(end - *p), tag, sizeof(tag) - 1);
    if (!t)
        return 0;
    t += sizeof(tag) - 1;
    const char *q = t;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    *p = q;
    return parse_u64(t, (size_t)(q - t), pn) ? 1 : -1;
}

/* Completes an upload from the part numbers listed in the CompleteMultipartUpload body (each
 * <PartNumber>N</PartNumber>, strictly ascending, each uploaded). On success records the object
 * (sum of the listed parts' sizes) and frees the upload. Returns 0 with *size and *nparts set,
 * or 404 NoSuchUpload, 400 with *code set (InvalidPart, InvalidPartOrder, MalformedXML). */
static int upload_complete(const char *id, size_t idlen, const char *k, size_t n,
                           const char *body, size_t blen, uint64_t *size, uint32_t *nparts,
                           uint64_t *ver, const char **code)
{
    int rc = 0;
    struct blob *data = NULL;
    uint64_t total = 0;
    uint32_t count = 0, last = 0;
    pthread_mutex_lock(&g_up.mu);
    struct upload *u = upload_find(id, idlen, k, n);
    if (!u) {
        rc = 404;
        goto out;
    }
    const char *p = body, *end = body + blen;
    uint64_t pn;
    int got;
    while ((got = next_part_number(&p, end, &pn)) != 0) {
        if (got < 0 || pn < 1 || pn > MAX_PARTS) {
            rc = 400;
            *code = "MalformedXML";
            goto out;
        }
        if (pn <= last) {
            rc = 400;
            *code = "InvalidPartOrder";
            goto out;
        }
        if (pn > u->parts_cap || u->parts[pn - 1] == UINT64_MAX) {
            rc = 400;
            *code = "InvalidPart";
            goto out;
        }
        total += u->parts[pn - 1];
        last = (uint32_t)pn;
        count++;
    }
    if (count == 0) {
        rc = 400;
        *code = "MalformedXML";
        goto out;
    }
    if (u->pdata) {
        /* the listed parts' bytes, in part-number order, become the object's */
        data = blob_new(count);
        if (!data) {
            rc = 500;
            *code = "InternalError";
            goto out;
        }
        uint32_t i = 0;
        uint64_t off = 0;
        for (p = body; next_part_number(&p, end, &pn) > 0;) { /* checked in the first pass */
            data->seg[i] = u->pdata[pn - 1];
            data->seg[i].start = off;
            off += data->seg[i].len;
            u->pdata[pn - 1] = (struct seg){0};
            i++;
        }
        data->size = off;
    }
    upload_release(u); /* frees the parts not listed */
    *size = total;
    *nparts = count;
out:
    pthread_mutex_unlock(&g_up.mu);
    if (rc == 0 && !objmap_put(k, n, total, count, data, ver) && g_opt.store_max) {
        rc = 507;
        *code = "InsufficientStorage";
    }
    return rc;
}

/* ---- whole-object checksums (--keep-checksums), for tests ----
 * The x-amz-checksum-<alg> value given with a PUT, or with a CompleteMultipartUpload that
 * says x-amz-checksum-type: FULL_OBJECT, is remembered per key and sent back on HEAD and GET,
 * as S3 does. A write without one forgets it (another object). Off by default: the sink's
 * GET bodies are a pattern, not the bytes put, so a client verifying them would fail; and a
 * plain list under one lock is enough for tests, not for benchmarks. */
struct ckrec {
    struct ckrec *next;
    char hdr[64 + CK_VAL_MAX + 8]; /* "x-amz-checksum-crc32c: value" */
    size_t klen;
    char key[];
};
static pthread_mutex_t g_ck_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ckrec *g_cks;

/* Remember (hdr non-NULL) or forget the checksum of key k. */
static void ck_set(const char *k, size_t n, const char *hdr)
{
    if (!g_opt.keep_checksums)
        return;
    pthread_mutex_lock(&g_ck_mu);
    struct ckrec **pp = &g_cks;
    while (*pp && !((*pp)->klen == n && memcmp((*pp)->key, k, n) == 0))
        pp = &(*pp)->next;
    if (*pp && !hdr) {
        struct ckrec *x = *pp;
        *pp = x->next;
        free(x);
    } else if (hdr) {
        struct ckrec *x = *pp;
        if (!x && (x = calloc(1, sizeof(*x) + n + 1)) != NULL) {
            memcpy(x->key, k, n);
            x->klen = n;
            x->next = g_cks;
            g_cks = x;
        }
        if (x)
            snprintf(x->hdr, sizeof(x->hdr), "%s", hdr);
    }
    pthread_mutex_unlock(&g_ck_mu);
}

/* The remembered header line of key k into out (empty if none). */
static void ck_get(const char *k, size_t n, char *out, size_t cap)
{
    out[0] = '\0';
    if (!g_opt.keep_checksums)
        return;
    pthread_mutex_lock(&g_ck_mu);
    for (struct ckrec *x = g_cks; x; x = x->next)
        if (x->klen == n && memcmp(x->key, k, n) == 0) {
            snprintf(out, cap, "%s", x->hdr);
            break;
        }
    pthread_mutex_unlock(&g_ck_mu);
}

static void ck_free(void)
{
    while (g_cks) {
        struct ckrec *x = g_cks;
        g_cks = x->next;
        free(x);
    }
}

/* ---- connections ---- */
enum method { M_OTHER, M_GET, M_HEAD, M_PUT, M_POST, M_DELETE };
enum state { ST_HEAD, ST_BODY, ST_SEND };
/* where a chunked body's decoder is: a size line, data, the CRLF after data, trailers */
enum chstate { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

struct hdrval {
    const char *p;
    size_t n;
};

/* One parsed request. Pointers go into the connection's in[] (valid until the request ends)
 * or its name[] (decoded path). */
struct req {
    enum method method;
    struct hdrval method_raw, target;
    const char *bucket;
    size_t bucket_len;
    const char *key;
    size_t key_len;
    const char *name; /* "bucket/key" (map key) */
    size_t name_len;
    bool q_uploads, q_delete, q_location, q_list_type2, q_other;
    struct hdrval upload_id, prefix;
    bool has_part_number;
    uint64_t part_number;
    bool has_cl, has_te, te_chunked, aws_chunked, expect_continue, conn_close,
        conn_keep_alive;
    uint64_t content_length;
    bool has_decoded_len;
    uint64_t decoded_len;
    struct hdrval range, if_match, copy_source, te, content_encoding;
    int ncks;
    struct hdrval ck_name[MAX_CKS], ck_val[MAX_CKS];
    int http_minor;
};

struct worker;

struct conn {
    struct conn *prev, *next; /* the worker's list of connections */
    struct worker *w;
    int fd;
    enum state state;
    uint32_t interest;
    bool close_after;
    size_t in_len;   /* bytes in in[] */
    size_t scan;     /* where the search for the header end resumes */
    size_t req_used; /* bytes of in[] the current request consumed (header + body prefix) */
    size_t hdr_end;  /* length of the current request's head in in[] */
    uint64_t body_left;
    bool chunked;            /* the body is chunked (Transfer-Encoding, or aws-chunked stored) */
    enum chstate ch_state;
    uint64_t ch_left;        /* data bytes left in the current chunk */
    uint64_t decoded;        /* chunked: data bytes so far */
    char *cbody; /* CompleteMultipartUpload / DeleteObjects body, or NULL */
    size_t cbody_len, cbody_cap;
    bool cbody_toobig;
    bool storing;            /* store mode: this body's bytes are kept in sb */
    int store_err;           /* store mode: 507 (over --store) or 500: the body is discarded */
    uint64_t store_want;     /* what did not fit (for the 507 message) */
    struct seg sb;           /* store mode: the body received so far */
    struct req rq;
    size_t out_len, out_off;
    uint64_t pat_off, pat_left;
    struct blob *blob;       /* store mode: a GET sends [pat_off, +pat_left) of this */
    char in[HDR_CAP];
    char out[OUT_CAP];
    char name[HDR_CAP + 1]; /* decoded bucket "/" key */
};

struct worker {
    int idx;
    pthread_t tid;
    int ep;
    int listen_fd;
    int stop_fd;
    int hand_rd, hand_wr; /* hand-off pipe: accepted fds (ints) for this worker */
    atomic_int load;      /* connections owned or handed to it (any thread may read) */
    uint8_t *rbuf; /* discard buffer for bodies, g_opt.recv_buf bytes */
    char xml[OUT_CAP];
    struct conn *conns;
    uint64_t nreq, bytes_in, bytes_out;
    time_t date_t;
    char date[64];
};

static char g_listen_tag, g_stop_tag;

static void conn_close(struct conn *c)
{
    struct worker *w = c->w;
    /* Read what the peer already sent, so that closing does not answer it with an RST that
     * could destroy our last response (e.g. a 431 sent before the whole head arrived). */
    for (int i = 0; i < 64; i++)
        if (recv(c->fd, w->rbuf, g_opt.recv_buf, MSG_DONTWAIT) <= 0)
            break;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->cbody);
    buf_put(c->sb.p, c->sb.cap);
    blob_unref(c->blob);
    free(c);
    atomic_fetch_sub(&w->load, 1);
    atomic_fetch_sub(&g_nconns, 1);
}

static bool set_interest(struct conn *c, uint32_t ev)
{
    if (c->interest == ev)
        return true;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
        return false;
    c->interest = ev;
    return true;
}

static bool hv_eq(struct hdrval v, const char *s)
{
    size_t n = strlen(s);
    return v.n == n && strncasecmp(v.p, s, n) == 0;
}

static bool hv_contains_token(struct hdrval v, const char *tok)
{
    size_t n = strlen(tok);
    for (size_t i = 0; i + n <= v.n; i++)
        if (strncasecmp(v.p + i, tok, n) == 0)
            return true;
    return false;
}

/* Parses the query string [q, q+n). */
static void parse_query(struct conn *c, const char *q, size_t n)
{
    struct req *r = &c->rq;
    const char *end = q + n;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        if (!amp)
            amp = end;
        const char *eq = memchr(q, '=', (size_t)(amp - q));
        struct hdrval name = {q, (size_t)((eq ? eq : amp) - q)};
        struct hdrval val = {eq ? eq + 1 : amp, eq ? (size_t)(amp - eq - 1) : 0};
        if (hv_eq(name, "uploads"))
            r->q_uploads = true;
        else if (hv_eq(name, "delete"))
            r->q_delete = true;
        else if (hv_eq(name, "location"))
            r->q_location = true;
        else if (hv_eq(name, "uploadId"))
            r->upload_id = val;
        else if (hv_eq(name, "partNumber")) {
            r->has_part_number = true;
            if (!parse_u64(val.p, val.n, &r->part_number))
                r->part_number = 0;
        } else if (hv_eq(name, "list-type"))
            r->q_list_type2 = val.n == 1 && val.p[0] == '2';
        else if (hv_eq(name, "prefix"))
            r->prefix = val;
        else if (name.n)
            r->q_other = true;
        q = amp + 1;
    }
}

/* Parses the request head in[0, hdr_end). Returns 0, or an HTTP status for a malformed
 * request (400, 431, 501, 505). */
static int parse_head(struct conn *c, size_t hdr_end)
{
    struct req *r = &c->rq;
    memset(r, 0, sizeof(*r));
    const char *p = c->in, *end = c->in + hdr_end;
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!eol)
        return 400;
    /* request line */
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1)
        return 400;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (!sp2)
        return 400;
    r->method_raw = (struct hdrval){p, (size_t)(sp1 - p)};
    r->target = (struct hdrval){sp1 + 1, (size_t)(sp2 - sp1 - 1)};
    struct hdrval ver = {sp2 + 1, (size_t)(eol - sp2 - 1)};
    if (hv_eq(ver, "HTTP/1.1"))
        r->http_minor = 1;
    else if (hv_eq(ver, "HTTP/1.0"))
        r->http_minor = 0;
    else
        return 505;
    if (hv_eq(r->method_raw, "GET"))
        r->method = M_GET;
    else if (hv_eq(r->method_raw, "HEAD"))
        r->method = M_HEAD;
    else if (hv_eq(r->method_raw, "PUT"))
        r->method = M_PUT;
    else if (hv_eq(r->method_raw, "POST"))
        r->method = M_POST;
    else if (hv_eq(r->method_raw, "DELETE"))
        r->method = M_DELETE;
    /* headers */
    for (p = eol + 2; p < end; p = eol + 2) {
        eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if (eol == p)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon || colon == p)
            return 400;
        struct hdrval name = {p, (size_t)(colon - p)};
        const char *v = colon + 1, *ve = eol;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        struct hdrval val = {v, (size_t)(ve - v)};
        if (hv_eq(name, "content-length")) {
            uint64_t cl;
            if (!parse_u64(val.p, val.n, &cl) || (r->has_cl && cl != r->content_length))
                return 400;
            r->has_cl = true;
            r->content_length = cl;
        } else if (hv_eq(name, "transfer-encoding")) {
            r->has_te = true;
            r->te = val;
            r->te_chunked = hv_eq(val, "chunked");
        } else if (hv_eq(name, "content-encoding")) {
            r->content_encoding = val;
            if (hv_contains_token(val, "aws-chunked"))
                r->aws_chunked = true;
        } else if (hv_eq(name, "expect")) {
            r->expect_continue = hv_eq(val, "100-continue");
        } else if (hv_eq(name, "connection")) {
            if (hv_contains_token(val, "close"))
                r->conn_close = true;
            if (hv_contains_token(val, "keep-alive"))
                r->conn_keep_alive = true;
        } else if (hv_eq(name, "range")) {
            r->range = val;
        } else if (hv_eq(name, "if-match")) {
            r->if_match = val;
        } else if (hv_eq(name, "x-amz-copy-source")) {
            r->copy_source = val;
        } else if (hv_eq(name, "x-amz-decoded-content-length")) {
            r->has_decoded_len = parse_u64(val.p, val.n, &r->decoded_len);
        } else if (name.n > 15 && strncasecmp(name.p, "x-amz-checksum-", 15) == 0) {
            if (r->ncks < MAX_CKS && val.n <= CK_VAL_MAX && name.n <= 64) {
                r->ck_name[r->ncks] = name;
                r->ck_val[r->ncks] = val;
                r->ncks++;
            }
        }
    }
    /* target: origin-form, or absolute-form (skip scheme and authority) */
    const char *t = r->target.p, *te = t + r->target.n;
    if (te - t > 7 && strncasecmp(t, "http://", 7) == 0) {
        t = memchr(t + 7, '/', (size_t)(te - t - 7));
        if (!t)
            t = te;
    }
    if (t == te || *t != '/') {
        if (t != te)
            return 400;
    }
    const char *qm = memchr(t, '?', (size_t)(te - t));
    const char *pe = qm ? qm : te;
    if (pe > t)
        t++; /* leading '/' */
    size_t nl = pct_decode(t, (size_t)(pe - t), c->name);
    c->name[nl] = 0;
    char *slash = memchr(c->name, '/', nl);
    r->bucket = c->name;
    r->bucket_len = slash ? (size_t)(slash - c->name) : nl;
    r->key = slash ? slash + 1 : c->name + nl;
    r->key_len = slash ? nl - r->bucket_len - 1 : 0;
    r->name = c->name;
    r->name_len = nl;
    if (qm)
        parse_query(c, qm + 1, (size_t)(te - qm - 1));
    if (r->prefix.n) {
        /* decoded in place: decoding never lengthens, and nothing else reads these bytes */
        char *pp = c->in + (r->prefix.p - c->in);
        size_t n = pct_decode(pp, r->prefix.n, pp);
        r->prefix = (struct hdrval){pp, n};
    }
    if (r->has_te && !r->te_chunked)
        return 501; /* only plain "chunked" is understood */
    return 0;
}

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 416: return "Requested Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}

static const char *worker_date(struct worker *w)
{
    time_t now = time(NULL);
    if (now != w->date_t) {
        w->date_t = now;
        http_date(now, w->date, sizeof(w->date));
    }
    return w->date;
}

/* Starts a response in c->out: status line and the common headers, Content-Length clen.
 * The caller adds its headers, then end_head(). */
static void begin_head(struct conn *c, struct ob *b, int status, uint64_t clen)
{
    struct worker *w = c->w;
    b->p = c->out;
    b->len = 0;
    b->cap = sizeof(c->out);
    b->overflow = false;
    ob_printf(b,
              "HTTP/1.1 %d %s\r\nServer: s3flash-sink\r\nDate: %s\r\n"
              "x-amz-request-id: %02X%014" PRIX64 "\r\n",
              status, reason(status), worker_date(w), (unsigned)w->idx, w->nreq);
    if (status != 204)
        ob_printf(b, "Content-Length: %" PRIu64 "\r\n", clen);
    if (c->close_after)
        ob_str(b, "Connection: close\r\n");
}

static void end_head(struct conn *c, struct ob *b)
{
    ob_str(b, "\r\n");
    c->out_len = b->len;
    c->out_off = 0;
}

/* Headers + an XML body from w->xml (xlen bytes). Falls back to a bare 500 on overflow. */
static void respond_xml2(struct conn *c, int status, size_t xlen, bool echo_cks,
                         const char *extra)
{
    struct ob b;
    bool head = c->rq.method == M_HEAD;
    begin_head(c, &b, status, head ? 0 : xlen);
    if (xlen)
        ob_str(&b, "Content-Type: application/xml\r\n");
    if (extra)
        ob_str(&b, extra);
    if (echo_cks)
        for (int i = 0; i < c->rq.ncks; i++) {
            ob_put(&b, c->rq.ck_name[i].p, c->rq.ck_name[i].n);
            ob_str(&b, ": ");
            ob_put(&b, c->rq.ck_val[i].p, c->rq.ck_val[i].n);
            ob_str(&b, "\r\n");
        }
    end_head(c, &b);
    if (!head)
        ob_put(&b, c->w->xml, xlen);
    if (b.overflow) {
        c->close_after = true;
        c->out_len = (size_t)snprintf(c->out, sizeof(c->out),
                                      "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                                      "Connection: close\r\n\r\n");
        return;
    }
    c->out_len = b.len;
}

static void respond_xml(struct conn *c, int status, size_t xlen, bool echo_cks)
{
    respond_xml2(c, status, xlen, echo_cks, NULL);
}

static void xml_begin(struct ob *x, struct worker *w)
{
    x->p = w->xml;
    x->len = 0;
    x->cap = sizeof(w->xml);
    x->overflow = false;
    ob_str(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
}

/* An S3 error document; extra: more header lines (each ending in CRLF) or NULL. */
static void respond_error2(struct conn *c, int status, const char *code, const char *msg,
                           const char *extra)
{
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<Error><Code>");
    ob_str(&x, code);
    ob_str(&x, "</Code><Message>");
    ob_str(&x, msg);
    ob_str(&x, "</Message>");
    if (c->rq.key_len) {
        ob_str(&x, "<Key>");
        ob_xml(&x, c->rq.key, c->rq.key_len);
        ob_str(&x, "</Key>");
    }
    ob_printf(&x, "<RequestId>%02X%014" PRIX64 "</RequestId></Error>", (unsigned)c->w->idx,
              c->w->nreq);
    respond_xml2(c, status, x.overflow ? 0 : x.len, false, extra);
}

static void respond_error(struct conn *c, int status, const char *code, const char *msg)
{
    respond_error2(c, status, code, msg, NULL);
}

static void respond_empty(struct conn *c, int status, bool echo_cks, const char *etag)
{
    struct ob b;
    begin_head(c, &b, status, 0);
    if (etag)
        ob_printf(&b, "ETag: \"%s\"\r\n", etag);
    if (echo_cks)
        for (int i = 0; i < c->rq.ncks; i++) {
            ob_put(&b, c->rq.ck_name[i].p, c->rq.ck_name[i].n);
            ob_str(&b, ": ");
            ob_put(&b, c->rq.ck_val[i].p, c->rq.ck_val[i].n);
            ob_str(&b, "\r\n");
        }
    end_head(c, &b);
    c->out_len = b.len; /* bounded inputs: cannot overflow OUT_CAP */
}

/* The ETag body (no quotes) of an object: stable for (name, size) outside store mode; in store
 * mode the version (a new one for every write) changes it too. "-N" for N parts. */
static void object_etag(const char *name, size_t n, uint64_t size, uint64_t ver,
                        uint32_t nparts, char out[48])
{
    fake_etag(name, n, size ^ (ver * 0x9e3779b97f4a7c15ULL), out);
    if (nparts)
        snprintf(out + 32, 48 - 32, "-%" PRIu32, nparts);
}

/* Parses a single Range (bytes=a-b, bytes=a-, bytes=-n) for an object of size. Returns 0 with
 * [*a, *b] set, 1 to ignore the header (send the whole object), 2 if unsatisfiable. */
static int parse_range(struct hdrval v, uint64_t size, uint64_t *a, uint64_t *b)
{
    if (v.n < 7 || strncasecmp(v.p, "bytes=", 6) != 0 || memchr(v.p, ',', v.n))
        return 1;
    const char *s = v.p + 6, *e = v.p + v.n;
    const char *dash = memchr(s, '-', (size_t)(e - s));
    if (!dash)
        return 1;
    uint64_t x, y;
    if (dash == s) {
        if (!parse_u64(dash + 1, (size_t)(e - dash - 1), &y))
            return 1;
        if (y == 0 || size == 0)
            return 2;
        *a = y >= size ? 0 : size - y;
        *b = size - 1;
        return 0;
    }
    if (!parse_u64(s, (size_t)(dash - s), &x))
        return 1;
    if (dash + 1 == e) {
        y = UINT64_MAX;
    } else {
        if (!parse_u64(dash + 1, (size_t)(e - dash - 1), &y))
            return 1;
        if (y < x)
            return 1;
    }
    if (x >= size)
        return 2;
    *a = x;
    *b = y >= size ? size - 1 : y;
    return 0;
}

/* The whole-object checksum a write carries, as a header line for ck_set, or NULL: the first
 * x-amz-checksum-<alg> of an algorithm (not -type, -algorithm, -mode); for a Complete only
 * with x-amz-checksum-type: FULL_OBJECT (else S3 keeps a checksum of checksums). */
static const char *req_checksum(const struct req *r, bool complete, char *out, size_t cap)
{
    static const char *const algs[] = {"x-amz-checksum-crc32c", "x-amz-checksum-crc32",
                                       "x-amz-checksum-crc64nvme", "x-amz-checksum-sha256",
                                       "x-amz-checksum-sha1"};
    bool full = !complete;
    const char *line = NULL;
    for (int i = 0; i < r->ncks; i++) {
        if (hv_eq(r->ck_name[i], "x-amz-checksum-type"))
            full = full || (r->ck_val[i].n == 11 && !strncasecmp(r->ck_val[i].p, "FULL_OBJECT", 11));
        for (size_t j = 0; j < sizeof(algs) / sizeof(algs[0]) && !line; j++)
            if (hv_eq(r->ck_name[i], algs[j])) {
                snprintf(out, cap, "%s: %.*s", algs[j], (int)r->ck_val[i].n, r->ck_val[i].p);
                line = out;
            }
    }
    return full ? line : NULL;
}

static void handle_get_object(struct conn *c)
{
    struct req *r = &c->rq;
    uint64_t size, ver;
    uint32_t nparts;
    struct blob *data = NULL;
    if (!object_size(r->name, r->name_len, &size, &nparts, &ver,
                     r->method == M_GET ? &data : NULL)) {
        respond_error(c, 404, "NoSuchKey", "The specified key does not exist.");
        return;
    }
    char etag[48];
    object_etag(r->name, r->name_len, size, ver, nparts, etag);
    c->blob = data; /* released when the response is done (request_done, conn_close) */
    if (r->if_match.n) {
        struct hdrval m = r->if_match;
        if (m.n >= 2 && m.p[0] == '"' && m.p[m.n - 1] == '"') {
            m.p++;
            m.n -= 2;
        }
        if (!(m.n == 1 && m.p[0] == '*') && !(m.n == strlen(etag) && !memcmp(m.p, etag, m.n))) {
            respond_error(c, 412, "PreconditionFailed",
                          "At least one of the pre-conditions you specified did not hold");
            return;
        }
    }
    uint64_t a = 0, b = size ? size - 1 : 0;
    int rr = r->range.n ? parse_range(r->range, size, &a, &b) : 1;
    if (rr == 2) {
        char cr[64];
        snprintf(cr, sizeof(cr), "Content-Range: bytes */%" PRIu64 "\r\n", size);
        respond_error2(c, 416, "InvalidRange", "The requested range is not satisfiable", cr);
        return;
    }
    uint64_t len = rr == 0 ? b - a + 1 : size;
    struct ob o;
    begin_head(c, &o, rr == 0 ? 206 : 200, len);
    ob_printf(&o,
              "Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n"
              "ETag: \"%s\"\r\nLast-Modified: %s\r\n",
              etag, g_last_modified);
    if (g_opt.keep_checksums) {
        char ck[sizeof(((struct ckrec *)0)->hdr)];
        ck_get(r->name, r->name_len, ck, sizeof(ck));
        if (ck[0])
            ob_printf(&o, "%s\r\n", ck);
    }
    if (rr == 0)
        ob_printf(&o, "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n", a, b, size);
    end_head(c, &o);
    if (r->method == M_GET && len) {
        c->pat_off = a;
        c->pat_left = len;
    }
}

/* 507 for a write that store mode cannot keep: over --store (want: the bytes asked for) or,
 * with want 0, the object map full (--max-objects). */
static void respond_store_full(struct conn *c, uint64_t want)
{
    char msg[256];
    if (want) {
        pthread_mutex_lock(&g_pool.mu);
        uint64_t held = g_pool.held;
        pthread_mutex_unlock(&g_pool.mu);
        snprintf(msg, sizeof(msg),
                 "The sink's --store limit of %" PRIu64 " bytes is reached: %" PRIu64
                 " bytes are held and this body needs %" PRIu64 " more.",
                 g_opt.store_max, held, want);
    } else {
        snprintf(msg, sizeof(msg),
                 "The sink's object map is full (--max-objects %zu): the object is not kept.",
                 g_opt.max_objects);
    }
    respond_error(c, 507, "InsufficientStorage", msg);
}

/* Decodes the five XML entities and &#N; / &#xN; (ASCII) of [s, s+n) into out (n bytes of
 * room); returns the length. */
static size_t xml_unescape(const char *s, size_t n, char *out)
{
    static const struct { const char *e; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&') {
            bool done = false;
            for (size_t j = 0; j < sizeof(ents) / sizeof(ents[0]) && !done; j++) {
                size_t el = strlen(ents[j].e);
                if (i + el <= n && memcmp(s + i, ents[j].e, el) == 0) {
                    out[o++] = ents[j].c;
                    i += el - 1;
                    done = true;
                }
            }
            const char *semi = memchr(s + i, ';', n - i);
            if (!done && semi && i + 2 < n && s[i + 1] == '#') {
                bool hex = s[i + 2] == 'x';
                const char *d = s + i + (hex ? 3 : 2);
                unsigned v = 0;
                bool okd = d < semi;
                for (; okd && d < semi; d++) {
                    int h = hex ? hexval(*d) : (*d >= '0' && *d <= '9' ? *d - '0' : -1);
                    if (h < 0 || v > 0x10FFFF)
                        okd = false;
                    else
                        v = v * (hex ? 16 : 10) + (unsigned)h;
                }
                if (okd && v > 0 && v < 128) {
                    out[o++] = (char)v;
                    i = (size_t)(semi - s);
                    done = true;
                }
            }
            if (done)
                continue;
        }
        out[o++] = s[i];
    }
    return o;
}

/* POST /b?delete (DeleteObjects): forgets every <Key> listed (and frees its bytes in store
 * mode). The result lists nothing (as with <Quiet>true</Quiet>). */
static void handle_delete_objects(struct conn *c)
{
    struct req *r = &c->rq;
    struct worker *w = c->w;
    if (c->cbody_toobig) {
        respond_error(c, 400, "MalformedXML", "The DeleteObjects body is too large.");
        return;
    }
    static const char tag[] = "<Key>", etag_[] = "</Key>";
    char name[KEY_MAX + 256 + 2];
    const char *p = c->cbody ? c->cbody : "", *end = p + c->cbody_len;
    for (;;) {
        const char *t = memmem(p, (size_t)(end - p), tag, sizeof(tag) - 1);
        if (!t)
            break;
        t += sizeof(tag) - 1;
        const char *e = memmem(t, (size_t)(end - t), etag_, sizeof(etag_) - 1);
        if (!e)
            break;
        size_t kn = (size_t)(e - t);
        if (r->bucket_len + 1 + kn <= sizeof(name)) {
            memcpy(name, r->bucket, r->bucket_len);
            name[r->bucket_len] = '/';
            size_t dn = xml_unescape(t, kn, name + r->bucket_len + 1);
            objmap_del(name, r->bucket_len + 1 + dn);
        }
        p = e + sizeof(etag_) - 1;
    }
    struct ob x;
    xml_begin(&x, w);
    ob_str(&x, "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></DeleteResult>");
    respond_xml(c, 200, x.len, false);
}

static void handle_list(struct conn *c)
{
    struct req *r = &c->rq;
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>");
    ob_xml(&x, r->bucket, r->bucket_len);
    ob_str(&x, "</Name><Prefix>");
    ob_xml(&x, r->prefix.p, r->prefix.n);
    ob_str(&x, "</Prefix>");
    if (r->q_list_type2)
        ob_str(&x, "<KeyCount>0</KeyCount>");
    else
        ob_str(&x, "<Marker></Marker>");
    ob_str(&x, "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>");
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
}

static void handle_initiate(struct conn *c)
{
    struct req *r = &c->rq;
    char id[UPLOAD_ID_LEN + 1];
    int rc = upload_new(r->name, r->name_len, id);
    if (rc == 503) {
        respond_error(c, 503, "SlowDown", "Too many multipart uploads in progress.");
        return;
    }
    if (rc) {
        respond_error(c, 500, "InternalError", "Out of memory.");
        return;
    }
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<InitiateMultipartUploadResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
    ob_xml(&x, r->bucket, r->bucket_len);
    ob_str(&x, "</Bucket><Key>");
    ob_xml(&x, r->key, r->key_len);
    ob_printf(&x, "</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>", id);
    respond_xml(c, 200, x.overflow ? 0 : x.len, true);
}

static void handle_complete(struct conn *c)
{
    struct req *r = &c->rq;
    if (c->cbody_toobig) {
        respond_error(c, 400, "MalformedXML", "The CompleteMultipartUpload body is too large.");
        return;
    }
    uint64_t size = 0, ver = 0;
    uint32_t nparts = 0;
    const char *code = NULL;
    int rc = upload_complete(r->upload_id.p, r->upload_id.n, r->name, r->name_len,
                             c->cbody ? c->cbody : "", c->cbody_len, &size, &nparts, &ver,
                             &code);
    if (rc == 404) {
        respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
        return;
    }
    if (rc == 507) {
        respond_store_full(c, 0);
        return;
    }
    if (rc) {
        respond_error(c, rc, code, "The CompleteMultipartUpload request was not accepted.");
        return;
    }
    char etag[48], ck[64 + CK_VAL_MAX + 8];
    ck_set(r->name, r->name_len, req_checksum(r, true, ck, sizeof(ck)));
    object_etag(r->name, r->name_len, size, ver, 0, etag);
    struct ob x;
    xml_begin(&x, c->w);
    ob_str(&x, "<CompleteMultipartUploadResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>/");
    ob_xml(&x, r->name, r->name_len);
    ob_str(&x, "</Location><Bucket>");
    ob_xml(&x, r->bucket, r->bucket_len);
    ob_str(&x, "</Bucket><Key>");
    ob_xml(&x, r->key, r->key_len);
    ob_printf(&x, "</Key><ETag>&quot;%s-%" PRIu32 "&quot;</ETag></CompleteMultipartUploadResult>",
              etag, nparts);
    respond_xml(c, 200, x.overflow ? 0 : x.len, true);
}

static void handle_copy(struct conn *c)
{
    struct req *r = &c->rq;
    char src[KEY_MAX + 256];
    struct hdrval s = r->copy_source;
    const char *q = memchr(s.p, '?', s.n);
    if (q)
        s.n = (size_t)(q - s.p);
    if (s.n && s.p[0] == '/') {
        s.p++;
        s.n--;
    }
    if (s.n > sizeof(src)) {
        respond_error(c, 400, "InvalidArgument", "Copy source too long.");
        return;
    }
    size_t n = pct_decode(s.p, s.n, src);
    uint64_t size, ver;
    uint32_t nparts;
    struct blob *data = NULL;
    if (!object_size(src, n, &size, &nparts, &ver, &data)) {
        respond_error(c, 404, "NoSuchKey", "The specified key does not exist.");
        return;
    }
    /* store mode: the copy shares the source's bytes (the reference taken above) */
    if (!objmap_put(r->name, r->name_len, size, 0, data, &ver) && g_opt.store_max) {
        respond_store_full(c, 0);
        return;
    }
    if (g_opt.keep_checksums) { /* the copy has the source's checksum */
        char ck[sizeof(((struct ckrec *)0)->hdr)];
        ck_get(src, n, ck, sizeof(ck));
        ck_set(r->name, r->name_len, ck[0] ? ck : NULL);
    }
    char etag[48];
    object_etag(r->name, r->name_len, size, ver, 0, etag);
    struct ob x;
    xml_begin(&x, c->w);
    ob_printf(&x, "<CopyObjectResult><LastModified>%s</LastModified><ETag>&quot;%s&quot;</ETag>"
                  "</CopyObjectResult>", g_last_modified_iso, etag);
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
}

/* Builds the response to the request whose body has just been consumed, and updates state. */
static void finish_request(struct conn *c)
{
    struct req *r = &c->rq;
    struct worker *w = c->w;
    w->nreq++;
    c->pat_left = 0;
    c->state = ST_SEND;
    if (g_opt.verbose) {
        /* the request line, and how its body was framed */
        char cl[32] = "-";
        if (r->has_cl)
            snprintf(cl, sizeof(cl), "%" PRIu64, r->content_length);
        fprintf(stderr, "[%d] %.*s %.*s content-length=%s transfer-encoding=%.*s "
                        "content-encoding=%.*s body=%" PRIu64 "%s\n",
                w->idx, (int)r->method_raw.n, r->method_raw.p, (int)r->target.n, r->target.p,
                cl, r->te.n ? (int)r->te.n : 1, r->te.n ? r->te.p : "-",
                r->content_encoding.n ? (int)r->content_encoding.n : 1,
                r->content_encoding.n ? r->content_encoding.p : "-",
                c->chunked ? c->decoded : r->has_cl ? r->content_length : 0,
                c->chunked ? " (decoded)" : "");
    }
    if (r->bucket_len == 0) {
        if (r->method == M_GET || r->method == M_HEAD) {
            struct ob x;
            xml_begin(&x, w);
            ob_str(&x, "<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Owner><ID>sink</ID><DisplayName>sink</DisplayName></Owner><Buckets>"
                       "</Buckets></ListAllMyBucketsResult>");
            respond_xml(c, 200, x.len, false);
        } else {
            respond_error(c, 405, "MethodNotAllowed", "Not allowed on the service.");
        }
        return;
    }
    if (r->key_len > KEY_MAX) {
        respond_error(c, 400, "KeyTooLongError", "Your key is too long.");
        return;
    }
    if (r->key_len == 0) { /* bucket operations */
        switch (r->method) {
        case M_GET:
            if (r->q_location) {
                struct ob x;
                xml_begin(&x, w);
                ob_str(&x, "<LocationConstraint xmlns="
                           "\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>");
                respond_xml(c, 200, x.len, false);
            } else if (r->q_uploads) {
                struct ob x;
                xml_begin(&x, w);
                ob_str(&x, "<ListMultipartUploadsResult "
                           "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
                ob_xml(&x, r->bucket, r->bucket_len);
                ob_str(&x, "</Bucket><IsTruncated>false</IsTruncated>"
                           "</ListMultipartUploadsResult>");
                respond_xml(c, 200, x.overflow ? 0 : x.len, false);
            } else {
                handle_list(c);
            }
            return;
        case M_HEAD:
        case M_PUT:
            respond_empty(c, 200, false, NULL);
            return;
        case M_DELETE:
            respond_empty(c, 204, false, NULL);
            return;
        case M_POST:
            if (r->q_delete) {
                handle_delete_objects(c);
                return;
            }
            break;
        default:
            break;
        }
        respond_error(c, 501, "NotImplemented", "The sink does not implement this request.");
        return;
    }
    switch (r->method) {
    case M_GET:
    case M_HEAD:
        if (r->upload_id.n || r->has_part_number || r->q_other)
            break;
        handle_get_object(c);
        return;
    case M_PUT: {
        /* CopyObject has no body: the CRT (s3torchconnector's DCP writer) sends it without
         * Content-Length, which HTTP/1.1 allows (no length, no chunking: an empty body) */
        if (!r->has_cl && !c->chunked && !r->copy_source.n) {
            respond_error(c, 411, "MissingContentLength", "You must provide the Content-Length.");
            return;
        }
        uint64_t size = r->has_decoded_len ? r->decoded_len : r->content_length;
        if (c->chunked) {
            if (r->has_decoded_len && c->decoded != r->decoded_len) {
                char msg[160];
                snprintf(msg, sizeof(msg), "The chunked body has %" PRIu64 " bytes, "
                         "x-amz-decoded-content-length says %" PRIu64 ".", c->decoded,
                         r->decoded_len);
                respond_error(c, 400, "IncompleteBody", msg);
                return;
            }
            size = c->decoded;
        }
        if (c->store_err == 507) {
            respond_store_full(c, c->store_want);
            return;
        }
        if (c->storing) {
            if (!c->sb.p) { /* an empty body: one byte of buffer stands for it */
                c->sb.p = buf_get(1, &c->sb.cap);
                if (!c->sb.p) {
                    respond_store_full(c, 1);
                    return;
                }
            }
            size = c->sb.len;
        }
        if (r->upload_id.n || r->has_part_number) {
            if (r->part_number < 1 || r->part_number > MAX_PARTS || !r->upload_id.n) {
                respond_error(c, 400, "InvalidArgument", "Part number must be 1 to 10000.");
                return;
            }
            int rc = upload_part(r->upload_id.p, r->upload_id.n, r->name, r->name_len,
                                 (uint32_t)r->part_number, size, &c->sb);
            if (rc == 404) {
                respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
                return;
            }
            if (rc) {
                respond_error(c, 500, "InternalError", "Out of memory.");
                return;
            }
            char etag[33], tmp[64];
            int tn = snprintf(tmp, sizeof(tmp), "%.*s#%" PRIu64, (int)r->upload_id.n,
                              r->upload_id.p, r->part_number);
            fake_etag(tmp, (size_t)tn, size, etag);
            respond_empty(c, 200, true, etag);
            return;
        }
        if (r->copy_source.n) {
            handle_copy(c);
            return;
        }
        struct blob *data = NULL;
        if (c->storing) {
            data = blob_new(1);
            if (!data) {
                respond_error(c, 500, "InternalError", "Out of memory.");
                return;
            }
            data->seg[0] = c->sb;
            data->size = c->sb.len;
            c->sb = (struct seg){0};
        }
        uint64_t ver;
        if (!objmap_put(r->name, r->name_len, size, 0, data, &ver) && g_opt.store_max) {
            respond_store_full(c, 0);
            return;
        }
        char etag[48], ck[64 + CK_VAL_MAX + 8];
        ck_set(r->name, r->name_len, req_checksum(r, false, ck, sizeof(ck)));
        object_etag(r->name, r->name_len, size, ver, 0, etag);
        respond_empty(c, 200, true, etag);
        return;
    }
    case M_POST:
        if (r->q_uploads) {
            handle_initiate(c);
            return;
        }
        if (r->upload_id.n) {
            handle_complete(c);
            return;
        }
        break;
    case M_DELETE:
        if (r->upload_id.n) {
            if (upload_abort(r->upload_id.p, r->upload_id.n, r->name, r->name_len) != 0)
                respond_error(c, 404, "NoSuchUpload", "The specified upload does not exist.");
            else
                respond_empty(c, 204, false, NULL);
            return;
        }
        objmap_del(r->name, r->name_len);
        ck_set(r->name, r->name_len, NULL);
        respond_empty(c, 204, false, NULL);
        return;
    default:
        break;
    }
    respond_error(c, 501, "NotImplemented", "The sink does not implement this request.");
}

/* A response to a request that could not be read; the connection closes after it. */
static void fail_request_msg(struct conn *c, int status, const char *code, const char *msg)
{
    c->close_after = true;
    c->state = ST_SEND;
    c->pat_left = 0;
    c->rq.key_len = 0;
    c->rq.method = M_OTHER;
    respond_error(c, status, code, msg);
}

/* A response to a request that could not be parsed; the connection closes after it. */
static void fail_request(struct conn *c, int status)
{
    c->close_after = true;
    c->state = ST_SEND;
    c->pat_left = 0;
    c->rq.key_len = 0;
    c->rq.method = M_OTHER;
    switch (status) {
    case 431:
        respond_error(c, 431, "RequestHeaderSectionTooLarge", "Request header section too large.");
        break;
    case 501:
        respond_error(c, 501, "NotImplemented",
                      "Only Transfer-Encoding: chunked is supported.");
        break;
    case 505:
        respond_error(c, 505, "HttpVersionNotSupported", "Only HTTP/1.0 and 1.1.");
        break;
    default:
        respond_error(c, 400, "BadRequest", "Malformed request.");
        break;
    }
}

/* Sends a small interim response directly (100 Continue). */
static bool send_small(struct conn *c, const char *s, size_t n)
{
    ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL);
    return k == (ssize_t)n;
}

/* ---- request bodies: where their bytes go ---- */
enum bdst { BD_DISCARD, BD_KEEP, BD_STORE };

/* Grows the store buffer of a body of unknown size (chunked) to take at least `more` bytes.
 * False (and store_err set: the rest is discarded) when --store does not allow it. */
static bool store_grow(struct conn *c, uint64_t more)
{
    uint64_t ncap = c->sb.cap * 2;
    if (ncap < c->sb.len + more)
        ncap = c->sb.len + more;
    if (ncap < (64u << 10))
        ncap = 64u << 10;
    uint64_t cap;
    uint8_t *p = buf_get(ncap, &cap);
    if (!p) {
        c->store_err = 507;
        c->store_want = ncap;
        return false;
    }
    if (c->sb.len)
        memcpy(p, c->sb.p, (size_t)c->sb.len);
    buf_put(c->sb.p, c->sb.cap);
    c->sb.p = p;
    c->sb.cap = cap;
    return true;
}

/* Where the next body bytes go, at most want of them (*room set, > 0 for want > 0): the kept
 * body (CompleteMultipartUpload, DeleteObjects), the store buffer, or the discard buffer. */
static uint8_t *body_dst(struct conn *c, uint64_t want, size_t *room, enum bdst *kind)
{
    if (c->cbody) {
        size_t left = c->cbody_cap - c->cbody_len;
        if (left) {
            *room = want < left ? (size_t)want : left;
            *kind = BD_KEEP;
            return (uint8_t *)c->cbody + c->cbody_len;
        }
        c->cbody_toobig = true; /* a chunked body over COMPLETE_BODY_CAP */
    } else if (c->storing && !c->store_err &&
               (c->sb.len < c->sb.cap || store_grow(c, want))) {
        uint64_t left = c->sb.cap - c->sb.len;
        *room = (size_t)(want < left ? want : left);
        *kind = BD_STORE;
        return c->sb.p + c->sb.len;
    }
    *room = want < g_opt.recv_buf ? (size_t)want : g_opt.recv_buf;
    *kind = BD_DISCARD;
    return c->w->rbuf;
}

static void body_got(struct conn *c, enum bdst kind, size_t n)
{
    if (kind == BD_KEEP)
        c->cbody_len += n;
    else if (kind == BD_STORE)
        c->sb.len += n;
    c->w->bytes_in += n;
}

/* Body bytes that arrived with the head (or a chunk line) in in[]. */
static void body_take(struct conn *c, const char *p, size_t n)
{
    while (n) {
        size_t room;
        enum bdst kind;
        uint8_t *d = body_dst(c, n, &room, &kind);
        if (kind != BD_DISCARD)
            memcpy(d, p, room);
        body_got(c, kind, room);
        p += room;
        n -= room;
    }
}

/* What a recv() that returned n <= 0 means to a body step: 0 wait for EPOLLIN, 1 try again,
 * -1 the connection is over (closed or failed). */
static int recv_failed(ssize_t n) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n < 0 && errno == EINTR)
        return 1;
    return -1;
}

/* One step of reading a chunked body (RFC 9112 7.1; also aws-chunked, whose chunk extensions
 * carry signatures and whose trailers carry checksums: both ignored). Data goes to body_dst;
 * size lines and trailers are read into in[] after the head, so that bytes of the next
 * request read with them stay in in[]. Returns 1 on progress (the request may be finished or
 * failed: c->state says), 0 when the socket has nothing more now, -1 to close. */
static int chunked_step(struct conn *c, size_t *budget)
{
    if (c->ch_state == CH_DATA) {
        if (c->ch_left == 0) {
            c->ch_state = CH_DATA_END;
            return 1;
        }
        if (c->in_len > c->req_used) {
            size_t take = c->in_len - c->req_used;
            if (take > c->ch_left)
                take = (size_t)c->ch_left;
            body_take(c, c->in + c->req_used, take);
            c->req_used += take;
            c->ch_left -= take;
            c->decoded += take;
            return 1;
        }
        if (*budget == 0)
            return 0;
        size_t room;
        enum bdst kind;
        uint8_t *d = body_dst(c, c->ch_left, &room, &kind);
        ssize_t n = recv(c->fd, d, room, 0);
        if (n > 0) {
            body_got(c, kind, (size_t)n);
            c->ch_left -= (uint64_t)n;
            c->decoded += (uint64_t)n;
            *budget = (size_t)n >= *budget ? 0 : *budget - (size_t)n;
            return 1;
        }
        return recv_failed(n);
    }
    /* a line: a chunk size, the CRLF after a chunk's data, a trailer or the final CRLF */
    char *b = c->in + c->req_used;
    size_t avail = c->in_len - c->req_used;
    char *nl = memchr(b, '\n', avail);
    if (!nl) {
        if (c->req_used > c->hdr_end) { /* make room: drop what was consumed after the head */
            memmove(c->in + c->hdr_end, b, avail);
            c->in_len = c->hdr_end + avail;
            c->req_used = c->hdr_end;
        }
        if (c->in_len >= sizeof(c->in)) {
            fail_request_msg(c, 400, "BadRequest",
                             "A chunk-size or trailer line of the chunked body is too long.");
            return 1;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            return 1;
        }
        return recv_failed(n);
    }
    size_t ll = (size_t)(nl - b);
    c->req_used += ll + 1;
    if (ll && b[ll - 1] == '\r')
        ll--;
    switch (c->ch_state) {
    case CH_SIZE: {
        uint64_t v = 0;
        size_t i = 0;
        for (; i < ll && hexval(b[i]) >= 0; i++) {
            if (v >> 58) {
                fail_request_msg(c, 400, "BadRequest", "A chunk size is too large.");
                return 1;
            }
            v = v * 16 + (uint64_t)hexval(b[i]);
        }
        if (i == 0 || (i < ll && b[i] != ';' && b[i] != ' ' && b[i] != '\t')) {
            fail_request_msg(c, 400, "BadRequest",
                             "Malformed chunk-size line in the chunked body.");
            return 1;
        }
        c->ch_left = v;
        c->ch_state = v ? CH_DATA : CH_TRAILER;
        return 1;
    }
    case CH_DATA_END:
        if (ll != 0) {
            fail_request_msg(c, 400, "BadRequest",
                             "A chunk's data is longer than its size (no CRLF after it).");
            return 1;
        }
        c->ch_state = CH_SIZE;
        return 1;
    case CH_TRAILER:
        if (ll == 0) { /* the end of the body */
            c->ch_state = CH_DONE;
            finish_request(c);
        }
        return 1;
    default:
        return 1;
    }
}

/* Looks for a complete head in in[]; on success parses it and moves to ST_BODY (or ST_SEND).
 * Returns 1 if progress was made, 0 if more input is needed, -1 to close. */
static int try_head(struct conn *c)
{
    size_t from = c->scan > 3 ? c->scan - 3 : 0;
    char *e = memmem(c->in + from, c->in_len - from, "\r\n\r\n", 4);
    if (!e) {
        c->scan = c->in_len;
        if (c->in_len >= sizeof(c->in)) {
            fail_request(c, 431);
            return 1;
        }
        return 0;
    }
    size_t hdr_end = (size_t)(e - c->in) + 4;
    c->scan = 0;
    c->req_used = hdr_end;
    int st = parse_head(c, hdr_end);
    if (st) {
        fail_request(c, st);
        return 1;
    }
    struct req *r = &c->rq;
    c->close_after = r->conn_close || (r->http_minor == 0 && !r->conn_keep_alive);
    c->hdr_end = hdr_end;
    /* Transfer-Encoding: chunked overrides Content-Length (RFC 9112 6.3). An aws-chunked body
     * (Content-Length = its encoded size) is decoded only when its bytes are stored; else it
     * is counted as Content-Length bytes and x-amz-decoded-content-length is its size. */
    c->chunked = r->te_chunked || (g_opt.store_max && r->aws_chunked && r->method == M_PUT);
    c->ch_state = CH_SIZE;
    c->ch_left = c->decoded = 0;
    c->body_left = !c->chunked && r->has_cl ? r->content_length : 0;
    c->cbody_len = c->cbody_cap = 0;
    c->cbody_toobig = false;
    c->storing = false;
    c->store_err = 0;
    bool keep = r->method == M_POST && (r->upload_id.n || (r->q_delete && r->key_len == 0));
    if (keep && (c->body_left || c->chunked)) {
        if (c->body_left > COMPLETE_BODY_CAP) {
            c->cbody_toobig = true;
        } else {
            size_t cap = c->chunked ? COMPLETE_BODY_CAP : (size_t)c->body_left;
            free(c->cbody);
            c->cbody = malloc(cap);
            if (!c->cbody)
                return -1;
            c->cbody_cap = cap;
        }
    }
    if (g_opt.store_max && r->method == M_PUT && r->key_len && !r->copy_source.n &&
        (r->has_cl || c->chunked)) {
        /* store mode: the body's buffer now (its size known), or as chunks arrive */
        uint64_t want = c->chunked ? (r->has_decoded_len ? r->decoded_len : 0) : c->body_left;
        c->storing = true;
        c->sb = (struct seg){0};
        if (want && !(c->sb.p = buf_get(want, &c->sb.cap))) {
            c->store_err = 507; /* answered once the body is read (and discarded) */
            c->store_want = want;
        }
    }
    /* body bytes already in in[] (a chunked body reads them itself) */
    size_t have = c->in_len - hdr_end;
    size_t take = have < c->body_left ? have : (size_t)c->body_left;
    if (take) {
        body_take(c, c->in + hdr_end, take);
        c->body_left -= take;
        c->req_used += take;
    }
    if ((c->body_left || (c->chunked && !have)) && r->expect_continue &&
        !send_small(c, "HTTP/1.1 100 Continue\r\n\r\n", 25))
        return -1;
    c->state = ST_BODY;
    return 1;
}

/* The request is answered: drop its bytes from in[], back to reading a head. */
static void request_done(struct conn *c)
{
    memmove(c->in, c->in + c->req_used, c->in_len - c->req_used);
    c->in_len -= c->req_used;
    c->req_used = 0;
    c->scan = 0;
    free(c->cbody);
    c->cbody = NULL;
    buf_put(c->sb.p, c->sb.cap); /* a body that was not kept (an error) */
    c->sb = (struct seg){0};
    c->storing = false;
    c->chunked = false;
    blob_unref(c->blob);
    c->blob = NULL;
    c->state = ST_HEAD;
}

/* Runs the connection's state machine until it would block or has used its budget.
 * Returns false if the connection was closed. */
static bool drive(struct conn *c)
{
    struct worker *w = c->w;
    size_t budget = DRIVE_BUDGET;
    for (;;) {
        switch (c->state) {
        case ST_HEAD: {
            if (c->in_len > 0) {
                int t = try_head(c);
                if (t < 0)
                    goto close;
                if (t > 0)
                    continue;
            }
            ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
            if (n > 0) {
                c->in_len += (size_t)n;
                int t = try_head(c);
                if (t < 0)
                    goto close;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close; /* EOF or error */
        }
        case ST_BODY: {
            if (c->chunked) {
                int t = chunked_step(c, &budget);
                if (t < 0)
                    goto close;
                if (t == 0)
                    return set_interest(c, EPOLLIN) || (conn_close(c), false);
                continue;
            }
            if (c->body_left == 0) {
                finish_request(c);
                continue;
            }
            if (budget == 0)
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            size_t want;
            enum bdst kind;
            uint8_t *dst = body_dst(c, c->body_left, &want, &kind);
            ssize_t n = recv(c->fd, dst, want, 0);
            if (n > 0) {
                c->body_left -= (uint64_t)n;
                body_got(c, kind, (size_t)n);
                budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLIN) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close;
        }
        case ST_SEND: {
            if (c->out_off == c->out_len && c->pat_left == 0) {
                if (c->close_after)
                    goto close;
                request_done(c);
                continue;
            }
            if (budget == 0)
                return set_interest(c, EPOLLOUT) || (conn_close(c), false);
            struct iovec iov[SEND_IOVS + 1];
            int niov = 0;
            if (c->out_off < c->out_len)
                iov[niov++] = (struct iovec){c->out + c->out_off, c->out_len - c->out_off};
            uint64_t off = c->pat_off, left = c->pat_left;
            if (c->blob && left) { /* stored bytes, across the object's segments */
                const struct blob *bl = c->blob;
                for (uint32_t i = blob_seg_at(bl, off); left && niov < SEND_IOVS + 1 &&
                                                        i < bl->nseg; i++) {
                    const struct seg *sg = &bl->seg[i];
                    if (off >= sg->start + sg->len)
                        continue;
                    uint64_t in = off - sg->start, len = sg->len - in;
                    if (len > left)
                        len = left;
                    if (len > (1u << 30))
                        len = 1u << 30;
                    iov[niov++] = (struct iovec){sg->p + in, (size_t)len};
                    off += len;
                    left -= len;
                    if (off < sg->start + sg->len)
                        break; /* capped: the rest of this segment in the next sendmsg */
                }
            }
            while (!c->blob && left && niov < SEND_IOVS + 1) {
                size_t pos = (size_t)(off % PAT_PERIOD);
                size_t len = left < PAT_PERIOD ? (size_t)left : PAT_PERIOD;
                iov[niov++] = (struct iovec){g_pat + pos, len};
                off += len;
                left -= len;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (n > 0) {
                size_t k = (size_t)n;
                size_t hdr = c->out_len - c->out_off;
                if (k <= hdr) {
                    c->out_off += k;
                } else {
                    c->out_off = c->out_len;
                    c->pat_off += k - hdr;
                    c->pat_left -= k - hdr;
                    w->bytes_out += k - hdr;
                }
                budget = k >= budget ? 0 : budget - k;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return set_interest(c, EPOLLOUT) || (conn_close(c), false);
            if (n < 0 && errno == EINTR)
                continue;
            goto close;
        }
        }
    }
close:
    conn_close(c);
    return false;
}

static struct worker *g_workers;

/* Takes ownership of the accepted socket fd (its counts already taken): sets it up on w, or
 * closes it when memory runs out. Runs on w's thread. */
static void conn_add(struct worker *w, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = malloc(sizeof(*c));
    if (!c) {
        close(fd);
        atomic_fetch_sub(&w->load, 1);
        atomic_fetch_sub(&g_nconns, 1);
        return;
    }
    c->w = w;
    c->fd = fd;
    c->state = ST_HEAD;
    c->interest = EPOLLIN;
    c->close_after = false;
    c->in_len = c->scan = c->req_used = 0;
    c->body_left = 0;
    c->chunked = false;
    c->cbody = NULL;
    c->cbody_len = c->cbody_cap = 0;
    c->storing = false;
    c->store_err = 0;
    c->sb = (struct seg){0};
    c->blob = NULL;
    c->out_len = c->out_off = 0;
    c->pat_left = 0;
    c->prev = NULL;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e) != 0)
        conn_close(c);
}

/* Accepts what is pending on the listener and gives each connection to the least-loaded
 * worker (ties: this one). Over --max-conns, connections are closed at once. */
static void accept_some(struct worker *w)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "s3flash-sink: accept: out of file descriptors\n");
            return;
        }
        if (atomic_fetch_add(&g_nconns, 1) >= g_opt.max_conns) {
            atomic_fetch_sub(&g_nconns, 1);
            close(fd);
            continue;
        }
        struct worker *t = w;
        int best = atomic_load(&w->load);
        for (int j = 0; j < g_opt.threads; j++) {
            int l = atomic_load(&g_workers[j].load);
            if (l < best) {
                best = l;
                t = &g_workers[j];
            }
        }
        atomic_fetch_add(&t->load, 1);
        if (t != w && write(t->hand_wr, &fd, sizeof(fd)) == (ssize_t)sizeof(fd))
            continue;
        if (t != w) { /* hand-off pipe full: keep it here */
            atomic_fetch_sub(&t->load, 1);
            atomic_fetch_add(&w->load, 1);
        }
        conn_add(w, fd);
    }
}

/* Sets up the connections other workers handed to w. */
static void take_handoffs(struct worker *w)
{
    int fds[64];
    ssize_t n = read(w->hand_rd, fds, sizeof(fds));
    for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++)
        conn_add(w, fds[i]);
}

/* Closes connections handed to w that it never took (shutdown). */
static void drop_handoffs(struct worker *w)
{
    int fds[64];
    ssize_t n;
    while ((n = read(w->hand_rd, fds, sizeof(fds))) > 0)
        for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++) {
            close(fds[i]);
            atomic_fetch_sub(&g_nconns, 1);
        }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event ev[64];
    while (!atomic_load(&g_stop)) {
        int n = epoll_wait(w->ep, ev, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("s3flash-sink: epoll_wait");
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &g_stop_tag)
                goto out;
            if (p == &g_listen_tag) {
                accept_some(w);
                continue;
            }
            if (p == &w->hand_rd) {
                take_handoffs(w);
                continue;
            }
            drive(p);
        }
    }
out:
    while (w->conns)
        conn_close(w->conns);
    return NULL;
}

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
            "  --verbose           log every request to stderr\n"
            "  --quiet             no statistics at exit\n"
            "  --help              this text\n"
            "Objects put are remembered by size; unknown keys ending in size-N have N bytes\n"
            "(not with --store: there only the objects written exist).\n"
            "SIGINT or SIGTERM stops it and prints byte and request counts.\n");
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
        } else if (!strcmp(a, "--keep-checksums")) {
            g_opt.keep_checksums = true;
        } else if (i + 1 < argc) {
            const char *val = argv[++i];
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
    if (!g_pat || !g_up.slots || !objmap_init()) {
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
    if (!g_opt.quiet) {
        fprintf(stderr, "s3flash-sink: listening on %s:%d with %d threads", g_opt.bind_addr,
                port, g_opt.threads);
        if (g_opt.store_max)
            fprintf(stderr, ", storing up to %" PRIu64 " bytes", g_opt.store_max);
        fputc('\n', stderr);
    }
    int sig;
    sigwait(&set, &sig);
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
    for (int i = 0; i < g_opt.threads; i++)
        drop_handoffs(&ws[i]);
    if (!g_opt.quiet) {
        if (g_opt.store_max)
            fprintf(stderr, "s3flash-sink: store: %" PRIu64 " bytes held, %" PRIu64
                            " pooled for reuse, peak %" PRIu64 " of %" PRIu64 "\n",
                    g_pool.held, g_pool.pooled, g_pool.peak, g_opt.store_max);
        fprintf(stderr, "s3flash-sink: %" PRIu64 " requests, %" PRIu64 " body bytes in, %" PRIu64
                        " body bytes out\n", nreq, bin, bout);
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
    free(g_pat);
    return rc;
}
