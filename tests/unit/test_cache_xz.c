/* The shared cache (src/cache/xz.c) with its requests given by the test (an in-memory
 * bucket): what it PUTs is what it accepts back, a block of another object, a changed byte
 * or another length is refused, a failed request bypasses it, and its PUT queue holds no
 * more than its bound and sends one PUT at a time. The wire (the express sink, the mount,
 * the proxy's counts) is tests/integration/test_mount_cache_xz.py's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "s3flash/s3flash.h"
#include "testutil.h"

#define MAXOBJ 64

/* the bucket: key -> body, and what the requests did */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *key[MAXOBJ];
    char *body[MAXOBJ];
    size_t len[MAXOBJ];
    int n;
    int n_gets, puts, in_put, most_in_put;
    enum s3f_status fail; /* every request answers this, when set */
    bool hold;            /* PUTs wait while set */
} b = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int find(const char *key) {
    for (int i = 0; i < b.n; i++)
        if (strcmp(b.key[i], key) == 0)
            return i;
    return -1;
}

static enum s3f_status fake_get(void *ud, const char *bucket, const char *key, void *hdr,
                                size_t hdr_len, void *data, size_t data_len, uint64_t *got,
                                struct s3f_error *err) {
    (void)ud;
    (void)bucket;
    pthread_mutex_lock(&b.mu);
    b.n_gets++;
    int i = find(key);
    enum s3f_status st = b.fail ? b.fail : i < 0 ? S3F_ERR_NOT_FOUND : S3F_OK;
    if (st == S3F_OK && b.len[i] > hdr_len + data_len)
        st = S3F_ERR_ABORTED;
    if (st == S3F_OK) {
        size_t h = b.len[i] < hdr_len ? b.len[i] : hdr_len;
        memcpy(hdr, b.body[i], h);
        memcpy(data, b.body[i] + h, b.len[i] - h);
        *got = b.len[i];
    }
    if (st != S3F_OK && st != S3F_ERR_NOT_FOUND) {
        err->status = st;
        snprintf(err->code, sizeof(err->code), "ServiceUnavailable");
    }
    pthread_mutex_unlock(&b.mu);
    return st;
}

static enum s3f_status fake_put(void *ud, const char *bucket, const char *key, const void *data,
                                size_t len, struct s3f_error *err) {
    (void)ud;
    (void)bucket;
    pthread_mutex_lock(&b.mu);
    if (++b.in_put > b.most_in_put)
        b.most_in_put = b.in_put;
    while (b.hold)
        pthread_cond_wait(&b.cv, &b.mu);
    enum s3f_status st = b.fail;
    if (!st) {
        int i = find(key);
        if (i < 0) {
            i = b.n++;
            b.key[i] = strdup(key);
        } else {
            free(b.body[i]);
        }
        b.body[i] = malloc(len);
        memcpy(b.body[i], data, len);
        b.len[i] = len;
        b.puts++;
    } else {
        err->status = st;
    }
    b.in_put--;
    pthread_mutex_unlock(&b.mu);
    return st;
}

static const struct s3f__xz_ops ops = {fake_get, fake_put};
static const struct s3f__logger quiet = {NULL, NULL, S3F_LOG_ERROR};

static void reset_bucket(void) {
    for (int i = 0; i < b.n; i++) {
        free(b.key[i]);
        free(b.body[i]);
    }
    b.n = b.n_gets = b.puts = b.in_put = b.most_in_put = 0;
    b.fail = S3F_OK;
    b.hold = false;
}

static struct s3f__xz *open_xz(uint64_t queue_bytes) {
    struct s3f__xz_options o = {.bucket = "c--use1-az4--x-s3", .scope = "http://h",
                                .queue_bytes = queue_bytes, .logger = &quiet, .ops = &ops};
    struct s3f__xz *z = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    CHECK_INT(s3f__xz_open(&o, &z, &err), S3F_OK);
    return z;
}

static void fill(char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(seed * 31 + i * 7);
}

