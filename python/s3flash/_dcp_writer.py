"""S3StorageWriter (s3flash/dcp.py): every rank's items streamed into ``thread_count``
objects at once, ``.metadata`` written last by the coordinator with If-None-Match: *; and the
key prefixes per rank (s3torchconnector's prefix strategies).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import pickle
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch.distributed.checkpoint.filesystem import SerializationFormat, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from . import _s3flash, _zipimage
from ._config import S3ClientConfig
from ._dcp_fs import DEFAULT_SUFFIX, _metadata_name, _PathMixin, _valid_s3_path
from ._stats import SaveStats, _report

try:  # torch's stream extensions (FileSystemWriter's _extensions), torch >= 2.6
    from torch.distributed.checkpoint.filesystem import _StorageWriterTransforms
except ImportError:  # older torch: no extensions
    _StorageWriterTransforms = None  # type: ignore[assignment,misc]

try:
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
except ImportError:  # older torch
    CURRENT_DCP_VERSION = "1.0.0"

# the logger users configure: the one of s3flash.dcp, where these lines began
log = logging.getLogger("s3flash.dcp")


# --------------------------------------------------------------------------------------------
# key prefixes per rank (s3torchconnector's names)
# --------------------------------------------------------------------------------------------
class S3PrefixStrategyBase(ABC):
    """Chooses the key prefix of each rank's objects, under the checkpoint path."""

    def __call__(self, rank: int) -> str:
        return self.generate_prefix(rank)

    @abstractmethod
    def generate_prefix(self, rank: int) -> str:
        ...


class DefaultPrefixStrategy(S3PrefixStrategyBase):
    """``__{rank}_``: FileSystemWriter's names (``__0_0.distcp``)."""

    def generate_prefix(self, rank: int) -> str:
        return f"__{rank}_"


class RoundRobinPrefixStrategy(S3PrefixStrategyBase):
    """``{user_prefixes[rank % n]}/[epoch_{e}/]__{rank}_``: spreads the ranks' keys over
    several prefixes (S3 partitions), against 503 SlowDown when many ranks write at once."""

    def __init__(self, user_prefixes: List[str], epoch_num: Optional[int] = None):
        if not user_prefixes:
            raise ValueError("user_prefixes must not be empty")
        self.user_prefixes = list(user_prefixes)
        self.epoch_num = epoch_num

    def generate_prefix(self, rank: int) -> str:
        epoch = f"epoch_{self.epoch_num}/" if self.epoch_num is not None else ""
        return f"{self.user_prefixes[rank % len(self.user_prefixes)]}/{epoch}__{rank}_"


class NumericPrefixStrategy(S3PrefixStrategyBase):
    """``{p}/[epoch_{e}/]__{rank}_`` where ``p`` is one of ``prefix_count`` numbers written
    in ``base`` with ``max(min_prefix_length, digits needed)`` digits, reversed (the digit
    that varies fastest comes first, so consecutive ranks land in different S3 partitions).
    Rank r takes number ``r % prefix_count``. ``prefix_count`` defaults to the world size
    of an initialized process group, else 1. s3torchconnector's layout, key for key.
    Subclasses give ``_format_number``: ``BinaryPrefixStrategy``, ``HexPrefixStrategy``."""

    def __init__(self, base: int, epoch_num: Optional[int] = None,
                 min_prefix_length: int = 10, prefix_count: Optional[int] = None):
        if min_prefix_length < 1:
            raise ValueError(f"Minimum prefix length must be positive, got {min_prefix_length}")
        if epoch_num is not None and not isinstance(epoch_num, int):
            raise ValueError(f"Epoch number must be None or an integer, got {epoch_num}")
        if prefix_count is not None and (not isinstance(prefix_count, int)
                                         or prefix_count < 1):
            raise ValueError(f"Prefix count must be a positive integer, got {prefix_count}")
        self.base = base
        self.epoch_num = epoch_num
        self.min_prefix_len = min_prefix_length
        if prefix_count is None:
            import torch.distributed as dist
            prefix_count = (dist.get_world_size()
                            if dist.is_available() and dist.is_initialized() else 1)
        self.prefix_count = prefix_count
        self.prefix_map = self._generate_prefix_map()

    def generate_prefix(self, rank: int) -> str:
        epoch = f"epoch_{self.epoch_num}/" if self.epoch_num is not None else ""
        return f"{self.prefix_map[rank % len(self.prefix_map)]}/{epoch}__{rank}_"

    def _generate_prefix_map(self) -> List[str]:
        digits = 1
        size = self.base
        while size < self.prefix_count:
            digits += 1
            size *= self.base
        width = max(digits, self.min_prefix_len)
        return [self._format_number(i, width)[::-1] for i in range(self.prefix_count)]

    @abstractmethod
    def _format_number(self, number: int, length: int) -> str:
        ...


