"""s3flash.safetensors against Ceph RGW, checked against safetensors' own reader and writer:
round trips of every dtype torch has (bit-exact, empty tensors and scalars included,
metadata kept), get_tensor / get_slice fetching only their bytes (the Range headers the
fault proxy saw), sharded models and load_model, each hostile header of
tests/data/safetensors/hostile.tsv, and loads through the fault proxy (resets, short ranges,
503s; an object replaced between its header and its data)."""

import json
import re
import struct
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors import deserialize, safe_open
from safetensors import torch as st

import s3flash
from s3flash import S3Client, S3ClientConfig
from s3flash import safetensors as s3st
from conftest import integration_faults

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "data" / "safetensors" / "hostile.tsv"
MiB = 1 << 20

# every dtype torch has that safetensors stores (torch 2.13)
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.float16,
          torch.bfloat16, torch.int32, torch.uint32, torch.float32, torch.float64,
          torch.int64, torch.uint64, torch.complex64, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu]
SHAPES = [(), (0,), (3, 0, 2), (17, 5), (1,)]


def random_tensor(dtype, shape, gen):
    """Random bytes as `dtype` (every bit pattern: NaNs and all)."""
    n = 1
    for d in shape:
        n *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def same_bits(a, b):
    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                            b.contiguous().reshape(-1).view(torch.uint8)))


@pytest.fixture(scope="module")
def client(region, endpoint):
    return S3Client(region, endpoint)


def put(s3, bucket, key, data):
    s3.put_object(Bucket=bucket, Key=key, Body=data)


