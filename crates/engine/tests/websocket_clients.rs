//! WebSocket with clients we did not write, on the `ws_echo` example
//! (which echoes every message on `/echo` and serves a page on `/`): over
//! HTTP/1.1 (RFC 6455), Python's `websockets`, Node.js's `ws`, Go's
//! `github.com/coder/websocket`, Rust's `tungstenite` and headless
//! Chromium; over HTTP/2 (RFC 8441), python-hyper's `h2` (cleartext,
//! several WebSockets on one connection) and Chromium (over TLS, where it
//! opens the page's WebSocket on the page's HTTP/2 connection); over
//! HTTP/3 (RFC 9220), aioquic (its QUIC and HTTP/3, our frames).
//!
//! The scripts are in `tests/ws_clients/`. Each prints `ok: CHECK` for
//! every check it passed and exits 0 only if all did; a test asserts both
//! the exit and every check's line, so a client that skipped a check fails.
//! What a client needs is installed by the test itself, once per machine
//! (`test_support::install`: a venv from PyPI, `npm ci`, `go build`, and
//! Debian's Chromium and Node.js), into `CARGO_TARGET_TMPDIR`; an install
//! that fails fails its test with the installer's message.
//!
//! `PEREGRINE_WS_ECHO_URL=ws://HOST:PORT/echo` points every test at that
//! server instead of starting `ws_echo` (a stand-in while developing; the
//! browser test loads `http://HOST:PORT/` from it).

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use test_support::install::{self, Program};
use test_support::process::{last_addr, Process};
use test_support::PATIENCE;
use tungstenite::protocol::frame::coding::{Data, OpCode};
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// How long one client may run before it is killed: a bound for a hung
/// client, never a pass condition. Each client waits at most 10 s for any
/// one answer and then says what it waited for; Chromium's driver gives up
/// after 60 s.
const CLIENT_TIMEOUT_SECS: u32 = 90;

/// The checks every scripted client prints a line for, in order.
const CHECKS: &[&str] = &[
    "connect",
    "text",
    "binary",
    "empty text",
    "empty binary",
    "1 MiB less 1 KiB binary",
    "fragmented text",
    "ping",
    "close 1000",
];

#[test]
fn python_websockets_echoes_and_closes_cleanly() {
    let python = install::websockets_python(&tmp("websockets-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's websockets: {e}"));
    let echo = Echo::start();
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("client.py")).arg(echo.url());
    run_client("Python websockets", &mut cmd, CHECKS);
    echo.stop();
}

/// The same checks with permessage-deflate agreed (websockets offers it
/// by default; `ws_echo --deflate` takes it): every message both ways
/// compressed, the 1 MiB one inflating to just under the server's limit.
#[test]
fn python_websockets_echoes_compressed_messages_with_permessage_deflate() {
    let python = install::websockets_python(&tmp("websockets-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's websockets: {e}"));
    let echo = Echo::spawn(&["--deflate".as_ref()]);
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("client.py")).arg(echo.url());
    let said = run_client("Python websockets (permessage-deflate)", &mut cmd, CHECKS);
    assert!(
        said.contains("ok: connect (extensions: ['permessage-deflate'])"),
        "permessage-deflate was not agreed:\n{said}"
    );
    echo.stop();
}

#[test]
fn node_ws_echoes_fragments_around_a_ping_and_closes_cleanly() {
    let (node, npm) = node_and_npm();
    let modules = install::npm_modules(node, npm, &client_dir(), &tmp("ws-node-modules"))
        .unwrap_or_else(|e| panic!("this test needs Node.js's ws: {e}"));
    let echo = Echo::start();
    let mut cmd = Command::new(node);
    cmd.arg(client_dir().join("client.js"))
        .arg(echo.url())
        .env("NODE_PATH", modules);
    let mut checks = CHECKS.to_vec();
    checks.push("ping between fragments");
    run_client("Node.js ws", &mut cmd, &checks);
    echo.stop();
}

#[test]
fn go_coder_websocket_echoes_and_closes_cleanly() {
    let program = install::go()
        .and_then(|go| install::go_build(&go, &client_dir().join("go"), &tmp("ws-client-go"), "ws-client-go"))
        .unwrap_or_else(|e| panic!("this test needs Go's github.com/coder/websocket: {e}"));
    let echo = Echo::start();
    let mut cmd = Command::new(program);
    cmd.arg(echo.url());
    run_client("Go coder/websocket", &mut cmd, CHECKS);
    echo.stop();
}

