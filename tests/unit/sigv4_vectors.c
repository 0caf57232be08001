/* Helpers of the SigV4 / SigV4a vector runners (see sigv4_vectors.h). */
#include "sigv4_vectors.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "testutil.h"

/* ---- small helpers -------------------------------------------------------------------- */

char *xstrdup(const char *s) {
    char *p = s3f__strdup(s);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}


char *read_rel(const char *dir, const char *name) {
    char path[4096];
    FMT(path, "%s/%s", dir, name);
    return test_read_file(path, NULL);
}

char *encode_path(const char *raw) {
    struct s3f__buf b;
    s3f__buf_init(&b, 0);
    s3f__uri_encode(&b, raw, strlen(raw), true);
    return s3f__buf_take(&b);
}

/* True when the path has no empty, "." or ".." segment (normalization leaves it alone). */
bool path_is_normal(const char *path) {
    if (path[0] != '/')
        return false;
    const char *p = path + 1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        bool last = !slash;
        if ((n == 0 && !last) || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (last)
            return true;
        p = slash + 1;
    }
}

/* No output may contain the secret. */
void check_no_secret(const char *s, const char *secret) {
    if (s && secret && *secret)
        CHECK(strstr(s, secret) == NULL);
}

/* ---- raw HTTP request parser -------------------------------------------------------------- */


void raw_req_free(struct raw_req *r) {
    free(r->method);
    free(r->target);
    free(r->path);
    free(r->query);
    for (size_t i = 0; i < r->n; i++) {
        free(r->names[i]);
        free(r->values[i]);
    }
    free(r->header_text);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* Request line "METHOD SP target SP HTTP/x" (the target may hold spaces), header lines
 * "Name:value" with obs-fold continuation lines (leading SP/HT) joined with one space, an
 * empty line, then the body. Returns 0, or -1 if malformed. */
static int raw_req_parse_inner(const char *text, struct raw_req *r);

int raw_req_parse(const char *text, struct raw_req *r) {
    int rc = raw_req_parse_inner(text, r);
    if (rc)
        raw_req_free(r);
    return rc;
}

static int raw_req_parse_inner(const char *text, struct raw_req *r) {
    memset(r, 0, sizeof(*r));
    const char *eol = strchr(text, '\n');
    size_t l0 = eol ? (size_t)(eol - text) : strlen(text);
    if (l0 && text[l0 - 1] == '\r')
        l0--;
    char *line = s3f__strndup(text, l0);
    char *sp1 = strchr(line, ' '), *sp2 = strrchr(line, ' ');
    if (!sp1 || sp1 == sp2) {
        free(line);
        return -1;
    }
    r->method = s3f__strndup(line, (size_t)(sp1 - line));
    r->target = s3f__strndup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
    free(line);
    char *q = strchr(r->target, '?');
    r->path = q ? s3f__strndup(r->target, (size_t)(q - r->target)) : xstrdup(r->target);
    r->query = q ? xstrdup(q + 1) : NULL;

    const char *p = eol ? eol + 1 : text + l0;
    const char *headers_start = p;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        size_t content = n && p[n - 1] == '\r' ? n - 1 : n;
        if (content == 0) { /* blank line: the body follows */
            r->header_text = s3f__strndup(headers_start, (size_t)(p - headers_start));
            p = e ? e + 1 : p + n;
            r->body_len = strlen(p);
            r->body = xstrdup(p);
            return 0;
        }
        if ((p[0] == ' ' || p[0] == '\t') && r->n) {
            size_t k = 0;
            while (k < content && (p[k] == ' ' || p[k] == '\t'))
                k++;
            char *old = r->values[r->n - 1];
            size_t ol = strlen(old);
            char *nv = malloc(ol + 1 + (content - k) + 1);
            memcpy(nv, old, ol);
            nv[ol] = ' ';
            memcpy(nv + ol + 1, p + k, content - k);
            nv[ol + 1 + content - k] = '\0';
            free(old);
            r->values[r->n - 1] = nv;
        } else {
            const char *colon = memchr(p, ':', content);
            if (!colon || r->n == MAX_HEADERS)
                return -1;
            r->names[r->n] = s3f__strndup(p, (size_t)(colon - p));
            r->values[r->n] = s3f__strndup(colon + 1, content - (size_t)(colon + 1 - p));
            r->n++;
        }
        p = e ? e + 1 : p + n;
    }
    /* No blank line: headers to the end, no body. Keep the last line's newline shape. */
    r->header_text = xstrdup(headers_start);
    if (*r->header_text && r->header_text[strlen(r->header_text) - 1] != '\n') {
        size_t hl = strlen(r->header_text);
        char *t = realloc(r->header_text, hl + 2);
        t[hl] = '\n';
        t[hl + 1] = '\0';
        r->header_text = t;
    }
    r->body = xstrdup("");
    return 0;
}

