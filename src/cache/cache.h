/* The node-local block cache (docs/CACHE.md): fixed-size blocks of S3 objects kept in files
 * under a directory, keyed by bucket, key, ETag, object size and block index, each checked
 * by its CRC32C on every read, evicted (sampled least recently used first) under a byte
 * limit and a free-space floor, shared by the processes of one node, kept across restarts.
 * It touches only what it made: the directories are opened one level at a time relative to
 * directory handles with O_NOFOLLOW, anything that is not a regular file or directory is
 * left alone, and a root another user could write is refused. Inserts are queued and
 * written, with the evictions they need, by a background thread of the cache.
 *
 * What it owns and may call: the store (store.c: the block files and their format;
 * store_count.c: the lock and the count; store_writer.c: inserts and eviction; shared
 * state in store_internal.h) uses only src/core and libc; io.c (the cache's users in the
 * engine: the reader's block-aligned reads, whole-object downloads served or filled) uses
 * the store and what its caller passes: the reader's fetch function, and for downloads an
 * origin (struct s3f__cache_origin: a HEAD and a ranged GET). The cache calls no S3
 * operation itself (tests/layering.py: no public s3f_* call from inside the library).
 * src/xfer calls the functions below and gives the origin (s3f__xfer_cache_origin);
 * nothing here calls src/xfer.
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
    uint64_t queue_bytes;         /* bound of the blocks waiting to be written; 0: 32 MiB
                                     (at least two blocks). A client passes its share of
                                     the memory limit (s3f__cache_queue_bytes) */
};

/* The insert queue's share of a client's memory limit (memory_limit_bytes holds the buffer
 * pool and this queue): an eighth of the limit, at most 32 MiB, at least two blocks; 0 when
 * two blocks are more than half of the limit (the cache is then not used). */
uint64_t s3f__cache_queue_bytes(uint64_t memory_limit, uint64_t block_bytes);

struct s3f__cache;

/* Open (create) the cache directory and start its writer thread. The directory must be a
 * directory (not a symbolic link) of this user or root that others cannot write; one that
 * others can write but has the sticky bit (/tmp) gets a private s3flash-<uid> inside it.
 * S3F_ERR_INVALID_ARGUMENT for a bad block size, S3F_ERR_CONFIG for a directory that is
 * not safe to use (the message says why and what to do), S3F_ERR_IO when it cannot be
 * created or written, S3F_ERR_NO_MEMORY. Thread-safe once open: every function below may be
 * called from any thread. */
enum s3f_status s3f__cache_open(const struct s3f__cache_options *o, struct s3f__cache **out,
                                struct s3f_error *err);
/* NULL ok; writes what is queued, stops the thread, leaves the files. */
void s3f__cache_free(struct s3f__cache *c);
/* Wait until every block queued so far is written (or dropped). */
void s3f__cache_flush(struct s3f__cache *c);
uint64_t s3f__cache_block_bytes(const struct s3f__cache *c);

/* One object version as the cache knows it (the identity of its blocks). Plain state, one
 * per reader or download; not shared between threads. `cache` NULL: no local cache (a
 * reader with the shared cache alone, xz.c): get and has miss, put does nothing, and the
 * blocks are S3F__CACHE_BLOCK_DEFAULT bytes (the caller may set block_bytes after init). */
struct s3f__cache_object {
    struct s3f__cache *cache;
    char *bucket, *key, *etag;
    uint64_t size;
    uint64_t block_bytes;
    char *dir;                    /* <cache>/v1/<2 hex>/<64 hex>, malloc'ed (messages, tests) */
    char hex[65];                 /* the object directory's name */
    char *scratch;                /* one block, allocated on first need */
    uint64_t scratch_block;       /* the block scratch holds (checked), UINT64_MAX: none */
};
/* S3F_ERR_NO_MEMORY (o is then empty; cleanup is still safe). c may be NULL (above). */
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
/* Insert block `index` (s3f__cache_block_len bytes of data): copied into the cache's queue
 * and returns; the writer thread writes it to a temporary file and renames it into place,
 * after evicting what the limits require. Dropped (counted in insert_dropped_bytes, never
 * waited for) when the queue is full; dropped too (counted the same) when the limits leave
 * no room or the write fails (then also an error). A block already queued or being written
 * is not queued again. Every block accepted is in exactly one of insert_pending_bytes,
 * inserted_bytes and insert_dropped_bytes, in every snapshot of the counters. */
