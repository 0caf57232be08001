#!/usr/bin/env bash
# Builds kubernetes-csi's csi-sanity (the CSI conformance suite) from the source kept here,
# offline: csi-test-v5.3.1.tar.gz is kubernetes-csi/csi-test at tag v5.3.1 with its vendor/
# folder (Apache-2.0, LICENSE beside it), built with Debian's golang-go (1.19) and no module
# proxy. Prints the binary's path. A binary already built from the same tarball is reused.
#   tests/csi/build.sh [OUT_DIR]     (default $S3FLASH_BUILD_DIR/csi-sanity, else build/csi-sanity)
# tests/python/test_csi_sanity.py runs it against the driver.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-${S3FLASH_BUILD_DIR:-$root/build}/csi-sanity}
tarball=$here/csi-test-v5.3.1.tar.gz
want=828af991a71078b390cf7855616b929458a9b9dc81c142da568a3d3e5ebf43d9
command -v go >/dev/null || { echo "tests/csi/build.sh: no go (apt-get install golang-go; tests/servers/install-deps.sh does)" >&2; exit 1; }
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$sum" = "$want" ] || { echo "tests/csi/build.sh: $tarball has sha256 $sum, not csi-test v5.3.1's $want" >&2; exit 1; }
mkdir -p "$out"
if [ -x "$out/csi-sanity" ] && [ "$(cat "$out/csi-sanity.sha256" 2>/dev/null)" = "$sum" ]; then
    echo "$out/csi-sanity"
    exit 0
fi
rm -rf "$out/src" "$out/csi-sanity" "$out/csi-sanity.sha256"
mkdir -p "$out/src"
tar -xzf "$tarball" -C "$out/src"
# vendor/ only, no network; the cache under OUT (not the user's); -trimpath: no host paths
(cd "$out/src/csi-test-v5.3.1" &&
    GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GOCACHE="$out/gocache" \
        GOPATH="$out/gopath" CGO_ENABLED=0 \
        go build -trimpath -o "$out/csi-sanity" ./cmd/csi-sanity >&2)
echo "$sum" > "$out/csi-sanity.sha256"
# the source and Go's caches (140 MB) are of no use once the binary is there
chmod -R u+w "$out/gocache" "$out/gopath" 2>/dev/null || true
rm -rf "$out/src" "$out/gocache" "$out/gopath"
echo "$out/csi-sanity"
