"""The loopback sink endpoint (bench/sink.c), driven with python's http.client.

Self-contained: needs only the built bench/s3flash-sink (found under $S3FLASH_BUILD_DIR, default
<source>/build). `pattern()` below is the reference for the GET body, for client benchmarks that
verify the data they download.
"""
import hashlib
import http.client
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---- the data pattern (keep in step with bench/sink.c and bench/README.md) ----
PERIOD = 1048573        # a prime just under 1 MiB: part-sized shifts never look right
MULT = 2654435761


def pattern_byte(i):
    """Byte i of every object the sink serves: ((i mod 1048573) * 2654435761 mod 2^32) >> 24."""
    return (((i % PERIOD) * MULT) & 0xFFFFFFFF) >> 24


_block = None


def pattern(offset, length):
    """The bytes [offset, offset + length) of any object served by the sink."""
    global _block
    if _block is None:
        _block = bytes(((j * MULT) & 0xFFFFFFFF) >> 24 for j in range(PERIOD))
    out = bytearray()
    pos = offset % PERIOD
    while len(out) < length:
        take = min(PERIOD - pos, length - len(out))
        out += _block[pos:pos + take]
        pos = 0
    return bytes(out)


def sink_exe():
    build = os.environ.get("S3FLASH_BUILD_DIR", os.path.join(ROOT, "build"))
    exe = os.path.join(build, "bench", "s3flash-sink")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} not built")
    return exe


class Sink:
    def __init__(self, tmp_path, *args):
        self.port_file = tmp_path / f"port-{time.monotonic_ns()}"
        self.proc = subprocess.Popen([sink_exe(), "--port", "0", "--port-file",
                                      str(self.port_file), *args],
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not self.port_file.exists():
            assert self.proc.poll() is None, self.proc.stderr.read()
            assert time.monotonic() < deadline, "sink did not start"
            time.sleep(0.01)
        self.port = int(self.port_file.read_text())

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=15)
        self.stderr = err
        return self.proc.returncode


@pytest.fixture(scope="module")
def sink(tmp_path_factory):
    s = Sink(tmp_path_factory.mktemp("sink"), "--threads", "2")
    yield s
    rc = s.stop()
    assert rc == 0, s.stderr
    assert re.search(r"\d+ requests, \d+ body bytes in, \d+ body bytes out", s.stderr)


def req(sink, method, path, body=None, headers=None, conn=None):
    c = conn or sink.conn()
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r, data


def xml_field(doc, tag):
    m = re.search(rf"<{tag}>([^<]*)</{tag}>", doc.decode())
    assert m, f"no <{tag}> in {doc!r}"
    return m.group(1)


# ---- tests ----

def test_pattern_reference_values():
    # fixed points, computed by hand from the formula, so the function itself is pinned
    assert [pattern_byte(i) for i in range(4)] == [0, 158, 60, 218]
    assert pattern(PERIOD - 2, 4) == bytes([pattern_byte(PERIOD - 2), pattern_byte(PERIOD - 1),
                                            0, 158])
    assert pattern(5 * PERIOD + 1, 3) == pattern(1, 3)
    # an 8 MiB shift is visible (a 1 MiB period would hide it)
    assert pattern(8 << 20, 64) != pattern(0, 64)


