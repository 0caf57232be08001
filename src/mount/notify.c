/*
 * The notifier threads: the kernel's invalidations (fuse_lowlevel_notify_inval_*), queued
 * by the handlers and sent by threads that serve no request (see fs.h: NEVER RE-ENTER).
 * With mount.c (start-up), the only file that calls fuse_lowlevel_notify_* or makes a
 * system call on a path.
 *
 * Invariants (fs->mu guards the queue, the notes and the threads' bookkeeping):
 * - The notifier threads (MNT_NOTIFIERS, serving no request) are the only callers of
 *   fuse_lowlevel_notify_inval_*: handlers queue (node id, name) notes, bounded (past the
 *   bound an invalidation is dropped and the TTLs tell the kernel instead). A note stuck
 *   on a directory lock holds one notifier; the others go on with the queue.
 *   A handler may wait for its own notes, for NOTIFY_WAIT_S at most and never for one
 *   whose directory the kernel holds locked for that handler (rename's two directories):
 *   so the kernel has dropped the entry when unlink returns, and a note stuck behind a
 *   lock held by another request delays, never wedges.

 * - A note is sent by note_send only, on a notifier thread (a thread-local marks them;
 *   checked at run time in the test builds) and never under fs->mu.
 * - A note is freed by the last of its notifier (once sent) and its waiter (once its
 *   wait ends); notes still queued or being sent at the end are freed by mnt_notify_free.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

#define NOTES_MAX 4096u
#define NOTIFY_WAIT_S 2

struct note {
    struct note *next;        /* fs->notes_head queue */
    struct note *busy_next;   /* fs->notes_busy: being sent */
    int busy, done;
    int waiters;              /* a handler waits for it: it frees it */
    int inode;                /* invalidate the inode `parent` (its attributes and pages) */
    fuse_ino_t parent;
    size_t len;
    char name[];
};

/* Set on the notifier threads, for their whole life: the no-re-entry rule's check. */
static _Thread_local int on_notifier;

void mnt_notify_init(struct mnt_fs *fs) {
    pthread_cond_init(&fs->notes_cv, NULL);
    mnt_cond_init(&fs->notes_done_cv);
}

void mnt_notify_free(struct mnt_fs *fs) {
    while (fs->notes_head) {
        struct note *n = fs->notes_head;
        fs->notes_head = n->next;
        free(n);
    }
    while (fs->notes_busy) { /* none once the notifiers have stopped */
        struct note *n = fs->notes_busy;
        fs->notes_busy = n->busy_next;
        free(n);
    }
    pthread_cond_destroy(&fs->notes_cv);
    pthread_cond_destroy(&fs->notes_done_cv);
}

/* Take a note for the queue; `wait`: the caller will wait for it (mnt_notify_wait), which
 * keeps it alive until then. NULL when not queued. */
static struct note *note_queue(struct mnt_fs *fs, int inode, fuse_ino_t ino, const char *name,
                               int wait) {
    S3F_ASSERT_HELD(&fs->mu);
    if (!fs->n_notifiers || fs->notifier_stop || fs->n_notes >= NOTES_MAX)
        return NULL; /* the TTLs will tell */
    size_t len = strlen(name);
    struct note *n = calloc(1, sizeof(*n) + len + 1);
    if (!n)
        return NULL;
    n->inode = inode;
    n->parent = ino;
    n->len = len;
    n->waiters = wait ? 1 : 0;
    memcpy(n->name, name, len + 1);
    if (fs->notes_tail)
        fs->notes_tail->next = n;
    else
        fs->notes_head = n;
    fs->notes_tail = n;
    fs->n_notes++;
    pthread_cond_signal(&fs->notes_cv);
    return n;
}

void mnt_notify_entry_at(struct mnt_fs *fs, fuse_ino_t parent, const char *name) {
    S3F_ASSERT_HELD(&fs->mu);
    note_queue(fs, 0, parent, name, 0);
}

struct note *mnt_notify_entry(struct mnt_fs *fs, const char *dir_path, const char *name,
                              int wait) {
    S3F_ASSERT_HELD(&fs->mu);
    struct inode *dir = mnt_inode_current(fs, dir_path);
    if (!dir || !dir->nlookup)
        return NULL; /* the kernel does not hold it */
    return note_queue(fs, 0, dir->ino, name, wait);
}

