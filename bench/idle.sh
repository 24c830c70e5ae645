#!/usr/bin/env bash
# Idle keep-alive connections (issue 34): the resident set each server adds per idle HTTP/1.1 keep-alive client connection, for the test backend direct, nginx, HAProxy and one or more shuffle-shard gateway builds (same backend, one worker each, same run).
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/idle.sh                                   # 10,000 connections, 2 rounds, the gateway built from this tree
#   CONNS=5000 ROUNDS=3 bench/idle.sh
#   BENCH_BIN=/tmp/shuffle-shard-before bench/idle.sh        # that gateway binary, nothing built
#   GATEWAYS="before=/tmp/ss-before after=target/release/shuffle-shard" bench/idle.sh   # several builds, label=binary
#
# Each target, one at a time and started afresh each round: its VmRSS once
# it answers, then bench/lib/idle_client.py opens CONNS keep-alive
# connections (at most CONCURRENCY connecting or awaiting their answer at
# once), sends one GET /x on each, reads the whole 200 answer and holds them
# all open and idle; SETTLE seconds later its VmRSS again (nginx: its one
# worker process). (after - before) / CONNS is the cost of one idle
# connection. Every connection must get its 200 and still be open when the
# memory is read, or the run fails. Writes bench/results/idle.md and
# idle.json (idle-CONNS.md/.json when CONNS is not 10000) and prints the
# table. Loopback only; every process it starts is stopped on exit. See
# bench/README.md.
set -Eeuo pipefail
trap 'echo "bench/idle.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

CONNS=${CONNS:-10000}          # idle keep-alive connections held open per target
ROUNDS=${ROUNDS:-2}            # rounds; each starts every target afresh and measures it once
SETTLE=${SETTLE:-3}            # seconds between the last connection's answer and reading the resident set
CONCURRENCY=${CONCURRENCY:-100} # connections the client has connecting or awaiting their answer at once
GATEWAYS=${GATEWAYS:-}         # "label=binary ..." gateway builds to measure; default: BENCH_BIN or this tree's build
RESULTS_NAME=${RESULTS_NAME:-} # results file name (without .md/.json); default idle, or idle-CONNS when CONNS is not 10000

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/idle.sh: error: $*"
    exit 1
}

for value in CONNS ROUNDS CONCURRENCY; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
[[ $SETTLE =~ ^[0-9]+$ ]] || die "SETTLE must be a whole number of seconds, not '$SETTLE'"
if [[ -z $RESULTS_NAME ]]; then
    RESULTS_NAME=idle
    ((CONNS == 10000)) || RESULTS_NAME=idle-$CONNS
