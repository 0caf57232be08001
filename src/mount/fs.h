/*
 * The file system of `s3flash mount`, on libfuse3's low-level API: what its files share.
 * docs/SEMANTICS.md is the contract; docs/ARCHITECTURE.md ("The mount") the overview.
 *
 * Files, each owning one part of the state (their opening comments give the invariants):
 *   fs.c         the ops table, init, lookup/forget/getattr/setattr/statfs, new/free
 *   inode.c      the inode table (node id <-> path, the version an inode is, lookup
 *                counts)
 *   notify.c     the notifier threads that send the kernel's invalidations (their queue,
 *                waiters, shutdown): with mount.c (start-up), the only file that calls
 *                fuse_lowlevel_notify_* or makes a system call on a path
 *   meta.c       the metadata cache (path -> kind, size, mtime, ETag), resolve(), the
 *                generations, and the memory account of the inode table and both caches
 *   guard.c      the overwrite guard: opens for writing told ESTALE, until their retries
 *                (docs/SEMANTICS.md has its state diagram)
 *   dircache.c   the listing cache (complete listings, a handle's copy for it)
 *   localdir.c   local directories (mkdir'ed, not yet in S3), mkdir and rmdir
 *   readdir.c    the readdir stream: opendir/readdir(plus)/releasedir (pages, extras,
 *                the no_id rules)
 *   read.c       open for reading, read, release of readers
 *   write.c      create, open for writing, write, flush, fsync, release of writers
 *   namespace.c  unlink and rename, and the directories they leave empty
 *   listing.c    a LIST page's names (no FUSE: fuzzed on its own)
 *   prefetch.c   --prefetch-listed: small listed files fetched ahead of their opens
 *   metrics.c    the mount's metrics: every handler metered (mnt_ll_ops_metered), the
 *                inodes and the metadata account read at each snapshot
 *
 * LOCK ORDER (the only one): a handle's mutex (struct fh / struct dh), then fs->mu. Never
 * the other way round (prefetch.c's own mutex and meta.c's HEAD workers' are leaves:
 * nothing is taken under them); fs->mu is never held across a request to S3 or a call
 * into the kernel (fuse_reply_*, fuse_lowlevel_notify_*).
 *
 * NEVER RE-ENTER: no handler makes a system call on a path inside its own mount, and no
 * handler calls fuse_lowlevel_notify_* (the kernel may hold a directory lock that the
 * invalidation needs until this very request is answered). Invalidations are queued for
 * the notifier threads (notify.c), which serve no request, with node ids the daemon knows.
 *
 * Both rules are checked at run time in the test builds (src/core/assert.h): functions
 * called with fs->mu held assert it (S3F_ASSERT_HELD), the reply and S3 paths assert it
 * is not held (S3F_ASSERT_NOT_HELD), and the one function that sends
 * fuse_lowlevel_notify_* asserts it runs on a notifier thread.
 */
#ifndef S3FLASH_MOUNT_FS_H
#define S3FLASH_MOUNT_FS_H

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "listing.h"
#include "mount.h"

/* ---- metrics.c: the mount's metrics (docs/METRICS.md) ---- */
/* Every error answer goes through mnt_reply_err, which notes the errno for the FUSE
 * operations' metric (mnt_ll_ops_metered) and answers. */
int mnt_reply_err(fuse_req_t req, int err);
#define fuse_reply_err(req, err) mnt_reply_err((req), (err))
struct mnt_fs;
/* The mount's registry (freed with s3f_metrics_free), its collector reading fs. */
struct s3f_metrics *mnt_metrics_new(struct mnt_fs *fs);
/* An open of a listed file found it fetched ahead (hit) or not. */
void mnt_metrics_prefetch(struct mnt_fs *fs, int hit);

enum kind { K_MISSING = 0, K_FILE = 1, K_DIR = 2 };

