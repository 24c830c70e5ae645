#!/usr/bin/env bash
# Quick paired comparison for optimisation work: the gateway against nginx (and against a second gateway build, OTHER=PATH), short wrk runs alternating back to back; prints medians and the per-round ratios to nginx. Writes nothing under bench/results.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/paired.sh                                   # 12 rounds of 2 s at 32 connections, then at 1
#   ROUNDS=20 DURATION=3 CONNS="32" bench/paired.sh
#   OTHER=/tmp/shuffle-shard-before bench/paired.sh   # adds that build as the target "other"
#   OTHER_FORWARDING=default bench/paired.sh          # adds this build with the gateway's default forwarding
#
# The set-up is bench/gateway.sh's (one backend process, nginx as a plain
# reverse proxy, `serve --workers 1` with k = 2 over two shard ids on that
# backend, the same CPU pinning), without HAProxy and without the fixed-rate,
# shard-kill and memory parts. On a machine whose speed drifts by ±10 %
# from one minute to the next, only runs taken seconds apart can tell a
# change of a few per cent: gateway.sh writes the results, this tells
# whether a change helped. See bench/README.md.
set -Eeuo pipefail
trap 'echo "bench/paired.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

ROUNDS=${ROUNDS:-12}      # rounds; each runs every target once per connection count
DURATION=${DURATION:-2}   # seconds per wrk run
CONNS=${CONNS:-"32 1"}    # connection counts, in the order they run within a round
OTHER=${OTHER:-}          # a second shuffle-shard binary to compare, if any
OTHER_FORWARDING=${OTHER_FORWARDING:-} # the second gateway's FORWARDING (see bench/lib/proxies.sh); alone, it compares this build with itself

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/paired.sh: error: $*"
    exit 1
}

