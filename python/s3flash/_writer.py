"""S3Writer: a write-only stream into one S3 object (what torch.save writes into)."""

from __future__ import annotations

import io
from typing import Any, Callable, Dict, Optional

from . import _s3flash


class S3Writer(io.BufferedIOBase):
    """A write-only, file-like stream to one S3 object.

    Bytes are copied once, from any buffer-protocol object (bytes, bytearray, memoryview of a
    tensor's storage, numpy array), into the engine's part buffers; full parts upload while
    the caller keeps writing. The object appears only at close(), complete. Used as a context
    manager, an exception inside the block aborts the upload: nothing is created. A writer
    dropped without close() is aborted too.
    """

    _on_closed: Optional[Callable[[int], None]] = None  # given the size, once complete

    def __init__(self, native: _s3flash.Writer, bucket: str = "", key: str = ""):
        self._native: Optional[_s3flash.Writer] = native
        self.bucket = bucket
        self.key = key
        self.info: Optional[Dict[str, Any]] = None

    def __enter__(self) -> "S3Writer":
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def write(self, data: Any) -> int:  # type: ignore[override]
        """Append the bytes of `data` (any buffer-protocol object); returns how many."""
        if self._native is None:
            raise ValueError("I/O operation on closed S3Writer")
        return self._native.write(data)

    def close(self) -> None:
        """Upload what is left and complete the object. Raises S3Exception on failure (and
        then nothing is created). Closing twice is a no-op."""
        native, self._native = self._native, None
        if native is not None:
            size = native.tell()
            self.info = native.close()
            if self._on_closed is not None:
                self._on_closed(size)

    def abort(self) -> None:
        """Cancel: abort the multipart upload, create nothing."""
        native, self._native = self._native, None
        if native is not None:
            native.abort()

    def __del__(self) -> None:
        # io.IOBase would call close() and so *complete* an abandoned upload; abort instead.
        native = getattr(self, "_native", None)
        if native is not None:
            self._native = None
            native.abort()

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self._native is None

    def flush(self) -> None:
        """No-op: parts go out as they fill; close() finishes the object."""

    def tell(self) -> int:
        if self._native is None:
            raise ValueError("I/O operation on closed S3Writer")
        return self._native.tell()

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<S3Writer s3://{self.bucket}/{self.key}{' closed' if self.closed else ''}>"
