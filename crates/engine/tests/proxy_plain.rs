//! The proxy's one-pass relay of the common upstream answer
//! (`codec::client::relay_plain`: an HTTP/1.1 answer with Content-Length
//! whose body came with its head) end to end, against the general path
//! (the answer parsed by `parse_response_head`), which the same answer
//! takes when a byte follows its body: for a matrix of answers (status
//! codes, field sets with hop-by-hop and Connection-named fields, bodies
//! from 0 bytes to just past what the one pass takes), the client gets
//! the same bytes either way; a HEAD's head is the GET's. Every
//! malformed answer the proxy must refuse is a 502 and a closed upstream
//! connection when it comes as the one pass would have taken it.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{read_head, status_of, Client, PATIENCE};
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};
use test_support::http::head_of as head;

/// The one pass takes bodies shorter than this (`pool.rs`'s `SHARE_MIN`).
const ONE_PASS_BODY_MAX: usize = 16 * 1024 - 1;

/// An upstream that answers `GET /p/N` (and HEAD) with `answers[N]` as it
/// is, `/s/N/K` with the same in two writes, its first K bytes 20 ms
/// before the rest, and `/g/N` with a byte after it (a byte no answer
/// may have: the one pass leaves it to the general path, which answers,
/// then closes that connection). A HEAD gets the head alone. Each connection's end,
/// when the proxy closes it, is sent on `closed` with the connection's
/// number; `accepted` counts them.
struct Up {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Receiver<usize>,
}

fn upstream(answers: Vec<(Vec<u8>, Vec<u8>)>) -> Up {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let (tx, closed) = mpsc::channel();
    let answers = Arc::new(answers);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let (tx, answers) = (tx.clone(), answers.clone());
            thread::spawn(move || serve(stream, n, &answers, &tx));
        }
    });
    Up { addr, accepted, closed }
}

fn serve(stream: TcpStream, n: usize, answers: &[(Vec<u8>, Vec<u8>)], closed: &Sender<usize>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    while let Some(head) = read_head(&mut reader) {
        let line = head.lines().next().unwrap_or_default().to_owned();
        let mut words = line.split(' ');
        let method = words.next().unwrap_or_default();
        let target = words.next().unwrap_or_default();
        let (kind, i) = target[1..].split_once('/').expect("/p/N, /g/N or /s/N/K");
        let (i, split) = match i.split_once('/') {
            Some((i, k)) => (i, k.parse::<usize>().unwrap()),
            None => (i, usize::MAX),
        };
        let (head, body) = &answers[i.parse::<usize>().unwrap()];
        let mut answer = head.clone();
        if method != "HEAD" {
            answer.extend_from_slice(body);
            if kind == "g" {
                answer.push(b'!');
            }
        }
        if split < answer.len() {
            // `/s/N/K`: the first K bytes, then the rest a moment later,
            // so that the proxy's first read holds only the first part.
            if out.write_all(&answer[..split]).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(20));
            answer.drain(..split);
        }
        if out.write_all(&answer).is_err() {
            break;
        }
    }
    // The proxy closed it (or reset it): nothing more comes.
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let _ = closed.send(n);
}

fn proxy(up: &Up) -> Running {
    let upstream = Upstream::parse(&format!("http://{}", up.addr)).unwrap();
    let proxy = Proxy::new(upstream);
    let router = Router::new()
        .route("GET", "/*rest", proxy.clone())
        .route("HEAD", "/*rest", proxy);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

/// One answer on `client`'s connection, read whole: its head up to the
/// empty line and, unless `head_only`, the body its Content-Length says.
fn answer(client: &mut TcpStream, request: &str, head_only: bool) -> Vec<u8> {
    client.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            _ => panic!("the answer ended in its head: {}", String::from_utf8_lossy(&raw)),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let length = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length: ")
                .or(l.strip_prefix("Content-Length: "))
        })
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    if !head_only {
        let mut body = vec![0; length];
        client.read_exact(&mut body).unwrap();
        raw.extend_from_slice(&body);
    }
    raw
}

/// `raw` with its Date line's value left out (two answers may straddle a
/// second).
fn dateless(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw).into_owned();
    text.split("\r\n")
        .map(|l| if l.starts_with("Date: ") { "Date: -" } else { l })
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn connect(server: &Running) -> TcpStream {
    let c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c
}

