/* S3 XML: DeleteObjects, its result document (on the engine of xml.c) and its request body
 * built from the caller's keys (see xml.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/xml_internal.h"

/* ---- DeleteObjects ------------------------------------------------------------------------ */
struct delete_ctx {
    size_t n_deleted, n_errors;
    char key[1100];
    char code[64];
    char message[512];
};

static void delete_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct delete_ctx *c = d->ctx;
    if (d->depth == 2) {
        bool del = strcmp(name, "Deleted") == 0, er = strcmp(name, "Error") == 0;
        if ((del || er) && c->n_deleted + c->n_errors >= S3F__XML_MAX_ENTRIES) {
            s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "more than %d entries", S3F__XML_MAX_ENTRIES);
            return;
        }
        c->n_deleted += del;
        c->n_errors += er;
    } else if (d->depth == 3 && strcmp(s3f__xml_parent(d), "Error") == 0 && c->n_errors == 0) {
        /* fields of the first <Error> entry (it is counted at its end tag) */
        if (strcmp(name, "Key") == 0)
            s3f__strlcpyn(c->key, text, len, sizeof(c->key));
        else if (strcmp(name, "Code") == 0)
            s3f__strlcpyn(c->code, text, len, sizeof(c->code));
        else if (strcmp(name, "Message") == 0)
            s3f__strlcpyn(c->message, text, len, sizeof(c->message));
    }
}

enum s3f_status s3f__xml_parse_delete_result(const char *body, size_t len, size_t *n_deleted,
                                             size_t *n_errors, struct s3f_error *first_error,
                                             struct s3f_error *err) {
    struct delete_ctx c;
    memset(&c, 0, sizeof(c));
    struct xdoc d = {.what = "DeleteObjects", .root = "DeleteResult", .on_end = delete_end,
                     .ctx = &c};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (st)
        return st;
    if (n_deleted)
        *n_deleted = c.n_deleted;
    if (n_errors)
        *n_errors = c.n_errors;
    if (first_error && c.n_errors) {
        s3f__strlcpy(first_error->code, c.code, sizeof(first_error->code));
        s3f__error_set(first_error, s3f__s3_error_status(0, c.code), NULL, c.key, "%s",
                       c.message);
    }
    return S3F_OK;
}

/* Next UTF-8 code point of s[0..n) into *cp; returns its length, 0 if invalid. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) ||
        v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

static enum s3f_status append_escaped(struct s3f__buf *b, const char *key, size_t idx,
                                      struct s3f_error *err) {
    const unsigned char *s = (const unsigned char *)key;
    size_t n = strlen(key);
    enum s3f_status st = S3F_OK;
    for (size_t i = 0; i < n && !st;) {
        uint32_t cp;
        size_t l = utf8_next(s + i, n - i, &cp);
        if (l == 0)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                                  "key #%zu is not valid UTF-8 (byte %zu)", idx, i);
        if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0xfffe ||
            cp == 0xffff)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                                  "key #%zu holds U+%04X, which XML 1.0 cannot carry: delete "
                                  "it with DeleteObject",
                                  idx, (unsigned)cp);
        switch (cp) {
        case '&': st = s3f__buf_appends(b, "&amp;"); break;
        case '<': st = s3f__buf_appends(b, "&lt;"); break;
        case '>': st = s3f__buf_appends(b, "&gt;"); break;
        case '"': st = s3f__buf_appends(b, "&quot;"); break;
        case '\'': st = s3f__buf_appends(b, "&apos;"); break;
        case '\t': st = s3f__buf_appends(b, "&#9;"); break;
        case '\n': st = s3f__buf_appends(b, "&#10;"); break;
        case '\r': st = s3f__buf_appends(b, "&#13;"); break;
        default: st = s3f__buf_append(b, key + i, l); break;
        }
        i += l;
    }
    return st;
}

enum s3f_status s3f__xml_append_escaped(struct s3f__buf *b, const char *s) {
    enum s3f_status st = S3F_OK;
    for (const char *p = s; *p && !st;) {
        size_t n = strcspn(p, "&<>\"'");
        if (n)
            st = s3f__buf_append(b, p, n);
        p += n;
        if (st || !*p)
            break;
        switch (*p++) {
        case '&': st = s3f__buf_appends(b, "&amp;"); break;
        case '<': st = s3f__buf_appends(b, "&lt;"); break;
        case '>': st = s3f__buf_appends(b, "&gt;"); break;
        case '"': st = s3f__buf_appends(b, "&quot;"); break;
        default: st = s3f__buf_appends(b, "&apos;"); break;
        }
    }
    return st;
}

enum s3f_status s3f__xml_build_delete(const char *const *keys, size_t n, bool quiet,
                                      struct s3f__buf *out, struct s3f_error *err) {
    if (!out || (n && !keys))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                              "no keys or no output buffer");
    if (n < 1 || n > 1000)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                              "DeleteObjects takes 1 to 1000 keys, not %zu", n);
    size_t start = out->len;
    enum s3f_status st = s3f__buf_appends(
        out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
             "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    if (!st && quiet)
        st = s3f__buf_appends(out, "<Quiet>true</Quiet>");
    for (size_t i = 0; i < n && !st; i++) {
        if (!keys[i] || !keys[i][0]) {
            s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                           "key #%zu is empty", i);
            st = S3F_ERR_INVALID_ARGUMENT;
            break;
        }
        st = s3f__buf_appends(out, "<Object><Key>");
        if (!st) {
            st = append_escaped(out, keys[i], i, err);
            if (st == S3F_ERR_INVALID_ARGUMENT)
                break;
        }
        if (!st)
            st = s3f__buf_appends(out, "</Key></Object>");
    }
    if (!st)
        st = s3f__buf_appends(out, "</Delete>");
    if (st) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
        if (st == S3F_ERR_NO_MEMORY)
            return s3f__error_set(err, st, "DeleteObjects", NULL, "out of memory");
        if (st != S3F_ERR_INVALID_ARGUMENT) /* the buffer's cap */
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "DeleteObjects", NULL,
                                  "DeleteObjects body larger than %zu bytes", out->max);
        return st;
    }
    return S3F_OK;
}