void s3f__cache_put(struct s3f__cache_object *o, uint64_t index, const void *data);
/* The same, but waits for room in the queue instead of dropping: for filling the cache
 * from a whole download already in place (the caller would otherwise drop all but the
 * queue's worth of a large object, and the object would never be whole in the cache). */
void s3f__cache_put_wait(struct s3f__cache_object *o, uint64_t index, const void *data);

/* Counters of this cache object (this process). */
struct s3f__cache_counters {
    uint64_t hits, misses, hit_bytes, inserted_bytes, errors, evicted_bytes;
    uint64_t insert_pending_bytes;  /* queued or being written now */
    uint64_t insert_dropped_bytes;  /* not cached: the queue was full, the limits left no
                                       room, or the write failed (an error too) */
    uint64_t dirs_listed;           /* directories read by eviction and recounts (tests: the
                                       work of a step is bounded, never the whole tree) */
};
void s3f__cache_counters(struct s3f__cache *c, struct s3f__cache_counters *out);
/* A block the caller found missing without s3f__cache_get (whole-object downloads). */
void s3f__cache_count_miss(struct s3f__cache *c);
/* Bytes of block files under the directory now, counted by a scan of the whole tree
 * (tests only: the cache itself never scans it whole). */
uint64_t s3f__cache_scan_bytes(struct s3f__cache *c);
/* The directory the blocks are under (<dir>/v1 or <dir>/s3flash-<uid>/v1). */
const char *s3f__cache_root(const struct s3f__cache *c);

/* ---- the on-disk formats, as pure functions (store.c uses them; tests/fuzz/fuzz_cache.c
 * feeds them anything) ----------------------------------------------------------------- */

/* The shared byte count in v1/lock: a 16-byte head ("S3FCCNT1", the number of slots) and
 * one slot per first-level directory (256): the bytes of its block files and a check
 * (bytes ^ S3F__CACHE_COUNT_KEY). A slot is valid when its check matches and its bytes are
 * at most `limit` (the file system's size, at most 2^55, so that the sum of every slot
 * cannot overflow); an invalid one is counted again by a scan of its directory alone. */
#define S3F__CACHE_SLOTS 256
#define S3F__CACHE_COUNT_HEAD 16
#define S3F__CACHE_COUNT_FILE (S3F__CACHE_COUNT_HEAD + S3F__CACHE_SLOTS * 16)
#define S3F__CACHE_COUNT_LIMIT ((uint64_t)1 << 55)
#define S3F__CACHE_COUNT_KEY UINT64_C(0x5333464343414348)
struct s3f__cache_counts {
    uint64_t bytes[S3F__CACHE_SLOTS]; /* 0 where not valid */
    bool valid[S3F__CACHE_SLOTS];
    bool head_ok;                     /* the head was there and right */
};
/* Parse the lock file's first `len` bytes. Never fails: what is wrong is marked invalid. */
void s3f__cache_counts_parse(const void *buf, size_t len, uint64_t limit,
                             struct s3f__cache_counts *out);
/* The sum of the valid slots (no overflow: each is at most 2^55). */
uint64_t s3f__cache_counts_total(const struct s3f__cache_counts *k);

