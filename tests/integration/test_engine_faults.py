"""The transfer engine under faults, against Ceph RGW through tests/servers/faultproxy.py.

Each test sets the proxy's faults, runs ONE engine transfer with tests/integration/
xfer_fault_test.c (multipart: 5 MiB parts, 4 parts), and checks the outcome with an
independent client (boto3, straight to RGW): the object (or the downloaded file) byte-exact
by SHA-256, no object and no multipart upload left after a failure, and the proxy's counts
(how many faults fired, how many requests were sent: the retries are visible there).

Faults are injected only on the wire (the proxy); nothing in the code under test is mocked.

Paths:
  upload:   s3f_upload_buffer ("buffer"), s3f_upload_file ("file"), s3f_writer_* ("writer")
  download: s3f_download_buffer ("buffer"), s3f_download_file ("file"), s3f_reader_* ("reader")

One corrupted byte in a download: RGW keeps no checksum (it ignores x-amz-checksum-*), a
ranged GET carries none, and the multipart ETag is an MD5 of part MD5s over the uploader's
part boundaries, so nothing can catch a flipped byte on the wire from RGW. That case runs
against moto (tests/servers/moto.sh), which keeps the FULL_OBJECT CRC32C the engine sends:
the download's checksum HEAD then catches the byte (S3F_ERR_CHECKSUM, no file left).
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
from helpers import wait_for
from test_xfer import moto_env  # noqa: F401  (fixture)

MIB = 1 << 20
PART = 5 * MIB
SIZE = 3 * PART + 12345       # 4 parts
UPLOAD_PATHS = ["buffer", "file", "writer"]
DOWNLOAD_PATHS = ["buffer", "file", "reader"]
SEEDS = [1, 2, 3]


# ---- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def module_proxy(rgw):
    u = urlparse(rgw.endpoint)
    p = start_faultproxy(u.hostname, u.port)
    yield p
    p.stop()


@pytest.fixture
def proxy(module_proxy):
    module_proxy.reset()
    return module_proxy


def sha(data):
    return hashlib.sha256(data).hexdigest()


def sha_file(path):
    with open(path, "rb") as f:
        return sha(f.read())


class Run:
    def __init__(self, p, elapsed):
        self.rc = p.returncode
        self.out = p.stdout
        self.err = p.stderr
        self.wall = elapsed
        self.kv = {}
        for line in self.out.splitlines():
            for m in re.finditer(r"(\w+)=(\S+)", line):
                self.kv.setdefault(m.group(1), m.group(2))
            if line.startswith("error="):
                self.kv["error"] = line[len("error="):]

    @property
    def status(self):
        return self.kv.get("status")

    @property
    def elapsed(self):
        return float(self.kv.get("elapsed", "nan"))

    def retries(self):
        """The executor's retry lines (S3FLASH_LOG=info)."""
        return [ln for ln in self.err.splitlines() if "retrying in" in ln]

    def __repr__(self):
        return f"<rc={self.rc}\nstdout:\n{self.out}\nstderr (tail):\n{self.err[-4000:]}>"


def driver_env(rgw, endpoint, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    env.update({
        "S3FLASH_TEST_ENDPOINT": endpoint,
        "S3FLASH_TEST_ACCESS_KEY": rgw.access_key,
        "S3FLASH_TEST_SECRET_KEY": rgw.secret_key,
        "S3FLASH_TEST_REGION": rgw.region,
        "AWS_EC2_METADATA_DISABLED": "true",
        "S3FLASH_RETRY_BASE_MS": "20",
        "S3FLASH_LOG": "info",
        "FAULT_INFLIGHT": "4",
    })
    env.update({k: str(v) for k, v in extra.items()})
    return env


def driver_argv(op, bucket, key, path, *extra):
    exe = os.path.join(build_dir(), "tests", "xfer_fault_test")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} not built")
    return [exe, op, bucket, key, str(path), *map(str, extra)]


