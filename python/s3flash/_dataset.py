"""S3MapDataset and S3IterableDataset: PyTorch datasets over S3 objects.

Names, signatures and defaults follow s3torchconnector; s3flash adds sharding over ranks and
workers (``enable_sharding=True``, off by default as upstream), shuffling with a seed and an
epoch, a listing that streams page by page, and a small-object path (one GET, no HEAD) for
whole-object reads.
"""

from __future__ import annotations

import io
import math
import os
import random
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import (Any, Callable, Deque, Dict, Iterable, Iterator, List, NamedTuple,
                    Optional, Sequence, Tuple, Union)

import torch.utils.data

from . import _s3flash
from ._checkpoint import parse_s3_uri
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig
from ._config import is_directory_bucket
from ._reader import (S3Reader, S3ReaderConstructor, S3ReaderConstructorProtocol,
                      SequentialS3Reader)

MiB = 1024 * 1024

# A whole-object read (read() or readinto of a buffer as large as the object) of an object
# whose size the listing gave, up to this size, is one GET into memory instead of the
# reader's HEAD + GET. Larger objects stream through the reader.
_WHOLE_READ_MAX = 64 * MiB
# A first readinto of an item of unknown size takes the one-GET path from this buffer size
# on (a smaller buffer is a partial read more often than not: the reader serves it)
_WHOLE_READINTO_MIN = 256 * 1024

# Read-ahead of the datasets (prefetch): objects fetched whole, many at once, by the
# engine (Client.open_fetch: one GET each on its I/O threads, no thread per object).
_PREFETCH_BYTES = 64 * MiB      # prefetch_bytes default: bytes fetched ahead per iterator
_PREFETCH_MAX = 256             # the most objects ahead an automatic prefetch plans
_PREFETCH_UNKNOWN_SIZE = 1 * MiB  # what an object of unknown size counts until sizes are seen


def identity(obj: Any) -> Any:
    return obj


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


