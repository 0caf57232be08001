/*
 * The inode table: node ids, the paths they stand for, the versions they are (see fs.h
 * for the lock order). The kernel's invalidations of them are sent by notify.c.
 *
 * Invariants (fs->mu guards all of it):
 * - Node ids are never reused (a 64-bit counter from 2; the root is 1 and lives as long
 *   as the mount), so an id the kernel still holds always names the inode it was given
 *   for, and an invalidation sent late can only miss, never hit another inode.
 * - An inode is one version of a file (its ETag and size) or one directory. A path
 *   resolves to at most one "current" inode (fs->path_hash); when a lookup finds another
 *   version under the path, a new inode becomes current and the old one stays, with its
 *   own attributes and the kernel's page cache of it, for the handles and references
 *   that hold it (an open handle keeps its version).
 * - An inode lives while the kernel holds a reference (nlookup: lookup, create, mkdir and
 *   each readdirplus entry with a node id add one; forget takes them back) or a handle is
 *   open on it (nopen); then it is freed at once. The table's memory is charged to the
 *   mount's account (meta.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

#define INO_BUCKETS 65536u

uint32_t mnt_hash_str(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int64_t inode_bytes(const struct inode *in) {
    return (int64_t)(sizeof(*in) + strlen(in->path) + 1 + 32);
}

/* Charge (or release) an inode's memory: to the account, and to the part of it that only
 * the kernel's forget gives back. */
static void inode_charge(struct mnt_fs *fs, int64_t bytes) {
    mnt_mem_charge(fs, bytes);
    if (bytes < 0 && (uint64_t)-bytes > fs->mem_inodes)
        fs->mem_inodes = 0;
    else
        fs->mem_inodes += (uint64_t)bytes;
}

int mnt_inodes_full(const struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    return fs->mem_used >= fs->mem_budget || fs->mem_inodes >= fs->mem_budget / 2;
}

struct inode *mnt_inode_find(struct mnt_fs *fs, fuse_ino_t ino) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct inode *in = fs->ino_hash[ino % INO_BUCKETS]; in; in = in->ino_next)
        if (in->ino == ino)
            return in;
    return NULL;
}

struct inode *mnt_inode_current(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct inode *in = fs->path_hash[mnt_hash_str(path) % INO_BUCKETS]; in;
         in = in->path_next)
        if (strcmp(in->path, path) == 0)
            return in;
    return NULL;
}

static void path_link(struct mnt_fs *fs, struct inode *in) {
    uint32_t b = mnt_hash_str(in->path) % INO_BUCKETS;
    in->path_next = fs->path_hash[b];
    fs->path_hash[b] = in;
    in->current = 1;
}

static void path_unlink(struct mnt_fs *fs, struct inode *in) {
    if (!in->current)
        return;
    for (struct inode **pp = &fs->path_hash[mnt_hash_str(in->path) % INO_BUCKETS]; *pp;
         pp = &(*pp)->path_next) {
        if (*pp == in) {
            *pp = in->path_next;
            break;
        }
    }
    in->path_next = NULL;
    in->current = 0;
}

static void inode_free(struct mnt_fs *fs, struct inode *in) {
    path_unlink(fs, in);
    for (struct inode **pp = &fs->ino_hash[in->ino % INO_BUCKETS]; *pp; pp = &(*pp)->ino_next) {
        if (*pp == in) {
            *pp = in->ino_next;
            break;
        }
    }
    inode_charge(fs, -inode_bytes(in));
    fs->n_inodes--;
    free(in->path);
    free(in);
}

static struct inode *inode_new(struct mnt_fs *fs, fuse_ino_t ino, const char *path,
                               const struct attr *a) {
    struct inode *in = calloc(1, sizeof(*in));
    if (!in || !(in->path = strdup(path))) {
        free(in);
        return NULL;
    }
    in->ino = ino;
    in->a = *a;
    in->ino_next = fs->ino_hash[ino % INO_BUCKETS];
    fs->ino_hash[ino % INO_BUCKETS] = in;
    fs->n_inodes++;
    inode_charge(fs, inode_bytes(in));
    return in;
}

int mnt_inodes_init(struct mnt_fs *fs) {
    fs->ino_hash = calloc(INO_BUCKETS, sizeof(*fs->ino_hash));
    fs->path_hash = calloc(INO_BUCKETS, sizeof(*fs->path_hash));
    if (!fs->ino_hash || !fs->path_hash)
        return -ENOMEM;
    mnt_mem_charge(fs, 2 * (int64_t)INO_BUCKETS * (int64_t)sizeof(void *));
    fs->next_ino = FUSE_ROOT_ID + 1;
    struct attr root = {.kind = K_DIR};
    struct inode *in = inode_new(fs, FUSE_ROOT_ID, "/", &root);
    if (!in)
        return -ENOMEM;
    in->nlookup = 1; /* the kernel's root: never forgotten */
    path_link(fs, in);
    return 0;
}