def get(s3, bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


# ---- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_load_file_every_dtype(client, s3, bucket, dtype):
    """safetensors.torch.save's file, uploaded, loaded by load_file: every tensor
    bit-exact (every shape: scalars, empty ones), the metadata kept."""
    gen = torch.Generator().manual_seed(DTYPES.index(dtype))
    tensors = {f"t{i}": random_tensor(dtype, s, gen) for i, s in enumerate(SHAPES)}
    tensors["other"] = random_tensor(torch.float32, (7, 3), gen)
    meta = {"format": "pt", "quote\"é\n": "ü\u0001"}
    key = f"every/{dtype}.safetensors"
    put(s3, bucket, key, st.save(tensors, metadata=meta))
    got = s3st.load_file(f"s3://{bucket}/{key}", client=client)
    assert set(got) == set(tensors)
    for name, t in tensors.items():
        assert same_bits(got[name], t), name
    with s3st.safe_open(f"s3://{bucket}/{key}", framework="pt", client=client) as f:
        assert f.metadata() == meta
        assert f.keys() == sorted(tensors)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_save_file_read_by_safetensors(client, s3, bucket, dtype, tmp_path):
    """save_file's object: the very bytes safetensors.torch.save writes for the same
    tensors and metadata, so safetensors' loader reads it bit-exactly."""
    gen = torch.Generator().manual_seed(100 + DTYPES.index(dtype))
    tensors = {f"t{i}": random_tensor(dtype, s, gen) for i, s in enumerate(SHAPES)}
    tensors["a_first"] = random_tensor(torch.int64, (4,), gen)
    tensors["z_last"] = random_tensor(torch.bool, (9,), gen)
    meta = {"k": "v", "b": "é\n\""}
    key = f"saved/{dtype}.safetensors"
    s3st.save_file(tensors, f"s3://{bucket}/{key}", metadata=meta, client=client)
    raw = get(s3, bucket, key)
    # safetensors writes its metadata in its hash map's order: equal bytes for one key
    s3st.save_file(tensors, f"s3://{bucket}/{key}.1", metadata={"k": "é"}, client=client)
    assert get(s3, bucket, f"{key}.1") == st.save(tensors, metadata={"k": "é"})
    if dtype == torch.float8_e8m0fnu:  # safetensors.torch 0.8 cannot load F8_E8M0
        back = s3st.load_file(f"s3://{bucket}/{key}", client=client)
    else:
        back = st.load(raw)
        local = tmp_path / "f.safetensors"
        local.write_bytes(raw)
        with safe_open(str(local), framework="pt") as f:
            assert f.metadata() == meta
    for name, t in tensors.items():
        assert same_bits(back[name], t), name


def test_save_file_streams_a_multipart_upload(client, s3, bucket):
    """A file larger than a part goes up as one multipart upload (no whole-file buffer):
    its ETag is a multipart one, and safetensors reads it."""
    gen = torch.Generator().manual_seed(7)
    tensors = {f"w{i}": random_tensor(torch.bfloat16, (1024, 1024 + i), gen) for i in range(12)}
    key = "saved/multipart.safetensors"
    s3st.save_file(tensors, f"s3://{bucket}/{key}", client=client)
    assert "-" in s3.head_object(Bucket=bucket, Key=key)["ETag"]
    back = st.load(get(s3, bucket, key))
    assert all(same_bits(back[n], t) for n, t in tensors.items())
    got = s3st.load_file(f"s3://{bucket}/{key}", client=client)
    assert all(same_bits(got[n], t) for n, t in tensors.items())


def test_save_file_non_contiguous_and_shared(client, s3, bucket):
    """A non-contiguous tensor is saved as its contiguous copy; tensors sharing storage are
    refused with safetensors' own error (and nothing is created)."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    key = "saved/noncontig.safetensors"
    s3st.save_file({"t": base.t()}, f"s3://{bucket}/{key}", client=client)
    assert torch.equal(st.load(get(s3, bucket, key))["t"], base.t().contiguous())
    shared = {"a": base, "b": base[1]}
    with pytest.raises(RuntimeError) as ours:
        s3st.save_file(shared, f"s3://{bucket}/saved/shared.safetensors", client=client)
    with pytest.raises(RuntimeError) as theirs:
        st.save(shared)
    assert "Some tensors share memory" in str(ours.value)
    assert "Some tensors share memory" in str(theirs.value)
    assert "'a'" in str(ours.value) and "'b'" in str(ours.value)
    assert "saved/shared.safetensors" not in [
        o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="saved/").get("Contents", [])]
    # disjoint views of one storage do not overlap: safetensors saves them, and so do we
    halves = {"lo": base.view(-1)[:6], "hi": base.view(-1)[6:]}
    s3st.save_file(halves, f"s3://{bucket}/saved/halves.safetensors", client=client)
    assert get(s3, bucket, "saved/halves.safetensors") == st.save(halves)


# ---- what is fetched -------------------------------------------------------------------------

def ranges(proxy, key):
    """(first, last) of each GET of `key` the proxy saw, in order."""
    out = []
    for e in proxy.stats()["log"]:
        if e["method"] == "GET" and e["path"].endswith("/" + key):
            first, last = e["range"].split("=", 1)[1].split("-")
            out.append((int(first), int(last)))
    return out


@pytest.fixture
def proxied(region, proxy, monkeypatch):
    monkeypatch.setenv("S3FLASH_RETRY_BASE_MS", "20")
    return S3Client(region, proxy.endpoint, S3ClientConfig(max_attempts=5))


def offsets(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return 8 + n, {k: v["data_offsets"] for k, v in head.items() if k != "__metadata__"}


def test_fetches_only_what_is_asked(proxied, proxy, s3, bucket):
    """load_file: one GET of the header, then the data section only; get_tensor: that
    tensor's bytes only; get_slice: the rows of the first dimension the index needs."""
    gen = torch.Generator().manual_seed(3)
    tensors = {"emb": random_tensor(torch.float32, (1000, 64), gen),
               "b": random_tensor(torch.bfloat16, (300,), gen),
               "c": random_tensor(torch.int8, (5, 7, 3), gen)}
    raw = st.save(tensors)
    key = "fetch/model.safetensors"
    put(s3, bucket, key, raw)
    data0, offs = offsets(raw)
    uri = f"s3://{bucket}/{key}"

    proxy.reset()
    got = s3st.load_file(uri, client=proxied)
    assert all(same_bits(got[n], t) for n, t in tensors.items())
    # the header's GET: the file is shorter than it, so that GET brought the data too
    assert ranges(proxy, key) == [(0, s3st.HEADER_CHUNK - 1)]

    proxy.reset()
    with s3st.safe_open(uri, client=proxied) as f:
        assert len(ranges(proxy, key)) == 1  # the header, at open
        assert same_bits(f.get_tensor("b"), tensors["b"])
        b0, b1 = offs["b"]
        assert ranges(proxy, key)[1:] == [(data0 + b0, data0 + b1 - 1)]
        sl = f.get_slice("emb")
        assert sl.get_shape() == [1000, 64] and sl.get_dtype() == "F32"
        e0 = data0 + offs["emb"][0]
        row = 64 * 4
        cases = [(lambda s: s[100:250], (100, 250)), (lambda s: s[7], (7, 8)),
                 (lambda s: s[-3:], (997, 1000)), (lambda s: s[10:40:3, 5:9], (10, 38)),
                 (lambda s: s[990:2000, 1], (990, 1000))]
        for index, (lo, hi) in cases:
            n = len(ranges(proxy, key))
            assert same_bits(index(sl), index(tensors["emb"]))
            assert ranges(proxy, key)[n:] == [(e0 + lo * row, e0 + hi * row - 1)]
        n = len(ranges(proxy, key))
        assert sl[5:5].shape == (0, 64)
        assert ranges(proxy, key)[n:] == []  # an empty slice fetches nothing
        c = f.get_slice("c")
        assert same_bits(c[..., 1], tensors["c"][..., 1])  # other indexing: the tensor
    with pytest.raises(s3st.SafetensorError, match="no tensor named 'nope'"):
        s3st.safe_open(uri, client=proxied).get_tensor("nope")


# ---- sharded models ---------------------------------------------------------------------

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)
        self.c = torch.nn.Embedding(50, 16)


