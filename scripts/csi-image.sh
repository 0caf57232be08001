#!/usr/bin/env bash
# The CSI driver's image root: the wheel (scripts/wheel-test.sh wheel) with its `csi` extra
# (grpcio, protobuf) in a venv /opt/s3flash of a clean Debian 12 root (the wheel test's
# debootstrap root, cached under $S3FLASH_WHEEL_CACHE), checked in a chroot, and packed for
# deploy/Containerfile.
#   bash scripts/csi-image.sh [STEP...]     default: root test
#     root   copy the cached Debian root to build-image/root, install the wheel there
#     test   in the root (chroot): s3flash-csi mounter and node started, a volume published
#            through the node's socket against S3FLASH_TEST_* (s3flash mount on the FUSE
#            descriptor the node hands over), read back, unpublished
#     tar    build-image/rootfs.tar (then: docker build -f deploy/Containerfile build-image)
#     image  the tar step, then docker/podman/buildah build when one is installed
# Needs root (chroot, mount), and the wheel and the root of scripts/wheel-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
cache=${S3FLASH_WHEEL_CACHE:-/var/tmp/s3flash-wheel}
out=$src/build-image
root=$out/root
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(root test)
say() { echo "csi-image: $*" >&2; }

# shellcheck source=chroot-lib.sh
. "$src/scripts/chroot-lib.sh"   # mounted=(), unmount_all
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/opt/s3flash/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 PIP_CERT=/etc/ssl/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
        PIP_DEFAULT_TIMEOUT=180 "$@"
}

step_root() {
    local t0 w
    t0=$(date +%s)
    w=$(ls build-wheel/wheelhouse/s3flash-*.whl 2>/dev/null | head -n1)
    [ -n "$w" ] || { say "no wheel: bash scripts/wheel-test.sh wheel"; exit 1; }
    [ -f "$cache/bookworm/.s3flash-root-ok" ] || { say "no Debian root: bash scripts/wheel-test.sh root"; exit 1; }
    rm -rf "$root"
    mkdir -p "$out"
    cp -a "$cache/bookworm" "$root"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/host-ca.crt"
    cp "$w" "$root/tmp/"
    trap unmount_all EXIT
    mount -t proc proc "$root/proc"; mounted+=("$root/proc")
    in_root python3 -m venv /opt/s3flash
    in_root pip install -q "/tmp/$(basename "$w")[csi]"
    rm -f "$root/tmp/$(basename "$w")" "$root/etc/ssl/host-ca.crt"
    rm -rf "$root/root/.cache"
    unmount_all
    trap - EXIT
    say "root: $root in $(( $(date +%s) - t0 )) s, $(du -sm "$root" | cut -f1) MiB"
}

step_test() {
    local t0
    t0=$(date +%s)
    : "${S3FLASH_TEST_ENDPOINT:?the S3 server: source /var/tmp/rgw.env}"
    trap unmount_all EXIT
    mount -t proc proc "$root/proc"; mounted+=("$root/proc")
    mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"; mounted+=("$root/dev")
    mkdir -p "$root/csi-test"
    mount -t tmpfs tmpfs "$root/csi-test"; mounted+=("$root/csi-test")
    cp scripts/csi-image-check.py "$root/csi-test/"
    in_root s3flash --version >/dev/null
    in_root s3flash-csi --help >/dev/null
    in_root AWS_ACCESS_KEY_ID="$S3FLASH_TEST_ACCESS_KEY" \
        AWS_SECRET_ACCESS_KEY="$S3FLASH_TEST_SECRET_KEY" \
        AWS_REGION="${S3FLASH_TEST_REGION:-us-east-1}" \
        AWS_ENDPOINT_URL="$S3FLASH_TEST_ENDPOINT" \
        timeout 120 python3 /csi-test/csi-image-check.py /csi-test
    unmount_all
    trap - EXIT
    say "test: s3flash-csi node + mounter and s3flash mount ran in the root; $(( $(date +%s) - t0 )) s"
}

step_tar() {
    tar -C "$root" --exclude=./proc/* --exclude=./dev/* --exclude=./csi-test \
        -cf "$out/rootfs.tar" .
    say "tar: $out/rootfs.tar, $(du -m "$out/rootfs.tar" | cut -f1) MiB"
}

step_image() {
    step_tar
    local tool
    for tool in podman buildah docker; do
        if command -v "$tool" >/dev/null && "$tool" version >/dev/null 2>&1; then
            [ "$tool" = buildah ] && set -- bud || set -- build
            "$tool" "$@" -f deploy/Containerfile -t s3flash-csi:0.1.0 "$out"
            return
        fi
    done
    say "image: no working podman, buildah or docker here: $out/rootfs.tar and " \
        "deploy/Containerfile are the image's inputs"
}

for s in "${steps[@]}"; do
    case "$s" in
        root|test|tar|image) "step_$s" ;;
        *) say "unknown step $s (root, test, tar, image)"; exit 2 ;;
    esac
done
