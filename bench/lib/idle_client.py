#!/usr/bin/env python3
"""The idle10k client: opens N keep-alive connections and leaves them idle.

Each connection sends one GET and reads one whole response; then all N stay
open and silent while bench/run reads the server's RSS. The protocol with the
runner is one JSON line per phase on stdout:

    {"phase": "opened", "ok": .., "failed": .., "elapsed_s": .., "why": {..}}
        printed when every connection was answered (or failed, or the
        deadline passed); the runner then reads the server's RSS.
    {"phase": "checked", "still_open": .., "closed_by_server": ..}
        printed after the runner writes a line to stdin: how many of the
        answered connections the server closed while they were idle. A server
        that drops idle connections shows up here as errors, not as a hang.

Then every socket is closed with SO_LINGER 0 (a reset, so no TIME_WAIT pile
up across runs) and the client exits. Every wait is bounded by --deadline.

Usage: idle_client.py --port PORT [--conns 10000] [--deadline 60]
"""
import argparse
import errno
import json
import resource
import selectors
import socket
import struct
import sys
import time

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
# Connects and responses in flight at once: keeps the accept backlog and the
# SYN queue far from overflowing, which would add 1 s SYN retries.
IN_FLIGHT_MAX = 256
LINGER_RESET = struct.pack("ii", 1, 0)


class Conn:
    __slots__ = ("sock", "buf", "state")

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.state = "connecting"


def response_complete(buf):
    """None while incomplete; else (status, ok) for the first response."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = buf[:head_end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ")
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    length = 0
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if len(buf) < head_end + 4 + length:
        return None
    return status


def raise_nofile(n_needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n_needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(n_needed, hard), max(n_needed, hard)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def open_all(port, n_conns, deadline):
    sel = selectors.DefaultSelector()
    answered, why = [], {}
    n_started = 0
    in_flight = 0

    def fail(conn, reason):
        nonlocal in_flight
        why[reason] = why.get(reason, 0) + 1
        sel.unregister(conn.sock)
        conn.sock.close()
        in_flight -= 1

    while (n_started < n_conns or in_flight > 0) and time.monotonic() < deadline:
        while n_started < n_conns and in_flight < IN_FLIGHT_MAX:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            n_started += 1
            rc = s.connect_ex(("127.0.0.1", port))
            if rc not in (0, errno.EINPROGRESS):
                why[errno.errorcode.get(rc, str(rc))] = why.get(errno.errorcode.get(rc, str(rc)), 0) + 1
                s.close()
                continue
            conn = Conn(s)
            sel.register(s, selectors.EVENT_WRITE, conn)
            in_flight += 1
        for key, _ in sel.select(timeout=0.5):
            conn = key.data
            if conn.state == "connecting":
                err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(conn, "connect:" + errno.errorcode.get(err, str(err)))
                    continue
                try:
                    conn.sock.send(REQUEST)  # 36 bytes always fit an empty buffer
                except OSError as e:
                    fail(conn, "send:" + errno.errorcode.get(e.errno, str(e.errno)))
                    continue
                conn.state = "reading"
                sel.modify(conn.sock, selectors.EVENT_READ, conn)
            else:
                try:
                    chunk = conn.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError as e:
                    fail(conn, "recv:" + errno.errorcode.get(e.errno, str(e.errno)))
                    continue
                if not chunk:
                    fail(conn, "closed before response")
                    continue
                conn.buf += chunk
                status = response_complete(conn.buf)
                if status is None:
                    continue
                if status != 200:
                    fail(conn, f"status {status}")
                    continue
                sel.unregister(conn.sock)
                in_flight -= 1
                conn.buf = b""
                answered.append(conn.sock)
    # whatever is still in flight at the deadline failed
    for key in list(sel.get_map().values()):
        why["deadline"] = why.get("deadline", 0) + 1
        key.fileobj.close()
    n_never = n_conns - n_started
    if n_never:
        why["not started (deadline)"] = n_never
    sel.close()
    return answered, why


def check_open(socks):
    """Counts the sockets the server closed (EOF or error readable now)."""
    closed = 0
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    for key, _ in sel.select(timeout=0):
        try:
            data = key.fileobj.recv(1)
        except BlockingIOError:
            continue
        except OSError:
            closed += 1
            continue
        if not data:
            closed += 1
        # unexpected bytes on an idle connection are not a close
    sel.close()
    return closed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="seconds for opening all and for waiting on the runner")
    args = ap.parse_args()
    raise_nofile(args.conns + 64)

    start = time.monotonic()
    socks, why = open_all(args.port, args.conns, start + args.deadline)
    emit({"phase": "opened", "ok": len(socks), "failed": args.conns - len(socks),
          "elapsed_s": round(time.monotonic() - start, 3), "why": why})

    # wait (bounded) for the runner to have read the RSS
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    sel.select(timeout=args.deadline)
    sel.close()

    closed = check_open(socks)
    emit({"phase": "checked", "still_open": len(socks) - closed, "closed_by_server": closed})
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        except OSError:
            pass
        s.close()


if __name__ == "__main__":
    main()
