"""A deliberately lenient HTTP/1.x upstream for tests/proxy_lenient.rs:
Python's http.server, which takes nearly any framing it is given, and
answers the old ways (HTTP/1.0 and close-delimited bodies, no
Content-Length). Each request it reads is printed as one line,
`REQ method path version body-hex framing`, where framing is `cl=N`,
`chunked` or `none` (the fields it found, not how it read them); the
first line printed is the port."""

import http.server
import socketserver
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        cl = self.headers.get("Content-Length")
        if "chunked" in te.lower():
            body = b""
            while True:
                size = self.rfile.readline().split(b";")[0].strip()
                n = int(size or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body, "chunked"
                body += self.rfile.read(n)
                self.rfile.readline()
        if cl is not None:
            return self.rfile.read(int(cl)), "cl=" + cl.strip()
        return b"", "none"

    def handle_any(self):
        body, framing = self.read_body()
        print("REQ", self.command, self.path, self.request_version, body.hex() or "-", framing, flush=True)
        last = self.path.rsplit("/", 1)[-1]
        if last == "close10":
            # HTTP/1.0, no Content-Length: the body ends at the close.
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close")
            self.close_connection = True
        elif last == "nolength11":
            # HTTP/1.1 without a length or Connection: close.
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nno length either")
            self.close_connection = True
        elif last == "keepalive10":
            # HTTP/1.0 with a length and keep-alive.
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\nkept")
            self.close_connection = True
        else:
            data = body or b"-"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = do_OPTIONS = do_PATCH = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)
