/* The AWS shared config and credentials files: an INI dialect read the way botocore and
 * the AWS SDKs read it (see profile.h for the rules). */
#include "auth/profile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OP "config"

struct kv {
    char *key;   /* lowercase */
    char *value;
};

struct kvlist {
    struct kv *items;
    size_t n, cap;
};

enum section_kind { SECTION_PROFILE, SECTION_SERVICES, SECTION_OTHER };

struct section {
    enum section_kind kind;
    char *name;
    struct kvlist kvs;
};

/* One parsed file. */
struct ini {
    struct section *items;
    size_t n, cap;
};

struct s3f__aws_config {
    char *profile;
    bool found;
    char *config_path;      /* display forms */
    char *credentials_path;
    struct kvlist profile_kvs;
    struct kvlist service_kvs;
};

/* ---- key/value lists ------------------------------------------------------------------ */

static void wipe_free(char *s) {
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static void kvlist_cleanup(struct kvlist *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].key);
        wipe_free(l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

static struct kv *kvlist_find(const struct kvlist *l, const char *key) {
    for (size_t i = 0; i < l->n; i++)
        if (s3f__strieq(l->items[i].key, key))
            return &l->items[i];
    return NULL;
}

/* Set key (lowercased copy) to a copy of value, replacing an existing value. */
static enum s3f_status kvlist_set(struct kvlist *l, const char *key, const char *value) {
    struct kv *kv = kvlist_find(l, key);
    char *v = s3f__strdup(value);
    if (!v)
        return S3F_ERR_NO_MEMORY;
    if (kv) {
        wipe_free(kv->value);
        kv->value = v;
        return S3F_OK;
    }
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 8;
        struct kv *items = realloc(l->items, ncap * sizeof(*items));
        if (!items) {
            free(v);
            return S3F_ERR_NO_MEMORY;
        }
        l->items = items;
        l->cap = ncap;
    }
    char *k = s3f__strdup(key);
    if (!k) {
        free(v);
        return S3F_ERR_NO_MEMORY;
    }
    for (char *p = k; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    l->items[l->n].key = k;
    l->items[l->n].value = v;
    l->n++;
    return S3F_OK;
}

static void ini_cleanup(struct ini *ini) {
    for (size_t i = 0; i < ini->n; i++) {
        free(ini->items[i].name);
        kvlist_cleanup(&ini->items[i].kvs);
    }
    free(ini->items);
    ini->items = NULL;
    ini->n = ini->cap = 0;
}

static struct section *ini_add_section(struct ini *ini, enum section_kind kind, const char *name) {
    if (ini->n == ini->cap) {
        size_t ncap = ini->cap ? ini->cap * 2 : 8;
        struct section *items = realloc(ini->items, ncap * sizeof(*items));
        if (!items)
            return NULL;
        ini->items = items;
        ini->cap = ncap;
    }
    struct section *s = &ini->items[ini->n];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->name = s3f__strdup(name);
    if (!s->name)
        return NULL;
    ini->n++;
    return s;
}

/* ---- the parser ------------------------------------------------------------------------ */

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* Cut an inline comment: '#' or ';' preceded by whitespace. Then trim. */
static char *value_clean(char *v) {
    for (size_t i = 1; v[0] && v[i]; i++) {
        if ((v[i] == '#' || v[i] == ';') && isspace((unsigned char)v[i - 1])) {
            v[i] = '\0';
            break;
        }
    }
    return s3f__trim(v);
}

static void lowercase(char *s) {
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* Map a section header's name to its kind and profile/services name (in place). */
static enum section_kind classify(char *name, bool credentials_file, char **out_name) {
    *out_name = name;
    if (credentials_file)
        return SECTION_PROFILE;
    if (strcmp(name, "default") == 0)
        return SECTION_PROFILE;
    static const struct {
        const char *prefix;
        enum section_kind kind;
    } prefixes[] = {{"profile", SECTION_PROFILE}, {"services", SECTION_SERVICES},
                    {"sso-session", SECTION_OTHER}};
    for (size_t i = 0; i < S3F_ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i].prefix);
        if (strncmp(name, prefixes[i].prefix, n) == 0 && is_blank(name[n])) {
            char *rest = s3f__trim(name + n);
            size_t rl = strlen(rest);
            if (rl >= 2 && (rest[0] == '"' || rest[0] == '\'') && rest[rl - 1] == rest[0]) {
                rest[rl - 1] = '\0';
                rest++;
            }
            if (!*rest)
                return SECTION_OTHER;
            *out_name = rest;
            return prefixes[i].kind;
        }
    }
    return SECTION_OTHER;
}

