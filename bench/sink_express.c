/*
 * s3flash-sink --express: what an S3 Express One Zone directory bucket does differently, so
 * that the client's Express paths run end to end on loopback (AWS, "Directory buckets" and
 * the API reference of CreateSession, ListObjectsV2, PutObject, RenameObject):
 *
 *   - CreateSession (GET /bucket?session, signed with the caller's own credentials for the
 *     service s3express) returns session credentials that live --session-seconds (300, as
 *     AWS's 5 minutes); x-amz-create-session-mode: ReadOnly gives a session that may only
 *     read.
 *   - Every other request on a bucket must carry x-amz-s3session-token, with an
 *     Authorization whose credential is the session's access key id and whose scope names
 *     the service s3express, x-amz-s3session-token among its SignedHeaders and no
 *     x-amz-security-token. An expired session is answered 403 ExpiredToken, a revoked or
 *     unknown one 403 InvalidToken, a session of another bucket, or a ReadOnly session that
 *     writes, 403 AccessDenied. The signature itself is not recomputed (the sink has no
 *     crypto, by design: libc only): the client's SigV4 is checked by its unit tests.
 *   - ListObjectsV2 is unordered (the map's hash order), pages end when the XML buffer is
 *     full (NextContinuationToken: the hash and key of the last entry), only "/" is a
 *     delimiter and, with a delimiter, a prefix must end in "/".
 *   - PutObject with x-amz-write-offset-bytes appends (the offset must be the object's size;
 *     400 InvalidWriteOffset otherwise; 0 creates it).
 *   - PUT /bucket/key?renameObject with x-amz-rename-source: /bucket/src moves the object in
 *     one step (If-None-Match: * refuses an existing destination with 412).
 *   - If-None-Match: * on PutObject and CompleteMultipartUpload: 412 when the key exists.
 *   - The sink's own requests (no bucket): GET /?sink-stats returns its counters as text
 *     lines "name value"; POST /?sink-revoke-sessions revokes every session, as does
 *     --revoke-after N once N requests were let through (tests).
 *   - A session is checked as of the request head's arrival (a long upload signed with a
 *     session that expires while its body arrives is accepted, as AWS authenticates the
 *     request when it starts).
 */
#include "sink.h"

#define MAX_SESSIONS 4096
#define TOKEN_LEN 40
#define AKID_LEN 20
#define BUCKET_MAX 64

struct session {
    char token[TOKEN_LEN + 1];
    char akid[AKID_LEN + 1];
    char bucket[BUCKET_MAX];
    size_t bucket_len;
    time_t expires;
    bool readonly, revoked;
};

static struct {
    pthread_mutex_t mu;
    struct session *tab; /* a ring: the oldest session is replaced when full */
    uint32_t next, used;
    uint64_t rng;
} g_xs = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* the counters GET /?sink-stats reports */
static struct {
    atomic_uint_fast64_t create_session, readonly, expired, invalid, denied, renames,
        appends, copies, deletes, lists, puts, gets, admitted;
} g_xc;

bool express_init(void)
{
    if (!g_opt.express)
        return true;
    g_xs.tab = calloc(MAX_SESSIONS, sizeof(*g_xs.tab));
    g_xs.rng = mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ g_salt);
    return g_xs.tab != NULL;
}

void express_free(void)
{
    free(g_xs.tab);
    g_xs.tab = NULL;
}

static void rand_chars(char *out, size_t n, const char *alphabet)
{
    size_t an = strlen(alphabet);
    for (size_t i = 0; i < n; i++) {
        g_xs.rng = mix64(g_xs.rng + 0x9e3779b97f4a7c15ULL);
        out[i] = alphabet[g_xs.rng % an];
    }
    out[n] = 0;
}

static void iso_time(time_t t, char *out, size_t n)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The Credential=AKID/DATE/REGION/SERVICE/aws4_request of an Authorization header, and
 * whether its SignedHeaders name `hdr`. False when it is not SigV4. */
