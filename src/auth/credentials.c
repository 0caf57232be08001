/* Credentials: the cached, thread-safe provider, the default chain, and the local
 * providers (environment, profile keys, credential_process). The network providers are in
 * credentials_http.c. */
#include "auth/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/credentials_internal.h"

extern char **environ;

#define OP "credentials"
#define DEFAULT_REFRESH_WINDOW_S 300
/* Cached credentials stay in use while another thread refreshes them, or when a refresh
 * fails, as long as at least this long remains. */
#define USABLE_MARGIN_S 60
#define PROCESS_STDOUT_MAX ((size_t)64 << 10)
#define PROCESS_STDERR_MAX ((size_t)4 << 10)

/* ---- credentials values ----------------------------------------------------------------- */

void s3f__wipe_free(char *s) {
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void s3f__credentials_cleanup(struct s3f__credentials *c) {
    if (!c)
        return;
    free(c->access_key_id);
    s3f__wipe_free(c->secret_access_key);
    s3f__wipe_free(c->session_token);
    memset(c, 0, sizeof(*c));
}

enum s3f_status s3f__credentials_set(struct s3f__credentials *out, const char *akid,
                                     const char *secret, const char *token, int64_t expiration,
                                     const char *source) {
    memset(out, 0, sizeof(*out));
    out->access_key_id = s3f__strdup(akid);
    out->secret_access_key = s3f__strdup(secret);
    out->session_token = token && *token ? s3f__strdup(token) : NULL;
    if (!out->access_key_id || !out->secret_access_key || (token && *token && !out->session_token)) {
        s3f__credentials_cleanup(out);
        return S3F_ERR_NO_MEMORY;
    }
    out->expiration = expiration;
    s3f__strlcpy(out->source, source, sizeof(out->source));
    return S3F_OK;
}

enum s3f_status s3f__credentials_copy(struct s3f__credentials *dst,
                                      const struct s3f__credentials *src) {
    return s3f__credentials_set(dst, src->access_key_id, src->secret_access_key,
                                src->session_token, src->expiration, src->source);
}

enum s3f_status s3f__credentials_from_json(const struct s3f__json_object *o,
                                           const char *token_key, const char *source,
                                           const char *what, struct s3f__credentials *out,
                                           struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    const char *akid = s3f__json_get_string(o, "AccessKeyId");
    const char *secret = s3f__json_get_string(o, "SecretAccessKey");
    const char *token = s3f__json_get_string(o, token_key);
    const char *exp = s3f__json_get_string(o, "Expiration");
    if (!akid || !*akid)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "%s: no AccessKeyId", what);
    if (!secret || !*secret)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "%s: no SecretAccessKey",
                              what);
    int64_t expiration = 0;
    if (exp && *exp && s3f__time_parse(exp, &expiration) != 0)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL,
                              "%s: Expiration is not an ISO-8601 time", what);
    if (s3f__credentials_set(out, akid, secret, token, expiration, source))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    return S3F_OK;
}

enum s3f_status s3f__read_token_file(const char *path, size_t max, const char *what, char **out,
                                     struct s3f_error *err) {
    struct s3f__buf b;
    s3f__buf_init(&b, max);
    enum s3f_status st = S3F_OK;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: %s", what, path,
                              strerror(errno));
    for (;;) {
        char chunk[4096];
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: %s", what, path,
                                strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        enum s3f_status ast = s3f__buf_append(&b, chunk, (size_t)r);
        explicit_bzero(chunk, sizeof(chunk));
        if (ast == S3F_ERR_NO_MEMORY) {
            st = s3f__error_set(err, ast, OP, path, "out of memory");
            goto out;
        }
        if (ast) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path,
                                "%s %s: larger than %zu bytes", what, path, max);
            goto out;
        }
    }
    if (b.data && strlen(b.data) != b.len) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: contains a NUL byte",
                            what, path);
        goto out;
    }
    if (!b.data || !*s3f__trim(b.data)) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path, "%s %s: empty", what, path);
        goto out;
    }
    *out = s3f__strdup(s3f__trim(b.data));
    if (!*out)
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, path, "out of memory");
out:
    close(fd);
    if (b.data)
        explicit_bzero(b.data, b.cap);
    s3f__buf_cleanup(&b);
    return st;
}

static void format_iso(int64_t t, char out[32]) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- local providers ---------------------------------------------------------------------- */

static enum s3f_status fetch_env(const struct s3f__chain_settings *s, struct s3f__credentials *out,
                                 char *note, size_t note_len, struct s3f_error *err) {
    if (!s->env_akid) {
        snprintf(note, note_len, "environment (AWS_ACCESS_KEY_ID unset)");
        return S3F_ERR_NO_CREDENTIALS;
    }
    if (!s->env_secret)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "environment",
                              "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    if (s3f__credentials_set(out, s->env_akid, s->env_secret, s->env_token, 0, "environment"))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    return S3F_OK;
}

