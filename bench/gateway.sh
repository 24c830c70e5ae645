#!/usr/bin/env bash
# Gateway benchmark: requests/s at 32 connections and p50 latency at 1 connection for the backend direct, nginx as a reverse proxy and the shuffle-shard gateway, same backend, one worker each, same run.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/gateway.sh                    # or: bench/run.sh gateway
#   DURATION=5 ROUNDS=3 WARMUP=2 bench/gateway.sh
#
# Writes bench/results/gateway.md and bench/results/gateway.json and prints
# the table. Loopback only; stops by itself; every process it starts is
# stopped on exit. See bench/README.md for what is measured and why.
set -Eeuo pipefail
trap 'echo "bench/gateway.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-5}   # seconds per measured wrk run
ROUNDS=${ROUNDS:-3}       # rounds; each round runs every target once
WARMUP=${WARMUP:-2}       # seconds of warm-up per target
CONNS=${CONNS:-32}        # connections for the throughput run
NICE=${NICE:-0}           # e.g. -19 (root only) to run everything benchmarked ahead of other load

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/gateway.sh: error: $*"
    exit 1
}

for value in DURATION ROUNDS WARMUP CONNS; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
[[ $NICE =~ ^-?[0-9]+$ ]] || die "NICE must be a whole number, not '$NICE'"
NICE_CMD=()
if ((NICE != 0)); then
    ((NICE > 0 || EUID == 0)) || die "NICE=$NICE needs root"
    NICE_CMD=(nice -n "$NICE")
fi

# --- tools ------------------------------------------------------------------

# nginx lives in /usr/sbin, which is not on every user's PATH.
find_tool() {
    command -v "$1" 2>/dev/null || { [[ -x /usr/sbin/$1 ]] && echo "/usr/sbin/$1"; } || true
}

