#!/usr/bin/env bash
# The block cache's inserts on the reading thread with eviction running, this tree and
# another (e.g. main) side by side: builds bench/cache_bench.c against the other tree's
# src/cache (its libs3flash_internal.a), runs both on fresh directories under
# ${TMPDIR:-/tmp} and prints a table.
#   bench/cache_bench.sh OTHER_SOURCE_DIR OTHER_BUILD_DIR [N]
set -euo pipefail
cd "$(dirname "$0")/.."
other_src=$1 other_build=$2 n=${3:-4000}
here=${S3FLASH_BUILD_DIR:-build}
ninja -C "$here" bench/cache_bench >/dev/null
work=$(mktemp -d "${TMPDIR:-/tmp}/s3f-cache-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c17 -D_GNU_SOURCE -I"$other_src/src" -I"$other_src/include" bench/cache_bench.c \
    -o "$work/other_bench" "$other_build/libs3flash_internal.a" -lcurl -lcrypto -lexpat -lisal \
    -lm -pthread
run() { "$@" | sed 's/^/  /'; }
printf '%-12s %s\n' other "$(run "$work/other_bench" "$work/other" "$n")"
printf '%-12s %s\n' "this" "$(run "$here/bench/cache_bench" "$work/this" "$n")"
printf '%-12s %s\n' "this (wait)" "$(run "$here/bench/cache_bench" "$work/this-wait" "$n" wait)"
