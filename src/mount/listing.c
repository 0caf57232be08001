/*
 * A ListObjectsV2 page's names as directory entries (see listing.h for the invariants).
 * Every key and prefix is checked to start with the asked prefix before its name is taken:
 * a server may send anything (issue 20, 9a: a common prefix shorter than the asked one was
 * read past its end).
 */
#include <string.h>

#include "listing.h"

int mnt_valid_name(const char *name, size_t len) {
    if (len == 0 || len > MNT_NAME_MAX)
        return 0;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    return memchr(name, '/', len) == NULL;
}

/* The part of `s` below `dkey` (of length lk), or NULL when `s` does not start with it. */
static const char *below(const char *s, const char *dkey, size_t lk) {
    if (!s || strncmp(s, dkey, lk) != 0)
        return NULL;
    return s + lk;
}

int mnt_page_has_dir(const struct s3f_list_page *page, const char *dkey, const char *name,
                     size_t len) {
    size_t lk = strlen(dkey);
    for (size_t j = 0; j < page->n_common_prefixes; j++) {
        const char *p = below(page->common_prefixes[j], dkey, lk);
        if (p && strncmp(p, name, len) == 0 && p[len] == '/' && !p[len + 1])
            return 1;
    }
    return 0;
}

const char *mnt_page_last(const struct s3f_list_page *page, const char *dkey) {
    if (!page->is_truncated || !page->next_continuation_token)
        return NULL;
    const char *lo = page->n_objects ? page->objects[page->n_objects - 1].key : NULL;
    const char *lp = page->n_common_prefixes ?
        page->common_prefixes[page->n_common_prefixes - 1] : NULL;
    const char *last = !lo ? lp : !lp ? lo : strcmp(lo, lp) > 0 ? lo : lp;
    return below(last, dkey, strlen(dkey));
}

int mnt_page_walk(const struct s3f_list_page *page, const char *dkey, mnt_page_fn fn,
                  void *user) {
    size_t lk = strlen(dkey);
    const char *last = mnt_page_last(page, dkey);
    size_t io = 0, ip = 0;
    while (io < page->n_objects || ip < page->n_common_prefixes) {
        const char *ok = io < page->n_objects ? page->objects[io].key : NULL;
        const char *pk = ip < page->n_common_prefixes ? page->common_prefixes[ip] : NULL;
        int rc = 0;
        if (ok && (!pk || strcmp(ok, pk) < 0)) {
            const struct s3f_list_entry *e = &page->objects[io++];
            const char *name = below(e->key, dkey, lk);
            if (!name)
                continue;
            size_t len = strlen(name);
            if (!mnt_valid_name(name, len)) /* also the directory's own marker (len 0) */
                continue;
            if (mnt_page_has_dir(page, dkey, name, len))
                continue; /* a directory of the same name on this page shadows it */
            int hold = last && strncmp(last, name, len) == 0;
            rc = fn(user, name, len, e, hold);
        } else {
            ip++;
            const char *name = below(pk, dkey, lk);
            if (!name)
                continue;
            size_t len = strlen(name);
            if (len == 0 || name[len - 1] != '/')
                continue;
            len--; /* the trailing '/' */
            if (!mnt_valid_name(name, len))
                continue;
            rc = fn(user, name, len, NULL, 0);
        }
        if (rc)
            return rc;
    }
    return 0;
}
