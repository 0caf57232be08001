"""AsyncCheckpointer: a save pauses the caller for a copy into reused host buffers; the
serialization, the upload (in place from those buffers: s3flash/_zipimage.py), the local
tier, the commit and the retention run in the background.

Layout under the prefix (``s3://bucket/run/``)::

    run/step-000000000042/<save id>/state.pt   torch.save's zip (loadable by torch.load)
    run/commits/0000000000000007.json          commit 7: the manifest, written LAST

Every save writes its objects under a save id of its own (the UTC time and 64 random bits),
so no save ever overwrites another's bytes, a re-save of a step included. Only a commit
names them: a manifest with the commit's sequence number, the step, and each object's key,
size, CRC-32 and ETag, written with ``If-None-Match: *`` under the next free sequence
number (a 412: another writer took it; the next one is tried). A commit is valid when every
object it names is there with that size and ETag; ``latest()`` is the newest valid commit
(by sequence number, not by step), and ``load()`` reads exactly the ETags it names, from the
local tier (``local_dir``, the same names) or from S3 (If-Match). The previous layout
(``step-N/state.pt`` and ``step-N/manifest.json``, version 1) is still read: its commits
come before every numbered one, in step order. docs/PYTHON.md has the protocol and what a
crash at each point leaves.

Several writers on one prefix: each checkpointer has a writer id, recorded in each of its
commits. Retention removes this writer's superseded commits and its failed saves at once,
but another writer's commits and objects no commit names only once they are older than
``retention_window_s`` (by the server's clock, as Delta's VACUUM spares files younger than
its retention period), so a save of another live writer is never removed under it. After
its commit record is written, a save checks that the record and every object it names are
there (HEAD); if not, it raises ConcurrentWriterError naming the other writers it found.
A commit of another writer after this writer's first one means a second live writer: a
ConcurrentWriterWarning says so, once per writer.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import copy
import ctypes
import json
import logging
import os
import socket
import threading
import time
import uuid
import warnings
import weakref
import zlib
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from ._checkpoint import parse_s3_uri  # noqa: F401  (the same URI rules)
from ._client import S3Client
from ._config import S3ClientConfig
from . import _s3flash

__all__ = ["AsyncCheckpointer", "CheckpointInfo", "CommitInfo", "ConcurrentWriterError",
           "ConcurrentWriterWarning", "HostStager", "MANIFEST_NAME", "STATE_NAME"]

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"   # the local tier's copy of a commit (and version 1's)
STATE_NAME = "state.pt"
COMMITS_DIR = "commits/"
MANIFEST_FORMAT = "s3flash.checkpoint"
MANIFEST_VERSION = 2
_ALIGN = 64
_COMMIT_TRIES = 16      # sequence numbers tried when other writers take them first
DEFAULT_RETENTION_WINDOW_S = 3600.0  # other writers' saves younger than this are never removed
_FILE_MODE = 0o600      # the local tier's files and folders: the owner's only
_DIR_MODE = 0o700


class ConcurrentWriterError(RuntimeError):
    """A save committed, but its commit record or an object it names is gone at once (removed
    by another writer's retention: a writer whose retention window is shorter than this
    save took, or an s3flash that predates writer ids). ``writers``: what is known of the
    other writers on the prefix (dicts with ``id``, ``host``, ``pid``, the ``seq`` and
    ``time`` of their newest commit), newest first; ``missing``: the keys that are gone."""

    def __init__(self, message: str, writers: List[Dict[str, Any]], missing: List[str]):
        super().__init__(message)
        self.writers = writers
        self.missing = missing


class ConcurrentWriterWarning(RuntimeWarning):
    """Another writer committed under this checkpointer's prefix after its first commit: two
    live writers on one prefix (docs/PYTHON.md, "Writers per prefix")."""


def _describe_writer(w: Dict[str, Any]) -> str:
    if not w.get("id"):
        return f"a writer without an id (an older s3flash) that committed {w.get('key', '?')}"
    return (f"writer {w['id']} (host {w.get('host', '?')}, pid {w.get('pid', '?')}, "
            f"commit {w.get('seq', '?')})")


def _makedir_private(path: str) -> None:
    """mkdir -p `path`, each folder it creates 0700 (whatever the umask); folders already
    there are left as they are."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if parent != path:
        _makedir_private(parent)
    try:
        os.mkdir(path, _DIR_MODE)  # the umask only takes bits off
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _open_private(path: str) -> Any:
    """A new file at `path` for writing, 0600 whatever the umask (truncated if there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # an older file of that name keeps no wider mode
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


class CheckpointInfo(NamedTuple):
    """What a committed save wrote (the result of ``save(...).result()``)."""

    step: int
    uri: str                      # s3://bucket/prefix/step-.../<save id>/ (the save's folder)
    manifest: Dict[str, Any]      # the manifest as written
    local_path: Optional[str]     # the local tier's folder, None without one (or on failure)
    seq: Optional[int] = None     # the commit's sequence number
    commit_uri: Optional[str] = None  # s3://bucket/prefix/commits/<seq>.json


class CommitInfo(NamedTuple):
    """One valid commit under the prefix (``AsyncCheckpointer.commits()``), oldest first."""

    seq: Optional[int]            # None: a commit of the version 1 layout (no sequence)
    step: int
    save_id: str
    time: float                   # when its writer committed it (the writer's clock)
    uri: str                      # the manifest's s3:// URI


class _Commit(NamedTuple):
    order: Tuple[int, int, str]   # (1, seq, name) for version 2; (0, step, "") for version 1
    seq: Optional[int]
    step: int
    key: str                      # the manifest's key
    manifest: Dict[str, Any]
    valid: bool                   # every object it names is there with its size and ETag


def _step_dir(step: int) -> str:
    return f"step-{step:012d}/"


def _parse_step_dir(name: str) -> Optional[int]:
    if not name.startswith("step-"):
        return None
    digits = name[5:]
    return int(digits) if digits.isdigit() else None


def _commit_name(seq: int, save_id: Optional[str]) -> str:
    """commits/<seq>.json; with a save id (a server that ignores If-None-Match) the name is
    unique to the save, and the order among equal sequence numbers is by name."""
    return f"{seq:016d}.json" if save_id is None else f"{seq:016d}-{save_id}.json"


def _parse_commit_name(name: str) -> Optional[int]:
    if not name.endswith(".json"):
        return None
    digits = name[:-5].split("-", 1)[0]
    return int(digits) if len(digits) == 16 and digits.isdigit() else None


def _new_save_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(8).hex()


def _norm_etag(etag: Optional[str]) -> str:
    return (etag or "").strip('"')


# -- staging ------------------------------------------------------------------------------

def _storage_bytes(t: Any) -> Any:
    """The whole storage of `t` as a uint8 tensor on t's device (no copy)."""
    import torch
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _stageable(t: Any) -> bool:
    import torch
    return (t.layout == torch.strided and not t.is_quantized and t.device.type != "meta"
            and type(t) in (torch.Tensor, torch.nn.Parameter))


