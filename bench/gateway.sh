#!/usr/bin/env bash
# Gateway benchmark: requests/s and p50/p99 at 1, 32 and 128 connections, and p50/p99 at a fixed rate corrected for coordinated omission, for the backend direct, nginx (plain, and again sending the gateway's header fields), HAProxy and the shuffle-shard gateway (same backend, one worker each, same run); then the gateway while one of its shards is killed mid-run, and its RSS with 100,000 tenants.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/gateway.sh                    # or: bench/run.sh gateway
#   DURATION=5 ROUNDS=3 WARMUP=2 bench/gateway.sh   # longer runs than the defaults
#
# Writes bench/results/gateway.md and bench/results/gateway.json and prints
# the table. Loopback only; stops by itself; every process it starts is
# stopped on exit. See bench/README.md for what is measured and why.
set -Eeuo pipefail
trap 'echo "bench/gateway.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-3}   # seconds per measured wrk run
ROUNDS=${ROUNDS:-3}       # rounds; each round runs every target once, starting one target further along each time
WARMUP=${WARMUP:-2}       # seconds of warm-up per target
CONNS=${CONNS:-32}        # connections for the throughput run (with CPU accounting)
HIGH_CONNS=${HIGH_CONNS:-128} # connections for the high-concurrency run
RATE=${RATE:-auto}        # fixed rate (req/s) for the oha run; auto = half the slowest proxy's median peak at $CONNS conns
RATE_DURATION=${RATE_DURATION:-$DURATION} # seconds per fixed-rate run
FAIL_DURATION=${FAIL_DURATION:-10} # seconds of the shard-kill run
FAIL_KILL_AT=${FAIL_KILL_AT:-3}    # seconds into it when backend b is killed
TENANTS_BIG=${TENANTS_BIG:-100000} # tenants configured for the memory run
SETTLE_S=${SETTLE_S:-3}   # seconds the memory run waits before reading the settled resident set
OHA_BUILD_TIMEOUT=${OHA_BUILD_TIMEOUT:-300} # seconds allowed for `cargo install oha` when oha is missing
NICE=${NICE:-0}           # e.g. -19 (root only) to run everything benchmarked ahead of other load

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/gateway.sh: error: $*"
    exit 1
}

for value in DURATION ROUNDS WARMUP CONNS HIGH_CONNS RATE_DURATION FAIL_DURATION FAIL_KILL_AT TENANTS_BIG OHA_BUILD_TIMEOUT; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
[[ $RATE == auto || $RATE =~ ^[1-9][0-9]*$ ]] || die "RATE must be auto or a positive whole number, not '$RATE'"
((FAIL_KILL_AT < FAIL_DURATION)) || die "FAIL_KILL_AT ($FAIL_KILL_AT) must be less than FAIL_DURATION ($FAIL_DURATION)"
[[ $NICE =~ ^-?[0-9]+$ ]] || die "NICE must be a whole number, not '$NICE'"
NICE_CMD=()
if ((NICE != 0)); then
    ((NICE > 0 || EUID == 0)) || die "NICE=$NICE needs root"
    NICE_CMD=(nice -n "$NICE")
fi

# --- tools ------------------------------------------------------------------


# shellcheck source=bench/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/proxies.sh"

install_missing() {
    local missing=()
    [[ -n $(find_tool nginx) ]] || missing+=(nginx)
    [[ -n $(find_tool haproxy) ]] || missing+=(haproxy)
    [[ -n $(find_tool wrk) ]] || missing+=(wrk)
    [[ -n $(find_tool taskset) ]] || missing+=(util-linux)
    [[ -n $(find_tool curl) ]] || missing+=(curl)
    apt_install "${missing[@]}"
}

install_missing
NGINX=$(find_tool nginx)
HAPROXY=$(find_tool haproxy)
WRK=$(find_tool wrk)

# The fixed-rate load generator: oha (with --latency-correction). Debian's
# package when there is one; otherwise `cargo install oha --locked`, given
# OHA_BUILD_TIMEOUT seconds; if it does not build in time the fixed-rate part
# is skipped and the report says so. (Debian has no wrk2 package either.)
OHA=""
OHA_NOTE=""
find_oha() {
    OHA=$(find_tool oha)
    [[ -z $OHA && -x ${CARGO_HOME:-$HOME/.cargo}/bin/oha ]] && OHA=${CARGO_HOME:-$HOME/.cargo}/bin/oha
    true
}
find_oha
if [[ -z $OHA ]] && apt-cache policy oha 2>/dev/null | grep -q 'Candidate: [^(]'; then
    say "installing oha (Debian package)"
    sudo_cmd=()
    ((EUID == 0)) || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends oha >/dev/null || true
    find_oha
fi
if [[ -z $OHA ]]; then
    say "oha is not installed and Debian has no package for it (nor for wrk2): trying cargo install oha --locked (at most ${OHA_BUILD_TIMEOUT}s)"
    oha_start=$EPOCHREALTIME
    if timeout "$OHA_BUILD_TIMEOUT" cargo install oha --locked >"${TMPDIR:-/tmp}/ss-gateway-oha-build.log" 2>&1; then
        find_oha
        OHA_NOTE="oha built with cargo install oha --locked in $(awk -v a="$oha_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s."
    else
        OHA_NOTE="Fixed-rate run skipped: oha is not packaged for Debian (nor wrk2), and cargo install oha --locked did not finish within ${OHA_BUILD_TIMEOUT}s (see ${TMPDIR:-/tmp}/ss-gateway-oha-build.log)."
    fi
    say "${OHA_NOTE:-oha built}"
fi
OHA_VERSION=""
[[ -n $OHA ]] && OHA_VERSION=$("$OHA" --version 2>/dev/null | awk '{ print $2 }')

# The suite's run time (runtime_s in the JSON) counts from here: after the
# package installs and the oha build, like the other suites.
START=$EPOCHREALTIME
say "building: cargo build --release -p shuffle-shard-cli"
cargo build --release -p shuffle-shard-cli >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/shuffle-shard"
[[ -x $BIN ]] || die "$BIN was not built"

# --- CPUs: one for the proxy, one for the backend, wrk where it fits ---------

pin_cpus
PINNING="proxy (nginx, HAProxy or gateway) on CPU $PROXY_CPU, backend on CPU $BACKEND_CPU, wrk on CPU $WRK_CPU"
if ((CPU_COUNT == 1)); then
    PINNING="$PINNING (1 CPU available: everything shares it)"
elif ((CPU_COUNT == 2)); then
    PINNING="$PINNING (2 CPUs available: wrk shares the backend's)"
fi
# The CPUs whose busy share is reported, without repeats.
mapfile -t WATCHED < <(printf '%s\n' "$PROXY_CPU" "$BACKEND_CPU" "$WRK_CPU" | awk '!seen[$0]++')

# --- the temporary set-up and the clean-up ------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ss-gateway-bench.XXXXXX")
PIDS=()
cleanup() {
    local status=$?
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((status == 0)); then
        rm -rf "$WORK"
    else
        say "bench/gateway.sh: failed; logs and configuration kept in $WORK"
    fi
}
trap cleanup EXIT
# Drops a process we stopped ourselves from the clean-up list, so its id,
# once reused by the system, is never signalled.
forget_pid() {
    local pid keep=()
    for pid in "${PIDS[@]}"; do
        [[ $pid == "$1" ]] || keep+=("$pid")
    done
    PIDS=("${keep[@]}")
}
trap 'exit 130' INT
trap 'exit 143' TERM

# --- ports and starting a server ------------------------------------------------

# Whether a log says a listening address was taken (our binaries print the OS
# error, "Address already in use (os error 98)"; nginx "98: Address already
# in use"; HAProxy "(Address already in use)").
address_in_use() { grep -qiE 'address already in use|os error 98|eaddrinuse' "$@" 2>/dev/null; }

