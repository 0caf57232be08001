#!/usr/bin/env python3
"""The client's benchmark: `s3flash cp` and `s3flash bench` against the loopback sink, next to
iperf3 on the same loopback, in one run, repetitions alternated; a Markdown table of medians
(min-max) and ratios to iperf3 goes to stdout and to bench/results/.

  python3 bench/client_bench.py [--build build] [--size 4G] [--repeat 3] [--memory-limit 256M]

What it does (see bench/README.md):
  1. installs iperf3 with apt-get when it is missing;
  2. creates the upload's source file (--size bytes, default 4 GiB, in --dir, default /dev/shm,
     so that the disk is out of the picture: the file is read from the page cache);
  3. starts build/bench/s3flash-sink (2 threads);
  4. --repeat times (default 3), in this order each time: iperf3 -P 1, iperf3 -P 4,
     `s3flash cp FILE s3://...` (upload), `s3flash cp s3://... FILE` (download to a file in
     --dir, removed after), `s3flash cp s3://... -` (download to stdout, which is /dev/null),
     `s3flash bench` (--bench-count objects of --bench-size, from and to memory) and
     `s3flash bench --writer` (the streaming writer);
  5. for each s3flash run: wall time, the child's CPU time and peak RSS (wait4's rusage), and
     the sink's CPU time (/proc); `s3flash bench` rows use the figures bench prints itself;
  6. checks: each transfer reaches --target (default 60%) of iperf3 measured in the same
     repetition (the better of -P 1 and -P 4), and a cp upload's peak RSS, or the writer's
     RSS over its base, stays within the pool plus 32 MiB.
`--memory-limit` is passed to `cp` only when `s3flash cp --help` lists it; otherwise the pool
is the library's default (512 MiB) and the check uses that.
"""
import argparse
import datetime
import os
import platform
import shutil
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
from sink_bench import cpu_seconds, parse_size, run_iperf3  # noqa: E402

MiB = 1 << 20
DEFAULT_POOL = 512 * MiB
SLACK = 32 * MiB


def ensure_iperf3():
    if shutil.which("iperf3"):
        return
    print("iperf3 is missing: apt-get install -y iperf3", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "iperf3"], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0 or not shutil.which("iperf3"):
        sys.exit("could not install iperf3: " + r.stderr[-2000:])


class Child:
    """A child run under /usr/bin/time (its own peak RSS and CPU time; os.wait4's rusage would
    start from this Python process's RSS, which fork and exec carry into ru_maxrss)."""

    def __init__(self, argv, env, stdout=subprocess.PIPE):
        self.argv = argv
        fd, tfile = tempfile.mkstemp(prefix="s3flash-time.")
        os.close(fd)
        timed = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", tfile] + argv
        t0 = time.perf_counter()
        p = subprocess.run(timed, env=env, stdout=subprocess.DEVNULL if stdout is None
                           else stdout, stderr=subprocess.PIPE)
        self.seconds = time.perf_counter() - t0
        self.out = (p.stdout or b"").decode()
        self.err = p.stderr.decode()
        with open(tfile) as f:
            last = f.read().strip().splitlines()[-1].split()
        os.unlink(tfile)
        if p.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{self.err[-3000:]}")
        self.cpu = float(last[1]) + float(last[2])
        self.maxrss = int(last[3]) * 1024


def git_head():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "?"


def build_head():
    """Build the committed HEAD (default build type, -j2) in /var/tmp; reused per commit."""
    head = git_head()
    src = f"/var/tmp/s3flash-bench-{head}"
    build = os.path.join(src, "build")
    if not os.access(os.path.join(build, "src", "cli", "s3flash"), os.X_OK):
        print(f"building commit {head} in {src}", file=sys.stderr)
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        subprocess.run(f"git -C {ROOT} archive HEAD | tar -x -C {src}", shell=True, check=True)
        subprocess.run(["meson", "setup", build, src], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", build, "-j2", "src/cli/s3flash", "bench/s3flash-sink"],
                       check=True, stdout=subprocess.DEVNULL)
    return build, f"commit {head} (built by this script in `{build}`)"


