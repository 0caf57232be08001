"""S3ClientConfig(requester_pays=True) against a real Requester Pays bucket (Ceph RGW).

The bucket belongs to the test user, bills the requester, and a bucket policy lets the
second RGW user in. RGW then refuses every request of that user without
``x-amz-request-payer: requester`` on reads and listings (403 AccessDenied; RGW lets writes
through, S3 does not). With the option, every request carries the header, signed: the
requests go through tests/servers/faultproxy.py, whose log records each request's
x-amz-request-payer at the socket: single and multipart uploads, HEAD, ranged and whole
GETs, listings, server-side copy, deletes, torch.save/torch.load and a DCP checkpoint.
"""

import uuid

import pytest
import torch
from s3servers import make_requester_pays

import s3flash
from s3flash import S3Checkpoint, S3Client, S3ClientConfig, S3MapDataset
from conftest import faultproxy

MiB = 1 << 20


@pytest.fixture(scope="module")
def proxy(endpoint):
    with faultproxy(endpoint) as p:
        yield p


def _payers(proxy):
    """(method, request_payer) of every request the proxy saw since the last reset."""
    return [(e["method"], e.get("request_payer")) for e in proxy.stats()["log"]]


@pytest.fixture(scope="module")
def payer_bucket(s3, rgw):
    if not rgw.other_access_key:
        pytest.skip("no second RGW user (S3FLASH_TEST_OTHER_*)")
    name = f"s3fpy-payer-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    make_requester_pays(s3, name)
    s3.put_object(Bucket=name, Key="owned.bin", Body=b"owner's bytes")
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=o["Key"])
    for u in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
    s3.delete_bucket(Bucket=name)


def _config(rgw, **kw):
    return S3ClientConfig(access_key_id=rgw.other_access_key,
                          secret_access_key=rgw.other_secret_key, **kw)


def test_requester_pays_default_is_off():
    assert S3ClientConfig().requester_pays is False


def test_without_the_header_the_bucket_refuses(payer_bucket, rgw, region, proxy):
    proxy.reset()
    c = S3Client(region, proxy.endpoint, _config(rgw))
    with pytest.raises(PermissionError):
        c.head_object(payer_bucket, "owned.bin")
    with pytest.raises(PermissionError):
        list(c.list_objects(payer_bucket))
    with pytest.raises(PermissionError):
        with c.get_object(payer_bucket, "owned.bin") as r:
            r.read()
    seen = _payers(proxy)
    assert seen and all(p is None for _, p in seen), seen


def test_requester_pays_every_operation(payer_bucket, rgw, region, proxy, s3, tmp_path):
    endpoint = proxy.endpoint
    proxy.reset()
    cfg = _config(rgw, requester_pays=True)
    c = S3Client(region, endpoint, cfg)
    assert c.head_object(payer_bucket, "owned.bin")["size"] == len(b"owner's bytes")
    with c.get_object(payer_bucket, "owned.bin") as r:
        assert r.read() == b"owner's bytes"
    # a multipart upload (3 parts of 8 MiB) streamed through a writer, read back in ranges
    data = bytes(range(256)) * (20 * MiB // 256)
    with c.put_object(payer_bucket, "big.bin") as w:
        w.write(data)
    with c.get_object(payer_bucket, "big.bin",
                      s3flash.S3ReaderConstructor.range_based(1 * MiB)) as r:
        r.seek(9 * MiB)
        assert r.read(3 * MiB) == data[9 * MiB:12 * MiB]
    c.download_file(payer_bucket, "big.bin", tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data
    c.copy(payer_bucket, "big.bin", payer_bucket, "copy.bin", multipart_threshold=5 * MiB,
           part_size=8 * MiB)
    assert s3.head_object(Bucket=payer_bucket, Key="copy.bin")["ContentLength"] == len(data)
    keys = [o.key for o in c.list_objects(payer_bucket)]
    assert keys == ["big.bin", "copy.bin", "owned.bin"]
    c.delete_object(payer_bucket, "copy.bin")
    # the public one-liners and datasets with the same config
    sd = {"w": torch.randn(64, 64), "step": 3}
    ck = S3Checkpoint(region=region, endpoint=endpoint, s3client_config=cfg)
    with ck.writer(f"s3://{payer_bucket}/ckpt.pt") as w:
        torch.save(sd, w)
    with ck.reader(f"s3://{payer_bucket}/ckpt.pt") as r:
        back = torch.load(r)
    assert torch.equal(back["w"], sd["w"]) and back["step"] == 3
    ds = S3MapDataset.from_prefix(f"s3://{payer_bucket}/own", region=region,
                                  endpoint=endpoint, s3client_config=cfg)
    assert len(ds) == 1 and ds[0].read() == b"owner's bytes"
    seen = _payers(proxy)
    assert {m for m, _ in seen} == {"HEAD", "GET", "PUT", "POST", "DELETE"}, seen
    assert all(p == "requester" for _, p in seen), [x for x in seen if x[1] != "requester"]


def test_requester_pays_dcp(payer_bucket, rgw, region, proxy):
    endpoint = proxy.endpoint
    proxy.reset()
    import torch.distributed.checkpoint as dcp
    from s3flash.dcp import S3StorageReader, S3StorageWriter
    cfg = _config(rgw, requester_pays=True)
    path = f"s3://{payer_bucket}/dcp-{uuid.uuid4().hex[:6]}"
    sd = {"a": torch.randn(256, 256), "b": torch.arange(1000)}
    dcp.save(sd, storage_writer=S3StorageWriter(region, path, s3client_config=cfg,
                                                endpoint=endpoint), no_dist=True)
    out = {"a": torch.zeros(256, 256), "b": torch.zeros(1000, dtype=torch.long)}
    dcp.load(out, storage_reader=S3StorageReader(region, path, s3client_config=cfg,
                                                 endpoint=endpoint), no_dist=True)
    assert torch.equal(out["a"], sd["a"]) and torch.equal(out["b"], sd["b"])
    seen = _payers(proxy)
    assert len(seen) >= 4 and all(p == "requester" for _, p in seen), seen


def test_requester_pays_fsspec(payer_bucket, rgw, region, proxy):
    """s3fs's storage option requester_pays=True, on S3FlashFileSystem."""
    from s3flash.fsspec import S3FlashFileSystem
    proxy.reset()
    fs = S3FlashFileSystem(key=rgw.other_access_key, secret=rgw.other_secret_key,
                           endpoint_url=proxy.endpoint, region=region, requester_pays=True,
                           skip_instance_cache=True)
    assert fs.cat_file(f"{payer_bucket}/owned.bin") == b"owner's bytes"
    fs.pipe_file(f"{payer_bucket}/fs.bin", b"via fsspec")
    assert f"{payer_bucket}/fs.bin" in fs.ls(payer_bucket, detail=False)
    fs.rm(f"{payer_bucket}/fs.bin")
    seen = _payers(proxy)
    assert seen and all(p == "requester" for _, p in seen), seen
