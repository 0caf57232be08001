/* S3 XML documents with expat (see xml.h).
 *
 * One small engine drives every parser: it keeps the stack of open element names (namespace
 * prefixes stripped), collects the text of the current element into one capped buffer, and
 * calls the document's start/end handlers with the depth (root = 1). A handler that finds a
 * bad value stops the parser with the first failure. An <Error> root is recognised by the
 * engine for every document type. */
#include "s3/xml.h"

#include <expat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 64

/* expat allocates through the library's malloc/realloc/free rather than its own calls into
 * libc, so what wraps the library's allocator (tests/torture/torture_test.c) wraps expat's. */
static const XML_Memory_Handling_Suite xml_mem = {malloc, realloc, free};

struct xdoc {
    XML_Parser parser;
    const char *what; /* operation, for messages */
    const char *root; /* expected root element */
    const char *root_alt; /* a server's variant of it, also taken (or NULL) */
    int depth;
    char names[S3F__XML_MAX_DEPTH][NAME_MAX_LEN];
    struct s3f__buf text;
    enum s3f_status st; /* first failure */
    char msg[400];
    bool error_root;
    struct s3f_error edoc; /* contents of an <Error> root */
    void (*on_start)(struct xdoc *d, const char *name);
    void (*on_end)(struct xdoc *d, const char *name, const char *text, size_t len);
    void *ctx;
};

static void xfail(struct xdoc *d, enum s3f_status st, const char *fmt, ...) S3F_PRINTF(3, 4);

static void xfail(struct xdoc *d, enum s3f_status st, const char *fmt, ...) {
    if (d->st != S3F_OK)
        return;
    d->st = st;
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    snprintf(d->msg, sizeof(d->msg), "%s response, line %lu: %s", d->what,
             (unsigned long)XML_GetCurrentLineNumber(d->parser), m);
    XML_StopParser(d->parser, XML_FALSE);
}

static const char *parent(const struct xdoc *d) {
    return d->depth >= 2 ? d->names[d->depth - 2] : "";
}

static const char *local_name(const char *name) {
    const char *c = strrchr(name, ':');
    return c ? c + 1 : name;
}

static void XMLCALL on_start_el(void *ud, const XML_Char *qname, const XML_Char **atts) {
    (void)atts;
    struct xdoc *d = ud;
    if (d->st)
        return;
    const char *name = local_name(qname);
    if (d->depth == S3F__XML_MAX_DEPTH) {
        xfail(d, S3F_ERR_BAD_RESPONSE, "elements nested deeper than %d", S3F__XML_MAX_DEPTH);
        return;
    }
    if (strlen(name) >= NAME_MAX_LEN) {
        xfail(d, S3F_ERR_BAD_RESPONSE, "element name longer than %d bytes", NAME_MAX_LEN - 1);
        return;
    }
    if (d->depth == 0) {
        if (strcmp(name, "Error") == 0) {
            d->error_root = true;
        } else if (strcmp(name, d->root) != 0 &&
                   !(d->root_alt && strcmp(name, d->root_alt) == 0)) {
            xfail(d, S3F_ERR_BAD_RESPONSE, "unexpected root element <%s>, expected <%s>", name,
                  d->root);
            return;
        }
    }
    strcpy(d->names[d->depth++], name);
    s3f__buf_reset(&d->text);
    if (!d->error_root && d->on_start)
        d->on_start(d, name);
}

static void error_doc_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    if (d->depth != 2)
        return;
    if (strcmp(name, "Code") == 0)
        s3f__strlcpyn(d->edoc.code, text, len, sizeof(d->edoc.code));
    else if (strcmp(name, "Message") == 0)
        s3f__strlcpyn(d->edoc.message, text, len, sizeof(d->edoc.message));
    else if (strcmp(name, "RequestId") == 0)
        s3f__strlcpyn(d->edoc.request_id, text, len, sizeof(d->edoc.request_id));
    else if (strcmp(name, "HostId") == 0)
        s3f__strlcpyn(d->edoc.host_id, text, len, sizeof(d->edoc.host_id));
}

