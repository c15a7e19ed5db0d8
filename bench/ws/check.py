#!/usr/bin/env python3
"""bench/ws/check.py: does a WebSocket server really echo? Run on every peer
of bench/run's ws scenarios before it is measured (as bench/limit/check.py
is run on limit).

    check.py PORT [PATH]

Checks, each on a fresh connection unless said: the 101 and its
Sec-WebSocket-Accept (RFC 6455 4.2.2, computed here); a 32-byte binary
frame echoed byte for byte; a text frame echoed as text; ten 32-byte frames
in one write, ten echoes in order; a 4 KiB frame (16-bit length) written in
three pieces split inside the header and the payload; a 70,000-byte frame
(64-bit length); each echo unmasked, of the opcode and bytes sent (one
frame, or fragments with continuation frames: the load client, wsload,
asks one frame per echo of the sizes it measures).
Exit 0 and "ok" when all pass; else the first failure and exit 1.
"""
import base64
import hashlib
import os
import socket
import sys
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(opcode, payload, mask=b"\x11\x22\x33\x44"):
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Conn:
    def __init__(self, port, path):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        key = base64.b64encode(os.urandom(16))
        self.s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                       b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 101"):
            raise AssertionError(f"upgrade answered {lines[0]!r}")
        want = base64.b64encode(hashlib.sha1(key + GUID).digest())
        fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(b":") for l in lines[1:])}
        if fields.get(b"sec-websocket-accept") != want:
            raise AssertionError(f"Sec-WebSocket-Accept {fields.get(b'sec-websocket-accept')!r}, want {want!r}")

    def more(self):
        got = self.s.recv(1 << 20)
        if not got:
            raise AssertionError("the server closed the connection")
        self.buf += got

    def need(self, n):
        while len(self.buf) < n:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        b0, b1 = self.need(2)
        if b1 & 0x80:
            raise AssertionError("the echo is masked")
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(self.need(2), "big")
        elif n == 127:
            n = int.from_bytes(self.need(8), "big")
        return b0, self.need(n)

    def echo(self, opcode, payload):
        """One message back, whole or fragmented (RFC 6455 5.4 lets a
        server fragment; facil.io sends 70,000 bytes as 12 KiB frames)."""
        b0, got = self.frame()
        first = b0
        while not b0 & 0x80:
            b0, more = self.frame()
            if b0 & 0x0F != 0:
                raise AssertionError(f"frame 0x{b0:02x} inside a fragmented echo")
            got += more
        if first & 0x0F != opcode or len(got) != len(payload):
            raise AssertionError(f"echo 0x{first:02x} of {len(got)} bytes, sent 0x{0x80 | opcode:02x} "
                                 f"of {len(payload)}")
        if got != payload:
            at = next(i for i, (a, b) in enumerate(zip(got, payload)) if a != b)
            raise AssertionError(f"echo of {len(got)} bytes differs from what was sent at byte {at}")


def check(port, path):
    c = Conn(port, path)
    small = bytes((i * 7 + 13) & 0xFF for i in range(32))
    c.s.sendall(frame(2, small))
    c.echo(2, small)
    c.s.sendall(frame(1, b"hello, echo"))
    c.echo(1, b"hello, echo")
    c = Conn(port, path)
    msgs = [bytes([i]) * 32 for i in range(10)]
    c.s.sendall(b"".join(frame(2, m) for m in msgs))
    for m in msgs:
        c.echo(2, m)
    c = Conn(port, path)
    big = os.urandom(4096)
    f = frame(2, big)
    for part in (f[:3], f[3:2000], f[2000:]):
        c.s.sendall(part)
        time.sleep(0.02)
    c.echo(2, big)
    huge = os.urandom(70_000)
    c.s.sendall(frame(2, huge))
    c.echo(2, huge)


def main():
    port = int(sys.argv[1])
    path = sys.argv[2] if len(sys.argv) > 2 else "/echo"
    try:
        check(port, path)
    except (AssertionError, OSError) as e:
        print(f"FAIL: {e}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
