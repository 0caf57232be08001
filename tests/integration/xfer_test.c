/* The transfer engine against a real server (Ceph RGW; moto for checksums), through the
 * public header only: round trips bit for bit around every part boundary, the writer, iov
 * uploads, files, the reader, aborts and failures, the memory bound and fairness.
 * Needs S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY; run by test_xfer.py.
 *   xfer_test CASE        one case (default: all but the slow ones)
 * Each run works in its own bucket. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "s3flash/s3flash.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define PART (5 * MIB)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *endpoint, *access_key, *secret_key, *region;
static char bucket[64];
static char tmpdir[256];

static struct s3f_client *client_with(uint64_t part, uint64_t mem, uint32_t inflight,
                                      enum s3f_checksum_algorithm ck, uint32_t wait_ms) {
    struct s3f_client_options o = {0};
    o.endpoint_url = endpoint;
    o.region = region ? region : "us-east-1";
    o.force_path_style = 1;
    o.access_key_id = access_key;
    o.secret_access_key = secret_key;
    o.part_size_bytes = part;
    o.memory_limit_bytes = mem;
    o.max_inflight_requests = inflight;
    o.checksum = ck;
    o.memory_wait_timeout_ms = wait_ms;
    struct s3f_client *c = NULL;
    struct s3f_error e;
    if (s3f_client_new(&o, &c, &e)) {
        char line[1024];
        s3f_error_format(&e, line, sizeof(line));
        fprintf(stderr, "client: %s\n", line);
    }
    return c;
}

static struct s3f_client *client_opts(uint64_t part, uint64_t mem, uint32_t inflight,
                                      enum s3f_checksum_algorithm ck) {
    return client_with(part, mem, inflight, ck, 0);
}

static struct s3f_client *client(void) {
    return client_opts(PART, 0, 0, S3F_CHECKSUM_DEFAULT);
}

static void print_err(const char *what, const struct s3f_error *e) {
    char line[1400];
    s3f_error_format(e, line, sizeof(line));
    fprintf(stderr, "  %s: %s\n", what, line);
}

static unsigned char *pattern(size_t n, unsigned seed) {
    unsigned char *p = malloc(n ? n : 1);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (unsigned char)(x >> (8 * (i % 8)));
    return p;
}

/* Independent bitwise CRC32C (Castagnoli, reflected 0x82F63B78), to check the engine's
 * combined whole-object value. */
