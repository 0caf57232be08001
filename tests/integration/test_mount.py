"""`s3flash mount` against the real RGW through real FUSE mounts (docs/SEMANTICS.md).

Each test mounts a bucket (or a prefix) into a temporary directory with the real binary and
unmounts it in teardown, also when the test failed. Requests are counted from the daemon's
--debug log (one "-> Operation METHOD url" line per request sent), never guessed from time.
Needs root, /dev/fuse and fusermount3: skipped, with the reason, only when one is missing.
"""

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401 (a fixture)
from helpers import wait_for
from mountutil import Mount


def _fuse_missing():
    if os.geteuid() != 0:
        return "mount tests run as root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (FUSE is not available here)"
    if not shutil.which("fusermount3"):
        return "fusermount3 is not installed (Debian package fuse3)"
    return None


pytestmark = pytest.mark.skipif(_fuse_missing() is not None, reason=_fuse_missing() or "")

MiB = 1 << 20


def _daemon_pids(mountpoint):
    """Pids of s3flash processes whose command line names `mountpoint`."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"s3flash") and b"mount" in argv and \
                os.fsencode(str(mountpoint)) in argv:
            pids.append(int(d))
    return pids


class Mounter:
    def __init__(self, cli, tmp_path):
        self.cli = cli
        self.tmp = tmp_path
        self.mounts = []

    def argv(self, source, mountpoint, *opts, endpoint=None):
        return [self.cli.path, "--endpoint-url", endpoint or self.cli.rgw.endpoint, "mount",
                source, str(mountpoint), "--log-file", str(self.tmp / "mount.log"), *opts]

    def mount(self, source, *opts, name=None, endpoint=None):
        mp = self.tmp / (name or f"mnt-{uuid.uuid4().hex[:6]}")
        mp.mkdir(exist_ok=True)
        p = subprocess.run(self.argv(source, mp, *opts, endpoint=endpoint), env=self.cli.env(),
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr.decode()
        self.mounts.append(mp)
        assert os.path.ismount(mp)
        return mp

    def log(self):
        try:
            return (self.tmp / "mount.log").read_text()
        except FileNotFoundError:
            return ""

    def requests(self, since=0):
        """Operations of the requests logged after offset `since` of the log."""
        return re.findall(r"-> (\w+) ", self.log()[since:])

    def unmount(self, mp):
        def umount():
            # EBUSY while the kernel's RELEASE of files closed just before is in flight
            subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True, timeout=30)
            return not os.path.ismount(mp)
        try:
            wait_for(umount, timeout=10, what=f"fusermount3 -u {mp}")
        except AssertionError:
            subprocess.run(["fusermount3", "-u", "-z", str(mp)], capture_output=True,
                           timeout=30)
        wait_for(lambda: not _daemon_pids(mp), timeout=30, what=f"the daemon of {mp} to end")

    def close(self):
        for mp in self.mounts:
            try:
                self.unmount(mp)
            except Exception as e:  # keep unmounting the others
                print(f"unmount {mp}: {e}")


@pytest.fixture
def mounter(cli, tmp_path):
    m = Mounter(cli, tmp_path)
    yield m
    m.close()


@pytest.fixture
def pfx():
    """A fresh prefix per test inside the module's bucket."""
    return f"t-{uuid.uuid4().hex[:8]}/"


def _errno(fn):
    with pytest.raises(OSError) as ei:
        fn()
    return ei.value.errno


# ---- reads and writes ---------------------------------------------------------------------

