#!/usr/bin/env bash
# Hosts on one machine: network namespaces joined through a bridge, for the multi-host tests
# and benchmarks (tests/integration/test_netns.py, test_multirank.py, bench/multirank.py).
#
#   netns.sh up N [--rate RATE] [--store-rate RATE]
#       one "store" host and N "compute" hosts (c1..cN), each with an eth0 on a veth pair
#       whose other end is a port of bridge br0 in a switch namespace ("net"). Addresses:
#       store 10.213.0.1, cK 10.213.0.(10+K), /24 -- they exist only inside these namespaces
#       (the root namespace has no interface on the bridge, so nothing leaves the machine).
#       --rate caps every compute host's link, --store-rate the store's, in both directions
#       (tbf, see `cap`). Recreates the set if it is already up.
#   netns.sh down
#       ends every process still running in the set's namespaces (TERM, then KILL after 3 s)
#       and deletes the namespaces (their veths and the bridge go with them). Idempotent, and
#       cleans up what a crashed run left behind; bounded (each ip call under `timeout`).
#   netns.sh run HOST CMD...     runs CMD in HOST's namespace (HOST: store, c1.., net)
#   netns.sh addr HOST           prints HOST's address
#   netns.sh hosts               prints the compute hosts that are up (c1 c2 ...)
#   netns.sh cap HOST RATE|none  caps HOST's link in both directions with a token bucket
#                                (tbf: RATE in tc's words, e.g. 80mbit, 1gbit): on the egress
#                                of HOST's eth0 (what it sends) and of the bridge's port
#                                towards it (what it receives). This kernel has tbf and htb but
#                                neither netem nor fq: per-connection limits and latency belong
#                                to the server (the sink), not to the link.
#   netns.sh rgw start|stop DIR  a Ceph RGW of its own on the store host (tests/servers/rgw.sh
#                                in the store namespace, bound to all of the store's
#                                addresses); `start` prints rgw.sh's env lines with the store's
#                                address as the endpoint.
#
# Environment: NETNS_PREFIX (default s3f: namespaces s3f-net, s3f-store, s3f-c1..) lets
# several sets exist side by side (the tests use their own); NETNS_SUBNET (default 10.213.0,
# the first three octets). Needs root and iproute2 (ip, tc).
set -euo pipefail

PREFIX=${NETNS_PREFIX:-s3f}
SUBNET=${NETNS_SUBNET:-10.213.0}
NET=$PREFIX-net
HERE=$(cd "$(dirname "$0")" && pwd)

log() { printf '[netns.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

ipx() { timeout 10 ip "$@"; }

# running and not a zombie (a test's child that has exited but not been reaped yet)
alive() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $st && $st != Z && $st != X ]]
}
tcx() { timeout 10 tc "$@"; }

ns_of() { # HOST -> namespace name
    case $1 in
    store | net | c[1-9] | c[1-9][0-9]) echo "$PREFIX-$1" ;;
    *) die "unknown host '$1' (store, net, c1..c99)" ;;
    esac
}

addr_of() {
    case $1 in
    store) echo "$SUBNET.1" ;;
    c*) echo "$SUBNET.$((10 + ${1#c}))" ;;
    *) die "host '$1' has no address" ;;
    esac
}

# the namespaces of this set that exist now (also those of a crashed run)
set_namespaces() {
    ipx netns list 2>/dev/null | awk '{print $1}' |
        grep -E "^$PREFIX-(net|store|c[0-9]+)\$" || true
}

compute_hosts() {
    set_namespaces | sed -n "s/^$PREFIX-\(c[0-9]*\)\$/\1/p" | sort -V | tr '\n' ' ' | sed 's/ $//'
}

# "80mbit" -> bits per second (tc's units: bit, kbit, mbit, gbit; bps, kbps, mbps, gbps bytes)
rate_bits() {
    awk -v r="$1" 'BEGIN {
        if (!match(r, /^[0-9.]+/)) exit 1
        n = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
        m["bit"] = 1; m[""] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
        m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
        if (!(u in m)) exit 1
        printf "%.0f\n", n * m[u] }'
}

