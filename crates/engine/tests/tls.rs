//! TLS end to end: a throwaway CA and certificates (`test_support::pki`), a
//! rustls client over loopback. Versions, ALPN, pipelining, large bodies,
//! bad clients, SNI, reload, the HTTPS redirect and HSTS.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, PATIENCE};
use peregrine::{Body, FileRange, Limits, Reply, Request, Response, Running, Server, TlsConfig};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};
use test_support::pki::{self, Pki, Tls};

/// A client trusting `pki`'s CA, for `versions`, offering HTTP/1.1.
fn client_config(pki: &Pki, versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<ClientConfig> {
    let mut config = pki.client_config(versions);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

fn connect(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> Client<Tls> {
    Client::over(pki::connect(addr, config, name))
}

fn start(tls: TlsConfig, handler: impl peregrine::Handler) -> Running {
    start_with(Limits::default(), tls, handler)
}

fn start_with(limits: Limits, tls: TlsConfig, handler: impl peregrine::Handler) -> Running {
    Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .limits(limits)
        .start(handler)
        .expect("server starts")
}

/// A server for `localhost` (one worker) with a certificate from a fresh
/// `Pki` named `tag`.
fn localhost(tag: &str, handler: impl peregrine::Handler) -> (Pki, Running) {
    let pki = Pki::new(tag);
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let server = start(TlsConfig::from_pem_files(&cert, &key).unwrap(), handler);
    (pki, server)
}

/// A client of `server` as `localhost`, speaking TLS `version` only.
fn connect_localhost(pki: &Pki, server: &Running, version: &'static rustls::SupportedProtocolVersion) -> Client<Tls> {
    connect(server.local_addr(), &client_config(pki, &[version]), "localhost")
}

fn echo_path(req: &Request<'_>) -> Response {
    Response::text(format!("path {}", req.target()))
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

#[test]
fn get_over_tls13_negotiates_http11() {
    let (pki, server) = localhost("v13", echo_path);
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    assert_eq!(c.stream.conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
    assert_eq!(c.stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let r = c.send(&get("/v13")).response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "path /v13");
    // Keep-alive: a second request on the same session.
    assert_eq!(c.send(&get("/again")).response().text(), "path /again");
}

/// A client whose only ALPN protocol is `http/1.0` is served HTTP/1.x
/// (nginx negotiates it too), not refused with alert 120; a 1.0 request
/// gets a 1.0 answer.
#[test]
fn a_client_offering_only_alpn_http10_is_served() {
    let (pki, server) = localhost("alpn-h10", echo_path);
    let mut config = pki.client_config(&[&rustls::version::TLS13]);
    config.alpn_protocols = vec![b"http/1.0".to_vec()];
    let mut c = connect(server.local_addr(), &Arc::new(config), "localhost");
    let r = c.send(b"GET /ten HTTP/1.0\r\nHost: localhost\r\n\r\n").response();
    assert_eq!(c.stream.conn.alpn_protocol(), Some(&b"http/1.0"[..]));
    assert_eq!((r.status, r.text()), (200, "path /ten".to_string()));
}

/// HTTP/2 over TLS is what ALPN chose, never prior knowledge (RFC 9113
/// §3.3): a client that negotiated `http/1.1` and then sends the HTTP/2
/// preface gets no HTTP/2 frames (an HTTP/1.1 error, or a close).
#[test]
fn the_h2_preface_after_alpn_http11_is_not_answered_with_http2() {
    use std::io::{Read, Write};
    let (pki, server) = localhost("alpn-h1-preface", echo_path);
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    c.stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    assert_eq!(c.stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut got = Vec::new();
    let _ = c.stream.read_to_end(&mut got); // a close without close_notify is fine
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 "),
        "answered {:?}",
        String::from_utf8_lossy(&got[..got.len().min(64)])
    );
}

/// A `Connection: close` answer ends with close_notify (RFC 8446 §6.1),
/// queued behind the answer's last record so that both leave in one write
/// (`flush_tls`): the client reads the whole body, then a clean end
/// (rustls' `read_to_end` is `Ok` only after close_notify), for a short
/// answer and for one larger than rustls' outgoing buffer, over TLS 1.3
/// and 1.2.
#[test]
fn a_closing_answer_ends_with_close_notify_after_its_last_byte() {
    const BIG: usize = 700 * 1024;
    let (pki, server) = localhost("close-notify", |req: &Request<'_>| {
        if req.target() == "/big" {
            Response::text("x".repeat(BIG))
        } else {
            Response::text("short")
        }
    });
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        for (path, len) in [("/short", 5), ("/big", BIG)] {
            let mut c = connect_localhost(&pki, &server, version);
            let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            c.stream.write_all(request.as_bytes()).unwrap();
            let mut got = Vec::new();
            c.stream
                .read_to_end(&mut got)
                .unwrap_or_else(|e| panic!("{path} over {version:?}: no clean end ({e}) after {} bytes", got.len()));
            assert!(got.starts_with(b"HTTP/1.1 200 "), "{path}");
            let head = got.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
            assert_eq!(got.len() - head, len, "{path} over {version:?}: the whole body");
        }
    }
}

#[test]
fn get_over_tls12_negotiates_http11() {
    let (pki, server) = localhost("v12", echo_path);
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS12);
    assert_eq!(c.stream.conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(c.stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let r = c.send(&get("/v12")).response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "path /v12");
}

#[test]
fn pipelined_requests_over_tls_are_answered_in_order() {
    let (pki, server) = localhost("pipe", echo_path);
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    let mut batch = Vec::new();
    for i in 0..32 {
        batch.extend_from_slice(&get(&format!("/{i}")));
    }
    c.send(&batch);
    for i in 0..32 {
        assert_eq!(c.response().text(), format!("path /{i}"));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn large_bodies_from_files_and_memory_arrive_intact() {
    let pki = Pki::new("large");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let file_bytes = pattern(3 * 1024 * 1024 + 12345, 7);
    let file_path = pki.dir().join("big.bin");
    std::fs::write(&file_path, &file_bytes).unwrap();
    let mem_bytes = Arc::new(pattern(2 * 1024 * 1024 + 1, 3));
    let (fp, mb) = (file_path.clone(), mem_bytes.clone());
    let handler = move |req: &Request<'_>| -> Response {
        match req.path() {
            "/file" => {
                let range = FileRange::whole(std::fs::File::open(&fp).unwrap()).unwrap();
                Response::bytes("application/octet-stream", Body::File(range))
            }
            "/bytes" => Response::bytes("application/octet-stream", mb.as_ref().clone()),
            "/stream" => {
                let chunks = (0..64).map(|i| pattern(40_000, i));
                Response::bytes("application/octet-stream", Body::Stream(Box::new(chunks)))
            }
            _ => Response::error(404),
        }
    };
    let server = start(TlsConfig::from_pem_files(&cert, &key).unwrap(), handler);
    for versions in [&[&rustls::version::TLS13], &[&rustls::version::TLS12]] {
        let mut c = connect(server.local_addr(), &client_config(&pki, versions), "localhost");
        // Pipelined behind each other: each body must end where it should.
        let mut batch = get("/file");
        batch.extend_from_slice(&get("/bytes"));
        batch.extend_from_slice(&get("/stream"));
        c.send(&batch);
        let r = c.response();
        assert_eq!(r.status, 200);
        assert!(r.body == file_bytes, "file body differs ({} bytes)", r.body.len());
        let r = c.response();
        assert!(r.body == *mem_bytes, "memory body differs ({} bytes)", r.body.len());
        let r = c.response();
        let want: Vec<u8> = (0..64).flat_map(|i| pattern(40_000, i)).collect();
        assert!(r.body == want, "streamed body differs ({} bytes)", r.body.len());
    }
}

/// Reads one answer of `body_len` body bytes over TLS 1.3 from the raw
/// socket, and counts the application-data records it came in.
fn records_of_one_answer(c: &mut Client<Tls>, request: &[u8], body_len: usize) -> usize {
    c.stream.conn.writer().write_all(request).unwrap();
    while c.stream.conn.wants_write() {
        c.stream.conn.write_tls(&mut c.stream.sock).unwrap();
    }
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    let mut records = 0;
    let mut buf = [0u8; 65536];
    loop {
        let n = c.stream.sock.read(&mut buf).expect("the answer comes");
        assert!(n > 0, "closed after {} bytes of the answer", plain.len());
        wire.extend_from_slice(&buf[..n]);
        // Whole records only (RFC 8446 §5.1: type, version, length).
        let mut at = 0;
        while wire.len() >= at + 5 {
            let len = usize::from(u16::from_be_bytes([wire[at + 3], wire[at + 4]]));
            if wire.len() < at + 5 + len {
                break;
            }
            assert_eq!(wire[at], 23, "application data");
            records += 1;
            // One record at a time into the client, its plaintext out.
            let mut record = &wire[at..at + 5 + len];
            while !record.is_empty() {
                c.stream.conn.read_tls(&mut record).unwrap();
            }
            c.stream.conn.process_new_packets().unwrap();
            let _ = c.stream.conn.reader().read_to_end(&mut plain);
            at += 5 + len;
        }
        wire.drain(..at);
        if let Some(end) = plain.windows(4).position(|w| w == b"\r\n\r\n") {
            if plain.len() == end + 4 + body_len {
                assert!(wire.is_empty(), "nothing after the answer");
                return records;
            }
        }
    }
}

/// One keep-alive answer is as few TLS records as its bytes need: the
/// head shares a record with its body, whether the body was copied next
/// to it (small), is a shared buffer beside it (over 16 KiB), or is read
/// from its file (sendfile cannot carry records made in user space).
/// Each record more is one more AEAD seal and 22 more bytes.
#[test]
fn a_head_and_its_body_share_tls_records() {
    let pki = Pki::new("records");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let file_path = pki.dir().join("40k.bin");
    std::fs::write(&file_path, pattern(40_000, 5)).unwrap();
    let fp = file_path.clone();
    let server = start(
        TlsConfig::from_pem_files(&cert, &key).unwrap(),
        move |req: &Request<'_>| match req.path() {
            "/17" => Response::bytes("text/plain", pattern(17, 1)),
            "/20k" => Response::bytes("application/octet-stream", pattern(20_000, 2)),
            "/file40k" => {
                let range = FileRange::whole(std::fs::File::open(&fp).unwrap()).unwrap();
                Response::bytes("application/octet-stream", Body::File(range))
            }
            _ => Response::text("first"),
        },
    );
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    // The session tickets come before the first answer: out of the way.
    assert_eq!(c.send(&get("/")).response().text(), "first");
    // 16,384 bytes of plaintext at most per record (RFC 8446 §5.1).
    assert_eq!(records_of_one_answer(&mut c, &get("/17"), 17), 1);
    assert_eq!(records_of_one_answer(&mut c, &get("/20k"), 20_000), 2);
    assert_eq!(records_of_one_answer(&mut c, &get("/file40k"), 40_000), 3);
}

/// The transport's fields (HSTS here) are left out of an answer whose
/// header block sets them, and only of it, however the blocks alternate
/// and whether they are kept or built anew for each answer (the verdict
/// for a block is remembered per thread: `Response::sets_lines`).
#[test]
fn a_header_block_setting_hsts_keeps_its_own_and_no_other_block_loses_the_default() {
    let pki = Pki::new("hsts-block");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let tls = TlsConfig::from_pem_files(&cert, &key)
        .unwrap()
        .hsts(Duration::from_secs(31_536_000));
    let own = peregrine::HeaderBlock::new(&[("Strict-Transport-Security", "max-age=5"), ("X-A", "a")]).unwrap();
    let other = peregrine::HeaderBlock::new(&[("X-B", "b")]).unwrap();
    let server = start(tls, move |req: &Request<'_>| match req.path() {
        "/own" => Response::new(200).with_header_block(own.clone()),
        "/other" => Response::new(200).with_header_block(other.clone()),
        "/own-new" => Response::new(200)
            .with_header_block(peregrine::HeaderBlock::new(&[("strict-transport-security", "max-age=7")]).unwrap()),
        "/other-new" => Response::new(200).with_header_block(peregrine::HeaderBlock::new(&[("X-C", "c")]).unwrap()),
        _ => Response::text("none"),
    });
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    let mut hsts = |path: &str| {
        let r = c.send(&get(path)).response();
        assert_eq!(r.status, 200, "{path}");
        let values: Vec<String> = (r.headers.iter())
            .filter(|(n, _)| n.eq_ignore_ascii_case("strict-transport-security"))
            .map(|(_, v)| v.clone())
            .collect();
        values.join(", ")
    };
    for _ in 0..3 {
        assert_eq!(hsts("/own"), "max-age=5");
        assert_eq!(hsts("/own"), "max-age=5");
        assert_eq!(hsts("/other"), "max-age=31536000");
        assert_eq!(hsts("/own-new"), "max-age=7");
        assert_eq!(hsts("/other-new"), "max-age=31536000");
        assert_eq!(hsts("/other-new"), "max-age=31536000");
        assert_eq!(hsts("/own-new"), "max-age=7");
        assert_eq!(hsts("/"), "max-age=31536000");
    }
}

#[test]
fn request_bodies_arrive_over_tls() {
    let (pki, server) = localhost("body", |req: &Request<'_>| {
        Response::text(format!(
            "{} bytes, sum {}",
            req.body().len(),
            req.body().iter().map(|&b| b as u64).sum::<u64>()
        ))
    });
    let body = pattern(200_000, 9);
    let sum: u64 = body.iter().map(|&b| b as u64).sum();
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    let mut req = format!(
        "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    assert_eq!(c.send(&req).response().text(), format!("200000 bytes, sum {sum}"));
}

#[test]
fn deferred_answers_go_out_over_tls() {
    let (pki, server) = localhost("defer", |req: &Request<'_>| {
        let responder = req.defer();
        std::thread::spawn(move || responder.send(Response::text("later")));
        Reply::Later
    });
    let mut c = connect_localhost(&pki, &server, &rustls::version::TLS13);
    let mut batch = get("/a");
    batch.extend_from_slice(&get("/b"));
    c.send(&batch);
    assert_eq!(c.response().text(), "later");
    assert_eq!(c.response().text(), "later");
}

/// Reads from a raw socket until the server closes it; returns the bytes.
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
}

