"""s3torchconnector's public names, defaults and results (issue 14 §1), against the real RGW.

- S3IterableDataset does not shard by default (enable_sharding=False): code that shards on
  its own gets every object, DataLoader workers each see the whole dataset;
- every public name upstream exports, with its defaults (DEFAULT_BUFFER_SIZE 8 MiB,
  DEFAULT_MAX_GAP_SIZE 32 MiB, dcp_optimized(max_gap_size) an int or a float such as inf);
- the DCP prefix strategies' key layouts (Default, RoundRobin, Binary, Hex), key for key;
- s3flash.dcp.S3FileSystem under torch's own FileSystemWriter/FileSystemReader;
- DCP stream extensions (torch's _extensions: zstd, or any registered extension) on
  S3StorageWriter/S3StorageReader, in FileSystemWriter's format both ways.
"""

import inspect
import io
import os
import pickle
import uuid
import zlib

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension
from torch.distributed.checkpoint.api import CheckpointException
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import s3flash
import s3flash.dcp
import s3flash.s3reader
from s3flash import S3ClientConfig, S3IterableDataset, S3ReaderConstructor
from s3flash.dcp import (BinaryPrefixStrategy, DefaultPrefixStrategy, HexPrefixStrategy,
                         NumericPrefixStrategy, RoundRobinPrefixStrategy, S3FileSystem,
                         S3StorageReader, S3StorageWriter)

MiB = 1 << 20
N = 10


@pytest.fixture(scope="module")
def ten(s3, bucket):
    prefix = f"ten-{uuid.uuid4().hex[:6]}/"
    for i in range(N):
        s3.put_object(Bucket=bucket, Key=f"{prefix}{i:02d}", Body=b"x" * (i + 1))
    return f"s3://{bucket}/{prefix}", [f"{prefix}{i:02d}" for i in range(N)]


def _key(r):
    return r.key


class ShardedByWorker(IterableDataset):
    """What code written for s3torchconnector does to shard over DataLoader workers itself
    (as torchdata's sharding_filter): item i goes to worker i % num_workers."""

    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        wi = get_worker_info()
        for i, item in enumerate(self.ds):
            if i % wi.num_workers == wi.id:
                yield item


def test_iterable_dataset_does_not_shard_by_default(ten, region, endpoint):
    uri, keys = ten
    for sig in (S3IterableDataset.__init__, S3IterableDataset.from_prefix,
                S3IterableDataset.from_objects):
        assert inspect.signature(sig).parameters["enable_sharding"].default is False
    ds = S3IterableDataset.from_prefix(uri, region=region, endpoint=endpoint, transform=_key)
    loader = dict(batch_size=None, num_workers=4, multiprocessing_context="fork")
    # the user's own sharding: every object exactly once (s3flash sharding on top: 4 of 10)
    got = list(DataLoader(ShardedByWorker(ds), **loader))
    assert sorted(got) == keys
    # no sharding at all: each of the 4 workers iterates over everything, as upstream
    assert sorted(DataLoader(ds, **loader)) == sorted(keys * 4)
    # s3flash's sharding is one argument away
    sharded = S3IterableDataset.from_prefix(uri, region=region, endpoint=endpoint,
                                            transform=_key, enable_sharding=True)
    assert sorted(DataLoader(sharded, **loader)) == keys
    # items are the reader classes upstream's are
    first = next(iter(S3IterableDataset.from_prefix(uri, region=region, endpoint=endpoint)))
    assert isinstance(first, s3flash.SequentialS3Reader) and first.read() == b"x"
    ranged = s3flash.S3MapDataset.from_prefix(
        uri, region=region, endpoint=endpoint,
        reader_constructor=S3ReaderConstructor.range_based())[1]
    assert isinstance(ranged, s3flash.RangedS3Reader) and ranged.read() == b"xx"
    # a rank without sharding would be ignored: refused
    with pytest.raises(ValueError, match="enable_sharding=True"):
        S3IterableDataset.from_prefix(uri, region=region, rank=0, world_size=2)


