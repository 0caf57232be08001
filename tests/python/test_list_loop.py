"""Issue 28, D4: the package's listings (S3Client.list_objects, the datasets' from_prefix,
fsspec's ls/find) end with S3Exception when the server hands back a continuation token the
listing already followed (the same one, or a cycle), or a truncated page with none; before,
they listed forever. An honest listing of many pages comes whole. The server is
tests/integration/http_faults.py over a real socket; each listing runs on a thread with a
deadline, so one that loops fails the test instead of hanging it."""

import sys
import threading
from pathlib import Path

import pytest

import s3flash
from s3flash.fsspec import S3FlashFileSystem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from http_faults import LONG_PAGES, FaultServer  # noqa: E402

LOOPS = ["list-same-token", "list-cycle", "list-no-token"]
MAX_HITS = 6
DEADLINE_S = 30


@pytest.fixture(scope="module")
def faults():
    with FaultServer() as srv:
        yield srv


def bounded(fn):
    """fn() on a daemon thread: its result, or its exception raised; fails past DEADLINE_S
    (a listing that loops)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (handed to the test)
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    assert not t.is_alive(), f"the listing did not end within {DEADLINE_S} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def client(faults):
    return s3flash.S3Client(region="us-east-1", endpoint=faults.url,
                            s3client_config=s3flash.S3ClientConfig(force_path_style=True))


def map_keys(ds):
    return [ds[i].key for i in range(len(ds))]  # len(): the whole listing


def listers(faults):
    c = client(faults)
    fs = S3FlashFileSystem(endpoint_url=faults.url, region="us-east-1", skip_instance_cache=True)
    return {
        "list_objects": lambda b: [o.key for o in c.list_objects(b)],
        "iterable_dataset": lambda b: [r.key for r in s3flash.S3IterableDataset.from_prefix(
            f"s3://{b}/", region="us-east-1", endpoint=faults.url, prefetch=0,
            s3client_config=s3flash.S3ClientConfig(force_path_style=True))],
        "map_dataset": lambda b: map_keys(s3flash.S3MapDataset.from_prefix(
            f"s3://{b}/", region="us-east-1", endpoint=faults.url, prefetch=0,
            s3client_config=s3flash.S3ClientConfig(force_path_style=True))),
        "fsspec_ls": lambda b: fs.ls(f"{b}/", detail=False),
    }


@pytest.mark.parametrize("fault", LOOPS)
@pytest.mark.parametrize("how", ["list_objects", "iterable_dataset", "map_dataset",
                                 "fsspec_ls"])
def test_listing_that_loops_raises(faults, fault, how):
    before = faults.hits[fault]
    with pytest.raises(s3flash.S3Exception) as ei:
        bounded(lambda: listers(faults)[how](fault))
    msg = str(ei.value)
    assert "already followed" in msg or "NextContinuationToken" in msg, msg
    assert 1 <= faults.hits[fault] - before <= MAX_HITS


@pytest.mark.parametrize("how", ["list_objects", "iterable_dataset", "map_dataset",
                                 "fsspec_ls"])
def test_long_honest_listing_is_whole(faults, how):
    keys = bounded(lambda: listers(faults)[how]("list-long"))
    assert [k.rsplit("/", 1)[-1] for k in keys] == [f"k-{i:04d}" for i in range(LONG_PAGES)]
