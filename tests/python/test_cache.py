"""The node-local block cache from Python (S3ClientConfig(cache_dir=...), docs/CACHE.md):
the second load of a checkpoint and the second epoch over a dataset read from local disk.
The requests are counted at the socket by tests/servers/faultproxy.py between the client
and RGW; each pass uses a new client (as a new process would), sharing only the directory.
"""
import contextlib
import fcntl
import io
import os

import pytest
import torch

import s3flash
from s3flash import S3ClientConfig, S3IterableDataset, S3MapDataset


def _by_method(proxy):
    out = {}
    for k, n in proxy.stats()["requests"].items():
        method = k.split(" ", 1)[0]
        out[method] = out.get(method, 0) + n
    return out


def _config(cache_dir, **kw):
    return S3ClientConfig(force_path_style=True, cache_dir=str(cache_dir),
                          cache_min_free_bytes=1, **kw)


@contextlib.contextmanager
def _cache_disk_held(client):
    """The cache's disk as slow as it gets: another process's hold of the cache's lock
    (v1/lock, flock'd for every rename into the cache) keeps the writer thread from placing
    any block until the end of the block. The cache is opened (made, counted) first."""
    client.cache_flush()
    lock = os.path.join(client.s3client_config.cache_dir, "v1", "lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _checkpoint(proxy, s3, region, bucket, key):
    """A 12 MB checkpoint saved at key: (its state, its URI, the object's size)."""
    state = {"w": torch.arange(3_000_000, dtype=torch.float32), "step": 7}
    uri = f"s3://{bucket}/{key}"
    s3flash.save(state, uri, region=region, endpoint=proxy.endpoint)
    return state, uri, s3.head_object(Bucket=bucket, Key=key)["ContentLength"]


def _load(proxy, region, uri, state, cfg, slow_disk):
    """One load by a new client: (requests by method, the stats right after the load, the
    stats after cache_flush()). slow_disk: the writer is held through the load."""
    proxy.reset()
    ck = s3flash.S3Checkpoint(region=region, endpoint=proxy.endpoint, s3client_config=cfg)
    with contextlib.ExitStack() as held:
        if slow_disk:
            held.enter_context(_cache_disk_held(ck.client))
        with ck.reader(uri) as r:
            got = torch.load(r, weights_only=True)
        assert torch.equal(got["w"], state["w"]) and got["step"] == state["step"]
        early = ck.client.stats()
    ck.client.cache_flush()  # the event: every queued block written (or dropped)
    return _by_method(proxy), early, ck.client.stats()


def test_second_checkpoint_load_reads_local_disk(proxy, s3, region, bucket, tmp_path):
    state, uri, size = _checkpoint(proxy, s3, region, bucket, "cache/ckpt.pt")
    cfg = _config(tmp_path / "cache")
    # the first load's inserts wait on the cache's disk
    first, early, s1 = _load(proxy, region, uri, state, cfg, slow_disk=True)
    second, _, s2 = _load(proxy, region, uri, state, cfg, slow_disk=False)
    # the read did not wait for the cache's disk: every block is still queued (the queue,
    # 32 MiB, holds the whole object: none is dropped) and is written after the flush
    assert (early["cache_inserted_bytes"], early["cache_insert_pending_bytes"],
            early["cache_insert_dropped_bytes"]) == (0, size, 0), early
    assert first.get("GET", 0) > 0
    assert (s1["cache_inserted_bytes"], s1["cache_insert_pending_bytes"],
            s1["cache_insert_dropped_bytes"]) == (size, 0, 0), s1
    assert second.get("GET", 0) == 0, second            # the HEAD of the reader only
    assert s2["cache_hits"] > 0 and s2["cache_inserted_bytes"] == 0


def test_blocks_dropped_on_a_slow_disk_are_cached_by_the_next_load(proxy, s3, region, bucket,
                                                                   tmp_path):
    """A read never waits for the cache's disk: with the writer held (the cache's lock) and
    a queue of two blocks (memory_limit 16 MiB), the first load drops what the queue cannot
    hold, counted. The next load fetches exactly those blocks and caches them; the one after
    sends no GET. So a checkpoint ends up cached, one load later, on a disk slower than the
    network."""
    state, uri, size = _checkpoint(proxy, s3, region, bucket, "cache/slow-disk.pt")
    cache = tmp_path / "cache"
    g1, early, s1 = _load(proxy, region, uri, state, _config(cache, memory_limit=16 << 20),
                          slow_disk=True)
    g2, _, s2 = _load(proxy, region, uri, state, _config(cache), slow_disk=False)
    g3, _, s3_ = _load(proxy, region, uri, state, _config(cache), slow_disk=False)
    assert 0 < early["cache_insert_pending_bytes"] <= 2 << 20, early   # the queue: 2 blocks
    assert early["cache_insert_dropped_bytes"] >= size - (2 << 20), early
    assert early["cache_inserted_bytes"] == 0, early
    assert 0 < s1["cache_inserted_bytes"] <= 2 << 20, s1
    # the second load: a miss for every block not inserted, each fetched and now inserted
    assert g2.get("GET", 0) > 0
    assert s2["cache_inserted_bytes"] == size - s1["cache_inserted_bytes"], (s1, s2)
    assert s2["cache_insert_dropped_bytes"] == 0, s2
    assert g3.get("GET", 0) == 0, g3                    # the HEAD of the reader only
    assert s3_["cache_hit_bytes"] >= size and s3_["cache_inserted_bytes"] == 0, s3_


def _body(i):
    return (f"item {i} ".encode() * (1000 + 997 * i))[: 50_000 + 40_000 * i]


def test_second_epoch_reads_local_disk(proxy, s3, region, bucket, tmp_path):
    for i in range(12):
        s3.put_object(Bucket=bucket, Key=f"ds/{i:03d}", Body=_body(i))
    cache = tmp_path / "cache"
    epochs = []
    for epoch in range(2):
        proxy.reset()
        # a new client per epoch: only the directory is shared
        cfg = _config(cache, cache_max_bytes=(1 << 30) + epoch)
        m = S3MapDataset.from_prefix(f"s3://{bucket}/ds/", region=region,
                                     endpoint=proxy.endpoint, s3client_config=cfg)
        assert [m[i].read() for i in range(len(m))] == [_body(i) for i in range(12)]
        it = S3IterableDataset.from_objects([f"s3://{bucket}/ds/{i:03d}" for i in range(12)],
                                            region=region, endpoint=proxy.endpoint,
                                            s3client_config=cfg,
                                            transform=lambda r: r.read())
        assert list(it) == [_body(i) for i in range(12)]
        epochs.append(_by_method(proxy))
        m.client.cache_flush()  # the next epoch's client finds every block written
        it.client.cache_flush()
    first, second = epochs
    assert first.get("GET", 0) >= 12
    assert second.get("GET", 0) == 1, second          # the listing of from_prefix only
