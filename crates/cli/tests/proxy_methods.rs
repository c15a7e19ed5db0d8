//! The reverse proxy against what nginx, Caddy and HAProxy do (issue 26's
//! review): a method outside IANA's registry goes upstream over HTTP/1.1,
//! HTTP/2 and HTTP/3 while the files answer it 501; TRACE is answered 405
//! here unless the route passes it; a field `Connection` names, Cookie
//! included, and `Proxy-Authorization` stay here; the access log counts
//! the bytes of a body cut short that were sent, and gives a WebSocket's
//! 101 its upstream figures.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use common::{Scratch, PATIENCE};
use test_support::process::Process;

/// An upstream that answers every request, kept alive, with its head's
/// lines as the body; each request line it got goes into `seen`.
fn echo_upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let addr = common::answering_upstream(move |head| {
        log.lock().unwrap().push(head[0].clone());
        let body = head.join("\n");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    (addr, seen)
}

/// `serve site` with `/api/` sent to `up` (and `more` flags), one
/// worker, on 127.0.0.1; its address.
fn serve(t: &Scratch, up: SocketAddr, more: &[&str]) -> (Process, String) {
    let (server, addr, _) = serve_metered(t, up, more);
    (server, addr)
}

/// `serve`, and the metrics' address when `more` asks for them.
fn serve_metered(t: &Scratch, up: SocketAddr, more: &[&str]) -> (Process, String, Option<String>) {
    t.write("site/index.html", "home\n");
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}"))
            .args(more),
    );
    let mut metrics = None;
    let addr = loop {
        let line = server.listening();
        if line.contains("metrics on http://") {
            metrics = Some(common::metrics_addr(&line));
        } else {
            break common::last_addr(&line);
        }
    };
    if more.contains(&"--metrics") && metrics.is_none() {
        metrics = Some(common::metrics_addr(&server.line("metrics on http://")));
    }
    (server, addr, metrics)
}

/// `serve --config` with one site (any host) whose `/api/*` route goes
/// to `up` with the route's `extra` settings; its address.
fn serve_route(t: &Scratch, up: SocketAddr, extra: &str) -> (Process, String) {
    t.write("site/index.html", "home\n");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"x\"]\nroot = \"site\"\ndefault = true\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{up}\"\n{extra}\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = common::last_addr(&server.listening());
    (server, addr)
}

fn ask(addr: &str, method: &str, path: &str, extra: &[&str]) -> (u16, String, String) {
    common::exchange(TcpStream::connect(addr).unwrap(), method, "x", path, extra)
}

/// curl over HTTP/2 with prior knowledge: status and body.
fn curl_h2c(addr: &str, method: &str, path: &str) -> (u16, String) {
    let out = Command::new(common::curl())
        .args(["-sS", "--http2-prior-knowledge", "--max-time", "30", "-o", "-"])
        .args(["-w", "\n%{http_code}", "-X", method])
        .arg(format!("http://{addr}{path}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_owned())
}

/// The access log's lines once there are `n` of them (the server writes
/// them as it goes; a line is awaited, at most `PATIENCE`).
fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n || start.elapsed() > PATIENCE {
            return lines;
        }
        thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// PURGE, BAN and a custom token reach the upstream unchanged through a
/// proxy prefix over HTTP/1.1 and HTTP/2; the same methods for the
/// site's files are answered 501, as any method the server does not know
/// (RFC 9110 §9.1), and a body sent with one does not break the
/// connection. The metrics count them under one label, `other`.
#[test]
fn methods_outside_the_registry_go_upstream_and_the_files_answer_them_501() {
    let t = Scratch::new("proxy-methods");
    let (up, seen) = echo_upstream();
    let (_server, addr, metrics) = serve_metered(&t, up, &["--metrics", "127.0.0.1:0"]);
    let metrics = metrics.unwrap();
    for method in ["PURGE", "BAN", "X-REFRESH_2"] {
        let (status, head, body) = ask(&addr, method, "/api/item?x=1", &["Cookie: a=1"]);
        assert_eq!(status, 200, "{method}: {head}");
        assert!(
            body.starts_with(&format!("{method} /api/item?x=1 HTTP/1.1\n")),
            "{body}"
        );
        assert!(body.contains("\nCookie: a=1"), "{body}");
        let (status, head, _) = ask(&addr, method, "/index.html", &[]);
        assert_eq!(status, 501, "{method}: {head}");
    }
    // A body with it, then another request on the same connection.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(
        b"PURGE /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: x\r\n\
          Connection: close\r\n\r\n",
    )
    .unwrap();
    let mut both = String::new();
    s.read_to_string(&mut both).unwrap();
    assert!(both.starts_with("HTTP/1.1 501"), "{both}");
    assert!(both.contains("HTTP/1.1 200") && both.ends_with("home\n"), "{both}");

    assert_eq!(curl_h2c(&addr, "PURGE", "/api/h2").0, 200);
    assert_eq!(curl_h2c(&addr, "PURGE", "/index.html").0, 501);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "PURGE /api/item?x=1 HTTP/1.1",
            "BAN /api/item?x=1 HTTP/1.1",
            "X-REFRESH_2 /api/item?x=1 HTTP/1.1",
            "PURGE /api/h2 HTTP/1.1",
        ]
    );
    // One label for every method outside the common ones.
    let text = common::get(&metrics, "/metrics");
    assert!(
        text.contains("peregrine_requests_by_method_total{method=\"other\"} 9"),
        "{text}"
    );
    assert!(!text.contains("PURGE"), "{text}");
}

