//! HTTP/3 judged by independent clients: aioquic (Python, its own QUIC,
//! TLS and QPACK) fetches from `hello`, `serve DIR` and `serve ARCHIVE`
//! over QUIC, and every answer must be the HTTP/1.1 answer (status,
//! fields but `date`, body byte for byte; a 10 MiB file included; HEAD
//! too); the
//! same through a path losing 2% and reordering 3% of datagrams; headless
//! Chromium loads a page over HTTP/3. Then hostile input: garbage
//! datagrams, malformed frames, a dynamic-table reference QPACK was told
//! not to use, an oversized header section, streams past the limit, a
//! flood of Initials (Retry); each gets its error code, and the server
//! keeps serving. A packet for an unknown connection gets a stateless
//! reset. A graceful shutdown closes connections with H3_NO_ERROR.
//!
//! What the tests need is installed by them when missing: aioquic with
//! pip into a virtual environment under the target directory (once per
//! machine, under a lock, bounded in time); curl with apt (under
//! `common::APT_LOCK`), and Chromium the same way. `PEREGRINE_H3_PYTHON`
//! names a Python that has aioquic already, `PEREGRINE_CHROMIUM` a browser.

mod common;

use std::io::Write;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use common::Program;

/// A running `peregrine`, killed when dropped.
struct Running {
    child: Child,
    addr: String,
    /// The metrics listener's address, with `--metrics`.
    metrics: Option<String>,
    /// Its standard error's lines after the first.
    lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// The process is still running (it has not crashed).
    fn is_alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

fn start(args: &[&str], pki: &Pki) -> Running {
    let mut cmd = common::peregrine();
    cmd.args(args).args(["--bind", "127.0.0.1:0"]);
    if !args.contains(&"--workers") {
        cmd.args(["--workers", "2"]);
    }
    cmd.arg("--tls-cert").arg(&pki.cert).arg("--tls-key").arg(&pki.key);
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("peregrine starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut running = Running {
        child,
        addr: String::new(),
        metrics: None,
        lines: None,
    };
    // "metrics on http://ADDR/metrics" (with --metrics), then "... on
    // https://ADDR/".
    loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(!line.is_empty(), "peregrine ended before serving");
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            running.metrics = rest.split('/').next().map(str::to_owned);
        }
        if let Some(rest) = line.split("https://").nth(1) {
            running.addr = rest.split('/').next().unwrap().to_owned();
            break;
        }
    }
    // Keep reading its stderr so that the server never blocks on it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr, &mut line).unwrap_or(0) == 0 {
            return;
        }
        let _ = tx.send(line);
    });
    running.lines = Some(rx);
    running
}

