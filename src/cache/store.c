/* The block store of the node-local cache: one file per block, its format, the shared
 * byte count, sampled LRU eviction, and the writer thread. docs/CACHE.md describes the
 * layout and the choices.
 *
 * Layout under the cache directory D (D itself when it is this user's and only this user
 * can write it; D/s3flash-<uid> when D is a shared directory with the sticky bit, /tmp):
 *   v1/lock                      flock'd for each step that changes the blocks; holds the
 *                                byte count, one checked slot per first-level directory
 *                                (s3f__cache_counts_parse)
 *   v1/<h[0:2]>/<h>/<index>      a block, h = hex SHA-256 of endpoint \0 bucket \0 key \0
 *                                ETag \0 size \0 block size; written as
 *                                v1/<..>/<h>/.tmp.<pid>.<n> and renamed into place
 * A block file: a 56-byte header (magic "S3FCBLK1", version, header length, object size,
 * offset, length, CRC32C of the data, lengths of bucket, key and ETag), the bucket, key and
 * ETag, then the data. A reader opens the file, checks every header field against what it
 * asks and the CRC32C of the data; anything else unlinks the file and is a miss.
 *
 * Only what the cache made is touched: v1 and the root are opened once, checked (a
 * directory, not a link, this user's, mode 0700), and kept open; every other directory is
 * opened relative to its parent's handle with O_NOFOLLOW|O_DIRECTORY, block files with
 * O_NOFOLLOW|O_NONBLOCK and checked to be regular files; a symbolic link, FIFO, socket or
 * device anywhere in the tree is a miss and is never followed, read, renamed over or
 * unlinked.
 *
 * Processes: a rename is atomic, so a reader sees a whole old file or a whole new one; an
 * unlinked file stays readable through a descriptor already open. Each change of the
 * blocks (a rename into place, an eviction batch, the removal of a corrupt block, the
 * recount of one slot) is one short step under the flock of v1/lock (and a mutex: flock
 * does not exclude threads sharing its descriptor) that updates the slot of the directory
 * it changed, so the count is exact without scans. Nothing scans the whole tree: eviction
 * samples a few object directories (weighted by the slots' bytes), keeps the oldest blocks
 * it saw, and unlinks them after checking they are unchanged; a slot found invalid (a
 * corrupted or lost count) is recounted by a scan of its one directory.
 *
 * Threads: gets and has run on the caller's thread without the lock (except the unlink of
 * a corrupt block); puts copy the block into a bounded queue; the cache's writer thread
 * writes the blocks, evicts and recounts. Counters are atomics. */
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

#include "cache/cache.h"

#define MAGIC "S3FCBLK1"
#define COUNT_MAGIC "S3FCCNT1"
#define VERSION 1u
#define HDR_FIXED S3F__CACHE_HEADER_FIXED
#define TMP_STALE_S 600         /* temporary files older than this are a dead writer's */
#define QUEUE_DEFAULT ((uint64_t)32 << 20)
#define SAMPLE_DIRS 5           /* object directories looked at per eviction step */
#define SAMPLE_BLOCKS 16        /* blocks of each looked at (a random sample of its names) */
#define SAMPLE_NAMES_MAX 100000 /* entries of one directory read to draw the sample */
#define POOL (SAMPLE_DIRS * SAMPLE_BLOCKS)
#define INSERT_ROUNDS 64        /* eviction steps one insert may run before it gives up */
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct job {
    struct job *next;
    char hex[65];
    uint64_t index, object_size, offset, len;
    uint32_t bl, kl, el;
    char *names;                  /* bucket, key, ETag (no NULs), then the data */
};

struct s3f__cache {
    char *dir;                    /* as given (messages) */
    char *root;                   /* the v1 directory's path (messages) */
    char *scope;                  /* the endpoint, hashed into every object's name */
    uint64_t max_bytes, min_free_bytes, block_bytes, count_limit;
    bool free_from_fs;            /* min_free_bytes: 5% of the file system, computed each time */
    const struct s3f__logger *logger;
    int v1_fd;                    /* the v1 directory, checked once */
    int lock_fd;
    pthread_mutex_t lock;         /* with the flock of lock_fd: each step that changes blocks */
    int warned;                   /* atomic: the first error was logged */
    int warned_room;              /* atomic: "no room" was logged */
    uint64_t seq;                 /* atomic: temporary file names */
    struct s3f__cache_counters n; /* atomics */

    /* the writer thread and its queue, guarded by q_lock */
    pthread_mutex_t q_lock;
    pthread_cond_t q_work, q_idle;
    struct job *q_head, *q_tail;
    const struct job *q_busy;     /* the job being written now */
    uint64_t q_bytes, q_max;      /* queued and being written; the bound */
    bool q_stop, q_started, thread_ok;
    pthread_t thread;
    pid_t pid;                    /* the process whose thread it is (a forked child has none) */
    /* the writer thread's own state */
    uint64_t rng;
};

