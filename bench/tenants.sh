#!/usr/bin/env bash
# Tenants at scale (issue 31): how fast the gateway answers, and how much memory it holds, with 1M and 10M tenants from a JSON Lines file, 1M from a TOML file and 1M from PostgreSQL; and how long one `PUT /admin/tenants/{id}` on one replica takes to be served by a second.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/tenants.sh                           # or: bench/run.sh tenants
#   SKIP_10M=1 ROUNDS=3 bench/tenants.sh       # without the 10M case (it needs a 1.1 GB file and ~1 min a round)
#   BIN=/path/to/shuffle-shard bench/tenants.sh  # measure that binary, build nothing
#   BIN=… BIN_REV=abc123 bench/tenants.sh    # ... and record that it was built from revision abc123
#   BEFORE_BIN=/path/to/older bench/tenants.sh # also the 1M TOML case on an older build, side by side
#
# Writes bench/results/tenants.json and bench/results/tenants.md and prints
# the table; BENCHMARKS.md ("Tenants at scale") is regenerated from them.
# Loopback only; every process it starts is stopped on exit.
#
# Why the set-up is what it is:
#
# - The operator's case from the issue: 64 shard ids in one cell, k = 4,
#   rendezvous; every shard id points at the same `shuffle-shard backend`,
#   so the backends cost nothing and only the gateway's registry is
#   measured. Tenant i is `tenant-%07d` with API key `key-i` (the file
#   holds its SHA-256 only), as an import from a real registry would look.
#   The 1M file is the first million lines of the 10M one; the TOML file is
#   made from the JSON Lines one by `shuffle-shard tenants convert`, the
#   PostgreSQL table by `shuffle-shard tenants init-schema` and `import`.
# - One start, measured (bench/lib/tenants_bench.py start): the time from
#   launching `shuffle-shard serve` to the first 200 for the last tenant's
#   key (polled every 5 ms over one keep-alive connection, from one
#   process, so the poller costs a busy machine little); then, once the
#   gateway has built its blast-radius model over every tenant (a thread of
#   its own, after it starts serving; its debug log line says when) or its
#   VmRSS has stopped moving (from PostgreSQL the model logs no line; VmRSS
#   steady counts only 3 s after the first answer, and the model of 1M
#   tenants takes about 1.5 s), VmRSS ("serving") and VmHWM ("peak") from
#   /proc/PID/status, and the process's user+system CPU seconds up to the
#   first answer from /proc/PID/stat. Wall time on a shared 2-CPU machine
#   moves with whatever else runs; CPU seconds move much less, so both are
#   recorded, with the load average at each launch.
# - Cases interleave within a round (1M JSON Lines, 10M, TOML, PostgreSQL,
#   then the next round), so a drift of the machine does not always hit the
#   same case; each figure is the median [min–max] over ROUNDS rounds.
# - PostgreSQL 15 (Debian's, /usr/lib/postgresql/15/bin or PG_BIN) in a
#   scratch directory as the tests start it (crates/testkit/src/postgres.rs):
#   initdb as the `postgres` user when run as root, 127.0.0.1 on a free
#   port, a role with a password, fsync off. Its own memory is not the
#   gateway's and is not counted.
# - PUT propagation: two replicas (`serve`, own listen and admin ports) on
#   the same store with an admin token; PUTS times `PUT
#   /admin/tenants/new-…` (a new tenant, a fresh key) on replica A, then
#   replica B's proxy is asked with the new key every 2 ms until it answers
#   200. The figure is the time from sending the PUT to B's first 200: what
#   an operator onboarding a tenant waits for on the whole fleet (target:
#   within 1 s).
set -Eeuo pipefail
trap 'echo "bench/tenants.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

ROUNDS=${ROUNDS:-3}           # rounds; each starts every case once
SKIP_10M=${SKIP_10M:-}        # 1: no 10M-tenant case
TENANTS=${TENANTS:-1000000}   # the 1M cases' tenants
BIG=${BIG:-10000000}          # the 10M case's tenants
PUTS=${PUTS:-20}              # PUTs timed for the propagation
SETTLE_MAX=${SETTLE_MAX:-8}   # seconds after the first answer to wait at most for the model (else VmRSS steady)
BIG_SETTLE_MAX=${BIG_SETTLE_MAX:-30}
BEFORE_BIN=${BEFORE_BIN:-}    # an older build: adds the 1M TOML case on it
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
K=4
SHARDS=64

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"
LIB="$ROOT/bench/lib"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/tenants.sh: error: $*"
    exit 1
}
for value in ROUNDS TENANTS BIG PUTS SETTLE_MAX BIG_SETTLE_MAX; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
((TENANTS <= BIG && BIG <= 10000000)) || die "need TENANTS ≤ BIG ≤ 10,000,000 (ids are tenant-%07d)"

