//! The client's address end to end: listeners that require the PROXY
//! protocol (v1 and v2, plain and TLS) and trusted proxies'
//! `X-Forwarded-For`, over real loopback sockets. Distinct clients come
//! from distinct 127.0.0.0/8 addresses (the client socket is bound to
//! 127.0.0.2, .3, ... before it connects), and from ::1 where the host has
//! IPv6. Each test reads the address the handler was given
//! (`Request::client_addr`) and the access log's line for it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, PATIENCE};
use peregrine::client_addr::{AddrField, TrustedProxies};
use peregrine::{AccessLog, Handler, Limits, Metrics, Reply, Request, Response, Running, Server};
use test_support::Scratch;

/// The access log's line: who the client is, then the request.
const FORMAT: &str = "$remote_addr $remote_port \"$request\" $status";

/// Answers with the client's address, how it was decided, and the peer;
/// `/later` answers the same from another thread (a deferred answer).
fn whoami(req: &Request<'_>) -> Reply {
    let client = req.client_addr();
    let port = client.port.map_or("-".to_owned(), |p| p.to_string());
    let text = format!("{} {} {:?} {}", client.ip, port, client.via, req.peer_addr().ip());
    if req.path() == "/later" {
        let responder = req.defer();
        std::thread::spawn(move || responder.send(Response::text(text)));
        return Reply::Later;
    }
    Reply::Now(Response::text(text))
}

/// A server and its access log, for one test.
struct Fixture {
    server: Running,
    log: PathBuf,
    metrics: Arc<Metrics>,
    _dir: Scratch,
}

impl Fixture {
    /// Starts `build` (a server with its listener) with the log, the
    /// metrics and one worker.
    fn start(tag: &str, build: impl FnOnce(Server) -> Server, handler: impl Handler) -> Fixture {
        let dir = Scratch::new(&format!("peregrine-proxy-{tag}"));
        let log = dir.path("access.log");
        let metrics = Arc::new(Metrics::new());
        let server = build(
            Server::new()
                .workers(1)
                .access_log(AccessLog::File(log.clone()))
                .access_log_format(FORMAT.parse().unwrap())
                .metrics(metrics.clone()),
        )
        .start(handler)
        .expect("server starts");
        Fixture {
            server,
            log,
            metrics,
            _dir: dir,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    fn refusals(&self) -> u64 {
        test_support::sample(&self.metrics.render(), "peregrine_proxy_protocol_refusals_total")
    }

    /// Stops the server (which writes out the log) and returns its lines.
    fn stop(self) -> Vec<String> {
        self.server.shutdown();
        self.server.join().unwrap();
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }
}

fn trusted(list: &str) -> TrustedProxies {
    list.parse().unwrap()
}

/// A connection to `to` from the address `from` (port chosen by the kernel).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let from: std::net::IpAddr = from.parse().unwrap();
    let domain = socket2::Domain::for_address(to);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(from, 0).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// A client from `from`, its first bytes `first`.
fn client_from(from: &str, to: SocketAddr, first: &[u8]) -> Client {
    let mut c = Client::over(connect_from(from, to));
    c.send(first);
    c
}

/// A version 2 PROXY header (PROXY command, TCP) from `src` to `dst`.
fn v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21); // version 2, PROXY
    let mut block = Vec::new();
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            h.push(0x11); // TCP over IPv4
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            h.push(0x21); // TCP over IPv6
            block.extend_from_slice(&s.ip().octets());
            block.extend_from_slice(&d.ip().octets());
        }
        _ => panic!("one family"),
    }
    block.extend_from_slice(&src.port().to_be_bytes());
    block.extend_from_slice(&dst.port().to_be_bytes());
    h.extend_from_slice(&(block.len() as u16).to_be_bytes());
    h.extend_from_slice(&block);
    h
}

