/* Credentials: the reference-counted snapshots with their signing keys, and the cached,
 * thread-safe provider with its refresher thread. Their values are in credentials_values.c,
 * the default chain and the local providers in credentials_chain.c, the network providers
 * in credentials_http.c and credentials_metadata.c. */
#include "auth/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/credentials_internal.h"
#include "core/assert.h"

#define OP "credentials"
#define DEFAULT_REFRESH_WINDOW_S 300
/* Cached credentials stay in use while another thread refreshes them, or when a refresh
 * fails, as long as at least this long remains. */
#define USABLE_MARGIN_S 60

/* ---- snapshots ------------------------------------------------------------------------------ */

/* Takes the strings of *c (zeroed on return). NULL when out of memory (c is then wiped). */
static struct s3f__credentials_snapshot *snapshot_new(struct s3f__credentials *c, uint64_t gen,
                                                      int64_t now) {
    struct s3f__credentials_snapshot *s = calloc(1, sizeof(*s));
    if (!s || pthread_mutex_init(&s->key_lock, NULL) != 0) {
        free(s);
        s3f__credentials_cleanup(c);
        return NULL;
    }
    s->creds = *c;
    memset(c, 0, sizeof(*c));
    s->generation = gen;
    s->fetched_at = now;
    atomic_init(&s->refs, 1);
    return s;
}

static struct s3f__credentials_snapshot *snapshot_ref(struct s3f__credentials_snapshot *s) {
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void s3f__credentials_release(struct s3f__credentials_snapshot *s) {
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    s3f__credentials_cleanup(&s->creds);
    explicit_bzero(s->keys, sizeof(s->keys));
    pthread_mutex_destroy(&s->key_lock);
    free(s);
}

enum s3f_status s3f__credentials_signing_key(struct s3f__credentials_snapshot *s,
                                             const char *date8, const char *region,
                                             const char *service, uint8_t key[32],
                                             struct s3f_error *err) {
    size_t rl = strlen(region), sl = strlen(service);
    bool cacheable = strlen(date8) == 8 && rl <= S3F__SIGV4_NAME_MAX && sl <= S3F__SIGV4_NAME_MAX;
    if (cacheable) {
        pthread_mutex_lock(&s->key_lock);
        for (size_t i = 0; i < S3F_ARRAY_LEN(s->keys); i++) {
            const struct s3f__signing_key_slot *k = &s->keys[i];
            if (k->used && memcmp(k->date, date8, 8) == 0 && strcmp(k->region, region) == 0 &&
                strcmp(k->service, service) == 0) {
                memcpy(key, k->key, 32);
                s->key_hits++;
                pthread_mutex_unlock(&s->key_lock);
                return S3F_OK;
            }
        }
        pthread_mutex_unlock(&s->key_lock);
    }
    enum s3f_status st = s3f__sigv4_derive_key(s->creds.secret_access_key, date8, region,
                                               service, key, err);
    if (st || !cacheable)
        return st;
    pthread_mutex_lock(&s->key_lock);
    struct s3f__signing_key_slot *k = &s->keys[s->next_key++ % S3F_ARRAY_LEN(s->keys)];
    memcpy(k->date, date8, 8);
    k->date[8] = '\0';
    memcpy(k->region, region, rl + 1);
    memcpy(k->service, service, sl + 1);
    memcpy(k->key, key, 32);
    k->used = true;
    s->key_derivations++;
    pthread_mutex_unlock(&s->key_lock);
    return S3F_OK;
}

/* ---- the provider ---------------------------------------------------------------------------
 * One immutable snapshot is current at a time. Requests take a reference to it
 * (s3f__credentials_acquire) and never run a provider while it is usable. Temporary
 * credentials are refreshed by the provider's refresher thread (started with the first
 * temporary snapshot) before they stop being usable. Only a caller that finds no usable
 * snapshot at all (the first request, credentials that expired or were rejected by the
 * server) fetches in the foreground, while the other such callers wait for its result. */

/* The refresher thread's life: NONE (not started, or a failed start, or the parent's in a
 * forked child) -> RUNNING -> STOPPING (s3f__credentials_provider_free: the end; requests
 * fail, nothing starts again). NONE -> STOPPING when freed without one. */
enum refresher_state { REFRESHER_NONE, REFRESHER_RUNNING, REFRESHER_STOPPING };
/* What the refresher is asked to do before its timer: nothing; REFRESH now
 * (s3f__credentials_refresh_now); or a DEMAND, a request has no usable credentials (a
 * refresh_now does not lower it). The refresher takes the order when it fetches (-> NONE). */
enum refresher_order { ORDER_NONE, ORDER_REFRESH, ORDER_DEMAND };

struct s3f__credentials_provider {
    /* immutable after creation */
    struct s3f__chain_settings *settings; /* NULL for a static provider (empty, never
                                           * read, for a fetch_fn provider) */
    s3f__credentials_fetch_fn fetch;      /* a fetch_fn provider's (S3 Express sessions) */
    void *fetch_ud;
    int64_t refresh_window_s;
    int64_t usable_margin_s;
    const struct s3f__logger *logger;
    atomic_bool cancel;       /* set by _free: a running credential_process is killed */

