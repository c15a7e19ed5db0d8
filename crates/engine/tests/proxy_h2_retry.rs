//! Requests an h2c upstream never processed (RFC 9113 §8.7) end to end:
//! a Python `h2` upstream (`h2up/goaway_server.py`) sends GOAWAY naming
//! the stream it answered as the last, leaving a second one it had
//! received; the proxied GET is sent again on a new connection and
//! succeeds, a POST whose streamed body had begun is not (502). A
//! REFUSED_STREAM is sent again once, and only once. A GOAWAY or a
//! REFUSED_STREAM the upstream follows at once with its close (both read
//! in one go) still sends the request again, on a new connection.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use common::{status_of, PATIENCE};
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};

struct Up {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    dir: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Up {
    /// The requests the upstream saw, "conn N stream S METHOD PATH".
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn upstream(tag: &str) -> Up {
    let python = test_support::install::h2_python(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("h2-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's h2: {e}"));
    let dir = std::env::temp_dir().join(format!("peregrine-h2retry-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (port_file, log) = (dir.join("port"), dir.join("log"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h2up/goaway_server.py");
    let child = Command::new(python)
        .arg(script)
        .arg(&port_file)
        .arg(&log)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let port: u16 = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            break p.trim().parse().unwrap();
        }
        assert!(start.elapsed() < PATIENCE, "the upstream did not start");
        thread::sleep(Duration::from_millis(20));
    };
    Up {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        log,
        dir,
    }
}

fn server(up: &Up) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("h2c://{}", up.addr)).unwrap());
    let router = Router::new()
        .route("GET", "/*rest", proxy.clone())
        .route("POST", "/*rest", proxy);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

/// Sends `head` (and `body`), reads the answer to its close.
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status_of(&raw), body)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        b"",
    )
}

/// Waits until the upstream has seen `n` requests.
fn wait_seen(up: &Up, n: usize) {
    let start = Instant::now();
    while up.seen().len() < n {
        assert!(start.elapsed() < PATIENCE, "{:?}", up.seen());
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_get_above_the_goaways_last_stream_is_sent_again_on_a_new_connection() {
    let up = upstream("get");
    let server = server(&up);
    let addr = server.local_addr();
    let first = thread::spawn(move || get(addr, "/hold"));
    wait_seen(&up, 1);
    let (status, body) = get(addr, "/b");
    assert_eq!(status, 200, "{body}: {:?}", up.seen());
    assert_eq!(body, "conn 2 stream 1 GET /b", "{:?}", up.seen());
    assert_eq!(first.join().unwrap(), (200, "conn 1 stream 1 GET /hold".to_owned()));
    // The second GET did reach the first connection (as stream 3) before
    // its GOAWAY: the retry, not a fresh connection chosen up front.
    assert_eq!(
        up.seen(),
        [
            "conn 1 stream 1 GET /hold",
            "conn 1 stream 3 GET /b",
            "conn 2 stream 1 GET /b"
        ]
    );
}

#[test]
fn a_post_whose_streamed_body_had_begun_is_not_sent_again() {
    let up = upstream("post");
    let server = server(&up);
    let addr = server.local_addr();
    let first = thread::spawn(move || get(addr, "/hold"));
    wait_seen(&up, 1);
    // A body longer than the proxy holds, of which a part is sent: the
    // upstream has taken its first bytes when it says GOAWAY.
    let total = 1 << 20;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(format!("POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: {total}\r\n\r\n").as_bytes())
        .unwrap();
    s.write_all(&[b'x'; 16 * 1024]).unwrap();
    let mut raw = Vec::new();
    let mut b = [0; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).expect("an answer within PATIENCE");
        assert!(n > 0, "closed without an answer: {:?}", up.seen());
        raw.extend_from_slice(&b[..n]);
    }
    assert_eq!(
        status_of(&raw),
        502,
        "{}: {:?}",
        String::from_utf8_lossy(&raw),
        up.seen()
    );
    assert_eq!(first.join().unwrap(), (200, "conn 1 stream 1 GET /hold".to_owned()));
    thread::sleep(Duration::from_millis(200));
    assert_eq!(up.seen(), ["conn 1 stream 1 GET /hold", "conn 1 stream 3 POST /p"]);
}

#[test]
fn a_refused_stream_is_sent_again_once() {
    let up = upstream("refused");
    let server = server(&up);
    let (status, body) = get(server.local_addr(), "/refused-once");
    assert_eq!(status, 200, "{body}: {:?}", up.seen());
    assert_eq!(up.seen().len(), 2, "{:?}", up.seen());
    assert!(body.ends_with("GET /refused-once"), "{body}");
    let (status, body) = get(server.local_addr(), "/refused-always");
    assert_eq!(status, 502, "{body}: {:?}", up.seen());
    let again: Vec<String> = up
        .seen()
        .into_iter()
        .filter(|l| l.ends_with("/refused-always"))
        .collect();
    assert_eq!(again.len(), 2, "sent once, then once more, no more: {again:?}");
}

#[test]
fn a_goaway_or_refusal_followed_at_once_by_the_close_is_sent_again_on_a_new_connection() {
    let up = upstream("close");
    let server = server(&up);
    // The GOAWAY (or RST_STREAM) and the FIN behind it are usually read
    // together, sometimes not: several tries, every one must pass (the
    // jobs to send again were dropped with the read that met the close,
    // and their clients got 500).
    for kind in ["goaway", "refusal"] {
        for i in 0..6 {
            let path = format!("/close-after-{kind}-{i}");
            let (status, body) = get(server.local_addr(), &path);
            assert_eq!(status, 200, "{path}: {body}: {:?}", up.seen());
            assert!(body.ends_with(&format!("stream 1 GET {path}")), "{body}");
            let tries = up.seen().into_iter().filter(|l| l.ends_with(&path)).count();
            assert_eq!(tries, 2, "{path}: sent once, then once more: {:?}", up.seen());
        }
    }
}
