/* CRC64NVME, CRC combination and the algorithm-generic checksum (see checksum.h).
 *
 * All CRCs here are reflected, so a value is kept "reflected": bit i of a w-bit register is
 * the coefficient of x^(w-1-i). ISA-L (2.30) has no CRC-64/NVME (its crc64 variants are ECMA,
 * ISO and Jones; none gives 0xae8b14860a799888 for "123456789"), so CRC64NVME is computed
 * here: slice-by-8 tables everywhere, and on x86-64 carry-less multiplication folding
 * (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", 2009), 128 bits
 * wide with PCLMULQDQ or 512 bits wide with AVX-512 VPCLMULQDQ, chosen at run time.
 *
 * Folding: a 128-bit block X = H x^64 + L that lies D bits before the end of what has been
 * read so far is replaced by H (x^(64+D) mod P) + L (x^D mod P), which is congruent to
 * X x^D and fits again in 128 bits; that value is xor-ed into the block D bits further on.
 * In the reflected domain a carry-less product of two 64-bit values comes out multiplied by
 * one extra x, so the constants are x^(63+D) mod P and x^(D-1) mod P. The last 128-bit block
 * and the bytes after it go through the tables (CRC of the block from a zero register is
 * block * x^64 mod P, exactly what is left to do). The constants are computed at start-up
 * from the polynomial with the same GF(2) arithmetic that combines CRCs. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "checksum.h"
#ifdef S3F_HAVE_ISAL_CRC64_ROCKSOFT
#include <isa-l/crc64.h>
#endif
#include "core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define S3F_CRC_X86 1
#include <immintrin.h>
#endif

/* Reflected polynomials (x^w term implied). */
#define POLY_CRC32C 0x82f63b78u            /* 0x1edc6f41 reflected */
#define POLY_CRC32 0xedb88320u             /* 0x04c11db7 reflected */
#define POLY_CRC64NVME 0x9a6c9329ac4bc9b5u /* 0xad93d23594c93659 reflected */

/* ---- GF(2) arithmetic modulo P, reflected ------------------------------------------ */

struct gf2 {
    uint64_t poly;
    unsigned width;     /* 32 or 64 */
    uint64_t x2n[67];   /* x^(2^k) mod P: enough for x^(8n) with any 64-bit n */
};

static struct gf2 gf_crc32c = {POLY_CRC32C, 32, {0}};
static struct gf2 gf_crc32 = {POLY_CRC32, 32, {0}};
static struct gf2 gf_crc64 = {POLY_CRC64NVME, 64, {0}};

/* a * b mod P (zlib's multmodp, any width up to 64). */
static uint64_t multmodp(const struct gf2 *g, uint64_t a, uint64_t b) {
    uint64_t m = (uint64_t)1 << (g->width - 1), p = 0;
    if (!a)
        return 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ g->poly : b >> 1;
    }
    return p;
}

/* x^(n 2^k) mod P, for k + log2(n) < 67. */
static uint64_t xpow(const struct gf2 *g, uint64_t n, unsigned k) {
    uint64_t p = (uint64_t)1 << (g->width - 1); /* x^0 */
    while (n) {
        if (n & 1)
            p = multmodp(g, g->x2n[k], p);
        n >>= 1;
        k++;
    }
    return p;
}

static void gf2_init(struct gf2 *g) {
    g->x2n[0] = (uint64_t)1 << (g->width - 2); /* x^1 */
    for (size_t k = 1; k < S3F_ARRAY_LEN(g->x2n); k++)
        g->x2n[k] = multmodp(g, g->x2n[k - 1], g->x2n[k - 1]);
}

/* ---- CRC64NVME: slice-by-8 ---------------------------------------------------------- */

static uint64_t crc64_tab[8][256];

