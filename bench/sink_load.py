#!/usr/bin/env python3
"""A raw-socket load client for s3flash-sink: the cheapest possible HTTP client, to show the
sink's own ceiling (curl's upload path is slower than the sink).

  sink_load.py --port P get --size BYTES [--conns N] [--verify]
  sink_load.py --port P put --size BYTES [--conns N]

get: N connections each GET one contiguous range of /bench/size-BYTES, recv_into a reused
4 MiB buffer (--verify compares every byte with the sink's pattern, see bench/README.md).
put: N connections each PUT BYTES/N bytes (a reused zero buffer, sendall) to /bench/put-i.
Prints one line: `op bytes seconds GB/s client_cpu_s`.
"""
import argparse
import socket
import sys
import threading
import time

PERIOD = 1048573
MULT = 2654435761
CHUNK = 4 << 20


def pattern_block():
    """Two periods of the pattern, so any window of up to PERIOD bytes is one slice."""
    one = bytes(((j * MULT) & 0xFFFFFFFF) >> 24 for j in range(PERIOD))
    return one + one


def read_head(s, buf):
    """Reads a response head; returns (status, content_length, leftover body bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        n = s.recv_into(buf)
        if n == 0:
            raise ConnectionError("closed before the response head")
        data += bytes(buf[:n])
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    return status, length, rest


def do_get(port, first, last, size, ref, errors):
    buf = bytearray(CHUNK)
    mv = memoryview(buf)
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"GET /bench/size-{size} HTTP/1.1\r\nHost: sink\r\n"
              f"Range: bytes={first}-{last}\r\n\r\n".encode())
    status, length, rest = read_head(s, buf)
    if status != 206 or length != last - first + 1:
        errors.append(f"GET {first}-{last}: status {status}, length {length}")
        return
    off = first
    got = len(rest)
    if ref is not None and rest != ref[off % PERIOD: off % PERIOD + len(rest)]:
        errors.append(f"pattern mismatch near {off}")
    off += len(rest)
    want = length - got
    while want:
        n = s.recv_into(mv, min(want, CHUNK))
        if n == 0:
            errors.append("connection closed early")
            return
        if ref is not None:
            # compare in windows of at most PERIOD bytes
            p = 0
            while p < n:
                take = min(n - p, PERIOD)
                r = off % PERIOD
                if mv[p:p + take] != ref[r:r + take]:
                    errors.append(f"pattern mismatch near {off}")
                    return
                p += take
                off += take
        want -= n
    s.close()


def do_put(port, key, nbytes, errors):
    buf = memoryview(bytearray(CHUNK))
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"PUT /bench/{key} HTTP/1.1\r\nHost: sink\r\nContent-Length: {nbytes}\r\n\r\n"
              .encode())
    left = nbytes
    while left:
        n = min(left, CHUNK)
        s.sendall(buf[:n])
        left -= n
    status, _, _ = read_head(s, bytearray(65536))
    if status != 200:
        errors.append(f"PUT {key}: status {status}")
    s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("--size", type=int, default=4 << 30)
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()
    ref = pattern_block() if a.verify else None
    errors = []
    threads = []
    per = a.size // a.conns
    t0 = time.perf_counter()
    c0 = time.process_time()
    for i in range(a.conns):
        n = per if i < a.conns - 1 else a.size - per * i
        if a.op == "get":
            args = (a.port, i * per, i * per + n - 1, a.size, ref, errors)
            threads.append(threading.Thread(target=do_get, args=args))
        else:
            threads.append(threading.Thread(target=do_put, args=(a.port, f"put-{i}", n, errors)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"{a.op} {a.size} {dt:.3f} {a.size / dt / 1e9:.2f} {cpu:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
