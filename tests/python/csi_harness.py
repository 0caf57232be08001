"""The CSI driver's test harness: its two processes started for real (`python3 -m
s3flash.csi node|mounter`, the s3flash CLI of the build directory, $S3FLASH_BUILD_DIR or
./build, else the package's own), and a kubelet stand-in: a gRPC client over the node's unix
socket making the calls kubelet makes."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]


def s3flash_cli():
    b = Path(os.environ.get("S3FLASH_BUILD_DIR", ROOT / "build")) / "src" / "cli" / "s3flash"
    return str(b) if b.exists() else None


def wait_for(cond, timeout=30, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


# a refused first connect (the socket file exists before the server listens) is retried in
# milliseconds, not after gRPC's default backoff of 1 s growing to 2 minutes
FAST_RECONNECT = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 20),
                  ("grpc.max_reconnect_backoff_ms", 250)]


def _gone(proc, what, log):
    tail = ""
    if log is not None:
        try:
            tail = ": " + Path(log).read_text(errors="replace")[-3000:]
        except OSError:
            pass
    return AssertionError("%s exited (status %s) before it answered%s" % (what, proc.returncode,
                                                                         tail))


def wait_served(target, proc, what, log=None, timeout=60):
    """A channel to the gRPC server at `target` once it answers: the channel is READY
    (channel_ready_future) and Identity.Probe answered. Never the socket file: gRPC makes it
    before it listens, and a client whose first connect is refused backs off for seconds.
    Fails at once, with the log, if the process exits first."""
    from s3flash.csi.proto import Stub, pb
    ch = grpc.insecure_channel(target, options=FAST_RECONNECT)
    ready = grpc.channel_ready_future(ch)
    end = time.monotonic() + timeout
    try:
        while True:
            try:
                ready.result(timeout=0.25)
                break
            except grpc.FutureTimeoutError:
                if proc.poll() is not None:
                    raise _gone(proc, what, log)
                if time.monotonic() > end:
                    raise AssertionError("%s did not answer on %s in %d s" % (what, target,
                                                                              timeout))
        Stub(ch, "Identity").Probe(pb.ProbeRequest(), timeout=timeout)
    except BaseException:
        ready.cancel()
        ch.close()
        raise
    return ch


def wait_mounter(sock, proc, what="the mounter", log=None, timeout=60):
    """Until the mounter at `sock` answers a request ({"op": "list"})."""
    from s3flash.csi import sysmount
    end = time.monotonic() + timeout
    while True:
        try:
            return sysmount.call(str(sock), {"op": "list"}, timeout=timeout)
        except OSError as e:  # not there yet, or not listening yet
            if proc.poll() is not None:
                raise _gone(proc, what, log)
            if time.monotonic() > end:
                raise AssertionError("%s did not answer on %s in %d s: %s" % (what, sock,
                                                                              timeout, e))
        time.sleep(0.02)


def mountinfo():
    with open("/proc/self/mountinfo") as f:
        return [line.split(" - ")[0].split(" ")[4] for line in f]


def is_mount(path):
    return os.path.normpath(str(path)) in mountinfo()


class Driver:
    """node + mounter in `root` (sockets, state dir, logs), and the controller where
    `controller_env` is given (the store's AWS_ENDPOINT_URL: DeleteVolume gets no
    StorageClass parameters)."""

    def __init__(self, root, env=None, node_args=(), mounter_args=(), cgroups=None,
                 controller_env=None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.state = self.root / "state"
        self.csi_sock = self.root / "csi.sock"
        # the mounter's socket in a directory of its own (mode 0700)
        self.mounter_sock = self.root / "mounter-run" / "mounter.sock"
        # {"node": DIR, "mounter": DIR}: each process in a cgroup of its own, as in a
        # container (kill_container kills every process in it, as runc does)
        self.cgroups = dict(cgroups or {})
        self.mounter_args = list(mounter_args)
        self.controller_sock = self.root / "controller.sock"
        self.controller_env = controller_env
        self.controller = self._controller_channel = None
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        cli = s3flash_cli()
        if cli:
            self.env["S3FLASH_CSI_S3FLASH"] = cli
        self.env.update(env or {})
        self.node_args = list(node_args)
        self.node = self.mounter = None
        self._channel = None
        self.logs = []

    def _spawn(self, name, args, env=None):
        log = open(self.root / ("%s.log" % name), "ab")
        if self.root / ("%s.log" % name) not in self.logs:
            self.logs.append(self.root / ("%s.log" % name))
        argv = [sys.executable, "-m", "s3flash.csi", "--log-level", "DEBUG"] + args
        if name in self.cgroups:  # joins its cgroup before it runs
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                    str(Path(self.cgroups[name]) / "cgroup.procs")] + argv
        p = subprocess.Popen(argv, env=env or self.env, stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        log.close()
        return p

    def start_mounter(self):
        if self.mounter_sock.exists():
            self.mounter_sock.unlink()
        self.mounter = self._spawn("mounter", ["mounter", "--socket", str(self.mounter_sock),
                                               "--state-dir", str(self.state)]
                                   + self.mounter_args)
        wait_mounter(self.mounter_sock, self.mounter, log=self.root / "mounter.log")

    def start_node(self):
        if self.csi_sock.exists():
            self.csi_sock.unlink()
        self.node = self._spawn("node", ["node", "--endpoint", "unix://%s" % self.csi_sock,
                                         "--node-id", "test-node", "--mounter-socket",
                                         str(self.mounter_sock), "--state-dir",
                                         str(self.state)] + self.node_args
                                + (["--with-controller"] if self.controller_env is not None
                                   else []))
        if self._channel is not None:
            self._channel.close()
        self._channel = wait_served("unix://%s" % self.csi_sock, self.node, "the node",
                                    log=self.root / "node.log")

    def start_controller(self):
        if self.controller_sock.exists():
            self.controller_sock.unlink()
        self.controller = self._spawn("controller", ["controller", "--endpoint", "unix://%s"
                                                     % self.controller_sock],
                                      env=dict(self.env, **self.controller_env))
        self._controller_channel = wait_served("unix://%s" % self.controller_sock,
                                               self.controller, "the controller",
                                               log=self.root / "controller.log")

    def start(self):
        self.start_mounter()
        self.start_node()
        if self.controller_env is not None:
            self.start_controller()
        return self

    def kill(self, which, sig=signal.SIGKILL):
        p = getattr(self, which)
        p.send_signal(sig)
        p.wait(20)

    def kill_container(self, which):
        """A container restart as runc does it: SIGKILL to every process in `which`'s
        cgroup, until none is left."""
        procs = Path(self.cgroups[which]) / "cgroup.procs"

        def empty():
            pids = [int(x) for x in procs.read_text().split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return not pids
        wait_for(empty, 30, "every process of the %s's cgroup to end" % which)
        getattr(self, which).wait(20)

    @property
    def channel(self):
        if self._channel is None:
            self._channel = wait_served("unix://%s" % self.csi_sock, self.node, "the node",
                                        log=self.root / "node.log")
        return self._channel

    def stub(self, service):
        from s3flash.csi.proto import Stub
        return Stub(self._controller_channel if service == "Controller" else self.channel,
                    service)

    def mounter_call(self, doc):
        from s3flash.csi import sysmount
        return sysmount.call(str(self.mounter_sock), doc)

    def daemons(self):
        """{mount key: pid} of the running s3flash mount daemons of this driver."""
        return {k: v["pid"] for k, v in self.mounter_call({"op": "list"})["mounts"].items()}

    def dump_logs(self):
        for p in self.logs:
            try:
                print("==== %s\n%s" % (p, p.read_text()[-6000:]))
            except OSError:
                pass

    def stop(self):
        for ch in (self._channel, self._controller_channel):
            if ch is not None:
                ch.close()
        for p in (self.controller, self.node, self.mounter):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def cleanup_mounts(root):
    """Lazy-unmount whatever is left under root (a failed test), deepest first."""
    root = os.path.normpath(str(root))
    for m in sorted((m for m in mountinfo() if m.startswith(root + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=20)


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def tokens(token):
    return json.dumps({"sts.amazonaws.com": {"token": token,
                                             "expirationTimestamp": "2099-01-01T00:00:00Z"}})


@contextlib.contextmanager
def running(root, **kw):
    """A started Driver in root; at the end (failed or not) whatever it left mounted under
    root is unmounted and it is stopped. Its logs are printed: pytest shows them only for a
    test that failed."""
    d = Driver(root, **kw)
    try:
        d.start()
        yield d
    finally:
        d.dump_logs()
        cleanup_mounts(root)
        d.stop()
        cleanup_mounts(root)
