/*
 * s3flash-sink: what the sink remembers: the object map ("bucket/key" -> size, and in store mode
 * the bytes), multipart uploads, whole-object checksums, store mode's buffer pool. Thread-safe:
 * each table has its own mutex. See sink.h.
 */
#include "sink.h"

/* ---- small helpers ---- */

/* 64-bit mix (splitmix64's finalizer). */
uint64_t mix64(uint64_t x)
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
void fake_etag(const char *name, size_t n, uint64_t size, char *out)
{
    uint64_t h1 = hash_bytes(name, n, size);
    uint64_t h2 = mix64(h1 ^ (size * 0x9e3779b97f4a7c15ULL));
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, h1, h2);
}


/* ---- store mode (--store MAX): the bytes of objects and parts, in reusable buffers ----
 * Every buffer is counted by its capacity. held = buffers holding data (objects, parts, bodies
 * being received); pooled = freed buffers kept for reuse (pages already faulted in: fresh
 * memory faults slowly). held + pooled never exceeds --store: a buffer that does not fit
 * evicts pooled ones, and if it still does not fit the request is refused (507). Buffers over
 * 4 KiB come in size classes of 8 steps per power of two (at most 12.5% slack); a freed
 * buffer goes back to its class's list. Smaller ones are plain malloc/free. */
#define POOL_MIN 4096u
struct pool g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER};
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
uint8_t *buf_get(uint64_t n, uint64_t *cap)
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
void buf_put(uint8_t *p, uint64_t cap)
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

void pool_free(void)
{
    for (int i = 0; i < POOL_CLASSES; i++)
        while (g_pool.cls[i]) {
            struct pooled *b = g_pool.cls[i];
            g_pool.cls[i] = b->next;
            free(b);
        }
    g_pool.pooled = 0;
}

struct blob *blob_new(uint32_t nseg)
{
    struct blob *b = calloc(1, sizeof(*b) + (size_t)nseg * sizeof(struct seg));
    if (b) {
        atomic_init(&b->refs, 1);
        b->nseg = nseg;
    }
    return b;
}

void blob_unref(struct blob *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    for (uint32_t i = 0; i < b->nseg; i++)
        buf_put(b->seg[i].p, b->seg[i].cap);
    free(b);
}

/* The index of the segment holding offset off (off < size). */
uint32_t blob_seg_at(const struct blob *b, uint64_t off)
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

bool objmap_init(void)
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

void objmap_free(void)
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
bool objmap_put(const char *k, size_t n, uint64_t size, uint32_t nparts,
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

/* Keeps `ents` (n of them, sorted) the `max` smallest keys seen; 0 or the new count. */
static size_t list_insert(struct list_ent *ents, size_t n, size_t max, const struct obj *o,
                          size_t skip)
{
    const char *k = o->key + skip;
    size_t kn = o->klen - skip;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        size_t mn = ents[mid].klen < kn ? ents[mid].klen : kn;
        int c = memcmp(ents[mid].key, k, mn);
        if (c < 0 || (c == 0 && ents[mid].klen < kn))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= max)
        return n;
    char *copy = malloc(kn ? kn : 1);
    if (!copy)
        return n;
    memcpy(copy, k, kn);
    if (n == max) { /* the largest falls out */
        free(ents[n - 1].key);
        n--;
    }
    memmove(&ents[lo + 1], &ents[lo], (n - lo) * sizeof(*ents));
    ents[lo] = (struct list_ent){.key = copy, .klen = kn, .size = o->size, .ver = o->ver,
                                 .nparts = o->nparts};
    return n + 1;
}

