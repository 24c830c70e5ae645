#!/usr/bin/env bash
# TLS benchmark (issue 18): the gateway's TLS listener against nginx terminating TLS with the same certificate, protocols, cipher suites and groups, in front of the same backend, in one run: requests/s over TLS keep-alive at 32 connections, p50 at 1 connection, and full TLS handshakes per second (a new connection per request, TLS 1.3 and 1.2), each as a paired ratio gateway/nginx with a bootstrap interval.
#
# Usage (from anywhere; paths are relative to the repository):
#   bench/tls.sh                               # or: bench/run.sh tls
#   DURATION=5 ROUNDS=10 bench/tls.sh          # longer and more rounds: narrower intervals
#   DURATION=1 ROUNDS=2 WARMUP=1 bench/tls.sh  # a smoke run (its numbers mean nothing)
#
# Writes bench/results/tls.md and bench/results/tls.json and prints the
# table. Loopback only; every process it starts is stopped on exit. See
# bench/README.md ("tls.sh") for what is measured and why.
#
# Why the set-up is what it is:
#
# - The set-up is bench/gateway.sh's (bench/lib/proxies.sh): one
#   `shuffle-shard backend --workers 1`, nginx with `worker_processes 1`
#   and an upstream keep-alive pool, `serve --workers 1` with k = 2 over two
#   shard ids on that backend, the tenant authenticated by API key
#   (`Authorization: Bearer`, SHA-256 stored), FORWARDING=plain; the proxy
#   pinned to the first CPU, the backend to the second, the load generators
#   to a third when there is one, else beside the backend. Only the client
#   side is TLS: both proxies speak plain HTTP/1.1 to the backend.
# - One certificate for both: ECDSA P-256 (ecdsa-with-SHA256), self-signed
#   for localhost and 127.0.0.1, made with openssl in the scratch directory
#   at run time, so nothing secret is ever committed, and signing costs the
#   same curve on both sides.
# - The same TLS parameters on both. The gateway builds its rustls
#   ServerConfig in crates/gateway/src/config/tls.rs: rustls 0.23 with the
#   ring provider's defaults, TLS 1.3 and 1.2 only; cipher suites in this
#   order: TLS13_AES_256_GCM_SHA384, TLS13_AES_128_GCM_SHA256,
#   TLS13_CHACHA20_POLY1305_SHA256, then for TLS 1.2 ECDHE-ECDSA and
#   ECDHE-RSA each with AES-256-GCM, AES-128-GCM and CHACHA20-POLY1305 (the
#   RSA ones unusable with an ECDSA certificate); key exchange groups X25519,
#   secp256r1, secp384r1; the client's order wins (ignore_client_order is
#   false) for both the suite and the group; ALPN http/1.1; a 4,096-session
#   cache and stateless tickets (two per TLS 1.3 handshake); no early data.
#   nginx is made to match (tls_directives below): `ssl_protocols TLSv1.2
#   TLSv1.3`; `ssl_ciphers` lists the six TLS 1.2 suites in rustls's order
#   (OpenSSL names); `ssl_ciphers` cannot set TLS 1.3 suites, so
#   `ssl_conf_command Ciphersuites` (nginx 1.19.4+) sets the three in
#   rustls's order; `ssl_ecdh_curve X25519:prime256v1:secp384r1`;
#   `ssl_prefer_server_ciphers off` (the client's order, as rustls);
#   `ssl_session_cache shared:SSL:1m` (about 4,000 sessions) and
#   `ssl_session_tickets on` (OpenSSL sends two TLS 1.3 tickets, as rustls
#   does); nginx without `http2` offers ALPN http/1.1 only. Before measuring,
#   the script asks each with `openssl s_client` (TLS 1.3, then TLS 1.2)
#   what it negotiates (version, suite, group, signature, ALPN) and stops
#   if the two differ.
# - Keep-alive load: wrk over https (OpenSSL on the client side, its
#   defaults: TLS 1.3), `wrk -t1 -c32` for requests/s and `wrk -t1 -c1` for
#   p50, every response checked 2xx.
# - Handshakes: `openssl s_time -new`, a standard tool already needed for
#   the certificate. Each s_time process loops: connect, full handshake
#   (-new: never a resumed session; s_time prints `r` for a resumed one,
#   and the script stops if it sees one), one HTTP/1.0 request, read the
#   answer until the server closes. HANDSHAKE_CLIENTS of them run at once,
#   for TLS 1.3 and for TLS 1.2. s_time can send no header, so the
#   credential is written into the -www path (s_time sends `GET <path>
#   HTTP/1.0`; the path carries a CRLF, the Authorization line and a last
#   `X-Bench:` line that takes the trailing ` HTTP/1.0`); both targets get
#   the very same bytes, and the bytes read must average the size of one
#   answer checked 2xx. s_time's own rate is computed from whole seconds
#   and its own CPU time, so the rate here is counted connections over the
#   wall time the processes ran (they start together just after a second
#   boundary, so they all stop together). Not used: wrk keeps connections
#   open and reconnects only when the server closes them; h2load
#   (nghttp2-client) reuses each client's connection for all its requests,
#   so a new connection per request would take `-c N -n N` bursts of N
#   simultaneous connections, not a steady loop; a Rust client in bench/
#   would be one more thing to build and trust.
# - Rounds and pairing as in bench/gateway.sh: each round runs both targets
#   back to back for each measurement, starting with the other target every
#   other round; the paired ratio is the median of the per-round ratios
#   gateway/nginx, with a bootstrap 95 % interval (bench/lib/paired_ci.py),
#   so a machine whose speed drifts affects both alike.
set -Eeuo pipefail
trap 'echo "bench/tls.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