/// A version 2 LOCAL header (the proxy's own connection: a health check).
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0, 0]);
    h
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// Reads until the server closes: it must close without a byte.
fn assert_closed_unanswered(c: &mut Client) {
    let got = c.read_to_close();
    assert!(got.is_empty(), "answered: {:?}", String::from_utf8_lossy(&got));
}

fn proxied(list: &'static str) -> impl FnOnce(Server) -> Server {
    move |s| s.bind("127.0.0.1:0").proxy_protocol(trusted(list))
}

#[test]
fn a_v1_header_from_a_trusted_source_sets_the_client_address() {
    let f = Fixture::start("v1", proxied("127.0.0.2"), whoami);
    let mut first = b"PROXY TCP4 198.51.100.7 203.0.113.1 5555 80\r\n".to_vec();
    first.extend_from_slice(GET);
    let mut c = client_from("127.0.0.2", f.addr(), &first);
    assert_eq!(c.response().text(), "198.51.100.7 5555 ProxyProtocol 127.0.0.2");
    // The connection's next request: the same client.
    c.send(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "198.51.100.7 5555 ProxyProtocol 127.0.0.2");
    drop(c);
    let lines = f.stop();
    assert_eq!(
        lines,
        [
            "198.51.100.7 5555 \"GET / HTTP/1.1\" 200",
            "198.51.100.7 5555 \"GET /again HTTP/1.1\" 200"
        ]
    );
}

#[test]
fn a_v2_header_from_a_trusted_source_sets_the_client_address() {
    let f = Fixture::start("v2", proxied("127.0.0.0/29"), whoami);
    let mut first = v2("192.0.2.10:40000".parse().unwrap(), "192.0.2.1:443".parse().unwrap());
    first.extend_from_slice(GET);
    let mut c = client_from("127.0.0.3", f.addr(), &first);
    assert_eq!(c.response().text(), "192.0.2.10 40000 ProxyProtocol 127.0.0.3");
    drop(c);
    // An IPv6 client behind an IPv4 proxy.
    let mut first = v2(
        "[2001:db8::7]:1234".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
    );
    first.extend_from_slice(GET);
    let mut c = client_from("127.0.0.4", f.addr(), &first);
    assert_eq!(c.response().text(), "2001:db8::7 1234 ProxyProtocol 127.0.0.4");
    drop(c);
    // LOCAL (a health check): the proxy itself is the client.
    let mut first = v2_local();
    first.extend_from_slice(GET);
    let mut c = client_from("127.0.0.5", f.addr(), &first);
    let text = c.response().text();
    assert!(
        text.starts_with("127.0.0.5 ") && text.ends_with(" Peer 127.0.0.5"),
        "{text}"
    );
    drop(c);
    let lines = f.stop();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], "192.0.2.10 40000 \"GET / HTTP/1.1\" 200");
    assert_eq!(lines[1], "2001:db8::7 1234 \"GET / HTTP/1.1\" 200");
    assert!(lines[2].starts_with("127.0.0.5 "), "{lines:?}");
}

#[test]
fn a_connection_from_an_untrusted_source_is_refused() {
    let f = Fixture::start("untrusted", proxied("127.0.0.2"), whoami);
    let mut first = b"PROXY TCP4 198.51.100.7 203.0.113.1 5555 80\r\n".to_vec();
    first.extend_from_slice(GET);
    let mut c = client_from("127.0.0.9", f.addr(), &first);
    assert_closed_unanswered(&mut c);
    assert_eq!(f.refusals(), 1);
    // The trusted source is still served.
    let mut c = client_from("127.0.0.2", f.addr(), &first);
    assert_eq!(c.response().text(), "198.51.100.7 5555 ProxyProtocol 127.0.0.2");
    drop(c);
    let lines = f.stop();
    assert_eq!(lines, ["198.51.100.7 5555 \"GET / HTTP/1.1\" 200"]);
}