def test_read_write_round_trip_multipart(mounter, s3, bucket, pfx):
    mp = mounter.mount(f"{bucket}/{pfx}", "--part-size", "5M")
    small = b"hello mount\n"
    (mp / "small.txt").write_bytes(small)
    big = os.urandom(13 * MiB + 12345)  # three parts of 5 MiB
    with open(mp / "big.bin", "wb") as f:
        for i in range(0, len(big), 1 * MiB):
            f.write(big[i:i + MiB])
    assert s3.get_object(Bucket=bucket, Key=pfx + "small.txt")["Body"].read() == small
    obj = s3.get_object(Bucket=bucket, Key=pfx + "big.bin")
    assert obj["ETag"].strip('"').endswith("-3"), obj["ETag"]  # a multipart upload
    assert obj["Body"].read() == big
    assert (mp / "small.txt").read_bytes() == small
    assert (mp / "big.bin").read_bytes() == big
    with open(mp / "big.bin", "rb") as f:  # random reads
        for off in (7 * MiB + 3, 11, len(big) - 100, 5 * MiB - 1):
            f.seek(off)
            assert f.read(4096) == big[off:off + 4096]
    assert os.stat(mp / "big.bin").st_size == len(big)


def test_out_of_order_write_is_einval(mounter, s3, bucket, pfx):
    mp = mounter.mount(f"{bucket}/{pfx}")
    fd = os.open(mp / "ooo.bin", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert os.write(fd, b"a" * 100) == 100
        assert _errno(lambda: os.pwrite(fd, b"b", 500)) == errno.EINVAL
        assert _errno(lambda: os.pwrite(fd, b"b", 0)) == errno.EINVAL
        assert os.pwrite(fd, b"c" * 10, 100) == 10  # in order still works
        os.fsync(fd)  # completes the upload
        assert _errno(lambda: os.pwrite(fd, b"d", 110)) == errno.EINVAL
    finally:
        os.close(fd)
    assert s3.get_object(Bucket=bucket, Key=pfx + "ooo.bin")["Body"].read() == \
        b"a" * 100 + b"c" * 10


def test_overwrite_needs_flag_and_o_trunc(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "f", Body=b"old")
    mp = mounter.mount(f"{bucket}/{pfx}", "--metadata-ttl", "0")
    assert _errno(lambda: open(mp / "f", "wb")) == errno.EPERM
    assert _errno(lambda: os.open(mp / "f", os.O_WRONLY)) == errno.EPERM
    assert s3.get_object(Bucket=bucket, Key=pfx + "f")["Body"].read() == b"old"
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--allow-overwrite", "--metadata-ttl", "0")
    assert _errno(lambda: os.open(mp / "f", os.O_WRONLY)) == errno.EPERM  # no O_TRUNC
    assert _errno(lambda: os.open(mp / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)) == \
        errno.EEXIST
    (mp / "f").write_bytes(b"new content")
    assert s3.get_object(Bucket=bucket, Key=pfx + "f")["Body"].read() == b"new content"
    assert (mp / "f").read_bytes() == b"new content"


def test_delete_needs_allow_delete(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "d.txt", Body=b"x")
    mp = mounter.mount(f"{bucket}/{pfx}")
    assert _errno(lambda: os.unlink(mp / "d.txt")) == errno.EPERM
    assert s3.head_object(Bucket=bucket, Key=pfx + "d.txt")
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--allow-delete")
    os.unlink(mp / "d.txt")
    assert not os.path.exists(mp / "d.txt")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=pfx + "d.txt")
    assert _errno(lambda: os.unlink(mp / "d.txt")) == errno.ENOENT
    # a file being written cannot be deleted
    with open(mp / "w.txt", "wb") as f:
        f.write(b"1")
        assert _errno(lambda: os.unlink(mp / "w.txt")) == errno.EBUSY


