"""The fault-injecting proxy itself (tests/servers/faultproxy.py), in front of a tiny
http.server upstream started here (not RGW, so this runs in seconds): every action does what
it says, rules match what they say, the stats count, SIGTERM stops it."""

import hashlib
import http.client
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from faults import FAULTPROXY, s3_error, start_faultproxy
from helpers import wait_for

PATTERN = bytes((i * 31 + i // 251) % 256 for i in range(1 << 20))


def pattern(n):
    return PATTERN[:n]


class Upstream(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), UpstreamHandler)
        self.seen = []     # (method, path) of every request that reached it
        self.puts = []     # (path, body) of every complete upload
        self.partial = []  # (path, bytes received) of uploads cut short
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):
        pass  # resets and broken pipes are what these tests cause


class UpstreamHandler(http.server.BaseHTTPRequestHandler):
    """GET /obj/N: N bytes (Content-Length); /chunked/N: chunked; /close/N: read to close.
    PUT: the body (Content-Length or chunked) is kept; answers its length and SHA-256."""
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _note(self):
        with self.server.lock:
            self.server.seen.append((self.command, self.path))

    def _size(self):
        try:
            return int(self.path.split("?")[0].rsplit("/", 1)[1])
        except ValueError:
            return 0

    def do_GET(self, head=False):
        self._note()
        n, kind = self._size(), self.path.split("/")[1]
        body = pattern(n)
        if kind == "chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if not head:
                for i in range(0, n, 1000):
                    piece = body[i:i + 1000]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            return
        if kind == "close":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            if not head:
                self.wfile.write(body)
            self.close_connection = True
            return
        rng = self.headers.get("Range") or ""
        if rng.startswith("bytes=") and n:  # "bytes=A-B" or "bytes=A-": a 206
            a, _, b = rng[6:].partition("-")
            a, b = int(a), min(int(b) if b else n - 1, n - 1)
            self.send_response(206)
            self.send_header("Content-Length", str(b - a + 1))
            self.send_header("Content-Range", f"bytes {a}-{b}/{n}")
            self.send_header("ETag", '"etag-%d"' % n)
            self.end_headers()
            if not head:
                self.wfile.write(body[a:b + 1])
            return
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("ETag", '"etag-%d"' % n)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_PUT(self):
        self._note()
        if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.read(2)
        else:
            want = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(want)
            if len(body) < want:  # the connection ended mid-body
                with self.server.lock:
                    self.server.partial.append((self.path, len(body)))
                self.close_connection = True
                return
        with self.server.lock:
            self.server.puts.append((self.path, body))
        out = json.dumps({"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture(scope="module")
def upstream():
    srv = Upstream()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def module_proxy(upstream):
    p = start_faultproxy("127.0.0.1", upstream.server_address[1])
    yield p
    assert p.stop() == 0


@pytest.fixture
def proxy(module_proxy, upstream):
    module_proxy.reset()
    with upstream.lock:
        upstream.seen.clear()
        upstream.puts.clear()
        upstream.partial.clear()
    return module_proxy


def conn(proxy, timeout=10):
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)


def get(proxy, path, timeout=10):
    c = conn(proxy, timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


# ---- plain forwarding ---------------------------------------------------------------------

def test_forwards_with_keep_alive(proxy, upstream):
    c = conn(proxy)
    for n in (0, 1, 5000, 300000):
        c.request("GET", f"/obj/{n}")
        r = c.getresponse()
        assert r.status == 200
        assert r.read() == pattern(n)
    c.request("HEAD", "/obj/77")
    r = c.getresponse()
    assert r.getheader("Content-Length") == "77" and r.read() == b""
    data = pattern(200000)
    c.request("PUT", "/b/key?partNumber=1&uploadId=x", body=data)
    r = c.getresponse()
    assert json.loads(r.read()) == {"len": len(data),
                                    "sha256": hashlib.sha256(data).hexdigest()}
    c.close()
    st = proxy.stats()
    assert st["connections"] == 1  # all of it over one client connection
    assert st["requests"]["GET /obj/5000"] == 1
    assert st["requests"]["PUT /b/key"] == 1
    assert st["requests_total"] == 6 and st["faults_total"] == 0
    assert len(upstream.seen) == 6


def test_chunked_and_read_to_close(proxy):
    r, body = get(proxy, "/chunked/12345")
    assert r.status == 200 and body == pattern(12345)
    r, body = get(proxy, "/close/4321")
    assert r.status == 200 and body == pattern(4321)
    # a chunked upload
    c = conn(proxy)
    data = pattern(70000)
    c.request("PUT", "/b/chunked", body=iter([data[:30000], data[30000:]]),
              encode_chunked=True)
    assert json.loads(c.getresponse().read())["len"] == 70000
    c.close()


def test_expect_100_continue(proxy, upstream):
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.sendall(b"PUT /b/exp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
              b"Expect: 100-continue\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    s.sendall(b"hello")
    f = s.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 200")
    s.close()
    assert upstream.puts[-1] == ("/b/exp", b"hello")


# ---- actions --------------------------------------------------------------------------------

def test_respond_503_slowdown(proxy, upstream):
    proxy.set_faults([s3_error("SlowDown", 503, {"method": "GET", "path": "^/obj/"})])
    r, body = get(proxy, "/obj/100")
    assert r.status == 503
    assert b"<Code>SlowDown</Code>" in body
    rid = r.getheader("x-amz-request-id")
    assert rid and f"<RequestId>{rid}</RequestId>".encode() in body
    assert upstream.seen == []  # answered without forwarding
    # a 500 with a custom body and headers, on a PUT whose body is read and dropped: the
    # connection stays usable
    proxy.set_faults([{"match": {"method": "PUT"}, "action": "respond", "status": 500,
                       "headers": {"x-test": "yes"}, "body": "boom"}])
    c = conn(proxy)
    c.request("PUT", "/b/k", body=pattern(10000))
    r = c.getresponse()
    assert (r.status, r.getheader("x-test"), r.read()) == (500, "yes", b"boom")
    c.request("GET", "/obj/10")
    r = c.getresponse()
    assert r.status == 200 and r.read() == pattern(10)
    c.close()
    assert proxy.stats()["faults"] == {"0:respond": 2}  # stats outlive a change of rules


def test_truncate_response(proxy):
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "truncate_response",
                       "at": 1000}])
    c = conn(proxy)
    c.request("GET", "/obj/100000")
    r = c.getresponse()
    assert r.getheader("Content-Length") == "100000"  # the true length
    with pytest.raises(http.client.IncompleteRead) as ei:
        r.read()
    assert len(ei.value.partial) == 1000
    assert ei.value.partial == pattern(1000)
    c.close()


