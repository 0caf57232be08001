/* The random-access reader against a known object, under every access pattern its policy
 * tells apart, checked byte for byte (tests/integration/test_reader_stress.py).
 *
 *   reader_stress BUCKET KEY SRC
 *
 * SRC holds the object's bytes (the test uploaded it). Each of STRESS_THREADS threads
 * (default 4) opens its own s3f_reader on the object, or, with STRESS_SHARED=1, they share
 * one reader behind a mutex, as the mount's handle is shared by the kernel's async reads;
 * each runs STRESS_OPS patterns (default 200) chosen by a seeded generator (STRESS_SEED):
 * sequential runs (gaps of up to 4 KiB included), a batch of 128 KiB reads of one range
 * sent in a shuffled order (the kernel's read-ahead under FUSE_CAP_ASYNC_READ), random 4 KiB
 * and 1 MiB reads, reads at and across the end, large reads (straight into the caller's
 * buffer), a backwards scan, and idle pauses of 150 ms (past the reader's idle time, so the
 * pool may take its loans back). Every read's count and bytes are checked against SRC.
 *
 * Environment: S3FLASH_TEST_ENDPOINT (a proxy with faults, or the server), _ACCESS_KEY,
 * _SECRET_KEY, _REGION; STRESS_MEMORY_BYTES (memory_limit_bytes), STRESS_PART_BYTES,
 * STRESS_INFLIGHT (max_inflight_requests), STRESS_TAIL (tail_bytes; -1: none),
 * STRESS_FILL (fill_max_bytes; "max": every object that fits), STRESS_PRESSURE=1 (a writer
 * thread uploads KEY.pressure over and over meanwhile: a blocked acquirer of the pool, which
 * asks idle readers for their loans). Retries: AWS_MAX_ATTEMPTS, S3FLASH_RETRY_BASE_MS.
 *
 * Prints "reads=N bytes=N mismatches=N errors=N" and the first few mismatches and errors;
 * exits 0 only when every read returned the object's bytes, 1 otherwise, 2 on a usage or
 * local error. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "s3flash/s3flash.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

static const char *bucket, *key;
static const unsigned char *src;
static uint64_t size;
static struct s3f_client *client;
static struct s3f_reader_options ropts;
static unsigned ops_per_thread = 200;
static bool shared;
static struct s3f_reader *shared_reader;
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong n_reads, n_bytes, n_mismatch, n_errors;
static atomic_bool stop_pressure;

static unsigned long long env_ull(const char *name, unsigned long long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static uint64_t rnd(uint64_t *x) { /* xorshift64* */
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

static uint64_t below(uint64_t *x, uint64_t n) {
    return n ? rnd(x) % n : 0;
}

/* One pread, checked. */
static void check_read(struct s3f_reader *r, unsigned char *buf, unsigned t, unsigned op,
                       const char *pattern, uint64_t pos, size_t len) {
    size_t got = 0;
    struct s3f_error e;
    s3f_error_clear(&e);
    memset(buf, 0xA5, len);
    if (shared)
        pthread_mutex_lock(&shared_mu);
    enum s3f_status st = s3f_reader_pread(r, buf, len, pos, &got, &e);
    if (shared)
        pthread_mutex_unlock(&shared_mu);
    atomic_fetch_add(&n_reads, 1);
    if (st) {
        if (atomic_fetch_add(&n_errors, 1) < 5) {
            char line[1600];
            s3f_error_format(&e, line, sizeof(line));
            pthread_mutex_lock(&out_mu);
            printf("error: thread %u op %u (%s) pread(%llu, %zu): %s\n", t, op, pattern,
                   (unsigned long long)pos, len, line);
            pthread_mutex_unlock(&out_mu);
        }
        return;
    }
    atomic_fetch_add(&n_bytes, got);
    size_t want = pos >= size ? 0 : (size - pos < len ? (size_t)(size - pos) : len);
    size_t bad = SIZE_MAX;
    if (got != want) {
        bad = got < want ? got : want;
    } else {
        for (size_t i = 0; i < got; i++)
            if (buf[i] != src[pos + i]) {
                bad = i;
                break;
            }
    }
    if (bad == SIZE_MAX)
        return;
    if (atomic_fetch_add(&n_mismatch, 1) < 5) {
        size_t last = bad;
        for (size_t i = bad; i < got && i < want; i++)
            if (buf[i] != src[pos + i])
                last = i;
        pthread_mutex_lock(&out_mu);
        printf("mismatch: thread %u op %u (%s) pread(%llu, %zu) returned %zu of %zu bytes; "
               "first wrong byte at object offset %llu (last %llu): got", t, op, pattern,
               (unsigned long long)pos, len, got, want, (unsigned long long)(pos + bad),
               (unsigned long long)(pos + last));
        for (size_t i = bad; i < bad + 8 && i < got; i++)
            printf(" %02x", buf[i]);
        printf(", want");
        for (size_t i = bad; i < bad + 8 && i < want; i++)
            printf(" %02x", src[pos + i]);
        printf("\n");
        pthread_mutex_unlock(&out_mu);
    }
}