#[test]
fn bad_clients_are_closed_and_others_still_served() {
    let (pki, server) = localhost("bad", echo_path);
    let addr = server.local_addr();
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    // A keep-alive client that stays connected through all of it.
    let mut steady = connect(addr, &config, "localhost");
    assert_eq!(steady.send(&get("/1")).response().text(), "path /1");

    // Plaintext HTTP sent to the TLS port: a plain 400 that says why (as
    // nginx answers), then the connection closes.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(&get("/plain")).unwrap();
    let got = String::from_utf8(read_until_closed(&mut plain)).unwrap();
    assert!(got.starts_with("HTTP/1.1 400 "), "{got:?}");
    assert!(
        got.ends_with("This port speaks HTTPS: use https:// to reach it.\n"),
        "{got:?}"
    );

    // A handshake record whose contents are garbage.
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(b"\x16\x03\x01\x00\x08garbage!").unwrap();
    read_until_closed(&mut garbage);

    // A record header promising more than ever comes, then the client's FIN.
    let mut truncated = TcpStream::connect(addr).unwrap();
    truncated.write_all(b"\x16\x03\x01\x40\x00\x01\x00").unwrap();
    truncated.shutdown(std::net::Shutdown::Write).unwrap();
    read_until_closed(&mut truncated);

    // A session cut in the middle of an application-data record.
    let mut cut = connect(addr, &config, "localhost");
    assert_eq!(cut.send(&get("/2")).response().text(), "path /2");
    let mut record = Vec::new();
    cut.stream.conn.writer().write_all(&get("/never")).unwrap();
    cut.stream.conn.write_tls(&mut record).unwrap();
    cut.stream.sock.write_all(&record[..record.len() / 2]).unwrap();
    cut.stream.sock.shutdown(std::net::Shutdown::Write).unwrap();
    read_until_closed(&mut cut.stream.sock);

    // An application-data record that fails to decrypt.
    let mut forged = connect(addr, &config, "localhost");
    forged
        .stream
        .sock
        .write_all(b"\x17\x03\x03\x00\x20aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
        .unwrap();
    read_until_closed(&mut forged.stream.sock);

    // A client offering only an application protocol we do not speak
    // (h2 is spoken now: SPDY is not).
    let mut spdy_only = (*config).clone();
    spdy_only.alpn_protocols = vec![b"spdy/3.1".to_vec()];
    let refused = pki::handshake(addr, &Arc::new(spdy_only), "localhost").is_err();
    assert!(refused, "a handshake offering only SPDY succeeded");

    // Everyone else is still served, on the old and on new connections.
    assert_eq!(steady.send(&get("/3")).response().text(), "path /3");
    let mut fresh = connect(addr, &config, "localhost");
    assert_eq!(fresh.send(&get("/4")).response().text(), "path /4");
}

#[test]
fn a_client_that_never_finishes_its_handshake_is_closed() {
    let pki = Pki::new("slow");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let limits = Limits {
        head_timeout: Duration::from_millis(200),
        sweep_interval: Duration::from_millis(20),
        ..Limits::default()
    };
    let server = start_with(limits, TlsConfig::from_pem_files(&cert, &key).unwrap(), echo_path);
    // Nothing at all.
    let mut silent = TcpStream::connect(server.local_addr()).unwrap();
    assert!(read_until_closed(&mut silent).is_empty());
    // Half a ClientHello.
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    let mut conn = ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let mut half = TcpStream::connect(server.local_addr()).unwrap();
    half.write_all(&hello[..hello.len() / 2]).unwrap();
    read_until_closed(&mut half);
}

#[test]
fn sni_picks_the_certificate_for_the_name() {
    let pki = Pki::new("sni");
    let (a_cert, a_key, a_der) = pki.issue("a", &["a.test"]);
    let (b_cert, b_key, b_der) = pki.issue("b", &["b.test", "*.b.test"]);
    let tls = TlsConfig::from_pem_files(&a_cert, &a_key)
        .unwrap()
        .with_cert(&b_cert, &b_key)
        .unwrap();
    let server = start(tls, echo_path);
    let config = client_config(&pki, &[&rustls::version::TLS13, &rustls::version::TLS12]);
    for (name, want) in [("a.test", &a_der), ("b.test", &b_der), ("www.b.test", &b_der)] {
        let mut c = connect(server.local_addr(), &config, name);
        let got = &c.stream.conn.peer_certificates().unwrap()[0];
        assert!(got == want, "wrong certificate for {name}");
        assert_eq!(c.send(&get("/")).response().status, 200);
    }
    // A name no certificate covers (and an IP address, which has no SNI)
    // gets the first: the client refuses it, as it should.
    let strict = pki::handshake(server.local_addr(), &config, "c.test").map(drop);
    assert!(strict.is_err(), "a certificate for c.test appeared");
}

/// A certificate added while serving is chosen by the next handshake for
/// its name; the others keep theirs.
#[test]
fn a_certificate_added_while_serving_is_chosen_for_its_name() {
    let pki = Pki::new("sni-add");
    let (a_cert, a_key, a_der) = pki.issue("a", &["a.test"]);
    let (b_cert, b_key, b_der) = pki.issue("b", &["*.b.test"]);
    let tls = TlsConfig::from_pem_files(&a_cert, &a_key).unwrap();
    let server = start(tls.clone(), echo_path);
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    assert!(pki::handshake(server.local_addr(), &config, "www.b.test").is_err());
    assert_eq!(tls.add_cert(&b_cert, &b_key).unwrap(), 2);
    for (name, want) in [("www.b.test", &b_der), ("a.test", &a_der)] {
        let c = connect(server.local_addr(), &config, name);
        assert!(&peer_cert(&c) == want, "wrong certificate for {name}");
    }
}

fn peer_cert(c: &Client<Tls>) -> CertificateDer<'static> {
    c.stream.conn.peer_certificates().unwrap()[0].clone()
}

