/* The header of a safetensors file (https://github.com/huggingface/safetensors), parsed and
 * validated before a byte of tensor data is fetched: an 8-byte little-endian length N, N
 * bytes of JSON (an object of tensors {"dtype", "shape", "data_offsets"} and an optional
 * "__metadata__" map of strings), then the data section, which the tensors must tile
 * exactly: in order of their offsets, each starting where the previous one ended, the last
 * ending at the end of the file, each holding shape x dtype bytes. The rules are those of
 * safetensors' own loader (0.8: Metadata::validate), so a file it refuses is refused here,
 * with a message naming the tensor and what was wrong.
 *
 * The JSON reader is a small recursive-descent one of bounded depth (src/auth/json.c reads
 * flat objects only): the header is untrusted input (the fuzz target
 * tests/fuzz/fuzz_safetensors.c runs it), so every read is bounded by the header's length,
 * every count by the header's size, and nothing is copied into a message but tensor names,
 * cut short. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MAX_DEPTH 16  /* nesting of the JSON (a valid header needs 3) */
#define OP "safetensors"

struct dtype_info {
    const char *name;
    unsigned bits;
};
/* safetensors 0.8's Dtype, in its order */
static const struct dtype_info dtypes[] = {
    {"BOOL", 8},      {"F4", 4},        {"F6_E2M3", 6},      {"F6_E3M2", 6},
    {"U8", 8},        {"I8", 8},        {"F8_E5M2", 8},      {"F8_E4M3", 8},
    {"F8_E8M0", 8},   {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},      {"F16", 16},      {"BF16", 16},        {"I32", 32},
    {"U32", 32},      {"F32", 32},      {"C64", 64},         {"F64", 64},
    {"I64", 64},      {"U64", 64},
};

struct parser {
    const char *s;
    size_t n, i;
    int depth;
    struct s3f_error *err;
};

S3F_PRINTF(2, 3)
static enum s3f_status bad(struct parser *p, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                          "the header is not valid JSON: offset %zu: %s", p->i, msg);
}

/* A tensor name for a message: at most 80 bytes, then "...". */
static const char *shown(const char *name, char *buf, size_t len) {
    size_t n = strlen(name);
    if (n < 80)
        return name;
    snprintf(buf, len, "%.77s...", name);
    return buf;
}

static void skip_ws(struct parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static bool eat(struct parser *p, char c) {
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == c) {
        p->i++;
        return true;
    }
    return false;
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string, decoded: *out (malloc'ed, NUL-terminated; may hold "\u0000" as a NUL byte) and
 * *len; out NULL: validated and skipped. The input was checked to be UTF-8 already. */
static enum s3f_status parse_string(struct parser *p, char **out, size_t *len) {
    if (!eat(p, '"'))
        return bad(p, "a string expected");
    size_t start = p->i, end = start;
    while (end < p->n && p->s[end] != '"') /* the raw extent bounds the decoded length */
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n)
        return bad(p, "a string that does not end");
    char *o = NULL;
    if (out && !(o = malloc(end - start + 1)))
        return s3f__error_set(p->err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    size_t k = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            free(o);
            return bad(p, "a control character in a string");
        }
        if (c != '\\') {
            if (o)
                o[k] = (char)c;
            k++;
            p->i++;
            continue;
        }
        char e = p->s[p->i + 1];
        p->i += 2;
        char lit = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/' : e == 'b' ? '\b'
                 : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
        if (lit) {
            if (o)
                o[k] = lit;
            k++;
            continue;
        }
        int cp = e == 'u' && p->i + 4 <= end ? hex4(p->s + p->i) : -1;
        if (cp < 0) {
            p->i -= 2;
            free(o);
            return bad(p, "a bad escape in a string");
        }
        p->i += 4;
        uint32_t u = (uint32_t)cp;
        if (u >= 0xDC00 && u <= 0xDFFF) {
            free(o);
            return bad(p, "a lone trailing surrogate in a string");
        }
        if (u >= 0xD800 && u <= 0xDBFF) {
            int lo = p->i + 6 <= end && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u'
                         ? hex4(p->s + p->i + 2)
                         : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) {
                free(o);
                return bad(p, "a lone leading surrogate in a string");
            }
            p->i += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
        }
        char tmp[4];
        size_t m = put_utf8(tmp, u); /* never longer than its escape (6 or 12 bytes) */
        if (o)
            memcpy(o + k, tmp, m);
        k += m;
    }
    p->i = end + 1;
    if (o) {
        o[k] = 0;
        *out = o;
    }
    if (len)
        *len = k;
    return S3F_OK;
}

