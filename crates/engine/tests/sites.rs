//! Several sites in one server (`Server::start_sites`), end to end: each
//! name gets its own handler and certificate, aliases redirect, and an
//! unknown host, an unknown SNI, a Host/SNI mismatch and HTTP/2 coalescing
//! each get their answer, over HTTP/1.1 and HTTP/2, cleartext and TLS. The
//! access log and the metrics say which site answered.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use peregrine::{AccessLog, LogFormat, Metrics, Request, Response, Running, Server, Site, TlsConfig};
use rustls::ClientConfig;
use test_support::h2::{self as h2c, END_HEADERS, END_STREAM, HEADERS};
use test_support::pki::{self, Pki};
use test_support::{http, Scratch};

fn answer(name: &'static str) -> impl Fn(&Request<'_>) -> Response + Send + Sync + 'static {
    move |req: &Request<'_>| {
        Response::text(format!(
            "{name} {} sni={}",
            req.target(),
            req.tls_server_name().unwrap_or("-")
        ))
    }
}

/// a.test (with *.a.test, and www.a.test redirecting), b.test, and
/// bücher.test; none marked default unless `default_b`.
fn sites(default_b: bool, own_log: Option<&std::path::Path>) -> Vec<Site> {
    let mut a = Site::new(["a.test", "*.a.test"], answer("A")).alias("www.a.test");
    if let Some(path) = own_log {
        a = a.access_log(AccessLog::File(path.to_owned()));
    }
    let mut b = Site::new(["b.test"], answer("B"));
    if default_b {
        b = b.default_site();
    }
    vec![a, b, Site::new(["Bücher.test"], answer("C"))]
}

/// Certificates: a's covers every name (`*.test` too), and is for a's
/// names only; b's for b.test; c's for the IDN.
fn tls(pki: &Pki, default: Option<&str>) -> TlsConfig {
    let (a_cert, a_key, _) = pki.issue("a", &["a.test", "*.a.test", "www.a.test", "*.test", "b.test"]);
    let (b_cert, b_key, _) = pki.issue("b", &["b.test"]);
    let (c_cert, c_key, _) = pki.issue("c", &["xn--bcher-kva.test"]);
    TlsConfig::for_names(&["a.test", "*.a.test", "www.a.test"], a_cert, a_key)
        .unwrap()
        .with_cert_for(&["b.test"], b_cert, b_key)
        .unwrap()
        .with_cert_for(&["bücher.test"], c_cert, c_key)
        .unwrap()
        .unknown_names(default)
        .unwrap()
}

fn get(addr: SocketAddr, host: &str, target: &str) -> http::Resp {
    http::request(addr, "GET", target, &[("Host", host)])
}

#[test]
fn in_cleartext_each_name_gets_its_site_aliases_redirect_and_unknown_hosts_404() {
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start_sites(sites(false, None))
        .unwrap();
    let addr = server.local_addr();
    for (host, body) in [
        ("a.test", "A / sni=-"),
        ("A.TEST.", "A / sni=-"),
        ("x.a.test:80", "A / sni=-"),
        ("b.test", "B / sni=-"),
        // HTTP/1.1's Host is ASCII (RFC 9110 §7.2): the A-label.
        ("XN--BCHER-KVA.test", "C / sni=-"),
    ] {
        let r = get(addr, host, "/");
        assert_eq!((r.status, r.text().as_str()), (200, body), "{host}");
    }
    let r = get(addr, "www.a.test:8080", "/p?q=1");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("http://a.test:8080/p?q=1"));
    for host in ["c.test", "a.b.a.test", "127.0.0.1"] {
        assert_eq!(get(addr, host, "/").status, 404, "{host}");
    }
    // HTTP/1.0 without Host.
    let raw = common::exchange(addr, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(common::status_of(&raw), 404);
    server.shutdown();
    server.join().unwrap();

    // With a default, unknown hosts are its.
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start_sites(sites(true, None))
        .unwrap();
    assert_eq!(get(server.local_addr(), "c.test", "/").text(), "B / sni=-");
    server.shutdown();
    server.join().unwrap();
}

