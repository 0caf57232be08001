/* The control requests of an upload session (see upload.c, upload_internal.h): Create,
 * the copy's VERIFY HEAD, Complete and its reconciliation after a lost response, the HEAD
 * for a missing ETag, Abort, and the search for an orphan after a lost Create. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/assert.h"
#include "xfer/upload_internal.h"

/* ---- control requests ----------------------------------------------------------------- */

/* The HEAD after a Complete that failed once a response had been lost (lock held): the
 * object is ours when its size and identity match (s3f__same_object: the whole-object
 * checksum, else the multipart ETag computed from the part ETags). Then the upload is done
 * and no Abort is sent. Otherwise the Complete's error stands, with what the HEAD found. */
static void reconcile_head(struct upload *u, enum s3f_status st) {
    S3F_ASSERT_HELD(&u->lock);
    uint64_t size = 0;
    for (size_t i = 0; i < u->n_parts; i++)
        size += u->parts[i].size;
    char etag[48] = "";
    const char **tags = calloc(u->n_parts, sizeof(*tags));
    if (tags) {
        for (size_t i = 0; i < u->n_parts; i++)
            tags[i] = u->parts[i].etag;
        if (!s3f__multipart_etag(tags, u->n_parts, etag, sizeof(etag)))
            etag[0] = '\0';
        free(tags);
    }
    char why[400];
    int same = -1;
    if (st == S3F_OK)
        same = s3f__same_object(&u->ctl.info, &u->result, u->alg, size, etag, why,
                                sizeof(why));
    else
        snprintf(why, sizeof(why), "HEAD found no object (%s)", s3f_status_name(st));
    if (same == 1) {
        s3f__log(&u->c->logger, S3F_LOG_INFO,
                 "upload %s: the object is ours (size and %s match): the first "
                 "CompleteMultipartUpload succeeded and its response was lost",
                 u->resource, etag[0] && !u->ctl.info.checksum_crc32c[0] &&
                 !u->ctl.info.checksum_crc32[0] && !u->ctl.info.checksum_crc64nvme[0]
                     ? "multipart ETag" : "identity");
        s3f__strlcpy(u->result.etag, u->ctl.info.etag, sizeof(u->result.etag));
        u->result.last_modified = u->ctl.info.last_modified;
        set_state(u, UP_DONE);
        return;
    }
    struct s3f_error e = u->complete_err;
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s%sCompleteMultipartUpload failed after a lost response "
             "and %s is not the object uploaded: %s", e.message, e.message[0] ? "; " : "",
             u->resource, why);
    s3f__strlcpy(e.message, msg, sizeof(e.message));
    if (strcmp(e.code, "NoSuchUpload") == 0)
        u->abort_sent = true; /* the upload is gone (completed or aborted): nothing to abort */
    s3f__up_fail(u, e.status, &e);
    set_state(u, UP_RUNNING);
}

