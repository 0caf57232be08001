/* The XML engine's internals, shared by the parsers of src/s3/xml*.c (private to them).
 * The engine (xml.c) keeps the stack of open element names and the current element's text
 * and calls a document's on_start/on_end handlers; the helpers below read values into the
 * results and stop the parser at the first bad one (s3f__xml_fail). */
#ifndef S3F_S3_XML_INTERNAL_H
#define S3F_S3_XML_INTERNAL_H

#include <expat.h>
#include <stdbool.h>
#include <stdint.h>

#include "s3/xml.h"

#define NAME_MAX_LEN 64

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

/* Stop the parser with the first failure (later ones are ignored). */
void s3f__xml_fail(struct xdoc *d, enum s3f_status st, const char *fmt, ...) S3F_PRINTF(3, 4);
/* Name of the parent of the element being handled ("" at the root). */
const char *s3f__xml_parent(const struct xdoc *d);
/* Parse the whole body with d's handlers; err as xml.h says. */
enum s3f_status s3f__xml_run(struct xdoc *d, const char *body, size_t len, struct s3f_error *err);
/* Map a parsed <Error> root into err; returns its status. */
enum s3f_status s3f__xml_error_result(struct xdoc *d, struct s3f_error *err);
/* s3f__xml_run, then an <Error> root mapped into err: S3F_OK only for a document with d's root
 * (its handlers having run); what every result parser does first. */
enum s3f_status s3f__xml_parse(struct xdoc *d, const char *body, size_t len,
                               struct s3f_error *err);
/* S3F_ERR_BAD_RESPONSE "<what> response: <msg>". */
enum s3f_status s3f__xml_bad_doc(struct s3f_error *err, const char *what, const char *msg);

/* Values (surrounding white space ignored); false for a malformed one. */
bool s3f__xml_u64(const char *s, size_t len, uint64_t *out);
bool s3f__xml_int(const char *s, size_t len, int lo, int hi, int *out);
bool s3f__xml_bool(const char *s, size_t len, int *out);
/* ISO-8601 time as Unix seconds, or -1. */
int64_t s3f__xml_time(const char *s, size_t len);
/* Store text into the result (a malloc'ed string, a fixed field of cap bytes, an ETag
 * quoted when it came without quotes); failures stop the parser. */
void s3f__xml_set_str(struct xdoc *d, char **dst, const char *text, size_t len);
void s3f__xml_set_fixed(struct xdoc *d, char *dst, size_t cap, const char *name, const char *text,
                        size_t len);
void s3f__xml_set_etag_fixed(struct xdoc *d, char *dst, size_t cap, const char *text,
                             size_t len);
void s3f__xml_set_etag_str(struct xdoc *d, char **dst, const char *text, size_t len);
/* Percent-decode s in place; false if malformed. */
bool s3f__xml_url_decode_in_place(char *s);
/* Room for entry n of an array of elem-sized entries (capacity *cap, grown), or NULL with
 * the parser stopped (out of memory, more than S3F__XML_MAX_ENTRIES). */
void *s3f__xml_grow(struct xdoc *d, void *arr, size_t n, size_t *cap, size_t elem,
                    const char *what);
/* Stop the parser: element `name` has a value it cannot take. */
void s3f__xml_bad_value(struct xdoc *d, const char *name, const char *text, size_t len);

#endif
