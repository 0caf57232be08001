/* The bandwidth-delay estimator (src/xfer/bdp.c): the prior, the moving averages, the
 * number of requests in flight a link needs and its bounds, and the read-ahead plan. */
#include <math.h>
#include <string.h>

#include "testutil.h"
#include "xfer/xfer.h"

#define MIB S3F__MIB
#define MS 1000000ull

static struct s3f__bdp_estimate est(double mbps, double latency_ms) {
    struct s3f__bdp_estimate e = {.conn_bps = mbps * 1e6, .latency_s = latency_ms / 1e3,
                                  .samples = 10};
    return e;
}

/* Before any sample: 50 MB/s and 30 ms, as documented. */
static void test_prior(void) {
    struct s3f__bdp b;
    s3f__bdp_init(&b);
    struct s3f__bdp_estimate e;
    s3f__bdp_get(&b, &e);
    CHECK_INT(e.samples, 0);
    CHECK(fabs(e.conn_bps - 50e6) < 1);
    CHECK(fabs(e.latency_s - 0.030) < 1e-9);
    /* 10 Gbit/s with 8 MiB requests: 1.25e9 * (0.03 + 8 MiB / 50 MB/s) / 8 MiB = 29.5 */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 0), 30);
    s3f__bdp_cleanup(&b);
}

/* The first sample replaces the prior; later ones move the average by a fifth. */
static void test_ewma(void) {
    struct s3f__bdp b;
    s3f__bdp_init(&b);
    struct s3f__bdp_estimate e;
    /* 8 MiB in 0.2 s after 10 ms: 41.9 MB/s */
    s3f__bdp_sample(&b, 8 * MIB, 10 * MS, 200 * MS);
    s3f__bdp_get(&b, &e);
    CHECK_INT(e.samples, 1);
    CHECK(fabs(e.conn_bps - 8.0 * MIB / 0.2) < 1);
    CHECK(fabs(e.latency_s - 0.010) < 1e-9);
    /* twice the throughput, 60 ms: the averages move 20% of the way */
    s3f__bdp_sample(&b, 8 * MIB, 60 * MS, 100 * MS);
    s3f__bdp_get(&b, &e);
    CHECK(fabs(e.conn_bps - 8.0 * MIB / 0.2 * 1.2) < 1);
    CHECK(fabs(e.latency_s - 0.020) < 1e-9);
    /* a small body: latency only (the throughput of 64 KiB says little) */
    s3f__bdp_sample(&b, 64 << 10, 20 * MS, 1 * MS);
    struct s3f__bdp_estimate e2;
    s3f__bdp_get(&b, &e2);
    CHECK(fabs(e2.conn_bps - e.conn_bps) < 1e-6);
    CHECK(fabs(e2.latency_s - 0.020) < 1e-9);
    CHECK_INT(e2.samples, 2); /* requests that measured the throughput */
    /* an upload part: no latency (UINT64_MAX), its whole time as the body's */
    s3f__bdp_sample(&b, 8 * MIB, UINT64_MAX, 200 * MS);
    s3f__bdp_get(&b, &e2);
    CHECK(fabs(e2.latency_s - 0.020) < 1e-9);
    CHECK(fabs(e2.conn_bps - (e.conn_bps + 0.2 * (8.0 * MIB / 0.2 - e.conn_bps))) < 1);
    CHECK_INT(e2.samples, 3);
    /* converges: 50 samples at 25 MB/s, 40 ms */
    for (int i = 0; i < 50; i++)
        s3f__bdp_sample(&b, 25 * MIB, 40 * MS, (uint64_t)(25.0 * MIB / 25e6 * 1e9));
    s3f__bdp_get(&b, &e);
    CHECK(fabs(e.conn_bps - 25e6) / 25e6 < 0.001);
    CHECK(fabs(e.latency_s - 0.040) < 1e-4);
    s3f__bdp_cleanup(&b);
}

