"""bench/plot.py and bench/benchjson.py: the benchmarks' JSON results and their plots.

plot.py runs as the user runs it (a process, this Python): a tiny results file gives a PNG
of the size the docs expect (8 x 5 in at 100 dpi: 800 x 500 pixels); a file that is not JSON,
or not in the schema, gives exit status 2 and a message naming the file; docs/PERFORMANCE.md's
figures are drawn from the results committed in bench/results. The plotting tests are skipped
only where matplotlib is missing (tests/servers/install-deps.sh installs python3-matplotlib);
the parsing tests need nothing.
"""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLOT = ROOT / "bench" / "plot.py"
sys.path.insert(0, str(ROOT / "bench"))
import benchjson  # noqa: E402

sys.path.pop(0)


def png_size(path):
    """(width, height) from a PNG's IHDR chunk."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def plot(*args):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def tiny_doc():
    recs = [benchjson.record("s3flash bench", "s3flash", phase, gbs, "GB/s",
                             {"connections": c, "object_size": 8 << 20})
            for c, gbs in ((1, 0.08), (2, 0.15), (4, 0.3))
            for phase in ("upload", "download")]
    recs.append(benchjson.record("s3flash bench", "peer", "upload", 0.1, "GB/s",
                                 {"connections": 2}, min=0.09, max=0.12))
    return benchjson.document("s3flash bench", recs, note="made up by the test")


@pytest.fixture
def needs_matplotlib():
    pytest.importorskip("matplotlib")


def test_line_and_bars_from_a_tiny_file(tmp_path, needs_matplotlib):
    src = benchjson.write(str(tmp_path / "tiny.json"), tiny_doc())
    out = tmp_path / "img" / "conns.png"
    r = plot(src, "--kind", "line", "--x", "connections", "--where", "variant=s3flash",
             "--logx", "--out", out)
    assert r.returncode == 0, r.stderr
    assert png_size(out) == (800, 500)
    assert 5_000 < out.stat().st_size < 150_000
    bars = tmp_path / "bars.png"
    r = plot(src, "--kind", "bars", "--group", "params.connections", "--bar", "variant",
             "--where", "metric=upload", "--out", bars)
    assert r.returncode == 0, r.stderr
    assert png_size(bars) == (800, 500)
    # a filter that leaves nothing is an error that says what matched nothing
    r = plot(src, "--where", "variant=nobody", "--out", tmp_path / "none.png")
    assert r.returncode == 2, r
    assert "no records match" in r.stderr and "nobody" in r.stderr, r.stderr
    assert not (tmp_path / "none.png").exists()


@pytest.mark.parametrize("body,message", [
    ('{"schema": "s3flash-bench/1", "records": [', "not JSON"),
    ("", "not JSON"),
    ('[1, 2]', "not a JSON object"),
    ('{"schema": "other/2", "records": []}', "schema is 'other/2'"),
    ('{"schema": "s3flash-bench/1", "records": [{"variant": "x", "value": 1}]}',
     "record 0 has no benchmark, metric, unit"),
    ('{"schema": "s3flash-bench/1", "records": [{"benchmark": "b", "variant": "v", '
     '"metric": "m", "unit": "u", "value": "fast"}]}', "record 0: value 'fast' is not a number"),
], ids=["truncated", "empty", "list", "schema", "fields", "value"])
def test_malformed_file_names_the_file(tmp_path, body, message):
    bad = tmp_path / "broken-results.json"
    bad.write_text(body)
    with pytest.raises(benchjson.BenchJSONError) as e:
        benchjson.load(str(bad))
    assert str(bad) in str(e.value) and message in str(e.value), e.value
    # plot.py says the same and exits 2, whether matplotlib is there or not (it reads first)
    good = benchjson.write(str(tmp_path / "good.json"), tiny_doc())
    r = plot(good, bad, "--out", tmp_path / "x.png")
    assert r.returncode == 2, r
    assert f"plot.py: {bad}: " in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.png").exists()


def test_missing_file_names_it(tmp_path):
    r = plot(tmp_path / "nowhere.json", "--out", tmp_path / "x.png")
    assert r.returncode == 2, r
    assert f"{tmp_path / 'nowhere.json'}: cannot read" in r.stderr, r.stderr


def test_docs_figures_from_committed_results(tmp_path, needs_matplotlib):
    """Every figure of docs/PERFORMANCE.md is drawn from the files in bench/results, at the
    size the doc shows (and small enough to keep in git)."""
    r = plot("--docs", "--img", tmp_path)
    assert r.returncode == 0, r.stderr
    listed = plot("--list").stdout
    names = [ln.split(":")[0] for ln in listed.splitlines()]
    assert len(names) >= 6, listed
    doc = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    for name in names:
        png = tmp_path / name
        assert png_size(png) == (800, 500), name
        assert png.stat().st_size < 150_000, (name, png.stat().st_size)
        assert f"](img/{name})" in doc, f"docs/PERFORMANCE.md does not show {name}"


def test_markdown_tables_as_records():
    """The scripts' --json goes through from_markdown: a row per variant, the numbers and
    units of its cells, the ratio columns left out, the table's settings from its title."""
    md = """
**Datasets, 64 KiB objects, 20 ms first byte (samples/s)**

| row | client | objects | rate | s3flash is |
|---|---|---|---|---|
| iterable, 1 process | s3flash | 2000 | 1607 |  |
| iterable, 1 process | s3torchconnector | 200 | 37 | 43.4x |

### Ceph RGW (loopback)

| workload | s3flash cp | s3flash mount | mount / s3flash cp |
|---|---|---|---|
| sequential read, 64 MiB | 249 MiB/s | 230 MiB/s | 0.92x |
| ls -l of 10,000 keys | 0.33 s, 10 req | 1,116 reads/s | 0.69x |
"""
    recs = benchjson.from_markdown(md, "t", variant_col=1, row_col=0, value_cols=[3],
                                   unit_from_title=True, tables=["Datasets"])
    assert [(r["variant"], r["metric"], r["value"], r["unit"]) for r in recs] == [
        ("s3flash", "iterable, 1 process", 1607.0, "samples/s"),
        ("s3torchconnector", "iterable, 1 process", 37.0, "samples/s")]
    assert recs[0]["params"]["object_size"] == 64 << 10
    assert recs[0]["params"]["first_byte_ms"] == 20
    assert [r["params"]["objects"] for r in recs] == [2000, 200]  # a setting, not a value
    # a header's unit: in its brackets, else its last unit-like word
    assert benchjson.parse_cell("2.116", "seconds, median (min–max)") == (2.116, "s")
    assert benchjson.parse_cell("2287 (+2061)", "peak RSS MiB (+ over start)") == (2287, "MiB")
    assert benchjson.parse_cell("0.92x", "mount / cp") is None
    assert benchjson.parse_cell("—", "first tensor s") is None
    cols = benchjson.from_markdown(md, "m", layout="columns", tables=["RGW"])
    assert [(r["variant"], r["metric"], r["value"], r["unit"]) for r in cols] == [
        ("s3flash cp", "sequential read, 64 MiB", 249.0, "MiB/s"),
        ("s3flash mount", "sequential read, 64 MiB", 230.0, "MiB/s"),
        ("s3flash cp", "ls -l of 10,000 keys", 0.33, "s"),
        ("s3flash mount", "ls -l of 10,000 keys", 1116.0, "reads/s")]
    doc = benchjson.document("m", cols)
    assert json.loads(json.dumps(doc))["records"] == cols


