"""S3 Express One Zone directory buckets from Python, against the sink's --express emulation
(bench/sink_express.c: sessions checked on every request, listings in no order, appends,
RenameObject). AWS's rules these tests hold the package to are listed in
tests/integration/test_express.py; here: the S3ClientConfig names (s3torchconnector has no
Express-specific field: a directory bucket is recognised from its name), datasets complete
and in key order over unordered listings (the same index is the same object in every
worker), checkpoints, ReadOnly sessions, a revoked session re-created, rename and append."""
import dataclasses
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
import torch

import s3flash
from ready import read_line
from s3flash import S3Checkpoint, S3Client, S3ClientConfig, S3IterableDataset, S3MapDataset
from s3flash import S3PermissionError

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "train--usw2-az1--x-s3"


class ExpressSink:
    def __init__(self, tmp_path, *args):
        build = os.environ.get("S3FLASH_BUILD_DIR", str(ROOT / "build"))
        exe = Path(build) / "bench" / "s3flash-sink"
        if not exe.exists():
            pytest.skip(f"{exe} not built")
        # ready once it printed its port (after listen()); asked nothing more: the tests
        # count the requests it saw (?sink-stats)
        self.proc = subprocess.Popen([str(exe), "--port", "0", "--print-port", "--express",
                                      "--store", "256M", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        try:
            port = int(read_line(self.proc, r"^port (\d+)$", "the sink").group(1))
        except AssertionError:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=15)
            raise AssertionError(f"the sink did not start: {err[-2000:]}") from None
        self.endpoint = f"http://127.0.0.1:{port}"

    def stats(self):
        with urllib.request.urlopen(f"{self.endpoint}/?sink-stats", timeout=10) as r:
            return {k: int(v) for k, v in (ln.split() for ln in r.read().decode().splitlines())}

    def revoke(self):
        req = urllib.request.Request(f"{self.endpoint}/?sink-revoke-sessions", data=b"",
                                     method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self):
        self.proc.terminate()
        self.proc.communicate(timeout=15)
        return self.proc.returncode


@pytest.fixture(scope="module")
def xsink(tmp_path_factory):
    s = ExpressSink(tmp_path_factory.mktemp("xsink"))
    yield s
    assert s.stop() == 0


def client(xsink, **cfg):
    return S3Client("us-west-2", xsink.endpoint, s3client_config=S3ClientConfig(**cfg))


def test_config_names_match_s3torchconnector():
    # every s3torchconnector field, same defaults; Express needs none of its own
    cfg = S3ClientConfig()
    assert (cfg.throughput_target_gbps, cfg.part_size, cfg.unsigned, cfg.force_path_style,
            cfg.max_attempts, cfg.profile) == (10.0, 8 << 20, False, False, 10, None)
    names = {f.name for f in dataclasses.fields(S3ClientConfig)}
    assert {"express_read_only", "disable_express_session_auth"} <= names
    assert cfg.express_read_only is False and cfg.disable_express_session_auth is None


def test_checkpoint_roundtrip(xsink):
    ckpt = S3Checkpoint(region="us-west-2", endpoint=xsink.endpoint)
    state = {"w": torch.arange(1 << 20, dtype=torch.float32), "step": 7}
    before = xsink.stats()
    with ckpt.writer(f"s3://{BUCKET}/ckpt/epoch-1.pt") as w:
        torch.save(state, w)
    with ckpt.reader(f"s3://{BUCKET}/ckpt/epoch-1.pt") as r:
        back = torch.load(r)
    assert torch.equal(back["w"], state["w"]) and back["step"] == 7
    after = xsink.stats()
    assert after["create_session"] - before["create_session"] == 1  # one client, one bucket
    assert after["denied"] == before["denied"] and after["invalid"] == before["invalid"]


def test_datasets_complete_and_sorted_over_unordered_listing(xsink):
    c = client(xsink)
    keys = [f"shards/{i:04d}.bin" for i in range(250)]
    for k in keys:
        c.upload(BUCKET, k, k.encode())
    raw = [o.key for o in c.list_objects(BUCKET, "shards/")]
    assert sorted(raw) == keys and raw != keys  # the server's order is not key order
    ds = S3MapDataset.from_prefix(f"s3://{BUCKET}/shards/", region="us-west-2",
                                  endpoint=xsink.endpoint, list_page_size=9,
                                  transform=lambda r: (r.key, r.read()))
    assert len(ds) == 250
    items = [ds[i] for i in range(len(ds))]
    assert [k for k, _ in items] == keys
    assert all(data == k.encode() for k, data in items)
    it = S3IterableDataset.from_prefix(f"s3://{BUCKET}/shards/", region="us-west-2",
                                       endpoint=xsink.endpoint, list_page_size=11,
                                       transform=lambda r: r.key)
    assert list(it) == keys


def test_read_only_sessions(xsink):
    c = client(xsink)
    c.upload(BUCKET, "ro/obj", b"payload")
    before = xsink.stats()
    ro = client(xsink, express_read_only=True)
    assert ro.head_object(BUCKET, "ro/obj")["size"] == 7
    assert xsink.stats()["readonly"] - before["readonly"] == 1
    with pytest.raises(S3PermissionError):
        ro.upload(BUCKET, "ro/other", b"x")


def test_revoked_session_is_recreated(xsink):
    c = client(xsink)
    c.upload(BUCKET, "rv/a", b"one")
    before = xsink.stats()
    xsink.revoke()
    c.upload(BUCKET, "rv/b", b"two")  # 403 InvalidToken, a new session, sent again
    assert c.native.head_object(BUCKET, "rv/b")["size"] == 3
    after = xsink.stats()
    assert after["invalid"] - before["invalid"] == 1
    assert after["create_session"] - before["create_session"] == 1


def test_rename_and_append(xsink):
    c = client(xsink)
    c.upload(BUCKET, "mv/src", b"data")
    before = xsink.stats()
    c.native.rename_object(BUCKET, "mv/src", "mv/dst")
    after = xsink.stats()
    assert after["renames"] - before["renames"] == 1 and after["copies"] == before["copies"]
    assert c.native.head_object(BUCKET, "mv/dst")["size"] == 4
    with pytest.raises(s3flash.S3NotFoundError):
        c.native.head_object(BUCKET, "mv/src")
    info = c.native.append_object(BUCKET, "log", 0, b"a\n")
    info = c.native.append_object(BUCKET, "log", 2, memoryview(b"b\n"))
    assert info["size"] == 4
    with pytest.raises(s3flash.S3Exception):
        c.native.append_object(BUCKET, "log", 2, b"late")  # InvalidWriteOffset


def test_fsspec_mv_renames_within_directory_bucket(xsink):
    from s3flash.fsspec import S3FlashFileSystem
    fs = S3FlashFileSystem(endpoint_url=xsink.endpoint, region="us-west-2")
    fs.pipe_file(f"{BUCKET}/fs/a.txt", b"A")
    for i in range(3):
        fs.pipe_file(f"{BUCKET}/fs/tree/{i}", str(i).encode())
    before = xsink.stats()
    fs.mv(f"{BUCKET}/fs/a.txt", f"{BUCKET}/fs/b.txt")
    fs.mv(f"{BUCKET}/fs/tree", f"{BUCKET}/fs/moved", recursive=True)
    after = xsink.stats()
    assert after["renames"] - before["renames"] == 4
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    assert fs.cat_file(f"{BUCKET}/fs/b.txt") == b"A"
    assert not fs.exists(f"{BUCKET}/fs/a.txt")
    assert sorted(fs.find(f"{BUCKET}/fs/moved")) == [f"{BUCKET}/fs/moved/{i}" for i in range(3)]
