"""s3flash.dcp: torch.distributed.checkpoint save/load/async_save against RGW, 1 and 2 ranks."""

import dataclasses
import json
import os
import socket
import tempfile
import uuid

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import s3flash
from s3flash import S3ClientConfig, S3ReaderConstructor
from s3flash.dcp import (BinaryPrefixStrategy, DefaultPrefixStrategy, HexPrefixStrategy,
                         RoundRobinPrefixStrategy, S3HostStager, S3StorageReader,
                         S3StorageWriter)
from helpers import assert_same_tensor, storage_bytes

MiB = 1 << 20
# dcp.save/load raise CheckpointException, a BaseException, when a step fails on a rank
FAILURE = (Exception, CheckpointException)
pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled:UserWarning")


# ------------------------------------------------------------------------------------------
# state dicts
# ------------------------------------------------------------------------------------------
def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10))


def trained(seed):
    """A model and an Adam optimizer after two steps (the optimizer has state)."""
    model = make_model(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(8, 256, generator=g)).square().sum().backward()
        opt.step()
    return model, opt


def app_state(model, opt, **extra):
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, **extra}


def assert_same_tree(a, b, path=""):
    """Bit-exact trees (as helpers.assert_same_tensor for each tensor), the first
    difference named."""
    diff = tree_diff(a, b, path)
    assert diff is None, diff


def tree_diff(a, b, path=""):
    """What differs between two state trees, named (the first difference), or None. For the
    spawned ranks, where a bare assert says nothing (no pytest rewriting there)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{path}: {type(b).__name__}, not a tensor"
        for what in ("dtype", "shape"):
            if getattr(a, what) != getattr(b, what):
                return f"{path}: {what} {getattr(a, what)} != {getattr(b, what)}"
        if a.stride() != b.stride() or a.storage_offset() != b.storage_offset():
            return (f"{path}: layout {a.stride()}+{a.storage_offset()} != "
                    f"{b.stride()}+{b.storage_offset()}")
        x, y = storage_bytes(a), storage_bytes(b)
        if x.numel() != y.numel():
            return f"{path}: storage {x.numel()} != {y.numel()} bytes"
        bad = (x != y).nonzero().reshape(-1)
        if bad.numel():
            i = int(bad[0])
            return (f"{path}: {bad.numel()} of {x.numel()} storage bytes differ, the first at "
                    f"{i} (last at {int(bad[-1])}): {x[i:i + 16].tolist()} != "
                    f"{y[i:i + 16].tolist()}")
        return None
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            d = tree_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = tree_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def bits(t):
    """The values' bytes (bit-exact, NaNs included), whatever the layout."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def keys_under(s3, bucket, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
    return sorted(out)


def uploads_under(s3, bucket, prefix):
    return s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])


@pytest.fixture
def ck(bucket):
    """A fresh checkpoint path: (uri, bucket, prefix with its slash)."""
    prefix = f"ckpt-{uuid.uuid4().hex[:8]}/"
    return f"s3://{bucket}/{prefix.rstrip('/')}", bucket, prefix


class FailingPlanner(DefaultSavePlanner):
    """Raises while serializing the item `fqn`: a save that fails half-way through."""

    def __init__(self, fqn):
        super().__init__()
        self.fqn = fqn

    def resolve_data(self, write_item):
        if write_item.index.fqn == self.fqn:
            raise RuntimeError(f"cannot serialize {self.fqn}")
        return super().resolve_data(write_item)


# ------------------------------------------------------------------------------------------
# one rank
# ------------------------------------------------------------------------------------------
def test_save_load_model_and_optimizer(ck, s3, region, endpoint):
    uri, bucket, prefix = ck
    model, opt = trained(1)
    sd = app_state(model, opt, extra={"epoch": 3, "tag": "run-a"})
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, thread_count=3, endpoint=endpoint))
    keys = keys_under(s3, bucket, prefix)
    assert keys == [".metadata", "__0_0.distcp", "__0_1.distcp", "__0_2.distcp"]

    model2, opt2 = trained(2)  # other values, same structure
    sd2 = app_state(model2, opt2, extra={"epoch": 0, "tag": ""})
    reader = S3StorageReader(region, uri, endpoint=endpoint)
    dcp.load(sd2, storage_reader=reader)
    assert_same_tree(sd, sd2)
    set_state_dict(model2, opt2, model_state_dict=sd2["model"], optim_state_dict=sd2["optim"])
    assert_same_tree(app_state(model, opt), app_state(model2, opt2))
    # the model really has the weights: same outputs
    x = torch.randn(3, 256)
    assert torch.equal(model(x), model2(x))


