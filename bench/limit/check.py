#!/usr/bin/env python3
"""Checks that the limit server answers what the benchmarks send it.

The limit server counts "\\r\\n\\r\\n" instead of parsing, so this checks
the cases where counting could go wrong: 32 pipelined GETs in one write,
terminators split across writes at every offset, and a client that closes
mid-stream (the server must keep serving others). The runner calls it after
building; it can also be run by hand:

    python3 bench/limit/check.py bench/build/limit
"""
import os
import signal
import socket
import subprocess
import sys
import time

RESPONSE_TAIL = b"Content-Length: 13\r\n\r\nHello, World!"
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
DEADLINE_S = 5.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def read_responses(sock, n_expected):
    """Reads until n_expected responses arrived; returns how many did."""
    buf = b""
    deadline = time.monotonic() + DEADLINE_S
    while buf.count(RESPONSE_TAIL) < n_expected and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return buf.count(RESPONSE_TAIL), buf


def check_pipelined(port, depth):
    with connect(port) as s:
        s.sendall(REQUEST * depth)
        n, buf = read_responses(s, depth)
        assert n == depth, f"pipelined {depth}: got {n} responses"
        assert buf.startswith(b"HTTP/1.1 200 OK\r\n"), buf[:40]
        # nothing extra arrives
        s.settimeout(0.2)
        try:
            extra = s.recv(65536)
        except socket.timeout:
            extra = b""
        assert extra == b"", f"pipelined {depth}: {len(extra)} unexpected bytes"


def check_split_everywhere(port):
    """Every split point of two requests, sent as two writes."""
    two = REQUEST * 2
    with connect(port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for cut in range(1, len(two)):
            s.sendall(two[:cut])
            time.sleep(0.001)  # lets the server read the first part on its own
            s.sendall(two[cut:])
            n, _ = read_responses(s, 2)
            assert n == 2, f"split at {cut}: got {n} responses"


def check_byte_by_byte(port):
    with connect(port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in REQUEST:
            s.sendall(bytes([b]))
        n, _ = read_responses(s, 1)
        assert n == 1, f"byte by byte: got {n} responses"


def check_backpressure(port, n=200000):
    """More responses than the socket buffers hold: the server must keep the
    rest, wait for EPOLLOUT and lose nothing."""
    import threading
    with connect(port) as s:
        sender = threading.Thread(target=s.sendall, args=(REQUEST * n,), daemon=True)
        sender.start()
        time.sleep(0.2)  # let the buffers fill before reading
        count, tail = 0, b""
        deadline = time.monotonic() + DEADLINE_S
        while count < n and time.monotonic() < deadline:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data = tail + chunk
            count += data.count(RESPONSE_TAIL)
            tail = data[-(len(RESPONSE_TAIL) - 1):]  # a split tail, never a whole one
        sender.join(DEADLINE_S)
        assert count == n, f"backpressure: got {count} of {n} responses"


def check_close_mid_stream(port):
    # A client that pipelines a lot, reads nothing and resets the connection.
    s = connect(port)
    s.sendall(REQUEST * 4096)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    # One that sends half a request and closes politely.
    s = connect(port)
    s.sendall(REQUEST[:10])
    s.close()
    # One that reads part of many responses, then closes.
    s = connect(port)
    s.sendall(REQUEST * 8000)
    s.recv(1000)
    s.close()
    time.sleep(0.1)
    check_pipelined(port, 3)  # still serving


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "build", "limit")
    port = free_port()
    proc = subprocess.Popen([binary, str(port)], start_new_session=True)
    try:
        check_pipelined(port, 1)
        check_pipelined(port, 32)
        check_split_everywhere(port)
        check_byte_by_byte(port)
        check_backpressure(port)
        check_close_mid_stream(port)
        assert proc.poll() is None, f"limit server exited with {proc.returncode}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    print("limit server check: pipelined 1 and 32, splits, byte-by-byte, backpressure, mid-stream closes: ok")


if __name__ == "__main__":
    main()
