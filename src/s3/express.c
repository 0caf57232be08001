/* S3 Express One Zone sessions (AWS, "Authorizing Zonal endpoint API operations with
 * CreateSession" and the API reference of CreateSession).
 *
 * A request to a directory bucket's zonal endpoint is signed with a session's credentials:
 * CreateSession (GET /?session on the bucket, signed with the caller's own credentials for
 * the service s3express; x-amz-create-session-mode: ReadOnly for a read-only client)
 * returns an access key, a secret and a session token that live about 5 minutes and are
 * scoped to that bucket. Each bucket gets one credentials provider of src/auth whose fetch
 * is CreateSession, so that sessions are cached, refreshed in the background before they
 * expire (half their lifetime before, at most 300 s), shared by every request of the
 * client, and invalidated when S3 rejects one: exactly as the chain's temporary
 * credentials (docs/CONFIGURATION.md). The executor (request.c) signs with the session's
 * key, sends its token in x-amz-s3session-token (signed) and no x-amz-security-token, and,
 * when S3 answers ExpiredToken, InvalidToken, TokenRefreshRequired or AccessDenied for a
 * session, drops it and re-sends the request once with a new one.
 *
 * CreateSession runs on the provider's refresher thread through its own libcurl handle
 * (s3f__credentials_fetch_session), never through the client's I/O threads: a request
 * that waits for a session on an I/O thread cannot starve the request that creates it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/credentials.h"
#include "auth/sigv4.h"
#include "http/http.h"
#include "s3/client.h"
#include "s3/endpoint.h"

#define OP "CreateSession"
#define MAX_BUCKETS 1024 /* sessions of distinct buckets one client keeps */

struct express_bucket {
    struct s3f_client *c;
    char *bucket;
    struct s3f__credentials_provider *prov;
};

struct s3f__express {
    pthread_mutex_t lock;
    struct express_bucket **v; /* guarded by lock; entries are never removed before free */
    size_t n, cap;
};

/* CreateSession for eb->bucket, signed with the client's own credentials. */
static enum s3f_status create_session(void *ud, struct s3f__credentials *out,
                                      struct s3f_error *err) {
    struct express_bucket *eb = ud;
    struct s3f_client *c = eb->c;
    char resource[300];
    s3f__s3_resource(resource, sizeof(resource), eb->bucket, NULL);
    struct s3f__endpoint_params pp = s3f__client_endpoint_params(c, eb->bucket);
    struct s3f__endpoint ep;
    struct s3f__credentials_snapshot *snap = NULL;
    struct s3f__sigv4_signed sig;
    memset(&sig, 0, sizeof(sig));
    char *url = NULL, *path = NULL;
    char h_date[64], h_sha[128], *h_auth = NULL, *h_token = NULL;
    enum s3f_status st = s3f__endpoint_resolve(&pp, &ep, err);
    if (st)
        goto out;
    if (c->anonymous || !c->creds) {
        st = s3f__error_set(err, S3F_ERR_NO_CREDENTIALS, OP, resource,
                            "directory buckets need credentials (CreateSession): an anonymous "
                            "client cannot use them");
        goto out;
    }
    url = s3f__endpoint_object_url(&ep, "", "session");
    path = s3f__endpoint_object_path(&ep, "");
    if (!url || !path) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, resource, "out of memory");
        goto out;
    }
    if ((st = s3f__credentials_acquire(c->creds, &snap, err)))
        goto out;
    const char *mode = c->express_read_only ? "ReadOnly" : NULL;
    struct s3f__header hdrs[2] = {{"host", ep.host}, {"x-amz-create-session-mode", mode}};
    struct s3f__sigv4_request sreq = {
        .method = "GET",
        .path = path,
        .query = "session",
        .headers = hdrs,
        .n_headers = mode ? 2 : 1,
        .payload_hash = S3F__SIGV4_EMPTY_SHA256,
    };
    struct s3f__sigv4_credentials sc = {snap->creds.access_key_id,
                                        snap->creds.secret_access_key,
                                        snap->creds.session_token};
    struct s3f__sigv4_config cfg = {
        .region = ep.signing_region,
        .service = ep.signing_name, /* s3express */
        .time = s3f__wall_time_s(),
        .add_content_sha256_header = true,
    };
    if ((st = s3f__sigv4_sign_headers(&sreq, &sc, &cfg, &sig, err)))
        goto out;
    size_t al = strlen(sig.authorization) + 32;
    h_auth = malloc(al);
    if (sig.security_token) {
        size_t tl = strlen(sig.security_token) + 32;
        if ((h_token = malloc(tl)))
            snprintf(h_token, tl, "x-amz-security-token: %s", sig.security_token);
    }
    if (!h_auth || (sig.security_token && !h_token)) {
        st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, resource, "out of memory");
        goto out;
    }
    snprintf(h_auth, al, "Authorization: %s", sig.authorization);
    snprintf(h_date, sizeof(h_date), "x-amz-date: %s", sig.amz_date);
    snprintf(h_sha, sizeof(h_sha), "x-amz-content-sha256: %s", S3F__SIGV4_EMPTY_SHA256);
    struct s3f__session_fetch f = {
        .url = url,
        .resource = resource,
        .source = "s3express-session",
        .ca_bundle = c->ca_bundle,
        .connect_timeout_ms = c->connect_timeout_ms,
        .logger = &c->logger,
    };
    size_t nh = 0;
    f.headers[nh++] = h_date;
    f.headers[nh++] = h_sha;
    f.headers[nh++] = h_auth;
    if (h_token)
        f.headers[nh++] = h_token;
    if (mode)
        f.headers[nh++] = "x-amz-create-session-mode: ReadOnly";
    st = s3f__credentials_fetch_session(&f, out, err);
    if (st == S3F_OK)
        s3f__log(&c->logger, S3F_LOG_DEBUG, "s3express: new %s session for %s, %lld s left",
                 mode ? "ReadOnly" : "ReadWrite", resource,
                 (long long)(out->expiration - s3f__wall_time_s()));