static enum s3f_status fetch_profile(const struct s3f__chain_settings *s,
                                     struct s3f__credentials *out, char *note, size_t note_len,
                                     struct s3f_error *err) {
    if (!s->profile_found) {
        snprintf(note, note_len, "profile '%s' (not in %s or %s)", s->profile,
                 s->credentials_path, s->config_path);
        return S3F_ERR_NO_CREDENTIALS;
    }
    if (!s->prof_akid) {
        snprintf(note, note_len, "profile '%s' (no keys in %s or %s)", s->profile,
                 s->credentials_path, s->config_path);
        return S3F_ERR_NO_CREDENTIALS;
    }
    if (!s->prof_secret)
        return s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, s->credentials_path,
                              "profile '%s' has aws_access_key_id but no aws_secret_access_key",
                              s->profile);
    char source[48];
    snprintf(source, sizeof(source), "profile:%s", s->profile);
    if (s3f__credentials_set(out, s->prof_akid, s->prof_secret, s->prof_token, 0, source))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    return S3F_OK;
}

/* Run `/bin/sh -c cmd` with stdout and stderr captured (stdout at most PROCESS_STDOUT_MAX;
 * stderr keeps its first PROCESS_STDERR_MAX bytes). The child runs in its own process group,
 * which is killed on timeout or overflow. *wstatus gets waitpid's status (-1 if unknown). */
static enum s3f_status run_process(const char *cmd, uint32_t timeout_ms,
                                   const atomic_bool *cancel, struct s3f__buf *out,
                                   struct s3f__buf *errb, int *wstatus, struct s3f_error *err) {
    int op[2] = {-1, -1}, ep[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_ok = false, attr_ok = false, killed = false;
    enum s3f_status st = S3F_OK;
    pid_t pid = -1;
    *wstatus = -1;

    if (pipe2(op, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process", "pipe: %s",
                            strerror(errno));
        goto out;
    }
    fa_ok = posix_spawn_file_actions_init(&fa) == 0;
    attr_ok = posix_spawnattr_init(&attr) == 0;
    if (!fa_ok || !attr_ok || posix_spawn_file_actions_adddup2(&fa, op[1], STDOUT_FILENO) != 0 ||
        posix_spawn_file_actions_adddup2(&fa, ep[1], STDERR_FILENO) != 0) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, "credential_process", "out of memory");
        goto out;
    }
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dflt);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)cmd, NULL};
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
    close(op[1]);
    close(ep[1]);
    op[1] = ep[1] = -1;
    if (rc != 0) {
        pid = -1;
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                            "could not start /bin/sh: %s", strerror(rc));
        goto out;
    }

    uint64_t deadline = s3f__now_ms() + timeout_ms;
    struct pollfd pf[2] = {{.fd = op[0], .events = POLLIN}, {.fd = ep[0], .events = POLLIN}};
    int open_fds = 2;
    while (open_fds > 0 && st == S3F_OK) {
        uint64_t now = s3f__now_ms();
        if (now >= deadline) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                                "credential_process timed out after %u ms", timeout_ms);
            break;
        }
        if (cancel && atomic_load(cancel)) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                                "credential_process stopped: the client is being freed");
            break;
        }
        uint64_t wait = deadline - now < 100 ? deadline - now : 100; /* look at cancel */
        int n = poll(pf, 2, (int)wait);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process", "poll: %s",
                                strerror(errno));
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            char chunk[4096];
            ssize_t r = read(pf[i].fd, chunk, sizeof(chunk));
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (r <= 0) {
                pf[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                enum s3f_status ast = s3f__buf_append(out, chunk, (size_t)r);
                if (ast) {
                    st = s3f__error_set(err, ast == S3F_ERR_NO_MEMORY ? ast : S3F_ERR_CREDENTIALS,
                                        OP, "credential_process",
                                        "credential_process output is larger than %zu bytes",
                                        PROCESS_STDOUT_MAX);
                }
            } else if (errb->len < PROCESS_STDERR_MAX) {
                size_t room = PROCESS_STDERR_MAX - errb->len;
                (void)s3f__buf_append(errb, chunk, (size_t)r < room ? (size_t)r : room);
            }
            explicit_bzero(chunk, sizeof(chunk));
        }
    }
    if (st != S3F_OK) {
        kill(-pid, SIGKILL);
        killed = true;
    }
    /* Reap the shell; give it until the deadline (plus a little after a kill). */
    for (;;) {
        int ws;
        pid_t w = waitpid(pid, &ws, killed ? 0 : WNOHANG);
        if (w == pid) {
            *wstatus = ws;
            break;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            break; /* ECHILD: SIGCHLD ignored, the child was reaped for us */
        if (s3f__now_ms() >= deadline || (cancel && atomic_load(cancel))) {
            kill(-pid, SIGKILL);
            killed = true;
            if (st == S3F_OK)
                st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                                    "credential_process timed out after %u ms", timeout_ms);
            continue;
        }
        s3f__sleep_ms(2);
    }
out:
    for (int i = 0; i < 2; i++) {
        if (op[i] >= 0)
            close(op[i]);
        if (ep[i] >= 0)
            close(ep[i]);
    }
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    return st;
}