fi
[[ $RESULTS_NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "RESULTS_NAME must be a plain file name, not '$RESULTS_NAME'"

# --- tools ------------------------------------------------------------------

# shellcheck source=bench/lib/apt.sh
source "$ROOT/bench/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$ROOT/bench/lib/proxies.sh"
missing=()
[[ -n $(find_tool nginx) ]] || missing+=(nginx)
[[ -n $(find_tool haproxy) ]] || missing+=(haproxy)
[[ -n $(find_tool taskset) ]] || missing+=(util-linux)
[[ -n $(find_tool curl) ]] || missing+=(curl)
[[ -n $(find_tool ss) ]] || missing+=(iproute2)
[[ -n $(find_tool python3) ]] || missing+=(python3)
apt_install "${missing[@]}"
NGINX=$(find_tool nginx)
HAPROXY=$(find_tool haproxy)

# The client holds CONNS sockets, a server CONNS and its upstream ones (at
# most CONCURRENCY at once): ask for twice CONNS, as root above the hard
# limit too; where even root may not raise it, the hard limit does as long
# as it leaves room for CONNS, CONCURRENCY and a few more.
NOFILE=$((2 * CONNS + 2000))
if (($(ulimit -Sn) < NOFILE)); then
    ulimit -n "$NOFILE" 2>/dev/null || ulimit -Sn "$(ulimit -Hn)"
    NOFILE=$(ulimit -Sn)
    ((NOFILE >= CONNS + CONCURRENCY + 200)) ||
        die "open files: need at least $((CONNS + CONCURRENCY + 200)), the hard limit is $(ulimit -Hn) (run as root, or lower CONNS)"
fi

# The gateway builds: label=binary pairs from GATEWAYS, else build_cli's
# (BENCH_BIN, or this tree's release build) as "gateway".
GW_LABELS=()
declare -A GW_BIN=()
if [[ -n $GATEWAYS ]]; then
    for entry in $GATEWAYS; do
        label=${entry%%=*}
        binary=${entry#*=}
        [[ $entry == *=* && $label =~ ^[A-Za-z0-9._-]+$ ]] || die "GATEWAYS: write label=binary pairs, not '$entry'"
        [[ -z ${GW_BIN[$label]:-} ]] || die "GATEWAYS: the label '$label' is given twice"
        [[ -x $binary ]] || die "GATEWAYS: $binary ($label) is not an executable"
        GW_LABELS+=("$label")
        GW_BIN[$label]=$(realpath "$binary")
    done
    # The test backend comes from the last build listed (the newest, by habit).
    BIN=${GW_BIN[${GW_LABELS[-1]}]}
else
    build_cli
    BIN=$(realpath "$BIN")
    GW_LABELS=(gateway)
    GW_BIN[gateway]=$BIN
fi

pin_cpus
scratch_dir idle
bench_tenant

# rss_kib PID: VmRSS in KiB.
rss_kib() { awk '$1 == "VmRSS:" { print $2 }' /proc/"$1"/status; }
threads_of() { find /proc/"$1"/task -mindepth 1 -maxdepth 1 | wc -l; }

# stop PID: SIGTERM, up to 10 s, then SIGKILL; drops it from PIDS.
stop() {
    local pid=$1 keep=() p
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${PIDS[@]}"; do
        [[ $p == "$pid" ]] || keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

# --- the upstream backend the proxies share --------------------------------------

pick_port BACKEND_PORT
taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1 \
    >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
ready backend "http://127.0.0.1:$BACKEND_PORT/x" 10

# --- the targets ----------------------------------------------------------------
#
# launch_KIND NAME starts a fresh server on a fresh port, waits until it
# answers and sets PORT, SERVER_PID (the process stopped afterwards) and
# MEASURED_PID (the one whose resident set is read).

launch_backend() {
    pick_port PORT
    taskset -c "$PROXY_CPU" "$BIN" backend --listen "127.0.0.1:$PORT" --id s0 --workers 1 \
        >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    ready "$1" "http://127.0.0.1:$PORT/x" 10
    MEASURED_PID=$SERVER_PID
}

# nginx as bench/gateway.sh runs it (bench/lib/proxies.sh's nginx_conf: one
# worker, upstream keepalive 64), with room for the connections and a
# keep-alive timeout longer than the run.
launch_nginx() {
    local dir="$WORK/$1"
    pick_port PORT
    nginx_conf "$dir.conf" "$dir" "$PORT" "$BACKEND_PORT"
    sed -i -e "s/^    worker_connections 1024;/    worker_connections $((CONNS + 1000));/" \
        -e "s/^worker_processes 1;/&\nworker_rlimit_nofile $NOFILE;/" \
        -e "0,/^    keepalive_requests 1000000;/s//&\n    keepalive_timeout 600s;/" "$dir.conf"
    grep -q "worker_connections $((CONNS + 1000));" "$dir.conf" && grep -q 'keepalive_timeout 600s;' "$dir.conf" &&
        grep -q "worker_rlimit_nofile $NOFILE;" "$dir.conf" || die "could not adapt nginx_conf's configuration; see $dir.conf"
    taskset -c "$PROXY_CPU" "$NGINX" -p "$dir" -c "$dir.conf" -e "$dir/error.log" >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    ready "$1" "http://127.0.0.1:$PORT/x" 10
    MEASURED_PID=$(pgrep -P "$SERVER_PID" | head -1)
    [[ -n $MEASURED_PID && $(pgrep -c -P "$SERVER_PID") == 1 ]] || die "nginx should run exactly one worker process under $SERVER_PID"
}

# HAProxy as bench/gateway.sh writes it (one thread, keep-alive on both
# sides, http-reuse always), with maxconn above CONNS and keep-alive and
# client timeouts longer than the run. HAProxy asks for two descriptors
# per maxconn (client and server side); where the hard limit is lower
# (20,000 here, which even root may not raise), `no strict-limits` lets it
# start with what there is: idle client connections need one each.
haproxy_cfg() {
    cat >"$WORK/$1.cfg" <<EOF
global
    nbthread 1
    maxconn $((CONNS + 1000))
    no strict-limits
    pidfile $WORK/$1.pid

defaults
    mode http
    maxconn $((CONNS + 1000))
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 600s
    timeout server 30s
    timeout http-request 600s
    timeout http-keep-alive 600s

frontend bench
    bind 127.0.0.1:$PORT
    default_backend backend

backend backend
    server s0 127.0.0.1:$BACKEND_PORT
EOF
    "$HAPROXY" -c -q -f "$WORK/$1.cfg" >"$WORK/$1-check.log" 2>&1 ||
        die "haproxy rejects the generated configuration: $(cat "$WORK/$1-check.log")"
}
# -db: foreground, no daemon, no master process: the one process serves.
launch_haproxy() {
    pick_port PORT
    haproxy_cfg "$1"
    taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$WORK/$1.cfg" >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    ready "$1" "http://127.0.0.1:$PORT/x" 10
    MEASURED_PID=$SERVER_PID
    [[ $(threads_of "$SERVER_PID") == 1 ]] || die "haproxy runs $(threads_of "$SERVER_PID") threads, not 1 (nbthread 1)"
}

# The gateway as bench/gateway.sh runs it (serve --workers 1: a
# single-threaded event loop; k = 2 over two shard ids on the one backend),
# with limits.max_connections above CONNS (its default is 10,000) and
# limits.header_read_timeout_ms (which also bounds the wait for a
# keep-alive connection's next request) longer than the run.
launch_gateway() {
    local name=$1 binary=$2 admin
    pick_port PORT
    pick_port admin
    gateway_dir "$name" "$PORT" "$admin" "$FORWARDING"
    printf '\n[limits]\nmax_connections = %s\nheader_read_timeout_ms = 600000\n' "$((CONNS + 1000))" \
        >>"$WORK/$name/gateway.toml"
    (cd "$WORK/$name" && exec taskset -c "$PROXY_CPU" "$binary" serve --workers 1 --config gateway.toml) \
        >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    ready "$name" "http://127.0.0.1:$PORT/x" 20 -H "$AUTH"
    MEASURED_PID=$SERVER_PID
}

TARGETS=(backend nginx haproxy)
for label in "${GW_LABELS[@]}"; do
    TARGETS+=("gateway:$label")
done
NGINX_VERSION=$("$NGINX" -v 2>&1 | sed 's|.*nginx/||')
HAPROXY_VERSION=$("$HAPROXY" -v 2>&1 | awk 'NR == 1 { print $3 }')
display_name() {
    case $1 in
        backend) echo "backend direct" ;;
        nginx) echo "nginx $NGINX_VERSION" ;;
        haproxy) echo "HAProxy $HAPROXY_VERSION" ;;
        gateway:*) if [[ ${#GW_LABELS[@]} == 1 && ${1#gateway:} == gateway ]]; then echo "gateway"; else echo "gateway ${1#gateway:}"; fi ;;
    esac
}

# --- measuring --------------------------------------------------------------------

# measure TARGET ROUND: one target, started afresh; appends a line to runs.tsv.
measure() {
    local target=$1 round=$2 name before after closed_kib held failed took established closed_line word rc threads
    name="${target//:/-}-r$round"
    case $target in
        backend) launch_backend "$name" ;;
        nginx) launch_nginx "$name" ;;
        haproxy) launch_haproxy "$name" ;;
        gateway:*) launch_gateway "$name" "${GW_BIN[${target#gateway:}]}" ;;
    esac
    threads=$(threads_of "$MEASURED_PID")
    sleep 0.5
    before=$(rss_kib "$MEASURED_PID")
    coproc CLIENT {
        exec taskset -c "$WRK_CPU" python3 "$ROOT/bench/lib/idle_client.py" --port "$PORT" --conns "$CONNS" \
            --concurrency "$CONCURRENCY" --header "$AUTH" 2>"$WORK/$name-client.log"
    }
    local client_pid=$CLIENT_PID client_in=${CLIENT[1]} client_out=${CLIENT[0]}
    read -r word held failed took <&"$client_out" || true
    [[ $word == holding ]] || die "$target: the client stopped before holding its connections: $(cat "$WORK/$name-client.log")"
    if ((failed > 0)); then
        eval "exec $client_in>&-"
        die "$target: $failed of $CONNS connections did not get a 200: $(cat "$WORK/$name-client.log"); logs in $WORK"
    fi
    sleep "$SETTLE"
    after=$(rss_kib "$MEASURED_PID")
    established=$(ss -tnH state established "( sport = :$PORT )" | wc -l)
    eval "exec $client_in>&-"
    read -r closed_line <&"$client_out" || true
    rc=0
    wait "$client_pid" || rc=$?
    [[ $closed_line == "closed_by_server 0" && $rc == 0 ]] ||
        die "$target: the server closed held connections before the memory was read (${closed_line:-no answer from the client}); logs in $WORK"
    ((established >= CONNS)) || die "$target: ss shows $established established connections on port $PORT, not $CONNS"
    sleep 1
    closed_kib=$(rss_kib "$MEASURED_PID")
    stop "$SERVER_PID"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$round" "$before" "$after" "$closed_kib" "$took" "$threads" "$established" \
        >>"$WORK/runs.tsv"
    say "  $(display_name "$target"), round $round: VmRSS $before -> $after KiB with $CONNS idle connections ($(awk -v a="$after" -v b="$before" -v n="$CONNS" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }') bytes each; opened in ${took}s), $closed_kib KiB once closed"
}

