/* Allocation-failure torture over whole operations (curl's torture mode, SQLite's malloc
 * tests): each operation is run once per N = 1, 2, 3, ... with the Nth allocation it makes
 * failing, until a run ends without reaching N allocations (the operation then succeeded
 * with nothing injected). Every run must return a status (a crash, abort or UBSan report
 * fails the sweep), finish within a deadline (a hang fails it), leak nothing (each run is a
 * forked child that exits through LeakSanitizer in the ASan build) and, when it returns
 * S3F_OK, have moved the right bytes (downloads and reads are compared with the sink's
 * pattern; a failed download to a file leaves no file behind).
 *
 * Allocations counted (one global atomic counter, whatever the thread, armed only around
 * the operation under test; the client is created before and freed after, unarmed, except
 * in the `client` operation, which tortures s3f_client_new itself):
 *   - s3flash's own: the internal static library is linked with
 *     -Wl,--wrap=malloc,calloc,realloc,strdup,strndup,posix_memalign (tests/meson.build);
 *   - libcurl's: curl_global_init_mem() before the library's own curl_global_init;
 *   - OpenSSL's: CRYPTO_set_mem_functions() before any OpenSSL use;
 *   - expat's: the library creates its parsers with XML_ParserCreate_MM and its own
 *     malloc/realloc/free (src/s3/xml.c, src/auth/credentials_http.c), so they are wrapped too.
 *
 * The server is the loopback sink (bench/s3flash-sink, started here on an ephemeral port);
 * the credential fetches use the container provider (AWS_CONTAINER_CREDENTIALS_FULL_URI) and
 * the web identity provider (STS at AWS_ENDPOINT_URL_STS) against a tiny HTTP server forked
 * here (GET: a credentials document, POST: an AssumeRoleWithWebIdentity result).
 *
 *   torture_test                  sweep every operation
 *   torture_test OP...            sweep these operations
 *   torture_test OP N             one run of OP with allocation N failing, in this process
 *                                 (N = 0: count only); prints the status and the count
 *   torture_test --list           the operations
 * Environment: S3FLASH_SINK (the sink; default $S3F_BUILD_ROOT/bench/s3flash-sink),
 * TORTURE_JOBS (runs at once; default the CPUs, at most 4), TORTURE_DEADLINE_S (per run,
 * default 60), TORTURE_VERBOSE=1 (every run's result), TORTURE_STACK=1 (a single run prints
 * the stack of the failed allocation; sanitizer builds), TORTURE_FULL=1 (every N for every
 * operation; by default the large operations take every N up to their bound, then every
 * stride-th: see `ops` below), TORTURE_COLD=1 (no OpenSSL warm-up: see main).
 * A run also fails when, after an injected failure, the status blames the caller
 * (blames_caller below). The runs' N are reproducible up to the I/O threads' timing.
 * Exit: 0 when every run passed, 1 otherwise (each failing OP N is printed), 77 (skip) when
 * the sink is not built. */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "s3flash/s3flash.h"
#include "../unit/testutil.h"

/* ---- the allocation hooks ------------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

static atomic_bool armed;
static atomic_long alloc_count; /* allocations seen while armed */
static atomic_long fail_at;     /* the allocation to fail (1-based); 0: none */
static atomic_bool injected;    /* the failure was injected */

/* In sanitizer builds: where the failure was injected (TORTURE_STACK=1, single runs). */
void __sanitizer_print_stack_trace(void) __attribute__((weak));
static bool print_stack;

static bool should_fail(void) {
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return false;
    long n = atomic_fetch_add(&alloc_count, 1) + 1;
    if (n != atomic_load(&fail_at))
        return false;
    atomic_store(&injected, true);
    if (print_stack && __sanitizer_print_stack_trace)
        __sanitizer_print_stack_trace();
    return true;
}

