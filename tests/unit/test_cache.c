/* The block cache's store (src/cache/store*.c) and its read path (io.c): insert and look
 * up, a corrupted block detected and removed, LRU eviction under the byte limit and the
 * free-space floor, several processes inserting and evicting at once, reads in blocks. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "s3flash/s3flash.h"
#include "testutil.h"

#define BS ((uint64_t)64 << 10)
#define HDR 56u

static char root[256];
static int dir_counter;
/* the cache's one WARN line goes to stderr: a failure shows its cause */
static const struct s3f__logger warn_log = {NULL, NULL, S3F_LOG_WARN};

static void new_dir(char *out, size_t n) {
    snprintf(out, n, "%s/c%d", root, dir_counter++);
}

static struct s3f__cache *open_cache(const char *dir, uint64_t max, uint64_t min_free) {
    struct s3f__cache_options o = {.dir = dir, .max_bytes = max, .min_free_bytes = min_free,
                                   .block_bytes = BS, .logger = &warn_log};
    struct s3f__cache *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__cache_open(&o, &c, &err), S3F_OK);
    return c;
}

/* An insert, written before it returns (s3f__cache_put only queues it). */
static void put_sync(struct s3f__cache_object *o, uint64_t b, const void *data) {
    s3f__cache_put(o, b, data);
    s3f__cache_flush(o->cache);
}

/* Deterministic content of block `b` of object `tag`. */
static void fill(char *p, uint64_t len, int tag, uint64_t b) {
    uint32_t x = (uint32_t)(tag * 2654435761u) ^ (uint32_t)(b * 40503u + 1);
    for (uint64_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (char)(x >> 16);
    }
}

static void block_file(const struct s3f__cache_object *o, uint64_t b, char *out, size_t n) {
    snprintf(out, n, "%s/%" PRIu64, o->dir, b);
}

static void test_roundtrip(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    struct s3f__cache *c = open_cache(dir, 0, 1);
    struct s3f__cache_object o, other;
    uint64_t size = 3 * BS + 1000; /* the last block is short */
    CHECK_INT(s3f__cache_object_init(&o, c, "bkt", "a/key", "\"etag1\"", size), S3F_OK);
    CHECK_INT(s3f__cache_object_init(&other, c, "bkt", "a/key", "\"etag2\"", size), S3F_OK);
    CHECK_INT(s3f__cache_block_len(&o, 3), 1000);
    CHECK_INT(s3f__cache_block_len(&o, 4), 0);
    char *want = malloc(BS), *got = malloc(BS);
    CHECK(!s3f__cache_get(&o, 0, got));
    for (uint64_t b = 0; b < 4; b++) {
        fill(want, s3f__cache_block_len(&o, b), 1, b);
        put_sync(&o, b, want);
    }
    for (uint64_t b = 0; b < 4; b++) {
        uint64_t len = s3f__cache_block_len(&o, b);
        fill(want, len, 1, b);
        memset(got, 0, BS);
        CHECK(s3f__cache_get(&o, b, got));
        CHECK(memcmp(want, got, len) == 0);
    }
    /* another ETag (the object was replaced) never sees these blocks */
    CHECK(!s3f__cache_get(&other, 0, got));
    CHECK(!s3f__cache_has(&other, 0));
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.hits, 4);
    CHECK_INT(n.misses, 2);
    CHECK_INT(n.inserted_bytes, size);
    CHECK_INT(n.hit_bytes, size);
    CHECK_INT(n.errors, 0);
    uint64_t file_bytes = size + 4 * (HDR + 3 + 5 + 7);
    CHECK_INT(s3f__cache_scan_bytes(c), file_bytes);
    s3f__cache_object_cleanup(&o);
    s3f__cache_object_cleanup(&other);
    s3f__cache_free(c);

    /* a new cache on the same directory (a restart) finds them */
    c = open_cache(dir, 0, 1);
    CHECK_INT(s3f__cache_object_init(&o, c, "bkt", "a/key", "\"etag1\"", size), S3F_OK);
    fill(want, BS, 1, 2);
    CHECK(s3f__cache_get(&o, 2, got));
    CHECK(memcmp(want, got, BS) == 0);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    free(want);
    free(got);
}

static void flip_byte(const char *path, off_t at) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char ch;
    CHECK(pread(fd, &ch, 1, at) == 1);
    ch ^= 0x5a;
    CHECK(pwrite(fd, &ch, 1, at) == 1);
    close(fd);
}

static void test_corruption(void) {
    char dir[300], path[600];
    new_dir(dir, sizeof(dir));
    struct s3f__cache *c = open_cache(dir, 0, 1);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "bkt", "k", "\"e\"", 2 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 2, 0);
    put_sync(&o, 0, buf);
    put_sync(&o, 1, buf);
    /* a flipped data byte: the CRC32C catches it, the file goes, it is a miss */
    block_file(&o, 0, path, sizeof(path));
    flip_byte(path, HDR + 1 + 1 + 3 + 5000);
    CHECK(!s3f__cache_get(&o, 0, buf));
    CHECK(access(path, F_OK) != 0);
    /* a header that names another object (a file copied over): a miss too */
    block_file(&o, 1, path, sizeof(path));
    flip_byte(path, HDR + 1); /* the key's byte */
    CHECK(!s3f__cache_get(&o, 1, buf));
    CHECK(access(path, F_OK) != 0);
    /* a truncated file */
    fill(buf, BS, 2, 0);
    put_sync(&o, 0, buf);
    block_file(&o, 0, path, sizeof(path));
    CHECK(truncate(path, HDR + 100) == 0);
    CHECK(!s3f__cache_get(&o, 0, buf));
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.hits, 0);
    CHECK_INT(n.misses, 3);
    CHECK_INT(n.errors, 3);
    /* inserted again, it is served again */
    fill(buf, BS, 2, 0);
    put_sync(&o, 0, buf);
    char *got = malloc(BS);
    CHECK(s3f__cache_get(&o, 0, got));
    CHECK(memcmp(buf, got, BS) == 0);
    free(got);
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