class HostStager:
    """Host buffers for snapshots of tensors, allocated once and reused.

    ``stage(obj)`` returns a copy of `obj` (dicts, lists, tuples rebuilt; other leaves
    deep-copied) whose tensors live in one host arena: each distinct storage of the input gets
    its own storage in the arena (so shared storages stay shared, views stay views), and the
    arena is reused as long as the next state fits (``allocations`` counts the arenas
    allocated, ``capacity`` is the arena's size). Storages on a CUDA device are copied with
    ``non_blocking=True`` into pinned memory, then waited for (an event per device) before
    ``stage`` returns. Tensors that are not plain strided ones (sparse, quantized, tensor
    subclasses) are cloned to the CPU instead (counted in ``cloned``).

    Not thread-safe: one caller stages at a time, and the snapshot is valid until the next
    ``stage``. With ``track_views``, ``live_views`` counts the staged tensors still
    referenced (``in_use``: the snapshot is still alive somewhere), and ``on_free`` is called
    when the last one goes.

    With ``zip_layout``, the arena is laid out for ``s3flash._zipimage``: each storage at a
    64-byte aligned offset after a gap for its zip header, and room after the last one for
    the pickle, the small records and the central directory, so the whole torch.save file
    can be built in place around the staged bytes.
    """

    def __init__(self, pin_memory: Optional[bool] = None, track_views: bool = False,
                 on_free: Any = None, zip_layout: bool = False):
        self._pin = pin_memory
        self.zip_layout = zip_layout
        self.used_end = 0        # end of the last staged storage in the arena
        self.tail_hint = 0       # extra room after it (zip_layout), grown when short
        self._track = track_views
        self._on_free = on_free
        self._live_lock = threading.Lock()
        self.live_views = 0
        self._arena: Any = None
        self.capacity = 0
        self.allocations = 0
        self.cloned = 0
        self._slots: Dict[Tuple[int, int], Any] = {}   # (offset, nbytes) -> uint8 tensor

    def _want_pinned(self, any_cuda: bool) -> bool:
        import torch
        if self._pin is not None:
            return bool(self._pin) and torch.cuda.is_available()
        return any_cuda and torch.cuda.is_available()

    def _reserve(self, nbytes: int, pinned: bool) -> None:
        import torch
        if self._arena is not None and nbytes <= self.capacity and \
                bool(self._arena.is_pinned()) == pinned:
            return
        self._arena = None
        self._slots = {}
        cap = max(nbytes, _ALIGN)
        self._arena = torch.empty(cap, dtype=torch.uint8, pin_memory=pinned)
        self.capacity = cap
        self.allocations += 1

    def _slot(self, offset: int, nbytes: int) -> Any:
        """A uint8 tensor with a storage of its own over arena[offset:offset+nbytes]."""
        import torch
        s = self._slots.get((offset, nbytes))
        if s is None:
            if nbytes == 0:
                s = torch.empty(0, dtype=torch.uint8)
            else:
                arr = (ctypes.c_ubyte * nbytes).from_address(self._arena.data_ptr() + offset)
                arr._s3flash_arena = self._arena  # type: ignore[attr-defined]  # kept alive by them
                s = torch.frombuffer(memoryview(arr), dtype=torch.uint8)
            self._slots[(offset, nbytes)] = s
        return s

    @property
    def in_use(self) -> bool:
        return self.live_views > 0

    def _view_freed(self) -> None:
        with self._live_lock:
            self.live_views -= 1
            last = self.live_views == 0
        if last and self._on_free is not None:
            self._on_free()

    def _track_view(self, v: Any) -> None:
        if self._track:
            import weakref
            with self._live_lock:
                self.live_views += 1
            weakref.finalize(v, self._view_freed)

    @property
    def arena(self) -> Any:
        """The arena (a uint8 CPU tensor), None before the first stage."""
        return self._arena

    def arena_ptr(self) -> int:
        """Address of the arena (0 before the first stage): a second stage of a state that fits
        uses the same one."""
        return 0 if self._arena is None else int(self._arena.data_ptr())

    def stage(self, obj: Any) -> Any:
        import torch
        storages: "OrderedDict[Tuple[str, int, int], Any]" = OrderedDict()
        tensors: List[Any] = []

        def collect(o: Any) -> None:
            if isinstance(o, torch.Tensor):
                if _stageable(o):
                    st = o.untyped_storage()
                    storages.setdefault((str(o.device), st.data_ptr(), st.nbytes()), o)
                    tensors.append(o)
            elif isinstance(o, dict):
                for v in o.values():
                    collect(v)
            elif isinstance(o, (list, tuple)):
                for v in o:
                    collect(v)

        collect(obj)
        any_cuda = any(k[0].startswith("cuda") for k in storages)
        pinned = self._want_pinned(any_cuda)
        layout: Dict[Tuple[str, int, int], int] = {}
        total = 0
        if self.zip_layout:
            from ._zipimage import HEADER_GAP
            for k in storages:
                if not k[2]:
                    continue  # zero bytes: an empty storage outside the arena
                total = (total + HEADER_GAP + _ALIGN - 1) // _ALIGN * _ALIGN
                layout[k] = total
                total += k[2]
            self.used_end = total
            total += (1 << 20) + 512 * len(storages) + self.tail_hint
        else:
            for k in storages:
                layout[k] = total
                total += (k[2] + _ALIGN - 1) // _ALIGN * _ALIGN
            self.used_end = total
        self._reserve(total, pinned)

        # copy every distinct storage into its slot
        devices = set()
        staged_storage: Dict[Tuple[str, int, int], Any] = {}
        for k, t in storages.items():
            slot = self._slot(layout.get(k, 0), k[2])
            if k[2]:
                src = _storage_bytes(t)
                if t.device.type == "cuda":
                    slot.copy_(src, non_blocking=True)
                    devices.add(t.device)
                else:
                    slot.copy_(src)
            staged_storage[k] = slot.untyped_storage()
        used = {(layout.get(k, 0), k[2]) for k in storages}
        self._slots = {o: v for o, v in self._slots.items() if o in used}  # bounded
        for d in devices:  # the device-to-host copies are done before the caller goes on
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(d))
            ev.synchronize()

        def rebuild(o: Any) -> Any:
            if isinstance(o, torch.Tensor):
                if not _stageable(o):
                    self.cloned += 1
                    return o.detach().to("cpu", copy=True)
                st = o.untyped_storage()
                s = staged_storage[(str(o.device), st.data_ptr(), st.nbytes())]
                v = torch.empty(0, dtype=o.dtype).set_(s, o.storage_offset(), o.size(),
                                                       o.stride())
                self._track_view(v)
                if isinstance(o, torch.nn.Parameter):
                    return torch.nn.Parameter(v, requires_grad=o.requires_grad)
                return v
            if isinstance(o, dict):
                if type(o) in (dict, OrderedDict):
                    out = type(o)()
                else:
                    try:  # the same mapping type (defaultdict...), emptied
                        out = copy.copy(o)
                        out.clear()
                    except Exception:
                        out = {}
                for kk, vv in o.items():
                    out[kk] = rebuild(vv)
                if hasattr(o, "_metadata"):  # nn.Module.state_dict()'s version info
                    out._metadata = copy.deepcopy(o._metadata)  # type: ignore[attr-defined]
                return out
            if isinstance(o, list):
                return [rebuild(v) for v in o]
            if isinstance(o, tuple):
                items = [rebuild(v) for v in o]
                return o.__class__(*items) if hasattr(o, "_fields") else o.__class__(items)
            try:
                return copy.deepcopy(o)
            except Exception:
                return o

        return rebuild(obj)


