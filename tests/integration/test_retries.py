"""The executor's retries and resumption, through the fault proxy in front of Ceph RGW:
what is retryable is retried (and then succeeds, bit-exact), what is not is not, and a
broken download resumes from the byte it reached."""
import hashlib
import os
from urllib.parse import urlparse

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401  (fixture)


@pytest.fixture
def proxy(rgw, faultproxy_factory):  # noqa: F811
    u = urlparse(rgw.endpoint)
    return faultproxy_factory(u.hostname, u.port)


def run(cli, proxy, *args, **kw):
    env = cli.env(S3FLASH_RETRY_BASE_MS="20", **kw.pop("env", {}))
    return cli.run("--endpoint-url", proxy.endpoint, "--force-path-style", *args,
                   endpoint=False, env=env, **kw)


def gets(proxy, key):
    return sum(n for k, n in proxy.stats()["requests"].items()
               if k.startswith("GET ") and k.endswith(key))


@pytest.fixture(scope="module")
def blob(s3, bucket):
    data = os.urandom(3 * 1024 * 1024 + 17)
    s3.put_object(Bucket=bucket, Key="retry/blob", Body=data)
    return data


def test_slowdown_then_success(cli, proxy, bucket, blob, tmp_path):
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET", "max_count": 2})])
    out = tmp_path / "blob"
    r = run(cli, proxy, "cp", f"s3://{bucket}/retry/blob", out)
    assert r.rc == 0, r
    assert out.read_bytes() == blob
    assert gets(proxy, "/retry/blob") == 3


def test_slowdown_storm_gives_up_after_max_attempts(cli, proxy, bucket, blob):
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET"})])
    r = run(cli, proxy, "cat", f"s3://{bucket}/retry/blob")
    assert r.rc == 1
    assert "SlowDown" in r.err and "after 3 attempts" in r.err, r
    assert gets(proxy, "/retry/blob") == 3
    # AWS_MAX_ATTEMPTS is honoured
    proxy.reset()
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET"})])
    r = run(cli, proxy, "cat", f"s3://{bucket}/retry/blob", env={"AWS_MAX_ATTEMPTS": "5"})
    assert r.rc == 1 and "after 5 attempts" in r.err, r
    assert gets(proxy, "/retry/blob") == 5


def test_internal_error_retried(cli, proxy, bucket, tmp_path):
    proxy.set_faults([s3_error("InternalError", 500, {"method": "PUT", "nth": 1})])
    src = tmp_path / "up"
    src.write_bytes(b"retried upload")
    r = run(cli, proxy, "cp", src, f"s3://{bucket}/retry/up")
    assert r.rc == 0, r
    r = run(cli, proxy, "cat", f"s3://{bucket}/retry/up")
    assert r.out == b"retried upload"


@pytest.mark.parametrize("code,status", [("AccessDenied", 403), ("InvalidArgument", 400)])
def test_not_retryable_errors_sent_once(cli, proxy, bucket, blob, code, status):
    proxy.set_faults([s3_error(code, status, {"method": "GET"})])
    r = run(cli, proxy, "cat", f"s3://{bucket}/retry/blob")
    assert r.rc == 1 and code in r.err, r
    assert gets(proxy, "/retry/blob") == 1


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_reset_mid_body_resumes(cli, proxy, bucket, blob, tmp_path, seed):
    """The connection is reset at a random offset of the body; the retry asks for the rest
    with a Range and If-Match, and the file is bit-exact."""
    proxy.set_faults([{"match": {"method": "GET", "path": "/retry/blob$", "nth": 1},
                       "action": "reset_response_body_at", "at": "random", "seed": seed}])
    out = tmp_path / "blob"
    r = run(cli, proxy, "--debug", "cp", f"s3://{bucket}/retry/blob", out)
    assert r.rc == 0, r
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(blob).digest()
    assert gets(proxy, "/retry/blob") == 2
    assert "range: bytes=" in r.err.lower() or "attempt 2" in r.err


def test_truncated_body_retried(cli, proxy, bucket, blob, tmp_path):
    proxy.set_faults([{"match": {"method": "GET", "path": "/retry/blob$", "nth": 1},
                       "action": "truncate_response", "at": 1000}])
    out = tmp_path / "blob"
    r = run(cli, proxy, "cp", f"s3://{bucket}/retry/blob", out)
    assert r.rc == 0, r
    assert out.read_bytes() == blob


def test_truncated_every_time_is_a_clear_error(cli, proxy, bucket, blob, tmp_path):
    proxy.set_faults([{"match": {"method": "GET", "path": "/retry/blob$"},
                       "action": "truncate_response", "at": 10}])
    out = tmp_path / "blob"
    r = run(cli, proxy, "cp", f"s3://{bucket}/retry/blob", out)
    assert r.rc == 1
    assert "cut short" in r.err or "network" in r.err.lower(), r
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left


def test_object_replaced_mid_download_is_an_error(cli, proxy, s3, bucket, tmp_path):
    """Reset the first GET, and replace the object before the retry: If-Match makes the
    resumed request fail rather than mixing two versions."""
    s3.put_object(Bucket=bucket, Key="retry/changing", Body=b"A" * (2 << 20))
    proxy.set_faults([{"match": {"method": "GET", "path": "/retry/changing$", "nth": 1},
                       "action": "reset_response_body_at", "at": 1 << 20},
                      {"match": {"method": "GET", "path": "/retry/changing$", "nth": 2},
                       "action": "delay", "seconds": 1.0}])
    import threading
    t = threading.Timer(0.5, lambda: s3.put_object(Bucket=bucket, Key="retry/changing",
                                                   Body=b"B" * (2 << 20)))
    t.start()
    out = tmp_path / "changing"
    r = run(cli, proxy, "cp", f"s3://{bucket}/retry/changing", out)
    t.join()
    assert r.rc == 1, r
    assert "PreconditionFailed" in r.err or "changed" in r.err, r
    assert not out.exists()
