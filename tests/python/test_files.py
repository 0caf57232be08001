"""Files moved by the engine, never through a mapping: a full disk or a source file truncated
during an upload is an exception, never a process killed by SIGBUS (issue 9, section 5).

Each scenario runs in a child process (tests/python/test_files.py is run as a script) so that
a process killed by a signal is reported as such instead of taking pytest down with it.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

import s3flash  # noqa: E402
import s3flash.fsspec  # noqa: E402
from conftest import faultproxy  # noqa: E402

MiB = 1 << 20
HERE = Path(__file__).resolve()


def _run_child(scenario, **args):
    """Run `scenario` of this file in a fresh interpreter; (returncode, result dict or None,
    output)."""
    out = subprocess.run([sys.executable, str(HERE), scenario, json.dumps(args)],
                         capture_output=True, text=True, timeout=300, env=os.environ.copy())
    result = None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    return out.returncode, result, out.stdout + out.stderr


def _assert_no_signal(rc, output):
    if rc < 0:
        pytest.fail(f"the process died by {signal.Signals(-rc).name}:\n{output[-3000:]}")
    assert rc == 0, output[-3000:]


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MiB tmpfs: a destination that fills up."""
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


def test_get_file_full_disk_raises_enospc(s3, bucket, endpoint, tmpfs):
    key = f"full-{uuid.uuid4().hex[:8]}"
    s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(12 * MiB))
    dest = tmpfs / "ckpt.bin"
    rc, res, output = _run_child("get_file", endpoint=endpoint, rpath=f"{bucket}/{key}",
                                 lpath=str(dest))
    _assert_no_signal(rc, output)
    assert res["errno"] == errno.ENOSPC, res
    assert res["type"] == "S3IOError" and res["is_oserror"], res
    # nothing left behind: no temporary file, no partial destination
    assert list(tmpfs.iterdir()) == []
    # in a directory that does not exist yet: created (as fsspec's own get_file does), and
    # still nothing but the directory is left
    rc, res, output = _run_child("get_file", endpoint=endpoint, rpath=f"{bucket}/{key}",
                                 lpath=str(tmpfs / "sub" / "ckpt.bin"))
    _assert_no_signal(rc, output)
    assert res["errno"] == errno.ENOSPC, res
    assert list(tmpfs.iterdir()) == [tmpfs / "sub"]
    assert list((tmpfs / "sub").iterdir()) == []


def test_client_download_file_full_disk(s3, bucket, endpoint, region, tmpfs):
    key = f"full-{uuid.uuid4().hex[:8]}"
    s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(9 * MiB))
    c = s3flash.S3Client(region, endpoint)
    with pytest.raises(OSError) as ei:
        c.download_file(bucket, key, str(tmpfs / "x.bin"))
    assert ei.value.errno == errno.ENOSPC
    assert isinstance(ei.value, s3flash.S3Exception)
    assert ei.value.filename == str(tmpfs / "x.bin")
    assert list(tmpfs.iterdir()) == []
    # a small one still fits: the client is fine after the error
    s3.put_object(Bucket=bucket, Key=key + "-small", Body=b"x" * 1000)
    info = c.download_file(bucket, key + "-small", str(tmpfs / "y.bin"))
    assert info["size"] == 1000 and (tmpfs / "y.bin").read_bytes() == b"x" * 1000


def test_get_file_creates_parent_directories(s3, bucket, endpoint, tmp_path):
    key = f"deep-{uuid.uuid4().hex[:8]}"
    body = os.urandom(6 * MiB + 123)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    fs = s3flash.fsspec.S3FlashFileSystem(endpoint_url=endpoint)
    dest = tmp_path / "a" / "b" / "c.bin"
    fs.get_file(f"{bucket}/{key}", str(dest))
    assert dest.read_bytes() == body
    assert sorted(p.name for p in dest.parent.iterdir()) == ["c.bin"]