/* A non-negative integer of at most 64 bits (what safetensors' usize fields take). */
static enum s3f_status parse_uint(struct parser *p, const char *what, uint64_t *v) {
    skip_ws(p);
    size_t start = p->i;
    uint64_t x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        unsigned d = (unsigned)(p->s[p->i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return bad(p, "%s: a number above 2^64", what);
        x = x * 10 + d;
        p->i++;
    }
    char next = p->i < p->n ? p->s[p->i] : 0;
    if (p->i == start || next == '.' || next == 'e' || next == 'E')
        return bad(p, "%s: a non-negative integer expected", what);
    if (p->s[start] == '0' && p->i - start > 1)
        return bad(p, "%s: a number with a leading zero", what);
    *v = x;
    return S3F_OK;
}

static enum s3f_status skip_value(struct parser *p);

static enum s3f_status skip_container(struct parser *p, char close) {
    if (++p->depth > MAX_DEPTH)
        return bad(p, "nested deeper than %d levels", MAX_DEPTH);
    enum s3f_status st;
    if (!eat(p, close)) {
        do {
            if (close == '}' && ((st = parse_string(p, NULL, NULL)) || !eat(p, ':')))
                return st ? st : bad(p, "':' expected");
            if ((st = skip_value(p)))
                return st;
        } while (eat(p, ','));
        if (!eat(p, close))
            return bad(p, "'%c' or ',' expected", close);
    }
    p->depth--;
    return S3F_OK;
}

static enum s3f_status skip_value(struct parser *p) {
    skip_ws(p);
    if (p->i >= p->n)
        return bad(p, "a value expected");
    char c = p->s[p->i];
    if (c == '"')
        return parse_string(p, NULL, NULL);
    if (c == '{' || c == '[') {
        p->i++;
        return skip_container(p, c == '{' ? '}' : ']');
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t k = 0; k < S3F_ARRAY_LEN(words); k++) {
        size_t m = strlen(words[k]);
        if (p->n - p->i >= m && memcmp(p->s + p->i, words[k], m) == 0) {
            p->i += m;
            return S3F_OK;
        }
    }
    /* a number: -?int frac? exp? */
    size_t start = p->i;
    if (p->s[p->i] == '-')
        p->i++;
    size_t digits = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    if (p->i == digits || (p->s[digits] == '0' && p->i - digits > 1)) {
        p->i = start;
        return bad(p, "a value expected");
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        size_t f = ++p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == f)
            return bad(p, "digits expected after '.'");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        size_t f = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == f)
            return bad(p, "digits expected in an exponent");
    }
    return S3F_OK;
}

