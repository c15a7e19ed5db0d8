//! Field values as octets through `serve --proxy` (issue 26; RFC 9110
//! §5.5: obs-text, %x80-FF, is allowed in a value and "a recipient SHOULD
//! treat other allowed octets in field content (i.e., obs-text) as opaque
//! data"): an upstream's Latin-1 `Content-Disposition` reaches HTTP/1.1
//! (raw bytes) and HTTP/2 (curl, prior knowledge) clients byte for byte,
//! as nginx, Caddy and HAProxy relay it; a client's obs-text value
//! reaches the upstream so too; a bare CR or a NUL in an upstream's value
//! is still a 502.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use common::{Scratch, PATIENCE};
use test_support::process::Process;

/// The Latin-1 `Content-Disposition` line (`é` is 0xE9, not UTF-8).
const LATIN1: &[u8] = b"Content-Disposition: attachment; filename=\"caf\xe9.pdf\"";

/// A client's field with obs-text that is not UTF-8.
const NAME: &[u8] = b"X-Name: caf\xe9 \x80\xff";

/// An upstream that answers by the request's path: `/api/latin1` with
/// [`LATIN1`]; `/api/echo` with the value of the `X-Name` (any case:
/// an HTTP/2 client's is lowercase) it got, as it got it, in `X-Got` and as the body; `/api/cr` and `/api/nul` with a
/// value holding a bare CR or a NUL.
fn upstream() -> SocketAddr {
    common::answering_upstream_raw(|head| {
        let path = head[0].split(|&b| b == b' ').nth(1).unwrap_or(b"/");
        let got = head
            .iter()
            .find(|l| l.len() > 8 && l[..8].eq_ignore_ascii_case(b"x-name: "))
            .map(|l| &l[8..])
            .unwrap_or(b"-")
            .to_vec();
        let (fields, body): (Vec<u8>, Vec<u8>) = match path {
            b"/api/latin1" => ([LATIN1, b"\r\n"].concat(), b"%PDF".to_vec()),
            b"/api/echo" => ([&b"X-Got: "[..], &got, b"\r\n"].concat(), got),
            b"/api/cr" => (b"X-Bad: caf\xe9\rInjected: 1\r\n".to_vec(), b"secret".to_vec()),
            b"/api/nul" => (b"X-Bad: caf\xe9\0\r\n".to_vec(), b"secret".to_vec()),
            _ => (Vec::new(), b"?".to_vec()),
        };
        let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n".to_vec();
        answer.extend_from_slice(&fields);
        answer.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        answer.extend_from_slice(&body);
        answer
    })
}

fn start(t: &Scratch) -> (Process, String) {
    t.write("site/index.html", "home\n");
    let up = upstream();
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}")),
    );
    let addr = common::last_addr(&server.listening());
    (server, addr)
}

/// An answer's status, head (its lines, each without its CRLF) and body,
/// as bytes.
struct Answer {
    status: u16,
    lines: Vec<Vec<u8>>,
    body: Vec<u8>,
}

impl Answer {
    /// The answer in `raw`: a head (HTTP/1.1's, or curl's `-i` of an
    /// HTTP/2 one), the empty line, the body.
    fn of(raw: &[u8]) -> Answer {
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(raw)));
        let mut lines: Vec<Vec<u8>> = raw[..end]
            .split(|&b| b == b'\n')
            .map(|l| l.trim_ascii_end().to_vec())
            .collect();
        let status_line = lines.remove(0);
        let status = String::from_utf8_lossy(&status_line)
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Answer {
            status,
            lines,
            body: raw[end + 4..].to_vec(),
        }
    }

    /// Whether the head has the line `line`, its name in any case (HTTP/2
    /// names are lowercase).
    fn has(&self, line: &[u8]) -> bool {
        let colon = line.iter().position(|&b| b == b':').unwrap();
        self.lines.iter().any(|l| {
            l.len() == line.len() && l[..colon].eq_ignore_ascii_case(&line[..colon]) && l[colon..] == line[colon..]
        })
    }

    fn shown(&self) -> String {
        let lines: Vec<String> = self
            .lines
            .iter()
            .map(|l| format!("{:?}", l.escape_ascii().to_string()))
            .collect();
        format!("{} {}", self.status, lines.join(" "))
    }
}