def test_put_file_truncated_source_raises(s3, bucket, endpoint, rgw, tmp_path):
    """The source shrinks while the upload runs. The fault proxy stalls the body of the
    second UploadPart at offset 0; while it is stalled the file is truncated to the first
    part, so that part's bytes can no longer be read: the upload fails naming the file, no
    object appears and no multipart upload is left."""
    part = 16 * MiB  # larger than what the loopback socket buffers hold of a stalled body
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * part))
    key = f"trunc-{uuid.uuid4().hex[:8]}"
    with faultproxy(rgw.endpoint) as proxy:
        proxy.set_faults([{"match": {"method": "PUT", "query": "partNumber=2"},
                           "action": "stall", "direction": "request", "at": 0,
                           "seconds": 3, "max_count": 1}])
        rc, res, output = _run_child("put_file", endpoint=proxy.endpoint, lpath=str(src),
                                     rpath=f"{bucket}/{key}", part_size=part,
                                     truncate_to=part, control=proxy.control)
        stats = proxy.stats()
    _assert_no_signal(rc, output)
    assert res["truncated"], res  # the stall was seen and the file truncated during it
    assert res["type"] == "S3IOError" and res["is_oserror"], res
    assert str(src) in res["message"] and "changed during the upload" in res["message"], res
    assert "shrank during the upload" in res["message"], res  # the library says why
    assert stats["faults_total"] == 1
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=key)
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []) == []


def test_put_file_and_copy_round_trip(s3, bucket, endpoint, tmp_path):
    fs = s3flash.fsspec.S3FlashFileSystem(endpoint_url=endpoint)
    body = os.urandom(11 * MiB + 5)
    src = tmp_path / "in.bin"
    src.write_bytes(body)
    base = f"{bucket}/rt-{uuid.uuid4().hex[:8]}"
    fs.put_file(str(src), f"{base}/a.bin")
    # multipart server-side copy (several UploadPartCopy parts) through the extension
    info = fs.client.copy(bucket, f"{base[len(bucket) + 1:]}/a.bin", bucket,
                          f"{base[len(bucket) + 1:]}/b.bin", part_size=5 * MiB,
                          multipart_threshold=5 * MiB)
    assert info["size"] == len(body)
    assert info["etag"].strip('"').endswith("-3")
    fs.cp_file(f"{base}/b.bin", f"{base}/c.bin")
    fs.get_file(f"{base}/c.bin", str(tmp_path / "out.bin"))
    assert (tmp_path / "out.bin").read_bytes() == body
    with pytest.raises(FileNotFoundError) as ei:  # a missing local source names the file
        fs.put_file(str(tmp_path / "nope.bin"), f"{base}/nope.bin")
    assert ei.value.errno == errno.ENOENT
    assert ei.value.filename == str(tmp_path / "nope.bin")
    assert not fs.exists(f"{base}/nope.bin")


# ---- the scenarios, run in a child process ------------------------------------------------

def _describe(e):
    return {"type": type(e).__name__, "is_oserror": isinstance(e, OSError),
            "errno": getattr(e, "errno", None), "message": str(e)}


def _child_get_file(a):
    fs = s3flash.fsspec.S3FlashFileSystem(endpoint_url=a["endpoint"])
    try:
        fs.get_file(a["rpath"], a["lpath"])
    except Exception as e:  # noqa: BLE001 - reported to the test
        return _describe(e)
    return {"type": None}


def _child_put_file(a):
    import threading
    import urllib.request

    def stats():
        with urllib.request.urlopen(a["control"] + "/stats", timeout=10) as r:
            return json.loads(r.read())

    truncated = threading.Event()

    def truncate_when_stalled():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(e.get("rule") is not None and e.get("acted") for e in stats()["log"]):
                os.truncate(a["lpath"], a["truncate_to"])
                truncated.set()
                return
            time.sleep(0.01)

    t = threading.Thread(target=truncate_when_stalled, daemon=True)
    t.start()
    cfg = s3flash.S3ClientConfig(part_size=a["part_size"])
    fs = s3flash.fsspec.S3FlashFileSystem(endpoint_url=a["endpoint"], s3client_config=cfg)
    try:
        fs.put_file(a["lpath"], a["rpath"])
        res = {"type": None}
    except Exception as e:  # noqa: BLE001
        res = _describe(e)
    t.join(5)
    res["truncated"] = truncated.is_set()
    return res


if __name__ == "__main__":
    fn = {"get_file": _child_get_file, "put_file": _child_put_file}[sys.argv[1]]
    print("RESULT " + json.dumps(fn(json.loads(sys.argv[2]))), flush=True)
