/* Part planning: sizes around every boundary, growth to fit 10,000 parts, the stream
 * growth rule and concurrency from the throughput target. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "http/http.h"
#include "xfer/xfer.h"

#define MIB S3F__MIB
#define GIB S3F__GIB

static uint64_t plan(uint64_t size, uint64_t configured) {
    uint64_t p = 0;
    struct s3f_error e;
    enum s3f_status st = s3f__plan_part_size(size, configured, &p, &e);
    CHECK_INT(st, S3F_OK);
    return p;
}

static void test_known_sizes(void) {
    uint64_t P = 8 * MIB;
    struct { uint64_t size; uint32_t parts; } cases[] = {
        {0, 1}, {1, 1}, {P - 1, 1}, {P, 1}, {P + 1, 2}, {3 * P + 1, 4}, {100 * MIB, 13},
        {10000 * P, 10000},
    };
    for (size_t i = 0; i < S3F_ARRAY_LEN(cases); i++) {
        uint64_t p = plan(cases[i].size, P);
        CHECK_INT(p, P);
        CHECK_INT(s3f__plan_part_count(cases[i].size, p), cases[i].parts);
    }
    /* below the minimum: raised to 5 MiB */
    CHECK_INT(plan(100 * MIB, 1 * MIB), 5 * MIB);
    CHECK_INT(plan(100 * MIB, 0), 5 * MIB);
    /* above the maximum: 5 GiB */
    CHECK_INT(plan(100 * MIB, 6 * GIB), 5 * GIB);
}

static void test_growth(void) {
    uint64_t P = 8 * MIB;
    /* one byte more than 10,000 parts of 8 MiB: the next whole MiB */
    uint64_t s = 10000 * P + 1;
    uint64_t p = plan(s, P);
    CHECK_INT(p, 9 * MIB);
    CHECK(s3f__plan_part_count(s, p) <= 10000);
    /* sizes up to 5 TiB and a bit: part sizes in whole MiB, never more than 10,000 parts,
     * and the smallest such MiB multiple */
    uint64_t sizes[] = {100 * GIB, 1000 * GIB, 5ull << 40, (5ull << 40) + 12345,
                        10000 * 5 * GIB};
    for (size_t i = 0; i < S3F_ARRAY_LEN(sizes); i++) {
        p = plan(sizes[i], P);
        CHECK_INT(p % MIB, 0);
        CHECK(p >= P);
        CHECK(p <= 5 * GIB);
        CHECK(s3f__plan_part_count(sizes[i], p) <= 10000);
        if (p > P)
            CHECK(s3f__plan_part_count(sizes[i], p - MIB) > 10000);
    }
    /* too large for 10,000 parts of 5 GiB */
    struct s3f_error e;
    CHECK_INT(s3f__plan_part_size(10000 * 5 * GIB + 1, P, &p, &e), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(e.message, "10000 parts") != NULL);
}

static void test_stream(void) {
    uint64_t P = 8 * MIB;
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 0), 0);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 1), P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 1000), P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 1001), 2 * P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 2001), 4 * P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 9001), 512 * P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 10000), 512 * P);
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * GIB, 10001), 0);
    /* capped (by half the memory limit) */
    CHECK_INT(s3f__plan_stream_part_size(P, 256 * MIB, 9001), 256 * MIB);
    CHECK_INT(s3f__plan_stream_part_size(P, 256 * MIB, 3001), 64 * MIB);
    CHECK_INT(s3f__plan_stream_part_size(P, 256 * MIB, 4001), 128 * MIB);
    /* cap below base: the cap */
    CHECK_INT(s3f__plan_stream_part_size(P, 5 * MIB, 1), 5 * MIB);
    /* every part but the last of a stream is at least 5 MiB and part sizes never shrink */
    uint64_t prev = 0;
    uint32_t bad = 0;
    for (uint32_t k = 1; k <= 10000; k++) {
        uint64_t sz = s3f__plan_stream_part_size(5 * MIB, 5 * GIB, k);
        if (sz < prev || sz < 5 * MIB || sz > 5 * GIB)
            bad = k;
        prev = sz;
    }
    CHECK_INT(bad, 0);
    /* a stream of unknown length: how many parts does a stream of N bytes take? */
    uint64_t cap = s3f__plan_stream_capacity(P, 5 * GIB, 10000);
    CHECK_INT(cap, 8 * MIB * 1000 * 1023);
    CHECK(cap > (5ull << 40)); /* more than S3's 5 TiB object limit */
    uint64_t total = 0;
    uint32_t k = 0;
    while (total < (5ull << 40)) {
        total += s3f__plan_stream_part_size(P, 5 * GIB, ++k);
        if (k > 10000)
            break;
    }
    CHECK(k <= 10000);
    /* with a 512 MiB memory limit (cap 256 MiB) a stream still holds 1.4 TiB */
    uint64_t cap512 = s3f__plan_stream_capacity(P, 256 * MIB, 10000);
    CHECK_INT(cap512, 1000 * (8 + 16 + 32 + 64 + 128) * MIB + 5000 * 256 * MIB);
    CHECK_INT(s3f__plan_stream_capacity(P, 5 * GIB, 1500), 1000 * P + 500 * 2 * P);
}

static void test_inflight(void) {
    CHECK_INT(s3f__plan_inflight(10, 64), 25);
    CHECK_INT(s3f__plan_inflight(0, 64), 25);
    CHECK_INT(s3f__plan_inflight(1, 64), 4);
    CHECK_INT(s3f__plan_inflight(2.1, 64), 6);
    CHECK_INT(s3f__plan_inflight(100, 64), 64);
    CHECK_INT(s3f__plan_inflight(100, 0), 250);
}

static uint32_t data_connections(uint32_t io_threads, uint32_t max_connections) {
    struct s3f__http_pool_options o = {.io_threads = io_threads,
                                       .max_connections = max_connections};
    struct s3f__http_pool *pool = NULL;
    struct s3f_error e;
    CHECK_INT(s3f__http_pool_new(&o, &pool, &e), S3F_OK);
    uint32_t n = pool ? s3f__http_pool_data_connections(pool) : 0;
    if (pool)
        s3f__http_pool_free(pool);
    return n;
}

/* The connections kept for control requests are not counted as data slots: the default
 * in-flight count must not plan for more data requests than can be on the wire. */
static void test_data_connections(void) {
    CHECK_INT(data_connections(1, 1), 1);
    CHECK_INT(data_connections(1, 3), 3);
    CHECK_INT(data_connections(1, 4), 3);
    CHECK_INT(data_connections(2, 8), 6);
    CHECK_INT(data_connections(1, 16), 14);
    CHECK_INT(data_connections(2, 64), 60);
    CHECK_INT(s3f__plan_inflight(10, data_connections(1, 4)), 3);
}

int main(void) {
    RUN(test_known_sizes);
    RUN(test_growth);
    RUN(test_stream);
    RUN(test_inflight);
    RUN(test_data_connections);
    return test_summary();
}