def drive(rgw, proxy, op, bucket, key, path, *extra, timeout=120, **env):
    argv = driver_argv(op, bucket, key, path, *extra)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=driver_env(rgw, proxy.endpoint, **env), capture_output=True,
                       text=True, timeout=timeout)
    r = Run(p, time.monotonic() - t0)
    print(r)
    return r


STALL_TIMEOUT_S = 1.0


def stall_detection_s(proxy, r, key):
    """Seconds from the moment the proxy stalled the request (its log, CLOCK_MONOTONIC) to
    the engine's S3F_ERR_TIMEOUT (its log line's CLOCK_MONOTONIC stamp)."""
    acted = [e["acted"] for e in proxy.stats()["log"]
             if e["action"] == "stall" and e["path"].endswith("/" + key) and e["acted"]]
    fired = [float(m.group(1)) for m in
             re.finditer(r"^\[s3flash ([0-9.]+) \w+\].*S3F_ERR_TIMEOUT", r.err, re.M)]
    assert acted and fired, r
    return fired[0] - acted[0]


def assert_stall_detected(r, d):
    """The engine's own stall clock fired (its message, not curl's 5 s low-speed check,
    "Operation too slow"), not before the stall timeout, and the transfer did not wait out
    the proxy's 20 s stall. No upper bound on the detection time itself: on a loaded machine
    that is a wall-clock guess."""
    assert any("(stall timeout)" in ln for ln in r.retries()), r
    assert not any("Operation too slow" in ln for ln in r.retries()), r
    assert d >= STALL_TIMEOUT_S - 0.1, d
    assert r.elapsed < 15, r


UPLOAD_OP = {"buffer": "upload_buffer", "file": "upload_file", "writer": "writer"}
DOWNLOAD_OP = {"buffer": "download_buffer", "file": "download_file", "reader": "reader"}


def upload(rgw, proxy, how, bucket, key, src, **kw):
    return drive(rgw, proxy, UPLOAD_OP[how], bucket, key, src, **kw)


def download(rgw, proxy, how, bucket, key, dst, size=SIZE, **kw):
    extra = (size,) if how == "buffer" else ()
    return drive(rgw, proxy, DOWNLOAD_OP[how], bucket, key, dst, *extra, **kw)


@pytest.fixture
def src(tmp_path):
    data = os.urandom(SIZE)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    return path, data


def part_puts(key):
    """A match for the UploadPart requests of `key`."""
    return {"method": "PUT", "path": re.escape(key) + "$", "query": "partNumber="}


def gets(key):
    return {"method": "GET", "path": re.escape(key) + "$"}


def count(proxy, method, key, query=None):
    """Requests seen by the proxy for `key` (from its log; `query`: substring)."""
    return sum(1 for e in proxy.stats()["log"]
               if e["method"] == method and e["path"].endswith("/" + key)
               and (query is None or query in e["query"]))


def uploads(s3, bucket, key):
    r = s3.list_multipart_uploads(Bucket=bucket, Prefix=key)
    return [(u["Key"], u["UploadId"]) for u in r.get("Uploads", []) if u["Key"] == key]


def assert_object(s3, bucket, key, data, parts=4):
    h = s3.head_object(Bucket=bucket, Key=key)
    assert h["ContentLength"] == len(data)
    assert h["ETag"].strip('"').endswith(f"-{parts}"), h["ETag"]
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert sha(body) == sha(data)
    assert uploads(s3, bucket, key) == []


def assert_nothing(s3, bucket, key):
    from botocore.exceptions import ClientError
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key=key)
    assert ei.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    assert uploads(s3, bucket, key) == []


