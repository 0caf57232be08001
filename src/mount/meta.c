/*
 * The metadata cache, the generations and the memory account.
 *
 * Invariants (fs->mu guards all of it):
 * - An entry (path -> kind, size, mtime, ETag; K_MISSING for a name found missing) is used
 *   while fresh (--metadata-ttl, --negative-metadata-ttl); entries are kept in LRU order
 *   and the least recently used are evicted whenever the account (inode table, this cache,
 *   the listing cache) is above its budget after an insert: bounded work per insert.
 * - Generations, not timestamps, decide what a fill from S3 may overwrite: fs->gen is
 *   bumped by every change the mount makes (create, close, unlink, rename, mkdir, rmdir);
 *   the entry of the changed name keeps that generation (chg) and so does the entry of
 *   its directory (dchg). A HEAD or LIST that started at generation g0 is not stored over
 *   an entry changed after g0, nor, when the entry was evicted, while an evicted entry's
 *   change is newer than g0 (fs->evicted_gen), nor (a listing) over a directory changed
 *   after g0.
 * - mem_used counts what is charged (mnt_mem_charge); after mnt_mem_reclaim it is at most
 *   mem_budget, unless what is left is held by the kernel (inodes) or open handles.
 * - A lookup's HEAD goes to one of the HEAD workers started with the mount (no thread is
 *   created per lookup); fs->heads->mu is a leaf.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "fs.h"

#define META_BUCKETS 65536u

struct meta {
    struct meta *next;               /* hash chain */
    struct meta *lru_prev, *lru_next;
    char *path;
    enum kind kind;
    uint64_t size;
    int64_t mtime;
    char etag[128];
    double expires;                  /* monotonic seconds; used while now < expires */
    uint64_t chg;                    /* generation of the mount's last change of the name */
    uint64_t dchg;                   /* ... of a name in it (directories) */
};


static int64_t meta_bytes(const struct meta *m) {
    return (int64_t)(sizeof(*m) + strlen(m->path) + 1 + 16);
}

void mnt_mem_charge(struct mnt_fs *fs, int64_t bytes) {
    S3F_ASSERT_HELD(&fs->mu);
    if (bytes < 0 && (uint64_t)-bytes > fs->mem_used)
        fs->mem_used = 0;
    else
        fs->mem_used += (uint64_t)bytes;
}

int mnt_meta_init(struct mnt_fs *fs) {
    fs->meta = calloc(META_BUCKETS, sizeof(*fs->meta));
    if (!fs->meta)
        return -ENOMEM;
    mnt_mem_charge(fs, (int64_t)META_BUCKETS * (int64_t)sizeof(void *));
    return 0;
}

static void lru_unlink(struct mnt_fs *fs, struct meta *m) {
    if (m->lru_prev)
        m->lru_prev->lru_next = m->lru_next;
    else
        fs->lru_head = m->lru_next;
    if (m->lru_next)
        m->lru_next->lru_prev = m->lru_prev;
    else
        fs->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = NULL;
}

static void lru_front(struct mnt_fs *fs, struct meta *m) {
    m->lru_next = fs->lru_head;
    m->lru_prev = NULL;
    if (fs->lru_head)
        fs->lru_head->lru_prev = m;
    fs->lru_head = m;
    if (!fs->lru_tail)
        fs->lru_tail = m;
}

static void meta_evict(struct mnt_fs *fs, struct meta *m) {
    for (struct meta **pp = &fs->meta[mnt_hash_str(m->path) % META_BUCKETS]; *pp;
         pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    lru_unlink(fs, m);
    uint64_t g = m->chg > m->dchg ? m->chg : m->dchg;
    if (g > fs->evicted_gen)
        fs->evicted_gen = g;
    mnt_mem_charge(fs, -meta_bytes(m));
    fs->n_meta--;
    free(m->path);
    free(m);
}

void mnt_meta_free(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->lru_head)
        meta_evict(fs, fs->lru_head);
    free(fs->meta);
    fs->meta = NULL;
}

void mnt_mem_reclaim(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    /* the listing cache first (a listing is large and re-fetched in pages), then the
     * least recently used entries */
    if (fs->mem_used > fs->mem_budget)
        mnt_listings_trim(fs);
    while (fs->mem_used > fs->mem_budget && fs->lru_tail)
        meta_evict(fs, fs->lru_tail);
}

