/* src/core: the base every layer stands on.
 * Owns: statuses and struct s3f_error (status.c), capped growable buffers (buf.c), logging
 *   (log.c), clocks and the HTTP/ISO-8601 dates (time.c), hex, base64 and percent-encoding
 *   (encode.c), SHA-256, HMAC and MD5 through OpenSSL (hash.c), the CRC checksums through
 *   ISA-L (checksum.c, checksum.h), random numbers (random.c), the metrics registry, the
 *   library's metrics and their exporter (metrics.c, metrics_lib.c, metrics_export.c:
 *   metrics.h; every layer updates its client's).
 * May call: libc, OpenSSL, ISA-L and the public header's types; nothing of the other
 *   folders. Every folder may include it.
 *
 * This header: errors, growable buffers with caps, logging, time, encodings, hashes. */
#ifndef S3F_CORE_H
#define S3F_CORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* No unbounded string copy in the library (issue 28, N12): s3f__strlcpy or snprintf. The
 * headers that declare them come first, so that including them later is harmless;
 * tests/layering.py checks the same in every folder of src/, front ends included. */
#if defined(__GNUC__)
#pragma GCC poison strcpy stpcpy strcat sprintf vsprintf gets
#endif

#include "s3flash/s3flash.h"

/* A request header, name and value borrowed (signed by auth/sigv4.c, sent by s3/). */
struct s3f__header {
    const char *name;
    const char *value;
};

#if defined(__GNUC__)
#define S3F_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define S3F_PRINTF(a, b)
#endif

#define S3F_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ------------------------------------------------------------------------- */
/* Set err (if non-NULL): status, operation, resource, and a printf message.
 * Returns `status` so callers can `return s3f__error_set(...)`. */
enum s3f_status s3f__error_set(struct s3f_error *err, enum s3f_status status,
                               const char *operation, const char *resource, const char *fmt,
                               ...) S3F_PRINTF(5, 6);
/* Bounded copy into a fixed field (always NUL-terminated; truncates). */
void s3f__strlcpy(char *dst, const char *src, size_t dst_len);
void s3f__strlcpyn(char *dst, const char *src, size_t src_len, size_t dst_len);

/* ---- growable byte buffer with a cap ------------------------------------------------ */
struct s3f__buf {
    char *data;     /* always NUL-terminated when non-NULL (not counted in len) */
    size_t len;
    size_t cap;     /* allocated bytes */
    size_t max;     /* hard limit of len; 0 = 64 MiB */
};
void s3f__buf_init(struct s3f__buf *b, size_t max);
void s3f__buf_cleanup(struct s3f__buf *b);
void s3f__buf_reset(struct s3f__buf *b); /* len = 0, keeps memory */
/* Append; S3F_ERR_NO_MEMORY on allocation failure, S3F_ERR_BAD_RESPONSE past `max`. */
enum s3f_status s3f__buf_append(struct s3f__buf *b, const void *data, size_t len);
enum s3f_status s3f__buf_appendf(struct s3f__buf *b, const char *fmt, ...) S3F_PRINTF(2, 3);
enum s3f_status s3f__buf_appends(struct s3f__buf *b, const char *s);
/* Take ownership of the data (malloc'ed, NUL-terminated); the buffer becomes empty. */
char *s3f__buf_take(struct s3f__buf *b);

char *s3f__strdup(const char *s);          /* NULL-safe strdup */
char *s3f__strndup(const char *s, size_t n);

/* ---- logging ------------------------------------------------------------------------ */
struct s3f__logger {
    s3f_log_fn fn;             /* NULL: stderr */
    void *user_data;
    enum s3f_log_level level;
};
/* Level from S3FLASH_LOG (error|warn|info|debug|trace), S3F_LOG_OFF if unset. */
enum s3f_log_level s3f__log_level_from_env(void);
void s3f__log(const struct s3f__logger *lg, enum s3f_log_level level, const char *fmt, ...)
    S3F_PRINTF(3, 4);
static inline bool s3f__log_enabled(const struct s3f__logger *lg, enum s3f_log_level level) {
    return lg && level != S3F_LOG_OFF && level <= lg->level;
}

/* ---- time --------------------------------------------------------------------------- */
uint64_t s3f__now_ms(void);        /* monotonic */
uint64_t s3f__now_ns(void);        /* monotonic */
int64_t s3f__wall_time_s(void);    /* seconds since the epoch (in test builds,
                                      -Dtest_hooks, plus S3FLASH_TEST_CLOCK_OFFSET_S) */
/* "20150830T123600Z" into buf (>= 17 bytes). */
void s3f__time_amz(int64_t t, char *buf);
/* Parse ISO-8601 "2015-08-30T12:36:00Z" / "2015-08-30T12:36:00.000Z" / with "+HH:MM" or
 * "-HH:MM" / no zone (UTC), or RFC 1123 "Sun, 30 Aug 2015 12:36:00 GMT" (or UTC). Fields
 * have their fixed digit counts (1-2 for the RFC 1123 day and time) and are range-checked;
 * whitespace around is ignored. Returns 0 and sets *out, -1 if invalid. */
