/* Growable buffers with a cap, and small string helpers. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define S3F_BUF_DEFAULT_MAX ((size_t)64 << 20)

void s3f__buf_init(struct s3f__buf *b, size_t max) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max ? max : S3F_BUF_DEFAULT_MAX;
}

void s3f__buf_cleanup(struct s3f__buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void s3f__buf_reset(struct s3f__buf *b) {
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static enum s3f_status buf_reserve(struct s3f__buf *b, size_t extra) {
    if (extra > b->max || b->len > b->max - extra)
        return S3F_ERR_BAD_RESPONSE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return S3F_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return S3F_ERR_NO_MEMORY;
    b->data = p;
    b->cap = cap;
    return S3F_OK;
}

enum s3f_status s3f__buf_append(struct s3f__buf *b, const void *data, size_t len) {
    enum s3f_status st = buf_reserve(b, len);
    if (st)
        return st;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return S3F_OK;
}

enum s3f_status s3f__buf_appends(struct s3f__buf *b, const char *s) {
    return s3f__buf_append(b, s, strlen(s));
}

enum s3f_status s3f__buf_appendf(struct s3f__buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return S3F_ERR_INTERNAL;
    enum s3f_status st = buf_reserve(b, (size_t)n);
    if (st)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return S3F_OK;
}

char *s3f__buf_take(struct s3f__buf *b) {
    char *p = b->data;
    if (!p)
        p = calloc(1, 1);
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

char *s3f__strdup(const char *s) {
    return s ? strdup(s) : NULL;
}

char *s3f__strndup(const char *s, size_t n) {
    if (!s)
        return NULL;
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

bool s3f__strieq(const char *a, const char *b) {
    if (!a || !b)
        return a == b;
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

char *s3f__trim(char *s) {
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}