struct hdr {
    char magic[8];
    uint32_t version;
    uint32_t hdr_len;
    uint64_t object_size;
    uint64_t offset;
    uint64_t length;
    uint32_t crc32c;
    uint16_t bucket_len;
    uint16_t etag_len;
    uint32_t key_len;
    uint32_t reserved;
};
_Static_assert(sizeof(struct hdr) == HDR_FIXED, "block header layout");

static void count(uint64_t *counter, uint64_t n) {
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

/* An error of the cache: counted, and the first one logged (WARN) with its cause. */
static void S3F_PRINTF(2, 3) cache_error(struct s3f__cache *c, const char *fmt, ...) {
    count(&c->n.errors, 1);
    if (__atomic_exchange_n(&c->warned, 1, __ATOMIC_RELAXED))
        return;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s3f__log(c->logger, S3F_LOG_WARN,
             "cache %s: %s; the cache is bypassed where it fails (further errors are counted, "
             "not logged)",
             c->dir, msg);
}

/* ---- the on-disk formats ---------------------------------------------------------------- */

static uint64_t get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

void s3f__cache_counts_parse(const void *buf, size_t len, uint64_t limit,
                             struct s3f__cache_counts *out) {
    memset(out, 0, sizeof(*out));
    const unsigned char *p = buf;
    if (limit > S3F__CACHE_COUNT_LIMIT)
        limit = S3F__CACHE_COUNT_LIMIT;
    if (len < S3F__CACHE_COUNT_HEAD || memcmp(p, COUNT_MAGIC, 8) != 0)
        return;
    uint32_t slots;
    memcpy(&slots, p + 8, sizeof(slots));
    if (slots != S3F__CACHE_SLOTS)
        return;
    out->head_ok = true;
    for (size_t i = 0; i < S3F__CACHE_SLOTS; i++) {
        size_t at = S3F__CACHE_COUNT_HEAD + i * 16;
        if (at + 16 > len)
            break;
        uint64_t v = get64(p + at), check = get64(p + at + 8);
        if ((v ^ S3F__CACHE_COUNT_KEY) != check || v > limit)
            continue;
        out->bytes[i] = v;
        out->valid[i] = true;
    }
}

uint64_t s3f__cache_counts_total(const struct s3f__cache_counts *k) {
    uint64_t t = 0;
    for (size_t i = 0; i < S3F__CACHE_SLOTS; i++)
        if (k->valid[i])
            t += k->bytes[i] <= S3F__CACHE_COUNT_LIMIT ? k->bytes[i] : S3F__CACHE_COUNT_LIMIT;
    return t;
}

const char *s3f__cache_header_check(const void *buf, size_t len, uint64_t file_size,
                                    const struct s3f__cache_block_id *want, uint32_t *crc32c) {
    struct hdr h;
    if (len < sizeof(h))
        return "short header";
    memcpy(&h, buf, sizeof(h));
    if (memcmp(h.magic, MAGIC, 8) != 0 || h.version != VERSION)
        return "not a block of this version";
    size_t bl = strlen(want->bucket), kl = strlen(want->key), el = strlen(want->etag);
    if (h.bucket_len != bl || h.key_len != kl || h.etag_len != el ||
        (uint64_t)h.hdr_len != HDR_FIXED + (uint64_t)bl + kl + el ||
        h.object_size != want->object_size || h.offset != want->offset ||
        h.length != want->length || h.length > UINT64_MAX - h.hdr_len ||
        file_size != h.hdr_len + h.length)
        return "header does not match";
    if (len < h.hdr_len)
        return "short header";
    const char *names = (const char *)buf + HDR_FIXED;
    if (memcmp(names, want->bucket, bl) != 0 || memcmp(names + bl, want->key, kl) != 0 ||
        memcmp(names + bl + kl, want->etag, el) != 0)
        return "names do not match";
    *crc32c = h.crc32c;
    return NULL;
}

/* ---- directories relative to handles ----------------------------------------------------- */

/* Open directory `name` under `at` without following a link; create it (0700) first when
 * `create` and missing. -1 with errno (ELOOP or ENOTDIR: something else is there). */
static int subdir(int at, const char *name, bool create) {
    int fd = openat(at, name, DIR_FLAGS);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(at, name, 0700) != 0 && errno != EEXIST)
            return -1;
        fd = openat(at, name, DIR_FLAGS);
    }
    return fd;
}

static void hex2(unsigned slot, char out[3]) {
    static const char digits[] = "0123456789abcdef";
    out[0] = digits[(slot >> 4) & 15];
    out[1] = digits[slot & 15];
    out[2] = '\0';
}

static unsigned slot_of(const char *hex) {
    unsigned v = 0;
    for (int i = 0; i < 2; i++) {
        char ch = hex[i];
        v = v * 16 + (unsigned)(ch >= 'a' ? ch - 'a' + 10 : ch - '0');
    }
    return v & 255;
}

/* The object directory of `hex` (v1/<2>/<64>), opened; `parent` (optional) gets the first
 * level's handle (the caller closes it). -1 with errno. */
