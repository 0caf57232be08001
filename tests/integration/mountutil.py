"""Starting and stopping `s3flash mount` from the tests, the model runner and the benchmark.

    m = Mount(cli_path, endpoint, access_key, secret_key, "bucket/prefix/", "/tmp/dir",
              ["--allow-delete"])
    m.start()            # --foreground child of ours; returns once the kernel shows the mount
    ... use m.dir ...
    m.stop()             # fusermount3 -u, then wait for the daemon (SIGKILL after a timeout)
    m.peak_rss_kib()     # VmHWM of the daemon while it runs

    wd = Watchdog(m)     # every operation on the mount in a child process, under a bound
    wd.run(["mv", src, dst])           # a wedged mount: its FUSE connection is aborted and
    wd.py("import os; os.listdir(...)")  # the test fails (Wedged), saying which operation
    wd.parallel([["rm", a], ["rm", b]])  # hung and where the daemon's threads wait

The daemon runs in the foreground as our child, so that its pid is ours to signal (the
SIGKILL test) and to read /proc/PID/status from (the benchmark's peak RSS). Mounting needs
root (or a user allowed to use /dev/fuse) and fusermount3.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FUSECTL = "/sys/fs/fuse/connections"


def _canonical(path):
    """`path` made absolute with its parent's symlinks resolved, without touching `path`
    itself: realpath() lstat()s every component, and an lstat of a wedged mount point
    hangs."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def is_mounted(path):
    """Whether `path` is a mount point in this mount namespace (from /proc/self/mountinfo;
    never a stat of `path`)."""
    path = _canonical(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mp = fields[4].replace("\\040", " ")
            if mp == path:
                return True
    return False


def mountinfo_device(path):
    """(major, minor) of the file system mounted on `path`, from /proc/self/mountinfo (the
    topmost mount of that point), or None. Never a stat() of the mount point: on a wedged
    FUSE mount that would hang as well."""
    path = _canonical(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].replace("\\040", " ") == path:
                major, minor = fields[2].split(":")
                found = (int(major), int(minor))
    return found


_STATFS = """import os, sys
st = os.stat(sys.argv[1])
os.statvfs(sys.argv[1])
print(os.major(st.st_dev), os.minor(st.st_dev))
"""


def wait_answering(path, proc=None, timeout=20):
    """Until the file system mounted on `path` answers: a child process stat()s and
    statfs()s the mount point under a deadline (the watchdog: a hung FUSE mount kills the
    child, not the test), and the device it sees must be the one /proc/self/mountinfo lists
    on `path` (the mount's own, not the directory under it). Never the existence of a file
    or a PID. Raises MountError saying what it saw."""
    end = time.monotonic() + timeout
    while True:
        dev = mountinfo_device(path)
        if dev is not None:
            left = max(1.0, end - time.monotonic())
            try:
                r = subprocess.run([sys.executable, "-c", _STATFS, path], capture_output=True,
                                   text=True, timeout=left)
            except subprocess.TimeoutExpired:
                raise MountError(f"the mount on {path} did not answer stat/statfs within "
                                 f"{timeout} s") from None
            if r.returncode == 0 and tuple(map(int, r.stdout.split())) == dev:
                return
            seen = r.stdout.strip() or r.stderr.strip()[-300:]
        else:
            seen = "not in /proc/self/mountinfo"
        if proc is not None and proc.poll() is not None:
            raise MountError(f"the daemon exited {proc.returncode} before {path} answered "
                             f"({seen})")
        if time.monotonic() > end:
            raise MountError(f"{path} did not answer as the mount within {timeout} s: "
                             f"{seen} (mountinfo: {dev})")
        time.sleep(0.01)


def fuse_connection_id(path):
    """The name of the mount's directory under /sys/fs/fuse/connections: the kernel's dev_t
    of its super block (major 0 for FUSE: the device minor), or None when not mounted."""
    dev = mountinfo_device(path)
    if dev is None:
        return None
    major, minor = dev
    return (major << 20) | minor


def ensure_fusectl():
    """Mount the FUSE control file system on /sys/fs/fuse/connections where it is not yet
    (needs root); returns whether it is there."""
    with open("/proc/self/mountinfo") as f:
        if any(line.split()[4] == FUSECTL for line in f):
            return True
    p = subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL], capture_output=True,
                       timeout=10)
    return p.returncode == 0


