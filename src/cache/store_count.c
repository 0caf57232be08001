/* The block store's lock and byte count (the rest of the store is store.c's). Each step
 * that changes the blocks runs under c->lock and the flock of v1/lock (flock does not
 * exclude threads sharing its descriptor, the mutex does). v1/lock holds one checked slot
 * per first-level directory (s3f__cache_counts_parse): a slot found invalid (a corrupted
 * or lost count) is recounted by a scan of that one directory, one directory per lock
 * hold, so the count is exact without scanning the tree.
 *
 * Invariants: a slot is read and written only with the lock held; a count that cannot be
 * written leaves the slot invalid (recounted next time), never wrong. */
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

/* ---- the lock and the count ----------------------------------------------------------------- */

void s3f__store_lock_take(struct s3f__cache *c) {
    S3F_ASSERT_NOT_HELD(&c->lock); /* one step at a time: never taken twice */
    pthread_mutex_lock(&c->lock);
    while (flock(c->lock_fd, LOCK_EX) != 0 && errno == EINTR)
        ;
}

void s3f__store_lock_drop(struct s3f__cache *c) {
    S3F_ASSERT_HELD(&c->lock);
    flock(c->lock_fd, LOCK_UN);
    pthread_mutex_unlock(&c->lock);
}

/* The count (lock held). */
void s3f__store_counts_read(struct s3f__cache *c, struct s3f__cache_counts *k) {
    S3F_ASSERT_HELD(&c->lock);
    unsigned char buf[S3F__CACHE_COUNT_FILE];
    ssize_t n = pread(c->lock_fd, buf, sizeof(buf), 0);
    s3f__cache_counts_parse(buf, n > 0 ? (size_t)n : 0, c->count_limit, k);
}

/* Write slot `i` (lock held); a missing or foreign head is written first, every other slot
 * then invalid (recounted when next seen). */
bool s3f__store_slot_write(struct s3f__cache *c, const struct s3f__cache_counts *k, unsigned i,
                           uint64_t v) {
    S3F_ASSERT_HELD(&c->lock);
    if (!k->head_ok) {
        unsigned char head[S3F__CACHE_COUNT_FILE];
        memset(head, 0, sizeof(head));
        memcpy(head, COUNT_MAGIC, 8);
        uint32_t slots = S3F__CACHE_SLOTS;
        memcpy(head + 8, &slots, sizeof(slots));
        if (pwrite(c->lock_fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
            ftruncate(c->lock_fd, sizeof(head)) != 0) {
            s3f__store_error(c, "cannot write the byte count: %s", strerror(errno));
            return false;
        }
    }
    uint64_t slot[2] = {v, v ^ S3F__CACHE_COUNT_KEY};
    if (pwrite(c->lock_fd, slot, sizeof(slot), S3F__CACHE_COUNT_HEAD + (off_t)i * 16) !=
        (ssize_t)sizeof(slot)) {
        s3f__store_error(c, "cannot write the byte count: %s", strerror(errno));
        return false;
    }
    return true;
}

/* Add (or take) `delta` bytes to slot `i` (lock held; k read under the same hold). */
void s3f__store_slot_add(struct s3f__cache *c, struct s3f__cache_counts *k, unsigned i,
                         int64_t delta) {
    S3F_ASSERT_HELD(&c->lock);
    if (!k->valid[i])
        return; /* recounted before it is used */
    uint64_t v = k->bytes[i];
    if (delta < 0)
        v = (uint64_t)-delta > v ? 0 : v - (uint64_t)-delta;
    else
        v = v + (uint64_t)delta > c->count_limit ? c->count_limit : v + (uint64_t)delta;
    k->bytes[i] = v;
    s3f__store_slot_write(c, k, i, v);
    k->head_ok = true;
}

/* Bytes of the block files under first-level directory `slot`, and stale temporary files
 * removed (`sweep`). Only regular files directly in object directories are counted. */
static uint64_t count_dir(struct s3f__cache *c, unsigned slot, bool sweep) {
    char top[3];
    s3f__store_hex2(slot, top);
    int d2 = s3f__store_subdir(c->v1_fd, top, false);
    if (d2 < 0)
        return 0;
    DIR *mid = fdopendir(d2);
    if (!mid) {
        close(d2);
        return 0;
    }
    uint64_t total = 0;
    time_t now = time(NULL);
    struct dirent *e2;
    s3f__store_count(&c->n.dirs_listed, 1);
    while ((e2 = readdir(mid))) {
        if (!s3f__store_is_obj_name(e2->d_name))
            continue;
        int d3 = s3f__store_subdir(dirfd(mid), e2->d_name, false);
        DIR *obj = d3 >= 0 ? fdopendir(d3) : NULL;
        if (!obj) {
            if (d3 >= 0)
                close(d3);
            continue;
        }
        struct dirent *e3;
        s3f__store_count(&c->n.dirs_listed, 1);
        while ((e3 = readdir(obj))) {
            struct stat sb;
            bool tmp = !strncmp(e3->d_name, ".tmp.", 5);
            if ((!tmp && !s3f__store_is_block_name(e3->d_name)) ||
                fstatat(dirfd(obj), e3->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(sb.st_mode))
                continue;
            if (!tmp)
                total += (uint64_t)sb.st_size;
            else if (sweep && now - sb.st_mtim.tv_sec > TMP_STALE_S)
                unlinkat(dirfd(obj), e3->d_name, 0);
        }
        closedir(obj);
    }
    closedir(mid);
    return total;
}

uint64_t s3f__store_recount(struct s3f__cache *c, unsigned slot) {
    uint64_t v = count_dir(c, slot, true);
    return v > c->count_limit ? c->count_limit : v;
}

/* Read the count; recount each invalid slot, one short step (one directory) per lock hold.
 * Returns with the lock held and k valid. A count that cannot be written (a read-only or
 * broken lock file) is kept in k only. */
void s3f__store_counts_valid_locked(struct s3f__cache *c, struct s3f__cache_counts *k) {
    S3F_ASSERT_NOT_HELD(&c->lock); /* taken here, and held on return */
    for (unsigned step = 0;; step++) {
        s3f__store_lock_take(c);
        s3f__store_counts_read(c, k);
        unsigned bad = S3F__CACHE_SLOTS;
        for (unsigned i = 0; i < S3F__CACHE_SLOTS && bad == S3F__CACHE_SLOTS; i++)
            if (!k->valid[i])
                bad = i;
        if (bad == S3F__CACHE_SLOTS)
            return;
        if (step > 2 * S3F__CACHE_SLOTS || !s3f__store_slot_write(c, k, bad, s3f__store_recount(c, bad))) {
            for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++)
                if (!k->valid[i]) {
                    k->bytes[i] = s3f__store_recount(c, i);
                    k->valid[i] = true;
                }
            return;
        }
        s3f__store_lock_drop(c);
    }
}

uint64_t s3f__cache_scan_bytes(struct s3f__cache *c) {
    uint64_t t = 0;
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++)
        t += count_dir(c, i, false);
    return t;
}

/* Free bytes on the cache's file system and the floor to keep. */
void s3f__store_fs_space(struct s3f__cache *c, uint64_t *free_bytes, uint64_t *floor) {
    struct statvfs v;
    if (fstatvfs(c->v1_fd, &v) != 0) {
        *free_bytes = UINT64_MAX;
        *floor = 0;
        return;
    }
    *free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
    *floor = c->free_from_fs ? (uint64_t)v.f_blocks * v.f_frsize / 100 *
                                   S3F__CACHE_FREE_PERCENT_DEFAULT
                             : c->min_free_bytes;
}
