//! A client's request trailers (RFC 9110 §6.5) toward the upstream (issue
//! 26: "trailers where both sides allow"): an HTTP/1.1 chunked body's
//! trailer section (raw socket), HTTP/2's trailing HEADERS (python-hyper's
//! `h2`) and HTTP/3's (aioquic) reach an HTTP/1.1 upstream after the last
//! chunk of a chunked body, whether the body was read whole (64 KiB at
//! most, with a Content-Length) or streamed, less the fields that must not
//! be trailers or that the client's `Connection` named; a body read whole
//! with nothing to pass keeps its Content-Length. The same fields reach a
//! library handler (`Request::trailers`, `BodyReader::trailers`).
//!
//! The upstream is a scripted one: it decodes the chunked body itself and
//! answers with what it got (`report`), so every byte checked is what
//! crossed the upstream connection.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{body, Reply, Request, Response, Router, Running, Server};

/// The trailer fields every client sends: two that go on, and those that
/// may not (framing, routing, content, conditionals, cookies, this hop's
/// fields, one its `Connection` names when it can name one).
const SENT: [(&str, &str); 10] = [
    ("x-checksum", "abc"),
    ("content-length", "9"),
    ("host", "evil"),
    ("content-type", "text/evil"),
    ("if-match", "*"),
    ("cookie", "a=1"),
    ("x-forwarded-for", "6.6.6.6"),
    ("authorization", "Basic eA=="),
    ("x-hop", "1"),
    ("grpc-status", "0"),
];

/// What the upstream gets of `SENT` (from a client whose `Connection`
/// named `X-Hop`), as its trailer section.
const PASSED: &str = "x-checksum: abc\r\ngrpc-status: 0\r\n";

/// Reads a chunked body (RFC 9112 §7.1) strictly: the decoded bytes and
/// the trailer section as it came. `None` if it is not one.
fn read_chunked(r: &mut impl BufRead) -> Option<(Vec<u8>, String)> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let size = line.strip_suffix("\r\n")?.split(';').next()?;
        let size = usize::from_str_radix(size, 16).ok()?;
        if size == 0 {
            break;
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..]).ok()?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf).ok()?;
        if &crlf != b"\r\n" {
            return None;
        }
    }
    let mut section = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        if line == "\r\n" {
            return Some((body, section));
        }
        line.strip_suffix("\r\n")?;
        section.push_str(&line);
    }
}

/// What the upstream got, as its answer's body: `chunked N:BODY` then the
/// trailer section, or `length N:BODY` (a Content-Length body), where
/// BODY is the body if shorter than 64 bytes, else `x*` if it is all `x`.
fn report(head: &str, r: &mut impl BufRead) -> Option<String> {
    let lower = head.to_ascii_lowercase();
    let shown = |b: &[u8]| match b.len() {
        0..64 => String::from_utf8_lossy(b).into_owned(),
        _ if b.iter().all(|&c| c == b'x') => "x*".to_owned(),
        _ => "?".to_owned(),
    };
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map(|v| v.trim().parse::<usize>().unwrap());
    if lower.contains("\r\ntransfer-encoding: chunked\r\n") {
        if length.is_some() {
            return Some("both framings".to_owned());
        }
        let (body, section) = read_chunked(r)?;
        return Some(format!("chunked {}:{}\n{section}", body.len(), shown(&body)));
    }
    let mut body = vec![0; length.unwrap_or(0)];
    r.read_exact(&mut body).ok()?;
    Some(format!("length {}:{}\n", body.len(), shown(&body)))
}

/// The scripted upstream: each request answered with its `report`.
fn serve(stream: TcpStream, _go: Arc<Mutex<Receiver<()>>>) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    while let Some(head) = common::read_head(&mut r) {
        let Some(got) = report(&head, &mut r) else { return };
        let _ = write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{got}",
            got.len()
        );
    }
}

