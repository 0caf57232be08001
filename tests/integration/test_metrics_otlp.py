"""OTLP/HTTP push (--otlp-endpoint, docs/METRICS.md) to a receiver in the test: a loopback
http.server that takes POST /v1/metrics and decodes the protobuf with the opentelemetry-proto
package. A cp through the fault proxy's 503 SlowDowns pushes the numbers the Prometheus
endpoint serves (test_metrics.py): data bytes equal to the object's size, requests equal to
what the proxy counted, the 503s as throttles; a mount pushes its FUSE operations every
--otlp-export-interval; a receiver that is down or failing does not fail the cp, and is
logged."""
import http.server
import os
import re
import socket
import subprocess
import threading
import time

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest, ExportMetricsServiceResponse)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from faults import faultproxy_factory, s3_error  # noqa: F401  (fixture)
from metricsutil import proxy, put_blob, total  # noqa: F401  (proxy: fixture)
from mountutil import mount_supported

SIZE = 20 * 1024 * 1024 + 12345   # three ranged GETs of 8 MiB parts
KEY = "otlp/blob"
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: every POST /v1/metrics decoded and kept
    (answered `status`, 200 with an empty ExportMetricsServiceResponse by default)."""

    def __init__(self, status=200):
        self.requests = []     # (path, headers, ExportMetricsServiceRequest)
        self.cond = threading.Condition()
        self.status = status
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportMetricsServiceRequest()
                req.ParseFromString(body)
                with outer.cond:
                    outer.requests.append((self.path, dict(self.headers), req))
                    outer.cond.notify_all()
                out = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, pred, timeout=60):
        """The first request (newest first) for which pred(samples) holds, waiting for it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for path, headers, req in reversed(self.requests):
                    if pred(flatten(req)):
                        return path, headers, req
                left = deadline - time.monotonic()
                assert left > 0, f"no push matched in {timeout} s ({len(self.requests)} pushes)"
                self.cond.wait(left)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


def flatten(req):
    """[(name, {attribute: value}, float)] as metricsutil.parse gives the Prometheus text:
    histograms as NAME_count and NAME_sum (and NAME_bucket per bucket, with le)."""
    out = []
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind in ("sum", "gauge"):
                    for dp in getattr(m, kind).data_points:
                        out.append((m.name, attrs(dp.attributes), dp.as_double))
                elif kind == "histogram":
                    for dp in m.histogram.data_points:
                        a = attrs(dp.attributes)
                        out.append((m.name + "_count", a, float(dp.count)))
                        out.append((m.name + "_sum", a, dp.sum))
    return out


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def blob(s3, bucket):
    return put_blob(s3, bucket, KEY, SIZE)


def run_cli(cli, proxy, *args):
    argv = [cli.path, "--endpoint-url", proxy.endpoint, "--force-path-style", *map(str, args)]
    return subprocess.run(argv, env=cli.env(S3FLASH_RETRY_BASE_MS="20"), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=300)