void *__wrap_malloc(size_t n) {
    return should_fail() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
    return should_fail() ? NULL : __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
    return should_fail() ? NULL : __real_realloc(p, n);
}
char *__wrap_strdup(const char *s) {
    return should_fail() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n) {
    return should_fail() ? NULL : __real_strndup(s, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    return should_fail() ? ENOMEM : __real_posix_memalign(p, a, n);
}

/* libcurl's allocator */
static void *c_malloc(size_t n) {
    return __wrap_malloc(n);
}
static void c_free(void *p) {
    free(p);
}
static void *c_realloc(void *p, size_t n) {
    return __wrap_realloc(p, n);
}
static char *c_strdup(const char *s) {
    return __wrap_strdup(s);
}
static void *c_calloc(size_t n, size_t m) {
    return __wrap_calloc(n, m);
}

/* OpenSSL's allocator */
static void *o_malloc(size_t n, const char *file, int line) {
    return __wrap_malloc(n);
}
static void *o_realloc(void *p, size_t n, const char *file, int line) {
    return __wrap_realloc(p, n);
}
static void o_free(void *p, const char *file, int line) {
    free(p);
}

static void arm(long at) {
    atomic_store(&alloc_count, 0);
    atomic_store(&fail_at, at);
    atomic_store(&injected, false);
    atomic_store(&armed, true);
}
static void disarm(void) {
    atomic_store(&armed, false);
}

/* ---- the fixture ---------------------------------------------------------------------- */

#define MIB ((size_t)1 << 20)
#define PART (5 * MIB)           /* S3's minimum part size */
#define OBJ (6 * MIB + 12345)    /* two parts: a multipart upload, two ranged GETs */
#define BUCKET "tort"
#define DL_KEY "obj-size-6303801" /* OBJ bytes of the sink's pattern */

static char g_endpoint[64];
static char g_sts_url[128]; /* the STS endpoint of the credentials server */
static char g_dir[256];   /* the runs' files */
static char g_src[300];   /* the file uploaded */
static unsigned char *g_data;

/* Byte i of every object the sink serves (bench/README.md). */
static unsigned char pattern_byte(uint64_t i) {
    return (unsigned char)((uint32_t)((i % 1048573u) * 2654435761u) >> 24);
}
static bool is_pattern(const unsigned char *p, size_t len, uint64_t off) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern_byte(off + i))
            return false;
    return true;
}

static void client_options(struct s3f_client_options *o) {
    memset(o, 0, sizeof(*o));
    o->endpoint_url = g_endpoint;
    o->region = "us-east-1";
    o->access_key_id = "AKIDTORTURE";
    o->secret_access_key = "secret";
    o->force_path_style = 1;
    o->part_size_bytes = PART;
    o->memory_limit_bytes = 16 * MIB;
    o->max_connections = 8;
    o->stall_timeout_ms = 10000;
    o->connect_timeout_ms = 2000;
}

/* An operation: runs with the allocator armed by `run` (a client it gets is made and freed
 * unarmed). Returns the status; sets *bad to a reason when S3F_OK came with wrong results. */
struct op {
    const char *name;
    bool needs_client;
    enum s3f_status (*fn)(struct s3f_client *c, long at, const char **bad);
    long bound;  /* sweep every N up to this... */
    long stride; /* ...then every stride-th (0: every N) */
};

static struct s3f_error g_err; /* the operation's error, for the result line */

static enum s3f_status armed_call_done(enum s3f_status st) {
    disarm();
    return st;
}

static enum s3f_status op_client(struct s3f_client *unused, long at, const char **bad) {
    struct s3f_client_options o;
    client_options(&o);
    struct s3f_client *c = NULL;
    arm(at);
    enum s3f_status st = s3f_client_new(&o, &c, &g_err);
    disarm();
    if ((st == S3F_OK) != (c != NULL))
        *bad = "client_new: status and client disagree";
    s3f_client_free(c);
    return st;
}

/* A client whose region, endpoint and keys come from the shared config and credentials files
 * of a named profile (src/auth/profile.c), and its credentials source. */
static enum s3f_status op_client_profile(struct s3f_client *unused, long at, const char **bad) {
    struct s3f_client_options o;
    client_options(&o);
    o.region = NULL;
    o.endpoint_url = NULL;
    o.access_key_id = NULL;
    o.secret_access_key = NULL;
    char path[400];
    snprintf(path, sizeof(path), "%s/config", g_dir);
    setenv("AWS_CONFIG_FILE", path, 1);
    snprintf(path, sizeof(path), "%s/credentials", g_dir);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    setenv("AWS_PROFILE", "torture", 1);
    struct s3f_client *c = NULL;
    char src[64], akid[64];
    arm(at);
    enum s3f_status st = s3f_client_new(&o, &c, &g_err);
    if (st == S3F_OK)
        st = s3f_client_credentials_source(c, src, sizeof(src), akid, sizeof(akid), &g_err);
    disarm();
    if (st == S3F_OK && (strcmp(src, "profile:torture") || strcmp(akid, "AKIDPROFILE") ||
                         strcmp(s3f_client_region(c), "eu-torture-1") ||
                         strcmp(s3f_client_endpoint(c), g_endpoint)))
        *bad = "client_profile: wrong region, endpoint or credentials";
    s3f_client_free(c);
    return st;
}

static enum s3f_status op_upload_buffer(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    arm(at);
    enum s3f_status st =
        s3f_upload_buffer(c, BUCKET, "up-buffer", g_data, OBJ, NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK && info.size != OBJ)
        *bad = "upload_buffer: wrong size";
    return st;
}

