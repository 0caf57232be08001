"""`s3flash-csi mounter`: runs one `s3flash mount BUCKET /dev/fd/N` daemon per mount on the
FUSE descriptor the node process hands over (SCM_RIGHTS on --socket), and keeps each pod-level
mount's current credentials in memory for its daemon (served through credential_process:
pod-level and nodePublishSecretRef keys alike, never the daemon's environment).

With --daemon-cgroup each daemon runs in a cgroup of its own outside the mounter container's
(cgroups.py): a restart or upgrade of the mounter's container, which kills every process of
that container's cgroup, ends no mount, and each daemon's memory limit is its volume's.

Only the node process's user may call the socket (SO_PEERCRED), which lives in a directory of
its own (mode 0700), and every request is checked again here (options.check_daemon_request):
the mounter trusts no caller.

The mounter is a child subreaper: a daemon, once its starting parent has exited, is the
mounter's child, found by the S3FLASH_CSI_MOUNT variable in its environment. A record per
mount in STATE/mounter/ (no secrets) lets a restarted mounter re-adopt daemons still running
and report those that are gone (their mounts answer ENOTCONN until unpublished). A mount's
SSE-C key is there (KEY.sse-c-key, 0600) only while its daemon starts: the daemon reads it
(--sse-c-key fileb://PATH) before it serves, so it is never in an argv or an environment."""

import ctypes
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

from . import sysmount
from .cgroups import DaemonCgroups, default_target, headroom, parse_size
from .options import EMPTY_DIR_ROOT, VolumeError, check_daemon_request

log = logging.getLogger("s3flash-csi.mounter")
MARKER = "S3FLASH_CSI_MOUNT"
PR_SET_CHILD_SUBREAPER = 36
# a mount's SSE-C key while its daemon starts (it reads the file before it serves)
SSE_C_SUFFIX = ".sse-c-key"
# a mount key (options.Volume.share_key): it names files and a cgroup
KEY = re.compile(r"^[0-9a-f]{32}$")
# the daemon's start-up line naming its metrics endpoint (--metrics-listen 127.0.0.1:0)
METRICS_LINE = re.compile(r"^s3flash: metrics at http://127\.0\.0\.1:([0-9]{1,5})/metrics$", re.M)
# the mounter's own variables that a daemon may see whatever its credentials (no secrets)
CONFIG_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
              "AWS_CA_BUNDLE", "AWS_MAX_ATTEMPTS", "S3FLASH_FORCE_PATH_STYLE", "LANG", "TZ",
              # a `debug` mount's log level (trace adds its state transitions: SEMANTICS.md)
              "S3FLASH_LOG",
              # the node's proxies (docs/CONFIGURATION.md, "Proxies")
              "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy", "S3FLASH_PROXY_CA_BUNDLE",
              # where a test build connects AWS hosts (ignored by other builds)
              "S3FLASH_TEST_CONNECT_TO")


def volume_env(env):
    """A volume's mountpointEnv variables for its daemon, checked again against Mountpoint's
    allow-list; each also in lower case, which the client reads first (so the node's own
    https_proxy never overrides the volume's)."""
    from .options import USER_ENV
    out = {}
    for k, v in env.items():
        if k not in USER_ENV or not isinstance(v, str) or not USER_ENV[k].fullmatch(v):
            raise ValueError("mountpointEnv.%s is not allowed or not valid: refused" % k)
        out[k] = out[k.lower()] = v
    return out


def find_s3flash():
    """$S3FLASH_CSI_S3FLASH, else the package's own CLI, else `s3flash` on PATH."""
    exe = os.environ.get("S3FLASH_CSI_S3FLASH")
    if exe:
        return exe
    own = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin",
                       "s3flash")
    if os.access(own, os.X_OK):
        return own
    return shutil.which("s3flash") or "s3flash"


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None


