"""`s3flash-csi node`: the CSI Identity and Node services on kubelet's socket.

NodePublishVolume: validate (options.py), resolve the credentials (creds.py), then either
reuse the mount of a publish with the same share key (same volume, flags, credentials) or
make one: mount a fresh /dev/fuse connection on STATE/node/sources/KEY and hand the
descriptor to the mounter, which starts the daemon. The target is a bind mount of that
source (read-only when the publish is). Records in STATE/node/targets/ (no secrets) make the
process stateless: a restarted node unpublishes what its predecessor published.

Locks: one per target path (a publish or unpublish of it) and one per share key (the mount
of a volume with its flags and credentials, held while it is made or released); none for the
whole node. A publish or unpublish that finds its target's or its mount's lock taken answers
ABORTED (the spec's "operation pending") rather than wait. STS calls and the checks of a mount's liveness wait under a target's lock only,
`s3flash mount`'s start-up under its key's: a stalled endpoint holds up its own volume, never
another. statfs/stat of a FUSE mount run in a thread with a deadline (bounded_stat): a hung
daemon makes NodeGetVolumeStats answer UNAVAILABLE, not hang."""

import concurrent.futures
import contextlib

import errno
import hashlib
import json
import logging
import os
import secrets as pysecrets
import threading

import grpc

from . import PLUGIN_NAME, creds, sysmount
from .options import EMPTY_DIR_ROOT, VolumeError, Volume, invalid
from .proto import pb

log = logging.getLogger("s3flash-csi.node")
VERSION = "0.1.0"
# how long a stat or statfs of a FUSE mount may take (its daemon answers them from memory)
STAT_DEADLINE = 10.0


class NamedLocks:
    """A reentrant lock per name, made on first use and dropped when nobody holds or awaits
    it."""

    def __init__(self):
        self._mu = threading.Lock()
        self._locks = {}  # name -> [RLock, holders and waiters]

    @contextlib.contextmanager
    def hold(self, name, busy=None):
        """Held for the block. With `busy` (a message), a lock another thread holds is not
        waited for: ABORTED, the spec's "operation pending for volume" (the CO retries
        later; a stalled call and its retries never pile up on the gRPC workers)."""
        with self._mu:
            entry = self._locks.setdefault(name, [threading.RLock(), 0])
            entry[1] += 1
        try:
            if not entry[0].acquire(blocking=busy is None):
                raise VolumeError(grpc.StatusCode.ABORTED, busy)
            try:
                yield
            finally:
                entry[0].release()
        finally:
            with self._mu:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[name]


class BoundedStat:
    """fn(path) (os.stat, os.statvfs) of a FUSE mount in a thread of its own, waited for
    `deadline` seconds: a hung daemon costs its caller that long, and one stuck thread per
    path and function (a later caller waits on the same call, no second thread)."""

    def __init__(self):
        self._mu = threading.Lock()
        self._pending = {}  # (fn, path) -> Future

    def __call__(self, fn, path, deadline=STAT_DEADLINE):
        with self._mu:
            fut = self._pending.get((fn, path))
            if fut is None:
                fut = self._pending[(fn, path)] = concurrent.futures.Future()
                threading.Thread(target=self._run, args=(fn, path, fut), daemon=True,
                                 name="stat %s" % path).start()
        try:
            return fut.result(timeout=deadline)
        except concurrent.futures.TimeoutError:
            raise VolumeError(grpc.StatusCode.UNAVAILABLE,
                              "%s of %s did not answer in %g s: its s3flash mount daemon is "
                              "hung or stopped" % (fn.__name__, path, deadline)) from None

    def _run(self, fn, path, fut):
        try:
            fut.set_result(fn(path))
        except BaseException as e:
            fut.set_exception(e)
        finally:
            with self._mu:
                if self._pending.get((fn, path)) is fut:
                    del self._pending[(fn, path)]


def error_code(text):
    """The gRPC code for a daemon's start-up failure, from S3's error code in its text."""
    for needle, code in (("NoSuchBucket", grpc.StatusCode.NOT_FOUND),
                         ("AccessDenied", grpc.StatusCode.PERMISSION_DENIED),
                         ("InvalidAccessKeyId", grpc.StatusCode.UNAUTHENTICATED),
                         ("SignatureDoesNotMatch", grpc.StatusCode.UNAUTHENTICATED),
                         ("ExpiredToken", grpc.StatusCode.UNAUTHENTICATED),
                         ("InvalidToken", grpc.StatusCode.UNAUTHENTICATED),
                         ("credentials", grpc.StatusCode.UNAUTHENTICATED)):
        if needle in text:
            return code
    return grpc.StatusCode.INTERNAL


