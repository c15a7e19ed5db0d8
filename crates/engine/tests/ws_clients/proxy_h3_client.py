"""WebSockets over HTTP/3 (RFC 9220) through Peregrine's reverse proxy, with
aioquic (which we did not write). The proxy turns each extended CONNECT into
an HTTP/1.1 upgrade to its upstream: the engine's echo under /ws/ (which
closes with 1000 when it gets the text "bye"), and under /raw/ an upstream
that answers /raw/page with a 200 page and /raw/wrong with a 101 whose
Sec-WebSocket-Accept is wrong. / is a static page.

Usage: python proxy_h3_client.py HOST:PORT echoes|refusals|ends|stall BYTES

One connection per run: echoes through one tunnel and a second beside it;
refusals (the 502s, and the connection going on); ends (the client's FIN,
its reset, the upstream's close); stall (crates/engine/tests/proxy_ws.rs:
a tunnel to /flood not read until a line comes on stdin, then BYTES read).

Run by crates/cli/tests/proxy_ws_h3.rs (and, stall, by
crates/engine/tests/proxy_ws.rs). Prints "ok: CHECK" for each check
passed and exits 0 only if all did; on the first failure it prints "FAIL:
why" and exits 1. The QUIC, HTTP/3 and WebSocket framing are
h3_client.py's.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from aioquic.h3.connection import Setting  # noqa: E402
from h3_client import Client  # noqa: E402
from ws_frames import close_payload, fail, ok, ws_frame  # noqa: E402


def refused(c, path, want):
    """An extended CONNECT the upstream does not switch for: `want`, and the
    stream ends (not reset)."""
    sid = c.open_ws(path)
    c.until(lambda: sid in c.ended or sid in c.reset, f"the end of CONNECT {path}")
    if c.status(sid) != want or sid not in c.ended:
        fail(f"CONNECT {path}: {c.responses.get(sid)}, ended {sid in c.ended}, reset {c.reset.get(sid)}")


def get(c, path):
    sid = c.request(
        [(b":method", b"GET"), (b":scheme", b"https"), (b":path", path.encode()), (b":authority", c.addr.encode())],
        end=True,
    )
    c.until(lambda: sid in c.ended or sid in c.reset, f"the answer to GET {path}")
    return c.status(sid), c.data.pop(sid, b"")


def open_echo(c, extra=()):
    sid = c.open_ws("/ws/echo", extra)
    if c.status(sid) != "200" or sid in c.ended:
        fail(f"CONNECT /ws/echo: {c.responses.get(sid)}, stream ended {sid in c.ended}, reset {c.reset.get(sid)}")
    return sid


def echoes(c):
    """Echoes of every kind through one tunnel, and a second beside it."""
    c.until(lambda: c.h3.received_settings is not None, "the server's SETTINGS")
    if c.h3.received_settings.get(Setting.ENABLE_CONNECT_PROTOCOL) != 1:
        fail(f"the proxy's SETTINGS do not enable extended CONNECT (RFC 9220 §3): {c.h3.received_settings}")
    ok("settings enable connect protocol")

    ws = open_echo(c, [(b"sec-websocket-protocol", b"x, chat")])
    ok("connect")
    answer = c.responses[ws]
    if answer.get(b"sec-websocket-protocol") != b"chat":
        fail(f"the 200 does not carry the upstream's subprotocol: {answer}")
    for name in (b"sec-websocket-accept", b"upgrade", b"connection"):
        if name in answer:
            fail(f"the 200 carries {name} (RFC 9220 §3, RFC 9114 §4.2): {answer}")
    ok("subprotocol")

    c.echo(ws, 0x1, "hello through the proxy over h3 \u2713 \U0001F985".encode(), "text")
    c.echo(ws, 0x2, bytes(range(256)) * 4, "binary")
    c.echo(ws, 0x1, b"x" * 70000, "text over 64 KiB")
    # Larger than the stream's receive window (256 KiB) and than the 64 KiB
    # the proxy holds each way.
    big = bytes((i * 31 + (i >> 10)) & 0xFF for i in range((1 << 20) - 1024))
    c.echo(ws, 0x2, big, "1 MiB less 1 KiB binary")

    other = open_echo(c)
    c.send(other, ws_frame(0x1, b"on the other stream"))
    c.send(ws, ws_frame(0x1, b"on the first stream"))
    if c.frame(other, "the second stream's echo") != (True, 0x1, b"on the other stream"):
        fail("the second WebSocket's echo")
    if c.frame(ws, "the first stream's echo") != (True, 0x1, b"on the first stream"):
        fail("the first WebSocket's echo, beside the second")
    ok("two websockets on one connection")


def refusals(c):
    """Upstreams that do not switch: their answers go no further than a
    502, and the connection (and a WebSocket open on it) go on."""
    ws = open_echo(c)
    refused(c, "/raw/page", "502")
    ok("a 200 to the extended CONNECT is a 502")
    refused(c, "/raw/wrong", "502")
    ok("a wrong accept value is a 502")
    status, body = get(c, "/")
    if status != "200" or body != b"home\n":
        fail(f"GET / after the refusals: {status} {body!r}")
    c.echo(ws, 0x1, b"still here", "the connection goes on")


def ends(c):
    """Each side's end reaches the other."""
    ws = open_echo(c)
    # Ended by the client's FIN without a Close: the upstream gets the
    # FIN, closes, and the proxy ends the stream.
    other = open_echo(c)
    c.echo(other, 0x1, b"before the fin", "an echo before the fin")
    c.send(other, b"", end=True)
    c.until(lambda: other in c.ended or other in c.reset, "the stream's end after the client's FIN")
    if other not in c.ended:
        fail(f"the stream the client ended was reset ({c.reset.get(other)})")
    ok("client fin ends the tunnel")

    # Reset by the client: its upstream closes (the test counts).
    third = open_echo(c)
    c.quic.reset_stream(third, 0x10C)  # H3_REQUEST_CANCELLED
    c.flush()
    c.echo(ws, 0x1, b"after the other's reset", "reset of one leaves the other")

    # The upstream closes: its Close comes through, then its FIN as the
    # stream's.
    c.send(ws, ws_frame(0x1, b"bye"))
    fin, op, payload = c.frame(ws, "the upstream's Close")
    if op != 0x8 or payload[:2] != struct.pack("!H", 1000):
        fail(f"the upstream's Close: opcode {op}, payload {payload!r}")
    c.send(ws, ws_frame(0x8, close_payload(1000)))
    c.until(lambda: ws in c.ended or ws in c.reset, "the stream's end after the upstream closed")
    if ws not in c.ended:
        fail(f"the stream was reset ({c.reset.get(ws)}) instead of ended")
    ok("upstream close ends the stream")
    c.send(ws, b"", end=True)


