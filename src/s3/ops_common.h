/* Helpers shared by the files of the S3 operations (src/s3/ops*.c), private to them. */
#ifndef S3F_S3_OPS_COMMON_H
#define S3F_S3_OPS_COMMON_H

#include "core/checksum.h"
#include "s3/client.h"
#include "s3/endpoint.h"
#include "s3/ops_internal.h"
#include "s3/xml.h"

#define XML_BODY_MAX S3F__XML_BODY_MAX

/* Zero *r and set its operation, method, bucket and key. */
void s3f__op_request_init(struct s3f__s3_request *r, const char *op, const char *method,
                          const char *bucket, const char *key);
/* Append "&name=value" (value percent-encoded) to a query string under construction. */
enum s3f_status s3f__op_query_add(struct s3f__buf *q, const char *name, const char *value);
/* "partNumber=N&uploadId=ID" (partNumber left out when part_number is 0). */
enum s3f_status s3f__op_upload_query(struct s3f__buf *q, const char *upload_id, int part_number);
/* S3F_ERR_NO_MEMORY for operation `op` into err. */
enum s3f_status s3f__op_oom(struct s3f_error *err, const char *op);
/* A known checksum algorithm for a public option, or S3F_ERR_INVALID_ARGUMENT. */
enum s3f_status s3f__op_checksum_start(enum s3f_checksum_algorithm alg,
                                       struct s3f__checksum *ck, const char *op,
                                       struct s3f_error *err);

#endif
