"""S3Client: one native client (connections, I/O threads, buffer pool) and its operations."""

from __future__ import annotations

import base64
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from . import _s3flash
from ._config import S3ClientConfig

if TYPE_CHECKING:
    from ._reader import S3Reader
    from ._writer import S3Writer


class ObjectInfo(NamedTuple):
    """One entry of a listing."""

    key: str
    size: int
    last_modified: int
    etag: str
    storage_class: str


def _native_client(region: Optional[str], endpoint: Optional[str],
                   config: S3ClientConfig) -> _s3flash.Client:
    return _s3flash.Client(
        region=region or None,
        endpoint=endpoint or None,
        profile=config.profile,
        force_path_style=config.force_path_style,
        unsigned=config.unsigned,
        access_key_id=config.access_key_id,
        secret_access_key=config.secret_access_key,
        session_token=config.session_token,
        max_attempts=config.max_attempts,
        throughput_target_gbps=config.throughput_target_gbps,
        part_size=config.part_size,
        memory_limit=config.memory_limit,
        memory_wait_timeout_ms=config.memory_wait_timeout_ms,
        max_inflight_requests=config.max_inflight_requests,
        io_threads=config.io_threads,
        checksum=config.checksum,
        ca_bundle=config.ca_bundle,
        requester_pays=config.requester_pays,
        cache_dir=None if config.cache_dir is None else str(config.cache_dir),
        cache_max_bytes=config.cache_max_bytes,
        cache_min_free_bytes=config.cache_min_free_bytes,
        express_read_only=config.express_read_only,
        disable_express_session_auth=(0 if config.disable_express_session_auth is None
                                      else 1 if config.disable_express_session_auth else -1),
        sse=config.sse,
        sse_kms_key_id=config.sse_kms_key_id,
        sse_kms_encryption_context=config.sse_kms_encryption_context,
        bucket_key_enabled=(0 if config.bucket_key_enabled is None
                            else 1 if config.bucket_key_enabled else -1),
        sse_customer_key=_b64(config.sse_customer_key),
        sse_copy_source_customer_key=_b64(config.sse_copy_source_customer_key),
        storage_class=config.storage_class,
        expected_bucket_owner=config.expected_bucket_owner,
        acl=config.acl,
        user_agent_extra=config.user_agent_extra,
        proxy=config.proxy,
        no_proxy=config.no_proxy,
        proxy_ca_bundle=config.proxy_ca_bundle,
    )


def _b64(key: Optional[bytes]) -> Optional[str]:
    """An SSE-C key as the library takes it (base64); b"" stays "" (none)."""
    return None if key is None else base64.b64encode(key).decode("ascii")


