#!/usr/bin/env bash
# For development without `pip install`: stage the package from the source tree and a Meson
# build directory, and print the PYTHONPATH that imports it.
#   export PYTHONPATH=$(bash tests/python/devenv.sh build)   # after ninja -C build
# The stage is BUILD/pystage/s3flash: symlinks to python/s3flash/* (edits show at once) and
# to the built extension (rebuild with ninja). Several build directories can have their own.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
ext=$(ls "$build"/src/python/_s3flash*.so 2>/dev/null | head -n1)
[ -n "$ext" ] || { echo "no extension in $build/src/python (meson -Dpython=enabled, ninja)" >&2; exit 1; }
stage="$build/pystage/s3flash"
rm -rf "$stage"
mkdir -p "$stage"
for f in python/s3flash/*; do
    ln -s "$(pwd)/$f" "$stage/$(basename "$f")"
done
ln -s "$(pwd)/$ext" "$stage/$(basename "$ext")"
echo "$(pwd)/$build/pystage"
