/* Many-object transfers of the CLI: the job pool and the listings runs are planned from.
 * See transfer.h. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "transfer.h"

#define CLI_THROTTLED_TRIES 6   /* a job answered SlowDown is run this many times at most */
#define CLI_THROTTLE_MS 200     /* requests in flight halved at most this often */
#define CLI_THROTTLE_FLOOR 8    /* ... and never below this */

/* ------------------------------------------------------------------------------------
 * The run and its jobs
 * ---------------------------------------------------------------------------------- */

int cli_run_add(struct cli_run *r, enum cli_job_kind kind, const char *src, const char *dst,
                uint64_t size) {
    if (r->n_jobs == r->cap_jobs) {
        size_t cap = r->cap_jobs ? r->cap_jobs * 2 : 64;
        struct cli_job *jobs = realloc(r->jobs, cap * sizeof(*jobs));
        if (!jobs)
            return -1;
        r->jobs = jobs;
        r->cap_jobs = cap;
    }
    struct cli_job *j = &r->jobs[r->n_jobs];
    j->kind = kind;
    j->size = size;
    j->src = src ? strdup(src) : NULL;
    j->dst = strdup(dst);
    if ((src && !j->src) || !j->dst) {
        free(j->src);
        free(j->dst);
        return -1;
    }
    r->n_jobs++;
    return 0;
}

void cli_run_init(struct cli_run *r, struct cli_ctx *ctx, const char *sb, const char *db) {
    memset(r, 0, sizeof(*r));
    r->ctx = ctx;
    r->sb = sb;
    r->db = db;
    r->dryrun = ctx->args->set[OPT_DRYRUN] != 0;
    pthread_mutex_init(&r->lock, NULL);
    /* no bar for a dry run: nothing moves */
    cli_progress_init(&r->prog, !ctx->quiet && !r->dryrun && isatty(STDERR_FILENO), stderr);
}

void cli_run_cleanup(struct cli_run *r) {
    for (size_t i = 0; i < r->n_jobs; i++) {
        free(r->jobs[i].src);
        free(r->jobs[i].dst);
    }
    free(r->jobs);
    cli_progress_finish(&r->prog);
    pthread_mutex_destroy(&r->lock);
}

void cli_run_failed(struct cli_run *r, int rc) {
    pthread_mutex_lock(&r->lock);
    r->failed++;
    r->rc = rc;
    pthread_mutex_unlock(&r->lock);
}

void cli_run_errorf(struct cli_run *r, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cli_progress_suspend(&r->prog);
    fprintf(stderr, "s3flash: %s\n", msg);
    cli_progress_resume(&r->prog);
}

/* A client that could not be created has been reported already; a closed stdout needs no
 * message. */
int cli_run_report(struct cli_run *r, const struct s3f_error *err, enum s3f_status st,
                   const char *resource) {
    if (st == S3F_ERR_ABORTED && err->status == S3F_OK)
        return CLI_EXIT_FAIL;
    if (r->ctx->client_failed)
        return CLI_EXIT_FAIL;
    struct s3f_error e = *err;
    if (e.status == S3F_OK)
        e.status = st;
    cli_progress_suspend(&r->prog);
    cli_report(&e, resource);
    cli_progress_resume(&r->prog);
    return cli_exit_for(st);
}

char *cli_s3_uri(const char *bucket, const char *key) {
    size_t n = strlen(bucket) + strlen(key) + 8;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "s3://%s/%s", bucket, key);
    return s;
}

/* A deletion job: one DeleteObject, or unlink of a local file. */
static enum s3f_status delete_one(struct cli_run *r, const struct cli_job *j,
                                  struct s3f_error *err) {
    if (!r->db[0]) {
        if (unlink(j->dst) != 0) {
            cli_error_set(err, S3F_ERR_IO, "unlink", j->dst, "%s", strerror(errno));
            return S3F_ERR_IO;
        }
        return S3F_OK;
    }
    struct s3f_client *c = cli_client(r->ctx);
    if (!c)
        return S3F_ERR_CONFIG;
    return s3f_delete_object(c, r->db, j->dst, err);
}

/* mv: remove the source of a job whose copy succeeded. */
static enum s3f_status remove_source(struct cli_run *r, const struct cli_job *j,
                                     struct s3f_error *err) {
    if (j->kind == CLI_JOB_UPLOAD) {
        if (unlink(j->src) != 0) {
            cli_error_set(err, S3F_ERR_IO, "unlink", j->src, "%s", strerror(errno));
            return S3F_ERR_IO;
        }
        return S3F_OK;
    }
    struct s3f_client *c = cli_client(r->ctx);
    if (!c)
        return S3F_ERR_CONFIG;
    return s3f_delete_object(c, r->sb, j->src, err);
}