def test_public_names_and_defaults():
    for name in ("S3IterableDataset", "S3MapDataset", "S3Checkpoint", "S3Reader",
                 "S3ReaderConstructor", "S3Writer", "S3Exception", "S3ClientConfig",
                 "SequentialS3Reader", "RangedS3Reader", "DCPOptimizedS3Reader", "ItemRange",
                 "DEFAULT_BUFFER_SIZE", "DEFAULT_MAX_GAP_SIZE", "__version__"):
        assert hasattr(s3flash, name), name
        assert name in s3flash.__all__, name
    for name in ("S3Reader", "S3ReaderConstructor", "SequentialS3Reader", "RangedS3Reader",
                 "DCPOptimizedS3Reader", "DCPOptimizedConstructor", "ItemRange",
                 "DEFAULT_BUFFER_SIZE", "DEFAULT_MAX_GAP_SIZE"):
        assert getattr(s3flash.s3reader, name) is getattr(s3flash, name), name
    for name in ("S3FileSystem", "S3StorageReader", "S3StorageWriter",
                 "S3PrefixStrategyBase", "DefaultPrefixStrategy", "RoundRobinPrefixStrategy",
                 "NumericPrefixStrategy", "BinaryPrefixStrategy", "HexPrefixStrategy"):
        assert name in s3flash.dcp.__all__ and hasattr(s3flash.dcp, name), name
    assert s3flash.DEFAULT_BUFFER_SIZE == 8 * MiB
    assert s3flash.DEFAULT_MAX_GAP_SIZE == 32 * MiB
    gap = inspect.signature(S3ReaderConstructor.dcp_optimized).parameters["max_gap_size"]
    assert gap.default == 32 * MiB
    assert S3ReaderConstructor.dcp_optimized().max_gap_size == 32 * MiB
    c = S3ClientConfig()
    assert (c.throughput_target_gbps, c.part_size, c.unsigned, c.force_path_style,
            c.max_attempts, c.profile, c.requester_pays) == (10.0, 8 * MiB, False, False,
                                                             10, None, False)
    # the constructors make the classes upstream's do, and say so
    client = s3flash.S3Client("us-east-1", "http://127.0.0.1:1")
    for ctor, cls, kind in ((S3ReaderConstructor.sequential(), s3flash.SequentialS3Reader,
                             "sequential"),
                            (S3ReaderConstructor.default(), s3flash.SequentialS3Reader,
                             "sequential"),
                            (S3ReaderConstructor.range_based(), s3flash.RangedS3Reader,
                             "range_based"),
                            (S3ReaderConstructor.range_based(0), s3flash.RangedS3Reader,
                             "range_based")):
        r = ctor(client, "b", "k")   # lazy: nothing is sent
        assert type(r) is cls and r.reader_type == kind
        assert S3ReaderConstructor.get_reader_type_string(ctor) == kind
    assert S3ReaderConstructor.range_based()(client, "b", "k").buffer_size == 8 * MiB
    dcpc = S3ReaderConstructor.dcp_optimized(float("inf"))
    assert S3ReaderConstructor.get_reader_type_string(dcpc) == "dcp_optimized"
    assert type(dcpc(client, "b", "ckpt/__0_0.distcp")) is s3flash.SequentialS3Reader
    dcpc.set_file_ranges({"__0_0.distcp": [s3flash.ItemRange(0, 10),
                                           s3flash.ItemRange(100, 200)]})
    r = dcpc(client, "b", "ckpt/__0_0.distcp")
    assert type(r) is s3flash.DCPOptimizedS3Reader and r.reader_type == "dcp_optimized"
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError):
            S3ReaderConstructor.dcp_optimized(bad)


