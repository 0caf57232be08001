"""The loopback sink endpoint (bench/sink.c), driven with python's http.client.

Self-contained: needs only the built bench/s3flash-sink (found under $S3FLASH_BUILD_DIR, default
<source>/build). `pattern()` below is the reference for the GET body, for client benchmarks that
verify the data they download.
"""
import hashlib
import html
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from ready import read_line  # noqa: E402

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
    """The sink on an ephemeral port: ready once it printed the port (--print-port, after
    listen() and its workers started) on the pipe. No request is sent to confirm it: the
    tests count what the sink saw (its exit statistics, the prefix limits' counts)."""

    def __init__(self, tmp_path, *args):
        self.proc = subprocess.Popen([sink_exe(), "--port", "0", "--print-port", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.port = int(read_line(self.proc, r"^port (\d+)$", "the sink").group(1))
        except AssertionError:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=15)
            raise AssertionError(f"the sink did not start: {err[-2000:]}") from None

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


def test_list_without_prefix(sink):
    # no prefix parameter: the empty <Prefix> is written from no bytes at all (under UBSan, the
    # ASan pass of tests/run.sh, a memcpy from NULL once stopped the sink here)
    r, data = req(sink, "GET", "/bkt?list-type=2")
    assert r.status == 200
    assert xml_field(data, "Prefix") == ""
    assert xml_field(data, "KeyCount") == str(data.count(b"<Contents>"))
    r, data = req(sink, "GET", "/bkt")
    assert r.status == 200 and xml_field(data, "Prefix") == ""


def test_list_pages_what_it_remembers(sink):
    """ListObjectsV2 of the keys PUT: 100 a page at most, in byte order, continued with
    NextContinuationToken (percent-encoded in the query), each with its size and ETag."""
    import urllib.parse
    keys = sorted(f"lst/d{i % 3}/k {i:03d}&" for i in range(230))
    for k in keys:
        r, _ = req(sink, "PUT", "/bkt/" + urllib.parse.quote(k), body=b"x" * (len(k) + 1))
        assert r.status == 200
    req(sink, "PUT", "/bkt/lst-other", body=b"y")
    got, token, pages = [], None, 0
    while True:
        q = "list-type=2&prefix=" + urllib.parse.quote("lst/", safe="")
        if token:
            q += "&continuation-token=" + urllib.parse.quote(token, safe="")
        r, data = req(sink, "GET", "/bkt?" + q)
        assert r.status == 200
        pages += 1
        doc = data.decode()
        page = [html.unescape(k) for k in re.findall(r"<Key>([^<]*)</Key>", doc)]
        sizes = [int(x) for x in re.findall(r"<Size>(\d+)</Size>", doc)]
        assert sizes == [len(k) + 1 for k in page] and len(page) <= 100
        assert xml_field(data, "KeyCount") == str(len(page))
        got += page
        if xml_field(data, "IsTruncated") == "false":
            break
        token = html.unescape(xml_field(data, "NextContinuationToken"))
    assert got == keys and pages == 3
    r, data = req(sink, "GET", "/bkt?list-type=2&max-keys=7&prefix=lst%2Fd1%2F")
    assert data.count(b"<Contents>") == 7 and xml_field(data, "IsTruncated") == "true"


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


def test_keep_checksums(tmp_path):
    """--keep-checksums: the whole-object checksum of a PUT, and of a FULL_OBJECT Complete,
    comes back on HEAD and GET; a Complete without FULL_OBJECT keeps none; a write without a
    checksum, and a DELETE, forget it; a copy carries it. Off by default. A repeated Complete
    of a completed upload answers 404 NoSuchUpload (AWS's behaviour) either way."""
    s = Sink(tmp_path, "--threads", "1", "--keep-checksums")
    try:
        r, _ = req(s, "PUT", "/bkt/ck", b"x" * 10, {"x-amz-checksum-crc32c": "AAAAAA=="})
        assert r.status == 200
        r, _ = req(s, "HEAD", "/bkt/ck")
        assert r.getheader("x-amz-checksum-crc32c") == "AAAAAA=="
        r, data = req(s, "GET", "/bkt/ck")
        assert r.getheader("x-amz-checksum-crc32c") == "AAAAAA==" and len(data) == 10
        r, _ = req(s, "PUT", "/bkt/ck2", b"", {"x-amz-copy-source": "/bkt/ck"})
        assert r.status == 200
        r, _ = req(s, "HEAD", "/bkt/ck2")
        assert r.getheader("x-amz-checksum-crc32c") == "AAAAAA=="
        req(s, "PUT", "/bkt/ck", b"y" * 10)             # another object: no checksum
        r, _ = req(s, "HEAD", "/bkt/ck")
        assert r.status == 200 and r.getheader("x-amz-checksum-crc32c") is None
        req(s, "DELETE", "/bkt/ck2")
        req(s, "PUT", "/bkt/ck2", b"z")
        r, _ = req(s, "HEAD", "/bkt/ck2")
        assert r.getheader("x-amz-checksum-crc32c") is None

        for full, want in ((True, "BBBBBB=="), (False, None)):
            _, data = req(s, "POST", "/bkt/mpck?uploads")
            uid = xml_field(data, "UploadId")
            r, _ = req(s, "PUT", f"/bkt/mpck?partNumber=1&uploadId={uid}", b"a" * 100)
            hdrs = {"x-amz-checksum-crc32c": "BBBBBB=="}
            if full:
                hdrs["x-amz-checksum-type"] = "FULL_OBJECT"
            body = complete_body([(1, r.getheader("ETag"))])
            r, _ = req(s, "POST", f"/bkt/mpck?uploadId={uid}", body, hdrs)
            assert r.status == 200
            r, _ = req(s, "HEAD", "/bkt/mpck")
            assert r.getheader("x-amz-checksum-crc32c") == want
            assert r.getheader("Content-Length") == "100"
            r, data = req(s, "POST", f"/bkt/mpck?uploadId={uid}", body, hdrs)
            assert r.status == 404 and xml_field(data, "Code") == "NoSuchUpload"
    finally:
        assert s.stop() == 0, s.stderr


def test_checksums_not_kept_by_default(sink):
    req(sink, "PUT", "/bkt/nock", b"x" * 10, {"x-amz-checksum-crc32c": "AAAAAA=="})
    r, _ = req(sink, "HEAD", "/bkt/nock")
    assert r.status == 200 and r.getheader("x-amz-checksum-crc32c") is None


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


def recv_response(s, buf=b"", head_request=False):
    """Reads one response (Content-Length framed) from socket s; returns (head, body, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"connection closed after {buf!r}"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    m = re.search(rb"\r\nContent-Length: (\d+)", head)
    n = int(m.group(1)) if m and not head_request else 0
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk, "connection closed in a body"
        rest += chunk
    return head, rest[:n], rest[n:]


def test_chunked_put_and_missing_length(sink):
    # plain HTTP/1.1 chunked, with a chunk extension and a trailer, then (pipelined on the same
    # connection, sent in the same write) a HEAD: the bytes after the body belong to the HEAD
    body = os.urandom(70000)
    chunks = [body[:1], body[1:65537], body[65537:]]
    enc = b"".join(b"%x;ext=1\r\n" % len(c) + c + b"\r\n" for c in chunks)
    enc += b"0\r\nx-amz-checksum-crc32c: AAAAAA==\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
    s.sendall(b"PUT /bkt/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
              enc + b"HEAD /bkt/chunked HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, rest = recv_response(s)
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"Connection: close" not in head
    head2, _, _ = recv_response(s, rest, head_request=True)
    assert head2.startswith(b"HTTP/1.1 200 ") and b"\r\nContent-Length: 70000\r\n" in head2
    s.close()
    r, _ = req(sink, "HEAD", "/bkt/chunked")
    assert r.status == 200 and r.getheader("Content-Length") == "70000"

    # http.client sends chunked when asked to (no Content-Length): an empty chunked body
    c = sink.conn()
    c.request("PUT", "/bkt/chunked2", body=iter([b"abc", b"", b"defg"]),
              encode_chunked=True)
    r = c.getresponse()
    r.read()
    assert r.status == 200
    r, _ = req(sink, "HEAD", "/bkt/chunked2", conn=c)
    assert r.getheader("Content-Length") == "7"
    c.close()

    # malformed chunk framing: 400 naming it, and the connection closes
    got = raw_exchange(sink.port, b"PUT /bkt/bad HTTP/1.1\r\nHost: x\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ") and b"chunk-size line" in got
    got = raw_exchange(sink.port, b"PUT /bkt/bad HTTP/1.1\r\nHost: x\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ") and b"longer than its size" in got
    assert req(sink, "HEAD", "/bkt/bad")[0].status == 404
    # other transfer codings are not understood
    got = raw_exchange(sink.port, b"PUT /bkt/c HTTP/1.1\r\nHost: x\r\n"
                                  b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 501 ") and b"Connection: close" in got
    # http.client adds Content-Length: 0 to a PUT without a body: send a raw one
    got = raw_exchange(sink.port, b"PUT /bkt/nolen HTTP/1.1\r\nHost: x\r\n\r\n", False)
    assert got.startswith(b"HTTP/1.1 411 ")
    # ... except a CopyObject, which has no body (the CRT sends it without Content-Length)
    got = raw_exchange(sink.port, b"PUT /bkt/copied HTTP/1.1\r\nHost: x\r\n"
                                  b"x-amz-copy-source: /bkt/chunked\r\n\r\n", False)
    assert got.startswith(b"HTTP/1.1 200 ") and b"<CopyObjectResult>" in got
    assert req(sink, "HEAD", "/bkt/copied")[0].getheader("Content-Length") == "70000"


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


# ---- store mode (--store MAX): the bytes put are kept and served back ----

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Sink(tmp_path_factory.mktemp("store"), "--threads", "2", "--store", "64M")
    yield s
    rc = s.stop()
    assert rc == 0, s.stderr
    assert "storing up to 67108864 bytes" in s.stderr


def get_range(sink, key, rng):
    return req(sink, "GET", key, headers={"Range": rng})


def test_store_put_get_ranges_head(store):
    body = os.urandom(3 * PERIOD + 17)       # not the pattern: the stored bytes come back
    r, _ = req(store, "PUT", "/bkt/s/one", body)
    assert r.status == 200
    etag = r.getheader("ETag")
    r, data = req(store, "HEAD", "/bkt/s/one")
    assert r.status == 200 and data == b""
    assert r.getheader("Content-Length") == str(len(body)) and r.getheader("ETag") == etag
    r, data = req(store, "GET", "/bkt/s/one")
    assert r.status == 200 and r.getheader("ETag") == etag and data == body
    n = len(body)
    for rng, a, b in (("bytes=0-0", 0, 0), ("bytes=5-99999", 5, 99999),
                      (f"bytes={n - 10}-", n - 10, n - 1), ("bytes=-7", n - 7, n - 1),
                      (f"bytes=100-{n + 1000}", 100, n - 1), (f"bytes=-{n + 5}", 0, n - 1)):
        r, data = get_range(store, "/bkt/s/one", rng)
        assert r.status == 206, rng
        assert r.getheader("Content-Range") == f"bytes {a}-{b}/{n}", rng
        assert data == body[a:b + 1], rng
    r, data = get_range(store, "/bkt/s/one", f"bytes={n}-")
    assert r.status == 416 and r.getheader("Content-Range") == f"bytes */{n}"
    assert xml_field(data, "Code") == "InvalidRange"

    # an empty object
    r, _ = req(store, "PUT", "/bkt/s/empty", b"")
    assert r.status == 200
    r, data = req(store, "GET", "/bkt/s/empty")
    assert r.status == 200 and data == b"" and r.getheader("Content-Length") == "0"
    assert get_range(store, "/bkt/s/empty", "bytes=0-")[0].status == 416

    # store mode serves only what was written: no size-N objects
    r, data = req(store, "GET", "/bkt/never-size-100")
    assert r.status == 404 and xml_field(data, "Code") == "NoSuchKey"


def test_store_overwrite_copy_delete(store):
    req(store, "PUT", "/bkt/s/ow", b"first version")
    r1, _ = req(store, "HEAD", "/bkt/s/ow")
    r, _ = req(store, "PUT", "/bkt/s/ow", b"second!!!!!!!")   # the same size
    assert r.status == 200
    r2, data = req(store, "GET", "/bkt/s/ow")
    assert data == b"second!!!!!!!"
    assert r2.getheader("ETag") != r1.getheader("ETag")       # every write: a new ETag
    r, data = req(store, "PUT", "/bkt/s/cp", headers={"x-amz-copy-source": "/bkt/s/ow"})
    assert r.status == 200 and b"<CopyObjectResult>" in data
    req(store, "PUT", "/bkt/s/ow", b"third")                  # the copy keeps its bytes
    assert req(store, "GET", "/bkt/s/cp")[1] == b"second!!!!!!!"
    assert req(store, "GET", "/bkt/s/ow")[1] == b"third"
    assert req(store, "DELETE", "/bkt/s/ow")[0].status == 204
    assert req(store, "GET", "/bkt/s/ow")[0].status == 404
    assert req(store, "HEAD", "/bkt/s/ow")[0].status == 404
    assert req(store, "GET", "/bkt/s/cp")[1] == b"second!!!!!!!"
    # DeleteObjects forgets the keys listed (escaped as XML)
    req(store, "PUT", "/bkt/s/a&b", b"x")
    body = (b"<Delete><Quiet>true</Quiet><Object><Key>s/cp</Key></Object>"
            b"<Object><Key>s/a&amp;b</Key></Object></Delete>")
    r, data = req(store, "POST", "/bkt?delete", body)
    assert r.status == 200 and b"<DeleteResult" in data
    assert req(store, "HEAD", "/bkt/s/cp")[0].status == 404
    assert req(store, "HEAD", "/bkt/s/a%26b")[0].status == 404


def test_store_multipart(store):
    _, data = req(store, "POST", "/bkt/s/mp?uploads")
    uid = xml_field(data, "UploadId")
    parts = {n: os.urandom(5 << 20) for n in (1, 2, 3)}
    parts[4] = os.urandom(1234)
    for n in (3, 1, 4, 2):                    # any order; part 2 re-sent with other bytes
        r, _ = req(store, "PUT", f"/bkt/s/mp?partNumber={n}&uploadId={uid}", parts[n])
        assert r.status == 200
    parts[2] = os.urandom(5 << 20)
    r, _ = req(store, "PUT", f"/bkt/s/mp?partNumber=2&uploadId={uid}", parts[2])
    assert r.status == 200
    listed = [1, 2, 4]                       # part 3 left out: not part of the object
    r, data = req(store, "POST", f"/bkt/s/mp?uploadId={uid}",
                  complete_body([(n, "x") for n in listed]))
    assert r.status == 200
    etag = xml_field(data, "ETag").replace("&quot;", '"')
    want = b"".join(parts[n] for n in listed)
    r, data = req(store, "GET", "/bkt/s/mp")
    assert r.status == 200 and r.getheader("ETag") == etag and len(data) == len(want)
    assert hashlib.sha256(data).digest() == hashlib.sha256(want).digest()
    r, _ = req(store, "HEAD", "/bkt/s/mp")
    assert r.getheader("Content-Length") == str(len(want))
    # ranges across part boundaries
    p1 = 5 << 20
    for a, b in ((p1 - 3, p1 + 2), (0, 2 * p1 + 5), (2 * p1 - 1, len(want) - 1)):
        r, data = get_range(store, "/bkt/s/mp", f"bytes={a}-{b}")
        assert r.status == 206 and data == want[a:b + 1], (a, b)
    r, data = get_range(store, "/bkt/s/mp", "bytes=-1300")
    assert data == want[-1300:]
    # an aborted upload keeps nothing
    _, data = req(store, "POST", "/bkt/s/mp2?uploads")
    uid2 = xml_field(data, "UploadId")
    req(store, "PUT", f"/bkt/s/mp2?partNumber=1&uploadId={uid2}", b"z" * 1000)
    assert req(store, "DELETE", f"/bkt/s/mp2?uploadId={uid2}")[0].status == 204
    assert req(store, "HEAD", "/bkt/s/mp2")[0].status == 404
    assert req(store, "DELETE", "/bkt/s/mp")[0].status == 204


def test_store_chunked_bodies(store):
    body = os.urandom(200000)
    c = store.conn()
    c.request("PUT", "/bkt/s/ch", body=iter([body[:10], body[10:150000], body[150000:]]),
              encode_chunked=True)
    r = c.getresponse()
    r.read()
    assert r.status == 200
    r, data = req(store, "GET", "/bkt/s/ch", conn=c)
    assert data == body
    c.close()
    # aws-chunked (SigV4 streaming): Content-Length is the encoded size; the decoded bytes are
    # the object
    sig = "0" * 64
    enc = b"".join(b"%x;chunk-signature=%s\r\n" % (len(x), sig.encode()) + x + b"\r\n"
                   for x in (body[:65536], body[65536:]))
    enc += b"0;chunk-signature=" + sig.encode() + b"\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    hdrs = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(body)),
            "x-amz-trailer": "x-amz-checksum-crc32"}
    r, _ = req(store, "PUT", "/bkt/s/awsch", enc, hdrs)
    assert r.status == 200
    r, data = req(store, "GET", "/bkt/s/awsch")
    assert data == body and r.getheader("Content-Length") == str(len(body))
    hdrs["x-amz-decoded-content-length"] = str(len(body) + 1)
    r, data = req(store, "PUT", "/bkt/s/awsch", enc, hdrs)
    assert r.status == 400 and xml_field(data, "Code") == "IncompleteBody"
    assert req(store, "GET", "/bkt/s/awsch")[1] == body      # unchanged


def test_store_limit_and_reuse(tmp_path):
    s = Sink(tmp_path, "--threads", "1", "--store", "3M")
    try:
        big = os.urandom(1 << 20)
        for i in range(2):
            assert req(s, "PUT", f"/b/k{i}", big)[0].status == 200
        r, data = req(s, "PUT", "/b/k2", os.urandom(1536 << 10))
        assert r.status == 507
        assert xml_field(data, "Code") == "InsufficientStorage"
        assert "--store limit of 3145728 bytes" in xml_field(data, "Message")
        assert req(s, "HEAD", "/b/k2")[0].status == 404           # nothing half-kept
        # the connection still works, and so does a multipart part or chunked body over it
        _, data = req(s, "POST", "/b/mp?uploads")
        uid = xml_field(data, "UploadId")
        r, data = req(s, "PUT", f"/b/mp?partNumber=1&uploadId={uid}", os.urandom(2 << 20))
        assert r.status == 507 and "--store" in xml_field(data, "Message")
        c = s.conn()
        c.request("PUT", "/b/ch", body=iter([os.urandom(1 << 20)] * 2), encode_chunked=True)
        r = c.getresponse()
        assert r.status == 507 and b"--store limit" in r.read()
        c.close()
        # freed on delete (and overwrite): the room comes back, and buffers are reused
        assert req(s, "DELETE", "/b/k0")[0].status == 204
        for _ in range(5):
            assert req(s, "PUT", "/b/k1", big)[0].status == 200
        assert req(s, "PUT", "/b/k2", big)[0].status == 200
        assert req(s, "GET", "/b/k2")[1] == big
        for k in ("k1", "k2"):
            req(s, "DELETE", f"/b/{k}")
        req(s, "DELETE", f"/b/mp?uploadId={uid}")
    finally:
        rc = s.stop()
    assert rc == 0, s.stderr
    # everything deleted: nothing held (the accounting balances), the buffers kept for reuse
    m = re.search(r"store: (\d+) bytes held, (\d+) pooled for reuse, peak (\d+)", s.stderr)
    assert m, s.stderr
    assert int(m.group(1)) == 0 and 0 < int(m.group(2)) <= 3 << 20
    assert int(m.group(3)) <= 3 << 20
    r = subprocess.run([sink_exe(), "--store", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--store" in r.stderr


def test_store_gets_while_overwritten(store):
    # GETs under way keep the bytes they send while other connections overwrite and delete the
    # object: each GET returns one whole version (or 404), never a mix or freed memory
    versions = [bytes([v]) * (4 << 20) for v in range(1, 4)]
    req(store, "PUT", "/bkt/s/hot", versions[0])
    stop = threading.Event()
    bad = []

    def reader():
        c = store.conn()
        while not stop.is_set():
            r, data = req(store, "GET", "/bkt/s/hot", conn=c)
            if r.status == 404:
                continue
            if r.status != 200 or data not in versions:
                bad.append((r.status, len(data), data[:1], data[-1:]))
        c.close()

    ts = [threading.Thread(target=reader) for _ in range(4)]
    for t in ts:
        t.start()
    try:
        c = store.conn()
        for i in range(30):
            if i % 5 == 4:
                assert req(store, "DELETE", "/bkt/s/hot", conn=c)[0].status == 204
            else:
                assert req(store, "PUT", "/bkt/s/hot", versions[i % 3], conn=c)[0].status == 200
        c.close()
    finally:
        stop.set()
        for t in ts:
            t.join()
    assert not bad, bad[:3]
    req(store, "DELETE", "/bkt/s/hot")


def test_synth_list_pages(tmp_path):
    """--synth-list: N deterministic keys in ListObjectsV2 pages (continuation tokens,
    max-keys, a longer prefix), each served by HEAD and GET with its listed size and ETag."""
    s = Sink(tmp_path, "--threads", "1", "--synth-list", "syn/p/:1234")
    try:
        keys, sizes, etags, token, pages = [], {}, {}, None, 0
        while True:
            q = "/syn?list-type=2&prefix=p/&max-keys=500" + \
                (f"&continuation-token={token}" if token else "")
            r, doc = req(s, "GET", q)
            assert r.status == 200, doc
            pages += 1
            text = doc.decode()
            for k, etag, size in re.findall(
                    r"<Key>([^<]*)</Key><LastModified>[^<]*</LastModified>"
                    r"<ETag>&quot;([0-9a-f]+)&quot;</ETag><Size>(\d+)</Size>", text):
                keys.append(k)
                sizes[k], etags[k] = int(size), etag
            assert int(xml_field(doc, "KeyCount")) <= 500
            if "<IsTruncated>true</IsTruncated>" not in text:
                break
            token = xml_field(doc, "NextContinuationToken")
        assert len(keys) == 1234 and keys == sorted(keys) and len(set(keys)) == 1234
        assert keys[7] == f"p/k0000007-size-{sizes[keys[7]]}"
        assert pages >= 3
        for k in (keys[0], keys[777], keys[-1]):
            r, body = req(s, "GET", f"/syn/{k}")
            assert r.status == 200 and len(body) == sizes[k]
            assert r.getheader("ETag").strip('"') == etags[k]
        r, doc = req(s, "GET", f"/syn?list-type=2&prefix={keys[5]}/")   # a "directory"
        assert int(xml_field(doc, "KeyCount")) == 0
        r, doc = req(s, "GET", f"/syn?list-type=2&prefix={keys[5]}")
        assert re.findall(r"<Key>([^<]*)</Key>", doc.decode()) == [keys[5]]
        r, doc = req(s, "GET", f"/syn?list-type=2&prefix=p/&start-after={keys[1231]}")
        assert re.findall(r"<Key>([^<]*)</Key>", doc.decode()) == keys[1232:]
        r, doc = req(s, "GET", "/syn?list-type=2&prefix=other/")
        assert int(xml_field(doc, "KeyCount")) == 0
    finally:
        assert s.stop() == 0
    assert re.search(r"synth-list: \d+ pages served", s.stderr), s.stderr