/* The copy part of a job (upload, download or server-side copy). */
static enum s3f_status transfer_one(struct cli_run *r, const struct cli_job *j,
                                    struct cli_progress_item *item, struct s3f_error *err) {
    struct cli_ctx *ctx = r->ctx;
    switch (j->kind) {
    case CLI_JOB_UPLOAD:
        return cli_upload(ctx, j->src, r->db, j->dst, &r->prog, item, err);
    case CLI_JOB_DOWNLOAD:
        if (strcmp(j->dst, "-") != 0 && cli_mkdirs_parent(j->dst) != 0) {
            cli_error_set(err, S3F_ERR_IO, "mkdir", j->dst, "%s", strerror(errno));
            return S3F_ERR_IO;
        }
        cli_progress_item_init(&r->prog, item, UINT64_MAX);
        return cli_download_item(ctx, r->sb, j->src, j->dst, j->size, item, err);
    case CLI_JOB_COPY: {
        struct s3f_client *c = cli_client(ctx);
        if (!c)
            return S3F_ERR_CONFIG;
        /* any size: one CopyObject, or UploadPartCopy parts through the engine's request
         * slots; --part-size sets the part size (and so the threshold), else the
         * library's default for copies */
        struct s3f_copy_options co;
        memset(&co, 0, sizeof(co));
        co.part_size_bytes = ctx->engine.part_size_bytes;
        co.progress = cli_progress_cb;
        co.progress_user_data = item;
        cli_progress_item_init(&r->prog, item, UINT64_MAX);
        enum s3f_status st = s3f_copy(c, r->sb, j->src, r->db, j->dst, &co, NULL, err);
        if (st == S3F_OK)
            cli_progress_item_done(item, j->size);
        return st;
    }
    case CLI_JOB_DELETE:
        break;
    }
    return delete_one(r, j, err);
}

/* A job was answered SlowDown through all its attempts: halve the client's requests in
 * flight (at most once per CLI_THROTTLE_MS, never below CLI_THROTTLE_FLOOR), then wait
 * a random time that grows with the job's tries (up to about 2^try x 100 ms). */
