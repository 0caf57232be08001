/* The bounded buffer pool: fixed-size chunks, allocated once and reused, handed out first
 * come, first served; read-ahead held as loans that a blocked acquirer gets back
 * (xfer.h has the rules). */
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "xfer/xfer.h"

enum s3f_status s3f__pool_init(struct s3f__pool *p, size_t chunk_size, uint64_t limit_bytes) {
    memset(p, 0, sizeof(*p));
    p->chunk_size = chunk_size;
    uint64_t n = limit_bytes / chunk_size;
    p->max_chunks = n ? (size_t)n : 1;
    p->free = calloc(p->max_chunks, sizeof(*p->free));
    if (!p->free)
        return S3F_ERR_NO_MEMORY;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->lenders_lock, NULL);
    if (s3f__cond_init_monotonic(&p->cond)) {
        free(p->free);
        p->free = NULL;
        return S3F_ERR_NO_MEMORY;
    }
    return S3F_OK;
}

void s3f__pool_cleanup(struct s3f__pool *p) {
    if (!p->free)
        return;
    for (size_t i = 0; i < p->n_free; i++)
        free(p->free[i]);
    free(p->free);
    p->free = NULL;
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->lenders_lock);
}

/* Hand out n chunks (lock held, n <= available). On malloc failure nothing is taken. */
static enum s3f_status take(struct s3f__pool *p, size_t n, void **chunks) {
    S3F_ASSERT_HELD(&p->lock);
    size_t got = 0;
    for (; got < n; got++) {
        if (p->n_free) {
            chunks[got] = p->free[--p->n_free];
            continue;
        }
        void *c = NULL;
        if (posix_memalign(&c, 4096, p->chunk_size) != 0 || !c)
            break;
        p->n_allocated++;
        chunks[got] = c;
    }
    if (got < n) {
        for (size_t i = 0; i < got; i++)
            p->free[p->n_free++] = chunks[i];
        return S3F_ERR_NO_MEMORY;
    }
    p->in_use += n;
    if (p->in_use > p->high_water)
        p->high_water = p->in_use;
    return S3F_OK;
}

#define RECLAIM_EVERY_MS 50u /* a short head waiter asks the lenders after this, and again
                              * this often */

/* Ask every lender for its loans (pool lock not held). */
static void reclaim_loans(struct s3f__pool *p) {
    S3F_ASSERT_NOT_HELD(&p->lock);
    pthread_mutex_lock(&p->lenders_lock);
    for (struct s3f__pool_lender *l = p->lenders; l; l = l->next)
        l->reclaim(l);
    pthread_mutex_unlock(&p->lenders_lock);
}

static void wait_until(struct s3f__pool *p, uint64_t until_ms) {
    uint64_t now = s3f__now_ms();
    struct timespec ts = s3f__deadline_ms(until_ms > now ? until_ms - now : 0);
    (void)pthread_cond_timedwait(&p->cond, &p->lock, &ts); /* timed out or woken: look again */
}

/* Blocking acquire (lock held on entry and exit). */
static enum s3f_status acquire_wait(struct s3f__pool *p, size_t n, void **chunks) {
    S3F_ASSERT_HELD(&p->lock);
    uint64_t ticket = p->next_ticket++;
    uint64_t timeout_ms = p->wait_timeout_ms ? p->wait_timeout_ms : 60000;
    uint64_t now = s3f__now_ms();
    uint64_t deadline = now + timeout_ms;
    uint64_t next_reclaim = now + RECLAIM_EVERY_MS; /* memory in flight may come back first */
    uint64_t releases = p->releases;
    while (ticket != p->now_serving || p->max_chunks - p->in_use < n) {
        now = s3f__now_ms();
        if (p->releases != releases) { /* memory came back: progress, the clock restarts */
            releases = p->releases;
            deadline = now + timeout_ms;
        }
        bool head = ticket == p->now_serving;
        if (head && now >= next_reclaim) {
            /* short at the head of the queue: ask for the loans back (without the lock:
             * a lender's reclaim releases chunks) */
            p->reclaims++;
            pthread_mutex_unlock(&p->lock);
            reclaim_loans(p);
            pthread_mutex_lock(&p->lock);
            next_reclaim = s3f__now_ms() + RECLAIM_EVERY_MS;
            continue;
        }
        if (head && now >= deadline) {
            pthread_mutex_unlock(&p->lock);
            bool busy = p->busy && p->busy(p->busy_ud);
            pthread_mutex_lock(&p->lock);
            if (!busy && p->releases == releases && p->max_chunks - p->in_use < n) {
                /* Nothing came back and nothing in flight can give any back: held by
                 * callers that do not come back (idle writers' part buffers). Leave the
                 * queue (the next waiter may need less) instead of waiting forever. */
                p->now_serving++;
                pthread_cond_broadcast(&p->cond);
                return S3F_ERR_TIMEOUT;
            }
            deadline = s3f__now_ms() + timeout_ms;
            continue;
        }
        uint64_t until = head ? deadline : now + timeout_ms;
        if (head && next_reclaim < until)
            until = next_reclaim;
        wait_until(p, until);
    }
    enum s3f_status st = take(p, n, chunks);
    p->now_serving++;
    pthread_cond_broadcast(&p->cond); /* the next ticket may be servable too */
    return st;
}

enum s3f_status s3f__pool_acquire(struct s3f__pool *p, size_t n, void **chunks, bool wait) {
    if (n == 0)
        return S3F_OK;
    if (n > p->max_chunks)
        return S3F_ERR_INVALID_ARGUMENT;
    enum s3f_status st;
    pthread_mutex_lock(&p->lock);
    if (!wait) {
        if (p->next_ticket != p->now_serving || p->max_chunks - p->in_use < n)
            st = S3F_ERR_ABORTED;
        else
            st = take(p, n, chunks);
    } else {
        st = acquire_wait(p, n, chunks);
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void s3f__pool_lender_add(struct s3f__pool *p, struct s3f__pool_lender *l) {
    pthread_mutex_lock(&p->lenders_lock);
    l->prev = NULL;
    l->next = p->lenders;
    if (p->lenders)
        p->lenders->prev = l;
    p->lenders = l;
    pthread_mutex_unlock(&p->lenders_lock);
}

void s3f__pool_lender_remove(struct s3f__pool *p, struct s3f__pool_lender *l) {
    pthread_mutex_lock(&p->lenders_lock); /* waits for a reclaim that runs */
    if (l->prev)
        l->prev->next = l->next;
    else if (p->lenders == l)
        p->lenders = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->next = l->prev = NULL;
    pthread_mutex_unlock(&p->lenders_lock);
}

void s3f__pool_release(struct s3f__pool *p, size_t n, void *const *chunks) {
    if (n == 0)
        return;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < n; i++)
        p->free[p->n_free++] = chunks[i];
    p->in_use -= n;
    p->releases++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

void s3f__pool_stats(struct s3f__pool *p, struct s3f__pool_stats *out) {
    pthread_mutex_lock(&p->lock);
    out->chunk_size = p->chunk_size;
    out->max_chunks = p->max_chunks;
    out->n_allocated = p->n_allocated;
    out->in_use = p->in_use;
    out->high_water = p->high_water;
    out->reclaims = p->reclaims;
    out->waiters = p->next_ticket - p->now_serving;
    pthread_mutex_unlock(&p->lock);
}

void s3f__pool_reset_high_water(struct s3f__pool *p) {
    pthread_mutex_lock(&p->lock);
    p->high_water = p->in_use;
    pthread_mutex_unlock(&p->lock);
}
