#!/usr/bin/env bash
# Noisy-neighbour benchmark (issue 20): does a rate-limited tenant sending at 10× its limit reduce the other tenants' throughput? One gateway, several shards, several quiet tenants under a fixed closed-loop load; rounds alternate (A) the quiet load alone and (B) the same quiet load while the noisy tenant floods; the quiet tenants' requests/s, p50 and p99 in B ÷ A as paired ratios with bootstrap intervals, and the share of the noisy tenant's requests refused with 429.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/noisy.sh                               # or: bench/run.sh noisy
#   DURATION=5 ROUNDS=12 bench/noisy.sh          # longer and more rounds: narrower intervals
#   DURATION=1 ROUNDS=2 WARMUP=1 bench/noisy.sh  # a smoke run (its numbers mean nothing)
#
# Writes bench/results/noisy.md and bench/results/noisy.json and prints the
# table. Loopback only; every process it starts is stopped on exit. See
# bench/README.md ("noisy.sh") for what is measured and why.
#
# Why the set-up is what it is:
#
# - One `shuffle-shard serve --workers 1` (one event loop, like the other
#   suites' gateway) with k = 2 over SHARDS shard ids, each its own
#   `shuffle-shard backend --workers 1`, FORWARDING=plain as in
#   bench/gateway.sh. QUIET tenants and one noisy tenant, each with its own
#   API key; the noisy tenant's entry in the tenants file sets
#   `requests_per_second = RATE` and `burst = RATE` (docs/gateway.md,
#   "Per-tenant limits"); the quiet tenants have no limit.
# - Quiet load: one `h2load --h1 -t1 -cQUIET_CONNS` per quiet tenant, all at
#   once, closed loop (each connection sends its next request when the last
#   is answered), for DURATION seconds. Every quiet request must be 2xx, or
#   the script stops: a quiet tenant refused is a failure, not a figure.
#   requests/s is the sum over the quiet tenants; p50 and p99 come from
#   h2load's per-request logs (`--log-file`) merged.
# - Noisy load: `h2load --h1 -t1 -cNOISY_CONNS --rps` at FACTOR × RATE in
#   all, an open-loop fixed rate (each client sends at its rate whatever
#   the answers), started a second before the quiet load and ending a
#   second after it, so the quiet load meets the flood at its steady state
#   (bucket already drained). Its answers are counted by status; the share
#   of 429 expected is 1 − (burst + RATE × its run time) ÷ its requests.
# - Rounds: A (quiet alone) and B (quiet with the flood) back to back, A
#   first in odd rounds and B first in even ones, so a drift of the
#   machine's speed does not always favour one phase. The ratios are the
#   median of the per-round ratios B/A with a bootstrap 95 % interval
#   (bench/lib/paired_ci.py).
# - Pinning as bench/gateway.sh: the gateway on the first CPU, the backends
#   on the second, the h2load processes on a third when there is one, else
#   beside the backends. On 2 CPUs the flood's client shares the quiet
#   clients' CPU and the 429s cost the gateway's CPU: a real cost of a
#   flood, measured here, not subtracted (the report gives the gateway's
#   CPU in both phases).
set -Eeuo pipefail
trap 'echo "bench/noisy.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-3}         # seconds of quiet load per phase
ROUNDS=${ROUNDS:-8}             # rounds; each runs phase A and phase B once
WARMUP=${WARMUP:-2}             # seconds of quiet load before the rounds
SHARDS=${SHARDS:-4}             # shard ids, each its own backend process
QUIET=${QUIET:-3}               # quiet tenants
QUIET_CONNS=${QUIET_CONNS:-4}   # connections per quiet tenant
QUIET_RATE=${QUIET_RATE:-}      # unset: each quiet connection is a closed loop (as fast as answers come); set: each quiet tenant sends QUIET_RATE requests/s open loop (split over its connections)
RATE=${RATE:-200}               # the noisy tenant's requests_per_second (and burst)
FACTOR=${FACTOR:-10}            # the noisy tenant sends FACTOR × RATE requests/s
NOISY_CONNS=${NOISY_CONNS:-10}  # the noisy tenant's connections, each at FACTOR × RATE ÷ NOISY_CONNS requests/s
NOISY_CPU=${NOISY_CPU:-}        # the CPU the flood's h2load runs on (default: the quiet clients'); 0 puts it beside the gateway

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/noisy.sh: error: $*"
    exit 1
}