static enum s3f_status fetch_process(const struct s3f__chain_settings *s,
                                     struct s3f__credentials *out, char *note, size_t note_len,
                                     struct s3f_error *err) {
    if (!s->credential_process) {
        snprintf(note, note_len, "credential_process (not set)");
        return S3F_ERR_NO_CREDENTIALS;
    }
    struct s3f__buf ob, eb;
    s3f__buf_init(&ob, PROCESS_STDOUT_MAX);
    s3f__buf_init(&eb, PROCESS_STDERR_MAX + 1);
    struct s3f__json_object o = {0};
    int ws = -1;
    enum s3f_status st = run_process(s->credential_process, s->process_timeout_ms, s->cancel, &ob, &eb,
                                     &ws, err);
    if (st)
        goto out;
    if (ws != -1 && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
        char line[256] = "";
        if (eb.data) {
            char *t = s3f__trim(eb.data);
            s3f__strlcpyn(line, t, strcspn(t, "\r\n"), sizeof(line));
        }
        if (WIFEXITED(ws))
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                                "credential_process exited with status %d%s%s",
                                WEXITSTATUS(ws), line[0] ? ": " : "", line);
        else
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                                "credential_process was killed by signal %d%s%s",
                                WIFSIGNALED(ws) ? WTERMSIG(ws) : 0, line[0] ? ": " : "", line);
        goto out;
    }
    char jerr[96];
    st = s3f__json_parse_object(ob.data, ob.len, &o, jerr, sizeof(jerr));
    if (st == S3F_ERR_NO_MEMORY) {
        st = s3f__error_set(err, st, OP, NULL, "out of memory");
        goto out;
    }
    if (st) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                            "credential_process output is not a JSON object (%s)", jerr);
        goto out;
    }
    int64_t version = 0;
    if (s3f__json_get_int64(&o, "Version", &version) != 0 || version != 1) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, "credential_process",
                            "credential_process output: Version must be 1");
        goto out;
    }
    st = s3f__credentials_from_json(&o, "SessionToken", "process", "credential_process output",
                                    out, err);
out:
    s3f__json_cleanup(&o);
    if (ob.data)
        explicit_bzero(ob.data, ob.cap);
    s3f__buf_cleanup(&ob);
    s3f__buf_cleanup(&eb);
    return st;
}

static enum s3f_status fetch_unsupported(const struct s3f__chain_settings *s,
                                         struct s3f__credentials *out, char *note,
                                         size_t note_len, struct s3f_error *err) {
    (void)out;
    (void)note;
    (void)note_len;
    if (!s->unsupported)
        return S3F_ERR_NO_CREDENTIALS;
    return s3f__error_set(err, S3F_ERR_UNSUPPORTED, OP, s->config_path, "%s", s->unsupported);
}

static const s3f__chain_fetch_fn chain[] = {
    fetch_env,
    fetch_profile,
    fetch_process,
    s3f__chain_fetch_web_identity,
    fetch_unsupported,
    s3f__chain_fetch_container,
    s3f__chain_fetch_imds,
};

/* Run the chain from the start (only = -1) or just provider `only`. On success *chosen is
 * the index of the provider that answered. */
static enum s3f_status run_chain(const struct s3f__chain_settings *s, int only,
                                 struct s3f__credentials *out, int *chosen,
                                 struct s3f_error *err) {
    struct s3f__buf tried;
    s3f__buf_init(&tried, 4096);
    enum s3f_status st = S3F_ERR_NO_CREDENTIALS;
    for (int i = 0; i < (int)S3F_ARRAY_LEN(chain); i++) {
        if (only >= 0 && i != only)
            continue;
        char note[600] = "";
        st = chain[i](s, out, note, sizeof(note), err);
        if (st == S3F_OK) {
            *chosen = i;
            break;
        }
        if (st != S3F_ERR_NO_CREDENTIALS)
            break;
        if (note[0] && (s3f__buf_appends(&tried, tried.len ? ", " : "") ||
                        s3f__buf_appends(&tried, note))) {
            st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
            break;
        }
    }
    if (st == S3F_ERR_NO_CREDENTIALS)
        s3f__error_set(err, st, OP, NULL, "no credentials: %s", tried.data ? tried.data : "");
    s3f__buf_cleanup(&tried);
    if (st == S3F_OK && out->expiration && out->expiration <= s3f__wall_time_s()) {
        char when[32];
        format_iso(out->expiration, when);
        st = s3f__error_set(err, S3F_ERR_EXPIRED_CREDENTIALS, OP, out->source,
                            "%s returned credentials that expired at %s", out->source, when);
        s3f__credentials_cleanup(out);
    }
    return st;
}

/* ---- chain settings --------------------------------------------------------------------- */

struct dupper {
    bool oom;
};

