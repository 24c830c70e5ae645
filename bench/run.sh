#!/usr/bin/env bash
# Entry point for the benchmarks: bench/run.sh [placement|analysis|gateway|all] ... runs bench/<name>.sh for each name.
#
# With no name it runs all. Each suite writes its results under
# bench/results/; settings come from the environment (see bench/README.md).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suites=(placement analysis gateway)

usage() {
    echo "usage: bench/run.sh [placement|analysis|gateway|all] ..." >&2
    exit 2
}

names=()
for arg in "${@:-all}"; do
    case $arg in
        all) names+=("${suites[@]}") ;;
        placement | analysis | gateway) names+=("$arg") ;;
        -h | --help) usage ;;
        *)
            echo "bench/run.sh: unknown suite '$arg'" >&2
            usage
            ;;
    esac
done

failed=()
for name in "${names[@]}"; do
    script="$here/$name.sh"
    if [[ ! -f $script ]]; then
        echo "bench/$name.sh: not written yet"
        continue
    fi
    echo "== bench/$name.sh"
    bash "$script" || failed+=("$name")
done

if ((${#failed[@]})); then
    echo "bench/run.sh: failed: ${failed[*]}" >&2
    exit 1
fi
