"""Client.metrics() and S3Client.metrics() against RGW: after a write and a read of N bytes
through a fresh client, the registry's data bytes are N each way and its request counts are
the requests that write and read sent (one PutObject, or a multipart upload's
Create + parts + Complete); the histograms count the same requests; a Client never
initialized raises a RuntimeError that says so."""

import math
import os
import uuid

import pytest

import s3flash
from s3flash import _s3flash


def _value(m, name, **labels):
    for s in m.get(name, []):
        if all(s["labels"].get(k) == v for k, v in labels.items()):
            return s["value"]
    raise KeyError(f"{name}{labels} not in the snapshot: {sorted(m)}")


def _requests(m, op):
    return sum(s["value"] for s in m["s3flash_requests_total"] if s["labels"]["op"] == op)


def _hist(m, name, op):
    (h,) = [s for s in m[name] if s["labels"].get("op") == op]
    return h


def test_fresh_client_reads_zero(region, endpoint):
    c = s3flash.S3Client(region, endpoint)
    m = c.metrics()
    assert _value(m, "s3flash_bytes_total", direction="up") == 0
    assert _value(m, "s3flash_bytes_total", direction="down") == 0
    assert all(s["value"] == 0 for s in m["s3flash_requests_total"])


def test_single_put_and_get_counted(region, endpoint, bucket):
    n = 3 * 1024 * 1024 + 17
    data = os.urandom(n)
    key = f"metrics/{uuid.uuid4().hex}"
    c = s3flash.S3Client(region, endpoint)
    c.upload(bucket, key, data)
    assert c.native.download_whole(bucket, key)[0] == data
    m = c.metrics()
    assert _value(m, "s3flash_bytes_total", direction="up") == n
    assert _value(m, "s3flash_bytes_total", direction="down") == n
    assert _value(m, "s3flash_requests_total", op="PutObject", status="2xx") == 1
    assert _requests(m, "PutObject") == 1
    gets = _value(m, "s3flash_requests_total", op="GetObject", status="2xx")
    assert gets >= 1 and _requests(m, "GetObject") == gets
    assert _value(m, "s3flash_retries_total", reason="throttle") == 0
    for op, count in (("PutObject", 1), ("GetObject", gets)):
        h = _hist(m, "s3flash_request_duration_seconds", op)
        assert h["count"] == count and h["sum"] > 0
        les = [le for le, _ in h["buckets"]]
        assert les == sorted(les) and math.isinf(les[-1])
        assert h["buckets"][-1][1] == count  # cumulative: +Inf holds them all
        cum = [c for _, c in h["buckets"]]
        assert cum == sorted(cum)


def test_multipart_counts_parts(region, endpoint, bucket):
    part = 8 * 1024 * 1024
    n = 2 * part + 12345
    data = os.urandom(n)
    key = f"metrics/{uuid.uuid4().hex}"
    c = _s3flash.Client(region=region, endpoint=endpoint, part_size=part)
    c.upload(bucket, key, data)
    m = c.metrics()
    assert _value(m, "s3flash_bytes_total", direction="up") == n
    assert _value(m, "s3flash_bytes_total", direction="down") == 0
    assert _requests(m, "CreateMultipartUpload") == 1
    assert _value(m, "s3flash_requests_total", op="UploadPart", status="2xx") == 3
    assert _requests(m, "UploadPart") == 3
    assert _requests(m, "CompleteMultipartUpload") == 1
    assert _requests(m, "PutObject") == 0
    assert _hist(m, "s3flash_request_duration_seconds", "UploadPart")["count"] == 3


def test_uninitialized_client_raises():
    c = _s3flash.Client.__new__(_s3flash.Client)
    with pytest.raises(RuntimeError, match="never initialized"):
        c.metrics()
