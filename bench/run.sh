#!/usr/bin/env bash
# The side-by-side benchmark: s3flash next to s3torchconnector, awscrt's S3Client, boto3 and
# local disk (bench/compare.py; see bench/README.md and docs/PERFORMANCE.md).
#
#   bash bench/run.sh [--quick] [--s3-like] [--rgw] [compare.py options...]
#
#   --quick   small sizes, 1 repetition (a smoke run, a few minutes)
#   --s3-like the sinks behave like S3 (per-connection bandwidth, first-byte latency,
#             per-prefix request rates; the link capped at --link, default 1G): throughput
#             also as a fraction of the link, a disk capped by cgroup io.max, and the
#             connections in flight during one large save (bench/README.md)
#   --rgw     also against Ceph RGW: the S3FLASH_TEST_* environment when set (e.g.
#             `source /tmp/rgwenv.sh`), else one started here with tests/servers/rgw.sh
#             (stopped at exit)
#   --help    this text and compare.py's options, e.g. --scenarios load,dcp (just those),
#             --sizes 256M,1G, --repeat N, --store-max BYTES (the store-mode sink that the
#             load, dcp and dataset scenarios also run against; 0: none)
# Environment: S3FLASH_BENCH_SKIP_INSTALL=1 skips the pip installs; BUILD_DIR (build-cmp).
#
# It installs the peers from PyPI with torch held at 2.13.0 (an unpinned torch would pull a
# multi-GB CUDA build), installs the s3flash package from this tree, builds the sink in its own
# build directory, and runs bench/compare.py, which writes bench/results/compare-<date>.md/.png.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-cmp}
PY=${PYTHON:-python3}

want_rgw=0
for arg in "$@"; do
    [[ $arg == --rgw ]] && want_rgw=1
    if [[ $arg == --help || $arg == -h ]]; then
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exec "$PY" bench/compare.py --help
    fi
done

if [[ ${S3FLASH_BENCH_SKIP_INSTALL:-0} != 1 ]]; then
    constraint=$(mktemp /tmp/torch-constraint.XXXXXX.txt)
    echo "torch==2.13.0" > "$constraint"
    echo "[run.sh] pip install s3torchconnector awscrt boto3 matplotlib lightning (torch==2.13.0)" >&2
    "$PY" -m pip install -q -c "$constraint" 'torch==2.13.0' 's3torchconnector[dcp,lightning]' awscrt boto3 \
        matplotlib lightning numpy meson-python meson ninja
    echo "[run.sh] pip install the s3flash package from $ROOT" >&2
    "$PY" -m pip install -q --no-build-isolation -c "$constraint" "$ROOT"
    rm -f "$constraint"
fi

command -v iperf3 >/dev/null || { apt-get install -y iperf3 >/dev/null 2>&1 || \
    echo "[run.sh] iperf3 missing: no loopback row" >&2; }

if [[ ! -f $BUILD_DIR/build.ninja ]]; then
    meson setup "$BUILD_DIR" -Dpython=disabled -Dtests=false >/dev/null
fi
ninja -C "$BUILD_DIR" -j2 bench/s3flash-sink >/dev/null

rgw_dir=""
if [[ $want_rgw == 1 && -z ${S3FLASH_TEST_ENDPOINT:-} ]]; then
    rgw_dir=$(mktemp -d /var/tmp/s3flash-compare-rgw.XXXXXX)
    echo "[run.sh] starting RGW in $rgw_dir" >&2
    eval "$(bash tests/servers/rgw.sh start "$rgw_dir")"
    trap 'bash tests/servers/rgw.sh stop "$rgw_dir" >/dev/null 2>&1 || true' EXIT
fi

"$PY" bench/compare.py --sink "$BUILD_DIR/bench/s3flash-sink" "$@"
