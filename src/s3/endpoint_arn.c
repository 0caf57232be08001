/* ARN buckets, S3 on Outposts bucket aliases and the Object Lambda endpoint: the branches of
 * the S3 endpoint rule set that start at aws.parseArn(Bucket), at the "--op-s3" alias suffix
 * and at UseObjectLambdaEndpoint (see endpoint.h). The order of the checks and the text of
 * every error are the rule set's: the endpoint-rules suite in tests/vectors/s3 checks both.
 *
 *   arn:PARTITION:s3:REGION:ACCOUNT:accesspoint/NAME     NAME-ACCOUNT.s3-accesspoint[-fips]
 *                                                        [.dualstack].REGION.SUFFIX, SigV4 s3
 *   arn:PARTITION:s3::ACCOUNT:accesspoint/ALIAS.mrap     ALIAS.accesspoint.s3-global.SUFFIX,
 *                                                        SigV4a s3, region set "*"
 *   arn:PARTITION:s3-object-lambda:REGION:ACCOUNT:accesspoint/NAME
 *                                                        NAME-ACCOUNT.s3-object-lambda[-fips]
 *                                                        .REGION.SUFFIX, SigV4 s3-object-lambda
 *   arn:PARTITION:s3-outposts:REGION:ACCOUNT:outpost/OUTPOST/accesspoint/NAME
 *                                                        NAME-ACCOUNT.OUTPOST.s3-outposts
 *                                                        .REGION.SUFFIX, SigV4a s3-outposts
 *                                                        (SigV4 in REGION as the fallback)
 * ':' and '/' both separate the resource's components. A custom endpoint keeps its scheme
 * (https only for Outposts) and takes the access point as a host prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/endpoint_internal.h"

#define OP "endpoint"
#define ARN_PARTS_MAX 8 /* resource components looked at: resourceId[0..4] */

/* aws.parseArn: "arn:" partition ":" service ":" region ":" account ":" resource, with
 * partition, service and resource non-empty; the resource split on ':' and '/'. The fields
 * point into `buf`, a copy of the ARN. */
struct arn {
    char buf[300];
    const char *partition, *service, *region, *account;
    const char *res[ARN_PARTS_MAX];
    size_t n_res;
};

static bool parse_arn(const char *s, struct arn *a) {
    memset(a, 0, sizeof(*a));
    if (strncmp(s, "arn:", 4) != 0 || strlen(s) >= sizeof(a->buf))
        return false;
    memcpy(a->buf, s, strlen(s) + 1);
    char *f[6];
    char *p = a->buf;
    for (int i = 0; i < 6; i++) {
        f[i] = p;
        if (i == 5)
            break;
        p = strchr(p, ':');
        if (!p)
            return false;
        *p++ = '\0';
    }
    if (!*f[1] || !*f[2] || !*f[5])
        return false;
    a->partition = f[1];
    a->service = f[2];
    a->region = f[3];
    a->account = f[4];
    for (p = f[5]; a->n_res < ARN_PARTS_MAX;) {
        a->res[a->n_res++] = p;
        p += strcspn(p, ":/");
        if (!*p)
            break;
        *p++ = '\0';
    }
    return true;
}

/* resourceId[i], or NULL when the resource has fewer components. */
static const char *res_at(const struct arn *a, size_t i) {
    return i < a->n_res ? a->res[i] : NULL;
}

/* An error of the rules: S3F_ERR_INVALID_ARGUMENT with their text (err and resource in
 * scope). */
#define FAIL(...) s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, OP, resource, __VA_ARGS__)

/* Build the endpoint: an AWS host (`u` NULL), or the prefix on the custom endpoint's
 * authority. `force_https`: the Outposts rules always write https. */