#[test]
fn an_answer_the_one_pass_relays_reaches_the_client_as_the_general_path_writes_it() {
    let statuses = [
        "HTTP/1.1 200 OK",
        "HTTP/1.1 201 Created",
        "HTTP/1.1 301 Moved Permanently",
        "HTTP/1.1 404 Not Found",
        "HTTP/1.1 503 Service Unavailable",
    ];
    let sets: &[&[&str]] = &[
        &[],
        &[
            "Server: limit",
            "Date: Thu, 01 Jan 2026 00:00:00 GMT",
            "Content-Type: text/plain",
        ],
        &[
            "Keep-Alive: timeout=5",
            "Proxy-Connection: keep-alive",
            "TE: trailers",
            "Trailer: x",
            "Upgrade: h2c",
            "X-Kept: yes",
        ],
        &[
            "Connection: keep-alive",
            "Content-Type: application/json",
            "Cache-Control: no-store",
        ],
        // Named by Connection: left to the general relay, dropped there.
        &["X-Named: dropped", "Connection: x-named", "X-Kept: yes"],
        &[
            "X-Spaced:   v  ",
            "X-Tab:\tv\t",
            "X-Empty:",
            "set-cookie: a=1",
            "Set-Cookie: b=2",
        ],
    ];
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"x".to_vec(),
        b"Hello, World!".to_vec(),
        vec![b'y'; ONE_PASS_BODY_MAX],
        vec![b'z'; ONE_PASS_BODY_MAX + 1],
    ];
    let mut answers = Vec::new();
    for status in statuses {
        for set in sets {
            for body in &bodies {
                let mut fields = set.to_vec();
                let length = format!("Content-Length: {}", body.len());
                fields.insert(fields.len() / 2, &length);
                answers.push((head(status, &fields), body.clone()));
            }
        }
    }
    let up = upstream(answers.clone());
    let server = proxy(&up);
    let mut c = connect(&server);
    for (i, (head, _)) in answers.iter().enumerate() {
        let request = |kind: &str, method: &str| format!("{method} /{kind}/{i} HTTP/1.1\r\nHost: site.test\r\n\r\n");
        let one_pass = answer(&mut c, &request("p", "GET"), false);
        let general = answer(&mut c, &request("g", "GET"), false);
        let upstream_head = String::from_utf8_lossy(head);
        assert_eq!(dateless(&one_pass), dateless(&general), "{upstream_head}");
        let head_only = answer(&mut c, &request("p", "HEAD"), true);
        let at = one_pass.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(dateless(&head_only), dateless(&one_pass[..at]), "HEAD: {upstream_head}");
        let text = String::from_utf8_lossy(&one_pass[..at]).to_lowercase();
        let names: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| Some(l.split_once(':')?.0))
            .collect();
        for gone in [
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "upgrade",
            "x-named",
            "connection",
        ] {
            assert!(!names.contains(&gone), "{gone} in {text}");
        }
        assert!(
            text.contains("\r\nserver: peregrine\r\n") && !text.contains("limit"),
            "{text}"
        );
    }
    // Every `/g/` answer closed its upstream connection; the `/p/` and
    // HEAD answers (all kept alive) did not.
    for _ in 0..answers.len() {
        up.closed.recv_timeout(PATIENCE).expect("a connection the proxy closed");
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), answers.len() + 1);
}

