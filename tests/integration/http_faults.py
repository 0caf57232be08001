"""A tiny S3-looking HTTP server that misbehaves on purpose (stdlib only).

The first path segment (the "bucket", path-style addressing) picks the fault:

  /truncated-xml/...   200, a ListObjectsV2 document cut off mid-element (Content-Length
                       matches what is sent: the HTTP body is whole, the XML is not)
  /malformed-xml/...   200, XML with mismatched tags
  /not-xml/...         200, a body that is not XML at all
  /short-body/...      GET of OBJECT (or of the Range asked for, as a 206) whose
                       Content-Length is larger than what is sent: 1000 bytes, then the
                       connection closes; a listing is cut the same way
  /range-ignored/...   like short-body, but a Range header is ignored: always 200 with the
                       object from its first byte (as some proxies and servers do)
  /star-total-short/...  HEAD: 200 with Content-Length SHORT_BODY_LEN; GET: a 206 whose
                       Content-Range is "bytes 0-(SHORT_BODY_LEN-1)/*" (total unknown), with
                       no Content-Length, chunked: SHORT_BODY_SENT bytes, then the last chunk
                       (a body that ends cleanly, short of what its head announced)
  /always-500/...      500 with an S3 error document (InternalError, a RequestId)
  /okay/...            200, a well-formed listing of one key, or GET of an object: 'hello'
  /list-same-token/... a listing that never ends: every page (one key, k-NNNN) is truncated
                       and names the same NextContinuationToken ("again")
  /list-cycle/...      a listing whose tokens go round: first page -> "A", A -> "B", B -> "A"
  /list-no-token/...   a truncated page without a NextContinuationToken, every time
  /list-long/...       an honest listing of LONG_PAGES pages, one key each (k-0000 ...), each
                       page's token naming the next; the last page is not truncated
  (a list-* bucket answers anything but a listing with 404 NoSuchKey; the requests of each
  are counted in hits, so a listing that loops shows as many hits. The same names with a
  directory bucket's suffix, e.g. list-cycle--use1-az4--x-s3, behave alike, and answer
  CreateSession (GET ?session) with a session that lasts an hour)

Every request is counted per fault in `server.hits` so tests can check retries are bounded.

    with FaultServer() as srv:
        url = srv.url   # http://127.0.0.1:PORT
"""

import http.server
import threading
import time
import urllib.parse
from collections import Counter

SHORT_BODY_LEN = 100_000   # size of OBJECT, what Content-Length claims
SHORT_BODY_SENT = 1_000    # what is actually sent before closing
OBJECT = bytes((i * 7 + i // 251) % 256 for i in range(SHORT_BODY_LEN))  # no two 1000-byte
                                                                         # windows alike

LIST_OK = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
           b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
           b'<Name>okay</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>'
           b'<IsTruncated>false</IsTruncated>'
           b'<Contents><Key>hello.txt</Key><LastModified>2026-12-02T12:00:00.000Z</LastModified>'
           b'<ETag>&quot;5d41402abc4b2a76b9719d911017c592&quot;</ETag><Size>5</Size>'
           b'<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')

TRUNCATED = LIST_OK[: LIST_OK.index(b"<Size>") + 3]
MALFORMED = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
             b'<ListBucketResult><Name>malformed-xml</Nmae><IsTruncated>false'
             b'</IsTruncated></ListBucketResult>')
NOT_XML = b"this is not XML, just some text from a confused proxy\n"
ERROR_500 = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
             b'<Error><Code>InternalError</Code><Message>We encountered an internal error.'
             b'</Message><RequestId>tx-fault-500-req</RequestId><HostId>fault</HostId></Error>')


LONG_PAGES = 40