/* What a block file must hold. */
struct s3f__cache_block_id {
    const char *bucket, *key, *etag;
    uint64_t object_size, offset, length;
};
#define S3F__CACHE_HEADER_FIXED 56u
/* Check the start of a block file (`len` bytes of it, a file of `file_size` bytes) against
 * `want`: NULL when the header and the names are those of the block (then *crc32c is the
 * CRC32C the data must have), else the reason. Reads only within buf[0, len). */
const char *s3f__cache_header_check(const void *buf, size_t len, uint64_t file_size,
                                    const struct s3f__cache_block_id *want, uint32_t *crc32c);
/* Write the fixed part of a block's header (S3F__CACHE_HEADER_FIXED bytes) into out: the
 * names (bucket, key, ETag: at most 65535, 2^32-1 and 65535 bytes) and then the data follow
 * it. The block files (store_writer.c) and the shared cache's block objects (xz.c) are both
 * this header, the names and the data. */
void s3f__cache_header_make(void *out, uint64_t object_size, uint64_t offset, uint64_t length,
                            size_t bucket_len, size_t key_len, size_t etag_len,
                            uint32_t crc32c);

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

struct s3f_iovec;
/* Where whole-object downloads served from the cache learn the object's version and get a
 * block the cache lost: given by the engine (xfer/), `ud` the caller's (its client). */
struct s3f__cache_origin {
    /* The object's ETag and size (a HEAD; version_id may be NULL). */
    enum s3f_status (*head)(void *ud, const char *bucket, const char *key,
                            const char *version_id, struct s3f_object_info *info);
    /* Bytes [offset, offset+len) of the object into dst, pinned to `etag` (If-Match). */
    enum s3f_status (*get)(void *ud, const char *bucket, const char *key, const char *etag,
                           void *dst, size_t len, uint64_t offset, struct s3f_error *err);
};
/* Whole-object downloads (download.c). serve_*: a HEAD (version_id; a different ETag than
 * if_match is not served) and, when every block of that ETag is in the cache, the object
 * from the cache into the destination (a block lost meanwhile is fetched with a ranged GET
 * pinned by If-Match); true when served, info set from the HEAD. false: nothing is known,
 * the caller downloads as without a cache (and fills it afterwards with fill_*). */
bool s3f__cache_serve_iov(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c, const char *bucket,
                          const char *key, const char *version_id, const char *if_match,
                          const struct s3f_iovec *iov, size_t n_iov,
                          struct s3f_object_info *info);
bool s3f__cache_serve_fd(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c, const char *bucket,
                         const char *key, const char *version_id, const char *if_match,
                         int fd, struct s3f_object_info *info);
/* s3f_download_alloc: true when every block is there: the call is then answered here, with
 * *st (alloc(size) called once; NULL from it: S3F_ERR_NO_MEMORY; a block lost meanwhile
 * whose ranged GET fails: that GET's error in err). false: nothing was allocated. */