def abort_connection(path):
    """Abort the FUSE connection of the mount on `path` (every request in flight and every
    later one fails with ENOTCONN; processes blocked in it wake up). Returns the connection id
    aborted, or None (not mounted, or fusectl unavailable)."""
    conn = fuse_connection_id(path)
    if conn is None or not ensure_fusectl():
        return None
    try:
        with open(f"{FUSECTL}/{conn}/abort", "w") as f:
            f.write("1")
    except OSError:
        return None
    return conn


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
        try:
            wait_answering(self.dir, self.proc, timeout)
        except MountError as e:
            if self.proc.poll() is None:
                self.kill()
            raise MountError(f"s3flash mount: {e}: {self.log_tail()}") from None
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


# ---- the watchdog -----------------------------------------------------------------------------

class Wedged(AssertionError):
    """An operation on the mount did not finish within its bound (or the daemon was seen
    waiting on its own mount): the FUSE connection was aborted. An AssertionError, so that
    pytest reports a failed test, not an error of the harness."""


def _stack(pid, tid=None):
    base = f"/proc/{pid}" if tid is None else f"/proc/{pid}/task/{tid}"
    try:
        return [ln.split()[-1].split("+")[0] for ln in
                Path(base, "stack").read_text().splitlines() if ln.strip()]
    except OSError:
        return []