fn copy(from: &Path, to: &Path) {
    std::fs::write(to, std::fs::read(from).unwrap()).unwrap();
}

#[test]
fn reload_switches_new_handshakes_and_keeps_old_connections() {
    let pki = Pki::new("reload");
    let (cert, key, first) = pki.issue("live", &["localhost"]);
    let tls = TlsConfig::from_pem_files(&cert, &key).unwrap();
    let server = start(tls.clone(), echo_path);
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    let mut old = connect(server.local_addr(), &config, "localhost");
    assert!(peer_cert(&old) == first);
    assert_eq!(old.send(&get("/before")).response().text(), "path /before");

    // New files in place (issued elsewhere, then copied over).
    let (next_cert, next_key, second) = pki.issue("next", &["localhost"]);
    copy(&next_cert, &cert);
    copy(&next_key, &key);
    assert_eq!(tls.reload().unwrap(), 1);
    // A fresh client: resuming the old session would skip certificates.
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    let mut new = connect(server.local_addr(), &config, "localhost");
    assert!(peer_cert(&new) == second, "the new certificate is not used");
    assert_eq!(new.send(&get("/new")).response().text(), "path /new");
    assert_eq!(old.send(&get("/after")).response().text(), "path /after");

    // A bad file: refused, the certificate loaded before stays.
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = tls.reload().unwrap_err();
    assert!(err.is_tls(), "{err}");
    assert!(err.to_string().contains("live.pem"), "{err}");
    let c = connect_localhost(&pki, &server, &rustls::version::TLS12);
    assert!(peer_cert(&c) == second);
    // A key that does not match its certificate: refused too.
    copy(&next_cert, &cert);
    let (_, other_key, _) = pki.issue("other", &["localhost"]);
    copy(&other_key, &key);
    assert!(tls.reload().is_err());
    let c = connect_localhost(&pki, &server, &rustls::version::TLS12);
    assert!(peer_cert(&c) == second);
}