def save_sharded(client, bucket, prefix, state, n):
    names = sorted(state)
    wmap = {}
    for i in range(n):
        shard = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: state[k] for k in names[i::n]}
        s3st.save_file(part, f"s3://{bucket}/{prefix}{shard}", client=client)
        wmap.update({k: shard for k in part})
    return json.dumps({"metadata": {"total_size": 0}, "weight_map": wmap}).encode()


def test_sharded_load_model(client, s3, bucket):
    """A model saved in 3 shards with its index: load_model from the index or the prefix
    gives the same weights; a model that does not fit fails as safetensors' does."""
    src = Tiny()
    state = {k: v.detach().clone() for k, v in src.state_dict().items()}
    put(s3, bucket, "shard/model.safetensors.index.json", save_sharded(client, bucket, "shard/",
                                                                      state, 3))
    for uri in (f"s3://{bucket}/shard/model.safetensors.index.json", f"s3://{bucket}/shard/"):
        dst = Tiny()
        assert s3st.load_model(dst, uri, client=client) == ([], [])
        for k, v in dst.state_dict().items():
            assert torch.equal(v, state[k]), k
    loaded = s3st.load_sharded(f"s3://{bucket}/shard/", client=client)
    assert set(loaded) == set(state)
    other = torch.nn.Linear(16, 32)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        s3st.load_model(other, f"s3://{bucket}/shard/", client=client)
    missing, unexpected = s3st.load_model(other, f"s3://{bucket}/shard/", strict=False,
                                          client=client)
    assert sorted(missing) == ["bias", "weight"] and "b.weight" in unexpected


def test_sharded_missing_shard(client, s3, bucket):
    """A shard the index names that is not there: S3NotFoundError naming the shard, the
    index, S3's code and its request id."""
    state = {k: v.detach() for k, v in Tiny().state_dict().items()}
    index = save_sharded(client, bucket, "gone/", state, 2)
    put(s3, bucket, "gone/model.safetensors.index.json", index)
    s3.delete_object(Bucket=bucket, Key="gone/model-00002-of-00002.safetensors")
    with pytest.raises(s3flash.S3NotFoundError) as ei:
        s3st.load_model(Tiny(), f"s3://{bucket}/gone/", client=client)
    msg = str(ei.value)
    assert "shard model-00002-of-00002.safetensors of" in msg, msg
    assert "gone/model.safetensors.index.json" in msg and "NoSuchKey" in msg, msg
    assert ei.value.request_id and ei.value.request_id in msg


def test_shards_in_parallel_bounded(proxied, proxy, client, s3, bucket):
    """Six shards, every GET of them held at the proxy: four shards' GETs are held at once
    (fetched in parallel), and the other two start only after the hold is lifted (at most
    max_parallel=4 at a time); then every tensor arrives."""
    state = {f"t{i}": torch.full((64,), float(i)) for i in range(12)}
    put(s3, bucket, "par/model.safetensors.index.json",
        save_sharded(client, bucket, "par/", state, 6))
    proxy.reset()
    proxy.set_faults([{"match": {"method": "GET", "path": r"/par/model-\d+-of-\d+"},
                       "action": "delay", "seconds": 60}])
    result = {}

    def load():
        try:
            result["state"] = s3st.load_sharded(f"s3://{bucket}/par/", client=proxied)
        except Exception as e:  # noqa: BLE001  (checked below)
            result["error"] = e

    def shards_asked():
        return {e["path"] for e in proxy.stats()["log"] if "-of-" in e["path"]}

    t = threading.Thread(target=load)
    t.start()
    try:
        for _ in range(1500):  # bounded polling of the proxy's log
            if len(shards_asked()) >= 4 or not t.is_alive():
                break
            t.join(0.02)
        held = shards_asked()
    finally:
        released_at = time.monotonic()
        proxy.release(0)
        t.join(60)
    assert len(held) == 4, held
    assert set(result.get("state", {})) == set(state), result
    later = [e for e in proxy.stats()["log"] if "-of-" in e["path"] and e["path"] not in held]
    assert {e["path"] for e in later} and all(e["time"] > released_at for e in later), later