class Identity:
    def __init__(self, controller=False):
        self.controller = controller

    def GetPluginInfo(self, req, ctx):
        return pb.GetPluginInfoResponse(name=PLUGIN_NAME, vendor_version=VERSION)

    def GetPluginCapabilities(self, req, ctx):
        caps = []
        if self.controller:
            caps.append(pb.PluginCapability(service=pb.PluginCapability.Service(
                type=pb.PluginCapability.Service.CONTROLLER_SERVICE)))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    def Probe(self, req, ctx):
        r = pb.ProbeResponse()
        r.ready.value = True
        return r


def _canonical(path):
    """path with its parent's symlinks resolved (the last component may not exist yet, or be
    a dead mount that must not be stat'ed)."""
    path = os.path.normpath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _guard(fn):
    """Run an RPC: a VolumeError becomes its gRPC status, anything else INTERNAL."""
    def wrapper(self, req, ctx):
        try:
            return fn(self, req, ctx)
        except VolumeError as e:
            log.warning("%s: %s: %s", fn.__name__, e.code.name, e.message)
            ctx.abort(e.code, e.message)
        except OSError as e:
            log.exception("%s failed", fn.__name__)
            ctx.abort(grpc.StatusCode.INTERNAL, "%s: %s" % (fn.__name__, e))
    wrapper.__name__ = fn.__name__
    return wrapper


