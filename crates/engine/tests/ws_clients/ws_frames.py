"""What the WebSocket test clients share (h2_client.py, h3_client.py): the
report lines, the bounded wait, and RFC 6455 §5 client frames (a client
masks; a server does not). Imported from the scripts' own directory.
"""

import os
import struct
import sys

WAIT = 10.0


def fail(why):
    print(f"FAIL: {why}", flush=True)
    sys.exit(1)


def ok(check):
    print(f"ok: {check}", flush=True)


def ws_frame(op, payload, fin=True):
    """A masked client frame."""
    head = bytes([(0x80 if fin else 0) | op])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    key = os.urandom(4)
    repeated = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big") if n else b""
    return head + key + masked


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason
