"""The datasets' read-ahead (issue 22) against RGW, faults injected by the fault proxy at the
socket: many GETs in flight, items delivered in the listing's order whatever order the GETs
complete in, a failed GET retried in place, an object deleted between the listing and its
GET (a clear per-item error through the DataLoader, no hang), the bytes fetched ahead
within prefetch_bytes (counted by the engine), sharding over 2 ranks x 3 workers with
prefetch, and the map dataset's batches (with the batch sampler's read-ahead)."""

import re
import time
import pytest
from torch.utils.data import DataLoader

import s3flash
from s3flash import S3IterableDataset, S3MapDataset
from helpers import put_objects

N = 48
PREFIX = "pf/"
MiB = 1 << 20


def _body(i):
    return f"prefetched {i:04d}|".encode() + bytes([i % 251]) * (1000 + 37 * i)


def _key(i):
    return f"{PREFIX}{i:04d}"


KEYS = [_key(i) for i in range(N)]


@pytest.fixture
def opts(region, endpoint):
    return {"region": region, "endpoint": endpoint}


@pytest.fixture(scope="module")
def seeded(s3, bucket):
    put_objects(s3, bucket, {_key(i): _body(i) for i in range(N)})
    return f"s3://{bucket}/{PREFIX}"


def checked(r):
    """The key, after checking the bytes are the object's."""
    data = r.read()
    i = int(r.key[len(PREFIX):])
    assert data == _body(i), r.key
    return r.key


def _gets(proxy, bucket):
    """{key: [request times]} of the GETs that went through the proxy, in arrival order."""
    out = {}
    for e in proxy.stats()["log"]:
        if e["method"] == "GET" and e["path"].startswith(f"/{bucket}/{PREFIX}"):
            out.setdefault(e["path"][len(bucket) + 2:], []).append(e["time"])
    return out


def test_in_order_under_out_of_order_completions(seeded, bucket, region, proxy):
    """The GETs of objects 0, 1 and 5 are held 0.6 s at the proxy: the later objects
    complete first, yet the items come in the listing's order with their own bytes, and
    every GET was sent before the delayed ones were answered (all in flight together)."""
    proxy.set_faults([{"match": {"method": "GET",
                                 "path": f"^/{bucket}/{PREFIX}(0000|0001|0005)$"},
                       "action": "delay", "seconds": 0.6}])
    ds = S3IterableDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                       transform=checked)
    assert list(ds) == KEYS
    gets = _gets(proxy, bucket)
    assert sorted(gets) == KEYS and all(len(t) == 1 for t in gets.values()), gets
    first = min(t[0] for t in gets.values())
    # the first 20 GETs (at least) left before the first delayed answer could come back
    assert sum(1 for t in gets.values() if t[0] < first + 0.5) >= 20, gets
    # the same through a shuffled order: the shuffled order is the delivery order
    proxy.reset()
    shuffled = S3IterableDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                             transform=checked, shuffle=True, seed=3)
    lazy = S3IterableDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                         transform=lambda r: r.key, shuffle=True, seed=3,
                                         prefetch=0)
    got = list(shuffled)
    assert got == list(lazy) and sorted(got) == KEYS and got != KEYS


def test_failed_gets_retried_in_place(seeded, bucket, region, proxy):
    """Object 3's first GET gets a 503 SlowDown, object 7's first response is cut after 100
    body bytes: both are retried by the engine, and delivered in their place."""
    proxy.set_faults([
        {"match": {"method": "GET", "path": f"^/{bucket}/{PREFIX}0003$", "nth": 1},
         "action": "respond", "status": 503,
         "s3_error": {"code": "SlowDown", "message": "slow down"}},
        {"match": {"method": "GET", "path": f"^/{bucket}/{PREFIX}0007$", "nth": 1},
         "action": "reset_response_body_at", "at": 100},
    ])
    ds = S3IterableDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                       transform=checked)
    assert list(ds) == KEYS
    gets = _gets(proxy, bucket)
    assert len(gets[_key(3)]) == 2 and len(gets[_key(7)]) == 2, gets
    assert all(len(gets[k]) == 1 for k in KEYS if k not in (_key(3), _key(7)))


@pytest.mark.parametrize("kind", ["iterable", "map"])
def test_object_deleted_after_listing_fails_its_item(s3, bucket, opts, kind):
    """An object deleted between the listing and its GET: the DataLoader (2 workers)
    raises an error naming the key and NoSuchKey, promptly; the items before it came."""
    pre = f"pf-del-{kind}/"
    for i in range(12):
        s3.put_object(Bucket=bucket, Key=f"{pre}{i:02d}", Body=b"x" * 2000)
    uri = f"s3://{bucket}/{pre}"
    if kind == "iterable":
        listed = list(S3IterableDataset.from_prefix(uri, prefetch=0, **opts)
                      ._get_dataset_objects(s3flash.S3Client(**opts)))
        ds = S3IterableDataset(opts["region"], lambda c: iter(listed), opts["endpoint"],
                               transform=lambda r: (r.key, len(r.read())),
                               enable_sharding=True)
        loader = DataLoader(ds, batch_size=None, num_workers=2,
                            multiprocessing_context="fork", timeout=60)
    else:
        ds = S3MapDataset.from_prefix(uri, transform=lambda r: (r.key, len(r.read())), **opts)
        assert len(ds) == 12  # listed here, before the deletion
        loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list,
                            multiprocessing_context="fork", timeout=60)
    s3.delete_object(Bucket=bucket, Key=f"{pre}09")
    got = []
    with pytest.raises(Exception) as ei:
        for item in loader:
            got.append(item)
    msg = str(ei.value)
    assert f"{pre}09" in msg and "NoSuchKey" in msg, msg
    assert got  # the items before it were delivered


def test_prefetch_memory_bound_1mib_objects(s3, bucket, opts):
    """24 objects of 1 MiB, prefetch_bytes 4 MiB: the engine's fetch never holds more than
    the bound (plus one object, the one that opened the window), counted in C, and every
    object comes whole and in order."""
    pre = "pf-big/"
    body = [bytes([i]) * MiB for i in range(24)]
    put_objects(s3, bucket, {f"{pre}{i:02d}": body[i] for i in range(24)}, threads=4)
    ds = S3IterableDataset.from_prefix(f"s3://{bucket}/{pre}", prefetch_bytes=4 * MiB,
                                       transform=lambda r: r.read(), **opts)
    got = list(ds)
    assert got == body
    held_now, high_water = ds._last_ahead.held()
    assert 0 < high_water <= 4 * MiB, high_water
    # without the bound, the same fetch holds most of the 24 MiB at once
    unbounded = S3IterableDataset.from_prefix(f"s3://{bucket}/{pre}", prefetch=24,
                                              prefetch_bytes=64 * MiB,
                                              transform=lambda r: len(r.read()), **opts)
    it = iter(unbounded)
    next(it)
    deadline = time.monotonic() + 20
    while unbounded._last_ahead.held()[0] < 16 * MiB and time.monotonic() < deadline:
        time.sleep(0.02)  # bounded polling: the other 23 GETs arriving
    assert unbounded._last_ahead.held()[0] >= 16 * MiB
    assert sum(it) == 23 * MiB


def test_sharding_with_prefetch_2_ranks_3_workers(seeded, opts):
    """2 ranks x 3 DataLoader workers, read-ahead on: every object exactly once."""
    got = []
    for rank in range(2):
        ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True, rank=rank,
                                           world_size=2, transform=checked, **opts)
        got += list(DataLoader(ds, batch_size=None, num_workers=3,
                               multiprocessing_context="fork"))
    assert sorted(got) == KEYS


def test_map_batches_and_batch_sampler_read_ahead(seeded, bucket, region, proxy):
    """A DataLoader with batch_size: each batch fetched at once, in the batch's order, the
    next run of a sequential sampler behind it. With ds.batch_sampler(...) the next
    batches of each worker are fetched too: every object is still sent for exactly once,
    and the samples come in the sampler's order."""
    ds = S3MapDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                  transform=checked)
    batches = list(DataLoader(ds, batch_size=8, collate_fn=list))
    assert [k for b in batches for k in b] == KEYS
    # consecutive batches: the next run was fetched behind each batch, each object once
    gets = _gets(proxy, bucket)
    assert sorted(gets) == KEYS and all(len(t) == 1 for t in gets.values()), gets
    proxy.reset()
    for workers in (0, 2):
        loader = DataLoader(ds, batch_sampler=ds.batch_sampler(8, num_workers=workers),
                            num_workers=workers, collate_fn=list,
                            **({"multiprocessing_context": "fork"} if workers else {}))
        assert [k for b in loader for k in b] == KEYS
        gets = _gets(proxy, bucket)
        assert sorted(gets) == KEYS and all(len(t) == 1 for t in gets.values()), gets
        proxy.reset()
    shuffled = ds.batch_sampler(5, shuffle=True, num_workers=2)
    order = [i for b in shuffled for i in b]
    assert sorted(order) == list(range(N))
    assert all(isinstance(b.ahead, list) for b in shuffled)


def test_listing_overlapped_with_fetching(seeded, bucket, region, proxy):
    """from_prefix with 10 keys a page: the first page's GETs are sent before the second
    page's listing is answered (LIST requests delayed 0.3 s each at the proxy)."""
    proxy.set_faults([{"match": {"method": "GET", "query": "list-type=2"},
                       "action": "delay", "seconds": 0.3}])
    ds = S3IterableDataset.from_prefix(seeded, region=region, endpoint=proxy.endpoint,
                                       list_page_size=10, transform=checked)
    assert list(ds) == KEYS
    log = proxy.stats()["log"]
    lists = [e["time"] for e in log if "list-type=2" in (e.get("query") or "")]
    first_gets = [e["time"] for e in log
                  if e["method"] == "GET" and re.search(f"{PREFIX}000[0-9]$", e["path"])]
    assert len(lists) == 5 and len(first_gets) == 10
    assert max(first_gets) < lists[1] + 0.3  # before the second page came back