# A launch function (launch_backend, ...) writes its server's configuration
# from the current port variables, starts the server in the background and
# calls `launched PID URL LOG...`; it may then set PROBE_ARGS (extra curl
# arguments), PROBE_INTERVAL and PROBE_TRIES.
launched() {
    LAUNCHED=$1
    PIDS+=("$1")
    PROBE_URL=$2
    shift 2
    LAUNCH_LOGS=("$@")
    PROBE_ARGS=()
    PROBE_INTERVAL=0.1
    PROBE_TRIES=200
}

# Polls PROBE_URL until it answers 2xx (returns 0; the body is in
# $WORK/NAME.probe), or the server exits (returns 1); dies when it does
# neither in PROBE_TRIES tries. A probe gives up after 5 s, so a listener
# that never answers cannot hang the suite.
probe_ready() {
    local name=$1
    for _ in $(seq "$PROBE_TRIES"); do
        kill -0 "$LAUNCHED" 2>/dev/null || return 1
        if curl -fsS --max-time 5 -o "$WORK/$name.probe" "${PROBE_ARGS[@]}" "$PROBE_URL" 2>/dev/null; then
            return 0
        fi
        sleep "$PROBE_INTERVAL"
    done
    die "$name did not answer $PROBE_URL within $(awk -v n="$PROBE_TRIES" -v s="$PROBE_INTERVAL" 'BEGIN { print n * s }') s; see ${LAUNCH_LOGS[*]}"
}

# start_server NAME LAUNCH PORT_VARIABLE...: runs LAUNCH and waits until the
# server answers. If its log says its address was in use (it exited at
# start, or it answered but nginx-style kept retrying its bind, so the answer
# may have come from another process), the PORT_VARIABLEs are picked again
# and LAUNCH runs again, at most START_ATTEMPTS times in all. Any other exit
# at start is fatal, as is a server that never answers. On return LAUNCHED is
# its pid and LAUNCH_START the $EPOCHREALTIME reading taken just before the
# successful launch.
START_ATTEMPTS=5
START_RETRIES=0
start_server() {
    local name=$1 launch=$2 attempt status variable
    shift 2
    for attempt in $(seq "$START_ATTEMPTS"); do
        LAUNCH_START=$EPOCHREALTIME
        "$launch"
        status=0
        probe_ready "$name" || status=$?
        if ((status == 0)) && ! address_in_use "${LAUNCH_LOGS[@]}"; then
            return
        fi
        if ((status == 0)); then
            kill -TERM "$LAUNCHED" 2>/dev/null || true
        fi
        wait "$LAUNCHED" 2>/dev/null || true
        forget_pid "$LAUNCHED"
        address_in_use "${LAUNCH_LOGS[@]}" || die "$name exited at start; see ${LAUNCH_LOGS[*]}"
        ((attempt < START_ATTEMPTS)) || break
        say "$name: address in use ($(grep -hiE -m1 'address already in use|os error 98|eaddrinuse' "${LAUNCH_LOGS[@]}" 2>/dev/null | head -1)); new ports, attempt $((attempt + 1)) of $START_ATTEMPTS"
        START_RETRIES=$((START_RETRIES + 1))
        for variable in "$@"; do
            pick_port "$variable"
        done
    done
    die "$name: its address was in use at each of $START_ATTEMPTS attempts; see ${LAUNCH_LOGS[*]}"
}

pick_port BACKEND_PORT
pick_port NGINX_PORT
pick_port NGINX_HEADERS_PORT
pick_port HAPROXY_PORT
pick_port GATEWAY_PORT
pick_port ADMIN_PORT
bench_tenant

# --- configurations ---------------------------------------------------------------

# HAProxy: one thread, keep-alive on both sides, server connections reused
# by any client (http-reuse always), like nginx's upstream keepalive pool.
mkdir -p "$WORK/haproxy"
haproxy_cfg() {
    cat >"$WORK/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 4096
    pidfile $WORK/haproxy/haproxy.pid

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s

frontend bench
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend backend

backend backend
    server s0 127.0.0.1:$BACKEND_PORT
EOF
    "$HAPROXY" -c -q -f "$WORK/haproxy.cfg" >"$WORK/haproxy-check.log" 2>&1 ||
        die "haproxy rejects the generated configuration: $(cat "$WORK/haproxy-check.log")"
}

# --- start the four processes ---------------------------------------------------

launch_backend() {
    "${NICE_CMD[@]}" taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1 \
        >"$WORK/backend.log" 2>&1 &
    launched $! "http://127.0.0.1:$BACKEND_PORT/x" "$WORK/backend.log"
}
launch_nginx() {
    nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$NGINX_PORT" "$BACKEND_PORT"
    : >"$WORK/nginx/error.log"
    "${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" \
        >"$WORK/nginx.log" 2>&1 &
    launched $! "http://127.0.0.1:$NGINX_PORT/x" "$WORK/nginx.log" "$WORK/nginx/error.log"
}
# nginx again, sending the backend the fields the gateway sends (see
# nginx_conf): what those fields cost, whoever sends them.
launch_nginx_headers() {
    nginx_conf "$WORK/nginx-headers.conf" "$WORK/nginx-headers" "$NGINX_HEADERS_PORT" "$BACKEND_PORT" gateway-headers
    : >"$WORK/nginx-headers/error.log"
    "${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$NGINX" -p "$WORK/nginx-headers" -c "$WORK/nginx-headers.conf" \
        -e "$WORK/nginx-headers/error.log" >"$WORK/nginx-headers.log" 2>&1 &
    launched $! "http://127.0.0.1:$NGINX_HEADERS_PORT/x" "$WORK/nginx-headers.log" "$WORK/nginx-headers/error.log"
}
# -db: foreground, no daemon, no master process.
launch_haproxy() {
    haproxy_cfg
    "${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$WORK/haproxy.cfg" \
        >"$WORK/haproxy.log" 2>&1 &
    launched $! "http://127.0.0.1:$HAPROXY_PORT/x" "$WORK/haproxy.log"
}
# Two shards, distinct ids, one backend process: the gateway does exactly
# what it does in production (k = 2 of 2, rendezvous, failover candidates),
# while the backend is the very one the other targets use.
# Writes DIR/gateway.toml (listen PORT, admin ADMIN_PORT, the shards given
# as id=port) and starts `serve --workers 1` on it from DIR, pinned to the
# proxy's CPU, logging to LOG: serve_in DIR PORT ADMIN_PORT LOG id=port...
serve_in() {
    local dir=$1 port=$2 admin_port=$3 log=$4
    shift 4
    gateway_toml "$dir/gateway.toml" "$port" "$admin_port" "$@"
    (cd "$dir" && exec "${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$BIN" serve --workers 1 --config gateway.toml) \
        >"$log" 2>&1 &
    launched $! "http://127.0.0.1:$port/x" "$log"
}
launch_gateway() {
    serve_in "$WORK" "$GATEWAY_PORT" "$ADMIN_PORT" "$WORK/gateway.log" s0="$BACKEND_PORT" s1="$BACKEND_PORT"
    PROBE_ARGS=(-H "$AUTH")
}

start_server backend launch_backend BACKEND_PORT
BACKEND_PID=$LAUNCHED
start_server nginx launch_nginx NGINX_PORT
NGINX_PID=$LAUNCHED
start_server nginx-headers launch_nginx_headers NGINX_HEADERS_PORT
NGINX_HEADERS_PID=$LAUNCHED
start_server haproxy launch_haproxy HAPROXY_PORT
HAPROXY_PID=$LAUNCHED

# Seconds since $1 (an $EPOCHREALTIME reading).
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
# A process's resident set (VmRSS) and its peak (VmHWM), in KiB.
rss_kib() { awk -v f="$2:" '$1 == f { print $2 }' /proc/"$1"/status; }

start_server gateway launch_gateway GATEWAY_PORT ADMIN_PORT
GATEWAY_PID=$LAUNCHED
SMALL_STARTUP_S=$(since "$LAUNCH_START")
SMALL_RSS_KIB=$(rss_kib "$GATEWAY_PID" VmRSS)
SMALL_HWM_KIB=$(rss_kib "$GATEWAY_PID" VmHWM)
grep -q '"tenant":"bench"' "$WORK/gateway.probe" ||
    die "the gateway answered, but not with the backend's body for tenant bench: $(cat "$WORK/gateway.probe")"

