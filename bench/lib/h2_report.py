#!/usr/bin/env python3
"""Writes bench/h2.sh's report: bench/results/h2.md and h2.json from the runs it recorded.

    h2_report.py --runs RUNS.jsonl --md OUT.md --json OUT.json -- KEY=VALUE...

RUNS.jsonl has one JSON object per measured run (round, measure, target and
the figures); the KEY=VALUE pairs describe the run (dotted keys nest:
machine.nproc=2). Every figure is the median [min–max] over the rounds; the
comparison is the median of the per-round ratios gateway/nginx with a
bootstrap 95 % interval (paired_ci.py), which is what says whether this run
could tell the two apart. Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_ci import paired_interval  # noqa: E402
from tls_report import spread  # noqa: E402

NUMERIC = {"runtime_s", "machine.nproc", "settings.duration_s", "settings.rounds", "settings.warmup_s", "settings.streams"}
TARGETS = ("nginx", "gateway")


def parse_meta(pairs: list[str]) -> dict:
    meta: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"h2_report.py: {pair!r} is not KEY=VALUE")
        node = meta
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = json.loads(value) if key in NUMERIC else value
    return meta


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--md", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("meta", nargs="*")
    args = parser.parse_args()
    meta = parse_meta(args.meta)
    settings = meta["settings"]
    streams = settings["streams"]

    runs = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    by = collections.defaultdict(dict)
    for run in runs:
        by[(run["measure"], run["target"])][run["round"]] = run

    def series(measure: str, value) -> dict[str, list[float]] | None:
        if not all((measure, t) in by for t in TARGETS):
            return None
        rounds = sorted(set(by[(measure, "nginx")]) & set(by[(measure, "gateway")]))
        return {t: [value(by[(measure, t)][r]) for r in rounds] for t in TARGETS}

    rps = lambda r: r["requests_per_second"]  # noqa: E731
    rows = [
        ("h2_rps_c1", f"HTTP/2 requests/s, 1 connection × {streams} streams", "h2_c1", rps, "", "higher"),
        ("h2_rps_c8", f"HTTP/2 requests/s, 8 connections × {streams} streams", "h2_c8", rps, "", "higher"),
        ("h2_p50_us", "HTTP/2 p50 latency, 1 connection × 1 stream", "h2_p50", lambda r: r["p50_us"], " µs", "lower"),
        ("grpc_rps_c1", f"gRPC unary calls/s, 1 connection × {streams} streams", "grpc_c1", rps, "", "higher"),
        ("grpc_rps_c8", f"gRPC unary calls/s, 8 connections × {streams} streams", "grpc_c8", rps, "", "higher"),
    ]

    def measured(row) -> dict | None:
        ident, what, measure, value, unit, better = row
        values = series(measure, value)
        if values is None:
            return None
        median, low, high = paired_interval(values["gateway"], values["nginx"])
        ratios = [g / n for g, n in zip(values["gateway"], values["nginx"])]
        ahead = sum(r >= 1 if better == "higher" else r <= 1 for r in ratios)
        if (better == "higher" and high < 1) or (better == "lower" and low > 1):
            verdict = "nginx ahead"
        elif (better == "higher" and low > 1) or (better == "lower" and high < 1):
            verdict = "gateway ahead"
        else:
            verdict = "cannot tell apart"
        return {
            "id": ident, "what": what, "unit": unit.strip(), "better": better,
            "nginx": stats(values["nginx"]), "gateway": stats(values["gateway"]),
            "paired": {"ratio_median": round(median, 3), "interval95": [round(low, 3), round(high, 3)],
                       "rounds_gateway_ahead": ahead, "rounds": len(ratios)},
            "verdict": verdict,
        }

    table = [m for m in map(measured, rows) if m]
    m = meta["machine"]
    v = meta["versions"]
    rounds = settings["rounds"]
    md = [
        "# HTTP/2 and gRPC benchmark",
        "",
        f"{meta['date']} · git {meta['git_rev']} · {m['nproc']} CPUs ({m['cpu_model']}) · Linux {m['kernel']}"
        f" · {v['rustc']} · hyper {v['hyper']} · h2 {v['h2']} · tonic {v['tonic']} (the gRPC backend)"
        f" · nginx {v['nginx']} · h2load {v['h2load']}",
        "",
        f"Command: `{meta['command']}` (the script took {meta['runtime_s']:.0f} s after the installs). Load average before/after:"
        f" {m['loadavg_before']} / {m['loadavg_after']}.",
        "",
        "HTTP/2 rows: clients speak h2c (prior knowledge) to each proxy, which forwards HTTP/1.1 to the same"
        " `shuffle-shard backend --workers 1` (nginx `proxy_pass` with a keep-alive pool; the gateway over two shard ids on"
        f" it, k = 2, FORWARDING={settings['forwarding']}). gRPC rows: `/shuffle.demo.Echo/Unary` through nginx `grpc_pass` and"
        " through the gateway's two `protocol = \"h2c\"` shards to the same `shuffle-shard backend --protocol grpc --workers 1`"
        " (tonic). One worker each (gateway: `serve --workers 1`, nginx: `worker_processes 1`);"
        f" {settings['pinning']}. The gateway's gRPC statuses over the run: `{meta['grpc_statuses'].strip()}`.",
        "",
        f"Each of {rounds} rounds runs both targets back to back for each measurement ({settings['duration_s']} s each;"
        " nginx first in odd rounds, the gateway first in even ones); median [min–max] over the rounds. The ratio is the"
        " median of the per-round ratios gateway/nginx, with a bootstrap 95 % interval over the rounds: an interval that"
        " spans 1.00 means this run cannot tell the two apart."
        + (f" With {rounds} rounds the interval is crude (it can only pick among the few ratios there are)." if rounds < 8 else ""),
        "",
        "| measure | nginx | gateway | gateway/nginx (paired) | 95 % interval | rounds the gateway was ahead | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in table:
        p = row["paired"]
        unit = f" {row['unit']}" if row["unit"] else ""
        md.append(
            f"| {row['what']} | {spread(row['nginx'], unit)} | {spread(row['gateway'], unit)} | **{p['ratio_median']:.2f}×**"
            f" | {p['interval95'][0]:.2f}–{p['interval95'][1]:.2f}× | {p['rounds_gateway_ahead']} of {p['rounds']} | {row['verdict']} |"
        )
    failures = {t: (sum(r.get("failed", 0) for r in runs if r["target"] == t), sum(r["requests"] for r in runs if r["target"] == t))
                for t in TARGETS}
    failed_in = sorted({f"{r['target']} {r['measure']} round {r['round']} ({r['failed']})" for r in runs if r.get("failed")})
    md += ["", "Failed requests (not 2xx, or reset) over the measured runs: "
           + "; ".join(f"{t} {failures[t][0]:,} of {failures[t][1]:,}" for t in TARGETS)
           + (f" ({', '.join(failed_in)}); nginx logged {meta.get('nginx_errors', '0')} errors, the first:"
              f" `{meta.get('nginx_first_error', '')}`" if failed_in else "")
           + ". The rates count only the requests that succeeded."]
    lose = [r["what"] for r in table if r["verdict"] == "nginx ahead"]
    win = [r["what"] for r in table if r["verdict"] == "gateway ahead"]
    md += ["", "**Where we lose:** " + ("; ".join(lose) + "." if lose else "nowhere this run can tell (no interval lies wholly on nginx's side).")]
    if win:
        md.append("**Where we are ahead:** " + "; ".join(win) + ".")
    doc = {"benchmark": "h2", **meta, "measures": table, "failed": {t: {"failed": f, "requests": n} for t, (f, n) in failures.items()},
           "runs": runs}
    args.md.write_text("\n".join(md) + "\n", encoding="utf-8")
    args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
