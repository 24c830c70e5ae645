#!/usr/bin/env bash
# Entry point for the benchmarks: bench/run.sh [placement|analysis|gateway|tls|h2|noisy|tenants|all|report] ... runs bench/<name>.sh for each name, then regenerates BENCHMARKS.md.
#
# With no name it runs all (placement, analysis, gateway; tls, h2, noisy and tenants only when
# named, so that issue 7's measured budget for `all` still holds). Each suite writes its results under
# bench/results/; settings come from the environment (see bench/README.md).
# After the suites, whether they passed or not, bench/lib/benchmarks_md.py
# rewrites BENCHMARKS.md from bench/results/*.json: a suite not run (or
# failed) keeps its previous results, and the page gives each suite's own
# date. `report` runs no suite and only regenerates the page. At the end the
# wall time of each suite and of the whole run is printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suites=(placement analysis gateway)

usage() {
    echo "usage: bench/run.sh [placement|analysis|gateway|tls|h2|noisy|tenants|all|report] ..." >&2
    exit 2
}

names=()
for arg in "${@:-all}"; do
    case $arg in
        all) names+=("${suites[@]}") ;;
        placement | analysis | gateway | tls | h2 | noisy | tenants) names+=("$arg") ;;
        report) ;; # the page is regenerated after every run anyway
        -h | --help) usage ;;
        *)
            echo "bench/run.sh: unknown suite '$arg'" >&2
            usage
            ;;
    esac
done

# 754 -> "12 min 34 s"
duration() {
    if (($1 >= 60)); then
        printf '%d min %02d s' $(($1 / 60)) $(($1 % 60))
    else
        printf '%d s' "$1"
    fi
}

start=$SECONDS
failed=()
timings=()
for name in "${names[@]}"; do
    script="$here/$name.sh"
    if [[ ! -f $script ]]; then
        echo "bench/$name.sh: not written yet"
        continue
    fi
    echo "== bench/$name.sh"
    suite_start=$SECONDS
    bash "$script" || failed+=("$name")
    timings+=("$name $((SECONDS - suite_start))")
done

echo "== BENCHMARKS.md (bench/lib/benchmarks_md.py)"
page_ok=1
if ! command -v python3 >/dev/null; then
    echo "bench/run.sh: python3 is missing, so BENCHMARKS.md was not regenerated" >&2
    page_ok=0
elif python3 -B "$here/lib/benchmarks_md.py"; then
    echo "wrote BENCHMARKS.md from bench/results/*.json"
else
    echo "bench/run.sh: BENCHMARKS.md was written, but some results could not be read (see above)" >&2
    page_ok=0
fi

if ((${#timings[@]})); then
    echo "== wall time"
    for entry in "${timings[@]}"; do
        printf '  %-10s %s\n' "${entry% *}" "$(duration "${entry#* }")"
    done
    printf '  %-10s %s\n' total "$(duration $((SECONDS - start)))"
fi

if ((${#failed[@]})); then
    echo "bench/run.sh: failed: ${failed[*]}" >&2
    exit 1
fi
((page_ok)) || exit 1