for value in DURATION ROUNDS WARMUP SHARDS QUIET QUIET_CONNS RATE FACTOR NOISY_CONNS ${QUIET_RATE:+QUIET_RATE}; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
((SHARDS >= 2)) || die "SHARDS must be at least 2 (the gateway places each tenant on k = 2 shards), not $SHARDS"
((RATE * FACTOR % NOISY_CONNS == 0)) ||
    die "FACTOR × RATE ($((RATE * FACTOR))) must divide evenly among NOISY_CONNS ($NOISY_CONNS) connections (h2load's --rps is per connection); pick another NOISY_CONNS"
PER_CONN_RPS=$((RATE * FACTOR / NOISY_CONNS))
QUIET_ARGS=() QUIET_LOOP="closed loop" RESULT_NAME=noisy
if [[ -n $QUIET_RATE ]]; then
    ((QUIET_RATE % QUIET_CONNS == 0)) ||
        die "QUIET_RATE ($QUIET_RATE) must divide evenly among QUIET_CONNS ($QUIET_CONNS) connections (h2load's --rps is per connection); pick another QUIET_CONNS"
    QUIET_ARGS=(--rps $((QUIET_RATE / QUIET_CONNS)))
    QUIET_LOOP="open loop at $QUIET_RATE requests/s"
    RESULT_NAME=noisy-open
fi
NOISY_SECONDS=$((DURATION + 2))

# --- tools ------------------------------------------------------------------------

# shellcheck source=bench/lib/apt.sh
source "$ROOT/bench/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$ROOT/bench/lib/proxies.sh"
missing=()
[[ -n $(find_tool h2load) ]] || missing+=(nghttp2-client)
[[ -n $(find_tool taskset) ]] || missing+=(util-linux)
[[ -n $(find_tool curl) ]] || missing+=(curl)
[[ -n $(find_tool python3) ]] || missing+=(python3)
apt_install "${missing[@]}"
H2LOAD=$(find_tool h2load)

START=$EPOCHREALTIME
build_cli
pin_cpus
if [[ -z $NOISY_CPU ]]; then
    NOISY_CPU=$WRK_CPU
    PINNING="gateway on CPU $PROXY_CPU, backends on CPU $BACKEND_CPU, h2load (quiet and noisy) on CPU $WRK_CPU"
else
    if ! [[ $NOISY_CPU =~ ^[0-9]+$ ]] || ! allowed_cpus | grep -qx "$NOISY_CPU"; then
        die "NOISY_CPU=$NOISY_CPU is not a CPU this process may run on; pick one of: $(allowed_cpus | tr '\n' ' ')"
    fi
    PINNING="gateway on CPU $PROXY_CPU, backends on CPU $BACKEND_CPU, the quiet h2loads on CPU $WRK_CPU, the noisy h2load on CPU $NOISY_CPU"
fi
if ((CPU_COUNT == 1)); then
    PINNING="$PINNING (1 CPU available: everything shares it)"
elif ((CPU_COUNT == 2)); then
    PINNING="$PINNING (2 CPUs available: h2load shares the backends')"
fi

scratch_dir noisy
pick_port GATEWAY_PORT
pick_port GATEWAY_ADMIN_PORT
declare -a BACKEND_PORTS SHARD_ARGS
for i in $(seq 0 $((SHARDS - 1))); do
    pick_port SHARD_PORT # not "port": pick_port's own local would shadow it
    BACKEND_PORTS+=("$SHARD_PORT")
    SHARD_ARGS+=("s$i=$SHARD_PORT")
done

# --- tenants, backends, the gateway ------------------------------------------------------