struct Pki {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pki(tag: &str) -> Pki {
    let dir = std::env::temp_dir().join(format!("peregrine-h3-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    Pki { dir, cert: c, key: k }
}

/// A site with a page, a 1 MiB file and a 10 MiB one (far beyond every
/// flow-control window and quinn-proto's send buffer), in DIR/site,
/// packed into DIR/site.prg.
fn site(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("peregrine-h3-site-{tag}-{}", std::process::id()));
    let root = dir.join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<!doctype html><title>h3</title><p>hello\n").unwrap();
    std::fs::write(root.join("style.css"), "p { color: teal }\n").unwrap();
    std::fs::write(root.join("1m.bin"), pattern(1 << 20)).unwrap();
    std::fs::write(root.join("10m.bin"), pattern(10 << 20)).unwrap();
    let archive = dir.join("site.prg");
    let out = common::peregrine()
        .arg("pack")
        .arg(&root)
        .arg("-o")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (root, archive)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// A Python with aioquic: `PEREGRINE_H3_PYTHON`, or a virtual environment
/// under the target directory, made and filled by pip once per machine
/// (under a lock, so that test binaries and runs do not race; bounded by
/// `timeout`).
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

/// One answer: the status (or why there is none), fields, body.
#[derive(Debug)]
struct Answer {
    status: Result<u16, String>,
    /// Lowercase names, sorted, without `date`.
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A request for the aioquic client: path and header fields, or raw
/// bytes for the request stream.
enum Req<'a> {
    Get(&'a str, &'a [(&'a str, &'a str)]),
    Head(&'a str, &'a [(&'a str, &'a str)]),
    Raw(Vec<u8>),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Sends `reqs` at once on one HTTP/3 connection with aioquic; `extra` is
/// more of the spec's JSON (`"ignore_stream_limit": true,`).
fn h3(port: u16, reqs: &[Req<'_>], extra: &str) -> Vec<Answer> {
    let out = tempdir("h3-out");
    let requests: Vec<String> = reqs
        .iter()
        .map(|r| match r {
            Req::Get(path, fields) | Req::Head(path, fields) => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|(n, v)| format!("[{}, {}]", json_str(n), json_str(v)))
                    .collect();
                let method = if matches!(r, Req::Head(..)) { "HEAD" } else { "GET" };
                format!(
                    "{{\"method\": \"{method}\", \"path\": {}, \"headers\": [{}]}}",
                    json_str(path),
                    fields.join(", ")
                )
            }
            Req::Raw(bytes) => format!("{{\"raw\": \"{}\"}}", hex(bytes)),
        })
        .collect();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {port}, \"out\": {}, {extra} \"timeout\": 60, \"requests\": [{}]}}",
        json_str(out.to_str().unwrap()),
        requests.join(", ")
    );
    let answer = run_client(&spec);
    assert!(answer.status.success(), "the aioquic client failed: {}", answer.stderr);
    let answers = (0..reqs.len())
        .map(|i| {
            let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
            let mut lines = head.lines();
            let first = lines.next().unwrap();
            let status = match first.strip_prefix("error ") {
                Some(why) => Err(why.to_owned()),
                None => Ok(first.parse().unwrap()),
            };
            let fields = sorted(lines.map(|l| {
                let (n, v) = l.split_once(": ").unwrap();
                (n.to_owned(), v.to_owned())
            }));
            let body = std::fs::read(out.join(format!("{i}.body"))).unwrap();
            Answer { status, fields, body }
        })
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    answers
}

struct ClientRun {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

fn run_client(spec: &str) -> ClientRun {
    let child = test_support::process::spawn_h3_client(python(), spec, 120, true);
    let out = child.wait_with_output().unwrap();
    ClientRun {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sorted(fields: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fields
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .filter(|(n, _)| n != "date")
        .collect();
    v.sort();
    v
}

fn tempdir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("peregrine-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The same request over HTTPS with HTTP/1.1 (curl).
fn h1(server: &Running, path: &str, fields: &[(&str, &str)]) -> Answer {
    h1_with(server, false, path, fields)
}

/// As `h1`, a HEAD if `is_head` (curl then writes the head where the body
/// would go: the body returned is empty, curl reads none).
fn h1_with(server: &Running, is_head: bool, path: &str, fields: &[(&str, &str)]) -> Answer {
    let dir = tempdir("h1-out");
    let mut cmd = Command::new(common::curl());
    if is_head {
        cmd.arg("--head");
    }
    cmd.args(["-sS", "-k", "--http1.1", "--max-time", "60", "-D"])
        .arg(dir.join("head"))
        .arg("-o")
        .arg(dir.join("body"));
    for (n, v) in fields {
        cmd.args(["-H", &format!("{n}: {v}")]);
    }
    let url = format!("https://localhost:{}{path}", server.port());
    let out = cmd
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", server.port()), &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let head = std::fs::read_to_string(dir.join("head")).unwrap();
    let mut lines = head.lines().filter(|l| !l.is_empty());
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let fields = sorted(
        lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_owned(), v.trim().to_owned())
            })
            // HTTP/1.1's own connection management has no HTTP/3 form.
            .filter(|(n, _)| !n.eq_ignore_ascii_case("connection") && !n.eq_ignore_ascii_case("keep-alive")),
    );
    let body = if is_head {
        Vec::new()
    } else {
        std::fs::read(dir.join("body")).unwrap_or_default()
    };
    let _ = std::fs::remove_dir_all(&dir);
    Answer {
        status: Ok(status),
        fields,
        body,
    }
}

/// Every request over HTTP/3 (all at once, one connection) and over
/// HTTP/1.1: the same status, fields and body bytes; and HTTP/1.1 points
/// to HTTP/3 with Alt-Svc.
fn same_as_h1(server: &Running, reqs: &[(&str, &[(&str, &str)])]) {
    let h3_reqs: Vec<Req<'_>> = reqs.iter().map(|(p, f)| Req::Get(p, f)).collect();
    let got = h3(server.port(), &h3_reqs, "");
    for ((path, fields), h3) in reqs.iter().zip(got) {
        let h1 = h1(server, path, fields);
        assert_eq!(h3.status, h1.status, "{path}");
        assert_eq!(h3.fields, h1.fields, "{path}");
        assert!(
            h3.body == h1.body,
            "{path}: the bodies differ ({} and {} bytes)",
            h3.body.len(),
            h1.body.len()
        );
        let alt_svc = format!("h3=\":{}\"; ma=86400", server.port());
        assert!(
            h1.fields.contains(&("alt-svc".into(), alt_svc)),
            "{path}: {:?}",
            h1.fields
        );
    }
}

const NONE: &[(&str, &str)] = &[];

/// A download of /10m.bin over h3 through a relay (which slows it), on a
/// thread, once its first 200 datagrams have gone through: under way.
fn download_under_way(server_port: u16) -> (Relay, std::thread::JoinHandle<Vec<Answer>>) {
    let relay = Relay::new(server_port, 0, 0, None);
    let port = relay.addr.port();
    let client = std::thread::spawn(move || h3(port, &[Req::Get("/10m.bin", NONE)], ""));
    test_support::wait_until("the download to start", || {
        relay.carried.load(std::sync::atomic::Ordering::Relaxed) > 200
    });
    (relay, client)
}

/// The download of `download_under_way` ended with a 200 and the exact
/// 10 MiB; `what` prefixes the failure's message.
fn downloaded_whole(relay: Relay, client: std::thread::JoinHandle<Vec<Answer>>, what: &str) {
    let answers = client.join().unwrap();
    let (seen, _, _) = relay.finish();
    assert_eq!(answers[0].status, Ok(200), "{what}{seen} datagrams");
    assert!(
        answers[0].body == pattern(10 << 20),
        "the 10 MiB file, exact: {} bytes",
        answers[0].body.len()
    );
}

/// Sends SIGHUP to `pid` and waits for its line saying the configuration
/// was reloaded; fails on a line saying it was not.
fn reload(pid: u32, lines: &std::sync::mpsc::Receiver<String>) {
    test_support::process::signal(pid, "HUP");
    loop {
        let line = lines.recv_timeout(common::PATIENCE).expect("a line about the reload");
        assert!(!line.contains("not reloaded"), "{line}");
        if line.contains("configuration reloaded") {
            break;
        }
    }
}

#[test]
fn hello_answers_the_same_over_h3_as_over_h1() {
    let pki = pki("hello");
    let server = start(&["hello"], &pki);
    same_as_h1(&server, &[("/", NONE), ("/some/path?q=1", NONE)]);
}

#[test]
fn serve_dir_answers_the_same_over_h3_as_over_h1_a_10_mib_file_included() {
    let pki = pki("dir");
    let (root, _) = site("dir");
    // One worker: its cache is the one both protocols ask.
    let server = start(&["serve", root.to_str().unwrap(), "--workers", "1"], &pki);
    // A file over 1 MiB has no ETag until its content hash is made, off
    // the workers: wait for it, so that both protocols see the same file.
    test_support::wait_until("the 10 MiB file's ETag", || {
        h1(&server, "/10m.bin", NONE).fields.iter().any(|(n, _)| n == "etag")
    });
    let range: &[(&str, &str)] = &[("range", "bytes=100-199,5000-5099")];
    let gzip: &[(&str, &str)] = &[("accept-encoding", "gzip")];
    same_as_h1(
        &server,
        &[
            ("/", NONE),
            ("/style.css", gzip),
            ("/1m.bin", NONE),
            ("/10m.bin", NONE),
            ("/1m.bin", range),
            ("/missing", NONE),
        ],
    );
    let big = h3(server.port(), &[Req::Get("/10m.bin", NONE)], "").remove(0);
    assert!(big.body == pattern(10 << 20), "the 10 MiB file, byte for byte");
}

/// HEAD over HTTP/3 gets HTTP/1.1's status and fields (Content-Length
/// included: the size GET would send) and no body, from files, an
/// archive, a range and a 404.
#[test]
fn head_answers_the_same_over_h3_as_over_h1() {
    let pki = pki("head");
    let (root, archive) = site("head");
    let range: &[(&str, &str)] = &[("range", "bytes=10-19")];
    let reqs: [(&str, &[(&str, &str)]); 5] = [
        ("/", NONE),
        ("/style.css", NONE),
        ("/1m.bin", NONE),
        ("/1m.bin", range),
        ("/missing", NONE),
    ];
    for served in [root, archive] {
        let server = start(&["serve", served.to_str().unwrap()], &pki);
        let h3_reqs: Vec<Req<'_>> = reqs.iter().map(|(p, f)| Req::Head(p, f)).collect();
        let got = h3(server.port(), &h3_reqs, "");
        for ((path, fields), h3) in reqs.iter().zip(got) {
            let h1 = h1_with(&server, true, path, fields);
            assert_eq!(h3.status, h1.status, "{path}");
            assert_eq!(h3.fields, h1.fields, "{path}");
            assert!(h3.body.is_empty(), "{path}: {} bytes", h3.body.len());
        }
        let big = h1_with(&server, true, "/1m.bin", NONE);
        assert!(
            big.fields
                .contains(&("content-length".into(), (1u32 << 20).to_string())),
            "{:?}",
            big.fields
        );
    }
}

#[test]
fn serve_archive_answers_the_same_over_h3_as_over_h1() {
    let pki = pki("archive");
    let (_, archive) = site("archive");
    let server = start(&["serve", archive.to_str().unwrap()], &pki);
    let range: &[(&str, &str)] = &[("range", "bytes=0-9")];
    same_as_h1(
        &server,
        &[
            ("/", NONE),
            ("/style.css", NONE),
            ("/10m.bin", NONE),
            ("/1m.bin", range),
            ("/missing", NONE),
        ],
    );
}

/// Builds a HEADERS frame from a QPACK section.
fn headers_frame(section: &[u8]) -> Vec<u8> {
    assert!(section.len() < 64);
    [&[0x01, section.len() as u8][..], section].concat()
}

/// `GET /` for host `a` in QPACK, static table and literals only.
const GET_SECTION: &[u8] = &[0, 0, 0xd1, 0xd7, 0xc1, 0x50, 0x01, b'a'];

#[test]
fn hostile_input_gets_its_error_code_and_the_server_keeps_serving() {
    let pki = pki("hostile");
    let mut server = start(&["hello", "--h3-streams-max", "4", "--head-bytes-max", "8192"], &pki);

    // Garbage datagrams: random bytes, a long header of an unknown
    // version, short headers for connections that do not exist.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = format!("127.0.0.1:{}", server.port());
    let mut x: u32 = 12345;
    for i in 0..600usize {
        let len = [0, 1, 20, 1200, 1500][i % 5];
        let mut d: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        if i % 7 == 0 && len >= 20 {
            d[0] = 0xc0;
            d[1..5].copy_from_slice(&[0x1a, 0x2a, 0x3a, 0x4a]);
        }
        udp.send_to(&d, &to).unwrap();
    }

    // A request stream whose first frame is DATA: H3_FRAME_UNEXPECTED.
    let answers = h3(server.port(), &[Req::Raw(vec![0x00, 0x01, b'x'])], "");
    assert_eq!(
        answers[0].status,
        Err("connection closed 261 DATA outside a message's body".into())
    );

    // A field section needing the dynamic table we set to 0 capacity:
    // QPACK_DECOMPRESSION_FAILED.
    let answers = h3(server.port(), &[Req::Raw(headers_frame(&[0x02, 0x00, 0x80]))], "");
    let status = answers[0].status.clone().unwrap_err();
    assert!(status.starts_with("connection closed 512 "), "{status}");
    // A reserved HTTP/2 frame type: H3_FRAME_UNEXPECTED.
    let raw = [headers_frame(GET_SECTION), vec![0x06, 0x00]].concat();
    let status = h3(server.port(), &[Req::Raw(raw)], "")[0].status.clone().unwrap_err();
    assert!(status.starts_with("connection closed 261 "), "{status}");

    // A header section over --head-bytes-max: 431, the connection intact.
    let big = "b".repeat(10_000);
    let fields: &[(&str, &str)] = &[("x-big", &big)];
    let answers = h3(server.port(), &[Req::Get("/", fields), Req::Get("/", NONE)], "");
    assert_eq!(answers[0].status, Ok(431));
    assert_eq!(answers[1].status, Ok(200));

    // More streams than --h3-streams-max, taken without waiting for
    // credit: QUIC's STREAM_LIMIT_ERROR (0x4) closes the connection.
    let many: Vec<Req<'_>> = (0..12).map(|_| Req::Get("/", NONE)).collect();
    let answers = h3(server.port(), &many, "\"ignore_stream_limit\": true,");
    let refused = answers
        .iter()
        .filter_map(|a| a.status.clone().err())
        .collect::<Vec<_>>();
    assert!(
        refused.iter().any(|e| e.starts_with("connection closed 4 ")),
        "{answers:?}"
    );
    // A well-behaved client asking for as many gets them all, 4 at a time.
    let answers = h3(server.port(), &many, "");
    assert!(answers
        .iter()
        .all(|a| a.status == Ok(200) && a.body == b"Hello, World!"));

    assert!(server.is_alive());
}

#[test]
fn a_flood_of_initials_is_answered_with_retry_and_clients_still_get_in() {
    let pki = pki("retry");
    let mut server = start(
        &["hello", "--h3-handshakes-before-retry", "8", "--metrics", "127.0.0.1:0"],
        &pki,
    );
    // 100 connection attempts that never finish their handshake, from one
    // address (so one worker): past 8 in progress, each gets a Retry.
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"flood\": 100}}",
        server.port()
    );
    let run = run_client(&spec);
    assert!(run.status.success(), "{}", run.stderr);
    let retries: u32 = run
        .stdout
        .split("\"retries\": ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(retries >= 80, "{}", run.stdout);
    // A real client proves its address (aioquic follows the Retry) and
    // is served.
    let answers = h3(server.port(), &[Req::Get("/", NONE)], "");
    assert_eq!(answers[0].status, Ok(200));
    let text = common::get(server.metrics.as_deref().unwrap(), "/metrics");
    let counter = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert!(counter("peregrine_quic_retries_total ") >= 80, "{text}");
    assert!(counter("peregrine_quic_handshakes_total ") >= 1, "{text}");
    assert!(counter("peregrine_quic_connections_accepted_total ") >= 9, "{text}");
    // Memory stays bounded under a larger flood: a Retry keeps no state,
    // and at most 8 handshakes are in progress.
    let rss_kib = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    };
    let before = rss_kib();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"flood\": 3000}}",
        server.port()
    );
    let run = run_client(&spec);
    assert!(run.status.success(), "{}", run.stderr);
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 8 * 1024, "RSS grew by {grown} KiB under 3,000 more Initials");
    assert!(server.is_alive());
}

