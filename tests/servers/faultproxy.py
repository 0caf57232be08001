#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 proxy for the tests (Python 3 standard library only).

It sits between a client and one S3 server on loopback, forwards requests with keep-alive, and
applies faults per request, chosen by rules set over a small control API:

    python3 tests/servers/faultproxy.py --listen 127.0.0.1:0 --upstream 127.0.0.1:PORT \\
        [--print-ports] [--port-file F --control-port-file G] [--verbose]

The proxy parses the framing of each request and response (request line, headers,
Content-Length or chunked bodies, bodies read to the close) so a fault can act at a body
offset. It never rewrites Host (SigV4 signatures stay valid); it drops `Expect:
100-continue` and answers it itself. It connects only to the loopback upstream it is given.

Control API (JSON over HTTP on the control port):

    POST /faults   {"rules": [RULE, ...]} (or a bare list): replace the rules;
                   {"append": true, "rules": [...]} adds to them
    GET  /faults   the rules in force, with how often each matched and fired
    GET  /stats    {"requests": {"PUT /b/k": 3, ...}, "requests_total": n,
                    "faults": {"0:respond": 2, ...}, "faults_total": n, "connections": n,
                    "down": null | "refuse" | "reset", "killed": n (connections reset by
                    /down), "refused": n (connections reset while down in "reset" mode),
                    "log": [{"method", "path", "query", "rule", "action", "at", "time",
                             "acted"}, ...]}   ("time": when the request came, "acted": when
                    its point fault took effect, both time.monotonic(), CLOCK_MONOTONIC)
    POST /reset    drop every rule and zero the stats (and come back up if down)
    POST /down     {"mode": "refuse" | "reset", "seconds": S}: the server is killed. Every
                   client connection (and its upstream connection) is reset at once, even
                   mid-request; then "refuse" (the default) closes the listener, so that new
                   connections are refused (ECONNREFUSED), and "reset" accepts them and
                   resets them at once (counted in "refused"). With "seconds", the proxy
                   comes back up by itself after S seconds; else on POST /up
    POST /up       listen (on the same port) and forward again
    POST /release  {"rule": I} (or {} for every rule): end the stall or delay of rule I now,
                   for the requests it holds and for those it fires on later (a hold that
                   the test lifts when it has seen what it waits for, instead of a guess
                   at how long that takes)

RULE = {"match": MATCH, "action": NAME, ...parameters}. MATCH (every field optional):
    "method": "PUT"            exact, case-insensitive
    "path": "^/bucket/key$"    regular expression searched in the path (no query)
    "query": "partNumber=2"    substring of the query string
    "nth": 2                   fire only on the 2nd matching request (1-based)
    "every": 3                 fire on every 3rd matching request (true: every one, the
                               default when neither nth nor probability is given)
    "probability": 0.2, "seed": 7   fire with this probability (reproducible with the seed)
    "max_count": 5             fire at most this many times
