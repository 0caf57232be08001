/* S3 XML documents with expat (see xml.h).
 *
 * One small engine drives every parser: it keeps the stack of open element names (namespace
 * prefixes stripped), collects the text of the current element into one capped buffer, and
 * calls the document's start/end handlers with the depth (root = 1). A handler that finds a
 * bad value stops the parser with the first failure. An <Error> root is recognised by the
 * engine for every document type.
 *
 * This file: that engine, its value helpers (xml_internal.h), error documents and the
 * single-result documents (CreateMultipartUpload, CompleteMultipartUpload, CopyObject,
 * UploadPartCopy). The listings are in xml_list.c, DeleteObjects in xml_delete.c. */
#include "s3/xml_internal.h"

#include <expat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* expat allocates through the library's malloc/realloc/free rather than its own calls into
 * libc, so what wraps the library's allocator (tests/torture/torture_test.c) wraps expat's. */
static const XML_Memory_Handling_Suite xml_mem = {malloc, realloc, free};

void s3f__xml_fail(struct xdoc *d, enum s3f_status st, const char *fmt, ...) {
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

const char *s3f__xml_parent(const struct xdoc *d) {
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
        s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "elements nested deeper than %d",
                      S3F__XML_MAX_DEPTH);
        return;
    }
    if (strlen(name) >= NAME_MAX_LEN) {
        s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "element name longer than %d bytes",
                      NAME_MAX_LEN - 1);
        return;
    }
    if (d->depth == 0) {
        if (strcmp(name, "Error") == 0) {
            d->error_root = true;
        } else if (strcmp(name, d->root) != 0 &&
                   !(d->root_alt && strcmp(name, d->root_alt) == 0)) {
            s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "unexpected root element <%s>, expected <%s>",
                          name, d->root);
            return;
        }
    }
    s3f__strlcpy(d->names[d->depth++], name, sizeof(d->names[0]));
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
        s3f__xml_fail(d, st, "out of memory");
    else if (st)
        s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "text of <%s> longer than %d bytes",
                      d->names[d->depth - 1], S3F__XML_MAX_TEXT);
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                               const XML_Char *pubid, int has_internal_subset) {
    (void)name, (void)sysid, (void)pubid, (void)has_internal_subset;
    s3f__xml_fail(ud, S3F_ERR_BAD_RESPONSE, "DOCTYPE declarations are not accepted");
}

/* Parse the whole body. Returns the failure (with err filled) or S3F_OK; an <Error> root
 * leaves d->error_root set and d->edoc filled (the caller maps it). */
