/* The block cache against a real server, one step per process (a new process is a
 * restart of the client), through the public header only; driven by test_cache.py, which
 * counts the requests on the wire with tests/servers/faultproxy.py.
 *   cache_test put BUCKET KEY SIZE SEED
 *   cache_test read MODE BUCKET KEY SIZE SEED CACHE_DIR [MAX_BYTES]
 *     MODE: reader (s3f_reader, reads of 1 MiB + 7 bytes), random (s3f_reader, 4 KiB reads
 *     at scattered offsets), one (s3f_reader, one 4 KiB read inside block 7), buffer (s3f_download_buffer), iov (s3f_download_iov into
 *     regions that blocks straddle), alloc (s3f_download_alloc),
 *     file (s3f_download_file); checks every byte against the pattern of SEED and prints
 *     "stats hits=H misses=M hit_bytes=B inserted=I errors=E dropped=D evicted=V pending=P
 *     ms=T" (T: the read's time), once nothing is pending.
 * Needs S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY. Exit status 0 when all is right. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "s3flash/s3flash.h"

static unsigned char *pattern(size_t n, unsigned seed) {
    unsigned char *p = malloc(n ? n : 1);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (unsigned char)(x >> (8 * (i % 8)));
    }
    return p;
}

static struct s3f_client *client(const char *cache_dir, uint64_t max) {
    struct s3f_client_options o = {0};
    o.endpoint_url = getenv("S3FLASH_TEST_ENDPOINT");
    o.region = getenv("S3FLASH_TEST_REGION") ? getenv("S3FLASH_TEST_REGION") : "us-east-1";
    o.force_path_style = 1;
    o.access_key_id = getenv("S3FLASH_TEST_ACCESS_KEY");
    o.secret_access_key = getenv("S3FLASH_TEST_SECRET_KEY");
    o.part_size_bytes = 5 << 20;
    o.cache_dir = cache_dir;
    o.cache_max_bytes = max;
    o.cache_min_free_bytes = 1; /* the test machine's disk may be fuller than 95% */
    o.log_level = S3F_LOG_WARN;
    struct s3f_client *c = NULL;
    struct s3f_error e;
    if (s3f_client_new(&o, &c, &e)) {
        char line[1024];
        s3f_error_format(&e, line, sizeof(line));
        fprintf(stderr, "client: %s\n", line);
        exit(2);
    }
    return c;
}

static int fail(const char *what, const struct s3f_error *e) {
    char line[1400];
    s3f_error_format(e, line, sizeof(line));
    fprintf(stderr, "%s: %s\n", what, line);
    return 1;
}

static void *alloc_counted(void *ud, size_t n) {
    (*(int *)ud)++;
    return malloc(n ? n : 1);
}

