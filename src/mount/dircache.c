/*
 * The listing cache: complete listings of directories, kept for --metadata-ttl, and the
 * copy of a listing a directory handle builds for it while it streams (readdir.c).
 *
 * Invariants:
 * - The listing cache (fs->listings, fs->mu) holds complete listings only, charged to the
 *   memory account until freed (by the cache's and the sharing handles' last reference);
 *   a listing that started before a change in its directory is not kept.
 * - A handle opened on a cached listing shares it (a reference, charged once), never
 *   copies it: any number of handles hold one listing.
 * - A handle's copy for the cache (struct listing_copy) is charged to the memory account;
 *   it is given up once it passes LISTING_MAX_ENTRIES or a quarter of the memory budget,
 *   or once the account stays above the budget after the caches are evicted.
 * - At most LISTINGS_MAX listings are kept; the least recent goes first, and the whole
 *   cache goes before the metadata cache's entries when the account is over (meta.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "fs.h"

#define LISTINGS_MAX 64             /* directories whose listing is kept */
#define LISTING_MAX_ENTRIES 100000  /* a larger directory is listed every time */

/* ---- entries ------------------------------------------------------------------------ */

void mnt_dents_free(struct dent *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

int mnt_dents_append(struct dent **v, size_t *n, size_t *cap, size_t first, size_t max,
                     const char *name, size_t len, const struct attr *a, int no_id,
                     uint64_t gen) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : first;
        struct dent *e = c > max ? NULL : realloc(*v, c * sizeof(*e));
        if (!e)
            return -ENOMEM;
        *v = e;
        *cap = c;
    }
    char *s = strndup(name, len);
    if (!s)
        return -ENOMEM;
    (*v)[*n].name = s;
    (*v)[*n].a = *a;
    (*v)[*n].no_id = no_id;
    (*v)[*n].gen = gen;
    (*n)++;
    return 0;
}

/* ---- the cache ---------------------------------------------------------------------- */

void mnt_listing_unref(struct mnt_fs *fs, struct listing *l) {
    S3F_ASSERT_HELD(&fs->mu);
    S3F_ASSERT(l->refs > 0);
    if (--l->refs)
        return;
    mnt_mem_charge(fs, -l->bytes);
    mnt_dents_free(l->ents, l->n);
    free(l->path);
    free(l);
}

/* Take a listing out of the cache (it stays, charged, while handles share it). */
static void listing_free(struct mnt_fs *fs, struct listing *l) {
    fs->n_listings--;
    mnt_listing_unref(fs, l);
}

/* Take the least recent listing out of the cache. */
static void listing_drop_last(struct mnt_fs *fs) {
    struct listing **pp = &fs->listings;
    while ((*pp)->next)
        pp = &(*pp)->next;
    struct listing *l = *pp;
    *pp = NULL;
    listing_free(fs, l);
}

void mnt_listings_drop_above(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct listing **pp = &fs->listings; *pp;) {
        struct listing *l = *pp;
        if (strcmp(l->path, "/") == 0 || mnt_is_under(l->path, path)) {
            *pp = l->next;
            listing_free(fs, l);
        } else {
            pp = &l->next;
        }
    }
}

void mnt_listings_trim(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->listings && fs->mem_used > fs->mem_budget)
        listing_drop_last(fs);
}

void mnt_listings_free(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->listings) {
        struct listing *l = fs->listings;
        fs->listings = l->next;
        listing_free(fs, l);
    }
}

struct listing *mnt_listing_share(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct listing *l = fs->listings; l; l = l->next) {
        if (strcmp(l->path, path) != 0)
            continue;
        if (l->expires > mnt_now()) {
            l->refs++;
            return l;
        }
        break;
    }
    return NULL;
}

/* Keep a complete listing (takes `ents`; fs->mu held). */
static void listing_put(struct mnt_fs *fs, const char *path, struct dent *ents, size_t n,
                        uint64_t bytes, uint64_t gen0) {
    S3F_ASSERT_HELD(&fs->mu);
    struct listing *l = calloc(1, sizeof(*l));
    if (!l || !(l->path = strdup(path))) {
        free(l);
        mnt_dents_free(ents, n);
        return;
    }
    l->ents = ents;
    l->n = n;
    l->refs = 1;
    l->gen0 = gen0;
    l->expires = mnt_now() + fs->o.metadata_ttl_s;
    l->bytes = (int64_t)(bytes + sizeof(*l) + strlen(path) + 1);
    for (struct listing **pp = &fs->listings; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->path, path) == 0) {
            struct listing *old = *pp;
            *pp = old->next;
            listing_free(fs, old);
            break;
        }
    }
    l->next = fs->listings;
    fs->listings = l;
    fs->n_listings++;
    mnt_mem_charge(fs, l->bytes);
    if (fs->n_listings > LISTINGS_MAX)
        listing_drop_last(fs);
    mnt_mem_reclaim(fs);
}

/* ---- a handle's copy for the cache -------------------------------------------------- */

void mnt_copy_clear(struct listing_copy *c) {
    mnt_dents_free(c->v, c->n);
    c->v = NULL;
    c->n = c->cap = 0;
    c->over = 0;
}

void mnt_copy_uncharge(struct mnt_fs *fs, struct listing_copy *c) {
    S3F_ASSERT_HELD(&fs->mu);
    mnt_mem_charge(fs, -(int64_t)c->bytes);
    c->bytes = 0;
}

void mnt_copy_drop(struct mnt_fs *fs, struct listing_copy *c) {
    S3F_ASSERT_HELD(&fs->mu);
    mnt_copy_clear(c);
    mnt_copy_uncharge(fs, c);
    c->over = 1;
}

void mnt_copy_keep(struct mnt_fs *fs, struct listing_copy *c, const char *name, size_t len,
                   const struct attr *a, uint64_t gen) {
    S3F_ASSERT_HELD(&fs->mu);
    if (c->over)
        return;
    uint64_t b = sizeof(struct dent) + len + 1 + 16;
    c->bytes += b;
    mnt_mem_charge(fs, (int64_t)b);
    if (c->bytes > fs->mem_budget / 4 ||
        mnt_dents_append(&c->v, &c->n, &c->cap, 256, LISTING_MAX_ENTRIES, name, len, a, 0,
                         gen)) {
        mnt_copy_drop(fs, c);
        return;
    }
    if (fs->mem_used > fs->mem_budget) {
        mnt_mem_reclaim(fs);
        if (fs->mem_used > fs->mem_budget)
            mnt_copy_drop(fs, c);
    }
}

void mnt_copy_done(struct mnt_fs *fs, struct listing_copy *c, const char *path,
                   uint64_t gen0, int complete) {
    S3F_ASSERT_HELD(&fs->mu);
    if (complete && !c->over && fs->o.metadata_ttl_s > 0 &&
        !mnt_dir_changed_since(fs, path, gen0)) {
        uint64_t bytes = c->bytes;
        mnt_mem_charge(fs, -(int64_t)bytes); /* the listing's own charge from now on */
        c->bytes = 0;
        listing_put(fs, path, c->v, c->n, bytes, gen0);
        c->v = NULL;
        c->n = c->cap = 0;
    } else if (c->v) {
        mnt_copy_drop(fs, c); /* not kept: the copy is not held until releasedir */
    }
}