static void XMLCALL on_end_el(void *ud, const XML_Char *qname) {
    struct xdoc *d = ud;
    if (d->st)
        return;
    const char *name = local_name(qname);
    const char *text = d->text.data ? d->text.data : "";
    if (d->error_root)
        error_doc_end(d, name, text, d->text.len);
    else if (d->on_end)
        d->on_end(d, name, text, d->text.len);
    d->depth--;
    s3f__buf_reset(&d->text);
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len) {
    struct xdoc *d = ud;
    if (d->st || d->depth == 0 || len <= 0)
        return;
    enum s3f_status st = s3f__buf_append(&d->text, s, (size_t)len);
    if (st == S3F_ERR_NO_MEMORY)
        xfail(d, st, "out of memory");
    else if (st)
        xfail(d, S3F_ERR_BAD_RESPONSE, "text of <%s> longer than %d bytes",
              d->names[d->depth - 1], S3F__XML_MAX_TEXT);
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                               const XML_Char *pubid, int has_internal_subset) {
    (void)name, (void)sysid, (void)pubid, (void)has_internal_subset;
    xfail(ud, S3F_ERR_BAD_RESPONSE, "DOCTYPE declarations are not accepted");
}

/* Parse the whole body. Returns the failure (with err filled) or S3F_OK; an <Error> root
 * leaves d->error_root set and d->edoc filled (the caller maps it). */
static enum s3f_status xdoc_run(struct xdoc *d, const char *body, size_t len,
                                struct s3f_error *err) {
    while (body && len && (*body == ' ' || *body == '\t' || *body == '\r' || *body == '\n')) {
        body++; /* S3 may pad before the document while it works (CompleteMultipartUpload) */
        len--;
    }
    if (!body || len == 0)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, NULL, NULL,
                              "%s response: empty body where an XML document was expected",
                              d->what);
    if (len > INT_MAX)
        return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, NULL, NULL,
                              "%s response: XML body too large (%zu bytes)", d->what, len);
    s3f__buf_init(&d->text, S3F__XML_MAX_TEXT);
    d->parser = XML_ParserCreate_MM(NULL, &xml_mem, NULL);
    if (!d->parser)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    XML_SetUserData(d->parser, d);
    XML_SetElementHandler(d->parser, on_start_el, on_end_el);
    XML_SetCharacterDataHandler(d->parser, on_text);
    XML_SetStartDoctypeDeclHandler(d->parser, on_doctype);
    enum XML_Status xs = XML_Parse(d->parser, body, (int)len, XML_TRUE);
    enum s3f_status st = S3F_OK;
    if (d->st) {
        st = s3f__error_set(err, d->st, NULL, NULL, "%s", d->msg);
    } else if (xs != XML_STATUS_OK) {
        enum XML_Error code = XML_GetErrorCode(d->parser);
        if (code == XML_ERROR_NO_MEMORY) {
            st = s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
        } else {
            char where[NAME_MAX_LEN + 16] = "";
            if (d->depth > 0)
                snprintf(where, sizeof(where), " in <%s>", d->names[d->depth - 1]);
            st = s3f__error_set(err, S3F_ERR_BAD_RESPONSE, NULL, NULL,
                                "%s response: malformed XML at line %lu, column %lu%s: %s",
                                d->what, (unsigned long)XML_GetCurrentLineNumber(d->parser),
                                (unsigned long)XML_GetCurrentColumnNumber(d->parser) + 1,
                                where, XML_ErrorString(code));
        }
    }
    XML_ParserFree(d->parser);
    d->parser = NULL;
    s3f__buf_cleanup(&d->text);
    return st;
}

/* Map a parsed <Error> root into err; returns its status. */
static enum s3f_status error_result(struct xdoc *d, struct s3f_error *err) {
    int http = err ? err->http_status : 0;
    enum s3f_status st = s3f__s3_error_status(http, d->edoc.code);
    if (err) {
        s3f__strlcpy(err->code, d->edoc.code, sizeof(err->code));
        s3f__strlcpy(err->request_id, d->edoc.request_id, sizeof(err->request_id));
        s3f__strlcpy(err->host_id, d->edoc.host_id, sizeof(err->host_id));
    }
    return s3f__error_set(err, st, NULL, NULL, "%s", d->edoc.message);
}