def list_page(bucket, key, token=None, truncated=None):
    """A ListObjectsV2 page of one key; truncated (True) with `token` as its
    NextContinuationToken (None: no token element)."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f'<Name>{bucket}</Name><Prefix></Prefix><KeyCount>1</KeyCount>'
            f'<MaxKeys>1000</MaxKeys><IsTruncated>{"true" if truncated else "false"}'
            f'</IsTruncated>')
    if token is not None:
        body += f'<NextContinuationToken>{token}</NextContinuationToken>'
    body += (f'<Contents><Key>{key}</Key><LastModified>2026-12-02T12:00:00.000Z'
             f'</LastModified><ETag>&quot;5d41402abc4b2a76b9719d911017c592&quot;</ETag>'
             f'<Size>5</Size><StorageClass>STANDARD</StorageClass></Contents>'
             f'</ListBucketResult>')
    return body.encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FaultServer/1"

    def log_message(self, fmt, *args):  # keep pytest output clean
        pass

    def _fault(self):
        path = self.path.split("?", 1)[0].lstrip("/")
        return path.split("/", 1)[0]

    def _is_list(self):
        return "list-type=2" in self.path

    def _send(self, status, body, ctype="application/xml", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", "tx-fault-" + self._fault())
        self.send_header("ETag", '"5d41402abc4b2a76b9719d911017c592"')
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        fault = self._fault()
        with self.server.lock:
            self.server.hits[fault] += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if fault == "truncated-xml":
            self._send(200, TRUNCATED)
        elif fault == "malformed-xml":
            self._send(200, MALFORMED)
        elif fault == "not-xml":
            self._send(200, NOT_XML, ctype="text/plain")
        elif fault in ("short-body", "range-ignored"):
            self._cut_short(honour_range=(fault == "short-body"))
        elif fault == "star-total-short":
            self._star_total_short()
        elif fault == "always-500":
            self._send(500, ERROR_500)
        elif fault.startswith("list-"):
            self._listing(fault)
        elif fault == "okay":
            if self._is_list():
                self._send(200, LIST_OK)
            else:
                self._send(200, b"hello", ctype="text/plain")
        else:
            self._send(404, b'<?xml version="1.0"?><Error><Code>NoSuchBucket</Code>'
                            b'<Message>no such fault</Message></Error>')

    def _listing(self, fault):
        if self.path.split("?", 1)[-1] == "session":
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
            self._send(200, (f"<CreateSessionResult><Credentials><SessionToken>fault-session"
                             f"</SessionToken><SecretAccessKey>fault-secret</SecretAccessKey>"
                             f"<AccessKeyId>ASIAFAULT</AccessKeyId><Expiration>{expires}"
                             f"</Expiration></Credentials></CreateSessionResult>").encode())
            return
        kind = fault.split("--", 1)[0]  # a directory bucket's zone suffix left out
        if not self._is_list():
            self._send(404, b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code>'
                            b'<Message>no such key</Message></Error>')
            return
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        token = query.get("continuation-token", [None])[0]
        with self.server.lock:
            n = self.server.hits[fault]
        key = f"k-{n:04d}"
        if kind == "list-same-token":
            body = list_page(fault, key, "again", truncated=True)
        elif kind == "list-cycle":
            body = list_page(fault, key, "B" if token == "A" else "A", truncated=True)
        elif kind == "list-no-token":
            body = list_page(fault, key, None, truncated=True)
        else:  # list-long: page i (token "p<i>") holds k-<i>
            i = int(token[1:]) if token else 0
            last = i + 1 >= LONG_PAGES
            body = list_page(fault, f"k-{i:04d}", None if last else f"p{i + 1}",
                             truncated=not last)
        self._send(200, body)

    def _cut_short(self, honour_range):
        start = 0
        rng = self.headers.get("Range", "")
        if honour_range and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
        if self.command == "GET":
            with self.server.lock:
                self.server.ranges.append(rng)
        if start:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{SHORT_BODY_LEN - 1}/"
                                              f"{SHORT_BODY_LEN}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(SHORT_BODY_LEN - start))
        self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
        self.send_header("x-amz-request-id", "tx-fault-" + self._fault())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(OBJECT[start:start + SHORT_BODY_SENT])
            self.wfile.flush()
        self.close_connection = True

    def _star_total_short(self):
        if self.command == "GET":
            with self.server.lock:
                self.server.ranges.append(self.headers.get("Range", ""))
        self.send_response(200 if self.command == "HEAD" else 206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
        self.send_header("x-amz-request-id", "tx-fault-" + self._fault())
        if self.command == "HEAD":
            self.send_header("Content-Length", str(SHORT_BODY_LEN))
            self.end_headers()
            return
        self.send_header("Content-Range", f"bytes 0-{SHORT_BODY_LEN - 1}/*")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        body = OBJECT[:SHORT_BODY_SENT]
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        self.wfile.flush()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class FaultServer:
    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.hits = Counter()
        self.httpd.ranges = []  # Range header of every cut-short GET ("" when none)
        self.httpd.lock = threading.Lock()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def hits(self):
        return self.httpd.hits

    @property
    def ranges(self):
        return self.httpd.ranges

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":  # manual poking: python3 http_faults.py
    with FaultServer() as s:
        print(s.url, flush=True)
        threading.Event().wait()
