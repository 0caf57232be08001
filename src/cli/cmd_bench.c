/* s3flash bench: upload and download N objects of one size through the transfer engine and
 * print what it took (GB/s, requests/s, CPU seconds per GB, peak memory), per phase.
 *
 * Uploads read one buffer that is filled (and so faulted in) once, before any clock starts:
 * fresh pages fault in at 0.4-0.8 GiB/s on these VMs, which would otherwise be measured.
 * Downloads go into a second buffer faulted in the same way and are compared with the first.
 * The buffer holds the pattern of bench/sink.c (byte i is
 * ((i mod 1048573) * 2654435761 mod 2^32) >> 24), so that the check also passes against the
 * loopback sink, which stores sizes, not bytes. Its period is not a power of two, so a part
 * written at the wrong offset is caught.
 *
 * bench's options have no ids in cli.h's enum: the generic parser validates them (it records
 * them all under OPT_NONE) and this file reads their values back from argv with the same
 * rules (global options first, "--name VALUE" or "--name=VALUE", "--" ends the options). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define MiB (1024.0 * 1024.0)
#define WRITER_CHUNK_BYTES ((size_t)1 << 20) /* --writer: bytes per s3f_writer_write */

/* Declared here and in main.c, which registers the command (cli.h is not touched). */
extern const struct cli_opt_spec cli_bench_opts[];
int cli_cmd_bench(struct cli_ctx *ctx);
void cli_bench_set_argv(int argc, char **argv);

enum bench_opt {
    B_SIZE,
    B_COUNT,
    B_PART_SIZE,
    B_CONCURRENCY,
    B_MEMORY_LIMIT,
    B_IO_THREADS,
    B_CHECKSUM,
    B_WRITER,
    B_KEEP,
    B_NO_VERIFY,
    B_COUNT_,
};

/* In the order of enum bench_opt (the index is the enum value). */
const struct cli_opt_spec cli_bench_opts[] = {
    {"size", 0, 1, OPT_NONE, "SIZE", "bytes per object, with K/M/G/T (binary) (default 64M)"},
    {"count", 0, 1, OPT_NONE, "N", "objects (default 4)"},
    {"part-size", 0, 1, OPT_NONE, "SIZE", "part size, 5M..5G (default: the client's, 8M)"},
    {"concurrency", 0, 1, OPT_NONE, "N", "data requests in flight (default: the client's)"},
    {"memory-limit", 0, 1, OPT_NONE, "SIZE", "buffer pool bound, at least 16M (default 512M)"},
    {"io-threads", 0, 1, OPT_NONE, "N", "I/O threads of the client (default 2)"},
    {"checksum", 0, 1, OPT_NONE, "ALG", "crc32c (default), crc32, crc64nvme or none"},
    {"writer", 0, 0, OPT_NONE, NULL, "upload through the streaming writer (1 MiB writes)"},
    {"keep", 0, 0, OPT_NONE, NULL, "keep the objects (default: delete them at the end)"},
    {"no-verify", 0, 0, OPT_NONE, NULL, "do not compare downloaded bytes with the uploaded"},
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static int bench_argc;
static char **bench_argv;

void cli_bench_set_argv(int argc, char **argv) {
    bench_argc = argc;
    bench_argv = argv;
}

static const struct cli_opt_spec *find_spec(const struct cli_opt_spec *specs, const char *name,
                                            size_t len, char short_name) {
    for (const struct cli_opt_spec *s = specs; s->long_name; s++) {
        if (short_name ? s->short_name == short_name
                       : strlen(s->long_name) == len && memcmp(s->long_name, name, len) == 0)
            return s;
    }
    return NULL;
}

/* The values of bench's options (NULL: not given; "" for a flag that was given). */
static void read_bench_opts(const char *value[B_COUNT_]) {
    for (int i = 0; i < B_COUNT_; i++)
        value[i] = NULL;
    for (int i = 1; i < bench_argc; i++) {
        const char *a = bench_argv[i];
        if (strcmp(a, "--") == 0)
            return;
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const struct cli_opt_spec *s = find_spec(cli_bench_opts, name, len, 0);
            if (!s) {
                const struct cli_opt_spec *g = find_spec(cli_global_opts, name, len, 0);
                if (g && g->takes_value && !eq)
                    i++;
                continue;
            }
            const char *v = "";
            if (s->takes_value)
                v = eq ? eq + 1 : (i + 1 < bench_argc ? bench_argv[++i] : "");
            value[s - cli_bench_opts] = v;
        } else if (a[0] == '-' && a[1] != '\0') {
            for (const char *p = a + 1; *p; p++) {
                const struct cli_opt_spec *g = find_spec(cli_global_opts, NULL, 0, *p);
                if (g && g->takes_value) {
                    if (!p[1])
                        i++;
                    break;
                }
            }
        }
    }
}

