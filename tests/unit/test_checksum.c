/* Checksums: CRC32C, CRC32 and CRC64NVME against the published check values
 * (tests/vectors/checksums/README.md, from ../shared/vectors/README.md), every CRC64NVME
 * implementation against a bit-at-a-time reference written here from the parameters,
 * incremental updates, combination of parts into the whole-object value, the header forms. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"
#include "core/core.h"
#include "testutil.h"

#define MIB (1024u * 1024u)

/* ---- an independent reference: bit at a time, from the catalogue parameters ---------- */

static uint64_t reflect(uint64_t v, int w) {
    uint64_t r = 0;
    for (int i = 0; i < w; i++)
        if (v & ((uint64_t)1 << i))
            r |= (uint64_t)1 << (w - 1 - i);
    return r;
}

/* refin = refout = true, init = xorout = all ones. */
static uint64_t ref_crc(uint64_t poly, int w, const void *data, size_t len) {
    uint64_t mask = w == 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1);
    uint64_t rpoly = reflect(poly, w), c = mask;
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = (c & 1) ? (c >> 1) ^ rpoly : c >> 1;
    }
    return c ^ mask;
}

static uint64_t ref_crc64nvme(const void *d, size_t n) {
    return ref_crc(0xad93d23594c93659u, 64, d, n);
}
static uint64_t ref_crc32c(const void *d, size_t n) {
    return ref_crc(0x1edc6f41u, 32, d, n);
}
static uint64_t ref_crc32(const void *d, size_t n) {
    return ref_crc(0x04c11db7u, 32, d, n);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void) { /* xorshift64*: reproducible */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

static void fill_random(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rnd() >> 56);
}

static const enum s3f_checksum_algorithm algs[] = {S3F_CHECKSUM_CRC32C, S3F_CHECKSUM_CRC32,
                                                   S3F_CHECKSUM_CRC64NVME};

static uint64_t ref_of(enum s3f_checksum_algorithm alg, const void *d, size_t n) {
    switch (alg) {
    case S3F_CHECKSUM_CRC32:
        return ref_crc32(d, n);
    case S3F_CHECKSUM_CRC64NVME:
        return ref_crc64nvme(d, n);
    default:
        return ref_crc32c(d, n);
    }
}

static const char *b64_of(enum s3f_checksum_algorithm alg, const void *d, size_t n,
                          char out[S3F__CHECKSUM_B64_MAX]) {
    struct s3f__checksum c = s3f__checksum_of(alg, d, n);
    s3f__checksum_b64(&c, out);
    return out;
}

/* ---- check values ---------------------------------------------------------------------- */

static void test_check_values(void) {
    const char *s = "123456789";
    char b64[S3F__CHECKSUM_B64_MAX];
    /* the reference itself first: it must reproduce the catalogue */
    CHECK(ref_crc64nvme(s, 9) == 0xae8b14860a799888u);
    CHECK(ref_crc32c(s, 9) == 0xe3069283u);
    CHECK(ref_crc32(s, 9) == 0xcbf43926u);

    CHECK(s3f__crc64nvme(0, s, 9) == 0xae8b14860a799888u);
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_CRC32C, s, 9).crc, 0xe3069283u);
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_DEFAULT, s, 9).crc, 0xe3069283u);
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_CRC32, s, 9).crc, 0xcbf43926u);
    CHECK(s3f__checksum_of(S3F_CHECKSUM_CRC64NVME, s, 9).crc == 0xae8b14860a799888u);
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC32, s, 9, b64), "y/Q5Jg==");
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC32C, s, 9, b64), "4waSgw==");
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC64NVME, s, 9, b64), "rosUhgp5mIg=");

    uint8_t zeros[32] = {0}, seq[32];
    for (int i = 0; i < 32; i++)
        seq[i] = (uint8_t)i;
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_CRC32, zeros, 32).crc, 0x190A55ADu);
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_CRC32C, zeros, 32).crc, 0x8A9136AAu);
    CHECK(s3f__crc64nvme(0, zeros, 32) == 0xCF3473434D4ECF3Bu);
    CHECK_INT(s3f__checksum_of(S3F_CHECKSUM_CRC32C, seq, 32).crc, 0x46DD794Eu);
    CHECK(s3f__crc64nvme(0, seq, 32) == 0xB9D9D4A8492CBD7Fu);
    CHECK(s3f__crc64nvme(0, "Hello world", 11) == 0x38E259D03F312ADBu);

    uint8_t a1024[1024];
    memset(a1024, 'A', sizeof(a1024));
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC64NVME, a1024, 1024, b64), "Qeh8oXvGiSo=");
    uint8_t sha[32];
    char sha_b64[48];
    s3f__sha256(a1024, 1024, sha);
    s3f__base64(sha, 32, sha_b64);
    CHECK_STR(sha_b64, "arcu6553sHVAiX4MjW0j7I7vD4w6R+Gz9Ok0Q9lTa+0=");

    /* the empty input */
    CHECK(s3f__crc64nvme(0, NULL, 0) == 0);
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC32C, NULL, 0, b64), "AAAAAA==");
    CHECK_STR(b64_of(S3F_CHECKSUM_CRC64NVME, NULL, 0, b64), "AAAAAAAAAAA=");
}