#[test]
fn loading_bad_files_fails_with_the_file_named() {
    let pki = Pki::new("badfiles");
    let (cert, key, _) = pki.issue("ok", &["localhost"]);
    let missing = pki.dir().join("missing.pem");
    let err = TlsConfig::from_pem_files(&missing, &key).unwrap_err();
    assert!(err.is_tls() && err.to_string().contains("missing.pem"), "{err}");
    let err = TlsConfig::from_pem_files(&key, &key).unwrap_err();
    assert!(err.to_string().contains("ok.key"), "{err}");
    let err = TlsConfig::from_pem_files(&cert, &cert).unwrap_err();
    assert!(err.to_string().contains("ok.pem"), "{err}");
}

#[test]
fn redirect_listener_answers_308_to_https() {
    let pki = Pki::new("redirect");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let server = Server::new()
        .bind_tls("127.0.0.1:0", TlsConfig::from_pem_files(&cert, &key).unwrap())
        .redirect_http("127.0.0.1:0")
        .workers(1)
        .start(echo_path)
        .unwrap();
    let (https, http) = (server.local_addrs()[0], server.local_addrs()[1]);
    let mut c = Client::connect(http);
    let r = c
        .send(b"GET /a/b?c=d&e HTTP/1.1\r\nHost: example.test:8080\r\n\r\n")
        .response();
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://example.test:{}/a/b?c=d&e", https.port()).as_str())
    );
    assert_eq!(r.header("strict-transport-security"), None);
    // Keep-alive; a POST too; IPv6 literal hosts keep their brackets.
    let r = c
        .send(b"POST /form HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 3\r\n\r\nabc")
        .response();
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://[::1]:{}/form", https.port()).as_str())
    );
    // A host that could smuggle something into Location is refused.
    let r = c
        .send(b"GET / HTTP/1.1\r\nHost: evil.test/x@good.test\r\n\r\n")
        .response();
    assert_eq!(r.status, 400);
}

