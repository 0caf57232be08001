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
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define MiB (1024.0 * 1024.0)
#define WRITER_CHUNK_BYTES ((size_t)1 << 20) /* --writer: bytes per s3f_writer_write */

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
    uint32_t inflight_high_water; /* most data requests in flight at once */
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

/* `s` as a JSON string (quotes, backslashes and control characters escaped). */
static void print_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* --json: one document in bench/benchjson.py's schema ("s3flash-bench/1"), a record per
 * phase with the same figures as the table, so that bench/plot.py draws them. */
static void print_json(const struct phase *ph, size_t nph, const struct s3f_client_stats *cs,
                       const char *checksum, const char *bucket, const char *prefix) {
    struct utsname u;
    if (uname(&u) != 0)
        memset(&u, 0, sizeof(u));
    time_t now = time(NULL);
    struct tm tm;
    char date[32] = "";
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("{\"schema\": \"s3flash-bench/1\", \"benchmark\": \"s3flash bench\", \"date\": ");
    print_json_string(date);
    printf(", \"machine\": {\"host\": ");
    print_json_string(u.nodename);
    printf(", \"kernel\": ");
    print_json_string(u.release);
    printf(", \"arch\": ");
    print_json_string(u.machine);
    printf(", \"cpus\": %ld}, \"target\": ", sysconf(_SC_NPROCESSORS_ONLN));
    print_json_string(bucket);
    printf(", \"prefix\": ");
    print_json_string(prefix);
    printf(", \"records\": [");
    for (size_t i = 0; i < nph; i++) {
        const struct phase *p = &ph[i];
        double gb = (double)p->bytes / 1e9, secs = p->seconds > 0 ? p->seconds : 1e-9;
        uint64_t per = p->objects ? p->bytes / p->objects : 0;
        char cpu[32] = "null"; /* no bytes: no CPU seconds per GB */
        if (gb > 0)
            snprintf(cpu, sizeof(cpu), "%.6f", p->cpu_seconds / gb);
        printf("%s\n {\"benchmark\": \"s3flash bench\", \"variant\": \"s3flash\", "
               "\"metric\": \"%s\", \"value\": %.6f, \"unit\": \"GB/s\", \"params\": "
               "{\"connections\": %" PRIu32 ", \"object_size\": %" PRIu64 ", \"objects\": %zu, "
               "\"memory\": %" PRIu64 ", \"part_size\": %" PRIu64 ", \"checksum\": \"%s\"}, "
               "\"seconds\": %.6f, \"bytes\": %" PRIu64 ", \"requests_per_s\": %.3f, "
               "\"cpu_s_per_gb\": %s, \"peak_rss_bytes\": %" PRIu64 ", "
               "\"over_base_bytes\": %" PRIu64 ", \"pool_high_water_bytes\": %" PRIu64 ", "
               "\"inflight_high_water\": %" PRIu32 "}",
               i ? "," : "", p->name, gb / secs, cs->max_inflight_requests, per, p->objects,
               cs->pool_limit_bytes, cs->part_size_bytes, checksum, p->seconds, p->bytes,
               (double)p->requests / secs, cpu, p->peak_rss,
               p->peak_rss > p->base_rss ? p->peak_rss - p->base_rss : 0, p->pool_high_water,
               p->inflight_high_water);
    }
    printf("\n]}\n");
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

int cli_cmd_bench(struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    int rc = cli_engine_parse(ctx); /* --part-size --concurrency --memory-limit --checksum
                                       --io-threads */
    if (rc != CLI_EXIT_OK)
        return rc;
    uint64_t size = 64ULL << 20;
    unsigned long count = 4;
    const char *v;
    if ((v = a->value[OPT_SIZE]) &&
        (cli_parse_size(v, &size) != 0 || size == 0 || size > (uint64_t)SIZE_MAX / 2))
        return cli_usage_error(ctx->cmd, "--size must be a positive size like 64M or 1G, "
                                         "not '%s'", v);
    if ((v = a->value[OPT_NUM_OBJECTS]) && parse_uint(v, 1000000, &count) != 0)
        return cli_usage_error(ctx->cmd, "--count must be a number from 1 to 1000000, not '%s'",
                               v);
    const char *alg_name = cli_checksum_name(ctx->engine.checksum);
    int use_writer = a->set[OPT_WRITER] != 0, keep = a->set[OPT_KEEP] != 0;
    int verify = a->set[OPT_NO_VERIFY] == 0;

    char bucket[CLI_BUCKET_MAX], prefix[CLI_KEY_MAX];
    const char *target = ctx->args->pos[0];
    if (!cli_is_s3(target))
        return cli_usage_error(ctx->cmd, "bench needs a target s3://bucket[/prefix], not '%s'",
                               target);
    rc = cli_parse_s3(target, bucket, prefix);
    if (rc != CLI_EXIT_OK)
        return rc;

    struct s3f_client *c = cli_client(ctx);
    if (!c)
        return CLI_EXIT_FAIL;

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
    uo.checksum = ctx->engine.checksum; /* DEFAULT: the client's */
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
    ph[0].inflight_high_water = cs.inflight_high_water;
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
    ph[1].inflight_high_water = cs.inflight_high_water;
    ph[1].peak_rss = peak_rss_bytes();
    if (st != S3F_OK && err.status != S3F_OK)
        cli_report(&err, NULL);

    if (a->set[OPT_JSON]) {
        print_json(ph, 2, &cs, alg_name, bucket, prefix);
    } else {
        printf("%-9s %7s %14s %9s %8s %11s %9s %13s %14s %12s\n", "phase", "objects", "bytes",
               "seconds", "GB/s", "requests/s", "CPU s/GB", "peak RSS MiB", "over base MiB",
               "pool HW MiB");
        print_phase(&ph[0]);
        print_phase(&ph[1]);
    }
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
