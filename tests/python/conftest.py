"""Fixtures of the Python package tests: a real Ceph RGW, never mocks.

The server comes from the S3FLASH_TEST_* environment (tests/servers/rgw.sh env), else it is
started here with tests/servers/rgw.sh for the session (as tests/integration/conftest.py
does). The package under test is the *installed* s3flash (tests/python/run.sh installs it
with pip). boto3 is used only by the harness: buckets, and an independent view of what exists.
"""

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from s3servers import closed_port, rgw_session  # noqa: E402  (shared with tests/integration)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def rgw():
    yield from rgw_session()


@pytest.fixture(scope="session", autouse=True)
def aws_env(rgw):
    """The test user's keys in the environment (the default credentials chain finds them),
    no profile, no endpoint variables, no metadata service: every client in these tests,
    forked and spawned children included, gets its endpoint from the `endpoint` argument."""
    mp = pytest.MonkeyPatch()
    for k in list(os.environ):
        if k.startswith("AWS_"):
            mp.delenv(k)
    home = tempfile.mkdtemp(prefix="s3flash-pyhome-")
    mp.setenv("AWS_CONFIG_FILE", os.path.join(home, "no-such-config"))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(home, "no-such-credentials"))
    mp.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    mp.setenv("AWS_ACCESS_KEY_ID", rgw.access_key)
    mp.setenv("AWS_SECRET_ACCESS_KEY", rgw.secret_key)
    mp.setenv("AWS_REGION", rgw.region)
    yield
    mp.undo()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def kms(rgw):
    """The SSE-KMS key id of an RGW with SSE-C and SSE-KMS (tests/servers/rgw.sh sets them
    up); the test is skipped against one without."""
    if not rgw.kms_key_id:
        pytest.skip("the RGW has no SSE config (S3FLASH_TEST_KMS_KEY_ID; tests/servers/rgw.sh "
                    "starts one with it)")
    return rgw.kms_key_id


@pytest.fixture(scope="session")
def endpoint(rgw):
    return rgw.endpoint


@pytest.fixture(scope="session")
def region(rgw):
    return rgw.region


def _boto3(rgw, access_key, secret_key):
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=rgw.endpoint, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name=rgw.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))


@pytest.fixture(scope="session")
def s3(rgw):
    """boto3 client of the test user (harness only)."""
    return _boto3(rgw, rgw.access_key, rgw.secret_key)


@pytest.fixture(scope="session")
def s3_other(rgw):
    if not rgw.other_access_key:
        pytest.skip("no second RGW user (S3FLASH_TEST_OTHER_*)")
    return _boto3(rgw, rgw.other_access_key, rgw.other_secret_key)


def _empty_bucket(s3, name):
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=o["Key"])
    ups = s3.list_multipart_uploads(Bucket=name).get("Uploads", [])
    for u in ups:
        s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])


@pytest.fixture(scope="module")
def bucket(s3, request):
    """A fresh bucket per test module, emptied and removed afterwards."""
    mod = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:28]
    name = f"s3fpy-{mod}-{uuid.uuid4().hex[:8]}".lower()
    s3.create_bucket(Bucket=name)
    yield name
    try:
        _empty_bucket(s3, name)
        s3.delete_bucket(Bucket=name)
    except Exception as e:  # the server is thrown away anyway
        print(f"cleanup of bucket {name} failed: {e}")


@pytest.fixture
def key(request):
    return f"{request.node.name[:60]}-{uuid.uuid4().hex[:8]}.pt".replace("[", "-").replace("]", "")


@pytest.fixture
def uri(bucket, key):
    return f"s3://{bucket}/{key}"


@pytest.fixture(scope="module")
def ckpt(region, endpoint):
    import s3flash
    return s3flash.S3Checkpoint(region=region, endpoint=endpoint)


def exists(s3, bucket, key):
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except s3.exceptions.ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise


def integration_faults():
    """tests/integration/faults.py (what drives tests/servers/faultproxy.py), loaded from its
    file, not through sys.path: tests/integration/helpers.py would then shadow
    tests/python/helpers.py for later imports (the DCP tests' spawned ranks)."""
    spec = importlib.util.spec_from_file_location(
        "integration_faults", ROOT / "tests" / "integration" / "faults.py")
    faults = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(faults)
    return faults


@contextlib.contextmanager
def faultproxy(endpoint):
    """tests/servers/faultproxy.py in front of `endpoint` for the block: its requests are
    counted and logged at the socket, and faults injected there (proxy.set_faults)."""
    u = urlparse(endpoint)
    with integration_faults().start_faultproxy(u.hostname, u.port) as p:
        yield p


@pytest.fixture
def proxy(endpoint):
    """A fault proxy in front of RGW for one test (clients take proxy.endpoint)."""
    with faultproxy(endpoint) as p:
        yield p