/// A GET of `path` over HTTP/1.1 with the head lines `extra`.
fn get_h1(addr: &str, path: &str, extra: &[&[u8]]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n").into_bytes();
    for line in extra {
        req.extend_from_slice(line);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    s.write_all(&req).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    assert!(raw.starts_with(b"HTTP/1.1 "), "{:?}", String::from_utf8_lossy(&raw));
    Answer::of(&raw)
}

/// The same over HTTP/2 (h2c, prior knowledge), by curl.
fn get_h2(addr: &str, path: &str, extra: &[&[u8]]) -> Answer {
    let mut curl = Command::new(common::curl());
    curl.args(["-sS", "--max-time", "20", "--http2-prior-knowledge", "-i"])
        .args(["-H", "Host: a.test"]);
    for line in extra {
        curl.arg("-H").arg(std::ffi::OsStr::from_bytes(line));
    }
    let out = curl.arg(format!("http://{addr}{path}")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.stdout.starts_with(b"HTTP/2 "),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    Answer::of(&out.stdout)
}

type Get = fn(&str, &str, &[&[u8]]) -> Answer;

const CLIENTS: [(&str, Get); 2] = [("HTTP/1.1", get_h1), ("HTTP/2", get_h2)];

#[test]
fn an_upstreams_latin1_field_value_reaches_http1_and_http2_clients_byte_for_byte() {
    let t = Scratch::new("proxy-octets");
    let (_server, addr) = start(&t);
    for (proto, get) in CLIENTS {
        let a = get(&addr, "/api/latin1", &[b"X-A: 1"]);
        assert_eq!(a.status, 200, "{proto}: {}", a.shown());
        assert!(a.has(LATIN1), "{proto}: {}", a.shown());
        assert_eq!(a.body, b"%PDF", "{proto}");
    }
}

/// The request direction: a client's obs-text goes to the upstream as it
/// came (nginx forwards it too), and the upstream's echo of it comes back
/// so, in a field and as the body.
#[test]
fn a_clients_obs_text_value_reaches_the_upstream_and_its_echo_comes_back_byte_for_byte() {
    let t = Scratch::new("proxy-octets-echo");
    let (_server, addr) = start(&t);
    let value = &NAME[b"X-Name: ".len()..];
    for (proto, get) in CLIENTS {
        let a = get(&addr, "/api/echo", &[NAME]);
        assert_eq!(a.status, 200, "{proto}: {}", a.shown());
        assert_eq!(a.body, value, "{proto}: what the upstream got");
        assert!(a.has(&[&b"X-Got: "[..], value].concat()), "{proto}: {}", a.shown());
        // A handler that reads fields as text answers all the same (the
        // static files: `If-None-Match`, `Accept-Encoding` not UTF-8).
        let home = get(
            &addr,
            "/",
            &[b"If-None-Match: \"caf\xe9\"", b"Accept-Encoding: gzip\xe9"],
        );
        assert_eq!((home.status, &home.body[..]), (200, &b"home\n"[..]), "{proto}");
    }
}

/// CR and NUL stay what they were (RFC 9110 §5.5: "invalid and
/// dangerous"): a 502, none of the upstream's bytes, whatever obs-text
/// comes with them.
#[test]
fn an_upstream_value_with_a_bare_cr_or_a_nul_is_still_a_502() {
    let t = Scratch::new("proxy-octets-bad");
    let (_server, addr) = start(&t);
    for (proto, get) in CLIENTS {
        for path in ["/api/cr", "/api/nul"] {
            let a = get(&addr, path, &[b"X-A: 1"]);
            assert_eq!(a.status, 502, "{proto} {path}: {}", a.shown());
            assert!(!a.body.windows(6).any(|w| w == b"secret"), "{proto} {path}");
            assert!(!a.lines.iter().any(|l| l.starts_with(b"Injected")), "{proto} {path}");
        }
    }
}