def test_reset_response_body(proxy):
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "reset_response_body_at",
                       "at": 50000}])
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.sendall(b"GET /obj/400000 HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    with pytest.raises(ConnectionResetError):
        while True:
            d = s.recv(65536)
            if not d:
                break  # a FIN would end here: not what is wanted
            got += d
    s.close()
    body = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
    assert len(body) <= 50000  # never more than N body bytes
    assert body == pattern(len(body))
    assert proxy.stats()["log"][-1]["at"] == 50000


def test_reset_response_random_offset_reproducible(proxy):
    rule = {"match": {"path": "/obj/"}, "action": "reset_response_body_at", "at": "random",
            "seed": 11}
    offsets = []
    for _ in range(2):
        proxy.reset()
        proxy.set_faults([rule])
        for _ in range(3):
            with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
                get(proxy, "/obj/100000")
        offsets.append([e["at"] for e in proxy.stats()["log"]])
    assert offsets[0] == offsets[1]  # same seed, same offsets
    assert all(0 <= a < 100000 for a in offsets[0])
    assert len(set(offsets[0])) == 3


def test_reset_request_body(proxy, upstream):
    proxy.set_faults([{"match": {"method": "PUT", "max_count": 1},
                       "action": "reset_request_body_at", "at": 1000}])
    c = conn(proxy)
    with pytest.raises((ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
        c.request("PUT", "/b/up", body=pattern(2 << 20))
        c.getresponse().read()
    c.close()
    wait_for(lambda: upstream.partial, 10, "the upstream to see the cut connection")
    assert upstream.puts == []  # the upstream never got a whole body
    assert upstream.partial == [("/b/up", 1000)]  # but the first N bytes of it
    assert proxy.stats()["faults"] == {"0:reset_request_body_at": 1}
    # the next upload goes through
    c = conn(proxy)
    c.request("PUT", "/b/up", body=pattern(3000))
    assert json.loads(c.getresponse().read())["len"] == 3000
    c.close()


def test_drop_response(proxy, upstream):
    """The request reaches the upstream whole (it acts on it), the client gets an RST and not
    one byte of the response; the next request on a new connection goes through."""
    proxy.set_faults([{"match": {"method": "PUT", "max_count": 1}, "action": "drop_response"}])
    body = pattern(300000)
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.sendall(b"PUT /b/dropped HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    got = b""
    with pytest.raises(ConnectionResetError):
        while True:
            d = s.recv(65536)
            if not d:
                break  # a FIN would end here: not what is wanted
            got += d
    s.close()
    assert got == b""  # no byte of the response
    with upstream.lock:
        assert upstream.puts == [("/b/dropped", body)]  # the server acted
    log = proxy.stats()["log"]
    assert log[-1]["action"] == "drop_response" and log[-1]["acted"] is not None
    assert proxy.stats()["faults"] == {"0:drop_response": 1}
    c = conn(proxy)
    c.request("PUT", "/b/dropped", body=pattern(3000))
    assert json.loads(c.getresponse().read())["len"] == 3000
    c.close()


def test_corrupt_response_byte(proxy):
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "corrupt_response_byte",
                       "at": 123}])
    r, body = get(proxy, "/obj/70000")
    want = pattern(70000)
    assert len(body) == len(want)
    diff = [i for i in range(len(want)) if body[i] != want[i]]
    assert diff == [123]
    assert body[123] == want[123] ^ 1
    # chunked too, at an offset past the first chunk, with a chosen xor
    proxy.set_faults([{"match": {"path": "/chunked/"}, "action": "corrupt_response_byte",
                       "at": 2500, "xor": 0x80}])
    r, body = get(proxy, "/chunked/9000")
    want = pattern(9000)
    assert [i for i in range(9000) if body[i] != want[i]] == [2500]
    assert body[2500] == want[2500] ^ 0x80


def test_stall_response(proxy):
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "stall", "seconds": 1.5,
                       "at": 100, "max_count": 1}])
    # a client with a short timeout gives up
    c = conn(proxy, timeout=0.4)
    c.request("GET", "/obj/5000")
    r = c.getresponse()
    with pytest.raises((socket.timeout, TimeoutError)):
        r.read()
    c.close()
    # a patient one gets every byte, late
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "stall", "seconds": 1.0,
                       "at": 100}])
    t0 = time.monotonic()
    r, body = get(proxy, "/obj/5000")
    assert time.monotonic() - t0 >= 0.95
    assert body == pattern(5000)
    # the log says when the request came and when the stall began (CLOCK_MONOTONIC)
    e = proxy.stats()["log"][-1]
    assert e["action"] == "stall" and e["at"] == 100
    assert t0 <= e["time"] <= e["acted"] <= t0 + 0.5
    assert proxy.stats()["log"][0]["acted"] is not None  # the first one stalled too