def test_dtypes_views_and_odd_tensors(ck, region, endpoint):
    uri, _, _ = ck
    g = torch.Generator().manual_seed(5)
    base = torch.randn(64, 48, generator=g)
    sd = {
        "transposed": base.t(),                          # non-contiguous, minimal storage
        "narrow": base.narrow(1, 3, 7),                  # a view into a larger storage
        "offset_row": base[5],                           # storage offset
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "bool": torch.rand(33, generator=g) > 0.5,
        "odd_bytes": torch.randint(0, 255, (7,), dtype=torch.uint8, generator=g),
    }
    for dt in (torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
               torch.int64, torch.complex64, torch.complex128, torch.float8_e4m3fn,
               torch.float8_e5m2):
        n = 129 * torch.empty(0, dtype=dt).element_size()
        sd[str(dt)] = torch.randint(0, 256, (3, n), dtype=torch.uint8, generator=g).view(dt)
    expected = {k: v.clone() for k, v in sd.items()}
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, thread_count=2, endpoint=endpoint))
    out = {k: torch.zeros_like(v) for k, v in expected.items()}
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint))
    for k, v in expected.items():
        assert v.dtype == out[k].dtype and v.shape == out[k].shape, k
        assert torch.equal(bits(v), bits(out[k])), k


def test_merged_ranged_reads(ck, region, endpoint):
    """Adjacent items of an object come in one ranged read: fewer requests than items."""
    uri, _, _ = ck
    g = torch.Generator().manual_seed(3)
    sd = {f"t{i}": torch.randn(1000 + i, generator=g) for i in range(64)}
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, thread_count=2, endpoint=endpoint))
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    reader = S3StorageReader(region, uri, endpoint=endpoint)
    before = reader.client.stats()["requests_started"]
    dcp.load(out, storage_reader=reader)
    requests = reader.client.stats()["requests_started"] - before
    assert_same_tree(sd, out)
    assert reader.read_stats["items"] == 64
    assert reader.read_stats["ranges"] == 2           # one per object
    assert requests <= 4, requests                   # .metadata + 2 ranges (+1 slack)
    assert requests < reader.read_stats["items"]


def test_gaps_and_max_gap_size(ck, region, endpoint):
    """Loading every other item leaves gaps: small ones are read through, large ones are
    skipped (separate ranges); dcp_optimized(max_gap_size) sets the limit."""
    uri, _, _ = ck
    g = torch.Generator().manual_seed(4)
    sd = {f"t{i}": torch.randn(MiB // 2, generator=g) for i in range(8)}  # 2 MiB each
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint))
    want = {f"t{i}": torch.zeros(MiB // 2) for i in range(0, 8, 2)}

    r = S3StorageReader(region, uri, endpoint=endpoint)  # default gap 1 MiB < 2 MiB
    dcp.load(want, storage_reader=r)
    assert r.read_stats["ranges"] == 4 and r.read_stats["bytes"] < 9 * MiB
    for k, v in want.items():
        assert torch.equal(v, sd[k])

    want = {k: torch.zeros_like(v) for k, v in want.items()}
    r = S3StorageReader(region, uri, endpoint=endpoint,
                        reader_constructor=S3ReaderConstructor.dcp_optimized(4 * MiB))
    dcp.load(want, storage_reader=r)
    assert r.read_stats["ranges"] == 1 and r.read_stats["bytes"] > 13 * MiB
    for k, v in want.items():
        assert torch.equal(v, sd[k])


def test_async_save(ck, s3, region, endpoint):
    uri, bucket, prefix = ck
    model, opt = trained(7)
    sd = app_state(model, opt)
    w = S3StorageWriter(region, uri, thread_count=2, endpoint=endpoint)
    fut = dcp.async_save(sd, storage_writer=w)
    # the staged copy is what gets written: changing the model now does not matter
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    fut.result(timeout=120)
    assert ".metadata" in keys_under(s3, bucket, prefix)
    out = app_state(*trained(8))
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint))
    assert_same_tree(app_state(*trained(7)), out)


