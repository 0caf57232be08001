"""Credentials off the data path (tests/integration/xfer_fault_test.c drives the engine).

1. A `credential_process` slower than the stall time-out (it sleeps 2 s, the stall time-out
   is 1 s) hands out credentials that expire every 10 s during a 24 GiB upload (to the
   loopback sink, which keeps nothing):
   the refresher thread runs it in the background, so no request waits for it, no request
   stalls, and the upload succeeds. The process appends a line to a file at each run, which
   counts the runs. The throughput with these credentials and with static ones is printed
   (pytest -s) for the report.
2. Against Ceph RGW: the fault proxy answers the first UploadPart with an S3 `ExpiredToken` error document:
   the engine fetches new credentials (the process runs again) and re-sends the part once;
   the upload succeeds.

RGW takes credentials without a session token and does not check their Expiration, so the
process hands out the test user's keys with a short Expiration: the expiry is the client's.
"""
import hashlib
import os
import re
import subprocess
import time
from urllib.parse import urlparse

import pytest

from conftest import build_dir
from faults import s3_error, start_faultproxy
from test_sink import Sink

MIB = 1 << 20
GIB = 1 << 30
PART = 64 * MIB
FILE_BYTES = GIB
REPEAT = int(os.environ.get("S3FLASH_TEST_REFRESH_REPEAT", 24))

PROCESS = r"""#!/bin/sh
# test credential_process: count the run, be slow, hand out short-lived credentials
echo run >> "{runs}"
sleep {sleep_s}
exp=$(date -u -d "+{lifetime_s} seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "%s"}}\n' \
    "{akid}" "{secret}" "$exp"
"""


def runs_of(path):
    try:
        return len(open(path).read().splitlines())
    except FileNotFoundError:
        return 0


@pytest.fixture
def process_env(rgw, tmp_path):
    """Environment for the driver: the default chain with a profile whose only credentials
    are a slow credential_process. Returns (env, runs_file)."""
    def make(sleep_s=3, lifetime_s=8):
        runs = tmp_path / "runs"
        script = tmp_path / "creds.sh"
        script.write_text(PROCESS.format(runs=runs, sleep_s=sleep_s, lifetime_s=lifetime_s,
                                         akid=rgw.access_key, secret=rgw.secret_key))
        script.chmod(0o755)
        cfg = tmp_path / "config"
        cfg.write_text(f"[default]\ncredential_process = {script}\n")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
        env.update({
            "HOME": str(tmp_path),
            "AWS_CONFIG_FILE": str(cfg),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "S3FLASH_TEST_ACCESS_KEY": rgw.access_key,   # the driver wants them set;
            "S3FLASH_TEST_SECRET_KEY": rgw.secret_key,   # FAULT_CHAIN_CREDS ignores them
            "S3FLASH_TEST_REGION": rgw.region,
            "FAULT_CHAIN_CREDS": "1",
            "S3FLASH_LOG": "info",
            "S3FLASH_RETRY_BASE_MS": "20",
        })
        return env, runs
    return make


def static_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    env.update({
        "S3FLASH_TEST_ACCESS_KEY": "AKIDSTATIC",
        "S3FLASH_TEST_SECRET_KEY": "static-secret",
        "S3FLASH_TEST_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "S3FLASH_LOG": "info",
        "S3FLASH_RETRY_BASE_MS": "20",
    })
    return env


def drive(env, endpoint, op, bucket, key, path, timeout=600, **extra):
    exe = os.path.join(build_dir(), "tests", "xfer_fault_test")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} not built")
    env = dict(env, S3FLASH_TEST_ENDPOINT=endpoint, **{k: str(v) for k, v in extra.items()})
    p = subprocess.run([exe, op, bucket, key, str(path)], env=env, capture_output=True,
                       text=True, timeout=timeout)
    kv = {}
    for line in p.stdout.splitlines():
        for m in re.finditer(r"(\w+)=(\S+)", line):
            kv.setdefault(m.group(1), m.group(2))
    print(f"rc={p.returncode}\n{p.stdout}\nstderr (tail):\n{p.stderr[-3000:]}")
    return p, kv


