/* What an insert into the block cache costs the reading thread, with eviction running: N
 * blocks of 64 KiB (16 per object) inserted into a cache bounded to a quarter of them, the
 * time of each s3f__cache_put call on the calling thread measured. Run by hand, or by
 * bench/cache_bench.sh, which builds this file against another tree too (main) and prints
 * both side by side:
 *   build/bench/cache_bench DIR [N [wait]]
 * (wait: this tree's s3f__cache_put_wait, which waits for room in the queue instead of
 * dropping: the writer thread's own speed with eviction running.)
 * prints "puts=N total_s=T p50_us=.. p99_us=.. max_us=.. files_bytes=B bound=M" (this
 * tree's also when its writer thread was done, and the bytes inserted and dropped). Uses
 * only the calls both versions of src/cache have (CACHE_BENCH_ASYNC: this tree's, which
 * also waits for its writer thread before counting the files). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"

#define BS ((uint64_t)64 << 10)
#define PER_OBJECT 16

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cache_bench DIR [N]\n");
        return 2;
    }
    size_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 4000;
    bool wait = argc > 3 && !strcmp(argv[3], "wait"); /* this tree: put_wait, no drops */
    uint64_t fsz = 56 + 1 + 8 + 3 + BS; /* header, bucket, key, ETag, data */
    struct s3f__cache_options o = {.dir = argv[1], .max_bytes = n / 4 * fsz,
                                   .min_free_bytes = 1, .block_bytes = BS};
    struct s3f__cache *c = NULL;
    struct s3f_error err;
    if (s3f__cache_open(&o, &c, &err)) {
        fprintf(stderr, "cache_bench: %s\n", err.message);
        return 1;
    }
    char *block = malloc(BS);
    double *lat = malloc(n * sizeof(*lat));
    if (!block || !lat)
        return 1;
    for (uint64_t i = 0; i < BS; i++)
        block[i] = (char)(i * 131);
    struct s3f__cache_object obj;
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        if (i % PER_OBJECT == 0) {
            char key[32];
            snprintf(key, sizeof(key), "k%07zu", i / PER_OBJECT);
            if (i)
                s3f__cache_object_cleanup(&obj);
            if (s3f__cache_object_init(&obj, c, "b", key, "\"e\"", PER_OBJECT * BS))
                return 1;
        }
        double a = now_s();
#ifdef CACHE_BENCH_ASYNC
        if (wait)
            s3f__cache_put_wait(&obj, i % PER_OBJECT, block);
        else
#endif
            s3f__cache_put(&obj, i % PER_OBJECT, block);
        lat[i] = now_s() - a;
    }
    double total = now_s() - t0;
    s3f__cache_object_cleanup(&obj);
#ifdef CACHE_BENCH_ASYNC
    s3f__cache_flush(c); /* the writer thread's inserts and evictions */
    double drained = now_s() - t0;
    struct s3f__cache_counters k;
    s3f__cache_counters(c, &k);
    printf("written_by_s=%.3f inserted=%llu dropped=%llu ", drained,
           (unsigned long long)k.inserted_bytes, (unsigned long long)k.insert_dropped_bytes);
#endif
    qsort(lat, n, sizeof(*lat), by_value);
    printf("puts=%zu total_s=%.3f p50_us=%.0f p99_us=%.0f max_us=%.0f files_bytes=%llu "
           "bound=%llu\n",
           n, total, lat[n / 2] * 1e6, lat[n * 99 / 100] * 1e6, lat[n - 1] * 1e6,
           (unsigned long long)s3f__cache_scan_bytes(c), (unsigned long long)o.max_bytes);
    s3f__cache_free(c);
    free(block);
    free(lat);
    (void)wait;
    return 0;
}
