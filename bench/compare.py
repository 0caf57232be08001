#!/usr/bin/env python3
"""s3flash side by side with s3torchconnector, awscrt's S3Client, boto3 and local disk, in one
session: every scenario with every client, clients alternated, several repetitions, medians and
min-max, ratios to s3flash. Run it through `bash bench/run.sh [--quick] [--rgw]` (which installs
the peers and the package and builds the sink); see bench/README.md.

  python3 bench/compare.py [--quick] [--rgw] [--no-sink] [--scenarios save,load,raw,...]
                           [--sizes 256M,1G,4G] [--repeat 3] [--sink BIN] [--store-max B]
                           [--s3-like [--link 400M] [--lean] [--dcp-size B] ...]

Every scenario once against the S3-like sinks on a small machine, in about 3 minutes
(bench/README.md, "compare.py"): --s3-like --quick --lean --link 400M --sizes 1G
--dcp-size 256M --lightning-size 64M --dataset-count 300 --no-limits

Endpoints: "sink" (bench/sink.c discarding bodies: every upload-side row), "sink-store" (the
same binary with --store, a fresh process per group: load, dcp and dataset read back real
bytes) and, with --rgw, Ceph RGW.

Each run is a fresh process (bench/compare/worker.py) so that peak RSS and CPU are its own.
The worker measures its phase (wall, user+sys of its threads and reaped children, peak RSS via
VmHWM reset at the phase start) and the server's CPU over the phase from /proc/<pid>/stat.
Writes bench/results/compare-<date>.md and .png (matplotlib), and prints the table.
"""
import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchjson  # noqa: E402
from sink_bench import parse_size, run_iperf3  # noqa: E402

MiB = 1 << 20
WORKER = os.path.join(HERE, "compare", "worker.py")
BUCKET = "s3flash-compare"

# (client, settings label, extra spec) per scenario; s3flash "defaults" first: the baseline.
VARIANTS = {
    "save": [("s3flash", "defaults", {}), ("s3flash", "tuned", {"tuned": True}),
             ("s3tc", "defaults", {}), ("s3tc", "tuned", {"tuned": True}),
             ("boto3", "defaults", {}), ("boto3", "tuned", {"tuned": True}),
             ("local", "fsync", {})],
    "load": [("s3flash", "sequential", {"reader": "seq"}),
             ("s3flash", "range_based", {"reader": "range"}),
             ("s3tc", "sequential", {"reader": "seq"}),
             ("s3tc", "sequential tuned", {"reader": "seq", "tuned": True}),
             ("s3tc", "range_based", {"reader": "range"}),
             ("boto3", "defaults", {}), ("boto3", "tuned", {"tuned": True}),
             ("local", "page cache", {}), ("local", "cold (pages dropped)", {"cold": True})],
    "raw": [("s3flash", "defaults", {}), ("s3flash", "tuned", {"tuned": True}),
            ("awscrt", "defaults", {}), ("awscrt", "tuned", {"tuned": True}),
            ("awscrt", "tuned, files in /dev/shm", {"tuned": True, "files": True}),
            ("boto3", "defaults", {}), ("boto3", "tuned", {"tuned": True})],
    "dcp": [("s3flash", "defaults", {}), ("s3flash", "tuned", {"tuned": True}),
            ("s3tc", "defaults", {}), ("s3tc", "tuned", {"tuned": True}),
            ("local", "FileSystemWriter", {}), ("local", "FileSystemWriter tuned",
                                                {"tuned": True})],
    "lightning": [("s3flash", "defaults", {}), ("s3flash", "tuned", {"tuned": True}),
                  ("s3tc", "defaults", {}), ("s3tc", "tuned", {"tuned": True}),
                  ("local", "TorchCheckpointIO", {})],
    "dataset": [("s3flash", "iterable", {"kind": "iterable"}),
                ("s3flash", "iterable prefetch=8", {"kind": "iterable", "tuned": True}),
                ("s3flash", "map", {"kind": "map"}),
                ("s3flash", "map prefetch=8", {"kind": "map", "tuned": True}),
                ("s3tc", "iterable", {"kind": "iterable"}), ("s3tc", "map", {"kind": "map"})],
}

TUNED_TEXT = """\
"tuned" settings (bench/compare/worker.py TUNED): s3flash part_size 16 MiB, memory_limit 1 GiB
(DCP: thread_count 4; datasets: prefetch=8); s3torchconnector throughput_target_gbps 100,
part_size 16 MiB (DCP: thread_count 4); awscrt throughput_target_gbps 100, part_size 16 MiB;
boto3 TransferConfig(multipart_chunksize=16 MiB, multipart_threshold=16 MiB, max_concurrency=16),
max_pool_connections 20. awscrt "files in /dev/shm": the CRT's own fast path
(send_filepath/recv_filepath: it reads and writes the file itself, no Python in the data
path), from and to tmpfs; the file is written before the phase. Raw small objects: 8 threads by default, 32 tuned (s3flash and boto3
calls; awscrt gets every request at once, as its API is asynchronous). "defaults": the
client's own defaults, with only what the endpoint needs (path style, endpoint, keys)."""