static int obj_dir(struct s3f__cache *c, const char *hex, bool create, int *parent) {
    char top[3] = {hex[0], hex[1], '\0'};
    int d2 = subdir(c->v1_fd, top, create);
    if (d2 < 0)
        return -1;
    int d3 = subdir(d2, hex, create);
    int e = errno;
    if (parent && d3 >= 0)
        *parent = d2;
    else
        close(d2);
    errno = e;
    return d3;
}

static bool is_block_name(const char *s) {
    if (!*s || strlen(s) > 20)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

static bool is_obj_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == 64;
}

/* ---- opening: the root and its ownership ---------------------------------------------- */

static enum s3f_status refuse(struct s3f_error *err, const char *dir, const char *fmt, ...)
    S3F_PRINTF(3, 4);
static enum s3f_status refuse(struct s3f_error *err, const char *dir, const char *fmt, ...) {
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return s3f__error_set(err, S3F_ERR_CONFIG, "cache", dir, "%s", msg);
}

/* A directory the cache made (v1, s3flash-<uid>): a directory, this user's, mode 0700. */
static enum s3f_status check_private(int fd, const char *path, struct s3f_error *err) {
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return s3f__error_set(err, S3F_ERR_IO, "cache", path, "cannot stat %s: %s", path,
                              strerror(errno));
    if (sb.st_uid != geteuid())
        return refuse(err, path,
                      "%s belongs to uid %u, not to this user (uid %u): it was not made by "
                      "s3flash for this user, the cache does not use it",
                      path, (unsigned)sb.st_uid, (unsigned)geteuid());
    if (sb.st_mode & 077)
        return refuse(err, path,
                      "%s has mode %04o: other users could read or replace the cache's files; "
                      "the cache needs it 0700 (chmod 700 it, or remove it to let s3flash "
                      "make it again)",
                      path, (unsigned)(sb.st_mode & 07777));
    return S3F_OK;
}

static enum s3f_status open_private(int at, const char *name, const char *path, int *out,
                                    struct s3f_error *err) {
    *out = subdir(at, name, true);
    if (*out < 0) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR)
            return refuse(err, path,
                          "%s is not a directory (a symbolic link or a file): the cache never "
                          "follows links inside itself; remove it to let s3flash make it",
                          path);
        return s3f__error_set(err, S3F_ERR_IO, "cache", path, "cannot create %s: %s", path,
                              strerror(e));
    }
    return check_private(*out, path, err);
}

/* The root: the directory given, or a private one inside it; then v1 in it. Sets v1_fd and
 * c->root. */
static enum s3f_status open_root(struct s3f__cache *c, struct s3f_error *err) {
    const char *dir = c->dir;
    uid_t me = geteuid();
    int fd = subdir(AT_FDCWD, dir, true); /* the path above it is the user's: followed */
    if (fd < 0) {
        int e = errno;
        struct stat lsb;
        if (e == ELOOP || (e == ENOTDIR && lstat(dir, &lsb) == 0 && S_ISLNK(lsb.st_mode)))
            return refuse(err, dir,
                          "%s is a symbolic link: the cache's directory must be the directory "
                          "itself (give the path it points to)",
                          dir);
        return s3f__error_set(err, S3F_ERR_IO, "cache", dir, "cannot create or open %s: %s",
                              dir, strerror(e));
    }
    enum s3f_status st = S3F_OK;
    char path[4200];
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = s3f__error_set(err, S3F_ERR_IO, "cache", dir, "cannot stat %s: %s", dir,
                            strerror(errno));
        goto out;
    }
    if (sb.st_uid != me && sb.st_uid != 0) {
        st = refuse(err, dir,
                    "%s belongs to uid %u, not to this user (uid %u) or root: its owner could "
                    "replace the cache's files; give a directory of your own",
                    dir, (unsigned)sb.st_uid, (unsigned)me);
        goto out;
    }
    snprintf(path, sizeof(path), "%s", dir);
    if (sb.st_mode & 022) {
        if (!(sb.st_mode & S_ISVTX)) {
            st = refuse(err, dir,
                        "%s is writable by other users (mode %04o) and has no sticky bit: "
                        "they could replace the cache's files; chmod go-w it or give another "
                        "directory",
                        dir, (unsigned)(sb.st_mode & 07777));
            goto out;
        }
        /* a shared scratch directory (/tmp): a private directory of this user inside it,
         * which the sticky bit keeps others from renaming or removing */
        char name[40];
        snprintf(name, sizeof(name), "s3flash-%u", (unsigned)me);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int priv = -1;
        st = open_private(fd, name, path, &priv, err);
        close(fd);
        fd = priv;
        if (st)
            goto out;
        s3f__log(c->logger, S3F_LOG_INFO,
                 "cache %s is shared with other users (mode %04o): the blocks go to %s", dir,
                 (unsigned)(sb.st_mode & 07777), path);
    }
    size_t n = strlen(path) + 4;
    if (!(c->root = malloc(n))) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL, "out of memory");
        goto out;
    }
    snprintf(c->root, n, "%s/v1", path);
    st = open_private(fd, "v1", c->root, &c->v1_fd, err);
out:
    if (fd >= 0)
        close(fd);
    return st;
}

/* ---- the lock and the count ----------------------------------------------------------------- */