/* An array of non-negative integers into a malloc'ed *v (NULL when empty) of *n. */
static enum s3f_status parse_uint_array(struct parser *p, const char *what, uint64_t **v,
                                        size_t *n) {
    *v = NULL;
    *n = 0;
    if (!eat(p, '['))
        return bad(p, "%s: an array expected", what);
    if (eat(p, ']'))
        return S3F_OK;
    size_t cap = 0;
    do {
        if (*n == cap) {
            cap = cap ? cap * 2 : 4;
            uint64_t *g = realloc(*v, cap * sizeof(**v));
            if (!g)
                return s3f__error_set(p->err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
            *v = g;
        }
        enum s3f_status st = parse_uint(p, what, &(*v)[*n]);
        if (st)
            return st;
        (*n)++;
    } while (eat(p, ','));
    if (!eat(p, ']'))
        return bad(p, "%s: ']' or ',' expected", what);
    return S3F_OK;
}

static enum s3f_status add_tensor(struct parser *p, struct s3f_safetensors_header *h,
                                  size_t *cap, char *name, size_t name_len) {
    char nb[96];
    if (h->n_tensors == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct s3f_safetensors_tensor *g = realloc(h->tensors, c * sizeof(*g));
        if (!g) {
            free(name);
            return s3f__error_set(p->err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        }
        h->tensors = g;
        *cap = c;
    }
    struct s3f_safetensors_tensor *t = &h->tensors[h->n_tensors++];
    memset(t, 0, sizeof(*t));
    t->name = name;
    t->name_len = name_len;
    if (!eat(p, '{'))
        return bad(p, "tensor \"%s\": an object expected", shown(name, nb, sizeof(nb)));
    bool have_shape = false, have_offsets = false;
    enum s3f_status st = S3F_OK;
    if (eat(p, '}'))
        goto check;
    do {
        char *field = NULL;
        size_t flen = 0;
        if ((st = parse_string(p, &field, &flen)))
            return st;
        if (strlen(field) != flen) /* "dtype\u0000..." is no "dtype" */
            field[0] = 0;
        if (!eat(p, ':')) {
            free(field);
            return bad(p, "':' expected");
        }
        if (strcmp(field, "dtype") == 0 && !t->dtype) {
            char *dt = NULL;
            size_t dl = 0;
            if ((st = parse_string(p, &dt, &dl)))
                goto field_out;
            for (size_t k = 0; k < S3F_ARRAY_LEN(dtypes) && !t->dtype; k++)
                if (strlen(dtypes[k].name) == dl && memcmp(dtypes[k].name, dt, dl) == 0) {
                    t->dtype = dtypes[k].name;
                    t->dtype_bits = dtypes[k].bits;
                }
            if (!t->dtype)
                st = s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                    "tensor \"%s\": unknown dtype \"%.32s\"",
                                    shown(name, nb, sizeof(nb)), dt);
            free(dt);
        } else if (strcmp(field, "shape") == 0 && !have_shape) {
            have_shape = true;
            st = parse_uint_array(p, "shape", &t->shape, &t->n_dims);
        } else if (strcmp(field, "data_offsets") == 0 && !have_offsets) {
            uint64_t *o = NULL;
            size_t n = 0;
            have_offsets = true;
            st = parse_uint_array(p, "data_offsets", &o, &n);
            if (!st && n != 2)
                st = s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                    "tensor \"%s\": data_offsets has %zu numbers, not 2",
                                    shown(name, nb, sizeof(nb)), n);
            if (!st) {
                t->begin = o[0];
                t->end = o[1];
            }
            free(o);
        } else if (strcmp(field, "dtype") == 0 || strcmp(field, "shape") == 0 ||
                   strcmp(field, "data_offsets") == 0) {
            st = s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                "tensor \"%s\": %s given twice", shown(name, nb, sizeof(nb)),
                                field);
        } else {
            st = skip_value(p); /* a field safetensors ignores too */
        }
    field_out:
        free(field);
        if (st)
            return st;
    } while (eat(p, ','));
    if (!eat(p, '}'))
        return bad(p, "'}' or ',' expected");
check:
    if (!t->dtype || !have_shape || !have_offsets)
        return s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "tensor \"%s\" has no %s", shown(name, nb, sizeof(nb)),
                              !t->dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return S3F_OK;
}

static enum s3f_status add_metadata(struct parser *p, struct s3f_safetensors_header *h) {
    if (h->has_metadata)
        return s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "__metadata__ given twice");
    h->has_metadata = 1;
    skip_ws(p);
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) {
        p->i += 4;
        return S3F_OK;
    }
    if (!eat(p, '{'))
        return s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "__metadata__ is not an object of strings");
    if (eat(p, '}'))
        return S3F_OK;
    size_t cap = 0;
    do {
        if (h->n_metadata == cap) {
            cap = cap ? cap * 2 : 8;
            struct s3f_safetensors_kv *g = realloc(h->metadata, cap * sizeof(*g));
            if (!g)
                return s3f__error_set(p->err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
            h->metadata = g;
        }
        struct s3f_safetensors_kv *kv = &h->metadata[h->n_metadata];
        memset(kv, 0, sizeof(*kv));
        char *key = NULL;
        enum s3f_status st = parse_string(p, &key, &kv->key_len);
        if (st)
            return st;
        kv->key = key;
        h->n_metadata++;
        if (!eat(p, ':'))
            return bad(p, "':' expected");
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '"') {
            char nb[96];
            return s3f__error_set(p->err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "__metadata__ \"%s\": the value is not a string",
                                  shown(key, nb, sizeof(nb)));
        }
        char *value = NULL;
        if ((st = parse_string(p, &value, &kv->value_len)))
            return st;
        kv->value = value;
    } while (eat(p, ','));
    if (!eat(p, '}'))
        return bad(p, "'}' or ',' expected");
    return S3F_OK;
}