def test_async_save_with_host_stager_reuses_buffers(ck, s3, region, endpoint):
    """dcp.async_save with S3HostStager: each save waits only for the copy into the stager's
    host buffers, which are allocated once and reused while earlier saves are done; with a
    save still in flight a second buffer is used, never more than max_buffers."""
    uri, bucket, prefix = ck
    model, opt = trained(7)
    stager = S3HostStager(max_buffers=2)
    for i in range(3):
        sd = app_state(model, opt, extra={"i": i})
        want = {k: v.clone() for k, v in sd["model"].items()}
        w = S3StorageWriter(region, f"{uri}s{i}/", endpoint=endpoint)
        fut = dcp.async_save(sd, storage_writer=w, async_stager=stager)
        with torch.no_grad():  # training goes on at once
            for p in model.parameters():
                p.add_(1.0)
        fut.result(timeout=120)
        out = app_state(*trained(8), extra={"i": -1})
        dcp.load(out, storage_reader=S3StorageReader(region, f"{uri}s{i}/", endpoint=endpoint))
        assert_same_tree(want, out["model"])
        assert out["extra"]["i"] == i
        assert stager.allocations == 1, i   # the previous save is done: its buffer is reused
    ptr = stager.stagers[0].arena_ptr()
    # two in flight at once: a second buffer, then both reused
    f1 = dcp.async_save(app_state(model, opt), storage_writer=S3StorageWriter(
        region, f"{uri}t1/", endpoint=endpoint), async_stager=stager)
    f2 = dcp.async_save(app_state(model, opt), storage_writer=S3StorageWriter(
        region, f"{uri}t2/", endpoint=endpoint), async_stager=stager)
    f1.result(timeout=120)
    f2.result(timeout=120)
    assert stager.allocations <= 2 and len(stager.stagers) <= 2
    assert stager.stagers[0].arena_ptr() == ptr
    stager.close()


def test_failed_save_leaves_no_metadata(ck, s3, region, endpoint):
    """A save failing half-way: no .metadata (an older checkpoint at the path is invalidated
    first), the object being written is aborted, and loading raises a clear error."""
    uri, bucket, prefix = ck
    g = torch.Generator().manual_seed(9)
    sd = {f"big{i}": torch.randn(2 * MiB, generator=g) for i in range(4)}  # 8 MiB each
    sd["boom"] = torch.ones(4)
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint))  # good one
    assert ".metadata" in keys_under(s3, bucket, prefix)

    with pytest.raises(FAILURE, match="cannot serialize boom"):
        dcp.save(sd, planner=FailingPlanner("boom"),
                 storage_writer=S3StorageWriter(region, uri, thread_count=2, endpoint=endpoint))
    keys = keys_under(s3, bucket, prefix)
    assert ".metadata" not in keys
    assert any(k.endswith(".distcp") for k in keys)  # data of the failed save got written
    assert uploads_under(s3, bucket, prefix) == []   # the failing object was aborted

    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    with pytest.raises(FAILURE, match="incomplete checkpoint at s3://"):
        dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint))

    with pytest.raises(FAILURE, match="no checkpoint at s3://"):
        dcp.load(out, storage_reader=S3StorageReader(region, uri + "-nothing",
                                                     endpoint=endpoint))


def test_items_are_torch_save_zips(ck, s3, region, endpoint):
    """Each tensor item of a .distcp object is torch.save's zip, written by
    s3flash._zipimage.stream (the GIL let go): every CRC right, every storage at a 64-byte
    aligned offset of its item, and torch.load of the item's bytes gives the tensor back."""
    import io
    import pickle
    import struct
    import zipfile
    uri, bucket, prefix = ck
    sd = {"f32": torch.randn(1000), "bf16": torch.randn(33).to(torch.bfloat16),
          "empty": torch.empty(0, 4), "i64": torch.arange(-5, 5), "view": torch.arange(64.)[8:24]}
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint))
    md = pickle.loads(s3.get_object(Bucket=bucket, Key=prefix + ".metadata")["Body"].read())
    seen = set()
    for idx, info in md.storage_data.items():
        body = s3.get_object(Bucket=bucket, Key=prefix + info.relative_path)["Body"].read()
        item = body[info.offset:info.offset + info.length]
        with zipfile.ZipFile(io.BytesIO(item)) as z:
            assert z.testzip() is None
            for zi in z.infolist():
                if "/data/" in zi.filename and zi.file_size:
                    nl, el = struct.unpack("<HH", item[zi.header_offset + 26:
                                                       zi.header_offset + 30])
                    assert (zi.header_offset + 30 + nl + el) % 64 == 0, zi
        got = torch.load(io.BytesIO(item))
        assert_same_tensor(got, sd[idx.fqn].clone() if idx.fqn == "view" else sd[idx.fqn])
        seen.add(idx.fqn)
    assert seen == set(sd)


