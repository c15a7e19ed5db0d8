"""WebSockets over HTTP/2 (RFC 8441) through Peregrine's reverse proxy, with
python-hyper's h2 (which we did not write), over cleartext HTTP/2 (prior
knowledge). The proxy turns each extended CONNECT into an HTTP/1.1 upgrade
to its upstream, the engine's echo on /echo (subprotocol "chat"), and a
refusal on /forbidden (403).

Usage: python proxy_h2_client.py HOST:PORT

Run by crates/engine/tests/proxy_ws.rs. Prints "ok: CHECK" for each check
passed and exits 0 only if all did; on the first failure it prints "FAIL:
why" and exits 1. The HTTP/2 and WebSocket framing are h2_client.py's.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h2_client import Client, close_payload, fail, ok, ws_frame  # noqa: E402


def main():
    if len(sys.argv) != 2:
        fail("usage: proxy_h2_client.py HOST:PORT")
    c = Client(sys.argv[1])
    c.until(lambda: c.settings_seen, "the server's SETTINGS")
    if c.conn.remote_settings.enable_connect_protocol != 1:
        fail("the proxy's SETTINGS do not enable extended CONNECT (RFC 8441 §3)")
    ok("settings enable connect protocol")

    ws = c.open_ws("/echo", [("sec-websocket-protocol", "x, chat")])
    answer = c.responses.get(ws, {})
    if answer.get(":status") != "200" or ws in c.ended:
        fail(f"CONNECT /echo: {answer}, stream ended {ws in c.ended}, reset {c.reset.get(ws)}")
    ok("connect")
    if answer.get("sec-websocket-protocol") != "chat":
        fail(f"the 200 does not carry the upstream's subprotocol: {answer}")
    for name in ("sec-websocket-accept", "upgrade", "connection"):
        if name in answer:
            fail(f"the 200 carries {name} (RFC 8441 §5, RFC 9113 §8.2.2): {answer}")
    ok("subprotocol")

    c.echo(ws, 0x1, "hello through the proxy \u2713 \U0001F985".encode(), "text")
    c.echo(ws, 0x2, bytes(range(256)) * 4, "binary")
    big = bytes((i * 31 + (i >> 10)) & 0xFF for i in range((1 << 20) - 1024))
    c.echo(ws, 0x2, big, "1 MiB less 1 KiB binary")

    other = c.open_ws("/echo")
    if c.responses.get(other, {}).get(":status") != "200":
        fail(f"a second CONNECT: {c.responses.get(other)} reset {c.reset.get(other)}")
    c.send(other, ws_frame(0x1, b"on the other stream"))
    c.send(ws, ws_frame(0x1, b"on the first stream"))
    if c.frame(other, "the second stream's echo") != (True, 0x1, b"on the other stream"):
        fail("the second WebSocket's echo")
    if c.frame(ws, "the first stream's echo") != (True, 0x1, b"on the first stream"):
        fail("the first WebSocket's echo, beside the second")
    ok("two websockets on one connection")

    c.conn.reset_stream(other, error_code=8)  # CANCEL
    c.flush()
    c.echo(ws, 0x1, b"after the other's reset", "reset of one leaves the other")

    # The closing handshake: the upstream answers the Close and closes its
    # connection; the proxy ends the stream after the Close.
    c.send(ws, ws_frame(0x8, close_payload(1000, b"bye")))
    fin, op, payload = c.frame(ws, "the upstream's Close")
    if op != 0x8 or payload[:2] != struct.pack("!H", 1000):
        fail(f"the upstream's Close: opcode {op}, payload {payload!r}")
    c.until(lambda: ws in c.ended or ws in c.reset, "END_STREAM after the Close")
    if ws not in c.ended:
        fail(f"the stream was reset ({c.reset.get(ws)}) instead of ended")
    ok("close 1000")

    # An upstream that refuses: its 403 is the answer, and the connection
    # goes on.
    refused = c.open_ws("/forbidden")
    status = c.responses.get(refused, {}).get(":status")
    c.until(lambda: refused in c.ended or refused in c.reset, "the end of the refused CONNECT")
    if status != "403":
        fail(f"CONNECT /forbidden answered {status}")
    get = c.request([(":method", "GET"), (":scheme", "http"), (":path", "/fields"), (":authority", c.addr)], end=True)
    c.until(lambda: get in c.ended, "the answer to GET /fields")
    if c.responses.get(get, {}).get(":status") != "200":
        fail(f"GET /fields after a refused CONNECT answered {c.responses.get(get)}")
    ok("refused upgrade relayed")
    c.conn.close_connection()
    c.flush()
    c.sock.close()


if __name__ == "__main__":
    main()
