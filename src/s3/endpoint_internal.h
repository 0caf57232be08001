/* Shared between the endpoint resolver's files (endpoint.c: plain buckets, S3 Express;
 * endpoint_arn.c: ARN buckets, Outposts bucket aliases, Object Lambda). Not for other code. */
#ifndef S3F_S3_ENDPOINT_INTERNAL_H
#define S3F_S3_ENDPOINT_INTERNAL_H

#include "s3/endpoint.h"

/* A partition of botocore's data/partitions.json. */
struct s3f__partition {
    const char *id;
    const char *dns_suffix;
    const char *dual_stack_dns_suffix; /* not used by S3, whose dual-stack hosts are
                                          s3.dualstack.REGION.DNS_SUFFIX */
    bool supports_fips;
    bool supports_dual_stack;
    const char *const *prefixes; /* region regex ^(PREFIX)-\w+-\d+$ */
    const char *const *regions;  /* explicitly listed regions (matched first) */
};

/* A custom endpoint as the rules' parseURL gives it. */
struct s3f__url {
    bool https;
    char authority[300]; /* host[:port] as written */
    char host_header[300];
    char path[1024]; /* as written, "" when none */
    bool is_ip;
};

/* aws.partition(region): exact region first, then the regexes, else the aws partition. */
const struct s3f__partition *s3f__partition_of(const char *region);
/* isValidHostLabel(value, allowSubDomains) */
bool s3f__valid_host_label(const char *s, bool allow_subdomains);
/* Fill `out` (zeroed) with the URL scheme://authority + path, Host header, signing region
 * and the signing name "s3". S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__endpoint_set(struct s3f__endpoint *out, bool https, const char *authority,
                                  const char *host_header, const char *path, bool path_style,
                                  const char *signing_region);
/* An AWS host: https, default port. */
enum s3f_status s3f__endpoint_set_aws(struct s3f__endpoint *out, const char *host,
                                      const char *path, bool path_style,
                                      const char *signing_region);

/* ARN buckets (endpoint_arn.c). The rule set's aws.parseArn branch, Outposts bucket aliases
 * ("...--op-s3", 50+ bytes) and the Object Lambda endpoint without a bucket. Each returns
 * S3F_OK with `out` filled, an error with err set (the rule set's text), or, for
 * s3f__endpoint_resolve_arn only, the negative S3F__ENDPOINT_NOT_ARN when the bucket is no
 * ARN. `u` is the parsed custom endpoint or NULL; `resource` names the bucket in errors. */
#define S3F__ENDPOINT_NOT_ARN (-1)
bool s3f__bucket_is_outposts_alias(const char *bucket);
int s3f__endpoint_resolve_arn(const struct s3f__endpoint_params *p, const char *bucket,
                              const struct s3f__url *u, struct s3f__endpoint *out,
                              const char *resource, struct s3f_error *err);
enum s3f_status s3f__endpoint_resolve_outposts_alias(const struct s3f__endpoint_params *p,
                                                     const char *bucket,
                                                     const struct s3f__url *u,
                                                     struct s3f__endpoint *out,
                                                     const char *resource,
                                                     struct s3f_error *err);
enum s3f_status s3f__endpoint_resolve_object_lambda(const struct s3f__endpoint_params *p,
                                                    const struct s3f__url *u,
                                                    struct s3f__endpoint *out,
                                                    const char *resource,
                                                    struct s3f_error *err);

#endif /* S3F_S3_ENDPOINT_INTERNAL_H */