void s3f__up_ctl_done(struct s3f__s3_request *r, enum s3f_status st, void *ud) {
    struct upload *u = ud;
    (void)r;
    struct actions act = {0};
    pthread_mutex_lock(&u->lock);
    u->callbacks++;
    u->outstanding--;
    enum ctl_kind kind = u->ctl_kind;
    u->ctl_kind = CTL_NONE;
    switch (kind) {
    case CTL_CREATE:
        if (st == S3F_OK)
            st = s3f__op_create_multipart_result(&u->ctl, &u->upload_id, &u->ctl_err);
        if (u->ctl.r.lost_response) { /* an attempt may have made an upload: find it */
            u->orphan_check = true;
            u->create_done_s = s3f__wall_time_s();
            u->create_server_date = u->ctl.r.server_date;
        }
        if (st) {
            s3f__up_fail(u, st, &u->ctl_err);
            break;
        }
        s3f__log(&u->c->logger, S3F_LOG_DEBUG, "upload %s: multipart upload %s", u->resource,
                 u->upload_id);
        for (size_t i = 0; i < u->n_parts; i++)
            s3f__up_try_queue(u, i, &act);
        break;
    case CTL_VERIFY:
        if (st == S3F_OK && u->src_etag && strcmp(u->ctl.info.etag, u->src_etag) != 0)
            st = S3F_ERR_PRECONDITION_FAILED; /* a server that ignored If-Match too */
        if (st) {
            struct s3f_error e = u->ctl_err;
            if (st == S3F_ERR_PRECONDITION_FAILED || st == S3F_ERR_NOT_FOUND) {
                s3f_error_clear(&e);
                s3f__error_set(&e, st, "UploadPartCopy", NULL,
                               "the source s3://%s/%s changed during the copy (its ETag is "
                               "no longer %s)", u->src_bucket, u->src_key, u->src_etag);
                e.http_status = u->ctl.r.http_status;
            }
            s3f__up_fail(u, st, &e);
        } else {
            u->verified = true;
        }
        set_state(u, UP_RUNNING);
        break;
    case CTL_COMPLETE: {
        struct s3f_object_info info = u->result;
        u->head_why = HEAD_WHY_ETAG;
        if (st == S3F_OK)
            st = s3f__op_complete_multipart_result(&u->ctl, &info, &u->ctl_err);
        if (st == S3F_ERR_BAD_RESPONSE && u->ctl.r.http_status == 200) {
            /* a 200 that is no error document but not the expected one either (moto
             * answers <CompleteMultipartUploadResponse>): the upload most likely
             * completed; HEAD decides */
            s3f__log(&u->c->logger, S3F_LOG_WARN, "upload %s: %s; checking with HEAD",
                     u->resource, u->ctl_err.message);
            u->head_why = HEAD_WHY_UNPARSED;
            u->complete_err = u->ctl_err;
            st = S3F_OK;
        }
        if (st && (u->ctl.r.lost_response || strcmp(u->ctl_err.code, "NoSuchUpload") == 0) &&
            s3f__up_build_ctl(u, CTL_HEAD) == S3F_OK) {
            /* An earlier attempt may have completed the upload and lost its answer; a
             * repeat then answers NoSuchUpload (AWS) or fails again. The object decides.
             * NoSuchUpload for our own upload id, which we never aborted, is checked even
             * without a retry the executor saw (a proxy's or a library's own re-send). */
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: CompleteMultipartUpload failed (%s%s%s) after a lost "
                     "response; checking the object with HEAD",
                     u->resource, u->ctl_err.code[0] ? u->ctl_err.code : s3f_status_name(st),
                     u->ctl_err.message[0] ? ": " : "", u->ctl_err.message);
            u->head_why = HEAD_WHY_RECONCILE;
            u->complete_err = u->ctl_err;
            u->complete_err.status = st;
            set_state(u, UP_HEADING);
            s3f__up_start_ctl(u, CTL_HEAD, &act);
            break;
        }
        if (st) {
            s3f__up_fail(u, st, &u->ctl_err);
            set_state(u, UP_RUNNING);
            break;
        }
        u->result = info;
        if ((!u->result.etag[0] || u->head_why == HEAD_WHY_UNPARSED) &&
            s3f__up_build_ctl(u, CTL_HEAD) == S3F_OK) {
            /* Ceph RGW answers Complete without an ETag; HEAD shows it */
            set_state(u, UP_HEADING);
            s3f__up_start_ctl(u, CTL_HEAD, &act);
        } else {
            set_state(u, UP_DONE);
        }
        break;
    }
    case CTL_HEAD: {
        if (u->head_why == HEAD_WHY_RECONCILE) {
            reconcile_head(u, st);
            break;
        }
        const char *dash = strrchr(u->ctl.info.etag, '-');
        if (u->head_why == HEAD_WHY_UNPARSED &&
            (st || !dash || strtoul(dash + 1, NULL, 10) != u->n_parts)) {
            /* not our object: report what Complete answered */
            s3f__up_fail(u, S3F_ERR_BAD_RESPONSE, &u->complete_err);
            set_state(u, UP_RUNNING);
            break;
        }
        if (st == S3F_OK) {
            s3f__strlcpy(u->result.etag, u->ctl.info.etag, sizeof(u->result.etag));
            u->result.last_modified = u->ctl.info.last_modified;
        }
        set_state(u, UP_DONE); /* the object exists either way */
        break;
    }
    case CTL_ABORT:
        if (st && st != S3F_ERR_NOT_FOUND && s3f__janitor_worth_retrying(st))
            s3f__janitor_add(u->x, u->bucket, u->key, u->upload_id); /* server away */
        else if (st && st != S3F_ERR_NOT_FOUND)
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: AbortMultipartUpload %s failed (%s): its parts may stay "
                     "until a lifecycle rule removes them",
                     u->resource, u->upload_id, u->ctl_err.message);
        set_state(u, UP_FAILED);
        break;
    case CTL_NONE:
        break;
    }
    s3f__up_advance(u, &act);
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    s3f__up_do_actions(u, &act);
    s3f__up_callback_exit(u);
}