enum s3f_status s3f__xml_run(struct xdoc *d, const char *body, size_t len,
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
enum s3f_status s3f__xml_error_result(struct xdoc *d, struct s3f_error *err) {
    int http = err ? err->http_status : 0;
    enum s3f_status st = s3f__s3_error_status(http, d->edoc.code);
    if (err) {
        s3f__strlcpy(err->code, d->edoc.code, sizeof(err->code));
        s3f__strlcpy(err->request_id, d->edoc.request_id, sizeof(err->request_id));
        s3f__strlcpy(err->host_id, d->edoc.host_id, sizeof(err->host_id));
    }
    return s3f__error_set(err, st, NULL, NULL, "%s", d->edoc.message);
}

enum s3f_status s3f__xml_parse(struct xdoc *d, const char *body, size_t len,
                               struct s3f_error *err) {
    enum s3f_status st = s3f__xml_run(d, body, len, err);
    if (st)
        return st;
    return d->error_root ? s3f__xml_error_result(d, err) : S3F_OK;
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

bool s3f__xml_u64(const char *s, size_t len, uint64_t *out) {
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

bool s3f__xml_int(const char *s, size_t len, int lo, int hi, int *out) {
    uint64_t v;
    if (!s3f__xml_u64(s, len, &v) || v < (uint64_t)lo || v > (uint64_t)hi)
        return false;
    *out = (int)v;
    return true;
}

bool s3f__xml_bool(const char *s, size_t len, int *out) {
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
int64_t s3f__xml_time(const char *s, size_t len) {
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
void s3f__xml_set_str(struct xdoc *d, char **dst, const char *text, size_t len) {
    char *p = s3f__strndup(text, len);
    if (!p) {
        s3f__xml_fail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return;
    }
    free(*dst);
    *dst = p;
}

/* Copy into a fixed field; a value that does not fit is an error, never truncated. */
void s3f__xml_set_fixed(struct xdoc *d, char *dst, size_t cap, const char *name, const char *text,
                      size_t len) {
    if (len >= cap) {
        s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "<%s> is %zu bytes, more than the %zu expected",
                      name, len, cap - 1);
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

void s3f__xml_set_etag_fixed(struct xdoc *d, char *dst, size_t cap, const char *text,
                           size_t len) {
    if (!etag_needs_quotes(text, len)) {
        s3f__xml_set_fixed(d, dst, cap, "ETag", text, len);
        return;
    }
    if (len + 2 >= cap) {
        s3f__xml_set_fixed(d, dst, cap, "ETag", text, len + 2); /* reports the length */
        return;
    }
    dst[0] = '"';
    memcpy(dst + 1, text, len);
    dst[len + 1] = '"';
    dst[len + 2] = '\0';
}

void s3f__xml_set_etag_str(struct xdoc *d, char **dst, const char *text, size_t len) {
    if (!etag_needs_quotes(text, len)) {
        s3f__xml_set_str(d, dst, text, len);
        return;
    }
    char *p = malloc(len + 3);
    if (!p) {
        s3f__xml_fail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return;
    }
    p[0] = '"';
    memcpy(p + 1, text, len);
    p[len + 1] = '"';
    p[len + 2] = '\0';
    free(*dst);
    *dst = p;
}

/* EncodingType=url: form-encoded ('+' is a space), decoded in place (it only shrinks).
 * False for a bad %XX or a %00 (a key cannot hold NUL). */
bool s3f__xml_url_decode_in_place(char *s) {
    if (!s)
        return true;
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p == '+') {
            *o++ = ' ';
        } else if (*p == '%') {
            int hi = s3f__hex_digit(p[1]), lo = hi < 0 ? -1 : s3f__hex_digit(p[2]);
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
void *s3f__xml_grow(struct xdoc *d, void *arr, size_t n, size_t *cap, size_t elem,
                  const char *what) {
    if (n >= S3F__XML_MAX_ENTRIES) {
        s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "more than %d <%s> entries in one page",
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
        s3f__xml_fail(d, S3F_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    *cap = nc;
    return p;
}

void s3f__xml_bad_value(struct xdoc *d, const char *name, const char *text, size_t len) {
    s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "invalid <%s> value \"%.*s\"", name,
                  (int)(len > 40 ? 40 : len), text);
}

/* ---- error documents ---------------------------------------------------------------------- */
bool s3f__xml_parse_error(const char *body, size_t len, struct s3f_error *err) {
    struct xdoc d;
    memset(&d, 0, sizeof(d));
    d.what = "error";
    d.root = "Error";
    if (!body || s3f__xml_run(&d, body, len, NULL) != S3F_OK || !d.error_root)
        return false;
    if (err) {
        s3f__strlcpy(err->code, d.edoc.code, sizeof(err->code));
        s3f__strlcpy(err->message, d.edoc.message, sizeof(err->message));
        s3f__strlcpy(err->request_id, d.edoc.request_id, sizeof(err->request_id));
        s3f__strlcpy(err->host_id, d.edoc.host_id, sizeof(err->host_id));
    }
    return true;
}

enum s3f_status s3f__xml_bad_doc(struct s3f_error *err, const char *what, const char *msg) {
    return s3f__error_set(err, S3F_ERR_BAD_RESPONSE, NULL, NULL, "%s response: %s", what, msg);
}

/* ---- CreateMultipartUpload ---------------------------------------------------------------- */
static void initiate_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    if (d->depth == 2 && strcmp(name, "UploadId") == 0)
        s3f__xml_set_str(d, (char **)d->ctx, text, len);
}

enum s3f_status s3f__xml_parse_initiate_multipart(const char *body, size_t len,
                                                  char **upload_id, struct s3f_error *err) {
    if (!upload_id)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output");
    *upload_id = NULL;
    char *id = NULL;
    struct xdoc d = {.what = "CreateMultipartUpload",
                     .root = "InitiateMultipartUploadResult",
                     .on_end = initiate_end,
                     .ctx = &id};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (!st && (!id || !*id))
        st = s3f__xml_bad_doc(err, d.what, "no <UploadId>");
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
        s3f__xml_set_etag_fixed(d, in->etag, sizeof(in->etag), text, len);
        c->etag_seen = true;
    } else if (strcmp(name, "LastModified") == 0) {
        in->last_modified = s3f__xml_time(text, len);
    } else if (strcmp(name, "ChecksumCRC32C") == 0) {
        s3f__xml_set_fixed(d, in->checksum_crc32c, sizeof(in->checksum_crc32c), name, text, len);
    } else if (strcmp(name, "ChecksumCRC32") == 0) {
        s3f__xml_set_fixed(d, in->checksum_crc32, sizeof(in->checksum_crc32), name, text, len);
    } else if (strcmp(name, "ChecksumCRC64NVME") == 0) {
        s3f__xml_set_fixed(d, in->checksum_crc64nvme, sizeof(in->checksum_crc64nvme), name, text,
                           len);
    } else if (strcmp(name, "ChecksumSHA256") == 0) {
        s3f__xml_set_fixed(d, in->checksum_sha256, sizeof(in->checksum_sha256), name, text, len);
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
    struct xdoc d = {.what = what, .root = root, .root_alt = root_alt, .on_end = info_end,
                     .ctx = &c};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (st)
        return st;
    if (etag_required && !c.etag_seen)
        return s3f__xml_bad_doc(err, what, "no <ETag>");
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
