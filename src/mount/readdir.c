/*
 * The readdir stream: opendir, readdir(plus) and releasedir. A directory handle walks
 * the directory's LIST pages (or a cached listing, dircache.c), holds back the files a
 * directory of the same name on the next page may shadow, and adds at the end the names
 * S3 does not list yet (local directories, files being written: the extras).
 *
 * Invariants:
 * - readdir streams: a directory handle holds one LIST page (at most --page-size names),
 *   the files held back for the next page, and, for the listing cache, a copy of the
 *   listing (dircache.c's struct listing_copy, given up past its bounds). A handle opened
 *   on a cached listing shares it. A listing of any size, and any number of handles, is
 *   served in bounded memory.
 * - An entry handed out by readdirplus with a node id is a kernel reference on that inode
 *   (nlookup + 1, taken only once the entry fits in the reply); a reply the kernel does
 *   not take (fuse_reply_buf fails: the request was interrupted, -ENOENT) gives back the
 *   reference of every entry in it. Past the memory budget,
 *   and for a name the mount changed after the page was asked for (checked when the page
 *   is read and again when each entry goes out: a page outlives readdir calls, and the
 *   kernel's directory lock only one), the entry goes out without a node id (the kernel
 *   then looks it up when it needs it): the no_id rules.
 * - struct dh is used by one request at a time (d->mu); d->mu is taken before fs->mu. Its
 *   progress is one state (enum dh_state), changed by dh_set_state only:
 *
 *       DH_NEW --first page--> DH_LISTING --last page--> DH_LISTED --extras--> DH_COMPLETE
 *          `---------- a fresh cached listing (opendir) ----^
 *       any state --rewind (readdir at offset 0, or before the page held)--> DH_NEW
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/assert.h"
#include "fs.h"

enum dh_state {
    DH_NEW,        /* nothing listed yet (opendir, or rewound) */
    DH_LISTING,    /* a page was fetched; d->token names the next one */
    DH_LISTED,     /* the listing is complete (or came whole from the cache) */
    DH_COMPLETE,   /* ... and the extras are added: nothing more to fetch */
};

struct dh {
    pthread_mutex_t mu;
    fuse_ino_t ino;
    char *path, *dkey;
    struct dent *ents;
    size_t n, cap;
    uint64_t base;        /* global index of ents[0] */
    const char *token;    /* the next page's, borrowed from seen; NULL: first or done */
    struct s3f_list_tokens *seen; /* the tokens this listing followed (a looping server) */
    enum dh_state state;  /* changed by dh_set_state only (d->mu) */
    int from_cache;       /* a mode, chosen at opendir or at a rewind: served from a cached
                           * listing (state DH_LISTED from the start) */
    struct listing *shared; /* from_cache: d->ents are its entries (not the handle's) */
    uint64_t list_gen0;   /* generation when the listing started */
    struct listing_copy all; /* the listing so far, for the listing cache (dircache.c) */
    struct dent *held;    /* files a directory of the same name on the next page shadows */
    size_t n_held, cap_held;
    char **extra;         /* local directories and files being written, from opendir */
    int *extra_seen;
    enum kind *extra_kind;
    size_t n_extra;
    uint64_t extra_gen;   /* the generation when they were taken (opendir) */
    struct dh *prev, *next;   /* in fs->dirs */
};

static const char *const dh_state_name[] = {"new", "listing", "listed", "complete"};

/* Change a handle's state (d->mu held, or a handle no other thread sees yet): only along
 * the arrows of the diagram above. */
static void dh_set_state(struct dh *d, enum dh_state to) {
    static const unsigned char allowed[4][4] = {
        /* to:         NEW LISTING LISTED COMPLETE */
        [DH_NEW]      = {1, 1, 1, 0},
        [DH_LISTING]  = {1, 0, 1, 0},
        [DH_LISTED]   = {1, 0, 0, 1},
        [DH_COMPLETE] = {1, 0, 0, 0},
    };
    S3F_ASSERT(allowed[d->state][to]);
    if (d->state != to)
        MNT_TRACE("readdir %s: %s -> %s", d->path, dh_state_name[d->state],
                dh_state_name[to]);
    d->state = to;
}
/* ---- directory handles ------------------------------------------------------------- */

/* Give back what the handle holds of the memory account: the cached listing it shares
 * and its copy for the listing cache (fs->mu held). */
