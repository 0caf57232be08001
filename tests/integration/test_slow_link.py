"""Time-outs that measure the network, not the queue: a slow but steady link, with more
requests ready than connections, must finish without one spurious stall retry.

The link is the fault proxy's `throttle` (a few MB/s per connection) between the engine
(tests/integration/xfer_fault_test.c) and Ceph RGW. The client gets 1 connection, 8
requests in flight and a 2 s stall timeout: each 5 MiB part takes about 1.3 s on the wire, so
the third and fourth parts wait for the connection longer than the stall timeout. Before the I/O
threads admitted requests themselves, they waited inside libcurl with their stall clocks
running, were aborted as stalled the moment they got a connection, and were sent again.
The proxy's request log shows every request: each part must be on the wire exactly once.
"""
import re
from collections import Counter

import pytest

from test_engine_faults import (assert_object, check_download, dl_object, download,  # noqa: F401
                                gets, part_puts, src, upload)

RATE = 4_000_000          # bytes per second per connection: 1.3 s a 5 MiB part
LINK = dict(FAULT_STALL_MS=2000, FAULT_CONNECTIONS=1, FAULT_IO_THREADS=1, FAULT_INFLIGHT=8)
# Not slower, nor a shorter stall timeout: here the proxy's socket buffer takes in a whole
# request body before the proxy forwards it at RATE, so after the last byte is sent nothing
# moves that the client can see until the answer comes (1.3 s). The test at the end keeps
# the body in the client's own send queue instead, as a slow link does.


def per_part(proxy, method, key):
    """Requests per part number, from the proxy's log."""
    n = Counter()
    for e in proxy.stats()["log"]:
        m = re.search(r"partNumber=(\d+)", e["query"])
        if e["method"] == method and e["path"].endswith("/" + key) and m:
            n[int(m.group(1))] += 1
    return n


@pytest.mark.parametrize("how", ["buffer", "file", "writer"])
def test_upload_slow_link_no_spurious_stall(rgw, proxy, s3, bucket, src, how):
    key = f"slow-link/{how}"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle", "direction": "request",
                       "bytes_per_second": RATE}])
    r = upload(rgw, proxy, how, bucket, key, src[0], **LINK)
    assert r.rc == 0, r
    assert r.retries() == [], r
    assert "S3F_ERR_TIMEOUT" not in r.err, r
    assert per_part(proxy, "PUT", key) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert proxy.stats()["connections"] <= 1 + 1  # the client's 1 (+ 1 if it was closed)
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("how", ["buffer", "file", "reader"])
def test_download_slow_link_no_spurious_stall(rgw, proxy, bucket, dl_object, tmp_path, how):
    key, data = dl_object
    proxy.set_faults([{"match": gets(key), "action": "throttle", "direction": "response",
                       "bytes_per_second": RATE}])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, how, bucket, key, dst, **LINK)
    check_download(r, how, dst, data)
    assert r.retries() == [], r
    assert "S3F_ERR_TIMEOUT" not in r.err, r
    # buffer and file: 4 ranged GETs of 5 MiB, each sent once; the reader's read-ahead
    # segments vary in size, so only its retries (none, above) are checked
    gets_seen = [e for e in proxy.stats()["log"]
                 if e["method"] == "GET" and e["path"].endswith("/" + key)]
    if how != "reader":
        assert len(gets_seen) == 4, gets_seen


def test_upload_last_bytes_on_a_slow_link_are_not_a_stall(rgw, proxy, s3, bucket, src):
    """On a slow link the last bytes of a part wait in the client's send queue after libcurl
    has handed them all to the kernel: about 4 MiB (the send buffer) at 2 MB/s is 2 s in which
    libcurl's counters do not move. The stall clock must see the send queue drain (SIOCOUTQ),
    not fire after 1 s and send the part again. The proxy reads the body at the link's rate
    through a small receive buffer, so the bytes in flight stay in the client's queue."""
    key = "slow-link/send-queue"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle", "direction": "request",
                       "bytes_per_second": 2_000_000, "client_rcvbuf": 65536}])
    r = upload(rgw, proxy, "buffer", bucket, key, src[0], FAULT_STALL_MS=1000,
               FAULT_CONNECTIONS=1, FAULT_IO_THREADS=1, FAULT_INFLIGHT=1)
    assert r.rc == 0, r
    assert "S3F_ERR_TIMEOUT" not in r.err, r
    assert r.retries() == [], r
    assert per_part(proxy, "PUT", key) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert_object(s3, bucket, key, src[1])
