/* Aborts that outlast an outage. When an upload fails because the server went away, its
 * AbortMultipartUpload fails too (same server, same retries). Rather than leave the parts
 * behind, the upload hands the abort to the client's janitor: one thread, started when
 * needed, that tries the pending aborts again with backoff (1 s doubling to 30 s) until
 * they succeed, S3 says the upload is gone, or S3F__ABORT_GIVE_UP_S passed. The caller's
 * error is reported at once; only the cleanup goes on in the background. s3f_client_free
 * stops the thread, tries each pending abort once more, and logs a WARN naming every upload
 * id still left (ListMultipartUploads finds them; s3flash.cleanup_uploads removes them).
 *
 * Every try is one request with a deadline (TRY_TIMEOUT_MS, connection included; no
 * retries: the janitor's backoff is the retry); each last try gets LAST_TRY_TIMEOUT_MS and
 * all of them together LAST_TRY_BUDGET_MS, so s3f_client_free returns within about
 * TRY_TIMEOUT_MS + LAST_TRY_BUDGET_MS (10 s) however the server fails (gone, refusing, or
 * accepting and never answering). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "s3/client.h"
#include "s3/ops_internal.h"
#include "xfer/xfer.h"

#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 30000u
#define TRY_TIMEOUT_MS 5000u      /* a background try */
#define LAST_TRY_TIMEOUT_MS 3000u /* one last try at s3f_client_free */
#define LAST_TRY_BUDGET_MS 5000u  /* all the last tries together */

struct s3f__abort_job {
    struct s3f__abort_job *next;
    char *bucket, *key, *upload_id;
    uint64_t since_ns;
};

void s3f__janitor_init(struct s3f__janitor *j) {
    memset(j, 0, sizeof(*j));
    pthread_mutex_init(&j->lock, NULL);
    s3f__cond_init_monotonic(&j->cond);
}

static void job_free(struct s3f__abort_job *a) {
    free(a->bucket);
    free(a->key);
    free(a->upload_id);
    free(a);
}

bool s3f__janitor_worth_retrying(enum s3f_status st) {
    switch (st) {
    case S3F_ERR_CONNECT:
    case S3F_ERR_TIMEOUT:
    case S3F_ERR_NETWORK:
    case S3F_ERR_THROTTLED:
    case S3F_ERR_SERVER:
    case S3F_ERR_BAD_RESPONSE:
    case S3F_ERR_CREDENTIALS:
    case S3F_ERR_EXPIRED_CREDENTIALS:
        return true;
    default:
        return false;
    }
}

/* One request, no retry, at most timeout_ms. */
static enum s3f_status abort_once(struct s3f_client *c, struct s3f__abort_job *a,
                                  uint32_t timeout_ms, struct s3f_error *e) {
    struct s3f__op op;
    enum s3f_status st = s3f__op_abort_multipart(&op, a->bucket, a->key, a->upload_id, e);
    if (st == S3F_OK) {
        op.r.max_attempts = 1;
        op.r.timeout_ms = timeout_ms;
        st = s3f__s3_execute(c, &op.r, e);
    }
    s3f__op_cleanup(&op);
    return st;
}

/* One try (timeout_ms at most). True when the job is finished. */
static bool try_abort(struct s3f_client *c, struct s3f__abort_job *a, bool last,
                      uint32_t timeout_ms) {
    struct s3f_error e;
    s3f_error_clear(&e);
    enum s3f_status st = abort_once(c, a, timeout_ms, &e);
    if (st == S3F_OK || st == S3F_ERR_NOT_FOUND) {
        s3f__log(&c->logger, S3F_LOG_INFO,
                 "upload s3://%s/%s: multipart upload %s aborted%s after %.1f s", a->bucket,
                 a->key, a->upload_id, st ? " (already gone)" : "",
                 (double)(s3f__now_ns() - a->since_ns) / 1e9);
        return true;
    }
    bool expired = s3f__now_ns() - a->since_ns >= (uint64_t)S3F__ABORT_GIVE_UP_S * 1000000000u;
    if (last || expired || !s3f__janitor_worth_retrying(st)) {
        s3f__log(&c->logger, S3F_LOG_WARN,
                 "upload s3://%s/%s: AbortMultipartUpload %s failed (%s: %s); its parts stay "
                 "until ListMultipartUploads finds them or a lifecycle rule removes them",
                 a->bucket, a->key, a->upload_id, s3f_status_name(st), e.message);
        return true;
    }
    return false;
}