cap_dev() { # NS DEV RATE|none
    local ns=$1 dev=$2 rate=$3 bits burst
    tcx -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    [[ $rate == none ]] && return 0
    bits=$(rate_bits "$rate") || die "bad rate '$rate' (e.g. 80mbit, 1gbit, 10mbps)"
    # the bucket holds 5 ms at the rate, at least 64 KiB (a whole TSO segment: tbf would
    # otherwise split each one); the queue holds 50 ms more before it drops
    burst=$((bits / 8 / 200))
    ((burst >= 65536)) || burst=65536
    tcx -n "$ns" qdisc add dev "$dev" root tbf rate "${bits}bit" burst "$burst" latency 50ms
}

cmd_cap() {
    local host=$1 rate=$2 ns
    ns=$(ns_of "$host")
    [[ $host != net ]] || die "cap a host's link, not the switch"
    cap_dev "$ns" eth0 "$rate"
    cap_dev "$NET" "v-$host" "$rate"
}

add_host() { # HOST
    local host=$1 ns
    ns=$(ns_of "$host")
    ipx netns add "$ns"
    ipx -n "$ns" link set lo up
    ipx -n "$NET" link add "v-$host" type veth peer name "e-$host"
    ipx -n "$NET" link set "e-$host" netns "$ns"
    ipx -n "$ns" link set "e-$host" name eth0
    ipx -n "$ns" addr add "$(addr_of "$host")/24" dev eth0
    ipx -n "$ns" link set eth0 up
    ipx -n "$NET" link set "v-$host" master br0
    ipx -n "$NET" link set "v-$host" up
}

cmd_down() {
    local nss ns pids pid i any
    nss=$(set_namespaces)
    [[ -n $nss ]] || return 0
    # processes started in the set (daemons a test left behind, a crashed benchmark's ranks)
    pids=()
    for ns in $nss; do
        for pid in $(ipx netns pids "$ns" 2>/dev/null || true); do
            kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
        done
    done
    for ((i = 0; i < 30 && ${#pids[@]}; i++)); do
        any=0
        for pid in "${pids[@]}"; do alive "$pid" && any=1; done
        ((any)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
    for ns in $nss; do
        ipx netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"
    done
    [[ -z $(set_namespaces) ]] || die "namespaces left: $(set_namespaces | tr '\n' ' ')"
}

cmd_up() {
    local n=$1 rate=none store_rate=none k
    shift
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 99)) || die "N must be 1..99"
    while (($#)); do
        case $1 in
        --rate) rate=${2:?}; shift 2 ;;
        --store-rate) store_rate=${2:?}; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
    cmd_down
    ipx netns add "$NET"
    ipx -n "$NET" link set lo up
    ipx -n "$NET" link add br0 type bridge forward_delay 0
    ipx -n "$NET" link set br0 up
    add_host store
    for ((k = 1; k <= n; k++)); do add_host "c$k"; done
    [[ $store_rate == none ]] || cmd_cap store "$store_rate"
    if [[ $rate != none ]]; then
        for ((k = 1; k <= n; k++)); do cmd_cap "c$k" "$rate"; done
    fi
    log "up: store $(addr_of store), compute $(for ((k = 1; k <= n; k++)); do
        printf 'c%d=%s ' "$k" "$(addr_of "c$k")"; done)(prefix $PREFIX)"
}

cmd_rgw() {
    local op=$1 dir=$2
    case $op in
    start)
        RGW_BIND_ADDR=0.0.0.0 ip netns exec "$(ns_of store)" bash "$HERE/rgw.sh" start "$dir" |
            sed "s#http://127.0.0.1:#http://$(addr_of store):#"
        ;;
    stop) bash "$HERE/rgw.sh" stop "$dir" ;;
    *) usage ;;
    esac
}

[[ $# -ge 1 ]] || usage
case $1 in
up) [[ $# -ge 2 ]] || usage; shift; cmd_up "$@" ;;
down) cmd_down ;;
run)
    [[ $# -ge 3 ]] || usage
    ns=$(ns_of "$2")
    shift 2
    exec ip netns exec "$ns" "$@"
    ;;
addr) [[ $# -eq 2 ]] || usage; addr_of "$2" ;;
hosts) compute_hosts; echo ;;
cap) [[ $# -eq 3 ]] || usage; cmd_cap "$2" "$3" ;;
rgw) [[ $# -eq 3 ]] || usage; cmd_rgw "$2" "$3" ;;
*) usage ;;
esac
