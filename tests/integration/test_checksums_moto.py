"""Checksums against moto, which computes them (Ceph RGW ignores checksum headers):
PutObject / UploadPart / verified GetObject with CRC32C, CRC32 and CRC64NVME through the
library, and one corrupted byte in a download (through tests/servers/faultproxy.py) that is
detected, never returned as data."""

import hashlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import build_dir
from faults import start_faultproxy
from helpers import closed_port
from s3servers import moto_session

@pytest.fixture(scope="module")
def moto():
    if os.environ.get("S3FLASH_MOTO_ENDPOINT"):
        yield os.environ["S3FLASH_MOTO_ENDPOINT"]
        return
    for env in moto_session():
        yield env["S3FLASH_MOTO_ENDPOINT"]


def _s3(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def test_library_checksums_on_moto(moto):
    env = dict(os.environ)
    env.update({"S3FLASH_TEST_ENDPOINT": moto, "S3FLASH_TEST_ACCESS_KEY": "testing",
                "S3FLASH_TEST_SECRET_KEY": "testing", "S3FLASH_TEST_OTHER_ACCESS_KEY": "testing",
                "S3FLASH_TEST_OTHER_SECRET_KEY": "testing", "S3FLASH_TEST_REGION": "us-east-1"})
    exe = os.path.join(build_dir(), "tests", "ops_test")
    r = subprocess.run([exe, "test_checksums"], env=env, capture_output=True, text=True,
                       timeout=300)
    print(r.stdout)
    print(r.stderr)
    assert r.returncode == 0 and " 0 failed" in r.stdout
    # moto computed the full-object CRC64NVME of the multipart object itself, and it matched
    assert "ck/mp-4: the server returned ''" not in r.stdout


def _cli_env(home):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    env.update({"HOME": str(home), "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                "AWS_CONFIG_FILE": str(Path(home, "none")),
                "AWS_SHARED_CREDENTIALS_FILE": str(Path(home, "none")),
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{closed_port()}"})
    return env


def test_corrupted_download_is_detected(moto, cli_path, tmp_path):
    """An object whose full-object CRC64NVME the server knows, downloaded through a proxy
    that flips one byte: s3flash cp must not hand out the corrupted bytes."""
    s3 = _s3(moto)
    bucket = f"ck-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    part = 5 << 20
    data = bytes((i * 7 + i // 4099) % 256 for i in range(part)) * 2 + b"tail" * 1000
    up = s3.create_multipart_upload(Bucket=bucket, Key="obj", ChecksumAlgorithm="CRC64NVME")
    parts = []
    for n, off in enumerate(range(0, len(data), part), start=1):
        r = s3.upload_part(Bucket=bucket, Key="obj", UploadId=up["UploadId"], PartNumber=n,
                           Body=data[off:off + part], ChecksumAlgorithm="CRC64NVME")
        parts.append({"PartNumber": n, "ETag": r["ETag"],
                      "ChecksumCRC64NVME": r["ChecksumCRC64NVME"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="obj", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts})
    head = s3.head_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC64NVME"), "moto did not store a CRC64NVME"

    port = int(moto.rsplit(":", 1)[1])
    with start_faultproxy("127.0.0.1", port) as proxy:
        env = _cli_env(tmp_path)
        out = tmp_path / "out.bin"
        # without a fault: the bytes arrive and verify
        r = subprocess.run([cli_path, "--endpoint-url", proxy.endpoint, "cp",
                            f"s3://{bucket}/obj", str(out)], env=env, capture_output=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
        out.unlink()
        # one flipped byte in every GET of the object
        proxy.set_faults([{"match": {"method": "GET", "path": f"^/{bucket}/obj$"},
                           "action": "corrupt_response_byte", "at": "random", "seed": 5}])
        r = subprocess.run([cli_path, "--endpoint-url", proxy.endpoint, "cp",
                            f"s3://{bucket}/obj", str(out)], env=env, capture_output=True,
                           timeout=120)
        st = proxy.stats()
        assert st["faults_total"] >= 1
        err = r.stderr.decode(errors="replace")
        print(err)
        # every GET is corrupted, so no retry can succeed: a clear checksum error, no file
        assert r.returncode != 0
        assert "checksum" in err.lower() or "CRC64NVME" in err
        assert not out.exists() or \
            hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
