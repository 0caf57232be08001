"""Transport settings end to end through the CLI: TLS verification with AWS_CA_BUNDLE, and
HTTP proxies from the environment. Each uses a small local server, no S3 server needed."""
import http.server
import os
import ssl
import subprocess
import threading

import pytest

LIST_XML = (b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b'<Name>tlsbucket</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>'
            b'<IsTruncated>false</IsTruncated><Contents><Key>hello.txt</Key>'
            b'<LastModified>2026-12-02T12:00:00.000Z</LastModified><ETag>"abc"</ETag>'
            b'<Size>5</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = []

    def do_GET(self):
        type(self).seen.append((self.command, self.path, self.headers.get("Host")))
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(LIST_XML)))
        self.send_header("x-amz-request-id", "local-1")
        self.end_headers()
        self.wfile.write(LIST_XML)

    def log_message(self, *a):
        pass


def _serve(server):
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


@pytest.fixture
def tls_server(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    handler = type("H", (_Handler,), {"seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    _serve(srv)
    yield f"https://127.0.0.1:{srv.server_address[1]}", cert, handler
    srv.shutdown()


def test_tls_verified_against_system_store_fails(cli_nosrv, tls_server):
    url, _, handler = tls_server
    env = cli_nosrv.env()
    r = cli_nosrv.run("ls", "s3://tlsbucket/", "--endpoint-url", url, endpoint=False, env=env)
    assert r.rc == 1, r
    assert "TLS" in r.err or "certificate" in r.err, r
    assert handler.seen == []  # no request got through


def test_tls_with_ca_bundle_succeeds(cli_nosrv, tls_server):
    url, cert, handler = tls_server
    env = cli_nosrv.env(AWS_CA_BUNDLE=str(cert))
    r = cli_nosrv.run("ls", "s3://tlsbucket/", "--endpoint-url", url, endpoint=False, env=env)
    assert r.rc == 0, r
    assert "hello.txt" in r.text
    assert handler.seen and handler.seen[0][1].startswith("/tlsbucket")


def test_http_proxy_from_environment(cli_nosrv):
    """A plain-http endpoint reached through $http_proxy: the proxy receives the request in
    absolute form and answers it (the endpoint itself does not exist)."""
    handler = type("P", (_Handler,), {"seen": []})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    _serve(proxy)
    try:
        env = cli_nosrv.env(http_proxy=f"http://127.0.0.1:{proxy.server_address[1]}")
        env.pop("no_proxy", None)
        env.pop("NO_PROXY", None)
        # a name that does not resolve: only the proxy can answer
        r = cli_nosrv.run("ls", "s3://tlsbucket/", "--endpoint-url",
                          "http://s3.invalid.example:9000", "--force-path-style",
                          endpoint=False, env=env)
        assert r.rc == 0, r
        assert "hello.txt" in r.text
        method, path, host = handler.seen[0]
        assert method == "GET"
        assert path.startswith("http://s3.invalid.example:9000/tlsbucket")
    finally:
        proxy.shutdown()
