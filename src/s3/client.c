/* The s3 layer's part of client creation: region, endpoint, credentials chain and transport
 * resolved once. s3f_client_new itself (src/xfer/xfer.c) composes this with the transfer
 * engine, which validates and keeps its own options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>

#include <curl/curl.h>

#include "auth/credentials.h"
#include "auth/profile.h"
#include "auth/sigv4.h"
#include "http/http.h"
#include "core/metrics.h"
#include "s3/client.h"

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static bool truthy(const char *v) {
    return v && (s3f__strieq(v, "true") || strcmp(v, "1") == 0 || s3f__strieq(v, "yes"));
}

/* An endpoint variant: the option (1 on, -1 off), else the environment, else the profile. */
static bool endpoint_flag(int option, const char *from_env, const char *from_profile) {
    if (option)
        return option > 0;
    return truthy(from_env ? from_env : from_profile);
}

static const char *cfg_get(const struct s3f_client *c, const char *key) {
    return c->config ? s3f__aws_config_get(c->config, key) : NULL;
}

/* The CA bundle when none is configured: NULL (libcurl's compiled-in default) while that
 * file exists, else the first bundle found where a distribution keeps its own. libcurl's
 * default is its build machine's path: the Python wheel carries Debian's libcurl, whose
 * /etc/ssl/certs/ca-certificates.crt a Fedora or RHEL machine does not have. */
static const char *system_ca_bundle(void) {
    static const char *const known[] = {
        "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Arch, Gentoo */
        "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL */
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* RHEL, CentOS */
        "/etc/ssl/ca-bundle.pem",                            /* openSUSE */
        "/etc/ssl/cert.pem",                                 /* Alpine */
    };
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    if (v && v->cainfo && access(v->cainfo, R_OK) == 0)
        return NULL;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (access(known[i], R_OK) == 0)
            return known[i];
    return NULL;
}

static enum s3f_status parse_attempts(const char *v, const char *where, int *out,
                                      struct s3f_error *err) {
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 100)
        return s3f__error_set(err, S3F_ERR_CONFIG, "configuration", where,
                              "max_attempts must be an integer from 1 to 100, got '%s'", v);
    *out = (int)n;
    return S3F_OK;
}

/* The snapshot's collector of the s3 layer: the credentials provider's fetches. */
/* network_interfaces: each name an interface of this machine (at most 16). */
static enum s3f_status check_interfaces(const char *list, struct s3f_error *err) {
    size_t n = 0;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        char name[IF_NAMESIZE];
        if (len == 0 || len >= sizeof(name) || ++n > 16)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "client", NULL,
                                  "network_interfaces '%.200s': at most 16 names, "
                                  "comma-separated, each shorter than %d bytes",
                                  list, IF_NAMESIZE);
        memcpy(name, p, len);
        name[len] = 0;
        if (if_nametoindex(name) == 0)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "client", NULL,
                                  "network interface '%s': no such interface on this machine",
                                  name);
        p += len + (p[len] == ',');
    }
    return S3F_OK;
}

static void collect_metrics(struct s3f_metrics *m, void *ud) {
    struct s3f_client *c = ud;
    if (c->creds)
        s3f_metrics_set(m, S3F__M_CREDS_REFRESHES, 0,
                        (int64_t)s3f__credentials_provider_fetch_count(c->creds));
}

