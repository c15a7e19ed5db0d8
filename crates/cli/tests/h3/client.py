"""An HTTP/3 client for the tests, on aioquic's H3Connection (an
implementation independent of ours): sends the requests given as JSON on
stdin over one QUIC connection, all at once, and writes what it got
per response into the directory "out", in request order: N.head (the
status, or the error that ended the stream or the connection, then the
headers) and N.body.

stdin: {"host": "127.0.0.1", "port": 4433, "requests": [{"method": "GET",
"path": "/", "headers": [["name", "value"]], "body": "hex"}],
"timeout": 30}; "server_name" (SNI and :authority, default localhost)
and "cafile" (a CA to check the server's certificate with; unchecked
without) are optional. A request may instead be {"raw": "hex"}: those bytes
sent as they are on a new request stream (for malformed input).
"local_host" (e.g. "127.0.0.2") binds the client's socket to that
address, which aioquic's connect() cannot (it binds "::"), so that the
server sees the client there (IP rules, rate limits per address).
A request with "expect_continue": true is sent with "expect:
100-continue" and its body held back until an interim 100 comes (none
coming, the client waits until its timeout); the interim statuses
received are written into N.interim, one a line, each followed by its
fields ("name: value", one a line); trailer fields, if any, into
N.trailers, one a line. A request's "trailers": [["name", "value"]] are
sent after its body, as a HEADERS frame that ends the stream.
"ignore_stream_limit": true makes the client open streams past the
server's limit (as a hostile client would); "stall": true gives each
stream a 4 KiB receive window and never raises it (a client that stops
reading). "wait_close": true prints
"answered" once the answers are written, then how the server closed the
connection ("connection closed CODE REASON"); with "ping": true the
client sends a QUIC PING every 100 ms meanwhile. "then": "reset control"
(or "finish control", "reset encoder", "reset decoder", "stop
server-control") does that to the client's control or QPACK stream, or
asks the server to stop sending on its control stream, once the answers
are written; "grease control" sends a 64 KiB frame of a reserved type on
the client's control stream, then ends the stream; "open push" opens a
push stream (which only servers may); then prints how the server closed
the connection.

With "flood": N instead, it sends the Initial packets of N connection
attempts from one socket, never answering, and prints how many answers
were Retry packets and how many were not: {"retries": R, "other": O}.

With PEREGRINE_H3_QLOG=DIR in the environment, aioquic writes a qlog of
the connection into DIR (what it sent and received, its timers).
"""

import asyncio
import contextlib
import json
import os
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset


class Connection(H3Connection):
    """aioquic's, except that the answer to a HEAD may announce a
    Content-Length its (empty) body does not have (RFC 9110 §9.3.2,
    §8.6): aioquic 1.7.2 refuses that (H3_MESSAGE_ERROR); other answers
    are still checked."""

    def __init__(self, quic):
        super().__init__(quic)
        self.head_streams = set()

    def _check_content_length(self, stream):
        if stream.stream_id not in self.head_streams:
            super()._check_content_length(stream)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = Connection(self._quic)
        self.streams = {}
        self.waiters = {}
        self.closed = None
        self.raw_streams = set()

    def raw(self, data):
        sid = self._quic.get_next_available_stream_id()
        self._quic.send_stream_data(sid, data, end_stream=True)
        self.streams[sid] = {"status": None, "headers": [], "body": bytearray(), "error": None}
        fut = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        self.transmit()
        return fut

    def request(self, method, path, authority, headers, body, expect_continue=False, trailers=None):
        sid = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.encode(), v.encode()) for k, v in headers]
        if expect_continue:
            fields.append((b"expect", b"100-continue"))
        if method == "HEAD":
            self.h3.head_streams.add(sid)
        self.h3.send_headers(sid, fields, end_stream=not body and not trailers)
        held = None
        if body and expect_continue:
            held = body
        elif body:
            self.h3.send_data(sid, body, end_stream=not trailers)
        if trailers and not held:
            self.h3.send_headers(sid, [(k.encode(), v.encode()) for k, v in trailers], end_stream=True)
        self.streams[sid] = {
            "status": None,
            "headers": [],
            "body": bytearray(),
            "error": None,
            "interim": [],
            "interim_fields": [],
            "held": held,
        }
        fut = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        self.transmit()
        return fut

    def finish(self, sid):
        fut = self.waiters.pop(sid, None)
        if fut is not None and not fut.done():
            fut.set_result(self.streams[sid])

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived) and event.stream_id in self.raw_streams:
            s = self.streams[event.stream_id]
            s["body"] += event.data
            if event.end_stream:
                self.finish(event.stream_id)
            return
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            self.streams[event.stream_id]["error"] = "reset %d" % event.error_code
            self.finish(event.stream_id)
        if isinstance(event, ConnectionTerminated):
            self.closed = "connection closed %d %s" % (event.error_code, event.reason_phrase)
            for sid in list(self.waiters):
                self.streams[sid]["error"] = self.closed
                self.finish(sid)
        for ev in self.h3.handle_event(event):
            s = self.streams.get(getattr(ev, "stream_id", None))
            if s is None:
                continue
            if isinstance(ev, HeadersReceived):
                status = dict(ev.headers).get(b":status", b"")
                if status.startswith(b"1"):
                    # An interim response: send the body held for it.
                    s["interim"].append(int(status))
                    s["interim_fields"].append([(k.decode(), v.decode()) for k, v in ev.headers if k != b":status"])
                    if s.get("held") is not None:
                        self.h3.send_data(ev.stream_id, s["held"], end_stream=True)
                        s["held"] = None
                        self.transmit()
                    continue
                if s["status"] is not None:
                    # Trailers: a HEADERS frame after the DATA (RFC 9114 §4.1).
                    s["trailers"] = [[k.decode(), v.decode()] for k, v in ev.headers]
                    if ev.stream_ended:
                        self.finish(ev.stream_id)
                    continue
                for k, v in ev.headers:
                    if k == b":status":
                        s["status"] = int(v)
                    else:
                        s["headers"].append([k.decode(), v.decode()])
            elif isinstance(ev, DataReceived):
                s["body"] += ev.data  # a bytearray: amortised appends
            if getattr(ev, "stream_ended", False):
                self.finish(ev.stream_id)


