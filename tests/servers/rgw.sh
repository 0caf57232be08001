#!/usr/bin/env bash
# Throw-away single-node Ceph cluster (1 mon, 1 bluestore OSD on a sparse
# file, no mgr) plus one radosgw, for s3flash integration tests.
#
#   rgw.sh start DIR   bring it up (idempotent: if DIR already runs, just
#                      prints the env); env lines go to stdout, progress and
#                      timing to stderr, so  eval "$(rgw.sh start DIR)"  works
#   rgw.sh env DIR     print the  export S3FLASH_TEST_...=...  lines
#   rgw.sh stop DIR    kill every daemon of DIR (by pid file), wait, rm -rf DIR
#
# Everything (config, keyring, data, logs, pid files, sockets) lives under
# DIR; nothing touches /etc/ceph or /var/lib/ceph, and no systemd is used.
# Several instances with different DIRs can run side by side (free ports are
# picked at start).
#
# Tunables (environment):
#   RGW_OSD_SIZE_GB    size of the sparse bluestore file     (default 24)
#   RGW_START_TIMEOUT  seconds to wait for the S3 endpoint   (default 90)
#   RGW_DEBUG          ceph debug level for rgw log          (default 1)
#   RGW_BIND_ADDR      address the S3 endpoint listens on    (default 127.0.0.1; 0.0.0.0 for
#                      a store host in a network namespace, tests/servers/netns.sh rgw)
set -euo pipefail

ACCESS_KEY=S3FLASHTESTACCESSKEY
SECRET_KEY=s3flashTestSecretKey0123456789abcdefghij
OTHER_ACCESS_KEY=S3FLASHOTHERACCESSKY
OTHER_SECRET_KEY=s3flashOtherSecretKey0123456789abcdefgh
REGION=us-east-1
RGW_NAME=client.rgw.s3flash
MARKER=.s3flash-rgw
KMS_KEY_ID=s3flash-test-kms-1     # SSE-KMS key ids of the 'testing' backend (ceph.conf)
KMS_KEY_ID_2=s3flash-test-kms-2

log() { printf '[rgw.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
    echo "usage: $0 {start|stop|env} DIR" >&2
    exit 2
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pid_alive() {
    local f=$1 pid
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null
}

# Print N free TCP ports on 127.0.0.1 (all distinct).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
}

print_env() {
    local dir=$1
    [[ -s $dir/rgw.port ]] || die "$dir has no rgw instance (no rgw.port)"
    cat <<EOF
export S3FLASH_TEST_ENDPOINT=http://127.0.0.1:$(<"$dir/rgw.port")
export S3FLASH_TEST_ACCESS_KEY=$ACCESS_KEY
export S3FLASH_TEST_SECRET_KEY=$SECRET_KEY
export S3FLASH_TEST_OTHER_ACCESS_KEY=$OTHER_ACCESS_KEY
export S3FLASH_TEST_OTHER_SECRET_KEY=$OTHER_SECRET_KEY
export S3FLASH_TEST_REGION=$REGION
export S3FLASH_TEST_KMS_KEY_ID=$KMS_KEY_ID
EOF
}

http_up() {
    # any HTTP status (RGW answers 200 on anonymous GET /) means "up"
    local code
    code=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "http://127.0.0.1:$1/" 2>/dev/null) || true
    [[ $code =~ ^[1-5][0-9][0-9]$ ]]
}