/// The one pass's answer is copied into an HTTP/1.1 connection's output
/// whole (`Conn::on_relayed`) with the head's first lines the client's
/// request decides: an HTTP/1.0 client's, with and without keep-alive, a
/// client that said `close`, and requests pipelined on one connection
/// (answered in order) get what the general path writes for them.
#[test]
fn a_relayed_answer_keeps_each_clients_framing_and_order() {
    let answers = vec![
        (
            head("HTTP/1.1 200 OK", &["Content-Type: text/plain", "Content-Length: 13"]),
            b"Hello, World!".to_vec(),
        ),
        (
            head("HTTP/1.1 404 Not Found", &["Content-Length: 4", "X-Kept: yes"]),
            b"gone".to_vec(),
        ),
        (head("HTTP/1.1 201 Created", &["Content-Length: 0"]), Vec::new()),
        (
            head(
                "HTTP/1.1 503 Service Unavailable",
                &["Retry-After: 5", "Content-Length: 1"],
            ),
            b"x".to_vec(),
        ),
    ];
    let up = upstream(answers.clone());
    let server = proxy(&up);
    let modes = [
        ("HTTP/1.0", ""),
        ("HTTP/1.0", "Connection: keep-alive\r\n"),
        ("HTTP/1.1", "Connection: close\r\n"),
    ];
    for (version, field) in modes {
        for i in 0..answers.len() {
            let request = |kind: &str| format!("GET /{kind}/{i} {version}\r\nHost: site.test\r\n{field}\r\n");
            let closes = field.is_empty() || field.contains("close");
            let written = |kind: &str| {
                if closes {
                    let mut c = Client::connect(server.local_addr());
                    c.send(request(kind).as_bytes());
                    c.read_to_close()
                } else {
                    // Kept alive: a second request on the same connection
                    // is answered too.
                    let mut c = connect(&server);
                    let first = answer(&mut c, &request(kind), false);
                    let again = answer(&mut c, &request(kind), false);
                    assert_eq!(dateless(&first), dateless(&again));
                    first
                }
            };
            let (one_pass, general) = (written("p"), written("g"));
            assert_eq!(dateless(&one_pass), dateless(&general), "{version} {field:?} {i}");
            let text = String::from_utf8_lossy(&one_pass).to_lowercase();
            match (closes, version) {
                (true, _) => assert!(text.contains("\r\nconnection: close\r\n"), "{text}"),
                (false, "HTTP/1.0") => assert!(text.contains("\r\nconnection: keep-alive\r\n"), "{text}"),
                _ => {}
            }
        }
    }
    // Pipelined: three requests in one write, three answers in order.
    let mut c = connect(&server);
    let batch: String = [0, 1, 3]
        .iter()
        .map(|i| format!("GET /p/{i} HTTP/1.1\r\nHost: site.test\r\n\r\n"))
        .collect();
    c.write_all(batch.as_bytes()).unwrap();
    for i in [0, 1, 3] {
        let got = answer(&mut c, "", false);
        let mut g = connect(&server);
        let want = answer(
            &mut g,
            &format!("GET /g/{i} HTTP/1.1\r\nHost: site.test\r\n\r\n"),
            false,
        );
        assert_eq!(dateless(&got), dateless(&want), "pipelined {i}");
    }
}