def test_sweep_of_cli_bench_json_is_plotted(tmp_path):
    """bench/sweep.py runs `s3flash bench --json` against the sink once per point (small
    here: 8 MiB at 1 and 2 connections, 1 MiB objects, a 16 MiB pool); its JSON has a record
    per phase and point with the settings it was run at, and plot.py draws it."""
    build = Path(os.environ.get("S3FLASH_BUILD_DIR", ROOT / "build"))
    for exe in (build / "bench" / "s3flash-sink", build / "src" / "cli" / "s3flash"):
        if not exe.exists():
            pytest.skip(f"{exe} not built")
    out = tmp_path / "sweep.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "sweep.py"), "--build", str(build),
                        "--connections", "1,2", "--sizes", "1M", "--memory", "16M",
                        "--total", "8M", "--sink-args", "--threads 2", "--note", "test",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = benchjson.load(str(out))
    assert doc["note"] == "test" and doc["machine"]["cpus"] >= 1
    got = sorted((rec["params"]["sweep"], rec["metric"], rec["params"]["connections"],
                  rec["params"]["object_size"], rec["params"]["memory"])
                 for rec in doc["records"])
    MiB = 1 << 20
    conns = [("connections", m, c, 8 * MiB, 512 * MiB) for c in (1, 2)
             for m in ("download", "upload")]
    assert got[:4] == sorted(conns), got
    assert [g[:2] for g in got[4:]] == [("memory", "download"), ("memory", "upload-w"),
                                        ("object_size", "download"), ("object_size", "upload")]
    assert all(g[4] == 16 * MiB for g in got[4:6]) and all(g[3] == MiB for g in got[6:]), got
    assert all(rec["value"] > 0 and rec["unit"] == "GB/s" for rec in doc["records"])
    pytest.importorskip("matplotlib")
    png = tmp_path / "conns.png"
    r = plot(out, "--x", "connections", "--where", "params.sweep=connections", "--out", png)
    assert r.returncode == 0, r.stderr
    assert png_size(png) == (800, 500)
