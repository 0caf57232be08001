/*
 * s3flash-sink's shared declarations. The sink is five files:
 *   sink.c        options, start-up and shut-down (main)
 *   sink_http.c   connections: the worker threads and their epoll loops, accepting and handing
 *                 off connections, HTTP/1.1 request heads, bodies (Content-Length, chunked),
 *                 sending responses and GET bodies
 *   sink_s3.c     the S3 protocol: what each request means and the response it gets (XML
 *                 documents, errors, ETags, ranges)
 *   sink_limits.c S3-like limits: byte rates per connection and in all, first-byte latency,
 *                 request rates per key prefix (503 SlowDown), the --trace of connections
 *   sink_store.c  what the sink remembers: the object map, multipart uploads, whole-object
 *                 checksums and, in store mode, the bytes (a pool of reusable buffers)
 *   sink_express.c --express: S3 Express One Zone directory buckets (CreateSession and its
 *                 session tokens, unordered ListObjectsV2, appends, RenameObject,
 *                 If-None-Match, the sink's counters)
 * See sink.c for what the sink is and bench/README.md for the protocol subset.
 */
#ifndef S3FLASH_BENCH_SINK_H
#define S3FLASH_BENCH_SINK_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- the data pattern ----
 * Byte i of every GET body (i = offset in the object) is
 *     pattern(i) = ((i mod 1048573) * 2654435761 mod 2^32) >> 24
 * 1048573 is a prime just under 1 MiB, so part-sized shifts (multiples of 2^k) of the data are
 * never invisible, as they would be with a 1 MiB period. The buffer holds two periods so that
 * any window of up to one period starting anywhere is contiguous. */
#define PAT_PERIOD 1048573u
#define PAT_MULT 2654435761u
extern uint8_t *g_pat; /* 2 * PAT_PERIOD bytes, read-only once built */

#define HDR_CAP 16384u           /* request line + headers; more is 431 */
#define OUT_CAP 24576u           /* response headers + XML body (keys escaped: 6x) */
#define KEY_MAX 1024u            /* S3's key length limit */
#define MAX_CKS 8                /* echoed x-amz-checksum-* headers */
#define CK_VAL_MAX 256u          /* longest echoed checksum value */
#define MAX_PARTS 10000u
#define COMPLETE_BODY_CAP (4u << 20)
#define DRIVE_BUDGET (8u << 20)  /* bytes one connection may move per wakeup (fairness) */
#define SEND_IOVS 8

/* ---- options ---- */
struct opts {
    const char *bind_addr;
    int port;
    const char *port_file;
    bool print_port; /* "port N" on stdout once listening */
    int threads;
    int max_conns;
    size_t max_objects;
    uint32_t max_uploads;
    size_t recv_buf;
    bool verbose;
    bool quiet;
    uint64_t store_max; /* --store: 0 = discard bodies (the default), else keep up to this */
    bool keep_checksums; /* --keep-checksums: whole-object checksums served on HEAD/GET */
    /* S3-like limits (sink_limits.c; 0 = off): */
    double conn_send_rate, conn_recv_rate; /* bytes/s each connection sends / receives */
    double total_send_rate, total_recv_rate; /* bytes/s all connections together */
    double fb_median_ms, fb_p99_ms, fb_min_ms; /* first-byte latency: lognormal, floor */
    uint64_t seed;                         /* of the first-byte latency draws */
    double prefix_get_rate, prefix_put_rate; /* requests/s per prefix (GET+HEAD / the rest) */
    int prefix_depth;                      /* a prefix: the key up to its Nth '/' */
    double prefix_burst_ms;                /* per-prefix bucket depth, in ms of its rate */
    const char *trace_file;                /* --trace: connections and bytes every 100 ms */
    /* --express (sink_express.c): directory-bucket semantics and session authentication */
    bool express;
    int64_t session_seconds;               /* lifetime of a CreateSession's credentials */
    uint64_t revoke_after;                 /* --revoke-after N: revoke all sessions once,
                                              after N requests a session let through */
    /* --synth-list BUCKET/PREFIX:N: N synthetic keys listed under BUCKET/PREFIX (sink_s3.c) */
    const char *synth_name; /* "BUCKET/PREFIX" */
    size_t synth_name_len;
    uint64_t synth_n;
};
extern struct opts g_opt;

