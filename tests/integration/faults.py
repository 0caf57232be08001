"""Starting and steering tests/servers/faultproxy.py from the integration tests.

    from faults import start_faultproxy

    proxy = start_faultproxy("127.0.0.1", rgw_port)
    proxy.set_faults([{"match": {"method": "PUT", "nth": 2},
                       "action": "reset_request_body_at", "at": "random", "seed": 3}])
    ... point the client at proxy.endpoint ...
    assert proxy.stats()["faults_total"] == 1
    proxy.stop()

or as a context manager (`with start_faultproxy(...) as proxy:`), or through the
`faultproxy_factory` fixture (import it into the test module), which stops every proxy it
started at the end of the test. The rules are documented in faultproxy.py.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAULTPROXY = ROOT / "tests" / "servers" / "faultproxy.py"
sys.path.insert(0, str(ROOT / "tests" / "servers"))
from ready import read_line, wait_http  # noqa: E402


class FaultProxy:
    def __init__(self, proc, port, control_port, workdir):
        self.proc = proc
        self.port = port
        self.control_port = control_port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.control = f"http://127.0.0.1:{control_port}"
        self._workdir = workdir

    def _call(self, method, path, doc=None):
        data = None if doc is None else json.dumps(doc).encode()
        req = urllib.request.Request(self.control + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def set_faults(self, rules, append=False):
        """Replace the rules (or add to them); returns how many are in force."""
        return self._call("POST", "/faults", {"rules": list(rules), "append": append})["rules"]

    def faults(self):
        """The rules in force, each with its matched / fired counts."""
        return self._call("GET", "/faults")["rules"]

    def stats(self):
        """{"requests": {"PUT /b/k": n}, "requests_total", "faults": {"0:respond": n},
        "faults_total", "connections", "log": [...]}"""
        return self._call("GET", "/stats")

    def reset(self):
        """Drop every rule and zero the stats (and come back up if down)."""
        self._call("POST", "/reset", {})

    def down(self, mode="refuse", seconds=None):
        """Kill the server: reset every connection at once (also mid-request), then refuse
        new connections ("refuse": the listener is closed) or reset them as they come
        ("reset"). Back up after `seconds`, or on up()."""
        doc = {"mode": mode}
        if seconds is not None:
            doc["seconds"] = seconds
        self._call("POST", "/down", doc)

    def up(self):
        """Listen again on the same port and forward."""
        self._call("POST", "/up", {})

    def release(self, rule=None):
        """End the stall or delay of rule `rule` (None: of every rule) now, for the requests
        it holds and those it fires on later; returns how many rules were released."""
        return self._call("POST", "/release", {} if rule is None else {"rule": rule})["released"]

    def stop(self, timeout=10):
        """SIGTERM, wait; returns the exit status (KILL after `timeout` seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_faultproxy(upstream_host, upstream_port, verbose=False, timeout=30):
    """Start a proxy in front of upstream_host:upstream_port (loopback only); returns a
    FaultProxy once it has printed its ports (after both listen) and its control API
    answered a request."""
    workdir = tempfile.mkdtemp(prefix="s3flash-faultproxy-")
    cmd = [sys.executable, str(FAULTPROXY), "--listen", "127.0.0.1:0",
           "--upstream", f"{upstream_host}:{upstream_port}", "--print-ports"]
    if verbose:
        cmd.append("--verbose")
    log = open(os.path.join(workdir, "log"), "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    try:
        m = read_line(proc, r"^ports (\d+) (\d+)$", "faultproxy", timeout)
        port, control = int(m.group(1)), int(m.group(2))
        wait_http(f"http://127.0.0.1:{control}/stats", proc, "faultproxy's control API",
                  timeout)
        return FaultProxy(proc, port, control, workdir)
    except AssertionError as e:
        proc.kill()
        proc.wait()
        text = Path(workdir, "log").read_text(errors="replace")
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"faultproxy did not start: {e}; its log: {text[-2000:]}") from None


def s3_error(code="SlowDown", status=503, match=None, **kw):
    """A `respond` rule answering with an S3 error document."""
    rule = {"match": match or {}, "action": "respond", "status": status,
            "s3_error": {"code": code,
                         "message": kw.pop("message", f"fault injected: {code}")}}
    rule.update(kw)
    return rule


@pytest.fixture
def faultproxy_factory():
    """A function like start_faultproxy; every proxy it starts is stopped after the test."""
    started = []

    def start(upstream_host, upstream_port, **kw):
        p = start_faultproxy(upstream_host, upstream_port, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


# ---- what the proxy saw, by S3 operation (its log records x-amz-* headers and User-Agent) --

def operation(e):
    """The S3 operation of a fault proxy log entry."""
    m, q, h = e["method"], e["query"] or "", e.get("headers") or {}
    has_key = e["path"].count("/") >= 2 and not e["path"].endswith("/")
    if m == "POST" and ("uploads" in q.split("&") or "uploads=" in q.split("&")):
        return "CreateMultipartUpload"
    if m == "POST" and "uploadId=" in q:
        return "CompleteMultipartUpload"
    if m == "DELETE" and "uploadId=" in q:
        return "AbortMultipartUpload"
    if m == "PUT" and "partNumber=" in q:
        return "UploadPartCopy" if "x-amz-copy-source" in h else "UploadPart"
    if m == "PUT" and has_key:
        return "CopyObject" if "x-amz-copy-source" in h else "PutObject"
    if m == "GET" and has_key and "list-type" not in q:
        return "GetObject"
    if m == "HEAD" and has_key:
        return "HeadObject"
    if m == "GET":
        return "List"
    return f"{m} {e['path']}?{q}"


def by_operation(proxy):
    """{operation: [the headers of each of its requests]} of what the proxy logged."""
    ops = {}
    for e in proxy.stats()["log"]:
        ops.setdefault(operation(e), []).append(e.get("headers") or {})
    return ops


def seen_on(got, ops, header, value):
    """`header: value` on every request of the operations `ops`, and on no other; `got` is
    by_operation's answer. Each of `ops` was seen."""
    for op, hs in got.items():
        for h in hs:
            if op in ops:
                assert h.get(header) == value, (op, header, h)
            else:
                assert header not in h, (op, header, h)
    for op in ops:
        assert got.get(op), f"no {op} seen: {sorted(got)}"