def stall(c, total):
    """Opens /flood, whose upstream sends `total` bytes, and reads nothing
    (no datagram, so no credit either) until a line comes on stdin; then
    reads every byte."""
    sid = c.open_ws("/flood")
    if c.status(sid) != "200":
        fail(f"CONNECT /flood: {c.responses.get(sid)} reset {c.reset.get(sid)}")
    ok("connect")
    sys.stdin.readline()
    got = 0
    # Each wait is for more bytes (or the end), not for all of them.
    while got < total and sid not in c.ended and sid not in c.reset:
        before = got
        c.until(lambda: sid in c.data or sid in c.ended or sid in c.reset, f"more than {before} bytes")
        chunk = c.data.pop(sid, b"")
        if chunk.strip(b"x"):
            fail(f"a byte other than the upstream's after {got}")
        got += len(chunk)
    if got != total:
        fail(f"the tunnel ended after {got} of {total} bytes (reset {c.reset.get(sid)})")
    ok("every byte arrives")


def main():
    modes = {"echoes": echoes, "refusals": refusals, "ends": ends}
    if len(sys.argv) == 4 and sys.argv[2] == "stall":
        c = Client(sys.argv[1])
        stall(c, int(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[2] in modes:
        c = Client(sys.argv[1])
        modes[sys.argv[2]](c)
    else:
        fail("usage: proxy_h3_client.py HOST:PORT echoes|refusals|ends|stall BYTES")
    c.quic.close()
    c.flush()
    c.sock.close()


if __name__ == "__main__":
    main()