dump_logs() {
    local dir=$1 f
    for f in "$dir"/log/*; do
        [[ -f $f ]] || continue
        log "----- tail $f -----"
        tail -n 25 "$f" >&2 || true
    done
}

running() {
    local dir=$1
    [[ -f $dir/$MARKER ]] || return 1
    pid_alive "$dir/run/mon.a.pid" &&
        pid_alive "$dir/run/osd.0.pid" &&
        pid_alive "$dir/run/$RGW_NAME.pid" &&
        http_up "$(<"$dir/rgw.port")"
}

# pids of processes whose command line mentions DIR/ceph.conf (safety net
# for daemons whose pid file was not written yet)
strays() {
    local conf=$1 p
    for p in /proc/[0-9]*; do
        [[ -r $p/cmdline ]] || continue
        if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$conf"; then
            [[ ${p#/proc/} != "$$" ]] && echo "${p#/proc/}"
        fi
    done
}

cmd_stop() {
    local dir=$1 f pid pids=() i
    if [[ ! -e $dir ]]; then
        log "$dir does not exist, nothing to stop"
        return 0
    fi
    dir=$(cd "$dir" && pwd -P)
    [[ -f $dir/$MARKER ]] || die "$dir is not an rgw.sh directory (no $MARKER); refusing to touch it"
    # stop order: rgw, osd, mon
    for f in "$dir/run/$RGW_NAME.pid" "$dir/run/osd.0.pid" "$dir/run/mon.a.pid"; do
        if pid_alive "$f"; then
            pid=$(<"$f")
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    while read -r pid; do
        [[ -n $pid ]] || continue
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
    done < <(strays "$dir/ceph.conf")
    for ((i = 0; i < 150; i++)); do
        local alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid did not exit on TERM, sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    rm -rf -- "$dir"
    log "stopped and removed $dir"
}

ceph_cli() {
    timeout 60 ceph -c "$DIR/ceph.conf" --connect-timeout 30 "$@"
}

cmd_start() {
    local t0 dir
    t0=$(now)
    [[ $1 != *[[:space:]]* ]] || die "DIR must not contain whitespace (ceph.conf paths)"
    mkdir -p "$1"
    DIR=$(cd "$1" && pwd -P)
    dir=$DIR
    export CEPH_CONF=$dir/ceph.conf

    if running "$dir"; then
        log "already running in $dir"
        print_env "$dir"
        return 0
    fi
    if [[ -f $dir/$MARKER ]]; then
        log "stale instance in $dir, recreating"
        cmd_stop "$dir"
        mkdir -p "$dir"
    elif [[ -n $(ls -A "$dir") ]]; then
        die "$dir is not empty and not an rgw.sh directory"
    fi

    for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl python3; do
        command -v "$b" >/dev/null || die "$b not found (run tests/servers/install-deps.sh)"
    done

    touch "$dir/$MARKER"
    mkdir -p "$dir"/{mon,osd,rgw,log,run,crash}

    local ports mon2 mon1 rgwport fsid osd_uuid size_gb
    read -r mon2 mon1 rgwport <<<"$(free_ports 3)"
    echo "$rgwport" >"$dir/rgw.port"
    fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
    size_gb=${RGW_OSD_SIZE_GB:-24}

    cat >"$dir/ceph.conf" <<EOF
# generated by tests/servers/rgw.sh -- throw-away test cluster
[global]
fsid = $fsid
mon_initial_members = a
mon_host = [v2:127.0.0.1:$mon2,v1:127.0.0.1:$mon1]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
public_network = 127.0.0.0/8

auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# with auth "none" the default (secure crc) makes radosgw hang on connect
ms_mon_client_mode = crc secure

keyring = $dir/keyring
run_dir = $dir/run
crash_dir = $dir/crash
log_file = $dir/log/\$cluster-\$name.log
log_to_stderr = false
err_to_stderr = false
mon_cluster_log_file = $dir/log/\$cluster.log

osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0

[mon]
mon_data = $dir/mon/\$cluster-\$id
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$cluster-\$name.asok
mon_data_avail_warn = 2
mon_data_avail_crit = 1
# each mon commit (pool create, osd boot, ...) otherwise waits ~1 s; rgw
# start needs ~15 of them
paxos_propose_interval = 0.05
paxos_min_wait = 0.01

[osd]
osd_data = $dir/osd/\$cluster-\$id
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$cluster-\$name.asok
osd_objectstore = bluestore
# bluestore_block_path left unset: block file is created as \$osd_data/block
bluestore_block_create = true
bluestore_block_size = $((size_gb * 1024 * 1024 * 1024))
bluestore_fsck_on_mkfs = false
osd_memory_target = 939524096
bluestore_cache_autotune = true
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 2
osd_scrub_auto_repair = false
osd_scrub_begin_hour = 0
osd_scrub_end_hour = 0
mon_osd_full_ratio = 0.97
mon_osd_backfillfull_ratio = 0.95
mon_osd_nearfull_ratio = 0.9

[$RGW_NAME]
rgw_data = $dir/rgw
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$cluster-\$name.asok
rgw_frontends = beast endpoint=${RGW_BIND_ADDR:-127.0.0.1}:$rgwport
rgw_dns_name = localhost
rgw_thread_pool_size = 128
rgw_enable_usage_log = false
rgw_enable_ops_log = false
# deleted and overwritten objects are reclaimed by garbage collection, by default after
# 2 h: a test run writes several GB and filled the OSD (writes then hang). Reclaim soon.
rgw_gc_obj_min_wait = 10
rgw_gc_processor_period = 15
rgw_gc_processor_max_time = 15
# server-side encryption (tests/integration/test_cli_sse.py): SSE-C, and SSE-KMS with the
# 'testing' key backend (keys given here, never for production); plain HTTP on loopback
rgw_crypt_require_ssl = false
rgw_crypt_s3_kms_backend = testing
rgw_crypt_s3_kms_encryption_keys = $KMS_KEY_ID=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= $KMS_KEY_ID_2=ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=
debug_rgw = ${RGW_DEBUG:-1}
EOF

    ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool "$dir/keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null

    # --- mon ---------------------------------------------------------------
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon2,v1:127.0.0.1:$mon1]" \
        "$dir/monmap" >/dev/null
    ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" \
        >>"$dir/log/mkfs.out" 2>&1 </dev/null || { dump_logs "$dir"; die "ceph-mon --mkfs failed"; }
    ceph-mon -c "$dir/ceph.conf" -i a >>"$dir/log/daemons.out" 2>&1 </dev/null ||
        { dump_logs "$dir"; die "ceph-mon failed to start"; }
    log "mon up after $(elapsed "$t0")s"

    # --- osd ---------------------------------------------------------------
    local id
    id=$(ceph_cli osd new "$osd_uuid" 2>>"$dir/log/cli.out") ||
        { dump_logs "$dir"; die "ceph osd new failed"; }
    [[ $id == 0 ]] || die "unexpected osd id '$id'"
    mkdir -p "$dir/osd/ceph-0"
    ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" \
        >>"$dir/log/mkfs.out" 2>&1 </dev/null || { dump_logs "$dir"; die "ceph-osd --mkfs failed"; }
    ceph-osd -c "$dir/ceph.conf" -i 0 >>"$dir/log/daemons.out" 2>&1 </dev/null ||
        { dump_logs "$dir"; die "ceph-osd failed to start"; }
    local i up=0
    for ((i = 0; i < 120; i++)); do
        if ceph_cli osd dump -f json 2>/dev/null |
            python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(o["up"] and o["in"] for o in d["osds"]) else 1)'; then
            up=1
            break
        fi
        sleep 0.5
    done
    ((up)) || { dump_logs "$dir"; die "osd.0 did not come up"; }
    log "osd up after $(elapsed "$t0")s"

    # --- rgw ---------------------------------------------------------------
    radosgw -c "$dir/ceph.conf" -n "$RGW_NAME" >>"$dir/log/daemons.out" 2>&1 </dev/null ||
        { dump_logs "$dir"; die "radosgw failed to start"; }
    local deadline=$((SECONDS + ${RGW_START_TIMEOUT:-90}))
    until http_up "$rgwport"; do
        if ((SECONDS > deadline)); then
            dump_logs "$dir"
            die "S3 endpoint http://127.0.0.1:$rgwport did not answer within ${RGW_START_TIMEOUT:-90}s"
        fi
        pid_alive "$dir/run/$RGW_NAME.pid" || [[ ! -e $dir/run/$RGW_NAME.pid ]] ||
            { dump_logs "$dir"; die "radosgw died"; }
        sleep 0.5
    done
    log "rgw answering after $(elapsed "$t0")s"

    # --- users -------------------------------------------------------------
    timeout 60 radosgw-admin -c "$dir/ceph.conf" user create --uid=s3flash --display-name=s3flash \
        --access-key="$ACCESS_KEY" --secret="$SECRET_KEY" >>"$dir/log/cli.out" 2>&1 ||
        { dump_logs "$dir"; die "radosgw-admin user create s3flash failed"; }
    timeout 60 radosgw-admin -c "$dir/ceph.conf" user create --uid=s3flash-other \
        --display-name=s3flash-other \
        --access-key="$OTHER_ACCESS_KEY" --secret="$OTHER_SECRET_KEY" >>"$dir/log/cli.out" 2>&1 ||
        { dump_logs "$dir"; die "radosgw-admin user create s3flash-other failed"; }

    log "ready in $(elapsed "$t0")s: http://127.0.0.1:$rgwport (dir $dir)"
    print_env "$dir"
}

[[ $# -eq 2 ]] || usage
case $1 in
start) cmd_start "$2" ;;
stop) cmd_stop "$2" ;;
env)
    [[ -d $2 ]] || die "$2 does not exist"
    print_env "$(cd "$2" && pwd -P)"
    ;;
*) usage ;;
esac