bool s3f__cache_serve_alloc(const struct s3f__cache_origin *origin,
                          void *origin_ud, struct s3f__cache *c,
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

/* ---- the shared cache in an S3 Express One Zone directory bucket (xz.c) --------------- */

/* Objects larger than this are not cached there (Mountpoint's limit: 1 MiB). */
#define S3F__XZ_MAX_OBJECT_DEFAULT ((uint64_t)1 << 20)

/* The requests of the shared cache, given by the engine (xfer.c), `ud` its client. */
struct s3f__xz_ops {
    /* GET the whole object `key` of `bucket`: its first hdr_len bytes into hdr, the next
     * data_len into data; *got the body's length. S3F_ERR_NOT_FOUND: no such object;
     * S3F_ERR_ABORTED: the body is longer than hdr_len + data_len; else S3 said why (err). */
    enum s3f_status (*get)(void *ud, const char *bucket, const char *key, void *hdr,
                           size_t hdr_len, void *data, size_t data_len, uint64_t *got,
                           struct s3f_error *err);
    /* PUT `len` bytes as object `key` of `bucket`. */
    enum s3f_status (*put)(void *ud, const char *bucket, const char *key, const void *data,
                           size_t len, struct s3f_error *err);
};

struct s3f__xz_options {
    const char *bucket;           /* the directory bucket */
    const char *scope;            /* the endpoint URL ("" or NULL: AWS), as the local cache's */
    uint64_t max_object_bytes;    /* 0: S3F__XZ_MAX_OBJECT_DEFAULT */
    uint64_t block_bytes;         /* blocks without a local cache (with one: its size, which
                                     the client sets from the same option); 0: 1 MiB */
    uint64_t queue_bytes;         /* bound of the PUTs waiting (copies); 0: 8 MiB */
    const struct s3f__logger *logger; /* must outlive it; NULL: silent */
    const struct s3f__xz_ops *ops;
    void *ops_ud;
};

struct s3f__xz;
/* S3F_ERR_NO_MEMORY only. No request is sent (the mount checks the bucket before it
 * mounts). Thread-safe once open. */
enum s3f_status s3f__xz_open(const struct s3f__xz_options *o, struct s3f__xz **out,
                             struct s3f_error *err);
/* Send what is queued and end the PUT thread: before the client's transport goes. NULL ok. */
void s3f__xz_stop(struct s3f__xz *z);
/* NULL ok; stops first. */
void s3f__xz_free(struct s3f__xz *z);
/* Wait until every PUT queued so far is sent (or dropped). */
void s3f__xz_flush(struct s3f__xz *z);
/* Whether objects of this size are cached there. */
bool s3f__xz_serves(const struct s3f__xz *z, uint64_t object_size);
/* The block size of an object read without a local cache (s3f__cache_object's block_bytes). */
uint64_t s3f__xz_block_bytes(const struct s3f__xz *z);
/* Block `index` of `o` into dst from the shared cache: true when its object was there and
 * every check passed (its header names this block of this object version, the CRC32C of
 * its data matches). A missing, invalid or failed one is a miss (counted). */
bool s3f__xz_get(struct s3f__xz *z, struct s3f__cache_object *o, uint64_t index, void *dst);
/* Queue block `index` of `o` (a copy) for a PUT; dropped (counted) when the queue is full,
 * the object is too large, or the cache is bypassed after a failure. Never waits. */
void s3f__xz_put(struct s3f__xz *z, struct s3f__cache_object *o, uint64_t index,
                 const void *data);

#define S3F__XZ_COUNTERS 10
struct s3f__xz_counters {
    uint64_t hits, misses, hit_bytes;
    uint64_t invalid;            /* blocks found but refused by their checks (also misses) */
    uint64_t errors;             /* GETs that failed (also misses) */
    uint64_t puts, put_bytes;    /* blocks (and their data bytes) PUT */
    uint64_t put_errors;         /* PUTs that failed (their bytes also dropped) */
    uint64_t put_dropped_bytes;  /* not PUT: queue full, bypassed, or failed */
    uint64_t put_pending_bytes;  /* queued or being sent now (bodies) */
};
_Static_assert(sizeof(struct s3f__xz_counters) == S3F__XZ_COUNTERS * sizeof(uint64_t),
               "counters are read as an array");
void s3f__xz_counters(struct s3f__xz *z, struct s3f__xz_counters *out);

/* s3f__cache_pread's fetch with the shared cache in front of the source (ud: this struct):
 * the whole blocks asked for come from the shared cache, the others from `fetch` (one call
 * per run of missing blocks) and are queued for a PUT. A range of an object the shared
 * cache does not serve, or not of whole blocks, goes to `fetch` as it is. */
struct s3f__xz_source {
    struct s3f__xz *xz;              /* NULL: fetch alone */
    struct s3f__cache_object *object;
    s3f__cache_fetch_fn fetch;
    void *ud;
};
enum s3f_status s3f__xz_fetch(void *ud, void *dst, size_t len, uint64_t offset,
                              struct s3f_error *err);

#endif
