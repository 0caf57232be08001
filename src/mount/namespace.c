/*
 * Names: unlink, rename, and the directories they leave empty.
 *
 * Invariants:
 * - The object changes in S3 first (DeleteObject; CopyObject then DeleteObject); the
 *   caches and the inode table follow under fs->mu: the name's generation is bumped, the
 *   listings above it dropped, the unlinked name's inode detached (its handles keep it),
 *   a renamed file's inode moved to the new name (it is the same version).
 * - A rename holds both its names in fs->renaming from its busy check until it is done,
 *   an unlink its name: writer_open refuses them (EBUSY), so no writer opens on the inode
 *   being moved, and no version is uploaded under a name while its DELETE is in flight.
 * - A name pinned by an overwrite's retry (told ESTALE, it has looked the name up and its
 *   OPEN is not answered yet: meta.c) is not unlinked nor renamed (EBUSY, as a name being
 *   written): the retry opens the inode its lookup gave. A retry's lookup that comes while
 *   a rename or unlink of its name runs waits for its end (fs.c).
 * - A renamed file's inode is marked moved until the kernel looks it up under its new
 *   name: an open for writing of it before that may come from a lookup of the source
 *   name made before the rename, so it is answered ESTALE and the VFS looks the name up
 *   again (write.c).
 * - A directory that no key, local directory or file being written keeps any more is
 *   gone at once: its entry in the daemon is expired and the kernel's entry of it is
 *   invalidated through the notifier (inode.c), by node id, never by a path. The handler
 *   waits (bounded) for those invalidations except the ones of a directory the kernel
 *   holds locked for this very request (unlink's directory, rename's source and
 *   destination directories): those are queued only once the request is answered, so
 *   that the notifier never waits behind a request that waits for it.
 * - The directories above a rename's target (or a closed upload's name) are directories
 *   from then on (mnt_promote_parents). One that the mount had found missing may have a
 *   negative entry in the kernel (an unlink emptied it while the rename waited for the
 *   kernel's lock of the target directory, which it had resolved before, and a lookup
 *   came): that entry is invalidated, waited for as above, once the caches say directory,
 *   so a lookup after it finds the new name (the kernel's lock of the entry's directory
 *   orders it after a lookup in flight there).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

/* Invalidations of entries in directories the kernel holds locked for the request: they
 * are queued once the request has been answered (else the notifier would wait behind
 * them for that very request, and every note after them with it). */
#define DEFERRED_MAX 4 /* the entries a rename's emptied and new directories touch */
struct deferred {
    size_t n;
    char dir[DEFERRED_MAX][PATH_MAX];
    char name[DEFERRED_MAX][MNT_NAME_MAX + 1];
};

static void deferred_send(struct mnt_fs *fs, const struct deferred *d) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    if (!d->n)
        return;
    pthread_mutex_lock(&fs->mu);
    for (size_t i = 0; i < d->n; i++)
        mnt_notify_entry(fs, d->dir[i], d->name[i], 0);
    pthread_mutex_unlock(&fs->mu);
}

/* The notes a handler waits for (fs->mu held) before it answers; past WAIT_MAX, queued
 * without waiting. */
#define WAIT_MAX 16
struct waits {
    size_t n;
    struct note *note[WAIT_MAX];
};

/* The kernel's invalidation of `name` in `dir` (fs->mu held): deferred to `later` when the
 * kernel holds `dir` locked for the calling request (`locked1`/`locked2`), else queued,
 * and added to `w` while there is room. */
static void invalidate_entry(struct mnt_fs *fs, const char *dir, const char *name,
                             const char *locked1, const char *locked2,
                             struct deferred *later, struct waits *w) {
    S3F_ASSERT_HELD(&fs->mu);
    if ((locked1 && strcmp(dir, locked1) == 0) || (locked2 && strcmp(dir, locked2) == 0)) {
        if (later && later->n < DEFERRED_MAX && strlen(name) <= MNT_NAME_MAX) {
            snprintf(later->dir[later->n], sizeof(later->dir[0]), "%s", dir);
            snprintf(later->name[later->n], sizeof(later->name[0]), "%s", name);
            later->n++;
        }
        return;
    }
    struct note *n = mnt_notify_entry(fs, dir, name, w->n < WAIT_MAX);
    if (n && w->n < WAIT_MAX)
        w->note[w->n++] = n;
}

