//! Trailer fields (RFC 9110 §6.5) through the reverse proxy and from a
//! handler: an upstream's chunked answer ends with a trailer section,
//! which reaches an HTTP/1.1 client that said `TE: trailers` after the
//! last chunk, an HTTP/2 client as a last HEADERS frame (python-hyper's
//! `h2`), an HTTP/3 client as a HEADERS frame after the DATA (aioquic),
//! and no HTTP/1.1 client that did not say it. The fields that may not be
//! trailers (framing, routing, connection-specific) never pass; a trailer
//! section over the limit resets the answer rather than lose fields
//! silently. The upstream is a raw socket script, so every byte it sends
//! is the test's.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{body, Request, Response, Router, Running, Server, Trailers};

/// The trailer section the upstream sends after `hello`: two fields that
/// pass, and those that may not be trailers or that its `Connection`
/// named (`X-Hop`).
const SECTION: &str = "Grpc-Status: 0\r\nX-Sum:  abc \r\nContent-Length: 9\r\nHost: evil\r\nTransfer-Encoding: chunked\r\nX-Hop: 1\r\nTrailer: X-Sum\r\nTE: trailers\r\n";

/// The passing fields as an HTTP/1.1 client gets them.
const PASSED: &str = "grpc-status: 0\r\nx-sum: abc\r\n";

/// The request heads the upstream got.
type Heads = Arc<Mutex<Vec<String>>>;

/// An upstream that answers `/t` with a chunked `hello` and `SECTION`,
/// and `/big` with a trailer section of 40 KiB (over the 32 KiB limit),
/// on as many connections and requests as come.
fn upstream() -> (SocketAddr, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heads: Heads = Arc::default();
    let seen = heads.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = seen.clone();
            thread::spawn(move || serve(stream, &seen));
        }
    });
    (addr, heads)
}

fn serve(stream: TcpStream, seen: &Heads) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    loop {
        let head = read_head(&mut r);
        if head.is_empty() {
            return;
        }
        let big = head.starts_with("GET /big");
        seen.lock().unwrap().push(head);
        let _ = w.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: X-Hop\r\n\r\n5\r\nhello\r\n0\r\n",
        );
        if big {
            let _ = write!(w, "X-Big: {}\r\n\r\n", "a".repeat(40 * 1024));
        } else {
            let _ = write!(w, "{SECTION}\r\n");
        }
    }
}

fn read_head(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return String::new();
        }
        head.push_str(&line);
        if line == "\r\n" {
            return head;
        }
    }
}

/// The proxy (and `/lib`, a handler that ends its streamed body with
/// trailers), over TLS too when `tls` is set (a self-signed certificate
/// for localhost), and then over HTTP/3 as well.
fn server(up: SocketAddr, tls: bool) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let router = Router::new()
        .get("/lib", |_: &Request<'_>| {
            let (body, tx) = body::channel(1024);
            tx.send("hello").unwrap();
            tx.end_with_trailers(Trailers::new(&[("Grpc-Status", "0"), ("X-Sum", "abc")]).unwrap());
            Response::new(200).with_content_type("text/plain").with_body(body)
        })
        .route("GET", "/*rest", proxy);
    common::start_on_loopback(Server::new().workers(1), tls, router)
}

/// One HTTP/1.1 request with `fields`, and everything until the close.
fn h1(addr: SocketAddr, path: &str, fields: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\n{fields}\r\n");
    String::from_utf8(common::exchange(addr, request.as_bytes())).unwrap()
}

#[test]
fn an_http11_client_that_said_te_trailers_gets_the_allowed_trailers_after_the_last_chunk() {
    let (up, heads) = upstream();
    let server = server(up, false);
    let got = h1(server.local_addr(), "/t", "TE: trailers\r\nConnection: TE, close\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains("\r\nTransfer-Encoding: chunked\r\n"), "{got}");
    assert!(
        got.ends_with(&format!("\r\n\r\n5\r\nhello\r\n0\r\n{PASSED}\r\n")),
        "{got:?}"
    );
    // The upstream was told (TE is hop-by-hop: the proxy's own, named by
    // its Connection).
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.contains("\r\nTE: trailers\r\nConnection: TE\r\n"), "{head}");

    // The same from a handler (`Sender::end_with_trailers`).
    let got = h1(server.local_addr(), "/lib", "TE: trailers\r\nConnection: TE, close\r\n");
    assert!(
        got.ends_with(&format!("\r\n\r\n5\r\nhello\r\n0\r\n{PASSED}\r\n")),
        "{got:?}"
    );
}