static uint64_t rand_pos(uint64_t *x, uint64_t align) {
    uint64_t p = below(x, size);
    return p / align * align;
}

static void *reader_main(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg;
    uint64_t x = env_ull("STRESS_SEED", 1) * 0x9E3779B97F4A7C15ull + t + 1;
    struct s3f_reader *r = shared_reader;
    struct s3f_error e;
    s3f_error_clear(&e);
    if (!r && s3f_reader_open(client, bucket, key, &ropts, &r, &e) != S3F_OK) {
        char line[1600];
        s3f_error_format(&e, line, sizeof(line));
        printf("error: thread %u open: %s\n", t, line);
        atomic_fetch_add(&n_errors, 1);
        return NULL;
    }
    unsigned char *buf = malloc(9 * MIB);
    if (!buf) {
        atomic_fetch_add(&n_errors, 1);
        return NULL;
    }
    static const size_t lens[] = {4 * KIB, 64 * KIB, 128 * KIB, 1 * MIB};
    for (unsigned op = 0; op < ops_per_thread; op++) {
        switch (below(&x, 8)) {
        case 0: { /* a sequential run, sometimes with small gaps */
            uint64_t p = rand_pos(&x, below(&x, 2) ? 4 * KIB : 1);
            unsigned n = 2 + (unsigned)below(&x, 20);
            for (unsigned i = 0; i < n && p < size; i++) {
                size_t len = below(&x, 3) ? lens[below(&x, 4)] : 1 + below(&x, 3 * MIB);
                check_read(r, buf, t, op, "sequential", p, len);
                p += len + (below(&x, 4) == 0 ? below(&x, 4 * KIB + 1) : 0);
            }
            break;
        }
        case 1: { /* the kernel's read-ahead under async reads: one range, shuffled */
            unsigned m = 2 + (unsigned)below(&x, 15);
            uint64_t p = rand_pos(&x, 4 * KIB);
            unsigned order[16];
            for (unsigned i = 0; i < m; i++)
                order[i] = i;
            for (unsigned i = m - 1; i > 0; i--) {
                unsigned j = (unsigned)below(&x, i + 1), tmp = order[i];
                if (below(&x, 2)) { /* mostly near their place, as the kernel's are */
                    order[i] = order[j];
                    order[j] = tmp;
                }
            }
            for (unsigned i = 0; i < m; i++)
                check_read(r, buf, t, op, "shuffled", p + order[i] * 128 * KIB, 128 * KIB);
            break;
        }
        case 2: { /* random small reads */
            unsigned n = 1 + (unsigned)below(&x, 10);
            for (unsigned i = 0; i < n; i++)
                check_read(r, buf, t, op, "random 4 KiB", rand_pos(&x, 4 * KIB), 4 * KIB);
            break;
        }
        case 3: { /* random 1 MiB reads */
            unsigned n = 1 + (unsigned)below(&x, 4);
            for (unsigned i = 0; i < n; i++)
                check_read(r, buf, t, op, "random 1 MiB", rand_pos(&x, 1), MIB);
            break;
        }
        case 4: { /* at and across the end */
            uint64_t back = below(&x, 2 * MIB + 2);
            uint64_t p = back > size ? 0 : size - back;
            check_read(r, buf, t, op, "end", p + below(&x, 2), 1 + below(&x, 2 * MIB));
            break;
        }
        case 5: /* large: straight into the caller's buffer */
            check_read(r, buf, t, op, "large", rand_pos(&x, 1), 2 * MIB + below(&x, 7 * MIB));
            break;
        case 6: { /* a backwards scan */
            uint64_t p = rand_pos(&x, 64 * KIB);
            unsigned n = 2 + (unsigned)below(&x, 8);
            for (unsigned i = 0; i < n; i++) {
                check_read(r, buf, t, op, "backwards", p, 64 * KIB);
                if (p < 192 * KIB)
                    break;
                p -= 192 * KIB;
            }
            break;
        }
        default: /* idle: the pool may take the reader's loans back */
            usleep(150 * 1000);
            break;
        }
    }
    free(buf);
    if (!shared_reader)
        s3f_reader_close(r);
    return NULL;
}