/* ---- value helpers ------------------------------------------------------------------------ */
static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void trim(const char **s, size_t *len) {
    while (*len && is_ws((*s)[0]))
        (*s)++, (*len)--;
    while (*len && is_ws((*s)[*len - 1]))
        (*len)--;
}

static bool parse_u64(const char *s, size_t len, uint64_t *out) {
    trim(&s, &len);
    if (len == 0 || len > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

static bool parse_int(const char *s, size_t len, int lo, int hi, int *out) {
    uint64_t v;
    if (!parse_u64(s, len, &v) || v < (uint64_t)lo || v > (uint64_t)hi)
        return false;
    *out = (int)v;
    return true;
}

static bool parse_bool(const char *s, size_t len, int *out) {
    trim(&s, &len);
    if (len == 4 && strncasecmp(s, "true", 4) == 0)
        *out = 1;
    else if (len == 5 && strncasecmp(s, "false", 5) == 0)
        *out = 0;
    else
        return false;
    return true;
}

/* Timestamps are informational: an unparsable one gives 0 ("unknown"). */
static int64_t parse_time(const char *s, size_t len) {
    char buf[64];
    trim(&s, &len);
    if (len >= sizeof(buf))
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    int64_t t = 0;
    return s3f__time_parse(buf, &t) == 0 ? t : 0;
}

/* Replace *dst with a copy of the text. */
static void set_str(struct xdoc *d, char **dst, const char *text, size_t len) {
    char *p = s3f__strndup(text, len);
    if (!p) {
        xfail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return;
    }
    free(*dst);
    *dst = p;
}

/* Copy into a fixed field; a value that does not fit is an error, never truncated. */
static void set_fixed(struct xdoc *d, char *dst, size_t cap, const char *name, const char *text,
                      size_t len) {
    if (len >= cap) {
        xfail(d, S3F_ERR_BAD_RESPONSE, "<%s> is %zu bytes, more than the %zu expected", name,
              len, cap - 1);
        return;
    }
    memcpy(dst, text, len);
    dst[len] = '\0';
}

/* ETags keep their quotes as S3 sends them; an unquoted one (Ceph RGW's CopyObject) is quoted
 * so that every ETag s3flash hands out has one form. An empty ETag stays empty. */
static bool etag_needs_quotes(const char *text, size_t len) {
    return len > 0 && text[0] != '"' && !(len > 2 && text[0] == 'W' && text[1] == '/');
}

static void set_etag_fixed(struct xdoc *d, char *dst, size_t cap, const char *text,
                           size_t len) {
    if (!etag_needs_quotes(text, len)) {
        set_fixed(d, dst, cap, "ETag", text, len);
        return;
    }
    if (len + 2 >= cap) {
        set_fixed(d, dst, cap, "ETag", text, len + 2); /* reports the length */
        return;
    }
    dst[0] = '"';
    memcpy(dst + 1, text, len);
    dst[len + 1] = '"';
    dst[len + 2] = '\0';
}

static void set_etag_str(struct xdoc *d, char **dst, const char *text, size_t len) {
    if (!etag_needs_quotes(text, len)) {
        set_str(d, dst, text, len);
        return;
    }
    char *p = malloc(len + 3);
    if (!p) {
        xfail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return;
    }
    p[0] = '"';
    memcpy(p + 1, text, len);
    p[len + 1] = '"';
    p[len + 2] = '\0';
    free(*dst);
    *dst = p;
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* EncodingType=url: form-encoded ('+' is a space), decoded in place (it only shrinks).
 * False for a bad %XX or a %00 (a key cannot hold NUL). */
static bool url_decode_in_place(char *s) {
    if (!s)
        return true;
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p == '+') {
            *o++ = ' ';
        } else if (*p == '%') {
            int hi = hex_val(p[1]), lo = hi < 0 ? -1 : hex_val(p[2]);
            if (lo < 0 || (hi == 0 && lo == 0))
                return false;
            *o++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return true;
}

/* Room for one more element in `arr` (n used, *cap allocated), within
 * S3F__XML_MAX_ENTRIES: returns the (possibly moved) array, NULL after xfail. */
static void *grow(struct xdoc *d, void *arr, size_t n, size_t *cap, size_t elem,
                  const char *what) {
    if (n >= S3F__XML_MAX_ENTRIES) {
        xfail(d, S3F_ERR_BAD_RESPONSE, "more than %d <%s> entries in one page",
              S3F__XML_MAX_ENTRIES, what);
        return NULL;
    }
    if (n < *cap)
        return arr;
    size_t nc = *cap ? *cap * 2 : 16;
    if (nc > S3F__XML_MAX_ENTRIES)
        nc = S3F__XML_MAX_ENTRIES;
    void *p = realloc(arr, nc * elem);
    if (!p) {
        xfail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    *cap = nc;
    return p;
}

static void bad_value(struct xdoc *d, const char *name, const char *text, size_t len) {
    xfail(d, S3F_ERR_BAD_RESPONSE, "invalid <%s> value \"%.*s\"", name,
          (int)(len > 40 ? 40 : len), text);
}

/* ---- error documents ---------------------------------------------------------------------- */
bool s3f__xml_parse_error(const char *body, size_t len, struct s3f_error *err) {
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "error";
    d.root = "Error";
    if (!body || xdoc_run(&d, body, len, NULL) != S3F_OK || !d.error_root)
        return false;
    if (err) {
        s3f__strlcpy(err->code, d.edoc.code, sizeof(err->code));
        s3f__strlcpy(err->message, d.edoc.message, sizeof(err->message));
        s3f__strlcpy(err->request_id, d.edoc.request_id, sizeof(err->request_id));
        s3f__strlcpy(err->host_id, d.edoc.host_id, sizeof(err->host_id));
    }
    return true;
}

/* ---- ListObjectsV2 ------------------------------------------------------------------------ */
struct list_ctx {
    struct s3f_list_page *page;
    size_t obj_cap, pfx_cap;
    bool truncated_seen, url;
};

static void list_start(struct xdoc *d, const char *name) {
    struct list_ctx *c = d->ctx;
    struct s3f_list_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Contents") == 0) {
        void *a = grow(d, pg->objects, pg->n_objects, &c->obj_cap, sizeof(*pg->objects),
                       "Contents");
        if (!a)
            return;
        pg->objects = a;
        memset(&pg->objects[pg->n_objects++], 0, sizeof(*pg->objects));
    }
}

static void list_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct list_ctx *c = d->ctx;
    struct s3f_list_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!parse_bool(text, len, &pg->is_truncated))
                bad_value(d, name, text, len);
            c->truncated_seen = true;
        } else if (strcmp(name, "NextContinuationToken") == 0) {
            set_str(d, &pg->next_continuation_token, text, len);
        } else if (strcmp(name, "EncodingType") == 0) {
            c->url = len == 3 && strncasecmp(text, "url", 3) == 0;
        } else if (strcmp(name, "Contents") == 0) {
            struct s3f_list_entry *e = &pg->objects[pg->n_objects - 1];
            if (!e->key || !*e->key)
                xfail(d, S3F_ERR_BAD_RESPONSE, "<Contents> without <Key>");
        }
    } else if (d->depth == 3 && strcmp(parent(d), "Contents") == 0) {
        struct s3f_list_entry *e = &pg->objects[pg->n_objects - 1];
        if (strcmp(name, "Key") == 0)
            set_str(d, &e->key, text, len);
        else if (strcmp(name, "Size") == 0) {
            if (!parse_u64(text, len, &e->size))
                bad_value(d, name, text, len);
        } else if (strcmp(name, "LastModified") == 0)
            e->last_modified = parse_time(text, len);
        else if (strcmp(name, "ETag") == 0)
            set_etag_str(d, &e->etag, text, len);
        else if (strcmp(name, "StorageClass") == 0)
            set_str(d, &e->storage_class, text, len);
    } else if (d->depth == 3 && strcmp(parent(d), "CommonPrefixes") == 0 &&
               strcmp(name, "Prefix") == 0) {
        void *a = grow(d, pg->common_prefixes, pg->n_common_prefixes, &c->pfx_cap,
                       sizeof(*pg->common_prefixes), "CommonPrefixes");
        if (!a)
            return;
        pg->common_prefixes = a;
        pg->common_prefixes[pg->n_common_prefixes] = NULL;
        set_str(d, &pg->common_prefixes[pg->n_common_prefixes], text, len);
        if (pg->common_prefixes[pg->n_common_prefixes])
            pg->n_common_prefixes++;
    }
}

