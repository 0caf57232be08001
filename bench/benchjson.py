"""The benchmarks' results as JSON records, for bench/plot.py (issue 31, item 5).

One document per run (schema "s3flash-bench/1"):

    {"schema": "s3flash-bench/1", "benchmark": "small objects", "date": "2026-12-06T12:00:00Z",
     "machine": {"host": ..., "cpus": 2, "cpu": "...", "kernel": ..., "arch": ...},
     "source": "python3 bench/small_objects.py ..." (or the Markdown file the numbers came from),
     "note": "loaded 2-core VM: not a measurement" (optional),
     "records": [{"benchmark": ..., "variant": "s3torchconnector", "metric": "samples/s map",
                  "params": {"connections": 8, "object_size": 65536, "memory": ..., ...},
                  "value": 1234.5, "unit": "samples/s", "min": ..., "max": ..., ...}]}

A record is one number of one table row: `variant` is the client, peer or tool (the row's
first column), `metric` what was measured (the phase or the column), `params` the settings it
was measured at (byte sizes in bytes); any other field is kept as it is. `s3flash bench --json`
(src/cli/cmd_bench.c) prints the same schema. `load()` also reads compare.py's older files
({"rows": [...], "argv": [...]}), converting their rows.
"""

import datetime
import json
import math
import os
import platform
import re
import sys

SCHEMA = "s3flash-bench/1"
RECORD_KEYS = ("benchmark", "variant", "metric", "value", "unit")


class BenchJSONError(ValueError):
    """A results file that is not JSON or not in the schema; the message names the file."""