struct parse_state {
    const char *file;          /* display name */
    bool credentials_file;
    struct ini *ini;
    struct section *sec;       /* current section, NULL before the first header */
    char *prop;                /* key of the current property (for continuations), or NULL */
    size_t prop_indent;
    bool prop_is_parent;       /* the property had an empty value: continuations are subs */
    struct s3f_error *err;
};

static enum s3f_status syntax_error(struct parse_state *ps, size_t line, const char *what) {
    return s3f__error_set(ps->err, S3F_ERR_CONFIG, OP, ps->file, "%s:%zu: %s", ps->file, line,
                          what);
}

static enum s3f_status oom(struct parse_state *ps) {
    return s3f__error_set(ps->err, S3F_ERR_NO_MEMORY, OP, ps->file, "out of memory");
}

static enum s3f_status parse_continuation(struct parse_state *ps, size_t lineno, char *content) {
    struct kv *kv = kvlist_find(&ps->sec->kvs, ps->prop);
    if (!kv)
        return S3F_OK;
    if (!ps->prop_is_parent) {
        /* a multi-line value: join with a newline */
        size_t a = strlen(kv->value), b = strlen(content);
        char *v = malloc(a + b + 2);
        if (!v)
            return oom(ps);
        memcpy(v, kv->value, a);
        v[a] = '\n';
        memcpy(v + a + 1, content, b + 1);
        wipe_free(kv->value);
        kv->value = v;
        return S3F_OK;
    }
    char *eq = strchr(content, '=');
    if (!eq) {
        char msg[200];
        snprintf(msg, sizeof(msg), "expected 'name = value' in the sub-properties of '%.64s'",
                 ps->prop);
        return syntax_error(ps, lineno, msg);
    }
    *eq = '\0';
    char *sub = s3f__trim(content);
    char *val = value_clean(eq + 1);
    if (!*sub)
        return syntax_error(ps, lineno, "empty sub-property name");
    size_t kl = strlen(ps->prop) + 1 + strlen(sub) + 1;
    char *full = malloc(kl);
    if (!full)
        return oom(ps);
    snprintf(full, kl, "%s.%s", ps->prop, sub);
    enum s3f_status st = kvlist_set(&ps->sec->kvs, full, val);
    free(full);
    return st ? oom(ps) : S3F_OK;
}

static enum s3f_status parse_line(struct parse_state *ps, size_t lineno, char *line) {
    size_t indent = 0;
    while (is_blank(line[indent]))
        indent++;
    char *t = s3f__trim(line);
    if (!*t || *t == '#' || *t == ';')
        return S3F_OK; /* blank lines keep the property open, as in ConfigParser */

    if (indent > 0 && ps->prop && indent > ps->prop_indent)
        return parse_continuation(ps, lineno, t);

    free(ps->prop);
    ps->prop = NULL;

    if (*t == '[') {
        char *close = strchr(t, ']');
        if (!close)
            return syntax_error(ps, lineno, "section header without ']'");
        char *after = close + 1;
        while (is_blank(*after))
            after++;
        if (*after && *after != '#' && *after != ';')
            return syntax_error(ps, lineno, "unexpected text after the section header");
        *close = '\0';
        char *name = s3f__trim(t + 1);
        if (!*name)
            return syntax_error(ps, lineno, "empty section name");
        char *sname;
        enum section_kind kind = classify(name, ps->credentials_file, &sname);
        ps->sec = ini_add_section(ps->ini, kind, sname);
        return ps->sec ? S3F_OK : oom(ps);
    }

    /* key = value (ConfigParser also accepts ':'; the first delimiter counts) */
    size_t klen = strcspn(t, "=:");
    if (!t[klen])
        return syntax_error(ps, lineno, "expected '[section]', 'key = value' or a comment");
    if (!ps->sec)
        return syntax_error(ps, lineno, "property outside of any section");
    t[klen] = '\0';
    char *key = s3f__trim(t);
    if (!*key)
        return syntax_error(ps, lineno, "empty property name");
    lowercase(key);
    char *raw = t + klen + 1;
    /* A comment right after the delimiter's whitespace leaves an empty value. */
    char *v = raw;
    while (is_blank(*v))
        v++;
    if ((*v == '#' || *v == ';') && v != raw)
        *v = '\0';
    char *value = value_clean(v);
    if (kvlist_set(&ps->sec->kvs, key, value))
        return oom(ps);
    ps->prop = s3f__strdup(key);
    if (!ps->prop)
        return oom(ps);
    ps->prop_indent = indent;
    ps->prop_is_parent = *value == '\0';
    return S3F_OK;
}