def test_rename_needs_allow_rename_and_refuses_directories(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "a.txt", Body=b"rename me")
    s3.put_object(Bucket=bucket, Key=pfx + "dir/x", Body=b"x")
    mp = mounter.mount(f"{bucket}/{pfx}")
    assert _errno(lambda: os.rename(mp / "a.txt", mp / "b.txt")) == errno.EPERM
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--allow-rename")
    os.rename(mp / "a.txt", mp / "b.txt")
    assert not os.path.exists(mp / "a.txt")
    assert (mp / "b.txt").read_bytes() == b"rename me"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=pfx)["Contents"]]
    assert pfx + "a.txt" not in keys and pfx + "b.txt" in keys
    assert _errno(lambda: os.rename(mp / "dir", mp / "dir2")) == errno.ENOTSUP
    s3.put_object(Bucket=bucket, Key=pfx + "c.txt", Body=b"c")
    assert _errno(lambda: os.rename(mp / "b.txt", mp / "c.txt")) == errno.EPERM  # overwrite
    assert s3.get_object(Bucket=bucket, Key=pfx + "c.txt")["Body"].read() == b"c"


def test_mkdir_is_local_and_rmdir(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "full/x", Body=b"x")
    mp = mounter.mount(f"{bucket}/{pfx}")
    os.mkdir(mp / "new")
    assert os.path.isdir(mp / "new")
    assert "new" in os.listdir(mp)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=pfx + "new")
    assert _errno(lambda: os.mkdir(mp / "new")) == errno.EEXIST
    os.mkdir(mp / "new" / "sub")
    assert _errno(lambda: os.rmdir(mp / "new")) == errno.ENOTEMPTY
    os.rmdir(mp / "new" / "sub")
    os.rmdir(mp / "new")
    assert not os.path.exists(mp / "new")
    assert _errno(lambda: os.rmdir(mp / "full")) == errno.ENOTEMPTY
    # a file written inside a local directory makes it a prefix in S3
    os.mkdir(mp / "made")
    (mp / "made" / "f").write_bytes(b"f")
    assert s3.get_object(Bucket=bucket, Key=pfx + "made/f")["Body"].read() == b"f"
    assert os.listdir(mp / "made") == ["f"]


def test_readdir_streams_many_pages_without_a_head_per_entry(mounter, s3, bucket, pfx):
    from helpers import put_many
    names = sorted(f"k{i:03d}" for i in range(45))
    put_many(s3, bucket, [pfx + "many/" + n for n in names], body=b"12345")
    s3.put_object(Bucket=bucket, Key=pfx + "many/sub/z", Body=b"z")
    mp = mounter.mount(f"{bucket}/{pfx}", "--page-size", "10", "--debug",
                       "--metadata-ttl", "60")
    start = len(mounter.log())
    with os.scandir(mp / "many") as it:  # the first entries before the listing ends
        assert next(it).name == names[0]
        # the lookup of "many" (a LIST of max-keys 1) and the first page, not all 5
        assert mounter.requests(start).count("ListObjectsV2") <= 2, mounter.requests(start)
    start = len(mounter.log())
    out = subprocess.run(["ls", "-l", str(mp / "many")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if not ln.startswith("total")]
    assert [ln.split()[-1] for ln in lines] == names + ["sub"]
    assert all(ln.split()[4] == "5" for ln in lines[:-1])  # sizes from the listing
    ops = mounter.requests(start)
    assert "HeadObject" not in ops, ops
    # 46 entries at 10 per page: 5 pages
    assert ops.count("ListObjectsV2") == 5, ops


def test_object_replaced_mid_read_is_eio(mounter, s3, bucket, pfx):
    # larger than the readers' pool of a 64M memory target can hold ahead (the read-ahead
    # keeps the link's bandwidth-delay product in flight): the read at 60 MiB needs a new GET,
    # pinned to the first version's ETag. Bytes the handle already holds are that version's
    # and may be returned (never a mix).
    data = os.urandom(64 * MiB)
    s3.put_object(Bucket=bucket, Key=pfx + "v.bin", Body=data)
    mp = mounter.mount(f"{bucket}/{pfx}", "--memory-target", "64M")
    with open(mp / "v.bin", "rb", buffering=0) as f:
        assert f.read(MiB) == data[:MiB]
        s3.put_object(Bucket=bucket, Key=pfx + "v.bin", Body=os.urandom(64 * MiB))
        f.seek(60 * MiB)
        assert _errno(lambda: f.read(MiB)) == errno.EIO
    assert "PreconditionFailed" in mounter.log() or "412" in mounter.log()


# ---- options ------------------------------------------------------------------------------

def test_modes_owner_and_metadata_refusals(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "d/f", Body=b"abc")
    mp = mounter.mount(f"{bucket}/{pfx}", "--uid", "1234", "--gid", "567",
                       "--dir-mode", "0700", "--file-mode", "0600")
    st = st_f = os.stat(mp / "d" / "f")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777, st.st_size) == (1234, 567, 0o600, 3)
    st = os.stat(mp / "d")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 567, 0o700)
    os.chmod(mp / "d" / "f", 0o600)  # the mount's mode: accepted
    assert _errno(lambda: os.chmod(mp / "d" / "f", 0o644)) == errno.EPERM
    assert _errno(lambda: os.chown(mp / "d" / "f", 0, 0)) == errno.EPERM
    os.utime(mp / "d" / "f", (1, 1))  # accepted, ignored: the time is S3's
    assert os.stat(mp / "d" / "f").st_mtime == st_f.st_mtime
    assert _errno(lambda: os.symlink("f", mp / "d" / "l")) == errno.ENOTSUP
    assert _errno(lambda: os.link(mp / "d" / "f", mp / "d" / "h")) == errno.ENOTSUP
    assert _errno(lambda: os.setxattr(mp / "d" / "f", "user.a", b"1")) == errno.ENOTSUP
    assert _errno(lambda: os.truncate(mp / "d" / "f", 1)) == errno.EPERM
    with open(mp / "d" / "f", "rb") as f:
        import fcntl
        assert _errno(lambda: fcntl.flock(f, fcntl.LOCK_EX)) == errno.ENOTSUP


