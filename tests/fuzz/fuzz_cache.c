/* The block cache's on-disk files (src/cache/store.c), which any process of the user (or a
 * crash, or a full disk) may leave in any state: the shared byte count in v1/lock
 * (s3f__cache_counts_parse) and the start of a block file (s3f__cache_header_check).
 * The input is the file. Checked: a slot taken as valid is within the limit given and
 * within 2^55, so the sum of all of them cannot wrap (a count near 2^64 once wrapped and
 * stopped every insert); an invalid slot counts 0; a header is accepted only when it and
 * the file's size agree with the block asked for, reading nothing past the input. */
#include <string.h>

#include "cache/cache.h"
#include "fuzz.h"

static void check_counts(const uint8_t *data, size_t size, uint64_t limit) {
    struct s3f__cache_counts k;
    s3f__cache_counts_parse(data, size, limit, &k);
    uint64_t sum = 0;
    for (size_t i = 0; i < S3F__CACHE_SLOTS; i++) {
        if (!k.valid[i]) {
            FUZZ_CHECK(k.bytes[i] == 0);
            continue;
        }
        FUZZ_CHECK(k.head_ok);
        FUZZ_CHECK(k.bytes[i] <= limit && k.bytes[i] <= S3F__CACHE_COUNT_LIMIT);
        FUZZ_CHECK(sum + k.bytes[i] >= sum);
        sum += k.bytes[i];
    }
    FUZZ_CHECK(s3f__cache_counts_total(&k) == sum);
}

static void check_header(const uint8_t *data, size_t size, uint64_t file_size) {
    static const struct s3f__cache_block_id want = {"bkt", "a/key", "\"etag\"", 3000, 1024,
                                                    1024};
    uint32_t crc = 0;
    /* a copy of exactly `size` bytes, so that ASan sees any read past it */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        abort();
    if (size)
        memcpy(copy, data, size);
    const char *why = s3f__cache_header_check(copy, size, file_size, &want, &crc);
    if (!why) {
        size_t names = strlen(want.bucket) + strlen(want.key) + strlen(want.etag);
        FUZZ_CHECK(size >= S3F__CACHE_HEADER_FIXED + names);
        FUZZ_CHECK(file_size == S3F__CACHE_HEADER_FIXED + names + want.length);
        FUZZ_CHECK(memcmp(copy, "S3FCBLK1", 8) == 0);
        FUZZ_CHECK(memcmp(copy + S3F__CACHE_HEADER_FIXED, "bkta/key\"etag\"", names) == 0);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_counts(data, size, (uint64_t)1 << 40); /* a 1 TiB file system */
    check_counts(data, size, UINT64_MAX);        /* fstatvfs failed: no limit of its own */
    check_counts(data, size, 0);
    check_header(data, size, size);
    check_header(data, size, S3F__CACHE_HEADER_FIXED + 14 + 1024);
    check_header(data, size, UINT64_MAX);
    return 0;
}
