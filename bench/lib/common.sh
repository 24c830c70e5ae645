# Shared by bench/placement.sh and bench/analysis.sh (sourced, not run): paths, tools, the build, and the chapter's recipes cut out at run time.
# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source it
#
# The caller sets SUITE (its name) before sourcing. This file sets ROOT,
# RESULTS, WORK (a temporary directory removed on exit), ROUNDS, and after
# `extract_recipe`, RECIPE_DIR (empty when the comparison is skipped),
# RECIPE_NOTE and RECIPE_SHA256.

ROOT=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel 2>/dev/null ||
    { cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd; })
cd "$ROOT" || exit 1
RESULTS="$ROOT/bench/results"
LIB="$ROOT/bench/lib"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET_DIR/release/shuffle-shard"
# The design chapter; its Python is read from here at run time, never copied
# into the repository.
CHAPTER=${CHAPTER:-$ROOT/../shared/seed/shuffle-sharding-chapter.txt}
ROUNDS=${ROUNDS:-3}

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/$SUITE.sh: error: $*"
    exit 1
}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive whole number, not '$ROUNDS'"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ss-$SUITE-bench.XXXXXX")
cleanup_work() {
    local status=$?
    if ((status == 0)); then
        rm -rf "$WORK"
    else
        # Keep the logs, but never leave the chapter's code lying around.
        rm -rf "$WORK/recipe"
        say "bench/$SUITE.sh: failed; logs kept in $WORK"
    fi
}
trap cleanup_work EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Installs Debian packages for the commands that are missing (as root or
# through sudo); the arguments are pairs COMMAND:PACKAGE.
# shellcheck source=bench/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

install_missing() {
    local pair missing=()
    for pair in "$@"; do
        if [[ ${pair%%:*} == /* ]]; then
            [[ -x ${pair%%:*} ]] || missing+=("${pair#*:}")
        else
            command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
        fi
    done
    apt_install "${missing[@]}"
}

build_cli() {
    say "building: cargo build --release -p shuffle-shard-cli"
    cargo build --release -p shuffle-shard-cli >&2
    [[ -x $BIN ]] || die "$BIN was not built"
}

# Cuts Recipes 12.1 and 12.2 out of the chapter into $WORK/recipe.
extract_recipe() {
    RECIPE_DIR=""
    RECIPE_SHA256=""
    if [[ ! -f $CHAPTER ]]; then
        RECIPE_NOTE="The design chapter ($CHAPTER) is absent, so the comparison with its Python recipes is skipped; our numbers only."
        say "$RECIPE_NOTE"
        return
    fi
    local out
    if out=$(python3 -B "$LIB/recipe_driver.py" extract "$CHAPTER" "$WORK/recipe" 2>"$WORK/extract.err"); then
        RECIPE_DIR="$WORK/recipe"
        RECIPE_SHA256=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["sha256"])' "$out")
        RECIPE_NOTE="Python: the design chapter's recipes, cut out of ../shared/seed/$(basename "$CHAPTER") at run time (sha256 of the code ${RECIPE_SHA256:0:16}…), $(python3 -V 2>&1)."
        say "recipes cut out of the chapter into a temporary directory (sha256 ${RECIPE_SHA256:0:16}…)"
    else
        RECIPE_NOTE="The design chapter's recipes could not be cut out of $CHAPTER ($(head -1 "$WORK/extract.err")), so the comparison is skipped; our numbers only."
        say "$RECIPE_NOTE"
    fi
}

# Seconds between two $EPOCHREALTIME readings.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }

# Appends one measurement (a JSON object given as key=value pairs; values
# that look like numbers, true, false or null are written bare) to $RAW.
record() {
    python3 -c '
import json, sys
row = {}
for pair in sys.argv[1:]:
    key, _, value = pair.partition("=")
    try:
        row[key] = json.loads(value)
    except ValueError:
        row[key] = value
print(json.dumps(row))' "$@" >>"$RAW"
}