def _daemon_pid(key, candidates=None):
    """The running daemon whose environment carries MARKER=key (among `candidates`, else
    every process), or None."""
    want = key.encode()
    for name in (map(str, candidates) if candidates is not None else os.listdir("/proc")):
        if name.isdigit():
            env = _environ(int(name))
            if env and env.get(MARKER.encode()) == want:
                try:
                    with open("/proc/%s/stat" % name) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            continue
                except OSError:
                    continue
                return int(name)
    return None


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def private_dirs(path, depth):
    """Make the last `depth` components of path (a volume's cache: NAME/IDENTITY under the
    cache root) as directories of this user, mode 0700; an existing one must be that too (not
    a symlink, not another user's, not writable by others): None, or why not."""
    parts = path.rstrip("/").split("/")
    base = "/".join(parts[:-depth]) or "/"
    os.makedirs(base, mode=0o755, exist_ok=True)
    for i in range(len(parts) - depth, len(parts)):
        p = "/".join(parts[:i + 1])
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return ("cache directory %s is not a private directory of this driver (a symlink, "
                    "another owner, or open to others): refused" % p)
    return None


class Mount:
    def __init__(self, key, doc):
        self.key = key
        self.doc = doc          # the record: source, bucket, flags, pid (no secrets)
        self.pid = doc.get("pid")
        self.creds = None       # pod-level: {"values": {...}, "expiration": ...}
        self.ended = threading.Event()