def test_read_only(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "r", Body=b"r")
    mp = mounter.mount(f"{bucket}/{pfx}", "--read-only")
    assert (mp / "r").read_bytes() == b"r"
    assert _errno(lambda: open(mp / "new", "wb")) == errno.EROFS
    assert _errno(lambda: os.mkdir(mp / "dir")) == errno.EROFS
    assert _errno(lambda: os.unlink(mp / "r")) == errno.EROFS


def test_memory_target_refuses_writers_with_enomem(mounter, bucket, pfx):
    # 96 MiB: 6 FUSE threads x 3 MiB + 16 MiB off first, the writers' pool = 7/16 of the
    # remaining 62 MiB = 27 MiB; each writer reserves 2 x 5 MiB: two fit, not three
    mp = mounter.mount(f"{bucket}/{pfx}", "--memory-target", "96M", "--part-size", "5M")
    f1 = open(mp / "w1", "wb", buffering=0)
    f2 = open(mp / "w2", "wb", buffering=0)
    f1.write(b"1")  # not empty: close completes the upload and returns the reservation
    f2.write(b"2")
    try:
        assert _errno(lambda: open(mp / "w3", "wb")) == errno.ENOMEM
    finally:
        f1.close()
        f2.close()
    with open(mp / "w3", "wb") as f:  # the reservations were returned at close
        f.write(b"ok")
    assert (mp / "w3").read_bytes() == b"ok"


def test_metadata_ttl_caches_lookups(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "m", Body=b"m")
    mp = mounter.mount(f"{bucket}/{pfx}", "--debug", "--metadata-ttl", "300")
    os.stat(mp / "m")
    start = len(mounter.log())
    for _ in range(5):
        os.stat(mp / "m")
    assert mounter.requests(start) == []
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--debug", "--metadata-ttl", "0",
                       "--negative-metadata-ttl", "0")
    start = len(mounter.log())
    for _ in range(3):
        os.stat(mp / "m")
    # every stat goes to S3 (the kernel's lookup and getattr: one or two HEADs each)
    assert 3 <= mounter.requests(start).count("HeadObject") <= 6