def test_prefix_strategy_layouts():
    assert DefaultPrefixStrategy()(7) == "__7_"
    assert RoundRobinPrefixStrategy(["x", "y"], epoch_num=2)(3) == "y/epoch_2/__3_"
    b = BinaryPrefixStrategy(prefix_count=4)
    assert [b(r) for r in range(5)] == ["0000000000/__0_", "1000000000/__1_",
                                        "0100000000/__2_", "1100000000/__3_",
                                        "0000000000/__4_"]
    h = HexPrefixStrategy(epoch_num=3, min_prefix_length=1, prefix_count=20)
    assert [h(r) for r in (1, 10, 17, 19, 20)] == ["10/epoch_3/__1_", "a0/epoch_3/__10_",
                                                   "11/epoch_3/__17_", "31/epoch_3/__19_",
                                                   "00/epoch_3/__20_"]
    assert HexPrefixStrategy()(5) == "0000000000/__5_"   # no process group: one prefix
    assert BinaryPrefixStrategy(min_prefix_length=3, prefix_count=8)(6) == "011/__6_"
    with pytest.raises(TypeError):
        NumericPrefixStrategy(10)   # abstract, as upstream
    for kw in ({"min_prefix_length": 0}, {"prefix_count": 0}, {"epoch_num": "1"}):
        with pytest.raises(ValueError):
            BinaryPrefixStrategy(**kw)


def _sd():
    torch.manual_seed(3)
    return {"a": torch.randn(128, 64), "z": torch.zeros(256, 1024), "n": torch.arange(10),
            "meta": {"step": 12, "name": "run"}}


def _empty(sd):
    return {"a": torch.empty(128, 64), "z": torch.ones(256, 1024),
            "n": torch.zeros(10, dtype=torch.long), "meta": {"step": 0, "name": ""}}


def _same(a, b):
    assert all(torch.equal(a[k], b[k]) for k in ("a", "z", "n")) and a["meta"] == b["meta"]


def _keys(s3, bucket, prefix):
    return sorted(o["Key"][len(prefix):] for o in
                  s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


@pytest.mark.parametrize("strategy,expect", [
    (HexPrefixStrategy(prefix_count=1), "0000000000/__0_0.distcp"),
    (BinaryPrefixStrategy(epoch_num=4, prefix_count=2), "0000000000/epoch_4/__0_0.distcp"),
    (RoundRobinPrefixStrategy(["p1", "p2"]), "p1/__0_0.distcp"),
], ids=["hex", "binary-epoch", "round-robin"])
def test_dcp_prefix_strategies_save_and_load(s3, bucket, region, endpoint, strategy, expect):
    prefix = f"strat-{uuid.uuid4().hex[:6]}/"
    uri = f"s3://{bucket}/{prefix}"
    sd = _sd()
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, prefix_strategy=strategy,
                                                endpoint=endpoint), no_dist=True)
    assert _keys(s3, bucket, prefix) == [".metadata", expect]
    out = _empty(sd)
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint), no_dist=True)
    _same(out, sd)


def test_dcp_optimized_infinite_gap_loads(s3, bucket, region, endpoint):
    uri = f"s3://{bucket}/inf-{uuid.uuid4().hex[:6]}"
    sd = _sd()
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint), no_dist=True)
    out = _empty(sd)
    reader = S3StorageReader(region, uri, endpoint=endpoint,
                             reader_constructor=S3ReaderConstructor.dcp_optimized(float("inf")))
    dcp.load(out, storage_reader=reader, no_dist=True)
    _same(out, sd)
    assert reader.read_stats["ranges"] == 1   # everything merged into one range