#[test]
fn redirect_without_tls_is_an_error() {
    let err = Server::new().redirect_http("127.0.0.1:0").start(echo_path).unwrap_err();
    assert!(err.is_tls(), "{err}");
}

#[test]
fn hsts_is_added_over_tls_when_asked() {
    let pki = Pki::new("hsts");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let tls = TlsConfig::from_pem_files(&cert, &key)
        .unwrap()
        .hsts(Duration::from_secs(31_536_000));
    let server = start(tls, |req: &Request<'_>| {
        if req.path() == "/own" {
            Response::text("own").with_header("Strict-Transport-Security", "max-age=5")
        } else {
            Response::text("default")
        }
    });
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    let mut c = connect(server.local_addr(), &config, "localhost");
    let r = c.send(&get("/")).response();
    assert_eq!(r.header("strict-transport-security"), Some("max-age=31536000"));
    assert_eq!(r.text(), "default");
    let r = c.send(&get("/own")).response();
    assert_eq!(r.header("strict-transport-security"), Some("max-age=5"));
    let n = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("strict-transport-security"))
        .count();
    assert_eq!(n, 1);
    // Without hsts(): no field.
    let plain = start(TlsConfig::from_pem_files(&cert, &key).unwrap(), echo_path);
    let mut c = connect(plain.local_addr(), &config, "localhost");
    assert_eq!(c.send(&get("/")).response().header("strict-transport-security"), None);
}