static enum s3f_status op_upload_file(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    arm(at);
    enum s3f_status st = s3f_upload_file(c, BUCKET, "up-file", g_src, NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK && info.size != OBJ)
        *bad = "upload_file: wrong size";
    return st;
}

static enum s3f_status op_put_object(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    arm(at);
    enum s3f_status st = s3f_put_object(c, BUCKET, "put", g_data, 4096, NULL, &info, &g_err);
    disarm();
    return st;
}

static enum s3f_status op_writer(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    struct s3f_writer *w = NULL;
    arm(at);
    enum s3f_status st = s3f_writer_open(c, BUCKET, "up-writer", NULL, &w, &g_err);
    if (st != S3F_OK)
        return armed_call_done(st);
    size_t off = 0, chunk = 256 << 10;
    while (off < OBJ) {
        size_t n = OBJ - off < chunk ? OBJ - off : chunk;
        if ((st = s3f_writer_write(w, g_data + off, n, &g_err)) != S3F_OK)
            break;
        off += n;
    }
    enum s3f_status cst = s3f_writer_close(w, &info, &g_err);
    disarm();
    if (st == S3F_OK)
        st = cst;
    else if (cst != st)
        *bad = "writer: close did not return the write's error";
    if (st == S3F_OK && info.size != OBJ)
        *bad = "writer: wrong size";
    return st;
}

static enum s3f_status op_download_buffer(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    unsigned char *buf = malloc(OBJ + 1);
    if (!buf)
        return S3F_ERR_INTERNAL;
    arm(at);
    enum s3f_status st = s3f_download_buffer(c, BUCKET, DL_KEY, buf, OBJ + 1, NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK && (info.size != OBJ || !is_pattern(buf, OBJ, 0)))
        *bad = "download_buffer: wrong bytes";
    free(buf);
    return st;
}

static enum s3f_status op_download_alloc(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    void *data = NULL;
    size_t len = 0;
    arm(at);
    enum s3f_status st =
        s3f_download_alloc(c, BUCKET, DL_KEY, NULL, NULL, NULL, &data, &len, &info, &g_err);
    disarm();
    if (st == S3F_OK && (len != OBJ || !is_pattern(data, len, 0)))
        *bad = "download_alloc: wrong bytes";
    if (st != S3F_OK && (data || len))
        *bad = "download_alloc: failed but returned data";
    free(data);
    return st;
}

