#!/usr/bin/env bash
# Instructions per request under callgrind, the one figure a shared machine does not move: each proxy's own (nginx, the gateway) and the backend's behind each proxy. Prints a table; writes nothing under bench/results.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/instructions.sh                  # 10 s of wrk -c32 per measurement
#   DURATION=20 bench/instructions.sh
#
# Timed figures on a virtual machine drift by ±10 % from one minute to the
# next (bench/README.md); instruction counts do not. They leave out the
# kernel (where a proxy spends about 80 % of its time) and count what runs
# under valgrind, which forces software fallbacks: SHA-256 without SHA-NI
# (the table shows how much) and memcpy without AVX-512. So they compare
# user-space work, not speed. They also depend a little on how many requests
# each wake-up finds (timers and the event loop's own work are shared among
# them): expect a few per cent (up to ±4 %) between runs.
set -Eeuo pipefail
trap 'echo "bench/instructions.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-10} # seconds of load per measurement, after 3 s of warm-up

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/instructions.sh: error: $*"
    exit 1
}

[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a positive whole number, not '$DURATION'"

# shellcheck source=bench/lib/apt.sh
source "$ROOT/bench/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$ROOT/bench/lib/proxies.sh"
missing=()
[[ -n $(find_tool nginx) ]] || missing+=(nginx)
[[ -n $(find_tool wrk) ]] || missing+=(wrk)
[[ -n $(find_tool valgrind) ]] || missing+=(valgrind)
[[ -n $(find_tool taskset) ]] || missing+=(util-linux)
[[ -n $(find_tool curl) ]] || missing+=(curl)
apt_install "${missing[@]}"
NGINX=$(find_tool nginx)
WRK=$(find_tool wrk)
VALGRIND=$(find_tool valgrind)
CONTROL=$(find_tool callgrind_control)
[[ -n $CONTROL ]] || die "callgrind_control is missing (it comes with valgrind)"

build_cli
pin_cpus
scratch_dir instructions
bench_tenant
# Valgrind starts slowly: servers get this long to answer.
READY_S=60

# start NAME CPU UNDER_CALLGRIND COMMAND...: starts a server pinned to CPU,
# in WORK/NAME (under callgrind when UNDER_CALLGRIND is yes, its profile in
# WORK/NAME.callgrind), and sets STARTED to its pid.
start() {
    local name=$1 cpu=$2 profiled=$3
    shift 3
    local run=(taskset -c "$cpu")
    if [[ $profiled == yes ]]; then
        run+=("$VALGRIND" --tool=callgrind "--callgrind-out-file=$WORK/$name.callgrind")
        PROFILE=$WORK/$name.callgrind
    fi
    mkdir -p "$WORK/$name"
    (cd "$WORK/$name" && exec "${run[@]}" "$@") >"$WORK/$name.log" 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
}

stop() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# measure PID PROFILE URL AUTH_OR_EMPTY: warms up, zeroes PID's callgrind
# counters, runs wrk for DURATION seconds, dumps the counters (to PROFILE.N);
# prints "INSTRUCTIONS_PER_REQUEST DUMP REQUESTS".
measure() {
    local pid=$1 profile=$2 url=$3 auth=$4 args out requests dump total
    # Valgrind slows the server it runs many times over: wrk waits for
    # answers longer than its default 2 s before counting a timeout.
    args=(-t1 -c32 --timeout 10s)
    [[ -n $auth ]] && args+=(-H "$auth")
    taskset -c "$WRK_CPU" "$WRK" "${args[@]}" -d3s "$url" >/dev/null
    "$CONTROL" -z "$pid" >/dev/null 2>&1
    out=$(taskset -c "$WRK_CPU" "$WRK" "${args[@]}" "-d${DURATION}s" "$url")
    "$CONTROL" -d "$pid" >/dev/null 2>&1
    if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
        die "$url: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | xargs)"
    fi
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    # The dump callgrind_control asked for is the newest file of the
    # profile; its "totals:" line is every instruction since the zeroing.
    dump=$(find "$WORK" -maxdepth 1 -name "$(basename "$profile").*" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    [[ -n $dump ]] || die "callgrind wrote no dump for pid $pid"
    total=$(awk '/^totals:/ { print $2 }' "$dump")
    [[ -n $total && -n $requests ]] || die "cannot read the dump $dump or wrk's output"
    say "    ($requests requests in ${DURATION}s; $total instructions)"
    awk -v t="$total" -v n="$requests" -v d="$dump" 'BEGIN { printf "%.0f %s %d\n", t / n, d, n }'
}

# software_sha256 DUMP REQUESTS: instructions per request in sha2's software
# SHA-256, which runs under valgrind in place of SHA-NI.
software_sha256() {
    callgrind_annotate --inclusive=no --threshold=100 --auto=no "$1" 2>/dev/null |
        awk -v n="$2" '/sha2::sha256::soft/ { gsub(",", "", $1); t += $1 } END { printf "%.0f\n", t / n }'
}

pick_port BACKEND_PORT
pick_port NGINX_PORT
pick_port NGINX_HEADERS_PORT
pick_port GATEWAY_PORT
pick_port GATEWAY_ADMIN_PORT
pick_port DEFAULT_PORT
pick_port DEFAULT_ADMIN_PORT

# The proxies, each on the proxy CPU; nginx without its master process so
# that callgrind follows the one process that serves.
proxy_configs() {
    nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$NGINX_PORT" "$BACKEND_PORT"
    nginx_conf "$WORK/nginx-headers.conf" "$WORK/nginx-headers" "$NGINX_HEADERS_PORT" "$BACKEND_PORT" gateway-headers
    sed -i '1i master_process off;' "$WORK/nginx.conf" "$WORK/nginx-headers.conf"
    gateway_dir gateway "$GATEWAY_PORT" "$GATEWAY_ADMIN_PORT" plain
    gateway_dir default "$DEFAULT_PORT" "$DEFAULT_ADMIN_PORT" default
}
proxy_configs
# start_nginx NAME UNDER_CALLGRIND, start_gateway NAME UNDER_CALLGRIND.
start_nginx() {
    start "$1" "$PROXY_CPU" "$2" "$NGINX" -p "$WORK/$1" -c "$WORK/$1.conf" -e "$WORK/$1/error.log"
}
start_gateway() {
    start "$1" "$PROXY_CPU" "$2" "$BIN" serve --workers 1 --config gateway.toml
}

declare -A RESULT
say "pinning: proxies on CPU $PROXY_CPU, backend on CPU $BACKEND_CPU, wrk on CPU $WRK_CPU; ${DURATION}s of wrk -c32 per measurement"

# 1. Each proxy under callgrind, the backend native.
start backend "$BACKEND_CPU" no "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1
BACKEND_PID=$STARTED
ready backend "http://127.0.0.1:$BACKEND_PORT/x" "$READY_S"
start_nginx nginx yes
ready nginx "http://127.0.0.1:$NGINX_PORT/x" "$READY_S"
measured=$(measure "$STARTED" "$PROFILE" "http://127.0.0.1:$NGINX_PORT/x" "")
RESULT[proxy-nginx]=${measured%% *}
say "  nginx: ${RESULT[proxy-nginx]} instructions per request"
stop "$STARTED"
start_gateway gateway yes
ready gateway "http://127.0.0.1:$GATEWAY_PORT/x" "$READY_S" -H "$AUTH"
measured=$(measure "$STARTED" "$PROFILE" "http://127.0.0.1:$GATEWAY_PORT/x" "$AUTH")
read -r "RESULT[proxy-gateway]" dump requests <<<"$measured"
SHA_SOFT=$(software_sha256 "$dump" "$requests")
say "  gateway: ${RESULT[proxy-gateway]} instructions per request, $SHA_SOFT of them software SHA-256"
stop "$STARTED"
stop "$BACKEND_PID"

# 2. The backend under callgrind, behind each proxy running natively.
start backend "$BACKEND_CPU" yes "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1
BACKEND_PID=$STARTED
BACKEND_PROFILE=$PROFILE
ready backend "http://127.0.0.1:$BACKEND_PORT/x" "$READY_S"
start_nginx nginx no
ready nginx "http://127.0.0.1:$NGINX_PORT/x" "$READY_S"
start_nginx nginx-headers no
ready nginx-headers "http://127.0.0.1:$NGINX_HEADERS_PORT/x" "$READY_S"
start_gateway gateway no
ready gateway "http://127.0.0.1:$GATEWAY_PORT/x" "$READY_S" -H "$AUTH"
start_gateway default no
ready default "http://127.0.0.1:$DEFAULT_PORT/x" "$READY_S" -H "$AUTH"
for target in direct:$BACKEND_PORT: nginx:$NGINX_PORT: nginx-headers:$NGINX_HEADERS_PORT:"$AUTH" \
    gateway:$GATEWAY_PORT:"$AUTH" default:$DEFAULT_PORT:"$AUTH"; do
    IFS=: read -r name port auth <<<"$target"
    measured=$(measure "$BACKEND_PID" "$BACKEND_PROFILE" "http://127.0.0.1:$port/x" "$auth")
    RESULT[backend-$name]=${measured%% *}
    say "  the backend, $name: ${RESULT[backend-$name]} instructions per request"
done

versus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", a / b }'; }
cat <<EOF

Instructions per request under valgrind --tool=callgrind (user space only; wrk -t1 -c32, ${DURATION}s after 3s of warm-up; git $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)).

| what | instructions per request | vs nginx's |
|---|---:|---:|
| nginx $("$NGINX" -v 2>&1 | sed 's|.*nginx/||'), the proxy itself | ${RESULT[proxy-nginx]} | 1.00× |
| the gateway itself (FORWARDING=plain) | ${RESULT[proxy-gateway]} | $(versus "${RESULT[proxy-gateway]}" "${RESULT[proxy-nginx]}") |
| the gateway itself, less software SHA-256 | $((RESULT[proxy-gateway] - SHA_SOFT)) | $(versus $((RESULT[proxy-gateway] - SHA_SOFT)) "${RESULT[proxy-nginx]}") |
| the backend, wrk direct | ${RESULT[backend-direct]} | $(versus "${RESULT[backend-direct]}" "${RESULT[backend-nginx]}") |
| the backend behind nginx | ${RESULT[backend-nginx]} | 1.00× |
| the backend behind nginx sending the gateway's fields | ${RESULT[backend-nginx-headers]} | $(versus "${RESULT[backend-nginx-headers]}" "${RESULT[backend-nginx]}") |
| the backend behind the gateway (FORWARDING=plain) | ${RESULT[backend-gateway]} | $(versus "${RESULT[backend-gateway]}" "${RESULT[backend-nginx]}") |
| the backend behind the gateway (FORWARDING=default) | ${RESULT[backend-default]} | $(versus "${RESULT[backend-default]}" "${RESULT[backend-nginx]}") |

The gateway hashes each request's API key (${#API_KEY} bytes here, as in gateway.sh: one SHA-256 block). Valgrind does not run SHA-NI, so sha2 falls back to its software rounds ($SHA_SOFT instructions per request here); natively the same hash takes a small fraction of that. The row "less software SHA-256" leaves them out (and so undercounts by the native hash).
EOF
