//! The benchmark's TLS handshake client (bench/handshakes): connections
//! one after another, each a handshake, one request (`Connection: close`)
//! and its answer read to the end, for a fixed time; then one line of
//! counts. rustls on aws-lc-rs, so it can offer X25519MLKEM768, which
//! Debian's OpenSSL 3.0 (`openssl s_time`, h2load) cannot.
//!
//! `tls_handshakes ADDR CA.pem GROUP MODE SECONDS`: GROUP `mlkem` (offers
//! X25519MLKEM768 only), `x25519` (X25519 only) or `plain` (no TLS at all:
//! the floor's accept-answer-close part, against `limit`, which does not
//! close: the client reads the answer's Content-Length and closes); MODE `full` (never
//! resumes: no session is kept) or `resumed` (keeps its tickets: after
//! the first, every handshake offers one). Prints
//! `connections=N full=N resumed=N errors=N seconds=S group=G suite=S`;
//! the server's own counts are what a run trusts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::aws_lc_rs::{default_provider, kx_group};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: tls_handshakes ADDR CA.pem mlkem|x25519 full|resumed SECONDS");
        std::process::exit(2);
    }
    let (addr, ca, group, mode) = (&args[1], &args[2], &args[3], &args[4]);
    let seconds: f64 = args[5].parse().expect("SECONDS");
    if group == "plain" {
        plain(addr, seconds);
        return;
    }
    let group = match group.as_str() {
        "mlkem" => kx_group::X25519MLKEM768,
        "x25519" => kx_group::X25519,
        g => panic!("{g}: mlkem or x25519"),
    };
    let provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![group],
        ..default_provider()
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    match mode.as_str() {
        "full" => config.resumption = rustls::client::Resumption::disabled(),
        "resumed" => {}
        m => panic!("{m}: full or resumed"),
    }
    let config = Arc::new(config);
    let name = ServerName::try_from("localhost").unwrap();
    let (mut full, mut resumed, mut errors) = (0u64, 0u64, 0u64);
    let mut negotiated = (String::from("-"), String::from("-"));
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let mut answer = Vec::with_capacity(4096);
    while Instant::now() < until {
        let Ok(tcp) = TcpStream::connect(addr) else {
            errors += 1;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
        let conn = ClientConnection::new(config.clone(), name.clone()).unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        answer.clear();
        let ok = tls
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .and_then(|()| tls.read_to_end(&mut answer))
            .is_ok()
            || answer.starts_with(b"HTTP/1.1 ");
        if !ok || !answer.starts_with(b"HTTP/1.1 ") {
            errors += 1;
            continue;
        }
        match tls.conn.handshake_kind() {
            Some(HandshakeKind::Resumed) => resumed += 1,
            _ => full += 1,
        }
        if negotiated.0 == "-" {
            negotiated = (
                format!("{:?}", tls.conn.negotiated_key_exchange_group().map(|g| g.name())),
                format!("{:?}", tls.conn.negotiated_cipher_suite().map(|s| s.suite())),
            );
        }
    }
    println!(
        "connections={} full={full} resumed={resumed} errors={errors} seconds={:.3} group={} suite={}",
        full + resumed,
        start.elapsed().as_secs_f64(),
        negotiated.0,
        negotiated.1
    );
}

/// Plain TCP connections, one request each: the client closes once the
/// answer's Content-Length bytes are read (or the server closes first).
fn plain(addr: &str, seconds: f64) {
    let (mut n, mut errors) = (0u64, 0u64);
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let mut answer = vec![0u8; 64 * 1024];
    while Instant::now() < until {
        let Ok(mut tcp) = TcpStream::connect(addr) else {
            errors += 1;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
        if tcp
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .is_err()
        {
            errors += 1;
            continue;
        }
        let mut have = 0;
        let complete = loop {
            match tcp.read(&mut answer[have..]) {
                Ok(0) | Err(_) => break have > 0,
                Ok(k) => have += k,
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = res.parse(&answer[..have]) {
                let len = res
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
                if len.is_some_and(|len| have >= head + len) {
                    break true;
                }
            }
            if have == answer.len() {
                break false;
            }
        };
        if complete && answer.starts_with(b"HTTP/1.1 ") {
            n += 1;
        } else {
            errors += 1;
        }
    }
    println!(
        "connections={n} full=0 resumed=0 errors={errors} seconds={:.3} group=plain suite=-",
        start.elapsed().as_secs_f64()
    );
}