/* Parse `text` into ini (appending sections). */
static enum s3f_status parse_text(const char *text, const char *file, bool credentials_file,
                                  struct ini *ini, struct s3f_error *err) {
    size_t len = strlen(text);
    if (len > S3F__AWS_CONFIG_MAX_FILE_BYTES)
        return s3f__error_set(err, S3F_ERR_CONFIG, OP, file, "%s: larger than %zu bytes", file,
                              S3F__AWS_CONFIG_MAX_FILE_BYTES);
    char *copy = s3f__strndup(text, len);
    if (!copy)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, file, "out of memory");
    struct parse_state ps = {.file = file, .credentials_file = credentials_file, .ini = ini,
                             .err = err};
    enum s3f_status st = S3F_OK;
    size_t lineno = 0;
    char *p = copy;
    if ((unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
        p += 3; /* UTF-8 byte order mark */
    while (*p) {
        lineno++;
        char *nl = strchr(p, '\n');
        char *next = nl ? nl + 1 : p + strlen(p);
        if (nl)
            *nl = '\0';
        size_t ll = strlen(p);
        if (ll && p[ll - 1] == '\r')
            p[ll - 1] = '\0';
        if ((st = parse_line(&ps, lineno, p)))
            break;
        p = next;
    }
    free(ps.prop);
    explicit_bzero(copy, len);
    free(copy);
    return st;
}

/* ---- merging ----------------------------------------------------------------------------- */

static enum s3f_status merge_sections(const struct ini *ini, enum section_kind kind,
                                      const char *name, struct kvlist *dst, bool *found) {
    for (size_t i = 0; i < ini->n; i++) {
        const struct section *s = &ini->items[i];
        if (s->kind != kind || strcmp(s->name, name) != 0)
            continue;
        if (found)
            *found = true;
        for (size_t j = 0; j < s->kvs.n; j++)
            if (kvlist_set(dst, s->kvs.items[j].key, s->kvs.items[j].value))
                return S3F_ERR_NO_MEMORY;
    }
    return S3F_OK;
}

void s3f__aws_config_free(struct s3f__aws_config *c) {
    if (!c)
        return;
    free(c->profile);
    free(c->config_path);
    free(c->credentials_path);
    kvlist_cleanup(&c->profile_kvs);
    kvlist_cleanup(&c->service_kvs);
    free(c);
}

static enum s3f_status build(const char *config_text, const char *config_name,
                             const char *credentials_text, const char *credentials_name,
                             const char *profile, bool explicit_profile,
                             struct s3f__aws_config **out, struct s3f_error *err) {
    struct ini cfg = {0}, cred = {0};
    enum s3f_status st = S3F_OK;
    struct s3f__aws_config *c = calloc(1, sizeof(*c));
    *out = NULL;
    if (!config_name)
        config_name = "config";
    if (!credentials_name)
        credentials_name = "credentials";
    if (!c)
        goto nomem;
    c->profile = s3f__strdup(profile ? profile : "default");
    c->config_path = s3f__strdup(config_name);
    c->credentials_path = s3f__strdup(credentials_name);
    if (!c->profile || !c->config_path || !c->credentials_path)
        goto nomem;
    if (config_text && (st = parse_text(config_text, config_name, false, &cfg, err)))
        goto out;
    if (credentials_text &&
        (st = parse_text(credentials_text, credentials_name, true, &cred, err)))
        goto out;
    if (merge_sections(&cfg, SECTION_PROFILE, c->profile, &c->profile_kvs, &c->found) ||
        merge_sections(&cred, SECTION_PROFILE, c->profile, &c->profile_kvs, &c->found))
        goto nomem;
    if (!c->found && explicit_profile) {
        st = s3f__error_set(err, S3F_ERR_CONFIG, OP, config_name,
                            "profile '%s' not found in %s or %s", c->profile, config_name,
                            credentials_name);
        goto out;
    }
    const struct kv *services = kvlist_find(&c->profile_kvs, "services");
    if (services && *services->value &&
        merge_sections(&cfg, SECTION_SERVICES, services->value, &c->service_kvs, NULL))
        goto nomem;
    goto out;
nomem:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
out:
    ini_cleanup(&cfg);
    ini_cleanup(&cred);
    if (st)
        s3f__aws_config_free(c);
    else
        *out = c;
    return st;
}

enum s3f_status s3f__aws_config_parse(const char *config_text, const char *config_name,
                                      const char *credentials_text, const char *credentials_name,
                                      const char *profile, struct s3f__aws_config **out,
                                      struct s3f_error *err) {
    return build(config_text, config_name, credentials_text, credentials_name, profile,
                 profile != NULL, out, err);
}

/* ---- files ------------------------------------------------------------------------------- */

char *s3f__expand_home(const char *path) {
    if (!path)
        return NULL;
    if (path[0] != '~' || (path[1] != '\0' && path[1] != '/'))
        return s3f__strdup(path);
    const char *home = getenv("HOME");
    char pwbuf[4096];
    if (!home || !*home) {
        struct passwd pw, *res = NULL;
        if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res)
            home = res->pw_dir;
    }
    if (!home)
        home = "";
    size_t n = strlen(home) + strlen(path);
    char *p = malloc(n);
    if (!p)
        return NULL;
    snprintf(p, n, "%s%s", home, path + 1);
    return p;
}