#[test]
fn an_upstream_that_says_close_is_not_asked_again_on_that_connection() {
    let answers = vec![
        (
            head("HTTP/1.1 200 OK", &["Connection: close", "Content-Length: 2"]),
            b"ok".to_vec(),
        ),
        (head("HTTP/1.1 200 OK", &["Content-Length: 2"]), b"ok".to_vec()),
    ];
    let up = upstream(answers);
    let server = proxy(&up);
    let mut c = connect(&server);
    for i in [1, 1, 0, 1] {
        let raw = answer(
            &mut c,
            &format!("GET /p/{i} HTTP/1.1\r\nHost: site.test\r\n\r\n"),
            false,
        );
        assert_eq!(status_of(&raw), 200);
        assert!(raw.ends_with(b"\r\n\r\nok"), "{}", String::from_utf8_lossy(&raw));
        assert!(!String::from_utf8_lossy(&raw).to_lowercase().contains("connection"));
    }
    // The `close` answer ended the first connection; the last request took a new one.
    assert_eq!(up.closed.recv_timeout(PATIENCE), Ok(0));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

/// An answer whose first read holds only part of it (cut in its status
/// line, in a field's name or value, at the head's end, in its body):
/// the first read's one pass (`UpConn::read_answer`) declines it, and the
/// client still gets what the whole answer in one read gives it, on the
/// same kept-alive upstream connection; a malformed answer cut so is
/// still a 502 and its connection closed.
#[test]
fn an_answer_read_in_two_parts_is_relayed_as_the_whole_answer_is() {
    let answers = vec![
        (
            head(
                "HTTP/1.1 200 OK",
                &[
                    "Server: limit",
                    "Date: Thu, 01 Jan 2026 00:00:00 GMT",
                    "Content-Type: text/plain",
                    "Content-Length: 13",
                ],
            ),
            b"Hello, World!".to_vec(),
        ),
        (
            head(
                "HTTP/1.1 404 Not Found",
                &[
                    "Keep-Alive: timeout=5",
                    "X-Spaced:   v  ",
                    "Content-Length: 1",
                    "Connection: keep-alive",
                ],
            ),
            b"x".to_vec(),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-A: a\rb\r\n\r\n".to_vec(),
            b"secret".to_vec(),
        ),
    ];
    let up = upstream(answers.clone());
    let server = proxy(&up);
    let mut c = connect(&server);
    for (i, (head, body)) in answers.iter().enumerate().take(2) {
        let whole = answer(
            &mut c,
            &format!("GET /p/{i} HTTP/1.1\r\nHost: site.test\r\n\r\n"),
            false,
        );
        let n = head.len() + body.len();
        for split in [5, 13, 20, 40, head.len() - 2, head.len(), head.len() + 2, n - 1] {
            let request = format!("GET /s/{i}/{split} HTTP/1.1\r\nHost: site.test\r\n\r\n");
            let parts = answer(&mut c, &request, false);
            assert_eq!(dateless(&parts), dateless(&whole), "answer {i} cut at {split}");
        }
    }
    // All of it on the first connection, never closed.
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
    assert!(up.closed.try_recv().is_err());
    for split in [5, 20, 40] {
        let mut c = Client::connect(server.local_addr());
        c.send(format!("GET /s/2/{split} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n").as_bytes());
        let raw = c.read_to_close();
        assert_eq!(
            status_of(&raw),
            502,
            "cut at {split}: {}",
            String::from_utf8_lossy(&raw)
        );
        assert!(!String::from_utf8_lossy(&raw).contains("secret"));
        up.closed.recv_timeout(PATIENCE).expect("its connection closed");
    }
}

/// Issue 26's malformed answers, each as the one pass would see it (its
/// whole body in the same read, a GET unless it says HEAD): 502, none of
/// the upstream's text, and its connection closed, never pooled.
#[test]
fn malformed_answers_are_502_and_their_upstream_connection_closed() {
    let big = format!("X-Big: {}", "b".repeat(32 * 1024));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\nsecret".to_vec(),
        ),
        ("GET", b"HTTP/1.1 200 O\rK\r\nContent-Length: 6\r\n\r\nsecret".to_vec()),
        ("GET", b"HTTP/1.1 200 O\nK\r\nContent-Length: 6\r\n\r\nsecret".to_vec()),
        ("GET", b"HTTP/1.1 200 O\0K\r\nContent-Length: 6\r\n\r\nsecret".to_vec()),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 6\r\n\r\nsecret".to_vec(),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nX-A: a\nb\r\nContent-Length: 6\r\n\r\nsecret".to_vec(),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 6\r\n\r\nsecret".to_vec(),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\nX-A: a\r\n\r\nsecret".to_vec(),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Length: 7\r\n\r\nsecret".to_vec(),
        ),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 6x\r\n\r\nsecret".to_vec()),
        (
            "GET",
            format!("HTTP/1.1 200 OK\r\n{big}\r\nContent-Length: 6\r\n\r\nsecret").into_bytes(),
        ),
        (
            "GET",
            b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret".to_vec(),
        ),
        ("GET", b"HTTP/1.1 204 No Content\r\n\r\nsecret".to_vec()),
        ("GET", b"HTTP/1.1 304 Not Modified\r\n\r\nsecret".to_vec()),
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret".to_vec()),
        (
            "GET",
            b"HTTP/1.1 600 Beyond\r\nContent-Length: 6\r\n\r\nsecret".to_vec(),
        ),
    ];
    // Sent whole, the HEAD's body too (all of it is `serve`'s head).
    let answers: Vec<(Vec<u8>, Vec<u8>)> = cases.iter().map(|(_, a)| (a.clone(), Vec::new())).collect();
    let up = upstream(answers);
    let server = proxy(&up);
    for (i, (method, bytes)) in cases.iter().enumerate() {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
        let mut c = Client::connect(server.local_addr());
        let request = format!("{method} /p/{i} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
        c.send(request.as_bytes());
        let raw = c.read_to_close();
        assert_eq!(status_of(&raw), 502, "{shown}: {}", String::from_utf8_lossy(&raw));
        assert!(!String::from_utf8_lossy(&raw).contains("secret"), "{shown}");
        assert_eq!(
            up.closed.recv_timeout(PATIENCE),
            Ok(i),
            "{shown}: its connection closed"
        );
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), cases.len());
}
