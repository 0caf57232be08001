/* One engine transfer, for the fault tests (tests/integration/test_engine_faults.py): the
 * test puts tests/servers/faultproxy.py between this program and the server, sets its
 * faults, runs one operation here, and checks the result itself (bytes by hash, the bucket
 * and its multipart uploads with an independent client).
 *
 *   xfer_fault_test upload_buffer   BUCKET KEY SRC        s3f_upload_buffer of SRC's bytes
 *   xfer_fault_test upload_file     BUCKET KEY SRC        s3f_upload_file
 *   xfer_fault_test writer          BUCKET KEY SRC [N]    s3f_writer_*, writes of N bytes
 *   xfer_fault_test download_buffer BUCKET KEY DST SIZE   s3f_download_buffer, then DST
 *   xfer_fault_test download_file   BUCKET KEY DST        s3f_download_file
 *   xfer_fault_test reader          BUCKET KEY DST [N]    s3f_reader_*, reads of N bytes
 *   xfer_fault_test download_stream BUCKET KEY DST        s3f_download_stream into DST
 *   xfer_fault_test put_if_absent   BUCKET KEY SRC        s3f_put_object, If-None-Match: *
 *   xfer_fault_test download_alloc  BUCKET KEY DST        s3f_download_alloc, then DST
 *   xfer_fault_test download_range  BUCKET KEY DST OFFSET LEN   s3f_download_iov of bytes
 *                                   [OFFSET, OFFSET+LEN) into 3 regions (LEN 0: to the end,
 *                                   into one of the object's size less OFFSET), then DST;
 *                                   FAULT_IF_MATCH: the If-Match ETag
 *
 * Environment: S3FLASH_TEST_ENDPOINT (the proxy), _ACCESS_KEY, _SECRET_KEY, _REGION
 * (FAULT_CHAIN_CREDS=1: ignore the keys, use the default credentials chain);
 * FAULT_PART_BYTES (default 5 MiB), FAULT_STALL_MS (stall timeout, default the library's),
 * FAULT_INFLIGHT (max_inflight_requests), FAULT_VERIFY (verify_checksum of downloads),
 * FAULT_CHECKSUM (the uploads' checksum: none, crc32c, crc32, crc64nvme; default the
 * library's), FAULT_REPEAT (upload_file: that many uploads in a row, timed together),
 * FAULT_CONNECTIONS (max_connections), FAULT_IO_THREADS (io_threads), FAULT_MEMORY_BYTES
 * (memory_limit_bytes), FAULT_PROGRESS_BLOCK_MS
 * (upload_buffer, download_buffer: a progress callback that blocks that long on its first
 * call; prints "progress_calls=N progress_off_main=M", M the calls not on the main thread),
 * FAULT_HEAD_DURING=N (upload_buffer: a HeadObject of KEY from another thread once N data
 * requests are in flight; prints "head_status=NAME head_attempts=N").
 * Retries: AWS_MAX_ATTEMPTS, S3FLASH_RETRY_BASE_MS; logs: S3FLASH_LOG (to stderr).
 *
 * Prints "status=NAME", "elapsed=SECONDS", and "error=..." (s3f_error_format) or
 * "size=N etag=...", then "requests_started=N" and the bandwidth-delay estimate
 * ("estimate_bps=... estimate_latency_ms=... estimate_samples=N max_inflight=N"; the
 * client's stats); for the writer
 * also "write_status=NAME at=OFFSET" of the first failed write; last "client_free_s=SECONDS", the time s3f_client_free took. Exits 0 on S3F_OK,
 * 1 on a failed transfer, 2 on a usage or local error. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>

#include "s3flash/s3flash.h"

#define MIB ((size_t)1 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned long long env_ull(const char *name, unsigned long long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *p = malloc(n ? n : 1);
    if (p && n && fread(p, 1, n, f) != n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = n;
    return p;
}

static int write_all(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* FAULT_PROGRESS_BLOCK_MS: a progress callback that blocks that long on its first call
 * (a stopped terminal, a busy GIL); it counts its calls and those not on the main thread. */