# -- the stream that feeds every tier at once ---------------------------------------------

class _Tee:
    """torch.save's output: into the S3 writer and the local file, counting bytes and the
    CRC-32 (memoryviews of torch's buffers: no copy here; the S3 writer copies once into its
    part buffers)."""

    def __init__(self, s3w: Any, f: Any):
        self.s3w, self.f = s3w, f
        self.size = 0
        self.crc = 0
        self.local_error: Optional[BaseException] = None

    def write(self, b: Any) -> int:
        n = self.s3w.write(b)
        self.crc = zlib.crc32(b, self.crc)
        self.size += n
        if self.f is not None:
            try:
                self.f.write(b)
            except OSError as e:  # the local tier is optional: S3 goes on
                self.local_error = e
                self.f = None
        return n

    def flush(self) -> None:
        pass


def _crc32_file(path: str, chunk: int = 8 << 20) -> Tuple[int, int]:
    crc = 0
    size = 0
    buf = bytearray(chunk)
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(mv)
            if not n:
                return size, crc
            crc = zlib.crc32(mv[:n], crc)
            size += n


class _Job(NamedTuple):
    step: int
    staged: Any
    future: "concurrent.futures.Future[CheckpointInfo]"
    torch_save_kwargs: Dict[str, Any]


_live: "weakref.WeakSet[AsyncCheckpointer]" = weakref.WeakSet()


@atexit.register
def _finish_saves_at_exit() -> None:
    """The background thread is a daemon: at interpreter exit, saves asked for and not yet
    committed are finished first (as concurrent.futures does for its workers), instead of
    being cut off mid-upload."""
    for ck in list(_live):
        try:
            ck.wait()
        except Exception:  # noqa: BLE001
            pass