static bool parse_authorization(struct hdrval a, struct hdrval *akid, struct hdrval *service,
                                const char *hdr, bool *signs_hdr)
{
    static const char alg[] = "AWS4-HMAC-SHA256 ";
    if (a.n < sizeof(alg) - 1 || memcmp(a.p, alg, sizeof(alg) - 1) != 0)
        return false;
    const char *end = a.p + a.n;
    const char *cred = memmem(a.p, a.n, "Credential=", 11);
    if (!cred)
        return false;
    cred += 11;
    const char *ce = cred;
    while (ce < end && *ce != ',' && *ce != ' ')
        ce++;
    const char *f[5];
    size_t nf = 0;
    const char *p = cred;
    f[nf++] = p;
    for (; p < ce && nf < 5; p++)
        if (*p == '/')
            f[nf++] = p + 1;
    if (nf != 5)
        return false;
    *akid = (struct hdrval){f[0], (size_t)(f[1] - 1 - f[0])};
    *service = (struct hdrval){f[3], (size_t)(f[4] - 1 - f[3])};
    *signs_hdr = false;
    const char *sh = memmem(a.p, a.n, "SignedHeaders=", 14);
    if (sh) {
        sh += 14;
        size_t hn = strlen(hdr);
        while (sh < end && *sh != ',' && *sh != ' ') {
            const char *e = sh;
            while (e < end && *e != ';' && *e != ',' && *e != ' ')
                e++;
            if ((size_t)(e - sh) == hn && strncasecmp(sh, hdr, hn) == 0)
                *signs_hdr = true;
            sh = e < end && *e == ';' ? e + 1 : e;
        }
    }
    return true;
}

static void deny(struct conn *c, const char *code, const char *msg, atomic_uint_fast64_t *ctr)
{
    atomic_fetch_add(ctr, 1);
    respond_error(c, 403, code, msg);
}