class BinaryPrefixStrategy(NumericPrefixStrategy):
    """NumericPrefixStrategy in base 2: ``0000000000/__0_``, ``1000000000/__1_``..."""

    def __init__(self, epoch_num: Optional[int] = None, min_prefix_length: int = 10,
                 prefix_count: Optional[int] = None):
        super().__init__(2, epoch_num, min_prefix_length, prefix_count)

    def _format_number(self, number: int, length: int) -> str:
        return format(number, f"0{length}b")


class HexPrefixStrategy(NumericPrefixStrategy):
    """NumericPrefixStrategy in base 16: ``0000000000/__0_``, ``1000000000/__1_``..."""

    def __init__(self, epoch_num: Optional[int] = None, min_prefix_length: int = 10,
                 prefix_count: Optional[int] = None):
        super().__init__(16, epoch_num, min_prefix_length, prefix_count)

    def _format_number(self, number: int, length: int) -> str:
        return format(number, f"0{length}x")


@dataclasses.dataclass
class _S3StoragePrefix:
    prefix: str


# --------------------------------------------------------------------------------------------
# writer
# --------------------------------------------------------------------------------------------
def _item_nbytes(item: WriteItem) -> int:
    td = item.tensor_data
    if td is None:
        return 0
    n = 1
    for s in td.size:
        n *= s
    return n * td.properties.dtype.itemsize


def _split_items(bins: int, items: Sequence[WriteItem]) -> List[List[WriteItem]]:
    """Spread items over `bins` objects: byte items round-robin, tensors largest first into
    the least-filled object (as FileSystemWriter does)."""
    if bins <= 1:
        return [list(items)]
    out: List[List[WriteItem]] = [[] for _ in range(bins)]
    sizes = [0] * bins
    byte_items = [i for i in items if i.type == WriteItemType.BYTE_IO]
    tensor_items = sorted((i for i in items if i.type != WriteItemType.BYTE_IO),
                          key=_item_nbytes, reverse=True)
    for n, it in enumerate(byte_items):
        out[n % bins].append(it)
    for it in tensor_items:
        b = min(range(bins), key=sizes.__getitem__)
        out[b].append(it)
        sizes[b] += _item_nbytes(it)
    return [b for b in out if b]


class _Cancelled(Exception):
    """Another object of this rank failed: stop and abort this one."""


