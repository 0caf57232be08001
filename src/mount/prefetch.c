/*
 * --prefetch-listed N: whole small files fetched ahead when a listed directory's files are
 * opened in the listing's order (`cat dir/FILES`, `tar c`, a DataLoader over a folder).
 *
 * Invariants:
 * - Off (N = 0): no state, no thread, no request; every hook returns at once.
 * - The order is the last directory listed through readdir (its files, in the order the
 *   kernel was given them, at most PF_ORDER_MAX and a quarter of the metadata budget,
 *   charged to fs's memory account outside pf->mu). An open of listed file i followed by an
 *   open of listed file i+1 (the next open of a file of that directory) queues files
 *   i+2 .. i+1+N; each following open in order tops the window up.
 * - Each prefetch is one GET without a Range (s3f_fetch: many in flight on the readers'
 *   client, no thread per file) with If-Match on the listed ETag: a replaced object is
 *   never fetched; bytes fetched are handed to an open only when the ETag the open reads
 *   (the inode's) is the listed one, else they are dropped and the open reads from S3 as
 *   without the option. Only files of at most PF_MAX_FILE (and the part size) are fetched.
 * - Bounded: at most N files queued, in flight or held, and bytes held (by listed size,
 *   counted before the GET) at most a quarter of the mount's metadata budget (a file that
 *   does not fit is not fetched). A fetched file not opened within --metadata-ttl of its
 *   GET's answer (PF_IDLE_S at most) is dropped: it is served only while the mount would
 *   still answer the listed attributes without asking S3 (as the page cache's bytes of a
 *   version). Everything is dropped when another directory is listed.
 * - A file's GET answered at the listed ETag refreshes its metadata (as a HEAD would):
 *   the lookup before its open, past the listing's TTL, then sends nothing.
 * - Locks: pf->mu is a leaf (no other lock is taken under it, no request is made under it).
 *   One thread (the worker) owns the s3f_fetch: it adds and takes; opens wait on pf->cv
 *   for a file in flight (PF_WAIT_S at most, then they read from S3).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

#define PF_ORDER_MAX 100000
#define PF_MAX_FILE (1u << 20)
#define PF_IDLE_S 10.0
#define PF_WAIT_S 30.0

enum pf_state { PF_QUEUED, PF_INFLIGHT, PF_DONE, PF_FAILED };

struct pfe {
    struct pfe *next;          /* pf->ents, in the order queued (= added to the fetch) */
    char *path, *key;
    char etag[128];
    uint64_t size;             /* listed size: what is counted */
    enum pf_state state;
    int dropped;               /* in flight, no longer wanted: freed when taken */
    void *data;
    size_t len;
    double t;                  /* when it was done */
    uint64_t gen0;             /* fs->gen when its GET was added */
};

struct ordent {
    char *name;
    uint64_t size;
    char etag[128];
};

struct mnt_pf {
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* worker: work queued or stop; opens: a file done */
    pthread_t thr;
    int started, stop;
    unsigned n_max;
    uint64_t bytes, bytes_max, file_max;
    double idle_s;
    char *dir;                 /* the listed directory */
    struct ordent *ord;
    size_t n_ord, cap_ord;
    uint64_t ord_bytes, ord_max; /* the order's size (charged to fs's memory account) */
    size_t last;               /* index of the last file opened, n_ord when none */
    size_t next_q;             /* the next index to queue */
    int streak;
    struct pfe *ents;
    size_t n_ents;
    struct s3f_fetch *f;
};

static void pfe_free(struct mnt_pf *p, struct pfe *e) {
    p->bytes -= e->size;
    p->n_ents--;
    free(e->data);
    free(e->path);
    free(e->key);
    free(e);
}

