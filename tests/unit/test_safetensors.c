/* The safetensors header's parser and validator (src/format/safetensors.c): headers that
 * safetensors itself writes (every dtype, empty tensors, scalars, metadata, escapes), and the
 * hostile ones of tests/data/safetensors/hostile.tsv, each with the message it must give. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3flash/s3flash.h"
#include "testutil.h"

/* A file: the 8-byte length (len, or the header's own when len is UINT64_MAX), the header,
 * data_bytes zero bytes. *size: the file's size. */
static unsigned char *make_file(const char *header, size_t header_len, uint64_t len,
                                size_t data_bytes, size_t *size) {
    if (len == UINT64_MAX)
        len = header_len;
    *size = 8 + header_len + data_bytes;
    unsigned char *f = calloc(1, *size);
    for (int k = 0; k < 8; k++)
        f[k] = (unsigned char)(len >> (8 * k));
    memcpy(f + 8, header, header_len);
    return f;
}

static enum s3f_status parse(const char *header, size_t data_bytes,
                             struct s3f_safetensors_header **h, struct s3f_error *err) {
    size_t size;
    unsigned char *f = make_file(header, strlen(header), UINT64_MAX, data_bytes, &size);
    enum s3f_status st = s3f_safetensors_parse(f, size, size, 0, h, err);
    free(f);
    return st;
}