START=$EPOCHREALTIME
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "measuring: $CONNS idle keep-alive connections per target, $ROUNDS rounds, ${SETTLE}s settle; targets: $(for t in "${TARGETS[@]}"; do printf '%s; ' "$(display_name "$t")"; done)"
: >"$WORK/runs.tsv"
for round in $(seq "$ROUNDS"); do
    for i in "${!TARGETS[@]}"; do
        # One target further along each round.
        measure "${TARGETS[$(((i + round - 1) % ${#TARGETS[@]}))]}" "$round"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
RUNTIME_S=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

# --- results ----------------------------------------------------------------------

GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
COMMAND="${GATEWAYS:+GATEWAYS=\"$GATEWAYS\" }${BENCH_BIN:+BENCH_BIN=$BENCH_BIN }CONNS=$CONNS ROUNDS=$ROUNDS SETTLE=$SETTLE bench/idle.sh"
mkdir -p "$RESULTS"
names=()
for t in "${TARGETS[@]}"; do
    names+=("$t=$(display_name "$t")")
done
gateway_bins=()
for label in "${GW_LABELS[@]}"; do
    gateway_bins+=("$label=${GW_BIN[$label]}")
done
python3 - "$WORK/runs.tsv" "$RESULTS/$RESULTS_NAME" <<EOF
import json, statistics, sys