/* CreateSession: GET /bucket?session signed with the caller's own credentials. */
static void create_session(struct conn *c)
{
    struct req *r = &c->rq;
    struct hdrval akid, service;
    bool signs;
    if (r->s3session_token.n) {
        deny(c, "AccessDenied", "CreateSession is signed with your own credentials, not a "
             "session's.", &g_xc.denied);
        return;
    }
    if (!parse_authorization(r->authorization, &akid, &service, "host", &signs)) {
        deny(c, "AccessDenied", "CreateSession must be signed (SigV4).", &g_xc.denied);
        return;
    }
    if (!hv_eq(service, "s3express")) {
        deny(c, "SignatureDoesNotMatch", "The credential scope's service must be s3express.",
             &g_xc.denied);
        return;
    }
    if (r->bucket_len >= BUCKET_MAX) {
        respond_error(c, 400, "InvalidBucketName", "The bucket name is too long.");
        return;
    }
    bool ro = hv_eq(r->session_mode, "ReadOnly");
    if (r->session_mode.n && !ro && !hv_eq(r->session_mode, "ReadWrite")) {
        respond_error(c, 400, "InvalidArgument",
                      "x-amz-create-session-mode must be ReadOnly or ReadWrite.");
        return;
    }
    char secret[41], exp[32];
    struct session s = {.bucket_len = r->bucket_len, .readonly = ro};
    memcpy(s.bucket, r->bucket, r->bucket_len);
    pthread_mutex_lock(&g_xs.mu);
    memcpy(s.akid, "ASIASINK", 8);
    rand_chars(s.akid + 8, AKID_LEN - 8, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
    rand_chars(s.token, TOKEN_LEN, "abcdefghijklmnopqrstuvwxyz0123456789");
    rand_chars(secret, 40, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/");
    s.expires = time(NULL) + g_opt.session_seconds;
    g_xs.tab[g_xs.next] = s;
    g_xs.next = (g_xs.next + 1) % MAX_SESSIONS;
    if (g_xs.used < MAX_SESSIONS)
        g_xs.used++;
    pthread_mutex_unlock(&g_xs.mu);
    atomic_fetch_add(&g_xc.create_session, 1);
    if (ro)
        atomic_fetch_add(&g_xc.readonly, 1);
    iso_time(s.expires, exp, sizeof(exp));
    struct ob x;
    xml_begin(&x, c->w);
    ob_printf(&x, "<CreateSessionResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                  "<Credentials><SessionToken>%s</SessionToken>"
                  "<SecretAccessKey>%s</SecretAccessKey><AccessKeyId>%s</AccessKeyId>"
                  "<Expiration>%s</Expiration></Credentials></CreateSessionResult>",
              s.token, secret, s.akid, exp);
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
}

static void revoke_all(void)
{
    pthread_mutex_lock(&g_xs.mu);
    for (uint32_t i = 0; i < g_xs.used; i++)
        g_xs.tab[i].revoked = true;
    pthread_mutex_unlock(&g_xs.mu);
}

/* The session checks of a request on a bucket; false when it was refused (answered). */
static bool check_session(struct conn *c)
{
    struct req *r = &c->rq;
    struct hdrval akid, service;
    bool signs;
    if (!r->s3session_token.n) {
        deny(c, "AccessDenied", "Requests on a directory bucket need a session token "
             "(x-amz-s3session-token, from CreateSession).", &g_xc.denied);
        return false;
    }
    if (r->security_token.n) {
        deny(c, "AccessDenied", "x-amz-security-token is not accepted with a session token.",
             &g_xc.denied);
        return false;
    }
    if (!parse_authorization(r->authorization, &akid, &service, "x-amz-s3session-token",
                             &signs)) {
        deny(c, "AccessDenied", "The request must be signed (SigV4).", &g_xc.denied);
        return false;
    }
    if (!hv_eq(service, "s3express") || !signs) {
        deny(c, "SignatureDoesNotMatch", "A session's requests are signed for the service "
             "s3express, with x-amz-s3session-token among the signed headers.", &g_xc.denied);
        return false;
    }
    struct session s = {0};
    bool found = false;
    pthread_mutex_lock(&g_xs.mu);
    for (uint32_t i = 0; i < g_xs.used; i++) {
        if (r->s3session_token.n == TOKEN_LEN &&
            memcmp(g_xs.tab[i].token, r->s3session_token.p, TOKEN_LEN) == 0) {
            s = g_xs.tab[i];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&g_xs.mu);
    if (!found || s.revoked) {
        deny(c, "InvalidToken", "The provided token is malformed or otherwise invalid.",
             &g_xc.invalid);
        return false;
    }
    if (r->head_t >= s.expires) { /* as of the request's head: AWS authenticates it */
        deny(c, "ExpiredToken", "The provided token has expired.", &g_xc.expired);
        return false;
    }
    if (akid.n != AKID_LEN || memcmp(akid.p, s.akid, AKID_LEN) != 0) {
        deny(c, "InvalidAccessKeyId", "The request is not signed with the session's access "
             "key id.", &g_xc.denied);
        return false;
    }
    if (s.bucket_len != r->bucket_len || memcmp(s.bucket, r->bucket, r->bucket_len) != 0) {
        deny(c, "AccessDenied", "The session is for another bucket.", &g_xc.denied);
        return false;
    }
    if (s.readonly && r->method != M_GET && r->method != M_HEAD) {
        deny(c, "AccessDenied", "A ReadOnly session cannot write.", &g_xc.denied);
        return false;
    }
    if (atomic_fetch_add(&g_xc.admitted, 1) + 1 == g_opt.revoke_after)
        revoke_all(); /* --revoke-after: this one passes, the next ones do not */
    return true;
}

/* ---- ListObjectsV2, unordered ---- */
struct lent {
    uint64_t h;
    uint64_t size;
    char *key;
    size_t n;
    bool is_prefix;
};
struct lcoll {
    struct lent *v;
    size_t n, cap;
    size_t pn;              /* prefix length */
    bool delim;             /* "/" */
    bool oom;
};

static void collect(void *ud, const char *k, size_t n, uint64_t size, uint64_t h)
{
    struct lcoll *l = ud;
    if (l->oom)
        return;
    bool is_prefix = false;
    if (l->delim) {
        const char *sl = memchr(k + l->pn, '/', n - l->pn);
        if (sl) {
            n = (size_t)(sl - k) + 1;
            is_prefix = true;
        }
    }
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        struct lent *nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv) {
            l->oom = true;
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    char *kc = malloc(n ? n : 1);
    if (!kc) {
        l->oom = true;
        return;
    }
    memcpy(kc, k, n);
    if (is_prefix) { /* a common prefix is ordered by its own hash: its copies sort together */
        uint64_t ph = 1469598103934665603ULL;
        for (size_t i = 0; i < n; i++)
            ph = (ph ^ (uint8_t)k[i]) * 1099511628211ULL;
        h = mix64(ph);
    }
    l->v[l->n++] = (struct lent){h, size, kc, n, is_prefix};
}

static int lent_cmp(const void *a, const void *b)
{
    const struct lent *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->key, y->key, m);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static void handle_list(struct conn *c)
{
    struct req *r = &c->rq;
    atomic_fetch_add(&g_xc.lists, 1);
    if (!r->q_list_type2) {
        respond_error(c, 400, "InvalidRequest", "Directory buckets support ListObjectsV2 "
                      "(list-type=2) only.");
        return;
    }
    if (r->delimiter.n && !(r->delimiter.n == 1 && r->delimiter.p[0] == '/')) {
        respond_error(c, 400, "InvalidArgument", "Directory buckets support only \"/\" as a "
                      "delimiter.");
        return;
    }
    if (r->delimiter.n && r->prefix.n && r->prefix.p[r->prefix.n - 1] != '/') {
        respond_error(c, 400, "InvalidArgument", "With a delimiter, a directory bucket's "
                      "prefix must end in \"/\".");
        return;
    }
    uint64_t max_keys = 1000;
    if (r->max_keys.n && (!parse_u64(r->max_keys.p, r->max_keys.n, &max_keys)))
        max_keys = 1000;
    if (max_keys > 1000)
        max_keys = 1000;
    char bp[BUCKET_MAX + 1];
    if (r->bucket_len >= BUCKET_MAX) {
        respond_error(c, 400, "InvalidBucketName", "The bucket name is too long.");
        return;
    }
    memcpy(bp, r->bucket, r->bucket_len);
    bp[r->bucket_len] = '/';
    struct lcoll l = {.pn = r->prefix.n, .delim = r->delimiter.n != 0};
    objmap_each(bp, r->bucket_len + 1, r->prefix.p, r->prefix.n, collect, &l);
    if (l.oom) {
        respond_error(c, 500, "InternalError", "Out of memory.");
        goto out;
    }
    if (l.n > 1) /* qsort of NULL is undefined even for no element */
        qsort(l.v, l.n, sizeof(*l.v), lent_cmp);
    /* continuation token: "HHHHHHHHHHHHHHHH" + the key of the last entry sent */
    size_t i = 0;
    if (r->cont_token.n >= 16) {
        uint64_t th = 0;
        for (int j = 0; j < 16; j++)
            th = th * 16 + (uint64_t)(hexval(r->cont_token.p[j]) & 15);
        struct lent t = {th, 0, (char *)r->cont_token.p + 16, r->cont_token.n - 16, false};
        while (i < l.n && lent_cmp(&l.v[i], &t) <= 0)
            i++;
    }
    struct ob x;
    list_result_begin(c, &x);
    if (r->delimiter.n)
        ob_str(&x, "<Delimiter>/</Delimiter>");
    ob_printf(&x, "<MaxKeys>%" PRIu64 "</MaxKeys>", max_keys);
    /* room kept for the closing elements and a continuation token */
    size_t reserve = 300 + 2 * 6 * KEY_MAX, count = 0;
    size_t last = SIZE_MAX;
    char etag[48];
    for (; i < l.n && count < max_keys; i++) {
        struct lent *e = &l.v[i];
        if (x.len + reserve + 6 * e->n + 256 > x.cap)
            break;
        if (e->is_prefix) {
            if (last != SIZE_MAX && l.v[last].is_prefix && l.v[last].n == e->n &&
                memcmp(l.v[last].key, e->key, e->n) == 0)
                continue; /* the same common prefix from another key */
            ob_str(&x, "<CommonPrefixes><Prefix>");
            ob_xml(&x, e->key, e->n);
            ob_str(&x, "</Prefix></CommonPrefixes>");
        } else {
            char name[BUCKET_MAX + 1 + KEY_MAX];
            memcpy(name, bp, r->bucket_len + 1);
            memcpy(name + r->bucket_len + 1, e->key, e->n);
            object_etag(name, r->bucket_len + 1 + e->n, e->size, 0, 0, etag);
            ob_str(&x, "<Contents><Key>");
            ob_xml(&x, e->key, e->n);
            ob_printf(&x, "</Key><LastModified>%s</LastModified><ETag>&quot;%s&quot;</ETag>"
                          "<Size>%" PRIu64 "</Size><StorageClass>EXPRESS_ONEZONE</StorageClass>"
                          "</Contents>", g_last_modified_iso, etag, e->size);
        }
        last = i;
        count++;
    }
    /* skip duplicates of the last common prefix before deciding on truncation */
    while (last != SIZE_MAX && i < l.n && l.v[i].is_prefix && l.v[last].is_prefix &&
           l.v[i].n == l.v[last].n && memcmp(l.v[i].key, l.v[last].key, l.v[i].n) == 0)
        i++;
    ob_printf(&x, "<KeyCount>%zu</KeyCount>", count);
    if (i < l.n && last != SIZE_MAX) {
        ob_printf(&x, "<IsTruncated>true</IsTruncated><NextContinuationToken>%016" PRIx64,
                  l.v[last].h);
        ob_xml(&x, l.v[last].key, l.v[last].n);
        ob_str(&x, "</NextContinuationToken>");
    } else {
        ob_str(&x, "<IsTruncated>false</IsTruncated>");
    }
    ob_str(&x, "</ListBucketResult>");
    respond_xml(c, 200, x.overflow ? 0 : x.len, false);
out:
    for (size_t j = 0; j < l.n; j++)
        free(l.v[j].key);
    free(l.v);
}

/* ---- RenameObject ---- */
static void handle_rename(struct conn *c)
{
    struct req *r = &c->rq;
    struct hdrval s = r->rename_source;
    if (!s.n) {
        respond_error(c, 400, "InvalidArgument", "RenameObject needs x-amz-rename-source.");
        return;
    }
    char src[BUCKET_MAX + KEY_MAX + 2];
    if (s.n >= sizeof(src)) {
        respond_error(c, 400, "InvalidArgument", "x-amz-rename-source is too long.");
        return;
    }
    size_t n = pct_decode(s.p, s.n, src);
    const char *sp = src;
    if (n && *sp == '/') {
        sp++;
        n--;
    }
    /* "bucket/key" (the same bucket), or a bare key */
    if (n > r->bucket_len && memcmp(sp, r->bucket, r->bucket_len) == 0 &&
        sp[r->bucket_len] == '/') {
        sp += r->bucket_len + 1;
        n -= r->bucket_len + 1;
    }
    if (n == 0 || sp[n - 1] == '/' || r->key[r->key_len - 1] == '/') {
        respond_error(c, 400, "InvalidArgument", "RenameObject does not rename keys ending "
                      "in \"/\".");
        return;
    }
    char sname[BUCKET_MAX + KEY_MAX + 2];
    memcpy(sname, r->bucket, r->bucket_len);
    sname[r->bucket_len] = '/';
    memcpy(sname + r->bucket_len + 1, sp, n);
    bool no_overwrite = r->if_none_match.n == 1 && r->if_none_match.p[0] == '*';
    int rc = objmap_rename(sname, r->bucket_len + 1 + n, r->name, r->name_len, no_overwrite);
    if (rc == 404) {
        respond_error(c, 404, "NoSuchKey", "The rename source does not exist.");
    } else if (rc == 412) {
        respond_error(c, 412, "PreconditionFailed",
                      "At least one of the pre-conditions you specified did not hold");
    } else if (rc) {
        respond_error(c, 500, "InternalError", "Out of memory.");
    } else {
        atomic_fetch_add(&g_xc.renames, 1);
        respond_empty(c, 200, false, NULL);
    }
}

/* ---- PutObject with x-amz-write-offset-bytes ---- */
static void handle_append(struct conn *c)
{
    struct req *r = &c->rq;
    uint64_t off;
    if (!parse_u64(r->write_offset.p, r->write_offset.n, &off)) {
        respond_error(c, 400, "InvalidArgument", "x-amz-write-offset-bytes is not a number.");
        return;
    }
    if (c->store_err == 507) {
        respond_error(c, 507, "InsufficientStorage", "Over the sink's --store limit.");
        return;
    }
    uint64_t len = c->storing ? c->sb.len : c->chunked ? c->decoded
                 : r->has_decoded_len ? r->decoded_len : r->content_length;
    uint64_t size = 0, ver = 0;
    int rc = objmap_append(r->name, r->name_len, off, len, &c->sb, &size, &ver);
    if (rc == 400) {
        respond_error(c, 400, "InvalidWriteOffset",
                      "The write offset value that you specified does not match the current "
                      "object size.");
        return;
    }
    if (rc) {
        respond_error(c, 507, "InsufficientStorage", "Over the sink's --store limit.");
        return;
    }
    atomic_fetch_add(&g_xc.appends, 1);
    char etag[48];
    object_etag(r->name, r->name_len, size, ver, 0, etag);
    respond_empty(c, 200, true, etag);
}

static void handle_stats(struct conn *c)
{
    struct ob x;
    xml_begin(&x, c->w);
    x.len = 0; /* plain text, not XML */
    ob_printf(&x,
              "create_session %" PRIu64 "\nreadonly %" PRIu64 "\nexpired %" PRIu64
              "\ninvalid %" PRIu64
              "\ndenied %" PRIu64 "\nrenames %" PRIu64 "\nappends %" PRIu64 "\ncopies %" PRIu64
              "\ndeletes %" PRIu64 "\nlists %" PRIu64 "\nputs %" PRIu64 "\ngets %" PRIu64 "\n",
              (uint64_t)g_xc.create_session, (uint64_t)g_xc.readonly, (uint64_t)g_xc.expired,
              (uint64_t)g_xc.invalid, (uint64_t)g_xc.denied, (uint64_t)g_xc.renames, (uint64_t)g_xc.appends,
              (uint64_t)g_xc.copies, (uint64_t)g_xc.deletes, (uint64_t)g_xc.lists,
              (uint64_t)g_xc.puts, (uint64_t)g_xc.gets);
    respond_xml(c, 200, x.len, false);
}

bool express_handle(struct conn *c)
{
    struct req *r = &c->rq;
    if (!g_opt.express)
        return false;
    if (r->bucket_len == 0) {
        if (r->q_sink_stats && r->method == M_GET) {
            handle_stats(c);
            return true;
        }
        if (r->q_sink_revoke && r->method == M_POST) {
            revoke_all();
            respond_empty(c, 200, false, NULL);
            return true;
        }
        return false;
    }
    if (r->key_len == 0 && r->method == M_GET && r->q_session) {
        create_session(c);
        return true;
    }
    if (r->key_len == 0 && (r->method == M_PUT || r->method == M_DELETE) && !r->q_delete) {
        /* CreateBucket, DeleteBucket: the control endpoint's, signed with the caller's own
         * credentials for s3express (no session) */
        struct hdrval akid, service;
        bool signs;
        if (r->s3session_token.n ||
            !parse_authorization(r->authorization, &akid, &service, "host", &signs) ||
            !hv_eq(service, "s3express")) {
            deny(c, "AccessDenied", "Bucket operations of directory buckets are signed with "
                 "your own credentials for s3express.", &g_xc.denied);
            return true;
        }
        return false;
    }
    if (!check_session(c))
        return true;
    if (r->key_len == 0 && r->method == M_GET && !r->q_location && !r->q_uploads) {
        handle_list(c);
        return true;
    }
    if (r->key_len == 0)
        return false;
    bool no_overwrite = r->if_none_match.n == 1 && r->if_none_match.p[0] == '*';
    switch (r->method) {
    case M_PUT:
        if (r->q_rename) {
            handle_rename(c);
            return true;
        }
        if (r->write_offset.n) {
            handle_append(c);
            return true;
        }
        if (r->copy_source.n)
            atomic_fetch_add(&g_xc.copies, 1);
        else if (!r->upload_id.n)
            atomic_fetch_add(&g_xc.puts, 1);
        break;
    case M_POST: /* CompleteMultipartUpload may carry If-None-Match */
        if (!r->upload_id.n)
            no_overwrite = false;
        break;
    case M_DELETE:
        if (!r->upload_id.n)
            atomic_fetch_add(&g_xc.deletes, 1);
        return false;
    case M_GET:
        atomic_fetch_add(&g_xc.gets, 1);
        return false;
    default:
        return false;
    }
    if (no_overwrite && !r->has_part_number) { /* PutObject or CompleteMultipartUpload */
        uint64_t size, ver;
        uint32_t nparts;
        if (object_size(r->name, r->name_len, &size, &nparts, &ver, NULL)) {
            respond_error(c, 412, "PreconditionFailed",
                          "At least one of the pre-conditions you specified did not hold");
            return true;
        }
    }
    return false;
}

void express_report(FILE *f)
{
    if (!g_opt.express)
        return;
    fprintf(f, "express: %" PRIu64 " sessions created, %" PRIu64 " expired and %" PRIu64
               " invalid tokens refused, %" PRIu64 " renames, %" PRIu64 " appends\n",
            (uint64_t)g_xc.create_session, (uint64_t)g_xc.expired, (uint64_t)g_xc.invalid,
            (uint64_t)g_xc.renames, (uint64_t)g_xc.appends);
}
