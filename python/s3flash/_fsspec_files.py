"""The files S3FlashFileSystem opens (s3flash/fsspec.py): S3FlashReadFile ("rb", the
engine's reader), S3FlashWriteFile ("wb", its streaming writer, held until a transaction
commits), _AppendWriter ("ab": the existing object copied on the server as the first parts
of a multipart upload) and _TextWriter (text mode, aborting on an exception); and the info
entry of a file, which the listing gives too.
"""

from __future__ import annotations

import io
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import _s3flash
from ._reader import S3Reader
from ._writer import S3Writer

if TYPE_CHECKING:
    from .fsspec import S3FlashFileSystem

_MIN_PART = 5 << 20              # S3's smallest part (but the last)
_MAX_PART = 5 << 30              # S3's largest part, and UploadPartCopy's largest range


def _mtime(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _file_entry(bucket: str, key: str, size: int, last_modified: int, etag: str,
                storage_class: str = "", content_type: str = "") -> Dict[str, Any]:
    e = {"name": f"{bucket}/{key}", "Key": f"{bucket}/{key}", "size": size, "Size": size,
         "type": "file", "LastModified": _mtime(last_modified), "ETag": etag,
         "StorageClass": storage_class or "STANDARD"}
    if content_type:
        e["ContentType"] = content_type
    return e



class S3FlashReadFile(S3Reader):
    """A file opened "rb": the engine's reader (read-ahead, ranged GETs with If-Match on
    the ETag seen at open)."""

    def __init__(self, fs: S3FlashFileSystem, path: str, bucket: str, key: str):
        super().__init__(fs.client, bucket, key)
        self.fs = fs
        self.path = fs._strip_protocol(path)
        self.mode = "rb"

    @property
    def details(self) -> Dict[str, Any]:
        i = self.info
        return _file_entry(self.bucket, self.key, i["size"], i["last_modified"], i["etag"],
                           i.get("storage_class", ""), i.get("content_type", ""))

    def peek(self, size: int = 0) -> bytes:
        """Bytes from the position, without moving it (makes readline efficient)."""
        return self._reader().pread(max(size, 8192), self.tell())

    def readline(self, size: Optional[int] = -1) -> bytes:
        out = bytearray()
        limit = -1 if size is None else size
        while limit < 0 or len(out) < limit:
            chunk = self.peek(8192)
            if not chunk:
                break
            i = chunk.find(b"\n")
            n = len(chunk) if i < 0 else i + 1
            if limit >= 0:
                n = min(n, limit - len(out))
            out += self.read(n)
            if i >= 0 and n == i + 1:
                break
        return bytes(out)


class S3FlashWriteFile(S3Writer):
    """A file opened "wb": the engine's streaming writer. The object appears at close()
    (in a transaction: at commit), complete; an exception inside ``with`` aborts it."""

    def __init__(self, fs: S3FlashFileSystem, path: str, native: Any, bucket: str, key: str,
                 mode: str, autocommit: bool):
        super().__init__(native, bucket, key)
        self.fs = fs
        self.path = fs._strip_protocol(path)
        self.mode = mode
        self.autocommit = autocommit
        self._pending: Any = None

    def close(self) -> None:
        if self.autocommit:
            super().close()
        elif self._native is not None:  # held until the transaction commits
            self._pending, self._native = self._native, None

    def commit(self) -> None:
        native, self._pending = self._pending, None
        if native is not None:
            self.info = native.close()

    def discard(self) -> None:
        native, self._pending = self._pending, None
        if native is not None:
            native.abort()

    def abort(self) -> None:
        super().abort()
        self.discard()

    def __del__(self) -> None:
        native = getattr(self, "_pending", None)
        if native is not None:
            self._pending = None
            native.abort()
        super().__del__()


class _AppendWriter:
    """The native writer's interface (write, tell, close, abort) over a multipart upload
    whose first parts are the existing object, copied on the server (UploadPartCopy, at most
    5 GiB a part, pinned to its ETag); the appended bytes follow as parts of `part_size`,
    sent from this thread. Nothing changes until close() completes the upload."""

    def __init__(self, native: _s3flash.Client, bucket: str, key: str, size: int,
                 etag: str, part_size: int, content_type: Optional[str]):
        self._c, self._bucket, self._key = native, bucket, key
        self._part_size = part_size
        self._buf = bytearray()
        self._pos = size
        self._parts: List[Tuple[int, str]] = []
        self._upload: Optional[str] = native.create_multipart_upload(
            bucket, key, content_type=content_type)
        try:
            n = -(-size // _MAX_PART)               # parts of equal size, each >= 5 MiB
            step = -(-size // n)
            for i in range(n):
                first, last = i * step, min(size, (i + 1) * step) - 1
                self._parts.append(native.upload_part_copy(
                    bucket, key, self._upload, i + 1, bucket, key, first, last,
                    if_match=etag))
        except BaseException:
            self.abort()
            raise

    def _send(self, data: Any) -> None:
        assert self._upload is not None
        self._parts.append(self._c.upload_part(self._bucket, self._key, self._upload,
                                               len(self._parts) + 1, data))

    def write(self, data: Any) -> int:
        if self._upload is None:
            raise ValueError("I/O operation on closed file")
        mv = memoryview(data).cast("B")
        self._buf += mv
        self._pos += len(mv)
        try:
            while len(self._buf) >= self._part_size:
                self._send(memoryview(self._buf)[:self._part_size])
                del self._buf[:self._part_size]
        except BaseException:
            self.abort()
            raise
        return len(mv)

    def tell(self) -> int:
        return self._pos

    def close(self) -> Dict[str, Any]:
        if self._upload is None:
            raise ValueError("I/O operation on closed file")
        try:
            if self._buf:
                self._send(self._buf)
                self._buf = bytearray()
            info = self._c.complete_multipart_upload(self._bucket, self._key, self._upload,
                                                     self._parts)
        except BaseException:
            self.abort()
            raise
        self._upload = None
        return info

    def abort(self) -> None:
        upload, self._upload = self._upload, None
        if upload is not None:
            try:
                self._c.abort_multipart_upload(self._bucket, self._key, upload)
            except FileNotFoundError:
                pass


class _TextWriter(io.TextIOWrapper):
    """Text mode over S3FlashWriteFile: an exception inside ``with`` aborts the upload
    (io.TextIOWrapper would close, and so complete, the object)."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            try:
                self.buffer.abort()
            except Exception:  # noqa: BLE001 - the original exception matters
                pass
        super().__exit__(exc_type, exc, tb)