void mnt_inodes_free(struct mnt_fs *fs) {
    if (fs->ino_hash) {
        for (uint32_t i = 0; i < INO_BUCKETS; i++) {
            struct inode *in = fs->ino_hash[i];
            while (in) {
                struct inode *n = in->ino_next;
                free(in->path);
                free(in);
                in = n;
            }
        }
    }
    free(fs->ino_hash);
    free(fs->path_hash);
}

/* May the inode be taken as the version `a` of its path? */
static int same_version(const struct inode *in, const struct attr *a) {
    if (in->a.kind != a->kind)
        return 0;
    if (a->kind == K_DIR)
        return 1;
    /* being written (no ETag yet), or the same object */
    if (!in->a.etag[0] || !a->etag[0])
        return 1;
    return strcmp(in->a.etag, a->etag) == 0;
}

struct inode *mnt_inode_get(struct mnt_fs *fs, const char *path, const struct attr *a) {
    S3F_ASSERT_HELD(&fs->mu);
    struct inode *cur = mnt_inode_current(fs, path);
    if (cur && same_version(cur, a)) {
        if (a->kind == K_FILE && !cur->a.etag[0] && a->etag[0])
            cur->a = *a; /* the object the written file became */
        cur->moved = 0; /* the kernel learns it under its name now (write.c) */
        return cur;
    }
    struct inode *in = inode_new(fs, fs->next_ino, path, a);
    if (!in)
        return NULL;
    fs->next_ino++;
    if (cur)
        path_unlink(fs, cur); /* the old version stays for its references */
    path_link(fs, in);
    if (cur && !cur->nlookup && !cur->nopen)
        inode_free(fs, cur);
    return in;
}

struct inode *mnt_inode_replace(struct mnt_fs *fs, const char *path, const struct attr *a) {
    S3F_ASSERT_HELD(&fs->mu);
    struct inode *in = inode_new(fs, fs->next_ino, path, a);
    if (!in)
        return NULL;
    fs->next_ino++;
    mnt_inode_detach(fs, path);
    path_link(fs, in);
    return in;
}

void mnt_inode_detach(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    struct inode *in = mnt_inode_current(fs, path);
    if (!in || in->ino == FUSE_ROOT_ID)
        return;
    path_unlink(fs, in);
    if (!in->nlookup && !in->nopen)
        inode_free(fs, in);
}

void mnt_inode_move(struct mnt_fs *fs, const char *from, const char *to) {
    S3F_ASSERT_HELD(&fs->mu);
    mnt_inode_detach(fs, to);
    struct inode *in = mnt_inode_current(fs, from);
    if (!in)
        return;
    char *p = strdup(to);
    if (!p) {
        mnt_inode_detach(fs, from);
        return;
    }
    path_unlink(fs, in);
    inode_charge(fs, -inode_bytes(in));
    free(in->path);
    in->path = p;
    in->moved = 1; /* an open for writing before its next lookup: ESTALE (write.c) */
    inode_charge(fs, inode_bytes(in));
    path_link(fs, in);
}

void mnt_inode_unref(struct mnt_fs *fs, struct inode *in, uint64_t nlookup, unsigned nopen) {
    S3F_ASSERT_HELD(&fs->mu);
    if (in->ino == FUSE_ROOT_ID)
        return;
    in->nlookup = in->nlookup > nlookup ? in->nlookup - nlookup : 0;
    in->nopen = in->nopen > nopen ? in->nopen - nopen : 0;
    if (!in->nlookup && !in->nopen)
        inode_free(fs, in);
}

char *mnt_path_of(struct mnt_fs *fs, fuse_ino_t ino, int *err) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, ino);
    char *p = in ? strdup(in->path) : NULL;
    pthread_mutex_unlock(&fs->mu);
    *err = !in ? ENOENT : !p ? ENOMEM : 0;
    return p;
}

char *mnt_path_at(struct mnt_fs *fs, fuse_ino_t parent, const char *name, int *err) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    size_t len = strlen(name);
    if (len > MNT_NAME_MAX) {
        *err = ENAMETOOLONG;
        return NULL;
    }
    pthread_mutex_lock(&fs->mu);
    struct inode *in = mnt_inode_find(fs, parent);
    char *p = NULL;
    if (in && in->a.kind == K_DIR)
        p = mnt_child_path(in->path, name, len);
    pthread_mutex_unlock(&fs->mu);
    *err = !in ? ENOENT : in->a.kind != K_DIR ? ENOTDIR : !p ? ENOMEM : 0;
    return *err ? (free(p), NULL) : p;
}

char *mnt_req_path_at(fuse_req_t req, struct mnt_fs *fs, fuse_ino_t parent, const char *name) {
    int e;
    char *p = mnt_path_at(fs, parent, name, &e);
    if (!p)
        fuse_reply_err(req, e);
    return p;
}

char *mnt_req_path_rw(fuse_req_t req, struct mnt_fs *fs, fuse_ino_t parent, const char *name) {
    if (fs->o.read_only) {
        fuse_reply_err(req, EROFS);
        return NULL;
    }
    return mnt_req_path_at(req, fs, parent, name);
}
