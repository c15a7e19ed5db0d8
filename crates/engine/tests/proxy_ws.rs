//! WebSocket pass-through of the reverse proxy (`peregrine::proxy`, issue
//! 26): a Peregrine whose handler is a `Proxy` in front of an upstream.
//! The upstream is, by test, the engine's own WebSocket echo
//! (`ws::upgrade`, a second server in this process, HTTP/1.1 only) or a
//! raw socket that answers what the test needs (a wrong accept value, a
//! flood). Clients we did not write: Python's `websockets` over HTTP/1.1
//! (the `client.py` the WebSocket tests run), python-hyper's `h2` over
//! HTTP/2's extended CONNECT (`proxy_h2_client.py`) and aioquic over
//! HTTP/3's (`proxy_h3_client.py`, whose other checks
//! `crates/cli/tests/proxy_ws_h3.rs` runs through `serve --proxy`); the
//! rest is raw bytes. Installs as `websocket_clients.rs` does
//! (`test_support::install`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use common::PATIENCE;
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{ws, Metrics, Reply, Request, Response, Running, Server};
use test_support::install;

/// How long one scripted client may run before it is killed: a bound for
/// a hung client, never a pass condition.
const CLIENT_TIMEOUT_SECS: u32 = 90;

/// A key and the accept value it calls for (RFC 6455 §1.3's example).
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// The upstream: the engine's WebSocket echo on `/echo` (subprotocol
/// `chat` if offered), a 403 with a body on `/forbidden`, the request's
/// fields as its body elsewhere.
fn echo_upstream() -> Running {
    let options = ws::Options::new().protocol("chat").allow_origin("*");
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .http2(false)
        .start(move |req: &Request<'_>| -> Reply {
            match req.path() {
                "/echo" => ws::upgrade(req, &options, |ws: &mut ws::Socket<'_>, msg: ws::Message<'_>| {
                    let _ = ws.send(msg);
                }),
                "/forbidden" => Response::new(403).with_body("no WebSocket for you\n").into(),
                _ => {
                    let mut fields = String::new();
                    for (n, v) in req.headers() {
                        fields.push_str(&format!("{n}: {}\n", String::from_utf8_lossy(v)));
                    }
                    Response::text(fields).into()
                }
            }
        })
        .expect("the upstream starts")
}

/// A Peregrine whose every request goes to `up` (a proxy route counts as
/// a WebSocket route: extended CONNECT is enabled), with metrics.
fn proxy_to(up: SocketAddr) -> (Running, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let running = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .websockets(true)
        .metrics(metrics.clone())
        .start(proxy)
        .expect("the proxy starts");
    (running, metrics)
}

fn sample(metrics: &Metrics, name: &str) -> u64 {
    test_support::sample(&metrics.render(), name)
}

/// Sends a WebSocket opening for `path` with `extra` fields on `s` and
/// reads the answer's head (and a body of Content-Length, if any).
fn open(s: &mut TcpStream, path: &str, extra: &str) -> (String, Vec<u8>) {
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: site.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    read_answer(s)
}

/// One answer's head, and its body if it has a Content-Length.
fn read_answer(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            other => panic!(
                "the answer's head was cut: {other:?} after {:?}",
                String::from_utf8_lossy(&buf)
            ),
        }
    }
    let head = String::from_utf8(buf).unwrap();
    let length = field(&head, "content-length").map_or(0, |v| v.parse::<usize>().unwrap());
    let mut body = vec![0; length];
    s.read_exact(&mut body).unwrap();
    (head, body)
}

fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// A client frame (masked), as RFC 6455 §5 has them.
fn client_frame(op: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | op];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n < 1 << 16 => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [1u8, 2, 3, 4];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Runs a scripted client to its end: it must exit 0 having printed `ok:
/// CHECK` (or `ok: CHECK (details)`) for each of `checks`.
fn run_client(name: &str, cmd: &mut Command, checks: &[&str]) {
    test_support::process::run_checks(name, cmd, checks, CLIENT_TIMEOUT_SECS);
}

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ws_clients")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Python's `websockets` through the proxy: text, binary, empty, 1 MiB
/// less 1 KiB, fragments, ping, and the closing handshake with 1000, as it
/// does against the engine directly; then the tunnel is gone from the
/// gauge.
#[test]
fn python_websockets_echoes_through_the_proxy_and_closes_cleanly() {
    let python = install::websockets_python(&tmp("websockets-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's websockets: {e}"));
    let up = echo_upstream();
    let (proxy, metrics) = proxy_to(up.local_addr());
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("client.py"))
        .arg(format!("ws://{}/echo", proxy.local_addr()));
    run_client(
        "Python websockets",
        &mut cmd,
        &[
            "connect",
            "text",
            "binary",
            "empty text",
            "empty binary",
            "1 MiB less 1 KiB binary",
            "fragmented text",
            "ping",
            "close 1000",
        ],
    );
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_opened_total"), 1);
    // The upstream closes after the Close; the tunnel ends with it.
    let mut open = u64::MAX;
    for _ in 0..100 {
        open = sample(&metrics, "peregrine_proxy_websockets_open");
        if open == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(open, 0, "the tunnel outlived its WebSocket");
}