extern atomic_bool g_stop;
extern atomic_int g_nconns;
extern atomic_uint_fast64_t g_synth_pages; /* ListObjectsV2 pages of --synth-list served */
extern char g_last_modified[64]; /* HTTP date of the sink's start, the Last-Modified of all */
extern char g_last_modified_iso[64];
extern uint32_t g_salt;

/* ---- sink_store.c: what the sink remembers ---- */
/* A stretch of stored bytes: object data, a part, or a body being received. */
struct seg {
    uint8_t *p;
    uint64_t len, cap;
    uint64_t start; /* offset in its object (blobs only) */
};

/* An object's bytes: its parts in part-number order (one segment for a PutObject). Shared by
 * the map and the GETs sending from it; freed when the last reference goes. */
struct blob {
    atomic_uint refs;
    uint32_t nseg;
    uint64_t size;
    struct seg seg[];
};


#define POOL_CLASSES (64 * 8)
struct pooled {
    struct pooled *next;
};
/* store mode's buffers (sink_store.c): held, pooled and their peak, under mu */
struct pool {
    pthread_mutex_t mu;
    uint64_t held, pooled, peak;
    struct pooled *cls[POOL_CLASSES];
};
extern struct pool g_pool;

struct upload {
    bool used;
    uint32_t gen;
    char *key; /* "bucket/key" */
    size_t klen;
    uint64_t *parts; /* parts[i] = size of part i+1, UINT64_MAX if not uploaded */
    struct seg *pdata; /* store mode: pdata[i] = the bytes of part i+1 (p NULL: none) */
    uint32_t parts_cap;
};
/* the multipart uploads in progress (sink_store.c), under mu */
struct uploads {
    pthread_mutex_t mu;
    struct upload *slots;
    uint32_t next;
    uint32_t used;
};
extern struct uploads g_up;
#define UPLOAD_ID_LEN 24

struct ckrec {
    struct ckrec *next;
    char hdr[64 + CK_VAL_MAX + 8]; /* "x-amz-checksum-crc32c: value" */
    size_t klen;
    char key[];
};

uint64_t mix64(uint64_t x);
void fake_etag(const char *name, size_t n, uint64_t size, char *out);
uint8_t *buf_get(uint64_t n, uint64_t *cap);
void buf_put(uint8_t *p, uint64_t cap);
void pool_free(void);
struct blob *blob_new(uint32_t nseg);
void blob_unref(struct blob *b);
uint32_t blob_seg_at(const struct blob *b, uint64_t off);
bool objmap_init(void);
void objmap_free(void);
bool objmap_put(const char *k, size_t n, uint64_t size, uint32_t nparts, struct blob *data,
                uint64_t *ver);
bool objmap_del(const char *k, size_t n);
/* One listing page: the objects of `bucket` whose key starts with `prefix` and sorts after
 * `after` (byte order; an empty `after`: from the start), the first `max` of them, sorted,
 * into ents (each key malloc'ed: the caller frees). Returns how many. */
struct list_ent {
    char *key;
    size_t klen;
    uint64_t size, ver;
    uint32_t nparts;
};
size_t objmap_list(const char *bucket, size_t bn, const char *prefix, size_t pn,
                   const char *after, size_t an, size_t max, struct list_ent *ents);
bool object_size(const char *k, size_t n, uint64_t *size, uint32_t *nparts, uint64_t *ver,
                 struct blob **data);
void upload_release(struct upload *u);
int upload_new(const char *k, size_t n, char *id);
int upload_part(const char *id, size_t idlen, const char *k, size_t n, uint32_t pn,
                uint64_t size, struct seg *data);
int upload_abort(const char *id, size_t idlen, const char *k, size_t n);
int upload_complete(const char *id, size_t idlen, const char *k, size_t n, const char *body,
                    size_t blen, uint64_t *size, uint32_t *nparts, uint64_t *ver,
                    const char **code);
void ck_set(const char *k, size_t n, const char *hdr);
void ck_get(const char *k, size_t n, char *out, size_t cap);
void ck_free(void);
/* --express: all keys of a bucket (name "bucket/...": `bp` = "bucket/", bn its length) whose
 * key starts with prefix, each given to fn with its size and its map hash (the order of an
 * unordered listing). */
