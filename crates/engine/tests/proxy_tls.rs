//! `https://` upstreams: the proxy speaks TLS to an upstream made with the
//! test PKI (rustls on threads, recording the SNI and ALPN it saw and
//! counting the connections it accepted). Verified against a CA file, a
//! GET and a POST go through on one kept-alive connection; a certificate
//! the proxy cannot verify is a 502 with none of the upstream's text,
//! unless verification is explicitly skipped. A WebSocket passes through
//! to one, its tunnel's bytes going through rustls.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;

use common::{status_of, Client, PATIENCE};
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use test_support::pki::Pki;

/// One request as the upstream read it, with what its connection's
/// handshake said.
#[derive(Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
    sni: Option<String>,
    alpn: Option<Vec<u8>>,
}

struct Up {
    addr: SocketAddr,
    seen: Receiver<Seen>,
    accepted: Arc<AtomicUsize>,
    /// The CA file that verifies its certificate.
    ca: std::path::PathBuf,
    _pki: Pki,
}

/// An HTTPS upstream whose certificate (for `localhost` and 127.0.0.1)
/// the test CA signed; it answers every request with `METHOD PATH BODY`.
fn tls_upstream(tag: &str) -> Up {
    let pki = Pki::new(tag);
    let (cert, key, _) = pki.issue("up", &["localhost", "127.0.0.1"]);
    let ca = pki.dir().join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    tls_upstream_from(pki, &cert, &key, ca)
}

/// An HTTPS upstream whose certificate is self-signed for `names` with
/// `CA:TRUE`, as `openssl req -x509` makes one by default (`expired`: its
/// lifetime ended in 2021); the CA file given to the proxy is that
/// certificate itself.
fn self_signed_upstream(tag: &str, names: &[&str], expired: bool) -> Up {
    let pki = Pki::new(tag);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = match expired {
        true => rcgen::date_time_ymd(2021, 1, 1),
        false => rcgen::date_time_ymd(2100, 1, 1),
    };
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (pki.dir().join("self.pem"), pki.dir().join("self.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    tls_upstream_from(pki, &cert_path, &key_path, cert_path.clone())
}

/// An HTTPS upstream serving the certificate and key of these files, `ca`
/// the file the proxy verifies it with.
fn tls_upstream_from(pki: Pki, cert: &std::path::Path, key: &std::path::Path, ca: std::path::PathBuf) -> Up {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, seen) = mpsc::channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            let config = config.clone();
            thread::spawn(move || {
                tcp.set_read_timeout(Some(PATIENCE)).unwrap();
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut stream = rustls::StreamOwned::new(conn, tcp);
                // The handshake (a failed one ends the connection).
                while stream.conn.is_handshaking() {
                    if stream.conn.complete_io(&mut stream.sock).is_err() {
                        return;
                    }
                }
                let sni = stream.conn.server_name().map(str::to_owned);
                let alpn = stream.conn.alpn_protocol().map(<[u8]>::to_vec);
                let mut reader = BufReader::new(stream);
                loop {
                    let Some(head) = common::read_head(&mut reader) else {
                        return;
                    };
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    let mut words = head.split(' ');
                    let answer = format!(
                        "{} {} {}",
                        words.next().unwrap_or(""),
                        words.next().unwrap_or(""),
                        String::from_utf8_lossy(&body)
                    );
                    let _ = tx.send(Seen {
                        head,
                        body,
                        sni: sni.clone(),
                        alpn: alpn.clone(),
                    });
                    let out = reader.get_mut();
                    let _ = write!(
                        out,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Up: secret-upstream\r\n\r\n{answer}",
                        answer.len()
                    );
                    let _ = out.flush();
                }
            });
        }
    });
    Up {
        addr,
        seen,
        accepted,
        ca,
        _pki: pki,
    }
}

/// A server of one worker whose `/api/*` goes to `up`.
fn proxy_server(up: Upstream) -> Running {
    let proxy = Proxy::new(up.prefix("/api/"));
    let router = Router::new()
        .route("GET", "/api/*rest", proxy.clone())
        .route("POST", "/api/*rest", proxy);
    let limits = peregrine::Limits {
        body_bytes_max: 16 * 1024 * 1024,
        ..peregrine::Limits::default()
    };
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(router)
        .expect("server starts")
}