def test_cp_pushes_through_throttling_proxy(cli, proxy, bucket, blob, tmp_path, receiver):
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET", "path": f"/{KEY}$",
                                                 "max_count": 2})])
    out = tmp_path / "blob"
    before_ns = time.time_ns()
    r = run_cli(cli, proxy, "cp", f"s3://{bucket}/{KEY}", out, "--otlp-endpoint",
                receiver.endpoint)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == blob
    st = proxy.stats()
    assert st["faults_total"] == 2, st["faults"]
    # the push at exit has the final values
    path, headers, req = receiver.wait(
        lambda m: total(m, "s3flash_bytes_total", direction="down") == SIZE)
    assert path == "/v1/metrics"
    assert headers["Content-Type"] == "application/x-protobuf"
    m = flatten(req)
    assert total(m, "s3flash_requests_total") == st["requests_total"], (st["requests"], m)
    assert total(m, "s3flash_requests_total", op="GetObject", status="5xx") == 2
    assert total(m, "s3flash_requests_total", op="GetObject", status="2xx") == 3
    assert total(m, "s3flash_throttles_total") == 2
    assert total(m, "s3flash_retries_total", reason="throttle") == 2
    assert total(m, "s3flash_bytes_total", direction="up") == 0
    assert total(m, "s3flash_request_duration_seconds_count") == st["requests_total"]
    assert total(m, "s3flash_parts_in_flight") == 0
    # the resource and the scope
    (rm,) = req.resource_metrics
    res = attrs(rm.resource.attributes)
    assert res == {"service.name": "s3flash", "s3flash.command": "cp"}, res
    (sm,) = rm.scope_metrics
    assert sm.scope.name == "s3flash"
    # the kinds: counters monotonic cumulative sums, gauges, cumulative histograms with
    # the documented bounds, their buckets adding up to the count; one Metric per name
    by = {x.name: x for x in sm.metrics}
    assert len(by) == len(sm.metrics)
    s = by["s3flash_requests_total"]
    assert s.WhichOneof("data") == "sum"
    assert s.sum.is_monotonic and s.sum.aggregation_temporality == CUMULATIVE
    assert by["s3flash_connections"].WhichOneof("data") == "gauge"
    h = by["s3flash_request_duration_seconds"]
    assert h.unit == "s" and h.histogram.aggregation_temporality == CUMULATIVE
    assert list(h.histogram.data_points[0].explicit_bounds) == [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
    for dp in h.histogram.data_points:
        assert len(dp.bucket_counts) == 17 and sum(dp.bucket_counts) == dp.count
    get = [dp for dp in h.histogram.data_points if attrs(dp.attributes)["op"] == "GetObject"]
    assert get[0].count == 5
    # times: from the exporter's start to now (Unix nanoseconds)
    dp = s.sum.data_points[0]
    assert before_ns <= dp.start_time_unix_nano <= dp.time_unix_nano <= time.time_ns()


def free_port():
    """A loopback port nothing listens on (bound then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_receiver_down_does_not_fail_cp(cli, proxy, bucket, blob, tmp_path):
    port = free_port()
    r = run_cli(cli, proxy, "cp", f"s3://{bucket}/{KEY}", tmp_path / "b", "--otlp-endpoint",
                f"http://127.0.0.1:{port}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b").read_bytes() == blob
    err = r.stderr.decode()
    assert re.search(rf"OTLP push to http://127.0.0.1:{port}/v1/metrics failed: cannot "
                     r"connect: Connection refused", err), err


def test_receiver_error_is_logged(cli, proxy, bucket, blob, tmp_path):
    rec = Receiver(status=503)
    try:
        r = run_cli(cli, proxy, "cp", f"s3://{bucket}/{KEY}", tmp_path / "b",
                    "--otlp-endpoint", rec.endpoint + "/v1/metrics")
        assert r.returncode == 0, r.stderr
        rec.wait(lambda m: total(m, "s3flash_bytes_total", direction="down") == SIZE)
    finally:
        rec.close()
    err = r.stderr.decode()
    assert f"OTLP push to {rec.endpoint}/v1/metrics failed: the collector answered " \
           "'HTTP/1.0 503 Service Unavailable'" in err, err


@pytest.mark.parametrize("args,why", [
    (["--otlp-endpoint", "https://127.0.0.1:4318"], "https is not supported"),
    (["--otlp-endpoint", "127.0.0.1:4318"], "not http://HOST[:PORT][/PATH]"),
    (["--otlp-export-interval", "5"], "--otlp-export-interval needs --otlp-endpoint"),
    (["--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-export-interval", "0"],
     "--otlp-export-interval takes whole seconds"),
])
def test_bad_options_refused(cli, bucket, tmp_path, args, why):
    r = cli.run("--force-path-style", "cp", f"s3://{bucket}/{KEY}", tmp_path / "x", *args)
    assert r.rc != 0, r
    assert why in r.err, r.err
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(mount_supported() is not None, reason=str(mount_supported()))
def test_mount_pushes_fuse_operations(mounts, s3, bucket, receiver):
    s3.put_object(Bucket=bucket, Key="otlpmnt/dir/small", Body=b"hello")
    m = mounts("otlpmnt/", "--otlp-endpoint", receiver.endpoint, "--otlp-export-interval", "1")
    # a first periodic push, then reads, then a push that has them
    _, _, first = receiver.wait(lambda s: True)
    opens = total(flatten(first), "s3flash_fuse_operations_total", op="open", errno="0")
    n = 4
    for _ in range(n):
        with open(os.path.join(m.dir, "dir", "small"), "rb") as f:
            assert f.read() == b"hello"
    _, _, req = receiver.wait(lambda s: total(
        s, "s3flash_fuse_operations_total", op="open", errno="0") >= opens + n)
    s = flatten(req)
    assert total(s, "s3flash_fuse_operations_total", op="open", errno="0") == opens + n
    assert total(s, "s3flash_fuse_operation_seconds_count", op="open") == opens + n
    assert total(s, "s3flash_mount_inodes") >= 3
    assert total(s, "s3flash_bytes_total", client="read", direction="down") >= 5
    assert total(s, "s3flash_bytes_total", client="write") == 0
    res = attrs(req.resource_metrics[0].resource.attributes)
    assert res == {"service.name": "s3flash", "aws.s3.bucket": bucket,
                   "s3flash.prefix": "otlpmnt/"}, res
