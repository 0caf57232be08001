/* S3 endpoint resolution (see endpoint.h). The decision tree mirrors the S3 endpoint rule set of
 * the AWS SDKs; the comments name the rule each branch implements. */
#include "s3/endpoint.h"
#include "s3/endpoint_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define OP "endpoint"

/* ---- partitions (botocore data/partitions.json) --------------------------------------- */

static const char *const aws_prefixes[] = {"us", "eu", "ap", "sa", "ca", "me", "af", "il", "mx",
                                           NULL};
static const char *const aws_regions[] = {
    "af-south-1",     "ap-east-1",      "ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
    "ap-south-1",     "ap-south-2",     "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
    "ap-southeast-4", "ap-southeast-5", "aws-global",     "ca-central-1",   "ca-west-1",
    "eu-central-1",   "eu-central-2",   "eu-north-1",     "eu-south-1",     "eu-south-2",
    "eu-west-1",      "eu-west-2",      "eu-west-3",      "il-central-1",   "me-central-1",
    "me-south-1",     "sa-east-1",      "us-east-1",      "us-east-2",      "us-west-1",
    "us-west-2",      NULL};
static const char *const cn_prefixes[] = {"cn", NULL};
static const char *const cn_regions[] = {"aws-cn-global", "cn-north-1", "cn-northwest-1", NULL};
static const char *const gov_prefixes[] = {"us-gov", NULL};
static const char *const gov_regions[] = {"aws-us-gov-global", "us-gov-east-1", "us-gov-west-1",
                                          NULL};
static const char *const iso_prefixes[] = {"us-iso", NULL};
static const char *const iso_regions[] = {"aws-iso-global", "us-iso-east-1", "us-iso-west-1",
                                          NULL};
static const char *const isob_prefixes[] = {"us-isob", NULL};
static const char *const isob_regions[] = {"aws-iso-b-global", "us-isob-east-1", NULL};
static const char *const isoe_prefixes[] = {"eu-isoe", NULL};
static const char *const isoe_regions[] = {"eu-isoe-west-1", NULL};
static const char *const isof_prefixes[] = {"us-isof", NULL};
static const char *const eusc_prefixes[] = {"eusc-de", NULL};
static const char *const no_regions[] = {NULL};

static const struct s3f__partition partitions[] = {
    {"aws", "amazonaws.com", "api.aws", true, true, aws_prefixes, aws_regions},
    {"aws-cn", "amazonaws.com.cn", "api.amazonwebservices.com.cn", true, true, cn_prefixes,
     cn_regions},
    {"aws-us-gov", "amazonaws.com", "api.aws", true, true, gov_prefixes, gov_regions},
    {"aws-iso", "c2s.ic.gov", "c2s.ic.gov", true, false, iso_prefixes, iso_regions},
    {"aws-iso-b", "sc2s.sgov.gov", "sc2s.sgov.gov", true, false, isob_prefixes, isob_regions},
    {"aws-iso-e", "cloud.adc-e.uk", "cloud.adc-e.uk", true, false, isoe_prefixes, isoe_regions},
    {"aws-iso-f", "csp.hci.ic.gov", "csp.hci.ic.gov", true, false, isof_prefixes, no_regions},
    {"aws-eusc", "amazonaws.eu", "amazonaws.eu", true, false, eusc_prefixes, no_regions},
};

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
}

/* ^PREFIX-\w+-\d+$ */
static bool region_matches(const char *region, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(region, prefix, n) != 0 || region[n] != '-')
        return false;
    const char *s = region + n + 1;
    const char *w = s;
    while (is_word_char(*s))
        s++;
    if (s == w || *s != '-')
        return false;
    s++;
    const char *d = s;
    while (*s >= '0' && *s <= '9')
        s++;
    return s != d && *s == '\0';
}

/* aws.partition(region): exact region first, then the regexes, else the aws partition. */
const struct s3f__partition *s3f__partition_of(const char *region) {
    for (size_t i = 0; i < S3F_ARRAY_LEN(partitions); i++)
        for (const char *const *r = partitions[i].regions; *r; r++)
            if (strcmp(*r, region) == 0)
                return &partitions[i];
    for (size_t i = 0; i < S3F_ARRAY_LEN(partitions); i++)
        for (const char *const *pr = partitions[i].prefixes; *pr; pr++)
            if (region_matches(region, *pr))
                return &partitions[i];
    return &partitions[0];
}

