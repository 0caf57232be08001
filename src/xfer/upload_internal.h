/* The multipart upload session shared by the upload sources (xfer/upload.c; see there and
 * docs/TRANSFER.md): its states, parts and requests, and the functions the sources call.
 *
 *   upload.c        the session: states, the send queue, data requests, life cycle; it
 *                   reaches its source only through struct up_source
 *   upload_ctl.c    its control requests: Create, the copy's VERIFY HEAD, Complete and its
 *                   reconciliation, HEAD, Abort, and the orphan check after a lost Create
 *   upload_known.c  sources of known size: memory regions, a file; server-side copies
 *                   (three adapters, and the part plan they share)
 *   writer.c        the streaming writer: parts filled from pool chunks as bytes come
 *                   (one adapter)
 * Private to src/xfer. */
#ifndef S3F_XFER_UPLOAD_INTERNAL_H
#define S3F_XFER_UPLOAD_INTERNAL_H

#include <pthread.h>

#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

enum part_state {
    PART_FILLING,   /* the writer is copying bytes into it */
    PART_PREPARED,  /* bytes and checksum ready; waits for the upload id (or for close) */
    PART_QUEUED,    /* in the send queue, counted by the scheduler */
    PART_SENDING,   /* its request is in flight */
    PART_DONE,      /* uploaded, ETag known */
};

enum up_state {
    UP_RUNNING,     /* parts being prepared and sent (CreateMultipartUpload maybe in flight) */
    UP_VERIFYING,   /* copy: HEAD of the source with If-Match before Complete */
    UP_COMPLETING,  /* CompleteMultipartUpload in flight */
    UP_HEADING,     /* HEAD for the ETag the server did not return with Complete */
    UP_ABORTING,    /* failed; AbortMultipartUpload in flight */
    UP_DONE,        /* the object exists */
    UP_FAILED,      /* nothing was created */
};

/* Why a HEAD follows CompleteMultipartUpload (UP_HEADING): one reason at a time. */
enum up_head_why {
    HEAD_WHY_ETAG,       /* Complete answered without an ETag (Ceph RGW): HEAD shows it */
    HEAD_WHY_UNPARSED,   /* Complete said 200 with a body we could not read: the HEAD's
                          * multipart ETag says whether the object is ours */
    HEAD_WHY_RECONCILE,  /* Complete failed after a lost response: the object decides */
};

enum ctl_kind { CTL_NONE, CTL_CREATE, CTL_VERIFY, CTL_COMPLETE, CTL_HEAD, CTL_ABORT };

struct upart {
    uint64_t offset;
    uint64_t size;
    uint64_t planned;            /* writer: size at which the part is full */
    struct s3f__checksum ck;
    void **chunks;               /* writer: pool chunks holding the bytes */
    size_t n_chunks, cap_chunks;
    enum part_state state;
    int32_t qnext;               /* next part in the send queue, -1 for none */
    char etag[128];
};

struct upload {
    struct s3f_client *c;
    struct s3f__xfer_shared *x;
    char *bucket, *key, *content_type;
    char resource[600];
    enum s3f_checksum_algorithm alg;      /* never DEFAULT */
    const struct up_source *source;       /* where the bytes come from (set once) */
    const struct s3f_iovec *iov;          /* memory regions */
    size_t n_iov;
    uint64_t *iov_end;                    /* end offset of each region in the object */
    int fd;                               /* a file */
    char *src_bucket, *src_key;           /* a copy: the source object, */
    char *src_version_id, *src_etag;      /* its version (or NULL) and the pinned ETag */
    uint64_t single_max;                  /* a copy: up to this size, one CopyObject */
    uint64_t part_size;                   /* known size: the plan; writer: first parts */
    uint64_t part_cap;                    /* writer: largest part */
    s3f_progress_fn progress;
    void *progress_ud;
    pthread_mutex_t progress_lock;        /* progress calls never overlap */
    size_t progress_parts;                /* parts_done as the last progress call saw it */
    uint64_t start_ns;
    size_t cur;                           /* writer: the part being filled */
    uint64_t written;                     /* writer: bytes written (writer thread) */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* ---- guarded by lock ---- */
    enum up_state state;
    bool multipart;                       /* CreateMultipartUpload sent or to be sent */
    bool input_done;                      /* every part is known */
    bool abort_sent;
    bool verified;                        /* copy: the source still had its ETag at the end */
    /* The lifecycle is `state` (set_state checks each step); the booleans above are facts
     * that hold in any combination (a mode, the plan's end, an Abort sent, a copy's source
     * verified), and head_why says why an UP_HEADING state HEADs. */
    enum up_head_why head_why;
    struct s3f_error complete_err;        /* what was wrong with Complete's answer */
    /* CreateMultipartUpload needed a retry after a lost response: the first attempt may
     * have made an upload nobody knows the id of. upload_wait looks for it (see
     * abort_orphans). Times in Unix seconds; server_date from the answer's Date, or 0. */
    bool orphan_check;
    int64_t create_sent_s, create_done_s, create_server_date;
    char *upload_id;
    struct upart *parts;
    size_t n_parts, cap_parts;
    int32_t q_head, q_tail;
    uint32_t outstanding;                 /* requests in flight, data and control */
    uint32_t callbacks;                   /* completions still running */
    size_t parts_done;
    uint64_t bytes_done;
    enum s3f_status status;               /* first failure */
    struct s3f_error err;
    enum ctl_kind ctl_kind;               /* the control request in flight */
    struct s3f__op ctl;
    struct s3f_error ctl_err;
    struct s3f_object_info result;
    struct s3f__sched_entry entry;
};

