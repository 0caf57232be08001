/* The container endpoint (ECS, EKS Pod Identity) and EC2 IMDSv2: the link-local metadata
 * endpoints of the default chain, fetched with the helper of credentials_http.c
 * (s3f__fetch_retried: no proxy, a few attempts with backoff). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/credentials_internal.h"

#define OP "credentials"

/* ---- container (ECS, EKS Pod Identity) ------------------------------------------------------ */

/* Hosts a plain-http full URI may name: loopback and the ECS / EKS link-local addresses. */
static bool container_host_allowed(const char *host) {
    static const char *const allowed[] = {"localhost", "[::1]", "169.254.170.2", "169.254.170.23",
                                          "[fd00:ec2::23]"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(allowed); i++)
        if (s3f__strieq(host, allowed[i]))
            return true;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1)
        return (ntohl(a.s_addr) >> 24) == 127;
    return false;
}

/* S3F_OK if a full URI is acceptable (https anywhere, http for the hosts above). */
static enum s3f_status check_full_uri(const char *uri, struct s3f_error *err) {
    (void)s3f__fetch_curl_init(); /* curl_url() uses libcurl's global state */
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    enum s3f_status st = S3F_OK;
    if (!u)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, uri, 0);
    if (uc == CURLUE_OK)
        uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    if (uc == CURLUE_OK)
        uc = curl_url_get(u, CURLUPART_HOST, &host, 0);
    if (uc == CURLUE_OUT_OF_MEMORY) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
        goto out;
    }
    if (uc != CURLUE_OK) {
        st = s3f__error_set(err, S3F_ERR_CONFIG, OP, "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                            "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a valid URL");
        goto out;
    }
    if (s3f__strieq(scheme, "https"))
        goto out;
    if (!s3f__strieq(scheme, "http")) {
        st = s3f__error_set(err, S3F_ERR_CONFIG, OP, "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                            "AWS_CONTAINER_CREDENTIALS_FULL_URI must be an http or https URL");
        goto out;
    }
    if (!container_host_allowed(host))
        st = s3f__error_set(err, S3F_ERR_CONFIG, OP, "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                            "AWS_CONTAINER_CREDENTIALS_FULL_URI: plain http is allowed only for "
                            "loopback hosts and the ECS/EKS addresses, not '%s'",
                            host);
out:
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return st;
}

enum s3f_status s3f__chain_fetch_container(const struct s3f__chain_settings *s,
                                           struct s3f__credentials *out, char *note,
                                           size_t note_len, struct s3f_error *err) {
    if (!s->container_relative && !s->container_full) {
        snprintf(note, note_len,
                 "container (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset)");
        return S3F_ERR_NO_CREDENTIALS;
    }
    enum s3f_status st = S3F_OK;
    char *token = NULL, *auth = NULL, *url = NULL;
    struct s3f__fetch_response rs;
    s3f__fetch_response_init(&rs);
    struct s3f__json_object o = {0};
    if (s->container_relative) {
        const char *host = s->container_host ? s->container_host : "http://169.254.170.2";
        size_t n = strlen(host) + strlen(s->container_relative) + 2;
        url = malloc(n);
        if (!url)
            goto nomem;
        snprintf(url, n, "%s%s%s", host, s->container_relative[0] == '/' ? "" : "/",
                 s->container_relative);
    } else {
        if ((st = check_full_uri(s->container_full, err)))
            goto out;
        url = s3f__strdup(s->container_full);
        if (!url)
            goto nomem;
    }
    if (s->container_token_file) {
        if ((st = s3f__read_token_file(s->container_token_file, S3F__TOKEN_FILE_MAX,
                                       "container authorization token file", &token, err)))
            goto out;
    } else if (s->container_token) {
        token = s3f__strdup(s->container_token);
        if (!token)
            goto nomem;
    }
    if (token) {
        if (strpbrk(token, "\r\n")) {
            st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url,
                                "the container authorization token contains a line break");
            goto out;
        }
        size_t n = strlen(token) + sizeof("Authorization: ");
        auth = malloc(n);
        if (!auth)
            goto nomem;
        snprintf(auth, n, "Authorization: %s", token);
    }
    struct s3f__fetch_request rq = {
        .method = "GET",
        .url = url,
        .headers = {"Accept: application/json", auth},
        .connect_timeout_ms = s->connect_timeout_ms,
        .timeout_ms = s->timeout_ms,
        .no_proxy = true,
    };
    char why[CURL_ERROR_SIZE + 64];
    st = s3f__fetch_retried(s, &rq, &rs, 3, why, sizeof(why));
    if (st) {
        st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS, OP, url,
                            "container credentials endpoint: %s", why);
        goto out;
    }
    char jerr[96];
    enum s3f_status jst = s3f__json_parse_object(rs.body.data, rs.body.len, &o, jerr, sizeof(jerr));
    if (jst == S3F_ERR_NO_MEMORY)
        goto nomem;
    if (rs.status != 200) {
        const char *msg = jst ? NULL : s3f__json_get_string(&o, "message");
        const char *code = jst ? NULL : s3f__json_get_string(&o, "code");
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url,
                            "container credentials endpoint returned HTTP %ld%s%s", rs.status,
                            msg ? ": " : "", msg ? msg : "");
        if (err) {
            err->http_status = (int)rs.status;
            s3f__strlcpy(err->code, code ? code : "", sizeof(err->code));
        }
        goto out;
    }
    if (jst) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url,
                            "container credentials response is not a JSON object (%s)", jerr);
        goto out;
    }
    st = s3f__credentials_from_json(&o, "Token", "container", "container credentials response",
                                    out, err);
    goto out;
