"""Concurrency that fills slow connections: every connection of the link is throttled (the
fault proxy's `throttle`, between the engine and Ceph RGW), as each connection to S3 is, and
a sequential read must keep enough ranged GETs on the wire at once to carry N connections'
worth, not a few.

The proxy logs when each GET started and when its response was relayed in full ("time",
"done"), so the tests assert on how many requests were on the wire at once, averaged over
the transfer (the sum of the GETs' durations over the transfer's span), and on the bytes;
the throughput is checked only loosely beside it.
"""
import os

import pytest

from test_engine_faults import (check_download, download, drive, gets,  # noqa: F401
                                put_multipart)

MIB = 1 << 20
SIZE = 120 * MIB + 4321
# Two links. The number in flight is the engine's own (FAULT_INFLIGHT=0), not the tests'
# usual 4; each I/O thread keeps one connection for control requests.
LINKS = {
    # 8 connections on 2 I/O threads (6 for data) at 5 MB/s each, the default memory limit:
    # one 5 MiB part per connection
    "6x5MBps": dict(env=dict(FAULT_CONNECTIONS=8, FAULT_IO_THREADS=2, FAULT_INFLIGHT=0),
                    connections=6, rate=5_000_000, busy=0.85),
    # 16 connections (14 for data) at 2 MB/s, and a memory limit of 32 MiB (read-ahead
    # at most 16 MiB): 14 parts do not fit, so 14 segments of 1 MiB
    "14x2MBps-32MiB": dict(env=dict(FAULT_CONNECTIONS=16, FAULT_IO_THREADS=2, FAULT_INFLIGHT=0,
                                    FAULT_MEMORY_BYTES=32 * MIB),
                           connections=14, rate=2_000_000, busy=0.75),
}


@pytest.fixture(scope="module")
def big_object(s3, bucket):
    data = os.urandom(SIZE)
    put_multipart(s3, bucket, "fill/obj", data)
    return "fill/obj", data


def on_the_wire(proxy, key):
    """(average number of GETs of `key` on the wire at once, the span in seconds), from
    the proxy's log: the GETs' durations summed over the time from the first start to the
    last end."""
    spans = [(e["time"], e["done"]) for e in proxy.stats()["log"]
             if e["method"] == "GET" and e["path"].endswith("/" + key) and e.get("done")]
    assert spans
    t0 = min(s for s, _ in spans)
    t1 = max(d for _, d in spans)
    return sum(d - s for s, d in spans) / (t1 - t0), t1 - t0


def throttle(key, rate):
    """The fault proxy's rule: every GET of `key` answered at `rate` bytes/s."""
    return {"match": gets(key), "action": "throttle", "direction": "response",
            "bytes_per_second": rate}


def throttled_download(rgw, proxy, bucket, big_object, tmp_path, mode, link):
    """The big object downloaded (xfer_fault_test's `mode`) over LINKS[link] and checked;
    returns on_the_wire's (busy, span), printed beside the throughput."""
    key, data = big_object
    ln = LINKS[link]
    proxy.set_faults([throttle(key, ln["rate"])])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, mode, bucket, key, dst, **ln["env"])
    check_download(r, mode, dst, data)
    busy, span = on_the_wire(proxy, key)
    n, rate = ln["connections"], ln["rate"]
    print(f"{mode} {link}: {busy:.2f} GETs on the wire on average over {span:.2f} s, "
          f"{SIZE / span / 1e6:.1f} MB/s of {n * rate / 1e6:.0f}")
    return busy, span


@pytest.mark.parametrize("link", list(LINKS))
def test_reader_sequential_fills_the_link(rgw, proxy, bucket, big_object, tmp_path, link):
    """s3f_reader read front to back in 64 KiB reads (as torch.load reads a checkpoint):
    the read-ahead keeps about one segment per data connection in flight, topped up as each
    completes, with segments small enough that that many fit in its memory. Before, it
    added a batch of segments only once half of its window was read, then waited for the
    whole batch, and its window (a quarter of the memory limit, at most 64 MiB) held only
    a few parts: 4.7 of 6 busy on average on the first link, about 2 of 14 on the second."""
    ln = LINKS[link]
    n, rate = ln["connections"], ln["rate"]
    busy, span = throttled_download(rgw, proxy, bucket, big_object, tmp_path, "reader", link)
    assert busy >= ln["busy"] * n, (busy, span)
    assert SIZE / span >= 0.6 * n * rate, (busy, span)



def test_download_file_fills_the_link(rgw, proxy, bucket, big_object, tmp_path):
    """s3f_download_file: the other parts start as soon as the first response's head gives
    the size and the ETag, not once the whole first part is in (at 5 MB/s a part takes a
    second, in which the other connections stood idle), and then go on every data
    connection at once."""
    key = big_object[0]
    ln = LINKS["6x5MBps"]
    n, rate = ln["connections"], ln["rate"]
    busy, span = throttled_download(rgw, proxy, bucket, big_object, tmp_path, "file", "6x5MBps")
    log = [e for e in proxy.stats()["log"]
           if e["method"] == "GET" and e["path"].endswith("/" + key)]
    first, others = log[0], log[1:]
    assert first["range"] == f"bytes=0-{5 * MIB - 1}", first
    started_early = [e for e in others if e["time"] < first["done"]]
    # before: none (they waited for the whole first part); now those the first one's I/O
    # thread and the other have connections for (4 of 5 here)
    assert len(started_early) >= n // 2, (first, others)
    # 25 requests on 6 connections: the last part runs alone, whatever the engine does
    assert busy >= 0.75 * n, (busy, span)
    assert SIZE / span >= 0.6 * n * rate, (busy, span)


def test_cp_to_stdout_fills_the_link(cli, proxy, bucket, big_object):
    """`s3flash cp s3://b/k -` (s3f_download_stream): ranged GETs on several connections at
    once, the bytes written to stdout in order. Before, one GetObject: one connection."""
    key, data = big_object
    rate, n = 5_000_000, 6
    proxy.set_faults([throttle(key, rate)])
    r = cli.run("--endpoint-url", proxy.endpoint, "--force-path-style", "cp", "--concurrency",
                n, "--part-size", "5M", f"s3://{bucket}/{key}", "-", endpoint=False, timeout=300)
    assert r.rc == 0, r
    assert r.out == data
    busy, span = on_the_wire(proxy, key)
    print(f"cp to stdout: {busy:.2f} GETs on the wire on average over {span:.2f} s, "
          f"{SIZE / span / 1e6:.1f} MB/s of {n * rate / 1e6:.0f}")
    assert busy >= 0.8 * n, (busy, span)
    assert SIZE / span >= 0.6 * n * rate, (busy, span)
