/*
 * The daemon of `s3flash mount`: start-up checks, going to the background, logging,
 * signals and the FUSE session (libfuse's low-level API: fuse_session_new, mounted on a
 * directory or served on a /dev/fd/N descriptor the caller mounted). The file system
 * itself is fs.h and the files it lists; see mount.h for what this folder may call.
 *
 * Start-up order matters. The process forks first (unless --foreground), before any thread
 * exists: the child creates the client, checks the bucket with one LIST, mounts, and only
 * then tells the parent (through a pipe) that all went well, so every start-up failure is
 * printed on the terminal by the parent with exit status 1. SIGINT, SIGTERM and SIGHUP are
 * blocked while the client starts its threads (so they never land there) and then handled
 * by libfuse's handlers, which end the session: the loop returns, the file system is
 * unmounted, the notifier threads stop and the uploads still open are aborted.
 */
#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "mount.h"

/* ---- logging ------------------------------------------------------------------------ */

static FILE *log_fp;            /* the log file, or stderr in the foreground */
static int log_syslog;
static enum s3f_log_level log_max = S3F_LOG_WARN;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *level_name(enum s3f_log_level l) {
    switch (l) {
    case S3F_LOG_ERROR: return "ERROR";
    case S3F_LOG_WARN: return "WARN";
    case S3F_LOG_INFO: return "INFO";
    case S3F_LOG_DEBUG: return "DEBUG";
    default: return "TRACE";
    }
}

/* Write a line that passed its level's test. */
static void log_write(enum s3f_log_level level, const char *msg) {
    if (log_syslog) {
        int prio = level == S3F_LOG_ERROR ? LOG_ERR
                   : level == S3F_LOG_WARN ? LOG_WARNING
                   : level == S3F_LOG_INFO ? LOG_INFO
                                           : LOG_DEBUG;
        syslog(prio, "%s", msg);
        return;
    }
    if (!log_fp)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&log_mu);
    fprintf(log_fp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            level_name(level), msg);
    fflush(log_fp);
    pthread_mutex_unlock(&log_mu);
}

static void log_line(enum s3f_log_level level, const char *msg) {
    if (level <= log_max && level != S3F_LOG_OFF)
        log_write(level, msg);
}

int mnt_log_on(enum s3f_log_level level) {
    return level <= log_max && level != S3F_LOG_OFF;
}

void mnt_log(enum s3f_log_level level, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_line(level, msg);
}

void mnt_log_error(const char *what, const char *path, const struct s3f_error *err) {
    char buf[1600];
    s3f_error_format(err, buf, sizeof(buf));
    mnt_log(S3F_LOG_WARN, "%s %s: %s", what, path ? path : "(unlinked)", buf);
}

/* The clients' lines: their own level decides (--debug: DEBUG, --debug-crt: TRACE) */
static void library_log(void *user, enum s3f_log_level level, const char *msg) {
    (void)user;
    if (log_max != S3F_LOG_OFF && level != S3F_LOG_OFF)
        log_write(level, msg);
}

/* --log-file PATH, or --log-directory DIR: a new file there named as Mountpoint names its
 * logs, mountpoint-s3-YYYY-MM-DDTHH-MM-SSZ.XXXXXX.log (UTC; six random letters and
 * digits), the directory created 0750 and the file 0640 as Mountpoint does. A new log file
 * of --log-file is the owner's alone (0600, whatever the umask): the log names paths and
 * keys; an existing one (or a /dev/fd/N) keeps its mode and owner. NULL after printing why. */