class AsyncCheckpointer:
    """Asynchronous, tiered checkpoints: ``save`` waits only for a copy of the state.

    Args:
        uri: ``s3://bucket/prefix/`` of the run; each save goes to
            ``prefix/step-NNN.../<save id>/``, each commit to ``prefix/commits/``.
        region, endpoint, s3client_config: as for ``S3Client`` (or pass ``client``).
        local_dir: a local directory (NVMe, tmpfs) that gets the same files; None: S3 only.
        keep_local: commits kept in ``local_dir`` (the newest ones; >= 1).
        keep_remote: commits kept in S3 (None: all): the newest ``keep_remote`` by commit
            order (not by step), up to this writer's commit. Older ones are deleted after a
            new save commits, each manifest before the objects it names; never the commit
            just made, never a newer one, and another writer's only once it is older than
            ``retention_window_s``.
        retention_window_s: how old (by the server's clock) another writer's commit, or an
            object no commit names, must be before retention removes it (default 3600 s;
            must exceed the longest save, from the start of its upload to its commit). This
            writer's own superseded commits and failed saves go at once. 0: no writer but
            this one, or only dead ones, is saving under the prefix (a restarted job that
            knows its predecessor is gone removes its leftovers at once).
        on_busy: when ``save`` is called while the previous save still holds the host
            buffers (in place: until its upload ends; streamed: until it is serialized):
            ``"wait"`` (the default) blocks until they are free, then
            stages; ``"skip"`` does not save this step (a warning, and a future whose result
            is None). Memory is bounded either way: one set of host buffers.
        pin_memory: stage into pinned memory (None: when a tensor is on a CUDA device).
        in_place: build the torch.save zip around the staged bytes and upload it from the
            host buffers with no copy (the default); the buffers are then busy until the
            upload ends. False (or a state that does not fit the layout, or
            torch_save_kwargs): torch.save streams into an S3 writer (one copy into its part
            buffers), and the buffers are free once the state is serialized.
        client: an ``S3Client`` to use instead of building one.
        conditional_put: whether the server honours ``If-None-Match: *`` on PutObject
            (None: found out once, with a probe object under ``commits/``, at the first
            commit). Without it each commit's name carries its save id, so two writers
            still never overwrite each other's commit (docs/PYTHON.md).
    """

    def __init__(self, uri: str, region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 local_dir: Optional[str] = None, keep_local: int = 1,
                 keep_remote: Optional[int] = None, *, on_busy: str = "wait",
                 pin_memory: Optional[bool] = None, in_place: bool = True,
                 client: Optional[S3Client] = None,
                 conditional_put: Optional[bool] = None,
                 retention_window_s: float = DEFAULT_RETENTION_WINDOW_S):
        bucket, prefix = _s3flash.parse_uri(uri)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if on_busy not in ("wait", "skip"):
            raise ValueError(f"on_busy must be 'wait' or 'skip', got {on_busy!r}")
        if keep_local < 1:
            raise ValueError(f"keep_local must be >= 1, got {keep_local}")
        if keep_remote is not None and keep_remote < 1:
            raise ValueError(f"keep_remote must be >= 1 or None, got {keep_remote}")
        if not retention_window_s >= 0:  # NaN too
            raise ValueError(f"retention_window_s must be >= 0, got {retention_window_s}")
        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{bucket}/{prefix}"
        self.local_dir = os.fspath(local_dir) if local_dir is not None else None
        self.keep_local, self.keep_remote = keep_local, keep_remote
        self.on_busy = on_busy
        self._client = client or S3Client(region, endpoint=endpoint,
                                          s3client_config=s3client_config)
        self.stager = HostStager(pin_memory, zip_layout=in_place)
        self.in_place_saves = 0   # saves uploaded from the arena with no copy
        self.stream_saves = 0     # saves streamed through torch.save into an S3 writer
        self._cond = threading.Condition()
        self._staging_busy = False      # the host buffers hold a state not yet serialized
        self._pending: List[_Job] = []  # at most one (the buffers are single)
        self._inflight = 0              # jobs queued or running
        self._closed = False
        self._manifests: Dict[Tuple[str, str], Dict[str, Any]] = {}  # (key, etag) -> manifest
        self.conditional_put = conditional_put
        self._own_leftovers: Set[str] = set()  # keys of this checkpointer's failed saves
        self.retention_window_s = float(retention_window_s)
        # this writer, in each of its commits: another writer's retention spares its saves
        self.writer_id = uuid.uuid4().hex[:16]
        self._host = socket.gethostname()
        self._own_commit_keys: Set[str] = set()
        self._first_seq: Optional[int] = None   # of this writer's first commit
        self._examined: Set[str] = set()        # commit keys of others already looked at
        self._warned: Set[str] = set()          # writers already warned about
        self._thread: Optional[threading.Thread] = None
        if self.local_dir:
            _makedir_private(self.local_dir)
        _live.add(self)

    # -- public -------------------------------------------------------------------------
    @property
    def client(self) -> S3Client:
        return self._client

    def save(self, state_dict: Any, step: int,
             **torch_save_kwargs: Any) -> "concurrent.futures.Future[Optional[CheckpointInfo]]":
        """Stage `state_dict` into the host buffers and return: the caller may change its
        tensors at once. The returned future's ``result()`` waits for the commit (a
        ``CheckpointInfo``) and raises the save's error; None when ``on_busy="skip"`` skipped
        this step."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        fut: "concurrent.futures.Future[Optional[CheckpointInfo]]" = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise ValueError("AsyncCheckpointer is closed")
            if self._staging_busy:
                if self.on_busy == "skip":
                    warnings.warn(f"s3flash.AsyncCheckpointer: step {step} skipped, the "
                                  "previous save is still serializing (on_busy='skip')",
                                  RuntimeWarning, stacklevel=2)
                    fut.set_result(None)
                    return fut
                while self._staging_busy:
                    self._cond.wait()
            self._staging_busy = True
        try:
            staged = self.stager.stage(state_dict)
        except BaseException:
            with self._cond:
                self._staging_busy = False
                self._cond.notify_all()
            raise
        fut.set_running_or_notify_cancel()
        with self._cond:
            self._enqueue(_Job(step, staged, fut, torch_save_kwargs))  # type: ignore
        return fut

    _thread_name = "s3flash-checkpoint"

    def _enqueue(self, job: "_Job") -> None:
        """Queue a save for the background thread, started on first use (self._cond held)."""
        self._pending.append(job)
        self._inflight += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._thread_name,
                                            daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def wait(self) -> None:
        """Wait until every save asked for so far has committed (or failed) and its retention
        has run. Errors are not raised here: they are in each save's future."""
        with self._cond:
            while self._inflight:
                self._cond.wait()

    def latest(self) -> Optional[int]:
        """The step of the newest valid commit in S3 (by commit order, not the highest step:
        after a rollback to an older step, the saves made since), or None."""
        c = self._valid_commits()
        return c[-1].step if c else None

    def steps(self) -> List[int]:
        """The steps of the valid commits in S3, in commit order (oldest first); a step
        committed more than once is listed where its newest commit is."""
        seen: Dict[int, int] = {}
        for i, c in enumerate(self._valid_commits()):
            seen[c.step] = i
        return sorted(seen, key=seen.__getitem__)

    def commits(self) -> List[CommitInfo]:
        """Every valid commit in S3, oldest first."""
        return [CommitInfo(c.seq, c.step, str(c.manifest.get("save_id", "")),
                           float(c.manifest.get("time", 0)), f"s3://{self.bucket}/{c.key}")
                for c in self._valid_commits()]

    def load(self, step: Optional[int] = None, map_location: Any = None,
             **torch_load_kwargs: Any) -> Any:
        """The state dict of the newest valid commit of `step` (None: the newest valid
        commit). The bytes are exactly the ones its manifest names: from the local tier when
        its copy is that commit's (same save, ETag, size and CRC-32), else from S3 with
        If-Match on the manifest's ETag (an object replaced since fails, never loads other
        bytes). FileNotFoundError when there is no such commit. ``mmap=True`` maps the local
        copy (the tensors are backed by the file's pages: no copy); it is ignored for S3."""
        import torch
        from ._reader import S3ReaderConstructor
        commits = self._valid_commits()
        if step is not None:
            commits = [c for c in commits if c.step == step]
        if not commits:
            raise FileNotFoundError(f"no committed checkpoint under {self.uri}" if step is None
                                    else f"no committed checkpoint of step {step} under "
                                    f"{self.uri}")
        commit = commits[-1]
        obj = next((o for o in commit.manifest["objects"] if o["name"] == STATE_NAME), None)
        if obj is None:
            raise ValueError(f"commit {commit.seq} of step {commit.step} under {self.uri} "
                             f"names no {STATE_NAME} (a directory checkpoint, "
                             f"{commit.manifest.get('directory')!r}: "
                             "s3flash.hf.resolve_checkpoint downloads it)")
        self.last_load_tier = "s3"
        path = self._local_valid(commit, obj)
        if path is not None:
            self.last_load_tier = "local"
            return torch.load(path, map_location=map_location, **torch_load_kwargs)
        torch_load_kwargs.pop("mmap", None)  # a local file only
        r = S3ReaderConstructor.sequential()(self._client, self.bucket, obj["key"])
        if obj.get("etag"):
            r._known = (int(obj["size"]), f'"{obj["etag"]}"')  # If-Match on every GET
        with r:
            return torch.load(r, map_location=map_location, **torch_load_kwargs)

    def cleanup_uploads(self, older_than: float = 0) -> List[Any]:
        """Abort the multipart uploads under the prefix started more than `older_than`
        seconds ago (what a killed process left). Waits for this checkpointer's own saves
        first; other writers on the same prefix must not be saving."""
        from ._uploads import cleanup_uploads
        self.wait()
        return cleanup_uploads(self.bucket, self.prefix, older_than, client=self._client)

    def close(self) -> None:
        """Wait for the saves in flight, then stop the background thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.wait()
        t = self._thread
        if t is not None:
            t.join()

    def __enter__(self) -> "AsyncCheckpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- background -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                job = self._pending.pop(0)
            try:
                info = self._save_job(job)
            except BaseException as e:  # noqa: BLE001  (the future carries it)
                self._release_staging()
                job.future.set_exception(e)
            else:
                job.future.set_result(info)
                try:
                    assert info.commit_uri is not None
                    self._retain(info.commit_uri[len(f"s3://{self.bucket}/"):])
                except Exception as e:  # noqa: BLE001
                    warnings.warn(f"s3flash.AsyncCheckpointer: retention after step "
                                  f"{job.step} failed: {e}", RuntimeWarning)
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def _release_staging(self) -> None:
        with self._cond:
            if self._staging_busy:
                self._staging_busy = False
                self._cond.notify_all()

    def _save_job(self, job: _Job) -> CheckpointInfo:
        save_id = _new_save_id()
        sdir = self.prefix + _step_dir(job.step) + save_id + "/"
        key = sdir + STATE_NAME
        local_tmp = local_save = None
        f = None
        if self.local_dir:
            local_save = os.path.join(self.local_dir, _step_dir(job.step), save_id)
            try:
                _makedir_private(local_save)
                local_tmp = os.path.join(local_save, f".{STATE_NAME}.tmp")
                f = _open_private(local_tmp)
            except OSError as e:
                warnings.warn(f"s3flash.AsyncCheckpointer: local tier off for step "
                              f"{job.step}: {e}", RuntimeWarning)
                local_save = None
        committed = verified = False
        started = time.monotonic()  # before the upload: the object is younger than this
        try:
            size, crc, info, local_error = self._write_object(job, key, f)
            f = None
            obj = {"name": STATE_NAME, "key": key, "size": size,
                   "crc32": f"{crc:08x}", "etag": _norm_etag(info.get("etag"))}
            if info.get("size") is not None and int(info["size"]) != size:
                raise _s3flash.S3IOError(f"{key}: uploaded {info['size']} bytes, "
                                         f"serialized {size}")
            manifest = self._new_manifest(job.step, save_id, [obj])
            # the commit: the manifest, after every object is complete
            seq, ckey, body = self._commit(manifest, save_id)
            committed = True
            self._verify_commit(manifest, ckey, started)
            verified = True
            local_path = None
            if local_save and local_tmp and local_error is None:
                local_path = self._commit_local(local_save, local_tmp, body)
            elif local_error is not None:
                warnings.warn(f"s3flash.AsyncCheckpointer: local copy of step {job.step} "
                              f"failed: {local_error}", RuntimeWarning)
            return CheckpointInfo(job.step, f"s3://{self.bucket}/{sdir}", manifest,
                                  local_path, seq, f"s3://{self.bucket}/{ckey}")
        finally:
            if not verified:
                self._own_leftovers.add(key)  # named by no valid commit: the next retention's
            if f is not None:
                f.close()
            if local_tmp and os.path.exists(local_tmp):
                os.unlink(local_tmp)
            if local_save and not committed:
                try:
                    os.rmdir(local_save)
                except OSError:
                    pass

    def _new_manifest(self, step: int, save_id: str, objects: List[Dict[str, Any]],
                      **extra: Any) -> Dict[str, Any]:
        """The manifest of a save (its "seq" is added by _commit): the objects it names, each
        with name, key, size, crc32 and etag; `extra` fields beside them."""
        import torch
        return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "step": step,
                "save_id": save_id, "time": time.time(), "torch": torch.__version__,
                "objects": objects, **extra,
                "writer": {"id": self.writer_id, "host": self._host, "pid": os.getpid()}}

    def _commit(self, manifest: Dict[str, Any], save_id: str) -> Tuple[int, str, bytes]:
        """Write the manifest as the next commit: commits/<seq>.json with If-None-Match: *
        (a 412: another writer took that number; the next free one is tried). Returns
        (seq, key, body)."""
        if self.conditional_put is None:
            self.conditional_put = self._probe_conditional_put()
        taken: List[str] = []  # numbers another writer took while this one tried them
        for _ in range(_COMMIT_TRIES):
            keys = self._commit_keys()
            self._note_other_writers(keys, taken)
            seq = 1 + max((s for s, _, _ in keys), default=0)
            manifest["seq"] = seq
            body = json.dumps(manifest, indent=1).encode()
            key = self.prefix + COMMITS_DIR + _commit_name(
                seq, None if self.conditional_put else save_id)
            try:
                self._client.native.put_object(
                    self.bucket, key, body,
                    if_none_match="*" if self.conditional_put else None,
                    content_type="application/json")
            except _s3flash.S3Exception as e:
                if getattr(e, "status", "") != "S3F_ERR_PRECONDITION_FAILED":
                    raise
                taken.append(key)
                continue  # another writer committed under this number first
            self._own_commit_keys.add(key)
            if self._first_seq is None:
                self._first_seq = seq
            return seq, key, body
        raise _s3flash.S3Exception(
            f"s3flash.AsyncCheckpointer: no commit after {_COMMIT_TRIES} tries under "
            f"{self.uri}{COMMITS_DIR}: other writers took every sequence number tried")

    def _probe_conditional_put(self) -> bool:
        """Whether the server refuses a second PutObject with If-None-Match: * over a key
        (some S3-compatible servers ignore the header: the second one then overwrites)."""
        key = f"{self.prefix}{COMMITS_DIR}.probe-{_new_save_id()}"
        nat = self._client.native
        try:
            nat.put_object(self.bucket, key, b"probe", if_none_match="*")
            try:
                nat.put_object(self.bucket, key, b"probe", if_none_match="*")
            except _s3flash.S3Exception as e:
                if getattr(e, "status", "") == "S3F_ERR_PRECONDITION_FAILED":
                    return True
                if getattr(e, "http_status", 0) in (400, 501):
                    pass  # the header is refused: not supported
                else:
                    raise
        except _s3flash.S3Exception as e:
            if getattr(e, "http_status", 0) not in (400, 501):
                raise
        finally:
            try:
                nat.delete_object(self.bucket, key)
            except _s3flash.S3Exception:
                pass
        warnings.warn(f"s3flash.AsyncCheckpointer: the server at {self.uri} ignores "
                      "If-None-Match on PutObject: commits are named by their save id "
                      "(docs/PYTHON.md)", RuntimeWarning)
        return False

    def _write_object(self, job: _Job, key: str, f: Any
                      ) -> Tuple[int, int, Dict[str, Any], Optional[BaseException]]:
        """Serialize the staged state into the object at `key` (and the local file `f`, which
        this closes). In place when it can (the zip built around the staged bytes in the
        arena, uploaded with no copy); else the same zip streamed into an S3 writer
        (_zipimage.stream, or torch.save itself with torch_save_kwargs). Frees the
        host buffers once they are no longer read. Returns (size, CRC-32, the upload's info,
        the local file's error)."""
        import torch
        from . import _zipimage
        if self.stager.zip_layout and not job.torch_save_kwargs:
            st = self.stager
            try:
                size, crc, _ = _zipimage.build(job.staged, st.arena, st.used_end, st.capacity)
            except _zipimage.Unsupported as e:
                if "does not fit" in str(e):
                    st.tail_hint = 2 * st.tail_hint + (4 << 20)  # more room from the next save
            else:
                try:
                    view = memoryview(st.arena.numpy())[:size]
                    local_error: List[BaseException] = []
                    writer = None
                    if f is not None:  # the local tier in parallel with the upload
                        def write_local() -> None:
                            try:
                                with f:
                                    f.write(view)
                            except OSError as e:
                                local_error.append(e)
                        writer = threading.Thread(target=write_local,
                                                  name="s3flash-checkpoint-local")
                        writer.start()
                    try:
                        info = self._client.upload(self.bucket, key, view)
                    finally:
                        if writer is not None:
                            writer.join()
                    self.in_place_saves += 1
                    return size, crc, info or {}, (local_error[0] if local_error else None)
                finally:
                    self._release_staging()
        with self._client.put_object(self.bucket, key) as w:
            tee = _Tee(w, f)
            try:
                try:  # torch.save's zip with the GIL let go while CRCs are computed
                    if job.torch_save_kwargs:
                        raise _zipimage.Unsupported("torch.save arguments")
                    _zipimage.stream(job.staged, tee.write)
                except _zipimage.Unsupported:  # raised before any byte is written
                    torch.save(job.staged, tee, **job.torch_save_kwargs)
            finally:
                self._release_staging()  # serialized: the host buffers are free
                if f is not None:
                    try:
                        f.close()
                    except OSError as e:
                        tee.local_error = tee.local_error or e
        self.stream_saves += 1
        return tee.size, tee.crc, w.info or {}, tee.local_error

    def _commit_local(self, local_save: str, tmp: str, body: bytes) -> Optional[str]:
        try:
            os.replace(tmp, os.path.join(local_save, STATE_NAME))
            mtmp = os.path.join(local_save, f".{MANIFEST_NAME}.tmp")
            with _open_private(mtmp) as m:
                m.write(body)
            os.replace(mtmp, os.path.join(local_save, MANIFEST_NAME))
        except OSError as e:
            warnings.warn(f"s3flash.AsyncCheckpointer: local copy not kept: {e}",
                          RuntimeWarning)
            return None
        return local_save

    def _local_dir_of(self, commit: _Commit) -> Optional[str]:
        if not self.local_dir:
            return None
        d = os.path.join(self.local_dir, _step_dir(commit.step).rstrip("/"))
        if commit.seq is None:
            return d  # version 1: step-N/state.pt
        sid = str(commit.manifest.get("save_id", ""))
        if not sid or "/" in sid or sid.startswith("."):
            return None
        return os.path.join(d, sid)

    def _local_valid(self, commit: _Commit, obj: Dict[str, Any]) -> Optional[str]:
        """The local copy of `obj` when it is the one `commit` names: its folder's manifest
        is that commit's (the same sequence number and ETag), and the file has the
        manifest's size and CRC-32."""
        d = self._local_dir_of(commit)
        if d is None:
            return None
        path = os.path.join(d, obj["name"])
        try:
            with open(os.path.join(d, MANIFEST_NAME), "rb") as mf:
                local = json.loads(mf.read(1 << 20))
            lobj = [o for o in local.get("objects", []) if o.get("name") == obj["name"]]
            if local.get("seq") != commit.seq or local.get("step") != commit.step or \
                    len(lobj) != 1 or lobj[0].get("etag") != obj.get("etag") or \
                    lobj[0].get("key") != obj.get("key"):
                return None
            if os.path.getsize(path) != obj["size"]:
                return None
            size, crc = _crc32_file(path)
        except (OSError, ValueError, AttributeError):
            return None
        if size != obj["size"] or f"{crc:08x}" != obj["crc32"]:
            return None
        return path

    # -- commits and retention ------------------------------------------------------------
    def _commit_keys(self) -> List[Tuple[int, str, str]]:
        """(seq, key, ETag) of every commit record under commits/, in commit order."""
        out = []
        for o in self._client.list_objects(self.bucket, self.prefix + COMMITS_DIR):
            name = o.key[len(self.prefix) + len(COMMITS_DIR):]
            seq = _parse_commit_name(name)
            if seq is not None:
                out.append((seq, o.key, _norm_etag(o.etag)))
        return sorted(out)

    # -- other writers --------------------------------------------------------------------
    def _writer_of(self, key: str, etag: str, seq: Optional[int]) -> Dict[str, Any]:
        """What the commit record at `key` says of its writer ({} for one of this writer)."""
        m = self._manifest(key, etag) or {}
        raw = m.get("writer")
        w: Dict[str, Any] = raw if isinstance(raw, dict) else {}
        if w.get("id") == self.writer_id:
            return {}
        return {"id": str(w.get("id") or ""), "host": str(w.get("host", "?")),
                "pid": w.get("pid", "?"), "seq": seq, "key": key, "time": m.get("time")}

    def _note_other_writers(self, keys: List[Tuple[int, str, str]], taken: List[str]) -> None:
        """Warn (once per writer) about a second live writer: one that committed after this
        writer's first commit, or took a number this writer was committing under."""
        for seq, key, etag in keys:
            if key in self._own_commit_keys or key in self._examined:
                continue
            if key not in taken and (self._first_seq is None or seq <= self._first_seq):
                continue  # before this writer's first commit: maybe a dead predecessor's
            w = self._writer_of(key, etag, seq)
            name = w.get("id") or key
            if not w or name in self._warned:
                self._examined.add(key)
                continue
            msg = (f"s3flash.AsyncCheckpointer: a second writer is saving under {self.uri}: "
                   f"{_describe_writer(w)}, beside this one (writer {self.writer_id}, host "
                   f"{self._host}, pid {os.getpid()}). Saves of each are kept from the "
                   f"other's retention for retention_window_s={self.retention_window_s:g} s; "
                   "give each writer a prefix of its own (docs/PYTHON.md)")
            log.warning("%s", msg)
            # noted once it is said: with an "error" filter every save raises, before its
            # commit, while the other writer's commit is there
            warnings.warn(msg, ConcurrentWriterWarning)
            self._examined.add(key)
            self._warned.add(name)

    def _other_writers(self) -> List[Dict[str, Any]]:
        """Every other writer that has a commit record under the prefix, newest first (by
        its newest commit)."""
        seen: Dict[str, Dict[str, Any]] = {}
        for seq, key, etag in reversed(self._commit_keys()):
            if key in self._own_commit_keys:
                continue
            w = self._writer_of(key, etag, seq)
            if w and (w["id"] or key) not in seen:
                seen[w["id"] or key] = w
        return list(seen.values())

    def _verify_commit(self, manifest: Dict[str, Any], ckey: str, started: float) -> None:
        """After the commit record is written: it and every object it names are there (HEAD),
        with the size and ETag it names; else ConcurrentWriterError naming the other writers
        (whose retention removed them). A save that took longer than the retention window
        is warned about: a retention of another writer that listed the prefix before this
        commit may remove its object after this check."""
        missing: List[str] = []
        why: List[str] = []
        for o in manifest["objects"]:
            try:
                h = self._client.head_object(self.bucket, o["key"])
            except _s3flash.S3NotFoundError:
                missing.append(o["key"])
                why.append(f"{o['key']} is gone")
                continue
            etag = _norm_etag(h.get("etag"))
            if int(h.get("size", -1)) != o["size"] or (o["etag"] and etag and
                                                        etag != o["etag"]):
                missing.append(o["key"])
                why.append(f"{o['key']} is another object now (size {h.get('size')}, "
                           f"ETag {etag}; committed: size {o['size']}, ETag {o['etag']})")
        try:
            self._client.head_object(self.bucket, ckey)
        except _s3flash.S3NotFoundError:
            missing.append(ckey)
            why.append(f"the commit record {ckey} is gone")
        if missing:
            others = self._other_writers()
            named = "; ".join(_describe_writer(w) for w in others) or \
                "no commit of another writer is left under commits/ (an older s3flash, " \
                "or a tool deleting under the prefix)"
            raise ConcurrentWriterError(
                f"s3flash.AsyncCheckpointer: commit {manifest.get('seq')} of step "
                f"{manifest.get('step')} under {self.uri} was written, but {', '.join(why)}: "
                f"removed by another writer's retention. Other writers on the prefix: "
                f"{named}. One writer per prefix; a writer's retention_window_s must exceed "
                f"the other's longest save (this one: writer {self.writer_id}, "
                f"retention_window_s={self.retention_window_s:g})", others, missing)
        took = time.monotonic() - started
        if self.retention_window_s and took >= self.retention_window_s:
            warnings.warn(f"s3flash.AsyncCheckpointer: the save of step {manifest.get('step')} "
                          f"took {took:.0f} s from its upload to its commit, longer than "
                          f"retention_window_s={self.retention_window_s:g}: a retention of "
                          "another writer that listed the prefix before this commit may still "
                          "remove its object; raise retention_window_s above the longest save",
                          RuntimeWarning)

    def _listing(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(commit records, data objects): key -> ObjectInfo under commits/ and step-*/."""
        commits = {o.key: o for o in self._client.list_objects(self.bucket,
                                                               self.prefix + COMMITS_DIR)}
        data = {o.key: o for o in self._client.list_objects(self.bucket,
                                                            self.prefix + "step-")}
        return commits, data

    def _manifest(self, key: str, etag: str) -> Optional[Dict[str, Any]]:
        m = self._manifests.get((key, etag))
        if m is None:
            try:
                got = self._client.native.download_whole(self.bucket, key, 1 << 20)
                if got is None:
                    return None
                m = json.loads(got[0])
            except (_s3flash.S3NotFoundError, ValueError):
                return None
            if not isinstance(m, dict):
                return None
            self._manifests[(key, etag)] = m
        return m

    def _commits(self, listing: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None
                 ) -> List[_Commit]:
        """Every commit record under the prefix (valid or not), in commit order: those of
        the version 1 layout first (by step), then the numbered ones."""
        records, data = self._listing() if listing is None else listing
        out: List[_Commit] = []
        for key, o in records.items():
            name = key[len(self.prefix) + len(COMMITS_DIR):]
            seq = _parse_commit_name(name)
            if seq is None:
                continue
            m = self._manifest(key, _norm_etag(o.etag))
            ok = bool(m) and m.get("format") == MANIFEST_FORMAT and m.get("seq") == seq and \
                isinstance(m.get("step"), int)
            if m and not ok:
                m = {}
            out.append(_Commit((1, seq, name), seq, int(m.get("step", -1)) if m else -1, key,
                               m or {}, ok and self._objects_there(m, data)))
        for key, o in data.items():  # version 1: step-N/manifest.json
            d, _, name = key[len(self.prefix):].partition("/")
            step = _parse_step_dir(d)
            if step is None or name != MANIFEST_NAME:
                continue
            m = self._manifest(key, _norm_etag(o.etag))
            ok = bool(m) and m.get("format") == MANIFEST_FORMAT and m.get("step") == step
            out.append(_Commit((0, step, ""), None, step, key, m if ok else {},
                               ok and self._objects_there(m, data)))  # type: ignore[arg-type]
        return sorted(out, key=lambda c: c.order)

    def _objects_there(self, m: Dict[str, Any], data: Dict[str, Any]) -> bool:
        objs = m.get("objects")
        if not isinstance(objs, list) or not objs:
            return False
        for o in objs:
            if not isinstance(o, dict) or not isinstance(o.get("key"), str):
                return False
            have = data.get(o["key"])
            if have is None or have.size != o.get("size") or \
                    (o.get("etag") and _norm_etag(have.etag) and
                     _norm_etag(have.etag) != o["etag"]):
                return False
        return True

    def _valid_commits(self) -> List[_Commit]:
        return [c for c in self._commits() if c.valid]

    def _own(self, c: _Commit) -> bool:
        w = c.manifest.get("writer")
        return isinstance(w, dict) and w.get("id") == self.writer_id

    def _retain(self, ckey: str) -> None:
        """Retention after this writer's commit `ckey`: of the commits up to it, the newest
        `keep_remote` valid ones and it are kept. The others go (each record before the
        objects it names) when this writer made them, or when they are older than
        retention_window_s (by the server's clock: the window ends at this commit record's
        Last-Modified); newer commits are never touched. Then the objects no remaining
        commit names: those of the commits removed, this writer's failed saves, and the
        others older than the window (leftovers of killed saves; younger ones may be a
        save of another writer about to commit)."""
        if self.keep_remote is not None:
            listing = self._listing()
            records, data = listing
            commits = self._commits(listing)
            mine = next((i for i, c in enumerate(commits) if c.key == ckey), None)
            if mine is None or ckey not in records:
                raise _s3flash.S3IOError(f"{ckey}: this writer's commit record is not in the "
                                         f"listing of {self.uri}{COMMITS_DIR}")
            horizon = records[ckey].last_modified - self.retention_window_s
            upto = commits[:mine + 1]
            kept = {c.key for c in [c for c in upto if c.valid][-self.keep_remote:]}
            kept.add(ckey)

            def old(c: _Commit) -> bool:
                o = records.get(c.key) or data.get(c.key)
                return o is not None and o.last_modified <= horizon

            # uncommit first (invalid records too); a newer record is never touched (the
            # highest number stays, so numbers only grow)
            doomed = [c for c in upto if c.key not in kept and (self._own(c) or old(c))]
            doomed_keys = {c.key for c in doomed}
            named: Set[str] = set()
            dropped: Set[str] = set()
            for c in commits:
                (dropped if c.key in doomed_keys else named).update(
                    str(o.get("key")) for o in c.manifest.get("objects", [])
                    if isinstance(o, dict))
            for c in doomed:
                self._client.delete_object(self.bucket, c.key)
            rest = []
            for key, o in data.items():
                if key in named or key.endswith("/" + MANIFEST_NAME) and \
                        key.count("/") - self.prefix.count("/") == 1:
                    continue  # named, or a version 1 record (kept or removed above)
                if key in dropped or key in self._own_leftovers or \
                        o.last_modified <= horizon:
                    rest.append(key)
            if rest:
                self._client.native.delete_objects(self.bucket, rest)
            self._own_leftovers -= set(rest)
        if self.local_dir:
            self._retain_local()

    def _retain_local(self) -> None:
        """Keep the local copies of the newest `keep_local` commits (by the sequence number
        in each copy's manifest); remove the rest and what never completed."""
        import shutil
        assert self.local_dir is not None
        entries: List[Tuple[Tuple[int, int, str], str, bool]] = []  # (order, path, is_v1)
        for name in os.listdir(self.local_dir):
            step = _parse_step_dir(name)
            if step is None:
                continue
            sdir = os.path.join(self.local_dir, name)
            try:
                inner = os.listdir(sdir)
            except OSError:
                continue
            if MANIFEST_NAME in inner:
                entries.append(((0, step, ""), sdir, True))
            for sub in inner:
                path = os.path.join(sdir, sub)
                if sub.startswith(".") or not os.path.isdir(path):
                    continue
                seq = None
                try:
                    with open(os.path.join(path, MANIFEST_NAME), "rb") as mf:
                        seq = json.loads(mf.read(1 << 20)).get("seq")
                except (OSError, ValueError, AttributeError):
                    pass
                entries.append(((1, seq, sub) if isinstance(seq, int) else (-1, 0, sub),
                                path, False))
        complete = sorted((e for e in entries if e[0][0] >= 0), key=lambda e: e[0])
        keep = {e[1] for e in complete[-self.keep_local:]}
        # retention runs on the background thread between saves: no local copy is being
        # written now, so what is not complete is a leftover (a failed or killed save)
        for _, path, v1 in entries:
            if path in keep:
                continue
            if v1:  # the version 1 files directly in the step folder
                for n in os.listdir(path):
                    p = os.path.join(path, n)
                    if not os.path.isdir(p):
                        try:
                            os.unlink(p)
                        except OSError:
                            pass
            else:
                shutil.rmtree(path, ignore_errors=True)
        for name in os.listdir(self.local_dir):
            if _parse_step_dir(name) is not None:
                try:
                    os.rmdir(os.path.join(self.local_dir, name))  # only when empty
                except OSError:
                    pass
