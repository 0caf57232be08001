#!/usr/bin/env python3
"""`s3flash bench` over connections, object sizes and memory limits, against the S3-like sink.

  python3 bench/sweep.py [--build build] [--json bench/results/sweep-<date>.json]
        [--connections 1,2,4,8,16] [--sizes 256K,1M,4M,16M,64M] [--memory 16M,32M,64M,128M]
        [--total 128M] [--sink-args "--s3-like"]

Starts build/bench/s3flash-sink with `--s3-like` (80 MB/s per connection each way, a 20 ms
median first byte: bench/README.md, "The S3-like mode"), where a client's throughput grows with
its connections, and runs `s3flash bench --json` (src/cli/cmd_bench.c) once per point:

- connections: `--concurrency N`, 2 objects of `--total` with 8 MiB parts (16 parts each at
  the default 128M: a part for every connection);
- object size: `--total` bytes in objects of each size (at least 2), default concurrency;
  bench moves one object at a time, so small objects pay the first byte per object;
- memory: `--memory-limit M` with `--writer` (the streaming writer draws its parts from the
  pool that the limit bounds; upload_buffer and downloads use the caller's buffers), `--total`
  in 2 objects.

Each record gets `params.sweep` (connections, object_size or memory): bench/plot.py draws one
line per phase against that axis. One JSON document (bench/benchjson.py), default
bench/results/sweep-<date>.json; a summary table on stdout.
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "servers"))

import benchjson  # noqa: E402
from ready import read_line, wait_http  # noqa: E402


def sizes(s):
    return [benchjson.parse_size(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--connections", default="1,2,4,8,16")
    ap.add_argument("--sizes", default="256K,1M,4M,16M,64M")
    ap.add_argument("--memory", default="16M,32M,64M,128M")
    ap.add_argument("--total", default="128M", help="bytes per point (default 128M)")
    ap.add_argument("--sink-args", default="--s3-like", help="the sink's options")
    ap.add_argument("--note", default=None, help="said in the JSON (e.g. 'loaded machine')")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    total = benchjson.parse_size(a.total)
    date = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    out = a.json or os.path.join(HERE, "results", f"sweep-{date}.json")
    cli = os.path.join(a.build, "src", "cli", "s3flash")
    sink = subprocess.Popen([os.path.join(a.build, "bench", "s3flash-sink"), "--port", "0",
                             "--print-port", "--threads", "2", *a.sink_args.split()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    recs = []
    try:
        port = int(read_line(sink, r"port (\d+)", "the sink").group(1))
        wait_http(f"http://127.0.0.1:{port}/", sink, "the sink")
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                   AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_REGION="us-east-1")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(k, None)

        def bench(sweep, *args):
            cmd = [cli, "-q", "bench", "s3://bench/sweep", "--json", *args]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
            for rec in json.loads(r.stdout)["records"]:
                rec["params"]["sweep"] = sweep
                rec["command"] = " ".join(["s3flash"] + cmd[1:])
                recs.append(rec)
                p = rec["params"]
                print(f"{sweep:12} {rec['metric']:9} conns {p['connections']:3} size "
                      f"{p['object_size']:>10} mem {p['memory'] >> 20:5} MiB "
                      f"{rec['value']:7.3f} GB/s", flush=True)

        for n in sizes(a.connections):
            bench("connections", "--concurrency", str(n), "--size", str(total), "--count", "2",
                  "--part-size", "8M")
        for sz in sizes(a.sizes):
            bench("object_size", "--size", str(sz), "--count", str(max(2, total // sz)))
        for m in sizes(a.memory):
            bench("memory", "--memory-limit", str(m), "--writer", "--size", str(total // 2),
                  "--count", "2", "--part-size", "8M")
    finally:
        sink.send_signal(signal.SIGTERM)
        sink.communicate(timeout=30)
    doc = benchjson.document("s3flash bench sweep", recs, note=a.note,
                             source=f"python3 bench/sweep.py {' '.join(sys.argv[1:])}; sink "
                                    f"{a.sink_args}")
    benchjson.write(out, doc)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