/* Remove header `name` (case-insensitive), returning its (last) value malloc'ed, or NULL. */
char *raw_req_take(struct raw_req *r, const char *name) {
    char *val = NULL;
    size_t j = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (s3f__strieq(r->names[i], name)) {
            free(val);
            val = r->values[i];
            free(r->names[i]);
        } else {
            r->names[j] = r->names[i];
            r->values[j] = r->values[i];
            j++;
        }
    }
    r->n = j;
    return val;
}

size_t raw_req_headers(const struct raw_req *r, struct s3f__header *h) {
    for (size_t i = 0; i < r->n; i++)
        h[i] = (struct s3f__header){r->names[i], r->values[i]};
    return r->n;
}

/* Header value in a raw request text (for the token in botocore's .sreq), malloc'ed. */
char *raw_header_value(const char *text, const char *name) {
    struct raw_req r;
    if (!text || raw_req_parse(text, &r) != 0)
        return NULL;
    char *v = raw_req_take(&r, name);
    raw_req_free(&r);
    return v;
}

/* ---- a tiny JSON reader for the flat context.json files ----------------------------------- */
/* Collects scalar members as "a.b" = value (strings unescaped; numbers, true, false, null as
 * written). No arrays (not used by these files). */



static void json_ws(struct json *j) {
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
        j->p++;
}

static void json_string(struct json *j, char *out, size_t len) {
    size_t o = 0;
    if (*j->p != '"') {
        j->bad = 1;
        return;
    }
    j->p++;
    while (*j->p && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            c = *j->p++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case '"': case '\\': case '/': break;
            default: j->bad = 1; return; /* \u is not needed by these files */
            }
        }
        if (o + 1 < len)
            out[o++] = c;
    }
    if (*j->p != '"')
        j->bad = 1;
    else
        j->p++;
    out[o] = '\0';
}

static void json_value(struct json *j, const char *prefix);

static void json_object(struct json *j, const char *prefix) {
    j->p++; /* '{' */
    json_ws(j);
    if (*j->p == '}') {
        j->p++;
        return;
    }
    while (!j->bad) {
        json_ws(j);
        char name[128], key[256];
        json_string(j, name, sizeof(name));
        json_ws(j);
        if (*j->p != ':') {
            j->bad = 1;
            return;
        }
        j->p++;
        json_ws(j);
        FMT(key, "%s%s%s", prefix, *prefix ? "." : "", name);
        json_value(j, key);
        json_ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == '}') {
            j->p++;
            return;
        }
        j->bad = 1;
    }
}

static void json_value(struct json *j, const char *key) {
    if (*j->p == '{') {
        json_object(j, key);
        return;
    }
    if (j->n == S3F_ARRAY_LEN(j->kv)) {
        j->bad = 1;
        return;
    }
    struct json_kv *kv = &j->kv[j->n++];
    s3f__strlcpy(kv->key, key, sizeof(kv->key));
    if (*j->p == '"') {
        json_string(j, kv->val, sizeof(kv->val));
        return;
    }
    size_t o = 0;
    while (*j->p && strchr(",}] \t\r\n", *j->p) == NULL && o + 1 < sizeof(kv->val))
        kv->val[o++] = *j->p++;
    kv->val[o] = '\0';
    if (o == 0 || *j->p == '[')
        j->bad = 1;
}

int json_parse(const char *text, struct json *j) {
    memset(j, 0, sizeof(*j));
    j->p = text;
    json_ws(j);
    if (*j->p != '{')
        return -1;
    json_object(j, "");
    json_ws(j);
    return j->bad || *j->p ? -1 : 0;
}

