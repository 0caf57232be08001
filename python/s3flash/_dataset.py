"""S3MapDataset and S3IterableDataset: PyTorch datasets over S3 objects.

Names, signatures and defaults follow s3torchconnector; s3flash adds sharding over ranks and
workers (``enable_sharding=True``, off by default as upstream), shuffling with a seed and an
epoch, a listing that streams page by page, and a small-object path (one GET, no HEAD) for
whole-object reads.

This module owns the datasets (what both share, the map dataset and its batch sampler, the
iterable one with its sharding and shuffling); the objects, the listing and the reader of
one item are s3flash/_dataset_objects.py's, the read-ahead s3flash/_prefetch.py's.
"""

from __future__ import annotations

import os
import random
from collections import deque
from typing import (Any, Callable, Deque, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    Union)

import torch.utils.data

from ._client import S3Client
from ._config import S3ClientConfig
from ._dataset_objects import (S3BucketKeyData, _DatasetReader,  # noqa: F401
                               _is_default_sequential, _list_prefix, _parse_object_uris,
                               _parse_prefix_uri, _rebuild_reader)
from ._prefetch import _PREFETCH_BYTES, _Ahead
from ._reader import S3Reader, S3ReaderConstructor, S3ReaderConstructorProtocol
from ._stats import DatasetStats, _DatasetCounter


def identity(obj: Any) -> Any:
    return obj


class _S3DatasetBase:
    """What both datasets share: the client (built lazily, in the process that uses it:
    never pickled, rebuilt after fork by the native layer), the reader of an item, the
    read-ahead (``prefetch``, ``prefetch_bytes``), the counts of what was handed out
    (``stats``, ``on_stats`` every ``stats_interval_s``)."""

    def __init__(self, region: Optional[str],
                 get_dataset_objects: Callable[[S3Client], Iterable[S3BucketKeyData]],
                 endpoint: Optional[str] = None, transform: Callable[[S3Reader], Any] = identity,
                 s3client_config: Optional[S3ClientConfig] = None,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES,
                 on_stats: Optional[Callable[[DatasetStats], None]] = None,
                 stats_interval_s: float = 10.0):
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
        self._counter = _DatasetCounter(on_stats, stats_interval_s)

    @property
    def stats(self) -> DatasetStats:
        """The samples and bytes handed out in this process (a DataLoader worker counts
        in its own copy: use ``on_stats`` there), and their rates (docs/METRICS.md (Python))."""
        return self._counter.snapshot()

    def reset_stats(self) -> None:
        """Count from zero again (e.g. at each epoch)."""
        self._counter.reset()

    def _deliver(self, reader: S3Reader) -> Any:
        """transform(reader), counted: every item goes out through here."""
        out = self._transform(reader)
        self._counter.add(reader)
        return out

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
        self._counter.begin()
        return self._deliver(self._reader(obj))

    def _prefetched(self, objs: Iterable[S3BucketKeyData]) -> Iterator[Any]:
        """transform(reader) of each object in order, the next objects fetched meanwhile
        (see _Ahead)."""
        self._counter.begin()
        ahead = _Ahead(self)
        src = iter(objs)
        more = True
        try:
            while True:
                if more:
                    more = ahead.fill(src)
                if not len(ahead):
                    break
                yield self._deliver(ahead.pop())
        finally:
            ahead.close()
        self._counter.report()  # the end of a pass

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
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES,
                 on_stats: Optional[Callable[[DatasetStats], None]] = None,
                 stats_interval_s: float = 10.0):
        super().__init__(region, get_dataset_objects, endpoint, transform, s3client_config,
                         reader_constructor, prefetch, prefetch_bytes, on_stats,
                         stats_interval_s)
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
                     prefetch_bytes: int = _PREFETCH_BYTES, **kwargs: Any) -> "S3MapDataset":
        """A dataset of the given objects (s3://bucket/key each, or one str), in order.
        A malformed URI raises ValueError naming it, here. ``kwargs``: on_stats,
        stats_interval_s."""
        objs = _parse_object_uris(object_uris)
        return cls(region, _ObjectList(objs), endpoint, transform=transform,
                   s3client_config=s3client_config, reader_constructor=reader_constructor,
                   prefetch=prefetch, prefetch_bytes=prefetch_bytes, **kwargs)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: Optional[str] = None,
                    endpoint: Optional[str] = None,
                    transform: Callable[[S3Reader], Any] = identity,
                    s3client_config: Optional[S3ClientConfig] = None,
                    reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                    list_page_size: int = 0, prefetch: Optional[int] = None,
                    prefetch_bytes: int = _PREFETCH_BYTES, **kwargs: Any) -> "S3MapDataset":
        """A dataset of every object whose key starts with the prefix of ``s3_uri``
        (s3://bucket/prefix; s3://bucket for the whole bucket). A prefix with no objects
        is an empty dataset; a missing bucket raises S3NotFoundError at the first access.
        ``list_page_size``: keys per ListObjectsV2 request (0: the server's, 1000).
        ``kwargs``: on_stats, stats_interval_s."""
        bucket, prefix = _parse_prefix_uri(s3_uri)
        return cls(region, _PrefixLister(bucket, prefix, list_page_size), endpoint,
                   transform=transform, s3client_config=s3client_config,
                   reader_constructor=reader_constructor, prefetch=prefetch,
                   prefetch_bytes=prefetch_bytes, **kwargs)

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
        self._counter.begin()
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
                out.append(self._deliver(a.pop()))
            if a.full(obj.size) and pos >= n_batch:
                break  # read-ahead beyond the bound: left for the next batch to ask
            a.push(obj, tag=want[pos])
        while len(out) < n_batch:
            out.append(self._deliver(a.pop()))
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
                 prefetch: Optional[int] = None, prefetch_bytes: int = _PREFETCH_BYTES,
                 on_stats: Optional[Callable[[DatasetStats], None]] = None,
                 stats_interval_s: float = 10.0):
        super().__init__(region, get_dataset_objects, endpoint, transform, s3client_config,
                         reader_constructor, prefetch, prefetch_bytes, on_stats,
                         stats_interval_s)
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
        shuffle_buffer_size, rank, world_size, prefetch, prefetch_bytes,
        on_stats, stats_interval_s."""
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
        ``kwargs``: shuffle, seed, shuffle_buffer_size, rank, world_size, prefetch, prefetch_bytes,
        on_stats, stats_interval_s."""
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
        return self._lazy(self._objects())

    def _lazy(self, objs: Iterable[S3BucketKeyData]) -> Iterator[Any]:
        yield from map(self._get_transformed_object, objs)
        self._counter.report()  # the end of a pass

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
