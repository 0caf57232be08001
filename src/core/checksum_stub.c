/* TEMPORARY stand-in for src/core/checksum.c (branch wip-crc), so that the transfer engine
 * builds before that branch lands: the same API as core/checksum.h, with CRC32C and CRC32
 * from ISA-L (core/hash.c), a plain table-driven CRC64NVME, and the GF(2) matrix combine
 * (zlib's crc32_combine). Delete this file when wip-crc's checksum.c is merged. */
#include <pthread.h>
#include <string.h>

#include "core/checksum.h"
#include "core/core.h"

#define CRC64NVME_POLY_REFL 0x9a6c9329ac4bc9b5ull

static uint64_t crc64_table[256];
static pthread_once_t crc64_once = PTHREAD_ONCE_INIT;

static void crc64_init(void) {
    for (unsigned i = 0; i < 256; i++) {
        uint64_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC64NVME_POLY_REFL : c >> 1;
        crc64_table[i] = c;
    }
}

uint64_t s3f__crc64nvme(uint64_t crc, const void *data, size_t len) {
    pthread_once(&crc64_once, crc64_init);
    const uint8_t *p = data;
    uint64_t c = ~crc;
    for (size_t i = 0; i < len; i++)
        c = crc64_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

enum s3f__crc64_impl s3f__crc64nvme_impl(void) {
    return S3F__CRC64_TABLE;
}

int s3f__crc64nvme_set_impl(enum s3f__crc64_impl impl) {
    return impl == S3F__CRC64_TABLE ? 0 : -1;
}

const char *s3f__crc64nvme_impl_name(enum s3f__crc64_impl impl) {
    switch (impl) {
    case S3F__CRC64_TABLE: return "table";
    case S3F__CRC64_PCLMUL: return "pclmul";
    case S3F__CRC64_VPCLMUL: return "vpclmul";
    }
    return "?";
}

/* ---- combine: multiply crc1 by x^(8 len2) mod P with 64x64 GF(2) matrices ------------ */

static uint64_t gf2_times(const uint64_t *mat, uint64_t vec) {
    uint64_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

static void gf2_square(uint64_t *sq, const uint64_t *mat, int bits) {
    for (int n = 0; n < bits; n++)
        sq[n] = gf2_times(mat, mat[n]);
}

static uint64_t combine(uint64_t crc1, uint64_t crc2, uint64_t len2, uint64_t poly, int bits) {
    if (len2 == 0)
        return crc1;
    uint64_t even[64], odd[64];
    odd[0] = poly; /* operator for one zero bit */
    uint64_t row = 1;
    for (int n = 1; n < bits; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd, bits); /* two zero bits */
    gf2_square(odd, even, bits); /* four zero bits */
    do {
        gf2_square(even, odd, bits);
        if (len2 & 1)
            crc1 = gf2_times(even, crc1);
        len2 >>= 1;
        if (!len2)
            break;
        gf2_square(odd, even, bits);
        if (len2 & 1)
            crc1 = gf2_times(odd, crc1);
        len2 >>= 1;
    } while (len2);
    return crc1 ^ crc2;
}

uint32_t s3f__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return (uint32_t)combine(crc1, crc2, len2, 0x82f63b78u, 32);
}

uint32_t s3f__crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return (uint32_t)combine(crc1, crc2, len2, 0xedb88320u, 32);
}

uint64_t s3f__crc64nvme_combine(uint64_t crc1, uint64_t crc2, uint64_t len2) {
    return combine(crc1, crc2, len2, CRC64NVME_POLY_REFL, 64);
}

/* ---- generic ------------------------------------------------------------------------- */

enum s3f_status s3f__checksum_init(struct s3f__checksum *c, enum s3f_checksum_algorithm alg) {
    c->crc = 0;
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
        c->alg = S3F_CHECKSUM_CRC32C;
        return S3F_OK;
    case S3F_CHECKSUM_NONE:
    case S3F_CHECKSUM_CRC32C:
    case S3F_CHECKSUM_CRC32:
    case S3F_CHECKSUM_CRC64NVME:
        c->alg = alg;
        return S3F_OK;
    }
    c->alg = S3F_CHECKSUM_NONE;
    return S3F_ERR_INVALID_ARGUMENT;
}

void s3f__checksum_update(struct s3f__checksum *c, const void *data, size_t len) {
    if (!len)
        return;
    switch (c->alg) {
    case S3F_CHECKSUM_CRC32C: c->crc = s3f__crc32c((uint32_t)c->crc, data, len); break;
    case S3F_CHECKSUM_CRC32: c->crc = s3f__crc32((uint32_t)c->crc, data, len); break;
    case S3F_CHECKSUM_CRC64NVME: c->crc = s3f__crc64nvme(c->crc, data, len); break;
    default: break;
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
    default: break;
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
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
    case S3F_CHECKSUM_CRC32C:
    case S3F_CHECKSUM_CRC32: return 4;
    case S3F_CHECKSUM_CRC64NVME: return 8;
    default: return 0;
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
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
    case S3F_CHECKSUM_CRC32C: return "x-amz-checksum-crc32c";
    case S3F_CHECKSUM_CRC32: return "x-amz-checksum-crc32";
    case S3F_CHECKSUM_CRC64NVME: return "x-amz-checksum-crc64nvme";
    default: return NULL;
    }
}

const char *s3f__checksum_algorithm_name(enum s3f_checksum_algorithm alg) {
    switch (alg) {
    case S3F_CHECKSUM_DEFAULT:
    case S3F_CHECKSUM_CRC32C: return "CRC32C";
    case S3F_CHECKSUM_CRC32: return "CRC32";
    case S3F_CHECKSUM_CRC64NVME: return "CRC64NVME";
    default: return NULL;
    }
}