static uint32_t crc32c_ref(const unsigned char *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

static void crc_b64(uint32_t v, char out[9]) {
    static const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    out[0] = a[b[0] >> 2];
    out[1] = a[((b[0] & 3) << 4) | (b[1] >> 4)];
    out[2] = a[((b[1] & 15) << 2) | (b[2] >> 6)];
    out[3] = a[b[2] & 63];
    out[4] = a[b[3] >> 2];
    out[5] = a[(b[3] & 3) << 4];
    out[6] = '=';
    out[7] = '=';
    out[8] = '\0';
}

/* Parts in a multipart ETag ("...-N"), 1 for a plain one. */
static int etag_parts(const char *etag) {
    const char *dash = strrchr(etag, '-');
    return dash ? atoi(dash + 1) : 1;
}

static void check_object(struct s3f_client *c, const char *key, const unsigned char *data,
                         size_t n, int parts) {
    struct s3f_error e;
    struct s3f_object_info hi;
    enum s3f_status st = s3f_head_object(c, bucket, key, NULL, &hi, &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(hi.size, n);
    if (parts)
        CHECK_INT(etag_parts(hi.etag), parts);
    unsigned char *back = malloc(n + 16);
    struct s3f_object_info di;
    st = s3f_download_buffer(c, bucket, key, back, n + 16, NULL, &di, &e);
    if (st)
        print_err("download", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(di.size, n);
    CHECK(n == 0 || memcmp(back, data, n) == 0);
    CHECK_STR(di.etag, hi.etag);
    free(back);
}

/* ---- cases -------------------------------------------------------------------------- */

static void test_roundtrip_sizes(void) {
    struct s3f_client *c = client();
    size_t sizes[] = {0, 1, PART - 1, PART, PART + 1, 3 * PART + 1, 100 * MIB + 12345};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        size_t n = sizes[i];
        char key[64];
        snprintf(key, sizeof(key), "rt/%zu", n);
        unsigned char *data = pattern(n, (unsigned)i + 7);
        struct s3f_error e;
        struct s3f_object_info ui;
        enum s3f_status st = s3f_upload_buffer(c, bucket, key, data, n, NULL, &ui, &e);
        if (st)
            print_err("upload", &e);
        CHECK_INT(st, S3F_OK);
        CHECK_INT(ui.size, n);
        CHECK(ui.etag[0] == '"');
        char want[9];
        crc_b64(crc32c_ref(data, n), want);
        CHECK_STR(ui.checksum_crc32c, want); /* FULL_OBJECT combine of the parts */
        int parts = n <= PART ? 1 : (int)((n + PART - 1) / PART);
        check_object(c, key, data, n, parts);

        /* into three regions of odd sizes, the last one too large */
        if (n > 10) {
            size_t a = n / 3, b = n / 3 + 1;
            unsigned char *r1 = malloc(a), *r2 = malloc(b), *r3 = malloc(n - a - b + 100);
            struct s3f_iovec iov[3] = {{r1, a}, {r2, b}, {r3, n - a - b + 100}};
            struct s3f_object_info di;
            st = s3f_download_iov(c, bucket, key, iov, 3, NULL, &di, &e);
            CHECK_INT(st, S3F_OK);
            CHECK(memcmp(r1, data, a) == 0 && memcmp(r2, data + a, b) == 0 &&
                  memcmp(r3, data + a + b, n - a - b) == 0);
            free(r1);
            free(r2);
            free(r3);
            /* a buffer one byte short: an error that says how much is needed */
            unsigned char *small = malloc(n - 1);
            st = s3f_download_buffer(c, bucket, key, small, n - 1, NULL, &di, &e);
            CHECK_INT(st, S3F_ERR_INVALID_ARGUMENT);
            CHECK_INT(di.size, n);
            free(small);
        }
        free(data);
    }
    s3f_client_free(c);
}

static void test_writer(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    /* many small writes across three parts */
    size_t n = 2 * PART + 777;
    unsigned char *data = pattern(n, 3);
    struct s3f_writer *w;
    CHECK_INT(s3f_writer_open(c, bucket, "w/small-writes", NULL, &w, &e), S3F_OK);
    size_t off = 0;
    unsigned seed = 1;
    enum s3f_status st = S3F_OK;
    while (off < n && st == S3F_OK) {
        size_t k = 1 + (size_t)(rand_r(&seed) % 70000);
        if (k > n - off)
            k = n - off;
        st = s3f_writer_write(w, data + off, k, &e);
        off += k;
    }
    CHECK_INT(st, S3F_OK);
    CHECK_INT(s3f_writer_tell(w), n);
    struct s3f_object_info wi;
    st = s3f_writer_close(w, &wi, &e);
    if (st)
        print_err("close", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(wi.size, n);
    char want[9];
    crc_b64(crc32c_ref(data, n), want);
    CHECK_STR(wi.checksum_crc32c, want);
    check_object(c, "w/small-writes", data, n, 3);

    /* exactly one part at close: a single PutObject (no multipart ETag) */
    CHECK_INT(s3f_writer_open(c, bucket, "w/one-part", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, PART, &e), S3F_OK);
    CHECK_INT(s3f_writer_close(w, &wi, &e), S3F_OK);
    CHECK(strchr(wi.etag, '-') == NULL);
    check_object(c, "w/one-part", data, PART, 1);

    /* one byte more: two parts */
    CHECK_INT(s3f_writer_open(c, bucket, "w/two-parts", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, PART + 1, &e), S3F_OK);
    CHECK_INT(s3f_writer_close(w, &wi, &e), S3F_OK);
    check_object(c, "w/two-parts", data, PART + 1, 2);

    /* nothing written: an empty object */
    CHECK_INT(s3f_writer_open(c, bucket, "w/empty", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_close(w, &wi, &e), S3F_OK);
    CHECK_INT(wi.size, 0);
    check_object(c, "w/empty", data, 0, 1);

    /* one large write */
    CHECK_INT(s3f_writer_open(c, bucket, "w/big-write", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, n, &e), S3F_OK);
    CHECK_INT(s3f_writer_close(w, &wi, &e), S3F_OK);
    check_object(c, "w/big-write", data, n, 3);
    free(data);
    s3f_client_free(c);
}

static void test_iov_upload(void) {
    struct s3f_client *c = client();
    /* 100 tensors of varied sizes, some empty, one larger than a part */
    struct s3f_iovec iov[100];
    size_t total = 0;
    unsigned seed = 5;
    for (int i = 0; i < 100; i++) {
        size_t len = i % 17 == 0 ? 0 : (size_t)(rand_r(&seed) % (300 * 1024));
        if (i == 50)
            len = PART + 4321;
        iov[i].base = pattern(len, (unsigned)i);
        iov[i].len = len;
        total += len;
    }
    unsigned char *flat = malloc(total);
    size_t off = 0;
    for (int i = 0; i < 100; i++) {
        memcpy(flat + off, iov[i].base, iov[i].len);
        off += iov[i].len;
    }
    struct s3f_error e;
    struct s3f_object_info ui;
    enum s3f_status st = s3f_upload_iov(c, bucket, "iov/state-dict", iov, 100, NULL, &ui, &e);
    if (st)
        print_err("upload_iov", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(ui.size, total);
    char want[9];
    crc_b64(crc32c_ref(flat, total), want);
    CHECK_STR(ui.checksum_crc32c, want);
    check_object(c, "iov/state-dict", flat, total, (int)((total + PART - 1) / PART));
    for (int i = 0; i < 100; i++)
        free(iov[i].base);
    free(flat);
    s3f_client_free(c);
}

static int count_dir(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    if (d)
        closedir(d);
    return n;
}

static void test_file(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    char src[600], dst[700], dir[512];
    snprintf(dir, sizeof(dir), "%s/files", tmpdir);
    mkdir(dir, 0755);
    snprintf(src, sizeof(src), "%s/src.bin", tmpdir);
    snprintf(dst, sizeof(dst), "%s/dst.bin", dir);
    size_t n = 2 * PART + 5;
    unsigned char *data = pattern(n, 11);
    FILE *f = fopen(src, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    struct s3f_object_info ui, di;
    enum s3f_status st = s3f_upload_file(c, bucket, "file/a", src, NULL, &ui, &e);
    if (st)
        print_err("upload_file", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(ui.size, n);
    check_object(c, "file/a", data, n, 3);
    /* without a checksum: parts streamed with pread only */
    struct s3f_upload_options nock = {.checksum = S3F_CHECKSUM_NONE};
    CHECK_INT(s3f_upload_file(c, bucket, "file/nock", src, &nock, &ui, &e), S3F_OK);
    CHECK(ui.checksum_crc32c[0] == '\0');
    check_object(c, "file/nock", data, n, 3);

    st = s3f_download_file(c, bucket, "file/a", dst, NULL, &di, &e);
    if (st)
        print_err("download_file", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(di.size, n);
    size_t len = 0;
    char *back = test_read_file(dst, &len);
    CHECK(back && len == n && memcmp(back, data, n) == 0);
    free(back);
    CHECK_INT(count_dir(dir), 1); /* no temporary file left */
    /* overwrite in place with a smaller object, fsync on */
    struct s3f_download_options dso = {.fsync = 1};
    CHECK_INT(s3f_upload_buffer(c, bucket, "file/small", data, 1000, NULL, NULL, &e), S3F_OK);
    CHECK_INT(s3f_download_file(c, bucket, "file/small", dst, &dso, &di, &e), S3F_OK);
    back = test_read_file(dst, &len);
    CHECK(back && len == 1000 && memcmp(back, data, 1000) == 0);
    free(back);
    /* an empty object */
    CHECK_INT(s3f_upload_buffer(c, bucket, "file/empty", "", 0, NULL, NULL, &e), S3F_OK);
    CHECK_INT(s3f_download_file(c, bucket, "file/empty", dst, NULL, &di, &e), S3F_OK);
    struct stat sb;
    CHECK(stat(dst, &sb) == 0 && sb.st_size == 0);
    /* a missing key: error, the existing file untouched, nothing left behind */
    st = s3f_download_file(c, bucket, "file/missing", dst, NULL, &di, &e);
    CHECK_INT(st, S3F_ERR_NOT_FOUND);
    CHECK(stat(dst, &sb) == 0 && sb.st_size == 0);
    CHECK_INT(count_dir(dir), 1);
    /* a directory that does not exist */
    char bad[600];
    snprintf(bad, sizeof(bad), "%s/no/such/dir/x", tmpdir);
    CHECK_INT(s3f_download_file(c, bucket, "file/a", bad, NULL, &di, &e), S3F_ERR_IO);
    /* a source that does not exist */
    CHECK_INT(s3f_upload_file(c, bucket, "file/b", bad, NULL, &ui, &e), S3F_ERR_IO);
    CHECK(strstr(e.message, "cannot open") != NULL);
    CHECK_INT(s3f_head_object(c, bucket, "file/b", NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    unlink(src);
    unlink(dst);
    rmdir(dir);
    free(data);
    s3f_client_free(c);
}

/* A zip's records as torch.load reads them: a 30-byte local header, then the record's data
 * a little past the header's end (its name and padding skipped), record after record. Each
 * skip is sequential for the read-ahead: the window carries on over it and is topped up
 * while a long record is read, so the scan takes a few large requests, not one per read. */
static void test_reader_records(void) {
    struct s3f_client *c = client_opts(PART, 64 * MIB, 0, S3F_CHECKSUM_DEFAULT);
    struct s3f_error e;
    size_t n = 24 * MIB;
    unsigned char *data = pattern(n, 23);
    CHECK_INT(s3f_upload_buffer(c, bucket, "rd/records", data, n, NULL, NULL, &e), S3F_OK);
    struct s3f_reader *r;
    CHECK_INT(s3f_reader_open(c, bucket, "rd/records", NULL, &r, &e), S3F_OK);
    unsigned char *buf = malloc(3 * MIB);
    struct s3f_client_stats s0, s1;
    s3f_client_stats(c, &s0, 0);
    int bad = 0, records = 0;
    size_t got;
    for (uint64_t at = 0; at + 48 < n; records++) {
        size_t len = n - at - 48 < 3 * MIB ? (size_t)(n - at - 48) : 3 * MIB;
        if (s3f_reader_pread(r, buf, 30, at, &got, &e) || got != 30 ||
            memcmp(buf, data + at, 30) != 0)
            bad++;
        if (s3f_reader_pread(r, buf, len, at + 48, &got, &e) || got != len ||
            memcmp(buf, data + at + 48, len) != 0)
            bad++;
        /* the requests past the record's end are out before its read returns: the
         * read-ahead holds pool memory past it (the tail's 1 MiB is still far off) */
        struct s3f_client_stats sr;
        s3f_client_stats(c, &sr, 0);
        if (records >= 1 && records <= 3)
            CHECK(sr.pool_in_use_bytes > 0); /* was 0: the window was dropped at each skip */
        at += 48 + len;
    }
    CHECK_INT(bad, 0);
    s3f_client_stats(c, &s1, 0);
    printf("  %d records (30-byte header, 3 MiB data 18 bytes past it) over 24 MiB: "
           "%llu requests\n", records,
           (unsigned long long)(s1.requests_started - s0.requests_started));
    s3f_reader_close(r);
    free(buf);
    free(data);
    s3f_client_free(c);
}

static void test_reader(void) {
    struct s3f_client *c = client_opts(PART, 64 * MIB, 0, S3F_CHECKSUM_DEFAULT);
    struct s3f_error e;
    size_t n = 20 * MIB + 333;
    unsigned char *data = pattern(n, 21);
    CHECK_INT(s3f_upload_buffer(c, bucket, "rd/obj", data, n, NULL, NULL, &e), S3F_OK);
    struct s3f_reader *r;
    enum s3f_status st = s3f_reader_open(c, bucket, "rd/obj", NULL, &r, &e);
    CHECK_INT(st, S3F_OK);
    if (st) {
        s3f_client_free(c);
        free(data);
        return;
    }
    CHECK_INT(s3f_reader_size(r), n);
    CHECK(s3f_reader_info(r)->etag[0] == '"');
    struct s3f_client_stats s0, s1;
    s3f_client_stats(c, &s0, 0);
    /* sequential, 64 KiB reads */
    unsigned char *buf = malloc(n + 100);
    size_t off = 0, got = 0;
    while (off < n) {
        st = s3f_reader_read(r, buf + off, 65536, &got, &e);
        if (st || got == 0)
            break;
        off += got;
    }
    CHECK_INT(st, S3F_OK);
    CHECK_INT(off, n);
    CHECK(memcmp(buf, data, n) == 0);
    CHECK_INT(s3f_reader_tell(r), n);
    CHECK_INT(s3f_reader_read(r, buf, 10, &got, &e), S3F_OK);
    CHECK_INT(got, 0); /* at the end */
    s3f_client_stats(c, &s1, 0);
    /* the window grew (1, 1, 2, 4, 5 MiB... requests, topped up as each completes, the tail
     * fetched ahead), it did not fetch 64 KiB at a time: segments are never under 1 MiB
     * (smaller than a part when the estimate asks for more in flight than the read-ahead's
     * memory holds in parts: loopback on a loaded machine measures slow connections) */
    printf("  sequential 20 MiB in 64 KiB reads: %llu requests\n",
           (unsigned long long)(s1.requests_started - s0.requests_started));
    CHECK(s1.requests_started - s0.requests_started <= 21);
    CHECK(s1.requests_started - s0.requests_started >= 5);
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 1);
    printf("  read-ahead high water: %llu MiB\n",
           (unsigned long long)(cs.pool_high_water_bytes / MIB));
    /* window cap (half the memory limit, 64/2) + tail */
    CHECK(cs.pool_high_water_bytes <= 32 * MIB + 2 * MIB);
    CHECK(cs.pool_high_water_bytes <= cs.pool_limit_bytes);

    /* the tail, as a zip reader does: seek to the end, read backwards */
    uint64_t pos;
    CHECK_INT(s3f_reader_seek(r, -22, 2, &pos, &e), S3F_OK);
    CHECK_INT(pos, n - 22);
    CHECK_INT(s3f_reader_read(r, buf, 22, &got, &e), S3F_OK);
    CHECK(got == 22 && memcmp(buf, data + n - 22, 22) == 0);
    CHECK_INT(s3f_reader_pread(r, buf, 5000, n - 70000, &got, &e), S3F_OK);
    CHECK(got == 5000 && memcmp(buf, data + n - 70000, 5000) == 0);

    /* small reads with small gaps (a record scan): merged into the window */
    s3f_client_stats(c, &s0, 0);
    int gap_bad = 0;
    for (uint64_t at = 2 * MIB; at < 6 * MIB; at += 100000) {
        if (s3f_reader_pread(r, buf, 1000, at, &got, &e) || got != 1000 ||
            memcmp(buf, data + at, 1000) != 0)
            gap_bad++;
    }
    CHECK_INT(gap_bad, 0);
    s3f_client_stats(c, &s1, 0);
    printf("  41 reads 100 KB apart over 4 MB: %llu requests\n",
           (unsigned long long)(s1.requests_started - s0.requests_started));
    CHECK(s1.requests_started - s0.requests_started <= 6);

    /* random reads: small and large, anywhere */
    unsigned seed = 9;
    int bad = 0;
    for (int i = 0; i < 60; i++) {
        uint64_t at = (uint64_t)rand_r(&seed) % n;
        size_t len = i % 5 == 0 ? (size_t)(rand_r(&seed) % (3 * MIB)) : (size_t)(rand_r(&seed) % 5000);
        st = s3f_reader_pread(r, buf, len, at, &got, &e);
        size_t want = at + len > n ? n - at : len;
        if (st || got != want || memcmp(buf, data + at, want) != 0) {
            bad++;
            if (st)
                print_err("pread", &e);
        }
    }
    CHECK_INT(bad, 0);
    /* seeks: past the end reads nothing, before the start is an error */
    CHECK_INT(s3f_reader_seek(r, 10, 2, &pos, &e), S3F_OK);
    CHECK_INT(s3f_reader_read(r, buf, 10, &got, &e), S3F_OK);
    CHECK_INT(got, 0);
    CHECK_INT(s3f_reader_seek(r, -1, 0, &pos, &e), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_reader_seek(r, 1000, 0, &pos, &e), S3F_OK);
    CHECK_INT(s3f_reader_read(r, buf, 100, &got, &e), S3F_OK);
    CHECK(got == 100 && memcmp(buf, data + 1000, 100) == 0);
    s3f_reader_close(r);

    /* the object replaced under an open reader: reads fail, never mix versions */
    CHECK_INT(s3f_reader_open(c, bucket, "rd/obj", NULL, &r, &e), S3F_OK);
    CHECK_INT(s3f_upload_buffer(c, bucket, "rd/obj", data + 1, n - 1, NULL, NULL, &e), S3F_OK);
    st = s3f_reader_pread(r, buf, 1000, 5 * MIB, &got, &e);
    CHECK_INT(st, S3F_ERR_PRECONDITION_FAILED);
    s3f_reader_close(r);
    /* a small object: all of it is the tail */
    CHECK_INT(s3f_upload_buffer(c, bucket, "rd/small", data, 3000, NULL, NULL, &e), S3F_OK);
    CHECK_INT(s3f_reader_open(c, bucket, "rd/small", NULL, &r, &e), S3F_OK);
    CHECK_INT(s3f_reader_pread(r, buf, 3000, 0, &got, &e), S3F_OK);
    CHECK(got == 3000 && memcmp(buf, data, 3000) == 0);
    s3f_reader_close(r);
    CHECK_INT(s3f_reader_open(c, bucket, "rd/missing", NULL, &r, &e), S3F_ERR_NOT_FOUND);

    /* known from a listing: no HEAD at open, the listing's ETag pins the object */
    struct s3f_list_options lo = {.prefix = "rd/small"};
    struct s3f_list_page *pg = NULL;
    CHECK_INT(s3f_list_objects_v2(c, bucket, &lo, &pg, &e), S3F_OK);
    CHECK(pg && pg->n_objects == 1);
    if (pg && pg->n_objects == 1) {
        struct s3f_reader_options ko = {.known = 1, .known_size = pg->objects[0].size,
                                        .known_etag = pg->objects[0].etag};
        struct s3f_client_stats before, after;
        s3f_client_stats(c, &before, 0);
        CHECK_INT(s3f_reader_open(c, bucket, "rd/small", &ko, &r, &e), S3F_OK);
        CHECK_INT(s3f_reader_size(r), 3000);
        CHECK_INT(s3f_reader_pread(r, buf, 3000, 0, &got, &e), S3F_OK);
        CHECK(got == 3000 && memcmp(buf, data, 3000) == 0);
        s3f_reader_close(r);
        s3f_client_stats(c, &after, 0);
        /* one data request (the tail holds it all); that open sent no HEAD shows below: a
         * stale ETag is not replaced by the real one, a missing key opens */
        CHECK_INT(after.requests_started - before.requests_started, 1);
        /* a stale ETag: the first read fails, nothing of another version comes back */
        ko.known_etag = "\"0123456789abcdef0123456789abcdef\"";
        CHECK_INT(s3f_reader_open(c, bucket, "rd/small", &ko, &r, &e), S3F_OK);
        CHECK_INT(s3f_reader_pread(r, buf, 100, 0, &got, &e), S3F_ERR_PRECONDITION_FAILED);
        s3f_reader_close(r);
        /* a key deleted since the listing */
        CHECK_INT(s3f_reader_open(c, bucket, "rd/missing", &ko, &r, &e), S3F_OK);
        CHECK_INT(s3f_reader_pread(r, buf, 100, 0, &got, &e), S3F_ERR_NOT_FOUND);
        s3f_reader_close(r);
        /* known without an ETag is refused */
        ko.known_etag = NULL;
        CHECK_INT(s3f_reader_open(c, bucket, "rd/small", &ko, &r, &e), S3F_ERR_INVALID_ARGUMENT);
    }
    s3f_list_page_free(pg);
    free(buf);
    free(data);
    s3f_client_free(c);
}

static int count_uploads(struct s3f_client *c, const char *prefix) {
    struct s3f_uploads_page *pg = NULL;
    struct s3f_error e;
    if (s3f_list_multipart_uploads(c, bucket, prefix, NULL, NULL, &pg, &e) != S3F_OK) {
        print_err("list uploads", &e);
        return -1;
    }
    int n = (int)pg->n_uploads;
    s3f_uploads_page_free(pg);
    return n;
}

static void test_abort(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    size_t n = 3 * PART;
    unsigned char *data = pattern(n, 31);
    struct s3f_writer *w;
    CHECK_INT(s3f_writer_open(c, bucket, "ab/obj", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, n, &e), S3F_OK);
    /* the multipart upload exists on the server (polled, bounded: 20 s) */
    for (int i = 0; i < 200 && count_uploads(c, "ab/") == 0; i++)
        usleep(100000);
    CHECK_INT(count_uploads(c, "ab/"), 1);
    s3f_writer_abort(w);
    CHECK_INT(s3f_head_object(c, bucket, "ab/obj", NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    CHECK_INT(count_uploads(c, "ab/"), 0);
    /* abort before anything was sent */
    CHECK_INT(s3f_writer_open(c, bucket, "ab/early", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, 100, &e), S3F_OK);
    s3f_writer_abort(w);
    CHECK_INT(s3f_head_object(c, bucket, "ab/early", NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    s3f_writer_abort(NULL);
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    CHECK_INT(cs.pool_in_use_bytes, 0); /* every buffer came back */
    free(data);
    s3f_client_free(c);
}

static int sink_discard(void *ud, const void *data, size_t len, uint64_t offset) {
    (void)ud;
    (void)data;
    (void)len;
    (void)offset;
    return 0;
}

static void test_errors(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    size_t n = 3 * PART + 1;
    unsigned char *data = pattern(n, 41);
    /* a bucket that does not exist: single part and multipart */
    CHECK_INT(s3f_upload_buffer(c, "s3flash-no-such-bucket", "k", data, 10, NULL, NULL, &e),
              S3F_ERR_NO_SUCH_BUCKET);
    CHECK_STR(e.operation, "PutObject");
    CHECK_INT(s3f_upload_buffer(c, "s3flash-no-such-bucket", "k", data, n, NULL, NULL, &e),
              S3F_ERR_NO_SUCH_BUCKET);
    CHECK_STR(e.operation, "CreateMultipartUpload");
    CHECK(e.request_id[0] != '\0');
    /* the writer: writes fail once the failure is known, close reports it */
    struct s3f_writer *w;
    CHECK_INT(s3f_writer_open(c, "s3flash-no-such-bucket", "k", NULL, &w, &e), S3F_OK);
    enum s3f_status st = S3F_OK;
    for (int i = 0; i < 200 && st == S3F_OK; i++) {
        st = s3f_writer_write(w, data, n, &e);
        if (st == S3F_OK)
            usleep(10000);
    }
    CHECK_INT(st, S3F_ERR_NO_SUCH_BUCKET);
    CHECK_INT(s3f_writer_write(w, data, 10, &e), S3F_ERR_NO_SUCH_BUCKET);
    CHECK_INT(s3f_writer_close(w, NULL, &e), S3F_ERR_NO_SUCH_BUCKET);
    /* small writer to a missing bucket: the error comes at close */
    CHECK_INT(s3f_writer_open(c, "s3flash-no-such-bucket", "k", NULL, &w, &e), S3F_OK);
    CHECK_INT(s3f_writer_write(w, data, 10, &e), S3F_OK);
    CHECK_INT(s3f_writer_close(w, NULL, &e), S3F_ERR_NO_SUCH_BUCKET);
    /* downloads */
    unsigned char *buf = malloc(n);
    CHECK_INT(s3f_download_buffer(c, bucket, "err/missing", buf, n, NULL, NULL, &e),
              S3F_ERR_NOT_FOUND);
    CHECK_INT(s3f_upload_buffer(c, bucket, "err/obj", data, n, NULL, NULL, &e), S3F_OK);
    struct s3f_download_options wrong = {.if_match = "\"00000000000000000000000000000000\""};
    CHECK_INT(s3f_download_buffer(c, bucket, "err/obj", buf, n, &wrong, NULL, &e),
              S3F_ERR_PRECONDITION_FAILED);
    /* a range: into a buffer and into a file; refused where it has no meaning */
    struct s3f_download_options rng = {.range_offset = PART - 3, .range_bytes = PART + 7};
    struct s3f_object_info ri;
    memset(buf, 0, n);
    CHECK_INT(s3f_download_buffer(c, bucket, "err/obj", buf, n, &rng, &ri, &e), S3F_OK);
    CHECK_INT(ri.size, PART + 7);
    CHECK(memcmp(buf, data + PART - 3, PART + 7) == 0);
    char rpath[600];
    snprintf(rpath, sizeof(rpath), "%s/range.bin", tmpdir);
    rng.range_bytes = 0; /* to the end */
    CHECK_INT(s3f_download_file(c, bucket, "err/obj", rpath, &rng, &ri, &e), S3F_OK);
    CHECK_INT(ri.size, n - (PART - 3));
    size_t flen = 0;
    char *fdata = test_read_file(rpath, &flen);
    CHECK(fdata && flen == n - (PART - 3) && memcmp(fdata, data + PART - 3, flen) == 0);
    free(fdata);
    unlink(rpath);
    rng.range_bytes = 10;
    void *adata = NULL;
    size_t alen = 0;
    CHECK_INT(s3f_download_alloc(c, bucket, "err/obj", &rng, NULL, NULL, &adata, &alen, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(e.message, "a range is for") != NULL);
    CHECK_INT(s3f_download_stream(c, bucket, "err/obj", &rng, sink_discard, NULL, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    struct s3f_download_options wrap = {.range_offset = 2, .range_bytes = UINT64_MAX};
    CHECK_INT(s3f_download_buffer(c, bucket, "err/obj", buf, n, &wrap, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(e.message, "overflows") != NULL);
    struct s3f_download_options past = {.range_offset = n - 1, .range_bytes = 2};
    CHECK_INT(s3f_download_buffer(c, bucket, "err/obj", buf, n, &past, NULL, &e),
              S3F_ERR_INVALID_RANGE);
    /* bad arguments */
    CHECK_INT(s3f_upload_buffer(c, bucket, "", data, 1, NULL, NULL, &e), S3F_ERR_INVALID_ARGUMENT);
    struct s3f_upload_options tiny = {.part_size_bytes = 1000};
    CHECK_INT(s3f_upload_buffer(c, bucket, "k", data, 1, &tiny, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(count_uploads(c, ""), 0);
    free(buf);
    free(data);
    s3f_client_free(c);
    /* client options are checked */
    struct s3f_client_options o = {.endpoint_url = endpoint, .part_size_bytes = 1 << 20,
                                   .anonymous = 1};
    struct s3f_client *bad = NULL;
    CHECK_INT(s3f_client_new(&o, &bad, &e), S3F_ERR_INVALID_ARGUMENT);
    o.part_size_bytes = 0;
    o.memory_limit_bytes = 1 << 20;
    CHECK_INT(s3f_client_new(&o, &bad, &e), S3F_ERR_INVALID_ARGUMENT);
}

/* The object replaced while a download is under way: the parts after it fail If-Match. */
struct changer {
    struct s3f_client *other;
    const unsigned char *data;
    size_t n;
    int fired;
};

static void change_on_progress(void *ud, uint64_t done, uint64_t total) {
    struct changer *ch = ud;
    (void)done;
    (void)total;
    if (ch->fired++ == 0) {
        struct s3f_error e;
        s3f_put_object(ch->other, bucket, "chg/obj", ch->data + 1, 1000, NULL, NULL, &e);
    }
}

static void test_changed_during_download(void) {
    struct s3f_client *c = client_opts(PART, 0, 1, S3F_CHECKSUM_DEFAULT);
    struct s3f_client *other = client();
    struct s3f_error e;
    size_t n = 6 * PART;
    unsigned char *data = pattern(n, 51);
    CHECK_INT(s3f_upload_buffer(c, bucket, "chg/obj", data, n, NULL, NULL, &e), S3F_OK);
    struct changer ch = {other, data, n, 0};
    struct s3f_download_options o = {.progress = change_on_progress, .progress_user_data = &ch};
    unsigned char *buf = malloc(n);
    enum s3f_status st = s3f_download_buffer(c, bucket, "chg/obj", buf, n, &o, NULL, &e);
    CHECK_INT(st, S3F_ERR_PRECONDITION_FAILED);
    CHECK(strstr(e.message, "changed") != NULL);
    free(buf);
    free(data);
    s3f_client_free(other);
    s3f_client_free(c);
}

/* ---- server-side copies (s3f_copy) ---------------------------------------------------- */

struct copy_progress {
    uint64_t last, total;
    int calls;
    struct s3f_client *other; /* set: replace the source at the first call */
    const char *src_key;
    size_t size;
};

static void copy_progress_cb(void *ud, uint64_t done, uint64_t total) {
    struct copy_progress *p = ud;
    if (done < p->last)
        p->last = UINT64_MAX; /* went backwards: flagged */
    else
        p->last = done;
    p->total = total;
    if (p->calls++ == 0 && p->other) {
        /* same size, other bytes: the ranges stay valid, only the ETag differs */
        struct s3f_error e;
        unsigned char *b = pattern(p->size, 99);
        s3f_put_object(p->other, bucket, p->src_key, b, p->size, NULL, NULL, &e);
        free(b);
    }
}

static void copy_source_replaced(struct s3f_client *c, const unsigned char *data, size_t n) {
    struct s3f_error e;
    struct s3f_client *one = client_opts(PART, 0, 1, S3F_CHECKSUM_DEFAULT);
    struct s3f_client *other = client();
    CHECK_INT(s3f_upload_buffer(c, bucket, "cpchg/src", data, n, NULL, NULL, &e), S3F_OK);
    struct copy_progress pr = {.other = other, .src_key = "cpchg/src", .size = n};
    struct s3f_copy_options chg = {.part_size_bytes = PART, .progress = copy_progress_cb,
                                   .progress_user_data = &pr};
    enum s3f_status st = s3f_copy(one, bucket, "cpchg/src", bucket, "cpchg/dst", &chg, NULL, &e);
    CHECK_INT(st, S3F_ERR_PRECONDITION_FAILED);
    CHECK_INT(e.http_status, 412);
    CHECK_STR(e.operation, "UploadPartCopy");
    CHECK_INT(s3f_head_object(c, bucket, "cpchg/dst", NULL, NULL, &e), S3F_ERR_NOT_FOUND);
    CHECK_INT(count_uploads(c, "cpchg/"), 0);
    s3f_client_free(other);
    s3f_client_free(one);
}

/* The source replaced mid-copy: the copy fails (412: a part's x-amz-copy-source-if-match
 * where the server checks it, else the engine's HEAD of the source with If-Match after the
 * last part, as on RGW), the upload is aborted, nothing appears. Run through the fault
 * proxy (test_xfer.py), which holds the copy's part 2 for seconds: the replacement (a 15 MiB
 * PutObject from the progress callback after part 1) lands before the copy ends, however
 * slow the client side is (on loaded cores the copy could finish first). */
static void test_copy_source_replaced(void) {
    struct s3f_client *c = client();
    size_t n = 3 * PART + 12345;
    unsigned char *data = pattern(n, 61 + 5);
    copy_source_replaced(c, data, n);
    free(data);
    s3f_client_free(c);
}

static void test_copy(void) {
    struct s3f_client *c = client(); /* 5 MiB parts */
    struct s3f_error e;
    struct s3f_object_info info;
    /* sizes around the threshold, which is one part (5 MiB here) */
    static const size_t sizes[] = {0, 1, PART - 1, PART, PART + 1, 3 * PART + 12345};
    static const int parts[] = {1, 1, 1, 1, 2, 4};
    struct s3f_copy_options o = {.part_size_bytes = PART};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        size_t n = sizes[i];
        unsigned char *data = pattern(n, 61 + (unsigned)i);
        char src[64], dst[64];
        snprintf(src, sizeof(src), "cp/src %zu+ü", n); /* encoded in x-amz-copy-source */
        snprintf(dst, sizeof(dst), "cp/dst-%zu", n);
        /* one PutObject, so that a multipart ETag can only come from the copy */
        struct s3f_upload_options uo = {.content_type = "text/x-s3flash",
                                        .part_size_bytes = 64 * MIB};
        CHECK_INT(s3f_upload_buffer(c, bucket, src, data, n, &uo, NULL, &e), S3F_OK);
        struct copy_progress pr = {0};
        o.progress = copy_progress_cb;
        o.progress_user_data = &pr;
        enum s3f_status st = s3f_copy(c, bucket, src, bucket, dst, &o, &info, &e);
        if (st)
            print_err("copy", &e);
        CHECK_INT(st, S3F_OK);
        CHECK_INT(info.size, n);
        CHECK_STR(info.content_type, "text/x-s3flash");
        check_object(c, dst, data, n, parts[i]);
        struct s3f_object_info hi;
        CHECK_INT(s3f_head_object(c, bucket, dst, NULL, &hi, &e), S3F_OK);
        CHECK_STR(hi.content_type, "text/x-s3flash");
        CHECK_STR(info.etag, hi.etag);
        CHECK_INT(pr.last, n); /* progress ends at the size, never goes back */
        /* once per part, or fewer (parts that complete while it runs count together) */
        CHECK(pr.calls >= 1 && pr.calls <= parts[i]);
        free(data);
    }
    /* a threshold above the part size: one CopyObject even though it spans parts */
    size_t n = 3 * PART + 12345;
    unsigned char *data = pattern(n, 61 + 5);
    struct s3f_copy_options big = {.part_size_bytes = PART, .multipart_threshold_bytes = n};
    CHECK_INT(s3f_copy(c, bucket, "cp/src 15740985+ü", bucket, "cp/one", &big, &info, &e),
              S3F_OK);
    check_object(c, "cp/one", data, n, 1);
    /* defaults (128 MiB parts): one CopyObject */
    CHECK_INT(s3f_copy(c, bucket, "cp/src 15740985+ü", bucket, "cp/def", NULL, &info, &e),
              S3F_OK);
    check_object(c, "cp/def", data, n, 1);
    /* pinned to an ETag the source does not have */
    struct s3f_copy_options pin = {.part_size_bytes = PART,
                                   .src_if_match = "\"00000000000000000000000000000000\""};
    CHECK_INT(s3f_copy(c, bucket, "cp/src 15740985+ü", bucket, "cp/pin", &pin, NULL, &e),
              S3F_ERR_PRECONDITION_FAILED);
    CHECK_INT(s3f_head_object(c, bucket, "cp/pin", NULL, NULL, &e), S3F_ERR_NOT_FOUND);

    /* the source replaced mid-copy: test_copy_source_replaced (through the fault proxy) */


    /* a missing source: NOT_FOUND from its HEAD, nothing started */
    CHECK_INT(s3f_copy(c, bucket, "cp/missing", bucket, "cp/x", &o, NULL, &e),
              S3F_ERR_NOT_FOUND);
    CHECK(strstr(e.resource, "cp/missing") != NULL);
    /* a missing destination bucket, one CopyObject and multipart */
    CHECK_INT(s3f_copy(c, bucket, "cp/src 1+ü", "s3flash-no-such-bucket", "k", &o, NULL, &e),
              S3F_ERR_NO_SUCH_BUCKET);
    CHECK_INT(s3f_copy(c, bucket, "cp/src 15740985+ü", "s3flash-no-such-bucket", "k", &o,
                       NULL, &e),
              S3F_ERR_NO_SUCH_BUCKET);
    CHECK_STR(e.operation, "CreateMultipartUpload");
    /* another user's bucket: denied, single and multipart */
    const char *oa = getenv("S3FLASH_TEST_OTHER_ACCESS_KEY");
    const char *os = getenv("S3FLASH_TEST_OTHER_SECRET_KEY");
    if (oa && os) {
        struct s3f_client_options co = {.endpoint_url = endpoint, .region = "us-east-1",
                                        .force_path_style = 1, .access_key_id = oa,
                                        .secret_access_key = os};
        struct s3f_client *stranger = NULL;
        CHECK_INT(s3f_client_new(&co, &stranger, &e), S3F_OK);
        char theirs[80];
        snprintf(theirs, sizeof(theirs), "%s-other", bucket);
        CHECK_INT(s3f_create_bucket(stranger, theirs, &e), S3F_OK);
        CHECK_INT(s3f_copy(c, bucket, "cp/src 1+ü", theirs, "k", &o, NULL, &e),
                  S3F_ERR_ACCESS_DENIED);
        CHECK_INT(s3f_copy(c, bucket, "cp/src 15740985+ü", theirs, "k", &o, NULL, &e),
                  S3F_ERR_ACCESS_DENIED);
        /* and they may not read our source */
        CHECK_INT(s3f_copy(stranger, bucket, "cp/src 1+ü", theirs, "k", &o, NULL, &e),
                  S3F_ERR_ACCESS_DENIED);
        struct s3f_list_page *pg = NULL;
        CHECK_INT(s3f_list_objects_v2(stranger, theirs, NULL, &pg, &e), S3F_OK);
        CHECK(pg && pg->n_objects == 0);
        s3f_list_page_free(pg);
        CHECK_INT(s3f_delete_bucket(stranger, theirs, &e), S3F_OK);
        s3f_client_free(stranger);
    }
    /* bad arguments */
    struct s3f_copy_options tiny = {.part_size_bytes = 1000};
    CHECK_INT(s3f_copy(c, bucket, "cp/src 1+ü", bucket, "k", &tiny, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_copy(c, bucket, "", bucket, "k", NULL, NULL, &e), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(count_uploads(c, ""), 0);
    free(data);
    s3f_client_free(c);
}

/* UploadPartCopy by hand: ranges, a whole source, a wrong pin. */
static void test_upload_part_copy(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    size_t n = 2 * PART + 777;
    unsigned char *data = pattern(n, 71);
    struct s3f_object_info si;
    CHECK_INT(s3f_upload_buffer(c, bucket, "upc/src", data, n, NULL, &si, &e), S3F_OK);
    char *id = NULL;
    CHECK_INT(s3f_create_multipart_upload(c, bucket, "upc/dst", NULL, &id, &e), S3F_OK);
    struct s3f_part_info p[3];
    enum s3f_status st = s3f_upload_part_copy(c, bucket, "upc/dst", id, 1, bucket, "upc/src",
                                              NULL, 0, PART - 1, si.etag, &p[0], &e);
    if (st)
        print_err("UploadPartCopy", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(p[0].size, PART);
    CHECK(p[0].etag[0] == '"');
    CHECK_INT(s3f_upload_part_copy(c, bucket, "upc/dst", id, 2, bucket, "upc/src", NULL, PART,
                                   n - 1, NULL, &p[1], &e),
              S3F_OK);
    /* part number and range checked before anything is sent */
    CHECK_INT(s3f_upload_part_copy(c, bucket, "upc/dst", id, 0, bucket, "upc/src", NULL, 0, 9,
                                   NULL, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_upload_part_copy(c, bucket, "upc/dst", id, 3, bucket, "upc/src", NULL, 9, 0,
                                   NULL, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_upload_part_copy(c, bucket, "upc/dst", id, 3, bucket, "upc/missing", NULL,
                                   0, 9, NULL, NULL, &e),
              S3F_ERR_NOT_FOUND);
    struct s3f_object_info info;
    st = s3f_complete_multipart_upload(c, bucket, "upc/dst", id, p, 2, &info, &e);
    if (st)
        print_err("complete", &e);
    CHECK_INT(st, S3F_OK);
    check_object(c, "upc/dst", data, n, 2);
    free(id);
    /* the whole source as one part (no range) */
    CHECK_INT(s3f_create_multipart_upload(c, bucket, "upc/whole", NULL, &id, &e), S3F_OK);
    CHECK_INT(s3f_upload_part_copy(c, bucket, "upc/whole", id, 1, bucket, "upc/src", NULL, 0,
                                   UINT64_MAX, NULL, &p[0], &e),
              S3F_OK);
    CHECK_INT(s3f_complete_multipart_upload(c, bucket, "upc/whole", id, p, 1, &info, &e),
              S3F_OK);
    check_object(c, "upc/whole", data, n, 1);
    free(id);
    CHECK_INT(count_uploads(c, "upc/"), 0);
    free(data);
    s3f_client_free(c);
}

/* A file that cannot be written: $S3FLASH_TEST_FULL_DIR is a 6 MiB tmpfs (test_xfer.py
 * mounts it), so pwrite fails with ENOSPC partway through a 20 MiB object. The download
 * fails with the write error, no file and no temporary file remain, and the pool gets
 * every chunk back. */
static void test_file_write_error(void) {
    const char *dir = getenv("S3FLASH_TEST_FULL_DIR");
    CHECK(dir != NULL);
    if (!dir)
        return;
    struct s3f_client *c = client();
    struct s3f_error e;
    char dst[600];
    snprintf(dst, sizeof(dst), "%s/dst.bin", dir);
    size_t n = 4 * PART + 7;
    unsigned char *data = pattern(n, 13);
    CHECK_INT(s3f_upload_buffer(c, bucket, "wfail/a", data, n, NULL, NULL, &e), S3F_OK);
    enum s3f_status st = s3f_download_file(c, bucket, "wfail/a", dst, NULL, NULL, &e);
    print_err("expected", &e);
    CHECK_INT(st, S3F_ERR_IO);
    CHECK(strstr(e.message, "cannot write") != NULL);
    struct stat sb;
    CHECK(stat(dst, &sb) != 0);
    CHECK_INT(count_dir(dir), 0);
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    CHECK_INT(cs.pool_in_use_bytes, 0);
    /* the same client goes on working with a file that fits */
    CHECK_INT(s3f_upload_buffer(c, bucket, "wfail/b", data, PART + 3, NULL, NULL, &e), S3F_OK);
    CHECK_INT(s3f_download_file(c, bucket, "wfail/b", dst, NULL, NULL, &e), S3F_OK);
    size_t len = 0;
    char *back = test_read_file(dst, &len);
    CHECK(back && len == PART + 3 && memcmp(back, data, PART + 3) == 0);
    free(back);
    unlink(dst);
    free(data);
    s3f_client_free(c);
}

struct writer_job {
    struct s3f_client *c;
    char key[64];
    size_t n;
    unsigned seed;
    enum s3f_status st;
    double secs;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *writer_main(void *arg) {
    struct writer_job *j = arg;
    double t0 = now_s();
    unsigned char *data = pattern(j->n, j->seed);
    struct s3f_writer *w;
    struct s3f_error e;
    j->st = s3f_writer_open(j->c, bucket, j->key, NULL, &w, &e);
    for (size_t off = 0; off < j->n && j->st == S3F_OK; off += 100000)
        j->st = s3f_writer_write(w, data + off, j->n - off < 100000 ? j->n - off : 100000, &e);
    if (j->st == S3F_OK)
        j->st = s3f_writer_close(w, NULL, &e);
    else
        s3f_writer_abort(w);
    if (j->st)
        print_err(j->key, &e);
    j->secs = now_s() - t0;
    free(data);
    return NULL;
}

static void test_memory_bound(void) {
    /* 16 MiB pool, 5 MiB parts: eight writers of 23 MiB at once. A writer that took its
     * part's memory chunk by chunk could hold 4 of 5 chunks while the others hold the
     * rest, and all would wait forever: this test hung that way. */
    enum { NW = 8 };
    struct s3f_client *c = client_opts(PART, 16 * MIB, 4, S3F_CHECKSUM_DEFAULT);
    struct writer_job jobs[NW];
    pthread_t th[NW];
    for (int i = 0; i < NW; i++) {
        jobs[i] = (struct writer_job){.c = c, .n = 23 * MIB + (size_t)i, .seed = 60u + (unsigned)i};
        snprintf(jobs[i].key, sizeof(jobs[i].key), "mem/w%d", i);
        pthread_create(&th[i], NULL, writer_main, &jobs[i]);
    }
    for (int i = 0; i < NW; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NW; i++) {
        CHECK_INT(jobs[i].st, S3F_OK);
        unsigned char *data = pattern(jobs[i].n, jobs[i].seed);
        check_object(c, jobs[i].key, data, jobs[i].n, 5);
        free(data);
    }
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    printf("  pool: limit %llu, high water %llu, allocated %llu; in flight max %u of %u\n",
           (unsigned long long)cs.pool_limit_bytes, (unsigned long long)cs.pool_high_water_bytes,
           (unsigned long long)cs.pool_allocated_bytes, cs.inflight_high_water,
           cs.max_inflight_requests);
    CHECK_INT(cs.pool_limit_bytes, 16 * MIB);
    CHECK(cs.pool_high_water_bytes <= 16 * MIB);
    CHECK(cs.pool_high_water_bytes >= 10 * MIB); /* the pool was really used up */
    CHECK(cs.pool_allocated_bytes <= 16 * MIB);
    CHECK_INT(cs.pool_in_use_bytes, 0);
    CHECK(cs.inflight_high_water <= 4);
    s3f_client_free(c);
}

static struct s3f_client *client_wait(uint64_t part, uint64_t mem, uint32_t wait_ms) {
    return client_with(part, mem, 0, S3F_CHECKSUM_DEFAULT, wait_ms);
}

static uint64_t pool_in_use(struct s3f_client *c) {
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    return cs.pool_in_use_bytes;
}

static uint32_t inflight(struct s3f_client *c) {
    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    return cs.inflight_requests;
}

static void test_pool_loans(void) {
    /* issue 20, item 5: one client, memory_limit 32 MiB; readers left open after reading
     * 24 MiB each hold the whole pool in read-ahead; a writer's write of 20 MiB waited
     * forever. Read-ahead is a loan: the idle readers give it back, the writer finishes
     * (within the time a few parts take), and the readers read on, exact. How much of the
     * pool one reader's window holds follows the measured link (a loaded machine measures a
     * slower one: two readers held 24 MiB of the 32 under ASan beside a CPU hog), so readers
     * are opened until the pool is held, not a fixed two. */
    enum { NR = 8 };
    const size_t obj_n = 64 * MIB, first = 24 * MIB, wn = 20 * MIB;
    struct s3f_client *c = client_wait(8 * MIB, 32 * MIB, 0);
    CHECK(c != NULL);
    if (!c)
        return;
    unsigned char *obj = pattern(obj_n, 91);
    struct s3f_error e;
    CHECK_INT(s3f_upload_buffer(c, bucket, "loans/src", obj, obj_n, NULL, NULL, &e), S3F_OK);
    struct s3f_reader *rd[NR] = {NULL};
    int nr = 0;
    uint64_t held = 0;
    unsigned char *buf = malloc(obj_n);
    while (nr < NR && held + 8 * MIB <= 32 * MIB) {
        int i = nr++;
        CHECK_INT(s3f_reader_open(c, bucket, "loans/src", NULL, &rd[i], &e), S3F_OK);
        if (!rd[i])
            goto out;
        size_t got = 0;
        for (size_t off = 0; off < first;) {
            size_t n = 0;
            /* 1 MiB reads, as a loader's: the window grows to its cap */
            size_t want = first - off < MIB ? first - off : MIB;
            enum s3f_status st = s3f_reader_read(rd[i], buf + off, want, &n, &e);
            CHECK_INT(st, S3F_OK);
            if (st || n == 0)
                goto out;
            off += n;
            got = off;
        }
        CHECK(memcmp(buf, obj, got) == 0);
        /* its read-ahead arrives in the background: wait (bounded) until no request is in
         * flight, then see what the readers hold */
        double t0 = now_s();
        while (inflight(c) > 0 && now_s() - t0 < 20) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        held = pool_in_use(c);
    }
    printf("  %d readers hold %llu MiB of the 32 MiB pool\n", nr,
           (unsigned long long)(held >> 20));
    CHECK(held + 8 * MIB > 32 * MIB); /* a part of the writer does not fit beside them */
    struct writer_job j = {.c = c, .n = wn, .seed = 92};
    snprintf(j.key, sizeof(j.key), "loans/w");
    writer_main(&j);
    printf("  the writer of 20 MiB beside them took %.2f s\n", j.secs);
    CHECK_INT(j.st, S3F_OK);
    CHECK(j.secs < 60);
    unsigned char *wdata = pattern(wn, 92);
    check_object(c, "loans/w", wdata, wn, 3);
    free(wdata);
    /* the readers gave back their window, not their position: they read on, exact */
    for (int i = 0; i < nr; i++) {
        size_t n = 0;
        memset(buf, 0, obj_n);
        CHECK_INT(s3f_reader_read(rd[i], buf, 4 * MIB, &n, &e), S3F_OK);
        CHECK_INT(n, 4 * MIB);
        CHECK(memcmp(buf, obj + first, 4 * MIB) == 0);
    }
out:
    for (int i = 0; i < NR; i++)
        s3f_reader_close(rd[i]);
    CHECK_INT(pool_in_use(c), 0);
    free(buf);
    free(obj);
    s3f_client_free(c);
}

static void test_pool_starved(void) {
    /* When the pool is held by what cannot give it back (idle writers' part buffers) and
     * nothing is in flight, a writer needing memory fails with S3F_ERR_NO_MEMORY naming the
     * pool after memory_wait_timeout_ms, never waits forever; the others are unharmed. */
    enum { NW = 3 };
    struct s3f_client *c = client_wait(PART, 16 * MIB, 1500);
    CHECK(c != NULL);
    if (!c)
        return;
    struct s3f_writer *w[NW + 1] = {NULL};
    struct s3f_error e;
    char key[64];
    for (int i = 0; i < NW; i++) {
        snprintf(key, sizeof(key), "starve/idle%d", i);
        CHECK_INT(s3f_writer_open(c, bucket, key, NULL, &w[i], &e), S3F_OK);
        CHECK_INT(s3f_writer_write(w[i], "x", 1, &e), S3F_OK); /* holds a part buffer */
    }
    CHECK_INT(s3f_writer_open(c, bucket, "starve/late", NULL, &w[NW], &e), S3F_OK);
    double t0 = now_s();
    enum s3f_status st = s3f_writer_write(w[NW], "y", 1, &e);
    double took = now_s() - t0;
    print_err("the starved writer", &e);
    printf("  it failed after %.2f s\n", took);
    CHECK_INT(st, S3F_ERR_NO_MEMORY);
    CHECK(strstr(e.message, "buffer pool") != NULL);
    CHECK(strstr(e.message, "memory_limit 16 MiB") != NULL);
    CHECK(took >= 1.4 && took < 10);
    s3f_writer_abort(w[NW]);
    /* the idle writers are unharmed: each completes its object */
    for (int i = 0; i < NW; i++)
        CHECK_INT(s3f_writer_close(w[i], NULL, &e), S3F_OK);
    CHECK_INT(pool_in_use(c), 0);
    s3f_client_free(c);
}

struct upload_job {
    struct s3f_client *c;
    const char *key;
    const unsigned char *data;
    size_t n;
    enum s3f_status st;
    double end;
    _Atomic uint64_t done; /* bytes uploaded, from the progress callback */
};

static void on_job_progress(void *ud, uint64_t done, uint64_t total) {
    struct upload_job *j = ud;
    (void)total;
    atomic_store(&j->done, done);
}

static void *upload_main(void *arg) {
    struct upload_job *j = arg;
    struct s3f_error e;
    struct s3f_upload_options o = {.progress = on_job_progress, .progress_user_data = j};
    j->st = s3f_upload_buffer(j->c, bucket, j->key, j->data, j->n, &o, NULL, &e);
    j->end = now_s();
    return NULL;
}

static void test_fairness(void) {
    /* two slots; a 40-part upload starts first, a one-part upload right after it */
    struct s3f_client *c = client_opts(PART, 0, 2, S3F_CHECKSUM_DEFAULT);
    size_t big_n = 40 * PART;
    unsigned char *big = pattern(big_n, 71), *small = pattern(1000, 72);
    struct upload_job jb = {c, "fair/big", big, big_n, S3F_OK, 0, 0};
    struct upload_job js = {c, "fair/small", small, 1000, S3F_OK, 0, 0};
    pthread_t tb, ts;
    double t0 = now_s();
    pthread_create(&tb, NULL, upload_main, &jb);
    /* the big one holds both slots (polled, bounded: 20 s) */
    struct s3f_client_stats cs = {0};
    for (int i = 0; i < 2000 && cs.inflight_requests < 2; i++) {
        usleep(10000);
        s3f_client_stats(c, &cs, 0);
    }
    CHECK_INT(cs.inflight_requests, 2);
    pthread_create(&ts, NULL, upload_main, &js);
    pthread_join(ts, NULL);
    uint64_t big_done_when_small_done = atomic_load(&jb.done);
    pthread_join(tb, NULL);
    CHECK_INT(jb.st, S3F_OK);
    CHECK_INT(js.st, S3F_OK);
    printf("  small done after %.2f s, big after %.2f s; big had %llu of %zu bytes up then\n",
           js.end - t0, jb.end - t0, (unsigned long long)big_done_when_small_done, big_n);
    /* the order of events, not wall-clock ratios: the small upload got a slot while the
     * big one still had most of its parts to send */
    CHECK(big_done_when_small_done < big_n / 2);
    free(big);
    free(small);
    s3f_client_free(c);
}

/* Progress is reported, monotonic, and ends at the total. */
struct prog {
    uint64_t last, total;
    int calls, backwards;
};
static void on_progress(void *ud, uint64_t done, uint64_t total) {
    struct prog *p = ud;
    if (done < p->last)
        p->backwards++;
    p->last = done;
    p->total = total;
    p->calls++;
}

static void test_progress(void) {
    struct s3f_client *c = client();
    size_t n = 4 * PART + 3;
    unsigned char *data = pattern(n, 81);
    struct prog up = {0}, down = {0};
    struct s3f_upload_options uo = {.progress = on_progress, .progress_user_data = &up};
    struct s3f_error e;
    CHECK_INT(s3f_upload_buffer(c, bucket, "prog/obj", data, n, &uo, NULL, &e), S3F_OK);
    /* once per part, or fewer: parts done while the caller's thread runs the callback
     * are reported together */
    CHECK(up.calls >= 1 && up.calls <= 5);
    CHECK_INT(up.last, n);
    CHECK_INT(up.total, n);
    CHECK_INT(up.backwards, 0);
    struct s3f_download_options dopt = {.progress = on_progress, .progress_user_data = &down};
    unsigned char *buf = malloc(n);
    CHECK_INT(s3f_download_buffer(c, bucket, "prog/obj", buf, n, &dopt, NULL, &e), S3F_OK);
    CHECK(down.calls >= 1 && down.calls <= 5);
    CHECK_INT(down.last, n);
    CHECK_INT(down.total, n);
    CHECK_INT(down.backwards, 0);
    free(buf);
    free(data);
    s3f_client_free(c);
}

/* Checksums against a server that keeps them (moto): the server's own whole-object value
 * equals the engine's for every algorithm, and downloads verify it. */
static void test_checksums(void) {
    enum s3f_checksum_algorithm algs[] = {S3F_CHECKSUM_CRC32C, S3F_CHECKSUM_CRC32,
                                          S3F_CHECKSUM_CRC64NVME};
    const char *names[] = {"crc32c", "crc32", "crc64nvme"};
    for (size_t a = 0; a < 3; a++) {
        struct s3f_client *c = client_opts(PART, 0, 0, algs[a]);
        size_t sizes[] = {1000, 2 * PART + 17};
        for (size_t i = 0; i < 2; i++) {
            size_t n = sizes[i];
            char key[64];
            snprintf(key, sizeof(key), "ck/%s-%zu", names[a], n);
            unsigned char *data = pattern(n, 90 + (unsigned)a);
            struct s3f_error e;
            struct s3f_object_info ui, hi, di;
            CHECK_INT(s3f_upload_buffer(c, bucket, key, data, n, NULL, &ui, &e), S3F_OK);
            CHECK_INT(s3f_head_object(c, bucket, key, NULL, &hi, &e), S3F_OK);
            const char *mine = a == 0 ? ui.checksum_crc32c : a == 1 ? ui.checksum_crc32
                                                                    : ui.checksum_crc64nvme;
            const char *theirs = a == 0 ? hi.checksum_crc32c : a == 1 ? hi.checksum_crc32
                                                                      : hi.checksum_crc64nvme;
            printf("  %s %zu bytes: ours %s, the server's %s\n", names[a], n, mine, theirs);
            CHECK(mine[0] != '\0');
            CHECK_STR(theirs, mine);
            if (a == 0) {
                char want[9];
                crc_b64(crc32c_ref(data, n), want);
                CHECK_STR(mine, want);
            }
            unsigned char *buf = malloc(n);
            struct s3f_download_options v = {.verify_checksum = 1};
            enum s3f_status st = s3f_download_buffer(c, bucket, key, buf, n, &v, &di, &e);
            if (st)
                print_err("verified download", &e);
            CHECK_INT(st, S3F_OK);
            CHECK(memcmp(buf, data, n) == 0);
            /* a client of the next algorithm: the server keeps only this one, which the
             * download then checks in a second pass over the buffer */
            struct s3f_client *c2 = client_opts(PART, 0, 0, algs[(a + 1) % 3]);
            memset(buf, 0, n);
            memset(&di, 0, sizeof(di));
            st = s3f_download_buffer(c2, bucket, key, buf, n, &v, &di, &e);
            if (st)
                print_err("download verified with the other algorithm", &e);
            CHECK_INT(st, S3F_OK);
            CHECK(memcmp(buf, data, n) == 0);
            const char *got = a == 0 ? di.checksum_crc32c : a == 1 ? di.checksum_crc32
                                                                 : di.checksum_crc64nvme;
            CHECK_STR(got, mine);
            s3f_client_free(c2);
            free(buf);
            free(data);
        }
        s3f_client_free(c);
    }
}

/* An object whose stored checksum does not match its bytes (seeded by test_xfer.py through
 * moto, which keeps the value it is given): a verified download must fail, unverified
 * ones pass; a file download leaves nothing. */
static const char *mismatch_key;
static void test_verify_mismatch(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    struct s3f_object_info hi;
    CHECK_INT(s3f_head_object(c, bucket, mismatch_key, NULL, &hi, &e), S3F_OK);
    size_t n = (size_t)hi.size;
    unsigned char *buf = malloc(n + 1);
    struct s3f_download_options v = {.verify_checksum = 1};
    enum s3f_status st = s3f_download_buffer(c, bucket, mismatch_key, buf, n, &v, NULL, &e);
    CHECK_INT(st, S3F_ERR_CHECKSUM);
    CHECK(strstr(e.message, "CRC32C") != NULL);
    print_err("expected", &e);
    struct s3f_download_options never = {.verify_checksum = -1};
    CHECK_INT(s3f_download_buffer(c, bucket, mismatch_key, buf, n, &never, NULL, &e), S3F_OK);
    char path[400];
    snprintf(path, sizeof(path), "%s/mismatch.bin", tmpdir);
    CHECK_INT(s3f_download_file(c, bucket, mismatch_key, path, &v, NULL, &e), S3F_ERR_CHECKSUM);
    CHECK_INT(count_dir(tmpdir), 0);
    /* the reader reports the same object data (it does not verify) */
    free(buf);
    s3f_client_free(c);
}

static void test_large(void) {
    /* opt-in: several GiB through the writer and the file path */
    const char *gib_env = getenv("S3FLASH_TEST_LARGE_GIB");
    size_t gib = gib_env ? (size_t)atoi(gib_env) : 2;
    size_t n = gib << 30;
    struct s3f_client *c = client_opts(0, 0, 0, S3F_CHECKSUM_DEFAULT);
    unsigned char *data = pattern(n, 99);
    struct s3f_error e;
    double t0 = now_s();
    CHECK_INT(s3f_upload_buffer(c, bucket, "large/obj", data, n, NULL, NULL, &e), S3F_OK);
    double t1 = now_s();
    unsigned char *buf = malloc(n);
    CHECK_INT(s3f_download_buffer(c, bucket, "large/obj", buf, n, NULL, NULL, &e), S3F_OK);
    double t2 = now_s();
    CHECK(memcmp(buf, data, n) == 0);
    printf("  %zu GiB: upload %.2f s (%.0f MB/s), download %.2f s (%.0f MB/s)\n", gib,
           t1 - t0, (double)n / (t1 - t0) / 1e6, t2 - t1, (double)n / (t2 - t1) / 1e6);
    s3f_delete_object(c, bucket, "large/obj", &e);
    free(buf);
    free(data);
    s3f_client_free(c);
}


/* ---- s3f_download_alloc: one GET of an object of unknown size ------------------------- */

struct alloc_count {
    int calls;
    size_t size;
    size_t refuse_over; /* 0: never refuse */
};

static void *count_alloc(void *ud, size_t size) {
    struct alloc_count *a = ud;
    a->calls++;
    a->size = size;
    if (a->refuse_over && size > a->refuse_over)
        return NULL;
    return malloc(size ? size : 1);
}

/* Download `key` (expected `n` bytes of `want`) with s3f_download_alloc, both allocators. */
static void check_alloc_download(struct s3f_client *c, const char *key,
                                 const unsigned char *want, size_t n) {
    struct s3f_error e;
    struct s3f_object_info hi, di;
    CHECK_INT(s3f_head_object(c, bucket, key, NULL, &hi, &e), S3F_OK);
    void *data = (void *)1;
    size_t len = 12345;
    memset(&di, 0, sizeof(di));
    enum s3f_status st = s3f_download_alloc(c, bucket, key, NULL, NULL, NULL, &data, &len, &di, &e);
    if (st)
        print_err("download_alloc", &e);
    CHECK_INT(st, S3F_OK);
    CHECK(data != NULL);
    CHECK_INT(len, n);
    CHECK_INT(di.size, n);
    CHECK_STR(di.etag, hi.etag);
    CHECK(st || n == 0 || memcmp(data, want, n) == 0);
    free(data);
    /* the caller's allocator: called once, with the exact size */
    struct alloc_count a = {0};
    data = NULL;
    st = s3f_download_alloc(c, bucket, key, NULL, count_alloc, &a, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(a.calls, 1);
    CHECK_INT(a.size, n);
    CHECK_INT(len, n);
    CHECK(st || n == 0 || memcmp(data, want, n) == 0);
    free(data);
}

static void test_download_alloc(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    size_t sizes[] = {0, 1, 1000, 64 << 10, 3 * MIB + 7, 2 * PART + 13};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        size_t n = sizes[i];
        char key[64];
        snprintf(key, sizeof(key), "alloc/%zu", n);
        unsigned char *data = pattern(n, 300 + (unsigned)i);
        /* the multipart one through the engine, the others as one PutObject */
        CHECK_INT(s3f_upload_buffer(c, bucket, key, data, n, NULL, NULL, &e), S3F_OK);
        uint64_t before;
        struct s3f_client_stats cs;
        s3f_client_stats(c, &cs, 0);
        before = cs.requests_started;
        check_alloc_download(c, key, data, n);
        s3f_client_stats(c, &cs, 0);
        /* two calls above, one data request each */
        CHECK_INT(cs.requests_started - before, 2);
        printf("  %zu bytes: one GET each\n", n);
        free(data);
    }
    /* an allocator that refuses: S3F_ERR_NO_MEMORY, nothing returned */
    struct alloc_count a = {.refuse_over = 100};
    void *data = (void *)1;
    size_t len = 1;
    enum s3f_status st =
        s3f_download_alloc(c, bucket, "alloc/1000", NULL, count_alloc, &a, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_ERR_NO_MEMORY);
    CHECK_INT(a.calls, 1);
    CHECK(data == NULL);
    CHECK_INT(len, 0);
    CHECK(strstr(e.resource, "alloc/1000") != NULL);
    /* a missing key: NoSuchKey, named, with the request id */
    data = (void *)1;
    st = s3f_download_alloc(c, bucket, "alloc/missing", NULL, NULL, NULL, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_ERR_NOT_FOUND);
    CHECK_STR(e.code, "NoSuchKey");
    CHECK_INT(e.http_status, 404);
    CHECK(e.request_id[0] != '\0');
    CHECK(strstr(e.resource, bucket) != NULL && strstr(e.resource, "alloc/missing") != NULL);
    CHECK_STR(e.operation, "GetObject");
    CHECK(data == NULL);
    print_err("expected", &e);
    /* If-Match of another ETag: 412 */
    struct s3f_download_options o = {.if_match = "\"0123456789abcdef0123456789abcdef\""};
    st = s3f_download_alloc(c, bucket, "alloc/1000", &o, NULL, NULL, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_ERR_PRECONDITION_FAILED);
    /* arguments */
    CHECK_INT(s3f_download_alloc(c, bucket, "k", NULL, NULL, NULL, NULL, &len, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f_download_alloc(c, bucket, "", NULL, NULL, NULL, &data, &len, NULL, &e),
              S3F_ERR_INVALID_ARGUMENT);
    s3f_client_free(c);
}

/* Through tests/servers/faultproxy.py, steered by test_download_alloc.py: "ck/good" and
 * "ck/bad" are answered by the proxy itself with a CRC32 header that matches the body or
 * not; the first GET of "ck/big" (a real object, uploaded here) is reset mid-body. */
static void test_download_alloc_proxy(void) {
    struct s3f_client *c = client();
    struct s3f_error e;
    void *data = NULL;
    size_t len = 0;
    struct s3f_object_info di;
    enum s3f_status st = s3f_download_alloc(c, bucket, "ck/good", NULL, NULL, NULL, &data, &len, &di, &e);
    if (st)
        print_err("good checksum", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(len, 11);
    CHECK(st || memcmp(data, "hello world", 11) == 0);
    free(data);
    data = NULL;
    st = s3f_download_alloc(c, bucket, "ck/bad", NULL, NULL, NULL, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_ERR_CHECKSUM);
    CHECK(data == NULL);
    CHECK(strstr(e.message, "CRC32") != NULL);
    CHECK_STR(e.request_id, "tx-ck-bad");
    CHECK(strstr(e.resource, "ck/bad") != NULL);
    print_err("expected", &e);
    struct s3f_download_options never = {.verify_checksum = -1};
    st = s3f_download_alloc(c, bucket, "ck/bad", &never, NULL, NULL, &data, &len, NULL, &e);
    CHECK_INT(st, S3F_OK);
    free(data);
    size_t n = 2 * PART + 5;
    unsigned char *want = pattern(n, 77);
    CHECK_INT(s3f_put_object(c, bucket, "ck/big", want, n, NULL, NULL, &e), S3F_OK);
    struct alloc_count a = {0};
    data = NULL;
    st = s3f_download_alloc(c, bucket, "ck/big", NULL, count_alloc, &a, &data, &len, &di, &e);
    if (st)
        print_err("resumed download", &e);
    CHECK_INT(st, S3F_OK);
    CHECK_INT(a.calls, 1);
    CHECK_INT(len, n);
    CHECK(st || memcmp(data, want, n) == 0);
    free(data);
    free(want);
    s3f_client_free(c);
}

/* ---- main ----------------------------------------------------------------------------- */

static void empty_bucket(struct s3f_client *c) {
    for (;;) {
        struct s3f_list_page *pg = NULL;
        struct s3f_error e;
        if (s3f_list_objects_v2(c, bucket, NULL, &pg, &e) != S3F_OK)
            return;
        size_t n = pg->n_objects;
        const char **keys = calloc(n ? n : 1, sizeof(*keys));
        for (size_t i = 0; i < n; i++)
            keys[i] = pg->objects[i].key;
        if (n)
            s3f_delete_objects(c, bucket, keys, n, NULL, &e);
        free(keys);
        int more = pg->is_truncated;
        s3f_list_page_free(pg);
        if (!n || !more)
            return;
    }
}

int main(int argc, char **argv) {
    endpoint = getenv("S3FLASH_TEST_ENDPOINT");
    access_key = getenv("S3FLASH_TEST_ACCESS_KEY");
    secret_key = getenv("S3FLASH_TEST_SECRET_KEY");
    region = getenv("S3FLASH_TEST_REGION");
    if (!endpoint || !access_key || !secret_key) {
        fprintf(stderr, "set S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET_KEY\n");
        return 2;
    }
    snprintf(bucket, sizeof(bucket), "xfer-test-%d", (int)getpid());
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/s3flash-xfer-%d", t && *t ? t : "/tmp", (int)getpid());
    mkdir(tmpdir, 0755);
    if (argc > 3 && strcmp(argv[1], "test_verify_mismatch") == 0) {
        /* works in the caller's bucket */
        snprintf(bucket, sizeof(bucket), "%s", argv[2]);
        mismatch_key = argv[3];
        RUN(test_verify_mismatch);
        rmdir(tmpdir);
        return test_summary();
    }
    struct s3f_client *c = client();
    struct s3f_error e;
    if (!c || s3f_create_bucket(c, bucket, &e) != S3F_OK) {
        print_err("create bucket", &e);
        return 1;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(fn)                                                                          \
    if (!only || strcmp(only, #fn) == 0)                                                   \
    RUN(fn)
    MAYBE(test_roundtrip_sizes);
    MAYBE(test_writer);
    MAYBE(test_iov_upload);
    MAYBE(test_file);
    if (only && strcmp(only, "test_file_write_error") == 0)
        RUN(test_file_write_error);
    MAYBE(test_reader);
    MAYBE(test_reader_records);
    MAYBE(test_abort);
    MAYBE(test_errors);
    MAYBE(test_changed_during_download);
    MAYBE(test_memory_bound);
    MAYBE(test_pool_loans);
    MAYBE(test_pool_starved);
    MAYBE(test_fairness);
    MAYBE(test_progress);
    MAYBE(test_copy);
    MAYBE(test_upload_part_copy);
    if (only && strcmp(only, "test_copy_source_replaced") == 0)
        RUN(test_copy_source_replaced);
    if (only && strcmp(only, "test_checksums") == 0)
        RUN(test_checksums);
    if (only && strcmp(only, "test_large") == 0)
        RUN(test_large);
    MAYBE(test_download_alloc);
    if (only && strcmp(only, "test_download_alloc_proxy") == 0)
        RUN(test_download_alloc_proxy);
    empty_bucket(c);
    enum s3f_status st = s3f_delete_bucket(c, bucket, &e);
    if (st)
        print_err("delete bucket", &e);
    CHECK_INT(st, S3F_OK);
    s3f_client_free(c);
    rmdir(tmpdir);
    return test_summary();
}
