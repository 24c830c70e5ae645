#!/usr/bin/env bash
# Instructions per proxied GET under callgrind, binaries side by side, with a
# fixed request count: repeatable to about ±15 instructions (bench/README.md).
# usage: bench/fixed-instructions.sh REPEATS CONNS ROUNDS LABEL=BINARY...
#   e.g. bench/fixed-instructions.sh 2 32 200 old=/tmp/old-shuffle-shard new=target/release/shuffle-shard
#   each repeat runs every binary once, in order; the client sends CONNS x ROUNDS
#   keep-alive GETs in lock-step after WARM rounds of warm-up; HEALTH_MS sets
#   [health] interval_ms (600000 keeps health checks out of the count).
#   LIMITED=1 gives the tenant requests_per_second = 1 and burst = 1, so
#   nearly every request is refused with 429: what a refusal costs.
#   K sets the tenant's k (2; the cell has K shard ids, all on the one
#   backend): k = 4 is what poison_spread = "contained" costs, k = 2 not.
#   RATE=local gives the tenant a rate it never reaches (10^6 a second),
#   kept in the replica's own bucket; RATE=redis://HOST:PORT keeps that
#   rate in Redis (limits.tenant.store, store_timeout_ms = 1000 because
#   callgrind is slow): the difference is what a global limit costs the
#   gateway per request. After each run the store's fallbacks are checked
#   to be 0 (every request was judged by Redis).
#   FLEET=redis://HOST:PORT sets [fleet] store (timeout_ms = 1000) for the
#   labels whose name contains "fleet" only, so one run pairs a gateway
#   with [fleet] and one without: the difference is what the fleet costs a
#   request that touches no suspect and no mark (nothing, by design).
#   TRACING=http://HOST:PORT sets [tracing] otlp_endpoint (sample_ratio
#   TRACING_RATIO, 0.01 when unset) for the labels whose name contains
#   "trac" only: what tracing costs a request, sampled or not (the export
#   task's work is in the count too; a collector that is not there costs
#   a refused connection per batch).
#   PROTO=h2 sends HTTP/2 with prior knowledge through h2load instead: one
#   connection with CONNS concurrent streams, CONNS x ROUNDS requests counted.
#   Prints "label repeat instructions/request instructions-less-software-SHA-256";
#   callgrind dumps are kept in OUT (default: a temporary directory).
set -euo pipefail
REPEATS=$1 CONNS=$2 ROUNDS=$3
shift 3
OUT=${OUT:-$(mktemp -d)}
HERE=$(cd "$(dirname "$0")" && pwd)
WARM=${WARM:-100}
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
# The shard behind every gateway: the first binary given, unless BACKEND_BIN says.
first=$1
BACKEND_BIN=${BACKEND_BIN:-${first#*=}}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BPORT=$(port)
store_fallbacks() { curl -fsS "http://127.0.0.1:$APORT/metrics" | awk '/^shuffle_tenant_limit_store_fallbacks_total/ { t += $2 } END { print t+0 }'; }
API_KEY="bench-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
AUTH="Authorization: Bearer $API_KEY"
head -c 32 /dev/urandom >"$WORK/placement.key"
printf '[[tenants]]\nid = "bench"\napi_key_sha256 = "%s"\n' "$(printf %s "$API_KEY" | sha256sum | cut -d' ' -f1)" >"$WORK/tenants.toml"
if [[ -n ${RATE:-} ]]; then
  printf 'requests_per_second = 1000000\nburst = 1000000\n' >>"$WORK/tenants.toml"
fi
if [[ -n ${LIMITED:-} ]]; then
  printf 'requests_per_second = 1\nburst = 1\n' >>"$WORK/tenants.toml"
  export EXPECT=429,200
fi
taskset -c 1 "$BACKEND_BIN" backend --listen "127.0.0.1:$BPORT" --id s0 --workers 1 >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do curl -fsS -o /dev/null "http://127.0.0.1:$BPORT/x" 2>/dev/null && break; sleep 0.1; done
for rep in $(seq "$REPEATS"); do
  for spec in "$@"; do
    label=${spec%%=*} bin=${spec#*=}
    GPORT=$(port) APORT=$(port)
    d="$WORK/$label"; rm -rf "$d"; mkdir -p "$d"; cp "$WORK/placement.key" "$WORK/tenants.toml" "$d/"
    {
      printf 'listen = "127.0.0.1:%s"\ntenants_file = "tenants.toml"\n\n[placement]\nalgorithm = "rendezvous"\nk = '"${K:-2}"'\nkey_file = "placement.key"\nkey_version = "bench"\n\n[admin]\nlisten = "127.0.0.1:%s"\n' "$GPORT" "$APORT"
      [[ -n ${RATE:-} ]] && printf 'metrics_without_token = true\n'
      printf '\n[forwarding]\nx_forwarded_for = "off"\nx_forwarded_host = false\n'
      [[ -n ${HEALTH_MS:-} ]] && printf '\n[health]\ninterval_ms = %s\n' "$HEALTH_MS"
      [[ ${RATE:-local} == redis://* ]] && printf '\n[limits.tenant]\nstore = "%s"\nstore_timeout_ms = 1000\n' "$RATE"
      [[ -n ${FLEET:-} && $label == *fleet* ]] && printf '\n[fleet]\nstore = "%s"\ntimeout_ms = 1000\n' "$FLEET"
      [[ -n ${TRACING:-} && $label == *trac* ]] && printf '\n[tracing]\notlp_endpoint = "%s"\nsample_ratio = %s\n' "$TRACING" "${TRACING_RATIO:-0.01}"
      printf '\n[[cells]]\nname = "default"\nshards = [\n'
      for i in $(seq 0 $((${K:-2} - 1))); do printf '  { id = "s%s", url = "http://127.0.0.1:%s" },\n' "$i" "$BPORT"; done
      printf ']\n'
    } >"$d/gateway.toml"
    prof="$OUT/$label.r$rep.c$CONNS.callgrind"
    rm -f "$prof"*
    (cd "$d" && exec taskset -c 0 valgrind --tool=callgrind "--callgrind-out-file=$prof" "$bin" serve --workers 1 --config gateway.toml) >"$d/log" 2>&1 &
    gpid=$!
    PIDS+=("$gpid")
    ok=
    # Ready when it answers the tenant (429 counts: LIMITED's bucket may be empty already).
    for _ in $(seq 600); do curl -sS --max-time 2 -w '%{http_code}' -o /dev/null -H "$AUTH" "http://127.0.0.1:$GPORT/x" 2>/dev/null | grep -qE '^(200|429)$' && { ok=1; break; }; sleep 0.1; done
    [[ -n $ok ]] || { echo "gateway $label did not start" >&2; cat "$d/log" >&2; exit 1; }
    # The readiness probe found the store still connecting (judged by the
    # local bucket); the counted requests must not.
    if [[ ${RATE:-local} == redis://* ]]; then sleep 2; fallbacks_before=$(store_fallbacks); fi
    # The connections open and warm up before the counters are zeroed, and
    # close after the dump: only requests are counted.
    if [[ ${PROTO:-h1} == h2 ]]; then
      # HTTP/2 with prior knowledge: one connection with CONNS streams at once,
      # warmed up, then CONNS x ROUNDS requests on fresh connections counted
      # (a connection's set-up is spread over thousands of requests).
      taskset -c 1 h2load -t1 -c1 -m"$CONNS" -n $((CONNS * WARM)) -H "$AUTH" "http://127.0.0.1:$GPORT/x" >"$d/h2load.warm" 2>&1
      callgrind_control -z "$gpid" >/dev/null
      taskset -c 1 h2load -t1 -c1 -m"$CONNS" -n $((CONNS * ROUNDS)) -H "$AUTH" "http://127.0.0.1:$GPORT/x" >"$d/h2load.out" 2>&1
      grep -q "$((CONNS * ROUNDS)) succeeded" "$d/h2load.out" || { echo "h2load against $label failed:" >&2; cat "$d/h2load.out" >&2; exit 1; }
      callgrind_control -d "$gpid" >/dev/null
    else
      taskset -c 1 python3 "$HERE/lib/lockstep_client.py" 127.0.0.1 "$GPORT" "$CONNS" "$WARM" "$ROUNDS" "$AUTH" \
          "callgrind_control -z $gpid" "callgrind_control -d $gpid"
    fi
    dump=$(ls -t "$prof".* | head -1)
    total=$(awk '/^totals:/ { print $2 }' "$dump")
    n=$((CONNS * ROUNDS))
    sha=$(callgrind_annotate --inclusive=no --threshold=100 --auto=no "$dump" 2>/dev/null | awk '/sha2::sha256::soft/ { gsub(",", "", $1); t += $1 } END { print t+0 }')
    awk -v l="$label" -v r="$rep" -v t="$total" -v n="$n" -v s="$sha" 'BEGIN { printf "%s %d %.1f %.1f\n", l, r, t / n, (t - s) / n }'
    if [[ ${RATE:-local} == redis://* ]]; then
      fallbacks=$(store_fallbacks)
      [[ $fallbacks == "$fallbacks_before" ]] || { echo "$label: $((fallbacks - fallbacks_before)) requests fell back to the local bucket (Redis too slow?)" >&2; exit 1; }
    fi
    mv "$dump" "$prof.dump"
    kill -TERM "$gpid"; wait "$gpid" 2>/dev/null || true
    rm -f "$prof" "$prof".[0-9]*
  done
done