def test_stall_request(proxy, upstream):
    proxy.set_faults([{"match": {"method": "PUT"}, "action": "stall", "seconds": 0.8,
                       "direction": "request", "at": 10}])
    t0 = time.monotonic()
    c = conn(proxy)
    c.request("PUT", "/b/s", body=pattern(20000))
    assert json.loads(c.getresponse().read())["len"] == 20000
    assert time.monotonic() - t0 >= 0.75
    c.close()


def test_release_ends_a_hold(proxy, upstream):
    """POST /release ends a delay and a request stall of the rule named (held for 600 s
    otherwise), for the request it holds and for those it fires on later; the other rules
    still hold."""
    proxy.set_faults([{"match": {"path": "/obj/1$"}, "action": "delay", "seconds": 600},
                      {"match": {"method": "PUT"}, "action": "stall", "seconds": 600,
                       "direction": "request", "at": 10},
                      {"match": {"path": "/obj/2$"}, "action": "delay", "seconds": 600}])
    got = {}

    def run(name, fn):
        got[name] = fn()

    def put():
        c = conn(proxy, timeout=30)
        c.request("PUT", "/b/held", body=pattern(5000))
        return json.loads(c.getresponse().read())["len"]

    ts = [threading.Thread(target=run, args=("get", lambda: get(proxy, "/obj/1", 30)[1])),
          threading.Thread(target=run, args=("put", put))]
    for t in ts:
        t.start()
    def held():
        log = proxy.stats()["log"]
        return any(e["rule"] == 0 for e in log) and \
            any(e["rule"] == 1 and e["acted"] for e in log)
    wait_for(held, 10, "both requests held")
    assert not got
    assert proxy.release(0) == 1
    ts[0].join(10)
    assert got.get("get") == pattern(1) and "put" not in got
    assert proxy.release(1) == 1
    ts[1].join(10)
    assert got.get("put") == 5000
    # released for later requests too; rule 2 was not released
    t0 = time.monotonic()
    assert get(proxy, "/obj/1")[1] == pattern(1)
    assert time.monotonic() - t0 < 5
    with pytest.raises((socket.timeout, TimeoutError)):
        get(proxy, "/obj/2", timeout=0.5)
    assert proxy.release() == 3
    with pytest.raises(Exception, match="400"):
        proxy.release(7)


