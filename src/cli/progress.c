/* Progress bar: redrawn at most every 100 ms, on one terminal line. */
#include "progress.h"

#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void human(char *buf, size_t len, double v) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void cli_progress_format(char *buf, size_t len, uint64_t done, uint64_t total, double secs) {
    char d[32], t[32], r[32];
    human(d, sizeof(d), (double)done);
    double rate = secs > 0 ? (double)done / secs : 0;
    human(r, sizeof(r), rate);
    if (total && total != UINT64_MAX) {
        human(t, sizeof(t), (double)total);
        int pct = (int)(100.0 * (double)done / (double)total);
        if (pct > 100)
            pct = 100;
        char eta[32] = "ETA --:--";
        if (rate > 0 && done <= total) {
            unsigned long s = (unsigned long)((double)(total - done) / rate + 0.5);
            snprintf(eta, sizeof(eta), "ETA %lu:%02lu", s / 60, s % 60);
        }
        snprintf(buf, len, "  %s / %s  %3d%%  %s/s  %s", d, t, pct, r, eta);
    } else {
        snprintf(buf, len, "  %s  %s/s", d, r);
    }
}

void cli_progress_init(struct cli_progress *p, bool enabled, FILE *out) {
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    p->enabled = enabled;
    p->out = out;
    p->start_ns = now_ns();
}

void cli_progress_item_init(struct cli_progress *p, struct cli_progress_item *it, uint64_t size) {
    it->p = p;
    it->done = 0;
    it->total = size;
    pthread_mutex_lock(&p->lock);
    if (size != UINT64_MAX && !p->total_fixed)
        p->total += size;
    pthread_mutex_unlock(&p->lock);
}

void cli_progress_set_total(struct cli_progress *p, uint64_t total) {
    pthread_mutex_lock(&p->lock);
    p->total = total;
    p->total_fixed = true;
    pthread_mutex_unlock(&p->lock);
}

static void draw(struct cli_progress *p, uint64_t now) {
    char line[160];
    cli_progress_format(line, sizeof(line), p->done, p->total,
                        (double)(now - p->start_ns) / 1e9);
    int n = (int)strlen(line);
    fprintf(p->out, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
    fflush(p->out);
    p->width = n;
    p->last_draw_ns = now;
}

void cli_progress_cb(void *user_data, uint64_t done, uint64_t total) {
    struct cli_progress_item *it = user_data;
    struct cli_progress *p = it->p;
    pthread_mutex_lock(&p->lock);
    if (it->total == UINT64_MAX && total != UINT64_MAX) {
        it->total = total;
        if (!p->total_fixed)
            p->total += total;
    }
    if (done > it->done) {
        p->done += done - it->done;
        it->done = done;
    }
    uint64_t now = now_ns();
    if (p->enabled && now - p->last_draw_ns >= 100000000ull)
        draw(p, now);
    pthread_mutex_unlock(&p->lock);
}

void cli_progress_item_done(struct cli_progress_item *it, uint64_t size) {
    cli_progress_cb(it, size, size);
}

static void erase(struct cli_progress *p) {
    if (p->enabled && p->width) {
        fprintf(p->out, "\r%*s\r", p->width, "");
        fflush(p->out);
        p->width = 0;
    }
}

void cli_progress_suspend(struct cli_progress *p) {
    pthread_mutex_lock(&p->lock);
    erase(p);
}

void cli_progress_resume(struct cli_progress *p) {
    fflush(stdout);
    pthread_mutex_unlock(&p->lock);
}

void cli_progress_clear(struct cli_progress *p) {
    pthread_mutex_lock(&p->lock);
    erase(p);
    pthread_mutex_unlock(&p->lock);
}

void cli_progress_finish(struct cli_progress *p) {
    cli_progress_clear(p);
    pthread_mutex_destroy(&p->lock);
}
