#!/usr/bin/env bash
# The test command: installs what the tests need, builds (warnings as errors), runs the unit
# tests, starts a real Ceph RGW on loopback, runs the integration tests against it, installs
# the Python package with pip and runs its tests (tests/python/run.sh, torch==2.13.0; among
# them kubernetes-csi's csi-sanity against the CSI driver, built by tests/csi/build.sh), builds
# the wheel and tests it as a user meets it (scripts/wheel-test.sh: libraries bundled, installed
# into a clean Debian 12 root, the drop-in flow against the same RGW; the CSI driver's image
# root, scripts/csi-image.sh), then runs the C tests again under ASan+UBSan (LeakSanitizer on) with the allocation-failure torture
# (tests/torture) and the Python tests of the C paths with the extension built that way, then
# the unit tests, the engine's threaded C integration tests and a fast subset of the mount's
# tests under ThreadSanitizer, fuzzes
# every parser for a bounded time (tests/fuzz/run.sh), and stops the servers.
# The steps that wait on the network run their test files on several workers at once
# (pytest-xdist, one module and its bucket a worker); the clean root is made and the fuzzers
# run in the background beside them. The time of every step is printed at the end
# (docs/TESTING.md has the table).
#   tests/run.sh            everything (the gate that .ci/run calls)
#   tests/run.sh --quick    the edit loop: build, unit and integration tests, no sanitizers,
#                           no Python package, no wheel, no fuzzing
#   tests/run.sh --under-load
#                           the whole gate (or --quick's) beside a CPU hog that keeps every core
#                           busy (stress-ng --cpu N, N = nproc, from the start to the end): a test
#                           that fails only here is a defect in the test or the code
#   S3FLASH_TEST_JOBS=N     pytest workers of the network-bound steps (default 4; 0: serial)
#   tests/run.sh tsan-mount only the mount's tests under ThreadSanitizer (build-tsan), against
#                           the RGW of S3FLASH_TEST_* (source /var/tmp/rgw.env first)
#   S3FLASH_SKIP_ASAN=1     skip the ASan+UBSan pass
#   S3FLASH_SKIP_TSAN=1     skip the ThreadSanitizer pass
#   S3FLASH_SKIP_WHEEL=1    skip the wheel test (scripts/wheel-test.sh)
#   S3FLASH_SKIP_FUZZ=1     skip the fuzzing step (clang build of tests/fuzz: the regression
#                           inputs replayed, then every target fuzzed ~10 s, ~90 s in all)
#   S3FLASH_SKIP_INSTALL=1  do not run the dependency installer
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

quick=0
under_load=0
for a in "$@"; do
    case "$a" in
        --quick) quick=1 ;;
        --under-load) under_load=1 ;;
        tsan-mount) ;;   # below, once the builder is defined
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "tests/run.sh: unknown argument $a (--quick, --under-load, tsan-mount, --help)" >&2; exit 2 ;;
    esac
done
# the network-bound pytest steps run their files on this many workers (pytest-xdist,
# --dist loadfile: a module and its bucket stay on one worker)
jobs=${S3FLASH_TEST_JOBS:-4}
xdist=(-n "$jobs" --dist loadfile)
[ "$jobs" != 0 ] || xdist=()