static int read_object(const char *mode, const char *bucket, const char *key, size_t size,
                       unsigned seed, const char *cache_dir, uint64_t max) {
    struct s3f_client *c = client(cache_dir, max);
    unsigned char *want = pattern(size, seed);
    unsigned char *got = calloc(1, size ? size : 1);
    struct s3f_error e;
    enum s3f_status st = S3F_OK;
    int bad = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!strcmp(mode, "reader") || !strcmp(mode, "random") || !strcmp(mode, "one")) {
        struct s3f_reader *r = NULL;
        if ((st = s3f_reader_open(c, bucket, key, NULL, &r, &e)))
            return fail("open", &e);
        if (!strcmp(mode, "one")) {
            size_t off = ((size_t)7 << 20) + 100, n = 0;
            size_t len = size > off ? (size - off < 4096 ? size - off : 4096) : 0;
            st = s3f_reader_pread(r, got + off, len, off, &n, &e);
            if (n != len || memcmp(got + off, want + off, len))
                bad = 1;
            memcpy(got, want, size);
        } else if (!strcmp(mode, "reader")) {
            size_t at = 0, step = (1 << 20) + 7, n = 0;
            do {
                st = s3f_reader_read(r, got + at, size - at < step ? size - at : step, &n, &e);
                at += n;
            } while (st == S3F_OK && n > 0);
            if (at != size)
                bad = 1;
        } else {
            for (size_t i = 0; i < 64 && st == S3F_OK; i++) {
                size_t off = (size_t)((i * 2654435761u) % size), n = 0;
                size_t len = size - off < 4096 ? size - off : 4096;
                st = s3f_reader_pread(r, got + off, len, off, &n, &e);
                if (n != len || memcmp(got + off, want + off, len))
                    bad = 1;
            }
            memcpy(got, want, size); /* only the ranges read were compared */
        }
        s3f_reader_close(r);
    } else if (!strcmp(mode, "buffer")) {
        st = s3f_download_buffer(c, bucket, key, got, size, NULL, NULL, &e);
    } else if (!strcmp(mode, "iov")) {
        /* regions that blocks straddle: 1.5 MiB, 7 bytes, an empty one, the rest */
        size_t a = size < (3u << 19) ? size : (3u << 19), b = size - a < 7 ? size - a : 7;
        struct s3f_iovec iov[4] = {
            {got, a}, {got + a, b}, {got + a + b, 0}, {got + a + b, size - a - b}};
        st = s3f_download_iov(c, bucket, key, iov, 4, NULL, NULL, &e);
    } else if (!strcmp(mode, "alloc")) {
        void *data = NULL;
        size_t len = 0;
        int calls = 0;
        st = s3f_download_alloc(c, bucket, key, NULL, alloc_counted, &calls, &data, &len, NULL,
                                &e);
        if (st == S3F_OK) {
            if (len != size || calls != 1)
                bad = 1;
            else
                memcpy(got, data, len);
        }
        free(data);
    } else if (!strcmp(mode, "file")) {
        char path[300];
        snprintf(path, sizeof(path), "%s.download", cache_dir);
        st = s3f_download_file(c, bucket, key, path, NULL, NULL, &e);
        FILE *f = st == S3F_OK ? fopen(path, "rb") : NULL;
        if (f) {
            if (fread(got, 1, size, f) != size || fgetc(f) != EOF)
                bad = 1;
            fclose(f);
        }
        unlink(path);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st)
        return fail(mode, &e);
    if (bad || memcmp(got, want, size) != 0) {
        fprintf(stderr, "%s: the bytes differ\n", mode);
        return 1;
    }
    /* the inserts are written by the cache's thread: wait for them (the drain call; a hung
     * disk is caught by the test's own time-out) */
    s3f_client_cache_flush(c);
    struct s3f_client_stats s;
    s3f_client_stats(c, &s, 0);
    printf("stats hits=%llu misses=%llu hit_bytes=%llu inserted=%llu errors=%llu dropped=%llu "
           "evicted=%llu pending=%llu ms=%lld\n",
           (unsigned long long)s.cache_hits, (unsigned long long)s.cache_misses,
           (unsigned long long)s.cache_hit_bytes, (unsigned long long)s.cache_inserted_bytes,
           (unsigned long long)s.cache_errors, (unsigned long long)s.cache_insert_dropped_bytes,
           (unsigned long long)s.cache_evicted_bytes,
           (unsigned long long)s.cache_insert_pending_bytes,
           (long long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
    free(want);
    free(got);
    s3f_client_free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "put")) {
        struct s3f_client *c = client(NULL, 0);
        size_t size = strtoull(argv[4], NULL, 10);
        unsigned char *data = pattern(size, (unsigned)atoi(argv[5]));
        struct s3f_error e;
        if (s3f_upload_buffer(c, argv[2], argv[3], data, size, NULL, NULL, &e))
            return fail("put", &e);
        free(data);
        s3f_client_free(c);
        return 0;
    }
    if ((argc == 8 || argc == 9) && !strcmp(argv[1], "read"))
        return read_object(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 10),
                           (unsigned)atoi(argv[6]), argv[7],
                           argc == 9 ? strtoull(argv[8], NULL, 10) : 0);
    fprintf(stderr, "usage: cache_test put BUCKET KEY SIZE SEED | read MODE BUCKET KEY SIZE "
                    "SEED CACHE_DIR [MAX]\n");
    return 2;
}