#[test]
fn a_header_split_across_many_small_writes_is_read_whole() {
    let f = Fixture::start("split", proxied("127.0.0.2"), whoami);
    for header in [
        b"PROXY TCP6 2001:db8::5 2001:db8::1 6000 443\r\n".to_vec(),
        v2("198.51.100.8:7000".parse().unwrap(), "198.51.100.1:80".parse().unwrap()),
    ] {
        let mut c = Client::over(connect_from("127.0.0.2", f.addr()));
        // One byte per write, Nagle off: one segment each on loopback.
        for b in &header {
            c.send(std::slice::from_ref(b));
        }
        c.send(GET);
        let text = c.response().text();
        assert!(text.ends_with(" ProxyProtocol 127.0.0.2"), "{text}");
        assert!(
            text.starts_with("2001:db8::5 6000") || text.starts_with("198.51.100.8 7000"),
            "{text}"
        );
    }
    assert_eq!(f.refusals(), 0);
    f.stop();
}

#[test]
fn a_missing_or_unfinished_header_is_closed_at_its_deadline() {
    let limits = Limits {
        proxy_header_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let f = Fixture::start(
        "timeout",
        |s| {
            s.limits(limits)
                .bind("127.0.0.1:0")
                .proxy_protocol(trusted("127.0.0.2"))
        },
        whoami,
    );
    // Nothing at all, then half a header: each is closed, unanswered,
    // by the server (the client's reads would wait PATIENCE).
    let mut silent = client_from("127.0.0.2", f.addr(), b"");
    let mut half = client_from("127.0.0.2", f.addr(), b"PROXY TCP4 198.51.100.7 ");
    assert_closed_unanswered(&mut silent);
    assert_closed_unanswered(&mut half);
    assert_eq!(f.refusals(), 2);
    assert!(f.stop().is_empty());
}

#[test]
fn garbage_instead_of_a_header_is_closed_at_once() {
    // A deadline no test waits for: a close can only be the parser's.
    let limits = Limits {
        proxy_header_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let f = Fixture::start(
        "garbage",
        |s| {
            s.limits(limits)
                .bind("127.0.0.1:0")
                .proxy_protocol(trusted("127.0.0.2"))
        },
        whoami,
    );
    for first in [
        GET,
        b"PROXY TCP4 198.51.100.7 203.0.113.1 5555 80\n",
        b"PROXY TCP4 198.51.100.7 203.0.113.1 05555 80\r\n",
        b"PROXY TCP5 1.2.3.4",
        b"\r\n\r\n\0\r\nQUIT\n\x31",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff",
    ] {
        let mut c = client_from("127.0.0.2", f.addr(), first);
        assert_closed_unanswered(&mut c);
    }
    assert_eq!(f.refusals(), 6);
    assert!(f.stop().is_empty());
}

#[test]
fn a_tls_listener_reads_the_header_before_the_handshake() {
    let pki = test_support::pki::Pki::new("proxy-tls");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let tls = peregrine::TlsConfig::from_pem_files(&cert, &key).unwrap();
    let f = Fixture::start(
        "tls",
        |s| {
            s.http3(false)
                .bind_tls("127.0.0.1:0", tls)
                .proxy_protocol(trusted("127.0.0.2"))
        },
        whoami,
    );
    let config = pki.client();
    for header in [
        b"PROXY TCP4 203.0.113.50 192.0.2.1 4242 443\r\n".to_vec(),
        v2("203.0.113.50:4242".parse().unwrap(), "192.0.2.1:443".parse().unwrap()),
    ] {
        let mut tcp = connect_from("127.0.0.2", f.addr());
        tcp.write_all(&header).unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
        let mut c = Client::over(rustls::StreamOwned::new(conn, tcp));
        c.send(GET);
        assert_eq!(c.response().text(), "203.0.113.50 4242 ProxyProtocol 127.0.0.2");
    }
    // Without the header: a ClientHello's first bytes are not one.
    let mut c = client_from("127.0.0.2", f.addr(), &[0x16, 0x03, 0x01, 0x00, 0x05, 0x01]);
    assert_closed_unanswered(&mut c);
    let lines = f.stop();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l == "203.0.113.50 4242 \"GET / HTTP/1.1\" 200"),
        "{lines:?}"
    );
}