/* Unlink and free e, or mark it dropped when the worker owns it (in flight). */
static void pfe_drop(struct mnt_pf *p, struct pfe *e) {
    if (e->state == PF_INFLIGHT) {
        e->dropped = 1;
        return;
    }
    for (struct pfe **pp = &p->ents; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    pfe_free(p, e);
}

static void drop_idle(struct mnt_pf *p, double now) {
    struct pfe *e = p->ents;
    while (e) {
        struct pfe *nx = e->next;
        if ((e->state == PF_DONE || e->state == PF_FAILED) && now - e->t > p->idle_s)
            pfe_drop(p, e);
        e = nx;
    }
}

static void drop_all(struct mnt_pf *p) {
    struct pfe *e = p->ents;
    while (e) {
        struct pfe *nx = e->next;
        pfe_drop(p, e);
        e = nx;
    }
}

static uint64_t ordent_bytes(const char *name) {
    return sizeof(struct ordent) + strlen(name) + 1 + 16;
}

static void order_clear(struct mnt_pf *p) {
    for (size_t i = 0; i < p->n_ord; i++)
        free(p->ord[i].name);
    p->ord_bytes = 0;
    p->n_ord = 0;
    p->last = 0;
    p->next_q = 0;
    p->streak = 0;
}

static void *pf_worker(void *arg) {
    struct mnt_fs *fs = arg;
    struct mnt_pf *p = fs->pf;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        /* add what is queued, in order */
        struct pfe *q = NULL;
        for (struct pfe *e = p->ents; e && !q; e = e->next)
            if (e->state == PF_QUEUED)
                q = e;
        if (q) {
            q->state = PF_INFLIGHT;
            char *key = q->key;
            char etag[128];
            snprintf(etag, sizeof(etag), "%s", q->etag);
            pthread_mutex_unlock(&p->mu);
            pthread_mutex_lock(&fs->mu);
            uint64_t gen0 = fs->gen;
            pthread_mutex_unlock(&fs->mu);
            struct s3f_error err;
            s3f_error_clear(&err);
            enum s3f_status st = s3f_fetch_add(p->f, fs->bucket, key, etag, p->file_max, &err);
            pthread_mutex_lock(&p->mu);
            q->gen0 = gen0;
            if (st != S3F_OK) {
                q->state = PF_FAILED;
                q->t = mnt_now();
                if (q->dropped)
                    pfe_drop(p, q);
                pthread_cond_broadcast(&p->cv);
            }
            continue;
        }
        if (s3f_fetch_pending(p->f) == 0) {
            struct timespec ts = mnt_deadline(1);
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
            drop_idle(p, mnt_now());
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        void *data = NULL;
        size_t len = 0;
        struct s3f_error err;
        s3f_error_clear(&err);
        struct s3f_object_info info;
        memset(&info, 0, sizeof(info));
        enum s3f_status st = s3f_fetch_take(p->f, &data, &len, &info, &err);
        pthread_mutex_lock(&p->mu);
        /* taken in the order added: the oldest in flight */
        struct pfe *e = NULL;
        for (struct pfe *x = p->ents; x && !e; x = x->next)
            if (x->state == PF_INFLIGHT)
                e = x;
        if (!e) {
            free(data);
            continue;
        }
        e->state = st == S3F_OK ? PF_DONE : PF_FAILED;
        e->data = st == S3F_OK ? data : NULL;
        e->len = len;
        e->t = mnt_now();
        if (st != S3F_OK)
            free(data);
        char *fill = st == S3F_OK && !e->dropped ? strdup(e->path) : NULL;
        uint64_t gen0 = e->gen0;
        if (e->dropped)
            pfe_drop(p, e);
        pthread_cond_broadcast(&p->cv);
        if (fill) {
            /* the GET's answer is as fresh as a HEAD's: the open's lookup needs none */
            pthread_mutex_unlock(&p->mu);
            pthread_mutex_lock(&fs->mu);
            mnt_meta_fill(fs, fill, K_FILE, len, info.last_modified, info.etag, gen0);
            pthread_mutex_unlock(&fs->mu);
            free(fill);
            pthread_mutex_lock(&p->mu);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int mnt_pf_init(struct mnt_fs *fs) {
    if (fs->o.prefetch_listed == 0)
        return 0;
    struct mnt_pf *p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    pthread_mutex_init(&p->mu, NULL);
    mnt_cond_init(&p->cv);
    p->n_max = fs->o.prefetch_listed;
    p->bytes_max = fs->mem_budget / 4;
    p->ord_max = fs->mem_budget / 4;
    p->file_max = PF_MAX_FILE;
    p->idle_s = fs->o.metadata_ttl_s < PF_IDLE_S ? fs->o.metadata_ttl_s : PF_IDLE_S;
    if (fs->part_size && fs->part_size < p->file_max)
        p->file_max = fs->part_size;
    fs->pf = p;
    struct s3f_error err;
    s3f_error_clear(&err);
    if (s3f_fetch_new(fs->c, NULL, &p->f, &err) != S3F_OK)
        return -1;
    if (pthread_create(&p->thr, NULL, pf_worker, fs) != 0)
        return -1;
    p->started = 1;
    return 0;
}

void mnt_pf_free(struct mnt_fs *fs) {
    struct mnt_pf *p = fs->pf;
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        /* the worker may wait in s3f_fetch_take: stopping the fetch ends it */
        pthread_join(p->thr, NULL);
    }
    s3f_fetch_free(p->f);
    for (struct pfe *e = p->ents; e; e = p->ents) {
        p->ents = e->next;
        pfe_free(p, e);
    }
    order_clear(p);
    free(p->ord);
    free(p->dir);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    fs->pf = NULL;
}

void mnt_pf_listed(struct mnt_fs *fs, const char *dir, uint64_t index, const char *name,
                   const struct attr *a) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct mnt_pf *p = fs->pf;
    if (!p || a->kind != K_FILE)
        return;
    pthread_mutex_lock(&p->mu);
    uint64_t ord_bytes0 = p->ord_bytes;
    if (!p->dir || strcmp(p->dir, dir) != 0 || index == 0) {
        char *d = strdup(dir);
        if (!d)
            goto out;
        if (!p->dir || strcmp(p->dir, dir) != 0)
            drop_all(p);
        free(p->dir);
        p->dir = d;
        order_clear(p);
    }
    if (p->n_ord >= PF_ORDER_MAX || p->ord_bytes + ordent_bytes(name) > p->ord_max)
        goto out;
    for (size_t i = p->n_ord; i-- > 0 && i + 8 >= p->n_ord;)
        if (strcmp(p->ord[i].name, name) == 0)
            goto out; /* the same page given again */
    if (p->n_ord == p->cap_ord) {
        size_t cap = p->cap_ord ? p->cap_ord * 2 : 256;
        struct ordent *v = realloc(p->ord, cap * sizeof(*v));
        if (!v)
            goto out;
        p->ord = v;
        p->cap_ord = cap;
    }
    struct ordent *o = &p->ord[p->n_ord];
    o->name = strdup(name);
    if (!o->name)
        goto out;
    o->size = a->size;
    snprintf(o->etag, sizeof(o->etag), "%s", a->etag);
    p->n_ord++;
    p->ord_bytes += ordent_bytes(name);
    p->last = p->n_ord; /* nothing opened yet */
out:;
    int64_t delta = (int64_t)p->ord_bytes - (int64_t)ord_bytes0;
    pthread_mutex_unlock(&p->mu);
    if (delta) {
        pthread_mutex_lock(&fs->mu);
        mnt_mem_charge(fs, delta);
        if (delta > 0)
            mnt_mem_reclaim(fs);
        pthread_mutex_unlock(&fs->mu);
    }
}

static struct pfe *pfe_find(struct mnt_pf *p, const char *path) {
    for (struct pfe *e = p->ents; e; e = e->next)
        if (!e->dropped && strcmp(e->path, path) == 0)
            return e;
    return NULL;
}

/* Queue files from p->next_q on while the window has room (p->mu held). */
static void pf_queue(struct mnt_fs *fs, struct mnt_pf *p) {
    S3F_ASSERT_HELD(&p->mu);
    int queued = 0;
    while (p->next_q < p->n_ord && p->next_q <= p->last + p->n_max && p->n_ents < p->n_max) {
        struct ordent *o = &p->ord[p->next_q];
        if (o->size > p->file_max || !o->etag[0] || p->bytes + o->size > p->bytes_max) {
            p->next_q++;
            continue;
        }
        char *path = mnt_child_path(p->dir, o->name, strlen(o->name));
        if (!path)
            break;
        if (pfe_find(p, path)) {
            free(path);
            p->next_q++;
            continue;
        }
        struct pfe *e = calloc(1, sizeof(*e));
        char *key = mnt_key_of(fs, path, "");
        if (!e || !key) {
            free(e);
            free(key);
            free(path);
            break;
        }
        e->path = path;
        e->key = key;
        snprintf(e->etag, sizeof(e->etag), "%s", o->etag);
        e->size = o->size;
        e->state = PF_QUEUED;
        struct pfe **pp = &p->ents;
        while (*pp)
            pp = &(*pp)->next;
        *pp = e;
        p->n_ents++;
        p->bytes += e->size;
        p->next_q++;
        queued = 1;
    }
    if (queued)
        pthread_cond_broadcast(&p->cv);
}

int mnt_pf_open(struct mnt_fs *fs, const char *path, const char *etag, void **data,
                size_t *len) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct mnt_pf *p = fs->pf;
    *data = NULL;
    *len = 0;
    if (!p || !etag[0])
        return 0;
    char dir[PATH_MAX];
    mnt_parent_of(path, dir);
    const char *name = path + strlen(dir) + (strcmp(dir, "/") != 0);
    int got = 0;
    pthread_mutex_lock(&p->mu);
    drop_idle(p, mnt_now());
    if (p->dir && strcmp(p->dir, dir) == 0) {
        size_t i = p->n_ord;
        if (p->last + 1 < p->n_ord && strcmp(p->ord[p->last + 1].name, name) == 0)
            i = p->last + 1;
        else
            for (size_t k = 0; k < p->n_ord && i == p->n_ord; k++)
                if (strcmp(p->ord[k].name, name) == 0)
                    i = k;
        if (i < p->n_ord) {
            p->streak = (p->last < p->n_ord && i == p->last + 1) ? p->streak + 1 : 0;
            p->last = i;
            if (p->next_q <= i)
                p->next_q = i + 1;
            if (p->streak >= 1)
                pf_queue(fs, p);
        }
    }
    struct pfe *e = pfe_find(p, path);
    if (e && strcmp(e->etag, etag) != 0) {
        pfe_drop(p, e); /* another version: its bytes are never served */
        e = NULL;
    }
    if (e) {
        double until = mnt_now() + PF_WAIT_S;
        while (e && (e->state == PF_QUEUED || e->state == PF_INFLIGHT) && !p->stop &&
               mnt_now() < until) {
            struct timespec ts = mnt_deadline(1);
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
            e = pfe_find(p, path);
        }
        if (e && e->state == PF_DONE && mnt_now() - e->t <= p->idle_s) {
            *data = e->data;
            *len = e->len;
            e->data = NULL;
            got = 1;
        }
        if (e)
            pfe_drop(p, e);
    }
    pthread_mutex_unlock(&p->mu);
    return got;
}

void mnt_pf_stats(struct mnt_fs *fs, uint64_t *bytes, size_t *n) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct mnt_pf *p = fs->pf;
    *bytes = 0;
    *n = 0;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    *bytes = p->bytes;
    *n = p->n_ents;
    pthread_mutex_unlock(&p->mu);
}