static void test_roundtrip_and_checks(void) {
    reset_bucket();
    struct s3f__xz *z = open_xz(0);
    struct s3f__cache_object x, y;
    CHECK_INT(s3f__cache_object_init(&x, NULL, "src", "dir/x.bin", "\"e1\"", 200000), S3F_OK);
    CHECK_INT(s3f__cache_object_init(&y, NULL, "src", "dir/y.bin", "\"e1\"", 200000), S3F_OK);
    char *data = malloc(200000), *got = malloc(200000);
    fill(data, 200000, 1);
    CHECK(!s3f__xz_get(z, &x, 0, got)); /* nothing there: a miss, no error */
    s3f__xz_put(z, &x, 0, data);
    fill(data, 200000, 2);
    s3f__xz_put(z, &y, 0, data);
    s3f__xz_flush(z);
    CHECK_INT(b.puts, 2);
    CHECK(s3f__xz_get(z, &y, 0, got) && memcmp(got, data, 200000) == 0);
    fill(data, 200000, 1);
    CHECK(s3f__xz_get(z, &x, 0, got) && memcmp(got, data, 200000) == 0);
    /* x's object: a flipped data byte, y's body, a byte short: each refused */
    int ix = memmem(b.body[0] + 56, 30, "x.bin", 5) ? 0 : 1, iy = 1 - ix;
    b.body[ix][b.len[ix] - 1] ^= 1;
    CHECK(!s3f__xz_get(z, &x, 0, got));
    b.body[ix][b.len[ix] - 1] ^= 1;
    CHECK(s3f__xz_get(z, &x, 0, got));
    char *keep = b.body[ix];
    size_t keep_len = b.len[ix];
    b.body[ix] = b.body[iy];
    b.len[ix] = b.len[iy];
    CHECK(!s3f__xz_get(z, &x, 0, got)); /* another object's block under x's name */
    b.body[ix] = keep;
    b.len[ix] = keep_len - 1;
    CHECK(!s3f__xz_get(z, &x, 0, got));
    b.len[ix] = keep_len;
    /* another ETag is another name: never x's old block */
    struct s3f__cache_object x2;
    CHECK_INT(s3f__cache_object_init(&x2, NULL, "src", "dir/x.bin", "\"e2\"", 200000), S3F_OK);
    int n_gets = b.n_gets;
    CHECK(!s3f__xz_get(z, &x2, 0, got));
    CHECK_INT(b.n_gets, n_gets + 1);
    struct s3f__xz_counters n;
    s3f__xz_counters(z, &n);
    CHECK_INT(n.hits, 3);
    CHECK_INT(n.invalid, 3);
    CHECK_INT(n.misses, 5);
    CHECK_INT(n.errors, 0);
    CHECK_INT(n.puts, 2);
    CHECK_INT(n.put_bytes, 400000);
    /* objects over 1 MiB are not PUT */
    struct s3f__cache_object big;
    CHECK_INT(s3f__cache_object_init(&big, NULL, "src", "big", "\"e\"", 2 << 20), S3F_OK);
    s3f__xz_put(z, &big, 0, data);
    s3f__xz_flush(z);
    CHECK_INT(b.puts, 2);
    CHECK(!s3f__xz_serves(z, 2 << 20) && s3f__xz_serves(z, 1 << 20));
    s3f__cache_object_cleanup(&big);
    s3f__cache_object_cleanup(&x2);
    s3f__cache_object_cleanup(&x);
    s3f__cache_object_cleanup(&y);
    s3f__xz_free(z);
    free(data);
    free(got);
}

static void test_failure_bypasses(void) {
    reset_bucket();
    struct s3f__xz *z = open_xz(0);
    struct s3f__cache_object x;
    CHECK_INT(s3f__cache_object_init(&x, NULL, "src", "k", "\"e\"", 1000), S3F_OK);
    char data[1000], got[1000];
    fill(data, sizeof(data), 3);
    b.fail = S3F_ERR_SERVER;
    CHECK(!s3f__xz_get(z, &x, 0, got));
    CHECK(!s3f__xz_get(z, &x, 0, got)); /* bypassed: no second request */
    CHECK_INT(b.n_gets, 1);
    s3f__xz_put(z, &x, 0, data);      /* dropped while bypassed */
    s3f__xz_flush(z);
    struct s3f__xz_counters n;
    s3f__xz_counters(z, &n);
    CHECK_INT(n.errors, 1);
    CHECK_INT(n.misses, 2);
    CHECK_INT(n.put_dropped_bytes, 1000);
    CHECK_INT(b.puts, 0);
    s3f__cache_object_cleanup(&x);
    s3f__xz_free(z);
}

