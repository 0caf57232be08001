"""The S3 servers under the tests, for pytest fixtures of every test tree (tests/integration,
tests/python): a real Ceph RGW (rgw.sh) and moto (moto.sh), taken from the environment when
one is given, else started for the session and stopped after.

    sys.path.insert(0, "tests/servers"); from s3servers import rgw_session
    @pytest.fixture(scope="session")
    def rgw(): yield from rgw_session()
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RGW_SH = HERE / "rgw.sh"
MOTO_SH = HERE / "moto.sh"


@dataclass
class Rgw:
    endpoint: str
    access_key: str
    secret_key: str
    other_access_key: str
    other_secret_key: str
    region: str
    kms_key_id: str = ""  # an SSE-KMS key id the server knows ("": no SSE-KMS or SSE-C)


def closed_port():
    """A loopback TCP port nobody listens on (bound then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse_exports(text):
    """The `export K=V` lines that rgw.sh / moto.sh print, as a dict."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'\"")
    return env


def rgw_from_env(env):
    return Rgw(
        endpoint=env["S3FLASH_TEST_ENDPOINT"],
        access_key=env["S3FLASH_TEST_ACCESS_KEY"],
        secret_key=env["S3FLASH_TEST_SECRET_KEY"],
        other_access_key=env.get("S3FLASH_TEST_OTHER_ACCESS_KEY", ""),
        other_secret_key=env.get("S3FLASH_TEST_OTHER_SECRET_KEY", ""),
        region=env.get("S3FLASH_TEST_REGION", "us-east-1"),
        kms_key_id=env.get("S3FLASH_TEST_KMS_KEY_ID", ""),
    )


def rgw_session():
    """Yields the Rgw of S3FLASH_TEST_*, else of a throw-away cluster started here."""
    if os.environ.get("S3FLASH_TEST_ENDPOINT"):
        yield rgw_from_env(os.environ)
        return
    if shutil.which("radosgw") is None:
        pytest.skip("no S3FLASH_TEST_ENDPOINT and Ceph is not installed "
                    "(run tests/servers/install-deps.sh)")
    # bluestore wants a real disk (direct I/O), not tmpfs
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    d = tempfile.mkdtemp(prefix="s3flash-rgw-", dir=base)
    try:
        p = subprocess.run(["bash", str(RGW_SH), "start", d], capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0:
            pytest.fail(f"rgw.sh start failed ({p.returncode}):\n{p.stderr[-4000:]}")
        yield rgw_from_env(parse_exports(p.stdout))
    finally:
        subprocess.run(["bash", str(RGW_SH), "stop", d], capture_output=True, timeout=120)


def moto_session():
    """Yields the exports of a moto server started here (S3FLASH_MOTO_ENDPOINT, _ACCESS_KEY,
    _SECRET_KEY, _REGION); skips when moto or the modules it needs for CRC32C/CRC64NVME
    are missing (moto would silently compute CRC32 instead)."""
    if shutil.which("moto_server") is None:
        pytest.skip("moto_server is not installed (run tests/servers/install-deps.sh)")
    for mod in ("crc32c", "awscrt"):
        p = subprocess.run(["python3", "-c", f"import {mod}"], capture_output=True)
        if p.returncode != 0:
            pytest.skip(f"python module {mod} is missing: moto would compute CRC32 instead")
    d = tempfile.mkdtemp(prefix="s3flash-moto-")
    os.rmdir(d)  # moto.sh wants to create it
    try:
        p = subprocess.run(["bash", str(MOTO_SH), "start", d], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            pytest.fail(f"moto.sh start failed:\n{p.stderr[-3000:]}")
        yield parse_exports(p.stdout)
    finally:
        subprocess.run(["bash", str(MOTO_SH), "stop", d], capture_output=True, timeout=60)


def make_requester_pays(s3, bucket):
    """Make `bucket` (of the boto3 client's user) bill the requester and let any
    authenticated user in by a bucket policy: RGW then refuses another user's reads and
    listings without x-amz-request-payer."""
    s3.put_bucket_request_payment(Bucket=bucket,
                                  RequestPaymentConfiguration={"Payer": "Requester"})
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:*"],
                       "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}))
