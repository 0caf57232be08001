"""`s3flash mount` keeps a listing of 1,000,000 keys inside `--memory-target` (issue 19).

The sink synthesises the keys (`bench/s3flash-sink --synth-list BUCKET/PREFIX:N`: ListObjectsV2
pages of deterministic names and sizes, HEAD and GET of each), the mount walks the directory
with `ls -l` (readdir, then a stat of every name), and the daemon's peak RSS (VmHWM of
/proc/PID/status) must stay within `--memory-target 256M`. Every name and size listed is
checked, and the LIST requests the walk cost are counted (the sink's "synth-list: N pages
served"): one listing's pages, give or take, never one per key.

    S3FLASH_MEMORY_KEYS=N   keys (default 1000000)
"""

import math
import os
import re
import subprocess
import urllib.request

import pytest

from mountutil import Mount, Watchdog, mount_supported
from test_sink import Sink

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=mount_supported() or "")

KEYS = int(os.environ.get("S3FLASH_MEMORY_KEYS", "1000000"))
TARGET_MIB = 256


def synth_size(i):
    return 1 + ((i * 2654435761) & 0xffffffff) % 8192


def _sanitized(cli_path):
    """The sanitizer runtime the binary is linked with, or None: under ASan or TSan the RSS
    is the runtime's (shadow memory, quarantine), not the daemon's."""
    p = subprocess.run(["ldd", cli_path], capture_output=True, text=True)
    return next((r for r in ("libasan", "libtsan") if r in p.stdout), None)


def test_million_key_listing_within_memory_target(cli_path, tmp_path):
    san = _sanitized(cli_path)
    if san:
        pytest.skip(f"{cli_path} runs under {san}: its RSS is not the daemon's own")
    sink = Sink(tmp_path, "--threads", "2", "--synth-list", f"big/many/:{KEYS}")
    m = None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/big?list-type=2"
                                    f"&prefix=many/", timeout=30) as r:
            per_page = int(re.search(rb"<KeyCount>(\d+)</KeyCount>", r.read()).group(1))
        pages = math.ceil(KEYS / per_page)
        m = Mount(cli_path, f"http://127.0.0.1:{sink.port}", "AKIDEXAMPLE", "secret",
                  "big/many/", tmp_path / "m",
                  ["--read-only", "--memory-target", f"{TARGET_MIB}M",
                   "--metadata-ttl", "3600"], log_path=str(tmp_path / "m.log")).start()
        wd = Watchdog(m, bound_s=600)
        try:
            op = wd.run(["sh", "-c", 'ls -lU "$1" | awk \'{ print $5, $NF }\'', "sh",
                         m.dir],
                        what=f"ls -l of {KEYS} keys")
            rss_kib = m.peak_rss_kib()
        finally:
            wd.close()
        lines = op.out.split(b"\n")
        seen = 0
        for ln in lines[1:]:                 # "total N" first
            if not ln:
                continue
            size, name = ln.split(b" ", 1)
            i = int(name[1:8])
            assert name == f"k{i:07d}-size-{synth_size(i)}".encode(), name
            assert int(size) == synth_size(i), (name, size)
            seen += 1
        assert seen == KEYS
    finally:
        if m is not None and m.alive():
            m.kill()
        sink.stop()
    served = int(re.search(r"synth-list: (\d+) pages served", sink.stderr).group(1)) - 1
    print(f"{KEYS} keys: peak RSS {rss_kib / 1024:.0f} MiB of {TARGET_MIB} MiB; "
          f"{served} LIST pages for one listing of {pages} ({per_page} keys a page)")
    assert rss_kib <= TARGET_MIB * 1024, \
        f"peak RSS {rss_kib / 1024:.0f} MiB over --memory-target {TARGET_MIB}M"
    assert served <= pages * 1.5 + 5, f"{served} LIST pages for a listing of {pages}"