def test_metadata_commit_never_overwrites_another_writers(ck, s3, region, endpoint):
    """.metadata is written with If-None-Match: *: when another writer commits at the same
    path while this save writes its data (here between write_data and finish), this save
    fails with a clear error and the other writer's .metadata is left as it is."""
    uri, bucket, prefix = ck

    class Racing(S3StorageWriter):
        def write_data(self, plan, planner):
            fut = super().write_data(plan, planner)
            s3.put_object(Bucket=bucket, Key=prefix + ".metadata", Body=b"the other commit")
            return fut

    with pytest.raises(FAILURE, match="another writer committed a checkpoint"):
        dcp.save({"w": torch.ones(4)}, storage_writer=Racing(region, uri, endpoint=endpoint))
    body = s3.get_object(Bucket=bucket, Key=prefix + ".metadata")["Body"].read()
    assert body == b"the other commit"


def test_checkpoint_id_reset_and_storage_meta(ck, s3, region, endpoint):
    uri, bucket, prefix = ck
    assert S3StorageWriter.validate_checkpoint_id("s3://bucket/a/b")
    assert S3StorageReader.validate_checkpoint_id("s3://bucket")
    for bad in ("/tmp/ckpt", "file:///x", "s3://", "s3:///key", "gs://b/k"):
        assert not S3StorageWriter.validate_checkpoint_id(bad), bad
        assert not S3StorageReader.validate_checkpoint_id(bad), bad

    sd = {"w": torch.arange(10.0)}
    w = S3StorageWriter(endpoint=endpoint)              # no path: checkpoint_id gives it
    assert w.checkpoint_id is None
    dcp.save(sd, checkpoint_id=uri, storage_writer=w)
    assert w.checkpoint_id == uri
    meta = w.storage_meta()
    assert meta.checkpoint_id == uri and meta.save_id
    first = meta.save_id
    w.reset()
    assert w.storage_meta().save_id != first

    r = S3StorageReader(endpoint=endpoint)
    out = {"w": torch.zeros(10)}
    dcp.load(out, checkpoint_id=uri, storage_reader=r)
    assert torch.equal(out["w"], sd["w"])
    md = r.read_metadata()
    assert md.storage_meta.checkpoint_id == uri and md.storage_meta.load_id == r.load_id

    with pytest.raises(FAILURE, match="overwrite=False"):
        dcp.save(sd, storage_writer=S3StorageWriter(region, uri, overwrite=False,
                                                    endpoint=endpoint))
    with pytest.raises(ValueError, match="checkpoint path"):
        S3StorageWriter(region, "/local/dir", endpoint=endpoint)

    # a prefix strategy spreads the keys; the load finds them through .metadata
    uri2 = uri + "-rr"
    dcp.save(sd, storage_writer=S3StorageWriter(
        region, uri2, endpoint=endpoint, prefix_strategy=RoundRobinPrefixStrategy(["p0", "p1"])))
    assert keys_under(s3, bucket, prefix.rstrip("/") + "-rr/") == [".metadata", "p0/__0_0.distcp"]
    out = {"w": torch.zeros(10)}
    dcp.load(out, storage_reader=S3StorageReader(region, uri2, endpoint=endpoint))
    assert torch.equal(out["w"], sd["w"])