for value in ROUNDS DURATION; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
read -ra CONN_LIST <<<"$CONNS"
((${#CONN_LIST[@]} > 0)) || die "CONNS must list at least one connection count"
for conns in "${CONN_LIST[@]}"; do
    [[ $conns =~ ^[1-9][0-9]*$ ]] || die "CONNS must be positive whole numbers, not '$conns'"
done
if [[ -n $OTHER ]]; then
    [[ -x $OTHER ]] || die "OTHER=$OTHER is not an executable file; give the path of a shuffle-shard binary"
    OTHER=$(realpath "$OTHER")
fi

# shellcheck source=bench/lib/apt.sh
source "$ROOT/bench/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$ROOT/bench/lib/proxies.sh"
missing=()
[[ -n $(find_tool nginx) ]] || missing+=(nginx)
[[ -n $(find_tool wrk) ]] || missing+=(wrk)
[[ -n $(find_tool taskset) ]] || missing+=(util-linux)
[[ -n $(find_tool curl) ]] || missing+=(curl)
apt_install "${missing[@]}"
NGINX=$(find_tool nginx)
WRK=$(find_tool wrk)

build_cli
[[ -z $OTHER_FORWARDING || -n $OTHER ]] || OTHER=$BIN
pin_cpus

scratch_dir paired

pick_port BACKEND_PORT
pick_port NGINX_PORT
pick_port GATEWAY_PORT
pick_port GATEWAY_ADMIN_PORT
pick_port OTHER_PORT
pick_port OTHER_ADMIN_PORT
bench_tenant

taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1 \
    >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
ready backend "http://127.0.0.1:$BACKEND_PORT/x" 10

nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$NGINX_PORT" "$BACKEND_PORT"
taskset -c "$PROXY_CPU" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" \
    >"$WORK/nginx.log" 2>&1 &
PIDS+=($!)
ready nginx "http://127.0.0.1:$NGINX_PORT/x" 10

# serve NAME BINARY PORT ADMIN_PORT FORWARDING: a gateway in its own directory.
serve() {
    local name=$1 binary=$2 port=$3
    gateway_dir "$name" "$port" "$4" "$5"
    (cd "$WORK/$name" && exec taskset -c "$PROXY_CPU" "$binary" serve --workers 1 --config gateway.toml) \
        >"$WORK/$name.log" 2>&1 &
    PIDS+=($!)
    ready "$name" "http://127.0.0.1:$port/x" 10 -H "$AUTH"
}
declare -A PORT=([nginx]=$NGINX_PORT [gateway]=$GATEWAY_PORT)
TARGETS=(nginx gateway)
serve gateway "$BIN" "$GATEWAY_PORT" "$GATEWAY_ADMIN_PORT" "$FORWARDING"
if [[ -n $OTHER ]]; then
    serve other "$OTHER" "$OTHER_PORT" "$OTHER_ADMIN_PORT" "${OTHER_FORWARDING:-$FORWARDING}"
    PORT[other]=$OTHER_PORT
    TARGETS+=(other)
fi

say "pinning: proxies on CPU $PROXY_CPU, backend on CPU $BACKEND_CPU, wrk on CPU $WRK_CPU"
say "forwarding: gateway $FORWARDING${OTHER:+, other ${OTHER_FORWARDING:-$FORWARDING}} (bench/lib/proxies.sh)"
say "measuring: $ROUNDS rounds; each runs every target for ${DURATION}s at ${CONN_LIST[*]} connections, starting one target further along each round"
for target in "${TARGETS[@]}"; do
    args=(-t1 -c32 -d1s)
    [[ $target == nginx ]] || args+=(-H "$AUTH")
    taskset -c "$WRK_CPU" "$WRK" "${args[@]}" "http://127.0.0.1:${PORT[$target]}/x" >/dev/null
done
for round in $(seq "$ROUNDS"); do
    for conns in "${CONN_LIST[@]}"; do
        for i in "${!TARGETS[@]}"; do
            target=${TARGETS[$(((i + round - 1) % ${#TARGETS[@]}))]}
            args=(-t1 "-c$conns" "-d${DURATION}s" --latency)
            [[ $target == nginx ]] || args+=(-H "$AUTH")
            out=$(taskset -c "$WRK_CPU" "$WRK" "${args[@]}" "http://127.0.0.1:${PORT[$target]}/x")
            if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
                die "$target at $conns connections: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | xargs)"
            fi
            rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
            p50=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
            echo "$round $conns $target $rps $p50" >>"$WORK/runs.txt"
        done
    done
    say "  round $round of $ROUNDS done"
done

python3 - "$WORK/runs.txt" "${CONN_LIST[@]}" <<'EOF'
import collections, statistics, sys

runs = collections.defaultdict(dict)  # (conns, round) -> target -> (rps, p50)
targets = []
for line in open(sys.argv[1]):
    rnd, conns, target, rps, p50 = line.split()
    runs[(int(conns), int(rnd))][target] = (float(rps), float(p50))
    if target not in targets:
        targets.append(target)
for conns in map(int, sys.argv[2:]):
    rounds = [runs[key] for key in sorted(runs) if key[0] == conns]
    print(f"{conns} connection{'s' if conns != 1 else ''}, {len(rounds)} rounds:")
    for target in targets:
        rps = [r[target][0] for r in rounds]
        p50 = [r[target][1] for r in rounds]
        line = f"  {target:8} req/s median {statistics.median(rps):9.0f}   p50 median {statistics.median(p50):8.1f} us"
        if target != "nginx":
            rr = [r[target][0] / r["nginx"][0] for r in rounds]
            pr = [r[target][1] / r["nginx"][1] for r in rounds]
            line += (f"   paired with nginx: req/s {statistics.median(rr):.3f}x (ahead in {sum(x >= 1 for x in rr)}/{len(rr)}),"
                     f" p50 {statistics.median(pr):.3f}x (at or below in {sum(x <= 1 for x in pr)}/{len(pr)})")
        print(line)
EOF
