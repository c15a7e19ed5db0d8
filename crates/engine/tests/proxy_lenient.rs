//! The proxy in front of a deliberately lenient upstream, Python's
//! `http.server` (`lenient/upstream.py`), which takes nearly any framing
//! and answers the old ways. Two directions:
//! - the framing cases of the codec's tests (ambiguous lengths, bare LF,
//!   obs-fold, smuggling attempts) sent through the proxy reach the
//!   upstream as exactly the requests Peregrine answered: one request for
//!   each answer relayed, with the body Peregrine read, and nothing for
//!   one it refused;
//! - the upstream's HTTP/1.0 and close-delimited answers, and those with
//!   no Content-Length, reach the client whole.
//!
//! Needs `python3` (its standard library only); skipped with a message
//! without it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};

const PATIENCE: Duration = Duration::from_secs(10);

struct Lenient {
    child: Child,
    port: u16,
    lines: Receiver<String>,
}

impl Drop for Lenient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|p| p.is_file())
}

fn lenient() -> Option<Lenient> {
    let Some(python) = python3() else {
        eprintln!("skipped: no python3 on the PATH (the lenient upstream is Python's http.server)");
        return None;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/lenient/upstream.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port = first.trim().parse().expect("the upstream's port");
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Some(Lenient { child, port, lines })
}

fn proxy_server(port: u16) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    let mut router = Router::new();
    for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        router = router.route(method, "/*rest", proxy.clone());
    }
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

/// Sends `raw` on a fresh connection; everything that came back until
/// the server closed (each case's last request says `Connection: close`,
/// or is refused). `refused`: the client ends its side too, so that the
/// server's lingering close need not wait for it.
fn exchange(addr: SocketAddr, raw: &[u8], refused: bool) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(raw).unwrap();
    if refused {
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    got
}

/// The status of every answer in `raw` (heads found by their status
/// line; the cases' bodies hold none).
fn statuses(raw: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(raw);
    text.match_indices("HTTP/1.1 ")
        .filter(|(at, _)| text.get(at + 12..at + 13) == Some(" "))
        .filter_map(|(at, _)| text.get(at + 9..at + 12)?.parse().ok())
        .collect()
}

/// The upstream's lines up to the one for the request to `/end-N`, which
/// the test sends after each case.
fn lines_until_marker(up: &Lenient, n: usize) -> Vec<String> {
    let marker = format!(" /end-{n} ");
    let mut got = Vec::new();
    loop {
        let line = up.lines.recv_timeout(PATIENCE).expect("the upstream's log line");
        if line.contains(&marker) {
            return got;
        }
        got.push(line);
    }
}

#[test]
fn framing_cases_reach_a_lenient_upstream_as_exactly_the_requests_answered() {
    let Some(up) = lenient() else { return };
    let server = proxy_server(up.port);
    let addr = server.local_addr();
    // (bytes sent, the statuses the client gets, what the upstream reads:
    // `REQ method path version body-hex framing` lines, in order)
    let cases: &[(&[u8], &[u16], &[&str])] = &[
        // Length and chunked together: refused, nothing goes on.
        (
            b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
            &[400],
            &[],
        ),
        (b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello", &[400], &[]),
        (b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", &[400], &[]),
        (b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\nhello", &[400], &[]),
        (b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", &[400], &[]),
        (b"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", &[400], &[]),
        (b"GET /a HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", &[400], &[]),
        (b"GET /a HTTP/1.1\nHost: a\n\n", &[400], &[]),
        (b"GET /a HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", &[400], &[]),
        (b"GET /%2e%2e/a HTTP/1.1\r\nHost: a\r\n\r\n", &[400], &[]),
        (b"GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n", &[400], &[]),
        // Identical lengths are one length; the upstream reads that many.
        (
            b"POST /same HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\nConnection: close\r\n\r\nhello",
            &[200],
            &["REQ POST /same HTTP/1.1 68656c6c6f cl=5"],
        ),
        // A chunked body with extensions and a trailer: re-chunked (its
        // length is unknown until its end), without either.
        (
            b"POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
            &[200],
            &["REQ POST /chunked HTTP/1.1 68656c6c6f chunked"],
        ),
        // A body behind a GET's zero length is the next request, and is
        // sent as one: two answers, two requests.
        (
            b"GET /first HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\nGET /second HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            &[200, 200],
            &["REQ GET /first HTTP/1.1 - none", "REQ GET /second HTTP/1.1 - none"],
        ),
        // The bytes after a Content-Length body are a request of their own
        // too, never part of the first.
        (
            b"POST /short HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhiGET /next HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            &[200, 200],
            &["REQ POST /short HTTP/1.1 6869 cl=2", "REQ GET /next HTTP/1.1 - none"],
        ),
        // The path re-encoded canonically.
        (
            b"GET /x/z%7e%20 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            &[200],
            &["REQ GET /x/z~%20 HTTP/1.1 - none"],
        ),
    ];
    for (n, (raw, want_statuses, want_lines)) in cases.iter().enumerate() {
        let got = exchange(addr, raw, want_lines.is_empty());
        assert_eq!(
            statuses(&got),
            *want_statuses,
            "case {n}: {:?} got {:?}",
            String::from_utf8_lossy(raw),
            String::from_utf8_lossy(&got)
        );
        exchange(
            addr,
            format!("GET /end-{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
            false,
        );
        let lines = lines_until_marker(&up, n);
        assert_eq!(lines, *want_lines, "case {n}: {:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn http10_and_close_delimited_answers_of_a_lenient_upstream_come_back_whole() {
    let Some(up) = lenient() else { return };
    let server = proxy_server(up.port);
    let addr = server.local_addr();
    for (path, body) in [
        ("/close10", "until the close"),
        ("/nolength11", "no length either"),
        ("/keepalive10", "kept"),
    ] {
        for _ in 0..2 {
            // Twice: a connection the upstream closed is not reused.
            let got = exchange(
                addr,
                format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
                false,
            );
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {text}");
            let (head, rest) = text
                .split_once("\r\n\r\n")
                .unwrap_or_else(|| panic!("{path}: a whole answer: {text:?}"));
            // A close-delimited answer goes chunked to an HTTP/1.1 client
            // (the client's connection lives on); a length stays a length.
            let rest = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
                dechunk(rest).unwrap_or_else(|| panic!("{path}: cut chunks: {text:?}"))
            } else {
                rest.to_owned()
            };
            assert_eq!(rest, body, "{path}: {text}");
            assert!(!head.contains("HTTP/1.0"), "{path}: {text}");
        }
    }
    // An HTTP/1.0 client gets a close-delimited answer as HTTP/1.0 does.
    let got = exchange(addr, b"GET /close10 HTTP/1.0\r\n\r\n", false);
    let text = String::from_utf8_lossy(&got);
    assert!(text.ends_with("\r\n\r\nuntil the close"), "{text}");
    drop(up);
}

fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        s = rest.get(n + 2..)?;
    }
}