/* Seconds of clock skew allowed around the window of a CreateMultipartUpload's attempts:
 * the server's Initiated and Date have one-second resolution. Without a Date in the answer
 * the client's clock is all there is, and SigV4 lets it be 15 minutes off. */
#define ORPHAN_MARGIN_S 2
#define ORPHAN_MARGIN_NO_DATE_S 900

/* CreateMultipartUpload was retried after a lost response, and then succeeded or failed
 * (caller's thread, no lock held, the upload settled): an earlier attempt may have created
 * an upload that nobody knows.
 * Abort every upload of exactly this key, other than ours, that the server initiated
 * within the window of our attempts: from the first attempt's send to the answer, in the
 * server's clock (the answer's Date tells the skew), widened by ORPHAN_MARGIN_S. Another
 * writer's upload of the same key started in those few seconds would be aborted too: two
 * writers racing for one key within a second is taken to be one writer retrying. Failures
 * are logged, never the upload's. */
void s3f__up_abort_orphans(struct upload *u) {
    S3F_ASSERT_NOT_HELD(&u->lock);
    if (!u->upload_id && !u->create_server_date) {
        /* Create failed and no answer told the server's time: a window 15 minutes wide
         * could take another writer's upload. Leave it to cleanup_uploads or a rule. */
        s3f__log(&u->c->logger, S3F_LOG_WARN,
                 "upload %s: CreateMultipartUpload failed after a lost response; an upload "
                 "it made may be left (see ListMultipartUploads)", u->resource);
        return;
    }
    int64_t lo = u->create_sent_s, hi = u->create_done_s, margin = ORPHAN_MARGIN_NO_DATE_S;
    if (u->create_server_date) {
        int64_t skew = u->create_server_date - u->create_done_s; /* server minus client */
        lo += skew;
        hi = u->create_server_date;
        margin = ORPHAN_MARGIN_S;
    }
    lo -= margin;
    hi += margin;
    char *key_marker = NULL, *id_marker = NULL;
    int aborted = 0;
    for (int page = 0; page < 100; page++) {
        struct s3f_uploads_page *pg = NULL;
        struct s3f_error e;
        s3f_error_clear(&e);
        if (s3f_list_multipart_uploads(u->c, u->bucket, u->key, key_marker, id_marker, &pg,
                                       &e) != S3F_OK) {
            s3f__log(&u->c->logger, S3F_LOG_WARN,
                     "upload %s: could not list multipart uploads to abort the one a lost "
                     "CreateMultipartUpload response may have left: %s", u->resource,
                     e.message);
            break;
        }
        for (size_t i = 0; i < pg->n_uploads; i++) {
            const struct s3f_upload_entry *x = &pg->uploads[i];
            if (strcmp(x->key, u->key) != 0 ||
                (u->upload_id && !strcmp(x->upload_id, u->upload_id)))
                continue;
            if (x->initiated < lo || x->initiated > hi)
                continue;
            s3f_error_clear(&e);
            enum s3f_status ast =
                s3f_abort_multipart_upload(u->c, u->bucket, u->key, x->upload_id, &e);
            s3f__log(&u->c->logger, ast ? S3F_LOG_WARN : S3F_LOG_INFO,
                     "upload %s: multipart upload %s, initiated during our retried "
                     "CreateMultipartUpload (its response was lost): %s%s", u->resource,
                     x->upload_id, ast ? "abort failed: " : "aborted",
                     ast ? e.message : "");
            aborted += ast == S3F_OK;
        }
        free(key_marker);
        free(id_marker);
        key_marker = id_marker = NULL;
        bool more = pg->is_truncated && pg->next_key_marker &&
                    strcmp(pg->next_key_marker, u->key) == 0;
        if (more) {
            key_marker = s3f__strdup(pg->next_key_marker);
            id_marker = pg->next_upload_id_marker ? s3f__strdup(pg->next_upload_id_marker)
                                                  : NULL;
        }
        s3f_uploads_page_free(pg);
        if (!more || !key_marker)
            break;
    }
    free(key_marker);
    free(id_marker);
    (void)aborted;
}
