/* A tiny recursive-descent JSON reader for the test vectors. */
#include "vecjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vj_in {
    const char *s;
    size_t len, pos;
};

static void *xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "vecjson: out of memory\n");
        exit(2);
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "vecjson: out of memory\n");
        exit(2);
    }
    return p;
}

static void ws(struct vj_in *in) {
    while (in->pos < in->len && strchr(" \t\r\n", in->s[in->pos]))
        in->pos++;
}

static struct vj *value(struct vj_in *in, int depth);

static int hexv(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void put_utf8(char *out, size_t *o, unsigned cp) {
    if (cp < 0x80) {
        out[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*o)++] = (char)(0xc0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*o)++] = (char)(0xf0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static bool read_hex4(struct vj_in *in, unsigned *cp) {
    if (in->pos + 4 > in->len)
        return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexv(in->s[in->pos++]);
        if (h < 0)
            return false;
        v = v * 16 + (unsigned)h;
    }
    *cp = v;
    return true;
}

static char *string(struct vj_in *in) {
    if (in->s[in->pos] != '"')
        return NULL;
    in->pos++;
    char *out = xalloc(in->len - in->pos + 8);
    size_t o = 0;
    while (in->pos < in->len) {
        char c = in->s[in->pos++];
        if (c == '"') {
            out[o] = '\0';
            return out;
        }
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        if (in->pos >= in->len)
            break;
        c = in->s[in->pos++];
        switch (c) {
        case '"': case '\\': case '/': out[o++] = c; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!read_hex4(in, &cp))
                goto bad;
            if (cp >= 0xd800 && cp < 0xdc00 && in->pos + 6 <= in->len &&
                in->s[in->pos] == '\\' && in->s[in->pos + 1] == 'u') {
                unsigned lo;
                in->pos += 2;
                if (!read_hex4(in, &lo))
                    goto bad;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            put_utf8(out, &o, cp);
            break;
        }
        default:
            goto bad;
        }
    }
bad:
    free(out);
    return NULL;
}

static struct vj *value(struct vj_in *in, int depth) {
    ws(in);
    if (in->pos >= in->len || depth > 64)
        return NULL;
    struct vj *v = xalloc(sizeof(*v));
    char c = in->s[in->pos];
    if (c == '{' || c == '[') {
        bool obj = c == '{';
        v->type = obj ? VJ_OBJECT : VJ_ARRAY;
        in->pos++;
        ws(in);
        if (in->pos < in->len && in->s[in->pos] == (obj ? '}' : ']')) {
            in->pos++;
            return v;
        }
        for (;;) {
            char *k = NULL;
            ws(in);
            if (obj) {
                if (in->pos >= in->len || !(k = string(in)))
                    goto bad;
                ws(in);
                if (in->pos >= in->len || in->s[in->pos] != ':') {
                    free(k);
                    goto bad;
                }
                in->pos++;
            }
            struct vj *item = value(in, depth + 1);
            if (!item) {
                free(k);
                goto bad;
            }
            v->items = xrealloc(v->items, (v->n + 1) * sizeof(*v->items));
            v->items[v->n] = item;
            if (obj) {
                v->keys = xrealloc(v->keys, (v->n + 1) * sizeof(*v->keys));
                v->keys[v->n] = k;
            }
            v->n++;
            ws(in);
            if (in->pos >= in->len)
                goto bad;
            if (in->s[in->pos] == ',') {
                in->pos++;
                continue;
            }
            if (in->s[in->pos] == (obj ? '}' : ']')) {
                in->pos++;
                return v;
            }
            goto bad;
        }
    }
    if (c == '"') {
        v->type = VJ_STRING;
        if (!(v->str = string(in)))
            goto bad;
        return v;
    }
    if (strncmp(in->s + in->pos, "true", 4) == 0) {
        v->type = VJ_BOOL;
        v->b = true;
        in->pos += 4;
        return v;
    }
    if (strncmp(in->s + in->pos, "false", 5) == 0) {
        v->type = VJ_BOOL;
        in->pos += 5;
        return v;
    }
    if (strncmp(in->s + in->pos, "null", 4) == 0) {
        in->pos += 4;
        return v;
    }
    {
        char *end;
        v->type = VJ_NUMBER;
        v->num = strtod(in->s + in->pos, &end);
        if (end == in->s + in->pos)
            goto bad;
        in->pos = (size_t)(end - in->s);
        return v;
    }
bad:
    vj_free(v);
    return NULL;
}

struct vj *vj_parse(const char *text, size_t len) {
    struct vj_in in = {text, len, 0};
    struct vj *v = value(&in, 0);
    ws(&in);
    if (!v || in.pos != len) {
        fprintf(stderr, "vecjson: syntax error near byte %zu\n", in.pos);
        vj_free(v);
        return NULL;
    }
    return v;
}

void vj_free(struct vj *v) {
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        vj_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

const struct vj *vj_get(const struct vj *obj, const char *key) {
    if (!obj || obj->type != VJ_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

const char *vj_str(const struct vj *obj, const char *key) {
    const struct vj *v = vj_get(obj, key);
    return v && v->type == VJ_STRING ? v->str : NULL;
}

bool vj_bool(const struct vj *obj, const char *key) {
    const struct vj *v = vj_get(obj, key);
    return v && v->type == VJ_BOOL && v->b;
}