install_missing() {
    local missing=()
    [[ -n $(find_tool nginx) ]] || missing+=(nginx)
    [[ -n $(find_tool wrk) ]] || missing+=(wrk)
    [[ -n $(find_tool taskset) ]] || missing+=(util-linux)
    [[ -n $(find_tool curl) ]] || missing+=(curl)
    ((${#missing[@]} == 0)) && return
    command -v apt-get >/dev/null || die "missing ${missing[*]}; install them (no apt-get here)"
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "missing ${missing[*]}; run as root or install sudo"
        sudo=(sudo)
    fi
    # Refresh the package lists only when one of the packages is unknown.
    local package
    for package in "${missing[@]}"; do
        if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            say "updating the package lists (apt-get update)"
            "${sudo[@]}" apt-get update -qq
            break
        fi
    done
    say "installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_missing
NGINX=$(find_tool nginx)
WRK=$(find_tool wrk)

say "building: cargo build --release -p shuffle-shard-cli"
cargo build --release -p shuffle-shard-cli >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/shuffle-shard"
[[ -x $BIN ]] || die "$BIN was not built"

# --- CPUs: one for the proxy, one for the backend, wrk where it fits ---------

allowed_cpus() {
    local range lo hi
    local list
    list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
    IFS=, read -ra ranges <<<"$list"
    for range in "${ranges[@]}"; do
        lo=${range%-*}
        hi=${range#*-}
        seq "$lo" "$hi"
    done
}
mapfile -t CPUS < <(allowed_cpus)
case ${#CPUS[@]} in
    1) PROXY_CPU=${CPUS[0]} BACKEND_CPU=${CPUS[0]} WRK_CPU=${CPUS[0]} ;;
    2) PROXY_CPU=${CPUS[0]} BACKEND_CPU=${CPUS[1]} WRK_CPU=${CPUS[1]} ;;
    *) PROXY_CPU=${CPUS[0]} BACKEND_CPU=${CPUS[1]} WRK_CPU=${CPUS[2]} ;;
esac
PINNING="proxy (nginx or gateway) on CPU $PROXY_CPU, backend on CPU $BACKEND_CPU, wrk on CPU $WRK_CPU"
if ((${#CPUS[@]} == 1)); then
    PINNING="$PINNING (1 CPU available: everything shares it)"
elif ((${#CPUS[@]} == 2)); then
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
trap 'exit 130' INT
trap 'exit 143' TERM

USED_PORTS=" "
free_port() {
    local port
    for _ in $(seq 200); do
        port=$((20000 + RANDOM % 40000))
        [[ $USED_PORTS == *" $port "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            USED_PORTS+="$port "
            echo "$port"
            return
        fi
    done
    die "no free port found on 127.0.0.1"
}

hex_random() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

BACKEND_PORT=$(free_port)
NGINX_PORT=$(free_port)
GATEWAY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
API_KEY="bench-$(hex_random 24)"

head -c 32 /dev/urandom >"$WORK/placement.key"
cat >"$WORK/tenants.toml" <<EOF
[[tenants]]
id = "bench"
api_key_sha256 = "$(printf %s "$API_KEY" | sha256sum | cut -d' ' -f1)"
EOF
# Two shards, distinct ids, one backend process: the gateway does exactly
# what it does in production (k = 2 of 2, rendezvous, failover candidates),
# while the backend is the very one the other targets use.
cat >"$WORK/gateway.toml" <<EOF
listen = "127.0.0.1:$GATEWAY_PORT"
tenants_file = "tenants.toml"

[placement]
algorithm = "rendezvous"
k = 2
key_file = "placement.key"
key_version = "bench"

[admin]
listen = "127.0.0.1:$ADMIN_PORT"

[[cells]]
name = "default"
shards = [
  { id = "s0", url = "http://127.0.0.1:$BACKEND_PORT" },
  { id = "s1", url = "http://127.0.0.1:$BACKEND_PORT" },
]
EOF
mkdir -p "$WORK/nginx"
# keepalive_requests is raised on both sides so nginx, like the gateway,
# never closes a busy keep-alive connection mid-run.
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;

events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    keepalive_requests 1000000;

    upstream backend {
        server 127.0.0.1:$BACKEND_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }

    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF

# --- start the three processes ---------------------------------------------------

# Waits until GET $1 answers 2xx (extra arguments go to curl), or fails.
wait_ready() {
    local url=$1 pid=$2 name=$3
    shift 3
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || die "$name exited at start; see $WORK/$name.log"
        if curl -fsS -o "$WORK/$name.probe" "$@" "$url" 2>/dev/null; then
            return
        fi
        sleep 0.1
    done
    die "$name did not answer $url within 20 s; see $WORK/$name.log"
}

"${NICE_CMD[@]}" taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1 \
    >"$WORK/backend.log" 2>&1 &
BACKEND_PID=$!
PIDS+=("$BACKEND_PID")
wait_ready "http://127.0.0.1:$BACKEND_PORT/x" "$BACKEND_PID" backend

"${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" \
    >"$WORK/nginx.log" 2>&1 &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
wait_ready "http://127.0.0.1:$NGINX_PORT/x" "$NGINX_PID" nginx

"${NICE_CMD[@]}" taskset -c "$PROXY_CPU" "$BIN" serve --workers 1 --config "$WORK/gateway.toml" \
    >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
AUTH="Authorization: Bearer $API_KEY"
wait_ready "http://127.0.0.1:$GATEWAY_PORT/x" "$GATEWAY_PID" gateway -H "$AUTH"
grep -q '"tenant":"bench"' "$WORK/gateway.probe" ||
    die "the gateway answered, but not with the backend's body for tenant bench: $(cat "$WORK/gateway.probe")"

# One worker each: the tokio runtime names its workers tokio-rt-worker; the
# gateway with --workers 1 runs a single-threaded event loop on its main
# thread, so it has none.
workers_of() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c '^tokio-rt-worker' || true; }
GATEWAY_WORKERS=$(workers_of "$GATEWAY_PID")
BACKEND_WORKERS=$(workers_of "$BACKEND_PID")
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | wc -l)
[[ $GATEWAY_WORKERS == 0 ]] || die "the gateway runs $GATEWAY_WORKERS multi-threaded tokio workers; --workers 1 should give a single-threaded event loop"
[[ $BACKEND_WORKERS == 1 ]] || die "the backend runs $BACKEND_WORKERS tokio workers, not 1"
[[ $NGINX_WORKERS == 1 ]] || die "nginx runs $NGINX_WORKERS worker processes, not 1"

# --- measuring -----------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# CPU time (clock ticks) used so far by processes, all threads: the total
# with CPU_FIELD=all, kernel time only with CPU_FIELD=system.
cpu_ticks() {
    local total=0 pid expression='$14 + $15'
    [[ ${CPU_FIELD:-all} == system ]] && expression='$15'
    for pid in "$@"; do
        total=$((total + $(awk "{ print $expression }" /proc/"$pid"/stat 2>/dev/null || echo 0)))
    done
    echo "$total"
}

# Microseconds of CPU per request from a tick count.
per_request_us() {
    awk -v t="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN { printf "%.2f", t * 1000000 / hz / n }'
}

# "busy total" jiffies of one CPU from /proc/stat.
cpu_jiffies() {
    awk -v cpu="cpu$1" '$1 == cpu { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}

# Latency as wrk prints it (12.34us, 1.20ms, 1.00s) in microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) f = 1; else if (v ~ /ms$/) f = 1000; else if (v ~ /s$/) f = 1000000; else f = -1;
        sub(/[a-z]+$/, "", v);
        if (f < 0) exit 1;
        printf "%.2f\n", v * f }'
}

declare -A URL=(
    [backend]="http://127.0.0.1:$BACKEND_PORT/x"
    [nginx]="http://127.0.0.1:$NGINX_PORT/x"
    [gateway]="http://127.0.0.1:$GATEWAY_PORT/x"
)
declare -A PROXY_PIDS=(
    [backend]=""
    [nginx]="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"
    [gateway]="$GATEWAY_PID"
)
TARGETS=(backend nginx gateway)
declare -A LABEL=(
    [backend]="backend direct"
    [nginx]="nginx $("$NGINX" -v 2>&1 | sed 's|.*nginx/||') (reverse proxy)"
    [gateway]="shuffle-shard gateway"
)

# Runs wrk once against a target and checks every response was a 2xx.
# Sets RPS, P50_US, P99_US and REQUESTS.
run_wrk() {
    local target=$1 conns=$2 seconds=$3 tag=$4
    local out="$WORK/wrk-$target-$tag.txt"
    local args=(-t1 "-c$conns" "-d${seconds}s" --latency)
    [[ $target == gateway ]] && args+=(-H "$AUTH")
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

# One measured round for one target: the throughput run (with CPU
# accounting) and the single-connection latency run.
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
    BUSY_ALL[$target,$round]=$busy
    PROXY_US_ALL[$target]+="$(per_request_us $((proxy_after - proxy_before)) "$REQUESTS") "
    PROXY_SYS_US_ALL[$target]+="$(per_request_us $((proxy_sys_after - proxy_sys_before)) "$REQUESTS") "
    PROXY_SHARE_ALL[$target]+="$(awk -v t=$((proxy_after - proxy_before)) -v hz="$CLK_TCK" -v d="$DURATION" \
        'BEGIN { printf "%.0f", 100 * t / hz / d }') "
    BACKEND_US_ALL[$target]+="$(per_request_us $((backend_after - backend_before)) "$REQUESTS") "
    say "  round $round  $(printf '%-8s' "$target") ${CONNS} conns: $(printf '%9.0f' "$RPS") req/s  (CPU busy % $(printf '%s' "$busy"| sed 's/ $//' | tr ' ' '/'))"

    run_wrk "$target" 1 "$DURATION" "c1-round$round"
    P50_ALL[$target]+="$P50_US "
    say "  round $round  $(printf '%-8s' "$target") 1 conn:   p50 $(printf '%8.1f' "$P50_US") us"
}

# median min max of a list of numbers.
stats() {
    printf '%s\n' $1 | sort -g | awk '{ a[NR] = $1 } END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
        print m, a[1], a[NR] }'
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
say "measuring: $ROUNDS rounds of ${DURATION}s at $CONNS connections and ${DURATION}s at 1 connection per target"
for round in $(seq "$ROUNDS"); do
    for target in "${TARGETS[@]}"; do
        measure "$target" "$round"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

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
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ $GIT_REV != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
NGINX_VERSION=$("$NGINX" -v 2>&1 | sed 's|.*nginx/||')
WRK_VERSION=$("$WRK" --version 2>&1 | head -1 | awk '{ print $2 }' || true)
COMMAND="DURATION=$DURATION ROUNDS=$ROUNDS${NICE_CMD[*]:+ NICE=$NICE} bench/run.sh gateway"

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
    echo "$DATE · git $GIT_REV · $NPROC CPUs ($CPU_MODEL) · Linux $KERNEL · nginx $NGINX_VERSION · wrk $WRK_VERSION"
    echo
    echo "Command: \`$COMMAND\` (warm-up ${WARMUP}s per target). Load average before/after: $LOAD_BEFORE / $LOAD_AFTER; background busy ($CPU_HEADER) with nothing running: $BACKGROUND."
    echo
    echo "Same backend (\`shuffle-shard backend --workers 1\`) behind every target; one worker each"
    echo "(gateway: serve --workers 1, a single-threaded event loop; nginx: worker_processes 1, upstream keepalive 64); $PINNING."
    echo "Each round runs every target in turn; median [min–max] over $ROUNDS rounds."
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
    echo "  \"machine\": {\"nproc\": $NPROC, \"cpu_model\": $(json_string "$CPU_MODEL"), \"kernel\": $(json_string "$KERNEL"), \"loadavg_before\": $(json_string "$LOAD_BEFORE"), \"loadavg_after\": $(json_string "$LOAD_AFTER"), \"background_busy\": $(json_string "$BACKGROUND")},"
    echo "  \"versions\": {\"nginx\": $(json_string "$NGINX_VERSION"), \"wrk\": $(json_string "$WRK_VERSION")},"
    echo "  \"settings\": {\"duration_s\": $DURATION, \"rounds\": $ROUNDS, \"warmup_s\": $WARMUP, \"connections\": $CONNS, \"nice\": $NICE, \"pinning\": $(json_string "$PINNING"), \"proxy_cpu\": $PROXY_CPU, \"backend_cpu\": $BACKEND_CPU, \"wrk_cpu\": $WRK_CPU},"
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
        if [[ $target != backend ]]; then
            echo "      \"proxy_cpu_us_per_request_at_${CONNS}\": $(json_stats "${PROXY_US_ALL[$target]}"),"
            echo "      \"proxy_kernel_cpu_us_per_request_at_${CONNS}\": $(json_stats "${PROXY_SYS_US_ALL[$target]}"),"
            echo "      \"proxy_cpu_percent_of_one_core_at_${CONNS}\": $(json_stats "${PROXY_SHARE_ALL[$target]}"),"
        fi
        echo "      \"backend_cpu_us_per_request_at_${CONNS}\": $(json_stats "${BACKEND_US_ALL[$target]}"),"
        echo "      \"cpu_busy_percent_at_${CONNS}\": $busy"
        if [[ $target == "$last" ]]; then echo "    }"; else echo "    },"; fi
    done
    echo "  ]"
    echo "}"
} >"$RESULTS/gateway.json"

echo
cat "$RESULTS/gateway.md"
echo
echo "Wrote bench/results/gateway.md and bench/results/gateway.json."
