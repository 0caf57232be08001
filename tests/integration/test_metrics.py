"""The metrics (docs/METRICS.md) as an operator scrapes them: `s3flash cp` through the fault
proxy with --metrics-listen, its last values scraped during --metrics-linger: the data bytes
equal the object's size, the requests equal what the proxy counted, its 503 SlowDowns are
throttles and throttle retries; a mount's FUSE operations after reads; --log-metrics lines;
the address refused unless loopback."""
import os
import signal
import subprocess
from urllib.parse import urlparse

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401  (fixture)
from metricsutil import URL_RE, Prometheus, StderrLines, parse, proxy, put_blob, scrape, total  # noqa: F401
from mountutil import mount_supported

SIZE = 20 * 1024 * 1024 + 12345   # three ranged GETs of 8 MiB parts


@pytest.fixture(scope="module")
def blob(s3, bucket):
    return put_blob(s3, bucket, "metrics/blob", SIZE)


def start_cli(cli, proxy, *args):
    argv = [cli.path, "--endpoint-url", proxy.endpoint, "--force-path-style", *map(str, args)]
    return subprocess.Popen(argv, env=cli.env(S3FLASH_RETRY_BASE_MS="20"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


THROTTLE_TWICE = [s3_error("SlowDown", 503, {"method": "GET", "path": "/metrics/blob$",
                                             "max_count": 2})]


def cp_with_faults(cli, proxy, bucket, out, rules, linger=120):
    """`cp` of the blob through the proxy with these fault rules, serving its metrics on a
    free port and for `linger` s after; (process, stderr lines)."""
    proxy.set_faults(rules)
    p = start_cli(cli, proxy, "cp", f"s3://{bucket}/metrics/blob", out,
                  "--metrics-listen", "127.0.0.1:0", "--metrics-linger", str(linger))
    return p, StderrLines(p)


def finish(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise


def cp_scraped(cli, proxy, bucket, blob, tmp_path, rules):
    """`cp` of the blob through these fault rules, its output checked, and its metrics scraped
    once it is done: (the parsed metrics, the proxy's stats)."""
    out = tmp_path / "blob"
    p, err = cp_with_faults(cli, proxy, bucket, out, rules)
    try:
        url = err.wait_for(URL_RE).group(1).decode()
        err.wait_for(rb"the command is done")
        assert out.read_bytes() == blob
        m = parse(scrape(url))
    finally:
        finish(p)
    return m, proxy.stats()


def test_cp_through_throttling_proxy(cli, proxy, bucket, blob, tmp_path):
    m, st = cp_scraped(cli, proxy, bucket, blob, tmp_path, THROTTLE_TWICE)
    assert st["faults_total"] == 2, st["faults"]
    # bytes: the object's, once (the 503s' error documents are not data)
    assert total(m, "s3flash_bytes_total", direction="down") == SIZE
    assert total(m, "s3flash_bytes_total", direction="up") == 0
    # every request the proxy saw, by the same count; the 503s as 5xx, throttles, retries
    assert total(m, "s3flash_requests_total") == st["requests_total"], (st["requests"], m)
    assert total(m, "s3flash_requests_total", op="GetObject", status="5xx") == 2
    assert total(m, "s3flash_requests_total", op="GetObject", status="2xx") == 3
    assert total(m, "s3flash_throttles_total") == 2
    assert total(m, "s3flash_retries_total", reason="throttle") == 2
    assert total(m, "s3flash_retries_total") == 2
    # one latency observation per request; first bytes before the ends
    assert total(m, "s3flash_request_duration_seconds_count") == st["requests_total"]
    assert total(m, "s3flash_request_first_byte_seconds_count") == st["requests_total"]
    assert (total(m, "s3flash_request_first_byte_seconds_sum") <=
            total(m, "s3flash_request_duration_seconds_sum"))
    # histogram buckets are cumulative and end at the count
    b = [(float(lab["le"]), v) for n, lab, v in m
         if n == "s3flash_request_duration_seconds_bucket" and lab["op"] == "GetObject"]
    assert [v for _, v in b] == sorted(v for _, v in b)
    assert b[-1] == (float("inf"), 5)
    assert total(m, "s3flash_connections_opened_total") >= 1
    assert total(m, "s3flash_parts_in_flight") == 0
    assert total(m, "s3flash_pool_in_use_bytes") == 0


def test_cp_body_cut_counts_each_byte_once(cli, proxy, bucket, blob, tmp_path):
    # the first GET's body is reset after 1 MiB: those bytes were delivered, the retry asks
    # for the rest; the data counted is the object's size, once
    m, st = cp_scraped(cli, proxy, bucket, blob, tmp_path, [
        {"match": {"method": "GET", "path": "/metrics/blob$", "nth": 1},
         "action": "reset_response_body_at", "at": 1 << 20}])
    assert st["faults_total"] == 1, st["faults"]
    assert total(m, "s3flash_bytes_total", direction="down") == SIZE
    assert total(m, "s3flash_requests_total", op="GetObject", status="network") == 1
    assert total(m, "s3flash_requests_total") == st["requests_total"]
    assert total(m, "s3flash_retries_total", reason="network") == 1
    assert total(m, "s3flash_throttles_total") == 0


def test_log_metrics_lines(cli, proxy, bucket, blob, tmp_path):
    r = cli.run("--endpoint-url", proxy.endpoint, "--force-path-style", "cp",
                f"s3://{bucket}/metrics/blob", tmp_path / "b", "--log-metrics", endpoint=False)
    assert r.rc == 0, r
    # the last line, written at the end: the changed series, as NAME{LABELS}=VALUE
    lines = [ln for ln in r.err_lines if "metrics: " in ln]
    assert lines, r.err
    text = " ".join(lines)
    assert 's3flash_bytes_total{direction="down"}=%d' % SIZE in text, text
    assert 's3flash_requests_total{op="GetObject",status="2xx"}=3' in text, text
    assert "s3flash_throttles_total" not in text   # unchanged (0): not written


@pytest.mark.parametrize("addr,why", [
    ("0.0.0.0:0", "not a loopback address"),
    ("localhost:9100", "not a numeric"),
    ("127.0.0.1:99999", "port"),
])
def test_listen_address_refused(cli, bucket, blob, tmp_path, addr, why):
    r = cli.run("--force-path-style", "cp", f"s3://{bucket}/metrics/blob", tmp_path / "x",
                "--metrics-listen", addr)
    assert r.rc != 0, r
    assert why in r.err and addr in r.err, r.err
    assert not (tmp_path / "x").exists()


def test_listen_remote_allowed_explicitly(cli, proxy, bucket, blob, tmp_path):
    p = start_cli(cli, proxy, "cp", f"s3://{bucket}/metrics/blob", tmp_path / "b",
                  "--metrics-listen", "0.0.0.0:0", "--metrics-allow-remote",
                  "--metrics-linger", "120")
    err = StderrLines(p)
    try:
        url = err.wait_for(URL_RE).group(1).decode()
        err.wait_for(rb"the command is done")
        port = urlparse(url).port
        m = parse(scrape(f"http://127.0.0.1:{port}/metrics"))
        assert total(m, "s3flash_bytes_total", direction="down") == SIZE
    finally:
        finish(p)


@pytest.mark.skipif(mount_supported() is not None, reason=str(mount_supported()))
def test_mount_fuse_operations(mounts, s3, bucket, blob):
    s3.put_object(Bucket=bucket, Key="mnt/dir/small", Body=b"hello")
    m = mounts("mnt/", "--metrics-listen", "127.0.0.1:0")
    url = URL_RE.search(open(m.log_path, "rb").read()).group(1).decode()
    before = parse(scrape(url))
    n = 4
    for _ in range(n):
        with open(os.path.join(m.dir, "dir", "small"), "rb") as f:
            assert f.read() == b"hello"
    assert not os.path.exists(os.path.join(m.dir, "dir", "nope"))
    after = parse(scrape(url))

    def delta(name, **lab):
        return total(after, name, **lab) - total(before, name, **lab)
    assert delta("s3flash_fuse_operations_total", op="open", errno="0") == n
    # flush is part of close (release comes later, asynchronously); the page cache keeps
    # the bytes of the first read for the others
    assert delta("s3flash_fuse_operations_total", op="flush", errno="0") == n
    assert delta("s3flash_fuse_operations_total", op="read", errno="0") >= 1
    assert delta("s3flash_fuse_operation_seconds_count", op="open") == n
    assert total(after, "s3flash_mount_inodes") >= 3
    assert 0 < total(after, "s3flash_mount_metadata_bytes") <= total(
        after, "s3flash_mount_metadata_budget_bytes")
    # the two clients, told apart: the reads went through the readers' one
    assert total(after, "s3flash_bytes_total", client="read", direction="down") >= 5
    assert total(after, "s3flash_bytes_total", client="write") == 0
    assert total(after, "s3flash_requests_total", client="read", op="GetObject") >= 1


# ---- Debian's prometheus server scraping a running cp and a running mount ---------------

def test_prometheus_scrapes_cp(cli, proxy, bucket, blob, tmp_path):
    out = tmp_path / "blob"
    p, err = cp_with_faults(cli, proxy, bucket, out, THROTTLE_TWICE, linger=300)
    prom = None
    try:
        url = err.wait_for(URL_RE).group(1).decode()
        prom = Prometheus(str(tmp_path), urlparse(url).netloc)
        err.wait_for(rb"the command is done", timeout=120)
        assert out.read_bytes() == blob
        st = proxy.stats()
        assert st["faults_total"] == 2
        # the last scrape after the command: bytes moved, requests as the proxy counted
        # them, the injected 503s as throttles
        prom.wait_value('s3flash_bytes_total{direction="down"}', SIZE)
        prom.wait_value("sum(s3flash_requests_total)", st["requests_total"])
        prom.wait_value("s3flash_throttles_total", 2)
        prom.wait_value('sum(s3flash_requests_total{op="GetObject",status="5xx"})', 2)
        prom.wait_value('s3flash_retries_total{reason="throttle"}', 2)
        prom.wait_value('up{job="s3flash"}', 1)
    finally:
        if prom:
            prom.stop()
        finish(p)


@pytest.mark.skipif(mount_supported() is not None, reason=str(mount_supported()))
def test_prometheus_scrapes_mount(mounts, s3, bucket, blob, tmp_path):
    m = mounts("metrics/", "--metrics-listen", "127.0.0.1:0", name="promnt")
    url = URL_RE.search(open(m.log_path, "rb").read()).group(1).decode()
    prom = Prometheus(str(tmp_path), urlparse(url).netloc)
    try:
        with open(os.path.join(m.dir, "blob"), "rb") as f:
            assert f.read() == blob
        # every byte of the file came down; the readers' windows may fetch a range twice
        # (a window dropped and asked again under load: seen once under TSan, 1 MiB more)
        prom.wait_value('sum(s3flash_bytes_total{client="read",direction="down"})', SIZE,
                        at_least=True)
        prom.wait_value('sum(s3flash_fuse_operations_total{op="open",errno="0"})', 1)
        prom.wait_value('sum(s3flash_fuse_operations_total{op="flush",errno="0"})', 1)
        assert prom.query('sum(s3flash_fuse_operations_total{op="read"})') >= 1
        assert prom.query("s3flash_mount_metadata_bytes <= "
                          "s3flash_mount_metadata_budget_bytes") is not None
    finally:
        prom.stop()
