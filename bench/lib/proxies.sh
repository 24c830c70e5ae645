# Shared by bench/gateway.sh, bench/paired.sh, bench/instructions.sh and bench/tls.sh (sourced, not run): finding tools, building, the scratch directory and its processes, the bench tenant, CPU pinning, free ports, processes' CPU time, the nginx and gateway configurations they compare, and reading wrk's latencies.
# shellcheck shell=bash disable=SC2034 # the variables set here are read by the scripts that source it
#
# The functions use the caller's `die`.

# nginx lives in /usr/sbin, which is not on every user's PATH.
find_tool() {
    command -v "$1" 2>/dev/null || { [[ -x /usr/sbin/$1 ]] && echo "/usr/sbin/$1"; } || true
}

# Latency as wrk prints it (12.34us, 1.20ms, 1.00s) in microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) f = 1; else if (v ~ /ms$/) f = 1000; else if (v ~ /s$/) f = 1000000; else f = -1;
        sub(/[a-z]+$/, "", v);
        if (f < 0) exit 1;
        printf "%.2f\n", v * f }'
}

# build_cli: builds the release binary and sets BIN to it (ROOT is the
# repository); with BENCH_BIN set, uses that binary instead and
# builds nothing (to measure an older build against the same proxies).
build_cli() {
    if [[ -n ${BENCH_BIN:-} ]]; then
        BIN=$BENCH_BIN
        [[ -x $BIN ]] || die "BENCH_BIN=$BIN is not an executable"
        say "using BENCH_BIN=$BIN (nothing built)"
        return
    fi
    say "building: cargo build --release -p shuffle-shard-cli"
    cargo build --release -p shuffle-shard-cli >&2
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/shuffle-shard"
    [[ -x $BIN ]] || die "$BIN was not built"
}

# scratch_dir NAME: sets WORK to a fresh temporary directory and PIDS to an
# empty list; on exit every process in PIDS is stopped, and WORK removed
# when the script succeeded (kept, with its logs, when it failed).
scratch_dir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/ss-$1.XXXXXX")
    PIDS=()
    trap stop_all EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
stop_all() {
    local status=$? pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if ((status == 0)); then
        rm -rf "$WORK"
    else
        printf '%s\n' "failed; logs and configuration kept in $WORK" >&2
    fi
}

# bench_tenant: the bench's one tenant, "bench", with a fresh API key as
# long as every bench script's (54 bytes: one SHA-256 block), written to
# WORK/tenants.toml beside a fresh WORK/placement.key; sets API_KEY and AUTH.
bench_tenant() {
    API_KEY="bench-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    AUTH="Authorization: Bearer $API_KEY"
    head -c 32 /dev/urandom >"$WORK/placement.key"
    printf '[[tenants]]\nid = "bench"\napi_key_sha256 = "%s"\n' \
        "$(printf %s "$API_KEY" | sha256sum | cut -d' ' -f1)" >"$WORK/tenants.toml"
}

# ready NAME URL SECONDS [CURL_ARGS...]: waits up to SECONDS for a 2xx
# answer from URL.
ready() {
    local name=$1 url=$2 seconds=$3
    shift 3
    for _ in $(seq $((seconds * 10))); do
        curl -fsS --max-time 2 -o /dev/null "$@" "$url" 2>/dev/null && return
        sleep 0.1
    done
    die "$name did not answer $url within $seconds s (a port taken by another process? run again); logs in $WORK"
}

# allowed_cpus: the CPUs this process may run on, one per line.
allowed_cpus() {
    local range lo hi
    local list
    list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
    IFS=, read -ra ranges <<<"$list"
    for range in "${ranges[@]}"; do
        lo=${range%-*}
        hi=${range#*-}
        seq "$lo" "$hi"
    done
}

# pin_cpus: sets PROXY_CPU, BACKEND_CPU and WRK_CPU: the proxy on the first
# allowed CPU, the backend on the second, the load generator on a third
# when there is one, else beside the backend.
pin_cpus() {
    local -a cpus
    mapfile -t cpus < <(allowed_cpus)
    case ${#cpus[@]} in
        1) PROXY_CPU=${cpus[0]} BACKEND_CPU=${cpus[0]} WRK_CPU=${cpus[0]} ;;
        2) PROXY_CPU=${cpus[0]} BACKEND_CPU=${cpus[1]} WRK_CPU=${cpus[1]} ;;
        *) PROXY_CPU=${cpus[0]} BACKEND_CPU=${cpus[1]} WRK_CPU=${cpus[2]} ;;
    esac
    CPU_COUNT=${#cpus[@]}
}

# Ports are picked at random outside the kernel's ephemeral range, so no
# outgoing connection (wrk's, curl's, the gateway's own to its backends) nor
# one of their TIME_WAIT entries can hold them, and with no listener on them.
# A server can still find its port taken between the pick and its bind (a
# 100,000-tenant gateway once did): gateway.sh's start_server then picks new ports and
# starts it again.
read -r EPHEMERAL_LO EPHEMERAL_HI 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range ||
    { EPHEMERAL_LO=32768 EPHEMERAL_HI=60999; }
