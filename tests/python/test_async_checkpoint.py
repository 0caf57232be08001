"""s3flash.AsyncCheckpointer against Ceph RGW: staging into reused host buffers, the background
upload, the local tier, the manifest commit, retention, and SIGKILL at random points.

The upload is made slow at the socket by tests/servers/faultproxy.py (a throttle rule), so that
what happens "while the upload runs" provably does: the tests assert on the proxy's log and on
what is in the bucket, never on sleeps.
"""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from pathlib import Path

import pytest
import torch

import s3flash
from conftest import exists, faultproxy, integration_faults
from helpers import assert_same_tensor

MiB = 1 << 20
HERE = Path(__file__).resolve()
# SIGKILL seeds: S3FLASH_CKPT_KILL_SEEDS=N runs seeds 0..N-1 (20 in CI, about 60 s)
KILL_SEEDS = list(range(int(os.environ.get("S3FLASH_CKPT_KILL_SEEDS", "20"))))


@pytest.fixture
def prefix(request):
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}/".replace("[", "-").replace("]", "")


def _throttle(bps, path=None):
    match = {"method": "PUT"}
    if path:
        match["path"] = path
    return {"match": match, "action": "throttle", "bytes_per_second": bps,
            "direction": "request", "client_rcvbuf": 65536}


def _wait_for(cond, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _model_and_optimizer(seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64),
                            torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    for _ in range(2):
        opt.zero_grad()
        m(torch.randn(4, 32, generator=g)).square().mean().backward()
        opt.step()
    base = torch.arange(64, dtype=torch.float64)
    extra = {
        "bf16": torch.randn(17, generator=g).to(torch.bfloat16),
        "f16": torch.randn(5, 3, generator=g).to(torch.float16),
        "i64": torch.arange(-7, 9, dtype=torch.int64),
        "u8": torch.arange(200, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "c64": torch.randn(4, generator=g, dtype=torch.complex64),
        "empty": torch.empty(0, 3),
        "base": base,
        "view": base[10:20],            # shares base's storage
        "strided": base.view(8, 8).t(),  # shares it too, transposed
        "scalar": torch.tensor(3.5),
    }
    return m, opt, {"model": m.state_dict(), "optimizer": opt.state_dict(), "extra": extra,
                    "epoch": 3, "names": ["a", "b"]}


def _assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert_same_tensor(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def _keys(s3, bucket, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


def _uploads(s3, bucket, prefix):
    return [u for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
            .get("Uploads", [])]


@pytest.mark.parametrize("in_place", [True, False])
def test_round_trip_every_tier(region, endpoint, bucket, prefix, s3, tmp_path, in_place):
    """Model + optimizer, several dtypes, shared storages: the same bits back from the local
    tier, from S3, through s3flash.load and through plain torch.load of the object's bytes.
    In place (the zip built around the staged bytes, uploaded from the arena) and streamed
    (torch.save into an S3 writer); the object is a valid zip either way (every CRC)."""
    _, _, sd = _model_and_optimizer()
    local = tmp_path / "local"
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint, local_dir=str(local),
                                   in_place=in_place) as ck:
        assert ck.latest() is None
        info = ck.save(sd, 7).result()
        assert (ck.in_place_saves, ck.stream_saves) == ((1, 0) if in_place else (0, 1))
        sid = info.manifest["save_id"]
        assert info.step == 7 and info.seq == 1
        assert info.local_path == str(local / "step-000000000007" / sid)
        assert ck.latest() == 7
        assert _keys(s3, bucket, prefix) == [f"{prefix}commits/0000000000000001.json",
                                             f"{prefix}step-000000000007/{sid}/state.pt"]
        m = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}commits/"
                                     "0000000000000001.json")["Body"].read())
        assert m == info.manifest
        assert m["step"] == 7 and m["format"] == "s3flash.checkpoint" and m["version"] == 2
        assert m["seq"] == 1
        [o] = m["objects"]
        body = s3.get_object(Bucket=bucket, Key=o["key"])["Body"].read()
        assert o["size"] == len(body)
        import zlib
        assert o["crc32"] == f"{zlib.crc32(body):08x}"
        assert (local / "step-000000000007" / sid / "state.pt").read_bytes() == body
        import io
        import zipfile
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            assert z.testzip() is None
            assert z.namelist()[0] == "archive/data.pkl"

        got = ck.load()
        assert ck.last_load_tier == "local"
        _assert_same(sd, got)
        _assert_same(sd, ck.load(mmap=True))   # the local copy mapped
        v = got["extra"]["view"]
        assert v.untyped_storage().data_ptr() == got["extra"]["base"].untyped_storage().data_ptr()

        _assert_same(sd, torch.load(io.BytesIO(body)))                   # plain torch.load
        _assert_same(sd, s3flash.load(f"s3://{bucket}/{o['key']}", region=region,
                                      endpoint=endpoint))                 # s3flash's reader

    # without the local tier (another node): from S3
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint) as ck2:
        got = ck2.load(7, map_location="cpu", mmap=True)   # mmap: local only, ignored
        assert ck2.last_load_tier == "s3"
        _assert_same(sd, got)
        with pytest.raises(FileNotFoundError):
            ck2.load(8)


