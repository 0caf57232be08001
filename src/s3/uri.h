/* s3:// URI parsing (the public s3f_uri_parse, and a length-taking variant). */
#ifndef S3F_S3_URI_H
#define S3F_S3_URI_H

#include <stddef.h>

#include "s3flash/s3flash.h"

/* s3f_uri_parse for a URI of `len` bytes that need not be NUL-terminated (front ends whose
 * strings may hold NUL bytes: such a URI is refused). Same outputs and errors as
 * s3f_uri_parse: S3F_ERR_INVALID_URI naming the URI and the reason (missing or other scheme,
 * empty or invalid bucket name, key over 1024 bytes or not UTF-8, NUL byte);
 * S3F_ERR_INVALID_ARGUMENT when an output buffer is NULL or too small. On failure the outputs
 * hold "". */
enum s3f_status s3f__uri_parse_len(const char *uri, size_t len, char *bucket, size_t bucket_len,
                                   char *key, size_t key_len, struct s3f_error *err);

#endif
