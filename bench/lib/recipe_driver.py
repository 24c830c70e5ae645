#!/usr/bin/env python3
"""Runs the design chapter's Python recipes for the benchmarks, never copies them.

The chapter's code is not part of this repository. `extract` cuts Recipe 12.1
and Recipe 12.2 out of the chapter's text at run time into a module in a
temporary directory; the other subcommands import that module, time one
recipe function over synthetic tenants `tenant-0` ... and print one JSON
object on stdout.

    recipe_driver.py extract CHAPTER_TXT OUT_DIR        exit 3: recipe not found
    recipe_driver.py place   --module-dir D --tenants T --n N --k K
    recipe_driver.py agree   --module-dir D --n N --k K < place-output.jsonl
    recipe_driver.py overlap --module-dir D --tenants T --n N --k K
    recipe_driver.py sweep   --module-dir D --tenants T --n N --k K --failures F

Times are the recipe functions only (wall: perf_counter_ns, and CPU:
process_time_ns, around the call or the loop), not interpreter start-up or
building the tenant list. `sweep` prints
its progress on stderr ("progress DONE TOTAL ELAPSED_S"), so that a run cut
off by `timeout` still says how far it got.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import itertools
import json
import sys
import time
from pathlib import Path

MODULE = "chapter12_recipes"

# Each recipe is the chapter's code from its first line to its last, both
# matched as whole lines.
RECIPES = [
    ("Recipe 12.1", "from __future__ import annotations", "    return chosen"),
    ("Recipe 12.2", "import random", "    return hits / samples"),
]
NAMES = ["shuffle_shards", "fully_down_fraction", "degraded_fraction", "pairwise_overlap_fraction"]


def extract(chapter: Path, out_dir: Path) -> int:
    lines = chapter.read_text(encoding="utf-8").splitlines()
    parts = []
    for name, first, last in RECIPES:
        try:
            start = lines.index(first)
            end = lines.index(last, start)
        except ValueError:
            print(f"{name} not found in {chapter} (no line {first!r} ... {last!r})", file=sys.stderr)
            return 3
        parts.append("\n".join(lines[start : end + 1]))
    source = "\n\n\n".join(parts) + "\n"
    try:
        compile(source, MODULE, "exec")
    except SyntaxError as error:
        print(f"the recipes cut from {chapter} do not compile: {error}", file=sys.stderr)
        return 3
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{MODULE}.py").write_text(source, encoding="utf-8")
    recipes = load(out_dir)
    missing = [n for n in NAMES if not callable(getattr(recipes, n, None))]
    if missing:
        print(f"the recipes cut from {chapter} lack {', '.join(missing)}", file=sys.stderr)
        return 3
    print(json.dumps({"sha256": hashlib.sha256(source.encode()).hexdigest(), "lines": source.count("\n")}))
    return 0


def load(module_dir: Path):
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(module_dir))
    return importlib.import_module(MODULE)


def tenants(count: int) -> list[str]:
    return [f"tenant-{i}" for i in range(count)]


def place(args) -> dict:
    shuffle_shards = load(args.module_dir).shuffle_shards
    ids = tenants(args.tenants)
    n, k = args.n, args.k
    for tenant in ids[:2000]:  # warm-up
        shuffle_shards(tenant, n, k)
    cpu, start = time.process_time_ns(), time.perf_counter_ns()
    for tenant in ids:
        shuffle_shards(tenant, n, k)
    elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
    return {"tenants": len(ids), "elapsed_s": elapsed / 1e9, "cpu_s": cpu / 1e9, "ns_per_tenant": elapsed / len(ids)}


def agree(args) -> dict:
    """Compares `shuffle-shard place` JSON lines on stdin with the recipe."""
    shuffle_shards = load(args.module_dir).shuffle_shards
    checked = 0
    for line in sys.stdin:
        row = json.loads(line)
        expected = shuffle_shards(row["tenant"], args.n, args.k)
        if row["shards"] != expected:
            return {"agree": False, "checked": checked, "tenant": row["tenant"], "ours": row["shards"], "recipe": expected}
        checked += 1
    return {"agree": checked > 0, "checked": checked}


def overlap(args) -> dict:
    pairwise_overlap_fraction = load(args.module_dir).pairwise_overlap_fraction
    ids = tenants(args.tenants)
    cpu, start = time.process_time_ns(), time.perf_counter_ns()
    fraction = pairwise_overlap_fraction(ids, args.n, args.k, samples=None)
    elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
    return {"tenants": len(ids), "elapsed_s": elapsed / 1e9, "cpu_s": cpu / 1e9, "fraction": fraction}


def sweep(args) -> dict:
    """Every failure set of F shards, as Recipe 12.2 would be used: both fractions per set."""
    recipes = load(args.module_dir)
    ids = tenants(args.tenants)
    n, k = args.n, args.k
    sets = list(itertools.combinations(range(n), args.failures))
    fully_down, degraded = [], []
    cpu, start = time.process_time_ns(), time.perf_counter_ns()
    for done, failed in enumerate(sets, 1):
        failed = set(failed)
        fully_down.append(recipes.fully_down_fraction(ids, n, k, failed))
        degraded.append(recipes.degraded_fraction(ids, n, k, failed))
        print(f"progress {done} {len(sets)} {(time.perf_counter_ns() - start) / 1e9:.3f}", file=sys.stderr, flush=True)
    elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
    return {
        "tenants": len(ids),
        "sets": len(sets),
        "elapsed_s": elapsed / 1e9,
        "cpu_s": cpu / 1e9,
        "fully_down": {"worst": max(fully_down), "mean": sum(fully_down) / len(sets)},
        "degraded": {"worst": max(degraded), "mean": sum(degraded) / len(sets)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("chapter", type=Path)
    ex.add_argument("out_dir", type=Path)
    for name in ("place", "agree", "overlap", "sweep"):
        p = sub.add_parser(name)
        p.add_argument("--module-dir", type=Path, required=True)
        p.add_argument("--n", type=int, required=True)
        p.add_argument("--k", type=int, required=True)
        if name != "agree":
            p.add_argument("--tenants", type=int, required=True)
        if name == "sweep":
            p.add_argument("--failures", type=int, default=2)
    args = parser.parse_args()
    if args.command == "extract":
        return extract(args.chapter, args.out_dir)
    result = {"place": place, "agree": agree, "overlap": overlap, "sweep": sweep}[args.command](args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