class Mounter:
    def __init__(self, sock_path, state_dir, s3flash=None, cache_root=None, daemon_cgroup=None,
                 daemons_limit=None, node_uid=None):
        self.sock_path = sock_path
        self.dir = os.path.join(state_dir, "mounter")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.s3flash = s3flash or find_s3flash()
        self.cache_root = cache_root or os.path.join(state_dir, "cache")
        self.cache_roots = {os.path.normpath(self.cache_root), os.path.realpath(self.cache_root)}
        self.cgroups = DaemonCgroups(daemon_cgroup, daemons_limit) if daemon_cgroup else None
        # who may call: the node process (and the daemons' credential_process), by uid
        self.uids = {os.geteuid()} | ({node_uid} if node_uid is not None else set())
        self.lock = threading.Lock()
        self.mounts = {}
        self.lost = {}

    # ---- records ----
    def _record_path(self, key):
        return os.path.join(self.dir, key + ".json")

    def _save(self, m):
        tmp = self._record_path(m.key) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(m.doc, f)
        os.replace(tmp, self._record_path(m.key))

    def _find(self, key):
        return _daemon_pid(key, self.cgroups.pids(key) if self.cgroups else None)

    def _drop(self, m):
        for p in (self._record_path(m.key), self._record_path(m.key) + ".config",
                  os.path.join(self.dir, m.key + SSE_C_SUFFIX)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        if m.doc.get("empty_dir"):  # cache: emptyDir ends with its daemon
            shutil.rmtree(m.doc["empty_dir"], ignore_errors=True)
        if self.cgroups:
            self.cgroups.remove(m.key)

    def readopt(self):
        """Take over the daemons of the records in the state dir that are still running;
        log (and list as lost) those that are not."""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(SSE_C_SUFFIX):  # a start this mounter did not finish
                os.unlink(os.path.join(self.dir, name))
            if not name.endswith(".json"):
                continue
            key = name[:-5]
            try:
                with open(os.path.join(self.dir, name)) as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                log.error("mount record %s unreadable (%s): dropped", name, e)
                continue
            m = Mount(key, doc)
            pid = self._find(key)
            if pid:
                m.pid = doc["pid"] = pid
                self.mounts[key] = m
                self._watch(m)
                log.info("re-adopted the daemon of s3://%s (pid %d, mount %s)",
                         doc.get("source"), pid, key)
            else:
                self.lost[key] = doc
                self._drop(m)
                log.error("the daemon of s3://%s (mount %s, pid %s) is gone: its targets "
                          "answer ENOTCONN until kubelet unpublishes them",
                          doc.get("source"), key, doc.get("pid"))

    # ---- daemons ----
    def _watch(self, m):
        def run():
            try:
                pfd = os.pidfd_open(m.pid)
            except OSError:
                pfd = None
            if pfd is not None:
                select.select([pfd], [], [])
                os.close(pfd)
            status = None
            try:
                _, status = os.waitpid(m.pid, 0)
            except ChildProcessError:
                pass
            if self.cgroups and self.cgroups.oom_kills(m.key):
                log.error("the daemon of s3://%s (pid %d, mount %s) was killed by the OOM "
                          "killer: it reached its cgroup's memory limit (%s bytes; raise the "
                          "volume's memory-target). Its targets answer ENOTCONN until "
                          "unpublished; the other volumes are not affected",
                          m.doc.get("source"), m.pid, m.key, self.cgroups.limit(m.key))
            with self.lock:
                if self.mounts.get(m.key) is m:
                    del self.mounts[m.key]
                    self._drop(m)
            log.info("the daemon of s3://%s (pid %d) ended%s", m.doc.get("source"), m.pid,
                     "" if status is None else " (status %d)" % status)
            m.ended.set()
        threading.Thread(target=run, name="watch-%d" % m.pid, daemon=True).start()

    def _env(self, key, cred):
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": "/",
               MARKER: key}
        for k in CONFIG_ENV:
            if k in os.environ:
                env[k] = os.environ[k]
        kind = cred.get("kind", "driver")
        if kind == "driver":
            for k, v in os.environ.items():
                if k.startswith("AWS_"):
                    env[k] = v
        else:
            # not the node's AWS files: names that do not exist
            env["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(self.dir, "no-credentials-file")
            env["AWS_CONFIG_FILE"] = os.path.join(self.dir, "no-config-file")
        if kind in ("static", "pod"):
            # credential_process: asks this mounter for the mount's current credentials (the
            # keys are never in the daemon's environment, /proc/PID/environ)
            cfg = self._record_path(key) + ".config"
            cmd = "%s -m s3flash.csi credentials --socket %s --mount %s" % (
                sys.executable, self.sock_path, key)
            with open(cfg + ".tmp", "w") as f:
                f.write("[default]\ncredential_process = %s\n" % cmd)
            os.replace(cfg + ".tmp", cfg)
            env["AWS_CONFIG_FILE"] = cfg
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        return env

    def _key_file(self, key, sse_c_key):
        """The SSE-C key (base64) in a file of this mounter's private directory, mode 0600,
        for the daemon's --sse-c-key fileb://PATH: never in its argv or environment."""
        path = os.path.join(self.dir, key + SSE_C_SUFFIX)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, sse_c_key.encode())
        finally:
            os.close(fd)
        return path

    def _check(self, req):
        """The request as the mounter checks it itself: None, or why it is refused."""
        key = req.get("key")
        if not isinstance(key, str) or not KEY.match(key):
            return "mount key %r is not a key the node makes" % (key,)
        try:
            check_daemon_request(req.get("source"), req.get("flags"))
        except VolumeError as e:
            return e.message
        cache = req.get("cache") or ""
        if cache:
            ok = isinstance(cache, str) and os.path.isabs(cache) and any(
                len(r.split("/")) == 2 and not r.startswith("..")
                for r in (os.path.relpath(os.path.normpath(cache), root)
                          for root in self.cache_roots))
            if not ok:
                return ("cache %r is not NAME/IDENTITY under the cache root %s"
                        % (cache, self.cache_root))
        # an emptyDir cache is wiped at start and end: only the mount's own directory,
        # never a named cache another volume keeps
        if req.get("empty_dir") and not any(
                os.path.normpath(cache) == os.path.join(root, EMPTY_DIR_ROOT, key)
                for root in self.cache_roots):
            return ("an emptyDir cache is %s, not %r"
                    % (os.path.join(self.cache_root, EMPTY_DIR_ROOT, key), cache))
        cred = req.get("credentials") or {"kind": "driver"}
        if cred.get("kind") not in ("driver", "static", "pod") or (
                cred["kind"] != "driver" and not isinstance(cred.get("values"), dict)):
            return "credentials of kind %r are not driver, static or pod" % cred.get("kind")
        return None

    def _memory(self, key, flags):
        """The daemon's memory target (its volume's memory-target, else the mount's default
        share of what the daemons may use) and its cgroup's limit: (target, limit) or an
        error. The flags get the target (the daemon's own default would be an eighth of its
        cgroup's limit, not of the node's share)."""
        avail = self.cgroups.available()
        if "--memory-target" in flags:
            target = parse_size(flags[flags.index("--memory-target") + 1])
        else:
            target = default_target(avail)
            flags += ["--memory-target", "%dM" % (target >> 20)]
        if target + headroom(target) > avail:
            return None, ("memory-target %d MiB (plus %d MiB for the process) does not fit "
                          "what the daemons may use (%d MiB, %s): lower the volume's "
                          "memory-target or raise the limit"
                          % (target >> 20, headroom(target) >> 20, avail >> 20,
                             self.cgroups.root))
        return target, target + headroom(target)

    def start(self, req, fd):
        why = self._check(req)
        if why:
            os.close(fd)
            log.warning("mount request refused: %s", why)
            return {"ok": False, "error": "refused by the mounter: " + why}
        key = req["key"]
        with self.lock:
            m = self.mounts.get(key)
            if m and not m.ended.is_set():
                return {"ok": False, "error": "mount %s already has a daemon (pid %d)"
                        % (key, m.pid)}
        cred = req.get("credentials") or {"kind": "driver"}
        flags = list(req.get("flags", []))
        env = self._env(key, cred)
        try:
            env.update(volume_env(req.get("env") or {}))
        except ValueError as e:
            os.close(fd)
            return {"ok": False, "error": str(e)}
        empty_dir = req.get("cache") if req.get("empty_dir") else None
        if req.get("cache"):
            if empty_dir:  # cache: emptyDir: the daemon's own, starting empty
                shutil.rmtree(empty_dir, ignore_errors=True)
            err = private_dirs(req["cache"], depth=2)
            if err:
                os.close(fd)
                return {"ok": False, "error": err}
            flags += ["--cache", req["cache"]]
        key_file = None
        if req.get("sse_c_key"):  # the node's flags have --sse-c AES256
            try:
                key_file = self._key_file(key, req["sse_c_key"])
            except OSError as e:
                os.close(fd)
                return {"ok": False, "error": "the SSE-C key file of mount %s: %s"
                        % (key, e.strerror)}
            flags += ["--sse-c-key", "fileb://" + key_file]
        procs = None
        if self.cgroups:
            target, limit = self._memory(key, flags)
            if target is None:
                os.close(fd)
                if key_file:
                    os.unlink(key_file)
                return {"ok": False, "error": limit}
            try:
                procs = self.cgroups.create(key, limit)
            except OSError as e:
                os.close(fd)
                if key_file:
                    os.unlink(key_file)
                return {"ok": False, "error": "the cgroup of mount %s (%s): %s"
                        % (key, self.cgroups.leaf(key), e)}
        # the daemon's warnings (failed requests with their request ids) go to the
        # mounter's stderr, the container's log: a descriptor of its own for --log-file
        logfd = os.dup(2)
        if "--no-log" not in flags:
            flags += ["--log-file", "/dev/fd/%d" % logfd]
        # its metrics on a loopback port of its own, which the node's /metrics scrapes
        # (csi/metrics.py): not in the record's flags, the port is learnt below
        argv = [self.s3flash, "mount", req["source"], "/dev/fd/%d" % fd] + flags + [
            "--metrics-listen", "127.0.0.1:0"]
        m = Mount(key, {"key": key, "source": req["source"], "flags": flags,
                        "target": req.get("target", ""), "started": time.time(),
                        "empty_dir": empty_dir})
        if cred.get("kind") in ("pod", "static"):
            m.creds = {"values": cred["values"], "expiration": cred.get("expiration", "")}
            with self.lock:
                self.mounts[key] = m  # credential_process runs before the daemon is found
        if procs:  # it joins its own cgroup before s3flash runs: nothing is charged elsewhere
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs] + argv
        try:
            p = subprocess.run(argv, env=env, pass_fds=(fd, logfd),
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                               start_new_session=True)
            out = (p.stderr + p.stdout).decode("utf-8", "replace").strip()
        except subprocess.TimeoutExpired:
            out, p = "s3flash mount did not answer in 120 s", None
        finally:
            os.close(fd)
            os.close(logfd)
            if key_file:  # read by now (or never to be): not kept on disk
                os.unlink(key_file)
        pid = self._find(key) if p is not None and p.returncode == 0 else None
        if not pid:
            with self.lock:
                if self.mounts.get(key) is m:
                    del self.mounts[key]
            self._drop(m)
            log.warning("s3flash mount s3://%s failed: %s", req["source"], out)
            return {"ok": False, "error": out or "s3flash mount exited with status %s"
                    % (p.returncode if p else "?")}
        m.pid = m.doc["pid"] = pid
        port = METRICS_LINE.search(out)
        m.doc["metrics_port"] = int(port.group(1)) if port else None
        if not port:
            log.warning("the daemon of s3://%s (pid %d) named no metrics port: its volume's "
                        "metrics are not served (its output: %s)", req["source"], pid, out)
        with self.lock:
            self.mounts[key] = m
            self.lost.pop(key, None)
            self._save(m)
        self._watch(m)
        log.info("s3://%s served by pid %d (mount %s)", req["source"], pid, key)
        return {"ok": True, "pid": pid}

    def release(self, key, timeout):
        """After the node unmounted the last use of a mount, its daemon ends by itself;
        wait for that, then SIGTERM."""
        with self.lock:
            m = self.mounts.get(key)
            self.lost.pop(key, None)
        if not m:
            return {"ok": True}
        if not m.ended.wait(timeout):
            log.warning("the daemon of s3://%s (pid %d) still runs after its unmount: SIGTERM",
                        m.doc.get("source"), m.pid)
            try:
                os.kill(m.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            m.ended.wait(10)
        return {"ok": True}

    def handle(self, conn):
        try:
            req, fds = sysmount.recv(conn)
            if req is None:
                return
            op = req.get("op")
            pid, uid, _gid = sysmount.peer_cred(conn)
            if uid not in self.uids:
                for fd in fds:
                    os.close(fd)
                log.warning("%r from pid %d (uid %d) refused: only uid %s may call the mounter",
                            op, pid, uid, ", ".join(map(str, sorted(self.uids))))
                sysmount.send(conn, {"ok": False, "error": "refused: uid %d may not call the "
                                     "mounter" % uid})
                return
            if not isinstance(req, dict):
                reply = {"ok": False, "error": "a request is a JSON object"}
            elif op == "mount":
                if len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    reply = {"ok": False, "error": "mount needs one /dev/fuse descriptor"}
                else:
                    reply = self.start(req, fds[0])
            else:
                for fd in fds:
                    os.close(fd)
                reply = self.simple(op, req, conn)
            sysmount.send(conn, reply)
        except Exception as e:  # one bad request never ends the mounter
            log.exception("request failed")
            try:
                sysmount.send(conn, {"ok": False, "error": "mounter: %s" % e})
            except OSError:
                pass
        finally:
            conn.close()

    def simple(self, op, req, conn):
        if op == "list":
            with self.lock:
                return {"ok": True, "mounts": {k: {"pid": m.pid, "source": m.doc.get("source"),
                                                   "metrics_port": m.doc.get("metrics_port"),
                                                   "cgroup": self.cgroups.leaf(k)
                                                   if self.cgroups else None}
                                               for k, m in self.mounts.items()},
                        "lost": self.lost}
        if op == "release":
            return self.release(req["key"], float(req.get("timeout", 10)))
        if op == "update_credentials":
            with self.lock:
                m = self.mounts.get(req["key"])
                if not m:
                    return {"ok": False, "error": "no mount %s" % req["key"]}
                m.creds = {"values": req["credentials"]["values"],
                           "expiration": req["credentials"].get("expiration", "")}
            return {"ok": True}
        if op == "credentials":
            return self.credentials(req.get("key", ""), sysmount.peer_pid(conn))
        return {"ok": False, "error": "unknown request %r" % op}

    def credentials(self, key, peer):
        """For credential_process: only a process under the mount's own daemon gets them."""
        with self.lock:
            m = self.mounts.get(key)
        if not m or not m.creds:
            return {"ok": False, "error": "no credentials for mount %s" % key}
        # the asker descends from the mount's daemon (which a mounter before this one may
        # have started), or from a process this mounter started for it (the daemon's parent
        # while it starts), that carries the mount's marker
        pid, ok = peer, False
        for _ in range(5):
            pid = _ppid(pid)
            if pid <= 1:
                break
            env = _environ(pid)
            if env and env.get(MARKER.encode()) == key.encode() and (
                    pid == m.pid or _ppid(pid) == os.getpid()):
                ok = True
                break
        if not ok:
            log.warning("credentials of mount %s asked by pid %d, not its daemon: refused",
                        key, peer)
            return {"ok": False, "error": "refused: not the mount's daemon"}
        return {"ok": True, "credentials": m.creds}

    def serve(self, stop=None):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.readopt()
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass
        run = os.path.dirname(os.path.abspath(self.sock_path))
        try:  # a hostPath kubelet made (0755), holding nothing else: closed to others
            st = os.lstat(run)
            if (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                    and set(os.listdir(run)) <= {os.path.basename(self.sock_path)}):
                os.chmod(run, 0o700)
        except FileNotFoundError:
            pass
        err = private_dirs(run, depth=1)
        if err:
            raise OSError("the mounter socket's directory: " + err)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o077)
        srv.bind(self.sock_path)
        os.umask(old)
        srv.listen(64)
        log.info("mounter listening on %s (s3flash: %s)", self.sock_path, self.s3flash)
        srv.settimeout(0.5)
        while stop is None or not stop.is_set():
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            conn.settimeout(None)
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        srv.close()