# One worker each: the tokio runtime names its workers tokio-rt-worker; the
# gateway with --workers 1 runs a single-threaded event loop on its main
# thread, so it has none.
workers_of() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c '^tokio-rt-worker' || true; }
GATEWAY_WORKERS=$(workers_of "$GATEWAY_PID")
BACKEND_WORKERS=$(workers_of "$BACKEND_PID")
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | wc -l)
NGINX_HEADERS_WORKERS=$(pgrep -P "$NGINX_HEADERS_PID" | wc -l)
[[ $GATEWAY_WORKERS == 0 ]] || die "the gateway runs $GATEWAY_WORKERS multi-threaded tokio workers; --workers 1 should give a single-threaded event loop"
[[ $BACKEND_WORKERS == 1 ]] || die "the backend runs $BACKEND_WORKERS tokio workers, not 1"
[[ $NGINX_WORKERS == 1 ]] || die "nginx runs $NGINX_WORKERS worker processes, not 1"
[[ $NGINX_HEADERS_WORKERS == 1 ]] || die "nginx (gateway's headers) runs $NGINX_HEADERS_WORKERS worker processes, not 1"
HAPROXY_THREADS=$(find /proc/"$HAPROXY_PID"/task -mindepth 1 -maxdepth 1 | wc -l)
[[ $HAPROXY_THREADS == 1 ]] || die "haproxy runs $HAPROXY_THREADS threads, not 1 (nbthread 1)"

# --- measuring -----------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# cpu_ticks (bench/lib/proxies.sh) counts clock ticks of CPU time.

# Microseconds of CPU per request from a tick count.
per_request_us() {
    awk -v t="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN { printf "%.2f", t * 1000000 / hz / n }'
}

# "busy total" jiffies of one CPU from /proc/stat.
cpu_jiffies() {
    awk -v cpu="cpu$1" '$1 == cpu { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}

declare -A URL=(
    [backend]="http://127.0.0.1:$BACKEND_PORT/x"
    [nginx]="http://127.0.0.1:$NGINX_PORT/x"
    [nginx-headers]="http://127.0.0.1:$NGINX_HEADERS_PORT/x"
    [haproxy]="http://127.0.0.1:$HAPROXY_PORT/x"
    [gateway]="http://127.0.0.1:$GATEWAY_PORT/x"
)
declare -A PROXY_PIDS=(
    [backend]=""
    [nginx]="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"
    [nginx-headers]="$NGINX_HEADERS_PID $(pgrep -P "$NGINX_HEADERS_PID" | tr '\n' ' ')"
    [haproxy]="$HAPROXY_PID"
    [gateway]="$GATEWAY_PID"
)
TARGETS=(backend nginx nginx-headers haproxy gateway)
declare -A LABEL=(
    [backend]="backend direct"
    [nginx]="nginx $("$NGINX" -v 2>&1 | sed 's|.*nginx/||') (reverse proxy)"
    [nginx-headers]="nginx $("$NGINX" -v 2>&1 | sed 's|.*nginx/||'), sending the gateway's fields"
    [haproxy]="HAProxy $("$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $3 }')"
    [gateway]="shuffle-shard gateway"
)

# Whether wrk sends the target the tenant's credential: the gateway needs
# it, and nginx sending the gateway's fields gets the very request the
# gateway gets (and drops the credential, as the gateway does).
sends_credential() { [[ $1 == gateway || $1 == nginx-headers ]]; }

# Runs wrk once against a target and checks every response was a 2xx.
# Sets RPS, P50_US, P99_US and REQUESTS.
run_wrk() {
    local target=$1 conns=$2 seconds=$3 tag=$4
    local out="$WORK/wrk-$target-$tag.txt"
    local args=(-t1 "-c$conns" "-d${seconds}s" --latency)
    if sends_credential "$target"; then args+=(-H "$AUTH"); fi
    "${NICE_CMD[@]}" taskset -c "$WRK_CPU" "$WRK" "${args[@]}" "${URL[$target]}" >"$out" 2>&1 ||
        die "wrk failed against $target: $(cat "$out")"
    if grep -q 'Non-2xx or 3xx responses' "$out"; then
        [[ $target == gateway ]] && say "the gateway answered non-2xx: its configuration or the backend is wrong"
        die "$target ($tag): $(grep 'Non-2xx' "$out" | xargs); wrk said:
$(cat "$out")"
    fi
    if grep -q 'Socket errors' "$out"; then
        die "$target ($tag): $(grep 'Socket errors' "$out" | xargs); wrk said:
$(cat "$out")"
    fi
    RPS=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
    REQUESTS=$(awk '/requests in/ { print $1 }' "$out")
    P50_US=$(to_us "$(awk '$1 == "50%" { print $2 }' "$out")")
    P99_US=$(to_us "$(awk '$1 == "99%" { print $2 }' "$out")")
    [[ -n $RPS && -n $REQUESTS && -n $P50_US ]] || die "cannot read wrk's output in $out"
    ((REQUESTS > 0)) || die "$target ($tag): wrk completed no request"
}

declare -A RPS_ALL P50_ALL P99_32_ALL PROXY_US_ALL PROXY_SYS_US_ALL PROXY_SHARE_ALL BACKEND_US_ALL
declare -A BUSY_ALL

# One measured round for one target at CONNS connections: the throughput
# run, with CPU accounting.
measure() {
    local target=$1 round=$2 cpu b t
    local -a before_busy=() before_total=()
    for cpu in "${WATCHED[@]}"; do
        read -r b t < <(cpu_jiffies "$cpu")
        before_busy+=("$b")
        before_total+=("$t")
    done
    local proxy_before proxy_sys_before backend_before proxy_after proxy_sys_after backend_after
    # shellcheck disable=SC2086 # the pid list is split on purpose
    proxy_before=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    proxy_sys_before=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    backend_before=$(cpu_ticks "$BACKEND_PID")

    run_wrk "$target" "$CONNS" "$DURATION" "c$CONNS-round$round"

    # shellcheck disable=SC2086 # the pid list is split on purpose
    proxy_after=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    proxy_sys_after=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    backend_after=$(cpu_ticks "$BACKEND_PID")
    local busy="" i=0
    for cpu in "${WATCHED[@]}"; do
        read -r b t < <(cpu_jiffies "$cpu")
        busy+="$(awk -v db=$((b - before_busy[i])) -v dt=$((t - before_total[i])) \
            'BEGIN { printf "%.0f", (dt > 0 ? 100 * db / dt : 0) }') "
        i=$((i + 1))
    done
    RPS_ALL[$target]+="$RPS "
    P99_32_ALL[$target]+="$P99_US "
    record_at "$target" "$CONNS"
    BUSY_ALL[$target,$round]=$busy
    PROXY_US_ALL[$target]+="$(per_request_us $((proxy_after - proxy_before)) "$REQUESTS") "
    PROXY_SYS_US_ALL[$target]+="$(per_request_us $((proxy_sys_after - proxy_sys_before)) "$REQUESTS") "
    PROXY_SHARE_ALL[$target]+="$(awk -v t=$((proxy_after - proxy_before)) -v hz="$CLK_TCK" -v d="$DURATION" \
        'BEGIN { printf "%.0f", 100 * t / hz / d }') "
    BACKEND_US_ALL[$target]+="$(per_request_us $((backend_after - backend_before)) "$REQUESTS") "
    say "  round $round  $(printf '%-8s' "$target") ${CONNS} conns: $(printf '%9.0f' "$RPS") req/s  (CPU busy % $(printf '%s' "$busy"| sed 's/ $//' | tr ' ' '/'))"
}

