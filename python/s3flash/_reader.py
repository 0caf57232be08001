"""S3Reader and S3ReaderConstructor: read-only, seekable streams over one S3 object."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

from . import _s3flash

if TYPE_CHECKING:
    from ._client import S3Client

MiB = 1024 * 1024

# What each constructor asks of the native reader (src/xfer/reader.c): the cap of the
# read-ahead window (0: the engine's default: what fills the link, at most half the memory
# limit) and the tail
# cache (0: 1 MiB, where torch.load finds the zip's central directory).
_SEQUENTIAL_READAHEAD = 0
_RANGE_MIN_BUFFER = 64 * 1024  # buffer_size=0: no real read-ahead, just what is asked

# s3torchconnector's constants, with its values
DEFAULT_BUFFER_SIZE = 8 * MiB        # range_based(buffer_size=None)
DEFAULT_MAX_GAP_SIZE = 32 * MiB      # dcp_optimized(max_gap_size=...)
_RANGE_DEFAULT_BUFFER = DEFAULT_BUFFER_SIZE


class S3Reader(io.BufferedIOBase):
    """A read-only, seekable, file-like view of one S3 object.

    Opened lazily: the first call that needs the object sends one HEAD (size and ETag);
    every later request carries If-Match on that ETag, so bytes of two versions never mix.
    Reads are served by the engine's reader: a read-ahead window that grows while reads are
    sequential, a cached tail (zip central directories: torch.load reads there first), and
    large reads straight into the caller's buffer (``readinto``: no intermediate copy).
    The GIL is released while waiting.

    After fork(), a reader opened in the parent reopens itself in the child (same position)
    on its next call, pinned to the size and ETag the parent opened: an object replaced
    in between fails the child's reads (S3Exception, PRECONDITION_FAILED; or not found when
    deleted), never mixes the new object's bytes with the old.
    """

    def __init__(self, client: "S3Client", bucket: str, key: str, *,
                 reader_type: str = "sequential", readahead_max: int = 0,
                 tail_bytes: int = 0):
        self._client = client
        self._bucket = bucket
        self._key = key
        self._reader_type = reader_type
        self._readahead_max = readahead_max
        self._tail_bytes = tail_bytes
        self._native: Optional[_s3flash.Reader] = None
        self._pid = 0
        self._pos = 0
        self._closed = False
        self._known: Optional[tuple] = None  # (size, etag) from a listing: open sends no HEAD
        self._info: Optional[Dict[str, Any]] = None  # the parent's info, in a forked child

    # -- identity ----------------------------------------------------------------------
    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def key(self) -> str:
        return self._key

    @property
    def reader_type(self) -> str:
        return self._reader_type

    # -- the native reader -------------------------------------------------------------
    def _reader(self) -> _s3flash.Reader:
        if self._closed:
            raise ValueError("I/O operation on closed S3Reader")
        r = self._native
        if r is not None and self._pid == os.getpid():
            return r
        kw = {}
        if self._known is not None:
            kw = {"size": self._known[0], "etag": self._known[1]}
        if r is not None:
            # opened before fork(): the parent's. Reopen here at _pos, pinned to the object
            # the parent opened (its size and ETag, no HEAD): an object replaced since fails
            # the child's reads (If-Match) instead of mixing new bytes with the old ones.
            self._native = None
            self._info = self._info or r.info
            kw = {"size": r.size, "etag": r.info["etag"]}
        r = self._client.native.open_reader(self._bucket, self._key,
                                            readahead_max=self._readahead_max,
                                            tail_bytes=self._tail_bytes, **kw)
        r.seek(self._pos)
        self._native = r
        self._pid = os.getpid()
        if self._known is None and "etag" in kw:
            self._known = (kw["size"], kw["etag"])  # pinned for any later reopen
        return r

    def _sync_pos(self) -> None:
        r = self._native
        if r is not None and self._pid == os.getpid():
            self._pos = r.tell()

    @property
    def size(self) -> int:
        """Size of the object in bytes (opens the reader)."""
        return self._reader().size

    @property
    def info(self) -> Dict[str, Any]:
        """Metadata from the HEAD at open: size, etag, content_type, checksums... (in a
        forked child, the parent's: the child reads the object the parent opened)."""
        r = self._reader()
        return self._info if self._info is not None else r.info

    @property
    def bytes_read(self) -> int:
        """Bytes this reader returned to its caller so far."""
        r = self._native
        return r.bytes_read if r is not None else 0

    # -- io.BufferedIOBase -------------------------------------------------------------
    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to `size` bytes from the position (everything left when size is None or < 0)."""
        r = self._reader()
        b = r.read(-1 if size is None else size)
        self._pos = r.tell()
        return b

    def read1(self, size: Optional[int] = -1) -> bytes:
        return self.read(size)

    def readinto(self, buf: Any) -> int:
        """Fill `buf` (any writable buffer) from the position; returns the bytes read."""
        r = self._reader()
        n = r.readinto(buf)
        self._pos = r.tell()
        return n

    def readinto1(self, buf: Any) -> int:
        return self.readinto(buf)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position (sends nothing). SEEK_END opens the reader for the size."""
        if self._closed:
            raise ValueError("I/O operation on closed S3Reader")
        if whence == io.SEEK_END or (self._native is not None and self._pid == os.getpid()):
            self._pos = self._reader().seek(offset, whence)
            return self._pos
        if whence == io.SEEK_SET:
            new = offset
        elif whence == io.SEEK_CUR:
            new = self._pos + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if new < 0:
            raise ValueError(f"negative seek position {new}")
        self._pos = new
        return new

    def tell(self) -> int:
        if self._closed:
            raise ValueError("I/O operation on closed S3Reader")
        return self._pos

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        r, self._native = self._native, None
        if r is not None and self._pid == os.getpid():
            r.close()

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self._closed

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<S3Reader s3://{self._bucket}/{self._key} {self._reader_type}>"


S3ReaderConstructorProtocol = Callable[..., S3Reader]


class SequentialS3Reader(S3Reader):
    """The reader of ``S3ReaderConstructor.sequential()``: a read-ahead window that grows
    while reads are sequential (up to what fills the link, at most half the memory limit). Unlike
    s3torchconnector's, it never buffers the whole object in memory."""

    def __init__(self, client: "S3Client", bucket: str, key: str, **kwargs: Any):
        kwargs.setdefault("reader_type", "sequential")
        kwargs.setdefault("readahead_max", _SEQUENTIAL_READAHEAD)
        super().__init__(client, bucket, key, **kwargs)


class RangedS3Reader(S3Reader):
    """The reader of ``S3ReaderConstructor.range_based(buffer_size)``: ranged GETs with a
    read-ahead of at most ``buffer_size`` bytes (None: ``DEFAULT_BUFFER_SIZE``, 8 MiB;
    0: none beyond what is asked, at least 64 KiB)."""

    def __init__(self, client: "S3Client", bucket: str, key: str,
                 buffer_size: Optional[int] = None, **kwargs: Any):
        if buffer_size is None:
            buffer_size = DEFAULT_BUFFER_SIZE
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0, got {buffer_size}")
        kwargs.setdefault("reader_type", "range_based")
        kwargs.setdefault("readahead_max", max(buffer_size, _RANGE_MIN_BUFFER))
        super().__init__(client, bucket, key, **kwargs)
        self.buffer_size = buffer_size


@dataclass
class ItemRange:
    """Byte range of one DCP item in its object: start inclusive, end exclusive."""

    start: int
    end: int


@dataclass
class RangeGroup:
    """Item ranges close enough (gaps up to max_gap_size) to be fetched as one range."""

    start: int
    end: int
    item_ranges: List[ItemRange]


class DCPOptimizedS3Reader(S3Reader):
    """The reader of ``S3ReaderConstructor.dcp_optimized()`` for an object whose item ranges
    the DCP layer handed over: ranged reads with a read-ahead of at most the largest merged
    group of ranges (8 MiB when none is known). ``s3flash.dcp.S3StorageReader`` itself
    fetches the merged ranges directly (its own ranged GETs in parallel), not through this
    reader; this class serves other callers of the constructor."""

    def __init__(self, client: "S3Client", bucket: str, key: str,
                 ranges: Optional[List[ItemRange]] = None,
                 max_gap_size: Union[int, float] = DEFAULT_MAX_GAP_SIZE, **kwargs: Any):
        self.ranges = list(ranges or [])
        self.max_gap_size = max_gap_size
        groups = _group_ranges(self.ranges, max_gap_size)
        window = max((g.end - g.start for g in groups), default=DEFAULT_BUFFER_SIZE)
        kwargs.setdefault("reader_type", "dcp_optimized")
        kwargs.setdefault("readahead_max", max(min(window, 64 * MiB), _RANGE_MIN_BUFFER))
        super().__init__(client, bucket, key, **kwargs)


def _group_ranges(ranges: List[ItemRange], max_gap_size: Union[int, float]) -> List[RangeGroup]:
    """Sorted ranges merged while the gap to the next one is at most max_gap_size."""
    groups: List[RangeGroup] = []
    for r in sorted(ranges, key=lambda r: r.start):
        if groups and r.start - groups[-1].end <= max_gap_size:
            g = groups[-1]
            g.end = max(g.end, r.end)
            g.item_ranges.append(r)
        else:
            groups.append(RangeGroup(r.start, r.end, [r]))
    return groups


def _check_gap(max_gap_size: Union[int, float]) -> None:
    if isinstance(max_gap_size, bool) or not isinstance(max_gap_size, (int, float)):
        raise TypeError(f"max_gap_size must be an int or float, got "
                        f"{type(max_gap_size).__name__}")
    if max_gap_size != max_gap_size or max_gap_size < 0:  # NaN or negative
        raise ValueError(f"max_gap_size must be >= 0, got {max_gap_size}")


class DCPOptimizedConstructor:
    """The dcp_optimized() constructor. ``s3flash.dcp.S3StorageReader`` hands it the byte
    ranges of each object of the load plan (``set_file_ranges``: object name -> ranges);
    objects with ranges get a ``DCPOptimizedS3Reader``, others (``.metadata``) a
    ``SequentialS3Reader``, as s3torchconnector does."""

    def __init__(self, max_gap_size: Union[int, float] = DEFAULT_MAX_GAP_SIZE) -> None:
        _check_gap(max_gap_size)
        self._max_gap_size = max_gap_size
        self._file_ranges: Dict[str, List[ItemRange]] = {}

    @property
    def max_gap_size(self) -> Union[int, float]:
        return self._max_gap_size

    def set_file_ranges(self, file_ranges: Dict[str, List[ItemRange]]) -> None:
        self._file_ranges = file_ranges

    def __call__(self, client: "S3Client", bucket: str, key: str) -> S3Reader:
        name = key.rsplit("/", 1)[-1]
        ranges = self._file_ranges.get(key) or self._file_ranges.get(name)
        if ranges:
            return DCPOptimizedS3Reader(client, bucket, key, ranges=ranges,
                                        max_gap_size=self._max_gap_size)
        return SequentialS3Reader(client, bucket, key)


class S3ReaderConstructor:
    """Factories of reader constructors (s3torchconnector's names).

    Every reader is the engine's random-access reader; the constructors choose its
    read-ahead:

    - ``sequential()`` (``SequentialS3Reader``): read-ahead window growing up to what
      fills the link (segments in flight from the measured per-connection throughput and
      first-byte latency; at most half the memory limit). Best for whole-object reads such
      as torch.load.
      Unlike s3torchconnector, the object is never buffered whole in memory.
    - ``range_based(buffer_size=None)`` (``RangedS3Reader``): read-ahead capped at
      ``buffer_size`` (None: ``DEFAULT_BUFFER_SIZE``, 8 MiB; 0: no read-ahead beyond
      64 KiB). For sparse reads of large objects.
    - ``dcp_optimized(max_gap_size=DEFAULT_MAX_GAP_SIZE)`` (32 MiB, s3torchconnector's
      default; an int or a float such as ``float("inf")``): for PyTorch Distributed
      Checkpoint loads through ``s3flash.dcp.S3StorageReader``.
    """

    @staticmethod
    def sequential() -> S3ReaderConstructorProtocol:
        return partial(SequentialS3Reader)

    @staticmethod
    def range_based(buffer_size: Optional[int] = None) -> S3ReaderConstructorProtocol:
        if buffer_size is not None and buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0, got {buffer_size}")
        return partial(RangedS3Reader, buffer_size=buffer_size)

    @staticmethod
    def dcp_optimized(max_gap_size: Union[int, float] = DEFAULT_MAX_GAP_SIZE
                      ) -> DCPOptimizedConstructor:
        return DCPOptimizedConstructor(max_gap_size)

    @staticmethod
    def default() -> S3ReaderConstructorProtocol:
        return S3ReaderConstructor.sequential()

    @staticmethod
    def get_reader_type_string(constructor: Optional[S3ReaderConstructorProtocol]) -> str:
        if constructor is None:
            return "sequential"
        if isinstance(constructor, DCPOptimizedConstructor):
            return "dcp_optimized"
        if isinstance(constructor, partial):
            if constructor.func is SequentialS3Reader:
                return "sequential"
            if constructor.func is RangedS3Reader:
                return "range_based"
            if constructor.func is S3Reader:
                return constructor.keywords.get("reader_type", "unknown")
        return "unknown"
