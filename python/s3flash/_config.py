"""S3ClientConfig: the client's settings, with s3torchconnector's names and defaults."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

MiB = 1024 * 1024

SSE_MODES = ("AES256", "aws:kms", "aws:kms:dsse")


def _default_max_attempts() -> int:
    """AWS_MAX_ATTEMPTS, as the CLI and the AWS SDKs read it; else s3torchconnector's 10."""
    v = os.environ.get("AWS_MAX_ATTEMPTS", "")
    if not v:
        return 10
    try:
        n = int(v)
    except ValueError:
        n = 0
    if not (1 <= n <= 100):
        raise ValueError(f"AWS_MAX_ATTEMPTS must be a number from 1 to 100, not {v!r}")
    return n


def _customer_key(name: str, v: Any) -> Optional[bytes]:
    """An SSE-C key: None, or its 32 bytes. Errors never show it."""
    if v is None:
        return None
    if isinstance(v, str) or not isinstance(v, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be the key's 32 bytes (bytes, e.g. "
                        f"open(path, 'rb').read()), not {type(v).__name__}")
    v = bytes(v)
    if name == "sse_copy_source_customer_key" and not v:
        return v  # b"": the source of copies has no SSE-C key
    if len(v) != 32:
        raise ValueError(f"{name} must be 32 bytes (an AES-256 key), not {len(v)} bytes")
    return v


def is_directory_bucket(bucket: str) -> bool:
    """Whether ``bucket`` is an S3 Express One Zone directory bucket (NAME--ZONE-ID--x-s3, or
    --xa-s3 for its access points): its listings come in no key order."""
    return bucket.endswith("--x-s3") or bucket.endswith("--xa-s3")