static void set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static void test_eviction_lru(void) {
    char dir[300], path[600];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS; /* one block file */
    uint64_t max = 8 * fsz;
    struct s3f__cache *c = open_cache(dir, max, 1);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    char *buf = malloc(BS);
    for (uint64_t b = 0; b < 8; b++) {
        fill(buf, BS, 3, b);
        put_sync(&o, b, buf);
        block_file(&o, b, path, sizeof(path));
        set_mtime(path, 1000000 + (time_t)b * 10); /* block 0 oldest */
    }
    CHECK_INT(s3f__cache_scan_bytes(c), max);
    /* a hit makes block 0 the most recently used */
    CHECK(s3f__cache_get(&o, 0, buf));
    /* three more: the oldest are evicted first (1, 2, ...), block 0 stays */
    for (uint64_t b = 8; b < 11; b++) {
        fill(buf, BS, 3, b);
        put_sync(&o, b, buf);
        CHECK(s3f__cache_scan_bytes(c) <= max);
    }
    CHECK(s3f__cache_has(&o, 0));
    CHECK(!s3f__cache_has(&o, 1));
    CHECK(!s3f__cache_has(&o, 2));
    CHECK(s3f__cache_has(&o, 7));
    for (uint64_t b = 8; b < 11; b++)
        CHECK(s3f__cache_has(&o, b));
    /* many more: never above the limit */
    for (uint64_t b = 11; b < 60; b++) {
        fill(buf, BS, 3, b);
        put_sync(&o, b, buf);
        CHECK(s3f__cache_scan_bytes(c) <= max);
    }
    CHECK(s3f__cache_has(&o, 59));
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK(n.evicted_bytes >= 51 * fsz);

    /* the free-space floor: a floor above what the file system has free evicts all and
     * inserts nothing */
    struct s3f__cache *tight = open_cache(dir, max, UINT64_MAX / 4);
    struct s3f__cache_object t;
    CHECK_INT(s3f__cache_object_init(&t, tight, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    put_sync(&t, 99, buf);
    CHECK(!s3f__cache_has(&t, 99));
    CHECK_INT(s3f__cache_scan_bytes(tight), 0);
    s3f__cache_object_cleanup(&t);
    s3f__cache_free(tight);
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

/* A cache on `dir` holding blocks 0..n-1 of object b/k (100 blocks), all with the content
 * of `tag`'s block 0, which *buf (malloc'ed) keeps. */
static struct s3f__cache *with_blocks(const char *dir, uint64_t max, int tag, uint64_t n,
                                      struct s3f__cache_object *o, char **buf) {
    struct s3f__cache *c = open_cache(dir, max, 1);
    CHECK_INT(s3f__cache_object_init(o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    *buf = malloc(BS);
    fill(*buf, BS, tag, 0);
    for (uint64_t b = 0; b < n; b++)
        put_sync(o, b, *buf);
    return c;
}

/* The shared byte count lost (v1/lock removed): the next open counts the blocks there, so
 * the bound holds for the blocks it did not see inserted. */
static void test_count_rebuilt(void) {
    char dir[300], lockp[400];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS;
    struct s3f__cache_object o;
    char *buf = NULL;
    struct s3f__cache *c = with_blocks(dir, 0, 4, 10, &o, &buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    snprintf(lockp, sizeof(lockp), "%s/v1/lock", dir);
    CHECK(unlink(lockp) == 0);
    c = open_cache(dir, 6 * fsz, 1);
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    put_sync(&o, 50, buf);
    CHECK(s3f__cache_scan_bytes(c) <= 6 * fsz);
    CHECK(s3f__cache_has(&o, 50));
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    free(buf);
}

/* Several processes on one directory insert and read the same blocks while eviction runs
 * all the time: every hit must have the right bytes, and the total stays under the limit. */
static void test_processes(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 2 + 3 + BS;
    uint64_t max = 12 * fsz;
    /* creates the directory; freed (its writer thread stopped) before the fork */
    s3f__cache_free(open_cache(dir, max, 1));
    enum { PROCS = 4, ROUNDS = 300 };
    pid_t pids[PROCS];
    fflush(stdout); /* not printed again by the children */
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            struct s3f__cache_options opt = {.dir = dir, .max_bytes = max, .min_free_bytes = 1,
                                             .block_bytes = BS, .logger = &warn_log};
            struct s3f__cache *c = NULL;
            if (s3f__cache_open(&opt, &c, NULL))
                _exit(2);
            struct s3f__cache_object o[2];
            s3f__cache_object_init(&o[0], c, "b", "k0", "\"e\"", 32 * BS);
            s3f__cache_object_init(&o[1], c, "b", "k1", "\"e\"", 32 * BS);
            char *buf = malloc(BS), *want = malloc(BS);
            unsigned seed = (unsigned)getpid();
            int bad = 0;
            for (int i = 0; i < ROUNDS; i++) {
                int k = rand_r(&seed) % 2;
                uint64_t b = (uint64_t)(rand_r(&seed) % 32);
                fill(want, BS, 10 + k, b);
                if (s3f__cache_get(&o[k], b, buf)) {
                    if (memcmp(buf, want, BS) != 0)
                        bad++;
                } else {
                    s3f__cache_put(&o[k], b, want);
                }
            }
            struct s3f__cache_counters n;
            s3f__cache_counters(c, &n);
            _exit(bad ? 1 : n.errors ? 3 : 0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        CHECK(waitpid(pids[p], &status, 0) == pids[p]);
        CHECK(WIFEXITED(status));
        CHECK_INT(WEXITSTATUS(status), 0);
    }
    struct s3f__cache *c0 = open_cache(dir, max, 1);
    CHECK(s3f__cache_scan_bytes(c0) <= max);
    s3f__cache_free(c0);
}

/* Threads of one process on one cache (the flock does not exclude them; the mutex does). */
struct thread_job {
    struct s3f__cache *c;
    unsigned seed;
    int bad;
};

static void *thread_main(void *arg) {
    struct thread_job *j = arg;
    struct s3f__cache_object o[2];
    s3f__cache_object_init(&o[0], j->c, "b", "t0", "\"e\"", 32 * BS);
    s3f__cache_object_init(&o[1], j->c, "b", "t1", "\"e\"", 32 * BS);
    char *buf = malloc(BS), *want = malloc(BS);
    for (int i = 0; i < 200; i++) {
        int k = rand_r(&j->seed) % 2;
        uint64_t b = (uint64_t)(rand_r(&j->seed) % 32);
        fill(want, BS, 20 + k, b);
        if (s3f__cache_get(&o[k], b, buf)) {
            if (memcmp(buf, want, BS) != 0)
                j->bad++;
        } else {
            s3f__cache_put(&o[k], b, want);
        }
    }
    free(buf);
    free(want);
    s3f__cache_object_cleanup(&o[0]);
    s3f__cache_object_cleanup(&o[1]);
    return NULL;
}

static void test_threads(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    uint64_t max = 12 * (HDR + 1 + 2 + 3 + BS);
    struct s3f__cache *c = open_cache(dir, max, 1);
    struct thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){c, 100u + (unsigned)i, 0};
        pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(jobs[i].bad, 0);
    }
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.errors, 0);
    CHECK(n.hits > 0 && n.evicted_bytes > 0);
    CHECK(s3f__cache_scan_bytes(c) <= max);
    s3f__cache_free(c);
}

/* ---- s3f__cache_pread with a counting source ------------------------------------------ */

struct source {
    const char *data;
    int calls;
    uint64_t bytes;
};

static enum s3f_status src_fetch(void *ud, void *dst, size_t len, uint64_t offset,
                                 struct s3f_error *err) {
    struct source *s = ud;
    (void)err;
    s->calls++;
    s->bytes += len;
    memcpy(dst, s->data + offset, len);
    return S3F_OK;
}

static void test_pread(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    struct s3f__cache *c = open_cache(dir, 0, 1);
    uint64_t size = 10 * BS + 333;
    char *obj = malloc(size), *buf = malloc(size);
    fill(obj, size, 7, 0);
    struct source src = {obj, 0, 0};
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "obj", "\"x\"", size), S3F_OK);
    size_t n = 0;
    /* an unaligned read in the middle: blocks 1..3 fetched whole */
    CHECK_INT(s3f__cache_pread(&o, buf, 2 * BS, BS + 100, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK_INT(n, 2 * BS);
    CHECK(memcmp(buf, obj + BS + 100, n) == 0);
    CHECK_INT(src.bytes, 3 * BS);
    s3f__cache_flush(c); /* the inserts are written by the cache's thread */
    /* everything, reading past the end: the rest fetched, the middle from the cache */
    src.bytes = 0;
    src.calls = 0;
    CHECK_INT(s3f__cache_pread(&o, buf, size + 50, 0, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK_INT(n, size);
    CHECK(memcmp(buf, obj, size) == 0);
    CHECK_INT(src.bytes, size - 3 * BS);
    CHECK_INT(src.calls, 2); /* block 0, then blocks 4..10 in one run */
    s3f__cache_flush(c);
    /* again: no fetch at all */
    src.bytes = 0;
    src.calls = 0;
    memset(buf, 0, size);
    CHECK_INT(s3f__cache_pread(&o, buf, size, 0, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK(memcmp(buf, obj, size) == 0);
    CHECK_INT(s3f__cache_pread(&o, buf, 10, size - 5, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK_INT(n, 5);
    CHECK(memcmp(buf, obj + size - 5, 5) == 0);
    CHECK_INT(src.calls, 0);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    free(obj);
    free(buf);
}


/* ---- only its own files ------------------------------------------------------------------ */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static bool file_has(const char *path, const char *text) {
    size_t n = 0;
    char *got = test_read_file(path, &n);
    bool ok = got && n == strlen(text) && memcmp(got, text, n) == 0;
    free(got);
    return ok;
}

/* An outside tree that looks like an object directory of the cache: block files named
 * 0..n-1 with foreign content, and a file beside them. */
static void outside_tree(const char *dir, int n) {
    char p[600];
    CHECK(mkdir(dir, 0755) == 0);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%d", dir, i);
        write_file(p, "not the cache's");
    }
    snprintf(p, sizeof(p), "%s/precious", dir);
    write_file(p, "keep me");
}

static bool outside_intact(const char *dir, int n) {
    char p[600];
    bool ok = true;
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%d", dir, i);
        ok = ok && file_has(p, "not the cache's");
    }
    snprintf(p, sizeof(p), "%s/precious", dir);
    return ok && file_has(p, "keep me");
}

/* A planted symbolic link (an object directory and a first-level directory replaced by
 * links to other trees), a FIFO and a link in place of block files: never followed, never
 * read, never removed, and eviction under a small bound deletes nothing outside the root. */
static void test_planted_links_and_fifo(void) {
    char dir[300], out1[400], out2[400], p[700], q[700];
    new_dir(dir, sizeof(dir));
    snprintf(out1, sizeof(out1), "%s-outside1", dir);
    snprintf(out2, sizeof(out2), "%s-outside2", dir);
    uint64_t fsz = HDR + 1 + 2 + 3 + BS;
    struct s3f__cache *c = open_cache(dir, 0, 1);
    struct s3f__cache_object a, b, d;
    CHECK_INT(s3f__cache_object_init(&a, c, "b", "ka", "\"e\"", 4 * BS), S3F_OK);
    CHECK_INT(s3f__cache_object_init(&b, c, "b", "kb", "\"e\"", 4 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 30, 0);
    for (uint64_t i = 0; i < 4; i++) {
        put_sync(&a, i, buf);
        put_sync(&b, i, buf);
    }
    /* a's object directory becomes a link to another tree holding files named as blocks */
    outside_tree(out1, 4);
    snprintf(p, sizeof(p), "%s", a.dir);
    for (uint64_t i = 0; i < 4; i++) {
        block_file(&a, i, q, sizeof(q));
        CHECK(unlink(q) == 0);
    }
    CHECK(rmdir(p) == 0);
    CHECK(symlink(out1, p) == 0);
    /* b's block 1 a FIFO, block 2 a link to an outside file */
    block_file(&b, 1, q, sizeof(q));
    CHECK(unlink(q) == 0 && mkfifo(q, 0600) == 0);
    outside_tree(out2, 0);
    block_file(&b, 2, q, sizeof(q));
    CHECK(unlink(q) == 0);
    snprintf(p, sizeof(p), "%s/precious", out2);
    CHECK(symlink(p, q) == 0);
    /* reads: misses, nothing followed (the FIFO would block a read without O_NONBLOCK) */
    CHECK(!s3f__cache_get(&a, 0, buf));
    CHECK(!s3f__cache_has(&a, 0));
    CHECK(!s3f__cache_get(&b, 1, buf));
    CHECK(!s3f__cache_get(&b, 2, buf));
    CHECK(s3f__cache_get(&b, 0, buf));
    /* inserts do not write through the link nor replace the FIFO or the link */
    put_sync(&a, 0, buf);
    put_sync(&b, 1, buf);
    put_sync(&b, 2, buf);
    CHECK(!s3f__cache_has(&a, 0));
    struct stat sb;
    block_file(&b, 1, q, sizeof(q));
    CHECK(lstat(q, &sb) == 0 && S_ISFIFO(sb.st_mode));
    block_file(&b, 2, q, sizeof(q));
    CHECK(lstat(q, &sb) == 0 && S_ISLNK(sb.st_mode));
    /* a first-level directory of object d replaced by a link to another tree */
    CHECK_INT(s3f__cache_object_init(&d, c, "b", "kd", "\"e\"", 64 * BS), S3F_OK);
    char out3[400], top[700];
    snprintf(out3, sizeof(out3), "%s-outside3", dir);
    CHECK(mkdir(out3, 0755) == 0);
    snprintf(p, sizeof(p), "%s/%s", out3, d.hex);
    outside_tree(p, 8);
    snprintf(top, sizeof(top), "%s/v1/%.2s", dir, d.hex);
    if (access(top, F_OK) != 0) {
        CHECK(symlink(out3, top) == 0);
    } else { /* shares its first level with a or b: plant the link one level down */
        CHECK(symlink(p, d.dir) == 0);
    }
    CHECK(!s3f__cache_get(&d, 0, buf));
    /* eviction under a small bound (another client on the directory): many inserts */
    struct s3f__cache *small = open_cache(dir, 6 * fsz, 1);
    struct s3f__cache_object e, d2;
    CHECK_INT(s3f__cache_object_init(&e, small, "b", "ke", "\"e\"", 64 * BS), S3F_OK);
    CHECK_INT(s3f__cache_object_init(&d2, small, "b", "kd", "\"e\"", 64 * BS), S3F_OK);
    for (uint64_t i = 0; i < 40; i++) {
        fill(buf, BS, 31, i);
        put_sync(&e, i, buf);
        put_sync(&d2, i, buf);
    }
    CHECK(s3f__cache_has(&e, 39));
    CHECK(s3f__cache_scan_bytes(small) <= 6 * fsz);
    struct s3f__cache_counters n;
    s3f__cache_counters(small, &n);
    CHECK(n.evicted_bytes > 0);
    CHECK(outside_intact(out1, 4));
    snprintf(p, sizeof(p), "%s/precious", out2);
    CHECK(file_has(p, "keep me"));
    snprintf(p, sizeof(p), "%s/%s", out3, d.hex);
    CHECK(outside_intact(p, 8));
    block_file(&b, 1, q, sizeof(q));
    CHECK(lstat(q, &sb) == 0 && S_ISFIFO(sb.st_mode));
    block_file(&b, 2, q, sizeof(q));
    CHECK(lstat(q, &sb) == 0 && S_ISLNK(sb.st_mode));
    snprintf(p, sizeof(p), "%s", a.dir);
    CHECK(lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode));
    free(buf);
    s3f__cache_object_cleanup(&a);
    s3f__cache_object_cleanup(&b);
    s3f__cache_object_cleanup(&d);
    s3f__cache_object_cleanup(&e);
    s3f__cache_object_cleanup(&d2);
    s3f__cache_free(small);
    s3f__cache_free(c);
}

static enum s3f_status try_open(const char *dir, struct s3f__cache **c, struct s3f_error *err) {
    struct s3f__cache_options o = {.dir = dir, .min_free_bytes = 1, .block_bytes = BS,
                                   .logger = &warn_log};
    s3f_error_clear(err);
    return s3f__cache_open(&o, c, err);
}

/* Roots the cache must not use as they are: a link, a directory others may write, one of
 * another user; a shared directory with the sticky bit gets a private one inside. */
static void test_roots(void) {
    char dir[300], p[700];
    struct s3f__cache *c = NULL;
    struct s3f_error err;
    /* a symbolic link to a good directory */
    new_dir(dir, sizeof(dir));
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(p, sizeof(p), "%s-link", dir);
    CHECK(symlink(dir, p) == 0);
    CHECK_INT(try_open(p, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "symbolic link") != NULL);
    /* writable by others, no sticky bit */
    new_dir(dir, sizeof(dir));
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
    CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "writable by other users") != NULL);
    snprintf(p, sizeof(p), "%s/v1", dir);
    CHECK(access(p, F_OK) != 0); /* nothing made in it */
    CHECK(chmod(dir, 0770) == 0);
    CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
    /* a v1 that is a link, or that others may read */
    new_dir(dir, sizeof(dir));
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(p, sizeof(p), "%s/v1", dir);
    CHECK(symlink("/tmp", p) == 0);
    CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
    CHECK(unlink(p) == 0 && mkdir(p, 0700) == 0 && chmod(p, 0755) == 0);
    CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
    CHECK(strstr(err.message, "0755") != NULL);
    /* shared with the sticky bit (/tmp): a private directory inside, mode 0700 */
    new_dir(dir, sizeof(dir));
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 01777) == 0);
    CHECK_INT(try_open(dir, &c, &err), S3F_OK);
    snprintf(p, sizeof(p), "%s/s3flash-%u/v1", dir, (unsigned)geteuid());
    if (c)
        CHECK_STR(s3f__cache_root(c), p);
    struct stat sb;
    snprintf(p, sizeof(p), "%s/s3flash-%u", dir, (unsigned)geteuid());
    CHECK(lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700 &&
          sb.st_uid == geteuid());
    s3f__cache_free(c);
    c = NULL;
    if (geteuid() == 0) {
        /* another user's: as root, a directory of uid 65534 (nobody) is not used, nor a
         * private directory someone else made in a shared one */
        new_dir(dir, sizeof(dir));
        CHECK(mkdir(dir, 0700) == 0 && chown(dir, 65534, 65534) == 0);
        CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
        CHECK(strstr(err.message, "belongs to uid 65534") != NULL);
        CHECK(chmod(dir, 0777) == 0);
        CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
        snprintf(p, sizeof(p), "%s/v1", dir);
        CHECK(access(p, F_OK) != 0);
        new_dir(dir, sizeof(dir));
        CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 01777) == 0);
        snprintf(p, sizeof(p), "%s/s3flash-0", dir);
        CHECK(mkdir(p, 0700) == 0 && chown(p, 65534, 65534) == 0);
        CHECK_INT(try_open(dir, &c, &err), S3F_ERR_CONFIG);
        CHECK(strstr(err.message, "belongs to uid 65534") != NULL);
    }
    CHECK(c == NULL);
}

/* ---- the byte count -------------------------------------------------------------------- */

static void lock_path(const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s/v1/lock", dir);
}

static uint64_t counted(const char *dir) {
    char p[400];
    lock_path(dir, p, sizeof(p));
    size_t n = 0;
    char *buf = test_read_file(p, &n);
    struct s3f__cache_counts k;
    s3f__cache_counts_parse(buf ? buf : "", buf ? n : 0, S3F__CACHE_COUNT_LIMIT, &k);
    free(buf);
    for (int i = 0; i < S3F__CACHE_SLOTS; i++)
        if (!k.valid[i])
            return UINT64_MAX;
    return s3f__cache_counts_total(&k);
}

/* A byte count near 2^64 (a corrupted lock file, in the old 8-byte format or as a slot
 * whose check matches) neither overflows nor stops inserts: the slot is recounted. */
static void test_count_overflow(void) {
    char dir[300], p[400];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS;
    struct s3f__cache_object o;
    char *buf = NULL;
    struct s3f__cache *c = with_blocks(dir, 10 * fsz, 40, 3, &o, &buf);
    CHECK_INT(counted(dir), 3 * fsz);
    unsigned slot = (unsigned)strtoul((char[]){o.hex[0], o.hex[1], 0}, NULL, 16);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    lock_path(dir, p, sizeof(p));
    for (int form = 0; form < 3; form++) {
        int fd = open(p, O_RDWR);
        CHECK(fd >= 0);
        if (form == 0) { /* the old format: 8 bytes */
            uint64_t v = UINT64_MAX - 100;
            CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, &v, 8, 0) == 8);
        } else { /* a slot whose check matches, but past any file system */
            uint64_t v = form == 1 ? UINT64_MAX - (1u << 20) : ((uint64_t)1 << 62);
            uint64_t slot16[2] = {v, v ^ S3F__CACHE_COUNT_KEY};
            CHECK(pwrite(fd, slot16, 16, S3F__CACHE_COUNT_HEAD + slot * 16) == 16);
        }
        close(fd);
        c = open_cache(dir, 10 * fsz, 1);
        CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
        put_sync(&o, 10 + (uint64_t)form, buf);
        CHECK(s3f__cache_has(&o, 10 + (uint64_t)form));
        CHECK_INT(counted(dir), s3f__cache_scan_bytes(c));
        CHECK_INT(counted(dir), (4 + (uint64_t)form) * fsz);
        s3f__cache_object_cleanup(&o);
        s3f__cache_free(c);
    }
    /* the parser: a valid slot is never above the limit and the sum never wraps */
    unsigned char raw[S3F__CACHE_COUNT_FILE];
    memset(raw, 0xff, sizeof(raw));
    memcpy(raw, "S3FCCNT1", 8);
    uint32_t slots = S3F__CACHE_SLOTS;
    memcpy(raw + 8, &slots, 4);
    for (int i = 0; i < S3F__CACHE_SLOTS; i++) {
        uint64_t v = S3F__CACHE_COUNT_LIMIT, ck = v ^ S3F__CACHE_COUNT_KEY;
        memcpy(raw + S3F__CACHE_COUNT_HEAD + i * 16, &v, 8);
        memcpy(raw + S3F__CACHE_COUNT_HEAD + i * 16 + 8, &ck, 8);
    }
    struct s3f__cache_counts k;
    s3f__cache_counts_parse(raw, sizeof(raw), UINT64_MAX, &k);
    CHECK(k.valid[0] && k.valid[255]);
    CHECK_INT(s3f__cache_counts_total(&k), (uint64_t)S3F__CACHE_SLOTS * S3F__CACHE_COUNT_LIMIT);
    s3f__cache_counts_parse(raw, sizeof(raw), 1000, &k);
    CHECK(!k.valid[0]);
    free(buf);
}