/* Copy of v, or NULL when v is NULL or empty. */
static char *dupv(struct dupper *d, const char *v) {
    if (!v || !*v)
        return NULL;
    char *p = strdup(v);
    if (!p)
        d->oom = true;
    return p;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static const char *first(const char *a, const char *b) {
    return a && *a ? a : b && *b ? b : NULL;
}

static void settings_free(struct s3f__chain_settings *s) {
    if (!s)
        return;
    char **secrets[] = {&s->env_secret, &s->env_token, &s->prof_secret, &s->prof_token,
                        &s->container_token};
    for (size_t i = 0; i < S3F_ARRAY_LEN(secrets); i++)
        s3f__wipe_free(*secrets[i]);
    char **plain[] = {&s->profile,         &s->config_path,        &s->credentials_path,
                      &s->env_akid,        &s->prof_akid,          &s->credential_process,
                      &s->unsupported,     &s->wi_token_file,      &s->wi_role_arn,
                      &s->wi_session_name, &s->sts_endpoint,       &s->container_relative,
                      &s->container_full,  &s->container_host,     &s->container_token_file,
                      &s->imds_endpoint,   &s->ca_bundle};
    for (size_t i = 0; i < S3F_ARRAY_LEN(plain); i++)
        free(*plain[i]);
    free(s);
}

static uint32_t env_uint(const char *v, uint32_t dflt, uint32_t max) {
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || n == 0)
        return dflt;
    return n > max ? max : (uint32_t)n;
}

