"""`s3flash mount` of an S3 Express One Zone directory bucket, against the sink's --express
emulation (bench/sink_express.c: session tokens checked, listings in no order, RenameObject,
appends). docs/SEMANTICS.md ("S3 Express One Zone directory buckets") is the contract:
- rename is one RenameObject (atomic: no CopyObject, no DeleteObject, no moment without
  the object);
- readdir reads a directory's whole (unordered) listing and hands it out sorted, the same
  order and offsets at every call;
- --incremental-upload: open(O_APPEND) of an existing file (the shell's >>) appends through
  PutObject x-amz-write-offset-bytes at the size seen at open; a concurrent append makes
  the handle's next append fail (EIO).
"""
import errno
import os
import subprocess

import pytest

from mountutil import Mount, mount_supported, stop_mounts
from test_express import BUCKET, data, stats, xcli, xsink  # noqa: F401 (fixtures)


@pytest.fixture
def xmount(cli_path, xsink, tmp_path):
    why = mount_supported()
    if why:
        pytest.skip(why)
    mounts = []

    def make(options, source=BUCKET):
        m = Mount(cli_path, f"http://127.0.0.1:{xsink.port}", "AKIDEXPRESSTEST",
                  "express-secret", source, tmp_path / f"m{len(mounts)}", options,
                  log_path=str(tmp_path / f"m{len(mounts)}.log"))
        mounts.append(m)
        return m.start()

    yield make
    stop_mounts(mounts)


def test_rename_is_one_rename_object(xmount, xcli, xsink):
    payload = data(1 << 20, seed=11)
    xcli.ok("cp", "-", f"s3://{BUCKET}/mv/a.bin", input=payload)
    xcli.ok("cp", "-", f"s3://{BUCKET}/mv/old.bin", input=b"old")
    m = xmount(["--allow-rename", "--allow-overwrite", "--metadata-ttl", "0"])
    before = stats(xsink)
    os.rename(f"{m.dir}/mv/a.bin", f"{m.dir}/mv/b.bin")
    after = stats(xsink)
    assert after["renames"] - before["renames"] == 1
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    assert not os.path.exists(f"{m.dir}/mv/a.bin")
    with open(f"{m.dir}/mv/b.bin", "rb") as f:
        assert f.read() == payload
    assert xcli.ok("cat", f"s3://{BUCKET}/mv/b.bin").out == payload
    assert xcli.run("stat", f"s3://{BUCKET}/mv/a.bin").rc != 0
    # over an existing file (allowed by --allow-overwrite): still one request
    before = stats(xsink)
    os.rename(f"{m.dir}/mv/b.bin", f"{m.dir}/mv/old.bin")
    after = stats(xsink)
    assert after["renames"] - before["renames"] == 1
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    assert xcli.ok("cat", f"s3://{BUCKET}/mv/old.bin").out == payload
    # the rules of the mount's rename hold: directories are not renamed
    os.mkdir(f"{m.dir}/mv/d")
    with pytest.raises(OSError) as e:
        os.rename(f"{m.dir}/mv/d", f"{m.dir}/mv/e")
    assert e.value.errno == errno.EOPNOTSUPP


def test_rename_without_overwrite_keeps_the_target(xmount, xcli, xsink):
    xcli.ok("cp", "-", f"s3://{BUCKET}/nr/a", input=b"a")
    xcli.ok("cp", "-", f"s3://{BUCKET}/nr/b", input=b"b")
    m = xmount(["--allow-rename", "--metadata-ttl", "0"])
    with pytest.raises(PermissionError):
        os.rename(f"{m.dir}/nr/a", f"{m.dir}/nr/b")
    assert xcli.ok("cat", f"s3://{BUCKET}/nr/b").out == b"b"
    assert xcli.ok("cat", f"s3://{BUCKET}/nr/a").out == b"a"


def test_readdir_of_unordered_listing_is_complete_sorted_stable(xmount, xcli, xsink):
    files = [f"shard-{i:03d}" for i in range(150)]
    for n in files:
        xcli.ok("cp", "-", f"s3://{BUCKET}/ls/{n}", input=n.encode())
    # directories, and a file its directory of the same name shadows (on another page)
    for k in ["ls/sub/x", "ls/zz/y", "ls/shard-077/inner"]:
        xcli.ok("cp", "-", f"s3://{BUCKET}/{k}", input=b"x")
    m = xmount(["--metadata-ttl", "0", "--page-size", "7"])
    want = sorted(set(files) | {"sub", "zz"})
    seen = []
    for _ in range(3):
        names = os.listdir(f"{m.dir}/ls")
        assert names == want
        seen.append(names)
        with os.scandir(f"{m.dir}/ls") as it:
            kinds = {e.name: e.is_dir() for e in it}
        assert kinds["sub"] and kinds["zz"] and kinds["shard-077"]
        assert not kinds["shard-000"]
    assert seen[0] == seen[1] == seen[2]
    with open(f"{m.dir}/ls/shard-042", "rb") as f:
        assert f.read() == b"shard-042"


def test_append_through_the_shell(xmount, xcli, xsink):
    key = f"s3://{BUCKET}/logs/train.log"
    xcli.ok("cp", "-", key, input=b"step 1\n")
    m = xmount(["--incremental-upload", "--metadata-ttl", "0"])
    path = f"{m.dir}/logs/train.log"
    before = stats(xsink)
    subprocess.run(["sh", "-c", f"echo 'step 2' >> {path}"], check=True, timeout=30)
    subprocess.run(["sh", "-c", f"printf 'step 3\\nstep 4\\n' >> {path}"], check=True, timeout=30)
    after = stats(xsink)
    assert after["appends"] - before["appends"] == 2
    assert after["puts"] == before["puts"] and after["copies"] == before["copies"]
    want = b"step 1\nstep 2\nstep 3\nstep 4\n"
    assert xcli.ok("cat", key).out == want
    with open(path, "rb") as f:
        assert f.read() == want
    assert os.stat(path).st_size == len(want)
    # one open, many writes and a part's worth: appended in order, whole
    big = data(9 << 20, seed=3)
    with open(path, "ab") as f:
        for i in range(0, len(big), 1 << 20):
            f.write(big[i:i + (1 << 20)])
            f.flush()
    assert xcli.ok("cat", key).out == want + big
    # without --incremental-upload, O_APPEND of an existing file is refused as before
    m2 = xmount(["--metadata-ttl", "0"])
    r = subprocess.run(["sh", "-c", f"echo x >> {m2.dir}/logs/train.log"], timeout=30,
                       capture_output=True)
    assert r.returncode != 0 and b"not permitted" in r.stderr


def test_concurrent_append_fails_the_handle(xmount, xcli, xsink):
    key = f"s3://{BUCKET}/logs/race.log"
    xcli.ok("cp", "-", key, input=b"a\n")
    m = xmount(["--incremental-upload", "--metadata-ttl", "0"])
    fd = os.open(f"{m.dir}/logs/race.log", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"mine\n")
        # a child that inherits the descriptor and closes it (subprocess does) appends
        # nothing: only the opener's close does
        assert xcli.ok("cat", key).out == b"a\n"
        xcli.ok("append", "-", key, input=b"theirs\n")  # the object grew behind our back
        with pytest.raises(OSError) as e:
            os.close(fd)  # the append at the size seen at open: InvalidWriteOffset
        fd = None
        assert e.value.errno == errno.EIO
    finally:
        if fd is not None:
            os.close(fd)
    assert xcli.ok("cat", key).out == b"a\ntheirs\n"