out:
    if (h_auth) {
        explicit_bzero(h_auth, strlen(h_auth));
        free(h_auth);
    }
    if (h_token) {
        explicit_bzero(h_token, strlen(h_token));
        free(h_token);
    }
    s3f__sigv4_signed_cleanup(&sig);
    s3f__credentials_release(snap);
    free(url);
    free(path);
    s3f__endpoint_cleanup(&ep);
    return st;
}

enum s3f_status s3f__express_new(struct s3f_client *c, struct s3f_error *err) {
    struct s3f__express *x = calloc(1, sizeof(*x));
    if (!x || pthread_mutex_init(&x->lock, NULL) != 0) {
        free(x);
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, "s3f_client_new", NULL, "out of memory");
    }
    c->express = x;
    return S3F_OK;
}

void s3f__express_free(struct s3f_client *c) {
    struct s3f__express *x = c->express;
    if (!x)
        return;
    for (size_t i = 0; i < x->n; i++) {
        s3f__credentials_provider_free(x->v[i]->prov);
        free(x->v[i]->bucket);
        free(x->v[i]);
    }
    free(x->v);
    pthread_mutex_destroy(&x->lock);
    free(x);
    c->express = NULL;
}

enum s3f_status s3f__express_provider(struct s3f_client *c, const char *bucket,
                                      struct s3f__credentials_provider **out,
                                      struct s3f_error *err) {
    struct s3f__express *x = c->express;
    *out = NULL;
    if (!x || !bucket || !*bucket)
        return s3f__error_set(err, S3F_ERR_INTERNAL, OP, NULL, "no session table");
    enum s3f_status st = S3F_OK;
    pthread_mutex_lock(&x->lock);
    for (size_t i = 0; i < x->n; i++) {
        if (strcmp(x->v[i]->bucket, bucket) == 0) {
            *out = x->v[i]->prov;
            goto out;
        }
    }
    if (x->n == MAX_BUCKETS) {
        st = s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL,
                            "one client keeps sessions for at most %d directory buckets",
                            MAX_BUCKETS);
        goto out;
    }
    if (x->n == x->cap) {
        size_t nc = x->cap ? x->cap * 2 : 8;
        struct express_bucket **nv = realloc(x->v, nc * sizeof(*nv));
        if (!nv)
            goto oom;
        x->v = nv;
        x->cap = nc;
    }
    struct express_bucket *eb = calloc(1, sizeof(*eb));
    if (!eb || !(eb->bucket = strdup(bucket))) {
        free(eb);
        goto oom;
    }
    eb->c = c;
    if ((st = s3f__credentials_provider_new_fn(create_session, eb, 0, &c->logger, &eb->prov,
                                               err))) {
        free(eb->bucket);
        free(eb);
        goto out;
    }
    x->v[x->n++] = eb;
    *out = eb->prov;
    goto out;
oom:
    st = s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, NULL, "out of memory");
out:
    pthread_mutex_unlock(&x->lock);
    return st;
}

bool s3f__express_session_rejected(const char *code) {
    static const char *const codes[] = {"ExpiredToken", "TokenRefreshRequired", "InvalidToken",
                                        "AccessDenied"};
    for (size_t i = 0; code && i < S3F_ARRAY_LEN(codes); i++)
        if (strcmp(code, codes[i]) == 0)
            return true;
    return false;
}
