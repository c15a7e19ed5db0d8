//! `--proxy-protocol`, `--trusted-proxies` and `--client-addr-header` as a
//! user runs them: the binary behind a pretend load balancer on loopback,
//! its access log read for the client it names.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{last_addr, peregrine, Scratch, PATIENCE};
use test_support::process::Process;

/// A root with one page, and where the access log goes.
fn site(tag: &str) -> Scratch {
    let dir = Scratch::new(&format!("peregrine-cli-proxy-{tag}"));
    dir.write("site/index.html", "<h1>hi</h1>");
    dir
}

/// Sends `bytes` on a new connection and returns all that comes back
/// before the server closes it (empty if it closes unanswered).
fn exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    // A close with our bytes unread is a reset: nothing came back.
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn serve_with_proxy_protocol_logs_the_headers_source() {
    let dir = site("serve");
    let log = dir.path("access.log");
    let server = Process::spawn(
        peregrine()
            .arg("serve")
            .arg(dir.path("site"))
            .args(["--bind", "127.0.0.1:0", "--workers", "1", "--proxy-protocol"])
            .args(["--trusted-proxies", "127.0.0.1", "--access-log-format", "json"])
            .arg("--access-log")
            .arg(&log),
    );
    let addr = last_addr(&server.listening());
    let answer = exchange(
        &addr,
        b"PROXY TCP4 198.51.100.7 203.0.113.1 5555 80\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    // Without the header: closed unanswered.
    let answer = exchange(&addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(answer, "");
    server.terminate();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("\"remote\":\"198.51.100.7\""), "{text}");
    assert!(lines[0].contains("\"status\":200"), "{text}");
}

#[test]
fn serve_behind_trusted_proxies_logs_the_forwarded_client() {
    let dir = site("xff");
    let log = dir.path("access.log");
    let server = Process::spawn(
        peregrine()
            .arg("serve")
            .arg(dir.path("site"))
            .args(["--bind", "127.0.0.1:0", "--workers", "1"])
            .args(["--trusted-proxies", "127.0.0.1, 10.0.0.0/8", "--access-log-format"])
            .arg("$remote_addr $status")
            .arg("--access-log")
            .arg(&log)
            .env("PEREGRINE_CLIENT_ADDR_HEADER", "forwarded"),
    );
    let addr = last_addr(&server.listening());
    let answer = exchange(
        &addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=1.2.3.4, for=10.0.0.2\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    server.terminate();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1.2.3.4 200\n");
}

#[test]
fn proxy_protocol_without_trusted_proxies_is_refused_at_start() {
    let dir = site("refused");
    let out = peregrine()
        .arg("serve")
        .arg(dir.path("site"))
        .args(["--bind", "127.0.0.1:0", "--proxy-protocol"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--proxy-protocol needs --trusted-proxies"), "{err}");
    // A bad network is named.
    let out = peregrine()
        .arg("serve")
        .arg(dir.path("site"))
        .args(["--bind", "127.0.0.1:0", "--trusted-proxies", "10.0.0.1/8"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("10.0.0.1/8") && err.contains("bits set beyond the prefix"),
        "{err}"
    );
}
