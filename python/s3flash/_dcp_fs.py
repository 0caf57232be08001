"""The paths of a DCP checkpoint in S3 (s3flash/dcp.py): the URI rules, the object names,
the client and path that S3StorageWriter and S3StorageReader share (_PathMixin), and
S3FileSystem, torch's FileSystemBase over S3 (s3torchconnector.dcp.S3FileSystem).
"""

from __future__ import annotations

import io
import os
import threading
from contextlib import contextmanager
from typing import Any, Dict, Generator, Optional, Tuple, Union

from torch.distributed.checkpoint.filesystem import FileSystemBase

from . import _s3flash
from ._client import S3Client
from ._config import S3ClientConfig
from ._reader import S3ReaderConstructor, S3ReaderConstructorProtocol


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