static void wait_all(struct mnt_fs *fs, struct waits *w) {
    S3F_ASSERT_HELD(&fs->mu);
    for (size_t i = 0; i < w->n; i++)
        mnt_notify_wait(fs, w->note[i]);
}

void mnt_promote_parents(struct mnt_fs *fs, const char *path, const char *locked1,
                         const char *locked2, struct deferred *later) {
    S3F_ASSERT_HELD(&fs->mu);
    struct waits w = {0};
    char dir[PATH_MAX];
    for (mnt_parent_of(path, dir); strcmp(dir, "/") != 0;) {
        char up[PATH_MAX];
        mnt_parent_of(dir, up);
        /* the kernel may keep the ENOENT a lookup got: its negative entry would hide the
         * new name for --negative-metadata-ttl (a negative timeout of 0 keeps none; a
         * local directory is never missing, the kernel holds the one mkdir made) */
        int stale = fs->o.negative_ttl_s > 0 && !mnt_localdir_find(fs, dir) &&
                    mnt_meta_was_missing(fs, dir);
        mnt_localdir_remove(fs, dir);
        mnt_meta_change(fs, dir, K_DIR, 0, 0, NULL);
        if (stale) /* after the change: a lookup that follows finds the directory */
            invalidate_entry(fs, up, strrchr(dir, '/') + 1, locked1, locked2, later, &w);
        snprintf(dir, sizeof(dir), "%s", up);
    }
    wait_all(fs, &w);
}

/* After the key `path` was deleted: each directory above it that nothing keeps any more
 * is gone (one LIST of max-keys 1 per directory checked, from the nearest up, stopping at
 * the first that has a key). `locked1`/`locked2`: directories the kernel holds locked for
 * the calling request (NULL: none), whose invalidations go to `later`. */
static void forget_emptied_parents(struct mnt_fs *fs, const char *path, const char *locked1,
                                   const char *locked2, struct deferred *later) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    char dir[PATH_MAX];
    mnt_parent_of(path, dir);
    struct waits w = {0};
    while (strcmp(dir, "/") != 0) {
        pthread_mutex_lock(&fs->mu);
        int kept = mnt_localdir_find(fs, dir) || mnt_holds_local(fs, dir);
        pthread_mutex_unlock(&fs->mu);
        if (kept)
            break;
        char *dkey = mnt_key_of(fs, dir, "/");
        if (!dkey)
            break;
        struct s3f_list_options lo = {.prefix = dkey, .max_keys = 1};
        struct s3f_list_page *page = NULL;
        struct s3f_error err;
        s3f_error_clear(&err);
        enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
        free(dkey);
        if (st != S3F_OK)
            break; /* the TTLs will tell */
        int empty = page->n_objects == 0 && page->n_common_prefixes == 0;
        s3f_list_page_free(page);
        if (!empty)
            break;
        char up[PATH_MAX];
        mnt_parent_of(dir, up);
        pthread_mutex_lock(&fs->mu);
        mnt_meta_expire(fs, dir); /* looked up again: missing, or a file it shadowed */
        invalidate_entry(fs, up, strrchr(dir, '/') + 1, locked1, locked2, later, &w);
        pthread_mutex_unlock(&fs->mu);
        snprintf(dir, sizeof(dir), "%s", up);
    }
    pthread_mutex_lock(&fs->mu);
    wait_all(fs, &w);
    pthread_mutex_unlock(&fs->mu);
}

/* The end of a rename's or unlink's reservation of its names (takes fs->mu). */
static void reserved_drop(struct mnt_fs *fs, struct renaming *r) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&fs->mu);
    for (struct renaming **pp = &fs->renaming; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    pthread_cond_broadcast(&fs->released); /* an overwrite's retry may wait (fs.c) */
    pthread_mutex_unlock(&fs->mu);
}

