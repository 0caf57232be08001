"""Concurrency that fills slow connections, against the S3-like sink (bench/s3flash-sink):
each connection paced to 10 MiB/s, every response's first byte 20 ms late (lognormal
latency is the sink's too; a constant one keeps the test simple). A sequential
s3f_reader read and `s3flash cp s3://b/k -` must keep about one request per data connection
on the wire, counted by the sink itself (`--trace`: every 100 ms, the connections with a
request in progress), and return the object's bytes (the sink's synthetic pattern).
The fault-proxy tests (test_link_fill.py) pin the same down per request; these add the
first-byte latency, which the proxy cannot combine with a throttle.
"""
import pytest

from test_engine_faults import drive
from test_sink import Sink

MIB = 1 << 20
SIZE = 96 * MIB
CONNECTIONS = 8        # data connections: 10 on 2 I/O threads, one each kept for control
RATE = 10 * MIB


PERIOD = 1048573


def is_pattern(data):
    """The sink's GET bodies: byte i = ((i % 1048573) * 2654435761 mod 2^32) >> 24."""
    period = bytes(((i * 2654435761) & 0xFFFFFFFF) >> 24 for i in range(PERIOD))
    return len(data) == SIZE and all(
        data[k:k + PERIOD] == period[:len(data[k:k + PERIOD])] for k in range(0, SIZE, PERIOD))


@pytest.fixture
def paced(tmp_path):
    trace = tmp_path / "trace.txt"
    s = Sink(tmp_path, "--threads", "2", "--conn-rate", "10M", "--first-byte-ms", "20",
             "--trace", str(trace))
    s.trace = trace
    yield s
    s.stop()


def busy_on_average(sink):
    """Connections with a request in progress, averaged over the samples that had one until
    85% of the object was sent (the last requests run alone whatever the engine does:
    12 parts on 8 connections)."""
    sink.stop()
    rows = [list(map(int, ln.split())) for ln in sink.trace.read_text().splitlines() if ln]
    busy = [r[2] for r in rows if r[2] > 0 and r[4] <= 0.85 * SIZE]
    assert busy, rows
    return sum(busy) / len(busy), rows


class Endpoint:
    def __init__(self, port):
        self.endpoint = f"http://127.0.0.1:{port}"


def test_reader_fills_paced_connections(rgw, paced, tmp_path):
    dst = tmp_path / "out.bin"
    r = drive(rgw, Endpoint(paced.port), "reader", "bucket", f"k/obj-size-{SIZE}", dst, 65536,
              FAULT_CONNECTIONS=10, FAULT_IO_THREADS=2, FAULT_INFLIGHT=0,
              FAULT_PART_BYTES=8 * MIB)
    assert r.rc == 0, r
    assert is_pattern(dst.read_bytes())
    # the estimate the read-ahead was sized from: what the sink paced, measured by the
    # client (a loaded machine only ever slows a connection, and adds latency)
    bps, lat = float(r.kv["estimate_bps"]), float(r.kv["estimate_latency_ms"])
    print(f"estimate: {bps / MIB:.1f} MiB/s per connection, {lat:.1f} ms to the first byte, "
          f"{r.kv['estimate_samples']} requests")
    assert int(r.kv["estimate_samples"]) >= 4
    assert 0.5 * RATE <= bps <= 1.3 * RATE, bps  # a token bucket lets a burst through
    assert lat >= 20, lat
    busy, rows = busy_on_average(paced)
    print(f"reader: {busy:.2f} of {CONNECTIONS} connections busy on average")
    assert busy >= 0.65 * CONNECTIONS, rows


def test_cp_to_stdout_fills_paced_connections(cli, paced):
    r = cli.run("--endpoint-url", f"http://127.0.0.1:{paced.port}", "--force-path-style", "cp",
                "--concurrency", CONNECTIONS, f"s3://bucket/k/obj-size-{SIZE}", "-", endpoint=False)
    assert r.rc == 0, r
    assert is_pattern(r.out)
    busy, rows = busy_on_average(paced)
    print(f"cp to stdout: {busy:.2f} of {CONNECTIONS} connections busy on average")
    assert busy >= 0.65 * CONNECTIONS, rows