def test_delay_and_throttle(proxy):
    proxy.set_faults([{"match": {"path": "/obj/1$"}, "action": "delay", "seconds": 0.5}])
    t0 = time.monotonic()
    r, body = get(proxy, "/obj/1")
    assert time.monotonic() - t0 >= 0.45 and body == pattern(1)
    proxy.set_faults([{"match": {"path": "/obj/"}, "action": "throttle",
                       "bytes_per_second": 400000}])
    t0 = time.monotonic()
    r, body = get(proxy, "/obj/200000")
    took = time.monotonic() - t0
    assert body == pattern(200000)
    assert 0.4 <= took < 5, took
    # upload throttled
    proxy.set_faults([{"match": {"method": "PUT"}, "action": "throttle",
                       "bytes_per_second": 400000, "direction": "request"}])
    t0 = time.monotonic()
    c = conn(proxy)
    c.request("PUT", "/b/t", body=pattern(200000))
    assert json.loads(c.getresponse().read())["len"] == 200000
    c.close()
    assert time.monotonic() - t0 >= 0.4


# ---- matching -------------------------------------------------------------------------------

def statuses(proxy, path, n):
    out = []
    c = conn(proxy)
    for _ in range(n):
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        out.append(r.status)
    c.close()
    return out


def test_nth_every_max_count(proxy):
    proxy.set_faults([s3_error("InternalError", 500, {"path": "/obj/", "nth": 2})])
    assert statuses(proxy, "/obj/10", 4) == [200, 500, 200, 200]
    proxy.reset()
    proxy.set_faults([s3_error("SlowDown", 503, {"every": 3})])
    assert statuses(proxy, "/obj/10", 7) == [200, 200, 503, 200, 200, 503, 200]
    proxy.reset()
    proxy.set_faults([s3_error("SlowDown", 503, {"max_count": 2})])
    assert statuses(proxy, "/obj/10", 4) == [503, 503, 200, 200]
    rules = proxy.faults()
    assert rules[0]["matched"] == 4 and rules[0]["fired"] == 2


def test_probability_with_seed(proxy):
    rule = s3_error("SlowDown", 503, {"probability": 0.3, "seed": 42})
    runs = []
    for _ in range(2):
        proxy.reset()
        proxy.set_faults([rule])
        runs.append(statuses(proxy, "/obj/3", 40))
    assert runs[0] == runs[1]
    fired = runs[0].count(503)
    assert 3 <= fired <= 25
    assert proxy.stats()["faults_total"] == fired


def test_match_method_path_query(proxy):
    proxy.set_faults([
        s3_error("SlowDown", 503, {"method": "GET", "query": "partNumber=2"}),
        s3_error("InternalError", 500, {"method": "HEAD"}),
    ])
    assert statuses(proxy, "/obj/5?partNumber=1", 1) == [200]
    assert statuses(proxy, "/obj/5?partNumber=2&x=1", 1) == [503]
    c = conn(proxy)
    c.request("HEAD", "/obj/5")
    assert c.getresponse().status == 500
    c.close()
    st = proxy.stats()
    assert st["faults"] == {"0:respond": 1, "1:respond": 1}
    assert st["requests"]["GET /obj/5"] == 2


def test_bad_rules_are_refused(proxy):
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as ei:
        proxy.set_faults([{"action": "explode"}])
    assert ei.value.code == 400
    with pytest.raises(urllib.error.HTTPError):
        proxy.set_faults([{"action": "delay", "match": {"path": "("}}])
    assert proxy.faults() == []


