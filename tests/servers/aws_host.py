"""A loopback TLS server standing in for AWS hosts (access points, Multi-Region Access
Points...): its certificate names the given hosts, so a client built with test hooks and
S3FLASH_TEST_CONNECT_TO=127.0.0.1:PORT (libcurl's CURLOPT_CONNECT_TO), trusting the
certificate through AWS_CA_BUNDLE or ca_bundle, reaches it with AWS's URL, Host header and
TLS name. It records every request (method, raw path, lowercase headers, body) and answers
200: GET and HEAD with the 7 bytes b"payload", PUT with an ETag, DELETE, and a ListObjectsV2 with
one object, PREFIX + "a.bin" of 7 bytes. Shared by
tests/integration/test_arn.py and tests/python/test_arn.py.

sigv4a_private_key: the SigV4a key of credentials as the AWS SDKs derive it, written here
from aws-c-auth's description (no code shared with the client)."""
import contextlib
import hashlib
import hmac
import http.server
import ssl
import subprocess
import threading
import urllib.parse

PAYLOAD = b"payload"
# an access point and a Multi-Region Access Point, and their hosts by the endpoint rules
ACCOUNT = "123456789012"
AP_ARN = f"arn:aws:s3:us-west-2:{ACCOUNT}:accesspoint/myap"
AP_HOST = f"myap-{ACCOUNT}.s3-accesspoint.us-west-2.amazonaws.com"
MRAP_ARN = f"arn:aws:s3::{ACCOUNT}:accesspoint/mfzwi23gnjvgw.mrap"
MRAP_HOST = "mfzwi23gnjvgw.mrap.accesspoint.s3-global.amazonaws.com"
# P-256 group order
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def sigv4a_private_key(akid, secret):
    """aws-c-auth's derivation: HMAC-SHA256 keyed with "AWS4A"+secret over
    00000001 || label || 00 || akid || counter || 00000100 until k0 <= n-2; d = k0+1."""
    for counter in range(1, 255):
        fixed = (b"\x00\x00\x00\x01" + b"AWS4-ECDSA-P256-SHA256" + b"\x00" + akid.encode() +
                 bytes([counter]) + b"\x00\x00\x01\x00")
        k0 = int.from_bytes(hmac.new(b"AWS4A" + secret.encode(), fixed, hashlib.sha256).digest(),
                            "big")
        if k0 <= N - 2:
            return k0 + 1
    raise AssertionError("no key")


class Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = []
    stored = {}

    def log_message(self, *a):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        h = {k.lower(): v for k, v in self.headers.items()}
        type(self).seen.append((self.command, self.path, h, body))
        out = PAYLOAD if self.command in ("GET", "HEAD") else b""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query,
                                      keep_blank_values=True)
        path = urllib.parse.urlsplit(self.path).path
        status = 200
        if self.command == "GET" and "list-type" in query:
            out = self.listing(query.get("prefix", [""])[0], "encoding-type" in query)
        elif self.command == "POST" and "delete" in query:  # DeleteObjects: every key deleted
            out = (b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns='
                   b'"http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>')
        elif "/.s3flash-csi/" in path:  # the CSI controller's owner records: kept as written
            if self.command == "PUT":
                type(self).stored[path] = body
            elif self.command == "DELETE":
                type(self).stored.pop(path, None)
            elif path in type(self).stored:
                out = type(self).stored[path]
            else:
                status, out = 404, (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
                                    b'NoSuchKey</Code><Message>no such key</Message></Error>')
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Last-Modified", "Sun, 06 Dec 2026 12:00:00 GMT")
        self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
        self.send_header("x-amz-request-id", "arn-test-1")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    @staticmethod
    def listing(prefix, url_encoded):
        enc = (lambda v: urllib.parse.quote(v, safe="")) if url_encoded else (lambda v: v)
        return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
                'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>ap</Name>'
                f'<Prefix>{enc(prefix)}</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>'
                f'<IsTruncated>false</IsTruncated>{"<EncodingType>url</EncodingType>" if url_encoded else ""}'
                f'<Contents><Key>{enc(prefix + "a.bin")}</Key>'
                '<LastModified>2026-12-06T12:00:00.000Z</LastModified>'
                '<ETag>"0123456789abcdef0123456789abcdef"</ETag><Size>7</Size>'
                '<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>').encode()

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = handle_any


@contextlib.contextmanager
def serve(tmp_path, hosts):
    """Yields (port, certificate path, handler class whose .seen lists the requests)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    san = ",".join(f"DNS:{h}" for h in hosts)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={hosts[0]}", "-addext", f"subjectAltName={san}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    handler = type("H", (Recorder,), {"seen": [], "stored": {}})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1], cert, handler
    finally:
        srv.shutdown()
        t.join(timeout=10)
