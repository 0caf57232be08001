"""AsyncCheckpointer: a save pauses the caller for a copy into reused host buffers; the
serialization, the upload (in place from those buffers: s3flash/_zipimage.py), the local
tier, the commit and the retention run in the background.

Layout under the prefix (``s3://bucket/run/``), one folder per step::

    run/step-000000000042/state.pt        torch.save's zip (loadable by torch.load anywhere)
    run/step-000000000042/manifest.json   written LAST: the commit

The manifest lists the step's objects with their size, CRC-32 and ETag. A step is committed
when its manifest exists and every object it names is there with that size and ETag; only
committed steps are seen by ``latest()`` and ``load()``. The local tier (``local_dir``) holds
the same files under the same names.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import copy
import ctypes
import json
import os
import threading
import time
import warnings
import weakref
import zlib
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ._checkpoint import parse_s3_uri  # noqa: F401  (the same URI rules)
from ._client import S3Client
from ._config import S3ClientConfig
from . import _s3flash

__all__ = ["AsyncCheckpointer", "CheckpointInfo", "HostStager", "MANIFEST_NAME", "STATE_NAME"]

MANIFEST_NAME = "manifest.json"
STATE_NAME = "state.pt"
MANIFEST_FORMAT = "s3flash.checkpoint"
MANIFEST_VERSION = 1
_ALIGN = 64


class CheckpointInfo(NamedTuple):
    """What a committed save wrote (the result of ``save(...).result()``)."""

    step: int
    uri: str                      # s3://bucket/prefix/step-.../ (the step's folder)
    manifest: Dict[str, Any]      # the manifest as written
    local_path: Optional[str]     # the local tier's folder, None without one (or on failure)


def _step_dir(step: int) -> str:
    return f"step-{step:012d}/"


def _parse_step_dir(name: str) -> Optional[int]:
    if not name.startswith("step-"):
        return None
    digits = name[5:]
    return int(digits) if digits.isdigit() else None


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
        uri: ``s3://bucket/prefix/`` of the run; each step goes to ``prefix/step-NNN.../``.
        region, endpoint, s3client_config: as for ``S3Client`` (or pass ``client``).
        local_dir: a local directory (NVMe, tmpfs) that gets the same files; None: S3 only.
        keep_local: committed steps kept in ``local_dir`` (the newest ones; >= 1).
        keep_remote: committed steps kept in S3 (None: all). Older ones are deleted after a
            new step commits, never the newest committed one.
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
    """

    def __init__(self, uri: str, region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 local_dir: Optional[str] = None, keep_local: int = 1,
                 keep_remote: Optional[int] = None, *, on_busy: str = "wait",
                 pin_memory: Optional[bool] = None, in_place: bool = True,
                 client: Optional[S3Client] = None):
        bucket, prefix = _s3flash.parse_uri(uri)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if on_busy not in ("wait", "skip"):
            raise ValueError(f"on_busy must be 'wait' or 'skip', got {on_busy!r}")
        if keep_local < 1:
            raise ValueError(f"keep_local must be >= 1, got {keep_local}")
        if keep_remote is not None and keep_remote < 1:
            raise ValueError(f"keep_remote must be >= 1 or None, got {keep_remote}")
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
        self._thread: Optional[threading.Thread] = None
        if self.local_dir:
            os.makedirs(self.local_dir, exist_ok=True)
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
            self._pending.append(_Job(step, staged, fut, torch_save_kwargs))  # type: ignore
            self._inflight += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="s3flash-checkpoint",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return fut

    def wait(self) -> None:
        """Wait until every save asked for so far has committed (or failed) and its retention
        has run. Errors are not raised here: they are in each save's future."""
        with self._cond:
            while self._inflight:
                self._cond.wait()

    def latest(self) -> Optional[int]:
        """The newest committed step in S3, or None."""
        c = self._committed()
        return max(c) if c else None

    def steps(self) -> List[int]:
        """Every committed step in S3, oldest first."""
        return sorted(self._committed())

    def load(self, step: Optional[int] = None, map_location: Any = None,
             **torch_load_kwargs: Any) -> Any:
        """The state dict of `step` (None: the latest committed one). From the local tier when
        its copy is complete and matches the manifest (size and CRC-32), else from S3.
        FileNotFoundError when there is no such committed step. ``mmap=True`` maps the local
        copy (the tensors are backed by the file's pages: no copy); it is ignored for S3."""
        import torch
        committed = self._committed()
        if step is None:
            if not committed:
                raise FileNotFoundError(f"no committed checkpoint under {self.uri}")
            step = max(committed)
        if step not in committed:
            raise FileNotFoundError(f"no committed checkpoint of step {step} under {self.uri}")
        manifest = committed[step]
        obj = next(o for o in manifest["objects"] if o["name"] == STATE_NAME)
        self.last_load_tier = "s3"
        path = self._local_valid(step, obj)
        if path is not None:
            self.last_load_tier = "local"
            return torch.load(path, map_location=map_location, **torch_load_kwargs)
        torch_load_kwargs.pop("mmap", None)  # a local file only
        with self._client.get_object(self.bucket, obj["key"]) as r:
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
                    self._retain(job.step)
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
        import torch
        sdir = self.prefix + _step_dir(job.step)
        key = sdir + STATE_NAME
        local_tmp = local_step = None
        f = None
        if self.local_dir:
            local_step = os.path.join(self.local_dir, _step_dir(job.step).rstrip("/"))
            try:
                os.makedirs(local_step, exist_ok=True)
                local_tmp = os.path.join(local_step, f".{STATE_NAME}.{os.getpid()}.tmp")
                f = open(local_tmp, "wb")
            except OSError as e:
                warnings.warn(f"s3flash.AsyncCheckpointer: local tier off for step "
                              f"{job.step}: {e}", RuntimeWarning)
                local_step = None
        try:
            size, crc, info, local_error = self._write_object(job, key, f)
            f = None
            obj = {"name": STATE_NAME, "key": key, "size": size,
                   "crc32": f"{crc:08x}", "etag": _norm_etag(info.get("etag"))}
            if info.get("size") is not None and int(info["size"]) != size:
                raise _s3flash.S3IOError(f"{key}: uploaded {info['size']} bytes, "
                                         f"serialized {size}")
            manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION,
                        "step": job.step, "time": time.time(),
                        "torch": torch.__version__, "objects": [obj]}
            body = json.dumps(manifest, indent=1).encode()
            # the commit: the manifest, after every object is complete
            self._client.upload(self.bucket, sdir + MANIFEST_NAME, body)
            local_path = None
            if local_step and local_tmp and local_error is None:
                local_path = self._commit_local(local_step, local_tmp, body)
            elif local_error is not None:
                warnings.warn(f"s3flash.AsyncCheckpointer: local copy of step {job.step} "
                              f"failed: {local_error}", RuntimeWarning)
            return CheckpointInfo(job.step, f"s3://{self.bucket}/{sdir}", manifest,
                                  local_path)
        finally:
            if f is not None:
                f.close()
            if local_tmp and os.path.exists(local_tmp):
                os.unlink(local_tmp)

    def _write_object(self, job: _Job, key: str, f: Any
                      ) -> Tuple[int, int, Dict[str, Any], Optional[BaseException]]:
        """Serialize the staged state into the object at `key` (and the local file `f`, which
        this closes). In place when it can (the zip built around the staged bytes in the
        arena, uploaded with no copy); else torch.save streamed into an S3 writer. Frees the
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

    def _commit_local(self, local_step: str, tmp: str, body: bytes) -> Optional[str]:
        try:
            os.replace(tmp, os.path.join(local_step, STATE_NAME))
            mtmp = os.path.join(local_step, f".{MANIFEST_NAME}.tmp")
            with open(mtmp, "wb") as m:
                m.write(body)
            os.replace(mtmp, os.path.join(local_step, MANIFEST_NAME))
        except OSError as e:
            warnings.warn(f"s3flash.AsyncCheckpointer: local copy not kept: {e}",
                          RuntimeWarning)
            return None
        return local_step

    def _local_valid(self, step: int, obj: Dict[str, Any]) -> Optional[str]:
        """The local copy of `obj` when it is there with the manifest's size and CRC-32."""
        if not self.local_dir:
            return None
        path = os.path.join(self.local_dir, _step_dir(step).rstrip("/"), obj["name"])
        try:
            if os.path.getsize(path) != obj["size"]:
                return None
            size, crc = _crc32_file(path)
        except OSError:
            return None
        if size != obj["size"] or f"{crc:08x}" != obj["crc32"]:
            return None
        return path

    # -- committed steps and retention ------------------------------------------------------
    def _listing(self) -> Dict[int, Dict[str, Tuple[int, str]]]:
        """step -> {name: (size, etag)} of the objects under each step folder."""
        out: Dict[int, Dict[str, Tuple[int, str]]] = {}
        for o in self._client.list_objects(self.bucket, self.prefix + "step-"):
            rest = o.key[len(self.prefix):]
            d, _, name = rest.partition("/")
            step = _parse_step_dir(d)
            if step is None or not name:
                continue
            out.setdefault(step, {})[name] = (o.size, _norm_etag(o.etag))
        return out

    def _manifest(self, step: int, etag: str) -> Optional[Dict[str, Any]]:
        key = self.prefix + _step_dir(step) + MANIFEST_NAME
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

    def _committed(self, listing: Optional[Dict[int, Dict[str, Tuple[int, str]]]] = None
                   ) -> Dict[int, Dict[str, Any]]:
        """step -> manifest, for the steps whose manifest is there and consistent."""
        listing = self._listing() if listing is None else listing
        out: Dict[int, Dict[str, Any]] = {}
        for step, objs in listing.items():
            if MANIFEST_NAME not in objs:
                continue
            m = self._manifest(step, objs[MANIFEST_NAME][1])
            if not m or m.get("format") != MANIFEST_FORMAT or m.get("step") != step:
                continue
            ok = True
            for o in m.get("objects", []):
                have = objs.get(o.get("name"))
                if have is None or have[0] != o.get("size") or \
                        (o.get("etag") and have[1] and have[1] != o["etag"]):
                    ok = False
                    break
            if ok and m.get("objects"):
                out[step] = m
        return out

    def _retain(self, step: int) -> None:
        if self.keep_remote is not None:
            listing = self._listing()
            committed = sorted(self._committed(listing))
            keep = set(committed[-self.keep_remote:]) | {step}
            newest = committed[-1] if committed else step
            doomed = [s for s in committed if s not in keep]
            # leftovers of killed saves: folders with no commit, older than the newest
            doomed += [s for s in listing if s not in committed and s < newest and s != step]
            for s in sorted(doomed):
                names = listing[s]
                sdir = self.prefix + _step_dir(s)
                if MANIFEST_NAME in names:  # uncommit first, then remove the objects
                    self._client.delete_object(self.bucket, sdir + MANIFEST_NAME)
                rest = [sdir + n for n in names if n != MANIFEST_NAME]
                if rest:
                    self._client.native.delete_objects(self.bucket, rest)
        if self.local_dir:
            self._retain_local()

    def _retain_local(self) -> None:
        import shutil
        assert self.local_dir is not None
        steps = []
        for name in os.listdir(self.local_dir):
            s = _parse_step_dir(name)
            if s is not None:
                steps.append(s)
        complete = sorted(s for s in steps if os.path.exists(
            os.path.join(self.local_dir, _step_dir(s).rstrip("/"), MANIFEST_NAME)))
        keep = set(complete[-self.keep_local:])
        # retention runs on the background thread between saves: no local copy is being
        # written now, so what is not complete is a leftover (a failed or killed save)
        for s in steps:
            if s not in keep:
                shutil.rmtree(os.path.join(self.local_dir, _step_dir(s).rstrip("/")),
                              ignore_errors=True)
