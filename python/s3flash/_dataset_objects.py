"""The objects of the datasets and their reads: S3BucketKeyData, the URIs and the listing that
name them (page by page, streamed), and the reader of one item (_DatasetReader: a small
object whole in one GET, no HEAD, when the listing gave its size).
"""

from __future__ import annotations

import io
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, Union

from . import _s3flash
from ._checkpoint import parse_s3_uri
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig, is_directory_bucket
from ._reader import S3ReaderConstructor, S3ReaderConstructorProtocol, SequentialS3Reader

MiB = 1024 * 1024

# A whole-object read (read() or readinto of a buffer as large as the object) of an object
# whose size the listing gave, up to this size, is one GET into memory instead of the
# reader's HEAD + GET. Larger objects stream through the reader.
_WHOLE_READ_MAX = 64 * MiB
# A first readinto of an item of unknown size takes the one-GET path from this buffer size
# on (a smaller buffer is a partial read more often than not: the reader serves it)
_WHOLE_READINTO_MIN = 256 * 1024


class S3BucketKeyData(NamedTuple):
    """One object of a dataset: where it is, and its size and ETag when a listing gave them."""

    bucket: str
    key: str
    size: Optional[int] = None
    etag: Optional[str] = None


def _parse_prefix_uri(uri: str) -> Tuple[str, str]:
    """("bucket", "prefix") of s3://bucket[/prefix]; ValueError naming the URI."""
    if not isinstance(uri, str):
        raise TypeError(f"S3 URI must be a str, not {type(uri).__name__}")
    return _s3flash.parse_uri(uri)


def _parse_object_uris(object_uris: Union[str, Iterable[str]]) -> List[S3BucketKeyData]:
    if isinstance(object_uris, str):
        object_uris = [object_uris]
    return [S3BucketKeyData(*parse_s3_uri(u)) for u in object_uris]


def _list_page(client: S3Client, bucket: str, prefix: str, token: Optional[str],
               page_size: int, seen: object
               ) -> Tuple[List[Tuple[str, int, int, str, str]], Optional[str]]:
    """One ListObjectsV2 request: (objects, next continuation token or None). seen
    (_s3flash.list_tokens()) holds the listing's tokens: one handed back again raises."""
    objects, _, token = client.native.list_objects(
        bucket, prefix=prefix or None, continuation_token=token, max_keys=page_size,
        tokens=seen)
    return objects, token


def _list_prefix(client: S3Client, bucket: str, prefix: str, page_size: int,
                 ahead: bool = False) -> Iterator[S3BucketKeyData]:
    """Objects under the prefix, one ListObjectsV2 page at a time (yields after each page).
    ahead: the next page is requested (on a thread, the GIL released while it waits) as
    soon as this one arrived, while this one's objects are consumed and fetched."""
    token: Optional[str] = None
    seen = _s3flash.list_tokens()
    if is_directory_bucket(bucket):
        # S3 Express lists in no order: every page first, then in key order, so that every
        # worker and rank sees the same items at the same indices
        yield from sorted(_list_all(client, bucket, prefix, page_size), key=lambda o: o.key)
        return
    if not ahead:
        while True:
            objects, token = _list_page(client, bucket, prefix, token, page_size, seen)
            for key, size, _mtime, etag, _cls in objects:
                yield S3BucketKeyData(bucket, key, size, etag)
            if not token:
                return
    pool = ThreadPoolExecutor(1, thread_name_prefix="s3flash-list")
    nxt: Optional[Future] = None
    try:
        objects, token = _list_page(client, bucket, prefix, None, page_size, seen)
        while True:
            if token:
                nxt = pool.submit(_list_page, client, bucket, prefix, token, page_size, seen)
            for key, size, _mtime, etag, _cls in objects:
                yield S3BucketKeyData(bucket, key, size, etag)
            if nxt is None:
                return
            objects, token = nxt.result()
            nxt = None
    finally:
        if nxt is not None:
            nxt.cancel()
        pool.shutdown(wait=False)


def _list_all(client: S3Client, bucket: str, prefix: str,
              page_size: int) -> List[S3BucketKeyData]:
    out: List[S3BucketKeyData] = []
    token: Optional[str] = None
    seen = _s3flash.list_tokens()
    while True:
        objects, token = _list_page(client, bucket, prefix, token, page_size, seen)
        out.extend(S3BucketKeyData(bucket, k, size, etag) for k, size, _m, etag, _c in objects)
        if not token:
            return out


