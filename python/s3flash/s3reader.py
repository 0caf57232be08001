"""s3torchconnector's ``s3reader`` module names: ``from s3flash.s3reader import ...``.

The readers are the engine's random-access reader (python/s3flash/_reader.py); the classes
say which read-ahead each constructor chose."""

from ._reader import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_MAX_GAP_SIZE,
    DCPOptimizedConstructor,
    DCPOptimizedS3Reader,
    ItemRange,
    RangedS3Reader,
    RangeGroup,
    S3Reader,
    S3ReaderConstructor,
    S3ReaderConstructorProtocol,
    SequentialS3Reader,
)

__all__ = [
    "S3Reader",
    "S3ReaderConstructor",
    "SequentialS3Reader",
    "RangedS3Reader",
    "DCPOptimizedS3Reader",
    "DCPOptimizedConstructor",
    "ItemRange",
    "RangeGroup",
    "S3ReaderConstructorProtocol",
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_MAX_GAP_SIZE",
]
