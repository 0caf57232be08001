"""The sink's S3-like limits (bench/sink_limits.c): each one enforced, measured over a real
socket against bands that hold on a busy 2-core machine.

- byte rates: a connection's throughput is measured from the client; the upper bound is what a
  token bucket allows (rate x time + its burst, about 1% here), the lower one is generous
  (CPU contention only ever slows it);
- first-byte latency: every response waits at least the floor; the median of a seeded draw
  lies in a band around the configured median;
- per-prefix request rates: counted from the responses (503 SlowDown, S3's XML) and from the
  sink's own counters at exit, never from timing alone.
"""
import http.client
import re
import statistics
import threading
import time

from test_sink import Sink

MiB = 1 << 20


def burst(rate):
    """What a bucket of this rate saves up while idle: four quanta of 5 ms (16 KiB to 1 MiB)."""
    return 4 * min(max(rate / 200, 16384), 1 << 20)


def within_cap(n, t, rate):
    """n bytes in t seconds is no more than a token bucket of rate allows (2% for timers)."""
    return n <= rate * t * 1.02 + burst(rate)


def timed_get(port, path, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    c.request("GET", path)
    r = c.getresponse()
    n = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
    out.append((n, time.monotonic() - t0, r.status))
    c.close()


def timed_put(port, path, size, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = b"\0" * size
    t0 = time.monotonic()
    c.request("PUT", path, body=body)
    r = c.getresponse()
    r.read()
    out.append((size, time.monotonic() - t0, r.status))
    c.close()


def parallel(fn, port, n, size):
    """n connections at once, each a timed_get of a size-byte object or a timed_put of size
    bytes; returns their (bytes, seconds, status) and the wall time of all."""
    out = []
    ts = []
    for i in range(n):
        args = ((port, f"/b/k{i}-size-{size}", out) if fn is timed_get
                else (port, f"/b/up{i}", size, out))
        ts.append(threading.Thread(target=fn, args=args))
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out, time.monotonic() - t0


def test_conn_send_rate_one_and_many(tmp_path):
    rate = 4 * MiB
    s = Sink(tmp_path, "--threads", "2", "--conn-rate", "4M", "--trace",
             str(tmp_path / "trace"))
    try:
        out, _ = parallel(timed_get, s.port, 1, 8 * MiB)
        n, t, st = out[0]
        assert st == 200 and n == 8 * MiB
        assert 0.6 * rate <= n / t and within_cap(n, t, rate), n / t / rate
        out, wall = parallel(timed_get, s.port, 4, 8 * MiB)
        for n, t, st in out:    # each connection alone is capped
            assert st == 200 and within_cap(n, t, rate), n / t / rate
        agg = 4 * 8 * MiB / wall  # and four get about four times one
        assert 2.4 * rate <= agg <= 4.2 * rate, agg / rate
    finally:
        assert s.stop() == 0, s.stderr
    # the trace saw the four connections busy at once
    rows = [list(map(int, l.split())) for l in (tmp_path / "trace").read_text().splitlines()]
    assert rows and max(r[2] for r in rows) == 4
    assert 5 * 8 * MiB <= rows[-1][4] <= 5 * 8 * MiB + 5 * 1024  # bodies and heads sent


def test_conn_recv_rate_one_and_many(tmp_path):
    rate = 4 * MiB
    s = Sink(tmp_path, "--threads", "2", "--conn-recv-rate", "4M")
    try:
        out, _ = parallel(timed_put, s.port, 1, 8 * MiB)
        n, t, st = out[0]
        assert st == 200
        assert 0.6 * rate <= n / t and within_cap(n, t, rate), n / t / rate
        out, wall = parallel(timed_put, s.port, 3, 8 * MiB)
        for n, t, st in out:
            assert st == 200 and within_cap(n, t, rate), n / t / rate
        agg = 3 * 8 * MiB / wall
        assert 1.8 * rate <= agg <= 3.15 * rate, agg / rate
        # GETs are not paced by a receive cap
        out, _ = parallel(timed_get, s.port, 1, 16 * MiB)
        assert out[0][0] / out[0][1] > 2 * rate
    finally:
        assert s.stop() == 0, s.stderr


def test_total_rate_caps_all_connections(tmp_path):
    rate, total = 4 * MiB, 6 * MiB
    s = Sink(tmp_path, "--threads", "2", "--conn-rate", "4M", "--total-rate", "6M")
    try:
        out, wall = parallel(timed_get, s.port, 4, 6 * MiB)
        agg = 4 * 6 * MiB / wall
        assert 0.6 * total <= agg <= 1.05 * total, agg / total
        for n, t, st in out:
            assert st == 200 and within_cap(n, t, rate)
        out, wall = parallel(timed_put, s.port, 3, 6 * MiB)
        agg = 3 * 6 * MiB / wall
        assert 0.6 * total <= agg <= 1.05 * total, agg / total
    finally:
        assert s.stop() == 0, s.stderr


def test_first_byte_latency(tmp_path):
    s = Sink(tmp_path, "--first-byte-ms", "40", "--first-byte-p99-ms", "120",
             "--first-byte-min-ms", "25", "--seed", "7")
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        lat = []
        for i in range(41):
            t0 = time.monotonic()
            c.request("HEAD", f"/b/k{i}-size-100")
            r = c.getresponse()
            lat.append((time.monotonic() - t0) * 1000)
            r.read()
            assert r.status == 200
        c.close()
    finally:
        assert s.stop() == 0, s.stderr
    assert min(lat) >= 25, lat                      # the floor
    assert 28 <= statistics.median(lat) <= 80, lat  # lognormal, median 40 ms
    assert max(lat) > 1.5 * min(lat), lat           # a distribution, not a constant


def test_prefix_rate_limit_slowdown(tmp_path):
    s = Sink(tmp_path, "--prefix-put-rate", "20", "--prefix-get-rate", "40",
             "--prefix-burst-ms", "100", "--prefix-depth", "1")
    codes = {}
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)

        def put(key):
            c.request("PUT", key, body=b"x")
            r = c.getresponse()
            body = r.read()
            if r.status == 503:
                assert re.search(rb"<Code>SlowDown</Code>", body), body
                assert b"<Message>Please reduce your request rate.</Message>" in body
            codes.setdefault(key.split("/")[2], []).append(r.status)
            return r.status

        # above the rate: 60 PUTs back to back under one prefix
        t0 = time.monotonic()
        for i in range(60):
            put(f"/b/p1/k{i}")
        elapsed = time.monotonic() - t0
        ok = codes["p1"].count(200)
        assert codes["p1"].count(503) == 60 - ok
        assert 1 <= ok <= 2 + 20 * elapsed + 1, (ok, elapsed)   # burst + rate x time
        # another prefix is not affected, nor are GETs of the throttled one
        assert put("/b/p3/k0") == 200
        c.request("HEAD", "/b/p1/k0")
        r = c.getresponse()
        r.read()
        assert r.status == 200
        # below the rate (10/s against 20/s): none refused
        for i in range(10):
            assert put(f"/b/p2/k{i}") == 200
            time.sleep(0.1)
        c.close()
    finally:
        assert s.stop() == 0, s.stderr
    # the sink's own counts agree with what the client saw
    m = re.search(r"prefix limits: (\d+) GET/HEAD and (\d+) other requests admitted, (\d+) "
                  r"GET/HEAD and (\d+) other answered 503 SlowDown, (\d+) prefixes", s.stderr)
    assert m, s.stderr
    got = list(map(int, m.groups()))
    assert got == [1, ok + 1 + 10, 0, 60 - ok, 3], (got, codes)


def test_s3_like_preset_and_bad_values(tmp_path):
    s = Sink(tmp_path, "--s3-like", "--first-byte-ms", "1", "--first-byte-p99-ms", "2",
             "--first-byte-min-ms", "1")
    try:
        out, _ = parallel(timed_get, s.port, 1, 24 * MiB)
        assert out[0][2] == 200 and within_cap(out[0][0], out[0][1], 80 * MiB)
    finally:
        assert s.stop() == 0, s.stderr
    import subprocess
    from test_sink import sink_exe
    for bad in (["--conn-rate", "0"], ["--first-byte-ms", "-1"], ["--prefix-depth", "x"]):
        p = subprocess.run([sink_exe(), *bad], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and "bad option" in p.stderr, (bad, p.stderr)
