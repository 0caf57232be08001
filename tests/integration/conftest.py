"""Fixtures for the s3flash integration tests.

The tests run the real `s3flash` binary against a real Ceph RGW:

- RGW: taken from the S3FLASH_TEST_* environment (as printed by `tests/servers/rgw.sh env`),
  else started here with tests/servers/rgw.sh in a temporary directory for the session and
  stopped at the end.
- The CLI: $S3FLASH_CLI, else $S3FLASH_BUILD_DIR/src/cli/s3flash, else build/src/cli/s3flash.
- boto3 is used only by the harness (creating buckets, seeding objects, and as an independent
  reader to check what the CLI wrote), never as the code under test.
"""

import os
import uuid
from pathlib import Path

import pytest

from helpers import Cli, Rgw, closed_port, empty_bucket
from mountutil import Mount
from s3servers import rgw_session

ROOT = Path(__file__).resolve().parents[2]


def build_dir():
    """The meson build directory under test: $S3FLASH_BUILD_DIR, else build/."""
    return os.environ.get("S3FLASH_BUILD_DIR", str(ROOT / "build"))


@pytest.fixture(scope="session")
def rgw():
    yield from rgw_session()


@pytest.fixture(scope="session")
def s3env(rgw):
    """The process environment plus the S3FLASH_TEST_* variables of the server in use."""
    env = dict(os.environ)
    env.update({
        "S3FLASH_TEST_ENDPOINT": rgw.endpoint,
        "S3FLASH_TEST_ACCESS_KEY": rgw.access_key,
        "S3FLASH_TEST_SECRET_KEY": rgw.secret_key,
        "S3FLASH_TEST_OTHER_ACCESS_KEY": rgw.other_access_key,
        "S3FLASH_TEST_OTHER_SECRET_KEY": rgw.other_secret_key,
        "S3FLASH_TEST_REGION": rgw.region,
    })
    return env


@pytest.fixture(scope="session")
def cli_path():
    p = os.environ.get("S3FLASH_CLI")
    if not p:
        p = os.path.join(build_dir(), "src", "cli", "s3flash")
    if not os.access(p, os.X_OK):
        pytest.fail(f"s3flash binary not found at {p} (build it, or set S3FLASH_CLI)")
    return p


@pytest.fixture(scope="session")
def cli(cli_path, rgw, tmp_path_factory):
    return Cli(cli_path, rgw, tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def cli_nosrv(cli_path, tmp_path_factory):
    """A Cli for tests that need no S3 server (help, usage errors, fault server)."""
    fake = Rgw(endpoint=f"http://127.0.0.1:{closed_port()}", access_key="AKIDEXAMPLE",
               secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
               other_access_key="", other_secret_key="", region="us-east-1")
    return Cli(cli_path, fake, tmp_path_factory.mktemp("home-nosrv"))


def _boto3_client(rgw, access_key, secret_key):
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=rgw.endpoint, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name=rgw.region,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      retries={"max_attempts": 3, "mode": "standard"}))


@pytest.fixture(scope="session")
def s3(rgw):
    """boto3 client of the test user (harness only)."""
    return _boto3_client(rgw, rgw.access_key, rgw.secret_key)


@pytest.fixture(scope="module")
def module_proxy(rgw):
    """tests/servers/faultproxy.py in front of the RGW, one per test module (a module may
    define its own under the same name)."""
    from urllib.parse import urlparse
    from faults import start_faultproxy
    u = urlparse(rgw.endpoint)
    p = start_faultproxy(u.hostname, u.port)
    yield p
    p.stop()


@pytest.fixture
def proxy(module_proxy):
    """The module's fault proxy with no rules and its stats zeroed."""
    module_proxy.reset()
    return module_proxy


@pytest.fixture
def mounts(cli_path, rgw, bucket, tmp_path):
    """make(prefix, *options, endpoint=None, env=None) -> a started Mount of bucket/prefix
    (env: more variables of the daemon's environment); all are unmounted at the end of the
    test."""
    made = []

    def make(prefix, *options, endpoint=None, name=None, env=None):
        d = tmp_path / (name or f"mnt{len(made)}")
        m = Mount(cli_path, endpoint or rgw.endpoint, rgw.access_key, rgw.secret_key,
                  f"{bucket}/{prefix}", d, list(options), region=rgw.region,
                  log_path=str(tmp_path / f"{d.name}.log"), env=env)
        made.append(m)
        return m.start()

    yield make
    for m in made:
        if m.alive():
            try:
                m.stop()
            except Exception:
                m.kill()


@pytest.fixture(scope="module")
def bucket(s3, request):
    """A fresh bucket per test module, emptied and removed afterwards."""
    mod = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:30]
    name = f"s3f-{mod}-{uuid.uuid4().hex[:8]}".lower()
    s3.create_bucket(Bucket=name)
    yield name
    try:
        empty_bucket(s3, name)
        s3.delete_bucket(Bucket=name)
    except Exception as e:  # leave it; the server is thrown away anyway
        print(f"cleanup of bucket {name} failed: {e}")


# Modules whose assertions are rates measured on the wire (a throttled link kept full, a
# rate cap held, no stall on a slow link, a daemon's peak RSS): they run alone, after the
# parallel pass (tests/run.sh: `-m "not serial"` on several workers, then `-m serial`), so
# that other tests' CPU on this 2-core machine does not count against the link.
SERIAL_MODULES = {
    "test_link_fill", "test_link_fill_sink", "test_sink_limits", "test_slow_link",
    "test_mount_perf", "test_control_lane", "test_netns", "test_cli_many",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: measures rates on the wire; run alone "
                            "(tests/run.sh runs these after the parallel pass)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