typedef void (*objmap_each_fn)(void *ud, const char *k, size_t n, uint64_t size, uint64_t h);
void objmap_each(const char *bp, size_t bn, const char *prefix, size_t pn, objmap_each_fn fn,
                 void *ud);
/* Moves src to dst in one step under both shards' locks (RenameObject). 404: no src; 412:
 * dst exists and no_overwrite. */
int objmap_rename(const char *src, size_t sn, const char *dst, size_t dn, bool no_overwrite);
/* Appends: the object's size must be `offset` (0: it may be absent); in store mode the new
 * bytes `add` (taken over) are added after the old ones. 400 InvalidWriteOffset, 404, 507,
 * or 0 with *size the new size. */
int objmap_append(const char *k, size_t n, uint64_t offset, uint64_t len, struct seg *add,
                  uint64_t *size, uint64_t *ver);

/* ---- sink_limits.c: S3-like limits ---- */
/* A token bucket: rate per second, up to burst saved; tokens may go below 0 (debt). */
struct bucket {
    double rate, burst, quantum, tokens;
    uint64_t last_ns;
};
enum dir { DIR_SEND, DIR_RECV };

/* ---- sink_http.c: connections ---- */
enum method { M_OTHER, M_GET, M_HEAD, M_PUT, M_POST, M_DELETE };
enum state { ST_HEAD, ST_BODY, ST_SEND };
/* where a chunked body's decoder is: a size line, data, the CRLF after data, trailers */
enum chstate { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

struct hdrval {
    const char *p;
    size_t n;
};

/* One parsed request. Pointers go into the connection's in[] (valid until the request ends)
 * or its name[] (decoded path). */
struct req {
    enum method method;
    struct hdrval method_raw, target;
    const char *bucket;
    size_t bucket_len;
    const char *key;
    size_t key_len;
    const char *name; /* "bucket/key" (map key) */
    size_t name_len;
    bool q_uploads, q_delete, q_location, q_list_type2, q_other;
    bool q_session, q_rename, q_sink_stats, q_sink_revoke; /* --express */
    struct hdrval upload_id, prefix;
    /* --express: listing parameters (decoded), session and signature, appends, renames */
    struct hdrval delimiter, cont_token, start_after, max_keys;
    struct hdrval s3session_token, security_token, authorization, session_mode;
    struct hdrval write_offset, rename_source, if_none_match;
    time_t head_t; /* when the head arrived: sessions are checked as of then (as AWS does) */
    bool has_part_number;
    uint64_t part_number;
    bool has_cl, has_te, te_chunked, aws_chunked, expect_continue, conn_close,
        conn_keep_alive;
    uint64_t content_length;
    bool has_decoded_len;
    uint64_t decoded_len;
    struct hdrval range, if_match, copy_source, te, content_encoding;
    int ncks;
    struct hdrval ck_name[MAX_CKS], ck_val[MAX_CKS];
    int http_minor;
};

struct worker;

struct conn {
    struct conn *prev, *next; /* the worker's list of connections */
    struct worker *w;
    int fd;
    enum state state;
    uint32_t interest;
    bool close_after;
    size_t in_len;   /* bytes in in[] */
    size_t scan;     /* where the search for the header end resumes */
    size_t req_used; /* bytes of in[] the current request consumed (header + body prefix) */
    size_t hdr_end;  /* length of the current request's head in in[] */
    uint64_t body_left;
    bool chunked;            /* the body is chunked (Transfer-Encoding, or aws-chunked stored) */
    enum chstate ch_state;
    uint64_t ch_left;        /* data bytes left in the current chunk */
    uint64_t decoded;        /* chunked: data bytes so far */
    char *cbody; /* CompleteMultipartUpload / DeleteObjects body, or NULL */
    size_t cbody_len, cbody_cap;
    bool cbody_toobig;
    bool storing;            /* store mode: this body's bytes are kept in sb */
    int store_err;           /* store mode: 507 (over --store) or 500: the body is discarded */
    uint64_t store_want;     /* what did not fit (for the 507 message) */
    struct seg sb;           /* store mode: the body received so far */
    struct req rq;
    size_t out_len, out_off;
    uint64_t pat_off, pat_left;
    struct blob *blob;       /* store mode: a GET sends [pat_off, +pat_left) of this */
    char in[HDR_CAP];
    char out[OUT_CAP];
    char name[HDR_CAP + 1]; /* decoded bucket "/" key */
    /* S3-like limits (sink_limits.c) */
    struct bucket lim_send, lim_recv; /* this connection's byte rates */
    uint64_t wake_ns;  /* asleep (no epoll interest) until then; 0: awake */
    uint64_t fb_due;   /* the current response's first byte is not sent before then */
    bool fb_done;      /* the first-byte delay of the current response has passed */
    bool busy;         /* a request is in progress (counted in g_lim.active) */
};

struct worker {
    int idx;
    pthread_t tid;
    int ep;
    int listen_fd;
    int stop_fd;
    int hand_rd, hand_wr; /* hand-off pipe: accepted fds (ints) for this worker */
    atomic_int load;      /* connections owned or handed to it (any thread may read) */
    uint8_t *rbuf; /* discard buffer for bodies, g_opt.recv_buf bytes */
    char xml[OUT_CAP];
    struct conn *conns;
    uint64_t nreq, bytes_in, bytes_out;
    time_t date_t;
    char date[64];
    uint64_t rng;  /* first-byte latency draws (sink_limits.c) */
};

extern struct worker *g_workers;
extern char g_listen_tag, g_stop_tag;

bool parse_u64(const char *p, size_t n, uint64_t *out);
int hexval(char c);
size_t pct_decode(const char *s, size_t n, char *out);
void http_date(time_t t, char *buf, size_t n);
bool hv_eq(struct hdrval v, const char *s);
void drop_handoffs(struct worker *w);
void *worker_main(void *arg);

/* ---- sink_limits.c ---- */
struct lim_stats {
    atomic_int active;                 /* connections with a request in progress */
    atomic_uint_fast64_t bytes_in, bytes_out;
    atomic_uint_fast64_t slowdown_get, slowdown_put; /* 503 SlowDown answers */
    atomic_uint_fast64_t admitted_get, admitted_put; /* requests a prefix limit let through */
};
extern struct lim_stats g_lim;
extern bool g_lim_bytes, g_lim_timers; /* any byte-rate limit; any limit that sleeps */
uint64_t now_ns(void);
bool limits_init(void);
void limits_free(void);
void limits_conn_init(struct conn *c);
size_t limit_io(struct conn *c, enum dir d, size_t want, uint64_t *wake);
void limit_used(struct conn *c, enum dir d, size_t n);
uint64_t limit_first_byte_ns(struct worker *w);
bool limit_prefix_admit(const struct req *r);
void limits_trace(FILE *f, uint64_t t0);
void limits_report(void);
void limits_stats(void);
bool conn_sleep(struct conn *c, uint64_t until);

/* ---- sink_s3.c: the S3 protocol ---- */
/* A bounded output buffer: overflow is remembered, never written past. */
struct ob {
    char *p;
    size_t len, cap;
    bool overflow;
};
void ob_put(struct ob *b, const char *s, size_t n);
void ob_str(struct ob *b, const char *s);
__attribute__((format(printf, 2, 3))) void ob_printf(struct ob *b, const char *fmt, ...);
void ob_xml(struct ob *b, const char *s, size_t n);
void xml_begin(struct ob *x, struct worker *w);
void respond_xml(struct conn *c, int status, size_t xlen, bool echo_cks);
/* A ListBucketResult's start in w->xml: the bucket's Name and the request's Prefix. */
void list_result_begin(struct conn *c, struct ob *x);
void respond_error(struct conn *c, int status, const char *code, const char *msg);
void respond_empty(struct conn *c, int status, bool echo_cks, const char *etag);
void object_etag(const char *name, size_t n, uint64_t size, uint64_t ver, uint32_t nparts,
                 char out[48]);
void finish_request(struct conn *c);
void fail_request_msg(struct conn *c, int status, const char *code, const char *msg);
void fail_request(struct conn *c, int status);

/* ---- sink_express.c: --express ---- */
bool express_init(void);
void express_free(void);
/* Handles the request if it is an Express one (CreateSession, the sink's counters, session
 * checks, listings, appends, renames, If-None-Match): true when it answered it. */
bool express_handle(struct conn *c);
void express_report(FILE *f);

#endif