def retry_lines(err):
    return [ln for ln in err.splitlines() if "retrying in" in ln or "S3F_ERR_TIMEOUT" in ln]


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "src.bin"
    with open(path, "wb") as f:
        for _ in range(FILE_BYTES // (64 * MIB)):
            f.write(os.urandom(64 * MIB))
    return path


def test_slow_process_expiring_during_upload(tmp_path, process_env, big_file):
    """Against the loopback sink (bench/sink.c; it keeps no data and checks no signature):
    REPEAT uploads of a 1 GiB file by one client, 64 MiB parts, 8 in flight, stall time-out
    1 s. The credential_process takes 2 s and its credentials live 10 s: they are refreshed
    (at half their lifetime) about every 5 s of the upload."""
    sink = Sink(tmp_path, "--threads", "2")
    try:
        endpoint = f"http://127.0.0.1:{sink.port}"
        common = dict(FAULT_PART_BYTES=PART, FAULT_STALL_MS=1000, FAULT_INFLIGHT=8,
                      FAULT_REPEAT=REPEAT)
        total = REPEAT * FILE_BYTES

        # baseline: static credentials
        p, kv = drive(static_env(), endpoint, "upload_file", "bkt", "static", big_file,
                      timeout=180, **common)
        assert p.returncode == 0 and kv["status"] == "S3F_OK", p.stderr[-3000:]
        assert retry_lines(p.stderr) == [], p.stderr[-3000:]
        static_s = float(kv["elapsed"])

        env, runs = process_env(sleep_s=2, lifetime_s=10)
        p, kv = drive(env, endpoint, "upload_file", "bkt", "refreshed", big_file,
                      timeout=180, **common)
        assert p.returncode == 0 and kv["status"] == "S3F_OK", p.stderr[-3000:]
        refreshed_s = float(kv["elapsed"])
        n_runs = runs_of(runs)
        print(f"\nupload of {total / GIB:.0f} GiB ({REPEAT} x 1 GiB) to the sink: static "
              f"credentials {static_s:.2f} s ({total / static_s / MIB:.0f} MiB/s); "
              f"credential_process (2 s per run, 10 s credentials) {refreshed_s:.2f} s "
              f"({total / refreshed_s / MIB:.0f} MiB/s), {n_runs} runs")

        # no request stalled nor was retried: the process never ran on a data path
        assert retry_lines(p.stderr) == [], p.stderr[-3000:]
        assert "background refresh failed" not in p.stderr
        # it ran in the background while the upload went on: once before it (the driver
        # asks for the credentials first), then about every 5 s + its own 2 s, never per
        # request
        parts = REPEAT * (FILE_BYTES // PART)
        assert int(kv["requests_started"]) == parts
        if refreshed_s > 8:
            assert n_runs >= 2, "the credentials expired during the upload: refreshed"
        assert n_runs <= 2 + refreshed_s / 5, n_runs
    finally:
        sink.stop()


def test_expired_token_refreshes_and_resends(rgw, s3, bucket, process_env, tmp_path):
    u = urlparse(rgw.endpoint)
    data = os.urandom(3 * 5 * MIB + 100)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    env, runs = process_env(sleep_s=0, lifetime_s=3600)
    key = "expired-token.bin"
    with start_faultproxy(u.hostname, u.port) as proxy:
        proxy.set_faults([s3_error("ExpiredToken", 400,
                                   match={"method": "PUT", "path": re.escape(key) + "$",
                                          "query": "partNumber=", "nth": 1},
                                   message="The provided token has expired.")])
        p, kv = drive(env, proxy.endpoint, "upload_file", bucket, key, src,
                      FAULT_PART_BYTES=5 * MIB, FAULT_INFLIGHT=1, timeout=120)
        assert p.returncode == 0 and kv["status"] == "S3F_OK", p.stderr[-3000:]
        assert proxy.stats()["faults_total"] == 1
        puts = [e for e in proxy.stats()["log"]
                if e["method"] == "PUT" and e["path"].endswith("/" + key)
                and "partNumber=" in e["query"]]
        assert len(puts) == 5  # 4 parts, one of them sent twice
    # the provider ran again: once for the first request, once after ExpiredToken
    assert runs_of(runs) == 2
    assert "re-sending with new credentials" in p.stderr
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()


def test_expired_token_twice_is_the_error(rgw, s3, bucket, process_env, tmp_path):
    # the re-send happens once: a second ExpiredToken for the same request is the error,
    # after exactly two sends and one new fetch
    u = urlparse(rgw.endpoint)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * 5 * MIB + 100))
    env, runs = process_env(sleep_s=0, lifetime_s=3600)
    key = "expired-twice.bin"
    with start_faultproxy(u.hostname, u.port) as proxy:
        proxy.set_faults([s3_error("ExpiredToken", 400,
                                   match={"method": "PUT", "path": re.escape(key) + "$",
                                          "query": "partNumber=1&"},
                                   message="The provided token has expired.")])
        p, kv = drive(env, proxy.endpoint, "upload_file", bucket, key, src,
                      FAULT_PART_BYTES=5 * MIB, FAULT_INFLIGHT=1, timeout=120)
        assert p.returncode == 1 and kv["status"] == "S3F_ERR_EXPIRED_CREDENTIALS", p.stdout
        part1 = [e for e in proxy.stats()["log"]
                 if e["method"] == "PUT" and e["path"].endswith("/" + key)
                 and e["query"].startswith("partNumber=1&")]
        assert len(part1) == 2
    assert runs_of(runs) == 2
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []) == []