static void dh_uncharge(struct mnt_fs *fs, struct dh *d) {
    S3F_ASSERT_HELD(&fs->mu);
    if (d->shared) {
        mnt_listing_unref(fs, d->shared);
        d->shared = NULL;
        d->ents = NULL; /* they were the listing's */
        d->n = d->cap = 0;
    }
    mnt_copy_uncharge(fs, &d->all);
}

/* Drop the entries in d->ents (a LIST page, or the shared listing), moving d->base on. */
static void dh_drop_page(struct mnt_fs *fs, struct dh *d) {
    d->base += d->n;
    if (d->shared) {
        pthread_mutex_lock(&fs->mu);
        mnt_listing_unref(fs, d->shared);
        pthread_mutex_unlock(&fs->mu);
        d->shared = NULL;
        d->ents = NULL;
        d->cap = 0;
    } else {
        for (size_t i = 0; i < d->n; i++)
            free(d->ents[i].name);
    }
    d->n = 0;
}

/* Back to before the first readdir (fs->mu not held unless the handle holds nothing of
 * the account: dh_uncharge done). */
static void dh_reset(struct mnt_fs *fs, struct dh *d) {
    if (d->shared || d->all.bytes) {
        S3F_ASSERT_NOT_HELD(&fs->mu);
        pthread_mutex_lock(&fs->mu);
        dh_uncharge(fs, d);
        pthread_mutex_unlock(&fs->mu);
    }
    for (size_t i = 0; i < d->n; i++)
        free(d->ents[i].name);
    d->n = 0;
    mnt_copy_clear(&d->all);
    mnt_dents_free(d->held, d->n_held);
    d->held = NULL;
    d->n_held = d->cap_held = 0;
    d->from_cache = 0;
    d->base = 0;
    s3f_list_tokens_free(d->seen);
    d->seen = NULL;
    d->token = NULL;
    dh_set_state(d, DH_NEW);
    for (size_t i = 0; i < d->n_extra; i++)
        d->extra_seen[i] = 0;
}

static void dh_free(struct mnt_fs *fs, struct dh *d) {
    if (!d)
        return;
    dh_reset(fs, d);
    free(d->ents);
    for (size_t i = 0; i < d->n_extra; i++)
        free(d->extra[i]);
    free(d->extra);
    free(d->extra_seen);
    free(d->extra_kind);
    free(d->path);
    free(d->dkey);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void mnt_dirs_free(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->dirs) {
        struct dh *d = fs->dirs;
        fs->dirs = d->next;
        dh_uncharge(fs, d); /* fs->mu is held here: dh_free then has nothing to give back */
        dh_free(fs, d);
    }
}

#ifdef S3F_TEST_HOOKS
static uint64_t dents_bytes(const struct dent *e, size_t n) {
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++)
        b += sizeof(struct dent) + strlen(e[i].name) + 1 + 16;
    return b;
}

uint64_t mnt_dirs_held(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    uint64_t b = 0;
    for (struct dh *d = fs->dirs; d; d = d->next) {
        b += dents_bytes(d->all.v, d->all.n);
        if (d->shared) {
            int first = 1; /* a listing shared by several handles is held once */
            for (struct dh *o = fs->dirs; o != d && first; o = o->next)
                first = o->shared != d->shared;
            if (first)
                b += dents_bytes(d->shared->ents, d->shared->n);
        } else if (d->from_cache && d->base == 0) {
            b += dents_bytes(d->ents, d->n); /* a copy of a cached listing */
        }
    }
    return b;
}
#endif

/* A name the listing gave: not one of d->extra to add at its end. */
static void dh_seen(struct dh *d, const char *s) {
    for (size_t i = 0; i < d->n_extra; i++)
        if (!d->extra_seen[i] && strcmp(d->extra[i], s) == 0)
            d->extra_seen[i] = 1;
}

static int dh_push(struct dh *d, const char *name, size_t len, const struct attr *a,
                   int no_id, uint64_t gen) {
    int rc = mnt_dents_append(&d->ents, &d->n, &d->cap, 256, SIZE_MAX, name, len, a, no_id, gen);
    if (rc)
        return rc;
    dh_seen(d, d->ents[d->n - 1].name);
    return 0;
}

/* Add the name below `dir` that leads to `path` to d->extra (once): `kind` when `path` is
 * a child of `dir`, else a directory. */
