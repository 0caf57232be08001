"""Progress callbacks never block an I/O thread: a callback that blocks for 3 s (a stopped
terminal, a GIL held elsewhere) on its first call must not stall the transfer's requests.

The callback runs on the caller's thread; the I/O threads only count the bytes done. The
driver (tests/integration/xfer_fault_test.c, FAULT_PROGRESS_BLOCK_MS) counts the calls made
off its main thread. Parts are throttled by the fault proxy to 4 MB/s per connection, all
4 in flight on one I/O thread, 2 s stall timeout: the small last part completes first, and
a callback run on the I/O thread (as before) froze the 3 others for 3 s: each was aborted
as stalled and sent again. The proxy's request log shows each part exactly once."""
import re
from collections import Counter

import pytest

from test_engine_faults import (assert_object, check_download, dl_object, download,  # noqa: F401
                                gets, part_puts, src, upload)

SLOW = dict(FAULT_STALL_MS=2000, FAULT_IO_THREADS=1, FAULT_INFLIGHT=4,
            FAULT_PROGRESS_BLOCK_MS=3000)
# 4 MB/s: a 5 MiB part takes 1.3 s. (Not slower: the stall clock counts the bytes handed to
# the kernel, and the proxy buffers a whole request body, so after the last byte is sent
# nothing moves until the proxy has forwarded it and the answer comes.)
RATE = 4_000_000


def test_upload_progress_blocks(rgw, proxy, s3, bucket, src):
    key = "progress-blocks/up"
    proxy.set_faults([{"match": part_puts(key), "action": "throttle", "direction": "request",
                       "bytes_per_second": RATE}])
    r = upload(rgw, proxy, "buffer", bucket, key, src[0], **SLOW)
    assert r.rc == 0, r
    assert r.retries() == [], r
    assert int(r.kv["progress_calls"]) >= 1, r
    assert r.kv["progress_off_main"] == "0", r
    parts = Counter(int(m.group(1)) for e in proxy.stats()["log"]
                    if e["method"] == "PUT" and e["path"].endswith("/" + key)
                    for m in [re.search(r"partNumber=(\d+)", e["query"])] if m)
    assert parts == {1: 1, 2: 1, 3: 1, 4: 1}
    assert_object(s3, bucket, key, src[1])


def test_download_progress_blocks(rgw, proxy, bucket, dl_object, tmp_path):
    key, data = dl_object
    proxy.set_faults([{"match": gets(key), "action": "throttle", "direction": "response",
                       "bytes_per_second": RATE}])
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    r = download(rgw, proxy, "buffer", bucket, key, dst, **SLOW)
    check_download(r, "buffer", dst, data)
    assert r.retries() == [], r
    assert int(r.kv["progress_calls"]) >= 1, r
    assert r.kv["progress_off_main"] == "0", r
    n = sum(1 for e in proxy.stats()["log"]
            if e["method"] == "GET" and e["path"].endswith("/" + key))
    assert n == 4