SLOW_SECOND = r"""#!/bin/sh
# test credential_process: the first run is quick, every later one takes {sleep_s} s
echo run >> "{runs}"
[ "$(wc -l < "{runs}")" -gt 1 ] && sleep {sleep_s}
printf '{{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "%s"}}\n' \
    "{akid}" "{secret}" "$(date -u -d '+3600 seconds' +%Y-%m-%dT%H:%M:%SZ)"
"""


def test_expired_token_waits_off_the_io_thread(rgw, s3, bucket, process_env, tmp_path):
    """Issue 20, item 7: after an ExpiredToken the re-send waits for the credential fetch
    (here 3 s) parked, not on its I/O thread: a GET on the same (only) I/O thread keeps
    streaming meanwhile. Before, the re-send was signed on the I/O thread, which waited for
    the fetch: the GET's body stopped for the whole fetch."""
    u = urlparse(rgw.endpoint)
    key = "beside-get.bin"
    s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(6 * MIB))
    env, runs = process_env(sleep_s=0, lifetime_s=3600)
    script = tmp_path / "creds.sh"
    script.write_text(SLOW_SECOND.format(runs=runs, sleep_s=3, akid=rgw.access_key,
                                         secret=rgw.secret_key))
    with start_faultproxy(u.hostname, u.port) as proxy:
        proxy.set_faults([
            s3_error("ExpiredToken", 400,
                     match={"method": "PUT", "path": re.escape(key) + r"\.beside$", "nth": 1},
                     message="The provided token has expired."),
            {"match": {"method": "GET", "path": re.escape(key) + "$"}, "action": "throttle",
             "bytes_per_second": 1 * MIB, "direction": "response"},
        ])
        p, kv = drive(env, proxy.endpoint, "expired_beside", bucket, key, tmp_path / "x",
                      FAULT_IO_THREADS=1, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert kv["put_status"] == "S3F_OK" and kv["get_status"] == "S3F_OK", p.stdout
    assert int(kv["get_bytes"]) == 6 * MIB
    assert runs_of(runs) == 2  # the first fetch, and the slow one after ExpiredToken
    assert "re-sending with new credentials" in p.stderr
    put_ms, gap_ms = float(kv["put_ms"]), float(kv["get_max_gap_ms"])
    print(f"PUT waited {put_ms:.0f} ms for credentials; the GET beside it on the same I/O "
          f"thread: longest pause {gap_ms:.0f} ms")
    assert put_ms >= 2500  # it did wait for the slow fetch
    assert gap_ms < 1500, f"the I/O thread stalled {gap_ms:.0f} ms while the PUT waited"