static pthread_t main_thread;
static unsigned progress_calls, progress_off_main;
static void blocking_progress(void *ud, uint64_t done, uint64_t total) {
    (void)ud;
    (void)done;
    (void)total;
    if (!pthread_equal(pthread_self(), main_thread))
        progress_off_main++;
    if (progress_calls++ == 0) {
        unsigned long long ms = strtoull(getenv("FAULT_PROGRESS_BLOCK_MS"), NULL, 10);
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}

static s3f_progress_fn progress_fn(void) {
    const char *v = getenv("FAULT_PROGRESS_BLOCK_MS");
    return v && *v ? blocking_progress : NULL;
}

/* FAULT_HEAD_DURING=N: while the transfer has N data requests in flight, another thread
 * sends one HeadObject of the transfer's key; prints "head_status=NAME head_attempts=N". */
struct head_during {
    struct s3f_client *c;
    const char *bucket, *key;
    unsigned when;
    enum s3f_status st;
    int attempts;
};

static void *head_during_main(void *arg) {
    struct head_during *h = arg;
    struct s3f_client_stats cs;
    double until = now_s() + 60;
    do {
        usleep(1000);
        s3f_client_stats(h->c, &cs, 0);
    } while (cs.inflight_requests < h->when && now_s() < until);
    struct s3f_error e;
    s3f_error_clear(&e);
    h->st = s3f_head_object(h->c, h->bucket, h->key, NULL, NULL, &e);
    h->attempts = e.attempts ? e.attempts : 1; /* set on failure (404 included) */
    return NULL;
}

/* download_stream: bytes in order into a FILE (fails on a gap: they must come in order) */
static int stream_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    FILE *f = ud;
    if ((uint64_t)ftello(f) != offset)
        return 1;
    return fwrite(data, 1, len, f) == len ? 0 : 1;
}

static int report(enum s3f_status st, double t0, const struct s3f_error *e,
                  const struct s3f_object_info *info) {
    printf("status=%s\n", s3f_status_name(st));
    if (progress_fn())
        printf("progress_calls=%u progress_off_main=%u\n", progress_calls, progress_off_main);
    printf("elapsed=%.3f\n", now_s() - t0);
    if (st) {
        char line[1600];
        s3f_error_format(e, line, sizeof(line));
        printf("error=%s\n", line);
        printf("attempts=%d\n", e->attempts);
    } else if (info) {
        printf("size=%llu etag=%s\n", (unsigned long long)info->size, info->etag);
    }
    fflush(stdout);
    return st ? 1 : 0;
}

/* expired_beside: a GET of KEY (one request, throttled by the proxy) streams on while, on
 * the same I/O thread, a PutObject of KEY.beside is answered ExpiredToken and waits for
 * a slow credential fetch. The longest gap between the GET's body callbacks while the PUT
 * waited tells whether the I/O thread kept moving (issue 20, item 7). */
struct beside_get {
    pthread_mutex_t lock;
    double last, max_gap, gap_from, gap_to;
    uint64_t bytes;
};

static int beside_sink(void *ud, const void *data, size_t len, uint64_t offset) {
    struct beside_get *g = ud;
    (void)data;
    (void)offset;
    double t = now_s();
    pthread_mutex_lock(&g->lock);
    if (g->last > 0 && t - g->last > g->max_gap) {
        g->max_gap = t - g->last;
        g->gap_from = g->last;
        g->gap_to = t;
    }
    g->last = t;
    g->bytes += len;
    pthread_mutex_unlock(&g->lock);
    return 0;
}

struct beside_job {
    struct s3f_client *c;
    const char *bucket, *key;
    struct beside_get g;
    enum s3f_status st;
    struct s3f_error e;
};

static void *beside_get_main(void *arg) {
    struct beside_job *j = arg;
    j->st = s3f_get_object(j->c, j->bucket, j->key, NULL, beside_sink, &j->g, NULL, &j->e);
    return NULL;
}