/// The proxy on `/*rest`, over TLS (and so HTTP/3) when `tls`; `/lib` a
/// handler that answers with the trailers it was given, `/lib-stream`
/// one that reads the body as it arrives and answers with them.
fn server(up: SocketAddr, tls: bool) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let router = Router::new()
        .post("/lib", |req: &Request<'_>| {
            let t = req.trailers().map(|t| t.as_bytes().to_vec()).unwrap_or_default();
            let text = format!(
                "{}:{}\n{}",
                req.body().len(),
                String::from_utf8_lossy(req.body()),
                String::from_utf8_lossy(&t)
            );
            Response::text(text)
        })
        .post(
            "/lib-stream",
            body::streamed(|req: &Request<'_>| {
                let mut reader = req.body_reader().expect("a body");
                let responder = req.defer();
                std::thread::spawn(move || {
                    let mut body = Vec::new();
                    let answer = match reader.read_to_end(&mut body) {
                        Ok(_) => {
                            let t = reader.trailers().map(|t| t.as_bytes().to_vec()).unwrap_or_default();
                            Response::text(format!(
                                "{}:{}\n{}",
                                body.len(),
                                String::from_utf8_lossy(&body),
                                String::from_utf8_lossy(&t)
                            ))
                        }
                        Err(_) => Response::error(400),
                    };
                    responder.send(answer);
                });
                Reply::Later
            }),
        )
        .route("POST", "/*rest", proxy);
    common::start_on_loopback(Server::new().workers(1), tls, router)
}

/// One HTTP/1.1 request (`head` then `body`, as sent), and the answer's
/// body.
fn h1(addr: SocketAddr, head: &str, body: &str) -> String {
    let got = String::from_utf8(common::exchange(addr, format!("{head}{body}").as_bytes())).unwrap();
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    got.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// A chunked body of `chunks` and `SENT` as its trailer section.
fn chunked_with_trailers(chunks: &[&str]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("{:x}\r\n{c}\r\n", c.len())).collect();
    body.push_str("0\r\n");
    for (name, value) in SENT {
        body.push_str(&format!("{name}: {value}\r\n"));
    }
    body.push_str("\r\n");
    body
}

#[test]
fn an_http11_chunked_requests_trailers_reach_the_upstream_less_the_forbidden_ones() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up, false);
    let head = "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: X-Hop, close\r\n\r\n";
    let got = h1(server.local_addr(), head, &chunked_with_trailers(&["hel", "lo"]));
    assert_eq!(got, format!("chunked 5:hello\n{PASSED}"));

    // Without trailers: the last chunk and the empty line, as before.
    let got = h1(server.local_addr(), head, "5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(got, "chunked 5:hello\n");
    // A Content-Length body read whole keeps its length.
    let head = "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
    assert_eq!(h1(server.local_addr(), head, "hello"), "length 5:hello\n");
}