DURATION=${DURATION:-3}               # seconds per wrk run and per s_time run (s_time runs up to a second longer)
ROUNDS=${ROUNDS:-6}                   # rounds; each runs both targets once per measurement
WARMUP=${WARMUP:-2}                   # seconds of wrk warm-up per target (plus one second of s_time)
CONNS=${CONNS:-32}                    # keep-alive connections for the requests/s run
HANDSHAKE_CLIENTS=${HANDSHAKE_CLIENTS:-4}    # s_time processes at once
HANDSHAKE_VERSIONS=${HANDSHAKE_VERSIONS:-"1.3 1.2"} # TLS versions of the handshake runs

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS="$ROOT/bench/results"

say() { printf '%s\n' "$*" >&2; }
die() {
    say "bench/tls.sh: error: $*"
    exit 1
}

for value in DURATION ROUNDS WARMUP CONNS HANDSHAKE_CLIENTS; do
    [[ ${!value} =~ ^[1-9][0-9]*$ ]] || die "$value must be a positive whole number, not '${!value}'"
done
read -ra VERSIONS <<<"$HANDSHAKE_VERSIONS"
for version in "${VERSIONS[@]}"; do
    [[ $version == 1.3 || $version == 1.2 ]] || die "HANDSHAKE_VERSIONS lists TLS versions 1.3 and 1.2, not '$version'"
done

# --- tools ------------------------------------------------------------------------

# shellcheck source=bench/lib/apt.sh
source "$ROOT/bench/lib/apt.sh"
# shellcheck source=bench/lib/proxies.sh
source "$ROOT/bench/lib/proxies.sh"
missing=()
[[ -n $(find_tool nginx) ]] || missing+=(nginx)
[[ -n $(find_tool wrk) ]] || missing+=(wrk)
[[ -n $(find_tool openssl) ]] || missing+=(openssl)
[[ -n $(find_tool taskset) ]] || missing+=(util-linux)
[[ -n $(find_tool curl) ]] || missing+=(curl)
[[ -n $(find_tool python3) ]] || missing+=(python3)
apt_install "${missing[@]}"
NGINX=$(find_tool nginx)
WRK=$(find_tool wrk)
OPENSSL=$(find_tool openssl)

# The run time (runtime_s) counts from here, after the installs, like the
# other suites.
START=$EPOCHREALTIME
build_cli
pin_cpus
PINNING="proxy (nginx or gateway) on CPU $PROXY_CPU, backend on CPU $BACKEND_CPU, wrk and s_time on CPU $WRK_CPU"
if ((CPU_COUNT == 1)); then
    PINNING="$PINNING (1 CPU available: everything shares it)"