#[test]
fn http2_requests_take_the_connections_proxy_source() {
    use test_support::h2::{frame, get_head, take_frame, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS};
    let f = Fixture::start("h2", proxied("127.0.0.2"), whoami);
    let mut bytes = b"PROXY TCP4 198.51.100.77 203.0.113.1 7777 80\r\n".to_vec();
    bytes.extend_from_slice(PREFACE);
    bytes.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    bytes.extend_from_slice(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_head("/", "x")));
    let mut tcp = connect_from("127.0.0.2", f.addr());
    tcp.write_all(&bytes).unwrap();
    let (mut pending, mut body) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    'read: loop {
        let n = tcp.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the answer");
        pending.extend_from_slice(&chunk[..n]);
        while let Some(fr) = take_frame(&mut pending) {
            if fr.kind == DATA && fr.stream == 1 {
                body.extend_from_slice(&fr.payload);
                if fr.flags & END_STREAM != 0 {
                    break 'read;
                }
            }
        }
    }
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "198.51.100.77 7777 ProxyProtocol 127.0.0.2"
    );
    drop(tcp);
    let lines = f.stop();
    assert_eq!(lines, ["198.51.100.77 7777 \"GET / HTTP/2.0\" 200"]);
}

#[test]
fn ipv6_sources_are_trusted_by_their_own_networks() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: nothing to check");
        return;
    }
    let f = Fixture::start("ipv6", |s| s.bind("[::1]:0").proxy_protocol(trusted("::1")), whoami);
    let mut first = b"PROXY TCP4 198.51.100.9 203.0.113.1 9999 80\r\n".to_vec();
    first.extend_from_slice(GET);
    let mut c = client_from("::1", f.addr(), &first);
    assert_eq!(c.response().text(), "198.51.100.9 9999 ProxyProtocol ::1");
    drop(c);
    let lines = f.stop();
    assert_eq!(lines, ["198.51.100.9 9999 \"GET / HTTP/1.1\" 200"]);
}

/// `X-Forwarded-For` from 127.0.0.2 (trusted) and from 127.0.0.3 (not).
fn forwarded_for(tag: &str, field: AddrField) -> Fixture {
    Fixture::start(
        tag,
        |s| {
            s.bind("127.0.0.1:0")
                .trusted_proxies(trusted("127.0.0.2, 10.0.0.0/8"), field)
        },
        whoami,
    )
}

fn get_with(c: &mut Client, target: &str, field: &str) -> String {
    c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{field}\r\n\r\n").as_bytes());
    c.response().text()
}

#[test]
fn x_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let f = forwarded_for("xff-untrusted", AddrField::XForwardedFor);
    let mut c = client_from("127.0.0.3", f.addr(), b"");
    let text = get_with(&mut c, "/", "X-Forwarded-For: 1.2.3.4");
    assert!(
        text.starts_with("127.0.0.3 ") && text.ends_with(" Peer 127.0.0.3"),
        "{text}"
    );
    drop(c);
    let lines = f.stop();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("127.0.0.3 "), "{lines:?}");
}

