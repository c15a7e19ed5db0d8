"""WebSockets over HTTP/2 (RFC 8441) with python-hyper's h2, which we did
not write, on the ws_echo example's /echo, over cleartext HTTP/2 (prior
knowledge).

Usage: python h2_client.py HOST:PORT

Prints "ok: CHECK" for each check passed and exits 0 only if all did; on
the first failure it prints "FAIL: why" and exits 1. Every wait is bounded
(10 s) and says what it waited for.

h2 does HTTP/2 (framing, HPACK, flow control, the extended CONNECT's
:protocol, which it accepts only once the server's SETTINGS enable it);
the WebSocket frames inside the streams are built and read here, as RFC
6455 §5 has them (a client masks; a server does not).
"""

import os
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from ws_frames import WAIT, close_payload, fail, ok, ws_frame


class Client:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self.flush()
        self.responses = {}  # stream → headers
        self.data = {}  # stream → bytes not yet read as frames
        self.ended = set()
        self.reset = {}  # stream → error code
        self.settings_seen = False

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def pump(self, timeout=WAIT):
        """Reads once and handles what came."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        if not chunk:
            fail("the server closed the connection")
        for ev in self.conn.receive_data(chunk):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings_seen = True
            elif isinstance(ev, h2.events.ResponseReceived):
                self.responses[ev.stream_id] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                self.data[ev.stream_id] = self.data.get(ev.stream_id, b"") + ev.data
                # Read: its window goes back at once.
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.ended.add(ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                self.reset[ev.stream_id] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                fail(f"the server sent GOAWAY: {ev.error_code} {ev.additional_data!r}")
        self.flush()
        return True

    def until(self, cond, what):
        deadline = time.monotonic() + WAIT
        while not cond():
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"waited {WAIT} s for {what}")
            self.pump(left)

    def request(self, headers, end=False):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, headers, end_stream=end)
        self.flush()
        return sid

    def open_ws(self, path, extra=()):
        headers = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "http"),
            (":path", path),
            (":authority", self.addr),
            ("sec-websocket-version", "13"),
            ("origin", f"http://{self.addr}"),
        ] + list(extra)
        sid = self.request(headers)
        self.until(lambda: sid in self.responses or sid in self.reset, f"the answer to CONNECT {path}")
        return sid

    def send(self, sid, data):
        """Sends `data` on `sid` as the windows allow, reading meanwhile."""
        while data:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                if not self.pump():
                    fail(f"waited {WAIT} s for window on stream {sid}")
                continue
            self.conn.send_data(sid, data[:window])
            self.flush()
            data = data[window:]

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


def main():
    if len(sys.argv) != 2:
        fail("usage: h2_client.py HOST:PORT")
    c = Client(sys.argv[1])
    c.until(lambda: c.settings_seen, "the server's SETTINGS")
    if c.conn.remote_settings.enable_connect_protocol != 1:
        fail("the server's SETTINGS do not enable extended CONNECT (RFC 8441 §3)")
    ok("settings enable connect protocol")

    ws = c.open_ws("/echo")
    status = c.responses.get(ws, {}).get(":status")
    if status != "200" or ws in c.ended:
        fail(f"CONNECT /echo: status {status}, stream ended {ws in c.ended}, reset {c.reset.get(ws)}")
    ok("connect")

    c.echo(ws, 0x1, "hello over h2 \u2713 \U0001F985".encode(), "text")
    c.echo(ws, 0x2, bytes(range(256)) * 4, "binary")
    c.echo(ws, 0x1, b"", "empty text")
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
    if c.responses.get(other, {}).get(":status") != "200":
        fail(f"a second CONNECT: {c.responses.get(other)} reset {c.reset.get(other)}")
    c.send(other, ws_frame(0x1, b"on the other stream"))
    c.send(ws, ws_frame(0x1, b"on the first stream"))
    if c.frame(other, "the second stream's echo") != (True, 0x1, b"on the other stream"):
        fail("the second WebSocket's echo")
    if c.frame(ws, "the first stream's echo") != (True, 0x1, b"on the first stream"):
        fail("the first WebSocket's echo, beside the second")
    ok("two websockets on one connection")

    # The client resets one: the other goes on.
    c.conn.reset_stream(other, error_code=8)  # CANCEL
    c.flush()
    c.echo(ws, 0x1, b"after the other's reset", "reset of one leaves the other")

    # Not a WebSocket route: refused, and the stream does not become one.
    page = c.open_ws("/")
    status = c.responses.get(page, {}).get(":status")
    if status is None or status.startswith("2"):
        fail(f"CONNECT / (the page, not a WebSocket) answered {status}")
    ok(f"connect elsewhere refused ({status})")
    # A plain GET of the WebSocket: a 400 that says how to open it.
    get = c.request([(":method", "GET"), (":scheme", "http"), (":path", "/echo"), (":authority", c.addr)], end=True)
    c.until(lambda: get in c.ended, "the answer to GET /echo")
    if c.responses.get(get, {}).get(":status") != "400":
        fail(f"GET /echo over HTTP/2 answered {c.responses.get(get)}")
    ok("get refused (400)")

    c.send(ws, ws_frame(0x9, b"h2 ping"))
    if c.frame(ws, "the pong") != (True, 0xA, b"h2 ping"):
        fail("the pong")
    ok("ping")

    # The closing handshake, then END_STREAM from the server.
    c.send(ws, ws_frame(0x8, close_payload(1000, b"bye")))
    fin, op, payload = c.frame(ws, "the server's Close")
    if op != 0x8 or payload[:2] != struct.pack("!H", 1000):
        fail(f"the server's Close: opcode {op}, payload {payload!r}")
    c.until(lambda: ws in c.ended or ws in c.reset, "the server's END_STREAM after the Close")
    if ws not in c.ended:
        fail(f"the stream was reset ({c.reset.get(ws)}) instead of ended")
    ok("close 1000")
    c.conn.close_connection()
    c.flush()
    c.sock.close()


if __name__ == "__main__":
    main()