void s3f_list_page_free(struct s3f_list_page *page) {
    if (!page)
        return;
    for (size_t i = 0; i < page->n_objects; i++) {
        free(page->objects[i].key);
        free(page->objects[i].etag);
        free(page->objects[i].storage_class);
    }
    free(page->objects);
    for (size_t i = 0; i < page->n_common_prefixes; i++)
        free(page->common_prefixes[i]);
    free(page->common_prefixes);
    free(page->next_continuation_token);
    free(page);
}

static enum s3f_status bad_doc(struct s3f_error *err, const char *what, const char *msg) {
    return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, NULL, NULL, "%s response: %s", what, msg);
}

enum s3f_status s3f__xml_parse_list_objects_v2(const char *body, size_t len,
                                               struct s3f_list_page **out,
                                               struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct list_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "ListObjectsV2";
    d.root = "ListBucketResult";
    d.on_start = list_start;
    d.on_end = list_end;
    d.ctx = &c;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    struct s3f_list_page *pg = c.page;
    if (st)
        goto fail;
    if (d.error_root) {
        st = error_result(&d, err);
        goto fail;
    }
    if (c.url) {
        for (size_t i = 0; i < pg->n_objects; i++)
            if (!url_decode_in_place(pg->objects[i].key)) {
                st = bad_doc(err, d.what, "invalid URL encoding in a <Key>");
                goto fail;
            }
        for (size_t i = 0; i < pg->n_common_prefixes; i++)
            if (!url_decode_in_place(pg->common_prefixes[i])) {
                st = bad_doc(err, d.what, "invalid URL encoding in a <Prefix>");
                goto fail;
            }
    }
    if (pg->is_truncated && (!pg->next_continuation_token || !*pg->next_continuation_token)) {
        st = bad_doc(err, d.what, "IsTruncated is true but NextContinuationToken is missing");
        goto fail;
    }
    if (!pg->is_truncated) {
        free(pg->next_continuation_token);
        pg->next_continuation_token = NULL;
    }
    *out = pg;
    return S3F_OK;
fail:
    s3f_list_page_free(pg);
    return st;
}

