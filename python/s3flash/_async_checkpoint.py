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

This module owns the save: the background thread, the serialization and the upload, and the
local tier. The commit protocol (the records, their sequence numbers, the conditional PUT,
the other writers and retention in S3) is s3flash/_commit.py's; the host buffers are
s3flash/_staging.py's.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import os
import threading
import time
import warnings
import weakref
import zlib
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ._checkpoint import parse_s3_uri  # noqa: F401  (the same URI rules)
from ._client import S3Client
from ._commit import (COMMITS_DIR, DEFAULT_RETENTION_WINDOW_S, MANIFEST_FORMAT,  # noqa: F401
                      MANIFEST_NAME, MANIFEST_VERSION, CommitInfo, CommitLog,
                      ConcurrentWriterError, ConcurrentWriterWarning, _Commit,
                      _new_save_id, _norm_etag, _parse_step_dir, _step_dir)
from ._config import S3ClientConfig
from ._staging import HostStager
from ._stats import SaveStats, _report
from . import _s3flash

__all__ = ["AsyncCheckpointer", "CheckpointInfo", "CommitInfo", "ConcurrentWriterError",
           "ConcurrentWriterWarning", "HostStager", "MANIFEST_NAME", "STATE_NAME"]

STATE_NAME = "state.pt"
_FILE_MODE = 0o600      # the local tier's files and folders: the owner's only
_DIR_MODE = 0o700



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
    stats: Optional[SaveStats] = None  # the save's times and bytes


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
    clock: Tuple[float, float, float] = (0.0, 0.0, 0.0)  # save() called, staging began, returned


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
        on_save_stats: called with each committed save's ``SaveStats`` (its blocked,
            staging, upload and commit times and its bytes: docs/METRICS.md (Python)), on the
            background thread, before the save's future resolves; also
            ``last_save_stats`` and ``save(...).result().stats``.
    """

    def __init__(self, uri: str, region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 local_dir: Optional[str] = None, keep_local: int = 1,
                 keep_remote: Optional[int] = None, *, on_busy: str = "wait",
                 pin_memory: Optional[bool] = None, in_place: bool = True,
                 client: Optional[S3Client] = None,
                 conditional_put: Optional[bool] = None,
                 retention_window_s: float = DEFAULT_RETENTION_WINDOW_S,
                 on_save_stats: Optional[Callable[[SaveStats], None]] = None):
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
        self.keep_local = keep_local
        self.on_busy = on_busy
        self._client = client or S3Client(region, endpoint=endpoint,
                                          s3client_config=s3client_config)
        # the commits, this writer's id in each of them, and retention in S3
        self._log = CommitLog(self._client, bucket, prefix, keep_remote=keep_remote,
                              retention_window_s=retention_window_s,
                              conditional_put=conditional_put)
        self.stager = HostStager(pin_memory, zip_layout=in_place)
        self.in_place_saves = 0   # saves uploaded from the arena with no copy
        self.stream_saves = 0     # saves streamed through torch.save into an S3 writer
        self.on_save_stats = on_save_stats
        self.last_save_stats: Optional[SaveStats] = None
        self._cond = threading.Condition()
        self._staging_busy = False      # the host buffers hold a state not yet serialized
        self._pending: List[_Job] = []  # at most one (the buffers are single)
        self._inflight = 0              # jobs queued or running
        self._closed = False
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
        t_call = time.monotonic()
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
        t_stage = time.monotonic()
        try:
            staged = self.stager.stage(state_dict)
        except BaseException:
            with self._cond:
                self._staging_busy = False
                self._cond.notify_all()
            raise
        fut.set_running_or_notify_cancel()
        with self._cond:
            self._enqueue(_Job(step, staged, fut, torch_save_kwargs,  # type: ignore
                               (t_call, t_stage, time.monotonic())))
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
                self.last_save_stats = info.stats
                _report(self.on_save_stats, info.stats, "AsyncCheckpointer")
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
            uploaded = time.monotonic()
            obj = {"name": STATE_NAME, "key": key, "size": size,
                   "crc32": f"{crc:08x}", "etag": _norm_etag(info.get("etag"))}
            if info.get("size") is not None and int(info["size"]) != size:
                raise _s3flash.S3IOError(f"{key}: uploaded {info['size']} bytes, "
                                         f"serialized {size}")
            manifest = self._log.new_manifest(job.step, save_id, [obj])
            # the commit: the manifest, after every object is complete
            seq, ckey, body = self._log.commit(manifest, save_id)
            committed = True
            self._log.verify(manifest, ckey, started)
            verified = True
            local_path = None
            if local_save and local_tmp and local_error is None:
                local_path = self._commit_local(local_save, local_tmp, body)
            elif local_error is not None:
                warnings.warn(f"s3flash.AsyncCheckpointer: local copy of step {job.step} "
                              f"failed: {local_error}", RuntimeWarning)
            t_call, t_stage, t_back = job.clock
            end = time.monotonic()
            stats = SaveStats(f"s3://{self.bucket}/{sdir}", job.step, size + len(body),
                              end - t_call, t_back - t_call, t_back - t_stage,
                              uploaded - started, end - uploaded)
            return CheckpointInfo(job.step, f"s3://{self.bucket}/{sdir}", manifest,
                                  local_path, seq, f"s3://{self.bucket}/{ckey}", stats)
        finally:
            if not verified:
                self._log.own_leftovers.add(key)  # named by no valid commit: the next retention's
            if f is not None:
                f.close()
            if local_tmp and os.path.exists(local_tmp):
                os.unlink(local_tmp)
            if local_save and not committed:
                try:
                    os.rmdir(local_save)
                except OSError:
                    pass

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

    # -- commits and retention (s3flash/_commit.py) -----------------------------------------
    @property
    def writer_id(self) -> str:
        """This writer's id, recorded in each of its commits."""
        return self._log.writer_id

    @property
    def conditional_put(self) -> Optional[bool]:
        return self._log.conditional_put

    @conditional_put.setter
    def conditional_put(self, v: Optional[bool]) -> None:
        self._log.conditional_put = v

    @property
    def keep_remote(self) -> Optional[int]:
        return self._log.keep_remote

    @keep_remote.setter
    def keep_remote(self, v: Optional[int]) -> None:
        self._log.keep_remote = v

    @property
    def retention_window_s(self) -> float:
        return self._log.retention_window_s

    @retention_window_s.setter
    def retention_window_s(self, v: float) -> None:
        self._log.retention_window_s = float(v)

    def _valid_commits(self) -> List[_Commit]:
        return self._log.valid_commits()

    def _retain(self, ckey: str) -> None:
        """Retention after this writer's commit `ckey`: in S3 (CommitLog.retain), then in the
        local tier."""
        self._log.retain(ckey)
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
