//! Interim answers through the reverse proxy: a client's `Expect:
//! 100-continue` goes to the upstream, and the client gets `100 Continue`
//! when the upstream sends it (or the upstream's early final answer
//! instead), or the proxy's own when the upstream says nothing for a
//! while (an upstream that ignores the expectation); an upstream's `103 Early Hints` reaches HTTP/1.1 and HTTP/2
//! clients before the final answer, and never an HTTP/1.0 client. Each
//! upstream here is a script on a thread that waits for the test's word
//! before each step, so that the order the client sees is the order the
//! upstream chose, with no timing.

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;

use common::PATIENCE;
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};

/// An upstream that serves one connection with `script`.
fn one_upstream(script: impl FnOnce(BufReader<TcpStream>, TcpStream) + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        script(reader, stream);
    });
    addr
}

/// Reads one head (through its empty line).
fn read_head(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 {
            return head;
        }
        head.push_str(&line);
        if line == "\r\n" {
            return head;
        }
    }
}

/// The proxy in front of `up`, its own 100 held back longer than any
/// test waits (`Upstream::continue_wait`), so that every 100 a client
/// sees here is the upstream's, with no timing.
fn proxy_server(up: SocketAddr) -> Running {
    proxy_server_waiting(up, std::time::Duration::from_secs(3600))
}

/// The proxy in front of `up`, sending its own 100 to a client the
/// upstream has said nothing to after `wait`.
fn proxy_server_waiting(up: SocketAddr, wait: std::time::Duration) -> Running {
    let proxy = Proxy::new(
        Upstream::parse(&format!("http://{up}"))
            .unwrap()
            .prefix("/api/")
            .continue_wait(wait),
    );
    let router = Router::new()
        .route("GET", "/api/*rest", proxy.clone())
        .route("POST", "/api/*rest", proxy);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

fn client(addr: SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c
}

/// Reads from `c` until `want` has arrived whole, or the connection ends.
fn read_until(c: &mut TcpStream, got: &mut Vec<u8>, want: &str) {
    let mut b = [0u8; 4096];
    while !String::from_utf8_lossy(got).contains(want) {
        match c.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) => panic!("waiting for {want:?}: {e}; got {:?}", String::from_utf8_lossy(got)),
        }
    }
}

