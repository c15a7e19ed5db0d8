//! HTTP/3 from the library: the handlers a `Server` is given answer over
//! QUIC too, deferred answers and request bodies included, and
//! `Server::http3(false)` turns it off. The client is aioquic (see
//! `crates/cli/tests/http3.rs`, whose client script this test shares),
//! installed by the test with pip into a virtual environment under the
//! target directory when missing (under a lock, bounded in time);
//! `PEREGRINE_H3_PYTHON` names a Python that has it already.

use std::io::Write;
use std::path::{Path, PathBuf};

use std::sync::OnceLock;

use peregrine::{Reply, Request, Response, Router, Running, Server, TlsConfig};
use test_support::sample;

fn python() -> &'static Path {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        test_support::install::aioquic_python(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv"))
    });
    match found {
        Ok(p) => p,
        Err(e) => panic!("aioquic is needed: {e}"),
    }
}

/// A certificate for localhost, as PEM files in a fresh directory.
fn tls(tag: &str) -> (TlsConfig, PathBuf) {
    let dir = std::env::temp_dir().join(format!("peregrine-e-h3-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    (
        TlsConfig::from_pem_files(dir.join("cert.pem"), dir.join("key.pem")).unwrap(),
        dir,
    )
}

/// Starts the aioquic test client (crates/cli/tests/h3/client.py) on
/// `spec` (JSON, written to its stdin, which is then closed), killed after
/// `limit_s` seconds; stdout and stderr piped.
fn spawn_client(spec: &str, limit_s: u32) -> std::process::Child {
    test_support::process::spawn_h3_client(python(), spec, limit_s, true)
}

/// `spawn_client`, then its end and what it printed.
fn run_client(spec: &str, limit_s: u32) -> std::process::Output {
    spawn_client(spec, limit_s).wait_with_output().unwrap()
}

fn h3(server: &Running, reqs: &[(&str, Option<&[u8]>)]) -> Vec<(String, Vec<u8>)> {
    // One directory per call: the tests of this binary run at once.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-out-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let requests: Vec<String> = reqs
        .iter()
        .map(|(path, body)| match body {
            None => format!("{{\"path\": \"{path}\"}}"),
            Some(b) => format!(
                "{{\"path\": \"{path}\", \"method\": \"POST\", \"body\": \"{}\"}}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
        })
        .collect();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 60, \"requests\": [{}]}}",
        server.local_addr().port(),
        out.display(),
        requests.join(", ")
    );
    let done = run_client(&spec, 120);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let answers = (0..reqs.len())
        .map(|i| {
            let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
            let body = std::fs::read(out.join(format!("{i}.body"))).unwrap();
            (head.lines().next().unwrap().to_owned(), body)
        })
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    answers
}

#[test]
fn handlers_answer_over_http3_deferred_answers_and_request_bodies_included() {
    let (config, dir) = tls("handlers");
    let app = Router::new()
        .get("/", |_: &Request<'_>| Response::text("now"))
        .get("/later/:n", |req: &Request<'_>| {
            let n = req.param("n").unwrap_or("?").to_owned();
            let responder = req.defer();
            std::thread::spawn(move || responder.send(Response::text(format!("later {n}"))));
            Reply::Later
        })
        .post("/echo", |req: &Request<'_>| {
            Response::text(format!("{} {} bytes", req.version().as_str(), req.body().len()))
        });
    let limits = peregrine::Limits {
        body_bytes_max: 400_000,
        ..peregrine::Limits::default()
    };
    let log_path = dir.join("access.log");
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .access_log(peregrine::AccessLog::File(log_path.clone()))
        .access_log_format(peregrine::LogFormat::Json)
        .start(app)
        .unwrap();
    // Larger than a stream's flow-control window (256 KiB), within the
    // limit; and over the limit.
    let big = vec![7u8; 300_000];
    let too_big = vec![7u8; 500_000];
    let answers = h3(
        &server,
        &[
            ("/later/1", None),
            ("/", None),
            ("/later/2", None),
            ("/echo", Some(b"hello")),
            ("/echo", Some(&big)),
            ("/echo", Some(&too_big)),
        ],
    );
    let texts: Vec<(&str, &[u8])> = answers.iter().map(|(s, b)| (s.as_str(), &b[..])).collect();
    assert_eq!(
        texts,
        [
            ("200", &b"later 1"[..]),
            ("200", b"now"),
            ("200", b"later 2"),
            ("200", b"HTTP/3.0 5 bytes"),
            ("200", b"HTTP/3.0 300000 bytes"),
            ("413", b"413 Content Too Large\n"),
        ]
    );
    // The refused request is logged with the bytes of the error body it
    // was sent, as HTTP/2 logs it (`http2.rs`).
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let expected = format!(
        "\"protocol\":\"HTTP/3.0\",\"status\":413,\"bytes\":{},",
        texts[5].1.len()
    );
    assert!(log.contains(&expected), "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// An HTTP/3 request's client is decided as any other's: the connection's
/// address (its current path), or behind a trusted proxy the request's own
/// `X-Forwarded-For`.
#[test]
fn http3_requests_have_their_client_address_decided_per_request() {
    let (config, dir) = tls("client-addr");
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .trusted_proxies(
            "127.0.0.1".parse().unwrap(),
            peregrine::client_addr::AddrField::XForwardedFor,
        )
        .start(|req: &Request<'_>| {
            let c = req.client_addr();
            Response::text(format!("{} {:?} {}", c.ip, c.via, req.peer_addr().ip()))
        })
        .unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 60, \"requests\": [\
         {{\"path\": \"/\"}}, \
         {{\"path\": \"/\", \"headers\": [[\"x-forwarded-for\", \"6.6.6.6, 1.2.3.4\"]]}}]}}",
        server.local_addr().port(),
        out.display()
    );
    let done = run_client(&spec, 120);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let body = |i: usize| std::fs::read_to_string(out.join(format!("{i}.body"))).unwrap();
    assert_eq!(body(0), "127.0.0.1 Peer 127.0.0.1");
    assert_eq!(body(1), "1.2.3.4 XForwardedFor 127.0.0.1");
    server.shutdown();
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Bodies written by another thread (`body::channel`) go out over HTTP/3
/// as they come, on a connection whose other streams are answered
/// meanwhile: `/stream` sends its second chunk only once `/fast` (asked
/// on the same connection) has been handled. An abort resets the stream
/// (H3_INTERNAL_ERROR); a large body passes through a small channel.
#[test]
fn streamed_bodies_over_http3() {
    use peregrine::body;
    use std::sync::mpsc;
    use std::sync::Mutex;
    let (config, dir) = tls("stream");
    let (fast_tx, fast_rx) = mpsc::channel::<()>();
    let fast_tx = Mutex::new(fast_tx);
    let fast_rx = Mutex::new(Some(fast_rx));
    let app = Router::new()
        .get("/stream", move |_: &Request<'_>| {
            let (body, tx) = body::channel(1024);
            let fast = fast_rx.lock().unwrap().take().unwrap();
            std::thread::spawn(move || {
                tx.send("one ").unwrap();
                fast.recv_timeout(test_support::PATIENCE).unwrap();
                tx.send("two").unwrap();
            });
            Response::new(200).with_body(body)
        })
        .get("/fast", move |_: &Request<'_>| {
            fast_tx.lock().unwrap().send(()).unwrap();
            Response::text("fast")
        })
        .get("/abort", |_: &Request<'_>| {
            let (body, tx) = body::channel(1024);
            std::thread::spawn(move || {
                let _ = tx.send("x");
                tx.abort();
            });
            Response::new(200).with_body(body)
        })
        .get("/big", |_: &Request<'_>| {
            let (body, tx) = body::channel(64 * 1024);
            std::thread::spawn(move || {
                for i in 0..64u8 {
                    tx.send(vec![i; 16 * 1024]).unwrap();
                }
            });
            Response::new(200).with_body(body)
        });
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .start(app)
        .unwrap();
    let answers = h3(
        &server,
        &[("/stream", None), ("/fast", None), ("/abort", None), ("/big", None)],
    );
    assert_eq!((answers[0].0.as_str(), &answers[0].1[..]), ("200", &b"one two"[..]));
    assert_eq!((answers[1].0.as_str(), &answers[1].1[..]), ("200", &b"fast"[..]));
    assert_eq!(answers[2].0, "error reset 258");
    let big: Vec<u8> = (0..64u8).flat_map(|i| vec![i; 16 * 1024]).collect();
    assert_eq!(answers[3].0, "200");
    assert!(answers[3].1 == big, "{} bytes", answers[3].1.len());
    let _ = std::fs::remove_dir_all(dir);
}