elif ((CPU_COUNT == 2)); then
    PINNING="$PINNING (2 CPUs available: the load generators share the backend's)"
fi
mapfile -t WATCHED < <(printf '%s\n' "$PROXY_CPU" "$BACKEND_CPU" "$WRK_CPU" | awk '!seen[$0]++')

scratch_dir tls
pick_port BACKEND_PORT
pick_port NGINX_PORT
pick_port GATEWAY_PORT
pick_port GATEWAY_TLS_PORT
pick_port GATEWAY_ADMIN_PORT
bench_tenant

# --- the certificate and the TLS configurations ---------------------------------------

mkdir -p "$WORK/tls"
CERT="$WORK/tls/cert.pem"
KEY="$WORK/tls/key.pem"
"$OPENSSL" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$KEY" -out "$CERT" >"$WORK/tls/req.log" 2>&1 ||
    die "openssl could not make the certificate: $(cat "$WORK/tls/req.log")"

# nginx's TLS settings, matched to the gateway's rustls configuration (see
# the header).
tls_directives() {
    cat <<EOF
ssl_certificate $CERT;
ssl_certificate_key $KEY;
ssl_protocols TLSv1.2 TLSv1.3;
ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305;
ssl_conf_command Ciphersuites TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256;
ssl_ecdh_curve X25519:prime256v1:secp384r1;
ssl_prefer_server_ciphers off;
ssl_session_cache shared:SSL:1m;
ssl_session_tickets on;
EOF
}
tls_directives >"$WORK/nginx-tls.conf"

# --- start the backend, nginx and the gateway ------------------------------------------

taskset -c "$BACKEND_CPU" "$BIN" backend --listen "127.0.0.1:$BACKEND_PORT" --id s0 --workers 1 \
    >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
ready backend "http://127.0.0.1:$BACKEND_PORT/x" 10

nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$NGINX_PORT" "$BACKEND_PORT" "tls=$WORK/nginx-tls.conf"
"$NGINX" -t -p "$WORK/nginx" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" >"$WORK/nginx-test.log" 2>&1 ||
    die "nginx rejects the generated configuration: $(cat "$WORK/nginx-test.log")"
taskset -c "$PROXY_CPU" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" \
    >"$WORK/nginx.log" 2>&1 &
PIDS+=($!)
NGINX_PID=$!
ready nginx "https://127.0.0.1:$NGINX_PORT/x" 10 --cacert "$CERT"

# The gateway keeps bench/gateway.sh's plaintext listener (idle here) and
# adds the TLS one.
gateway_dir gateway "$GATEWAY_PORT" "$GATEWAY_ADMIN_PORT" "$FORWARDING"
cat >>"$WORK/gateway/gateway.toml" <<EOF

[tls]
listen = "127.0.0.1:$GATEWAY_TLS_PORT"
cert_file = "$CERT"
key_file = "$KEY"
EOF
(cd "$WORK/gateway" && exec taskset -c "$PROXY_CPU" "$BIN" serve --workers 1 --config gateway.toml) \
    >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
GATEWAY_PID=$!
ready gateway "https://127.0.0.1:$GATEWAY_TLS_PORT/x" 10 --cacert "$CERT" -H "$AUTH"
curl -fsS --max-time 5 --cacert "$CERT" -H "$AUTH" "https://127.0.0.1:$GATEWAY_TLS_PORT/x" | grep -q '"tenant":"bench"' ||
    die "the gateway answered over TLS, but not with the backend's body for tenant bench; logs in $WORK"