# A key as long as the other suites' (54 bytes); only its digest is stored.
new_key() { echo "bench-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
digest() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
mkdir -p "$WORK/gateway"
head -c 32 /dev/urandom >"$WORK/gateway/placement.key"
declare -a QUIET_KEYS
: >"$WORK/gateway/tenants.toml"
for i in $(seq 1 "$QUIET"); do
    QUIET_KEYS+=("$(new_key)")
    printf '[[tenants]]\nid = "quiet-%d"\napi_key_sha256 = "%s"\n\n' "$i" "$(digest "${QUIET_KEYS[-1]}")" >>"$WORK/gateway/tenants.toml"
done
NOISY_KEY=$(new_key)
printf '[[tenants]]\nid = "noisy"\napi_key_sha256 = "%s"\nrequests_per_second = %d\nburst = %d\n' \
    "$(digest "$NOISY_KEY")" "$RATE" "$RATE" >>"$WORK/gateway/tenants.toml"

BACKEND_PIDS=""
for i in "${!BACKEND_PORTS[@]}"; do
    taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:${BACKEND_PORTS[$i]}" --id "s$i" --workers 1 \
        >"$WORK/backend-s$i.log" 2>&1 &
    PIDS+=($!)
    BACKEND_PIDS+=" $!"
done
for i in "${!BACKEND_PORTS[@]}"; do
    ready "backend s$i" "http://127.0.0.1:${BACKEND_PORTS[$i]}/x" 10
done

gateway_toml "$WORK/gateway/gateway.toml" "$GATEWAY_PORT" "$GATEWAY_ADMIN_PORT" "${SHARD_ARGS[@]}"
(cd "$WORK/gateway" && exec taskset -c "$PROXY_CPU" "$BIN" serve --workers 1 --config gateway.toml) \
    >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
GATEWAY_PID=$!
URL="http://127.0.0.1:$GATEWAY_PORT/x"
for i in "${!QUIET_KEYS[@]}"; do
    ready "gateway (quiet-$((i + 1)))" "$URL" 10 -H "Authorization: Bearer ${QUIET_KEYS[$i]}"
done
ready "gateway (noisy)" "$URL" 10 -H "Authorization: Bearer $NOISY_KEY"

# Which shards each tenant landed on, from the backend's answer (its
# "shard" field), for the report: a quiet tenant sharing a shard with the
# noisy one is the case that matters.
subset() {
    local key=$1 seen="" out
    for _ in $(seq 40); do
        out=$(curl -fsS --max-time 2 -H "Authorization: Bearer $key" "$URL" 2>/dev/null | grep -o '"shard":"[^"]*"' | cut -d'"' -f4) || true
        [[ -z $out || " $seen " == *" $out "* ]] || seen="$seen $out"
    done
    tr ' ' '\n' <<<"$seen" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//'
}
# The noisy tenant's limit really refuses: 5 × RATE requests as fast as
# h2load sends them must meet 429 (asked before the subsets, so its bucket
# is full; curl processes are too slow to outrun the refill).
out=$("$H2LOAD" --h1 -t1 -c8 -m1 -n $((RATE * 5)) -H "Authorization: Bearer $NOISY_KEY" "$URL" 2>&1) ||
    die "h2load failed against the gateway as the noisy tenant: $out"
refused=$(awk '/^status codes:/ { print $7 }' <<<"$out")
((${refused:-0} > 0)) || die "the noisy tenant sent $((RATE * 5)) requests at once and none got 429: the limit is not in force; see $WORK/gateway/tenants.toml and $WORK/gateway.log ($out)"
SUBSETS="noisy: $(subset "$NOISY_KEY")"
for i in "${!QUIET_KEYS[@]}"; do
    SUBSETS="$SUBSETS; quiet-$((i + 1)): $(subset "${QUIET_KEYS[$i]}")"
done
say "subsets (k = 2 of $SHARDS shards, as the backends report them): $SUBSETS"

# --- measuring ---------------------------------------------------------------------------

RUNS="$WORK/runs.jsonl"
: >"$RUNS"

# quiet_load SECONDS [log]: every quiet tenant's h2load at once; checks that
# every answer was 2xx and sets QUIET_RPS and QUIET_REQUESTS, and with log
# P50_US and P99_US from the merged per-request logs.
quiet_load() {
    local seconds=$1 log=${2:-} i pids=() out rps requests not2xx
    for i in "${!QUIET_KEYS[@]}"; do
        local -a args=(--h1 -t1 "-c$QUIET_CONNS" -m1 "${QUIET_ARGS[@]}" -D "$seconds" -H "Authorization: Bearer ${QUIET_KEYS[$i]}")
        [[ -z $log ]] || args+=(--log-file "$WORK/quiet-$i.log")
        taskset -c "$WRK_CPU" "$H2LOAD" "${args[@]}" "$URL" >"$WORK/quiet-$i.out" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || die "h2load for quiet-$((i + 1)) failed: $(cat "$WORK/quiet-$i.out")"
    done
    QUIET_RPS=0 QUIET_REQUESTS=0
    for i in "${!QUIET_KEYS[@]}"; do
        out=$(cat "$WORK/quiet-$i.out")
        # "status codes: 1000 2xx, 0 3xx, 0 4xx, 0 5xx"; a timed run may count
        # a few answers that arrive as it stops among the codes only.
        not2xx=$(awk '/^status codes:/ { print $5 + $7 + $9 }' <<<"$out")
        requests=$(awk '/^requests:/ { print $2 }' <<<"$out")
        rps=$(awk '/^finished in/ { gsub(/,/, ""); print $4 }' <<<"$out")
        [[ -n $not2xx && -n $requests && -n $rps ]] || die "cannot read h2load's output for quiet-$((i + 1)): $out"
        ((not2xx == 0)) || die "quiet-$((i + 1)) got $not2xx answers that were not 2xx (a quiet tenant refused or failed): $out"
        ((requests > 0)) || die "quiet-$((i + 1)) completed no request: $out"
        QUIET_REQUESTS=$((QUIET_REQUESTS + requests))
        QUIET_RPS=$(awk -v a="$QUIET_RPS" -v b="$rps" 'BEGIN { printf "%.2f", a + b }')
    done
    if [[ -n $log ]]; then
        # Columns: start time (us since epoch), status, duration (us).
        read -r P50_US P99_US < <(cat "$WORK"/quiet-*.log | awk '{ print $3 }' | sort -n |
            awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)], v[int(NR * 0.99 + 0.999999)] }')
        [[ -n ${P50_US:-} && -n ${P99_US:-} ]] || die "h2load's per-request logs are empty"
        rm -f "$WORK"/quiet-*.log
    fi
}

