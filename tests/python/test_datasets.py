"""S3MapDataset and S3IterableDataset against RGW: DataLoader workers (fork), sharding over
ranks × workers (explicit and with a real 2-process gloo group), shuffling with a seed and an
epoch, transforms, from_objects, a listing that streams, lazy readers, errors."""

import json
import multiprocessing
import os
import pickle
import traceback

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import s3flash
from s3flash import S3IterableDataset, S3MapDataset, S3Reader, S3ReaderConstructor
from s3flash import _dataset_objects
from conftest import faultproxy
from helpers import put_objects

N = 200
PREFIX = "ds/"


def _body(i):
    return f"object {i:04d}|".encode() + bytes([i % 251]) * (512 + 7 * i)


def _key(i):
    return f"{PREFIX}{i:04d}.bin"


ALL_KEYS = [_key(i) for i in range(N)]


@pytest.fixture(scope="module")
def seeded(s3, bucket):
    """N small objects under PREFIX (boto3, 8 at a time)."""
    put_objects(s3, bucket, {_key(i): _body(i) for i in range(N)})
    return f"s3://{bucket}/{PREFIX}"


@pytest.fixture
def opts(region, endpoint):
    return {"region": region, "endpoint": endpoint}


def key_and_check(r):
    """The transform of most tests: the key, after checking the bytes."""
    assert isinstance(r, S3Reader)
    data = r.read()
    i = int(r.key[len(PREFIX):len(PREFIX) + 4])
    assert data == _body(i), r.key
    return r.key


def _loader(ds, workers=2, **kw):
    if workers:
        kw.update(num_workers=workers, multiprocessing_context="fork")
    return DataLoader(ds, batch_size=None, **kw)


# -- DataLoader with 2 workers: every object exactly once --------------------------------

@pytest.mark.parametrize("prefetch", [0, 8])
def test_iterable_dataloader_2_workers_each_once(seeded, opts, prefetch):
    ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True,
                                       transform=key_and_check, prefetch=prefetch,
                                       **opts)
    got = list(_loader(ds))
    assert sorted(got) == ALL_KEYS


def test_map_dataloader_2_workers_each_once(seeded, opts):
    ds = S3MapDataset.from_prefix(seeded, transform=key_and_check, **opts)
    assert len(ds) == N
    assert ds[0] == ALL_KEYS[0] and ds[-1] == ALL_KEYS[-1]
    got = list(_loader(ds, shuffle=True))
    assert sorted(got) == ALL_KEYS and got != ALL_KEYS


def test_map_batches_prefetch(seeded, opts):
    """With a batch_size the DataLoader asks for whole batches (__getitems__): prefetch
    fetches them in parallel, in the batch's order."""
    ds = S3MapDataset.from_prefix(seeded, transform=key_and_check, prefetch=8, **opts)
    loader = DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context="fork",
                        shuffle=True, collate_fn=list)
    batches = list(loader)
    assert len(batches) == 13 and sorted(k for b in batches for k in b) == ALL_KEYS
    assert ds.__getitems__([7, 3, -1]) == [ALL_KEYS[7], ALL_KEYS[3], ALL_KEYS[-1]]


def test_iterable_without_sharding_is_s3torchconnector_behaviour(seeded, opts):
    """enable_sharding=False: every worker yields the whole dataset (as s3torchconnector
    does by default)."""
    ds = S3IterableDataset.from_prefix(seeded, transform=key_and_check,
                                       enable_sharding=False, prefetch=8, **opts)
    got = list(_loader(ds))
    assert sorted(got) == sorted(ALL_KEYS * 2)


# -- sharding over ranks × workers -------------------------------------------------------

def test_sharding_2_ranks_2_workers_explicit(seeded, opts):
    per_rank = []
    for rank in range(2):
        ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True,
                                           transform=key_and_check, rank=rank,
                                           world_size=2, prefetch=4, **opts)
        per_rank.append(list(_loader(ds)))
    assert set(per_rank[0]).isdisjoint(per_rank[1])
    assert sorted(per_rank[0] + per_rank[1]) == ALL_KEYS
    assert abs(len(per_rank[0]) - len(per_rank[1])) <= 1
    # shuffled: still a partition, and ranks agree on the permutation
    per_rank = []
    for rank in range(2):
        ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True,
                                           transform=_keys_of, rank=rank,
                                           world_size=2, shuffle=True, seed=7, **opts)
        ds.set_epoch(3)
        per_rank.append(list(_loader(ds)))
    assert sorted(per_rank[0] + per_rank[1]) == ALL_KEYS