void mnt_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    if (fs->o.read_only || !fs->o.allow_delete) {
        fuse_reply_err(req, fs->o.read_only ? EROFS : EPERM);
        return;
    }
    char *path = mnt_req_path_at(req, fs, parent, name);
    if (!path)
        return;
    char *key = NULL;
    struct deferred later;
    later.n = 0;
    /* the name is reserved against writers until the unlink is done: a writer opened
     * while the DELETE is in flight would upload a version the DELETE may or may not
     * remove, and the name would say "present" or "missing" whatever S3 holds */
    struct renaming self = {.from = path, .to = path};
    pid_t tid = fuse_req_ctx(req)->pid;
    pthread_mutex_lock(&fs->mu);
    /* pinned by an overwrite's retry between its lookup and its OPEN: that open comes
     * first (meta.c) */
    int busy = mnt_writer_busy(fs, path) || mnt_overwrite_pinned(fs, path, tid);
    if (!busy) {
        self.next = fs->renaming;
        fs->renaming = &self;
    }
    pthread_mutex_unlock(&fs->mu);
    struct attr a;
    int rc = busy ? -EBUSY : mnt_resolve(fs, path, &a, 0);
    if (rc)
        goto out;
    if (a.kind == K_DIR) {
        rc = -EISDIR;
        goto out;
    }
    key = mnt_key_of(fs, path, "");
    if (!key) {
        rc = -ENOMEM;
        goto out;
    }
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_delete_object(fs->cw, fs->bucket, key, &err);
    if (st != S3F_OK) {
        mnt_log_error("unlink", path, &err);
        rc = -mnt_errno_of(st, 0);
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    mnt_meta_change(fs, path, K_MISSING, 0, 0, NULL);
    mnt_inode_detach(fs, path);
    pthread_mutex_unlock(&fs->mu);
    char dir[PATH_MAX];
    mnt_parent_of(path, dir);
    forget_emptied_parents(fs, path, dir, NULL, &later);
out:
    if (!busy)
        reserved_drop(fs, &self);
    fuse_reply_err(req, rc ? -rc : 0);
    deferred_send(fs, &later);
    free(key);
    free(path);
}

int mnt_renaming(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct renaming *r = fs->renaming; r; r = r->next)
        if (strcmp(r->from, path) == 0 || strcmp(r->to, path) == 0)
            return 1;
    return 0;
}

void mnt_renaming_wait(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    /* a copy of a large object: past it, the caller goes on (fs->released waits on the
     * monotonic clock: mnt_cond_init) */
    struct timespec until = mnt_deadline(15);
    while (mnt_renaming(fs, path))
        if (pthread_cond_timedwait(&fs->released, &fs->mu, &until) == ETIMEDOUT)
            return;
}

