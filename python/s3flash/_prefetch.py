"""The datasets' read-ahead (prefetch): objects fetched whole, many at once, by the engine
(``Client.open_fetch``), taken in the order queued. One ``_Ahead`` per iterator (or per map
dataset in one process).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Iterator, List, Optional, Tuple

from . import _s3flash
from ._dataset_objects import MiB, S3BucketKeyData, _DatasetReader
from ._reader import S3Reader

if TYPE_CHECKING:
    from ._dataset import _S3DatasetBase

# Read-ahead of the datasets (prefetch): objects fetched whole, many at once, by the
# engine (Client.open_fetch: one GET each on its I/O threads, no thread per object).
_PREFETCH_BYTES = 64 * MiB      # prefetch_bytes default: bytes fetched ahead per iterator
_PREFETCH_MAX = 256             # the most objects ahead an automatic prefetch plans
_PREFETCH_UNKNOWN_SIZE = 1 * MiB  # what an object of unknown size counts until sizes are seen


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