/* A PUT that fails is counted and dropped (no retry of its own), and never waits for. */
static void test_put_failure_counted(void) {
    reset_bucket();
    struct s3f__xz *z = open_xz(0);
    struct s3f__cache_object x;
    CHECK_INT(s3f__cache_object_init(&x, NULL, "src", "k", "\"e\"", 1000), S3F_OK);
    char data[1000];
    fill(data, sizeof(data), 4);
    b.fail = S3F_ERR_ACCESS_DENIED;
    s3f__xz_put(z, &x, 0, data);
    s3f__xz_flush(z);
    struct s3f__xz_counters n;
    s3f__xz_counters(z, &n);
    CHECK_INT(n.put_errors, 1);
    CHECK_INT(n.put_dropped_bytes, 1000);
    CHECK_INT(n.put_pending_bytes, 0);
    s3f__cache_object_cleanup(&x);
    s3f__xz_free(z);
}

/* The queue: bodies up to its bound, the rest dropped at once; one PUT in flight; what is
 * queued is sent before the thread ends. */
static void test_queue_bounded(void) {
    reset_bucket();
    size_t body = 56 + strlen("src") + strlen("k00") + strlen("\"e\"") + 100000;
    struct s3f__xz *z = open_xz(3 * body);
    char *data = malloc(100000);
    fill(data, 100000, 5);
    b.hold = true;
    struct s3f__cache_object o[10];
    for (int i = 0; i < 10; i++) {
        char key[8];
        snprintf(key, sizeof(key), "k%02d", i);
        CHECK_INT(s3f__cache_object_init(&o[i], NULL, "src", key, "\"e\"", 100000), S3F_OK);
        s3f__xz_put(z, &o[i], 0, data); /* returns at once, the PUT thread held */
    }
    struct s3f__xz_counters n;
    s3f__xz_counters(z, &n);
    CHECK_INT(n.put_pending_bytes, 3 * body);
    CHECK_INT(n.put_dropped_bytes, 7 * 100000);
    pthread_mutex_lock(&b.mu);
    b.hold = false;
    pthread_cond_broadcast(&b.cv);
    pthread_mutex_unlock(&b.mu);
    s3f__xz_free(z); /* sends the three queued first */
    CHECK_INT(b.puts, 3);
    CHECK_INT(b.most_in_put, 1);
    for (int i = 0; i < 10; i++)
        s3f__cache_object_cleanup(&o[i]);
    free(data);
}

/* The source of s3f__xz_fetch: the object's bytes (pattern 9), each call recorded. */
static int src_calls;
static uint64_t src_off[16], src_len[16];
static enum s3f_status fake_source(void *ud, void *dst, size_t len, uint64_t offset,
                                   struct s3f_error *err) {
    (void)ud;
    (void)err;
    char *all = malloc(200000);
    fill(all, 200000, 9);
    memcpy(dst, all + offset, len);
    free(all);
    if (src_calls < 16) {
        src_off[src_calls] = offset;
        src_len[src_calls] = len;
    }
    src_calls++;
    return S3F_OK;
}

/* Objects of several blocks (a 64 KiB block size): the runs a node lacks come from the source
 * in one call each and are PUT block by block; the blocks the shared cache has are not read
 * from the source. */
static void test_fetch_in_blocks(void) {
    reset_bucket();
    struct s3f__xz_options zo = {.bucket = "c--use1-az4--x-s3", .block_bytes = 64 << 10,
                                 .logger = &quiet, .ops = &ops};
    struct s3f__xz *z = NULL;
    CHECK_INT(s3f__xz_open(&zo, &z, NULL), S3F_OK);
    CHECK_INT(s3f__xz_block_bytes(z), 64 << 10);
    struct s3f__cache_object o;
    CHECK_INT(s3f__cache_object_init(&o, NULL, "src", "k", "\"e\"", 200000), S3F_OK);
    o.block_bytes = s3f__xz_block_bytes(z); /* as the reader sets it */
    struct s3f__xz_source src = {z, &o, fake_source, NULL};
    char *want = malloc(200000), *got = malloc(200000);
    fill(want, 200000, 9);
    src_calls = 0;
    CHECK_INT(s3f__xz_fetch(&src, got, 200000, 0, NULL), S3F_OK);
    CHECK(memcmp(got, want, 200000) == 0);
    CHECK_INT(src_calls, 1); /* the four blocks (3 of 64 KiB, 3392 bytes) in one run */
    s3f__xz_flush(z);
    CHECK_INT(b.puts, 4);
    /* another node: every block from the shared cache */
    memset(got, 0, 200000);
    src_calls = 0;
    CHECK_INT(s3f__xz_fetch(&src, got, 200000, 0, NULL), S3F_OK);
    CHECK(memcmp(got, want, 200000) == 0);
    CHECK_INT(src_calls, 0);
    /* block 1 gone: the source gives that block alone, blocks 0, 2 and 3 come from the cache */
    int i1 = -1;
    for (int i = 0; i < b.n; i++)
        if (strstr(b.key[i], "/0000000001"))
            i1 = i;
    CHECK(i1 >= 0);
    free(b.key[i1]);
    b.key[i1] = strdup("gone");
    memset(got, 0, 200000);
    src_calls = 0;
    CHECK_INT(s3f__xz_fetch(&src, got, 200000, 0, NULL), S3F_OK);
    CHECK(memcmp(got, want, 200000) == 0);
    CHECK_INT(src_calls, 1);
    CHECK_INT(src_off[0], 65536);
    CHECK_INT(src_len[0], 65536);
    /* not whole blocks: the source as asked */
    src_calls = 0;
    CHECK_INT(s3f__xz_fetch(&src, got, 1000, 5, NULL), S3F_OK);
    CHECK_INT(src_calls, 1);
    CHECK(memcmp(got, want + 5, 1000) == 0);
    s3f__xz_free(z);
    CHECK_INT(b.puts, 5); /* block 1 PUT again */
    s3f__cache_object_cleanup(&o);
    free(want);
    free(got);
}