#[test]
fn plain_and_tls_listeners_share_a_server() {
    let pki = Pki::new("both");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .bind_tls("127.0.0.1:0", TlsConfig::from_pem_files(&cert, &key).unwrap())
        .workers(2)
        .start(echo_path)
        .unwrap();
    let (plain, tls) = (server.local_addrs()[0], server.local_addrs()[1]);
    let mut p = Client::connect(plain);
    assert_eq!(p.send(&get("/p")).response().text(), "path /p");
    let mut t = connect(tls, &client_config(&pki, &[&rustls::version::TLS13]), "localhost");
    assert_eq!(t.send(&get("/t")).response().text(), "path /t");
    server.shutdown();
    server.join().unwrap();
}

#[test]
fn errors_over_tls_are_answered_then_closed() {
    let pki = Pki::new("errors");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let limits = Limits {
        head_timeout: Duration::from_millis(200),
        sweep_interval: Duration::from_millis(20),
        ..Limits::default()
    };
    let server = start_with(limits, TlsConfig::from_pem_files(&cert, &key).unwrap(), echo_path);
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    // A malformed request: 400 naming the problem, then the close.
    let mut c = connect(server.local_addr(), &config, "localhost");
    let r = c
        .send(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        .response();
    assert_eq!(r.status, 400);
    assert!(c.is_closed());
    // Half a head after the handshake: 408 once head_timeout passes.
    let mut c = connect(server.local_addr(), &config, "localhost");
    let r = c.send(b"GET / HTTP/1.1\r\nHost: loc").response();
    assert_eq!(r.status, 408);
    assert!(c.is_closed());
}

#[test]
fn random_bytes_at_the_tls_port_never_hurt_the_server() {
    let (pki, server) = localhost("random", echo_path);
    let addr = server.local_addr();
    let config = client_config(&pki, &[&rustls::version::TLS13, &rustls::version::TLS12]);
    // A genuine ClientHello to mutate, so that many inputs get past the
    // record layer into the handshake parser.
    let mut hello = Vec::new();
    ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap())
        .unwrap()
        .write_tls(&mut hello)
        .unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..200 {
        let bytes: Vec<u8> = if i % 2 == 0 {
            let len = (next() % 600) as usize + 1;
            (0..len).map(|_| next() as u8).collect()
        } else {
            let mut m = hello.clone();
            for _ in 0..(next() % 8 + 1) {
                let at = (next() as usize) % m.len();
                m[at] = next() as u8;
            }
            m.truncate((next() as usize) % m.len() + 1);
            m
        };
        let mut s = TcpStream::connect(addr).unwrap();
        // The server may close (and reset) before taking all of it.
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        read_until_closed(&mut s);
    }
    let mut c = connect(addr, &config, "localhost");
    assert_eq!(c.send(&get("/still")).response().text(), "path /still");
}

#[test]
fn metrics_count_tls_handshakes_by_result() {
    let pki = Pki::new("metrics");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let metrics = Arc::new(peregrine::Metrics::new());
    let server = Server::new()
        .bind_tls("127.0.0.1:0", TlsConfig::from_pem_files(&cert, &key).unwrap())
        .workers(1)
        .metrics(metrics.clone())
        .start(echo_path)
        .unwrap();
    let addr = server.local_addr();
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let mut c = connect(addr, &client_config(&pki, &[version]), "localhost");
        assert_eq!(c.send(&get("/m")).response().status, 200);
    }
    // Two handshakes that fail: plaintext, and a garbage record.
    for bytes in [&get("/plain")[..], b"\x16\x03\x01\x00\x08garbage!"] {
        let mut bad = TcpStream::connect(addr).unwrap();
        bad.write_all(bytes).unwrap();
        read_until_closed(&mut bad);
    }
    server.shutdown();
    server.join().unwrap();
    let text = metrics.render();
    for line in [
        "peregrine_tls_handshakes_total{result=\"ok\"} 2",
        "peregrine_tls_handshakes_total{result=\"failed\"} 2",
        "peregrine_requests_total{class=\"2xx\"} 2",
        "peregrine_connections_accepted_total 4",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}

