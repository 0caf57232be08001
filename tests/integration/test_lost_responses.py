"""Lost responses of requests that are not idempotent (docs/TRANSFER.md, "Lost responses").

The fault proxy's `drop_response` forwards a request, lets the server answer it in full (so
the server acted), then resets the client connection without one byte of the answer. The
engine must retry and then reconcile what the repeat answers:

- CompleteMultipartUpload: Ceph RGW answers a repeat with 200 again; AWS (and the sink,
  bench/sink.c) with 404 NoSuchUpload. After NoSuchUpload the engine HEADs the key and
  accepts the object when its size and identity match (the FULL_OBJECT checksum where the
  server keeps one, the sink with --keep-checksums; else the multipart ETag computed from the
  part ETags, RGW), and sends no Abort. Another object at the key is an error.
- CreateMultipartUpload: the first attempt's upload is orphaned; the engine finds it
  (ListMultipartUploads, initiated within the window of its attempts) and aborts it.
- PutObject with If-None-Match: * : the repeat's 412 is about our own write; HEAD decides.

Each test runs one operation with tests/integration/xfer_fault_test.c and checks the result
with an independent client (boto3 to RGW, http.client to the sink) and the proxy's log.
"""
import http.client
import os
import re
import subprocess
import time

import pytest

from faults import s3_error, start_faultproxy
from test_engine_faults import (SIZE, Run, assert_object, count, driver_argv,  # noqa: F401
                                driver_env, sha, src, uploads)
from test_sink import Sink

BUCKET_SINK = "bkt"


@pytest.fixture(scope="module")
def sink_server(tmp_path_factory):
    """The loopback sink, which answers a repeated Complete with NoSuchUpload (as AWS) and,
    with --keep-checksums, keeps the FULL_OBJECT checksum of a Complete for HEAD."""
    s = Sink(tmp_path_factory.mktemp("sink"), "--threads", "2", "--keep-checksums")
    p = start_faultproxy("127.0.0.1", s.port)
    yield s, p
    p.stop()
    assert s.stop() == 0, s.stderr


@pytest.fixture
def sink_proxy(sink_server):
    s, p = sink_server
    p.reset()
    return s, p


def completes(key):
    return {"method": "POST", "path": re.escape(key) + "$", "query": "uploadId="}


def creates(key):
    return {"method": "POST", "path": re.escape(key) + "$", "query": "uploads"}


def run(rgw, proxy, op, bucket, key, path, **env):
    p = subprocess.run(driver_argv(op, bucket, key, path),
                       env=driver_env(rgw, proxy.endpoint, **env), capture_output=True,
                       text=True, timeout=120)
    r = Run(p, 0)
    print(r)
    return r


def aborts(proxy, key):
    return count(proxy, "DELETE", key, "uploadId=")


def sink_head(sink, key):
    c = http.client.HTTPConnection("127.0.0.1", sink.port, timeout=10)
    c.request("HEAD", f"/{BUCKET_SINK}/{key}")
    r = c.getresponse()
    r.read()
    c.close()
    return r


# ---- CompleteMultipartUpload ----------------------------------------------------------------

@pytest.mark.parametrize("how", ["buffer", "writer"])
def test_complete_lost_rgw_answers_200_again(rgw, proxy, s3, bucket, src, how):
    """RGW answers the repeated Complete with 200: success, the object exact, no Abort.
    (The control case: this one also passed before the reconciliation existed.)"""
    key = f"lost-complete-200/{how}"
    proxy.set_faults([{"match": dict(completes(key), nth=1), "action": "drop_response"}])
    r = run(rgw, proxy, {"buffer": "upload_buffer", "writer": "writer"}[how], bucket, key,
            src[0])
    assert r.rc == 0, r
    assert proxy.stats()["faults"] == {"0:drop_response": 1}
    assert count(proxy, "POST", key, "uploadId=") == 2
    assert aborts(proxy, key) == 0
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("checksum", ["crc32c", "none"])
def test_complete_lost_then_nosuchupload_rgw(rgw, proxy, s3, bucket, src, checksum):
    """The repeat answers NoSuchUpload as AWS would (injected by the proxy in front of RGW):
    RGW keeps no checksum, so the multipart ETag computed from the part ETags identifies the
    object; success, and no Abort. Before: S3F_ERR_NOT_FOUND, and an Abort."""
    key = f"lost-complete-404/{checksum}"
    proxy.set_faults([
        {"match": dict(completes(key), nth=1), "action": "drop_response"},
        s3_error("NoSuchUpload", 404, dict(completes(key), nth=2),
                 message="The specified upload does not exist."),
    ])
    r = run(rgw, proxy, "upload_buffer", bucket, key, src[0], FAULT_CHECKSUM=checksum)
    assert r.rc == 0, r
    assert count(proxy, "POST", key, "uploadId=") == 2
    assert count(proxy, "HEAD", key) == 1
    assert aborts(proxy, key) == 0
    assert "the object is ours" in r.err
    assert_object(s3, bucket, key, src[1])


@pytest.mark.parametrize("how", ["buffer", "file", "writer"])
def test_complete_lost_sink_nosuchupload(rgw, sink_proxy, src, how):
    """The sink forgets a completed upload: the repeat answers NoSuchUpload. The HEAD shows
    the FULL_OBJECT CRC32C the engine sent: success, and no Abort. Before: failure + Abort."""
    sink, proxy = sink_proxy
    key = f"lost-complete-sink/{how}"
    proxy.set_faults([{"match": dict(completes(key), nth=1), "action": "drop_response"}])
    op = {"buffer": "upload_buffer", "file": "upload_file", "writer": "writer"}[how]
    r = run(rgw, proxy, op, BUCKET_SINK, key, src[0])
    assert r.rc == 0, r
    assert count(proxy, "POST", key, "uploadId=") == 2
    assert count(proxy, "HEAD", key) == 1
    assert aborts(proxy, key) == 0
    h = sink_head(sink, key)
    assert h.status == 200 and int(h.getheader("Content-Length")) == SIZE
    assert h.getheader("x-amz-checksum-crc32c")


def test_complete_lost_sink_key_overwritten(rgw, sink_proxy, src):
    """Between the lost answer and the repeat, another writer puts an object of the same
    size at the key (straight to the sink): the repeat answers NoSuchUpload, the HEAD shows
    another checksum, and the upload fails saying what differed (no Abort: the upload is
    gone). The repeat is held by the proxy (delay) until the other object is written."""
    sink, proxy = sink_proxy
    key = "lost-complete-sink/overwritten"
    proxy.set_faults([
        {"match": dict(completes(key), nth=1), "action": "drop_response"},
        {"match": dict(completes(key), nth=2), "action": "delay", "seconds": 3},
    ])
    p = subprocess.Popen(driver_argv("upload_buffer", BUCKET_SINK, key, src[0]),
                         env=driver_env(rgw, proxy.endpoint), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while count(proxy, "POST", key, "uploadId=") < 2:  # the repeat is held by the proxy
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    c = http.client.HTTPConnection("127.0.0.1", sink.port, timeout=10)
    c.request("PUT", f"/{BUCKET_SINK}/{key}", body=b"\0" * SIZE,
              headers={"x-amz-checksum-crc32c": "AAAAAA=="})
    assert c.getresponse().status == 200
    c.close()
    out, err = p.communicate(timeout=60)
    r = Run(subprocess.CompletedProcess(p.args, p.returncode, out, err), 0)
    print(r)
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_NOT_FOUND"
    assert "NoSuchUpload" in r.kv["error"]
    assert "is not the object uploaded" in r.kv["error"]
    assert "CRC32C checksum is AAAAAA==" in r.kv["error"], r.kv["error"]
    assert count(proxy, "HEAD", key) == 1
    assert aborts(proxy, key) == 0
    assert sink_head(sink, key).getheader("x-amz-checksum-crc32c") == "AAAAAA=="


# ---- CreateMultipartUpload ------------------------------------------------------------------

def test_create_lost_orphan_aborted(rgw, proxy, s3, bucket, src):
    """The first Create made an upload whose id never arrived: the engine aborts it, so no
    upload is left. An upload of the same key that another writer started well before (4 s,
    past the 2 s margin) is left alone. Before: the orphan stayed."""
    key = "lost-create/orphan"
    other = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    time.sleep(4)  # the other writer's upload is older than our attempts' window
    proxy.set_faults([{"match": dict(creates(key), nth=1), "action": "drop_response"}])
    r = run(rgw, proxy, "upload_buffer", bucket, key, src[0])
    assert r.rc == 0, r
    assert count(proxy, "POST", key, "uploads") == 2
    assert aborts(proxy, key) == 1
    assert "initiated during our retried CreateMultipartUpload" in r.err
    assert uploads(s3, bucket, key) == [(key, other)]
    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=other)
    assert_object(s3, bucket, key, src[1])