def test_bad_rank_arguments(seeded, opts):
    with pytest.raises(ValueError):
        S3IterableDataset.from_prefix(seeded, enable_sharding=True, rank=2, world_size=2, **opts)
    with pytest.raises(ValueError):
        S3IterableDataset.from_prefix(seeded, rank=0, **opts)


def _dist_rank_main(rank, store, out, uri, region, endpoint):
    code = 1
    try:
        torch.set_num_threads(1)
        torch.distributed.init_process_group("gloo", init_method=f"file://{store}",
                                             rank=rank, world_size=2)
        it = S3IterableDataset.from_prefix(uri, enable_sharding=True,
                                           region=region, endpoint=endpoint,
                                           transform=key_and_check)
        iterable = list(_loader(it))
        m = S3MapDataset.from_prefix(uri, region=region, endpoint=endpoint,
                                     transform=key_and_check)
        sampler = DistributedSampler(m, shuffle=True, seed=5)
        epochs = []
        for e in range(2):
            sampler.set_epoch(e)
            epochs.append(list(_loader(m, sampler=sampler)))
        # the ranks agree over gloo on how many objects they saw
        t = torch.tensor([len(iterable)])
        torch.distributed.all_reduce(t)
        with open(out, "w") as f:
            json.dump({"iterable": iterable, "map": epochs, "total": int(t)}, f)
        torch.distributed.destroy_process_group()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def test_torch_distributed_gloo_2_processes(seeded, opts, tmp_path):
    """Two real ranks (gloo, world_size 2), each with a DataLoader of 2 workers: the
    iterable dataset takes the rank from torch.distributed; the map dataset shards with
    DistributedSampler."""
    ctx = multiprocessing.get_context("fork")
    store = tmp_path / "store"
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [ctx.Process(target=_dist_rank_main,
                         args=(r, str(store), str(outs[r]), seeded, opts["region"],
                               opts["endpoint"])) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.is_alive():
            p.kill()
            pytest.fail("a rank hung")
    assert [p.exitcode for p in procs] == [0, 0]
    res = [json.loads(o.read_text()) for o in outs]
    assert res[0]["total"] == res[1]["total"] == N
    assert set(res[0]["iterable"]).isdisjoint(res[1]["iterable"])
    assert sorted(res[0]["iterable"] + res[1]["iterable"]) == ALL_KEYS
    for e in range(2):
        assert sorted(res[0]["map"][e] + res[1]["map"][e]) == ALL_KEYS
    assert res[0]["map"][0] != res[0]["map"][1]  # the sampler reshuffles per epoch


# -- shuffling ---------------------------------------------------------------------------

def _keys_of(r):
    return r.key  # nothing is read: readers are lazy


@pytest.mark.parametrize("buffer", [None, 16])
def test_shuffle_seed_and_epoch(seeded, opts, buffer):
    def order(seed, epoch, workers=0):
        ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True,
                                           transform=_keys_of, shuffle=True,
                                           seed=seed, shuffle_buffer_size=buffer, **opts)
        ds.set_epoch(epoch)
        return list(_loader(ds, workers))

    a = order(1, 0)
    assert sorted(a) == ALL_KEYS and a != ALL_KEYS
    assert order(1, 0) == a                      # reproducible
    b = order(1, 1)
    assert sorted(b) == ALL_KEYS and b != a      # another epoch, another order
    assert order(2, 0) != a                      # another seed
    w = order(1, 0, workers=2)                   # with workers: each once, reproducible
    assert sorted(w) == ALL_KEYS and order(1, 0, workers=2) == w


def test_unshuffled_order_is_the_listing(seeded, opts):
    ds = S3IterableDataset.from_prefix(seeded, transform=_keys_of, **opts)
    assert list(ds) == ALL_KEYS


# -- items: transform, lazy readers, from_objects ----------------------------------------

def test_default_items_are_lazy_readers(seeded, opts, bucket):
    ds = S3MapDataset.from_prefix(seeded, **opts)
    r = ds[3]
    assert isinstance(r, S3Reader) and (r.bucket, r.key) == (bucket, ALL_KEYS[3])
    before = ds.client.stats()["requests_started"]
    assert r.size == len(_body(3))          # from the listing: no request
    assert ds.client.stats()["requests_started"] == before
    assert r.read() == _body(3)             # one GET
    assert ds.client.stats()["requests_started"] == before + 1
    r.seek(7)
    assert r.read(4) == _body(3)[7:11]      # served from the bytes already fetched
    assert ds.client.stats()["requests_started"] == before + 1
    r2 = ds[4]
    assert r2.read(10) == _body(4)[:10]     # a partial read goes through the engine's reader
    assert r2.read() == _body(4)[10:]
    buf = bytearray(len(_body(5)) + 10)
    assert ds[5].readinto(buf) == len(_body(5)) and bytes(buf[:len(_body(5))]) == _body(5)


