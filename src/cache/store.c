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
 * writes the blocks, evicts and recounts. Counters are atomics.
 *
 * This file owns the format, the names, the root, open and free, and the reads;
 * store_count.c the lock and the count; store_writer.c the writer thread, inserts and
 * eviction (see store_internal.h). */
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

#include "cache/store_internal.h"

void s3f__store_count(uint64_t *counter, uint64_t n) {
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

/* An error of the cache: counted, and the first one logged (WARN) with its cause. */
void S3F_PRINTF(2, 3) s3f__store_error(struct s3f__cache *c, const char *fmt, ...) {
    s3f__store_count(&c->n.errors, 1);
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

void s3f__cache_header_make(void *out, uint64_t object_size, uint64_t offset, uint64_t length,
                            size_t bucket_len, size_t key_len, size_t etag_len,
                            uint32_t crc32c) {
    struct hdr h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.hdr_len = (uint32_t)(HDR_FIXED + bucket_len + key_len + etag_len);
    h.object_size = object_size;
    h.offset = offset;
    h.length = length;
    h.crc32c = crc32c;
    h.bucket_len = (uint16_t)bucket_len;
    h.key_len = (uint32_t)key_len;
    h.etag_len = (uint16_t)etag_len;
    memcpy(out, &h, sizeof(h));
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
int s3f__store_subdir(int at, const char *name, bool create) {
    int fd = openat(at, name, DIR_FLAGS);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(at, name, 0700) != 0 && errno != EEXIST)
            return -1;
        fd = openat(at, name, DIR_FLAGS);
    }
    return fd;
}

void s3f__store_hex2(unsigned slot, char out[3]) {
    static const char digits[] = "0123456789abcdef";
    out[0] = digits[(slot >> 4) & 15];
    out[1] = digits[slot & 15];
    out[2] = '\0';
}

unsigned s3f__store_slot_of(const char *hex) {
    unsigned v = 0;
    for (int i = 0; i < 2; i++) {
        char ch = hex[i];
        v = v * 16 + (unsigned)(ch >= 'a' ? ch - 'a' + 10 : ch - '0');
    }
    return v & 255;
}

/* The object directory of `hex` (v1/<2>/<64>), opened; `parent` (optional) gets the first
 * level's handle (the caller closes it). -1 with errno. */
int s3f__store_obj_dir(struct s3f__cache *c, const char *hex, bool create, int *parent) {
    char top[3] = {hex[0], hex[1], '\0'};
    int d2 = s3f__store_subdir(c->v1_fd, top, create);
    if (d2 < 0)
        return -1;
    int d3 = s3f__store_subdir(d2, hex, create);
    int e = errno;
    if (parent && d3 >= 0)
        *parent = d2;
    else
        close(d2);
    errno = e;
    return d3;
}

bool s3f__store_is_block_name(const char *s) {
    if (!*s || strlen(s) > 20)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

bool s3f__store_is_obj_name(const char *s) {
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
    *out = s3f__store_subdir(at, name, true);
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
    int fd = s3f__store_subdir(AT_FDCWD, dir, true); /* the path above it is the user's: followed */
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

/* ---- open and free ----------------------------------------------------------------------- */


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
    if (pthread_create(&c->thread, NULL, s3f__store_writer_main, c) != 0) {
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
    s3f__store_count(&c->n.misses, 1);
}

/* ---- objects -------------------------------------------------------------------------- */

enum s3f_status s3f__cache_object_init(struct s3f__cache_object *o, struct s3f__cache *c,
                                       const char *bucket, const char *key, const char *etag,
                                       uint64_t size) {
    memset(o, 0, sizeof(*o));
    if (!c) { /* the shared cache alone (xz.c): the names, no directory */
        o->bucket = s3f__strdup(bucket);
        o->key = s3f__strdup(key);
        o->etag = s3f__strdup(etag);
        if (!o->bucket || !o->key || !o->etag || strlen(bucket) > UINT16_MAX ||
            strlen(etag) > UINT16_MAX) {
            s3f__cache_object_cleanup(o);
            return S3F_ERR_NO_MEMORY;
        }
        o->block_bytes = S3F__CACHE_BLOCK_DEFAULT;
        o->size = size;
        o->scratch_block = UINT64_MAX;
        return S3F_OK;
    }
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
    o->block_bytes = c->block_bytes;
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
    uint64_t bs = o->block_bytes;
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

int s3f__store_write_full(int fd, const void *buf, size_t len) {
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
    if (!o->cache)
        return false;
    int d3 = s3f__store_obj_dir(o->cache, o->hex, false, NULL);
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
    s3f__store_lock_take(c);
    s3f__store_counts_read(c, &k);
    struct stat cur;
    if (fstatat(d3, name, &cur, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(cur.st_mode) &&
        cur.st_ino == read_sb->st_ino && cur.st_dev == read_sb->st_dev &&
        unlinkat(d3, name, 0) == 0)
        s3f__store_slot_add(c, &k, s3f__store_slot_of(hex), -(int64_t)cur.st_size);
    s3f__store_lock_drop(c);
}

bool s3f__cache_get(struct s3f__cache_object *o, uint64_t index, void *dst) {
    struct s3f__cache *c = o->cache;
    if (!c)
        return false;
    uint64_t len = s3f__cache_block_len(o, index);
    char name[24];
    snprintf(name, sizeof(name), "%" PRIu64, index);
    int d3 = s3f__store_obj_dir(c, o->hex, false, NULL);
    int fd = d3 < 0 ? -1 : openat(d3, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        if (fd >= 0) {
            s3f__store_error(c, "%s/%s is not a regular file: left alone", o->dir, name);
        } else if (e == ELOOP || e == ENOTDIR) {
            s3f__store_error(c, "%s/%s: a symbolic link or a file where the cache keeps directories "
                           "or blocks: left alone",
                        o->dir, name);
        } else if (e != ENOENT) {
            s3f__store_error(c, "cannot open %s/%s: %s", o->dir, name, strerror(e));
        }
        if (fd >= 0)
            close(fd);
        if (d3 >= 0)
            close(d3);
        s3f__store_count(&c->n.misses, 1);
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
            s3f__store_error(c, "block %s/%s dropped: %s", o->dir, name, why);
            drop_block(c, o->hex, d3, name, &sb);
        }
        close(d3);
        s3f__store_count(&c->n.misses, 1);
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
    s3f__store_count(&c->n.hits, 1);
    s3f__store_count(&c->n.hit_bytes, len);
    return true;
}