def test_create_lost_then_failed_orphan_aborted(rgw, proxy, s3, bucket, src):
    """The first Create's answer is lost and the repeat is refused (403): the upload fails,
    and the upload the first attempt made is still found and aborted. Before: it stayed."""
    key = "lost-create/failed"
    proxy.set_faults([
        {"match": dict(creates(key), nth=1), "action": "drop_response"},
        s3_error("AccessDenied", 403, dict(creates(key), nth=2)),
    ])
    r = run(rgw, proxy, "upload_buffer", bucket, key, src[0])
    assert r.rc == 1 and r.status == "S3F_ERR_ACCESS_DENIED", r
    assert count(proxy, "POST", key, "uploads") == 2
    assert aborts(proxy, key) == 1
    assert uploads(s3, bucket, key) == []


# ---- conditional PutObject ------------------------------------------------------------------

def puts(key):
    return {"method": "PUT", "path": re.escape(key) + "$"}


def test_conditional_put_lost(rgw, proxy, s3, bucket, tmp_path):
    """If-None-Match: * whose first attempt wrote the object and lost the answer: the
    repeat's 412 is about our own write; HEAD shows our size and ETag: success. Before: 412."""
    key = "lost-put/ours"
    data = os.urandom(100000)
    path = tmp_path / "small.bin"
    path.write_bytes(data)
    proxy.set_faults([{"match": dict(puts(key), nth=1), "action": "drop_response"}])
    r = run(rgw, proxy, "put_if_absent", bucket, key, path)
    assert r.rc == 0, r
    assert count(proxy, "PUT", key) == 2
    assert count(proxy, "HEAD", key) == 1
    assert sha(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == sha(data)


def test_conditional_put_lost_someone_else(rgw, proxy, s3, bucket, tmp_path):
    """The key already holds another object: the first attempt's 412 is lost, the repeat's
    412 is checked with HEAD, which shows another object: 412, someone else wrote it."""
    key = "lost-put/theirs"
    s3.put_object(Bucket=bucket, Key=key, Body=b"theirs")
    path = tmp_path / "small.bin"
    path.write_bytes(b"ours!!")
    proxy.set_faults([{"match": dict(puts(key), nth=1), "action": "drop_response"}])
    r = run(rgw, proxy, "put_if_absent", bucket, key, path)
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_PRECONDITION_FAILED"
    assert "someone else wrote the key" in r.kv["error"], r.kv["error"]
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"


def test_conditional_put_no_fault(rgw, proxy, s3, bucket, tmp_path):
    """Without a lost response a 412 is reported at once, with no HEAD."""
    key = "lost-put/plain"
    s3.put_object(Bucket=bucket, Key=key, Body=b"theirs")
    path = tmp_path / "small.bin"
    path.write_bytes(b"ours")
    r = run(rgw, proxy, "put_if_absent", bucket, key, path)
    assert r.rc == 1 and r.status == "S3F_ERR_PRECONDITION_FAILED", r
    assert count(proxy, "HEAD", key) == 0
