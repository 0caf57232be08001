/* The bounded buffer pool (bounded, reused, blocking, first come first served) and the
 * request scheduler (bounded in flight, round-robin between transfers, cancellation). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "xfer/xfer.h"

static void test_bounded_reuse(void) {
    struct s3f__pool p;
    CHECK_INT(s3f__pool_init(&p, 4096, 4 * 4096 + 100), S3F_OK);
    CHECK_INT(p.max_chunks, 4);
    void *c[8];
    CHECK_INT(s3f__pool_acquire(&p, 5, c, true), S3F_ERR_INVALID_ARGUMENT);
    CHECK_INT(s3f__pool_acquire(&p, 4, c, true), S3F_OK);
    for (int i = 0; i < 4; i++)
        memset(c[i], i, 4096);
    void *extra;
    CHECK_INT(s3f__pool_acquire(&p, 1, &extra, false), S3F_ERR_ABORTED);
    s3f__pool_release(&p, 2, c);
    void *again[2];
    CHECK_INT(s3f__pool_acquire(&p, 2, again, false), S3F_OK);
    /* the released chunks come back: nothing new is allocated */
    CHECK((again[0] == c[0] || again[0] == c[1]) && (again[1] == c[0] || again[1] == c[1]));
    struct s3f__pool_stats st;
    s3f__pool_stats(&p, &st);
    CHECK_INT(st.n_allocated, 4);
    CHECK_INT(st.in_use, 4);
    CHECK_INT(st.high_water, 4);
    s3f__pool_release(&p, 2, again);
    s3f__pool_release(&p, 2, c + 2);
    s3f__pool_stats(&p, &st);
    CHECK_INT(st.in_use, 0);
    CHECK_INT(st.high_water, 4);
    s3f__pool_reset_high_water(&p);
    s3f__pool_stats(&p, &st);
    CHECK_INT(st.high_water, 0);
    s3f__pool_cleanup(&p);
}

struct waiter {
    struct s3f__pool *p;
    size_t n;
    void *chunks[4];
    volatile int got;
    int order;
};
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order_next;

/* Acquire (blocking), note the order it got its chunks in, and give them back at once: a
 * waiter that jumped the queue shows in the order, and nothing ever waits forever. */
static void *waiter_main(void *arg) {
    struct waiter *w = arg;
    if (s3f__pool_acquire(w->p, w->n, w->chunks, true) == S3F_OK) {
        pthread_mutex_lock(&order_lock);
        w->order = order_next++;
        pthread_mutex_unlock(&order_lock);
        w->got = 1;
        s3f__pool_release(w->p, w->n, w->chunks);
    }
    return NULL;
}

/* Wait until the pool has `n` blocked acquirers. */
static void wait_blocked(struct s3f__pool *p, uint64_t n) {
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&p->lock);
        uint64_t blocked = p->next_ticket - p->now_serving;
        pthread_mutex_unlock(&p->lock);
        if (blocked >= n)
            return;
        usleep(1000); /* polls for an event, bounded: 2 s */
    }
    CHECK(!"the waiters never blocked in the pool");
}

/* First come, first served: a big request that came first is not overtaken by a small one
 * that would fit, nor by a non-blocking try. Asserted on the order the waiters got their
 * chunks in (and the pool's ticket counters), not on what had not happened after a sleep. */
static void test_blocking_fifo(void) {
    struct s3f__pool p;
    CHECK_INT(s3f__pool_init(&p, 4096, 2 * 4096), S3F_OK);
    void *mine[2];
    CHECK_INT(s3f__pool_acquire(&p, 2, mine, true), S3F_OK);
    order_next = 0;
    struct waiter big = {.p = &p, .n = 2}, small = {.p = &p, .n = 1};
    pthread_t tb, ts;
    pthread_create(&tb, NULL, waiter_main, &big);
    wait_blocked(&p, 1);
    pthread_create(&ts, NULL, waiter_main, &small);
    wait_blocked(&p, 2);
    /* one chunk free: enough for the small request, not for the big one ahead of it */
    s3f__pool_release(&p, 1, mine);
    /* a non-blocking try must not jump the queue either */
    void *x;
    CHECK_INT(s3f__pool_acquire(&p, 1, &x, false), S3F_ERR_ABORTED);
    s3f__pool_release(&p, 1, mine + 1);
    pthread_join(tb, NULL);
    pthread_join(ts, NULL);
    CHECK(big.got && small.got);
    CHECK_INT(big.order, 0);
    CHECK_INT(small.order, 1);
    struct s3f__pool_stats st;
    s3f__pool_stats(&p, &st);
    CHECK_INT(st.in_use, 0);
    CHECK_INT(st.high_water, 2);
    CHECK_INT(st.n_allocated, 2);
    s3f__pool_cleanup(&p);
}

