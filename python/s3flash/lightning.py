"""Lightning checkpoints in S3: ``S3LightningCheckpoint``, a ``CheckpointIO`` plugin.

Same name and signature as s3torchconnector's ``s3torchconnector.lightning.S3LightningCheckpoint``::

    from lightning import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from s3flash.lightning import S3LightningCheckpoint

    trainer = Trainer(
        plugins=[S3LightningCheckpoint("us-east-1", endpoint="http://127.0.0.1:7480")],
        callbacks=[ModelCheckpoint(dirpath="s3://bucket/run/", save_last=True)],
    )

``torch.save`` streams into an ``S3Writer`` (parts upload while the checkpoint is being
serialized; the object appears whole at the end, or not at all) and ``torch.load`` reads
through an ``S3Reader``. It works under Lightning's ``AsyncCheckpointIO`` wrapper.

Lightning itself also looks at the checkpoint directory through fsspec (``ModelCheckpoint``
lists it, checks what exists). Importing this module makes ``s3://`` (and ``s3a://``)
``s3flash.fsspec.S3FlashFileSystem`` when nothing else serves it (s3fs not installed, nothing
registered): the plain ``ModelCheckpoint(dirpath="s3://...")`` then works with no other
package and no call. An installed s3fs is never displaced; ``s3flash.fsspec.register()``
takes ``s3://`` over explicitly. The filesystem takes its endpoint, region and credentials
from the AWS environment (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``...), as every s3flash
client does.

``ckpt_path="last"`` with a remote ``dirpath`` never finds ``last.ckpt`` in Lightning 2.6
(Lightning-AI/pytorch-lightning#18261: ``_find_last_checkpoints`` drops the protocol from the
candidates, which are then looked for on the local disk). Importing this module fixes that
method of ``ModelCheckpoint`` for non-local filesystems only (the candidates get their
protocol back: ``s3://bucket/run/last.ckpt``); local directories are untouched.
``S3ModelCheckpoint`` (the same fix as a subclass) is kept for code that uses it.

Checkpoint metrics: each plugin times every save (``SaveStats``: ``on_save_stats``,
``last_save_stats``), and the ``S3CheckpointMetrics`` callback logs them on the Trainer's
loggers (``checkpoint/save_seconds``, ``checkpoint/blocked_seconds``,
``checkpoint/throughput_bytes_per_s``...: TensorBoard, CSVLogger)::

    trainer = Trainer(plugins=[S3AsyncLightningCheckpoint(...)],
                      callbacks=[ModelCheckpoint(dirpath="s3://bucket/run/"),
                                 S3CheckpointMetrics()])

The lightning package is the target; pytorch_lightning is used when lightning is absent.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import torch

try:
    from lightning.pytorch.callbacks import Callback as _Callback
    from lightning.pytorch.callbacks import ModelCheckpoint as _ModelCheckpoint
    from lightning.pytorch.plugins.io import CheckpointIO as _CheckpointIO
except ImportError:  # pragma: no cover - only pytorch_lightning installed
    from pytorch_lightning.callbacks import Callback as _Callback  # type: ignore
    from pytorch_lightning.callbacks import ModelCheckpoint as _ModelCheckpoint  # type: ignore
    from pytorch_lightning.plugins.io import CheckpointIO as _CheckpointIO  # type: ignore

from ._checkpoint import parse_s3_uri
from ._client import S3Client
from ._config import S3ClientConfig
from ._fsspec_default import provide_s3
from ._reader import S3ReaderConstructor, S3ReaderConstructorProtocol
from ._stats import SaveStats, _report

__all__ = ["S3AsyncLightningCheckpoint", "S3CheckpointMetrics", "S3LightningCheckpoint",
           "S3ModelCheckpoint", "SaveStats"]


def _keep_on_cpu(storage: Any, location: Any) -> Any:
    return storage


def _check_path(path: Any) -> str:
    # s3torchconnector accepts only str: a pathlib.Path would turn "s3://b/k" into "s3:/b/k"
    if not isinstance(path, str):
        raise TypeError(f"{type(path).__name__!r} is not a supported type for 'path'. "
                        "Must be a string formatted as an S3 URI (s3://bucket/key)")
    return path


def _step_of(checkpoint: Any) -> Optional[int]:
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    return step if isinstance(step, int) else None


class S3LightningCheckpoint(_CheckpointIO):
    """A Lightning ``CheckpointIO`` that saves to and loads from S3 through libs3flash.

    Args:
        region: region for signing (None: from the environment or profile, else us-east-1).
        s3client_config: an ``S3ClientConfig``.
        endpoint: custom endpoint URL (Ceph RGW, MinIO...); None or "" for the default
            (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's, else AWS).
        reader_constructor: s3flash extension; an ``S3ReaderConstructor`` for loads
            (default: ``S3ReaderConstructor.default()``).
        on_save_stats: s3flash extension; called with each completed save's ``SaveStats``
            (on the thread that completed it); the last one is ``last_save_stats``. Here
            a save blocks its caller throughout: blocked, upload and save times are one
            (``S3CheckpointMetrics`` logs them on the Trainer's loggers).
    """

    def __init__(self, region: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 endpoint: Optional[str] = None, *,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                 on_save_stats: Optional[Callable[[SaveStats], None]] = None):
        self.region = region
        self.endpoint = endpoint
        self.on_save_stats = on_save_stats
        self.last_save_stats: Optional[SaveStats] = None
        self._stats_sinks: List[Callable[[SaveStats], None]] = []  # S3CheckpointMetrics
        self._client = S3Client(region, endpoint=endpoint, s3client_config=s3client_config)
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()

    @property
    def client(self) -> S3Client:
        return self._client

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: str,  # type: ignore[override]
                        storage_options: Optional[Any] = None) -> None:
        """``torch.save(checkpoint)`` streamed into ``path`` (s3://bucket/key). The object
        appears when the save completes; an error (or a killed process) leaves the previous
        object under the key, or none. ``storage_options`` is accepted and ignored, as in
        s3torchconnector."""
        t0 = time.monotonic()
        bucket, key = parse_s3_uri(_check_path(path))
        with self._client.put_object(bucket, key) as w:
            torch.save(checkpoint, w)
            size = w.tell()
        t = time.monotonic() - t0
        self._saved(SaveStats.blocking(path, _step_of(checkpoint), size, t))

    def _saved(self, stats: SaveStats) -> None:
        self.last_save_stats = stats
        for sink in list(self._stats_sinks):
            sink(stats)
        _report(self.on_save_stats, stats, type(self).__name__)

    def load_checkpoint(self, path: str,  # type: ignore[override]
                        map_location: Optional[Any] = _keep_on_cpu,
                        weights_only: Optional[bool] = None) -> Dict[str, Any]:
        """``torch.load`` through an ``S3Reader``. As Lightning's ``TorchCheckpointIO``:
        storages stay on the CPU unless ``map_location`` says otherwise, and ``weights_only``
        is passed to ``torch.load`` as given (``None``: torch's default). A missing object
        raises ``FileNotFoundError`` (``S3NotFoundError``)."""
        bucket, key = parse_s3_uri(_check_path(path))
        with self._client.get_object(bucket, key, self._reader_constructor) as r:
            return torch.load(r, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: str) -> None:  # type: ignore[override]
        """Delete the object at ``path``, and the objects under ``path/`` when it is a
        directory-like prefix (a sharded checkpoint), as TorchCheckpointIO's ``rm(recursive)``.
        Deleting what does not exist is not an error."""
        bucket, key = parse_s3_uri(_check_path(path).rstrip("/") or path)
        under = [o.key for o in self._client.list_objects(bucket, key + "/")]
        if under:
            self._client.native.delete_objects(bucket, under)
        self._client.delete_object(bucket, key)

    def teardown(self) -> None:
        """Nothing to release: saves and loads finish before their calls return (the client,
        its connections and I/O threads, are freed with this object)."""


class S3AsyncLightningCheckpoint(S3LightningCheckpoint):
    """``S3LightningCheckpoint`` that saves in the background, without cloning.

    ``save_checkpoint`` copies the checkpoint's tensors into host buffers allocated once and
    reused from save to save (``s3flash.HostStager``: pinned, with non-blocking copies, when
    the tensors are on a GPU) and returns; the serialization and the upload run on one
    background thread. ``remove_checkpoint`` (``ModelCheckpoint``'s top-k pruning, the
    previous ``last.ckpt``) is queued behind the saves on that thread too, so an old
    checkpoint is deleted only after the saves asked for before its removal are complete,
    and the training thread never waits for a delete. Lightning's ``AsyncCheckpointIO``, by
    contrast, clones every tensor (fresh memory each save) and removes on the caller's thread.

    The upload goes from the buffers themselves when it can: the torch.save zip is built
    around the staged bytes (as ``AsyncCheckpointer(in_place=True)``), else torch.save streams
    into an S3 writer. A save asked for while the previous one still holds the buffers waits
    for them (one set of buffers: memory stays bounded). ``load_checkpoint`` and
    ``teardown`` wait for the queue first. A failed background save is raised by the next
    ``save_checkpoint``, ``load_checkpoint`` or ``teardown``; each object appears whole or
    not at all, as with ``S3LightningCheckpoint``.

    Args: as ``S3LightningCheckpoint``; ``pin_memory`` as ``s3flash.HostStager``. Each
    save's ``SaveStats`` comes when its upload completes, from the background thread:
    blocked is the time ``save_checkpoint`` took (waiting for the buffers, staging).
    """

    def __init__(self, region: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 endpoint: Optional[str] = None, *,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None,
                 pin_memory: Optional[bool] = None,
                 on_save_stats: Optional[Callable[[SaveStats], None]] = None):
        super().__init__(region, s3client_config, endpoint,
                         reader_constructor=reader_constructor, on_save_stats=on_save_stats)
        from ._staging import HostStager
        self.stager = HostStager(pin_memory, zip_layout=True)
        self.in_place_saves = 0   # uploaded from the staging buffers with no copy
        self.stream_saves = 0     # torch.save streamed into an S3 writer
        self._cond = threading.Condition()
        self._ops: Deque[Tuple[str, Any]] = collections.deque()
        self._busy = 0                 # operations queued or running
        self._staging_busy = False     # the buffers hold a checkpoint not yet serialized
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: str,  # type: ignore[override]
                        storage_options: Optional[Any] = None) -> None:
        """Stage ``checkpoint`` and return; the upload to ``path`` runs in the background."""
        t_call = time.monotonic()
        self._raise_error()
        bucket, key = parse_s3_uri(_check_path(path))
        with self._cond:
            while self._staging_busy:
                self._cond.wait()
            self._staging_busy = True
        t_stage = time.monotonic()
        try:
            staged = self.stager.stage(checkpoint)
        except BaseException:
            self._release_staging()
            raise
        self._submit("save", (path, staged, _step_of(checkpoint),
                              (t_call, t_stage, time.monotonic())))

    def remove_checkpoint(self, path: str) -> None:  # type: ignore[override]
        """Queue the removal behind the saves asked for so far; returns at once."""
        self._submit("remove", _check_path(path))

    def load_checkpoint(self, path: str,  # type: ignore[override]
                        map_location: Optional[Any] = _keep_on_cpu,
                        weights_only: Optional[bool] = None) -> Dict[str, Any]:
        self.wait()
        self._raise_error()
        return super().load_checkpoint(path, map_location=map_location,
                                       weights_only=weights_only)

    def wait(self) -> None:
        """Wait until every queued save and removal is done."""
        with self._cond:
            while self._busy:
                self._cond.wait()

    def teardown(self) -> None:
        """Wait for the queue, then raise the first background error, if any."""
        self.wait()
        self._raise_error()

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("S3AsyncLightningCheckpoint holds a background thread; "
                        "it cannot be pickled")

    # -- background ------------------------------------------------------------------
    def _raise_error(self) -> None:
        with self._cond:
            e, self._error = self._error, None
        if e is not None:
            raise RuntimeError(f"a background checkpoint operation failed: {e}") from e

    def _release_staging(self) -> None:
        with self._cond:
            self._staging_busy = False
            self._cond.notify_all()

    def _submit(self, kind: str, arg: Any) -> None:
        with self._cond:
            self._ops.append((kind, arg))
            self._busy += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="s3flash-lightning-checkpoint")
                self._thread.start()
            self._cond.notify_all()

    def _save_staged(self, bucket: str, key: str, staged: Any) -> int:
        """In place when the zip fits around the staged bytes (uploaded from the buffers,
        no copy), else the same zip streamed into an S3 writer (_zipimage.stream: its CRCs
        let the GIL go; torch.save when it cannot). Returns the object's size."""
        from . import _zipimage
        st = self.stager
        try:
            size, _, _ = _zipimage.build(staged, st.arena, st.used_end, st.capacity)
        except _zipimage.Unsupported as e:
            if "does not fit" in str(e):
                st.tail_hint = 2 * st.tail_hint + (4 << 20)
        else:
            self._client.upload(bucket, key, memoryview(st.arena.numpy())[:size])
            self.in_place_saves += 1
            return size
        with self._client.put_object(bucket, key) as w:
            try:
                try:
                    _zipimage.stream(staged, w.write)
                except _zipimage.Unsupported:  # raised before any byte is written
                    torch.save(staged, w)
                size = w.tell()
            finally:
                self._release_staging()
        self.stream_saves += 1
        return size

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ops:
                    self._cond.wait()
                kind, arg = self._ops.popleft()
            try:
                if kind == "save":
                    path, staged, step, (t_call, t_stage, t_back) = arg
                    t_up = time.monotonic()
                    try:
                        size = self._save_staged(*parse_s3_uri(path), staged)
                    finally:
                        self._release_staging()
                    end = time.monotonic()
                    self._saved(SaveStats(path, step, size, end - t_call, t_back - t_call,
                                          t_back - t_stage, end - t_up, 0.0))
                elif self._error is None:
                    # after a failed save, nothing is removed (it may be the one to keep)
                    S3LightningCheckpoint.remove_checkpoint(self, arg)
            except BaseException as e:  # noqa: BLE001  (raised on the caller's next call)
                with self._cond:
                    if self._error is None:
                        self._error = e
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()


def _find_plugin(trainer: Any) -> Optional[S3LightningCheckpoint]:
    """The S3LightningCheckpoint under the trainer's checkpoint IO (inside Lightning's
    wrappers, e.g. AsyncCheckpointIO), or None."""
    io = getattr(trainer.strategy, "checkpoint_io", None)
    for _ in range(8):  # wrappers nest at most a few deep
        if isinstance(io, S3LightningCheckpoint) or io is None:
            return io
        io = getattr(io, "checkpoint_io", None)
    return None


class S3CheckpointMetrics(_Callback):
    """Logs each checkpoint save of the Trainer's s3flash plugin on the Trainer's loggers
    (TensorBoard, CSVLogger...): ``checkpoint/save_seconds``, ``checkpoint/blocked_seconds``,
    ``checkpoint/staging_seconds``, ``checkpoint/upload_seconds``,
    ``checkpoint/commit_seconds``, ``checkpoint/bytes`` and
    ``checkpoint/throughput_bytes_per_s`` (``SaveStats``; docs/METRICS.md (Python)).

    A save's stats are logged at the Trainer's global step when they arrive: the
    plugin hands them over when the save completes (from a background thread for
    ``S3AsyncLightningCheckpoint``), and this callback logs them from the training
    thread at the next batch, epoch or validation end; the saves still in flight at the
    end of fitting are waited for and logged at teardown, before the loggers are
    finalized. Under Lightning's ``AsyncCheckpointIO`` the plugin's blocked time is that
    wrapper's thread's, not the training's: ``blocked_seconds`` is then not logged.
    ``prefix``: the metrics' name prefix. Raises ValueError at setup when the Trainer's
    checkpoint IO is no s3flash plugin."""

    def __init__(self, prefix: str = "checkpoint/"):
        self.prefix = prefix
        self._arrived: Deque[SaveStats] = collections.deque()
        self._plugin: Optional[S3LightningCheckpoint] = None
        self._wrapped = False  # the plugin runs inside a wrapper (AsyncCheckpointIO)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        plugin = _find_plugin(trainer)
        if plugin is None:
            raise ValueError("S3CheckpointMetrics: the Trainer's checkpoint IO is "
                             f"{type(trainer.strategy.checkpoint_io).__name__}, not an "
                             "s3flash S3LightningCheckpoint (pass one in plugins=[...])")
        if self._plugin is not plugin:
            self._detach()
            plugin._stats_sinks.append(self._arrived.append)
            self._plugin = plugin
        self._wrapped = trainer.strategy.checkpoint_io is not plugin

    def _detach(self) -> None:
        if self._plugin is not None:
            try:
                self._plugin._stats_sinks.remove(self._arrived.append)
            except ValueError:
                pass
            self._plugin = None

    def _log(self, trainer: Any) -> None:
        while self._arrived:
            metrics = self._arrived.popleft().as_metrics(self.prefix)
            if self._wrapped:
                metrics.pop(self.prefix + "blocked_seconds", None)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        self._log(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        plugin = self._plugin
        if isinstance(plugin, S3AsyncLightningCheckpoint):
            plugin.wait()  # the strategy's teardown waited already; saves made since too
        self._log(trainer)
        self._detach()


def _with_protocol(callback: Any, found: "set[str]") -> "set[str]":
    """Lightning's last-checkpoint candidates with the protocol of a remote dirpath back."""
    fs = getattr(callback, "_fs", None)
    protocol = fs.protocol if fs is not None else "file"
    protocol = protocol[0] if isinstance(protocol, (tuple, list)) else protocol
    if fs is None or protocol in ("file", "local"):
        return found
    return {p if "://" in p else fs.unstrip_protocol(p) for p in found}


def _fix_find_last_checkpoints(cls: Any) -> None:
    """Make ``cls._find_last_checkpoints`` keep the protocol of a remote dirpath (#18261).
    Idempotent; a method someone else replaced is wrapped the same way."""
    original = cls.__dict__.get("_find_last_checkpoints")
    if original is None or getattr(original, "_s3flash_keeps_protocol", False):
        return

    def _find_last_checkpoints(self: Any, trainer: Any) -> "set[str]":
        return _with_protocol(self, original(self, trainer))

    _find_last_checkpoints._s3flash_keeps_protocol = True  # type: ignore[attr-defined]
    _find_last_checkpoints.__doc__ = original.__doc__
    cls._find_last_checkpoints = _find_last_checkpoints


_fix_find_last_checkpoints(_ModelCheckpoint)
provide_s3()


class S3ModelCheckpoint(_ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` is found by ``ckpt_path="last"`` when
    ``dirpath`` is remote (``s3://``). Since importing ``s3flash.lightning`` fixes the plain
    ``ModelCheckpoint`` the same way, this subclass is kept for compatibility only.
    Everything else is ``ModelCheckpoint``'s."""

    def _find_last_checkpoints(self, trainer: Any) -> "set[str]":
        return _with_protocol(self, super()._find_last_checkpoints(trainer))
