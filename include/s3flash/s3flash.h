/*
 * s3flash — move machine-learning state between hosts and S3-compatible storage.
 *
 * Public C API. Conventions (see docs/ARCHITECTURE.md):
 *   - Every call returns an `enum s3f_status`; S3F_OK is 0.
 *   - Calls that talk to S3 take an optional `struct s3f_error *` (may be NULL) which is
 *     filled on failure with the HTTP status, S3 error code, message and request id.
 *   - Option structs: zero-initialised means "default"; every default is documented.
 *   - Who allocates frees: every function that hands out memory says which _free to call.
 *   - A `struct s3f_client` is thread-safe: any number of threads may issue calls on one
 *     client at the same time. Result structs are owned by the caller and not shared.
 *   - Credentials never appear in logs, errors or debug output.
 */
#ifndef S3FLASH_S3FLASH_H
#define S3FLASH_S3FLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S3FLASH_VERSION "0.1.0"

/* Symbols of the shared library are hidden unless marked public. */
#if defined(__GNUC__) && defined(S3F_BUILDING_LIBRARY)
#define S3F_API __attribute__((visibility("default")))
#else
#define S3F_API
#endif

/* ---------------------------------------------------------------------------------------
 * Status codes. Append-only: values never change meaning.
 * ------------------------------------------------------------------------------------- */
enum s3f_status {
    S3F_OK = 0,
    S3F_ERR_INVALID_ARGUMENT = 1, /* a parameter is wrong; error.message says which */
    S3F_ERR_INVALID_URI = 2,      /* malformed s3:// URI or endpoint URL */
    S3F_ERR_NO_MEMORY = 3,
    S3F_ERR_NO_CREDENTIALS = 4,   /* no provider in the chain had credentials */
    S3F_ERR_CREDENTIALS = 5,      /* a credentials provider failed (STS error, bad file...) */
    S3F_ERR_CONFIG = 6,           /* bad config file, unknown profile, bad option value */
    S3F_ERR_CONNECT = 7,          /* could not resolve or connect to the endpoint */
    S3F_ERR_TIMEOUT = 8,          /* connect timeout or stall timeout */
    S3F_ERR_NETWORK = 9,          /* connection broke during the request */
    S3F_ERR_TLS = 10,             /* TLS handshake or certificate verification failed */
    S3F_ERR_S3 = 11,              /* S3 answered with an error not covered below; see code */
    S3F_ERR_NOT_FOUND = 12,       /* NoSuchKey, NoSuchUpload, or a 404 without a body */
    S3F_ERR_NO_SUCH_BUCKET = 13,
    S3F_ERR_ACCESS_DENIED = 14,   /* AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId */
    S3F_ERR_EXPIRED_CREDENTIALS = 15, /* ExpiredToken, RequestExpired, TokenRefreshRequired
                                         (ExpiredToken, TokenRefreshRequired: after new
                                         credentials and one re-send) */
    S3F_ERR_PRECONDITION_FAILED = 16, /* 412: If-Match failed (object changed), or an
                                       * answer of another ETag or size than pinned */
    S3F_ERR_THROTTLED = 17,       /* SlowDown / 503 persisted through every attempt */
    S3F_ERR_SERVER = 18,          /* 5xx persisted through every attempt */
    S3F_ERR_BAD_RESPONSE = 19,    /* malformed XML, truncated body, missing header, a
                                   * 206 for another range than asked */
    S3F_ERR_IO = 20,              /* local file error; message has the errno text */
    S3F_ERR_CHECKSUM = 21,        /* data does not match its checksum */
    S3F_ERR_ABORTED = 22,         /* a caller callback asked to stop */
    S3F_ERR_UNSUPPORTED = 23,     /* a feature (ARN bucket, FIPS...) s3flash does not support */
    S3F_ERR_INVALID_RANGE = 24,   /* 416 */
    S3F_ERR_INTERNAL = 25,        /* a bug in s3flash */
};

/* Static English description of a status. Never NULL. */
S3F_API const char *s3f_strerror(enum s3f_status status);
/* Static symbolic name ("S3F_ERR_NOT_FOUND"). Never NULL. */
S3F_API const char *s3f_status_name(enum s3f_status status);

/* Everything known about a failure. Fixed-size so it can live on the stack. */
struct s3f_error {
    enum s3f_status status;
    int http_status;         /* 0 when no HTTP response was received */
    int attempts;            /* how many times the request was sent */
    char operation[40];      /* "GetObject", "ListObjectsV2", "credentials", ... */
    char resource[512];      /* "s3://bucket/key", a path, or an URL (never a secret) */
    char code[64];           /* S3 error code ("NoSuchKey"), empty if none */
    char message[512];       /* S3's message or s3flash's explanation */
    char request_id[128];    /* x-amz-request-id / RequestId, empty if none */
    char host_id[256];       /* x-amz-id-2 / HostId, empty if none */
};

/* Clear an error struct (status S3F_OK, empty strings). NULL is accepted. */
S3F_API void s3f_error_clear(struct s3f_error *err);

/* Format an error as one line, e.g.
 *   "GetObject s3://b/k: NoSuchKey (HTTP 404): The specified key does not exist. [request id: tx00..]"
 * Writes at most `len` bytes including the NUL; returns the length it wanted (snprintf). */