# ---- the daemon ---------------------------------------------------------------------------

def test_sigterm_unmounts_cleanly_and_aborts_open_writes(cli, mounter, s3, bucket, tmp_path):
    mp = tmp_path / "sig"
    mp.mkdir()
    p = subprocess.Popen(mounter.argv(bucket, mp, "--foreground"), env=cli.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: os.path.ismount(mp) or p.poll() is not None, timeout=30,
                 what="the mount")
        assert os.path.ismount(mp), p.stderr.read().decode()
        fd = os.open(mp / "open-at-exit", os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"unfinished")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
        assert not os.path.ismount(mp)
        with pytest.raises(OSError):  # the file system is gone under it
            os.close(fd)
        # the upload still open was aborted: no object
        assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="open-at-exit")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if os.path.ismount(mp):
            subprocess.run(["fusermount3", "-u", "-z", str(mp)])


def test_fusermount_u_ends_the_daemon(mounter, bucket):
    mp = mounter.mount(bucket)
    pids = _daemon_pids(mp)
    assert len(pids) == 1
    r = subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert not os.path.ismount(mp)
    wait_for(lambda: not os.path.exists(f"/proc/{pids[0]}"), timeout=20,
             what="the daemon to end")


def test_bad_bucket_and_bad_options_fail_on_the_terminal(cli, mounter, tmp_path):
    mp = tmp_path / "bad"
    mp.mkdir()
    p = subprocess.run(mounter.argv(f"no-such-bucket-{uuid.uuid4().hex[:8]}", mp),
                       env=cli.env(), capture_output=True, timeout=60)
    assert p.returncode == 1
    assert b"NoSuchBucket" in p.stderr, p.stderr
    assert not os.path.ismount(mp)
    for opts, msg in ((["--metadata-ttl", "soon"], b"--metadata-ttl"),
                      (["--dir-mode", "999"], b"--dir-mode"),
                      (["--memory-target", "1M"], b"--memory-target"),
                      (["--read-only", "--allow-delete"], b"--read-only"),
                      (["--max-cache-size", "1G"], b"--cache")):
        p = subprocess.run(mounter.argv("somebucket", mp, *opts), env=cli.env(),
                           capture_output=True, timeout=60)
        assert p.returncode == 2, (opts, p.stderr)
        assert msg in p.stderr, (opts, p.stderr)
    p = subprocess.run(mounter.argv("somebucket", tmp_path / "missing"), env=cli.env(),
                       capture_output=True, timeout=60)
    assert p.returncode == 1 and b"missing" in p.stderr, p.stderr


def test_listing_cache_serves_readdir_within_the_ttl(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "lc/a", Body=b"a")
    mp = mounter.mount(f"{bucket}/{pfx}", "--debug", "--metadata-ttl", "300")
    assert os.listdir(mp / "lc") == ["a"]
    start = len(mounter.log())
    assert os.listdir(mp / "lc") == ["a"]
    assert "ListObjectsV2" not in mounter.requests(start)  # from the listing cache
    # a change through the mount is seen at once
    (mp / "lc" / "b").write_bytes(b"b")
    assert sorted(os.listdir(mp / "lc")) == ["a", "b"]
    # a change by another client is seen after the TTL only (here: not yet)
    s3.put_object(Bucket=bucket, Key=pfx + "lc/c", Body=b"c")
    assert sorted(os.listdir(mp / "lc")) == ["a", "b"]
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--debug", "--metadata-ttl", "0")
    start = len(mounter.log())
    assert sorted(os.listdir(mp / "lc")) == ["a", "b", "c"]
    assert sorted(os.listdir(mp / "lc")) == ["a", "b", "c"]
    assert mounter.requests(start).count("ListObjectsV2") >= 2