/// python-hyper's `h2` opens WebSockets through the proxy with extended
/// CONNECT: the proxy makes the key, the 200 carries the subprotocol, and
/// echoes of every size cross both flow-control windows; two on one
/// connection, one reset, the other closed with 1000 and END_STREAM.
#[test]
fn python_h2_opens_websockets_through_the_proxy_over_http2() {
    let python = install::h2_python(&tmp("h2-venv")).unwrap_or_else(|e| panic!("this test needs Python's h2: {e}"));
    let up = echo_upstream();
    let (proxy, metrics) = proxy_to(up.local_addr());
    let mut cmd = Command::new(python);
    cmd.arg(client_dir().join("proxy_h2_client.py"))
        .arg(proxy.local_addr().to_string());
    run_client(
        "Python h2",
        &mut cmd,
        &[
            "settings enable connect protocol",
            "connect",
            "subprotocol",
            "text",
            "binary",
            "1 MiB less 1 KiB binary",
            "two websockets on one connection",
            "reset of one leaves the other",
            "close 1000",
            "refused upgrade relayed",
        ],
    );
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_opened_total"), 2);
}

/// An upstream that does not switch answers as for any request: its 403
/// and body reach the client, and the same connection serves the next
/// request (HTTP framing goes on, kept alive on both sides).
#[test]
fn a_refused_upgrade_is_relayed_and_the_connection_goes_on() {
    let up = echo_upstream();
    let (proxy, metrics) = proxy_to(up.local_addr());
    let mut s = connect(proxy.local_addr());
    let (head, body) = open(&mut s, "/forbidden", "");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert_eq!(body, b"no WebSocket for you\n");
    assert_eq!(field(&head, "upgrade"), None, "{head}");
    s.write_all(b"GET /after HTTP/1.1\r\nHost: site.test\r\n\r\n").unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert!(seen.contains("via: 1.1 peregrine-"), "{seen}");
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_opened_total"), 0);
}

/// The tunnel opens only on a 101 whose accept value is the key's: the
/// client's key reaches the upstream, its own accept value comes back,
/// and a frame crosses both ways.
#[test]
fn an_http11_upgrade_passes_the_key_and_its_accept_value() {
    let up = echo_upstream();
    let (proxy, metrics) = proxy_to(up.local_addr());
    let mut s = connect(proxy.local_addr());
    let (head, _) = open(&mut s, "/echo", "Sec-WebSocket-Protocol: x, chat\r\n");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(field(&head, "sec-websocket-accept"), Some(ACCEPT), "{head}");
    assert_eq!(field(&head, "sec-websocket-protocol"), Some("chat"), "{head}");
    assert!(
        field(&head, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")),
        "{head}"
    );
    s.write_all(&client_frame(0x1, b"through")).unwrap();
    let mut echo = [0u8; 9];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"\x81\x07through");
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_open"), 1);
}

/// An auth service that answers 200 with `Remote-User: ann` to a
/// subrequest carrying `Cookie: ok`, and 401 to others; it reports each
/// subrequest's head.
fn auth_service() -> (SocketAddr, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let tx = tx.clone();
            thread::spawn(move || loop {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let answer: &[u8] = if head.contains("\r\nCookie: ok\r\n") {
                    b"HTTP/1.1 200 OK\r\nRemote-User: ann\r\nContent-Length: 0\r\n\r\n"
                } else {
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 6\r\n\r\nwho?\r\n"
                };
                let _ = tx.send(head);
                if s.write_all(answer).is_err() {
                    return;
                }
            });
        }
    });
    (addr, rx)
}