static enum s3f_status op_download_file(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    char path[400];
    char name[64];
    snprintf(name, sizeof(name), "dl-%ld-%d", at, (int)getpid());
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    arm(at);
    enum s3f_status st = s3f_download_file(c, BUCKET, DL_KEY, path, NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK) {
        FILE *f = fopen(path, "rb");
        unsigned char *buf = malloc(OBJ + 1);
        size_t n = f && buf ? fread(buf, 1, OBJ + 1, f) : 0;
        if (n != OBJ || !is_pattern(buf, n, 0))
            *bad = "download_file: wrong bytes";
        free(buf);
        if (f)
            fclose(f);
        unlink(path);
    } else if (access(path, F_OK) == 0) {
        *bad = "download_file: failed but left the file";
        unlink(path);
    }
    /* the temporary file is named after the destination; other runs may be in flight */
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (strstr(de->d_name, name)) { /* ".dl-N-PID.s3flash-XXXXXXXX" */
                *bad = "download_file: left a temporary file";
                char p[700];
                snprintf(p, sizeof(p), "%s/%s", g_dir, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    return st;
}

static enum s3f_status op_reader(struct s3f_client *c, long at, const char **bad) {
    struct s3f_reader *r = NULL;
    unsigned char *buf = malloc(3 * MIB);
    if (!buf)
        return S3F_ERR_INTERNAL;
    arm(at);
    enum s3f_status st = s3f_reader_open(c, BUCKET, DL_KEY, NULL, &r, &g_err);
    if (st == S3F_OK) {
        size_t n = 0;
        /* sequential reads (the read-ahead window), a read near the end (the tail cache),
         * a seek back and a large read (straight into the buffer) */
        for (int i = 0; i < 3 && st == S3F_OK; i++) {
            st = s3f_reader_read(r, buf, 64 << 10, &n, &g_err);
            if (st == S3F_OK && (n != 64 << 10 || !is_pattern(buf, n, (uint64_t)i * (64 << 10))))
                *bad = "reader: wrong sequential bytes";
        }
        if (st == S3F_OK) {
            st = s3f_reader_pread(r, buf, 1000, OBJ - 1000, &n, &g_err);
            if (st == S3F_OK && (n != 1000 || !is_pattern(buf, n, OBJ - 1000)))
                *bad = "reader: wrong tail bytes";
        }
        uint64_t pos = 0;
        if (st == S3F_OK)
            st = s3f_reader_seek(r, 3 * MIB, 0, &pos, &g_err);
        if (st == S3F_OK) {
            st = s3f_reader_read(r, buf, 3 * MIB, &n, &g_err);
            if (st == S3F_OK && (n != 3 * MIB || !is_pattern(buf, n, 3 * MIB)))
                *bad = "reader: wrong large read";
        }
        s3f_reader_close(r);
    } else if (r) {
        *bad = "reader: open failed but returned a reader";
    }
    disarm();
    free(buf);
    return st;
}

static enum s3f_status op_credentials(struct s3f_client *c, long at, const char **bad) {
    char src[64], akid[64];
    arm(at);
    enum s3f_status st =
        s3f_client_credentials_source(c, src, sizeof(src), akid, sizeof(akid), &g_err);
    disarm();
    if (st == S3F_OK && (strcmp(src, "container") || strcmp(akid, "AKIDCONTAINER")))
        *bad = "credentials: wrong source or key";
    return st;
}

/* ListObjectsV2 (a query to sign and escape, an XML answer). */
static enum s3f_status op_list(struct s3f_client *c, long at, const char **bad) {
    struct s3f_list_options lo = {.prefix = "dir/a&b <c>", .delimiter = "/", .max_keys = 10};
    struct s3f_list_page *pg = NULL;
    arm(at);
    enum s3f_status st = s3f_list_objects_v2(c, BUCKET, &lo, &pg, &g_err);
    disarm();
    if ((st == S3F_OK) != (pg != NULL))
        *bad = "list: status and page disagree";
    s3f_list_page_free(pg);
    return st;
}

/* DeleteObjects (an XML body built, with Content-MD5). */
static enum s3f_status op_delete_objects(struct s3f_client *c, long at, const char **bad) {
    const char *keys[] = {"k1", "k&2", "k<3>", "dir/k 4"};
    size_t failed = 0;
    arm(at);
    enum s3f_status st = s3f_delete_objects(c, BUCKET, keys, 4, &failed, &g_err);
    disarm();
    if (st == S3F_OK && failed)
        *bad = "delete_objects: keys reported failed";
    return st;
}

/* s3f_copy of a small object: HEAD of the source, one CopyObject (XML answer). */
static enum s3f_status op_copy(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    arm(at);
    enum s3f_status st = s3f_copy(c, BUCKET, DL_KEY, BUCKET, "copied", NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK && info.size != OBJ)
        *bad = "copy: wrong size";
    return st;
}

/* The web identity provider: AssumeRoleWithWebIdentity (a POST, an XML answer: expat). */
static enum s3f_status op_web_identity(struct s3f_client *c, long at, const char **bad) {
    char src[64], akid[64];
    arm(at);
    enum s3f_status st =
        s3f_client_credentials_source(c, src, sizeof(src), akid, sizeof(akid), &g_err);
    disarm();
    if (st == S3F_OK && (strcmp(src, "web-identity") || strcmp(akid, "AKIDSTS")))
        *bad = "web_identity: wrong source or key";
    return st;
}

/* A request signed with the container credentials: the fetch and the first signature. */
static enum s3f_status op_credentials_head(struct s3f_client *c, long at, const char **bad) {
    struct s3f_object_info info;
    arm(at);
    enum s3f_status st = s3f_head_object(c, BUCKET, DL_KEY, NULL, &info, &g_err);
    disarm();
    if (st == S3F_OK && info.size != OBJ)
        *bad = "credentials_head: wrong size";
    return st;
}

/* bound/stride: every N up to `bound`, then every `stride`-th (0: every N; TORTURE_FULL=1:
 * every N for all). The operations of more than ~300 allocations take a stride after 150,
 * to keep the whole sweep to a few minutes. Counts and times: docs/TESTING.md. */
static const struct op ops[] = {
    {"client", false, op_client, 0, 0},
    {"client_profile", false, op_client_profile, 0, 0},
    {"credentials", true, op_credentials, 0, 0},
    {"credentials_head", true, op_credentials_head, 150, 3},
    {"web_identity", true, op_web_identity, 0, 0},
    {"put_object", true, op_put_object, 0, 0},
    {"list", true, op_list, 0, 0},
    {"delete_objects", true, op_delete_objects, 0, 0},
    {"copy", true, op_copy, 0, 0},
    {"upload_buffer", true, op_upload_buffer, 150, 3},
    {"upload_file", true, op_upload_file, 150, 3},
    {"writer", true, op_writer, 150, 3},
    {"download_buffer", true, op_download_buffer, 150, 3},
    {"download_alloc", true, op_download_alloc, 0, 0},
    {"download_file", true, op_download_file, 150, 3},
    {"reader", true, op_reader, 150, 3},
};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

static const struct op *find_op(const char *name) {
    for (size_t i = 0; i < N_OPS; i++)
        if (!strcmp(ops[i].name, name))
            return &ops[i];
    return NULL;
}

static bool is_cred_op(const struct op *op) {
    return !strncmp(op->name, "credentials", 11) || !strcmp(op->name, "web_identity");
}

/* Statuses an allocation failure must never be reported as: they blame the caller's
 * arguments, its configuration or files, or the data. (S3F_ERR_INTERNAL is allowed: OpenSSL 3.0
 * reports some failed allocations as other errors, see s3f__crypto_status. So are the server's
 * answers: libcurl 7.88 sends a request without its query when an allocation in its URL
 * parser fails, and the sink, which checks no signature, answers that other request.) */
static bool blames_caller(enum s3f_status st) {
    switch (st) {
    case S3F_ERR_INVALID_ARGUMENT:
    case S3F_ERR_INVALID_URI:
    case S3F_ERR_NO_CREDENTIALS:
    case S3F_ERR_CREDENTIALS:
    case S3F_ERR_CONFIG:
    case S3F_ERR_IO:
    case S3F_ERR_CHECKSUM:
    case S3F_ERR_ABORTED:
    case S3F_ERR_UNSUPPORTED:
        return true;
    default:
        return false;
    }
}

/* One run, in this process: the result line is written to `fd`. Returns 0 when the run
 * passed its own checks. */
static int run_one(const struct op *op, long at, int fd) {
    struct s3f_client *c = NULL;
    if (op->needs_client) {
        struct s3f_client_options o;
        client_options(&o);
        if (is_cred_op(op)) {
            o.access_key_id = NULL;
            o.secret_access_key = NULL;
        }
        if (!strcmp(op->name, "web_identity")) { /* first in the chain: before the container */
            char tf[400];
            snprintf(tf, sizeof(tf), "%s/token", g_dir);
            setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tf, 1);
            setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/torture", 1);
            setenv("AWS_ROLE_SESSION_NAME", "torture", 1);
            setenv("AWS_ENDPOINT_URL_STS", g_sts_url, 1);
        }
        struct s3f_error e;
        if (s3f_client_new(&o, &c, &e) != S3F_OK) {
            char msg[512];
            s3f_error_format(&e, msg, sizeof(msg));
            dprintf(fd, "SETUP_FAILED 0 0 - | %s\n", msg);
            return 1;
        }
    }
    const char *bad = NULL;
    s3f_error_clear(&g_err);
    enum s3f_status st = op->fn(c, at, &bad);
    long count = atomic_load(&alloc_count);
    bool inj = atomic_load(&injected);
    s3f_client_free(c);
    char msg[512] = "";
    if (st != S3F_OK)
        s3f_error_format(&g_err, msg, sizeof(msg));
    dprintf(fd, "%s %d %ld %s | %s\n", s3f_status_name(st), inj ? 1 : 0, count,
            bad ? bad : "-", msg);
    if (bad)
        return 1;
    if (!inj && st != S3F_OK)
        return 1; /* failed with nothing injected */
    if (inj && blames_caller(st))
        return 1;
    return 0;
}

/* ---- the servers ---------------------------------------------------------------------- */

static pid_t g_sink_pid, g_creds_pid;

static const char sts_body[] =
    "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
    "<AssumeRoleWithWebIdentityResult><Credentials>"
    "<SessionToken>token</SessionToken><SecretAccessKey>secret</SecretAccessKey>"
    "<Expiration>2099-01-01T00:00:00Z</Expiration><AccessKeyId>AKIDSTS</AccessKeyId>"
    "</Credentials></AssumeRoleWithWebIdentityResult>"
    "<ResponseMetadata><RequestId>torture</RequestId></ResponseMetadata>"
    "</AssumeRoleWithWebIdentityResponse>";

static const char creds_body[] =
    "{\"AccessKeyId\":\"AKIDCONTAINER\",\"SecretAccessKey\":\"secret\","
    "\"Token\":\"token\",\"Expiration\":\"2099-01-01T00:00:00Z\"}";

/* The container credentials endpoint (GET: a JSON document) and STS (POST: the XML one): one
 * process, one connection at a time; a request body is read whole before the answer. */
static void creds_serve(int ls) {
    for (;;) {
        int s = accept(ls, NULL, NULL);
        if (s < 0)
            continue;
        char req[16384];
        size_t got = 0;
        char *end = NULL;
        req[0] = '\0';
        while (got < sizeof(req) - 1 && !end) {
            ssize_t n = recv(s, req + got, sizeof(req) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
            req[got] = '\0';
            end = strstr(req, "\r\n\r\n");
        }
        const char *cl = strcasestr(req, "\r\ncontent-length:");
        size_t want = end ? (size_t)(end + 4 - req) + (cl ? strtoul(cl + 17, NULL, 10) : 0) : 0;
        while (got < want && got < sizeof(req) - 1) {
            ssize_t n = recv(s, req + got, sizeof(req) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        bool post = !strncmp(req, "POST ", 5);
        const char *body = post ? sts_body : creds_body;
        char out[2048];
        int n = snprintf(out, sizeof(out),
                         "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         post ? "text/xml" : "application/json", strlen(body), body);
        ssize_t w = send(s, out, (size_t)n, MSG_NOSIGNAL);
        (void)w;
        close(s);
    }
}

static int start_creds_server(void) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 64) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        return -1;
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        creds_serve(ls);
        _exit(0);
    }
    close(ls);
    g_creds_pid = p;
    return ntohs(a.sin_port);
}

static int start_sink(void) {
    const char *exe = getenv("S3FLASH_SINK");
    static char path[600];
    if (!exe || !*exe) {
        const char *root = getenv("S3F_BUILD_ROOT");
        snprintf(path, sizeof(path), "%s/bench/s3flash-sink", root && *root ? root : "build");
        exe = path;
    }
    if (access(exe, X_OK) != 0) {
        fprintf(stderr, "torture_test: %s not built (set S3FLASH_SINK)\n", exe);
        return -77;
    }
    /* ready when it printed its port, after it listens (never a port file) */
    char *argv[] = {(char *)exe, "--port", "0", "--print-port", "--quiet", "--threads", "2",
                    NULL};
    int pid;
    int port = test_spawn_port(argv, "port", 30000, &pid);
    if (port > 0)
        g_sink_pid = pid;
    return port;
}

/* The files setup() writes in g_dir (runs remove their own). */
#define N_FIXTURE_FILES 5
static char g_fixture_files[N_FIXTURE_FILES][320];

/* SIGTERM (meson's timeout), SIGINT, SIGHUP, SIGPIPE: the servers and the files go too. */
static void on_signal(int sig) {
    if (g_sink_pid > 0)
        kill(g_sink_pid, SIGTERM);
    if (g_creds_pid > 0)
        kill(g_creds_pid, SIGTERM);
    for (size_t i = 0; i < N_FIXTURE_FILES; i++) /* unlink, rmdir: async-signal-safe */
        unlink(g_fixture_files[i]);
    rmdir(g_dir);
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int g_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};

static void rm_dir(void) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char p[700];
            snprintf(p, sizeof(p), "%s/%s", g_dir, de->d_name);
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

static void stop_servers(void) {
    pid_t pids[] = {g_sink_pid, g_creds_pid};
    for (size_t i = 0; i < 2; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
            waitpid(pids[i], NULL, 0);
        }
    rm_dir();
}

static int setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/s3f-torture.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir))
        return -1;
    const char *names[N_FIXTURE_FILES] = {"src", "config", "credentials", "token", "sink-port"};
    for (size_t i = 0; i < N_FIXTURE_FILES; i++)
        snprintf(g_fixture_files[i], sizeof(g_fixture_files[i]), "%s/%s", g_dir, names[i]);
    g_data = malloc(OBJ);
    if (!g_data)
        return -1;
    for (size_t i = 0; i < OBJ; i++)
        g_data[i] = (unsigned char)(i * 7 + (i >> 13));
    snprintf(g_src, sizeof(g_src), "%s/src", g_dir);
    FILE *f = fopen(g_src, "wb");
    if (!f || fwrite(g_data, 1, OBJ, f) != OBJ || fclose(f))
        return -1;
    int port = start_sink();
    if (port < 0)
        return port;
    snprintf(g_endpoint, sizeof(g_endpoint), "http://127.0.0.1:%d", port);
    int cport = start_creds_server();
    if (cport < 0)
        return -1;
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/creds", cport);
    snprintf(g_sts_url, sizeof(g_sts_url), "http://127.0.0.1:%d", cport);
    char cfg[400];
    snprintf(cfg, sizeof(cfg), "%s/config", g_dir);
    FILE *cf = fopen(cfg, "w");
    if (!cf || fprintf(cf, "[default]\nregion = us-east-1\n\n[profile torture]\n"
                           "region = eu-torture-1\nmax_attempts = 3\n"
                           "services = torture-svc\n\n[services torture-svc]\ns3 =\n"
                           "  endpoint_url = %s\n",
                       g_endpoint) < 0 || fclose(cf))
        return -1;
    snprintf(cfg, sizeof(cfg), "%s/credentials", g_dir);
    cf = fopen(cfg, "w");
    if (!cf || fputs("[default]\naws_access_key_id = AKIDDEFAULT\n"
                     "aws_secret_access_key = x\n\n[torture]\n"
                     "aws_access_key_id = AKIDPROFILE\naws_secret_access_key = secret\n", cf) < 0 ||
        fclose(cf))
        return -1;
    char tf[400];
    snprintf(tf, sizeof(tf), "%s/token", g_dir);
    FILE *tok = fopen(tf, "w");
    if (!tok || fputs("eyJ.torture.token", tok) < 0 || fclose(tok))
        return -1;
    /* the default chain finds only the container provider */
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    unsetenv("AWS_ROLE_ARN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("S3FLASH_LOG");
    char none[300];
    snprintf(none, sizeof(none), "%s/no-such-file", g_dir);
    setenv("AWS_CONFIG_FILE", none, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", none, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    setenv("S3FLASH_RETRY_BASE_MS", "1", 1); /* retries of injected failures stay quick */
    return 0;
}

/* ---- the sweep ------------------------------------------------------------------------ */

struct child {
    pid_t pid;
    int fd;
    long at;
    struct timespec start;
};

struct tally {
    long runs, failures, max_count, injected_ok;
    double slowest_s; /* the longest run, and its N */
    long slowest_at;
    char statuses[512]; /* "NAME:count ..." */
    const char *names[32];
    long counts[32];
    int n_names;
};

static void tally_status(struct tally *t, const char *name) {
    for (int i = 0; i < t->n_names; i++)
        if (!strcmp(t->names[i], name)) {
            t->counts[i]++;
            return;
        }
    if (t->n_names < 32) {
        t->names[t->n_names] = strdup(name);
        t->counts[t->n_names++] = 1;
    }
}

static double elapsed_s(const struct timespec *a) {
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

static pid_t spawn(const struct op *op, long at, int *fd) {
    int p[2];
    fflush(stdout); /* the child must not print the parent's buffered lines again */
    fflush(stderr);
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        for (size_t i = 0; i < sizeof(g_signals) / sizeof(g_signals[0]); i++)
            signal(g_signals[i], SIG_DFL);
        close(p[0]);
        int deadline = atoi(getenv("TORTURE_DEADLINE_S") ? getenv("TORTURE_DEADLINE_S") : "60");
        alarm(deadline > 0 ? (unsigned)deadline : 60); /* a hang dies of SIGALRM */
        int rc = run_one(op, at, p[1]);
        close(p[1]);
        exit(rc ? 3 : 0); /* through LeakSanitizer's exit check (23 on a leak) */
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

/* Collect one child; returns true when its run injected nothing (the sweep's end). */
static bool reap(const struct op *op, struct child *ch, struct tally *t) {
    char line[512] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(line) - 1 && (n = read(ch->fd, line + got, sizeof(line) - 1 - got)) > 0)
        got += (size_t)n;
    line[got] = '\0';
    close(ch->fd);
    int ws = 0;
    waitpid(ch->pid, &ws, 0);
    t->runs++;
    double took = elapsed_s(&ch->start);
    if (took > t->slowest_s) {
        t->slowest_s = took;
        t->slowest_at = ch->at;
    }
    char st[64] = "", why[256] = "";
    int inj = 1;
    long count = 0;
    int fields = sscanf(line, "%63s %d %ld %255[^|\n]", st, &inj, &count, why);
    bool ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && fields == 4;
    if (!ok) {
        t->failures++;
        const char *what = WIFEXITED(ws) && WEXITSTATUS(ws) == 3 ? "wrong result or status"
                           : WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM ? "hang (deadline)"
                           : WIFSIGNALED(ws)                           ? "killed by a signal"
                           : WIFEXITED(ws) && (WEXITSTATUS(ws) == 1 || WEXITSTATUS(ws) == 23)
                               ? "sanitizer report (a leak, or an error after the result)"
                                                                       : "failed";
        printf("FAIL %s %ld: %s (wait status %d) result: %s", op->name, ch->at, what, ws,
               got ? line : "(none)\n");
        fflush(stdout);
        return fields >= 2 && !inj; /* a failed run that injected nothing ends the sweep */
    }
    if (getenv("TORTURE_VERBOSE"))
        printf("  %s %ld: %s", op->name, ch->at, line);
    tally_status(t, st);
    if (count > t->max_count)
        t->max_count = count;
    if (inj && !strcmp(st, "S3F_OK"))
        t->injected_ok++;
    return !inj;
}

static long next_at(const struct op *op, long at, bool full) {
    if (full || !op->stride || at < op->bound)
        return at + 1;
    return at + op->stride;
}

static int sweep(const struct op *op, int jobs, bool full) {
    struct tally t;
    memset(&t, 0, sizeof(t));
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    struct child kids[64];
    int n_kids = 0;
    long at = 1;
    bool done = false;
    while (!done || n_kids) {
        if (!done && at > 4 * t.max_count + 1000) { /* no run got through: give up */
            printf("FAIL %s: no run without an injected failure up to N=%ld\n", op->name, at);
            t.failures++;
            done = true;
        }
        while (!done && n_kids < jobs) {
            struct child *ch = &kids[n_kids];
            ch->at = at;
            clock_gettime(CLOCK_MONOTONIC, &ch->start);
            ch->pid = spawn(op, at, &ch->fd);
            if (ch->pid < 0) {
                perror("fork");
                return 1;
            }
            n_kids++;
            at = next_at(op, at, full);
        }
        /* wait for the oldest (runs end in about the order they started) */
        if (reap(op, &kids[0], &t) && !done)
            done = true;
        memmove(&kids[0], &kids[1], (size_t)(n_kids - 1) * sizeof(kids[0]));
        n_kids--;
    }
    int len = 0;
    for (int i = 0; i < t.n_names && len < (int)sizeof(t.statuses) - 40; i++)
        len += snprintf(t.statuses + len, sizeof(t.statuses) - (size_t)len, "%s%s:%ld",
                        i ? " " : "", t.names[i], t.counts[i]);
    printf("%-17s allocations %4ld  runs %4ld  failures %ld  ok-after-injection %3ld  %5.1fs "
           "(slowest: N=%ld %.2fs)  statuses %s\n",
           op->name, t.max_count, t.runs, t.failures, t.injected_ok, elapsed_s(&start),
           t.slowest_at, t.slowest_s, t.statuses);
    fflush(stdout);
    for (int i = 0; i < t.n_names; i++)
        free((void *)t.names[i]);
    return t.failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < N_OPS; i++)
            printf("%s\n", ops[i].name);
        return 0;
    }
    /* before any allocation of OpenSSL or libcurl: theirs are counted too */
    if (!CRYPTO_set_mem_functions(o_malloc, o_realloc, o_free))
        fprintf(stderr, "torture_test: CRYPTO_set_mem_functions failed: OpenSSL not counted\n");
    if (curl_global_init_mem(CURL_GLOBAL_DEFAULT, c_malloc, c_free, c_realloc, c_strdup,
                             c_calloc) != CURLE_OK) {
        fprintf(stderr, "torture_test: curl_global_init_mem failed\n");
        return 1;
    }
    int rc = setup();
    if (rc < 0) {
        stop_servers();
        return rc == -77 ? 77 : 1;
    }
    for (size_t i = 0; i < sizeof(g_signals) / sizeof(g_signals[0]); i++)
        signal(g_signals[i], on_signal);
    if (!getenv("TORTURE_COLD") || strcmp(getenv("TORTURE_COLD"), "1")) {
        /* OpenSSL fetches its algorithms on first use (thousands of allocations, once per
         * process): done here, so that the runs count the operations' own allocations */
        struct s3f_client_options o;
        client_options(&o);
        struct s3f_client *c = NULL;
        char *url = NULL;
        if (s3f_client_new(&o, &c, &g_err) != S3F_OK ||
            s3f_presign(c, "GET", BUCKET, "warm", 60, &url, &g_err) != S3F_OK) {
            fprintf(stderr, "torture_test: warm-up failed\n");
            stop_servers();
            return 1;
        }
        free(url);
        s3f_client_free(c);
    }
    int fail = 0;
    if (argc == 3 && find_op(argv[1]) && argv[2][0] >= '0' && argv[2][0] <= '9') {
        alarm(120);
        print_stack = getenv("TORTURE_STACK") && !strcmp(getenv("TORTURE_STACK"), "1");
        fail = run_one(find_op(argv[1]), atol(argv[2]), STDOUT_FILENO);
    } else {
        const char *j = getenv("TORTURE_JOBS");
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        int jobs = j && atoi(j) > 0 ? atoi(j) : ncpu > 4 ? 4 : ncpu > 1 ? (int)ncpu : 1;
        if (jobs > 64)
            jobs = 64;
        bool full = getenv("TORTURE_FULL") && !strcmp(getenv("TORTURE_FULL"), "1");
        for (size_t i = 0; i < N_OPS; i++) {
            bool chosen = argc == 1;
            for (int a = 1; a < argc; a++)
                chosen |= !strcmp(argv[a], ops[i].name);
            if (chosen)
                fail |= sweep(&ops[i], jobs, full);
        }
        for (int a = 1; a < argc; a++)
            if (!find_op(argv[a])) {
                fprintf(stderr, "torture_test: unknown operation %s (--list)\n", argv[a]);
                fail = 1;
            }
    }
    stop_servers();
    free(g_data);
    curl_global_cleanup();
    return fail ? 1 : 0;
}
