//! Compression of proxied answers on the fly (`Proxy::encode`, Caddy's
//! `encode`, nginx's `gzip on`): a scripted upstream answers in every
//! framing (whole, chunked, of known length, until its close) and in the
//! cases that must pass untouched (short, an image, already encoded,
//! partial, `no-transform`, setting a cookie); raw HTTP/1.1 clients,
//! curl over HTTP/1.1 and HTTP/2, and Python's `http.client` decode what
//! they get. An event stream still arrives event by event compressed.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use common::{status_of, Client, PATIENCE};
use peregrine::proxy::{Encode, Proxy, Upstream};
use peregrine::{Router, Running, Server};

/// Text worth compressing: `n` bytes of JSON-ish lines.
fn text_of(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut i = 0u32;
    while out.len() < n {
        out.extend_from_slice(format!("{{\"id\": {i}, \"name\": \"item {}\", \"ok\": true}}\n", i % 97).as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

const WHOLE: usize = 6_000;
const BIG: usize = 300_000;

/// The scripted upstream: the answer depends on the path's last segment;
/// `/sse` sends its second event when the test sends on `go`.
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
        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
        let last = path.rsplit('/').next().unwrap_or("").to_owned();
        let fixed = |fields: &str, body: &[u8]| {
            let mut a = format!("HTTP/1.1 200 OK\r\n{fields}Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            a.extend_from_slice(body);
            a
        };
        let answer: Vec<u8> = match last.as_str() {
            "json" => fixed(
                "Content-Type: application/json\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\n",
                &text_of(WHOLE),
            ),
            "biglen" => fixed("Content-Type: text/html; charset=utf-8\r\n", &text_of(BIG)),
            "bigchunked" => {
                let mut a =
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for piece in text_of(BIG).chunks(7_000) {
                    a.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    a.extend_from_slice(piece);
                    a.extend_from_slice(b"\r\n");
                }
                a.extend_from_slice(b"0\r\n\r\n");
                a
            }
            "close" => {
                let _ = out.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n");
                let _ = out.write_all(&text_of(BIG));
                return;
            }
            "small" => fixed("Content-Type: text/plain\r\n", b"short text"),
            "png" => fixed("Content-Type: image/png\r\n", &text_of(WHOLE)),
            "encoded" => fixed(
                "Content-Type: text/plain\r\nContent-Encoding: gzip\r\n",
                &text_of(WHOLE),
            ),
            "identity" => fixed(
                "Content-Type: text/plain\r\nContent-Encoding: identity\r\n",
                &text_of(WHOLE),
            ),
            "partial" => {
                let body = text_of(WHOLE);
                let mut a = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-{}/99999\r\n\
                     Content-Length: {}\r\n\r\n",
                    body.len() - 1,
                    body.len()
                )
                .into_bytes();
                a.extend_from_slice(&body);
                a
            }
            "notransform" => fixed(
                "Content-Type: text/plain\r\nCache-Control: public, no-transform\r\n",
                &text_of(WHOLE),
            ),
            "cookie" => fixed("Content-Type: text/html\r\nSet-Cookie: s=secret\r\n", &text_of(WHOLE)),
            "vary" => fixed(
                "Content-Type: text/plain\r\nVary: Accept-Encoding, Cookie\r\n",
                &text_of(WHOLE),
            ),
            "sse" => {
                let _ = out.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n",
                );
                let _ = out.flush();
                let _ = go.lock().unwrap().recv_timeout(PATIENCE);
                b"9\r\ndata: 2\n\n\r\n0\r\n\r\n".to_vec()
            }
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        let answer = match (
            head.starts_with("HEAD "),
            answer.windows(4).position(|w| w == b"\r\n\r\n"),
        ) {
            (true, Some(end)) => answer[..end + 4].to_vec(),
            _ => answer,
        };
        if out.write_all(&answer).is_err() {
            return;
        }
    }
}

/// A server of one worker: `/api/` compresses, `/plain/` does not.
fn server(up: SocketAddr) -> Running {
    let url = format!("http://{up}");
    let encoded = Proxy::new(Upstream::parse(&url).unwrap().prefix("/api/")).encode(Encode::new());
    let plain = Proxy::new(Upstream::parse(&url).unwrap().prefix("/plain/"));
    let router = Router::new()
        .route("GET", "/api/*rest", encoded.clone())
        .route("HEAD", "/api/*rest", encoded)
        .route("GET", "/plain/*rest", plain);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(router)
        .expect("server starts")
}

/// A raw HTTP/1.1 answer: its head's fields (lowercase names) and its
/// body, de-chunked when chunked.
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

fn parse(raw: &[u8]) -> Answer {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a whole head") + 4;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let fields: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect();
    let chunked = fields
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(&raw[end..]).0
    } else {
        raw[end..].to_vec()
    };
    Answer {
        status: status_of(raw),
        fields,
        body,
    }
}