def put_multipart(s3, bucket, key, data, part=PART):
    """Seed an object of several parts (straight to RGW)."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for i, off in enumerate(range(0, len(data), part), 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i,
                           Body=data[off:off + part])
        parts.append({"PartNumber": i, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": parts})


@pytest.fixture(scope="module")
def dl_object(s3, bucket):
    data = os.urandom(SIZE)
    put_multipart(s3, bucket, "dl/obj", data)
    return "dl/obj", data


def check_download(r, how, dst, data):
    assert r.rc == 0, r
    assert sha_file(dst) == sha(data)
    assert [p.name for p in dst.parent.iterdir()] == [dst.name]  # no temporary file left


# ---- uploads: resets, stalls, SlowDown storms, 500s ------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("how", UPLOAD_PATHS)
def test_upload_reset_mid_body(rgw, proxy, s3, bucket, src, how, seed):
    """Two UploadPart bodies are cut by a RST at random offsets: those parts are sent again
    and the object is complete and exact."""
    key = f"up-reset/{how}-{seed}"
    proxy.set_faults([
        {"match": dict(part_puts(key), nth=1), "action": "reset_request_body_at",
         "at": "random", "seed": seed},
        {"match": dict(part_puts(key), nth=3), "action": "reset_request_body_at",
         "at": "random", "seed": seed + 100},
    ])
    r = upload(rgw, proxy, how, bucket, key, src[0])
    assert r.rc == 0, r
    st = proxy.stats()
    assert st["faults_total"] == 2
    offsets = [e["at"] for e in st["log"] if e["action"] == "reset_request_body_at"]
    assert len(offsets) == 2 and all(0 <= a < PART for a in offsets), offsets
    assert count(proxy, "PUT", key, "partNumber=") == 4 + 2
    # each reset is one more request; the engine retries it, or curl itself re-sends a
    # request whose reused connection died before any response byte
    assert 1 <= len(r.retries()) <= 2, r
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("how", ["buffer", "writer"])
def test_upload_stall(rgw, proxy, s3, bucket, src, how):
    """An UploadPart body stops moving for 20 s: the 1 s stall timeout fires, the part is
    sent again, and the whole upload ends long before the stall would have."""
    key = f"up-stall/{how}"
    proxy.set_faults([{"match": dict(part_puts(key), nth=2), "action": "stall",
                       "direction": "request", "at": "random", "seed": 4, "seconds": 20}])
    r = upload(rgw, proxy, how, bucket, key, src[0], FAULT_STALL_MS=1000)
    assert r.rc == 0, r
    assert proxy.stats()["faults_total"] == 1
    assert count(proxy, "PUT", key, "partNumber=") == 5
    assert any("S3F_ERR_TIMEOUT" in ln for ln in r.retries()), r
    # "a request that moves no byte for this long is aborted": within a second of it
    d = stall_detection_s(proxy, r, key)
    print(f"stall detected after {d:.2f} s (stall timeout {STALL_TIMEOUT_S} s)")
    assert_stall_detected(r, d)
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("how", ["buffer", "writer"])
def test_upload_slowdown_storm(rgw, proxy, s3, bucket, src, how):
    """The first 8 UploadParts get 503 SlowDown, then each one more with probability 0.3
    (seeded, at most 3 more): the engine backs off, keeps going and finishes; every
    SlowDown is one more request at the proxy and one retry in the log."""
    key = f"up-slowdown/{how}"
    proxy.set_faults([
        s3_error("SlowDown", 503, dict(part_puts(key), max_count=8)),
        s3_error("SlowDown", 503, dict(part_puts(key), probability=0.3, seed=5, max_count=3)),
    ])
    r = upload(rgw, proxy, how, bucket, key, src[0], AWS_MAX_ATTEMPTS=12,
               S3FLASH_RETRY_BASE_MS=5)
    assert r.rc == 0, r
    fired = proxy.stats()["faults_total"]
    assert 8 <= fired <= 11
    assert count(proxy, "PUT", key, "partNumber=") == 4 + fired
    slow = [ln for ln in r.retries() if "SlowDown" in ln]
    assert len(slow) == fired, r
    print(f"SlowDown storm: {fired} SlowDowns, {4 + fired} UploadPart requests")
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("how", ["buffer", "file", "writer"])
def test_upload_500s(rgw, proxy, s3, bucket, src, how):
    """500 InternalError on CreateMultipartUpload, on two UploadParts and on
    CompleteMultipartUpload: each is retried and the object is exact."""
    key = f"up-500/{how}"
    path = re.escape(key) + "$"
    proxy.set_faults([
        s3_error("InternalError", 500, {"method": "POST", "path": path, "query": "uploads",
                                        "nth": 1}),
        s3_error("InternalError", 500, dict(part_puts(key), nth=1)),
        s3_error("InternalError", 500, dict(part_puts(key), nth=2)),
        s3_error("InternalError", 500, {"method": "POST", "path": path, "query": "uploadId=",
                                        "nth": 1}),
    ])
    r = upload(rgw, proxy, how, bucket, key, src[0])
    assert r.rc == 0, r
    assert proxy.stats()["faults_total"] == 4
    assert count(proxy, "PUT", key, "partNumber=") == 6
    assert count(proxy, "POST", key, "uploads") == 2
    assert count(proxy, "POST", key, "uploadId=") == 2
    assert len([ln for ln in r.retries() if "InternalError" in ln]) == 4, r
    assert_object(s3, bucket, key, src[1])


# ---- uploads: retries exhausted (the writer included) ---------------------------------------

FATAL = {
    "500": (lambda key: s3_error("InternalError", 500,
                                 dict(part_puts(key), query="partNumber=2&")),
            "S3F_ERR_SERVER"),
    "reset": (lambda key: {"match": dict(part_puts(key), query="partNumber=2&"),
                           "action": "reset_request_body_at", "at": "random", "seed": 9},
              "S3F_ERR_NETWORK"),
    "stall": (lambda key: {"match": dict(part_puts(key), query="partNumber=2&"),
                           "action": "stall", "direction": "request", "at": 100000,
                           "seconds": 30}, "S3F_ERR_TIMEOUT"),
}


@pytest.mark.parametrize("how,fault", [(h, f) for h in UPLOAD_PATHS for f in ("500", "reset")]
                         + [("writer", "stall")])
def test_upload_retries_exhausted(rgw, proxy, s3, bucket, src, how, fault):
    """Part 2 fails on every attempt: the transfer fails with that error (for the writer:
    a write or close reports it, and close always does), and nothing is left: no object,
    no multipart upload. The AbortMultipartUpload gets 503 twice and is retried until the
    server takes it."""
    key = f"up-fatal/{how}-{fault}"
    rule, status = FATAL[fault]
    proxy.set_faults([rule(key),
                      s3_error("ServiceUnavailable", 503,
                               {"method": "DELETE", "path": re.escape(key) + "$",
                                "max_count": 2})])
    r = upload(rgw, proxy, how, bucket, key, src[0], FAULT_STALL_MS=1000)
    assert r.rc == 1, r
    assert r.status == status, r
    assert "UploadPart" in r.kv["error"] and "attempts=3" in r.out, r
    if how == "writer" and "write_status" in r.kv:
        assert r.kv["write_status"] == status
    # 3 engine attempts; curl may re-send a request itself when its reused connection
    # died before any response byte
    assert 3 <= count(proxy, "PUT", key, "partNumber=2&") <= 6
    assert count(proxy, "DELETE", key) == 3  # the abort: 503, 503, then done
    if fault == "stall":  # three times the engine's stall clock, never curl's backstop
        assert sum("(stall timeout)" in ln for ln in r.retries()) == 2, r
        assert "(stall timeout)" in r.kv["error"], r
    assert r.elapsed < 30, r
    assert_nothing(s3, bucket, key)


# ---- uploads: the server killed mid-transfer -------------------------------------------------

def run_through_outage(proxy, argv, env, on_the_wire, what, down_seconds=None, timeout=60):
    """Run the driver; once on_the_wire() holds, the server dies: every connection reset,
    new ones refused, for down_seconds (None: until the driver has exited, then it is back).
    Returns (the Run, when it went down, seconds from then to the driver's exit)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_for(on_the_wire, what=what)
        time.sleep(0.3)
        t_down = time.monotonic()
        proxy.down("refuse", seconds=down_seconds)
        out, err = p.communicate(timeout=timeout)
        t_exit = time.monotonic() - t_down
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if down_seconds is None:
            proxy.up()
    r = Run(subprocess.CompletedProcess(p.args, p.returncode, out, err), 0)
    print(r)
    return r, t_down, t_exit


@pytest.mark.parametrize("how", UPLOAD_PATHS)
def test_upload_server_killed(rgw, proxy, s3, bucket, src, how):
    """The server dies while parts are on the wire (every connection reset, new ones
    refused) and comes back 3 s later. The transfer fails with a clear connection error
    within a bounded time and creates no object.

    The engine does not make the caller wait for the server to come back: each request (the
    parts, then AbortMultipartUpload) gets its max_attempts (3) with backoff, and the error
    is returned. The abort that failed goes to the client's janitor, which retries it in the
    background (1 s, 2 s, 4 s... ) while the client lives: once the server is back, the
    multipart upload is aborted and nothing is left, with no cleanup by the caller."""
    key = f"up-killed/{how}"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle",
                       "direction": "request", "bytes_per_second": 3_000_000}])
    r, t_down, _ = run_through_outage(
        proxy, driver_argv(UPLOAD_OP[how], bucket, key, src[0]),
        driver_env(rgw, proxy.endpoint, FAULT_WAIT_ABORTS_S=30),
        lambda: count(proxy, "PUT", key, "partNumber=") >= 2, "parts on the wire",
        down_seconds=3)
    assert r.rc == 1, r
    assert r.status in ("S3F_ERR_CONNECT", "S3F_ERR_NETWORK"), r
    assert "UploadPart" in r.kv["error"], r
    # the caller got its error while the server was still down
    assert float(r.kv["elapsed"]) < 10, r
    assert proxy.stats()["killed"] >= 1
    m = re.search(r"AbortMultipartUpload (\S+) failed; retrying it in the background", r.err)
    assert m, r
    assert r.kv["pending_aborts_at_end"] == "1", r
    assert r.kv["pending_aborts_left"] == "0", r
    assert re.search(rf"multipart upload {re.escape(m.group(1))} aborted after", r.err), r
    assert time.monotonic() - t_down >= 3  # it could only succeed once the server was back
    assert_nothing(s3, bucket, key)


