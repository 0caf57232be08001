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

The lightning package is the target; pytorch_lightning is used when lightning is absent.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

try:
    from lightning.pytorch.callbacks import ModelCheckpoint as _ModelCheckpoint
    from lightning.pytorch.plugins.io import CheckpointIO as _CheckpointIO
except ImportError:  # pragma: no cover - only pytorch_lightning installed
    from pytorch_lightning.callbacks import ModelCheckpoint as _ModelCheckpoint  # type: ignore
    from pytorch_lightning.plugins.io import CheckpointIO as _CheckpointIO  # type: ignore

from ._checkpoint import parse_s3_uri
from ._client import S3Client
from ._config import S3ClientConfig
from ._fsspec_default import provide_s3
from ._reader import S3ReaderConstructor, S3ReaderConstructorProtocol

__all__ = ["S3LightningCheckpoint", "S3ModelCheckpoint"]


def _keep_on_cpu(storage: Any, location: Any) -> Any:
    return storage


def _check_path(path: Any) -> str:
    # s3torchconnector accepts only str: a pathlib.Path would turn "s3://b/k" into "s3:/b/k"
    if not isinstance(path, str):
        raise TypeError(f"{type(path).__name__!r} is not a supported type for 'path'. "
                        "Must be a string formatted as an S3 URI (s3://bucket/key)")
    return path


class S3LightningCheckpoint(_CheckpointIO):
    """A Lightning ``CheckpointIO`` that saves to and loads from S3 through libs3flash.

    Args:
        region: region for signing (None: from the environment or profile, else us-east-1).
        s3client_config: an ``S3ClientConfig``.
        endpoint: custom endpoint URL (Ceph RGW, MinIO...); None or "" for the default
            (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's, else AWS).
        reader_constructor: s3flash extension; an ``S3ReaderConstructor`` for loads
            (default: ``S3ReaderConstructor.default()``).
    """

    def __init__(self, region: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 endpoint: Optional[str] = None, *,
                 reader_constructor: Optional[S3ReaderConstructorProtocol] = None):
        self.region = region
        self.endpoint = endpoint
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
        bucket, key = parse_s3_uri(_check_path(path))
        with self._client.put_object(bucket, key) as w:
            torch.save(checkpoint, w)

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