#[test]
fn a_graceful_shutdown_closes_http3_connections_with_no_error() {
    let pki = pki("goaway");
    let mut server = start(&["hello"], &pki);
    let out = tempdir("h3-goaway");
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": {}, \"wait_close\": true, \"timeout\": 20, \"requests\": [{{\"path\": \"/\"}}]}}",
        server.port(),
        json_str(out.to_str().unwrap())
    );
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3/client.py");
    let mut child = Command::new("timeout")
        .args(["--kill-after=5", "60"])
        .arg(python())
        .arg(client)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(spec.as_bytes()).unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "answered");
    // The connection is open and idle: SIGTERM.
    test_support::process::signal(server.child.id(), "TERM");
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    // H3_NO_ERROR (0x100), after our GOAWAY.
    assert_eq!(line.trim(), "connection closed 256 going away");
    assert!(child.wait().unwrap().success());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let _ = std::fs::remove_dir_all(&out);
}

/// RFC 9114 §6.2.1: closing the control stream or a QPACK stream (a
/// reset, a FIN), or asking the server to stop sending on its control
/// stream, is a connection error H3_CLOSED_CRITICAL_STREAM (0x104), also
/// after a 64 KiB frame of a reserved type (skipped); a push stream from
/// the client is H3_STREAM_CREATION_ERROR (0x103, §6.2.2); the server
/// keeps serving other connections.
#[test]
fn closing_a_critical_stream_closes_the_connection_with_h3_closed_critical_stream() {
    let pki = pki("critical");
    let mut server = start(&["hello"], &pki);
    // The reason phrases are the server's: aioquic closes with the same
    // code on its own when the server resets its control stream.
    for (then, why) in [
        ("reset control", "a critical stream was reset"),
        ("finish control", "the control stream closed"),
        ("reset encoder", "a critical stream was reset"),
        ("reset decoder", "a critical stream was reset"),
        ("stop server-control", "the client stopped our control stream"),
        // A 64 KiB frame of a reserved type is skipped (RFC 9114 §9), not
        // refused as too large: the stream's end after it is what closes.
        ("grease control", "the control stream closed"),
        // Only servers push (§6.2.2): H3_STREAM_CREATION_ERROR.
        ("open push", "a push stream from the client"),
    ] {
        let out = tempdir("h3-critical");
        let spec = format!(
            "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": {}, \"then\": \"{then}\", \"timeout\": 20, \"requests\": [{{\"path\": \"/\"}}]}}",
            server.port(),
            json_str(out.to_str().unwrap())
        );
        let run = run_client(&spec);
        assert!(run.status.success(), "{then}: {}", run.stderr);
        let mut lines = run.stdout.lines();
        assert_eq!(lines.next(), Some("answered"), "{then}");
        let closed = lines.next().unwrap_or_default();
        let code = if then == "open push" { 0x103 } else { 0x104 };
        assert_eq!(closed, format!("connection closed {code} {why}"), "{then}");
        let _ = std::fs::remove_dir_all(&out);
    }
    let answers = h3(server.port(), &[Req::Get("/", NONE)], "");
    assert_eq!(answers[0].status, Ok(200));
    assert!(server.is_alive());
}

