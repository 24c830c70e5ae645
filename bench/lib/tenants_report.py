#!/usr/bin/env python3
"""Writes bench/tenants.sh's report: bench/results/tenants.json and tenants.md from the starts it measured.

    tenants_report.py --runs RUNS.jsonl --puts PUTS.json --md OUT.md --json OUT.json -- KEY=VALUE...

RUNS.jsonl has one JSON object per measured start (tenants_bench.py start);
PUTS.json the timed PUTs (tenants_bench.py put); the KEY=VALUE pairs describe
the run (dotted keys nest). Every figure is the median [min–max] over the
rounds; the tables and the verdicts against issue 31's targets are
benchmarks_md.py's, so the page and this report agree. Python 3.11, standard
library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmarks_md as page  # noqa: E402

NUMERIC = {"runtime_s", "machine.nproc", "machine.memory_gib", "settings.rounds", "settings.tenants", "settings.big",
           "settings.shards", "settings.k", "settings.puts", "settings.settle_max_s", "files.jsonl_mb",
           "files.toml_mb", "files.big_jsonl_mb", "files.generate_s", "files.convert_s", "files.import_s"}


def parse_meta(pairs: list[str]) -> dict:
    meta: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"tenants_report.py: {pair!r} is not KEY=VALUE")
        node = meta
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = json.loads(value) if key in NUMERIC else value
    return meta


def stats(values: list[float], digits: int = 4) -> dict:
    values = [round(v, digits) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def mb(kib: int) -> float:
    return kib * 1024 / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--puts", type=Path)
    parser.add_argument("--md", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("meta", nargs="*")
    args = parser.parse_args()
    doc = parse_meta(args.meta)
    runs = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    s = doc["settings"]
    cases = {}
    for name in dict.fromkeys(r["case"] for r in runs):
        rs = sorted((r for r in runs if r["case"] == name), key=lambda r: r["round"])
        cases[name] = {
            "tenants": s["big"] if name == "jsonl-10m" else s["tenants"],
            "first_answer_s": stats([r["first_answer_s"] for r in rs]),
            "cpu_first_s": stats([r["cpu_first_s"] for r in rs], 2),
            "cpu_settled_s": stats([r["cpu_settled_s"] for r in rs], 2),
            "rss_mb": stats([mb(r["rss_kib"]) for r in rs], 1),
            "peak_mb": stats([mb(r["hwm_kib"]) for r in rs], 1),
            "peak_loading_mb": stats([mb(r["hwm_first_kib"]) for r in rs], 1),
            "peak_ratio": stats([r["hwm_kib"] / r["rss_kib"] for r in rs], 3),
            "model_ms": [r["model_ms"] for r in rs],
            "settled_by": [r["settled_by"] for r in rs],
            "loadavg_start": [r["loadavg_start"][0] for r in rs],
        }
    doc["cases"] = cases
    doc["runs"] = runs
    if args.puts and args.puts.exists():
        puts = json.loads(args.puts.read_text(encoding="utf-8"))["puts"]
        reach = sorted(p["reach_b_s"] for p in puts)
        doc["put"] = {
            "count": len(puts),
            "reach_b_s": {**stats(reach), "p90": reach[min(len(reach) - 1, int(0.9 * len(reach) + 0.999999) - 1)]},
            "put_s": stats([p["put_s"] for p in puts]),
            "loadavg": doc.get("machine", {}).get("loadavg_put"),
            "puts": puts,
        }
    args.json.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    md = ["# Tenants at scale (`bench/tenants.sh`)", "", page.TENANTS_INTRO, ""]
    md += page.tenants_lines(doc, args.json.name)
    md += ["## Every start", "",
           "| round | case | load average at launch | first answer | CPU to first answer | CPU to settled | RSS at first answer"
           " | peak at first answer | RSS serving | peak | the model took | settled by |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(runs, key=lambda r: (r["round"], list(cases).index(r["case"]))):
        model = f"{r['model_ms']:,} ms" if r.get("model_ms") is not None else "—"
        md.append(f"| {r['round']} | {r['case']} | {r['loadavg_start'][0]:.2f} | {page.seconds(r['first_answer_s'])} |"
                  f" {r['cpu_first_s']:.2f} s | {r['cpu_settled_s']:.2f} s | {page.megabytes(mb(r['rss_first_kib']))} |"
                  f" {page.megabytes(mb(r['hwm_first_kib']))} | {page.megabytes(mb(r['rss_kib']))} |"
                  f" {page.megabytes(mb(r['hwm_kib']))} | {model} | {r['settled_by']} ({r['settle_s']} s) |")
    if doc.get("put"):
        md += ["", "## Every PUT", "", "| tenant | PUT answered after | served by replica B after |", "|---|---:|---:|"]
        md += [f"| `{p['tenant']}` | {page.seconds(p['put_s'])} | {page.seconds(p['reach_b_s'])} |" for p in doc["put"]["puts"]]
    args.md.write_text("\n".join(md) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
