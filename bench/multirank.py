#!/usr/bin/env python3
"""Many ranks on several hosts checkpointing to one store (issue 13, section 4).

Hosts are network namespaces (tests/servers/netns.sh): a store running Ceph RGW (an instance
of its own, `netns.sh rgw start`) or the sink (build/bench/s3flash-sink in store mode), and
--hosts compute hosts, each running torchrun (gloo) with some ranks. Every rank saves then loads
its DTensor shard (--mb-per-rank MiB) through s3flash.dcp (tests/integration/multirank_worker.py).
Two tables per store:

  scaling      aggregate save and load throughput (the checkpoint's bytes over the slowest
               rank's time) as the ranks per host grow (--ranks-per-host 1,2,4), default keys
  strategies   per prefix strategy (default, binary, hex, roundrobin) at the largest rank
               count: time, and per rank the requests retried and the 503s (counted in each
               rank's S3FLASH_LOG=info lines: "attempt N failed (SlowDown...), retrying in").
               On the sink the rows run with --throttle-args (per-prefix request rates, the
               sink's S3-like mode, bench/README.md), and the 503s the sink answered are shown
               next to the ranks' counts; RGW does not throttle.

    sudo python3 bench/multirank.py --hosts 2 --ranks-per-host 1,2,4 --mb-per-rank 64
    sudo python3 bench/multirank.py --stores sink --sink-args "--s3-like --threads 2" --rate 1gbit

Options: --stores rgw,sink; --rate / --store-rate cap the links (tbf); --build DIR (default
build/). Needs root, iproute2 and torch. Leaves nothing behind (namespaces, RGW, sink).
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from netns import Netns, rank_logs, s3_harness, torchrun, unavailable  # noqa: E402

BUCKET = "multirank"
KEYS = {"S3FLASH_TEST_ACCESS_KEY": "S3FLASHTESTACCESSKEY",
        "S3FLASH_TEST_SECRET_KEY": "s3flashTestSecretKey0123456789abcdefghij",
        "S3FLASH_TEST_REGION": "us-east-1"}
RETRY = re.compile(r"attempt \d+ failed \((.*)\), retrying in")


def rank_env(endpoint, keys, build, tmp):
    pypath = subprocess.run(["bash", os.path.join(ROOT, "tests", "python", "devenv.sh"),
                             os.path.relpath(build, ROOT)], capture_output=True, text=True,
                            check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(S3FLASH_TEST_ENDPOINT=endpoint, AWS_ACCESS_KEY_ID=keys["S3FLASH_TEST_ACCESS_KEY"],
               AWS_SECRET_ACCESS_KEY=keys["S3FLASH_TEST_SECRET_KEY"],
               AWS_REGION=keys["S3FLASH_TEST_REGION"],
               AWS_CONFIG_FILE=os.path.join(tmp, "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=os.path.join(tmp, "no-credentials"),
               PYTHONPATH=pypath, S3FLASH_LOG="info")
    return env


class Store:
    def __init__(self, kind, net, args, tmp, extra=""):
        self.kind, self.net, self.tmp = kind, net, tmp
        self.sink = None
        self.sink_counts = ""
        self.sink_503 = "-"
        if kind == "rgw":
            self.rgw_dir = tempfile.mkdtemp(prefix="s3flash-bench-rgw.", dir="/var/tmp")
            os.rmdir(self.rgw_dir)
            out = net.script("rgw", "start", self.rgw_dir, timeout=300)
            env = dict(line.replace("export ", "", 1).split("=", 1)
                       for line in out.splitlines() if line.startswith("export "))
            self.endpoint = env["S3FLASH_TEST_ENDPOINT"]
            keys = env
        else:
            port_file = os.path.join(tmp, "sink.port")
            exe = os.path.join(args.build, "bench", "s3flash-sink")
            self.sink_log = open(os.path.join(tmp, "sink.err"), "w+")
            self.sink = net.popen("store", [exe, "--bind", net.addr("store"), "--port", "0",
                                            "--port-file", port_file, "--store",
                                            args.sink_store, *shlex.split(args.sink_args),
                                            *shlex.split(extra)],
                                  stderr=self.sink_log)
            deadline = time.monotonic() + 10
            while not os.path.exists(port_file):
                if self.sink.poll() is not None or time.monotonic() > deadline:
                    self.sink_log.seek(0)
                    raise RuntimeError(f"sink did not start: {self.sink_log.read()}")
                time.sleep(0.02)
            self.endpoint = f"http://{net.addr('store')}:{open(port_file).read().strip()}"
            keys = KEYS
        self.env = rank_env(self.endpoint, keys, args.build, tmp)
        if kind == "rgw":
            s3_harness(net, "c1", self.endpoint, self.env, "create", BUCKET)

    def close(self):
        if self.kind == "rgw":
            self.net.script("rgw", "stop", self.rgw_dir, timeout=120)
        elif self.sink is not None:
            self.sink.terminate()
            self.sink.wait(timeout=30)
            self.sink_log.seek(0)
            lines = self.sink_log.read().splitlines()
            self.sink_counts = " ".join(l.strip() for l in lines
                                        if "requests," in l or "store:" in l)
            # "prefix limits: A GET/HEAD and B other requests admitted, C GET/HEAD and D other
            # answered 503 SlowDown, P prefixes" (the sink's S3-like mode)
            m = [re.search(r"(\d+) GET/HEAD and (\d+) other answered 503 SlowDown, (\d+) "
                           r"prefixes", l) for l in lines]
            m = [x for x in m if x]
            self.sink_503 = (f"{int(m[0].group(1)) + int(m[0].group(2))} "
                             f"({m[0].group(3)} prefixes)") if m else "-"


def run_ranks(net, store, hosts, nproc, strategy, mb, tag, port, tmp):
    """One torchrun per host: save then load; returns the row of numbers."""
    world = len(hosts) * nproc
    cols, tensors = 1024, 2
    rows_per_rank = max(1, (mb << 20) // (4 * cols * tensors))
    path = f"s3://{BUCKET}/bench/{tag}"
    out = os.path.join(tmp, tag)
    logs = os.path.join(tmp, tag + "-logs")
    res = torchrun(net, hosts, nproc, [f"save={path}", f"load={path}", "--rows",
                                       str(rows_per_rank * world), "--cols", str(cols),
                                       "--tensors", str(tensors), "--strategy", strategy,
                                       "--out", out], store.env, logs, port, timeout=1800)
    failed = [(h, rc, text[-2000:]) for h, rc, text in res if rc != 0]
    if failed:
        raise RuntimeError(f"{tag}: torchrun failed: {failed}")
    reps = [json.load(open(os.path.join(out, f))) for f in os.listdir(out)]
    row = {"ranks": world, "strategy": strategy}
    for op in ("save", "load"):
        rs = [r for r in reps if r["op"] == op]
        total = sum(r["bytes"] for r in rs)
        secs = max(r["seconds"] for r in rs)
        row[op + "_s"] = secs
        row[op + "_gibs"] = total / secs / (1 << 30)
        row["bytes"] = total
    retries, slowdowns = [], []
    for _, text in sorted(rank_logs(logs).items()):
        why = RETRY.findall(text)
        retries.append(len(why))
        # a 503 with a body says SlowDown; one without (HEAD) reads as ServiceUnavailable
        slowdowns.append(sum(1 for w in why if re.search(
            r"SlowDown|ServiceUnavailable|503|Throttl", w)))
    row["retries"], row["503s"] = retries, slowdowns
    return row


def fmt_counts(v):
    return f"{sum(v)} (max {max(v) if v else 0}/rank)"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--ranks-per-host", default="1,2,4")
    p.add_argument("--mb-per-rank", type=int, default=16)
    p.add_argument("--stores", default="rgw,sink")
    p.add_argument("--strategies", default="default,binary,hex,roundrobin")
    p.add_argument("--rate", help="cap of each compute host's link (tbf, e.g. 1gbit)")
    p.add_argument("--store-rate", help="cap of the store's link")
    p.add_argument("--sink-args", default="--threads 2",
                   help="more sink options (per-prefix limits: see bench/README.md)")
    p.add_argument("--throttle-args", default="--prefix-put-rate 10 --prefix-get-rate 15 "
                   "--prefix-depth 3", help="sink options of the strategy table: per-prefix "
                   "request rates (503 SlowDown above them); depth 3 makes the prefix "
                   "bench/strat-S/<strategy's prefix>/")
    p.add_argument("--sink-store", default="8G", help="the sink's --store bound")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--prefix", default="s3fbench", help="namespace name prefix")
    a = p.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"multirank: {why}")
    per_host = [int(x) for x in a.ranks_per_host.split(",")]
    hosts = [f"c{k}" for k in range(1, a.hosts + 1)]
    tmp = tempfile.mkdtemp(prefix="s3flash-multirank.")
    port = 29600
    print(f"# multirank: {a.hosts} compute hosts, ranks per host {per_host}, "
          f"{a.mb_per_rank} MiB per rank, links {a.rate or 'uncapped'} "
          f"(store {a.store_rate or 'uncapped'}); logs under {tmp}", flush=True)
    net = Netns(a.hosts, prefix=a.prefix, rate=a.rate, store_rate=a.store_rate)

    def one_row(kind, shared, n, strategy, tag, extra=""):
        """A row: on RGW the shared instance; the sink is started afresh for each row, so
        its counts (503s answered) are the row's own."""
        nonlocal port
        port += 1
        d = os.path.join(tmp, kind, tag)
        os.makedirs(d)
        store = shared or Store(kind, net, a, d, extra)
        try:
            r = run_ranks(net, store, hosts, n, strategy, a.mb_per_rank, tag, port, d)
        finally:
            if not shared:
                store.close()
        r["sink_503"] = store.sink_503
        return r

    try:
        for kind in a.stores.split(","):
            os.makedirs(os.path.join(tmp, kind))
            shared = Store(kind, net, a, os.path.join(tmp, kind)) if kind == "rgw" else None
            try:
                print(f"\n## {kind}: aggregate throughput as ranks grow (default keys)\n")
                print("| ranks | checkpoint MiB | save s | save GiB/s | load s | load GiB/s "
                      "| retries | 503s |")
                print("|---:|---:|---:|---:|---:|---:|---|---|")
                for n in per_host:
                    r = one_row(kind, shared, n, "default", f"scale-{n * a.hosts}")
                    print(f"| {r['ranks']} | {r['bytes'] / (1 << 20):.0f} | {r['save_s']:.2f} "
                          f"| {r['save_gibs']:.3f} | {r['load_s']:.2f} | {r['load_gibs']:.3f} "
                          f"| {fmt_counts(r['retries'])} | {fmt_counts(r['503s'])} |",
                          flush=True)
                n = per_host[-1]
                throttle = a.throttle_args if kind == "sink" else ""
                print(f"\n## {kind}: prefix strategies, {n * a.hosts} ranks"
                      f"{' (sink ' + throttle + ')' if throttle else ''}\n")
                print("| strategy | save s | save GiB/s | load s | retries per rank "
                      "| 503s per rank | 503s the sink answered |")
                print("|---|---:|---:|---:|---|---|---|")
                for s in a.strategies.split(","):
                    r = one_row(kind, shared, n, s, f"strat-{s}", throttle)
                    print(f"| {s} | {r['save_s']:.2f} | {r['save_gibs']:.3f} "
                          f"| {r['load_s']:.2f} | {r['retries']} | {r['503s']} "
                          f"| {r['sink_503']} |", flush=True)
            finally:
                if shared:
                    shared.close()
    finally:
        net.down()


if __name__ == "__main__":
    main()