/* ---- host labels and bucket names ----------------------------------------------------- */
static bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* One label: 1-63 of [A-Za-z0-9-], not starting or ending with '-'. */
static bool valid_label(const char *s, size_t n) {
    if (n < 1 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

/* isValidHostLabel(value, allowSubDomains) */
bool s3f__valid_host_label(const char *s, bool allow_subdomains) {
    if (!allow_subdomains)
        return valid_label(s, strlen(s));
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (!valid_label(s, n))
            return false;
        if (!dot)
            return true;
        s = dot + 1;
    }
}

/* Dotted-quad IPv4 as the SDKs test it (each part 0-255, at most 3 digits). */
static bool is_ipv4(const char *s, size_t n) {
    int parts = 0;
    size_t i = 0;
    while (parts < 4) {
        size_t start = i;
        unsigned v = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && i - start < 3)
            v = v * 10 + (unsigned)(s[i++] - '0');
        if (i == start || v > 255 || (i < n && s[i] >= '0' && s[i] <= '9'))
            return false;
        parts++;
        if (parts < 4) {
            if (i >= n || s[i] != '.')
                return false;
            i++;
        }
    }
    return i == n;
}

bool s3f__bucket_dns_compatible(const char *name, bool allow_dots) {
    if (!name)
        return false;
    size_t n = strlen(name);
    if (n < 3 || is_ipv4(name, n))
        return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] >= 'A' && name[i] <= 'Z')
            return false;
    return s3f__valid_host_label(name, allow_dots);
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

bool s3f__bucket_name_valid(const char *name, bool strict) {
    if (!name)
        return false;
    size_t n = strlen(name);
    if (!strict && n >= 4 && s3f__arn_bucket_len(name, n) == n)
        return true;
    if (!strict) {
        if (n < 3 || n > 255)
            return false;
        for (size_t i = 0; i < n; i++)
            if (!is_alnum(name[i]) && name[i] != '.' && name[i] != '-' && name[i] != '_')
                return false;
        return true;
    }
    if (n < 3 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
            return false;
        if (c == '.' && i + 1 < n && name[i + 1] == '.')
            return false;
    }
    if (!is_alnum(name[0]) || !is_alnum(name[n - 1]) || is_ipv4(name, n))
        return false;
    static const char *const bad_prefix[] = {"xn--", "sthree-", "amzn-s3-demo-"};
    static const char *const bad_suffix[] = {"-s3alias", "--ol-s3", ".mrap", "--x-s3",
                                             "--table-s3"};
    for (size_t i = 0; i < S3F_ARRAY_LEN(bad_prefix); i++)
        if (strncmp(name, bad_prefix[i], strlen(bad_prefix[i])) == 0)
            return false;
    for (size_t i = 0; i < S3F_ARRAY_LEN(bad_suffix); i++)
        if (has_suffix(name, bad_suffix[i]))
            return false;
    return true;
}

/* ---- custom endpoint URL (the rules' parseURL) ---------------------------------------- */

static bool path_char_ok(unsigned char c) {
    /* RFC 3986 pchar plus '/', with '%' for already-encoded octets. */
    return is_alnum((char)c) || strchr("-._~!$&'()*+,;=:@/%", c) != NULL;
}

/* Parsed by libcurl's URL parser, the one that sends the requests (so the host and path
 * signed are those on the wire: curl removes dot segments and normalises IPv4 numbers and
 * ports), and held to the rules' stricter shape: http or https, a host of letters, digits,
 * '-', '.' and '_' (or an IPv6 literal), a port from 1, a path of RFC 3986 characters, no
 * query, fragment or user information.
 * 0: parsed. -1: invalid. -2: carries user information (never echoed). -3: out of memory. */
