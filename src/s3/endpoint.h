/* S3 endpoint resolution: region + bucket + options -> base URL, Host header, signing scope.
 *
 * Follows the S3 endpoint rule set of the AWS SDKs (checked case by case against botocore's
 * endpoint-rules test suite in tests/vectors/s3/endpoint-tests.json) for what s3flash
 * supports: AWS partitions, regional and us-east-1 global endpoints, FIPS, dual-stack,
 * Transfer Acceleration, virtual-hosted and path-style addressing, custom endpoints, and S3
 * Express One Zone: directory buckets (NAME--ZONE--x-s3, access points --xa-s3) on their
 * zonal endpoints and the regional control endpoint (s3express-control); ARN buckets
 * (endpoint_arn.c): S3 access points, Multi-Region Access Points (SigV4a), S3 on Outposts
 * access points and bucket aliases (SigV4a, s3-outposts), Object Lambda access points
 * (s3-object-lambda) and the Object Lambda endpoint. Every case of the suite resolves. */
#ifndef S3F_S3_ENDPOINT_H
#define S3F_S3_ENDPOINT_H

#include <stdbool.h>

#include "core/core.h"

struct s3f__endpoint_params {
    const char *region;       /* required ("us-east-1", "aws-global", any DNS label) */
    const char *bucket;       /* NULL or "": no bucket (ListBuckets-like requests) */
    const char *endpoint_url; /* custom endpoint "http(s)://host[:port][/base]", or NULL */
    bool force_path_style;
    bool use_fips;
    bool use_dual_stack;
    bool accelerate;
    bool use_global_endpoint; /* us-east-1 -> s3.amazonaws.com (legacy global endpoint) */
    /* Without a bucket: the Object Lambda endpoint s3-object-lambda.REGION.SUFFIX
     * (WriteGetObjectResponse). Ignored with a bucket, as in the rules. */
    bool use_object_lambda_endpoint;
    /* ARN buckets: reject_arn_region is UseArnRegion = false (an ARN whose region is not
     * `region` is refused; by default the ARN's region is used); DisableAccessPoints;
     * DisableMultiRegionAccessPoints. */
    bool reject_arn_region;
    bool disable_access_points;
    bool disable_mrap;
    /* S3 Express: bucket operations (CreateBucket, DeleteBucket, ListDirectoryBuckets...) go
     * to the regional control endpoint; DisableS3ExpressSessionAuth signs zonal requests
     * with the caller's own credentials instead of a session's. */
    bool use_s3express_control_endpoint;
    bool disable_s3express_session_auth;
};

struct s3f__endpoint {
    /* Base URL including the bucket as S3 wants it, never with a trailing slash:
     * "https://bucket.s3.us-west-2.amazonaws.com", "http://127.0.0.1:7480/bucket". */
    char *url;
    char *origin;         /* "scheme://authority" part of url */
    char *base_path;      /* path part of url: "", "/bucket", "/base/bucket" */
    char *host;           /* Host header value, with ":port" only when not the default */
    bool path_style;      /* the bucket is in the path (false when there is no bucket) */
    bool tls;             /* https */
    char *signing_region; /* SigV4 scope region ("us-east-1" for aws-global) */
    char *signing_name;   /* SigV4 service name: "s3", "s3express", "s3-outposts",
                             "s3-object-lambda" */
    /* SigV4a region set ("*"), when the rules ask for SigV4a (Multi-Region Access Points,
     * Outposts): NULL for SigV4. With it, signing_region is the SigV4 fallback's region
     * (Outposts) or "*" (MRAP, which has none). */
    char *signing_region_set;
    bool arn;             /* an ARN bucket or Outposts alias: the bucket is in the host */
    bool s3express;       /* a directory bucket or the S3 Express control endpoint */
    bool s3express_session; /* signed with a CreateSession session (sigv4-s3express) */
};