def test_s3_file_system_under_torch_filesystem_writer_and_reader(s3, bucket, region,
                                                                 endpoint):
    """torch's FileSystemWriter/FileSystemReader, their fs replaced by S3FileSystem: the
    streams, the .metadata.tmp rename, exists; and the result is an ordinary checkpoint."""
    prefix = f"fsbase-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{bucket}/{prefix}"
    fs = S3FileSystem(region, endpoint=endpoint)
    w = FileSystemWriter(uri, sync_files=False)
    w.fs = fs
    w.path = fs.init_path(uri)
    sd = _sd()
    dcp.save(sd, storage_writer=w, no_dist=True)
    assert _keys(s3, bucket, prefix + "/") == [".metadata", "__0_0.distcp"]
    assert fs.exists(uri + "/.metadata") and not fs.exists(uri + "/.metadata.tmp")
    r = FileSystemReader(uri)
    r.fs = fs
    r.path = fs.init_path(uri)
    out = _empty(sd)
    dcp.load(out, storage_reader=r, no_dist=True)
    _same(out, sd)
    out = _empty(sd)
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint), no_dist=True)
    _same(out, sd)
    assert S3FileSystem.validate_checkpoint_id(uri) and not S3FileSystem.validate_checkpoint_id(
        "/local/dir")
    assert fs.concat_path(uri + "/", "x") == uri + "/x"
    fs.rm_file(uri + "/__0_0.distcp")
    assert not fs.exists(uri + "/__0_0.distcp")
    with pytest.raises(ValueError):
        with fs.create_stream(uri + "/x", "ab"):
            pass


class Zlib(StreamTransformExtension):
    """A stream extension of the test's own (zlib per item), registered by name."""

    @staticmethod
    def registry_name():
        return "test.zlib"

    @staticmethod
    def from_descriptor(version):
        assert version == "1"
        return Zlib()

    def get_descriptor(self):
        return "test.zlib/1"

    def transform_to(self, output):
        class Writer(io.RawIOBase):
            def __init__(self):
                self.c = zlib.compressobj()

            def writable(self):
                return True

            def write(self, b):
                output.write(self.c.compress(bytes(b)))
                return len(b)

            def close(self):
                if not self.closed:
                    output.write(self.c.flush())
                    output.close()   # torch's wrapper: flushes, never closes the object
                super().close()

        return Writer()

    def transform_from(self, input):
        return io.BytesIO(zlib.decompress(input.read()))


def _descriptors(s3, bucket, prefix):
    md = pickle.loads(s3.get_object(Bucket=bucket, Key=prefix + "/.metadata")["Body"].read())
    return {tuple(v.transform_descriptors or ()) for v in md.storage_data.values()}


def test_dcp_custom_stream_extension(s3, bucket, region, endpoint):
    prefix = f"ext-zlib-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{bucket}/{prefix}"
    sd = _sd()
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint,
                                                _extensions=[Zlib()]), no_dist=True)
    assert _descriptors(s3, bucket, prefix) == {("test.zlib/1",)}
    size = s3.head_object(Bucket=bucket, Key=prefix + "/__0_0.distcp")["ContentLength"]
    assert size < 256 * 1024   # the 1 MiB of zeros went through zlib
    reg = ExtensionRegistry()
    reg.register(Zlib)
    out = _empty(sd)
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint,
                                                 _extension_registry=reg), no_dist=True)
    _same(out, sd)
    with pytest.raises(CheckpointException, match="Unknown extension name='test.zlib'"):
        dcp.load(_empty(sd), storage_reader=S3StorageReader(region, uri, endpoint=endpoint),
                 no_dist=True)   # torch's default registry lacks it


