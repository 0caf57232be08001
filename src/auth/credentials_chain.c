/* The default credentials chain: its settings, read once from the environment and the
 * profile (s3f__chain_settings_new), the order of its providers, and running it; with the
 * local providers (environment, profile keys, credential_process). The network providers
 * are in credentials_http.c; the cached provider that runs the chain in credentials.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
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
#define PROCESS_STDOUT_MAX ((size_t)64 << 10)
#define PROCESS_STDERR_MAX ((size_t)4 << 10)

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
enum s3f_status s3f__chain_run(const struct s3f__chain_settings *s, int only,
                               struct s3f__credentials *out, int *chosen, struct s3f_error *err) {
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

void s3f__chain_settings_free(struct s3f__chain_settings *s) {
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

enum s3f_status s3f__chain_settings_new(const struct s3f__credentials_options *o,
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
        s3f__chain_settings_free(s);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    }
    *out = s;
    return S3F_OK;
}
