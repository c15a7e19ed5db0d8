//! Helpers for tests that run the `peregrine` binary as a user would:
//! start it, learn where it listens, ask it for a page, stop it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command};
use std::time::Duration;

// Not every test binary uses every one.
#[allow(unused_imports)]
pub use test_support::process::{last_addr, signal, Lines};
#[allow(unused_imports)]
pub use test_support::Scratch;

/// The address of the metrics listener, from the server's
/// `metrics on http://ADDR/metrics` line.
pub fn metrics_addr(line: &str) -> String {
    let after = line.split("http://").nth(1).expect("a metrics line names its URL");
    after.split('/').next().unwrap().to_owned()
}

/// Whether `python3` (with its standard library) runs here, for tests
/// whose backends are Python; says why not otherwise.
pub fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("import http.server")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: python3 (with its standard library) is not on the PATH; the backend is Python");
    }
    ok
}

/// How long an expected line or effect is waited for before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The binary under test, with no PEREGRINE_* variable inherited from
/// whoever runs the tests (each is a setting), but one: run as root (as
/// on CI), `PEREGRINE_ALLOW_ROOT=1`, without which `serve` refuses to start
/// unless given `--user` (`serve_refuses_to_run_as_root_without_user_or_allow_root`
/// takes it away). Only `serve` reads it.
pub fn peregrine() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_peregrine"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PEREGRINE_") {
            cmd.env_remove(name);
        }
    }
    if test_support::process::is_root() {
        cmd.env("PEREGRINE_ALLOW_ROOT", "1");
    }
    cmd
}

/// One GET with `Connection: close`; the whole answer, head and body.
pub fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Reads the "... on http://ADDR/" line the server prints once serving
/// (its stderr must be piped) and returns ADDR.
pub fn served_addr(child: &mut Child) -> String {
    served(child).0
}

/// As `served_addr`, also returning its stderr to read what follows.
pub fn served(child: &mut Child) -> (String, BufReader<ChildStderr>) {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    (last_addr(&line), stderr)
}

/// Writes `files` (path, contents) under DIR/site and packs them into
/// DIR/site.prg with `extra` flags; returns the archive and what pack
/// printed. Every file gets the same fixed mtime, so that two packs of the
/// same files are the same archive whichever second each was made in
/// (`Last-Modified` comes from the mtime).
pub fn packed(dir: &std::path::Path, files: &[(&str, &str)], extra: &[&str]) -> (std::path::PathBuf, String) {
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600); // 2026-01-01
    for (path, contents) in files {
        let path = dir.join("site").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }
    let archive = dir.join("site.prg");
    let out = peregrine()
        .arg("pack")
        .arg(dir.join("site"))
        .arg("-o")
        .arg(&archive)
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (archive, err)
}

/// SIGTERM once the child catches it, then the exit status must be 0 (a
/// graceful shutdown).
pub fn terminate(mut child: Child) {
    test_support::process::wait_catching(child.id(), test_support::process::SIGTERM);
    signal(child.id(), "TERM");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

// Finding and installing the programs some tests run (Chromium, Node.js,
// Go, curl, nghttp2): `test_support::install`.
#[allow(unused_imports)]
pub use test_support::install::{find_on_path, find_or_install, Program, APT_LOCK};

/// curl (OpenSSL), a client independent of ours: found on PATH or named by
/// `PEREGRINE_CURL`, else installed from Debian's packages (once per test
/// binary, under `APT_LOCK`).
pub fn curl() -> &'static std::path::Path {
    static FOUND: std::sync::OnceLock<Result<std::path::PathBuf, String>> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let curl = Program {
            var: "PEREGRINE_CURL",
            names: &["curl"],
            package: "curl",
        };
        Ok(find_or_install(&[curl])?.remove(0))
    });
    match found {
        Ok(path) => path,
        Err(why) => panic!("this test needs curl (or PEREGRINE_CURL): {why}"),
    }
}

/// An HTTP/3 answer: status (0 if none came), fields (names lowercase),
/// body.
pub type H3Answer = (u16, Vec<(String, String)>, String);