# One measured round for one target at 1 connection (its p50 is the
# headline latency) or at HIGH_CONNS connections.
measure_at() {
    local target=$1 round=$2 conns=$3
    run_wrk "$target" "$conns" "$DURATION" "c$conns-round$round"
    local unit="conns:"
    if ((conns == 1)); then
        P50_ALL[$target]+="$P50_US "
        unit="conn:"
    fi
    record_at "$target" "$conns"
    say "  round $round  $(printf '%-8s' "$target") $(printf '%-10s' "$conns $unit") $(printf '%9.0f' "$RPS") req/s  p50 $(printf '%8.1f' "$P50_US") us  p99 $(printf '%8.1f' "$P99_US") us"
}

# Every target at every connection count: req/s, p50 and p99 per round.
declare -A RPS_AT P50_AT P99_AT
CONN_COUNTS=(1 "$CONNS" "$HIGH_CONNS")
record_at() {
    RPS_AT[$1,$2]+="$RPS "
    P50_AT[$1,$2]+="$P50_US "
    P99_AT[$1,$2]+="$P99_US "
}

# The targets in the order round N runs them: each round starts one target
# further along. On a machine whose speed drifts during the suite (other
# virtual machines on the host come and go), a fixed order would hand one
# target the same slot, and the same neighbour, in every round.
round_order() {
    local round=$1 i count=${#TARGETS[@]}
    for ((i = 0; i < count; i++)); do
        printf '%s\n' "${TARGETS[$(((i + round - 1) % count))]}"
    done
}

# median min max of a list of numbers.
stats() {
    printf '%s\n' $1 | sort -g | awk '{ a[NR] = $1 } END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
        print m, a[1], a[NR] }'
}

# paired A_LIST B_LIST ge|le: "MEDIAN WINS ROUNDS LOW HIGH" for two
# per-round lists in round order: the median of the ratios A/B, in how many
# rounds A was at least B (ge) or at most B (le), and a bootstrap 95 %
# interval for that median (bench/lib/paired_ci.py).
paired() {
    python3 -B "$(dirname "${BASH_SOURCE[0]}")/lib/paired_ci.py" "$3" "$1" "$2"
}

# The busy share of each watched CPU, median over rounds.
busy_median() {
    local target=$1 i r values out=""
    for i in "${!WATCHED[@]}"; do
        values=""
        for r in $(seq "$ROUNDS"); do
            read -ra fields <<<"${BUSY_ALL[$target,$r]}"
            values+="${fields[$i]} "
        done
        read -r m _ _ < <(stats "$values")
        out+="$m "
    done
    echo "${out% }"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# What else is running: the watched CPUs' busy share over 2 idle seconds.
declare -a idle_before_busy=() idle_before_total=()
for cpu in "${WATCHED[@]}"; do
    read -r b t < <(cpu_jiffies "$cpu")
    idle_before_busy+=("$b")
    idle_before_total+=("$t")
done
sleep 2
BACKGROUND=""
for i in "${!WATCHED[@]}"; do
    read -r b t < <(cpu_jiffies "${WATCHED[$i]}")
    BACKGROUND+="$(awk -v db=$((b - idle_before_busy[i])) -v dt=$((t - idle_before_total[i])) \
        'BEGIN { printf "%.0f", (dt > 0 ? 100 * db / dt : 0) }')% / "
done
BACKGROUND=${BACKGROUND% / }
say "background load before the runs (busy $(printf 'CPU %s/' "${WATCHED[@]}" | sed 's|/$||')): $BACKGROUND"
say "pinning: $PINNING"
say "warm-up: ${WARMUP}s at $CONNS connections per target"
for target in "${TARGETS[@]}"; do
    run_wrk "$target" "$CONNS" "$WARMUP" warmup
done
say "measuring: $ROUNDS rounds of ${DURATION}s at $CONNS, 1 and $HIGH_CONNS connections per target"
# A round measures every target at one connection count before moving to
# the next, so each target's figure is taken within seconds of nginx's.
for round in $(seq "$ROUNDS"); do
    for target in $(round_order "$round"); do
        measure "$target" "$round"
    done
    for target in $(round_order "$round"); do
        measure_at "$target" "$round" 1
    done
    for target in $(round_order "$round"); do
        measure_at "$target" "$round" "$HIGH_CONNS"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- fixed rate: oha with --latency-correction ----------------------------------

# At a fixed rate, latency is measured from when each request was due, not
# from when it was sent, so a stall shows in the percentiles instead of
# silently lowering the offered load (coordinated omission).
declare -A FR_RPS FR_P50 FR_P99 FR_ERRORS
RATE_USED=""
if [[ -n $OHA ]]; then
    if [[ $RATE == auto ]]; then
        slowest=""
        for target in nginx haproxy gateway; do
            read -r m _ _ < <(stats "${RPS_ALL[$target]}")
            slowest=$(awk -v a="${slowest:-$m}" -v b="$m" 'BEGIN { print (b < a) ? b : a }')
        done
        RATE_USED=$(awk -v s="$slowest" 'BEGIN { r = int(s / 2 / 500) * 500; print (r < 500) ? 500 : r }')
    else
        RATE_USED=$RATE
    fi
    OHA_FORMAT=(-j)
    "$OHA" --help 2>&1 | grep -q -- '--output-format' && OHA_FORMAT=(--output-format json)
    # Requests still in flight at the deadline are waited for, not aborted
    # (oha would count an aborted one as an error).
    "$OHA" --help 2>&1 | grep -q -- '--wait-ongoing-requests-after-deadline' && OHA_FORMAT+=(-w)
    say "fixed rate: $ROUNDS rounds of ${RATE_DURATION}s at $RATE_USED req/s ($CONNS connections, oha --latency-correction) per target"
    for round in $(seq "$ROUNDS"); do
        for target in $(round_order "$round"); do
            out="$WORK/oha-$target-round$round.json"
            args=(--no-tui -z "${RATE_DURATION}s" -c "$CONNS" -q "$RATE_USED" --latency-correction "${OHA_FORMAT[@]}")
            if sends_credential "$target"; then args+=(-H "$AUTH"); fi
            "${NICE_CMD[@]}" taskset -c "$WRK_CPU" "$OHA" "${args[@]}" "${URL[$target]}" >"$out" 2>"$out.err" ||
                die "oha failed against $target: $(cat "$out.err")"
            read -r rps p50 p99 errors < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]; p = d["latencyPercentiles"]
codes = d.get("statusCodeDistribution", {})
bad = sum(n for c, n in codes.items() if not 200 <= int(c) < 300)
bad += sum(n for e, n in d.get("errorDistribution", {}).items() if "deadline" not in e)
print("%.1f %.2f %.2f %d" % (s["requestsPerSec"], (p["p50"] or 0) * 1e6, (p["p99"] or 0) * 1e6, bad))' "$out") ||
                die "cannot read oha's output in $out"
            FR_RPS[$target]+="$rps "
            FR_P50[$target]+="$p50 "
            FR_P99[$target]+="$p99 "
            FR_ERRORS[$target]+="$errors "
            say "  round $round  $(printf '%-8s' "$target") @$RATE_USED/s: $(printf '%9.0f' "$rps") req/s  p50 $(printf '%8.1f' "$p50") us  p99 $(printf '%8.1f' "$p99") us  errors $errors"
        done
    done
else
    say "$OHA_NOTE"
fi

# --- a shard killed mid-run -------------------------------------------------------