struct meta *mnt_meta_find(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct meta *m = fs->meta[mnt_hash_str(path) % META_BUCKETS]; m; m = m->next)
        if (strcmp(m->path, path) == 0)
            return m;
    return NULL;
}

/* The entry of `path`, created when missing (NULL when out of memory). */
static struct meta *meta_get(struct mnt_fs *fs, const char *path) {
    struct meta *m = mnt_meta_find(fs, path);
    if (m) {
        lru_unlink(fs, m);
        lru_front(fs, m);
        return m;
    }
    m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return NULL;
    }
    uint32_t b = mnt_hash_str(path) % META_BUCKETS;
    m->next = fs->meta[b];
    fs->meta[b] = m;
    lru_front(fs, m);
    fs->n_meta++;
    mnt_mem_charge(fs, meta_bytes(m));
    return m;
}

static void meta_store(struct mnt_fs *fs, struct meta *m, enum kind kind, uint64_t size,
                       int64_t mtime, const char *etag) {
    double ttl = kind == K_MISSING ? fs->o.negative_ttl_s : fs->o.metadata_ttl_s;
    m->kind = kind;
    m->size = size;
    m->mtime = mtime;
    snprintf(m->etag, sizeof(m->etag), "%s", etag ? etag : "");
    m->expires = ttl > 0 ? mnt_now() + ttl : 0;
}

int mnt_meta_lookup(struct mnt_fs *fs, const char *path, struct attr *a) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = mnt_meta_find(fs, path);
    if (!m || m->expires <= mnt_now())
        return 0;
    lru_unlink(fs, m);
    lru_front(fs, m);
    a->kind = m->kind;
    a->size = m->size;
    a->mtime = m->mtime;
    memcpy(a->etag, m->etag, sizeof(a->etag));
    return 1;
}

void mnt_meta_fill(struct mnt_fs *fs, const char *path, enum kind kind, uint64_t size,
                   int64_t mtime, const char *etag, uint64_t gen0) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = mnt_meta_find(fs, path);
    if ((m && m->chg > gen0) || (!m && fs->evicted_gen > gen0))
        return; /* the mount changed the name after this request left */
    if (kind == K_MISSING ? fs->o.negative_ttl_s <= 0 : fs->o.metadata_ttl_s <= 0) {
        if (m && !m->chg && !m->dchg)
            meta_evict(fs, m); /* nothing to keep: no TTL, no generation */
        return;
    }
    if (!m && !(m = meta_get(fs, path)))
        return;
    meta_store(fs, m, kind, size, mtime, etag);
    mnt_mem_reclaim(fs);
}

static void bump_dir(struct mnt_fs *fs, const char *path) {
    char dir[PATH_MAX];
    mnt_parent_of(path, dir);
    struct meta *d = meta_get(fs, dir);
    if (d)
        d->dchg = fs->gen;
    else if (fs->gen > fs->evicted_gen)
        fs->evicted_gen = fs->gen; /* no entry to carry it: every older fill is refused */
}

/* A change of `path` by the mount (fs->mu held): a new generation for it and its
 * directory, the listings above dropped. Its entry, or NULL (then evicted_gen carries
 * the generation). */
static struct meta *change_begin(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    fs->gen++;
    struct meta *m = meta_get(fs, path);
    if (m)
        m->chg = fs->gen;
    else if (fs->gen > fs->evicted_gen)
        fs->evicted_gen = fs->gen;
    bump_dir(fs, path);
    mnt_listings_drop_above(fs, path);
    return m;
}

void mnt_meta_change(struct mnt_fs *fs, const char *path, enum kind kind, uint64_t size,
                     int64_t mtime, const char *etag) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = change_begin(fs, path);
    if (m)
        meta_store(fs, m, kind, size, mtime, etag);
    mnt_mem_reclaim(fs);
}

int mnt_meta_was_missing(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = mnt_meta_find(fs, path);
    return m && m->kind == K_MISSING;
}

void mnt_meta_expire(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = change_begin(fs, path);
    if (m)
        m->expires = 0; /* looked up again */
    mnt_mem_reclaim(fs);
}

int mnt_meta_changed_since(struct mnt_fs *fs, const char *path, uint64_t gen0) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = mnt_meta_find(fs, path);
    return m ? m->chg > gen0 : fs->evicted_gen > gen0;
}

