"""The two ways `s3flash mount` wedged itself on the path API (issue 19), against RGW.

- A rename two directories up with both TTLs 0, or with the default TTL while the server's
  DELETE takes longer than it (the fault proxy delays it): the handler used to stat() a
  directory of its own mount (to learn a node id) while the kernel held the rename's
  destination directory locked, and waited for ever.
- More parallel unlinks of the last keys of their directories than worker threads: each
  worker waited for a GETATTR of its own stat() that no free worker could serve.

Each operation runs in a child process under a watchdog: when it has not ended within the
deadline, the watchdog aborts the mount's FUSE connection
(/sys/fs/fuse/connections/N/abort, N taken from /proc/self/mountinfo, never from a stat
of the mount, which would hang too), so that the test fails with the daemon's threads
instead of hanging the suite.
"""

import os
import subprocess
import sys
import time

import pytest

from faults import faultproxy_factory  # noqa: F401 (a fixture)
from mountutil import Mount, force_unmount, mount_supported

DEADLINE_S = 30


def _connection_id(mountdir):
    """The FUSE connection of the mount on `mountdir`: the minor device number in
    /proc/self/mountinfo (the last mount there: ours, on top)."""
    path = os.path.abspath(mountdir)  # realpath would stat the (wedged) mount
    conn = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].replace("\\040", " ") == path and " - fuse" in line:
                conn = int(fields[2].split(":")[1])
    return conn


def _abort(mountdir):
    conn = _connection_id(mountdir)
    if conn is None:
        return "no FUSE mount found in /proc/self/mountinfo"
    try:
        with open(f"/sys/fs/fuse/connections/{conn}/abort", "w") as f:
            f.write("1")
        return f"aborted FUSE connection {conn}"
    except OSError as e:
        return f"abort of FUSE connection {conn} failed: {e}"


def _run_all(m, scripts):
    """Run each Python snippet in its own process, all at once; every one must exit 0
    within DEADLINE_S, else the connection is aborted and the test fails."""
    procs = [subprocess.Popen([sys.executable, "-c", s], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for s in scripts]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    if any(p.poll() is None for p in procs):
        threads = m.threads()
        what = _abort(m.dir)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        pytest.fail(f"the mount wedged: {sum(p.returncode != 0 for p in procs)} of "
                    f"{len(procs)} operations did not end within {DEADLINE_S} s ({what}); "
                    f"daemon threads: {threads}; log: {m.log_tail()}")
    outs = [p.communicate()[0] for p in procs]
    bad = [(p.returncode, o) for p, o in zip(procs, outs) if p.returncode != 0]
    assert not bad, bad


@pytest.fixture
def mount_factory(cli_path, rgw, tmp_path):
    why = mount_supported()
    if why:
        pytest.skip(why)
    mounts = []

    def make(source, options, endpoint=None):
        m = Mount(cli_path, endpoint or rgw.endpoint, rgw.access_key, rgw.secret_key, source,
                  tmp_path / f"m{len(mounts)}", options, region=rgw.region,
                  log_path=str(tmp_path / f"m{len(mounts)}.log"))
        mounts.append(m)
        return m.start()

    yield make
    for m in mounts:
        if m.alive():
            try:
                m.stop(timeout=30)
            except Exception:
                m.kill()
        if _connection_id(m.dir) is not None:
            force_unmount(m.dir)  # an aborted connection outlives its daemon


def test_rename_two_levels_up_with_ttls_0(mount_factory, s3, bucket):
    s3.put_object(Bucket=bucket, Key="ll-mv/a/b/c/f", Body=b"f")
    s3.put_object(Bucket=bucket, Key="ll-mv/a/x", Body=b"x")
    m = mount_factory(f"{bucket}/ll-mv/", ["--allow-rename", "--allow-delete",
                                             "--metadata-ttl", "0",
                                             "--negative-metadata-ttl", "0"])
    src, dst = os.path.join(m.dir, "a/b/c/f"), os.path.join(m.dir, "a/f")
    _run_all(m, [f"import os; os.rename({src!r}, {dst!r})"])
    # b and c are gone (their last key moved), the moved file is there with its bytes
    assert sorted(os.listdir(os.path.join(m.dir, "a"))) == ["f", "x"]
    assert not os.path.exists(os.path.join(m.dir, "a/b"))
    with open(dst, "rb") as f:
        assert f.read() == b"f"
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket,
                                                        Prefix="ll-mv/")["Contents"])
    assert keys == ["ll-mv/a/f", "ll-mv/a/x"]


