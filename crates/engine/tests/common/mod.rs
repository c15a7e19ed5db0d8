//! Helpers for end-to-end tests: start a server on a free loopback port,
//! talk to it with raw bytes, parse what comes back.

#![allow(dead_code)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::time::Duration;

use peregrine::{Handler, Limits, Running, Server};
pub use test_support::http::Client;

/// Longest a test waits for bytes before failing (never a pass condition).
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn start(handler: impl Handler) -> Running {
    start_with(Limits::default(), handler)
}

pub fn start_with(limits: Limits, handler: impl Handler) -> Running {
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(handler)
        .expect("server starts")
}

/// Sends `bytes` on a fresh connection and returns everything until close.
pub fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(addr);
    c.send(bytes);
    c.read_to_close()
}

/// The status code at the start of a raw response.
pub fn status_of(raw: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(raw);
    text.get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

/// A request or answer head read line by line up to its empty line (kept),
/// or None when the peer closed or failed first: what the tests' scripted
/// upstreams read before they answer.
pub fn read_head(reader: &mut impl BufRead) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Some(head);
        }
    }
}

/// A scripted upstream on a free loopback port: each connection runs
/// `serve` on its own thread, with the receiving end of the returned
/// sender, which the test uses to say when a held answer may go on.
pub fn scripted_upstream(
    serve: fn(std::net::TcpStream, std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>),
) -> (SocketAddr, std::sync::mpsc::Sender<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let go_rx = go_rx.clone();
            std::thread::spawn(move || serve(stream, go_rx));
        }
    });
    (addr, go)
}

/// A path in the target's directory for test scratch (venvs, certificates).
pub fn tmp(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The lines a Python `h2` client script (under `tests/`, run as
/// `SCRIPT 127.0.0.1 PORT ARG`, with Python's `h2` from a venv kept in
/// the target's directory) printed against `server`.
pub fn h2_script_lines(server: &Running, script: &str, arg: &str) -> Vec<String> {
    let python = test_support::install::h2_python(&tmp("h2-venv"))
        .unwrap_or_else(|e| panic!("this test needs Python's h2: {e}"));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = std::process::Command::new(python)
        .arg(script)
        .arg("127.0.0.1")
        .arg(server.local_addr().port().to_string())
        .arg(arg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `server` bound to a free loopback port, over TLS with a self-signed
/// certificate for localhost when `tls`, and started with `handler`.
pub fn start_on_loopback(server: Server, tls: bool, handler: impl Handler) -> Running {
    let server = match tls {
        true => {
            // A directory of its own (tests of one binary run at once);
            // read at once: the files go when `cert` is dropped.
            static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let cert = test_support::pki::SelfSigned::new(&format!("loopback-{n}"), &["localhost"]);
            let config = peregrine::TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap();
            server.bind_tls("127.0.0.1:0", config)
        }
        false => server.bind("127.0.0.1:0"),
    };
    server.start(handler).expect("server starts")
}
