#!/usr/bin/env python3
"""Writes bench/results/<suite>.md and .json from the measurements a suite recorded.

    report.py placement|analysis --raw RAW.jsonl --out PREFIX [--set KEY=VALUE ...]

RAW holds one JSON object per measurement, each with `round` and `id`; the
`--set` values (command, settings, checks, notes) are copied into the JSON
and quoted in the Markdown. Every figure is given as the median and the
[min–max] spread over the rounds; a speed-up is computed within each round
(the two sides measured minutes apart at most) and then summarised the same
way. The machine (CPUs, CPU model, kernel, load), the date, the git revision
and the tool versions are read here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


# --- helpers ---------------------------------------------------------------------------


def run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def cpu_model() -> str:
    """The first CPU's model name from /proc/cpuinfo, or "unknown"."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine(settings: dict) -> dict:
    return {
        "nproc": int(run("nproc") or os.cpu_count() or 0),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "loadavg_before": settings.get("load_before", ""),
        "loadavg_after": settings.get("load_after", ""),
    }


def git_rev() -> str:
    rev = run("git", "rev-parse", "--short=12", "HEAD") or "unknown"
    # Results and the page they feed are written by the benchmarks
    # themselves; only changes to anything else make the revision unclear.
    code_only = ["git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)bench/results", ":(exclude)BENCHMARKS.md"]
    if rev != "unknown" and subprocess.run(code_only, check=False).returncode != 0:
        rev += " (with uncommitted changes)"
    return rev


