/* The request scheduler: a bounded number of requests in flight per client, slots handed
 * round-robin to the transfers that have work. */
#include "core/assert.h"
#include "xfer/xfer.h"

void s3f__sched_init(struct s3f__sched *s, uint32_t max_inflight) {
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->max_inflight = max_inflight ? max_inflight : 1;
    s->inflight = 0;
    s->inflight_high_water = 0;
    s->started = 0;
    s->cursor = NULL;
}

void s3f__sched_cleanup(struct s3f__sched *s) {
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
}

/* Ring operations; lock held. */
static void link_entry(struct s3f__sched *s, struct s3f__sched_entry *e) {
    S3F_ASSERT_HELD(&s->lock);
    if (e->linked)
        return;
    if (!s->cursor) {
        e->next = e->prev = e;
        s->cursor = e;
    } else {
        /* join just before the cursor: served after everyone already waiting */
        struct s3f__sched_entry *c = s->cursor;
        e->next = c;
        e->prev = c->prev;
        c->prev->next = e;
        c->prev = e;
    }
    e->linked = true;
}

static void unlink_entry(struct s3f__sched *s, struct s3f__sched_entry *e) {
    S3F_ASSERT_HELD(&s->lock);
    if (!e->linked)
        return;
    if (e->next == e) {
        s->cursor = NULL;
    } else {
        e->prev->next = e->next;
        e->next->prev = e->prev;
        if (s->cursor == e)
            s->cursor = e->next;
    }
    e->next = e->prev = NULL;
    e->linked = false;
}

/* Start requests while slots are free. */
static void pump(struct s3f__sched *s) {
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->inflight >= s->max_inflight || !s->cursor) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        struct s3f__sched_entry *e = s->cursor;
        s->cursor = e->next;
        if (--e->pending == 0)
            unlink_entry(s, e);
        e->starting++;
        s->inflight++;
        pthread_mutex_unlock(&s->lock);

        bool started = e->start(e);

        pthread_mutex_lock(&s->lock);
        if (started) {
            s->started++;
            if (s->inflight > s->inflight_high_water)
                s->inflight_high_water = s->inflight;
        } else {
            s->inflight--;
        }
        if (--e->starting == 0)
            pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->lock);
    }
}

void s3f__sched_add(struct s3f__sched *s, struct s3f__sched_entry *e, uint32_t n) {
    if (n == 0)
        return;
    pthread_mutex_lock(&s->lock);
    e->pending += n;
    link_entry(s, e);
    pthread_mutex_unlock(&s->lock);
    pump(s);
}

void s3f__sched_cancel(struct s3f__sched *s, struct s3f__sched_entry *e) {
    pthread_mutex_lock(&s->lock);
    e->pending = 0;
    unlink_entry(s, e);
    pthread_mutex_unlock(&s->lock);
}

void s3f__sched_detach(struct s3f__sched *s, struct s3f__sched_entry *e) {
    pthread_mutex_lock(&s->lock);
    e->pending = 0;
    unlink_entry(s, e);
    while (e->starting)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

void s3f__sched_done(struct s3f__sched *s) {
    pthread_mutex_lock(&s->lock);
    s->inflight--;
    pthread_mutex_unlock(&s->lock);
    pump(s);
}

void s3f__sched_set_max(struct s3f__sched *s, uint32_t max_inflight) {
    pthread_mutex_lock(&s->lock);
    bool raised = max_inflight > s->max_inflight;
    s->max_inflight = max_inflight ? max_inflight : 1;
    pthread_mutex_unlock(&s->lock);
    if (raised)
        pump(s);
}