static void *janitor_main(void *arg) {
    struct s3f__xfer_shared *x = arg;
    struct s3f__janitor *j = &x->janitor;
    uint32_t delay_ms = BACKOFF_FIRST_MS;
    pthread_mutex_lock(&j->lock);
    while (!j->stopping && j->jobs) {
        struct timespec ts = s3f__deadline_ms(delay_ms);
        int rc = 0;
        while (!j->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&j->cond, &j->lock, &ts);
        if (j->stopping)
            break;
        /* work on the list without the lock: new jobs go to the (now empty) list */
        struct s3f__abort_job *list = j->jobs, *keep = NULL;
        j->jobs = NULL;
        pthread_mutex_unlock(&j->lock);
        while (list) {
            pthread_mutex_lock(&j->lock);
            bool stopping = j->stopping;
            pthread_mutex_unlock(&j->lock);
            if (stopping) { /* the client closes: the rest get their last try there */
                while (list) {
                    struct s3f__abort_job *a = list;
                    list = a->next;
                    a->next = keep;
                    keep = a;
                }
                break;
            }
            struct s3f__abort_job *a = list;
            list = a->next;
            if (try_abort(x->client, a, false, TRY_TIMEOUT_MS)) {
                job_free(a);
                pthread_mutex_lock(&j->lock);
                j->n_jobs--;
                pthread_mutex_unlock(&j->lock);
            } else {
                a->next = keep;
                keep = a;
            }
        }
        pthread_mutex_lock(&j->lock);
        while (keep) {
            struct s3f__abort_job *a = keep;
            keep = a->next;
            a->next = j->jobs;
            j->jobs = a;
        }
        delay_ms = delay_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay_ms * 2;
    }
    j->running = false;
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* Called on an I/O thread (the abort's completion): never waits for the network; it may
 * join a janitor thread that has run out of work and is exiting. */
void s3f__janitor_add(struct s3f__xfer_shared *x, const char *bucket, const char *key,
                      const char *upload_id) {
    struct s3f__janitor *j = &x->janitor;
    struct s3f_client *c = x->client;
    struct s3f__abort_job *a = calloc(1, sizeof(*a));
    if (a) {
        a->bucket = strdup(bucket);
        a->key = strdup(key);
        a->upload_id = strdup(upload_id);
        a->since_ns = s3f__now_ns();
    }
    if (!a || !a->bucket || !a->key || !a->upload_id) {
        s3f__log(&c->logger, S3F_LOG_WARN,
                 "upload s3://%s/%s: out of memory: multipart upload %s is left behind",
                 bucket, key, upload_id);
        if (a)
            job_free(a);
        return;
    }
    pthread_mutex_lock(&j->lock);
    if (j->stopping) {
        /* the client is being freed (and this may be an I/O thread: no waiting here) */
        pthread_mutex_unlock(&j->lock);
        s3f__log(&c->logger, S3F_LOG_WARN,
                 "upload s3://%s/%s: AbortMultipartUpload %s failed while the client closes; "
                 "its parts stay until ListMultipartUploads finds them", bucket, key, upload_id);
        job_free(a);
        return;
    }
    a->next = j->jobs;
    j->jobs = a;
    j->n_jobs++;
    if (!j->running) {
        if (j->joinable) {
            /* the previous thread ran out of work and is exiting: wait for it */
            pthread_t t = j->thread;
            j->joinable = false;
            pthread_mutex_unlock(&j->lock);
            pthread_join(t, NULL);
            pthread_mutex_lock(&j->lock);
        }
        if (!j->running && !j->joinable) {
            j->running = pthread_create(&j->thread, NULL, janitor_main, x) == 0;
            j->joinable = j->running;
        }
    }
    bool started = j->running;
    pthread_mutex_unlock(&j->lock);
    s3f__log(&c->logger, started ? S3F_LOG_INFO : S3F_LOG_WARN,
             "upload s3://%s/%s: AbortMultipartUpload %s failed; %s", bucket, key, upload_id,
             started ? "retrying it in the background" : "no thread to retry it later");
}

uint32_t s3f__janitor_pending(struct s3f__janitor *j) {
    pthread_mutex_lock(&j->lock);
    uint32_t n = j->n_jobs;
    pthread_mutex_unlock(&j->lock);
    return n;
}

void s3f__janitor_stop(struct s3f__xfer_shared *x) {
    struct s3f__janitor *j = &x->janitor;
    pthread_mutex_lock(&j->lock);
    j->stopping = true;
    pthread_cond_broadcast(&j->cond);
    bool join = j->joinable;
    j->joinable = false;
    pthread_mutex_unlock(&j->lock);
    if (join)
        pthread_join(j->thread, NULL);
    /* no thread now: a last try for what is left, all of them within LAST_TRY_BUDGET_MS */
    struct s3f__abort_job *a = j->jobs;
    j->jobs = NULL;
    uint64_t deadline = s3f__now_ns() + (uint64_t)LAST_TRY_BUDGET_MS * 1000000u;
    while (a) {
        struct s3f__abort_job *next = a->next;
        uint64_t now = s3f__now_ns();
        uint64_t left_ms = now < deadline ? (deadline - now) / 1000000u : 0;
        if (left_ms >= 100) {
            try_abort(x->client, a, true,
                      left_ms < LAST_TRY_TIMEOUT_MS ? (uint32_t)left_ms : LAST_TRY_TIMEOUT_MS);
        } else {
            s3f__log(&x->client->logger, S3F_LOG_WARN,
                     "upload s3://%s/%s: AbortMultipartUpload %s not tried (no time left "
                     "while the client closes); its parts stay until ListMultipartUploads "
                     "finds them or a lifecycle rule removes them",
                     a->bucket, a->key, a->upload_id);
        }
        job_free(a);
        a = next;
    }
    j->n_jobs = 0;
}

void s3f__janitor_cleanup(struct s3f__janitor *j) {
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
}
