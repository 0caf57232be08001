"""Control requests have a lane of their own: with 4 connections on one I/O thread, data
requests may use 3, and the 4th is kept for control requests (HEAD, Create, Complete,
Abort, List...), so they are never stuck behind the parts of slow transfers.

The upload's 5 parts (8 may be in flight) go through a link throttled to 4 MB/s per
connection (1.3 s a 5 MiB part); once 3 are in flight, another thread of the driver
(FAULT_HEAD_DURING) sends a HeadObject. It must reach the server at once, on the reserved
connection, before the 4th part (which waits for a data connection). Before, all 4
connections went to parts, and the HEAD waited inside libcurl until one was done."""
import re

import os

from test_engine_faults import (PART, assert_object, part_puts,  # noqa: F401
                                upload)


def test_head_not_stuck_behind_parts(rgw, proxy, s3, bucket, tmp_path):
    key = "control-lane/up"
    data = os.urandom(4 * PART + 1)  # 4 full parts (1.3 s each on the link), then 1 byte
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    proxy.set_faults([{"match": part_puts(key), "action": "throttle", "direction": "request",
                       "bytes_per_second": 4_000_000}])
    r = upload(rgw, proxy, "buffer", bucket, key, path, FAULT_CONNECTIONS=4,
               FAULT_IO_THREADS=1, FAULT_INFLIGHT=8, FAULT_HEAD_DURING=3, FAULT_STALL_MS=5000)
    assert r.rc == 0, r
    assert r.kv["head_status"] == "S3F_ERR_NOT_FOUND", r  # the object is not there yet
    assert r.kv["head_attempts"] == "1", r
    log = [e for e in proxy.stats()["log"] if e["path"].endswith("/" + key)]
    # the driver's HEAD is the first (the upload HEADs the object after Complete on RGW)
    heads = sorted(e["time"] for e in log if e["method"] == "HEAD")
    parts = sorted(e["time"] for e in log
                   if e["method"] == "PUT" and re.search(r"partNumber=\d", e["query"]))
    assert heads and len(parts) == 5, log
    # 3 parts on the data connections, the HEAD on the reserved one, the 4th part after
    assert heads[0] < parts[3], (heads, parts)
    assert parts[3] - parts[0] > 0.5, parts  # the 4th part waited for a data connection
    assert_object(s3, bucket, key, data, parts=5)
