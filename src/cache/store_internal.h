/* The block store's state and the functions its files share (cache/store.c; see there and
 * docs/CACHE.md):
 *
 *   store.c         the block file format and names, the root and its ownership, open and
 *                   free, and the reads (has, get) on the caller's thread
 *   store_count.c   the flock'd lock and the byte count: one checked slot per first-level
 *                   directory, recounted by a scan of one directory when invalid
 *   store_writer.c  the writer thread: the bounded put queue, inserts, and the sampled LRU
 *                   eviction they need
 * Private to src/cache. */
#ifndef S3F_CACHE_STORE_INTERNAL_H
#define S3F_CACHE_STORE_INTERNAL_H

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/cache.h"

#define MAGIC "S3FCBLK1"
#define COUNT_MAGIC "S3FCCNT1"
#define VERSION 1u
#define HDR_FIXED S3F__CACHE_HEADER_FIXED
#define TMP_STALE_S 600         /* temporary files older than this are a dead writer's */
#define QUEUE_DEFAULT ((uint64_t)32 << 20)
#define SAMPLE_DIRS 5           /* object directories looked at per eviction step */
#define SAMPLE_BLOCKS 16        /* blocks of each looked at (a random sample of its names) */
#define SAMPLE_NAMES_MAX 100000 /* entries of one directory read to draw the sample */
#define POOL (SAMPLE_DIRS * SAMPLE_BLOCKS)
#define INSERT_ROUNDS 64        /* eviction steps one insert may run before it gives up */
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct job {
    struct job *next;
    char hex[65];
    uint64_t index, object_size, offset, len;
    uint32_t bl, kl, el;
    char *names;                  /* bucket, key, ETag (no NULs), then the data */
};

struct s3f__cache {
    char *dir;                    /* as given (messages) */
    char *root;                   /* the v1 directory's path (messages) */
    char *scope;                  /* the endpoint, hashed into every object's name */
    uint64_t max_bytes, min_free_bytes, block_bytes, count_limit;
    bool free_from_fs;            /* min_free_bytes: 5% of the file system, computed each time */
    const struct s3f__logger *logger;
    int v1_fd;                    /* the v1 directory, checked once */
    int lock_fd;
    pthread_mutex_t lock;         /* with the flock of lock_fd: each step that changes blocks */
    int warned;                   /* atomic: the first error was logged */
    int warned_room;              /* atomic: "no room" was logged */
    uint64_t seq;                 /* atomic: temporary file names */
    struct s3f__cache_counters n; /* atomics */

    /* the writer thread and its queue, guarded by q_lock */
    pthread_mutex_t q_lock;
    pthread_cond_t q_work, q_idle;
    struct job *q_head, *q_tail;
    const struct job *q_busy;     /* the job being written now */
    uint64_t q_bytes, q_max;      /* queued and being written; the bound */
    bool q_stop, q_started, thread_ok;
    pthread_t thread;
    pid_t pid;                    /* the process whose thread it is (a forked child has none) */
    /* the writer thread's own state */
    uint64_t rng;
};

struct hdr {
    char magic[8];
    uint32_t version;
    uint32_t hdr_len;
    uint64_t object_size;
    uint64_t offset;
    uint64_t length;
    uint32_t crc32c;
    uint16_t bucket_len;
    uint16_t etag_len;
    uint32_t key_len;
    uint32_t reserved;
};
_Static_assert(sizeof(struct hdr) == HDR_FIXED, "block header layout");

/* store.c */
void s3f__store_count(uint64_t *counter, uint64_t n);
void S3F_PRINTF(2, 3) s3f__store_error(struct s3f__cache *c, const char *fmt, ...);
int s3f__store_subdir(int at, const char *name, bool create);
void s3f__store_hex2(unsigned slot, char out[3]);
unsigned s3f__store_slot_of(const char *hex);
int s3f__store_obj_dir(struct s3f__cache *c, const char *hex, bool create, int *parent);
bool s3f__store_is_block_name(const char *s);
bool s3f__store_is_obj_name(const char *s);
int s3f__store_write_full(int fd, const void *buf, size_t len);

/* store_count.c: the lock (the mutex and the flock of lock_fd) and the slots it guards */
void s3f__store_lock_take(struct s3f__cache *c);
void s3f__store_lock_drop(struct s3f__cache *c);
void s3f__store_counts_read(struct s3f__cache *c, struct s3f__cache_counts *k);
bool s3f__store_slot_write(struct s3f__cache *c, const struct s3f__cache_counts *k, unsigned i,
                           uint64_t bytes);
void s3f__store_slot_add(struct s3f__cache *c, struct s3f__cache_counts *k, unsigned i,
                         int64_t delta);
uint64_t s3f__store_recount(struct s3f__cache *c, unsigned slot);
void s3f__store_counts_valid_locked(struct s3f__cache *c, struct s3f__cache_counts *k);
void s3f__store_fs_space(struct s3f__cache *c, uint64_t *free_bytes, uint64_t *floor);

/* store_writer.c: the writer thread's body (started by s3f__cache_open) */
void *s3f__store_writer_main(void *arg);

#endif