size_t objmap_list(const char *bucket, size_t bn, const char *prefix, size_t pn,
                   const char *after, size_t an, size_t max, struct list_ent *ents)
{
    size_t n = 0;
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &g_shards[i];
        pthread_mutex_lock(&s->mu);
        for (size_t j = 0; s->tab && j <= s->mask; j++) {
            for (const struct obj *o = s->tab[j]; o; o = o->next) {
                if (o->klen < bn + 1 + pn || memcmp(o->key, bucket, bn) != 0 ||
                    o->key[bn] != '/' || (pn && memcmp(o->key + bn + 1, prefix, pn) != 0))
                    continue;
                const char *k = o->key + bn + 1;
                size_t kn = o->klen - bn - 1, mn = kn < an ? kn : an;
                int c = an ? memcmp(k, after, mn) : 0; /* no start: after may be NULL */
                if (an && (c < 0 || (c == 0 && kn <= an)))
                    continue; /* not after the start */
                n = list_insert(ents, n, max, o, bn + 1);
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    return n;
}

bool objmap_del(const char *k, size_t n)
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

void objmap_each(const char *bp, size_t bn, const char *prefix, size_t pn, objmap_each_fn fn,
                 void *ud)
{
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &g_shards[i];
        pthread_mutex_lock(&s->mu);
        for (size_t j = 0; j <= s->mask; j++)
            for (struct obj *o = s->tab[j]; o; o = o->next)
                if (o->klen >= bn + pn && memcmp(o->key, bp, bn) == 0 &&
                    (pn == 0 || memcmp(o->key + bn, prefix, pn) == 0))
                    fn(ud, o->key + bn, o->klen - bn, o->size, o->hash);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Locks the shards of two hashes in a fixed order (one lock when they are the same). */
static void lock2(struct shard *a, struct shard *b)
{
    if (a == b) {
        pthread_mutex_lock(&a->mu);
    } else if (a < b) {
        pthread_mutex_lock(&a->mu);
        pthread_mutex_lock(&b->mu);
    } else {
        pthread_mutex_lock(&b->mu);
        pthread_mutex_lock(&a->mu);
    }
}

static void unlock2(struct shard *a, struct shard *b)
{
    pthread_mutex_unlock(&a->mu);
    if (a != b)
        pthread_mutex_unlock(&b->mu);
}

int objmap_rename(const char *src, size_t sn, const char *dst, size_t dn, bool no_overwrite)
{
    uint64_t hs = hash_bytes(src, sn, 0), hd = hash_bytes(dst, dn, 0);
    struct shard *ss = &g_shards[hs >> 58], *sd = &g_shards[hd >> 58];
    struct obj *fresh = malloc(sizeof(struct obj) + dn), *drop = NULL;
    if (!fresh)
        return 500;
    int rc = 0;
    lock2(ss, sd);
    struct obj **ps = objmap_slot(ss, hs, src, sn);
    if (!*ps) {
        rc = 404;
        drop = fresh;
        goto out;
    }
    struct obj **pd = objmap_slot(sd, hd, dst, dn);
    if (*pd && no_overwrite) {
        rc = 412;
        drop = fresh;
        goto out;
    }
    if (*pd == *ps) { /* renamed onto itself */
        drop = fresh;
        goto out;
    }
    struct obj *o = *ps;
    *ps = o->next;
    ss->count--;
    *fresh = *o;
    fresh->hash = hd;
    fresh->klen = (uint32_t)dn;
    memcpy(fresh->key, dst, dn);
    pd = objmap_slot(sd, hd, dst, dn); /* the unlink above may have moved it */
    if (*pd) { /* replaced: the old destination goes */
        struct obj *old = *pd;
        fresh->next = old->next;
        *pd = fresh;
        drop = old;
        atomic_fetch_sub(&g_nobjs, 1);
    } else {
        fresh->next = NULL;
        *pd = fresh;
        sd->count++;
    }
    free(o);
out:
    unlock2(ss, sd);
    if (drop && drop != fresh)
        blob_unref(drop->data);
    free(drop);
    return rc;
}

int objmap_append(const char *k, size_t n, uint64_t offset, uint64_t len, struct seg *add,
                  uint64_t *size, uint64_t *ver)
{
    uint64_t h = hash_bytes(k, n, 0);
    struct shard *s = &g_shards[h >> 58];
    struct blob *nb = NULL, *old = NULL;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    struct obj **pp = objmap_slot(s, h, k, n);
    bool existed = *pp != NULL;
    uint64_t cur = existed ? (*pp)->size : 0;
    if (cur != offset) { /* absent: only offset 0 creates it */
        rc = 400;
        goto out;
    }
    if (g_opt.store_max) { /* one new segment: the old bytes, then the new */
        uint64_t cap;
        uint8_t *p = buf_get(cur + len ? cur + len : 1, &cap);
        if (!p || !(nb = blob_new(1))) {
            buf_put(p, cap);
            rc = 507;
            goto out;
        }
        struct blob *ob = *pp ? (*pp)->data : NULL;
        for (uint32_t i = 0; ob && i < ob->nseg; i++)
            memcpy(p + ob->seg[i].start, ob->seg[i].p, (size_t)ob->seg[i].len);
        if (len)
            memcpy(p + cur, add->p, (size_t)len);
        nb->seg[0] = (struct seg){.p = p, .len = cur + len, .cap = cap, .start = 0};
        nb->size = cur + len;
    }
    *size = cur + len;
    if (*pp) {
        (*pp)->size = cur + len;
        (*pp)->ver = g_opt.store_max ? atomic_fetch_add(&g_ver, 1) + 1 : 0;
        *ver = (*pp)->ver;
        old = (*pp)->data;
        (*pp)->data = nb;
        nb = NULL;
    }
out:
    pthread_mutex_unlock(&s->mu);
    blob_unref(old);
    if (rc == 0 && !existed) /* a new object (offset 0): put as a whole */
        if (!objmap_put(k, n, len, 0, nb, ver) && g_opt.store_max)
            rc = 507;
    return rc;
}

/* Looks the object up; unknown keys whose last "size-" is followed by digits only (to the end)
 * have that size (not in store mode, except under --synth-list: there only what was written
 * exists). False: no such
 * key. data: as for objmap_get. */
bool object_size(const char *k, size_t n, uint64_t *size, uint32_t *nparts,
                        uint64_t *ver, struct blob **data)
{
    if (data)
        *data = NULL;
    *ver = 0;
    if (objmap_get(k, n, size, nparts, ver, data))
        return true;
    /* store mode: only what was written exists, and the --synth-list keys */
    if (g_opt.store_max && !(g_opt.synth_n && n > g_opt.synth_name_len &&
                             !memcmp(k, g_opt.synth_name, g_opt.synth_name_len)))
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
struct uploads g_up = {.mu = PTHREAD_MUTEX_INITIALIZER};

void upload_release(struct upload *u)
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
int upload_new(const char *k, size_t n, char *id)
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
int upload_part(const char *id, size_t idlen, const char *k, size_t n, uint32_t pn,
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
int upload_abort(const char *id, size_t idlen, const char *k, size_t n)
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
int upload_complete(const char *id, size_t idlen, const char *k, size_t n,
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
static pthread_mutex_t g_ck_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ckrec *g_cks;

/* Remember (hdr non-NULL) or forget the checksum of key k. */
void ck_set(const char *k, size_t n, const char *hdr)
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
void ck_get(const char *k, size_t n, char *out, size_t cap)
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

void ck_free(void)
{
    while (g_cks) {
        struct ckrec *x = g_cks;
        g_cks = x->next;
        free(x);
    }
}