static int parse_url(const char *s, struct s3f__url *u) {
    memset(u, 0, sizeof(*u));
    int r = -1;
    char *scheme = NULL, *host = NULL, *zone = NULL, *port = NULL, *path = NULL;
    /* The rules' shape first (what curl would take, or forget when empty): "http://" or
     * "https://" then the host, no query or fragment, no user information (the URL is
     * then never echoed) */
    size_t sl = strncasecmp(s, "https://", 8) == 0  ? 8
                : strncasecmp(s, "http://", 7) == 0 ? 7
                                                    : 0;
    if (!sl || s[sl] == '/' || strpbrk(s, "?#"))
        return -1;
    size_t alen = strcspn(s + sl, "/");
    if (memchr(s + sl, '@', alen))
        return -2;
    if (alen && s[sl + alen - 1] == ':')
        return -1; /* an empty port */
    CURLU *h = curl_url();
    if (!h)
        return -3;
    CURLUcode uc = curl_url_set(h, CURLUPART_URL, s, 0);
    if (uc == CURLUE_OK)
        uc = curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
    if (uc == CURLUE_OK)
        uc = curl_url_get(h, CURLUPART_HOST, &host, 0);
    if (uc == CURLUE_OK)
        uc = curl_url_get(h, CURLUPART_PATH, &path, 0);
    if (uc == CURLUE_OUT_OF_MEMORY)
        r = -3;
    if (uc != CURLUE_OK)
        goto out;
    u->https = strcmp(scheme, "https") == 0;
    CURLUcode uz = curl_url_get(h, CURLUPART_ZONEID, &zone, 0);
    CURLUcode uo = curl_url_get(h, CURLUPART_PORT, &port, 0);
    if (uz == CURLUE_OUT_OF_MEMORY || uo == CURLUE_OUT_OF_MEMORY) {
        r = -3;
        goto out;
    }
    for (const char *q = path; *q; q++)
        if (!path_char_ok((unsigned char)*q))
            goto out;
    if (strcmp(path, "/") != 0 && strlen(path) < sizeof(u->path))
        s3f__strlcpy(u->path, path, sizeof(u->path)); /* "/" alone is no path */
    else if (strcmp(path, "/") != 0)
        goto out;

    /* host (as curl reads it) and port */
    char hostpart[300];
    size_t hlen = strlen(host);
    if (host[0] == '[') {
        if (zone) /* the zone of a link-local address, as written in a URL */
            snprintf(hostpart, sizeof(hostpart), "%.*s%%25%s]", (int)(hlen - 1), host, zone);
        else
            snprintf(hostpart, sizeof(hostpart), "%s", host);
        u->is_ip = true;
    } else {
        if (hlen == 0 || hlen >= sizeof(hostpart))
            goto out;
        for (size_t i = 0; i < hlen; i++)
            if (!(is_alnum(host[i]) || host[i] == '-' || host[i] == '.' || host[i] == '_'))
                goto out;
        memcpy(hostpart, host, hlen + 1);
        u->is_ip = is_ipv4(host, hlen);
    }
    bool default_port = true;
    if (port) {
        long v = strtol(port, NULL, 10);
        if (v < 1 || v > 65535)
            goto out;
        default_port = v == (u->https ? 443 : 80);
    }
    int n = snprintf(u->authority, sizeof(u->authority), "%s%s%s", hostpart, port ? ":" : "",
                     port ? port : "");
    if (n < 0 || (size_t)n >= sizeof(u->authority))
        goto out;
    snprintf(u->host_header, sizeof(u->host_header), "%s", default_port ? hostpart : u->authority);
    r = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(zone);
    curl_free(port);
    curl_free(path);
    curl_url_cleanup(h);
    return r;
}

/* ---- result assembly -------------------------------------------------------------------- */
enum s3f_status s3f__endpoint_set(struct s3f__endpoint *out, bool https, const char *authority,
                                  const char *host_header, const char *path, bool path_style,
                                  const char *signing_region) {
    struct s3f__buf b;
    s3f__buf_init(&b, 4096);
    enum s3f_status st = s3f__buf_appendf(&b, "%s://%s", https ? "https" : "http", authority);
    if (st)
        goto out;
    out->origin = s3f__strdup(b.data);
    /* never a trailing slash */
    size_t plen = strlen(path);
    while (plen && path[plen - 1] == '/')
        plen--;
    out->base_path = s3f__strndup(path, plen);
    if ((st = s3f__buf_append(&b, path, plen)))
        goto out;
    out->url = s3f__buf_take(&b);
    out->host = s3f__strdup(host_header);
    out->signing_region = s3f__strdup(signing_region);
    out->signing_name = s3f__strdup("s3");
    out->path_style = path_style;
    out->tls = https;
    if (!out->origin || !out->base_path || !out->url || !out->host || !out->signing_region ||
        !out->signing_name)
        st = S3F_ERR_NO_MEMORY;
out:
    s3f__buf_cleanup(&b);
    return st;
}

