"""Bad input and failures: the right exception, a message naming what was wrong, no object."""

import gc

import pytest
import torch

import s3flash
from conftest import closed_port, exists

MiB = 1 << 20


def test_missing_key_is_file_not_found(ckpt, bucket, region, endpoint):
    uri = f"s3://{bucket}/no/such/key.pt"
    with pytest.raises(FileNotFoundError) as ei:
        with ckpt.reader(uri) as r:
            torch.load(r)
    e = ei.value
    assert isinstance(e, s3flash.S3Exception)
    assert e.http_status == 404
    assert "s3://" + bucket + "/no/such/key.pt" in str(e)
    assert "404" in str(e)
    with pytest.raises(FileNotFoundError):
        s3flash.load(uri, region=region, endpoint=endpoint)


def test_missing_bucket_is_file_not_found(ckpt):
    with pytest.raises(FileNotFoundError):
        ckpt.reader("s3://s3flash-no-such-bucket-xyz/k").read()
    with pytest.raises(FileNotFoundError) as ei:
        with ckpt.writer("s3://s3flash-no-such-bucket-xyz/k") as w:
            w.write(b"abc")
    assert ei.value.code == "NoSuchBucket"
    assert ei.value.request_id
    assert "NoSuchBucket" in str(ei.value) and "request id" in str(ei.value)


def test_wrong_secret_is_permission_error(region, endpoint, rgw, bucket, s3):
    s3.put_object(Bucket=bucket, Key="exists", Body=b"x")
    bad_secret = "NotTheSecret0123456789abcdefghijklmnopqrs"
    cfg = s3flash.S3ClientConfig(access_key_id=rgw.access_key, secret_access_key=bad_secret)
    ck = s3flash.S3Checkpoint(region=region, endpoint=endpoint, s3client_config=cfg)
    with pytest.raises(PermissionError) as ei:
        ck.reader(f"s3://{bucket}/exists").read()
    e = ei.value
    assert isinstance(e, s3flash.S3Exception)
    assert e.http_status == 403 and e.code == "Forbidden"  # a HEAD: no error document
    assert bad_secret not in str(e) and rgw.secret_key not in str(e)
    with pytest.raises(PermissionError) as ei:
        with ck.writer(f"s3://{bucket}/denied") as w:
            w.write(b"abc")
    assert ei.value.code == "SignatureDoesNotMatch" and ei.value.request_id
    assert bad_secret not in str(ei.value) and rgw.secret_key not in str(ei.value)
    assert not exists(s3, bucket, "denied")


def test_other_users_bucket_is_permission_error(region, endpoint, rgw, bucket, s3, s3_other):
    s3.put_object(Bucket=bucket, Key="mine", Body=b"x")
    cfg = s3flash.S3ClientConfig(access_key_id=rgw.other_access_key,
                                 secret_access_key=rgw.other_secret_key)
    with pytest.raises(PermissionError) as ei:
        s3flash.load(f"s3://{bucket}/mine", region=region, endpoint=endpoint,
                     s3client_config=cfg)
    assert ei.value.http_status == 403
    with pytest.raises(PermissionError) as ei:
        s3flash.save({"a": 1}, f"s3://{bucket}/theirs", region=region, endpoint=endpoint,
                     s3client_config=cfg)
    assert ei.value.code == "AccessDenied" and ei.value.request_id
    assert "AccessDenied" in str(ei.value) and "HTTP 403" in str(ei.value)
    assert not exists(s3, bucket, "theirs")


@pytest.mark.parametrize("bad", [
    "bucket/key", "s3:/bucket/key", "http://bucket/key", "s3://", "s3:///key",
    "s3://ab/key", "s3://bu cket/key", "s3://bucket", "s3://bucket/", "s3://bucket/dir/", "",
])
def test_bad_uri_is_value_error_naming_it(ckpt, region, endpoint, bad):
    for call in (lambda: ckpt.reader(bad), lambda: ckpt.writer(bad),
                 lambda: s3flash.save({}, bad, region=region, endpoint=endpoint),
                 lambda: s3flash.load(bad, region=region, endpoint=endpoint)):
        with pytest.raises(ValueError) as ei:
            call()
        assert repr(bad) in str(ei.value) or f'"{bad}"' in str(ei.value), str(ei.value)
        assert isinstance(ei.value, s3flash.S3Exception)


def test_uri_of_wrong_type():
    with pytest.raises(TypeError):
        s3flash.parse_s3_uri(b"s3://bucket/key")


@pytest.mark.parametrize("size", [100, 20 * MiB], ids=["single-part", "multipart"])
def test_exception_inside_writer_creates_nothing(ckpt, bucket, key, s3, size):
    with pytest.raises(RuntimeError, match="boom"):
        with ckpt.writer(f"s3://{bucket}/{key}") as w:
            w.write(b"z" * size)
            raise RuntimeError("boom")
    assert w.closed
    assert not exists(s3, bucket, key)
    assert not [u for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
                if u["Key"] == key]


def test_exception_inside_torch_save_creates_nothing(ckpt, bucket, key, s3):
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")
    sd = {"big": torch.randn(4 * MiB), "bad": Unpicklable()}
    with pytest.raises(RuntimeError):
        s3flash.save(sd, f"s3://{bucket}/{key}", region=ckpt.region, endpoint=ckpt.endpoint)
    assert not exists(s3, bucket, key)


def test_abandoned_writer_creates_nothing(ckpt, bucket, key, s3):
    w = ckpt.writer(f"s3://{bucket}/{key}")
    w.write(b"q" * (12 * MiB))
    del w
    gc.collect()
    assert not exists(s3, bucket, key)
    assert not [u for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
                if u["Key"] == key]


def test_endpoint_argument_is_used(region, bucket):
    """A closed port as endpoint fails to connect: the argument is what the client uses
    (the environment has no endpoint)."""
    dead = f"http://127.0.0.1:{closed_port()}"
    cfg = s3flash.S3ClientConfig(max_attempts=1)
    with pytest.raises(ConnectionError) as ei:
        s3flash.load(f"s3://{bucket}/k", region=region, endpoint=dead, s3client_config=cfg)
    assert isinstance(ei.value, s3flash.S3Exception)
    with pytest.raises(ConnectionError):
        s3flash.save({"a": 1}, f"s3://{bucket}/k", region=region, endpoint=dead,
                     s3client_config=cfg)
    with pytest.raises(ConnectionError):
        s3flash.S3Checkpoint(region, dead, cfg).reader(f"s3://{bucket}/k").read()
    with pytest.raises(ConnectionError):
        s3flash.cleanup_uploads(bucket, older_than=3600, endpoint=dead, region=region,
                                s3client_config=cfg)
