#!/usr/bin/env bash
# Placement benchmark: ns per tenant for our hmac-modulo (n=64, k=3) and rendezvous (n=1024, k=3) against the design chapter's Python Recipe 12.1 `shuffle_shards`, same tenants, same run.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/placement.sh                  # or: bench/run.sh placement
#   ROUNDS=3 bench/placement.sh
#
# Each round measures, one after the other:
#   - the chapter's `shuffle_shards` in one Python process, timed over
#     PY_TENANTS tenants tenant-0 ... (its default key), at n=64 and n=1024;
#   - ours, the algorithm alone: `cargo bench -p shuffle-shard-placement
#     --bench placement` (criterion; time per batch of 1024 tenants / 1024);
#   - ours end to end: `shuffle-shard place` over CLI_TENANTS tenants on
#     stdin, JSON lines to /dev/null (so reading, placing and JSON output).
# Before the rounds it checks that the CLI and the recipe place the first
# AGREE_TENANTS tenants identically (hmac-modulo, n=64, k=3, default key).
# The chapter's Python is cut out of ../shared/seed/ at run time into a
# temporary directory; without that file the comparison is skipped.
#
# Writes bench/results/placement.md and bench/results/placement.json.
set -euo pipefail
# shellcheck disable=SC2034 # SUITE is read by lib/common.sh
SUITE=placement
# shellcheck source=bench/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

PY_TENANTS=${PY_TENANTS:-200000}      # tenants per Python timing loop
CLI_TENANTS=${CLI_TENANTS:-1000000}   # tenants streamed through `place`
AGREE_TENANTS=${AGREE_TENANTS:-1000}  # tenants compared with the recipe
WARM_UP=${WARM_UP:-1}                 # criterion --warm-up-time, seconds
MEASURE=${MEASURE:-3}                 # criterion --measurement-time, seconds
for value in PY_TENANTS CLI_TENANTS AGREE_TENANTS WARM_UP MEASURE; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done

install_missing python3:python3
START=$EPOCHREALTIME
build_cli
say "building: cargo bench -p shuffle-shard-placement --bench placement --no-run"
cargo bench -p shuffle-shard-placement --bench placement --no-run >"$WORK/bench-build.log" 2>&1 ||
    { cat "$WORK/bench-build.log" >&2; die "the criterion benchmark did not build"; }
extract_recipe
RAW="$WORK/raw.jsonl"
: >"$RAW"

# The criterion benchmarks we read (group/function, as criterion names them).
CRITERION_HMAC="hmac-modulo n=64 k=3/place_into (reused buffer)"
CRITERION_RDV="n=1024 k=3/rendezvous"
CRITERION_HMAC_1024="n=1024 k=3/hmac-modulo"
CRITERION_FILTER='^(hmac-modulo n=64 k=3/place_into \(reused buffer\)|n=1024 k=3/rendezvous|n=1024 k=3/hmac-modulo)$'
CRITERION_BATCH=1024 # tenants per criterion iteration (TENANTS in benches/placement.rs)

awk -v t="$CLI_TENANTS" 'BEGIN { for (i = 0; i < t; i++) print "tenant-" i }' >"$WORK/tenants.txt"

# --- the outputs agree -----------------------------------------------------------

AGREE="skipped"
if [[ -n $RECIPE_DIR ]]; then
    head -n "$AGREE_TENANTS" "$WORK/tenants.txt" |
        "$BIN" place --shards 64 --k 3 >"$WORK/agree.jsonl" 2>"$WORK/agree.err"
    verdict=$(python3 -B "$LIB/recipe_driver.py" agree --module-dir "$RECIPE_DIR" --n 64 --k 3 <"$WORK/agree.jsonl")
    if python3 -c 'import json, sys; sys.exit(0 if json.loads(sys.argv[1])["agree"] else 1)' "$verdict"; then
        AGREE="agree"
        echo "agree: shuffle-shard place and the chapter's shuffle_shards give the same shards for the first $AGREE_TENANTS tenants (hmac-modulo, n=64, k=3, default key)"
    else
        echo "fail: shuffle-shard place and the chapter's shuffle_shards disagree: $verdict"
        exit 1
    fi