static void dh_extra(struct dh *d, const char *dir, const char *path, enum kind kind) {
    const char *name = path + (strcmp(dir, "/") == 0 ? 1 : strlen(dir) + 1);
    const char *slash = strchr(name, '/');
    size_t len = slash ? (size_t)(slash - name) : strlen(name);
    for (size_t i = 0; i < d->n_extra; i++)
        if (strlen(d->extra[i]) == len && memcmp(d->extra[i], name, len) == 0)
            return;
    if ((d->extra[d->n_extra] = strndup(name, len)))
        d->extra_kind[d->n_extra++] = slash ? K_DIR : kind;
}

void mnt_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    int e;
    char *path = mnt_path_of(fs, ino, &e);
    if (!path) {
        fuse_reply_err(req, e);
        return;
    }
    struct attr a;
    int rc = mnt_resolve(fs, path, &a, 0);
    if (rc || a.kind != K_DIR) {
        free(path);
        fuse_reply_err(req, rc ? -rc : ENOTDIR);
        return;
    }
    struct dh *d = calloc(1, sizeof(*d));
    if (!d) {
        free(path);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_mutex_init(&d->mu, NULL);
    d->ino = ino;
    d->path = path;
    d->dkey = strcmp(path, "/") == 0 ? strdup(fs->prefix) : mnt_key_of(fs, path, "/");
    if (!d->dkey)
        goto nomem;
    pthread_mutex_lock(&fs->mu);
    size_t n = 0;
    for (struct localdir *l = fs->localdirs; l; l = l->next)
        n += mnt_is_under(path, l->path);
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        n += mnt_is_under(path, h->path);
    d->extra = calloc(n + 1, sizeof(*d->extra));
    d->extra_seen = calloc(n + 1, sizeof(*d->extra_seen));
    d->extra_kind = calloc(n + 1, sizeof(*d->extra_kind));
    d->extra_gen = fs->gen;
    if (d->extra && d->extra_seen && d->extra_kind) {
        /* local directories and files being written, and the directories that hold them
         * deeper down (they exist whatever S3 lists: their keys may all be gone) */
        for (struct localdir *l = fs->localdirs; l; l = l->next)
            if (mnt_is_under(path, l->path))
                dh_extra(d, path, l->path, K_DIR);
        for (struct fh *h = fs->writers; h; h = h->next_writer)
            if (mnt_is_under(path, h->path))
                dh_extra(d, path, h->path, K_FILE);
        /* shared, not copied: any number of handles hold one listing */
        struct listing *l = mnt_listing_share(fs, path);
        if (l) {
            d->shared = l;
            d->ents = l->ents;
            d->n = l->n;
            for (size_t i = 0; i < l->n && d->n_extra; i++)
                dh_seen(d, l->ents[i].name);
            d->from_cache = 1;
            dh_set_state(d, DH_LISTED);
        }
    }
    if (d->extra && d->extra_seen && d->extra_kind) {
        d->next = fs->dirs;
        if (fs->dirs)
            fs->dirs->prev = d;
        fs->dirs = d;
        pthread_mutex_unlock(&fs->mu);
        fi->fh = (uint64_t)(uintptr_t)d;
        fi->cache_readdir = 0;
        if (fuse_reply_open(req, fi) != 0) {
            pthread_mutex_lock(&fs->mu);
            if (fs->dirs == d)
                fs->dirs = d->next;
            if (d->prev)
                d->prev->next = d->next;
            if (d->next)
                d->next->prev = d->prev;
            pthread_mutex_unlock(&fs->mu);
            dh_free(fs, d);
        }
        return;
    }
    pthread_mutex_unlock(&fs->mu);
nomem:
    dh_free(fs, d);
    fuse_reply_err(req, ENOMEM);
}

void mnt_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct dh *d = (struct dh *)(uintptr_t)fi->fh;
    if (d) {
        /* the kernel sends releasedir after the last readdir's reply; taking d->mu makes
         * that order visible to the sanitizers too */
        pthread_mutex_lock(&d->mu);
        pthread_mutex_unlock(&d->mu);
        pthread_mutex_lock(&fs->mu);
        if (d->prev)
            d->prev->next = d->next;
        else if (fs->dirs == d)
            fs->dirs = d->next;
        if (d->next)
            d->next->prev = d->prev;
        pthread_mutex_unlock(&fs->mu);
        dh_free(fs, d);
    }
    fuse_reply_err(req, 0);
}

/* ---- one LIST page ----------------------------------------------------------------- */