#[test]
fn x_forwarded_for_from_a_trusted_peer_is_walked_right_to_left() {
    let f = forwarded_for("xff-trusted", AddrField::XForwardedFor);
    let mut c = client_from("127.0.0.2", f.addr(), b"");
    // The client's own entry (6.6.6.6) stays to the left, unread.
    let text = get_with(&mut c, "/", "X-Forwarded-For: 6.6.6.6, 1.2.3.4, 10.0.0.5");
    assert_eq!(text, "1.2.3.4 - XForwardedFor 127.0.0.2");
    // Each request on a keep-alive connection by its own fields.
    let text = get_with(&mut c, "/b", "X-Forwarded-For: 5.6.7.8:4711");
    assert_eq!(text, "5.6.7.8 4711 XForwardedFor 127.0.0.2");
    let text = get_with(&mut c, "/c", "Forwarded: for=9.9.9.9");
    assert!(
        text.starts_with("127.0.0.2 ") && text.ends_with(" Peer 127.0.0.2"),
        "{text}"
    );
    // A deferred answer is logged with the address of its request.
    let text = get_with(&mut c, "/later", "X-Forwarded-For: 4.3.2.1");
    assert_eq!(text, "4.3.2.1 - XForwardedFor 127.0.0.2");
    drop(c);
    let lines = f.stop();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0], "1.2.3.4  \"GET / HTTP/1.1\" 200");
    assert_eq!(lines[1], "5.6.7.8 4711 \"GET /b HTTP/1.1\" 200");
    assert!(lines[2].starts_with("127.0.0.2 "), "{lines:?}");
    assert_eq!(lines[3], "4.3.2.1  \"GET /later HTTP/1.1\" 200");
}

#[test]
fn forwarded_is_read_when_chosen() {
    let f = forwarded_for("fwd", AddrField::Forwarded);
    let mut c = client_from("127.0.0.2", f.addr(), b"");
    let text = get_with(&mut c, "/", "Forwarded: for=6.6.6.6, for=\"[2001:db8::9]:80\"");
    assert_eq!(text, "2001:db8::9 80 Forwarded 127.0.0.2");
    let text = get_with(&mut c, "/", "X-Forwarded-For: 1.2.3.4");
    assert!(text.ends_with(" Peer 127.0.0.2"), "{text}");
    drop(c);
    let lines = f.stop();
    assert_eq!(lines[0], "2001:db8::9 80 \"GET / HTTP/1.1\" 200");
}

#[test]
fn behind_a_proxy_header_the_field_is_read_only_if_its_source_is_trusted() {
    let f = Fixture::start(
        "proxy-xff",
        |s| {
            s.bind("127.0.0.1:0")
                .proxy_protocol(trusted("127.0.0.2"))
                .trusted_proxies(trusted("127.0.0.2, 198.51.100.0/24"), AddrField::XForwardedFor)
        },
        whoami,
    );
    // A trusted source (a CDN before the balancer): its field is read.
    let mut c = client_from(
        "127.0.0.2",
        f.addr(),
        b"PROXY TCP4 198.51.100.1 203.0.113.1 1000 80\r\n",
    );
    assert_eq!(
        get_with(&mut c, "/", "X-Forwarded-For: 1.2.3.4"),
        "1.2.3.4 - XForwardedFor 127.0.0.2"
    );
    drop(c);
    // An untrusted source wrote the field itself: not read.
    let mut c = client_from("127.0.0.2", f.addr(), b"PROXY TCP4 203.0.113.9 203.0.113.1 1000 80\r\n");
    assert_eq!(
        get_with(&mut c, "/", "X-Forwarded-For: 1.2.3.4"),
        "203.0.113.9 1000 ProxyProtocol 127.0.0.2"
    );
    drop(c);
    f.stop();
}

#[test]
fn proxy_protocol_without_a_listener_or_on_a_unix_socket_is_refused() {
    let why = |err: peregrine::Error| {
        std::error::Error::source(&err)
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let err = Server::new()
        .proxy_protocol(trusted("127.0.0.1"))
        .start(whoami)
        .unwrap_err();
    assert!(why(err).contains("proxy_protocol must follow"));
    let dir = Scratch::new("peregrine-proxy-unix");
    let err = Server::new()
        .bind_unix(dir.path("s.sock"))
        .proxy_protocol(trusted("127.0.0.1"))
        .start(whoami)
        .unwrap_err();
    assert!(why(err).contains("not supported on a Unix-domain socket"));
}