/* "64M", "6MiB", "1G", "4096": binary multiples. 0 and a message on error. */
static int parse_size(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!s[0] || s[0] == '-')
        return -1;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    else if (!shift && strcmp(end, "B") == 0)
        end++;
    if (*end)
        return -1;
    if (shift && n > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)n << shift;
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out) {
    char *end = NULL;
    errno = 0;
    if (!s[0] || s[0] == '-')
        return -1;
    unsigned long n = strtoul(s, &end, 10);
    if (errno || *end || n < 1 || n > max)
        return -1;
    *out = n;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Restart the process's peak RSS (VmHWM) from its current RSS; 0 when the kernel allows it
 * (Linux 4.0+: "5" to /proc/self/clear_refs). */
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Peak RSS in bytes: VmHWM, else getrusage's ru_maxrss (since start, not resettable). */
static uint64_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        int found = 0;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) {
                found = 1;
                break;
            }
        fclose(f);
        if (found)
            return (uint64_t)kb * 1024;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

/* A buffer of `len` bytes, every page touched (so no page faults are measured later). */
static void *alloc_faulted(size_t len) {
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* fewer faults and TLB misses where THP is on */
#endif
    memset(p, 0, len);
    return p;
}

/* bench/sink.c's pattern: byte i = ((i mod 1048573) * 2654435761 mod 2^32) >> 24. */
static void fill_pattern(unsigned char *p, size_t len) {
    const size_t period = 1048573;
    size_t first = len < period ? len : period;
    for (size_t i = 0; i < first; i++)
        p[i] = (unsigned char)(((uint32_t)i * 2654435761u) >> 24);
    for (size_t off = first; off < len; off += period) /* whole periods: same bytes */
        memcpy(p + off, p, len - off < period ? len - off : period);
}

struct phase {
    const char *name;
    size_t objects;
    uint64_t bytes;
    double seconds;
    double cpu_seconds;
    uint64_t requests;
    uint64_t base_rss; /* RSS when the phase began (the buffers included) */
    uint64_t peak_rss;
    uint64_t pool_high_water;
};

static void print_phase(const struct phase *p) {
    double gb = (double)p->bytes / 1e9;
    double secs = p->seconds > 0 ? p->seconds : 1e-9;
    char cpu[32];
    if (gb > 0)
        snprintf(cpu, sizeof(cpu), "%.3f", p->cpu_seconds / gb);
    else
        snprintf(cpu, sizeof(cpu), "-");
    double over = p->peak_rss > p->base_rss ? (double)(p->peak_rss - p->base_rss) : 0.0;
    printf("%-9s %7zu %14" PRIu64 " %9.3f %8.3f %11.1f %9s %13.1f %14.1f %12.1f\n", p->name,
           p->objects, p->bytes, p->seconds, gb / secs, (double)p->requests / secs, cpu,
           (double)p->peak_rss / MiB, over / MiB, (double)p->pool_high_water / MiB);
}

static enum s3f_status upload_writer(struct s3f_client *c, const char *bucket, const char *key,
                                     const unsigned char *data, size_t len,
                                     const struct s3f_upload_options *uo,
                                     struct s3f_error *err) {
    struct s3f_writer *w = NULL;
    enum s3f_status st = s3f_writer_open(c, bucket, key, uo, &w, err);
    if (st != S3F_OK)
        return st;
    for (size_t off = 0; off < len; off += WRITER_CHUNK_BYTES) {
        size_t n = len - off < WRITER_CHUNK_BYTES ? len - off : WRITER_CHUNK_BYTES;
        st = s3f_writer_write(w, data + off, n, err);
        if (st != S3F_OK) {
            s3f_writer_abort(w);
            return st;
        }
    }
    return s3f_writer_close(w, NULL, err);
}

