#!/usr/bin/env python3
"""Plots of the benchmarks' JSON results (bench/benchjson.py's records), with matplotlib.

  python3 bench/plot.py --docs            # every figure of docs/PERFORMANCE.md into docs/img/
  python3 bench/plot.py --list            # what --docs draws, from which files
  python3 bench/plot.py R.json [R2.json] --kind line --x connections --series metric \\
        [--where params.sweep=connections] --out conns.png [--title T] [--logx]
  python3 bench/plot.py R.json --kind bars --group metric --bar variant --out peers.png
  s3flash bench s3://b/p --concurrency 8 --json > c8.json; python3 bench/plot.py c8.json ...

A line plot draws one line per --series value (default the metric), value against --x (a
params key: connections, object_size, memory; byte sizes are shown in KiB/MiB/GiB); a bar
plot draws, per --group value, a bar per --bar value, with min-max whiskers where the
records have them. Every figure is 8 x 5 inches at 100 dpi, and its footer says the
machine, the date and the files (and their "source" and "note") the numbers came from.
Exit status 2 with the file named when a results file is not JSON or not in the schema.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchjson  # noqa: E402

RESULTS = os.path.join(HERE, "results")
IMG = os.path.join(ROOT, "docs", "img")
SIZE_IN, DPI = (8, 5), 100

# The figures of docs/PERFORMANCE.md: name -> what to draw from which results.
SWEEP = "sweep-20261206-loaded.json"
COMPARE = "compare-20261203-043619.json"
FIGURES = [
    dict(name="throughput-connections", files=[SWEEP], kind="line", x="connections",
         where={"params.sweep": "connections"}, logx=True,
         title="s3flash bench: throughput against connections (S3-like sink, 80 MB/s each)",
         xlabel="connections (--concurrency)", ylabel="GB/s"),
    dict(name="throughput-object-size", files=[SWEEP], kind="line", x="object_size",
         where={"params.sweep": "object_size"}, logx=True,
         title="s3flash bench: throughput against object size (one object at a time)",
         xlabel="object size", ylabel="GB/s"),
    dict(name="throughput-memory", files=[SWEEP], kind="line", x="memory",
         where={"params.sweep": "memory", "metric": "upload-w"}, logx=True,
         title="s3flash bench --writer: throughput against the memory limit",
         xlabel="--memory-limit", ylabel="GB/s"),
    dict(name="small-objects", files=["small-objects-20261204.json"], kind="bars",
         group="metric", bar="variant", logy=True,
         panels=[dict(where={"params.table": "Datasets, 64 KiB objects, 20 ms first byte"},
                      title="datasets, 64 KiB objects (samples/s)"),
                 dict(where={"params.table": "cp --recursive"},
                      title="cp --recursive, 2000 x 16 KiB (files/s)")],
         title="Many small objects: s3flash against s3torchconnector, boto3, aws, rclone",
         ylabel="per second (log)"),
    dict(name="mount", files=["mount-20261204-stop26.json"], kind="bars", group="metric",
         bar="variant", where={"unit": "MiB/s"},
         panels=[dict(where={"params.table": "Ceph RGW"}, title="Ceph RGW (loopback)"),
                 dict(where={"params.table": "S3-like sink"}, title="S3-like sink")],
         title="s3flash mount against s3fs-fuse and rclone mount (MiB/s)", ylabel="MiB/s"),
    dict(name="save-load", files=[COMPARE], kind="bars", group="params.object_size",
         bar="variant",
         panels=[dict(where={"benchmark": "compare save",
                             "params.settings": ["defaults", "fsync"]},
                      title="save: torch.save (local: + fsync)"),
                 dict(where={"benchmark": "compare load",
                             "params.settings": ["sequential", "defaults",
                                                 "cold (pages dropped)"]},
                      title="load: torch.load (local: pages dropped)")],
         title="Checkpoint save and load: s3flash, s3torchconnector (s3tc), boto3, local disk",
         ylabel="GB/s"),
]


class PlotError(Exception):
    pass


def get(rec, key):
    """rec's value at a dotted key (params.sweep), or None."""
    v = rec
    for part in key.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return v


def matches(rec, where):
    for k, want in (where or {}).items():
        v = get(rec, k)
        if isinstance(want, list):
            if v not in want:
                return False
        elif k == "params.table":  # a table's title: a part of it will do
            if not isinstance(v, str) or want not in v:
                return False
        elif str(v) != str(want):
            return False
    return True


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def label(key, v):
    if key.endswith(("object_size", "memory")) and isinstance(v, (int, float)):
        return fmt_bytes(v)
    return str(v)


def load_all(paths):
    docs = []
    for p in paths:
        try:
            docs.append((p, benchjson.load(p)))
        except benchjson.BenchJSONError as e:
            raise PlotError(str(e)) from None
    return docs


def footer(docs):
    """What the numbers are and where they came from: machine, date, files, source, note."""
    parts = []
    for path, d in docs:
        m = d.get("machine") or {}
        mach = m.get("host", "?") + (f", {m['cpus']} CPUs" if m.get("cpus") else "")
        if m.get("cpu"):
            mach += f", {m['cpu']}"
        s = f"{os.path.basename(path)}: {mach}; {d.get('date', '?')}"
        if d.get("note"):
            s += f"; {d['note']}"
        parts.append(s)
    text = " | ".join(parts)
    return text if len(text) < 330 else text[:327] + "..."


def _series_key(rec, series):
    return get(rec, series) if series else rec["metric"]