/// Chromium loads `/`, whose script sends a text, a binary and a 100 KB
/// text at once, checks the echoes and their order, closes with 1000 and
/// checks that the server answered 1000 cleanly; its verdict is read
/// through the DevTools protocol once the page has it (ws_clients/chromium.mjs).
#[test]
fn chromium_page_echoes_text_and_binary_and_closes_cleanly() {
    let (chromium, node) = chromium_and_node();
    let echo = Echo::start();
    let mut cmd = Command::new(node);
    cmd.arg(client_dir().join("chromium.mjs"))
        .arg(chromium)
        .arg(format!("http://{}/", echo.addr));
    // The page's log, which the driver prints, has a line for each.
    let said = run_client("Chromium", &mut cmd, &["text", "binary", "100 KB text", "close 1000"]);
    assert!(
        said.contains("websocket handshake answered 101"),
        "over HTTP/1.1, an upgrade:\n{said}"
    );
    echo.stop();
}

/// The same page over HTTPS: Chromium loads it over HTTP/2 (ALPN) and,
/// the server's SETTINGS enabling extended CONNECT, opens the WebSocket
/// as a stream of that connection (RFC 8441), which DevTools reports as a
/// handshake answered 200 (a 101 would be HTTP/1.1's upgrade).
#[test]
fn chromium_page_echoes_over_http2() {
    let (chromium, node) = chromium_and_node();
    let cert = test_support::pki::SelfSigned::new("ws-h2", &["127.0.0.1"]);
    let echo = Echo::start_tls(&cert);
    let mut cmd = Command::new(node);
    cmd.arg(client_dir().join("chromium.mjs"))
        .arg(chromium)
        .arg(format!("https://{}/", echo.addr));
    let said = run_client("Chromium", &mut cmd, &["text", "binary", "100 KB text", "close 1000"]);
    assert!(
        said.contains("websocket handshake answered 200"),
        "over HTTP/2, an extended CONNECT's 200:\n{said}"
    );
    echo.stop();
}

/// python-hyper's `h2` opens WebSockets with extended CONNECT on a
/// cleartext HTTP/2 connection: the setting, echoes of every kind and
/// size (the 1 MiB one through both flow-control windows), fragments
/// around a ping, two WebSockets on one connection and one reset, a
/// CONNECT to a page and a GET of the WebSocket refused, and the closing
/// handshake ended by END_STREAM (ws_clients/h2_client.py).
#[test]
fn python_h2_opens_websockets_over_http2() {
    let python = install::h2_python(&tmp("h2-venv")).unwrap_or_else(|e| panic!("this test needs Python's h2: {e}"));
    let echo = Echo::start();
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("h2_client.py")).arg(&echo.addr);
    run_client(
        "Python h2",
        &mut cmd,
        &[
            "settings enable connect protocol",
            "connect",
            "text",
            "binary",
            "empty text",
            "1 MiB less 1 KiB binary",
            "ping between fragments",
            "fragmented text",
            "two websockets on one connection",
            "reset of one leaves the other",
            "connect elsewhere refused",
            "get refused (400)",
            "ping",
            "close 1000",
        ],
    );
    echo.stop();
}

/// aioquic opens WebSockets with extended CONNECT over HTTP/3 (RFC 9220)
/// on the TLS address's QUIC side: the setting, echoes of every kind and
/// size (the 1 MiB one through the stream's 256 KiB window and the 64 KiB
/// the server reads ahead), fragments
/// around a ping, two WebSockets on one connection and one reset, one
/// ended by the client's FIN without a Close (the server ends its side),
/// a CONNECT to a page and a GET of the WebSocket refused, and the
/// closing handshake ended by the server's FIN (ws_clients/h3_client.py).
#[test]
fn aioquic_opens_websockets_over_http3() {
    let python =
        install::aioquic_python(&tmp("aioquic-venv")).unwrap_or_else(|e| panic!("this test needs aioquic: {e}"));
    let cert = test_support::pki::SelfSigned::new("ws-h3", &["127.0.0.1"]);
    let echo = Echo::start_tls(&cert);
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("h3_client.py")).arg(&echo.addr);
    run_client(
        "aioquic",
        &mut cmd,
        &[
            "settings enable connect protocol",
            "connect",
            "text",
            "binary",
            "empty text",
            "empty binary",
            "1 MiB less 1 KiB binary",
            "ping between fragments",
            "fragmented text",
            "two websockets on one connection",
            "reset of one leaves the other",
            "fin without close ends the stream",
            "connect elsewhere refused",
            "get refused (400)",
            "ping",
            "close 1000",
        ],
    );
    echo.stop();
}