/* A state transition, logged at TRACE (the format is built only when TRACE is on). */
#define MNT_TRACE(...)                                                                     \
    do {                                                                                   \
        if (mnt_log_on(S3F_LOG_TRACE))                                                     \
            mnt_log(S3F_LOG_TRACE, __VA_ARGS__);                                           \
    } while (0)

#define MNT_NOTIFIERS 4 /* threads sending the kernel's invalidations */

struct attr {
    enum kind kind;
    uint64_t size;
    int64_t mtime;
    char etag[128];
};

/* An inode: one version of one file, or one directory (inode.c). */
struct inode {
    fuse_ino_t ino;
    struct inode *ino_next;   /* fs->ino_hash chain */
    struct inode *path_next;  /* fs->path_hash chain, while current */
    char *path;               /* "/" or "/a/b" (a file's changes with rename) */
    struct attr a;            /* the version this inode is (files), kind (directories) */
    uint64_t nlookup;         /* the kernel's references (lookup, create, readdirplus) */
    unsigned nopen;           /* open handles */
    int current;              /* the inode the path resolves to now (in fs->path_hash) */
    char open_etag[128];      /* ETag at the last open for reading with the page cache */
    unsigned n_stale;         /* read handles of a version replaced in place (write.c) */
    int moved;                /* made current for its path by a rename (namespace.c) and
                               * not handed to the kernel under it since: an open for
                               * writing of it may come from a lookup of the old name,
                               * so it is answered ESTALE (write.c) */
};

struct meta;
struct localdir;
struct listing;
struct fh;
struct dh;
struct note;
struct mnt_pf;
struct mnt_heads;
struct overwrite;

/* A rename or unlink in flight (namespace.c): no writer opens its names until it is done
 * (an unlink reserves its name as both from and to). */
struct renaming {
    struct renaming *next;
    const char *from, *to;
};

struct mnt_fs {
    struct mnt_options o;
    char *bucket, *prefix;
    struct s3f_client *c;     /* readers, listings, HEADs */
    struct s3f_client *cw;    /* writers, copies, deletes */
    uint64_t part_size;
    int directory_bucket;     /* S3 Express directory bucket: unordered LISTs, append, rename */
    int64_t start_time;
    struct fuse_session *se;
    pthread_mutex_t mu;       /* everything below */
    /* inode table (inode.c) */
    struct inode **ino_hash, **path_hash;
    size_t n_inodes;
    fuse_ino_t next_ino;
    /* metadata cache (meta.c): LRU list, most recent first */
    struct meta **meta;
    struct meta *lru_head, *lru_tail;
    size_t n_meta;
    /* memory account (meta.c): inode table, metadata and listing caches, directory
     * handles' listing copies and the listings they share (dircache.c), the prefetch order
     * (prefetch.c); never above mem_budget after an insert, but for the inodes the kernel
     * holds and the kept listings open handles share */
    uint64_t mem_used, mem_budget;
    uint64_t mem_inodes;      /* the inode table's part of mem_used (freed by forget only) */
    /* generations (meta.c): bumped by every change the mount makes */
    uint64_t gen;
    uint64_t evicted_gen;     /* the highest change generation of an evicted entry */
    /* directories made by mkdir, files open for writing (write.c) */
    struct localdir *localdirs;
    struct fh *writers;
    pthread_cond_t released;  /* broadcast when a writer leaves fs->writers, and when a
                               * rename or unlink ends (fs->renaming) */
    uint64_t writer_reserved, writer_budget;
    struct listing *listings; /* most recent first (dircache.c) */
    size_t n_listings;
    struct fh *readers;       /* open read handles (read.c) */
    struct dh *dirs;          /* open directory handles (readdir.c) */
    struct renaming *renaming; /* renames in flight (namespace.c) */
    struct overwrite *overwrites; /* overwrites told ESTALE, until their retries (guard.c) */
    size_t n_overwrites;
    /* notifiers (notify.c) */
    pthread_t notifiers[MNT_NOTIFIERS];
    size_t n_notifiers;
    int notifier_stop;
    pthread_cond_t notes_cv, notes_done_cv;
    struct note *notes_head, *notes_tail, *notes_busy;
    size_t n_notes;
    struct mnt_pf *pf;        /* --prefetch-listed (prefetch.c), NULL when off */
    struct mnt_heads *heads;  /* the lookups' HEAD workers, o.max_threads (meta.c) */
    struct s3f_metrics *metrics; /* the mount's metrics (metrics.c), lock-free updates */
};