/* An AWS host: `host` is the whole host name, https, default port. */
enum s3f_status s3f__endpoint_set_aws(struct s3f__endpoint *out, const char *host, const char *path,
                                      bool path_style, const char *signing_region) {
    return s3f__endpoint_set(out, true, host, host, path, path_style, signing_region);
}

/* ---- S3 Express One Zone (AWS, "Directory bucket naming rules" and "Regional and Zonal
 * endpoints for directory buckets"; the rule set's S3Express branch) ---- */
bool s3f__bucket_is_directory(const char *bucket) {
    return bucket && (has_suffix(bucket, "--x-s3") || has_suffix(bucket, "--xa-s3"));
}

int s3f_bucket_is_directory(const char *bucket) {
    return s3f__bucket_is_directory(bucket);
}

bool s3f__directory_bucket_zone(const char *bucket, char *zone, size_t cap) {
    if (!s3f__bucket_is_directory(bucket))
        return false;
    size_t n = strlen(bucket) - (has_suffix(bucket, "--x-s3") ? 6 : 7);
    /* the zone id is the last "--"-separated field before the suffix: use1-az4, usw2-az12,
     * use1-lax1-az1 (Local Zones); at least one '-', a-z 0-9 and '-' only */
    size_t i = n;
    while (i >= 2 && !(bucket[i - 1] == '-' && bucket[i - 2] == '-'))
        i--;
    if (i < 3) /* no base name before it */
        return false;
    size_t zl = n - i;
    if (zl < 3 || zl >= cap || bucket[i] == '-' || bucket[n - 1] == '-' ||
        !memchr(bucket + i, '-', zl))
        return false;
    for (size_t j = i; j < n; j++) {
        char c = bucket[j];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    memcpy(zone, bucket + i, zl);
    zone[zl] = '\0';
    return true;
}

/* The signing name s3express (the control endpoint and the zonal one alike) and whether
 * requests are signed with a session's credentials (sigv4-s3express). */
static enum s3f_status express_mark(struct s3f__endpoint *out, bool session) {
    free(out->signing_name);
    out->signing_name = s3f__strdup("s3express");
    out->s3express = true;
    out->s3express_session = session;
    return out->signing_name ? S3F_OK : S3F_ERR_NO_MEMORY;
}

/* An AWS endpoint of S3 Express: the zonal endpoint BUCKET.s3express[-fips]-ZONE
 * [.dualstack].REGION.SUFFIX (virtual-hosted only), or the regional control endpoint
 * s3express-control[-fips][.dualstack].REGION.SUFFIX[/BUCKET] (path style).
 * S3F_ERR_INVALID_ARGUMENT: no zone id in the bucket's name. */
static enum s3f_status express_aws(const struct s3f__endpoint_params *p, const char *bucket,
                                   const struct s3f__partition *part, const char *region,
                                   struct s3f__endpoint *out) {
    char host[512], zone[64];
    const char *fips = p->use_fips ? "-fips" : "";
    const char *ds = p->use_dual_stack ? ".dualstack" : "";
    enum s3f_status st;
    if (p->use_s3express_control_endpoint) {
        snprintf(host, sizeof(host), "s3express-control%s%s.%s.%s", fips, ds, region,
                 part->dns_suffix);
        struct s3f__buf path;
        s3f__buf_init(&path, 4096);
        st = S3F_OK;
        if (bucket && !(st = s3f__buf_append(&path, "/", 1)))
            st = s3f__uri_encode(&path, bucket, strlen(bucket), false);
        if (!st)
            st = s3f__endpoint_set_aws(out, host, bucket ? path.data : "", bucket != NULL, region);
        s3f__buf_cleanup(&path);
    } else {
        if (!s3f__directory_bucket_zone(bucket, zone, sizeof(zone)))
            return S3F_ERR_INVALID_ARGUMENT;
        snprintf(host, sizeof(host), "%s.s3express%s-%s%s.%s.%s", bucket, fips, zone, ds,
                 region, part->dns_suffix);
        st = s3f__endpoint_set_aws(out, host, "", false, region);
    }
    if (!st)
        st = express_mark(out, bucket && !p->use_s3express_control_endpoint &&
                                   !p->disable_s3express_session_auth);
    if (st)
        s3f__endpoint_cleanup(out);
    return st;
}

static enum s3f_status oom(struct s3f_error *err, const char *resource) {
    return s3f__error_set(err, S3F_ERR_NO_MEMORY, OP, resource, "out of memory");
}

/* The host of a path-style or bucketless request to AWS's s3 endpoint: FIPS and dual-stack
 * variants in r1 (the signing region), the legacy global endpoint, else the region's. */
static void s3_host(char *host, size_t len, const struct s3f__endpoint_params *p,
                    const char *r1, const char *region, const char *sd, bool legacy_global) {
    if (p->use_fips && p->use_dual_stack)
        snprintf(host, len, "s3-fips.dualstack.%s.%s", r1, sd);
    else if (p->use_fips)
        snprintf(host, len, "s3-fips.%s.%s", r1, sd);
    else if (p->use_dual_stack)
        snprintf(host, len, "s3.dualstack.%s.%s", r1, sd);
    else if (legacy_global)
        snprintf(host, len, "s3.%s", sd);
    else
        snprintf(host, len, "s3.%s.%s", region, sd);
}

enum s3f_status s3f__endpoint_resolve(const struct s3f__endpoint_params *p,
                                      struct s3f__endpoint *out, struct s3f_error *err) {
    enum s3f_status st_express;
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no output endpoint");
    memset(out, 0, sizeof(*out));
    if (!p)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, NULL, "no endpoint parameters");

    const char *bucket = p->bucket && *p->bucket ? p->bucket : NULL;
    const char *region = p->region;
    char resource_buf[300];
    const char *resource = NULL; /* err->resource: the bucket, when there is one */
    if (bucket) {
        snprintf(resource_buf, sizeof(resource_buf), "s3://%s", bucket);
        resource = resource_buf;
    }

    if (!region || !*region)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "A region must be set when sending requests to S3.");
    if (bucket && strlen(bucket) > 255)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "bucket name longer than 255 bytes");

    struct s3f__url u;
    bool custom = p->endpoint_url != NULL;
    if (custom) {
        int r = parse_url(p->endpoint_url, &u);
        if (r == -3)
            return oom(err, resource);
        if (r == -2)
            return s3f__error_set(err, S3F_ERR_INVALID_URI, OP, resource,
                                  "Custom endpoint must not contain user information "
                                  "(user:password@); pass credentials separately");
        if (r != 0)
            return s3f__error_set(err, S3F_ERR_INVALID_URI, OP, resource,
                                  "Custom endpoint `%.300s` was not a valid URI (expected "
                                  "http[s]://host[:port][/path], without query or fragment)",
                                  p->endpoint_url);
    }

    /* Option conflicts (the rule set checks these before anything else). */
    if (p->accelerate && p->use_fips)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "Accelerate cannot be used with FIPS");
    if (p->use_dual_stack && custom)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "Cannot set dual-stack in combination with a custom endpoint.");
    if (custom && p->use_fips)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "A custom endpoint cannot be combined with FIPS");
    if (custom && p->accelerate)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "A custom endpoint cannot be combined with S3 Accelerate");
    const struct s3f__partition *part = s3f__partition_of(region);
    if (p->use_fips && (strcmp(part->id, "aws-cn") == 0 || !part->supports_fips))
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "Partition does not support FIPS");

    if (strlen(region) > 128)
        goto bad_region;
    bool express = bucket && s3f__bucket_is_directory(bucket);
    if (express || p->use_s3express_control_endpoint) {
        if (express && !s3f__bucket_dns_compatible(bucket, false))
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                                  "S3Express bucket name is not a valid virtual hostable name.");
        if (p->accelerate)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                                  "S3Express does not support S3 Accelerate.");
        if (!custom) {
            if (!s3f__valid_host_label(region, false))
                goto bad_region;
            st_express = express_aws(p, bucket, part, region, out);
            if (st_express == S3F_ERR_INVALID_ARGUMENT)
                return s3f__error_set(err, st_express, OP, resource,
                                      "Unrecognized S3Express bucket name format.");
            if (st_express == S3F_ERR_NO_MEMORY)
                return oom(err, resource);
            return S3F_OK;
        }
        /* a custom endpoint wins: addressed as any bucket there, signed for s3express */
    }
    /* S3 on Outposts bucket aliases, then ARN buckets (endpoint_arn.c); an ARN is never a
     * virtual-hostable name, so testing it here keeps the rules' order. */
    if (bucket && s3f__bucket_is_outposts_alias(bucket))
        return s3f__endpoint_resolve_outposts_alias(p, bucket, custom ? &u : NULL, out,
                                                    resource, err);
    if (bucket) {
        int r = s3f__endpoint_resolve_arn(p, bucket, custom ? &u : NULL, out, resource, err);
        if (r != S3F__ENDPOINT_NOT_ARN)
            return (enum s3f_status)r;
    }
    if (!bucket && p->use_object_lambda_endpoint)
        return s3f__endpoint_resolve_object_lambda(p, custom ? &u : NULL, out, resource, err);
    bool global = strcmp(region, "aws-global") == 0;
    const char *r1 = global ? "us-east-1" : region; /* region in FIPS/dual-stack hosts */
    /* The legacy global endpoint s3.amazonaws.com: aws-global, or us-east-1 when asked. */
    bool legacy_global = global || (p->use_global_endpoint && strcmp(region, "us-east-1") == 0);
    const char *sd = part->dns_suffix;
    char host[512];
    enum s3f_status st;

    if (!bucket) {
        if (!s3f__valid_host_label(region, true))
            goto bad_region;
        if (custom)
            st = s3f__endpoint_set(out, u.https, u.authority, u.host_header, u.path, false, r1);
        else {
            s3_host(host, sizeof(host), p, r1, region, sd, legacy_global);
            st = s3f__endpoint_set_aws(out, host, "", false, r1);
        }
        goto done;
    }

    /* Virtual-hosted style: a DNS-compatible bucket without dots. */
    if (!p->force_path_style && s3f__bucket_dns_compatible(bucket, false)) {
        if (!s3f__valid_host_label(region, false))
            goto bad_region;
        if (p->accelerate && strcmp(part->id, "aws-cn") == 0)
            return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                                  "S3 Accelerate cannot be used in this region");
        if (custom) {
            if (u.is_ip) { /* an IP address cannot take the bucket as a subdomain */
                /* normalizedPath (the path ending in '/') + bucket */
                char path[1400];
                size_t pl = strlen(u.path);
                snprintf(path, sizeof(path), "%s%s%s", u.path,
                         pl && u.path[pl - 1] == '/' ? "" : "/", bucket);
                st = s3f__endpoint_set(out, u.https, u.authority, u.host_header, path, true, r1);
            } else {
                char auth[600], hh[600];
                snprintf(auth, sizeof(auth), "%s.%s", bucket, u.authority);
                snprintf(hh, sizeof(hh), "%s.%s", bucket, u.host_header);
                st = s3f__endpoint_set(out, u.https, auth, hh, u.path, false, r1);
            }
            goto done;
        }
        if (p->use_fips && p->use_dual_stack)
            snprintf(host, sizeof(host), "%s.s3-fips.dualstack.%s.%s", bucket, r1, sd);
        else if (p->use_fips)
            snprintf(host, sizeof(host), "%s.s3-fips.%s.%s", bucket, r1, sd);
        else if (p->accelerate && p->use_dual_stack)
            snprintf(host, sizeof(host), global ? "%s.s3-accelerate.dualstack.us-east-1.%s"
                                                : "%s.s3-accelerate.dualstack.%s",
                     bucket, sd);
        else if (p->use_dual_stack)
            snprintf(host, sizeof(host), "%s.s3.dualstack.%s.%s", bucket, r1, sd);
        else if (p->accelerate)
            snprintf(host, sizeof(host), "%s.s3-accelerate.%s", bucket, sd);
        else if (legacy_global)
            snprintf(host, sizeof(host), "%s.s3.%s", bucket, sd);
        else
            snprintf(host, sizeof(host), "%s.s3.%s.%s", bucket, region, sd);
        st = s3f__endpoint_set_aws(out, host, "", false, r1);
        goto done;
    }

    /* Virtual-hosted style on a plain-http custom endpoint also takes buckets with dots
     * (no TLS certificate to match). s3flash keeps IP endpoints path-style here too. */
    if (custom && !u.https && !u.is_ip && !p->force_path_style &&
        s3f__bucket_dns_compatible(bucket, true)) {
        if (!s3f__valid_host_label(region, false))
            goto bad_region;
        char auth[600], hh[600];
        snprintf(auth, sizeof(auth), "%s.%s", bucket, u.authority);
        snprintf(hh, sizeof(hh), "%s.%s", bucket, u.host_header);
        st = s3f__endpoint_set(out, u.https, auth, hh, u.path, false, r1);
        goto done;
    }

    /* Path style: the URI-encoded bucket is the first path segment. */
    if (p->accelerate)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                              "Path-style addressing cannot be used with S3 Accelerate");
    if (!s3f__valid_host_label(region, false))
        goto bad_region;
    {
        struct s3f__buf path;
        s3f__buf_init(&path, 4096);
        if (custom) {
            size_t pl = strlen(u.path);
            st = s3f__buf_append(&path, u.path, pl);
            if (!st && (pl == 0 || u.path[pl - 1] != '/'))
                st = s3f__buf_append(&path, "/", 1);
        } else {
            st = s3f__buf_append(&path, "/", 1);
        }
        if (!st)
            st = s3f__uri_encode(&path, bucket, strlen(bucket), false);
        if (st) {
            s3f__buf_cleanup(&path);
            goto done;
        }
        if (custom) {
            st = s3f__endpoint_set(out, u.https, u.authority, u.host_header, path.data, true, r1);
        } else {
            s3_host(host, sizeof(host), p, r1, region, sd, legacy_global);
            st = s3f__endpoint_set_aws(out, host, path.data, true, r1);
        }
        s3f__buf_cleanup(&path);
    }