def _state(pid, tid=None):
    base = f"/proc/{pid}" if tid is None else f"/proc/{pid}/task/{tid}"
    try:
        return Path(base, "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


# Kernel frames of a thread that waits for an answer of a FUSE file system: for the daemon,
# which reads no other FUSE mount, that is a system call on its own mount (a re-entry that
# can wait for the very request it serves, or for a directory lock the kernel holds for it).
_FUSE_WAIT = ("request_wait_answer", "fuse_simple_request", "__fuse_simple_request",
              "fuse_dentry_revalidate", "fuse_lookup", "fuse_do_getattr", "fuse_getattr")
# ... and a path walk asleep on a directory's lock (the i_rwsem a rename or unlink holds)
_WALK = ("lookup_slow", "walk_component", "path_lookupat", "filename_lookup",
         "vfs_fstatat", "vfs_statx", "d_alloc_parallel", "lookup_one_qstr_excl")
_LOCK = ("rwsem_down_read_slowpath", "rwsem_down_write_slowpath", "down_read", "down_write")


def daemon_reentry(pid):
    """[(tid, comm, state, stack)] of the daemon's threads that are inside a system call on
    a FUSE mount (its own) or asleep on a directory lock in a path walk."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        st = _stack(pid, t)
        if any(f.startswith("fuse_dev_") for f in st):
            continue                      # an idle worker reading /dev/fuse
        fuse_wait = any(f in _FUSE_WAIT for f in st)
        # asleep (D) at the top of a path walk or on a lock: its stack's first frame (a
        # thread waiting for the disk sleeps in io_schedule or a folio wait instead)
        locked_walk = _state(pid, t) == "D" and bool(st) and st[0] in _WALK + _LOCK
        if fuse_wait or locked_walk:
            try:
                comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
            except OSError:
                comm = "?"
            out.append((t, comm, _state(pid, t), st[:8]))
    return out


class Op:
    """One operation on the mount, running as a child process."""

    def __init__(self, argv, what, proc):
        self.argv = argv
        self.what = what
        self.proc = proc
        self.out = b""
        self.err = b""

    @property
    def rc(self):
        return self.proc.returncode

    @property
    def text(self):
        return self.out.decode(errors="replace")

    def __repr__(self):
        return (f"<{self.what}: rc={self.rc} out={self.out[-500:]!r} "
                f"err={self.err[-1000:]!r}>")


class Watchdog:
    """Runs operations on a mount in child processes under a bound, so that a wedged mount
    (a deadlock in the daemon, a process in D state) fails the test instead of hanging the
    suite. When an operation has not finished after `bound_s` seconds, or as soon as one of
    the daemon's threads has been seen for `reentry_s` seconds waiting on its own mount
    (daemon_reentry), the mount's FUSE connection is aborted through
    /sys/fs/fuse/connections/N/abort (N from /proc/self/mountinfo, never a stat of the
    mount), the children are killed and reaped (bounded), and Wedged is raised naming the
    operation, where it waited, and where each daemon thread waited.

    `mount` is a Mount (its pid is the daemon's) or a path plus `pid=`."""

    def __init__(self, mount, bound_s=20.0, reentry_s=1.5, pid=None):
        self.mount = mount if isinstance(mount, Mount) else None
        self.dir = mount.dir if isinstance(mount, Mount) else str(mount)
        self._pid = pid
        self.bound_s = bound_s
        self.reentry_s = reentry_s
        self.aborted = None          # the connection id, once aborted
        self.verdicts = []           # messages of the wedges seen (also raised)

    @property
    def pid(self):
        return self.mount.pid if self.mount is not None else self._pid

    def start(self, argv, what=None, input=None, env=None):
        """Start one operation; finish it with wait()."""
        proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
        op = Op(argv, what or " ".join(map(str, argv)), proc)
        # the output is collected by threads, so that a big one never blocks the child
        def collect(stream, attr):
            setattr(op, attr, stream.read())
        op._threads = [threading.Thread(target=collect, args=(proc.stdout, "out"), daemon=True),
                       threading.Thread(target=collect, args=(proc.stderr, "err"), daemon=True)]
        for t in op._threads:
            t.start()
        try:
            if input:
                proc.stdin.write(input)
            proc.stdin.close()
        except OSError:
            pass
        return op

    def wait(self, ops, timeout=None, what=None):
        """Wait for every op; Wedged (after aborting the connection) past the bound."""
        ops = list(ops)
        bound = self.bound_s if timeout is None else timeout
        t0 = time.monotonic()
        seen_since = None
        while True:
            if all(op.proc.poll() is not None for op in ops):
                break
            now = time.monotonic()
            reentry = daemon_reentry(self.pid) if self.pid else []
            if reentry:
                seen_since = seen_since or now
                if now - seen_since >= self.reentry_s:
                    self._wedge(ops, what, "the daemon is waiting on its own mount "
                                f"(for {now - seen_since:.1f} s): " + "; ".join(
                                    f"thread {t} {c} state {s}: {' < '.join(st)}"
                                    for t, c, s, st in reentry), t0)
            else:
                seen_since = None
            if now - t0 > bound:
                self._wedge(ops, what, f"not finished within {bound:g} s", t0)
            time.sleep(0.05)
        for op in ops:
            for t in op._threads:
                t.join(10)
        return ops

    def _wedge(self, ops, what, why, t0):
        pending = [op for op in ops if op.proc.poll() is None]
        where = "; ".join(f"`{op.what}` (pid {op.proc.pid}, state {_state(op.proc.pid)}): "
                          f"{' < '.join(_stack(op.proc.pid)[:6]) or '?'}" for op in pending)
        threads = self.mount.threads() if self.mount is not None else "?"
        self.aborted = abort_connection(self.dir)
        for op in pending:
            try:
                os.killpg(op.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        stuck = []
        for op in pending:
            try:
                op.proc.wait(10)
            except subprocess.TimeoutExpired:
                stuck.append(op.what)
        msg = (f"WEDGED: {what or ', '.join(op.what for op in pending)}: {why} "
               f"(after {time.monotonic() - t0:.1f} s); {len(pending)} of {len(ops)} "
               f"operations still running: {where}; FUSE connection "
               f"{self.aborted if self.aborted is not None else '(not found)'} aborted"
               + (f"; still not reaped after the abort: {stuck}" if stuck else "")
               + f"; daemon threads: {threads}")
        self.verdicts.append(msg)
        raise Wedged(msg)

    def run(self, argv, what=None, timeout=None, check=True, input=None, env=None):
        """Run one operation to its end under the bound; with `check`, a non-zero exit
        status fails too (AssertionError with its output)."""
        op = self.wait([self.start(argv, what, input=input, env=env)], timeout)[0]
        if check:
            assert op.rc == 0, f"{op.what} failed: {op!r}"
        return op

    def py(self, code, *args, what=None, timeout=None, check=True):
        """Run Python `code` (sys.argv[1:] = args) in a child; returns its Op."""
        return self.run([sys.executable, "-c", code, *map(str, args)],
                        what=what or f"python: {code[:120]}", timeout=timeout, check=check)

    def parallel(self, argvs, what=None, timeout=None, check=True):
        """Start every argv at once and wait for all under one bound."""
        ops = self.wait([self.start(a) for a in argvs], timeout, what)
        if check:
            bad = [op for op in ops if op.rc != 0]
            assert not bad, f"{len(bad)} of {len(ops)} failed: {bad}"
        return ops

    def listdir(self, path, **kw):
        """Sorted names of a directory of the mount (in a child)."""
        op = self.py("import os, sys, json; print(json.dumps(sorted(os.listdir(sys.argv[1]))))",
                     path, what=f"listdir {path}", **kw)
        import json
        return json.loads(op.out)

    def exists(self, path, **kw):
        op = self.py("import os, sys; print(int(os.path.lexists(sys.argv[1])))", path,
                     what=f"lstat {path}", **kw)
        return op.out.strip() == b"1"

    def read(self, path, **kw):
        return self.run(["cat", path], what=f"cat {path}", **kw).out

    @contextlib.contextmanager
    def guard(self, what, timeout=None):
        """For operations the test makes in its own process: a timer thread that aborts the
        connection when the block has not ended within the bound (a blocked system call
        then returns ENOTCONN), and Wedged is raised at the end of the block."""
        done = threading.Event()
        fired = []
        bound = self.bound_s if timeout is None else timeout

        def timer():
            if not done.wait(bound):
                threads = self.mount.threads() if self.mount is not None else "?"
                fired.append((abort_connection(self.dir), threads))
        t = threading.Thread(target=timer, daemon=True)
        t.start()
        try:
            yield
        except OSError:
            if not fired:
                raise
        finally:
            done.set()
            t.join()
        if fired:
            self.aborted = fired[0][0]
            msg = (f"WEDGED: {what}: not finished within {bound:g} s; FUSE connection "
                   f"{self.aborted} aborted; daemon threads: {fired[0][1]}")
            self.verdicts.append(msg)
            raise Wedged(msg)

    def close(self, timeout=30):
        """At the end of a test: stop the mount (fusermount3 -u, the daemon reaped), also
        when it is wedged: the connection is aborted when the stop has not ended within
        `timeout` s (or was aborted before), and the daemon killed. Raises Wedged when the
        stop itself wedged."""
        if self.mount is None:
            if self.aborted is not None or is_mounted(self.dir):
                force_unmount(self.dir)
            return
        if self.aborted is not None:
            self.mount.kill()
            return
        try:
            with self.guard(f"unmounting {self.dir}", timeout):
                self.mount.stop(timeout=timeout)
        except Wedged:
            self.mount.kill()
            raise


def stop_mounts(mounts, timeout=30):
    """Test teardown: stop each mount (SIGKILL when it does not stop) and unmount what is
    still mounted."""
    for m in mounts:
        if m.alive():
            try:
                m.stop(timeout=timeout)
            except Exception:
                m.kill()
        if is_mounted(m.dir):
            force_unmount(m.dir)