# -- step timing: every step's wall time, printed at the end (and when a step fails) ---------
t_start=$(date +%s)
steps=()
step_report() {
    local rc=$?
    [ ${#steps[@]} -gt 0 ] || return 0
    echo
    echo "step times (tests/run.sh$([ $quick = 1 ] && echo ' --quick')$([ $under_load = 1 ] && echo ' --under-load'), ${jobs} workers):"
    printf '  %-34s %8s  %s\n' step seconds result
    local s
    for s in "${steps[@]}"; do printf '  %-34s %8s  %s\n' $s; done
    printf '  %-34s %8s\n' total "$(( $(date +%s) - t_start ))"
    return $rc
}
# step NAME CMD...: runs CMD in the foreground, records its time and result; a failure ends the
# run (after the table)
step() {
    local name=$1 t0 rc=0
    shift
    t0=$(date +%s)
    echo "=== $name" >&2
    "$@" || rc=$?
    if [ $rc = 0 ]; then steps+=("$name $(( $(date +%s) - t0 )) ok")
    else steps+=("$name $(( $(date +%s) - t0 )) FAILED($rc)"); exit $rc; fi
}
# bg_start NAME CMD...: runs CMD in the background (output to a log); bg_wait NAME waits for it
# and records it as a step (its time is its own wall time, overlapped with the foreground)
declare -A bg_pid bg_t0 bg_log
bg_start() {
    local name=$1
    shift
    bg_log[$name]=$(mktemp /tmp/s3flash-step-$name.XXXXXX)
    bg_t0[$name]=$(date +%s)
    echo "=== $name (background, log ${bg_log[$name]})" >&2
    "$@" >"${bg_log[$name]}" 2>&1 &
    bg_pid[$name]=$!
}
bg_wait() {
    local name=$1 rc=0
    wait "${bg_pid[$name]}" || rc=$?
    local d=$(( $(date +%s) - ${bg_t0[$name]} ))
    if [ $rc = 0 ]; then steps+=("$name(bg) $d ok"); tail -n 3 "${bg_log[$name]}" >&2
    else
        cat "${bg_log[$name]}" >&2
        steps+=("$name(bg) $d FAILED($rc)")
        exit $rc
    fi
    rm -f "${bg_log[$name]}"
}

if [ "${S3FLASH_SKIP_INSTALL:-0}" != 1 ]; then
    step install-deps bash tests/servers/install-deps.sh
fi

build() { # build DIR [meson args...]
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" -Dwerror=true -Dtest_hooks=enabled -Dasserts=enabled "$@"
    fi
    ninja -C "$dir" -j2
}

# s3flash mount under ThreadSanitizer (needs build-tsan): the daemon's threads (FUSE workers,
# the engine's I/O threads, uploads at close) through a chosen fast subset of the mount's
# tests; halt_on_error=0 so a report does not kill a mount mid-test, and every report lands in
# a file under a fresh directory, which must stay empty
tsan_mount() {
    local logs rc=0
    logs=$(mktemp -d /tmp/s3flash-tsan-mount.XXXXXX)
    local sel="round_trip or rename_needs or mkdir_is_local or readdir_streams or"
    sel="$sel replaced_mid_read or sigterm or fusermount_u or close_on_another"
    TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$logs/tsan" \
        S3FLASH_BUILD_DIR="$root/build-tsan" S3FLASH_CONCURRENT_SEEDS=1 python3 -m pytest -q \
        -p no:cacheprovider tests/integration/test_mount.py -k "$sel" || rc=1
    TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$logs/tsan" \
        S3FLASH_BUILD_DIR="$root/build-tsan" S3FLASH_CONCURRENT_SEEDS=1 python3 -m pytest -q \
        -p no:cacheprovider tests/integration/test_mount_deadlock.py \
        tests/integration/test_mount_concurrent.py \
        tests/integration/test_mount_resources.py \
        tests/integration/test_mount_cache_xz.py || rc=1
    if compgen -G "$logs/tsan*" >/dev/null; then
        echo "ThreadSanitizer reports of s3flash mount:" >&2
        cat "$logs"/tsan* >&2
        return 1
    fi
    rm -rf "$logs"
    return $rc
}
if [ "${1:-}" = tsan-mount ]; then
    : "${S3FLASH_TEST_ENDPOINT:?source /var/tmp/rgw.env (the RGW to test against) first}"
    build build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug -Dpython=disabled
    tsan_mount
    echo "the mount's ThreadSanitizer step passed"
    exit 0
fi

# RGW needs a real disk for bluestore (direct I/O), not tmpfs.
rgw_dir=$(mktemp -d /var/tmp/s3flash-rgw.XXXXXX)
rmdir "$rgw_dir"
hog_pid=
cleanup() {
    local rc=$?
    for p in "${bg_pid[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "$hog_pid" ]; then
        echo "load average at the end (beside the CPU hog): $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        kill -- -"$hog_pid" 2>/dev/null || true
    fi
    bash tests/servers/rgw.sh stop "$rgw_dir" >/dev/null 2>&1 || true
    step_report || true
    exit $rc
}
trap cleanup EXIT

if [ $under_load = 1 ]; then
    # the CPU hog: one busy worker per core for the whole run, nice 0, as the other work a
    # shared machine runs beside it. It lives in a process group of its own (the cleanup
    # kills the group), whose leader also ends it once this script is gone however it ended
    # (a kill, an interrupt that reached no trap): no hog outlives the run
    command -v stress-ng >/dev/null || { echo "tests/run.sh --under-load needs stress-ng (tests/servers/install-deps.sh installs it)" >&2; exit 1; }
    setsid bash -c 'stress-ng --cpu "$1" --cpu-method all --quiet &
        while kill -0 "$2" 2>/dev/null; do sleep 1; done
        kill -- -$$' hog "$(nproc)" "$$" >/dev/null 2>&1 &
    hog_pid=$!
    echo "=== under load: stress-ng --cpu $(nproc) (pid $hog_pid)" >&2
fi

wheel=0
if [ $quick = 0 ] && [ "${S3FLASH_SKIP_WHEEL:-0}" != 1 ]; then
    wheel=1
    # the clean Debian 12 root the wheel is tested in (debootstrap: network and disk, cached
    # under /var/tmp/s3flash-wheel): made while the tests run
    bg_start wheel-root bash scripts/wheel-test.sh root
fi

step build build build
# kubernetes-csi's csi-sanity (tests/csi/build.sh: Go, offline, from the vendored source kept
# in tests/csi/; reused while that source is unchanged), built beside the unit and
# integration steps (30-75 s of two cores' time) for the Python step
if [ $quick = 0 ]; then
    bg_start csi-sanity-build bash tests/csi/build.sh "$root/build/csi-sanity"
fi
step unit meson test -C build --suite unit --print-errorlogs

start_rgw() { rgw_env=$(bash tests/servers/rgw.sh start "$rgw_dir"); }
step rgw-start start_rgw
eval "$rgw_env"
export S3FLASH_TEST_ENDPOINT S3FLASH_TEST_ACCESS_KEY S3FLASH_TEST_SECRET_KEY \
    S3FLASH_TEST_OTHER_ACCESS_KEY S3FLASH_TEST_OTHER_SECRET_KEY S3FLASH_TEST_REGION

export S3FLASH_BUILD_DIR="$root/build"
# s3flash mount's tests (test_mount.py) need /dev/fuse: load the module and make the node
# where a container left it out (they are skipped, saying why, when FUSE is unavailable)
if [ ! -e /dev/fuse ]; then
    modprobe fuse 2>/dev/null || true
    mknod -m 666 /dev/fuse c 10 229 2>/dev/null || true
fi
# (test_netns.py: hosts as network namespaces; test_multirank.py runs after the Python step,
# which installs torch)
# integration NAME: the integration tests on several workers, then those that measure rates
# on the wire (conftest.py's SERIAL_MODULES) alone
integration() {
    local name=$1
    step "$name" python3 -m pytest -q -p no:cacheprovider "${xdist[@]}" -m "not serial" \
        --ignore=tests/integration/test_multirank.py tests/integration
    step "$name-serial" python3 -m pytest -q -p no:cacheprovider -m serial \
        --ignore=tests/integration/test_multirank.py tests/integration
}
integration integration

if [ $quick = 1 ]; then
    echo "all tests passed (--quick: unit and integration only)"
    exit 0
fi

# kubernetes-csi's csi-sanity, built in the background since the build step (above): the
# Python step runs it against the CSI driver (tests/python/test_csi_sanity.py)
if [ "${bg_pid[csi-sanity-build]:-}" ]; then
    bg_wait csi-sanity-build
    export S3FLASH_CSI_SANITY="$root/build/csi-sanity/csi-sanity"
fi
# the Python package: pip-installed (meson-python), tested against the same RGW, the CSI
# driver's csi-sanity among its tests
step python bash tests/python/run.sh "${xdist[@]}"
# many ranks on several hosts: torchrun (gloo) on two compute namespaces, 4 ranks saving and
# loading through s3flash.dcp to an RGW of its own on a store namespace (docs/TESTING.md)
step multirank python3 -m pytest -q -p no:cacheprovider tests/integration/test_multirank.py

fuzz=0
if [ "${S3FLASH_SKIP_FUZZ:-0}" != 1 ]; then
    # every crash found so far is replayed, then each target fuzzed; any crash, sanitizer
    # report (UBSan halts) or leak fails the step. CPU-bound on one core: it runs beside the
    # wheel test and the sanitizer passes, which mostly wait on RGW
    fuzz=1
    bg_start fuzz bash tests/fuzz/run.sh all "${S3FLASH_FUZZ_SECONDS:-10}"
fi

# the wheel: bundled libraries, abi3 under each Python here, then the clean Debian 12 root
# (debootstrap, cached under /var/tmp/s3flash-wheel) with nothing but python3 and the wheel
if [ $wheel = 1 ]; then
    bg_wait wheel-root
    step wheel bash scripts/wheel-test.sh wheel check test
    # the CSI driver's image root: that wheel with grpcio in a copy of the same Debian root,
    # s3flash-csi node + mounter publishing a bucket there (scripts/csi-image.sh)
    step csi-image bash scripts/csi-image.sh root test
fi

if [ "${S3FLASH_SKIP_ASAN:-0}" != 1 ]; then
    step asan-build build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    step asan-unit meson test -C build-asan --suite unit --print-errorlogs
    # every integration test again, the CLI, the C test programs and the mount daemons built
    # with ASan+UBSan
    S3FLASH_BUILD_DIR="$root/build-asan" integration asan-integration
    # the Python extension under ASan+UBSan: the ASan runtime preloaded into an ordinary
    # python3 (leak checks off: the interpreter keeps its memory at exit), the Python tests
    # that drive the C paths (reader, writer, files, errors, round trips, fork)
    PYTHONPATH=$(bash tests/python/devenv.sh build-asan) \
        LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
        step asan-python python3 -m pytest -q -p no:cacheprovider --rootdir tests/python \
        "${xdist[@]}" tests/python/test_io.py \
        tests/python/test_files.py tests/python/test_errors.py tests/python/test_roundtrip.py \
        tests/python/test_fork.py tests/python/test_lazy_load.py tests/python/test_safetensors.py
    # allocation-failure torture of whole operations against the sink (docs/TESTING.md)
    step asan-torture meson test -C build-asan --suite torture --print-errorlogs
fi
# ThreadSanitizer: the library's threads (I/O threads, transfers, the janitor, the credential
# refresher) under the unit tests and the engine's C integration programs against RGW
if [ "${S3FLASH_SKIP_TSAN:-0}" != 1 ]; then
    step tsan-build build build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug \
        -Dpython=disabled
    export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
    step tsan-unit meson test -C build-tsan --suite unit --print-errorlogs
    S3FLASH_BUILD_DIR="$root/build-tsan" step tsan-integration \
        python3 -m pytest -q -p no:cacheprovider "${xdist[@]}" \
        tests/integration/test_xfer.py tests/integration/test_transport.py \
        tests/integration/test_janitor_deadline.py tests/integration/test_progress_blocking.py \
        tests/integration/test_lost_responses.py tests/integration/test_credentials_refresh.py \
        --deselect tests/integration/test_credentials_refresh.py::test_slow_process_expiring_during_upload
    # the mount's daemon under ThreadSanitizer: a fast subset of the mount tests (~1-2 min)
    # with every report written to a file (a daemon in the background has no stderr); any
    # report fails the step
    step tsan-mount tsan_mount
fi
if [ $fuzz = 1 ]; then
    bg_wait fuzz
fi
echo "all tests passed"
