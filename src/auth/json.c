/* A flat JSON object reader (RFC 8259) for credential endpoints. */
#include "auth/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 32
#define JSON_MAX_MEMBERS 1024

struct parser {
    const char *s;
    size_t len;
    size_t pos;
    char *errmsg;
    size_t errmsg_len;
};

static enum s3f_status fail(struct parser *p, const char *what) {
    if (p->errmsg && p->errmsg_len)
        snprintf(p->errmsg, p->errmsg_len, "offset %zu: %s", p->pos, what);
    return S3F_ERR_BAD_RESPONSE;
}

static void skip_ws(struct parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int peek(const struct parser *p) {
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int read_hex4(struct parser *p, uint32_t *out) {
    if (p->len - p->pos < 4)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = s3f__hex_digit((unsigned char)p->s[p->pos + (size_t)i]);
        if (h < 0)
            return -1;
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

static enum s3f_status put_utf8(struct s3f__buf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return s3f__buf_append(b, u, n);
}

/* Parse a string at p->pos (which is '"'). If b is non-NULL, the decoded bytes are
 * appended to it; otherwise the string is only validated. */
static enum s3f_status parse_string(struct parser *p, struct s3f__buf *b) {
    p->pos++; /* opening quote */
    for (;;) {
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return S3F_OK;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c != '\\') {
            size_t start = p->pos;
            while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
                   (unsigned char)p->s[p->pos] >= 0x20)
                p->pos++;
            if (b) {
                enum s3f_status st = s3f__buf_append(b, p->s + start, p->pos - start);
                if (st)
                    return st == S3F_ERR_NO_MEMORY ? st : fail(p, "string too long");
            }
            continue;
        }
        p->pos++;
        if (p->pos >= p->len)
            return fail(p, "unterminated escape");
        char e = p->s[p->pos++];
        char out;
        uint32_t cp = 0;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u':
            if (read_hex4(p, &cp))
                return fail(p, "bad \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "unpaired surrogate");
                p->pos += 2;
                if (read_hex4(p, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return fail(p, "unpaired surrogate");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return fail(p, "unpaired surrogate");
            }
            if (b) {
                enum s3f_status st = put_utf8(b, cp);
                if (st)
                    return st == S3F_ERR_NO_MEMORY ? st : fail(p, "string too long");
            }
            continue;
        default:
            p->pos--;
            return fail(p, "bad escape");
        }
        if (b) {
            enum s3f_status st = s3f__buf_append(b, &out, 1);
            if (st)
                return st == S3F_ERR_NO_MEMORY ? st : fail(p, "string too long");
        }
    }
}

static bool is_digit(int c) {
    return c >= '0' && c <= '9';
}

/* Number per the RFC grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static enum s3f_status parse_number(struct parser *p) {
    if (peek(p) == '-')
        p->pos++;
    if (peek(p) == '0') {
        p->pos++;
    } else if (is_digit(peek(p))) {
        while (is_digit(peek(p)))
            p->pos++;
    } else {
        return fail(p, "bad number");
    }
    if (peek(p) == '.') {
        p->pos++;
        if (!is_digit(peek(p)))
            return fail(p, "bad number");
        while (is_digit(peek(p)))
            p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-')
            p->pos++;
        if (!is_digit(peek(p)))
            return fail(p, "bad number");
        while (is_digit(peek(p)))
            p->pos++;
    }
    return S3F_OK;
}

static enum s3f_status parse_literal(struct parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "unexpected character");
    p->pos += n;
    return S3F_OK;
}

static enum s3f_status skip_value(struct parser *p, int depth);

/* Validate and skip an object or array at p->pos. */
static enum s3f_status skip_container(struct parser *p, int depth) {
    if (depth >= JSON_MAX_DEPTH)
        return fail(p, "nesting too deep");
    char open = p->s[p->pos++];
    char close = open == '{' ? '}' : ']';
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        return S3F_OK;
    }
    for (;;) {
        enum s3f_status st;
        skip_ws(p);
        if (open == '{') {
            if (peek(p) != '"')
                return fail(p, "expected a member name");
            if ((st = parse_string(p, NULL)))
                return st;
            skip_ws(p);
            if (peek(p) != ':')
                return fail(p, "expected ':'");
            p->pos++;
        }
        if ((st = skip_value(p, depth + 1)))
            return st;
        skip_ws(p);
        if (peek(p) == ',') {
            p->pos++;
            continue;
        }
        if (peek(p) == close) {
            p->pos++;
            return S3F_OK;
        }
        return fail(p, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static enum s3f_status skip_value(struct parser *p, int depth) {
    skip_ws(p);
    switch (peek(p)) {
    case '{':
    case '[': return skip_container(p, depth);
    case '"': return parse_string(p, NULL);
    case 't': return parse_literal(p, "true");
    case 'f': return parse_literal(p, "false");
    case 'n': return parse_literal(p, "null");
    case -1: return fail(p, "unexpected end of input");
    default: return parse_number(p);
    }
}

void s3f__json_cleanup(struct s3f__json_object *o) {
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++) {
        free(o->members[i].key);
        if (o->members[i].value) {
            explicit_bzero(o->members[i].value, o->members[i].value_len);
            free(o->members[i].value);
        }
    }
    free(o->members);
    o->members = NULL;
    o->n = 0;
}

/* Parse one member value into m. */
static enum s3f_status parse_member_value(struct parser *p, struct s3f__json_member *m) {
    enum s3f_status st;
    skip_ws(p);
    int c = peek(p);
    if (c == '"') {
        struct s3f__buf b;
        s3f__buf_init(&b, 1 << 20);
        st = parse_string(p, &b);
        if (st) {
            if (b.data)
                explicit_bzero(b.data, b.len);
            s3f__buf_cleanup(&b);
            return st;
        }
        m->type = S3F__JSON_STRING;
        m->value_len = b.len;
        m->value = s3f__buf_take(&b);
        return m->value ? S3F_OK : S3F_ERR_NO_MEMORY;
    }
    if (c == '{' || c == '[') {
        m->type = S3F__JSON_OTHER;
        return skip_container(p, 1);
    }
    if (c == 't' || c == 'f' || c == 'n') {
        m->type = c == 't' ? S3F__JSON_TRUE : c == 'f' ? S3F__JSON_FALSE : S3F__JSON_NULL;
        return parse_literal(p, c == 't' ? "true" : c == 'f' ? "false" : "null");
    }
    if (c == -1)
        return fail(p, "unexpected end of input");
    size_t start = p->pos;
    if ((st = parse_number(p)))
        return st;
    m->type = S3F__JSON_NUMBER;
    m->value_len = p->pos - start;
    m->value = s3f__strndup(p->s + start, m->value_len);
    return m->value ? S3F_OK : S3F_ERR_NO_MEMORY;
}

enum s3f_status s3f__json_parse_object(const char *text, size_t len, struct s3f__json_object *out,
                                       char *errmsg, size_t errmsg_len) {
    struct parser p = {text, len, 0, errmsg, errmsg_len};
    struct s3f__json_object o = {NULL, 0};
    size_t cap = 0;
    enum s3f_status st = S3F_OK;
    out->members = NULL;
    out->n = 0;
    if (errmsg && errmsg_len)
        errmsg[0] = '\0';
    if (!text) {
        st = fail(&p, "no input");
        goto out;
    }
    skip_ws(&p);
    if (peek(&p) != '{') {
        st = fail(&p, "expected '{'");
        goto out;
    }
    p.pos++;
    skip_ws(&p);
    if (peek(&p) == '}') {
        p.pos++;
    } else {
        for (;;) {
            skip_ws(&p);
            if (peek(&p) != '"') {
                st = fail(&p, "expected a member name");
                goto out;
            }
            if (o.n == cap) {
                if (cap >= JSON_MAX_MEMBERS) {
                    st = fail(&p, "too many members");
                    goto out;
                }
                size_t ncap = cap ? cap * 2 : 8;
                struct s3f__json_member *nm = realloc(o.members, ncap * sizeof(*nm));
                if (!nm) {
                    st = S3F_ERR_NO_MEMORY;
                    goto out;
                }
                o.members = nm;
                cap = ncap;
            }
            struct s3f__json_member *m = &o.members[o.n];
            memset(m, 0, sizeof(*m));
            o.n++;
            struct s3f__buf kb;
            s3f__buf_init(&kb, 4096);
            st = parse_string(&p, &kb);
            if (st) {
                s3f__buf_cleanup(&kb);
                goto out;
            }
            m->key = s3f__buf_take(&kb);
            if (!m->key) {
                st = S3F_ERR_NO_MEMORY;
                goto out;
            }
            skip_ws(&p);
            if (peek(&p) != ':') {
                st = fail(&p, "expected ':'");
                goto out;
            }
            p.pos++;
            if ((st = parse_member_value(&p, m)))
                goto out;
            skip_ws(&p);
            if (peek(&p) == ',') {
                p.pos++;
                continue;
            }
            if (peek(&p) == '}') {
                p.pos++;
                break;
            }
            st = fail(&p, "expected ',' or '}'");
            goto out;
        }
    }
    skip_ws(&p);
    if (p.pos != p.len)
        st = fail(&p, "trailing characters after the object");
out:
    if (st) {
        s3f__json_cleanup(&o);
        return st;
    }
    *out = o;
    return S3F_OK;
}

const struct s3f__json_member *s3f__json_get(const struct s3f__json_object *o, const char *key) {
    for (size_t i = 0; o && i < o->n; i++)
        if (strcmp(o->members[i].key, key) == 0)
            return &o->members[i];
    return NULL;
}

const char *s3f__json_get_string(const struct s3f__json_object *o, const char *key) {
    const struct s3f__json_member *m = s3f__json_get(o, key);
    return m && m->type == S3F__JSON_STRING ? m->value : NULL;
}

int s3f__json_get_int64(const struct s3f__json_object *o, const char *key, int64_t *out) {
    const struct s3f__json_member *m = s3f__json_get(o, key);
    if (!m || m->type != S3F__JSON_NUMBER)
        return -1;
    if (strpbrk(m->value, ".eE"))
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(m->value, &end, 10);
    if (errno || *end)
        return -1;
    *out = (int64_t)v;
    return 0;
}
