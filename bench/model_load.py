#!/usr/bin/env python3
"""Safetensors models from S3, side by side in one run (issue 33's benchmark): s3flash's
load_file next to the Run:ai Model Streamer, s3torchconnector, boto3, the two-step path
(`s3flash cp` to disk + safetensors.torch.load_file) and the transfer alone (`s3flash cp` to
/dev/null); save_file next to s3torchconnector's writer and boto3. One table.

  /var/tmp/hfvenv/bin/python bench/model_load.py [--quick] [--size 2G] [--shards 4]
      [--servers sink,rgw] [--endpoint URL] [--repeat 3] [--link 1G] [--build build]

A synthetic bf16 model (~300 tensors: embeddings, per-layer q/k/v/o, MLP, norms) is written
as safetensors in 1 shard and in --shards shards with model.safetensors.index.json, checked
against a manifest after every load (names, dtypes, shapes, CRC-32 of every tensor), and
uploaded once per server with `s3flash cp --recursive`. Servers: the project's sink in
S3-like mode (bench/README.md: paced connections, first-byte latency; --link caps all
connections together; --store so the objects are read back), and Ceph RGW (S3FLASH_TEST_*
from /var/tmp/rgw.env, or --endpoint with the AWS_* keys in the environment).

Every row is a fresh process (bench/compare/model_worker.py, on compare's worker): wall time
until every tensor is in memory, GB/s of the files' bytes, the ratio to s3flash's load_file
of the same group, the time to the first tensor where the loader hands them over one by one,
and the peak RSS over the load (VmHWM reset at its start; for the CLI rows the processes'
own peaks under /usr/bin/time). A loader that fails shows its error in its row. The last
lines check the issue's targets. See bench/README.md ("model_load.py").
"""
import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchjson  # noqa: E402
from client_bench import Child  # noqa: E402
from compare import (Results, Sink, fmt_size, median_range, rgw_pids, run_worker,  # noqa: E402
                     summarize, versions)
from sink_bench import parse_size  # noqa: E402

MiB = 1 << 20
WORKER = os.path.join(HERE, "compare", "model_worker.py")

# (client, what the row is) in the order of the first repetition; s3flash's load_file first:
# the ratios are to it.
LOADERS = [("s3flash", "s3flash.safetensors.load_file (sharded: load_sharded of the index)"),
           ("runai", "Run:ai Model Streamer (SafetensorsStreamer)"),
           ("s3tc", "s3torchconnector get_object().read() + safetensors.torch.load"),
           ("boto3", "boto3 download_fileobj + safetensors.torch.load"),
           ("two_step", "s3flash cp to disk + safetensors.torch.load_file"),
           ("cp", "s3flash cp to /dev/null (the transfer alone)")]
SAVERS = [("s3flash", "s3flash.safetensors.save_file"),
          ("s3tc", "safetensors.torch.save + s3torchconnector put_object writer"),
          ("boto3", "safetensors.torch.save + boto3 upload_fileobj")]
NAMES = {("load", c): d for c, d in LOADERS} | {("save", c): d for c, d in SAVERS}


def log(*x):
    print(*x, file=sys.stderr, flush=True)


def servers(a):
    """The endpoints (compare's endpoint dicts); the sink's are filled in when it starts."""
    eps = []
    for name in a.servers:
        if name == "sink":
            eps.append(dict(name="sink", kind="sink", url=None, region="us-east-1",
                            access_key="bench", secret_key="bench", bucket="bench", pids=[]))
        elif name == "rgw":
            url = a.endpoint or os.environ.get("S3FLASH_TEST_ENDPOINT")
            ak = (os.environ.get("S3FLASH_TEST_ACCESS_KEY") if not a.endpoint
                  else os.environ.get("AWS_ACCESS_KEY_ID"))
            sk = (os.environ.get("S3FLASH_TEST_SECRET_KEY") if not a.endpoint
                  else os.environ.get("AWS_SECRET_ACCESS_KEY"))
            if not (url and ak and sk):
                sys.exit("rgw: no endpoint: `source /var/tmp/rgw.env` (S3FLASH_TEST_*), or "
                         "--endpoint URL with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set")
            eps.append(dict(name="rgw", kind="rgw", url=url, access_key=ak, secret_key=sk,
                            region=os.environ.get("S3FLASH_TEST_REGION", "us-east-1"),
                            bucket=f"model-load-{uuid.uuid4().hex[:8]}", pids=rgw_pids()))
        else:
            sys.exit(f"unknown server {name!r} (sink, rgw)")
    return eps


