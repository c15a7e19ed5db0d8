//! The access log's `reason`: the limit or rule behind a 4xx/5xx the
//! server made itself, `-` (null) for a handler's own answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use peregrine::{AccessLog, Limits, LogFormat, Request, Response, Router, Server};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-access-reason-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Sends `bytes` on a fresh connection and reads to the close.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The log's lines, `status reason`, in order.
fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn refusals_name_their_limit_and_handler_answers_have_none() {
    let dir = temp_dir("h1");
    let log = dir.join("access.log");
    let limits = Limits {
        head_bytes_max: 2048,
        body_bytes_max: 1000,
        head_timeout: Duration::from_millis(300),
        head_timeout_max: Duration::from_millis(300),
        ..Limits::default()
    };
    let app = Router::new()
        .get("/", |_: &Request<'_>| Response::text("home"))
        .get("/panic", |_: &Request<'_>| -> Response { panic!("a handler's bug") });
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .access_log(AccessLog::File(log.clone()))
        .access_log_format("$status $reason".parse::<LogFormat>().unwrap())
        .start(app)
        .unwrap();
    let addr = server.local_addr();
    let close = "Connection: close\r\n";
    let cases: [(String, &str); 7] = [
        (format!("GET / HTTP/1.1\r\nHost: x\r\n{close}\r\n"), "200 -"),
        (format!("GET /nope HTTP/1.1\r\nHost: x\r\n{close}\r\n"), "404 -"),
        (
            format!("GET /panic HTTP/1.1\r\nHost: x\r\n{close}\r\n"),
            "500 handler_panic",
        ),
        (
            format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n{close}\r\n"),
            "413 body_too_large",
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n{close}\r\n",
                "a".repeat(4000)
            ),
            "431 header_too_large",
        ),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\nBad Field: 1\r\n{close}\r\n"),
            "400 bad_request",
        ),
        // A head that never ends: 408 when head_timeout passes.
        ("GET / HTTP/1.1\r\nHost: x\r\n".to_owned(), "408 head_timeout"),
    ];
    for (request, _) in &cases {
        let answer = exchange(addr, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }
    server.shutdown();
    server.join().unwrap();
    let got = lines(&log);
    let want: Vec<&str> = cases.iter().map(|(_, line)| *line).collect();
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same over HTTP/2: a stream refused for its declared body is
/// logged with the limit; a handler's answer on it without one.
#[test]
fn an_http2_refusal_names_its_limit() {
    use test_support::h2::{frame, take_frame, END_HEADERS, HEADERS, RST_STREAM, SETTINGS};
    let dir = temp_dir("h2");
    let log = dir.join("access.log");
    let limits = Limits {
        body_bytes_max: 1000,
        ..Limits::default()
    };
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .access_log(AccessLog::File(log.clone()))
        .access_log_format("$protocol $status $reason".parse::<LogFormat>().unwrap())
        .start(Router::new().post("/", |_: &Request<'_>| Response::text("posted")))
        .unwrap();
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = test_support::h2::PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    // POST with content-length 5000 (over the limit), without END_STREAM.
    let mut block = Vec::new();
    for (index, value) in [(3u8, "POST"), (6, "http"), (4, "/"), (1, "localhost"), (28, "5000")] {
        // A literal without indexing: a 4-bit prefix for the name's index.
        if index < 15 {
            block.push(index);
        } else {
            block.extend_from_slice(&[15, index - 15]);
        }
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    hello.extend(frame(HEADERS, END_HEADERS, 1, &block));
    c.write_all(&hello).unwrap();
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 16384]);
    let status = loop {
        match take_frame(&mut buf) {
            Some(f) if f.kind == HEADERS && f.stream == 1 => break f.status(),
            Some(f) if f.kind == RST_STREAM => panic!("reset: {f:?}"),
            Some(_) => {}
            None => {
                let n = c.read(&mut chunk).unwrap();
                assert!(n > 0, "closed");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    };
    assert_eq!(status, 413);
    drop(c);
    server.shutdown();
    server.join().unwrap();
    assert_eq!(lines(&log), ["HTTP/2.0 413 body_too_large"]);
    let _ = std::fs::remove_dir_all(&dir);
}
