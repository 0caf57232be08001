/*
 * The mount's metrics (docs/METRICS.md), in a registry of its own (the public
 * s3f_metrics_* API) rendered after the two clients' by the exporter (mount.c):
 * - every FUSE operation by type with its errno class and latency: mnt_ll_ops_metered wraps
 *   each handler of mnt_ll_ops (every handler answers its request before it returns, so
 *   the time around it is the operation's, and the errno is the one fuse_reply_err was
 *   given on this thread: fs.h routes fuse_reply_err through mnt_reply_err);
 * - the operations being handled now (the FUSE queue as the daemon sees it);
 * - the inodes and the metadata account against its budget, the prefetch's files and bytes
 *   (a collector, under fs->mu, at each snapshot), and the prefetch's hits and misses.
 * Updates are the registry's atomics: no lock on the FUSE path.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fs.h"

enum op {
    OP_INIT, OP_LOOKUP, OP_FORGET, OP_FORGET_MULTI, OP_GETATTR, OP_SETATTR, OP_READLINK,
    OP_MKNOD, OP_MKDIR, OP_UNLINK, OP_RMDIR, OP_SYMLINK, OP_RENAME, OP_LINK, OP_OPEN, OP_READ,
    OP_WRITE, OP_FLUSH, OP_RELEASE, OP_FSYNC, OP_OPENDIR, OP_READDIR, OP_READDIRPLUS,
    OP_RELEASEDIR, OP_FSYNCDIR, OP_STATFS, OP_SETXATTR, OP_GETXATTR, OP_LISTXATTR,
    OP_REMOVEXATTR, OP_CREATE, OP_GETLK, OP_SETLK, OP_FLOCK, OP_FALLOCATE
};
static const char *const op_names[] = {
    "init", "lookup", "forget", "forget_multi", "getattr", "setattr", "readlink", "mknod",
    "mkdir", "unlink", "rmdir", "symlink", "rename", "link", "open", "read", "write", "flush",
    "release", "fsync", "opendir", "readdir", "readdirplus", "releasedir", "fsyncdir",
    "statfs", "setxattr", "getxattr", "listxattr", "removexattr", "create", "getlk", "setlk",
    "flock", "fallocate", NULL};
/* the errno label: "0" (success), the errnos the mount answers, "other" */
static const int errnos[] = {0, ENOENT, EACCES, EPERM, EEXIST, EIO, EROFS, ENOTEMPTY, ESTALE,
                             EBUSY, ENOSYS, ENOTSUP, EINVAL, ENOMEM, EINTR, ENAMETOOLONG,
                             EXDEV, ENOSPC, EISDIR, ENOTDIR, EFBIG, ENODATA};
static const char *const errno_names[] = {
    "0", "ENOENT", "EACCES", "EPERM", "EEXIST", "EIO", "EROFS", "ENOTEMPTY", "ESTALE",
    "EBUSY", "ENOSYS", "ENOTSUP", "EINVAL", "ENOMEM", "EINTR", "ENAMETOOLONG", "EXDEV",
    "ENOSPC", "EISDIR", "ENOTDIR", "EFBIG", "ENODATA", "other", NULL};
static const char *const results[] = {"hit", "miss", NULL};

enum id {
    M_OPS, M_OP_SECONDS, M_IN_PROGRESS, M_INODES, M_META_BYTES, M_META_BUDGET, M_PF_FILES,
    M_PF_BYTES, M_PF_OPENS, M_COUNT
};
#define C S3F_METRIC_COUNTER
#define G S3F_METRIC_GAUGE
static const struct s3f_metric_def defs[M_COUNT] = {
    [M_OPS] = {"s3flash_fuse_operations_total",
               "FUSE operations answered, by type and errno (\"0\": success)", C,
               {"op", "errno"}, {op_names, errno_names}},
    [M_OP_SECONDS] = {"s3flash_fuse_operation_seconds", "Time to answer a FUSE operation",
                      S3F_METRIC_HISTOGRAM, {"op"}, {op_names}},
    [M_IN_PROGRESS] = {"s3flash_fuse_operations_in_progress",
                       "FUSE operations being handled now", G, {NULL}, {NULL}},
    [M_INODES] = {"s3flash_mount_inodes", "Inodes the mount holds", G, {NULL}, {NULL}},
    [M_META_BYTES] = {"s3flash_mount_metadata_bytes",
                      "Memory of the inode table, metadata and listing caches", G, {NULL},
                      {NULL}},
    [M_META_BUDGET] = {"s3flash_mount_metadata_budget_bytes",
                       "Their budget (from --memory-target)", G, {NULL}, {NULL}},
    [M_PF_FILES] = {"s3flash_mount_prefetch_files",
                    "Files fetched ahead (--prefetch-listed) and held now", G, {NULL}, {NULL}},
    [M_PF_BYTES] = {"s3flash_mount_prefetch_bytes", "Bytes of those files", G, {NULL},
                    {NULL}},
    [M_PF_OPENS] = {"s3flash_mount_prefetch_opens_total",
                    "Opens that found their file fetched ahead (hit) or not (miss)", C,
                    {"result"}, {results}},
};

