//! gRPC-Web behind the proxy: gRPC-Web is plain HTTP/1.1 (or HTTP/2)
//! with the messages length-prefixed in the body and the trailers as a
//! last frame flagged 0x80, so the ordinary proxy must relay it byte for
//! byte, a server-streaming answer frame by frame (no buffering), the
//! base64 form (`application/grpc-web-text`) unchanged, and never
//! compress it (clients read the frames themselves; see `encode.rs`).
//! A scripted upstream plays the gRPC-Web service; clients: raw
//! HTTP/1.1 and curl over HTTP/2 (prior knowledge).

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{status_of, PATIENCE};
use peregrine::proxy::{Encode, Proxy, Upstream};
use peregrine::{Router, Running, Server};

/// A gRPC-Web frame: flag, 4-byte big-endian length, payload.
fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![flag];
    f.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const TRAILERS: &[u8] = b"grpc-status:0\r\ngrpc-message:OK\r\n";

fn unary_body(request: &[u8]) -> Vec<u8> {
    // The echo: the request's message back, then the trailer frame.
    let mut b = frame(0, &request[5..]);
    b.extend(frame(0x80, TRAILERS));
    b
}

fn message(i: u8) -> Vec<u8> {
    frame(0, &[0x0a, 3, b'm', b's', b'0' + i])
}

/// A JSON message big enough to pass the compression minimum.
fn json_body() -> Vec<u8> {
    let mut b = frame(0, "{\"text\": \"hello hello hello\"}\n".repeat(200).as_bytes());
    b.extend(frame(0x80, TRAILERS));
    b
}

/// The base64 form of a unary answer (`application/grpc-web-text`).
fn text_body() -> Vec<u8> {
    use base64::Engine as _;
    let mut raw = message(1);
    raw.extend(frame(0x80, TRAILERS));
    base64::engine::general_purpose::STANDARD.encode(raw).into_bytes()
}

/// The scripted gRPC-Web service; `/echo.Echo/Stream` sends its second
/// message only when the test sends on `go` (after it has read the
/// first one through the proxy).
fn upstream() -> (SocketAddr, Sender<()>) {
    common::scripted_upstream(serve)
}

fn serve(stream: TcpStream, go: Arc<Mutex<Receiver<()>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let Some(head) = common::read_head(&mut reader) else {
            return;
        };
        let lower = head.to_ascii_lowercase();
        let length = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut request = vec![0; length];
        if reader.read_exact(&mut request).is_err() {
            return;
        }
        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
        let method = path.rsplit('/').next().unwrap_or("").to_owned();
        let ctype = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-type:"))
            .unwrap_or("")
            .trim()
            .to_owned();
        let fixed = |ctype: &str, body: &[u8]| {
            let mut a = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            a.extend_from_slice(body);
            a
        };
        let answer = match method.as_str() {
            "Say" if ctype == "application/grpc-web+proto" && request.len() >= 5 => {
                fixed("application/grpc-web+proto", &unary_body(&request))
            }
            "SayJson" => fixed("application/grpc-web+json", &json_body()),
            "SayText" if ctype == "application/grpc-web-text" => fixed("application/grpc-web-text", &text_body()),
            "Stream" => {
                let first = message(1);
                let mut a = b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto\r\n\
                              Transfer-Encoding: chunked\r\n\r\n"
                    .to_vec();
                a.extend(format!("{:x}\r\n", first.len()).as_bytes());
                a.extend(&first);
                a.extend(b"\r\n");
                if out.write_all(&a).and_then(|()| out.flush()).is_err() {
                    return;
                }
                // Message 2 only once the test has seen message 1 (or
                // after PATIENCE, which then fails the test's check).
                let _ = go.lock().unwrap().recv_timeout(PATIENCE);
                thread::sleep(Duration::from_millis(300));
                let mut rest = message(2);
                rest.extend(frame(0x80, TRAILERS));
                let mut a = format!("{:x}\r\n", rest.len()).into_bytes();
                a.extend(&rest);
                a.extend(b"\r\n0\r\n\r\n");
                a
            }
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        if out.write_all(&answer).is_err() {
            return;
        }
    }
}

/// Plain proxy under `/echo.Echo/`, and one with `encode` on under
/// `/enc/` (the upstream sees the same method names).
fn server(up: SocketAddr) -> Running {
    let url = format!("http://{up}");
    let plain = Proxy::new(Upstream::parse(&url).unwrap());
    let encoded = Proxy::new(Upstream::parse(&url).unwrap()).encode(Encode::new());
    let router = Router::new()
        .route("POST", "/echo.Echo/*rest", plain)
        .route("POST", "/enc/*rest", encoded);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

fn split_head(raw: &[u8]) -> Option<(String, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    Some((String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase(), end))
}

/// The de-chunked body so far, and whether its last chunk came.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return (out, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return (out, true);
        }
        let start = line_end + 2;
        if raw.len() < start + size + 2 {
            return (out, false);
        }
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}

fn body_of(raw: &[u8]) -> (String, Vec<u8>) {
    let (head, end) = split_head(raw).expect("a whole head");
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(&raw[end..]).0
    } else {
        raw[end..].to_vec()
    };
    (head, body)
}

fn post(addr: SocketAddr, path: &str, ctype: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {ctype}\r\nX-Grpc-Web: 1\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the whole answer within PATIENCE");
    raw
}

#[test]
fn a_unary_grpc_web_call_is_relayed_byte_for_byte_over_http1() {
    let (up, _go) = upstream();
    let server = server(up);
    let request = frame(0, &[0x0a, 5, b'h', b'e', b'l', b'l', b'o']);
    let raw = post(
        server.local_addr(),
        "/echo.Echo/Say",
        "application/grpc-web+proto",
        "",
        &request,
    );
    assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    let (head, body) = body_of(&raw);
    assert!(head.contains("content-type: application/grpc-web+proto"), "{head}");
    assert_eq!(body, unary_body(&request), "{head}");
}