#[test]
fn tungstenite_echoes_frames_pings_and_closes_cleanly() {
    let echo = Echo::start();
    let stream = TcpStream::connect(&echo.addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let (mut ws, response) = tungstenite::client(echo.url(), stream).unwrap_or_else(|e| panic!("the handshake: {e}"));
    assert_eq!(response.status(), 101);
    let mut echoes = |sent: Message| {
        ws.send(sent.clone()).unwrap();
        let got = ws.read().unwrap();
        assert!(got == sent, "sent {}, the echo was {}", describe(&sent), describe(&got));
    };
    echoes(Message::text("hello, peregrine \u{2713} \u{1F985}"));
    echoes(Message::binary((0..=255u8).cycle().take(1024).collect::<Vec<u8>>()));
    echoes(Message::text(""));
    echoes(Message::binary(Vec::new()));
    let big: Vec<u8> = (0..(1usize << 20) - 1024).map(|i| (i * 31 + (i >> 10)) as u8).collect();
    echoes(Message::binary(big));

    // "fragmented é ✓ end" in three frames, each cut inside a character
    // (RFC 6455 §5.6: "the whole message contains valid UTF-8"), with a
    // ping between two of them (§5.4: "Control frames MAY be injected in
    // the middle of a fragmented message"): the pong comes first.
    let frame = |bytes: &[u8], opcode: Data, fin: bool| {
        Message::Frame(Frame::message(bytes.to_vec(), OpCode::Data(opcode), fin))
    };
    ws.send(frame(b"fragmented \xc3", Data::Text, false)).unwrap();
    ws.send(Message::Ping("between".into())).unwrap();
    ws.send(frame(b"\xa9 \xe2\x9c", Data::Continue, false)).unwrap();
    ws.send(frame(b"\x93 end", Data::Continue, true)).unwrap();
    assert_eq!(ws.read().unwrap(), Message::Pong("between".into()));
    assert_eq!(ws.read().unwrap(), Message::text("fragmented \u{e9} \u{2713} end"));

    ws.send(Message::Ping("peregrine ping".into())).unwrap();
    assert_eq!(ws.read().unwrap(), Message::Pong("peregrine ping".into()));

    // The close: ours with 1000, the server's with 1000, then the server
    // closes the TCP connection (RFC 6455 §7.1.1: "the underlying TCP
    // connection, in most normal cases, SHOULD be closed first by the
    // server"), which tungstenite reports as ConnectionClosed.
    ws.close(Some(CloseFrame {
        code: 1000.into(),
        reason: "bye".into(),
    }))
    .unwrap();
    match ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(u16::from(frame.code), 1000, "the server's close: {frame:?}"),
        other => panic!("the server's close, not {other:?}"),
    }
    match ws.read() {
        Err(tungstenite::Error::ConnectionClosed) => {}
        other => panic!("the end of the connection, not {other:?}"),
    }
    assert_eq!(
        ws.get_mut().read(&mut [0; 1]).unwrap(),
        0,
        "the server closed the connection"
    );
    echo.stop();
}

/// A message in a line: its kind, length and first bytes.
fn describe(message: &Message) -> String {
    let head = |bytes: &[u8]| bytes[..bytes.len().min(40)].escape_ascii().to_string();
    match message {
        Message::Text(text) => format!("text of {} bytes (\"{}\"...)", text.len(), head(text.as_bytes())),
        Message::Binary(bytes) => format!("binary of {} bytes (\"{}\"...)", bytes.len(), head(bytes)),
        other => format!("{other:?}"),
    }
}