static void collect(struct s3f_metrics *m, void *ud) {
    struct mnt_fs *fs = ud;
    pthread_mutex_lock(&fs->mu);
    int64_t inodes = (int64_t)fs->n_inodes, used = (int64_t)fs->mem_used,
            budget = (int64_t)fs->mem_budget;
    pthread_mutex_unlock(&fs->mu);
    uint64_t pf_bytes;
    size_t pf_files;
    mnt_pf_stats(fs, &pf_bytes, &pf_files);
    s3f_metrics_set(m, M_INODES, 0, inodes);
    s3f_metrics_set(m, M_META_BYTES, 0, used);
    s3f_metrics_set(m, M_META_BUDGET, 0, budget);
    s3f_metrics_set(m, M_PF_FILES, 0, (int64_t)pf_files);
    s3f_metrics_set(m, M_PF_BYTES, 0, (int64_t)pf_bytes);
}

struct s3f_metrics *mnt_metrics_new(struct mnt_fs *fs) {
    struct s3f_metrics *m = s3f_metrics_new(0);
    if (!m)
        return NULL;
    for (int i = 0; i < M_COUNT; i++)
        if (s3f_metrics_register(m, &defs[i]) != i)
            goto fail;
    if (s3f_metrics_add_collector(m, collect, fs) != S3F_OK)
        goto fail;
    return m;
fail:
    s3f_metrics_free(m);
    return NULL;
}

struct s3f_metrics *mnt_fs_metrics(struct mnt_fs *fs) {
    return fs->metrics;
}

void mnt_metrics_prefetch(struct mnt_fs *fs, int hit) {
    s3f_metrics_add(fs->metrics, M_PF_OPENS, hit ? 0 : 1, 1);
}

/* ---- the operations ------------------------------------------------------------------ */

static _Thread_local int reply_errno; /* of the request this thread answers */

#undef fuse_reply_err
int mnt_reply_err(fuse_req_t req, int err) {
    reply_errno = err;
    return fuse_reply_err(req, err);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t begin(struct mnt_fs *fs) {
    reply_errno = 0;
    s3f_metrics_add(fs->metrics, M_IN_PROGRESS, 0, 1);
    return now_ns();
}

static void end(struct mnt_fs *fs, enum op op, uint64_t t0) {
    double s = (double)(now_ns() - t0) / 1e9;
    size_t e = 0, n = sizeof(errnos) / sizeof(errnos[0]);
    while (e < n && errnos[e] != reply_errno)
        e++; /* n: "other" */
    s3f_metrics_add(fs->metrics, M_OPS, s3f_metrics_series(fs->metrics, M_OPS, op, e), 1);
    s3f_metrics_observe(fs->metrics, M_OP_SECONDS, op, s);
    s3f_metrics_add(fs->metrics, M_IN_PROGRESS, 0, -1);
}

/* A wrapper of handler `name` (its parameters and its arguments); `req` is the request. */
#define METERED(name, OP, params, args)                                                    \
    static void m_##name params {                                                          \
        struct mnt_fs *fs = fuse_req_userdata(req);                                        \
        uint64_t t0 = begin(fs);                                                           \
        mnt_ll_ops.name args;                                                              \
        end(fs, OP, t0);                                                                   \
    }
#define I fuse_ino_t
#define FI struct fuse_file_info *fi
METERED(lookup, OP_LOOKUP, (fuse_req_t req, I p, const char *n), (req, p, n))
METERED(forget, OP_FORGET, (fuse_req_t req, I i, uint64_t n), (req, i, n))
METERED(forget_multi, OP_FORGET_MULTI, (fuse_req_t req, size_t c, struct fuse_forget_data *f),
        (req, c, f))