static enum s3f_status set_prefixed(struct s3f__endpoint *out, const char *prefix,
                                    const char *aws_host, const struct s3f__url *u,
                                    bool keep_path, bool force_https, const char *signing_name,
                                    const char *signing_region, bool sigv4a,
                                    struct s3f_error *err, const char *resource) {
    enum s3f_status st;
    if (u) {
        char auth[700], hh[700];
        snprintf(auth, sizeof(auth), "%s.%s", prefix, u->authority);
        snprintf(hh, sizeof(hh), "%s.%s", prefix, u->host_header);
        st = s3f__endpoint_set(out, force_https || u->https, auth, hh, keep_path ? u->path : "",
                               false, signing_region);
    } else {
        st = s3f__endpoint_set_aws(out, aws_host, "", false, signing_region);
    }
    if (!st) {
        free(out->signing_name);
        out->signing_name = s3f__strdup(signing_name);
        out->arn = true;
        if (sigv4a)
            out->signing_region_set = s3f__strdup("*");
        if (!out->signing_name || (sigv4a && !out->signing_region_set))
            st = S3F_ERR_NO_MEMORY;
    }
    if (st) {
        s3f__endpoint_cleanup(out);
        return s3f__error_set(err, st, OP, resource, "out of memory");
    }
    return S3F_OK;
}

#define NO_AP_NAME                                                                              \
    "Invalid ARN: Expected a resource of the format `accesspoint:<accesspoint name>` but no "   \
    "name was provided"
#define SINGLE_COMPONENT                                                                        \
    "Invalid ARN: The ARN may only contain a single resource component after `accesspoint`."

/* The checks the access point, Object Lambda and Outposts branches share, in the rules'
 * order: (access points: DisableAccessPoints, one resource component after the name)
 * UseArnRegion, the partitions, the ARN's region (Object Lambda: its account is set). */
static enum s3f_status check_region_account(const struct s3f__endpoint_params *p,
                                            const char *bucket, const struct arn *a,
                                            const struct s3f__partition **bucket_part,
                                            bool access_point, bool check_missing_account,
                                            struct s3f_error *err, const char *resource) {
    if (access_point && p->disable_access_points)
        return FAIL("Access points are not supported for this operation");
    if (access_point && res_at(a, 2))
        return FAIL(SINGLE_COMPONENT);
    if (p->reject_arn_region && strcmp(a->region, p->region) != 0)
        return FAIL("Invalid configuration: region from ARN `%s` does not match client region "
                    "`%s` and UseArnRegion is `false`",
                    a->region, p->region);
    const struct s3f__partition *bp = s3f__partition_of(a->region);
    const struct s3f__partition *cp = s3f__partition_of(p->region);
    if (strcmp(bp->id, cp->id) != 0)
        return FAIL("Client was configured for partition `%s` but ARN (`%s`) has `%s`",
                    cp->id, bucket, bp->id);
    if (!s3f__valid_host_label(a->region, true))
        return FAIL("Invalid region in ARN: `%s` (invalid DNS name)", a->region);
    if (check_missing_account && !*a->account)
        return FAIL("Invalid ARN: Missing account id");
    *bucket_part = bp;
    return S3F_OK;
}

static enum s3f_status bad_account(const struct arn *a, struct s3f_error *err,
                                   const char *resource) {
    return FAIL("Invalid ARN: The account id may only contain a-z, A-Z, 0-9 and `-`. Found: `%s`",
                a->account);
}

static enum s3f_status bad_ap_name(const char *name, struct s3f_error *err,
                                   const char *resource) {
    return FAIL("Invalid ARN: The access point name may only contain a-z, A-Z, 0-9 and `-`. "
                "Found: `%s`",
                name);
}


static enum s3f_status object_lambda_arn(const struct s3f__endpoint_params *p, const char *bucket,
                                         const struct arn *a, const struct s3f__url *u,
                                         struct s3f__endpoint *out, const char *resource,
                                         struct s3f_error *err) {
    const char *type = a->res[0];
    if (strcmp(type, "accesspoint") != 0)
        return FAIL("Invalid ARN: Object Lambda ARNs only support `accesspoint` arn types, but "
                    "found: `%s`",
                    type);
    const char *name = res_at(a, 1);
    if (!name || !*name)
        return FAIL(NO_AP_NAME);
    if (p->use_dual_stack)
        return FAIL("S3 Object Lambda does not support Dual-stack");
    if (p->accelerate)
        return FAIL("S3 Object Lambda does not support S3 Accelerate");
    if (!*a->region)
        return FAIL("Invalid ARN: bucket ARN is missing a region");
    const struct s3f__partition *bp;
    enum s3f_status st = check_region_account(p, bucket, a, &bp, true, true, err, resource);
    if (st)
        return st;
    if (!s3f__valid_host_label(a->account, false))
        return bad_account(a, err, resource);
    if (!s3f__valid_host_label(name, false))
        return bad_ap_name(name, err, resource);
    char prefix[300], host[600];
    snprintf(prefix, sizeof(prefix), "%s-%s", name, a->account);
    snprintf(host, sizeof(host), "%s.s3-object-lambda%s.%s.%s", prefix,
             p->use_fips ? "-fips" : "", a->region, bp->dns_suffix);
    return set_prefixed(out, prefix, host, u, true, false, "s3-object-lambda", a->region, false,
                        err, resource);
}

