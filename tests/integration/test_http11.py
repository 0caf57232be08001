"""HTTP/1.1 is pinned: an HTTPS endpoint that offers HTTP/2 (ALPN "h2") is spoken to in
HTTP/1.1, one request per connection. (HTTP/2 would multiplex every part of a transfer over
one connection, which the I/O threads' admission and the stall clock do not expect.)

The server is a local TLS server that offers h2 and http/1.1 and speaks only HTTP/1.1: it
records the protocol the client chose on each connection. Before, curl offered h2 and the
server took it, and the request then failed."""
import http.server
import ssl
import subprocess
import threading

import pytest

from test_transport import _Handler


@pytest.fixture
def alpn_server(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    chosen = []

    class H(_Handler):
        seen = []

        def setup(self):
            super().setup()
            chosen.append(self.connection.selected_alpn_protocol())

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{srv.server_address[1]}", cert, H, chosen
    srv.shutdown()


def test_https_endpoint_offering_h2_gets_http11(cli_nosrv, alpn_server):
    url, cert, handler, chosen = alpn_server
    env = cli_nosrv.env(AWS_CA_BUNDLE=str(cert))
    r = cli_nosrv.run("ls", "s3://tlsbucket/", "--endpoint-url", url, endpoint=False, env=env,
                      timeout=60)
    assert chosen and all(p == "http/1.1" for p in chosen), chosen
    assert r.rc == 0, r
    assert "hello.txt" in r.text
    assert handler.seen
