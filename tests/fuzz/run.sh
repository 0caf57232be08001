#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan+UBSan) and fuzz them.
#   tests/fuzz/run.sh TARGET SECONDS [libFuzzer args...]   one target (e.g. xml 300)
#   tests/fuzz/run.sh all SECONDS_EACH [libFuzzer args...] every target, one after another
#   tests/fuzz/run.sh replay                                the regression inputs and seed
#                                                           corpora only (no fuzzing)
# Each target first replays its inputs under tests/fuzz/regressions/TARGET (every crash
# found so far), then fuzzes from tests/fuzz/corpus/TARGET (read only: new inputs go to a
# work folder) with its dictionary from tests/fuzz/dict when there is one. Any crash,
# sanitizer report (UBSan halts), leak, time-out (10 s per input) or FUZZ_CHECK failure
# fails the run with exit 1; the input is left in the work folder (printed) to be copied to
# tests/fuzz/regressions/TARGET once fixed. A summary line per target gives the executions.
# Environment:
#   S3FLASH_FUZZ_BUILD_DIR  build folder (default build-fuzz at the repository root)
#   S3FLASH_FUZZ_WORK       work folder for new corpus inputs and crashes (default: a
#                           temporary folder, removed when the run passes)
#   CC                      the compiler for a new build folder (default clang)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
targets=(xml json sts profile uri endpoint time headers sigv4 cache response safetensors mount_listing)

usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 ]] || usage
what=$1
shift
secs=0
if [[ $what != replay ]]; then
    [[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || usage
    secs=$1
    shift
fi
if [[ $what == all || $what == replay ]]; then
    run_targets=("${targets[@]}")
else
    [[ " ${targets[*]} " == *" $what "* ]] || { echo "unknown target '$what' (${targets[*]})" >&2; exit 2; }
    run_targets=("$what")
fi

bdir=${S3FLASH_FUZZ_BUILD_DIR:-$root/build-fuzz}
if [[ ! -f $bdir/build.ninja ]]; then
    if ! CC=${CC:-clang} meson setup "$bdir" -Dfuzz=enabled -Db_sanitize=address,undefined \
        -Db_lundef=false -Dtests=false -Dtest_hooks=disabled -Dcli=false -Dbench=false \
        -Dpython=disabled -Dwerror=true >"${TMPDIR:-/tmp}/s3flash-fuzz-setup.log" 2>&1; then
        cat "${TMPDIR:-/tmp}/s3flash-fuzz-setup.log" >&2
        exit 1
    fi
fi
if ! out=$(ninja -C "$bdir" -j2 2>&1); then
    printf '%s\n' "$out" >&2
    exit 1
fi

work=${S3FLASH_FUZZ_WORK:-}
own_work=0
if [[ -z $work ]]; then
    work=$(mktemp -d /tmp/s3flash-fuzz.XXXXXX)
    own_work=1
fi
mkdir -p "$work"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=()
for t in "${run_targets[@]}"; do
    exe=$bdir/tests/fuzz/fuzz_$t
    log=$work/$t.log
    # 1. every regression input (a crash found before) and every seed, once
    inputs=()
    for d in tests/fuzz/regressions/$t tests/fuzz/corpus/$t; do
        [[ -d $d ]] && while IFS= read -r -d '' f; do inputs+=("$f"); done \
            < <(find "$d" -type f -print0 | sort -z)
    done
    if ((${#inputs[@]})) && ! "$exe" -error_exitcode=77 -timeout=10 "${inputs[@]}" >"$log" 2>&1; then
        echo "fuzz $t: FAILED replaying the regression/seed inputs (log $log):" >&2
        grep -E "ERROR|runtime error|fuzz check failed|Running:" "$log" | tail -5 >&2 || true
        failed+=("$t")
        continue
    fi
    [[ $what == replay ]] && { echo "fuzz $t: replayed ${#inputs[@]} inputs"; continue; }
    # 2. fuzz for `secs` seconds
    mkdir -p "$work/$t-corpus" "$work/$t-crashes"
    dict=()
    [[ -f tests/fuzz/dict/$t.dict ]] && dict=(-dict="tests/fuzz/dict/$t.dict")
    if "$exe" -max_total_time="$secs" -error_exitcode=77 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/$t-crashes/" "${dict[@]}" "$@" \
        "$work/$t-corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
        echo "fuzz $t: ${execs:-?} executions in ${secs}s, ${cov:-?} coverage points, no crash"
    else
        echo "fuzz $t: FAILED (log $log); crashing input(s):" >&2
        ls "$work/$t-crashes/" >&2 || true
        grep -E "ERROR|runtime error|fuzz check failed|SUMMARY" "$log" | head -5 >&2 || true
        failed+=("$t")
    fi
done
if ((${#failed[@]})); then
    echo "fuzz: FAILED: ${failed[*]} (work folder $work kept)" >&2
    exit 1
fi
((own_work)) && rm -rf "$work"
exit 0