/* Three 5 MiB parts of 'A', 'B', 'C': per-part values, and the FULL_OBJECT value both by
 * combining the parts and in one pass. */
static void test_three_parts(void) {
    static const char *want[3][4] = {
        {"MDaLrw==", "TH4EZg==", "Z7mBIQ==", "xU+Krw=="},                 /* CRC32C */
        {"JRTCyQ==", "QoZTGg==", "YAgjqw==", "WgDhBQ=="},                 /* CRC32 */
        {"L/E4WYn8v98=", "xW1l19VobYM=", "cK5MnNaWrW4=", "i+6LR0y3eFo="}, /* CRC64NVME */
    };
    size_t part = 5 * MIB;
    uint8_t *obj = malloc(3 * part);
    CHECK(obj != NULL);
    if (!obj)
        return;
    for (int i = 0; i < 3; i++)
        memset(obj + i * part, 'A' + i, part);
    char b64[S3F__CHECKSUM_B64_MAX];
    for (size_t a = 0; a < S3F_ARRAY_LEN(algs); a++) {
        struct s3f__checksum parts[3], whole;
        for (int i = 0; i < 3; i++) {
            parts[i] = s3f__checksum_of(algs[a], obj + i * part, part);
            s3f__checksum_b64(&parts[i], b64);
            CHECK_STR(b64, want[a][i]);
        }
        whole = parts[0];
        CHECK_INT(s3f__checksum_combine(&whole, &parts[1], part), 0);
        CHECK_INT(s3f__checksum_combine(&whole, &parts[2], part), 0);
        s3f__checksum_b64(&whole, b64);
        CHECK_STR(b64, want[a][3]);
        /* combining the other way round: A || (B || C) */
        struct s3f__checksum bc = parts[1], abc = parts[0];
        s3f__checksum_combine(&bc, &parts[2], part);
        s3f__checksum_combine(&abc, &bc, 2 * part);
        CHECK(abc.crc == whole.crc);
        struct s3f__checksum one = s3f__checksum_of(algs[a], obj, 3 * part);
        s3f__checksum_b64(&one, b64);
        CHECK_STR(b64, want[a][3]);
        CHECK(one.crc == whole.crc);
    }
    free(obj);
}

/* ---- every CRC64NVME implementation against the reference ---------------------------- */

