"""S3StorageReader (s3flash/dcp.py): the items of a load plan merged into ranges per object,
fetched in parallel straight into one buffer each, and the tensors copied from the
``torch.save`` records located in place.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import logging
import os
import pickle
import sys
import threading
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from ._config import S3ClientConfig
from ._dcp_fs import MiB, _metadata_name, _PathMixin, _valid_s3_path
from ._reader import DCPOptimizedConstructor, ItemRange, S3ReaderConstructorProtocol

try:  # torch's stream extensions (FileSystemReader's _extension_registry), torch >= 2.6
    from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms
except ImportError:  # older torch: no extensions
    _StorageReaderTransforms = None  # type: ignore[assignment,misc]

try:
    import numpy as _np
except ImportError:  # torch works without numpy; buffers are then zero-filled bytearrays
    _np = None  # type: ignore[assignment]

# the logger users configure: the one of s3flash.dcp, where these lines began
log = logging.getLogger("s3flash.dcp")


# --------------------------------------------------------------------------------------------
# reader
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Range:
    """A byte range [start, end) of one object, fetched with one call, and the items in it."""

    name: str
    start: int
    end: int
    items: List[Tuple[ReadItem, _StorageInfo]]


class _MemFile(io.RawIOBase):
    """A read-only, seekable file over a memoryview (what torch's zip reader reads from)."""

    def __init__(self, mv: memoryview):
        super().__init__()
        self._mv = mv
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self._mv) - self._pos)
        if n <= 0:
            return 0
        memoryview(b).cast("B")[:n] = self._mv[self._pos:self._pos + n]
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = len(self._mv) + offset
        return self._pos

    def tell(self) -> int:
        return self._pos


def _alloc(n: int) -> Tuple[Any, torch.Tensor]:
    """An uninitialised byte buffer: (what preadinto fills, the same memory as a tensor)."""
    if _np is not None:
        arr = _np.empty(n, dtype=_np.uint8)
        return arr, torch.from_numpy(arr)
    ba = bytearray(n)
    return ba, (torch.frombuffer(ba, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8))


_PLAIN_DTYPES_EXCLUDED = (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2)