/* Issue 28, D6: a count slot that claims bytes for a first-level directory that is gone
 * (removed behind the cache's back) makes the cache look full; the eviction step that
 * finds it recounts the slot to 0, and that is room: the insert goes in, with no "no room"
 * warning. Before, the step counted its progress from after the recount, saw none, and the
 * insert was dropped with room to spare. */
static void test_gone_dir_slot_frees_room(void) {
    char dir[300], p[400];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS;
    struct s3f__cache *c = open_cache(dir, 10 * fsz, 1);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    unsigned slot = (unsigned)strtoul((char[]){o.hex[0], o.hex[1], 0}, NULL, 16);
    unsigned gone = (slot + 1) % S3F__CACHE_SLOTS; /* no directory: nothing was put there */
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    lock_path(dir, p, sizeof(p));
    int fd = open(p, O_RDWR);
    CHECK(fd >= 0);
    uint64_t v = 10 * fsz, slot16[2] = {v, v ^ S3F__CACHE_COUNT_KEY};
    CHECK(pwrite(fd, slot16, 16, S3F__CACHE_COUNT_HEAD + gone * 16) == 16);
    close(fd);
    CHECK_INT(counted(dir), 10 * fsz);
    c = open_cache(dir, 10 * fsz, 1);
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 7, 3);
    put_sync(&o, 3, buf);
    CHECK(s3f__cache_has(&o, 3));
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.insert_dropped_bytes, 0);
    CHECK_INT(n.inserted_bytes, BS);
    CHECK_INT(counted(dir), fsz);
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