/// A UDP relay between one client and the server that loses and
/// reorders datagrams (per mille, each way; a reordered one is held back
/// until the next has gone), as `tc netem loss 2% reorder` would on a veth
/// pair (this machine's kernel has no sch_netem, so the path is emulated
/// here), and that may move the client to a new source port after some
/// datagrams, as a NAT rebinding does.
struct Relay {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<(u64, u64, u64)>>,
    /// Datagrams carried so far, all ways.
    carried: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Relay {
    fn new(server_port: u16, loss: u64, reorder: u64, rebind_after: Option<u64>) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        use std::time::Duration;
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        // The server sees the second port once the first has carried
        // `rebind_after` datagrams.
        let backs: Vec<UdpSocket> = (0..2)
            .map(|_| {
                let b = UdpSocket::bind("127.0.0.1:0").unwrap();
                b.connect(("127.0.0.1", server_port)).unwrap();
                b
            })
            .collect();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let client: Arc<Mutex<Option<std::net::SocketAddr>>> = Arc::new(Mutex::new(None));
        let mut threads = Vec::new();
        let carried = Arc::new(std::sync::atomic::AtomicU64::new(0));
        // One thread from the client, one from each back socket.
        for from_idx in 0..3usize {
            let front = front.try_clone().unwrap();
            let backs: Vec<UdpSocket> = backs.iter().map(|b| b.try_clone().unwrap()).collect();
            let (stop, client, carried) = (stop.clone(), client.clone(), carried.clone());
            threads.push(std::thread::spawn(move || {
                let upstream = from_idx == 0;
                let from = if upstream { &front } else { &backs[from_idx - 1] };
                from.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let mut rng: u64 = 0x9e37_79b9_7f4a_7c15 ^ (from_idx as u64) << 32;
                let mut held: Option<Vec<u8>> = None;
                let (mut n, mut lost, mut reordered) = (0u64, 0u64, 0u64);
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let (len, peer) = match from.recv_from(&mut buf) {
                        Ok(got) => got,
                        Err(_) => continue,
                    };
                    n += 1;
                    carried.fetch_add(1, Ordering::Relaxed);
                    if upstream {
                        *client.lock().unwrap() = Some(peer);
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let dice = rng % 1000;
                    let back = &backs[usize::from(rebind_after.is_some_and(|after| n > after))];
                    let send = |d: &[u8]| {
                        if upstream {
                            let _ = back.send(d);
                        } else if let Some(c) = *client.lock().unwrap() {
                            let _ = front.send_to(d, c);
                        }
                    };
                    if dice < loss {
                        lost += 1;
                        continue;
                    }
                    if dice < loss + reorder && held.is_none() {
                        reordered += 1;
                        held = Some(buf[..len].to_vec());
                        continue;
                    }
                    send(&buf[..len]);
                    if let Some(d) = held.take() {
                        send(&d);
                    }
                }
                (n, lost, reordered)
            }));
        }
        Relay {
            addr,
            stop,
            threads,
            carried,
        }
    }