fn request(addr: SocketAddr, head: &str, body: &str) -> String {
    let mut c = Client::connect(addr);
    c.send(
        format!(
            "{head} HTTP/1.1\r\nHost: site.test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    String::from_utf8_lossy(&c.read_to_close()).into_owned()
}

#[test]
fn a_get_and_a_post_reach_a_verified_https_upstream_with_sni_on_one_kept_alive_connection() {
    let up = tls_upstream("proxy-tls-ok");
    let port = up.addr.port();
    let server = proxy_server(
        Upstream::parse(&format!("https://localhost:{port}"))
            .unwrap()
            .ca_file(&up.ca)
            .unwrap(),
    );
    let addr = server.local_addr();

    let got = request(addr, "GET /api/a", "");
    assert_eq!(status_of(got.as_bytes()), 200, "{got}");
    assert!(got.ends_with("GET /api/a "), "{got}");
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.sni.as_deref(), Some("localhost"), "the SNI is the upstream's host");
    assert_eq!(seen.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert!(seen.head.starts_with("GET /api/a HTTP/1.1\r\n"), "{}", seen.head);

    let got = request(addr, "POST /api/b", "hello over tls");
    assert_eq!(status_of(got.as_bytes()), 200, "{got}");
    assert!(got.ends_with("POST /api/b hello over tls"), "{got}");
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.body, b"hello over tls");

    // Both went over one connection, kept alive in the pool.
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
    server.shutdown();
}

/// A backend with a self-signed certificate made with `CA:TRUE` (what
/// `openssl req -x509` makes), given as the `proxy-ca` file itself: nginx
/// (`proxy_ssl_trusted_certificate`) and Caddy accept it, webpki alone
/// refuses it as a CA used as a server's (`CaUsedAsEndEntity`: 502
/// before). Still refused when it does not hold the upstream's name or has
/// expired.
#[test]
fn a_self_signed_certificate_given_as_the_ca_file_is_accepted_for_its_name_and_lifetime() {
    for (tag, names, expired, want) in [
        ("proxy-tls-pinned", &["localhost"][..], false, 200),
        ("proxy-tls-pinned-name", &["elsewhere.test"][..], false, 502),
        ("proxy-tls-pinned-old", &["localhost"][..], true, 502),
    ] {
        let up = self_signed_upstream(tag, names, expired);
        let port = up.addr.port();
        let server = proxy_server(
            Upstream::parse(&format!("https://localhost:{port}"))
                .unwrap()
                .ca_file(&up.ca)
                .unwrap(),
        );
        let got = request(server.local_addr(), "GET /api/p", "");
        assert_eq!(status_of(got.as_bytes()), want, "{tag}: {got}");
        if want == 200 {
            assert!(got.ends_with("GET /api/p "), "{got}");
        }
        server.shutdown();
    }
}

#[test]
fn an_ip_literal_upstream_is_verified_against_its_ip_address_without_sni() {
    let up = tls_upstream("proxy-tls-ip");
    let server = proxy_server(
        Upstream::parse(&format!("https://{}/v1/", up.addr))
            .unwrap()
            .ca_file(&up.ca)
            .unwrap(),
    );
    let got = request(server.local_addr(), "GET /api/x", "");
    assert_eq!(status_of(got.as_bytes()), 200, "{got}");
    assert!(got.ends_with("GET /v1/x "), "{got}");
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.sni, None);
    server.shutdown();
}

#[test]
fn a_certificate_the_proxy_cannot_verify_is_a_502_without_upstream_text_unless_verification_is_skipped() {
    let up = tls_upstream("proxy-tls-bad");
    let other = Pki::new("proxy-tls-other");
    let wrong_ca = other.dir().join("ca.pem");
    std::fs::write(&wrong_ca, other.ca_pem()).unwrap();
    let url = format!("https://localhost:{}", up.addr.port());

    // Another CA, and the system's roots (which never signed the test CA).
    for upstream in [
        Upstream::parse(&url).unwrap().ca_file(&wrong_ca).unwrap(),
        Upstream::parse(&url).unwrap(),
    ] {
        assert!(!upstream.skips_verify());
        let server = proxy_server(upstream);
        let got = request(server.local_addr(), "GET /api/a", "");
        assert_eq!(status_of(got.as_bytes()), 502, "{got}");
        assert!(!got.contains("secret-upstream") && !got.contains("GET /api"), "{got}");
        assert!(up.seen.try_recv().is_err(), "no request reached the upstream");
        server.shutdown();
    }

    // Told not to verify: the same certificate is taken.
    let upstream = Upstream::parse(&url)
        .unwrap()
        .ca_file(&wrong_ca)
        .unwrap()
        .insecure_skip_verify()
        .unwrap();
    assert!(upstream.skips_verify());
    let server = proxy_server(upstream);
    let got = request(server.local_addr(), "GET /api/a", "");
    assert_eq!(status_of(got.as_bytes()), 200, "{got}");
    assert!(got.ends_with("GET /api/a "), "{got}");
    server.shutdown();
}