def test_put_then_head_and_get(sink):
    body = os.urandom(100000)
    r, _ = req(sink, "PUT", "/bkt/dir/obj1", body,
               {"x-amz-checksum-crc32c": "AAAAAA==", "Content-Type": "application/x-test"})
    assert r.status == 200
    etag = r.getheader("ETag")
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag)
    assert r.getheader("x-amz-checksum-crc32c") == "AAAAAA=="

    r, data = req(sink, "HEAD", "/bkt/dir/obj1")
    assert r.status == 200 and data == b""
    assert r.getheader("Content-Length") == "100000"
    assert r.getheader("ETag") == etag
    assert r.getheader("Last-Modified").endswith("GMT")

    r, data = req(sink, "GET", "/bkt/dir/obj1")
    assert r.status == 200 and r.getheader("ETag") == etag
    assert data == pattern(0, 100000)      # the sink stores sizes, not bytes

    # the same key put again with another size: new size, new ETag; same size: same ETag
    r, _ = req(sink, "PUT", "/bkt/dir/obj1", b"x" * 7)
    assert r.getheader("ETag") != etag
    r, _ = req(sink, "HEAD", "/bkt/dir/obj1")
    assert r.getheader("Content-Length") == "7"
    r2, _ = req(sink, "PUT", "/bkt/dir/obj1", b"y" * 7)
    assert r2.getheader("ETag") == r.getheader("ETag")


def test_zero_byte_object(sink):
    r, _ = req(sink, "PUT", "/bkt/empty", b"")
    assert r.status == 200
    r, data = req(sink, "GET", "/bkt/empty")
    assert r.status == 200 and data == b"" and r.getheader("Content-Length") == "0"
    r, _ = req(sink, "GET", "/bkt/empty", headers={"Range": "bytes=0-0"})
    assert r.status == 416


def test_ranges(sink):
    size = 4294967296 + 12345
    path = f"/bkt/bench/obj-size-{size}"
    r, _ = req(sink, "HEAD", path)
    assert r.status == 200 and int(r.getheader("Content-Length")) == size
    cases = [  # (range header, first, last)
        ("bytes=0-0", 0, 0),
        ("bytes=10-99", 10, 99),
        (f"bytes={PERIOD - 100}-{PERIOD + 100}", PERIOD - 100, PERIOD + 100),
        (f"bytes={(8 << 20) - 5}-{(8 << 20) + 4}", (8 << 20) - 5, (8 << 20) + 4),
        (f"bytes={size - 1000}-", size - 1000, size - 1),
        ("bytes=-777", size - 777, size - 1),
        (f"bytes={size - 10}-{size + 1000}", size - 10, size - 1),   # clamped
        (f"bytes=4294967000-4294967999", 4294967000, 4294967999),
    ]
    c = sink.conn()                         # one keep-alive connection for all of them
    for hdr, a, b in cases:
        r, data = req(sink, "GET", path, headers={"Range": hdr}, conn=c)
        assert r.status == 206, hdr
        assert r.getheader("Content-Range") == f"bytes {a}-{b}/{size}", hdr
        assert int(r.getheader("Content-Length")) == b - a + 1
        assert data == pattern(a, b - a + 1), hdr
    r, data = req(sink, "GET", path, headers={"Range": f"bytes={size}-"}, conn=c)
    assert r.status == 416 and r.getheader("Content-Range") == f"bytes */{size}"
    assert xml_field(data, "Code") == "InvalidRange"
    # multi-range is ignored: the whole object (read a little, then drop the connection)
    c.close()
    r, data = req(sink, "GET", "/bkt/size-100", headers={"Range": "bytes=0-1,5-6"})
    assert r.status == 200 and data == pattern(0, 100)


def test_full_get_crosses_periods(sink):
    size = 3 * PERIOD + 17
    r, data = req(sink, "GET", f"/bkt/size-{size}")
    assert r.status == 200 and len(data) == size
    assert hashlib.sha256(data).digest() == hashlib.sha256(pattern(0, size)).digest()


def test_if_match(sink):
    r, _ = req(sink, "HEAD", "/bkt/size-1000")
    etag = r.getheader("ETag")
    r, _ = req(sink, "GET", "/bkt/size-1000", headers={"If-Match": etag, "Range": "bytes=0-9"})
    assert r.status == 206
    r, data = req(sink, "GET", "/bkt/size-1000", headers={"If-Match": '"0123"'})
    assert r.status == 412 and xml_field(data, "Code") == "PreconditionFailed"