static void lock_take(struct s3f__cache *c) {
    pthread_mutex_lock(&c->lock);
    while (flock(c->lock_fd, LOCK_EX) != 0 && errno == EINTR)
        ;
}

static void lock_drop(struct s3f__cache *c) {
    flock(c->lock_fd, LOCK_UN);
    pthread_mutex_unlock(&c->lock);
}

/* The count (lock held). */
static void counts_read(struct s3f__cache *c, struct s3f__cache_counts *k) {
    unsigned char buf[S3F__CACHE_COUNT_FILE];
    ssize_t n = pread(c->lock_fd, buf, sizeof(buf), 0);
    s3f__cache_counts_parse(buf, n > 0 ? (size_t)n : 0, c->count_limit, k);
}

/* Write slot `i` (lock held); a missing or foreign head is written first, every other slot
 * then invalid (recounted when next seen). */
static bool slot_write(struct s3f__cache *c, const struct s3f__cache_counts *k, unsigned i,
                       uint64_t v) {
    if (!k->head_ok) {
        unsigned char head[S3F__CACHE_COUNT_FILE];
        memset(head, 0, sizeof(head));
        memcpy(head, COUNT_MAGIC, 8);
        uint32_t slots = S3F__CACHE_SLOTS;
        memcpy(head + 8, &slots, sizeof(slots));
        if (pwrite(c->lock_fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
            ftruncate(c->lock_fd, sizeof(head)) != 0) {
            cache_error(c, "cannot write the byte count: %s", strerror(errno));
            return false;
        }
    }
    uint64_t slot[2] = {v, v ^ S3F__CACHE_COUNT_KEY};
    if (pwrite(c->lock_fd, slot, sizeof(slot), S3F__CACHE_COUNT_HEAD + (off_t)i * 16) !=
        (ssize_t)sizeof(slot)) {
        cache_error(c, "cannot write the byte count: %s", strerror(errno));
        return false;
    }
    return true;
}

/* Add (or take) `delta` bytes to slot `i` (lock held; k read under the same hold). */
static void slot_add(struct s3f__cache *c, struct s3f__cache_counts *k, unsigned i,
                     int64_t delta) {
    if (!k->valid[i])
        return; /* recounted before it is used */
    uint64_t v = k->bytes[i];
    if (delta < 0)
        v = (uint64_t)-delta > v ? 0 : v - (uint64_t)-delta;
    else
        v = v + (uint64_t)delta > c->count_limit ? c->count_limit : v + (uint64_t)delta;
    k->bytes[i] = v;
    slot_write(c, k, i, v);
    k->head_ok = true;
}

/* Bytes of the block files under first-level directory `slot`, and stale temporary files
 * removed (`sweep`). Only regular files directly in object directories are counted. */
static uint64_t count_dir(struct s3f__cache *c, unsigned slot, bool sweep) {
    char top[3];
    hex2(slot, top);
    int d2 = subdir(c->v1_fd, top, false);
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
    count(&c->n.dirs_listed, 1);
    while ((e2 = readdir(mid))) {
        if (!is_obj_name(e2->d_name))
            continue;
        int d3 = subdir(dirfd(mid), e2->d_name, false);
        DIR *obj = d3 >= 0 ? fdopendir(d3) : NULL;
        if (!obj) {
            if (d3 >= 0)
                close(d3);
            continue;
        }
        struct dirent *e3;
        count(&c->n.dirs_listed, 1);
        while ((e3 = readdir(obj))) {
            struct stat sb;
            bool tmp = !strncmp(e3->d_name, ".tmp.", 5);
            if ((!tmp && !is_block_name(e3->d_name)) ||
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

static uint64_t recount(struct s3f__cache *c, unsigned slot) {
    uint64_t v = count_dir(c, slot, true);
    return v > c->count_limit ? c->count_limit : v;
}

/* Read the count; recount each invalid slot, one short step (one directory) per lock hold.
 * Returns with the lock held and k valid. A count that cannot be written (a read-only or
 * broken lock file) is kept in k only. */
static void counts_valid_locked(struct s3f__cache *c, struct s3f__cache_counts *k) {
    for (unsigned step = 0;; step++) {
        lock_take(c);
        counts_read(c, k);
        unsigned bad = S3F__CACHE_SLOTS;
        for (unsigned i = 0; i < S3F__CACHE_SLOTS && bad == S3F__CACHE_SLOTS; i++)
            if (!k->valid[i])
                bad = i;
        if (bad == S3F__CACHE_SLOTS)
            return;
        if (step > 2 * S3F__CACHE_SLOTS || !slot_write(c, k, bad, recount(c, bad))) {
            for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++)
                if (!k->valid[i]) {
                    k->bytes[i] = recount(c, i);
                    k->valid[i] = true;
                }
            return;
        }
        lock_drop(c);
    }
}

uint64_t s3f__cache_scan_bytes(struct s3f__cache *c) {
    uint64_t t = 0;
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++)
        t += count_dir(c, i, false);
    return t;
}

/* Free bytes on the cache's file system and the floor to keep. */
static void fs_space(struct s3f__cache *c, uint64_t *free_bytes, uint64_t *floor) {
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

/* ---- open and free ----------------------------------------------------------------------- */

static void *writer_main(void *arg);

uint64_t s3f__cache_queue_bytes(uint64_t memory_limit, uint64_t block_bytes) {
    uint64_t q = memory_limit / 8;
    if (q > QUEUE_DEFAULT)
        q = QUEUE_DEFAULT;
    if (q < 2 * block_bytes)
        q = 2 * block_bytes;
    return q > memory_limit / 2 ? 0 : q;
}

enum s3f_status s3f__cache_open(const struct s3f__cache_options *o, struct s3f__cache **out,
                                struct s3f_error *err) {
    *out = NULL;
    uint64_t bs = o->block_bytes ? o->block_bytes : S3F__CACHE_BLOCK_DEFAULT;
    if (bs < S3F__CACHE_BLOCK_MIN || bs > S3F__CACHE_BLOCK_MAX || (bs & (bs - 1)))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "cache", o->dir,
                              "cache_block_bytes must be a power of two from 64 KiB to 64 MiB, "
                              "got %" PRIu64,
                              bs);
    if (!o->dir || !o->dir[0])
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "cache", NULL,
                              "cache_dir is empty");
    if (strlen(o->dir) > 3000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "cache", NULL,
                              "cache_dir is longer than 3000 bytes");
    struct s3f__cache *c = calloc(1, sizeof(*c));
    if (!c)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL, "out of memory");
    c->lock_fd = -1;
    c->v1_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->q_lock, NULL);
    pthread_cond_init(&c->q_work, NULL);
    pthread_cond_init(&c->q_idle, NULL);
    c->block_bytes = bs;
    c->max_bytes = o->max_bytes ? o->max_bytes : S3F__CACHE_MAX_DEFAULT;
    c->min_free_bytes = o->min_free_bytes;
    c->free_from_fs = o->min_free_bytes == 0;
    c->logger = o->logger;
    c->q_max = o->queue_bytes ? o->queue_bytes : QUEUE_DEFAULT;
    if (c->q_max < 2 * bs)
        c->q_max = 2 * bs;
    c->dir = s3f__strdup(o->dir);
    c->scope = s3f__strdup(o->scope ? o->scope : "");
    c->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^
             (uint64_t)(uintptr_t)c;
    enum s3f_status st = S3F_OK;
    if (!c->dir || !c->scope) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL, "out of memory");
        goto out;
    }
    if ((st = open_root(c, err)))
        goto out;
    c->lock_fd = openat(c->v1_fd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
                                              O_CLOEXEC, 0600);
    struct stat sb;
    if (c->lock_fd < 0 || fstat(c->lock_fd, &sb) != 0) {
        st = s3f__error_set(err, S3F_ERR_IO, "cache", o->dir, "cannot open %s/lock: %s",
                            c->root, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
        st = refuse(err, o->dir, "%s/lock is not a regular file of this user: not used",
                    c->root);
        goto out;
    }
    struct statvfs v;
    c->count_limit = S3F__CACHE_COUNT_LIMIT;
    if (fstatvfs(c->v1_fd, &v) == 0 && (uint64_t)v.f_blocks * v.f_frsize < c->count_limit)
        c->count_limit = (uint64_t)v.f_blocks * v.f_frsize;
    if (pthread_create(&c->thread, NULL, writer_main, c) != 0) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL,
                            "cannot start the cache's writer thread");
        goto out;
    }
    c->thread_ok = true;
    c->pid = getpid();