static int by_offsets(const void *a, const void *b) {
    const struct s3f_safetensors_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int by_name(const void *a, const void *b) {
    const struct s3f_safetensors_tensor *x = *(const struct s3f_safetensors_tensor *const *)a;
    const struct s3f_safetensors_tensor *y = *(const struct s3f_safetensors_tensor *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static void format_shape(const struct s3f_safetensors_tensor *t, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (size_t d = 0; d < t->n_dims && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

/* The tensors tile the data section exactly (the rules of safetensors' validate). */
static enum s3f_status check_layout(struct s3f_safetensors_header *h, struct s3f_error *err) {
    char nb[96], nb2[96], sb[96];
    if (h->n_tensors > 1) /* tensors is NULL when there are none: no qsort(NULL, 0) */
        qsort(h->tensors, h->n_tensors, sizeof(*h->tensors), by_offsets);
    uint64_t at = 0;
    for (size_t k = 0; k < h->n_tensors; k++) {
        struct s3f_safetensors_tensor *t = &h->tensors[k];
        const char *name = shown(t->name, nb, sizeof(nb));
        if (t->end < t->begin)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                  "] end before they begin",
                                  name, t->begin, t->end);
        uint64_t bits = t->dtype_bits;
        for (size_t d = 0; d < t->n_dims; d++)
            if (__builtin_mul_overflow(bits, t->shape[d], &bits)) {
                format_shape(t, sb, sizeof(sb));
                return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                      "tensor \"%s\": shape %s overflows", name, sb);
            }
        if (bits % 8 || bits / 8 != t->end - t->begin) {
            format_shape(t, sb, sizeof(sb));
            if (bits % 8)
                return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                      "tensor \"%s\": dtype %s and shape %s make %" PRIu64
                                      " bits, not whole bytes",
                                      name, t->dtype, sb, bits);
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "tensor \"%s\": dtype %s and shape %s need %" PRIu64
                                  " bytes, data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                                  name, t->dtype, sb, bits / 8, t->begin, t->end,
                                  t->end - t->begin);
        }
        if (t->end > h->data_bytes)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                  "] run past the data section of %" PRIu64 " bytes",
                                  name, t->begin, t->end, h->data_bytes);
        if (t->begin < at)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                  "] overlap tensor \"%s\", which ends at %" PRIu64,
                                  name, t->begin, t->end,
                                  shown(h->tensors[k - 1].name, nb2, sizeof(nb2)), at);
        if (t->begin > at)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                  "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                  "] leave a gap of %" PRIu64 " bytes after offset %" PRIu64,
                                  name, t->begin, t->end, t->begin - at, at);
        at = t->end;
    }
    if (at != h->data_bytes)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "the tensors end at offset %" PRIu64 " of the data section, which "
                              "has %" PRIu64 " bytes",
                              at, h->data_bytes);
    if (h->n_tensors < 2)
        return S3F_OK;
    const struct s3f_safetensors_tensor **names = malloc(h->n_tensors * sizeof(*names));
    if (!names)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    for (size_t k = 0; k < h->n_tensors; k++)
        names[k] = &h->tensors[k];
    qsort(names, h->n_tensors, sizeof(*names), by_name);
    enum s3f_status st = S3F_OK;
    for (size_t k = 1; k < h->n_tensors && !st; k++)
        if (by_name(&names[k - 1], &names[k]) == 0)
            st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                                "tensor \"%s\" is named twice",
                                shown(names[k]->name, nb, sizeof(nb)));
    free(names);
    return st;
}

