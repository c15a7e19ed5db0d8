"""An HTTP/3 client for the tests, on aioquic's H3Connection (an
implementation independent of ours): sends the requests given as JSON on
stdin over one QUIC connection, all at once, and prints one JSON object
per response, in request order: status, headers, body (base64), or the
error that ended the stream or the connection.

stdin: {"host": "127.0.0.1", "port": 4433, "requests": [{"method": "GET",
"path": "/", "headers": [["name", "value"]], "body": "base64"}],
"timeout": 30}
"""

import asyncio
import base64
import json
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        self.waiters = {}
        self.closed = None

    def request(self, method, path, authority, headers, body):
        sid = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.encode(), v.encode()) for k, v in headers]
        self.h3.send_headers(sid, fields, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        self.streams[sid] = {"status": None, "headers": [], "body": b"", "error": None}
        fut = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        self.transmit()
        return fut

    def finish(self, sid):
        fut = self.waiters.pop(sid, None)
        if fut is not None and not fut.done():
            fut.set_result(self.streams[sid])

    def quic_event_received(self, event):
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
                for k, v in ev.headers:
                    if k == b":status":
                        s["status"] = int(v)
                    else:
                        s["headers"].append([k.decode(), v.decode()])
            elif isinstance(ev, DataReceived):
                s["body"] += ev.data
            if getattr(ev, "stream_ended", False):
                self.finish(ev.stream_id)


async def main():
    spec = json.load(sys.stdin)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = spec.get("server_name", "localhost")
    authority = "%s:%d" % (spec.get("server_name", "localhost"), spec["port"])
    async with connect(spec["host"], spec["port"], configuration=config, create_protocol=Client) as client:
        futs = [
            client.request(
                r.get("method", "GET"),
                r["path"],
                authority,
                r.get("headers", []),
                base64.b64decode(r.get("body", "")),
            )
            for r in spec["requests"]
        ]
        results = await asyncio.wait_for(asyncio.gather(*futs), spec.get("timeout", 30))
        for r in results:
            out = dict(r)
            out["body"] = base64.b64encode(r["body"]).decode()
            print(json.dumps(out), flush=True)


asyncio.run(main())