# A second gateway over two backend processes (shards a and b, k = 2, so the
# tenant's shuffle shard is both); wrk runs FAIL_DURATION seconds and backend
# b is killed (SIGKILL) FAIL_KILL_AT seconds in. Errors are counted, not fatal.
pick_port BACKEND_A_PORT
pick_port BACKEND_B_PORT
pick_port FAIL_PORT
pick_port FAIL_ADMIN_PORT
mkdir -p "$WORK/failover"
cp "$WORK/placement.key" "$WORK/tenants.toml" "$WORK/failover/"
launch_backend_a() {
    "${NICE_CMD[@]}" taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_A_PORT" --id a --workers 1 \
        >"$WORK/backend-a.log" 2>&1 &
    launched $! "http://127.0.0.1:$BACKEND_A_PORT/x" "$WORK/backend-a.log"
}
launch_backend_b() {
    "${NICE_CMD[@]}" taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_B_PORT" --id b --workers 1 \
        >"$WORK/backend-b.log" 2>&1 &
    launched $! "http://127.0.0.1:$BACKEND_B_PORT/x" "$WORK/backend-b.log"
}
launch_gateway_failover() {
    serve_in "$WORK/failover" "$FAIL_PORT" "$FAIL_ADMIN_PORT" "$WORK/gateway-failover.log" a="$BACKEND_A_PORT" b="$BACKEND_B_PORT"
    PROBE_ARGS=(-H "$AUTH")
}
start_server backend-a launch_backend_a BACKEND_A_PORT
BACKEND_A_PID=$LAUNCHED
start_server backend-b launch_backend_b BACKEND_B_PORT
BACKEND_B_PID=$LAUNCHED
start_server gateway-failover launch_gateway_failover FAIL_PORT FAIL_ADMIN_PORT
FAIL_GW_PID=$LAUNCHED
# Both shards must serve the tenant before the kill, or the run proves nothing.
for _ in $(seq 40); do
    curl -fsS -H "$AUTH" "http://127.0.0.1:$FAIL_PORT/x" 2>/dev/null
    echo
done >"$WORK/failover-before.txt"
FAIL_SHARDS_BEFORE=$(grep -o '"\(shard\|id\|backend\)":"[ab]"' "$WORK/failover-before.txt" | sort -u | paste -sd' ' - || true)
say "shard kill: wrk ${FAIL_DURATION}s at $CONNS connections on a gateway over backends a and b; b is killed at ${FAIL_KILL_AT}s (before: answers from ${FAIL_SHARDS_BEFORE:-?})"
out="$WORK/wrk-failover.txt"
"${NICE_CMD[@]}" taskset -c "$WRK_CPU" "$WRK" -t1 "-c$CONNS" "-d${FAIL_DURATION}s" --latency -H "$AUTH" \
    "http://127.0.0.1:$FAIL_PORT/x" >"$out" 2>&1 &
FAIL_WRK_PID=$!
sleep "$FAIL_KILL_AT"
kill -KILL "$BACKEND_B_PID"
wait "$BACKEND_B_PID" 2>/dev/null || true
forget_pid "$BACKEND_B_PID"
wait "$FAIL_WRK_PID" || die "wrk failed in the shard-kill run: $(cat "$out")"
FAIL_RPS=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
FAIL_REQUESTS=$(awk '/requests in/ { print $1 }' "$out")
FAIL_NON2XX=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
FAIL_NON2XX=${FAIL_NON2XX:-0}
read -r FAIL_CONNECT FAIL_READ FAIL_WRITE FAIL_TIMEOUT < <(awk '/Socket errors:/ {
    gsub(",", ""); print $4, $6, $8, $10 }' "$out") || true
FAIL_CONNECT=${FAIL_CONNECT:-0} FAIL_READ=${FAIL_READ:-0} FAIL_WRITE=${FAIL_WRITE:-0} FAIL_TIMEOUT=${FAIL_TIMEOUT:-0}
FAIL_SOCKET=$((FAIL_CONNECT + FAIL_READ + FAIL_WRITE + FAIL_TIMEOUT))
FAIL_P50=$(to_us "$(awk '$1 == "50%" { print $2 }' "$out")")
FAIL_P99=$(to_us "$(awk '$1 == "99%" { print $2 }' "$out")")
FAIL_MAX=$(to_us "$(awk '$1 == "Latency" { print $4 }' "$out")")
[[ -n $FAIL_RPS && -n $FAIL_REQUESTS ]] || die "cannot read wrk's output in $out"
# The tenant must still be served, by a alone, after the run.
curl -fsS -H "$AUTH" "http://127.0.0.1:$FAIL_PORT/x" >"$WORK/failover-after.txt" 2>&1 ||
    die "the gateway does not serve the tenant after backend b was killed: $(cat "$WORK/failover-after.txt")"
curl -fsS "http://127.0.0.1:$FAIL_ADMIN_PORT/metrics" >"$WORK/failover-metrics.txt" 2>/dev/null || true
say "  shard kill: $(printf '%.0f' "$FAIL_RPS") req/s, $FAIL_REQUESTS requests, $FAIL_NON2XX non-2xx, $FAIL_SOCKET socket errors (connect $FAIL_CONNECT, read $FAIL_READ, write $FAIL_WRITE, timeout $FAIL_TIMEOUT); p99 $FAIL_P99 us, max $FAIL_MAX us"
for pid in "$FAIL_GW_PID" "$BACKEND_A_PID"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    forget_pid "$pid"
done

# --- memory with many tenants -----------------------------------------------------

# A gateway with TENANTS_BIG tenants, each with its own API-key digest: the
# time from launch until it answers an authenticated request, then VmRSS.
pick_port BIG_PORT
pick_port BIG_ADMIN_PORT
mkdir -p "$WORK/big"
cp "$WORK/placement.key" "$WORK/big/"
BIG_KEY=$(python3 - "$WORK/big/tenants.toml" "$TENANTS_BIG" <<'PY'
import hashlib, os, sys
path, n = sys.argv[1], int(sys.argv[2])
salt = os.urandom(12).hex()
with open(path, "w") as f:
    for i in range(n):
        key = f"bench-{salt}-{i}"
        f.write(f'[[tenants]]\nid = "t{i:06d}"\napi_key_sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n\n')
print(f"bench-{salt}-{n - 1}")
PY
)
BIG_FILE_MB=$(awk -v b="$(stat -c %s "$WORK/big/tenants.toml")" 'BEGIN { printf "%.1f", b / 1048576 }')
say "memory: a gateway with $TENANTS_BIG tenants (tenants.toml $BIG_FILE_MB MB)"
# Polled every 20 ms, for at most 60 s, with the last tenant's key.
launch_gateway_big() {
    serve_in "$WORK/big" "$BIG_PORT" "$BIG_ADMIN_PORT" "$WORK/gateway-big.log" s0="$BACKEND_PORT" s1="$BACKEND_PORT"
    PROBE_ARGS=(-H "Authorization: Bearer $BIG_KEY")
    PROBE_INTERVAL=0.02
    PROBE_TRIES=3000
}
start_server gateway-big launch_gateway_big BIG_PORT BIG_ADMIN_PORT
BIG_PID=$LAUNCHED
BIG_STARTUP_S=$(since "$LAUNCH_START")
grep -q "\"tenant\":\"t$(printf '%06d' $((TENANTS_BIG - 1)))\"" "$WORK/gateway-big.probe" ||
    die "the $TENANTS_BIG-tenant gateway answered, but not for the last tenant: $(cat "$WORK/gateway-big.probe")"
BIG_RSS_KIB=$(rss_kib "$BIG_PID" VmRSS)
BIG_HWM_KIB=$(rss_kib "$BIG_PID" VmHWM)
# The allocator gives the pages freed after parsing back to the system
# lazily, as later allocations happen: the resident set once the gateway
# has served a little is the one it keeps.
sleep "$SETTLE_S"
for _ in $(seq 100); do
    curl -s -o /dev/null --max-time 5 -H "Authorization: Bearer $BIG_KEY" "http://127.0.0.1:$BIG_PORT/x" || true
done
BIG_SETTLED_KIB=$(rss_kib "$BIG_PID" VmRSS)
kib_mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
say "  $TENANTS_BIG tenants: answered after ${BIG_STARTUP_S}s; VmRSS $(kib_mb "$BIG_RSS_KIB") MiB (peak $(kib_mb "$BIG_HWM_KIB") MiB), $(kib_mb "$BIG_SETTLED_KIB") MiB ${SETTLE_S}s and 100 requests later; with 1 tenant: ${SMALL_STARTUP_S}s, VmRSS $(kib_mb "$SMALL_RSS_KIB") MiB"
kill -TERM "$BIG_PID" 2>/dev/null || true
wait "$BIG_PID" 2>/dev/null || true
forget_pid "$BIG_PID"