/* The PUT queue is inside the client's memory_limit_bytes, as the block cache's insert queue
 * is (the pool gets the rest, in whole 1 MiB chunks), and the smallest one takes a 1 MiB
 * block with its header. */
static void test_queue_in_memory_limit(void) {
    const uint64_t mib = 1 << 20;
    struct {
        bool local;
        uint64_t limit, pool;
    } cases[] = {
        {false, 64 * mib, 59 * mib}, /* 64 - (8 / 2 + 1/8) */
        {true, 64 * mib, 52 * mib},  /* 64 - 8 (local) - (7 / 2 + 1/8) */
        {false, 16 * mib, 14 * mib}, /* 16 - (2 / 2 + 1/8): one block */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char dir[] = "/tmp/s3f-test-xz-XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        struct s3f_client_options o = {0};
        o.endpoint_url = "http://127.0.0.1:9";
        o.region = "us-east-1";
        o.access_key_id = "AKIDEXAMPLE";
        o.secret_access_key = "secret";
        o.memory_limit_bytes = cases[i].limit;
        o.cache_dir = cases[i].local ? dir : NULL;
        o.cache_min_free_bytes = 1;
        o.cache_xz_bucket = "c--use1-az4--x-s3";
        o.log_level = S3F_LOG_ERROR;
        struct s3f_client *cl = NULL;
        CHECK_INT(s3f_client_new(&o, &cl, NULL), S3F_OK);
        struct s3f_client_stats cs;
        s3f_client_stats(cl, &cs, 0);
        CHECK_INT(cs.pool_limit_bytes, cases[i].pool);
        s3f_client_free(cl);
        char cmd[100];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
    /* the smallest queue: one 1 MiB block and its header, held in the queue, not dropped */
    reset_bucket();
    struct s3f__xz *z = open_xz(mib + (128 << 10));
    struct s3f__cache_object x;
    char key[1025];
    memset(key, 'k', 1024); /* the longest key S3 allows */
    key[1024] = 0;
    CHECK_INT(s3f__cache_object_init(&x, NULL, "src", key, "\"0123456789abcdef-99\"", mib),
              S3F_OK);
    char *data = calloc(1, mib);
    b.hold = true;
    s3f__xz_put(z, &x, 0, data);
    struct s3f__xz_counters n;
    s3f__xz_counters(z, &n);
    CHECK_INT(n.put_dropped_bytes, 0);
    CHECK(n.put_pending_bytes > mib);
    pthread_mutex_lock(&b.mu);
    b.hold = false;
    pthread_cond_broadcast(&b.cv);
    pthread_mutex_unlock(&b.mu);
    s3f__xz_free(z);
    CHECK_INT(b.puts, 1);
    s3f__cache_object_cleanup(&x);
    free(data);
}

int main(void) {
    RUN(test_roundtrip_and_checks);
    RUN(test_failure_bypasses);
    RUN(test_put_failure_counted);
    RUN(test_queue_bounded);
    RUN(test_queue_in_memory_limit);
    RUN(test_fetch_in_blocks);
    reset_bucket();
    return test_summary();
}