# One worker each, as in bench/gateway.sh: the gateway with --workers 1 runs
# a single-threaded event loop and has no tokio-rt-worker threads.
GATEWAY_WORKERS=$(cat /proc/"$GATEWAY_PID"/task/*/comm 2>/dev/null | grep -c '^tokio-rt-worker' || true)
[[ $GATEWAY_WORKERS == 0 ]] || die "the gateway runs $GATEWAY_WORKERS multi-threaded tokio workers; --workers 1 should give none"
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | wc -l)
[[ $NGINX_WORKERS == 1 ]] || die "nginx runs $NGINX_WORKERS worker processes, not 1"

declare -A PORT=([nginx]=$NGINX_PORT [gateway]=$GATEWAY_TLS_PORT)
declare -A PROXY_PIDS=([nginx]="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')" [gateway]="$GATEWAY_PID")
TARGETS=(nginx gateway)

# --- the same TLS on both: what each negotiates --------------------------------------

# negotiated PORT VERSION: "TLSv1.3, TLS_AES_256_GCM_SHA384, X25519, ECDSA with
# SHA256, ALPN http/1.1", as openssl s_client reports it, the certificate
# verified against ours.
negotiated() {
    local out flag=-tls1_${2#1.}
    out=$("$OPENSSL" s_client -connect "127.0.0.1:$1" -servername localhost -alpn http/1.1 "$flag" \
        -CAfile "$CERT" </dev/null 2>&1) || die "openssl s_client $flag to port $1 failed: $out"
    grep -q 'Verify return code: 0 (ok)' <<<"$out" || die "port $1 did not serve our certificate: $(grep 'Verify return' <<<"$out")"
    awk '
        /^New, / { sub(/,$/, "", $2); version = $2; cipher = $NF }
        /^Server Temp Key:/ { sub(/^Server Temp Key: /, ""); sub(/,.*/, ""); group = $0 }
        /^Peer signature type:/ { signature = $NF }
        /^Peer signing digest:/ { digest = $NF }
        /^ALPN protocol:/ { alpn = $NF }
        END { printf "%s, %s, %s, %s with %s, ALPN %s\n", version, cipher, group, signature, digest, (alpn == "" ? "none" : alpn) }
    ' <<<"$out"
}
declare -A NEGOTIATED
for version in 1.3 1.2; do
    for target in "${TARGETS[@]}"; do
        NEGOTIATED[$target,$version]=$(negotiated "${PORT[$target]}" "$version")
    done
    [[ ${NEGOTIATED[nginx,$version]} == "${NEGOTIATED[gateway,$version]}" ]] ||
        die "TLS $version: nginx negotiates '${NEGOTIATED[nginx,$version]}' but the gateway '${NEGOTIATED[gateway,$version]}'; the comparison would not be like for like"
    [[ ${NEGOTIATED[nginx,$version]} == TLSv$version,* ]] ||
        die "asked for TLS $version, got '${NEGOTIATED[nginx,$version]}'"
    say "TLS $version: both negotiate ${NEGOTIATED[nginx,$version]}"
done

# --- the handshake runs' request ----------------------------------------------------------

# s_time sends "GET <path> HTTP/1.0" and a blank line; the path carries the
# credential (see the header).
STIME_PATH=$'/x HTTP/1.0\r\n'"$AUTH"$'\r\nX-Bench: s_time'
# One answer to the same bytes, from each target: a 2xx, and its size, which
# every answer in the handshake runs must average to.
declare -A ANSWER_BYTES
for target in "${TARGETS[@]}"; do
    printf 'GET %s HTTP/1.0\r\n\r\n' "$STIME_PATH" |
        "$OPENSSL" s_client -quiet -connect "127.0.0.1:${PORT[$target]}" >"$WORK/answer-$target.txt" 2>"$WORK/answer-$target.err" ||
        die "openssl s_client could not send the handshake runs' request to $target: $(cat "$WORK/answer-$target.err")"
    head -1 "$WORK/answer-$target.txt" | grep -qE '^HTTP/1\.[01] 2[0-9][0-9] ' ||
        die "$target answered the handshake runs' request with: $(head -1 "$WORK/answer-$target.txt")"
    ANSWER_BYTES[$target]=$(wc -c <"$WORK/answer-$target.txt")
done

# --- measuring ---------------------------------------------------------------------------

RUNS="$WORK/runs.jsonl"
: >"$RUNS"
CLK_TCK=$(getconf CLK_TCK)