/// Over TLS (h2 by ALPN) as over h2c: a body nobody reads is answered as
/// soon as its first DATA frame has come, not buffered to its end.
#[test]
fn h2_over_tls_answers_a_body_nobody_reads_without_it() {
    use test_support::h2::{frame, take_frame, DATA, END_HEADERS, HEADERS, PREFACE, SETTINGS};
    let app = peregrine::Router::new().get("/", echo_path);
    let (pki, server) = localhost("h2-unread", app);
    let mut config = pki.client_config(rustls::DEFAULT_VERSIONS);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let mut tls = pki::connect(server.local_addr(), &Arc::new(config), "localhost");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    let mut head = Vec::new();
    for (index, value) in [(2u8, "POST"), (7, "https"), (4, "/"), (1, "localhost")] {
        head.push(index);
        head.push(value.len() as u8);
        head.extend_from_slice(value.as_bytes());
    }
    head.extend_from_slice(&[0x0f, 0x0d, 7]); // content-length
    head.extend_from_slice(b"1048576");
    for i in 0..32u32 {
        out.extend(frame(HEADERS, END_HEADERS, 1 + 2 * i, &head));
        out.extend(frame(DATA, 0, 1 + 2 * i, &[0; 16_384]));
    }
    tls.write_all(&out).unwrap();
    let (mut buf, mut chunk, mut answered) = (Vec::new(), vec![0; 1 << 16], 0);
    while answered < 32 {
        let n = tls.read(&mut chunk).expect("the answers within PATIENCE");
        assert!(n > 0, "closed before the answers");
        buf.extend_from_slice(&chunk[..n]);
        while let Some(f) = take_frame(&mut buf) {
            if f.kind == HEADERS {
                assert_eq!(f.status(), 405);
                answered += 1;
            }
        }
    }
}

