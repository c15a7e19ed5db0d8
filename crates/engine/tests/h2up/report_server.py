"""An h2c upstream (python-hyper's h2) that answers each request with what
crossed the connection, for crates/engine/tests/proxy_request_trailers.rs.

argv: PORT_FILE. Listens on 127.0.0.1:0, writes its port into PORT_FILE.
Each request, once its stream ended, is answered 200 with three lines:

    body N
    trailers name: value; name: value     (or "trailers none")
    end trailers | end data N | end headers

"end" names the frame that carried END_STREAM: a trailing HEADERS
(trailers), a DATA of N bytes (0: an empty one after the body), or the
request's HEADERS (no body at all).
"""

import os
import socket
import sys
import threading

import h2.config
import h2.connection
import h2.events


def serve(sock):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    got = {}
    while True:
        data = sock.recv(65536)
        if not data:
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                got[ev.stream_id] = {"body": 0, "trailers": None, "end": "headers"}
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                r = got[ev.stream_id]
                r["body"] += len(ev.data)
                r["end"] = "data %d" % len(ev.data)
            elif isinstance(ev, h2.events.TrailersReceived):
                r = got[ev.stream_id]
                r["trailers"] = "; ".join("%s: %s" % (n, v) for n, v in ev.headers)
                r["end"] = "trailers"
            elif isinstance(ev, h2.events.StreamEnded):
                r = got.pop(ev.stream_id)
                text = "body %d\ntrailers %s\nend %s\n" % (r["body"], r["trailers"] or "none", r["end"])
                body = text.encode()
                c.send_headers(ev.stream_id, [(":status", "200"), ("content-type", "text/plain"),
                                              ("content-length", str(len(body)))])
                c.send_data(ev.stream_id, body, end_stream=True)
        out = c.data_to_send()
        if out:
            sock.sendall(out)
    sock.close()


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=serve, args=(sock,), daemon=True).start()


main()