/// A WebSocket opening on a forward-auth route: the auth subrequest goes
/// first; on its 2xx the upgrade goes to the upstream (with the fields
/// the route copies) and the tunnel opens; on a refusal the client gets
/// the service's answer and the upstream never hears of it.
#[test]
fn a_websocket_on_a_forward_auth_route_tunnels_after_the_services_2xx() {
    use peregrine::proxy::{ForwardAuth, Held};
    let up = echo_upstream();
    let (auth, asked) = auth_service();
    let proxy = Proxy::new(Upstream::parse(&format!("http://{}", up.local_addr())).unwrap());
    let check =
        ForwardAuth::new(Upstream::parse(&format!("http://{auth}/verify")).unwrap()).copy_headers(["Remote-User"]);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .websockets(true)
        .start(move |req: &Request<'_>| -> Reply {
            use peregrine::Handler;
            check.check(req, None, &mut || Held::Reply(proxy.call(req)))
        })
        .expect("the proxy starts");

    let mut s = connect(server.local_addr());
    let (head, body) = open(&mut s, "/echo", "Cookie: nope\r\n");
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert_eq!(body, b"who?\r\n");
    assert!(asked.recv_timeout(PATIENCE).unwrap().starts_with("GET /verify "));

    let mut s = connect(server.local_addr());
    let (head, _) = open(&mut s, "/echo", "Cookie: ok\r\nRemote-User: forged\r\n");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(field(&head, "sec-websocket-accept"), Some(ACCEPT), "{head}");
    assert!(asked.recv_timeout(PATIENCE).unwrap().starts_with("GET /verify "));
    s.write_all(&client_frame(0x1, b"through")).unwrap();
    let mut echo = [0u8; 9];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"\x81\x07through");
    // The upgrade reached the upstream with the service's Remote-User,
    // not the client's: the echo upstream shows fields on other paths.
    let mut s = connect(server.local_addr());
    s.write_all(b"GET /fields HTTP/1.1\r\nHost: a\r\nCookie: ok\r\nRemote-User: forged\r\n\r\n")
        .unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("remote-user: ann\n") || body.contains("Remote-User: ann\n"),
        "{body}"
    );
    assert!(!body.contains("forged"), "{body}");
}

/// A raw upstream that answers every request with `answer`, then (if
/// `flood`) writes that many bytes, counting what it wrote; it reports
/// the request it read.
fn raw_upstream(answer: String, flood: usize) -> (SocketAddr, mpsc::Receiver<String>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let written = Arc::new(AtomicUsize::new(0));
    let progress = written.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if s.read(&mut byte).unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            if s.write_all(answer.as_bytes()).is_err() {
                continue;
            }
            let block = vec![b'x'; 64 * 1024];
            let mut left = flood;
            while left > 0 {
                let n = left.min(block.len());
                if s.write_all(&block[..n]).is_err() {
                    break;
                }
                left -= n;
                progress.fetch_add(n, Ordering::SeqCst);
            }
            // Held open until the test ends (a WebSocket that stays).
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
    });
    (addr, rx, written)
}

/// A 101 whose `Sec-WebSocket-Accept` is not the key's is a 502, with
/// none of the upstream's words, and that upstream connection is closed.
#[test]
fn a_101_with_a_wrong_accept_value_is_a_502() {
    let (up, seen, _) = raw_upstream(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\nX-Secret: upstream words\r\n\r\n"
            .to_owned(),
        0,
    );
    let (proxy, metrics) = proxy_to(up);
    let mut s = connect(proxy.local_addr());
    let (head, body) = open(&mut s, "/echo", "");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(!head.contains("upstream words") && !String::from_utf8_lossy(&body).contains("upstream words"));
    let request = seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(field(&request, "sec-websocket-key"), Some(KEY), "{request}");
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_opened_total"), 0);
}

