"""S3Writer and S3Reader as Python streams: buffers, positions, threads and the GIL."""

import array
import io
import threading
import time

import pytest
import torch

import s3flash

MiB = 1 << 20


def test_writer_accepts_any_buffer(ckpt, uri, s3, bucket, key):
    parts = [b"bytes-", bytearray(b"bytearray-"), memoryview(b"memoryview-"),
             array.array("i", [1, 2, 3]), torch.arange(4, dtype=torch.int16).numpy(),
             memoryview(b"0123456789")[::2]]  # non-contiguous: copied to contiguous first
    expect = b"".join(bytes(p) if not isinstance(p, memoryview) else p.tobytes() for p in parts)
    with ckpt.writer(uri) as w:
        assert w.writable() and not w.readable() and not w.seekable()
        for p in parts:
            n = w.write(p)
            assert n == memoryview(p).nbytes
        assert w.tell() == len(expect)
        w.flush()
    assert w.closed
    w.close()  # twice: no-op
    with pytest.raises(ValueError):
        w.write(b"x")
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == expect


def test_writer_tensor_memoryview(ckpt, uri, s3, bucket, key):
    t = torch.randn(3 * MiB)  # 12 MiB: a multipart upload
    with ckpt.writer(uri) as w:
        w.write(memoryview(t.numpy()).cast("B"))
    assert w.info["size"] == t.nbytes
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == t.numpy().tobytes()


def test_reader_file_semantics(ckpt, uri, s3, bucket, key):
    data = bytes(range(256)) * 40000  # ~10 MiB
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    with ckpt.reader(uri) as r:
        assert r.readable() and r.seekable() and not r.writable()
        assert r.tell() == 0
        assert r.read(10) == data[:10]
        assert r.tell() == 10
        assert r.seek(1000) == 1000
        buf = bytearray(5000)
        assert r.readinto(buf) == 5000 and bytes(buf) == data[1000:6000]
        assert r.seek(-100, io.SEEK_END) == len(data) - 100
        assert r.read() == data[-100:]
        assert r.read() == b""
        assert r.seek(-50, io.SEEK_CUR) == len(data) - 50
        assert r.read(1000) == data[-50:]
        assert r.seek(len(data) + 10) == len(data) + 10
        assert r.read(10) == b"" and r.readinto(bytearray(4)) == 0
        r.seek(0)
        assert r.read() == data
        assert r.size == len(data)
        assert r.info["etag"]
        with pytest.raises(ValueError):
            r.seek(-1)
        mv = memoryview(bytearray(3 * MiB))
        r.seek(5)
        assert r.readinto(mv) == 3 * MiB and mv.tobytes() == data[5:5 + 3 * MiB]
        assert r.bucket == bucket and r.key == key
    assert r.closed
    with pytest.raises(ValueError):
        r.read(1)


def test_reader_is_lazy(ckpt, bucket):
    r = ckpt.reader(f"s3://{bucket}/not-yet")  # no request yet
    assert r.seek(5) == 5 and r.tell() == 5
    with pytest.raises(FileNotFoundError):
        r.read(1)


def test_client_operations(region, endpoint, bucket, s3):
    c = s3flash.S3Client(region, endpoint=endpoint)
    data = bytearray(b"abc" * 1000)
    c.upload(bucket, "ops/one", data)
    info = c.head_object(bucket, "ops/one")
    assert info["size"] == 3000
    c.upload(bucket, "ops/two", memoryview(data)[:10])
    keys = [o.key for o in c.list_objects(bucket, prefix="ops/", max_keys=1)]
    assert keys == ["ops/one", "ops/two"]
    c.delete_object(bucket, "ops/one")
    with pytest.raises(FileNotFoundError):
        c.head_object(bucket, "ops/one")
    out = bytearray(100)
    assert c.native.download_into(bucket, "ops/two", out) == 10
    assert bytes(out[:10]) == bytes(data[:10])


def _spin_while(fn):
    """Run fn() while another Python thread counts; the count during fn()."""
    stop = threading.Event()
    count = [0]

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = count[0]
    t0 = time.monotonic()
    fn()
    elapsed = time.monotonic() - t0
    during = count[0] - before
    stop.set()
    t.join()
    return during, elapsed