/// The same over HTTP/3 (aioquic).
#[test]
fn methods_outside_the_registry_go_upstream_over_http3() {
    let t = Scratch::new("proxy-methods-h3");
    let (up, seen) = echo_upstream();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_file = t.write("cert.pem", cert.pem());
    let key_file = t.write("key.pem", key.serialize_pem());
    t.write("site/index.html", "home\n");
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}"))
            .arg("--tls-cert")
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file),
    );
    let port = test_support::process::last_addr(&server.line(" on https://"))
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let answers = common::h3(
        port,
        "localhost",
        &[("PURGE", "/api/h3", &[]), ("PURGE", "/index.html", &[])],
    );
    assert_eq!(answers[0].0, 200, "{:?}", answers[0]);
    assert!(answers[0].2.starts_with("PURGE /api/h3 HTTP/1.1\n"), "{:?}", answers[0]);
    assert_eq!(answers[1].0, 501, "{:?}", answers[1]);
    assert_eq!(seen.lock().unwrap().clone(), ["PURGE /api/h3 HTTP/1.1"]);
}

/// TRACE under a proxy prefix is answered 405 with `Allow` by the proxy
/// (nginx's answer): the upstream never echoes the client's Cookie and
/// Authorization back to a script (cross-site tracing). A route that
/// passes it (`trace = true`) sends it on.
#[test]
fn trace_is_answered_405_here_unless_the_route_passes_it() {
    let t = Scratch::new("proxy-trace");
    let (up, seen) = echo_upstream();
    let (_server, addr) = serve(&t, up, &[]);
    let (status, head, _) = ask(
        &addr,
        "TRACE",
        "/api/x",
        &["Cookie: s=secret", "Authorization: Bearer t"],
    );
    assert_eq!(status, 405, "{head}");
    let allow = head
        .lines()
        .find_map(|l| l.strip_prefix("Allow: "))
        .unwrap_or_else(|| panic!("no Allow: {head}"));
    assert!(allow.contains("GET") && !allow.contains("TRACE"), "{allow}");
    assert_eq!(curl_h2c(&addr, "TRACE", "/api/x").0, 405);
    assert!(seen.lock().unwrap().is_empty(), "{:?}", seen.lock().unwrap());

    let t = Scratch::new("proxy-trace-pass");
    let (_server, addr) = serve_route(&t, up, "trace = true");
    let (status, head, body) = ask(&addr, "TRACE", "/api/x", &[]);
    assert_eq!(status, 200, "{head}");
    assert!(body.starts_with("TRACE /api/x HTTP/1.1\n"), "{body}");
}

