#!/usr/bin/env bash
# The Python package (issue 22's speed point): batch placement of 1,000,000 tenants (n = 64, k = 3) through `shuffle_shard` against the design chapter's pure-Python Recipe 12.1, and the per-call cost of `shuffle_shard.shuffle_shards`.
#
# Builds the package as a user does (`pip install ./crates/python`, a release
# build by maturin) into a virtual environment of its own with NumPy, cuts
# the chapter's recipe out of ../shared/seed/ at run time, and runs
# bench/lib/python_bench.py there: ROUNDS rounds alternating the recipe and
# the package over the same tenants (and checking they agree on every one).
# Writes bench/results/python.json and python.md, then regenerates
# BENCHMARKS.md. Not part of `bench/run.sh all`.
#
# Settings: ROUNDS (3), TENANTS (1000000), CALLS (200000, per-call timing),
# VENV (target/bench-python-venv, kept between runs so only the package is
# rebuilt), NUMPY (the NumPy version to install, 2.4.6).
set -euo pipefail
# shellcheck disable=SC2034 # SUITE is read by lib/common.sh
SUITE=python
# shellcheck source=bench/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

TENANTS=${TENANTS:-1000000}
CALLS=${CALLS:-200000}
VENV=${VENV:-$TARGET_DIR/bench-python-venv}
NUMPY=${NUMPY:-2.4.6}
for value in TENANTS CALLS; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done

install_missing python3:python3
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
extract_recipe
[[ -n $RECIPE_DIR ]] || die "the comparison needs the chapter's Recipe 12.1: $RECIPE_NOTE"

START=$EPOCHREALTIME
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
say "installing: pip install ./crates/python numpy==$NUMPY into $VENV"
"$VENV/bin/pip" install -q --upgrade pip >&2
"$VENV/bin/pip" install -q "numpy==$NUMPY" >&2
"$VENV/bin/pip" install -q --force-reinstall --no-deps ./crates/python >&2
INSTALLED=$EPOCHREALTIME
say "installed in $(elapsed "$START" "$INSTALLED") s"

command="ROUNDS=$ROUNDS TENANTS=$TENANTS CALLS=$CALLS bench/python.sh"
"$VENV/bin/python" -B "$LIB/python_bench.py" --module-dir "$RECIPE_DIR" --tenants "$TENANTS" \
    --rounds "$ROUNDS" --calls "$CALLS" --command "$command" --out "$RESULTS/python.json"
say "wrote bench/results/python.json and python.md"

python3 -B "$LIB/benchmarks_md.py" >&2 || say "BENCHMARKS.md was written, but some results could not be read (see above)"
