/* The idempotency class of every S3 operation (s3/idempotency.h says what each means). */
#include <string.h>
#include <strings.h>

#include "s3/client.h"
#include "s3/idempotency.h"

static const struct {
    const char *operation;
    enum s3f__idem_class cls;
} table[] = {
    {"AbortMultipartUpload", S3F__IDEM_IDEMPOTENT},    /* a repeat answers NoSuchUpload */
    {"CompleteMultipartUpload", S3F__IDEM_RECONCILE},  /* repeat: 200 or NoSuchUpload */
    {"CopyObject", S3F__IDEM_IDEMPOTENT},
    {"CreateBucket", S3F__IDEM_IDEMPOTENT},            /* BucketAlreadyOwnedByYou is OK */
    {"CreateMultipartUpload", S3F__IDEM_RECONCILE},    /* repeat: a second upload */
    {"DeleteBucket", S3F__IDEM_IDEMPOTENT},
    {"DeleteObject", S3F__IDEM_IDEMPOTENT},
    {"DeleteObjects", S3F__IDEM_IDEMPOTENT},
    {"GetObject", S3F__IDEM_IDEMPOTENT},
    {"HeadObject", S3F__IDEM_IDEMPOTENT},
    {"ListBuckets", S3F__IDEM_IDEMPOTENT},
    {"ListMultipartUploads", S3F__IDEM_IDEMPOTENT},
    {"ListObjectsV2", S3F__IDEM_IDEMPOTENT},
    {"ListParts", S3F__IDEM_IDEMPOTENT},
    {"PutObject", S3F__IDEM_IDEMPOTENT},               /* CONDITIONAL with If-None-Match,
                                                        * RECONCILE as an append */
    {"RenameObject", S3F__IDEM_RECONCILE},             /* repeat: NoSuchKey (source gone) */
    {"UploadPart", S3F__IDEM_IDEMPOTENT},
    {"UploadPartCopy", S3F__IDEM_IDEMPOTENT},
};

enum s3f__idem_class s3f__idempotency(const char *operation) {
    if (!operation)
        return S3F__IDEM_UNKNOWN;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(table[i].operation, operation) == 0)
            return table[i].cls;
    return S3F__IDEM_UNKNOWN;
}

enum s3f__idem_class s3f__idempotency_of(const struct s3f__s3_request *r) {
    enum s3f__idem_class c = s3f__idempotency(r->operation);
    if (c == S3F__IDEM_IDEMPOTENT)
        for (size_t i = 0; i < r->n_headers; i++) {
            if (strcasecmp(r->headers[i].name, "x-amz-write-offset-bytes") == 0)
                return S3F__IDEM_RECONCILE; /* an append: a repeat finds the object grown */
            if (strcasecmp(r->headers[i].name, "if-none-match") == 0)
                return S3F__IDEM_CONDITIONAL;
        }
    return c;
}

const char *s3f__idem_class_name(enum s3f__idem_class c) {
    switch (c) {
    case S3F__IDEM_IDEMPOTENT: return "IDEMPOTENT";
    case S3F__IDEM_RECONCILE: return "RECONCILE";
    case S3F__IDEM_CONDITIONAL: return "CONDITIONAL";
    default: return "UNKNOWN";
    }
}

const char *s3f__idempotency_entry(size_t i, enum s3f__idem_class *cls) {
    if (i >= sizeof(table) / sizeof(table[0]))
        return NULL;
    if (cls)
        *cls = table[i].cls;
    return table[i].operation;
}
