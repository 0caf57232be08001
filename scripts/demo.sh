#!/usr/bin/env bash
# The main job: set everything up on a fresh Debian 12 machine (packages, build, the Python
# package with torch 2.13.0 and Lightning 2.6.6), start a local Ceph RGW, and
#  1. a CLI round trip through it: upload, list, stat, cat, presign, download, compare bit for
#     bit, copy, remove;
#  2. examples/lightning_resume.py: a small model trained with Lightning, checkpointing to
#     s3:// every epoch through s3flash (S3LightningCheckpoint, ModelCheckpoint top-2 + last),
#     SIGKILLed in the middle of an epoch, resumed from last.ckpt in S3 and checked to carry on
#     from the right epoch and step, with the weights it had.
# Stops the server at the end.
#   S3FLASH_SKIP_INSTALL=1   use what is installed (no apt, no pip; s3flash importable)
#   S3FLASH_DEMO_BUILD=DIR   the Meson build directory of the CLI (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${S3FLASH_DEMO_BUILD:-build}
if [ "${S3FLASH_SKIP_INSTALL:-0}" != 1 ]; then
    bash tests/servers/install-deps.sh
    pip=(python3 -m pip install -q --no-input --disable-pip-version-check)
    # Debian's python3 is "externally managed" (PEP 668)
    if python3 -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
        pip+=(--break-system-packages)
    fi
    # as tests/python/run.sh: torch pinned (an unpinned torch pulls a multi-GB CUDA build) and
    # held there while the rest resolves
    "${pip[@]}" "torch==2.13.0" meson-python meson ninja
    "${pip[@]}" "torch==2.13.0" "lightning==2.6.6" fsspec pandas
    "${pip[@]}" --no-build-isolation .      # libs3flash + the s3flash package (meson-python)
fi
[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build" -j2
cli=$build/src/cli/s3flash

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

echo
echo "== Lightning: train with checkpoints in S3, SIGKILL, resume from S3 =="
$cli mb s3://lightning
# from $work: `import s3flash` is the installed package, not the source tree
(cd "$work" && python3 "$root/examples/lightning_resume.py" --bucket lightning --prefix tiny-mlp/ \
    --epochs 6 --kill-at-epoch 3 2>&1 | grep -v -E '^(GPU|TPU) available|litlogger|_pytree.py')
$cli ls --recursive s3://lightning/
$cli rm --recursive --quiet s3://lightning/
$cli rb s3://lightning
echo "demo OK: CLI round trip, and a Lightning run killed and resumed from its checkpoints in S3"