# PERF=1: where the proxies spend their CPU, from perf sampling during one
# more run at $CONNS connections each (not part of the numbers above).
profile() {
    local perf_bin target data pids wrk_pid
    perf_bin=$(find_tool perf)
    if [[ -z $perf_bin ]]; then
        say "PERF=1: perf is not installed (Debian: linux-perf); no profile"
        return
    fi
    local out="$RESULTS/gateway-perf.txt"
    mkdir -p "$RESULTS"
    {
        echo "perf profiles of each proxy during a ${DURATION}s run at $CONNS connections ($DATE_NOW, git $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))."
        echo "Self time by binary, then by symbol; sampling at 999 Hz; $PINNING."
    } >"$out"
    for target in nginx gateway; do
        data="$WORK/perf-$target.data"
        pids=$(echo ${PROXY_PIDS[$target]} | tr ' ' ',')
        local args=(-t1 "-c$CONNS" "-d$((DURATION + 1))s")
        [[ $target == gateway ]] && args+=(-H "$AUTH")
        "${NICE_CMD[@]}" taskset -c "$WRK_CPU" "$WRK" "${args[@]}" "${URL[$target]}" >"$WORK/wrk-$target-perf.txt" 2>&1 &
        wrk_pid=$!
        sleep 0.5
        "$perf_bin" record -q -F 999 -o "$data" -p "$pids" -- sleep "$DURATION" >/dev/null 2>&1 ||
            say "perf record failed for $target (perf_event_paranoid?)"
        wait "$wrk_pid" || true
        [[ -s $data ]] || continue
        {
            echo
            echo "== $target ($(awk '/^Requests\/sec:/ { print $2 }' "$WORK/wrk-$target-perf.txt") req/s while sampled): by binary"
            "$perf_bin" report -i "$data" --stdio --no-children --sort dso 2>/dev/null | grep -v '^#' | sed '/^$/d' | head -8 || true
            echo "== $target: top symbols"
            "$perf_bin" report -i "$data" --stdio --no-children --sort dso,sym 2>/dev/null | grep -v '^#' | sed '/^$/d' | head -40 || true
        } >>"$out"
    done
    say "wrote bench/results/gateway-perf.txt"
}
DATE_NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if [[ ${PERF:-0} == 1 ]]; then
    profile
fi

# --- report -------------------------------------------------------------------------

