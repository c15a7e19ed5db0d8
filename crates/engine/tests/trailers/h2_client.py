"""An HTTP/2 client (python-hyper's h2, cleartext, prior knowledge) for
the trailer tests: sends one GET to argv[1]:argv[2] for path argv[3],
prints what came as lines: "status N", "header name: value", "body N"
(bytes), "trailer name: value", then "ended" or "reset CODE"."""

import socket
import sys

import h2.config
import h2.connection
import h2.events

sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
conn.send_headers(
    1,
    [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", sys.argv[3])],
    end_stream=True,
)
sock.sendall(conn.data_to_send())
n_body = 0
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
            n_body += len(ev.data)
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            for k, v in ev.headers:
                print("trailer %s: %s" % (k, v))
        elif isinstance(ev, h2.events.StreamEnded):
            done = "ended"
        elif isinstance(ev, h2.events.StreamReset):
            done = "reset %d" % ev.error_code
    sock.sendall(conn.data_to_send())
print("body %d" % n_body)
print(done)
