#!/usr/bin/env bash
# moto_server (pip "moto[server]") as an in-memory S3 mock for s3flash tests.
#
#   moto.sh start DIR   start on 127.0.0.1:<free port> (idempotent); env lines
#                       on stdout, progress on stderr:  eval "$(moto.sh start DIR)"
#   moto.sh env DIR     print  export S3FLASH_MOTO_...=...  lines
#   moto.sh stop DIR    kill it (by pid file), wait, rm -rf DIR
#
# moto accepts any credentials and any region; the ones printed are the
# conventional dummies.
set -euo pipefail

MARKER=.s3flash-moto

log() { printf '[moto.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { echo "usage: $0 {start|stop|env} DIR" >&2; exit 2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pid_alive() {
    local f=$1 pid
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

http_up() {
    local code
    code=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "http://127.0.0.1:$1/" 2>/dev/null) || true
    [[ $code =~ ^[1-5][0-9][0-9]$ ]]
}

print_env() {
    local dir=$1
    [[ -s $dir/moto.port ]] || die "$dir has no moto instance (no moto.port)"
    cat <<EOF
export S3FLASH_MOTO_ENDPOINT=http://127.0.0.1:$(<"$dir/moto.port")
export S3FLASH_MOTO_ACCESS_KEY=testing
export S3FLASH_MOTO_SECRET_KEY=testing
export S3FLASH_MOTO_REGION=us-east-1
EOF
}

moto_cmd() {
    if command -v moto_server >/dev/null; then
        echo moto_server
    elif python3 -c 'import moto.server' 2>/dev/null; then
        echo "python3 -m moto.server"
    else
        die "moto_server not found (run tests/servers/install-deps.sh)"
    fi
}

kill_group() {
    # moto was started with setsid: its pid is also its process group id
    local pid=$1 i
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "pid $pid did not exit on TERM, sending KILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
}

cmd_stop() {
    local dir=$1
    if [[ ! -e $dir ]]; then
        log "$dir does not exist, nothing to stop"
        return 0
    fi
    dir=$(cd "$dir" && pwd -P)
    [[ -f $dir/$MARKER ]] || die "$dir is not a moto.sh directory (no $MARKER); refusing to touch it"
    if pid_alive "$dir/moto.pid"; then
        kill_group "$(<"$dir/moto.pid")"
    fi
    rm -rf -- "$dir"
    log "stopped and removed $dir"
}

cmd_start() {
    local t0 dir cmd port attempt pid
    t0=$(now)
    mkdir -p "$1"
    dir=$(cd "$1" && pwd -P)
    if [[ -f $dir/$MARKER ]] && pid_alive "$dir/moto.pid" && http_up "$(<"$dir/moto.port")"; then
        log "already running in $dir"
        print_env "$dir"
        return 0
    fi
    if [[ -f $dir/$MARKER ]]; then
        log "stale instance in $dir, recreating"
        cmd_stop "$dir"
        mkdir -p "$dir"
    elif [[ -n $(ls -A "$dir") ]]; then
        die "$dir is not empty and not a moto.sh directory"
    fi
    command -v curl >/dev/null || die "curl not found"
    cmd=$(moto_cmd)
    touch "$dir/$MARKER"

    # retry: the free port may be taken between picking and binding
    for attempt in 1 2 3; do
        port=$(free_port)
        echo "$port" >"$dir/moto.port"
        # shellcheck disable=SC2086
        setsid $cmd -H 127.0.0.1 -p "$port" >>"$dir/moto.log" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$dir/moto.pid"
        local deadline=$((SECONDS + ${MOTO_START_TIMEOUT:-30}))
        while ((SECONDS <= deadline)); do
            http_up "$port" && {
                log "ready in $(elapsed "$t0")s: http://127.0.0.1:$port (dir $dir)"
                print_env "$dir"
                return 0
            }
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill_group "$pid"
        log "attempt $attempt failed; log tail:"
        tail -n 20 "$dir/moto.log" >&2 || true
    done
    die "moto_server did not come up"
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