#[test]
fn an_http11_client_that_did_not_say_te_trailers_gets_none_and_the_upstream_is_not_told() {
    let (up, heads) = upstream();
    let server = server(up, false);
    for fields in ["Connection: close\r\n", "TE: gzip\r\nConnection: TE, close\r\n"] {
        let got = h1(server.local_addr(), "/t", fields);
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{fields}: {got:?}");
        let head = heads.lock().unwrap().pop().unwrap().to_ascii_lowercase();
        assert!(!head.contains("\r\nte:"), "{head}");
        let got = h1(server.local_addr(), "/lib", fields);
        assert!(got.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{fields}: {got:?}");
    }
    // HTTP/1.0: no chunks, no trailers.
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    c.write_all(b"GET /t HTTP/1.0\r\nTE: trailers\r\nConnection: TE\r\n\r\n")
        .unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert!(got.ends_with("\r\n\r\nhello"), "{got:?}");
}

/// Past `RESPONSE_TRAILER_BYTES_MAX` (32 KiB) the answer, already begun,
/// cannot end well: the client's connection closes without the last
/// chunk, as nginx's does when an upstream's chunked body turns out
/// invalid mid-way; not a last chunk with the trailers cut short.
#[test]
fn an_oversize_trailer_section_ends_the_answer_as_broken() {
    let (up, _) = upstream();
    let server = server(up, false);
    let got = h1(server.local_addr(), "/big", "TE: trailers\r\nConnection: TE\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(!got.contains("\r\n0\r\n"), "no last chunk: {got:?}");
    assert!(!got.contains("X-Big") && !got.contains("x-big"), "{got:?}");
}

/// The lines python-hyper's `h2` printed for `path` (`trailers/h2_client.py`).
fn h2(server: &Running, path: &str) -> Vec<String> {
    common::h2_script_lines(server, "tests/trailers/h2_client.py", path)
}

#[test]
fn an_http2_client_gets_the_allowed_trailers_in_a_last_headers_frame() {
    let (up, heads) = upstream();
    let server = server(up, false);
    for path in ["/t", "/lib"] {
        let lines = h2(&server, path);
        let trailers: Vec<&str> = lines
            .iter()
            .filter(|l| l.starts_with("trailer "))
            .map(String::as_str)
            .collect();
        assert_eq!(
            trailers,
            ["trailer grpc-status: 0", "trailer x-sum: abc"],
            "{path}: {lines:?}"
        );
        assert!(lines.contains(&"status 200".to_owned()), "{lines:?}");
        assert_eq!(lines[lines.len() - 2..], ["body 5", "ended"], "{path}: {lines:?}");
    }
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.contains("\r\nTE: trailers\r\nConnection: TE\r\n"), "{head}");
    // Over the limit: the stream is reset, never ended with part of them.
    let lines = h2(&server, "/big");
    assert!(!lines.iter().any(|l| l.starts_with("trailer ")), "{lines:?}");
    assert!(lines.last().unwrap().starts_with("reset "), "{lines:?}");
}

#[test]
fn an_http3_client_gets_the_allowed_trailers_in_a_headers_frame_after_the_data() {
    let dir = common::tmp(&format!("trailers-h3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (up, _) = upstream();
    let server = server(up, true);
    let venv = common::tmp("aioquic-venv");
    let python = test_support::install::aioquic_python(&venv).unwrap_or_else(|e| panic!("aioquic is needed: {e}"));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": \
         [{{\"path\": \"/t\"}}, {{\"path\": \"/lib\"}}, {{\"path\": \"/big\"}}]}}",
        server.local_addr().port(),
        out.display()
    );
    let done = test_support::process::spawn_h3_client(&python, &spec, 60, true)
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    for i in 0..2 {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        assert!(head.starts_with("200\n"), "{head}");
        assert_eq!(std::fs::read(out.join(format!("{i}.body"))).unwrap(), b"hello");
        let trailers = std::fs::read_to_string(out.join(format!("{i}.trailers"))).unwrap_or_default();
        assert_eq!(trailers, "grpc-status: 0\nx-sum: abc\n", "request {i}");
    }
    let head = std::fs::read_to_string(out.join("2.head")).unwrap();
    assert!(head.starts_with("error reset"), "{head}");
    assert!(!out.join("2.trailers").exists());
    let _ = std::fs::remove_dir_all(dir);
}