# phase ROUND A|B: one recorded phase; in B the noisy tenant floods from a
# second before the quiet load until a second after it.
phase() {
    local round=$1 name=$2 noisy_pid="" out t0 t1 ticks0 ticks1 bticks0 bticks1
    local sent=null ok=null limited=null other=null noisy_rps=null
    if [[ $name == B ]]; then
        taskset -c "$NOISY_CPU" "$H2LOAD" --h1 -t1 "-c$NOISY_CONNS" -m1 --rps "$PER_CONN_RPS" -D "$NOISY_SECONDS" \
            -H "Authorization: Bearer $NOISY_KEY" "$URL" >"$WORK/noisy.out" 2>&1 &
        noisy_pid=$!
        sleep 1
    fi
    t0=$EPOCHREALTIME
    ticks0=$(cpu_ticks "$GATEWAY_PID")
    # The flood's client runs from before t0 to after t1, so its CPU over
    # the quiet load is the difference (0 in A).
    local nticks0=0 nticks1=0
    [[ -z $noisy_pid ]] || nticks0=$(cpu_ticks "$noisy_pid")
    # shellcheck disable=SC2086 # a list of pids
    bticks0=$(cpu_ticks $BACKEND_PIDS)
    local proxy_cpu0 backend_cpu0 client_cpu0
    proxy_cpu0=$(cpu_stat "$PROXY_CPU") backend_cpu0=$(cpu_stat "$BACKEND_CPU") client_cpu0=$(cpu_stat "$WRK_CPU")
    quiet_load "$DURATION" log
    ticks1=$(cpu_ticks "$GATEWAY_PID")
    [[ -z $noisy_pid ]] || nticks1=$(cpu_ticks "$noisy_pid")
    # shellcheck disable=SC2086
    bticks1=$(cpu_ticks $BACKEND_PIDS)
    local proxy_busy backend_busy client_busy
    proxy_busy=$(busy_percent "$proxy_cpu0" "$(cpu_stat "$PROXY_CPU")")
    backend_busy=$(busy_percent "$backend_cpu0" "$(cpu_stat "$BACKEND_CPU")")
    client_busy=$(busy_percent "$client_cpu0" "$(cpu_stat "$WRK_CPU")")
    t1=$EPOCHREALTIME
    if [[ -n $noisy_pid ]]; then
        wait "$noisy_pid" || die "the noisy tenant's h2load failed: $(cat "$WORK/noisy.out")"
        out=$(cat "$WORK/noisy.out")
        # "status codes: 1000 2xx, 0 3xx, 9000 4xx, 0 5xx"
        read -r ok limited other < <(awk '/^status codes:/ { print $3, $7, $5 + $9 }' <<<"$out")
        [[ -n ${ok:-} && -n ${limited:-} ]] || die "cannot read the noisy tenant's h2load output: $out"
        ((other == 0)) || die "the noisy tenant got $other answers that were neither 2xx nor 4xx: $out"
        sent=$((ok + limited))
        noisy_rps=$(awk '/^finished in/ { gsub(/,/, ""); print $4 }' <<<"$out")
    fi
    local tck
    tck=$(getconf CLK_TCK)
    printf '{"round": %d, "phase": "%s", "quiet_rps": %s, "quiet_requests": %d, "p50_us": %s, "p99_us": %s, "seconds": %s, "gateway_cpu_s": %s, "backends_cpu_s": %s, "noisy_client_cpu_s": %s, "gateway_cpu_busy_percent": %s, "backend_cpu_busy_percent": %s, "client_cpu_busy_percent": %s, "noisy_requests": %s, "noisy_2xx": %s, "noisy_4xx": %s, "noisy_rps": %s}\n' \
        "$round" "$name" "$QUIET_RPS" "$QUIET_REQUESTS" "$P50_US" "$P99_US" "$(elapsed_s "$t0" "$t1")" \
        "$(awk -v t=$((ticks1 - ticks0)) -v hz="$tck" 'BEGIN { printf "%.2f", t / hz }')" \
        "$(awk -v t=$((bticks1 - bticks0)) -v hz="$tck" 'BEGIN { printf "%.2f", t / hz }')" \
        "$(awk -v t=$((nticks1 - nticks0)) -v hz="$tck" 'BEGIN { printf "%.2f", t / hz }')" \
        "$proxy_busy" "$backend_busy" "$client_busy" "$sent" "$ok" "$limited" "$noisy_rps" >>"$RUNS"
    say "  round $round  phase $name  quiet $(printf '%8.0f' "$QUIET_RPS") req/s  p50 $(printf '%7.0f' "$P50_US") us  p99 $(printf '%7.0f' "$P99_US") us$(
        [[ $name == A ]] || printf '  noisy %s of %s refused' "$limited" "$sent")"
}
# cpu_stat CPU: "BUSY TOTAL" clock ticks of one CPU so far, from /proc/stat
# (busy: user, nice, system, irq, softirq, steal; total adds idle and iowait).
cpu_stat() { awk -v cpu="cpu$1" '$1 == cpu { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
# busy_percent "BUSY0 TOTAL0" "BUSY1 TOTAL1"
busy_percent() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2]; printf "%.1f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'; }
elapsed_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "pinning: $PINNING"
say "load average before the runs: $LOAD_BEFORE (the machine may be shared)"
say "tenants: $QUIET quiet (h2load --h1 -c$QUIET_CONNS each, $QUIET_LOOP), noisy limited to $RATE req/s (burst $RATE) and sending $((RATE * FACTOR)) req/s ($NOISY_CONNS connections × $PER_CONN_RPS)"
say "warm-up: ${WARMUP}s of quiet load"
quiet_load "$WARMUP"
say "measuring: $ROUNDS rounds of phase A (quiet alone) and B (quiet + flood), ${DURATION}s each"
for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then
        phase "$round" A
        phase "$round" B
    else
        phase "$round" B
        phase "$round" A
    fi