def _locate_tensor(mv: memoryview, raw: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """Where the tensor of one ``torch.save(tensor)`` record lies in its bytes `mv` (`raw`:
    the same memory as a uint8 tensor): (a meta tensor with its dtype, shape, strides and
    storage offset; the uint8 slice of `raw` holding its storage). None when the record is
    not the plain layout expected (then torch.load reads it)."""
    try:
        f = _MemFile(mv)
        zr = torch._C.PyTorchFileReader(f)
        records = zr.get_all_records()
        data = [r for r in records if r.startswith("data/")]
        order = bytes(zr.get_record("byteorder")).decode() if "byteorder" in records else "little"
        if len(data) != 1 or order != sys.byteorder:
            return None
        f.seek(0)
        meta = torch.load(f, map_location="meta", weights_only=True)
        if (type(meta) is not torch.Tensor or meta.layout != torch.strided
                or meta.dtype in _PLAIN_DTYPES_EXCLUDED):
            return None
        nbytes = meta.untyped_storage().nbytes()
        off = zr.get_record_offset(data[0])
        if off + nbytes > len(mv):
            return None
        return meta, raw[off:off + nbytes]
    except Exception:  # not the layout expected: let torch.load read it
        log.debug("in-place tensor parse failed; falling back to torch.load", exc_info=True)
        return None


def _storage_view(meta: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The tensor `meta` describes, over the storage bytes `b` (copied only when they are not
    aligned for the dtype)."""
    if b.data_ptr() % meta.element_size():
        b = b.clone()
    try:
        storage = b.view(meta.dtype)
    except RuntimeError:
        storage = b.clone().view(meta.dtype)
    # as_strided counts from the start of the underlying buffer, not from the view
    return storage.as_strided(meta.shape, meta.stride(),
                              storage.storage_offset() + meta.storage_offset())


class S3StorageReader(_PathMixin, StorageReader):
    """StorageReader of torch.distributed.checkpoint from S3 (``dcp.load``).

    Args:
        region: region for signing (None: from the environment or profile).
        path: ``s3://bucket/prefix`` of the checkpoint (or pass ``checkpoint_id`` to dcp.load).
        s3client_config: an S3ClientConfig.
        reader_constructor: ``S3ReaderConstructor.dcp_optimized(max_gap_size)`` sets how far
            apart two items of an object may be and still be fetched with one range (capped at
            ``max_range_bytes``); other constructors are accepted, and items then merge when
            at most 1 MiB apart.
        endpoint: custom endpoint URL (s3flash extension).
        _extension_registry: torch's ``ExtensionRegistry`` (EXPERIMENTAL in torch, as in
            FileSystemReader): items written with stream extensions (their descriptors are
            in the metadata, e.g. ``stream.zstd/1``) are undone through it on load.

    Attributes (tuning): ``max_range_bytes`` (64 MiB: the largest merged range, unless one
    item is larger), ``max_inflight_bytes`` (256 MiB of ranges fetched and not yet copied
    into the state dict), ``num_threads`` (8 ranges fetched at once). After a load,
    ``read_stats`` says how many items, ranges and bytes it took.
    """

    max_range_bytes = 64 * MiB
    max_inflight_bytes = 256 * MiB
    num_threads = 8
    default_max_gap_bytes = 1 * MiB

    def __init__(
        self,
        region: Optional[str] = None,
        path: Union[str, os.PathLike, None] = None,
        s3client_config: Optional[S3ClientConfig] = None,
        reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
        *,
        endpoint: Optional[str] = None,
        _extension_registry: Optional[Any] = None,
    ) -> None:
        StorageReader.__init__(self)
        self._transforms = (_StorageReaderTransforms(_extension_registry)
                            if _StorageReaderTransforms is not None else None)
        self._init_client(region, endpoint, s3client_config)
        self._set_path(path)
        self._reader_constructor = reader_constructor
        self.storage_data: Dict[MetadataIndex, _StorageInfo] = {}
        self.load_id = str(uuid.uuid4())
        self.is_coordinator = False
        self.rank: Optional[int] = None
        self.use_collectives = True
        self.read_stats: Dict[str, int] = {}

    # -- StorageReader -----------------------------------------------------------------
    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        self.storage_data = {}
        if checkpoint_id:
            self._set_path(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _valid_s3_path(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._require_path()
        name = _metadata_name(kwargs.get("rank"))
        try:
            r = self.client.native.open_reader(self._bucket, self._key(name), tail_bytes=-1)
        except FileNotFoundError as e:
            raise FileNotFoundError(self._missing_metadata_message(name)) from e
        try:
            data = r.read()
        finally:
            r.close()
        metadata = pickle.loads(data)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        if metadata.storage_data is None:
            raise ValueError(f"the .metadata at {self._uri()} has no storage_data")
        self.storage_data = metadata.storage_data
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Sort the items by object and offset; hand a dcp_optimized constructor the ranges."""
        sd = self.storage_data
        plan.items.sort(key=lambda it: (sd[it.storage_index].relative_path,
                                        sd[it.storage_index].offset))
        if isinstance(self._reader_constructor, DCPOptimizedConstructor):
            ranges: Dict[str, List[ItemRange]] = {}
            for it in plan.items:
                info = sd[it.storage_index]
                ranges.setdefault(info.relative_path, []).append(
                    ItemRange(info.offset, info.offset + info.length))
            self._reader_constructor.set_file_ranges(ranges)
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        self._require_path()
        ranges = self._plan_ranges(plan.items)
        self.read_stats = {"items": len(plan.items), "ranges": len(ranges),
                           "bytes": sum(r.end - r.start for r in ranges)}
        if ranges:
            self._fetch_and_apply(ranges, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    # -- internals -----------------------------------------------------------------------
    def _max_gap(self) -> int:
        c = self._reader_constructor
        if isinstance(c, DCPOptimizedConstructor):
            gap = c.max_gap_size  # an int, or a float such as inf
            return self.max_range_bytes if gap >= self.max_range_bytes else int(gap)
        return self.default_max_gap_bytes

    def _plan_ranges(self, items: Sequence[ReadItem]) -> List[_Range]:
        """Items grouped by object, sorted by offset, merged while the gap between them is
        at most the max gap and the range stays under max_range_bytes."""
        per_file: Dict[str, List[Tuple[ReadItem, _StorageInfo]]] = {}
        for it in items:
            info = self.storage_data[it.storage_index]
            per_file.setdefault(info.relative_path, []).append((it, info))
        gap, cap = self._max_gap(), self.max_range_bytes
        out: List[_Range] = []
        for name in sorted(per_file):
            cur: Optional[_Range] = None
            for it, info in sorted(per_file[name], key=lambda p: p[1].offset):
                s, e = info.offset, info.offset + info.length
                if cur is not None and s - cur.end <= gap and max(e, cur.end) - cur.start <= cap:
                    cur.end = max(cur.end, e)
                    cur.items.append((it, info))
                else:
                    cur = _Range(name, s, e, [(it, info)])
                    out.append(cur)
        return out

    def _fetch_and_apply(self, ranges: List[_Range], planner: LoadPlanner) -> None:
        """Fetch ranges in parallel (each one through the engine's reader: part-sized ranged
        GETs at once, straight into the buffer); copy their items into the state dict on
        this thread as they arrive. At most max_inflight_bytes fetched and not yet applied."""
        local = threading.local()
        readers: List[Any] = []
        readers_lock = threading.Lock()

        def fetch(r: _Range) -> Tuple[_Range, Any, torch.Tensor]:
            cache = getattr(local, "readers", None)
            if cache is None:
                cache = local.readers = {}
            rd = cache.get(r.name)
            if rd is None:
                rd = self.client.native.open_reader(self._bucket, self._key(r.name),
                                                    readahead_max=0, tail_bytes=-1)
                with readers_lock:
                    readers.append(rd)
                cache[r.name] = rd
            buf, t = _alloc(r.end - r.start)
            got = rd.preadinto(buf, r.start) if r.end > r.start else 0
            if got != r.end - r.start:
                raise EOFError(f"{self._uri(r.name)}: {got} bytes at offset {r.start}, the "
                               f"metadata says {r.end - r.start}: the object is not the one "
                               "this checkpoint's .metadata describes")
            return r, buf, t

        pending = list(reversed(ranges))
        inflight: Dict[concurrent.futures.Future, int] = {}
        inflight_bytes = 0
        with concurrent.futures.ThreadPoolExecutor(
                max(1, min(self.num_threads, len(ranges))),
                thread_name_prefix="s3flash-dcp-read") as ex:
            try:
                while pending or inflight:
                    while pending and (not inflight or inflight_bytes + (pending[-1].end - pending[-1].start)
                                       <= self.max_inflight_bytes):
                        r = pending.pop()
                        inflight[ex.submit(fetch, r)] = r.end - r.start
                        inflight_bytes += r.end - r.start
                    done, _ = concurrent.futures.wait(
                        inflight, return_when=concurrent.futures.FIRST_COMPLETED)
                    for f in done:
                        inflight_bytes -= inflight.pop(f)
                        r, buf, t = f.result()
                        self._apply(r, buf, t, planner)
                        del buf, t
            except BaseException:
                pending.clear()
                for f in inflight:
                    f.cancel()
                raise
            finally:
                ex.shutdown(wait=True)
                for rd in readers:
                    rd.close()

    def _apply(self, r: _Range, buf: Any, t: torch.Tensor, planner: LoadPlanner) -> None:
        mv = memoryview(buf)
        for req, info in r.items:
            a = info.offset - r.start
            b = a + info.length
            if info.transform_descriptors:
                self._apply_transformed(req, info, mv[a:b], planner)
                continue
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(mv[a:b].tobytes()))
                continue
            target = planner.resolve_tensor(req).detach()
            loc = _locate_tensor(mv[a:b], t[a:b])
            if loc is not None:
                meta, raw = loc
                whole = (all(o == 0 for o in req.storage_offsets)
                         and tuple(req.lengths) == tuple(meta.shape))
                if (whole and meta.is_contiguous() and meta.storage_offset() == 0
                        and target.dtype == meta.dtype and target.is_contiguous()
                        and target.shape == meta.shape and target.device.type == "cpu"):
                    # the common case: one memcpy from the fetched range into the tensor
                    n = target.numel() * target.element_size()
                    target.reshape(-1).view(torch.uint8).copy_(raw[:n])
                    planner.commit_tensor(req, target)
                    continue
                tensor = _storage_view(meta, raw)
            else:
                tensor = torch.load(_MemFile(mv[a:b]), map_location="cpu", weights_only=True)
            self._commit_slice(req, info, tensor, target, planner)

    def _commit_slice(self, req: ReadItem, info: _StorageInfo, tensor: torch.Tensor,
                      target: torch.Tensor, planner: LoadPlanner) -> None:
        """The item's slice of the stored `tensor` copied into `target`, then committed."""
        tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
        if target.size() != tensor.size():
            raise ValueError(f"{req.storage_index}: size {tuple(tensor.size())} in "
                             f"{self._uri(info.relative_path)}, {tuple(target.size())} "
                             "in the state dict")
        target.copy_(tensor)
        planner.commit_tensor(req, target)

    def _apply_transformed(self, req: ReadItem, info: _StorageInfo, mv: memoryview,
                           planner: LoadPlanner) -> None:
        """An item written through stream extensions: undone through the registry (as
        FileSystemReader does), then loaded."""
        if self._transforms is None:
            raise NotImplementedError(
                f"{self._uri(info.relative_path)}: items written with stream extensions "
                f"({list(info.transform_descriptors or ())}) need torch >= 2.6")
        src = self._transforms.transform_load_stream(
            req, info.transform_descriptors or (), _MemFile(mv))
        data = src.read(-1)
        if req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(req, io.BytesIO(data))
            return
        tensor = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        self._commit_slice(req, info, tensor, planner.resolve_tensor(req).detach(), planner)

    def _missing_metadata_message(self, name: str) -> str:
        try:
            objects, _, _ = self.client.native.list_objects(
                self._bucket, prefix=self._prefix or None, max_keys=1)
            anything = bool(objects)
        except Exception:  # the message is what matters; the listing is a courtesy
            anything = None
        where = self._uri(name)
        if anything:
            return (f"incomplete checkpoint at {self._uri()}: {where} does not exist, but "
                    "objects are under the prefix. .metadata is written last, once every "
                    "rank has written its data: a save that failed or is still running "
                    "leaves none")
        return f"no checkpoint at {self._uri()}: {where} does not exist"