out:
    if (st)
        s3f__cache_free(c);
    else
        *out = c;
    return st;
}

void s3f__cache_free(struct s3f__cache *c) {
    if (!c)
        return;
    if (c->thread_ok && c->pid == getpid()) {
        pthread_mutex_lock(&c->q_lock);
        c->q_stop = true;
        pthread_cond_signal(&c->q_work);
        pthread_mutex_unlock(&c->q_lock);
        pthread_join(c->thread, NULL);
    }
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    if (c->v1_fd >= 0)
        close(c->v1_fd);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->q_lock);
    pthread_cond_destroy(&c->q_work);
    pthread_cond_destroy(&c->q_idle);
    free(c->dir);
    free(c->scope);
    free(c->root);
    free(c);
}

uint64_t s3f__cache_block_bytes(const struct s3f__cache *c) {
    return c->block_bytes;
}

const char *s3f__cache_root(const struct s3f__cache *c) {
    return c->root;
}

void s3f__cache_counters(struct s3f__cache *c, struct s3f__cache_counters *out) {
    out->hits = __atomic_load_n(&c->n.hits, __ATOMIC_RELAXED);
    out->misses = __atomic_load_n(&c->n.misses, __ATOMIC_RELAXED);
    out->hit_bytes = __atomic_load_n(&c->n.hit_bytes, __ATOMIC_RELAXED);
    out->errors = __atomic_load_n(&c->n.errors, __ATOMIC_RELAXED);
    out->evicted_bytes = __atomic_load_n(&c->n.evicted_bytes, __ATOMIC_RELAXED);
    out->dirs_listed = __atomic_load_n(&c->n.dirs_listed, __ATOMIC_RELAXED);
    /* one snapshot of where the accepted blocks are (settle()) */
    pthread_mutex_lock(&c->q_lock);
    out->insert_pending_bytes = c->q_bytes;
    out->inserted_bytes = c->n.inserted_bytes;
    out->insert_dropped_bytes = c->n.insert_dropped_bytes;
    pthread_mutex_unlock(&c->q_lock);
}