done:
    if (!st && (express || p->use_s3express_control_endpoint))
        st = express_mark(out, express && !p->use_s3express_control_endpoint &&
                                   !p->disable_s3express_session_auth);
    if (st) {
        s3f__endpoint_cleanup(out);
        if (st == S3F_ERR_NO_MEMORY)
            return oom(err, resource);
        return s3f__error_set(err, st, OP, resource, "cannot build the endpoint URL");
    }
    return S3F_OK;

bad_region:
    return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource,
                          "Invalid region: region was not a valid DNS name. (region: \"%.100s\")",
                          region);
}

void s3f__endpoint_cleanup(struct s3f__endpoint *e) {
    if (!e)
        return;
    free(e->url);
    free(e->origin);
    free(e->base_path);
    free(e->host);
    free(e->signing_region);
    free(e->signing_name);
    free(e->signing_region_set);
    memset(e, 0, sizeof(*e));
}

/* Object URLs: keys up to 1024 bytes encode to 3 KiB; queries (presigned) are a few KiB. */
#define OBJECT_URL_MAX ((size_t)64 << 10)

static enum s3f_status append_object_path(struct s3f__buf *b, const struct s3f__endpoint *e,
                                          const char *key) {
    const char *bp = e->base_path ? e->base_path : "";
    if (!key || !*key)
        return s3f__buf_appends(b, *bp ? bp : "/");
    enum s3f_status st = s3f__buf_appends(b, bp);
    if (!st)
        st = s3f__buf_append(b, "/", 1);
    if (!st)
        st = s3f__uri_encode(b, key, strlen(key), true);
    return st;
}

char *s3f__endpoint_object_path(const struct s3f__endpoint *e, const char *key) {
    if (!e || !e->origin)
        return NULL;
    struct s3f__buf b;
    s3f__buf_init(&b, OBJECT_URL_MAX);
    if (append_object_path(&b, e, key)) {
        s3f__buf_cleanup(&b);
        return NULL;
    }
    return s3f__buf_take(&b);
}

char *s3f__endpoint_object_url(const struct s3f__endpoint *e, const char *key,
                               const char *query) {
    if (!e || !e->origin)
        return NULL;
    struct s3f__buf b;
    s3f__buf_init(&b, OBJECT_URL_MAX);
    enum s3f_status st = s3f__buf_appends(&b, e->origin);
    if (!st)
        st = append_object_path(&b, e, key);
    if (!st && query && *query) {
        st = s3f__buf_append(&b, "?", 1);
        if (!st)
            st = s3f__buf_appends(&b, query);
    }
    if (st) {
        s3f__buf_cleanup(&b);
        return NULL;
    }
    return s3f__buf_take(&b);
}