/* ---- off the reading thread, bounded ----------------------------------------------------- */

/* While another process holds the node-wide lock (an eviction there), the reading thread's
 * puts and gets return at once: inserts wait in the queue, not the reader. A full queue
 * drops inserts (counted) instead of blocking. */
static void test_reader_never_waits(void) {
    char dir[300], p[400];
    new_dir(dir, sizeof(dir));
    struct s3f__cache_options opt = {.dir = dir, .min_free_bytes = 1, .block_bytes = BS,
                                     .logger = &warn_log, .queue_bytes = 4 * BS};
    struct s3f__cache *c = NULL;
    CHECK_INT(s3f__cache_open(&opt, &c, NULL), S3F_OK);
    s3f__cache_flush(c); /* the count is made */
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 41, 0);
    put_sync(&o, 0, buf);
    lock_path(dir, p, sizeof(p));
    int fd = open(p, O_RDWR);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0); /* "another process" evicting */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t b = 1; b < 20; b++)
        s3f__cache_put(&o, b, buf);
    CHECK(s3f__cache_get(&o, 0, buf));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(s < 1.0);
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK(n.insert_pending_bytes > 0 && n.insert_pending_bytes <= 4 * BS);
    CHECK(n.insert_dropped_bytes >= 15 * BS); /* 4 queued at most, the rest dropped */
    CHECK_INT(n.inserted_bytes, BS);
    flock(fd, LOCK_UN);
    close(fd);
    s3f__cache_flush(c);
    s3f__cache_counters(c, &n);
    CHECK_INT(n.insert_pending_bytes, 0);
    CHECK(n.inserted_bytes >= 2 * BS && n.inserted_bytes <= 5 * BS);
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