def draw_line(ax, recs, spec):
    x, series = spec["x"], spec.get("series") or "metric"
    lines = {}
    for r in recs:
        xv = get(r, f"params.{x}")
        if xv is None or r["value"] is None:
            continue
        lines.setdefault(str(_series_key(r, series)), []).append((xv, r["value"]))
    if not lines:
        raise PlotError(f"no records with params.{x} and a value")
    for name, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if spec.get("logx"):
        ax.set_xscale("log", base=2)
    xs = sorted({p[0] for pts in lines.values() for p in pts})
    ax.set_xticks(xs)
    ax.set_xticklabels([label(x, v) for v in xs], rotation=30 if len(xs) > 5 else 0)
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def draw_bars(ax, recs, spec):
    group, bar = spec.get("group") or "metric", spec.get("bar") or "variant"
    groups, bars, val = [], [], {}
    for r in recs:
        if r["value"] is None:
            continue
        g, b = get(r, group), get(r, bar)
        if g not in groups:
            groups.append(g)
        if b not in bars:
            bars.append(b)
        val.setdefault((g, b), r)  # the first record of a pair (a table's own order)
    if not val:
        raise PlotError(f"no records with {group}, {bar} and a value")
    if group.endswith("object_size"):
        groups.sort(key=lambda v: (v is None, v or 0))
    width = 0.8 / len(bars)
    for i, b in enumerate(bars):
        xs, ys, lo, hi = [], [], [], []
        for j, g in enumerate(groups):
            r = val.get((g, b))
            if r is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(r["value"])
            lo.append(r["value"] - r["min"] if r.get("min") is not None else 0)
            hi.append(r["max"] - r["value"] if r.get("max") is not None else 0)
        err = [lo, hi] if any(lo) or any(hi) else None
        ax.bar(xs, ys, width, yerr=err, capsize=2, label=str(b))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([label(group, g) for g in groups], fontsize=7,
                       rotation=20 if len(groups) > 3 else 0, ha="right" if len(groups) > 3
                       else "center")
    if spec.get("logy"):
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def draw(spec, paths, out):
    """One figure (spec: FIGURES' keys) from the results files in paths, written to out."""
    docs = load_all(paths)  # first: a bad file is named whether matplotlib is here or not
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError(f"matplotlib is needed to draw ({e}): pip install matplotlib, or "
                        "apt-get install python3-matplotlib") from None
    recs = [r for _, d in docs for r in d["records"] if matches(r, spec.get("where"))]
    panels = spec.get("panels") or [dict()]
    fig, axes = plt.subplots(1, len(panels), figsize=SIZE_IN, dpi=DPI, squeeze=False)
    try:
        for ax, panel in zip(axes[0], panels):
            prec = [r for r in recs if matches(r, panel.get("where"))]
            if not prec:
                raise PlotError(f"{', '.join(paths)}: no records match "
                                f"{dict(spec.get('where') or {}, **(panel.get('where') or {}))}")
            (draw_line if spec["kind"] == "line" else draw_bars)(ax, prec, spec)
            ax.set_title(panel.get("title", ""), fontsize=9)
            ax.set_xlabel(spec.get("xlabel", ""), fontsize=8)
            ax.set_ylabel(spec.get("ylabel") or prec[0]["unit"], fontsize=8)
            ax.tick_params(labelsize=7)
        fig.suptitle(spec.get("title", ""), fontsize=10)
        fig.text(0.01, 0.01, footer(docs), fontsize=6, wrap=True, va="bottom")
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, dpi=DPI)
    finally:
        plt.close(fig)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="results files (bench/benchjson.py's schema)")
    ap.add_argument("--docs", action="store_true", help="draw docs/PERFORMANCE.md's figures")
    ap.add_argument("--list", action="store_true", help="list --docs' figures and sources")
    ap.add_argument("--img", default=IMG, help="where --docs writes (default docs/img)")
    ap.add_argument("--kind", choices=("line", "bars"), default="line")
    ap.add_argument("--x", default="connections", help="line: the params key on the x axis")
    ap.add_argument("--series", default="metric", help="line: a line per value of this key")
    ap.add_argument("--group", default="metric", help="bars: a group per value of this key")
    ap.add_argument("--bar", default="variant", help="bars: a bar per value of this key")
    ap.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                    help="only records whose dotted KEY is VALUE (repeatable)")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--logy", action="store_true")
    ap.add_argument("--title", default="")
    ap.add_argument("--out", help="the PNG to write")
    a = ap.parse_args(argv)
    try:
        if a.list or a.docs:
            for f in FIGURES:
                paths = [os.path.join(RESULTS, p) for p in f["files"]]
                out = os.path.join(a.img, f["name"] + ".png")
                if a.docs:
                    draw(f, paths, out)
                    print(f"{out}: {os.path.getsize(out) // 1024} KiB from {', '.join(f['files'])}")
                else:
                    print(f"{f['name']}.png: {f['title']} <- {', '.join(f['files'])}")
            return 0
        if not a.files or not a.out:
            ap.error("give results files and --out (or --docs)")
        where = {}
        for w in a.where:
            k, sep, v = w.partition("=")
            if not sep:
                ap.error(f"--where {w}: not KEY=VALUE")
            where[k] = v
        spec = dict(kind=a.kind, x=a.x, series=a.series, group=a.group, bar=a.bar,
                    where=where, logx=a.logx, logy=a.logy, title=a.title, xlabel=a.x
                    if a.kind == "line" else "")
        draw(spec, a.files, a.out)
        print(a.out)
        return 0
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