/// `Upgrade: h2c` (and any other upgrade but WebSocket) is never
/// forwarded: the request reaches the upstream as an ordinary one,
/// without Upgrade, Connection or HTTP2-Settings, and its answer comes
/// back on a connection that goes on.
#[test]
fn an_h2c_upgrade_reaches_the_upstream_as_an_ordinary_request() {
    let up = echo_upstream();
    let (proxy, _) = proxy_to(up.local_addr());
    let mut s = connect(proxy.local_addr());
    s.write_all(
        b"GET /fields HTTP/1.1\r\nHost: site.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
          HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    )
    .unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert!(seen.contains("host: site.test"), "{seen}");
    for absent in ["upgrade:", "http2-settings:", "connection:"] {
        assert!(!seen.contains(absent), "the upstream got {absent:?}:\n{seen}");
    }
    // An Upgrade field Connection does not name is dropped all the same
    // (hop-by-hop whatever Connection says, RFC 9110 §7.6.1).
    s.write_all(b"GET /fields HTTP/1.1\r\nHost: site.test\r\nUpgrade: h2c\r\n\r\n")
        .unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert!(!seen.contains("upgrade:"), "the upstream got Upgrade:\n{seen}");
    // A WebSocket offer beside another protocol goes as WebSocket only.
    let mut w = connect(proxy.local_addr());
    w.write_all(
        format!(
            "GET /echo HTTP/1.1\r\nHost: site.test\r\nUpgrade: foo/2, websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let (head, _) = read_answer(&mut w);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // And the first connection still serves.
    s.write_all(b"GET /again HTTP/1.1\r\nHost: site.test\r\n\r\n").unwrap();
    assert!(read_answer(&mut s).0.starts_with("HTTP/1.1 200"));
}

/// A client that stops reading while its upstream floods holds the
/// upstream back: what the upstream gets written stops at the sockets'
/// buffers and the tunnel's 64 KiB, far below the flood; then the client
/// reads, and every byte arrives.
#[test]
fn a_client_that_does_not_read_holds_a_flooding_upstream_back() {
    const TOTAL: usize = 512 * 1024 * 1024;
    let (up, _, written) = raw_upstream(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        ),
        TOTAL,
    );
    let (proxy, _) = proxy_to(up);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // A small receive buffer (no autotuning): the kernel's share of what
    // is held stays small, so what the proxy holds shows.
    sock.set_recv_buffer_size(64 * 1024).unwrap();
    sock.connect(&proxy.local_addr().into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let (head, _) = open(&mut s, "/flood", "");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // Nothing read: wait until the upstream stops getting anywhere.
    let last = stalled(&written, TOTAL);
    assert!(
        last < 128 * 1024 * 1024,
        "the upstream wrote {last} bytes to a client that read none: the tunnel buffers without bound"
    );
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    while got < TOTAL {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the tunnel ended after {got} bytes");
        assert!(buf[..n].iter().all(|&b| b == b'x'));
        got += n;
    }
    assert_eq!(written.load(Ordering::SeqCst), TOTAL);
}

/// The same over HTTP/2: a client that gives no window beyond its first
/// 64 KiB holds a flooding upstream back (the tunnel reads 64 KiB ahead of
/// it at most), and once it gives window the bytes flow again.
#[test]
fn an_http2_client_without_window_holds_a_flooding_upstream_back() {
    use test_support::h2::{frame, take_frame, DATA, END_HEADERS, HEADERS, PREFACE, SETTINGS, WINDOW_UPDATE};
    const TOTAL: usize = 512 * 1024 * 1024;
    const GRANTED: u32 = 8 * 1024 * 1024;
    let (up, written) = keyed_flood(TOTAL);
    let (proxy, _) = proxy_to(up);
    let mut s = connect(proxy.local_addr());
    let authority = proxy.local_addr().to_string();
    let mut head = Vec::new();
    // HPACK literals: indexed names (:method, :scheme, :path, :authority),
    // then new names.
    for (index, value) in [(2u8, "CONNECT"), (6, "http"), (4, "/flood"), (1, authority.as_str())] {
        head.push(index);
        head.push(value.len() as u8);
        head.extend_from_slice(value.as_bytes());
    }
    for (name, value) in [(":protocol", "websocket"), ("sec-websocket-version", "13")] {
        head.push(0);
        head.push(name.len() as u8);
        head.extend_from_slice(name.as_bytes());
        head.push(value.len() as u8);
        head.extend_from_slice(value.as_bytes());
    }
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    hello.extend_from_slice(&frame(HEADERS, END_HEADERS, 1, &head));
    s.write_all(&hello).unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut status = None;
    let mut data = 0usize;
    // Reads frames until `done` says so: the server's SETTINGS acked,
    // DATA on stream 1 counted.
    let mut pump =
        |s: &mut TcpStream, status: &mut Option<u16>, data: &mut usize, done: &dyn Fn(Option<u16>, usize) -> bool| {
            while !done(*status, *data) {
                while let Some(f) = take_frame(&mut buf) {
                    match f.kind {
                        SETTINGS if f.flags & 1 == 0 => s.write_all(&frame(SETTINGS, 1, 0, &[])).unwrap(),
                        HEADERS if f.stream == 1 => *status = Some(f.status()),
                        DATA if f.stream == 1 => *data += f.payload.len(),
                        k => assert!(k != 0x3 && k != 0x7, "RST_STREAM or GOAWAY: {f:?}"),
                    }
                }
                if done(*status, *data) {
                    break;
                }
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the proxy closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        };
    pump(&mut s, &mut status, &mut data, &|st, _| st.is_some());
    assert_eq!(status, Some(200));
    let last = stalled(&written, TOTAL);
    assert!(
        last < 128 * 1024 * 1024,
        "the upstream wrote {last} bytes to a client that gave no window: the tunnel buffers without bound"
    );
    // Window for 8 MiB more, on the stream and the connection: it comes.
    let mut grant = frame(WINDOW_UPDATE, 0, 1, &GRANTED.to_be_bytes());
    grant.extend_from_slice(&frame(WINDOW_UPDATE, 0, 0, &GRANTED.to_be_bytes()));
    s.write_all(&grant).unwrap();
    pump(&mut s, &mut status, &mut data, &|_, d| d >= GRANTED as usize);
    assert!(data <= 65_535 + GRANTED as usize, "{data} bytes beyond the windows");
}

/// An upstream that answers a WebSocket opening with the accept value of
/// the key it got, then writes `total` bytes, counting them.
fn keyed_flood(total: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let progress = written.clone();
    thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else { return };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let key = field(&head, "sec-websocket-key").expect("the proxy sends a key");
        let accept = accept_of(key);
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        );
        if s.write_all(answer.as_bytes()).is_err() {
            return;
        }
        let block = vec![b'x'; 64 * 1024];
        let mut left = total;
        while left > 0 {
            let n = left.min(block.len());
            if s.write_all(&block[..n]).is_err() {
                return;
            }
            left -= n;
            progress.fetch_add(n, Ordering::SeqCst);
        }
    });
    (addr, written)
}