USED_PORTS=" "
# pick_port VARIABLE: sets VARIABLE to a free port. Not run in a subshell, so
# that USED_PORTS remembers every port handed out.
pick_port() {
    local port try
    for try in $(seq 600); do
        port=$((10000 + ((RANDOM << 15) | RANDOM) % 55536))
        # Outside the ephemeral range, unless 500 picks found nothing there.
        ((try > 500 || port < EPHEMERAL_LO || port > EPHEMERAL_HI)) || continue
        [[ $USED_PORTS == *" $port "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            USED_PORTS+="$port "
            printf -v "$1" '%s' "$port"
            return
        fi
    done
    die "no free port found on 127.0.0.1"
}

# cpu_ticks PID...: CPU time (clock ticks, `getconf CLK_TCK` a second) used so
# far by the processes, all threads: the total with CPU_FIELD=all (the
# default), kernel time only with CPU_FIELD=system. A process gone counts 0.
# shellcheck disable=SC2016 # $14 and $15 are awk's fields (utime, stime)
cpu_ticks() {
    local total=0 pid expression='$14 + $15'
    [[ ${CPU_FIELD:-all} == system ]] && expression='$15'
    for pid in "$@"; do
        total=$((total + $(awk "{ print $expression }" /proc/"$pid"/stat 2>/dev/null || echo 0)))
    done
    echo "$total"
}

# What the gateway forwards about the client (FORWARDING):
# - plain (the default): no x-forwarded-for and no x-forwarded-host, like
#   the plain nginx and HAProxy configurations this bench compares it with,
#   which add neither; the gateway still adds the two headers issue 4
#   requires, x-shuffle-tenant and x-shuffle-shard;
# - default: the gateway's defaults, x-forwarded-for appended and
#   x-forwarded-host, what a configuration without [forwarding] sends.
FORWARDING=${FORWARDING:-plain}
case $FORWARDING in
    plain | default) ;;
    *) die "FORWARDING=$FORWARDING: write plain (no x-forwarded-* headers, like the plain nginx and HAProxy configurations) or default (the gateway's defaults)" ;;
esac

# gateway_toml FILE LISTEN_PORT ADMIN_PORT ID=PORT...: a gateway
# configuration (rendezvous, k = 2, the bench's key and tenants file, the
# forwarding FORWARDING says) over the shards given.
gateway_toml() {
    local file=$1 listen=$2 admin=$3 shard
    shift 3
    {
        cat <<EOF
listen = "127.0.0.1:$listen"
tenants_file = "tenants.toml"

[placement]
algorithm = "rendezvous"
k = 2
key_file = "placement.key"
key_version = "bench"

[admin]
listen = "127.0.0.1:$admin"
EOF
        if [[ $FORWARDING == plain ]]; then
            printf '\n[forwarding]\nx_forwarded_for = "off"\nx_forwarded_host = false\n'
        fi
        cat <<EOF

[[cells]]
name = "default"
shards = [
EOF
        for shard in "$@"; do
            printf '  { id = "%s", url = "http://127.0.0.1:%s" },\n' "${shard%%=*}" "${shard#*=}"
        done
        echo "]"
    } >"$file"
}

# gateway_dir NAME PORT ADMIN_PORT FORWARDING: WORK/NAME, a directory to
# run a gateway from: the bench's key and tenants file (from bench_tenant)
# and a gateway.toml over shards s0 and s1, both the backend at BACKEND_PORT.
gateway_dir() {
    local name=$1 port=$2 admin=$3
    mkdir -p "$WORK/$name"
    cp "$WORK/placement.key" "$WORK/tenants.toml" "$WORK/$name/"
    FORWARDING=$4 gateway_toml "$WORK/$name/gateway.toml" "$port" "$admin" s0="$BACKEND_PORT" s1="$BACKEND_PORT"
}

# keepalive_requests is raised on both sides so nginx, like the gateway,
# never closes a busy keep-alive connection mid-run.
#
# nginx_conf FILE DIR LISTEN_PORT BACKEND_PORT [gateway-headers] [tls=FILE]:
# nginx as a plain reverse proxy with one worker, listening on LISTEN_PORT,
# its pid, logs and temporary files under DIR. With gateway-headers it also
# sends the backend the two fields the gateway must add (x-shuffle-tenant:
# bench, x-shuffle-shard: s0, values as long as the gateway's) and drops the
# client's Authorization, as the gateway does: the backend then gets the
# same request fields from nginx as from a gateway with FORWARDING=plain.
# With tls=FILE it terminates TLS on LISTEN_PORT (`listen ... ssl`) with the
# ssl_* directives in FILE, written into the server block (bench/tls.sh).
nginx_conf() {
    local file=$1 dir=$2 listen=$3 backend=$4 headers="" ssl="" tls="" option
    for option in "${@:5}"; do
        case $option in
            gateway-headers)
                headers='
            proxy_set_header Authorization "";
            proxy_set_header X-Shuffle-Tenant bench;
            proxy_set_header X-Shuffle-Shard s0;'
                ;;
            tls=*)
                ssl=" ssl"
                tls=$(sed 's/^/        /' "${option#tls=}")
                tls=$'\n'$tls
                ;;
            *) die "nginx_conf: unknown option '$option'" ;;
        esac
    done
    mkdir -p "$dir"
    cat >"$file" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;

events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    keepalive_requests 1000000;

    upstream backend {
        server 127.0.0.1:$backend;
        keepalive 64;
        keepalive_requests 1000000;
    }

    server {
        listen 127.0.0.1:$listen$ssl;$tls
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";$headers
        }
    }
}
EOF
}