#[test]
fn grpc_web_text_passes_unchanged() {
    let (up, _go) = upstream();
    let server = server(up);
    use base64::Engine as _;
    let request = base64::engine::general_purpose::STANDARD.encode(frame(0, b"\x0a\x02hi"));
    let raw = post(
        server.local_addr(),
        "/echo.Echo/SayText",
        "application/grpc-web-text",
        "Accept: application/grpc-web-text\r\n",
        request.as_bytes(),
    );
    assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    let (head, body) = body_of(&raw);
    assert!(head.contains("content-type: application/grpc-web-text"), "{head}");
    assert_eq!(body, text_body(), "{head}");
}

/// A server-streaming call: message 1 reaches the client while the
/// upstream still holds message 2 (the proxy does not buffer the answer).
#[test]
fn a_server_streaming_grpc_web_call_arrives_message_by_message_over_http1() {
    let (up, go) = upstream();
    let server = server(up);
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    // Shorter than the upstream's wait for `go`: a proxy that held
    // message 1 back would only let it go with message 2, too late.
    s.set_read_timeout(Some(PATIENCE / 2)).unwrap();
    let request = frame(0, b"");
    let mut req = format!(
        "POST /echo.Echo/Stream HTTP/1.1\r\nHost: t\r\nContent-Type: application/grpc-web+proto\r\n\
         Content-Length: {}\r\n\r\n",
        request.len()
    )
    .into_bytes();
    req.extend(&request);
    s.write_all(&req).unwrap();
    let mut raw = Vec::new();
    let so_far = |raw: &[u8]| split_head(raw).map(|(_, end)| dechunk(&raw[end..]));
    while so_far(&raw).is_none_or(|(b, _)| b.len() < message(1).len()) {
        let mut b = [0; 4096];
        let n = s
            .read(&mut b)
            .expect("message 1 within PATIENCE, before message 2 was sent");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&b[..n]);
    }
    assert_eq!(so_far(&raw).unwrap().0, message(1));
    go.send(()).unwrap();
    loop {
        let (body, done) = so_far(&raw).unwrap();
        if done {
            let mut want = message(1);
            want.extend(message(2));
            want.extend(frame(0x80, TRAILERS));
            assert_eq!(body, want);
            break;
        }
        let mut b = [0; 4096];
        let n = s.read(&mut b).expect("message 2 and the trailers within PATIENCE");
        assert!(n > 0, "closed early");
        raw.extend_from_slice(&b[..n]);
    }
}

/// The same call from an HTTP/2 client (curl, prior knowledge): the
/// unary answer whole, and the stream's message 1 before message 2.
#[test]
fn grpc_web_over_http2_unary_and_streaming() {
    if !Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: no curl");
        return;
    }
    let (up, go) = upstream();
    let server = server(up);
    let dir = std::env::temp_dir().join(format!("grpcweb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let req_file = dir.join("req");
    let request = frame(0, &[0x0a, 2, b'h', b'2']);
    std::fs::write(&req_file, &request).unwrap();
    let curl = |path: &str| {
        let mut c = Command::new("curl");
        c.args(["-s", "-N", "--http2-prior-knowledge", "-o", "-", "-D", "/dev/stderr"])
            .args(["-H", "content-type: application/grpc-web+proto", "-H", "x-grpc-web: 1"])
            .arg("--data-binary")
            .arg(format!("@{}", req_file.display()))
            .arg(format!("http://{}{path}", server.local_addr()));
        c
    };
    let out = curl("/echo.Echo/Say").output().unwrap();
    let head = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
    assert!(out.status.success(), "{head}");
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains("content-type: application/grpc-web+proto"), "{head}");
    assert_eq!(out.stdout, unary_body(&request), "{head}");

    let mut child = curl("/echo.Echo/Stream")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut got = vec![0; message(1).len()];
    // read_exact blocks until message 1 came; message 2 is not sent yet,
    // so a proxy that buffered the answer would hang here past PATIENCE/2
    // (the upstream waits a whole PATIENCE for `go`).
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let r = stdout.read_exact(&mut got).map(|()| got);
        let _ = tx.send(());
        (r, stdout)
    });
    rx.recv_timeout(PATIENCE / 2)
        .expect("message 1 over HTTP/2 before message 2 was sent");
    let (first, mut stdout) = reader.join().unwrap();
    assert_eq!(first.unwrap(), message(1));
    go.send(()).unwrap();
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    let mut want = message(2);
    want.extend(frame(0x80, TRAILERS));
    assert_eq!(rest, want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `encode` on and a client that accepts gzip, gRPC-Web answers are
/// still relayed uncompressed (even `+json`, which would otherwise match
/// the `+json` rule), as Caddy's default `encode` types do.
#[test]
fn grpc_web_answers_are_never_compressed() {
    let (up, _go) = upstream();
    let server = server(up);
    for (path, ctype, want) in [
        ("/enc/echo.Echo/SayJson", "application/grpc-web+json", json_body()),
        ("/enc/echo.Echo/SayText", "application/grpc-web-text", text_body()),
    ] {
        let raw = post(
            server.local_addr(),
            path,
            ctype,
            "Accept-Encoding: gzip, br, zstd\r\n",
            b"AAAAAAA=",
        );
        assert_eq!(status_of(&raw), 200, "{path}: {}", String::from_utf8_lossy(&raw));
        let (head, body) = body_of(&raw);
        assert!(!head.contains("content-encoding"), "{path}: {head}");
        assert_eq!(body, want, "{path}: {head}");
    }
}
