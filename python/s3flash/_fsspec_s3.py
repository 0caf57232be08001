"""Target of s3flash's ``fsspec.specs`` entry points ``s3`` and ``s3a``
(pyproject.toml): ``S3FileSystem`` is s3fs's class when s3fs can be imported, else
``s3flash.fsspec.S3FlashFileSystem``.

fsspec registers entry points over its own table (``clobber=True``), so an entry point that
named s3flash's class directly would replace s3fs for every fsspec user of the environment.
This one resolves at first use instead: with s3fs installed, ``fsspec.filesystem("s3")`` is
s3fs's, exactly as without s3flash; without it, s3flash serves ``s3://`` (fsspec would
otherwise raise "Install s3fs to access S3"). ``s3flash.fsspec.register()`` still takes
``s3://`` over explicitly.
"""

from ._fsspec_default import _importable

if _importable("s3fs"):
    from s3fs import S3FileSystem
else:
    from .fsspec import S3FlashFileSystem as S3FileSystem  # type: ignore[assignment]

__all__ = ["S3FileSystem"]
