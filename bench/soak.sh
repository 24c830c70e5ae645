#!/usr/bin/env bash
# Soak: DURATION seconds (default 600) of mixed traffic through the gateway while one of its 8 shards flaps; samples the gateway's RSS and open file descriptors every 10 s and checks that tenants not on the flapping shard see zero errors.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/soak.sh                        # 10 minutes
#   DURATION=60 bench/soak.sh            # a quick check
#   DURATION=600 DELAY_MS=10 bench/soak.sh
#
# What runs, all on 127.0.0.1 in a temporary directory:
#   - 8 test shards (`shuffle-shard backend`), one of them (FLAPPING, s3 by
#     default) with `--mode flapping:FLAP_MS`: listening, then killed with
#     its connections dropped, every FLAP_MS milliseconds;
#   - the gateway (`shuffle-shard serve`) over them with a fresh placement
#     key, 200 tenants with API keys, k = 2, rendezvous placement, an admin
#     token, and the per-tenant availability window stretched to cover the
#     whole run (3600 s, the maximum);
#   - two wrk instances with a Lua script that cycles through tenants' keys
#     and a mix of GET, PUT (with a body), POST with an Idempotency-Key
#     (with a body) and DELETE: one drives only the tenants whose subset
#     avoids the flapping shard ("unaffected"), the other only those on it
#     ("affected"), so each instance's status counts belong to one group.
#     The admin API (GET /admin/tenants/{id}) says who is on the shard.
#     wrk's Lua `delay()` paces each connection (DELAY_MS between requests),
#     so the soak is a steady load, not a throughput benchmark.
#
# Every 10 s the gateway's VmRSS (/proc/PID/status) and open descriptors
# (/proc/PID/fd) go to bench/results/soak.csv. At the end the least-squares
# slopes (KiB/min, fds/min, over the whole run and its second half), the
# gateway's /metrics and every tenant's availability from the admin API go
# to bench/results/soak.md. Exit status 1 when an unaffected tenant saw an
# error (by wrk's count or the gateway's), else 0.
set -Eeuo pipefail
trap 'echo "bench/soak.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-600} # seconds of load
SAMPLE=${SAMPLE:-10}      # seconds between RSS/fd samples
TENANTS=${TENANTS:-200}   # tenants, each with an API key
SHARDS=8
FLAPPING=${FLAPPING:-s3}  # the shard that flaps
FLAP_MS=${FLAP_MS:-2000}  # flapping half-period
CONNS=${CONNS:-8}         # wrk connections per instance
DELAY_MS=${DELAY_MS:-20}  # pause before each request on a connection (pacing)
HEALTH_MS=${HEALTH_MS:-250}             # the gateway's health-check interval
MAX_EJECTION_MS=${MAX_EJECTION_MS:-5000} # the longest passive ejection

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"
mkdir -p "$RESULTS"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/soak.sh: error: $*"
    exit 2
}

for value in DURATION SAMPLE TENANTS FLAP_MS CONNS HEALTH_MS MAX_EJECTION_MS; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
[[ $DELAY_MS =~ ^[0-9]+$ ]] || die "DELAY_MS must be a whole number, not '$DELAY_MS'"
[[ $FLAPPING =~ ^s[0-7]$ ]] || die "FLAPPING must be one of s0 ... s7, not '$FLAPPING'"
((DURATION >= 2 * SAMPLE)) || die "DURATION must cover at least two samples ($((2 * SAMPLE)) s)"

# --- tools ------------------------------------------------------------------

# shellcheck source=bench/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

install_missing() {
    local missing=() tool
    for tool in wrk curl python3; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    apt_install "${missing[@]}"
}

install_missing

say "building: cargo build --release -p shuffle-shard-cli"
cargo build --release -p shuffle-shard-cli >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/shuffle-shard"
[[ -x $BIN ]] || die "$BIN was not built"
# A copy, so a rebuild by someone else during a long soak cannot swap the
# binary under the running processes' feet (or the version reported).
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ss-soak.XXXXXX")
cp "$BIN" "$WORK/shuffle-shard"
BIN="$WORK/shuffle-shard"
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    REVISION="$REVISION (with uncommitted changes)"
fi