# run_wrk TARGET CONNS SECONDS: one keep-alive run over TLS, every answer
# checked 2xx. Sets RPS, P50_US, P99_US and REQUESTS.
run_wrk() {
    local target=$1 conns=$2 seconds=$3 out
    out=$(taskset -c "$WRK_CPU" "$WRK" -t1 "-c$conns" "-d${seconds}s" --latency -H "$AUTH" \
        "https://127.0.0.1:${PORT[$target]}/x" 2>&1) || die "wrk failed against $target: $out"
    if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
        die "$target at $conns connections: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | xargs); wrk said:
$out"
    fi
    RPS=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    REQUESTS=$(awk '/requests in/ { print $1 }' <<<"$out")
    P50_US=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
    P99_US=$(to_us "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
    [[ -n $RPS && -n $REQUESTS && -n $P50_US && -n $P99_US ]] || die "cannot read wrk's output: $out"
    ((REQUESTS > 0)) || die "$target at $conns connections: wrk completed no request"
}

# keepalive TARGET ROUND CONNS: one wrk run, recorded with the proxy's CPU
# time over it.
keepalive() {
    local target=$1 round=$2 conns=$3 before before_sys after after_sys
    # shellcheck disable=SC2086 # the pid list is split on purpose
    before=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    before_sys=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    run_wrk "$target" "$conns" "$DURATION"
    # shellcheck disable=SC2086
    after=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    after_sys=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    printf '{"round": %d, "measure": "keepalive_%d", "target": "%s", "requests_per_second": %s, "p50_us": %s, "p99_us": %s, "requests": %d, "proxy_cpu_ticks": %d, "proxy_kernel_ticks": %d}\n' \
        "$round" "$conns" "$target" "$RPS" "$P50_US" "$P99_US" "$REQUESTS" $((after - before)) $((after_sys - before_sys)) >>"$RUNS"
    say "  round $round  $(printf '%-8s' "$target") keep-alive, $(printf '%3d' "$conns") conns: $(printf '%9.0f' "$RPS") req/s  p50 $(printf '%8.1f' "$P50_US") us"
}

# handshakes TARGET ROUND VERSION SECONDS [record]: HANDSHAKE_CLIENTS
# `openssl s_time -new` processes at once, each a new connection, a full
# handshake and one request in a loop for SECONDS (up to a second more).
# Checks that no session was resumed, that s_time saw no error and that the
# answers average the size of the checked 2xx answer; records the rate with
# the proxy's CPU time over the run unless it is a warm-up.
handshakes() {
    local target=$1 round=$2 version=$3 seconds=$4 mode=${5:-} i pid failed=0 start end
    local before before_sys after after_sys client_before client_after connections=0 bytes=0 resumed=0 file n b
    local -a pids=()
    # Start just after a second boundary: s_time stops at a whole second, so
    # processes started within one second all stop together.
    sleep "$(awk -v t="$EPOCHREALTIME" 'BEGIN { printf "%.3f", 1.02 - (t - int(t)) }')"
    # shellcheck disable=SC2086 # the pid list is split on purpose
    before=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    before_sys=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    # The s_time processes' CPU: this shell's reaped children's time
    # (cutime + cstime), which they join when waited for.
    client_before=$(awk '{ print $16 + $17 }' /proc/$$/stat)
    start=$EPOCHREALTIME
    for i in $(seq "$HANDSHAKE_CLIENTS"); do
        taskset -c "$WRK_CPU" "$OPENSSL" s_time -connect "127.0.0.1:${PORT[$target]}" -new "-tls1_${version#1.}" \
            -time "$seconds" -www "$STIME_PATH" >"$WORK/s_time-$i.txt" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
    end=$EPOCHREALTIME
    client_after=$(awk '{ print $16 + $17 }' /proc/$$/stat)
    # shellcheck disable=SC2086
    after=$(cpu_ticks ${PROXY_PIDS[$target]})
    # shellcheck disable=SC2086
    after_sys=$(CPU_FIELD=system cpu_ticks ${PROXY_PIDS[$target]})
    ((failed == 0)) || die "openssl s_time failed against $target (TLS $version): $(tail -3 "$WORK/s_time-1.txt" | xargs)"
    for i in $(seq "$HANDSHAKE_CLIENTS"); do
        file="$WORK/s_time-$i.txt"
        # "1096 connections in 0.79s; 1387.34 connections/user sec, bytes read 162208"
        read -r n b < <(awk '/connections in .*bytes read/ { print $1, $NF; exit }' "$file")
        [[ -n ${n:-} && -n ${b:-} ]] || die "cannot read s_time's output: $(cat "$file")"
        connections=$((connections + n))
        bytes=$((bytes + b))
        # One character a connection: r for a resumed session.
        resumed=$((resumed + $(awk '/^[*rt3]+$/' "$file" | tr -cd r | wc -c)))
    done
    ((connections > 0)) || die "$target (TLS $version): s_time completed no connection"
    ((resumed == 0)) || die "$target (TLS $version): $resumed of $connections handshakes resumed a session; s_time -new should make full ones"
    awk -v b="$bytes" -v n="$connections" -v a="${ANSWER_BYTES[$target]}" 'BEGIN { exit !(b / n > a - 0.5 && b / n < a + 0.5) }' ||
        die "$target (TLS $version): s_time read $bytes bytes over $connections connections, not ${ANSWER_BYTES[$target]} each (the checked 2xx answer's size): some answers were not that 2xx"
    [[ $mode == record ]] || return 0
    HS_RATE=$(awk -v n="$connections" -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", n / (b - a) }')
    printf '{"round": %d, "measure": "handshake_tls%s", "target": "%s", "handshakes_per_second": %s, "connections": %d, "seconds": %s, "proxy_cpu_ticks": %d, "proxy_kernel_ticks": %d, "client_cpu_ticks": %d}\n' \
        "$round" "${version/./}" "$target" "$HS_RATE" "$connections" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')" \
        $((after - before)) $((after_sys - before_sys)) $((client_after - client_before)) >>"$RUNS"
    say "  round $round  $(printf '%-8s' "$target") TLS $version full handshakes ($HANDSHAKE_CLIENTS clients): $(printf '%7.0f' "$HS_RATE")/s"
}

# The targets in the order round N runs them: nginx first in odd rounds,
# the gateway first in even ones.
round_order() {
    local round=$1 i count=${#TARGETS[@]}
    for ((i = 0; i < count; i++)); do
        printf '%s\n' "${TARGETS[$(((i + round - 1) % count))]}"
    done
}

# "busy total" jiffies of one CPU from /proc/stat.
cpu_jiffies() {
    awk -v cpu="cpu$1" '$1 == cpu { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# What else is running: the watched CPUs' busy share over 2 idle seconds.
declare -a idle_busy=() idle_total=()
for cpu in "${WATCHED[@]}"; do
    read -r b t < <(cpu_jiffies "$cpu")
    idle_busy+=("$b")
    idle_total+=("$t")
done
sleep 2
BACKGROUND=""
for i in "${!WATCHED[@]}"; do
    read -r b t < <(cpu_jiffies "${WATCHED[$i]}")
    BACKGROUND+="$(awk -v db=$((b - idle_busy[i])) -v dt=$((t - idle_total[i])) \
        'BEGIN { printf "%.0f", (dt > 0 ? 100 * db / dt : 0) }')% / "
done
BACKGROUND=${BACKGROUND% / }

say "background load before the runs (busy $(printf 'CPU %s/' "${WATCHED[@]}" | sed 's|/$||')): $BACKGROUND"
say "pinning: $PINNING"
say "warm-up: ${WARMUP}s of wrk at $CONNS connections and 1 s of s_time per target"
for target in "${TARGETS[@]}"; do
    run_wrk "$target" "$CONNS" "$WARMUP"
    handshakes "$target" 0 1.3 1
done
say "measuring: $ROUNDS rounds; each runs both targets for ${DURATION}s at $CONNS keep-alive connections, at 1, then full handshakes over TLS ${VERSIONS[*]}"
for round in $(seq "$ROUNDS"); do
    for conns in "$CONNS" 1; do
        for target in $(round_order "$round"); do
            keepalive "$target" "$round" "$conns"
        done
    done
    for version in "${VERSIONS[@]}"; do
        for target in $(round_order "$round"); do
            handshakes "$target" "$round" "$version" "$DURATION" record
        done
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the report ----------------------------------------------------------------------------

GIT_REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    GIT_REV="$GIT_REV (with uncommitted changes)"
fi
# The versions that did the TLS: nginx's OpenSSL (the library it runs with),
# rustls and ring as Cargo.lock pins them.
lock_version() { awk -v name="$1" '$0 == "name = \"" name "\"" { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock"; }
NGINX_OPENSSL=$("$NGINX" -V 2>&1 | sed -n 's/.*running with OpenSSL \([^ )]*\).*/\1/p')
[[ -n $NGINX_OPENSSL ]] || NGINX_OPENSSL=$("$NGINX" -V 2>&1 | sed -n 's/^built with OpenSSL \([^ ]*\).*/\1/p')
COMMAND="DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP CONNS=$CONNS HANDSHAKE_CLIENTS=$HANDSHAKE_CLIENTS$([[ $HANDSHAKE_VERSIONS == "1.3 1.2" ]] || echo " HANDSHAKE_VERSIONS=\"$HANDSHAKE_VERSIONS\"")$([[ $FORWARDING == plain ]] || echo " FORWARDING=$FORWARDING") bench/tls.sh"

mkdir -p "$RESULTS"
meta=(
    "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "git_rev=$GIT_REV"
    "command=$COMMAND"
    "runtime_s=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    "clk_tck=$CLK_TCK"
    "machine.nproc=$(nproc)"
    "machine.cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    "machine.kernel=$(uname -r)"
    "machine.memory_gib=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
    "machine.loadavg_before=$LOAD_BEFORE"
    "machine.loadavg_after=$LOAD_AFTER"
    "machine.background_busy=$BACKGROUND"
    "versions.rustc=$(rustc --version 2>/dev/null || echo unknown)"
    "versions.nginx=$("$NGINX" -v 2>&1 | sed 's|.*nginx/||')"
    "versions.nginx_openssl=${NGINX_OPENSSL:-unknown}"
    "versions.rustls=$(lock_version rustls)"
    "versions.ring=$(lock_version ring)"
    "versions.wrk=$("$WRK" --version 2>&1 | head -1 | awk '{ print $2 }' || true)"
    "versions.openssl_client=$("$OPENSSL" version | awk '{ print $2 }')"
    "settings.duration_s=$DURATION"
    "settings.rounds=$ROUNDS"
    "settings.warmup_s=$WARMUP"
    "settings.connections=$CONNS"
    "settings.handshake_clients=$HANDSHAKE_CLIENTS"
    "settings.handshake_versions=${VERSIONS[*]}"
    "settings.forwarding=$FORWARDING"
    "settings.pinning=$PINNING"
    "settings.proxy_cpu=$PROXY_CPU"
    "settings.backend_cpu=$BACKEND_CPU"
    "settings.load_cpu=$WRK_CPU"
    "certificate=$("$OPENSSL" x509 -in "$CERT" -noout -text | awk '/NIST CURVE:/ { curve = $NF } /Signature Algorithm:/ { sig = $NF } END { printf "ECDSA %s, signed %s, self-signed for localhost and 127.0.0.1", curve, sig }')"
    "nginx_tls_directives=$(tls_directives | sed "s|$WORK/tls/||" | paste -sd' ' -)"
    "answer_bytes.nginx=${ANSWER_BYTES[nginx]}"
    "answer_bytes.gateway=${ANSWER_BYTES[gateway]}"
)
for version in 1.3 1.2; do
    meta+=("negotiated.tls${version/./}.nginx=${NEGOTIATED[nginx,$version]}" "negotiated.tls${version/./}.gateway=${NEGOTIATED[gateway,$version]}")
done
python3 -B "$ROOT/bench/lib/tls_report.py" --runs "$RUNS" --md "$RESULTS/tls.md" --json "$RESULTS/tls.json" -- "${meta[@]}"

echo
cat "$RESULTS/tls.md"
echo
echo "Wrote bench/results/tls.md and bench/results/tls.json."