enum s3f_status s3f__s3_client_new(const struct s3f_client_options *opts,
                                   struct s3f_client **out, struct s3f_error *err) {
    *out = NULL;
    enum s3f_status st;
    struct s3f_client *c = calloc(1, sizeof(*c));
    if (!c)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    pthread_mutex_init(&c->retry.lock, NULL);
    c->metrics = s3f__metrics_new_client();
    if (!c->metrics) {
        pthread_mutex_destroy(&c->retry.lock);
        free(c);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    }
    c->retry.capacity = c->retry.tokens = 500;
    c->logger.fn = opts->log_fn;
    c->logger.user_data = opts->log_user_data;
    c->logger.level = opts->log_level ? opts->log_level : s3f__log_level_from_env();

    if ((st = s3f__aws_config_load(opts->profile, &c->config, err)))
        goto fail;

    /* region */
    const char *region = opts->region;
    if (!region)
        region = env("AWS_REGION");
    if (!region)
        region = env("AWS_DEFAULT_REGION");
    if (!region)
        region = cfg_get(c, "region");
    if (!region)
        region = "us-east-1";
    if (!(c->region = strdup(region)))
        goto oom;

    /* endpoint */
    const char *endpoint = opts->endpoint_url;
    if (!endpoint && !truthy(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")) &&
        !truthy(cfg_get(c, "ignore_configured_endpoint_urls"))) {
        endpoint = env("AWS_ENDPOINT_URL_S3");
        if (!endpoint)
            endpoint = env("AWS_ENDPOINT_URL");
        if (!endpoint && c->config)
            endpoint = s3f__aws_config_service_get(c->config, "s3", "endpoint_url");
        if (!endpoint)
            endpoint = cfg_get(c, "endpoint_url");
    }
    if (endpoint) {
        if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0) {
            char shown[512];
            s3f__url_redact(endpoint, shown, sizeof(shown));
            st = s3f__error_set(err, S3F_ERR_INVALID_URI, "configuration", shown,
                                "endpoint URL must start with http:// or https://");
            goto fail;
        }
        if (!(c->endpoint_url = strdup(endpoint)))
            goto oom;
        size_t n = strlen(c->endpoint_url);
        while (n > 0 && c->endpoint_url[n - 1] == '/')
            c->endpoint_url[--n] = '\0';
    }
    const char *addressing = c->config ? s3f__aws_config_get(c->config, "s3.addressing_style") : NULL;
    c->force_path_style = opts->force_path_style || truthy(env("S3FLASH_FORCE_PATH_STYLE")) ||
                          (addressing && strcmp(addressing, "path") == 0);
    c->requester_pays = opts->requester_pays != 0;
    if ((st = s3f__request_options_init(&c->ropts, opts, err)))
        goto fail;

    c->use_fips = endpoint_flag(opts->use_fips_endpoint, env("AWS_USE_FIPS_ENDPOINT"),
                                cfg_get(c, "use_fips_endpoint"));
    const char *dual = cfg_get(c, "s3.use_dualstack_endpoint");
    c->use_dual_stack = endpoint_flag(opts->use_dualstack_endpoint,
                                      env("AWS_USE_DUALSTACK_ENDPOINT"),
                                      dual ? dual : cfg_get(c, "use_dualstack_endpoint"));
    c->accelerate = endpoint_flag(opts->use_accelerate_endpoint, NULL,
                                  cfg_get(c, "s3.use_accelerate_endpoint"));

    /* retries */
    c->max_attempts = 3;
    if (opts->max_attempts > 0) {
        c->max_attempts = opts->max_attempts > 100 ? 100 : opts->max_attempts;
    } else if (env("AWS_MAX_ATTEMPTS")) {
        if ((st = parse_attempts(env("AWS_MAX_ATTEMPTS"), "AWS_MAX_ATTEMPTS", &c->max_attempts,
                                 err)))
            goto fail;
    } else if (cfg_get(c, "max_attempts")) {
        if ((st = parse_attempts(cfg_get(c, "max_attempts"), "profile max_attempts",
                                 &c->max_attempts, err)))
            goto fail;
    }

    /* TLS */
    const char *ca = opts->ca_bundle;
    if (!ca)
        ca = env("AWS_CA_BUNDLE");
    if (!ca)
        ca = cfg_get(c, "ca_bundle");
    if (!ca && (ca = system_ca_bundle()))
        s3f__log(&c->logger, S3F_LOG_DEBUG, "TLS: libcurl's default CA bundle is missing, using %s",
                 ca);
    if (ca && !(c->ca_bundle = strdup(ca)))
        goto oom;
    if (opts->tls_insecure)
        s3f__log(&c->logger, S3F_LOG_WARN, "TLS certificate verification is disabled");
    c->connect_timeout_ms = opts->connect_timeout_ms;

    /* S3 Express One Zone sessions (AWS SDKs: AWS_S3_DISABLE_EXPRESS_SESSION_AUTH, the
     * profile's s3_disable_express_session_auth) */
    c->express_read_only = opts->express_read_only != 0;
    if (opts->disable_express_session_auth)
        c->express_session_auth_disabled = opts->disable_express_session_auth > 0;
    else if (env("AWS_S3_DISABLE_EXPRESS_SESSION_AUTH"))
        c->express_session_auth_disabled =
            strcasecmp(env("AWS_S3_DISABLE_EXPRESS_SESSION_AUTH"), "true") == 0;
    else if (cfg_get(c, "s3_disable_express_session_auth"))
        c->express_session_auth_disabled =
            strcasecmp(cfg_get(c, "s3_disable_express_session_auth"), "true") == 0;
    if ((st = s3f__express_new(c, err)))
        goto fail;

    /* credentials */
    c->anonymous = opts->anonymous != 0;
    if (!c->anonymous) {
        if (opts->access_key_id) {
            st = s3f__credentials_provider_new_static(opts->access_key_id,
                                                      opts->secret_access_key,
                                                      opts->session_token, &c->creds, err);
        } else {
            struct s3f__credentials_options co = {
                .profile = opts->profile,
                .config = c->config,
                .connect_timeout_ms = opts->connect_timeout_ms,
                .ca_bundle = c->ca_bundle,
                .logger = &c->logger,
            };
            st = s3f__credentials_provider_new_default(&co, &c->creds, err);
        }
        if (st)
            goto fail;
    }

    if ((st = check_interfaces(opts->network_interfaces, err)))
        goto fail;
    struct s3f__proxy_config proxy;
    if ((st = s3f__proxy_resolve(opts, cfg_get(c, "proxy_ca_bundle"), &proxy, err)))
        goto fail;
    struct s3f__http_pool_options ho = {
        .io_threads = opts->io_threads,
        .max_connections = opts->max_connections,
        .connect_timeout_ms = opts->connect_timeout_ms,
        .stall_timeout_ms = opts->stall_timeout_ms,
        .ca_bundle = c->ca_bundle,
        .tls_insecure = opts->tls_insecure != 0,
        .http_proxy = proxy.http_proxy,
        .https_proxy = proxy.https_proxy,
        .no_proxy = proxy.no_proxy,
        .proxy_ca_bundle = proxy.ca_bundle,
        .interfaces = opts->network_interfaces,
        .logger = &c->logger,
        .metrics = c->metrics,
    };
    st = s3f__http_pool_new(&ho, &c->http, err);
    s3f__proxy_log(&proxy, &c->logger);
    s3f__proxy_cleanup(&proxy);
    if (st)
        goto fail;
    if (s3f_metrics_add_collector(c->metrics, collect_metrics, c))
        goto oom;
    char shown[512];
    s3f__url_redact(c->endpoint_url ? c->endpoint_url : "(AWS)", shown, sizeof(shown));
    s3f__log(&c->logger, S3F_LOG_DEBUG, "client: region %s, endpoint %s, %s, %d attempts",
             c->region, shown,
             c->force_path_style ? "path style forced" : "virtual-hosted style where possible",
             c->max_attempts);
    *out = c;
    return S3F_OK;

oom:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
fail:
    s3f__s3_client_free(c);
    return st;
}

