"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint) storage in S3.

``S3StorageWriter`` and ``S3StorageReader`` have s3torchconnector's names and signatures
(``s3torchconnector.dcp``), plus ``endpoint``::

    import torch.distributed.checkpoint as dcp
    from s3flash.dcp import S3StorageWriter, S3StorageReader

    dcp.save(state_dict, storage_writer=S3StorageWriter(region, "s3://bucket/ckpt/step-100",
                                                        endpoint="http://127.0.0.1:7480"))
    dcp.load(state_dict, storage_reader=S3StorageReader(region, "s3://bucket/ckpt/step-100",
                                                        endpoint="http://127.0.0.1:7480"))

The layout is FileSystemWriter's: ``__{rank}_{n}.distcp`` objects (each item a ``torch.save``
record at a recorded offset) and a pickled ``.metadata`` with the same ``_StorageInfo``
entries, so a checkpoint copied to a disk (``s3flash cp --recursive``) loads with
``FileSystemReader``, and the other way round.

Saving: every rank streams its items into ``thread_count`` objects at once (one engine writer
each; each writer's parts upload in parallel while Python serializes the next item). The
coordinator writes ``.metadata`` in ``finish()``, which torch calls only once every rank's
``write_data`` has succeeded: a checkpoint becomes visible complete, or not at all. Before any
rank writes, the coordinator deletes an older ``.metadata`` at the same path, so a save that
fails half-way over an older checkpoint leaves no loadable mix of the two. ``.metadata`` is
written with ``If-None-Match: *``: when another writer committed at the same path during
the save, this save fails (RuntimeError) instead of replacing that commit.

Loading: the items of the plan are grouped by object, sorted by offset and merged into
ranges (gaps up to ``max_gap_size`` of ``S3ReaderConstructor.dcp_optimized()``, 1 MiB
otherwise); the ranges are fetched in parallel, each one with parallel part-sized ranged
GETs straight into one buffer, and the tensors are copied from that buffer into the state
dict's tensors (one copy: the ``torch.save`` record is located in place, not re-read).
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
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Dict, Generator, List, Optional, Sequence, Tuple, Union

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    SerializationFormat,
    _StorageInfo,
)
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.staging import AsyncStager, BlockingAsyncStager
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from . import _s3flash, _zipimage
from ._client import S3Client
from ._config import S3ClientConfig
from ._reader import (
    DCPOptimizedConstructor,
    ItemRange,
    S3ReaderConstructor,
    S3ReaderConstructorProtocol,
)

try:  # torch's stream extensions (FileSystemWriter's _extensions), torch >= 2.6
    from torch.distributed.checkpoint._extension import (
        ExtensionRegistry,
        StreamTransformExtension,
    )
    from torch.distributed.checkpoint.filesystem import (
        _StorageReaderTransforms,
        _StorageWriterTransforms,
    )
except ImportError:  # older torch: no extensions
    ExtensionRegistry = StreamTransformExtension = None  # type: ignore[assignment,misc]
    _StorageReaderTransforms = _StorageWriterTransforms = None  # type: ignore[assignment,misc]

try:
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
except ImportError:  # older torch
    CURRENT_DCP_VERSION = "1.0.0"

try:
    import numpy as _np
except ImportError:  # torch works without numpy; buffers are then zero-filled bytearrays
    _np = None  # type: ignore[assignment]

__all__ = [
    "S3FileSystem",
    "S3StorageWriter",
    "S3StorageReader",
    "S3PrefixStrategyBase",
    "DefaultPrefixStrategy",
    "RoundRobinPrefixStrategy",
    "NumericPrefixStrategy",
    "BinaryPrefixStrategy",
    "HexPrefixStrategy",
    "S3HostStager",
]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_METADATA = ".metadata"
DEFAULT_SUFFIX = ".distcp"


# --------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------
def _path_str(path: Union[str, os.PathLike]) -> str:
    p = os.fspath(path)
    return p.decode() if isinstance(p, bytes) else p


def _split_checkpoint_path(path: Union[str, os.PathLike]) -> Tuple[str, str]:
    """s3://bucket/a/b -> ("bucket", "a/b/"); s3://bucket -> ("bucket", ""). ValueError
    naming the path when it is not an s3:// URI."""
    s = _path_str(path)
    if not s.startswith("s3://"):
        raise _s3flash.S3ValueError(f"invalid checkpoint path {s!r}: expected s3://BUCKET/PREFIX")
    bucket, key = _s3flash.parse_uri(s)
    key = key.strip("/")
    return bucket, (key + "/") if key else ""