def test_default_items_through_dataloader_workers(seeded, opts):
    """The identity transform with workers: readers are pickled back to the main process
    and read there."""
    ds = S3IterableDataset.from_prefix(seeded + "01", enable_sharding=True,
                                       **opts)   # 100 objects
    got = []
    for i, r in enumerate(_loader(ds)):
        got.append((r.key, r.read() if i % 10 == 0 else _body(int(r.key[3:7]))))
    assert sorted(k for k, _ in got) == ALL_KEYS[100:]
    assert all(d == _body(int(k[len(PREFIX):len(PREFIX) + 4])) for k, d in got)
    # a reader read in a worker comes back with its bytes
    ds2 = S3MapDataset.from_prefix(seeded, **opts)
    r = ds2[9]
    r.read(5)
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.tell() == 5 and r2.read() == _body(9)[5:]


def test_transform_applied(seeded, opts):
    ds = S3MapDataset.from_prefix(seeded, transform=lambda r: torch.frombuffer(
        bytearray(r.read()), dtype=torch.uint8).sum(), **opts)
    assert int(ds[2]) == sum(_body(2))
    it = S3IterableDataset.from_prefix(seeded, transform=lambda r: len(r.read()), prefetch=16,
                                       **opts)
    assert sum(it) == sum(len(_body(i)) for i in range(N))


@pytest.mark.parametrize("constructor", [S3ReaderConstructor.sequential(),
                                         S3ReaderConstructor.range_based(64 * 1024)])
def test_from_objects(seeded, opts, bucket, constructor):
    uris = [f"s3://{bucket}/{_key(i)}" for i in (5, 1, 150)]
    m = S3MapDataset.from_objects(uris, transform=key_and_check,
                                  reader_constructor=constructor, **opts)
    assert len(m) == 3 and [m[i] for i in range(3)] == [_key(5), _key(1), _key(150)]
    it = S3IterableDataset.from_objects(uris, transform=key_and_check,
                                        reader_constructor=constructor, **opts)
    assert list(it) == [_key(5), _key(1), _key(150)]
    one = S3MapDataset.from_objects(uris[0], **opts)   # a single URI as a str
    assert len(one) == 1 and one[0].read() == _body(5)
    many = [f"s3://{bucket}/{k}" for k in ALL_KEYS]
    got = list(_loader(S3IterableDataset.from_objects(many, enable_sharding=True,
                                                      transform=key_and_check,
                                                      prefetch=8, **opts)))
    assert sorted(got) == ALL_KEYS   # prefetch without listed sizes: one GET each


def test_prefetch_errors_surface_at_read(seeded, opts, bucket):
    uris = [f"s3://{bucket}/{_key(1)}", f"s3://{bucket}/ds/nope.bin", f"s3://{bucket}/{_key(2)}"]
    it = iter(S3IterableDataset.from_objects(uris, prefetch=4, **opts))
    assert next(it).read() == _body(1)
    with pytest.raises(FileNotFoundError):
        next(it).read()
    assert next(it).read() == _body(2)


def _requests_by_method(proxy):
    """{method: {path: count}} of what went through the proxy, counted at its socket."""
    out = {}
    for k, n in proxy.stats()["requests"].items():
        method, path = k.split(" ", 1)
        out.setdefault(method, {})[path] = out.get(method, {}).get(path, 0) + n
    return out