void mnt_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                   const char *newname, unsigned int flags) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    int rc = 0, e;
    char *from = NULL, *to = NULL, *src = NULL, *dst = NULL;
    struct deferred later;
    later.n = 0;
    struct renaming *reserved = NULL;
    if (fs->o.read_only || !fs->o.allow_rename) {
        rc = fs->o.read_only ? -EROFS : -EPERM;
        goto out;
    }
    if (flags & RENAME_EXCHANGE) {
        rc = -EINVAL;
        goto out;
    }
    from = mnt_path_at(fs, parent, name, &e);
    to = from ? mnt_path_at(fs, newparent, newname, &e) : NULL;
    if (!to) {
        rc = -e;
        goto out;
    }
    struct attr a, b;
    rc = mnt_resolve(fs, from, &a, 0);
    if (rc)
        goto out;
    if (a.kind == K_DIR) {
        rc = -ENOTSUP;
        goto out;
    }
    /* the names are reserved against writers until the rename is done: a writer opened
     * on the source between the copy and the move would write its new version into the
     * inode that becomes the target's (and be deleted with the source) */
    struct renaming self = {.from = from, .to = to};
    pid_t tid = fuse_req_ctx(req)->pid;
    pthread_mutex_lock(&fs->mu);
    int busy = mnt_writer_busy(fs, from) || mnt_writer_busy(fs, to) ||
               mnt_renaming(fs, from) || mnt_renaming(fs, to) ||
               mnt_overwrite_pinned(fs, from, tid) || mnt_overwrite_pinned(fs, to, tid);
    if (!busy) {
        self.next = fs->renaming;
        fs->renaming = &self;
        reserved = &self;
    }
    pthread_mutex_unlock(&fs->mu);
    if (busy) {
        rc = -EBUSY;
        goto out;
    }
    rc = mnt_resolve(fs, to, &b, 0);
    if (rc == 0) {
        rc = b.kind == K_DIR ? -EISDIR
             : (flags & RENAME_NOREPLACE) ? -EEXIST
             : !fs->o.allow_overwrite ? -EPERM : 0;
        if (rc)
            goto out;
    } else if (rc != -ENOENT) {
        goto out;
    }
    rc = 0;
    if (strcmp(from, to) == 0)
        goto out;
    src = mnt_key_of(fs, from, "");
    dst = mnt_key_of(fs, to, "");
    if (!src || !dst) {
        rc = -ENOMEM;
        goto out;
    }
    char from_dir[PATH_MAX], to_dir[PATH_MAX]; /* the kernel holds them locked */
    mnt_parent_of(from, from_dir);
    mnt_parent_of(to, to_dir);
    struct s3f_copy_options co = {.src_if_match = a.etag[0] ? a.etag : NULL};
    struct s3f_object_info info;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st;
    if (fs->directory_bucket) {
        /* one RenameObject: atomic, no copy, no moment without the object; the object
         * keeps its ETag. A target that appeared since the check is not replaced unless
         * overwrites are allowed. */
        const char *inm = ((flags & RENAME_NOREPLACE) || !fs->o.allow_overwrite) ? "*" : NULL;
        st = s3f_rename_object(fs->cw, fs->bucket, src, dst, inm, &err);
        if (st != S3F_OK) {
            mnt_log_error("rename", from, &err);
            rc = st == S3F_ERR_NOT_FOUND             ? -ENOENT
                 : st == S3F_ERR_PRECONDITION_FAILED ? -EEXIST
                                                     : -mnt_errno_of(st, 1);
            goto out;
        }
        pthread_mutex_lock(&fs->mu);
        mnt_meta_change(fs, to, K_FILE, a.size, a.mtime, a.etag);
        mnt_inode_move(fs, from, to);
        mnt_meta_change(fs, from, K_MISSING, 0, 0, NULL);
        mnt_promote_parents(fs, to, from_dir, to_dir, &later);
        pthread_mutex_unlock(&fs->mu);
        goto emptied;
    }
    st = s3f_copy(fs->cw, fs->bucket, src, fs->bucket, dst, &co, &info, &err);
    if (st != S3F_OK) {
        mnt_log_error("rename (copy)", from, &err);
        rc = st == S3F_ERR_NOT_FOUND ? -ENOENT : -mnt_errno_of(st, 1);
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    int64_t mtime = info.last_modified ? info.last_modified : (int64_t)time(NULL);
    uint64_t size = info.size ? info.size : a.size;
    mnt_meta_change(fs, to, K_FILE, size, mtime, info.etag);
    /* the copy is the same bytes under a new ETag (multipart copies get another): the
     * moved inode becomes that object */
    mnt_inode_move(fs, from, to);
    struct inode *in = mnt_inode_current(fs, to);
    if (in && in->a.kind == K_FILE) {
        in->a.size = size;
        in->a.mtime = mtime;
        snprintf(in->a.etag, sizeof(in->a.etag), "%s", info.etag);
    }
    mnt_promote_parents(fs, to, from_dir, to_dir, &later);
    pthread_mutex_unlock(&fs->mu);
    st = s3f_delete_object(fs->cw, fs->bucket, src, &err);
    if (st != S3F_OK) {
        mnt_log_error("rename (delete of the source)", from, &err);
        rc = -EIO;
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    mnt_meta_change(fs, from, K_MISSING, 0, 0, NULL);
    pthread_mutex_unlock(&fs->mu);
emptied:
    forget_emptied_parents(fs, from, from_dir, to_dir, &later);
out:
    if (reserved)
        reserved_drop(fs, reserved);
    fuse_reply_err(req, rc ? -rc : 0);
    deferred_send(fs, &later);
    free(src);
    free(dst);
    free(from);
    free(to);
}