static void throttled(struct cli_run *r, int tries) {
    struct s3f_client *c = cli_client(r->ctx);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t now_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    pthread_mutex_lock(&r->lock);
    if (c && now_ms - r->throttled_ms >= CLI_THROTTLE_MS) {
        r->throttled_ms = now_ms;
        struct s3f_client_stats stats;
        s3f_client_stats(c, &stats, 0);
        uint32_t n = stats.max_inflight_requests / 2;
        if (n >= CLI_THROTTLE_FLOOR)
            s3f_client_set_max_inflight_requests(c, n);
    }
    unsigned seed = (unsigned)(now.tv_nsec ^ (uintptr_t)&now);
    pthread_mutex_unlock(&r->lock);
    uint64_t wait_ms = (uint64_t)(rand_r(&seed) % 100 + 50) << (tries < 5 ? tries : 5);
    struct timespec ts = {.tv_sec = (time_t)(wait_ms / 1000),
                          .tv_nsec = (long)(wait_ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Run one job on the calling thread; returns its exit status (0 on success). */
static int run_job(struct cli_run *r, const struct cli_job *j) {
    struct cli_ctx *ctx = r->ctx;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct cli_progress_item item;
    memset(&item, 0, sizeof(item));
    item.p = &r->prog;
    item.total = UINT64_MAX;
    enum s3f_status st = S3F_OK;
    int rc = CLI_EXIT_OK;
    const char *sb = r->sb, *db = r->db;
    char *src = NULL, *dst = NULL;
    if (j->kind != CLI_JOB_DELETE)
        src = j->kind == CLI_JOB_UPLOAD ? strdup(j->src) : cli_s3_uri(sb, j->src);
    dst = (j->kind == CLI_JOB_DOWNLOAD || (j->kind == CLI_JOB_DELETE && !db[0]))
              ? strdup(j->dst)
              : cli_s3_uri(db, j->dst);
    if ((j->kind != CLI_JOB_DELETE && !src) || !dst) {
        cli_run_errorf(r, "out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    static const char *const verbs[] = {"upload", "download", "copy", "delete"};
    const char *verb = r->move && j->kind != CLI_JOB_DELETE ? "move" : verbs[j->kind];
    int to_stdout = j->kind == CLI_JOB_DOWNLOAD && strcmp(j->dst, "-") == 0;
    if (r->dryrun) {
        if (!ctx->quiet) {
            cli_progress_suspend(&r->prog);
            if (src)
                printf("(dryrun) %s: %s to %s\n", verb, src, dst);
            else
                printf("(dryrun) %s: %s\n", verb, dst);
            cli_progress_resume(&r->prog);
        }
        goto out;
    }
    /* the resource an error names when the library names none */
    const char *blame = (j->kind == CLI_JOB_UPLOAD || j->kind == CLI_JOB_DELETE) ? dst : src;
    st = transfer_one(r, j, &item, &err);
    for (int again = 1; st == S3F_ERR_THROTTLED && again < CLI_THROTTLED_TRIES; again++) {
        /* SlowDown through every attempt: the run asks more of the server than it takes
         * (S3: 3,500 PUT and 5,500 GET a second per prefix). Fewer requests in flight, a
         * pause, and the object again (its engine's retries were spent meanwhile). */
        throttled(r, again);
        s3f_error_clear(&err);
        st = transfer_one(r, j, &item, &err);
    }
    if (st == S3F_OK && r->move && j->kind != CLI_JOB_DELETE) {
        /* only now that the copy is complete: a failed copy keeps its source */
        blame = src;
        st = remove_source(r, j, &err);
    }
    if (st != S3F_OK) {
        rc = cli_run_report(r, &err, st, blame);
    } else if (!ctx->quiet && !to_stdout) {
        cli_progress_suspend(&r->prog);
        if (src)
            printf("%s: %s to %s\n", verb, src, dst);
        else
            printf("%s: %s\n", verb, dst);
        cli_progress_resume(&r->prog);
    }
out:
    free(src);
    free(dst);
    if (rc != CLI_EXIT_OK)
        cli_run_failed(r, rc);
    return rc;
}

static void *worker_main(void *arg) {
    struct cli_run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        size_t i = r->next < r->n_jobs ? r->next++ : SIZE_MAX;
        pthread_mutex_unlock(&r->lock);
        if (i == SIZE_MAX)
            return NULL;
        run_job(r, &r->jobs[i]);
    }
}

int cli_run_all(struct cli_run *r, size_t workers) {
    size_t todo = r->n_jobs - r->next;
    if (workers > todo)
        workers = todo;
    pthread_t threads[CLI_MAX_WORKERS];
    size_t started = 0;
    if (workers > 1) {
        for (; started < workers && started < CLI_MAX_WORKERS; started++)
            if (pthread_create(&threads[started], NULL, worker_main, r) != 0)
                break;
    }
    if (started == 0)
        worker_main(r); /* one job, one worker, or no thread could start */
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    if (r->failed == 0)
        return CLI_EXIT_OK;
    /* one object: its own status (2 for a bad argument); several: 1, as the AWS CLI */
    return r->n_jobs <= 1 && r->failed == 1 ? r->rc : CLI_EXIT_FAIL;
}

size_t cli_run_workers(struct cli_ctx *ctx, const struct cli_run *r) {
    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return 1;
    size_t todo = r->n_jobs - r->next;
    uint64_t bytes = 0;
    for (size_t i = r->next; i < r->n_jobs; i++)
        bytes += r->jobs[i].size;
    struct s3f_client_stats stats;
    s3f_client_stats(c, &stats, 0);
    size_t n = stats.max_inflight_requests ? stats.max_inflight_requests : 4;
    if (ctx->engine.many && !ctx->engine.max_inflight_requests && todo > n &&
        bytes / todo <= CLI_SMALL_OBJECT) {
        n = todo < CLI_MANY_INFLIGHT ? todo : CLI_MANY_INFLIGHT;
        s3f_client_set_max_inflight_requests(c, (uint32_t)n);
        s3f_client_stats(c, &stats, 0);
        n = stats.max_inflight_requests; /* clamped to the connections the client has */
    }
    return n > CLI_MAX_WORKERS ? CLI_MAX_WORKERS : n;
}

/* ------------------------------------------------------------------------------------
 * Listings
 * ---------------------------------------------------------------------------------- */

bool cli_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

char *cli_dir_prefix(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || key[n - 1] == '/')
        return strdup(key);
    return cli_strcat2(key, "/");
}

void cli_entries_free(struct cli_entries *e) {
    for (size_t i = 0; i < e->n; i++)
        free(e->items[i].rel);
    free(e->items);
    e->items = NULL;
    e->n = e->cap = 0;
}

static int entries_push(struct cli_entries *e, const char *rel, uint64_t size, int64_t mtime) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        struct cli_entry *items = realloc(e->items, cap * sizeof(*items));
        if (!items)
            return -1;
        e->items = items;
        e->cap = cap;
    }
    char *copy = strdup(rel);
    if (!copy)
        return -1;
    e->items[e->n].rel = copy;
    e->items[e->n].size = size;
    e->items[e->n].mtime = mtime;
    e->n++;
    return 0;
}

static int by_rel(const void *a, const void *b) {
    return strcmp(((const struct cli_entry *)a)->rel, ((const struct cli_entry *)b)->rel);
}

void cli_entries_sort(struct cli_entries *e) {
    if (e->n > 1)
        qsort(e->items, e->n, sizeof(*e->items), by_rel);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk(struct cli_run *r, const char *dir, const char *rel_prefix,
                const struct cli_filter *filter, struct cli_entries *out) {
    DIR *d = opendir(dir);
    if (!d) {
        cli_run_errorf(r, "opendir %s: %s", dir, strerror(errno));
        cli_run_failed(r, CLI_EXIT_FAIL);
        return 0;
    }
    struct cli_strlist names = {0};
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (cli_strlist_push(&names, de->d_name) != 0) {
            rc = -1;
            goto out;
        }
        errno = 0;
    }
    if (errno != 0) {
        cli_run_errorf(r, "readdir %s: %s", dir, strerror(errno));
        cli_run_failed(r, CLI_EXIT_FAIL);
    }
    if (names.n > 1)
        qsort(names.items, names.n, sizeof(*names.items), by_name);
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        char *path = cli_path_join(dir, names.items[i]);
        char *rel = cli_strcat2(rel_prefix, names.items[i]);
        struct stat lsb, sb;
        if (!path || !rel) {
            rc = -1;
        } else if (lstat(path, &lsb) != 0) {
            cli_run_errorf(r, "stat %s: %s", path, strerror(errno));
            cli_run_failed(r, CLI_EXIT_FAIL);
        } else if (S_ISDIR(lsb.st_mode)) {
            char *sub = cli_strcat2(rel, "/");
            rc = sub ? walk(r, path, sub, filter, out) : -1;
            free(sub);
        } else if (S_ISREG(lsb.st_mode) ||
                   (S_ISLNK(lsb.st_mode) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))) {
            const struct stat *f = S_ISREG(lsb.st_mode) ? &lsb : &sb;
            if (!filter || cli_filter_selects(filter, rel))
                rc = entries_push(out, rel, (uint64_t)f->st_size, (int64_t)f->st_mtime);
        } else if (!r->ctx->quiet) {
            cli_run_errorf(r, "skipping %s: not a regular file or directory", path);
        }
        free(path);
        free(rel);
    }
