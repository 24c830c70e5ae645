#!/usr/bin/env bash
# Analysis benchmark: `shuffle-shard blast` against the design chapter's Python Recipe 12.2 (exact pairwise overlap, every double failure) on 2,000 and 20,000 tenants, ours alone at 1M and 10M tenants (wall time, peak RSS), and the issue-21 cliff (a sweep of 43 failures out of 46 shards) against a naive loop.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/analysis.sh                   # or: bench/run.sh analysis
#   ROUNDS=3 PY_TIMEOUT=40 PY_ONCE_OVER=5 bench/analysis.sh
#   CLIFF_BEFORE_BIN=/path/to/old/shuffle-shard bench/analysis.sh   # also time the cliff with an older build, once
#
# Each round runs, for every side-by-side case, the chapter's Python (cut out
# of ../shared/seed/ at run time into a temporary directory, stopped by
# `timeout` after PY_TIMEOUT seconds; a case that timed out, or that took
# more than PY_ONCE_OVER seconds, is not run again: its Python time is
# steady, and repeating it would take most of the suite's time) and then
# ours; then ours alone at scale. Our runs are whole processes under
# `/usr/bin/time -v` (peak RSS, CPU). Everything uses hmac-modulo with the
# recipe's default key and the tenants tenant-0, tenant-1, ...; before
# reporting, our overlap fraction and sweep figures are checked against
# Python's to 1e-9. Without the chapter the comparison is skipped.
#
# Writes bench/results/analysis.md and bench/results/analysis.json.
set -euo pipefail
# shellcheck disable=SC2034 # SUITE is read by lib/common.sh
SUITE=analysis
# shellcheck source=bench/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