static void test_crc64_impls(void) {
    enum s3f__crc64_impl best = s3f__crc64nvme_impl();
    printf("  crc64nvme implementation: %s\n", s3f__crc64nvme_impl_name(best));
    size_t max = 5000;
    uint8_t *buf = malloc(max + 64);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill_random(buf, max + 64);
    int tried = 0;
    for (int impl = S3F__CRC64_TABLE; impl <= S3F__CRC64_ISAL; impl++) {
        if (s3f__crc64nvme_set_impl((enum s3f__crc64_impl)impl) != 0) {
            printf("  %s: not on this CPU or in this build, skipped\n",
                   s3f__crc64nvme_impl_name(impl));
            continue;
        }
        tried++;
        int bad = 0;
        /* every length through the thresholds (16, 128, 256, 1024 and rounds), odd
         * alignments */
        for (size_t len = 0; len <= max && bad < 5; len += (len < 2200 ? 1 : 37)) {
            size_t off = len % 61;
            uint64_t want = ref_crc64nvme(buf + off, len);
            uint64_t got = s3f__crc64nvme(0, buf + off, len);
            if (want != got) {
                bad++;
                test_fail(__FILE__, __LINE__, "%s len %zu off %zu: %016" PRIx64
                          " != %016" PRIx64, s3f__crc64nvme_impl_name(impl), len, off, got,
                          want);
            }
        }
        CHECK_INT(bad, 0);
        /* a running value that is not the start */
        uint64_t c = s3f__crc64nvme(0, buf, 3);
        CHECK(s3f__crc64nvme(c, buf + 3, 4000) == ref_crc64nvme(buf, 4003));
    }
    CHECK(tried >= 1);
    CHECK_INT(s3f__crc64nvme_set_impl((enum s3f__crc64_impl)99), -1);
    CHECK_INT(s3f__crc64nvme_set_impl(best), 0);
    CHECK_INT(s3f__crc64nvme_impl(), best);
    free(buf);
}

/* A larger buffer: all implementations agree, and agree with the reference. */
static void test_crc64_large(void) {
    size_t n = 3 * MIB + 12345;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill_random(buf, n);
    uint64_t want = ref_crc64nvme(buf, n);
    enum s3f__crc64_impl best = s3f__crc64nvme_impl();
    for (int impl = S3F__CRC64_TABLE; impl <= S3F__CRC64_ISAL; impl++) {
        if (s3f__crc64nvme_set_impl((enum s3f__crc64_impl)impl) != 0)
            continue; /* not on this CPU or in this build */
        CHECK(s3f__crc64nvme(0, buf, n) == want);
        CHECK(s3f__crc64nvme(0, buf + 1, n - 1) == ref_crc64nvme(buf + 1, n - 1));
    }
    s3f__crc64nvme_set_impl(best);
    free(buf);
}

/* ---- incremental and combine ----------------------------------------------------------- */

static void test_incremental(void) {
    size_t n = 300000;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill_random(buf, n);
    for (size_t a = 0; a < S3F_ARRAY_LEN(algs); a++) {
        uint64_t want = ref_of(algs[a], buf, n);
        CHECK(s3f__checksum_of(algs[a], buf, n).crc == want);
        int bad = 0;
        for (int round = 0; round < 50; round++) {
            struct s3f__checksum c;
            CHECK_INT(s3f__checksum_init(&c, algs[a]), S3F_OK);
            size_t pos = 0;
            while (pos < n) {
                /* short pieces, medium, and empty ones */
                size_t k = (size_t)(rnd() % (round & 1 ? 40000 : 300));
                if (k > n - pos)
                    k = n - pos;
                s3f__checksum_update(&c, buf + pos, k);
                pos += k;
            }
            bad += c.crc != want;
        }
        CHECK_INT(bad, 0);
    }
    free(buf);
}