/* arn:...:accesspoint/NAME with a region: an S3 access point. */
static enum s3f_status access_point_arn(const struct s3f__endpoint_params *p, const char *bucket,
                                        const struct arn *a, const char *name,
                                        const struct s3f__url *u, struct s3f__endpoint *out,
                                        const char *resource, struct s3f_error *err) {
    const struct s3f__partition *bp;
    enum s3f_status st = check_region_account(p, bucket, a, &bp, true, false, err, resource);
    if (st)
        return st;
    if (strcmp(a->service, "s3") != 0)
        return FAIL("Invalid ARN: The ARN was not for the S3 service, found: %s",
                    a->service);
    if (!s3f__valid_host_label(a->account, false))
        return bad_account(a, err, resource);
    if (!s3f__valid_host_label(name, false))
        return bad_ap_name(name, err, resource);
    if (p->accelerate)
        return FAIL("Access Points do not support S3 Accelerate");
    char prefix[300], host[600];
    snprintf(prefix, sizeof(prefix), "%s-%s", name, a->account);
    snprintf(host, sizeof(host), "%s.s3-accesspoint%s%s.%s.%s", prefix,
             p->use_fips ? "-fips" : "", p->use_dual_stack ? ".dualstack" : "", a->region,
             bp->dns_suffix);
    /* a custom endpoint is only reached without FIPS and dual-stack (checked earlier) */
    return set_prefixed(out, prefix, host, u, true, false, "s3", a->region, false, err,
                        resource);
}

/* arn:PARTITION:s3::ACCOUNT:accesspoint/ALIAS (no region): a Multi-Region Access Point. */
static enum s3f_status mrap_arn(const struct s3f__endpoint_params *p, const struct arn *a,
                                const char *name, struct s3f__endpoint *out,
                                const char *resource, struct s3f_error *err) {
    if (!s3f__valid_host_label(name, true))
        return FAIL("Invalid Access Point Name");
    if (p->use_dual_stack)
        return FAIL("S3 MRAP does not support dual-stack");
    if (p->use_fips)
        return FAIL("S3 MRAP does not support FIPS");
    if (p->accelerate)
        return FAIL("S3 MRAP does not support S3 Accelerate");
    if (p->disable_mrap)
        return FAIL("Invalid configuration: Multi-Region Access Point ARNs are disabled.");
    const struct s3f__partition *cp = s3f__partition_of(p->region);
    if (strcmp(cp->id, a->partition) != 0)
        return FAIL("Client was configured for partition `%s` but bucket referred to partition "
                    "`%s`",
                    cp->id, a->partition);
    char host[600];
    snprintf(host, sizeof(host), "%s.accesspoint.s3-global.%s", name, cp->dns_suffix);
    /* a custom endpoint does not apply to MRAP in the rules */
    return set_prefixed(out, NULL, host, NULL, false, false, "s3", "*", true, err, resource);
}