def test_handles_are_for_reading_or_writing(mounter, s3, bucket, pfx):
    s3.put_object(Bucket=bucket, Key=pfx + "rw", Body=b"existing")
    mp = mounter.mount(f"{bucket}/{pfx}")
    fd = os.open(mp / "rw", os.O_RDWR)  # an existing file without O_TRUNC: a read handle
    try:
        assert os.read(fd, 100) == b"existing"
        assert _errno(lambda: os.pwrite(fd, b"x", 0)) == errno.EBADF
    finally:
        os.close(fd)
    fd = os.open(mp / "new", os.O_RDWR | os.O_CREAT, 0o644)  # a new file: a write handle
    try:
        os.write(fd, b"abc")
        assert _errno(lambda: os.pread(fd, 3, 0)) == errno.EBADF
        assert os.stat(mp / "new").st_size == 3  # visible while written, with its size
        assert _errno(lambda: open(mp / "new", "rb")) == errno.EBUSY  # not readable yet
        assert _errno(lambda: open(mp / "new", "wb")) == errno.EBUSY  # one writer
        assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=pfx + "new")
    finally:
        os.close(fd)
    assert (mp / "new").read_bytes() == b"abc"
    # an empty file (touch) becomes a 0-byte object
    (mp / "empty").touch()
    wait_for(lambda: "Contents" in s3.list_objects_v2(Bucket=bucket, Prefix=pfx + "empty"),
             what="the empty object (uploaded at release)")
    assert s3.head_object(Bucket=bucket, Key=pfx + "empty")["ContentLength"] == 0


def test_allow_other_max_threads_and_cache_are_accepted(mounter, s3, bucket, pfx, tmp_path):
    s3.put_object(Bucket=bucket, Key=pfx + "c", Body=b"cached?")
    mp = mounter.mount(f"{bucket}/{pfx}", "--allow-other", "--max-threads", "2",
                       "--cache", str(tmp_path / "cache"), "--max-cache-size", "64M")
    with open("/proc/self/mountinfo") as f:
        line = next(ln for ln in f if f" {mp} " in ln)
    assert "allow_other" in line and "fuse.s3flash" in line, line
    assert (mp / "c").read_bytes() == b"cached?"


def test_page_cache_kept_while_the_etag_is_unchanged(mounter, s3, bucket, pfx):
    v1, v2 = os.urandom(MiB), os.urandom(MiB)
    s3.put_object(Bucket=bucket, Key=pfx + "pc", Body=v1)
    mp = mounter.mount(f"{bucket}/{pfx}", "--debug", "--metadata-ttl", "0",
                       "--negative-metadata-ttl", "0")
    assert (mp / "pc").read_bytes() == v1
    start = len(mounter.log())
    assert (mp / "pc").read_bytes() == v1
    assert "GetObject" not in mounter.requests(start)  # the kernel's pages were kept
    s3.put_object(Bucket=bucket, Key=pfx + "pc", Body=v2)  # same size, another ETag
    start = len(mounter.log())
    assert (mp / "pc").read_bytes() == v2  # a new ETag at open drops the old pages
    assert "GetObject" in mounter.requests(start)


def test_negative_metadata_ttl(mounter, s3, bucket, pfx):
    mp = mounter.mount(f"{bucket}/{pfx}", "--negative-metadata-ttl", "300")
    assert not os.path.exists(mp / "later")
    s3.put_object(Bucket=bucket, Key=pfx + "later", Body=b"l")
    assert not os.path.exists(mp / "later")  # "missing" is remembered
    mounter.unmount(mp)
    mp = mounter.mount(f"{bucket}/{pfx}", "--negative-metadata-ttl", "0")
    assert not os.path.exists(mp / "later2")
    s3.put_object(Bucket=bucket, Key=pfx + "later2", Body=b"l")
    assert (mp / "later2").read_bytes() == b"l"  # seen at once


