"""A gRPC service for the h2c upstream tests, on grpcio (an implementation
independent of ours), with no generated code: its methods take and give
raw bytes. Listens on 127.0.0.1 (an ephemeral port; over TLS with the
certificate and key files argv[1] and argv[2] if given), prints the port, then
serves until stdin closes; prints "cancelled endless" when an endless
stream ends because its client cancelled it (the proxy's
RST_STREAM(CANCEL)).

pkg.Echo/Unary          echoes the request
pkg.Echo/ServerStream   "N": N messages "msg 0".."msg N-1"; "fail": one
                        message, then NOT_FOUND "gone" (status in trailers
                        after data); "endless": a message every 50 ms
                        until cancelled
pkg.Echo/Flood          64 messages of 256 KiB, printing "flood I" before
                        each (how far a client that does not read lets
                        it get)
pkg.Echo/ClientStream   the requests joined
pkg.Echo/Bidi           each request echoed as it comes
pkg.Echo/Slow           waits 5 s (a shorter deadline passes first:
                        grpc-status 4, DEADLINE_EXCEEDED)
pkg.Echo/Fail           INVALID_ARGUMENT "bad input" (a trailers-only answer)
pkg.Echo/Metadata       echoes the request, with "x-seen-hello" (its
                        x-hello field) and "x-seen-forwarded-for" in its
                        trailers
"""

import sys
import time
from concurrent import futures

import grpc


def unary(req, ctx):
    return req


def server_stream(req, ctx):
    if req == b"fail":
        yield b"one"
        ctx.abort(grpc.StatusCode.NOT_FOUND, "gone")
    if req == b"endless":
        # Called when the call ends, which for this one is its client's
        # cancel (grpcio stops resuming the generator then).
        ctx.add_callback(lambda: print("cancelled endless", flush=True))
        i = 0
        while ctx.is_active():
            yield b"tick %d" % i
            i += 1
            time.sleep(0.05)
        return
    for i in range(int(req)):
        yield b"msg %d" % i


def flood(req, ctx):
    for i in range(64):
        print("flood %d" % i, flush=True)
        yield b"f" * 262144


def client_stream(requests, ctx):
    return b"".join(requests)


def bidi(requests, ctx):
    for r in requests:
        yield r


def slow(req, ctx):
    end = time.time() + 5
    while ctx.is_active() and time.time() < end:
        time.sleep(0.02)
    return req


def fail(req, ctx):
    ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input")


def metadata(req, ctx):
    seen = dict(ctx.invocation_metadata())
    ctx.set_trailing_metadata(
        (
            ("x-seen-hello", seen.get("x-hello", "-")),
            ("x-seen-forwarded-for", seen.get("x-forwarded-for", "-")),
        )
    )
    return req


handlers = {
    "Unary": grpc.unary_unary_rpc_method_handler(unary),
    "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
    "Flood": grpc.unary_stream_rpc_method_handler(flood),
    "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
    "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
    "Slow": grpc.unary_unary_rpc_method_handler(slow),
    "Fail": grpc.unary_unary_rpc_method_handler(fail),
    "Metadata": grpc.unary_unary_rpc_method_handler(metadata),
}
server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("pkg.Echo", handlers),))
if len(sys.argv) > 2:
    # argv[1], argv[2]: a certificate and its key (PEM): TLS, ALPN h2.
    with open(sys.argv[1], "rb") as c, open(sys.argv[2], "rb") as k:
        creds = grpc.ssl_server_credentials([(k.read(), c.read())])
    port = server.add_secure_port("127.0.0.1:0", creds)
else:
    port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
