"""Starting and stopping `s3flash mount` from the tests, the model runner and the benchmark.

    m = Mount(cli_path, endpoint, access_key, secret_key, "bucket/prefix/", "/tmp/dir",
              ["--allow-delete"])
    m.start()            # --foreground child of ours; returns once the kernel shows the mount
    ... use m.dir ...
    m.stop()             # fusermount3 -u, then wait for the daemon (SIGKILL after a timeout)
    m.peak_rss_kib()     # VmHWM of the daemon while it runs

The daemon runs in the foreground as our child, so that its pid is ours to signal (the
SIGKILL test) and to read /proc/PID/status from (the benchmark's peak RSS). Mounting needs
root (or a user allowed to use /dev/fuse) and fusermount3.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def is_mounted(path):
    """Whether `path` is a mount point in this mount namespace (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mp = fields[4].replace("\\040", " ")
            if mp == path:
                return True
    return False


def force_unmount(path):
    """Lazy unmount of a (possibly dead) FUSE mount; quiet when nothing is mounted."""
    subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True, timeout=30)


def mount_supported():
    """None when FUSE mounts can be made here, else why not (for pytest.skip)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian package fuse3)"
    if os.geteuid() != 0:
        return "FUSE mount tests run as root"
    return None


class MountError(Exception):
    pass


class Mount:
    def __init__(self, cli, endpoint, access_key, secret_key, source, mountdir, options=(),
                 region="us-east-1", log_path=None, env=None):
        self.cli = str(cli)
        self.endpoint = endpoint
        self.access_key = access_key
        self.secret_key = secret_key
        self.source = source
        self.dir = str(mountdir)
        self.options = list(options)
        self.region = region
        self.log_path = log_path
        self.extra_env = dict(env or {})
        self.proc = None
        self._log = None
        self.sigterm_needed = None    # the threads of a daemon that outlived its unmount

    def argv(self):
        return [self.cli, "--endpoint-url", self.endpoint, "--force-path-style", "mount",
                "--foreground", *self.options, self.source, self.dir]

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
        env["HOME"] = env.get("HOME", "/root")
        env["AWS_CONFIG_FILE"] = "/nonexistent/s3flash-test-config"
        env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent/s3flash-test-credentials"
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        env["AWS_ACCESS_KEY_ID"] = self.access_key
        env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        env["AWS_REGION"] = self.region
        env.update(self.extra_env)
        return env

    def start(self, timeout=20):
        os.makedirs(self.dir, exist_ok=True)
        if is_mounted(self.dir):
            raise MountError(f"{self.dir} is already a mount point (a mount left over?)")
        if self.log_path is None:
            fd, self.log_path = tempfile.mkstemp(prefix="s3flash-mount-", suffix=".log")
            os.close(fd)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not is_mounted(self.dir):
            if self.proc.poll() is not None:
                raise MountError(f"s3flash mount exited {self.proc.returncode}: "
                                 f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise MountError(f"s3flash mount did not mount within {timeout} s: "
                                 f"{self.log_tail()}")
            time.sleep(0.01)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def peak_rss_kib(self):
        """VmHWM of the daemon (KiB), or None once it has exited."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def held_elsewhere(self):
        """Whether another mount namespace still holds this mount (see stop)."""
        me = os.readlink("/proc/self/ns/mnt")
        tag = f"s3flash:{self.source} "
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{pid}/ns/mnt") == me:
                    continue
                with open(f"/proc/{pid}/mountinfo") as f:
                    if any(tag in line for line in f):
                        return True
            except OSError:
                continue
        return False

    def threads(self):
        """Where each thread of the daemon waits (name, state, wchan, kernel stack top)."""
        out = []
        base = f"/proc/{self.proc.pid}/task"
        try:
            tids = sorted(os.listdir(base), key=int)
        except OSError:
            return "(gone)"
        for t in tids:
            def rd(f):
                try:
                    return Path(base, t, f).read_text().strip()
                except OSError:
                    return "?"
            stack = rd("stack").splitlines()[:3]
            out.append(f"{t} {rd('comm')} {rd('stat').split()[2] if rd('stat') != '?' else '?'}"
                       f" wchan={rd('wchan')} {' < '.join(x.split()[-1] for x in stack)}")
        return "; ".join(out)

    def log_tail(self, n=4000):
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except (OSError, TypeError):
            return ""

    def stop(self, timeout=60):
        """Unmount with `fusermount3 -u` and wait for the daemon to exit; returns its exit
        status. A daemon still there after `timeout` s is killed (and that is an error)."""
        if self.proc is None:
            return None
        if is_mounted(self.dir):
            p = subprocess.run(["fusermount3", "-u", self.dir], capture_output=True,
                               timeout=timeout)
            if p.returncode != 0:
                # busy (an open file of a test that failed): detach it lazily
                force_unmount(self.dir)
        rc = None
        deadline = time.monotonic() + timeout
        checked = False
        while rc is None and time.monotonic() < deadline:
            try:
                rc = self.proc.wait(1)
            except subprocess.TimeoutExpired:
                pass
            if rc is None and not checked and self.held_elsewhere():
                # The kernel tells the daemon about the unmount only when the last reference
                # to the file system goes. A mount namespace created while it was mounted
                # (another test's `unshare -m`, a container on the same machine) holds a
                # copy, and then the daemon never hears of it: SIGTERM is its documented
                # way out.
                checked = True
                self.sigterm_needed = self.threads()
                self.proc.send_signal(signal.SIGTERM)
        if rc is None:
            threads = self.threads()
            self.kill()
            raise MountError(f"s3flash mount still running {timeout} s after the unmount; "
                             f"its threads: {threads}; log: {self.log_tail()}")
        self._close_log()
        return rc

    def kill(self, sig=signal.SIGKILL):
        """Kill the daemon and detach its mount (the documented recovery)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        force_unmount(self.dir)
        self._close_log()

    def _close_log(self):
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if exc[0] is not None:
            self.kill()
        else:
            self.stop()