def point_env_at(ep, a):
    """The environment every child inherits: the endpoint and keys (AWS_ENDPOINT_URL: the
    s3flash CLI and library, and the Run:ai streamer, read it), path-style addressing for the
    streamer (its docs: RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 and
    AWS_EC2_METADATA_DISABLED=true for an S3-compatible store) and its concurrency."""
    os.environ.update(AWS_ENDPOINT_URL=ep["url"], AWS_ACCESS_KEY_ID=ep["access_key"],
                      AWS_SECRET_ACCESS_KEY=ep["secret_key"], AWS_REGION=ep["region"],
                      AWS_DEFAULT_REGION=ep["region"], AWS_EC2_METADATA_DISABLED="true",
                      RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0",
                      RUNAI_STREAMER_CONCURRENCY=str(a.runai_concurrency),
                      RUNAI_STREAMER_LOG_LEVEL="WARNING", S3FLASH_FORCE_PATH_STYLE="1")
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(k, None)


def boto3_client(ep):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=ep["url"], region_name=ep["region"],
                        aws_access_key_id=ep["access_key"],
                        aws_secret_access_key=ep["secret_key"],
                        config=Config(s3={"addressing_style": "path"}))


def rgw_bucket(ep, create):
    """The run's own bucket on RGW: created, or emptied and removed (no other bucket is
    touched)."""
    c = boto3_client(ep)
    if create:
        c.create_bucket(Bucket=ep["bucket"])
        return
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=ep["bucket"]):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            c.delete_objects(Bucket=ep["bucket"], Delete={"Objects": keys, "Quiet": True})
    c.delete_bucket(Bucket=ep["bucket"])


def spec_for(a, ep, scenario, client, shards, extra=None):
    s = dict(scenario=scenario, client=client, shards=shards, endpoint=ep, prefix=a.prefix,
             size=a.size, manifest=a.manifest, cli=a.cli, local_dir=a.local_dir,
             server_pids=ep["pids"], want_bytes=a.files.get(str(shards), 0), tuned=False)
    s.update(extra or {})
    return s


def run_server(a, ep, results):
    sink = None
    if ep["kind"] == "sink":
        sink = Sink(a.sink, store=a.store_max, extra=a.sink_extra)
        ep.update(url=f"http://127.0.0.1:{sink.port}", pids=[sink.p.pid])
    point_env_at(ep, a)
    try:
        if ep["kind"] == "rgw":
            rgw_bucket(ep, create=True)
        for s in ("1", str(a.shards)):  # uploaded once per server
            Child([a.cli, "-q", "cp", "--recursive", os.path.join(a.dir, s) + "/",
                   f"s3://{ep['bucket']}/{a.prefix}/{s}/"], os.environ, stdout=None)
        groups = [("load", sh, LOADERS) for sh in (1, a.shards)]
        if a.save:
            groups.append(("save", 1, SAVERS))
        for rep in range(a.repeat):
            for what, shards, rows in groups:
                rows = [r for r in rows if r[0] in a.loaders]
                k = rep % max(1, len(rows))  # each repetition starts with another loader
                for client, _ in rows[k:] + rows[:k]:
                    scen = ("model_save" if what == "save" else
                            "model_cp" if client == "cp" else "model_load")
                    key = (what, ep["name"], f"{shards} shard{'s' * (shards > 1)}", client,
                           "", "main")
                    if results.rows.get(key, {}).get("skip"):
                        continue
                    t0 = time.time()
                    for r in run_worker(spec_for(a, ep, scen, client, shards), a.timeout,
                                        worker=WORKER):
                        results.add(key, r)
                        log(f"[{time.time() - a.t0:.0f}s] {ep['name']} {what} {shards} "
                            f"{client}: " + (r.get("skip") or r.get("error") or
                                             f"{r['wall']:.2f} s {r.get('note') or ''}")
                            + f" ({time.time() - t0:.1f} s)")
            if "s3flash" in a.loaders:  # time to the first tensor, layer by layer
                key = ("first", ep["name"], "1 shard", "s3flash", "", "main")
                for r in run_worker(spec_for(a, ep, "model_first", "s3flash", 1), a.timeout,
                                    worker=WORKER):
                    results.add(key, r)
    finally:
        if ep["kind"] == "rgw":
            rgw_bucket(ep, create=False)
        if sink:
            a.sink_reports.append(" / ".join(sink.stop().splitlines()[-2:]))