    pthread_mutex_t lock;
    pthread_cond_t cond;      /* a fetch completed (broadcast), or stop */
    pthread_cond_t wake;      /* the refresher: new snapshot, stop (CLOCK_MONOTONIC) */
    /* synced: guarded by lock */
    struct {
        struct s3f__credentials_snapshot *current; /* NULL before the first fetch */
        bool invalid;           /* the server rejected current's token */
        bool fetching;          /* a thread is fetching, outside the lock */
        uint64_t completed;     /* fetches completed (success or not) */
        uint64_t next_gen;      /* generation of the next snapshot */
        enum s3f_status last_status;
        struct s3f_error last_err;
        int chosen;             /* provider of the chain that answered; -1 before */
        uint64_t fetches;
        uint64_t background_fetches;
        /* the refresher thread (refresher_set) */
        enum refresher_state refresher;
        pid_t thread_pid;       /* a forked child has no refresher: it starts its own */
        pthread_t thread;
        enum refresher_order order; /* what it is asked to do now (order_set) */
        int failures;           /* consecutive background failures */
        int64_t retry_at;       /* wall seconds: no background fetch before */
        struct s3f__credentials_waiter *waiters; /* parked requests, for the next fetch */
    } synced;
};

/* The one place the refresher's state changes (p->lock held): checked, logged at TRACE. */
static void refresher_set(struct s3f__credentials_provider *p, enum refresher_state to) {
    static const char *const name[] = {"none", "running", "stopping"};
    S3F_ASSERT_HELD(&p->lock);
    enum refresher_state from = p->synced.refresher;
    S3F_ASSERT(from != REFRESHER_STOPPING); /* the end: nothing starts after _free */
    S3F_ASSERT(from != to);
    s3f__log(p->logger, S3F_LOG_TRACE, "credentials: refresher %s -> %s", name[from], name[to]);
    p->synced.refresher = to;
}

/* The one place the refresher's order changes (p->lock held): a DEMAND is never lowered
 * to a REFRESH (a request waits for it); checked, logged at TRACE. */
static void order_set(struct s3f__credentials_provider *p, enum refresher_order to) {
    static const char *const name[] = {"none", "refresh", "demand"};
    S3F_ASSERT_HELD(&p->lock);
    enum refresher_order from = p->synced.order;
    S3F_ASSERT(!(from == ORDER_DEMAND && to == ORDER_REFRESH));
    if (from == to)
        return;
    s3f__log(p->logger, S3F_LOG_TRACE, "credentials: refresher order %s -> %s", name[from],
             name[to]);
    p->synced.order = to;
}

/* Take the parked requests (lock held); call them with call_waiters once it is released. */
static struct s3f__credentials_waiter *take_waiters(struct s3f__credentials_provider *p) {
    S3F_ASSERT_HELD(&p->lock);
    struct s3f__credentials_waiter *w = p->synced.waiters;
    p->synced.waiters = NULL;
    return w;
}

static void call_waiters(struct s3f__credentials_provider *p, struct s3f__credentials_waiter *w) {
    S3F_ASSERT_NOT_HELD(&p->lock); /* the waiters re-queue requests: never under the lock */
    while (w) {
        struct s3f__credentials_waiter *next = w->next;
        w->next = NULL;
        w->ready(w); /* may park again: a new list, not this one */
        w = next;
    }
}

static enum s3f_status provider_alloc(struct s3f__credentials_provider **out,
                                      struct s3f_error *err) {
    struct s3f__credentials_provider *p = calloc(1, sizeof(*p));
    if (!p)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    int m = pthread_mutex_init(&p->lock, NULL);
    int c1 = m == 0 ? pthread_cond_init(&p->cond, NULL) : -1;
    int c2 = c1 == 0 ? s3f__cond_init_monotonic(&p->wake) : -1;
    if (c2 != 0) {
        if (c1 == 0)
            pthread_cond_destroy(&p->cond);
        if (m == 0)
            pthread_mutex_destroy(&p->lock);
        free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "pthread init failed");
    }
    atomic_init(&p->cancel, false);
    p->refresh_window_s = DEFAULT_REFRESH_WINDOW_S;
    p->usable_margin_s = USABLE_MARGIN_S;
    p->synced.chosen = -1;
    p->synced.next_gen = 1;
    *out = p;
    return S3F_OK;
}