struct churn {
    struct s3f__pool *p;
    unsigned seed;
    int errors;
};

static void *churn_main(void *arg) {
    struct churn *ch = arg;
    for (int i = 0; i < 2000; i++) {
        size_t n = 1 + (size_t)(rand_r(&ch->seed) % 3);
        void *c[3];
        if (s3f__pool_acquire(ch->p, n, c, true) != S3F_OK) {
            ch->errors++;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            memset(c[k], (int)k, 64);
        s3f__pool_release(ch->p, n, c);
    }
    return NULL;
}

static void test_concurrent_bound(void) {
    struct s3f__pool p;
    CHECK_INT(s3f__pool_init(&p, 4096, 5 * 4096), S3F_OK);
    pthread_t th[8];
    struct churn ch[8];
    for (int i = 0; i < 8; i++) {
        ch[i] = (struct churn){&p, (unsigned)i + 1, 0};
        pthread_create(&th[i], NULL, churn_main, &ch[i]);
    }
    int errors = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        errors += ch[i].errors;
    }
    CHECK_INT(errors, 0);
    struct s3f__pool_stats st;
    s3f__pool_stats(&p, &st);
    CHECK(st.high_water <= 5);
    CHECK(st.n_allocated <= 5);
    CHECK_INT(st.in_use, 0);
    s3f__pool_cleanup(&p);
}

/* ---- the scheduler ------------------------------------------------------------------ */

struct fake {
    struct s3f__sched_entry e;
    int id;
    int started;
    bool refuse;
};
static int trace[64];
static int n_trace;

static bool fake_start(struct s3f__sched_entry *e) {
    struct fake *f = (struct fake *)e;
    if (f->refuse)
        return false;
    f->started++;
    if (n_trace < 64)
        trace[n_trace++] = f->id;
    return true;
}

static void test_sched_round_robin(void) {
    struct s3f__sched s;
    s3f__sched_init(&s, 2);
    struct fake big = {.e.start = fake_start, .id = 1};
    struct fake small = {.e.start = fake_start, .id = 2};
    struct fake mid = {.e.start = fake_start, .id = 3};
    n_trace = 0;
    s3f__sched_add(&s, &big.e, 20);
    CHECK_INT(big.started, 2); /* two slots */
    CHECK_INT(s.inflight, 2);
    s3f__sched_add(&s, &small.e, 1);
    s3f__sched_add(&s, &mid.e, 3);
    CHECK_INT(small.started, 0); /* no slot free */
    /* slots go round-robin: big (whose turn it was), then each newcomer, before big again */
    s3f__sched_done(&s);
    s3f__sched_done(&s);
    CHECK_INT(small.started, 1);
    CHECK_INT(mid.started, 0);
    s3f__sched_done(&s);
    CHECK_INT(mid.started, 1);
    CHECK_INT(big.started, 3);
    CHECK_INT(s.inflight, 2);
    for (int i = 0; i < 40; i++)
        s3f__sched_done(&s);
    CHECK_INT(big.started, 20);
    CHECK_INT(mid.started, 3);
    CHECK_INT(s.inflight_high_water, 2);
    /* order: 1 1 (two free slots) | 1 2 3 | 1 3 1 3 | 1 1 ... */
    int want[] = {1, 1, 1, 2, 3, 1, 3, 1, 3, 1, 1, 1};
    for (int i = 0; i < 12; i++)
        CHECK_INT(trace[i], want[i]);
    s3f__sched_cleanup(&s);
}