@dataclass(frozen=True)
class S3ClientConfig:
    """Configurable parameters of the S3 client (same fields as s3torchconnector's).

    Args:
        throughput_target_gbps: throughput, in Gbit/s, the engine sizes its concurrency for
            (requests in flight = ceil(gbps / 0.4), at least 4). 10.0 by default.
        part_size: part size of multipart uploads and ranged GETs, 5 MiB..5 GiB; grown per
            object when it would need more than 10,000 parts. 8 MiB by default.
        unsigned: send unsigned requests (public buckets); no credentials are looked up.
        force_path_style: always address buckets path-style (http://host/bucket/key).
        max_attempts: attempts per request, the first included (AWS standard retry mode).
        profile: profile of the shared AWS config/credentials files.
        requester_pays: send ``x-amz-request-payer: requester`` (signed) on every request:
            the caller pays for requests and transfer on a Requester Pays bucket.

    s3flash extensions (keyword-only in spirit; all optional):
        memory_limit: bound, in bytes, of the memory shared by all writers and readers of
            the client (0: 512 MiB; at least 16 MiB): the buffer pool and, with
            ``cache_dir``, the block cache's insert queue (an eighth of it, at most 32 MiB).
        memory_wait_timeout_ms: how long a writer waits for pool memory that nothing gives
            back (the pool held by other writers' unfinished parts, no request in flight)
            before its write fails with MemoryError naming the pool (0: 60000 ms).
        max_inflight_requests: data requests in flight across the client (0: from the
            throughput target).
        io_threads: threads that drive the HTTP connections (0: 2).
        checksum: 'crc32c' (default), 'crc32', 'crc64nvme' or 'none'.
        access_key_id, secret_access_key, session_token: static credentials instead of the
            default AWS chain. Never shown in repr() or errors.
        ca_bundle: CA bundle file for TLS (default: AWS_CA_BUNDLE, else the system's).
        cache_dir: a node-local block cache (docs/CACHE.md): readers, datasets and
            checkpoint loads keep the blocks they read under this directory, checked by
            CRC32C, valid while the object's ETag is, shared by the processes of the node
            and kept across runs; the second epoch or restore reads from local disk.
            None: no cache.
        cache_max_bytes: bound of the cache's files (0: 10 GiB); least recently used
            blocks are evicted beyond it.
        cache_min_free_bytes: free space the cache leaves on its file system (0: 5%).
        express_read_only: S3 Express One Zone directory buckets (NAME--ZONE--x-s3, which
            need no setting: recognised from the name, as s3torchconnector does) get
            ReadOnly sessions from CreateSession: for clients that only read (datasets,
            checkpoint loads).
        disable_express_session_auth: True signs directory-bucket requests with the
            caller's own credentials instead of sessions (None: the environment's
            AWS_S3_DISABLE_EXPRESS_SESSION_AUTH, the profile's, else sessions).

    Server-side encryption and request options (docs/CONFIGURATION.md has the headers each
    one sends and the requests that carry them):
        sse: server-side encryption of the objects written: 'AES256' (SSE-S3), 'aws:kms'
            (SSE-KMS) or 'aws:kms:dsse' (DSSE-KMS). None: the bucket's default.
        sse_kms_key_id: the KMS key (id, ARN or alias) of 'aws:kms' / 'aws:kms:dsse'.
        sse_kms_encryption_context: its encryption context, a dict of strings (or its
            JSON text).
        bucket_key_enabled: True / False sends the S3 Bucket Key flag with SSE-KMS; None
            leaves it to the bucket.
        sse_customer_key: SSE-C, the customer-provided AES-256 key (its 32 bytes) of every
            object written and read. A secret: never in repr(), an error or a log; wiped
            from the native client's memory when it is freed. Not combined with ``sse``.
        sse_copy_source_customer_key: SSE-C key of the source of server-side copies (None:
            ``sse_customer_key``; b"": none).
        storage_class: storage class of the objects written (e.g. 'INTELLIGENT_TIERING').
        expected_bucket_owner: account id that must own the bucket (every request fails
            with 403 otherwise).
        acl: canned ACL of the objects written (e.g. 'bucket-owner-full-control').
        user_agent_extra: appended to the User-Agent ("s3flash/VERSION TEXT").
        proxy: HTTP(S) proxy URL of S3 requests (None: HTTPS_PROXY / HTTP_PROXY /
            ALL_PROXY, lower case first; "": none). Not in repr() (it may hold a password).
        no_proxy: hosts reached directly (None: NO_PROXY).
        proxy_ca_bundle: CA bundle of an https:// proxy (None: S3FLASH_PROXY_CA_BUNDLE, the
            profile's, else ``ca_bundle``).

    max_attempts defaults to AWS_MAX_ATTEMPTS when it is set (as the CLI and the AWS SDKs),
    else to 10 (s3torchconnector's default).
    """

    throughput_target_gbps: float = 10.0
    part_size: int = 8 * MiB
    unsigned: bool = False
    force_path_style: bool = False
    max_attempts: int = field(default_factory=_default_max_attempts)
    profile: Optional[str] = None
    requester_pays: bool = False
    # s3flash extensions
    memory_limit: int = 0
    memory_wait_timeout_ms: int = 0
    max_inflight_requests: int = 0
    io_threads: int = 0
    checksum: Optional[str] = None
    access_key_id: Optional[str] = field(default=None, repr=False)
    secret_access_key: Optional[str] = field(default=None, repr=False)
    session_token: Optional[str] = field(default=None, repr=False)
    ca_bundle: Optional[str] = None
    cache_dir: Optional[str] = None
    cache_max_bytes: int = 0
    cache_min_free_bytes: int = 0
    express_read_only: bool = False
    disable_express_session_auth: Optional[bool] = None
    # server-side encryption and request options
    sse: Optional[str] = None
    sse_kms_key_id: Optional[str] = None
    sse_kms_encryption_context: Optional[Union[str, Mapping[str, str]]] = None
    bucket_key_enabled: Optional[bool] = None
    sse_customer_key: Optional[bytes] = field(default=None, repr=False)
    sse_copy_source_customer_key: Optional[bytes] = field(default=None, repr=False)
    storage_class: Optional[str] = None
    expected_bucket_owner: Optional[str] = None
    acl: Optional[str] = None
    user_agent_extra: Optional[str] = None
    proxy: Optional[str] = field(default=None, repr=False)
    no_proxy: Optional[str] = None
    proxy_ca_bundle: Optional[str] = None

    def __post_init__(self) -> None:
        self._check_request_options()
        if not (5 * MiB <= self.part_size <= 5 * 1024 * MiB):
            raise ValueError(
                f"part_size must be between 5 MiB and 5 GiB, got {self.part_size}")
        if self.throughput_target_gbps <= 0:
            raise ValueError(
                f"throughput_target_gbps must be > 0, got {self.throughput_target_gbps}")
        if not isinstance(self.memory_wait_timeout_ms, int) or isinstance(
                self.memory_wait_timeout_ms, bool):
            raise TypeError("memory_wait_timeout_ms must be an int (milliseconds), got "
                            f"{type(self.memory_wait_timeout_ms).__name__}")
        if not (0 <= self.memory_wait_timeout_ms <= 2**32 - 1):
            raise ValueError("memory_wait_timeout_ms must be 0 (the default, 60 s) to "
                             f"4294967295 milliseconds, got {self.memory_wait_timeout_ms}")
        if self.cache_max_bytes < 0 or self.cache_min_free_bytes < 0:
            raise ValueError("cache_max_bytes and cache_min_free_bytes must be >= 0")
        if not (1 <= self.max_attempts <= 100):
            raise ValueError(f"max_attempts must be between 1 and 100, got {self.max_attempts}")
        if self.requester_pays and self.unsigned:
            # as upstream: x-amz-request-payer is honoured only on a signed request (S3
            # bills the requester's account, so it must know who that is)
            raise ValueError("requester_pays=True needs signed requests: it cannot be "
                             "combined with unsigned=True")

    def _check_request_options(self) -> None:
        for name in ("sse_customer_key", "sse_copy_source_customer_key"):
            object.__setattr__(self, name, _customer_key(name, getattr(self, name)))
        ctx = self.sse_kms_encryption_context
        if isinstance(ctx, Mapping):  # kept as its JSON text: the config stays hashable
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in ctx.items()):
                raise TypeError("sse_kms_encryption_context must map strings to strings")
            object.__setattr__(self, "sse_kms_encryption_context",
                               json.dumps(dict(ctx), separators=(",", ":"), sort_keys=True))
        if self.sse is not None and self.sse not in SSE_MODES:
            raise ValueError(f"sse must be one of {', '.join(SSE_MODES)}, not {self.sse!r}")
        kms = self.sse is not None and self.sse.startswith("aws:kms")
        if not kms and (self.sse_kms_key_id or self.sse_kms_encryption_context or
                        self.bucket_key_enabled is not None):
            raise ValueError("sse_kms_key_id, sse_kms_encryption_context and "
                             "bucket_key_enabled need sse='aws:kms' or 'aws:kms:dsse'")
        if self.sse is not None and self.sse_customer_key is not None:
            raise ValueError(f"sse={self.sse!r} and sse_customer_key (SSE-C) exclude each "
                             "other")