int mnt_dir_changed_since(struct mnt_fs *fs, const char *dir, uint64_t gen0) {
    S3F_ASSERT_HELD(&fs->mu);
    struct meta *m = mnt_meta_find(fs, dir);
    return m ? m->dchg > gen0 : fs->evicted_gen > gen0;
}

/* ---- resolve: what a path is ------------------------------------------------------- */

/* A lookup's HEAD, sent by one of the HEAD workers while the lookup LISTs (no thread per
 * lookup): as many as FUSE worker threads (--max-threads), started with the mount, so
 * that every lookup in flight has its HEAD sent at once. A job not yet taken by a worker when the LIST is answered is taken
 * back and sent by the lookup itself: a lookup never waits behind others' HEADs. The
 * pool's mutex is a leaf (nothing is taken under it, no request is sent under it). */
enum head_state { HJ_QUEUED, HJ_RUNNING, HJ_DONE };

struct head_job {
    struct head_job *next;        /* in the queue */
    struct mnt_fs *fs;
    char *key;
    enum head_state state;        /* pool->mu */
    enum s3f_status st;
    struct s3f_object_info info;
    struct s3f_error err;
};

struct mnt_heads {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct head_job *head, *tail; /* queued jobs, oldest first */
    int stop;
    pthread_t *threads;
    size_t n_threads;
};

static void head_job_run(struct head_job *j) {
    S3F_ASSERT_NOT_HELD(&j->fs->mu);
    j->st = s3f_head_object(j->fs->c, j->fs->bucket, j->key, NULL, &j->info, &j->err);
}

static void *head_worker(void *arg) {
    struct mnt_heads *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && !h->head)
            pthread_cond_wait(&h->work, &h->mu);
        if (h->stop)
            break;
        struct head_job *j = h->head;
        h->head = j->next;
        if (!h->head)
            h->tail = NULL;
        j->state = HJ_RUNNING;
        pthread_mutex_unlock(&h->mu);
        head_job_run(j);
        pthread_mutex_lock(&h->mu);
        j->state = HJ_DONE;
        pthread_cond_broadcast(&h->done);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int mnt_heads_start(struct mnt_fs *fs) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct mnt_heads *h = calloc(1, sizeof(*h));
    if (!h)
        return -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->work, NULL);
    pthread_cond_init(&h->done, NULL);
    size_t n = fs->o.max_threads ? fs->o.max_threads : 1;
    h->threads = calloc(n, sizeof(*h->threads));
    while (h->threads && h->n_threads < n &&
           pthread_create(&h->threads[h->n_threads], NULL, head_worker, h) == 0)
        h->n_threads++;
    fs->heads = h; /* with no worker, every lookup sends its HEAD itself */
    return 0;
}

void mnt_heads_stop(struct mnt_fs *fs) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct mnt_heads *h = fs->heads;
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->work);
    pthread_mutex_unlock(&h->mu);
    for (size_t i = 0; i < h->n_threads; i++)
        pthread_join(h->threads[i], NULL);
    pthread_cond_destroy(&h->work);
    pthread_cond_destroy(&h->done);
    pthread_mutex_destroy(&h->mu);
    free(h->threads);
    free(h);
    fs->heads = NULL;
}

/* Hand the HEAD to the workers (or keep it: j stays HJ_QUEUED off the queue). */
static void head_submit(struct mnt_fs *fs, struct head_job *j) {
    struct mnt_heads *h = fs->heads;
    j->state = HJ_QUEUED;
    j->next = NULL;
    if (!h || !h->n_threads)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->tail)
        h->tail->next = j;
    else
        h->head = j;
    h->tail = j;
    pthread_cond_signal(&h->work);
    pthread_mutex_unlock(&h->mu);
}

/* The HEAD's answer: sent here when no worker has taken it yet, else waited for. */
static void head_finish(struct mnt_fs *fs, struct head_job *j) {
    struct mnt_heads *h = fs->heads;
    if (h && h->n_threads) {
        pthread_mutex_lock(&h->mu);
        if (j->state == HJ_QUEUED) {
            struct head_job *prev = NULL;
            for (struct head_job *x = h->head; x && x != j; x = x->next)
                prev = x;
            if (prev)
                prev->next = j->next;
            else
                h->head = j->next;
            if (h->tail == j)
                h->tail = prev;
        }
        while (j->state == HJ_RUNNING)
            pthread_cond_wait(&h->done, &h->mu);
        pthread_mutex_unlock(&h->mu);
    }
    if (j->state == HJ_QUEUED)
        head_job_run(j);
}

