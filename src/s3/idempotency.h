/* Idempotency classes of the S3 operations: one table (idempotency.c), consulted by the
 * executor for every request, so that an operation added without a class fails its first
 * request (and the unit test, which checks every operation the ops layer builds) instead of
 * being retried as if a repeat were harmless.
 *
 * What a class means when an attempt failed after its request may have reached the server
 * (a transport failure once the request was sent in full, or a 5xx), so the server may have
 * acted and only the response was lost:
 *   IDEMPOTENT  a repeat has the effect of one request (GET, HEAD, PUT of the same bytes,
 *               UploadPart, DELETE, Abort, lists): retried, nothing else.
 *   RECONCILE   a repeat differs from one request: CreateMultipartUpload makes a second
 *               upload (the first is orphaned), a repeated CompleteMultipartUpload may answer
 *               NoSuchUpload (AWS) or 200 (Ceph RGW, moto). Retried, and the request's
 *               `lost_response` tells the caller to reconcile (xfer/upload.c: HEAD and
 *               compare; ListMultipartUploads and abort the orphans).
 *   CONDITIONAL a write with a precondition (If-None-Match: *) that the first attempt may
 *               have used up: a 412 after a lost response is the caller's to check (HEAD and
 *               compare: s3f_put_object).
 * Thread-safety: the table is constant. */
#ifndef S3F_S3_IDEMPOTENCY_H
#define S3F_S3_IDEMPOTENCY_H

#include <stddef.h>

struct s3f__s3_request;

enum s3f__idem_class {
    S3F__IDEM_UNKNOWN = 0, /* not in the table: the executor refuses the request */
    S3F__IDEM_IDEMPOTENT,
    S3F__IDEM_RECONCILE,
    S3F__IDEM_CONDITIONAL,
};

/* The class of an operation name ("PutObject"); UNKNOWN for a name not in the table. */
enum s3f__idem_class s3f__idempotency(const char *operation);

/* The class of one request: its operation's, except that an IDEMPOTENT request carrying
 * If-None-Match is CONDITIONAL. */
enum s3f__idem_class s3f__idempotency_of(const struct s3f__s3_request *r);

/* "IDEMPOTENT", "RECONCILE", "CONDITIONAL" or "UNKNOWN". */
const char *s3f__idem_class_name(enum s3f__idem_class c);

/* The table itself (for tests): entry i of n. NULL past the end. */
const char *s3f__idempotency_entry(size_t i, enum s3f__idem_class *cls);

#endif