int s3f__time_parse(const char *s, int64_t *out);
void s3f__sleep_ms(uint64_t ms);
/* Timed waits are on the monotonic clock (a step of the wall clock neither stretches nor
 * cuts them): a condition variable whose pthread_cond_timedwait deadlines are on
 * CLOCK_MONOTONIC (0, or pthread_cond_init's error), and such a deadline `ms` from now. */
int s3f__cond_init_monotonic(pthread_cond_t *cv);
struct timespec s3f__deadline_ms(uint64_t ms);

/* ---- encodings ---------------------------------------------------------------------- */
/* Hex (lowercase) of n bytes into out (2n+1 bytes). */
void s3f__hex(const uint8_t *in, size_t n, char *out);
/* The value of hex digit c (either case), -1 for any other character. */
int s3f__hex_digit(int c);
/* Base64 of n bytes into out (4*ceil(n/3)+1 bytes). Returns length. */
size_t s3f__base64(const uint8_t *in, size_t n, char *out);
/* Decode; returns decoded length or -1 on invalid input / overflow of out_len. */
long s3f__base64_decode(const char *in, size_t in_len, uint8_t *out, size_t out_len);
/* RFC 3986 percent-encoding as AWS requires (unreserved A-Za-z0-9-_.~ kept).
 * keep_slash: '/' is left as is (for object keys in paths). */
enum s3f_status s3f__uri_encode(struct s3f__buf *out, const char *s, size_t len,
                                bool keep_slash);
/* Decode %XX (and '+' stays '+'). Returns malloc'ed string or NULL if invalid. */
char *s3f__uri_decode(const char *s, size_t len);

/* Length of the valid UTF-8 prefix of s[0..n) (n when all of it is valid): no overlong
 * forms, no surrogates, nothing above U+10FFFF. */
size_t s3f__utf8_valid_prefix(const unsigned char *s, size_t n);

/* ---- hashes (OpenSSL) and checksums (ISA-L) ------------------------------------------ */
/* Each returns 0, or -1 when OpenSSL fails (the output is then zeroed): callers turn that
 * into a status (S3F_ERR_INTERNAL), never send what came out. */
int s3f__sha256(const void *data, size_t len, uint8_t out[32]);
int s3f__sha256_hex(const void *data, size_t len, char out[65]);
int s3f__hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                     uint8_t out[32]);
/* MD5 fails on a FIPS host (the provider has none): s3f__md5_available says whether it
 * works here (tried once; in test builds S3FLASH_TEST_NO_MD5=1 says no), and callers send
 * a CRC32C checksum instead of Content-MD5 when it does not. */
bool s3f__md5_available(void);
/* After an OpenSSL call above failed (on the same thread): S3F_ERR_NO_MEMORY when OpenSSL ran
 * out of memory, else S3F_ERR_INTERNAL. Empties the thread's OpenSSL error queue. */
enum s3f_status s3f__crypto_status(void);
int s3f__md5(const void *data, size_t len, uint8_t out[16]);

/* CRC32C / CRC32 (ISO-HDLC) with ISA-L; `crc` is the running value (start with 0).
 * CRC64NVME, combining CRCs and the algorithm-generic checksum: core/checksum.h. */
uint32_t s3f__crc32c(uint32_t crc, const void *data, size_t len);
uint32_t s3f__crc32(uint32_t crc, const void *data, size_t len);
/* The S3 header form: base64 of the big-endian value, into out (>= 9 bytes). */
void s3f__crc32_b64(uint32_t crc, char out[9]);

/* ---- misc --------------------------------------------------------------------------- */
/* The smallest memory limit of this process's cgroup and those above it (v2 memory.max, v1
 * memory.limit_in_bytes; "max" or none: no limit), UINT64_MAX if none (s3f_memory_available
 * is the smaller of it and the RAM). Test builds read the v2 files under
 * $S3FLASH_TEST_CGROUP2_ROOT instead of the mounted tree. */
uint64_t s3f__cgroup_memory_limit(void);
/* Uniform random double in [0, 1), thread-safe. */
double s3f__random_unit(void);
/* Case-insensitive equality of ASCII strings. */
bool s3f__strieq(const char *a, const char *b);
/* Trim ASCII whitespace in place; returns the start within s. */
char *s3f__trim(char *s);
/* `url` for a log or an error message: user information (user:password@) replaced by
 * "***@", so a password given in an endpoint URL never leaves the process. Truncated to
 * out_len - 1 bytes. */
void s3f__url_redact(const char *url, char *out, size_t out_len);

#endif /* S3F_CORE_H */