NPROC=$(nproc)
CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
CPU_MODEL=${CPU_MODEL:-unknown}
KERNEL=$(uname -r)
RUNTIME_S=$(since "$START")
MEMORY_GIB=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
RUSTC_VERSION=$(rustc --version 2>/dev/null || echo "rustc unknown")
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# Results and BENCHMARKS.md are written by the benchmarks themselves.
if [[ $GIT_REV != unknown ]] && ! git diff --quiet HEAD -- . ':(exclude)bench/results' ':(exclude)BENCHMARKS.md' 2>/dev/null; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
NGINX_VERSION=$("$NGINX" -v 2>&1 | sed 's|.*nginx/||')
HAPROXY_VERSION=$("$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $3 }')
WRK_VERSION=$("$WRK" --version 2>&1 | head -1 | awk '{ print $2 }' || true)
COMMAND="DURATION=$DURATION ROUNDS=$ROUNDS RATE=$RATE${NICE_CMD[*]:+ NICE=$NICE}$([[ $FORWARDING == plain ]] || echo " FORWARDING=$FORWARDING") bench/run.sh gateway"

read -ra PAIRED_RPS < <(paired "${RPS_ALL[gateway]}" "${RPS_ALL[nginx]}" ge)
read -ra PAIRED_P50 < <(paired "${P50_ALL[gateway]}" "${P50_ALL[nginx]}" le)
# What the gateway's fields cost, whoever sends them, and the gateway
# against an nginx that sends them too.
read -ra HEADERS_RPS < <(paired "${RPS_ALL[nginx-headers]}" "${RPS_ALL[nginx]}" ge)
read -ra HEADERS_P50 < <(paired "${P50_ALL[nginx-headers]}" "${P50_ALL[nginx]}" le)
read -ra VS_HEADERS_RPS < <(paired "${RPS_ALL[gateway]}" "${RPS_ALL[nginx-headers]}" ge)
read -ra VS_HEADERS_P50 < <(paired "${P50_ALL[gateway]}" "${P50_ALL[nginx-headers]}" le)
read -r NGINX_RPS _ _ < <(stats "${RPS_ALL[nginx]}")
read -r NGINX_P50 _ _ < <(stats "${P50_ALL[nginx]}")

fmt_int() { printf '%.0f' "$1"; }
fmt_us() { printf '%.0f µs' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

mkdir -p "$RESULTS"
CPU_HEADER=$(printf 'CPU %s/' "${WATCHED[@]}")
CPU_HEADER=${CPU_HEADER%/}
{
    echo "# Gateway benchmark"
    echo
    echo "$DATE · git $GIT_REV · $NPROC CPUs ($CPU_MODEL) · $MEMORY_GIB GiB · Linux $KERNEL · $RUSTC_VERSION · nginx $NGINX_VERSION · HAProxy $HAPROXY_VERSION · wrk $WRK_VERSION${OHA_VERSION:+ · oha $OHA_VERSION}"
    echo
    echo "Command: \`$COMMAND\` (warm-up ${WARMUP}s per target; the script took $(printf '%.0f' "$RUNTIME_S") s after the installs). Load average before/after: $LOAD_BEFORE / $LOAD_AFTER; background busy ($CPU_HEADER) with nothing running: $BACKGROUND."
    echo
    echo "Same backend (\`shuffle-shard backend --workers 1\`) behind every target; one worker each"
    echo "(gateway: serve --workers 1, a single-threaded event loop; nginx: worker_processes 1, upstream keepalive 64;"
    echo "HAProxy: nbthread 1, option http-keep-alive, http-reuse always); $PINNING."
    echo "The gateway's forwarding: FORWARDING=$FORWARDING ($([[ $FORWARDING == plain ]] && echo "no x-forwarded-for or x-forwarded-host, which the plain nginx and HAProxy configurations do not send either" || echo "the gateway's defaults, x-forwarded-for appended and x-forwarded-host")); it always sends x-shuffle-tenant and x-shuffle-shard, and never the client's Authorization."
    echo "\"${LABEL[nginx-headers]}\" is nginx configured to send the backend x-shuffle-tenant and x-shuffle-shard and to drop Authorization, as the gateway does; wrk sends it the gateway's request. It is not part of the target: it shows what those fields cost, whoever sends them."
    echo "Each round runs every target at $CONNS connections, then every target at 1, then at $HIGH_CONNS, starting one target further along each round; median [min–max] over $ROUNDS rounds."
    echo "req/s: \`wrk -t1 -c$CONNS -d${DURATION}s\`; p50: \`wrk -t1 -c1 -d${DURATION}s --latency\`; GET /x, every response checked 2xx."
    echo "Proxy CPU per request and the CPUs' busy share are measured during the $CONNS-connection run."
    echo
    echo "| target | req/s @$CONNS conns | p50 @1 conn | req/s vs nginx | p50 vs nginx | proxy CPU per request (kernel) | proxy's use of its core | busy $CPU_HEADER |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for target in "${TARGETS[@]}"; do
        read -r rm rlo rhi < <(stats "${RPS_ALL[$target]}")
        read -r pm plo phi < <(stats "${P50_ALL[$target]}")
        if [[ $target == backend ]]; then
            cpu="—"
            share="—"
        else
            read -r cm _ _ < <(stats "${PROXY_US_ALL[$target]}")
            read -r ck _ _ < <(stats "${PROXY_SYS_US_ALL[$target]}")
            read -r cs _ _ < <(stats "${PROXY_SHARE_ALL[$target]}")
            cpu=$(printf '%.1f µs (%.1f µs)' "$cm" "$ck")
            share="$cs%"
        fi
        busy=$(busy_median "$target" | sed 's/ /% \/ /g')
        echo "| ${LABEL[$target]} | $(fmt_int "$rm") [$(fmt_int "$rlo")–$(fmt_int "$rhi")] | $(fmt_us "$pm") [$(fmt_us "$plo")–$(fmt_us "$phi")] | $(ratio "$rm" "$NGINX_RPS")× | $(ratio "$pm" "$NGINX_P50")× | $cpu | $share | $busy% |"
    done
    read -r grm _ _ < <(stats "${RPS_ALL[gateway]}")
    read -r gpm _ _ < <(stats "${P50_ALL[gateway]}")
    echo
    rps_ok=$(awk -v g="$grm" -v n="$NGINX_RPS" 'BEGIN { print ((g >= n) ? "met" : "missed") }')
    p50_ok=$(awk -v g="$gpm" -v n="$NGINX_P50" 'BEGIN { print ((g <= n) ? "met" : "missed") }')
    echo "Target (issue 4): at least nginx's req/s — $rps_ok ($(ratio "$grm" "$NGINX_RPS")×); no more than nginx's p50 — $p50_ok ($(ratio "$gpm" "$NGINX_P50")×)."
    echo
    echo "Paired by round (a round runs every target at one connection count back to back, so the gateway's figure is taken within seconds of nginx's): the median of the per-round ratios is ${PAIRED_RPS[0]}× for req/s (at least nginx's in ${PAIRED_RPS[1]} of ${PAIRED_RPS[2]} rounds; bootstrap 95 % interval ${PAIRED_RPS[3]}–${PAIRED_RPS[4]}×) and ${PAIRED_P50[0]}× for p50 (no more than nginx's in ${PAIRED_P50[1]} of ${PAIRED_P50[2]} rounds; ${PAIRED_P50[3]}–${PAIRED_P50[4]}×). The target is judged on the medians above; these say how steady the comparison was: an interval that spans 1.00 means this run cannot tell the gateway and nginx apart."
    echo
    echo "What the gateway's fields cost the backend: nginx sending them served ${HEADERS_RPS[0]}× plain nginx's req/s (at least plain nginx's in ${HEADERS_RPS[1]} of ${HEADERS_RPS[2]} rounds; ${HEADERS_RPS[3]}–${HEADERS_RPS[4]}×) with ${HEADERS_P50[0]}× its p50, paired by round. Against that nginx, the gateway's paired ratios are ${VS_HEADERS_RPS[0]}× for req/s (at least its in ${VS_HEADERS_RPS[1]} of ${VS_HEADERS_RPS[2]} rounds) and ${VS_HEADERS_P50[0]}× for p50 (no more than its in ${VS_HEADERS_P50[1]} of ${VS_HEADERS_P50[2]})."
    echo
    echo "## By connection count"
    echo
    echo "\`wrk -t1 -cN -d${DURATION}s --latency\`, the same rounds as above; median [min–max] over $ROUNDS rounds."
    echo
    echo "| target | conns | req/s | p50 | p99 |"
    echo "|---|---:|---:|---:|---:|"
    for target in "${TARGETS[@]}"; do
        for c in "${CONN_COUNTS[@]}"; do
            read -r rm rlo rhi < <(stats "${RPS_AT[$target,$c]}")
            read -r pm plo phi < <(stats "${P50_AT[$target,$c]}")
            read -r qm qlo qhi < <(stats "${P99_AT[$target,$c]}")
            echo "| ${LABEL[$target]} | $c | $(fmt_int "$rm") [$(fmt_int "$rlo")–$(fmt_int "$rhi")] | $(fmt_us "$pm") [$(fmt_us "$plo")–$(fmt_us "$phi")] | $(fmt_us "$qm") [$(fmt_us "$qlo")–$(fmt_us "$qhi")] |"
        done
    done
    echo
    echo "## Fixed rate, corrected for coordinated omission"
    echo
    if [[ -n $OHA ]]; then
        echo "\`oha -z ${RATE_DURATION}s -c $CONNS -q $RATE_USED --latency-correction\` (oha $OHA_VERSION, $OHA${OHA_NOTE:+; $OHA_NOTE}): every target offered the same $RATE_USED req/s$([[ $RATE == auto ]] && echo ", half the slowest proxy's median peak at $CONNS connections"); latency counted from when each request was due. Median [min–max] over $ROUNDS rounds; errors are non-2xx answers plus failed requests, summed over the rounds."
        echo
        echo "| target | offered req/s | achieved req/s | p50 | p99 | errors |"
        echo "|---|---:|---:|---:|---:|---:|"
        for target in "${TARGETS[@]}"; do
            read -r rm rlo rhi < <(stats "${FR_RPS[$target]}")
            read -r pm plo phi < <(stats "${FR_P50[$target]}")
            read -r qm qlo qhi < <(stats "${FR_P99[$target]}")
            errs=$(printf '%s\n' ${FR_ERRORS[$target]} | awk '{ t += $1 } END { print t + 0 }')
            echo "| ${LABEL[$target]} | $RATE_USED | $(fmt_int "$rm") [$(fmt_int "$rlo")–$(fmt_int "$rhi")] | $(fmt_us "$pm") [$(fmt_us "$plo")–$(fmt_us "$phi")] | $(fmt_us "$qm") [$(fmt_us "$qlo")–$(fmt_us "$qhi")] | $errs |"
        done
    else
        echo "$OHA_NOTE"
    fi
    echo
    echo "## A shard killed mid-run"
    echo
    echo "A second gateway (serve --workers 1, k = 2, rendezvous) over two backend processes, shards a and b (\`backend --workers 1\`, both on CPU $BACKEND_CPU);"
    echo "\`wrk -t1 -c$CONNS -d${FAIL_DURATION}s --latency\`, backend b killed with SIGKILL ${FAIL_KILL_AT}s in. One run."
    echo "Before the kill the tenant was answered by: ${FAIL_SHARDS_BEFORE:-unknown}."
    echo
    echo "| req/s | requests | non-2xx | socket errors (connect/read/write/timeout) | p50 | p99 | max |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    echo "| $(fmt_int "$FAIL_RPS") | $FAIL_REQUESTS | $FAIL_NON2XX | $FAIL_SOCKET ($FAIL_CONNECT/$FAIL_READ/$FAIL_WRITE/$FAIL_TIMEOUT) | $(fmt_us "$FAIL_P50") | $(fmt_us "$FAIL_P99") | $(fmt_us "$FAIL_MAX") |"
    echo
    echo "## Memory with $TENANTS_BIG tenants"
    echo
    echo "| tenants configured | tenants.toml | launch to first answer | VmRSS after the first answer | VmRSS ${SETTLE_S} s and 100 requests later | VmHWM |"
    echo "|---:|---:|---:|---:|---:|---:|"
    echo "| 1 | — | ${SMALL_STARTUP_S} s | $(kib_mb "$SMALL_RSS_KIB") MiB | — | $(kib_mb "$SMALL_HWM_KIB") MiB |"
    echo "| $TENANTS_BIG | $BIG_FILE_MB MB | ${BIG_STARTUP_S} s | $(kib_mb "$BIG_RSS_KIB") MiB | $(kib_mb "$BIG_SETTLED_KIB") MiB | $(kib_mb "$BIG_HWM_KIB") MiB |"
    echo
    echo "Each tenant has its own API-key digest (SHA-256); the probe authenticates as the last one. Launch-to-answer includes process start and curl polling every 20 ms (1 tenant: 100 ms)."
    if ((START_RETRIES > 0)); then
        echo
        echo "A server found its address in use at start $START_RETRIES time(s) and was started again on new ports."
    fi
} >"$RESULTS/gateway.md"

json_list() { printf '%s\n' $1 | paste -sd, -; }
json_stats() {
    read -r m lo hi < <(stats "$1")
    printf '{"median": %s, "min": %s, "max": %s, "rounds": [%s]}' "$m" "$lo" "$hi" "$(json_list "$1")"
}
json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
{
    echo "{"
    echo "  \"benchmark\": \"gateway\","
    echo "  \"date\": $(json_string "$DATE"),"
    echo "  \"git_rev\": $(json_string "$GIT_REV"),"
    echo "  \"command\": $(json_string "$COMMAND"),"
    echo "  \"machine\": {\"nproc\": $NPROC, \"cpu_model\": $(json_string "$CPU_MODEL"), \"kernel\": $(json_string "$KERNEL"), \"memory_gib\": ${MEMORY_GIB:-null}, \"loadavg_before\": $(json_string "$LOAD_BEFORE"), \"loadavg_after\": $(json_string "$LOAD_AFTER"), \"background_busy\": $(json_string "$BACKGROUND")},"
    echo "  \"versions\": {\"rustc\": $(json_string "$RUSTC_VERSION"), \"nginx\": $(json_string "$NGINX_VERSION"), \"haproxy\": $(json_string "$HAPROXY_VERSION"), \"wrk\": $(json_string "$WRK_VERSION"), \"oha\": $(json_string "$OHA_VERSION")},"
    echo "  \"settings\": {\"duration_s\": $DURATION, \"rounds\": $ROUNDS, \"warmup_s\": $WARMUP, \"connections\": $CONNS, \"high_connections\": $HIGH_CONNS, \"rate\": $(json_string "$RATE"), \"rate_duration_s\": $RATE_DURATION, \"fail_duration_s\": $FAIL_DURATION, \"fail_kill_at_s\": $FAIL_KILL_AT, \"tenants_big\": $TENANTS_BIG, \"nice\": $NICE, \"forwarding\": $(json_string "$FORWARDING"), \"pinning\": $(json_string "$PINNING"), \"proxy_cpu\": $PROXY_CPU, \"backend_cpu\": $BACKEND_CPU, \"wrk_cpu\": $WRK_CPU},"
    echo "  \"port_retries\": $START_RETRIES,"
    echo "  \"targets\": ["
    last=${TARGETS[-1]}
    for target in "${TARGETS[@]}"; do
        busy="{"
        for i in "${!WATCHED[@]}"; do
            values=""
            for r in $(seq "$ROUNDS"); do
                read -ra fields <<<"${BUSY_ALL[$target,$r]}"
                values+="${fields[$i]} "
            done
            busy+="\"cpu${WATCHED[$i]}\": [$(json_list "$values")], "
        done
        busy="${busy%, }}"
        echo "    {"
        echo "      \"target\": \"$target\","
        echo "      \"label\": $(json_string "${LABEL[$target]}"),"
        echo "      \"requests_per_second_at_${CONNS}\": $(json_stats "${RPS_ALL[$target]}"),"
        echo "      \"p50_us_at_1\": $(json_stats "${P50_ALL[$target]}"),"
        echo "      \"p99_us_at_${CONNS}\": $(json_stats "${P99_32_ALL[$target]}"),"
        echo "      \"by_connections\": {"
        for c in "${CONN_COUNTS[@]}"; do
            sep=","
            [[ $c == "${CONN_COUNTS[-1]}" ]] && sep=""
            echo "        \"$c\": {\"requests_per_second\": $(json_stats "${RPS_AT[$target,$c]}"), \"p50_us\": $(json_stats "${P50_AT[$target,$c]}"), \"p99_us\": $(json_stats "${P99_AT[$target,$c]}")}$sep"
        done
        echo "      },"
        if [[ -n $OHA ]]; then
            echo "      \"fixed_rate\": {\"offered_per_second\": $RATE_USED, \"connections\": $CONNS, \"achieved_per_second\": $(json_stats "${FR_RPS[$target]}"), \"p50_us\": $(json_stats "${FR_P50[$target]}"), \"p99_us\": $(json_stats "${FR_P99[$target]}"), \"errors\": [$(json_list "${FR_ERRORS[$target]}")]},"
        else
            echo "      \"fixed_rate\": null,"
        fi
        if [[ $target != backend ]]; then
            echo "      \"proxy_cpu_us_per_request_at_${CONNS}\": $(json_stats "${PROXY_US_ALL[$target]}"),"
            echo "      \"proxy_kernel_cpu_us_per_request_at_${CONNS}\": $(json_stats "${PROXY_SYS_US_ALL[$target]}"),"
            echo "      \"proxy_cpu_percent_of_one_core_at_${CONNS}\": $(json_stats "${PROXY_SHARE_ALL[$target]}"),"
        fi
        echo "      \"backend_cpu_us_per_request_at_${CONNS}\": $(json_stats "${BACKEND_US_ALL[$target]}"),"
        echo "      \"cpu_busy_percent_at_${CONNS}\": $busy"
        if [[ $target == "$last" ]]; then echo "    }"; else echo "    },"; fi
    done
    echo "  ],"
    echo "  \"gateway_vs_nginx_paired\": {\"requests_per_second_ratio_median\": ${PAIRED_RPS[0]}, \"requests_per_second_ratio_interval95\": [${PAIRED_RPS[3]}, ${PAIRED_RPS[4]}], \"rounds_at_least_nginx\": ${PAIRED_RPS[1]}, \"p50_ratio_median\": ${PAIRED_P50[0]}, \"p50_ratio_interval95\": [${PAIRED_P50[3]}, ${PAIRED_P50[4]}], \"rounds_at_most_nginx\": ${PAIRED_P50[1]}, \"rounds\": ${PAIRED_RPS[2]}},"
    echo "  \"nginx_headers_vs_nginx_paired\": {\"requests_per_second_ratio_median\": ${HEADERS_RPS[0]}, \"requests_per_second_ratio_interval95\": [${HEADERS_RPS[3]}, ${HEADERS_RPS[4]}], \"rounds_at_least_nginx\": ${HEADERS_RPS[1]}, \"p50_ratio_median\": ${HEADERS_P50[0]}, \"rounds_at_most_nginx\": ${HEADERS_P50[1]}, \"rounds\": ${HEADERS_RPS[2]}},"
    echo "  \"gateway_vs_nginx_headers_paired\": {\"requests_per_second_ratio_median\": ${VS_HEADERS_RPS[0]}, \"rounds_at_least\": ${VS_HEADERS_RPS[1]}, \"p50_ratio_median\": ${VS_HEADERS_P50[0]}, \"rounds_at_most\": ${VS_HEADERS_P50[1]}, \"rounds\": ${VS_HEADERS_RPS[2]}},"
    echo "  \"fixed_rate_note\": $(json_string "${OHA_NOTE:-}"),"
    echo "  \"shard_kill\": {\"duration_s\": $FAIL_DURATION, \"kill_at_s\": $FAIL_KILL_AT, \"connections\": $CONNS, \"answered_by_before\": $(json_string "$FAIL_SHARDS_BEFORE"), \"requests_per_second\": $FAIL_RPS, \"requests\": $FAIL_REQUESTS, \"non_2xx\": $FAIL_NON2XX, \"socket_errors\": {\"connect\": $FAIL_CONNECT, \"read\": $FAIL_READ, \"write\": $FAIL_WRITE, \"timeout\": $FAIL_TIMEOUT, \"total\": $FAIL_SOCKET}, \"p50_us\": $FAIL_P50, \"p99_us\": $FAIL_P99, \"max_us\": $FAIL_MAX},"
    echo "  \"memory\": {"
    echo "    \"one_tenant\": {\"startup_s\": $SMALL_STARTUP_S, \"vm_rss_kib\": $SMALL_RSS_KIB, \"vm_hwm_kib\": $SMALL_HWM_KIB},"
    echo "    \"many_tenants\": {\"tenants\": $TENANTS_BIG, \"tenants_file_mb\": $BIG_FILE_MB, \"startup_s\": $BIG_STARTUP_S, \"vm_rss_kib\": $BIG_RSS_KIB, \"vm_rss_settled_kib\": $BIG_SETTLED_KIB, \"settle_s\": $SETTLE_S, \"vm_hwm_kib\": $BIG_HWM_KIB}"
    echo "  },"
    echo "  \"runtime_s\": $RUNTIME_S"
    echo "}"
} >"$RESULTS/gateway.json"

echo
cat "$RESULTS/gateway.md"
echo
echo "Wrote bench/results/gateway.md and bench/results/gateway.json."