def test_unknown_key_404(sink):
    r, data = req(sink, "GET", "/bkt/no/such/key")
    assert r.status == 404
    assert xml_field(data, "Code") == "NoSuchKey"
    assert xml_field(data, "Key") == "no/such/key"
    r, data = req(sink, "HEAD", "/bkt/no/such/key")
    assert r.status == 404 and data == b""
    r, _ = req(sink, "GET", "/bkt/size-12x")          # not all digits after size-
    assert r.status == 404


def test_delete_object(sink):
    req(sink, "PUT", "/bkt/todelete", b"abc")
    r, _ = req(sink, "DELETE", "/bkt/todelete")
    assert r.status == 204
    r, _ = req(sink, "HEAD", "/bkt/todelete")
    assert r.status == 404


def test_percent_encoded_keys(sink):
    r, _ = req(sink, "PUT", "/bkt/a%2Bb/%E2%82%AC", b"12345")
    assert r.status == 200
    # the decoded and the encoded forms name one key; '+' is a plus, not a space
    got = raw_exchange(sink.port, "HEAD /bkt/a+b/\u20ac HTTP/1.1\r\n\r\n".encode(), False)
    assert got.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 5\r\n" in got
    r, data = req(sink, "GET", "/bkt/a%20b/%E2%82%AC")
    assert r.status == 404 and xml_field(data, "Key") == "a b/\u20ac"


def test_list_is_empty(sink):
    r, data = req(sink, "GET", "/bkt?list-type=2&prefix=some%2Fdir%2F")
    assert r.status == 200
    assert b"<ListBucketResult" in data
    assert xml_field(data, "KeyCount") == "0"
    assert xml_field(data, "Prefix") == "some/dir/"
    assert xml_field(data, "IsTruncated") == "false"
    assert b"<Contents>" not in data


def complete_body(parts):
    items = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
    return f"<CompleteMultipartUpload>{items}</CompleteMultipartUpload>".encode()


def test_multipart_flow(sink):
    r, data = req(sink, "POST", "/bkt/mp/obj?uploads",
                  headers={"x-amz-checksum-algorithm": "CRC32C"})
    assert r.status == 200
    assert b"<InitiateMultipartUploadResult" in data
    assert xml_field(data, "Bucket") == "bkt" and xml_field(data, "Key") == "mp/obj"
    uid = xml_field(data, "UploadId")
    assert uid and r.getheader("x-amz-checksum-algorithm") == "CRC32C"

    sizes = {1: 5 << 20, 2: 5 << 20, 3: 1234}
    etags = {}
    c = sink.conn()
    for n in (2, 1, 3):                     # any order; part 2 sent twice (a retry)
        for _ in range(2 if n == 2 else 1):
            r, _ = req(sink, "PUT", f"/bkt/mp/obj?partNumber={n}&uploadId={uid}",
                       b"\0" * sizes[n], {"x-amz-checksum-crc32c": f"c{n}=="}, conn=c)
            assert r.status == 200
            assert r.getheader("x-amz-checksum-crc32c") == f"c{n}=="
            etags[n] = r.getheader("ETag")
            assert re.fullmatch(r'"[0-9a-f]{32}"', etags[n])
    assert len(set(etags.values())) == 3

    # invalid completes leave the upload alone
    r, data = req(sink, "POST", f"/bkt/mp/obj?uploadId={uid}",
                  complete_body([(1, etags[1]), (4, "x")]))
    assert r.status == 400 and xml_field(data, "Code") == "InvalidPart"
    r, data = req(sink, "POST", f"/bkt/mp/obj?uploadId={uid}",
                  complete_body([(2, etags[2]), (1, etags[1])]))
    assert r.status == 400 and xml_field(data, "Code") == "InvalidPartOrder"
    r, data = req(sink, "POST", f"/bkt/other?uploadId={uid}",
                  complete_body([(1, etags[1])]))
    assert r.status == 404 and xml_field(data, "Code") == "NoSuchUpload"

    r, data = req(sink, "POST", f"/bkt/mp/obj?uploadId={uid}",
                  complete_body(sorted(etags.items())))
    assert r.status == 200
    assert b"<CompleteMultipartUploadResult" in data
    assert xml_field(data, "Key") == "mp/obj"
    etag = xml_field(data, "ETag").replace("&quot;", '"')
    assert re.fullmatch(r'"[0-9a-f]{32}-3"', etag)

    r, _ = req(sink, "HEAD", "/bkt/mp/obj")
    assert int(r.getheader("Content-Length")) == sum(sizes.values())
    assert r.getheader("ETag") == etag
    r, data = req(sink, "GET", "/bkt/mp/obj", headers={"Range": f"bytes={5 << 20}-"})
    assert r.status == 206 and data == pattern(5 << 20, (5 << 20) + 1234)

    # the upload is gone once completed
    r, data = req(sink, "POST", f"/bkt/mp/obj?uploadId={uid}", complete_body([(1, etags[1])]))
    assert r.status == 404
    r, _ = req(sink, "PUT", f"/bkt/mp/obj?partNumber=1&uploadId={uid}", b"abc")
    assert r.status == 404


