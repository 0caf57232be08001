"""A small HTTP proxy for the tests (Python 3 standard library only), run in the test's own
process: it tunnels CONNECT (for https:// URLs) and forwards absolute-form requests (for
http:// URLs), and records every request it got ("CONNECT host:port" or "GET
http://host:port/path"). It reaches loopback targets only. One request per client
connection: the forwarded request and its response carry `Connection: close`, so that the
client opens a new connection for its next request (no response framing to parse here).

    with ConnectProxy() as p:
        env["HTTP_PROXY"] = p.url
        ...
        p.requests   # ["GET http://127.0.0.1:8000/b/k", "CONNECT 127.0.0.1:8443", ...]

ConnectProxy(redirect=("127.0.0.1", PORT)) tunnels every CONNECT to that loopback address,
whatever host it names: a client sent to AWS's host names (an access point's) reaches a
loopback server through the proxy's own resolution, with the URL, the Host header and the
TLS name unchanged, as a corporate proxy would carry it (a wheel has no test hooks, so this
is how the Python package's tests reach tests/servers/aws_host.py).
"""
import socket
import threading
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _read_head(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
        if len(buf) > 1 << 20:
            return None, b""
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class ConnectProxy:
    def __init__(self, redirect=None):
        self.redirect = redirect
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stopping = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        self.thread.join(timeout=10)

    def seen(self):
        with self.lock:
            return list(self.requests)

    def _serve(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _handle(self, c):
        up = None
        try:
            head, rest = _read_head(c)
            if head is None:
                return
            lines = head.split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            with self.lock:
                self.requests.append(f"{method} {target}")
            if method == "CONNECT" and self.redirect:
                host, port = self.redirect
            elif method == "CONNECT":
                host, port = target.rsplit(":", 1)
            else:
                u = urlsplit(target)
                host, port = u.hostname, u.port or 80
            if host.strip("[]") not in LOOPBACK:
                c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            up = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
            if method == "CONNECT":
                c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    up.sendall(rest)
            else:
                path = u.path or "/"
                if u.query:
                    path += "?" + u.query
                hdrs = [h for h in lines[1:] if h.split(":", 1)[0].strip().lower() not in
                        ("connection", "proxy-connection", "keep-alive", "proxy-authorization")]
                out = "\r\n".join([f"{method} {path} {version}"] + hdrs +
                                  ["Connection: close"]) + "\r\n\r\n"
                up.sendall(out.encode("latin-1") + rest)
                t = threading.Thread(target=_pump, args=(c, up), daemon=True)
                t.start()
                rhead, rrest = _read_head(up)
                if rhead is None:
                    return
                rlines = [h for h in rhead.split("\r\n")
                          if h.split(":", 1)[0].strip().lower() not in ("connection", "keep-alive")]
                c.sendall(("\r\n".join(rlines + ["Connection: close"]) + "\r\n\r\n")
                          .encode("latin-1") + rrest)
                _pump(up, c)
                return
            t = threading.Thread(target=_pump, args=(c, up), daemon=True)
            t.start()
            _pump(up, c)
            t.join(timeout=30)
        except (OSError, ValueError):
            pass
        finally:
            for s in (c, up):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