static FILE *open_log(const struct mnt_options *o) {
    char path[4096];
    const char *name = o->log_file, *opt = "--log-file";
    mode_t mode = 0600;
    if (o->log_directory) {
        opt = "--log-directory";
        mode = 0640;
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", o->log_directory);
        for (char *q = dir + 1; *q; q++) /* mkdir -p, 0750 */
            if (*q == '/') {
                *q = 0;
                if (mkdir(dir, 0750) != 0 && errno != EEXIST)
                    break;
                *q = '/';
            }
        if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
            fprintf(stderr, "s3flash: --log-directory %s: %s\n", dir, strerror(errno));
            return NULL;
        }
        static const char an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        unsigned char rnd[6];
        int rfd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (rfd < 0 || read(rfd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
            struct timespec ts; /* no /dev/urandom: the clock and the pid */
            clock_gettime(CLOCK_REALTIME, &ts);
            for (size_t i = 0; i < sizeof(rnd); i++)
                rnd[i] = (unsigned char)((ts.tv_nsec >> (i * 5)) ^ (getpid() >> i));
        }
        if (rfd >= 0)
            close(rfd);
        char suffix[7];
        for (size_t i = 0; i < 6; i++)
            suffix[i] = an[rnd[i] % (sizeof(an) - 1)];
        suffix[6] = 0;
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H-%M-%SZ", &tm);
        snprintf(path, sizeof(path), "%s/mountpoint-s3-%s.%s.log", o->log_directory, stamp,
                 suffix);
        name = path;
    }
    int lfd = open(name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, mode);
    if (lfd >= 0 && o->log_directory)
        fchmod(lfd, mode); /* Mountpoint's mode whatever the umask */
    FILE *fp = lfd >= 0 ? fdopen(lfd, "a") : NULL;
    if (!fp) {
        int e = errno;
        if (lfd >= 0)
            close(lfd);
        fprintf(stderr, "s3flash: %s %s: %s\n", opt, name, strerror(e));
    }
    return fp;
}

/* ---- the kernel's read-ahead ------------------------------------------------------------ */

/* The kernel gives a FUSE mount the default read-ahead of a block device (128 KiB), and a
 * sequential read then reaches the daemon as 128 KiB requests: most of the time goes to
 * the round trips. Raising the mount's read_ahead_kb in sysfs to `kib` (fs.c's
 * max_readahead; max_write is 1 MiB, so one request carries up to 1 MiB) makes them 1 MiB,
 * and a 1 MiB read at any offset one request (mount.h says why 2 MiB). Only root can write sysfs: anyone else
 * keeps the kernel's default, which works, only more slowly. The device number comes from
 * /proc/self/mountinfo (a stat of the mount point would wait for the session's loop, which
 * has not started yet). */
static void raise_read_ahead(const char *mountpoint, unsigned kib) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) {
        mnt_log(S3F_LOG_INFO, "read-ahead: /proc/self/mountinfo: %s", strerror(errno));
        return;
    }
    char line[8192], dev[32] = "";
    while (fgets(line, sizeof(line), f)) {
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE ..." */
        char d[32], esc[4096], want[4096];
        if (sscanf(line, "%*s %*s %31s %*s %4095s", d, esc) != 2 || !strstr(line, " - fuse"))
            continue;
        /* mountinfo writes space, tab, newline and backslash as \ooo */
        size_t j = 0;
        for (size_t i = 0; esc[i] && j + 1 < sizeof(want); i++) {
            if (esc[i] == '\\' && esc[i + 1] >= '0' && esc[i + 1] <= '3' && esc[i + 2] &&
                esc[i + 3]) {
                want[j++] = (char)((esc[i + 1] - '0') * 64 + (esc[i + 2] - '0') * 8 +
                                   (esc[i + 3] - '0'));
                i += 3;
            } else {
                want[j++] = esc[i];
            }
        }
        want[j] = 0;
        if (strcmp(want, mountpoint) == 0)
            snprintf(dev, sizeof(dev), "%s", d); /* the last one: ours, mounted on top */
    }
    fclose(f);
    if (!dev[0]) {
        mnt_log(S3F_LOG_INFO, "read-ahead: %s not found in /proc/self/mountinfo", mountpoint);
        return;
    }
    char path[128];
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    char val[16];
    int n = snprintf(val, sizeof(val), "%u", kib);
    if (fd < 0 || write(fd, val, (size_t)n) != n)
        mnt_log(S3F_LOG_INFO, "read-ahead stays at the kernel's default: %s: %s", path,
                strerror(errno));
    else
        mnt_log(S3F_LOG_DEBUG, "read-ahead: %s = %u", path, kib);
    if (fd >= 0)
        close(fd);
}

/* ---- start-up ----------------------------------------------------------------------- */

/* Where start-up failures go: the parent's pipe in the background, else stderr. */
static int report_fd = -1;

