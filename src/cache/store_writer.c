/* The block store's writer thread (the reads are store.c's): puts copy a block into a
 * bounded queue (q_max bytes, queued and being written) and return; the thread writes each
 * block as a temporary file renamed into place, with the evictions the insert needs
 * (sampled LRU: a few object directories weighted by their slots' bytes, the oldest blocks
 * seen unlinked after checking they are unchanged), and recounts invalid slots first.
 *
 * Invariants: the queue (q_head, q_tail, q_busy, q_bytes, q_stop) is guarded by q_lock; a
 * put that does not fit the bound, or comes after s3f__cache_free began or in a forked
 * child, is dropped (counted), never blocks. Only the writer thread touches c->rng. Each
 * change of the blocks is one step under the store's lock (store_count.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/assert.h"
#include "cache/store_internal.h"

/* ---- eviction: sampled LRU (writer thread) ----------------------------------------------- */

static uint64_t rnd(struct s3f__cache *c) {
    uint64_t x = c->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->rng = x;
    return x;
}

struct cand {
    struct timespec mtime;
    uint64_t size;
    ino_t ino;
    unsigned slot;
    char obj[65];
    char name[24];
};

/* The first-level directory of sample `pick`: drawn uniformly among those holding blocks
 * (not by their bytes, so that a small old object is looked at as often as a large new
 * one); when there are no more of them than samples, each in turn. S3F__CACHE_SLOTS: none. */
static unsigned pick_slot(struct s3f__cache *c, const struct s3f__cache_counts *k,
                          unsigned pick) {
    unsigned used[S3F__CACHE_SLOTS], n = 0;
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++)
        if (k->valid[i] && k->bytes[i])
            used[n++] = i;
    if (!n)
        return S3F__CACHE_SLOTS;
    return used[n <= SAMPLE_DIRS ? pick % n : (unsigned)(rnd(c) % n)];
}

/* Up to `max` names of `dir` (a random sample, reservoir) accepted by `accept`, into
 * names[max][cap]; returns how many, *entries (optional) all entries but . and .. */
static size_t sample_names(struct s3f__cache *c, int dir, bool (*accept)(const char *),
                           char (*names)[65], size_t max, size_t *entries) {
    int fd = dup(dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    rewinddir(d); /* the copy shares its position with `dir`: a second look starts over */
    size_t seen = 0, n = 0, all = 0;
    struct dirent *e;
    while ((e = readdir(d)) && all < SAMPLE_NAMES_MAX) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        all++;
        if (!accept(e->d_name))
            continue;
        seen++;
        size_t at = n < max ? n++ : (size_t)(rnd(c) % seen);
        if (at < max)
            s3f__strlcpy(names[at], e->d_name, 65);
    }
    closedir(d);
    s3f__store_count(&c->n.dirs_listed, 1);
    if (entries)
        *entries = all;
    return n;
}

static bool is_tmp_name(const char *s) {
    return !strncmp(s, ".tmp.", 5);
}

static int by_age(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return 0;
}

/* Sample (no lock): a few object directories, a few blocks of each, oldest first into
 * pool. Sweeps the stale temporary files and the empty object directories it meets, and
 * marks first-level directories that are gone, empty or not directories (stale[]). */
