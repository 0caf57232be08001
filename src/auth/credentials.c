/* Credentials: the cached, thread-safe provider, the default chain, and the local
 * providers (environment, profile keys, credential_process). The network providers are in
 * credentials_http.c. */
#include "auth/credentials.h"

#include <errno.h>
#include <fcntl.h>
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
static enum s3f_status run_process(const char *cmd, uint32_t timeout_ms, struct s3f__buf *out,
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
        int n = poll(pf, 2, (int)(deadline - now));
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
        if (s3f__now_ms() >= deadline) {
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
    enum s3f_status st = run_process(s->credential_process, s->process_timeout_ms, &ob, &eb,
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
    s->container_host = dupv(&d, env("S3FLASH_CONTAINER_CREDENTIALS_HOST"));
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

/* ---- the cached provider ------------------------------------------------------------------ */

struct s3f__credentials_provider {
    /* immutable after creation */
    struct s3f__chain_settings *settings; /* NULL for a static provider */
    int64_t refresh_window_s;
    int64_t usable_margin_s;
    const struct s3f__logger *logger;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* synced: guarded by lock */
    struct {
        struct s3f__credentials cached;
        bool have;
        bool refreshing;        /* a thread is fetching, outside the lock */
        uint64_t generation;    /* completed fetches */
        enum s3f_status last_status;
        struct s3f_error last_err;
        int chosen;             /* provider of the chain that answered; -1 before */
        uint64_t fetches;
    } synced;
};

static enum s3f_status provider_alloc(struct s3f__credentials_provider **out,
                                      struct s3f_error *err) {
    struct s3f__credentials_provider *p = calloc(1, sizeof(*p));
    if (!p)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "pthread_cond_init failed");
    }
    p->refresh_window_s = DEFAULT_REFRESH_WINDOW_S;
    p->usable_margin_s = USABLE_MARGIN_S;
    p->synced.chosen = -1;
    *out = p;
    return S3F_OK;
}

void s3f__credentials_provider_free(struct s3f__credentials_provider *p) {
    if (!p)
        return;
    s3f__credentials_cleanup(&p->synced.cached);
    settings_free(p->settings);
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
    if (s3f__credentials_set(&p->synced.cached, akid, secret, token, 0, "static")) {
        s3f__credentials_provider_free(p);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    p->synced.have = true;
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

/* Whether cached credentials with `exp` have more than `margin` seconds left. */
static bool valid_for(int64_t exp, int64_t now, int64_t margin) {
    return exp == 0 || now < exp - margin;
}

static enum s3f_status copy_out(struct s3f__credentials *out,
                                const struct s3f__credentials *src, struct s3f_error *err) {
    if (s3f__credentials_copy(out, src))
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    return S3F_OK;
}

enum s3f_status s3f__credentials_get(struct s3f__credentials_provider *p,
                                     struct s3f__credentials *out, struct s3f_error *err) {
    memset(out, 0, sizeof(*out));
    if (!p)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no provider");
    enum s3f_status st;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        int64_t now = s3f__wall_time_s();
        struct s3f__credentials *cached = &p->synced.cached;
        if (p->synced.have &&
            (!p->settings || valid_for(cached->expiration, now, p->refresh_window_s))) {
            st = copy_out(out, cached, err);
            goto unlock;
        }
        if (!p->synced.refreshing)
            break;
        /* Another thread is fetching: use what we have if it is good for a while, else
         * wait for that fetch and take its outcome. */
        if (p->synced.have && valid_for(cached->expiration, now, p->usable_margin_s)) {
            st = copy_out(out, cached, err);
            goto unlock;
        }
        uint64_t gen = p->synced.generation;
        while (p->synced.refreshing && p->synced.generation == gen)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->synced.generation == gen)
            continue;
        now = s3f__wall_time_s();
        if (p->synced.last_status == S3F_OK && p->synced.have &&
            valid_for(cached->expiration, now, 0)) {
            st = copy_out(out, cached, err);
            goto unlock;
        }
        if (p->synced.last_status != S3F_OK) {
            st = p->synced.last_status;
            if (err)
                *err = p->synced.last_err;
            goto unlock;
        }
    }

    /* This thread fetches, outside the lock. */
    p->synced.refreshing = true;
    int only = p->synced.chosen;
    pthread_mutex_unlock(&p->lock);

    struct s3f__credentials fresh = {0};
    struct s3f_error ferr;
    s3f_error_clear(&ferr);
    int chosen = -1;
    st = run_chain(p->settings, only, &fresh, &chosen, &ferr);
    if (st == S3F_OK)
        s3f__log(p->logger, S3F_LOG_DEBUG, "credentials: from %s%s", fresh.source,
                 fresh.expiration ? " (temporary)" : "");

    pthread_mutex_lock(&p->lock);
    p->synced.fetches++;
    p->synced.generation++;
    p->synced.refreshing = false;
    p->synced.last_status = st;
    p->synced.last_err = ferr;
    if (st == S3F_OK) {
        s3f__credentials_cleanup(&p->synced.cached);
        p->synced.cached = fresh;
        p->synced.have = true;
        p->synced.chosen = chosen;
        st = copy_out(out, &p->synced.cached, err);
    } else if (p->synced.have &&
               valid_for(p->synced.cached.expiration, s3f__wall_time_s(), p->usable_margin_s)) {
        s3f__log(p->logger, S3F_LOG_WARN,
                 "credentials: refresh failed (%s: %s); using the cached ones until they expire",
                 s3f_status_name(st), ferr.message);
        st = copy_out(out, &p->synced.cached, err);
    } else if (err) {
        *err = ferr;
    }
    pthread_cond_broadcast(&p->cond);
unlock:
    pthread_mutex_unlock(&p->lock);
    return st;
}

uint64_t s3f__credentials_provider_fetch_count(struct s3f__credentials_provider *p) {
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->synced.fetches;
    pthread_mutex_unlock(&p->lock);
    return n;
}