def machine():
    """The machine the numbers are measured on."""
    m = {"host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
         "arch": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    m["cpu"] = ln.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            m["mem_gib"] = round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return m


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(benchmark, variant, metric, value, unit, params=None, **extra):
    """One number. value None (or NaN) where the row has none (a failed peer: say why in
    extra["error"])."""
    if isinstance(value, float) and math.isnan(value):
        value = None
    r = {"benchmark": benchmark, "variant": variant, "metric": metric, "value": value,
         "unit": unit, "params": dict(params or {})}
    r.update({k: v for k, v in extra.items() if v is not None})
    return r


def document(benchmark, records, source=None, note=None, date=None, mach=None):
    doc = {"schema": SCHEMA, "benchmark": benchmark, "date": date or now(),
           "machine": mach or machine(),
           "source": source or " ".join(["python3"] + sys.argv), "records": list(records)}
    if note:
        doc["note"] = note
    return doc


def write(path, doc):
    """Write a document (atomically: a reader never sees half of it)."""
    doc = check(clean(doc), path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def add_argument(parser):
    """--json PATH, the same option in every script."""
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the table's rows as JSON records (bench/benchjson.py's "
                             "schema, read by bench/plot.py)")


def check(doc, path="<document>"):
    """Raise BenchJSONError naming `path` and what is wrong, else return doc."""
    if not isinstance(doc, dict):
        raise BenchJSONError(f"{path}: not a JSON object but {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        raise BenchJSONError(f"{path}: schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    recs = doc.get("records")
    if not isinstance(recs, list):
        raise BenchJSONError(f"{path}: no list under \"records\"")
    for i, r in enumerate(recs):
        if not isinstance(r, dict):
            raise BenchJSONError(f"{path}: record {i} is not an object")
        missing = [k for k in RECORD_KEYS if k not in r]
        if missing:
            raise BenchJSONError(f"{path}: record {i} has no {', '.join(missing)}: {r}")
        v = r["value"]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise BenchJSONError(f"{path}: record {i}: value {v!r} is not a number")
        if not isinstance(r.get("params", {}), dict):
            raise BenchJSONError(f"{path}: record {i}: params is not an object")
    return doc


def load(path):
    """A results file as a checked document; compare.py's older {"rows": ...} files are
    converted. BenchJSONError (naming the file) when it is not JSON or not in the schema."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise BenchJSONError(f"{path}: not JSON: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BenchJSONError(f"{path}: cannot read: {e}") from None
    if isinstance(doc, dict) and "schema" not in doc and "rows" in doc:
        doc = document("compare", from_compare(doc["rows"]), date=_date_of(path),
                       source=f"{os.path.basename(path)} (bench/compare.py "
                              f"{' '.join(doc.get('argv') or [])})".replace(" )", ")"),
                       mach={"host": "2-core development VM (Xeon, Debian 12)", "cpus": 2})
    return check(doc, path)


def _date_of(path):
    """compare-20261203-043619.json -> 2026-12-03T04:36:19Z (compare.py's file names)."""
    base = os.path.basename(path)
    digits = "".join(c for c in base if c.isdigit())
    if len(digits) >= 14:
        d = digits[:14]
        return f"{d[:4]}-{d[4:6]}-{d[6:8]}T{d[8:10]}:{d[10:12]}:{d[12:14]}Z"
    return None


def parse_size(s):
    """'256M' -> 268435456 (binary suffixes, as the scripts' --sizes); None for '-'."""
    if s in (None, "", "-"):
        return None
    if isinstance(s, (int, float)):
        return int(s)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = s.strip().upper().rstrip("B").rstrip("I")
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(float(s))


def from_compare(rows):
    """compare.py's rows (one per client, scenario, size, server) as records: GB/s, median
    with min and max, and the row's CPU seconds, peak RSS and error."""
    out = []
    for r in rows:
        gbs = r.get("gbs") or [None, None, None]
        params = {"server": r.get("endpoint")}
        size = r.get("size")
        m = re.fullmatch(r"(\d+) x (\d+) ([KMGT])iB", str(size))
        if m:  # raw: "1000 x 256 KiB"
            params["objects"] = int(m[1])
            params["object_size"] = parse_size(m[2] + m[3])
        else:
            try:
                params["object_size"] = parse_size(size)
            except ValueError:
                params["size"] = size
        if r.get("settings"):
            params["settings"] = r["settings"]
        med = gbs[0] if not r.get("error") and not r.get("skip") else None
        phase = r.get("phase")
        out.append(record(f"compare {r.get('scenario')}", r.get("client"),
                          r.get("scenario") if phase in (None, "", "main") else phase, med,
                          "GB/s", params,
                          min=_num(gbs[1]) if med is not None else None,
                          max=_num(gbs[2]) if med is not None else None,
                          cpu_s=_num(r.get("cpu")), peak_rss_bytes=_num(r.get("rss")),
                          items=r.get("items"), n=r.get("n"),
                          error=r.get("error") or r.get("skip")))
    return out


def clean(v):
    """v with NaN and infinities as None (JSON has neither) and other odd values as str."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


def _num(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
        return v
    return None


# -- the scripts' Markdown tables as records ----------------------------------------------------
# Every benchmark prints Markdown tables; one parser turns a printed table (or one stored in
# bench/results/*.md or docs/PERFORMANCE.md) into records, so that a script's --json holds the
# same rows as its table and the stored tables can be converted the same way.

_NUM = re.compile(r"^\s*`?(-?[\d,]*\.?\d+)\s*(%|[A-Za-z][A-Za-z/.-]*(?:/s)?)?")
_UNIT_IN_HEAD = re.compile(r"\(([^()]*)\)\s*$")
_UNITLIKE = re.compile(r"^(s|ms|seconds|%|[KMGT]i?B|[KMGT]i?B/s|[a-z]+/s)$")


def _unit_of(text):
    """The unit a header or title names in its last brackets: '(s)', '(samples/s)', '(2
    saves ...; seconds)'; '' when none."""
    m = _UNIT_IN_HEAD.search(text)
    u = m[1].split(";")[-1].strip() if m else ""
    if not _UNITLIKE.match(u):  # else the last word before any brackets: 'peak RSS MiB (+ ...)'
        words = re.sub(r"\(.*", "", text).replace(",", " ").split()
        u = next((w for w in reversed(words) if _UNITLIKE.match(w)), "")
        if not u:
            return ""
    return "s" if u == "seconds" else u


def md_tables(text):
    """[(title, header, rows)] of the Markdown tables in text; the title is the nearest line
    above the table that is not part of one (a heading, a bold line or a sentence)."""
    out, title, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i].strip()
        if ln.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$",
                                                                   lines[i + 1].strip()):
            header = _cells(ln)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i].strip()))
                i += 1
            out.append((title, header, rows))
            continue
        if ln:
            title = ln.strip("#* ").rstrip(":")
        i += 1
    return out


