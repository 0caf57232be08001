"""S3ClientConfig's server-side encryption and request options (issue 30), from Python.

Each option goes on the wire: the requests go through tests/servers/faultproxy.py, whose log
records each request's x-amz-* headers and User-Agent, and each header must be on exactly
the requests that carry it (docs/CONFIGURATION.md's table): from the writer (single and
multipart), the reader (ranged GETs), the checkpoint writer and DCP save/load. Against an
RGW with SSE (tests/servers/rgw.sh: S3FLASH_TEST_KMS_KEY_ID), SSE-C and SSE-KMS objects go
round trip, multipart and ranged reads included; an SSE-C object read without its key gives
S3's error and the hint naming the option. The SSE-C key is never in repr(), an error, nor
the TRACE log. AWS_MAX_ATTEMPTS is the default of max_attempts, and `proxy` / `no_proxy`
send the requests through a real proxy on loopback (tests/servers/connectproxy.py).
"""

import base64
import hashlib
import os
import pickle
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

import s3flash
from s3flash import S3Checkpoint, S3Client, S3ClientConfig, S3ReaderConstructor
from conftest import integration_faults

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from connectproxy import ConnectProxy  # noqa: E402

MiB = 1 << 20
KEY = bytes(range(7, 39))                      # a 32-byte SSE-C key
KEY_B64 = base64.b64encode(KEY).decode()
KEY_MD5 = base64.b64encode(hashlib.md5(KEY).digest()).decode()
SSE_C = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
         "x-amz-server-side-encryption-customer-key": KEY_B64,
         "x-amz-server-side-encryption-customer-key-md5": KEY_MD5}
F = integration_faults()


def carries(h, want):
    return all(h.get(k) == v for k, v in want.items())


def carries_none(h, want):
    return not any(k in h for k in want)


def secrets_absent(text):
    for s in (KEY_B64, KEY_B64.rstrip("="), KEY.hex(), KEY.hex().upper(), repr(KEY)):
        assert s not in text


def test_the_key_is_never_shown():
    cfg = S3ClientConfig(sse_customer_key=KEY, sse_copy_source_customer_key=KEY,
                         proxy="http://user:pa55word@127.0.0.1:3128")
    for text in (repr(cfg), str(cfg)):
        secrets_absent(text)
        assert "pa55word" not in text
    assert pickle.loads(pickle.dumps(cfg)) == cfg   # dataset workers get it
    errors = []
    for kw in (dict(sse_customer_key=KEY[:31]), dict(sse_customer_key=KEY + b"!"),
               dict(sse_customer_key=KEY_B64), dict(sse="AES256", sse_customer_key=KEY),
               dict(sse_copy_source_customer_key=KEY_B64)):
        with pytest.raises((TypeError, ValueError)) as e:
            S3ClientConfig(**kw)
        errors.append(str(e.value))
    for text in errors:
        secrets_absent(text)
        assert "sse_customer_key" in text or "sse_copy_source_customer_key" in text, text


def test_options_are_checked():
    with pytest.raises(ValueError, match="sse must be one of"):
        S3ClientConfig(sse="aws:kms:nope")
    with pytest.raises(ValueError, match="need sse='aws:kms'"):
        S3ClientConfig(sse_kms_key_id="k")
    with pytest.raises(ValueError, match="need sse='aws:kms'"):
        S3ClientConfig(sse="AES256", bucket_key_enabled=True)
    cfg = S3ClientConfig(sse="aws:kms", sse_kms_encryption_context={"b": "2", "a": "1"})
    assert cfg.sse_kms_encryption_context == '{"a":"1","b":"2"}'
    hash(cfg)  # still a key of the shared clients