def test_in_place_falls_back_to_streaming(region, endpoint, bucket, prefix):
    """torch_save_kwargs, or a tensor that is not staged in the arena (a sparse one, cloned),
    send the save through torch.save into an S3 writer; the checkpoint is the same."""
    sd = {"w": torch.randn(100), "sp": torch.eye(4).to_sparse()}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint) as ck:
        ck.save(sd, 1).result()
        assert (ck.in_place_saves, ck.stream_saves) == (0, 1)
        got = ck.load(1)
        assert torch.equal(got["w"], sd["w"]) and torch.equal(got["sp"].to_dense(), torch.eye(4))
        ck.save({"w": sd["w"]}, 2, pickle_protocol=4).result()
        assert (ck.in_place_saves, ck.stream_saves) == (0, 2)
        ck.save({"w": sd["w"]}, 3).result()
        assert (ck.in_place_saves, ck.stream_saves) == (1, 2)
        assert torch.equal(ck.load(3)["w"], sd["w"])
        # a pickle bigger than the room after the storages: streamed, then the room grows
        big = {"w": sd["w"], "blob": b"x" * (3 << 20)}
        ck.save(big, 4).result()
        assert (ck.in_place_saves, ck.stream_saves) == (1, 3)
        ck.save(big, 5).result()
        assert (ck.in_place_saves, ck.stream_saves) == (2, 3)
        got = ck.load(5)
        assert got["blob"] == big["blob"] and torch.equal(got["w"], sd["w"])


def test_staging_buffers_are_reused(region, endpoint, bucket, prefix):
    """A second save of a state of the same shapes allocates no staging memory: the same
    arena, the same address; a bigger state grows it once."""
    sd = {f"t{i}": torch.randn(1000 + i) for i in range(8)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint) as ck:
        ck.save(sd, 1).result()
        ptr, cap = ck.stager.arena_ptr(), ck.stager.capacity
        assert ck.stager.allocations == 1 and ptr != 0
        for s in range(2, 5):
            for t in sd.values():
                t.add_(1)
            ck.save(sd, s).result()
            assert ck.stager.allocations == 1
            assert ck.stager.arena_ptr() == ptr and ck.stager.capacity == cap
        _assert_same(sd, ck.load(4))
        sd["big"] = torch.randn(100_000)
        ck.save(sd, 5).result()
        assert ck.stager.allocations == 2
        _assert_same(sd, ck.load(5))


def test_mutation_while_uploading(region, bucket, prefix, proxy, s3):
    """Training changes its tensors as soon as save() returns, while the upload is provably
    still running (throttled at the socket; the object and the manifest do not exist yet):
    the checkpoint holds the values of the step it was taken at."""
    proxy.set_faults([_throttle(16 * MiB)])
    sd = {"w": torch.randn(24 * MiB // 4), "b": torch.randn(1000),
          "opt": {"step": 1, "m": torch.zeros(64)}}
    want = {"w": sd["w"].clone(), "b": sd["b"].clone(), "opt": {"step": 1, "m": torch.zeros(64)}}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint) as ck:
        fut = ck.save(sd, 1)
        _wait_for(lambda: any(e["method"] == "PUT" and "state.pt" in e["path"]
                              for e in proxy.stats()["log"]))
        # the upload has begun and not finished: no object, no manifest, the future not done
        assert not fut.done()
        assert _keys(s3, bucket, prefix) == []
        sd["w"].add_(1.0)
        sd["b"].zero_()
        sd["opt"]["m"].fill_(5)
        sd["opt"]["step"] = 2
        sd["opt"]["new"] = torch.ones(3)
        mutated_at = time.monotonic()
        info = fut.result()
        assert info.step == 1
        put_times = [e["time"] for e in proxy.stats()["log"] if e["method"] == "PUT"
                     and "state.pt" in e["path"]]
        assert put_times and min(put_times) < mutated_at
        _assert_same(want, ck.load(1))


def test_on_busy_wait_and_skip(region, bucket, prefix, proxy, s3):
    """While the previous save still holds the host buffers (the upload throttled, the
    client's buffer pool small), "skip" drops the step with a warning and "wait" blocks
    until the buffers are free; both keep one set of buffers."""
    proxy.set_faults([_throttle(32 * MiB)])
    cfg = s3flash.S3ClientConfig(memory_limit=16 * MiB)
    sd = {"w": torch.randn(32 * MiB // 4)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint, s3client_config=cfg,
                                   on_busy="skip") as ck:
        f1 = ck.save(sd, 1)
        with pytest.warns(RuntimeWarning, match="step 2 skipped"):
            f2 = ck.save(sd, 2)
        assert f2.done() and f2.result() is None
        assert f1.result().step == 1
        assert ck.steps() == [1]
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint, s3client_config=cfg) as ck:
        f3 = ck.save(sd, 3)
        sd["w"].add_(1)
        f4 = ck.save(sd, 4)  # waits for step 3's serialization, then stages
        assert ck.stager.allocations == 1
        assert f3.result().step == 3 and f4.result().step == 4
        assert ck.steps() == [1, 3, 4]
        _assert_same({"w": sd["w"]}, ck.load(4))


def test_corrupt_local_copy_falls_back_to_s3(region, endpoint, bucket, prefix, tmp_path):
    sd = {"w": torch.randn(10000), "i": torch.arange(100)}
    local = tmp_path / "local"
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint, local_dir=str(local)) as ck:
        path = Path(ck.save(sd, 1).result().local_path) / "state.pt"
        ck.load()
        assert ck.last_load_tier == "local"
        # one flipped byte in the middle, same size: the CRC-32 does not match
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
        _assert_same(sd, ck.load())
        assert ck.last_load_tier == "s3"
        # truncated
        path.write_bytes(bytes(data[:100]))
        _assert_same(sd, ck.load(1))
        assert ck.last_load_tier == "s3"
        # gone
        path.unlink()
        _assert_same(sd, ck.load(1))
        assert ck.last_load_tier == "s3"


