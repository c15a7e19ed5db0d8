"""WebSockets over HTTP/3 (RFC 9220) with aioquic, which we did not write,
on the ws_echo example's /echo, over QUIC.

Usage: python h3_client.py HOST:PORT
       python h3_client.py HOST:PORT pubsub

The second form is tests/websocket.rs's: two WebSockets on a topic's
route (each says "joined" when it opens and publishes what it gets), a
message from one reaching the other, then (prompted by its lines) an
announcement from the server's publisher, then the 1001 of a shutdown.

Prints "ok: CHECK" for each check passed and exits 0 only if all did; on
the first failure it prints "FAIL: why" and exits 1. Every wait is bounded
(10 s) and says what it waited for.

aioquic does QUIC and HTTP/3 (its H3Connection sends any headers it is
given, :protocol included, whatever the server's SETTINGS say: the
setting is checked here); it is driven without asyncio, datagrams in and
out of one UDP socket. The WebSocket frames inside the request streams
are built and read here, as RFC 6455 §5 has them (a client masks; a
server does not), as the HTTP/2 client does (h2_client.py).
"""

import os
import socket
import ssl
import struct
import sys
import time

from aioquic.h3.connection import H3_ALPN, H3Connection, Setting
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StopSendingReceived, StreamReset

from ws_frames import WAIT, close_payload, fail, ok, ws_frame


class Client:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.peer = (host, int(port))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(self.peer)
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE)
        config.server_name = "localhost"
        self.quic = QuicConnection(configuration=config)
        self.h3 = H3Connection(self.quic)
        self.quic.connect(self.peer, now=time.time())
        self.flush()
        self.responses = {}  # stream → headers
        self.data = {}  # stream → bytes not yet read as frames
        self.ended = set()
        self.reset = {}  # stream → error code
        self.stopped = {}  # stream → error code

    def flush(self):
        for data, _ in self.quic.datagrams_to_send(now=time.time()):
            self.sock.send(data)

    def pump(self, timeout=WAIT):
        """Waits for a datagram (or aioquic's timer) once and handles what came."""
        timer = self.quic.get_timer()
        wait = timeout if timer is None else max(0.0, min(timeout, timer - time.time()))
        self.sock.settimeout(wait)
        try:
            datagram = self.sock.recv(65536)
            self.quic.receive_datagram(datagram, self.peer, now=time.time())
        except (socket.timeout, BlockingIOError):
            # A timeout of 0 (aioquic's timer due) makes the socket
            # non-blocking: nothing there is the same as a timeout.
            self.quic.handle_timer(now=time.time())
        while (event := self.quic.next_event()) is not None:
            if isinstance(event, ConnectionTerminated):
                fail(f"the connection closed: {event.error_code:#x} {event.reason_phrase!r}")
            if isinstance(event, StreamReset):
                self.reset[event.stream_id] = event.error_code
            if isinstance(event, StopSendingReceived):
                self.stopped[event.stream_id] = event.error_code
            for h3_event in self.h3.handle_event(event):
                if isinstance(h3_event, HeadersReceived):
                    self.responses[h3_event.stream_id] = dict(h3_event.headers)
                elif isinstance(h3_event, DataReceived):
                    sid = h3_event.stream_id
                    self.data[sid] = self.data.get(sid, b"") + h3_event.data
                if getattr(h3_event, "stream_ended", False):
                    self.ended.add(h3_event.stream_id)
        self.flush()

    def until(self, cond, what):
        deadline = time.monotonic() + WAIT
        while not cond():
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"waited {WAIT} s for {what}")
            self.pump(left)

    def request(self, headers, end=False):
        sid = self.quic.get_next_available_stream_id()
        self.h3.send_headers(sid, headers, end_stream=end)
        self.flush()
        return sid

    def open_ws(self, path, extra=()):
        headers = [
            (b":method", b"CONNECT"),
            (b":protocol", b"websocket"),
            (b":scheme", b"https"),
            (b":path", path.encode()),
            (b":authority", self.addr.encode()),
            (b"sec-websocket-version", b"13"),
            (b"origin", f"https://{self.addr}".encode()),
        ] + list(extra)
        sid = self.request(headers)
        self.until(lambda: sid in self.responses or sid in self.reset, f"the answer to CONNECT {path}")
        return sid

    def status(self, sid):
        return self.responses.get(sid, {}).get(b":status", b"").decode()

    def send(self, sid, data, end=False):
        """aioquic queues what flow control does not let go yet; it goes as
        the server credits it, while we read."""
        self.h3.send_data(sid, data, end_stream=end)
        self.flush()

    def frame(self, sid, what):
        """The next whole server frame on `sid`: (fin, opcode, payload)."""

        def parse():
            b = self.data.get(sid, b"")
            if len(b) < 2:
                return None
            if b[1] & 0x80:
                fail(f"a masked frame from the server on stream {sid}")
            n, at = b[1] & 0x7F, 2
            if n == 126:
                if len(b) < 4:
                    return None
                n, at = struct.unpack("!H", b[2:4])[0], 4
            elif n == 127:
                if len(b) < 10:
                    return None
                n, at = struct.unpack("!Q", b[2:10])[0], 10
            if len(b) < at + n:
                return None
            self.data[sid] = b[at + n :]
            return (bool(b[0] & 0x80), b[0] & 0x0F, b[at : at + n])

        got = []
        self.until(lambda: got.append(parse()) or got[-1] is not None, what)
        return got[-1]

    def echo(self, sid, op, payload, check):
        self.send(sid, ws_frame(op, payload))
        fin, got_op, got = self.frame(sid, f"the echo of {check}")
        if (fin, got_op, got) != (True, op, payload):
            fail(f"{check}: sent opcode {op} of {len(payload)} bytes, got fin {fin} opcode {got_op} of {len(got)} bytes")
        ok(check)