def test_rename_two_levels_up_while_delete_outlasts_the_ttl(mount_factory, s3, rgw, bucket,
                                                            faultproxy_factory):
    """The same deadlock with the default TTL (1 s): the server's DELETE of the source (a
    large file's is slow) takes longer than the TTL, so the kernel's entries have expired
    when the handler looks at the emptied directories."""
    from urllib.parse import urlparse
    u = urlparse(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    s3.put_object(Bucket=bucket, Key="ll-mv2/a/b/c/f", Body=b"f")
    s3.put_object(Bucket=bucket, Key="ll-mv2/a/x", Body=b"x")
    m = mount_factory(f"{bucket}/ll-mv2/", ["--allow-rename", "--allow-delete"],
                      endpoint=proxy.endpoint)
    assert os.path.isfile(os.path.join(m.dir, "a/b/c/f"))
    proxy.set_faults([{"match": {"method": "DELETE"}, "action": "delay", "seconds": 2.5}])
    _run_all(m, [f"import os; os.rename({os.path.join(m.dir, 'a/b/c/f')!r}, "
                 f"{os.path.join(m.dir, 'a/f')!r})"])
    assert proxy.stats()["faults_total"] >= 1
    assert sorted(os.listdir(os.path.join(m.dir, "a"))) == ["f", "x"]


@pytest.mark.parametrize("op", ["unlink", "rename"])
def test_parallel_ops_on_last_keys_with_fewer_threads(mount_factory, s3, bucket, op):
    n = 8
    pfx = f"ll-par-{op}/"
    for i in range(n):
        s3.put_object(Bucket=bucket, Key=f"{pfx}d{i}/e/f", Body=b"%d" % i)
    m = mount_factory(f"{bucket}/{pfx}", ["--allow-delete", "--allow-rename",
                                           "--max-threads", "4", "--metadata-ttl", "0"])
    # the kernel knows every directory before the operations start
    for i in range(n):
        assert os.path.isfile(os.path.join(m.dir, f"d{i}/e/f"))
    if op == "unlink":
        scripts = [f"import os; os.unlink({os.path.join(m.dir, f'd{i}/e/f')!r})"
                   for i in range(n)]
    else:
        scripts = [f"import os; os.rename({os.path.join(m.dir, f'd{i}/e/f')!r}, "
                   f"{os.path.join(m.dir, f'g{i}')!r})" for i in range(n)]
    _run_all(m, scripts)
    names = sorted(os.listdir(m.dir))
    assert names == ([] if op == "unlink" else sorted(f"g{i}" for i in range(n)))
    left = s3.list_objects_v2(Bucket=bucket, Prefix=pfx).get("Contents", [])
    assert len(left) == (0 if op == "unlink" else n)


def test_mount_on_a_dev_fd_descriptor(cli_path, rgw, s3, bucket, tmp_path):
    """`s3flash mount SRC /dev/fd/N`: the caller (a CSI driver) opened /dev/fuse and
    mounted it; the daemon serves the descriptor it inherits."""
    import ctypes
    why = mount_supported()
    if why:
        pytest.skip(why)
    s3.put_object(Bucket=bucket, Key="ll-fd/a", Body=b"through a descriptor")
    mp = tmp_path / "fdmount"
    mp.mkdir()
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions".encode()
    if libc.mount(b"s3flash", str(mp).encode(), b"fuse.s3flash", 0, opts) != 0:
        os.close(fd)
        pytest.skip(f"mount(2) of /dev/fuse: {os.strerror(ctypes.get_errno())}")
    m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/ll-fd/",
              f"/dev/fd/{fd}", [], region=rgw.region, log_path=str(tmp_path / "fd.log"))
    proc = subprocess.Popen(m.argv(), env=m.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(fd,))
    os.close(fd)
    try:
        got = subprocess.run([sys.executable, "-c",
                              f"print(open({str(mp / 'a')!r}).read())"],
                             capture_output=True, text=True, timeout=DEADLINE_S)
        assert got.stdout.strip() == "through a descriptor", got
        assert os.listdir(mp) == ["a"]
    finally:
        subprocess.run(["umount", str(mp)], capture_output=True, timeout=30)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(30)
        if _connection_id(mp) is not None:
            force_unmount(str(mp))
    assert rc == 0, proc.stdout.read().decode(errors="replace")
