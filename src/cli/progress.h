/* A terminal progress bar for transfers: bytes, rate, ETA. Shared by all the transfers of a
 * command (recursive copies run several at once); callbacks come from I/O threads. */
#ifndef S3F_CLI_PROGRESS_H
#define S3F_CLI_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct cli_progress {
    pthread_mutex_t lock;
    bool enabled;          /* a terminal and not --quiet */
    FILE *out;
    uint64_t total;        /* sum of the known sizes of all transfers */
    bool total_fixed;      /* set by cli_progress_set_total: items add nothing to it */
    uint64_t done;         /* bytes finished, all transfers */
    uint64_t start_ns;
    uint64_t last_draw_ns;
    int width;             /* columns drawn last time, to erase */
};

/* Per-transfer state to pass as the progress callback's user data. */
struct cli_progress_item {
    struct cli_progress *p;
    uint64_t done;
    uint64_t total;        /* UINT64_MAX while unknown */
};

/* enabled: draw at all (the caller decides: isatty(2) && !quiet). */
void cli_progress_init(struct cli_progress *p, bool enabled, FILE *out);
/* Announce the bytes of all the transfers to come (a recursive copy knows them from its
 * listing), so that the percentage and ETA cover the whole copy from the start. */
void cli_progress_set_total(struct cli_progress *p, uint64_t total);
/* Add a transfer of `size` bytes (UINT64_MAX: unknown yet). */
void cli_progress_item_init(struct cli_progress *p, struct cli_progress_item *it, uint64_t size);
/* The s3f_progress_fn: user_data is a struct cli_progress_item. */
void cli_progress_cb(void *user_data, uint64_t done, uint64_t total);
/* Count a transfer that ran without callbacks (a server-side copy) as done. */
void cli_progress_item_done(struct cli_progress_item *it, uint64_t size);
/* Output lines of concurrent transfers: suspend takes the bar's lock and erases it; print
 * lines; resume flushes stdout and releases (the bar comes back with the next update). */
void cli_progress_suspend(struct cli_progress *p);
void cli_progress_resume(struct cli_progress *p);
/* Erase the bar (before other output) and release. */
void cli_progress_finish(struct cli_progress *p);
void cli_progress_clear(struct cli_progress *p);
/* Render one line into buf (exposed for tests): "  1.5 GiB / 3.0 GiB  50%  1.2 GiB/s  ETA 0:01" */
void cli_progress_format(char *buf, size_t len, uint64_t done, uint64_t total, double secs);

#endif
