#!/usr/bin/env python3
"""`s3flash mount` side by side with s3fs-fuse and `rclone mount`, same server, one run.

Prints a markdown table per server (docs/PERFORMANCE.md, "The mount" explains the rows),
with the ratios of s3flash mount to the others and each target of issue 19 marked met or
not met. Every tool mounts the same bucket of the same server; `s3flash cp` to/from that
server in the same run is the reference of the throughput rows, and the bare LIST pages
(`s3flash ls`) the reference of the `ls -l` rows.

Servers (--servers, default both): "rgw", the Ceph RGW of S3FLASH_TEST_*; "sink", the
project's bench/s3flash-sink started here in S3-like mode (--s3-like: every connection paced
to 80 MiB/s, first-byte latency lognormal, median 20 ms, p99 100 ms; --store keeps the bytes,
so torch.load reads back what was written; its `ls -l` rows list --synth-list keys, since the
sink lists nothing else).

    source /tmp/rgw.env          # S3FLASH_TEST_ENDPOINT, _ACCESS_KEY, _SECRET(_KEY), _REGION
    sudo -E python3 bench/mount.py --quick                 # a check that it works (~2 min)
    sudo -E python3 bench/mount.py                         # the real sizes
    sudo -E python3 bench/mount.py --large-mib 4096 --small-files 10000 --ls-keys 10000,50000
    sudo -E python3 bench/mount.py --quick --servers sink      # the sink only

Needs root (FUSE mounts), fusermount3, and for the other columns the Debian packages s3fs
and rclone (tests/servers/install-deps.sh installs them; a missing one is left out). The
`s3flash` binary is $S3FLASH_CLI, else $S3FLASH_BUILD_DIR/src/cli/s3flash, else
build/src/cli/s3flash; the Python package for the torch.load row comes from PYTHONPATH
(`export PYTHONPATH=$(bash tests/python/devenv.sh build)`).

Requests sent for `ls -l` are counted by tests/servers/faultproxy.py, through which each
tool is mounted a second time for those rows only (the proxy is not in the path of the
throughput rows). Peak RSS is VmHWM of each daemon (from /proc/PID/status), read after all
of its rows.
"""

import argparse
import os
import random
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "servers"))

import benchjson  # noqa: E402 (bench/, the script's own directory)
from faults import start_faultproxy  # noqa: E402
from mountutil import Mount, is_mounted, force_unmount  # noqa: E402

MIB = 1 << 20


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- the other mounts -----------------------------------------------------------------------

class OtherMount:
    """s3fs or rclone mount in the foreground, as our child (same interface as Mount)."""

    def __init__(self, argv, mountdir, env, log_path):
        self.argv = argv
        self.dir = mountdir
        self.envd = env
        self.log_path = log_path
        self.proc = None

    def start(self, timeout=30):
        os.makedirs(self.dir, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, env=self.envd, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not is_mounted(self.dir):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.argv[0]} did not mount: "
                                   f"{Path(self.log_path).read_text(errors='replace')[-2000:]}")
            time.sleep(0.02)
        return self

    def peak_rss_kib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None

    def stop(self):
        if is_mounted(self.dir):
            subprocess.run(["fusermount3", "-u", self.dir], capture_output=True)
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        force_unmount(self.dir)
        self._log.close()


