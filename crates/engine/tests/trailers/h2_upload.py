"""An HTTP/2 client (python-hyper's h2, cleartext, prior knowledge) for
the request trailer tests: sends one POST to argv[1]:argv[2] as argv[3]
says (JSON: "path", "body_len" bytes of "x", "content_length" true to
announce it, "headers" and "trailers" as [["name", "value"]]), the body
within the server's flow-control windows, then the trailers as a HEADERS
frame ending the stream; prints "status N", then "body TEXT", then
"ended" or "reset CODE"."""

import json
import socket
import sys

import h2.config
import h2.connection
import h2.events

spec = json.loads(sys.argv[3])
body = b"x" * spec["body_len"]
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
fields = [(":method", "POST"), (":scheme", "http"), (":authority", "a"), (":path", spec["path"])]
if spec.get("content_length"):
    fields.append(("content-length", str(len(body))))
fields += [tuple(f) for f in spec.get("headers", [])]
conn.send_headers(1, fields, end_stream=False)
sock.sendall(conn.data_to_send())
sent = 0
trailers_sent = False
answer = bytearray()
done = None
while done is None:
    # As much of the body as the windows allow, then the trailers.
    while sent < len(body):
        n = min(conn.local_flow_control_window(1), conn.max_outbound_frame_size, len(body) - sent)
        if n <= 0:
            break
        conn.send_data(1, body[sent : sent + n])
        sent += n
    if sent == len(body) and not trailers_sent:
        if spec["trailers"]:
            conn.send_headers(1, [tuple(f) for f in spec["trailers"]], end_stream=True)
        else:
            conn.end_stream(1)
        trailers_sent = True
    sock.sendall(conn.data_to_send())
    data = sock.recv(65536)
    if not data:
        done = "closed"
        break
    for ev in conn.receive_data(data):
        if isinstance(ev, h2.events.ResponseReceived):
            for k, v in ev.headers:
                if k == ":status":
                    print("status %s" % v)
        elif isinstance(ev, h2.events.DataReceived):
            answer += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            done = "ended"
        elif isinstance(ev, h2.events.StreamReset):
            done = "reset %d" % ev.error_code
    sock.sendall(conn.data_to_send())
print("body %s" % answer.decode())
print(done)