static enum s3f_status outposts_arn(const struct s3f__endpoint_params *p, const char *bucket,
                                    const struct arn *a, const struct s3f__url *u,
                                    struct s3f__endpoint *out, const char *resource,
                                    struct s3f_error *err) {
    if (p->use_dual_stack)
        return FAIL("S3 Outposts does not support Dual-stack");
    if (p->use_fips)
        return FAIL("S3 Outposts does not support FIPS");
    if (p->accelerate)
        return FAIL("S3 Outposts does not support S3 Accelerate");
    if (res_at(a, 4))
        return FAIL("Invalid Arn: Outpost Access Point ARN contains sub resources");
    const char *outpost = res_at(a, 1);
    if (!outpost)
        return FAIL("Invalid ARN: The Outpost Id was not set");
    if (!s3f__valid_host_label(outpost, false))
        return FAIL("Invalid ARN: The outpost Id may only contain a-z, A-Z, 0-9 and `-`. Found: "
                    "`%s`",
                    outpost);
    const struct s3f__partition *bp;
    enum s3f_status st = check_region_account(p, bucket, a, &bp, false, false, err, resource);
    if (st)
        return st;
    if (!s3f__valid_host_label(a->account, false))
        return bad_account(a, err, resource);
    const char *type = res_at(a, 2), *name = res_at(a, 3);
    if (!type)
        return FAIL("Invalid ARN: Expected a 4-component resource");
    if (!name)
        return FAIL("Invalid ARN: expected an access point name");
    if (strcmp(type, "accesspoint") != 0)
        return FAIL("Expected an outpost type `accesspoint`, found %s", type);
    if (!s3f__valid_host_label(name, false))
        return bad_ap_name(name, err, resource);
    char prefix[400], host[700];
    snprintf(prefix, sizeof(prefix), "%s-%s.%s", name, a->account, outpost);
    snprintf(host, sizeof(host), "%s.s3-outposts.%s.%s", prefix, a->region, bp->dns_suffix);
    return set_prefixed(out, prefix, host, u, false, true, "s3-outposts", a->region, true, err,
                        resource);
}

int s3f__endpoint_resolve_arn(const struct s3f__endpoint_params *p, const char *bucket,
                              const struct s3f__url *u, struct s3f__endpoint *out,
                              const char *resource, struct s3f_error *err) {
    struct arn a;
    bool parsed = parse_arn(bucket, &a);
    if (!parsed) {
        if (strncmp(bucket, "arn:", 4) == 0)
            return FAIL("Invalid ARN: `%s` was not a valid ARN", bucket);
        return S3F__ENDPOINT_NOT_ARN;
    }
    if (p->force_path_style)
        return FAIL("Path-style addressing cannot be used with ARN buckets");
    const char *type = a.res[0];
    if (!*type)
        return FAIL("Invalid ARN: No ARN type specified");
    if (strcmp(a.service, "s3-object-lambda") == 0)
        return object_lambda_arn(p, bucket, &a, u, out, resource, err);
    if (strcmp(type, "accesspoint") == 0) {
        const char *name = res_at(&a, 1);
        if (!name || !*name)
            return FAIL(NO_AP_NAME);
        if (*a.region)
            return access_point_arn(p, bucket, &a, name, u, out, resource, err);
        return mrap_arn(p, &a, name, out, resource, err);
    }
    if (strcmp(a.service, "s3-outposts") == 0)
        return outposts_arn(p, bucket, &a, u, out, resource, err);
    return FAIL("Invalid ARN: Unrecognized format: %s (type: %s)", bucket, type);
}

/* ---- ARN buckets in s3:// URIs ------------------------------------------------------------ */
size_t s3f__arn_bucket_len(const char *s, size_t len) {
    if (!s || len < 4 || strncmp(s, "arn:", 4) != 0)
        return 0;
    size_t i = 0;
    for (int colons = 0; colons < 5; i++) { /* the resource starts after the 5th ':' */
        if (i >= len || s[i] == '/')
            return 0;
        if (s[i] == ':')
            colons++;
    }
    /* aws-cli's forms: accesspoint[:/]NAME, outpost[:/]ID[:/]accesspoint[:/]NAME; the last
     * component runs to the next '/' */
    int parts = len - i >= 8 && strncmp(s + i, "outpost", 7) == 0 &&
                        (s[i + 7] == ':' || s[i + 7] == '/')
                    ? 4
                    : 2;
    for (int k = 1; k < parts && i < len; i++)
        if (s[i] == ':' || s[i] == '/')
            k++;
    while (i < len && s[i] != '/')
        i++;
    if (i > 255)
        return 0;
    for (size_t j = 0; j < i; j++)
        if ((unsigned char)s[j] <= 0x20 || (unsigned char)s[j] >= 0x7f)
            return 0;
    return i;
}