def test_retention_never_deletes_last_committed(region, bucket, prefix, proxy, s3, tmp_path):
    """keep_remote / keep_local keep the newest committed steps; older ones go only after a
    new one is committed (checked while a save is uploading); a failed save (its manifest
    refused) commits nothing and deletes nothing, and its leftovers go with the next
    retention."""
    local = tmp_path / "local"
    sd = {"w": torch.zeros(1000)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint, local_dir=str(local),
                                   keep_local=1, keep_remote=2,
                                   s3client_config=s3flash.S3ClientConfig(max_attempts=1)
                                   ) as ck:
        for s in (1, 2, 3):
            sd["w"].fill_(s)
            ck.save(sd, s).result()
            ck.wait()
        assert ck.steps() == [2, 3]
        assert sorted(os.listdir(local)) == ["step-000000000003"]
        assert len(os.listdir(local / "step-000000000003")) == 1

        # step 4 uploads slowly: steps 2 and 3 are both still there meanwhile
        sd["w"] = torch.randn(MiB)
        proxy.set_faults([_throttle(4 * MiB, path="state.pt")])
        f4 = ck.save(sd, 4)
        assert not f4.done()
        assert ck.steps() == [2, 3]
        f4.result()
        ck.wait()
        assert ck.steps() == [3, 4]

        # step 5: its manifest refused (403, no retry): not committed, nothing deleted
        proxy.set_faults([integration_faults().s3_error("AccessDenied", 403, match={
            "method": "PUT", "path": "/commits/"})])
        f5 = ck.save(sd, 5)
        with pytest.raises(s3flash.S3PermissionError):
            f5.result()
        ck.wait()
        assert ck.steps() == [3, 4] and ck.latest() == 4
        assert [k for k in _keys(s3, bucket, prefix)
                if "step-000000000005/" in k]  # left over
        _assert_same(sd, ck.load())
        # keep_remote=1 would keep only the newest committed step: 4, never none
        proxy.set_faults([])
    # the next writer (the first one is closed: retention_window_s=0 says no other writer is
    # saving) removes the first one's commits and leftovers at once
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint, keep_remote=1,
                                   retention_window_s=0) as ck:
        info = ck.save(sd, 6).result()
        ck.wait()
        assert ck.steps() == [6] and info.seq == 5
        # the uncommitted step 5 went with the retention (older than the window)
        assert _keys(s3, bucket, prefix) == [
            f"{prefix}commits/0000000000000005.json",
            f"{prefix}step-000000000006/{info.manifest['save_id']}/state.pt"]


def test_uncommitted_steps_are_not_seen(region, endpoint, bucket, prefix, s3):
    """latest() sees only commits whose manifest is there and matches their objects."""
    sd = {"w": torch.randn(100)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint) as ck:
        info = ck.save(sd, 1).result()
        c = f"{prefix}commits/"
        # step 2: an object without a commit (a save killed before its commit)
        s3.put_object(Bucket=bucket, Key=f"{prefix}step-000000000002/x/state.pt", Body=b"x" * 10)
        # commit 2 (step 3): its object has another size
        m = dict(info.manifest, step=3, seq=2)
        m["objects"] = [dict(m["objects"][0], key=f"{prefix}step-000000000003/y/state.pt")]
        s3.put_object(Bucket=bucket, Key=m["objects"][0]["key"], Body=b"y" * 5)
        s3.put_object(Bucket=bucket, Key=c + "0000000000000002.json", Body=json.dumps(m).encode())
        # commit 3 (step 4): its object is there with the size named, another ETag
        m = dict(info.manifest, step=4, seq=3)
        m["objects"] = [dict(m["objects"][0], key=f"{prefix}step-000000000004/z/state.pt")]
        s3.put_object(Bucket=bucket, Key=m["objects"][0]["key"],
                      Body=b"z" * m["objects"][0]["size"])
        s3.put_object(Bucket=bucket, Key=c + "0000000000000003.json", Body=json.dumps(m).encode())
        # commit 4: not JSON; commit 5: the sequence number in the name is not the manifest's
        s3.put_object(Bucket=bucket, Key=c + "0000000000000004.json", Body=b"{not json")
        s3.put_object(Bucket=bucket, Key=c + "0000000000000005.json",
                      Body=json.dumps(info.manifest).encode())
        assert ck.latest() == 1 and ck.steps() == [1]
        _assert_same(sd, ck.load())
        for s in (2, 3, 4):
            with pytest.raises(FileNotFoundError):
                ck.load(s)
        # the next commit takes the number after the highest record: 6; the records above
        # were written after this writer's first commit, by a writer without an id
        with pytest.warns(s3flash.ConcurrentWriterWarning, match="a writer without an id"):
            assert ck.save(sd, 7).result().seq == 6
        assert ck.steps() == [1, 7]


def test_reads_the_version_1_layout(region, endpoint, bucket, prefix, s3, tmp_path):
    """Checkpoints of the previous layout (step-N/state.pt + step-N/manifest.json, no
    sequence number) are still listed and loaded, from S3 and from their local copy; they
    come before every numbered commit, and retention removes them like any other commit."""
    import io
    import zlib
    local = tmp_path / "local"
    for step in (5, 6):
        buf = io.BytesIO()
        torch.save({"w": torch.full((10,), float(step))}, buf)
        body = buf.getvalue()
        sdir = f"{prefix}step-{step:012d}/"
        etag = s3.put_object(Bucket=bucket, Key=sdir + "state.pt", Body=body)["ETag"]
        m = {"format": "s3flash.checkpoint", "version": 1, "step": step, "time": 0,
             "objects": [{"name": "state.pt", "key": sdir + "state.pt", "size": len(body),
                          "crc32": f"{zlib.crc32(body):08x}", "etag": etag.strip('"')}]}
        s3.put_object(Bucket=bucket, Key=sdir + "manifest.json", Body=json.dumps(m).encode())
        d = local / f"step-{step:012d}"
        d.mkdir(parents=True)
        (d / "state.pt").write_bytes(body)
        (d / "manifest.json").write_text(json.dumps(m))
    # the version 1 commits were written just now by no writer of this checkpointer:
    # retention_window_s=0 lets its retention remove them at once
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint, local_dir=str(local), keep_remote=2,
                                   keep_local=1, retention_window_s=0) as ck:
        assert ck.steps() == [5, 6] and ck.latest() == 6
        assert [c.seq for c in ck.commits()] == [None, None]
        assert torch.equal(ck.load()["w"], torch.full((10,), 6.0))
        assert ck.last_load_tier == "local"
        ck.local_dir = None
        assert torch.equal(ck.load(5)["w"], torch.full((10,), 5.0))
        assert ck.last_load_tier == "s3"
        ck.local_dir = str(local)
        # a numbered commit of an older step is still the newest
        info = ck.save({"w": torch.zeros(3)}, 4).result()
        ck.wait()
        assert info.seq == 1 and ck.latest() == 4 and ck.steps() == [6, 4]
        assert not exists(s3, bucket, f"{prefix}step-000000000005/manifest.json")
        assert not exists(s3, bucket, f"{prefix}step-000000000005/state.pt")
        assert sorted(os.listdir(local)) == ["step-000000000004"]