S3F_API size_t s3f_error_format(const struct s3f_error *err, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------
 * Logging
 * ------------------------------------------------------------------------------------- */
enum s3f_log_level {
    S3F_LOG_OFF = 0,
    S3F_LOG_ERROR = 1,
    S3F_LOG_WARN = 2,
    S3F_LOG_INFO = 3,
    S3F_LOG_DEBUG = 4, /* one line per request and response, with timings */
    S3F_LOG_TRACE = 5, /* headers (Authorization and security tokens redacted) */
};
/* Called from any thread, possibly concurrently; `msg` has no trailing newline. */
typedef void (*s3f_log_fn)(void *user_data, enum s3f_log_level level, const char *msg);

/* ---------------------------------------------------------------------------------------
 * Checksums
 * ------------------------------------------------------------------------------------- */
enum s3f_checksum_algorithm {
    S3F_CHECKSUM_DEFAULT = 0, /* CRC32C */
    S3F_CHECKSUM_NONE = 1,    /* send no checksum header */
    S3F_CHECKSUM_CRC32C = 2,
    S3F_CHECKSUM_CRC32 = 3,
    S3F_CHECKSUM_CRC64NVME = 4,
};

/* ---------------------------------------------------------------------------------------
 * Client
 * ------------------------------------------------------------------------------------- */
struct s3f_client;

struct s3f_client_options {
    /* Region for signing and AWS endpoints. NULL: AWS_REGION, AWS_DEFAULT_REGION, the
     * profile's `region`, else "us-east-1". */
    const char *region;
    /* Custom endpoint ("http://127.0.0.1:7480", "https://minio.local:9000").
     * NULL: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url` (in the
     * `services` section or top level), else AWS S3 for the region. */
    const char *endpoint_url;
    /* Profile of the shared config/credentials files. NULL: AWS_PROFILE, else "default". */
    const char *profile;
    /* 1: always path-style (http://host/bucket/key). 0: virtual-hosted style where the
     * bucket name is DNS-safe and the endpoint is not an IP address, else path style. */
    int force_path_style;
    /* AWS endpoint variants; with a custom endpoint, FIPS and dual-stack are refused
     * (S3F_ERR_INVALID_ARGUMENT from the first request), as by the AWS SDKs.
     * 1: on, -1: off, 0: from the environment and profile:
     * FIPS (s3-fips.REGION.amazonaws.com): AWS_USE_FIPS_ENDPOINT, the profile's
     * use_fips_endpoint; dual-stack IPv4/IPv6 (s3.dualstack.REGION...):
     * AWS_USE_DUALSTACK_ENDPOINT, the profile's use_dualstack_endpoint or
     * s3.use_dualstack_endpoint; Transfer Acceleration (BUCKET.s3-accelerate.amazonaws.com,
     * virtual-hosted buckets only): the profile's s3.use_accelerate_endpoint. */
    int use_fips_endpoint;
    int use_dualstack_endpoint;
    int use_accelerate_endpoint;
    /* 1: send unsigned requests and never look for credentials. */
    int anonymous;
    /* Explicit static credentials; when access_key_id is NULL the default chain is used:
     * environment, shared files (profile), credential_process, web identity, container,
     * EC2 instance metadata (IMDSv2). */
    const char *access_key_id;
    const char *secret_access_key;
    const char *session_token;
    /* Attempts per request including the first (AWS standard retry mode).
     * 0: AWS_MAX_ATTEMPTS, the profile's `max_attempts`, else 3. Capped at 100. */
    int max_attempts;
    /* 0: 10000 ms. Time allowed to establish a connection (DNS, TCP and TLS). */
    uint32_t connect_timeout_ms;
    /* 0: 30000 ms. A request that moves no byte for this long is aborted and retried. The
     * clock starts when the request has a connection: time spent waiting for one (more
     * requests than connections) is not counted. */
    uint32_t stall_timeout_ms;
    /* 0: 2. Threads that drive the HTTP connections. */
    uint32_t io_threads;
    /* 0: 64. Upper bound of open connections across all I/O threads (HTTP/1.1, one
     * request per connection; requests beyond it wait in the client's queue). */
    uint32_t max_connections;
    /* CA bundle file for TLS. NULL: AWS_CA_BUNDLE, the profile's `ca_bundle`, else the
     * system default. */
    const char *ca_bundle;
    /* 1: do not verify TLS certificates (for test servers only; logged as a warning). */
    int tls_insecure;
    /* Log sink. NULL: messages at or above `log_level` go to stderr. */
    s3f_log_fn log_fn;
    void *log_user_data;
    /* 0 (S3F_LOG_OFF) unless S3FLASH_LOG=error|warn|info|debug|trace is set. */
    enum s3f_log_level log_level;

    /* ---- the transfer engine (s3f_upload_*, s3f_download_*, s3f_writer, s3f_reader) ---- */
    /* 0: 10. Throughput, in Gbit/s, the engine sizes its concurrency for. */
    double throughput_target_gbps;
    /* 0: 8 MiB. Part size of multipart uploads and of the ranged GETs of downloads; 5 MiB
     * to 5 GiB, else s3f_client_new fails with S3F_ERR_INVALID_ARGUMENT. Grown per object
     * when an object would need more than 10,000 parts. */
    uint64_t part_size_bytes;
    /* 0: see below. Bound of the memory shared by all writers and readers of the client: the
     * buffer pool (the bytes they hold between the caller and the network) and, with
     * cache_dir, the block cache's insert queue (an eighth of the limit, at least two
     * cache blocks, at most 32 MiB; the pool gets the rest). Uploads from memory or a
     * file and downloads to memory or a file use no pool memory. At least 16 MiB. 0: 512
     * MiB, or a quarter of s3f_memory_available() (a container's cgroup limit) if less. */
    uint64_t memory_limit_bytes;
    /* 0: 60000 ms. A writer that waits for pool memory (all of it held) asks the readers
     * for their read-ahead first (idle readers give it back); when no memory came back for
     * this long and no request of the client is in flight that could give some back (the
     * pool is held by other writers' unfinished parts), the write fails with
     * S3F_ERR_NO_MEMORY naming the pool instead of waiting forever. */
    uint32_t memory_wait_timeout_ms;
    /* 0: ceil(throughput_target_gbps / 0.4), the AWS CRT's estimate of one connection to
     * S3, at least 4 and at most the connections data requests may use (max_connections
     * less the 1 per I/O thread kept for control requests from 4 per thread, 2 from 16)
     * (25 for 10 Gbit/s). Data requests the
     * client keeps in flight across all its transfers; slots go round-robin between the
     * transfers that have work, so a small transfer is not stuck behind a large one. On
     * loopback a handful fill the link: measure. */
    uint32_t max_inflight_requests;
    /* DEFAULT: CRC32C. Checksum of uploads (per part, combined into a whole-object value)
     * and of verified downloads. */
    enum s3f_checksum_algorithm checksum;
    /* 1: every request carries `x-amz-request-payer: requester`, signed: the caller agrees
     * to pay for requests and transfer on a Requester Pays bucket (S3 answers 403 to a
     * non-owner without it). Not added to presigned URLs (s3f_presign). */
    int requester_pays;
    /* Node-local block cache (docs/CACHE.md). NULL: no cache. A directory (created if
     * missing) where s3f_reader and the whole-object downloads (s3f_download_*) keep
     * fixed-size blocks of the objects they read, keyed by bucket, key, ETag and offset,
     * each checked by its CRC32C on every read; a block stays valid while its object's ETag
     * is, so the cache is kept across clients, processes and restarts. Several processes
     * of one node may share a directory. Errors of the cache (disk full, permissions,
     * corrupted files) never fail a read: the block is fetched from S3 instead. With a
     * cache, each whole-object download sends a HEAD first (for the ETag) and no GET when
     * every block is cached; s3f_get_object does not use it. */
    const char *cache_dir;
    /* 0: 10 GiB. Bound of the bytes of block files under cache_dir; least recently used
     * blocks are evicted beyond it. */
    uint64_t cache_max_bytes;
    /* 0: 5% of the file system holding cache_dir. Free space the cache leaves on that file
     * system: blocks are evicted (and none inserted) while less is free. */
    uint64_t cache_min_free_bytes;
    /* 0: 1 MiB. Size of a cache block, 64 KiB to 64 MiB (a power of two), else
     * s3f_client_new fails with S3F_ERR_INVALID_ARGUMENT. Processes sharing a cache_dir
     * should use one block size (blocks of another size are never used). */
    uint64_t cache_block_bytes;
    /* The shared block cache (docs/CACHE.md "The shared cache"; the mount's --cache-xz): an
     * S3 Express One Zone directory bucket (NAME--ZONE-ID--x-s3) that every client reading
     * with it shares. NULL: none. s3f_reader looks there for the blocks of an object of at
     * most 1 MiB after cache_dir (with or without one), before the source; a block read
     * from the source is PUT there in the background (one PUT at a time, a queue of copies
     * inside memory_limit_bytes, dropped when full). A block read from it is used only when
     * it names this bucket, key, ETag and offset and its CRC32C matches; a failed request is
     * logged and counted and never fails a read. The whole-object downloads do not use it.
     * The bucket is not checked here (s3flash mount checks it before it mounts). */
    const char *cache_xz_bucket;

    /* ---- S3 Express One Zone directory buckets (NAME--ZONE-ID--x-s3; docs/CONFIGURATION.md)
     * are recognised from the name: their requests go to the zonal endpoint
     * https://BUCKET.s3express-ZONE-ID.REGION.amazonaws.com (a custom endpoint still wins)
     * and are signed with session credentials from CreateSession, cached per bucket and
     * refreshed in the background. ---- */
    /* 1: ask for ReadOnly sessions (a client that only reads: GET, HEAD, listings; writes
     * are refused by S3 with AccessDenied). 0: ReadWrite sessions. */
    int express_read_only;
    /* 1: sign directory-bucket requests with the caller's own credentials (no CreateSession;
     * slower, every request is authorised by IAM); -1: sessions; 0: from
     * AWS_S3_DISABLE_EXPRESS_SESSION_AUTH=true, the profile's
     * s3_disable_express_session_auth = true, else sessions. */
    int disable_express_session_auth;

    /* ---- server-side encryption and request options (docs/CONFIGURATION.md has one table
     * of them, with the header each one puts on the wire and the requests that carry it).
     * Strings are copied by s3f_client_new; NULL (or 0) leaves the header out. ---- */
    /* Server-side encryption of the objects this client writes (PutObject,
     * CreateMultipartUpload, CopyObject: x-amz-server-side-encryption): "AES256" (SSE-S3),
     * "aws:kms" (SSE-KMS) or "aws:kms:dsse" (DSSE-KMS); anything else fails
     * s3f_client_new with S3F_ERR_INVALID_ARGUMENT. NULL: the bucket's default. */
    const char *sse;
    /* With aws:kms or aws:kms:dsse: the KMS key (id, ARN or alias;
     * x-amz-server-side-encryption-aws-kms-key-id). NULL: the account's AWS managed key. */
    const char *sse_kms_key_id;
    /* With aws:kms or aws:kms:dsse: the encryption context, a JSON object of strings
     * ({"project":"x"}), sent base64-encoded in x-amz-server-side-encryption-context. */
    const char *sse_kms_encryption_context;
    /* 1: x-amz-server-side-encryption-bucket-key-enabled: true (an S3 Bucket Key for
     * SSE-KMS), -1: false, 0: not sent (the bucket's setting). */
    int sse_bucket_key_enabled;
    /* SSE-C: the customer-provided 256-bit AES key, base64 (44 characters), of the objects
     * this client writes and reads: sent with its MD5 (x-amz-server-side-encryption-customer-
     * algorithm: AES256, -customer-key, -customer-key-MD5) on PutObject,
     * CreateMultipartUpload, UploadPart, CompleteMultipartUpload, GetObject, HeadObject and
     * as the destination's key of CopyObject and UploadPartCopy. A secret: never logged (at
     * TRACE the header reads <redacted>), never in an error; the client's copy is wiped when
     * it is freed. Not combined with `sse`. */
    const char *sse_customer_key;
    /* SSE-C key of the source of copies (CopyObject, UploadPartCopy:
     * x-amz-copy-source-server-side-encryption-customer-*). NULL: sse_customer_key (one key
     * for the objects read, written and copied); "" : none (a source without SSE-C). */
    const char *sse_copy_source_customer_key;
    /* Storage class of the objects written (x-amz-storage-class: STANDARD,
     * INTELLIGENT_TIERING, STANDARD_IA, ...) on PutObject, CreateMultipartUpload, CopyObject. */
    const char *storage_class;
    /* Account id that must own the bucket (x-amz-expected-bucket-owner on every request to
     * a bucket, except CreateBucket and CreateSession): S3 answers 403 AccessDenied when
     * another account owns it. */
    const char *expected_bucket_owner;
    /* Canned ACL of the objects written (x-amz-acl on PutObject, CreateMultipartUpload,
     * CopyObject), e.g. "bucket-owner-full-control" for cross-account writes. */
    const char *acl;
    /* Appended to the User-Agent of S3 requests ("s3flash/VERSION EXTRA"); printable ASCII,
     * at most 256 bytes. */
    const char *user_agent_extra;
    /* HTTP(S) proxy of S3 requests, a URL (http://[user:password@]host:port). NULL: from the
     * environment, https_proxy / HTTPS_PROXY for https endpoints, http_proxy / HTTP_PROXY
     * for http ones, else all_proxy / ALL_PROXY (lower case first); "": no proxy, whatever
     * the environment says. */
    const char *proxy;
    /* Hosts reached without the proxy (comma-separated names, domains and addresses; "*":
     * all). NULL: no_proxy / NO_PROXY. */
    const char *no_proxy;
    /* CA bundle to verify an https:// proxy with. NULL: S3FLASH_PROXY_CA_BUNDLE, the
     * profile's proxy_ca_bundle, else the bundle of the endpoint (ca_bundle). */
    const char *proxy_ca_bundle;
    /* Put before the User-Agent of S3 requests ("PREFIX s3flash/VERSION[ EXTRA]", the
     * meaning of Mountpoint's --user-agent-prefix); printable ASCII, at most 256 bytes. */
    const char *user_agent_prefix;
    /* Network interfaces the connections go out through (SO_BINDTODEVICE; Mountpoint's
     * --bind), comma-separated ("eth0,eth1"), each new connection on the next one in turn.
     * A name that is not an interface of the machine fails s3f_client_new with
     * S3F_ERR_INVALID_ARGUMENT; binding needs Linux 5.7 or CAP_NET_RAW. NULL: the routing
     * table decides. */
    const char *network_interfaces;
};

/* Create a client. Resolves region, endpoint and the credentials provider (credentials
 * themselves are fetched lazily on the first signed request; temporary ones are refreshed
 * before expiry by a background thread of the client, so requests never wait for a
 * provider while valid credentials exist; see docs/CONFIGURATION.md).
 * On success *out is set; free it with s3f_client_free. Thread-safe once created. */
S3F_API enum s3f_status s3f_client_new(const struct s3f_client_options *opts, struct s3f_client **out,
                               struct s3f_error *err);
/* Stop the I/O threads and the credentials refresher (a credential_process it runs is
 * killed) and free the client. Calls in flight must have returned. NULL ok. Aborts of
 * failed uploads still pending (server away) get one last try of at most 3 s each, 5 s in
 * all; an upload id still left is named in a WARN log line. */
S3F_API void s3f_client_free(struct s3f_client *client);

/* The memory this process may use: the machine's RAM, or the memory limit of its cgroup (a
 * container's: cgroup v2 memory.max, v1 memory.limit_in_bytes, the smallest up the
 * hierarchy) where that is less. The defaults of memory_limit_bytes and of the mount's
 * --memory-target are shares of it. */
S3F_API uint64_t s3f_memory_available(void);

/* The region and endpoint the client resolved (static for the client's lifetime). */
S3F_API const char *s3f_client_region(const struct s3f_client *client);
S3F_API const char *s3f_client_endpoint(const struct s3f_client *client); /* "" when AWS default */

/* Where the credentials came from ("environment", "profile:dev", "process", "web-identity",
 * "container", "imds", "static", "anonymous"); fetches them if needed. The secret is never
 * returned. `buf` receives the name; `access_key_id` (optional) the key id. */
S3F_API enum s3f_status s3f_client_credentials_source(struct s3f_client *client, char *buf, size_t len,
                                              char *access_key_id, size_t akid_len,
                                              struct s3f_error *err);

/* Engine counters of a client, a snapshot. */
struct s3f_client_stats {
    uint64_t part_size_bytes;        /* the resolved default part size */
    uint64_t pool_limit_bytes;       /* memory_limit_bytes, resolved (whole pool chunks) */
    uint64_t pool_in_use_bytes;      /* held by writers and readers now */
    uint64_t pool_high_water_bytes;  /* most ever held at once (see reset) */
    uint64_t pool_allocated_bytes;   /* allocated so far; kept for reuse until client_free */
    uint32_t max_inflight_requests;  /* resolved */
    uint32_t inflight_requests;      /* data requests in flight now */
    uint32_t inflight_high_water;    /* most ever in flight at once */
    uint64_t requests_started;       /* data requests started, ever */
    uint32_t pending_aborts;         /* AbortMultipartUpload calls of failed uploads that
                                        failed too (server away) and are retried in the
                                        background; s3f_client_free tries them once more */
    /* The block cache (cache_dir); all 0 without one. */
    uint64_t cache_hits;             /* blocks served from the cache */
    uint64_t cache_misses;           /* blocks looked up and not found (or found corrupt) */
    uint64_t cache_hit_bytes;        /* bytes served from the cache */
    uint64_t cache_inserted_bytes;   /* bytes written into the cache */
    uint64_t cache_errors;           /* cache operations that failed and were bypassed */
    /* The bandwidth-delay estimate that sizes max_inflight_requests (unless configured) and
     * the readers' read-ahead (docs/TRANSFER.md): one connection's throughput, the
     * first-byte latency, and the requests measured (0: the prior, 50 MB/s and 30 ms). */
    double connection_bytes_per_s;
    double first_byte_latency_s;
    uint32_t estimate_samples;
    /* The block cache's writer thread (docs/CACHE.md): blocks are queued by the reading
     * thread and written in the background; a full queue drops them (never waits). */
    uint64_t cache_insert_pending_bytes; /* queued or being written now */
    uint64_t cache_insert_dropped_bytes; /* not cached: the queue was full, no room under
                                            the limits, or the write failed (an error) */
    uint64_t cache_evicted_bytes;        /* removed by this client's evictions */
    /* The shared cache (cache_xz_bucket); all 0 without one. */
    uint64_t cache_xz_hits;              /* blocks served from it */
    uint64_t cache_xz_misses;            /* blocks looked up there and not served */
    uint64_t cache_xz_hit_bytes;
    uint64_t cache_xz_invalid;           /* blocks found there that failed their checks
                                            (another block's, stale, corrupt; misses too) */
    uint64_t cache_xz_errors;            /* GETs that failed (misses too) */
    uint64_t cache_xz_puts;              /* blocks PUT there */
    uint64_t cache_xz_put_bytes;
    uint64_t cache_xz_put_errors;        /* PUTs that failed */
    uint64_t cache_xz_put_dropped_bytes; /* not PUT: queue full, after a failure, or failed */
    uint64_t cache_xz_put_pending_bytes; /* queued or being sent now */
};
/* Thread-safe. `reset_high_water`: 1 to restart the high-water marks from the current
 * values after reading them. */
S3F_API void s3f_client_stats(struct s3f_client *client, struct s3f_client_stats *out,
                              int reset_high_water);

/* Wait until every block the block cache (cache_dir) had queued for its writer thread when
 * the call began is settled: written into the cache (cache_inserted_bytes) or dropped
 * (cache_insert_dropped_bytes); cache_insert_pending_bytes is then 0 unless other threads
 * queued more meanwhile. Reads never wait for the cache's disk (docs/CACHE.md): call this
 * before reading the insert counters, or before another process is to find the blocks a
 * read just cached. Returns at once without a cache. Waits on the cache's local disk only
 * (no request is sent); thread-safe. */
S3F_API void s3f_client_cache_flush(struct s3f_client *client);

/* Change how many data requests the client keeps in flight, from now on, and stop adapting
 * it (as if max_inflight_requests had been configured): at least 1, at most the
 * connections data requests may use (see max_inflight_requests; larger values are
 * clamped). For runs of many small objects (each one request: the rate is the requests in
 * flight over the first-byte latency), which the bandwidth plan, made for part-sized
 * requests, undersizes. Thread-safe; requests already waiting start as slots free up. */
S3F_API void s3f_client_set_max_inflight_requests(struct s3f_client *client, uint32_t n);

/* ---------------------------------------------------------------------------------------
 * Metrics (docs/METRICS.md)
 * ------------------------------------------------------------------------------------- */
/* A registry of counters, gauges and histograms. Every client owns one, always on (its
 * metrics are listed in docs/METRICS.md); a front end (the mount) may create its own for
 * its layer and render both together. Labels are small fixed sets of values declared when a
 * metric is registered (never free text such as a bucket or a key), so memory is bounded
 * by the label combinations the registry allows: registering past that bound is refused.
 * Updates are lock-free atomics, safe from any thread; a snapshot never blocks them. */
struct s3f_metrics;

enum s3f_metric_type { S3F_METRIC_COUNTER, S3F_METRIC_GAUGE, S3F_METRIC_HISTOGRAM };

#define S3F_METRIC_MAX_LABELS 2
/* The histograms' upper bounds in seconds (then +Inf): S3F_METRIC_BUCKET_BOUNDS. */
#define S3F_METRIC_N_BUCKETS 16
#define S3F_METRIC_BUCKET_BOUNDS \
    {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

struct s3f_metric_def {
    const char *name;  /* Prometheus conventions: s3flash_..._total, ..._seconds, ..._bytes */
    const char *help;
    enum s3f_metric_type type;
    /* up to S3F_METRIC_MAX_LABELS labels (NULL name: no more), each with its allowed
     * values, a NULL-terminated list (at most 64). A series is named by one index per
     * label: series = index0 * count1 + index1 (s3f_metrics_series). */
    const char *label_names[S3F_METRIC_MAX_LABELS];
    const char *const *label_values[S3F_METRIC_MAX_LABELS];
};

/* One series of a snapshot, valid during the callback only. Its labels: the registry's
 * constant label first, if it has one (s3f_metrics_set_label), then the metric's. */
struct s3f_metric_sample {
    const char *name, *help;
    enum s3f_metric_type type;
    size_t n_labels;
    const char *label_names[S3F_METRIC_MAX_LABELS + 1];
    const char *label_values[S3F_METRIC_MAX_LABELS + 1];
    double value;                /* counter, gauge */
    /* histogram: counts[i] observations <= bounds[i] (cumulative), n_buckets of them, then
     * `count` (the +Inf bucket) and `sum` (seconds) */
    size_t n_buckets;
    const double *bounds;
    const uint64_t *counts;
    uint64_t count;
    double sum;
};
/* Return non-zero to stop the walk. */
typedef int (*s3f_metric_fn)(const struct s3f_metric_sample *sample, void *ud);
/* Called at the start of every snapshot, so that the owner can set gauges (and counters it
 * counts elsewhere) from its own state. */
typedef void (*s3f_metrics_collect_fn)(struct s3f_metrics *m, void *ud);

/* A registry of at most `max_series` series (0: 4096); NULL when out of memory. Free with
 * s3f_metrics_free (NULL accepted). */
S3F_API struct s3f_metrics *s3f_metrics_new(size_t max_series);
S3F_API void s3f_metrics_free(struct s3f_metrics *m);
/* A label every series of the registry carries (copied), e.g. client="write" for a
 * process with two clients, whose registries have the same metrics: set before the first
 * snapshot. S3F_ERR_INVALID_ARGUMENT (a bad name), S3F_ERR_NO_MEMORY. */
S3F_API enum s3f_status s3f_metrics_set_label(struct s3f_metrics *m, const char *name,
                                              const char *value);
/* Register a metric; its id (>= 0), or -1 when refused: bad definition, a name already
 * registered, the registry's bound on series (or 64 metrics) reached, out of memory.
 * Not thread-safe against other registrations; updates and snapshots may run meanwhile. */
S3F_API int s3f_metrics_register(struct s3f_metrics *m, const struct s3f_metric_def *def);
/* The series of label value indexes (i1 is ignored for a metric of fewer than 2 labels). */
S3F_API size_t s3f_metrics_series(const struct s3f_metrics *m, int id, size_t i0, size_t i1);
/* Updates; an unknown id or series is ignored (and counted in s3flash_metrics_dropped_total).
 * add: a counter (n >= 0) or a gauge; set: a gauge, or a counter kept elsewhere; observe: a
 * histogram, in seconds. */
S3F_API void s3f_metrics_add(struct s3f_metrics *m, int id, size_t series, int64_t n);
S3F_API void s3f_metrics_set(struct s3f_metrics *m, int id, size_t series, int64_t v);
S3F_API void s3f_metrics_observe(struct s3f_metrics *m, int id, size_t series, double seconds);
/* Add a collector (at most 4); S3F_ERR_INVALID_ARGUMENT when full. */
S3F_API enum s3f_status s3f_metrics_add_collector(struct s3f_metrics *m, s3f_metrics_collect_fn fn,
                                                  void *ud);
/* A snapshot: the collectors run, then fn sees every series (histograms: one sample each) in
 * registration order. Thread-safe. Returns what fn returned to stop, else 0. */
S3F_API int s3f_metrics_foreach(struct s3f_metrics *m, s3f_metric_fn fn, void *ud);
/* The Prometheus text exposition format (version 0.0.4) of the registries given, in order,
 * the series of one name grouped under one HELP and TYPE (registries with the same metrics
 * tell theirs apart by their constant labels): *out (caller frees with free()) of *out_len
 * bytes, NUL-terminated. S3F_ERR_NO_MEMORY. */
S3F_API enum s3f_status s3f_metrics_prometheus(struct s3f_metrics *const *regs, size_t n_regs,
                                               char **out, size_t *out_len);

/* An exporter: one thread that serves the registries' Prometheus text over HTTP
 * (GET /metrics) and/or writes a line of their changed values to a log every interval. */
struct s3f_metrics_exporter;
struct s3f_metrics_exporter_options {
    struct s3f_metrics *const *registries; /* rendered in this order; must outlive it */
    size_t n_registries;
    /* "PORT" (bound on 127.0.0.1), "IP:PORT" or "[IPv6]:PORT" (numeric; PORT 0: any free
     * one, see s3f_metrics_exporter_port); NULL: no HTTP server. An address other than
     * loopback is refused unless allow_remote (the endpoint has no authentication). */
    const char *listen;
    int allow_remote;
    /* 0: no log lines. Else every interval, at S3F_LOG_INFO through log_fn (NULL: stderr):
     * "metrics: NAME{LABELS}=VALUE ..." of the series that changed since the last line
     * (histograms as NAME_count and NAME_sum); one more at stop. */
    uint32_t log_interval_ms;
    s3f_log_fn log_fn;
    void *log_user_data;
    /* OTLP/HTTP push (Mountpoint's --otlp-endpoint): NULL, none; else "http://HOST[:PORT]
     * [/PATH]", the values POSTed (protobuf ExportMetricsServiceRequest) to it + "/v1/metrics"
     * (unless it ends so) every otlp_interval_ms (0: 60 s) and once more at stop. A failed
     * push is logged (S3F_LOG_WARN, at most once a minute) and tried again next time.
     * otlp_resource: resource attributes besides service.name=s3flash, name and value
     * pairs, NULL-terminated (may be NULL; must outlive the exporter). */
    const char *otlp_endpoint;
    uint32_t otlp_interval_ms;
    const char *const *otlp_resource;
};
/* Start it. Errors: S3F_ERR_INVALID_ARGUMENT (a malformed or refused address or OTLP URL),
 * S3F_ERR_NETWORK (bind or listen failed, with errno's text), S3F_ERR_NO_MEMORY. Stop and
 * free with s3f_metrics_exporter_stop. */
S3F_API enum s3f_status s3f_metrics_exporter_start(const struct s3f_metrics_exporter_options *o,
                                                   struct s3f_metrics_exporter **out,
                                                   struct s3f_error *err);
/* The port the server listens on (0: none). */
S3F_API int s3f_metrics_exporter_port(const struct s3f_metrics_exporter *e);
/* Write the last log line (if logging), push the last values (OTLP), stop the thread, close the socket, free. NULL
 * accepted. */
S3F_API void s3f_metrics_exporter_stop(struct s3f_metrics_exporter *e);

/* The client's registry (owned by the client, valid until s3f_client_free). */
S3F_API struct s3f_metrics *s3f_client_metrics_registry(struct s3f_client *client);
/* A snapshot of the client's metrics: s3f_metrics_foreach on its registry. */
S3F_API int s3f_client_metrics(struct s3f_client *client, s3f_metric_fn fn, void *ud);

/* ---------------------------------------------------------------------------------------
 * s3:// URIs
 * ------------------------------------------------------------------------------------- */
/* Parse "s3://bucket/key". `bucket` and `key` receive NUL-terminated copies (key may be
 * empty: "s3://bucket" and "s3://bucket/" give ""). Errors: S3F_ERR_INVALID_URI with the
 * reason in err->message (no scheme, empty bucket, invalid bucket name, too long key). */
S3F_API enum s3f_status s3f_uri_parse(const char *uri, char *bucket, size_t bucket_len, char *key,
                              size_t key_len, struct s3f_error *err);

/* ---------------------------------------------------------------------------------------
 * Objects
 * ------------------------------------------------------------------------------------- */
struct s3f_object_info {
    uint64_t size;              /* Content-Length of the object (the whole object for ranges) */
    int64_t last_modified;      /* seconds since the epoch, UTC; 0 if unknown */
    char etag[128];             /* with its quotes, as S3 returns it */
    char content_type[128];
    char version_id[128];
    char storage_class[32];
    char checksum_crc32c[16];   /* base64, empty if the server returned none */
    char checksum_crc32[16];
    char checksum_crc64nvme[24];
    char checksum_sha256[48];
};

/* Receives downloaded bytes. `offset` is the position of `data` within the object.
 * Return 0 to continue, non-zero to stop (the call then returns S3F_ERR_ABORTED).
 * Called from the calling thread or an I/O thread, never concurrently for one call. */
typedef int (*s3f_write_fn)(void *user_data, const void *data, size_t len, uint64_t offset);

struct s3f_get_options {
    /* Byte range [range_start, range_end] inclusive. has_range = 0: the whole object. */
    int has_range;
    uint64_t range_start;
    uint64_t range_end;       /* UINT64_MAX: to the end */
    /* If set, sent as If-Match; a changed object fails with S3F_ERR_PRECONDITION_FAILED.
     * When NULL, s3flash still pins the ETag of the first response when it has to resume a
     * broken download, so bytes of two versions are never mixed. */
    const char *if_match;
    const char *version_id;
    /* 1: verify the full-object checksum the server returns (x-amz-checksum-*) when the
     * whole object was read. Mismatch: S3F_ERR_CHECKSUM. */
    int verify_checksum;
};

struct s3f_put_options {
    const char *content_type;            /* NULL: "application/octet-stream" */
    enum s3f_checksum_algorithm checksum; /* DEFAULT: CRC32C, sent as x-amz-checksum-* */
    /* 1: compute and send Content-MD5 too (every S3-compatible server verifies it). */
    int content_md5;
    /* 1: sign the payload's SHA-256 instead of UNSIGNED-PAYLOAD. */
    int sign_payload;
    /* "*": fail if the key exists (S3F_ERR_PRECONDITION_FAILED, 412). A 412 that follows an
     * attempt whose response was lost is checked with a HEAD: an object of our size and
     * checksum (or, without one, ETag = MD5 of the data) is taken as our own first
     * attempt's, and the call succeeds with the HEAD's info. */
    const char *if_none_match;
};

S3F_API enum s3f_status s3f_head_object(struct s3f_client *c, const char *bucket, const char *key,
                                const char *version_id, struct s3f_object_info *info,
                                struct s3f_error *err);

/* Stream an object (or a range) into `sink`. A connection broken mid-body is resumed from
 * the byte it reached (with If-Match on the first ETag), so `sink` sees every offset once,
 * in order. Every response is checked against what was asked (as for every download; see
 * "Responses checked" below s3f_download_options). `info` (optional) receives the object's
 * metadata. */
S3F_API enum s3f_status s3f_get_object(struct s3f_client *c, const char *bucket, const char *key,
                               const struct s3f_get_options *opts, s3f_write_fn sink,
                               void *sink_user_data, struct s3f_object_info *info,
                               struct s3f_error *err);

/* Upload `len` bytes from memory as one PutObject (at most 5 GiB). The buffer is only read
 * and must stay valid during the call. `info` (optional) receives etag/checksum. */
S3F_API enum s3f_status s3f_put_object(struct s3f_client *c, const char *bucket, const char *key,
                               const void *data, size_t len, const struct s3f_put_options *opts,
                               struct s3f_object_info *info, struct s3f_error *err);

S3F_API enum s3f_status s3f_delete_object(struct s3f_client *c, const char *bucket, const char *key,
                                  struct s3f_error *err);

/* Server-side copy (CopyObject, at most 5 GiB). 200-with-error is detected. */
S3F_API enum s3f_status s3f_copy_object(struct s3f_client *c, const char *src_bucket,
                                const char *src_key, const char *dst_bucket,
                                const char *dst_key, struct s3f_object_info *info,
                                struct s3f_error *err);

/* S3 Express One Zone directory buckets only (docs/CONFIGURATION.md).
 * Append `len` bytes (at most 5 GiB) to the object, whose size must be `offset` (0 creates
 * it): PutObject with x-amz-write-offset-bytes and the CRC32C of the bytes. Another size is
 * S3F_ERR_S3 with code InvalidWriteOffset (nothing written). An attempt whose response was
 * lost is reconciled with a HEAD (size offset + len: done). `info` (optional) receives the
 * new size and ETag. A general purpose bucket answers as its server does (S3: the header is
 * not supported). */
S3F_API enum s3f_status s3f_append_object(struct s3f_client *c, const char *bucket,
                                  const char *key, uint64_t offset, const void *data,
                                  size_t len, struct s3f_object_info *info,
                                  struct s3f_error *err);
/* Rename src_key to dst_key within the directory bucket in one atomic request
 * (RenameObject: no copy, no moment without the object; the object keeps its metadata and
 * checksums). if_none_match "*": fail with S3F_ERR_PRECONDITION_FAILED when dst_key exists;
 * NULL replaces it. No source: S3F_ERR_NOT_FOUND. A general purpose bucket:
 * S3F_ERR_UNSUPPORTED (copy and delete instead). */
S3F_API enum s3f_status s3f_rename_object(struct s3f_client *c, const char *bucket,
                                  const char *src_key, const char *dst_key,
                                  const char *if_none_match, struct s3f_error *err);
/* Whether `bucket` is an S3 Express One Zone directory bucket (its name ends in --x-s3,
 * or --xa-s3 for an access point): its listings are not in key order, its delimiter is
 * "/" only, and it has s3f_append_object and s3f_rename_object. */
S3F_API int s3f_bucket_is_directory(const char *bucket);

/* Delete many keys. Batches of at most 1000 per DeleteObjects request, with Content-MD5.
 * `failed` (optional) receives how many keys S3 reported as not deleted; the first such
 * key's error lands in `err` and the call returns its status. */
S3F_API enum s3f_status s3f_delete_objects(struct s3f_client *c, const char *bucket,
                                   const char *const *keys, size_t n_keys, size_t *failed,
                                   struct s3f_error *err);

/* ---------------------------------------------------------------------------------------
 * The transfer engine: parallel multipart uploads and ranged downloads.
 *
 * Every call below is blocking for the calling thread while requests run in parallel on
 * the client's I/O threads; any number of threads may run transfers on one client at once
 * (they share its buffer pool and request slots fairly). Failure leaves nothing behind:
 * a failed upload aborts its multipart upload and no object appears under the key; a
 * failed download to a file leaves no file. Errors name the request that failed (its S3
 * error code and request id in `err`).
 * ------------------------------------------------------------------------------------- */

/* Progress of one transfer: `done` bytes of `total` (UINT64_MAX while unknown: writers,
 * downloads before the first response). Called on the caller's thread only (the one in
 * the transfer call, or in s3f_writer_write and s3f_writer_close), never on an I/O thread
 * and never concurrently for one transfer, when parts have completed since the last call
 * (parts that complete while it runs are reported together by the next call). It may
 * block without stalling the transfer's requests: they go on meanwhile. */
typedef void (*s3f_progress_fn)(void *user_data, uint64_t done, uint64_t total);

/* One memory region (as POSIX's struct iovec); uploads only read it. */
struct s3f_iovec {
    void *base;
    size_t len;
};

struct s3f_upload_options {
    const char *content_type;             /* NULL: "application/octet-stream" */
    /* DEFAULT: the client's. The checksum of each part, sent as x-amz-checksum-<alg>, and
     * the whole-object value (FULL_OBJECT: combined from the parts) sent with Complete and
     * reported in info. NONE: no checksum. */
    enum s3f_checksum_algorithm checksum;
    /* 0: the client's part_size_bytes. 5 MiB..5 GiB; grown when the object would need
     * more than 10,000 parts. An object that fits in one part goes as one PutObject. */
    uint64_t part_size_bytes;
    s3f_progress_fn progress;
    void *progress_user_data;
};

/* Upload `len` bytes from memory (read in place, no copy; must stay valid and unchanged
 * during the call). Parts go in parallel. `info` (optional) receives size, ETag and the
 * whole-object checksum. */
S3F_API enum s3f_status s3f_upload_buffer(struct s3f_client *c, const char *bucket,
                                          const char *key, const void *data, size_t len,
                                          const struct s3f_upload_options *opts,
                                          struct s3f_object_info *info,
                                          struct s3f_error *err);
/* Upload the concatenation of `n_iov` regions (the tensors of a state dict) without
 * copying them: a part may span several regions. Empty regions are fine. */
S3F_API enum s3f_status s3f_upload_iov(struct s3f_client *c, const char *bucket,
                                       const char *key, const struct s3f_iovec *iov,
                                       size_t n_iov, const struct s3f_upload_options *opts,
                                       struct s3f_object_info *info, struct s3f_error *err);
/* Upload a regular file. Parts are read with pread by the I/O threads as they are sent
 * (no file buffering in memory); with a checksum, the calling thread reads each part once
 * more beforehand to compute it. The file must not change during the call (S3 rejects a
 * part whose checksum no longer matches). S3F_ERR_IO for a file that cannot be read. */
S3F_API enum s3f_status s3f_upload_file(struct s3f_client *c, const char *bucket,
                                        const char *key, const char *path,
                                        const struct s3f_upload_options *opts,
                                        struct s3f_object_info *info, struct s3f_error *err);

/* Server-side copies of any size (s3f_copy). */
struct s3f_copy_options {
    const char *src_version_id;           /* NULL: the current version of the source */
    /* The copy is pinned to the source's ETag as the first HEAD found it: every request
     * carries x-amz-copy-source-if-match, so a source replaced during the copy fails with
     * S3F_ERR_PRECONDITION_FAILED (and nothing is created). If set, the source must have
     * this ETag from the start. */
    const char *src_if_match;
    /* 0: max(the client's part_size_bytes, 128 MiB). Size of each UploadPartCopy, 5 MiB to
     * 5 GiB; grown when the object would need more than 10,000 parts. A part moves no byte
     * through the client, only one request, so copies use larger parts than uploads. */
    uint64_t part_size_bytes;
    /* 0: the part size. A source of at most this many bytes (capped at CopyObject's 5 GiB),
     * or one that fits in one part, is copied with one CopyObject; a larger one with
     * CreateMultipartUpload, UploadPartCopy of each part in parallel, and Complete. */
    uint64_t multipart_threshold_bytes;
    s3f_progress_fn progress;             /* after each part (bytes copied so far) */
    void *progress_user_data;
};

/* Copy src_bucket/src_key to dst_bucket/dst_key on the server, any size (up to S3's 5 TiB):
 * one HEAD of the source (size, ETag, content type), then one CopyObject, or a multipart
 * upload whose parts are UploadPartCopy requests of ranges of the source. The parts go
 * through the client's request slots like the parts of uploads, so copies share them
 * fairly with the other transfers. Every request is pinned to the source's ETag. The
 * content type is carried over; a CopyObject also copies the user metadata (x-amz-meta-*),
 * a multipart copy does not. On failure the multipart upload is aborted (retried in the
 * background if the server is away, as for uploads) and no object appears. `info`
 * (optional) receives the new object's size, ETag, last_modified and content type.
 * Errors: the source's HEAD fails (S3F_ERR_NOT_FOUND, ACCESS_DENIED...), the source
 * changed (S3F_ERR_PRECONDITION_FAILED), or a request on the destination failed. */
S3F_API enum s3f_status s3f_copy(struct s3f_client *c, const char *src_bucket,
                                 const char *src_key, const char *dst_bucket,
                                 const char *dst_key, const struct s3f_copy_options *opts,
                                 struct s3f_object_info *info, struct s3f_error *err);

/* A streaming upload of unknown length (what torch.save writes into). Bytes are copied
 * once into pool buffers; each full part is uploaded while the caller keeps writing, and
 * write blocks only when the client's pool is exhausted. The part size starts at the
 * configured one and doubles every 1000 parts (never above half the memory limit), so
 * a stream reaches terabytes within 10,000 parts. An object that fits in one part at close
 * is one PutObject; CreateMultipartUpload is sent when the second part begins, while the
 * first is still being filled. Not thread-safe: one thread uses a writer at a time.
 * Each open writer holds up to one chunk-rounded part of pool memory until it is closed:
 * keep open writers × part size under the memory limit. */
struct s3f_writer;
/* Open a writer (sends nothing yet). *out: finish it with s3f_writer_close or
 * s3f_writer_abort, which free it. */
S3F_API enum s3f_status s3f_writer_open(struct s3f_client *c, const char *bucket,
                                        const char *key,
                                        const struct s3f_upload_options *opts,
                                        struct s3f_writer **out, struct s3f_error *err);
/* Append `len` bytes (copied; the buffer may be reused on return). After any failure of
 * the upload (or its part size limit) every write returns that error. */
S3F_API enum s3f_status s3f_writer_write(struct s3f_writer *w, const void *data, size_t len,
                                         struct s3f_error *err);
/* Finish: upload what is left, complete, and free the writer. On success the object exists
 * and `info` (optional) has its size, ETag and checksum. After an error (here or earlier)
 * nothing is created: the multipart upload is aborted and the first error is returned. */
S3F_API enum s3f_status s3f_writer_close(struct s3f_writer *w, struct s3f_object_info *info,
                                         struct s3f_error *err);
/* Cancel: stop the requests, abort the multipart upload, create nothing, free the writer.
 * NULL is accepted. */
S3F_API void s3f_writer_abort(struct s3f_writer *w);
/* Bytes written so far. */
S3F_API uint64_t s3f_writer_tell(const struct s3f_writer *w);

struct s3f_download_options {
    const char *version_id;
    /* Sent as If-Match on every request. NULL: the ETag of the first response is pinned and
     * sent on the others, so an object replaced during the download fails with
     * S3F_ERR_PRECONDITION_FAILED instead of mixing two versions. */
    const char *if_match;
    /* 0: the client's part_size_bytes. Size of each ranged GET (at least 64 KiB). */
    uint64_t part_size_bytes;
    /* Verify the whole-object checksum S3 keeps (single PutObject or FULL_OBJECT multipart
     * uploads; not a checksum of part checksums) with a HEAD that runs beside the parts:
     * 0: when the download needs more than one request; 1: always; -1: never. Checks the
     * client's checksum algorithm as the bytes arrive, or, when the server keeps another
     * one only, that one in a second pass over the destination. Mismatch:
     * S3F_ERR_CHECKSUM. */
    int verify_checksum;
    /* Files: 1 to fsync the file before it is renamed into place. */
    int fsync;
    s3f_progress_fn progress;
    void *progress_user_data;
    /* A byte range instead of the whole object (s3f_download_iov, _buffer and _file only;
     * s3f_download_alloc and _stream refuse it with S3F_ERR_INVALID_ARGUMENT). Both 0: the
     * whole object. Else the bytes [range_offset, range_offset + range_bytes), range_bytes
     * 0 meaning to the end of the object; they land at the start of the destination and
     * info->size is their count. The range is downloaded as a whole object is: a first
     * ranged GET learns the object's size and ETag (pass the ETag you know as if_match, so
     * that an object replaced since fails with S3F_ERR_PRECONDITION_FAILED instead of
     * mixing two versions), then parts of part_size_bytes in parallel, each answer checked
     * (ETag, the object's size, Content-Range exact). A range that does not lie within the
     * object (one starting at its end included) fails with S3F_ERR_INVALID_RANGE, naming the
     * object's size. verify_checksum is not used (the server's checksum is of the whole
     * object) and neither is the block cache (cache_dir). */
    uint64_t range_offset;
    uint64_t range_bytes;
};

/* Responses checked (every download, the reader, s3f_get_object): each GET's answer is
 * checked against what was asked before its bytes are used. Its ETag must be the pinned
 * one (If-Match, or the first response's) and its total size the known one (else
 * S3F_ERR_PRECONDITION_FAILED, as for a server or gateway that ignores If-Match); a 206
 * must carry a Content-Range for exactly the range asked with a matching Content-Length
 * (else S3F_ERR_BAD_RESPONSE, retried); a consistent 206 that ends early is continued with
 * a request for the rest; a 200 to a ranged GET (the whole object) is used by offset. The
 * call never returns S3F_OK with missing or foreign bytes. docs/TRANSFER.md has the table. */

/* Download a whole object into `buf`. The size comes from the first ranged GET (no HEAD
 * first); the other parts then go in parallel, each written straight to its place.
 * info->size is the object's size (the bytes written). An object larger than `buf_len`
 * fails with S3F_ERR_INVALID_ARGUMENT, info->size set to the size needed. On failure the
 * content of `buf` is unspecified. */
S3F_API enum s3f_status s3f_download_buffer(struct s3f_client *c, const char *bucket,
                                            const char *key, void *buf, size_t buf_len,
                                            const struct s3f_download_options *opts,
                                            struct s3f_object_info *info,
                                            struct s3f_error *err);
/* Allocates the destination of s3f_download_alloc: `size` bytes (0 for an empty object),
 * or NULL to fail the call with S3F_ERR_NO_MEMORY (also a way to refuse an object larger
 * than the caller wants: the GET is then stopped). Called at most once per call, on the
 * calling thread, with no lock of the client held; it may block (take a lock, Python's GIL). */
typedef void *(*s3f_alloc_fn)(void *user_data, size_t size);

/* Download a whole object whose size is not known beforehand into memory allocated for it:
 * one GET without a Range header and no HEAD (what a dataset item of unknown size needs).
 * The size comes from the response's Content-Length, the ETag from its header (info->etag).
 * The destination is allocated once, as soon as the response's headers tell the size: by
 * `alloc(alloc_user_data, size)` if given, else with malloc (free it with free()). The
 * bytes are written straight into it (those that arrive before it exists are staged and
 * copied once), so memory holds one copy of the object; the object is not split into
 * parallel parts (s3f_download_buffer does that when the size is known). A connection
 * broken mid-body is resumed from the byte it reached with If-Match on the first ETag and
 * every answer is checked (see "Responses checked"); errors are retried as for every
 * request. Options: version_id, if_match as for the other
 * downloads; verify_checksum: 0 or 1 ask for the object's checksum with the GET
 * (x-amz-checksum-mode) and verify the whole-object checksum the response carries (CRC32C,
 * CRC32 or CRC64NVME; a checksum of part checksums, "...-N", is not of the bytes and is
 * skipped), -1 never; mismatch: S3F_ERR_CHECKSUM with the response's request id. part_size,
 * fsync and progress are not used. On success *data and *len are the object's bytes and
 * size and `info` (optional) its metadata. On failure *data is NULL and *len 0; memory from
 * malloc is freed, memory from `alloc` stays the caller's (tracked through user_data). */
S3F_API enum s3f_status s3f_download_alloc(struct s3f_client *c, const char *bucket,
                                           const char *key,
                                           const struct s3f_download_options *opts,
                                           s3f_alloc_fn alloc, void *alloc_user_data,
                                           void **data, size_t *len,
                                           struct s3f_object_info *info,
                                           struct s3f_error *err);
/* Download a whole object to `sink`, in order, from one offset to the next (stdout, a
 * pipe, a socket: a destination that cannot be written out of order), with several ranged
 * GETs in flight at once: as many as the link needs (see s3f_reader: the read-ahead of a
 * sequential read, sized from the measured bandwidth-delay product, within the memory
 * limit). One HEAD first (size, ETag, checksum; a HEAD refused with 400, 403 or 404 is
 * asked again as a GET of one byte, so that the error names S3's code, e.g. NoSuchKey or
 * NoSuchBucket); every GET carries If-Match. An object of
 * at most one part (the client's part_size_bytes) goes in one GET, as s3f_get_object,
 * its bytes handed over as they arrive. `sink` runs
 * on the calling thread; a non-zero return stops the download (S3F_ERR_ABORTED).
 * Options: version_id, if_match, progress; verify_checksum >= 0 (0 or 1) verifies the
 * whole-object checksum the server keeps (CRC32C, CRC32 or CRC64NVME; not a checksum of
 * part checksums) over the bytes delivered, at the end: S3F_ERR_CHECKSUM after the sink
 * has had every byte. part_size_bytes and fsync are not used. */
S3F_API enum s3f_status s3f_download_stream(struct s3f_client *c, const char *bucket,
                                            const char *key,
                                            const struct s3f_download_options *opts,
                                            s3f_write_fn sink, void *sink_user_data,
                                            struct s3f_object_info *info,
                                            struct s3f_error *err);
/* Many whole objects fetched concurrently and taken in the order they were added: what a
 * dataset that reads ahead needs (docs/TRANSFER.md, "Many small objects"). Each added
 * object is one GET without a Range and no HEAD, queued at once on the client's scheduler,
 * so as many run together as the client allows data requests in flight
 * (max_inflight_requests, shared fairly with its other transfers) on its I/O threads: no
 * thread per object. Its bytes land in one buffer of the object's size, allocated with
 * malloc when the response's headers tell the size. s3f_fetch_take waits for the oldest
 * object not yet taken, whatever order they complete in. Every answer is checked as for
 * s3f_download_alloc (resumed mid-body with If-Match on the first ETag, retried as every
 * request, the whole-object checksum verified when the response carries one). The block
 * cache (cache_dir) is not used. Memory: the caller bounds it by how many it adds before
 * taking (and by max_size). Not thread-safe: one thread adds and takes. */
struct s3f_fetch;
struct s3f_fetch_options {
    /* 0 or 1: verify the whole-object checksum a response carries (x-amz-checksum-mode);
     * -1: never. Mismatch: S3F_ERR_CHECKSUM for that object. */
    int verify_checksum;
};
/* *out: free with s3f_fetch_free. opts may be NULL. */
S3F_API enum s3f_status s3f_fetch_new(struct s3f_client *c, const struct s3f_fetch_options *opts,
                                      struct s3f_fetch **out, struct s3f_error *err);
/* Queue the GET of s3://bucket/key; it starts as soon as a request slot is free. if_match
 * (NULL or "": none) pins the ETag a listing gave (a replaced object then fails with
 * S3F_ERR_PRECONDITION_FAILED). max_size (0: no limit): an object larger than that is not
 * read; the GET stops after its headers and s3f_fetch_take returns
 * S3F_ERR_INVALID_ARGUMENT with info->size the object's size (read it with a reader).
 * Errors here (a bad bucket or key, no memory) queue nothing. */
S3F_API enum s3f_status s3f_fetch_add(struct s3f_fetch *f, const char *bucket,
                                      const char *key, const char *if_match,
                                      uint64_t max_size, struct s3f_error *err);
/* Objects added and not yet taken. */
S3F_API size_t s3f_fetch_pending(const struct s3f_fetch *f);
/* Bytes the fetch holds now (buffers of objects fetched or arriving, not yet taken) and the
 * most it ever held. Thread-safe. */
S3F_API void s3f_fetch_held(struct s3f_fetch *f, uint64_t *held, uint64_t *high_water);
/* Wait for the oldest object not yet taken and hand it over: on success *data (free it with
 * free(); never NULL, also for an empty object) and *len are its bytes, `info` (optional)
 * its metadata. On failure (that object's own error: NoSuchKey, a changed ETag...) *data
 * is NULL and err says what S3 said; the object is taken all the same and the next call
 * waits for the next one. With nothing added: S3F_ERR_INVALID_ARGUMENT. */
S3F_API enum s3f_status s3f_fetch_take(struct s3f_fetch *f, void **data, size_t *len,
                                       struct s3f_object_info *info, struct s3f_error *err);
/* Stop what is queued or running (running GETs stop at their next bytes; waits for them),
 * drop what was fetched and not taken, free the fetch. NULL is accepted. */
S3F_API void s3f_fetch_free(struct s3f_fetch *f);

/* Download into the concatenation of `n_iov` regions (the object may be shorter): the whole
 * object, or the range of opts->range_offset / range_bytes (what s3flash.safetensors loads
 * a file's data section with, the tensors' memory as the regions). */
S3F_API enum s3f_status s3f_download_iov(struct s3f_client *c, const char *bucket,
                                         const char *key, const struct s3f_iovec *iov,
                                         size_t n_iov, const struct s3f_download_options *opts,
                                         struct s3f_object_info *info, struct s3f_error *err);
/* Download into a file: parts are written with pwrite at their offsets into a temporary
 * file in the same directory, which is renamed to `path` once everything arrived (atomic
 * replace); on failure it is removed and `path` is untouched. */
S3F_API enum s3f_status s3f_download_file(struct s3f_client *c, const char *bucket,
                                          const char *key, const char *path,
                                          const struct s3f_download_options *opts,
                                          struct s3f_object_info *info,
                                          struct s3f_error *err);

/* A random-access reader (what torch.load and dataset loaders read from). Sequential reads
 * start a read-ahead window at 1 MiB that doubles up to what fills the link (as many
 * segments in flight as the client's measured bandwidth-delay product needs, each its own
 * request) and readahead_max_bytes; a jump shrinks the window back. The last bytes of the object
 * (tail_bytes) are fetched once, on the first read near the end, and kept (zip central
 * directories). Large reads go straight into the caller's buffer; others are copied once
 * from the window. Every request carries If-Match with the ETag from open, and every answer
 * must match that ETag and the size from open (see "Responses checked"). Not thread-safe:
 * one thread uses a reader at a time. */
struct s3f_reader;
struct s3f_reader_options {
    const char *version_id;
    const char *if_match;          /* NULL: the ETag found at open */
    /* 0: half the memory limit (also the most allowed). Cap of the read-ahead window, which
     * lives in the client's buffer pool (read-ahead is skipped when the pool is full); the
     * window itself follows the link (docs/TRANSFER.md). */
    uint64_t readahead_max_bytes;
    /* 0: 1 MiB. The cached tail; -1 cast to uint64_t (UINT64_MAX) disables it. */
    uint64_t tail_bytes;
    /* 1: the caller knows the object (from a listing): its size is known_size and its ETag
     * known_etag (required), and open sends no HEAD. Every GET carries If-Match with that
     * ETag, so an object replaced since fails with S3F_ERR_PRECONDITION_FAILED, and a
     * deleted one with S3F_ERR_NOT_FOUND, at the first read instead of at open. */
    int known;
    uint64_t known_size;
    const char *known_etag;
    /* 0: never. Random reads (a second jump) of an object no larger than this (capped at
     * half the memory limit) fetch all of it in the background with parallel ranged GETs
     * into the buffer pool (what the pool has room for), and are served from what has
     * arrived; a read ahead of the fill fetches what it needs. docs/TRANSFER.md. */
    uint64_t fill_max_bytes;
};
/* Open: one HEAD (size and ETag), none with `known`. *out: free with s3f_reader_close. */
S3F_API enum s3f_status s3f_reader_open(struct s3f_client *c, const char *bucket,
                                        const char *key,
                                        const struct s3f_reader_options *opts,
                                        struct s3f_reader **out, struct s3f_error *err);
/* Read up to `len` bytes at the current position into `buf` and advance. *n_read is `len`
 * unless the end of the object comes first (0 at the end). */
S3F_API enum s3f_status s3f_reader_read(struct s3f_reader *r, void *buf, size_t len,
                                        size_t *n_read, struct s3f_error *err);
/* Read at `offset` without moving the position (same window and cache). */
S3F_API enum s3f_status s3f_reader_pread(struct s3f_reader *r, void *buf, size_t len,
                                         uint64_t offset, size_t *n_read,
                                         struct s3f_error *err);
/* whence: 0 (SEEK_SET), 1 (SEEK_CUR), 2 (SEEK_END). Positions past the end are allowed
 * (reads there return 0 bytes); before the start is S3F_ERR_INVALID_ARGUMENT. */
S3F_API enum s3f_status s3f_reader_seek(struct s3f_reader *r, int64_t offset, int whence,
                                        uint64_t *new_position, struct s3f_error *err);
S3F_API uint64_t s3f_reader_tell(const struct s3f_reader *r);
S3F_API uint64_t s3f_reader_size(const struct s3f_reader *r);
/* Metadata from open (ETag, size, content type...). Valid until close. */
S3F_API const struct s3f_object_info *s3f_reader_info(const struct s3f_reader *r);
/* Stop the read-ahead and free the reader. NULL is accepted. */
S3F_API void s3f_reader_close(struct s3f_reader *r);

/* ---------------------------------------------------------------------------------------
 * Buckets
 * ------------------------------------------------------------------------------------- */
/* CreateBucket in the client's region (a LocationConstraint is sent outside us-east-1).
 * An existing bucket owned by the caller is S3F_OK (BucketAlreadyOwnedByYou). */
S3F_API enum s3f_status s3f_create_bucket(struct s3f_client *c, const char *bucket,
                                  struct s3f_error *err);
/* DeleteBucket; the bucket must be empty (else S3F_ERR_S3 with code BucketNotEmpty). */
S3F_API enum s3f_status s3f_delete_bucket(struct s3f_client *c, const char *bucket,
                                  struct s3f_error *err);

struct s3f_bucket_entry {
    char *name;
    int64_t creation_date; /* Unix seconds, 0 when absent */
};
struct s3f_bucket_list {
    struct s3f_bucket_entry *buckets;
    size_t n_buckets;
};
/* ListBuckets (GET / on the service endpoint): the buckets the credentials own, in the
 * server's order. Denied (no s3:ListAllMyBuckets): S3F_ERR_ACCESS_DENIED. On success *out
 * is the list; free it with s3f_bucket_list_free. */
S3F_API enum s3f_status s3f_list_buckets(struct s3f_client *c, struct s3f_bucket_list **out,
                                         struct s3f_error *err);
S3F_API void s3f_bucket_list_free(struct s3f_bucket_list *list);

/* ---------------------------------------------------------------------------------------
 * Listing
 * ------------------------------------------------------------------------------------- */
struct s3f_list_options {
    const char *prefix;
    const char *delimiter;
    const char *continuation_token;
    const char *start_after;
    int max_keys;                /* 0: server default (1000) */
};

struct s3f_list_entry {
    char *key;
    uint64_t size;
    int64_t last_modified;
    char *etag;
    char *storage_class;
};

struct s3f_list_page {
    struct s3f_list_entry *objects;
    size_t n_objects;
    char **common_prefixes;
    size_t n_common_prefixes;
    int is_truncated;
    char *next_continuation_token; /* NULL when not truncated */
};

/* One ListObjectsV2 request. On success *out is the page; free with s3f_list_page_free. */
S3F_API enum s3f_status s3f_list_objects_v2(struct s3f_client *c, const char *bucket,
                                    const struct s3f_list_options *opts,
                                    struct s3f_list_page **out, struct s3f_error *err);
S3F_API void s3f_list_page_free(struct s3f_list_page *page);

/* The continuation tokens one listing has followed, so that a listing page after page ends
 * even when the server does not: a page that hands back a token the listing already used
 * (the same token again, or a longer cycle) would otherwise make the listing ask forever.
 * Every token is remembered (as 16 bytes of its SHA-256: an honest listing, whose tokens
 * never repeat, is never cut), 16 bytes per page. Start with `struct s3f_list_tokens *t =
 * NULL` and free with s3f_list_tokens_free (NULL is fine). One per listing, one thread. */
struct s3f_list_tokens;
/* After `page`: *next is the token to ask the next page with, borrowed from *t (valid until
 * the next call or the free), or NULL when the listing is complete (the page is not
 * truncated). *t is allocated on first use. A truncated page whose token is missing, empty,
 * or one this listing already followed: S3F_ERR_BAD_RESPONSE naming the server's fault
 * (*next NULL); out of memory: S3F_ERR_NO_MEMORY. `bucket` (optional) goes into err. */
S3F_API enum s3f_status s3f_list_tokens_next(struct s3f_list_tokens **t,
                                             const struct s3f_list_page *page,
                                             const char *bucket, const char **next,
                                             struct s3f_error *err);
S3F_API void s3f_list_tokens_free(struct s3f_list_tokens *t);

/* ---------------------------------------------------------------------------------------
 * Multipart uploads (low level; the transfer engine drives these for you)
 * ------------------------------------------------------------------------------------- */
struct s3f_part_info {
    int part_number;
    uint64_t size;
    char etag[128];
    char checksum[24];  /* base64 of the part's checksum, empty if none */
    int64_t last_modified;
    /* The algorithm of `checksum`, which names its element on completion
     * (DEFAULT: CRC32C; NONE: the checksum is not sent). */
    enum s3f_checksum_algorithm checksum_algorithm;
};

/* Start an upload. *upload_id receives a malloc'ed id; free() it. */
S3F_API enum s3f_status s3f_create_multipart_upload(struct s3f_client *c, const char *bucket,
                                            const char *key,
                                            const struct s3f_put_options *opts,
                                            char **upload_id, struct s3f_error *err);
/* Upload part `part_number` (1..10000). `checksum` selects the part checksum (DEFAULT:
 * CRC32C; must match what CreateMultipartUpload announced). `out` receives ETag/checksum. */
S3F_API enum s3f_status s3f_upload_part(struct s3f_client *c, const char *bucket, const char *key,
                                const char *upload_id, int part_number, const void *data,
                                size_t len, enum s3f_checksum_algorithm checksum,
                                struct s3f_part_info *out, struct s3f_error *err);
/* Upload part `part_number` (1..10000) of `upload_id` by copying bytes [first, last]
 * (inclusive, at most 5 GiB) of the object src_bucket/src_key on the server
 * (UploadPartCopy); `last` = UINT64_MAX copies the whole source (at most 5 GiB).
 * `src_version_id` (optional) names a version of the source; `src_if_match` (optional) is
 * sent as x-amz-copy-source-if-match, so a source replaced since its ETag was read fails
 * with S3F_ERR_PRECONDITION_FAILED. A 200 response carrying an error document fails with
 * that error. `out` (optional) receives part_number, size (0 without a range), the ETag,
 * last_modified and the part checksum if the server returned one. Strings are borrowed for
 * the call only. */
S3F_API enum s3f_status s3f_upload_part_copy(struct s3f_client *c, const char *bucket,
                                             const char *key, const char *upload_id,
                                             int part_number, const char *src_bucket,
                                             const char *src_key, const char *src_version_id,
                                             uint64_t first, uint64_t last,
                                             const char *src_if_match,
                                             struct s3f_part_info *out,
                                             struct s3f_error *err);
/* Complete with `n_parts` parts in ascending part_number order. A 200 response carrying an
 * error document fails with that error. `info` receives the final ETag (and checksum). */
S3F_API enum s3f_status s3f_complete_multipart_upload(struct s3f_client *c, const char *bucket,
                                              const char *key, const char *upload_id,
                                              const struct s3f_part_info *parts,
                                              size_t n_parts, struct s3f_object_info *info,
                                              struct s3f_error *err);
S3F_API enum s3f_status s3f_abort_multipart_upload(struct s3f_client *c, const char *bucket,
                                           const char *key, const char *upload_id,
                                           struct s3f_error *err);

struct s3f_parts_page {
    struct s3f_part_info *parts;
    size_t n_parts;
    int is_truncated;
    int next_part_number_marker;
};
/* One ListParts request starting after `part_number_marker`. Free with s3f_parts_page_free. */
S3F_API enum s3f_status s3f_list_parts(struct s3f_client *c, const char *bucket, const char *key,
                               const char *upload_id, int part_number_marker,
                               struct s3f_parts_page **out, struct s3f_error *err);
S3F_API void s3f_parts_page_free(struct s3f_parts_page *page);

struct s3f_upload_entry {
    char *key;
    char *upload_id;
    int64_t initiated;
};
struct s3f_uploads_page {
    struct s3f_upload_entry *uploads;
    size_t n_uploads;
    int is_truncated;
    char *next_key_marker;
    char *next_upload_id_marker;
};
/* One ListMultipartUploads request. Free with s3f_uploads_page_free. */
S3F_API enum s3f_status s3f_list_multipart_uploads(struct s3f_client *c, const char *bucket,
                                           const char *prefix, const char *key_marker,
                                           const char *upload_id_marker,
                                           struct s3f_uploads_page **out,
                                           struct s3f_error *err);
S3F_API void s3f_uploads_page_free(struct s3f_uploads_page *page);

/* ---------------------------------------------------------------------------------------
 * Presigned URLs
 * ------------------------------------------------------------------------------------- */
/* A presigned URL for `method` ("GET", "PUT", "DELETE", "HEAD") valid `expires_s` seconds
 * (1..604800). *url receives a malloc'ed string; free() it. */
S3F_API enum s3f_status s3f_presign(struct s3f_client *c, const char *method, const char *bucket,
                            const char *key, uint32_t expires_s, char **url,
                            struct s3f_error *err);

/* ---------------------------------------------------------------------------------------
 * safetensors headers (src/format/safetensors.c)
 * ------------------------------------------------------------------------------------- */
/* A safetensors file is an 8-byte little-endian header length N, N bytes of JSON naming
 * each tensor's dtype, shape and data_offsets (and an optional "__metadata__" map of
 * strings), then the data section the offsets count from. The header is checked with the
 * rules of safetensors' own loader (0.8) before any tensor byte is read, so that a hostile
 * file fails with a message naming what was wrong, and a load never reads past the data. */
#define S3F_SAFETENSORS_MAX_HEADER_BYTES ((uint64_t)100000000) /* safetensors' own cap */

struct s3f_safetensors_tensor {
    const char *name;       /* decoded UTF-8, NUL-terminated (a "\u0000" in it stays one) */
    size_t name_len;
    const char *dtype;      /* a static string: "BOOL", "U8", "BF16", "F8_E4M3", ... */
    unsigned dtype_bits;    /* bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64 */
    size_t n_dims;          /* 0: a scalar */
    uint64_t *shape;
    uint64_t begin, end;    /* [begin, end) within the data section */
};
struct s3f_safetensors_kv {
    const char *key, *value; /* decoded UTF-8, NUL-terminated */
    size_t key_len, value_len;
};
struct s3f_safetensors_header {
    uint64_t header_bytes;  /* N */
    uint64_t data_offset;   /* 8 + N: where the data section starts in the file */
    uint64_t data_bytes;    /* the data section's size: the file's size - data_offset */
    struct s3f_safetensors_tensor *tensors; /* in file order (by begin, then end) */
    size_t n_tensors;
    struct s3f_safetensors_kv *metadata;    /* "__metadata__", in the header's order */
    size_t n_metadata;
    int has_metadata;       /* 1: the header had "__metadata__" (an object, or null) */
};

/* The header's length N from the first 8 bytes of a file of `file_size` bytes, checked:
 * the file must hold 8 + N bytes and N be at most max_header_bytes (0:
 * S3F_SAFETENSORS_MAX_HEADER_BYTES). Errors: S3F_ERR_INVALID_ARGUMENT, the message saying
 * which. Thread-safe (no state). */
S3F_API enum s3f_status s3f_safetensors_header_length(const void *first8, uint64_t file_size,
                                                      uint64_t max_header_bytes,
                                                      uint64_t *header_bytes,
                                                      struct s3f_error *err);
/* Parse and validate the header: `data` holds the first `len` bytes of a file of
 * `file_size` bytes, at least 8 + N (what s3f_safetensors_header_length returns; more is
 * ignored). Checked: the length (as above); UTF-8 JSON, an object, nested at most 16 deep,
 * nothing after it but whitespace; each tensor an object with a known dtype, a shape of
 * non-negative integers and data_offsets of two; "__metadata__" an object of strings (or
 * null); names unique; shape x dtype bits whole bytes and equal to end - begin; the
 * tensors, in order of their offsets, tiling the data section exactly (no overlap, no gap,
 * nothing past its end, nothing left after the last). Members of a tensor other than
 * those three are ignored, as safetensors does. On success *out (free with
 * s3f_safetensors_free). Errors: S3F_ERR_INVALID_ARGUMENT with a message naming the tensor
 * and what was wrong (the header's bytes are never copied into it, names cut at 80 bytes),
 * S3F_ERR_NO_MEMORY. Thread-safe (no state). */
S3F_API enum s3f_status s3f_safetensors_parse(const void *data, size_t len, uint64_t file_size,
                                              uint64_t max_header_bytes,
                                              struct s3f_safetensors_header **out,
                                              struct s3f_error *err);
/* NULL is accepted. */
S3F_API void s3f_safetensors_free(struct s3f_safetensors_header *h);

#ifdef __cplusplus
}
#endif
#endif /* S3FLASH_S3FLASH_H */
