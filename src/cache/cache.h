/* The node-local block cache (docs/CACHE.md): fixed-size blocks of S3 objects kept in files
 * under a directory, keyed by bucket, key, ETag, object size and block index, each checked
 * by its CRC32C on every read, evicted least recently used first under a byte limit and a
 * free-space floor, shared by the processes of one node, kept across restarts.
 *
 * What it owns and may call: store.c (the block files, their format, eviction) uses only
 * src/core and libc; io.c (the cache's users in the engine: the reader's block-aligned
 * reads, whole-object downloads served or filled) uses the store and the public API
 * (s3f_head_object, s3f_get_object). src/xfer calls the functions below; nothing here
 * calls src/xfer.
 *
 * Errors of the cache never fail a caller's read: a block that cannot be read, checked or
 * written is a miss (or not inserted), counted in `errors`, and the first cause is logged
 * once per cache (a WARN line naming the file or directory and errno; never a secret). */
#ifndef S3F_CACHE_H
#define S3F_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#define S3F__CACHE_BLOCK_DEFAULT ((uint64_t)1 << 20)
#define S3F__CACHE_BLOCK_MIN ((uint64_t)64 << 10)
#define S3F__CACHE_BLOCK_MAX ((uint64_t)64 << 20)
#define S3F__CACHE_MAX_DEFAULT ((uint64_t)10 << 30)
#define S3F__CACHE_FREE_PERCENT_DEFAULT 5

struct s3f__cache_options {
    const char *dir;              /* created (with parents' last level) if missing */
    uint64_t max_bytes;           /* 0: S3F__CACHE_MAX_DEFAULT */
    uint64_t min_free_bytes;      /* 0: 5% of the file system */
    uint64_t block_bytes;         /* 0: 1 MiB; a power of two, 64 KiB to 64 MiB */
    const struct s3f__logger *logger; /* must outlive the cache; NULL: silent */
    const char *scope;            /* part of every block's identity: the endpoint URL ("" or
                                     NULL: AWS), so that two services' objects never meet */
};

struct s3f__cache;

/* Open (create) the cache directory. S3F_ERR_INVALID_ARGUMENT for a bad block size,
 * S3F_ERR_IO when the directory cannot be created or written, S3F_ERR_NO_MEMORY.
 * Thread-safe once open: every function below may be called from any thread. */
enum s3f_status s3f__cache_open(const struct s3f__cache_options *o, struct s3f__cache **out,
                                struct s3f_error *err);
void s3f__cache_free(struct s3f__cache *c); /* NULL ok; leaves the files */
uint64_t s3f__cache_block_bytes(const struct s3f__cache *c);

/* One object version as the cache knows it (the identity of its blocks). Plain state, one
 * per reader or download; not shared between threads. */
struct s3f__cache_object {
    struct s3f__cache *cache;
    char *bucket, *key, *etag;
    uint64_t size;
    char *dir;                    /* <cache>/v1/<2 hex>/<64 hex>, malloc'ed */
    char *scratch;                /* one block, allocated on first need */
    uint64_t scratch_block;       /* the block scratch holds (checked), UINT64_MAX: none */
};
/* S3F_ERR_NO_MEMORY (o is then empty; cleanup is still safe). */
enum s3f_status s3f__cache_object_init(struct s3f__cache_object *o, struct s3f__cache *c,
                                       const char *bucket, const char *key, const char *etag,
                                       uint64_t size);
void s3f__cache_object_cleanup(struct s3f__cache_object *o);
/* Bytes of block `index` (the last one may be shorter; 0 past the end). */
uint64_t s3f__cache_block_len(const struct s3f__cache_object *o, uint64_t index);

/* Read block `index` into dst (s3f__cache_block_len bytes). true on a hit: the header
 * matched and the data's CRC32C too; the block's time is touched (LRU). A block that
 * fails the checks is unlinked and is a miss. */