def test_upload_server_gone_at_client_free(rgw, proxy, s3, bucket, src):
    """The server dies mid-upload and is still down when the client is freed: the client
    tries the pending abort once more, gives up within a bounded time and logs a WARN that
    names the upload id; once the server is back, exactly that upload is listed (for
    ListMultipartUploads-based cleanup) and no object exists."""
    key = "up-gone/buffer"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle",
                       "direction": "request", "bytes_per_second": 3_000_000}])
    r, _, t_exit = run_through_outage(
        proxy, driver_argv(UPLOAD_OP["buffer"], bucket, key, src[0]),
        driver_env(rgw, proxy.endpoint),
        lambda: count(proxy, "PUT", key, "partNumber=") >= 2, "parts on the wire")
    assert r.rc == 1, r
    assert t_exit < 20, r
    m = re.search(r"AbortMultipartUpload (\S+) failed \(S3F_ERR_(CONNECT|NETWORK)", r.err)
    assert m, r
    from botocore.exceptions import ClientError
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key=key)
    assert uploads(s3, bucket, key) == [(key, m.group(1))]
    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=m.group(1))
    assert_nothing(s3, bucket, key)


@pytest.mark.parametrize("how", ["buffer", "writer"])
def test_upload_server_restarts_within_retries(rgw, proxy, s3, bucket, src, how):
    """The server dies mid-upload and is back 0.5 s later: with 10 attempts per request
    (backoff up to 20 ms × 2^9) the parts on the wire are sent again once it is back, and
    the object is complete and exact."""
    key = f"up-restart/{how}"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle",
                       "direction": "request", "bytes_per_second": 5_000_000}])
    r, _, _ = run_through_outage(
        proxy, driver_argv(UPLOAD_OP[how], bucket, key, src[0]),
        driver_env(rgw, proxy.endpoint, AWS_MAX_ATTEMPTS=10),
        lambda: count(proxy, "PUT", key, "partNumber=") >= 2, "parts on the wire",
        down_seconds=0.5)
    assert r.rc == 0, r
    assert proxy.stats()["killed"] >= 1
    assert r.retries(), r
    assert_object(s3, bucket, key, src[1])


