#!/usr/bin/env python3
"""Sends a fixed number of keep-alive GETs: CONNS connections in lock-step
(one request on each, then every response read), WARM rounds, then runs
BEFORE (a shell command), ROUNDS rounds, then AFTER, then closes.
usage: lockstep_client.py HOST PORT CONNS WARM ROUNDS AUTH_HEADER BEFORE AFTER
Every answer must have a status in EXPECT (environment, comma-separated;
default 200)."""
import os, socket, subprocess, sys

host, port, conns, warm, rounds, auth, before, after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8]
req = f"GET /x HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n\r\n".encode()
EXPECT = {code.strip().encode() for code in os.environ.get("EXPECT", "200").split(",")}
socks = []
for _ in range(conns):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    socks.append([s, b""])

def read_response(entry):
    s, buf = entry
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ")[1]
    if status not in EXPECT:
        raise SystemExit(f"status {status!r}: {head!r}")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:
        raise SystemExit(f"no content-length: {head!r}")
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("connection closed in body")
        rest += chunk
    entry[1] = rest[length:]

def run(n):
    for _ in range(n):
        for entry in socks:
            entry[0].sendall(req)
        for entry in socks:
            read_response(entry)

run(warm)
subprocess.run(before, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
run(rounds)
subprocess.run(after, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for entry in socks:
    entry[0].close()
