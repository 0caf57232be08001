"""`s3flash mount` with the CLI's global encryption flags (issue 30): its client is built
from the same options as every command's, so a file written through the mount is encrypted
as asked, and SSE-C objects are read and written with their key. (Mountpoint's own
spellings of the mount's flags and the CSI options are a later round.)"""
import os
from pathlib import Path

import pytest

from mountutil import mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))
MIB = 1 << 20


@pytest.fixture(scope="module")
def kms(rgw):
    if not rgw.kms_key_id:
        pytest.skip("the RGW has no SSE config (S3FLASH_TEST_KMS_KEY_ID)")
    return rgw.kms_key_id


def test_mount_writes_with_sse_kms(mounts, kms, bucket, s3):
    m = mounts("kms/", "--sse", "aws:kms", "--sse-kms-key-id", kms)
    data = os.urandom(9 * MIB)  # multipart at the default 8 MiB parts
    with open(Path(m.dir) / "f.bin", "wb") as f:
        f.write(data)
    h = s3.head_object(Bucket=bucket, Key="kms/f.bin")
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == kms, h
    assert (Path(m.dir) / "f.bin").read_bytes() == data


def test_mount_sse_c_round_trip(mounts, kms, bucket, s3, tmp_path):
    key = os.urandom(32)
    (tmp_path / "key").write_bytes(key)
    m = mounts("ssec/", "--sse-c", "AES256", "--sse-c-key", f"fileb://{tmp_path / 'key'}")
    data = os.urandom(3 * MIB + 7)
    with open(Path(m.dir) / "g.bin", "wb") as f:
        f.write(data)
    h = s3.head_object(Bucket=bucket, Key="ssec/g.bin", SSECustomerAlgorithm="AES256",
                       SSECustomerKey=key)
    assert h["SSECustomerAlgorithm"] == "AES256"
    with open(Path(m.dir) / "g.bin", "rb") as f:
        f.seek(MIB + 3)
        assert f.read(MIB) == data[MIB + 3:2 * MIB + 3]   # a ranged read
    assert (Path(m.dir) / "g.bin").read_bytes() == data
