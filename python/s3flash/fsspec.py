"""An fsspec filesystem for ``s3://`` over libs3flash: ``S3FlashFileSystem``.

With s3flash installed, fsspec finds it through the ``fsspec.specs`` entry point
(``s3`` and ``s3a``), so ``fsspec.open("s3://...")``, pandas' ``read_csv("s3://...")`` and
Lightning's ``ModelCheckpoint(dirpath="s3://...")`` go through the engine. At run time (for
example from a source tree, or to take ``s3://`` back from another implementation)::

    import s3flash.fsspec
    s3flash.fsspec.register()                       # fsspec's "s3" and "s3a" are ours
    s3flash.fsspec.register(endpoint_url="http://127.0.0.1:7480")   # with default options
    s3flash.fsspec.unregister()                     # back to s3fs (when installed)

Options (``storage_options``) follow s3fs: ``endpoint_url`` (or ``client_kwargs=
{"endpoint_url": ...}``), ``key``/``secret``/``token`` (or ``client_kwargs``'
``aws_access_key_id``...), ``anon``, ``profile``, ``client_kwargs={"region_name": ...}``
(or ``region``), ``config_kwargs={"s3": {"addressing_style": "path"}}``, and
``client_kwargs={"verify": "/path/ca.pem"}``. Anything not given comes from the AWS
environment as for every s3flash client (AWS_ENDPOINT_URL_S3, AWS_REGION, credentials
chain). ``s3client_config=S3ClientConfig(...)`` sets the engine (part size, memory limit...).

This module owns the filesystem (paths, listings, info, the operations on objects) and its
registration; the files it opens are s3flash/_fsspec_files.py's.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections import defaultdict
from datetime import datetime
from glob import has_magic
from typing import Any, Dict, Iterable, List, Optional, Tuple

import fsspec
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.spec import AbstractFileSystem
from fsspec.utils import isfilelike, stringify_path

from . import _s3flash
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig
from ._config import is_directory_bucket
from ._fsspec_files import (_MIN_PART, S3FlashReadFile, S3FlashWriteFile,
                            _AppendWriter, _file_entry, _mtime, _TextWriter)

__all__ = ["S3FlashFileSystem", "register", "unregister"]

PROTOCOLS = ("s3", "s3a")       # taken over by register() only: opt-in at run time
OWN_PROTOCOL = "s3flash"         # ours from install on (the fsspec.specs entry point)
_STREAM_CHUNK = 8 << 20


def _not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _dir_entry(name: str) -> Dict[str, Any]:
    return {"name": name, "Key": name, "size": 0, "Size": 0, "type": "directory",
            "StorageClass": "DIRECTORY"}


class S3FlashFileSystem(AbstractFileSystem):
    """``s3://`` through libs3flash: listings, whole and ranged reads, streaming writes (the
    object appears complete at close, or not at all), multipart uploads from files in place,
    parallel downloads, server-side copies, batched deletes.

    Directories are prefixes: a path is a directory when objects exist under ``path/``
    (or a ``path/`` marker object). ``mkdir``/``makedirs`` create nothing below a bucket (as
    s3fs), and create the bucket when it is missing.

    Instances are not cached by fsspec (``cachable = False``): they are cheap, and share one
    native client per (region, endpoint, configuration).
    """

    protocol = PROTOCOLS + (OWN_PROTOCOL,)
    root_marker = ""
    cachable = False
    _defaults: Dict[str, Any] = {}

    def __init__(self, anon: Optional[bool] = None, endpoint_url: Optional[str] = None,
                 key: Optional[str] = None, secret: Optional[str] = None,
                 token: Optional[str] = None, *, client_kwargs: Optional[dict] = None,
                 config_kwargs: Optional[dict] = None, region: Optional[str] = None,
                 profile: Optional[str] = None, username: Optional[str] = None,
                 password: Optional[str] = None, requester_pays: Optional[bool] = None,
                 s3client_config: Optional[S3ClientConfig] = None, **kwargs: Any):
        given = dict(anon=anon, endpoint_url=endpoint_url, key=key or username,
                     secret=secret or password, token=token, client_kwargs=client_kwargs,
                     config_kwargs=config_kwargs, region=region, profile=profile,
                     requester_pays=requester_pays, s3client_config=s3client_config)
        opts = {k: v for k, v in self._defaults.items() if k in given}
        opts.update({k: v for k, v in given.items() if v is not None})
        super().__init__(**kwargs)
        ck = dict(opts.get("client_kwargs") or {})
        endpoint = opts.get("endpoint_url") or ck.pop("endpoint_url", None)
        region = opts.get("region") or ck.pop("region_name", None)
        akid = opts.get("key") or ck.pop("aws_access_key_id", None)
        secret = opts.get("secret") or ck.pop("aws_secret_access_key", None)
        token = opts.get("token") or ck.pop("aws_session_token", None)
        verify = ck.pop("verify", None)
        if verify is False:
            raise ValueError("S3FlashFileSystem: client_kwargs verify=False is not supported; "
                             "give a CA bundle path (verify='/path/ca.pem')")
        if bool(akid) != bool(secret):
            raise ValueError("S3FlashFileSystem: give both key and secret, or neither")
        addressing = (((opts.get("config_kwargs") or {}).get("s3") or {})
                      .get("addressing_style"))
        base = opts.get("s3client_config") or S3ClientConfig()
        changes: Dict[str, Any] = {}
        if opts.get("anon"):
            changes["unsigned"] = True
        if addressing == "path":
            changes["force_path_style"] = True
        if akid:
            changes.update(access_key_id=akid, secret_access_key=secret, session_token=token)
        if opts.get("profile"):
            changes["profile"] = opts["profile"]
        if opts.get("requester_pays"):  # as s3fs: x-amz-request-payer on every request
            changes["requester_pays"] = True
        if isinstance(verify, str):
            changes["ca_bundle"] = verify
        config = dataclasses.replace(base, **changes) if changes else base
        self.region = region
        self.endpoint_url = endpoint
        self.s3client_config = config
        self._client: S3Client = _shared_client(region, endpoint, config)

    def __reduce__(self) -> Any:
        # pickled as its own class (a subclass stays a subclass), except the classes made
        # by register(**defaults), which are not importable: those pickle as their nearest
        # importable base, with the defaults folded into the options
        cls: type = type(self)
        while cls.__dict__.get("_made_by_register"):
            cls = cls.__mro__[1]
        opts = {**self._defaults, **self.storage_options}
        return _make_instance, (cls, self.storage_args, opts)

    # -- paths -------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        for p in PROTOCOLS + (OWN_PROTOCOL,):
            if path.startswith(p + "://"):
                path = path[len(p) + 3:]
                break
        return path.rstrip("/")

    def unstrip_protocol(self, name: str) -> str:
        return name if "://" in name else f"s3://{name}"

    @classmethod
    def _get_kwargs_from_urls(cls, urlpath: str) -> Dict[str, Any]:
        return {}

    def split_path(self, path: str) -> Tuple[str, str]:
        """(bucket, key) of a path; key is "" for a bucket."""
        path = self._strip_protocol(path)
        bucket, _, key = path.partition("/")
        return bucket, key

    def _bucket_key(self, path: str) -> Tuple[str, str]:
        bucket, key = self.split_path(path)
        if not bucket or not key:
            raise ValueError(f"not an object path (s3://bucket/key): {path!r}")
        return bucket, key

    @property
    def client(self) -> S3Client:
        return self._client

    @property
    def _native(self) -> _s3flash.Client:
        return self._client.native

    def _list(self, bucket: str, prefix: str, delimiter: Optional[str] = None
              ) -> Iterable[Tuple[List[tuple], List[str]]]:
        token = None
        seen = _s3flash.list_tokens()  # a token handed back again ends it (S3Exception)
        while True:
            objects, prefixes, token = self._native.list_objects(
                bucket, prefix=prefix or None, delimiter=delimiter, continuation_token=token,
                tokens=seen)
            yield objects, prefixes
            if not token:
                return

    # -- listing and metadata ----------------------------------------------------------
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        path = self._strip_protocol(path)
        bucket, key = self.split_path(path)
        if not bucket:
            roots = self._list_buckets()
            return roots if detail else [e["name"] for e in roots]
        prefix = key + "/" if key else ""
        out: List[Dict[str, Any]] = []
        marker = False
        for objects, prefixes in self._list(bucket, prefix, "/"):
            out.extend(_dir_entry(f"{bucket}/{p.rstrip('/')}") for p in prefixes)
            for k, size, lm, etag, sc in objects:
                if k == prefix:
                    marker = True
                    continue
                out.append(_file_entry(bucket, k, size, lm, etag, sc))
        if not out and key and not marker:
            try:
                out = [self._head(bucket, key)]
            except FileNotFoundError:
                raise _not_found(path) from None
        out.sort(key=lambda e: e["name"])
        return out if detail else [e["name"] for e in out]

    def _list_buckets(self) -> List[Dict[str, Any]]:
        """The buckets of the credentials (ListBuckets), as s3fs: anonymous, or without the
        permission to list buckets, the root lists nothing."""
        if self.s3client_config.unsigned:
            return []
        try:
            buckets = self._native.list_buckets()
        except PermissionError:
            return []
        out = []
        for name, created in sorted(buckets):
            e = _dir_entry(name)
            e["StorageClass"] = "BUCKET"
            if created:
                e["CreationDate"] = _mtime(created)
            out.append(e)
        return out

    def _head(self, bucket: str, key: str) -> Dict[str, Any]:
        h = self._native.head_object(bucket, key)
        e = _file_entry(bucket, key, h["size"], h["last_modified"], h["etag"],
                        h.get("storage_class", ""), h.get("content_type", ""))
        if h.get("version_id"):
            e["VersionId"] = h["version_id"]
        return e

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        bucket, key = self.split_path(path)
        if not bucket:
            return _dir_entry("")
        if not key:
            self._native.list_objects(bucket, max_keys=1)  # NoSuchBucket: FileNotFoundError
            return _dir_entry(bucket)
        try:
            return self._head(bucket, key)
        except FileNotFoundError:
            pass
        objects, prefixes, _ = self._native.list_objects(bucket, prefix=key + "/",
                                                         delimiter="/", max_keys=1)
        if objects or prefixes:
            return _dir_entry(path)
        raise _not_found(path)

    def exists(self, path: str, **kwargs: Any) -> bool:
        """False only for what is not there; a denied or failed request raises."""
        try:
            self.info(path)
            return True
        except FileNotFoundError:
            return False

    def isfile(self, path: str) -> bool:
        bucket, key = self.split_path(path)
        if not bucket or not key:
            return False
        try:
            self._native.head_object(bucket, key)
            return True
        except FileNotFoundError:
            return False

    def isdir(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "directory"
        except FileNotFoundError:
            return False

    def find(self, path: str, maxdepth: Optional[int] = None, withdirs: bool = False,
             detail: bool = False, **kwargs: Any) -> Any:
        """Everything under `path`, with one flat listing (no walk)."""
        if maxdepth is not None:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                **kwargs)
        path = self._strip_protocol(path)
        bucket, key = self.split_path(path)
        if not bucket:  # every bucket, one after the other
            every: Dict[str, Any] = {}
            for b in self._list_buckets():
                if withdirs:
                    every[b["name"]] = b
                every.update(self.find(b["name"], withdirs=withdirs, detail=True))
            return {n: every[n] for n in sorted(every)} if detail else sorted(every)
        prefix = key + "/" if key else ""
        out: Dict[str, Dict[str, Any]] = {}
        found = False
        for objects, _ in self._list(bucket, prefix):
            for k, size, lm, etag, sc in objects:
                found = True
                if k.endswith("/"):  # directory marker
                    name = f"{bucket}/{k.rstrip('/')}"
                    if withdirs and name != path:
                        out[name] = _dir_entry(name)
                else:
                    e = _file_entry(bucket, k, size, lm, etag, sc)
                    out[e["name"]] = e
                if withdirs:  # the directories between `path` and this key
                    rel = k[len(prefix):].rstrip("/").split("/")[:-1]
                    d = path
                    for part in rel:
                        d = f"{d}/{part}" if d else part
                        out.setdefault(d, _dir_entry(d))
        if withdirs and found:
            out[path] = _dir_entry(path)
        if not found and key:
            try:
                out[path] = self._head(bucket, key)
            except FileNotFoundError:
                pass
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def modified(self, path: str) -> datetime:
        """LastModified of an object (timezone-aware, UTC)."""
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return info["LastModified"]

    def created(self, path: str) -> datetime:
        """S3 objects are written whole, once: their creation time is LastModified."""
        return self.modified(path)

    def ukey(self, path: str) -> str:
        return self.info(path)["ETag"]

    # -- directories -------------------------------------------------------------------
    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Creates the bucket when `path` is one (FileExistsError when it exists), or when
        it is missing below it and create_parents (else FileNotFoundError); nothing else
        (S3 has no directories). As s3fs."""
        bucket, key = self.split_path(path)
        if not bucket:
            raise ValueError("mkdir: no bucket in path")
        if not key:
            if self._bucket_exists(bucket):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), bucket)
            self._native.create_bucket(bucket)
        elif not self._bucket_exists(bucket):
            if not create_parents:
                raise _not_found(bucket)
            self._native.create_bucket(bucket)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        try:
            self.mkdir(path, create_parents=True)
        except FileExistsError:
            if not exist_ok:
                raise

    def _bucket_exists(self, bucket: str) -> bool:
        try:
            self._native.list_objects(bucket, max_keys=1)
            return True
        except FileNotFoundError:
            return False

    def rmdir(self, path: str) -> None:
        """Deletes the bucket when `path` is one (it must be empty); below a bucket only the
        directory marker, if any, and OSError(ENOTEMPTY) when objects are under it."""
        bucket, key = self.split_path(path)
        if not key:
            try:
                self._native.delete_bucket(bucket)
            except _s3flash.S3Exception as e:
                if e.code == "BucketNotEmpty":
                    raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path) from e
                raise
            return
        objects, prefixes, _ = self._native.list_objects(bucket, prefix=key + "/", max_keys=2)
        if any(o[0] != key + "/" for o in objects) or prefixes:
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path)
        self._native.delete_object(bucket, key + "/")

    # -- deleting ----------------------------------------------------------------------
    def rm_file(self, path: str) -> None:
        bucket, key = self._bucket_key(path)
        self._native.delete_object(bucket, key)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None,
           **kwargs: Any) -> None:
        """Delete objects (one key: DeleteObject; more: DeleteObjects batches of 1000), as
        s3fs does:

        - a key: the object (one HEAD first: a missing key raises FileNotFoundError, a
          prefix IsADirectoryError);
        - recursive=True: the key and everything under ``key/`` (one flat listing),
          directory markers included; FileNotFoundError when nothing is there;
        - a bucket: removed (DeleteBucket, after its objects with recursive=True); not
          empty: OSError(ENOTEMPTY); missing: FileNotFoundError;
        - globs (and maxdepth) expand with fsspec's expand_path (nothing: FileNotFoundError).
        """
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        todo: Dict[str, set] = defaultdict(set)
        buckets: List[str] = []
        for p in paths:
            p = self._strip_protocol(p)
            bucket, key = self.split_path(p)
            if not bucket:
                raise ValueError("rm: no bucket in path")
            if has_magic(p) or maxdepth is not None:
                for q in self.expand_path(p, recursive=recursive, maxdepth=maxdepth):
                    b, k = self.split_path(q)
                    if k:
                        todo[b].add(k)
                        if recursive:
                            todo[b].add(k + "/")
                continue
            if not key:
                if recursive:  # NoSuchBucket: FileNotFoundError
                    todo[bucket].update(o[0] for objects, _ in self._list(bucket, "")
                                        for o in objects)
                buckets.append(bucket)
                continue
            if not recursive:
                if not self.isfile(p):
                    if self.isdir(p):
                        raise IsADirectoryError(errno.EISDIR, "rm of a prefix: give "
                                                "recursive=True", p)
                    raise _not_found(p)
                todo[bucket].add(key)
                continue
            under = [o[0] for objects, _ in self._list(bucket, key + "/")
                     for o in objects]
            if not under and not self.isfile(p):
                raise _not_found(p)
            todo[bucket].add(key)
            todo[bucket].update(under)
        for bucket, keys in todo.items():
            if len(keys) == 1:  # DeleteObject: a few ms where RGW takes ~40 for a batch
                self._native.delete_object(bucket, keys.pop())
            else:
                self._native.delete_objects(bucket, sorted(keys))
        for bucket in buckets:
            self.rmdir(bucket)

    # -- reading -----------------------------------------------------------------------
    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None,
                 **kwargs: Any) -> bytes:
        """The object's bytes, or [start, end) (negative: from the end), with ranged GETs."""
        bucket, key = self._bucket_key(path)
        r = self._native.open_reader(bucket, key, tail_bytes=-1)
        try:
            size = r.size
            s = 0 if start is None else (max(size + start, 0) if start < 0 else min(start, size))
            e = size if end is None else (max(size + end, 0) if end < 0 else min(end, size))
            if e <= s:
                return b""
            data = r.pread(e - s, s)
            if len(data) != e - s:
                raise _s3flash.S3Exception(
                    f"s3://{bucket}/{key}: short read ({len(data)} of {e - s} bytes)")
            return data
        finally:
            r.close()

    def _open(self, path: str, mode: str = "rb", block_size: Any = None,
              autocommit: bool = True, cache_options: Any = None, **kwargs: Any) -> Any:
        bucket, key = self._bucket_key(path)
        if mode == "rb":
            f = S3FlashReadFile(self, path, bucket, key)
            f.size  # opens: FileNotFoundError/PermissionError now, not at the first read
            return f
        if mode in ("wb", "xb"):
            if mode == "xb" and self.isfile(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            native = self._native.open_writer(bucket, key,
                                              content_type=kwargs.get("ContentType"))
            return S3FlashWriteFile(self, path, native, bucket, key, mode, autocommit)
        if mode == "ab":
            native = self._open_append(bucket, key, kwargs.get("ContentType"))
            return S3FlashWriteFile(self, path, native, bucket, key, mode, autocommit)
        raise NotImplementedError(f"S3FlashFileSystem: mode {mode!r} (S3 objects are "
                                  "written whole: 'rb', 'wb', 'xb', 'ab')")

    def _open_append(self, bucket: str, key: str, content_type: Optional[str]) -> Any:
        """The writer of an "ab" file, as s3fs: a missing object is a new one; an object
        under 5 MiB (too small to be a part) is read and written again first; a larger one
        becomes the first parts of a multipart upload by UploadPartCopy on the server
        (pinned to its ETag: an object replaced meanwhile fails), then the appended bytes.
        The new object appears at close, whole; an exception inside ``with`` aborts."""
        try:
            head = self._native.head_object(bucket, key)
        except FileNotFoundError:
            return self._native.open_writer(bucket, key, content_type=content_type)
        ctype = content_type or head.get("content_type") or None
        if head["size"] < _MIN_PART:
            r = self._native.open_reader(bucket, key, tail_bytes=-1)
            try:
                old = r.pread(r.size, 0)
            finally:
                r.close()
            w = self._native.open_writer(bucket, key, content_type=ctype)
            try:
                w.write(old)
            except BaseException:
                w.abort()
                raise
            return w
        return _AppendWriter(self._native, bucket, key, head["size"], head["etag"],
                             max(self.s3client_config.part_size, _MIN_PART), ctype)

    def open(self, path: str, mode: str = "rb", block_size: Any = None,
             cache_options: Any = None, compression: Any = None, **kwargs: Any) -> Any:
        if "b" not in mode and compression is None and any(c in mode for c in "wxa"):
            text = {k: kwargs.pop(k) for k in ("encoding", "errors", "newline") if k in kwargs}
            binary = self.open(path, mode.replace("t", "") + "b", block_size, cache_options,
                               **kwargs)
            return _TextWriter(binary, **text)
        return super().open(path, mode, block_size=block_size, cache_options=cache_options,
                            compression=compression, **kwargs)

    def get_file(self, rpath: str, lpath: Any, callback: Any = DEFAULT_CALLBACK,
                 outfile: Any = None, **kwargs: Any) -> None:
        """Parallel ranged GETs written with pwrite into a temporary file beside `lpath`,
        renamed into place (the engine's download to a file: a failure leaves no partial
        file; a full disk raises OSError(ENOSPC)). The parent directories of `lpath` are
        created, as fsspec's own get_file does."""
        if isfilelike(lpath):
            with self.open(rpath, "rb") as f:
                while True:
                    chunk = f.read(_STREAM_CHUNK)
                    if not chunk:
                        return
                    lpath.write(chunk)
        bucket, key = self.split_path(rpath)
        lpath = os.fspath(lpath)
        if not key:
            if not self.isdir(rpath):
                raise _not_found(self._strip_protocol(rpath))
            os.makedirs(lpath, exist_ok=True)
            return
        os.makedirs(os.path.dirname(os.path.abspath(lpath)), exist_ok=True)
        try:
            info = self._native.download_file(bucket, key, lpath)
        except _s3flash.S3NotFoundError as e:
            if e.status == "S3F_ERR_IO":  # a local path that does not exist
                raise
            if self.isdir(rpath):
                os.makedirs(lpath, exist_ok=True)
                return
            raise _not_found(self._strip_protocol(rpath)) from None
        callback.set_size(info["size"])
        callback.relative_update(info["size"])

    # -- writing -----------------------------------------------------------------------
    def pipe_file(self, path: str, value: Any, mode: str = "overwrite", **kwargs: Any) -> None:
        """Upload a buffer in place (no copy), parts in parallel."""
        bucket, key = self._bucket_key(path)
        if mode == "create" and self.isfile(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        self._native.upload(bucket, key, value)

    def put_file(self, lpath: Any, rpath: str, callback: Any = DEFAULT_CALLBACK,
                 mode: str = "overwrite", **kwargs: Any) -> None:
        """Upload a local file, parts read with pread and sent in parallel (the engine's
        file upload: no copy in memory, no mapping). A file that cannot be read, or that
        changes during the upload, raises OSError naming it, and nothing is created."""
        if isfilelike(lpath):
            with self.open(rpath, "wb") as w:
                while True:
                    chunk = lpath.read(_STREAM_CHUNK)
                    if not chunk:
                        return
                    w.write(chunk)
        lpath = os.fspath(lpath)
        if os.path.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        bucket, key = self._bucket_key(rpath)
        if mode == "create" and self.isfile(rpath):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), rpath)
        info = self._native.upload_file(bucket, key, lpath,
                                        content_type=kwargs.get("ContentType"))
        callback.set_size(info["size"])
        callback.relative_update(info["size"])

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """An empty object. Without truncate, an existing object is an error (as s3fs)."""
        if not truncate and self.isfile(path):
            raise ValueError("S3 does not support touching existing files")
        self.pipe_file(path, b"")

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Server-side copy of any size: one CopyObject, or UploadPartCopy parts in parallel
        for a large object, pinned to the source's ETag (a source replaced meanwhile fails
        and nothing is created). No byte goes through this process."""
        b1, k1 = self.split_path(path1)
        b2, k2 = self._bucket_key(path2)
        try:
            if not k1:
                raise _not_found(path1)
            self._native.copy(b1, k1, b2, k2)
        except FileNotFoundError:
            if self.isdir(path1):
                return  # a directory of a recursive copy: nothing to create
            raise

    def mv(self, path1: Any, path2: Any, recursive: bool = False,
           maxdepth: Optional[int] = None, **kwargs: Any) -> None:
        """Within one S3 Express directory bucket (NAME--ZONE--x-s3): each object renamed
        by RenameObject (atomic, no copy, never absent); elsewhere copy then delete, as
        fsspec does."""
        if isinstance(path1, str) and isinstance(path2, str) and path1 != path2:
            b1, k1 = self.split_path(path1)
            b2, k2 = self.split_path(path2)
            if b1 == b2 and is_directory_bucket(b1) and k1 and k2:
                if self.isfile(path1):
                    if k2.endswith("/") or self.isdir(path2):
                        k2 = k2.rstrip("/") + "/" + k1.rsplit("/", 1)[-1]
                    self._native.rename_object(b1, k1, k2)
                    return
                if recursive:
                    src = k1.rstrip("/") + "/"
                    dst = k2.rstrip("/") + "/"
                    for p in self.find(path1, maxdepth=maxdepth):
                        key = self.split_path(p)[1]
                        self._native.rename_object(b1, key, dst + key[len(src):])
                    return
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def invalidate_cache(self, path: Optional[str] = None) -> None:
        """Nothing is cached: every call asks the server."""

    def sign(self, path: str, expiration: int = 100, **kwargs: Any) -> str:
        raise NotImplementedError("presigned URLs: use the s3flash CLI (s3flash presign)")


def _make_instance(cls: type, args: Any, kwargs: Dict[str, Any]) -> S3FlashFileSystem:
    return cls(*args, **kwargs)


def register(clobber: bool = True, **storage_options: Any) -> type:
    """Make fsspec's ``s3://`` and ``s3a://`` ours. ``storage_options`` become defaults for
    every instance fsspec builds without them (e.g. Lightning's ``get_filesystem``)."""
    cls: type = S3FlashFileSystem
    if storage_options:
        cls = type("S3FlashFileSystem", (S3FlashFileSystem,),
                   {"_defaults": dict(storage_options), "__module__": __name__,
                    "_made_by_register": True})
    for p in PROTOCOLS:
        fsspec.register_implementation(p, cls, clobber=clobber)
    return cls


def unregister() -> None:
    """Undo register(): ``s3://`` resolves to s3fs again (when it is installed)."""
    from fsspec.registry import _registry, known_implementations
    for p in PROTOCOLS:
        c = _registry.get(p)
        if isinstance(c, type) and issubclass(c, S3FlashFileSystem):
            del _registry[p]
        spec = known_implementations.get(p)
        if spec and spec.get("class", "").startswith("s3flash."):
            known_implementations[p] = {"class": "s3fs.S3FileSystem",
                                        "err": "Install s3fs to access S3"}