def first_tensor(results, key):
    xs = [r["first"] for r in results.rows.get(key, {}).get("runs", []) if "first" in r]
    return median_range(xs)[0] if xs else None


def table(a, results):
    rows = summarize(results)
    base = {}  # s3flash's row per (what, server, shards): the ratios are to it
    for d in rows:
        if d["client"] == "s3flash" and "wall" in d:
            base[(d["scenario"], d["endpoint"], d["size"])] = d
    lines = ["| loader | shards | server | runs | seconds, median (min–max) | GB/s | "
             "× s3flash | first tensor s | peak RSS MiB (+ over start) | notes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for d in rows:
        if d["scenario"] == "first":
            continue
        name = NAMES[(d["scenario"], d["client"])]
        head = f"| {name} | {d['size']} | {d['endpoint']} | {d['n']} |"
        if "wall" not in d:
            why = d["skip"] or "ERROR " + (d["error"] or "?")
            lines.append(head + " — |" * 5 + f" {why} |")
            continue
        w, g = d["wall"], d["gbs"]
        b = base.get((d["scenario"], d["endpoint"], d["size"]))
        ratio = f"{w[0] / b['wall'][0]:.2f}" if b else "—"
        ft = first_tensor(results, ("load", d["endpoint"], d["size"], d["client"], "", "main"))
        if d["client"] == "s3flash" and d["scenario"] == "load" and d["size"] == "1 shard":
            ft = first_tensor(results, ("first", d["endpoint"], "1 shard", "s3flash", "",
                                        "main"))
            ft_s = f"{ft:.3f} (safe_open)" if ft is not None else "—"
        else:
            ft_s = f"{ft:.3f}" if ft is not None else "—"
        runs = f"{w[0]:.3f}" + (f" ({w[1]:.3f}–{w[2]:.3f})" if d["n"] > 1 else "")
        notes = "; ".join(d["notes"]) + ((" " + d["error"]) if d["error"] else "")
        lines.append(head + f" {runs} | {g[0]:.2f} | {ratio} | {ft_s} | {d['rss'] / MiB:.0f} "
                     f"(+{max(d['rss_extra'], 0) / MiB:.0f}) | {notes} |")
    return rows, "\n".join(lines)


def targets(a, rows, results):
    """The issue's targets, per server and shard count: met / not met / not measured."""
    by = {(d["scenario"], d["endpoint"], d["size"], d["client"]): d for d in rows
          if "wall" in d}
    out = []
    for ep in a.servers:
        for sh in ("1 shard", f"{a.shards} shards"):
            s = by.get(("load", ep, sh, "s3flash"))
            cp = by.get(("load", ep, sh, "cp"))
            ra = by.get(("load", ep, sh, "runai"))
            if not s:
                out.append(f"- {ep}, {sh}: s3flash load_file not measured")
                continue
            t = []
            if cp:
                r = s["wall"][0] / cp["wall"][0]
                t.append(f"load_file / cp = {r:.2f} ({'met' if r <= 1.10 else 'NOT met'}, "
                         "≤ 1.10)")
            if ra:
                r = ra["wall"][0] / s["wall"][0]
                t.append(f"Run:ai / load_file = {r:.2f} "
                         f"({'met' if r >= 2.25 else 'NOT met'}, ≥ 2.25)")
            rise = s["rss_extra"]
            bound = a.size + a.memory_limit
            t.append(f"RSS over start {rise / MiB:.0f} MiB ({'met' if rise <= bound else 'NOT met'}"
                     f", ≤ model {a.size / MiB:.0f} + limit {a.memory_limit / MiB:.0f} MiB)")
            first = results.rows.get(("first", ep, "1 shard", "s3flash", "", "main"), {})
            if sh == "1 shard" and first.get("runs") and cp:
                # 100 ms + one first byte, plus the first tensor's own bytes at the rate of
                # the transfer alone (cp's, same group): safetensors puts lm_head.weight first
                # (names sorted), a tensor of vocab x hidden
                ft = first_tensor(results, ("first", ep, "1 shard", "s3flash", "", "main"))
                nb = first["runs"][0]["tensor_bytes"]
                lim = 0.100 + a.first_byte_ms / 1000 + nb / (cp["gbs"][0] * 1e9)
                t.append(f"first tensor ({first['runs'][0]['tensor']}, {nb / MiB:.0f} MiB) "
                         f"{ft * 1000:.0f} ms ({'met' if ft <= lim else 'NOT met'}, ≤ 100 + "
                         f"{a.first_byte_ms:g} + {nb / MiB:.0f} MiB at cp's "
                         f"{cp['gbs'][0]:.2f} GB/s = {lim * 1000:.0f} ms)")
            out.append(f"- {ep}, {sh}: " + "; ".join(t))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB, one repetition: a check that "
                    "the harness works")
    ap.add_argument("--size", default=None, help="model bytes (default 2G; --quick 64M)")
    ap.add_argument("--shards", type=int, default=4, help="the sharded layout (default 4)")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; quick 1)")
    ap.add_argument("--servers", default="sink,rgw", help="sink, rgw or both (default)")
    ap.add_argument("--endpoint", default=None, help="the RGW (or other S3) endpoint instead "
                    "of S3FLASH_TEST_ENDPOINT; keys from AWS_ACCESS_KEY_ID/SECRET_ACCESS_KEY")
    ap.add_argument("--loaders", default="s3flash,runai,s3tc,boto3,two_step,cp",
                    help="which load rows (and save rows of the same clients)")
    ap.add_argument("--no-save", dest="save", action="store_false", help="no save rows")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="the build with bench/s3flash-sink and src/cli/s3flash")
    ap.add_argument("--cli", default=None, help="the s3flash CLI (default BUILD/src/cli/s3flash,"
                    " else the one on PATH)")
    ap.add_argument("--link", default="1G", help="the sink's --total-rate: all connections "
                    "together, each way (default 1G, about a 10 Gbit/s NIC); 0: none")
    ap.add_argument("--conn-rate", default="80M", help="the sink's bytes/s per connection "
                    "(default 80M, its --s3-like preset)")
    ap.add_argument("--first-byte-ms", type=float, default=20, help="the sink's median first "
                    "byte (default 20, its --s3-like preset); the first-tensor target adds it")
    ap.add_argument("--sink-args", default="", help="more s3flash-sink options")
    ap.add_argument("--runai-concurrency", type=int, default=32,
                    help="RUNAI_STREAMER_CONCURRENCY (default 32, as the issue measured it)")
    ap.add_argument("--memory-limit", default="512M", help="the s3flash client's memory limit "
                    "that the RSS target allows over the model (default 512M, its default)")
    ap.add_argument("--local-dir", default="/var/tmp", help="the model's files and the "
                    "two-step path's downloads")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per row")
    ap.add_argument("--out", default=None, help="also write the report (Markdown) here")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    a.t0 = time.time()
    a.size = parse_size(a.size or ("64M" if a.quick else "2G"))
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.servers = [s for s in a.servers.split(",") if s]
    a.loaders = [s for s in a.loaders.split(",") if s]
    a.memory_limit = parse_size(a.memory_limit)
    a.sink = os.path.join(a.build, "bench", "s3flash-sink")
    a.cli = a.cli or (os.path.join(a.build, "src", "cli", "s3flash")
                      if os.access(os.path.join(a.build, "src", "cli", "s3flash"), os.X_OK)
                      else shutil.which("s3flash"))
    if not a.cli:
        sys.exit(f"no s3flash CLI in {a.build}/src/cli or on PATH (--cli)")
    a.sink_extra = ["--s3-like", "--conn-rate", a.conn_rate, "--first-byte-ms",
                    str(a.first_byte_ms)]
    if a.link not in ("0", ""):
        a.sink_extra += ["--total-rate", str(parse_size(a.link))]
    a.sink_extra += a.sink_args.split()
    # the 1-shard and sharded models, and one save at a time (deleted after it)
    a.store_max = int(3 * a.size * 1.25) + 256 * MiB
    a.prefix = "model-load"
    a.files = {}
    a.sink_reports = []
    eps = servers(a)

    a.dir = tempfile.mkdtemp(prefix="model-load.", dir=a.local_dir)
    a.manifest = os.path.join(a.dir, "manifest.json")
    results = Results()
    try:
        log(f"writing the {fmt_size(a.size)} model (1 and {a.shards} shards) in {a.dir}")
        prep = run_worker(spec_for(a, eps[0], "model_prepare", "", a.shards, {"dir": a.dir}),
                          a.timeout, worker=WORKER)[0]
        if "error" in prep:
            sys.exit(f"could not write the model: {prep['error']}")
        a.files = prep["files"]  # the files' bytes per layout ("1", "4")
        for ep in eps:
            run_server(a, ep, results)
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    rows, tab = table(a, results)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    v = versions()
    for mod in ("runai_model_streamer", "safetensors"):
        try:
            from importlib.metadata import version
            v[mod] = version(mod.replace("_", "-"))
        except Exception:  # noqa: BLE001
            v[mod] = "not installed"
    text = [f"# Safetensors model loads ({'quick' if a.quick else 'full'} run, "
            f"{datetime.datetime.now():%Y-%m-%d %H:%M})", "",
            f"`bench/model_load.py {' '.join(sys.argv[1:])}`; commit {head}; "
            f"{platform.node()}, {os.cpu_count()} CPUs; "
            + ", ".join(f"{k} {x}" for k, x in v.items()) + f"; {a.repeat} repetition(s), "
            f"loaders alternated; {time.time() - a.t0:.0f} s in all.", "",
            f"Model: {fmt_size(a.size)} bf16, {prep['n']} tensors; files "
            f"{a.files['1']} bytes (1 shard), {a.files[str(a.shards)]} bytes "
            f"({a.shards} shards + index). Sink: `s3flash-sink {' '.join(a.sink_extra)} "
            f"--store {a.store_max}`. Run:ai: RUNAI_STREAMER_CONCURRENCY="
            f"{a.runai_concurrency}. GB/s: the files' bytes over the wall time; × s3flash: "
            "the row's median time over s3flash load_file's in the same group (save rows: "
            "over save_file's); first tensor: from the call to the first tensor handed over, "
            "where the loader hands them over one by one (s3flash: safe_open + get_tensor of "
            "the first, a run of its own); peak RSS: VmHWM over the load (the CLI rows: the "
            "cp processes' own peaks, summed over the shards' processes).", "", tab, "",
            "Targets (issue 33):"] + targets(a, rows, results)
    text += ["", "Sink at exit: " + "; ".join(f"`{r}`" for r in a.sink_reports)] \
        if a.sink_reports else []
    md = "\n".join(text)
    print(md)
    if a.json:
        benchjson.write_markdown(a.json, md, "model load")
    if a.out:
        with open(a.out, "w") as f:
            f.write(md + "\n")
    bad = [d for d in rows if any("MISMATCH" in n for n in d.get("notes", []))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
