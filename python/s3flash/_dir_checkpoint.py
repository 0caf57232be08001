"""DirectoryCheckpointer: a local checkpoint directory (a Trainer's ``checkpoint-N``, an
Accelerate ``save_state`` folder) uploaded in the background as one commit of the
AsyncCheckpointer protocol (s3flash/_async_checkpoint.py), and the newest committed one
downloaded back.

Layout under the prefix (``s3://bucket/run/``), as AsyncCheckpointer's::

    run/step-000000000042/<save id>/model.safetensors    every file of the folder, its
    run/step-000000000042/<save id>/optimizer.pt          relative path kept
    run/commits/0000000000000007.json                     the manifest, written LAST

The manifest names every file (name = the relative path, key, size, CRC-32, ETag) and the
folder's name (``"directory": "checkpoint-42"``); the commit, its validity, the order of
commits, retention (``keep_remote``) and the rules for other writers are AsyncCheckpointer's.

``save_dir`` takes a snapshot of the folder first (hard links into a private folder beside
it: no copy of the bytes), so that the framework may delete the folder (its own rotation)
while the upload runs. At most ``max_pending`` saves are queued or running; a save asked for
beyond that waits for the oldest one (the queue is bounded; training pauses, never grows
memory or disk without bound).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, NamedTuple, Optional

from ._async_checkpoint import AsyncCheckpointer, CheckpointInfo, _crc32_file, _Job
from ._commit import _new_save_id, _norm_etag, _step_dir
from . import _s3flash

__all__ = ["DirectoryCheckpointer"]

_PARALLEL_FILES = 4   # files uploaded or downloaded at once (each in parallel parts)


class _Snapshot(NamedTuple):
    path: str            # the private folder of hard links (removed after the upload)
    name: str            # the folder's own name (checkpoint-42)
    files: List[str]     # relative paths, sorted


def _safe_relpath(rel: Any) -> bool:
    """A relative path from a manifest that stays inside the folder it is joined to."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or \
            "\0" in rel:
        return False
    return all(p not in ("", ".", "..") for p in rel.split("/"))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links refused: a copy
        shutil.copyfile(src, dst)


