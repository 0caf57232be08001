"""The node-local block cache from Python (S3ClientConfig(cache_dir=...), docs/CACHE.md):
the second load of a checkpoint and the second epoch over a dataset read from local disk.
The requests are counted at the socket by tests/servers/faultproxy.py between the client
and RGW; each pass uses a new client (as a new process would), sharing only the directory.
"""
import io

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


def test_second_checkpoint_load_reads_local_disk(proxy, region, bucket, tmp_path):
    state = {"w": torch.arange(3_000_000, dtype=torch.float32), "step": 7}
    uri = f"s3://{bucket}/cache/ckpt.pt"
    s3flash.save(state, uri, region=region, endpoint=proxy.endpoint)
    cache = tmp_path / "cache"
    loads = []
    for _ in range(2):
        proxy.reset()
        ck = s3flash.S3Checkpoint(region=region, endpoint=proxy.endpoint,
                                  s3client_config=_config(cache))
        with ck.reader(uri) as r:
            got = torch.load(r, weights_only=True)
        assert torch.equal(got["w"], state["w"]) and got["step"] == 7
        loads.append((_by_method(proxy), ck.client.stats()))
    (first, s1), (second, s2) = loads
    assert first.get("GET", 0) > 0 and s1["cache_inserted_bytes"] > 12_000_000
    assert second.get("GET", 0) == 0, second            # the HEAD of the reader only
    assert s2["cache_hits"] > 0 and s2["cache_inserted_bytes"] == 0


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
    first, second = epochs
    assert first.get("GET", 0) >= 12
    assert second.get("GET", 0) == 1, second          # the listing of from_prefix only
