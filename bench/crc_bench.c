/* Checksum speed: CRC32C, CRC32 (ISA-L) and CRC64NVME (each implementation) over a buffer,
 * best of several runs, in GB/s (10^9 bytes/s). Not a test: `build/bench/crc_bench [MiB]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"
#include "core/core.h"

static double best_gbps(enum s3f_checksum_algorithm alg, const uint8_t *buf, size_t n,
                        int reps, uint64_t *out) {
    double best = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = s3f__now_ns();
        struct s3f__checksum c = s3f__checksum_of(alg, buf, n);
        uint64_t t1 = s3f__now_ns();
        *out = c.crc;
        double gbps = (double)n / (double)(t1 - t0 > 0 ? t1 - t0 : 1);
        if (gbps > best)
            best = gbps;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 64;
    size_t n = mib << 20;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t x = 0x243f6a8885a308d3u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    int reps = 10;
    uint64_t v;
    printf("buffer %zu MiB, best of %d\n", mib, reps);
    printf("%-28s %8.2f GB/s\n", "CRC32C (isa-l)", best_gbps(S3F_CHECKSUM_CRC32C, buf, n, reps, &v));
    printf("%-28s %8.2f GB/s\n", "CRC32 (isa-l)", best_gbps(S3F_CHECKSUM_CRC32, buf, n, reps, &v));
    enum s3f__crc64_impl best = s3f__crc64nvme_impl();
    for (int i = S3F__CRC64_TABLE; i <= (int)best; i++) {
        s3f__crc64nvme_set_impl((enum s3f__crc64_impl)i);
        char name[64];
        snprintf(name, sizeof(name), "CRC64NVME (%s)", s3f__crc64nvme_impl_name(i));
        printf("%-28s %8.2f GB/s\n", name, best_gbps(S3F_CHECKSUM_CRC64NVME, buf, n, reps, &v));
    }
    s3f__crc64nvme_set_impl(best);
    /* combine: one per part of an upload */
    uint64_t t0 = s3f__now_ns();
    uint64_t acc = 0;
    for (int i = 0; i < 10000; i++)
        acc = s3f__crc64nvme_combine(acc, (uint64_t)i, 8u << 20);
    uint64_t t1 = s3f__now_ns();
    printf("%-28s %8.2f us (x%llx)\n", "crc64nvme_combine, 8 MiB", (double)(t1 - t0) / 1e4 / 1e3,
           (unsigned long long)(acc & 0xf));
    free(buf);
    return 0;
}