class _Ahead:
    """The read-ahead of one iterator (or of a map dataset in one process): objects queued
    on an engine fetch (``Client.open_fetch``: one GET each, run together on the engine's
    I/O threads, no thread per object) up to ``k`` objects and ``max_bytes`` bytes ahead,
    taken in the order queued whatever order they complete in.

    ``k``: the ``prefetch`` given, else planned from the engine's bandwidth-delay estimate
    (``first_byte_latency_s``, ``connection_bytes_per_s``): the objects of the expected
    size that one first-byte latency plus their transfer time hold at the throughput
    target, at least the engine's data requests in flight (every slot busy), at most 256,
    and never more than ``max_bytes`` of them. Re-planned every 32 objects as the estimate
    learns. An object larger than ``min(16 MiB, max_bytes)`` (listed size), or found so
    (unknown size: its GET stops after the headers), is not fetched: its reader streams
    it. An object whose GET failed is left to its reader, whose read meets the error."""

    _REPLAN = 32

    def __init__(self, ds: "_S3DatasetBase"):
        self._ds = ds
        self._client = ds._get_client()
        self._fetch: Optional[Any] = self._client.native.open_fetch()
        self._max_items = ds._prefetch          # None: planned
        self._max_bytes = ds._prefetch_bytes
        self._whole_max = min(16 * MiB, self._max_bytes)
        # (object, fetched?, bytes counted, tag)
        self._q: Deque[Tuple[S3BucketKeyData, bool, int, Any]] = deque()
        self._bytes = 0
        self._seen_n = 0
        self._seen_bytes = 0
        self._k = 1
        self._since_plan = self._REPLAN
        self.high_water_bytes = 0  # the most bytes counted ahead at once (tests, benches)

    def __len__(self) -> int:
        return len(self._q)

    def tags(self) -> List[Any]:
        return [t for *_, t in self._q]

    def _expected_size(self) -> int:
        return (self._seen_bytes // self._seen_n) if self._seen_n else _PREFETCH_UNKNOWN_SIZE

    def _plan(self, size: int) -> int:
        size = max(size, 1)
        if self._max_items is not None:
            k = self._max_items
        else:
            st = self._client.native.stats()
            lat = st.get("first_byte_latency_s") or 0.03
            bw = st.get("connection_bytes_per_s") or 50e6
            target = self._client.s3client_config.throughput_target_gbps * 1e9 / 8
            k = math.ceil(target * (lat + size / bw) / size)
            k = min(max(k, st.get("max_inflight_requests", 1)), _PREFETCH_MAX)
        k = max(1, min(k, self._max_bytes // size))
        self._raise_inflight(k, size)
        return k

    def _raise_inflight(self, k: int, size: int) -> None:
        """Objects of up to a part are one request each: the rate is the requests in
        flight over the first-byte latency, which the engine's bandwidth plan (made for
        part-sized requests) undersizes. The dataset's own client (no
        max_inflight_requests configured) is raised to k, at most its data connections;
        never lowered."""
        cfg = self._client.s3client_config
        if cfg.max_inflight_requests or size > cfg.part_size:
            return
        if k > self._client.native.stats().get("max_inflight_requests", 0):
            self._client.native.set_max_inflight_requests(k)

    def full(self, size: Optional[int] = None) -> bool:
        """No room for one more object (of `size` bytes, else of the expected size)."""
        if not self._q:
            return False
        n = self._expected_size() if size is None else size
        if self._since_plan >= self._REPLAN:
            self._k = self._plan(n)
            self._since_plan = 0
        return len(self._q) >= self._k or self._bytes + min(n, self._whole_max) > self._max_bytes

    def push(self, obj: S3BucketKeyData, tag: Any = None) -> None:
        fetched, n = False, 0
        if self._fetch is not None and (obj.size is None or obj.size <= self._whole_max):
            n = self._expected_size() if obj.size is None else obj.size
            self._fetch.add(obj.bucket, obj.key, etag=obj.etag or None,
                            max_size=self._whole_max)
            fetched = True
        self._q.append((obj, fetched, n, tag))
        self._bytes += n
        self._since_plan += 1
        self.high_water_bytes = max(self.high_water_bytes, self._bytes)
        self._ds._last_ahead = self

    def fill(self, src: Iterator[S3BucketKeyData]) -> bool:
        """Queue objects from src while there is room; False once src is exhausted."""
        while True:
            if self.full():
                return True
            try:
                obj = next(src)
            except StopIteration:
                return False
            self.push(obj)

    def pop(self) -> S3Reader:
        """The reader of the oldest object queued (waits for its bytes)."""
        obj, fetched, n, _ = self._q.popleft()
        reader = self._ds._reader(obj)
        got = None
        if fetched and self._fetch is not None:
            try:
                got = self._fetch.take()
            except _s3flash.S3Exception:
                got = None  # left to the reader: its read meets the error (or succeeds)
        self._bytes -= n
        if got is not None and isinstance(reader, _DatasetReader):
            reader._take_fetched(*got)
            self._seen_n += 1
            self._seen_bytes += len(got[0])
        return reader

    def held(self) -> Tuple[int, int]:
        """(bytes the engine's fetch holds now, the most it held): counted in C."""
        return self._fetch.held if self._fetch is not None else self._held_at_close

    _held_at_close = (0, 0)

    def close(self) -> None:
        self._q.clear()
        self._bytes = 0
        if self._fetch is not None:
            self._held_at_close = (0, self._fetch.held[1])
            self._fetch.close()
            self._fetch = None


class _S3DatasetBase:
    """What both datasets share: the client (built lazily, in the process that uses it:
    never pickled, rebuilt after fork by the native layer), the reader of an item, the
    read-ahead (``prefetch``, ``prefetch_bytes``)."""

    def __init__(self, region: Optional[str],
                 get_dataset_objects: Callable[[S3Client], Iterable[S3BucketKeyData]],
                 endpoint: Optional[str] = None, transform: Callable[[S3Reader], Any] = identity,
                 s3client_config: Optional[S3ClientConfig] = None,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES):
        if prefetch is not None and prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 or None, got {prefetch}")
        if prefetch_bytes < 1:
            raise ValueError(f"prefetch_bytes must be >= 1, got {prefetch_bytes}")
        self._prefetch = prefetch
        self._prefetch_bytes = prefetch_bytes
        self._region = region
        self._endpoint = endpoint
        self._get_dataset_objects = get_dataset_objects
        self._transform = transform
        self._s3client_config = s3client_config
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()
        self._fast_reader = _is_default_sequential(reader_constructor)
        self._client: Optional[S3Client] = None
        self._last_ahead: Optional[_Ahead] = None  # the last read-ahead of this process

    @property
    def region(self) -> Optional[str]:
        return self._region

    @property
    def endpoint(self) -> Optional[str]:
        return self._endpoint

    @property
    def client(self) -> S3Client:
        """The dataset's S3Client (built on first use)."""
        return self._get_client()

    def _get_client(self) -> S3Client:
        if self._client is None:
            self._client = S3Client(self._region, endpoint=self._endpoint,
                                    s3client_config=self._s3client_config)
        return self._client

    def _reads_ahead(self) -> bool:
        """Objects are fetched ahead: prefetch is not 0, the reader is the default
        (sequential) one, and no block cache is configured (the fetch does not use it:
        readers then read through the cache lazily)."""
        cfg = self._s3client_config
        return (self._prefetch != 0 and self._fast_reader
                and (cfg is None or cfg.cache_dir is None))

    def _reader(self, obj: S3BucketKeyData) -> S3Reader:
        client = self._get_client()
        if self._fast_reader:
            return _DatasetReader(client, obj.bucket, obj.key, listed_size=obj.size,
                                  listed_etag=obj.etag)
        return self._reader_constructor(client, obj.bucket, obj.key)

    def _get_transformed_object(self, obj: S3BucketKeyData) -> Any:
        return self._transform(self._reader(obj))

    def _prefetched(self, objs: Iterable[S3BucketKeyData]) -> Iterator[Any]:
        """transform(reader) of each object in order, the next objects fetched meanwhile
        (see _Ahead)."""
        ahead = _Ahead(self)
        src = iter(objs)
        more = True
        try:
            while True:
                if more:
                    more = ahead.fill(src)
                if not len(ahead):
                    return
                yield self._transform(ahead.pop())
        finally:
            ahead.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None  # a native client does not cross processes
        state["_last_ahead"] = None
        return state


class S3MapDataset(_S3DatasetBase, torch.utils.data.Dataset):
    """A map-style dataset of S3 objects: ``len(ds)`` and ``ds[i]``.

    Build it with ``from_prefix`` or ``from_objects``. Item ``i`` is
    ``transform(S3Reader)`` of the i-th object (keys in the listing's lexicographic order).
    ``ds[i]`` alone is lazy: nothing is fetched until the reader is read. ``ds[i]`` lists
    only as many pages as it needs; ``len(ds)`` lists the whole prefix (once). Shuffle and
    shard with the DataLoader's sampler (``shuffle=True``, ``DistributedSampler``).

    A whole batch (``__getitems__``: what a DataLoader with a ``batch_size`` asks for) is
    fetched concurrently, every object of it at once on the engine (see ``prefetch``).
    With the dataset's own ``batch_sampler(...)`` the batches carry the indices of the
    batch that comes next to the same worker, and those are fetched too while this batch
    is transformed.

    ``prefetch``: None (default) plans how many objects are in flight from the engine's
    measured first-byte latency and throughput (``_Ahead``); N: at most N; 0: no fetch
    ahead (every reader lazy, one GET at a time as s3torchconnector).
    ``prefetch_bytes`` (64 MiB): bound of the bytes fetched ahead and not yet handed out.
    """

    def __init__(self, region: Optional[str],
                 get_dataset_objects: Callable[[S3Client], Iterable[S3BucketKeyData]],
                 endpoint: Optional[str] = None, transform: Callable[[S3Reader], Any] = identity,
                 s3client_config: Optional[S3ClientConfig] = None,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None, *,
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES):
        super().__init__(region, get_dataset_objects, endpoint, transform, s3client_config,
                         reader_constructor, prefetch, prefetch_bytes)
        self._objects: List[S3BucketKeyData] = []
        self._listing: Optional[Iterator[S3BucketKeyData]] = None
        self._listed = False
        self._ahead: Optional[_Ahead] = None
        self._ahead_pid = 0

    @classmethod
    def from_objects(cls, object_uris: Union[str, Iterable[str]], *,
                     region: Optional[str] = None, endpoint: Optional[str] = None,
                     transform: Callable[[S3Reader], Any] = identity,
                     s3client_config: Optional[S3ClientConfig] = None,
                     reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                     prefetch: Optional[int] = None,
                     prefetch_bytes: int = _PREFETCH_BYTES) -> "S3MapDataset":
        """A dataset of the given objects (s3://bucket/key each, or one str), in order.
        A malformed URI raises ValueError naming it, here."""
        objs = _parse_object_uris(object_uris)
        return cls(region, _ObjectList(objs), endpoint, transform=transform,
                   s3client_config=s3client_config, reader_constructor=reader_constructor,
                   prefetch=prefetch, prefetch_bytes=prefetch_bytes)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: Optional[str] = None,
                    endpoint: Optional[str] = None,
                    transform: Callable[[S3Reader], Any] = identity,
                    s3client_config: Optional[S3ClientConfig] = None,
                    reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                    list_page_size: int = 0, prefetch: Optional[int] = None,
                    prefetch_bytes: int = _PREFETCH_BYTES) -> "S3MapDataset":
        """A dataset of every object whose key starts with the prefix of ``s3_uri``
        (s3://bucket/prefix; s3://bucket for the whole bucket). A prefix with no objects
        is an empty dataset; a missing bucket raises S3NotFoundError at the first access.
        ``list_page_size``: keys per ListObjectsV2 request (0: the server's, 1000)."""
        bucket, prefix = _parse_prefix_uri(s3_uri)
        return cls(region, _PrefixLister(bucket, prefix, list_page_size), endpoint,
                   transform=transform, s3client_config=s3client_config,
                   reader_constructor=reader_constructor, prefetch=prefetch,
                   prefetch_bytes=prefetch_bytes)

    def _list_until(self, n: Optional[int]) -> None:
        """List until at least n objects are known (None: all of them)."""
        if self._listed:
            return
        if self._listing is None:
            self._listing = iter(self._get_dataset_objects(self._get_client()))
        while n is None or len(self._objects) < n:
            try:
                self._objects.append(next(self._listing))
            except StopIteration:
                self._listed = True
                self._listing = None
                return

    @property
    def _dataset_objects(self) -> List[S3BucketKeyData]:
        self._list_until(None)
        return self._objects

    def __len__(self) -> int:
        return len(self._dataset_objects)

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            self._list_until(None)
        else:
            self._list_until(i + 1)
        return self._get_transformed_object(self._objects[i])

    def _index(self, i: int) -> int:
        """A non-negative index of a listed object (IndexError as a list's)."""
        n = len(self._objects)
        if not -n <= i < n:
            raise IndexError(f"S3MapDataset index {i} out of range ({n} objects)")
        return i % n

    def _map_ahead(self) -> _Ahead:
        if self._ahead is None or self._ahead_pid != os.getpid():  # none, or the parent's
            self._ahead = _Ahead(self)
            self._ahead_pid = os.getpid()
        return self._ahead

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        """A batch (what a DataLoader with a batch_size asks for): its objects fetched
        concurrently, then the transforms in the batch's order. The next batch of this
        worker is fetched behind it: the one ``batch_sampler`` names (``ahead``), else,
        when this batch is a run of evenly spaced indices (a sequential sampler, a
        DistributedSampler without shuffle), the same run moved on by the batches the
        other workers take (a guess: a wrong one costs the requests of one batch)."""
        ahead_idx = getattr(indices, "ahead", None)
        idx = list(indices)
        if ahead_idx is None:
            ahead_idx = self._next_run(idx)
        return self._fetch_batch(idx, list(ahead_idx))

    @staticmethod
    def _next_run(idx: List[int]) -> List[int]:
        if len(idx) < 2 or min(idx) < 0:
            return []
        step = idx[1] - idx[0]
        if step <= 0 or any(b - a != step for a, b in zip(idx, idx[1:])):
            return []
        wi = torch.utils.data.get_worker_info()
        shift = (wi.num_workers if wi is not None else 1) * len(idx) * step
        return [i + shift for i in idx]

    def _fetch_batch(self, indices: List[int], ahead_idx: List[int]) -> List[Any]:
        if not self._reads_ahead():
            return [self[i] for i in indices]
        want_max = max((i for i in indices + ahead_idx), default=-1)
        negative = any(i < 0 for i in indices + ahead_idx)
        self._list_until(None if negative else want_max + 1)  # past the end: all of it
        want = [self._index(i) for i in indices]
        n_batch = len(want)
        want += [i % len(self._objects) for i in ahead_idx
                 if -len(self._objects) <= i < len(self._objects)]
        a = self._map_ahead()
        queued = a.tags()
        common = 0
        while common < min(len(queued), len(want)) and queued[common] == want[common]:
            common += 1
        if common < len(queued):  # another order than announced: start over
            a.close()
            a = self._ahead = _Ahead(self)
            common = 0
        out: List[Any] = []
        for pos in range(common, len(want)):
            obj = self._objects[want[pos]]
            while a.full(obj.size) and len(out) < n_batch:
                out.append(self._transform(a.pop()))
            if a.full(obj.size) and pos >= n_batch:
                break  # read-ahead beyond the bound: left for the next batch to ask
            a.push(obj, tag=want[pos])
        while len(out) < n_batch:
            out.append(self._transform(a.pop()))
        return out

    def batch_sampler(self, batch_size: int, *, shuffle: bool = False, drop_last: bool = False,
                      num_workers: int = 0, sampler: Optional[Iterable[int]] = None,
                      generator: Optional[torch.Generator] = None,
                      ahead_batches: int = 2) -> "S3BatchSampler":
        """A batch sampler for ``DataLoader(ds, batch_sampler=ds.batch_sampler(...),
        num_workers=num_workers)`` whose batches also carry the indices of the batch the
        same worker gets next (``ahead_batches`` of them): each worker fetches its next
        batch while it transforms this one. ``sampler``: the index order (e.g. a
        DistributedSampler); else sequential, or random with ``shuffle`` (``generator``).
        ``num_workers`` must be the DataLoader's (batches go to workers round-robin)."""
        if sampler is None:
            sampler = (torch.utils.data.RandomSampler(self, generator=generator) if shuffle
                       else torch.utils.data.SequentialSampler(self))
        return S3BatchSampler(sampler, batch_size, drop_last=drop_last,
                              num_workers=num_workers, ahead_batches=ahead_batches)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_listing"] = None  # a half-consumed listing restarts
        state["_ahead"] = None
        state["_ahead_pid"] = 0
        if not state["_listed"]:
            state["_objects"] = []
        return state


class _AheadBatch(list):
    """A batch of indices that also names the indices its worker is asked for next."""

    ahead: List[int]


class S3BatchSampler(torch.utils.data.Sampler):
    """Batches of ``sampler``'s indices (as torch's BatchSampler) that carry ``ahead``: the
    indices of the next ``ahead_batches`` batches that go to the same DataLoader worker
    (batches go to workers round-robin). S3MapDataset.__getitems__ fetches those behind
    the batch it was asked for. Made by ``S3MapDataset.batch_sampler``."""

    def __init__(self, sampler: Iterable[int], batch_size: int, *, drop_last: bool = False,
                 num_workers: int = 0, ahead_batches: int = 2):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_workers < 0 or ahead_batches < 0:
            raise ValueError("num_workers and ahead_batches must be >= 0")
        self._inner = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
        self._stride = max(1, num_workers)
        self._ahead_batches = ahead_batches

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[List[int]]:
        look = self._stride * self._ahead_batches
        window: Deque[List[int]] = deque()
        src = iter(self._inner)
        for b in src:
            window.append(b)
            if len(window) > look:
                break
        while window:
            batch = _AheadBatch(window.popleft())
            later = list(window)
            batch.ahead = [i for j in range(self._stride - 1, len(later), self._stride)
                           for i in later[j]]
            yield batch
            nxt = next(src, None)
            if nxt is not None:
                window.append(nxt)


class _PrefixLister:
    """Picklable get_dataset_objects of from_prefix."""

    def __init__(self, bucket: str, prefix: str, page_size: int):
        if page_size < 0 or page_size > 1000:
            raise ValueError(f"list_page_size must be between 0 and 1000, got {page_size}")
        self.bucket, self.prefix, self.page_size = bucket, prefix, page_size

    def __call__(self, client: S3Client, ahead: bool = False) -> Iterator[S3BucketKeyData]:
        return _list_prefix(client, self.bucket, self.prefix, self.page_size, ahead)


class _ObjectList:
    def __init__(self, objs: List[S3BucketKeyData]):
        self.objs = objs

    def __call__(self, client: S3Client) -> Iterator[S3BucketKeyData]:
        return iter(self.objs)


def _dist_rank_world() -> Tuple[int, int]:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class S3IterableDataset(_S3DatasetBase, torch.utils.data.IterableDataset):
    """An iterable dataset of S3 objects, streamed: the first item comes after the first
    listing page, not after the whole prefix is listed.

    Build it with ``from_prefix`` or ``from_objects``. Each item is ``transform(S3Reader)``;
    the reader is lazy. ``enable_sharding=False`` (the default, as in s3torchconnector):
    every DataLoader worker and every rank iterates over the whole dataset (shard it
    yourself, e.g. with torchdata's ``sharding_filter()``). With ``enable_sharding=True``
    each object is yielded exactly once per epoch across all ranks × DataLoader workers:
    object ``i`` of the listing (after shuffling) goes to shard
    ``i % (world_size * num_workers)``, shard
    ``rank * num_workers + worker_id``. The rank and world size are the explicit ``rank``
    and ``world_size``, else torch.distributed's when it is initialized, else 0 and 1.

    ``shuffle=True``: a permutation seeded by ``(seed, epoch)``, the same in every rank and
    worker, so shards stay disjoint. ``shuffle_buffer_size=None`` lists the whole prefix
    first (a full permutation); an int keeps streaming and shuffles each shard through a
    buffer of that many objects. ``set_epoch(e)`` before each epoch changes the order
    (DataLoader workers that are not persistent see it).

    Read-ahead (``prefetch``, on by default): while items are transformed, the next
    objects of the shard (in the listing's order, or the shuffled one) are fetched whole,
    many at once, by the engine (one GET each on its I/O threads), and delivered in order;
    their readers then read from memory. ``prefetch=None`` plans how many are in flight
    from the engine's measured first-byte latency and throughput; ``prefetch=N`` at most
    N; ``prefetch=0`` fetches nothing ahead (lazy readers, one GET at a time, as
    s3torchconnector). ``prefetch_bytes`` (64 MiB) bounds the bytes fetched ahead per
    iterator (per DataLoader worker). Objects over ``min(16 MiB, prefetch_bytes)`` stream
    through their reader instead. A failed GET is left to the item's reader: its read
    raises the error (a deleted object: S3NotFoundError). With ``from_prefix``, the next
    listing page is requested while this page's objects are fetched.
    """

    def __init__(self, region: Optional[str],
                 get_dataset_objects: Callable[[S3Client], Iterable[S3BucketKeyData]],
                 endpoint: Optional[str] = None, transform: Callable[[S3Reader], Any] = identity,
                 s3client_config: Optional[S3ClientConfig] = None,
                 enable_sharding: bool = False,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None, *,
                 shuffle: bool = False, seed: int = 0,
                 shuffle_buffer_size: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES):
        super().__init__(region, get_dataset_objects, endpoint, transform, s3client_config,
                         reader_constructor, prefetch, prefetch_bytes)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if rank is not None and not enable_sharding:
            # the rank would be ignored: every rank would read everything, silently
            raise ValueError("rank and world_size shard the dataset: pass "
                             "enable_sharding=True with them")
        if world_size is not None and not (rank is not None and 0 <= rank < world_size):
            raise ValueError(f"rank must be in [0, world_size), got rank={rank} "
                             f"world_size={world_size}")
        if shuffle_buffer_size is not None and shuffle_buffer_size < 1:
            raise ValueError(f"shuffle_buffer_size must be >= 1, got {shuffle_buffer_size}")
        self._enable_sharding = enable_sharding
        self._shuffle = shuffle
        self._seed = seed
        self._shuffle_buffer_size = shuffle_buffer_size
        self._rank = rank
        self._world_size = world_size
        self._epoch = 0

    @classmethod
    def from_objects(cls, object_uris: Union[str, Iterable[str]], *,
                     region: Optional[str] = None, endpoint: Optional[str] = None,
                     transform: Callable[[S3Reader], Any] = identity,
                     s3client_config: Optional[S3ClientConfig] = None,
                     enable_sharding: bool = False,
                     reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                     **kwargs: Any) -> "S3IterableDataset":
        """A dataset of the given objects (s3://bucket/key each, or one str), in order.
        A malformed URI raises ValueError naming it, here. ``kwargs``: shuffle, seed,
        shuffle_buffer_size, rank, world_size, prefetch, prefetch_bytes."""
        objs = _parse_object_uris(object_uris)
        return cls(region, _ObjectList(objs), endpoint, transform=transform,
                   s3client_config=s3client_config, enable_sharding=enable_sharding,
                   reader_constructor=reader_constructor, **kwargs)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: Optional[str] = None,
                    endpoint: Optional[str] = None,
                    transform: Callable[[S3Reader], Any] = identity,
                    s3client_config: Optional[S3ClientConfig] = None,
                    enable_sharding: bool = False,
                    reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                    list_page_size: int = 0, **kwargs: Any) -> "S3IterableDataset":
        """A dataset of every object whose key starts with the prefix of ``s3_uri``
        (s3://bucket/prefix; s3://bucket for the whole bucket). A prefix with no objects
        is an empty dataset; a missing bucket raises S3NotFoundError when iterated.
        ``list_page_size``: keys per ListObjectsV2 request (0: the server's, 1000).
        ``kwargs``: shuffle, seed, shuffle_buffer_size, rank, world_size, prefetch, prefetch_bytes."""
        bucket, prefix = _parse_prefix_uri(s3_uri)
        return cls(region, _PrefixLister(bucket, prefix, list_page_size), endpoint,
                   transform=transform, s3client_config=s3client_config,
                   enable_sharding=enable_sharding, reader_constructor=reader_constructor,
                   **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """The epoch that, with the seed, orders a shuffled dataset."""
        self._epoch = epoch

    @property
    def epoch(self) -> int:
        return self._epoch

    def _rank_world(self) -> Tuple[int, int]:
        if self._rank is not None and self._world_size is not None:
            return self._rank, self._world_size
        return _dist_rank_world()

    def shard(self) -> Tuple[int, int]:
        """(this process's shard, number of shards), in a DataLoader worker or not."""
        if not self._enable_sharding:
            return 0, 1
        rank, world = self._rank_world()
        wi = torch.utils.data.get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        return rank * nw + wid, world * nw

    def _rng(self, *extra: int) -> random.Random:
        return random.Random(":".join(str(x) for x in (self._seed, self._epoch) + extra))

    def _objects(self) -> Iterator[S3BucketKeyData]:
        shard, nshards = self.shard()
        lister = self._get_dataset_objects
        objs: Iterable[S3BucketKeyData] = (
            lister(self._get_client(), ahead=self._reads_ahead())
            if isinstance(lister, _PrefixLister) else lister(self._get_client()))
        if self._shuffle and self._shuffle_buffer_size is None:
            everything = list(objs)
            self._rng().shuffle(everything)
            objs = everything
        mine = (o for i, o in enumerate(objs) if i % nshards == shard)
        if self._shuffle and self._shuffle_buffer_size is not None:
            return _buffer_shuffle(mine, self._shuffle_buffer_size, self._rng(shard, nshards))
        return mine

    def __iter__(self) -> Iterator[Any]:
        if self._reads_ahead():
            return self._prefetched(self._objects())
        return map(self._get_transformed_object, self._objects())

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if state["_rank"] is None:  # spawned workers have no process group: keep the rank
            rank, world = _dist_rank_world()
            if world > 1:
                state["_rank"], state["_world_size"] = rank, world
        return state


def _buffer_shuffle(items: Iterator[S3BucketKeyData], size: int,
                    rng: random.Random) -> Iterator[S3BucketKeyData]:
    buf: List[S3BucketKeyData] = []
    for it in items:
        if len(buf) < size:
            buf.append(it)
            continue
        j = rng.randrange(size)
        yield buf[j]
        buf[j] = it
    rng.shuffle(buf)
    yield from buf