static void test_what_safetensors_writes(void) {
    /* safetensors.torch.save's layout: widest dtype first, metadata first, space padding */
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\",\"q\\\"\\u00e9\":\"\\n\"},"
        "\"z\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0,2],\"data_offsets\":[24,24]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
        "\"f4\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[30,31]},"
        "\"c\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[31,32],\"extra\":{\"x\":[1,"
        "2.5e3,true,null]}}}       ";
    struct s3f_safetensors_header *h = NULL;
    struct s3f_error err;
    CHECK_INT(parse(hdr, 32, &h, &err), S3F_OK);
    if (!h)
        return;
    CHECK_INT(h->header_bytes, strlen(hdr));
    CHECK_INT(h->data_offset, 8 + strlen(hdr));
    CHECK_INT(h->data_bytes, 32);
    CHECK_INT(h->n_tensors, 6);
    static const char *const order[] = {"z", "a", "e", "b", "f4", "c"};
    for (size_t k = 0; k < h->n_tensors && k < 6; k++)
        CHECK_STR(h->tensors[k].name, order[k]);
    CHECK_STR(h->tensors[0].dtype, "I64");
    CHECK_INT(h->tensors[0].n_dims, 0);
    CHECK_INT(h->tensors[2].n_dims, 2);
    CHECK_INT(h->tensors[2].shape[0], 0);
    CHECK_INT(h->tensors[2].begin, 24);
    CHECK_INT(h->tensors[2].end, 24);
    CHECK_STR(h->tensors[3].dtype, "BF16");
    CHECK_INT(h->tensors[3].dtype_bits, 16);
    CHECK_INT(h->tensors[4].dtype_bits, 4);
    CHECK_INT(h->has_metadata, 1);
    CHECK_INT(h->n_metadata, 2);
    CHECK_STR(h->metadata[0].key, "format");
    CHECK_STR(h->metadata[0].value, "pt");
    CHECK_STR(h->metadata[1].key, "q\"\xc3\xa9");
    CHECK_STR(h->metadata[1].value, "\n");
    s3f_safetensors_free(h);

    /* every dtype safetensors 0.8 knows, one element each (two for the sub-byte ones) */
    static const struct {
        const char *name;
        unsigned bits;
    } all[] = {{"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
               {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
               {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16}, {"U16", 16},
               {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32},
               {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        unsigned n = all[k].bits < 8 ? 4 : 1; /* 4 x 6 bits = 3 bytes */
        char buf[160];
        unsigned bytes = n * all[k].bits / 8;
        snprintf(buf, sizeof(buf), "{\"t\":{\"dtype\":\"%s\",\"shape\":[%u],"
                 "\"data_offsets\":[0,%u]}}", all[k].name, n, bytes);
        h = NULL;
        enum s3f_status st = parse(buf, bytes, &h, &err);
        CHECK_INT(st, S3F_OK);
        if (st)
            printf("  %s: %s\n", all[k].name, err.message);
        if (h) {
            CHECK_STR(h->tensors[0].dtype, all[k].name);
            CHECK_INT(h->tensors[0].dtype_bits, all[k].bits);
            CHECK_INT(h->has_metadata, 0);
        }
        s3f_safetensors_free(h);
    }
    /* a member named "dtype\0..." is not the dtype (names are compared with their length) */
    h = NULL;
    CHECK_INT(parse("{\"a\":{\"dtype\":\"U8\",\"dtype\\u0000\":\"XX\",\"shape\":[1],"
                    "\"data_offsets\":[0,1]}}",
                    1, &h, &err),
              S3F_OK);
    CHECK(h && strcmp(h->tensors[0].dtype, "U8") == 0);
    s3f_safetensors_free(h);
    /* no tensor at all, and metadata null */
    h = NULL;
    CHECK_INT(parse("{\"__metadata__\":null}", 0, &h, &err), S3F_OK);
    CHECK(h && h->n_tensors == 0 && h->has_metadata && h->n_metadata == 0);
    s3f_safetensors_free(h);
}

/* \xNN and \t of the table's header column, decoded in place; returns the length. */
static size_t unescape(char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
        if (s[i] == '\\' && s[i + 1] == 'x' && s[i + 2] && s[i + 3]) {
            char hex[3] = {s[i + 2], s[i + 3], 0};
            s[o++] = (char)strtoul(hex, NULL, 16);
            i += 3;
        } else if (s[i] == '\\' && s[i + 1] == 't') {
            s[o++] = '\t';
            i++;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = 0;
    return o;
}

static void test_hostile_headers(void) {
    size_t len = 0;
    char *table = test_read_file(test_src_path("tests/data/safetensors/hostile.tsv"), &len);
    CHECK(table != NULL);
    if (!table)
        return;
    int cases = 0;
    for (char *line = strtok(table, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        char *f[5] = {0};
        char *p = line;
        for (int k = 0; k < 5; k++) {
            f[k] = p;
            char *tab = k < 4 ? strchr(p, '\t') : NULL;
            if (k < 4 && !tab) {
                test_fail(__FILE__, __LINE__, "hostile.tsv: a line of fewer than 5 fields");
                goto next;
            }
            if (tab) {
                *tab = 0;
                p = tab + 1;
            }
        }
        size_t hlen = unescape(f[4]);
        uint64_t length = strcmp(f[2], "-") == 0 ? UINT64_MAX : strtoull(f[2], NULL, 10);
        size_t size;
        unsigned char *file = make_file(f[4], hlen, length, strtoul(f[1], NULL, 10), &size);
        struct s3f_safetensors_header *h = (void *)1;
        struct s3f_error err;
        enum s3f_status st = s3f_safetensors_parse(file, size, size, 0, &h, &err);
        free(file);
        cases++;
        if (st != S3F_ERR_INVALID_ARGUMENT || h != NULL || !strstr(err.message, f[3]))
            test_fail(__FILE__, __LINE__, "%s: status %s, message \"%s\", expected \"%s\"",
                      f[0], s3f_status_name(st), st ? err.message : "", f[3]);
        else
            test_checks_passed++;
        if (st == S3F_OK)
            s3f_safetensors_free(h);
    next:;
    }
    CHECK(cases >= 30);
    free(table);
}

static void test_header_length(void) {
    unsigned char b[8] = {16, 0, 0, 0, 0, 0, 0, 0};
    uint64_t n = 0;
    struct s3f_error err;
    CHECK_INT(s3f_safetensors_header_length(b, 24, 0, &n, &err), S3F_OK);
    CHECK_INT(n, 16);
    CHECK_INT(s3f_safetensors_header_length(b, 23, 0, &n, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "runs past the end of the file (23 bytes)") != NULL);
    CHECK_INT(s3f_safetensors_header_length(b, 7, 0, &n, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "fewer than the 8") != NULL);
    CHECK_INT(s3f_safetensors_header_length(b, 1000, 15, &n, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "above the limit of 15 bytes") != NULL);
    /* a header longer than what is given: said, not read past */
    struct s3f_safetensors_header *h = NULL;
    CHECK_INT(s3f_safetensors_parse(b, 8, 24, 0, &h, &err), S3F_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "the header needs 24") != NULL);
    CHECK(h == NULL);
}

int main(void) {
    RUN(test_what_safetensors_writes);
    RUN(test_hostile_headers);
    RUN(test_header_length);
    return test_summary();
}