#[test]
fn a_handler_reads_an_http11_requests_trailers_whole_or_after_the_streamed_body() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up, false);
    // The handler gets every field that may be a trailer (the `Connection`
    // rule and the proxy's own list are the proxy's).
    let mine =
        "x-checksum: abc\r\nif-match: *\r\ncookie: a=1\r\nx-forwarded-for: 6.6.6.6\r\nx-hop: 1\r\ngrpc-status: 0\r\n";
    for path in ["/lib", "/lib-stream"] {
        let head =
            format!("POST {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        let got = h1(server.local_addr(), &head, &chunked_with_trailers(&["hel", "lo"]));
        assert_eq!(got, format!("5:hello\n{mine}"), "{path}");
        let got = h1(server.local_addr(), &head, "5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(got, "5:hello\n", "{path}");
    }
}

/// The lines `trailers/h2_upload.py` printed for `spec`.
fn h2(server: &Running, spec: &str) -> Vec<String> {
    common::h2_script_lines(server, "tests/trailers/h2_upload.py", spec)
}

/// `SENT` as a JSON list of pairs, less `x-hop` (an HTTP/2 or HTTP/3
/// request has no `Connection` to name it) and `host` (python's `h2`
/// refuses it after the head).
fn sent_json() -> String {
    let pairs: Vec<String> = SENT
        .iter()
        .filter(|(n, _)| *n != "x-hop" && *n != "host")
        .map(|(n, v)| format!("[\"{n}\", \"{v}\"]"))
        .collect();
    format!("[{}]", pairs.join(", "))
}

#[test]
fn an_http2_requests_trailers_reach_the_upstream_whether_its_body_was_read_whole_or_streamed() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up, false);
    let sent = sent_json();
    let cases = [
        // Read whole (a Content-Length of at most 64 KiB): sent chunked,
        // as it has trailers to pass.
        (
            format!("{{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": {sent}}}"),
            format!("chunked 5:xxxxx\n{PASSED}"),
        ),
        // Streamed (no length): chunked anyway.
        (
            format!("{{\"path\": \"/up\", \"body_len\": 5, \"trailers\": {sent}}}"),
            format!("chunked 5:xxxxx\n{PASSED}"),
        ),
        // Streamed (over 64 KiB) with `Trailer` in its head: chunked.
        (
            format!(
                "{{\"path\": \"/up\", \"body_len\": 100000, \"content_length\": true, \
                 \"headers\": [[\"trailer\", \"x-checksum\"]], \"trailers\": {sent}}}"
            ),
            format!("chunked 100000:x*\n{PASSED}"),
        ),
        // Read whole with nothing to pass (a cookie may not go on): its
        // Content-Length stays.
        (
            "{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": [[\"cookie\", \"a=1\"]]}"
                .to_owned(),
            "length 5:xxxxx\n".to_owned(),
        ),
        // No trailers at all.
        (
            "{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": []}".to_owned(),
            "length 5:xxxxx\n".to_owned(),
        ),
    ];
    for (spec, want) in cases {
        let lines = h2(&server, &spec);
        assert_eq!(lines[0], "status 200", "{spec}: {lines:?}");
        let got = lines[1..lines.len() - 1].join("\n");
        // Printed by lines: no CR, and the body's last line break makes
        // an empty line.
        assert_eq!(
            got.trim_end(),
            format!("body {want}").replace('\r', "").trim_end(),
            "{spec}"
        );
        assert_eq!(lines.last().unwrap(), "ended", "{spec}");
    }
    // A library handler sees them too.
    let mine = "x-checksum: abc\ncookie: a=1\nif-match: *";
    for path in ["/lib", "/lib-stream"] {
        let spec = format!("{{\"path\": \"{path}\", \"body_len\": 3, \"trailers\": {sent}}}");
        let lines = h2(&server, &spec);
        let got = lines[1..lines.len() - 1].join("\n").replace('\r', "");
        for line in mine.lines() {
            assert!(got.contains(line), "{path}: {got:?}");
        }
        assert!(
            !got.contains("content-length") && !got.contains("authorization"),
            "{path}: {got:?}"
        );
    }
}

