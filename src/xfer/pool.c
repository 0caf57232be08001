/* The bounded buffer pool: fixed-size chunks, allocated once and reused, handed out first
 * come, first served. */
#include <stdlib.h>
#include <string.h>

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
    pthread_cond_init(&p->cond, NULL);
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
}

/* Hand out n chunks (lock held, n <= available). On malloc failure nothing is taken. */
static enum s3f_status take(struct s3f__pool *p, size_t n, void **chunks) {
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
        pthread_mutex_unlock(&p->lock);
        return st;
    }
    uint64_t ticket = p->next_ticket++;
    while (ticket != p->now_serving || p->max_chunks - p->in_use < n)
        pthread_cond_wait(&p->cond, &p->lock);
    st = take(p, n, chunks);
    p->now_serving++;
    pthread_cond_broadcast(&p->cond); /* the next ticket may be servable too */
    pthread_mutex_unlock(&p->lock);
    return st;
}

void s3f__pool_release(struct s3f__pool *p, size_t n, void *const *chunks) {
    if (n == 0)
        return;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < n; i++)
        p->free[p->n_free++] = chunks[i];
    p->in_use -= n;
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
    pthread_mutex_unlock(&p->lock);
}

void s3f__pool_reset_high_water(struct s3f__pool *p) {
    pthread_mutex_lock(&p->lock);
    p->high_water = p->in_use;
    pthread_mutex_unlock(&p->lock);
}