static void crc64_tables_init(void) {
    for (unsigned i = 0; i < 256; i++) {
        uint64_t c = i;
        for (int j = 0; j < 8; j++)
            c = (c & 1) ? (c >> 1) ^ POLY_CRC64NVME : c >> 1;
        crc64_tab[0][i] = c;
    }
    for (unsigned i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc64_tab[k][i] = (crc64_tab[k - 1][i] >> 8) ^ crc64_tab[0][crc64_tab[k - 1][i] & 0xff];
}

static inline uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* The raw register (no inversions) after `len` more bytes. */
static uint64_t crc64_table(uint64_t reg, const uint8_t *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        reg = crc64_tab[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
        len--;
    }
    while (len >= 8) {
        reg ^= load_le64(p);
        reg = crc64_tab[7][reg & 0xff] ^ crc64_tab[6][(reg >> 8) & 0xff] ^
              crc64_tab[5][(reg >> 16) & 0xff] ^ crc64_tab[4][(reg >> 24) & 0xff] ^
              crc64_tab[3][(reg >> 32) & 0xff] ^ crc64_tab[2][(reg >> 40) & 0xff] ^
              crc64_tab[1][(reg >> 48) & 0xff] ^ crc64_tab[0][reg >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        reg = crc64_tab[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
    return reg;
}

/* ---- CRC64NVME: carry-less multiplication folding ---------------------------------- */

/* Fold constants for a distance of D bits: {x^(63+D) mod P, x^(D-1) mod P}, applied to the
 * low (H) and high (L) 64-bit halves of a block. */
struct fold_k {
    uint64_t h, l;
};
static struct fold_k k128, k512, k1024, k2048;

static struct fold_k fold_constants(unsigned d) {
    struct fold_k k = {xpow(&gf_crc64, 63 + d, 0), xpow(&gf_crc64, d - 1, 0)};
    return k;
}

#ifdef S3F_CRC_X86
#define TARGET_PCLMUL __attribute__((target("pclmul,sse4.1")))
#define TARGET_VPCLMUL __attribute__((target("pclmul,sse4.1,avx512f,avx512vl,vpclmulqdq")))

TARGET_PCLMUL static inline __m128i fold128(__m128i x, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* The last block through the tables, then the tail. */
TARGET_PCLMUL static uint64_t finish128(__m128i a, const uint8_t *p, size_t len) {
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)b, a);
    return crc64_table(crc64_table(0, b, 16), p, len);
}

/* 8 lanes of 128 bits (128 bytes a round). */
TARGET_PCLMUL static uint64_t crc64_pclmul(uint64_t reg, const uint8_t *p, size_t len) {
    if (len < 256)
        return crc64_table(reg, p, len);
    const __m128i kd = _mm_set_epi64x((long long)k1024.l, (long long)k1024.h);
    const __m128i k1 = _mm_set_epi64x((long long)k128.l, (long long)k128.h);
    __m128i x[8];
    for (int i = 0; i < 8; i++)
        x[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    x[0] = _mm_xor_si128(x[0], _mm_cvtsi64_si128((long long)reg));
    p += 128;
    len -= 128;
    while (len >= 128) {
        for (int i = 0; i < 8; i++)
            x[i] = _mm_xor_si128(fold128(x[i], kd),
                                 _mm_loadu_si128((const __m128i *)(p + 16 * i)));
        p += 128;
        len -= 128;
    }
    __m128i a = x[0];
    for (int i = 1; i < 8; i++)
        a = _mm_xor_si128(fold128(a, k1), x[i]);
    while (len >= 16) {
        a = _mm_xor_si128(fold128(a, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    return finish128(a, p, len);
}

TARGET_VPCLMUL static inline __m512i fold512(__m512i z, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00),
                                     _mm512_clmulepi64_epi128(z, k, 0x11), next, 0x96);
}

TARGET_VPCLMUL static inline __m512i bcast(struct fold_k k) {
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k.l, (long long)k.h));
}

/* 4 registers of 4 lanes of 128 bits (256 bytes a round). */
TARGET_VPCLMUL static uint64_t crc64_vpclmul(uint64_t reg, const uint8_t *p, size_t len) {
    if (len < 1024)
        return crc64_pclmul(reg, p, len);
    const __m512i kd = bcast(k2048), k4 = bcast(k512);
    const __m128i k1 = _mm_set_epi64x((long long)k128.l, (long long)k128.h);
    __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 64),
            z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
    z0 = _mm512_xor_si512(
        z0, _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi64_si128((long long)reg), 0));
    p += 256;
    len -= 256;
    while (len >= 256) {
        z0 = fold512(z0, kd, _mm512_loadu_si512(p));
        z1 = fold512(z1, kd, _mm512_loadu_si512(p + 64));
        z2 = fold512(z2, kd, _mm512_loadu_si512(p + 128));
        z3 = fold512(z3, kd, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    __m512i z = fold512(z0, k4, z1);
    z = fold512(z, k4, z2);
    z = fold512(z, k4, z3);
    while (len >= 64) {
        z = fold512(z, k4, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
    __m128i a = _mm512_extracti32x4_epi32(z, 0);
    a = _mm_xor_si128(fold128(a, k1), _mm512_extracti32x4_epi32(z, 1));
    a = _mm_xor_si128(fold128(a, k1), _mm512_extracti32x4_epi32(z, 2));
    a = _mm_xor_si128(fold128(a, k1), _mm512_extracti32x4_epi32(z, 3));
    while (len >= 16) {
        a = _mm_xor_si128(fold128(a, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    return finish128(a, p, len);
}
#endif /* S3F_CRC_X86 */

/* ---- dispatch and start-up ----------------------------------------------------------- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int crc64_impl = S3F__CRC64_TABLE;
static int crc64_best = S3F__CRC64_TABLE;
static unsigned crc64_avail = 1u << S3F__CRC64_TABLE; /* the implementations this CPU runs */

static void init_all(void) {
    gf2_init(&gf_crc32c);
    gf2_init(&gf_crc32);
    gf2_init(&gf_crc64);
    crc64_tables_init();
    k128 = fold_constants(128);
    k512 = fold_constants(512);
    k1024 = fold_constants(1024);
    k2048 = fold_constants(2048);
#ifdef S3F_CRC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        crc64_best = S3F__CRC64_PCLMUL;
        crc64_avail |= 1u << S3F__CRC64_PCLMUL;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("vpclmulqdq")) {
            crc64_best = S3F__CRC64_VPCLMUL;
            crc64_avail |= 1u << S3F__CRC64_VPCLMUL;
        }
    }
#endif
#ifdef S3F_HAVE_ISAL_CRC64_ROCKSOFT
    crc64_best = S3F__CRC64_ISAL; /* ISA-L picks its own best code for the CPU */
    crc64_avail |= 1u << S3F__CRC64_ISAL;
#endif
    atomic_store_explicit(&crc64_impl, crc64_best, memory_order_relaxed);
}

static inline void ensure_init(void) {
    pthread_once(&init_once, init_all);
}

static uint64_t crc64_raw(uint64_t reg, const uint8_t *p, size_t len) {
    switch (atomic_load_explicit(&crc64_impl, memory_order_relaxed)) {
#ifdef S3F_HAVE_ISAL_CRC64_ROCKSOFT
    case S3F__CRC64_ISAL: /* ISA-L inverts on the way in and out; reg is already inverted */
        return ~crc64_rocksoft_refl(~reg, p, len);
#endif
#ifdef S3F_CRC_X86
    case S3F__CRC64_VPCLMUL:
        return crc64_vpclmul(reg, p, len);
    case S3F__CRC64_PCLMUL:
        return crc64_pclmul(reg, p, len);
#endif
    default:
        return crc64_table(reg, p, len);
    }
}

uint64_t s3f__crc64nvme(uint64_t crc, const void *data, size_t len) {
    ensure_init();
    if (!len)
        return crc;
    return ~crc64_raw(~crc, data, len);
}

enum s3f__crc64_impl s3f__crc64nvme_impl(void) {
    ensure_init();
    return (enum s3f__crc64_impl)atomic_load_explicit(&crc64_impl, memory_order_relaxed);
}

int s3f__crc64nvme_set_impl(enum s3f__crc64_impl impl) {
    ensure_init();
    if ((int)impl < S3F__CRC64_TABLE || (int)impl > S3F__CRC64_ISAL ||
        !(crc64_avail & (1u << impl)))
        return -1;
    atomic_store_explicit(&crc64_impl, (int)impl, memory_order_relaxed);
    return 0;
}

const char *s3f__crc64nvme_impl_name(enum s3f__crc64_impl impl) {
    switch (impl) {
    case S3F__CRC64_TABLE:
        return "slice-by-8";
    case S3F__CRC64_PCLMUL:
        return "pclmulqdq";
    case S3F__CRC64_VPCLMUL:
        return "avx512-vpclmulqdq";
    case S3F__CRC64_ISAL:
        return "isa-l crc64_rocksoft_refl";
    }
    return "unknown";
}

/* ---- combine ------------------------------------------------------------------------- */

/* With init == xorout the two cancel out: CRC(A||B) = CRC(A) x^(8|B|) + CRC(B) mod P. */
static uint64_t combine(const struct gf2 *g, uint64_t crc1, uint64_t crc2, uint64_t len2) {
    ensure_init();
    return multmodp(g, xpow(g, len2, 3), crc1) ^ crc2;
}

uint32_t s3f__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return (uint32_t)combine(&gf_crc32c, crc1, crc2, len2);
}

uint32_t s3f__crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return (uint32_t)combine(&gf_crc32, crc1, crc2, len2);
}

uint64_t s3f__crc64nvme_combine(uint64_t crc1, uint64_t crc2, uint64_t len2) {
    return combine(&gf_crc64, crc1, crc2, len2);
}

/* ---- generic ------------------------------------------------------------------------- */

static enum s3f_checksum_algorithm normalize(enum s3f_checksum_algorithm alg) {
    return alg == S3F_CHECKSUM_DEFAULT ? S3F_CHECKSUM_CRC32C : alg;
}

enum s3f_status s3f__checksum_init(struct s3f__checksum *c, enum s3f_checksum_algorithm alg) {
    c->crc = 0;
    switch (normalize(alg)) {
    case S3F_CHECKSUM_NONE:
    case S3F_CHECKSUM_CRC32C:
    case S3F_CHECKSUM_CRC32:
    case S3F_CHECKSUM_CRC64NVME:
        c->alg = normalize(alg);
        return S3F_OK;
    default:
        c->alg = S3F_CHECKSUM_NONE;
        return S3F_ERR_INVALID_ARGUMENT;
    }
}

void s3f__checksum_update(struct s3f__checksum *c, const void *data, size_t len) {
    if (!len)
        return;
    switch (c->alg) {
    case S3F_CHECKSUM_CRC32C:
        c->crc = s3f__crc32c((uint32_t)c->crc, data, len);
        break;
    case S3F_CHECKSUM_CRC32:
        c->crc = s3f__crc32((uint32_t)c->crc, data, len);
        break;
    case S3F_CHECKSUM_CRC64NVME:
        c->crc = s3f__crc64nvme(c->crc, data, len);
        break;
    default:
        break;
    }
}

int s3f__checksum_combine(struct s3f__checksum *a, const struct s3f__checksum *b,
                          uint64_t len_b) {
    if (a->alg != b->alg)
        return -1;
    switch (a->alg) {
    case S3F_CHECKSUM_CRC32C:
        a->crc = s3f__crc32c_combine((uint32_t)a->crc, (uint32_t)b->crc, len_b);
        break;
    case S3F_CHECKSUM_CRC32:
        a->crc = s3f__crc32_combine((uint32_t)a->crc, (uint32_t)b->crc, len_b);
        break;
    case S3F_CHECKSUM_CRC64NVME:
        a->crc = s3f__crc64nvme_combine(a->crc, b->crc, len_b);
        break;
    default:
        break;
    }
    return 0;
}

struct s3f__checksum s3f__checksum_of(enum s3f_checksum_algorithm alg, const void *data,
                                      size_t len) {
    struct s3f__checksum c;
    s3f__checksum_init(&c, alg);
    s3f__checksum_update(&c, data, len);
    return c;
}

size_t s3f__checksum_size(enum s3f_checksum_algorithm alg) {
    switch (normalize(alg)) {
    case S3F_CHECKSUM_CRC32C:
    case S3F_CHECKSUM_CRC32:
        return 4;
    case S3F_CHECKSUM_CRC64NVME:
        return 8;
    default:
        return 0;
    }
}

size_t s3f__checksum_b64(const struct s3f__checksum *c, char out[S3F__CHECKSUM_B64_MAX]) {
    size_t n = s3f__checksum_size(c->alg);
    uint8_t be[8];
    for (size_t i = 0; i < n; i++)
        be[i] = (uint8_t)(c->crc >> (8 * (n - 1 - i)));
    if (!n) {
        out[0] = '\0';
        return 0;
    }
    return s3f__base64(be, n, out);
}

const char *s3f__checksum_header_name(enum s3f_checksum_algorithm alg) {
    switch (normalize(alg)) {
    case S3F_CHECKSUM_CRC32C:
        return "x-amz-checksum-crc32c";
    case S3F_CHECKSUM_CRC32:
        return "x-amz-checksum-crc32";
    case S3F_CHECKSUM_CRC64NVME:
        return "x-amz-checksum-crc64nvme";
    default:
        return NULL;
    }
}

const char *s3f__checksum_algorithm_name(enum s3f_checksum_algorithm alg) {
    switch (normalize(alg)) {
    case S3F_CHECKSUM_CRC32C:
        return "CRC32C";
    case S3F_CHECKSUM_CRC32:
        return "CRC32";
    case S3F_CHECKSUM_CRC64NVME:
        return "CRC64NVME";
    default:
        return NULL;
    }
}