out:
    closedir(d);
    cli_strlist_free(&names);
    return rc;
}

int cli_walk_local(struct cli_run *r, const char *dir, const struct cli_filter *filter,
                   bool missing_ok, struct cli_entries *out) {
    if (missing_ok && access(dir, F_OK) != 0 && errno == ENOENT)
        return 0;
    return walk(r, dir, "", filter, out);
}

struct list_acc {
    size_t prefix_len;
    const struct cli_filter *filter;
    struct cli_entries *out;
};

static int list_acc_add(void *user, const struct s3f_list_entry *e) {
    struct list_acc *a = user;
    if (strlen(e->key) <= a->prefix_len)
        return 0; /* the "directory marker" object of the prefix itself */
    const char *rel = e->key + a->prefix_len;
    if (a->filter && !cli_filter_selects(a->filter, rel))
        return 0;
    return entries_push(a->out, rel, e->size, e->last_modified);
}

enum s3f_status cli_list_entries(struct s3f_client *c, const char *bucket, const char *prefix,
                                 int page_size, const struct cli_filter *filter,
                                 struct cli_entries *out, struct s3f_error *err) {
    struct list_acc a = {.prefix_len = strlen(prefix), .filter = filter, .out = out};
    return cli_list_each(c, bucket, prefix, page_size, list_acc_add, &a, err);
}