def test_from_objects_one_get_per_object_no_head(seeded, bucket, region, endpoint):
    """from_objects items have no listed size or ETag; a whole read of one is one GET
    without a Range (the size from the response) and no HEAD. The requests are counted by
    method at the socket, by tests/servers/faultproxy.py sitting between client and RGW."""
    with faultproxy(endpoint) as proxy:
        o = {"region": region, "endpoint": proxy.endpoint}
        uris = [f"s3://{bucket}/{_key(i)}" for i in range(50)]
        m = S3MapDataset.from_objects(uris[:10], **o)
        for i in range(10):                            # read(), then from the bytes
            r = m[i]
            assert r.read() == _body(i)
            assert r.size == len(_body(i)) and r.tell() == len(_body(i))
            assert r.seek(3) == 3 and r.read(5) == _body(i)[3:8] and r.tell() == 8
            assert r.seek(-2, os.SEEK_END) == len(_body(i)) - 2 and r.read() == _body(i)[-2:]
            assert r.read() == b""
        it = S3IterableDataset.from_objects(uris[10:20], transform=lambda r: r.readall(), **o)
        assert list(it) == [_body(i) for i in range(10, 20)]
        pre = S3IterableDataset.from_objects(uris[20:30], transform=lambda r: r.read(-1),
                                             prefetch=4, **o)
        assert list(pre) == [_body(i) for i in range(20, 30)]
        ld = _loader(S3IterableDataset.from_objects(uris[30:40], enable_sharding=True,
                                                    transform=key_and_check, **o))
        assert sorted(ld) == ALL_KEYS[30:40]           # in forked DataLoader workers
        m2 = S3MapDataset.from_objects(uris[40:45], **o)
        for i in range(40, 45):                        # readinto of a buffer that holds it
            buf = bytearray(1 << 20)
            r = m2[i - 40]
            assert r.readinto(buf) == len(_body(i)) and bytes(buf[:len(_body(i))]) == _body(i)
            assert r.size == len(_body(i)) and r.readinto(buf) == 0
        whole = _requests_by_method(proxy)
        proxy.reset()
        m3 = S3MapDataset.from_objects(uris[45:50], **o)
        for i in range(45, 50):                        # a partial first read: the reader
            r = m3[i - 45]
            assert r.read(10) == _body(i)[:10] and r.read() == _body(i)[10:]
        partial = _requests_by_method(proxy)
    gets = whole.get("GET", {})
    assert set(whole) == {"GET"}, whole                # no HEAD (nor anything else)
    assert sorted(gets) == sorted(f"/{bucket}/{_key(i)}" for i in range(45)), gets
    assert set(gets.values()) == {1}, gets             # one GET per object
    # the other path, for contrast: the reader opens with a HEAD
    assert sum(partial.get("HEAD", {}).values()) == 5, partial
    assert sum(partial.get("GET", {}).values()) == 5, partial


def test_range_based_constructor_from_prefix(seeded, opts):
    ds = S3IterableDataset.from_prefix(
        seeded + "019", enable_sharding=True, transform=key_and_check,
        reader_constructor=S3ReaderConstructor.range_based(), prefetch=4, **opts)
    assert sorted(_loader(ds)) == ALL_KEYS[190:]


# -- the listing streams -----------------------------------------------------------------

@pytest.fixture
def page_counter(monkeypatch):
    calls = []
    real = _dataset_objects._list_page

    def counting(*a, **kw):
        calls.append(a[3])  # the continuation token
        return real(*a, **kw)

    monkeypatch.setattr(_dataset_objects, "_list_page", counting)
    return calls


def test_iterable_listing_streams(seeded, opts, page_counter):
    ds = S3IterableDataset.from_prefix(seeded, list_page_size=10, prefetch=0, **opts)
    it = iter(ds)
    first = next(it)
    assert first.key == ALL_KEYS[0]
    assert len(page_counter) == 1      # the first item came after one page
    rest = list(it)
    assert [r.key for r in rest] == ALL_KEYS[1:]
    assert len(page_counter) == N // 10


def test_iterable_listing_page_count(seeded, opts, page_counter):
    ds = S3IterableDataset.from_prefix(seeded, list_page_size=30, transform=_keys_of, **opts)
    assert list(ds) == ALL_KEYS
    assert len(page_counter) == 7      # ceil(200 / 30)


def test_map_getitem_lists_only_what_it_needs(seeded, opts, page_counter):
    ds = S3MapDataset.from_prefix(seeded, list_page_size=10, **opts)
    assert ds[0].key == ALL_KEYS[0] and len(page_counter) == 1
    assert ds[25].key == ALL_KEYS[25] and len(page_counter) == 3
    assert len(ds) == N and ds[-1].key == ALL_KEYS[-1]
    n = len(page_counter)
    assert len(ds) == N and len(page_counter) == n   # listed once


def test_list_page_size_bounds(seeded, opts):
    with pytest.raises(ValueError):
        S3IterableDataset.from_prefix(seeded, list_page_size=1001, **opts)


# -- errors ------------------------------------------------------------------------------

def test_missing_prefix_is_empty(bucket, opts):
    assert list(S3IterableDataset.from_prefix(f"s3://{bucket}/no-such-prefix/", **opts)) == []
    assert len(S3MapDataset.from_prefix(f"s3://{bucket}/no-such-prefix/", **opts)) == 0


