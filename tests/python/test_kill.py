"""A process killed (SIGKILL) in the middle of a save leaves no object; its multipart upload
is listed by cleanup_uploads and removed by it."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import s3flash
from conftest import exists

MiB = 1 << 20

CHILD = textwrap.dedent("""
    import sys, time, torch, s3flash
    region, endpoint, uri = sys.argv[1:4]

    class Stall:
        # forwards torch.save's writes, then stalls once 24 MiB are in (3 parts of 8 MiB)
        def __init__(self, w):
            self.w, self.n = w, 0
        def write(self, b):
            n = self.w.write(b)
            self.n += n
            if self.n >= 24 * 2**20:
                print("STALLED", flush=True)
                time.sleep(600)
            return n
        def flush(self):
            pass

    ck = s3flash.S3Checkpoint(region=region, endpoint=endpoint)
    sd = {f"t{i}": torch.randn(2**20) for i in range(16)}  # 64 MiB
    with ck.writer(uri) as w:
        torch.save(sd, Stall(w))
""")


def _uploads(s3, bucket, key):
    return [u for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if u["Key"] == key]


def test_sigkill_during_save_leaves_no_object(region, endpoint, bucket, key, s3):
    uri = f"s3://{bucket}/{key}"
    p = subprocess.Popen([sys.executable, "-c", CHILD, region, endpoint, uri],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.strip() == "STALLED", (line, p.stderr.read() if p.poll() is not None else "")
        deadline = time.monotonic() + 30
        while not _uploads(s3, bucket, key) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _uploads(s3, bucket, key), "the multipart upload never started"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL
    assert not exists(s3, bucket, key)

    # listed: not when younger than the threshold, yes with no threshold
    assert [u for u in s3flash.list_uploads(bucket, prefix=key, older_than=3600,
                                            region=region, endpoint=endpoint)] == []
    dry = s3flash.cleanup_uploads(bucket, prefix=key, older_than=0, dry_run=True,
                                  region=region, endpoint=endpoint)
    assert [u.key for u in dry] == [key]
    assert _uploads(s3, bucket, key)  # dry run removed nothing
    removed = s3flash.cleanup_uploads(bucket, prefix=key, older_than=0, region=region,
                                      endpoint=endpoint)
    assert [(u.key, u.upload_id) for u in removed] == [(u.key, u.upload_id) for u in dry]
    assert removed[0].initiated <= time.time() + 5
    assert not _uploads(s3, bucket, key)
    assert s3flash.list_uploads(bucket, prefix=key, region=region, endpoint=endpoint) == []
    assert not exists(s3, bucket, key)


def test_cleanup_keeps_other_prefixes_and_young_uploads(region, endpoint, bucket, s3):
    a = s3.create_multipart_upload(Bucket=bucket, Key="keep/x")["UploadId"]
    b = s3.create_multipart_upload(Bucket=bucket, Key="drop/y")["UploadId"]
    try:
        from datetime import timedelta
        assert s3flash.cleanup_uploads(bucket, prefix="drop/", older_than=timedelta(hours=1),
                                       region=region, endpoint=endpoint) == []
        # without older_than it refuses (an upload in progress would be aborted)
        with pytest.raises(ValueError, match="older_than"):
            s3flash.cleanup_uploads(bucket, prefix="drop/", region=region, endpoint=endpoint)
        with pytest.raises(ValueError, match="older_than"):
            s3flash.cleanup_uploads(bucket, prefix="drop/", dry_run=True, region=region,
                                    endpoint=endpoint)
        assert {u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)
                .get("Uploads", [])} >= {a, b}
        removed = s3flash.cleanup_uploads(bucket, prefix="drop/", older_than=0,
                                          region=region, endpoint=endpoint)
        assert [(u.key, u.upload_id) for u in removed] == [("drop/y", b)]
        left = {u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)
                .get("Uploads", [])}
        assert a in left and b not in left
    finally:
        s3.abort_multipart_upload(Bucket=bucket, Key="keep/x", UploadId=a)
