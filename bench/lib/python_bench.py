#!/usr/bin/env python3
"""Times the shuffle_shard Python package against the design chapter's pure-Python Recipe 12.1.

    python_bench.py --module-dir RECIPE_DIR --tenants 1000000 --rounds 3 --calls 200000 --out bench/results/python.json

Run by bench/python.sh inside a virtual environment where `pip install ./crates/python`
(and NumPy) installed the package. RECIPE_DIR holds the chapter's recipes, cut out of the
chapter at run time by recipe_driver.py (never copied into the repository).

Batch: the same 1,000,000 synthetic tenants `tenant-0` ... placed with n = 64, k = 3 and the
recipe's key, by the chapter's `shuffle_shards` in a list comprehension and by
`Placer(..., algorithm="hmac-modulo").place(tenants)` (the same algorithm, bit for bit, so the
same work; checked by comparing every subset), plus `place_array` (NumPy) and rendezvous.
Rounds alternate the two so that drift of the machine's speed hits both; the ratio is per
round (recipe time / package time), quoted as its median with a bootstrap 95 % interval
(paired_ci.py). Per call: `shuffle_shard.shuffle_shards(t, 64, 3, key=KEY)` and
`Placer.subset(t)` one call at a time, against the recipe's per-call time and an empty
Python function of the same arity (the interpreter's own call cost).

Writes the JSON to --out and a Markdown table next to it (.md); BENCHMARKS.md's Python
section is rendered from the JSON by benchmarks_md.py.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from paired_ci import paired_interval  # noqa: E402
from report import cpu_model  # noqa: E402

KEY = b"shuffle-shard-v1"
N, K = 64, 3


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "loadavg": list(os.getloadavg()),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)bench/results", ":(exclude)BENCHMARKS.md"]).returncode != 0
        return rev + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def per_call(function, tenants: list[str]) -> float:
    """Nanoseconds per call of function(tenant, 64, 3, key=KEY), one call at a time."""
    start = time.perf_counter()
    for tenant in tenants:
        function(tenant, N, K, key=KEY)
    return (time.perf_counter() - start) / len(tenants) * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module-dir", type=Path, required=True)
    parser.add_argument("--tenants", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--command", default="bench/python.sh")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    sys.path.insert(0, str(args.module_dir))
    recipe = importlib.import_module("chapter12_recipes").shuffle_shards
    import numpy
    import shuffle_shard

    tenants = [f"tenant-{i}" for i in range(args.tenants)]
    hmac_placer = shuffle_shard.Placer(N, K, KEY, algorithm="hmac-modulo")
    hrw_placer = shuffle_shard.Placer(N, K, KEY, algorithm="rendezvous")

    started = time.time()
    rounds = {"recipe": [], "place": [], "place_array": [], "rendezvous": []}
    agree = None
    for round_no in range(args.rounds):
        seconds, by_recipe = timed(lambda: [recipe(t, N, K, key=KEY) for t in tenants])
        rounds["recipe"].append(seconds)
        seconds, by_package = timed(lambda: hmac_placer.place(tenants))
        rounds["place"].append(seconds)
        if agree is None:
            agree = by_recipe == by_package
            if not agree:
                print("python_bench: the package and the chapter's recipe disagree", file=sys.stderr)
                return 1
        del by_recipe, by_package
        seconds, array = timed(lambda: hmac_placer.place_array(tenants))
        rounds["place_array"].append(seconds)
        assert array.shape == (args.tenants, K) and array.dtype == numpy.uint32
        del array
        seconds, _ = timed(lambda: hrw_placer.place(tenants))
        rounds["rendezvous"].append(seconds)
        print(f"round {round_no + 1}/{args.rounds}: " + ", ".join(f"{name} {values[-1]:.3f} s" for name, values in rounds.items()), file=sys.stderr)

    def empty(tenant, n, k, *, key):
        return None

    calls = tenants[: args.calls]
    call_rounds = {"shuffle_shards": [], "placer_subset": [], "recipe": [], "empty_function": []}
    for _ in range(args.rounds):
        call_rounds["shuffle_shards"].append(per_call(shuffle_shard.shuffle_shards, calls))
        call_rounds["placer_subset"].append(per_call(lambda t, n, k, key: hmac_placer.subset(t), calls))
        call_rounds["recipe"].append(per_call(recipe, calls[: max(1, len(calls) // 4)]))
        call_rounds["empty_function"].append(per_call(empty, calls))

    ratio, low, high = paired_interval(rounds["recipe"], rounds["place"])
    array_ratio, array_low, array_high = paired_interval(rounds["recipe"], rounds["place_array"])
    doc = {
        "suite": "python",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_revision(),
        "command": args.command,
        "runtime_s": round(time.time() - started, 1),
        "machine": machine(),
        "package_version": shuffle_shard.__version__,
        "numpy": numpy.__version__,
        "settings": {"tenants": args.tenants, "n": N, "k": K, "rounds": args.rounds, "calls": args.calls},
        "agree": agree,
        "batch_s": rounds,
        "batch_median_ns_per_tenant": {name: statistics.median(v) / args.tenants * 1e9 for name, v in rounds.items()},
        "speedup": {"place": {"median": ratio, "low": low, "high": high},
                    "place_array": {"median": array_ratio, "low": array_low, "high": array_high}},
        "per_call_ns": call_rounds,
        "per_call_median_ns": {name: statistics.median(v) for name, v in call_rounds.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text("\n".join(markdown(doc)) + "\n", encoding="utf-8")
    print(json.dumps({"speedup": doc["speedup"], "per_call_median_ns": doc["per_call_median_ns"]}))
    return 0


def rounds_table(first: str, last: str, rounds: int, rows: dict[str, str], values: dict, medians: dict,
                 digits: int) -> list[str]:
    """A table with a row per measured thing: its value in each round, then its median."""
    table = [f"| {first} | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + f" | {last} |",
             "|---|" + "---:|" * (rounds + 1)]
    for name, label in rows.items():
        table.append(f"| {label} | " + " | ".join(f"{v:.{digits}f}" for v in values[name]) + f" | {medians[name]:.0f} |")
    return table


def markdown(doc: dict) -> list[str]:
    s = doc["settings"]
    per = doc["batch_median_ns_per_tenant"]
    calls = doc["per_call_median_ns"]
    rows = [
        "# Python package (`bench/python.sh`)",
        "",
        f"{doc['date']}, git {doc['git']}, `{doc['command']}`, {doc['machine']['cpus']} CPUs ({doc['machine']['cpu_model']}),"
        f" load average {doc['machine']['loadavg'][0]:.2f} at the end, Python {doc['machine']['python']}, NumPy {doc['numpy']}.",
        "",
        f"Batch: {s['tenants']:,} tenants, n = {s['n']}, k = {s['k']}, the recipe's key; {s['rounds']} rounds, seconds per round.",
        "",
    ]
    names = {
        "recipe": "chapter's `shuffle_shards` (pure Python)",
        "place": "`Placer(..., algorithm=\"hmac-modulo\").place` (list)",
        "place_array": "`Placer(..., algorithm=\"hmac-modulo\").place_array` (NumPy)",
        "rendezvous": "`Placer(...).place` (rendezvous)",
    }
    rows += rounds_table("what", "median ns/tenant", s["rounds"], names, doc["batch_s"], per, 3)
    for name in ["place", "place_array"]:
        sp = doc["speedup"][name]
        rows += ["", f"`{name}` is {sp['median']:.1f}× faster than the recipe (median of per-round ratios; bootstrap 95 % interval {sp['low']:.1f}–{sp['high']:.1f}×)."]
    rows += [
        "",
        f"Same subsets as the recipe for all {s['tenants']:,} tenants: {'yes' if doc['agree'] else 'NO'}.",
        "",
        f"Per call, one at a time ({s['calls']:,} calls; the recipe over a quarter of them), median ns:",
        "",
    ]
    call_names = {
        "shuffle_shards": "`shuffle_shard.shuffle_shards(t, 64, 3, key=KEY)`",
        "placer_subset": "`placer.subset(t)`",
        "recipe": "chapter's `shuffle_shards`",
        "empty_function": "an empty Python function, same arguments",
    }
    rows += rounds_table("call", "median", s["rounds"], call_names, doc["per_call_ns"], calls, 0)
    return rows


if __name__ == "__main__":
    sys.exit(main())