/// The data of the whole chunks in `raw`, and whether the last chunk came.
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

fn get(addr: SocketAddr, method: &str, target: &str, accept: Option<&str>) -> Answer {
    let mut c = Client::connect(addr);
    let accept = accept.map_or(String::new(), |a| format!("Accept-Encoding: {a}\r\n"));
    c.send(format!("{method} {target} HTTP/1.1\r\nHost: t\r\n{accept}Connection: close\r\n\r\n").as_bytes());
    parse(&c.read_to_close())
}

/// Decodes `data` in `coding`, all of it or what came of it so far.
fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => {
            let mut d = flate2::write::GzDecoder::new(Vec::new());
            let _ = d.write_all(data);
            let _ = d.flush();
            d.get_ref().clone()
        }
        "zstd" => {
            let mut d = zstd::stream::write::Decoder::new(Vec::new()).unwrap();
            let _ = d.write_all(data);
            let _ = d.flush();
            d.get_ref().clone()
        }
        other => panic!("{other}"),
    }
}

#[test]
fn compressible_answers_are_compressed_in_every_framing_with_every_coding() {
    let (up, _go) = upstream();
    let server = server(up);
    for coding in ["gzip", "zstd"] {
        for (path, want) in [
            ("/api/json", text_of(WHOLE)),
            ("/api/biglen", text_of(BIG)),
            ("/api/bigchunked", text_of(BIG)),
            ("/api/close", text_of(BIG)),
        ] {
            let a = get(server.local_addr(), "GET", path, Some(coding));
            let what = format!("{coding} {path}: {:?}", a.fields);
            assert_eq!(a.status, 200, "{what}");
            assert_eq!(a.field("content-encoding"), Some(coding), "{what}");
            assert_eq!(a.field("vary"), Some("Accept-Encoding"), "{what}");
            assert!(a.field("accept-ranges").is_none(), "{what}");
            if path == "/api/json" {
                // Read whole before it was relayed: compressed whole, with
                // the compressed length; its strong ETag made weak.
                assert_eq!(a.field("etag"), Some("W/\"v1\""), "{what}");
                assert_eq!(
                    a.field("content-length"),
                    Some(a.body.len().to_string().as_str()),
                    "{what}"
                );
            } else {
                // Streamed: the upstream's length is not the answer's.
                assert_eq!(a.field("transfer-encoding"), Some("chunked"), "{what}");
                assert!(a.field("content-length").is_none(), "{what}");
            }
            assert!(a.body.len() < want.len() / 3, "{what}: {} bytes", a.body.len());
            assert!(
                decode(coding, &a.body) == want,
                "{what}: decodes to the upstream's body"
            );
        }
    }
}

