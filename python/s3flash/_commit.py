"""The commit protocol of AsyncCheckpointer and DirectoryCheckpointer: commit records,
sequence numbers, the conditional PUT, the other writers on a prefix, and retention. One
``CommitLog`` per writer on one prefix; it knows nothing of tensors, staging or the upload
(s3flash/_async_checkpoint.py), only of the objects a save wrote and the record naming them.

Layout under the prefix (``s3://bucket/run/``)::

    run/step-000000000042/<save id>/...        the objects of a save (never overwritten)
    run/commits/0000000000000007.json          commit 7: the manifest, written LAST

A commit record is a JSON manifest: ``format`` ``"s3flash.checkpoint"``, ``version``, its
sequence number ``seq`` (the one in its name), the ``step``, the ``save_id``, the writer
(``id``, ``host``, ``pid``) and the ``objects`` it names (each with name, key, size, CRC-32
and ETag). It is written with ``If-None-Match: *`` under the next free sequence number: a
412 means another writer took that number, and the next one is tried (``commit``). A server
that ignores the header (found out once by ``_probe_conditional_put``) gets names carrying
the save id instead, so two writers still never overwrite each other's record.

A record is valid when it parses as one (``record_error`` says why one is refused: not
JSON, another format, a sequence number other than its name's, no integer step) and every
object it names is there with its size and ETag. ``retain`` keeps the newest
``keep_remote`` valid commits up to this writer's newest one, never a newer one, and
removes another writer's commits and unnamed objects only once they are older than
``retention_window_s`` by the server's clock. The previous layout (``step-N/manifest.json``,
version 1) is still read: its commits come before every numbered one, in step order.
docs/PYTHON.md has the protocol and what a crash at each point leaves.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from ._client import S3Client
from . import _s3flash

# the name users filter on (docs/PYTHON.md): the checkpointer's, where these lines began
log = logging.getLogger("s3flash._async_checkpoint")

MANIFEST_NAME = "manifest.json"   # the local tier's copy of a commit (and version 1's)
COMMITS_DIR = "commits/"
MANIFEST_FORMAT = "s3flash.checkpoint"
MANIFEST_VERSION = 2
_COMMIT_TRIES = 16      # sequence numbers tried when other writers take them first
DEFAULT_RETENTION_WINDOW_S = 3600.0  # other writers' saves younger than this are never removed


class ConcurrentWriterError(RuntimeError):
    """A save committed, but its commit record or an object it names is gone at once (removed
    by another writer's retention: a writer whose retention window is shorter than this
    save took, or an s3flash that predates writer ids). ``writers``: what is known of the
    other writers on the prefix (dicts with ``id``, ``host``, ``pid``, the ``seq`` and
    ``time`` of their newest commit), newest first; ``missing``: the keys that are gone."""

    def __init__(self, message: str, writers: List[Dict[str, Any]], missing: List[str]):
        super().__init__(message)
        self.writers = writers
        self.missing = missing


class ConcurrentWriterWarning(RuntimeWarning):
    """Another writer committed under this checkpointer's prefix after its first commit: two
    live writers on one prefix (docs/PYTHON.md, "Writers per prefix")."""


def _describe_writer(w: Dict[str, Any]) -> str:
    if not w.get("id"):
        return f"a writer without an id (an older s3flash) that committed {w.get('key', '?')}"
    return (f"writer {w['id']} (host {w.get('host', '?')}, pid {w.get('pid', '?')}, "
            f"commit {w.get('seq', '?')})")



class CommitInfo(NamedTuple):
    """One valid commit under the prefix (``AsyncCheckpointer.commits()``), oldest first."""

    seq: Optional[int]            # None: a commit of the version 1 layout (no sequence)
    step: int
    save_id: str
    time: float                   # when its writer committed it (the writer's clock)
    uri: str                      # the manifest's s3:// URI


class _Commit(NamedTuple):
    order: Tuple[int, int, str]   # (1, seq, name) for version 2; (0, step, "") for version 1
    seq: Optional[int]
    step: int
    key: str                      # the manifest's key
    manifest: Dict[str, Any]
    valid: bool                   # every object it names is there with its size and ETag
    error: str = ""                # why it is not valid ("" when it is)


def _step_dir(step: int) -> str:
    return f"step-{step:012d}/"


def _parse_step_dir(name: str) -> Optional[int]:
    if not name.startswith("step-"):
        return None
    digits = name[5:]
    return int(digits) if digits.isdigit() else None


def _commit_name(seq: int, save_id: Optional[str]) -> str:
    """commits/<seq>.json; with a save id (a server that ignores If-None-Match) the name is
    unique to the save, and the order among equal sequence numbers is by name."""
    return f"{seq:016d}.json" if save_id is None else f"{seq:016d}-{save_id}.json"


def _parse_commit_name(name: str) -> Optional[int]:
    if not name.endswith(".json"):
        return None
    digits = name[:-5].split("-", 1)[0]
    return int(digits) if len(digits) == 16 and digits.isdigit() else None


def _new_save_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(8).hex()


def _norm_etag(etag: Optional[str]) -> str:
    return (etag or "").strip('"')


def record_error(m: Any, seq: Optional[int], step: Optional[int] = None) -> str:
    """Why the parsed commit record `m` is refused ("" when it is one of this protocol's): a
    numbered record (``commits/<seq>.json``) must carry the sequence number of its name and an
    integer step; a version 1 record (`seq` None, ``step-N/manifest.json``) the step `step`
    of its folder."""
    if not isinstance(m, dict):
        return "not a JSON object (unreadable, or gone since the listing)"
    if m.get("format") != MANIFEST_FORMAT:
        return (f"format {str(m.get('format'))[:40]!r}, not {MANIFEST_FORMAT!r} (not a "
                "commit record)")
    if seq is not None:
        if m.get("seq") != seq:
            return f"sequence number {str(m.get('seq'))[:40]!r}, not {seq} (its name's)"
        if not isinstance(m.get("step"), int):
            return f"step {str(m.get('step'))[:40]!r} is not an integer"
    elif m.get("step") != step:
        return f"step {str(m.get('step'))[:40]!r}, not {step} (its folder's)"
    return ""


class CommitLog:
    """One writer's commits under ``s3://bucket/prefix/`` (prefix "" or ending in "/").

    ``writer_id`` (random), the host name and the pid go into each of its records, so that
    another writer's retention spares its saves and its own retention knows them.
    ``own_leftovers``: keys of this writer's saves that no valid commit names (failed ones),
    removed by the next ``retain``. Not thread-safe: one thread commits and retains.
    """

    def __init__(self, client: S3Client, bucket: str, prefix: str, *,
                 keep_remote: Optional[int] = None,
                 retention_window_s: float = DEFAULT_RETENTION_WINDOW_S,
                 conditional_put: Optional[bool] = None):
        self._client = client
        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{bucket}/{prefix}"
        self.keep_remote = keep_remote
        self.retention_window_s = float(retention_window_s)
        self.conditional_put = conditional_put
        self._manifests: Dict[Tuple[str, str], Dict[str, Any]] = {}  # (key, etag) -> manifest
        self.own_leftovers: Set[str] = set()  # keys of this writer's failed saves
        self.writer_id = uuid.uuid4().hex[:16]
        self._host = socket.gethostname()
        self._own_commit_keys: Set[str] = set()
        self._first_seq: Optional[int] = None   # of this writer's first commit
        self._examined: Set[str] = set()        # commit keys of others already looked at
        self._warned: Set[str] = set()          # writers already warned about

    def new_manifest(self, step: int, save_id: str, objects: List[Dict[str, Any]],
                     **extra: Any) -> Dict[str, Any]:
        """The manifest of a save (its "seq" is added by commit): the objects it names, each
        with name, key, size, crc32 and etag; `extra` fields beside them."""
        import torch
        return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "step": step,
                "save_id": save_id, "time": time.time(), "torch": torch.__version__,
                "objects": objects, **extra,
                "writer": {"id": self.writer_id, "host": self._host, "pid": os.getpid()}}

    def commit(self, manifest: Dict[str, Any], save_id: str) -> Tuple[int, str, bytes]:
        """Write the manifest as the next commit: commits/<seq>.json with If-None-Match: *
        (a 412: another writer took that number; the next free one is tried). Returns
        (seq, key, body)."""
        if self.conditional_put is None:
            self.conditional_put = self._probe_conditional_put()
        taken: List[str] = []  # numbers another writer took while this one tried them
        for _ in range(_COMMIT_TRIES):
            keys = self._commit_keys()
            self._note_other_writers(keys, taken)
            seq = 1 + max((s for s, _, _ in keys), default=0)
            manifest["seq"] = seq
            body = json.dumps(manifest, indent=1).encode()
            key = self.prefix + COMMITS_DIR + _commit_name(
                seq, None if self.conditional_put else save_id)
            try:
                self._client.native.put_object(
                    self.bucket, key, body,
                    if_none_match="*" if self.conditional_put else None,
                    content_type="application/json")
            except _s3flash.S3Exception as e:
                if getattr(e, "status", "") != "S3F_ERR_PRECONDITION_FAILED":
                    raise
                taken.append(key)
                continue  # another writer committed under this number first
            self._own_commit_keys.add(key)
            if self._first_seq is None:
                self._first_seq = seq
            return seq, key, body
        raise _s3flash.S3Exception(
            f"s3flash.AsyncCheckpointer: no commit after {_COMMIT_TRIES} tries under "
            f"{self.uri}{COMMITS_DIR}: other writers took every sequence number tried")

    def _probe_conditional_put(self) -> bool:
        """Whether the server refuses a second PutObject with If-None-Match: * over a key
        (some S3-compatible servers ignore the header: the second one then overwrites)."""
        key = f"{self.prefix}{COMMITS_DIR}.probe-{_new_save_id()}"
        nat = self._client.native
        try:
            nat.put_object(self.bucket, key, b"probe", if_none_match="*")
            try:
                nat.put_object(self.bucket, key, b"probe", if_none_match="*")
            except _s3flash.S3Exception as e:
                if getattr(e, "status", "") == "S3F_ERR_PRECONDITION_FAILED":
                    return True
                if getattr(e, "http_status", 0) in (400, 501):
                    pass  # the header is refused: not supported
                else:
                    raise
        except _s3flash.S3Exception as e:
            if getattr(e, "http_status", 0) not in (400, 501):
                raise
        finally:
            try:
                nat.delete_object(self.bucket, key)
            except _s3flash.S3Exception:
                pass
        warnings.warn(f"s3flash.AsyncCheckpointer: the server at {self.uri} ignores "
                      "If-None-Match on PutObject: commits are named by their save id "
                      "(docs/PYTHON.md)", RuntimeWarning)
        return False

    def _commit_keys(self) -> List[Tuple[int, str, str]]:
        """(seq, key, ETag) of every commit record under commits/, in commit order."""
        out = []
        for o in self._client.list_objects(self.bucket, self.prefix + COMMITS_DIR):
            name = o.key[len(self.prefix) + len(COMMITS_DIR):]
            seq = _parse_commit_name(name)
            if seq is not None:
                out.append((seq, o.key, _norm_etag(o.etag)))
        return sorted(out)

    # -- other writers --------------------------------------------------------------------
    def _writer_of(self, key: str, etag: str, seq: Optional[int]) -> Dict[str, Any]:
        """What the commit record at `key` says of its writer ({} for one of this writer)."""
        m = self._manifest(key, etag) or {}
        raw = m.get("writer")
        w: Dict[str, Any] = raw if isinstance(raw, dict) else {}
        if w.get("id") == self.writer_id:
            return {}
        return {"id": str(w.get("id") or ""), "host": str(w.get("host", "?")),
                "pid": w.get("pid", "?"), "seq": seq, "key": key, "time": m.get("time")}

    def _note_other_writers(self, keys: List[Tuple[int, str, str]], taken: List[str]) -> None:
        """Warn (once per writer) about a second live writer: one that committed after this
        writer's first commit, or took a number this writer was committing under."""
        for seq, key, etag in keys:
            if key in self._own_commit_keys or key in self._examined:
                continue
            if key not in taken and (self._first_seq is None or seq <= self._first_seq):
                continue  # before this writer's first commit: maybe a dead predecessor's
            w = self._writer_of(key, etag, seq)
            name = w.get("id") or key
            if not w or name in self._warned:
                self._examined.add(key)
                continue
            msg = (f"s3flash.AsyncCheckpointer: a second writer is saving under {self.uri}: "
                   f"{_describe_writer(w)}, beside this one (writer {self.writer_id}, host "
                   f"{self._host}, pid {os.getpid()}). Saves of each are kept from the "
                   f"other's retention for retention_window_s={self.retention_window_s:g} s; "
                   "give each writer a prefix of its own (docs/PYTHON.md)")
            log.warning("%s", msg)
            # noted once it is said: with an "error" filter every save raises, before its
            # commit, while the other writer's commit is there
            warnings.warn(msg, ConcurrentWriterWarning)
            self._examined.add(key)
            self._warned.add(name)

    def _other_writers(self) -> List[Dict[str, Any]]:
        """Every other writer that has a commit record under the prefix, newest first (by
        its newest commit)."""
        seen: Dict[str, Dict[str, Any]] = {}
        for seq, key, etag in reversed(self._commit_keys()):
            if key in self._own_commit_keys:
                continue
            w = self._writer_of(key, etag, seq)
            if w and (w["id"] or key) not in seen:
                seen[w["id"] or key] = w
        return list(seen.values())

    def verify(self, manifest: Dict[str, Any], ckey: str, started: float) -> None:
        """After the commit record is written: it and every object it names are there (HEAD),
        with the size and ETag it names; else ConcurrentWriterError naming the other writers
        (whose retention removed them). A save that took longer than the retention window
        is warned about: a retention of another writer that listed the prefix before this
        commit may remove its object after this check."""
        missing: List[str] = []
        why: List[str] = []
        for o in manifest["objects"]:
            try:
                h = self._client.head_object(self.bucket, o["key"])
            except _s3flash.S3NotFoundError:
                missing.append(o["key"])
                why.append(f"{o['key']} is gone")
                continue
            etag = _norm_etag(h.get("etag"))
            if int(h.get("size", -1)) != o["size"] or (o["etag"] and etag and
                                                        etag != o["etag"]):
                missing.append(o["key"])
                why.append(f"{o['key']} is another object now (size {h.get('size')}, "
                           f"ETag {etag}; committed: size {o['size']}, ETag {o['etag']})")
        try:
            self._client.head_object(self.bucket, ckey)
        except _s3flash.S3NotFoundError:
            missing.append(ckey)
            why.append(f"the commit record {ckey} is gone")
        if missing:
            others = self._other_writers()
            named = "; ".join(_describe_writer(w) for w in others) or \
                "no commit of another writer is left under commits/ (an older s3flash, " \
                "or a tool deleting under the prefix)"
            raise ConcurrentWriterError(
                f"s3flash.AsyncCheckpointer: commit {manifest.get('seq')} of step "
                f"{manifest.get('step')} under {self.uri} was written, but {', '.join(why)}: "
                f"removed by another writer's retention. Other writers on the prefix: "
                f"{named}. One writer per prefix; a writer's retention_window_s must exceed "
                f"the other's longest save (this one: writer {self.writer_id}, "
                f"retention_window_s={self.retention_window_s:g})", others, missing)
        took = time.monotonic() - started
        if self.retention_window_s and took >= self.retention_window_s:
            warnings.warn(f"s3flash.AsyncCheckpointer: the save of step {manifest.get('step')} "
                          f"took {took:.0f} s from its upload to its commit, longer than "
                          f"retention_window_s={self.retention_window_s:g}: a retention of "
                          "another writer that listed the prefix before this commit may still "
                          "remove its object; raise retention_window_s above the longest save",
                          RuntimeWarning)

    def _listing(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(commit records, data objects): key -> ObjectInfo under commits/ and step-*/."""
        commits = {o.key: o for o in self._client.list_objects(self.bucket,
                                                               self.prefix + COMMITS_DIR)}
        data = {o.key: o for o in self._client.list_objects(self.bucket,
                                                            self.prefix + "step-")}
        return commits, data

    def _manifest(self, key: str, etag: str) -> Optional[Dict[str, Any]]:
        m = self._manifests.get((key, etag))
        if m is None:
            try:
                got = self._client.native.download_whole(self.bucket, key, 1 << 20)
                if got is None:
                    return None
                m = json.loads(got[0])
            except (_s3flash.S3NotFoundError, ValueError):
                return None
            if not isinstance(m, dict):
                return None
            self._manifests[(key, etag)] = m
        return m

    def all_commits(self, listing: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None
                    ) -> List[_Commit]:
        """Every commit record under the prefix (valid or not: ``error`` says why not), in
        commit order: those of the version 1 layout first (by step), then the numbered
        ones."""
        records, data = self._listing() if listing is None else listing
        out: List[_Commit] = []
        for key, o in records.items():
            name = key[len(self.prefix) + len(COMMITS_DIR):]
            seq = _parse_commit_name(name)
            if seq is None:
                continue
            m = self._manifest(key, _norm_etag(o.etag))
            bad = record_error(m, seq)
            why = bad or self._objects_missing(m, data)  # type: ignore[arg-type]
            if bad:
                out.append(_Commit((1, seq, name), seq, -1, key, {}, False, why))
            else:
                out.append(_Commit((1, seq, name), seq, int(m["step"]), key, m,  # type: ignore
                                   not why, why))
        for key, o in data.items():  # version 1: step-N/manifest.json
            d, _, name = key[len(self.prefix):].partition("/")
            step = _parse_step_dir(d)
            if step is None or name != MANIFEST_NAME:
                continue
            m = self._manifest(key, _norm_etag(o.etag))
            bad = record_error(m, None, step)
            why = bad or self._objects_missing(m, data)  # type: ignore[arg-type]
            out.append(_Commit((0, step, ""), None, step, key, {} if bad else m,  # type: ignore
                               not why, why))
        return sorted(out, key=lambda c: c.order)

    def _objects_missing(self, m: Dict[str, Any], data: Dict[str, Any]) -> str:
        """Why the objects the record `m` names are not all there with the size and ETag it
        names ("" when they are); `data`: the listing of step-*/."""
        objs = m.get("objects")
        if not isinstance(objs, list) or not objs:
            return "it names no objects"
        for o in objs:
            if not isinstance(o, dict) or not isinstance(o.get("key"), str):
                return f"an entry of its objects has no key: {str(o)[:80]}"
            have = data.get(o["key"])
            if have is None:
                return f"{o['key']} is gone"
            if have.size != o.get("size") or \
                    (o.get("etag") and _norm_etag(have.etag) and
                     _norm_etag(have.etag) != o["etag"]):
                return (f"{o['key']} is another object now (size {have.size}, ETag "
                        f"{_norm_etag(have.etag)}; committed: size {o.get('size')}, ETag "
                        f"{o.get('etag')})")
        return ""

    def valid_commits(self) -> List[_Commit]:
        return [c for c in self.all_commits() if c.valid]

    def _own(self, c: _Commit) -> bool:
        w = c.manifest.get("writer")
        return isinstance(w, dict) and w.get("id") == self.writer_id

    def retain(self, ckey: str) -> None:
        """Retention after this writer's commit `ckey`: of the commits up to it, the newest
        `keep_remote` valid ones and it are kept. The others go (each record before the
        objects it names) when this writer made them, or when they are older than
        retention_window_s (by the server's clock: the window ends at this commit record's
        Last-Modified); newer commits are never touched. Then the objects no remaining
        commit names: those of the commits removed, this writer's failed saves, and the
        others older than the window (leftovers of killed saves; younger ones may be a
        save of another writer about to commit)."""
        if self.keep_remote is None:
            return
        listing = self._listing()
        records, data = listing
        commits = self.all_commits(listing)
        mine = next((i for i, c in enumerate(commits) if c.key == ckey), None)
        if mine is None or ckey not in records:
            raise _s3flash.S3IOError(f"{ckey}: this writer's commit record is not in the "
                                     f"listing of {self.uri}{COMMITS_DIR}")
        horizon = records[ckey].last_modified - self.retention_window_s
        upto = commits[:mine + 1]
        kept = {c.key for c in [c for c in upto if c.valid][-self.keep_remote:]}
        kept.add(ckey)

        def old(c: _Commit) -> bool:
            o = records.get(c.key) or data.get(c.key)
            return o is not None and o.last_modified <= horizon

        # uncommit first (invalid records too); a newer record is never touched (the
        # highest number stays, so numbers only grow)
        doomed = [c for c in upto if c.key not in kept and (self._own(c) or old(c))]
        doomed_keys = {c.key for c in doomed}
        named: Set[str] = set()
        dropped: Set[str] = set()
        for c in commits:
            (dropped if c.key in doomed_keys else named).update(
                str(o.get("key")) for o in c.manifest.get("objects", [])
                if isinstance(o, dict))
        for c in doomed:
            self._client.delete_object(self.bucket, c.key)
        rest = []
        for key, o in data.items():
            if key in named or key.endswith("/" + MANIFEST_NAME) and \
                    key.count("/") - self.prefix.count("/") == 1:
                continue  # named, or a version 1 record (kept or removed above)
            if key in dropped or key in self.own_leftovers or \
                    o.last_modified <= horizon:
                rest.append(key)
        if rest:
            self._client.native.delete_objects(self.bucket, rest)
        self.own_leftovers -= set(rest)