static int expired_beside(struct s3f_client *c, const char *bucket, const char *key) {
    struct beside_job j = {.c = c, .bucket = bucket, .key = key};
    pthread_mutex_init(&j.g.lock, NULL);
    pthread_t th;
    pthread_create(&th, NULL, beside_get_main, &j);
    /* wait (bounded) for the GET's body to flow */
    double until = now_s() + 20;
    for (;;) {
        pthread_mutex_lock(&j.g.lock);
        uint64_t b = j.g.bytes;
        pthread_mutex_unlock(&j.g.lock);
        if (b > 0 || now_s() > until)
            break;
        usleep(10000);
    }
    char bkey[1100];
    snprintf(bkey, sizeof(bkey), "%s.beside", key);
    struct s3f_error e;
    s3f_error_clear(&e);
    double p0 = now_s();
    enum s3f_status pst = s3f_put_object(c, bucket, bkey, "beside", 6, NULL, NULL, &e);
    double p1 = now_s();
    pthread_join(th, NULL);
    /* the longest gap of the GET that overlaps the PUT's wait */
    double gap = j.g.max_gap;
    bool overlaps = j.g.gap_to > p0 && j.g.gap_from < p1;
    printf("put_status=%s put_ms=%.0f\n", s3f_status_name(pst), (p1 - p0) * 1e3);
    printf("get_status=%s get_bytes=%llu\n", s3f_status_name(j.st),
           (unsigned long long)j.g.bytes);
    printf("get_max_gap_ms=%.0f overlaps_put=%d\n", gap * 1e3, overlaps ? 1 : 0);
    if (pst) {
        char line[1600];
        s3f_error_format(&e, line, sizeof(line));
        printf("error=%s\n", line);
    }
    fflush(stdout);
    pthread_mutex_destroy(&j.g.lock);
    return pst || j.st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: xfer_fault_test OP BUCKET KEY PATH [N]\n");
        return 2;
    }
    const char *op = argv[1], *bucket = argv[2], *key = argv[3], *path = argv[4];
    main_thread = pthread_self();
    struct s3f_client_options o = {0};
    o.endpoint_url = getenv("S3FLASH_TEST_ENDPOINT");
    o.access_key_id = getenv("S3FLASH_TEST_ACCESS_KEY");
    o.secret_access_key = getenv("S3FLASH_TEST_SECRET_KEY");
    o.region = getenv("S3FLASH_TEST_REGION");
    if (!o.region)
        o.region = "us-east-1";
    if (!o.endpoint_url || !o.access_key_id || !o.secret_access_key) {
        fprintf(stderr, "set S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY\n");
        return 2;
    }
    if (getenv("FAULT_CHAIN_CREDS")) /* the default chain (a profile's credential_process) */
        o.access_key_id = o.secret_access_key = NULL;
    o.force_path_style = 1;
    o.part_size_bytes = env_ull("FAULT_PART_BYTES", 5 * MIB);
    o.stall_timeout_ms = (uint32_t)env_ull("FAULT_STALL_MS", 0);
    o.max_inflight_requests = (uint32_t)env_ull("FAULT_INFLIGHT", 0);
    o.max_connections = (uint32_t)env_ull("FAULT_CONNECTIONS", 0);
    o.io_threads = (uint32_t)env_ull("FAULT_IO_THREADS", 0);
    o.memory_limit_bytes = env_ull("FAULT_MEMORY_BYTES", 0);
    struct s3f_client *c = NULL;
    struct s3f_error e;
    s3f_error_clear(&e);
    if (s3f_client_new(&o, &c, &e) != S3F_OK) {
        char line[1600];
        s3f_error_format(&e, line, sizeof(line));
        fprintf(stderr, "client: %s\n", line);
        return 2;
    }
    struct s3f_upload_options uo;
    memset(&uo, 0, sizeof(uo));
    const char *ck = getenv("FAULT_CHECKSUM");
    if (ck && *ck)
        uo.checksum = !strcmp(ck, "none")       ? S3F_CHECKSUM_NONE
                      : !strcmp(ck, "crc32")    ? S3F_CHECKSUM_CRC32
                      : !strcmp(ck, "crc64nvme") ? S3F_CHECKSUM_CRC64NVME
                                                : S3F_CHECKSUM_CRC32C;
    if (getenv("FAULT_CHAIN_CREDS")) {
        /* fetch the credentials before the clock starts, as a long-lived process has them */
        char src[64];
        if (s3f_client_credentials_source(c, src, sizeof(src), NULL, 0, &e) != S3F_OK) {
            char line[1600];
            s3f_error_format(&e, line, sizeof(line));
            fprintf(stderr, "credentials: %s\n", line);
            s3f_client_free(c);
            return 2;
        }
    }
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    enum s3f_status st;
    int rc = 2;
    double t0 = now_s();

    if (strcmp(op, "upload_buffer") == 0 || strcmp(op, "writer") == 0) {
        size_t n = 0;
        unsigned char *data = read_all(path, &n);
        if (!data) {
            fprintf(stderr, "cannot read %s\n", path);
            s3f_client_free(c);
            return 2;
        }
        t0 = now_s();
        if (op[0] == 'u') {
            uo.progress = progress_fn();
            struct head_during hd = {c, bucket, key, (unsigned)env_ull("FAULT_HEAD_DURING", 0),
                                     S3F_OK, 0};
            pthread_t ht;
            bool head = hd.when && pthread_create(&ht, NULL, head_during_main, &hd) == 0;
            st = s3f_upload_buffer(c, bucket, key, data, n, &uo, &info, &e);
            if (head) {
                pthread_join(ht, NULL);
                printf("head_status=%s head_attempts=%d\n", s3f_status_name(hd.st),
                       hd.attempts);
            }
        } else {
            size_t step = argc > 5 ? (size_t)strtoull(argv[5], NULL, 10) : 100000;
            struct s3f_writer *w = NULL;
            st = s3f_writer_open(c, bucket, key, &uo, &w, &e);
            if (st == S3F_OK) {
                size_t off = 0;
                enum s3f_status ws = S3F_OK;
                while (off < n) {
                    size_t k = n - off < step ? n - off : step;
                    ws = s3f_writer_write(w, data + off, k, &e);
                    if (ws != S3F_OK)
                        break;
                    off += k;
                }
                if (ws != S3F_OK) {
                    char line[1600];
                    s3f_error_format(&e, line, sizeof(line));
                    printf("write_status=%s at=%zu\nwrite_error=%s\n", s3f_status_name(ws), off,
                           line);
                }
                st = s3f_writer_close(w, &info, &e);
            }
        }
        rc = report(st, t0, &e, &info);
        free(data);
    } else if (strcmp(op, "put_if_absent") == 0) {
        size_t n = 0;
        unsigned char *data = read_all(path, &n);
        if (!data) {
            fprintf(stderr, "cannot read %s\n", path);
            s3f_client_free(c);
            return 2;
        }
        struct s3f_put_options po = {.if_none_match = "*", .checksum = uo.checksum};
        t0 = now_s();
        st = s3f_put_object(c, bucket, key, data, n, &po, &info, &e);
        rc = report(st, t0, &e, &info);
        free(data);
    } else if (strcmp(op, "upload_file") == 0) {
        /* FAULT_REPEAT=N: N uploads of the file (to the same key) by this client */
        unsigned long long n = env_ull("FAULT_REPEAT", 1);
        st = S3F_OK;
        for (unsigned long long i = 0; i < (n ? n : 1) && st == S3F_OK; i++)
            st = s3f_upload_file(c, bucket, key, path, &uo, &info, &e);
        rc = report(st, t0, &e, &info);
    } else if (strcmp(op, "download_buffer") == 0 && argc > 5) {
        size_t n = (size_t)strtoull(argv[5], NULL, 10);
        unsigned char *buf = malloc(n + 16);
        struct s3f_download_options d = {.verify_checksum = (int)atoi(
                                             getenv("FAULT_VERIFY") ? getenv("FAULT_VERIFY") : "0"),
                                         .progress = progress_fn()};
        st = s3f_download_buffer(c, bucket, key, buf, n + 16, &d, &info, &e);
        rc = report(st, t0, &e, &info);
        /* the bytes are handed over only on success */
        if (st == S3F_OK && write_all(path, buf, (size_t)info.size) != 0)
            rc = 2;
        free(buf);
    } else if (strcmp(op, "download_file") == 0) {
        struct s3f_download_options d = {.verify_checksum = (int)atoi(
                                             getenv("FAULT_VERIFY") ? getenv("FAULT_VERIFY") : "0")};
        st = s3f_download_file(c, bucket, key, path, &d, &info, &e);
        rc = report(st, t0, &e, &info);
    } else if (strcmp(op, "download_stream") == 0) {
        /* the bytes go to the file in order as they come (a stream cannot take them back:
         * after a failure the file holds what came before it) */
        struct s3f_download_options d = {.verify_checksum = (int)atoi(
                                             getenv("FAULT_VERIFY") ? getenv("FAULT_VERIFY") : "0")};
        FILE *f = fopen(path, "wb");
        st = f ? s3f_download_stream(c, bucket, key, &d, stream_sink, f, &info, &e) : S3F_ERR_IO;
        if (f && fclose(f) != 0 && st == S3F_OK)
            st = S3F_ERR_IO;
        rc = report(st, t0, &e, &info);
    } else if (strcmp(op, "reader") == 0) {
        size_t step = argc > 5 ? (size_t)strtoull(argv[5], NULL, 10) : 65536;
        struct s3f_reader *r = NULL;
        st = s3f_reader_open(c, bucket, key, NULL, &r, &e);
        unsigned char *buf = NULL;
        size_t off = 0;
        if (st == S3F_OK) {
            uint64_t n = s3f_reader_size(r);
            buf = malloc(n + 1);
            while (off < n) {
                size_t got = 0;
                st = s3f_reader_read(r, buf + off, step, &got, &e);
                if (st != S3F_OK || got == 0)
                    break;
                off += got;
            }
            info = *s3f_reader_info(r);
            s3f_reader_close(r);
        }
        rc = report(st, t0, &e, &info);
        if (st == S3F_OK && write_all(path, buf, off) != 0)
            rc = 2;
        free(buf);
    } else if (strcmp(op, "expired_beside") == 0) {
        rc = expired_beside(c, bucket, key);
    } else if (strcmp(op, "download_range") == 0 && argc > 6) {
        uint64_t off = strtoull(argv[5], NULL, 10), len = strtoull(argv[6], NULL, 10);
        struct s3f_download_options d = {.range_offset = off, .range_bytes = len,
                                         .if_match = getenv("FAULT_IF_MATCH")};
        size_t cap = len ? (size_t)len : (size_t)env_ull("FAULT_RANGE_CAP", 64 * MIB);
        unsigned char *buf = malloc(cap + 1);
        /* three regions of uneven sizes: the parts do not line up with them */
        size_t a = cap / 3, b = cap / 2 - a / 2;
        struct s3f_iovec iov[3] = {{buf, a}, {buf + a, b}, {buf + a + b, cap - a - b}};
        st = s3f_download_iov(c, bucket, key, iov, 3, &d, &info, &e);
        rc = report(st, t0, &e, &info);
        if (st == S3F_OK && write_all(path, buf, (size_t)info.size) != 0)
            rc = 2;
        free(buf);
    } else if (strcmp(op, "download_alloc") == 0) {
        struct s3f_download_options d = {.verify_checksum = (int)atoi(
                                             getenv("FAULT_VERIFY") ? getenv("FAULT_VERIFY") : "0")};
        void *data = NULL;
        size_t n = 0;
        st = s3f_download_alloc(c, bucket, key, &d, NULL, NULL, &data, &n, &info, &e);
        rc = report(st, t0, &e, &info);
        if (st == S3F_OK && write_all(path, data, n) != 0)
            rc = 2;
        free(data);
    } else {
        fprintf(stderr, "unknown operation %s\n", op);
    }
    /* FAULT_WAIT_ABORTS_S: keep the client (and its background aborts) alive up to that
     * long, until no abort is pending; print how many were pending and are left */
    double wait_s = (double)env_ull("FAULT_WAIT_ABORTS_S", 0);
    if (wait_s > 0) {
        struct s3f_client_stats cs;
        s3f_client_stats(c, &cs, 0);
        printf("pending_aborts_at_end=%u\n", cs.pending_aborts);
        double until = now_s() + wait_s;
        while (cs.pending_aborts && now_s() < until) {
            usleep(100000);
            s3f_client_stats(c, &cs, 0);
        }
        printf("pending_aborts_left=%u\n", cs.pending_aborts);
        fflush(stdout);
    }
    struct s3f_client_stats fs;
    s3f_client_stats(c, &fs, 0);
    printf("requests_started=%llu\n", (unsigned long long)fs.requests_started);
    printf("estimate_bps=%.0f estimate_latency_ms=%.2f estimate_samples=%u max_inflight=%u\n",
           fs.connection_bytes_per_s, fs.first_byte_latency_s * 1e3, fs.estimate_samples,
           fs.max_inflight_requests);
    fflush(stdout);
    double t_free = now_s();
    s3f_client_free(c);
    printf("client_free_s=%.3f\n", now_s() - t_free);
    return rc;
}
