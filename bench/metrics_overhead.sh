#!/usr/bin/env bash
# The metrics' cost (issue 31): `s3flash bench` built with the metrics on (the default) and
# with them compiled out (-Dmetrics=false), alternated run by run against one s3flash-sink,
# side by side in one run; prints the medians of GB/s and CPU s/GB and their ratios.
#   bash bench/metrics_overhead.sh [REPS=6] [SIZE=512M] [COUNT=4]
# Builds two release trees under ${S3FLASH_OVERHEAD_DIR:-/var/tmp/s3flash-overhead}.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-6}; size=${2:-512M}; count=${3:-4}
dir=${S3FLASH_OVERHEAD_DIR:-/var/tmp/s3flash-overhead}
mkdir -p "$dir"
for v in on off; do
    m=true; [ $v = off ] && m=false
    if [ ! -f "$dir/$v/build.ninja" ]; then
        meson setup "$dir/$v" "$src" -Dtests=false -Dtest_hooks=disabled -Dpython=disabled \
            -Dmount=disabled -Dbench=true -Dbuildtype=release -Dmetrics=$m >/dev/null
    fi
    ninja -C "$dir/$v" >/dev/null
done
exec 3< <("$dir/on/bench/s3flash-sink" --threads 2 --print-port)
sink=$!
read -r _ port <&3   # "port N": the sink listens (asked, not polled for)
trap 'kill $sink 2>/dev/null || true' EXIT
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
out="$dir/runs"; rm -rf "$out"; mkdir -p "$out"
for r in $(seq "$reps"); do
    for v in on off; do
        "$dir/$v/src/cli/s3flash" --endpoint-url "http://127.0.0.1:$port" --force-path-style \
            bench "s3://overhead/$v" --size "$size" --count "$count" --json > "$out/$v-$r.json"
    done
done
python3 - "$out" <<'PY'
import glob, json, os, statistics as st, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    v = os.path.basename(f).split("-")[0]
    for r in json.load(open(f))["records"]:
        rows.setdefault((r["metric"], v), []).append(r)
print("| phase | metrics on GB/s | compiled out GB/s | ratio | on CPU s/GB | out CPU s/GB | ratio | runs |")
print("|---|---|---|---|---|---|---|---|")
for m in sorted({k[0] for k in rows}):
    a, b = rows[(m, "on")], rows[(m, "off")]
    ga, gb = st.median(x["value"] for x in a), st.median(x["value"] for x in b)
    ca = st.median(x["cpu_s_per_gb"] for x in a)
    cb = st.median(x["cpu_s_per_gb"] for x in b)
    print(f"| {m} | {ga:.2f} | {gb:.2f} | {ga / gb:.3f} | {ca:.3f} | {cb:.3f} | {ca / cb:.3f} "
          f"| {len(a)}/{len(b)} |")
PY