def test_missing_bucket_raises_not_found(opts):
    ds = S3IterableDataset.from_prefix("s3://s3flash-no-such-bucket-ds/x/", **opts)
    with pytest.raises(s3flash.S3NotFoundError) as e:
        list(ds)
    assert isinstance(e.value, FileNotFoundError) and e.value.code == "NoSuchBucket"
    with pytest.raises(FileNotFoundError):
        len(S3MapDataset.from_prefix("s3://s3flash-no-such-bucket-ds/x/", **opts))


def test_missing_object_raises_when_read(bucket, opts):
    ds = S3MapDataset.from_objects(f"s3://{bucket}/ds/nope.bin", **opts)
    r = ds[0]  # lazy: no error yet
    with pytest.raises(FileNotFoundError):
        r.read()


@pytest.mark.parametrize("uri", ["http://bucket/prefix", "s3:/bucket/x", "s3://", "bucket/x",
                                 "s3://b/x"])
def test_bad_uri_value_error_names_it(uri, opts):
    for make in (S3MapDataset.from_prefix, S3IterableDataset.from_prefix,
                 S3MapDataset.from_objects, S3IterableDataset.from_objects):
        with pytest.raises(ValueError) as e:
            make(uri, **opts)
        assert uri in str(e.value)
    with pytest.raises(ValueError) as e:  # an object URI needs a key
        S3MapDataset.from_objects(["s3://bucket/ok", "s3://bucket/dir/"], **opts)
    assert "s3://bucket/dir/" in str(e.value)


def test_datasets_pickle_without_client(seeded, opts):
    """For spawn workers: the native client stays behind and is rebuilt on first use."""
    ds = S3MapDataset.from_prefix(seeded, transform=key_and_check, **opts)
    assert len(ds) == N
    ds2 = pickle.loads(pickle.dumps(ds))
    assert ds2._client is None and len(ds2) == N and ds2[10] == ALL_KEYS[10]
    it = S3IterableDataset.from_prefix(seeded, enable_sharding=True, transform=_keys_of, rank=1,
                                       world_size=2, **opts)
    it2 = pickle.loads(pickle.dumps(it))
    assert list(it2) == ALL_KEYS[1::2]


def test_spawn_workers(seeded, opts):
    ds = S3IterableDataset.from_prefix(seeded, enable_sharding=True, transform=_keys_of, **opts)
    got = list(DataLoader(ds, batch_size=None, num_workers=2,
                          multiprocessing_context="spawn"))
    assert sorted(got) == ALL_KEYS


def _fork_probe(r):
    ok = r.read() == _body(int(r.key[3:7]))  # the first call in a worker rebuilds the client
    native = r._client.native
    return os.getpid(), native.pid, native.forks_seen, ok


def test_fork_workers_build_their_own_client(seeded, opts):
    """The parent's client is live (it listed) when the workers fork: each worker's first
    call builds the worker's own native client."""
    ds = S3MapDataset.from_prefix(seeded + "019", transform=_fork_probe, **opts)
    assert len(ds) == 10 and ds[0][3]
    parent = ds.client.native
    got = list(_loader(ds))
    assert len(got) == 10 and all(ok for *_, ok in got)
    assert {pid for pid, *_ in got}.isdisjoint({os.getpid()}) and len({p for p, *_ in got}) == 2
    assert all(pid == npid and seen == 1 for pid, npid, seen, _ in got), got
    assert parent.pid == os.getpid() and parent.forks_seen == 0


def test_listed_items_open_without_head_pinned_to_the_listing(s3, bucket, opts):
    """A listed item's reader opens with the listing's size and ETag, sending no HEAD: a key
    deleted since the listing fails at its first read (not at open), and an object replaced
    since fails on the listing's ETag (If-Match) instead of mixing in the new bytes."""
    pre = "ds-known/"
    for k in ("a", "b", "c"):
        s3.put_object(Bucket=bucket, Key=pre + k, Body=k.encode() * 4096)
    items = list(S3IterableDataset.from_prefix(f"s3://{bucket}/{pre}", prefetch=0,
                                               **opts))
    assert [r.key for r in items] == [pre + "a", pre + "b", pre + "c"]
    a, b, c = items
    assert a.read(10) == b"a" * 10  # partial read: the engine's reader, opened known
    assert a._known == (4096, s3.head_object(Bucket=bucket, Key=pre + "a")["ETag"])
    s3.delete_object(Bucket=bucket, Key=pre + "b")
    with pytest.raises(FileNotFoundError):
        b.read(10)
    s3.put_object(Bucket=bucket, Key=pre + "c", Body=b"C" * 4096)
    with pytest.raises(s3flash.S3Exception) as ei:
        c.read(10)
    assert "PRECONDITION" in str(getattr(ei.value, "status", "")) or "412" in str(ei.value)