void s3f__credentials_provider_free(struct s3f__credentials_provider *p) {
    if (!p)
        return;
    atomic_store(&p->cancel, true);
    pthread_mutex_lock(&p->lock);
    bool join = p->synced.refresher == REFRESHER_RUNNING && p->synced.thread_pid == getpid();
    refresher_set(p, REFRESHER_STOPPING);
    pthread_cond_broadcast(&p->wake);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (join)
        pthread_join(p->synced.thread, NULL);
    /* none should be left (calls in flight must have returned); each learns of the stop */
    pthread_mutex_lock(&p->lock);
    struct s3f__credentials_waiter *ws = take_waiters(p);
    pthread_mutex_unlock(&p->lock);
    call_waiters(p, ws);
    s3f__credentials_release(p->synced.current);
    s3f__chain_settings_free(p->settings);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

enum s3f_status s3f__credentials_provider_new_static(const char *akid, const char *secret,
                                                     const char *token,
                                                     struct s3f__credentials_provider **out,
                                                     struct s3f_error *err) {
    *out = NULL;
    if (!akid || !*akid || !secret || !*secret)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, "static",
                              "static credentials need an access key id and a secret key");
    struct s3f__credentials_provider *p;
    enum s3f_status st = provider_alloc(&p, err);
    if (st)
        return st;
    struct s3f__credentials c;
    if (s3f__credentials_set(&c, akid, secret, token, 0, "static") ||
        !(p->synced.current = snapshot_new(&c, p->synced.next_gen++, s3f__wall_time_s()))) {
        s3f__credentials_provider_free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    *out = p;
    return S3F_OK;
}

enum s3f_status s3f__credentials_provider_new_default(const struct s3f__credentials_options *o,
                                                      struct s3f__credentials_provider **out,
                                                      struct s3f_error *err) {
    *out = NULL;
    struct s3f__aws_config *loaded = NULL;
    const struct s3f__aws_config *c = o ? o->config : NULL;
    enum s3f_status st;
    if (!c) {
        if ((st = s3f__aws_config_load(o ? o->profile : NULL, &loaded, err)))
            return st;
        c = loaded;
    }
    struct s3f__credentials_provider *p = NULL;
    if ((st = provider_alloc(&p, err)))
        goto out;
    if ((st = s3f__chain_settings_new(o, c, &p->settings, err)))
        goto out;
    p->settings->cancel = &p->cancel;
    if (o && o->refresh_window_s)
        p->refresh_window_s = o->refresh_window_s;
    if (p->usable_margin_s > p->refresh_window_s)
        p->usable_margin_s = p->refresh_window_s;
    p->logger = o ? o->logger : NULL;
out:
    s3f__aws_config_free(loaded);
    if (st)
        s3f__credentials_provider_free(p);
    else
        *out = p;
    return st;
}

enum s3f_status s3f__credentials_provider_new_fn(s3f__credentials_fetch_fn fetch, void *ud,
                                                 uint32_t refresh_window_s,
                                                 const struct s3f__logger *logger,
                                                 struct s3f__credentials_provider **out,
                                                 struct s3f_error *err) {
    *out = NULL;
    if (!fetch)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no fetch function");
    struct s3f__credentials_provider *p;
    enum s3f_status st = provider_alloc(&p, err);
    if (st)
        return st;
    /* empty settings: every "!p->settings" (a static provider) test stays false for it */
    if (!(p->settings = calloc(1, sizeof(*p->settings)))) {
        s3f__credentials_provider_free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    p->settings->cancel = &p->cancel;
    p->settings->logger = logger;
    p->fetch = fetch;
    p->fetch_ud = ud;
    if (refresh_window_s)
        p->refresh_window_s = refresh_window_s;
    if (p->usable_margin_s > p->refresh_window_s)
        p->usable_margin_s = p->refresh_window_s;
    p->logger = logger;
    *out = p;
    return S3F_OK;
}

static int64_t lifetime_of(const struct s3f__credentials_snapshot *s) {
    int64_t l = s->creds.expiration - s->fetched_at;
    return l > 0 ? l : 0;
}

/* Whether requests may still be signed with s: more than min(60 s, lifetime / 8) left. */
static bool snapshot_usable(const struct s3f__credentials_provider *p,
                            const struct s3f__credentials_snapshot *s, int64_t now) {
    if (s->creds.expiration == 0)
        return true;
    int64_t margin = lifetime_of(s) / 8;
    if (margin > p->usable_margin_s)
        margin = p->usable_margin_s;
    return now < s->creds.expiration - margin;
}

/* When the refresher replaces s: min(refresh_window_s, lifetime / 2) before it expires. */
static int64_t refresh_at(const struct s3f__credentials_provider *p,
                          const struct s3f__credentials_snapshot *s) {
    int64_t margin = lifetime_of(s) / 2;
    if (margin > p->refresh_window_s)
        margin = p->refresh_window_s;
    return s->creds.expiration - margin;
}

/* Run the chain (or the provider that answered before) outside the lock. */
static enum s3f_status fetch_unlocked(struct s3f__credentials_provider *p, int only,
                                      struct s3f__credentials *fresh, int *chosen,
                                      struct s3f_error *ferr) {
    S3F_ASSERT_NOT_HELD(&p->lock);
    memset(fresh, 0, sizeof(*fresh));
    s3f_error_clear(ferr);
    *chosen = -1;
    enum s3f_status st = p->fetch ? p->fetch(p->fetch_ud, fresh, ferr)
                                  : s3f__chain_run(p->settings, only, fresh, chosen, ferr);
    if (st == S3F_OK)
        s3f__log(p->logger, S3F_LOG_DEBUG, "credentials: from %s%s", fresh->source,
                 fresh->expiration ? " (temporary)" : "");
    return st;
}

/* Under the lock: record the outcome of a fetch, install its snapshot, wake the waiters. */
static enum s3f_status fetch_done(struct s3f__credentials_provider *p, enum s3f_status st,
                                  struct s3f__credentials *fresh, int chosen,
                                  struct s3f_error *ferr) {
    S3F_ASSERT_HELD(&p->lock);
    S3F_ASSERT(p->synced.fetching);
    if (st == S3F_OK) {
        struct s3f__credentials_snapshot *s =
            snapshot_new(fresh, p->synced.next_gen++, s3f__wall_time_s());
        if (s) {
            s3f__credentials_release(p->synced.current);
            p->synced.current = s;
            p->synced.invalid = false;
            p->synced.chosen = chosen;
        } else {
            st = s3f__error_set(ferr, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        }
    }
    p->synced.fetches++;
    p->synced.completed++;
    p->synced.fetching = false;
    p->synced.last_status = st;
    p->synced.last_err = *ferr;
    pthread_cond_broadcast(&p->cond);
    pthread_cond_broadcast(&p->wake);
    return st;
}

static void *refresher_main(void *arg);

/* Under the lock: start the refresher if this process has none (lazily, with the first
 * temporary snapshot; again in a forked child). A failure is logged; requests then fetch
 * in the foreground once the credentials are no longer usable. */
static void ensure_refresher(struct s3f__credentials_provider *p) {
    S3F_ASSERT_HELD(&p->lock);
    enum refresher_state rs = p->synced.refresher;
    if (!p->settings || rs == REFRESHER_STOPPING ||
        (rs == REFRESHER_RUNNING && p->synced.thread_pid == getpid()))
        return;
    if (rs == REFRESHER_RUNNING) {
        p->synced.waiters = NULL; /* a forked child: those are the parent's requests */
        refresher_set(p, REFRESHER_NONE);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signal */
    int rc = pthread_create(&p->synced.thread, NULL, refresher_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        s3f__log(p->logger, S3F_LOG_WARN,
                 "credentials: cannot start the refresher thread (%s); refreshing on demand",
                 strerror(rc));
        p->synced.thread_pid = getpid(); /* do not try again in this process */
        return;
    }
    refresher_set(p, REFRESHER_RUNNING);
    p->synced.thread_pid = getpid();
}

/* The wall clock in ms, on the same (possibly offset, in tests) clock as
 * s3f__wall_time_s: a refresh due at second X starts at X.000, not up to a second late. */
static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t off = s3f__wall_time_s() - (int64_t)ts.tv_sec; /* 0 unless a test clock offset */
    return ((int64_t)ts.tv_sec + off) * 1000 + ts.tv_nsec / 1000000;
}

/* Wait on p->wake until wall second `due` (at most 60 s; lock held). */
static void wake_wait_until(struct s3f__credentials_provider *p, int64_t due) {
    S3F_ASSERT_HELD(&p->lock);
    int64_t ms = due * 1000 - wall_ms();
    if (ms > 60000)
        ms = 60000;
    if (ms < 1)
        ms = 1;
    struct timespec ts = s3f__deadline_ms((uint64_t)ms);
    pthread_cond_timedwait(&p->wake, &p->lock, &ts);
}

static void *refresher_main(void *arg) {
    struct s3f__credentials_provider *p = arg;
    pthread_mutex_lock(&p->lock);
    while (p->synced.refresher != REFRESHER_STOPPING) {
        struct s3f__credentials_snapshot *cur = p->synced.current;
        int64_t now = s3f__wall_time_s();
        int64_t due;
        if (p->synced.fetching) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        } else if (p->synced.order != ORDER_NONE) {
            due = now; /* a request has no usable credentials, or refresh_now */
        } else if (!cur || cur->creds.expiration == 0) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        } else {
            due = refresh_at(p, cur);
            if (p->synced.retry_at > due)
                due = p->synced.retry_at;
        }
        if (now < due) {
            wake_wait_until(p, due);
            continue;
        }
        p->synced.fetching = true;
        bool demanded = p->synced.order == ORDER_DEMAND;
        order_set(p, ORDER_NONE);
        int only = p->synced.chosen;
        pthread_mutex_unlock(&p->lock);

        struct s3f__credentials fresh;
        struct s3f_error ferr;
        int chosen;
        enum s3f_status st = fetch_unlocked(p, only, &fresh, &chosen, &ferr);

        pthread_mutex_lock(&p->lock);
        if (!demanded)
            p->synced.background_fetches++;
        st = fetch_done(p, st, &fresh, chosen, &ferr);
        struct s3f__credentials_waiter *ws = take_waiters(p);
        if (ws) { /* parked requests are re-queued from here, never under the lock */
            pthread_mutex_unlock(&p->lock);
            call_waiters(p, ws);
            pthread_mutex_lock(&p->lock);
        }
        if (p->synced.refresher == REFRESHER_STOPPING)
            break; /* cancelled by _free */
        now = s3f__wall_time_s();
        cur = p->synced.current;
        bool again = st != S3F_OK || (cur && cur->creds.expiration && refresh_at(p, cur) <= now);
        if (again) {
            /* failed, or the provider still hands out the credentials due for refresh:
             * try again after a backoff (1, 2, 4 ... 60 s), on this thread's timer */
            int f = p->synced.failures < 6 ? p->synced.failures : 6;
            p->synced.failures++;
            p->synced.retry_at = now + ((int64_t)1 << f);
            if (st != S3F_OK && !demanded)
                s3f__log(p->logger, S3F_LOG_WARN,
                         "credentials: background refresh failed (%s: %s); retrying in %" PRId64
                         " s, the current credentials stay in use while they are valid",
                         s3f_status_name(st), ferr.message, p->synced.retry_at - now);
        } else {
            p->synced.failures = 0;
            p->synced.retry_at = 0;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

enum s3f_status s3f__credentials_acquire(struct s3f__credentials_provider *p,
                                         struct s3f__credentials_snapshot **out,
                                         struct s3f_error *err) {
    *out = NULL;
    if (!p)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no provider");
    enum s3f_status st = S3F_OK;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        int64_t now = s3f__wall_time_s();
        struct s3f__credentials_snapshot *cur = p->synced.current;
        if (cur && (!p->settings || (!p->synced.invalid && snapshot_usable(p, cur, now)))) {
            if (cur->creds.expiration)
                ensure_refresher(p);
            *out = snapshot_ref(cur);
            break;
        }
        if (p->synced.refresher == REFRESHER_STOPPING) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "the client is being freed");
            break;
        }
        /* No usable credentials at all: block until a fetch completes. The refresher
         * fetches (so a provider, its retries and their backoff never run on this thread,
         * which may be an I/O thread); without one, this thread fetches. Either way one
         * fetch serves every waiting caller. */
        if (!p->synced.fetching) {
            ensure_refresher(p);
            if (p->synced.refresher == REFRESHER_RUNNING) {
                order_set(p, ORDER_DEMAND);
                pthread_cond_broadcast(&p->wake);
            } else {
                p->synced.fetching = true;
                int only = p->synced.chosen;
                pthread_mutex_unlock(&p->lock);
                struct s3f__credentials fresh;
                struct s3f_error ferr;
                int chosen;
                st = fetch_unlocked(p, only, &fresh, &chosen, &ferr);
                pthread_mutex_lock(&p->lock);
                st = fetch_done(p, st, &fresh, chosen, &ferr);
                struct s3f__credentials_waiter *ws = take_waiters(p);
                if (ws) {
                    pthread_mutex_unlock(&p->lock);
                    call_waiters(p, ws);
                    pthread_mutex_lock(&p->lock);
                }
                if (st) {
                    if (err)
                        *err = ferr;
                    break;
                }
                continue;
            }
        }
        uint64_t seen = p->synced.completed;
        while (p->synced.completed == seen && p->synced.refresher != REFRESHER_STOPPING)
            pthread_cond_wait(&p->cond, &p->lock);
        cur = p->synced.current;
        if (p->synced.completed != seen && p->synced.last_status != S3F_OK &&
            !(cur && !p->synced.invalid && snapshot_usable(p, cur, s3f__wall_time_s()))) {
            st = p->synced.last_status;
            if (err)
                *err = p->synced.last_err;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

enum s3f_status s3f__credentials_acquire_or_park(struct s3f__credentials_provider *p,
                                                 struct s3f__credentials_snapshot **out,
                                                 struct s3f__credentials_waiter *w,
                                                 bool *parked, struct s3f_error *err) {
    *out = NULL;
    *parked = false;
    if (!p)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no provider");
    enum s3f_status st = S3F_OK;
    pthread_mutex_lock(&p->lock);
    struct s3f__credentials_snapshot *cur = p->synced.current;
    if (cur && (!p->settings || (!p->synced.invalid &&
                                 snapshot_usable(p, cur, s3f__wall_time_s())))) {
        if (cur->creds.expiration)
            ensure_refresher(p);
        *out = snapshot_ref(cur);
        w->parked_before = false;
        goto out;
    }
    if (p->synced.refresher == REFRESHER_STOPPING) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "the client is being freed");
        goto out;
    }
    if (w->parked_before && p->synced.completed != w->seen &&
        p->synced.last_status != S3F_OK) {
        /* the fetch this request waited for failed: that is its error */
        w->parked_before = false;
        st = p->synced.last_status;
        if (err)
            *err = p->synced.last_err;
        goto out;
    }
    ensure_refresher(p);
    if (p->synced.refresher != REFRESHER_RUNNING) {
        pthread_mutex_unlock(&p->lock);
        return s3f__credentials_acquire(p, out, err); /* no refresher: fetch here */
    }
    if (!p->synced.fetching) {
        order_set(p, ORDER_DEMAND);
        pthread_cond_broadcast(&p->wake);
    }
    w->seen = p->synced.completed;
    w->parked_before = true;
    w->next = p->synced.waiters;
    p->synced.waiters = w;
    *parked = true;
out:
    pthread_mutex_unlock(&p->lock);
    return st;
}

void s3f__credentials_invalidate(struct s3f__credentials_provider *p, uint64_t generation) {
    if (!p || !p->settings)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->synced.current && p->synced.current->generation == generation &&
        !p->synced.invalid) {
        p->synced.invalid = true;
        s3f__log(p->logger, S3F_LOG_INFO,
                 "credentials: the server rejected the token from %s; fetching new ones",
                 p->synced.current->creds.source);
    }
    pthread_mutex_unlock(&p->lock);
}

void s3f__credentials_refresh_now(struct s3f__credentials_provider *p) {
    if (!p || !p->settings)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->synced.order == ORDER_NONE)
        order_set(p, ORDER_REFRESH); /* a DEMAND stays one */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

enum s3f_status s3f__credentials_get(struct s3f__credentials_provider *p,
                                     struct s3f__credentials *out, struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    struct s3f__credentials_snapshot *s;
    enum s3f_status st = s3f__credentials_acquire(p, &s, err);
    if (st)
        return st;
    if (s3f__credentials_copy(out, &s->creds))
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    s3f__credentials_release(s);
    return st;
}

uint64_t s3f__credentials_provider_fetch_count(struct s3f__credentials_provider *p) {
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->synced.fetches;
    pthread_mutex_unlock(&p->lock);
    return n;
}

uint64_t s3f__credentials_provider_background_count(struct s3f__credentials_provider *p) {
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->synced.background_fetches;
    pthread_mutex_unlock(&p->lock);
    return n;
}
