#!/usr/bin/env python3
"""Idle keep-alive connections for bench/idle.sh (Python 3.11, standard library only).

    idle_client.py --port PORT --conns N [--host 127.0.0.1] [--path /x]
                   [--header 'Authorization: Bearer KEY']... [--concurrency 100]
                   [--timeout 120]

Opens N HTTP/1.1 keep-alive connections to HOST:PORT, at most CONCURRENCY
of them connecting or waiting for their answer at once (so neither the
server's listen backlog nor the proxy's upstream pool sees a burst of N),
sends ONE `GET PATH` on each and reads its whole response (Content-Length
framed, or chunked), checking the status is 200. Each connection that got
its answer is then left open and idle: nothing more is sent on it, and the
client no longer polls it.

Once every connection has been tried it prints one line on stdout:

    holding OK FAILED SECONDS

(OK connections held open, FAILED ones that did not get a 200, and how long
opening them took) and waits until stdin is closed or gives a line. It then
counts the held connections the server closed or wrote to meanwhile (each
readable at once: an end of file, a reset or unexpected bytes), prints

    closed_by_server K

closes every connection and exits: 0 when FAILED and K are both 0, 1
otherwise. Diagnostics go to stderr.
"""

import argparse
import errno
import selectors
import socket
import sys
import time

CONNECTING, SENDING, READING = 1, 2, 3


class Conn:
    __slots__ = ("sock", "state", "out", "buf", "head_end", "need")

    def __init__(self, sock, request):
        self.sock = sock
        self.state = CONNECTING
        self.out = request
        self.buf = bytearray()
        self.head_end = -1  # index just past the head's blank line, once seen
        self.need = None  # total bytes of head + body when Content-Length framed


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, required=True)
    p.add_argument("--path", default="/x")
    p.add_argument("--header", action="append", default=[], help="an extra request field, 'Name: value'")
    p.add_argument("--concurrency", type=int, default=100, help="connections connecting or awaiting their answer at once")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds without any progress before giving up on the ones still open")
    return p.parse_args()


def main():
    args = parse_args()
    if args.conns < 1 or args.concurrency < 1:
        sys.exit("idle_client.py: --conns and --concurrency must be at least 1")
    lines = [f"GET {args.path} HTTP/1.1", f"Host: {args.host}:{args.port}"] + args.header
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    sel = selectors.DefaultSelector()
    held = []
    failed = 0
    reasons = {}
    started = 0
    active = 0
    begin = time.monotonic()
    last_progress = begin

    def fail(conn, why):
        nonlocal failed, active
        failed += 1
        reasons[why] = reasons.get(why, 0) + 1
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        active -= 1

    def finish(conn):
        """The response is complete: check it, then hold the connection."""
        nonlocal active, failed
        head = bytes(conn.buf[: conn.head_end]).decode("latin-1")
        status_line = head.split("\r\n", 1)[0]
        parts = status_line.split(" ", 2)
        sel.unregister(conn.sock)
        active -= 1
        if len(parts) >= 2 and parts[1] == "200":
            held.append(conn.sock)
        else:
            failed += 1
            why = f"status {status_line!r}"
            reasons[why] = reasons.get(why, 0) + 1
            conn.sock.close()
        conn.buf = None

    def framing(conn):
        """After the head is in: set conn.need (Content-Length) or -1 for chunked; False if neither."""
        head = bytes(conn.buf[: conn.head_end - 4]).decode("latin-1").split("\r\n")[1:]
        for line in head:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                conn.need = conn.head_end + int(value.strip())
                return True
            if name == "transfer-encoding" and "chunked" in value.lower():
                conn.need = -1
                return True
        return False

    def complete(conn):
        if conn.head_end < 0:
            i = conn.buf.find(b"\r\n\r\n")
            if i < 0:
                return None
            conn.head_end = i + 4
            if not framing(conn):
                return "no Content-Length nor chunked framing"
        if conn.need == -1:
            return True if conn.buf.endswith(b"0\r\n\r\n") else None
        if len(conn.buf) > conn.need:
            return "more bytes than the response's Content-Length"
        return True if len(conn.buf) == conn.need else None

    while len(held) + failed < args.conns:
        while active < args.concurrency and started < args.conns:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(s, request)
            started += 1
            active += 1
            rc = s.connect_ex((args.host, args.port))
            if rc not in (0, errno.EINPROGRESS):
                fail(conn, f"connect: {errno.errorcode.get(rc, rc)}")
                continue
            sel.register(s, selectors.EVENT_WRITE, conn)
        events = sel.select(timeout=1.0)
        now = time.monotonic()
        if events:
            last_progress = now
        elif now - last_progress > args.timeout:
            for key in list(sel.get_map().values()):
                fail(key.data, f"no progress for {args.timeout:.0f} s")
            break
        for key, _ in events:
            conn = key.data
            s = conn.sock
            if conn.state == CONNECTING:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(conn, f"connect: {errno.errorcode.get(err, err)}")
                    continue
                conn.state = SENDING
            if conn.state == SENDING:
                try:
                    sent = s.send(conn.out)
                except BlockingIOError:
                    continue
                except OSError as e:
                    fail(conn, f"send: {e.strerror}")
                    continue
                conn.out = conn.out[sent:]
                if not conn.out:
                    conn.state = READING
                    sel.modify(s, selectors.EVENT_READ, conn)
                continue
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError as e:
                fail(conn, f"recv: {e.strerror}")
                continue
            if not data:
                fail(conn, "closed before the whole response")
                continue
            conn.buf += data
            done = complete(conn)
            if done is True:
                finish(conn)
            elif done is not None:
                fail(conn, done)

    took = time.monotonic() - begin
    for why, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"idle_client.py: {count} connection(s) failed: {why}", file=sys.stderr)
    print(f"holding {len(held)} {failed} {took:.1f}", flush=True)

    sys.stdin.readline()  # a line, or end of file

    # A held connection that is readable now was closed (or written to) by the server.
    check = selectors.DefaultSelector()
    for s in held:
        check.register(s, selectors.EVENT_READ)
    closed = len(check.select(timeout=0))
    check.close()
    print(f"closed_by_server {closed}", flush=True)
    for s in held:
        s.close()
    sys.exit(0 if failed == 0 and closed == 0 else 1)


if __name__ == "__main__":
    main()
