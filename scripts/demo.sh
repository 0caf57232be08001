#!/usr/bin/env bash
# The main job: set everything up on a fresh Debian 12 machine (packages, build), start a
# local Ceph RGW, and do a CLI round trip through it: upload, list, stat, cat, presign,
# download, compare bit for bit, remove. Stops the server at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/servers/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build -j2
cli=build/src/cli/s3flash

rgw_dir=$(mktemp -d /var/tmp/s3flash-demo-rgw.XXXXXX)
rmdir "$rgw_dir"
work=$(mktemp -d)
trap 'bash tests/servers/rgw.sh stop "$rgw_dir" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
eval "$(bash tests/servers/rgw.sh start "$rgw_dir")"

export AWS_ACCESS_KEY_ID=$S3FLASH_TEST_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$S3FLASH_TEST_SECRET_KEY
export AWS_REGION=$S3FLASH_TEST_REGION
export AWS_ENDPOINT_URL=$S3FLASH_TEST_ENDPOINT
export S3FLASH_FORCE_PATH_STYLE=1

head -c 50000000 /dev/urandom >"$work/model.bin"
echo "hello from s3flash" >"$work/hello.txt"
set -x
$cli mb s3://demo
$cli cp "$work/model.bin" s3://demo/checkpoints/model.bin
$cli cp "$work/hello.txt" s3://demo/hello.txt
$cli ls s3://demo/
$cli ls --recursive s3://demo/
$cli stat s3://demo/checkpoints/model.bin
$cli cat s3://demo/hello.txt
url=$($cli presign --expires-in 300 s3://demo/hello.txt | tail -n 1)
curl -sf "$url"
$cli cp s3://demo/checkpoints/model.bin "$work/model.back"
cmp "$work/model.bin" "$work/model.back"
$cli cp s3://demo/checkpoints/model.bin s3://demo/checkpoints/model-copy.bin
$cli rm --recursive s3://demo/
$cli rb s3://demo
set +x
echo "round trip OK: 50 MB up and down, identical bytes"