# --- tools --------------------------------------------------------------------------

# shellcheck source=bench/lib/apt.sh
source "$LIB/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$LIB/proxies.sh"
missing=()
[[ -n $(find_tool curl) ]] || missing+=(curl)
[[ -n $(find_tool python3) ]] || missing+=(python3)
[[ -x $PG_BIN/initdb ]] || missing+=(postgresql)
apt_install "${missing[@]}"
[[ -x $PG_BIN/initdb ]] || die "PostgreSQL 15 is not in $PG_BIN (set PG_BIN to the directory holding initdb)"

START=$EPOCHREALTIME
if [[ -n ${BIN:-} ]]; then BENCH_BIN=$BIN; fi
build_cli
[[ -z $BEFORE_BIN || -x $BEFORE_BIN ]] || die "BEFORE_BIN=$BEFORE_BIN is not an executable"
scratch_dir tenants
# A copy: another build in target/ cannot change the binary mid-run.
cp "$BIN" "$WORK/shuffle-shard"
BIN_SOURCE=$BIN
BIN="$WORK/shuffle-shard"
BIN_VERSION=$("$BIN" --version 2>/dev/null || echo unknown)

PG_DIR="$WORK/pg" PG_PORT=""
pg() { # pg PROGRAM ARGS...: one of PostgreSQL's programs, as its user when we are root
    if ((EUID == 0)); then runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; else "$PG_BIN/$1" "${@:2}"; fi
}
pg_stop() { [[ -z $PG_PORT ]] || pg pg_ctl -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true; }
on_exit() {
    local status=$?
    set +e # under -e, the `(exit $status)` below would end the trap before stop_all
    trap - ERR
    pg_stop
    (exit "$status")
    stop_all
}
trap on_exit EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "load average before: $LOAD_BEFORE; $(nproc) CPUs; binary $BIN_SOURCE ($BIN_VERSION)"

# --- tenants ----------------------------------------------------------------------------

T0=$EPOCHREALTIME
if [[ -z $SKIP_10M ]]; then
    avail=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
    ((avail > 3 * 1024 * 1024)) || die "the 10M case needs about 3 GB free under $WORK (${avail} KiB free); SKIP_10M=1 skips it"
    say "generating $BIG tenants (JSON Lines)"
    python3 -B "$LIB/tenants_bench.py" gen "$BIG" "$WORK/tenants-big.jsonl"
    head -n "$TENANTS" "$WORK/tenants-big.jsonl" >"$WORK/tenants.jsonl"
else
    say "generating $TENANTS tenants (JSON Lines)"
    python3 -B "$LIB/tenants_bench.py" gen "$TENANTS" "$WORK/tenants.jsonl"
fi
GEN_S=$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
T0=$EPOCHREALTIME
"$BIN" tenants convert "$WORK/tenants.jsonl" "$WORK/tenants.toml" >"$WORK/convert.log" 2>&1 ||
    die "tenants convert failed: $(tail -3 "$WORK/convert.log")"
CONVERT_S=$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
grep -q "id = \"tenant-$(printf %07d $((TENANTS - 1)))\"" "$WORK/tenants.toml" || die "the converted TOML lacks the last tenant"
size_mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.0f", b / 1e6 }'; }
say "tenants: $TENANTS in JSON Lines ($(size_mb "$WORK/tenants.jsonl") MB) and TOML ($(size_mb "$WORK/tenants.toml") MB, converted in ${CONVERT_S}s)"

# --- PostgreSQL ------------------------------------------------------------------------------

mkdir -p "$PG_DIR"
chmod 711 "$WORK" # the postgres user must reach its directory
((EUID != 0)) || chown postgres: "$PG_DIR"
pg initdb -D "$PG_DIR/data" -U postgres -E UTF8 --no-sync --auth-local=trust --auth-host=scram-sha-256 >"$WORK/initdb.log" 2>&1 ||
    die "initdb failed: $(tail -3 "$WORK/initdb.log")"