/// Sites that claim one name twice, or two defaults, do not start.
#[test]
fn conflicting_sites_are_refused_at_start() {
    let h = |_: &Request<'_>| Response::text("x");
    let e = Server::new()
        .bind("127.0.0.1:0")
        .start_sites(vec![Site::new(["a.test"], h), Site::new(["A.test."], h)])
        .map(drop)
        .expect_err("refused");
    let cause = std::error::Error::source(&e)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(cause.contains("a.test"), "{e}: {cause}");
}

fn client(pki: &Pki, alpn: &[u8]) -> Arc<ClientConfig> {
    let mut config = pki.client_config(rustls::DEFAULT_VERSIONS);
    config.alpn_protocols = vec![alpn.to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

fn tls_server(pki: &Pki, default: Option<&str>, log: &std::path::Path, metrics: &Arc<Metrics>) -> Running {
    Server::new()
        .bind_tls("127.0.0.1:0", tls(pki, default))
        .workers(1)
        .access_log(AccessLog::File(log.to_owned()))
        .access_log_format(LogFormat::Json)
        .metrics(metrics.clone())
        .start_sites(sites(default.is_some(), None))
        .unwrap()
}

/// One GET over TLS as `sni`, with `host`: the status and body.
fn tls_get(addr: SocketAddr, config: &Arc<ClientConfig>, sni: &str, host: &str) -> (u16, String, Vec<u8>) {
    let stream = pki::connect(addr, config, sni);
    let cert = stream.conn.peer_certificates().unwrap()[0].to_vec();
    let mut c = http::Client::over(stream);
    c.send(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes());
    let r = c.response();
    (r.status, r.text(), cert)
}

#[test]
fn over_tls_each_site_presents_its_certificate_and_misdirected_requests_get_421() {
    let pki = Pki::new("sites");
    let scratch = Scratch::new("peregrine-sites-tls");
    let log = scratch.path("access.log");
    let metrics = Arc::new(Metrics::new());
    let server = tls_server(&pki, None, &log, &metrics);
    let addr = server.local_addr();
    let h1 = client(&pki, b"http/1.1");

    let (status, body, a_cert) = tls_get(addr, &h1, "a.test", "a.test");
    assert_eq!((status, body.as_str()), (200, "A / sni=a.test"));
    let (_, body, x_cert) = tls_get(addr, &h1, "x.a.test", "x.a.test");
    assert_eq!(body, "A / sni=x.a.test");
    assert_eq!(x_cert, a_cert, "one site, one certificate");
    // b.test is covered by a's certificate too, but gets its own.
    let (status, body, b_cert) = tls_get(addr, &h1, "b.test", "b.test");
    assert_eq!((status, body.as_str()), (200, "B / sni=b.test"));
    assert_ne!(b_cert, a_cert);
    let (status, body, _) = tls_get(addr, &h1, "xn--bcher-kva.test", "xn--bcher-kva.TEST");
    assert_eq!((status, body.as_str()), (200, "C / sni=xn--bcher-kva.test"));
    // A Host of another site than the SNI's, and an unknown Host.
    assert_eq!(tls_get(addr, &h1, "a.test", "b.test").0, 421);
    assert_eq!(tls_get(addr, &h1, "a.test", "c.test").0, 421);
    // The alias redirects over https.
    let stream = pki::connect(addr, &h1, "www.a.test");
    let mut c = http::Client::over(stream);
    c.send(b"GET /x HTTP/1.1\r\nHost: www.a.test\r\nConnection: close\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.header("location")), (308, Some("https://a.test/x")));

    // An unknown SNI: no certificate at all, unrecognized_name.
    let refused = pki::handshake(addr, &h1, "c.test").map(drop).expect_err("refused");
    assert_eq!(
        refused,
        rustls::Error::AlertReceived(rustls::AlertDescription::UnrecognisedName)
    );

    // HTTP/2: a stream for another site on a's connection (coalescing
    // onto a name a's certificate covers) gets 421; its own is served.
    let h2 = client(&pki, b"h2");
    let mut tls = pki::connect(addr, &h2, "a.test");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(h2_get(&mut tls, 1, "x.a.test"), (200, "A / sni=a.test".into()));
    assert_eq!(h2_get(&mut tls, 3, "b.test").0, 421);
    assert_eq!(h2_get(&mut tls, 5, "a.test").0, 200, "the connection goes on");
    drop(tls);

    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    let sites: Vec<&str> = log
        .lines()
        .map(|l| {
            let after = l.split("\"site\":").nth(1).unwrap();
            after.split(',').next().unwrap().trim_end_matches('}')
        })
        .collect();
    assert_eq!(
        sites,
        [
            "\"a.test\"",
            "\"a.test\"",
            "\"b.test\"",
            "\"xn--bcher-kva.test\"",
            "null",
            "null",
            "null",
            "\"a.test\"",
            "null",
            "\"a.test\""
        ],
        "{log}"
    );
    let text = metrics.render();
    for (site, n) in [("a.test", 4), ("b.test", 1), ("xn--bcher-kva.test", 1)] {
        let line = format!("peregrine_site_requests_total{{site=\"{site}\",class=\"2xx\"}} {n}");
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    // Labels come from the configuration only.
    assert!(!text.contains("c.test"), "{text}");
}

#[test]
fn with_a_default_site_unknown_and_absent_sni_get_its_certificate() {
    let pki = Pki::new("sites-default");
    let scratch = Scratch::new("peregrine-sites-default");
    let metrics = Arc::new(Metrics::new());
    let server = tls_server(&pki, Some("b.test"), &scratch.path("access.log"), &metrics);
    let addr = server.local_addr();
    let h1 = client(&pki, b"http/1.1");
    let (_, _, b_cert) = tls_get(addr, &h1, "b.test", "b.test");
    // rustls' client checks the certificate against the name it asked
    // for: b's certificate does not cover c.test, so it refuses it, which
    // shows which one came.
    let e = pki::handshake(addr, &h1, "c.test")
        .map(drop)
        .expect_err("b's certificate, not c.test's");
    assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
    // An address (no SNI): b's certificate, checked as an IP name fails
    // the same way; a client that trusts it gets the default site.
    let e = pki::handshake(addr, &h1, "127.0.0.1")
        .map(drop)
        .expect_err("b's certificate");
    assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
    assert!(!b_cert.is_empty());
    server.shutdown();
    server.join().unwrap();
}

#[test]
fn a_site_with_its_own_log_writes_there_and_h2c_streams_find_their_sites() {
    let scratch = Scratch::new("peregrine-sites-logs");
    let (main, own) = (scratch.path("main.log"), scratch.path("a.log"));
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(AccessLog::File(main.clone()))
        .access_log_format("$site $status $host".parse().unwrap())
        .start_sites(sites(false, Some(&own)))
        .unwrap();
    let addr = server.local_addr();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(common::PATIENCE)).unwrap();
    assert_eq!(h2_get(&mut tcp, 1, "a.test"), (200, "A / sni=-".into()));
    assert_eq!(h2_get(&mut tcp, 3, "b.test"), (200, "B / sni=-".into()));
    assert_eq!(h2_get(&mut tcp, 5, "nobody.test").0, 404);
    drop(tcp);
    server.shutdown();
    server.join().unwrap();
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "a.test 200 a.test\n");
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        "b.test 200 b.test\n- 404 nobody.test\n"
    );
}

/// One GET on an HTTP/2 connection (the preface sent with stream 1):
/// the status and the body.
fn h2_get(conn: &mut (impl Read + Write), stream: u32, authority: &str) -> (u16, String) {
    let mut out = Vec::new();
    if stream == 1 {
        out.extend_from_slice(h2c::PREFACE);
        out.extend_from_slice(&h2c::frame(h2c::SETTINGS, 0, 0, &[]));
    }
    out.extend_from_slice(&h2c::frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        stream,
        &h2c::get_head("/", authority),
    ));
    conn.write_all(&out).unwrap();
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 16384]);
    let (mut status, mut body) = (None, Vec::new());
    loop {
        while let Some(f) = h2c::take_frame(&mut buf) {
            if f.stream != stream {
                continue;
            }
            match f.kind {
                HEADERS => status = Some(f.status()),
                h2c::DATA => body.extend_from_slice(&f.payload),
                other => panic!("frame {other} on stream {stream}"),
            }
            if f.flags & END_STREAM != 0 {
                return (status.unwrap(), String::from_utf8(body).unwrap());
            }
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}