def test_endpoint_argument(ck, region, endpoint):
    """Every client here gets its endpoint from the argument (no AWS_ENDPOINT_URL*); a dead
    one is a connection error, not a silent fallback to AWS."""
    uri, _, _ = ck
    assert not any(k.startswith("AWS_ENDPOINT_URL") for k in os.environ)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    cfg = S3ClientConfig(max_attempts=1)
    w = S3StorageWriter(region, uri, s3client_config=cfg, endpoint=dead)
    with pytest.raises(FAILURE) as ei:
        dcp.save({"w": torch.ones(3)}, storage_writer=w)
    exc = ei.value
    inner = exc.failures[0][0] if isinstance(exc, CheckpointException) else exc
    port = dead.rsplit(":", 1)[1]
    assert isinstance(inner, s3flash.S3ConnectionError) and f"port {port}" in str(inner)
    assert w.client.endpoint == dead
    r = S3StorageReader(region, uri, s3client_config=cfg, endpoint=endpoint)
    assert r.client.endpoint == endpoint


def test_filesystem_layout_both_ways(ck, s3, region, endpoint, tmp_path):
    """The layout is FileSystemWriter's: downloaded, FileSystemReader loads it; a
    FileSystemWriter checkpoint uploaded as is, S3StorageReader loads it."""
    uri, bucket, prefix = ck
    model, opt = trained(11)
    sd = app_state(model, opt)
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, thread_count=2, endpoint=endpoint))
    local = tmp_path / "down"
    local.mkdir()
    for k in keys_under(s3, bucket, prefix):
        s3.download_file(bucket, prefix + k, str(local / k))
    out = app_state(*trained(12))
    dcp.load(out, storage_reader=dcp.FileSystemReader(str(local)))
    assert_same_tree(sd, out)

    fs_dir = tmp_path / "fs"
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(fs_dir), thread_count=2))
    up = prefix.rstrip("/") + "-fs/"
    for f in os.listdir(fs_dir):
        s3.upload_file(str(fs_dir / f), bucket, up + f)
    out = app_state(*trained(13))
    dcp.load(out, storage_reader=S3StorageReader(region, f"s3://{bucket}/{up}",
                                                 endpoint=endpoint))
    assert_same_tree(sd, out)


def test_writer_and_reader_pickle(ck, region, endpoint):
    """The process-based async executor pickles the writer: the native client is rebuilt."""
    import pickle
    uri, _, _ = ck
    w = S3StorageWriter(region, uri, endpoint=endpoint)
    w.client  # built
    w2 = pickle.loads(pickle.dumps(w))
    sd = {"a": torch.arange(5.0)}
    dcp.save(sd, storage_writer=w2)
    r = pickle.loads(pickle.dumps(S3StorageReader(region, uri, endpoint=endpoint)))
    out = {"a": torch.zeros(5)}
    dcp.load(out, storage_reader=r)
    assert torch.equal(out["a"], sd["a"])


# ------------------------------------------------------------------------------------------
# two ranks (gloo, spawn): one session runs every phase, the tests check what it reported
# ------------------------------------------------------------------------------------------
def _replicated_tensors(model, opt):
    return list(model.state_dict().values()) + [
        v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]


def _rank_state(rank, world, report):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    model, opt = trained(21)  # replicated: DCP writes each item once (deduplicated)
    # DCP writes a replicated item from one rank only, so the replicas must be the same
    # bytes: rank 0's go to the others, as DDP does at start. What each rank computed
    # itself is reported, so that a load that differs can be told from replicas that did.
    import hashlib
    h = hashlib.sha256()
    for t in _replicated_tensors(model, opt):
        h.update(bits(t.detach()).numpy().tobytes())
        dist.broadcast(t.detach(), src=0)
    report["replicas_computed"] = h.hexdigest()[:16]
    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(4096 * 64, dtype=torch.float32).reshape(4096, 64)
    sharded = distribute_tensor(full, mesh, [Shard(0)])  # each rank holds and writes a half
    return model, opt, sharded, full