def pubsub(c):
    a = c.open_ws("/room")
    b = c.open_ws("/room")
    if (c.status(a), c.status(b)) != ("200", "200"):
        fail(f"CONNECT /room twice: {c.status(a)!r} {c.status(b)!r}")
    for sid in (a, b):
        if c.frame(sid, "joined") != (True, 0x1, b"joined"):
            fail("the first message is not 'joined'")
    c.send(a, ws_frame(0x1, b"from a"))
    if c.frame(b, "the message a published") != (True, 0x1, b"from a"):
        fail("b did not get what a published")
    c.send(a, ws_frame(0x9, b"p"))
    if c.frame(a, "a's pong") != (True, 0xA, b"p"):
        fail("a heard its own message")
    ok("published to the other stream")
    for sid in (a, b):
        if c.frame(sid, "the announcement") != (True, 0x1, b"announcement"):
            fail("the server's announcement")
    ok("announcement")
    for sid in (a, b):
        fin, op, payload = c.frame(sid, "the Close of the shutdown")
        if op != 0x8 or payload[:2] != struct.pack("!H", 1001):
            fail(f"the shutdown's Close: opcode {op}, payload {payload!r}")
        c.send(sid, ws_frame(0x8, close_payload(1001)))
    c.until(lambda: a in c.ended and b in c.ended, "the server's FIN on both streams after the Closes")
    ok("1001 at shutdown")


