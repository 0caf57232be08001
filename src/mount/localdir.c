/*
 * Local directories: the directories mkdir makes, which S3 does not hold until a file is
 * written under them (S3 has no directories, only keys with a common prefix), and mkdir
 * and rmdir themselves.
 *
 * Invariants (fs->mu guards fs->localdirs):
 * - A local directory is a directory to resolve(), to readdir (an extra of its parent's
 *   listing, readdir.c) and to rmdir, until a file under it reaches S3 (namespace.c's
 *   mnt_promote_parents makes it a directory in S3), or until rmdir removes it.
 * - A directory holds something local (mnt_holds_local) while a local directory or a
 *   file being written is under it: rmdir of it is ENOTEMPTY, whatever S3 lists.
 * - rmdir removes only a local directory that S3 lists nothing under; a directory S3
 *   holds by its marker object (key "dir/") is EPERM (the mount does not delete it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "fs.h"

/* ---- local directories (fs->mu held) ---------------------------------------------- */

struct localdir *mnt_localdir_find(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct localdir *d = fs->localdirs; d; d = d->next)
        if (strcmp(d->path, path) == 0)
            return d;
    return NULL;
}

void mnt_localdir_remove(struct mnt_fs *fs, const char *path) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct localdir **pp = &fs->localdirs; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->path, path) == 0) {
            struct localdir *d = *pp;
            *pp = d->next;
            free(d->path);
            free(d);
            return;
        }
    }
}

void mnt_localdirs_free(struct mnt_fs *fs) {
    S3F_ASSERT_HELD(&fs->mu);
    while (fs->localdirs) {
        struct localdir *d = fs->localdirs;
        fs->localdirs = d->next;
        free(d->path);
        free(d);
    }
}

int mnt_holds_local(struct mnt_fs *fs, const char *dir) {
    S3F_ASSERT_HELD(&fs->mu);
    for (struct localdir *d = fs->localdirs; d; d = d->next)
        if (mnt_is_under(dir, d->path))
            return 1;
    for (struct fh *h = fs->writers; h; h = h->next_writer)
        if (mnt_is_under(dir, h->path))
            return 1;
    return 0;
}
/* ---- mkdir, rmdir ------------------------------------------------------------------ */

void mnt_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    char *path = mnt_req_path_rw(req, fs, parent, name);
    if (!path)
        return;
    struct attr a;
    int rc = mnt_resolve(fs, path, &a, 0);
    if (rc == 0)
        rc = -EEXIST;
    else if (rc == -ENOENT)
        rc = mnt_parent_ok(fs, path);
    struct localdir *d = NULL;
    if (rc == 0) {
        d = calloc(1, sizeof(*d));
        if (!d || !(d->path = strdup(path))) {
            free(d);
            d = NULL;
            rc = -ENOMEM;
        }
    }
    if (rc == 0) {
        pthread_mutex_lock(&fs->mu);
        if (mnt_localdir_find(fs, path)) {
            rc = -EEXIST;
            free(d->path);
            free(d);
        } else {
            d->next = fs->localdirs;
            fs->localdirs = d;
            mnt_meta_expire(fs, path);
        }
        pthread_mutex_unlock(&fs->mu);
    }
    if (rc) {
        fuse_reply_err(req, -rc);
    } else {
        struct attr da = {.kind = K_DIR};
        mnt_reply_entry(req, fs, path, &da);
    }
    free(path);
}

void mnt_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct mnt_fs *fs = fuse_req_userdata(req);
    char *path = mnt_req_path_rw(req, fs, parent, name);
    if (!path)
        return;
    char *dkey = NULL;
    struct attr a;
    int rc = mnt_resolve(fs, path, &a, 0);
    if (rc)
        goto out;
    if (a.kind != K_DIR) {
        rc = -ENOTDIR;
        goto out;
    }
    pthread_mutex_lock(&fs->mu);
    int local = mnt_localdir_find(fs, path) != NULL;
    int busy = mnt_holds_local(fs, path);
    pthread_mutex_unlock(&fs->mu);
    if (busy) {
        rc = -ENOTEMPTY;
        goto out;
    }
    dkey = mnt_key_of(fs, path, "/");
    if (!dkey) {
        rc = -ENOMEM;
        goto out;
    }
    struct s3f_list_options lo = {.prefix = dkey, .max_keys = 2};
    struct s3f_list_page *page = NULL;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_list_objects_v2(fs->c, fs->bucket, &lo, &page, &err);
    if (st != S3F_OK) {
        mnt_log_error("rmdir", path, &err);
        rc = -mnt_errno_of(st, 0);
        goto out;
    }
    int marker = 0, others = 0;
    for (size_t i = 0; i < page->n_objects; i++) {
        if (strcmp(page->objects[i].key, dkey) == 0)
            marker = 1;
        else
            others = 1;
    }
    others |= page->n_common_prefixes > 0;
    s3f_list_page_free(page);
    rc = others ? -ENOTEMPTY : marker ? -EPERM : !local ? -ENOENT : 0;
    if (rc == 0) {
        pthread_mutex_lock(&fs->mu);
        mnt_localdir_remove(fs, path);
        mnt_meta_change(fs, path, K_MISSING, 0, 0, NULL);
        mnt_inode_detach(fs, path);
        pthread_mutex_unlock(&fs->mu);
    }
out:
    fuse_reply_err(req, rc ? -rc : 0);
    free(dkey);
    free(path);
}