/* An open file's state: where it is in its life, changed by mnt_fh_set_state only (which
 * asserts the transition is one of these arrows and logs it at TRACE). Readers' states
 * are guarded by fs->mu (a writer's open marks them stale); a writer's by its h->mu, and
 * those that list or unlist it by fs->mu too; read atomically by the others (fh_state).
 *
 *   read handles:  FH_NEW --open--> FH_READING --release--> FH_RELEASED
 *                                       |  overwritten in place     ^
 *                                       `-----> FH_STALE ---release-'
 *
 *   write handles: FH_NEW --open--> FH_WRITING --the opener's close, nothing written-->
 *                  FH_CLOSED (the upload completes at release)
 *                  FH_WRITING --upload ends or fails--> FH_ENDING --unlisted--> FH_DONE
 *                  FH_CLOSED  --upload ends or fails--> FH_ENDING_CLOSED --unlisted--> FH_DONE
 *                  FH_WRITING --the open never reached the caller--> FH_ABANDONED
 *
 * Listed in fs->writers: FH_WRITING, FH_CLOSED, FH_ENDING, FH_ENDING_CLOSED. Done (writes
 * refused, the result in `status`): FH_ENDING, FH_ENDING_CLOSED, FH_DONE. The two ending
 * states keep whether the opener had closed it (mnt_writer_busy waits for those). */
enum fh_state {
    FH_NEW,
    FH_READING,
    FH_STALE,         /* its inode was overwritten in place (counted in in->n_stale) */
    FH_RELEASED,
    FH_WRITING,
    FH_CLOSED,
    FH_ENDING,
    FH_ENDING_CLOSED,
    FH_DONE,
    FH_ABANDONED,
};

/* An open file (read.c, write.c). Its state is one enum (above); what it was opened as
 * stays in mode fields chosen at open and never changed after: is_write, rdwr, direct,
 * in_place, append (not states: no transition ever clears or sets them later). */
struct fh {
    pthread_mutex_t mu;
    int is_write;
    int rdwr;                 /* read handle opened O_RDWR: writes get EBADF */
    struct inode *in;         /* holds a reference (in->nopen) */
    char *path, *key;
    struct s3f_reader *r;
    uint64_t size;            /* read handles: the version's size and mtime */
    int64_t mtime;
    char etag[128];
    enum fh_state state;      /* mnt_fh_set_state; read by others with fh_state() */
    int direct;               /* read handles: not in the page cache (mode) */
    void *pf_data;            /* read handles: the whole file, prefetched (prefetch.c) */
    size_t pf_len;
    /* write handles */
    struct s3f_writer *w;
    uint64_t written;
    int status;               /* done: the upload's result (0 or -errno) */
    pid_t opener;
    int64_t opened;
    uint64_t reserved;
    int in_place;             /* writing over its inode's version (open with O_TRUNC; mode) */
    struct attr prev;         /* ... which was this one */
    /* appends (--incremental-upload, directory buckets; write.c) */
    int append;               /* open(O_APPEND) of an existing object: appends to it (mode) */
    uint64_t apos;            /* the object's size: the next append's write offset */
    char *abuf;               /* bytes not yet appended (at most part_size) */
    size_t alen;
    struct fh *next_writer;
    struct fh *rd_prev, *rd_next;
};

/* ---- fs.c ---- */
int mnt_errno_of(enum s3f_status st, int open_handle);
double mnt_now(void); /* monotonic seconds */
/* Every timed wait of the mount is on the monotonic clock (a step of the wall clock
 * neither stretches nor cuts it): its condition variables are made by mnt_cond_init and
 * their deadlines by mnt_deadline(seconds from now). */