def test_dcp_zstd_both_ways_with_filesystem_writer(s3, bucket, region, endpoint, tmp_path):
    pytest.importorskip("zstandard")
    from torch.distributed.checkpoint._extension import ZStandard
    sd = _sd()
    # s3flash writes zstd items; torch's FileSystemReader reads a local copy
    prefix = f"ext-zstd-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{bucket}/{prefix}"
    dcp.save(sd, storage_writer=S3StorageWriter(region, uri, endpoint=endpoint,
                                                _extensions=[ZStandard()]), no_dist=True)
    assert _descriptors(s3, bucket, prefix) == {("stream.zstd/1",)}
    out = _empty(sd)
    dcp.load(out, storage_reader=S3StorageReader(region, uri, endpoint=endpoint), no_dist=True)
    _same(out, sd)
    local = tmp_path / "down"
    local.mkdir()
    for name in _keys(s3, bucket, prefix + "/"):
        s3.download_file(bucket, f"{prefix}/{name}", str(local / name))
    out = _empty(sd)
    dcp.load(out, storage_reader=FileSystemReader(str(local)), no_dist=True)
    _same(out, sd)
    # torch's FileSystemWriter writes zstd items locally; s3flash reads them from S3
    src = tmp_path / "up"
    dcp.save(sd, storage_writer=FileSystemWriter(str(src), _extensions=[ZStandard()]),
             no_dist=True)
    prefix2 = prefix + "-fs"
    for name in os.listdir(src):
        s3.upload_file(str(src / name), bucket, f"{prefix2}/{name}")
    out = _empty(sd)
    dcp.load(out, storage_reader=S3StorageReader(region, f"s3://{bucket}/{prefix2}",
                                                 endpoint=endpoint), no_dist=True)
    _same(out, sd)


def test_storage_writer_and_reader_expose_fs(s3, bucket, region, endpoint):
    """upstream's S3StorageWriter.fs/S3StorageReader.fs: an S3FileSystem over the writer's
    client, its path the checkpoint's; code that renames or removes a checkpoint's objects
    through it (upstream's rename/rm tests, multi-process DCP tests) works the same."""
    prefix = f"fs-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{bucket}/{prefix}"
    writer = S3StorageWriter(region, uri, endpoint=endpoint)
    assert isinstance(writer.fs, s3flash.dcp.S3FileSystem)
    assert writer.fs is writer.fs                      # one per writer
    assert writer.fs._path == uri
    sd = _sd()
    dcp.save(sd, storage_writer=writer, no_dist=True)
    meta = writer.fs.concat_path(uri, ".metadata")
    assert writer.fs.exists(meta)
    data = writer.fs.concat_path(uri, "__0_0.distcp")
    moved = writer.fs.concat_path(uri, "moved.distcp")
    writer.fs.rename(data, moved)
    assert not writer.fs.exists(data) and writer.fs.exists(moved)
    assert sorted(_keys(s3, bucket, prefix + "/")) == [".metadata", "moved.distcp"]
    writer.fs.rename(moved, data)
    writer.reset(f"s3://{bucket}/{prefix}-2")          # a new checkpoint id moves .fs too
    assert writer.fs._path == f"s3://{bucket}/{prefix}-2"
    reader = S3StorageReader(region, uri, endpoint=endpoint)
    out = _empty(sd)
    dcp.load(out, storage_reader=reader, no_dist=True)
    _same(out, sd)
    reader.fs.rm_file(meta)
    assert not reader.fs.exists(meta)
    assert pickle.loads(pickle.dumps(reader)).fs.exists(data)   # rebuilt after unpickling


def test_requester_pays_needs_signed_requests():
    """requester_pays with unsigned requests is refused at once, as upstream (S3 bills the
    requester, so the request must say who that is): no client is built."""
    with pytest.raises(ValueError, match="requester_pays.*unsigned"):
        S3ClientConfig(requester_pays=True, unsigned=True)
    with pytest.raises(ValueError, match="requester_pays"):
        s3flash.S3Client("us-east-1", s3client_config=S3ClientConfig(requester_pays=True,
                                                                     unsigned=True))
    assert S3ClientConfig(requester_pays=True).requester_pays       # signed: fine
    assert S3ClientConfig(unsigned=True).unsigned


def test_region_may_be_omitted(monkeypatch, s3, bucket, endpoint):
    """The deliberate difference (docs/PYTHON.md): region is Optional[str]; None takes
    AWS_REGION (else the profile's, else us-east-1) and the requests are signed for it."""
    key = f"region-{uuid.uuid4().hex[:6]}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"abc")
    assert inspect.signature(s3flash.S3Client).parameters["region"].default is None
    c = s3flash.S3Client(None, endpoint=endpoint)
    with c.get_object(bucket, key) as r:
        assert r.read() == b"abc"