# --- processes --------------------------------------------------------------

PIDS=()
cleanup() {
    local status=$? pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if ((status == 0 || status == 1)); then
        rm -rf "$WORK"
    else
        say "bench/soak.sh: failed; logs kept in $WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits until FILE has a line matching the extended regex PATTERN and prints
# the first match of it; gives up after SECONDS.
await_line() {
    local file=$1 pattern=$2 seconds=$3 deadline match
    deadline=$((SECONDS + seconds))
    while ((SECONDS < deadline)); do
        if match=$(grep -m1 -oE "$pattern" "$file" 2>/dev/null); then
            printf '%s\n' "$match"
            return 0
        fi
        sleep 0.05
    done
    return 1
}

cd "$WORK"
say "starting $SHARDS test shards ($FLAPPING flapping every ${FLAP_MS} ms)"
declare -A SHARD_URL
for ((i = 0; i < SHARDS; i++)); do
    id="s$i"
    mode=healthy
    [[ $id == "$FLAPPING" ]] && mode="flapping:$FLAP_MS"
    "$BIN" backend --listen 127.0.0.1:0 --id "$id" --mode "$mode" 2>"backend-$id.log" &
    PIDS+=($!)
done
for ((i = 0; i < SHARDS; i++)); do
    id="s$i"
    SHARD_URL[$id]=$(await_line "backend-$id.log" 'http://127\.0\.0\.1:[0-9]+' 10) ||
        die "shard $id did not start: $(cat "backend-$id.log")"
done

# Placement key, admin token, tenants (keys for wrk, digests for the gateway).
head -c 32 /dev/urandom >placement.key
python3 -c 'import secrets; print(secrets.token_hex(24))' >admin.token
ADMIN_TOKEN=$(cat admin.token)
python3 - "$TENANTS" <<'PY'
import hashlib, secrets, sys
count = int(sys.argv[1])
with open("tenants.toml", "w") as toml, open("keys.tsv", "w") as keys:
    for n in range(count):
        tenant = f"soak-{n:03d}"
        key = "sk-" + secrets.token_hex(20)
        digest = hashlib.sha256(key.encode()).hexdigest()
        toml.write(f'[[tenants]]\nid = "{tenant}"\napi_key_sha256 = "{digest}"\n\n')
        keys.write(f"{tenant}\t{key}\n")
PY

{
    cat <<TOML
listen = "127.0.0.1:0"
tenants_file = "tenants.toml"

[placement]
algorithm = "rendezvous"
k = 2
key_file = "placement.key"
key_version = "soak"

# Quick health checks and short ejections, so the flapping shard really
# comes back into rotation (and is taken out again) throughout the run,
# with requests in flight on it when it dies, instead of staying out.
[health]
interval_ms = $HEALTH_MS
timeout_ms = $((HEALTH_MS < 500 ? HEALTH_MS : 500))
rise = 1
fall = 1

[outlier]
base_ejection_ms = $((MAX_EJECTION_MS < 1000 ? MAX_EJECTION_MS : 1000))
max_ejection_ms = $MAX_EJECTION_MS

[admin]
listen = "127.0.0.1:0"
token_file = "admin.token"
metrics_without_token = false
# The whole run (up to 3300 s) in the per-tenant availability window.
availability_window_seconds = 3600

[[cells]]
name = "default"
shards = [
TOML
    for ((i = 0; i < SHARDS; i++)); do
        printf '  { id = "s%d", url = "%s", zone = "%s" },\n' "$i" "${SHARD_URL[s$i]}" "$([[ $((i % 2)) == 0 ]] && echo a || echo b)"
    done
    echo "]"
} >gateway.toml

say "starting the gateway"
RUST_LOG=${RUST_LOG:-info} "$BIN" serve --config gateway.toml 2>gateway.log &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
listening=$(await_line gateway.log 'addr=127\.0\.0\.1:[0-9]+ admin=127\.0\.0\.1:[0-9]+' 20) ||
    die "the gateway did not start: $(tail -5 gateway.log)"
GATEWAY=$(sed -E 's/^addr=([^ ]+) .*/\1/' <<<"$listening")
ADMIN=$(sed -E 's/.*admin=//' <<<"$listening")
# The PID of the gateway itself (the background job is the binary, not a
# subshell, but check: /proc must describe the process that listens).
[[ $(readlink "/proc/$GATEWAY_PID/exe") == "$(realpath "$BIN")" ]] ||
    die "PID $GATEWAY_PID is not the gateway binary"

admin_get() { curl -sS --fail-with-body -H "Authorization: Bearer $ADMIN_TOKEN" "http://$ADMIN$1"; }

# Who is on the flapping shard, as the gateway's admin API says.
say "asking the admin API which tenants are on $FLAPPING"
: >subsets.tsv
while IFS=$'\t' read -r tenant key; do
    subset=$(admin_get "/admin/tenants/$tenant" | python3 -c 'import json, sys; print(",".join(json.load(sys.stdin)["subset"]))')
    printf '%s\t%s\t%s\n' "$tenant" "$key" "$subset" >>subsets.tsv
done <keys.tsv
awk -F'\t' -v s="$FLAPPING" '{ n = split($3, ids, ","); on = 0; for (i = 1; i <= n; i++) if (ids[i] == s) on = 1; print $2 > (on ? "affected.keys" : "unaffected.keys") }' subsets.tsv
AFFECTED=$(wc -l <affected.keys)
UNAFFECTED=$(wc -l <unaffected.keys)
((AFFECTED > 0 && UNAFFECTED > 0)) || die "placement put $AFFECTED tenants on $FLAPPING and $UNAFFECTED elsewhere; need both"
say "$AFFECTED tenants on $FLAPPING (affected), $UNAFFECTED not (unaffected)"

# --- load -------------------------------------------------------------------

cat >soak.lua <<'LUA'
-- Cycles through the API keys in args[1] with a mix of methods; pauses
-- args[2] ms before each request; counts statuses per class.
local threads = {}
local counter = 1

function setup(thread)
    thread:set("id", counter)
    counter = counter + 1
    table.insert(threads, thread)
end

function init(args)
    keys = {}
    for line in io.lines(args[1]) do
        if #line > 0 then table.insert(keys, line) end
    end
    pause = tonumber(args[2]) or 0
    n = 0
    ok, client_error, server_error, other = 0, 0, 0, 0
    bodies = { string.rep("a", 64), '{"amount":1,"currency":"EUR"}', string.rep("b", 4096) }
end

function delay()
    return pause
end

function request()
    n = n + 1
    -- Key and method advance at different strides, so every tenant sees
    -- every method.
    local key = keys[(n % #keys) + 1]
    local kind = math.floor(n / #keys) % 5
    local headers = { ["Authorization"] = "Bearer " .. key }
    local item = "/items/" .. (n % 997)
    if kind == 0 or kind == 1 then
        return wrk.format("GET", item .. "?view=full", headers)
    elseif kind == 2 then
        headers["Content-Type"] = "application/json"
        return wrk.format("PUT", item, headers, bodies[(n % 3) + 1])
    elseif kind == 3 then
        headers["Content-Type"] = "application/json"
        headers["Idempotency-Key"] = "soak-" .. id .. "-" .. n
        return wrk.format("POST", "/orders", headers, bodies[(n % 3) + 1])
    else
        return wrk.format("DELETE", item, headers)
    end
end

function response(status, headers, body)
    if status >= 200 and status < 300 then
        ok = ok + 1
    elseif status >= 500 then
        server_error = server_error + 1
    elseif status >= 400 then
        client_error = client_error + 1
    else
        other = other + 1
    end
end

function done(summary, latency, requests)
    local t = { ok = 0, client_error = 0, server_error = 0, other = 0 }
    for _, thread in ipairs(threads) do
        for name, _ in pairs(t) do
            t[name] = t[name] + thread:get(name)
        end
    end
    io.write(string.format(
        "SOAK ok=%d client_error=%d server_error=%d other=%d socket_errors=%d timeouts=%d p99_ms=%.2f\n",
        t.ok, t.client_error, t.server_error, t.other,
        summary.errors.connect + summary.errors.read + summary.errors.write,
        summary.errors.timeout, latency:percentile(99) / 1000))
end
LUA

WRK_PIDS=()
say "soaking for ${DURATION} s: $CONNS connections per group, ${DELAY_MS} ms between requests on each"
for group in unaffected affected; do
    wrk -t1 -c"$CONNS" -d"${DURATION}s" --timeout 10s --latency -s soak.lua \
        "http://$GATEWAY" -- "$PWD/$group.keys" "$DELAY_MS" >"wrk-$group.txt" 2>&1 &
    PIDS+=($!)
    WRK_PIDS+=($!)
done

TICKS=$(getconf CLK_TCK)
sample() {
    local rss fds cpu
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$GATEWAY_PID/status")
    fds=$(find "/proc/$GATEWAY_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
    # utime + stime (fields 14 and 15; the command name in field 2 has no
    # spaces here).
    cpu=$(awk -v hz="$TICKS" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$GATEWAY_PID/stat")
    printf '%s,%s,%s,%s\n' "$1" "$rss" "$fds" "$cpu"
}
echo "elapsed_s,rss_kib,fds,cpu_s" >soak.csv
START=$EPOCHREALTIME
for ((t = 0; t <= DURATION; t += SAMPLE)); do
    # Sampling ticks, measured from the start so they do not drift.
    wait_s=$(awk -v start="$START" -v now="$EPOCHREALTIME" -v t="$t" 'BEGIN { w = start + t - now; print (w > 0 ? w : 0) }')
    sleep "$wait_s"
    kill -0 "$GATEWAY_PID" 2>/dev/null || die "the gateway died: $(tail -5 gateway.log)"
    sample "$t" >>soak.csv
done
wait "${WRK_PIDS[@]}"

# --- results ----------------------------------------------------------------

admin_get /metrics >metrics.txt
: >availability.tsv
while IFS=$'\t' read -r tenant _ subset; do
    printf '%s\t%s\t%s\n' "$tenant" "$subset" "$(admin_get "/admin/tenants/$tenant" |
        python3 -c 'import json, sys; a = json.load(sys.stdin)["availability"]; print(a["ok"], a["total"], sep="\t")')" >>availability.tsv
done <subsets.tsv

cp soak.csv "$RESULTS/soak.csv"
DURATION=$DURATION SAMPLE=$SAMPLE FLAPPING=$FLAPPING FLAP_MS=$FLAP_MS CONNS=$CONNS \
    DELAY_MS=$DELAY_MS TENANTS=$TENANTS REVISION=$REVISION HEALTH_MS=$HEALTH_MS \
    MAX_EJECTION_MS=$MAX_EJECTION_MS \
    python3 - "$RESULTS/soak.md" <<'PY'
import os, re, sys, statistics

out = sys.argv[1]
env = os.environ
duration, sample, flap_ms = int(env["DURATION"]), int(env["SAMPLE"]), int(env["FLAP_MS"])
conns, delay_ms, tenants = int(env["CONNS"]), int(env["DELAY_MS"]), int(env["TENANTS"])
flapping, revision = env["FLAPPING"], env["REVISION"]
health_ms, max_ejection_ms = int(env["HEALTH_MS"]), int(env["MAX_EJECTION_MS"])

rows = []
with open("soak.csv") as f:
    next(f)
    for line in f:
        t, rss, fds, cpu = line.strip().split(",")
        rows.append((float(t), int(rss), int(fds), float(cpu)))

def slope(points):
    """Least-squares slope of (minutes, value)."""
    xs = [t / 60 for t, _ in points]
    ys = [v for _, v in points]
    if len(xs) < 2:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx

half = [r for r in rows if r[0] >= duration / 2]
rss_all, rss_half = slope([(r[0], r[1]) for r in rows]), slope([(r[0], r[1]) for r in half])
fds_all, fds_half = slope([(r[0], r[2]) for r in rows]), slope([(r[0], r[2]) for r in half])
rss_mean_half = statistics.fmean(r[1] for r in half)
cpu_share = (rows[-1][3] - rows[0][3]) / max(rows[-1][0] - rows[0][0], 1e-9)

def wrk(group):
    text = open(f"wrk-{group}.txt").read()
    m = re.search(r"^SOAK (.*)$", text, re.M)
    if not m:
        sys.exit(f"bench/soak.sh: wrk ({group}) printed no summary:\n{text}")
    counts = {k: float(v) for k, v in (p.split("=") for p in m.group(1).split())}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    counts["rps"] = float(rps.group(1)) if rps else float("nan")
    counts["requests"] = counts["ok"] + counts["client_error"] + counts["server_error"] + counts["other"]
    return counts

load = {g: wrk(g) for g in ("unaffected", "affected")}

metrics = {}
for line in open("metrics.txt"):
    m = re.match(r'^(shuffle_[a-z_]+)\{([^}]*)\} ([0-9.eE+-]+)$', line.strip())
    if m:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        metrics.setdefault(m.group(1), []).append((labels, float(m.group(3))))
def metric_sum(name, **match):
    return sum(v for labels, v in metrics.get(name, []) if all(labels.get(k) == w for k, w in match.items()))
outcomes = {}
for labels, v in metrics.get("shuffle_requests_total", []):
    outcomes[labels["outcome"]] = outcomes.get(labels["outcome"], 0) + v
server_errors = sum(v for o, v in outcomes.items() if o in ("bad_gateway", "unavailable", "timeout", "server_error"))
failovers = {labels["kind"]: v for labels, v in metrics.get("shuffle_failovers_total", [])}
attempts_flapping = {labels["outcome"]: v for labels, v in metrics.get("shuffle_attempts_total", []) if labels.get("shard") == flapping}
ejections = metric_sum("shuffle_ejections_total", shard=flapping)

groups = {"affected": [0, 0, 0, 0], "unaffected": [0, 0, 0, 0]}  # tenants, with traffic, ok, total
for line in open("availability.tsv"):
    tenant, subset, ok, total = line.rstrip("\n").split("\t")
    g = groups["affected" if flapping in subset.split(",") else "unaffected"]
    g[0] += 1
    g[1] += int(total) > 0
    g[2] += int(ok)
    g[3] += int(total)
gateway_errors = {g: v[3] - v[2] for g, v in groups.items()}

unaffected_clean = load["unaffected"]["server_error"] == 0 and load["unaffected"]["socket_errors"] == 0 \
    and load["unaffected"]["timeouts"] == 0 and gateway_errors["unaffected"] == 0
# "Flat": the second half's trend would add under 5 % of the RSS in an
# hour, and the descriptor count does not trend by a whole fd a minute.
# A run under five minutes is too short to call either way.
judge = lambda flat: "n/a (run under 5 min)" if duration < 300 else ("yes" if flat else "no")
rss_flat = judge(abs(rss_half) * 60 < 0.05 * rss_mean_half)
fds_flat = judge(abs(fds_half) < 1.0)

def n(x):
    return f"{x:,.0f}"

lines = [
    "# Soak",
    "",
    f"{duration} s of mixed traffic through the gateway while shard {flapping} flaps "
    f"(listening, then killed with its connections dropped, every {flap_ms} ms), "
    f"measured by `bench/soak.sh` (revision {revision}).",
    "",
    f"Set-up: 8 test shards, {tenants} tenants with API keys, k = 2 (rendezvous); health checks "
    f"every {health_ms} ms with rise = fall = 1 and passive ejections of 1 s growing to at most {max_ejection_ms} ms, "
    f"so {flapping} keeps coming back into rotation and dying with requests in flight; defaults for "
    f"timeouts and the retry budget. Two wrk instances, one per "
    f"group of tenants, {conns} connections each, every connection pausing {delay_ms} ms before "
    f"each request; the mix per tenant: 40 % GET, 20 % PUT with a body (64 B to 4 KiB), "
    f"20 % POST with an Idempotency-Key and a body, 20 % DELETE. Affected tenants are those "
    f"whose subset holds {flapping}, as `GET /admin/tenants/{{id}}` reports it.",
    "",
    "## Unaffected tenants saw no errors: " + ("**yes**" if unaffected_clean else "**NO**"),
    "",
    "| group | tenants | requests (wrk) | req/s | 2xx | 4xx | 5xx | socket errors | timeouts | p99 | gateway: requests | gateway: 5xx |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for g in ("unaffected", "affected"):
    l, a = load[g], groups[g]
    lines.append(
        f"| {g} | {a[0]} | {n(l['requests'])} | {l['rps']:,.1f} | {n(l['ok'])} | {n(l['client_error'])} | "
        f"{n(l['server_error'])} | {n(l['socket_errors'])} | {n(l['timeouts'])} | {l['p99_ms']:.1f} ms | "
        f"{n(a[3])} | {n(gateway_errors[g])} |")
lines += [
    "",
    "wrk counts what its connections received; the gateway's columns are the per-tenant "
    "availability windows of the admin API (stretched to 3600 s so they cover the run), "
    "summed over each group's tenants. A 5xx in the gateway's column is a server error the "
    "gateway answered that tenant."
    + (" This run is longer than the window covers (3300 s at least), so the gateway's "
       "columns count only its last hour or so." if duration > 3300 else ""),
    "",
    f"Gateway /metrics at the end: {n(sum(outcomes.values()))} requests, "
    + ", ".join(f"{o} {n(v)}" for o, v in sorted(outcomes.items()))
    + f"; 5xx in all {n(server_errors)}. Failovers: "
    + (", ".join(f"{k} {n(v)}" for k, v in sorted(failovers.items())) or "none")
    + f". Attempts on {flapping}: "
    + (", ".join(f"{k} {n(v)}" for k, v in sorted(attempts_flapping.items())) or "none")
    + f"; ejections of {flapping}: {n(ejections)}.",
    "",
    "## Memory and file descriptors",
    "",
    f"Sampled every {sample} s from /proc (`soak.csv`: elapsed_s, rss_kib, fds, cpu_s). "
    f"The gateway used {cpu_share:.1%} of one CPU on average "
    f"({(rows[-1][3] - rows[0][3]) * 1e6 / max(sum(load[g]['requests'] for g in load), 1):.0f} µs of CPU per request).",
    "",
    "| | start | end | min | max | slope (whole run) | slope (second half) | flat |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
    f"| RSS (KiB) | {n(rows[0][1])} | {n(rows[-1][1])} | {n(min(r[1] for r in rows))} | {n(max(r[1] for r in rows))} | "
    f"{rss_all:+,.1f} KiB/min | {rss_half:+,.1f} KiB/min | {rss_flat} |",
    f"| open fds | {rows[0][2]} | {rows[-1][2]} | {min(r[2] for r in rows)} | {max(r[2] for r in rows)} | "
    f"{fds_all:+.2f}/min | {fds_half:+.2f}/min | {fds_flat} |",
    "",
    "Slopes are least-squares fits over the samples. The first samples include the warm-up "
    "(connection pools, allocator arenas, the availability windows filling), so the second "
    "half is the steady state; \"flat\" means the second half's RSS trend would add under 5 % "
    "of the RSS in an hour and the descriptors trend by less than one a minute.",
    "",
]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
sys.exit(0 if unaffected_clean else 1)
PY