/// Request bodies read as they arrive (`body::streamed`) over HTTP/3:
/// a body of several stream windows reaches the reader whole and in
/// order while the connection reads only as far as the reader has room;
/// one over the limit fails its reader (InvalidData) and gets 413.
#[test]
fn streamed_uploads_over_http3() {
    use peregrine::body;
    use std::io::Read;
    use std::sync::mpsc;
    use std::sync::Mutex;
    let (config, dir) = tls("upload");
    let (err_tx, errors) = mpsc::channel::<std::io::ErrorKind>();
    let err_tx = Mutex::new(err_tx);
    let app = Router::new().get("/", |_: &Request<'_>| Response::text("now")).post(
        "/upload",
        body::streamed(move |req: &Request<'_>| -> Reply {
            let mut reader = req.body_reader().expect("a reader");
            let responder = req.defer();
            let err_tx = err_tx.lock().unwrap().clone();
            std::thread::spawn(move || {
                let (mut n, mut sum) = (0u64, 0u64);
                let mut buf = vec![0; 16 * 1024];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) => break responder.send(Response::text(format!("{n} {sum}"))),
                        Ok(got) => {
                            for &b in &buf[..got] {
                                // Position-weighted: bytes out of order change it.
                                sum = sum.wrapping_add(u64::from(b) * (n + 1));
                                n += 1;
                            }
                        }
                        Err(e) => {
                            let _ = err_tx.send(e.kind());
                            break responder.send(Response::error(400));
                        }
                    }
                }
            });
            Reply::Later
        }),
    );
    let limits = peregrine::Limits {
        body_bytes_max: 4 << 20,
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .start(app)
        .unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    let too_big = vec![1u8; 5 << 20];
    let answers = h3(
        &server,
        &[("/upload", Some(&big)), ("/", None), ("/upload", Some(&too_big))],
    );
    let mut sum = 0u64;
    for (i, &b) in big.iter().enumerate() {
        sum = sum.wrapping_add(u64::from(b) * (i as u64 + 1));
    }
    assert_eq!(answers[0].0, "200");
    assert_eq!(String::from_utf8_lossy(&answers[0].1), format!("{} {sum}", big.len()));
    assert_eq!((answers[1].0.as_str(), &answers[1].1[..]), ("200", &b"now"[..]));
    assert_eq!(answers[2].0, "413");
    assert_eq!(
        errors.recv_timeout(test_support::PATIENCE).unwrap(),
        std::io::ErrorKind::InvalidData
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A client that leaves while its response is still being written: the
/// producer's `send` fails once the connection is gone. The client gives
/// up on the endless stream after its own 3 s timeout and closes.
#[test]
fn a_streamed_body_to_a_client_gone_over_http3_fails_send() {
    use peregrine::body;
    use std::sync::mpsc;
    use std::sync::Mutex;
    let (config, dir) = tls("gone");
    let (done_tx, done) = mpsc::channel::<usize>();
    let done_tx = Mutex::new(done_tx);
    let app = move |_: &Request<'_>| {
        let (body, tx) = body::channel(1024);
        let done_tx = done_tx.lock().unwrap().clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while tx.send(vec![b'x'; 512]).is_ok() {
                n += 1;
            }
            let _ = done_tx.send(n);
        });
        Response::new(200).with_body(body)
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .start(app)
        .unwrap();
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-gone-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 3, \"requests\": [{{\"path\": \"/\"}}]}}",
        server.local_addr().port(),
        out.display(),
    );
    let status = run_client(&spec, 60).status;
    assert!(!status.success(), "the client cannot finish an endless body");
    let sent = done
        .recv_timeout(test_support::PATIENCE)
        .expect("send fails once the client is gone");
    assert!(sent > 0, "some chunks went out first");
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// `expect: 100-continue` over HTTP/3: the client holds its body back
/// until an interim HEADERS with `:status` 100 comes (it would wait until
/// its timeout otherwise), as over HTTP/1.1 and HTTP/2: for a body
/// collected before the handler runs and for one read as it arrives
/// (`body::streamed`). A body announced over the limit gets its 413 and no
/// 100; another expectation gets 417; a body nobody reads (a POST to a
/// GET route) gets its 405 at once and no 100, so it is never sent.
#[test]
fn expect_100_continue_over_http3_gets_an_interim_100_before_the_body() {
    use peregrine::body;
    use std::io::Read;
    let (config, dir) = tls("continue");
    let app = Router::new()
        .get("/", |_: &Request<'_>| Response::text("home"))
        .post("/echo", |req: &Request<'_>| {
            Response::text(format!("{} bytes", req.body().len()))
        })
        .post(
            "/upload",
            body::streamed(|req: &Request<'_>| -> Reply {
                let mut reader = req.body_reader().expect("a reader");
                let responder = req.defer();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let answer = match reader.read_to_end(&mut got) {
                        Ok(n) => Response::text(format!("{n} bytes streamed")),
                        Err(_) => Response::error(400),
                    };
                    responder.send(answer);
                });
                Reply::Later
            }),
        );
    let limits = peregrine::Limits {
        body_bytes_max: 100_000,
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .start(app)
        .unwrap();
    let hex = |n: usize| "61".repeat(n);
    let requests = [
        format!(
            "{{\"path\": \"/echo\", \"method\": \"POST\", \"expect_continue\": true, \"body\": \"{}\"}}",
            hex(5000)
        ),
        format!(
            "{{\"path\": \"/upload\", \"method\": \"POST\", \"expect_continue\": true, \"body\": \"{}\"}}",
            hex(70_000)
        ),
        format!(
            "{{\"path\": \"/echo\", \"method\": \"POST\", \"expect_continue\": true, \
             \"headers\": [[\"content-length\", \"200000\"]], \"body\": \"{}\"}}",
            hex(10)
        ),
        "{\"path\": \"/echo\", \"method\": \"POST\", \"headers\": [[\"expect\", \"a-pony\"]], \"body\": \"6161\"}"
            .to_owned(),
        format!(
            "{{\"path\": \"/\", \"method\": \"POST\", \"expect_continue\": true, \"body\": \"{}\"}}",
            hex(5000)
        ),
    ];
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-continue-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": [{}]}}",
        server.local_addr().port(),
        out.display(),
        requests.join(", ")
    );
    let done = run_client(&spec, 60);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let answer = |i: usize| {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        let body = std::fs::read(out.join(format!("{i}.body"))).unwrap();
        let interim = std::fs::read_to_string(out.join(format!("{i}.interim"))).unwrap_or_default();
        (
            interim,
            head.lines().next().unwrap().to_owned(),
            String::from_utf8_lossy(&body).into_owned(),
        )
    };
    let got: Vec<_> = (0..requests.len()).map(answer).collect();
    let expected = [
        ("100\n", "200", "5000 bytes"),
        ("100\n", "200", "70000 bytes streamed"),
        ("", "413", "413 Content Too Large\n"),
        ("", "417", "417 Expectation Failed\n"),
        ("", "405", "405 Method Not Allowed\n"),
    ];
    for (got, want) in got.iter().zip(expected) {
        assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_str()), want);
    }
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// A streamed body whose producer stays silent longer than the idle
/// timeout (an SSE stream between events): the connection is kept alive
/// while the request waits (PINGs), and the body arrives whole. The idle
/// timeout is 1 s and the producer is silent for 3 s. Once answered, the
/// connection idles out as before.
#[test]
fn a_streamed_body_silent_longer_than_the_idle_timeout_keeps_its_connection() {
    use peregrine::body;
    let (config, dir) = tls("keepalive");
    let app = move |_: &Request<'_>| {
        let (body, tx) = body::channel(1024);
        std::thread::spawn(move || {
            tx.send("data: one\n\n").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(3));
            tx.send("data: two\n\n").unwrap();
        });
        Response::new(200)
            .with_header("Content-Type", "text/event-stream")
            .with_body(body)
    };
    let limits = peregrine::Limits {
        h3_idle_timeout: std::time::Duration::from_secs(1),
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .start(app)
        .unwrap();
    // The answer, then the connection left idle: it must end at the idle
    // timeout (no PING once no request is open), well before the
    // client's 30 s.
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-keepalive-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"wait_close\": true, \
         \"requests\": [{{\"path\": \"/events\"}}]}}",
        server.local_addr().port(),
        out.display(),
    );
    let done = run_client(&spec, 60);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let head = std::fs::read_to_string(out.join("0.head")).unwrap();
    assert_eq!(head.lines().next(), Some("200"));
    assert_eq!(
        std::fs::read(out.join("0.body")).unwrap(),
        b"data: one\n\ndata: two\n\n"
    );
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(said.starts_with("answered\nconnection closed"), "{said}");
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// A connection with no request open is closed at `h3_idle_timeout` even
/// while the client PINGs (QUIC's own idle timer restarts on every
/// packet): HTTP/2 refuses the same (`h2/timeout.rs`), and a few PINGing
/// clients would otherwise hold `n_conns_max` connections forever.
#[test]
fn an_http3_connection_without_requests_idles_out_though_the_client_pings() {
    let (config, dir) = tls("idle-pings");
    let limits = peregrine::Limits {
        h3_idle_timeout: std::time::Duration::from_millis(500),
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .start(|_: &Request<'_>| Response::text("hi"))
        .unwrap();
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-idle-pings-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    // One request first (the timer runs from its end), then only PINGs,
    // five times a second, for up to 20 s.
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 20, \"wait_close\": true, \
         \"ping\": true, \"requests\": [{{\"path\": \"/\"}}]}}",
        server.local_addr().port(),
        out.display(),
    );
    let done = run_client(&spec, 60);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(std::fs::read(out.join("0.body")).unwrap(), b"hi");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(said.starts_with("answered\nconnection closed 256"), "{said}");
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// An answer blocked on the client's stream credit, which the client
/// never raises, ends the connection at `send_timeout` (as on HTTP/2):
/// the request being open, the server's own keep-alive PINGs and the
/// client's ACKs would otherwise hold it forever.
#[test]
fn an_http3_answer_blocked_on_a_window_never_opened_ends_at_the_send_timeout() {
    let (config, dir) = tls("stall");
    let limits = peregrine::Limits {
        send_timeout: std::time::Duration::from_millis(500),
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .limits(limits)
        .start(|_: &Request<'_>| Response::bytes("application/octet-stream", vec![b'x'; 200_000]))
        .unwrap();
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-stall-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 20, \"stall\": true, \
         \"requests\": [{{\"path\": \"/big\"}}]}}",
        server.local_addr().port(),
        out.display(),
    );
    let done = run_client(&spec, 60);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let head = std::fs::read_to_string(out.join("0.head")).unwrap();
    assert!(head.starts_with("error connection closed 263 "), "{head}");
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// Connections cut at the shutdown deadline are counted closed, and the
/// deferred answers they wait for abandoned: a QUIC connection and a TCP
/// one waiting for an answer that never comes, an HTTP/2 one waiting for
/// two, and a TCP one whose body never ends. Meanwhile, QUIC's packet counts move while its connection
/// lives (not only once it has ended).
#[test]
fn connections_cut_at_the_shutdown_deadline_are_counted_closed() {
    use std::sync::{Arc, Mutex};
    let (config, dir) = tls("deadline");
    // The responders are kept, never used: the answers never come.
    let kept = Arc::new(Mutex::new(Vec::new()));
    let keep = kept.clone();
    let app = Router::new()
        .get("/never", move |req: &Request<'_>| {
            keep.lock().unwrap().push(req.defer());
            Reply::Later
        })
        .post("/upload", |_: &Request<'_>| Response::text("whole"));
    let limits = peregrine::Limits {
        shutdown_timeout: std::time::Duration::from_secs(1),
        ..peregrine::Limits::default()
    };
    let metrics = Arc::new(peregrine::Metrics::new());
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .metrics(metrics.clone())
        .start(app)
        .unwrap();
    let plain = server.local_addrs()[1];
    let out = std::env::temp_dir().join(format!("peregrine-e-h3-deadline-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 60, \
         \"requests\": [{{\"path\": \"/never\"}}]}}",
        server.local_addr().port(),
        out.display(),
    );
    let child = spawn_client(&spec, 120);
    let mut waiting = std::net::TcpStream::connect(plain).unwrap();
    waiting.write_all(b"GET /never HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut uploading = std::net::TcpStream::connect(plain).unwrap();
    uploading
        .write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        .unwrap();
    // HTTP/2 (prior knowledge): two streams waiting on one connection.
    let mut two = std::net::TcpStream::connect(plain).unwrap();
    let mut h2 = test_support::h2::PREFACE.to_vec();
    h2.extend(test_support::h2::frame(test_support::h2::SETTINGS, 0, 0, &[]));
    for stream in [1, 3] {
        // :method GET, :scheme http, :path /never, :authority x
        // (literals, names from the static table, no Huffman).
        let block = [
            &[0x02, 3][..],
            b"GET",
            &[0x06, 4],
            b"http",
            &[0x04, 6],
            b"/never",
            &[0x01, 1],
            b"x",
        ]
        .concat();
        let flags = test_support::h2::END_HEADERS | test_support::h2::END_STREAM;
        h2.extend(test_support::h2::frame(
            test_support::h2::HEADERS,
            flags,
            stream,
            &block,
        ));
    }
    two.write_all(&h2).unwrap();
    let text = test_support::wait_for("four requests in flight, three connections open", || {
        let text = metrics.render();
        (sample(&text, "peregrine_requests_in_flight") == 4
            && sample(&text, "peregrine_connections_open") == 3
            && sample(&text, "peregrine_quic_connections_open") == 1)
            .then_some(text)
    });
    // The connection is open and has sent its handshake and more.
    assert!(sample(&text, "peregrine_quic_packets_sent_total") > 0, "{text}");
    server.shutdown();
    server.join().unwrap();
    let text = metrics.render();
    assert_eq!(sample(&text, "peregrine_connections_open"), 0, "{text}");
    assert_eq!(sample(&text, "peregrine_quic_connections_open"), 0, "{text}");
    assert_eq!(sample(&text, "peregrine_requests_in_flight"), 0, "{text}");
    assert_eq!(sample(&text, "peregrine_quic_connections_accepted_total"), 1, "{text}");
    // The client saw its connection closed, the answer never came.
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let head = std::fs::read_to_string(out.join("0.head")).unwrap();
    assert!(head.starts_with("error connection closed"), "{head}");
    drop((waiting, uploading, two));
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(dir);
}

/// A UDP port held by another socket is reported, not shared: a socket
/// with SO_REUSEPORT (as another server of the same user might have)
/// would otherwise join HTTP/3's group and take a share of its datagrams.
/// Without HTTP/3 the same address is served.
#[test]
fn a_udp_port_taken_by_another_socket_is_an_error_naming_http3() {
    let (config, dir) = tls("udp-taken");
    // A port free for TCP (the listener only probed it, never accepted).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let foreign = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    foreign.set_reuse_port(true).unwrap();
    foreign.bind(&addr.into()).unwrap();
    let app = |_: &Request<'_>| Response::text("hi");
    let err = Server::new()
        .bind_tls(addr, config.clone())
        .workers(2)
        .start(app)
        .expect_err("the UDP port is taken");
    assert!(err.is_bind() && err.is_http3_bind(), "{err:?}");
    assert_eq!(err.to_string(), format!("cannot listen on {addr} (UDP, for HTTP/3)"));
    assert_eq!(err.io_error().kind(), std::io::ErrorKind::AddrInUse, "{err:?}");
    let server = Server::new()
        .bind_tls(addr, config)
        .workers(2)
        .http3(false)
        .start(app)
        .unwrap();
    server.shutdown();
    server.join().unwrap();
    drop(foreign);
    let _ = std::fs::remove_dir_all(dir);
}

/// The client of `quic_connections_resume_with_tickets_from_a_server_with_the_same_keys`:
/// aioquic (not rustls) connects to each port given in turn, keeping the
/// session tickets it is sent and offering the newest to the next; prints
/// whether each connection's TLS session was resumed (aioquic's record).
const RESUME_CLIENT: &str = r#"
import asyncio, ssl, sys
from aioquic.asyncio import connect
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration

tickets = []

async def once(port, ticket):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    config.session_ticket = ticket
    async with connect("127.0.0.1", port, configuration=config,
                       session_ticket_handler=tickets.append) as client:
        await client.ping()
        # The tickets come after the handshake's end.
        for _ in range(50):
            if tickets:
                break
            await asyncio.sleep(0.02)
        return client._quic.tls.session_resumed

async def main():
    seen = []
    for port in sys.argv[1:]:
        seen.append(await once(int(port), tickets[-1] if tickets else None))
    print("resumed " + " ".join("yes" if r else "no" for r in seen))

asyncio.run(main())
"#;

/// QUIC connections resume their TLS session (RFC 9001 §4.5) from a
/// ticket another server issued, when both hold the same ticket keys
/// (`TlsConfig::ticket_keys`: a process's workers, a reload, a binary
/// upgrade or a fleet's key file), and not when the keys differ. A
/// session cache per configuration could not do the first: the ticket is
/// the session. 0-RTT stays off, so a resumed connection still takes one
/// round trip.
#[test]
fn quic_connections_resume_with_tickets_from_a_server_with_the_same_keys() {
    let (_, dir) = tls("resume");
    let shared = std::sync::Arc::new(peregrine::TicketKeys::random());
    let start = |keys: &std::sync::Arc<peregrine::TicketKeys>| {
        let config = TlsConfig::from_pem_files(dir.join("cert.pem"), dir.join("key.pem"))
            .unwrap()
            .ticket_keys(keys.clone());
        Server::new()
            .bind_tls("127.0.0.1:0", config)
            .workers(1)
            .start(|_: &Request<'_>| Response::text("hi"))
            .unwrap()
    };
    let (a, b) = (start(&shared), start(&shared));
    let other = start(&std::sync::Arc::new(peregrine::TicketKeys::random()));
    let script = dir.join("resume.py");
    std::fs::write(&script, RESUME_CLIENT).unwrap();
    let port = |s: &Running| s.local_addr().port().to_string();
    // a (full), b (a's ticket), a again (b's), other (different keys).
    let out = std::process::Command::new(python())
        .arg(&script)
        .args([port(&a), port(&b), port(&a), port(&other)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), "resumed no yes yes no");
    for s in [a, b, other] {
        s.shutdown();
        s.join().unwrap();
    }
}