def _two_rank_worker(rank, world, store, endpoint, region, uri, out_dir, other_keys):
    # a file store, not TCP on a "free" port another process may take between the check
    # and the bind (a two-rank run failed once that way)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    report = {}
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
        model, opt, sharded, full = _rank_state(rank, world, report)
        sd = app_state(model, opt, sharded=sharded, extra={"rank_count": world})
        # each rank writes its own objects, 2 at once
        dcp.save(sd, storage_writer=S3StorageWriter(region, uri, thread_count=2,
                                                    endpoint=endpoint))
        dist.barrier()

        model2, opt2 = trained(22)
        sharded2 = distribute_tensor(torch.zeros_like(full), sharded.device_mesh, [Shard(0)])
        sd2 = app_state(model2, opt2, sharded=sharded2, extra={"rank_count": 0})
        reader = S3StorageReader(region, uri, endpoint=endpoint)
        before = reader.client.stats()["requests_started"]
        dcp.load(sd2, storage_reader=reader)
        report["load_requests"] = reader.client.stats()["requests_started"] - before
        report["read_stats"] = reader.read_stats
        diff = (tree_diff(sd["model"], sd2["model"], "model")
                or tree_diff(sd["optim"], sd2["optim"], "optim")
                or tree_diff(sharded.to_local().contiguous(),
                             sd2["sharded"].to_local().contiguous(), "sharded")
                or tree_diff({"rank_count": world}, sd2["extra"], "extra"))
        report["bit_exact"] = diff or True

        # a save in which rank 1 fails half-way, over the good checkpoint: no .metadata
        planner = FailingPlanner("only_rank1") if rank == 1 else None
        sd3 = dict(sd)
        if rank == 1:
            sd3["only_rank1"] = torch.ones(8)
        try:
            dcp.save(sd3, planner=planner, storage_writer=S3StorageWriter(
                region, uri, thread_count=2, endpoint=endpoint))
            report["failed_save"] = "no error"
        except FAILURE as e:
            report["failed_save"] = str(e)[:2000]
        dist.barrier()
        try:
            dcp.load(sd2, storage_reader=S3StorageReader(region, uri, endpoint=endpoint))
            report["load_after_failure"] = "loaded"
        except FAILURE as e:
            report["load_after_failure"] = str(e)[:2000]

        # rank 1 is denied (another user's keys): rank 0 writes its data, no .metadata
        if other_keys:
            cfg = S3ClientConfig(access_key_id=other_keys[0], secret_access_key=other_keys[1]) \
                if rank == 1 else None
            try:
                dcp.save(sd, storage_writer=S3StorageWriter(
                    region, uri + "-denied", s3client_config=cfg, endpoint=endpoint))
                report["denied_save"] = "no error"
            except FAILURE as e:
                report["denied_save"] = str(e)[-2000:]

        # each prefix strategy (the numeric ones size their prefix map from the world size)
        report["strategies"] = {}
        for name, strategy in PREFIX_STRATEGIES.items():
            sd4 = {"sharded": sharded, "w": torch.arange(5.0) + rank * 0}
            w = S3StorageWriter(region, f"{uri}-ps-{name}", endpoint=endpoint,
                                prefix_strategy=strategy())
            dcp.save(sd4, storage_writer=w)
            if name == "default":  # this rank's SaveStats (test_metrics.py has the rest)
                report["save_stats"] = dataclasses.asdict(w.last_save_stats)
            out = {"sharded": distribute_tensor(torch.zeros_like(full), sharded.device_mesh,
                                                [Shard(0)]), "w": torch.zeros(5)}
            dcp.load(out, storage_reader=S3StorageReader(region, f"{uri}-ps-{name}",
                                                         endpoint=endpoint))
            report["strategies"][name] = (torch.equal(out["sharded"].to_local(),
                                                      sharded.to_local())
                                          and torch.equal(out["w"], sd4["w"]))
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        dist.destroy_process_group()


# strategy name -> (factory, the keys of a 2-rank save: one object per rank, then .metadata)
PREFIX_STRATEGIES = {
    "default": DefaultPrefixStrategy,
    "binary": lambda: BinaryPrefixStrategy(epoch_num=5),
    "hex": lambda: HexPrefixStrategy(min_prefix_length=4),
    "roundrobin": lambda: RoundRobinPrefixStrategy(["left", "right"]),
}
PREFIX_LAYOUTS = {
    "default": [".metadata", "__0_0.distcp", "__1_0.distcp"],
    "binary": [".metadata", "0000000000/epoch_5/__0_0.distcp",
               "1000000000/epoch_5/__1_0.distcp"],
    "hex": [".metadata", "0000/__0_0.distcp", "1000/__1_0.distcp"],
    "roundrobin": [".metadata", "left/__0_0.distcp", "right/__1_0.distcp"],
}


