#!/usr/bin/env python3
"""Many small objects, side by side (issue 22): datasets (samples/s), cp --recursive of
many small files up and down, and the mount reading small files with cat. One table.

  python3 bench/small_objects.py [--sizes 16K,64K,1M] [--count 2000] [--peer-count 300]
      [--first-byte-ms 20] [--workers 8] [--files 2000] [--sections datasets,cp,mount]
      [--build build] [--out docs-table.md]

Endpoint: the project's sink in S3-like mode (bench/s3flash-sink --s3-like: 20 ms median
first byte, 100 ms p99, 80 MB/s per connection; --first-byte-ms sets the median), one
fresh sink per section. Dataset rows read `size-N` keys the sink answers without storing
them (from_objects; bytes not kept); cp rows use a sink with --store. Every row is a fresh
process (peak RSS is its own: VmHWM of the process, and of its largest DataLoader worker).
The peers are measured on fewer objects (--peer-count) when they are slow: samples/s is a
rate, the table says the count of each row.

Rows: s3flash S3IterableDataset / S3MapDataset (defaults; the map dataset through a
DataLoader with batch_size 32) in one process and with --workers DataLoader workers;
s3torchconnector's the same; a boto3 thread pool (32 threads, in order) in one process.
cp: s3flash cp --recursive up and down, aws s3 cp --recursive (when installed), rclone
copy, boto3 (a 32-thread pool). mount: s3flash mount, `cat` of --files small files, without and with
--prefetch-listed (--mount-prefetch N).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import benchjson  # bench/, the script's own directory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUCKET = "small-bench"
REGION = "us-east-1"
AK, SK = "AKIDSMALLBENCH", "small-bench-secret"


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def fmt_size(n):
    for unit, m in (("M", 1 << 20), ("K", 1 << 10)):
        if n % m == 0:
            return f"{n // m} {unit}iB"
    return f"{n} B"


# -- the sink --------------------------------------------------------------------------------
class Sink:
    def __init__(self, build, first_byte_ms, store=None):
        self.dir = tempfile.mkdtemp(prefix="small-bench-")
        pf = os.path.join(self.dir, "port")
        cmd = [os.path.join(build, "bench", "s3flash-sink"), "--port-file", pf, "--s3-like",
               "--first-byte-ms", str(first_byte_ms), "--quiet", "--threads", "2"]
        if store:
            cmd += ["--store", store]
        self.proc = subprocess.Popen(cmd)
        deadline = time.time() + 10
        while time.time() < deadline:
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("the sink did not start")
        self.url = f"http://127.0.0.1:{open(pf).read().strip()}"

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def env_for(url):
    e = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_REGION=REGION,
             AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=url)
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CA_BUNDLE"):  # plain http
        e.pop(k, None)
    return e


def vmhwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# -- dataset rows (run in a child: python3 small_objects.py --row JSON) -------------------
def _len_read(r):
    return len(r.read())


def row_dataset(spec):
    import torch
    url, size, count, lib, kind, workers = (spec[k] for k in
                                             ("url", "size", "count", "lib", "kind", "workers"))
    keys = [f"ds/obj-{i:06d}-size-{size}" for i in range(count)]
    uris = [f"s3://{BUCKET}/{k}" for k in keys]
    t0 = time.perf_counter()
    n = nbytes = 0
    if lib == "boto3":
        import boto3
        from botocore.config import Config
        from concurrent.futures import ThreadPoolExecutor
        c = boto3.client("s3", endpoint_url=url, region_name=REGION, aws_access_key_id=AK,
                         aws_secret_access_key=SK,
                         config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))
        with ThreadPoolExecutor(32) as ex:
            t0 = time.perf_counter()
            for b in ex.map(lambda k: c.get_object(Bucket=BUCKET, Key=k)["Body"].read(), keys):
                n += 1
                nbytes += len(b)
    else:
        if lib == "s3flash":
            import s3flash as m
        else:
            import s3torchconnector as m
        cfg = m.S3ClientConfig(force_path_style=True)
        kw = dict(region=REGION, endpoint=url, transform=_len_read, s3client_config=cfg)
        if kind == "iterable":
            ds = m.S3IterableDataset.from_objects(uris, enable_sharding=True, **kw)
        else:
            ds = m.S3MapDataset.from_objects(uris, **kw)
        dl_kw = dict(batch_size=32, collate_fn=list, num_workers=workers)
        if kind == "map+batch_sampler":  # s3flash's helper: the next batch read ahead
            dl_kw = dict(batch_sampler=ds.batch_sampler(32, num_workers=workers),
                         collate_fn=list, num_workers=workers)
        if workers:
            dl_kw["multiprocessing_context"] = "fork"
        t0 = time.perf_counter()
        for batch in torch.utils.data.DataLoader(ds, **dl_kw):
            n += len(batch)
            nbytes += sum(batch)
    wall = time.perf_counter() - t0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ok = n == count and nbytes == count * size
    print("RESULT " + json.dumps(dict(rate=n / wall, wall=wall, n=n, ok=ok,
                                      rss_mib=vmhwm_kib() / 1024,
                                      worker_rss_mib=kids / 1024)), flush=True)


def run_row(spec, timeout=900):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--row", json.dumps(spec)],
                       capture_output=True, text=True, timeout=timeout, env=env_for(spec["url"]))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
    return None


def have(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def section_datasets(a, out):
    sink = Sink(a.build, a.first_byte_ms)
    try:
        for size in a.sizes:
            rows = []
            for workers in (0, a.workers):
                for kind in ("iterable", "map"):
                    for lib in ("s3flash", "s3torchconnector"):
                        if lib != "s3flash" and not have("s3torchconnector"):
                            continue
                        count = a.count if lib == "s3flash" else (
                            a.peer_count * (max(1, workers) if workers else 1))
                        r = run_row(dict(url=sink.url, size=size, count=count, lib=lib,
                                         kind=kind, workers=workers))
                        rows.append((f"{kind}, {workers or 1} "
                                     f"{'workers' if workers else 'process'}", lib, count, r))
                r = run_row(dict(url=sink.url, size=size, count=a.count, lib="s3flash",
                                 kind="map+batch_sampler", workers=workers))
                rows.append((f"map, {workers or 1} {'workers' if workers else 'process'}",
                             "s3flash, ds.batch_sampler(32)", a.count, r))
            r = run_row(dict(url=sink.url, size=size, count=a.count, lib="boto3",
                             kind="threads", workers=0))
            rows.append(("boto3 thread pool (32), 1 process", "boto3", a.count, r))
            out.append((f"Datasets, {fmt_size(size)} objects, {a.first_byte_ms} ms first "
                        "byte (samples/s)", rows))
    finally:
        sink.close()


# -- cp --recursive ---------------------------------------------------------------------------
def section_cp(a, out):
    sink = Sink(a.build, a.first_byte_ms, store="2G")
    src = tempfile.mkdtemp(prefix="small-cp-src-")
    size = 16 << 10
    try:
        for i in range(a.files):
            with open(os.path.join(src, f"f{i:06d}.bin"), "wb") as f:
                f.write(os.urandom(size))
        env = env_for(sink.url)
        s3flash = os.path.join(a.build, "src", "cli", "s3flash")
        if not os.path.exists(s3flash):
            s3flash = os.path.join(a.build, "s3flash")
        subprocess.run([s3flash, "mb", f"s3://{BUCKET}"], env=env, capture_output=True)
        boto_up = ("import boto3,os,sys\nfrom concurrent.futures import ThreadPoolExecutor\n"
                   "from botocore.config import Config\n"
                   "c=boto3.client('s3',config=Config(s3={'addressing_style':'path'},"
                   "max_pool_connections=32))\nsrc,dst=sys.argv[1],sys.argv[2]\n"
                   "fs=sorted(os.listdir(src))\n"
                   "with ThreadPoolExecutor(32) as ex: list(ex.map(lambda f: c.upload_file("
                   "os.path.join(src,f),'" + BUCKET + "',dst+f),fs))\n")
        boto_down = ("import boto3,os,sys\nfrom concurrent.futures import ThreadPoolExecutor\n"
                     "from botocore.config import Config\n"
                     "c=boto3.client('s3',config=Config(s3={'addressing_style':'path'},"
                     "max_pool_connections=32))\npre,dst=sys.argv[1],sys.argv[2]\n"
                     "ks=[o['Key'] for p in c.get_paginator('list_objects_v2').paginate("
                     "Bucket='" + BUCKET + "',Prefix=pre) for o in p.get('Contents',[])]\n"
                     "with ThreadPoolExecutor(32) as ex: list(ex.map(lambda k: c.download_file("
                     "'" + BUCKET + "',k,os.path.join(dst,k[len(pre):])),ks))\n")
        rc_cfg = os.path.join(src + "-rclone.conf")
        with open(rc_cfg, "w") as f:
            f.write(f"[sink]\ntype = s3\nprovider = Other\naccess_key_id = {AK}\n"
                    f"secret_access_key = {SK}\nendpoint = {sink.url}\nregion = {REGION}\n"
                    "force_path_style = true\n")
        tools = [("s3flash", lambda up, pre, d: [s3flash, "cp", "--recursive", "--quiet"] +
                  ([src, f"s3://{BUCKET}/{pre}"] if up else [f"s3://{BUCKET}/{pre}", d]))]
        if shutil.which("aws"):
            tools.append(("aws s3 cp", lambda up, pre, d: [
                "aws", "s3", "cp", "--recursive", "--quiet", "--endpoint-url", sink.url] +
                ([src, f"s3://{BUCKET}/{pre}"] if up else [f"s3://{BUCKET}/{pre}", d])))
        if shutil.which("rclone"):
            tools.append(("rclone copy", lambda up, pre, d: [
                "rclone", "--config", rc_cfg, "copy", "--transfers", "32", "--checkers", "32",
                "--s3-upload-cutoff", "64M",
                "--ignore-checksum"] +  # the sink's ETags are not MD5s
                ([src, f"sink:{BUCKET}/{pre}"] if up else [f"sink:{BUCKET}/{pre}", d])))
        tools.append(("boto3 (32 threads)", lambda up, pre, d: [
            sys.executable, "-c", boto_up if up else boto_down] +
            ([src, pre] if up else [pre, d + "/"])))
        rows = []
        for name, cmd in tools:
            pre = f"cp-{name.split()[0]}/"
            for up in (True, False):
                d = tempfile.mkdtemp(prefix="small-cp-dst-")
                t0 = time.perf_counter()
                p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M"] + cmd(up, pre, d),
                                   env=env, capture_output=True, text=True, timeout=1800)
                wall = time.perf_counter() - t0
                rss = [int(x.split()[1]) for x in p.stderr.splitlines()
                       if x.startswith("MAXRSS")]
                got = sum(len(fs) for _, _, fs in os.walk(d)) if not up else a.files
                ok = p.returncode == 0 and got == a.files
                if not ok:
                    sys.stderr.write(f"{name} {'up' if up else 'down'}: rc {p.returncode} "
                                     f"{got} files\n{p.stderr[-1500:]}\n")
                shutil.rmtree(d, ignore_errors=True)
                rows.append((f"cp --recursive {'up' if up else 'down'}", name, a.files,
                             dict(rate=a.files / wall, wall=wall, ok=ok,
                                  rss_mib=(rss[0] / 1024 if rss else 0), worker_rss_mib=0)))
        rows.sort(key=lambda r: (r[0] != "cp --recursive up", r[1] != "s3flash"))
        out.append((f"cp --recursive of {a.files} x 16 KiB files, {a.first_byte_ms} ms first "
                    "byte (files/s)", rows))
    finally:
        shutil.rmtree(src, ignore_errors=True)
        sink.close()


# -- the mount --------------------------------------------------------------------------------
def mount_cat(s3flash, env, mnt, n, opts):
    """Mount, `cat` every file (the shell's glob lists the directory first), unmount."""
    m = subprocess.Popen([s3flash, "mount", f"{BUCKET}/m/", mnt, "--foreground",
                          "--read-only", *opts], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    deadline = time.time() + 20
    while time.time() < deadline and not os.path.ismount(mnt):
        time.sleep(0.05)
    if not os.path.ismount(mnt):
        m.kill()
        sys.stderr.write("the mount did not come up: " + m.stderr.read().decode()[-1500:])
        return None
    try:
        t0 = time.perf_counter()
        p = subprocess.run(f"cat {mnt}/* | wc -c", shell=True, capture_output=True,
                           text=True, timeout=900)
        wall = time.perf_counter() - t0
        ok = p.stdout.strip() == str(n * (16 << 10))
        return dict(rate=n / wall, wall=wall, ok=ok, rss_mib=0, worker_rss_mib=0)
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        try:
            m.wait(10)
        except subprocess.TimeoutExpired:
            m.kill()


def section_mount(a, out):
    sink = Sink(a.build, a.first_byte_ms, store="1G")
    mnt = tempfile.mkdtemp(prefix="small-mnt-")
    n = min(a.files, 1000)
    try:
        env = env_for(sink.url)
        s3flash = os.path.join(a.build, "src", "cli", "s3flash")
        subprocess.run([s3flash, "mb", f"s3://{BUCKET}"], env=env, capture_output=True)
        src = tempfile.mkdtemp(prefix="small-mnt-src-")
        for i in range(n):
            with open(os.path.join(src, f"f{i:06d}.bin"), "wb") as f:
                f.write(os.urandom(16 << 10))
        subprocess.run([s3flash, "cp", "--recursive", "--quiet", src, f"s3://{BUCKET}/m/"],
                       env=env, check=True, timeout=600)
        shutil.rmtree(src, ignore_errors=True)
        rows = []
        for opts in ([], ["--prefetch-listed", str(a.mount_prefetch)]):
            r = mount_cat(s3flash, env, mnt, n, opts)
            rows.append(("cat dir/*", " ".join(["s3flash mount"] + opts), n, r))
        if rows[0][3] and rows[1][3]:
            rows[1][3]["ratio"] = rows[1][3]["rate"] / rows[0][3]["rate"]
        out.append((f"Mount: cat of {n} x 16 KiB files, {a.first_byte_ms} ms first byte "
                    "(files/s)", rows))
    finally:
        os.rmdir(mnt) if os.path.isdir(mnt) and not os.path.ismount(mnt) else None
        sink.close()


def table(out):
    lines = []
    for title, rows in out:
        lines += ["", f"**{title}**", "",
                  "| row | client | objects | rate | s3flash is | peak RSS MiB (worker) | ok |",
                  "|---|---|---|---|---|---|---|"]
        base = {}
        for row, lib, count, r in rows:
            if lib == "s3flash" and r:
                base[row] = r["rate"]
        for row, lib, count, r in rows:
            if not r:
                lines.append(f"| {row} | {lib} | {count} | failed | | | |")
                continue
            b = base.get(row) or next(iter(base.values()), None)
            ratio = f"{b / r['rate']:.1f}x" if b and not lib.startswith("s3flash") else ""
            if r.get("ratio"):
                ratio = f"{r['ratio']:.1f}x the mount without it"
            wr = f" ({r['worker_rss_mib']:.0f})" if r.get("worker_rss_mib") else ""
            lines.append(f"| {row} | {lib} | {count} | {r['rate']:.0f} | {ratio} | "
                         f"{r['rss_mib']:.0f}{wr} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--row")
    ap.add_argument("--sizes", default="16K,64K,1M")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--peer-count", type=int, default=200)
    ap.add_argument("--first-byte-ms", type=int, default=20)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--sections", default="datasets,cp,mount")
    ap.add_argument("--mount-prefetch", type=int, default=16,
                    help="the mount section's second row: --prefetch-listed N")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    if a.row:
        return row_dataset(json.loads(a.row))
    a.sizes = [parse_size(s) for s in a.sizes.split(",")]
    out = []
    for s in a.sections.split(","):
        {"datasets": section_datasets, "cp": section_cp, "mount": section_mount}[s](a, out)
        print(table(out[-1:]) if out else "", flush=True)
    t = table(out)
    print("\n=== all ===" + t)
    if a.out:
        with open(a.out, "w") as f:
            f.write(t + "\n")
    if a.json:  # a record per row: its rate, the client as the variant
        benchjson.write_markdown(a.json, t, "small objects", variant_col=1, row_col=0,
                                 value_cols=[3], unit_from_title=True)


if __name__ == "__main__":
    main()