/* ---- CreateMultipartUpload ---------------------------------------------------------------- */
static void initiate_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    if (d->depth == 2 && strcmp(name, "UploadId") == 0)
        set_str(d, (char **)d->ctx, text, len);
}

enum s3f_status s3f__xml_parse_initiate_multipart(const char *body, size_t len,
                                                  char **upload_id, struct s3f_error *err) {
    if (!upload_id)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output");
    *upload_id = NULL;
    char *id = NULL;
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "CreateMultipartUpload";
    d.root = "InitiateMultipartUploadResult";
    d.on_end = initiate_end;
    d.ctx = &id;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (!st && d.error_root)
        st = error_result(&d, err);
    else if (!st && (!id || !*id))
        st = bad_doc(err, d.what, "no <UploadId>");
    if (st) {
        free(id);
        return st;
    }
    *upload_id = id;
    return S3F_OK;
}

/* ---- CompleteMultipartUpload / CopyObject --------------------------------------------------- */
struct info_ctx {
    struct s3f_object_info info;
    bool etag_seen;
};

static void info_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct info_ctx *c = d->ctx;
    struct s3f_object_info *in = &c->info;
    if (d->depth != 2)
        return;
    if (strcmp(name, "ETag") == 0) {
        set_etag_fixed(d, in->etag, sizeof(in->etag), text, len);
        c->etag_seen = true;
    } else if (strcmp(name, "LastModified") == 0) {
        in->last_modified = parse_time(text, len);
    } else if (strcmp(name, "ChecksumCRC32C") == 0) {
        set_fixed(d, in->checksum_crc32c, sizeof(in->checksum_crc32c), name, text, len);
    } else if (strcmp(name, "ChecksumCRC32") == 0) {
        set_fixed(d, in->checksum_crc32, sizeof(in->checksum_crc32), name, text, len);
    } else if (strcmp(name, "ChecksumCRC64NVME") == 0) {
        set_fixed(d, in->checksum_crc64nvme, sizeof(in->checksum_crc64nvme), name, text, len);
    } else if (strcmp(name, "ChecksumSHA256") == 0) {
        set_fixed(d, in->checksum_sha256, sizeof(in->checksum_sha256), name, text, len);
    }
}