def summary(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def sig(x: float, digits: int = 3) -> str:
    """x to about `digits` significant figures, with thousands separators."""
    if x == 0:
        return "0"
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = digits - 1 - int(f"{abs(x):e}".split("e")[1])
    return f"{x:,.{max(decimals, 0)}f}"


def spread(s: dict | None, fmt, unit: str = "") -> str:
    if s is None:
        return "—"
    if len(s["rounds"]) == 1:
        return f"{fmt(s['median'])}{unit}"
    return f"{fmt(s['median'])}{unit} [{fmt(s['min'])}–{fmt(s['max'])}]"


def rounds(settings: dict) -> str:
    return f"{settings['rounds']} round{'' if settings['rounds'] == '1' else 's'}"


def times(x: float) -> str:
    return f"{sig(x)}×"


def seconds(x: float) -> str:
    if x < 0.1:
        return f"{x * 1000:.1f} ms"
    return f"{sig(x)} s"


def mib(kb: float) -> str:
    return f"{kb / 1024:,.0f} MiB"


def load_raw(path: Path) -> dict:
    by_id = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            by_id[row["id"]].append(row)
    return by_id


def header(title: str, settings: dict, info: dict) -> list[str]:
    m = info["machine"]
    return [
        f"# {title}",
        "",
        f"{info['date']} · git {info['git_rev']} · {m['nproc']} CPUs ({m['cpu_model']}) · "
        f"{m['memory_gib']} GiB · Linux {m['kernel']} · {info['versions']['rustc']} · {info['versions']['python']}",
        "",
        f"Command: `{settings['command']}` ({rounds(settings)}; the script took "
        f"{float(settings['runtime_s']):.0f} s in all). Load average before/after: "
        f"{m['loadavg_before']} / {m['loadavg_after']}.",
        "",
        settings["recipe_note"],
        "",
    ]


def common(suite: str, settings: dict) -> dict:
    return {
        "benchmark": suite,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_rev": git_rev(),
        "command": settings["command"],
        "machine": machine(settings),
        "versions": {"rustc": run("rustc", "--version") or "rustc unknown", "python": f"Python {platform.python_version()}"},
    }


# --- placement ---------------------------------------------------------------------------

PLACEMENT_ROWS = [
    # id, implementation, algorithm, what is timed, python baseline id
    ("python-64", "Python Recipe 12.1 `shuffle_shards`", "hmac-modulo n=64 k=3", "python", None),
    ("criterion-hmac-64", "ours, `HmacModulo::place_into`", "hmac-modulo n=64 k=3", "criterion", "python-64"),
    ("cli-hmac-64", "ours, `shuffle-shard place`", "hmac-modulo n=64 k=3", "cli", "python-64"),
    ("python-1024", "Python Recipe 12.1 `shuffle_shards`", "hmac-modulo n=1024 k=3", "python", None),
    ("criterion-hmac-1024", "ours, `HmacModulo::place_into`", "hmac-modulo n=1024 k=3", "criterion", "python-1024"),
    ("criterion-rendezvous-1024", "ours, `Rendezvous::place_into`", "rendezvous n=1024 k=3", "criterion", "python-1024"),
    ("cli-rendezvous-1024", "ours, `shuffle-shard place --algorithm rendezvous`", "rendezvous n=1024 k=3", "cli", "python-1024"),
]


def placement(raw: dict, settings: dict) -> tuple[list[str], dict]:
    info = common("placement", settings)
    what = {
        "python": f"the function in a loop over {int(settings['py_tenants']):,} tenants, one process",
        "criterion": "the algorithm alone: criterion, median time per batch of 1,024 tenants ÷ 1,024",
        "cli": f"end to end: {int(settings['cli_tenants']):,} tenants on stdin, JSON lines to /dev/null",
    }
    rows = []
    for rid, impl, algo, kind, base in PLACEMENT_ROWS:
        if rid not in raw:
            continue
        ns = [r["ns_per_tenant"] for r in raw[rid]]
        speedup = None
        if base and base in raw:
            py = {r["round"]: r["ns_per_tenant"] for r in raw[base]}
            speedup = summary([py[r["round"]] / r["ns_per_tenant"] for r in raw[rid] if r["round"] in py])
        rows.append({"id": rid, "implementation": impl, "placement": algo, "measured": what[kind],
                     "ns_per_tenant": summary(ns), "speedup_vs_python_recipe": speedup})

    def median_of(rid):
        return next((r["ns_per_tenant"]["median"] for r in rows if r["id"] == rid), None)

    targets = []
    for rid, name, limit in [("criterion-hmac-64", "hmac-modulo n=64 k=3", 130), ("criterion-rendezvous-1024", "rendezvous n=1024 k=3", 3000)]:
        got = median_of(rid)
        if got is not None:
            met = got <= limit
            targets.append({"target": f"{name} ≤ {limit:,} ns per tenant (issue 2)", "measured_ns": got, "met": met,
                            "margin": f"{(limit / got - 1) * 100:.0f}% under" if met else f"{(got / limit - 1) * 100:.0f}% over"})
    py64 = median_of("python-64")

    md = header("Placement benchmark", settings, info)
    python = "the chapter's Python `shuffle_shards` (its default key `shuffle-shard-v1`)," if "python-64" in raw else "(no Python: see above)"
    md += [
        f"Each round runs, one after the other, {python}",
        "our criterion benchmark `cargo bench -p shuffle-shard-placement --bench placement` (key `benchmark key, not a secret`;",
        f"warm-up {settings['criterion_warm_up_s']} s, measurement {settings['criterion_measurement_s']} s), and `shuffle-shard place`"
        " on the same tenants `tenant-0`, `tenant-1`, …",
        "Speed-up = the Python recipe's ns per tenant ÷ ours at the same n and k, computed within each round;"
        f" median [min–max] over {rounds(settings)}. The chapter has no Python rendezvous, so rendezvous is set against"
        " Recipe 12.1 at the same n=1024, k=3: what a user of the chapter would run instead.",
        "",
        "| implementation | placement | measured | ns per tenant | speed-up over the Python recipe |",
        "|---|---|---|---:|---:|",
    ]
    for r in rows:
        up = "1× (baseline)" if r["speedup_vs_python_recipe"] is None and r["id"].startswith("python") else spread(r["speedup_vs_python_recipe"], times)
        md.append(f"| {r['implementation']} | {r['placement']} | {r['measured']} | {spread(r['ns_per_tenant'], sig)} | {up} |")
    md.append("")
    agree = settings["agree"]
    if agree == "agree":
        md.append(f"Output check: `shuffle-shard place --shards 64 --k 3` and the chapter's `shuffle_shards(t, 64, 3)` give the same shards, in the same order, for the first {int(settings['agree_tenants']):,} tenants: **agree**.")
    else:
        md.append("Output check: skipped (no recipe to compare with).")
    for t in targets:
        md.append(f"Target: {t['target']}: {'met' if t['met'] else 'missed'}, {sig(t['measured_ns'])} ns ({t['margin']}).")
    if py64 is not None:
        md.append(f"The chapter quotes about 5,200 ns per tenant for its Python recipe; measured here: {sig(py64)} ns.")
    md.append("")
    md.append("The CLI rows include reading stdin and writing one JSON object per tenant, which costs more than placing;"
              " the criterion rows are the placement itself.")

    doc = dict(info)
    doc["settings"] = {k: settings[k] for k in ("rounds", "py_tenants", "cli_tenants", "criterion_warm_up_s", "criterion_measurement_s")}
    doc["recipe"] = {"note": settings["recipe_note"], "sha256": settings["recipe_sha256"] or None}
    doc["checks"] = {"outputs_agree": agree, "agree_tenants": int(settings["agree_tenants"])}
    doc["results"] = rows
    doc["targets"] = targets
    doc["runtime_s"] = float(settings["runtime_s"])
    return md, doc


# --- analysis ------------------------------------------------------------------------------


def analysis(raw: dict, settings: dict) -> tuple[list[str], dict]:
    info = common("analysis", settings)
    timeout = float(settings["py_timeout_s"])
    once_over = float(settings["py_once_over_s"]) if settings.get("py_once_over_s") else None
    side = json.loads(settings["side_cases"])  # [[task, n, k, tenants], ...]
    scale = json.loads(settings["scale_cases"])  # [[n, k, sweep, tenants], ...]

    rows = []
    for task, n, k, tenants in side:
        key = f"{task}-{n}-{k}-{tenants}"
        ours = raw.get(f"ours-{key}", [])
        py = raw.get(f"python-{key}", [])
        ok = [r for r in py if r["status"] == "ok"]
        timed_out = [r for r in py if r["status"] == "timeout"]
        ours_wall = {r["round"]: r["wall_s"] for r in ours}
        row = {
            "task": task, "n": n, "k": k, "tenants": tenants,
            "ours_command": ours[0]["command"] if ours else None,
            "ours_wall_s": summary([r["wall_s"] for r in ours]),
            "ours_cpu_s": summary([r["cpu_s"] for r in ours]),
            "ours_peak_rss_kb": summary([r["rss_kb"] for r in ours]),
            "python_wall_s": summary([r["elapsed_s"] for r in ok]),
            "python_cpu_s": summary([r["cpu_s"] for r in ok]),
            "python_status": "skipped" if not py else ("timeout" if timed_out and not ok else "ok"),
            "speedup": summary([r["elapsed_s"] / ours_wall[r["round"]] for r in ok if r["round"] in ours_wall]),
        }
        if timed_out:
            t = timed_out[0]
            row["python_timeout"] = {"after_s": timeout, "round": t["round"], "progress": t.get("progress")}
            if ours and not ok:
                row["speedup_at_least"] = timeout / statistics.median(ours_wall.values())
        rows.append(row)

    big = []
    for n, k, sweep, tenants in scale:
        recs = raw.get(f"scale-{n}-{k}-{sweep}-{tenants}", [])
        if recs:
            big.append({"n": n, "k": k, "sweep": sweep, "tenants": tenants, "command": recs[0]["command"],
                        "wall_s": summary([r["wall_s"] for r in recs]), "cpu_s": summary([r["cpu_s"] for r in recs]),
                        "peak_rss_kb": summary([r["rss_kb"] for r in recs])})

    def task_name(task, n, k):
        if task == "overlap":
            return f"exact pairwise overlap, n={n} k={k}"
        from math import comb
        return f"all {comb(n, 2):,} double failures, n={n} k={k}"

    md = header("Analysis benchmark", settings, info)
    md += [
        "Side by side: the chapter's Recipe 12.2 in Python — `pairwise_overlap_fraction(tenants, n, k)` (exact, samples=None),"
        " and for the sweep `fully_down_fraction` + `degraded_fraction` for every set of 2 failed shards —"
        " against `shuffle-shard blast` (hmac-modulo, the recipe's default key, tenants `tenant-0` …)."
        f" Python is timed inside its process around the recipe calls and stopped by `timeout` after {timeout:.0f} s;"
        " a run that timed out is not repeated in later rounds"
        + (f", nor one that took more than {once_over:.0f} s (its time is steady; the speed-up is then from the round it ran in)." if once_over else ".")
        + " Ours is the whole process (start-up, placement, analysis,"
        " JSON output), timed from the shell, peak RSS from `/usr/bin/time -v`; `blast` always computes the overlap too."
        f" Speed-up is computed within each round; median [min–max] over {rounds(settings)}.",
        "",
        "| task | tenants | Python Recipe 12.2 | ours: `shuffle-shard blast` | speed-up |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["python_status"] == "ok":
            py, up = spread(r["python_wall_s"], seconds), spread(r["speedup"], times)
            py_runs, our_runs = len(r["python_wall_s"]["rounds"]), len(r["ours_wall_s"]["rounds"]) if r["ours_wall_s"] else 0
            if "python_timeout" not in r and py_runs < our_runs:
                py += f" (run {'once' if py_runs == 1 else f'{py_runs} times'}: over {once_over:.0f} s)" if once_over else f" ({py_runs} runs)"
            if "python_timeout" in r:
                py += f" (timed out at {timeout:.0f} s in round {r['python_timeout']['round']}, not run again)"
        elif r["python_status"] == "timeout":
            prog = r["python_timeout"]["progress"]
            py = f"timed out at {timeout:.0f} s"
            if prog and prog["done"]:
                est = prog["elapsed_s"] * prog["total"] / prog["done"]
                py += f" ({prog['done']:,} of {prog['total']:,} sets done; ≈{sig(est)} s in all)"
                r["python_timeout"]["extrapolated_s"] = est
            up = f"> {times(r['speedup_at_least'])}" if "speedup_at_least" in r else "—"
        else:
            py, up = "skipped", "—"
        md.append(f"| {task_name(r['task'], r['n'], r['k'])} | {r['tenants']:,} | {py} | {spread(r['ours_wall_s'], seconds)} | {up} |")
    md.append("")
    for check in ("overlap", "sweep"):
        verdict = settings.get(f"{check}_check", "skipped")
        md.append(f"Check ({check}): {verdict}.")
    md += [
        "",
        "Ours alone at scale (`shuffle-shard blast --tenants T --json`; wall time and peak RSS of the process, median [min–max]):",
        "",
        "| command | tenants | wall | CPU (user+sys) | peak RSS | target (issue 3) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for b in big:
        wall, rss = b["wall_s"]["median"], b["peak_rss_kb"]["median"]
        if b["tenants"] <= 1_000_000:
            target = f"≤ 3 s: {'met' if wall <= 3 else 'missed'}"
            b["target"] = {"wall_s_at_most": 3, "met": wall <= 3}
        else:
            target = f"≤ 4 GiB: {'met' if rss <= 4 * 2**20 else 'missed'}"
            b["target"] = {"peak_rss_gib_at_most": 4, "met": rss <= 4 * 2**20}
        md.append(f"| `blast --shards {b['n']} --k {b['k']} --sweep {b['sweep']}` | {b['tenants']:,} | {spread(b['wall_s'], seconds)} |"
                  f" {spread(b['cpu_s'], seconds)} | {spread(b['peak_rss_kb'], mib)} | {target} |")
    md += ["", "`--sweep 1` with n=1000 is the overlap plus every single-shard failure; `--sweep 2` with n=64 is the overlap plus all 2,016 double failures."]

    cliff = None
    if settings.get("cliff_case"):
        n, k, tenants, failures = json.loads(settings["cliff_case"])[0]
        ours = raw.get(f"cliff-{n}-{k}-{tenants}-{failures}", [])
        naive = raw.get(f"naive-cliff-{n}-{k}-{tenants}-{failures}", [])
        if ours:
            cliff = {"n": n, "k": k, "tenants": tenants, "failures": failures, "command": ours[0]["command"],
                     "ours_wall_s": summary([r["wall_s"] for r in ours]),
                     "naive_loop_s": summary([r["elapsed_s"] for r in naive]),
                     "check": settings.get("cliff_check", "not run")}
            before = raw.get(f"before-cliff-{n}-{k}-{tenants}-{failures}", [])
            if before:
                cliff["before"] = {"command": before[0]["command"], "status": before[0]["status"],
                                   "wall_s": before[0]["wall_s"], "cpu_s": before[0]["cpu_s"]}
            md += [
                "",
                f"The issue-21 cliff: a sweep of every set of {failures} failed shards out of {n} (k = {k}, {tenants:,} tenants),"
                " which took 458 s before the sweep chose per set between lookups, lookups over the survivors and a scan of"
                " the distinct subsets. The naive loop is `bench/lib/naive_sweep.py`: every tenant against every set, bitmasks,"
                " placement done once outside its timing.",
                "",
                "| command | ours (whole process) | naive loop (Python) | the older build (`CLIFF_BEFORE_BIN`) |",
                "|---|---:|---:|---:|",
                f"| `blast --shards {n} --k {k} --tenants {tenants} --sweep {failures}` | {spread(cliff['ours_wall_s'], seconds)} |"
                f" {spread(cliff['naive_loop_s'], seconds) if naive else 'not run'} |"
                + (f" {seconds(cliff['before']['wall_s'])} wall, {seconds(cliff['before']['cpu_s'])} CPU"
                   f"{' (stopped by timeout)' if cliff['before']['status'] != 'ok' else ''} |" if "before" in cliff else " not run |"),
                "",
                f"Check (cliff): {cliff['check']}.",
            ]

    doc = dict(info)
    doc["settings"] = {"rounds": int(settings["rounds"]), "python_timeout_s": timeout, "python_once_over_s": once_over}
    doc["recipe"] = {"note": settings["recipe_note"], "sha256": settings["recipe_sha256"] or None}
    doc["checks"] = {"overlap": settings.get("overlap_check", "skipped"), "sweep": settings.get("sweep_check", "skipped")}
    doc["side_by_side"] = rows
    doc["ours_at_scale"] = big
    doc["cliff"] = cliff
    doc["runtime_s"] = float(settings["runtime_s"])
    return md, doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=["placement", "analysis"])
    parser.add_argument("--raw", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    settings = dict(pair.split("=", 1) for pair in args.set)
    raw = load_raw(args.raw)
    md, doc = {"placement": placement, "analysis": analysis}[args.suite](raw, settings)
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