bool s3f__cache_get(struct s3f__cache_object *o, uint64_t index, void *dst);
/* Whether block `index` has a file (no check of its content; a later get may miss). */
bool s3f__cache_has(struct s3f__cache_object *o, uint64_t index);
/* Insert block `index` (s3f__cache_block_len bytes of data): written to a temporary file
 * and renamed into place, after evicting what the limits require. Skipped (no error) when
 * the limits leave no room. */
void s3f__cache_put(struct s3f__cache_object *o, uint64_t index, const void *data);

/* Counters of this cache object (this process). */
struct s3f__cache_counters {
    uint64_t hits, misses, hit_bytes, inserted_bytes, errors, evicted_bytes;
};
void s3f__cache_counters(struct s3f__cache *c, struct s3f__cache_counters *out);
/* A block the caller found missing without s3f__cache_get (whole-object downloads). */
void s3f__cache_count_miss(struct s3f__cache *c);
/* Bytes of block files under the directory now, counted by a scan (tests, stats). */
uint64_t s3f__cache_scan_bytes(struct s3f__cache *c);

/* ---- users (io.c) ------------------------------------------------------------------- */

/* Reads `len` bytes at `offset` of the object into dst, from its source (the reader's
 * ranged GETs). Returns S3F_OK only with every byte in place. */
typedef enum s3f_status (*s3f__cache_fetch_fn)(void *ud, void *dst, size_t len,
                                               uint64_t offset, struct s3f_error *err);

/* s3f_reader_pread through the cache: the blocks [offset, offset+len) touches (clipped to
 * the object) come from the cache, missing ones from `fetch` in block-aligned runs (whole
 * blocks straight into buf, partial ones through a scratch block) and are inserted. */
enum s3f_status s3f__cache_pread(struct s3f__cache_object *o, void *buf, size_t len,
                                 uint64_t offset, s3f__cache_fetch_fn fetch, void *ud,
                                 size_t *n_read, struct s3f_error *err);

struct s3f_client;
struct s3f_iovec;
/* Whole-object downloads (download.c). serve_*: a HEAD (version_id; a different ETag than
 * if_match is not served) and, when every block of that ETag is in the cache, the object
 * from the cache into the destination (a block lost meanwhile is fetched with a ranged GET
 * pinned by If-Match); true when served, info set from the HEAD. false: nothing is known,
 * the caller downloads as without a cache (and fills it afterwards with fill_*). */
bool s3f__cache_serve_iov(struct s3f_client *client, struct s3f__cache *c, const char *bucket,
                          const char *key, const char *version_id, const char *if_match,
                          const struct s3f_iovec *iov, size_t n_iov,
                          struct s3f_object_info *info);
bool s3f__cache_serve_fd(struct s3f_client *client, struct s3f__cache *c, const char *bucket,
                         const char *key, const char *version_id, const char *if_match,
                         int fd, struct s3f_object_info *info);
/* s3f_download_alloc: true when every block is there: the call is then answered here, with
 * *st (alloc(size) called once; NULL from it: S3F_ERR_NO_MEMORY; a block lost meanwhile
 * whose ranged GET fails: that GET's error in err). false: nothing was allocated. */
bool s3f__cache_serve_alloc(struct s3f_client *client, struct s3f__cache *c,
                            const char *bucket, const char *key, const char *version_id,
                            const char *if_match, void *(*alloc)(void *, size_t),
                            void *alloc_ud, void **data, size_t *len,
                            struct s3f_object_info *info, enum s3f_status *st,
                            struct s3f_error *err);
/* Insert every block of a downloaded object (`etag`, `size`) from the destination. */
void s3f__cache_fill_iov(struct s3f__cache *c, const char *bucket, const char *key,
                         const char *etag, uint64_t size, const struct s3f_iovec *iov,
                         size_t n_iov);
void s3f__cache_fill_fd(struct s3f__cache *c, const char *bucket, const char *key,
                        const char *etag, uint64_t size, int fd);

#endif