/* Read a whole file; a missing file gives *text = NULL and S3F_OK. */
static enum s3f_status read_config_file(const char *path, const char *display, char **text,
                                        struct s3f_error *err) {
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return S3F_OK;
        return s3f__error_set(err, S3F_ERR_CONFIG, OP, display, "%s: %s", display,
                              strerror(errno));
    }
    enum s3f_status st = S3F_OK;
    struct s3f__buf b;
    s3f__buf_init(&b, S3F__AWS_CONFIG_MAX_FILE_BYTES);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = s3f__error_set(err, S3F_ERR_CONFIG, OP, display, "%s: not a regular file", display);
        goto out;
    }
    for (;;) {
        char chunk[16384];
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = s3f__error_set(err, S3F_ERR_CONFIG, OP, display, "%s: %s", display,
                                strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        if (memchr(chunk, '\0', (size_t)r)) {
            st = s3f__error_set(err, S3F_ERR_CONFIG, OP, display, "%s: contains a NUL byte",
                                display);
            goto out;
        }
        enum s3f_status ast = s3f__buf_append(&b, chunk, (size_t)r);
        if (ast == S3F_ERR_NO_MEMORY) {
            st = s3f__error_set(err, ast, OP, display, "out of memory");
            goto out;
        }
        if (ast) {
            st = s3f__error_set(err, S3F_ERR_CONFIG, OP, display, "%s: larger than %zu bytes",
                                display, S3F__AWS_CONFIG_MAX_FILE_BYTES);
            goto out;
        }
    }
    *text = s3f__buf_take(&b);
    if (!*text)
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, display, "out of memory");
out:
    close(fd);
    if (b.data)
        explicit_bzero(b.data, b.len);
    s3f__buf_cleanup(&b);
    return st;
}

static void free_text(char *t) {
    wipe_free(t);
}

enum s3f_status s3f__aws_config_load(const char *profile, struct s3f__aws_config **out,
                                     struct s3f_error *err) {
    *out = NULL;
    bool explicit_profile = profile && *profile;
    if (!explicit_profile) {
        const char *env = getenv("AWS_PROFILE");
        explicit_profile = env && *env;
        profile = explicit_profile ? env : NULL;
    }
    const char *cfg_env = getenv("AWS_CONFIG_FILE");
    const char *cred_env = getenv("AWS_SHARED_CREDENTIALS_FILE");
    const char *cfg_display = cfg_env && *cfg_env ? cfg_env : "~/.aws/config";
    const char *cred_display = cred_env && *cred_env ? cred_env : "~/.aws/credentials";
    char *cfg_path = s3f__expand_home(cfg_display);
    char *cred_path = s3f__expand_home(cred_display);
    char *cfg_text = NULL, *cred_text = NULL;
    enum s3f_status st;
    if (!cfg_path || !cred_path) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    if ((st = read_config_file(cfg_path, cfg_display, &cfg_text, err)) ||
        (st = read_config_file(cred_path, cred_display, &cred_text, err)))
        goto out;
    st = build(cfg_text, cfg_display, cred_text, cred_display, profile, explicit_profile, out,
               err);
out:
    free(cfg_path);
    free(cred_path);
    free_text(cfg_text);
    free_text(cred_text);
    return st;
}

/* ---- accessors --------------------------------------------------------------------------- */

const char *s3f__aws_config_get(const struct s3f__aws_config *c, const char *key) {
    if (!c || !key)
        return NULL;
    const struct kv *kv = kvlist_find(&c->profile_kvs, key);
    return kv ? kv->value : NULL;
}

const char *s3f__aws_config_service_get(const struct s3f__aws_config *c, const char *service,
                                        const char *key) {
    if (!c || !service || !key)
        return NULL;
    char full[256];
    int n = snprintf(full, sizeof(full), "%s.%s", service, key);
    if (n < 0 || (size_t)n >= sizeof(full))
        return NULL;
    const struct kv *kv = kvlist_find(&c->service_kvs, full);
    return kv ? kv->value : NULL;
}

const char *s3f__aws_config_profile_name(const struct s3f__aws_config *c) {
    return c ? c->profile : "default";
}

bool s3f__aws_config_profile_found(const struct s3f__aws_config *c) {
    return c && c->found;
}

const char *s3f__aws_config_config_path(const struct s3f__aws_config *c) {
    return c ? c->config_path : "";
}

const char *s3f__aws_config_credentials_path(const struct s3f__aws_config *c) {
    return c ? c->credentials_path : "";
}