class S3Client:
    """An S3 client over libs3flash. Thread-safe; after fork() the child process builds its
    own native client on first use (the parent's I/O threads are never touched).

    Args:
        region: region for signing (None: AWS_REGION, AWS_DEFAULT_REGION, the profile's,
            else us-east-1).
        endpoint: custom endpoint URL, e.g. "http://127.0.0.1:9000" (None or "": the
            AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL variables, the profile's, else AWS).
        s3client_config: an S3ClientConfig.
    """

    def __init__(self, region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None):
        self._region = region
        self._endpoint = endpoint
        self._config = s3client_config or S3ClientConfig()
        self._native = _native_client(region, endpoint, self._config)

    @property
    def region(self) -> Optional[str]:
        return self._region

    @property
    def endpoint(self) -> Optional[str]:
        return self._endpoint

    @property
    def s3client_config(self) -> S3ClientConfig:
        return self._config

    @property
    def native(self) -> _s3flash.Client:
        return self._native

    # -- objects -----------------------------------------------------------------------
    def put_object(self, bucket: str, key: str, **kwargs: Any) -> "S3Writer":
        """A writer that streams into s3://bucket/key (nothing exists until close)."""
        from ._writer import S3Writer
        return S3Writer(self._native.open_writer(bucket, key, **kwargs), bucket, key)

    def get_object(self, bucket: str, key: str,
                   reader_constructor: Optional[Any] = None) -> "S3Reader":
        """A reader of s3://bucket/key (opened lazily, on first use)."""
        from ._reader import S3ReaderConstructor
        constructor = reader_constructor or S3ReaderConstructor.default()
        return constructor(self, bucket, key)

    def head_object(self, bucket: str, key: str) -> Dict[str, Any]:
        return self._native.head_object(bucket, key)

    def delete_object(self, bucket: str, key: str) -> None:
        self._native.delete_object(bucket, key)

    def upload(self, bucket: str, key: str, data: Any) -> Dict[str, Any]:
        """Upload a buffer-protocol object in place (no copy), parts in parallel."""
        return self._native.upload(bucket, key, data)

    def upload_file(self, bucket: str, key: str, path: Any, **kwargs: Any) -> Dict[str, Any]:
        """Upload a local file: parts read with pread by the engine's I/O threads and sent in
        parallel (no copy in memory, no mapping of the file). A file that cannot be read or
        that changes during the upload raises OSError (S3IOError) naming it; nothing is
        created. kwargs: part_size, checksum, content_type."""
        return self._native.upload_file(bucket, key, path, **kwargs)

    def download_file(self, bucket: str, key: str, path: Any,
                      **kwargs: Any) -> Dict[str, Any]:
        """Download an object into a file: parallel ranged GETs written with pwrite into a
        temporary file beside `path`, renamed into place at the end. On failure nothing is
        left (no temporary file, `path` untouched); a full disk raises OSError(ENOSPC).
        kwargs: part_size, verify_checksum, fsync, if_match, version_id."""
        return self._native.download_file(bucket, key, path, **kwargs)

    def copy(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str,
             **kwargs: Any) -> Dict[str, Any]:
        """Server-side copy of any size: one CopyObject, or UploadPartCopy parts in parallel,
        pinned to the source's ETag. A failed copy creates nothing. kwargs: part_size,
        multipart_threshold, src_version_id, src_if_match."""
        return self._native.copy(src_bucket, src_key, dst_bucket, dst_key, **kwargs)

    def list_objects(self, bucket: str, prefix: str = "", delimiter: Optional[str] = None,
                     max_keys: int = 0) -> Iterator[ObjectInfo]:
        """Every object under `prefix`, page after page (yields while listing)."""
        token: Optional[str] = None
        seen = _s3flash.list_tokens()  # a token handed back again ends it (S3Exception)
        while True:
            objects, _, token = self._native.list_objects(
                bucket, prefix=prefix or None, delimiter=delimiter,
                continuation_token=token, max_keys=max_keys, tokens=seen)
            for o in objects:
                yield ObjectInfo(*o)
            if not token:
                return

    def stats(self, reset_high_water: bool = False) -> Dict[str, int]:
        """Engine counters: pool use and high water, requests started and in flight, and
        the block cache's hits, misses, bytes served and inserted, errors (cache_*)."""
        return self._native.stats(reset_high_water=reset_high_water)

    def metrics(self) -> Dict[str, List[Dict[str, Any]]]:
        """A snapshot of the client's metrics registry (docs/METRICS.md): a dict from each
        metric's name to its series, ``{"labels": {...}, "value": int}`` for a counter or a
        gauge, ``{"labels": {...}, "buckets": [(le, cumulative count), ..., (inf, count)],
        "count": int, "sum": seconds}`` for a histogram. Taken without the GIL."""
        return self._native.metrics()

    def cache_flush(self) -> None:
        """Wait until the block cache's queued inserts are written (or dropped): reads hand
        their blocks to the cache's writer thread and never wait for its disk, so read the
        cache_inserted_bytes / cache_insert_dropped_bytes counters, or expect another
        process to find the blocks, after this. Returns at once without a cache_dir."""
        self._native.cache_flush()


_default_lock = threading.Lock()
_default_clients: Dict[Tuple[Any, ...], S3Client] = {}


def _shared_client(region: Optional[str], endpoint: Optional[str],
                   config: Optional[S3ClientConfig]) -> S3Client:
    """One S3Client per (region, endpoint, config), shared by the one-line helpers."""
    key = (region or None, endpoint or None, config or S3ClientConfig())
    with _default_lock:
        c = _default_clients.get(key)
        if c is None:
            c = S3Client(region, endpoint, config)
            _default_clients[key] = c
        return c