static enum s3f_status settings_new(const struct s3f__credentials_options *o,
                                    const struct s3f__aws_config *c,
                                    struct s3f__chain_settings **out, struct s3f_error *err) {
    struct s3f__chain_settings *s = calloc(1, sizeof(*s));
    if (!s)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    struct dupper d = {false};
    const char *profile = s3f__aws_config_profile_name(c);
    s->profile = dupv(&d, profile);
    s->profile_found = s3f__aws_config_profile_found(c);
    s->config_path = dupv(&d, s3f__aws_config_config_path(c));
    s->credentials_path = dupv(&d, s3f__aws_config_credentials_path(c));

    s->env_akid = dupv(&d, env("AWS_ACCESS_KEY_ID"));
    s->env_secret = dupv(&d, env("AWS_SECRET_ACCESS_KEY"));
    s->env_token = dupv(&d, env("AWS_SESSION_TOKEN"));
    s->prof_akid = dupv(&d, s3f__aws_config_get(c, "aws_access_key_id"));
    s->prof_secret = dupv(&d, s3f__aws_config_get(c, "aws_secret_access_key"));
    s->prof_token = dupv(&d, s3f__aws_config_get(c, "aws_session_token"));
    s->credential_process = dupv(&d, s3f__aws_config_get(c, "credential_process"));

    const char *tf_env = env("AWS_WEB_IDENTITY_TOKEN_FILE");
    s->wi_token_file = dupv(&d, first(tf_env, s3f__aws_config_get(c, "web_identity_token_file")));
    s->wi_token_file_from = tf_env ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "web_identity_token_file";
    s->wi_role_arn = dupv(&d, first(env("AWS_ROLE_ARN"), s3f__aws_config_get(c, "role_arn")));
    s->wi_session_name = dupv(&d, first(env("AWS_ROLE_SESSION_NAME"),
                                        s3f__aws_config_get(c, "role_session_name")));
    const char *sts = first(env("AWS_ENDPOINT_URL_STS"),
                            s3f__aws_config_service_get(c, "sts", "endpoint_url"));
    char sts_default[128];
    if (!sts) {
        const char *region = first(first(env("AWS_REGION"), env("AWS_DEFAULT_REGION")),
                                   s3f__aws_config_get(c, "region"));
        if (region && strlen(region) < 64 && strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(region))
            snprintf(sts_default, sizeof(sts_default), "https://sts.%s.amazonaws.com%s", region,
                     strncmp(region, "cn-", 3) == 0 ? ".cn" : "");
        else
            snprintf(sts_default, sizeof(sts_default), "https://sts.amazonaws.com");
        sts = sts_default;
    }
    s->sts_endpoint = dupv(&d, sts);

    const char *role_arn = s3f__aws_config_get(c, "role_arn");
    if (!s->wi_token_file && role_arn && *role_arn &&
        (s3f__aws_config_get(c, "source_profile") || s3f__aws_config_get(c, "credential_source"))) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "profile '%.64s' assumes a role (role_arn with %s), which s3flash does not "
                 "support; use credential_process or export the role's credentials",
                 profile, s3f__aws_config_get(c, "source_profile") ? "source_profile"
                                                                   : "credential_source");
        s->unsupported = dupv(&d, msg);
    } else if (s3f__aws_config_get(c, "sso_session") || s3f__aws_config_get(c, "sso_start_url")) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "profile '%.64s' uses AWS IAM Identity Center (SSO), which s3flash does not "
                 "support; use credential_process (e.g. `aws configure export-credentials`)",
                 profile);
        s->unsupported = dupv(&d, msg);
    }

    s->container_relative = dupv(&d, env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"));
    s->container_full = dupv(&d, env("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
#ifdef S3F_TEST_HOOKS
    /* test builds only (meson -Dtest_hooks): the container endpoint's host */
    s->container_host = dupv(&d, env("S3FLASH_CONTAINER_CREDENTIALS_HOST"));
#endif
    s->container_token_file = dupv(&d, env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
    s->container_token = dupv(&d, env("AWS_CONTAINER_AUTHORIZATION_TOKEN"));

    s->imds_disabled = s3f__strieq(env("AWS_EC2_METADATA_DISABLED"), "true");
    const char *imds = first(env("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
                             s3f__aws_config_get(c, "ec2_metadata_service_endpoint"));
    if (!imds) {
        const char *mode = first(env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"),
                                 s3f__aws_config_get(c, "ec2_metadata_service_endpoint_mode"));
        imds = s3f__strieq(mode, "ipv6") ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
    }
    s->imds_endpoint = dupv(&d, imds);
    if (s->imds_endpoint) {
        size_t n = strlen(s->imds_endpoint);
        while (n > 1 && s->imds_endpoint[n - 1] == '/')
            s->imds_endpoint[--n] = '\0';
    }
    s->imds_timeout_ms = 1000 * env_uint(first(env("AWS_METADATA_SERVICE_TIMEOUT"),
                                               s3f__aws_config_get(c, "metadata_service_timeout")),
                                         1, 60);
    s->imds_attempts = (int)env_uint(first(env("AWS_METADATA_SERVICE_NUM_ATTEMPTS"),
                                           s3f__aws_config_get(c, "metadata_service_num_attempts")),
                                     1, 10);

    const char *ca = first(first(o ? o->ca_bundle : NULL, env("AWS_CA_BUNDLE")),
                           s3f__aws_config_get(c, "ca_bundle"));
    if (ca) {
        s->ca_bundle = s3f__expand_home(ca);
        if (!s->ca_bundle)
            d.oom = true;
    }
    s->connect_timeout_ms = o && o->connect_timeout_ms ? o->connect_timeout_ms : 2000;
    s->timeout_ms = o && o->timeout_ms ? o->timeout_ms : 5000;
    s->process_timeout_ms = o && o->process_timeout_ms ? o->process_timeout_ms : 60000;
    s->logger = o ? o->logger : NULL;
    if (d.oom || !s->profile || !s->config_path || !s->credentials_path || !s->sts_endpoint ||
        !s->imds_endpoint) {
        settings_free(s);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    *out = s;
    return S3F_OK;
}

/* ---- snapshots ------------------------------------------------------------------------------ */

/* Takes the strings of *c (zeroed on return). NULL when out of memory (c is then wiped). */
static struct s3f__credentials_snapshot *snapshot_new(struct s3f__credentials *c, uint64_t gen,
                                                      int64_t now) {
    struct s3f__credentials_snapshot *s = calloc(1, sizeof(*s));
    if (!s || pthread_mutex_init(&s->key_lock, NULL) != 0) {
        free(s);
        s3f__credentials_cleanup(c);
        return NULL;
    }
    s->creds = *c;
    memset(c, 0, sizeof(*c));
    s->generation = gen;
    s->fetched_at = now;
    atomic_init(&s->refs, 1);
    return s;
}

static struct s3f__credentials_snapshot *snapshot_ref(struct s3f__credentials_snapshot *s) {
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void s3f__credentials_release(struct s3f__credentials_snapshot *s) {
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    s3f__credentials_cleanup(&s->creds);
    explicit_bzero(s->keys, sizeof(s->keys));
    pthread_mutex_destroy(&s->key_lock);
    free(s);
}

enum s3f_status s3f__credentials_signing_key(struct s3f__credentials_snapshot *s,
                                             const char *date8, const char *region,
                                             const char *service, uint8_t key[32],
                                             struct s3f_error *err) {
    size_t rl = strlen(region), sl = strlen(service);
    bool cacheable = strlen(date8) == 8 && rl <= S3F__SIGV4_NAME_MAX && sl <= S3F__SIGV4_NAME_MAX;
    if (cacheable) {
        pthread_mutex_lock(&s->key_lock);
        for (size_t i = 0; i < S3F_ARRAY_LEN(s->keys); i++) {
            const struct s3f__signing_key_slot *k = &s->keys[i];
            if (k->used && memcmp(k->date, date8, 8) == 0 && strcmp(k->region, region) == 0 &&
                strcmp(k->service, service) == 0) {
                memcpy(key, k->key, 32);
                s->key_hits++;
                pthread_mutex_unlock(&s->key_lock);
                return S3F_OK;
            }
        }
        pthread_mutex_unlock(&s->key_lock);
    }
    enum s3f_status st = s3f__sigv4_derive_key(s->creds.secret_access_key, date8, region,
                                               service, key, err);
    if (st || !cacheable)
        return st;
    pthread_mutex_lock(&s->key_lock);
    struct s3f__signing_key_slot *k = &s->keys[s->next_key++ % S3F_ARRAY_LEN(s->keys)];
    memcpy(k->date, date8, 8);
    k->date[8] = '\0';
    memcpy(k->region, region, rl + 1);
    memcpy(k->service, service, sl + 1);
    memcpy(k->key, key, 32);
    k->used = true;
    s->key_derivations++;
    pthread_mutex_unlock(&s->key_lock);
    return S3F_OK;
}

/* ---- the provider ---------------------------------------------------------------------------
 * One immutable snapshot is current at a time. Requests take a reference to it
 * (s3f__credentials_acquire) and never run a provider while it is usable. Temporary
 * credentials are refreshed by the provider's refresher thread (started with the first
 * temporary snapshot) before they stop being usable. Only a caller that finds no usable
 * snapshot at all (the first request, credentials that expired or were rejected by the
 * server) fetches in the foreground, while the other such callers wait for its result. */

struct s3f__credentials_provider {
    /* immutable after creation */
    struct s3f__chain_settings *settings; /* NULL for a static provider */
    int64_t refresh_window_s;
    int64_t usable_margin_s;
    const struct s3f__logger *logger;
    atomic_bool cancel;       /* set by _free: a running credential_process is killed */

    pthread_mutex_t lock;
    pthread_cond_t cond;      /* a fetch completed (broadcast), or stop */
    pthread_cond_t wake;      /* the refresher: new snapshot, stop (CLOCK_MONOTONIC) */
    /* synced: guarded by lock */
    struct {
        struct s3f__credentials_snapshot *current; /* NULL before the first fetch */
        bool invalid;           /* the server rejected current's token */
        bool fetching;          /* a thread is fetching, outside the lock */
        uint64_t completed;     /* fetches completed (success or not) */
        uint64_t next_gen;      /* generation of the next snapshot */
        enum s3f_status last_status;
        struct s3f_error last_err;
        int chosen;             /* provider of the chain that answered; -1 before */
        uint64_t fetches;
        uint64_t background_fetches;
        /* the refresher thread */
        bool thread_started;
        pid_t thread_pid;       /* a forked child has no refresher: it starts its own */
        pthread_t thread;
        bool stop;
        bool kick;              /* fetch now: a request waits, or refresh_now */
        bool demanded;          /* the kick is a request's that has no usable credentials */
        int failures;           /* consecutive background failures */
        int64_t retry_at;       /* wall seconds: no background fetch before */
    } synced;
};

static enum s3f_status provider_alloc(struct s3f__credentials_provider **out,
                                      struct s3f_error *err) {
    struct s3f__credentials_provider *p = calloc(1, sizeof(*p));
    if (!p)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    pthread_condattr_t ca;
    bool ca_ok = pthread_condattr_init(&ca) == 0;
    if (ca_ok)
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int m = pthread_mutex_init(&p->lock, NULL);
    int c1 = m == 0 ? pthread_cond_init(&p->cond, NULL) : -1;
    int c2 = c1 == 0 ? pthread_cond_init(&p->wake, ca_ok ? &ca : NULL) : -1;
    if (ca_ok)
        pthread_condattr_destroy(&ca);
    if (c2 != 0) {
        if (c1 == 0)
            pthread_cond_destroy(&p->cond);
        if (m == 0)
            pthread_mutex_destroy(&p->lock);
        free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "pthread init failed");
    }
    atomic_init(&p->cancel, false);
    p->refresh_window_s = DEFAULT_REFRESH_WINDOW_S;
    p->usable_margin_s = USABLE_MARGIN_S;
    p->synced.chosen = -1;
    p->synced.next_gen = 1;
    *out = p;
    return S3F_OK;
}

void s3f__credentials_provider_free(struct s3f__credentials_provider *p) {
    if (!p)
        return;
    atomic_store(&p->cancel, true);
    pthread_mutex_lock(&p->lock);
    p->synced.stop = true;
    bool join = p->synced.thread_started && p->synced.thread_pid == getpid();
    pthread_cond_broadcast(&p->wake);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (join)
        pthread_join(p->synced.thread, NULL);
    s3f__credentials_release(p->synced.current);
    settings_free(p->settings);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

enum s3f_status s3f__credentials_provider_new_static(const char *akid, const char *secret,
                                                     const char *token,
                                                     struct s3f__credentials_provider **out,
                                                     struct s3f_error *err) {
    *out = NULL;
    if (!akid || !*akid || !secret || !*secret)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, "static",
                              "static credentials need an access key id and a secret key");
    struct s3f__credentials_provider *p;
    enum s3f_status st = provider_alloc(&p, err);
    if (st)
        return st;
    struct s3f__credentials c;
    if (s3f__credentials_set(&c, akid, secret, token, 0, "static") ||
        !(p->synced.current = snapshot_new(&c, p->synced.next_gen++, s3f__wall_time_s()))) {
        s3f__credentials_provider_free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    *out = p;
    return S3F_OK;
}

enum s3f_status s3f__credentials_provider_new_default(const struct s3f__credentials_options *o,
                                                      struct s3f__credentials_provider **out,
                                                      struct s3f_error *err) {
    *out = NULL;
    struct s3f__aws_config *loaded = NULL;
    const struct s3f__aws_config *c = o ? o->config : NULL;
    enum s3f_status st;
    if (!c) {
        if ((st = s3f__aws_config_load(o ? o->profile : NULL, &loaded, err)))
            return st;
        c = loaded;
    }
    struct s3f__credentials_provider *p = NULL;
    if ((st = provider_alloc(&p, err)))
        goto out;
    if ((st = settings_new(o, c, &p->settings, err)))
        goto out;
    p->settings->cancel = &p->cancel;
    if (o && o->refresh_window_s)
        p->refresh_window_s = o->refresh_window_s;
    if (p->usable_margin_s > p->refresh_window_s)
        p->usable_margin_s = p->refresh_window_s;
    p->logger = o ? o->logger : NULL;
out:
    s3f__aws_config_free(loaded);
    if (st)
        s3f__credentials_provider_free(p);
    else
        *out = p;
    return st;
}

static int64_t lifetime_of(const struct s3f__credentials_snapshot *s) {
    int64_t l = s->creds.expiration - s->fetched_at;
    return l > 0 ? l : 0;
}

/* Whether requests may still be signed with s: more than min(60 s, lifetime / 8) left. */
static bool snapshot_usable(const struct s3f__credentials_provider *p,
                            const struct s3f__credentials_snapshot *s, int64_t now) {
    if (s->creds.expiration == 0)
        return true;
    int64_t margin = lifetime_of(s) / 8;
    if (margin > p->usable_margin_s)
        margin = p->usable_margin_s;
    return now < s->creds.expiration - margin;
}

/* When the refresher replaces s: min(refresh_window_s, lifetime / 2) before it expires. */
static int64_t refresh_at(const struct s3f__credentials_provider *p,
                          const struct s3f__credentials_snapshot *s) {
    int64_t margin = lifetime_of(s) / 2;
    if (margin > p->refresh_window_s)
        margin = p->refresh_window_s;
    return s->creds.expiration - margin;
}

/* Run the chain (or the provider that answered before) outside the lock. */
static enum s3f_status fetch_unlocked(struct s3f__credentials_provider *p, int only,
                                      struct s3f__credentials *fresh, int *chosen,
                                      struct s3f_error *ferr) {
    memset(fresh, 0, sizeof(*fresh));
    s3f_error_clear(ferr);
    *chosen = -1;
    enum s3f_status st = run_chain(p->settings, only, fresh, chosen, ferr);
    if (st == S3F_OK)
        s3f__log(p->logger, S3F_LOG_DEBUG, "credentials: from %s%s", fresh->source,
                 fresh->expiration ? " (temporary)" : "");
    return st;
}

/* Under the lock: record the outcome of a fetch, install its snapshot, wake the waiters. */
static enum s3f_status fetch_done(struct s3f__credentials_provider *p, enum s3f_status st,
                                  struct s3f__credentials *fresh, int chosen,
                                  struct s3f_error *ferr) {
    if (st == S3F_OK) {
        struct s3f__credentials_snapshot *s =
            snapshot_new(fresh, p->synced.next_gen++, s3f__wall_time_s());
        if (s) {
            s3f__credentials_release(p->synced.current);
            p->synced.current = s;
            p->synced.invalid = false;
            p->synced.chosen = chosen;
        } else {
            st = s3f__error_set(ferr, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        }
    }
    p->synced.fetches++;
    p->synced.completed++;
    p->synced.fetching = false;
    p->synced.last_status = st;
    p->synced.last_err = *ferr;
    pthread_cond_broadcast(&p->cond);
    pthread_cond_broadcast(&p->wake);
    return st;
}

static void *refresher_main(void *arg);

/* Under the lock: start the refresher if this process has none (lazily, with the first
 * temporary snapshot; again in a forked child). A failure is logged; requests then fetch
 * in the foreground once the credentials are no longer usable. */
static void ensure_refresher(struct s3f__credentials_provider *p) {
    if (!p->settings || p->synced.stop ||
        (p->synced.thread_started && p->synced.thread_pid == getpid()))
        return;
    p->synced.thread_started = false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signal */
    int rc = pthread_create(&p->synced.thread, NULL, refresher_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        s3f__log(p->logger, S3F_LOG_WARN,
                 "credentials: cannot start the refresher thread (%s); refreshing on demand",
                 strerror(rc));
        p->synced.thread_pid = getpid(); /* do not try again in this process */
        p->synced.thread_started = false;
        return;
    }
    p->synced.thread_started = true;
    p->synced.thread_pid = getpid();
}

/* The wall clock in ms, on the same (possibly offset, in tests) clock as
 * s3f__wall_time_s: a refresh due at second X starts at X.000, not up to a second late. */
static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t off = s3f__wall_time_s() - (int64_t)ts.tv_sec; /* 0 unless a test clock offset */
    return ((int64_t)ts.tv_sec + off) * 1000 + ts.tv_nsec / 1000000;
}

/* Wait on p->wake until wall second `due` (at most 60 s; lock held). */
static void wake_wait_until(struct s3f__credentials_provider *p, int64_t due) {
    int64_t ms = due * 1000 - wall_ms();
    if (ms > 60000)
        ms = 60000;
    if (ms < 1)
        ms = 1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&p->wake, &p->lock, &ts);
}

static void *refresher_main(void *arg) {
    struct s3f__credentials_provider *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->synced.stop) {
        struct s3f__credentials_snapshot *cur = p->synced.current;
        int64_t now = s3f__wall_time_s();
        int64_t due;
        if (p->synced.fetching) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        } else if (p->synced.kick) {
            due = now; /* a request has no usable credentials, or refresh_now */
        } else if (!cur || cur->creds.expiration == 0) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        } else {
            due = refresh_at(p, cur);
            if (p->synced.retry_at > due)
                due = p->synced.retry_at;
        }
        if (now < due) {
            wake_wait_until(p, due);
            continue;
        }
        p->synced.fetching = true;
        p->synced.kick = false;
        bool demanded = p->synced.demanded;
        p->synced.demanded = false;
        int only = p->synced.chosen;
        pthread_mutex_unlock(&p->lock);

        struct s3f__credentials fresh;
        struct s3f_error ferr;
        int chosen;
        enum s3f_status st = fetch_unlocked(p, only, &fresh, &chosen, &ferr);

        pthread_mutex_lock(&p->lock);
        if (!demanded)
            p->synced.background_fetches++;
        st = fetch_done(p, st, &fresh, chosen, &ferr);
        if (p->synced.stop)
            break; /* cancelled by _free */
        now = s3f__wall_time_s();
        cur = p->synced.current;
        bool again = st != S3F_OK || (cur && cur->creds.expiration && refresh_at(p, cur) <= now);
        if (again) {
            /* failed, or the provider still hands out the credentials due for refresh:
             * try again after a backoff (1, 2, 4 ... 60 s), on this thread's timer */
            int f = p->synced.failures < 6 ? p->synced.failures : 6;
            p->synced.failures++;
            p->synced.retry_at = now + ((int64_t)1 << f);
            if (st != S3F_OK && !demanded)
                s3f__log(p->logger, S3F_LOG_WARN,
                         "credentials: background refresh failed (%s: %s); retrying in %" PRId64
                         " s, the current credentials stay in use while they are valid",
                         s3f_status_name(st), ferr.message, p->synced.retry_at - now);
        } else {
            p->synced.failures = 0;
            p->synced.retry_at = 0;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

enum s3f_status s3f__credentials_acquire(struct s3f__credentials_provider *p,
                                         struct s3f__credentials_snapshot **out,
                                         struct s3f_error *err) {
    *out = NULL;
    if (!p)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no provider");
    enum s3f_status st = S3F_OK;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        int64_t now = s3f__wall_time_s();
        struct s3f__credentials_snapshot *cur = p->synced.current;
        if (cur && (!p->settings || (!p->synced.invalid && snapshot_usable(p, cur, now)))) {
            if (cur->creds.expiration)
                ensure_refresher(p);
            *out = snapshot_ref(cur);
            break;
        }
        if (p->synced.stop) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, NULL, "the client is being freed");
            break;
        }
        /* No usable credentials at all: block until a fetch completes. The refresher
         * fetches (so a provider, its retries and their backoff never run on this thread,
         * which may be an I/O thread); without one, this thread fetches. Either way one
         * fetch serves every waiting caller. */
        if (!p->synced.fetching) {
            ensure_refresher(p);
            if (p->synced.thread_started) {
                p->synced.kick = true;
                p->synced.demanded = true;
                pthread_cond_broadcast(&p->wake);
            } else {
                p->synced.fetching = true;
                int only = p->synced.chosen;
                pthread_mutex_unlock(&p->lock);
                struct s3f__credentials fresh;
                struct s3f_error ferr;
                int chosen;
                st = fetch_unlocked(p, only, &fresh, &chosen, &ferr);
                pthread_mutex_lock(&p->lock);
                if ((st = fetch_done(p, st, &fresh, chosen, &ferr))) {
                    if (err)
                        *err = ferr;
                    break;
                }
                continue;
            }
        }
        uint64_t seen = p->synced.completed;
        while (p->synced.completed == seen && !p->synced.stop)
            pthread_cond_wait(&p->cond, &p->lock);
        cur = p->synced.current;
        if (p->synced.completed != seen && p->synced.last_status != S3F_OK &&
            !(cur && !p->synced.invalid && snapshot_usable(p, cur, s3f__wall_time_s()))) {
            st = p->synced.last_status;
            if (err)
                *err = p->synced.last_err;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void s3f__credentials_invalidate(struct s3f__credentials_provider *p, uint64_t generation) {
    if (!p || !p->settings)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->synced.current && p->synced.current->generation == generation &&
        !p->synced.invalid) {
        p->synced.invalid = true;
        s3f__log(p->logger, S3F_LOG_INFO,
                 "credentials: the server rejected the token from %s; fetching new ones",
                 p->synced.current->creds.source);
    }
    pthread_mutex_unlock(&p->lock);
}

void s3f__credentials_refresh_now(struct s3f__credentials_provider *p) {
    if (!p || !p->settings)
        return;
    pthread_mutex_lock(&p->lock);
    p->synced.kick = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

enum s3f_status s3f__credentials_get(struct s3f__credentials_provider *p,
                                     struct s3f__credentials *out, struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    struct s3f__credentials_snapshot *s;
    enum s3f_status st = s3f__credentials_acquire(p, &s, err);
    if (st)
        return st;
    if (s3f__credentials_copy(out, &s->creds))
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    s3f__credentials_release(s);
    return st;
}

uint64_t s3f__credentials_provider_fetch_count(struct s3f__credentials_provider *p) {
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->synced.fetches;
    pthread_mutex_unlock(&p->lock);
    return n;
}

uint64_t s3f__credentials_provider_background_count(struct s3f__credentials_provider *p) {
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->synced.background_fetches;
    pthread_mutex_unlock(&p->lock);
    return n;
}