struct fetch {
    struct mnt_fs *fs;
    struct dh *d;
    uint64_t gen0;
    const struct s3f_list_page *page;
};

/* Was `name` of the directory changed by the mount after generation `gen` (when its
 * page was asked for)? Then the page's attributes of it are not handed to the kernel
 * with a node id. */
static int changed_after(struct fetch *f, const char *name, size_t len, uint64_t gen) {
    S3F_ASSERT_HELD(&f->fs->mu);
    char *cp = mnt_child_path(f->d->path, name, len);
    int changed = !cp || mnt_meta_changed_since(f->fs, cp, gen);
    free(cp);
    return changed;
}

/* Hand out the file `name` (fs->mu held), listed at generation `gen`: to the caller, to
 * the listing cache and to the metadata cache; a file being written there shows its bytes
 * so far. */
static int emit_file(struct fetch *f, const char *name, size_t len, struct attr *a,
                     uint64_t gen) {
    S3F_ASSERT_HELD(&f->fs->mu);
    struct dh *d = f->d;
    char *cp = mnt_child_path(d->path, name, len);
    struct fh *w = cp ? mnt_writer_find(f->fs, cp) : NULL;
    if (w)
        mnt_copy_drop(f->fs, &d->all); /* S3's object is the version being replaced: not for the cache */
    else
        mnt_copy_keep(f->fs, &d->all, name, len, a, d->list_gen0);
    if (w) {
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
        a->mtime = w->opened;
        a->etag[0] = 0;
    } else if (cp) {
        mnt_meta_fill(f->fs, cp, K_FILE, a->size, a->mtime, a->etag, gen);
    }
    free(cp);
    return dh_push(d, name, len, a, !w && changed_after(f, name, len, gen), gen);
}

static int dh_hold(struct dh *d, const char *name, size_t len, const struct attr *a,
                   uint64_t gen) {
    return mnt_dents_append(&d->held, &d->n_held, &d->cap_held, 8, SIZE_MAX, name, len, a, 0,
                        gen);
}

/* Hand out the directory `name` (fs->mu held). */
static int emit_dir(struct fetch *f, const char *name, size_t len) {
    S3F_ASSERT_HELD(&f->fs->mu);
    struct attr a;
    memset(&a, 0, sizeof(a));
    a.kind = K_DIR;
    int rc = dh_push(f->d, name, len, &a, 0, f->gen0);
    mnt_copy_keep(f->fs, &f->d->all, name, len, &a, f->d->list_gen0);
    char *cp = mnt_child_path(f->d->path, name, len);
    if (cp)
        mnt_meta_fill(f->fs, cp, K_DIR, 0, 0, NULL, f->gen0);
    free(cp);
    return rc;
}

/* The attributes of a listed object. */
static void obj_attr(const struct s3f_list_entry *obj, struct attr *a) {
    memset(a, 0, sizeof(*a));
    a->kind = K_FILE;
    a->size = obj->size;
    a->mtime = obj->last_modified;
    snprintf(a->etag, sizeof(a->etag), "%s", obj->etag ? obj->etag : "");
}

static int on_page_name(void *user, const char *name, size_t len,
                        const struct s3f_list_entry *obj, int hold) {
    struct fetch *f = user;
    if (!obj)
        return emit_dir(f, name, len);
    struct attr a;
    obj_attr(obj, &a);
    return hold ? dh_hold(f->d, name, len, &a, f->gen0)
                : emit_file(f, name, len, &a, f->gen0);
}

/* The listing is complete: keep it in the listing cache when nothing changed it. */
static void dh_listed(struct mnt_fs *fs, struct dh *d, int rc) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    dh_set_state(d, DH_LISTED);
    pthread_mutex_lock(&fs->mu);
    mnt_copy_done(fs, &d->all, d->path, d->list_gen0, rc == 0);
    pthread_mutex_unlock(&fs->mu);
}

/* One LIST page of the directory after `token` (NULL: the first). 0 or -errno (logged). */
static int list_page(struct mnt_fs *fs, struct dh *d, const char *token,
                     struct s3f_list_page **page) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    struct s3f_list_options lo = {.prefix = d->dkey, .delimiter = "/",
                                  .continuation_token = token,
                                  .max_keys = fs->o.page_size};
    struct s3f_error err;
    s3f_error_clear(&err);
    *page = NULL;
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, page, &err);
    if (st == S3F_OK)
        return 0;
    mnt_log_error("readdir", d->path, &err);
    return st == S3F_ERR_NOT_FOUND ? -EIO : -mnt_errno_of(st, 0);
}

