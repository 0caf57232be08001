#!/usr/bin/env python3
"""S3 Express One Zone next to S3, emulated by the sink in one run: the sink's --express-like
mode (a directory bucket: first byte 2-5 ms, per-bucket request rates, session
authentication) beside its --s3-like mode (first byte 5-100 ms, per-prefix rates), same
per-connection rate (80 MiB/s). Rows: a checkpoint save and load (torch.save / torch.load
through s3flash.S3Checkpoint), and one epoch over a small-object dataset (S3MapDataset of N
objects of SIZE, read by a DataLoader with workers), by s3flash and, where it works against
the sink, s3torchconnector. Markdown on stdout; the Express/S3 ratio per row.

  python3 bench/express_bench.py [--ckpt-size 256M] [--objects 400] [--object-size 64K]
                                 [--workers 4] [--skip s3torchconnector]

Needs the built sink (S3FLASH_BUILD_DIR, default ./build) and the s3flash package on the
path (PYTHONPATH=$(bash tests/python/devenv.sh build)). Store mode keeps the bytes, so every
load is checked against what was saved.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


class Sink:
    def __init__(self, mode, store):
        build = os.environ.get("S3FLASH_BUILD_DIR", str(ROOT / "build"))
        self.tmp = tempfile.mkdtemp(prefix="xbench-")
        pf = Path(self.tmp) / "port"
        self.proc = subprocess.Popen([str(Path(build) / "bench" / "s3flash-sink"), "--port", "0",
                                      "--port-file", str(pf), "--threads", "2", mode,
                                      "--store", str(store), "--quiet"])
        deadline = time.monotonic() + 10
        while not pf.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("sink did not start")
            time.sleep(0.01)
        self.endpoint = f"http://127.0.0.1:{int(pf.read_text())}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=15)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def ckpt_rows(lib, endpoint, bucket, nbytes):
    state = {f"w{i}": torch.full((4 * MiB // 4,), float(i)) for i in range(nbytes // (4 * MiB))}
    if lib == "s3flash":
        from s3flash import S3Checkpoint
    else:
        from s3torchconnector import S3Checkpoint
    ck = S3Checkpoint(region="us-east-1", endpoint=endpoint)
    uri = f"s3://{bucket}/ckpt/{lib}.pt"

    def save():
        with ck.writer(uri) as w:
            torch.save(state, w)

    def load():
        with ck.reader(uri) as r:
            return torch.load(r)

    save()  # warm-up (connections, session)
    t_save, _ = timed(save)
    t_load, back = timed(load)
    assert all(torch.equal(back[k], v) for k, v in state.items()), "load differs"
    return t_save, t_load


def dataset_epoch(lib, endpoint, bucket, n, size, workers):
    if lib == "s3flash":
        from s3flash import S3Client, S3MapDataset
        c = S3Client("us-east-1", endpoint)
        for i in range(n):
            c.upload(bucket, f"ds/{i:05d}", bytes([i % 251]) * size)
    else:
        from s3torchconnector import S3MapDataset
    # the objects by name: the S3-like sink keeps no listing (bench/README.md)
    uris = [f"s3://{bucket}/ds/{i:05d}" for i in range(n)]
    ds = S3MapDataset.from_objects(uris, region="us-east-1", endpoint=endpoint,
                                   transform=lambda r: len(r.read()))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=workers,
                                     multiprocessing_context="fork")
    t, total = timed(lambda: sum(int(b.sum()) for b in dl))
    assert total == n * size, f"read {total} bytes, want {n * size}"
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt-size", default="256M")
    ap.add_argument("--objects", type=int, default=400)
    ap.add_argument("--object-size", default="64K")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--skip", default="")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    nbytes, osize = parse_size(a.ckpt_size), parse_size(a.object_size)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIDBENCH")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    modes = [("S3-like", "--s3-like", "bench-ckpt"),
             ("Express-like", "--express-like", "bench--use1-az4--x-s3")]
    libs = [lib for lib in ("s3flash", "s3torchconnector") if lib not in skip]
    res = {}
    for name, flag, bucket in modes:
        sink = Sink(flag, 4 * nbytes + 2 * a.objects * osize + 64 * MiB)
        try:
            for lib in libs:
                try:
                    s, l = ckpt_rows(lib, sink.endpoint, bucket, nbytes)
                    res[(lib, "save", name)] = f"{nbytes / MiB / s:.0f} MiB/s ({s:.2f} s)"
                    res[(lib, "load", name)] = f"{nbytes / MiB / l:.0f} MiB/s ({l:.2f} s)"
                    res[(lib, "save", name, "t")], res[(lib, "load", name, "t")] = s, l
                    if lib == "s3flash":
                        t = dataset_epoch(lib, sink.endpoint, bucket, a.objects, osize,
                                          a.workers)
                        res[(lib, "dataset", name)] = f"{a.objects / t:.0f} obj/s ({t:.2f} s)"
                        res[(lib, "dataset", name, "t")] = t
                except Exception as e:  # a peer's failure is shown in its row
                    for row in ("save", "load", "dataset"):
                        res.setdefault((lib, row, name), f"failed: {type(e).__name__}: "
                                                          f"{str(e)[:60]}")
        finally:
            sink.stop()
    print(f"checkpoint {nbytes / MiB:.0f} MiB (4 MiB tensors); dataset {a.objects} objects of "
          f"{osize >> 10} KiB, {a.workers} workers; sink threads 2, 80 MiB/s per connection\n")
    print("| library | operation | S3-like sink | Express-like sink | Express / S3 time |")
    print("|---|---|---|---|---|")
    for lib in libs:
        for row in ("save", "load", "dataset"):
            if (lib, row, "S3-like") not in res:
                continue
            t1, t2 = res.get((lib, row, "S3-like", "t")), res.get((lib, row, "Express-like", "t"))
            ratio = f"{t2 / t1:.2f}" if t1 and t2 else "-"
            print(f"| {lib} | {row} | {res[(lib, row, 'S3-like')]} | "
                  f"{res.get((lib, row, 'Express-like'), '-')} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