EXIT_CHILD = textwrap.dedent("""
    import sys, torch, s3flash
    region, endpoint, uri = sys.argv[1:4]
    ck = s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint)
    ck.save({"w": torch.full((6 * 2**20,), 5.0)}, 5)
    # no close(), no wait(): the interpreter exits with the save in the background
""")


def test_exit_without_close_finishes_the_save(region, endpoint, bucket, prefix, s3):
    """A script that returns right after save(): the save commits before the interpreter
    exits (without the exit hook the daemon thread is cut off mid-upload: no commit, and
    the process aborts)."""
    uri = f"s3://{bucket}/{prefix}"
    r = subprocess.run([sys.executable, "-c", EXIT_CHILD, region, endpoint, uri],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint) as ck:
        assert ck.latest() == 5
        assert torch.equal(ck.load()["w"], torch.full((6 * 2**20,), 5.0))
    assert not _uploads(s3, bucket, prefix)


KILL_CHILD = textwrap.dedent("""
    import sys, torch, s3flash
    region, endpoint, uri, local = sys.argv[1:5]
    cfg = s3flash.S3ClientConfig(memory_limit=16 * 2**20)
    ck = s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint, local_dir=local,
                                   keep_remote=2, keep_local=1, s3client_config=cfg)
    sd = {"w": torch.zeros(3 * 2**20), "b": torch.zeros(1000, dtype=torch.int64),
          "opt": {"step": 0}}
    step = 0
    def done(f, s):  # on the checkpointer's thread: one write a line, never interleaved
        if f.exception() is None:
            sys.stdout.write(f"COMMITTED {s}\\n"); sys.stdout.flush()
    while True:
        step += 1
        sd["w"].fill_(step); sd["b"].fill_(step); sd["opt"]["step"] = step
        f = ck.save(sd, step)
        sys.stdout.write(f"STAGED {step}\\n"); sys.stdout.flush()
        f.add_done_callback(lambda f, s=step: done(f, s))
        sd["w"].fill_(-1)  # training goes on at once
""")


