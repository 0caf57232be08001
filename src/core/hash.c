/* SHA-256, HMAC and MD5 through OpenSSL; CRC32C and CRC32 through ISA-L. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/md5.h>

#include <isa-l/crc.h>

#include "core.h"

void s3f__sha256(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void s3f__sha256_hex(const void *data, size_t len, char out[65]) {
    uint8_t d[32];
    s3f__sha256(data, len, d);
    s3f__hex(d, 32, out);
}

void s3f__hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                      uint8_t out[32]) {
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)key_len, data, len, out, &n);
}

void s3f__md5(const void *data, size_t len, uint8_t out[16]) {
    unsigned int n = 16;
    EVP_Digest(data, len, out, &n, EVP_md5(), NULL);
}

int s3f__sha256_init(struct s3f__sha256_ctx *c) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -1;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return -1;
    }
    c->evp = ctx;
    return 0;
}

void s3f__sha256_update(struct s3f__sha256_ctx *c, const void *data, size_t len) {
    EVP_DigestUpdate((EVP_MD_CTX *)c->evp, data, len);
}

void s3f__sha256_final(struct s3f__sha256_ctx *c, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_DigestFinal_ex((EVP_MD_CTX *)c->evp, out, &n);
    EVP_MD_CTX_free((EVP_MD_CTX *)c->evp);
    c->evp = NULL;
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
