#!/usr/bin/env python3
"""The result tables recorded before the benchmarks wrote JSON, converted to it.

  python3 bench/import_tables.py          # rewrites the bench/results/*.json listed below

Each entry names the Markdown it reads (a bench/results/*.md file, or a section of
docs/PERFORMANCE.md between two lines), how its tables are laid out (bench/benchjson.py's
from_markdown), and the machine, date and commit the document says they were measured at.
The output's "source" names the file and section, so a plot's caption can say where its
numbers came from. compare.py's own .json files need no conversion: benchjson.load reads them.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchjson  # noqa: E402

VM = {"host": "the shared 2-core development VM (Xeon, Debian 12)", "cpus": 2}
PERF = "docs/PERFORMANCE.md"

IMPORTS = [
    dict(out="mount-20261204-stop26.json", src=PERF, benchmark="mount",
         start="### Issue 19's table at the end of stop 26", end="An earlier run the same hour",
         how=dict(layout="columns", tables=["Ceph RGW", "S3-like sink"]), date="2026-12-04",
         note="bench/mount.py --quick --ls-keys 10000 --servers rgw,sink --memory-target 512 at "
              "813e6a5; one run while a CI run loaded the same 2 cores (load 10-17): only the "
              "ratios inside the run compare"),
    dict(out="small-objects-20261204.json", src=PERF, benchmark="small objects",
         start="## Many small objects: datasets", end="## What is not measured yet",
         how=dict(variant_col=1, row_col=0, value_cols=[3], unit_from_title=True),
         date="2026-12-04",
         note="bench/small_objects.py --count 2000 --peer-count 200 --files 2000 --workers 8, "
              "sink --s3-like; shared 2-core VM at load average 12-16: ratios more than rates"),
    dict(out="checkpoint-async-20261203-1900.json",
         src="bench/results/checkpoint-async-20261203-1900.md", benchmark="checkpoint async",
         how={}, date="2026-12-03T19:00:00Z",
         note="bench/checkpoint_async.py --sizes 1G --repeat 2 against Ceph RGW while a "
              "clean-clone CI ran on the same 2 cores: rows within the run only"),
]


def section(text, start, end):
    if not start:
        return text
    i = text.index(start)
    return text[i:text.index(end, i) if end else len(text)]


def main():
    for imp in IMPORTS:
        with open(os.path.join(ROOT, imp["src"])) as f:
            text = section(f.read(), imp.get("start"), imp.get("end"))
        recs = benchjson.from_markdown(text, imp["benchmark"], **imp["how"])
        if not recs:
            sys.exit(f"{imp['src']}: no table found for {imp['out']}")
        where = imp["src"] + (f", section \"{imp['start'].strip('# ')}\"" if imp.get("start")
                              else "")
        doc = benchjson.document(imp["benchmark"], recs, source=f"converted from {where}",
                                 note=imp["note"], date=imp["date"], mach=VM)
        path = benchjson.write(os.path.join(HERE, "results", imp["out"]), doc)
        print(f"{path}: {len(recs)} records")


if __name__ == "__main__":
    main()
