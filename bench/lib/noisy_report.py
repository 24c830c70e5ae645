#!/usr/bin/env python3
"""Writes bench/noisy.sh's report: bench/results/noisy.md and noisy.json from the phases it recorded.

    noisy_report.py --runs RUNS.jsonl --md OUT.md --json OUT.json -- KEY=VALUE...

RUNS.jsonl has one JSON object per measured phase (round, phase A = the
quiet tenants alone or B = the same with the noisy tenant flooding, and the
figures); the KEY=VALUE pairs describe the run (dotted keys nest:
machine.nproc=2). Every figure is the median [min–max] over the rounds; the
comparison is the median of the per-round ratios B/A with a bootstrap 95 %
interval (paired_ci.py), which is what says whether this run could tell the
two phases apart. Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_ci import paired_interval  # noqa: E402
from tls_report import spread  # noqa: E402

NUMERIC = {
    "runtime_s", "machine.nproc", "settings.duration_s", "settings.rounds", "settings.warmup_s", "settings.shards",
    "settings.quiet_tenants", "settings.quiet_connections", "settings.rate", "settings.burst", "settings.factor",
    "settings.noisy_connections", "settings.noisy_seconds", "settings.noisy_cpu", "settings.quiet_cpu",
}


def parse_meta(pairs: list[str]) -> dict:
    meta: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"noisy_report.py: {pair!r} is not KEY=VALUE")
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
    s = meta["settings"]

    runs = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    by = {(r["round"], r["phase"]): r for r in runs}
    rounds = sorted({r for r, _ in by if (r, "A") in by and (r, "B") in by})
    if not rounds:
        sys.exit("noisy_report.py: no round has both phases")
    a = [by[(r, "A")] for r in rounds]
    b = [by[(r, "B")] for r in rounds]

    def busy(run):  # the gateway's share of its core over the quiet load, %
        return 100 * run["gateway_cpu_s"] / run["seconds"]

    def per_quiet(run):  # the gateway's CPU per quiet request, µs (in B it also pays for the flood)
        return 1e6 * run["gateway_cpu_s"] / run["quiet_requests"]

    rows = [
        ("quiet_rps", "quiet tenants' requests/s (all together)", lambda r: r["quiet_rps"], "", "higher"),
        ("quiet_p50_us", "quiet tenants' p50 latency", lambda r: r["p50_us"], " µs", "lower"),
        ("quiet_p99_us", "quiet tenants' p99 latency", lambda r: r["p99_us"], " µs", "lower"),
        ("gateway_busy_percent", "gateway's CPU (share of its one core)", busy, " %", None),
        ("backends_busy_percent", "backends' CPU (all together, share of one core)",
         lambda r: 100 * r["backends_cpu_s"] / r["seconds"], " %", None),
        ("backend_cpu_busy_percent", "the backends' CPU, busy (with every process on it)", lambda r: r["backend_cpu_busy_percent"], " %", None),
        ("gateway_cpu_per_quiet_request_us", "gateway's CPU per quiet request", per_quiet, " µs", None),
    ]
    table = []
    for ident, what, value, unit, better in rows:
        va, vb = [value(r) for r in a], [value(r) for r in b]
        median, low, high = paired_interval(vb, va)
        entry = {"id": ident, "what": what, "unit": unit.strip(), "better": better, "A": stats(va), "B": stats(vb),
                 "paired": {"ratio_median": round(median, 3), "interval95": [round(low, 3), round(high, 3)], "rounds": len(rounds)}}
        if better:
            worse = [y / x < 1 if better == "higher" else y / x > 1 for x, y in zip(va, vb)]
            entry["paired"]["rounds_B_worse"] = sum(worse)
            if (better == "higher" and high < 1) or (better == "lower" and low > 1):
                entry["verdict"] = "worse with the flood"
            elif (better == "higher" and low > 1) or (better == "lower" and high < 1):
                entry["verdict"] = "better with the flood"
            else:
                entry["verdict"] = "cannot tell apart"
        table.append(entry)
    by_id = {e["id"]: e for e in table}

    # The flood: how much of it was refused, and how much the limit lets through.
    sent = sum(r["noisy_requests"] for r in b)
    limited = sum(r["noisy_4xx"] for r in b)
    allowed_expected = len(b) * (s["burst"] + s["rate"] * s["noisy_seconds"])
    flood = {
        "requests": sent, "refused_429": limited, "passed_2xx": sum(r["noisy_2xx"] for r in b),
        "refused_share": limited / sent if sent else None,
        "refused_share_expected": 1 - allowed_expected / sent if sent else None,
        "offered_rps": stats([r["noisy_rps"] for r in b]),
        "target_rps": s["rate"] * s["factor"],
    }

    # What the flood cost the gateway: its CPU in B beyond what the quiet
    # requests of B would have cost at A's rate per request, over the noisy
    # requests sent during the quiet load.
    extra = []
    for ra, rb in zip(a, b):
        spare = rb["gateway_cpu_s"] - rb["quiet_requests"] * ra["gateway_cpu_s"] / ra["quiet_requests"]
        noisy_in_window = rb["noisy_rps"] * rb["seconds"]
        if noisy_in_window > 0:
            extra.append(1e6 * spare / noisy_in_window)
    flood["gateway_cpu_per_noisy_request_us"] = stats(extra) if extra else None
    # The flood alone (phase F): the gateway's CPU per refused request, its
    # admitted requests charged at A's cost per quiet request.
    per_quiet_a = statistics.median(r["gateway_cpu_s"] / r["quiet_requests"] for r in a)
    alone = [1e6 * (r["gateway_cpu_s"] - r["noisy_2xx"] * per_quiet_a) / r["noisy_4xx"]
             for r in runs if r["phase"] == "F" and r["noisy_4xx"] > 0]
    flood["gateway_cpu_per_refusal_alone_us"] = stats(alone) if alone else None
    flood["gateway_cpu_per_proxied_request_us"] = 1e6 * per_quiet_a
    # The requests the limit lets through are real load on the shards: as a
    # share of the quiet tenants' rate, the loss they alone would explain
    # when the shards' CPU is the bound.
    # The flood's own client, on the same CPU as the quiet clients and the
    # backends when there are only 2: its share of that CPU over B.
    flood["client_cpu_percent"] = stats([100 * r.get("noisy_client_cpu_s", 0) / r["seconds"] for r in b])
    flood["admitted_rps"] = stats([r["noisy_2xx"] / s["noisy_seconds"] for r in b])
    flood["admitted_share_of_quiet"] = stats([r["noisy_2xx"] / s["noisy_seconds"] / r["quiet_rps"] for r in b])

    m, v = meta["machine"], meta["versions"]
    rps, p50, p99 = by_id["quiet_rps"], by_id["quiet_p50_us"], by_id["quiet_p99_us"]
    gw_busy_a = by_id["gateway_busy_percent"]["A"]["median"]
    lost = rps["verdict"] == "worse with the flood"
    r_med, (r_low, r_high) = rps["paired"]["ratio_median"], rps["paired"]["interval95"]
    if lost:
        verdict = (f"**The quiet tenants lost throughput:** with the flood they served {r_med:.2f}× their requests/s"
                   f" (95 % interval {r_low:.2f}–{r_high:.2f}×, fewer in {rps['paired']['rounds_B_worse']} of"
                   f" {len(rounds)} rounds), a loss of about {100 * (1 - r_med):.0f} %.")
    elif r_low < 0.95:
        verdict = (f"**Not shown either way:** with the flood the quiet tenants served {r_med:.2f}× their requests/s"
                   f" (95 % interval {r_low:.2f}–{r_high:.2f}×, fewer in {rps['paired']['rounds_B_worse']} of"
                   f" {len(rounds)} rounds). The interval spans 1.00, so this run shows no loss, but it cannot rule out"
                   f" one of up to {100 * (1 - r_low):.0f} %: phase A alone ranged"
                   f" {rps['A']['min']:,.0f}–{rps['A']['max']:,.0f} requests/s between rounds on this machine.")
    else:
        verdict = (f"**The quiet tenants kept their throughput:** with the flood they served {r_med:.2f}× their requests/s"
                   f" (95 % interval {r_low:.2f}–{r_high:.2f}×, fewer in {rps['paired']['rounds_B_worse']} of"
                   f" {len(rounds)} rounds): " + (f"no loss of more than {100 * (1 - r_low):.0f} % within the interval."
                                                  if r_low < 1 else "no loss within the interval."))
    if r_low > 1:
        verdict += (" They were faster with the flood, which nothing the gateway does explains; likely (unchecked) a"
                    " virtual machine's idle CPU wakes slowly, and the flood kept a CPU of the request path awake, which"
                    " shortens every closed-loop round trip.")

    def explained(accounted: float, loss: float) -> str:
        """Whether the client's CPU and the admitted share account for the quiet tenants' loss."""
        if loss <= 0:
            return "The quiet tenants lost nothing this run shows."
        if accounted >= 0.5 * loss:
            return (f"Together that is {accounted:.0f} % against the quiet tenants' {loss:.0f} % loss: on this machine"
                    " the loss is the load generator's and the admitted share's, not the gateway's.")
        return (f"Together that is {accounted:.0f} %, less than the quiet tenants' {loss:.0f} % loss; the rest is not"
                " attributed here (the kernel's loopback work for the flood on that CPU is counted to no process, and"
                " the machine is shared).")

    why = []
    cost = flood["gateway_cpu_per_noisy_request_us"]
    alone = flood["gateway_cpu_per_refusal_alone_us"]
    if alone:
        why.append(
            f"A refused request costs the gateway a read, a parse, the API key's SHA-256, the limit check and a 429"
            f" written back: {alone['median']:.1f} µs of its CPU each, measured with the flood alone"
            f" ([{alone['min']:.1f}–{alone['max']:.1f}] over {len(alone['rounds'])} runs), against"
            f" {flood['gateway_cpu_per_proxied_request_us']:.1f} µs for a proxied quiet request in A"
            + (" (cheaper, not free)" if alone["median"] < 0.8 * flood["gateway_cpu_per_proxied_request_us"] else
               " (about as costly or more: alone, at 200 requests/s a connection, each refusal wakes the gateway for itself, where"
               " the closed-loop quiet load shares its wake-ups and system calls)")
            + f"; so the flood's {flood['offered_rps']['median']:,.0f} requests/s cost the gateway about"
            f" {alone['median'] * flood['offered_rps']['median'] / 1e4:.0f} % of a core."
            + (f" Beside the quiet load (B's gateway CPU beyond what its quiet requests cost at A's rate) the estimate"
               f" is {cost['median']:.0f} µs [{cost['min']:.0f}–{cost['max']:.0f}], too noisy here to lean on."
               if cost else ""))
    elif cost:
        why.append(
            f"Every refused request still costs the gateway a read, a parse, the API key's SHA-256, the limit check and a"
            f" 429 written back: about {cost['median']:.0f} µs of its CPU each here ([{cost['min']:.0f}–{cost['max']:.0f}]"
            f" over the rounds, the gateway's CPU in B beyond what B's quiet requests cost at A's rate, over the"
            f" {flood['offered_rps']['median']:,.0f} noisy requests/s sent).")
    if gw_busy_a >= 90:
        why.append(
            f"The gateway's one core was already {gw_busy_a:.0f} % busy with the quiet load alone, so that CPU comes out"
            " of the quiet tenants' share: on this machine a flood of refused requests is a real cost, the price of"
            " reading them at all; a refusal is cheaper than a proxied request, but not free.")
    else:
        why.append(
            f"The gateway's core was {gw_busy_a:.0f} % busy with the quiet load alone, so it had room for the refusals.")
    backend_busy_a = by_id["backend_cpu_busy_percent"]["A"]["median"]
    admitted = flood["admitted_share_of_quiet"]["median"]
    if backend_busy_a >= 90:
        why.append(
            f"The CPU that ran out first was the backends' (CPU {s['pinning'].split('backends on CPU ')[1].split(',')[0]},"
            f" {backend_busy_a:.0f} % busy in A{', shared with every h2load' if m['nproc'] <= 2 else ''}), not the"
            f" gateway's: the {flood['admitted_rps']['median']:,.0f} requests/s the limit lets through are"
            f" {100 * admitted:.1f} % more requests for the backends, a loss the limit allows by design"
            + (f", and the flood's own client (h2load, on that CPU) used {flood['client_cpu_percent']['median']:.0f} % of it"
               f" in B. {explained(100 * admitted + flood['client_cpu_percent']['median'], 100 * (1 - r_med))}"
               if m["nproc"] <= 2 and s.get("noisy_cpu", s.get("quiet_cpu")) == s.get("quiet_cpu") else
               f"; the flood's client ran on CPU {s.get('noisy_cpu')}, apart from the quiet clients."))
    if m["nproc"] <= 2 and backend_busy_a < 90 and s.get("noisy_cpu") == s.get("quiet_cpu"):
        why.append(
            "On this 2-CPU machine the flood's client (h2load) runs on the same CPU as the quiet clients and the"
            f" backends (that CPU was {backend_busy_a:.0f} % busy in A) and used"
            f" {flood['client_cpu_percent']['median']:.0f} % of it in B, and the limit lets"
            f" {flood['admitted_rps']['median']:,.0f} of its requests/s through to the backends"
            f" ({100 * admitted:.1f} % of the quiet rate). "
            + explained(100 * admitted + flood['client_cpu_percent']['median'], 100 * (1 - r_med)))
    if p99["verdict"] == "worse with the flood" or p50["verdict"] == "worse with the flood":
        why.append(
            f"Latency: p50 {p50['paired']['ratio_median']:.2f}× (interval {p50['paired']['interval95'][0]:.2f}–"
            f"{p50['paired']['interval95'][1]:.2f}×), p99 {p99['paired']['ratio_median']:.2f}× (interval"
            f" {p99['paired']['interval95'][0]:.2f}–{p99['paired']['interval95'][1]:.2f}×) with the flood.")

    md = [
        "# Noisy-neighbour benchmark",
        "",
        f"{meta['date']} · git {meta['git_rev']} · {m['nproc']} CPUs ({m['cpu_model']}) · Linux {m['kernel']}"
        f" · {v['rustc']} · h2load {v['h2load']}",
        "",
        f"Command: `{meta['command']}` (the script took {meta['runtime_s']:.0f} s after the installs). Load average"
        f" before/after: {m['loadavg_before']} / {m['loadavg_after']} (the machine may be shared).",
        "",
        f"One gateway (`serve --workers 1`, k = 2 over {s['shards']} shard ids, each its own `backend --workers 1`,"
        f" FORWARDING={s['forwarding']}); {s['pinning']}. {s['quiet_tenants']} quiet tenants without limits, each"
        + (f" under a closed-loop load (`h2load --h1 -c{s['quiet_connections']}`, all at once: each connection sends"
           " its next request when the last is answered, so this measures what the machine can serve)"
           if not s.get("quiet_rate") else
           f" sending {int(s['quiet_rate']):,} requests/s open loop (`h2load --h1 -c{s['quiet_connections']} --rps"
           f" {int(s['quiet_rate']) // s['quiet_connections']}`, all at once: the load a service's tenants offer"
           " whatever the answers, below what the machine can serve, so a loss is requests the gateway fell behind on)")
        + "; one noisy tenant whose"
        f" tenants-file entry sets `requests_per_second = {s['rate']}`, `burst = {s['burst']}`. Subsets: {meta['subsets']}.",
        "",
        f"Each of {len(rounds)} rounds runs phase A (the quiet load alone, {s['duration_s']} s) and phase B (the same"
        f" quiet load while the noisy tenant sends {s['factor']}× its rate, {flood['target_rps']:,} requests/s open loop:"
        f" `h2load --h1 -c{s['noisy_connections']} --rps {flood['target_rps'] // s['noisy_connections']}`, from a second"
        " before the quiet load to a second after it), A first in odd rounds, B first in even ones. Median [min–max]"
        " over the rounds; B/A is the median of the per-round ratios with a bootstrap 95 % interval: an interval that"
        " spans 1.00 means this run cannot tell the phases apart."
        + (f" With {len(rounds)} rounds the interval is crude." if len(rounds) < 8 else ""),
        "",
        "| measure | A: quiet alone | B: with the flood | B/A (paired) | 95 % interval | rounds B was worse | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in table:
        p = row["paired"]
        unit = f" {row['unit']}" if row["unit"] else ""
        worse = f"{p['rounds_B_worse']} of {p['rounds']}" if "rounds_B_worse" in p else "—"
        md.append(f"| {row['what']} | {spread(row['A'], unit)} | {spread(row['B'], unit)} | **{p['ratio_median']:.2f}×**"
                  f" | {p['interval95'][0]:.2f}–{p['interval95'][1]:.2f}× | {worse} | {row.get('verdict', '—')} |")
    share = flood["refused_share"]
    expected = flood["refused_share_expected"]
    md += [
        "",
        f"The noisy tenant sent {sent:,} requests in the B phases ({flood['offered_rps']['median']:,.0f} requests/s"
        f" median, {flood['target_rps']:,} asked): **{limited:,} refused with 429 ({100 * share:.1f} %)**,"
        f" {flood['passed_2xx']:,} passed; the limit alone would refuse {100 * expected:.1f} % (all but the burst"
        f" of {s['burst']} and {s['rate']} a second over each {s['noisy_seconds']}-second flood). Every quiet request"
        " was answered 2xx (the script stops otherwise).",
        "",
        verdict + (" " + " ".join(why) if why else ""),
    ]
    doc = {"benchmark": "noisy", **meta, "rounds_measured": len(rounds), "measures": table, "flood": flood,
           "quiet_lost_throughput": lost,
           "quiet_throughput_verdict": "lost" if lost else ("not shown" if r_low < 0.95 else "kept"), "runs": runs}
    args.md.write_text("\n".join(md) + "\n", encoding="utf-8")
    args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
