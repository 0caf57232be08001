/* Endpoint URLs and endpoint resolution (src/s3/endpoint.c, endpoint_arn.c). Input: a flags
 * byte, then region, NUL, bucket, NUL, endpoint URL (empty: none), NUL, object key, and
 * optionally NUL and an ARN flags byte (UseArnRegion=false, DisableAccessPoints,
 * DisableMultiRegionAccessPoints). On success the object URL and path are built for the
 * key; the bucket checks, and the s3://ARN/KEY split, run on the bucket. */
#include <string.h>

#include "fuzz.h"
#include "s3/endpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t f = data[0];
    size_t pos = 1;
    char *region = fuzz_field(data, size, &pos);
    char *bucket = fuzz_field(data, size, &pos);
    char *url = fuzz_field(data, size, &pos);
    char *key = fuzz_field(data, size, &pos);
    char *arn_opts = fuzz_field(data, size, &pos);
    uint8_t g = (uint8_t)arn_opts[0];
    struct s3f__endpoint_params p = {
        .region = region,
        .bucket = bucket,
        .endpoint_url = url[0] ? url : NULL,
        .force_path_style = f & 1,
        .use_fips = f & 2,
        .use_dual_stack = f & 4,
        .accelerate = f & 8,
        .use_global_endpoint = f & 16,
        .use_object_lambda_endpoint = (f & 0xe0) == 0x20,
        .use_s3express_control_endpoint = (f & 0xe0) == 0x40,
        .reject_arn_region = g & 1,
        .disable_access_points = g & 2,
        .disable_mrap = g & 4,
    };
    struct s3f__endpoint e;
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    if (s3f__endpoint_resolve(&p, &e, &err) == S3F_OK) {
        FUZZ_CHECK(e.url && e.origin && e.base_path && e.host && e.signing_region &&
                   e.signing_name);
        size_t n = strlen(e.url);
        FUZZ_CHECK(n == 0 || e.url[n - 1] != '/');
        /* SigV4a only over the region set "*"; an ARN's bucket is in the host */
        FUZZ_CHECK(!e.signing_region_set || strcmp(e.signing_region_set, "*") == 0);
        FUZZ_CHECK(!e.arn || !e.path_style);
        char *u = s3f__endpoint_object_url(&e, key, (f & 0x80) ? "uploads" : NULL);
        char *path = s3f__endpoint_object_path(&e, key);
        FUZZ_CHECK(u && path && path[0] == '/');
        free(u);
        free(path);
    } else {
        FUZZ_CHECK(memchr(err.message, 0, sizeof(err.message)));
    }
    s3f__endpoint_cleanup(&e);
    (void)s3f__bucket_name_valid(bucket, true);
    (void)s3f__bucket_name_valid(bucket, false);
    (void)s3f__bucket_dns_compatible(bucket, true);
    (void)s3f__bucket_dns_compatible(bucket, false);
    size_t bl = strlen(bucket), al = s3f__arn_bucket_len(bucket, bl);
    FUZZ_CHECK(al <= bl && al <= 255 && (al == 0 || al == bl || bucket[al] == '/'));
    free(region);
    free(bucket);
    free(url);
    free(key);
    free(arn_opts);
    return 0;
}
