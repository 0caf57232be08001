/* Shared helpers for the libFuzzer targets in tests/fuzz (see tests/fuzz/README.md).
 * Each target defines LLVMFuzzerTestOneInput; inputs that hold several fields separate them
 * with NUL bytes (fuzz_field). */
#ifndef S3F_FUZZ_H
#define S3F_FUZZ_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A property the code under test promises; abort (a crash libFuzzer reports) when broken.
 * Not assert(): it stays on whatever the build type. */
#define FUZZ_CHECK(c)                                                                      \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);    \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated malloc'ed copy of data[0..size) (aborts on allocation failure, which is
 * the harness's, not the code's under test). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* The next NUL-terminated field of the input: *pos advances past it and its NUL. Returns a
 * malloc'ed copy (free it); the last field runs to the end of the input; past the end, "". */
static inline char *fuzz_field(const uint8_t *data, size_t size, size_t *pos) {
    size_t start = *pos < size ? *pos : size;
    const uint8_t *nul = memchr(data + start, 0, size - start);
    size_t end = nul ? (size_t)(nul - data) : size;
    *pos = nul ? end + 1 : size;
    return fuzz_cstr(data + start, end - start);
}

#endif
