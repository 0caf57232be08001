#!/usr/bin/env python3
"""Measures s3flash-sink on loopback next to iperf3, in one run, and prints a table.

  python3 bench/sink_bench.py [--build build] [--size 4G] [--threads 2] [--repeat 1]

Rows: iperf3 (1 and 2 streams, and 1 stream with 1 MiB writes, 5 s each, when iperf3 is
installed; the ratio column is against plain iperf3 with as many streams), curl GET and PUT
(1 connection), and bench/sink_load.py, a raw-socket client, GET and PUT with 1 and 2
connections. For each transfer: GB/s (bytes / wall time), the ratio to iperf3 with the same
number of streams, and the sink's own CPU seconds (from /proc), i.e. how many GB the sink moves
per CPU-second: its cost, independent of how fast the client is.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import benchjson

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower()
    for suffix in ("ib", "b"):
        if s.endswith(suffix) and len(s) > len(suffix) and not s[-len(suffix) - 1].isdigit():
            s = s[:-len(suffix)]
            break
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_iperf3(streams, seconds, length=None):
    """iperf3 loopback throughput in GB/s (a server started here, terminated after)."""
    port = free_port()
    srv = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # until the server listens
            r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                                "-P", str(streams), "-J"] + (["-l", length] if length else []),
                               capture_output=True, text=True)
            try:
                d = json.loads(r.stdout)
                return d["end"]["sum_received"]["bits_per_second"] / 8 / 1e9
            except (ValueError, KeyError):
                pass  # not listening yet ("error" in the JSON), try again
            time.sleep(0.1)
        sys.exit("iperf3 failed: " + r.stdout[-500:] + r.stderr[-500:])
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", default="4G", help="bytes per transfer (default 4G)")
    ap.add_argument("--threads", type=int, default=2, help="sink I/O threads (default 2)")
    ap.add_argument("--iperf-seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="run each transfer N times, keep best")
    ap.add_argument("--verify", action="store_true", help="raw GETs compare every byte")
    ap.add_argument("sink_args", nargs="*", help="more arguments for the sink (after --)")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    size = parse_size(a.size)
    exe = os.path.join(a.build, "bench", "s3flash-sink")
    tmp = tempfile.mkdtemp(prefix="s3flash-sink-bench.")
    port_file = os.path.join(tmp, "port")
    sink = subprocess.Popen([exe, "--port", "0", "--port-file", port_file, "--threads",
                             str(a.threads), *a.sink_args], stderr=subprocess.PIPE, text=True)
    rows = []
    try:
        for _ in range(500):
            if os.path.exists(port_file):
                break
            if sink.poll() is not None:
                sys.exit("sink failed: " + sink.stderr.read())
            time.sleep(0.01)
        port = int(open(port_file).read())
        url = f"http://127.0.0.1:{port}"
        load = [sys.executable, os.path.join(HERE, "sink_load.py"), "--port", str(port)]

        iperf = {}
        if shutil.which("iperf3"):
            for streams in (1, 2):
                iperf[streams] = run_iperf3(streams, a.iperf_seconds)
                rows.append((f"iperf3 -P {streams} ({a.iperf_seconds} s)", iperf[streams],
                             streams, None))
            # iperf3 writes 128 KiB at a time; with 1 MiB writes loopback goes further
            rows.append((f"iperf3 -P 1 -l 1M ({a.iperf_seconds} s)",
                         run_iperf3(1, a.iperf_seconds, "1M"), 0, None))

        def transfer(name, streams, cmd, shell=False):
            best = None
            for _ in range(a.repeat):
                c0 = cpu_seconds(sink.pid)
                t0 = time.perf_counter()
                r = subprocess.run(cmd, shell=shell, capture_output=True, text=True)
                dt = time.perf_counter() - t0
                c1 = cpu_seconds(sink.pid)
                if r.returncode != 0:
                    sys.exit(f"{name} failed ({r.returncode}): {r.stdout} {r.stderr}")
                if best is None or dt < best[0]:
                    best = (dt, c1 - c0)
            rows.append((name, size / best[0] / 1e9, streams, best[1]))

        gib = f"{size / (1 << 30):g} GiB"
        transfer(f"curl GET {gib}", 1,
                 ["curl", "-sf", "-o", "/dev/null", f"{url}/bench/size-{size}"])
        transfer(f"curl PUT {gib} (stdin)", 1,
                 f"head -c {size} /dev/zero | curl -sf -o /dev/null -T - "
                 f"-H 'Content-Length: {size}' -H 'Transfer-Encoding:' {url}/bench/curl-put",
                 shell=True)
        for conns in (1, 2):
            transfer(f"raw GET {gib}, {conns} conn", conns,
                     load + ["get", "--size", str(size), "--conns", str(conns)] +
                     (["--verify"] if a.verify else []))
            transfer(f"raw PUT {gib}, {conns} conn", conns,
                     load + ["put", "--size", str(size), "--conns", str(conns)])
    finally:
        sink.send_signal(signal.SIGTERM)
        err = sink.communicate(timeout=30)[1]
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"s3flash-sink, {a.threads} threads, {os.cpu_count()} CPUs, "
          f"{size} bytes per transfer")
    print(f"{'what':34} {'GB/s':>6} {'Gbit/s':>7} {'of iperf3':>9} {'sink CPU s':>10} "
          f"{'sink GB/CPU-s':>13}")
    for name, gbs, streams, cpu in rows:
        ratio = f"{gbs / iperf[streams]:.0%}" if streams in iperf and cpu is not None else ""
        c = f"{cpu:.2f}" if cpu is not None else ""
        eff = f"{size / 1e9 / cpu:.1f}" if cpu else ""
        print(f"{name:34} {gbs:6.2f} {gbs * 8:7.1f} {ratio:>9} {c:>10} {eff:>13}")
    print(err.strip().splitlines()[-1] if err.strip() else "")
    if a.json:
        recs = []
        for name, gbs, streams, cpu in rows:
            conns = streams or 1  # the -l 1M iperf3 row: one stream, no ratio
            recs.append(benchjson.record(
                "sink", name.split()[0], "loopback" if name.startswith("iperf3") else name.split()[1],
                gbs, "GB/s",
                {"connections": conns, "object_size": None if name.startswith("iperf3") else size,
                 "sink_threads": a.threads}, row=name, sink_cpu_s=cpu))
        benchjson.write(a.json, benchjson.document("sink", recs))


if __name__ == "__main__":
    main()