class Tools:
    def __init__(self, a, work):
        self.a = a
        self.work = work
        pw = os.path.join(work, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write(f"{a.access_key}:{a.secret_key}\n")
        os.chmod(pw, 0o600)
        self.s3fs_passwd = pw

    def mount(self, tool, endpoint, name):
        a = self.a
        name = f"{name}-{uuid.uuid4().hex[:6]}"
        d = os.path.join(self.work, name)
        logp = os.path.join(self.work, name + ".log")
        if tool == "s3flash mount":
            return Mount(a.cli, endpoint, a.access_key, a.secret_key, a.bucket + "/", d,
                         ["--metadata-ttl", "60", "--memory-target", f"{a.memory_target}M"]
                         + a.s3flash_opt, region=a.region,
                         log_path=logp).start()
        # no AWS_* of ours (rclone 1.60 fails on AWS_CA_BUNDLE with its own transport)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if tool == "s3fs":
            argv = ["s3fs", a.bucket, d, "-f", "-o", f"url={endpoint}", "-o",
                    "use_path_request_style", "-o", f"passwd_file={self.s3fs_passwd}", "-o",
                    f"endpoint={a.region}", "-o", "sigv4", "-o", "listobjectsv2",
                    "-o", "parallel_count=8",
                    "-o", "multipart_size=16"]
            return OtherMount(argv, d, env, logp).start()
        if tool == "rclone mount":
            env.update({"RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Ceph",
                        "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": a.access_key,
                        "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": a.secret_key,
                        "RCLONE_CONFIG_BENCH_ENDPOINT": endpoint,
                        "RCLONE_CONFIG_BENCH_REGION": a.region,
                        "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true",
                        "RCLONE_CONFIG_BENCH_LIST_VERSION": "2"})
            argv = ["rclone", "mount", f"bench:{a.bucket}", d, "--vfs-cache-mode", "off",
                    "--dir-cache-time", "60s", "--config", "/dev/null"]
            return OtherMount(argv, d, env, logp).start()
        raise ValueError(tool)


# ---- workloads ------------------------------------------------------------------------------

def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def drop_page_cache(path):
    """The kernel's cached pages of `path` dropped, so that the next read goes to the
    daemon again (each tool's daemon keeps no disk cache here)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_file(path, bs=MIB):
    """Read to the end, bytes thrown away as `s3flash cp ... /dev/null` does (a hash here
    would cost the reading process CPU its reference does not pay); returns the size."""
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                break
            n += len(b)
    return n


def rand_reads(path, size, n, length, seed):
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(n):
            off = rng.randrange(0, max(1, size - length))
            if len(os.pread(fd, length, off)) != min(length, size - off):
                raise RuntimeError("short read")
    finally:
        os.close(fd)


def write_file(path, block, nblocks):
    with open(path, "wb", buffering=0) as f:
        for _ in range(nblocks):
            f.write(block)


def read_many(paths, threads=16):
    def one(p):
        with open(p, "rb") as f:
            return len(f.read())
    with ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(one, paths))


def readers_and_writers(mnt, src, size, nread, nwrite, per_stream, block, tag):
    """nread threads each read `per_stream` bytes of `src` from a seeded offset, nwrite
    threads each write a new file of `per_stream` bytes, all at once; returns bytes moved."""
    def reader(i):
        off = random.Random(i).randrange(0, max(1, size - per_stream))
        fd = os.open(src, os.O_RDONLY)
        try:
            got = 0
            while got < per_stream:
                b = os.pread(fd, min(MIB, per_stream - got), off + got)
                if not b:
                    break
                got += len(b)
            return got
        finally:
            os.close(fd)

    def writer(i):
        write_file(os.path.join(mnt, f"conc-{tag}-{i}"), block, per_stream // MIB)
        return per_stream // MIB * MIB

    with ThreadPoolExecutor(nread + nwrite) as ex:
        futs = [ex.submit(reader, i) for i in range(nread)]
        futs += [ex.submit(writer, i) for i in range(nwrite)]
        return sum(f.result() for f in futs)


def mbps(nbytes, secs):
    return f"{nbytes / MIB / secs:,.0f} MiB/s"


# ---- the sink in S3-like mode ----------------------------------------------------------------

SINK_DESC = "--s3-like: 80 MiB/s a connection, first byte 20 ms median, 100 ms p99"


class Sink:
    """bench/s3flash-sink --s3-like --store, with the first --ls-keys count as --synth-list
    keys under ls<N>/ of the bucket; the endpoint while in the `with` block. With `limits`,
    those options instead of --s3-like and no store (the pace-only sink)."""

    def __init__(self, a, limits=None):
        self.a = a
        self.limits = limits

    def __enter__(self):
        a = self.a
        exe = os.path.join(os.environ.get("S3FLASH_BUILD_DIR", str(ROOT / "build")),
                           "bench", "s3flash-sink")
        self.dir = tempfile.mkdtemp(prefix="s3flash-mountbench-sink-")
        port_file = os.path.join(self.dir, "port")
        n = a.ls_keys[0]
        self.proc = subprocess.Popen(
            [exe, "--port", "0", "--port-file", port_file, "--threads", "4"]
            + (self.limits if self.limits is not None else
               ["--s3-like", "--store", "8G", "--synth-list", f"{a.sink_bucket}/ls{n}/:{n}"]),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "wb"))
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{exe} did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{int(Path(port_file).read_text())}"

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def pace_rows(a, tools, cell):
    """Random 1 MiB reads against a sink that only paces each connection (--pace-rate, no
    first-byte latency, issue 32): what a read costs when one connection's rate is all
    there is. The object is a `size-N` key of the sink (no store), of --large-mib."""
    nbytes = a.large_mib * MIB
    row = (f"random 1 MiB reads, paced only ({a.pace_rate}B/s a connection, "
           "no first byte)")
    a.bucket = a.sink_bucket
    work = tempfile.mkdtemp(prefix="s3flash-mountbench-pace-", dir="/var/tmp")
    with Sink(a, ["--conn-rate", a.pace_rate]) as endpoint:
        for tool in tools:
            if tool == "rclone mount":   # looks names up by listing: the sink lists none
                continue
            try:
                m = Tools(a, work).mount(tool, endpoint, tool.split()[0] + "-pace")
            except Exception as e:
                cell(row, tool, f"mount failed: {e}"[:80])
                continue
            try:
                p = os.path.join(m.dir, f"random-size-{nbytes}")
                os.stat(p)
                t = timed(lambda: rand_reads(p, nbytes, a.rand1m, MIB, 3))[0]
                cell(row, tool, f"{a.rand1m / t:,.1f} reads/s ({1000 * t / a.rand1m:.0f} ms "
                     "a read)", a.rand1m / t)
            except Exception as e:
                cell(row, tool, f"error: {e}"[:60])
            finally:
                m.stop()
    shutil.rmtree(work, ignore_errors=True)


# ---- the table, the ratios and issue 19's targets ---------------------------------------------

MOUNT = "s3flash mount"


def targets(a, vals):
    """[(target, met: True/False/None (not measured), the numbers)]."""
    def v(prefix, col):
        row = next((r for r in vals if r.startswith(prefix)), None)
        return vals.get(row, {}).get(col) if row else None

    def ratio(x, y):
        return None if x is None or y is None or y == 0 else x / y

    out = []

    def check(name, r, want, how):
        out.append((name, None if r is None else r >= want,
                    "not measured" if r is None else f"{r:.2f}x ({how})"))
    check("sequential read >= 90 % of s3flash cp",
          ratio(v("sequential read", MOUNT), v("sequential read", "s3flash cp")), 0.9,
          "mount / cp")
    check("sequential read >= 1.5x s3fs-fuse",
          ratio(v("sequential read", MOUNT), v("sequential read", "s3fs")), 1.5, "mount / s3fs")
    check("random 4 KiB reads >= 2x s3fs-fuse",
          ratio(v("random 4 KiB", MOUNT), v("random 4 KiB", "s3fs")), 2, "mount / s3fs")
    check("random 1 MiB reads >= 2x s3fs-fuse",
          ratio(v("random 1 MiB", MOUNT), v("random 1 MiB", "s3fs")), 2, "mount / s3fs")
    check("many small files >= 2x rclone",
          ratio(v("read ", MOUNT), v("read ", "rclone mount")), 2, "mount / rclone")
    ls_m, ls_ref = v("ls -l of 10,000", MOUNT), v("ls -l of 10,000", "s3flash cp")
    if ls_m is None or ls_ref is None:
        out.append(("ls -l of 10,000 keys <= 1.5x the bare LIST pages", None, "not measured"))
    else:
        rt, rq = ls_m[0] / ls_ref[0], ls_m[1] / max(1, ls_ref[1])
        out.append(("ls -l of 10,000 keys <= 1.5x the bare LIST pages",
                    rt <= 1.5 and rq <= 1.5, f"time {rt:.2f}x, requests {rq:.2f}x"))
    check("32 readers + 8 writers >= 2x s3fs-fuse",
          ratio(v("32 readers", MOUNT), v("32 readers", "s3fs")), 2, "mount / s3fs")
    check("32 readers + 8 writers >= 2x rclone",
          ratio(v("32 readers", MOUNT), v("32 readers", "rclone mount")), 2, "mount / rclone")
    check("torch.load >= 1.5x s3fs-fuse",
          ratio(v("torch.load", "s3fs"), v("torch.load", MOUNT)), 1.5,
          "s3fs time / mount time")
    rss = v("daemon peak", MOUNT)
    out.append((f"peak RSS within --memory-target {a.memory_target}M",
                None if rss is None else rss <= a.memory_target,
                "not measured" if rss is None else f"{rss:,.0f} MiB"))
    return out


def print_table(a, title, tools, rows, vals):
    cols = ["s3flash cp"] + tools
    others = [t for t in tools if t != MOUNT]
    print(f"\n### {title}\n")
    print(f"| workload | {' | '.join(cols)} | "
          + " | ".join(f"mount / {o}" for o in ["s3flash cp"] + others) + " |")
    print("|---" * (len(cols) + 1 + len(others) + 1) + "|")
    first = ["sequential read", "random 4 KiB", "random 1 MiB", "sequential write", "read ",
             "ls -l", "torch.load", "32 readers", "daemon peak"]
    lower_better = ("ls -l", "torch.load", "daemon peak")

    def rank(r):
        return next((i for i, f in enumerate(first) if r.startswith(f)), len(first))

    def ratio(r, o):
        x, y = vals.get(r, {}).get(MOUNT), vals.get(r, {}).get(o)
        if isinstance(x, tuple):
            x, y = x[0], (y[0] if isinstance(y, tuple) else None)
        if x is None or y is None or not x or not y:
            return ""
        return f"{(y / x if r.startswith(lower_better) else x / y):.2f}x"
    for r in sorted(rows, key=lambda r: (rank(r), r)):
        print(f"| {r} | " + " | ".join(rows[r].get(c, "") for c in cols) + " | "
              + " | ".join(ratio(r, o) for o in ["s3flash cp"] + others) + " |")
    print("\n(ratios: s3flash mount's speed over the other's; for ls -l, torch.load and the "
          "peak RSS, the other's time or size over the mount's, so above 1 is the mount "
          "ahead)\n")
    print("| target (issue 19) | met | measured |")
    print("|---|---|---|")
    for name, met, how in targets(a, vals):
        print(f"| {name} | {'met' if met else 'not measured' if met is None else 'NOT met'} "
              f"| {how} |")


# ---- the run --------------------------------------------------------------------------------

def cli_env(a):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    env.update({"AWS_ACCESS_KEY_ID": a.access_key, "AWS_SECRET_ACCESS_KEY": a.secret_key,
                "AWS_REGION": a.region, "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
    return env


def s3flash(a, *args, endpoint=None):
    argv = [a.cli, "--endpoint-url", endpoint or a.endpoint, "--force-path-style", "-q",
            *map(str, args)]
    p = subprocess.run(argv, env=cli_env(a), capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr[-2000:]}")
    return p.stdout


def run_server(a, tools, endpoint, server):
    """Every row against one server; returns (rows, vals)."""
    ls_keys = a.ls_keys[:1] if server == "sink" else a.ls_keys
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=a.access_key,
                      aws_secret_access_key=a.secret_key, region_name=a.region,
                      config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))
    made_bucket = a.bucket_arg is None or server == "sink"
    a.bucket = a.bucket_arg if not made_bucket else a.sink_bucket if server == "sink" \
        else f"s3f-mountbench-{uuid.uuid4().hex[:8]}"
    a.endpoint = endpoint
    sink = server == "sink"
    if made_bucket:
        s3.create_bucket(Bucket=a.bucket)
    work = tempfile.mkdtemp(prefix="s3flash-mountbench-", dir="/var/tmp")
    u = urlparse(a.endpoint)
    proxy = start_faultproxy(u.hostname, u.port)
    rows = {}      # row -> {column: text}
    vals = {}      # row -> {column: number} (what the targets compare)

    def cell(row, col, text, value=None):
        rows.setdefault(row, {})[col] = text
        if value is not None:
            vals.setdefault(row, {})[col] = value
        log(f"  [{server}] {row} | {col}: {text}")

    try:
        # ---- the data, and the s3flash cp reference ----
        large = os.path.join(work, "large")
        block = random.Random(1).randbytes(MIB)
        with open(large, "wb") as f:
            for i in range(a.large_mib):
                f.write(block[i % 251:] + block[:i % 251])
        nbytes = a.large_mib * MIB
        log(f"seeding: {a.large_mib} MiB object, {a.small_files} small files, "
            f"ls keys {a.ls_keys} (bucket {a.bucket})")
        t, _ = timed(lambda: s3flash(a, "cp", large, f"s3://{a.bucket}/large"))
        cell(f"sequential write, {a.large_mib} MiB", "s3flash cp", mbps(nbytes, t))
        # the median of --seq-runs reads: one read is a few tenths of a second, and the
        # sink's first-byte latencies (a seeded draw) or the loaded machine move one by 1.5x
        t = statistics.median(timed(lambda: s3flash(a, "cp", f"s3://{a.bucket}/large",
                                                    "/dev/null"))[0]
                              for _ in range(a.seq_runs))
        cell(f"sequential read, {a.large_mib} MiB", "s3flash cp", mbps(nbytes, t), nbytes / t)
        # the random reads go to another object: the sequential read may have left the
        # whole of "large" in the kernel's page cache (s3flash mount keeps it across opens)
        s3flash(a, "cp", large, f"s3://{a.bucket}/random")
        small = os.path.join(work, "small")
        os.makedirs(small)
        body = b"s" * (a.small_kib * 1024)
        # the sink lists no written keys, so that there a lookup of the directory small/
        # would fail: its small files are at the top, found by name (HEAD)
        small_names = [f"{'small-' if sink else ''}f{i:06d}" for i in range(a.small_files)]
        for n in small_names:
            with open(os.path.join(small, n), "wb") as f:
                f.write(body)
        s3flash(a, "cp", "--recursive", small, f"s3://{a.bucket}/{'' if sink else 'small/'}")
        shutil.rmtree(small)
        if sink:     # the sink lists only its --synth-list keys: no recursive download
            cell(f"read {a.small_files} files of {a.small_kib} KiB", "s3flash cp",
                 "n/a (the sink lists no written keys)")
        else:
            dl = os.path.join(work, "dl")
            t, _ = timed(lambda: s3flash(a, "cp", "--recursive", f"s3://{a.bucket}/small/",
                                         dl))
            cell(f"read {a.small_files} files of {a.small_kib} KiB", "s3flash cp",
                 f"{a.small_files / t:,.0f} files/s", a.small_files / t)
            shutil.rmtree(dl)
        for n in ls_keys:
            if not sink:
                d = os.path.join(work, f"ls{n}")
                os.makedirs(d)
                for i in range(n):
                    open(os.path.join(d, f"k{i:06d}"), "wb").close()
                s3flash(a, "cp", "--recursive", d, f"s3://{a.bucket}/ls{n}/")
                shutil.rmtree(d)
            proxy.reset()
            t, _ = timed(lambda: s3flash(a, "ls", f"s3://{a.bucket}/ls{n}/",
                                         endpoint=proxy.endpoint))
            nreq = proxy.stats()['requests_total']
            cell(f"ls -l of {n:,} keys", "s3flash cp",
                 f"{t:.2f} s, {nreq} req (bare LIST pages)", (t, nreq))
        ckpt_ok = True
        try:
            import torch
            g = torch.Generator().manual_seed(0)
            sd = {f"w{i}": torch.randn(MIB, generator=g)      # 4 MiB each
                  for i in range(max(1, a.ckpt_mib // 4))}
            ck = os.path.join(work, "ckpt.pt")
            torch.save(sd, ck)
            s3flash(a, "cp", ck, f"s3://{a.bucket}/ckpt.pt")
            ck_bytes = os.path.getsize(ck)
            os.unlink(ck)
            try:
                import s3flash as s3fpy
                cfg = s3fpy.S3ClientConfig(force_path_style=True,
                                           access_key_id=a.access_key,
                                           secret_access_key=a.secret_key)
                t, _ = timed(lambda: s3fpy.load(f"s3://{a.bucket}/ckpt.pt", region=a.region,
                                                endpoint=a.endpoint, s3client_config=cfg,
                                                weights_only=True))
                cell(f"torch.load, {ck_bytes / MIB:.0f} MiB", "s3flash cp",
                     f"{t:.2f} s (s3flash.load)", t)
            except Exception as e:  # the package not on PYTHONPATH
                cell(f"torch.load, {ck_bytes / MIB:.0f} MiB", "s3flash cp", f"n/a ({e})"[:60])
        except ImportError:
            ckpt_ok = False
        os.unlink(large)

        # ---- each mount ----
        for tool in tools:
            log(f"{tool}:")
            if sink and tool == "rclone mount":
                # rclone finds a name by listing its directory, and the sink lists no
                # written keys: only its ls -l row (synthetic keys) is measured there
                cell("read and write rows", tool, "n/a on the sink (rclone looks names up "
                     "by listing; the sink lists only --synth-list keys)")
                m = None
            else:
                try:
                    m = Tools(a, work).mount(tool, a.endpoint, tool.split()[0])
                except Exception as e:
                    cell("mount", tool, f"failed: {e}"[:80])
                    continue
            if m is not None:
                try:
                    def row(name, fn):
                        try:
                            r = fn()
                            if isinstance(r, tuple):
                                cell(name, tool, *r)
                            else:
                                cell(name, tool, r)
                        except Exception as e:
                            cell(name, tool, f"error: {e}"[:60])

                    p = os.path.join(m.dir, "large")
                    def seq_read():
                        ts = []
                        for _ in range(a.seq_runs):  # the median, as cp's
                            drop_page_cache(p)
                            t, n = timed(lambda: read_file(p))
                            if n != nbytes:
                                raise RuntimeError(f"read {n} bytes of {nbytes}")
                            ts.append(t)
                        t = statistics.median(ts)
                        return mbps(nbytes, t), nbytes / t
                    row(f"sequential read, {a.large_mib} MiB", seq_read)
                    p = os.path.join(m.dir, "random")
                    def rate(n, length, seed, unit):
                        t = timed(lambda: rand_reads(p, nbytes, n, length, seed))[0]
                        return (f"{n / t:,.0f} reads/s" if unit == "reads" else
                                mbps(n * length, t)), n / t
                    row("random 4 KiB reads", lambda: rate(a.rand4k, 4096, 2, "reads"))
                    row("random 1 MiB reads", lambda: rate(a.rand1m, MIB, 3, "MiB"))
                    w = os.path.join(m.dir, f"written-{tool.split()[0]}")
                    row(f"sequential write, {a.large_mib} MiB",
                        lambda: mbps(nbytes, timed(lambda: write_file(w, block, a.large_mib))[0]))
                    sm = m.dir if sink else os.path.join(m.dir, "small")
                    def small_files():
                        # a directory listed, then its files read (on the sink, which
                        # lists no written keys: opened by name, a lookup each)
                        t, got = timed(lambda: read_many(
                            [os.path.join(sm, n) for n in
                             (small_names if sink else sorted(os.listdir(sm)))]))
                        if got != a.small_files * a.small_kib * 1024:
                            raise RuntimeError(f"read {got} bytes")
                        return f"{a.small_files / t:,.0f} files/s", a.small_files / t
                    row(f"read {a.small_files} files of {a.small_kib} KiB", small_files)
                    if ckpt_ok:
                        import torch
                        cp = os.path.join(m.dir, "ckpt.pt")
                        def load():
                            t = timed(lambda: torch.load(open(cp, 'rb'), weights_only=True))[0]
                            return f"{t:.2f} s", t
                        row(f"torch.load, {ck_bytes / MIB:.0f} MiB", load)
                    def conc():
                        t, n = timed(lambda: readers_and_writers(
                            m.dir, os.path.join(m.dir, "large"), nbytes, 32, 8,
                            a.stream_mib * MIB, block, tool.split()[0]))
                        return mbps(n, t), n / t
                    row(f"32 readers + 8 writers, {a.stream_mib} MiB each", conc)
                    rss = m.peak_rss_kib()
                    cell("daemon peak RSS (VmHWM)", tool, f"{rss / 1024:,.0f} MiB" if rss else "?",
                         rss / 1024 if rss else None)
                finally:
                    m.stop()
            # ls -l through the proxy (a fresh mount: nothing cached)
            try:
                m = Tools(a, work).mount(tool, proxy.endpoint, tool.split()[0] + "-ls")
            except Exception as e:
                cell("mount through the proxy", tool, f"failed: {e}"[:80])
                continue
            try:
                for n in ls_keys:
                    proxy.reset()
                    d = os.path.join(m.dir, f"ls{n}")
                    t, out = timed(lambda: subprocess.run(["ls", "-l", d], capture_output=True,
                                                          text=True, timeout=3600))
                    lines = out.stdout.count("\n") - 1
                    ok = out.returncode == 0 and lines == n
                    nreq = proxy.stats()['requests_total']
                    cell(f"ls -l of {n:,} keys", tool,
                         f"{t:.2f} s, {nreq} req"
                         + ("" if ok else f" (rc {out.returncode}, {lines} entries)"),
                         (t, nreq) if ok else None)
            finally:
                m.stop()
    finally:
        proxy.stop()
        shutil.rmtree(work, ignore_errors=True)
        if made_bucket and not a.keep and not sink:
            keys = []
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=a.bucket):
                keys += [o["Key"] for o in page.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                s3.delete_objects(Bucket=a.bucket, Delete={
                    "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
            s3.delete_bucket(Bucket=a.bucket)

    return rows, vals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a check that it works")
    ap.add_argument("--large-mib", type=int, help="the large object (default 2048; quick 64)")
    ap.add_argument("--rand4k", type=int, help="random 4 KiB reads (default 2000; quick 200)")
    ap.add_argument("--rand1m", type=int, help="random 1 MiB reads (default 200; quick 20)")
    ap.add_argument("--seq-runs", type=int, default=3,
                    help="sequential reads of the large object per tool, the median shown")
    ap.add_argument("--small-files", type=int, help="small files read (default 10000; quick 300)")
    ap.add_argument("--small-kib", type=int, default=16, help="size of each small file")
    ap.add_argument("--ls-keys", help="comma-separated key counts of the ls -l rows "
                    "(default 10000,50000; quick 1000,3000)")
    ap.add_argument("--ckpt-mib", type=int, help="the torch checkpoint (default 512; quick 32)")
    ap.add_argument("--stream-mib", type=int,
                    help="bytes per stream of the 32 readers + 8 writers row (default 256; "
                    "quick 8)")
    ap.add_argument("--tools", default="s3flash mount,s3fs,rclone mount",
                    help="comma-separated columns")
    ap.add_argument("--s3flash-opt", action="append", default=[],
                    help="an extra option of s3flash mount (repeatable)")
    ap.add_argument("--bucket", help="an existing bucket to fill (default: a new one, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the bucket")
    ap.add_argument("--servers", default="rgw,sink",
                    help="comma-separated: rgw (S3FLASH_TEST_*), sink (bench/s3flash-sink "
                    "--s3-like, started here)")
    ap.add_argument("--pace-rate", default="50M",
                    help="the pace-only row's sink: --conn-rate alone, no first-byte latency "
                    "(random 1 MiB reads; empty: no such row)")
    ap.add_argument("--pace-only", action="store_true",
                    help="against the sink, only the pace-only row (no seeding, no S3-like "
                    "rows)")
    ap.add_argument("--memory-target", type=int, default=512,
                    help="--memory-target of s3flash mount, MiB (the peak RSS target)")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    q = a.quick
    a.large_mib = a.large_mib or (64 if q else 2048)
    a.rand4k = a.rand4k or (200 if q else 2000)
    a.rand1m = a.rand1m or (20 if q else 200)
    a.small_files = a.small_files or (300 if q else 10000)
    a.ckpt_mib = a.ckpt_mib or (32 if q else 512)
    a.stream_mib = min(a.stream_mib or (8 if q else 256), a.large_mib)
    a.ls_keys = [int(x) for x in (a.ls_keys or ("1000,3000" if q else "10000,50000")).split(",")]
    a.bucket_arg = a.bucket
    a.sink_bucket = f"s3f-mountbench-sink-{uuid.uuid4().hex[:8]}"
    a.endpoint = a.rgw_endpoint = os.environ.get("S3FLASH_TEST_ENDPOINT", "")
    if "rgw" in a.servers.split(",") and not a.rgw_endpoint:
        raise SystemExit("S3FLASH_TEST_ENDPOINT is not set (source /var/tmp/rgw.env), "
                         "or run --servers sink")
    a.access_key = os.environ.get("S3FLASH_TEST_ACCESS_KEY", "AKIDSINKBENCH")
    a.secret_key = (os.environ.get("S3FLASH_TEST_SECRET_KEY")
                    or os.environ.get("S3FLASH_TEST_SECRET", "sink-bench-secret"))
    a.region = os.environ.get("S3FLASH_TEST_REGION", "us-east-1")
    a.cli = os.environ.get("S3FLASH_CLI") or os.path.join(
        os.environ.get("S3FLASH_BUILD_DIR", str(ROOT / "build")), "src", "cli", "s3flash")
    tools = [t for t in a.tools.split(",") if t]
    for t, exe in (("s3fs", "s3fs"), ("rclone mount", "rclone")):
        if t in tools and shutil.which(exe) is None:
            log(f"{exe} not installed: column left out")
            tools.remove(t)

    servers = [x for x in a.servers.split(",") if x]
    results = []
    for server in servers:
        if server == "sink":
            rows, vals = {}, {}
            if not a.pace_only:
                with Sink(a) as endpoint:
                    rows, vals = run_server(a, tools, endpoint, server)

            def cell(row, col, text, value=None):
                rows.setdefault(row, {})[col] = text
                if value is not None:
                    vals.setdefault(row, {})[col] = value
                log(f"  [sink, paced only] {row} | {col}: {text}")
            if a.pace_rate:
                pace_rows(a, tools, cell)
            results.append((f"the sink in S3-like mode ({SINK_DESC}); the paced-only row: "
                            f"--conn-rate {a.pace_rate} alone", (rows, vals)))
        elif server == "rgw":
            results.append(("Ceph RGW (loopback)",
                            run_server(a, tools, a.rgw_endpoint, server)))
        else:
            raise SystemExit(f"unknown server {server!r} (rgw, sink)")
    with benchjson.tee() as printed:
        for title, (rows, vals) in results:
            print_table(a, title, tools, rows, vals)
    if a.json:  # a column per tool; the ratio columns and the targets' table left out
        benchjson.write_markdown(a.json, printed.getvalue(), "mount", layout="columns",
                                 tables=["Ceph RGW", "sink"])


if __name__ == "__main__":
    main()
