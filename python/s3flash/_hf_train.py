"""Trainer and Accelerate checkpoints to S3, uploaded in the background with the
AsyncCheckpointer commit protocol (s3flash/_dir_checkpoint.py), and resumed from S3.

- ``S3CheckpointCallback``: a ``transformers.TrainerCallback``; after each ``checkpoint-N``
  folder is saved (``on_save``), rank 0 uploads it in the background; ``on_train_end`` waits
  for the last upload.
- ``S3AcceleratorCheckpoint``: the same for ``Accelerator.save_state`` (which it wraps:
  Accelerate 1.16 has only a save-state *pre* hook, run before the files are written).
- ``resolve_checkpoint``: the newest committed folder under a run's prefix, downloaded to a
  local folder, for ``Trainer.train(resume_from_checkpoint=...)`` or
  ``Accelerator.load_state(...)``.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, List, Optional

import transformers

from ._async_checkpoint import DEFAULT_RETENTION_WINDOW_S
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig
from ._dir_checkpoint import DirectoryCheckpointer

__all__ = ["S3CheckpointCallback", "S3AcceleratorCheckpoint", "S3ResumeMixin", "S3Trainer",
           "resolve_checkpoint"]

_FROM_FRAMEWORK: Any = object()  # save_total_limit / total_limit: the framework's setting


def resolve_checkpoint(uri: str, local_dir: str, *, step: Optional[int] = None,
                       region: Optional[str] = None, endpoint: Optional[str] = None,
                       s3client_config: Optional[S3ClientConfig] = None,
                       client: Optional[S3Client] = None) -> str:
    """The local path of the newest COMMITTED checkpoint folder under the run's prefix
    ``uri`` (``s3://bucket/run/``; of ``step`` when given), downloaded into
    ``local_dir/<its name>`` (``output_dir/checkpoint-42``). A save whose commit was not
    written (a killed or failed upload) is never chosen. Files already there with the
    committed size and CRC-32 are not fetched again. Every rank may call it (each downloads
    what it lacks; files are renamed into place whole). A path that is not ``s3://`` is
    returned as it is. FileNotFoundError when nothing is committed."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        return uri
    ck = DirectoryCheckpointer(
        uri, client=client if client is not None else _shared_client(region, endpoint,
                                                                     s3client_config))
    return ck.download(local_dir, step)


class _FolderUploader:
    """What the Trainer callback and the Accelerate wrapper share: the client settings,
    the DirectoryCheckpointer (made by the uploading process only), and the futures of its
    saves, whose failures are reported once (a warning when noticed, then an error from
    ``wait``)."""

    _who = "s3flash.hf"

    def _setup(self, uri: str, *, max_pending: int = 1, region: Optional[str] = None,
               endpoint: Optional[str] = None,
               s3client_config: Optional[S3ClientConfig] = None,
               client: Optional[S3Client] = None,
               retention_window_s: float = DEFAULT_RETENTION_WINDOW_S,
               conditional_put: Optional[bool] = None) -> None:
        if not isinstance(uri, str) or not uri.startswith("s3://"):
            raise ValueError(f"{self._who} needs an s3:// prefix, got {uri!r}")
        self.uri = uri
        self._client_args = (region, endpoint, s3client_config, client)
        self._options = (max_pending, retention_window_s, conditional_put)
        self._ck: Optional[DirectoryCheckpointer] = None
        self._futures: List[Any] = []   # (step, future) not yet looked at
        self._failed: List[Any] = []    # (step, exception)
        self._reported = 0

    def _start(self, keep: Optional[int]) -> DirectoryCheckpointer:
        if self._ck is None:
            if keep is not None and keep < 1:
                raise ValueError(f"{self._who}: the number of checkpoints kept in S3 must be "
                                 f">= 1 or None, got {keep}")
            max_pending, window, conditional_put = self._options
            region, endpoint, config, client = self._client_args
            self._ck = DirectoryCheckpointer(
                self.uri, max_pending=max_pending, keep_remote=keep,
                client=client if client is not None else _shared_client(region, endpoint,
                                                                        config),
                retention_window_s=window, conditional_put=conditional_put)
        return self._ck

    def _queue(self, path: str, step: int) -> None:
        self._collect()
        assert self._ck is not None
        self._futures.append((step, self._ck.save_dir(path, step)))

    def _collect(self) -> None:
        left = []
        for step, f in self._futures:
            if not f.done():
                left.append((step, f))
            elif f.exception() is not None:
                self._failed.append((step, f.exception()))
                warnings.warn(f"{self._who}: the upload of step {step} failed and was not "
                              f"committed: {f.exception()}", RuntimeWarning)
        self._futures = left

    @property
    def checkpointer(self) -> Optional[DirectoryCheckpointer]:
        """The uploader (in the uploading process, once made), else None."""
        return self._ck

    def resolve(self, local_dir: str, step: Optional[int] = None) -> str:
        """``resolve_checkpoint`` of this prefix, with these client settings."""
        region, endpoint, config, client = self._client_args
        return resolve_checkpoint(self.uri, local_dir, step=step, region=region,
                                  endpoint=endpoint, s3client_config=config, client=client)

    def wait(self) -> None:
        """Wait for every upload asked for so far (and its retention); RuntimeError when one
        failed since the last wait (each failure is also warned about when noticed)."""
        if self._ck is not None:
            self._ck.wait()
        self._collect()
        new = self._failed[self._reported:]
        self._reported = len(self._failed)
        if new:
            raise RuntimeError(f"{self._who}: {len(new)} checkpoint upload(s) failed, steps "
                               f"{[s for s, _ in new]}: {new[-1][1]}") from new[-1][1]

    def close(self) -> None:
        """Wait for the uploads, then stop the background thread."""
        try:
            self.wait()
        finally:
            if self._ck is not None:
                self._ck.close()


def _barrier() -> None:
    """Every rank's files of the folder are written before rank 0 snapshots it (the Trainer
    writes rng_state_<rank>.pth from each rank)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class S3CheckpointCallback(_FolderUploader, transformers.TrainerCallback):
    """Uploads each ``checkpoint-N`` folder the Trainer saves to ``uri`` (the run's prefix,
    ``s3://bucket/run/``), in the background, as a commit of the AsyncCheckpointer protocol:
    a folder is visible to ``resolve_checkpoint`` only once all its files are uploaded and
    its manifest written.

    Args:
        uri: the run's prefix.
        save_total_limit: committed checkpoints kept in S3 (the newest ones; older ones are
            deleted after a newer one commits, never the newest, never one being written).
            By default ``TrainingArguments.save_total_limit`` (None: all are kept).
        options (keywords only, shared with S3AcceleratorCheckpoint):
        max_pending: uploads queued or running at once; ``on_save`` waits beyond that.
        retention_window_s, conditional_put: as for ``AsyncCheckpointer`` (another writer's
            commits are removed only once older than the window: pass 0 on a resumed run
            whose predecessor is known to be dead, to apply the limit to its commits too).
        region, endpoint, s3client_config, client: the S3 client (``client`` to share one).

    Only the world process zero uploads (after a barrier when torch.distributed is
    initialized); every rank resumes with ``resolve_checkpoint`` (or ``resolve``).
    """

    _who = "s3flash.hf.S3CheckpointCallback"

    def __init__(self, uri: str, *, save_total_limit: Any = _FROM_FRAMEWORK,
                 **options: Any):
        self._setup(uri, **options)
        self.save_total_limit = save_total_limit

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _barrier()
        if not state.is_world_process_zero:
            return
        self._start(args.save_total_limit if self.save_total_limit is _FROM_FRAMEWORK
                    else self.save_total_limit)
        self._queue(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"),
                    state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.wait()


class S3ResumeMixin:
    """Lets ``Trainer.train`` take ``resume_from_checkpoint="s3://bucket/run/"``: before the
    Trainer's own ``train``, the URI becomes ``resolve_checkpoint(uri, args.output_dir)`` (the
    newest committed folder, downloaded by every rank), with the client settings of the
    Trainer's S3CheckpointCallback when it has one (else the AWS environment's). Mix it in
    before the Trainer class: ``class MyTrainer(S3ResumeMixin, Trainer)``, or use
    ``S3Trainer``. Anything else (a local path, True, None) goes through unchanged."""

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(resume_from_checkpoint, str) and resume_from_checkpoint.startswith("s3://"):
            cbs = [c for c in self.callback_handler.callbacks  # type: ignore[attr-defined]
                   if isinstance(c, S3CheckpointCallback)]
            region, endpoint, config, client = cbs[0]._client_args if cbs else (None,) * 4
            resume_from_checkpoint = resolve_checkpoint(
                resume_from_checkpoint, self.args.output_dir,  # type: ignore[attr-defined]
                region=region, endpoint=endpoint, s3client_config=config, client=client)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]


class S3Trainer(S3ResumeMixin, transformers.Trainer):
    """``transformers.Trainer`` whose ``train`` also takes an ``s3://`` prefix as
    ``resume_from_checkpoint`` (S3ResumeMixin)."""


_TRAILING_INT = re.compile(r"(\d+)$")


class S3AcceleratorCheckpoint(_FolderUploader):
    """Uploads the folder of every ``accelerator.save_state(...)`` to ``uri`` in the
    background, as a commit of the AsyncCheckpointer protocol.

    Accelerate 1.16 calls its ``register_save_state_pre_hook`` hooks *before* it writes the
    folder, so this wraps the instance's ``save_state`` instead (``detach()`` undoes it):
    the wrapped call saves as before, waits for every process (``wait_for_everyone``), and
    on the main process queues the upload of the folder it returned. The step recorded is
    the number that ends the folder's name (``checkpoint_3`` with automatic naming), else
    the save iteration. ``total_limit``: committed folders kept in S3 (default: the
    ``ProjectConfiguration``'s ``total_limit``). The other arguments are
    S3CheckpointCallback's. Resume: ``load_state(local_dir)``.
    """

    _who = "s3flash.hf.S3AcceleratorCheckpoint"

    def __init__(self, accelerator: Any, uri: str, *, total_limit: Any = _FROM_FRAMEWORK,
                 **options: Any):
        self._setup(uri, **options)
        self.accelerator = accelerator
        if accelerator.is_main_process:
            self._start(accelerator.project_configuration.total_limit
                        if total_limit is _FROM_FRAMEWORK else total_limit)
        self._original = accelerator.save_state
        accelerator.save_state = self._save_state

    def _save_state(self, output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        acc = self.accelerator
        iteration = acc.save_iteration
        location = self._original(output_dir, *args, **kwargs)
        acc.wait_for_everyone()
        if self._ck is not None:
            path = os.fspath(location)
            m = _TRAILING_INT.search(os.path.basename(path.rstrip("/")))
            self._queue(path, int(m.group(1)) if m else int(iteration))
        return location

    def load_state(self, local_dir: str, step: Optional[int] = None, **kwargs: Any) -> str:
        """Download the newest committed folder (or that of `step`) into `local_dir` and
        ``accelerator.load_state`` it on this process; returns its path."""
        path = self.resolve(local_dir, step)
        self.accelerator.load_state(path, **kwargs)
        return path

    def detach(self) -> None:
        """Give the accelerator its own save_state back (uploads in flight go on)."""
        if self.accelerator.__dict__.get("save_state") == self._save_state:
            del self.accelerator.save_state

    def close(self) -> None:
        """Detach, wait for the uploads, stop the background thread."""
        self.detach()
        super().close()