/// The echo server under test: the `ws_echo` example, started on a free
/// port, or the one `PEREGRINE_WS_ECHO_URL` names.
struct Echo {
    server: Option<Process>,
    /// `host:port`.
    addr: String,
}

impl Echo {
    /// `ws_echo` over HTTPS with `cert` (never `PEREGRINE_WS_ECHO_URL`'s).
    fn start_tls(cert: &test_support::pki::SelfSigned) -> Echo {
        let args = [
            "--tls-cert".as_ref(),
            cert.cert.as_os_str(),
            "--tls-key".as_ref(),
            cert.key.as_os_str(),
        ];
        Echo::spawn(&args)
    }

    fn start() -> Echo {
        if let Ok(url) = std::env::var("PEREGRINE_WS_ECHO_URL") {
            let addr = url
                .strip_prefix("ws://")
                .and_then(|rest| rest.strip_suffix("/echo"))
                .unwrap_or_else(|| panic!("PEREGRINE_WS_ECHO_URL={url:?} is not ws://HOST:PORT/echo"));
            return Echo {
                server: None,
                addr: addr.to_owned(),
            };
        }
        Echo::spawn(&[])
    }

    fn spawn(args: &[&std::ffi::OsStr]) -> Echo {
        // `target/<profile>/examples/ws_echo`, next to `deps/` where this
        // test runs from.
        let exe = std::env::current_exe().unwrap();
        let example = exe.parent().unwrap().parent().unwrap().join("examples/ws_echo");
        assert!(
            example.is_file(),
            "no {}: `cargo test` builds the examples, but not when told `--test websocket_clients` alone \
             (then first: cargo build -p peregrine --example ws_echo)",
            example.display()
        );
        let mut cmd = Command::new(example);
        cmd.env_remove("PEREGRINE_BIND")
            .args(["--bind", "127.0.0.1:0"])
            .args(args);
        let server = Process::spawn_stdout(&mut cmd);
        let line = server.first_line();
        assert!(line.starts_with("listening on http"), "first line: {line:?}");
        Echo {
            addr: last_addr(&line),
            server: Some(server),
        }
    }

    fn url(&self) -> String {
        format!("ws://{}/echo", self.addr)
    }

    /// A graceful exit after SIGTERM, with the clients gone.
    fn stop(self) {
        if let Some(server) = self.server {
            server.terminate();
        }
    }
}

/// Runs a client to its end (bounded by `CLIENT_TIMEOUT_SECS`): it must exit
/// 0 having printed `ok: CHECK` (or `ok: CHECK (details)`) for each of
/// `checks`. Returns what it printed.
fn run_client(name: &str, cmd: &mut Command, checks: &[&str]) -> String {
    let said = test_support::process::run_checks(name, cmd, checks, CLIENT_TIMEOUT_SECS);
    println!("{said}");
    said
}

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ws_clients")
}

/// Where installed clients are kept between runs: `target/tmp/NAME`.
fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Node.js and npm, found or installed once per test binary.
fn node_and_npm() -> (&'static Path, &'static Path) {
    static FOUND: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| install::find_or_install(&[NODE, NPM]));
    match found {
        Ok(p) => (&p[0], &p[1]),
        Err(why) => panic!("this test needs Node.js and npm (or PEREGRINE_NODE / PEREGRINE_NPM): {why}"),
    }
}

/// Chromium and Node.js (which drives it), found or installed once per
/// test binary.
fn chromium_and_node() -> (&'static Path, &'static Path) {
    static FOUND: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        install::find_or_install(&[
            Program {
                var: "PEREGRINE_CHROMIUM",
                names: &["chromium", "chromium-browser"],
                package: "chromium",
            },
            NODE,
        ])
    });
    match found {
        Ok(p) => (&p[0], &p[1]),
        Err(why) => panic!("this test needs Chromium and Node.js (or PEREGRINE_CHROMIUM / PEREGRINE_NODE): {why}"),
    }
}

const NODE: Program = Program {
    var: "PEREGRINE_NODE",
    names: &["node", "nodejs"],
    package: "nodejs",
};

const NPM: Program = Program {
    var: "PEREGRINE_NPM",
    names: &["npm"],
    package: "npm",
};
