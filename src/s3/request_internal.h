/* Shared by the executor (request.c) and the response side of its attempts
 * (request_response.c); private to them. */
#ifndef S3F_S3_REQUEST_INTERNAL_H
#define S3F_S3_REQUEST_INTERNAL_H

#include <stdbool.h>

#include "s3/client.h"

#define ERROR_BODY_MAX (64u << 10) /* bytes of a non-2xx body kept */

/* The attempt's body callback (an s3f__http_body_fn, `ud` the attempt): a 2xx body to the
 * sink (checked first, placed by object offset) or to body_out, an error body to err_body. */
int s3f__s3_attempt_on_body(void *ud, const char *data, size_t len);
/* The same for a response of HTTP status `code` (exposed for tests/fuzz/fuzz_response.c):
 * 0 to go on, 1 to stop the transfer (a->bad, a->rest_skipped or a->sink_failed say why). */
int s3f__s3_attempt_body(struct s3f__s3_attempt *a, int code, const char *data, size_t len);
/* At the end of a 2xx response to a GET with a sink: 0 when every byte asked for (within
 * the object) reached the sink; 1 when the answer was consistent but ended early (a short
 * 206): the rest is to be asked for; -1 with *e filled when the response is wrong. */
int s3f__s3_check_complete(struct s3f__s3_attempt *a, int code, struct s3f_error *e,
                           bool *retryable);
/* Does the response's ETag `got` differ from the pinned `pin` (an If-Match value)? A list
 * or "*" pins nothing to compare with. */
bool s3f__s3_etag_differs(const char *pin, const char *got);

#endif