def enter_host_cgroup_ns():
    """setns(2) into PID 1's cgroup namespace (the host's, with hostPID): under cgroup v2 a
    process may move another into a cgroup only inside its own cgroup namespace, and the
    daemons' cgroups are outside the container's."""
    CLONE_NEWCGROUP = 0x02000000
    fd = os.open("/proc/1/ns/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWCGROUP) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns into the host's cgroup namespace (needs hostPID and "
                          "CAP_SYS_ADMIN): %s" % os.strerror(e))
    finally:
        os.close(fd)


def credentials_main(sock, key):
    """credential_process: print the mount's credentials as the AWS CLI expects them."""
    r = sysmount.call(sock, {"op": "credentials", "key": key}, timeout=30)
    if not r.get("ok"):
        sys.stderr.write("s3flash-csi credentials: %s\n" % r.get("error"))
        return 1
    v = r["credentials"]["values"]
    out = {"Version": 1, "AccessKeyId": v["AWS_ACCESS_KEY_ID"],
           "SecretAccessKey": v["AWS_SECRET_ACCESS_KEY"]}
    if v.get("AWS_SESSION_TOKEN"):
        out["SessionToken"] = v["AWS_SESSION_TOKEN"]
    if r["credentials"].get("expiration"):
        out["Expiration"] = r["credentials"]["expiration"]
    sys.stdout.write(json.dumps(out))
    return 0
