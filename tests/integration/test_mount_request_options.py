"""Mountpoint's spellings of the request options on `s3flash mount`, with Mountpoint's
meaning (issue 30): --sse aws:kms|aws:kms:dsse|AES256, --sse-kms-key-id, --storage-class,
--expected-bucket-owner, --user-agent-prefix (the User-Agent starts with it) and
--aws-max-attempts / AWS_MAX_ATTEMPTS. Each one is seen on the wire: the mount talks to the
RGW through tests/servers/faultproxy.py, whose log records every request's x-amz-* headers
and User-Agent."""
import base64
import os
from pathlib import Path

import pytest

import faults
from faults import by_operation, operation, s3_error
from mountutil import mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))
MIB = 1 << 20
WRITES = ("PutObject", "CreateMultipartUpload")
NOT_WRITES = ("UploadPart", "CompleteMultipartUpload", "GetObject", "HeadObject", "List")


def write(m, name, data):
    with open(Path(m.dir) / name, "wb") as f:
        f.write(data)


def seen_on(proxy, ops, header, value):
    """`header: value` on every request of `ops`, and on no other request."""
    faults.seen_on(by_operation(proxy), ops, header, value)


def test_mount_sse_kms_and_key_id(mounts, rgw, bucket, proxy, s3):
    if not rgw.kms_key_id:
        pytest.skip("the RGW has no SSE config (S3FLASH_TEST_KMS_KEY_ID)")
    m = mounts("kms/", "--sse", "aws:kms", "--sse-kms-key-id", rgw.kms_key_id,
               endpoint=proxy.endpoint)
    write(m, "big", os.urandom(9 * MIB))      # multipart at the default 8 MiB parts
    write(m, "small", b"small\n")
    assert (Path(m.dir) / "small").read_bytes() == b"small\n"
    seen_on(proxy, WRITES, "x-amz-server-side-encryption", "aws:kms")
    seen_on(proxy, WRITES, "x-amz-server-side-encryption-aws-kms-key-id", rgw.kms_key_id)
    h = s3.head_object(Bucket=bucket, Key="kms/big")
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == rgw.kms_key_id, h


@pytest.mark.parametrize("sse", ["AES256", "aws:kms:dsse"])
def test_mount_sse_value(mounts, bucket, proxy, sse):
    # RGW has no DSSE-KMS (it refuses the write): what matters is what was sent
    m = mounts(f"sse-{sse}/", "--sse", sse, endpoint=proxy.endpoint)
    try:
        write(m, "f", b"encrypted\n")
    except OSError:
        assert sse == "aws:kms:dsse"
    puts = by_operation(proxy).get("PutObject")
    assert puts and all(h.get("x-amz-server-side-encryption") == sse for h in puts), puts


def test_mount_storage_class(mounts, bucket, proxy, s3):
    # RGW knows only the classes of its placement targets (STANDARD here; it answers
    # InvalidStorageClass to the others)
    m = mounts("sc/", "--storage-class", "STANDARD", endpoint=proxy.endpoint)
    write(m, "big", os.urandom(9 * MIB))
    write(m, "small", b"small\n")
    seen_on(proxy, WRITES, "x-amz-storage-class", "STANDARD")


def test_mount_expected_bucket_owner(mounts, bucket, proxy, s3):
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    m = mounts("owner/", "--expected-bucket-owner", owner, endpoint=proxy.endpoint)
    write(m, "f", b"owned\n")
    assert (Path(m.dir) / "f").read_bytes() == b"owned\n"
    assert sorted(os.listdir(m.dir)) == ["f"]
    log = proxy.stats()["log"]
    assert len(log) >= 3
    for e in log:
        assert (e.get("headers") or {}).get("x-amz-expected-bucket-owner") == owner, (
            operation(e), e.get("headers"))


def test_mount_user_agent_prefix(mounts, bucket, proxy):
    m = mounts("ua/", "--user-agent-prefix", "s3-csi-driver/9.9 k8s/1.30",
               endpoint=proxy.endpoint)
    write(m, "f", b"agent\n")
    assert (Path(m.dir) / "f").read_bytes() == b"agent\n"
    log = proxy.stats()["log"]
    assert log
    for e in log:  # Mountpoint's meaning: the header starts with the prefix
        ua = (e.get("headers") or {}).get("user-agent", "")
        assert ua.startswith("s3-csi-driver/9.9 k8s/1.30 s3flash/"), (operation(e), ua)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_mount_max_attempts(mounts, bucket, proxy, s3, how):
    s3.put_object(Bucket=bucket, Key=f"attempts-{how}/f", Body=b"x" * 100)
    opts, env = (["--aws-max-attempts", "4"], None) if how == "flag" else \
        ([], {"AWS_MAX_ATTEMPTS": "4"})
    m = mounts(f"attempts-{how}/", *opts, endpoint=proxy.endpoint, env=env)
    assert os.stat(Path(m.dir) / "f").st_size == 100
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET",
                                                 "path": f"^/{bucket}/attempts-{how}/f$"})])
    with pytest.raises(OSError):
        (Path(m.dir) / "f").read_bytes()
    gets = [e for e in proxy.stats()["log"]
            if e["method"] == "GET" and e["path"] == f"/{bucket}/attempts-{how}/f"]
    # each read the kernel sends is one GET tried 4 times (the kernel sends it again once
    # after the EIO: 8); the default, 3, would give 3 or 6
    assert len(gets) in (4, 8), len(gets)