#[test]
fn answers_that_must_not_be_compressed_are_relayed_as_they_came() {
    let (up, _go) = upstream();
    let server = server(up);
    for (path, why) in [
        ("/api/small", "shorter than the minimum"),
        ("/api/png", "not a compressible type"),
        ("/api/partial", "a 206"),
        ("/api/notransform", "no-transform"),
        ("/api/cookie", "sets a cookie (BREACH)"),
    ] {
        let a = get(server.local_addr(), "GET", path, Some("gzip, zstd, br"));
        assert!(a.field("content-encoding").is_none(), "{path}: {why}: {:?}", a.fields);
        assert!(a.field("vary").is_none(), "{path}: {why}: {:?}", a.fields);
        assert!(a.field("content-length").is_some(), "{path}: {why}: {:?}", a.fields);
    }
    // Already encoded: the upstream's coding, untouched.
    let a = get(server.local_addr(), "GET", "/api/encoded", Some("zstd, gzip"));
    assert_eq!(a.field("content-encoding"), Some("gzip"), "{:?}", a.fields);
    assert_eq!(a.body, text_of(WHOLE));
    // Any Content-Encoding field, `identity` too, is left alone (nginx):
    // never `identity, gzip`.
    let a = get(server.local_addr(), "GET", "/api/identity", Some("gzip"));
    let codings: Vec<_> = a
        .fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-encoding"))
        .collect();
    assert_eq!(codings.len(), 1, "{:?}", a.fields);
    assert_eq!(a.field("content-encoding"), Some("identity"), "{:?}", a.fields);
    assert_eq!(a.body, text_of(WHOLE));
    // A client that accepts no coding gets the identity answer, whose
    // cache key still varies; its ETag stays strong.
    for accept in [None, Some("identity"), Some("gzip;q=0, zstd;q=0, br;q=0")] {
        let a = get(server.local_addr(), "GET", "/api/json", accept);
        assert!(a.field("content-encoding").is_none(), "{accept:?}: {:?}", a.fields);
        assert_eq!(a.field("vary"), Some("Accept-Encoding"), "{accept:?}: {:?}", a.fields);
        assert_eq!(a.field("etag"), Some("\"v1\""), "{accept:?}: {:?}", a.fields);
        assert_eq!(a.field("accept-ranges"), Some("bytes"), "{accept:?}: {:?}", a.fields);
        assert_eq!(a.body, text_of(WHOLE), "{accept:?}");
    }
    // A route that does not compress: as the upstream said.
    let a = get(server.local_addr(), "GET", "/plain/json", Some("gzip"));
    assert!(
        a.field("content-encoding").is_none() && a.field("vary").is_none(),
        "{:?}",
        a.fields
    );
    assert_eq!(a.body, text_of(WHOLE));
    // The upstream's own Vary already names Accept-Encoding: not twice.
    let a = get(server.local_addr(), "GET", "/api/vary", Some("gzip"));
    assert_eq!(a.field("content-encoding"), Some("gzip"));
    let varies: Vec<&str> = a
        .fields
        .iter()
        .filter(|(n, _)| n == "vary")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(varies, ["Accept-Encoding, Cookie"], "{:?}", a.fields);
}

#[test]
fn a_head_answer_has_the_fields_its_get_would() {
    let (up, _go) = upstream();
    let server = server(up);
    let a = get(server.local_addr(), "HEAD", "/api/biglen", Some("gzip"));
    assert_eq!(a.status, 200);
    assert_eq!(a.field("content-encoding"), Some("gzip"), "{:?}", a.fields);
    assert_eq!(a.field("vary"), Some("Accept-Encoding"), "{:?}", a.fields);
    assert_ne!(
        a.field("content-length"),
        Some(BIG.to_string().as_str()),
        "{:?}",
        a.fields
    );
    assert!(a.body.is_empty());
}

/// The upstream sends event 2 only after the client decoded event 1: a
/// compressor that waited for more input (or the end) would deadlock.
#[test]
fn a_compressed_event_stream_arrives_event_by_event() {
    let (up, go) = upstream();
    let server = server(up);
    for coding in ["gzip", "zstd"] {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(format!("GET /api/sse HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {coding}\r\n\r\n").as_bytes())
            .unwrap();
        let mut raw = Vec::new();
        let decoded = |raw: &[u8]| -> (String, bool) {
            let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                return (String::new(), false);
            };
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            assert!(head.contains(&format!("content-encoding: {coding}")), "{head}");
            let (data, done) = dechunk(&raw[end + 4..]);
            (String::from_utf8_lossy(&decode(coding, &data)).into_owned(), done)
        };
        while !decoded(&raw).0.contains("data: 1\n\n") {
            let mut b = [0; 4096];
            let n = s.read(&mut b).expect("event 1 within PATIENCE, compressed");
            assert!(n > 0, "{coding}: closed early");
            raw.extend_from_slice(&b[..n]);
        }
        assert!(!decoded(&raw).0.contains("data: 2"), "{coding}");
        go.send(()).unwrap();
        loop {
            let (text, done) = decoded(&raw);
            if done {
                assert_eq!(text, "data: 1\n\ndata: 2\n\n", "{coding}");
                break;
            }
            let mut b = [0; 4096];
            let n = s.read(&mut b).expect("event 2 and the end within PATIENCE");
            assert!(n > 0, "{coding}: closed early");
            raw.extend_from_slice(&b[..n]);
        }
    }
}

