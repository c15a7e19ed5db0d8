//! WebSockets from HTTP/3 clients through `serve --proxy` (RFC 9220's
//! extended CONNECT become HTTP/1.1 upgrades to the upstream, issue 26),
//! judged by aioquic (`crates/engine/tests/ws_clients/proxy_h3_client.py`,
//! its QUIC, HTTP/3 and WebSocket framing `h3_client.py`'s). The
//! upstreams: the engine's WebSocket echo (HTTP/1.1, in this process) and
//! a raw socket answering what a WebSocket client must refuse. Installs
//! aioquic as the HTTP/3 tests do (`test_support::install`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::thread;

use common::Scratch;
use peregrine::{ws, Reply, Request, Running, Server};
use test_support::process::Process;

/// How long the scripted client may run before it is killed: a bound for
/// a hung client, never a pass condition.
const CLIENT_TIMEOUT_SECS: u32 = 120;

/// The engine's WebSocket echo (subprotocol `chat` if offered), which
/// closes with 1000 when it gets the text "bye".
fn echo_upstream() -> Running {
    let options = ws::Options::new().protocol("chat").allow_origin("*");
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .http2(false)
        .start(move |req: &Request<'_>| -> Reply {
            ws::upgrade(req, &options, |ws: &mut ws::Socket<'_>, msg: ws::Message<'_>| {
                if let ws::Message::Text("bye") = msg {
                    ws.close(1000, "bye");
                } else {
                    let _ = ws.send(msg);
                }
            })
        })
        .expect("the upstream starts")
}

/// An upstream that answers a WebSocket opening for `/raw/page` with a
/// page (200) and any other with a 101 whose `Sec-WebSocket-Accept` is not
/// the key's; each connection then closes.
fn refusing_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                head.push(std::mem::take(&mut line));
            }
            let answer = match head.first() {
                Some(l) if l.starts_with("GET /raw/page ") => {
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 11\r\n\r\nnot frames\n"
                }
                _ => {
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                     Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n"
                }
            };
            let mut out = stream;
            let _ = out.write_all(answer.as_bytes());
        }
    });
    addr
}

/// `serve DIR --http3` with `/ws/` proxied to the engine's echo and
/// `/raw/` to the refusing upstream, with metrics; and its upstreams,
/// which live as long as it.
struct Proxy {
    server: Process,
    /// `host:port` of its HTTPS (and HTTP/3) listener.
    addr: String,
    metrics: String,
    _echo: Running,
    _cert: test_support::pki::SelfSigned,
    _dir: Scratch,
}

impl Proxy {
    fn start(tag: &str) -> Proxy {
        let echo = echo_upstream();
        let raw = refusing_upstream();
        let dir = Scratch::new(tag);
        dir.write("site/index.html", "home\n");
        let cert = test_support::pki::SelfSigned::new(tag, &["localhost", "127.0.0.1"]);
        let server = Process::spawn(
            common::peregrine()
                .current_dir(dir.dir())
                .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--http3"])
                .args(["--metrics", "127.0.0.1:0"])
                .arg("--tls-cert")
                .arg(&cert.cert)
                .arg("--tls-key")
                .arg(&cert.key)
                .arg("--proxy")
                .arg(format!("/ws/=http://{}", echo.local_addr()))
                .arg("--proxy")
                .arg(format!("/raw/=http://{raw}")),
        );
        let metrics = common::metrics_addr(&server.line("metrics on http://"));
        let addr = common::last_addr(&server.line("https://"));
        Proxy {
            server,
            addr,
            metrics,
            _echo: echo,
            _cert: cert,
            _dir: dir,
        }
    }

    /// Runs `proxy_h3_client.py` in `mode` against it: it must pass
    /// `checks`.
    fn client(&self, mode: &str, checks: &[&str]) {
        let python =
            test_support::install::aioquic_python(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv"))
                .unwrap_or_else(|e| panic!("this test needs aioquic: {e}"));
        let mut cmd = Command::new(python);
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/ws_clients/proxy_h3_client.py"))
            .args([&self.addr, mode]);
        test_support::process::run_checks("aioquic", &cmd, checks, CLIENT_TIMEOUT_SECS);
    }

    fn sample(&self, name: &str) -> u64 {
        test_support::sample(&common::get(&self.metrics, "/metrics"), name)
    }

    /// Every tunnel opened is closed, its upstream socket with it (the
    /// reset one's when the server reads the reset): `opened` of them.
    fn all_closed(&self, opened: u64) {
        assert_eq!(self.sample("peregrine_proxy_websockets_opened_total"), opened);
        test_support::wait_until("every tunnel closed", || {
            self.sample("peregrine_proxy_websockets_open") == 0
        });
    }
}

/// aioquic opens WebSockets over HTTP/3 through `serve DIR --proxy`: the
/// proxy makes the key, the 200 carries the upstream's subprotocol (and
/// no accept value, no connection-specific field), and echoes of text and
/// binary, one over 64 KiB and one of 1 MiB, cross the stream's window
/// and the proxy's buffers both ways; a second WebSocket beside the
/// first.
#[test]
fn websockets_from_http3_clients_echo_through_serve_proxy() {
    let proxy = Proxy::start("proxy-ws-h3-echo");
    proxy.client(
        "echoes",
        &[
            "settings enable connect protocol",
            "connect",
            "subprotocol",
            "text",
            "binary",
            "text over 64 KiB",
            "1 MiB less 1 KiB binary",
            "two websockets on one connection",
        ],
    );
    proxy.all_closed(2);
    proxy.server.terminate();
}

/// An upstream's 200 to the WebSocket opening, and a 101 with a wrong
/// `Sec-WebSocket-Accept`, are 502s to an HTTP/3 client's extended
/// CONNECT: each stream is answered and ended, and the connection goes on
/// (a page, and the WebSocket open beside them).
#[test]
fn an_http3_websocket_the_upstream_does_not_switch_gets_502_and_the_connection_goes_on() {
    let proxy = Proxy::start("proxy-ws-h3-refused");
    proxy.client(
        "refusals",
        &[
            "a 200 to the extended CONNECT is a 502",
            "a wrong accept value is a 502",
            "the connection goes on",
        ],
    );
    proxy.all_closed(1);
    proxy.server.terminate();
}

/// Each side's end of an HTTP/3 tunnel reaches the other: the client's
/// FIN is the upstream's (whose close ends the stream with FIN), the
/// client's reset closes the upstream socket, and the upstream's close
/// reaches the client as its Close and the stream's FIN.
#[test]
fn either_sides_end_of_an_http3_websocket_through_the_proxy_ends_both() {
    let proxy = Proxy::start("proxy-ws-h3-ends");
    proxy.client(
        "ends",
        &[
            "client fin ends the tunnel",
            "reset of one leaves the other",
            "upstream close ends the stream",
        ],
    );
    proxy.all_closed(3);
    proxy.server.terminate();
}