void s3f__cache_count_miss(struct s3f__cache *c) {
    count(&c->n.misses, 1);
}

/* ---- objects -------------------------------------------------------------------------- */

enum s3f_status s3f__cache_object_init(struct s3f__cache_object *o, struct s3f__cache *c,
                                       const char *bucket, const char *key, const char *etag,
                                       uint64_t size) {
    memset(o, 0, sizeof(*o));
    struct s3f__buf id;
    s3f__buf_init(&id, (size_t)1 << 20);
    char num[32];
    enum s3f_status st = S3F_OK;
    size_t lens[3] = {strlen(bucket), strlen(key), strlen(etag)};
    if (s3f__buf_append(&id, c->scope, strlen(c->scope) + 1) ||
        s3f__buf_append(&id, bucket, lens[0] + 1) || s3f__buf_append(&id, key, lens[1] + 1) ||
        s3f__buf_append(&id, etag, lens[2] + 1))
        st = S3F_ERR_NO_MEMORY;
    snprintf(num, sizeof(num), "%" PRIu64, size);
    if (!st && s3f__buf_append(&id, num, strlen(num) + 1))
        st = S3F_ERR_NO_MEMORY;
    snprintf(num, sizeof(num), "%" PRIu64, c->block_bytes);
    if (!st && s3f__buf_append(&id, num, strlen(num)))
        st = S3F_ERR_NO_MEMORY;
    if (!st && s3f__sha256_hex(id.data, id.len, o->hex))
        st = S3F_ERR_NO_MEMORY;
    s3f__buf_cleanup(&id);
    if (st)
        return st;
    size_t n = strlen(c->root) + 80;
    o->dir = malloc(n);
    o->bucket = s3f__strdup(bucket);
    o->key = s3f__strdup(key);
    o->etag = s3f__strdup(etag);
    if (!o->dir || !o->bucket || !o->key || !o->etag || lens[0] > UINT16_MAX ||
        lens[2] > UINT16_MAX) {
        s3f__cache_object_cleanup(o);
        return S3F_ERR_NO_MEMORY;
    }
    snprintf(o->dir, n, "%s/%.2s/%s", c->root, o->hex, o->hex);
    o->cache = c;
    o->size = size;
    o->scratch_block = UINT64_MAX;
    return S3F_OK;
}

void s3f__cache_object_cleanup(struct s3f__cache_object *o) {
    free(o->bucket);
    free(o->key);
    free(o->etag);
    free(o->dir);
    free(o->scratch);
    memset(o, 0, sizeof(*o));
}

uint64_t s3f__cache_block_len(const struct s3f__cache_object *o, uint64_t index) {
    uint64_t bs = o->cache->block_bytes;
    if (index >= (o->size + bs - 1) / bs)
        return 0;
    uint64_t start = index * bs;
    return o->size - start < bs ? o->size - start : bs;
}