nomem:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
out:
    s3f__json_cleanup(&o);
    s3f__fetch_response_cleanup(&rs);
    s3f__wipe_free(token);
    s3f__wipe_free(auth);
    free(url);
    return st;
}

/* ---- EC2 instance metadata (IMDSv2 only) ---------------------------------------------------- */

enum s3f_status s3f__chain_fetch_imds(const struct s3f__chain_settings *s,
                                      struct s3f__credentials *out, char *note, size_t note_len,
                                      struct s3f_error *err) {
    if (s->imds_disabled) {
        snprintf(note, note_len, "imds (disabled by AWS_EC2_METADATA_DISABLED)");
        return S3F_ERR_NO_CREDENTIALS;
    }
    enum s3f_status st = S3F_OK;
    struct s3f__fetch_response rs;
    s3f__fetch_response_init(&rs);
    struct s3f__json_object o = {0};
    struct s3f__buf path;
    s3f__buf_init(&path, 4096);
    char *token = NULL, *token_hdr = NULL, *role = NULL;
    char url[2048];
    char why[CURL_ERROR_SIZE + 64];
    struct s3f__fetch_request rq = {
        .connect_timeout_ms = s->imds_timeout_ms,
        .timeout_ms = s->imds_timeout_ms + 1000,
        .no_proxy = true,
    };

    /* 1. session token */
    snprintf(url, sizeof(url), "%s/latest/api/token", s->imds_endpoint);
    rq.method = "PUT";
    rq.url = url;
    rq.headers[0] = "X-aws-ec2-metadata-token-ttl-seconds: 21600";
    st = s3f__fetch_retried(s, &rq, &rs, s->imds_attempts, why, sizeof(why));
    if (st == S3F_ERR_NO_MEMORY)
        goto nomem;
    if (st) {
        snprintf(note, note_len, "imds (%s)",
                 st == S3F_ERR_CONNECT ? "connect failed"
                 : st == S3F_ERR_TIMEOUT ? "timed out"
                                         : "token request failed");
        st = S3F_ERR_NO_CREDENTIALS;
        goto out;
    }
    if (rs.status != 200 || !rs.body.data || !*s3f__trim(rs.body.data)) {
        snprintf(note, note_len, "imds (token request: HTTP %ld%s)", rs.status,
                 rs.status == 200 ? ", empty token" : "");
        st = S3F_ERR_NO_CREDENTIALS;
        goto out;
    }
    token = s3f__strdup(s3f__trim(rs.body.data));
    size_t hn = (token ? strlen(token) : 0) + sizeof("X-aws-ec2-metadata-token: ");
    token_hdr = token ? malloc(hn) : NULL;
    if (!token_hdr)
        goto nomem;
    if (strpbrk(token, "\r\n")) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url, "IMDS returned a malformed token");
        goto out;
    }
    snprintf(token_hdr, hn, "X-aws-ec2-metadata-token: %s", token);

    /* 2. the instance's role */
    snprintf(url, sizeof(url), "%s/latest/meta-data/iam/security-credentials/", s->imds_endpoint);
    rq.method = "GET";
    rq.headers[0] = token_hdr;
    st = s3f__fetch_retried(s, &rq, &rs, s->imds_attempts, why, sizeof(why));
    if (st) {
        st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS, OP, url,
                            "IMDS: %s", why);
        goto out;
    }
    if (rs.status == 404) {
        snprintf(note, note_len, "imds (no IAM role attached to the instance)");
        st = S3F_ERR_NO_CREDENTIALS;
        goto out;
    }
    if (rs.status != 200) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url, "IMDS returned HTTP %ld",
                            rs.status);
        if (err)
            err->http_status = (int)rs.status;
        goto out;
    }
    char *r = rs.body.data ? s3f__trim(rs.body.data) : NULL;
    if (!r || !*r) {
        snprintf(note, note_len, "imds (no IAM role attached to the instance)");
        st = S3F_ERR_NO_CREDENTIALS;
        goto out;
    }
    role = s3f__strndup(r, strcspn(r, "\r\n"));
    if (!role)
        goto nomem;
    /* IAM role names are [A-Za-z0-9+=,.@_-]{1,64}: safe in a URL path as they are */
    if (strlen(role) > 64 ||
        strspn(role, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+=,.@_-") !=
            strlen(role)) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, url,
                            "IMDS returned an invalid IAM role name");
        goto out;
    }

    /* 3. the role's credentials */
    if (s3f__buf_appendf(&path, "%s/latest/meta-data/iam/security-credentials/%s",
                         s->imds_endpoint, role))
        goto nomem;
    rq.url = path.data;
    st = s3f__fetch_retried(s, &rq, &rs, s->imds_attempts, why, sizeof(why));
    if (st) {
        st = s3f__error_set(err, st == S3F_ERR_NO_MEMORY ? st : S3F_ERR_CREDENTIALS, OP,
                            path.data, "IMDS: %s", why);
        goto out;
    }
    if (rs.status != 200) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path.data,
                            "IMDS returned HTTP %ld for role '%s'", rs.status, role);
        if (err)
            err->http_status = (int)rs.status;
        goto out;
    }
    char jerr[96];
    st = s3f__json_parse_object(rs.body.data, rs.body.len, &o, jerr, sizeof(jerr));
    if (st == S3F_ERR_NO_MEMORY)
        goto nomem;
    if (st) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path.data,
                            "IMDS credentials response is not a JSON object (%s)", jerr);
        goto out;
    }
    const char *code = s3f__json_get_string(&o, "Code");
    if (code && strcmp(code, "Success") != 0) {
        st = s3f__error_set(err, S3F_ERR_CREDENTIALS, OP, path.data,
                            "IMDS credentials for role '%s': Code %s", role, code);
        if (err)
            s3f__strlcpy(err->code, code, sizeof(err->code));
        goto out;
    }
    st = s3f__credentials_from_json(&o, "Token", "imds", "IMDS credentials response", out, err);
    goto out;
nomem:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
out:
    s3f__json_cleanup(&o);
    s3f__fetch_response_cleanup(&rs);
    s3f__buf_cleanup(&path);
    s3f__wipe_free(token);
    s3f__wipe_free(token_hdr);
    free(role);
    return st;
}