@pytest.fixture(scope="module")
def two_ranks(bucket, s3, region, endpoint, rgw):
    import torch.multiprocessing as mp
    prefix = f"two-ranks-{uuid.uuid4().hex[:8]}"
    uri = f"s3://{bucket}/{prefix}"
    out_dir = tempfile.mkdtemp(prefix="s3flash-dcp-")
    other = (rgw.other_access_key, rgw.other_secret_key) if rgw.other_access_key else None
    store = os.path.join(out_dir, "pg-store")
    mp.spawn(_two_rank_worker, args=(2, store, endpoint, region, uri, out_dir, other),
             nprocs=2, join=True)
    reports = []
    for r in range(2):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            reports.append(json.load(f))
    return {"reports": reports, "other": other,
            "keys": keys_under(s3, bucket, prefix + "/"),
            "uploads": uploads_under(s3, bucket, prefix + "/"),
            "denied_keys": keys_under(s3, bucket, prefix + "-denied/"),
            "denied_uploads": uploads_under(s3, bucket, prefix + "-denied/"),
            "strategy_keys": {n: keys_under(s3, bucket, f"{prefix}-ps-{n}/")
                              for n in PREFIX_STRATEGIES},
            "default_sizes": {o["Key"].split("/", 1)[1]: o["Size"] for o in s3.list_objects_v2(
                Bucket=bucket, Prefix=f"{prefix}-ps-default/").get("Contents", [])}}


def test_two_ranks_prefix_strategies(two_ranks):
    """Each of s3torchconnector's strategies: its key layout with 2 ranks, and a round trip."""
    assert two_ranks["strategy_keys"] == PREFIX_LAYOUTS
    for rep in two_ranks["reports"]:
        assert rep["strategies"] == {n: True for n in PREFIX_STRATEGIES}, rep


def test_two_ranks_save_stats(two_ranks):
    """Each rank's SaveStats counts its own object; .metadata is rank 0's (the
    coordinator's), whose commit is the only one timed."""
    sizes = two_ranks["default_sizes"]
    st0, st1 = (rep["save_stats"] for rep in two_ranks["reports"])
    assert st0["bytes"] == sizes["__0_0.distcp"] + sizes[".metadata"]
    assert st1["bytes"] == sizes["__1_0.distcp"]
    assert st0["commit_seconds"] > 0 and st1["commit_seconds"] == 0
    for st in (st0, st1):
        assert st["blocked_seconds"] == st["save_seconds"]  # dcp.save, on the main thread
        assert 0 < st["upload_seconds"] <= st["save_seconds"]


def test_two_ranks_save_load_bit_exact(two_ranks):
    for rep in two_ranks["reports"]:
        assert rep["bit_exact"] is True, rep
        # each rank reads every replicated item and its own shard, merged per object
        assert rep["read_stats"]["ranges"] < rep["read_stats"]["items"], rep
        assert rep["load_requests"] < rep["read_stats"]["items"], rep
    # each rank wrote its own objects (2 at once)
    keys = two_ranks["keys"]
    assert {k for k in keys if k.startswith("__0_")} and {k for k in keys if k.startswith("__1_")}


def test_two_ranks_failed_save_leaves_no_metadata(two_ranks):
    for rep in two_ranks["reports"]:
        assert "cannot serialize only_rank1" in rep["failed_save"], rep
        assert "incomplete checkpoint at s3://" in rep["load_after_failure"], rep
    assert ".metadata" not in two_ranks["keys"]
    assert two_ranks["uploads"] == []


def test_two_ranks_one_denied(two_ranks):
    if not two_ranks["other"]:
        pytest.skip("no second RGW user (S3FLASH_TEST_OTHER_*)")
    for rep in two_ranks["reports"]:
        assert "AccessDenied" in rep["denied_save"] and "(RANK 1)" in rep["denied_save"], rep
    keys = two_ranks["denied_keys"]
    assert ".metadata" not in keys
    assert keys and all(k.startswith("__0_") for k in keys), keys  # rank 0's data only
    assert two_ranks["denied_uploads"] == []
