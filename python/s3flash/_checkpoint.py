"""S3Checkpoint and the one-line save/load."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from . import _s3flash
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig
from ._reader import S3Reader, S3ReaderConstructor, S3ReaderConstructorProtocol
from ._stats import SaveStats, _report
from ._writer import S3Writer


def parse_s3_uri(uri: str) -> "tuple[str, str]":
    """Split "s3://bucket/key" into (bucket, key). ValueError naming the URI when it is
    malformed or has no key."""
    bucket, key = _s3flash.parse_uri(uri)
    if not key or key.endswith("/"):
        raise _s3flash.S3ValueError(f"invalid S3 URI {uri!r}: no object key")
    return bucket, key


class S3Checkpoint:
    """Checkpoints in S3: ``writer(uri)`` for torch.save, ``reader(uri)`` for torch.load.

    Args:
        region: region for signing (None: from the environment or profile, else us-east-1).
        endpoint: custom endpoint URL (MinIO, Ceph RGW...); None or "" for the default.
        s3client_config: an S3ClientConfig.
        reader_constructor: from S3ReaderConstructor (default: sequential()).
        on_save_stats: called with the ``SaveStats`` of each writer once it completes
            its object (also ``last_save_stats``): timed from ``writer()`` to its close;
            the writing caller is blocked throughout, so blocked, upload and save times
            are one.
    """

    def __init__(self, region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None, *,
                 on_save_stats: Optional[Callable[[SaveStats], None]] = None):
        self.region = region
        self.on_save_stats = on_save_stats
        self.last_save_stats: Optional[SaveStats] = None
        self.endpoint = endpoint
        self._client = S3Client(region, endpoint=endpoint, s3client_config=s3client_config)
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()

    @property
    def client(self) -> S3Client:
        return self._client

    def reader(self, s3_uri: str) -> S3Reader:
        """A read-only, seekable stream of the object at `s3_uri` (s3://BUCKET/KEY)."""
        bucket, key = parse_s3_uri(s3_uri)
        return self._client.get_object(bucket, key, self._reader_constructor)

    def writer(self, s3_uri: str) -> S3Writer:
        """A write-only stream; the object appears at `s3_uri` when it is closed."""
        t0 = time.monotonic()
        bucket, key = parse_s3_uri(s3_uri)
        w = self._client.put_object(bucket, key)

        def closed(size: int) -> None:
            t = time.monotonic() - t0
            self.last_save_stats = SaveStats.blocking(s3_uri, None, size, t)
            _report(self.on_save_stats, self.last_save_stats, "S3Checkpoint")
        w._on_closed = closed
        return w


def save(obj: Any, uri: str, *, region: Optional[str] = None, endpoint: Optional[str] = None,
         s3client_config: Optional[S3ClientConfig] = None, **torch_save_kwargs: Any) -> None:
    """torch.save(obj) straight into S3. The object appears complete or not at all: an error
    (or an interrupted process) leaves nothing under `uri`."""
    import torch

    bucket, key = parse_s3_uri(uri)
    client = _shared_client(region, endpoint, s3client_config)
    with client.put_object(bucket, key) as w:
        torch.save(obj, w, **torch_save_kwargs)


def load(uri: str, *, region: Optional[str] = None, endpoint: Optional[str] = None,
         s3client_config: Optional[S3ClientConfig] = None,
         reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
         **torch_load_kwargs: Any) -> Any:
    """torch.load from S3 (map_location, weights_only... are passed on). The zip's central
    directory comes from the reader's tail cache; records stream in."""
    import torch

    bucket, key = parse_s3_uri(uri)
    client = _shared_client(region, endpoint, s3client_config)
    with client.get_object(bucket, key, reader_constructor) as r:
        return torch.load(r, **torch_load_kwargs)
