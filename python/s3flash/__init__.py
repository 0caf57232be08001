"""s3flash: PyTorch checkpoints to and from S3-compatible storage at network speed.

The public names and signatures follow s3torchconnector (Amazon's S3 Connector for
PyTorch), so switching is a change of import:

    from s3flash import S3Checkpoint, S3ClientConfig, S3ReaderConstructor

    ckpt = S3Checkpoint(region="us-east-1", endpoint="http://127.0.0.1:9000")
    with ckpt.writer("s3://bucket/model.pt") as w:
        torch.save(model.state_dict(), w)
    with ckpt.reader("s3://bucket/model.pt") as r:
        state = torch.load(r)

    s3flash.save(obj, "s3://bucket/model.pt")    # one-line forms
    obj = s3flash.load("s3://bucket/model.pt")
"""

from typing import TYPE_CHECKING, Any

from ._s3flash import (
    LIBRARY_VERSION,
    S3ConnectionError,
    S3Exception,
    S3IOError,
    S3MemoryError,
    S3NotFoundError,
    S3PermissionError,
    S3TimeoutError,
    S3ValueError,
)
from ._config import S3ClientConfig
from ._client import ObjectInfo, S3Client
from ._reader import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_MAX_GAP_SIZE,
    DCPOptimizedConstructor,
    DCPOptimizedS3Reader,
    ItemRange,
    RangedS3Reader,
    S3Reader,
    S3ReaderConstructor,
    S3ReaderConstructorProtocol,
    SequentialS3Reader,
)
from ._writer import S3Writer
from ._checkpoint import S3Checkpoint, load, parse_s3_uri, save
from ._uploads import UploadInfo, cleanup_uploads, list_uploads
from ._async_checkpoint import (
    AsyncCheckpointer,
    CheckpointInfo,
    CommitInfo,
    ConcurrentWriterError,
    ConcurrentWriterWarning,
    HostStager,
)
from ._stats import DatasetStats, SaveStats

__version__ = LIBRARY_VERSION

__all__ = [
    "AsyncCheckpointer",
    "CheckpointInfo",
    "CommitInfo",
    "ConcurrentWriterError",
    "DatasetStats",
    "SaveStats",
    "ConcurrentWriterWarning",
    "HostStager",
    "S3Checkpoint",
    "S3Client",
    "S3ClientConfig",
    "S3ConnectionError",
    "S3Exception",
    "S3IOError",
    "S3MemoryError",
    "S3NotFoundError",
    "S3PermissionError",
    "S3Reader",
    "S3ReaderConstructor",
    "S3ReaderConstructorProtocol",
    "SequentialS3Reader",
    "RangedS3Reader",
    "DCPOptimizedS3Reader",
    "DCPOptimizedConstructor",
    "ItemRange",
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_MAX_GAP_SIZE",
    "S3TimeoutError",
    "S3ValueError",
    "S3Writer",
    "ObjectInfo",
    "UploadInfo",
    "cleanup_uploads",
    "list_uploads",
    "load",
    "parse_s3_uri",
    "save",
    "__version__",
]

# The datasets import torch: loaded on first use, so that `import s3flash` needs no torch.
# Type checkers read the imports below (the real classes, not Any); at run time the
# module __getattr__ imports them on first access.
if TYPE_CHECKING:
    from ._dataset import S3BatchSampler, S3IterableDataset, S3MapDataset

_LAZY_DATASETS = ("S3MapDataset", "S3IterableDataset", "S3BatchSampler")
__all__ += list(_LAZY_DATASETS)


def __getattr__(name: str) -> Any:
    if name in _LAZY_DATASETS:
        from . import _dataset
        value = getattr(_dataset, name)
        globals()[name] = value  # later accesses skip __getattr__
        return value
    raise AttributeError(f"module 's3flash' has no attribute {name!r}")