/* The client, from the global options (as cli_client) plus bench's engine settings. */
static struct s3f_client *bench_client(struct cli_ctx *ctx, uint64_t part_size,
                                       uint64_t memory_limit, uint32_t concurrency,
                                       uint32_t io_threads, enum s3f_checksum_algorithm alg) {
    const struct cli_args *a = ctx->args;
    struct s3f_client_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.endpoint_url = a->value[OPT_ENDPOINT_URL];
    opts.region = a->value[OPT_REGION];
    opts.profile = a->value[OPT_PROFILE];
    opts.anonymous = a->set[OPT_NO_SIGN_REQUEST] ? 1 : 0;
    const char *fps = getenv("S3FLASH_FORCE_PATH_STYLE");
    opts.force_path_style = (a->set[OPT_FORCE_PATH_STYLE] ||
                             (fps && (strcmp(fps, "1") == 0 || strcmp(fps, "true") == 0 ||
                                      strcmp(fps, "yes") == 0)))
                                ? 1
                                : 0;
    if (a->set[OPT_DEBUG])
        opts.log_level = S3F_LOG_DEBUG;
    opts.part_size_bytes = part_size;
    opts.memory_limit_bytes = memory_limit;
    opts.max_inflight_requests = concurrency;
    opts.io_threads = io_threads;
    if (concurrency > 64)
        opts.max_connections = concurrency; /* else the default 64 would cap it */
    opts.checksum = alg;
    struct s3f_error err;
    s3f_error_clear(&err);
    struct s3f_client *c = NULL;
    enum s3f_status st = s3f_client_new(&opts, &c, &err);
    if (st != S3F_OK) {
        if (err.status == S3F_OK)
            err.status = st;
        if (!err.operation[0])
            snprintf(err.operation, sizeof(err.operation), "%s", "client");
        cli_report(&err, opts.endpoint_url);
        return NULL;
    }
    return c;
}

