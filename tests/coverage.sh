#!/usr/bin/env bash
# Line and branch coverage of src/ by the unit and integration tests (gcovr, from Debian).
#   tests/coverage.sh            build build-cov with --coverage, run the tests, print the table
#   tests/coverage.sh --report   only print the table of the last run
# Uses the S3 server of the S3FLASH_TEST_* environment (tests/servers/rgw.sh env) when set,
# else starts a Ceph RGW itself (stopped at exit). The Python extension is left out
# (-Dpython=disabled): its C is covered through the C library it calls.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
command -v gcovr >/dev/null || {
    [ "$(id -u)" = 0 ] || { echo "gcovr missing (apt-get install gcovr)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcovr >&2
}
report() {
    # per file, then the totals; --exclude-unreachable-branches drops the compiler's own
    gcovr -r "$root" --object-directory "$root/build-cov" --filter "$root/src/" \
        --exclude-unreachable-branches --txt --print-summary
    gcovr -r "$root" --object-directory "$root/build-cov" --filter "$root/src/" \
        --exclude-unreachable-branches --branches --txt | tail -n +1
}
if [ "${1:-}" = --report ]; then
    report
    exit 0
fi
if [ ! -f build-cov/build.ninja ]; then
    meson setup build-cov -Db_coverage=true -Dtest_hooks=enabled -Dpython=disabled \
        -Dbuildtype=debug >/dev/null
fi
ninja -C build-cov -j2 >/dev/null
find build-cov -name '*.gcda' -delete
meson test -C build-cov --suite unit >/dev/null || echo "coverage: some unit tests failed" >&2
if [ -z "${S3FLASH_TEST_ENDPOINT:-}" ]; then
    rgw_dir=$(mktemp -d /var/tmp/s3flash-rgw.XXXXXX)
    rmdir "$rgw_dir"
    trap 'bash tests/servers/rgw.sh stop "$rgw_dir" >/dev/null 2>&1 || true' EXIT
    eval "$(bash tests/servers/rgw.sh start "$rgw_dir")"
    export S3FLASH_TEST_ENDPOINT S3FLASH_TEST_ACCESS_KEY S3FLASH_TEST_SECRET_KEY \
        S3FLASH_TEST_OTHER_ACCESS_KEY S3FLASH_TEST_OTHER_SECRET_KEY S3FLASH_TEST_REGION
fi
S3FLASH_BUILD_DIR="$root/build-cov" python3 -m pytest -q -p no:cacheprovider tests/integration \
    >/dev/null || echo "coverage: some integration tests failed" >&2
report
