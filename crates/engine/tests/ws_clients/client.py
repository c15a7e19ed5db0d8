"""An independent WebSocket client (Python's `websockets`, sync API) checks an
echo server: text, binary and empty messages, a message of 1 MiB less 1 KiB,
a text message sent in fragments that split a UTF-8 character, ping and pong,
and a close with 1000 answered by 1000.

Usage: python client.py ws://HOST:PORT/echo

Run by crates/engine/tests/websocket_clients.rs on the `ws_echo` example, in
a venv that `test_support::install::websockets_python` makes. Prints `ok:
CHECK` for each check passed; on the first failure prints `FAIL: CHECK: why`
and exits 1.
"""

import sys

from websockets.sync.client import connect

# Each wait for an answer; past it the check fails saying what it waited for.
TIMEOUT_S = 10

TEXT = "hello, peregrine \u2713 \U0001F985"
BINARY = bytes(range(256)) * 4
BIG = bytes((i * 31 + (i >> 10)) & 0xFF for i in range((1 << 20) - 1024))
# "fragmented é ✓ end" in three frames, each cut inside a character: the
# server must check UTF-8 across fragments, not frame by frame (RFC 6455
# §5.6: "the whole message contains valid UTF-8").
FRAGMENTS = [b"fragmented \xc3", b"\xa9 \xe2\x9c", b"\x93 end"]
PING = b"peregrine ping"


def main(url):
    check = "connect"
    try:
        # The library's default offer (permessage-deflate) is kept: the
        # server may accept or decline it. Proxies from the environment are
        # not: the server is on loopback.
        with connect(url, open_timeout=TIMEOUT_S, close_timeout=TIMEOUT_S, proxy=None) as ws:
            print(f"ok: connect (extensions: {[e.name for e in ws.protocol.extensions]})")

            check = "text"
            ws.send(TEXT)
            expect(ws, TEXT, check)

            check = "binary"
            ws.send(BINARY)
            expect(ws, BINARY, check)

            check = "empty text"
            ws.send("")
            expect(ws, "", check)

            check = "empty binary"
            ws.send(b"")
            expect(ws, b"", check)

            check = "1 MiB less 1 KiB binary"
            ws.send(BIG)
            expect(ws, BIG, check)

            check = "fragmented text"
            # An iterable of bytes with text=True: one text frame, then
            # continuation frames, then an empty final one.
            ws.send(FRAGMENTS, text=True)
            expect(ws, b"".join(FRAGMENTS).decode(), check)

            check = "ping"
            # Set when a pong with the same payload arrives.
            if not ws.ping(PING).wait(TIMEOUT_S):
                fail(check, f"no pong for {PING!r} within {TIMEOUT_S} s")
            print(f"ok: {check}")

            check = "close 1000"
            ws.close(1000, "bye")
            if ws.close_code != 1000:
                fail(check, f"the server's close code was {ws.close_code} ({ws.close_reason!r}), not 1000")
            print(f"ok: {check} (the server's reason: {ws.close_reason!r})")
    except Exception as e:  # noqa: BLE001 -- any error fails the check at hand
        fail(check, f"{type(e).__name__}: {e}")
    print("all checks passed")


def expect(ws, sent, check):
    got = ws.recv(timeout=TIMEOUT_S)
    if type(got) is not type(sent) or got != sent:
        fail(check, f"sent {describe(sent)}, the echo was {describe(got)}")
    print(f"ok: {check}")


def describe(message):
    unit = "characters" if isinstance(message, str) else "bytes"
    kind = "text" if isinstance(message, str) else "binary"
    return f"{kind} of {len(message)} {unit} ({message[:40]!r}...)"


def fail(check, why):
    print(f"FAIL: {check}: {why}")
    sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python client.py ws://HOST:PORT/echo", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
