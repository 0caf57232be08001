/* The block store of the node-local cache: one file per block, its format, the shared
 * size accounting and LRU eviction. docs/CACHE.md describes the layout and the choices.
 *
 * Layout under the cache directory:
 *   v1/lock                      flock'd by the process that inserts or evicts; holds the
 *                                bytes of all block files (8 bytes, host order)
 *   v1/<h[0:2]>/<h>/<index>      a block, h = hex SHA-256 of endpoint \0 bucket \0 key \0
 *                                ETag \0 size \0 block size; written as
 *                                v1/<..>/<h>/.tmp.<pid>.<n> and renamed into place
 * A block file: a 56-byte header (magic "S3FCBLK1", version, header length, object size,
 * offset, length, CRC32C of the data, lengths of bucket, key and ETag), the bucket, key and
 * ETag, then the data. A reader opens the file, checks every header field against what it
 * asks and the CRC32C of the data; anything else unlinks the file and is a miss.
 *
 * Processes: a rename is atomic, so a reader sees a whole old file or a whole new one; an
 * unlinked file stays readable through a descriptor already open. Renames into place and
 * evictions run under the flock of v1/lock (and a mutex: flock does not exclude threads of
 * one process sharing its descriptor), so the byte count in v1/lock is exact for what was
 * inserted; files removed by a reader as corrupt are counted until the next eviction, which
 * scans the whole tree and writes the true total back.
 *
 * Threads: everything here may be called from any thread; counters are atomics. */
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
#define VERSION 1u
#define HDR_FIXED 56u
#define TMP_STALE_S 600 /* temporary files older than this are a dead writer's */

struct s3f__cache {
    char *dir;                    /* as given */
    char *root;                   /* <dir>/v1 */
    char *scope;                  /* the endpoint, hashed into every object's name */
    uint64_t max_bytes, min_free_bytes, block_bytes;
    bool free_from_fs;            /* min_free_bytes: 5% of the file system, computed each time */
    const struct s3f__logger *logger;
    int lock_fd;
    pthread_mutex_t lock;         /* with the flock of lock_fd: inserts and evictions */
    int warned;                   /* atomic: the first error was logged */
    int warned_room;              /* atomic: "no room" was logged */
    uint64_t seq;                 /* atomic: temporary file names */
    struct s3f__cache_counters n; /* atomics */
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

static void lock_take(struct s3f__cache *c);
static void lock_drop(struct s3f__cache *c);
static void usage_write(struct s3f__cache *c, uint64_t v);

static int mkdir_one(const char *p) {
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
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
    struct s3f__cache *c = calloc(1, sizeof(*c));
    if (!c)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL, "out of memory");
    c->lock_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    c->block_bytes = bs;
    c->max_bytes = o->max_bytes ? o->max_bytes : S3F__CACHE_MAX_DEFAULT;
    c->min_free_bytes = o->min_free_bytes;
    c->free_from_fs = o->min_free_bytes == 0;
    c->logger = o->logger;
    c->dir = s3f__strdup(o->dir);
    c->scope = s3f__strdup(o->scope ? o->scope : "");
    size_t n = strlen(o->dir) + 8;
    c->root = malloc(n);
    char *lockp = malloc(n + 8);
    enum s3f_status st = S3F_OK;
    if (!c->dir || !c->scope || !c->root || !lockp) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "cache", NULL, "out of memory");
        goto out;
    }
    snprintf(c->root, n, "%s/v1", o->dir);
    snprintf(lockp, n + 8, "%s/lock", c->root);
    if (mkdir_one(c->dir) || mkdir_one(c->root)) {
        st = s3f__error_set(err, S3F_ERR_IO, "cache", o->dir, "cannot create %s: %s", c->root,
                            strerror(errno));
        goto out;
    }
    c->lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (c->lock_fd < 0) {
        st = s3f__error_set(err, S3F_ERR_IO, "cache", o->dir, "cannot open %s: %s", lockp,
                            strerror(errno));
        goto out;
    }
    /* a new (or emptied) count next to blocks already there: count them once */
    lock_take(c);
    struct stat sb;
    if (fstat(c->lock_fd, &sb) == 0 && sb.st_size < (off_t)sizeof(uint64_t))
        usage_write(c, s3f__cache_scan_bytes(c));
    lock_drop(c);
out:
    free(lockp);
    if (st)
        s3f__cache_free(c);
    else
        *out = c;
    return st;
}

void s3f__cache_free(struct s3f__cache *c) {
    if (!c)
        return;
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    pthread_mutex_destroy(&c->lock);
    free(c->dir);
    free(c->scope);
    free(c->root);
    free(c);
}