def test_append_and_reset(proxy):
    proxy.set_faults([s3_error("SlowDown", 503, {"nth": 1})])
    assert proxy.set_faults([s3_error("InternalError", 500, {"nth": 2})], append=True) == 2
    assert statuses(proxy, "/obj/1", 3) == [503, 500, 200]
    proxy.reset()
    st = proxy.stats()
    assert st["requests_total"] == 0 and st["faults"] == {} and proxy.faults() == []


# ---- the process ------------------------------------------------------------------------------

def test_upstream_down_resets_the_client():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with start_faultproxy("127.0.0.1", port) as p:
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            get(p, "/obj/1")


def test_sigterm_exits_cleanly(upstream):
    p = start_faultproxy("127.0.0.1", upstream.server_address[1])
    c = conn(p)  # an open keep-alive connection does not hold it up
    c.request("GET", "/obj/10")
    c.getresponse().read()
    t0 = time.monotonic()
    assert p.stop() == 0
    assert time.monotonic() - t0 < 5
    c.close()


def test_refuses_a_non_loopback_upstream():
    r = subprocess.run([sys.executable, str(FAULTPROXY), "--upstream", "192.0.2.1:80"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "loopback" in r.stderr



def wait_acted(p):
    """Until the proxy has acted on a fault (its log)."""
    wait_for(lambda: any(e.get("acted") for e in p.stats()["log"]), 10, "the proxy to act")

def test_sigterm_during_a_stall(upstream):
    p = start_faultproxy("127.0.0.1", upstream.server_address[1])
    p.set_faults([{"action": "stall", "seconds": 60}])
    c = conn(p, timeout=30)
    c.request("GET", "/obj/100")
    wait_acted(p)
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5
    p.stop()
    c.close()


# ---- the server killed: /down and /up -------------------------------------------------------

@pytest.mark.parametrize("mode", ["refuse", "reset"])
def test_down_kills_connections_and_comes_back(proxy, mode):
    # a response in progress (throttled) is reset at once, mid-body
    proxy.set_faults([{"match": {"path": "^/obj/"}, "action": "throttle",
                       "bytes_per_second": 200000}])
    c = conn(proxy)
    c.request("GET", "/obj/1000000")
    r = c.getresponse()
    assert r.status == 200
    got = r.read(1000)
    t0 = time.monotonic()
    proxy.down(mode)
    with pytest.raises((ConnectionError, http.client.IncompleteRead, OSError)):
        while True:
            d = r.read(65536)
            if not d:
                raise http.client.IncompleteRead(got)
            got += d
    assert time.monotonic() - t0 < 3
    c.close()
    assert proxy.stats()["down"] == mode
    # new connections: refused, or accepted and reset
    if mode == "refuse":
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    else:
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            get(proxy, "/obj/10")
    st = proxy.stats()
    assert st["killed"] == 1
    assert st["refused"] == (0 if mode == "refuse" else 1)
    proxy.up()
    proxy.set_faults([])
    r, body = get(proxy, "/obj/5000")
    assert r.status == 200 and body == pattern(5000)
    assert proxy.stats()["down"] is None


def test_down_with_seconds_comes_back_by_itself(proxy):
    proxy.down("refuse", seconds=0.5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    deadline = time.monotonic() + 5
    while True:
        try:
            r, body = get(proxy, "/obj/100")
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert r.status == 200 and body == pattern(100)
    # reset also brings it up
    proxy.down("refuse")
    proxy.reset()
    r, body = get(proxy, "/obj/10")
    assert r.status == 200


def test_down_mid_request_body(proxy, upstream):
    proxy.set_faults([{"match": {"method": "PUT"}, "action": "stall", "direction": "request",
                       "at": 1000, "seconds": 0.5}])
    c = conn(proxy)
    c.putrequest("PUT", "/b/killed")
    c.putheader("Content-Length", "100000")
    c.endheaders()
    c.send(pattern(5000))
    wait_acted(proxy)
    proxy.down("refuse")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, OSError)):
        c.send(pattern(95000))
        c.getresponse().read()
    c.close()
    proxy.up()
    with upstream.lock:
        assert not any(p == "/b/killed" for p, _ in upstream.puts)


# ---- answers well formed but not what was asked -------------------------------------------

def ranged_get(c, path, rng):
    c.request("GET", path, headers={"Range": rng})
    r = c.getresponse()
    return r, r.read()


def test_short_range(proxy, tmp_path):
    proxy.set_faults([{"match": {"method": "GET", "nth": 1}, "action": "short_range",
                       "bytes": 1000},
                      {"match": {"method": "GET", "nth": 2}, "action": "short_range"}])
    c = conn(proxy)
    r, body = ranged_get(c, "/obj/100000", "bytes=5000-14999")
    assert r.status == 206 and r.getheader("Content-Range") == "bytes 5000-5999/100000"
    assert r.getheader("Content-Length") == "1000" and body == pattern(100000)[5000:6000]
    r, body = ranged_get(c, "/obj/100000", "bytes=0-9999")  # fraction 0.5 by default
    assert r.getheader("Content-Range") == "bytes 0-4999/100000" and body == pattern(5000)
    r, body = ranged_get(c, "/obj/100000", "bytes=0-9")  # no rule fires: the real answer
    assert r.getheader("Content-Range") == "bytes 0-9/100000" and body == pattern(10)
    c.close()
    st = proxy.stats()
    assert st["connections"] == 1  # the rewritten answers keep the connection usable
    assert [e["range"] for e in st["log"]] == ["bytes=5000-14999", "bytes=0-9999", "bytes=0-9"]
    assert [e["action"] for e in st["log"]] == ["short_range", "short_range", None]


def test_other_range(proxy):
    proxy.set_faults([{"match": {"method": "GET"}, "action": "other_range", "shift": 100}])
    c = conn(proxy)
    r, body = ranged_get(c, "/obj/50000", "bytes=1000-1999")
    assert r.status == 206 and r.getheader("Content-Range") == "bytes 1100-1999/50000"
    assert body == pattern(50000)[1100:2000]
    c.close()


def test_whole_object(proxy, tmp_path):
    proxy.set_faults([{"match": {"method": "GET", "nth": 1}, "action": "whole_object"},
                      {"match": {"method": "GET", "nth": 2}, "action": "whole_object",
                       "object_file": str(tmp_path / "obj")}])
    (tmp_path / "obj").write_bytes(pattern(30000))
    c = conn(proxy)
    r, body = ranged_get(c, "/obj/30000", "bytes=100-199")
    assert r.status == 200 and r.getheader("Content-Range") is None
    assert len(body) == 30000 and body[100:200] == pattern(30000)[100:200]
    assert body[:100] == b"\xa5" * 100 and body[200:] == b"\xa5" * 29800  # filler
    r, body = ranged_get(c, "/obj/30000", "bytes=100-199")
    assert r.status == 200 and body == pattern(30000)  # the real object from the file
    c.close()


def test_etag_rewritten(proxy):
    proxy.set_faults([{"match": {"method": "GET", "nth": 1}, "action": "etag"},
                      {"match": {"method": "GET", "nth": 2}, "action": "etag",
                       "value": '"other"'},
                      {"match": {"method": "HEAD"}, "action": "etag", "value": '"h"'}])
    c = conn(proxy)
    r, body = ranged_get(c, "/obj/4000", "bytes=10-19")
    assert r.status == 206 and r.getheader("ETag") == '"' + "0" * 32 + '"'
    assert r.getheader("Content-Range") == "bytes 10-19/4000" and body == pattern(20)[10:]
    c.request("GET", "/obj/4000")
    r = c.getresponse()
    assert r.getheader("ETag") == '"other"' and r.read() == pattern(4000)
    c.request("HEAD", "/obj/4000")
    r = c.getresponse()
    assert r.getheader("ETag") == '"h"' and r.getheader("Content-Length") == "4000"
    assert r.read() == b""
    c.close()


def test_range_rewrites_relay_other_answers(proxy):
    """A rewrite that needs a 206 leaves any other answer as it is."""
    proxy.set_faults([{"match": {"method": "GET"}, "action": a}
                      for a in ("short_range", "other_range", "whole_object")][:1])
    r, body = get(proxy, "/obj/3000")  # a 200: nothing to shorten
    assert r.status == 200 and body == pattern(3000)
    r, body = get(proxy, "/chunked/3000")
    assert r.status == 200 and body == pattern(3000)