for attempt in 1 2 3 4 5; do
    pick_port PG_PORT
    if pg pg_ctl -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 30 \
        -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start >/dev/null 2>&1; then
        break
    fi
    ((attempt < 5)) || die "PostgreSQL did not start: $(tail -3 "$PG_DIR/postgres.log")"
done
PG_PASSWORD="pw-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
psql_super() { pg psql -h "$PG_DIR" -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -X -A -t -q "$@"; }
psql_super -d postgres -c "CREATE ROLE gateway LOGIN PASSWORD '$PG_PASSWORD'"
psql_super -d postgres -c "CREATE DATABASE tenants OWNER gateway"
STORE="postgres://gateway:$PG_PASSWORD@127.0.0.1:$PG_PORT/tenants"
PG_VERSION=$(pg postgres --version | awk '{ print $3 }')
"$BIN" tenants init-schema --store "$STORE" >"$WORK/init-schema.log" 2>&1 || die "tenants init-schema failed: $(tail -3 "$WORK/init-schema.log")"
say "importing $TENANTS tenants into PostgreSQL $PG_VERSION (shuffle-shard tenants import)"
T0=$EPOCHREALTIME
"$BIN" tenants import --store "$STORE" "$WORK/tenants.jsonl" >"$WORK/import.log" 2>&1 || die "tenants import failed: $(tail -3 "$WORK/import.log")"
IMPORT_S=$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
rows=$(psql_super -d tenants -c "SELECT count(*) FROM shuffle_shard_tenants" 2>/dev/null || echo "?")
say "imported in ${IMPORT_S}s (rows in the table: $rows)"

# --- the gateway's configuration ---------------------------------------------------------------

pick_port BACKEND_PORT
"$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id shared >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
ready backend "http://127.0.0.1:$BACKEND_PORT/x" 10
head -c 32 /dev/urandom >"$WORK/placement.key"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/admin.token"

# gateway_config FILE LISTEN_PORT ADMIN_PORT SOURCE: SOURCE is a tenants file
# (absolute path) or "store".
gateway_config() {
    local file=$1 listen=$2 admin=$3 source=$4 i
    {
        echo "listen = \"127.0.0.1:$listen\""
        [[ $source == store ]] || echo "tenants_file = \"$source\""
        cat <<EOF

[placement]
algorithm = "rendezvous"
k = $K
key_file = "$WORK/placement.key"
key_version = "bench"

[admin]
listen = "127.0.0.1:$admin"
token_file = "$WORK/admin.token"
EOF
        [[ $source != store ]] || printf '\n[tenants]\nstore = "%s"\n' "$STORE"
        printf '\n[[cells]]\nname = "main"\nshards = [\n'
        for i in $(seq 0 $((SHARDS - 1))); do
            printf '  { id = "s%02d", url = "http://127.0.0.1:%s" },\n' "$i" "$BACKEND_PORT"
        done
        echo "]"
    } >"$file"
}

CASES=("jsonl-1m:$TENANTS:$WORK/tenants.jsonl")
[[ -n $SKIP_10M ]] || CASES+=("jsonl-10m:$BIG:$WORK/tenants-big.jsonl")
CASES+=("toml-1m:$TENANTS:$WORK/tenants.toml" "postgres-1m:$TENANTS:store")
[[ -z $BEFORE_BIN ]] || CASES+=("toml-1m-before:$TENANTS:$WORK/tenants.toml")