@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_sigkill_at_random_points(region, bucket, proxy, s3, tmp_path, seed):
    """A process saving in the background, SIGKILLed at a random point (after a random
    event of its saves, plus a random delay): latest() is always a complete checkpoint of
    its step, never older than the last commit the process reported, from S3 and from the
    local tier; cleanup_uploads removes what the killed upload left."""
    rng = random.Random(seed)
    prefix = f"kill-{seed}-{uuid.uuid4().hex[:6]}/"
    uri = f"s3://{bucket}/{prefix}"
    local = tmp_path / "local"
    proxy.set_faults([_throttle(48 * MiB)])
    event = (rng.choice(["STAGED", "COMMITTED"]), rng.randint(1, 3))
    delay = rng.uniform(0, 0.4)
    p = subprocess.Popen([sys.executable, "-c", KILL_CHILD, region, proxy.endpoint, uri,
                          str(local)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    committed = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            kind, s = line.split()
            if kind == "COMMITTED":
                committed = max(committed, int(s))
            if (kind, int(s)) == event:
                break
        time.sleep(delay)  # the random point of the kill, not a wait for an outcome
    finally:
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
    for line in out.splitlines():  # reported before the kill landed
        kind, s = line.split()
        if kind == "COMMITTED":
            committed = max(committed, int(s))
    assert p.returncode == -signal.SIGKILL

    proxy.set_faults([])
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   local_dir=str(local)) as ck:
        latest = ck.latest()
        if latest is None:  # killed before the first commit
            assert committed == 0, (committed, event)
            latest = 0
        assert latest >= committed, (latest, committed, event)
        for tier_dir in ((str(local), None) if latest else ()):
            ck.local_dir = tier_dir
            got = ck.load()
            assert torch.equal(got["w"], torch.full((3 * 2**20,), float(latest)))
            assert torch.equal(got["b"], torch.full((1000,), latest, dtype=torch.int64))
            assert got["opt"] == {"step": latest}
        removed = ck.cleanup_uploads(older_than=0)
        assert not _uploads(s3, bucket, prefix)
        # a new save after the crash commits and becomes latest
        got = {"w": torch.zeros(1), "b": torch.zeros(1), "opt": {}}
        ck.local_dir = str(local)
        ck.save(got, latest + 1).result()
        assert ck.latest() == latest + 1
    print(f"seed {seed}: kill after {event} + {delay:.3f}s: latest {latest}, "
          f"last reported commit {committed}, uploads aborted {len(removed)}")


def _kill_when_held(proxy, rule, child, region, uri, local):
    """Run `child` (a background saver) through the fault proxy with `rule`, SIGKILL it as
    soon as the proxy holds the request the rule matches (seen in its log), then lift the
    rule. Returns what the child printed."""
    proxy.set_faults([rule])
    p = subprocess.Popen([sys.executable, "-c", child, region, proxy.endpoint, uri,
                          str(local)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        def held():
            assert p.poll() is None, p.stderr.read()
            return any(e["rule"] == 0 and (e["acted"] is not None or rule["action"] == "delay")
                       for e in proxy.stats()["log"])
        _wait_for(held, timeout=120)
    finally:
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
    assert p.returncode == -signal.SIGKILL
    proxy.set_faults([])
    return out


PHASES = {
    # a part of step 2's object held mid-body: the upload is in progress
    "part": ({"match": {"method": "PUT", "path": "step-000000000002/",
                        "query": "partNumber=2"},
              "action": "stall", "at": 1000, "seconds": 600, "direction": "request"}, 1),
    # step 2's object complete, its commit held mid-body: the commit has not happened
    "manifest": ({"match": {"method": "PUT", "path": r"/commits/0000000000000002\.json$"},
                  "action": "stall", "at": 10, "seconds": 600, "direction": "request"}, 1),
    # step 3 committed, the retention's delete of commit 1 held
    "retention": ({"match": {"method": "DELETE",
                             "path": r"/commits/0000000000000001\.json$"},
                   "action": "delay", "seconds": 600}, 3),
}


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_sigkill_at_each_phase(region, bucket, proxy, s3, tmp_path, phase):
    """SIGKILL while the fault proxy holds one request of a chosen phase of the background
    save (seen in its log): the upload, the commit, the retention. The last committed step
    stays latest() and loads, from both tiers; the killed step is not visible; a new save
    commits and its retention removes the leftovers (retention_window_s=0: the killed
    writer is known to be gone)."""
    rule, want_latest = PHASES[phase]
    prefix = f"phase-{phase}-{uuid.uuid4().hex[:6]}/"
    uri = f"s3://{bucket}/{prefix}"
    local = tmp_path / "local"
    _kill_when_held(proxy, rule, KILL_CHILD, region, uri, local)
    step2 = f"{prefix}step-000000000002/"
    if phase == "part":
        assert not [k for k in _keys(s3, bucket, prefix) if k.startswith(step2)]
        [up] = _uploads(s3, bucket, prefix)
        assert up["Key"].startswith(step2) and up["Key"].endswith("/state.pt")
    if phase == "manifest":
        assert [k for k in _keys(s3, bucket, prefix) if k.startswith(step2)]
        assert not exists(s3, bucket, f"{prefix}commits/0000000000000002.json")
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   local_dir=str(local), keep_remote=2,
                                   retention_window_s=0) as ck:
        assert ck.latest() == want_latest
        for tier_dir in (str(local), None):
            ck.local_dir = tier_dir
            got = ck.load()
            assert torch.equal(got["w"], torch.full((3 * 2**20,), float(want_latest)))
            assert got["opt"] == {"step": want_latest}
        ck.local_dir = str(local)
        ck.cleanup_uploads()
        assert not _uploads(s3, bucket, prefix)
        ck.save({"w": torch.zeros(1)}, 10).result()
        ck.wait()
        assert ck.steps() == [want_latest, 10]
        keys = _keys(s3, bucket, prefix)
        assert {k.split("/")[1] for k in keys if "/commits/" not in k} == {
            f"step-{want_latest:012d}", "step-000000000010"}
        assert len([k for k in keys if "/commits/" in k]) == 2


RESAVE_CHILD = textwrap.dedent("""
    import sys, torch, s3flash
    region, endpoint, uri, local = sys.argv[1:5]
    cfg = s3flash.S3ClientConfig(memory_limit=16 * 2**20)
    ck = s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint, local_dir=local,
                                   keep_remote=1, keep_local=1, s3client_config=cfg)
    sd = {"w": torch.zeros(3 * 2**20), "opt": {"v": 0}}
    for v in (1, 2):   # step 100, then step 100 again (a loop resumed from latest())
        sd["w"].fill_(v); sd["opt"]["v"] = v
        ck.save(sd, 100).result()
        print("COMMITTED", v, flush=True)
    ck.close()
    print("DONE", flush=True)
""")

# Each point of a re-save of step 100 (keep_remote=1): (the rule holding it, the values that
# must load after the kill: 1 = the first commit, 2 = the re-save's).
RESAVE_PHASES = {
    # the re-save's object uploading (its second part held)
    "upload": ({"match": {"method": "PUT", "path": "step-000000000100/",
                          "query": "partNumber=2", "nth": 2},
                "action": "stall", "at": 1000, "seconds": 600, "direction": "request"}, 1),
    # the re-save's object complete, its commit held mid-body
    "commit": ({"match": {"method": "PUT", "path": r"/commits/0000000000000002\.json$"},
                "action": "stall", "at": 10, "seconds": 600, "direction": "request"}, 1),
    # committed; the retention's delete of the first commit held
    "uncommit": ({"match": {"method": "DELETE", "path": r"/commits/0000000000000001\.json$"},
                  "action": "delay", "seconds": 600}, 2),
    # commit 1 removed; the delete of its objects held
    "objects": ({"match": {"method": "POST", "query": "delete"},
                 "action": "delay", "seconds": 600}, 2),
}


@pytest.mark.parametrize("phase", sorted(RESAVE_PHASES))
def test_sigkill_during_resave(region, bucket, proxy, s3, tmp_path, phase):
    """SIGKILL at each point of a re-save of a committed step (keep_remote=1): step 100 is
    always loadable, from both tiers, with the values of a whole commit: the first one
    until the re-save has committed, the re-save's after (never none, never a mix). The next
    writer (retention_window_s=0: the killed one is known to be gone) removes the rest."""
    rule, want = RESAVE_PHASES[phase]
    prefix = f"resave-{phase}-{uuid.uuid4().hex[:6]}/"
    uri = f"s3://{bucket}/{prefix}"
    local = tmp_path / "local"
    out = _kill_when_held(proxy, rule, RESAVE_CHILD, region, uri, local)
    assert ("COMMITTED 2" in out) == (want == 2), out
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   local_dir=str(local), keep_remote=1,
                                   retention_window_s=0) as ck:
        assert ck.latest() == 100 and ck.steps() == [100]
        for tier_dir in (str(local), None):
            ck.local_dir = tier_dir
            got = ck.load(100)
            assert torch.equal(got["w"], torch.full((3 * 2**20,), float(want)))
            assert got["opt"] == {"v": want}
        ck.local_dir = str(local)
        ck.cleanup_uploads()
        info = ck.save({"w": torch.zeros(1)}, 100).result()
        ck.wait()
        assert ck.steps() == [100] and torch.equal(ck.load()["w"], torch.zeros(1))
        keys = _keys(s3, bucket, prefix)
        assert keys == [info.commit_uri.split("/", 3)[3], info.manifest["objects"][0]["key"]]


def test_failed_resave_keeps_the_commit(region, bucket, prefix, proxy, s3, tmp_path):
    """keep_remote=1: step 100 committed, saved again, and the new commit's PUT answered
    500 (every attempt): step 100 is still latest() and loads with its first values, from
    S3 and from the local tier (the re-save wrote its object under a name of its own, so
    the committed bytes were never touched). A later re-save that commits replaces it."""
    local = tmp_path / "local"
    cfg = s3flash.S3ClientConfig(max_attempts=2)
    first = {"w": torch.full((1000,), 1.0)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=proxy.endpoint, local_dir=str(local),
                                   keep_remote=1, s3client_config=cfg) as ck:
        ck.save(first, 100).result()
        proxy.set_faults([integration_faults().s3_error("InternalError", 500, match={
            "method": "PUT", "path": "/commits/"})])
        with pytest.raises(s3flash.S3Exception):
            ck.save({"w": torch.full((1000,), 2.0)}, 100).result()
        ck.wait()
        assert proxy.stats()["faults_total"] >= 1
        proxy.set_faults([])
        assert ck.steps() == [100] and ck.latest() == 100
        for tier_dir in (str(local), None):
            ck.local_dir = tier_dir
            _assert_same(first, ck.load())
            _assert_same(first, ck.load(100))
            assert ck.last_load_tier == ("local" if tier_dir else "s3")
        ck.local_dir = str(local)
        info = ck.save({"w": torch.full((1000,), 3.0)}, 100).result()
        ck.wait()
        assert ck.steps() == [100] and info.seq == 2
        _assert_same({"w": torch.full((1000,), 3.0)}, ck.load())
        # the first commit and the failed re-save's object are gone
        assert _keys(s3, bucket, prefix) == [f"{prefix}commits/0000000000000002.json",
                                             info.manifest["objects"][0]["key"]]


def test_rollback_resumes_the_new_run(region, endpoint, bucket, prefix, s3):
    """keep_remote=2; save 80, 90, 100; load(90); save 91, 92, 93: latest() is 93 (the
    newest commit, not the highest step) and retention keeps 92 and 93, deleting 100."""
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                   endpoint=endpoint, keep_remote=2) as ck:
        for s in (80, 90, 100):
            ck.save({"w": torch.full((10,), float(s))}, s).result()
        ck.wait()
        assert ck.steps() == [90, 100]
        assert torch.equal(ck.load(90)["w"], torch.full((10,), 90.0))
        for s in (91, 92, 93):
            ck.save({"w": torch.full((10,), float(s))}, s).result()
        ck.wait()
        assert ck.latest() == 93 and ck.steps() == [92, 93]
        assert torch.equal(ck.load()["w"], torch.full((10,), 93.0))
        assert [c.seq for c in ck.commits()] == [5, 6]
        assert {k.split("/")[1] for k in _keys(s3, bucket, prefix)} == {
            "commits", "step-000000000092", "step-000000000093"}
        with pytest.raises(FileNotFoundError):
            ck.load(100)