static enum s3f_status parse_info(const char *what, const char *root, const char *root_alt,
                                  bool etag_required, const char *body, size_t len,
                                  struct s3f_object_info *info, struct s3f_error *err) {
    if (!info)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output info");
    struct info_ctx c;
    memset(&c, 0, sizeof(c));
    c.info = *info;
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = what;
    d.root = root;
    d.root_alt = root_alt;
    d.on_end = info_end;
    d.ctx = &c;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (st)
        return st;
    if (d.error_root)
        return error_result(&d, err);
    if (etag_required && !c.etag_seen)
        return bad_doc(err, what, "no <ETag>");
    *info = c.info;
    return S3F_OK;
}

enum s3f_status s3f__xml_parse_complete_multipart(const char *body, size_t len,
                                                  struct s3f_object_info *info,
                                                  struct s3f_error *err) {
    /* moto 5 names the root CompleteMultipartUploadResponse */
    return parse_info("CompleteMultipartUpload", "CompleteMultipartUploadResult",
                      "CompleteMultipartUploadResponse", false, body, len, info, err);
}

enum s3f_status s3f__xml_parse_copy_object(const char *body, size_t len,
                                           struct s3f_object_info *info,
                                           struct s3f_error *err) {
    return parse_info("CopyObject", "CopyObjectResult", NULL, true, body, len, info, err);
}

enum s3f_status s3f__xml_parse_copy_part(const char *body, size_t len,
                                         struct s3f_object_info *info,
                                         struct s3f_error *err) {
    return parse_info("UploadPartCopy", "CopyPartResult", NULL, true, body, len, info, err);
}

/* ---- ListParts ------------------------------------------------------------------------------ */
struct parts_ctx {
    struct s3f_parts_page *page;
    size_t cap;
    bool next_seen;
};

static void parts_start(struct xdoc *d, const char *name) {
    struct parts_ctx *c = d->ctx;
    struct s3f_parts_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Part") == 0) {
        void *a = grow(d, pg->parts, pg->n_parts, &c->cap, sizeof(*pg->parts), "Part");
        if (!a)
            return;
        pg->parts = a;
        memset(&pg->parts[pg->n_parts++], 0, sizeof(*pg->parts));
    }
}

static void parts_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct parts_ctx *c = d->ctx;
    struct s3f_parts_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!parse_bool(text, len, &pg->is_truncated))
                bad_value(d, name, text, len);
        } else if (strcmp(name, "NextPartNumberMarker") == 0) {
            if (!parse_int(text, len, 0, INT_MAX, &pg->next_part_number_marker))
                bad_value(d, name, text, len);
            c->next_seen = true;
        } else if (strcmp(name, "Part") == 0) {
            if (pg->parts[pg->n_parts - 1].part_number == 0)
                xfail(d, S3F_ERR_BAD_RESPONSE, "<Part> without <PartNumber>");
        }
    } else if (d->depth == 3 && strcmp(parent(d), "Part") == 0) {
        struct s3f_part_info *p = &pg->parts[pg->n_parts - 1];
        if (strcmp(name, "PartNumber") == 0) {
            if (!parse_int(text, len, 1, 10000, &p->part_number))
                bad_value(d, name, text, len);
        } else if (strcmp(name, "Size") == 0) {
            if (!parse_u64(text, len, &p->size))
                bad_value(d, name, text, len);
        } else if (strcmp(name, "ETag") == 0) {
            set_etag_fixed(d, p->etag, sizeof(p->etag), text, len);
        } else if (strcmp(name, "LastModified") == 0) {
            p->last_modified = parse_time(text, len);
        } else if (strncmp(name, "Checksum", 8) == 0 && name[8] && !p->checksum[0] &&
                   strcmp(name, "ChecksumType") != 0) {
            set_fixed(d, p->checksum, sizeof(p->checksum), name, text, len);
            /* SHA-1 / SHA-256 parts are kept but not sent back on completion */
            p->checksum_algorithm = strcmp(name, "ChecksumCRC32C") == 0 ? S3F_CHECKSUM_CRC32C
                                    : strcmp(name, "ChecksumCRC32") == 0 ? S3F_CHECKSUM_CRC32
                                    : strcmp(name, "ChecksumCRC64NVME") == 0
                                        ? S3F_CHECKSUM_CRC64NVME
                                        : S3F_CHECKSUM_NONE;
        }
    }
}