struct note *mnt_notify_inode(struct mnt_fs *fs, struct inode *in, int wait) {
    S3F_ASSERT_HELD(&fs->mu);
    if (!in->nlookup)
        return NULL;
    return note_queue(fs, 1, in->ino, "", wait);
}

void mnt_notify_wait(struct mnt_fs *fs, struct note *n) {
    S3F_ASSERT_HELD(&fs->mu);
    S3F_ASSERT(!on_notifier); /* a notifier would wait for itself */
    if (!n)
        return;
    struct timespec until = mnt_deadline(NOTIFY_WAIT_S);
    while (!n->done && !fs->notifier_stop)
        if (pthread_cond_timedwait(&fs->notes_done_cv, &fs->mu, &until) == ETIMEDOUT)
            break;
    n->waiters--;
    if (n->done)
        free(n); /* else the notifier frees it when done (or mnt_notify_free) */
}

/* Send one note to the kernel (on a notifier thread, fs->mu not held). 0 or -errno. */
static int note_send(struct mnt_fs *fs, const struct note *n) {
    S3F_ASSERT(on_notifier);
    S3F_ASSERT_NOT_HELD(&fs->mu);
    return n->inode ? fuse_lowlevel_notify_inval_inode(fs->se, n->parent, 0, 0)
                    : fuse_lowlevel_notify_inval_entry(fs->se, n->parent, n->name, n->len);
}

static void *notifier_main(void *arg) {
    struct mnt_fs *fs = arg;
    on_notifier = 1;
    pthread_mutex_lock(&fs->mu);
    for (;;) {
        while (!fs->notes_head && !fs->notifier_stop)
            pthread_cond_wait(&fs->notes_cv, &fs->mu);
        if (fs->notifier_stop)
            break;
        struct note *n = fs->notes_head;
        fs->notes_head = n->next;
        if (!fs->notes_head)
            fs->notes_tail = NULL;
        fs->n_notes--;
        n->next = NULL;
        n->busy = 1;
        n->busy_next = fs->notes_busy;
        fs->notes_busy = n;
        pthread_mutex_unlock(&fs->mu);
        /* may wait for the kernel's lock of a directory, held by a request no notifier
         * serves: that request ends without us, and the other notifiers go on meanwhile */
        int rc = note_send(fs, n);
        if (rc && rc != -ENOENT)
            mnt_log(S3F_LOG_DEBUG, "invalidate %s '%s' of node %llu: %s",
                    n->inode ? "inode" : "entry", n->name, (unsigned long long)n->parent,
                    strerror(-rc));
        pthread_mutex_lock(&fs->mu);
        for (struct note **pp = &fs->notes_busy; *pp; pp = &(*pp)->busy_next) {
            if (*pp == n) {
                *pp = n->busy_next;
                break;
            }
        }
        n->done = 1;
        pthread_cond_broadcast(&fs->notes_done_cv);
        if (!n->waiters)
            free(n);
    }
    pthread_mutex_unlock(&fs->mu);
    return NULL;
}

int mnt_notifier_start(struct mnt_fs *fs) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&fs->mu);
    fs->notifier_stop = 0;
    int rc = 0;
    while (fs->n_notifiers < MNT_NOTIFIERS) {
        rc = pthread_create(&fs->notifiers[fs->n_notifiers], NULL, notifier_main, fs);
        if (rc)
            break;
        fs->n_notifiers++;
    }
    pthread_mutex_unlock(&fs->mu);
    return fs->n_notifiers ? 0 : -rc;
}

void mnt_notifier_stop(struct mnt_fs *fs) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    pthread_mutex_lock(&fs->mu);
    fs->notifier_stop = 1;
    pthread_cond_broadcast(&fs->notes_cv);
    pthread_cond_broadcast(&fs->notes_done_cv);
    size_t n = fs->n_notifiers;
    pthread_mutex_unlock(&fs->mu);
    for (size_t i = 0; i < n; i++)
        pthread_join(fs->notifiers[i], NULL);
    pthread_mutex_lock(&fs->mu);
    fs->n_notifiers = 0;
    pthread_mutex_unlock(&fs->mu);
}