/* Eviction with many objects under a small bound: the bound holds after every insert, the
 * newest blocks stay, and each insert's eviction reads a few directories, never the tree. */
static void test_eviction_sampled(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    enum { OBJECTS = 400, KEEP = 40 };
    uint64_t fsz = HDR + 1 + 4 + 3 + BS;
    struct s3f__cache *c = open_cache(dir, KEEP * fsz, 1);
    s3f__cache_flush(c);
    char *buf = malloc(BS);
    fill(buf, BS, 42, 0);
    struct s3f__cache_object o[OBJECTS];
    uint64_t most_listed = 0;
    bool bounded = true;
    for (int i = 0; i < OBJECTS; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%03d", i);
        CHECK_INT(s3f__cache_object_init(&o[i], c, "b", key, "\"e\"", BS), S3F_OK);
        struct s3f__cache_counters before, after;
        s3f__cache_counters(c, &before);
        put_sync(&o[i], 0, buf);
        s3f__cache_counters(c, &after);
        uint64_t listed = after.dirs_listed - before.dirs_listed;
        most_listed = listed > most_listed ? listed : most_listed;
        if (i % 50 == 49)
            bounded = bounded && s3f__cache_scan_bytes(c) <= KEEP * fsz;
    }
    CHECK(bounded);
    /* a step lists a first-level directory and an object directory per sample, plus the
     * few first-level directories it finds stale: far fewer than the 400 objects */
    CHECK(most_listed <= 40);
    for (int i = OBJECTS - 3; i < OBJECTS; i++)
        CHECK(s3f__cache_has(&o[i], 0));
    int kept_old = 0;
    for (int i = 0; i < OBJECTS - KEEP; i++)
        kept_old += s3f__cache_has(&o[i], 0);
    CHECK(kept_old < KEEP / 2); /* mostly the newest are kept (sampled LRU) */
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.errors, 0);
    for (int i = 0; i < OBJECTS; i++)
        s3f__cache_object_cleanup(&o[i]);
    free(buf);
    s3f__cache_free(c);
}