static void test_combine(void) {
    size_t n = 100000;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill_random(buf, n);
    for (size_t a = 0; a < S3F_ARRAY_LEN(algs); a++) {
        enum s3f_checksum_algorithm alg = algs[a];
        uint64_t want = ref_of(alg, buf, n);
        int bad = 0;
        for (int round = 0; round < 200; round++) {
            size_t split = round < 3 ? (size_t[]){0, 1, n}[round] : (size_t)(rnd() % (n + 1));
            struct s3f__checksum x = s3f__checksum_of(alg, buf, split);
            struct s3f__checksum y = s3f__checksum_of(alg, buf + split, n - split);
            s3f__checksum_combine(&x, &y, n - split);
            bad += x.crc != want;
        }
        CHECK_INT(bad, 0);
        /* many parts, in order */
        struct s3f__checksum acc;
        s3f__checksum_init(&acc, alg);
        for (size_t pos = 0, k; pos < n; pos += k) {
            k = 1 + (size_t)(rnd() % 7000);
            if (k > n - pos)
                k = n - pos;
            struct s3f__checksum part = s3f__checksum_of(alg, buf + pos, k);
            s3f__checksum_combine(&acc, &part, k);
        }
        CHECK(acc.crc == want);
        /* len2 = 0: the second CRC is of nothing, the first is unchanged */
        struct s3f__checksum x = s3f__checksum_of(alg, buf, 1000), e;
        s3f__checksum_init(&e, alg);
        uint64_t before = x.crc;
        s3f__checksum_combine(&x, &e, 0);
        CHECK(x.crc == before);
        /* nothing combined with something is the something */
        s3f__checksum_combine(&e, &x, 1000);
        CHECK(e.crc == before);
    }
    /* the raw functions */
    CHECK_INT(s3f__crc32c_combine(0xe3069283u, 0, 0), 0xe3069283u);
    CHECK_INT(s3f__crc32_combine(0xcbf43926u, 0, 0), 0xcbf43926u);
    CHECK(s3f__crc64nvme_combine(0xae8b14860a799888u, 0, 0) == 0xae8b14860a799888u);
    CHECK_INT(s3f__crc32c_combine(s3f__crc32c(0, "1234", 4), s3f__crc32c(0, "56789", 5), 5),
              0xe3069283u);
    CHECK_INT(s3f__crc32_combine(s3f__crc32(0, "12", 2), s3f__crc32(0, "3456789", 7), 7),
              0xcbf43926u);
    CHECK(s3f__crc64nvme_combine(s3f__crc64nvme(0, "123456", 6), s3f__crc64nvme(0, "789", 3),
                                 3) == 0xae8b14860a799888u);
    free(buf);
}

/* A long run of zeros combined in: the exponent tables at large lengths. Combining a
 * 1 MiB zero block 2^k times by doubling must equal combining the whole length at once. */
static void test_combine_long(void) {
    size_t z = MIB;
    uint8_t *zeros = calloc(1, z);
    CHECK(zeros != NULL);
    if (!zeros)
        return;
    for (size_t a = 0; a < S3F_ARRAY_LEN(algs); a++) {
        enum s3f_checksum_algorithm alg = algs[a];
        struct s3f__checksum blk = s3f__checksum_of(alg, zeros, z);
        /* zeros of 2^k MiB by doubling, up to 1 TiB */
        struct s3f__checksum run = blk;
        uint64_t len = z;
        for (int k = 0; k < 20; k++) {
            struct s3f__checksum copy = run;
            s3f__checksum_combine(&run, &copy, len);
            len *= 2;
        }
        /* "x" || 1 TiB of zeros, two ways */
        struct s3f__checksum x1 = s3f__checksum_of(alg, "x", 1), x2 = x1;
        s3f__checksum_combine(&x1, &run, len);
        /* x2: "x" || zeros built from 1 MiB blocks in the other order: a zero run of length
         * L has the CRC of zeros; combine(x, Z(L)) == combine(combine(x, Z(L/2)), Z(L/2)) */
        struct s3f__checksum half = blk;
        uint64_t hlen = z;
        for (int k = 0; k < 19; k++) {
            struct s3f__checksum copy = half;
            s3f__checksum_combine(&half, &copy, hlen);
            hlen *= 2;
        }
        s3f__checksum_combine(&x2, &half, hlen);
        s3f__checksum_combine(&x2, &half, hlen);
        CHECK(x1.crc == x2.crc);
        CHECK(x1.crc != s3f__checksum_of(alg, "x", 1).crc);
    }
    free(zeros);
}

/* ---- names, sizes, NONE, invalid ------------------------------------------------------- */