int cli_cmd_bench(struct cli_ctx *ctx) {
    const char *v[B_COUNT_];
    read_bench_opts(v);

    uint64_t size = 64ULL << 20, part_size = 0, memory_limit = 0;
    unsigned long count = 4, concurrency = 0, io_threads = 0;
    enum s3f_checksum_algorithm alg = S3F_CHECKSUM_CRC32C;
    const char *alg_name = "crc32c";
    if (v[B_SIZE] && (parse_size(v[B_SIZE], &size) != 0 || size == 0 ||
                      size > (uint64_t)SIZE_MAX / 2))
        return cli_usage_error(ctx->cmd, "--size must be a positive size like 64M or 1G, "
                                         "not '%s'", v[B_SIZE]);
    if (v[B_COUNT] && parse_uint(v[B_COUNT], 1000000, &count) != 0)
        return cli_usage_error(ctx->cmd, "--count must be a number from 1 to 1000000, not '%s'",
                               v[B_COUNT]);
    if (v[B_PART_SIZE] && (parse_size(v[B_PART_SIZE], &part_size) != 0 ||
                           part_size < (5ULL << 20) || part_size > (5ULL << 30)))
        return cli_usage_error(ctx->cmd, "--part-size must be from 5M to 5G, not '%s'",
                               v[B_PART_SIZE]);
    if (v[B_MEMORY_LIMIT] && (parse_size(v[B_MEMORY_LIMIT], &memory_limit) != 0 ||
                              memory_limit < (16ULL << 20)))
        return cli_usage_error(ctx->cmd, "--memory-limit must be at least 16M, not '%s'",
                               v[B_MEMORY_LIMIT]);
    if (v[B_CONCURRENCY] && parse_uint(v[B_CONCURRENCY], 1024, &concurrency) != 0)
        return cli_usage_error(ctx->cmd, "--concurrency must be a number from 1 to 1024, "
                                         "not '%s'", v[B_CONCURRENCY]);
    if (v[B_IO_THREADS] && parse_uint(v[B_IO_THREADS], 64, &io_threads) != 0)
        return cli_usage_error(ctx->cmd, "--io-threads must be a number from 1 to 64, not '%s'",
                               v[B_IO_THREADS]);
    if (v[B_CHECKSUM]) {
        static const struct {
            const char *name;
            enum s3f_checksum_algorithm alg;
        } algs[] = {{"crc32c", S3F_CHECKSUM_CRC32C},
                    {"crc32", S3F_CHECKSUM_CRC32},
                    {"crc64nvme", S3F_CHECKSUM_CRC64NVME},
                    {"none", S3F_CHECKSUM_NONE}};
        size_t i;
        for (i = 0; i < sizeof(algs) / sizeof(algs[0]); i++)
            if (strcasecmp(v[B_CHECKSUM], algs[i].name) == 0)
                break;
        if (i == sizeof(algs) / sizeof(algs[0]))
            return cli_usage_error(ctx->cmd, "--checksum must be crc32c, crc32, crc64nvme or "
                                             "none, not '%s'", v[B_CHECKSUM]);
        alg = algs[i].alg;
        alg_name = algs[i].name;
    }
    int use_writer = v[B_WRITER] != NULL, keep = v[B_KEEP] != NULL;
    int verify = v[B_NO_VERIFY] == NULL;

    char bucket[CLI_BUCKET_MAX], prefix[CLI_KEY_MAX];
    const char *target = ctx->args->pos[0];
    if (!cli_is_s3(target))
        return cli_usage_error(ctx->cmd, "bench needs a target s3://bucket[/prefix], not '%s'",
                               target);
    int rc = cli_parse_s3(target, bucket, prefix);
    if (rc != CLI_EXIT_OK)
        return rc;

    struct s3f_client *c = bench_client(ctx, part_size, memory_limit, (uint32_t)concurrency,
                                        (uint32_t)io_threads, alg);
    if (!c)
        return CLI_EXIT_FAIL;
    ctx->client = c; /* main frees it */

    /* Keys: PREFIX/s3flash-bench-<random>-<i> (PREFIX used as a directory). */
    char tag[32];
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tag, sizeof(tag), "%08lx%04x", (unsigned long)(ts.tv_nsec ^ ts.tv_sec),
                 (unsigned)getpid() & 0xffffu);
    }
    size_t n = (size_t)count;
    char **keys = calloc(n, sizeof(*keys));
    unsigned char *src = NULL, *dst = NULL;
    size_t len = (size_t)size, uploaded = 0;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = S3F_OK;
    rc = CLI_EXIT_FAIL;
    if (!keys) {
        cli_errorf("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char name[96];
        snprintf(name, sizeof(name), "s3flash-bench-%s-%zu", tag, i);
        keys[i] = cli_path_join(prefix, name);
        if (!keys[i] || strlen(keys[i]) > 1024) {
            cli_errorf("%s", keys[i] ? "prefix too long for the object keys" : "out of memory");
            goto out;
        }
    }
    double t0 = now_s();
    src = alloc_faulted(len);
    dst = verify ? alloc_faulted(len) : src;
    if (!src || !dst) {
        cli_errorf("cannot allocate %s%.1f MiB for the buffers: %s", verify ? "2 x " : "",
                   (double)len / MiB, strerror(errno));
        goto out;
    }
    fill_pattern(src, len);

    struct s3f_client_stats cs;
    s3f_client_stats(c, &cs, 0);
    if (!ctx->quiet)
        fprintf(stderr,
                "bench: %zu x %.1f MiB to s3://%s/%s (part %.0f MiB, %" PRIu32
                " in flight, pool %.0f MiB, %s, %s%s); buffers ready in %.2f s\n",
                n, (double)len / MiB, bucket, prefix, (double)cs.part_size_bytes / MiB,
                cs.max_inflight_requests, (double)cs.pool_limit_bytes / MiB, alg_name,
                use_writer ? "writer" : "upload_buffer", verify ? ", verified" : "",
                now_s() - t0);

    struct phase ph[2];
    memset(ph, 0, sizeof(ph));
    ph[0].name = use_writer ? "upload-w" : "upload";
    ph[1].name = "download";

    /* Upload phase */
    struct s3f_upload_options uo;
    memset(&uo, 0, sizeof(uo));
    uo.checksum = alg;
    reset_peak_rss();
    ph[0].base_rss = peak_rss_bytes();
    s3f_client_stats(c, &cs, 1);
    uint64_t req0 = cs.requests_started;
    double c0 = cpu_s(), w0 = now_s();
    for (size_t i = 0; i < n; i++) {
        if (use_writer)
            st = upload_writer(c, bucket, keys[i], src, len, &uo, &err);
        else
            st = s3f_upload_buffer(c, bucket, keys[i], src, len, &uo, NULL, &err);
        if (st != S3F_OK)
            break;
        uploaded++;
    }
    ph[0].seconds = now_s() - w0;
    ph[0].cpu_seconds = cpu_s() - c0;
    s3f_client_stats(c, &cs, 1);
    ph[0].requests = cs.requests_started - req0;
    ph[0].pool_high_water = cs.pool_high_water_bytes;
    ph[0].peak_rss = peak_rss_bytes();
    ph[0].objects = uploaded;
    ph[0].bytes = (uint64_t)uploaded * len;
    if (st != S3F_OK) {
        cli_report(&err, NULL);
        goto cleanup;
    }

    /* Download phase: only the downloads are timed; each is compared before the next. */
    struct s3f_download_options dop;
    memset(&dop, 0, sizeof(dop));
    reset_peak_rss();
    ph[1].base_rss = peak_rss_bytes();
    s3f_client_stats(c, &cs, 1);
    req0 = cs.requests_started;
    for (size_t i = 0; i < n; i++) {
        double ci = cpu_s(), wi = now_s();
        struct s3f_object_info info;
        memset(&info, 0, sizeof(info));
        st = s3f_download_buffer(c, bucket, keys[i], dst, len, &dop, &info, &err);
        ph[1].seconds += now_s() - wi;
        ph[1].cpu_seconds += cpu_s() - ci;
        if (st != S3F_OK)
            break;
        if (info.size != len) {
            cli_errorf("s3://%s/%s: downloaded %" PRIu64 " bytes, uploaded %zu", bucket,
                       keys[i], info.size, len);
            st = S3F_ERR_BAD_RESPONSE;
            break;
        }
        if (verify && memcmp(src, dst, len) != 0) {
            size_t at = 0;
            while (at < len && src[at] == dst[at])
                at++;
            cli_errorf("s3://%s/%s: downloaded bytes differ from the uploaded ones at offset "
                       "%zu", bucket, keys[i], at);
            st = S3F_ERR_CHECKSUM;
            break;
        }
        if (verify)
            memset(dst, 0, len); /* the next download must write every byte again */
        ph[1].objects++;
        ph[1].bytes += len;
    }
    s3f_client_stats(c, &cs, 1);
    ph[1].requests = cs.requests_started - req0;
    ph[1].pool_high_water = cs.pool_high_water_bytes;
    ph[1].peak_rss = peak_rss_bytes();
    if (st != S3F_OK && err.status != S3F_OK)
        cli_report(&err, NULL);

    printf("%-9s %7s %14s %9s %8s %11s %9s %13s %14s %12s\n", "phase", "objects", "bytes",
           "seconds", "GB/s", "requests/s", "CPU s/GB", "peak RSS MiB", "over base MiB",
           "pool HW MiB");
    print_phase(&ph[0]);
    print_phase(&ph[1]);
    if (st == S3F_OK)
        rc = CLI_EXIT_OK;

cleanup:
    if (!keep && uploaded > 0) {
        size_t failed = 0;
        struct s3f_error derr;
        s3f_error_clear(&derr);
        enum s3f_status ds = s3f_delete_objects(c, bucket, (const char *const *)keys, uploaded,
                                                &failed, &derr);
        if (ds != S3F_OK) {
            cli_report(&derr, NULL);
            rc = CLI_EXIT_FAIL;
        } else if (!ctx->quiet) {
            fprintf(stderr, "bench: deleted %zu objects\n", uploaded);
        }
    } else if (keep && uploaded > 0 && !ctx->quiet) {
        fprintf(stderr, "bench: kept %zu objects: s3://%s/%s ... %s\n", uploaded, bucket,
                keys[0], keys[uploaded - 1]);
    }
out:
    if (dst && dst != src)
        munmap(dst, len ? len : 1);
    if (src)
        munmap(src, len ? len : 1);
    if (keys)
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
    free(keys);
    return rc;
}
