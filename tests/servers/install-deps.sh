#!/usr/bin/env bash
# Install everything s3flash needs to build and run its tests, on Debian 12.
# Run as root. Idempotent: when everything is present it only checks (~1 s).
#
#   tests/servers/install-deps.sh
#
# Environment:
#   S3FLASH_SKIP_APT=1   skip the apt part (e.g. non-Debian, or no root)
#   S3FLASH_SKIP_PIP=1   skip the pip part
set -euo pipefail

APT_PACKAGES=(
    build-essential pkg-config
    libcurl4-openssl-dev libssl-dev libexpat1-dev libisal-dev
    ceph radosgw
    valgrind
    iproute2                # ip netns, tc: hosts as namespaces (tests/servers/netns.sh)
    clang libclang-rt-dev   # libFuzzer + ASan/UBSan runtimes (tests/fuzz)
    python3 python3-pip python3-venv
    curl ca-certificates
    debootstrap
    libfuse3-dev fuse3      # s3flash mount (src/mount) and its tests (tests/integration/test_mount.py)
    rsync                   # tests/integration/test_mount_use.py (rsync -r into a mount)
    s3fs rclone             # bench/mount.py: s3fs-fuse and rclone mount, side by side
    stress-ng               # tests/run.sh --under-load: the CPU hog beside the gate
    prometheus              # tests/integration/test_metrics.py: a real server scrapes s3flash
    golang-go               # tests/csi/build.sh: kubernetes-csi's csi-sanity, built offline
)
PIP_PACKAGES=(meson ninja pytest pytest-xdist 'moto[server]' crc32c awscrt grpcio grpcio-tools pyyaml
              matplotlib)

POLICY=/usr/sbin/policy-rc.d
MADE_POLICY=0

log() { printf '[install-deps] %s\n' "$*" >&2; }

apt_missing() {
    local p st
    for p in "${APT_PACKAGES[@]}"; do
        st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || st=
        [[ $st == "install ok installed" ]] || echo "$p"
    done
}

install_apt() {
    local missing
    mapfile -t missing < <(apt_missing)
    if ((${#missing[@]} == 0)); then
        log "apt: all ${#APT_PACKAGES[@]} packages present"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || { log "apt: missing ${missing[*]} but not root"; exit 1; }
    log "apt: installing ${missing[*]}"
    # keep package postinst scripts from starting ceph daemons (no systemd in
    # CI; and we never want the system-wide cluster)
    if [[ ! -e $POLICY ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$POLICY"
        chmod 755 "$POLICY"
        MADE_POLICY=1
        trap 'if [[ $MADE_POLICY == 1 ]]; then rm -f "$POLICY"; fi' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    # only the missing ones: do not upgrade what is already installed
    apt-get install -y --no-install-recommends "${missing[@]}"
    if ((MADE_POLICY)); then
        rm -f "$POLICY"
        MADE_POLICY=0
    fi
}

pip_missing() {
    command -v meson >/dev/null || echo meson
    command -v ninja >/dev/null || echo ninja
    python3 -c 'import pytest' 2>/dev/null || echo pytest
    python3 -c 'import xdist' 2>/dev/null || echo pytest-xdist   # tests/run.sh's workers
    { command -v moto_server >/dev/null && python3 -c 'import moto, flask, flask_cors' 2>/dev/null; } ||
        echo 'moto[server]'
    # without these moto silently computes CRC32 in place of CRC32C and CRC64NVME
    python3 -c 'import crc32c' 2>/dev/null || echo crc32c
    python3 -c 'import awscrt' 2>/dev/null || echo awscrt
    # the CSI driver (python/s3flash/csi): gRPC, its messages generated at build time, and
    # the chart renderer of its deployment test (scripts/render-chart.py)
    python3 -c 'import grpc' 2>/dev/null || echo grpcio
    python3 -c 'import grpc_tools.protoc' 2>/dev/null || echo grpcio-tools
    python3 -c 'import yaml' 2>/dev/null || echo pyyaml
    # bench/plot.py's test (tests/integration/test_bench_plot.py): the python3 that runs the
    # tests, which may not be Debian's (python3-matplotlib would reach /usr/bin/python3 only)
    python3 -c 'import matplotlib' 2>/dev/null || echo matplotlib
    # the OTLP receiver of tests/integration/test_metrics_otlp.py decodes the protobuf
    python3 -c 'import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2' \
        2>/dev/null || echo opentelemetry-proto
}

install_pip() {
    local missing flags=()
    mapfile -t missing < <(pip_missing)
    if ((${#missing[@]} == 0)); then
        log "pip: meson ninja pytest moto[server] crc32c awscrt grpcio grpcio-tools pyyaml matplotlib opentelemetry-proto present"
        return 0
    fi
    log "pip: installing ${missing[*]}"
    # Debian's python3 is "externally managed" (PEP 668)
    if python3 - <<'EOF'; then
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)
EOF
        flags+=(--break-system-packages)
    fi
    python3 -m pip install --no-input --disable-pip-version-check "${flags[@]}" "${missing[@]}"
    hash -r
}

[[ ${S3FLASH_SKIP_APT:-0} == 1 ]] || install_apt
[[ ${S3FLASH_SKIP_PIP:-0} == 1 ]] || install_pip
log "done"