done
# The flood alone, three times: the gateway's CPU per flood request with no
# quiet load beside it, the cleanest measure of what a refusal costs (the
# B-minus-A estimate drifts with the machine).
say "the flood alone: 3 runs of ${DURATION}s"
for run in 1 2 3; do
    ticks0=$(cpu_ticks "$GATEWAY_PID")
    out=$(taskset -c "$NOISY_CPU" "$H2LOAD" --h1 -t1 "-c$NOISY_CONNS" -m1 --rps "$PER_CONN_RPS" -D "$DURATION" \
        -H "Authorization: Bearer $NOISY_KEY" "$URL" 2>&1) || die "the noisy tenant's h2load failed: $out"
    ticks1=$(cpu_ticks "$GATEWAY_PID")
    read -r ok limited other < <(awk '/^status codes:/ { print $3, $7, $5 + $9 }' <<<"$out")
    [[ -n ${ok:-} && -n ${limited:-} ]] || die "cannot read the noisy tenant's h2load output: $out"
    printf '{"round": %d, "phase": "F", "gateway_cpu_s": %s, "noisy_requests": %d, "noisy_2xx": %d, "noisy_4xx": %d}\n' \
        "$run" "$(awk -v t=$((ticks1 - ticks0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }')" \
        $((ok + limited)) "$ok" "$limited" >>"$RUNS"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the report ----------------------------------------------------------------------------

GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
COMMAND="DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP SHARDS=$SHARDS QUIET=$QUIET QUIET_CONNS=$QUIET_CONNS${QUIET_RATE:+ QUIET_RATE=$QUIET_RATE} RATE=$RATE FACTOR=$FACTOR NOISY_CONNS=$NOISY_CONNS$([[ $NOISY_CPU == "$WRK_CPU" ]] || echo " NOISY_CPU=$NOISY_CPU") bench/noisy.sh"
mkdir -p "$RESULTS"
meta=(
    "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "git_rev=$GIT_REV"
    "command=$COMMAND"
    "runtime_s=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    "machine.nproc=$(nproc)"
    "machine.cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    "machine.kernel=$(uname -r)"
    "machine.loadavg_before=$LOAD_BEFORE"
    "machine.loadavg_after=$LOAD_AFTER"
    "versions.rustc=$(rustc --version 2>/dev/null || echo unknown)"
    "versions.h2load=$("$H2LOAD" --version 2>&1 | head -1 | awk '{ print $NF }')"
    "settings.duration_s=$DURATION"
    "settings.rounds=$ROUNDS"
    "settings.warmup_s=$WARMUP"
    "settings.shards=$SHARDS"
    "settings.quiet_tenants=$QUIET"
    "settings.quiet_connections=$QUIET_CONNS"
    "settings.quiet_rate=$QUIET_RATE"
    "settings.rate=$RATE"
    "settings.burst=$RATE"
    "settings.factor=$FACTOR"
    "settings.noisy_connections=$NOISY_CONNS"
    "settings.noisy_seconds=$NOISY_SECONDS"
    "settings.noisy_cpu=$NOISY_CPU"
    "settings.quiet_cpu=$WRK_CPU"
    "settings.forwarding=$FORWARDING"
    "settings.pinning=$PINNING"
    "subsets=$SUBSETS"
)
python3 -B "$ROOT/bench/lib/noisy_report.py" --runs "$RUNS" --md "$RESULTS/$RESULT_NAME.md" --json "$RESULTS/$RESULT_NAME.json" -- "${meta[@]}"

echo
cat "$RESULTS/$RESULT_NAME.md"
echo
echo "Wrote bench/results/$RESULT_NAME.md and bench/results/$RESULT_NAME.json."