def bench_rows(text):
    """{phase: {column: float}} from `s3flash bench`'s table."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("phase"))
    cols = [c for c in lines[head].split("  ") if c.strip()]
    cols = [c.strip() for c in cols]
    rows = {}
    for ln in lines[head + 1:]:
        f = ln.split()
        rows[f[0]] = dict(zip(cols[1:], map(float, f[1:])))
    return rows


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_range(xs, digits=2, pct=False):
    if not xs:
        return "—"
    if pct:
        return f"{med(xs):.0%} ({min(xs):.0%}–{max(xs):.0%})"
    return f"{med(xs):.{digits}f} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None,
                    help="a build directory to measure (default: build the committed HEAD, "
                         "`git archive` into /var/tmp/s3flash-bench-<commit>, so that the "
                         "figures belong to a commit and not to a working tree in flux)")
    ap.add_argument("--size", default="4G", help="bytes per cp transfer (default 4G)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--memory-limit", default="256M", help="pool of cp and bench (256M)")
    ap.add_argument("--bench-size", default="1G", help="bench: bytes per object (1G)")
    ap.add_argument("--bench-count", type=int, default=4, help="bench: objects (4)")
    ap.add_argument("--iperf-seconds", type=int, default=5)
    ap.add_argument("--iperf-streams", default="1,4")
    ap.add_argument("--threads", type=int, default=2, help="sink I/O threads (2)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/var/tmp",
                    help="where the cp source and download files go (/dev/shm)")
    ap.add_argument("--target", type=float, default=0.60, help="ratio to iperf3 (0.60)")
    ap.add_argument("--cp-args", default="", help="more arguments for every cp, e.g. "
                    "'--concurrency 8'")
    ap.add_argument("--bench-args", default="", help="more arguments for every bench")
    ap.add_argument("--out", default=None, help="the .md to write (default "
                    "bench/results/client-<date>.md; '-' for none)")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    size, pool = parse_size(a.size), parse_size(a.memory_limit)
    streams = [int(s) for s in a.iperf_streams.split(",") if s]
    if a.build is None:
        a.build, built_from = build_head()
    else:
        built_from = f"build `{a.build}` (working tree of {git_head()})"
    cli = os.path.join(a.build, "src", "cli", "s3flash")
    sink_exe = os.path.join(a.build, "bench", "s3flash-sink")
    if not os.access("/usr/bin/time", os.X_OK):
        sys.exit("/usr/bin/time is missing: apt-get install -y time")
    for exe in (cli, sink_exe):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} is missing: meson setup {a.build} && ninja -C {a.build}")
    ensure_iperf3()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3FLASH_"))}
    env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
               AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
               AWS_EC2_METADATA_DISABLED="true")
    cp_help = subprocess.run([cli, "cp", "--help"], capture_output=True, text=True).stdout
    cp_pool_opt = ["--memory-limit", a.memory_limit] if "--memory-limit" in cp_help else []
    cp_pool = pool if cp_pool_opt else DEFAULT_POOL

    work = tempfile.mkdtemp(prefix="s3flash-client-bench.", dir=a.dir)
    src = os.path.join(work, "src.bin")
    print(f"creating {src} ({size} bytes)", file=sys.stderr)
    with open(src, "wb") as f:
        chunk = os.urandom(64 * MiB)
        left = size
        while left > 0:
            left -= f.write(chunk[:min(left, len(chunk))])
        f.flush()
        os.fsync(f.fileno())
    with open(src, "rb") as f:  # read once: in the page cache for every repetition
        while f.read(64 * MiB):
            pass

    port_file = os.path.join(work, "port")
    sink = subprocess.Popen([sink_exe, "--port", "0", "--port-file", port_file, "--threads",
                             str(a.threads)], stderr=subprocess.PIPE, text=True)
    results = {}  # row name -> list of dicts per repetition
    order = []

    def add(name, **kw):
        if name not in results:
            results[name] = []
            order.append(name)
        results[name].append(kw)

    try:
        for _ in range(500):
            if os.path.exists(port_file) or sink.poll() is not None:
                break
            time.sleep(0.01)
        if not os.path.exists(port_file):
            sys.exit("sink failed to start: " + sink.stderr.read())
        url = f"http://127.0.0.1:{int(open(port_file).read())}"
        base = [cli, "--endpoint-url", url, "--quiet"]
        key = f"s3://bench/cp-size-{size}"
        dl = os.path.join(work, "download.bin")

        def s3flash(name, argv, nbytes, stdout=subprocess.PIPE, rss_limit=None, rep=0):
            c0 = cpu_seconds(sink.pid)
            ch = Child(base + argv, env, stdout=stdout)
            sink_cpu = cpu_seconds(sink.pid) - c0
            add(name, rep=rep, gbs=nbytes / ch.seconds / 1e9, cpu_gb=ch.cpu / (nbytes / 1e9),
                rss=ch.maxrss, sink_cpu_gb=sink_cpu / (nbytes / 1e9), rss_limit=rss_limit)
            return ch

        for rep in range(a.repeat):
            print(f"repetition {rep + 1}/{a.repeat}", file=sys.stderr)
            for n in streams:
                add(f"iperf3 -P {n} ({a.iperf_seconds} s)", rep=rep,
                    gbs=run_iperf3(n, a.iperf_seconds))
            extra_cp = a.cp_args.split()
            s3flash(f"cp upload, file → sink ({a.size})",
                    ["cp", *cp_pool_opt, *extra_cp, src, key], size,
                    rss_limit=cp_pool + SLACK, rep=rep)
            s3flash(f"cp download, sink → file ({a.size})",
                    ["cp", *cp_pool_opt, *extra_cp, key, dl], size, rep=rep)
            if os.path.getsize(dl) != size:
                sys.exit(f"download is {os.path.getsize(dl)} bytes, expected {size}")
            os.unlink(dl)
            # the ceiling of writing a new file there: fresh pages, no network
            ch = Child(["dd", f"if={src}", f"of={dl}", "bs=8M"], env)
            add(f"reference: dd file → new file, no network ({a.size})", rep=rep,
                gbs=size / ch.seconds / 1e9, cpu_gb=ch.cpu / (size / 1e9), rss=ch.maxrss,
                ref_row=True)
            os.unlink(dl)
            s3flash(f"cp download, sink → stdout ({a.size})",
                    ["cp", *cp_pool_opt, *extra_cp, key, "-"], size, stdout=None, rep=rep)
            total = parse_size(a.bench_size) * a.bench_count
            for writer in (False, True):
                argv = ["bench", "s3://bench/b", "--size", a.bench_size, "--count",
                        str(a.bench_count), "--memory-limit", a.memory_limit,
                        *a.bench_args.split()] + (["--writer"] if writer else [])
                c0 = cpu_seconds(sink.pid)
                ch = Child(base + argv, env)
                sink_cpu = cpu_seconds(sink.pid) - c0
                rows = bench_rows(ch.out)
                label = f"{a.bench_count} × {a.bench_size}"
                for phase, r in rows.items():
                    if phase == "download" and writer:
                        continue  # the same as without --writer
                    what = {"upload": f"bench upload, memory → sink ({label})",
                            "upload-w": f"bench writer upload, 1 MiB writes ({label})",
                            "download": f"bench download, sink → memory ({label})"}[phase]
                    add(what, rep=rep, gbs=r["GB/s"], cpu_gb=r["CPU s/GB"],
                        rss=r["peak RSS MiB"] * MiB, over=r["over base MiB"] * MiB,
                        pool_hw=r["pool HW MiB"] * MiB,
                        rss_limit=(pool + SLACK) if phase == "upload-w" else None,
                        sink_cpu_gb=None)
                del sink_cpu
    finally:
        sink.send_signal(signal.SIGTERM)
        sink_err = sink.communicate(timeout=30)[1]
        shutil.rmtree(work, ignore_errors=True)

    # iperf3 reference of each repetition: the better of its stream counts
    iperf_rows = [n for n in order if n.startswith("iperf3")]
    ref = [max(results[n][rep]["gbs"] for n in iperf_rows) for rep in range(a.repeat)]

    cpu_model = ""
    try:
        cpu_model = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                         if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = []
    lines.append(f"# s3flash client vs iperf3 on loopback — "
                 f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}")
    lines.append("")
    lines.append(f"- machine: {os.cpu_count()} CPUs ({cpu_model}), {platform.platform()}; "
                 f"{built_from}")
    lines.append(f"- command: `python3 bench/client_bench.py {' '.join(sys.argv[1:])}`")
    lines.append(f"- {a.repeat} repetitions, alternated (each: iperf3 -P "
                 f"{', -P '.join(map(str, streams))}, cp up, cp down to a file, cp down to "
                 f"stdout, bench, bench --writer); medians (min–max)")
    lines.append(f"- cp source and download file in `{a.dir}` (tmpfs: read from memory, no "
                 f"disk); cp pool: {'--memory-limit ' + a.memory_limit if cp_pool_opt else 'library default 512 MiB (cp has no --memory-limit)'}; "
                 f"bench pool: --memory-limit {a.memory_limit}")
    lines.append("- ratio: GB/s over the better iperf3 of the same repetition; RSS check: "
                 "cp's peak RSS, or bench --writer's RSS over its base, ≤ pool + 32 MiB")
    lines.append(f"- sink: {(sink_err.strip().splitlines() or [''])[-1]}")
    lines.append("")
    lines.append("| what | GB/s | of iperf3 | client CPU s/GB | sink CPU s/GB | "
                 "peak RSS MiB | RSS check |")
    lines.append("|---|---|---|---|---|---|---|")
    failures = []
    for name in order:
        rs = results[name]
        gbs = [r["gbs"] for r in rs]
        if name.startswith("iperf3"):
            lines.append(f"| {name} | {fmt_range(gbs)} | — | — | — | — | — |")
            continue
        ratios = [r["gbs"] / ref[r["rep"]] for r in rs]
        if rs[0].get("ref_row"):
            lines.append(f"| {name} | {fmt_range(gbs)} | {fmt_range(ratios, pct=True)} | "
                         f"{fmt_range([r['cpu_gb'] for r in rs], 3)} | — | — | — |")
            continue
        cpu = [r["cpu_gb"] for r in rs]
        sink_cpu = [r["sink_cpu_gb"] for r in rs if r.get("sink_cpu_gb") is not None]
        rss = max(r["rss"] for r in rs)
        rss_txt = f"{rss / MiB:.0f}"
        check = "—"
        if rs[0].get("rss_limit"):
            lim = rs[0]["rss_limit"]
            used = max(r.get("over", r["rss"]) for r in rs)
            if "over" in rs[0]:
                rss_txt += f" (over base {used / MiB:.0f}, pool HW " \
                           f"{max(r['pool_hw'] for r in rs) / MiB:.0f})"
            ok = used <= lim
            check = f"{'OK' if ok else 'FAIL'}: {used / MiB:.0f} ≤ {lim / MiB:.0f}"
            if not ok:
                failures.append(f"{name}: {used / MiB:.0f} MiB > {lim / MiB:.0f} MiB")
        if med(ratios) < a.target:
            failures.append(f"{name}: {med(ratios):.0%} of iperf3 < {a.target:.0%}")
        lines.append(f"| {name} | {fmt_range(gbs)} | {fmt_range(ratios, pct=True)} | "
                     f"{fmt_range(cpu, 3)} | {fmt_range(sink_cpu, 3) if sink_cpu else '—'} | "
                     f"{rss_txt} | {check} |")
    lines.append("")
    lines.append("Targets missed: " + ("; ".join(failures) if failures else "none") + ".")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.json:  # a row per command: GB/s, the ratio to iperf3, CPU, RSS (medians)
        benchjson.write_markdown(a.json, text, "client")
    if a.out != "-":
        out = a.out or os.path.join(
            HERE, "results", f"client-{datetime.datetime.now().strftime('%Y%m%d-%H%M')}.md")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        print(f"written to {out}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