def main():
    if len(sys.argv) not in (2, 3):
        fail("usage: h3_client.py HOST:PORT [pubsub]")
    c = Client(sys.argv[1])
    if sys.argv[2:] == ["pubsub"]:
        pubsub(c)
        return
    c.until(lambda: c.h3.received_settings is not None, "the server's SETTINGS")
    if c.h3.received_settings.get(Setting.ENABLE_CONNECT_PROTOCOL) != 1:
        fail(f"the server's SETTINGS do not enable extended CONNECT (RFC 9220 §3): {c.h3.received_settings}")
    ok("settings enable connect protocol")

    ws = c.open_ws("/echo")
    if c.status(ws) != "200" or ws in c.ended:
        fail(f"CONNECT /echo: status {c.status(ws)}, stream ended {ws in c.ended}, reset {c.reset.get(ws)}")
    ok("connect")

    c.echo(ws, 0x1, "hello over h3 \u2713 \U0001F985".encode(), "text")
    c.echo(ws, 0x2, bytes(range(256)) * 4, "binary")
    c.echo(ws, 0x1, b"", "empty text")
    c.echo(ws, 0x2, b"", "empty binary")
    # Larger than the stream's receive window (256 KiB) and than the 64 KiB
    # the server reads ahead of its WebSocket machine.
    big = bytes((i * 31 + (i >> 10)) & 0xFF for i in range((1 << 20) - 1024))
    c.echo(ws, 0x2, big, "1 MiB less 1 KiB binary")

    # Fragments cut inside characters, a ping between them: the pong
    # comes first, then the whole message.
    c.send(ws, ws_frame(0x1, b"fragmented \xc3", fin=False))
    c.send(ws, ws_frame(0x9, b"between"))
    c.send(ws, ws_frame(0x0, b"\xa9 \xe2\x9c", fin=False))
    c.send(ws, ws_frame(0x0, b"\x93 end"))
    if c.frame(ws, "the pong") != (True, 0xA, b"between"):
        fail("the pong for a ping between fragments")
    ok("ping between fragments")
    if c.frame(ws, "the fragmented echo") != (True, 0x1, "fragmented \u00e9 \u2713 end".encode()):
        fail("the echo of a fragmented text")
    ok("fragmented text")

    # A second WebSocket on the same connection: each echo on its own
    # stream, however they interleave.
    other = c.open_ws("/echo")
    if c.status(other) != "200":
        fail(f"a second CONNECT: {c.responses.get(other)} reset {c.reset.get(other)}")
    c.send(other, ws_frame(0x1, b"on the other stream"))
    c.send(ws, ws_frame(0x1, b"on the first stream"))
    if c.frame(other, "the second stream's echo") != (True, 0x1, b"on the other stream"):
        fail("the second WebSocket's echo")
    if c.frame(ws, "the first stream's echo") != (True, 0x1, b"on the first stream"):
        fail("the first WebSocket's echo, beside the second")
    ok("two websockets on one connection")

    # The client resets one (an abrupt close): the other goes on.
    c.quic.reset_stream(other, 0x10C)  # H3_REQUEST_CANCELLED
    c.flush()
    c.echo(ws, 0x1, b"after the other's reset", "reset of one leaves the other")

    # The client ends a third with FIN and no Close (RFC 6455's TCP close
    # without a closing handshake): the server ends its side too.
    third = c.open_ws("/echo")
    if c.status(third) != "200":
        fail(f"a third CONNECT: {c.responses.get(third)}")
    c.send(third, b"", end=True)
    c.until(lambda: third in c.ended or third in c.reset, "the server's FIN after the client's")
    if third not in c.ended:
        fail(f"the stream ended by the client's FIN was reset ({c.reset.get(third)})")
    ok("fin without close ends the stream")

    # Not a WebSocket route: refused, and the stream does not become one.
    page = c.open_ws("/")
    status = c.status(page)
    if not status or status.startswith("2"):
        fail(f"CONNECT / (the page, not a WebSocket) answered {status!r}")
    ok(f"connect elsewhere refused ({status})")
    # A plain GET of the WebSocket: a 400 that says how to open it.
    get = c.request(
        [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/echo"), (b":authority", c.addr.encode())],
        end=True,
    )
    c.until(lambda: get in c.ended, "the answer to GET /echo")
    if c.status(get) != "400":
        fail(f"GET /echo over HTTP/3 answered {c.responses.get(get)}")
    ok("get refused (400)")

    c.send(ws, ws_frame(0x9, b"h3 ping"))
    if c.frame(ws, "the pong") != (True, 0xA, b"h3 ping"):
        fail("the pong")
    ok("ping")

    # The closing handshake, then FIN from the server.
    c.send(ws, ws_frame(0x8, close_payload(1000, b"bye")))
    fin, op, payload = c.frame(ws, "the server's Close")
    if op != 0x8 or payload[:2] != struct.pack("!H", 1000):
        fail(f"the server's Close: opcode {op}, payload {payload!r}")
    c.until(lambda: ws in c.ended or ws in c.reset, "the server's FIN after the Close")
    if ws not in c.ended:
        fail(f"the stream was reset ({c.reset.get(ws)}) instead of ended")
    ok("close 1000")
    c.send(ws, b"", end=True)
    c.quic.close()
    c.flush()
    c.sock.close()


if __name__ == "__main__":
    main()