runs_file, out = sys.argv[1], sys.argv[2]
conns = $CONNS
names = dict(n.split("=", 1) for n in """$(printf '%s\n' "${names[@]}")""".splitlines())
gateway_bins = dict(g.split("=", 1) for g in """$(printf '%s\n' "${gateway_bins[@]}")""".splitlines())
meta = {
    "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
    "git_rev": "$GIT_REV",
    "command": """$COMMAND""",
    "machine": {"nproc": $(nproc), "cpu_model": "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)",
                "kernel": "$(uname -r)", "memory_gib": $(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo),
                "loadavg_before": "$LOAD_BEFORE", "loadavg_after": "$LOAD_AFTER"},
    "versions": {"nginx": "$NGINX_VERSION", "haproxy": "$HAPROXY_VERSION", "python": "$(python3 -c 'import platform; print(platform.python_version())')"},
}
rows = []
for line in open(runs_file):
    t, rnd, before, after, closed, took, threads, est = line.split("\t")
    before, after = int(before), int(after)
    rows.append({"target": t, "round": int(rnd), "rss_before_kib": before, "rss_after_kib": after,
                 "rss_after_close_kib": int(closed), "open_seconds": float(took), "threads": int(threads),
                 "established": int(est), "per_conn_bytes": round((after - before) * 1024 / conns)})
order = list(names)
TARGET_BYTES = 2048  # issue 34: at most 2 KB (KiB) per idle keep-alive connection at 10,000 connections

def med(t, key):
    return statistics.median(r[key] for r in rows if r["target"] == t)

summary = []
for t in order:
    rs = [r for r in rows if r["target"] == t]
    per = [r["per_conn_bytes"] for r in rs]
    summary.append({"target": t, "label": names[t], "binary": gateway_bins.get(t.split(":", 1)[1]) if t.startswith("gateway:") else None,
                    "rss_before_kib": med(t, "rss_before_kib"), "rss_after_kib": med(t, "rss_after_kib"),
                    "rss_after_close_kib": med(t, "rss_after_close_kib"), "threads": rs[0]["threads"],
                    "per_conn_bytes": {"median": statistics.median(per), "min": min(per), "max": max(per), "rounds": per}})
nginx = max(1, next(s for s in summary if s["target"] == "nginx")["per_conn_bytes"]["median"])

def kb(b):
    return f"{b / 1024:.2f}"

table = [f"{'target':<26} {'round':>6} {'rss_before_kb':>13} {'rss_after_kb':>13} {'per_conn_bytes':>14} {'per_conn_kb':>11}"]
for r in sorted(rows, key=lambda r: (order.index(r["target"]), r["round"])):
    table.append(f"{names[r['target']]:<26} {r['round']:>6} {r['rss_before_kib']:>13} {r['rss_after_kib']:>13} {r['per_conn_bytes']:>14} {kb(r['per_conn_bytes']):>11}")