int mnt_cond_init(pthread_cond_t *cv);
struct timespec mnt_deadline(double s);
char *mnt_key_of(const struct mnt_fs *fs, const char *path, const char *suffix);
char *mnt_child_path(const char *dir, const char *name, size_t name_len);
void mnt_parent_of(const char *path, char *out); /* out[PATH_MAX] */
int mnt_is_under(const char *dir, const char *path);
void mnt_fill_stat(const struct mnt_fs *fs, const struct attr *a, fuse_ino_t ino,
                   struct stat *st);
/* Reply to a request that makes `path` (with attributes `a`) known to the kernel: a new
 * reference on its inode (created when needed). 1: replied; 0: replied with an entry the
 * kernel should not keep (past the memory budget); -1: not replied with an entry. */
int mnt_reply_entry(fuse_req_t req, struct mnt_fs *fs, const char *path,
                    const struct attr *a);

/* ---- inode.c (fs->mu held unless said) ---- */
uint32_t mnt_hash_str(const char *s); /* any lock */
int mnt_inodes_init(struct mnt_fs *fs);
void mnt_inodes_free(struct mnt_fs *fs);
struct inode *mnt_inode_find(struct mnt_fs *fs, fuse_ino_t ino);
struct inode *mnt_inode_current(struct mnt_fs *fs, const char *path);
/* The current inode of `path` for the version `a`: the current one when it is that
 * version, else a new one (the old one stays for its references). NULL: out of memory. */
struct inode *mnt_inode_get(struct mnt_fs *fs, const char *path, const struct attr *a);
/* A new inode, current for `path` from now on (create: a new version). */
struct inode *mnt_inode_replace(struct mnt_fs *fs, const char *path, const struct attr *a);
/* The path no longer resolves to its inode (unlink, rename's source). */
void mnt_inode_detach(struct mnt_fs *fs, const char *path);
/* Rename: the inode of `from` becomes the current one of `to`. */
void mnt_inode_move(struct mnt_fs *fs, const char *from, const char *to);
void mnt_inode_unref(struct mnt_fs *fs, struct inode *in, uint64_t nlookup, unsigned nopen);
/* Are new kernel references past the memory budget? The inode table may take half of it
 * (the rest is for the caches it would otherwise squeeze out); past that, readdirplus
 * entries go without node ids and lookups ask the kernel not to keep the entry. */
int mnt_inodes_full(const struct mnt_fs *fs);

/* ---- notify.c (fs->mu held unless said) ---- */
void mnt_notify_init(struct mnt_fs *fs);
void mnt_notify_free(struct mnt_fs *fs); /* once the notifiers have stopped */
/* Queue the kernel's invalidation of `name` in directory `dir_path` (dropped when the
 * kernel does not know the directory). `wait`: the caller will pass the result (NULL: not
 * queued) to mnt_notify_wait. */
struct note *mnt_notify_entry(struct mnt_fs *fs, const char *dir_path, const char *name,
                              int wait);
/* The same for a directory the kernel named in the calling request (a lookup's parent). */
void mnt_notify_entry_at(struct mnt_fs *fs, fuse_ino_t parent, const char *name);
/* Queue the invalidation of an inode's attributes and pages (as above). */
struct note *mnt_notify_inode(struct mnt_fs *fs, struct inode *in, int wait);
/* Wait (fs->mu held; NOTIFY_WAIT_S at most) until the note was sent. Never for a note on
 * a directory the kernel holds locked for the calling request. */
void mnt_notify_wait(struct mnt_fs *fs, struct note *n);
int mnt_notifier_start(struct mnt_fs *fs); /* not under fs->mu */
void mnt_notifier_stop(struct mnt_fs *fs); /* not under fs->mu */