# ---- hostile headers --------------------------------------------------------------------------

def hostile_cases():
    cases = []
    for line in HOSTILE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, data_bytes, length, expected, header = line.split("\t", 4)
        # \xNN is a byte, \t a tab (as tests/unit/test_safetensors.c reads them)
        raw = re.sub(rb"\\x([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]),
                     header.encode()).replace(b"\\t", b"\t")
        n = len(raw) if length == "-" else int(length)
        cases.append(pytest.param(struct.pack("<Q", n) + raw + bytes(int(data_bytes)),
                                  expected, id=name))
    return cases


# headers safetensors 0.8 accepts but s3flash refuses (serde_json nests 128 deep; a name
# given twice: the last wins)
STRICTER = {"too_deep", "duplicate_name"}


@pytest.mark.parametrize("raw,expected", hostile_cases())
def test_hostile_header(client, s3, bucket, request, raw, expected):
    """Each hostile file fails load_file with SafetensorError naming what was wrong, before
    any data byte is fetched; safetensors itself refuses it too (but for STRICTER)."""
    name = request.node.callspec.id
    key = f"hostile/{name}.safetensors"
    put(s3, bucket, key, raw)
    with pytest.raises(s3st.SafetensorError) as ei:
        s3st.load_file(f"s3://{bucket}/{key}", client=client)
    assert expected in str(ei.value), str(ei.value)
    assert f"s3://{bucket}/{key}" in str(ei.value)
    if name not in STRICTER:
        with pytest.raises(Exception):
            deserialize(raw)


def test_empty_and_tiny_files(client, s3, bucket):
    put(s3, bucket, "tiny/empty", b"")
    with pytest.raises(s3st.SafetensorError, match="the file is empty"):
        s3st.load_file(f"s3://{bucket}/tiny/empty", client=client)
    put(s3, bucket, "tiny/five", b"12345")
    with pytest.raises(s3st.SafetensorError, match="the file has 5 bytes, fewer than the 8"):
        s3st.load_file(f"s3://{bucket}/tiny/five", client=client)


def test_long_header_second_get(proxied, proxy, s3, bucket):
    """A header longer than the first GET: the rest in a second ranged GET of exactly what
    is missing, then the data."""
    tensors = {f"{'n' * 200}{i}": torch.full((1,), i, dtype=torch.int32) for i in range(6000)}
    raw = st.save(tensors)
    data0, _ = offsets(raw)
    assert data0 > s3st.HEADER_CHUNK
    put(s3, bucket, "long/h.safetensors", raw)
    proxy.reset()
    got = s3st.load_file(f"s3://{bucket}/long/h.safetensors", client=proxied)
    assert all(same_bits(got[n], t) for n, t in tensors.items())
    asked = ranges(proxy, "long/h.safetensors")
    assert asked == [(0, s3st.HEADER_CHUNK - 1), (s3st.HEADER_CHUNK, data0 - 1),
                     (data0, len(raw) - 1)], asked


# ---- faults ------------------------------------------------------------------------------------

def gets(key):
    return {"method": "GET", "path": key.replace(".", r"\.") + "$"}


@pytest.fixture(scope="module")
def big(client, s3, bucket):
    gen = torch.Generator().manual_seed(11)
    tensors = {f"w{i}": random_tensor(torch.bfloat16, (512, 1024 + 8 * i), gen)
               for i in range(20)}
    key = "faults/big.safetensors"
    put(s3, bucket, key, st.save(tensors))
    return key, tensors