/* The token of the page after `page` into *token (NULL: the listing is complete), checked
 * against the ones the listing followed: a server that hands one back again, which would
 * make readdir list forever without answering, fails it with EIO (logged). 0 or -errno. */
static int next_token(struct dh *d, const struct s3f_list_page *page,
                      struct s3f_list_tokens **seen, const char **token) {
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_list_tokens_next(seen, page, NULL, token, &err);
    if (st == S3F_OK)
        return 0;
    mnt_log_error("readdir", d->path, &err);
    return st == S3F_ERR_NO_MEMORY ? -ENOMEM : -EIO;
}

/* ---- a directory bucket's whole listing -------------------------------------------- */

/* A directory bucket lists in no order (S3 Express One Zone): a file and the directory
 * that shadows it may come on different pages, and the order differs from one listing to
 * the next. Its directories are read whole, every page, into memory bounded by the
 * memory budget (past it: ENOMEM), then sorted by name, so that readdir's offsets and
 * order are stable and a shadowed file never shows. */
struct collect {
    struct dent *v;
    size_t n, cap;
    uint64_t bytes, max;
};

static int on_collect(void *user, const char *name, size_t len,
                      const struct s3f_list_entry *obj, int hold) {
    (void)hold; /* no order: nothing to hold back for the next page */
    struct collect *c = user;
    struct attr a;
    if (obj) {
        obj_attr(obj, &a);
    } else {
        memset(&a, 0, sizeof(a));
        a.kind = K_DIR;
    }
    c->bytes += sizeof(struct dent) + len + 1 + 16;
    if (c->bytes > c->max)
        return -ENOMEM;
    return mnt_dents_append(&c->v, &c->n, &c->cap, 256, SIZE_MAX, name, len, &a, 0, 0);
}

/* By name; a directory before the file of the same name (which it shadows). */
static int dent_cmp(const void *x, const void *y) {
    const struct dent *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (int)b->a.kind - (int)a->a.kind;
}

static int dh_fetch_whole(struct mnt_fs *fs, struct dh *d) {
    struct collect c = {.max = fs->mem_budget};
    struct s3f_list_tokens *seen = NULL;
    const char *token = NULL;
    int rc = 0;
    pthread_mutex_lock(&fs->mu);
    uint64_t gen0 = fs->gen;
    pthread_mutex_unlock(&fs->mu);
    d->list_gen0 = gen0;
    for (;;) {
        struct s3f_list_page *page = NULL;
        if ((rc = list_page(fs, d, token, &page)))
            break;
        rc = mnt_page_walk(page, d->dkey, on_collect, &c);
        if (rc == 0)
            rc = next_token(d, page, &seen, &token);
        s3f_list_page_free(page);
        if (rc || !token)
            break;
    }
    s3f_list_tokens_free(seen);
    dh_set_state(d, DH_LISTING);
    if (rc == -ENOMEM && c.bytes > c.max)
        fprintf(stderr, "s3flash mount: readdir %s: the directory's listing passes the "
                        "metadata budget (1/16 of --memory-target)\n", d->path);
    if (rc == 0) {
        if (c.n > 1)
            qsort(c.v, c.n, sizeof(*c.v), dent_cmp);
        struct fetch f = {.fs = fs, .d = d, .gen0 = gen0, .page = NULL};
        pthread_mutex_lock(&fs->mu);
        for (size_t i = 0; i < c.n && rc == 0; i++) {
            struct dent *e = &c.v[i];
            if (i > 0 && strcmp(c.v[i - 1].name, e->name) == 0)
                continue; /* a file its directory shadows, or a name listed twice */
            size_t len = strlen(e->name);
            rc = e->a.kind == K_DIR ? emit_dir(&f, e->name, len)
                                    : emit_file(&f, e->name, len, &e->a, gen0);
        }
        pthread_mutex_unlock(&fs->mu);
    }
    mnt_dents_free(c.v, c.n);
    dh_listed(fs, d, rc);
    return rc;
}