/* One data request (UploadPart or the single PutObject). */
struct upreq {
    struct s3f__op op;
    struct upload *u;
    size_t part;
    uint64_t off;                         /* object offset of the body */
    void **chunks;                        /* the writer: the part's chunks */
    struct s3f_error err;
    int read_errno;                       /* a file: pread failed (errno), or -1: the
                                           * file ended early (it shrank) */
    uint64_t read_at;                     /* file offset of that read */
    uint64_t start_ns;                    /* submitted (for the bandwidth-delay estimator) */
};

/* One kind of source behind the session, as aws-c-s3 gives each kind of meta request its
 * vtable: what a part's data request sends and what its answer carries. The session
 * (upload.c) never asks which kind it has. The adapters: memory regions, a file and a
 * server-side copy (upload_known.c), the writer's pool chunks (writer.c). */
struct up_source {
    const char *name;
    /* Build the data request of part i into q->op, with its body (u->lock held). Sources
     * of bytes call s3f__up_data_request and point the body at the part's bytes. */
    enum s3f_status (*request)(struct upload *u, struct upreq *q, size_t i);
    /* A data request ended with `st` (u->lock held): the final status, with q->err filled
     * for a failure (NULL: st as it is). */
    enum s3f_status (*done)(struct upload *u, struct upreq *q, enum s3f_status st);
    /* Release what the source holds (NULL: nothing). */
    void (*cleanup)(struct upload *u);
    /* The source may change under the upload: HEAD it before Complete (copies). */
    bool verify_before_complete;
    /* No bytes cross the link (copies): the part's time is no measure of it, so it does
     * not feed the bandwidth-delay estimator. */
    bool server_side;
};

/* What to do once u->lock is released. */
struct actions {
    uint32_t queued;                      /* parts newly queued: tell the scheduler */
    bool submit_ctl;                      /* u->ctl was built: submit it */
};

/* State changes, traced at S3FLASH_LOG=trace with the file and line that made them. */
#define set_state(u, s) s3f__up_set_state_at(u, s, __FILE__, __LINE__)
#define part_set_state(u, i, s) s3f__up_part_set_state_at(u, i, s, __FILE__, __LINE__)

/* upload.c */
void s3f__up_advance(struct upload *u, struct actions *act);
enum s3f_status s3f__up_build_ctl(struct upload *u, enum ctl_kind kind);
void s3f__up_callback_exit(struct upload *u);
/* The data request of part i of a source of bytes (u->lock held): UploadPart, or the single
 * PutObject, with the part's size and checksum; an empty part gets an empty body. The
 * source then points the body at the part's bytes. */
enum s3f_status s3f__up_data_request(struct upload *u, struct upreq *q, size_t i);
/* s3f__up_data_request with a part's body read through `read` (its ud is q) rather than
 * sent from memory: the sources whose bytes are read as they go (a file, pool chunks). */
enum s3f_status s3f__up_read_request(struct upload *u, struct upreq *q, size_t i,
                                     s3f__s3_read_fn read);
void s3f__up_do_actions(struct upload *u, const struct actions *act);
void s3f__up_fail(struct upload *u, enum s3f_status st, const struct s3f_error *e);
enum s3f_status s3f__up_fail_msg(struct upload *u, enum s3f_status st, const char *op,
                                 const char *msg);
void s3f__up_release_chunks(struct upload *u, struct upart *p);
void s3f__up_report_progress(struct upload *u);
void s3f__up_start_ctl(struct upload *u, enum ctl_kind kind, struct actions *act);
void s3f__up_try_queue(struct upload *u, size_t i, struct actions *act);
void s3f__upload_free(struct upload *u);
enum s3f_status s3f__upload_new(struct s3f_client *c, const char *bucket, const char *key,
                                const struct s3f_upload_options *opts, const char *op,
                                struct upload **out, struct s3f_error *err);
enum s3f_status s3f__upload_wait(struct upload *u, struct s3f_object_info *info,
                                 struct s3f_error *err);
void s3f__up_set_state_at(struct upload *u, enum up_state s, const char *file, int line);
void s3f__up_part_set_state_at(struct upload *u, size_t i, enum part_state s, const char *file,
                               int line);

/* upload_ctl.c */
void s3f__up_abort_orphans(struct upload *u);
void s3f__up_ctl_done(struct s3f__s3_request *r, enum s3f_status st, void *ud);

#endif /* S3F_XFER_UPLOAD_INTERNAL_H */
