#!/usr/bin/env python3
"""Sequential reads through `s3flash mount`, two or more builds side by side in one run.

One bench/s3flash-sink in S3-like mode for all rounds (so the rounds meet different
first-byte latency draws, unlike one bench/mount.py run per build); each round times
`s3flash cp` of the first build to /dev/null, then for each build a fresh mount reading
the same object with read(1 MiB) to the end (the order of the builds alternates), and
prints each read's MiB/s, its ratio to that round's `cp`, and the CPU seconds of the
daemon and of the reading process. docs/PERFORMANCE.md, "Sequential reads through the
mount: the read-ahead's ramp".

    sudo -E python3 bench/mount_seq_ab.py --build main=../main/build --build new=build
    sudo -E python3 bench/mount_seq_ab.py --build new=build --mib 256 --rounds 6 --cp-all

Needs root (FUSE mounts), fusermount3 and boto3. A build directory holds src/cli/s3flash.
--cp-all also times each other build's `cp` (it reads through the same reader).
--sink-arg passes an option to the sink (e.g. --sink-arg=--conn-rate=16M, --sink-arg=--seed=3).
--timeline prints when each of the first 40 reads returned (ms from the open).
--debug mounts with --debug, the logs (every request, timed) kept under --log-dir.
"""
import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def load_mount_bench():
    spec = importlib.util.spec_from_file_location("mountbench", ROOT / "bench" / "mount.py")
    mb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mb)
    return mb


def daemon_cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", required=True,
                    help="NAME=BUILD_DIR (repeatable; the first one's cp is the reference)")
    ap.add_argument("--mib", type=int, default=64, help="the object (default 64)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--memory-target", default="512M")
    ap.add_argument("--cp-all", action="store_true")
    ap.add_argument("--sink-arg", action="append", default=[])
    ap.add_argument("--timeline", action="store_true")
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--log-dir")
    a = ap.parse_args()
    builds = [tuple(b.split("=", 1)) for b in a.build]
    builds = [(n, os.path.abspath(d)) for n, d in builds]
    for n, d in builds:
        if not os.access(os.path.join(d, "src/cli/s3flash"), os.X_OK):
            sys.exit(f"{n}: no src/cli/s3flash in {d}")

    mb = load_mount_bench()
    os.environ.setdefault("S3FLASH_BUILD_DIR", builds[0][1])  # the sink's binary
    if a.sink_arg:  # appended to the sink's command line
        popen = subprocess.Popen

        class SinkPopen(popen):
            def __init__(self, argv, *k, **kw):
                if str(argv[0]).endswith("s3flash-sink"):
                    argv = list(argv) + a.sink_arg
                super().__init__(argv, *k, **kw)
        mb.subprocess.Popen = SinkPopen

    cfg = argparse.Namespace(ls_keys=[10], sink_bucket=f"s3f-seqab-{uuid.uuid4().hex[:8]}",
                             access_key="AKIDSINKBENCH", secret_key="SECRETSINKBENCH",
                             region="us-east-1")
    cfg.bucket = cfg.sink_bucket
    work = tempfile.mkdtemp(prefix="s3flash-seqab-")
    log_dir = a.log_dir or work
    os.makedirs(log_dir, exist_ok=True)
    with mb.Sink(cfg) as endpoint:
        cfg.endpoint = endpoint
        import boto3
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=cfg.access_key,
                     aws_secret_access_key=cfg.secret_key,
                     region_name=cfg.region).create_bucket(Bucket=cfg.bucket)
        src = os.path.join(work, "large")
        with open(src, "wb") as f:
            for _ in range(a.mib):
                f.write(os.urandom(MIB))
        cli = {n: os.path.join(d, "src/cli/s3flash") for n, d in builds}
        cfg.cli = cli[builds[0][0]]
        mb.s3flash(cfg, "cp", src, f"s3://{cfg.bucket}/large")
        os.unlink(src)

        def cp_rate(name):
            cfg.cli = cli[name]
            t = mb.timed(lambda: mb.s3flash(cfg, "cp", f"s3://{cfg.bucket}/large",
                                            "/dev/null"))[0]
            return a.mib / t

        ratios = {}
        for r in range(a.rounds):
            c0 = children_cpu()
            ref = cp_rate(builds[0][0])
            line = [f"round {r}: cp {ref:.0f} MiB/s ({children_cpu() - c0:.2f} s CPU)"]
            if a.cp_all:
                for name, _ in builds[1:]:
                    v = cp_rate(name)
                    ratios.setdefault(f"cp of {name}", []).append(v / ref)
                    line.append(f"cp of {name} {v:.0f}")
            for name, _ in (builds if r % 2 == 0 else builds[::-1]):
                d = os.path.join(work, f"m-{uuid.uuid4().hex[:6]}")
                opts = ["--metadata-ttl", "60", "--memory-target", a.memory_target]
                m = mb.Mount(cli[name], endpoint, cfg.access_key, cfg.secret_key,
                             cfg.bucket + "/", d, opts + (["--debug"] if a.debug else []),
                             region=cfg.region,
                             log_path=os.path.join(log_dir, f"mount-{name}-{r}.log")).start()
                try:
                    times, n = [], 0
                    d0, s0 = daemon_cpu(m.pid), self_cpu()
                    t0 = time.perf_counter()
                    with open(os.path.join(d, "large"), "rb", buffering=0) as f:
                        while True:
                            b = f.read(MIB)
                            if not b:
                                break
                            n += len(b)
                            times.append(time.perf_counter() - t0)
                    t = time.perf_counter() - t0
                    dcpu, scpu = daemon_cpu(m.pid) - d0, self_cpu() - s0
                finally:
                    m.stop()
                if n != a.mib * MIB:
                    sys.exit(f"{name}: read {n} bytes of {a.mib * MIB}")
                v = a.mib / t
                ratios.setdefault(name, []).append(v / ref)
                line.append(f"{name} {v:.0f} ({v / ref:.2f}x) daemon {dcpu:.2f} s "
                            f"reader {scpu:.2f} s")
                if a.timeline:
                    print(f"  {name} reads done at (ms):",
                          " ".join(f"{x * 1000:.0f}" for x in times[:40]), flush=True)
            print("  ".join(line), flush=True)
        for name, v in ratios.items():
            print(f"{name}: / cp mean {statistics.mean(v):.2f}x, median "
                  f"{statistics.median(v):.2f}x, rounds {[round(x, 2) for x in v]}")


if __name__ == "__main__":
    main()