def _snapshot(path: str) -> _Snapshot:
    """Hard links to every regular file under `path`, in a new 0700 folder beside it."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint folder {path} is not a directory")
    name = os.path.basename(path.rstrip("/"))
    snap = tempfile.mkdtemp(prefix=f".s3flash-upload-{name}-", dir=os.path.dirname(path))
    files: List[str] = []
    try:
        for root, dirs, names in os.walk(path):
            dirs.sort()
            rel_root = os.path.relpath(root, path)
            for n in sorted(names):
                src = os.path.join(root, n)
                if os.path.islink(src) or not os.path.isfile(src):
                    continue  # regular files only
                rel = n if rel_root == "." else os.path.join(rel_root, n).replace(os.sep, "/")
                dst = os.path.join(snap, rel)
                os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
                _link_or_copy(src, dst)
                files.append(rel)
        if not files:
            raise ValueError(f"checkpoint folder {path} has no files to upload")
    except BaseException:
        shutil.rmtree(snap, ignore_errors=True)
        raise
    return _Snapshot(snap, name, files)


class DirectoryCheckpointer(AsyncCheckpointer):
    """Uploads local checkpoint folders as commits (``save_dir``) and downloads the newest
    committed one (``download``). The other arguments are AsyncCheckpointer's (no local
    tier: the folders are local already); ``keep_remote`` is the number of committed
    folders kept in S3."""

    _thread_name = "s3flash-dir-checkpoint"

    def __init__(self, uri: str, *, max_pending: int = 1, **kwargs: Any):
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        if kwargs.get("local_dir") is not None:
            raise ValueError("DirectoryCheckpointer has no local tier (local_dir)")
        super().__init__(uri, **kwargs)
        self.max_pending = max_pending
        self.last_download: Optional[Dict[str, Any]] = None  # the manifest download() used

    def save_dir(self, path: str, step: int
                 ) -> "concurrent.futures.Future[Optional[CheckpointInfo]]":
        """Snapshot the folder `path` and upload it in the background as the commit of
        `step`; returns a future of its CheckpointInfo (``result()`` raises what failed).
        Waits first while ``max_pending`` saves are queued or running."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        snap = _snapshot(path)
        fut: "concurrent.futures.Future[Optional[CheckpointInfo]]" = concurrent.futures.Future()
        try:
            with self._cond:
                while self._inflight >= self.max_pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise ValueError("DirectoryCheckpointer is closed")
                fut.set_running_or_notify_cancel()
                self._enqueue(_Job(step, snap, fut, {}))  # type: ignore[arg-type]
        except BaseException:
            shutil.rmtree(snap.path, ignore_errors=True)
            raise
        return fut

    # -- background -----------------------------------------------------------------------
    def _save_job(self, job: _Job) -> CheckpointInfo:
        snap = job.staged
        if not isinstance(snap, _Snapshot):
            return super()._save_job(job)
        save_id = _new_save_id()
        sdir = self.prefix + _step_dir(job.step) + save_id + "/"
        keys = [sdir + rel for rel in snap.files]
        verified = False
        started = time.monotonic()
        try:
            def put(rel: str) -> Dict[str, Any]:
                local = os.path.join(snap.path, rel)
                info = self._client.upload_file(self.bucket, sdir + rel, local) or {}
                size, crc = _crc32_file(local)
                if info.get("size") is not None and int(info["size"]) != size:
                    raise _s3flash.S3IOError(f"{sdir + rel}: uploaded {info['size']} bytes, "
                                             f"the file {local} has {size}")
                return {"name": rel, "key": sdir + rel, "size": size, "crc32": f"{crc:08x}",
                        "etag": _norm_etag(info.get("etag"))}

            with concurrent.futures.ThreadPoolExecutor(
                    min(_PARALLEL_FILES, len(snap.files))) as ex:
                objects = list(ex.map(put, snap.files))
            manifest = self._log.new_manifest(job.step, save_id, objects, directory=snap.name)
            # the commit: the manifest, after every file is complete
            seq, ckey, _ = self._log.commit(manifest, save_id)
            self._log.verify(manifest, ckey, started)
            verified = True
            return CheckpointInfo(job.step, f"s3://{self.bucket}/{sdir}", manifest, None, seq,
                                  f"s3://{self.bucket}/{ckey}")
        finally:
            if not verified:
                self._log.own_leftovers.update(keys)  # named by no valid commit
            shutil.rmtree(snap.path, ignore_errors=True)

    # -- resume ---------------------------------------------------------------------------
    def download(self, dest_root: str, step: Optional[int] = None) -> str:
        """Download the newest committed folder (of `step`, when given) into
        ``dest_root/<its name>`` (checkpoint-42) and return that path. Each file is fetched
        with If-Match on the ETag its manifest names (a file replaced since fails, never
        loads other bytes); a local file with the manifest's size and CRC-32 is kept.
        Commits of state dicts (``AsyncCheckpointer.save``) are not folders and are skipped.
        FileNotFoundError when there is no such commit."""
        commits = [c for c in self._valid_commits() if "directory" in c.manifest]
        if step is not None:
            commits = [c for c in commits if c.step == step]
        if not commits:
            raise FileNotFoundError(
                f"no committed checkpoint folder under {self.uri}" if step is None else
                f"no committed checkpoint folder of step {step} under {self.uri}")
        commit = commits[-1]
        name = commit.manifest["directory"]
        objects = commit.manifest["objects"]
        bad = [o.get("name") for o in objects if not _safe_relpath(o.get("name"))]
        if not _safe_relpath(name) or "/" in name or bad:
            raise ValueError(f"commit {commit.key} under {self.uri}: names outside the folder "
                             f"(directory {name!r}, files {bad})")
        dest = os.path.join(os.path.abspath(dest_root), name)

        def get(o: Dict[str, Any]) -> None:
            path = os.path.join(dest, *o["name"].split("/"))
            try:
                if os.path.getsize(path) == o["size"] and \
                        f"{_crc32_file(path)[1]:08x}" == o.get("crc32"):
                    return  # already the committed bytes
            except OSError:
                pass
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._client.download_file(self.bucket, o["key"], path,
                                       if_match=f'"{o["etag"]}"' if o.get("etag") else None)

        os.makedirs(dest, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(min(_PARALLEL_FILES, len(objects))) as ex:
            list(ex.map(get, objects))
        self.last_download = commit.manifest
        return dest