def _write_all(path, data, flags):
    """Write `data` in 1 MiB pieces and close; the errno of the first failure, or 0."""
    fd = os.open(path, flags, 0o644)
    try:
        for i in range(0, len(data), MiB):
            os.write(fd, data[i:i + MiB])
    except OSError as e:
        try:
            os.close(fd)
        except OSError:
            pass
        return e.errno
    try:
        os.close(fd)
    except OSError as e:
        return e.errno
    return 0


def test_failed_upload_leaves_no_object_and_the_previous_intact(
        mounter, s3, rgw, bucket, pfx, faultproxy_factory):
    from urllib.parse import urlparse
    u = urlparse(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    s3.put_object(Bucket=bucket, Key=pfx + "keep", Body=b"old")
    mp = mounter.mount(f"{bucket}/{pfx}", "--part-size", "5M", "--allow-overwrite",
                       endpoint=proxy.endpoint)
    # every second part is refused (a 400 is not retried): the uploads fail mid-way
    proxy.set_faults([s3_error("InvalidArgument", 400,
                               match={"method": "PUT", "query": "partNumber=2"})])
    data = os.urandom(12 * MiB)
    assert _write_all(mp / "keep", data, os.O_WRONLY | os.O_TRUNC) == errno.EIO
    assert _write_all(mp / "fresh", data, os.O_WRONLY | os.O_CREAT) == errno.EIO
    assert proxy.stats()["faults_total"] >= 2
    assert s3.get_object(Bucket=bucket, Key=pfx + "keep")["Body"].read() == b"old"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=pfx + "fresh")
    wait_for(lambda: not s3.list_multipart_uploads(Bucket=bucket, Prefix=pfx).get("Uploads"),
             what="the failed uploads to be aborted")
    proxy.set_faults([])
    assert (mp / "keep").read_bytes() == b"old"


def test_unsupported_operations_fail_fast_and_markers(mounter, s3, bucket, pfx):
    import fcntl
    s3.put_object(Bucket=bucket, Key=pfx + "f", Body=b"f")
    s3.put_object(Bucket=bucket, Key=pfx + "marker/", Body=b"")  # a directory marker
    mp = mounter.mount(f"{bucket}/{pfx}")
    assert sorted(os.listdir(mp)) == ["f", "marker"]
    assert os.path.isdir(mp / "marker") and os.listdir(mp / "marker") == []
    assert _errno(lambda: os.rmdir(mp / "marker")) == errno.EPERM  # never deletes objects
    assert _errno(lambda: os.mkfifo(mp / "fifo")) == errno.ENOTSUP
    assert _errno(lambda: os.getxattr(mp / "f", "user.x")) == errno.ENOTSUP
    assert _errno(lambda: os.listxattr(mp / "f")) == errno.ENOTSUP
    assert _errno(lambda: os.readlink(mp / "f")) == errno.EINVAL
    with open(mp / "f", "rb") as f:
        assert _errno(lambda: fcntl.lockf(f, fcntl.LOCK_SH)) == errno.ENOTSUP
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    with open(mp / "new", "wb") as f:
        assert libc.fallocate(f.fileno(), 0, 0, 4096) == -1
        assert ctypes.get_errno() == errno.EOPNOTSUPP
        # glibc emulates posix_fallocate by writing past the end: an out-of-order write
        assert _errno(lambda: os.posix_fallocate(f.fileno(), 0, 4096)) == errno.EINVAL
    st = os.statvfs(mp)
    assert st.f_bsize == MiB and st.f_namemax == 255


def test_close_on_another_thread_completes_the_upload(mounter, s3, bucket, pfx):
    import threading
    mp = mounter.mount(f"{bucket}/{pfx}")
    fd = os.open(mp / "threads", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"written on one thread")
    result = {}

    def closer():
        try:
            os.close(fd)
            result["ok"] = True
        except OSError as e:
            result["errno"] = e.errno
    t = threading.Thread(target=closer)
    t.start()
    t.join()
    assert result == {"ok": True}
    # close returned once the object was in S3 (flush, not the later release)
    assert s3.get_object(Bucket=bucket, Key=pfx + "threads")["Body"].read() == \
        b"written on one thread"


