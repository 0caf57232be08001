"""`s3flash mount --prefetch-listed N`: small listed files fetched ahead of their opens.

Real FUSE mounts of buckets on Ceph RGW (or the sink) through the fault proxy, whose request
log shows when each GET came: with the option, `cat dir/*` of listed files keeps several
GETs in flight (each GET is delayed at the proxy, so overlapping arrival windows mean
requests in flight together); without it, one at a time as before. An object replaced after
its listing is never served from prefetched bytes of the old version (docs/SEMANTICS.md).
"""

import errno
import hashlib
import os
import random
import subprocess
import time
import uuid

import pytest

from mountutil import mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))

DELAY_S = 0.1
N = 50


@pytest.fixture
def prefix():
    return f"pf-{uuid.uuid4().hex[:8]}/"


def fill(s3, bucket, prefix, n=N, size=4096, seed=1):
    rnd = random.Random(seed)
    bodies = {}
    for i in range(n):
        name = f"f{i:03d}"
        bodies[name] = rnd.randbytes(size + i)
        s3.put_object(Bucket=bucket, Key=prefix + name, Body=bodies[name])
    return bodies


def object_gets(proxy, prefix):
    return [e for e in proxy.stats()["log"]
            if e["method"] == "GET" and "/" + prefix in e["path"] + "/"
            and "list-type" not in (e["query"] or "")]


def max_overlap(times, span):
    """The most requests whose [time, time + span) windows overlap (span: the proxy's delay)."""
    times = sorted(times)
    best = 0
    for i, t in enumerate(times):
        best = max(best, sum(1 for u in times[i:] if u < t + span))
    return best


def delay_gets(proxy, prefix):
    proxy.set_faults([{"match": {"method": "GET", "path": "/" + prefix + "f"},
                       "action": "delay", "seconds": DELAY_S}])


def cat_all(mnt):
    return subprocess.run(["sh", "-c", 'cat "$0"/*', str(mnt)], capture_output=True,
                          timeout=120, check=True, env={**os.environ, "LC_ALL": "C"}).stdout


def test_cat_of_listed_files_gets_ahead(s3, bucket, prefix, mounts, proxy):
    bodies = fill(s3, bucket, prefix)
    m = mounts(prefix, "--prefetch-listed", "16", endpoint=proxy.endpoint)
    delay_gets(proxy, prefix)
    out = cat_all(m.dir)
    assert out == b"".join(bodies[k] for k in sorted(bodies))
    gets = object_gets(proxy, prefix)
    # each file is fetched once (prefetched or read), never twice
    assert len(gets) <= N + 2, len(gets)
    assert max_overlap([e["time"] for e in gets], DELAY_S) > 4


def test_without_the_option_one_get_at_a_time(s3, bucket, prefix, mounts, proxy):
    bodies = fill(s3, bucket, prefix, n=12)
    m = mounts(prefix, endpoint=proxy.endpoint)
    delay_gets(proxy, prefix)
    out = cat_all(m.dir)
    assert out == b"".join(bodies[k] for k in sorted(bodies))
    gets = object_gets(proxy, prefix)
    assert len(gets) == 12
    assert max_overlap([e["time"] for e in gets], DELAY_S * 0.9) == 1


def read_or_errno(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        return e.errno


def wait_for(pred, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("when", ["before_the_prefetch", "after_the_prefetch"])
def test_replaced_object_never_served_stale(s3, bucket, prefix, mounts, proxy, when):
    bodies = fill(s3, bucket, prefix, n=20)
    m = mounts(prefix, "--prefetch-listed", "16", "--metadata-ttl", "0.5",
               endpoint=proxy.endpoint)
    names = sorted(os.listdir(m.dir))
    victim = "f010"
    new = b"new bytes " * 77
    if when == "before_the_prefetch":
        s3.put_object(Bucket=bucket, Key=prefix + victim, Body=new)
    got = {}
    for k in names[:2]:  # the readdir-then-open pattern: the prefetch starts here
        got[k] = read_or_errno(os.path.join(m.dir, k))
    if when == "after_the_prefetch":
        assert wait_for(lambda: any(e["path"].endswith("/" + victim)
                                    for e in object_gets(proxy, prefix)))
        s3.put_object(Bucket=bucket, Key=prefix + victim, Body=new)
        t = time.monotonic()
        # past the metadata TTL: the mount would ask S3 again for the attributes
        assert wait_for(lambda: time.monotonic() > t + 0.6)
    for k in names[2:]:
        got[k] = read_or_errno(os.path.join(m.dir, k))
    assert got[victim] != bodies[victim]
    assert got[victim] in (new, errno.EIO), got[victim]
    for k in names:
        if k != victim:
            assert got[k] == bodies[k], k


def test_memory_bound(s3, bucket, prefix, mounts, proxy):
    """A 32 MiB memory target (the metadata budget's floor, 4 MiB) holds at most 1 MiB
    prefetched: with 200 KiB files and --prefetch-listed 16, at most 5 prefetched files (and
    the one cat reads) are in flight together, never 16, and every byte is right."""
    bodies = fill(s3, bucket, prefix, n=20, size=200 << 10)
    m = mounts(prefix, "--prefetch-listed", "16", "--memory-target", "32M",
               endpoint=proxy.endpoint)
    delay_gets(proxy, prefix)
    out = cat_all(m.dir)
    assert out == b"".join(bodies[k] for k in sorted(bodies))
    overlap = max_overlap([e["time"] for e in object_gets(proxy, prefix)], DELAY_S * 0.9)
    assert 2 <= overlap <= 6, overlap


@pytest.mark.parametrize("bad", ["x", "-1", "1025"])
def test_bad_prefetch_listed_is_a_usage_error(cli_path, tmp_path, bad):
    p = subprocess.run([str(cli_path), "mount", "--prefetch-listed", bad, "b/", str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--prefetch-listed" in p.stderr