#define RESOLVE_TRIES 4

static int resolve_once(struct mnt_fs *fs, const char *path, struct attr *a, int fresh,
                        int retry);

/* What `path` is: 0 with *a filled, or -errno (-ENOENT when missing). `fresh`: ignore the
 * metadata cache (O_DIRECT). Sends one LIST and one HEAD, at the same time. An answer
 * from S3 to requests sent before the mount changed the name (a close, an unlink, a
 * rename of it while they were in flight) is the old state: the name is resolved again
 * (RESOLVE_TRIES at most), so a lookup never hands the kernel a name that is gone or a
 * version that was replaced. */
int mnt_resolve(struct mnt_fs *fs, const char *path, struct attr *a, int fresh) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    memset(a, 0, sizeof(*a));
    if (strcmp(path, "/") == 0) {
        a->kind = K_DIR;
        return 0;
    }
    for (int tries = 1;; tries++) {
        int rc = resolve_once(fs, path, a, fresh, tries < RESOLVE_TRIES);
        if (rc != -EAGAIN)
            return rc;
    }
}

/* One try of mnt_resolve: -EAGAIN when `retry` and the answer from S3 is older than a
 * change of the name. */
static int resolve_once(struct mnt_fs *fs, const char *path, struct attr *a, int fresh,
                        int retry) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&fs->mu);
    struct fh *w = mnt_writer_find(fs, path);
    if (w) {
        a->kind = K_FILE;
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED); /* a snapshot for stat */
        a->mtime = w->opened;
        pthread_mutex_unlock(&fs->mu);
        return 0;
    }
    if (mnt_localdir_find(fs, path) || mnt_holds_local(fs, path)) {
        a->kind = K_DIR;
        pthread_mutex_unlock(&fs->mu);
        return 0;
    }
    if (!fresh && mnt_meta_lookup(fs, path, a)) {
        pthread_mutex_unlock(&fs->mu);
        return a->kind == K_MISSING ? -ENOENT : 0;
    }
    uint64_t gen0 = fs->gen;
    pthread_mutex_unlock(&fs->mu);

    /* The HEAD of the key goes to a worker while this thread LISTs key/: one round trip.
     * A directory shadows a file of the same name. */
    struct head_job hj;
    memset(&hj, 0, sizeof(hj));
    hj.fs = fs;
    hj.key = mnt_key_of(fs, path, "");
    char *dkey = mnt_key_of(fs, path, "/");
    if (!hj.key || !dkey) {
        free(hj.key);
        free(dkey);
        return -ENOMEM;
    }
    s3f_error_clear(&hj.err);
    head_submit(fs, &hj);
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_list_options lo = {.prefix = dkey, .max_keys = 1};
    struct s3f_list_page *page = NULL;
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
    free(dkey);
    head_finish(fs, &hj);
    free(hj.key);
    if (st != S3F_OK) {
        mnt_log_error("lookup", path, &err);
        return -mnt_errno_of(st, 0);
    }
    int is_dir = page->n_objects > 0 || page->n_common_prefixes > 0;
    s3f_list_page_free(page);
    int rc = 0;
    if (is_dir) {
        a->kind = K_DIR;
    } else if (hj.st == S3F_ERR_NOT_FOUND) {
        a->kind = K_MISSING;
        rc = -ENOENT;
    } else if (hj.st != S3F_OK) {
        mnt_log_error("lookup", path, &hj.err);
        return -mnt_errno_of(hj.st, 0);
    } else {
        a->kind = K_FILE;
        a->size = hj.info.size;
        a->mtime = hj.info.last_modified;
        snprintf(a->etag, sizeof(a->etag), "%s", hj.info.etag);
    }
    pthread_mutex_lock(&fs->mu);
    if (retry && mnt_meta_changed_since(fs, path, gen0)) {
        pthread_mutex_unlock(&fs->mu);
        return -EAGAIN;
    }
    mnt_meta_fill(fs, path, a->kind, a->size, a->mtime, a->etag, gen0);
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int mnt_parent_ok(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    char parent[PATH_MAX];
    mnt_parent_of(path, parent);
    struct attr a;
    int rc = mnt_resolve(fs, parent, &a, 0);
    if (rc)
        return rc;
    return a.kind == K_DIR ? 0 : -ENOTDIR;
}