static void fail(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;
    if (report_fd >= 0) {
        /* "1" then the message; the parent prints it */
        ssize_t w = write(report_fd, "1", 1);
        (void)w;
        w = write(report_fd, msg, (size_t)n);
        (void)w;
    } else {
        fprintf(stderr, "s3flash: %s\n", msg);
    }
    log_line(S3F_LOG_ERROR, msg);
}

/* The parent in the background: wait for the child's word. */
static int parent_wait(int fd, pid_t child) {
    char buf[4096];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf) - 1 || buf[0] == '0') /* "0": mounted, nothing follows */
            break;
    }
    close(fd);
    buf[n] = 0;
    if (n > 0 && buf[0] == '0')
        return 0;
    if (n > 1) {
        fprintf(stderr, "s3flash: %s\n", buf + 1);
    } else {
        int status = 0;
        waitpid(child, &status, 0);
        fprintf(stderr, "s3flash: the mount daemon ended before the mount was up (%s %d)\n",
                WIFSIGNALED(status) ? "signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    return 1;
}

/* An eighth of the memory this process may use: the RAM, or its cgroup's limit (a
 * container's) where that is less. */
static uint64_t default_memory_target(void) {
    uint64_t t = s3f_memory_available() / 8;
    if (t < (64ull << 20))
        t = 64ull << 20;
    if (t > (8ull << 30))
        t = 8ull << 30;
    return t;
}

/* "/dev/fd/N" names a /dev/fuse descriptor that another process opened and mounted (the
 * CSI driver's node process, as fusermount3 does): libfuse serves it as it is. */
static int is_fuse_fd(const char *mountpoint) {
    const char *p = mountpoint;
    if (strncmp(p, "/dev/fd/", 8) != 0 || !p[8])
        return 0;
    for (p += 8; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* --metrics-listen, --log-metrics: the exporter of the readers' client (client="read"), the
 * writers' (client="write") and the mount's own registry, in the daemon (after the fork).
 * 0, or -1 after fail() said why. */
static int start_metrics(const struct mnt_options *o, struct s3f_client *client,
                         struct s3f_client *wclient, struct mnt_fs *fs,
                         struct s3f_metrics_exporter **out) {
    if (!o->metrics_listen && !o->log_metrics && !o->otlp_endpoint)
        return 0;
    struct s3f_metrics *regs[3] = {s3f_client_metrics_registry(client),
                                   s3f_client_metrics_registry(wclient), mnt_fs_metrics(fs)};
    if (s3f_metrics_set_label(regs[0], "client", "read") ||
        s3f_metrics_set_label(regs[1], "client", "write")) {
        fail("out of memory");
        return -1;
    }
    /* the resource: the bucket and prefix mounted (names, never credentials); static: the
     * exporter keeps the pointer */
    static const char *resource[5];
    resource[0] = "aws.s3.bucket";
    resource[1] = o->bucket;
    resource[2] = "s3flash.prefix";
    resource[3] = o->prefix ? o->prefix : "";
    struct s3f_metrics_exporter_options eo = {
        .registries = regs,
        .n_registries = 3,
        .listen = o->metrics_listen,
        .allow_remote = o->metrics_allow_remote,
        .log_interval_ms = o->log_metrics ? 5000 : 0,
        .log_fn = library_log,
        .otlp_endpoint = o->otlp_endpoint,
        .otlp_interval_ms = o->otlp_interval_ms,
        .otlp_resource = resource,
    };
    struct s3f_error err;
    s3f_error_clear(&err);
    if (s3f_metrics_exporter_start(&eo, out, &err) != S3F_OK) {
        char buf[1600];
        s3f_error_format(&err, buf, sizeof(buf));
        fail("%s", buf);
        return -1;
    }
    if (o->metrics_listen) {
        const char *colon = strrchr(o->metrics_listen, ':');
        char url[128];
        snprintf(url, sizeof(url), "http://%.*s:%d/metrics",
                 colon ? (int)(colon - o->metrics_listen) : 9,
                 colon ? o->metrics_listen : "127.0.0.1", s3f_metrics_exporter_port(*out));
        /* stderr: the caller's until the daemon detaches (the tests read it there) */
        fprintf(stderr, "s3flash: metrics at %s\n", url);
        fflush(stderr);
        if (log_fp != stderr)
            mnt_log(S3F_LOG_INFO, "metrics at %s", url);
    }
    return 0;
}

int mnt_run(const struct mnt_options *in) {
    struct mnt_options o = *in;
    struct stat st;
    int on_fd = is_fuse_fd(o.mountpoint);
    if (on_fd) {
        int fd = atoi(o.mountpoint + 8);
        if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 ||
            minor(st.st_rdev) != 229) {
            fprintf(stderr, "s3flash: mount point %s: not an open /dev/fuse descriptor\n",
                    o.mountpoint);
            return 1;
        }
    } else if (stat(o.mountpoint, &st) != 0) {
        fprintf(stderr, "s3flash: mount point %s: %s\n", o.mountpoint, strerror(errno));
        return 1;
    }
    if (!on_fd && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "s3flash: mount point %s is not a directory\n", o.mountpoint);
        return 1;
    }
    char *mp = on_fd ? strdup(o.mountpoint) : realpath(o.mountpoint, NULL);
    if (!mp) {
        fprintf(stderr, "s3flash: mount point %s: %s\n", o.mountpoint, strerror(errno));
        return 1;
    }
    o.mountpoint = mp;
    /* the daemon runs in "/": a relative --cache is made absolute now */
    char *cache_abs = NULL;
    if (o.cache_dir && o.cache_dir[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof(cwd)) ||
            asprintf(&cache_abs, "%s/%s", cwd, o.cache_dir) < 0) {
            fprintf(stderr, "s3flash: --cache %s: cannot make the path absolute\n", o.cache_dir);
            free(mp);
            return 1;
        }
        o.cache_dir = cache_abs;
    }
    if ((o.log_file || o.log_directory) && !(log_fp = open_log(&o))) {
        free(cache_abs);
        free(mp);
        return 1;
    }
    /* the mount's own lines: INFO as Mountpoint's default (its start and end), DEBUG with
     * --debug; the clients' lines pass their own level (library_log) */
    log_max = o.no_log ? S3F_LOG_OFF : o.debug ? S3F_LOG_DEBUG : S3F_LOG_INFO;
    /* with --debug, S3FLASH_LOG=trace adds the mount's state transitions (handles, the
     * readdir stream, the overwrite guard) */
    const char *lv = getenv("S3FLASH_LOG");
    if (o.debug && lv && strcasecmp(lv, "trace") == 0)
        log_max = S3F_LOG_TRACE;

    if (!o.foreground) {
        int p[2];
        /* close-on-exec: fusermount3, which libfuse runs to mount (and which stays as long
         * as the mount with --auto-unmount), must not hold the write end, or the parent
         * would wait for its end-of-file as long as the mount lives */
        if (pipe2(p, O_CLOEXEC) != 0) {
            fprintf(stderr, "s3flash: pipe: %s\n", strerror(errno));
            free(cache_abs);
            free(mp);
            return 1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "s3flash: fork: %s\n", strerror(errno));
            free(cache_abs);
            free(mp);
            return 1;
        }
        if (pid > 0) {
            close(p[1]);
            free(cache_abs);
            free(mp);
            return parent_wait(p[0], pid);
        }
        close(p[0]);
        report_fd = p[1];
        setsid();
        if (!log_fp && !o.no_log) {
            openlog("s3flash-mount", LOG_PID, LOG_DAEMON);
            log_syslog = 1;
        }
    } else if (!log_fp && !o.no_log) {
        log_fp = stderr;
    }

    /* signals: blocked while the client's threads start */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    struct s3f_client *client = NULL, *wclient = NULL;
    struct mnt_fs *fs = NULL;
    struct s3f_metrics_exporter *exporter = NULL;
    struct fuse_session *se = NULL;
    int mounted = 0;

    if (!o.memory_target_bytes)
        o.memory_target_bytes = default_memory_target();
    /* What counts outside the buffer pools comes off the target first: FUSE's buffers,
     * about 3 MiB a worker thread (a request of up to 1 MiB received, the 1 MiB reply of a
     * read, malloc's slack), 12 MiB for the process and libcurl's buffers, and the
     * metadata budget (the inode table, metadata and listing caches, counted and evicted
     * by fs: a sixteenth of the target, 4 MiB..1 GiB). The default number of threads is
     * one per 16 MiB of the target, 4..16. */
    unsigned threads = o.max_threads;
    if (!threads) {
        uint64_t t = o.memory_target_bytes / (16ull << 20);
        threads = t < 4 ? 4 : t > 16 ? 16 : (unsigned)t;
    }
    o.max_threads = threads; /* fs: as many lookups' HEAD workers (meta.c) */
    o.metadata_budget_bytes = o.memory_target_bytes / 16;
    if (o.metadata_budget_bytes < (4ull << 20))
        o.metadata_budget_bytes = 4ull << 20;
    if (o.metadata_budget_bytes > (1ull << 30))
        o.metadata_budget_bytes = 1ull << 30;
    uint64_t fixed = (12ull << 20) + o.metadata_budget_bytes + (uint64_t)threads * (3ull << 20);
    uint64_t rest = o.memory_target_bytes > fixed ? o.memory_target_bytes - fixed : 0;
    /* The rest: two buffer pools of 7/16 each, the readers' (read-ahead windows) and the
     * writers' (parts being filled and sent), so that open readers never make a writer
     * wait; the last eighth is a margin (libcurl's buffers grow with the connections). */
    o.client.memory_limit_bytes = rest / 16 * 7;
    if (o.client.memory_limit_bytes < (16ull << 20))
        o.client.memory_limit_bytes = 16ull << 20;
    /* --read-part-size for the readers' client, --write-part-size for the writers' (and
     * fs's write buffers); each falls back to --part-size */
    uint64_t read_part = o.read_part_size_bytes ? o.read_part_size_bytes : o.part_size_bytes;
    uint64_t write_part = o.write_part_size_bytes ? o.write_part_size_bytes : o.part_size_bytes;
    o.client.part_size_bytes = read_part;
    o.part_size_bytes = write_part;
    o.client.log_fn = library_log;
    o.client.log_user_data = NULL;
    o.client.log_level = o.no_log      ? S3F_LOG_ERROR /* 0 would read S3FLASH_LOG */
                         : o.debug_crt ? S3F_LOG_TRACE
                         : o.debug     ? S3F_LOG_DEBUG
                                       : S3F_LOG_WARN;
    o.client.cache_dir = o.cache_dir;
    o.client.cache_max_bytes = o.max_cache_size_bytes;
    o.client.cache_xz_bucket = o.cache_xz_bucket;
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status s = s3f_client_new(&o.client, &client, &err);
    if (s == S3F_OK) {
        struct s3f_client_options wo = o.client;
        wo.cache_dir = NULL; /* the block cache is for reads */
        wo.cache_max_bytes = 0;
        wo.cache_xz_bucket = NULL;
        wo.part_size_bytes = write_part;
        if (o.upload_checksum != S3F_CHECKSUM_DEFAULT)
            wo.checksum = o.upload_checksum;
        s = s3f_client_new(&wo, &wclient, &err);
    }
    if (s != S3F_OK) {
        char buf[1600];
        if (err.status == S3F_OK)
            err.status = s;
        s3f_error_format(&err, buf, sizeof(buf));
        fail("%s", buf);
        goto out;
    }
    /* the bucket and the prefix answer a LIST */
    struct s3f_list_options lo = {.prefix = o.prefix, .delimiter = "/", .max_keys = 1};
    struct s3f_list_page *page = NULL;
    s = s3f_list_objects_v2(client, o.bucket, &lo, &page, &err);
    if (s != S3F_OK) {
        char buf[1600];
        s3f_error_format(&err, buf, sizeof(buf));
        fail("cannot list s3://%s/%s: %s", o.bucket, o.prefix, buf);
        goto out;
    }
    s3f_list_page_free(page);
    if (o.cache_xz_bucket) {
        /* the shared cache must take a block, as Mountpoint checks it: one small PUT */
        char note[600];
        int n = snprintf(note, sizeof(note), "source_bucket=%s\nblock_size=%llu\n", o.bucket,
                         1ull << 20);
        s = s3f_put_object(client, o.cache_xz_bucket, "s3flash-v1/_s3flash_cache_metadata",
                           note, n > 0 && (size_t)n < sizeof(note) ? (size_t)n : 0, NULL, NULL,
                           &err);
        if (s != S3F_OK) {
            char buf[1600];
            s3f_error_format(&err, buf, sizeof(buf));
            fail("--cache-xz %s: the shared cache bucket does not take a block: %s",
                 o.cache_xz_bucket, buf);
            goto out;
        }
    }

    fs = mnt_fs_new(&o, client, wclient);
    if (!fs) {
        fail("out of memory");
        goto out;
    }
    /* a comma would split the option string (bucket names have none, prefixes may) */
    char shown[300];
    snprintf(shown, sizeof(shown), "%s/%s", o.bucket, o.prefix);
    for (char *q = shown; *q; q++)
        if (*q == ',' || *q == '\\')
            *q = '_';
    char fsopt[700];
    snprintf(fsopt, sizeof(fsopt),
             "fsname=s3flash:%s,subtype=s3flash,default_permissions%s%s%s%s", shown,
             o.allow_other ? ",allow_other" : "", o.allow_root ? ",allow_root" : "",
             o.auto_unmount ? ",auto_unmount" : "", o.read_only ? ",ro" : "");
    char *argv[] = {"s3flash", "-o", fsopt, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    if (start_metrics(&o, client, wclient, fs, &exporter) != 0)
        goto out;
    se = fuse_session_new(&args, &mnt_ll_ops_metered, sizeof(mnt_ll_ops_metered), fs);
    fuse_opt_free_args(&args);
    if (!se) {
        fail("cannot set up the FUSE session (see the messages above)");
        goto out;
    }
    if (fuse_session_mount(se, o.mountpoint) != 0) {
        fail("cannot mount on %s (is /dev/fuse there, fuse3 installed, and the directory "
             "not mounted already?)",
             o.mountpoint);
        goto out;
    }
    mounted = 1;
    if (!on_fd)
        raise_read_ahead(o.mountpoint, MNT_READ_AHEAD_KIB);
    if (mnt_fs_start(fs, se) != 0) {
        fail("cannot start the notifier threads");
        goto out;
    }
    if (fuse_set_signal_handlers(se) != 0) {
        fail("cannot install the signal handlers");
        goto out;
    }
    mnt_log(S3F_LOG_INFO, "mounted s3://%s/%s on %s", o.bucket, o.prefix, o.mountpoint);
    if (report_fd >= 0) {
        ssize_t w = write(report_fd, "0", 1);
        (void)w;
        close(report_fd);
        report_fd = -1;
        /* stderr goes on into the log file where there is one, so that what is written
         * there (a failed S3F_ASSERT in a test build, libfuse's own complaints) is kept */
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 1);
            dup2(log_fp ? fileno(log_fp) : dn, 2);
            if (dn > 2)
                close(dn);
        }
        if (chdir("/") != 0)
            mnt_log(S3F_LOG_WARN, "chdir /: %s", strerror(errno));
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    if (!lc) {
        mnt_log(S3F_LOG_ERROR, "out of memory");
        fuse_remove_signal_handlers(se);
        goto out;
    }
    fuse_loop_cfg_set_max_threads(lc, threads);
    fuse_loop_cfg_set_clone_fd(lc, 0);
    int lr = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    fuse_remove_signal_handlers(se);
    /* libfuse's signal handler leaves the signal's number as the loop's result */
    int sig = lr < 0 ? -lr : lr;
    rc = (lr == 0 || sig == SIGTERM || sig == SIGINT || sig == SIGHUP) ? 0 : 1;
    if (rc)
        mnt_log(S3F_LOG_ERROR, "the FUSE session ended with an error (%d)", lr);
    mnt_log(S3F_LOG_INFO, "unmounting %s", o.mountpoint);
out:
    if (se) {
        if (mounted)
            fuse_session_unmount(se);
    }
    s3f_metrics_exporter_stop(exporter); /* its collectors read fs and the clients */
    mnt_fs_free(fs); /* stops the notifier before the session goes */
    if (se)
        fuse_session_destroy(se);
    s3f_client_free(wclient);
    s3f_client_free(client);
    if (report_fd >= 0)
        close(report_fd);
    if (log_fp && log_fp != stderr)
        fclose(log_fp);
    if (log_syslog)
        closelog();
    free(cache_abs);
    free(mp);
    return rc;
}