/* ---- meta.c ---- */
int mnt_meta_init(struct mnt_fs *fs);
void mnt_meta_free(struct mnt_fs *fs);
/* fs->mu held: */
struct meta *mnt_meta_find(struct mnt_fs *fs, const char *path);
int mnt_meta_lookup(struct mnt_fs *fs, const char *path, struct attr *a); /* fresh: 1 */
/* A fill from S3 (HEAD, LIST) that started at generation `gen0`: not stored over a
 * change the mount made since. */
void mnt_meta_fill(struct mnt_fs *fs, const char *path, enum kind kind, uint64_t size,
                   int64_t mtime, const char *etag, uint64_t gen0);
/* A change made by the mount: stored, generation bumped for the name and its directory,
 * listings above dropped. kind K_MISSING with expire: the name is looked up again. */
void mnt_meta_change(struct mnt_fs *fs, const char *path, enum kind kind, uint64_t size,
                     int64_t mtime, const char *etag);
void mnt_meta_expire(struct mnt_fs *fs, const char *path);
/* Did the mount find `path` missing last (its entry says so, fresh or not)? Then a lookup
 * may have left the kernel a negative entry of it (--negative-metadata-ttl). */
int mnt_meta_was_missing(struct mnt_fs *fs, const char *path);
/* Has the mount changed `path` since `gen0`? */
int mnt_meta_changed_since(struct mnt_fs *fs, const char *path, uint64_t gen0);
/* Has a change been made in directory `dir` since `gen0`? */
int mnt_dir_changed_since(struct mnt_fs *fs, const char *dir, uint64_t gen0);
void mnt_mem_charge(struct mnt_fs *fs, int64_t bytes); /* + charge, - release */
void mnt_mem_reclaim(struct mnt_fs *fs);               /* evict down to the budget */
/* not under fs->mu: */
int mnt_heads_start(struct mnt_fs *fs); /* before lookups come; -1: out of memory */
void mnt_heads_stop(struct mnt_fs *fs); /* after the last lookup */
int mnt_resolve(struct mnt_fs *fs, const char *path, struct attr *a, int fresh);
int mnt_parent_ok(struct mnt_fs *fs, const char *path);

/* ---- guard.c (fs->mu held) ---- */
/* An open for writing of `path` (inode `in`) by thread `tid` was answered ESTALE (the name
 * is gone, read.c; a reader reads its inode through the page cache, or an inode that is
 * not the name's, write.c): until
 * that thread's retry opens (its next OPEN answered, its CREATE, or a lookup of it that
 * finds nothing; 15 s at most), read opens of the name are EBUSY (it is being overwritten), so
 * that the retry meets no new reader that would refuse it again. Not when `path` is the
 * name a rename still running moved `in` to: the open came from the old name. */
void mnt_overwrite_pending(struct mnt_fs *fs, const struct inode *in, const char *path,
                           pid_t tid);
void mnt_overwrite_retried(struct mnt_fs *fs, pid_t tid);
int mnt_overwriting(struct mnt_fs *fs, const char *path);
/* A lookup of `path` by thread `tid`: is it an overwrite's retry (1)? From then until the
 * retry's OPEN is answered, the name is pinned for it: */
int mnt_overwrite_lookup(struct mnt_fs *fs, const char *path, pid_t tid);
/* Is `path` pinned by the retry of a thread other than `tid` (an unlink, rename or create
 * of it is EBUSY: it would change the inode the retry looked up before its OPEN)? tid 0
 * (a caller outside the daemon's PID namespace) is never the same thread. */
int mnt_overwrite_pinned(struct mnt_fs *fs, const char *path, pid_t tid);
void mnt_overwrites_free(struct mnt_fs *fs);

/* ---- dircache.c (fs->mu held unless said) ---- */
/* A listed name: its attributes, and the generation they were asked for at. */
struct dent {
    char *name;
    struct attr a;
    int no_id;            /* changed by the mount after its page was asked for */
    uint64_t gen;         /* the generation when its attributes were asked for */
};