/* A random read of one block of a large object caches that block (and only it). */
static void test_partial_object(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    struct s3f__cache *c = open_cache(dir, 0, 1);
    uint64_t size = 100 * BS;
    char *obj = malloc(size), *buf = malloc(BS);
    fill(obj, size, 43, 0);
    struct source src = {obj, 0, 0};
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "big", "\"x\"", size), S3F_OK);
    size_t n = 0;
    CHECK_INT(s3f__cache_pread(&o, buf, 4096, 7 * BS + 100, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK(n == 4096 && memcmp(buf, obj + 7 * BS + 100, 4096) == 0);
    s3f__cache_flush(c);
    CHECK(s3f__cache_has(&o, 7));
    CHECK(!s3f__cache_has(&o, 6) && !s3f__cache_has(&o, 8));
    s3f__cache_object_cleanup(&o);
    /* another reader (a new object handle): block 7 from the cache, no fetch */
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "big", "\"x\"", size), S3F_OK);
    src.calls = 0;
    CHECK_INT(s3f__cache_pread(&o, buf, 4096, 7 * BS + 5000, src_fetch, &src, &n, NULL), S3F_OK);
    CHECK(n == 4096 && memcmp(buf, obj + 7 * BS + 5000, 4096) == 0);
    CHECK_INT(src.calls, 0);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
    free(obj);
    free(buf);
}

