"""Dangling multipart uploads: list and abort the ones a killed process left behind."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import List, NamedTuple, Optional, Union

from ._client import S3Client, _shared_client
from ._config import S3ClientConfig


class UploadInfo(NamedTuple):
    key: str
    upload_id: str
    initiated: int  # seconds since the epoch, UTC


def _seconds(older_than: Union[float, int, timedelta]) -> float:
    if isinstance(older_than, timedelta):
        return older_than.total_seconds()
    return float(older_than)


def list_uploads(bucket: str, prefix: str = "", older_than: Union[float, timedelta] = 0, *,
                 region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 client: Optional[S3Client] = None) -> List[UploadInfo]:
    """Multipart uploads in progress under `prefix` started more than `older_than` ago
    (seconds or a timedelta)."""
    c = client or _shared_client(region, endpoint, s3client_config)
    cutoff = time.time() - _seconds(older_than)
    out: List[UploadInfo] = []
    key_marker: Optional[str] = None
    id_marker: Optional[str] = None
    while True:
        ups, key_marker, id_marker = c.native.list_multipart_uploads(
            bucket, prefix=prefix or None, key_marker=key_marker, upload_id_marker=id_marker)
        for key, upload_id, initiated in ups:
            if initiated <= cutoff:
                out.append(UploadInfo(key, upload_id, initiated))
        if not key_marker:
            return out


def cleanup_uploads(bucket: str, prefix: str = "",
                    older_than: Optional[Union[float, timedelta]] = None,
                    *, dry_run: bool = False, region: Optional[str] = None,
                    endpoint: Optional[str] = None,
                    s3client_config: Optional[S3ClientConfig] = None,
                    client: Optional[S3Client] = None) -> List[UploadInfo]:
    """Abort the multipart uploads under `prefix` started more than `older_than` ago
    (seconds or a timedelta); returns them. A process killed during a save leaves its
    upload (and its stored parts, which S3 bills) until this or a lifecycle rule removes
    it. An upload still running is indistinguishable from a dangling one, so `older_than`
    is required: give it a margin larger than your longest save. ``older_than=0`` aborts
    every upload under `prefix`, those in progress included (only when nothing is saving
    there). Without `older_than`: ValueError, nothing is listed or aborted.
    `dry_run`: list only."""
    if older_than is None:
        raise ValueError(
            "cleanup_uploads: give older_than (seconds or a timedelta), a margin larger than "
            "the longest save: an upload in progress looks the same as a dangling one and "
            "would be aborted. older_than=0 aborts every upload under the prefix, those in "
            "progress included")
    if _seconds(older_than) < 0:
        raise ValueError(f"cleanup_uploads: older_than must be >= 0, got {older_than!r}")
    c = client or _shared_client(region, endpoint, s3client_config)
    found = list_uploads(bucket, prefix, older_than, client=c)
    if not dry_run:
        for u in found:
            c.native.abort_multipart_upload(bucket, u.key, u.upload_id)
    return found