def test_gil_released_during_write_and_read(region, endpoint, bucket, key):
    """Another Python thread keeps running while a large write and a large read wait on
    the network: the GIL is released."""
    cfg = s3flash.S3ClientConfig(memory_limit=32 * MiB)  # write blocks on the pool
    ck = s3flash.S3Checkpoint(region=region, endpoint=endpoint, s3client_config=cfg)
    blob = torch.randint(0, 255, (192 * MiB,), dtype=torch.uint8).numpy()
    uri = f"s3://{bucket}/{key}"
    with ck.writer(uri) as w:
        during, elapsed = _spin_while(lambda: w.write(blob))
    assert elapsed > 0.05
    assert during > 1000, (during, elapsed)
    out = bytearray(len(blob))
    with ck.reader(uri) as r:
        during, elapsed = _spin_while(lambda: r.readinto(out))
    assert during > 1000, (during, elapsed)
    assert out == blob.tobytes()


def test_threads_share_a_writer(ckpt, uri, s3, bucket, key):
    """Writes from several threads are serialized (the C writer is not thread-safe)."""
    chunk = b"x" * 65536
    with ckpt.writer(uri) as w:
        ts = [threading.Thread(target=lambda: [w.write(chunk) for _ in range(50)])
              for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == 4 * 50 * 65536


def test_stream_read_out_of_order_fetches_each_byte_once(region, endpoint, bucket, s3, proxy):
    """1 MiB reads of a stream, some pairs served the second first, as the mount's reader
    gets the kernel's read-ahead (two 1 MiB requests in flight, FUSE async reads): each
    byte is fetched once. A read that came ahead of the front dropped the segment in front
    of it (read past, it seemed), and the read of that segment, next, fetched it again and
    waited for it (bytes down > the object, the issue-32 symptom)."""
    import random
    import re
    size = 64 * MiB
    block = random.Random(7).randbytes(MiB)
    body = b"".join(block[i:] + block[:i] for i in range(size // MiB))
    s3.put_object(Bucket=bucket, Key="ooo/obj", Body=body)
    rng = random.Random(2)
    order = [0, 1, 2, 3]
    for i in range(4, size // MiB, 2):
        order += [i + 1, i] if rng.random() < 0.5 else [i, i + 1]
    c = s3flash.S3Client(region, endpoint=proxy.endpoint)
    r = c.native.open_reader(bucket, "ooo/obj", tail_bytes=-1)
    try:
        proxy.reset()
        for j in order:
            assert r.pread(MiB, j * MiB) == body[j * MiB:(j + 1) * MiB], j
    finally:
        r.close()
    ranges = []
    for e in proxy.stats()["log"]:
        if e["method"] == "GET":
            m = re.match(r"bytes=(\d+)-(\d+)", e.get("range") or "")
            ranges.append((int(m.group(1)), int(m.group(2)) + 1) if m else (0, size))
    fetched = sum(e - s for s, e in ranges)
    assert fetched <= size, (f"{fetched / MiB:.1f} MiB fetched for {size // MiB} MiB",
                             sorted(ranges))


def test_random_read_halves_fetched_ahead_despite_a_read_without(region, bucket, s3, proxy):
    """Random 1 MiB reads each followed by the page past them (the mount's unaligned 1 MiB
    read, as the kernel splits it), one now and then without it (a read the page cache cut
    otherwise): the page of every read after the first few is asked for before the reader
    is asked for it (fetched beside the 1 MiB read, a causal order in the proxy's log; one
    read without a page stopped that until the next page came, a round trip each)."""
    import random
    import re
    size = 96 * MiB
    s3.put_object(Bucket=bucket, Key="halves/obj", Body=random.Random(9).randbytes(size))
    c = s3flash.S3Client(region, endpoint=proxy.endpoint)
    r = c.native.open_reader(bucket, "halves/obj", tail_bytes=-1)
    rng = random.Random(3)
    slots = list(range(size // (3 * MiB)))
    rng.shuffle(slots)
    asked = {}                     # page offset -> when the reader was asked for it
    try:
        proxy.reset()
        for i, slot in enumerate(slots):
            off = slot * 3 * MiB + 4096 * rng.randrange(0, 128)
            assert len(r.pread(MiB, off)) == MiB
            if i % 4 == 3:
                continue           # no page past this one
            asked[off + MiB] = time.monotonic()
            assert len(r.pread(4096, off + MiB)) == 4096
    finally:
        r.close()
    sent = {}
    for e in proxy.stats()["log"]:
        m = re.match(r"bytes=(\d+)-(\d+)", e.get("range") or "")
        if e["method"] == "GET" and m:
            sent.setdefault(int(m.group(1)), e["time"])
    late = sorted(p for p, t in asked.items() if p not in sent or sent[p] >= t)
    # the first reads: two jumps before reads count as random, and the first page
    assert len(late) <= 3, (len(late), len(asked), late)