Every rule counts the requests it matches; the first rule that fires decides the fault of a
request (one fault per request: the later ones do not fire on it). Actions:
    reset_request_body_at   "at": N | "random"   accept N bytes of the request body (forwarded
                            upstream), then reset the client connection (SO_LINGER 0: RST)
    reset_response_body_at  "at": N | "random"   forward the response head and N body bytes,
                            then RST
    stall                   "seconds": S, "at": N (default 0), "direction": "response" |
                            "request": stop forwarding at body offset N for S seconds
    respond                 "status": 503, "headers": {...}, "body": "...", or
                            "s3_error": {"code": "SlowDown", "message": "..."} for an S3 error
                            document with x-amz-request-id; answered without forwarding
                            (with a Date header unless "headers" gives one)
    truncate_response       "at": N | "random"   response head with the true Content-Length,
                            N body bytes, then close (FIN)
    corrupt_response_byte   "at": N | "random", "xor": 1   flip bits of the byte at offset N
    delay                   "seconds": S   latency before the request is forwarded
    throttle                "bytes_per_second": B, "direction": "response" | "request" | "both";
                            "client_rcvbuf": N shrinks the client connection's receive buffer
                            to N bytes first, so that a throttled request body waits in the
                            client's send queue (unacknowledged), as on a slow link, instead
                            of in the proxy's socket buffer
    drop_response           forward the request, read the whole upstream response (so the
                            server has acted on the request), then reset the client
                            connection (RST) without sending any of the response: a
                            response lost after the server committed
  Answers that are well formed but not what was asked (forwarded upstream, the answer
  rewritten; a response of another kind, such as an error, is relayed as it is):
    short_range             to a 206 "bytes A-B/T": a shorter consistent 206, "bytes A-B'/T"
                            with B' < B, its Content-Length and the first B'-A+1 real bytes;
                            "bytes": N to keep, or "fraction": F of them (default 0.5); at
                            least 1, at most all but 1
    other_range             to a 206 "bytes A-B/T": a consistent 206 for another range,
                            "bytes A+S-B/T" with the real bytes from A+S ("shift": S,
                            default 1, at most B-A)
    whole_object            to a 206 "bytes A-B/T": a 200 with Content-Length T, as a server
                            that ignores Range answers; bytes A-B are the real ones, the others
                            come from "object_file" (a local file with the object's bytes)
                            when given, else are "fill" bytes (default 0xA5)
    etag                    rewrite the ETag response header to "value" (default a quoted 32
                            hex zeros): a gateway that ignores If-Match, or an object replaced
Every log entry also carries "done", when its response was relayed in full (CLOCK_MONOTONIC;
absent for one cut short), and the request's Range header ("range", or null) and its
x-amz-request-payer header ("request_payer", or null), and the access key id it is signed with
("access_key", from SigV4's Authorization header, or null), and its x-amz-* headers,
User-Agent, Range, Content-Type and Content-Length ("headers": {lower-case name: value}).
"random" offsets are uniform within the body, drawn from the rule's seed ("seed", default 0).
An offset past the end of a body is clamped to its last byte, so the fault lands mid-body.

If the upstream cannot be reached or breaks mid-response, the client connection is reset.
SIGTERM (or SIGINT) stops the proxy cleanly: listeners closed, connections closed, exit 0.
"""

import argparse
import email.utils
import ipaddress
import json
import os
import random
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_HEAD = 64 * 1024          # request or response head
_NOTED = ("user-agent", "range", "content-type", "content-length")  # beside x-amz-*
MAX_LINE = 8 * 1024           # chunk-size line, trailer line
IO_CHUNK = 64 * 1024
CLIENT_IDLE_S = 600           # an idle keep-alive client connection is closed after this
UPSTREAM_TIMEOUT_S = 300      # no byte from the upstream for this long: give up
LOG_MAX = 2000                # entries kept in the stats log

ACTIONS = {"reset_request_body_at", "reset_response_body_at", "stall", "respond",
           "truncate_response", "corrupt_response_byte", "delay", "throttle",
           "drop_response"}
REWRITES = {"short_range", "other_range", "whole_object", "etag"}  # answers rewritten
ACTIONS |= REWRITES


class Abort(Exception):
    """The exchange ends here (a fault did it, or a peer went away)."""


class ProtocolError(Exception):
    pass


# ---- buffered socket reading ------------------------------------------------------------

class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.eof = False

    def _fill(self):
        if self.eof:
            return False
        try:
            data = self.sock.recv(IO_CHUNK)
        except (ConnectionError, OSError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_until(self, sep, limit):
        """Bytes up to and including `sep`; b"" on a clean EOF before any byte."""
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                out = bytes(self.buf[:i + len(sep)])
                del self.buf[:i + len(sep)]
                return out
            if len(self.buf) > limit:
                raise ProtocolError("line or head too long")
            start = max(0, len(self.buf) - len(sep) + 1)
            if not self._fill():
                if self.buf:
                    raise ProtocolError("connection closed mid-head")
                return b""

    def read_some(self, n):
        """Up to n bytes (at least 1), b"" at EOF."""
        if not self.buf and not self._fill():
            return b""
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_exact(self, n):
        out = bytearray()
        while len(out) < n:
            d = self.read_some(n - len(out))
            if not d:
                raise ProtocolError("connection closed mid-body")
            out += d
        return bytes(out)


def parse_head(head):
    """(first line, [(name, value)]) of a request or response head."""
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = []
    for ln in lines[1:]:
        if not ln:
            continue
        if ":" not in ln:
            raise ProtocolError(f"bad header line {ln!r}")
        k, v = ln.split(":", 1)
        headers.append((k.strip(), v.strip()))
    return first, headers


def header(headers, name):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def build_head(first, headers):
    return ("\r\n".join([first] + [f"{k}: {v}" for k, v in headers]) + "\r\n\r\n").encode(
        "latin-1")


def body_segments(conn, framing, length):
    """Yield ("f", framing bytes) and ("d", body data) pieces of a body as they arrive."""
    if framing == "length":
        left = length
        while left:
            d = conn.read_some(min(left, IO_CHUNK))
            if not d:
                raise ProtocolError("connection closed mid-body")
            left -= len(d)
            yield "d", d
    elif framing == "chunked":
        while True:
            line = conn.read_until(b"\r\n", MAX_LINE)
            if not line:
                raise ProtocolError("connection closed in a chunked body")
            yield "f", line
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size line {line!r}") from None
            if size == 0:
                while True:
                    t = conn.read_until(b"\r\n", MAX_LINE)
                    if not t:
                        raise ProtocolError("connection closed in chunked trailers")
                    yield "f", t
                    if t == b"\r\n":
                        return
            left = size
            while left:
                d = conn.read_some(min(left, IO_CHUNK))
                if not d:
                    raise ProtocolError("connection closed mid-chunk")
                left -= len(d)
                yield "d", d
            yield "f", conn.read_exact(2)
    elif framing == "close":
        while True:
            d = conn.read_some(IO_CHUNK)
            if not d:
                return
            yield "d", d


def request_framing(headers):
    te = (header(headers, "transfer-encoding") or "").lower()
    if "chunked" in te:
        return "chunked", None
    cl = header(headers, "content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise ProtocolError(f"bad Content-Length {cl!r}") from None
        return ("length", n) if n > 0 else ("none", 0)
    return "none", 0


def response_framing(method, status, headers):
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return "none", 0
    te = (header(headers, "transfer-encoding") or "").lower()
    if "chunked" in te:
        return "chunked", None
    cl = header(headers, "content-length")
    if cl is not None:
        n = int(cl)
        return ("length", n) if n > 0 else ("none", 0)
    return "close", None


def rst(sock):
    """Close with a reset (RST), not a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def kill(sock):
    """Reset a socket another thread may be blocked on: RST on its close, and wake the
    blocked recv now."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def fin(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


# ---- rules ------------------------------------------------------------------------------

class Rule:
    def __init__(self, spec, index):
        if not isinstance(spec, dict):
            raise ValueError("a rule is an object")
        self.spec = spec
        self.index = index
        self.action = spec.get("action")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")
        m = spec.get("match") or {}
        if not isinstance(m, dict):
            raise ValueError("match is an object")
        self.method = (m.get("method") or "").upper() or None
        self.path_re = re.compile(m["path"]) if m.get("path") else None
        self.query = m.get("query")
        self.nth = m.get("nth")
        every = m.get("every")
        self.every = 1 if every is True else every
        self.probability = m.get("probability")
        if self.nth is None and self.every is None and self.probability is None:
            self.every = 1
        self.max_count = m.get("max_count")
        if self.nth is not None and self.max_count is None:
            self.max_count = 1
        seed = m.get("seed", spec.get("seed", 0))
        self.match_rng = random.Random(seed)
        self.offset_rng = random.Random(f"{seed}:offsets")
        self.matched = 0
        self.fired = 0
        self.released = threading.Event()  # POST /release: stall and delay no longer wait
        for key in ("at", "seconds", "bytes_per_second", "status"):
            v = spec.get(key)
            if v is not None and not (isinstance(v, (int, float)) or v == "random"):
                raise ValueError(f"{key} must be a number")

    def decide(self, method, path, query, may_fire=True):
        """Called under the proxy's lock for every request: does this rule fire for it?
        Every rule counts the requests it matches, also those another rule took
        (may_fire False), so "nth" is the nth matching request whatever the others do."""
        if self.method and method.upper() != self.method:
            return False
        if self.path_re and not self.path_re.search(path):
            return False
        if self.query and self.query not in query:
            return False
        self.matched += 1
        if self.max_count is not None and self.fired >= self.max_count:
            return False
        if self.nth is not None:
            ok = self.matched == self.nth
        elif self.probability is not None:
            ok = self.match_rng.random() < float(self.probability)
        else:
            ok = self.matched % int(self.every) == 0
        ok = ok and may_fire
        if ok:
            self.fired += 1
        return ok

    def offset(self, length):
        """The body offset of a point fault for a body of `length` bytes (None: unknown)."""
        at = self.spec.get("at", 0)
        if at == "random":
            return self.offset_rng.randrange(length) if length else 0
        at = int(at)
        if length:
            at = min(at, length - 1)
        return max(0, at)

    def describe(self):
        d = dict(self.spec)
        d["matched"] = self.matched
        d["fired"] = self.fired
        return d


class Fault:
    """A rule that fired, with what it needs while one exchange runs."""

    def __init__(self, rule, proxy):
        self.rule = rule
        self.action = rule.action
        self.spec = rule.spec
        self.proxy = proxy
        self.at = None

    def seconds(self):
        return float(self.spec.get("seconds", 1.0))

    def direction(self, default="response"):
        return self.spec.get("direction", default)


class Link:
    """The upstream connection of one client connection (kept alive between requests)."""

    def __init__(self):
        self.sock = None
        self.conn = None

    def drop(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = self.conn = None


# ---- the proxy --------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.requests = {}
        self.requests_total = 0
        self.faults = {}
        self.faults_total = 0
        self.connections = 0
        self.killed = 0
        self.refused = 0
        self.log = []


class Proxy:
    def __init__(self, listen, upstream, verbose=False):
        self.upstream = upstream
        self.verbose = verbose
        self.lock = threading.Lock()
        self.rules = []
        self.stats = Stats()
        self.stopping = threading.Event()
        self.clients = {}  # client socket -> its Link (upstream connection)
        self.down = None   # None (up), "refuse" or "reset"
        self.up_timer = None
        self.listen_host = listen[0]
        self.lsock = socket.create_server(listen, reuse_port=False)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]

    def log(self, msg):
        if self.verbose:
            print(f"[faultproxy] {msg}", file=sys.stderr, flush=True)

    # -- control
    def set_rules(self, specs, append=False):
        with self.lock:
            base = len(self.rules) if append else 0
            rules = [Rule(s, base + i) for i, s in enumerate(specs)]
            self.rules = (self.rules + rules) if append else rules
            return len(self.rules)

    def reset(self):
        self.go_up()
        with self.lock:
            self.rules = []
            self.stats = Stats()

    def go_down(self, mode="refuse", seconds=None):
        """The server is killed: reset every connection; refuse (or reset) new ones."""
        if mode not in ("refuse", "reset"):
            raise ValueError(f"unknown down mode {mode!r}")
        with self.lock:
            if self.up_timer is not None:
                self.up_timer.cancel()
                self.up_timer = None
            self.down = mode
            lsock = None
            if mode == "refuse" and self.lsock is not None:
                lsock, self.lsock = self.lsock, None
            victims = list(self.clients.items())
            self.stats.killed += len(victims)
            if seconds is not None:
                self.up_timer = threading.Timer(float(seconds), self.go_up)
                self.up_timer.daemon = True
                self.up_timer.start()
        if lsock is not None:
            try:
                lsock.shutdown(socket.SHUT_RDWR)  # stops listening now, wakes accept()
            except OSError:
                pass
            lsock.close()
        for sock, link in victims:
            kill(sock)
            if link.sock is not None:
                kill(link.sock)

    def go_up(self):
        with self.lock:
            if self.up_timer is not None:
                self.up_timer.cancel()
                self.up_timer = None
            if self.down is None:
                return
            if self.lsock is None:
                ls = socket.create_server((self.listen_host, self.port), reuse_port=False)
                ls.settimeout(0.2)
                self.lsock = ls
            self.down = None

    def snapshot(self):
        with self.lock:
            s = self.stats
            return {"requests": dict(s.requests), "requests_total": s.requests_total,
                    "faults": dict(s.faults), "faults_total": s.faults_total,
                    "connections": s.connections, "down": self.down, "killed": s.killed,
                    "refused": s.refused, "log": list(s.log)}

    def describe_rules(self):
        with self.lock:
            return [r.describe() for r in self.rules]

    def choose(self, method, path, query):
        """Count the request and pick its fault (or None), under the lock."""
        with self.lock:
            key = f"{method} {path}"
            self.stats.requests[key] = self.stats.requests.get(key, 0) + 1
            self.stats.requests_total += 1
            fault = None
            for r in self.rules:
                if r.decide(method, path, query, fault is None):
                    fault = Fault(r, self)
                    k = f"{r.index}:{r.action}"
                    self.stats.faults[k] = self.stats.faults.get(k, 0) + 1
                    self.stats.faults_total += 1
            entry = {"method": method, "path": path, "query": query,
                     "rule": fault.rule.index if fault else None,
                     "action": fault.action if fault else None, "at": None,
                     "time": time.monotonic(), "acted": None}
            self.stats.log.append(entry)
            if len(self.stats.log) > LOG_MAX:
                del self.stats.log[: len(self.stats.log) - LOG_MAX]
            return fault, entry

    def note_offset(self, entry, at):
        with self.lock:
            entry["at"] = at

    def note_range(self, entry, value):
        with self.lock:
            entry["range"] = value

    def note_request_payer(self, entry, value):
        with self.lock:
            entry["request_payer"] = value

    def note_access_key(self, entry, authorization):
        """The access key id a request is signed with (SigV4's Credential=KEY/...; never the
        signature), or null."""
        m = re.search(r"Credential=([^/,\s]+)/", authorization or "")
        with self.lock:
            entry["access_key"] = m.group(1) if m else None

    def note_headers(self, entry, headers):
        """The request's x-amz-* headers, its User-Agent, Range, Content-Type and
        Content-Length ("headers": {lower-case name: value}), so that a test sees which
        request carried which option and what it asked for (never the Authorization
        header)."""
        kept = {k.lower(): v for k, v in headers
                if k.lower().startswith("x-amz-") or k.lower() in _NOTED}
        with self.lock:
            entry["headers"] = kept

    def note_done(self, entry):
        """When the response was relayed in full ("done", CLOCK_MONOTONIC): with "time", the
        log shows how many requests were on the wire at once."""
        with self.lock:
            entry["done"] = time.monotonic()

    def note_acted(self, entry):
        """When a point fault (reset, stall, truncation) took effect, on CLOCK_MONOTONIC."""
        with self.lock:
            entry["acted"] = time.monotonic()

    # -- serving
    def serve(self):
        while not self.stopping.is_set():
            lsock = self.lsock
            if lsock is None:  # down, refusing connections
                self.stopping.wait(0.05)
                continue
            try:
                sock, _ = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self.stopping.is_set():
                    break
                if self.lsock is not lsock:
                    continue  # taken down
                raise
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = Link()
            with self.lock:
                if self.down is not None:
                    self.stats.refused += 1
                    rst(sock)
                    continue
                self.clients[sock] = link
                self.stats.connections += 1
            threading.Thread(target=self.handle_client, args=(sock, link),
                             daemon=True).start()

    def stop(self):
        self.stopping.set()
        with self.lock:
            if self.up_timer is not None:
                self.up_timer.cancel()
            lsock = self.lsock
        if lsock is not None:
            try:
                lsock.close()
            except OSError:
                pass
        with self.lock:
            clients = list(self.clients)
        for s in clients:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait(self, seconds, release=None):
        """Sleep, but wake (and end the exchange) when the proxy stops, and return early when
        `release` (a rule's POST /release event) is set."""
        if release is None:
            if self.stopping.wait(seconds):
                raise Abort("stopping")
            return
        deadline = time.monotonic() + seconds
        while not release.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            release.wait(min(left, 0.05))
            if self.stopping.is_set():
                raise Abort("stopping")

    def release(self, index=None):
        """End the stalls and delays of rule `index` (None: of every rule), now and later."""
        with self.lock:
            rules = [r for r in self.rules if index is None or r.index == index]
        if index is not None and not rules:
            raise ValueError(f"no rule {index}")
        for r in rules:
            r.released.set()
        return len(rules)

    def handle_client(self, sock, link):
        try:
            client = Conn(sock)
            sock.settimeout(CLIENT_IDLE_S)
            while not self.stopping.is_set():
                if not self.exchange(sock, client, link):
                    fin(sock)
                    break
        except Abort:
            pass
        except (ProtocolError, OSError) as e:
            self.log(f"client connection: {e}")
            rst(sock)
        finally:
            link.drop()
            with self.lock:
                self.clients.pop(sock, None)
            try:
                sock.close()
            except OSError:
                pass

    def upstream_for(self, sock, link):
        """The kept upstream connection if it is still good, else a new one (or reset the
        client and end the exchange when the upstream cannot be reached)."""
        if link.sock is not None:
            try:
                readable, _, _ = select.select([link.sock], [], [], 0)
            except (OSError, ValueError):
                readable = True
            if readable or link.conn.buf:
                link.drop()  # closed by the upstream while idle (or sent something unasked)
        if link.sock is None:
            try:
                s = socket.create_connection(self.upstream, timeout=10)
            except OSError as e:
                self.log(f"upstream unreachable: {e}")
                rst(sock)
                raise Abort("upstream unreachable") from None
            s.settimeout(UPSTREAM_TIMEOUT_S)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link.sock, link.conn = s, Conn(s)
        return link

    def send_throttled(self, sock, data, fault, direction):
        """Send all of data, at the fault's rate if it throttles this direction."""
        if fault and fault.action == "throttle" and fault.direction() in (direction, "both"):
            rate = max(1.0, float(fault.spec.get("bytes_per_second", 1 << 20)))
            step = max(1, min(len(data), int(rate / 20)))
            for i in range(0, len(data), step):
                piece = data[i:i + step]
                t0 = time.monotonic()
                sock.sendall(piece)
                left = len(piece) / rate - (time.monotonic() - t0)
                if left > 0:
                    self.wait(left)
        else:
            sock.sendall(data)

    def exchange(self, sock, client, link):
        """One request and its response. Returns whether to keep the client connection."""
        head = client.read_until(b"\r\n\r\n", MAX_HEAD)
        if not head:
            return False
        first, headers = parse_head(head[:-4])
        parts = first.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ProtocolError(f"bad request line {first!r}")
        method, target, version = parts
        path, _, query = target.partition("?")
        framing, length = request_framing(headers)
        expect = (header(headers, "expect") or "").lower() == "100-continue"
        headers = [(k, v) for k, v in headers if k.lower() != "expect"]
        client_keep = version == "HTTP/1.1" and \
            (header(headers, "connection") or "").lower() != "close"
        fault, entry = self.choose(method, path, query)
        self.note_range(entry, header(headers, "range"))
        self.note_request_payer(entry, header(headers, "x-amz-request-payer"))
        self.note_access_key(entry, header(headers, "authorization"))
        self.note_headers(entry, headers)
        action = fault.action if fault else None
        self.log(f"{method} {target}" + (f" -> {action}" if action else ""))

        if action == "respond":
            return self.respond(sock, client, fault, framing, length, expect, client_keep)
        if action == "delay":
            self.wait(fault.seconds(), fault.rule.released)
        if action == "throttle" and fault.spec.get("client_rcvbuf"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(fault.spec["client_rcvbuf"]))

        # request body faults: where in the body they act
        req_at = None
        if action == "reset_request_body_at" or (
                action == "stall" and fault.direction() == "request"):
            req_at = fault.rule.offset(length if framing == "length" else 0)
            self.note_offset(entry, req_at)

        if expect and framing != "none":
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

        # forward the head, then the body, to the upstream
        up = self.upstream_for(sock, link)
        try:
            up.sock.sendall(build_head(first, headers))
        except OSError:
            up.drop()
            rst(sock)
            raise Abort("upstream went away") from None

        if framing != "none":
            offset = 0
            for kind, data in body_segments(client, framing, length):
                if kind == "d" and req_at is not None and offset <= req_at < offset + len(data):
                    cut = req_at - offset
                    if cut:
                        up.sock.sendall(data[:cut])
                    self.note_acted(entry)
                    if action == "reset_request_body_at":
                        up.drop()
                        rst(sock)
                        raise Abort("reset mid request body")
                    self.wait(fault.seconds(), fault.rule.released)  # stall
                    req_at = None
                    data = data[cut:]
                    offset += cut
                try:
                    self.send_throttled(up.sock, data, fault, "request")
                except OSError:
                    rst(sock)
                    raise Abort("upstream went away mid request body") from None
                if kind == "d":
                    offset += len(data)
        if req_at is not None and action == "reset_request_body_at":
            self.note_acted(entry)
            up.drop()
            rst(sock)
            raise Abort("reset after the (empty) request body")

        if action in REWRITES:
            keep = self.relay_rewritten(sock, up, method, fault, entry, client_keep)
        else:
            keep = self.relay_response(sock, up, method, fault, entry, client_keep)
        self.note_done(entry)
        return keep

    def respond(self, sock, client, fault, framing, length, expect, client_keep):
        spec = fault.spec
        status = int(spec.get("status", 503))
        hdrs = dict(spec.get("headers") or {})
        body = spec.get("body", "")
        s3err = spec.get("s3_error")
        if s3err is not None:
            rid = s3err.get("request_id") or uuid.uuid4().hex[:16].upper()
            code = s3err.get("code", "SlowDown")
            msg = s3err.get("message", "Please reduce your request rate.")
            body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{code}</Code><Message>{msg}</Message>"
                    f"<RequestId>{rid}</RequestId><HostId>faultproxy</HostId></Error>")
            hdrs.setdefault("Content-Type", "application/xml")
            hdrs.setdefault("x-amz-request-id", rid)
        hdrs.setdefault("Date", email.utils.formatdate(usegmt=True))  # as servers do
        body = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        # a body announced with Expect was never sent: the connection cannot be reused
        keep = client_keep and not (expect and framing != "none")
        if keep and framing != "none":
            for _ in body_segments(client, framing, length):
                pass
        reason = {500: "Internal Server Error", 503: "Service Unavailable",
                  400: "Bad Request", 403: "Forbidden", 404: "Not Found",
                  200: "OK"}.get(status, "Fault")
        out = [(k, str(v)) for k, v in hdrs.items()]
        out.append(("Content-Length", str(len(body))))
        if not keep:
            out.append(("Connection", "close"))
        sock.sendall(build_head(f"HTTP/1.1 {status} {reason}", out) + body)
        return keep

    def response_head(self, sock, up):
        """The upstream's response head, past any 1xx (a stray 100 Continue: the proxy sent
        its own): (head bytes, status line, headers, status)."""
        while True:
            head = up.conn.read_until(b"\r\n\r\n", MAX_HEAD)
            if not head:
                up.drop()
                rst(sock)
                raise Abort("upstream closed without a response")
            first, headers = parse_head(head[:-4])
            try:
                status = int(first.split(" ", 2)[1])
            except (IndexError, ValueError):
                raise ProtocolError(f"bad status line {first!r}") from None
            if not (100 <= status < 200 and status != 101):
                return head, first, headers, status

    def relay_response(self, sock, up, method, fault, entry, client_keep):
        action = fault.action if fault else None
        head, first, headers, status = self.response_head(sock, up)
        framing, length = response_framing(method, status, headers)
        up_keep = first.startswith("HTTP/1.1") and framing != "close" and \
            (header(headers, "connection") or "").lower() != "close"
        keep = client_keep and framing != "close"

        if action == "drop_response":
            # the server answered (it acted); the client never sees a byte of it
            try:
                for _ in body_segments(up.conn, framing, length):
                    pass
            except ProtocolError:
                up_keep = False
            self.note_acted(entry)
            if not up_keep:
                up.drop()
            rst(sock)
            raise Abort("response dropped")

        point = action in ("reset_response_body_at", "truncate_response",
                           "corrupt_response_byte") or (
            action == "stall" and fault.direction() == "response")
        at = None
        if point:
            at = fault.rule.offset(length if framing == "length" else 0)
            self.note_offset(entry, at)

        head_out = head
        if framing == "close" and client_keep:
            head_out = build_head(first, headers + [("Connection", "close")])
        sock.sendall(head_out)

        offset = 0
        try:
            for kind, data in body_segments(up.conn, framing, length):
                if kind == "f":
                    sock.sendall(data)
                    continue
                if at is not None and offset <= at < offset + len(data):
                    cut = at - offset
                    self.note_acted(entry)
                    if action == "corrupt_response_byte":
                        b = bytearray(data)
                        b[cut] ^= int(fault.spec.get("xor", 1)) & 0xFF or 1
                        data = bytes(b)
                        at = None
                    else:
                        if cut:
                            sock.sendall(data[:cut])
                        if action == "reset_response_body_at":
                            up.drop()
                            rst(sock)
                            raise Abort("reset mid response body")
                        if action == "truncate_response":
                            up.drop()
                            fin(sock)
                            raise Abort("truncated response")
                        self.wait(fault.seconds(), fault.rule.released)  # stall
                        at = None
                        data = data[cut:]
                        offset += cut
                self.send_throttled(sock, data, fault, "response")
                offset += len(data)
        except ProtocolError:
            up.drop()
            rst(sock)
            raise Abort("upstream broke mid response") from None
        if at is not None and action in ("reset_response_body_at", "truncate_response"):
            self.note_acted(entry)
            up.drop()
            (rst if action == "reset_response_body_at" else fin)(sock)
            raise Abort("fault after the (empty) response body")
        if at is not None and action == "stall":
            self.note_acted(entry)
            self.wait(fault.seconds(), fault.rule.released)
        if not up_keep:
            up.drop()
        return keep

    def relay_rewritten(self, sock, up, method, fault, entry, client_keep):
        """The upstream's whole response read, then answered rewritten (REWRITES)."""
        head, first, headers, status = self.response_head(sock, up)
        framing, length = response_framing(method, status, headers)
        body = bytearray()
        try:
            for kind, data in body_segments(up.conn, framing, length):
                if kind == "d":
                    body += data
        except ProtocolError:
            up.drop()
            rst(sock)
            raise Abort("upstream broke mid response") from None
        if framing == "close" or (header(headers, "connection") or "").lower() == "close":
            up.drop()
        body = bytes(body)
        keep = client_keep
        spec = fault.spec
        action = fault.action
        # the headers every rewrite keeps; the body's framing is set anew
        drop = {"content-length", "transfer-encoding", "connection", "content-range"}
        out = [(k, v) for k, v in headers if k.lower() not in drop]
        crange = header(headers, "content-range") or ""
        m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", crange.strip())
        if action == "etag":
            value = spec.get("value", '"' + "0" * 32 + '"')
            out = [(k, value if k.lower() == "etag" else v) for k, v in out]
            if crange:
                out.append(("Content-Range", crange))
        elif status != 206 or not m or method == "HEAD":
            out = None  # not a range answer: relayed as it is
        else:
            a, b, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if action == "short_range":
                n = len(body)
                keep_n = spec.get("bytes")
                if keep_n is None:
                    keep_n = int(n * float(spec.get("fraction", 0.5)))
                keep_n = max(1, min(int(keep_n), n - 1))
                if n < 2:
                    out = None
                else:
                    body = body[:keep_n]
                    out.append(("Content-Range", f"bytes {a}-{a + keep_n - 1}/{total}"))
            elif action == "other_range":
                shift = max(1, min(int(spec.get("shift", 1)), b - a))
                if b - a < 1:
                    out = None
                else:
                    body = body[shift:]
                    out.append(("Content-Range", f"bytes {a + shift}-{b}/{total}"))
            elif action == "whole_object":
                first = "HTTP/1.1 200 OK"
                obj = spec.get("object_file")
                if obj:
                    with open(obj, "rb") as f:
                        whole = f.read()
                    if len(whole) != total:
                        raise ProtocolError(f"object_file has {len(whole)} bytes, not {total}")
                else:
                    fill = bytes([int(spec.get("fill", 0xA5)) & 0xFF])
                    whole = fill * a + body + fill * (total - b - 1)
                body = whole
        if out is None:
            out = [(k, v) for k, v in headers if k.lower() not in ("content-length",
                                                                   "transfer-encoding",
                                                                   "connection")]
        if method == "HEAD":
            cl = header(headers, "content-length")
            if cl is not None:
                out.append(("Content-Length", cl))
        else:
            out.append(("Content-Length", str(len(body))))
        if not keep:
            out.append(("Connection", "close"))
        self.note_acted(entry)
        sock.sendall(build_head(first, out) + (body if method != "HEAD" else b""))
        return keep


# ---- the control API ----------------------------------------------------------------------

def control_server(proxy, host):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/stats":
                self.reply(200, proxy.snapshot())
            elif self.path == "/faults":
                self.reply(200, {"rules": proxy.describe_rules()})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.path == "/reset":
                proxy.reset()
                self.reply(200, {"ok": True})
            elif self.path == "/down":
                try:
                    doc = json.loads(raw or b"{}")
                    proxy.go_down(doc.get("mode", "refuse"), doc.get("seconds"))
                except (ValueError, TypeError, AttributeError) as e:
                    self.reply(400, {"error": str(e)})
                    return
                self.reply(200, {"ok": True})
            elif self.path == "/release":
                try:
                    doc = json.loads(raw or b"{}")
                    count = proxy.release(doc.get("rule"))
                except (ValueError, TypeError, AttributeError) as e:
                    self.reply(400, {"error": str(e)})
                    return
                self.reply(200, {"ok": True, "released": count})
            elif self.path == "/up":
                try:
                    proxy.go_up()
                except OSError as e:
                    self.reply(500, {"error": str(e)})
                    return
                self.reply(200, {"ok": True})
            elif self.path == "/faults":
                try:
                    doc = json.loads(raw or b"[]")
                    append = False
                    if isinstance(doc, dict):
                        append = bool(doc.get("append"))
                        doc = doc.get("rules", [])
                    if not isinstance(doc, list):
                        raise ValueError("rules must be a list")
                    count = proxy.set_rules(doc, append)
                except (ValueError, re.error, TypeError) as e:
                    self.reply(400, {"error": str(e)})
                    return
                self.reply(200, {"ok": True, "rules": count})
            else:
                self.reply(404, {"error": "not found"})

    srv = ThreadingHTTPServer((host, 0), Handler)
    srv.daemon_threads = True
    return srv


def loopback_addr(spec, what):
    host, sep, port = spec.rpartition(":")
    if not sep:
        raise SystemExit(f"faultproxy: {what} must be HOST:PORT, not {spec!r}")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, ValueError) as e:
        raise SystemExit(f"faultproxy: {what} {spec!r}: {e}") from None
    for info in infos:
        if not ipaddress.ip_address(info[4][0]).is_loopback:
            raise SystemExit(f"faultproxy: {what} {spec!r} is not a loopback address")
    return host, int(port)


def write_port(path, port):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description="fault-injecting HTTP/1.1 proxy for tests")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (loopback; 0: any port)")
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the server (loopback)")
    ap.add_argument("--port-file", help="write the proxy's port here once listening")
    ap.add_argument("--control-port-file", help="write the control API's port here")
    ap.add_argument("--print-ports", action="store_true",
                    help="print 'ports PROXY CONTROL' on stdout once both listen (tests read "
                         "it from the pipe instead of polling for files)")
    ap.add_argument("--faults", help="JSON file of initial rules")
    ap.add_argument("--verbose", action="store_true", help="log requests and faults to stderr")
    a = ap.parse_args(argv)

    listen = loopback_addr(a.listen, "--listen")
    upstream = loopback_addr(a.upstream, "--upstream")
    proxy = Proxy(listen, upstream, a.verbose)
    if a.faults:
        with open(a.faults) as f:
            doc = json.load(f)
        proxy.set_rules(doc.get("rules", []) if isinstance(doc, dict) else doc)
    ctl = control_server(proxy, listen[0])
    ctl_thread = threading.Thread(target=ctl.serve_forever, kwargs={"poll_interval": 0.2},
                                  daemon=True)
    ctl_thread.start()

    def on_signal(signum, frame):
        proxy.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if a.control_port_file:
        write_port(a.control_port_file, ctl.server_address[1])
    if a.port_file:
        write_port(a.port_file, proxy.port)
    if a.print_ports:
        print(f"ports {proxy.port} {ctl.server_address[1]}", flush=True)
    print(f"faultproxy: listening on {listen[0]}:{proxy.port}, control on "
          f"{listen[0]}:{ctl.server_address[1]}, upstream {upstream[0]}:{upstream[1]}",
          file=sys.stderr, flush=True)
    proxy.serve()
    proxy.stop()
    ctl.shutdown()
    ctl.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
