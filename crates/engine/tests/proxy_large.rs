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

/// `/burst/N`: a head and N bytes in one write. `/chunked/N/C`: N bytes
/// chunked, in chunks of C bytes, in one write. `/late`: a head and body
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
        } else if let Some(sizes) = path.strip_prefix("/api/chunked/") {
            let (n, c) = sizes.split_once('/').unwrap();
            let (n, c): (usize, usize) = (n.parse().unwrap(), c.parse().unwrap());
            let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for piece in body_of(n).chunks(c) {
                a.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                a.extend_from_slice(piece);
                a.extend_from_slice(b"\r\n");
            }
            a.extend_from_slice(b"0\r\n\r\n");
            if out.write_all(&a).is_err() {
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

/// A client connection to `server`, and a reader over it.
fn connect(server: &Running) -> (TcpStream, BufReader<TcpStream>) {
    let client = TcpStream::connect(server.local_addr()).unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    let reader = BufReader::new(client.try_clone().unwrap());
    (client, reader)
}

#[test]
fn answers_around_one_read_long_arrive_byte_for_byte_on_one_connection() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up);
    let (mut client, mut reader) = connect(&server);
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

/// Reads a chunked body to its end (no trailers).
fn read_chunked(reader: &mut impl std::io::BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let n = usize::from_str_radix(line.trim_end(), 16).expect("a chunk size line");
        let mut chunk = vec![0; n + 2];
        reader.read_exact(&mut chunk).unwrap();
        assert_eq!(&chunk[n..], b"\r\n", "a chunk ends with CRLF");
        if n == 0 {
            return body;
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// Answers longer than the whole-answer bound go through the proxy's
/// channel: a full upstream read that is all body is moved into it (its
/// buffer then written to the client from where it is and read into
/// again), other reads are copied out; either way the bytes arrive as
/// they were, by length or chunked, on one connection whose buffers go
/// round (a buffer given back too early, or a chunk head taken for body,
/// would show in the pattern).
#[test]
fn long_answers_by_length_and_chunked_arrive_byte_for_byte_on_one_connection() {
    let (up, _go) = common::scripted_upstream(serve);
    let server = server(up);
    let (mut client, mut reader) = connect(&server);
    let mut ask = |path: &str| {
        client
            .write_all(format!("GET /api/{path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
    };
    for round in 0..3 {
        for n in [1 << 20, (1 << 20) + 4099, 3 * 65_536 + 1] {
            ask(&format!("burst/{n}"));
            let (status, length) = read_answer_head(&mut reader);
            assert_eq!((status, length), (200, n), "answer of {n} bytes, round {round}");
            let mut body = vec![0; n];
            reader.read_exact(&mut body).unwrap();
            assert!(body == body_of(n), "the {n} bytes relayed as they were, round {round}");
        }
        // Chunks longer than a read (their insides may go whole), about
        // one read, and short ones (every read holds chunk heads).
        for (n, c) in [(1 << 20, 300_000), (600_000, 65_536), (300_000, 1000)] {
            ask(&format!("chunked/{n}/{c}"));
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") {
                reader.read_exact(&mut byte).expect("the answer's head");
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
            assert_eq!(status_of(&head), 200, "{text}");
            assert!(text.contains("transfer-encoding: chunked"), "{text}");
            let body = read_chunked(&mut reader);
            assert_eq!(body.len(), n, "{n} bytes in chunks of {c}");
            assert!(body == body_of(n), "{n} bytes in chunks of {c} relayed as they were");
        }
    }
}

#[test]
fn a_head_whose_body_is_late_is_relayed_before_the_rest_arrives() {
    let (up, go) = common::scripted_upstream(serve);
    let server = server(up);
    let (mut client, mut reader) = connect(&server);
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