void s3f_parts_page_free(struct s3f_parts_page *page) {
    if (!page)
        return;
    free(page->parts);
    free(page);
}

enum s3f_status s3f__xml_parse_list_parts(const char *body, size_t len,
                                          struct s3f_parts_page **out, struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct parts_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "ListParts";
    d.root = "ListPartsResult";
    d.on_start = parts_start;
    d.on_end = parts_end;
    d.ctx = &c;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (!st && d.error_root)
        st = error_result(&d, err);
    else if (!st && c.page->is_truncated && !c.next_seen)
        st = bad_doc(err, d.what, "IsTruncated is true but NextPartNumberMarker is missing");
    if (st) {
        s3f_parts_page_free(c.page);
        return st;
    }
    *out = c.page;
    return S3F_OK;
}

/* ---- ListMultipartUploads ------------------------------------------------------------------- */
struct uploads_ctx {
    struct s3f_uploads_page *page;
    size_t cap;
    bool url;
};

static void uploads_start(struct xdoc *d, const char *name) {
    struct uploads_ctx *c = d->ctx;
    struct s3f_uploads_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Upload") == 0) {
        void *a = grow(d, pg->uploads, pg->n_uploads, &c->cap, sizeof(*pg->uploads),
                       "Upload");
        if (!a)
            return;
        pg->uploads = a;
        memset(&pg->uploads[pg->n_uploads++], 0, sizeof(*pg->uploads));
    }
}

static void uploads_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct uploads_ctx *c = d->ctx;
    struct s3f_uploads_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!parse_bool(text, len, &pg->is_truncated))
                bad_value(d, name, text, len);
        } else if (strcmp(name, "NextKeyMarker") == 0) {
            if (len)
                set_str(d, &pg->next_key_marker, text, len);
        } else if (strcmp(name, "NextUploadIdMarker") == 0) {
            if (len)
                set_str(d, &pg->next_upload_id_marker, text, len);
        } else if (strcmp(name, "EncodingType") == 0) {
            c->url = len == 3 && strncasecmp(text, "url", 3) == 0;
        } else if (strcmp(name, "Upload") == 0) {
            struct s3f_upload_entry *u = &pg->uploads[pg->n_uploads - 1];
            if (!u->key || !*u->key || !u->upload_id || !*u->upload_id)
                xfail(d, S3F_ERR_BAD_RESPONSE, "<Upload> without <Key> or <UploadId>");
        }
    } else if (d->depth == 3 && strcmp(parent(d), "Upload") == 0) {
        struct s3f_upload_entry *u = &pg->uploads[pg->n_uploads - 1];
        if (strcmp(name, "Key") == 0)
            set_str(d, &u->key, text, len);
        else if (strcmp(name, "UploadId") == 0)
            set_str(d, &u->upload_id, text, len);
        else if (strcmp(name, "Initiated") == 0)
            u->initiated = parse_time(text, len);
    }
}

void s3f_uploads_page_free(struct s3f_uploads_page *page) {
    if (!page)
        return;
    for (size_t i = 0; i < page->n_uploads; i++) {
        free(page->uploads[i].key);
        free(page->uploads[i].upload_id);
    }
    free(page->uploads);
    free(page->next_key_marker);
    free(page->next_upload_id_marker);
    free(page);
}