@pytest.mark.parametrize("conditional", [None, False])
def test_two_writers_race_for_one_commit(region, bucket, prefix, proxy, s3, conditional):
    """Two writers save the same step at once: writer A has chosen commit number 1 and its
    PUT is held mid-body while writer B lists (no commit yet), chooses 1 too and commits.
    With If-None-Match (RGW honours it) A's PUT is refused (412) and A commits as 2; with
    conditional_put=False each commit's name carries its save id. Either way both writers
    committed, under different names, and each commit loads its own values."""
    uri = f"s3://{bucket}/{prefix}"
    proxy.set_faults([{"match": {"method": "PUT", "path": "/commits/0000000000000001",
                                 "nth": 1},
                       "action": "stall", "at": 10, "seconds": 5, "direction": "request"}])
    a = s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                  conditional_put=conditional)
    b = s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                  conditional_put=conditional)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", s3flash.ConcurrentWriterWarning)
            fa = a.save({"w": torch.full((10,), 1.0)}, 7)
            _wait_for(lambda: any(e["rule"] == 0 and e["acted"] is not None
                                  for e in proxy.stats()["log"]))
            ib = b.save({"w": torch.full((10,), 2.0)}, 7).result()
            assert not fa.done()   # A's commit is still held
            ia = fa.result()
    finally:
        a.close()
        b.close()
    # the number A was committing under taken by B: A says a second writer is saving
    said = [str(w.message) for w in warned if w.category is s3flash.ConcurrentWriterWarning]
    if conditional is None:
        assert len(said) == 1 and f"writer {b.writer_id} " in said[0], said
    else:
        assert not said, said  # both took 1, under names of their own: no sign of the other
    puts = [e["path"] for e in proxy.stats()["log"]
            if e["method"] == "PUT" and "/commits/0" in e["path"]]
    assert ia.commit_uri != ib.commit_uri
    if conditional is None:
        assert a.conditional_put is True
        assert (ib.seq, ia.seq) == (1, 2)
        assert len([p for p in puts if p.endswith("/0000000000000001.json")]) == 2
    else:
        assert ib.seq == ia.seq == 1
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint) as ck:
        commits = ck.commits()
        assert sorted(c.uri for c in commits) == sorted([ia.commit_uri, ib.commit_uri])
        assert ck.steps() == [7]
        newest = ia if commits[-1].uri == ia.commit_uri else ib
        assert torch.equal(ck.load()["w"], torch.full((10,), 1.0 if newest is ia else 2.0))
        for info, v in ((ia, 1.0), (ib, 2.0)):
            r = s3flash.load(f"s3://{bucket}/{info.manifest['objects'][0]['key']}",
                             region=region, endpoint=proxy.endpoint)
            assert torch.equal(r["w"], torch.full((10,), v))


