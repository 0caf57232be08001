/* Thread-safe randomness for retry jitter (not for secrets). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core.h"

static _Thread_local uint64_t rng_state;

double s3f__random_unit(void) {
    if (rng_state == 0) {
        rng_state = s3f__now_ns() ^ ((uint64_t)(uintptr_t)&rng_state << 17) ^
                    (uint64_t)pthread_self();
        if (rng_state == 0)
            rng_state = 0x9e3779b97f4a7c15ull;
    }
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (double)(r >> 11) / 9007199254740992.0;
}