/* Resolve `p` into `out` (which is overwritten; free its strings with
 * s3f__endpoint_cleanup, also after a failure). Errors, with err->message holding the text of
 * the SDK rule set ("Invalid region: region was not a valid DNS name.", ...):
 *   S3F_ERR_INVALID_ARGUMENT  no/invalid region, conflicting options (FIPS + custom endpoint,
 *                             Accelerate + path style, dual-stack + custom endpoint, ...)
 *   S3F_ERR_INVALID_URI       the custom endpoint is not an http(s) URL (never echoed when it
 *                             carries user:password@)
 *                             invalid ARNs, options the ARN's kind does not take
 *   S3F_ERR_NO_MEMORY */
enum s3f_status s3f__endpoint_resolve(const struct s3f__endpoint_params *p,
                                      struct s3f__endpoint *out, struct s3f_error *err);
/* Free the strings of `e` and zero it. NULL and zeroed structs are accepted. */
void s3f__endpoint_cleanup(struct s3f__endpoint *e);

/* URL for an object: base + "/" + URI-encoded key ('/' kept), plus "?query" when query is
 * non-NULL and non-empty (appended verbatim: the caller encodes it). key NULL or "": the
 * bucket itself (base URL, or "origin/" when the base has no path). Caller frees the result
 * with free(); NULL on allocation failure. */
char *s3f__endpoint_object_url(const struct s3f__endpoint *e, const char *key,
                               const char *query);
/* Path as sent on the wire and signed (SigV4 canonical URI for S3: encoded once):
 * "/bucket/key" (path style), "/key" (virtual-hosted), "/base/..." with a custom endpoint
 * path; "/" or "/bucket" when key is NULL or "". Caller frees; NULL on allocation failure. */
char *s3f__endpoint_object_path(const struct s3f__endpoint *e, const char *key);

/* Bucket name checks.
 * s3f__bucket_name_valid: strict = the current AWS rules for general purpose buckets (3-63
 * bytes of a-z 0-9 . -, starting and ending with a letter or digit, no "..", not an IPv4
 * address, no reserved prefix xn-- sthree- amzn-s3-demo-, no reserved suffix -s3alias --ol-s3
 * .mrap --x-s3 --table-s3). strict = false: what S3-compatible servers accept (legacy US
 * Standard names and Ceph RGW relaxed names): 3-255 bytes of A-Z a-z 0-9 . _ -.
 * s3f__bucket_dns_compatible: usable as a virtual host (the SDKs' isVirtualHostableS3Bucket):
 * 3+ bytes, lowercase, not an IPv4 address, and a valid DNS label (allow_dots: a dot-separated
 * series of labels) of a-z 0-9 - not starting or ending with '-'. NULL gives false.
 * An ARN bucket (s3f__arn_bucket_len) is valid when not strict: the resolver checks it. */
bool s3f__bucket_name_valid(const char *name, bool strict);
/* S3 Express One Zone: whether the name is a directory bucket's (ends in --x-s3, or --xa-s3
 * for its access points), and its Availability Zone id ("use1-az4" of
 * "data--use1-az4--x-s3") into zone (cap bytes); false when it has none. */
bool s3f__bucket_is_directory(const char *bucket);
bool s3f__directory_bucket_zone(const char *bucket, char *zone, size_t cap);
bool s3f__bucket_dns_compatible(const char *name, bool allow_dots);
/* The length of the ARN bucket at the start of s[0..len) ("arn:...:accesspoint/NAME",
 * "arn:...:outpost/ID/accesspoint/NAME", as aws-cli splits s3://ARN/KEY: the last resource
 * component runs to the next '/'), or 0 when s does not start with an ARN of 255 printable
 * ASCII bytes at most. Only the shape is checked; s3f__endpoint_resolve checks the rest. */
size_t s3f__arn_bucket_len(const char *s, size_t len);

#endif /* S3F_S3_ENDPOINT_H */