/* ceil(T x (latency + S / thr) / S), bounded by connections and memory. */
static void test_inflight(void) {
    struct s3f__bdp_estimate e = est(50, 0);
    /* no latency: the bandwidth alone, 1.25 GB/s / 50 MB/s */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 0), 25);
    /* 50 ms to the first byte adds T x latency / S = 62.5 MB / 8 MiB = 7.45 */
    e = est(50, 50);
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 0), 33);
    /* smaller requests need more of them for the same latency */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 1 * MIB, 128, 0), 85); /* 23.8 + 59.6 */
    /* bounded by the connections */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 8, 0), 8);
    /* and by the memory: 64 MiB holds 8 requests of 8 MiB */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 64 * MIB), 8);
    /* memory for less than one request: still one */
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 1 * MIB), 1);
    /* loopback: 2 GB/s per connection, 0.1 ms: one request is enough */
    e = est(2000, 0.1);
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 8 * MIB, 64, 0), 1);
    /* a faster target on loopback: 10 GB/s needs 5 + 1 */
    CHECK_INT(s3f__bdp_inflight(&e, 10e9, 8 * MIB, 64, 0), 6);
    /* degenerate inputs stay in range */
    struct s3f__bdp_estimate z = {0};
    CHECK(s3f__bdp_inflight(&z, 1.25e9, 8 * MIB, 16, 0) == 16);
    CHECK_INT(s3f__bdp_inflight(&e, 0, 8 * MIB, 16, 0), 16);
    CHECK_INT(s3f__bdp_inflight(&e, 1.25e9, 0, 0, 0), 1);
}

/* The read-ahead: whole parts while they fit the budget, else smaller segments. */
static void test_window(void) {
    struct s3f__bdp_estimate e = est(25, 20);
    uint64_t s;
    uint32_t k;
    /* 8 connections at 25 MB/s: 8 segments of 8 MiB, 64 MiB, fit in 256 MiB */
    s3f__bdp_plan_window(&e, 1.25e9, 8 * MIB, MIB, 8, 256 * MIB, &s, &k);
    CHECK_INT(s, 8 * MIB);
    CHECK_INT(k, 8);
    /* 32 connections do not fit in 128 MiB as parts: 4 MiB segments, 32 of them */
    s3f__bdp_plan_window(&e, 1.25e9, 8 * MIB, MIB, 32, 128 * MIB, &s, &k);
    CHECK_INT(s, 4 * MIB);
    CHECK_INT(k, 32);
    CHECK((uint64_t)k * s <= 128 * MIB);
    /* a budget below one unit per request: 1 MiB segments, as many as fit */
    s3f__bdp_plan_window(&e, 1.25e9, 8 * MIB, MIB, 64, 16 * MIB, &s, &k);
    CHECK_INT(s, MIB);
    CHECK_INT(k, 16);
    /* no budget: parts */
    s3f__bdp_plan_window(&e, 1.25e9, 8 * MIB, MIB, 64, 0, &s, &k);
    CHECK_INT(s, 8 * MIB);
    CHECK_INT(k, 53); /* 50 + 1.25e9 * 0.02 / 8 MiB = 52.98 */
}

static uint32_t slots(struct s3f__xfer_shared *x) {
    pthread_mutex_lock(&x->sched.lock);
    uint32_t n = x->sched.max_inflight;
    pthread_mutex_unlock(&x->sched.lock);
    return n;
}

/* The client's request slots follow the estimate: up from the plan when the link needs
 * more (at most the data connections and twice the plan), back to the plan when it needs
 * fewer, never when the number was configured. */
static void test_slots_follow(void) {
    struct s3f__xfer_shared x;
    memset(&x, 0, sizeof(x));
    x.part_size = 8 * MIB;
    x.target_gbps = 10;
    x.max_inflight = 8;
    x.data_connections = 30;
    s3f__sched_init(&x.sched, x.max_inflight);
    s3f__bdp_init(&x.bdp);
    /* 8 MiB at 25 MB/s after 20 ms: 53 needed; 16 (twice the plan) allowed */
    uint64_t body = (uint64_t)(8.0 * MIB / 25e6 * 1e9);
    for (int i = 0; i < 3; i++)
        s3f__xfer_observe(&x, 8 * MIB, 20 * MS, body);
    CHECK_INT(slots(&x), 8); /* the plan stands for the first three */
    s3f__xfer_observe(&x, 8 * MIB, 20 * MS, body);
    CHECK_INT(slots(&x), 16);
    /* the data connections bound it too */
    x.data_connections = 12;
    s3f__xfer_observe(&x, 8 * MIB, 20 * MS, body);
    CHECK_INT(slots(&x), 12);
    /* a fast link: back to the plan, not below */
    for (int i = 0; i < 60; i++)
        s3f__xfer_observe(&x, 8 * MIB, 100000, 4 * MS);
    CHECK_INT(slots(&x), 8);
    /* configured: never adapted */
    x.inflight_fixed = true;
    for (int i = 0; i < 60; i++)
        s3f__xfer_observe(&x, 8 * MIB, 20 * MS, body);
    CHECK_INT(slots(&x), 8);
    s3f__bdp_cleanup(&x.bdp);
    s3f__sched_cleanup(&x.sched);
}

int main(void) {
    RUN(test_prior);
    RUN(test_ewma);
    RUN(test_inflight);
    RUN(test_window);
    RUN(test_slots_follow);
    return test_summary();
}
