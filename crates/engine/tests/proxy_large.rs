//! Answers about one upstream read long (64 KiB), relayed byte for byte:
//! a body of known length up to 64 KiB whose head and body fill more than
//! the proxy's first read is gathered and sent whole (one `Body::Shared`
//! of the buffer it was read into); one whose rest is late goes on as a
//! channel, its head relayed at once, not held for the rest; longer ones
//! always stream. Every answer's bytes are checked, on one keep-alive
//! connection, so a reused upstream connection that kept a byte of the
//! answer before would show.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use common::{status_of, PATIENCE};
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};

/// `n` bytes that show a byte out of place.
fn body_of(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// `/burst/N`: a head and N bytes in one write. `/late`: a head and body
/// of 65,536 bytes whose first 65,536 bytes (the head and most of the
/// body) go at once and the rest when the test sends on `go`.
fn serve(stream: TcpStream, go: Arc<Mutex<Receiver<()>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let Some(head) = common::read_head(&mut reader) else {
            return;
        };
        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
        let whole = |n: usize| {
            let mut a =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\n\r\n")
                    .into_bytes();
            a.extend_from_slice(&body_of(n));
            a
        };
        if let Some(n) = path.strip_prefix("/api/burst/") {
            if out.write_all(&whole(n.parse().unwrap())).is_err() {
                return;
            }
        } else if path == "/api/late" {
            let answer = whole(65_536);
            let (first, rest) = answer.split_at(65_536);
            if out.write_all(first).is_err() {
                return;
            }
            // No timeout: a proxy that held the head for the rest would
            // leave the client waiting past its own timeout.
            if go.lock().unwrap().recv().is_err() {
                return;
            }
            if out.write_all(rest).is_err() {
                return;
            }
        } else if out
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

fn server(up: SocketAddr) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(Router::new().route("GET", "/api/*rest", proxy))
        .expect("server starts")
}

/// Reads one answer's head; its status and Content-Length.
fn read_answer_head(reader: &mut impl Read) -> (u16, usize) {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        reader.read_exact(&mut byte).expect("the answer's head");
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a Content-Length");
    (status_of(&head), length)
}

#[test]
fn answers_around_one_read_long_arrive_byte_for_byte_on_one_connection() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up);
    let mut client = TcpStream::connect(server.local_addr()).unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut reader = BufReader::new(client.try_clone().unwrap());
    // Around a read (64 KiB) and the whole-answer bound, twice each, and
    // a short one between (the gathered buffer must not leak into it).
    let sizes = [
        16_383, 16_384, 65_400, 65_441, 65_536, 65_537, 73_728, 200_000, 13, 65_536, 65_536, 13,
    ];
    for n in sizes {
        client
            .write_all(format!("GET /api/burst/{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let (status, length) = read_answer_head(&mut reader);
        assert_eq!((status, length), (200, n), "answer of {n} bytes");
        let mut body = vec![0; n];
        reader.read_exact(&mut body).unwrap();
        assert!(body == body_of(n), "the {n} bytes relayed as they were");
    }
}

#[test]
fn a_head_whose_body_is_late_is_relayed_before_the_rest_arrives() {
    let (up, go) = common::scripted_upstream(serve);
    let server = server(up);
    let mut client = TcpStream::connect(server.local_addr()).unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut reader = BufReader::new(client.try_clone().unwrap());
    for _ in 0..2 {
        client.write_all(b"GET /api/late HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        // The upstream holds the body's last bytes until `go`: the head
        // and the bytes already read come first (a proxy waiting for the
        // whole body would time the client out here).
        let (status, length) = read_answer_head(&mut reader);
        assert_eq!((status, length), (200, 65_536));
        let mut first = vec![0; 1024];
        reader.read_exact(&mut first).unwrap();
        go.send(()).unwrap();
        let mut rest = vec![0; 65_536 - 1024];
        reader.read_exact(&mut rest).unwrap();
        first.extend_from_slice(&rest);
        assert!(first == body_of(65_536), "the late answer relayed as it was");
    }
}