    /// Stops the relay; datagrams seen, lost and reordered, all ways.
    fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }
}

/// It stalled about 1 run in 10 while two busy loops or the rest of this
/// binary ran beside it (the relay had carried some 50 datagrams, none
/// lost, then nothing until the client's idle timeout). The relay holds
/// the client's third datagram back until its fourth has gone, so the
/// request on stream 4 could reach the server before the one on stream 0;
/// when the server read them in two turns (under load), it took stream 0,
/// opened by stream 4's bytes but with none of its own yet, for a stream
/// already answered and dropped its request (`h3::Session`'s `unseen`
/// now; the engine's unit test
/// `a_request_stream_whose_bytes_come_after_a_later_streams_is_answered`).
#[test]
fn a_10_mib_download_survives_loss_and_reordering_and_small_requests_keep_coming() {
    let pki = pki("lossy");
    let (root, _) = site("lossy");
    let mut server = start(&["serve", root.to_str().unwrap()], &pki);
    let relay = Relay::new(server.port(), 20, 30, None);
    let mut reqs = vec![Req::Get("/10m.bin", NONE)];
    reqs.extend((0..20).map(|_| Req::Get("/index.html", NONE)));
    let answers = h3(relay.addr.port(), &reqs, "");
    let (seen, lost, reordered) = relay.finish();
    assert_eq!(
        answers[0].status,
        Ok(200),
        "the 10 MiB file ({seen} datagrams, {lost} lost)"
    );
    assert!(
        answers[0].body == pattern(10 << 20),
        "the 10 MiB file, exact: {} bytes",
        answers[0].body.len()
    );
    for a in &answers[1..] {
        assert_eq!(a.status, Ok(200));
        assert_eq!(a.body, b"<!doctype html><title>h3</title><p>hello\n");
    }
    println!("relay: {seen} datagrams, {lost} lost, {reordered} reordered");
    assert!(
        lost > 0 && reordered > 0,
        "the path lost and reordered nothing: {seen} datagrams"
    );
    assert!(server.is_alive());
}

/// Chromium, found or installed (Debian's `chromium`, under
/// `common::APT_LOCK`); `PEREGRINE_CHROMIUM` names another.
fn chromium() -> &'static Path {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    installed(
        &FOUND,
        Program {
            var: "PEREGRINE_CHROMIUM",
            names: &["chromium", "chromium-browser"],
            package: "chromium",
        },
        "chromium",
    )
}