# ---- downloads: resets, stalls, truncation, 503/500 -------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("how", DOWNLOAD_PATHS)
def test_download_reset_mid_body(rgw, proxy, bucket, dl_object, tmp_path, how, seed):
    """Two GET bodies are cut by a RST at random offsets: the rest is asked again (Range,
    If-Match) and the bytes are exact."""
    key, data = dl_object
    proxy.set_faults([
        {"match": dict(gets(key), nth=1), "action": "reset_response_body_at", "at": "random",
         "seed": seed},
        {"match": dict(gets(key), nth=3), "action": "reset_response_body_at", "at": "random",
         "seed": seed + 100},
    ])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, how, bucket, key, dst)
    check_download(r, how, dst, data)
    st = proxy.stats()
    assert st["faults_total"] == 2
    assert len(r.retries()) == 2, r
    assert count(proxy, "GET", key) >= 4


@pytest.mark.parametrize("how", DOWNLOAD_PATHS)
def test_download_stall(rgw, proxy, bucket, dl_object, tmp_path, how):
    """A GET body stops for 20 s at a random offset: the 1 s stall timeout fires and the
    rest is asked again; the download ends long before the stall would have."""
    key, data = dl_object
    proxy.set_faults([{"match": dict(gets(key), nth=2), "action": "stall", "at": "random",
                       "seed": 6, "seconds": 20}])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, how, bucket, key, dst, FAULT_STALL_MS=1000)
    check_download(r, how, dst, data)
    assert proxy.stats()["faults_total"] == 1
    assert any("S3F_ERR_TIMEOUT" in ln for ln in r.retries()), r
    d = stall_detection_s(proxy, r, key)
    print(f"stall detected after {d:.2f} s (stall timeout {STALL_TIMEOUT_S} s)")
    assert_stall_detected(r, d)