#[test]
fn tls_settings_are_refused_on_plain_upstreams() {
    assert!(Upstream::parse("http://127.0.0.1:9")
        .unwrap()
        .insecure_skip_verify()
        .is_err());
    assert!(Upstream::parse("unix:/tmp/x.sock")
        .unwrap()
        .ca_file("/nonexistent")
        .is_err());
    assert!(Upstream::parse("https://127.0.0.1:9")
        .unwrap()
        .ca_file("/nonexistent")
        .is_err());
}

#[test]
fn a_long_body_goes_up_and_a_long_answer_comes_back_through_tls_whole() {
    let up = tls_upstream("proxy-tls-long");
    let server = proxy_server(
        Upstream::parse(&format!("https://localhost:{}", up.addr.port()))
            .unwrap()
            .ca_file(&up.ca)
            .unwrap(),
    );
    // Streamed (over 64 KiB), through rustls' buffers many times over.
    let body: String = (0..3 * 1024 * 1024).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let got = request(server.local_addr(), "POST /api/long", &body);
    assert_eq!(status_of(got.as_bytes()), 200, "{}", &got[..200.min(got.len())]);
    assert!(
        got.ends_with(&format!("POST /api/long {body}")),
        "the answer came back whole"
    );
    assert_eq!(up.seen.recv_timeout(PATIENCE).unwrap().body, body.as_bytes());
    server.shutdown();
}

/// A WebSocket echo server over TLS (a Peregrine of its own, HTTP/1.1
/// only), with its certificate for `localhost` and the CA file for it.
fn tls_ws_echo(tag: &str) -> (Running, std::path::PathBuf, Pki) {
    use peregrine::ws;
    let pki = Pki::new(tag);
    let (cert, key, _) = pki.issue("up", &["localhost", "127.0.0.1"]);
    let ca = pki.dir().join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let options = ws::Options::new().allow_origin("*").message_bytes_max(4 << 20);
    let running = Server::new()
        .bind_tls(
            "127.0.0.1:0",
            peregrine::TlsConfig::from_pem_files(&cert, &key).unwrap(),
        )
        .workers(1)
        .http2(false)
        .start(move |req: &peregrine::Request<'_>| -> peregrine::Reply {
            ws::upgrade(req, &options, |ws: &mut ws::Socket<'_>, msg: ws::Message<'_>| {
                let _ = ws.send(msg);
            })
        })
        .expect("the upstream starts");
    (running, ca, pki)
}

#[test]
fn a_websocket_passes_through_to_an_https_upstream_both_ways() {
    let (echo, ca, _pki) = tls_ws_echo("proxy-tls-ws");
    let server = proxy_server(
        Upstream::parse(&format!("https://localhost:{}", echo.local_addr().port()))
            .unwrap()
            .ca_file(&ca)
            .unwrap(),
    );
    let tcp = std::net::TcpStream::connect(server.local_addr()).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let (mut socket, answer) =
        tungstenite::client(format!("ws://{}/api/ws", server.local_addr()), tcp).expect("the handshake");
    assert_eq!(answer.status(), 101);
    socket.send(tungstenite::Message::text("hello")).unwrap();
    assert_eq!(socket.read().unwrap(), tungstenite::Message::text("hello"));
    // More than a TLS record and a socket buffer hold at once, each way.
    let big: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    socket.send(tungstenite::Message::binary(big.clone())).unwrap();
    match socket.read().unwrap() {
        tungstenite::Message::Binary(got) => assert!(got[..] == big[..], "the 3 MiB message came back changed"),
        other => panic!("{other:?}"),
    }
    socket.close(None).unwrap();
    // The upstream's close comes back through the tunnel.
    loop {
        match socket.read() {
            Ok(tungstenite::Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => break,
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    server.shutdown();
    echo.shutdown();
}