void s3f__s3_client_free(struct s3f_client *c) {
    if (!c)
        return;
    s3f__http_pool_free(c->http);
    s3f__express_free(c); /* the sessions' refreshers sign with c->creds */
    s3f__credentials_provider_free(c->creds);
    s3f__aws_config_free(c->config);
    free(c->region);
    free(c->endpoint_url);
    free(c->ca_bundle);
    s3f__request_options_cleanup(&c->ropts);
    pthread_mutex_destroy(&c->retry.lock);
    s3f_metrics_free(c->metrics);
    free(c);
}

struct s3f_metrics *s3f_client_metrics_registry(struct s3f_client *c) {
    return c ? c->metrics : NULL;
}

int s3f_client_metrics(struct s3f_client *c, s3f_metric_fn fn, void *ud) {
    return c ? s3f_metrics_foreach(c->metrics, fn, ud) : 0;
}

const char *s3f_client_region(const struct s3f_client *c) {
    return c && c->region ? c->region : "";
}

uint32_t s3f__s3_data_connections(const struct s3f_client *c) {
    return s3f__http_pool_data_connections(c->http);
}

const char *s3f_client_endpoint(const struct s3f_client *c) {
    return c && c->endpoint_url ? c->endpoint_url : "";
}

enum s3f_status s3f_client_credentials_source(struct s3f_client *c, char *buf, size_t len,
                                              char *access_key_id, size_t akid_len,
                                              struct s3f_error *err) {
    if (!c)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, "credentials", NULL,
                              "client is NULL");
    if (c->anonymous) {
        s3f__strlcpy(buf, "anonymous", len);
        if (access_key_id)
            s3f__strlcpy(access_key_id, "", akid_len);
        return S3F_OK;
    }
    struct s3f__credentials creds;
    memset(&creds, 0, sizeof(creds));
    enum s3f_status st = s3f__credentials_get(c->creds, &creds, err);
    if (st == S3F_OK) {
        s3f__strlcpy(buf, creds.source, len);
        if (access_key_id)
            s3f__strlcpy(access_key_id, creds.access_key_id, akid_len);
    }
    s3f__credentials_cleanup(&creds);
    return st;
}

struct s3f__endpoint_params s3f__client_endpoint_params(const struct s3f_client *c,
                                                        const char *bucket) {
    return (struct s3f__endpoint_params){
        .region = c->region,
        .bucket = bucket,
        .endpoint_url = c->endpoint_url,
        .force_path_style = c->force_path_style,
        .use_fips = c->use_fips,
        .use_dual_stack = c->use_dual_stack,
        .accelerate = c->accelerate,
        .disable_s3express_session_auth = c->express_session_auth_disabled,
    };
}