static int read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t r = write(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

bool s3f__cache_has(struct s3f__cache_object *o, uint64_t index) {
    int d3 = obj_dir(o->cache, o->hex, false, NULL);
    if (d3 < 0)
        return false;
    char name[24];
    snprintf(name, sizeof(name), "%" PRIu64, index);
    struct stat sb;
    bool ok = fstatat(d3, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
    close(d3);
    return ok;
}

/* Remove a block that failed its checks, if it is still the file that was read (not a good
 * block another process renamed into place meanwhile), and take it from the count: one
 * short step under the lock. */
static void drop_block(struct s3f__cache *c, const char *hex, int d3, const char *name,
                       const struct stat *read_sb) {
    struct s3f__cache_counts k;
    lock_take(c);
    counts_read(c, &k);
    struct stat cur;
    if (fstatat(d3, name, &cur, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(cur.st_mode) &&
        cur.st_ino == read_sb->st_ino && cur.st_dev == read_sb->st_dev &&
        unlinkat(d3, name, 0) == 0)
        slot_add(c, &k, slot_of(hex), -(int64_t)cur.st_size);
    lock_drop(c);
}

bool s3f__cache_get(struct s3f__cache_object *o, uint64_t index, void *dst) {
    struct s3f__cache *c = o->cache;
    uint64_t len = s3f__cache_block_len(o, index);
    char name[24];
    snprintf(name, sizeof(name), "%" PRIu64, index);
    int d3 = obj_dir(c, o->hex, false, NULL);
    int fd = d3 < 0 ? -1 : openat(d3, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        if (fd >= 0) {
            cache_error(c, "%s/%s is not a regular file: left alone", o->dir, name);
        } else if (e == ELOOP || e == ENOTDIR) {
            cache_error(c, "%s/%s: a symbolic link or a file where the cache keeps directories "
                           "or blocks: left alone",
                        o->dir, name);
        } else if (e != ENOENT) {
            cache_error(c, "cannot open %s/%s: %s", o->dir, name, strerror(e));
        }
        if (fd >= 0)
            close(fd);
        if (d3 >= 0)
            close(d3);
        count(&c->n.misses, 1);
        return false;
    }
    size_t bl = strlen(o->bucket), kl = strlen(o->key), el = strlen(o->etag);
    size_t hlen = HDR_FIXED + bl + kl + el;
    char *head = malloc(hlen);
    const char *why = NULL;
    uint32_t crc = 0;
    struct s3f__cache_block_id want = {o->bucket, o->key, o->etag, o->size,
                                       index * c->block_bytes, len};
    if (!head) {
        why = NULL;
    } else if (read_full(fd, head, (size_t)sb.st_size < hlen ? (size_t)sb.st_size : hlen)) {
        why = "short header";
    } else if ((why = s3f__cache_header_check(
                    head, (size_t)sb.st_size < hlen ? (size_t)sb.st_size : hlen,
                    (uint64_t)sb.st_size, &want, &crc))) {
    } else if (read_full(fd, dst, (size_t)len) != 0) {
        why = "short data";
    } else if (s3f__crc32c(0, dst, (size_t)len) != crc) {
        why = "CRC32C of the data does not match";
    }
    free(head);
    if (why || !head) {
        close(fd);
        if (why) {
            cache_error(c, "block %s/%s dropped: %s", o->dir, name, why);
            drop_block(c, o->hex, d3, name, &sb);
        }
        close(d3);
        count(&c->n.misses, 1);
        return false;
    }
    /* LRU: the block's mtime is its last use (touched at most once a second) */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (now.tv_sec - sb.st_mtim.tv_sec >= 1) {
        struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
        futimens(fd, ts);
    }
    close(fd);
    close(d3);
    count(&c->n.hits, 1);
    count(&c->n.hit_bytes, len);
    return true;
}

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
    count(&c->n.dirs_listed, 1);
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
        hex2(slot, top);
        int d2 = subdir(c->v1_fd, top, false);
        if (d2 < 0) {
            stale[slot] = true; /* counted bytes in a directory that is not there */
            continue;
        }
        char obj[1][65];
        if (!sample_names(c, d2, is_obj_name, obj, 1, NULL)) {
            stale[slot] = true;
            close(d2);
            continue;
        }
        int d3 = subdir(d2, obj[0], false);
        if (d3 < 0) {
            stale[slot] = true; /* a link or a file in its place: its bytes are not ours */
            close(d2);
            continue;
        }
        char names[SAMPLE_BLOCKS][65], tmps[4][65];
        size_t entries = 0;
        size_t nb = sample_names(c, d3, is_block_name, names, SAMPLE_BLOCKS, &entries);
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
    fs_space(c, &free_bytes, &floor);
    return total > target || free_bytes < floor + slack;
}

/* One eviction step: sample without the lock, then unlink the oldest quarter of the sample
 * (at least one) that is unchanged since, while over the bound, under one short hold of
 * the lock. Returns false when it made no progress: the sample found no block at all and
 * no count went down (neither a stale directory's, recounted, nor by the recounts below). */
static bool evict_step(struct s3f__cache *c, uint64_t need) {
    struct s3f__cache_counts k;
    counts_valid_locked(c, &k);
    lock_drop(c);
    struct cand pool[POOL];
    bool stale[S3F__CACHE_SLOTS] = {false};
    size_t n = sample(c, &k, pool, stale);
    counts_valid_locked(c, &k);
    uint64_t before = s3f__cache_counts_total(&k);
    for (unsigned i = 0; i < S3F__CACHE_SLOTS; i++) {
        if (stale[i]) { /* a short step: that one directory */
            k.bytes[i] = recount(c, i);
            slot_write(c, &k, i, k.bytes[i]);
        }
    }
    size_t quota = n / 4 ? n / 4 : 1;
    uint64_t evicted = 0;
    for (size_t i = 0; i < n && quota && over(c, s3f__cache_counts_total(&k), need); i++) {
        struct cand *p = &pool[i];
        int d2 = -1;
        int d3 = obj_dir(c, p->obj, false, &d2);
        if (d3 < 0)
            continue;
        struct stat sb;
        if (fstatat(d3, p->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
            sb.st_ino == p->ino && sb.st_mtim.tv_sec == p->mtime.tv_sec &&
            sb.st_mtim.tv_nsec == p->mtime.tv_nsec && unlinkat(d3, p->name, 0) == 0) {
            slot_add(c, &k, p->slot, -(int64_t)sb.st_size);
            evicted += (uint64_t)sb.st_size;
            quota--;
            unlinkat(d2, p->obj, AT_REMOVEDIR); /* fails while other blocks remain */
        }
        close(d3);
        close(d2);
    }
    uint64_t total = s3f__cache_counts_total(&k);
    lock_drop(c);
    count(&c->n.evicted_bytes, evicted);
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
        counts_valid_locked(c, &cur);
        slot_write(c, &cur, i, recount(c, i));
        lock_drop(c);
    }
    counts_valid_locked(c, &k);
    now_total = s3f__cache_counts_total(&k);
    lock_drop(c);
    return now_total < total;
}

/* ---- insert (writer thread) ------------------------------------------------------------ */

static void no_room(struct s3f__cache *c) {
    if (__atomic_exchange_n(&c->warned_room, 1, __ATOMIC_RELAXED))
        return;
    uint64_t free_bytes, floor;
    fs_space(c, &free_bytes, &floor);
    s3f__log(c->logger, S3F_LOG_WARN,
             "cache %s: no room for new blocks (%" PRIu64 " bytes free on its file system, "
             "%" PRIu64 " to be left free; bound %" PRIu64 " bytes): reads go to S3 "
             "(logged once)",
             c->dir, free_bytes, floor, c->max_bytes);
}

/* The temporary file of a block, written whole; its name in tmp. -1: not written. */
static int write_tmp(struct s3f__cache *c, const struct job *j, int *d3_out, char *tmp,
                     size_t tmp_len) {
    struct hdr h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.hdr_len = (uint32_t)(HDR_FIXED + j->bl + j->kl + j->el);
    h.object_size = j->object_size;
    h.offset = j->offset;
    h.length = j->len;
    const char *data = j->names + j->bl + j->kl + j->el;
    h.crc32c = s3f__crc32c(0, data, (size_t)j->len);
    h.bucket_len = (uint16_t)j->bl;
    h.key_len = j->kl;
    h.etag_len = (uint16_t)j->el;
    uint64_t seq = __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
    snprintf(tmp, tmp_len, ".tmp.%ld.%" PRIu64, (long)getpid(), seq);
    int fd = -1, d3 = -1, e = 0;
    for (int tries = 0; tries < 3 && fd < 0; tries++) {
        /* an evictor may remove the object directory between our mkdir and open: retry */
        d3 = obj_dir(c, j->hex, true, NULL);
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
            cache_error(c, "%s/%.2s/%s: a symbolic link or a file where the cache keeps its "
                           "directories: left alone, block not inserted",
                        c->root, j->hex, j->hex);
        else
            cache_error(c, "cannot create a block in %s/%.2s/%s: %s", c->root, j->hex, j->hex,
                        strerror(e));
        return -1;
    }
    if (write_full(fd, &h, sizeof(h)) || write_full(fd, j->names, j->bl + j->kl + j->el) ||
        write_full(fd, data, (size_t)j->len))
        e = errno ? errno : EIO;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlinkat(d3, tmp, 0);
        close(d3);
        cache_error(c, "cannot write %s/%.2s/%s/%s: %s", c->root, j->hex, j->hex, tmp,
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
    unsigned slot = slot_of(j->hex);
    bool placed = false, room = false;
    int e = 0;
    for (int round = 0; round < INSERT_ROUNDS && !placed; round++) {
        struct s3f__cache_counts k;
        counts_valid_locked(c, &k);
        uint64_t total = s3f__cache_counts_total(&k), free_bytes, floor;
        fs_space(c, &free_bytes, &floor);
        if (total + fsize <= c->max_bytes && free_bytes >= floor) {
            room = true;
            struct stat old;
            bool replaced = fstatat(d3, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
            if (replaced && !S_ISREG(old.st_mode)) {
                e = EEXIST; /* not ours: left alone */
            } else if (renameat(d3, tmp, d3, name) == 0) {
                placed = true;
                slot_add(c, &k, slot, (int64_t)fsize - (replaced ? (int64_t)old.st_size : 0));
            } else {
                e = errno; /* the directory went with an eviction of its last block */
            }
            lock_drop(c);
            break;
        }
        lock_drop(c);
        if (!evict_step(c, fsize))
            break; /* nothing left to evict */
    }
    if (!placed) {
        unlinkat(d3, tmp, 0);
        if (!room)
            no_room(c);
        else if (e == EEXIST)
            cache_error(c, "%s/%.2s/%s/%s is not a regular file: left alone, block not "
                           "inserted",
                        c->root, j->hex, j->hex, name);
        else if (e)
            cache_error(c, "cannot rename into %s/%.2s/%s/%s: %s", c->root, j->hex, j->hex,
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
    count(inserted ? &c->n.inserted_bytes : &c->n.insert_dropped_bytes, len);
    pthread_cond_broadcast(&c->q_idle);
}

/* Whether block `index` of object `hex` is queued or being written now (q_lock held): a
 * second put of it is not queued again. */
static bool on_its_way(const struct s3f__cache *c, const char *hex, uint64_t index) {
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
    if (!len)
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
        count(&c->n.insert_dropped_bytes, len);
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

static void *writer_main(void *arg) {
    struct s3f__cache *c = arg;
    /* a lost or corrupted count is recounted first, one directory per step */
    struct s3f__cache_counts k;
    counts_valid_locked(c, &k);
    lock_drop(c);
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
