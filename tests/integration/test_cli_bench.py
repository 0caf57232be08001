"""s3flash bench against RGW: the table, its numbers, cleanup, --keep/--writer, bad arguments.

Small sizes only (3 objects of 6 MiB with 5 MiB parts: two parts each); the performance
figures themselves are measured by bench/sink_bench.py, not here.
"""

import json
import os
import re
import sys

import pytest

from helpers import list_keys

MiB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = ["phase", "objects", "bytes", "seconds", "GB/s", "requests/s", "CPU s/GB",
           "peak RSS MiB", "over base MiB", "pool HW MiB"]


def sink_pattern(n):
    """bench/sink.c's pattern (what bench uploads): byte i = ((i mod 1048573) * 2654435761
    mod 2^32) >> 24."""
    period = 1048573
    block = bytes(((i * 2654435761) & 0xFFFFFFFF) >> 24 for i in range(min(n, period)))
    return (block * (n // period + 1))[:n]


def parse_table(text):
    """{phase: {column: value}} from bench's table (header line, then one row per phase)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("phase"))
    rows = {}
    for ln in lines[head + 1:]:
        f = ln.split()
        assert len(f) == len(COLUMNS), ln
        rows[f[0]] = {c: (float(v) if c != "phase" else v) for c, v in zip(COLUMNS, f)}
    return rows


def check_header(text):
    head = next(ln for ln in text.splitlines() if ln.startswith("phase"))
    # the header's columns, in order (names contain single spaces)
    assert re.split(r"\s{2,}", head.strip()) == COLUMNS, head


def test_bench_prints_table_and_cleans_up(cli, s3, bucket):
    r = cli.ok("bench", f"s3://{bucket}/bp", "--size", "6M", "--count", "3",
               "--part-size", "5M")
    check_header(r.text)
    rows = parse_table(r.text)
    assert set(rows) == {"upload", "download"}, r.text
    for phase, row in rows.items():
        assert row["objects"] == 3
        assert row["bytes"] == 3 * 6 * MiB
        assert 0 < row["seconds"] < 60, row
        # GB/s is bytes over seconds (both printed, rounded)
        assert row["GB/s"] > 0
        assert row["GB/s"] == pytest.approx(row["bytes"] / 1e9 / row["seconds"], rel=0.05,
                                            abs=0.002)
        # two data requests per object (5 MiB parts of a 6 MiB object, ranged GETs too)
        assert row["requests/s"] * row["seconds"] == pytest.approx(6, abs=0.5), row
        # some CPU, and not absurdly much (well under 100 CPU-seconds per GB)
        assert 0 < row["CPU s/GB"] < 100, row
        # the process holds its two 6 MiB buffers at least; nothing near a GiB
        assert 12 < row["peak RSS MiB"] < 1024, row
        assert 0 <= row["over base MiB"] < row["peak RSS MiB"]
        assert row["pool HW MiB"] == 0  # buffers in, buffers out: no pool
    assert "deleted 3 objects" in r.err
    assert list_keys(s3, bucket, "bp/") == []


def test_bench_writer_keep(cli, s3, bucket):
    r = cli.ok("bench", f"s3://{bucket}/kept/", "--size", "6M", "--count", "2",
               "--part-size", "5M", "--writer", "--memory-limit", "16M", "--checksum", "crc32",
               "--keep")
    rows = parse_table(r.text)
    assert set(rows) == {"upload-w", "download"}, r.text
    assert rows["upload-w"]["objects"] == 2
    # the writer goes through the pool, which is bounded
    assert 0 < rows["upload-w"]["pool HW MiB"] <= 16
    keys = list_keys(s3, bucket, "kept/")
    assert len(keys) == 2, keys
    assert all(re.fullmatch(r"kept/s3flash-bench-[0-9a-f]+-[01]", k) for k in keys), keys
    expect = sink_pattern(6 * MiB)
    for k in keys:
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == expect
    assert "kept 2 objects" in r.err


def test_bench_json(cli, s3, bucket, tmp_path):
    """--json: one document of bench/benchjson.py's schema, a record per phase with the
    table's figures and the settings (connections, object size, memory) bench/plot.py draws
    against; nothing else on stdout."""
    r = cli.ok("bench", f"s3://{bucket}/bj", "--size", "6M", "--count", "3",
               "--part-size", "5M", "--concurrency", "3", "--memory-limit", "32M", "--json")
    assert "phase" not in r.text
    doc = json.loads(r.text)
    assert doc["schema"] == "s3flash-bench/1" and doc["benchmark"] == "s3flash bench"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date"]), doc["date"]
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["host"]
    recs = {rec["metric"]: rec for rec in doc["records"]}
    assert set(recs) == {"upload", "download"}, doc
    for rec in recs.values():
        assert rec["variant"] == "s3flash" and rec["unit"] == "GB/s"
        assert rec["params"] == {"connections": 3, "object_size": 6 * MiB, "objects": 3,
                                 "memory": 32 * MiB, "part_size": 5 * MiB,
                                 "checksum": "crc32c"}, rec
        assert rec["bytes"] == 3 * 6 * MiB
        assert rec["value"] == pytest.approx(rec["bytes"] / 1e9 / rec["seconds"], rel=1e-3)
        assert rec["requests_per_s"] * rec["seconds"] == pytest.approx(6, abs=0.01), rec
        assert 0 < rec["cpu_s_per_gb"] < 100, rec
        assert 1 <= rec["inflight_high_water"] <= 3, rec
    # bench/benchjson.py (what bench/plot.py reads through) takes it as it is
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        import benchjson
    finally:
        sys.path.pop(0)
    path = tmp_path / "bench.json"
    path.write_text(r.text)
    assert [rec["metric"] for rec in benchjson.load(str(path))["records"]] == \
        ["upload", "download"]
    assert list_keys(s3, bucket, "bj/") == []


def test_bench_quiet_no_verify(cli, s3, bucket):
    r = cli.ok("-q", "bench", f"s3://{bucket}", "--size", "1K", "--count", "2", "--no-verify",
               "--checksum", "none", "--concurrency", "2")
    assert r.err == ""
    rows = parse_table(r.text)
    assert rows["upload"]["bytes"] == 2048 and rows["download"]["bytes"] == 2048
    assert [k for k in list_keys(s3, bucket) if k.startswith("s3flash-bench-")] == []


def test_bench_missing_bucket_fails(cli):
    r = cli.run("bench", "s3://s3flash-no-such-bucket-bench/x", "--size", "1K", "--count", "1")
    assert r.rc == 1, r
    assert "NoSuchBucket" in r.err, r.err
    assert "phase" not in r.text


@pytest.mark.parametrize("args,message", [
    (["--size", "0"], "--size"),
    (["--size", "12X"], "--size"),
    (["--size", "-1M"], "--size"),
    (["--count", "0"], "--count"),
    (["--count", "three"], "--count"),
    (["--part-size", "1M"], "--part-size"),
    (["--part-size", "6G"], "--part-size"),
    (["--memory-limit", "8M"], "--memory-limit"),
    (["--concurrency", "0"], "--concurrency"),
    (["--io-threads", "x"], "--io-threads"),
    (["--checksum", "md5"], "--checksum"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--size"], "needs a value"),
], ids=lambda v: v if isinstance(v, str) else "_".join(v))
def test_bench_bad_arguments(cli_nosrv, args, message):
    r = cli_nosrv.run("bench", "s3://bucket/prefix", *args)
    assert r.rc == 2, r
    assert message in r.err, r.err
    assert r.out == b""


@pytest.mark.parametrize("target", [[], ["/tmp/not-s3"], ["s3://"], ["s3://b/x", "s3://c/y"]],
                         ids=["none", "local", "empty", "two"])
def test_bench_bad_target(cli_nosrv, target):
    r = cli_nosrv.run("bench", *target, "--size", "1K")
    assert r.rc == 2, r
    assert r.err.startswith("s3flash: "), r.err
    assert r.out == b""