/* ---- the counters: every block put is accounted for, in every snapshot ----------------- */

struct putter {
    struct s3f__cache_object *o;
    const char *data;
    uint64_t blocks;
    uint64_t started, done; /* atomics: bytes handed to put, bytes whose put returned */
    int finished;           /* atomic */
};

static void *putter_main(void *arg) {
    struct putter *p = arg;
    for (uint64_t b = 0; b < p->blocks; b++) {
        __atomic_fetch_add(&p->started, BS, __ATOMIC_SEQ_CST);
        s3f__cache_put(p->o, b, p->data);
        __atomic_fetch_add(&p->done, BS, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&p->finished, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* A block the cache accepted is inserted, dropped (counted) or pending; never none of them,
 * in any snapshot of the counters taken while the writer thread works (a snapshot that read
 * the inserted bytes before the writer finished a block and the pending bytes after showed
 * the block nowhere: a test that waited for "nothing pending" saw blocks lost), and a
 * snapshot with nothing pending has every block inserted or dropped. */
static void test_counters_consistent(void) {
    char dir[300];
    new_dir(dir, sizeof(dir));
    struct s3f__cache_options opt = {.dir = dir, .min_free_bytes = 1, .block_bytes = BS,
                                     .logger = &warn_log, .queue_bytes = 64 * BS};
    struct s3f__cache *c = NULL;
    CHECK_INT(s3f__cache_open(&opt, &c, NULL), S3F_OK);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100000 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 42, 0);
    struct putter p = {&o, buf, 1500, 0, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, putter_main, &p);
    uint64_t snapshots = 0, torn = 0, first_torn[3] = {0, 0, 0};
    for (;;) {
        int finished = __atomic_load_n(&p.finished, __ATOMIC_SEQ_CST);
        uint64_t done = __atomic_load_n(&p.done, __ATOMIC_SEQ_CST);
        struct s3f__cache_counters n;
        s3f__cache_counters(c, &n);
        uint64_t started = __atomic_load_n(&p.started, __ATOMIC_SEQ_CST);
        uint64_t seen = n.inserted_bytes + n.insert_dropped_bytes + n.insert_pending_bytes;
        snapshots++;
        if (seen < done || seen > started) {
            if (!torn++) {
                first_torn[0] = done;
                first_torn[1] = seen;
                first_torn[2] = started;
            }
        }
        if (finished && !n.insert_pending_bytes)
            break;
    }
    pthread_join(th, NULL);
    if (torn)
        fprintf(stderr, "%" PRIu64 " of %" PRIu64 " snapshots lost blocks (first: %" PRIu64
                        " put, %" PRIu64 " inserted+dropped+pending, %" PRIu64 " started)\n",
                torn, snapshots, first_torn[0], first_torn[1], first_torn[2]);
    CHECK_INT(torn, 0);
    struct s3f__cache_counters n;
    s3f__cache_counters(c, &n);
    CHECK_INT(n.errors, 0);
    CHECK_INT(n.inserted_bytes + n.insert_dropped_bytes, 1500 * BS);
    CHECK(n.inserted_bytes > 0);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);

    /* a block the limits leave no room for (a bound below one block) is dropped, counted */
    new_dir(dir, sizeof(dir));
    c = open_cache(dir, BS / 2, 1);
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 4 * BS), S3F_OK);
    put_sync(&o, 1, buf);
    s3f__cache_counters(c, &n);
    CHECK(!s3f__cache_has(&o, 1));
    CHECK_INT(n.inserted_bytes, 0);
    CHECK_INT(n.insert_dropped_bytes, BS);
    CHECK_INT(n.insert_pending_bytes, 0);
    CHECK_INT(n.errors, 0);
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