fn have(program: &str, arg: &str) -> bool {
    std::process::Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// curl's `--compressed` offers its codings (7.88: deflate, gzip, br,
/// zstd) and decodes: the same bytes over HTTP/1.1 and HTTP/2.
#[test]
fn curl_decodes_compressed_answers_over_http1_and_http2() {
    if !have("curl", "--version") {
        eprintln!("skipped: no curl");
        return;
    }
    let (up, _go) = upstream();
    let server = server(up);
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        for path in ["/api/json", "/api/bigchunked", "/api/biglen"] {
            let out = std::process::Command::new("curl")
                .args(["-s", "--compressed", "-D", "/dev/stderr", version])
                .arg(format!("http://{}{path}", server.local_addr()))
                .output()
                .unwrap();
            let head = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
            assert!(out.status.success(), "{version} {path}: {head}");
            assert!(head.contains("content-encoding: "), "{version} {path}: {head}");
            assert!(head.contains("vary: accept-encoding"), "{version} {path}: {head}");
            if version.contains("http2") {
                assert!(head.starts_with("http/2 200"), "{head}");
            }
            let want = if path == "/api/json" {
                text_of(WHOLE)
            } else {
                text_of(BIG)
            };
            assert!(
                out.stdout == want,
                "{version} {path}: {} bytes decoded",
                out.stdout.len()
            );
        }
    }
}

/// Python's `http.client` asks for gzip and decodes with `gzip`.
#[test]
fn a_python_client_decodes_a_gzip_answer() {
    if !have("python3", "--version") {
        eprintln!("skipped: no python3");
        return;
    }
    let (up, _go) = upstream();
    let server = server(up);
    let script = r#"
import gzip, hashlib, http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
for path in ("/api/json", "/api/bigchunked"):
    c.request("GET", path, headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    body = r.read()
    assert r.getheader("Content-Encoding") == "gzip", r.getheaders()
    print(path, len(body), hashlib.sha256(gzip.decompress(body)).hexdigest())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &server.local_addr().port().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let digest = |b: &[u8]| {
        let d = ring_digest(b);
        d.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("/api/json ") && lines[0].ends_with(&digest(&text_of(WHOLE))),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("/api/bigchunked ") && lines[1].ends_with(&digest(&text_of(BIG))),
        "{stdout}"
    );
}

fn ring_digest(b: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b)
        .as_ref()
        .to_vec()
}

/// aioquic's Python (`crates/engine/tests/http3.rs` says how it is found
/// or installed).
fn aioquic_python() -> std::path::PathBuf {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv");
    test_support::install::aioquic_python(&venv).unwrap_or_else(|e| panic!("aioquic is needed: {e}"))
}

/// Over HTTP/3 (aioquic's client, an implementation independent of
/// ours) a proxied answer is compressed as over HTTP/1.1 and 2: the coding
/// the client takes (it offers br, which `encode` does not make: gzip),
/// `Vary: Accept-Encoding`, the upstream's bytes once decoded; and an
/// answer that sets a cookie is relayed as it came.
#[test]
fn a_proxied_answer_is_compressed_over_http3_unless_it_sets_a_cookie() {
    let (up, _go) = upstream();
    let dir = std::env::temp_dir().join(format!("peregrine-e-encode-h3-{}", std::process::id()));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let cert = test_support::pki::SelfSigned::new("encode-h3", &["localhost"]);
    let tls = peregrine::TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap();
    let encoded = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap().prefix("/api/")).encode(Encode::new());
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .start(Router::new().route("GET", "/api/*rest", encoded))
        .expect("server starts");
    let accept = "[[\"accept-encoding\", \"gzip, br\"]]";
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 30, \"requests\": [\
         {{\"path\": \"/api/json\", \"headers\": {accept}}}, {{\"path\": \"/api/biglen\", \"headers\": {accept}}}, \
         {{\"path\": \"/api/cookie\", \"headers\": {accept}}}]}}",
        server.local_addr().port(),
        out.display()
    );
    let done = test_support::process::spawn_h3_client(&aioquic_python(), &spec, 60, true)
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let read = |i: usize| {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        let body = std::fs::read(out.join(format!("{i}.body"))).unwrap();
        (head, body)
    };
    for (i, want) in [(0, text_of(WHOLE)), (1, text_of(BIG))] {
        let (head, body) = read(i);
        assert!(head.starts_with("200\n"), "{head}");
        assert!(head.contains("content-encoding: gzip\n"), "{head}");
        assert!(head.contains("vary: Accept-Encoding\n"), "{head}");
        assert!(body.len() < want.len() / 3, "{head}: {} bytes", body.len());
        assert!(decode("gzip", &body) == want, "{head}: decodes to the upstream's body");
    }
    let (head, body) = read(2);
    assert!(head.starts_with("200\n"), "{head}");
    assert!(head.contains("set-cookie: s=secret\n"), "{head}");
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(!head.contains("vary"), "{head}");
    assert_eq!(body, text_of(WHOLE));
    let _ = std::fs::remove_dir_all(&dir);
}