def _cells(ln):
    return [c.strip() for c in ln.strip().strip("|").split("|")]


def parse_cell(cell, head=""):
    """'295 MiB/s' -> (295.0, 'MiB/s'); '0.45 s, 10 req' -> (0.45, 's'); '1,116 reads/s' ->
    (1116.0, 'reads/s'); a bare number takes the unit in the header's brackets ('(s)');
    None for an empty or non-numeric cell."""
    m = _NUM.match(cell.replace("**", ""))
    if not m:
        return None
    unit = m[2] or ""
    if unit in ("x",):
        return None  # a ratio column
    if not unit:
        unit = _unit_of(head)
    return float(m[1].replace(",", "")), unit


def title_params(title):
    """What a table's title says about its settings: object size, first byte, state size."""
    p = {"table": title}
    m = re.search(r"(\d+(?:\.\d+)?) ([KMGT])iB (objects|files|state)|state (\d+) ([KMGT])iB",
                  title)
    if m:
        p["object_size"] = parse_size((m[1] or m[4]) + (m[2] or m[5]))
    m = re.search(r"(\d+) ms first byte", title)
    if m:
        p["first_byte_ms"] = int(m[1])
    return p


# columns that say what a row was measured at, not what it measured: kept as params
PARAM_HEADERS = ("shards", "server", "runs", "objects", "ranks", "store", "repetitions")


def from_markdown(text, benchmark, layout="rows", variant_col=0, row_col=None,
                  value_cols=None, params=None, unit_from_title=False, tables=None):
    """Records of the Markdown tables in text.

    layout "rows": a row per variant (variant_col); each numeric cell of value_cols (default:
    every other column) is a record whose metric is the column's header, or the row_col
    label when given. layout "columns": a column per variant (value_cols, default every column
    after the first whose header has no '/' or 'x': ratio columns are left out), a row per
    metric (the first column). Columns named in PARAM_HEADERS (server, shards, ...) go into
    each record's params. `tables`: only tables whose title contains one of these."""
    recs = []
    for title, header, rows in md_tables(text):
        if tables and not any(t in title for t in tables):
            continue
        tp = dict(title_params(title), **(params or {}))
        tunit = _unit_of(title)
        for row in rows:
            if len(row) != len(header):
                continue
            if layout == "columns":
                cols = value_cols or [c for c in range(1, len(header))
                                      if "/" not in header[c] and not header[c].startswith("x")]
                for c in cols:
                    v = parse_cell(row[c], header[c])
                    if v:
                        recs.append(record(benchmark, header[c], row[0], v[0], v[1], tp,
                                           cell=row[c]))
                continue
            rp = dict(tp)
            for c, h in enumerate(header):
                if h in PARAM_HEADERS and row[c]:
                    v = parse_cell(row[c])
                    rp[h] = int(v[0]) if v and v[0].is_integer() and not v[1] else row[c]
            cols = value_cols or [c for c in range(len(header))
                                  if c not in (variant_col, row_col)
                                  and header[c] not in PARAM_HEADERS
                                  and not header[c].startswith(("x ", "× "))]
            for c in cols:
                v = parse_cell(row[c], header[c])
                if not v:
                    continue
                unit = v[1] or tunit if not (unit_from_title and tunit) else tunit
                metric = row[row_col] if row_col is not None else header[c]
                recs.append(record(benchmark, row[variant_col], metric, v[0], unit, rp,
                                   column=header[c]))
    return recs


class tee:
    """`with tee() as buf:` what is printed to stdout inside also goes into buf (a StringIO),
    for the scripts that print their tables as they go."""

    def __enter__(self):
        import io
        self.buf, self.out = io.StringIO(), sys.stdout
        buf, out = self.buf, self.out

        class _Tee:
            def write(self, s):
                buf.write(s)
                return out.write(s)

            def flush(self):
                out.flush()

            def __getattr__(self, name):
                return getattr(out, name)

        sys.stdout = _Tee()
        return self.buf

    def __exit__(self, *exc):
        sys.stdout = self.out
        return False


def write_markdown(path, text, benchmark, note=None, **how):
    """--json PATH of a script that prints Markdown: its tables as records (from_markdown's
    options in `how`)."""
    recs = from_markdown(text, benchmark, **how)
    return write(path, document(benchmark, recs, note=note))