# --lean: one row per client (its defaults; s3flash's two readers and dataset kinds), so that a
# run of every scenario fits in minutes on a small machine, where each run's process start-up
# (torch's import) is most of the time. The store scenarios run against sink-store only.
LEAN = {
    "save": [("s3flash", "defaults"), ("s3tc", "defaults"), ("boto3", "defaults"),
             ("local", "fsync")],
    "load": [("s3flash", "sequential"), ("s3flash", "range_based"), ("s3tc", "sequential"),
             ("s3tc", "range_based"), ("boto3", "defaults"), ("local", "page cache")],
    "raw": [("s3flash", "defaults"), ("awscrt", "defaults"), ("boto3", "defaults")],
    "dcp": [("s3flash", "defaults"), ("s3tc", "defaults"), ("local", "FileSystemWriter")],
    "lightning": [("s3flash", "defaults"), ("s3tc", "defaults"), ("local", "TorchCheckpointIO")],
    "dataset": [("s3flash", "iterable"), ("s3flash", "map"), ("s3tc", "iterable"),
                ("s3tc", "map")],
}


def lean_variants():
    for sc, keep in LEAN.items():
        VARIANTS[sc] = [v for v in VARIANTS[sc] if v[:2] in keep or "io.max" in v[1]]


def fmt_size(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return str(n)


def proc_cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def rgw_pids():
    """The Ceph daemons serving RGW (radosgw, ceph-osd, ceph-mon): their CPU counts as the
    server's. They are shared with whatever else uses this RGW at the time."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() in ("radosgw", "ceph-osd", "ceph-mon"):
                        pids.append(int(d))
            except OSError:
                pass
    return pids


class Sink:
    """bench/sink.c in a process of its own; store=N: with --store N (it keeps the bytes)."""

    def __init__(self, exe, threads=2, store=0, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="s3flash-compare-sink.")
        pf = os.path.join(self.tmp, "port")
        self.err = open(os.path.join(self.tmp, "stderr"), "w+")
        self.p = subprocess.Popen([exe, "--port", "0", "--port-file", pf, "--threads",
                                   str(threads)] + (["--store", str(store)] if store else [])
                                  + list(extra), stderr=self.err)
        for _ in range(200):
            if os.path.exists(pf) or self.p.poll() is not None:
                break
            time.sleep(0.05)
        if not os.path.exists(pf):
            self.err.seek(0)
            sys.exit(f"the sink ({exe}) did not start: {self.err.read().strip()}")
        with open(pf) as f:
            self.port = int(f.read())

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=30)
        self.err.seek(0)
        return self.err.read().strip()


def run_worker(spec, timeout, worker=WORKER):
    """Run one worker (compare's, or another that prints RESULT lines: bench/model_load.py's);
    its RESULT lines (dicts). A crash gives one {'error': ...}."""
    try:
        p = subprocess.run([sys.executable, worker, json.dumps(spec)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout} s"}]
    res = [json.loads(ln[7:]) for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if not res:
        res = [{"error": f"exit {p.returncode}: {p.stderr.strip()[-400:]}"}]
    if any("error" in r for r in res):
        sys.stderr.write(p.stderr[-3000:])
    return res


def median_range(xs):
    if not xs:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(xs), min(xs), max(xs)


class Results:
    def __init__(self):
        self.rows = {}    # key -> {"runs": [...], "skip"/"error": str}
        self.order = []

    def add(self, key, r):
        if key not in self.rows:
            self.rows[key] = {"runs": [], "skip": None, "error": None}
            self.order.append(key)
        row = self.rows[key]
        if "skip" in r:
            row["skip"] = r["skip"]
        elif "error" in r:
            row["error"] = r["error"]
        else:
            row["runs"].append(r)


def physical_limits(a, results):
    """iperf3 loopback (1 and 2 streams), memcpy bandwidth, local disk write + fsync."""
    secs = 2 if a.quick else 5
    for streams in (1, 2):
        try:
            gbs = run_iperf3(streams, secs, "1M")
            results.add(("limit", "-", "-", f"iperf3 -P {streams} -l 1M", "loopback TCP", ""),
                        {"wall": secs, "bytes": gbs * 1e9 * secs, "cpu": float("nan"),
                         "server_cpu": 0.0, "rss_peak": 0, "rss_base": 0})
        except SystemExit as e:
            print(f"iperf3: {e}", file=sys.stderr)
    n = (256 if a.quick else 1024) * MiB
    for r in run_worker({"scenario": "memcpy", "client": "memcpy", "size": n, "prefix": "",
                         "endpoint": a.endpoints[0]}, 300):
        results.add(("limit", "-", fmt_size(n), "memcpy", "numpy copyto, pre-faulted", ""), r)
    path = os.path.join(a.local_dir, f"s3flash-compare-dd-{os.getpid()}")
    mb = n // MiB
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "conv=fsync"],
                   check=True, capture_output=True)
    w = time.perf_counter() - t0
    os.unlink(path)
    results.add(("limit", "-", fmt_size(n), "dd conv=fsync", f"disk write ({a.local_dir})", ""),
                {"wall": w, "bytes": n, "cpu": float("nan"), "server_cpu": 0.0, "rss_peak": 0,
                 "rss_base": 0})


# Scenarios run against the store-mode sink (sink-store): those that read back what they wrote.
# Uploads (save, raw, lightning) are measured against the discarding sink only, so that the
# sink's own copy of the bytes does not slow them.
STORE_SCENARIOS = ("load", "dcp", "dataset")
# DCP's save phase against sink-store (it must run, to have something to load) is left out of
# the table: the sink copies the bytes into memory it may have to fault in first. The save
# rows are those against the discarding sink.
STORE_UNTABLED_PHASES = ("save",)


def s3_like_variants(a):
    """The S3-like mode's extra baseline: torch.save + fsync with the device's bandwidth
    capped (cgroup v2 io.max) at --device-rate."""
    if a.s3_like and a.device_bps:
        VARIANTS["save"].append(("local", f"fsync, io.max {fmt_rate(a.device_bps)}",
                                 {"io_max": a.device_bps}))


def fmt_rate(bps):
    return f"{bps / MiB:.0f} MiB/s"


def _trace_rows(tpath):
    rows = []
    with open(tpath) as f:
        for ln in f:
            t, conns, active, bin_, bout = map(int, ln.split())
            rows.append((t, conns, active, bin_, bout))
    return rows


def _trace_table(rows, col, what, head):
    """Markdown for one stretch of the trace: a sparkline of the requests in flight and a
    table; col 3 (bytes received) or 4 (bytes sent) for the MB/s column."""
    busy = [i for i, r in enumerate(rows) if r[2] > 0]
    if not busy:
        return [head + "; no request seen in the trace."]
    rows = rows[busy[0]:busy[-1] + 2]
    bars = " ▁▂▃▄▅▆▇█"
    top = max(r[2] for r in rows) or 1
    spark = "".join(bars[min(8, (r[2] * 8 + top - 1) // top)] for r in rows)
    act = sorted(r[2] for r in rows[:-1]) or [0]
    dur = (rows[-1][0] - rows[0][0]) / 1000 or 0.1
    mbs = (rows[-1][col] - rows[0][col]) / dur / 1e6
    out = [head + f"; connections with a request in flight every 100 ms: median "
           f"{act[len(act) // 2]}, max {top}; {mbs:.0f} MB/s {what} over the "
           f"{dur:.1f} s with requests in flight:", "", "`" + spark + "`", "",
           f"| t ms | connections open | requests in flight | {what} MB/s over the step |",
           "|---|---|---|---|"]
    step = max(1, len(rows) // 20)
    for i in range(0, len(rows) - 1, step):
        t, conns, active = rows[i][:3]
        j = min(i + step, len(rows) - 1)
        dt = (rows[j][0] - t) / 1000 or 0.1
        out.append(f"| {t - rows[0][0]} | {conns} | {active} | "
                   f"{(rows[j][col] - rows[i][col]) / dt / 1e6:.0f} |")
    return out


def trace_save(a):
    """One large s3flash save (defaults: S3Checkpoint.writer) and its load (sequential
    reader) against a fresh S3-like store-mode sink with --trace: the connections in flight
    every 100 ms. Returns markdown lines."""
    size = max(a.sizes)
    tpath = os.path.join(tempfile.mkdtemp(prefix="s3flash-compare-trace."), "trace")
    sk = Sink(a.sink, store=int(size * 1.25) + 64 * MiB,
              extra=list(a.sink_extra) + ["--trace", tpath])
    ep = dict(name="sink", kind="sink", url=f"http://127.0.0.1:{sk.port}", region="us-east-1",
              access_key="bench", secret_key="bench", bucket="bench", pids=[sk.p.pid])
    base = {"client": "s3flash", "tuned": False, "size": size, "endpoint": ep,
            "prefix": "cmp", "local_dir": a.local_dir, "server_pids": [sk.p.pid]}
    split = 0
    try:
        # prepare_load is an s3flash save of the state (S3Checkpoint.writer, defaults), as
        # the save scenario's, then a torch.save to the local disk for the local rows
        pr = run_worker(dict(base, scenario="prepare_load"), a.timeout)[0]
        time.sleep(0.3)
        split = len(_trace_rows(tpath))
        ld = [{"error": "prepare: " + pr["error"]}] if "error" in pr else run_worker(
            dict(base, scenario="load", reader="seq", want_n=pr["n"], want_bytes=pr["bytes"],
                 local_path=pr["path"]), a.timeout)
        if pr.get("path") and os.path.exists(pr["path"]):
            os.unlink(pr["path"])
    finally:
        sk.stop()
    rows = _trace_rows(tpath)
    r0 = ld[0]
    lhead = (f"s3flash load of {fmt_size(size)} (sequential reader, defaults): "
             + (f"{r0['bytes'] / r0['wall'] / 1e9:.2f} GB/s by its own clock"
                if "wall" in r0 else r0.get("error") or r0.get("skip") or "?"))
    return (_trace_table(rows[:split], 3, "received", f"s3flash save of {fmt_size(size)} "
                         "(S3Checkpoint.writer, defaults)")
            + [""] + _trace_table(rows[split:], 4, "sent", lhead))


def plan(a):
    """[(scenario, endpoint, size label, base spec, variants)] in run order."""
    out = []
    scen = a.scenarios
    for ep in a.endpoints:
        rgw = ep["kind"] == "rgw"
        store = ep.get("store", False)   # the sink with --store: it keeps the bytes
        real = rgw or store              # the server returns the bytes that were put
        sizes = [s for s in a.sizes if not rgw or s <= a.rgw_max]
        for sc in scen:
            if store and sc not in STORE_SCENARIOS:
                continue
            if a.lean and ep["kind"] == "sink" and not store and sc in STORE_SCENARIOS \
                    and any(e.get("store") for e in a.endpoints):
                continue  # --lean: these run against sink-store only
            if sc == "save":
                for s in sizes:
                    out.append((sc, ep, fmt_size(s), {"size": s}))
            elif sc == "load":
                if not real:
                    continue  # the discarding sink keeps sizes, not bytes: see sink-store
                for s in sizes:
                    out.append((sc, ep, fmt_size(s), {"size": s}))
            elif sc == "raw":
                for s in sizes:
                    out.append((sc, ep, f"1 x {fmt_size(s)}", {"size": s, "shape": "large"}))
                out.append((sc, ep, f"{a.small_count} x 256 KiB",
                            {"size": 256 * 1024, "shape": "small", "count": a.small_count}))
            elif sc == "dcp":
                out.append((sc, ep, fmt_size(a.dcp_size), {"size": a.dcp_size, "load": real}))
            elif sc == "lightning":
                out.append((sc, ep, fmt_size(a.ltn_size), {"size": a.ltn_size, "saves": 3}))
            elif sc == "dataset":
                n = a.ds_count if not rgw else min(a.ds_count, a.rgw_ds_count)
                out.append((sc, ep, f"{n} x {fmt_size(a.ds_obj)}",
                            {"size": a.ds_obj, "count": n, "ds_prefix": "cmp-ds",
                             "ds_real": real}))
    return out


def prepare(a, sc, ep, spec):
    """What a group needs before its runs: the checkpoint to load, the dataset objects."""
    base = dict(spec, endpoint=ep, prefix="cmp", local_dir=a.local_dir,
                server_pids=ep["pids"], client="s3flash", tuned=False)
    if sc == "load":
        r = run_worker(dict(base, scenario="prepare_load"), 900)[0]
        if "error" in r:
            return {"error": r["error"]}
        return {"want_n": r["n"], "want_bytes": r["bytes"], "local_path": r["path"]}
    if sc == "dataset" and (ep["kind"] == "rgw" or ep.get("store")):
        r = run_worker(dict(base, scenario="prepare_dataset"), 900)[0]
        if "error" in r:
            return {"error": r["error"]}
    return {}


def cleanup(a, ep, sc, extra):
    if sc == "load" and extra.get("local_path") and os.path.exists(extra["local_path"]):
        os.unlink(extra["local_path"])
    if ep["kind"] == "rgw":
        import boto3
        from botocore.config import Config
        c = boto3.client("s3", endpoint_url=ep["url"], region_name=ep["region"],
                         aws_access_key_id=ep["access_key"],
                         aws_secret_access_key=ep["secret_key"],
                         config=Config(s3={"addressing_style": "path"}))
        for prefix in ("cmp/", "cmp-ds/"):
            keys = []
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=ep["bucket"],
                                                                    Prefix=prefix):
                keys += [o["Key"] for o in page.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                c.delete_objects(Bucket=ep["bucket"], Delete={
                    "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


def start_store_sink(a, ep):
    """A fresh store-mode sink for one group (its port and pid into ep): stopping it after
    the group frees every byte the group put (the sink lists nothing, so DCP's prefix deletes
    cannot), and the next group starts from empty memory."""
    sk = Sink(a.sink, store=a.store_max, extra=a.sink_extra)
    ep.update(url=f"http://127.0.0.1:{sk.port}", pids=[sk.p.pid])
    return sk


def run_all(a, results):
    groups = plan(a)
    total = sum(len(VARIANTS[g[0]]) for g in groups) * a.repeat
    done = 0
    t_start = time.time()
    for sc, ep, label, spec in groups:
        store_sink = start_store_sink(a, ep) if ep.get("store") else None
        try:
            run_group(a, results, sc, ep, label, spec, done, total, t_start)
        finally:
            if store_sink:
                rep = store_sink.stop()
                a.store_reports.append(f"{sc} {label}: " + " / ".join(
                    ln.replace("s3flash-sink: ", "") for ln in rep.splitlines()[-2:]))
        done += len(VARIANTS[sc]) * a.repeat


def run_group(a, results, sc, ep, label, spec, done, total, t_start):
    """The runs of one group (scenario, endpoint, size): every client, alternated."""
    extra = prepare(a, sc, ep, spec)
    variants = VARIANTS[sc]
    for rep in range(a.repeat):
        k = rep % len(variants)  # alternate: each repetition starts with another client
        for client, settings, vx in variants[k:] + variants[:k]:
            done += 1
            key = (sc, ep["name"], label, client, settings)
            if "error" in extra:
                results.add(key + ("",), {"error": "prepare: " + extra["error"]})
                continue
            s = dict(spec, **extra)
            s.update(tuned=False, scenario=sc, client=client, endpoint=ep, prefix="cmp",
                     local_dir=a.local_dir,
                     server_pids=ep["pids"] if client != "local" else [])
            s.update(vx)
            t0 = time.time()
            rs = run_worker(s, a.timeout)
            for r in rs:
                if ep.get("store") and r.get("phase") in STORE_UNTABLED_PHASES \
                        and not a.lean:
                    continue  # uploads are measured against the discarding sink
                results.add(key + (r.get("phase", "main"),), r)
            first = rs[0]
            what = first.get("skip") or first.get("error") or ", ".join(
                f"{r.get('phase')} {r['wall']:.2f}s" for r in rs[:3])
            print(f"[{done}/{total} {time.time() - t_start:.0f}s] {sc} {ep['name']} "
                  f"{label} {client} {settings}: {what} ({time.time() - t0:.1f}s)",
                  file=sys.stderr, flush=True)
            if first.get("skip"):  # not available: no point repeating
                variants = [v for v in variants if v[:2] != (client, settings)]
    cleanup(a, ep, sc, extra)


# -- the table -----------------------------------------------------------------------------
def summarize(results):
    """One dict per row: medians and ranges; ratios to the s3flash baseline of its group."""
    out = []
    for key in results.order:
        sc, epn, label, client, settings, phase = key
        row = results.rows[key]
        d = dict(scenario=sc, endpoint=epn, size=label, client=client, settings=settings,
                 phase=phase, skip=row["skip"], error=row["error"], n=len(row["runs"]))
        runs = row["runs"]
        if runs:
            walls = [r["wall"] for r in runs]
            if sc == "lightning":  # every save of every run is one sample
                pass
            d["wall"] = median_range(walls)
            d["gbs"] = median_range([r["bytes"] / r["wall"] / 1e9 for r in runs])
            d["cpu"] = statistics.median(r["cpu"] for r in runs)
            d["server_cpu"] = statistics.median(r.get("server_cpu", 0.0) for r in runs)
            d["rss"] = statistics.median(r["rss_peak"] for r in runs)
            d["rss_extra"] = statistics.median(r["rss_peak"] - r["rss_base"] for r in runs)
            d["items"] = runs[0].get("items")
            d["notes"] = sorted({r.get("note") for r in runs if r.get("note")})
        out.append(d)
    base = {}
    for d in out:
        if d["client"] == "s3flash" and "wall" in d and d["scenario"] != "limit":
            g = (d["scenario"], d["endpoint"], d["size"], d["phase"])
            base.setdefault(g, d)  # the first s3flash row (defaults / sequential / iterable)
    for d in out:
        g = (d["scenario"], d["endpoint"], d["size"], d["phase"])
        b = base.get(g)
        if b and "wall" in d:
            d["ratio_wall"] = d["wall"][0] / b["wall"][0]
            tot = d["cpu"] + d["server_cpu"]
            btot = b["cpu"] + b["server_cpu"]
            d["ratio_cpu"] = tot / btot if btot > 0 else float("nan")
    return out


def table(rows, link_bps=0):
    """The runs; with link_bps (the S3-like mode's emulated link), GB/s also as a fraction
    of it."""
    hdr = ("| scenario | endpoint | size | client | settings | phase | runs | wall s, median "
           "(min–max) | GB/s | CPU s client + server | peak RSS MiB (+ over start) | "
           "× s3flash wall | × s3flash CPU | notes |")
    if link_bps:
        hdr = hdr.replace("| GB/s |", "| GB/s | of link |")
    lines = [hdr, "|" + "---|" * (15 if link_bps else 14)]
    for d in rows:
        if d["scenario"] == "limit":
            continue
        head = (f"| {d['scenario']} | {d['endpoint']} | {d['size']} | {d['client']} | "
                f"{d['settings']} | {d['phase']} | {d['n']} |")
        if "wall" not in d:
            why = d["skip"] or ("ERROR " + (d["error"] or "?"))
            lines.append(head + " — |" * (7 if link_bps else 6) + f" {why} |")
            continue
        w, g = d["wall"], d["gbs"]
        ws = f"{w[0]:.3f}" + (f" ({w[1]:.3f}–{w[2]:.3f})" if d["n"] > 1 else "")
        gs = f"{g[0]:.2f}" + (f" ({g[1]:.2f}–{g[2]:.2f})" if d["n"] > 1 else "")
        if d["scenario"] == "dataset" and d.get("items"):
            gs += f"; {d['items'] / w[0]:.0f} samples/s"
        if link_bps:
            gs += f" | {g[0] * 1e9 / link_bps:.0%}"
        rw = f"{d['ratio_wall']:.2f}" if "ratio_wall" in d else "—"
        rc = f"{d['ratio_cpu']:.2f}" if "ratio_cpu" in d else "—"
        notes = "; ".join(d["notes"]) + ((" " + d["error"]) if d["error"] else "")
        lines.append(head + f" {ws} | {gs} | {d['cpu']:.2f} + {d['server_cpu']:.2f} | "
                     f"{d['rss'] / MiB:.0f} (+{max(d['rss_extra'], 0) / MiB:.0f}) | {rw} | {rc} | "
                     f"{notes} |")
    return "\n".join(lines)


def limits_table(rows):
    lines = ["| what | how | size | GB/s | wall s |", "|---|---|---|---|---|"]
    for d in rows:
        if d["scenario"] == "limit" and "wall" in d:
            lines.append(f"| {d['client']} | {d['settings']} | {d['size']} | "
                         f"{d['gbs'][0]:.2f} | {d['wall'][0]:.2f} |")
    return "\n".join(lines)


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = []
    for d in rows:
        if d["scenario"] == "limit" or "wall" not in d:
            continue
        g = (d["endpoint"], d["scenario"], d["size"], d["phase"])
        if g not in groups:
            groups.append(g)
    if not groups:
        return
    ncol = 3
    nrow = (len(groups) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 3.2 * nrow), squeeze=False)
    colors = {"s3flash": "tab:green", "s3tc": "tab:orange", "awscrt": "tab:purple",
              "boto3": "tab:blue", "local": "tab:gray"}
    for ax, g in zip(axes.flat, groups):
        ds = [d for d in rows if "wall" in d and (d["endpoint"], d["scenario"], d["size"],
                                                  d["phase"]) == g]
        names = [f"{d['client']}\n{d['settings']}" for d in ds]
        vals = [d["gbs"][0] for d in ds]
        err = [[d["gbs"][0] - d["gbs"][1] for d in ds], [d["gbs"][2] - d["gbs"][0] for d in ds]]
        ax.barh(range(len(ds)), vals, xerr=err, color=[colors.get(d["client"], "k") for d in ds])
        ax.set_yticks(range(len(ds)))
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{g[1]} {g[3] if g[3] != 'main' else ''} {g[2]} — {g[0]}", fontsize=9)
        ax.set_xlabel("GB/s (median; bars min–max)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def versions():
    out = {}
    for mod in ("s3flash", "s3torchconnector", "awscrt", "boto3", "torch", "lightning"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception:  # noqa: BLE001
            out[mod] = "not installed"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repetition")
    ap.add_argument("--rgw", action="store_true",
                    help="also against Ceph RGW (S3FLASH_TEST_* environment)")
    ap.add_argument("--no-sink", action="store_true", help="skip the loopback sink")
    ap.add_argument("--scenarios", default="save,load,raw,dcp,lightning,dataset")
    ap.add_argument("--sizes", default=None, help="state dict / large object sizes "
                    "(default 256M,1G,4G; --quick 64M)")
    ap.add_argument("--rgw-max", default="1G", help="largest size sent to RGW (default 1G)")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; quick 1)")
    ap.add_argument("--sink", default=os.path.join(ROOT, "build-cmp", "bench", "s3flash-sink"))
    ap.add_argument("--local-dir", default="/var/tmp", help="where local-disk runs write")
    ap.add_argument("--store-max", default=None,
                    help="--store limit of the store-mode sink (sink-store) that the load, "
                    "dcp and dataset scenarios also run against (default: 1.25 x the most one "
                    "group stores + 256M); 0: no sink-store")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--no-limits", action="store_true", help="skip iperf3/memcpy/dd")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    benchjson.add_argument(ap)  # besides --out's compare-<date>.json
    ap.add_argument("--s3-like", action="store_true",
                    help="the sinks behave like S3 (s3flash-sink --s3-like: per-connection "
                    "bandwidth, first-byte latency, per-prefix request rates; see "
                    "bench/README.md) and the link in all is capped at --link")
    ap.add_argument("--link", default="1G", help="S3-like mode: the emulated link, bytes/s "
                    "each way for all connections together (the sink's --total-rate; "
                    "K/M/G: 1024s; default 1G, about a 10 Gbit/s NIC); 0: none")
    ap.add_argument("--conn-rate", default="80M", help="S3-like mode: bytes/s per connection "
                    "(default 80M, the sink's --s3-like)")
    ap.add_argument("--device-rate", default="512M", help="S3-like mode: the local disk's "
                    "bandwidth for the capped torch.save+fsync row (cgroup v2 io.max; "
                    "default 512M); 0: no capped row")
    ap.add_argument("--lean", action="store_true",
                    help="one row per client (its defaults; s3flash's two readers and two "
                    "dataset kinds), and load/dcp/dataset against the store-mode sink only "
                    "(DCP's save row is then against it too); --dataset-count N")
    ap.add_argument("--dataset-count", type=int, default=None,
                    help="objects in the dataset scenario (default 10000; quick 500)")
    ap.add_argument("--dcp-size", default=None, help="DCP state, both ranks (default 1G; "
                    "quick 64M)")
    ap.add_argument("--lightning-size", default=None, help="Lightning model state "
                    "(default 256M; quick 32M)")
    ap.add_argument("--sink-args", default="", help="more s3flash-sink options (both sinks)")
    a = ap.parse_args()
    a.quick_label = "quick" if a.quick else "full"
    a.link_bps = parse_size(a.link) if a.s3_like and a.link not in ("0", "") else 0
    a.device_bps = parse_size(a.device_rate) if a.device_rate not in ("0", "") else 0
    a.sink_extra = []
    if a.s3_like:
        a.sink_extra = ["--s3-like", "--conn-rate", a.conn_rate]
        if a.link_bps:
            a.sink_extra += ["--total-rate", str(a.link_bps)]
        a.quick_label += ", S3-like sink"
    a.sink_extra += a.sink_args.split()
    s3_like_variants(a)
    if a.lean:
        lean_variants()
        a.quick_label += ", lean"
    a.sizes = [parse_size(s) for s in (a.sizes or ("64M" if a.quick else "256M,1G,4G"))
               .split(",")]
    a.rgw_max = parse_size(a.rgw_max)
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.scenarios = [s for s in a.scenarios.split(",") if s]
    a.small_count = 100 if a.quick else 1000
    a.dcp_size = (parse_size(a.dcp_size) if a.dcp_size
                  else 64 * MiB if a.quick else 1 << 30)
    a.ltn_size = (parse_size(a.lightning_size) if a.lightning_size
                  else 32 * MiB if a.quick else 256 * MiB)
    a.ds_count = a.dataset_count or (500 if a.quick else 10000)
    a.rgw_ds_count = 500 if a.quick else 2000
    a.ds_obj = 64 * 1024

    if a.store_max is None:
        # DCP: two clients' checkpoints (s3flash, s3tc) and one being overwritten
        biggest = max([max(a.sizes), 3 * a.dcp_size, a.ds_count * a.ds_obj])
        a.store_max = int(biggest * 1.25) + 256 * MiB
    else:
        a.store_max = parse_size(a.store_max)
    a.store_reports = []

    a.endpoints = []
    sink = None
    if not a.no_sink:
        sink = Sink(a.sink, extra=a.sink_extra)
        a.endpoints.append(dict(name="sink", kind="sink", url=f"http://127.0.0.1:{sink.port}",
                                region="us-east-1", access_key="bench", secret_key="bench",
                                bucket="bench", pids=[sink.p.pid]))
        if a.store_max and any(sc in STORE_SCENARIOS for sc in a.scenarios):
            # the same sink binary with --store, one process per group (run_all starts it)
            a.endpoints.append(dict(name="sink-store", kind="sink", store=True, url=None,
                                    region="us-east-1", access_key="bench",
                                    secret_key="bench", bucket="bench", pids=[]))
    if a.rgw:
        need = ("S3FLASH_TEST_ENDPOINT", "S3FLASH_TEST_ACCESS_KEY", "S3FLASH_TEST_SECRET_KEY")
        if not all(os.environ.get(k) for k in need):
            sys.exit("--rgw needs S3FLASH_TEST_ENDPOINT/ACCESS_KEY/SECRET_KEY "
                     "(source tests/servers/rgw.sh's env, or let run.sh start one)")
        ep = dict(name="rgw", kind="rgw", url=os.environ["S3FLASH_TEST_ENDPOINT"],
                  region=os.environ.get("S3FLASH_TEST_REGION", "us-east-1"),
                  access_key=os.environ["S3FLASH_TEST_ACCESS_KEY"],
                  secret_key=os.environ["S3FLASH_TEST_SECRET_KEY"], bucket=BUCKET,
                  pids=rgw_pids())
        import boto3
        from botocore.config import Config
        c = boto3.client("s3", endpoint_url=ep["url"], region_name=ep["region"],
                         aws_access_key_id=ep["access_key"],
                         aws_secret_access_key=ep["secret_key"],
                         config=Config(s3={"addressing_style": "path"}))
        try:
            c.create_bucket(Bucket=BUCKET)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass
        a.endpoints.append(ep)
    if not a.endpoints:
        sys.exit("no endpoint (--no-sink without --rgw)")

    results = Results()
    t0 = time.time()
    sink_cpu0 = proc_cpu(sink.p.pid) if sink else 0
    try:
        if not a.no_limits:
            physical_limits(a, results)
        run_all(a, results)
        trace = trace_save(a) if a.s3_like and "save" in a.scenarios else []
    finally:
        proc_cpu_end = proc_cpu(sink.p.pid) if sink else 0
        sink_report = sink.stop() if sink else ""
    elapsed = time.time() - t0
    rows = summarize(results)

    # What the sink saw, against what the runs say they moved there.
    sent = sum(r["bytes"] for k in results.order if k[1] == "sink" and k[3] != "local"
               and k[5] in ("main", "upload", "save") and k[0] in ("save", "raw", "dcp",
                                                                    "lightning")
               for r in results.rows[k]["runs"] if not (k[0] == "raw" and k[5] == "download"))
    got = sum(r["bytes"] for k in results.order if k[1] == "sink" and k[3] != "local"
              and (k[0] == "dataset" or (k[0] == "raw" and k[5] == "download"))
              for r in results.rows[k]["runs"])
    date = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(a.out, exist_ok=True)
    md_path = os.path.join(a.out, f"compare-{date}.md")
    png_path = os.path.join(a.out, f"compare-{date}.png")
    try:
        chart(rows, png_path)
    except Exception as e:  # noqa: BLE001
        print(f"chart: {e}", file=sys.stderr)
        png_path = None
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    v = versions()
    text = [f"# s3flash side by side ({a.quick_label} run, {date})", "",
            f"`python3 bench/compare.py {' '.join(sys.argv[1:])}`; commit {head}; "
            f"{platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
            + ", ".join(f"{k} {x}" for k, x in v.items())
            + f"; {a.repeat} repetition(s), clients alternated; {elapsed:.0f} s in all.", "",
            "## Physical limits, same run", "", limits_table(rows), "",
            "## Runs", "",
            "Medians over the repetitions (min–max). GB/s = payload bytes / wall time. "
            "CPU = user+sys of the client's process tree over the measured phase, + the "
            "server's (sink or radosgw+ceph-osd+ceph-mon, from /proc) over the same phase. "
            "Peak RSS = VmHWM over the phase (reset at its start), which includes the state "
            "dict or buffers built before it; (+N) is the peak over the RSS at the start. "
            "× s3flash: the client's median wall (or CPU) over s3flash's (defaults / "
            "sequential / iterable) in the same group: above 1 = slower or costlier than "
            "s3flash.", "", table(rows, a.link_bps), "", TUNED_TEXT, ""]
    if a.s3_like:
        mode = ["## The S3-like mode", "",
                     f"Both sinks run with `{' '.join(a.sink_extra)}` (bench/README.md, \"The "
                     "S3-like mode\"): "
                     f"{a.conn_rate} bytes/s per connection each way, first-byte latency "
                     "lognormal (median 20 ms, p99 100 ms, floor 5 ms), 5,500 GET/HEAD and "
                     "3,500 other requests/s per prefix (503 SlowDown above). "
                     + (f"The emulated link is the sinks' total cap, {fmt_rate(a.link_bps)} "
                        "each way: \"of link\" = GB/s over it." if a.link_bps else
                        "No total cap: \"of link\" is not given."), ""]
        if a.device_bps:
            mode += [f"Local disk capped at {fmt_rate(a.device_bps)} (cgroup v2 io.max) "
                         f"where this host allows it: link / device = "
                         f"{(a.link_bps / a.device_bps) if a.link_bps else float('nan'):.1f}.", ""]
        text[4:4] = mode  # after the title and the command line
        text += ["## Connections in flight during one large save and its load", ""] + trace + [""]
    if sink:
        exit_lines = [ln for ln in sink_report.splitlines()
                      if " requests, " in ln or "prefix limits" in ln]
        text += [f"Sink at exit: `{' / '.join(exit_lines) or '?'}`; "
                 f"the runs report {sent} bytes uploaded (payload; plus DCP metadata and "
                 f"retried parts, if any) and {got} bytes downloaded from it; sink CPU over "
                 f"the session {proc_cpu_end - sink_cpu0:.1f} s.", ""]
    if a.store_reports:
        text += [f"Store-mode sink (`--store {a.store_max}`), one process per group, at "
                 "exit: " + "; ".join(f"`{x}`" for x in a.store_reports), ""]
    if png_path:
        text += [f"![chart]({os.path.basename(png_path)})", ""]
    md = "\n".join(text)
    with open(md_path, "w") as f:
        f.write(md)
    # the rows as benchjson records (bench/plot.py), the rows themselves kept beside them
    doc = benchjson.document("compare", benchjson.from_compare(rows),
                             source=f"python3 bench/compare.py {' '.join(sys.argv[1:])}; "
                                    f"commit {head}", note=f"{a.quick_label} run")
    doc.update(rows=rows, argv=sys.argv[1:])
    for path in [md_path[:-3] + ".json"] + ([a.json] if a.json else []):
        benchjson.write(path, doc)
    print(md)
    print(f"\nwrote {md_path}" + (f" and {png_path}" if png_path else ""), file=sys.stderr)
    # Exit status 1: an s3flash run failed, or any run read back other bytes or sizes. A
    # peer's failure is a finding, shown in its row (e.g. s3torchconnector's writes on RGW).
    bad = [d for d in rows if (d["error"] and d["client"] == "s3flash")
           or any("MISMATCH" in n or "differ" in n for n in d.get("notes", []))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