@pytest.mark.parametrize("how", DOWNLOAD_PATHS)
def test_download_truncated(rgw, proxy, bucket, dl_object, tmp_path, how):
    """Two ranged GETs end early (the full Content-Length announced, then FIN): retried,
    exact."""
    key, data = dl_object
    proxy.set_faults([
        {"match": dict(gets(key), nth=2), "action": "truncate_response", "at": "random",
         "seed": 7},
        {"match": dict(gets(key), nth=4), "action": "truncate_response", "at": "random",
         "seed": 8},
    ])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, how, bucket, key, dst)
    check_download(r, how, dst, data)
    assert proxy.stats()["faults_total"] == 2
    assert len(r.retries()) == 2, r


@pytest.mark.parametrize("how", DOWNLOAD_PATHS)
def test_download_slowdown_and_500(rgw, proxy, bucket, dl_object, tmp_path, how):
    """The first 3 GETs get 503 SlowDown, the 5th a 500: all retried, exact."""
    key, data = dl_object
    proxy.set_faults([s3_error("SlowDown", 503, dict(gets(key), max_count=3)),
                      s3_error("InternalError", 500, dict(gets(key), nth=5))])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, how, bucket, key, dst, AWS_MAX_ATTEMPTS=5)
    check_download(r, how, dst, data)
    assert proxy.stats()["faults_total"] == 4
    assert len(r.retries()) == 4, r


