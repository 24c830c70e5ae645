#!/usr/bin/env python3
"""Helpers of bench/tenants.sh (issue 31): tenants generated, one gateway start measured, PUT propagation.

    tenants_bench.py gen N FILE.jsonl
    tenants_bench.py start --url URL --key KEY --log FILE --case NAME --round R [--settle-max S] -- COMMAND...
    tenants_bench.py put --admin URL --token-file FILE --proxy URL --count N --out FILE

`gen`: N tenants as JSON Lines, ids `tenant-%07d`, tenant i's API key `key-i`
(only its SHA-256 is written).

`start`: launches COMMAND (the gateway), asks URL with `Authorization: Bearer
KEY` every 5 ms (one process, so the polling costs the machine little) until the
first 200: the first answer, timed from just before the launch. Then waits for
the log line "blast-radius model built tenants=N" (the gateway builds that
model over every tenant on a thread of its own after it starts serving; with
RUST_LOG including `gateway::state=debug`; a registry read from PostgreSQL
is installed after the start, and its model logs no line), or for VmRSS to
stop moving for a second, no sooner than --min-settle seconds after the
first answer and at most --settle-max seconds after it, and reads VmRSS (serving), VmHWM (peak) and the
process's user+system CPU time from /proc; stops the gateway (SIGTERM) and
prints one JSON line.

`put`: COUNT times, `PUT /admin/tenants/new-…` on replica A's admin listener
with a fresh API key's digest, then asks replica B's proxy with that key until
it answers 200: the time from sending the PUT to B's first 200, and the PUT's
own round trip. Writes a JSON document. Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse

TICK = os.sysconf("SC_CLK_TCK")


def gen(n: int, path: str) -> None:
    with open(path, "w", encoding="ascii", buffering=1 << 20) as out:
        sha = hashlib.sha256
        lines = []
        for i in range(n):
            lines.append('{"id":"tenant-%07d","api_key_sha256":"%s"}\n' % (i, sha(b"key-%d" % i).hexdigest()))
            if len(lines) == 100_000:
                out.write("".join(lines))
                lines.clear()
        out.write("".join(lines))


class Client:
    """One keep-alive connection, reopened whenever it fails."""

    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path or "/"
        self.conn = None
        self.body = b""

    def request(self, method: str, path: str | None = None, headers=None, body=None) -> int | None:
        """The status, or None when nothing answered. A kept-alive connection the server has closed
        meanwhile (its idle timeout) is opened again once."""
        if self.conn is not None:
            status = self.once(method, path, headers, body)
            if status is not None:
                return status
        return self.once(method, path, headers, body)

    def once(self, method, path, headers, body) -> int | None:
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            self.conn.request(method, path or self.path, body=body, headers=headers or {})
            answer = self.conn.getresponse()
            self.body = answer.read()
            if answer.will_close:
                self.close()
            return answer.status
        except (OSError, http.client.HTTPException):
            self.close()
            return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def proc_status(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(Vm\w+|Threads):\s+(\d+)", f.read(), re.M)}


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def start(a) -> None:
    loadavg = open("/proc/loadavg", encoding="ascii").read().split()[:3]
    log = open(a.log, "wb")
    client = Client(a.url)
    headers = {"Authorization": f"Bearer {a.key}"}
    t0 = time.monotonic()
    gw = subprocess.Popen(a.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        polls = 0
        while True:
            polls += 1
            if client.request("GET", headers=headers) == 200:
                first = time.monotonic() - t0
                break
            if gw.poll() is not None:
                sys.exit(f"the gateway exited ({gw.returncode}) before answering; see {a.log}")
            if time.monotonic() - t0 > a.timeout:
                sys.exit(f"no 200 within {a.timeout} s; see {a.log}")
            time.sleep(0.005)
        cpu_first = cpu_s(gw.pid)
        at_first = proc_status(gw.pid)
        # Settle: the model's log line, or VmRSS still for a second.
        settled_by, samples, model_ms = "timeout", [], None
        while time.monotonic() - t0 - first < a.settle_max:
            time.sleep(0.2)
            samples.append(proc_status(gw.pid)["VmRSS"])
            m = re.search(rb"blast-radius model built tenants=%d elapsed_ms=(\d+)" % a.tenants, open(a.log, "rb").read())
            if m:
                model_ms = int(m.group(1))
                time.sleep(0.5)  # the model's thread lets go of what it built with
                settled_by = "model built"
                break
            steady = max(samples[-6:]) - min(samples[-6:]) <= max(samples[-1] // 200, 256)
            if len(samples) >= 6 and steady and time.monotonic() - t0 - first >= a.min_settle:
                settled_by = "rss steady"
                break
        status = proc_status(gw.pid)
        cpu_settled = cpu_s(gw.pid)
        still = client.request("GET", headers=headers)
        if still != 200:
            sys.exit(f"the gateway answered {still} after settling; see {a.log}")
    finally:
        client.close()
        if gw.poll() is None:
            gw.send_signal(signal.SIGTERM)
            try:
                gw.wait(20)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait()
    print(f"  round {a.round}  {a.case:<15} first answer {first:6.2f} s ({cpu_first:5.2f} s CPU)  serving"
          f" {status['VmRSS'] / 1024:7.1f} MiB  peak {status['VmHWM'] / 1024:7.1f} MiB  ({settled_by}; load {loadavg[0]})",
          file=sys.stderr)
    print(json.dumps({
        "case": a.case, "round": a.round, "first_answer_s": round(first, 4), "polls": polls,
        "cpu_first_s": round(cpu_first, 2), "cpu_settled_s": round(cpu_settled, 2),
        "rss_first_kib": at_first["VmRSS"], "hwm_first_kib": at_first["VmHWM"],
        "rss_kib": status["VmRSS"], "hwm_kib": status["VmHWM"], "threads": status.get("Threads"),
        "settled_by": settled_by, "settle_s": round(time.monotonic() - t0 - first, 2), "model_ms": model_ms,
        "loadavg_start": [float(x) for x in loadavg],
    }))


def put(a) -> None:
    token = open(a.token_file, encoding="utf-8").read().strip()
    admin, proxy = Client(a.admin), Client(a.proxy)
    run = secrets.token_hex(4)
    rows = []
    for i in range(a.count):
        tenant, key = f"new-{run}-{i}", f"new-key-{run}-{i}-{secrets.token_hex(16)}"
        body = json.dumps({"id": tenant, "api_key_sha256": hashlib.sha256(key.encode()).hexdigest()}).encode()
        auth = {"Authorization": f"Bearer {key}"}
        if proxy.request("GET", headers=auth) == 200:
            sys.exit(f"replica B served {tenant} before it was written")
        t0 = time.monotonic()
        status = admin.request("PUT", f"/admin/tenants/{tenant}", body=body,
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        put_s = time.monotonic() - t0
        if status != 200:
            sys.exit(f"PUT /admin/tenants/{tenant} answered {status}: {admin.body[:300]!r}")
        polls = 0
        while True:
            polls += 1
            if proxy.request("GET", headers=auth) == 200:
                reach = time.monotonic() - t0
                break
            if time.monotonic() - t0 > a.timeout:
                sys.exit(f"replica B did not serve {tenant} within {a.timeout} s of the PUT")
            time.sleep(0.002)
        rows.append({"tenant": tenant, "put_s": round(put_s, 4), "reach_b_s": round(reach, 4), "polls": polls})
        time.sleep(a.gap)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"puts": rows}, f, indent=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gen")
    g.add_argument("n", type=int)
    g.add_argument("file")
    s = sub.add_parser("start")
    for name in ("--url", "--key", "--log", "--case"):
        s.add_argument(name, required=True)
    s.add_argument("--round", type=int, required=True)
    s.add_argument("--tenants", type=int, required=True, help="how many the gateway loads (its model's log line names them)")
    s.add_argument("--settle-max", type=float, default=8.0)
    s.add_argument("--min-settle", type=float, default=3.0, help="VmRSS steady counts only this long after the first answer")
    s.add_argument("--timeout", type=float, default=600.0)
    s.add_argument("command", nargs="+")
    u = sub.add_parser("put")
    for name in ("--admin", "--token-file", "--proxy", "--out"):
        u.add_argument(name, required=True)
    u.add_argument("--count", type=int, default=20)
    u.add_argument("--timeout", type=float, default=10.0)
    u.add_argument("--gap", type=float, default=0.2)
    a = p.parse_args()
    if a.what == "gen":
        gen(a.n, a.file)
    elif a.what == "start":
        start(a)
    else:
        put(a)


if __name__ == "__main__":
    main()