class S3StorageWriter(_PathMixin, StorageWriter, BlockingAsyncStager):
    """StorageWriter of torch.distributed.checkpoint into S3 (``dcp.save``/``async_save``).

    Args:
        region: region for signing (None: from the environment or profile).
        path: ``s3://bucket/prefix`` of the checkpoint (or pass ``checkpoint_id`` to dcp.save).
        s3client_config: an S3ClientConfig.
        prefix_strategy: key prefix of each rank's objects (default ``__{rank}_``).
        thread_count: objects each rank writes at once (FileSystemWriter's meaning; each
            object's parts upload in parallel already, so 1 still uses the network in
            parallel; more also serializes in parallel).
        endpoint: custom endpoint URL (s3flash extension; None or "": the default resolution).
        single_file_per_rank, overwrite, cache_staged_state_dict: as in FileSystemWriter.
            ``overwrite=False`` raises when a ``.metadata`` is already at the path.
        sync_files, per_thread_copy_ahead: accepted for FileSystemWriter compatibility; S3
            objects are durable once written, and tensors are copied to CPU item by item.
        _extensions: torch's stream extensions (EXPERIMENTAL in torch, as in
            FileSystemWriter), e.g. ``[ZStandard()]`` from
            ``torch.distributed.checkpoint._extension``: each item is written through them
            and their descriptors are recorded in the metadata, so ``FileSystemReader`` and
            ``S3StorageReader`` undo them on load.
        on_save_stats: s3flash extension; called with this rank's ``SaveStats`` of each
            save (also ``last_save_stats``): when ``finish`` has written ``.metadata`` on
            the rank that writes it, when ``write_data`` is done on the others. The save
            starts at ``stage`` when this writer staged it (``dcp.async_save`` with it as
            the stager: blocked is the staging), else at ``set_up_storage_writer``
            (``dcp.save`` on the main thread: blocked is the whole save; on another
            thread, after another stager: None, unknown here). ``bytes``: this rank's
            objects, and ``.metadata`` where this rank wrote it.
    """

    def __init__(
        self,
        region: Optional[str] = None,
        path: Union[str, os.PathLike, None] = None,
        s3client_config: Optional[S3ClientConfig] = None,
        prefix_strategy: Optional[S3PrefixStrategyBase] = None,
        thread_count: int = 1,
        *,
        endpoint: Optional[str] = None,
        single_file_per_rank: bool = True,
        overwrite: bool = True,
        cache_staged_state_dict: bool = False,
        sync_files: bool = True,
        per_thread_copy_ahead: int = 10_000_000,
        serialization_format: SerializationFormat = SerializationFormat.TORCH_SAVE,
        _extensions: Optional[Sequence[Any]] = None,
        on_save_stats: Optional[Callable[[SaveStats], None]] = None,
    ) -> None:
        StorageWriter.__init__(self)
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
        if thread_count < 1:
            raise ValueError(f"thread_count must be >= 1, got {thread_count}")
        if serialization_format != SerializationFormat.TORCH_SAVE:
            raise ValueError(f"S3StorageWriter writes {SerializationFormat.TORCH_SAVE} only, "
                             f"not {serialization_format}")
        if _extensions and _StorageWriterTransforms is None:
            raise ValueError("stream extensions need torch >= 2.6 "
                             "(torch.distributed.checkpoint._extension)")
        self._transforms = (_StorageWriterTransforms(_extensions)
                            if _StorageWriterTransforms is not None else None)
        self._init_client(region, endpoint, s3client_config)
        self._set_path(path)
        self.prefix_strategy = prefix_strategy or DefaultPrefixStrategy()
        self.thread_count = thread_count
        self.single_file_per_rank = single_file_per_rank
        self.overwrite = overwrite
        self.sync_files = sync_files
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.save_id = str(uuid.uuid4())
        self.is_coordinator = False
        self.rank: Optional[int] = None
        self.use_collectives = True
        self.on_save_stats = on_save_stats
        self.last_save_stats: Optional[SaveStats] = None
        self._staged_at: Optional[Tuple[float, float]] = None  # stage()'s start and end
        self._clock: Dict[str, Any] = {}  # this save's readings and bytes

    # -- stats ---------------------------------------------------------------------------
    def stage(self, state_dict: Any) -> Any:
        """BlockingAsyncStager's copy to CPU (dcp.async_save's staging), timed."""
        t0 = time.monotonic()
        out = BlockingAsyncStager.stage(self, state_dict)
        self._staged_at = (t0, time.monotonic())
        return out

    def _save_done(self, commit_seconds: float) -> None:
        c, end = self._clock, time.monotonic()
        if not c:
            return
        staged = c["staged"]
        start = staged[0] if staged else c["start"]
        staging = staged[1] - staged[0] if staged else 0.0
        if staged:
            blocked: Optional[float] = staging
        elif c["main"]:
            blocked = end - start
        else:
            blocked = None
        stats = SaveStats(self._uri(), None, c["bytes"], end - start, blocked, staging,
                          c["upload"], commit_seconds)
        self._clock = {}
        self.last_save_stats = stats
        _report(self.on_save_stats, stats, "dcp.S3StorageWriter")

    # -- StorageWriter -----------------------------------------------------------------
    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        if checkpoint_id:
            self._set_path(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _valid_s3_path(checkpoint_id)

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._clock = {"start": time.monotonic(), "staged": self._staged_at, "bytes": 0,
                       "upload": 0.0,
                       "main": threading.current_thread() is threading.main_thread()}
        self._staged_at = None
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self._require_path()
        if not self.use_collectives and self.rank is not None:
            # no coordination: every rank names its own objects and its own metadata
            self._invalidate_metadata(self.rank)
            return dataclasses.replace(
                plan, storage_data=_S3StoragePrefix(self.prefix_strategy(self.rank)))
        if self.is_coordinator:
            # Before any rank writes (write_data comes after the plans are scattered): an
            # older checkpoint here stops being loadable before its objects are replaced.
            self._invalidate_metadata(None)
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        return [
            plan if plan.storage_data is not None
            else dataclasses.replace(plan, storage_data=_S3StoragePrefix(self.prefix_strategy(i)))
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[List[WriteResult]]:
        self._require_path()
        prefix = plan.storage_data.prefix
        if self.single_file_per_rank:
            groups = _split_items(self.thread_count, plan.items)
        else:
            groups = [[item] for item in plan.items]
        files = [(f"{prefix}{n}{DEFAULT_SUFFIX}", g) for n, g in enumerate(groups)]
        results: List[WriteResult] = []
        t0 = time.monotonic()
        if files:
            cancel = threading.Event()
            workers = min(self.thread_count, len(files))
            if workers == 1:
                for name, items in files:
                    results += self._write_object(name, items, planner, cancel)
            else:
                with concurrent.futures.ThreadPoolExecutor(
                        workers, thread_name_prefix="s3flash-dcp-write") as ex:
                    futs = [ex.submit(self._write_object, name, items, planner, cancel)
                            for name, items in files]
                    errors: List[BaseException] = []
                    for f in concurrent.futures.as_completed(futs):
                        e = f.exception()
                        if e is None:
                            results += f.result()
                        else:
                            cancel.set()  # the others stop at their next item and abort
                            errors.append(e)
                    if errors:
                        first = [e for e in errors if not isinstance(e, _Cancelled)] or errors
                        raise first[0]
        if self._clock:
            self._clock["upload"] = time.monotonic() - t0
            self._clock["bytes"] = sum(r.size_in_bytes for r in results)
            if self.use_collectives and not self.is_coordinator:
                self._save_done(0.0)  # finish() is the coordinator's
        fut: Future[List[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """Write ``.metadata`` (the coordinator, after every rank's data is written)."""
        t0 = time.monotonic()
        metadata.version = CURRENT_DCP_VERSION
        storage_md: Dict[MetadataIndex, Any] = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        rank = self.rank if (not self.use_collectives and self.rank is not None) else None
        data = pickle.dumps(metadata)
        key = self._key(_metadata_name(rank))
        # the commit: If-None-Match: * (an older .metadata here was deleted before any rank
        # wrote), so a writer that committed at this path meanwhile is never overwritten
        try:
            self.client.native.put_object(self._bucket, key, data, if_none_match="*")
        except _s3flash.S3Exception as e:
            if getattr(e, "status", "") != "S3F_ERR_PRECONDITION_FAILED":
                raise
            raise RuntimeError(
                f"another writer committed a checkpoint at {self._uri()} during this save "
                f"({_metadata_name(rank)} appeared after this save began); its commit is "
                "kept and this save's is not written") from e
        if self._clock:
            self._clock["bytes"] += len(data)
        self._save_done(time.monotonic() - t0)

    # -- internals -----------------------------------------------------------------------
    def _invalidate_metadata(self, rank: Optional[int]) -> None:
        key = self._key(_metadata_name(rank))
        try:
            self.client.head_object(self._bucket, key)
        except FileNotFoundError:
            return
        if not self.overwrite:
            raise RuntimeError(f"a checkpoint already exists at {self._uri()} "
                               f"({_metadata_name(rank)}) and overwrite=False")
        log.info("overwriting the checkpoint at %s: deleting its %s first",
                 self._uri(), _metadata_name(rank))
        self.client.delete_object(self._bucket, key)

    def _write_object(self, name: str, items: List[WriteItem], planner: SavePlanner,
                      cancel: threading.Event) -> List[WriteResult]:
        out: List[WriteResult] = []
        # bytes first, as FileSystemWriter: they are small and their objects are pickled now
        ordered = ([i for i in items if i.type == WriteItemType.BYTE_IO] +
                   [i for i in items if i.type != WriteItemType.BYTE_IO])
        # An exception inside the block aborts the multipart upload: no object is created.
        with self.client.put_object(self._bucket, self._key(name)) as w:
            for item in ordered:
                if cancel.is_set():
                    raise _Cancelled(f"{self._uri(name)}: cancelled (another object failed)")
                data = planner.resolve_data(item)
                offset = w.tell()
                descriptors: Optional[List[str]] = None
                dst: Any = w
                if self._transforms is not None and self._transforms.extensions:
                    # as FileSystemWriter: the item goes through the extensions' streams
                    # (their close flushes them, not the object)
                    dst, descriptors = self._transforms.transform_save_stream(item, w)
                if item.type == WriteItemType.BYTE_IO:
                    dst.write(data.getbuffer())
                else:
                    t = data.detach()
                    if t.device.type != "cpu":
                        t = t.cpu()
                    if t.untyped_storage().nbytes() != t.numel() * t.element_size():
                        t = t.clone()  # only the view's bytes, not its whole storage
                    try:  # torch.save's zip, written with the GIL let go (_zipimage.stream)
                        _zipimage.stream(t, dst.write)
                    except _zipimage.Unsupported:
                        torch.save(t, dst)
                if dst is not w:
                    dst.close()
                length = w.tell() - offset
                out.append(WriteResult(index=item.index, size_in_bytes=length,
                                       storage_data=_StorageInfo(
                                           name, offset, length,
                                           transform_descriptors=descriptors or None)))
        return out
