/* SHA-256, HMAC and MD5 through OpenSSL; CRC32C and CRC32 through ISA-L. Every OpenSSL
 * result is checked: a failure returns -1 and leaves the output zeroed, never garbage. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <isa-l/crc.h>

#include "core.h"

static int digest(const EVP_MD *md, const void *data, size_t len, uint8_t *out,
                  unsigned int want) {
    unsigned int n = want;
    if (!md || EVP_Digest(data, len, out, &n, md, NULL) != 1 || n != want) {
        memset(out, 0, want);
        return -1;
    }
    return 0;
}

int s3f__sha256(const void *data, size_t len, uint8_t out[32]) {
    return digest(EVP_sha256(), data, len, out, 32);
}

int s3f__sha256_hex(const void *data, size_t len, char out[65]) {
    uint8_t d[32];
    int rc = s3f__sha256(data, len, d);
    if (rc) {
        memset(out, 0, 65);
        return rc;
    }
    s3f__hex(d, 32, out);
    return 0;
}

int s3f__hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                     uint8_t out[32]) {
    unsigned int n = 32;
    if (key_len > (size_t)INT32_MAX ||
        !HMAC(EVP_sha256(), key, (int)key_len, data, len, out, &n) || n != 32) {
        memset(out, 0, 32);
        return -1;
    }
    return 0;
}

/* OpenSSL 3.0 pushes ERR_R_MALLOC_FAILURE for most failed allocations but not all: EVP_Q_mac
 * (under HMAC()) reports an inner one as EVP's "initialization error", some fail with nothing
 * queued. SHA-256, HMAC-SHA256 and MD5 of memory have no other cause of those two (a FIPS
 * provider without MD5 says "unsupported"), so they are taken for out of memory too. */
enum s3f_status s3f__crypto_status(void) {
    bool oom = false, any = false;
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        any = true;
        if (ERR_GET_REASON(e) == ERR_R_MALLOC_FAILURE ||
            (ERR_GET_LIB(e) == ERR_LIB_EVP && ERR_GET_REASON(e) == EVP_R_INITIALIZATION_ERROR))
            oom = true;
    }
    return oom || !any ? S3F_ERR_NO_MEMORY : S3F_ERR_INTERNAL;
}

/* 1: MD5 works, 0: not (a FIPS provider), -1: not tried yet (or the last try ran out of
 * memory: a transient failure is not taken for a FIPS host and cached). */
static atomic_int md5_state = -1;

bool s3f__md5_available(void) {
    int s = atomic_load_explicit(&md5_state, memory_order_acquire);
    if (s >= 0)
        return s == 1;
    bool ok = true;
#ifdef S3F_TEST_HOOKS
    /* test builds only (meson -Dtest_hooks=true): behave as on a FIPS host */
    const char *no = getenv("S3FLASH_TEST_NO_MD5");
    if (no && *no && strcmp(no, "0") != 0)
        ok = false;
#endif
    if (ok) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
        EVP_MD *md = EVP_MD_fetch(NULL, "MD5", NULL);
        ok = md != NULL;
        EVP_MD_free(md);
#endif
        uint8_t d[16];
        ok = ok && digest(EVP_md5(), "", 0, d, 16) == 0;
        if (!ok && s3f__crypto_status() == S3F_ERR_NO_MEMORY)
            return false; /* asked again next time */
    }
    atomic_store_explicit(&md5_state, ok ? 1 : 0, memory_order_release);
    return ok;
}

int s3f__md5(const void *data, size_t len, uint8_t out[16]) {
    if (!s3f__md5_available()) {
        memset(out, 0, 16);
        return -1;
    }
    return digest(EVP_md5(), data, len, out, 16);
}

/* ISA-L's crc32_iscsi takes and returns the raw register (no final inversion handled by the
 * caller), crc32_gzip_refl works on the reflected CRC32 with the inversions built in. */
uint32_t s3f__crc32c(uint32_t crc, const void *data, size_t len) {
    /* crc32_iscsi takes an int length: feed it at most 1 GiB at a time */
    const unsigned char *p = data;
    uint32_t reg = ~crc;
    while (len) {
        size_t n = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        reg = crc32_iscsi((unsigned char *)p, (int)n, reg);
        p += n;
        len -= n;
    }
    return ~reg;
}

uint32_t s3f__crc32(uint32_t crc, const void *data, size_t len) {
    return crc32_gzip_refl(crc, (const unsigned char *)data, len);
}

void s3f__crc32_b64(uint32_t crc, char out[9]) {
    uint8_t be[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8),
                     (uint8_t)crc};
    s3f__base64(be, 4, out);
}