/// `program`, found or installed once per run (in `found`); the test
/// fails, naming `what`, if it cannot be had.
fn installed(found: &'static OnceLock<Result<PathBuf, String>>, program: Program, what: &str) -> &'static Path {
    match found.get_or_init(|| common::find_or_install(&[program]).map(|mut v| v.remove(0))) {
        Ok(p) => p,
        Err(e) => panic!("{what} is needed: {e}"),
    }
}

#[test]
fn chromium_loads_a_page_over_http3() {
    let pki = pki("chromium");
    let (root, _) = site("chromium");
    let mut cmd = common::peregrine();
    cmd.args([
        "serve",
        root.to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
        "--access-log",
        "-",
    ]);
    cmd.arg("--tls-cert").arg(&pki.cert).arg("--tls-key").arg(&pki.key);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut server = Running {
        child,
        addr: String::new(),
        metrics: None,
        lines: None,
    };
    let mut stderr = std::io::BufReader::new(server.child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    server.addr = line
        .split("https://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let port = server.port();
    // The certificate's public key, as Chromium pins it for QUIC.
    let spki = Command::new("sh")
        .arg("-c")
        .arg("openssl x509 -pubkey -noout -in \"$1\" | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64")
        .arg("sh")
        .arg(&pki.cert)
        .output()
        .unwrap();
    assert!(
        spki.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&spki.stderr)
    );
    let spki = String::from_utf8(spki.stdout).unwrap();
    let profile = tempdir("h3-chromium-profile");
    let out = Command::new("timeout")
        .args(["--kill-after=5", "90"])
        .arg(chromium())
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--enable-quic"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--origin-to-force-quic-on=localhost:{port}"))
        .arg("--host-resolver-rules=MAP localhost 127.0.0.1")
        .arg(format!("--ignore-certificate-errors-spki-list={}", spki.trim()))
        .arg("--dump-dom")
        .arg(format!("https://localhost:{port}/"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("<title>h3</title>"),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The access log (stdout) says which version carried the request.
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    let mut log = String::new();
    std::io::Read::read_to_string(server.child.stdout.as_mut().unwrap(), &mut log).unwrap();
    assert!(log.contains("\"GET / HTTP/3.0\" 200"), "{log}");
}

#[test]
fn no_http3_binds_no_udp_port_and_sends_no_alt_svc() {
    let pki = pki("off");
    let on = start(&["hello"], &pki);
    assert!(
        UdpSocket::bind(("127.0.0.1", on.port())).is_err(),
        "HTTP/3 holds the UDP port"
    );
    let off = start(&["hello", "--no-http3"], &pki);
    assert!(
        UdpSocket::bind(("127.0.0.1", off.port())).is_ok(),
        "no UDP socket on the port"
    );
    let answer = h1(&off, "/", NONE);
    assert_eq!(answer.status, Ok(200));
    assert!(
        !answer.fields.iter().any(|(n, _)| n == "alt-svc"),
        "{:?}",
        answer.fields
    );
}

/// HTTP/3's UDP port taken by another program: peregrine says which
/// protocol and port, and how to do without; `--no-http3` then serves.
#[test]
fn a_taken_udp_port_is_an_error_naming_http3_and_no_http3() {
    let pki = pki("udp-taken");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let taken = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let bind = format!("127.0.0.1:{port}");
    let run = |extra: &[&str]| {
        let mut cmd = common::peregrine();
        cmd.args(["hello", "--bind", &bind])
            .args(extra)
            .arg("--tls-cert")
            .arg(&pki.cert)
            .arg("--tls-key")
            .arg(&pki.key);
        cmd
    };
    let out = run(&[]).stderr(Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("cannot listen on {bind} (UDP, for HTTP/3): "))
            && err.trim_end().ends_with("; --no-http3 serves without it"),
        "{err}"
    );
    let mut child = run(&["--no-http3"]).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("https://") {
        line.clear();
        std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(!line.is_empty(), "peregrine --no-http3 ended before serving");
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(taken);
}

/// A short-header packet for a connection the server does not know (a
/// client whose server restarted) gets a stateless reset (RFC 9000
/// §10.3): a short-header-looking datagram smaller than what incited it
/// (no amplification), at least 21 bytes (§10.3: 5 unpredictable bytes and
/// the 16-byte token). Not every such packet is answered (quinn-proto
/// sends at most one reset per 20 ms; one naming another generation's
/// connection is passed to it), so up to 50 are tried, one at a time.
#[test]
fn a_packet_for_an_unknown_connection_gets_a_stateless_reset() {
    let pki = pki("reset");
    let server = start(&["hello", "--workers", "1"], &pki);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut reply = None;
    for _ in 0..50 {
        // A short header (fixed bit set, long-header bit clear), then a
        // destination connection ID and payload no server issued.
        let packet: Vec<u8> = (0..100)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let b = (seed >> 24) as u8;
                if i == 0 {
                    0x40 | (b & 0x3f)
                } else {
                    b
                }
            })
            .collect();
        sock.send_to(&packet, ("127.0.0.1", server.port())).unwrap();
        let mut buf = [0u8; 2048];
        if let Ok(n) = sock.recv(&mut buf) {
            reply = Some(buf[..n].to_vec());
            break;
        }
    }
    let reply = reply.expect("no stateless reset in 50 tries");
    assert_eq!(reply[0] & 0xc0, 0x40, "not a short header: {reply:02x?}");
    assert!(reply.len() >= 21 && reply.len() < 100, "{} bytes", reply.len());
}