/// What a flooding upstream (`keyed_flood`, `raw_upstream`) wrote once it
/// stopped getting anywhere (or wrote `total`): its count, looked at until
/// it no longer moves.
fn stalled(written: &AtomicUsize, total: usize) -> usize {
    let mut last = usize::MAX;
    loop {
        thread::sleep(Duration::from_millis(300));
        let now = written.load(Ordering::SeqCst);
        if now == last || now == total {
            eprintln!("the upstream stalled after {now} bytes");
            return now;
        }
        last = now;
    }
}

/// The same over HTTP/3 (RFC 9220; aioquic, `proxy_h3_client.py stall`):
/// a client that reads nothing gives no QUIC credit beyond its windows,
/// and the tunnel reads at most 64 KiB of the upstream ahead of its
/// stream, so a flooding upstream is held back at the sockets' buffers,
/// far below the flood; once the client reads, every byte arrives.
#[test]
fn an_http3_client_that_does_not_read_holds_a_flooding_upstream_back() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    const TOTAL: usize = 48 * 1024 * 1024;
    let python =
        install::aioquic_python(&tmp("aioquic-venv")).unwrap_or_else(|e| panic!("this test needs aioquic: {e}"));
    let (up, written) = keyed_flood(TOTAL);
    let cert = test_support::pki::SelfSigned::new("proxy-ws-h3-flood", &["localhost"]);
    let proxy = Server::new()
        .bind_tls(
            "127.0.0.1:0",
            peregrine::TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap(),
        )
        .workers(1)
        .websockets(true)
        .start(Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap()))
        .expect("the proxy starts");
    let mut client = Command::new("timeout")
        .args(["--kill-after=5", &CLIENT_TIMEOUT_SECS.to_string()])
        .arg(python)
        .arg(client_dir().join("proxy_h3_client.py"))
        .arg(proxy.local_addr().to_string())
        .args(["stall", &TOTAL.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert_eq!(line, "ok: connect\n", "the client's first line");
    let last = stalled(&written, TOTAL);
    assert!(
        last < TOTAL / 2,
        "the upstream wrote {last} bytes to an HTTP/3 client that read none: the tunnel buffers without bound"
    );
    client.stdin.take().unwrap().write_all(b"read\n").unwrap();
    let mut rest = String::new();
    said.read_to_string(&mut rest).unwrap();
    assert!(client.wait().unwrap().success(), "the client failed: {rest}");
    assert!(rest.lines().any(|l| l == "ok: every byte arrives"), "{rest}");
    assert_eq!(written.load(Ordering::SeqCst), TOTAL);
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2), by tungstenite.
fn accept_of(key: &str) -> String {
    tungstenite::handshake::derive_accept_key(key.as_bytes())
}

/// An upstream that answers the first WebSocket opening (the test's key)
/// with a good 101 and hands its socket to the test.
fn held_upstream() -> (SocketAddr, mpsc::Receiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else { return };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        );
        s.write_all(answer.as_bytes()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let _ = tx.send(s);
    });
    (addr, rx)
}

/// Reads `n` bytes, or fails saying what came.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    s.read_exact(&mut b).unwrap();
    b
}

/// Whether the peer has ended its side: a read gives 0 (or a reset).
fn ended_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0))
        || matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