uint64_t s3f__cache_block_bytes(const struct s3f__cache *c) {
    return c->block_bytes;
}

void s3f__cache_counters(struct s3f__cache *c, struct s3f__cache_counters *out) {
    out->hits = __atomic_load_n(&c->n.hits, __ATOMIC_RELAXED);
    out->misses = __atomic_load_n(&c->n.misses, __ATOMIC_RELAXED);
    out->hit_bytes = __atomic_load_n(&c->n.hit_bytes, __ATOMIC_RELAXED);
    out->inserted_bytes = __atomic_load_n(&c->n.inserted_bytes, __ATOMIC_RELAXED);
    out->errors = __atomic_load_n(&c->n.errors, __ATOMIC_RELAXED);
    out->evicted_bytes = __atomic_load_n(&c->n.evicted_bytes, __ATOMIC_RELAXED);
}

void s3f__cache_count_miss(struct s3f__cache *c) {
    count(&c->n.misses, 1);
}

/* ---- objects --------------------------------------------------------------------------- */

enum s3f_status s3f__cache_object_init(struct s3f__cache_object *o, struct s3f__cache *c,
                                       const char *bucket, const char *key, const char *etag,
                                       uint64_t size) {
    memset(o, 0, sizeof(*o));
    struct s3f__buf id;
    s3f__buf_init(&id, 0);
    char num[48];
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
    char hex[65];
    if (!st && s3f__sha256_hex(id.data, id.len, hex))
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
    snprintf(o->dir, n, "%s/%.2s/%s", c->root, hex, hex);
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

static void block_path(const struct s3f__cache_object *o, uint64_t index, char *buf,
                       size_t n) {
    snprintf(buf, n, "%s/%" PRIu64, o->dir, index);
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
    char path[4200];
    block_path(o, index, path, sizeof(path));
    return access(path, F_OK) == 0;
}

bool s3f__cache_get(struct s3f__cache_object *o, uint64_t index, void *dst) {
    struct s3f__cache *c = o->cache;
    uint64_t len = s3f__cache_block_len(o, index);
    char path[4200];
    block_path(o, index, path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            cache_error(c, "cannot open %s: %s", path, strerror(errno));
        count(&c->n.misses, 1);
        return false;
    }
    struct hdr h;
    struct stat sb;
    const char *why = NULL;
    size_t bl = strlen(o->bucket), kl = strlen(o->key), el = strlen(o->etag);
    char *names = NULL;
    if (fstat(fd, &sb) != 0 || read_full(fd, &h, sizeof(h)) != 0) {
        why = "short header";
    } else if (memcmp(h.magic, MAGIC, 8) != 0 || h.version != VERSION) {
        why = "not a block of this version";
    } else if (h.bucket_len != bl || h.key_len != kl || h.etag_len != el ||
               h.hdr_len != HDR_FIXED + bl + kl + el || h.object_size != o->size ||
               h.offset != index * c->block_bytes || h.length != len ||
               (uint64_t)sb.st_size != h.hdr_len + len) {
        why = "header does not match";
    } else if (!(names = malloc(bl + kl + el + 1))) {
        why = NULL;
        close(fd);
        count(&c->n.misses, 1);
        return false;
    } else if (read_full(fd, names, bl + kl + el) != 0 || memcmp(names, o->bucket, bl) != 0 ||
               memcmp(names + bl, o->key, kl) != 0 || memcmp(names + bl + kl, o->etag, el) != 0) {
        why = "names do not match";
    } else if (read_full(fd, dst, (size_t)len) != 0) {
        why = "short data";
    } else if (s3f__crc32c(0, dst, (size_t)len) != h.crc32c) {
        why = "CRC32C of the data does not match";
    }
    free(names);
    if (why) {
        close(fd);
        cache_error(c, "block %s dropped: %s", path, why);
        unlink(path);
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
    count(&c->n.hits, 1);
    count(&c->n.hit_bytes, len);
    return true;
}

/* ---- accounting and eviction (under the lock) ------------------------------------------ */

static void lock_take(struct s3f__cache *c) {
    pthread_mutex_lock(&c->lock);
    while (flock(c->lock_fd, LOCK_EX) != 0 && errno == EINTR)
        ;
}

static void lock_drop(struct s3f__cache *c) {
    flock(c->lock_fd, LOCK_UN);
    pthread_mutex_unlock(&c->lock);
}

static uint64_t usage_read(struct s3f__cache *c) {
    uint64_t v = 0;
    if (pread(c->lock_fd, &v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = 0;
    return v;
}

static void usage_write(struct s3f__cache *c, uint64_t v) {
    if (pwrite(c->lock_fd, &v, sizeof(v), 0) != (ssize_t)sizeof(v))
        cache_error(c, "cannot write the byte count: %s", strerror(errno));
}

/* Free bytes on the cache's file system and the floor to keep. */
static void fs_space(struct s3f__cache *c, uint64_t *free_bytes, uint64_t *floor) {
    struct statvfs v;
    if (statvfs(c->root, &v) != 0) {
        *free_bytes = UINT64_MAX;
        *floor = 0;
        return;
    }
    *free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
    *floor = c->free_from_fs ? (uint64_t)v.f_blocks * v.f_frsize / 100 *
                                   S3F__CACHE_FREE_PERCENT_DEFAULT
                             : c->min_free_bytes;
}

struct entry {
    char *path;
    uint64_t size;
    struct timespec mtime;
};

struct scan {
    struct entry *e;
    size_t n, cap;
    uint64_t total;
    bool oom;
};

static void scan_add(struct scan *s, const char *path, const struct stat *sb) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        struct entry *e = realloc(s->e, cap * sizeof(*e));
        if (!e) {
            s->oom = true;
            return;
        }
        s->e = e;
        s->cap = cap;
    }
    char *p = s3f__strdup(path);
    if (!p) {
        s->oom = true;
        return;
    }
    s->e[s->n++] = (struct entry){p, (uint64_t)sb->st_size, sb->st_mtim};
    s->total += (uint64_t)sb->st_size;
}

/* Every block file (and stale temporary files removed). `collect`: keep the entries. */
static void scan_tree(struct s3f__cache *c, struct scan *s, bool collect) {
    DIR *top = opendir(c->root);
    if (!top)
        return;
    struct dirent *d1;
    char p1[4200], p2[4200], p3[4300];
    time_t now = time(NULL);
    while ((d1 = readdir(top))) {
        if (d1->d_name[0] == '.' || strlen(d1->d_name) != 2)
            continue;
        snprintf(p1, sizeof(p1), "%s/%s", c->root, d1->d_name);
        DIR *mid = opendir(p1);
        if (!mid)
            continue;
        struct dirent *d2;
        while ((d2 = readdir(mid))) {
            if (d2->d_name[0] == '.')
                continue;
            if (snprintf(p2, sizeof(p2), "%s/%s", p1, d2->d_name) >= (int)sizeof(p2))
                continue;
            DIR *obj = opendir(p2);
            if (!obj)
                continue;
            struct dirent *d3;
            bool any = false;
            while ((d3 = readdir(obj))) {
                if (!strcmp(d3->d_name, ".") || !strcmp(d3->d_name, ".."))
                    continue;
                if (snprintf(p3, sizeof(p3), "%s/%s", p2, d3->d_name) >= (int)sizeof(p3))
                    continue;
                struct stat sb;
                if (lstat(p3, &sb) != 0 || !S_ISREG(sb.st_mode))
                    continue;
                any = true;
                if (d3->d_name[0] == '.') {
                    if (now - sb.st_mtim.tv_sec > TMP_STALE_S)
                        unlink(p3);
                    continue;
                }
                if (collect)
                    scan_add(s, p3, &sb);
                else
                    s->total += (uint64_t)sb.st_size;
            }
            closedir(obj);
            if (!any && collect)
                rmdir(p2); /* an object with no block left (a racing insert retries) */
        }
        closedir(mid);
    }
    closedir(top);
}

static int by_age(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->path, y->path);
}

uint64_t s3f__cache_scan_bytes(struct s3f__cache *c) {
    struct scan s = {0};
    scan_tree(c, &s, false);
    return s.total;
}

/* Make room for `need` more bytes (lock held): evict oldest first until the files take at
 * most max_bytes - need (less a sixteenth, so that evictions are not one per insert) and
 * the file system keeps its floor (the new block's temporary file, written already, is
 * counted in what is used). Returns the new total, or UINT64_MAX when no room can be
 * made. */
static uint64_t evict_locked(struct s3f__cache *c, uint64_t need) {
    struct scan s = {0};
    scan_tree(c, &s, true);
    uint64_t free_bytes, floor;
    fs_space(c, &free_bytes, &floor);
    uint64_t slack = c->max_bytes / 16;
    uint64_t target = c->max_bytes > need + slack ? c->max_bytes - need - slack : 0;
    uint64_t free_target = floor + slack; /* the new block's file is written already */
    if (!s.oom && s.n)
        qsort(s.e, s.n, sizeof(*s.e), by_age);
    uint64_t total = s.total, evicted = 0;
    for (size_t i = 0; i < s.n && (total > target || free_bytes < free_target); i++) {
        if (s.oom)
            break;
        if (unlink(s.e[i].path) == 0 || errno == ENOENT) {
            total -= s.e[i].size;
            evicted += s.e[i].size;
            if (free_bytes != UINT64_MAX)
                free_bytes += s.e[i].size;
            char *slash = strrchr(s.e[i].path, '/');
            if (slash) {
                *slash = '\0';
                rmdir(s.e[i].path); /* fails while other blocks remain */
            }
        }
    }
    for (size_t i = 0; i < s.n; i++)
        free(s.e[i].path);
    free(s.e);
    count(&c->n.evicted_bytes, evicted);
    usage_write(c, total);
    if (s.oom) {
        cache_error(c, "out of memory while scanning for eviction");
        return UINT64_MAX;
    }
    if (total + need > c->max_bytes || free_bytes < floor)
        return UINT64_MAX;
    return total;
}

/* ---- insert ---------------------------------------------------------------------------- */

static int make_dirs(const struct s3f__cache_object *o) {
    char p[4200];
    size_t n = strlen(o->cache->root) + 3;
    snprintf(p, sizeof(p), "%.*s", (int)n, o->dir);
    if (mkdir_one(p))
        return -1;
    return mkdir_one(o->dir);
}

void s3f__cache_put(struct s3f__cache_object *o, uint64_t index, const void *data) {
    struct s3f__cache *c = o->cache;
    uint64_t len = s3f__cache_block_len(o, index);
    if (!len)
        return;
    size_t bl = strlen(o->bucket), kl = strlen(o->key), el = strlen(o->etag);
    struct hdr h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.hdr_len = (uint32_t)(HDR_FIXED + bl + kl + el);
    h.object_size = o->size;
    h.offset = index * c->block_bytes;
    h.length = len;
    h.crc32c = s3f__crc32c(0, data, (size_t)len);
    h.bucket_len = (uint16_t)bl;
    h.key_len = (uint32_t)kl;
    h.etag_len = (uint16_t)el;
    uint64_t fsize = h.hdr_len + len;

    char tmp[4200], path[4200];
    uint64_t seq = __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof(tmp), "%s/.tmp.%ld.%" PRIu64, o->dir, (long)getpid(), seq);
    block_path(o, index, path, sizeof(path));
    int fd = -1, open_errno = 0;
    for (int tries = 0; tries < 3 && fd < 0; tries++) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        open_errno = fd < 0 ? errno : 0;
        if (open_errno != ENOENT)
            break;
        /* no directory yet, or an evictor removed it between our mkdir and open: retry */
        if (make_dirs(o) != 0) {
            open_errno = errno;
            break;
        }
    }
    if (fd < 0) {
        cache_error(c, "cannot create %s: %s", tmp, strerror(open_errno));
        return;
    }
    int e = 0;
    if (write_full(fd, &h, sizeof(h)) || write_full(fd, o->bucket, bl) ||
        write_full(fd, o->key, kl) || write_full(fd, o->etag, el) ||
        write_full(fd, data, (size_t)len))
        e = errno ? errno : EIO;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlink(tmp);
        cache_error(c, "cannot write %s: %s", tmp, strerror(e));
        return;
    }
    lock_take(c);
    uint64_t total = usage_read(c);
    uint64_t free_bytes, floor;
    fs_space(c, &free_bytes, &floor);
    if (total + fsize > c->max_bytes || free_bytes < floor)
        total = evict_locked(c, fsize);
    bool placed = false;
    if (total == UINT64_MAX && !__atomic_exchange_n(&c->warned_room, 1, __ATOMIC_RELAXED)) {
        fs_space(c, &free_bytes, &floor);
        s3f__log(c->logger, S3F_LOG_WARN,
                 "cache %s: no room for new blocks (%" PRIu64 " bytes free on its file system, "
                 "%" PRIu64 " to be left free; bound %" PRIu64 " bytes): reads go to S3 "
                 "(logged once)",
                 c->dir, free_bytes, floor, c->max_bytes);
    }
    if (total != UINT64_MAX) {
        struct stat old;
        bool replaced = stat(path, &old) == 0;
        if (rename(tmp, path) == 0) {
            placed = true;
            if (replaced)
                total = total > (uint64_t)old.st_size ? total - (uint64_t)old.st_size : 0;
            usage_write(c, total + fsize);
        } else {
            /* the directory went away with an eviction of its last block */
            e = errno;
        }
    }
    lock_drop(c);
    if (!placed) {
        unlink(tmp);
        if (e)
            cache_error(c, "cannot rename into %s: %s", path, strerror(e));
        return;
    }
    count(&c->n.inserted_bytes, len);
}