const char *json_get(const struct json *j, const char *key) {
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->kv[i].key, key) == 0)
            return j->kv[i].val;
    return NULL;
}

bool json_true(const struct json *j, const char *key) {
    const char *v = json_get(j, key);
    return v && strcmp(v, "true") == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the subdirectories of dir (malloc'ed array of malloc'ed strings). */
size_t list_subdirs(const char *dir, char ***out) {
    DIR *d = opendir(dir);
    size_t n = 0, cap = 0;
    char **names = NULL;
    if (!d) {
        *out = NULL;
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        struct stat sb;
        FMT(path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            names = realloc(names, cap * sizeof(*names));
        }
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), cmp_str);
    *out = names;
    return n;
}


void cauth_expect_read(const char *dir, bool query_form, struct cauth_expect *x) {
    const char *prefix = query_form ? "query" : "header";
    char fname[64];
    FMT(fname, "%s-canonical-request.txt", prefix);
    x->creq = read_rel(dir, fname);
    FMT(fname, "%s-string-to-sign.txt", prefix);
    x->sts = read_rel(dir, fname);
    FMT(fname, "%s-signature.txt", prefix);
    x->sig = read_rel(dir, fname);
    FMT(fname, "%s-signed-request.txt", prefix);
    x->sreq = read_rel(dir, fname);
}

void cauth_expect_free(struct cauth_expect *x) {
    free(x->creq);
    free(x->sts);
    free(x->sig);
    free(x->sreq);
    memset(x, 0, sizeof(*x));
}

struct s3f__sigv4_config cauth_config(const struct json *ctx, bool normalize) {
    int64_t t = 0;
    CHECK_INT(s3f__time_parse(json_get(ctx, "timestamp"), &t), 0);
    const char *exp = json_get(ctx, "expiration_in_seconds");
    return (struct s3f__sigv4_config){
        .region = json_get(ctx, "region"),
        .service = json_get(ctx, "service"),
        .time = t,
        .normalize_path = normalize,
        .expires_s = exp ? (uint32_t)strtoul(exp, NULL, 10) : 0,
        .add_content_sha256_header = json_true(ctx, "sign_body"),
        .omit_session_token = json_true(ctx, "omit_session_token"),
    };
}

struct s3f__sigv4_credentials cauth_credentials(const struct json *ctx) {
    return (struct s3f__sigv4_credentials){json_get(ctx, "credentials.access_key_id"),
                                           json_get(ctx, "credentials.secret_access_key"),
                                           json_get(ctx, "credentials.token")};
}

void cauth_header_request(struct s3f__buf *b, const struct raw_req *r,
                          const struct s3f__sigv4_signed *out) {
    s3f__buf_appendf(b, "%s %s HTTP/1.1\n%s", r->method, r->target, r->header_text);
    struct s3f__header add[5];
    size_t na = s3f__sigv4_signed_headers(out, add);
    for (size_t i = 0; i < na; i++)
        s3f__buf_appendf(b, "%s:%s\n", add[i].name, add[i].value);
    s3f__buf_appendf(b, "\n%s", r->body);
}

void cauth_query_request(struct s3f__buf *b, const struct raw_req *r, const char *query) {
    s3f__buf_appendf(b, "%s %s?%s HTTP/1.1\n%s\n%s", r->method, r->path, query, r->header_text,
                     r->body);
}

void cauth_case_open(const char *root, const char *name, struct cauth_case *c) {
    memset(c, 0, sizeof(*c));
    FMT(c->dir, "%s/%s", root, name);
    c->ctx_text = read_rel(c->dir, "context.json");
    c->req_text = read_rel(c->dir, "request.txt");
    c->ok = c->ctx_text && c->req_text && json_parse(c->ctx_text, &c->ctx) == 0 &&
            raw_req_parse(c->req_text, &c->r) == 0;
    CHECK(c->ok);
}

void cauth_case_close(struct cauth_case *c) {
    if (c->ok)
        raw_req_free(&c->r);
    free(c->ctx_text);
    free(c->req_text);
    memset(c, 0, sizeof(*c));
}