/* A complete listing in the cache, shared by the directory handles opened on it. */
struct listing {
    struct listing *next;
    char *path;
    struct dent *ents;
    size_t n;
    double expires;
    uint64_t gen0;        /* the generation when the listing started */
    int64_t bytes;        /* charged to the memory account until freed */
    unsigned refs;        /* the cache's (while in fs->listings) and the handles' sharing it */
};

/* A directory handle's copy of its listing so far, for the cache. */
struct listing_copy {
    struct dent *v;
    size_t n, cap;
    uint64_t bytes;       /* what v is charged to the memory account (fs->mu) */
    int over;             /* given up: the listing will not be cached */
};

/* Entries (any lock): append a copy of `name` with its attributes to a growing array
 * (first allocation `first` entries, doubling; never past `max`). -ENOMEM on failure (the
 * array is left as it was). */
int mnt_dents_append(struct dent **v, size_t *n, size_t *cap, size_t first, size_t max,
                     const char *name, size_t len, const struct attr *a, int no_id,
                     uint64_t gen);
void mnt_dents_free(struct dent *e, size_t n);
void mnt_listings_drop_above(struct mnt_fs *fs, const char *path);
void mnt_listings_trim(struct mnt_fs *fs); /* the least recent out, down to the budget */
void mnt_listings_free(struct mnt_fs *fs);
/* The fresh cached listing of `path`, with a reference for the caller (NULL: none). */
struct listing *mnt_listing_share(struct mnt_fs *fs, const char *path);
void mnt_listing_unref(struct mnt_fs *fs, struct listing *l); /* the last one frees it */
/* A handle's copy: record an entry (best effort: given up past its bounds), give it up,
 * give back its charge, empty it (no lock: nothing charged), and, the listing done
 * (`complete`: without error), keep it in the cache when nothing changed the directory
 * since `gen0`. */
void mnt_copy_keep(struct mnt_fs *fs, struct listing_copy *c, const char *name, size_t len,
                   const struct attr *a, uint64_t gen);
void mnt_copy_drop(struct mnt_fs *fs, struct listing_copy *c);
void mnt_copy_uncharge(struct mnt_fs *fs, struct listing_copy *c);
void mnt_copy_clear(struct listing_copy *c);
void mnt_copy_done(struct mnt_fs *fs, struct listing_copy *c, const char *path,
                   uint64_t gen0, int complete);

/* ---- localdir.c (fs->mu held) ---- */
struct localdir {
    struct localdir *next;
    char *path;
};
struct localdir *mnt_localdir_find(struct mnt_fs *fs, const char *path);
void mnt_localdir_remove(struct mnt_fs *fs, const char *path);
int mnt_holds_local(struct mnt_fs *fs, const char *dir);
void mnt_localdirs_free(struct mnt_fs *fs);
/* not under fs->mu: */
void mnt_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void mnt_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);

/* ---- readdir.c ---- */
void mnt_dirs_free(struct mnt_fs *fs); /* fs->mu held: the session has ended */
#ifdef S3F_TEST_HOOKS
/* What the open directory handles hold of listings, counted from their entries (fs->mu
 * held; the test builds' user.s3flash.test.stats): each copy, each shared listing once. */
uint64_t mnt_dirs_held(struct mnt_fs *fs);
#endif
void mnt_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mnt_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi);
void mnt_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi);
void mnt_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* ---- read.c ---- */
void mnt_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mnt_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                 struct fuse_file_info *fi);
void mnt_reader_release(struct mnt_fs *fs, struct fh *h);
/* Does a handle read inode `in` through the page cache? (fs->mu held) */
int mnt_read_cached(struct mnt_fs *fs, const struct inode *in);
void mnt_readers_free(struct mnt_fs *fs);
struct fh *mnt_fh_new(struct mnt_fs *fs, struct inode *in, const char *path);
void mnt_fh_free(struct mnt_fs *fs, struct fh *h); /* not under fs->mu */
/* The one place a handle's state changes: asserts the transition is allowed (enum
 * fh_state's diagram) and logs it at TRACE. Under the lock that guards the state. */