enum s3f_status s3f__xml_parse_list_multipart_uploads(const char *body, size_t len,
                                                      struct s3f_uploads_page **out,
                                                      struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct uploads_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "ListMultipartUploads";
    d.root = "ListMultipartUploadsResult";
    d.on_start = uploads_start;
    d.on_end = uploads_end;
    d.ctx = &c;
    struct s3f_uploads_page *pg = c.page;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (st)
        goto fail;
    if (d.error_root) {
        st = error_result(&d, err);
        goto fail;
    }
    if (c.url) {
        bool ok = url_decode_in_place(pg->next_key_marker);
        for (size_t i = 0; ok && i < pg->n_uploads; i++)
            ok = url_decode_in_place(pg->uploads[i].key);
        if (!ok) {
            st = bad_doc(err, d.what, "invalid URL encoding in a <Key>");
            goto fail;
        }
    }
    if (pg->is_truncated && !pg->next_key_marker) {
        st = bad_doc(err, d.what, "IsTruncated is true but NextKeyMarker is missing");
        goto fail;
    }
    *out = pg;
    return S3F_OK;
fail:
    s3f_uploads_page_free(pg);
    return st;
}

/* ---- ListBuckets -------------------------------------------------------------------------- */
struct buckets_ctx {
    struct s3f_bucket_list *list;
    size_t cap;
};

static void buckets_start(struct xdoc *d, const char *name) {
    struct buckets_ctx *c = d->ctx;
    struct s3f_bucket_list *l = c->list;
    if (d->depth == 3 && strcmp(name, "Bucket") == 0 && strcmp(parent(d), "Buckets") == 0) {
        void *a = grow(d, l->buckets, l->n_buckets, &c->cap, sizeof(*l->buckets), "Bucket");
        if (!a)
            return;
        l->buckets = a;
        memset(&l->buckets[l->n_buckets++], 0, sizeof(*l->buckets));
    }
}

static void buckets_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct buckets_ctx *c = d->ctx;
    struct s3f_bucket_list *l = c->list;
    if (d->depth == 3 && strcmp(name, "Bucket") == 0 && strcmp(parent(d), "Buckets") == 0) {
        const struct s3f_bucket_entry *b = &l->buckets[l->n_buckets - 1];
        if (!b->name || !*b->name)
            xfail(d, S3F_ERR_BAD_RESPONSE, "<Bucket> without <Name>");
    } else if (d->depth == 4 && strcmp(parent(d), "Bucket") == 0 && l->n_buckets) {
        struct s3f_bucket_entry *b = &l->buckets[l->n_buckets - 1];
        if (strcmp(name, "Name") == 0)
            set_str(d, &b->name, text, len);
        else if (strcmp(name, "CreationDate") == 0)
            b->creation_date = parse_time(text, len);
    }
}

void s3f_bucket_list_free(struct s3f_bucket_list *list) {
    if (!list)
        return;
    for (size_t i = 0; i < list->n_buckets; i++)
        free(list->buckets[i].name);
    free(list->buckets);
    free(list);
}

enum s3f_status s3f__xml_parse_list_buckets(const char *body, size_t len,
                                            struct s3f_bucket_list **out,
                                            struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output list");
    *out = NULL;
    struct buckets_ctx c = {0};
    c.list = calloc(1, sizeof(*c.list));
    if (!c.list)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "ListBuckets";
    d.root = "ListAllMyBucketsResult";
    d.on_start = buckets_start;
    d.on_end = buckets_end;
    d.ctx = &c;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (st == S3F_OK && d.error_root)
        st = error_result(&d, err);
    if (st) {
        s3f_bucket_list_free(c.list);
        return st;
    }
    *out = c.list;
    return S3F_OK;
}

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
            xfail(d, S3F_ERR_BAD_RESPONSE, "more than %d entries", S3F__XML_MAX_ENTRIES);
            return;
        }
        c->n_deleted += del;
        c->n_errors += er;
    } else if (d->depth == 3 && strcmp(parent(d), "Error") == 0 && c->n_errors == 0) {
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
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "DeleteObjects";
    d.root = "DeleteResult";
    d.on_end = delete_end;
    d.ctx = &c;
    enum s3f_status st = xdoc_run(&d, body, len, err);
    if (st)
        return st;
    if (d.error_root)
        return error_result(&d, err);
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