@pytest.mark.parametrize("fault", ["reset", "short", "503"])
def test_load_through_faults(proxied, proxy, bucket, big, fault):
    """Resets mid-body, short 206s and 503s on the header's and the data's GETs: the load
    retries or continues, and every tensor is exact."""
    key, tensors = big
    f = gets(key)
    if fault == "reset":
        rules = [{"match": dict(f, nth=n), "action": "reset_response_body_at", "at": "random",
                  "seed": n} for n in (1, 3, 4)]
    elif fault == "short":
        rules = [{"match": dict(f, nth=n), "action": "short_range", "fraction": 0.4}
                 for n in (1, 2, 5)]
    else:
        rules = [{"match": dict(f, max_count=4), "action": "respond", "status": 503,
                  "s3_error": {"code": "SlowDown", "message": "slow down"}}]
    proxy.set_faults(rules)
    got = s3st.load_file(f"s3://{bucket}/{key}", client=proxied)
    assert all(same_bits(got[n], t) for n, t in tensors.items())
    assert proxy.stats()["faults_total"] >= 3


def test_load_unavailable_is_a_clear_error(proxied, proxy, bucket, big):
    """503 on every attempt: S3Exception with S3's code and request id, no tensor."""
    key, _ = big
    proxy.set_faults([integration_faults().s3_error("SlowDown", 503, gets(key))])
    with pytest.raises(s3flash.S3Exception) as ei:
        s3st.load_file(f"s3://{bucket}/{key}", client=proxied)
    assert "SlowDown" in str(ei.value) and ei.value.request_id


def test_load_file_reads_no_byte_twice(proxied, proxy, s3, bucket):
    """A file longer than the header's GET: load_file copies the data that GET brought and
    downloads only the rest, from where it ended (every byte of the file fetched once)."""
    gen = torch.Generator().manual_seed(5)
    tensors = {"a": random_tensor(torch.float32, (s3st.HEADER_CHUNK // 4 // 3, 3), gen),
               "b": random_tensor(torch.bfloat16, (3000,), gen)}
    raw = st.save(tensors)
    key = "once/model.safetensors"
    put(s3, bucket, key, raw)
    proxy.reset()
    got = s3st.load_file(f"s3://{bucket}/{key}", client=proxied)
    assert all(same_bits(got[n], t) for n, t in tensors.items())
    assert ranges(proxy, key) == [(0, s3st.HEADER_CHUNK - 1),
                                  (s3st.HEADER_CHUNK, len(raw) - 1)]


def test_replaced_between_header_and_data(proxied, proxy, s3, bucket):
    """The object replaced after its header was read: the data's GET carries If-Match of
    the header's ETag and the load fails with S3's 412 (never tensors of two versions):
    safe_open then get_tensor, and load_file with its data GET held at the proxy while the
    object is replaced (from this thread, while the loader's thread waits in the download
    with the GIL released: held, this thread could not run until the 60 s delay ended)."""
    key = "replaced/m.safetensors"
    old = st.save({"x": torch.zeros(4096), "y": torch.ones(10)})
    new = st.save({"x": torch.ones(4096), "y": torch.zeros(10)})
    put(s3, bucket, key, old)
    uri = f"s3://{bucket}/{key}"
    with s3st.safe_open(uri, client=proxied) as f:
        put(s3, bucket, key, new)
        with pytest.raises(s3flash.S3Exception) as ei:
            f.get_tensor("x")
    assert ei.value.status == "S3F_ERR_PRECONDITION_FAILED", ei.value

    # load_file: a file longer than the header's GET, so that its data needs a GET of its own
    old = st.save({"x": torch.zeros(s3st.HEADER_CHUNK // 4), "y": torch.ones(10)})
    new = st.save({"x": torch.ones(s3st.HEADER_CHUNK // 4), "y": torch.zeros(10)})
    put(s3, bucket, key, old)
    proxy.reset()
    proxy.set_faults([{"match": dict(gets(key), nth=2), "action": "delay", "seconds": 60}])
    result = {}

    def load():
        try:
            result["tensors"] = s3st.load_file(uri, client=proxied)
        except Exception as e:  # noqa: BLE001  (checked below)
            result["error"] = e

    t = threading.Thread(target=load)
    t.start()
    try:
        for _ in range(1500):  # bounded polling of the proxy's log: the data GET held
            if len(ranges(proxy, key)) >= 2 or not t.is_alive():
                break
            t.join(0.02)
        assert len(ranges(proxy, key)) >= 2, "the data GET never came"
        # this thread ran while the loader waited in the download: the GIL was released
        assert t.is_alive()
        put(s3, bucket, key, new)
    finally:
        proxy.release(0)
        t.join(60)
    assert "error" in result, result
    assert getattr(result["error"], "status", None) == "S3F_ERR_PRECONDITION_FAILED", result