enum s3f_status s3f_safetensors_header_length(const void *first8, uint64_t file_size,
                                              uint64_t max_header_bytes, uint64_t *header_bytes,
                                              struct s3f_error *err) {
    s3f_error_clear(err);
    if (!first8 || !header_bytes)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "first8 and header_bytes are required");
    if (!max_header_bytes)
        max_header_bytes = S3F_SAFETENSORS_MAX_HEADER_BYTES;
    if (file_size < 8)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "the file has %" PRIu64 " bytes, fewer than the 8 of the "
                              "header's length",
                              file_size);
    const unsigned char *b = first8;
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = (n << 8) | b[k];
    if (n > max_header_bytes)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "the header's length %" PRIu64 " is above the limit of %" PRIu64
                              " bytes",
                              n, max_header_bytes);
    if (n > file_size - 8)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "the header's length %" PRIu64 " runs past the end of the file "
                              "(%" PRIu64 " bytes)",
                              n, file_size);
    *header_bytes = n;
    return S3F_OK;
}

enum s3f_status s3f_safetensors_parse(const void *data, size_t len, uint64_t file_size,
                                      uint64_t max_header_bytes,
                                      struct s3f_safetensors_header **out,
                                      struct s3f_error *err) {
    if (out)
        *out = NULL;
    uint64_t n = 0;
    if (!data || !out || (len < 8 && file_size >= 8))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              !data || !out ? "data and out are required"
                                            : "fewer than the 8 bytes of the header's length given");
    enum s3f_status st = s3f_safetensors_header_length(data, file_size, max_header_bytes, &n, err);
    if (st)
        return st;
    if (len - 8 < n)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                              "%zu bytes given, the header needs %" PRIu64, len, 8 + n);
    struct s3f_safetensors_header *h = calloc(1, sizeof(*h));
    if (!h)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    h->header_bytes = n;
    h->data_offset = 8 + n;
    h->data_bytes = file_size - h->data_offset;
    struct parser p = {.s = (const char *)data + 8, .n = (size_t)n, .err = err};
    size_t where, cap = 0;
    if ((where = s3f__utf8_valid_prefix((const unsigned char *)p.s, p.n)) != p.n) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                            "the header is not UTF-8 (offset %zu)", where);
        goto out;
    }
    if (p.n == 0 || p.s[0] != '{') {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                            "the header does not start with '{': not a JSON object");
        goto out;
    }
    p.i = 1;
    p.depth = 1;
    if (!eat(&p, '}')) {
        do {
            char *key = NULL;
            size_t key_len = 0;
            if ((st = parse_string(&p, &key, &key_len)))
                goto out;
            if (!eat(&p, ':')) {
                free(key);
                st = bad(&p, "':' expected");
                goto out;
            }
            if (strcmp(key, "__metadata__") == 0 && key_len == 12) {
                free(key);
                st = add_metadata(&p, h);
            } else {
                st = add_tensor(&p, h, &cap, key, key_len);
            }
            if (st)
                goto out;
        } while (eat(&p, ','));
        if (!eat(&p, '}')) {
            st = bad(&p, "'}' or ',' expected");
            goto out;
        }
    }
    skip_ws(&p);
    if (p.i != p.n) {
        st = bad(&p, "bytes after the header's object");
        goto out;
    }
    st = check_layout(h, err);
out:
    if (st) {
        s3f_safetensors_free(h);
        return st;
    }
    *out = h;
    return S3F_OK;
}

void s3f_safetensors_free(struct s3f_safetensors_header *h) {
    if (!h)
        return;
    for (size_t k = 0; k < h->n_tensors; k++) {
        free((char *)h->tensors[k].name);
        free(h->tensors[k].shape);
    }
    for (size_t k = 0; k < h->n_metadata; k++) {
        free((char *)h->metadata[k].key);
        free((char *)h->metadata[k].value);
    }
    free(h->tensors);
    free(h->metadata);
    free(h);
}