/* Fetch the next LIST page into d->ents (dropping the previous page). 0 or -errno. */
static int dh_fetch(struct mnt_fs *fs, struct dh *d) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    dh_drop_page(fs, d);
    if (fs->directory_bucket)
        return dh_fetch_whole(fs, d);
    pthread_mutex_lock(&fs->mu);
    uint64_t gen0 = fs->gen;
    pthread_mutex_unlock(&fs->mu);
    if (d->state == DH_NEW)
        d->list_gen0 = gen0;
    struct s3f_list_page *page = NULL;
    int rc = list_page(fs, d, d->token, &page);
    if (rc)
        return rc;
    if (d->state == DH_NEW)
        dh_set_state(d, DH_LISTING);
    struct fetch f = {.fs = fs, .d = d, .gen0 = gen0, .page = page};
    const char *last = mnt_page_last(page, d->dkey);
    pthread_mutex_lock(&fs->mu);
    size_t n_prev = d->n_held;
    struct dent *prev = d->held;
    d->held = NULL;
    d->n_held = d->cap_held = 0;
    for (size_t i = 0; i < n_prev; i++) {
        struct dent *e = &prev[i];
        size_t len = strlen(e->name);
        if (rc || mnt_page_has_dir(page, d->dkey, e->name, len))
            continue; /* shadowed by its directory */
        if (last && strncmp(last, e->name, len) == 0)
            rc = dh_hold(d, e->name, len, &e->a, e->gen);
        else
            rc = emit_file(&f, e->name, len, &e->a, e->gen);
    }
    mnt_dents_free(prev, n_prev);
    if (rc == 0)
        rc = mnt_page_walk(page, d->dkey, on_page_name, &f);
    pthread_mutex_unlock(&fs->mu);
    int trc = next_token(d, page, &d->seen, &d->token);
    if (trc)
        rc = rc ? rc : trc;
    else if (!d->token)
        dh_listed(fs, d, rc);
    s3f_list_page_free(page);
    return rc;
}

/* The attributes of the file being written at dir/name, if one is (takes fs->mu). */
static void writer_attr(struct mnt_fs *fs, const char *dir, const char *name, struct attr *a) {
    S3F_ASSERT_NOT_HELD(&fs->mu);
    char *cp = mnt_child_path(dir, name, strlen(name));
    if (!cp)
        return;
    pthread_mutex_lock(&fs->mu);
    struct fh *w = mnt_writer_find(fs, cp);
    if (w) {
        a->size = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
        a->mtime = w->opened;
    }
    pthread_mutex_unlock(&fs->mu);
    free(cp);
}

/* ---- readdir, readdirplus ---------------------------------------------------------- */

struct reply {
    fuse_req_t req;
    struct mnt_fs *fs;
    struct dh *d;
    int plus;
    char *buf;
    size_t size, used;
    fuse_ino_t *refs;     /* the node ids whose nlookup the entries took */
    size_t n_refs, cap_refs;
};

/* Room to note one more reference an entry takes: 1, or 0 (out of memory: the entry
 * goes without a node id). */
static int reply_room(struct reply *r) {
    if (r->n_refs == r->cap_refs) {
        size_t c = r->cap_refs ? r->cap_refs * 2 : 64;
        fuse_ino_t *v = realloc(r->refs, c * sizeof(*v));
        if (!v)
            return 0;
        r->refs = v;
        r->cap_refs = c;
    }
    return 1;
}

/* A d_ino for an entry handed out without a node id (never 0: readdir(3) skips those). */
static fuse_ino_t name_ino(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (; *name; name++)
        h = (h ^ (uint8_t)*name) * 1099511628211ull;
    return (fuse_ino_t)(h | (1ull << 63));
}

/* Add one entry to the reply: 0, or 1 when it does not fit. `gen`: the generation its
 * attributes were learnt at; a name the mount changed since goes without a node id (its
 * page may be older than an unlink, a rename or a close between two readdir calls: with
 * a node id the kernel would make a dentry of a name that is gone, or of an old version,
 * after the change; the dentry a lookup gives is always the current one). */
