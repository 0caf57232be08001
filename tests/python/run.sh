#!/usr/bin/env bash
# The Python package's tests: installs the test dependencies (torch pinned: an unpinned torch
# pulls a multi-GB CUDA build), builds and installs the package with pip (meson-python, the
# same Meson build), and runs pytest against the S3 server of the S3FLASH_TEST_* environment
# (tests/servers/rgw.sh env); without it, the tests' conftest starts a Ceph RGW itself.
#   tests/python/run.sh [pytest args...]
#   S3FLASH_SKIP_INSTALL=1   use what is installed (no pip)
#   S3FLASH_TEST_LARGE=1     add the >1 GiB round trip
set -euo pipefail
cd "$(dirname "$0")/../.."

pip_install() {
    local flags=()
    # Debian's own python3 is "externally managed" (PEP 668), as in install-deps.sh
    if python3 -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
        flags+=(--break-system-packages)
    fi
    python3 -m pip install -q "${flags[@]}" "$@"
}

if [ "${S3FLASH_SKIP_INSTALL:-0}" != 1 ]; then
    # torch pinned, and held there while the rest resolves (lightning asks for torch>=...)
    pip_install "torch==2.13.0" pytest pytest-xdist boto3 meson-python meson ninja
    pip_install "torch==2.13.0" "lightning==2.6.6" fsspec pandas mypy zstandard safetensors
    pip_install --no-build-isolation .
fi
# from outside the tree, so that `import s3flash` is the installed package
exec python3 -m pytest -q -p no:cacheprovider --rootdir tests/python tests/python "$@"
