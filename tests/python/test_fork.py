"""fork(): a client used in the parent works in the child (which builds its own), as in
DataLoader workers and multiprocessing pools with the 'fork' start method."""

import multiprocessing
import os
import signal
import time
import traceback

import pytest
import torch

import s3flash

MiB = 1 << 20


def _wait(pid, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


def _in_child(fn):
    """Run fn() in a forked child; its exit code (0: fn returned True)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            torch.set_num_threads(1)  # as DataLoader workers do
            code = 0 if fn() else 3
        except BaseException:
            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    return _wait(pid)


def test_fork_child_uses_parent_client(ckpt, bucket, key):
    sd = {"w": torch.randn(2 * MiB), "i": torch.arange(100)}  # 8 MiB: parts, read-ahead
    uri = f"s3://{bucket}/{key}"
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    with ckpt.reader(uri) as r:  # the parent's client is built and its threads run
        torch.load(r)
    native = ckpt.client.native
    parent_pid = native.pid
    assert parent_pid == os.getpid()
    open_reader = ckpt.reader(uri)
    open_reader.read(100)  # opened in the parent, used again in the child

    def child():
        out = torch.load(ckpt.reader(uri))
        ok = torch.equal(out["w"], sd["w"]) and torch.equal(out["i"], sd["i"])
        assert native.pid == os.getpid() and native.forks_seen == 1
        with ckpt.writer(uri + ".child") as w2:
            torch.save({"from": torch.tensor([os.getpid()])}, w2)
        open_reader.seek(0)
        ok = ok and open_reader.read(4) == b"PK\x03\x04"
        return ok

    assert _in_child(child) == 0
    # the parent's client is untouched and still works
    assert native.pid == parent_pid and native.forks_seen == 0
    with ckpt.reader(uri + ".child") as r:
        assert torch.load(r)["from"].item() != os.getpid()
    assert open_reader.read(4) == open_reader_bytes(ckpt, uri, 100, 4)


def open_reader_bytes(ckpt, uri, off, n):
    with ckpt.reader(uri) as r:
        r.seek(off)
        return r.read(n)


@pytest.mark.parametrize("new_size", ["same", "larger"])
def test_fork_reader_stays_pinned_to_parent_object(ckpt, bucket, key, s3, new_size):
    """A reader opened in the parent and used again in a forked child reads the object the
    parent opened: replaced in between (by boto3, from the parent), the child's read fails
    (If-Match on the parent's ETag) instead of returning the new object's bytes after the
    old ones, or reading to the new size."""
    old = b"A" * (24 * MiB)
    s3.put_object(Bucket=bucket, Key=key, Body=old)
    r = ckpt.reader(f"s3://{bucket}/{key}")
    assert r.read(100) == b"A" * 100
    parent_etag = r.info["etag"]
    go_r, go_w = os.pipe()

    def child():
        os.close(go_w)
        assert os.read(go_r, 1) == b"g"  # the object is replaced
        try:
            data = r.read(MiB)  # reopens in the child: pinned to the parent's ETag and size
        except s3flash.S3Exception as e:
            print("child read failed as expected:", e, flush=True)
            return e.status in ("S3F_ERR_PRECONDITION_FAILED", "S3F_ERR_NOT_FOUND") and \
                r.info["etag"] == parent_etag and r.size == len(old)
        print(f"child read {len(data)} bytes of the replaced object: {data[:8]!r}", flush=True)
        return False

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 3
        except BaseException:
            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    os.close(go_r)
    body = b"B" * (len(old) if new_size == "same" else 30 * MiB)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    os.write(go_w, b"g")
    os.close(go_w)
    assert _wait(pid) == 0
    # the parent's own reader is pinned too (it always was): its next read fails as well
    with pytest.raises(s3flash.S3Exception):
        r.read()  # the rest: beyond what its read-ahead holds
    r.close()


def test_fork_during_parent_transfer(ckpt, bucket, key):
    """A fork while a writer of the parent is open: the child cannot use that writer (it is
    the parent's), but it can save on its own, and the parent's upload completes."""
    uri = f"s3://{bucket}/{key}"
    w = ckpt.writer(uri)
    w.write(b"a" * (10 * MiB))

    def child():
        try:
            w.write(b"b")
        except RuntimeError as e:
            assert "another process" in str(e)
        else:
            return False
        s3flash.save({"x": 1}, uri + ".c", region=ckpt.region, endpoint=ckpt.endpoint)
        return True

    assert _in_child(child) == 0
    w.write(b"c" * MiB)
    w.close()
    assert w.info["size"] == 11 * MiB
    assert s3flash.load(uri + ".c", region=ckpt.region, endpoint=ckpt.endpoint) == {"x": 1}


class _Shards(torch.utils.data.Dataset):
    def __init__(self, ckpt, uris):
        self.ckpt = ckpt
        self.uris = uris

    def __len__(self):
        return len(self.uris)

    def __getitem__(self, i):
        with self.ckpt.reader(self.uris[i]) as r:
            return torch.load(r)["x"]


def test_dataloader_fork_workers(ckpt, bucket, key):
    uris = [f"s3://{bucket}/{key}.{i}" for i in range(8)]
    for i, u in enumerate(uris):
        with ckpt.writer(u) as w:
            torch.save({"x": torch.full((1000,), i)}, w)
    ckpt.reader(uris[0]).read(1)  # the parent's client is live before the workers fork
    loader = torch.utils.data.DataLoader(_Shards(ckpt, uris), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    got = [int(t[0]) for t in loader]
    assert sorted(got) == list(range(8))


_POOL_CKPT = None


def _pool_load(u):
    with _POOL_CKPT.reader(u) as r:
        return int(torch.load(r)["x"].sum())


def test_multiprocessing_pool_fork(ckpt, bucket, key):
    global _POOL_CKPT
    _POOL_CKPT = ckpt
    uris = [f"s3://{bucket}/{key}.{i}" for i in range(6)]
    for i, u in enumerate(uris):
        s3flash.save({"x": torch.full((10,), i)}, u, region=ckpt.region,
                     endpoint=ckpt.endpoint)
    _pool_load(uris[0])
    with multiprocessing.get_context("fork").Pool(3) as pool:
        assert pool.map(_pool_load, uris) == [10 * i for i in range(6)]