def _valid_s3_path(checkpoint_id: Union[str, os.PathLike]) -> bool:
    try:
        _split_checkpoint_path(checkpoint_id)
    except (ValueError, TypeError):
        return False
    return True


def _metadata_name(rank: Optional[int]) -> str:
    return _METADATA if rank is None else f"__{rank}{_METADATA}"


class _PathMixin:
    """The checkpoint path and the lazily built client, shared by writer and reader."""

    path: Optional[str]
    _bucket: str
    _prefix: str

    def _init_client(self, region: Optional[str], endpoint: Optional[str],
                     s3client_config: Optional[S3ClientConfig]) -> None:
        self.region = region
        self.endpoint = endpoint
        self.s3client_config = s3client_config or S3ClientConfig()
        self._client: Optional[S3Client] = None
        self._client_lock = threading.Lock()

    def _set_path(self, path: Union[str, os.PathLike, None]) -> None:
        if path is None or path == "":
            self.path, self._bucket, self._prefix = None, "", ""
            return
        self._bucket, self._prefix = _split_checkpoint_path(path)
        self.path = _path_str(path)
        fs = self.__dict__.get("_fs")
        if fs is not None:
            fs.init_path(self.path)

    def _require_path(self) -> None:
        if self.path is None:
            raise ValueError(f"{type(self).__name__}: no checkpoint path: pass path= or "
                             "checkpoint_id= to dcp.save/dcp.load")

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _uri(self, name: str = "") -> str:
        return f"s3://{self._bucket}/{self._prefix}{name}"

    @property
    def client(self) -> S3Client:
        """The S3Client (built on first use; after unpickling, in the new process)."""
        c = self._client
        if c is None:
            with self._client_lock:
                c = self._client
                if c is None:
                    c = S3Client(self.region, endpoint=self.endpoint,
                                 s3client_config=self.s3client_config)
                    self._client = c
        return c

    @property
    def checkpoint_id(self) -> Optional[str]:
        """The checkpoint's s3:// path."""
        return self.path

    @property
    def fs(self) -> "S3FileSystem":
        """An ``S3FileSystem`` over this writer's or reader's client, as upstream's
        ``S3StorageWriter.fs``/``S3StorageReader.fs`` (rename, rm_file, exists,
        create_stream on the checkpoint's objects)."""
        fs = self.__dict__.get("_fs")
        if fs is None:
            fs = S3FileSystem(s3_client=self.client)
            if self.path is not None:
                fs.init_path(self.path)
            self.__dict__["_fs"] = fs
        return fs

    # The native client does not cross processes (async_save with the process executor
    # pickles the writer): rebuild it on the other side.
    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state.pop("_client_lock", None)
        state.pop("_fs", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()


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
# the file-system interface (s3torchconnector.dcp.S3FileSystem)
# --------------------------------------------------------------------------------------------
class S3FileSystem(FileSystemBase):
    """torch's DCP ``FileSystemBase`` over S3 (s3torchconnector's ``S3FileSystem``): what
    torch's ``FileSystemWriter``/``FileSystemReader`` and their subclasses call to create
    streams, rename, check and remove objects. ``S3StorageWriter``/``S3StorageReader`` do not
    need it (they write and fetch the objects themselves); it is for code that builds on
    ``FileSystemWriter`` with ``writer.fs = S3FileSystem(...)``.

    Args:
        region: region for signing (None: from the environment or profile).
        s3_client: an ``S3Client`` to use instead of building one.
        s3client_config: an S3ClientConfig (when no ``s3_client``).
        reader_constructor: reader of ``create_stream(path, "rb")`` (default: sequential).
        endpoint: custom endpoint URL (s3flash extension).
    """

    def __init__(self, region: Optional[str] = None, s3_client: Optional[S3Client] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None, *,
                 endpoint: Optional[str] = None) -> None:
        self._path: Union[str, os.PathLike] = ""
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()
        self._client = s3_client or S3Client(region, endpoint=endpoint,
                                             s3client_config=s3client_config)

    @staticmethod
    def _parse(path: Union[str, os.PathLike]) -> Tuple[str, str]:
        s = _path_str(path)
        if not s.startswith("s3://"):
            raise _s3flash.S3ValueError(f"invalid S3 path {s!r}: expected s3://BUCKET/KEY")
        return _s3flash.parse_uri(s)

    @contextmanager
    def create_stream(self, path: Union[str, os.PathLike],
                      mode: str) -> Generator[io.IOBase, None, None]:
        """An ``S3Writer`` ("wb": the object appears when the block ends without an
        exception) or an ``S3Reader`` ("rb")."""
        bucket, key = self._parse(path)
        if mode == "wb":
            with self._client.put_object(bucket, key) as w:
                yield w
        elif mode == "rb":
            with self._client.get_object(bucket, key, self._reader_constructor) as r:
                yield r
        else:
            raise ValueError(f"Invalid mode={mode!r}: create_stream supports 'rb' and 'wb'")

    def concat_path(self, path: Union[str, os.PathLike], suffix: str) -> str:
        return _path_str(path).rstrip("/") + "/" + suffix

    def init_path(self, path: Union[str, os.PathLike]) -> Union[str, os.PathLike]:
        self._path = path
        return path

    def rename(self, old_path: Union[str, os.PathLike],
               new_path: Union[str, os.PathLike]) -> None:
        """Server-side copy, then delete of the source (same bucket only, as upstream)."""
        ob, ok = self._parse(old_path)
        nb, nk = self._parse(new_path)
        if ob != nb:
            raise ValueError("Source and destination buckets cannot be different "
                             "(rename does not support cross-buckets operations)")
        self._client.copy(ob, ok, nb, nk)
        self._client.delete_object(ob, ok)

    def mkdir(self, path: Union[str, os.PathLike]) -> None:
        """Nothing to do: S3 has no directories."""

    def exists(self, path: Union[str, os.PathLike]) -> bool:
        bucket, key = self._parse(path)
        try:
            self._client.head_object(bucket, key)
        except FileNotFoundError:
            return False
        return True

    def rm_file(self, path: Union[str, os.PathLike]) -> None:
        bucket, key = self._parse(path)
        self._client.delete_object(bucket, key)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _valid_s3_path(checkpoint_id)


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
        fut: Future[List[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """Write ``.metadata`` (the coordinator, after every rank's data is written)."""
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
        tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
        target = planner.resolve_tensor(req).detach()
        if target.size() != tensor.size():
            raise ValueError(f"{req.storage_index}: size {tuple(tensor.size())} in "
                             f"{self._uri(info.relative_path)}, {tuple(target.size())} "
                             "in the state dict")
        target.copy_(tensor)
        planner.commit_tensor(req, target)

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


class S3HostStager(AsyncStager):
    """An ``AsyncStager`` for ``dcp.async_save(..., async_stager=S3HostStager())`` whose host
    buffers are allocated once and reused from save to save (DCP's default stager allocates a
    fresh CPU copy each time; fresh pages fault in slowly).

    ``stage`` copies the state dict's tensors into a ``s3flash.HostStager`` arena (pinned,
    with non-blocking copies, when they are on a GPU) and returns the copy. An arena is free
    again once nothing references the previous copy (the previous ``async_save`` has finished
    writing it); while all `max_buffers` arenas are in use, ``stage`` waits for one
    (``timeout_s``, None: for ever; then TimeoutError). Memory stays bounded by
    `max_buffers` arenas.

    Works with any storage writer (``S3StorageWriter``, ``FileSystemWriter``).
    """

    _synchronize_after_execute = False

    def __init__(self, max_buffers: int = 2, pin_memory: Optional[bool] = None,
                 timeout_s: Optional[float] = None) -> None:
        if max_buffers < 1:
            raise ValueError(f"max_buffers must be >= 1, got {max_buffers}")
        self.max_buffers = max_buffers
        self.timeout_s = timeout_s
        self._pin = pin_memory
        self._cond = threading.Condition(threading.RLock())
        self._stagers: List[Any] = []

    def _freed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @property
    def allocations(self) -> int:
        """Arenas allocated so far (a state that fits its arena allocates nothing)."""
        return sum(s.allocations for s in self._stagers)

    @property
    def stagers(self) -> List[Any]:
        return list(self._stagers)

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        import time
        from ._staging import HostStager
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        with self._cond:
            while True:
                free = [s for s in self._stagers if not s.in_use]
                if free:
                    hs = free[0]
                    break
                if len(self._stagers) < self.max_buffers:
                    hs = HostStager(self._pin, track_views=True, on_free=self._freed)
                    self._stagers.append(hs)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"S3HostStager: all {self.max_buffers} staging buffers "
                                       "still hold earlier saves")
                self._cond.wait(left)
            return hs.stage(state_dict)

    def synchronize_staging(self) -> None:
        """Nothing to wait for: ``stage`` returns once the copies are done."""

    def close(self) -> None:
        with self._cond:
            self._stagers = [s for s in self._stagers if s.in_use]
