/* Checksums S3 knows as x-amz-checksum-*: CRC32C and CRC32 (ISA-L), CRC64NVME (our own,
 * PCLMULQDQ / VPCLMULQDQ folding with a slice-by-8 fallback), their combination (the CRC of
 * A||B from the CRCs of A and B and the length of B, so per-part values computed in parallel
 * give the whole-object FULL_OBJECT value), and one algorithm-generic running checksum.
 *
 * Every function here is thread-safe and allocates nothing. CRC values are the final values
 * (init and xorout applied); a running value starts at 0: crc(A||B) == f(f(0, A), B). */
#ifndef S3F_CHECKSUM_H
#define S3F_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "s3flash/s3flash.h"

/* ---- CRC64NVME ----------------------------------------------------------------------- */
/* CRC-64/NVME: poly 0xad93d23594c93659 reflected, init and xorout all ones;
 * check("123456789") = 0xae8b14860a799888. `crc` is the running value (start with 0). */
uint64_t s3f__crc64nvme(uint64_t crc, const void *data, size_t len);

/* Implementations of s3f__crc64nvme, preferred last. */
enum s3f__crc64_impl {
    S3F__CRC64_TABLE = 0,   /* slice-by-8, portable */
    S3F__CRC64_PCLMUL = 1,  /* 128-bit carry-less multiply folding (x86-64 PCLMULQDQ) */
    S3F__CRC64_VPCLMUL = 2, /* 512-bit folding (AVX-512 + VPCLMULQDQ) */
    S3F__CRC64_ISAL = 3,    /* ISA-L's crc64_rocksoft_refl (ISA-L 2.31+; CRC-64/Rocksoft is
                               CRC-64/NVME), when the build found it */
};
/* The implementation s3f__crc64nvme uses (ISA-L's when built with one that has it, else the
 * fastest of ours this CPU runs, unless forced). */
enum s3f__crc64_impl s3f__crc64nvme_impl(void);
/* Force an implementation (for tests and benchmarks; not thread-safe against concurrent
 * s3f__crc64nvme calls). Returns 0, or -1 (nothing changed) if this CPU or build lacks it. */
int s3f__crc64nvme_set_impl(enum s3f__crc64_impl impl);
const char *s3f__crc64nvme_impl_name(enum s3f__crc64_impl impl);

/* ---- combine ------------------------------------------------------------------------- */
/* The CRC of A||B given crc1 = CRC(A), crc2 = CRC(B) and len2 = |B| in bytes (zlib's
 * crc32_combine: crc1 * x^(8 len2) mod P, xor crc2; O(log len2)). len2 = 0 gives crc1. */
uint32_t s3f__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);
uint32_t s3f__crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);
uint64_t s3f__crc64nvme_combine(uint64_t crc1, uint64_t crc2, uint64_t len2);

/* ---- generic ------------------------------------------------------------------------- */
/* A running checksum of one algorithm. Plain value: copy it freely, nothing to clean up. */
struct s3f__checksum {
    enum s3f_checksum_algorithm alg; /* CRC32C, CRC32, CRC64NVME or NONE (never DEFAULT) */
    uint64_t crc;                    /* running value; CRC32/32C in the low 32 bits */
};

/* Longest S3 header form plus its NUL: base64 of 8 bytes is 12 characters. */
#define S3F__CHECKSUM_B64_MAX 13

/* Start a checksum of nothing. DEFAULT means CRC32C; NONE gives a checksum that ignores
 * updates and has no header. Errors: S3F_ERR_INVALID_ARGUMENT for a value outside the enum
 * (c then is NONE). */
enum s3f_status s3f__checksum_init(struct s3f__checksum *c, enum s3f_checksum_algorithm alg);
/* Add `len` bytes (data may be NULL when len is 0). */
void s3f__checksum_update(struct s3f__checksum *c, const void *data, size_t len);
/* a becomes the checksum of A||B, where b is the checksum of B (same algorithm; a
 * different one leaves a unchanged and returns -1) and len_b = |B|. Returns 0. */
int s3f__checksum_combine(struct s3f__checksum *a, const struct s3f__checksum *b,
                          uint64_t len_b);
/* The checksum of `len` bytes in one call. */
struct s3f__checksum s3f__checksum_of(enum s3f_checksum_algorithm alg, const void *data,
                                      size_t len);
/* Size of the value in bytes: 4 (CRC32, CRC32C), 8 (CRC64NVME), 0 (NONE or unknown). */
size_t s3f__checksum_size(enum s3f_checksum_algorithm alg);
/* The S3 header form, base64 of the big-endian value, into out; returns its length (0 and
 * "" for NONE). */
size_t s3f__checksum_b64(const struct s3f__checksum *c, char out[S3F__CHECKSUM_B64_MAX]);
/* "x-amz-checksum-crc32c", "x-amz-checksum-crc32", "x-amz-checksum-crc64nvme"; NULL for
 * NONE or an unknown value. DEFAULT is CRC32C. Static strings. */
const char *s3f__checksum_header_name(enum s3f_checksum_algorithm alg);
/* "CRC32C", "CRC32", "CRC64NVME" (x-amz-checksum-algorithm, ChecksumAlgorithm); NULL for
 * NONE or an unknown value. DEFAULT is CRC32C. Static strings. */
const char *s3f__checksum_algorithm_name(enum s3f_checksum_algorithm alg);

#endif /* S3F_CHECKSUM_H */