RUNS="$WORK/runs.jsonl"
: >"$RUNS"
run_case() { # run_case ROUND NAME:N:SOURCE
    local round=$1 name=${2%%:*} rest=${2#*:} n source bin=$BIN settle=$SETTLE_MAX
    n=${rest%%:*} source=${rest#*:}
    [[ $name != *-before ]] || bin=$BEFORE_BIN
    ((n <= TENANTS)) || settle=$BIG_SETTLE_MAX
    # Globals, not locals named "port": pick_port's own local would shadow them.
    pick_port GW_PORT
    pick_port GW_ADMIN_PORT
    gateway_config "$WORK/$name.toml" "$GW_PORT" "$GW_ADMIN_PORT" "$source"
    RUST_LOG=${RUST_LOG:-info,gateway::state=debug} python3 -B "$LIB/tenants_bench.py" start \
        --url "http://127.0.0.1:$GW_PORT/x" --key "key-$((n - 1))" --log "$WORK/$name-$round.log" \
        --case "$name" --round "$round" --tenants "$n" --settle-max "$settle" -- "$bin" serve --config "$WORK/$name.toml" >>"$RUNS" ||
        die "case $name, round $round failed; see $WORK/$name-$round.log"
}

say "measuring: $ROUNDS rounds of: ${CASES[*]%%:*}"
for round in $(seq "$ROUNDS"); do
    for case in "${CASES[@]}"; do
        run_case "$round" "$case"
    done
done

# --- PUT on one replica, served by the other -------------------------------------------------

say "PUT propagation: two replicas on the store, $PUTS PUTs"
declare -A REPLICA_PORT
for replica in a b; do
    pick_port GW_PORT
    pick_port GW_ADMIN_PORT
    REPLICA_PORT[$replica]=$GW_PORT
    REPLICA_PORT[$replica-admin]=$GW_ADMIN_PORT
    gateway_config "$WORK/replica-$replica.toml" "$GW_PORT" "$GW_ADMIN_PORT" store
    "$BIN" serve --config "$WORK/replica-$replica.toml" >"$WORK/replica-$replica.log" 2>&1 &
    PIDS+=($!)
done
for replica in a b; do
    ready "replica $replica" "http://127.0.0.1:${REPLICA_PORT[$replica]}/x" 120 -H "Authorization: Bearer key-$((TENANTS - 1))"
done
PUT_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 -B "$LIB/tenants_bench.py" put --admin "http://127.0.0.1:${REPLICA_PORT[a-admin]}" --token-file "$WORK/admin.token" \
    --proxy "http://127.0.0.1:${REPLICA_PORT[b]}/x" --count "$PUTS" --out "$WORK/puts.json" ||
    die "PUT propagation failed; logs in $WORK/replica-*.log"

# --- the report --------------------------------------------------------------------------------

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
# A binary given with BIN= may come from another revision: BIN_REV says which.
if [[ -n ${BIN_REV:-} ]]; then
    GIT_REV="$BIN_REV (the binary's, BIN_REV)"
elif [[ -n ${BENCH_BIN:-} ]]; then
    GIT_REV="$GIT_REV (the checkout's; the binary was given with BIN=)"
fi
COMMAND="${BENCH_BIN:+BIN=… }${BIN_REV:+BIN_REV=$BIN_REV }ROUNDS=$ROUNDS${SKIP_10M:+ SKIP_10M=$SKIP_10M} PUTS=$PUTS${BEFORE_BIN:+ BEFORE_BIN=…} bench/tenants.sh"
meta=(
    "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "git_rev=$GIT_REV"
    "command=$COMMAND"
    "runtime_s=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    "machine.nproc=$(nproc)"
    "machine.cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    "machine.kernel=$(uname -r)"
    "machine.memory_gib=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
    "machine.loadavg_before=$LOAD_BEFORE"
    "machine.loadavg_put=$PUT_LOAD"
    "machine.loadavg_after=$LOAD_AFTER"
    "versions.shuffle_shard=$BIN_VERSION"
    "versions.postgresql=$PG_VERSION"
    "versions.rustc=$(rustc --version 2>/dev/null || echo unknown)"
    "settings.rounds=$ROUNDS"
    "settings.tenants=$TENANTS"
    "settings.big=$([[ -n $SKIP_10M ]] && echo 0 || echo "$BIG")"
    "settings.shards=$SHARDS"
    "settings.k=$K"
    "settings.puts=$PUTS"
    "settings.settle_max_s=$SETTLE_MAX"
    "settings.before_bin=$BEFORE_BIN"
    "files.jsonl_mb=$(size_mb "$WORK/tenants.jsonl")"
    "files.toml_mb=$(size_mb "$WORK/tenants.toml")"
    "files.big_jsonl_mb=$([[ -n $SKIP_10M ]] && echo 0 || size_mb "$WORK/tenants-big.jsonl")"
    "files.generate_s=$GEN_S"
    "files.convert_s=$CONVERT_S"
    "files.import_s=$IMPORT_S"
)
mkdir -p "$RESULTS"
python3 -B "$LIB/tenants_report.py" --runs "$RUNS" --puts "$WORK/puts.json" \
    --md "$RESULTS/tenants.md" --json "$RESULTS/tenants.json" -- "${meta[@]}"
python3 -B "$LIB/benchmarks_md.py" || say "bench/tenants.sh: BENCHMARKS.md was written, but some results could not be read"

echo
cat "$RESULTS/tenants.md"
echo
echo "Wrote bench/results/tenants.md and bench/results/tenants.json; BENCHMARKS.md regenerated."
