/*
 * The overwrite guard: the mount's retry registry for opens for writing answered ESTALE.
 *
 * An open for writing that the mount cannot serve on the inode the kernel names (a reader
 * reads that inode through the page cache, the name let go of it, a rename moved it
 * there: write.c, read.c) is answered ESTALE, after which the VFS looks the name up again
 * and retries the open once. This registry makes that retry succeed: from the ESTALE
 * until the retry (15 s at most), read opens of the name are EBUSY, and from the retry's
 * lookup until its OPEN, the name is pinned (its unlink, rename or create is EBUSY).
 * docs/SEMANTICS.md ("Overwrites while the file is read") has the rule and its state
 * diagram.
 *
 * Invariants (fs->mu guards all of it):
 * - One entry per retrying thread (a thread retries one open at a time), at most
 *   OVERWRITES_MAX entries (past it the retry may meet a new reader: a second ESTALE).
 * - An entry is OW_PENDING from the ESTALE, OW_PINNED from the
 *   retry's lookup of the name, and gone at the retry's next OPEN or CREATE, at a lookup
 *   that finds nothing, or OVERWRITE_PENDING_S after the ESTALE, whichever comes first.
 *   Expired entries are pruned by every query, so an entry never outlives its bound.
 */
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "fs.h"

/* An overwrite told ESTALE, until its retry comes (fs->overwrites). The retry may wait
 * for S3, or behind a directory lock the kernel holds for a rename or unlink in that
 * directory (seconds, with the DELETE or the copy), so the bound is long; it is dropped
 * once the retrying thread's next OPEN has been answered (a writer it opened is listed by
 * then: read opens are EBUSY for it), when its CREATE comes (a new inode, which no reader
 * holds), or when its lookup finds nothing (the open ends there). From the retry's lookup
 * of the name on (OW_PINNED), the name is pinned: an unlink, rename or create of it is
 * EBUSY until then, so that the inode the lookup gave is still the name's at the OPEN. */
#define OVERWRITE_PENDING_S 15.0
#define OVERWRITES_MAX 1024u

enum overwrite_state {
    OW_PENDING, /* told ESTALE: read opens of the name are EBUSY */
    OW_PINNED,  /* ... and its retry looked the name up: no unlink, rename or create */
};             /* gone: out of fs->overwrites (retried, found nothing, or expired) */

struct overwrite {
    struct overwrite *next;
    pid_t tid;
    enum overwrite_state state;
    double until;
    char path[];
};

static void overwrites_prune(struct mnt_fs *fs, pid_t tid, int all_of_tid) {
    double now = mnt_now();
    for (struct overwrite **pp = &fs->overwrites; *pp;) {
        struct overwrite *o = *pp;
        if (o->until <= now || (all_of_tid && o->tid == tid)) {
            MNT_TRACE("overwrite guard %s (thread %d): %s -> gone (%s)", o->path,
                    (int)o->tid, o->state == OW_PINNED ? "pinned" : "pending",
                    o->until <= now ? "expired" : "retried");
            *pp = o->next;
            free(o);
            fs->n_overwrites--;
        } else {
            pp = &o->next;
        }
    }
}

void mnt_overwrite_pending(struct mnt_fs *fs, const struct inode *in, const char *path,
                           pid_t tid) {
    S3F_ASSERT_HELD(&fs->mu);
    overwrites_prune(fs, tid, 1); /* a thread retries one open at a time */
    if (in->moved && strcmp(in->path, path) == 0 && mnt_renaming(fs, path))
        return; /* the name the rename still running gave it: the open came from the old
                 * name (the kernel moves its entry once the rename is answered), which the
                 * retry looks up; guarding this one made its readers EBUSY for a write of
                 * another name */
    if (fs->n_overwrites >= OVERWRITES_MAX)
        return; /* the retry may meet a new reader: a second ESTALE */
    size_t len = strlen(path);
    struct overwrite *o = malloc(sizeof(*o) + len + 1);
    if (!o)
        return;
    o->tid = tid;
    o->state = OW_PENDING;
    o->until = mnt_now() + OVERWRITE_PENDING_S;
    memcpy(o->path, path, len + 1);
    o->next = fs->overwrites;
    fs->overwrites = o;
    MNT_TRACE("overwrite guard %s (thread %d): -> pending", path, (int)tid);
    fs->n_overwrites++;
}

void mnt_overwrite_retried(struct mnt_fs *fs, pid_t tid) {
    S3F_ASSERT_HELD(&fs->mu);
    if (fs->overwrites)
        overwrites_prune(fs, tid, 1);
}

int mnt_overwriting(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    if (!fs->overwrites)
        return 0;
    overwrites_prune(fs, 0, 0);
    for (struct overwrite *o = fs->overwrites; o; o = o->next)
        if (strcmp(o->path, path) == 0)
            return 1;
    return 0;
}

int mnt_overwrite_lookup(struct mnt_fs *fs, const char *path, pid_t tid) {
    S3F_ASSERT_HELD(&fs->mu);
    if (!fs->overwrites)
        return 0;
    overwrites_prune(fs, 0, 0);
    for (struct overwrite *o = fs->overwrites; o; o = o->next) {
        if (o->tid == tid && strcmp(o->path, path) == 0) {
            if (o->state != OW_PINNED)
                MNT_TRACE("overwrite guard %s (thread %d): pending -> pinned",
                        o->path, (int)tid);
            o->state = OW_PINNED;
            return 1;
        }
    }
    return 0;
}

int mnt_overwrite_pinned(struct mnt_fs *fs, const char *path, pid_t tid) {
    S3F_ASSERT_HELD(&fs->mu);
    if (!fs->overwrites)
        return 0;
    overwrites_prune(fs, 0, 0);
    for (struct overwrite *o = fs->overwrites; o; o = o->next)
        if (o->state == OW_PINNED && (o->tid != tid || tid == 0) && strcmp(o->path, path) == 0)
            return 1;
    return 0;
}

void mnt_overwrites_free(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->overwrites) {
        struct overwrite *o = fs->overwrites;
        fs->overwrites = o->next;
        free(o);
    }
    fs->n_overwrites = 0;
}