/// An HTTP/3 request: method, path, fields.
pub type H3Request<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// Requests (method, path, fields) at once on one HTTP/3 connection to
/// 127.0.0.1:`port` for `host` (SNI and :authority, the certificate
/// unchecked), with the aioquic client of `http3.rs` (installed into a
/// venv under the target directory when missing).
pub fn h3(port: u16, host: &str, reqs: &[H3Request<'_>]) -> Vec<H3Answer> {
    h3_from(None, port, host, reqs)
}

/// `h3` from a client bound to `from` (`127.0.0.2`), if given.
pub fn h3_from(from: Option<&str>, port: u16, host: &str, reqs: &[H3Request<'_>]) -> Vec<H3Answer> {
    h3_at("127.0.0.1", from, port, host, reqs)
}

/// `h3_from` to the server at `to` (`127.0.0.1`, `::1`).
pub fn h3_at(to: &str, from: Option<&str>, port: u16, host: &str, reqs: &[H3Request<'_>]) -> Vec<H3Answer> {
    static PYTHON: std::sync::OnceLock<Result<std::path::PathBuf, String>> = std::sync::OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        test_support::install::aioquic_python(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv"))
    });
    let python = python.as_ref().unwrap_or_else(|e| panic!("aioquic is needed: {e}"));
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("peregrine-h3-{host}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let json = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let requests: Vec<String> = reqs
        .iter()
        .map(|(method, path, fields)| {
            let fields: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("[{}, {}]", json(n), json(v)))
                .collect();
            format!(
                "{{\"method\": {}, \"path\": {}, \"headers\": [{}]}}",
                json(method),
                json(path),
                fields.join(", ")
            )
        })
        .collect();
    let spec = format!(
        "{{\"host\": {}, \"port\": {port}, {}\"server_name\": {}, \"out\": {}, \"timeout\": 60, \"requests\": [{}]}}",
        json(to),
        from.map(|f| format!("\"local_host\": {}, ", json(f)))
            .unwrap_or_default(),
        json(host),
        json(out.to_str().unwrap()),
        requests.join(", ")
    );
    let run = test_support::process::spawn_h3_client(python, &spec, 120, true)
        .wait_with_output()
        .unwrap();
    assert!(
        run.status.success(),
        "aioquic: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let answers = (0..reqs.len())
        .map(|i| {
            let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
            let mut lines = head.lines();
            let status = lines.next().unwrap().parse().unwrap_or(0);
            let fields = lines
                .filter_map(|l| l.split_once(": "))
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
                .collect();
            let body = std::fs::read(out.join(format!("{i}.body"))).unwrap();
            (status, fields, String::from_utf8_lossy(&body).into_owned())
        })
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    answers
}

/// An HTTP/1.1 server on 127.0.0.1 that answers every request it reads,
/// on connections kept alive, with the bytes `answer` makes from the
/// request head's lines (the request line first, each without its CRLF;
/// bytes that are not UTF-8 replaced, as `answering_upstream_raw` gives
/// them). It reads no body: the requests sent to it have none. Its
/// address.
pub fn answering_upstream(answer: impl Fn(&[String]) -> Vec<u8> + Send + Sync + 'static) -> std::net::SocketAddr {
    answering_upstream_raw(move |head| {
        let head: Vec<String> = head.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
        answer(&head)
    })
}

/// `answering_upstream`, given the head's lines as the bytes that came
/// (a field value's obs-text is not UTF-8).
pub fn answering_upstream_raw(answer: impl Fn(&[Vec<u8>]) -> Vec<u8> + Send + Sync + 'static) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut head = Vec::new();
                    loop {
                        let mut line = Vec::new();
                        if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == b"\r\n" {
                            break;
                        }
                        let end = line.trim_ascii_end().len();
                        line.truncate(end);
                        head.push(line);
                    }
                    if out.write_all(&answer(&head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// One HTTP/1.1 request on `s` (`method` `path` for `host`, with `extra`
/// head lines and `Connection: close`), read to the connection's end:
/// the status, the head and the body.
pub fn exchange(mut s: TcpStream, method: &str, host: &str, path: &str, extra: &[&str]) -> (u16, String, String) {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for line in extra {
        req.push_str(line);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {text:?}"));
    (head[9..12].parse().unwrap(), head.to_owned(), body.to_owned())
}

/// RFC 6455's sample `Sec-WebSocket-Key`, and the accept value it calls for.
pub const WS_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
pub const WS_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// An upstream for one connection: it answers the first request with a
/// WebSocket 101 (`WS_ACCEPT`, whatever the key), then echoes raw bytes
/// (the proxy reads no frames). Its address.
pub fn switching_echo_upstream() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 && !line.ends_with("\r\n\r\n") {}
        write!(
            out,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {WS_ACCEPT}\r\n\r\n"
        )
        .unwrap();
        let mut b = [0u8; 1024];
        while let Ok(n) = reader.read(&mut b) {
            if n == 0 || out.write_all(&b[..n]).is_err() {
                return;
            }
        }
    });
    up
}