for s in summary:
    table.append(f"{s['label']:<26} median {s['rss_before_kib']:>13.0f} {s['rss_after_kib']:>13.0f} {s['per_conn_bytes']['median']:>14.0f} {kb(s['per_conn_bytes']['median']):>11}")
print("\n".join(table))

md = ["# Idle keep-alive connections", "",
      f"{meta['date']} · git {meta['git_rev']} · {meta['machine']['nproc']} CPUs ({meta['machine']['cpu_model']}) · {meta['machine']['memory_gib']} GiB · Linux {meta['machine']['kernel']} · nginx {meta['versions']['nginx']} · HAProxy {meta['versions']['haproxy']}", "",
      f"Command: \`{meta['command']}\` (took $RUNTIME_S s). Load average before/after: {meta['machine']['loadavg_before']} / {meta['machine']['loadavg_after']}.", "",
      f"Each target is started afresh each round; its VmRSS is read once it answers, then {conns:,} HTTP/1.1 keep-alive connections each send one "
      f"\`GET /x\` (with the bench tenant's \`Authorization\`), read the whole 200 answer and stay open and idle; $SETTLE s after the last answer VmRSS is read again "
      f"(nginx: its worker process). Per connection: (after − before) / {conns:,}. One worker each (gateway: \`serve --workers 1\`; nginx: one worker, "
      f"worker_connections {conns + 1000}; HAProxy: nbthread 1, maxconn {conns + 1000}); keep-alive timeouts 600 s; every connection got its 200 and was still open when the memory was read. "
      f"At most $CONCURRENCY connections were connecting or awaiting their answer at once. KB here is KiB (1,024 bytes).", "",
      "| target | VmRSS before | VmRSS with the connections | per connection | vs nginx | VmRSS after they closed |",
      "|---|---:|---:|---:|---:|---:|"]
for s in summary:
    p = s["per_conn_bytes"]
    spread = f" [{kb(p['min'])}–{kb(p['max'])}]" if len(p["rounds"]) > 1 else ""
    md.append(f"| {s['label']} | {s['rss_before_kib'] / 1024:.1f} MiB | {s['rss_after_kib'] / 1024:.1f} MiB | {p['median']:,.0f} B = {kb(p['median'])} KB{spread} | "
              f"{p['median'] / nginx:.1f}× | {s['rss_after_close_kib'] / 1024:.1f} MiB |")
md.append("")
md.append(f"Median over {len(rows) // len(order)} round(s), [min–max] per connection.")
for s in summary:
    if s["target"].startswith("gateway:"):
        m = s["per_conn_bytes"]["median"]
        verdict = "met" if m <= TARGET_BYTES else f"missed ({m / TARGET_BYTES:.1f}× the target)"
        scope = "" if conns == 10000 else f" (measured at {conns:,} connections; the target is stated at 10,000)"
        md.append(f"Target (issue 34), ≤ 2 KB per idle connection — {s['label']}: {verdict}, {kb(m)} KB{scope}.")
        md.append("")
md += ["## Rounds", "", "| target | round | VmRSS before (KiB) | with the connections (KiB) | per connection (bytes) | opened in | threads |", "|---|---:|---:|---:|---:|---:|---:|"]
for r in sorted(rows, key=lambda r: (order.index(r["target"]), r["round"])):
    md.append(f"| {names[r['target']]} | {r['round']} | {r['rss_before_kib']} | {r['rss_after_kib']} | {r['per_conn_bytes']} | {r['open_seconds']} s | {r['threads']} |")
md.append("")
if gateway_bins:
    md.append("Gateway builds: " + "; ".join(f"{k}: \`{v}\`" for k, v in gateway_bins.items()) + ".")
open(out + ".md", "w").write("\n".join(md) + "\n")

doc = {"benchmark": "idle", **meta, "runtime_s": $RUNTIME_S,
       "settings": {"connections": conns, "rounds": $ROUNDS, "settle_s": $SETTLE, "concurrency": $CONCURRENCY, "target_bytes_per_connection": TARGET_BYTES},
       "targets": summary, "runs": rows}
json.dump(doc, open(out + ".json", "w"), indent=2)
open(out + ".json", "a").write("\n")
EOF
echo
cat "$RESULTS/$RESULTS_NAME.md"
echo
echo "Wrote bench/results/$RESULTS_NAME.md and bench/results/$RESULTS_NAME.json."
