#!/usr/bin/env python3
"""bench/attacks.py BIN [BIN...]: what hostile clients make a server hold.

Starts `BIN serve ROOT` (one worker, MALLOC_ARENA_MAX=2 so that glibc's
freed arenas do not hide what is given back) on 127.0.0.1, runs each attack
against it, and prints the server's RSS growth at the attack's peak
(sampled every 20 ms from /proc/PID/status) and how long until every
attacking request had its answer (or its connection was closed). The
attacks, each bounded in time and sent only to 127.0.0.1:

- h1-unread: 200 HTTP/1.1 connections each POST /index.html with
  Content-Length: 1048576 and send all but its last byte.
- h2c-unread: 4 h2c connections x 128 streams, each POST /index.html with
  content-length 1048576 and its first 64 KiB of DATA.
- pipeline: 50 connections each pipeline 20,000 GETs and never read.

Run with two builds to compare them (an old one first). Example:
  bench/attacks.py /tmp/peregrine-base target/release/peregrine
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(binary, root):
    port = free_port()
    env = dict(os.environ, MALLOC_ARENA_MAX="2", PEREGRINE_ALLOW_ROOT="1")
    argv = [binary, "serve", root, "--bind", f"127.0.0.1:{port}", "--workers", "1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit(f"{binary} did not start")


class Peak:
    """Samples a process's RSS every 20 ms until stopped."""

    def __init__(self, pid):
        self.pid, self.base, self.peak, self.run = pid, rss_kib(pid), 0, True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while self.run:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.02)

    def stop(self):
        self.run = False
        self.thread.join()
        return max(0, self.peak - self.base)


def answered(sock, deadline):
    """True once the socket has bytes or was closed, before `deadline`."""
    sock.settimeout(max(0.01, deadline - time.time()))
    try:
        sock.recv(1, socket.MSG_PEEK)
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def h1_unread(port):
    conns = []
    body = b"x" * (MIB - 1)
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n")
        conns.append(s)
    t0 = time.time()
    for s in conns:
        s.setblocking(False)
        try:
            s.send(body)
        except OSError:
            pass
    deadline = t0 + 10
    done = sum(answered(s, deadline) for s in conns)
    took = time.time() - t0
    for s in conns:
        s.close()
    return done, len(conns), took


def h2_frame(kind, flags, stream, payload):
    n = len(payload)
    return bytes([n >> 16, (n >> 8) & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload


def h2c_unread(port):
    head = b""
    for index, value in [(2, b"POST"), (6, b"http"), (4, b"/index.html"), (1, b"x")]:
        head += bytes([index, len(value)]) + value
    head += b"\x0f\x0d\x07" + b"1048576"  # content-length, as a literal
    conns = []
    t0 = time.time()
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b""))
        batch = b"".join(h2_frame(1, 4, 1 + 2 * i, head) for i in range(128))
        s.sendall(batch)
        s.setblocking(False)
        data = b"".join(h2_frame(0, 0, 1 + 2 * i, b"\0" * 16384) for i in range(128))
        for _ in range(4):
            view = memoryview(data)
            for _ in range(500):
                try:
                    view = view[s.send(view):]
                except BlockingIOError:
                    time.sleep(0.002)
                except OSError:
                    break
                if not view:
                    break
        conns.append(s)
    # Answers counted: HEADERS frames (each attacking stream's status).
    got = 0
    deadline = time.time() + 10
    bufs = [b""] * len(conns)
    while time.time() < deadline and got < 4 * 128:
        for i, s in enumerate(conns):
            try:
                chunk = s.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            bufs[i] += chunk
            while len(bufs[i]) >= 9:
                n = int.from_bytes(bufs[i][:3], "big")
                if len(bufs[i]) < 9 + n:
                    break
                if bufs[i][3] == 1:
                    got += 1
                bufs[i] = bufs[i][9 + n:]
        time.sleep(0.005)
    took = time.time() - t0
    for s in conns:
        s.close()
    return got, 4 * 128, took


def pipeline(port):
    reqs = b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n" * 20000
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    at = [0] * len(conns)
    for s in conns:
        s.setblocking(False)
    t0 = time.time()
    for _ in range(100):
        for i, s in enumerate(conns):
            try:
                at[i] += s.send(reqs[at[i]:])
            except (BlockingIOError, OSError):
                pass
        time.sleep(0.01)
    took = time.time() - t0
    for s in conns:
        s.close()
    return sum(1 for a in at if a > 0), len(conns), took


def main():
    binaries = sys.argv[1:]
    if not binaries:
        raise SystemExit(__doc__)
    root = tempfile.mkdtemp(prefix="peregrine-attacks-")
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<!doctype html><title>hello</title>\n")
    print(f"{'binary':40} {'attack':12} {'RSS growth':>11} {'answered':>10} {'seconds':>8}")
    for binary in binaries:
        for name, attack in [("h1-unread", h1_unread), ("h2c-unread", h2c_unread), ("pipeline", pipeline)]:
            proc, port = start(binary, root)
            peak = Peak(proc.pid)
            done, total, took = attack(port)
            time.sleep(0.3)
            grown = peak.stop()
            proc.kill()
            proc.wait()
            print(f"{binary:40} {name:12} {grown / 1024:9.1f} MB {done:>5}/{total:<4} {took:8.2f}")


if __name__ == "__main__":
    main()