/// RFC 9110 §7.6.1: the fields a `Connection` names go no further, Cookie
/// (which the proxy writes again, joined) included; Authorization may not
/// be named and goes on. The same fields without `Connection` go on.
#[test]
fn fields_connection_names_go_no_further_cookie_included() {
    let t = Scratch::new("proxy-connection-cookie");
    let (up, _) = echo_upstream();
    let (_server, addr) = serve(&t, up, &[]);
    let fields = ["Cookie: session=1", "X-Secret: s", "Authorization: Bearer t"];
    let (status, _, body) = ask(&addr, "GET", "/api/x", &fields);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\nCookie: session=1") && body.contains("\nX-Secret: s"),
        "{body}"
    );
    // `exchange` sends `Connection: close`: a second `Connection` names.
    let named: Vec<&str> = ["Connection: Cookie, X-Secret, Authorization"]
        .into_iter()
        .chain(fields)
        .collect();
    let (status, _, body) = ask(&addr, "GET", "/api/y", &named);
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("GET /api/y HTTP/1.1\n"), "{body}");
    assert!(!body.contains("Cookie") && !body.contains("session=1"), "{body}");
    assert!(!body.contains("X-Secret"), "{body}");
    assert!(body.contains("\nAuthorization: Bearer t"), "{body}");
}

/// `Proxy-Authorization` is for the proxy that asked for it (RFC 9110
/// §11.7.2): Peregrine asks none, so it stays here (Caddy), unless the
/// route passes it (`proxy-authorization = true`, nginx), and even then
/// not when `Connection` names it.
#[test]
fn proxy_authorization_stays_here_unless_the_route_passes_it() {
    let t = Scratch::new("proxy-proxy-authorization");
    let (up, _) = echo_upstream();
    let (_server, addr) = serve(&t, up, &[]);
    let fields = ["Proxy-Authorization: Basic cHJveHk6cGFzcw==", "Authorization: Bearer t"];
    let (status, _, body) = ask(&addr, "GET", "/api/x", &fields);
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("Proxy-Authorization") && !body.contains("cHJveHk6"),
        "{body}"
    );
    assert!(body.contains("\nAuthorization: Bearer t"), "{body}");

    let t = Scratch::new("proxy-pass-proxy-authorization");
    let (_server, addr) = serve_route(&t, up, "proxy-authorization = true");
    let (status, _, body) = ask(&addr, "GET", "/api/z", &fields);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\nProxy-Authorization: Basic cHJveHk6cGFzcw=="), "{body}");
    let named = ["Proxy-Authorization: Basic x", "Connection: Proxy-Authorization"];
    let (_, _, body) = ask(&addr, "GET", "/api/z", &named);
    assert!(!body.contains("Proxy-Authorization"), "{body}");
}

/// An upstream that announces 100 bytes, sends 9 and closes: the client
/// gets the 9, and the access log counts 9 (nginx's `$body_bytes_sent`),
/// not the 100 announced.
#[test]
fn a_body_the_upstream_cuts_short_is_logged_with_the_bytes_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    // The upstream closes once the client has the 9 bytes (a close that
    // came with them would have the proxy reset the answer first).
    let (got_them, close) = std::sync::mpsc::channel::<()>();
    thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 && !line.ends_with("\r\n\r\n") {}
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n123456789");
        let _ = close.recv();
    });
    let t = Scratch::new("proxy-cut-short");
    let log = t.path("access.log");
    let (_server, addr) = serve(
        &t,
        up,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "$request_method $status $body_bytes_sent $upstream_status",
        ],
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /api/short HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"123456789") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got_them.send(()).unwrap();
    // The connection ends: the answer cannot be whole.
    let _ = s.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200") && got.ends_with("\r\n\r\n123456789"),
        "{got}"
    );
    let lines = log_lines(&log, 1);
    assert_eq!(lines, ["GET 200 9 200"]);
}

/// A WebSocket's 101 through the proxy is logged with its upstream's
/// address, status (101) and times (connect, header; the response time is
/// the header's: the line is written as the tunnel opens).
#[test]
fn a_websocket_101_is_logged_with_its_upstream() {
    const KEY: &str = common::WS_KEY;
    let up = common::switching_echo_upstream();
    let t = Scratch::new("proxy-ws-log");
    let log = t.path("access.log");
    let (_server, addr) = serve(
        &t,
        up,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "$status $upstream_addr $upstream_status $upstream_connect_time $upstream_header_time \
             $upstream_response_time",
        ],
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "{}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).unwrap();
    let lines = log_lines(&log, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let words: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(words[..3], ["101", up.to_string().as_str(), "101"], "{lines:?}");
    for time in &words[3..] {
        assert!(time.parse::<f64>().is_ok(), "{lines:?}");
    }
    assert_eq!(words.len(), 6, "{lines:?}");
}
