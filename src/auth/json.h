/* A small reader for flat JSON objects, as credential endpoints return them:
 * {"AccessKeyId": "...", "Expiration": "...", "Version": 1}. Members whose value is a string,
 * number, true, false or null are kept; nested objects and arrays are validated and skipped
 * (recorded with type S3F__JSON_OTHER and no value). Input is never copied into error
 * messages, since it may hold secrets. */
#ifndef S3F_AUTH_JSON_H
#define S3F_AUTH_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

enum s3f__json_type {
    S3F__JSON_STRING,
    S3F__JSON_NUMBER,
    S3F__JSON_TRUE,
    S3F__JSON_FALSE,
    S3F__JSON_NULL,
    S3F__JSON_OTHER, /* a nested object or array (skipped) */
};

struct s3f__json_member {
    char *key;                /* decoded, NUL-terminated */
    enum s3f__json_type type;
    char *value;              /* STRING: decoded UTF-8; NUMBER: its text; else NULL */
    size_t value_len;         /* bytes in value (a string may contain "\u0000") */
};

struct s3f__json_object {
    struct s3f__json_member *members;
    size_t n;
};

/* Parse `len` bytes holding one JSON object (whitespace around it allowed, nothing else).
 * On success fills *out (free with s3f__json_cleanup) and returns S3F_OK. Errors:
 * S3F_ERR_BAD_RESPONSE with "offset N: what was expected" in errmsg (never the input),
 * S3F_ERR_NO_MEMORY. Nesting deeper than 32 levels and more than 1024 members are rejected.
 * On failure *out is left empty (nothing to free). */
enum s3f_status s3f__json_parse_object(const char *text, size_t len, struct s3f__json_object *out,
                                       char *errmsg, size_t errmsg_len);

/* The first member named `key` (exact match), or NULL. */
const struct s3f__json_member *s3f__json_get(const struct s3f__json_object *o, const char *key);
/* The value of string member `key`; NULL if absent or not a string. */
const char *s3f__json_get_string(const struct s3f__json_object *o, const char *key);
/* Integer value of number member `key`: 0 and *out set if it is an integer in range, -1
 * otherwise (absent, not a number, fractional, overflow). */
int s3f__json_get_int64(const struct s3f__json_object *o, const char *key, int64_t *out);

/* Free the members, wiping the values first (they may be secrets). Safe on an empty object. */
void s3f__json_cleanup(struct s3f__json_object *o);

#endif
