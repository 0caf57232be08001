"""Waiting for a server the tests started by asking it (docs/TESTING.md, "No sleep-and-hope"):
never the existence of a file, a port file or a PID.

    proc = subprocess.Popen([sink, "--port", "0", "--print-port"], stdout=subprocess.PIPE)
    port = int(read_line(proc, r"port (\\d+)", "the sink").group(1))
    wait_http(f"http://127.0.0.1:{port}/", proc, "the sink")

A server prints its port on stdout once it listens; the test reads that line from the pipe
with a deadline (failing at once, with what the server said, if it exits first), then sees
the server answer a real request.
"""

import http.client
import re
import selectors
import time
import urllib.parse


def _gone(proc, what, said=""):
    return AssertionError(f"{what} exited (status {proc.returncode}) before it was ready"
                          + (f": {said[-3000:]}" if said else ""))


def read_line(proc, pattern, what, timeout=30):
    """The first line of proc's stdout (a pipe) matching `pattern` (a regex), read with a
    deadline: its re.Match. Lines before it are skipped (kept for the message)."""
    rx = re.compile(pattern)
    seen = b""
    end = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        buf = b""
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                m = rx.search(line.decode(errors="replace"))
                if m:
                    return m
                seen += line + b"\n"
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what} did not print /{pattern}/ in {timeout} s; it "
                                     f"printed: {seen.decode(errors='replace')[-2000:]!r}")
            if not sel.select(min(left, 0.5)):
                continue
            chunk = _read_some(proc.stdout)
            if not chunk:  # EOF: it exited (or closed its stdout) without the line
                proc.wait(timeout=10)
                raise _gone(proc, what, (seen + buf).decode(errors="replace"))
            buf += chunk


def _read_some(f):
    # one read of what is there (a text-mode pipe has a binary buffer under it)
    raw = getattr(f, "buffer", f)
    return raw.read1(65536) if hasattr(raw, "read1") else raw.read(65536)


def wait_http(url, proc, what, timeout=30):
    """Until the server at `url` answers an HTTP request (any status: it is the answer
    that counts); returns the status. Fails at once if `proc` (optional) exits first."""
    u = urllib.parse.urlsplit(url)
    end = time.monotonic() + timeout
    while True:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=max(1.0, timeout / 4))
        try:
            c.request("GET", u.path or "/")
            r = c.getresponse()
            r.read()
            return r.status
        except (OSError, http.client.HTTPException) as e:
            if proc is not None and proc.poll() is not None:
                raise _gone(proc, what)
            if time.monotonic() > end:
                raise AssertionError(f"{what} did not answer at {url} in {timeout} s: {e}")
        finally:
            c.close()
        time.sleep(0.02)