def test_callers_from_another_pid_namespace_are_never_the_opener(cli_path, rgw, s3, bucket,
                                                                 pfx, tmp_path):
    """The daemon in a PID namespace of its own (unshare --pid, as in a container): FUSE
    names every caller outside it pid 0. A process that opened a file for writing and its
    child closing its copy of the descriptor were then one process to the daemon: the
    child's close completed the upload, and the parent's next write failed EINVAL. pid 0
    is no process: never the opener, and the upload completes at release."""
    wrapper = tmp_path / "s3flash-in-a-pid-namespace"
    wrapper.write_text(f'#!/bin/sh\nexec unshare --pid --fork --kill-child {cli_path} "$@"\n')
    wrapper.chmod(0o755)
    m = Mount(wrapper, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/{pfx}",
              tmp_path / "m", [], region=rgw.region, log_path=str(tmp_path / "m.log")).start()
    try:
        p = subprocess.run([sys.executable, "-c", r"""
import errno, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"first ")
pid = os.fork()
if pid == 0:
    os.close(fd)                     # the child's copy of the descriptor: a FLUSH
    os._exit(0)
os.waitpid(pid, 0)
try:
    os.write(fd, b"second")
    os.close(fd)
    print("written")
except OSError as e:
    print(errno.errorcode[e.errno])
""", f"{m.dir}/f"], capture_output=True, timeout=60)
        assert p.stdout.decode().strip() == "written", (p.stdout, p.stderr, m.log_tail())

        def uploaded():
            try:
                return s3.get_object(Bucket=bucket, Key=pfx + "f")["Body"].read()
            except s3.exceptions.NoSuchKey:
                return None
        wait_for(lambda: uploaded() is not None, timeout=20, what="the upload at release")
        assert uploaded() == b"first second"
    finally:
        m.stop()


@pytest.mark.parametrize("page", ["1", "2", "3"])
def test_readdir_shadows_a_file_by_its_directory_across_pages(mounter, s3, bucket, pfx, page):
    # "blue" sorts before "blue-a" and "blue.txt", which sort before the prefix "blue/": with
    # small pages the file and its directory come on different pages
    for k in ["sh/blue", "sh/blue-a", "sh/blue.txt", "sh/blue/x", "sh/c"]:
        s3.put_object(Bucket=bucket, Key=pfx + k, Body=b"12345")
    mp = mounter.mount(f"{bucket}/{pfx}", "--page-size", page)
    names = os.listdir(mp / "sh")
    assert sorted(names) == ["blue", "blue-a", "blue.txt", "c"], names
    assert os.path.isdir(mp / "sh" / "blue")
    with os.scandir(mp / "sh") as it:
        kinds = {e.name: e.is_dir() for e in it}
    assert kinds == {"blue": True, "blue-a": False, "blue.txt": False, "c": False}


def test_readdir_of_a_file_being_overwritten_gives_the_bytes_written(mounter, s3, bucket, pfx):
    # the listing still shows the old object (5000 bytes); readdir hands the kernel the
    # new file's size so far, not the old object's
    s3.put_object(Bucket=bucket, Key=pfx + "ow/b", Body=b"o" * 5000)
    mp = mounter.mount(f"{bucket}/{pfx}", "--allow-overwrite", "--metadata-ttl", "60")
    assert os.stat(mp / "ow" / "b").st_size == 5000
    fd = os.open(mp / "ow" / "b", os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"n" * 3000)
        with os.scandir(mp / "ow") as it:
            assert {e.name: e.stat().st_size for e in it} == {"b": 3000}
        assert os.stat(mp / "ow" / "b").st_size == 3000
    finally:
        os.close(fd)
    assert os.stat(mp / "ow" / "b").st_size == 3000
    assert (mp / "ow" / "b").read_bytes() == b"n" * 3000
