#!/usr/bin/env bash
# What a client that stops reading leaves in the kernel once the gateway
# gives up on it (limits.client_write_timeout_ms): N clients (1,000 by
# default) each ask for a 64 MiB answer and never read a byte. After the
# timeout, the gateway's sockets, their Send-Q and the kernel's TCP memory
# are counted. A gateway that closes gracefully leaves each socket
# orphaned with its send buffer queued (FIN-WAIT-1, outside any process
# and outside limits.max_connections); one that resets them leaves none.
#
#   bench/reset-timedout.sh [GATEWAY_BINARY ...]    (default: target/release/shuffle-shard)
#
# Runs in its own network namespace (root; `unshare -n`) with the loopback
# MTU at 1500, as a client on a real network would have it: on the usual
# 64 KiB loopback MTU every socket's first send buffer is megabytes, and
# 1,000 of them would press the whole machine's TCP memory. Needs python3.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
clients=${CLIENTS:-1000}
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=("$here/target/release/shuffle-shard")

if [ -z "${RESET_TIMEDOUT_INSIDE:-}" ]; then
  exec env RESET_TIMEDOUT_INSIDE=1 CLIENTS="$clients" unshare -n "$0" "${binaries[@]}"
fi

ip link set lo up
ip link set lo mtu 1500
ulimit -n 20000
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

# A shard that answers every request with 64 MiB, as fast as it is taken.
cat > shard.py <<'PY'
import http.server, socketserver
CHUNK = b"x" * 65536
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", str(1024 * CHUNK.__len__()))
        self.end_headers()
        try:
            for _ in range(1024):
                self.wfile.write(CHUNK)
        except OSError:
            pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 4096
S(("127.0.0.1", 9100), H).serve_forever()
PY

# N clients that send a GET and read nothing; they hold their sockets
# until told to stop.
cat > clients.py <<'PY'
import socket, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /big HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer acme-secret\r\n\r\n")
    socks.append(s)
print("open", flush=True)
sys.stdin.readline()
PY

head -c 32 /dev/urandom > placement.key
printf '[[tenants]]\nid = "acme"\napi_key_sha256 = "%s"\n' \
  "$(printf %s acme-secret | sha256sum | cut -d' ' -f1)" > tenants.toml
cat > gateway.toml <<'TOML'
listen = "127.0.0.1:8080"
tenants_file = "tenants.toml"

[placement]
algorithm = "rendezvous"
k = 1
key_file = "placement.key"
key_version = "v1"

[health]
path = "/"

[limits]
client_write_timeout_ms = 5000

[routing]
per_try_timeout_ms = 30000
request_timeout_ms = 60000

[[cells]]
name = "default"
shards = [{ id = "s0", url = "http://127.0.0.1:9100" }]
TOML

python3 shard.py &
sleep 1

# The gateway's client-side sockets (source port 8080, orphans included):
# how many, the bytes queued to send on them (Send-Q), and the kernel
# memory they hold (skmem: receive, transmit and queued buffers).
gateway_sockets() {
  ss -tmnH state connected '( sport = :8080 )' | awk '
    /skmem/ { match($0, /r[0-9]+/); r += substr($0, RSTART + 1, RLENGTH - 1)
              match($0, /,t[0-9]+/); t += substr($0, RSTART + 2, RLENGTH - 2)
              match($0, /,w[0-9]+/); w += substr($0, RSTART + 2, RLENGTH - 2); next }
    { n++; q += $3; if ($1 != "ESTAB") other++ }
    END { printf "%d sockets (%d not established), Send-Q %.1f MiB, kernel memory %.1f MiB", n, other, q / 1048576, (r + t + w) / 1048576 }'
}

echo "clients: $clients, each asking for 64 MiB and reading nothing; limits.client_write_timeout_ms = 5000"
for gateway in "${binaries[@]}"; do
  "$gateway" serve --config gateway.toml >gateway.log 2>&1 &
  gw=$!
  for _ in $(seq 50); do ss -tlnH '( sport = :8080 )' | grep -q . && break; sleep 0.1; done
  coproc CLIENTS { python3 clients.py "$clients" 8080; }
  read -r _ <&"${CLIENTS[0]}"
  sleep 1
  stalled=$(gateway_sockets)
  # Well past the timeout, for the last client to be given up on too.
  sleep 15
  after=$(gateway_sockets)
  echo "$gateway"
  echo "  while the clients are stalled:  $stalled"
  echo "  15 s later, past the timeout:   $after"
  echo >&"${CLIENTS[1]}"
  wait "$CLIENTS_PID" 2>/dev/null || true
  kill "$gw"; wait "$gw" 2>/dev/null || true
  sleep 1
done
