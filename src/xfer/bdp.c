/* The bandwidth-delay estimator: how many requests a client must keep in flight to fill
 * its link, from what its completed requests measured.
 *
 * Each data request that completes reports its body bytes, its first-byte latency (from
 * the moment it was started to its first body byte) and the time its body took. An upload
 * part knows no first byte (the answer comes after the whole body): it reports its whole
 * time as the body's, so its rate includes the latency, and no latency. Two
 * exponentially weighted moving averages (weight ALPHA for the newest sample, about the
 * last ten requests) keep one connection's throughput and the first-byte latency. A
 * request of S bytes then takes latency + S / throughput, so by Little's law a target
 * throughput T needs
 *
 *     in flight = ceil(T x (latency + S / throughput) / S)
 *               = ceil(T / throughput  +  T x latency / S)
 *
 * requests: the connections the bandwidth needs, plus those that wait for a first byte.
 * The caller bounds it by the connections it may use and by the memory it may fill
 * (memory / S). Until MIN_SAMPLES requests were measured the prior stands: one connection
 * to S3 carries about 0.4 Gbit/s (the AWS CRT's figure, also plan.c's) and answers after
 * about 30 ms.
 *
 * Thread-safe: samples come from the I/O threads, the readers and the scheduler read the
 * estimate. Pure arithmetic otherwise (tests/unit/test_bdp.c). docs/TRANSFER.md,
 * "Concurrency from the bandwidth-delay product". */
#include <math.h>

#include "xfer/xfer.h"

#define ALPHA 0.2
#define PRIOR_BPS 50e6          /* 0.4 Gbit/s */
#define PRIOR_LATENCY_S 0.030
#define MIN_BODY_BYTES (256u << 10) /* smaller bodies say little about throughput */
#define MIN_BODY_NS 1000000ull      /* nor do bodies that took under 1 ms */

void s3f__bdp_init(struct s3f__bdp *b) {
    pthread_mutex_init(&b->lock, NULL);
    b->conn_bps = PRIOR_BPS;
    b->latency_s = PRIOR_LATENCY_S;
    b->samples = 0;
    b->bps_samples = 0;
}

void s3f__bdp_cleanup(struct s3f__bdp *b) {
    pthread_mutex_destroy(&b->lock);
}

static double ewma(double old, double sample, uint32_t n) {
    return n == 0 ? sample : old + ALPHA * (sample - old);
}

void s3f__bdp_sample(struct s3f__bdp *b, uint64_t bytes, uint64_t latency_ns, uint64_t body_ns) {
    pthread_mutex_lock(&b->lock);
    if (latency_ns != UINT64_MAX) {
        b->latency_s = ewma(b->latency_s, (double)latency_ns / 1e9, b->samples);
        b->samples++;
    }
    if (bytes >= MIN_BODY_BYTES && body_ns >= MIN_BODY_NS) {
        double bps = (double)bytes / ((double)body_ns / 1e9);
        b->conn_bps = ewma(b->conn_bps, bps, b->bps_samples);
        b->bps_samples++;
    }
    pthread_mutex_unlock(&b->lock);
}

void s3f__bdp_get(struct s3f__bdp *b, struct s3f__bdp_estimate *out) {
    pthread_mutex_lock(&b->lock);
    out->conn_bps = b->conn_bps;
    out->latency_s = b->latency_s;
    out->samples = b->bps_samples; /* requests that measured the throughput */
    pthread_mutex_unlock(&b->lock);
}

uint32_t s3f__bdp_inflight(const struct s3f__bdp_estimate *e, double target_bps,
                           uint64_t request_bytes, uint32_t max_requests,
                           uint64_t memory_bytes) {
    if (max_requests == 0)
        max_requests = 1;
    if (request_bytes == 0)
        request_bytes = 1;
    double thr = e->conn_bps > 1 ? e->conn_bps : 1;
    double lat = e->latency_s > 0 ? e->latency_s : 0;
    double s = (double)request_bytes;
    double n = target_bps > 0 ? ceil(target_bps * (lat + s / thr) / s) : max_requests;
    uint32_t v = n >= (double)max_requests ? max_requests : n < 1 ? 1 : (uint32_t)n;
    uint64_t by_memory = memory_bytes / request_bytes;
    if (memory_bytes && by_memory < v)
        v = by_memory ? (uint32_t)by_memory : 1;
    return v;
}

void s3f__bdp_plan_window(const struct s3f__bdp_estimate *e, double target_bps,
                          uint64_t part_bytes, uint64_t min_bytes, uint32_t max_requests,
                          uint64_t budget_bytes, uint64_t *request_bytes, uint32_t *requests) {
    uint64_t s = part_bytes;
    uint32_t k = s3f__bdp_inflight(e, target_bps, s, max_requests, 0);
    if (budget_bytes && (uint64_t)k * s > budget_bytes) {
        /* smaller requests, in whole units of min_bytes, so that k of them fit */
        uint64_t unit = min_bytes ? min_bytes : 1;
        s = budget_bytes / k / unit * unit;
        if (s < unit)
            s = unit;
        if (s > part_bytes)
            s = part_bytes;
        k = s3f__bdp_inflight(e, target_bps, s, max_requests, budget_bytes);
    }
    *request_bytes = s;
    *requests = k;
}
