//! gRPC through the reverse proxy's HTTP/2 upstreams (`h2c://`): a grpcio
//! service (`grpc/server.py`, an implementation independent of ours)
//! behind Peregrine, called by grpcio's own client over HTTP/2 (unary,
//! server-, client- and bidirectional streaming, a 3 MB message, failed
//! calls' statuses), frame by frame with python-hyper's `h2` (a deadline
//! the upstream enforces, a status in trailers after data, a cancelled
//! call), and by aioquic over HTTP/3 (hand-framed gRPC messages).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Limits, Router, Running, Server};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn here(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc").join(file)
}

fn python() -> PathBuf {
    test_support::install::grpc_python(&tmp("grpc-venv"), &here("requirements.txt"))
        .unwrap_or_else(|e| panic!("these tests need grpcio and h2: {e}"))
}

/// The grpcio service, stopped (stdin closed, then killed) when dropped;
/// the lines it printed after its port.
struct Service {
    child: Child,
    port: u16,
    said: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start(python: &Path) -> Service {
        Service::start_with(python, &[])
    }

    /// With `args` (a certificate and key: TLS).
    fn start_with(python: &Path, args: &[&Path]) -> Service {
        let mut child = Command::new(python)
            .arg(here("server.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap().trim().parse().unwrap();
        let said: Arc<Mutex<Vec<String>>> = Arc::default();
        let heard = said.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                heard.lock().unwrap().push(line);
            }
        });
        Service { child, port, said }
    }

    /// Waits (up to `common::PATIENCE`) for the service to print `line`.
    fn said(&self, line: &str) -> bool {
        let until = Instant::now() + common::PATIENCE;
        while Instant::now() < until {
            if self.said.lock().unwrap().iter().any(|l| l == line) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Peregrine with every POST proxied to `h2c://127.0.0.1:PORT`, over
/// TLS (and so HTTP/3 too) when `tls`; request bodies up to 16 MiB (the
/// default 1 MiB answers a 3 MB message 413 itself). Its upstream
/// connections stay open 60 s idle (4 s by default), so that only a
/// reset, never their close, can end an upstream call within a test.
fn server(port: u16, tls: bool) -> Running {
    let up = Upstream::parse(&format!("h2c://127.0.0.1:{port}")).unwrap();
    let proxy = Proxy::new(up.idle_timeout(Duration::from_secs(60)));
    let router = Router::new().route("POST", "/*rest", proxy);
    let limits = Limits {
        body_bytes_max: 16 << 20,
        ..Limits::default()
    };
    let server = Server::new().workers(1).limits(limits);
    let server = match tls {
        true => {
            let cert = test_support::pki::SelfSigned::new("grpc", &["localhost"]);
            let config = peregrine::TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap();
            server.bind_tls("127.0.0.1:0", config)
        }
        false => server.bind("127.0.0.1:0"),
    };
    server.start(router).expect("server starts")
}

/// What `grpc/h2_call.py` printed for one call.
fn h2_call(python: &Path, addr: SocketAddr, path: &str, message: &str, fields: &[&str]) -> Vec<String> {
    let out = Command::new("timeout")
        .arg("30")
        .arg(python)
        .arg(here("h2_call.py"))
        .arg("127.0.0.1")
        .arg(addr.port().to_string())
        .arg(path)
        .arg(message)
        .args(fields)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn grpc_calls_of_every_kind_pass_from_a_grpc_client_over_http2() {
    let python = python();
    let service = Service::start(&python);
    let server = server(service.port, false);
    let out = Command::new("timeout")
        .arg("60")
        .arg(&python)
        .arg(here("client.py"))
        .arg(server.local_addr().to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = String::from_utf8(out.stdout).unwrap();
    let want = "unary hello\n\
                server-stream ['msg 0', 'msg 1', 'msg 2']\n\
                client-stream abc\n\
                bidi ['x', 'y', 'z']\n\
                big 3000000\n\
                fail error INVALID_ARGUMENT bad input\n\
                stream-fail error NOT_FOUND gone\n\
                slow error DEADLINE_EXCEEDED Deadline Exceeded\n";
    assert_eq!(got, want);
}

/// The statuses come from the upstream, not from a client library's own
/// clock: seen frame by frame. A deadline the upstream enforces is a
/// trailers-only answer (`grpc-status` in the one HEADERS frame, with
/// END_STREAM); a failure after a message, trailers after the DATA.
#[test]
fn a_deadline_and_a_late_failure_reach_an_http2_client_as_the_upstream_said() {
    let python = python();
    let service = Service::start(&python);
    let server = server(service.port, false);
    let t0 = Instant::now();
    let lines = h2_call(
        &python,
        server.local_addr(),
        "/pkg.Echo/Slow",
        "x",
        &["grpc-timeout=300m"],
    );
    let took = t0.elapsed();
    assert!(lines.contains(&"status 200".to_owned()), "{lines:?}");
    assert!(lines.contains(&"header grpc-status: 4".to_owned()), "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("ended"), "{lines:?}");
    // The upstream's 300 ms, not its 5 s sleep, nor the proxy's 60 s.
    assert!(took < Duration::from_secs(4), "{took:?}");

    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/ServerStream", "fail", &[]);
    let tail: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("message"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "message one",
            "trailer grpc-status: 5",
            "trailer grpc-message: gone",
            "ended"
        ],
        "{lines:?}"
    );
    // The client's fields reach the upstream, with the proxy's own.
    let lines = h2_call(
        &python,
        server.local_addr(),
        "/pkg.Echo/Metadata",
        "m",
        &["x-hello=there"],
    );
    assert!(lines.contains(&"message m".to_owned()), "{lines:?}");
    assert!(lines.contains(&"trailer grpc-status: 0".to_owned()), "{lines:?}");
    assert!(lines.contains(&"trailer x-seen-hello: there".to_owned()), "{lines:?}");
    assert!(
        lines.contains(&"trailer x-seen-forwarded-for: 127.0.0.1".to_owned()),
        "{lines:?}"
    );
}

/// A client that resets its stream: the upstream's stream is reset too
/// (CANCEL), so an endless server stream ends there rather than run on.
#[test]
fn a_call_the_client_cancels_is_cancelled_upstream() {
    let python = python();
    let service = Service::start(&python);
    let server = server(service.port, false);
    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/ServerStream", "-cancel", &[]);
    assert_eq!(lines.last().map(String::as_str), Some("cancelled"), "{lines:?}");
    assert!(service.said("cancelled endless"), "the upstream's stream ran on");
}

/// Back-pressure: a client that reads nothing holds the upstream's
/// stream to what the windows and the channel allow (the stream's
/// 256 KiB window, the answer's 1 MiB channel, the client's own 64 KiB
/// window, and what grpcio buffers itself), not the 16 MiB it would send;
/// once the client reads, all of it comes.
#[test]
fn a_client_that_does_not_read_holds_the_upstream_back() {
    let python = python();
    let service = Service::start(&python);
    let server = server(service.port, false);
    let call = Command::new("timeout")
        .arg("30")
        .arg(&python)
        .arg(here("h2_call.py"))
        .arg("127.0.0.1")
        .arg(server.local_addr().port().to_string())
        .arg("/pkg.Echo/Flood")
        .arg("-stall")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The client sleeps 3 s before it reads: look after 2.
    std::thread::sleep(Duration::from_secs(2));
    let yielded = service
        .said
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("flood "))
        .count();
    let out = call.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines = String::from_utf8(out.stdout).unwrap();
    let n = lines.lines().filter(|l| *l == "message 262144 bytes").count();
    assert_eq!(n, 64, "{lines}");
    assert!(
        lines.ends_with("trailer grpc-status: 0\ntrailer grpc-message: \nended\n"),
        "{lines}"
    );
    // Measured: 5 of 64 (1.25 MiB of 16) in 3 runs with the client
    // stalled; 64 when the window was given back as DATA came, not as
    // the channel took it.
    assert!(
        yielded <= 12,
        "the upstream got {yielded} messages of 256 KiB ahead of a client that read none"
    );
}

#[test]
fn grpc_calls_pass_from_an_http3_client() {
    let python = python();
    let service = Service::start(&python);
    let server = server(service.port, true);
    let dir = tmp(&format!("grpc-h3-{}", std::process::id()));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let h3 = test_support::install::aioquic_python(&tmp("aioquic-venv")).unwrap_or_else(|e| panic!("aioquic: {e}"));
    // gRPC messages: a 0 (not compressed), a 4-byte length, the bytes.
    let framed = |m: &str| format!("00{:08x}{}", m.len(), hex(m.as_bytes()));
    let request = |path: &str, m: &str, extra: &str| {
        format!(
            "{{\"method\": \"POST\", \"path\": \"{path}\", \"headers\": [[\"content-type\", \"application/grpc\"], \
             [\"te\", \"trailers\"]{extra}], \"body\": \"{}\"}}",
            framed(m)
        )
    };
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": [{}, {}, {}, {}]}}",
        server.local_addr().port(),
        out.display(),
        request("/pkg.Echo/Unary", "hello", ""),
        request("/pkg.Echo/ServerStream", "3", ""),
        request("/pkg.Echo/Slow", "x", ", [\"grpc-timeout\", \"300m\"]"),
        request("/pkg.Echo/ServerStream", "fail", ""),
    );
    let done = test_support::process::spawn_h3_client(&h3, &spec, 60, true)
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let read = |name: String| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let body = |i: usize| std::fs::read(out.join(format!("{i}.body"))).unwrap();
    // Unary: the message back, status 0 in the trailers.
    assert!(read("0.head".into()).starts_with("200\n"), "{}", read("0.head".into()));
    assert_eq!(body(0), unhex(&framed("hello")));
    assert!(
        read("0.trailers".into()).contains("grpc-status: 0\n"),
        "{}",
        read("0.trailers".into())
    );
    // Server streaming: three messages, then status 0.
    let three: Vec<u8> = ["msg 0", "msg 1", "msg 2"]
        .iter()
        .flat_map(|m| unhex(&framed(m)))
        .collect();
    assert_eq!(body(1), three);
    assert!(read("1.trailers".into()).contains("grpc-status: 0\n"));
    // The upstream's deadline: a trailers-only answer, status 4 in its head.
    assert!(
        read("2.head".into()).contains("grpc-status: 4\n"),
        "{}",
        read("2.head".into())
    );
    assert!(body(2).is_empty());
    // A failure after a message: status 5 in the trailers.
    assert_eq!(body(3), unhex(&framed("one")));
    assert!(
        read("3.trailers".into()).contains("grpc-status: 5\n"),
        "{}",
        read("3.trailers".into())
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `h2s://`: HTTP/2 over TLS to the upstream (ALPN h2), its certificate
/// verified against the route's CA.
#[test]
fn grpc_calls_pass_to_an_h2s_upstream_over_tls() {
    let python = python();
    let pki = test_support::pki::Pki::new("grpc");
    let (cert, key, _) = pki.issue("up", &["127.0.0.1"]);
    let ca = pki.dir().join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let service = Service::start_with(&python, &[&cert, &key]);
    let up = Upstream::parse(&format!("h2s://127.0.0.1:{}", service.port))
        .unwrap()
        .ca_file(&ca)
        .unwrap();
    assert!(up.is_h2() && up.is_tls());
    let router = Router::new().route("POST", "/*rest", Proxy::new(up));
    let server = Server::new()
        .workers(1)
        .bind("127.0.0.1:0")
        .start(router)
        .expect("server starts");
    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/ServerStream", "2", &[]);
    let tail: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("message"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "message msg 0",
            "message msg 1",
            "trailer grpc-status: 0",
            "trailer grpc-message: ",
            "ended"
        ],
        "{lines:?}"
    );
    // A CA that did not sign it: the handshake fails, 502.
    let other = test_support::pki::Pki::new("grpc-other");
    let wrong = other.dir().join("ca.pem");
    std::fs::write(&wrong, other.ca_pem()).unwrap();
    let up = Upstream::parse(&format!("h2s://127.0.0.1:{}", service.port))
        .unwrap()
        .ca_file(&wrong)
        .unwrap();
    let router = Router::new().route("POST", "/*rest", Proxy::new(up));
    let server = Server::new()
        .workers(1)
        .bind("127.0.0.1:0")
        .start(router)
        .expect("server starts");
    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/Unary", "x", &[]);
    assert_eq!(lines.first().map(String::as_str), Some("status 502"), "{lines:?}");
}

/// An upstream that is not there: 502, as for an HTTP/1.1 one.
#[test]
fn an_h2c_upstream_that_refuses_connections_is_a_502() {
    let python = python();
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = server(port, false);
    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/Unary", "x", &[]);
    assert_eq!(lines.first().map(String::as_str), Some("status 502"), "{lines:?}");
}

/// An upstream that speaks HTTP/1.1 (or anything but HTTP/2) on the port:
/// its first bytes are no SETTINGS frame, so 502 and a closed connection.
#[test]
fn an_upstream_that_does_not_speak_http2_is_a_502() {
    let python = python();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let server = server(port, false);
    let lines = h2_call(&python, server.local_addr(), "/pkg.Echo/Unary", "x", &[]);
    assert_eq!(lines.first().map(String::as_str), Some("status 502"), "{lines:?}");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