def test_max_attempts_defaults_to_aws_max_attempts(monkeypatch, bucket, region, proxy):
    assert S3ClientConfig().max_attempts == 10         # s3torchconnector's, without it
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    assert S3ClientConfig().max_attempts == 2
    assert S3ClientConfig(max_attempts=4).max_attempts == 4  # the field wins
    proxy.set_faults([F.s3_error("SlowDown", 503, {"method": "HEAD"})])
    c = S3Client(region, proxy.endpoint, S3ClientConfig())
    with pytest.raises(s3flash.S3Exception, match="after 2 attempts"):
        c.head_object(bucket, "nothing-here")
    heads = [e for e in proxy.stats()["log"] if e["method"] == "HEAD"]
    assert len(heads) == 2, heads
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "0")
    with pytest.raises(ValueError, match="AWS_MAX_ATTEMPTS"):
        S3ClientConfig()


def test_sse_kms_and_write_options_on_the_wire(kms, s3, bucket, region, proxy, tmp_path):
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    context = {"project": "s3flash"}
    cfg = S3ClientConfig(part_size=5 * MiB, sse="aws:kms", sse_kms_key_id=kms,
                         sse_kms_encryption_context=context, bucket_key_enabled=True,
                         storage_class="STANDARD", acl="bucket-owner-full-control",
                         expected_bucket_owner=owner, user_agent_extra="test-suite/30")
    c = S3Client(region, proxy.endpoint, cfg)
    big = os.urandom(12 * MiB + 5)  # 3 parts of 5 MiB
    with c.put_object(bucket, "kms/big") as w:
        w.write(big)
    with c.put_object(bucket, "kms/small") as w:
        w.write(b"small object\n")
    reader = c.get_object(bucket, "kms/big", S3ReaderConstructor.range_based())
    reader.seek(5 * MiB + 3)
    assert reader.read(MiB) == big[5 * MiB + 3:6 * MiB + 3]     # a ranged read
    assert c.head_object(bucket, "kms/small")["size"] == 13
    with S3Checkpoint(region, proxy.endpoint, cfg).writer(f"s3://{bucket}/kms/model.pt") as w:
        torch.save({"w": torch.arange(100)}, w)
    import torch.distributed.checkpoint as dcp
    from s3flash.dcp import S3StorageReader, S3StorageWriter
    path = f"s3://{bucket}/kms/dcp-{uuid.uuid4().hex[:6]}"
    sd = {"a": torch.randn(64, 64)}
    dcp.save(sd, storage_writer=S3StorageWriter(region, path, s3client_config=cfg,
                                                endpoint=proxy.endpoint), no_dist=True)
    out = {"a": torch.zeros(64, 64)}
    dcp.load(out, storage_reader=S3StorageReader(region, path, s3client_config=cfg,
                                                 endpoint=proxy.endpoint), no_dist=True)
    assert torch.equal(out["a"], sd["a"])

    want = {"x-amz-server-side-encryption": "aws:kms",
            "x-amz-server-side-encryption-aws-kms-key-id": kms,
            "x-amz-server-side-encryption-context":
                base64.b64encode(b'{"project":"s3flash"}').decode(),
            "x-amz-server-side-encryption-bucket-key-enabled": "true",
            "x-amz-storage-class": "STANDARD",
            "x-amz-acl": "bucket-owner-full-control"}
    ops = F.by_operation(proxy)
    for op in ("PutObject", "CreateMultipartUpload"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries(h, want), (op, h)
    for op in ("UploadPart", "CompleteMultipartUpload", "GetObject", "HeadObject"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries_none(h, want), (op, h)
    for e in proxy.stats()["log"]:  # every request: the owner, and the User-Agent's suffix
        h = e.get("headers") or {}
        assert h.get("x-amz-expected-bucket-owner") == owner, (F.operation(e), h)
        ua = h.get("user-agent", "")
        assert ua.startswith("s3flash/") and ua.endswith(" test-suite/30"), (F.operation(e), h)
    for key in ("kms/big", "kms/small", "kms/model.pt"):
        h = s3.head_object(Bucket=bucket, Key=key)
        assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == kms, (key, h)
    with c.get_object(bucket, "kms/big") as r:
        assert r.read() == big


def test_sse_c_round_trip_on_the_wire(kms, s3, bucket, region, proxy, monkeypatch, capfd):
    monkeypatch.setenv("S3FLASH_LOG", "trace")  # read when the native client is built
    cfg = S3ClientConfig(part_size=5 * MiB, sse_customer_key=KEY)
    c = S3Client(region, proxy.endpoint, cfg)
    big = os.urandom(11 * MiB)
    with c.put_object(bucket, "ssec/big") as w:
        w.write(big)
    with c.put_object(bucket, "ssec/small") as w:
        w.write(b"customer key\n")
    reader = c.get_object(bucket, "ssec/big", S3ReaderConstructor.range_based())
    reader.seek(6 * MiB + 1)
    assert reader.read(2 * MiB) == big[6 * MiB + 1:8 * MiB + 1]  # ranged, across parts
    with c.get_object(bucket, "ssec/big") as r:
        assert r.read() == big
    assert c.head_object(bucket, "ssec/small")["size"] == 13
    with S3Checkpoint(region, proxy.endpoint, cfg).writer(f"s3://{bucket}/ssec/m.pt") as w:
        torch.save({"w": torch.arange(10)}, w)
    with S3Checkpoint(region, proxy.endpoint, cfg).reader(f"s3://{bucket}/ssec/m.pt") as r:
        assert torch.equal(torch.load(r)["w"], torch.arange(10))
    trace = capfd.readouterr().err

    ops = F.by_operation(proxy)
    for op in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
               "GetObject", "HeadObject"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries(h, SSE_C), (op, h)
    h = s3.head_object(Bucket=bucket, Key="ssec/big", SSECustomerAlgorithm="AES256",
                       SSECustomerKey=KEY)
    assert h["SSECustomerAlgorithm"] == "AES256"
    # the TRACE log shows the headers, the key's never
    assert "x-amz-server-side-encryption-customer-key: <redacted>" in trace, trace[-3000:]
    assert KEY_MD5 in trace
    secrets_absent(trace)


def test_sse_c_read_without_the_key(kms, bucket, region, endpoint, capfd):
    keyed = S3Client(region, endpoint, S3ClientConfig(sse_customer_key=KEY))
    with keyed.put_object(bucket, "ssec/nokey") as w:
        w.write(b"locked\n")
    plain = S3Client(region, endpoint, S3ClientConfig(max_attempts=1))
    with pytest.raises(s3flash.S3Exception) as e:
        with plain.get_object(bucket, "ssec/nokey") as r:
            r.read()
    text = str(e.value)
    assert "400" in text and "sse_customer_key" in text and "SSE-C" in text, text
    other = S3Client(region, endpoint, S3ClientConfig(sse_customer_key=bytes(32)))
    with pytest.raises(s3flash.S3Exception) as e:
        other.head_object(bucket, "ssec/nokey")
    assert "may not be the one the object was written with" in str(e.value), str(e.value)
    secrets_absent(str(e.value) + capfd.readouterr().err)


def test_proxy_and_no_proxy(bucket, region, endpoint, monkeypatch):
    for k in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(k, raising=False)
    u = urlparse(endpoint)
    with ConnectProxy() as hp:
        c = S3Client(region, endpoint, S3ClientConfig(proxy=hp.url))
        with c.put_object(bucket, "proxy/obj") as w:
            w.write(b"through the proxy\n")
        seen = hp.seen()
        assert seen == [f"PUT http://{u.hostname}:{u.port}/{bucket}/proxy/obj"], seen
        direct = S3Client(region, endpoint, S3ClientConfig(proxy=hp.url, no_proxy=u.hostname))
        assert direct.head_object(bucket, "proxy/obj")["size"] == 18
        nothing = S3Client(region, endpoint, S3ClientConfig(proxy=""))  # "": none
        monkeypatch.setenv("HTTP_PROXY", hp.url)
        nothing.head_object(bucket, "proxy/obj")
        assert hp.seen() == seen                     # neither went through it
        with S3Client(region, endpoint).get_object(bucket, "proxy/obj") as r:  # the env's
            assert r.read() == b"through the proxy\n"
        seen = hp.seen()
        assert f"GET http://{u.hostname}:{u.port}/{bucket}/proxy/obj" in seen, seen
