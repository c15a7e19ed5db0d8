"""A gRPC client for the h2c upstream tests, on grpcio: calls pkg.Echo
(tests/grpc/server.py) at argv[1] (host:port, cleartext HTTP/2 by prior
knowledge: Peregrine's port) and prints one line per call."""

import sys

import grpc

ch = grpc.insecure_channel(sys.argv[1])
T = 20


def call(name, fn):
    try:
        print(name, fn())
    except grpc.RpcError as e:
        print(name, "error", e.code().name, e.details())
    sys.stdout.flush()


call("unary", lambda: ch.unary_unary("/pkg.Echo/Unary")(b"hello", timeout=T).decode())
call("server-stream", lambda: [m.decode() for m in ch.unary_stream("/pkg.Echo/ServerStream")(b"3", timeout=T)])
call("client-stream", lambda: ch.stream_unary("/pkg.Echo/ClientStream")(iter([b"a", b"b", b"c"]), timeout=T).decode())
call("bidi", lambda: [m.decode() for m in ch.stream_stream("/pkg.Echo/Bidi")(iter([b"x", b"y", b"z"]), timeout=T)])
call("big", lambda: len(ch.unary_unary("/pkg.Echo/Unary")(b"b" * 3_000_000, timeout=T)))
call("fail", lambda: ch.unary_unary("/pkg.Echo/Fail")(b"", timeout=T))
call("stream-fail", lambda: [m.decode() for m in ch.unary_stream("/pkg.Echo/ServerStream")(b"fail", timeout=T)])
call("slow", lambda: ch.unary_unary("/pkg.Echo/Slow")(b"", timeout=0.5))
