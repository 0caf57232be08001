/* SigV4a keys and signatures (see sigv4a.h), with OpenSSL 3's EVP interface. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/param_build.h>

#include "auth/sigv4a.h"

#define OP "SigV4a signing"
#define LABEL "AWS4-ECDSA-P256-SHA256"

/* n - 2, n the order of P-256 (FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551) */
static const uint8_t n_minus_2[32] = {
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x4f};

static enum s3f_status ossl_fail(struct s3f_error *err, const char *what) {
    return s3f__error_set(err, s3f__crypto_status(), OP, NULL, "%s failed (OpenSSL)", what);
}

enum s3f_status s3f__sigv4a_derive_key(const char *access_key_id, const char *secret,
                                       uint8_t priv[32], struct s3f_error *err) {
    if (!access_key_id || !*access_key_id || !secret || !*secret)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "SigV4a key: empty access key id or secret");
    size_t sl = strlen(secret), al = strlen(access_key_id);
    size_t kl = 5 + sl, fl = 4 + sizeof(LABEL) - 1 + 1 + al + 1 + 4;
    uint8_t *key = malloc(kl), *fixed = malloc(fl);
    enum s3f_status st = S3F_OK;
    if (!key || !fixed) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    memcpy(key, "AWS4A", 5);
    memcpy(key + 5, secret, sl);
    size_t o = 0;
    memcpy(fixed + o, "\x00\x00\x00\x01", 4);
    o += 4;
    memcpy(fixed + o, LABEL, sizeof(LABEL) - 1);
    o += sizeof(LABEL) - 1;
    fixed[o++] = 0;
    memcpy(fixed + o, access_key_id, al);
    o += al;
    size_t counter_at = o++;
    memcpy(fixed + o, "\x00\x00\x01\x00", 4); /* the output length in bits: 256 */
    st = S3F_ERR_INTERNAL;
    for (unsigned counter = 1; counter < 255; counter++) {
        uint8_t k0[32];
        fixed[counter_at] = (uint8_t)counter;
        if (s3f__hmac_sha256(key, kl, fixed, fl, k0)) {
            st = ossl_fail(err, "HMAC-SHA256");
            goto out;
        }
        if (memcmp(k0, n_minus_2, 32) <= 0) { /* big-endian, same length: numeric order */
            unsigned carry = 1;
            for (int i = 31; i >= 0; i--) {
                unsigned v = k0[i] + carry;
                priv[i] = (uint8_t)v;
                carry = v >> 8;
            }
            OPENSSL_cleanse(k0, sizeof(k0));
            st = S3F_OK;
            goto out;
        }
        OPENSSL_cleanse(k0, sizeof(k0));
    }
    s3f__error_set(err, st, OP, NULL, "SigV4a key: no candidate below the curve order");
out:
    if (key)
        OPENSSL_cleanse(key, kl);
    free(key);
    free(fixed);
    return st;
}

/* pub = priv * G as the uncompressed point 04 || x || y. */
static int public_point(const uint8_t priv[32], uint8_t pub[65]) {
    int rc = -1;
    EC_GROUP *g = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    EC_POINT *p = g ? EC_POINT_new(g) : NULL;
    BIGNUM *d = BN_secure_new();
    BN_CTX *ctx = BN_CTX_new();
    if (p && d && ctx && BN_bin2bn(priv, 32, d) &&
        EC_POINT_mul(g, p, d, NULL, NULL, ctx) == 1 &&
        EC_POINT_point2oct(g, p, POINT_CONVERSION_UNCOMPRESSED, pub, 65, ctx) == 65)
        rc = 0;
    BN_clear_free(d);
    BN_CTX_free(ctx);
    EC_POINT_free(p);
    EC_GROUP_free(g);
    return rc;
}

enum s3f_status s3f__sigv4a_public_key(const uint8_t priv[32], uint8_t x[32], uint8_t y[32],
                                       struct s3f_error *err) {
    uint8_t pub[65];
    if (public_point(priv, pub))
        return ossl_fail(err, "P-256 point multiplication");
    memcpy(x, pub + 1, 32);
    memcpy(y, pub + 33, 32);
    return S3F_OK;
}

/* An EVP_PKEY of P-256 from the public point and, when priv is non-NULL, the private key. */
static EVP_PKEY *make_pkey(const uint8_t pub[65], const uint8_t *priv) {
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    BIGNUM *d = priv ? BN_secure_new() : NULL;
    EVP_PKEY_CTX *kctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!bld || !kctx || (priv && (!d || !BN_bin2bn(priv, 32, d))))
        goto out;
    if (!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
        !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, 65) ||
        (d && !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, d)))
        goto out;
    params = OSSL_PARAM_BLD_to_param(bld);
    if (!params || EVP_PKEY_fromdata_init(kctx) != 1 ||
        EVP_PKEY_fromdata(kctx, &pkey, d ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) != 1)
        pkey = NULL;
out:
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    BN_clear_free(d);
    EVP_PKEY_CTX_free(kctx);
    return pkey;
}

enum s3f_status s3f__sigv4a_sign(const uint8_t priv[32], const void *msg, size_t len,
                                 char sig_hex[S3F__SIGV4A_SIGNATURE_HEX_MAX],
                                 struct s3f_error *err) {
    uint8_t pub[65], der[80];
    size_t der_len = sizeof(der);
    enum s3f_status st = S3F_OK;
    EVP_PKEY *pkey = NULL;
    EVP_MD_CTX *md = NULL;
    if (public_point(priv, pub) || !(pkey = make_pkey(pub, priv)) || !(md = EVP_MD_CTX_new()) ||
        EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pkey) != 1 ||
        EVP_DigestSign(md, der, &der_len, msg, len) != 1 || der_len > 72)
        st = ossl_fail(err, "ECDSA P-256 signing");
    else
        s3f__hex(der, der_len, sig_hex);
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pkey);
    return st;
}

bool s3f__sigv4a_verify(const uint8_t x[32], const uint8_t y[32], const void *msg, size_t len,
                        const char *sig_hex) {
    uint8_t pub[65], der[80];
    size_t n = sig_hex ? strlen(sig_hex) : 0;
    if (n == 0 || n % 2 || n / 2 > sizeof(der))
        return false;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(sig_hex + 2 * i, "%2x", &v) != 1)
            return false;
        der[i] = (uint8_t)v;
    }
    pub[0] = 4;
    memcpy(pub + 1, x, 32);
    memcpy(pub + 33, y, 32);
    EVP_PKEY *pkey = make_pkey(pub, NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = pkey && md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pkey) == 1 &&
              EVP_DigestVerify(md, der, n / 2, msg, len) == 1;
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pkey);
    return ok;
}