/// Bytes go both ways unchanged (the proxy reads no frames: these are
/// none); the client's FIN reaches the upstream, which may still answer;
/// the upstream's end ends the client's connection.
#[test]
fn a_tunnel_copies_bytes_and_passes_half_closes_on() {
    let (up, held) = held_upstream();
    let (proxy, metrics) = proxy_to(up);
    let mut c = connect(proxy.local_addr());
    let (head, _) = open(&mut c, "/raw", "");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    c.write_all(b"not a frame \x00\xff").unwrap();
    assert_eq!(read_n(&mut u, 14), b"not a frame \x00\xff");
    u.write_all(b"nor this \x88\x00").unwrap();
    assert_eq!(read_n(&mut c, 11), b"nor this \x88\x00");
    // The client ends its side: the upstream sees the end, and answers.
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut b = [0u8; 16];
    assert_eq!(
        u.read(&mut b).unwrap(),
        0,
        "the client's FIN did not reach the upstream"
    );
    u.write_all(b"after your FIN").unwrap();
    assert_eq!(read_n(&mut c, 14), b"after your FIN");
    // The upstream ends: so does the client's connection, and the tunnel.
    drop(u);
    assert!(ended_by_peer(&mut c), "the upstream's end did not reach the client");
    let mut open = u64::MAX;
    for _ in 0..100 {
        open = sample(&metrics, "peregrine_proxy_websockets_open");
        if open == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(open, 0);
}

/// The upstream ending first ends the client's connection after what it
/// sent before; a client that goes away closes the upstream connection.
#[test]
fn either_side_going_away_closes_the_other() {
    let (up, held) = held_upstream();
    let (proxy, _) = proxy_to(up);
    let mut c = connect(proxy.local_addr());
    assert!(open(&mut c, "/raw", "").0.starts_with("HTTP/1.1 101"));
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    u.write_all(b"last words").unwrap();
    drop(u);
    assert_eq!(read_n(&mut c, 10), b"last words");
    assert!(ended_by_peer(&mut c), "the upstream's close did not reach the client");

    let (up, held) = held_upstream();
    let (proxy, _) = proxy_to(up);
    let mut c = connect(proxy.local_addr());
    assert!(open(&mut c, "/raw", "").0.starts_with("HTTP/1.1 101"));
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    // A reset: SO_LINGER 0, then close.
    socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
    drop(c);
    assert!(ended_by_peer(&mut u), "the client's reset did not reach the upstream");
}

/// A tunnel with nothing moving either way for the upstream's read
/// timeout is closed, on both sides.
#[test]
fn an_idle_tunnel_is_closed_at_the_read_timeout() {
    let (up, held) = held_upstream();
    let proxy = Proxy::new(
        Upstream::parse(&format!("http://{up}"))
            .unwrap()
            .read_timeout(Duration::from_millis(300)),
    );
    let server = Server::new().bind("127.0.0.1:0").workers(1).start(proxy).unwrap();
    let mut c = connect(server.local_addr());
    assert!(open(&mut c, "/raw", "").0.starts_with("HTTP/1.1 101"));
    // (Nothing sent: a byte would move the deadline, and this test must
    // not depend on how fast it runs.)
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    assert!(ended_by_peer(&mut c), "an idle tunnel stayed open");
    assert!(ended_by_peer(&mut u), "an idle tunnel's upstream stayed open");
}

/// A server shutting down keeps its tunnels until the shutdown timeout
/// (it cannot speak inside frames it does not read), then closes them.
#[test]
fn a_shutdown_closes_tunnels_at_its_timeout() {
    let (up, held) = held_upstream();
    let limits = peregrine::Limits {
        // Long enough for the bytes below to cross before it ends, on a
        // loaded machine too.
        shutdown_timeout: Duration::from_secs(5),
        ..peregrine::Limits::default()
    };
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(proxy)
        .unwrap();
    let mut c = connect(server.local_addr());
    assert!(open(&mut c, "/raw", "").0.starts_with("HTTP/1.1 101"));
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    let addr = server.local_addr();
    server.shutdown_handle().shutdown();
    // Draining once the listener is gone; still a tunnel.
    while TcpStream::connect(addr).is_ok() {
        thread::sleep(Duration::from_millis(10));
    }
    c.write_all(b"draining").unwrap();
    assert_eq!(read_n(&mut u, 8), b"draining");
    assert!(ended_by_peer(&mut c), "the tunnel outlived the shutdown");
    assert!(ended_by_peer(&mut u), "the tunnel's upstream outlived the shutdown");
    server.join().unwrap();
}

/// An upstream that answers each WebSocket opening with the accept value
/// of the key it got (the proxy's own, for HTTP/2 clients) and hands its
/// socket to the test.
fn keyed_held() -> (SocketAddr, mpsc::Receiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if s.read(&mut byte).unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let Some(key) = field(&head, "sec-websocket-key") else {
                continue;
            };
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Accept: {}\r\n\r\n",
                accept_of(key)
            );
            s.write_all(answer.as_bytes()).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            if tx.send(s).is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

/// A raw HTTP/2 client (prior knowledge) for extended CONNECTs: frames
/// written by hand, read with `test_support::h2`.
struct H2 {
    s: TcpStream,
    buf: Vec<u8>,
    authority: String,
}

/// What a stream got.
#[derive(Default, Debug)]
struct Got {
    status: Option<u16>,
    data: Vec<u8>,
    ended: bool,
    reset: Option<u32>,
}

impl H2 {
    fn connect(addr: SocketAddr) -> H2 {
        use test_support::h2::{frame, PREFACE, SETTINGS};
        let mut s = connect(addr);
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
        s.write_all(&hello).unwrap();
        H2 {
            s,
            buf: Vec::new(),
            authority: addr.to_string(),
        }
    }

    /// Opens a WebSocket on stream `id` with an extended CONNECT.
    fn open(&mut self, id: u32, path: &str) {
        use test_support::h2::{frame, END_HEADERS, HEADERS};
        let mut head = Vec::new();
        for (index, value) in [(2u8, "CONNECT"), (6, "http"), (4, path), (1, self.authority.as_str())] {
            head.push(index);
            head.push(value.len() as u8);
            head.extend_from_slice(value.as_bytes());
        }
        for (name, value) in [(":protocol", "websocket"), ("sec-websocket-version", "13")] {
            head.push(0);
            head.push(name.len() as u8);
            head.extend_from_slice(name.as_bytes());
            head.push(value.len() as u8);
            head.extend_from_slice(value.as_bytes());
        }
        self.s.write_all(&frame(HEADERS, END_HEADERS, id, &head)).unwrap();
    }

    fn data(&mut self, id: u32, bytes: &[u8], end: bool) {
        use test_support::h2::{frame, DATA, END_STREAM};
        let flags = if end { END_STREAM } else { 0 };
        self.s.write_all(&frame(DATA, flags, id, bytes)).unwrap();
    }

    /// Reads frames into `got` (stream `id`'s) until `done` says so; the
    /// server's SETTINGS are acknowledged.
    fn until(&mut self, id: u32, got: &mut Got, done: impl Fn(&Got) -> bool) {
        use test_support::h2::{frame, take_frame, DATA, END_STREAM, HEADERS, RST_STREAM, SETTINGS};
        let mut chunk = [0u8; 16 * 1024];
        while !done(got) {
            while let Some(f) = take_frame(&mut self.buf) {
                match f.kind {
                    SETTINGS if f.flags & 1 == 0 => self.s.write_all(&frame(SETTINGS, 1, 0, &[])).unwrap(),
                    HEADERS if f.stream == id => got.status = Some(f.status()),
                    DATA if f.stream == id => {
                        got.data.extend_from_slice(&f.payload);
                        got.ended |= f.flags & END_STREAM != 0;
                    }
                    RST_STREAM if f.stream == id => got.reset = Some(f.code()),
                    _ => {}
                }
            }
            if done(got) {
                return;
            }
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "the proxy closed the connection; stream {id} got {got:?}");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Over HTTP/2, a tunnel is a stream: its DATA reach the upstream and the
/// upstream's bytes come back as DATA; the client's END_STREAM is the
/// upstream's FIN, after which it may still answer; its close is the
/// stream's END_STREAM. An upstream that resets gets its stream
/// RST_STREAM with CONNECT_ERROR (RFC 9113 §8.5); the connection goes on.
#[test]
fn an_http2_tunnel_passes_bytes_half_closes_and_resets_on() {
    let (up, held) = keyed_held();
    let (proxy, metrics) = proxy_to(up);
    let mut c = H2::connect(proxy.local_addr());
    c.open(1, "/raw");
    let mut one = Got::default();
    c.until(1, &mut one, |g| g.status.is_some());
    assert_eq!(one.status, Some(200));
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    c.data(1, b"to the upstream", false);
    assert_eq!(read_n(&mut u, 15), b"to the upstream");
    u.write_all(b"to the client").unwrap();
    c.until(1, &mut one, |g| g.data.len() >= 13);
    assert_eq!(one.data, b"to the client");
    // The client ends its side: the upstream's FIN; it answers still.
    c.data(1, b"last", true);
    assert_eq!(read_n(&mut u, 4), b"last");
    let mut b = [0u8; 8];
    assert_eq!(
        u.read(&mut b).unwrap(),
        0,
        "END_STREAM did not reach the upstream as a FIN"
    );
    u.write_all(b" and after").unwrap();
    drop(u);
    c.until(1, &mut one, |g| g.ended || g.reset.is_some());
    assert_eq!(one.data, b"to the client and after");
    assert!(one.ended && one.reset.is_none(), "{one:?}");

    // An upstream that resets: the stream is reset, the connection lives.
    c.open(3, "/raw");
    let mut three = Got::default();
    c.until(3, &mut three, |g| g.status.is_some());
    let u = held.recv_timeout(PATIENCE).unwrap();
    socket2::SockRef::from(&u).set_linger(Some(Duration::ZERO)).unwrap();
    drop(u);
    c.until(3, &mut three, |g| g.reset.is_some() || g.ended);
    assert_eq!(three.reset, Some(0xa), "{three:?}");
    c.open(5, "/raw");
    let mut five = Got::default();
    c.until(5, &mut five, |g| g.status.is_some());
    assert_eq!(five.status, Some(200));
    assert_eq!(sample(&metrics, "peregrine_proxy_websockets_opened_total"), 3);
}

/// An HTTP/2 tunnel idle for the upstream's read timeout is reset
/// (CANCEL) and its upstream closed; the client's connection goes on.
#[test]
fn an_idle_http2_tunnel_is_cancelled_at_the_read_timeout() {
    let (up, held) = keyed_held();
    let proxy = Proxy::new(
        Upstream::parse(&format!("http://{up}"))
            .unwrap()
            .read_timeout(Duration::from_millis(300)),
    );
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .websockets(true)
        .start(proxy)
        .unwrap();
    let mut c = H2::connect(server.local_addr());
    c.open(1, "/raw");
    let mut one = Got::default();
    c.until(1, &mut one, |g| g.status.is_some());
    assert_eq!(one.status, Some(200));
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    c.until(1, &mut one, |g| g.reset.is_some() || g.ended);
    assert_eq!(one.reset, Some(0x8), "{one:?}");
    assert!(ended_by_peer(&mut u), "the idle tunnel's upstream stayed open");
    c.open(3, "/raw");
    let mut three = Got::default();
    c.until(3, &mut three, |g| g.status.is_some());
    assert_eq!(three.status, Some(200));
}

/// Over TLS the tunnel is the same: the client's records decrypted go to
/// the upstream, the upstream's bytes go back encrypted, and the
/// upstream's end ends the TLS connection.
#[test]
fn a_tunnel_over_tls_copies_plaintext_both_ways() {
    let (up, held) = held_upstream();
    let pki = test_support::pki::Pki::new("proxy-ws");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let server = Server::new()
        .bind_tls(
            "127.0.0.1:0",
            peregrine::TlsConfig::from_pem_files(&cert, &key).unwrap(),
        )
        .workers(1)
        .http3(false)
        .start(proxy)
        .unwrap();
    let mut config = pki.client_config(rustls::DEFAULT_VERSIONS);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut c = test_support::pki::connect(server.local_addr(), &Arc::new(config), "localhost");
    c.write_all(
        format!(
            "GET /raw HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "{}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut u = held.recv_timeout(PATIENCE).unwrap();
    c.write_all(b"secret up").unwrap();
    assert_eq!(read_n(&mut u, 9), b"secret up");
    u.write_all(b"secret down").unwrap();
    let mut down = [0u8; 11];
    c.read_exact(&mut down).unwrap();
    assert_eq!(&down, b"secret down");
    drop(u);
    let mut rest = Vec::new();
    // close_notify, then the end: the upstream's close came through.
    let ended = c.read_to_end(&mut rest);
    assert!(ended.is_ok() && rest.is_empty(), "{ended:?} {rest:?}");
}

/// On a route with a response cache, a WebSocket opening is never
/// answered from an entry of its path: the cache passes any request with
/// `Upgrade` (it is looked up before the tunnel is offered).
#[test]
fn a_cached_path_still_opens_websockets_through_the_proxy() {
    // The upstream: a cacheable 200 to a plain GET, a 101 to an upgrade.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let plain = Arc::new(AtomicUsize::new(0));
    let counted = plain.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let counted = counted.clone();
            thread::spawn(move || loop {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if head.contains("\r\nupgrade: websocket\r\n") {
                    let _ = s.write_all(
                        format!(
                            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                             Sec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
                        )
                        .as_bytes(),
                    );
                    return;
                }
                counted.fetch_add(1, Ordering::Relaxed);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nplain");
            });
        }
    });
    let proxy =
        Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap()).cache(peregrine::proxy::Cache::new(1024 * 1024));
    let running = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .websockets(true)
        .start(proxy)
        .expect("the proxy starts");
    let mut s = connect(running.local_addr());
    for _ in 0..2 {
        s.write_all(b"GET /ws HTTP/1.1\r\nHost: site.test\r\n\r\n").unwrap();
        let (head, body) = read_answer(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, b"plain");
    }
    // The second GET was a hit.
    assert_eq!(plain.load(Ordering::Relaxed), 1);
    let mut w = connect(running.local_addr());
    let (head, _) = open(&mut w, "/ws", "");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}