def test_multipart_subset_and_abort(sink):
    _, data = req(sink, "POST", "/bkt/mp2?uploads")
    uid = xml_field(data, "UploadId")
    for n, size in ((1, 100), (2, 200), (3, 300)):
        r, _ = req(sink, "PUT", f"/bkt/mp2?partNumber={n}&uploadId={uid}", b"a" * size)
        assert r.status == 200
    r, data = req(sink, "POST", f"/bkt/mp2?uploadId={uid}", complete_body([(1, "a"), (3, "c")]))
    assert r.status == 200 and xml_field(data, "ETag").endswith("-2&quot;")
    r, _ = req(sink, "HEAD", "/bkt/mp2")
    assert r.getheader("Content-Length") == "400"      # only the listed parts count

    _, data = req(sink, "POST", "/bkt/mp3?uploads")
    uid = xml_field(data, "UploadId")
    req(sink, "PUT", f"/bkt/mp3?partNumber=1&uploadId={uid}", b"a")
    r, _ = req(sink, "DELETE", f"/bkt/mp3?uploadId={uid}")
    assert r.status == 204
    r, _ = req(sink, "DELETE", f"/bkt/mp3?uploadId={uid}")
    assert r.status == 404
    r, _ = req(sink, "PUT", f"/bkt/mp3?partNumber=1&uploadId={uid}", b"a")
    assert r.status == 404
    r, _ = req(sink, "HEAD", "/bkt/mp3")
    assert r.status == 404
    r, _ = req(sink, "PUT", f"/bkt/mp3?partNumber=10001&uploadId={uid}", b"a")
    assert r.status == 400
    r, _ = req(sink, "PUT", "/bkt/mp3?partNumber=1&uploadId=bogus", b"a")
    assert r.status == 404


def test_copy_object(sink):
    req(sink, "PUT", "/bkt/src", b"z" * 4321)
    r, data = req(sink, "PUT", "/bkt/dst", b"", {"x-amz-copy-source": "/bkt/src"})
    assert r.status == 200 and b"<CopyObjectResult>" in data
    r, _ = req(sink, "HEAD", "/bkt/dst")
    assert r.getheader("Content-Length") == "4321"