def flood(spec, config):
    """Initials of many connection attempts from one socket; counts the
    Retry packets (long header, type 3 in QUIC v1) among the answers."""
    import socket
    import time

    addr = (spec["host"], spec["port"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.5)
    now = time.time()
    for _ in range(spec["flood"]):
        conn = QuicConnection(configuration=config)
        conn.connect(addr, now=now)
        for data, _ in conn.datagrams_to_send(now=now):
            sock.sendto(data, addr)
    retries = other = 0
    try:
        while True:
            data, _ = sock.recvfrom(65536)
            if data[0] & 0xF0 == 0xF0:
                retries += 1
            else:
                other += 1
    except socket.timeout:
        pass
    print(json.dumps({"retries": retries, "other": other}), flush=True)


@contextlib.asynccontextmanager
async def connect_from(local_host, host, port, configuration, create_protocol):
    """aioquic's connect(), from a socket bound to local_host."""
    import socket

    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in local_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((local_host, 0))
    connection = QuicConnection(configuration=configuration)
    transport, protocol = await loop.create_datagram_endpoint(lambda: create_protocol(connection), sock=sock)
    try:
        protocol.connect((host, port))
        await protocol.wait_connected()
        yield protocol
    finally:
        protocol.close()
        await protocol.wait_closed()
        transport.close()


async def main():
    spec = json.load(sys.stdin)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    if "cafile" in spec:
        # Check the certificate against this CA and the server name.
        config.verify_mode = ssl.CERT_REQUIRED
        config.load_verify_locations(cafile=spec["cafile"])
    config.server_name = spec.get("server_name", "localhost")
    if os.environ.get("PEREGRINE_H3_QLOG"):
        from aioquic.quic.logger import QuicFileLogger
        config.quic_logger = QuicFileLogger(os.environ["PEREGRINE_H3_QLOG"])
    if spec.get("stall"):
        # A 4 KiB receive window per stream, never raised (below).
        config.max_stream_data = 4096
    if "flood" in spec:
        return flood(spec, config)
    authority = "%s:%d" % (spec.get("server_name", "localhost"), spec["port"])
    if "local_host" in spec:
        connecting = connect_from(spec["local_host"], spec["host"], spec["port"], config, Client)
    else:
        connecting = connect(spec["host"], spec["port"], configuration=config, create_protocol=Client)
    async with connecting as client:
        if spec.get("ignore_stream_limit"):
            client._quic._remote_max_streams_bidi = 1 << 20
        if spec.get("stall"):
            # aioquic raises MAX_STREAM_DATA as data arrives: never here.
            client._quic._write_stream_limits = lambda **_: None
        futs = []
        for r in spec["requests"]:
            if "raw" in r:
                fut = client.raw(bytes.fromhex(r["raw"]))
                client.raw_streams.add(max(client.streams))
                futs.append(fut)
                continue
            futs.append(
                client.request(
                    r.get("method", "GET"),
                    r["path"],
                    authority,
                    r.get("headers", []),
                    bytes.fromhex(r.get("body", "")),
                    r.get("expect_continue", False),
                    r.get("trailers"),
                )
            )
        results = await asyncio.wait_for(asyncio.gather(*futs), spec.get("timeout", 30))
        for i, r in enumerate(results):
            # DIR/N.head: "error TEXT" or the status, then one header a
            # line; DIR/N.body: the body's bytes.
            with open("%s/%d.head" % (spec["out"], i), "w") as f:
                f.write("error %s\n" % r["error"] if r["error"] else "%s\n" % r["status"])
                for k, v in r["headers"]:
                    f.write("%s: %s\n" % (k, v))
            with open("%s/%d.body" % (spec["out"], i), "wb") as f:
                f.write(r["body"])
            if r.get("trailers") is not None:
                with open("%s/%d.trailers" % (spec["out"], i), "w") as f:
                    f.write("".join("%s: %s\n" % (k, v) for k, v in r["trailers"]))
            if r.get("interim"):
                with open("%s/%d.interim" % (spec["out"], i), "w") as f:
                    for n, fields in zip(r["interim"], r["interim_fields"]):
                        f.write("%d\n" % n)
                        f.write("".join("%s: %s\n" % kv for kv in fields))
        if spec.get("then") == "grease control":
            # A reserved frame type (0x1f * 3 + 0x21, RFC 9114 §7.2.8) of
            # 64 KiB on the control stream, then its end.
            h3 = client.h3
            frame = bytes([0x40, 0x7E, 0x80, 0x01, 0x00, 0x00]) + bytes(65536)
            client._quic.send_stream_data(h3._local_control_stream_id, frame, end_stream=True)
            client.transmit()
        elif spec.get("then") == "open push":
            # A push stream (type 0x01, push ID 0): only servers push.
            sid = client._quic.get_next_available_stream_id(is_unidirectional=True)
            client._quic.send_stream_data(sid, b"\x01\x00")
            client.transmit()
        elif spec.get("then"):
            kind, which = spec["then"].split()
            h3 = client.h3
            sid = {
                "control": h3._local_control_stream_id,
                "encoder": h3._local_encoder_stream_id,
                "decoder": h3._local_decoder_stream_id,
                "server-control": h3._peer_control_stream_id,
            }[which]
            if kind == "reset":
                client._quic.reset_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
            elif kind == "finish":
                client._quic.send_stream_data(sid, b"", end_stream=True)
            else:
                client._quic.stop_stream(sid, 0x10C)
            client.transmit()
        if spec.get("wait_close") or spec.get("then"):
            # Say so, then wait for the server to close the connection
            # (a graceful shutdown: GOAWAY, then CONNECTION_CLOSE).
            # With "ping": a QUIC PING every tenth of a second meanwhile,
            # as a client holding an idle connection open would send.
            print("answered", flush=True)
            for i in range(spec.get("timeout", 30) * 10):
                if client.closed:
                    break
                if spec.get("ping"):
                    client._quic.send_ping(i)
                    client.transmit()
                await asyncio.sleep(0.1)
            print(client.closed or "still open", flush=True)


asyncio.run(main())
