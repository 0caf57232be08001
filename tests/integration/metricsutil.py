"""Reading s3flash's metrics in the tests: the Prometheus text parsed, the exporter's
address read from the process's stderr, a scrape over HTTP."""
import os
import re
import select
import time
import urllib.request
from urllib.parse import urlparse

import pytest

from faults import faultproxy_factory  # noqa: F401  (fixture)

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
URL_RE = re.compile(rb"s3flash: metrics at (http://\S+/metrics)")


def parse(text):
    """[(name, {label: value}, float)] of every sample; checks the HELP/TYPE grouping."""
    out, typed = [], set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in typed, f"{name}: two TYPE lines (not one group)"
            typed.add(name)
            continue
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def total(samples, name, **want):
    """The sum of the samples of `name` whose labels include `want`."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == w for k, w in want.items()))


def scrape(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


class StderrLines:
    """Lines of a child's stderr pipe, read as they come (bounded waits, no sleeps)."""

    def __init__(self, proc):
        self.proc = proc
        self.buf = b""
        self.lines = []

    def wait_for(self, pattern, timeout=60):
        """The first match of `pattern` (bytes regex) in a line; fails at the deadline or
        when the process ends without it."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        fd = self.proc.stderr.fileno()
        seen = 0
        while True:
            for line in self.lines[seen:]:
                m = rx.search(line)
                if m:
                    return m
            seen = len(self.lines)
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in stderr: {b''.join(self.lines)[-3000:]!r}"
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            assert chunk, f"stderr closed without {pattern!r}: {b''.join(self.lines)[-3000:]!r}"
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines += [d + b"\n" for d in done]

    def text(self):
        return b"".join(self.lines).decode(errors="replace")


class Prometheus:
    """Debian's `prometheus` server scraping one target every second, queried through its
    HTTP API (PromQL). Waits are on its answers (ready, the target up, a query's value),
    each bounded."""

    def __init__(self, workdir, target):
        import shutil
        import subprocess
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "servers"))
        from s3servers import closed_port
        exe = shutil.which("prometheus")
        if exe is None:
            import pytest
            pytest.skip("no prometheus (Debian package prometheus; tests/servers/install-deps.sh)")
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(workdir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: s3flash\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        self.log = open(os.path.join(workdir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [exe, f"--config.file={cfg}", f"--storage.tsdb.path={workdir}/tsdb",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self._until(self._ready, 60, "ready")

    def _ready(self):
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            assert self.proc.poll() is None, f"prometheus exited: {self.log_tail()}"
            return False

    def _until(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            v = cond()
            if v:
                return v
            assert time.monotonic() < deadline, f"prometheus: not {what}: {self.log_tail()}"
            time.sleep(0.2)   # between polls of its API (the condition is the answer)

    def query(self, promql):
        """The instant vector's value (a float), None when empty."""
        import json
        import urllib.parse
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        res = doc["data"]["result"]
        return float(res[0]["value"][1]) if res else None

    def wait_value(self, promql, want, timeout=60, at_least=False):
        """Poll the query until it answers `want` (or, at_least, `want` or more: the scrapes
        catch up); returns it."""
        seen = []

        def cond():
            v = self.query(promql)
            seen.append(v)
            return v is not None and (v >= want if at_least else v == want)
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"{promql}: {seen[-5:]}, want {want}"
            time.sleep(0.2)
        return want

    def log_tail(self):
        self.log.flush()
        try:
            with open(self.log.name, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        import subprocess
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def proxy(rgw, faultproxy_factory):  # noqa: F811
    """The fault proxy in front of RGW (import it into a test module to use it)."""
    u = urlparse(rgw.endpoint)
    return faultproxy_factory(u.hostname, u.port)


def put_blob(s3, bucket, key, size):
    """A random object of `size` bytes at `key`; its data."""
    data = os.urandom(size)
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    return data