static void test_sched_cancel(void) {
    struct s3f__sched s;
    s3f__sched_init(&s, 1);
    struct fake a = {.e.start = fake_start, .id = 1};
    struct fake b = {.e.start = fake_start, .id = 2};
    n_trace = 0;
    s3f__sched_add(&s, &a.e, 5);
    s3f__sched_add(&s, &b.e, 5);
    CHECK_INT(a.started, 1);
    s3f__sched_cancel(&s, &a.e);
    s3f__sched_done(&s);
    CHECK_INT(b.started, 1);
    s3f__sched_done(&s);
    CHECK_INT(a.started, 1); /* never again */
    CHECK_INT(b.started, 2);
    /* an entry that has nothing to start after all frees its slot at once */
    b.refuse = true;
    s3f__sched_done(&s);
    CHECK_INT(s.inflight, 0);
    s3f__sched_detach(&s, &b.e);
    CHECK(s.cursor == NULL);
    s3f__sched_cleanup(&s);
}

/* A lender holding chunks it gives back when asked (a reader's read-ahead). */
struct loan {
    struct s3f__pool_lender l;
    struct s3f__pool *p;
    void *chunks[4];
    size_t n;
    int asked;
};

static void loan_reclaim(struct s3f__pool_lender *l) {
    struct loan *o = (struct loan *)l;
    o->asked++;
    if (o->n) {
        s3f__pool_release(o->p, o->n, o->chunks);
        o->n = 0;
    }
}

static void test_loans_given_back(void) {
    /* the whole pool is lent out; a blocking acquirer gets it back from the lender, and
     * read-ahead's non-blocking tries are refused while it waits */
    struct s3f__pool p;
    CHECK_INT(s3f__pool_init(&p, 4096, 4 * 4096), S3F_OK);
    struct loan o = {.l = {.reclaim = loan_reclaim}, .p = &p, .n = 4};
    CHECK_INT(s3f__pool_acquire(&p, 4, o.chunks, false), S3F_OK);
    s3f__pool_lender_add(&p, &o.l);
    void *c[3];
    CHECK_INT(s3f__pool_acquire(&p, 3, c, true), S3F_OK);
    CHECK(o.asked >= 1);
    struct s3f__pool_stats st;
    s3f__pool_stats(&p, &st);
    CHECK_INT(st.in_use, 3);
    CHECK(st.reclaims >= 1);
    s3f__pool_release(&p, 3, c);
    s3f__pool_lender_remove(&p, &o.l);
    s3f__pool_cleanup(&p);
}

static bool busy_flag(void *ud) {
    return *(bool *)ud;
}

struct held_release {
    struct s3f__pool *p;
    void **chunks;
    size_t n;
    unsigned delay_ms;
};

static void *release_later(void *arg) {
    struct held_release *h = arg;
    usleep(h->delay_ms * 1000);
    s3f__pool_release(h->p, h->n, h->chunks);
    return NULL;
}

static void test_wait_is_bounded(void) {
    /* held by what is no loan and nothing in flight: the wait ends with S3F_ERR_TIMEOUT
     * after wait_timeout_ms (not before), and the next waiter is served normally */
    struct s3f__pool p;
    CHECK_INT(s3f__pool_init(&p, 4096, 2 * 4096), S3F_OK);
    bool busy = false;
    p.wait_timeout_ms = 300;
    p.busy = busy_flag;
    p.busy_ud = &busy;
    void *held[2], *c[2];
    CHECK_INT(s3f__pool_acquire(&p, 2, held, true), S3F_OK);
    uint64_t t0 = s3f__now_ms();
    CHECK_INT(s3f__pool_acquire(&p, 1, c, true), S3F_ERR_TIMEOUT);
    uint64_t took = s3f__now_ms() - t0;
    CHECK(took >= 300 && took < 5000);
    /* with requests in flight the wait goes on; memory given back then serves it */
    busy = true;
    struct held_release h = {.p = &p, .chunks = held, .n = 2, .delay_ms = 700};
    pthread_t th;
    pthread_create(&th, NULL, release_later, &h);
    CHECK_INT(s3f__pool_acquire(&p, 2, c, true), S3F_OK);
    pthread_join(th, NULL);
    s3f__pool_release(&p, 2, c);
    s3f__pool_cleanup(&p);
}

int main(void) {
    RUN(test_bounded_reuse);
    RUN(test_blocking_fifo);
    RUN(test_concurrent_bound);
    RUN(test_loans_given_back);
    RUN(test_wait_is_bounded);
    RUN(test_sched_round_robin);
    RUN(test_sched_cancel);
    return test_summary();
}