void mnt_fh_set_state(struct fh *h, enum fh_state to);
static inline enum fh_state fh_state(const struct fh *h) {
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED);
}
/* Is the write handle in fs->writers? Done (its upload completed or failed)? */
static inline int fh_listed(enum fh_state s) {
    return s == FH_WRITING || s == FH_CLOSED || s == FH_ENDING || s == FH_ENDING_CLOSED;
}
static inline int fh_done(enum fh_state s) {
    return s == FH_ENDING || s == FH_ENDING_CLOSED || s == FH_DONE;
}

/* ---- prefetch.c (none of these under fs->mu) ---- */
int mnt_pf_init(struct mnt_fs *fs);  /* after the part size is known; 0 also when off */
void mnt_pf_free(struct mnt_fs *fs);
/* readdir gave the kernel entry `index` of directory `dir` */
void mnt_pf_listed(struct mnt_fs *fs, const char *dir, uint64_t index, const char *name,
                   const struct attr *a);
/* An open for reading of `path` at version `etag`: follows the listing's order, and
 * hands over the file's bytes when they were prefetched at that ETag (1; free *data). */
int mnt_pf_open(struct mnt_fs *fs, const char *path, const char *etag, void **data,
                size_t *len);
void mnt_pf_stats(struct mnt_fs *fs, uint64_t *bytes, size_t *n);

/* ---- write.c ---- */
struct fh *mnt_writer_find(struct mnt_fs *fs, const char *path);
int mnt_writer_busy(struct mnt_fs *fs, const char *path); /* fs->mu held; may wait on it */
int mnt_open_writer(fuse_req_t req, struct mnt_fs *fs, struct inode *in, const char *path,
                    const struct attr *append,
                    struct fuse_file_info *fi);
void mnt_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                   struct fuse_file_info *fi);
void mnt_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                  struct fuse_file_info *fi);
void mnt_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mnt_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void mnt_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mnt_writers_free(struct mnt_fs *fs);

/* ---- namespace.c ---- */
void mnt_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void mnt_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                   const char *newname, unsigned int flags);

/* Is `path` the source or target of a rename (or unlink) in flight? (fs->mu held) */
int mnt_renaming(struct mnt_fs *fs, const char *path);
/* Wait (fs->mu held, 15 s at most) until none is. */
void mnt_renaming_wait(struct mnt_fs *fs, const char *path);
/* A new object at `path` (fs->mu held; the caller's last step under it): the directories
 * above it are directories in S3 now (no longer local ones). The kernel's entry of one the
 * mount had found missing (a negative entry, left by a lookup while an unlink had emptied
 * it and this rename into it or upload under it ran) is invalidated before this returns
 * (2 s at most), or, in a directory the kernel holds locked for the calling request
 * (`locked1`/`locked2`, NULL: none), through `later` once the request is answered. */
struct deferred;
void mnt_promote_parents(struct mnt_fs *fs, const char *path, const char *locked1,
                         const char *locked2, struct deferred *later);

/* The path of `name` in the directory inode `parent` (NULL with *err set). */
char *mnt_path_at(struct mnt_fs *fs, fuse_ino_t parent, const char *name, int *err);
/* mnt_path_at for a request: on failure, the error is the reply (and NULL returned). */
char *mnt_req_path_at(fuse_req_t req, struct mnt_fs *fs, fuse_ino_t parent, const char *name);
/* The same for a request that changes the bucket: EROFS on a read-only mount. */
char *mnt_req_path_rw(fuse_req_t req, struct mnt_fs *fs, fuse_ino_t parent, const char *name);
/* The path of inode `ino` (NULL with *err set: ENOENT when unknown). */
char *mnt_path_of(struct mnt_fs *fs, fuse_ino_t ino, int *err);

#endif /* S3FLASH_MOUNT_FS_H */