PY_TIMEOUT=${PY_TIMEOUT:-40}     # seconds before a Python run is stopped
PY_ONCE_OVER=${PY_ONCE_OVER:-5}  # a Python case that took longer (seconds) is not run again in later rounds
SIDE_TENANTS=${SIDE_TENANTS:-"2000 20000"}
SCALE_TENANTS=${SCALE_TENANTS:-"1000000 10000000"}
# The cliff of issue 21: n k tenants failures. Sweep cost once grew with the
# failure-set size (C(43, 5) lookups per set: 458 s); now it is bounded by
# the distinct subsets. A naive loop over `place` output is the yardstick.
CLIFF=${CLIFF:-"46 5 1026 43"}
CLIFF_BEFORE_BIN=${CLIFF_BEFORE_BIN:-}          # an older build to time the cliff with (round 1 only)
CLIFF_BEFORE_TIMEOUT=${CLIFF_BEFORE_TIMEOUT:-1200} # seconds before that run is stopped
[[ -z $CLIFF_BEFORE_BIN || -x $CLIFF_BEFORE_BIN ]] || die "CLIFF_BEFORE_BIN=$CLIFF_BEFORE_BIN is not an executable"
[[ $PY_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "PY_TIMEOUT must be a positive whole number, not '$PY_TIMEOUT'"
[[ $PY_ONCE_OVER =~ ^[1-9][0-9]*$ ]] || die "PY_ONCE_OVER must be a positive whole number, not '$PY_ONCE_OVER'"

install_missing python3:python3 /usr/bin/time:time timeout:coreutils
START=$EPOCHREALTIME
build_cli
extract_recipe
RAW="$WORK/raw.jsonl"
: >"$RAW"

# Side by side: task n k tenants. The chapter's example is n=16, k=3.
SIDE=()
for t in $SIDE_TENANTS; do SIDE+=("overlap 16 3 $t"); done
for t in $SIDE_TENANTS; do SIDE+=("sweep 16 3 $t"); done
for t in $SIDE_TENANTS; do SIDE+=("sweep 64 3 $t"); done
# Ours alone: n k sweep tenants (the issue's speed and memory targets).
SCALE=()
for t in $SCALE_TENANTS; do SCALE+=("1000 4 1 $t" "64 3 2 $t"); done

json_get() { # FILE EXPRESSION -> the expression evaluated on the file's JSON as `d`
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# Runs ours under /usr/bin/time -v, output in $WORK/ours.json; records id.
run_ours() {
    local id=$1 round=$2
    shift 2
    local t0 t1
    t0=$EPOCHREALTIME
    /usr/bin/time -v -o "$WORK/time.txt" "$BIN" "$@" --json >"$WORK/ours.json" 2>"$WORK/ours.err" ||
        { cat "$WORK/ours.err" >&2; die "shuffle-shard $* failed"; }
    t1=$EPOCHREALTIME
    local rss user sys
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/time.txt")
    user=$(awk -F': ' '/User time \(seconds\)/ { print $2 }' "$WORK/time.txt")
    sys=$(awk -F': ' '/System time \(seconds\)/ { print $2 }' "$WORK/time.txt")
    OURS_WALL=$(elapsed "$t0" "$t1")
    OURS_RSS=$rss
    record round="$round" id="$id" wall_s="$OURS_WALL" cpu_s="$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" \
        rss_kb="$rss" command="shuffle-shard $* --json"
}

declare -A TIMED_OUT=() RAN_ONCE=()
CLIFF_CHECK="not run"
SWEEP_CHECKED=()
if [[ -n $RECIPE_DIR ]]; then
    OVERLAP_CHECK="not run (Python did not finish)"
    SWEEP_CHECK="not run (Python did not finish)"
else
    OVERLAP_CHECK="skipped (no recipe)"
    SWEEP_CHECK="skipped (no recipe)"
fi

# Checks that ours (in $WORK/ours.json) equals Python's (in $WORK/python.json) to 1e-9.
check_against_python() {
    local task=$1 label=$2 diff
    if [[ $task == overlap ]]; then
        diff=$(python3 -c '
import json, sys
py = json.load(open(sys.argv[1])); ours = json.load(open(sys.argv[2]))
print(abs(py["fraction"] - ours["pairwise_overlap"]["fraction"]), py["fraction"], ours["pairwise_overlap"]["fraction"])' \
            "$WORK/python.json" "$WORK/ours.json")
    else
        diff=$(python3 -c '
import json, sys
py = json.load(open(sys.argv[1])); ours = json.load(open(sys.argv[2]))["sweep"]
if ours["sets"] != py["sets"] or ours["sampled"]:
    print(1, "sets:", py["sets"], "ours:", ours["sets"], "sampled" if ours["sampled"] else "")
    sys.exit()
pairs = [(py[m]["worst"], ours[m]["worst"]["fraction"]) for m in ("fully_down", "degraded")]
pairs += [(py[m]["mean"], ours[m]["mean"]) for m in ("fully_down", "degraded")]
print(max(abs(a - b) for a, b in pairs), py["degraded"]["worst"], ours["degraded"]["worst"]["fraction"])' \
            "$WORK/python.json" "$WORK/ours.json")
    fi
    read -r delta py ours <<<"$diff"
    if awk -v d="$delta" 'BEGIN { exit !(d <= 1e-9) }'; then
        echo "agree: $label (largest difference $delta)"
        CHECK_RESULT="agree on $label (largest difference $delta)"
    else
        echo "fail: $label: Python $py, ours $ours (difference $delta)"
        exit 1
    fi
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    for case in "${SIDE[@]}"; do
        read -r task n k tenants <<<"$case"
        id="$task-$n-$k-$tenants"
        python_ok=0
        if [[ -n $RECIPE_DIR && -z ${TIMED_OUT[$id]:-} && -z ${RAN_ONCE[$id]:-} ]]; then
            rc=0
            timeout "$PY_TIMEOUT" python3 -B "$LIB/recipe_driver.py" "$task" --module-dir "$RECIPE_DIR" \
                --tenants "$tenants" --n "$n" --k "$k" >"$WORK/python.json" 2>"$WORK/python.err" || rc=$?
            if ((rc == 0)); then
                python_ok=1
                py_elapsed=$(json_get "$WORK/python.json" 'd["elapsed_s"]')
                record round="$round" id="python-$id" status=ok \
                    elapsed_s="$py_elapsed" \
                    cpu_s="$(json_get "$WORK/python.json" 'd["cpu_s"]')"
                once=""
                if awk -v e="$py_elapsed" -v l="$PY_ONCE_OVER" 'BEGIN { exit !(e > l) }'; then
                    RAN_ONCE[$id]=1
                    ((round == ROUNDS)) || once="; over $PY_ONCE_OVER s, not run again"
                fi
                say "  round $round  Python $task n=$n k=$k, $tenants tenants: $(json_get "$WORK/python.json" 'round(d["elapsed_s"], 3)') s$once"
            elif ((rc == 124)); then
                TIMED_OUT[$id]=1
                progress=$(grep '^progress ' "$WORK/python.err" | tail -1 || true)
                if [[ -n $progress ]]; then
                    read -r _ sets_done sets_total at <<<"$progress"
                    record round="$round" id="python-$id" status=timeout \
                        progress="{\"done\": $sets_done, \"total\": $sets_total, \"elapsed_s\": $at}"
                else
                    record round="$round" id="python-$id" status=timeout progress=null
                fi
                say "  round $round  Python $task n=$n k=$k, $tenants tenants: timed out at $PY_TIMEOUT s${progress:+ ($sets_done of $sets_total sets done)}; not run again"
            else
                cat "$WORK/python.err" >&2
                die "the Python recipe failed ($task, n=$n, k=$k, $tenants tenants; exit code $rc)"
            fi
        fi

        args=(blast --shards "$n" --k "$k" --tenants "$tenants")
        [[ $task == sweep ]] && args+=(--sweep 2)
        run_ours "ours-$id" "$round" "${args[@]}"
        say "  round $round  ours   $task n=$n k=$k, $tenants tenants: $OURS_WALL s"

        # The figures must match: the overlap on the smallest population, every
        # sweep Python finished (first round; the rest are the same runs again).
        if ((python_ok && round == 1)); then
            if [[ $task == overlap && $tenants == "${SIDE_TENANTS%% *}" ]]; then
                check_against_python overlap "pairwise overlap, n=$n k=$k, $tenants tenants"
                OVERLAP_CHECK=$CHECK_RESULT
            elif [[ $task == sweep ]]; then
                check_against_python sweep "sweep (worst and mean fully down and degraded over all $((n * (n - 1) / 2)) double failures), n=$n k=$k, $tenants tenants"
                SWEEP_CHECKED+=("$CHECK_RESULT")
            fi
        fi
    done

    read -r cn ck ct cf <<<"$CLIFF"
    run_ours "cliff-$cn-$ck-$ct-$cf" "$round" blast --shards "$cn" --k "$ck" --tenants "$ct" --sweep "$cf"
    say "  round $round  ours   blast --shards $cn --k $ck --tenants $ct --sweep $cf: $OURS_WALL s"
    if ((round == 1)); then
        seq 0 $((ct - 1)) | sed 's/^/tenant-/' | "$BIN" place --shards "$cn" --k "$ck" 2>/dev/null |
            python3 -B "$LIB/naive_sweep.py" --n "$cn" --failures "$cf" >"$WORK/naive.json"
        record round="$round" id="naive-cliff-$cn-$ck-$ct-$cf" elapsed_s="$(json_get "$WORK/naive.json" 'd["elapsed_s"]')" \
            cpu_s="$(json_get "$WORK/naive.json" 'd["cpu_s"]')"
        say "  round $round  naive  loop over $ct tenants, every set of $cf of $cn shards: $(json_get "$WORK/naive.json" 'round(d["elapsed_s"], 3)') s"
        if [[ -n $CLIFF_BEFORE_BIN ]]; then
            t0=$EPOCHREALTIME
            rc=0
            /usr/bin/time -v -o "$WORK/before.txt" timeout "$CLIFF_BEFORE_TIMEOUT" "$CLIFF_BEFORE_BIN" blast \
                --shards "$cn" --k "$ck" --tenants "$ct" --sweep "$cf" --json >/dev/null 2>&1 || rc=$?
            before_wall=$(elapsed "$t0" "$EPOCHREALTIME")
            before_cpu=$(awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } END { print u + s }' "$WORK/before.txt")
            status=ok
            ((rc == 0)) || status=timeout
            record round="$round" id="before-cliff-$cn-$ck-$ct-$cf" status="$status" wall_s="$before_wall" cpu_s="$before_cpu" \
                command="$CLIFF_BEFORE_BIN blast --shards $cn --k $ck --tenants $ct --sweep $cf --json"
            say "  round $round  before $CLIFF_BEFORE_BIN: $before_wall s ($status)"
        fi
        cp "$WORK/naive.json" "$WORK/python.json"
        check_against_python sweep "cliff sweep (all sets of $cf of $cn shards, $ct tenants) against the naive loop"
        CLIFF_CHECK=$CHECK_RESULT
    fi

    for case in "${SCALE[@]}"; do
        read -r n k sweep tenants <<<"$case"
        run_ours "scale-$n-$k-$sweep-$tenants" "$round" blast --shards "$n" --k "$k" --tenants "$tenants" --sweep "$sweep"
        say "  round $round  ours   blast --shards $n --k $k --sweep $sweep, $tenants tenants: $OURS_WALL s, peak RSS $((OURS_RSS / 1024)) MiB"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
if ((${#SWEEP_CHECKED[@]})); then
    SWEEP_CHECK=$(printf '%s; ' "${SWEEP_CHECKED[@]}")
    SWEEP_CHECK=${SWEEP_CHECK%; }
fi

# --- report --------------------------------------------------------------------------

to_json_cases() { printf '%s\n' "$@" | python3 -c '
import json, sys
print(json.dumps([[int(x) if x.isdigit() else x for x in line.split()] for line in sys.stdin if line.strip()]))'; }

mkdir -p "$RESULTS"
python3 -B "$LIB/report.py" analysis --raw "$RAW" --out "$RESULTS/analysis" \
    --set command="ROUNDS=$ROUNDS PY_TIMEOUT=$PY_TIMEOUT PY_ONCE_OVER=$PY_ONCE_OVER bench/run.sh analysis" --set rounds="$ROUNDS" \
    --set py_timeout_s="$PY_TIMEOUT" --set py_once_over_s="$PY_ONCE_OVER" --set side_cases="$(to_json_cases "${SIDE[@]}")" \
    --set scale_cases="$(to_json_cases "${SCALE[@]}")" --set cliff_case="$(to_json_cases "$CLIFF")" \
    --set cliff_check="$CLIFF_CHECK" \
    --set overlap_check="$OVERLAP_CHECK" --set sweep_check="$SWEEP_CHECK" \
    --set recipe_note="$RECIPE_NOTE" --set recipe_sha256="$RECIPE_SHA256" \
    --set load_before="$LOAD_BEFORE" --set load_after="$LOAD_AFTER" \
    --set runtime_s="$(elapsed "$START" "$EPOCHREALTIME")"
echo
cat "$RESULTS/analysis.md"
echo
echo "Wrote bench/results/analysis.md and bench/results/analysis.json."