# -- several writers on one prefix --------------------------------------------------------

WRITER_CHILD = textwrap.dedent("""
    import sys, warnings, torch, s3flash
    region, endpoint, uri, window = sys.argv[1:5]
    kw = {} if window == "default" else {"retention_window_s": float(window)}
    ck = s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint, keep_remote=1, **kw)
    def said(message, category, *rest):  # warnings of the background thread, one a line
        print("WARNED", category.__name__, str(message).replace("\\n", " "), flush=True)
    warnings.showwarning = said
    warnings.simplefilter("always")
    print("WRITER", getattr(ck, "writer_id", "?"), flush=True)
    def state(step):
        g = torch.Generator().manual_seed(step)
        return {"w": torch.randn(64 * 1024, generator=g), "step": step}
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "QUIT":
            break
        step = int(args[0])
        f = ck.save(state(step), step)
        try:
            info = f.result()
        except Exception as e:
            print("FAILED", step, type(e).__name__, str(e).replace("\\n", " "), flush=True)
            continue
        ck.wait()  # this writer's retention is done
        print("COMMITTED", step, info.seq, flush=True)
        try:  # what save() reported, read back at once
            got = ck.load(step)
            ok = torch.equal(got["w"], state(step)["w"]) and got["step"] == step
            print("LOADED" if ok else "CHANGED", step, flush=True)
        except Exception as e:
            print("LOST", step, type(e).__name__, str(e).replace("\\n", " "), flush=True)
    ck.close()
    print("DONE", flush=True)
""")


class _Writer:
    """A child process with an AsyncCheckpointer (keep_remote=1) on `uri`, through its own
    fault proxy; it saves the step it is sent and answers one line per event."""

    def __init__(self, region, proxy, uri, window="default"):
        import queue
        import threading
        self.proxy = proxy
        self.p = subprocess.Popen([sys.executable, "-c", WRITER_CHILD, region, proxy.endpoint,
                                   uri, str(window)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()
        self.id = self.expect("WRITER")[1]

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.split(" ", 3))
        self.lines.put(None)

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def expect(self, *kinds, timeout=120):
        """The next line of one of `kinds` (WARNED lines are kept in self.seen)."""
        import queue
        deadline = time.monotonic() + timeout
        while True:
            try:
                words = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {kinds} from the writer in {timeout} s") from None
            assert words is not None, f"the writer exited: {self.p.stderr.read()}"
            words[-1] = words[-1].rstrip("\n")
            self.seen.append(words)
            if words[0] in kinds:
                return words

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("QUIT")
                self.expect("DONE")
            finally:
                self.p.kill()
        self.p.wait()


def _hold_commit(proxy):
    """The writer's next commit PUT held by its proxy (before it reaches the server) until
    released."""
    proxy.set_faults([{"match": {"method": "PUT", "path": r"/commits/\d{16}"},
                       "action": "delay", "seconds": 600, "max_count": 1}])


def _lockstep_round(held, other, held_step, other_step):
    """`held` saves `held_step`: its object is complete and its commit is held at its proxy
    while `other` saves `other_step`, commits and runs its retention; then the commit goes.
    Returns (what `held` answered: COMMITTED or FAILED, then LOADED/LOST/CHANGED if it
    committed)."""
    _hold_commit(held.proxy)
    held.send(f"SAVE {held_step}")
    _wait_for(lambda: any(e["rule"] == 0 for e in held.proxy.stats()["log"]), timeout=120)
    other.send(f"SAVE {other_step}")
    assert other.expect("COMMITTED", "FAILED")[0] == "COMMITTED"
    assert other.expect("LOADED", "LOST", "CHANGED")[0] == "LOADED"
    assert held.proxy.release(0) == 1
    first = held.expect("COMMITTED", "FAILED")
    if first[0] == "FAILED":
        return first, None
    return first, held.expect("LOADED", "LOST", "CHANGED")


def test_two_writers_in_two_processes_keep_every_reported_commit(region, endpoint, bucket, s3):
    """Issue 28 R1: two checkpointers in two processes on one prefix, keep_remote=1, saving
    in lock-step: each round one writer's commit is held at its fault proxy (its object
    complete) while the other saves, commits and runs its retention. Every commit save()
    reports loads bit-exact at once (the held writer's object and its earlier commits are
    younger than the window: the other's retention spares them), each writer says it saw
    the other, and at the end each writer's last commit is there and loads."""
    prefix = f"two-writers-{uuid.uuid4().hex[:8]}/"
    uri = f"s3://{bucket}/{prefix}"
    with faultproxy(endpoint) as pa, faultproxy(endpoint) as pb:
        a, b = _Writer(region, pa, uri), _Writer(region, pb, uri)
        try:
            last = {}
            for rnd in range(4):  # A held in even rounds, B in odd ones
                held, other = (a, b) if rnd % 2 == 0 else (b, a)
                hs, os_ = 100 + 2 * rnd, 101 + 2 * rnd
                first, then = _lockstep_round(held, other, hs, os_)
                assert first[0] == "COMMITTED", first
                assert then[0] == "LOADED", (rnd, then)
                last[held.id], last[other.id] = hs, os_
            a.close()
            b.close()
        finally:
            a.close()
            b.close()
        for w in (a, b):
            other = b if w is a else a
            warned = [x for x in w.seen if x[0] == "WARNED"]
            assert any(x[1] == "ConcurrentWriterWarning" and other.id in x[2] + x[3]
                       for x in warned), warned
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint) as ck:
        # each writer's retention removed its own older commits, never the other's
        assert sorted(ck.steps()) == sorted(last.values())
        for step in last.values():
            g = torch.Generator().manual_seed(step)
            assert torch.equal(ck.load(step)["w"], torch.randn(64 * 1024, generator=g))