/* A writer that needs the pool while the readers hold it (STRESS_PRESSURE). */
static void *pressure_main(void *arg) {
    (void)arg;
    char pkey[1100];
    snprintf(pkey, sizeof(pkey), "%s.pressure", key);
    size_t n = 24 * MIB < size ? 24 * MIB : (size_t)size;
    while (!atomic_load(&stop_pressure)) {
        struct s3f_error e;
        s3f_error_clear(&e);
        if (s3f_upload_buffer(client, bucket, pkey, src, n, NULL, NULL, &e) != S3F_OK) {
            char line[1600];
            s3f_error_format(&e, line, sizeof(line));
            printf("pressure upload: %s\n", line); /* not the reader's: reported only */
            usleep(100 * 1000);
        }
    }
    return NULL;
}

static unsigned char *read_file(const char *path, uint64_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat sb;
    unsigned char *p = NULL;
    if (fstat(fileno(f), &sb) == 0 && (p = malloc(sb.st_size ? (size_t)sb.st_size : 1)) &&
        sb.st_size && fread(p, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (uint64_t)sb.st_size;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: reader_stress BUCKET KEY SRC\n");
        return 2;
    }
    bucket = argv[1];
    key = argv[2];
    if (!(src = read_file(argv[3], &size))) {
        fprintf(stderr, "reader_stress: cannot read %s\n", argv[3]);
        return 2;
    }
    struct s3f_client_options o = {0};
    o.endpoint_url = getenv("S3FLASH_TEST_ENDPOINT");
    o.access_key_id = getenv("S3FLASH_TEST_ACCESS_KEY");
    o.secret_access_key = getenv("S3FLASH_TEST_SECRET_KEY");
    o.region = getenv("S3FLASH_TEST_REGION") ? getenv("S3FLASH_TEST_REGION") : "us-east-1";
    if (!o.endpoint_url || !o.access_key_id || !o.secret_access_key) {
        fprintf(stderr, "set S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY\n");
        return 2;
    }
    o.force_path_style = 1;
    o.memory_limit_bytes = env_ull("STRESS_MEMORY_BYTES", 0);
    o.part_size_bytes = env_ull("STRESS_PART_BYTES", 0);
    o.max_inflight_requests = (uint32_t)env_ull("STRESS_INFLIGHT", 0);
    struct s3f_error e;
    s3f_error_clear(&e);
    if (s3f_client_new(&o, &client, &e) != S3F_OK) {
        char line[1600];
        s3f_error_format(&e, line, sizeof(line));
        fprintf(stderr, "client: %s\n", line);
        return 2;
    }
    const char *tail = getenv("STRESS_TAIL"), *fill = getenv("STRESS_FILL");
    if (tail && *tail)
        ropts.tail_bytes = tail[0] == '-' ? UINT64_MAX : strtoull(tail, NULL, 10);
    if (fill && *fill)
        ropts.fill_max_bytes = strcmp(fill, "max") == 0 ? UINT64_MAX : strtoull(fill, NULL, 10);
    unsigned threads = (unsigned)env_ull("STRESS_THREADS", 4);
    ops_per_thread = (unsigned)env_ull("STRESS_OPS", 200);
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "STRESS_THREADS: 1 to 64\n");
        return 2;
    }
    shared = env_ull("STRESS_SHARED", 0) != 0;
    if (shared && s3f_reader_open(client, bucket, key, &ropts, &shared_reader, &e) != S3F_OK) {
        char line[1600];
        s3f_error_format(&e, line, sizeof(line));
        printf("error: open: %s\n", line);
        return 1;
    }
    pthread_t pressure, th[64];
    bool with_pressure = env_ull("STRESS_PRESSURE", 0) != 0;
    if (with_pressure)
        pthread_create(&pressure, NULL, pressure_main, NULL);
    for (unsigned i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, reader_main, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    atomic_store(&stop_pressure, true);
    if (with_pressure)
        pthread_join(pressure, NULL);
    if (shared_reader)
        s3f_reader_close(shared_reader);
    struct s3f_client_stats cs;
    s3f_client_stats(client, &cs, 0);
    s3f_client_free(client);
    printf("reads=%llu bytes=%llu mismatches=%llu errors=%llu requests_started=%llu\n",
           (unsigned long long)n_reads, (unsigned long long)n_bytes,
           (unsigned long long)n_mismatch, (unsigned long long)n_errors,
           (unsigned long long)cs.requests_started);
    free((void *)src);
    return n_mismatch || n_errors ? 1 : 0;
}