METERED(getattr, OP_GETATTR, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(setattr, OP_SETATTR, (fuse_req_t req, I i, struct stat *a, int s, FI), (req, i, a, s, fi))
METERED(readlink, OP_READLINK, (fuse_req_t req, I i), (req, i))
METERED(mknod, OP_MKNOD, (fuse_req_t req, I p, const char *n, mode_t m, dev_t d),
        (req, p, n, m, d))
METERED(mkdir, OP_MKDIR, (fuse_req_t req, I p, const char *n, mode_t m), (req, p, n, m))
METERED(unlink, OP_UNLINK, (fuse_req_t req, I p, const char *n), (req, p, n))
METERED(rmdir, OP_RMDIR, (fuse_req_t req, I p, const char *n), (req, p, n))
METERED(symlink, OP_SYMLINK, (fuse_req_t req, const char *l, I p, const char *n), (req, l, p, n))
METERED(rename, OP_RENAME,
        (fuse_req_t req, I p, const char *n, I np, const char *nn, unsigned int f),
        (req, p, n, np, nn, f))
METERED(link, OP_LINK, (fuse_req_t req, I i, I np, const char *nn), (req, i, np, nn))
METERED(open, OP_OPEN, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(read, OP_READ, (fuse_req_t req, I i, size_t s, off_t o, FI), (req, i, s, o, fi))
METERED(write, OP_WRITE, (fuse_req_t req, I i, const char *b, size_t s, off_t o, FI),
        (req, i, b, s, o, fi))
METERED(flush, OP_FLUSH, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(release, OP_RELEASE, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(fsync, OP_FSYNC, (fuse_req_t req, I i, int d, FI), (req, i, d, fi))
METERED(opendir, OP_OPENDIR, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(readdir, OP_READDIR, (fuse_req_t req, I i, size_t s, off_t o, FI), (req, i, s, o, fi))
METERED(readdirplus, OP_READDIRPLUS, (fuse_req_t req, I i, size_t s, off_t o, FI),
        (req, i, s, o, fi))
METERED(releasedir, OP_RELEASEDIR, (fuse_req_t req, I i, FI), (req, i, fi))
METERED(fsyncdir, OP_FSYNCDIR, (fuse_req_t req, I i, int d, FI), (req, i, d, fi))
METERED(statfs, OP_STATFS, (fuse_req_t req, I i), (req, i))
METERED(setxattr, OP_SETXATTR,
        (fuse_req_t req, I i, const char *n, const char *v, size_t s, int f),
        (req, i, n, v, s, f))
METERED(getxattr, OP_GETXATTR, (fuse_req_t req, I i, const char *n, size_t s), (req, i, n, s))
METERED(listxattr, OP_LISTXATTR, (fuse_req_t req, I i, size_t s), (req, i, s))
METERED(removexattr, OP_REMOVEXATTR, (fuse_req_t req, I i, const char *n), (req, i, n))
METERED(create, OP_CREATE, (fuse_req_t req, I p, const char *n, mode_t m, FI), (req, p, n, m, fi))
METERED(getlk, OP_GETLK, (fuse_req_t req, I i, FI, struct flock *l), (req, i, fi, l))
METERED(setlk, OP_SETLK, (fuse_req_t req, I i, FI, struct flock *l, int s), (req, i, fi, l, s))
METERED(flock, OP_FLOCK, (fuse_req_t req, I i, FI, int o), (req, i, fi, o))
METERED(fallocate, OP_FALLOCATE, (fuse_req_t req, I i, int m, off_t o, off_t l, FI),
        (req, i, m, o, l, fi))

/* init has no request: counted, not timed as one */
static void m_init(void *userdata, struct fuse_conn_info *conn) {
    struct mnt_fs *fs = userdata;
    mnt_ll_ops.init(userdata, conn);
    s3f_metrics_add(fs->metrics, M_OPS, s3f_metrics_series(fs->metrics, M_OPS, OP_INIT, 0), 1);
}

const struct fuse_lowlevel_ops mnt_ll_ops_metered = {
    .init = m_init, .lookup = m_lookup, .forget = m_forget, .forget_multi = m_forget_multi,
    .getattr = m_getattr, .setattr = m_setattr, .readlink = m_readlink, .mknod = m_mknod,
    .mkdir = m_mkdir, .unlink = m_unlink, .rmdir = m_rmdir, .symlink = m_symlink,
    .rename = m_rename, .link = m_link, .open = m_open, .read = m_read, .write = m_write,
    .flush = m_flush, .release = m_release, .fsync = m_fsync, .opendir = m_opendir,
    .readdir = m_readdir, .readdirplus = m_readdirplus, .releasedir = m_releasedir,
    .fsyncdir = m_fsyncdir, .statfs = m_statfs, .setxattr = m_setxattr,
    .getxattr = m_getxattr, .listxattr = m_listxattr, .removexattr = m_removexattr,
    .create = m_create, .getlk = m_getlk, .setlk = m_setlk, .flock = m_flock,
    .fallocate = m_fallocate,
};