fi

# --- rounds ------------------------------------------------------------------------

criterion_ns() { # group/function -> ns per tenant from this round's estimates
    local file="$TARGET_DIR/criterion/$1/new/estimates.json"
    [[ $file -nt $WORK/round-start ]] || die "criterion wrote no fresh estimate for '$1' ($file)"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"] / int(sys.argv[2]))' \
        "$file" "$CRITERION_BATCH"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    touch "$WORK/round-start"
    sleep 0.01 # so that a fresh file is strictly newer
    if [[ -n $RECIPE_DIR ]]; then
        for n in 64 1024; do
            out=$(python3 -B "$LIB/recipe_driver.py" place --module-dir "$RECIPE_DIR" --tenants "$PY_TENANTS" --n "$n" --k 3)
            ns=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["ns_per_tenant"])' "$out")
            record round="$round" id="python-$n" ns_per_tenant="$ns"
            say "  round $round  Python Recipe 12.1, n=$n k=3: $(printf '%.0f' "$ns") ns/tenant"
        done
    fi

    cargo bench -q -p shuffle-shard-placement --bench placement -- \
        --warm-up-time "$WARM_UP" --measurement-time "$MEASURE" --noplot "$CRITERION_FILTER" \
        >"$WORK/criterion-$round.txt" 2>&1 ||
        { cat "$WORK/criterion-$round.txt" >&2; die "cargo bench failed"; }
    for pair in "criterion-hmac-64:$CRITERION_HMAC" "criterion-rendezvous-1024:$CRITERION_RDV" \
        "criterion-hmac-1024:$CRITERION_HMAC_1024"; do
        ns=$(criterion_ns "${pair#*:}")
        record round="$round" id="${pair%%:*}" ns_per_tenant="$ns"
        say "  round $round  ours (criterion) ${pair#*:}: $(printf '%.1f' "$ns") ns/tenant"
    done

    for spec in "cli-hmac-64:64:hmac-modulo" "cli-rendezvous-1024:1024:rendezvous"; do
        IFS=: read -r id n algorithm <<<"$spec"
        t0=$EPOCHREALTIME
        "$BIN" place --shards "$n" --k 3 --algorithm "$algorithm" <"$WORK/tenants.txt" >/dev/null 2>"$WORK/place.err"
        t1=$EPOCHREALTIME
        seconds=$(elapsed "$t0" "$t1")
        ns=$(awk -v s="$seconds" -v t="$CLI_TENANTS" 'BEGIN { print s * 1e9 / t }')
        record round="$round" id="$id" ns_per_tenant="$ns" wall_s="$seconds"
        say "  round $round  ours (CLI place, $algorithm n=$n): $(printf '%.0f' "$ns") ns/tenant end to end"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report --------------------------------------------------------------------------

mkdir -p "$RESULTS"
python3 -B "$LIB/report.py" placement --raw "$RAW" --out "$RESULTS/placement" \
    --set command="ROUNDS=$ROUNDS bench/run.sh placement" --set rounds="$ROUNDS" \
    --set py_tenants="$PY_TENANTS" --set cli_tenants="$CLI_TENANTS" --set agree_tenants="$AGREE_TENANTS" \
    --set agree="$AGREE" --set recipe_note="$RECIPE_NOTE" --set recipe_sha256="$RECIPE_SHA256" \
    --set criterion_warm_up_s="$WARM_UP" --set criterion_measurement_s="$MEASURE" \
    --set load_before="$LOAD_BEFORE" --set load_after="$LOAD_AFTER" \
    --set runtime_s="$(elapsed "$START" "$EPOCHREALTIME")"
echo
cat "$RESULTS/placement.md"
echo
echo "Wrote bench/results/placement.md and bench/results/placement.json."
