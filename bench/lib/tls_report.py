#!/usr/bin/env python3
"""Writes bench/tls.sh's report: bench/results/tls.md and tls.json from the runs it recorded.

    tls_report.py --runs RUNS.jsonl --md OUT.md --json OUT.json -- KEY=VALUE...

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
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_ci import paired_interval  # noqa: E402

# Keys whose values are numbers; everything else stays a string (a git
# revision can be all digits).
NUMERIC = {
    "runtime_s", "clk_tck", "machine.nproc", "machine.memory_gib",
    "settings.duration_s", "settings.rounds", "settings.warmup_s", "settings.connections",
    "settings.handshake_clients", "settings.proxy_cpu", "settings.backend_cpu", "settings.load_cpu",
    "answer_bytes.nginx", "answer_bytes.gateway",
}
TARGETS = ("nginx", "gateway")


def parse_meta(pairs: list[str]) -> dict:
    meta: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"tls_report.py: {pair!r} is not KEY=VALUE")
        node = meta
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = json.loads(value) if key in NUMERIC else value
    return meta


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def upstream(version: str) -> str:
    """'debian/4.1.0-3+b2' -> '4.1.0'."""
    found = re.search(r"\d+(?:\.\d+)+", version or "")
    return found.group(0) if found else (version or "?")


def num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def spread(s: dict, unit: str = "") -> str:
    text = f"{num(s['median'])}{unit}"
    if len(s["rounds"]) > 1:
        text += f" [{num(s['min'])}–{num(s['max'])}]"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--md", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("meta", nargs="*")
    args = parser.parse_args()
    meta = parse_meta(args.meta)
    settings = meta["settings"]
    hz = meta["clk_tck"]
    conns, clients = settings["connections"], settings["handshake_clients"]

    runs = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    # (measure, target) -> {round: run}
    by = collections.defaultdict(dict)
    for run in runs:
        by[(run["measure"], run["target"])][run["round"]] = run

    def series(measure: str, value) -> dict[str, list[float]] | None:
        """Per target, the value of each round both targets ran, in round order."""
        if not all((measure, t) in by for t in TARGETS):
            return None
        rounds = sorted(set(by[(measure, "nginx")]) & set(by[(measure, "gateway")]))
        return {t: [value(by[(measure, t)][r]) for r in rounds] for t in TARGETS}

    def cpu_us(count_key: str, ticks_key: str = "proxy_cpu_ticks"):
        return lambda run: run[ticks_key] * 1e6 / hz / run[count_key]

    # (id, what, measure, value, unit, better)
    rows = [
        (f"requests_per_second_at_{conns}", f"requests/s, TLS keep-alive, {conns} connections (wrk)",
         f"keepalive_{conns}", lambda r: r["requests_per_second"], "", "higher"),
        ("p50_us_at_1", "p50 latency, TLS keep-alive, 1 connection (wrk)",
         "keepalive_1", lambda r: r["p50_us"], " µs", "lower"),
    ]
    for version in settings["handshake_versions"].split():
        tag = version.replace(".", "")
        rows.append((f"handshakes_per_second_tls{tag}",
                     f"full handshakes/s, TLS {version}, a new connection per request ({clients} × `openssl s_time -new`)",
                     f"handshake_tls{tag}", lambda r: r["handshakes_per_second"], "", "higher"))
    rows.append((f"proxy_cpu_us_per_request_at_{conns}", f"proxy CPU per request, keep-alive, {conns} connections",
                 f"keepalive_{conns}", cpu_us("requests"), " µs", "lower"))
    rows.append((f"proxy_kernel_cpu_us_per_request_at_{conns}", "… of which kernel",
                 f"keepalive_{conns}", cpu_us("requests", "proxy_kernel_ticks"), " µs", "lower"))
    for version in settings["handshake_versions"].split():
        tag = version.replace(".", "")
        rows.append((f"proxy_cpu_us_per_handshake_tls{tag}", f"proxy CPU per full handshake (with its request), TLS {version}",
                     f"handshake_tls{tag}", cpu_us("connections"), " µs", "lower"))
    extras = [
        (f"p99_us_at_{conns}", f"p99, {conns} connections", f"keepalive_{conns}", lambda r: r["p99_us"], " µs", "lower"),
        ("p99_us_at_1", "p99, 1 connection", "keepalive_1", lambda r: r["p99_us"], " µs", "lower"),
        ("requests_per_second_at_1", "requests/s, 1 connection", "keepalive_1", lambda r: r["requests_per_second"], "", "higher"),
    ]
    for version in settings["handshake_versions"].split():
        tag = version.replace(".", "")
        extras.append((f"client_cpu_us_per_handshake_tls{tag}", f"the s_time clients' CPU per full handshake, TLS {version}",
                       f"handshake_tls{tag}", cpu_us("connections", "client_cpu_ticks"), " µs", "lower"))

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
    more = [m for m in map(measured, extras) if m]
    m = meta["machine"]
    v = meta["versions"]
    neg = meta["negotiated"]
    rounds = settings["rounds"]

    md = [
        "# TLS benchmark",
        "",
        f"{meta['date']} · git {meta['git_rev']} · {m['nproc']} CPUs ({m['cpu_model']}) · {m['memory_gib']} GiB · Linux {m['kernel']}"
        f" · {v['rustc']} · rustls {v['rustls']} (ring {v['ring']}) · nginx {v['nginx']} (OpenSSL {v['nginx_openssl']})"
        f" · wrk {upstream(v['wrk'])} · openssl {v['openssl_client']} (s_time, s_client)",
        "",
        f"Command: `{meta['command']}` (the script took {meta['runtime_s']:.0f} s after the installs). Load average before/after:"
        f" {m['loadavg_before']} / {m['loadavg_after']}; background busy (proxy/backend/load CPUs) with nothing running:"
        f" {m['background_busy']}.",
        "",
        "Same backend (`shuffle-shard backend --workers 1`) behind both; one worker each (gateway: `serve --workers 1`,"
        f" nginx: `worker_processes 1`); {settings['pinning']}. The gateway authenticates the tenant's API key"
        f" (FORWARDING={settings['forwarding']}, as in bench/gateway.sh); both get the same request with the credential.",
        f"One certificate for both, made at run time: {meta['certificate']}. nginx's TLS settings, matched to"
        f" the gateway's rustls configuration: `{meta['nginx_tls_directives']}`",
        "",
        "What each negotiates (`openssl s_client`, checked equal before measuring):",
        "",
        "| asked for | nginx | gateway |",
        "|---|---|---|",
        *[f"| TLS {k[3]}.{k[4]} | {neg[k]['nginx']} | {neg[k]['gateway']} |" for k in sorted(neg, reverse=True)],
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
    md += [
        "",
        "Higher is better for requests/s and handshakes/s, lower for latency and CPU; \"ahead\" counts rounds where the"
        " gateway was at least as good. Proxy CPU is the proxy's processes' user + kernel time from /proc over the run,"
        " divided by the requests or connections served: steadier than rates on a shared machine. A handshake run's"
        " connection also carries one HTTP/1.0 request through the proxy to the backend, answered and closed.",
        "",
        "| also measured | nginx | gateway | gateway/nginx (paired) | 95 % interval |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in more:
        p = row["paired"]
        unit = f" {row['unit']}" if row["unit"] else ""
        md.append(f"| {row['what']} | {spread(row['nginx'], unit)} | {spread(row['gateway'], unit)} | {p['ratio_median']:.2f}×"
                  f" | {p['interval95'][0]:.2f}–{p['interval95'][1]:.2f}× |")
    lose = [r["what"] for r in table if r["verdict"] == "nginx ahead"]
    win = [r["what"] for r in table if r["verdict"] == "gateway ahead"]
    md += ["", "**Where we lose:** " + ("; ".join(lose) + "." if lose else "nowhere this run can tell (no interval lies wholly on nginx's side).")]
    if win:
        md.append("**Where we are ahead:** " + "; ".join(win) + ".")
    if settings["load_cpu"] == settings["backend_cpu"]:
        md += ["", "With the load generators on the backend's CPU, that CPU can run out before the proxy's: the rates then"
               " measure the client's TLS work (wrk's, s_time's; the s_time clients' CPU per handshake is above) as much as"
               " the proxy's; the proxy CPU rows do not."]

    doc = {"benchmark": "tls", **meta, "measures": table, "also_measured": more, "runs": runs}
    args.md.write_text("\n".join(md) + "\n", encoding="utf-8")
    args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