class Node:
    def __init__(self, node_id, mounter_socket, state_dir, cache_root=None, sts_endpoint=None,
                 max_volumes=0, token_audience=creds.STS_AUDIENCE):
        self.node_id = node_id
        self.mounter = mounter_socket
        # as /proc/self/mountinfo spells paths: symlinks resolved (/var/lib/kubelet may be one)
        self.dir = os.path.join(os.path.realpath(state_dir), "node")
        self.targets_dir = os.path.join(self.dir, "targets")
        self.sources_dir = os.path.join(self.dir, "sources")
        for d in (self.dir, self.targets_dir, self.sources_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.cache_root = cache_root or os.path.join(state_dir, "cache")
        self.sts_endpoint = sts_endpoint or os.environ.get("AWS_ENDPOINT_URL_STS")
        self.max_volumes = max_volumes
        self.audience = token_audience
        self.kube = creds.Kube()
        self.target_locks = NamedLocks()  # a publish or unpublish of a target path
        self.key_locks = NamedLocks()     # a share key's mount made, used or released
        self.stat = BoundedStat()
        self.salt = self._salt()
        self._sweep()

    def _sweep(self):
        """Mounts of a predecessor that no record names (it died between mounting and
        recording a publish): unmounted, so that their daemons end once unused."""
        for key in os.listdir(self.sources_dir):
            if not any(r["key"] == key for r in self._records()):
                log.warning("mount %s is not published anywhere (an interrupted publish): "
                            "unmounted; its daemon ends when its last target is", key)
                # not stopped: a target it was bound to before the crash may be in use
                self._release_if_unused(key, stop_daemon=False)

    def _salt(self):
        """The node's key for credential fingerprints (kept so a restarted node shares)."""
        p = os.path.join(self.dir, "salt")
        try:
            with open(p, "rb") as f:
                return f.read()
        except FileNotFoundError:
            fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, pysecrets.token_bytes(32))
            os.close(fd)
            os.replace(p + ".tmp", p)
            with open(p, "rb") as f:
                return f.read()

    # ---- records ----
    def _rec_path(self, target):
        return os.path.join(self.targets_dir,
                            hashlib.sha256(target.encode()).hexdigest()[:32] + ".json")

    def _load(self, target):
        try:
            with open(self._rec_path(target)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def _records(self):
        out = []
        for n in os.listdir(self.targets_dir):
            if n.endswith(".json"):
                try:
                    with open(os.path.join(self.targets_dir, n)) as f:
                        out.append(json.load(f))
                except (OSError, ValueError):
                    pass
        return out

    def _store(self, rec):
        p = self._rec_path(rec["target"])
        with open(p + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(p + ".tmp", p)

    # ---- Node service ----
    def NodeGetInfo(self, req, ctx):
        return pb.NodeGetInfoResponse(node_id=self.node_id,
                                      max_volumes_per_node=self.max_volumes)

    def NodeGetCapabilities(self, req, ctx):
        T = pb.NodeServiceCapability.RPC
        return pb.NodeGetCapabilitiesResponse(capabilities=[
            pb.NodeServiceCapability(rpc=T(type=T.GET_VOLUME_STATS))])

    @_guard
    def NodeGetVolumeStats(self, req, ctx):
        if not req.volume_id or not req.volume_path:
            raise invalid("volume_id and volume_path are required")
        rec = self._load(_canonical(req.volume_path))
        if not rec or rec["volume_id"] != req.volume_id:
            raise VolumeError(grpc.StatusCode.NOT_FOUND, "volume %s is not published at %s"
                              % (req.volume_id, req.volume_path))
        st = self.stat(os.statvfs, req.volume_path)
        U = pb.VolumeUsage
        return pb.NodeGetVolumeStatsResponse(usage=[
            U(unit=U.BYTES, total=st.f_blocks * st.f_frsize,
              available=st.f_bavail * st.f_frsize,
              used=(st.f_blocks - st.f_bfree) * st.f_frsize),
            U(unit=U.INODES, total=st.f_files, available=st.f_favail,
              used=st.f_files - st.f_ffree)])

    @_guard
    def NodePublishVolume(self, req, ctx):
        if not req.volume_id:
            raise invalid("volume_id is missing")
        target = req.target_path
        if not target:
            raise invalid("target_path is missing")
        if not os.path.isabs(target):
            raise invalid("target_path %r is not an absolute path" % target)
        target = _canonical(target)
        vol = Volume(req, self.cache_root)
        # the secrets are not part of "the same arguments": kubelet's republish (the
        # CSIDriver's requiresRepublish) carries a rotated Secret, which the running daemon
        # keeps using until the pod is mounted again
        digest = vol.digest(req.volume_id, target)
        with self.target_locks.hold(target, "a publish or unpublish of %s is in progress"
                                    % target):
            rec = self._load(target)
            if rec and sysmount.is_mounted(target):
                if rec["digest"] != digest:
                    raise VolumeError(grpc.StatusCode.ALREADY_EXISTS,
                                      "%s is published already with other arguments (volume "
                                      "%s)" % (target, rec["volume_id"]))
                try:
                    self.stat(os.stat, target)
                except OSError as e:  # ENOTCONN: its daemon ended (the mounter restarted)
                    raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                                      "%s is published but its s3flash mount daemon is gone "
                                      "(%s): the pod must be restarted to mount it again"
                                      % (target, e.strerror))
                # requiresRepublish: fresh token (or Secret), fresh credentials; a mounter
                # that restarted gets them back this way (they are in its memory only)
                if vol.auth == "pod" or "key_id" in req.secrets:
                    c = creds.resolve(vol, req.secrets, self.salt, self.sts_endpoint, self.kube,
                              self.audience)
                    self._call({"op": "update_credentials", "key": rec["key"],
                                "credentials": c.message()})
                return pb.NodePublishVolumeResponse()
            if rec:  # a record without its mount: left by a failure, start again
                self._forget(rec)
            if os.path.lexists(target) and not os.path.isdir(target):
                raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                                  "target_path %s exists and is not a directory" % target)
            if sysmount.is_mounted(target):
                raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                                  "target_path %s is a mount point not made by this driver"
                                  % target)
            c = creds.resolve(vol, req.secrets, self.salt, self.sts_endpoint, self.kube,
                              self.audience)
            key = vol.share_key(req.volume_id, c.identity)
            # the mount made, bound and recorded as one
            with self.key_locks.hold(key, "the mount of volume %s with these options and "
                                     "credentials is being made or released"
                                     % req.volume_id):
                source = self._source(vol, key, c, target)
                made = not os.path.exists(target)
                os.makedirs(target, mode=0o750, exist_ok=True)
                try:
                    sysmount.bind(source, target, vol.read_only)
                except OSError:
                    if made:
                        os.rmdir(target)
                    self._release_if_unused(key)
                    raise
                self._store({"target": target, "volume_id": req.volume_id, "key": key,
                             "digest": digest, "source": vol.source,
                             "read_only": vol.read_only, "made_target": made})
            log.info("published %s (s3://%s, mount %s) at %s%s", req.volume_id, vol.source,
                     key, target, " read-only" if vol.read_only else "")
            return pb.NodePublishVolumeResponse()

    def _call(self, doc, fds=()):
        try:
            r = sysmount.call(self.mounter, doc, fds)
        except OSError as e:
            raise VolumeError(grpc.StatusCode.UNAVAILABLE,
                              "the mounter (%s) did not answer: %s" % (self.mounter, e))
        if not r.get("ok"):
            raise VolumeError(error_code(r.get("error", "")), r.get("error", "mounter failed"))
        return r

    def _source(self, vol, key, c, target):
        """The mount of share key `key`, made now unless it is up."""
        src = os.path.join(self.sources_dir, key)
        if sysmount.is_mounted(src):
            try:
                self.stat(os.stat, src)
                return src
            except OSError as e:  # its daemon is gone (ENOTCONN): mount a fresh one
                log.warning("mount %s is dead (%s): mounting again", key, e)
                sysmount.umount(src, detach=True)
        os.makedirs(src, mode=0o755, exist_ok=True)
        allow_other = "allow-other" in vol.flags
        fd = sysmount.fuse_mount(src, "s3flash:" + vol.source, vol.read_only, allow_other)
        try:
            cache = ""
            if vol.empty_dir:  # the daemon's own, made empty and removed with it
                cache = os.path.join(vol.cache_root, EMPTY_DIR_ROOT, key)
            elif vol.cache_name:  # one directory per credentials: blocks never cross identities
                cache = os.path.join(vol.cache_root, vol.cache_name,
                                     hashlib.sha256(c.identity.encode()).hexdigest()[:16])
            doc = {"op": "mount", "key": key, "source": vol.source,
                   "flags": vol.daemon_flags, "cache": cache, "target": target,
                   "credentials": c.message(), "empty_dir": vol.empty_dir, "env": vol.env}
            if c.sse_c_key:
                doc["sse_c_key"] = c.sse_c_key
            self._call(doc, [fd])
        except BaseException:
            try:
                sysmount.umount(src, detach=True)
                os.rmdir(src)
            except OSError:
                pass
            raise
        finally:
            os.close(fd)
        if not sysmount.raise_read_ahead(src):
            log.info("read-ahead of %s left at the kernel's default (sysfs not writable)", src)
        return src

    def metrics_mounts(self):
        """For the node's /metrics (csi/metrics.py): each live daemon's labels (its volume's
        id and its share key, nothing of the publish's secrets) and its metrics port."""
        r = sysmount.call(self.mounter, {"op": "list"}, timeout=10)
        if not r.get("ok"):
            raise OSError(r.get("error", "the mounter refused to list its mounts"))
        volume = {rec["key"]: rec["volume_id"] for rec in self._records()}
        return [({"volume_id": volume.get(k, ""), "mount": k}, m.get("metrics_port"))
                for k, m in sorted(r.get("mounts", {}).items())]

    def _release_if_unused(self, key, stop_daemon=True):
        with self.key_locks.hold(key):
            self._release_locked(key, stop_daemon)

    def _release_locked(self, key, stop_daemon):
        if any(r["key"] == key for r in self._records()):
            return
        src = os.path.join(self.sources_dir, key)
        if sysmount.is_mounted(src):
            try:
                sysmount.umount(src)
            except OSError:
                sysmount.umount(src, detach=True)
        try:
            os.rmdir(src)
        except OSError:
            pass
        if not stop_daemon:
            return
        try:
            self._call({"op": "release", "key": key, "timeout": 10})
        except VolumeError as e:
            log.warning("release of mount %s: %s", key, e.message)

    def _forget(self, rec):
        try:
            os.unlink(self._rec_path(rec["target"]))
        except FileNotFoundError:
            pass
        self._release_if_unused(rec["key"])

    @_guard
    def NodeUnpublishVolume(self, req, ctx):
        if not req.volume_id:
            raise invalid("volume_id is missing")
        if not req.target_path:
            raise invalid("target_path is missing")
        target = _canonical(req.target_path)
        with self.target_locks.hold(target, "a publish or unpublish of %s is in progress"
                                    % target):
            rec = self._load(target)
            while sysmount.is_mounted(target):
                if not rec and not any(m[0] == target and m[1] == "fuse.s3flash"
                                       for m in sysmount.mounts()):
                    raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                                      "%s is a mount point this driver did not make" % target)
                try:
                    sysmount.umount(target)
                except OSError as e:
                    if e.errno not in (errno.EBUSY, errno.ENOTCONN, errno.EIO):
                        raise
                    sysmount.umount(target, detach=True)
            if os.path.isdir(target) and (rec is None or rec.get("made_target", True)):
                try:
                    os.rmdir(target)
                except OSError as e:
                    log.info("target %s left in place: %s", target, e)
            if rec:
                self._forget(rec)
                log.info("unpublished %s from %s", rec["volume_id"], target)
        return pb.NodeUnpublishVolumeResponse()