static int add_entry(struct reply *r, const char *name, const struct attr *a, int no_id,
                     uint64_t gen, fuse_ino_t self, off_t next) {
    size_t need = r->plus ? fuse_add_direntry_plus(r->req, NULL, 0, name, NULL, 0)
                          : fuse_add_direntry(r->req, NULL, 0, name, NULL, 0);
    if (r->used + need > r->size)
        return 1;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    fuse_ino_t ino = self;
    if (!self && r->plus && !no_id) {
        char *cp = mnt_child_path(r->d->path, name, strlen(name));
        pthread_mutex_lock(&r->fs->mu);
        if (cp && !mnt_inodes_full(r->fs) && !mnt_meta_changed_since(r->fs, cp, gen) &&
            reply_room(r)) {
            struct inode *in = mnt_inode_get(r->fs, cp, a);
            if (in) {
                in->nlookup++;
                r->refs[r->n_refs++] = in->ino;
                e.ino = ino = in->ino;
                if (in->a.kind == K_FILE && in->a.etag[0] && a->etag[0] &&
                    strcmp(in->a.etag, a->etag) != 0)
                    e.ino = 0; /* cannot happen: mnt_inode_get gave that version */
            }
        }
        pthread_mutex_unlock(&r->fs->mu);
        free(cp);
    }
    mnt_fill_stat(r->fs, a, ino ? ino : name_ino(name), &e.attr);
    e.attr_timeout = e.entry_timeout = r->fs->o.metadata_ttl_s;
    if (r->plus)
        r->used += fuse_add_direntry_plus(r->req, r->buf + r->used, r->size - r->used, name,
                                          &e, next);
    else
        r->used += fuse_add_direntry(r->req, r->buf + r->used, r->size - r->used, name,
                                     &e.attr, next);
    return 0;
}

static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                           struct fuse_file_info *fi, int plus) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    struct dh *d = (struct dh *)(uintptr_t)fi->fh;
    if (!d) {
        fuse_reply_err(req, EBADF);
        return;
    }
    struct reply r = {.req = req, .fs = fs, .d = d, .plus = plus, .size = size};
    r.buf = malloc(size ? size : 1);
    if (!r.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct attr da = {.kind = K_DIR};
    int rc = 0;
    pthread_mutex_lock(&d->mu);
    if (offset == 0) {
        if (add_entry(&r, ".", &da, 1, 0, ino, 1))
            goto out;
        offset = 1;
    }
    if (offset == 1) {
        if (add_entry(&r, "..", &da, 1, 0, FUSE_ROOT_ID, 2))
            goto out;
        offset = 2;
    }
    uint64_t g = (uint64_t)offset - 2;
    if ((g < d->base || (g == 0 && d->state != DH_NEW)) && !(d->from_cache && d->base == 0))
        dh_reset(fs, d);
    int emitted = 0;
    for (;;) {
        while (g < d->base + d->n) {
            const struct dent *e = &d->ents[g - d->base];
            if (add_entry(&r, e->name, &e->a, e->no_id, e->gen, 0, (off_t)(g + 3)))
                goto out;
            mnt_pf_listed(fs, d->path, g, e->name, &e->a);
            emitted = 1;
            g++;
        }
        if (d->state == DH_COMPLETE)
            break;
        if (d->state == DH_LISTED) {
            dh_drop_page(fs, d);
            for (size_t i = 0; i < d->n_extra && rc == 0; i++) {
                if (d->extra_seen[i])
                    continue;
                struct attr a = {.kind = d->extra_kind[i], .mtime = (int64_t)time(NULL)};
                if (a.kind == K_FILE)
                    writer_attr(fs, d->path, d->extra[i], &a);
                /* as of opendir: a file closed (or unlinked) since goes without a node id */
                rc = dh_push(d, d->extra[i], strlen(d->extra[i]), &a, 0, d->extra_gen);
            }
            dh_set_state(d, DH_COMPLETE);
            if (rc)
                break;
            continue;
        }
        if (emitted)
            break; /* hand what we have to the caller before the next page */
        rc = dh_fetch(fs, d);
        if (rc)
            break;
    }
out:
    pthread_mutex_unlock(&d->mu);
    if (rc && r.used == 0) {
        fuse_reply_err(req, -rc);
    } else if (fuse_reply_buf(req, r.buf, r.used) != 0 && r.n_refs) {
        /* not delivered (the request was interrupted, -ENOENT): the kernel never saw
         * these entries and will never forget them */
        pthread_mutex_lock(&fs->mu);
        for (size_t i = 0; i < r.n_refs; i++) {
            struct inode *in = mnt_inode_find(fs, r.refs[i]);
            if (in)
                mnt_inode_unref(fs, in, 1, 0);
        }
        pthread_mutex_unlock(&fs->mu);
    }
    free(r.refs);
    free(r.buf);
}

void mnt_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    readdir_common(req, ino, size, off, fi, 0);
}

void mnt_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi) {
    readdir_common(req, ino, size, off, fi, 1);
}
