"""An h2c upstream (python-hyper's h2, no gRPC) that misbehaves the way
RFC 9113 §8.7 allows, for crates/engine/tests/proxy_h2_retry.rs.

argv: PORT_FILE LOG_FILE. Listens on 127.0.0.1:0, writes its port into
PORT_FILE; appends "conn N stream S METHOD PATH" to LOG_FILE for each
request it sees (before deciding what to do with it).

On its first connection only, a request whose path starts with /hold is
held unanswered until a second stream arrives (its HEADERS for a GET,
its first DATA for a POST); then the held one is answered and GOAWAY
with last_stream_id = that held stream follows, the second stream left
unprocessed. /refused-once is refused (RST_STREAM REFUSED_STREAM) the
first time it is seen, /refused-always every time. Everything else is
answered 200 with "conn N stream S METHOD PATH" once its request ended.

A path starting with /close-after-goaway is answered, the first time it
is seen, with GOAWAY(last_stream_id=0) and the connection's close at once
(a FIN right behind the GOAWAY, so the proxy often reads both in one
go); /close-after-refusal likewise with RST_STREAM REFUSED_STREAM, then
the close. Seen again, each is answered as everything else.
"""

import socket
import sys
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events

lock = threading.Lock()
conns = 0
seen = {}


def log(line):
    with lock, open(sys.argv[2], "a") as f:
        f.write(line + "\n")


def answer(c, sid, text):
    body = text.encode()
    c.send_headers(sid, [(":status", "200"), ("content-type", "text/plain"), ("content-length", str(len(body)))])
    c.send_data(sid, body, end_stream=True)


def close_at_once(sock):
    """A FIN right behind what was sent; what the proxy still sends is
    drained (unread bytes at close would make it a reset instead)."""
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    sock.close()


def serve(sock, n):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    reqs = {}
    held = None
    gone = False
    while True:
        data = sock.recv(65536)
        if not data:
            break
        if gone:
            continue  # after our GOAWAY: drain, process nothing
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                h = dict(ev.headers)
                method, path = h[":method"], h[":path"]
                reqs[ev.stream_id] = (method, path)
                log("conn %d stream %d %s %s" % (n, ev.stream_id, method, path))
                if path.startswith("/close-after-"):
                    with lock:
                        seen[path] = seen.get(path, 0) + 1
                        k = seen[path]
                    if k == 1:
                        if path.startswith("/close-after-goaway"):
                            c.close_connection(error_code=0, last_stream_id=0)
                        else:
                            c.reset_stream(ev.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                        sock.sendall(c.data_to_send())
                        close_at_once(sock)
                        return
                elif n == 1 and path.startswith("/hold") and held is None:
                    held = ev.stream_id
                elif held is not None and method == "GET":
                    gone = True
                elif path.startswith("/refused"):
                    with lock:
                        seen[path] = seen.get(path, 0) + 1
                        k = seen[path]
                    if path == "/refused-always" or k == 1:
                        c.reset_stream(ev.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                        reqs[ev.stream_id] = None
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if held is not None and ev.stream_id != held:
                    gone = True
            elif isinstance(ev, h2.events.StreamEnded):
                r = reqs.get(ev.stream_id)
                if r is not None and ev.stream_id != held and not gone:
                    answer(c, ev.stream_id, "conn %d stream %d %s %s" % (n, ev.stream_id, r[0], r[1]))
            if gone:
                break
        if gone:
            method, path = reqs[held]
            answer(c, held, "conn %d stream %d %s %s" % (n, held, method, path))
            c.close_connection(error_code=0, last_stream_id=held)
        sock.sendall(c.data_to_send())
    sock.close()


def main():
    global conns
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    import os

    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        s, _ = ls.accept()
        conns += 1
        threading.Thread(target=serve, args=(s, conns), daemon=True).start()


main()