/* ---- S3 on Outposts bucket aliases: NAME...-[oe]OUTPOSTID(17)...REGION(4)...--op-s3 ------ */
bool s3f__bucket_is_outposts_alias(const char *bucket) {
    if (!bucket)
        return false;
    size_t n = strlen(bucket);
    if (n < 50 || strcmp(bucket + n - 7, "--op-s3") != 0)
        return false;
    for (size_t i = 0; i < n; i++) /* the rules' substring() refuses non-ASCII input */
        if ((unsigned char)bucket[i] >= 0x80)
            return false;
    return true;
}

enum s3f_status s3f__endpoint_resolve_outposts_alias(const struct s3f__endpoint_params *p,
                                                     const char *bucket,
                                                     const struct s3f__url *u,
                                                     struct s3f__endpoint *out,
                                                     const char *resource,
                                                     struct s3f_error *err) {
    size_t n = strlen(bucket);
    char hw = bucket[n - 50], outpost[18], region_prefix[5];
    memcpy(outpost, bucket + n - 49, 17);
    outpost[17] = '\0';
    memcpy(region_prefix, bucket + n - 12, 4);
    region_prefix[4] = '\0';
    if (!s3f__valid_host_label(outpost, false))
        return FAIL("Invalid ARN: The outpost Id must only contain a-z, A-Z, 0-9 and `-`.");
    if (!s3f__bucket_dns_compatible(bucket, false))
        return FAIL("Invalid Outposts Bucket alias - it must be a valid bucket name.");
    if (hw != 'e' && hw != 'o') {
        char got[2] = {hw, '\0'};
        return FAIL("Unrecognized hardware type: \"Expected hardware type o or e but got %s\"", got);
    }
    char prefix[400], host[700];
    if (hw == 'e')
        snprintf(prefix, sizeof(prefix), "%s.ec2", bucket);
    else
        snprintf(prefix, sizeof(prefix), "%s.op-%s", bucket, outpost);
    if (strcmp(region_prefix, "beta") == 0) {
        if (!u)
            return FAIL("Expected a endpoint to be specified but no endpoint was found");
    } else {
        u = NULL; /* only beta aliases use the custom endpoint */
    }
    const struct s3f__partition *part = s3f__partition_of(p->region);
    snprintf(host, sizeof(host), "%s.s3-outposts.%s.%s", prefix, p->region, part->dns_suffix);
    return set_prefixed(out, prefix, host, u, false, true, "s3-outposts", p->region, true, err,
                        resource);
}

/* ---- UseObjectLambdaEndpoint without a bucket (WriteGetObjectResponse) ------------------ */
enum s3f_status s3f__endpoint_resolve_object_lambda(const struct s3f__endpoint_params *p,
                                                    const struct s3f__url *u,
                                                    struct s3f__endpoint *out,
                                                    const char *resource,
                                                    struct s3f_error *err) {
    if (!s3f__valid_host_label(p->region, true))
        return FAIL("Invalid region: region was not a valid DNS name.");
    if (p->use_dual_stack)
        return FAIL("S3 Object Lambda does not support Dual-stack");
    if (p->accelerate)
        return FAIL("S3 Object Lambda does not support S3 Accelerate");
    enum s3f_status st;
    if (u) {
        st = s3f__endpoint_set(out, u->https, u->authority, u->host_header, u->path, false,
                               p->region);
    } else {
        char host[600];
        snprintf(host, sizeof(host), "s3-object-lambda%s.%s.%s", p->use_fips ? "-fips" : "",
                 p->region, s3f__partition_of(p->region)->dns_suffix);
        st = s3f__endpoint_set_aws(out, host, "", false, p->region);
    }
    if (!st) {
        free(out->signing_name);
        out->signing_name = s3f__strdup("s3-object-lambda");
        if (!out->signing_name)
            st = S3F_ERR_NO_MEMORY;
    }
    if (st) {
        s3f__endpoint_cleanup(out);
        return s3f__error_set(err, st, OP, resource, "out of memory");
    }
    return S3F_OK;
}
