//! `Server::request_id_header`: each answer returns its request's id as
//! `X-Request-ID` (the access log's `request_id`), deferred answers
//! included; an answer that has one keeps it; off, no answer carries it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use peregrine::{AccessLog, LogFormat, Reply, Request, Response, Router, Server};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-request-id-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn app() -> Router {
    Router::new()
        .get("/", |_: &Request<'_>| Response::text("now"))
        .get("/own", |_: &Request<'_>| {
            Response::text("own").with_header("X-Request-ID", "mine")
        })
        .get("/later", |req: &Request<'_>| {
            let responder = req.defer();
            std::thread::spawn(move || responder.send(Response::text("later")));
            Reply::Later
        })
}

/// GET `target` on a fresh connection: the answer's head.
fn head_of(addr: SocketAddr, target: &str, extra: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    text[..text.find("\r\n\r\n").expect("a head")].to_owned()
}

fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(": ")?;
        n.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The log's `request_id` of each line, in order.
fn logged_ids(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn answers_return_the_request_id_the_log_writes_when_asked() {
    let dir = temp_dir("on");
    let log = dir.join("access.log");
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .request_id_header(true)
        .access_log(AccessLog::File(log.clone()))
        .access_log_format("$request_uri $request_id".parse::<LogFormat>().unwrap())
        .start(app())
        .unwrap();
    let addr = server.local_addr();
    let now = head_of(addr, "/", "");
    let later = head_of(addr, "/later", "");
    let own = head_of(addr, "/own", "");
    // An untrusted client's X-Request-ID is not taken: a new one is made.
    let untrusted = head_of(addr, "/", "X-Request-ID: forged\r\n");
    server.shutdown();
    server.join().unwrap();
    let ids = logged_ids(&log);
    for (head, line) in [(&now, &ids[0]), (&later, &ids[1]), (&untrusted, &ids[3])] {
        let id = field(head, "x-request-id").unwrap_or_else(|| panic!("no X-Request-ID in {head}"));
        assert_eq!(id.len(), 32, "{head}");
        assert!(line.ends_with(&format!(" {id}")), "{line} / {head}");
    }
    assert!(ids[0].starts_with("/ ") && ids[1].starts_with("/later "), "{ids:?}");
    assert_ne!(field(&now, "x-request-id"), field(&untrusted, "x-request-id"));
    // An answer that has one keeps it, once.
    assert_eq!(field(&own, "x-request-id"), Some("mine"), "{own}");
    assert_eq!(
        own.matches("X-Request-ID").count() + own.matches("x-request-id").count(),
        1,
        "{own}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_answer_carries_the_id_by_default() {
    let server = Server::new().bind("127.0.0.1:0").workers(1).start(app()).unwrap();
    let addr = server.local_addr();
    for target in ["/", "/later"] {
        let head = head_of(addr, target, "");
        assert!(field(&head, "x-request-id").is_none(), "{head}");
    }
    server.shutdown();
    server.join().unwrap();
}

/// Over HTTP/3 (aioquic's client writes the answer's head), the same.
#[test]
fn an_http3_answer_returns_the_request_id() {
    let dir = temp_dir("h3");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let tls = peregrine::TlsConfig::from_pem_files(dir.join("cert.pem"), dir.join("key.pem")).unwrap();
    let log = dir.join("access.log");
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .request_id_header(true)
        .access_log(AccessLog::File(log.clone()))
        .access_log_format("$request_uri $request_id".parse::<LogFormat>().unwrap())
        .start(app())
        .unwrap();
    let python = test_support::install::aioquic_python(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv"))
        .unwrap_or_else(|e| panic!("aioquic is needed: {e}"));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {}, \"out\": \"{}\", \"timeout\": 60, \
         \"requests\": [{{\"path\": \"/\"}}, {{\"path\": \"/later\"}}]}}",
        server.local_addr().port(),
        out.display()
    );
    let done = test_support::process::spawn_h3_client(&python, &spec, 120, true)
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    server.shutdown();
    server.join().unwrap();
    let ids = logged_ids(&log);
    for i in 0..2 {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        let id = field(&head, "x-request-id").unwrap_or_else(|| panic!("no x-request-id in {head}"));
        assert!(
            ids.iter().any(|l| l.ends_with(&format!(" {id}"))),
            "{id} not in {ids:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
