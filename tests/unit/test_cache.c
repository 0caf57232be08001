/* The block cache's store (src/cache/store.c) and its read path (io.c): insert and look
 * up, a corrupted block detected and removed, LRU eviction under the byte limit and the
 * free-space floor, several processes inserting and evicting at once, reads in blocks. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
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

/* The shared byte count lost (v1/lock removed): the next open counts the blocks there, so
 * the bound holds for the blocks it did not see inserted. */
static void test_count_rebuilt(void) {
    char dir[300], lockp[400];
    new_dir(dir, sizeof(dir));
    uint64_t fsz = HDR + 1 + 1 + 3 + BS;
    struct s3f__cache *c = open_cache(dir, 0, 1);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, c, "b", "k", "\"e\"", 100 * BS), S3F_OK);
    char *buf = malloc(BS);
    fill(buf, BS, 4, 0);
    for (uint64_t b = 0; b < 10; b++)
        put_sync(&o, b, buf);
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
    struct s3f__cache *c0 = open_cache(dir, max, 1); /* creates the directory */
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
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", root);
    return test_summary();
}