def raw_exchange(port, data, expect_close=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
        if not expect_close and b"\r\n\r\n" in got:
            break
    s.close()
    return got


def test_rejects_chunked_and_missing_length(sink):
    got = raw_exchange(sink.port, b"PUT /bkt/c HTTP/1.1\r\nHost: x\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 501 ") and b"Connection: close" in got
    # http.client adds Content-Length: 0 to a PUT without a body: send a raw one
    got = raw_exchange(sink.port, b"PUT /bkt/nolen HTTP/1.1\r\nHost: x\r\n\r\n", False)
    assert got.startswith(b"HTTP/1.1 411 ")


def test_header_too_large(sink):
    got = raw_exchange(sink.port, b"GET /bkt/k HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 431 ")
    got = raw_exchange(sink.port, b"GARBAGE\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ")


def test_expect_continue_and_keepalive(sink):
    s = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
    s.sendall(b"PUT /bkt/exp HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
              b"Expect: 100-continue\r\n\r\n")
    assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(b"0123456789")
    f = s.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 200 ")
    while f.readline() != b"\r\n":
        pass
    # same connection, two requests sent back to back (pipelined)
    s.sendall(b"HEAD /bkt/exp HTTP/1.1\r\nHost: x\r\n\r\nGET /bkt/exp HTTP/1.1\r\nHost: x\r\n\r\n")
    assert f.readline().startswith(b"HTTP/1.1 200 ")
    hdrs = []
    while (line := f.readline()) != b"\r\n":
        hdrs.append(line)
    assert b"Content-Length: 10\r\n" in hdrs
    assert f.readline().startswith(b"HTTP/1.1 200 ")
    while f.readline() != b"\r\n":
        pass
    assert f.read(10) == pattern(0, 10)
    s.close()


def test_concurrent_clients(sink):
    errors = []

    def work(t):
        try:
            c = sink.conn()
            for i in range(40):
                size = t * 1000 + i
                r, _ = req(sink, "PUT", f"/bkt/conc/{t}/{i}", b"q" * size, conn=c)
                assert r.status == 200
            for i in range(40):
                r, data = req(sink, "GET", f"/bkt/conc/{t}/{i}", conn=c)
                assert r.status == 200 and data == pattern(0, t * 1000 + i)
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_large_body_both_ways(sink):
    size = 64 << 20
    c = sink.conn()
    buf = memoryview(bytearray(4 << 20))
    c.putrequest("PUT", "/bkt/large")
    c.putheader("Content-Length", str(size))
    c.endheaders()
    for _ in range(size // len(buf)):
        c.send(buf)
    r = c.getresponse()
    r.read()
    assert r.status == 200
    r, data = req(sink, "GET", "/bkt/large", conn=c)
    assert len(data) == size
    assert hashlib.sha256(data).digest() == hashlib.sha256(pattern(0, size)).digest()
    c.close()


def test_limits_and_options(tmp_path):
    exe = sink_exe()
    r = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--port-file" in r.stdout
    r = subprocess.run([exe, "--threads", "0"], capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run([exe, "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2

    s = Sink(tmp_path, "--threads", "1", "--max-objects", "1", "--max-conns", "2",
             "--max-uploads", "1")
    try:
        assert req(s, "PUT", "/b/one", b"1")[0].status == 200
        assert req(s, "PUT", "/b/two", b"22")[0].status == 200     # accepted, not remembered
        assert req(s, "HEAD", "/b/one")[0].status == 200
        assert req(s, "HEAD", "/b/two")[0].status == 404
        assert req(s, "POST", "/b/u1?uploads")[0].status == 200
        r, data = req(s, "POST", "/b/u2?uploads")
        assert r.status == 503 and xml_field(data, "Code") == "SlowDown"
        held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2)]
        for h in held:                   # make sure both were accepted before the third
            h.sendall(b"HEAD /b/one HTTP/1.1\r\n\r\n")
            assert h.recv(100).startswith(b"HTTP/1.1 200")
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        try:
            extra.sendall(b"HEAD /b/one HTTP/1.1\r\n\r\n")
            assert extra.recv(100) == b""             # over --max-conns: closed at once
        except ConnectionResetError:
            pass
        extra.close()
        for h in held:
            h.close()
    finally:
        rc = s.stop(signal.SIGINT)
    assert rc == 0
    assert "object map full" in s.stderr
