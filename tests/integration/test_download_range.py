"""Ranged downloads into regions (s3f_download_options.range_offset / range_bytes with
s3f_download_iov), against Ceph RGW through tests/servers/faultproxy.py: the bytes of the
range exactly (three regions that do not line up with the parts), only the range asked for
on the wire (the proxy's log of Range headers), the same retries as whole downloads (resets,
short 206s, 503s), and an object replaced during the download failing with
S3F_ERR_PRECONDITION_FAILED instead of mixing two versions.

The driver is tests/integration/xfer_fault_test.c (`download_range`); 5 MiB parts.
"""
import re
import subprocess

import pytest

from faults import s3_error
from helpers import wait_for
from test_engine_faults import (PART, SIZE, count, driver_argv, driver_env, drive, gets,
                                put_multipart, sha)

KEY = "range/obj"


@pytest.fixture(scope="module")
def obj(s3, bucket):
    import os
    data = os.urandom(SIZE)
    put_multipart(s3, bucket, KEY, data)
    etag = s3.head_object(Bucket=bucket, Key=KEY)["ETag"]
    return data, etag


def ranges_asked(proxy, key):
    """The (first, last) byte of each GET of `key`, from its Range header."""
    out = []
    for e in proxy.stats()["log"]:
        if e["method"] == "GET" and e["path"].endswith("/" + key):
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", e.get("range") or "")
            assert m, e
            out.append((int(m.group(1)), int(m.group(2))))
    return sorted(out)


def download_range(rgw, proxy, bucket, tmp_path, off, length, **env):
    dst = tmp_path / f"range-{off}-{length}"
    r = drive(rgw, proxy, "download_range", bucket, KEY, dst, off, length, **env)
    return r, dst


@pytest.mark.parametrize("off,length", [
    (0, 1), (1, PART), (PART - 1, 2), (123, SIZE - 123 - 7), (SIZE - 10, 10), (777, 0),
    (0, SIZE)])
def test_range_exact(rgw, proxy, bucket, obj, tmp_path, off, length):
    """The bytes of the range, in as many ranged GETs as its parts (none outside it)."""
    data, etag = obj
    r, dst = download_range(rgw, proxy, bucket, tmp_path, off, length, FAULT_IF_MATCH=etag)
    assert r.rc == 0, r
    want = data[off:off + length] if length else data[off:]
    assert sha(dst.read_bytes()) == sha(want)
    assert f"size={len(want)} " in r.out, r
    asked = ranges_asked(proxy, KEY)
    assert len(asked) == -(-len(want) // PART), asked
    assert asked[0][0] == off and asked[-1][1] == off + len(want) - 1, asked
    for (a, b), (c, _) in zip(asked, asked[1:]):
        assert c == b + 1, asked  # the parts tile the range, none twice


def test_range_outside_the_object(rgw, proxy, bucket, obj, tmp_path):
    """A range running past the object's end fails naming the object's size; one starting
    past it gets S3's 416."""
    r, dst = download_range(rgw, proxy, bucket, tmp_path, SIZE - 5, 10)
    assert r.rc == 1 and r.status == "S3F_ERR_INVALID_RANGE", r
    assert f"bytes {SIZE - 5}-{SIZE + 4} asked, the object has {SIZE} bytes" in r.out, r
    assert not dst.exists()
    r, _ = download_range(rgw, proxy, bucket, tmp_path, SIZE + 10, 10)
    assert r.rc == 1 and r.status == "S3F_ERR_INVALID_RANGE", r


def test_range_wrong_etag(rgw, proxy, bucket, obj, tmp_path):
    """If-Match of another ETag (the object was replaced after its header was read): 412,
    nothing handed over."""
    r, dst = download_range(rgw, proxy, bucket, tmp_path, 100, 2 * PART,
                            FAULT_IF_MATCH='"0123456789abcdef0123456789abcdef"')
    assert r.rc == 1 and r.status == "S3F_ERR_PRECONDITION_FAILED", r
    assert not dst.exists()


@pytest.mark.parametrize("fault", ["reset", "short", "503"])
def test_range_faults(rgw, proxy, bucket, obj, tmp_path, fault):
    """Resets mid-body, short 206s and 503s on the range's GETs: retried or continued, the
    bytes exact."""
    data, etag = obj
    if fault == "reset":
        rules = [{"match": dict(gets(KEY), nth=n), "action": "reset_response_body_at",
                  "at": "random", "seed": n} for n in (1, 3)]
    elif fault == "short":
        rules = [{"match": dict(gets(KEY), nth=n), "action": "short_range", "fraction": 0.3}
                 for n in (1, 2)]
    else:
        rules = [s3_error("SlowDown", 503, dict(gets(KEY), max_count=3))]
    proxy.set_faults(rules)
    off, length = 4321, 3 * PART + 99
    r, dst = download_range(rgw, proxy, bucket, tmp_path, off, length, FAULT_IF_MATCH=etag,
                            AWS_MAX_ATTEMPTS=5)
    assert r.rc == 0, r
    assert sha(dst.read_bytes()) == sha(data[off:off + length])
    assert proxy.stats()["faults_total"] == (3 if fault == "503" else 2)
    assert count(proxy, "GET", KEY) > 4  # the 4 parts, and the retries or continuations


def test_range_object_replaced_mid_download(rgw, proxy, s3, bucket, obj, tmp_path):
    """The range's second GET is held at the proxy while the object is replaced: it then
    goes out with If-Match of the first ETag and the download fails with
    S3F_ERR_PRECONDITION_FAILED, nothing handed over (never bytes of two versions)."""
    import os
    key = "range/replaced"
    put_multipart(s3, bucket, key, os.urandom(SIZE))
    proxy.set_faults([{"match": dict(gets(key), nth=2), "action": "delay", "seconds": 60}])
    dst = tmp_path / "replaced"
    argv = driver_argv("download_range", bucket, key, dst, 1000, 3 * PART)
    p = subprocess.Popen(argv, env=driver_env(rgw, proxy.endpoint, FAULT_INFLIGHT=1),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: count(proxy, "GET", key) >= 2, what="the second GET held")
        put_multipart(s3, bucket, key, os.urandom(SIZE))
        assert proxy.release(0) == 1
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(out, err)
    assert p.returncode == 1, out
    assert "status=S3F_ERR_PRECONDITION_FAILED" in out, out
    assert not dst.exists()