class _DatasetReader(SequentialS3Reader):
    """The sequential S3Reader of a dataset item, told the object's size by the listing
    (``from_prefix``) or not (``from_objects``).

    With a listed size, ``size`` needs no request, and a whole-object ``read()`` (or
    ``readinto`` of a buffer that holds the object) from position 0 of an object of up to
    64 MiB is one GET (the engine's download into memory, parts in parallel), not the
    reader's HEAD + GET. Without one, a first ``read()``/``read(-1)``/``readall()`` from
    position 0 is one GET without a Range and no HEAD, of any size (the engine's
    s3f_download_alloc: the size comes from the response, the bytes land in the bytes object
    returned, one copy in memory); so is a first ``readinto`` of a buffer of at least
    256 KiB when the object fits in it (a larger object stops that GET after its headers and
    the reader takes over). Later reads, seeks, ``tell`` and ``size`` are served from those
    bytes. Anything else (a partial read, a seek or ``size`` first) is the engine's reader,
    opened lazily with a HEAD.
    Picklable: a reader returned by a DataLoader worker is rebuilt in the main process on a
    client shared per (region, endpoint, config).
    """

    def __init__(self, client: S3Client, bucket: str, key: str, *,
                 listed_size: Optional[int] = None, reader_type: str = "sequential",
                 readahead_max: int = 0, tail_bytes: int = 0,
                 listed_etag: Optional[str] = None):
        super().__init__(client, bucket, key, reader_type=reader_type,
                         readahead_max=readahead_max, tail_bytes=tail_bytes)
        self._listed_size = listed_size
        self._listed_etag = listed_etag
        if listed_size is not None and listed_etag:
            # the engine's reader then opens with no HEAD; the ETag pins the object
            self._known = (listed_size, listed_etag)
        self._data: Optional[bytes] = None

    def _whole_read_ok(self, want: int) -> bool:
        n = self._listed_size
        return (self._data is None and self._native is None and self._pos == 0
                and n is not None and n <= _WHOLE_READ_MAX and (want < 0 or want >= n))

    def _unknown_whole_ok(self) -> bool:
        return (self._data is None and self._native is None and self._pos == 0
                and self._listed_size is None)

    def _fetch_whole(self, max_size: int = -1) -> bool:
        """One GET of the whole object of unknown size, no HEAD (s3f_download_alloc); False
        when it has more than max_size (>= 0) bytes (the GET stopped after its headers)."""
        got = self._client.native.download_whole(self._bucket, self._key, max_size=max_size)
        if got is None:
            return False
        data, info = got
        self._data = data
        self._listed_size = len(data)
        if info.get("etag"):
            self._listed_etag = info["etag"]
            self._known = (len(data), info["etag"])
        return True

    def _fetch_into(self, buf: Any) -> Optional[int]:
        """One GET of the whole object into buf; None if it no longer fits (grew since the
        listing: the caller falls back to the reader)."""
        try:
            return self._client.native.download_into(self._bucket, self._key, buf)
        except _s3flash.S3ValueError:
            return None

    def _take_fetched(self, data: bytes, info: Dict[str, Any]) -> None:
        """The whole object, fetched ahead (the dataset's read-ahead): reads are served
        from these bytes, pinned to the ETag they came with."""
        self._data = data
        self._listed_size = len(data)
        if info.get("etag"):
            self._listed_etag = info["etag"]
            self._known = (len(data), info["etag"])

    @property
    def size(self) -> int:
        if self._data is not None:
            return len(self._data)
        if self._native is None and self._listed_size is not None:
            return self._listed_size
        return super().size

    def read(self, size: Optional[int] = -1) -> bytes:
        if self._closed:
            raise ValueError("I/O operation on closed S3Reader")
        want = -1 if size is None else size
        if want < 0 and self._unknown_whole_ok():
            self._fetch_whole()
        elif self._whole_read_ok(want):
            buf = bytearray(self._listed_size or 0)
            n = self._fetch_into(buf) if buf else 0
            if n is not None:
                self._data = bytes(memoryview(buf)[:n])
        if self._data is not None:
            end = len(self._data) if want < 0 else min(len(self._data), self._pos + want)
            b = self._data[self._pos:end] if self._pos < end else b""
            self._pos = max(self._pos, end)
            return b
        return super().read(size)

    def readinto(self, buf: Any) -> int:
        if self._closed:
            raise ValueError("I/O operation on closed S3Reader")
        mv = memoryview(buf).cast("B")
        if mv.nbytes >= _WHOLE_READINTO_MIN and self._unknown_whole_ok():
            self._fetch_whole(mv.nbytes)
        elif self._data is None and self._whole_read_ok(mv.nbytes):
            n = self._fetch_into(mv) if mv.nbytes else 0
            if n is not None:
                self._data = bytes(mv[:n])  # later seeks and reads need no request
                self._pos = n
                return n
        if self._data is not None:
            chunk = self._data[self._pos:self._pos + mv.nbytes]
            mv[:len(chunk)] = chunk
            self._pos += len(chunk)
            return len(chunk)
        return super().readinto(buf)

    def readall(self) -> bytes:
        return self.read(-1)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self._data is None or self._closed:
            return super().seek(offset, whence)
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}
        if whence not in base:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        new = base[whence] + offset
        if new < 0:
            raise ValueError(f"negative seek position {new}")
        self._pos = new
        return new

    def close(self) -> None:
        self._data = None
        super().close()

    def __reduce__(self) -> Any:
        c = self._client
        return (_rebuild_reader,
                (c.region, c.endpoint, c.s3client_config, self._bucket, self._key,
                 self._listed_size, self._reader_type, self._readahead_max, self._tail_bytes,
                 self._pos, self._data, self._closed, self._listed_etag))


def _rebuild_reader(region: Optional[str], endpoint: Optional[str], config: S3ClientConfig,
                    bucket: str, key: str, listed_size: Optional[int], reader_type: str,
                    readahead_max: int, tail_bytes: int, pos: int, data: Optional[bytes],
                    closed: bool, listed_etag: Optional[str] = None) -> _DatasetReader:
    r = _DatasetReader(_shared_client(region, endpoint, config), bucket, key,
                       listed_size=listed_size, reader_type=reader_type,
                       readahead_max=readahead_max, tail_bytes=tail_bytes,
                       listed_etag=listed_etag)
    r._pos, r._data, r._closed = pos, data, closed
    return r


def _is_default_sequential(constructor: Optional[S3ReaderConstructorProtocol]) -> bool:
    return (constructor is None
            or S3ReaderConstructor.get_reader_type_string(constructor) == "sequential")