/// ngtcp2's client (C, GnuTLS: a third QUIC and TLS stack), found or
/// installed (Debian's `ngtcp2-client`); `PEREGRINE_NGTCP2` names another.
fn ngtcp2() -> &'static Path {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    installed(
        &FOUND,
        Program {
            var: "PEREGRINE_NGTCP2",
            names: &["gtlsclient"],
            package: "ngtcp2-client",
        },
        "ngtcp2's client",
    )
}

#[test]
fn ngtcp2_downloads_the_same_bytes_from_dir_and_archive() {
    let pki = pki("ngtcp2");
    let (root, archive) = site("ngtcp2");
    for what in [&root, &archive] {
        let server = start(&["serve", what.to_str().unwrap()], &pki);
        let port = server.port().to_string();
        let dir = tempdir("h3-ngtcp2");
        let out = Command::new("timeout")
            .args(["--kill-after=5", "120"])
            .arg(ngtcp2())
            .args(["-q", "--exit-on-all-streams-close", "--download"])
            .arg(&dir)
            .args(["127.0.0.1", &port])
            .args(["/10m.bin", "/index.html", "/style.css"].map(|p| format!("https://localhost:{port}{p}")))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gtlsclient: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for name in ["10m.bin", "index.html", "style.css"] {
            let got = std::fs::read(dir.join(name)).unwrap();
            assert!(
                got == std::fs::read(root.join(name)).unwrap(),
                "{name} from {}",
                what.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_reload_hands_the_udp_sockets_over_and_http3_keeps_answering() {
    let pki = pki("reload");
    // As root, give root up: the next generation could then not join the
    // old sockets' SO_REUSEPORT group (another user) nor bind a port below
    // 1024, so it must be handed the sockets.
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let args: &[&str] = if root {
        &["hello", "--user", "nobody"]
    } else {
        &["hello"]
    };
    let server = start(args, &pki);
    assert_eq!(h3(server.port(), &[Req::Get("/", NONE)], "")[0].status, Ok(200));
    reload(server.child.id(), server.lines.as_ref().unwrap());
    // The new generation answers on the same UDP port (it was handed the
    // sockets: nothing was bound again).
    let answers = h3(server.port(), &[Req::Get("/", NONE), Req::Get("/x", NONE)], "");
    assert!(answers.iter().all(|a| a.status == Ok(200)), "{answers:?}");
}

/// Reloads while clients keep making small requests, each on a new
/// connection: every request is answered (a connection the old generation
/// accepted is finished by it, a new one goes to the new generation), and
/// every old generation ends: the process is back to the threads it had.
#[test]
fn reloads_during_small_http3_requests_answer_every_one_and_old_generations_end() {
    let pki = pki("reload-small");
    let server = start(&["hello"], &pki);
    let pid = server.child.id();
    let threads = || std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    assert_eq!(h3(server.port(), &[Req::Get("/", NONE)], "")[0].status, Ok(200));
    let before = threads();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let port = server.port();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let reqs: Vec<Req<'_>> = (0..10).map(|_| Req::Get("/", NONE)).collect();
                    let answers = h3(port, &reqs, "");
                    for a in &answers {
                        assert_eq!(a.status, Ok(200), "{answers:?}");
                        assert_eq!(a.body, b"Hello, World!");
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    let lines = server.lines.as_ref().unwrap();
    for _ in 0..6 {
        // Each reload while connections come and go: after one more has
        // been answered.
        let seen = done.load(std::sync::atomic::Ordering::Relaxed);
        test_support::wait_until("a connection answered", || {
            done.load(std::sync::atomic::Ordering::Relaxed) > seen
        });
        reload(pid, lines);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    // The old generations' workers (and the threads that wait for them)
    // end once their connections have: the hello answers are short.
    test_support::wait_until("the old generations to end", || threads() == before);
    assert_eq!(h3(server.port(), &[Req::Get("/", NONE)], "")[0].status, Ok(200));
}

/// A graceful shutdown lets a download in flight finish, byte for byte:
/// the connection closes (H3_NO_ERROR) once its last bytes are
/// acknowledged. It was closed as soon as the last bytes had been handed
/// to the transport, discarding what the client had not acknowledged yet:
/// the client got some 9.5 of the 10 MiB, then the close (3 runs of 3 on
/// 2026-11-24, without the relay). The relay slows the download so that
/// the signal comes while it is in flight; the shutdown timeout is long
/// enough not to cut it short on a slow machine.
#[test]
fn a_download_in_flight_across_a_graceful_shutdown_completes() {
    let pki = pki("shutdown-flight");
    let (root, _) = site("shutdown-flight");
    let mut server = start(&["serve", root.to_str().unwrap(), "--shutdown-timeout", "600"], &pki);
    let (relay, client) = download_under_way(server.port());
    test_support::process::signal(server.child.id(), "TERM");
    downloaded_whole(relay, client, "");
    // And the server has ended, with success.
    let ended = server.child.wait().unwrap();
    assert!(ended.success(), "{ended}");
}

/// A download in flight across a reload completes, byte for byte: the
/// old generation keeps its connection while the new one reads the same
/// UDP sockets and passes it the datagrams whose connection IDs it issued
/// (`quic::handover`). Before that, both generations read the sockets and
/// the new one took a good part of the client's acknowledgments (144 of
/// 313 in one run): the download crawled, or stalled until the client's
/// idle timeout; and once the old generation had handed its last bytes to
/// quinn-proto it closed the connection with some 0.5 MiB unacknowledged.
/// The shutdown timeout is long enough not to cut the old generation short
/// on a slow machine. With one worker, and with two.
#[test]
fn a_download_in_flight_across_a_reload_completes() {
    for workers in ["1", "2"] {
        download_across_a_reload(workers);
    }
}

fn download_across_a_reload(workers: &str) {
    let pki = pki(&format!("reload-flight-{workers}"));
    let (root, _) = site(&format!("reload-flight-{workers}"));
    let args = [
        "serve",
        root.to_str().unwrap(),
        "--workers",
        workers,
        "--shutdown-timeout",
        "600",
        "--log-level",
        "debug",
    ];
    let mut server = start(&args, &pki);
    // Reload once the download is under way.
    let (relay, client) = download_under_way(server.port());
    reload(server.child.id(), server.lines.as_ref().unwrap());
    downloaded_whole(relay, client, &format!("{workers} workers: "));
    // And the new generation answers new connections.
    assert_eq!(
        h3(server.port(), &[Req::Get("/index.html", NONE)], "")[0].status,
        Ok(200)
    );
    // The download's datagrams went through the new generation (tag 1) to
    // the old one (tag 0): each endpoint says how many as it ends.
    test_support::process::signal(server.child.id(), "TERM");
    assert!(server.child.wait().unwrap().success());
    let (mut passed, mut received) = (0, 0);
    for line in server.lines.take().unwrap().iter() {
        let Some(rest) = line.split("QUIC endpoint ").nth(1) else {
            continue;
        };
        let words: Vec<&str> = rest.split([' ', ':', ',']).filter(|w| !w.is_empty()).collect();
        // "0 of generation 1: 378 datagrams passed to other endpoints, 0 received from them"
        let number = |i: usize| words[i].parse::<u64>().unwrap();
        match number(3) {
            1 => passed += number(4),
            0 => received += number(10),
            _ => {}
        }
    }
    assert!(
        passed > 0 && received > 0,
        "{workers} workers: passed {passed}, received {received}"
    );
}

#[test]
fn a_client_whose_address_changes_keeps_its_connection() {
    // Two workers: the new source port hashes to either; the packets are
    // steered by connection ID to the worker that holds the connection,
    // which lets the client migrate (RFC 9000 §9).
    let pki = pki("rebind");
    let (root, _) = site("rebind");
    let mut server = start(&["serve", root.to_str().unwrap()], &pki);
    for rebind_after in [5, 40, 200] {
        let relay = Relay::new(server.port(), 0, 0, Some(rebind_after));
        let mut reqs = vec![Req::Get("/1m.bin", NONE)];
        reqs.extend((0..10).map(|_| Req::Get("/index.html", NONE)));
        let answers = h3(relay.addr.port(), &reqs, "");
        relay.finish();
        assert!(
            answers[0].status == Ok(200) && answers[0].body == pattern(1 << 20),
            "rebound after {rebind_after}: {:?}",
            answers[0].status
        );
        assert!(answers[1..].iter().all(|a| a.status == Ok(200)));
    }
    assert!(server.is_alive());
}

/// Three sites (two directories, an archive with two inner hosts), each
/// with its own certificate, over HTTP/3: aioquic checks each name's
/// certificate against the test CA and gets that site's content; a name
/// no site has gets no certificate (the handshake fails).
#[test]
fn each_site_gets_its_content_and_certificate_over_http3() {
    let dir = tempdir("h3-sites");
    let ca = test_support::pki::Pki::new("h3-sites");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.ca_pem()).unwrap();
    let mut sites = String::from("version = 1\n");
    for (name, body) in [
        ("a", "site A"),
        ("b", "site B"),
        ("c-main", "c main"),
        ("c-inner", "c inner"),
    ] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("index.html"), format!("{body}\n")).unwrap();
    }
    let packed = common::peregrine()
        .arg("pack")
        .arg(dir.join("c-main"))
        .arg("--host")
        .arg(format!("inner.test={}", dir.join("c-inner").display()))
        .arg("-o")
        .arg(dir.join("c.prg"))
        .output()
        .unwrap();
    assert!(packed.status.success());
    for (stem, names, root) in [
        ("a", &["a.test", "*.a.test"][..], "a"),
        ("b", &["b.test"][..], "b"),
        ("c", &["c.test", "inner.test"][..], "c.prg"),
    ] {
        let (cert, key, _) = ca.issue(stem, names);
        sites += &format!(
            "[[site]]\nnames = {names:?}\nroot = {:?}\ntls-cert = [{cert:?}]\ntls-key = [{key:?}]\n",
            dir.join(root)
        );
    }
    let config = dir.join("peregrine.toml");
    std::fs::write(&config, sites).unwrap();
    let server = test_support::process::Process::spawn(
        common::peregrine()
            .args(["serve", "--bind", "127.0.0.1:0", "--workers", "2", "--config"])
            .arg(&config),
    );
    let port: u16 = test_support::process::last_addr(&server.listening())
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let extra = |name: &str| {
        format!(
            "\"server_name\": {}, \"cafile\": {},",
            json_str(name),
            json_str(ca_file.to_str().unwrap())
        )
    };
    for (name, body) in [
        ("a.test", "site A\n"),
        ("x.a.test", "site A\n"),
        ("b.test", "site B\n"),
        ("c.test", "c main\n"),
        ("inner.test", "c inner\n"),
    ] {
        let answers = h3(port, &[Req::Get("/", NONE)], &extra(name));
        assert_eq!(answers[0].status, Ok(200), "{name}");
        assert_eq!(String::from_utf8_lossy(&answers[0].body), body, "{name}");
    }
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {port}, \"out\": {}, {} \"timeout\": 20, \"requests\": [{{\"method\": \"GET\", \"path\": \"/\", \"headers\": []}}]}}",
        json_str(dir.to_str().unwrap()),
        extra("nobody.test")
    );
    let refused = run_client(&spec);
    assert!(!refused.status.success(), "no site is nobody.test: {}", refused.stdout);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