/* A dead writer's temporary file (older than ten minutes) in an object directory that
 * eviction samples is removed; a fresh one (a live writer's) is not. */
static void test_stale_tmp_swept(void) {
    char dir[300], stale[400], fresh[400];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS;
    struct s3f__cache *c = open_cache(dir, 3 * fsz, 1);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 10 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 43, 0);
    put_sync(&o, 0, buf);
    snprintf(stale, sizeof(stale), "%s/.tmp.999999.1", o.dir);
    snprintf(fresh, sizeof(fresh), "%s/.tmp.999999.2", o.dir);
    write_file(stale, "dead");
    write_file(fresh, "alive");
    set_mtime(stale, time(NULL) - 3600);
    for (uint64_t b = 1; b < 6; b++) /* each one past the bound: an eviction step */
        put_sync(&o, b, buf);
    struct stat sb;
    CHECK(stat(stale, &sb) != 0);
    CHECK(stat(fresh, &sb) == 0);
    CHECK(s3f__cache_has(&o, 5));
    free(buf);
    s3f__cache_object_cleanup(&o);
    s3f__cache_free(c);
}

/* The insert queue is inside the client's memory limit: its share (an eighth, 2 blocks ..
 * 32 MiB) comes off the buffer pool; a block size whose two blocks take more than half of
 * the limit leaves the cache unused (the pool keeps the whole limit). */
static void test_queue_in_memory_limit(void) {
    const uint64_t mib = 1 << 20;
    CHECK_INT(s3f__cache_queue_bytes(512 * mib, mib), 32 * mib);
    CHECK_INT(s3f__cache_queue_bytes(64 * mib, mib), 8 * mib);
    CHECK_INT(s3f__cache_queue_bytes(16 * mib, mib), 2 * mib);
    CHECK_INT(s3f__cache_queue_bytes(64 * mib, 8 * mib), 16 * mib);
    CHECK_INT(s3f__cache_queue_bytes(16 * mib, 8 * mib), 0);
    CHECK_INT(s3f__cache_queue_bytes(4096 * mib, 64 * mib), 128 * mib);
    struct {
        bool cache;
        uint64_t limit, block, pool;
    } cases[] = {
        {false, 64 * mib, 0, 64 * mib},
        {true, 64 * mib, 0, 56 * mib},
        {true, 0, 0, 480 * mib},         /* the default 512 MiB */
        {true, 16 * mib, 8 * mib, 16 * mib}, /* not used: the whole limit to the pool */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char dir[300];
        new_dir(dir, sizeof(dir));
        struct s3f_client_options o = {0};
        o.endpoint_url = "http://127.0.0.1:9";
        o.region = "us-east-1";
        o.access_key_id = "AKIDEXAMPLE";
        o.secret_access_key = "secret";
        o.memory_limit_bytes = cases[i].limit;
        o.cache_dir = cases[i].cache ? dir : NULL;
        o.cache_block_bytes = cases[i].block;
        o.cache_min_free_bytes = 1;
        o.log_level = S3F_LOG_ERROR;
        struct s3f_client *cl = NULL;
        CHECK_INT(s3f_client_new(&o, &cl, NULL), S3F_OK);
        struct s3f_client_stats cs;
        s3f_client_stats(cl, &cs, 0);
        CHECK_INT(cs.pool_limit_bytes, cases[i].pool);
        s3f_client_free(cl);
    }
}

static void test_bad_dir(void) {
    struct s3f__cache_options o = {.dir = "/proc/s3flash-no-such/cache"};
    struct s3f__cache *c = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__cache_open(&o, &c, &err), S3F_ERR_IO);
    CHECK(c == NULL);
    o.dir = root;
    o.block_bytes = 3000;
    CHECK_INT(s3f__cache_open(&o, &c, &err), S3F_ERR_INVALID_ARGUMENT);
}

int main(void) {
    snprintf(root, sizeof(root), "/tmp/s3f-test-cache-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_roundtrip);
    RUN(test_corruption);
    RUN(test_eviction_lru);
    RUN(test_count_rebuilt);
    RUN(test_processes);
    RUN(test_threads);
    RUN(test_pread);
    RUN(test_bad_dir);
    RUN(test_planted_links_and_fifo);
    RUN(test_roots);
    RUN(test_count_overflow);
    RUN(test_gone_dir_slot_frees_room);
    RUN(test_reader_never_waits);
    RUN(test_eviction_sampled);
    RUN(test_partial_object);
    RUN(test_counters_consistent);
    RUN(test_stale_tmp_swept);
    RUN(test_queue_in_memory_limit);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", root);
    return test_summary();
}