@pytest.mark.parametrize("how", DOWNLOAD_PATHS)
def test_download_server_killed(rgw, proxy, bucket, dl_object, tmp_path, how):
    """The server dies mid-download (connections reset, new ones refused): a clear
    connection error within a bounded time, no file (and no temporary file) left; once it is
    back the same download is exact."""
    key, data = dl_object
    proxy.set_faults([{"match": gets(key), "action": "throttle", "direction": "response",
                       "bytes_per_second": 3_000_000}])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    extra = (SIZE,) if how == "buffer" else ()
    r, _, t_fail = run_through_outage(
        proxy, driver_argv(DOWNLOAD_OP[how], bucket, key, dst, *extra),
        driver_env(rgw, proxy.endpoint),
        lambda: count(proxy, "GET", key) >= 2, "GETs on the wire", timeout=30)
    assert r.rc == 1, r
    assert r.status in ("S3F_ERR_CONNECT", "S3F_ERR_NETWORK"), r
    assert "GetObject" in r.kv["error"] or "HeadObject" in r.kv["error"], r
    assert t_fail < 10, r
    assert list(dst.parent.iterdir()) == []  # no file, no temporary file
    proxy.reset()
    r = download(rgw, proxy, how, bucket, key, dst)
    check_download(r, how, dst, data)


# ---- one corrupted byte: moto keeps the checksum that catches it -------------------------------

@pytest.fixture(scope="module")
def moto_proxy(moto_env):  # noqa: F811
    u = urlparse(moto_env["S3FLASH_TEST_ENDPOINT"])
    p = start_faultproxy(u.hostname, u.port)
    yield p, moto_env
    p.stop()


@pytest.fixture(scope="module")
def moto_object(moto_proxy, tmp_path_factory):
    """A 4-part object uploaded by the engine (CRC32C per part, FULL_OBJECT), which moto
    keeps and returns on HEAD with x-amz-checksum-mode."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config
    proxy, env = moto_proxy
    s3 = boto3.client("s3", endpoint_url=env["S3FLASH_TEST_ENDPOINT"],
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket="engine-faults")
    data = os.urandom(SIZE)
    srcp = tmp_path_factory.mktemp("moto") / "src"
    srcp.write_bytes(data)
    r = subprocess.run(driver_argv("upload_buffer", "engine-faults", "ck/obj", srcp),
                       env=dict(moto_drv_env(env, proxy)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    head = s3.head_object(Bucket="engine-faults", Key="ck/obj", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32C"), head
    return "ck/obj", data


def moto_drv_env(env, proxy, **extra):
    d = {k: v for k, v in os.environ.items()
         if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    d.update({"S3FLASH_TEST_ENDPOINT": proxy.endpoint, "S3FLASH_TEST_ACCESS_KEY": "testing",
              "S3FLASH_TEST_SECRET_KEY": "testing", "S3FLASH_TEST_REGION": "us-east-1",
              "AWS_EC2_METADATA_DISABLED": "true", "S3FLASH_RETRY_BASE_MS": "20",
              "S3FLASH_LOG": "info", "FAULT_INFLIGHT": "4"})
    d.update({k: str(v) for k, v in extra.items()})
    return d


@pytest.mark.parametrize("how", ["buffer", "file"])
def test_download_corrupted_byte_moto(moto_proxy, moto_object, tmp_path, how):
    """One byte of one ranged GET is flipped on the wire: the whole-object CRC32C (HEAD
    beside the parts) does not match, the download fails with S3F_ERR_CHECKSUM and hands
    over no data (the driver writes the buffer only on success; a file download leaves no
    file). The same download without the fault is exact."""
    proxy, env = moto_proxy
    key, data = moto_object
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    extra = (SIZE,) if how == "buffer" else ()
    argv = driver_argv(DOWNLOAD_OP[how], "engine-faults", key, dst, *extra)
    proxy.reset()
    p = subprocess.run(argv, env=moto_drv_env(env, proxy), capture_output=True, text=True,
                       timeout=120)
    r = Run(p, 0)
    print(r)
    check_download(r, how, dst, data)
    dst.unlink()
    proxy.reset()
    proxy.set_faults([{"match": dict(gets(key), nth=2), "action": "corrupt_response_byte",
                       "at": "random", "seed": 11, "xor": 0x40}])
    p = subprocess.run(argv, env=moto_drv_env(env, proxy), capture_output=True, text=True,
                       timeout=120)
    r = Run(p, 0)
    print(r)
    assert proxy.stats()["faults_total"] == 1
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_CHECKSUM", r
    assert "CRC32C" in r.kv["error"], r
    assert list(dst.parent.iterdir()) == []