static void test_names(void) {
    CHECK_STR(s3f__checksum_header_name(S3F_CHECKSUM_CRC32C), "x-amz-checksum-crc32c");
    CHECK_STR(s3f__checksum_header_name(S3F_CHECKSUM_DEFAULT), "x-amz-checksum-crc32c");
    CHECK_STR(s3f__checksum_header_name(S3F_CHECKSUM_CRC32), "x-amz-checksum-crc32");
    CHECK_STR(s3f__checksum_header_name(S3F_CHECKSUM_CRC64NVME), "x-amz-checksum-crc64nvme");
    CHECK(s3f__checksum_header_name(S3F_CHECKSUM_NONE) == NULL);
    CHECK(s3f__checksum_header_name((enum s3f_checksum_algorithm)42) == NULL);
    CHECK_STR(s3f__checksum_algorithm_name(S3F_CHECKSUM_CRC32C), "CRC32C");
    CHECK_STR(s3f__checksum_algorithm_name(S3F_CHECKSUM_DEFAULT), "CRC32C");
    CHECK_STR(s3f__checksum_algorithm_name(S3F_CHECKSUM_CRC32), "CRC32");
    CHECK_STR(s3f__checksum_algorithm_name(S3F_CHECKSUM_CRC64NVME), "CRC64NVME");
    CHECK(s3f__checksum_algorithm_name(S3F_CHECKSUM_NONE) == NULL);
    CHECK(s3f__checksum_algorithm_name((enum s3f_checksum_algorithm)-1) == NULL);
    CHECK_INT(s3f__checksum_size(S3F_CHECKSUM_CRC32C), 4);
    CHECK_INT(s3f__checksum_size(S3F_CHECKSUM_CRC32), 4);
    CHECK_INT(s3f__checksum_size(S3F_CHECKSUM_CRC64NVME), 8);
    CHECK_INT(s3f__checksum_size(S3F_CHECKSUM_NONE), 0);

    struct s3f__checksum c;
    CHECK_INT(s3f__checksum_init(&c, S3F_CHECKSUM_DEFAULT), S3F_OK);
    CHECK_INT(c.alg, S3F_CHECKSUM_CRC32C);
    CHECK_INT(s3f__checksum_init(&c, S3F_CHECKSUM_NONE), S3F_OK);
    s3f__checksum_update(&c, "abc", 3);
    CHECK_INT(c.crc, 0);
    char b64[S3F__CHECKSUM_B64_MAX] = "junk";
    CHECK_INT(s3f__checksum_b64(&c, b64), 0);
    CHECK_STR(b64, "");
    CHECK_INT(s3f__checksum_init(&c, (enum s3f_checksum_algorithm)77), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(c.alg, S3F_CHECKSUM_NONE);
    /* the big-endian header form, lengths */
    struct s3f__checksum v = {S3F_CHECKSUM_CRC64NVME, 0x0102030405060708u};
    CHECK_INT(s3f__checksum_b64(&v, b64), 12);
    CHECK_STR(b64, "AQIDBAUGBwg=");
    v.alg = S3F_CHECKSUM_CRC32;
    v.crc = 0x01020304u;
    CHECK_INT(s3f__checksum_b64(&v, b64), 8);
    CHECK_STR(b64, "AQIDBA==");
    /* combining different algorithms is refused and changes nothing */
    struct s3f__checksum a = s3f__checksum_of(S3F_CHECKSUM_CRC32C, "ab", 2);
    struct s3f__checksum b = s3f__checksum_of(S3F_CHECKSUM_CRC32, "cd", 2);
    uint64_t before = a.crc;
    CHECK_INT(s3f__checksum_combine(&a, &b, 2), -1);
    CHECK(a.crc == before);
}

int main(void) {
    RUN(test_check_values);
    RUN(test_three_parts);
    RUN(test_crc64_impls);
    RUN(test_crc64_large);
    RUN(test_incremental);
    RUN(test_combine);
    RUN(test_combine_long);
    RUN(test_names);
    return test_summary();
}