def test_a_commit_whose_object_is_gone_raises_naming_the_other_writer(region, endpoint,
                                                                      bucket, s3):
    """A writer whose retention window is 0 (it believes it is alone) removes the complete,
    not yet committed object of the other writer; the other's save() then raises
    ConcurrentWriterError naming that writer, instead of reporting a commit that does not
    load."""
    prefix = f"writer-error-{uuid.uuid4().hex[:8]}/"
    uri = f"s3://{bucket}/{prefix}"
    with faultproxy(endpoint) as pa, faultproxy(endpoint) as pb:
        a, b = _Writer(region, pa, uri, window=0), _Writer(region, pb, uri)
        try:
            first, _ = _lockstep_round(b, a, 201, 200)
            assert first[0] == "FAILED" and first[2] == "ConcurrentWriterError", first
            assert f"writer {a.id} " in first[3] and "is gone" in first[3], first
            assert "retention_window_s" in first[3]
        finally:
            a.close()
            b.close()
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=endpoint) as ck:
        assert ck.steps() == [200]


def test_a_restarted_writer_removes_its_predecessors_leftovers_after_the_window(
        region, bucket, prefix, proxy, s3):
    """A writer that died left its last commit and a complete object it never committed.
    The next writer's retention (default window: 3600 s) spares both, which could be a
    live writer's; a writer with a 2 s window removes them once they are older than that
    (by the server's clock; checked by saving until they are gone, bounded): a restarted
    job is never blocked for longer than its window."""
    uri = f"s3://{bucket}/{prefix}"
    sd = {"w": torch.zeros(100)}
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   keep_remote=1,
                                   s3client_config=s3flash.S3ClientConfig(max_attempts=1)
                                   ) as ck:
        ck.save(sd, 1).result()
        dead_commit = ck.save(sd, 2).result()
        proxy.set_faults([integration_faults().s3_error("AccessDenied", 403, match={
            "method": "PUT", "path": "/commits/"})])
        with pytest.raises(s3flash.S3PermissionError):
            ck.save(sd, 3).result()
        proxy.set_faults([])
    dead = set(_keys(s3, bucket, prefix))
    assert len([k for k in dead if "/step-000000000003/" in k]) == 1  # left over
    assert len(dead) == 3  # commit 2, its object, step 3's object
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   keep_remote=1) as ck:
        info = ck.save(sd, 4).result()
        ck.wait()
        assert dead <= set(_keys(s3, bucket, prefix))
        assert ck.steps() == [2, 4] and dead_commit.seq < info.seq
    with s3flash.AsyncCheckpointer(uri, region=region, endpoint=proxy.endpoint,
                                   keep_remote=1, retention_window_s=2) as ck:
        deadline = time.monotonic() + 60
        for step in range(5, 1000):
            info = ck.save(sd, step).result()
            ck.wait()
            own = [info.commit_uri.split("/", 3)[3], info.manifest["objects"][0]["key"]]
            if _keys(s3, bucket, prefix) == sorted(own):
                break  # both dead writers' commits and leftovers are gone
            assert time.monotonic() < deadline, "the dead writers' leftovers stayed"
            time.sleep(0.2)  # the next poll of the condition, not a wait for an outcome
        assert ck.steps() == [step]


def test_local_tier_is_private_under_a_permissive_umask(region, endpoint, bucket, prefix,
                                                       tmp_path):
    """Issue 28 R14: with umask 0, the local tier's folders (local_dir and the folders above
    it that the checkpointer makes, step-N, the save's) are 0700 and its files (state.pt,
    manifest.json) 0600: a checkpoint is not readable by other users of the node."""
    import stat
    top = tmp_path / "made"
    local = top / "tier"
    old = os.umask(0)
    try:
        with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region=region,
                                       endpoint=endpoint, local_dir=str(local)) as ck:
            info = ck.save({"w": torch.zeros(1000)}, 1).result()
    finally:
        os.umask(old)
    saved = Path(info.local_path)
    assert saved.parent.parent == local
    mode = {p: stat.S_IMODE(p.stat().st_mode) for p in
            (top, local, saved.parent, saved, saved / "state.pt", saved / "manifest.json")}
    assert mode == {top: 0o700, local: 0o700, saved.parent: 0o700, saved: 0o700,
                    saved / "state.pt": 0o600, saved / "manifest.json": 0o600}, \
        {str(p): oct(m) for p, m in mode.items()}