/// Nothing has arrived for `c` yet (a non-blocking look).
fn nothing_yet(c: &TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    let nothing = matches!((&*c).read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    c.set_nonblocking(false).unwrap();
    nothing
}

#[test]
fn a_client_expecting_100_gets_it_only_when_the_upstream_sends_it() {
    let (head_tx, head_rx) = mpsc::channel::<String>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (body_tx, body_rx) = mpsc::channel::<Vec<u8>>();
    let up = one_upstream(move |mut r, mut w| {
        head_tx.send(read_head(&mut r)).unwrap();
        go_rx.recv().unwrap();
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        let mut body = vec![0u8; 5];
        r.read_exact(&mut body).unwrap();
        body_tx.send(body).unwrap();
        w.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
            .unwrap();
    });
    let server = proxy_server(up);
    let mut c = client(server.local_addr());
    c.write_all(b"POST /api/up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .unwrap();
    let head = head_rx.recv_timeout(PATIENCE).unwrap();
    assert!(
        head.to_ascii_lowercase().contains("\r\nexpect: 100-continue\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nContent-Length: 5\r\n"), "{head}");
    // The upstream has the head and has not said 100: neither has the
    // proxy (it used to answer the 100 itself when it took the body).
    assert!(nothing_yet(&c), "a 100 before the upstream's");
    go_tx.send(()).unwrap();
    let mut got = Vec::new();
    read_until(&mut c, &mut got, "\r\n\r\n");
    assert_eq!(String::from_utf8_lossy(&got), "HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(b"hello").unwrap();
    assert_eq!(body_rx.recv_timeout(PATIENCE).unwrap(), b"hello");
    got.clear();
    read_until(&mut c, &mut got, "done");
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 201 "), "{answer}");
    assert!(!answer.contains("100 Continue"), "a second 100: {answer}");
}

/// An upstream that ignores `Expect` and reads the body (as gunicorn's
/// sync workers do): a client that waits for its 100, as RFC 9110 §10.1.1
/// allows, gets the proxy's own after `continue_wait`, sends its body, and
/// gets the answer (it waited until its body deadline's 408 before). One
/// 100 only.
#[test]
fn a_client_expecting_100_from_an_upstream_that_ignores_it_gets_the_proxys_own() {
    let up = one_upstream(move |mut r, mut w| {
        let head = read_head(&mut r);
        assert!(head.to_ascii_lowercase().contains("expect: 100-continue"), "{head}");
        let mut body = vec![0u8; 5];
        r.read_exact(&mut body).unwrap();
        assert_eq!(body, b"hello");
        w.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
            .unwrap();
    });
    let server = proxy_server_waiting(up, std::time::Duration::from_millis(50));
    let mut c = client(server.local_addr());
    c.write_all(b"POST /api/up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    read_until(&mut c, &mut got, "\r\n\r\n");
    assert_eq!(String::from_utf8_lossy(&got), "HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(b"hello").unwrap();
    got.clear();
    read_until(&mut c, &mut got, "done");
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 201 "), "{answer}");
    assert!(!answer.contains("100 Continue"), "a second 100: {answer}");
}

#[test]
fn an_upstreams_early_final_answer_goes_to_a_client_expecting_100_without_one() {
    let up = one_upstream(move |mut r, mut w| {
        let head = read_head(&mut r);
        assert!(head.to_ascii_lowercase().contains("expect: 100-continue"), "{head}");
        w.write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo long")
            .unwrap();
    });
    let server = proxy_server(up);
    let mut c = client(server.local_addr());
    c.write_all(b"POST /api/up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.ends_with("too long"), "{answer}");
    assert!(!answer.contains(" 100 "), "{answer}");
}

/// An upstream that answers a GET with a 103, then (on the test's word)
/// with its 200; `head` gets the request's head.
fn hinting_upstream(head: Sender<String>, go: Receiver<()>) -> SocketAddr {
    one_upstream(move |mut r, mut w| {
        head.send(read_head(&mut r)).unwrap();
        w.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nX-Hop: 1\r\nConnection: X-Hop\r\n\r\n")
            .unwrap();
        if go.recv().is_ok() {
            let _ = w.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nLink: </style.css>; rel=preload; as=style\r\n\r\nok",
            );
        }
        let _ = read_head(&mut r);
    })
}

#[test]
fn early_hints_reach_an_http11_client_before_the_final_answer() {
    let (head_tx, head_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let server = proxy_server(hinting_upstream(head_tx, go_rx));
    let mut c = client(server.local_addr());
    c.write_all(b"GET /api/page HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    head_rx.recv_timeout(PATIENCE).unwrap();
    let mut got = Vec::new();
    // The 200 has not been sent yet: what arrives is the 103 alone.
    read_until(&mut c, &mut got, "\r\n\r\n");
    let hints = String::from_utf8_lossy(&got).into_owned();
    assert_eq!(
        hints, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n",
        "the hints, less the hop-by-hop fields"
    );
    go_tx.send(()).unwrap();
    got.clear();
    read_until(&mut c, &mut got, "ok");
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
}

#[test]
fn an_http10_client_gets_no_early_hints() {
    let (head_tx, head_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let server = proxy_server(hinting_upstream(head_tx, go_rx));
    let mut c = client(server.local_addr());
    c.write_all(b"GET /api/page HTTP/1.0\r\nHost: a\r\n\r\n").unwrap();
    head_rx.recv_timeout(PATIENCE).unwrap();
    go_tx.send(()).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(!answer.contains("103"), "{answer}");
}

fn has_curl() -> bool {
    let ok = std::process::Command::new("curl").arg("--version").output().is_ok();
    if !ok {
        eprintln!("skipped: no curl");
    }
    ok
}

#[test]
fn early_hints_and_the_upstreams_100_reach_an_http2_client() {
    if !has_curl() {
        return;
    }
    // 103: curl prints each interim head it gets.
    let (head_tx, head_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let server = proxy_server(hinting_upstream(head_tx, go_rx));
    let addr = server.local_addr();
    let curl = thread::spawn(move || {
        std::process::Command::new("curl")
            .args(["-s", "-i", "--http2-prior-knowledge"])
            .arg(format!("http://{addr}/api/page"))
            .output()
            .unwrap()
    });
    head_rx.recv_timeout(PATIENCE).unwrap();
    go_tx.send(()).unwrap();
    let out = String::from_utf8_lossy(&curl.join().unwrap().stdout).into_owned();
    assert!(out.starts_with("HTTP/2 103"), "{out}");
    assert!(out.contains("link: </style.css>; rel=preload; as=style"), "{out}");
    assert!(!out.contains("x-hop"), "{out}");
    assert!(out.contains("HTTP/2 200"), "{out}");
    assert!(out.ends_with("ok"), "{out}");

    // 100: the upstream says it after the test's word; curl sends the
    // body only then (it would wait 30 s for one that never comes).
    let (head_tx, head_rx) = mpsc::channel::<String>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let up = one_upstream(move |mut r, mut w| {
        head_tx.send(read_head(&mut r)).unwrap();
        go_rx.recv().unwrap();
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        let mut body = vec![0u8; 5];
        r.read_exact(&mut body).unwrap();
        w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").unwrap();
        w.write_all(&body).unwrap();
    });
    let server = proxy_server(up);
    let addr = server.local_addr();
    let curl = thread::spawn(move || {
        std::process::Command::new("curl")
            .args(["-s", "-i", "--http2-prior-knowledge", "-H", "Expect: 100-continue"])
            .args(["--expect100-timeout", "30"])
            .args(["--data-binary", "hello"])
            .arg(format!("http://{addr}/api/up"))
            .output()
            .unwrap()
    });
    let head = head_rx.recv_timeout(PATIENCE).unwrap();
    assert!(head.to_ascii_lowercase().contains("expect: 100-continue"), "{head}");
    go_tx.send(()).unwrap();
    let out = String::from_utf8_lossy(&curl.join().unwrap().stdout).into_owned();
    assert!(out.starts_with("HTTP/2 100"), "{out}");
    assert!(out.contains("HTTP/2 200"), "{out}");
    assert!(out.ends_with("hello"), "{out}");
}

/// aioquic's Python (`crates/engine/tests/http3.rs` says how it is found
/// or installed).
fn aioquic_python() -> std::path::PathBuf {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv");
    test_support::install::aioquic_python(&venv).unwrap_or_else(|e| panic!("aioquic is needed: {e}"))
}

/// `proxy_server` over TLS, so that it answers HTTP/3 too.
fn proxy_server_h3(up: SocketAddr, tag: &str) -> (Running, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("peregrine-e-interim-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = test_support::pki::SelfSigned::new(&format!("interim-{tag}"), &["localhost"]);
    let tls = peregrine::TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap();
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap().prefix("/api/"));
    let router = Router::new()
        .route("GET", "/api/*rest", proxy.clone())
        .route("POST", "/api/*rest", proxy);
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .start(router)
        .expect("server starts");
    (server, dir)
}

/// Runs the aioquic client on one request (`request`, JSON) to `server`;
/// gives its interim file (each status, then its fields), its status line
/// and its body.
fn h3_exchange(
    server: &Running,
    dir: &std::path::Path,
    request: &str,
    meanwhile: impl FnOnce(),
) -> (String, String, String) {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": [{request}]}}",
        server.local_addr().port(),
        out.display()
    );
    let client = test_support::process::spawn_h3_client(&aioquic_python(), &spec, 60, true);
    meanwhile();
    let done = client.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let interim = std::fs::read_to_string(out.join("0.interim")).unwrap_or_default();
    let head = std::fs::read_to_string(out.join("0.head")).unwrap();
    let body = std::fs::read(out.join("0.body")).unwrap();
    (
        interim,
        head.lines().next().unwrap().to_owned(),
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Over HTTP/3 an upstream's 103 arrives as an interim HEADERS frame
/// before the final one (RFC 9114 §4.1), its fields lowercase and without
/// the hop-by-hop ones; its 100 releases a body the client held back for
/// it (aioquic's client sends the body only after an interim 100).
#[test]
fn early_hints_and_the_upstreams_100_reach_an_http3_client() {
    let (head_tx, head_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let (server, dir) = proxy_server_h3(hinting_upstream(head_tx, go_rx), "h3-103");
    let (interim, status, body) = h3_exchange(&server, &dir, "{\"path\": \"/api/page\"}", || {
        head_rx.recv_timeout(PATIENCE).unwrap();
        go_tx.send(()).unwrap();
    });
    assert_eq!(interim, "103\nlink: </style.css>; rel=preload; as=style\n");
    assert_eq!((status.as_str(), body.as_str()), ("200", "ok"));
    drop(server);

    let (head_tx, head_rx) = mpsc::channel::<String>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let up = one_upstream(move |mut r, mut w| {
        head_tx.send(read_head(&mut r)).unwrap();
        go_rx.recv().unwrap();
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        let mut body = vec![0u8; 5];
        r.read_exact(&mut body).unwrap();
        w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").unwrap();
        w.write_all(&body).unwrap();
    });
    let (server, dir2) = proxy_server_h3(up, "h3-100");
    // With its length, so that the upstream gets it unchunked.
    let request = "{\"path\": \"/api/up\", \"method\": \"POST\", \"expect_continue\": true, \
                   \"headers\": [[\"content-length\", \"5\"]], \"body\": \"68656c6c6f\"}";
    let (interim, status, body) = h3_exchange(&server, &dir2, request, || {
        let head = head_rx.recv_timeout(PATIENCE).unwrap();
        assert!(head.to_ascii_lowercase().contains("expect: 100-continue"), "{head}");
        go_tx.send(()).unwrap();
    });
    assert_eq!(interim, "100\n");
    assert_eq!((status.as_str(), body.as_str()), ("200", "hello"));
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir2);
}
