"""One gRPC call by hand over HTTP/2 (python-hyper's h2, cleartext, prior
knowledge), so that what the proxy relays is seen as frames, not through a
gRPC library that would make up a status of its own (a client-side
deadline): argv[1] host, argv[2] port, argv[3] path, argv[4] the request
message (text, framed with gRPC's 5-byte prefix), then NAME=VALUE fields
to add. With argv[4] "-cancel" the stream is reset (CANCEL) after the
first DATA; with "-stall", "flood" is sent and nothing is read for 3 s.
Prints "status N", "header name: value", "message TEXT" per gRPC message
("message N bytes" past 64 bytes), "trailer name: value", then "ended"
or "reset CODE"."""

import socket
import struct
import sys

import h2.config
import h2.connection
import h2.errors
import h2.events

host, port, path, message = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cancel = message == "-cancel"
if cancel:
    message = "endless"
stall = message == "-stall"
if stall:
    message = "flood"
sock = socket.create_connection((host, port), timeout=30)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
fields = [
    (":method", "POST"),
    (":scheme", "http"),
    (":authority", "%s:%d" % (host, port)),
    (":path", path),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
] + [tuple(a.split("=", 1)) for a in sys.argv[5:]]
conn.send_headers(1, fields)
body = message.encode()
conn.send_data(1, struct.pack(">BI", 0, len(body)) + body, end_stream=True)
sock.sendall(conn.data_to_send())
if stall:
    import time

    time.sleep(3)
buf = b""
done = None
while done is None:
    data = sock.recv(65536)
    if not data:
        done = "closed"
        break
    for ev in conn.receive_data(data):
        if isinstance(ev, h2.events.ResponseReceived):
            for k, v in ev.headers:
                print("status %s" % v if k == ":status" else "header %s: %s" % (k, v))
        elif isinstance(ev, h2.events.DataReceived):
            buf += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            while len(buf) >= 5:
                n = struct.unpack(">I", buf[1:5])[0]
                if len(buf) < 5 + n:
                    break
                m = buf[5 : 5 + n]
                print("message %s" % (m.decode() if n <= 64 else "%d bytes" % n))
                buf = buf[5 + n :]
            if cancel:
                conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
                done = "cancelled"
        elif isinstance(ev, h2.events.TrailersReceived):
            for k, v in ev.headers:
                print("trailer %s: %s" % (k, v))
        elif isinstance(ev, h2.events.StreamEnded):
            done = "ended"
        elif isinstance(ev, h2.events.StreamReset):
            done = "reset %d" % ev.error_code
    sock.sendall(conn.data_to_send())
    sys.stdout.flush()
print(done)