#[test]
fn an_http3_requests_trailers_reach_the_upstream_whether_its_body_was_read_whole_or_streamed() {
    let dir = common::tmp(&format!("request-trailers-h3-{}", std::process::id()));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up, true);
    let python = test_support::install::aioquic_python(&common::tmp("aioquic-venv"))
        .unwrap_or_else(|e| panic!("aioquic is needed: {e}"));
    let sent = sent_json();
    let hello = "68656c6c6f";
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": [\
         {{\"method\": \"POST\", \"path\": \"/up\", \"headers\": [[\"content-length\", \"5\"]], \"body\": \"{hello}\", \"trailers\": {sent}}}, \
         {{\"method\": \"POST\", \"path\": \"/up\", \"body\": \"{hello}\", \"trailers\": {sent}}}, \
         {{\"method\": \"POST\", \"path\": \"/up\", \"headers\": [[\"content-length\", \"5\"]], \"body\": \"{hello}\", \"trailers\": [[\"cookie\", \"a=1\"]]}}]}}",
        server.local_addr().port(),
        out.display()
    );
    let done = test_support::process::spawn_h3_client(&python, &spec, 60, true)
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let wants = [
        format!("chunked 5:hello\n{PASSED}"),
        format!("chunked 5:hello\n{PASSED}"),
        "length 5:hello\n".to_owned(),
    ];
    for (i, want) in wants.iter().enumerate() {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        assert!(head.starts_with("200\n"), "request {i}: {head}");
        let body = std::fs::read_to_string(out.join(format!("{i}.body"))).unwrap();
        assert_eq!(&body, want, "request {i}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An h2c upstream (`h2up/report_server.py`) that answers each request
/// with its body's length, the trailer fields it got and the frame that
/// ended it; killed when dropped.
struct H2Up {
    child: std::process::Child,
    addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl Drop for H2Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn h2_upstream() -> H2Up {
    let python = test_support::install::h2_python(&common::tmp("h2-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's h2: {e}"));
    let dir = common::tmp(&format!("request-trailers-h2up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port_file = dir.join("port");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h2up/report_server.py");
    let child = std::process::Command::new(python)
        .arg(script)
        .arg(&port_file)
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let port: u16 = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            break p.trim().parse().unwrap();
        }
        assert!(start.elapsed() < common::PATIENCE, "the upstream did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    H2Up {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    }
}

/// What the h2c upstream gets of `SENT`: the same two fields as an
/// HTTP/1.1 upstream, in a trailing HEADERS.
const PASSED_H2: &str = "trailers x-checksum: abc; grpc-status: 0";

/// Request trailers to an HTTP/2 upstream (RFC 9113 §8.1): a HEADERS
/// frame with END_STREAM after the last DATA, less the same fields as
/// toward HTTP/1.1, whether the body was read whole or streamed, and from
/// an HTTP/1.1 client or an HTTP/2 one. A request without trailers (or
/// with none that may go on) ends as before: END_STREAM on its last DATA
/// (read whole) or on an empty DATA after it (streamed).
#[test]
fn request_trailers_reach_an_http2_upstream_as_a_trailing_headers_frame() {
    let up = h2_upstream();
    let proxy = Proxy::new(Upstream::parse(&format!("h2c://{}", up.addr)).unwrap());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(Router::new().route("POST", "/*rest", proxy))
        .expect("server starts");
    let addr = server.local_addr();
    // HTTP/1.1 chunked: streamed (no length).
    let head = "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: X-Hop, close\r\n\r\n";
    let got = h1(addr, head, &chunked_with_trailers(&["hel", "lo"]));
    assert_eq!(got, format!("body 5\n{PASSED_H2}\nend trailers\n"));
    let got = h1(addr, head, "5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(
        got, "body 5\ntrailers none\nend data 0\n",
        "no trailers: an empty DATA ends it"
    );
    let got = h1(addr, head, "5\r\nhello\r\n0\r\ncookie: a=1\r\n\r\n");
    assert_eq!(got, "body 5\ntrailers none\nend data 0\n", "none that may go on");
    // HTTP/1.1 with a length: read whole, no trailers (as before).
    let head = "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
    assert_eq!(h1(addr, head, "hello"), "body 5\ntrailers none\nend data 5\n");

    // HTTP/2 clients: read whole (a length of at most 64 KiB), streamed
    // (no length, or over 64 KiB).
    let sent = sent_json();
    let cases = [
        (
            format!("{{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": {sent}}}"),
            format!("body 5\n{PASSED_H2}\nend trailers"),
        ),
        (
            format!("{{\"path\": \"/up\", \"body_len\": 5, \"trailers\": {sent}}}"),
            format!("body 5\n{PASSED_H2}\nend trailers"),
        ),
        (
            format!("{{\"path\": \"/up\", \"body_len\": 100000, \"content_length\": true, \"trailers\": {sent}}}"),
            format!("body 100000\n{PASSED_H2}\nend trailers"),
        ),
        (
            "{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": [[\"cookie\", \"a=1\"]]}"
                .to_owned(),
            "body 5\ntrailers none\nend data 5".to_owned(),
        ),
        (
            "{\"path\": \"/up\", \"body_len\": 5, \"content_length\": true, \"trailers\": []}".to_owned(),
            "body 5\ntrailers none\nend data 5".to_owned(),
        ),
    ];
    for (spec, want) in cases {
        let lines = h2(&server, &spec);
        assert_eq!(lines[0], "status 200", "{spec}: {lines:?}");
        let got = lines[1..lines.len() - 1].join("\n");
        assert_eq!(got.trim_end(), format!("body {want}"), "{spec}");
        assert_eq!(lines.last().unwrap(), "ended", "{spec}");
    }
}