/// The access log says which TLS version each request came over and
/// whether its connection resumed a session: the first connection made a
/// full handshake, the second (same client, its session kept) resumed.
#[test]
fn the_access_log_has_the_tls_version_and_resumption() {
    let pki = Pki::new("access-log-tls");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let path = std::env::temp_dir().join(format!("peregrine-tls-log-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let server = Server::new()
        .bind_tls("127.0.0.1:0", TlsConfig::from_pem_files(&cert, &key).unwrap())
        .workers(1)
        .access_log(peregrine::AccessLog::File(path.clone()))
        .access_log_format("$ssl_protocol $ssl_session_reused".parse().unwrap())
        .start(echo_path)
        .unwrap();
    let config = client_config(&pki, &[&rustls::version::TLS13]);
    for _ in 0..2 {
        let mut c = connect(server.local_addr(), &config, "localhost");
        c.send(&get("/"));
        assert_eq!(c.response().status, 200);
    }
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(log, "TLSv1.3 .\nTLSv1.3 r\n");
}

/// A client like `pki`'s, on aws-lc-rs (which has ML-KEM), offering the
/// key-exchange `groups` only, in that order, and no resumption.
fn client_with_groups(pki: &Pki, groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup>) -> Arc<ClientConfig> {
    let provider = rustls::crypto::CryptoProvider {
        kx_groups: groups,
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// The hybrid post-quantum group is preferred (issue 29): a client that
/// offers X25519MLKEM768 first, with its key share (as Chrome and Firefox
/// do), gets it; one that lists it after X25519 sends a share for X25519
/// only, and gets X25519 rather than a HelloRetryRequest's extra round
/// trip (rustls' choice, as OpenSSL's); one that offers only X25519 (or
/// only P-256) gets that, and is served alike.
#[test]
fn key_exchange_prefers_x25519mlkem768_and_serves_classical_clients() {
    use rustls::crypto::aws_lc_rs::kx_group::{SECP256R1, X25519, X25519MLKEM768};
    use rustls::NamedGroup;
    let (pki, server) = localhost("kx", echo_path);
    let cases: [(Vec<&'static dyn rustls::crypto::SupportedKxGroup>, NamedGroup); 4] = [
        (vec![X25519MLKEM768, X25519], NamedGroup::X25519MLKEM768),
        (vec![X25519, X25519MLKEM768], NamedGroup::X25519),
        (vec![X25519], NamedGroup::X25519),
        (vec![SECP256R1], NamedGroup::secp256r1),
    ];
    for (groups, want) in cases {
        let offered: Vec<NamedGroup> = groups.iter().map(|g| g.name()).collect();
        let mut c = connect(server.local_addr(), &client_with_groups(&pki, groups), "localhost");
        let got = c.stream.conn.negotiated_key_exchange_group().map(|g| g.name());
        assert_eq!(got, Some(want), "offered {offered:?}");
        assert_eq!(c.send(&get("/kx")).response().text(), "path /kx");
    }
}

/// A server for `localhost` on `cert`/`key` sealing tickets with `keys`,
/// counting handshakes into `metrics`.
fn with_tickets(
    cert: &Path,
    key: &Path,
    keys: &Arc<peregrine::TicketKeys>,
    metrics: &Arc<peregrine::Metrics>,
) -> Running {
    let tls = TlsConfig::from_pem_files(cert, key).unwrap().ticket_keys(keys.clone());
    Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .metrics(metrics.clone())
        .start(echo_path)
        .unwrap()
}

fn kind(c: &Client<Tls>) -> Option<rustls::HandshakeKind> {
    c.stream.conn.handshake_kind()
}

/// Session tickets (issue 29): a ticket one server (worker, listener)
/// issued resumes on another built from the same keys, TLS 1.3 and 1.2;
/// under other keys it does not (a full handshake instead, nothing
/// worse). Two servers stand for two workers: SO_REUSEPORT would not let
/// the test choose which worker a connection reaches.
#[test]
fn a_ticket_from_one_server_resumes_on_another_with_the_same_keys() {
    use rustls::HandshakeKind::{Full, Resumed};
    let pki = Pki::new("tickets");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let shared = Arc::new(peregrine::TicketKeys::random());
    let metrics = Arc::new(peregrine::Metrics::new());
    let a = with_tickets(&cert, &key, &shared, &metrics);
    let b = with_tickets(&cert, &key, &shared, &metrics);
    let other = with_tickets(&cert, &key, &Arc::new(peregrine::TicketKeys::random()), &metrics);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One client config: its session cache is by server name, so what
        // `a` issued is offered to `b` and `other`.
        let config = client_config(&pki, &[version]);
        let mut c = connect(a.local_addr(), &config, "localhost");
        assert_eq!(kind(&c), Some(Full), "{version:?}");
        // TLS 1.3 tickets come after the handshake: a request and its
        // answer make sure the client has read them.
        assert_eq!(c.send(&get("/a")).response().status, 200);
        let mut c = connect(b.local_addr(), &config, "localhost");
        assert_eq!(kind(&c), Some(Resumed), "{version:?}: b resumes a's ticket");
        assert_eq!(c.send(&get("/b")).response().text(), "path /b");
        let mut c = connect(other.local_addr(), &config, "localhost");
        assert_eq!(kind(&c), Some(Full), "{version:?}: other keys, a full handshake");
        assert_eq!(c.send(&get("/o")).response().text(), "path /o");
    }
    for s in [a, b, other] {
        s.shutdown();
        s.join().unwrap();
    }
    let text = metrics.render();
    for line in [
        "peregrine_tls_handshakes_by_kind_total{kind=\"full\"} 4",
        "peregrine_tls_handshakes_by_kind_total{kind=\"resumed\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}

/// A fleet's key file: two servers (processes, say) reading the same file
/// resume each other's tickets; after the file is rotated (new key first,
/// old one second) and reloaded, old tickets still resume; after the old
/// key leaves the file, they no longer do.
#[test]
fn ticket_key_files_are_shared_rotated_and_reloaded() {
    use rustls::HandshakeKind::{Full, Resumed};
    let pki = Pki::new("ticket-file");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let file = pki.dir().join("ticket.key");
    let (old, new): (Vec<u8>, Vec<u8>) = ((0..80).collect(), (80..160).collect());
    std::fs::write(&file, &old).unwrap();
    let metrics = Arc::new(peregrine::Metrics::new());
    let keys_a = Arc::new(peregrine::TicketKeys::from_file(&file).unwrap());
    let keys_b = Arc::new(peregrine::TicketKeys::from_file(&file).unwrap());
    let a = with_tickets(&cert, &key, &keys_a, &metrics);
    let b = with_tickets(&cert, &key, &keys_b, &metrics);
    // A fresh client each round, so that it holds one ticket only.
    let ticket_from_a = || {
        let config = client_config(&pki, &[&rustls::version::TLS13]);
        let mut c = connect(a.local_addr(), &config, "localhost");
        assert_eq!(c.send(&get("/a")).response().status, 200);
        config
    };
    let config = ticket_from_a();
    assert_eq!(kind(&connect(b.local_addr(), &config, "localhost")), Some(Resumed));
    let config = ticket_from_a();
    std::fs::write(&file, [&new[..], &old[..]].concat()).unwrap();
    keys_b.load_file(&file).unwrap();
    assert_eq!(kind(&connect(b.local_addr(), &config, "localhost")), Some(Resumed));
    let config = ticket_from_a();
    std::fs::write(&file, &new).unwrap();
    keys_b.load_file(&file).unwrap();
    assert_eq!(kind(&connect(b.local_addr(), &config, "localhost")), Some(Full));
}
