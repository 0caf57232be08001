/* Part planning: part sizes for known and unknown lengths, and concurrency from a
 * throughput target. Pure functions. */
#include <math.h>

#include "xfer/xfer.h"

enum s3f_status s3f__plan_part_size(uint64_t size, uint64_t configured, uint64_t *part_size,
                                    struct s3f_error *err) {
    uint64_t p = configured < S3F__PART_MIN ? S3F__PART_MIN : configured;
    if (p > S3F__PART_MAX)
        p = S3F__PART_MAX;
    if (size / p + (size % p != 0) > S3F__MAX_PARTS) {
        /* smallest whole number of MiB that fits the object in 10,000 parts */
        uint64_t need = size / S3F__MAX_PARTS + (size % S3F__MAX_PARTS != 0);
        p = (need + S3F__MIB - 1) / S3F__MIB * S3F__MIB;
        if (p > S3F__PART_MAX)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "upload", NULL,
                                  "%llu bytes do not fit in 10000 parts of at most 5 GiB",
                                  (unsigned long long)size);
    }
    *part_size = p;
    return S3F_OK;
}

uint32_t s3f__plan_part_count(uint64_t size, uint64_t part_size) {
    if (size == 0 || part_size == 0)
        return 1;
    uint64_t n = size / part_size + (size % part_size != 0);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint64_t s3f__plan_stream_part_size(uint64_t base, uint64_t cap, uint32_t part_number) {
    if (part_number < 1 || part_number > S3F__MAX_PARTS)
        return 0;
    if (cap > S3F__PART_MAX)
        cap = S3F__PART_MAX;
    if (base > cap)
        base = cap;
    uint32_t doublings = (part_number - 1) / S3F__STREAM_GROWTH_PARTS; /* 0..9 */
    uint64_t p = base;
    for (uint32_t i = 0; i < doublings && p < cap; i++)
        p *= 2;
    return p < cap ? p : cap;
}

uint64_t s3f__plan_stream_capacity(uint64_t base, uint64_t cap, uint32_t n_parts) {
    uint64_t total = 0;
    if (n_parts > S3F__MAX_PARTS)
        n_parts = S3F__MAX_PARTS;
    for (uint32_t k = 1; k <= n_parts; k += S3F__STREAM_GROWTH_PARTS) {
        uint32_t in_block = n_parts - k + 1 < S3F__STREAM_GROWTH_PARTS
                                ? n_parts - k + 1
                                : S3F__STREAM_GROWTH_PARTS;
        total += (uint64_t)in_block * s3f__plan_stream_part_size(base, cap, k);
    }
    return total;
}

uint32_t s3f__plan_inflight(double gbps, uint32_t max_connections) {
    if (!(gbps > 0))
        gbps = 10;
    double n = ceil(gbps / 0.4);
    uint32_t v = n > 4096 ? 4096 : (uint32_t)n;
    if (v < 4)
        v = 4;
    if (max_connections && v > max_connections)
        v = max_connections;
    return v;
}