static size_t sample(struct s3f__cache *c, const struct s3f__cache_counts *k,
                     struct cand *pool, bool *stale) {
    size_t n = 0;
    time_t now = time(NULL);
    for (int s = 0; s < SAMPLE_DIRS; s++) {
        unsigned slot = pick_slot(c, k, (unsigned)s);
        if (slot == S3F__CACHE_SLOTS)
            break;
        char top[3];
        s3f__store_hex2(slot, top);
        int d2 = s3f__store_subdir(c->v1_fd, top, false);
        if (d2 < 0) {
            stale[slot] = true; /* counted bytes in a directory that is not there */
            continue;
        }
        char obj[1][65];
        if (!sample_names(c, d2, s3f__store_is_obj_name, obj, 1, NULL)) {
            stale[slot] = true;
            close(d2);
            continue;
        }
        int d3 = s3f__store_subdir(d2, obj[0], false);
        if (d3 < 0) {
            stale[slot] = true; /* a link or a file in its place: its bytes are not ours */
            close(d2);
            continue;
        }
        char names[SAMPLE_BLOCKS][65], tmps[4][65];
        size_t entries = 0;
        size_t nb = sample_names(c, d3, s3f__store_is_block_name, names, SAMPLE_BLOCKS, &entries);
        size_t nt = sample_names(c, d3, is_tmp_name, tmps, 4, NULL);
        for (size_t i = 0; i < nt; i++) {
            struct stat sb;
            if (fstatat(d3, tmps[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
                now - sb.st_mtim.tv_sec > TMP_STALE_S)
                unlinkat(d3, tmps[i], 0); /* a writer that died */
        }
        if (!entries)
            unlinkat(d2, obj[0], AT_REMOVEDIR); /* an object with no block left */
        if (!nb)
            stale[slot] = true;
        for (size_t i = 0; i < nb; i++) {
            struct stat sb;
            if (fstatat(d3, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
                continue;
            bool dup = false;
            for (size_t j = 0; j < n && !dup; j++)
                dup = pool[j].ino == sb.st_ino && pool[j].slot == slot &&
                      !strcmp(pool[j].name, names[i]) && !strcmp(pool[j].obj, obj[0]);
            if (dup || n == POOL)
                continue;
            struct cand *p = &pool[n++];
            p->mtime = sb.st_mtim;
            p->size = (uint64_t)sb.st_size;
            p->ino = sb.st_ino;
            p->slot = slot;
            s3f__strlcpy(p->obj, obj[0], sizeof(p->obj));
            s3f__strlcpy(p->name, names[i], sizeof(p->name));
        }
        close(d3);
        close(d2);
    }
    qsort(pool, n, sizeof(*pool), by_age);
    return n;
}

/* Whether the blocks take more than the bound less `need` and a margin, or the free space
 * is below the floor plus the margin (the margin, a sixteenth of the bound, makes
 * evictions come in batches, not one per insert). */
static bool over(struct s3f__cache *c, uint64_t total, uint64_t need) {
    uint64_t slack = c->max_bytes / 16;
    uint64_t target = c->max_bytes > need + slack ? c->max_bytes - need - slack : 0;
    uint64_t free_bytes, floor;
    s3f__store_fs_space(c, &free_bytes, &floor);
    return total > target || free_bytes < floor + slack;
}

/* One eviction step: sample without the lock, then unlink the oldest quarter of the sample
 * (at least one) that is unchanged since, while over the bound, under one short hold of
 * the lock. Returns false when it made no progress: the sample found no block at all and
 * no count went down (neither a stale directory's, recounted, nor by the recounts below). */
static bool evict_step(struct s3f__cache *c, uint64_t need) {
    struct s3f__cache_counts k;
    s3f__store_counts_valid_locked(c, &k);
    s3f__store_lock_drop(c);
    struct cand pool[POOL];
    bool stale[S3F__CACHE_SLOTS] = {false};
    size_t n = sample(c, &k, pool, stale);
    s3f__store_counts_valid_locked(c, &k);
    uint64_t before = s3f__cache_counts_total(&k);
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++) {
        if (stale[i]) { /* a short step: that one directory */
            k.bytes[i] = s3f__store_recount(c, i);
            s3f__store_slot_write(c, &k, i, k.bytes[i]);
        }
    }
    size_t quota = n / 4 ? n / 4 : 1;
    uint64_t evicted = 0;
    for (size_t i = 0; i < n && quota && over(c, s3f__cache_counts_total(&k), need); i++) {
        struct cand *p = &pool[i];
        int d2 = -1;
        int d3 = s3f__store_obj_dir(c, p->obj, false, &d2);
        if (d3 < 0)
            continue;
        struct stat sb;
        if (fstatat(d3, p->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
            sb.st_ino == p->ino && sb.st_mtim.tv_sec == p->mtime.tv_sec &&
            sb.st_mtim.tv_nsec == p->mtime.tv_nsec && unlinkat(d3, p->name, 0) == 0) {
            s3f__store_slot_add(c, &k, p->slot, -(int64_t)sb.st_size);
            evicted += (uint64_t)sb.st_size;
            quota--;
            unlinkat(d2, p->obj, AT_REMOVEDIR); /* fails while other blocks remain */
        }
        close(d3);
        close(d2);
    }
    uint64_t total = s3f__cache_counts_total(&k);
    s3f__store_lock_drop(c);
    s3f__store_count(&c->n.evicted_bytes, evicted);
    /* a stale directory's bytes given back is progress too, even with no block sampled:
     * the insert that asked may now fit (issue 28, D6) */
    if (n || total < before)
        return true;
    /* Counted bytes but no block found: files removed behind the cache's back. Recount the
     * directories that claim bytes, one per step; progress if the count went down. */
    uint64_t now_total = 0;
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++) {
        if (!k.bytes[i])
            continue;
        struct s3f__cache_counts cur;
        s3f__store_counts_valid_locked(c, &cur);
        s3f__store_slot_write(c, &cur, i, s3f__store_recount(c, i));
        s3f__store_lock_drop(c);
    }
    s3f__store_counts_valid_locked(c, &k);
    now_total = s3f__cache_counts_total(&k);
    s3f__store_lock_drop(c);
    return now_total < total;
}

/* ---- insert (writer thread) ------------------------------------------------------------ */

static void no_room(struct s3f__cache *c) {
    if (__atomic_exchange_n(&c->warned_room, 1, __ATOMIC_RELAXED))
        return;
    uint64_t free_bytes, floor;
    s3f__store_fs_space(c, &free_bytes, &floor);
    s3f__log(c->logger, S3F_LOG_WARN,
             "cache %s: no room for new blocks (%" PRIu64 " bytes free on its file system, "
             "%" PRIu64 " to be left free; bound %" PRIu64 " bytes): reads go to S3 "
             "(logged once)",
             c->dir, free_bytes, floor, c->max_bytes);
}

/* The temporary file of a block, written whole; its name in tmp. -1: not written. */
static int write_tmp(struct s3f__cache *c, const struct job *j, int *d3_out, char *tmp,
                     size_t tmp_len) {
    unsigned char h[HDR_FIXED];
    const char *data = j->names + j->bl + j->kl + j->el;
    s3f__cache_header_make(h, j->object_size, j->offset, j->len, j->bl, j->kl, j->el,
                           s3f__crc32c(0, data, (size_t)j->len));
    uint64_t seq = __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
    snprintf(tmp, tmp_len, ".tmp.%ld.%" PRIu64, (long)getpid(), seq);
    int fd = -1, d3 = -1, e = 0;
    for (int tries = 0; tries < 3 && fd < 0; tries++) {
        /* an evictor may remove the object directory between our mkdir and open: retry */
        d3 = s3f__store_obj_dir(c, j->hex, true, NULL);
        if (d3 < 0) {
            e = errno;
            break;
        }
        fd = openat(d3, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        e = fd < 0 ? errno : 0;
        if (fd < 0) {
            close(d3);
            d3 = -1;
            if (e != ENOENT)
                break;
        }
    }
    if (fd < 0) {
        if (e == ELOOP || e == ENOTDIR)
            s3f__store_error(c, "%s/%.2s/%s: a symbolic link or a file where the cache keeps its "
                           "directories: left alone, block not inserted",
                        c->root, j->hex, j->hex);
        else
            s3f__store_error(c, "cannot create a block in %s/%.2s/%s: %s", c->root, j->hex, j->hex,
                        strerror(e));
        return -1;
    }
    if (s3f__store_write_full(fd, h, sizeof(h)) || s3f__store_write_full(fd, j->names, j->bl + j->kl + j->el) ||
        s3f__store_write_full(fd, data, (size_t)j->len))
        e = errno ? errno : EIO;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlinkat(d3, tmp, 0);
        close(d3);
        s3f__store_error(c, "cannot write %s/%.2s/%s/%s: %s", c->root, j->hex, j->hex, tmp,
                    strerror(e));
        return -1;
    }
    *d3_out = d3;
    return 0;
}

/* Write block j into place (evicting what the limits require): true when it is there;
 * false when it is not (an error, counted and logged once, or no room, logged once). The
 * caller accounts its bytes (inserted or dropped). */
static bool insert(struct s3f__cache *c, const struct job *j) {
    char tmp[64], name[24];
    int d3 = -1;
    if (write_tmp(c, j, &d3, tmp, sizeof(tmp)))
        return false;
    snprintf(name, sizeof(name), "%" PRIu64, j->index);
    uint64_t fsize = HDR_FIXED + j->bl + j->kl + j->el + j->len;
    unsigned slot = s3f__store_slot_of(j->hex);
    bool placed = false, room = false;
    int e = 0;
    for (int round = 0; round < INSERT_ROUNDS && !placed; round++) {
        struct s3f__cache_counts k;
        s3f__store_counts_valid_locked(c, &k);
        uint64_t total = s3f__cache_counts_total(&k), free_bytes, floor;
        s3f__store_fs_space(c, &free_bytes, &floor);
        if (total + fsize <= c->max_bytes && free_bytes >= floor) {
            room = true;
            struct stat old;
            bool replaced = fstatat(d3, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
            if (replaced && !S_ISREG(old.st_mode)) {
                e = EEXIST; /* not ours: left alone */
            } else if (renameat(d3, tmp, d3, name) == 0) {
                placed = true;
                s3f__store_slot_add(c, &k, slot, (int64_t)fsize - (replaced ? (int64_t)old.st_size : 0));
            } else {
                e = errno; /* the directory went with an eviction of its last block */
            }
            s3f__store_lock_drop(c);
            break;
        }
        s3f__store_lock_drop(c);
        if (!evict_step(c, fsize))
            break; /* nothing left to evict */
    }
    if (!placed) {
        unlinkat(d3, tmp, 0);
        if (!room)
            no_room(c);
        else if (e == EEXIST)
            s3f__store_error(c, "%s/%.2s/%s/%s is not a regular file: left alone, block not "
                           "inserted",
                        c->root, j->hex, j->hex, name);
        else if (e)
            s3f__store_error(c, "cannot rename into %s/%.2s/%s/%s: %s", c->root, j->hex, j->hex,
                        name, strerror(e));
    }
    close(d3);
    return placed;
}

/* ---- the queue and the writer thread ------------------------------------------------------ */

/* Every block a put accepts is pending (q_bytes) until it is settled here, in the same hold
 * of q_lock that takes it from the pending bytes: inserted or dropped. The counters read
 * these three under q_lock, so a snapshot never shows a block in two of them or in none
 * (one that read the inserted bytes before the writer settled a block and the pending
 * bytes after showed that block nowhere: "nothing pending, blocks missing"). */
static void settle(struct s3f__cache *c, uint64_t len, bool inserted) {
    c->q_bytes -= len;
    s3f__store_count(inserted ? &c->n.inserted_bytes : &c->n.insert_dropped_bytes, len);
    pthread_cond_broadcast(&c->q_idle);
}

/* Whether block `index` of object `hex` is queued or being written now (q_lock held): a
 * second put of it is not queued again. */
static bool on_its_way(const struct s3f__cache *c, const char *hex, uint64_t index) {
    S3F_ASSERT_HELD(&c->q_lock);
    if (c->q_busy && c->q_busy->index == index && !strcmp(c->q_busy->hex, hex))
        return true;
    for (const struct job *q = c->q_head; q; q = q->next)
        if (q->index == index && !strcmp(q->hex, hex))
            return true;
    return false;
}

static void put(struct s3f__cache_object *o, uint64_t index, const void *data, bool wait) {
    struct s3f__cache *c = o->cache;
    uint64_t len = s3f__cache_block_len(o, index);
    if (!len || !c)
        return;
    size_t bl = strlen(o->bucket), kl = strlen(o->key), el = strlen(o->etag);
    pthread_mutex_lock(&c->q_lock);
    bool mine = c->pid == getpid(); /* a forked child has no writer thread */
    while (wait && mine && c->q_bytes && c->q_bytes + len > c->q_max && !c->q_stop)
        pthread_cond_wait(&c->q_idle, &c->q_lock);
    bool full = c->q_bytes + len > c->q_max || c->q_stop || !mine;
    if (!full && on_its_way(c, o->hex, index)) {
        pthread_mutex_unlock(&c->q_lock);
        return;
    }
    if (full)
        s3f__store_count(&c->n.insert_dropped_bytes, len);
    else
        c->q_bytes += len; /* reserved: pending until the writer settles it */
    pthread_mutex_unlock(&c->q_lock);
    if (full)
        return;
    struct job *j = malloc(sizeof(*j) + bl + kl + el + (size_t)len);
    if (!j) {
        pthread_mutex_lock(&c->q_lock);
        settle(c, len, false);
        pthread_mutex_unlock(&c->q_lock);
        return;
    }
    memset(j, 0, sizeof(*j));
    memcpy(j->hex, o->hex, sizeof(j->hex));
    j->index = index;
    j->object_size = o->size;
    j->offset = index * c->block_bytes;
    j->len = len;
    j->bl = (uint32_t)bl;
    j->kl = (uint32_t)kl;
    j->el = (uint32_t)el;
    j->names = (char *)(j + 1);
    memcpy(j->names, o->bucket, bl);
    memcpy(j->names + bl, o->key, kl);
    memcpy(j->names + bl + kl, o->etag, el);
    memcpy(j->names + bl + kl + el, data, (size_t)len);
    pthread_mutex_lock(&c->q_lock);
    if (c->q_tail)
        c->q_tail->next = j;
    else
        c->q_head = j;
    c->q_tail = j;
    pthread_cond_signal(&c->q_work);
    pthread_mutex_unlock(&c->q_lock);
}

void s3f__cache_put(struct s3f__cache_object *o, uint64_t index, const void *data) {
    put(o, index, data, false);
}

void s3f__cache_put_wait(struct s3f__cache_object *o, uint64_t index, const void *data) {
    put(o, index, data, true);
}

void s3f__cache_flush(struct s3f__cache *c) {
    pthread_mutex_lock(&c->q_lock);
    while (c->thread_ok && c->pid == getpid() && (c->q_bytes || !c->q_started))
        pthread_cond_wait(&c->q_idle, &c->q_lock);
    pthread_mutex_unlock(&c->q_lock);
}

void *s3f__store_writer_main(void *arg) {
    struct s3f__cache *c = arg;
    /* a lost or corrupted count is recounted first, one directory per step */
    struct s3f__cache_counts k;
    s3f__store_counts_valid_locked(c, &k);
    s3f__store_lock_drop(c);
    pthread_mutex_lock(&c->q_lock);
    c->q_started = true;
    pthread_cond_broadcast(&c->q_idle);
    for (;;) {
        while (!c->q_head && !c->q_stop)
            pthread_cond_wait(&c->q_work, &c->q_lock);
        struct job *j = c->q_head;
        if (!j)
            break; /* stopping, and everything queued is written */
        c->q_head = j->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->q_busy = j;
        pthread_mutex_unlock(&c->q_lock);
        bool placed = insert(c, j);
        pthread_mutex_lock(&c->q_lock);
        c->q_busy = NULL;
        settle(c, j->len, placed);
        free(j);
    }
    pthread_mutex_unlock(&c->q_lock);
    return NULL;
}
