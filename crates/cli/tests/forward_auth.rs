//! A route's `forward-auth` (issue 27) end to end: a small Python auth
//! service (stdlib `http.server`, as oauth2-proxy or Authelia would
//! answer: 200 with `Remote-User` for a good session cookie, else a 302 to
//! its login page with a `Set-Cookie`) in front of a proxied backend and
//! of files, from a directory site and its archive, over HTTPS with
//! HTTP/1.1 and HTTP/2 (curl) and HTTP/3 (aioquic). The backend sees the
//! service's `Remote-User`, never the client's; a refused request never
//! reaches it; the service down is a 502 with no upstream text.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;

use common::Scratch;
use test_support::process::Process;

/// The auth service: its answer from the request's cookie. A refusal's
/// body lists the fields the subrequest carried, for the tests to read.
const AUTH_SERVICE: &str = r#"
import http.server, sys

class Auth(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, fields, body):
        self.send_response(status)
        for name, value in fields:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        cookie = self.headers.get("Cookie", "")
        seen = "".join(f"{k.lower()}: {v}\n" for k, v in self.headers.items())
        if self.path != "/verify":
            self.answer(404, [], b"wrong path " + self.path.encode())
        elif "session=good" in cookie:
            self.answer(200, [("Remote-User", "alice"), ("Remote-Email", "alice@example.com")], b"")
        elif "session=silent" in cookie:
            self.answer(200, [], b"")
        elif "session=slow" in cookie:
            # Past the route's 1 s timeout, within the default 10 s.
            import time
            time.sleep(4)
            self.answer(200, [("Remote-User", "alice")], b"")
        elif "session=crash" in cookie:
            self.answer(500, [], b"auth internal secret")
        else:
            uri = self.headers.get("X-Forwarded-Uri", "")
            self.answer(302, [("Location", "https://login.test/?rd=" + uri),
                              ("Set-Cookie", "csrf=1; Path=/; HttpOnly")], seen.encode())

if len(sys.argv) > 1:
    import socketserver
    class UnixAuth(Auth):
        def address_string(self):
            return "unix"
    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True
    server = Server(sys.argv[1], UnixAuth)
    print("0", flush=True)
else:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Auth)
    print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// Starts the auth service; the process and its address.
fn auth_service(t: &Scratch) -> (Process, SocketAddr) {
    let script = t.write("auth.py", AUTH_SERVICE);
    let auth = Process::spawn_stdout(Command::new("python3").arg(script));
    let port: u16 = auth.first_line().trim().parse().unwrap();
    (auth, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// A backend that answers every request with its head and body, and
/// records their request lines.
fn backend() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let log = log.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    log.lock()
                        .unwrap()
                        .push(head.lines().next().unwrap_or_default().to_owned());
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let mut answer = format!("backend saw:\n{head}\n").into_bytes();
                    answer.extend_from_slice(&body);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                        answer.len()
                    );
                    if out.write_all(head.as_bytes()).is_err() || out.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// The routes both sites have: a proxy and files behind the service, and
/// files behind a service that is down.
fn routes(auth: SocketAddr, backend: SocketAddr, dead: u16) -> String {
    format!(
        "[[site.route]]\npath = \"/api/*\"\nproxy = \"http://{backend}\"\n\
         forward-auth = {{ url = \"http://{auth}/verify\", copy-headers = [\"Remote-User\", \"Remote-Email\"] }}\n\
         [[site.route]]\npath = \"/private/*\"\n\
         forward-auth = {{ url = \"http://{auth}/verify\", copy-headers = [\"Remote-User\"] }}\n\
         cors = {{ origins = [\"https://app.test\"], credentials = true }}\n\
         [[site.route]]\npath = \"/down/*\"\nforward-auth = {{ url = \"http://127.0.0.1:{dead}/verify\" }}\n\
         [[site.route]]\npath = \"/slow/*\"\nforward-auth = {{ url = \"http://{auth}/verify\", timeout = 1 }}\n"
    )
}

/// The server over HTTPS (and HTTP/3) with a directory site (`localhost`)
/// and its archive (`arc.test`), each with [`routes`]; the auth service,
/// the backend's log and the server's port.
struct Setup {
    _t: Scratch,
    _auth: Process,
    _server: Process,
    seen: Arc<Mutex<Vec<String>>>,
    port: u16,
    /// The metrics listener's address.
    metrics: String,
}

impl Setup {
    /// Waits until the checks counted are `want` (allowed, refused,
    /// failed): a check is counted when the worker's turn ends, just after
    /// its answer was written, so a scrape may come between the two.
    fn wait_counted(&self, want: [u64; 3]) {
        let what = format!("checks counted as {want:?} (allowed, refused, failed)");
        test_support::wait_until(&what, || self.counted() == want);
    }

    /// The checks counted so far: allowed, refused, failed.
    fn counted(&self) -> [u64; 3] {
        let text = common::get(&self.metrics, "/metrics");
        ["allowed", "refused", "failed"].map(|outcome| {
            let name = format!("peregrine_forward_auth_{outcome}_total ");
            text.lines()
                .find_map(|l| l.strip_prefix(name.as_str()))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .trim()
                .parse()
                .unwrap()
        })
    }
}

fn start(tag: &str) -> Setup {
    let t = Scratch::new(tag);
    common::packed(
        t.dir(),
        &[
            ("index.html", "home\n"),
            ("private/secret.txt", "secret\n"),
            ("private/team/t.txt", "team\n"),
            ("_headers", "/private/team/*\n  Basic-Auth: carol:hunter2\n"),
            ("down/x.txt", "x\n"),
        ],
        &[],
    );
    let (auth, auth_addr) = auth_service(&t);
    let (backend, seen) = backend();
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "arc.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_file = t.write("cert.pem", cert.pem());
    let key_file = t.write("key.pem", key.serialize_pem());
    let routes = routes(auth_addr, backend, dead);
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"localhost\"]\nroot = \"site\"\ndefault = true\n{routes}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{routes}"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--tls-cert")
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file)
            .args(["--metrics", "127.0.0.1:0"]),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let port = test_support::process::last_addr(&server.line(" on https://"))
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    Setup {
        _t: t,
        _auth: auth,
        _server: server,
        seen,
        port,
        metrics,
    }
}

/// An answer: status, head lines (names lowercase), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One request with curl over `version` (`--http1.1` or `--http2`).
fn curl(setup: &Setup, version: &str, host: &str, path: &str, fields: &[&str], body: Option<&str>) -> Answer {
    let body: Vec<&str> = body.map(|b| vec!["--data-binary", b]).unwrap_or_default();
    curl_with(setup, version, host, path, fields, &body)
}

/// `curl` with more of curl's arguments.
fn curl_with(setup: &Setup, version: &str, host: &str, path: &str, fields: &[&str], args: &[&str]) -> Answer {
    let mut cmd = Command::new(common::curl());
    cmd.args(["-sS", "-k", "-i", "--max-time", "30", version]);
    for f in fields {
        cmd.args(["-H", f]);
    }
    cmd.args(args);
    let out = cmd
        .args(["--resolve", &format!("{host}:{}:127.0.0.1", setup.port)])
        .arg(format!("https://{host}:{}{path}", setup.port))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {text:?}"));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        fields,
        body: body.to_owned(),
    }
}

const PROTOCOLS: [&str; 2] = ["--http1.1", "--http2"];
const HOSTS: [&str; 2] = ["localhost", "arc.test"];

/// A good session reaches the backend with the service's `Remote-User`
/// and `Remote-Email`, and the client's forged `Remote-User` is gone; a
/// session the service names no user for reaches it with none; a body
/// goes along.
#[test]
fn an_allowed_request_reaches_the_backend_with_the_services_fields_only() {
    let s = start("fwd-allowed");
    let big = s._t.write("big.txt", "x".repeat(1_000_000));
    for version in PROTOCOLS {
        for host in HOSTS {
            let forged = ["Cookie: session=good", "Remote-User: mallory", "remote-email: m@evil"];
            let a = curl(&s, version, host, "/api/items?id=3", &forged, None);
            assert_eq!(a.status, 200, "{version} {host}: {a:?}");
            assert!(
                a.body.starts_with("backend saw:\nGET /api/items?id=3 HTTP/1.1\r\n"),
                "{a:?}"
            );
            assert!(a.body.contains("\nRemote-User: alice\r\n"), "{a:?}");
            assert!(a.body.contains("\nRemote-Email: alice@example.com\r\n"), "{a:?}");
            assert!(!a.body.contains("mallory") && !a.body.contains("m@evil"), "{a:?}");
            assert_eq!(a.field("cache-control"), Some("private"), "{a:?}");

            let silent = ["Cookie: session=silent", "Remote-User: mallory"];
            let a = curl(&s, version, host, "/api/silent", &silent, None);
            assert_eq!(a.status, 200, "{version} {host}: {a:?}");
            assert!(!a.body.to_ascii_lowercase().contains("remote-user"), "{a:?}");

            let a = curl(&s, version, host, "/api/post", &forged, Some("a body of 17 bytes"));
            assert_eq!(a.status, 200, "{a:?}");
            assert!(a.body.starts_with("backend saw:\nPOST /api/post HTTP/1.1\r\n"), "{a:?}");
            assert!(a.body.ends_with("\r\n\na body of 17 bytes"), "{a:?}");
            // Past the 64 KiB read whole and the 256 KiB body pipe: it waits
            // in the connection, then streams once the service allowed it.
            let a = curl(
                &s,
                version,
                host,
                "/api/big",
                &forged,
                Some(&format!("@{}", big.display())),
            );
            assert_eq!(a.status, 200, "{version} {host}");
            assert!(
                a.body.ends_with(&format!("\r\n\n{}", "x".repeat(1_000_000))),
                "{version} {host}"
            );
            assert!(!a.body.contains("mallory"));
            // Refused, the rest of the body is not read. (Over HTTP/2 the
            // stream is then reset with NO_ERROR, RFC 9113 §8.1, which
            // curl 7.88 takes for an error whatever answered early: a
            // static file's POST too. So HTTP/1.1 only.)
            if version == "--http1.1" {
                let a = curl(
                    &s,
                    version,
                    host,
                    "/api/big-refused",
                    &[],
                    Some(&format!("@{}", big.display())),
                );
                assert_eq!(a.status, 302, "{version} {host}");
            }
        }
    }
}

/// No session: the service's 302 goes to the client (Location,
/// Set-Cookie, body), private; the backend never sees the request; the
/// subrequest carried the client's fields and the forwarding ones.
#[test]
fn a_refused_request_gets_the_services_redirect_and_never_reaches_the_backend() {
    let s = start("fwd-refused");
    for version in PROTOCOLS {
        for host in HOSTS {
            let path = format!("/api/refused{}?q=1", &version[6..]);
            let a = curl(
                &s,
                version,
                host,
                &path,
                &["Authorization: Bearer t0k", "Remote-User: mallory"],
                None,
            );
            assert_eq!(a.status, 302, "{version} {host}: {a:?}");
            assert_eq!(
                a.field("location"),
                Some(format!("https://login.test/?rd={path}").as_str())
            );
            assert_eq!(a.field("set-cookie"), Some("csrf=1; Path=/; HttpOnly"));
            assert_eq!(a.field("cache-control"), Some("private"));
            for line in [
                "x-forwarded-method: GET\n".to_owned(),
                format!("x-forwarded-uri: {path}\n"),
                "x-forwarded-proto: https\n".to_owned(),
                format!("x-forwarded-host: {host}:{}\n", s.port),
                "x-forwarded-for: 127.0.0.1\n".to_owned(),
                "authorization: Bearer t0k\n".to_owned(),
            ] {
                assert!(a.body.contains(&line), "{version} {host}: {line:?} in {}", a.body);
            }
            assert!(!a.body.contains("mallory"), "{}", a.body);
            let posted = curl(&s, version, host, "/api/refused-post", &[], Some("data"));
            assert_eq!(posted.status, 302);
            assert!(posted.body.contains("x-forwarded-method: POST\n"), "{}", posted.body);
        }
    }
    let seen = s.seen.lock().unwrap();
    assert!(seen.iter().all(|l| !l.contains("refused")), "{seen:?}");
}

/// Files and an archive: the page only with a good session, private;
/// otherwise the redirect, never the page; the service's 500 is the
/// engine's page, without the service's text.
#[test]
fn files_and_archives_are_held_until_the_service_allows_them() {
    let s = start("fwd-files");
    for version in PROTOCOLS {
        for host in HOSTS {
            let a = curl(
                &s,
                version,
                host,
                "/private/secret.txt",
                &["Cookie: session=good"],
                None,
            );
            assert_eq!((a.status, a.body.as_str()), (200, "secret\n"), "{version} {host}");
            assert_eq!(a.field("cache-control"), Some("private, no-cache"), "{a:?}");
            // A file that does not exist, a range, a condition: the
            // service is asked first; allowed, the range is served.
            let a = curl(&s, version, host, "/private/none.txt", &[], None);
            assert_eq!(a.status, 302, "{version} {host}: {a:?}");
            let range = ["Range: bytes=0-3", "If-None-Match: \"x\""];
            let a = curl(&s, version, host, "/private/secret.txt", &range, None);
            assert_eq!(a.status, 302, "{version} {host}: {a:?}");
            let a = curl(
                &s,
                version,
                host,
                "/private/secret.txt",
                &["Range: bytes=0-3", "Cookie: session=good"],
                None,
            );
            assert_eq!((a.status, a.body.as_str()), (206, "secr"), "{version} {host}: {a:?}");
            let a = curl(&s, version, host, "/private/secret.txt", &[], None);
            assert_eq!(a.status, 302, "{version} {host}: {a:?}");
            assert!(!a.body.contains("secret\n"), "{a:?}");
            let a = curl(
                &s,
                version,
                host,
                "/private/secret.txt",
                &["Cookie: session=crash"],
                None,
            );
            assert_eq!(
                (a.status, a.body.as_str()),
                (500, "500 Internal Server Error\n"),
                "{a:?}"
            );
            // With CORS on the route: a preflight is answered before the
            // service is asked (browsers send no cookie with one); the
            // answers the check decides carry the route's CORS fields.
            let origin = "Origin: https://app.test";
            let pre = ["-X", "OPTIONS"];
            let a = curl_with(
                &s,
                version,
                host,
                "/private/secret.txt",
                &[origin, "Access-Control-Request-Method: GET"],
                &pre,
            );
            assert_eq!(a.status, 204, "{version} {host}: {a:?}");
            for cookie in ["Cookie: session=good", "Cookie: session=none"] {
                let a = curl(&s, version, host, "/private/secret.txt", &[origin, cookie], None);
                assert_eq!(
                    a.field("access-control-allow-origin"),
                    Some("https://app.test"),
                    "{a:?}"
                );
                assert_eq!(a.field("access-control-allow-credentials"), Some("true"), "{a:?}");
                assert!(a.field("vary").is_some_and(|v| v.contains("Origin")), "{a:?}");
            }
        }
    }
    s.wait_counted([12, 16, 4]);
}

/// A path `_headers` protects with Basic-Auth under a forward-auth route
/// needs both: the password check (off the loop, on a verifier thread)
/// starts only once the service allowed the request, so a right password
/// with no session gets the service's redirect, never the page.
#[test]
fn headers_basic_auth_under_forward_auth_needs_both() {
    let s = start("fwd-basic");
    // carol:hunter2
    let creds = "Authorization: Basic Y2Fyb2w6aHVudGVyMg==";
    for host in HOSTS {
        let a = curl(&s, "--http1.1", host, "/private/team/t.txt", &[creds], None);
        assert_eq!(a.status, 302, "{host}: {a:?}");
        assert!(!a.body.contains("team\n"), "{a:?}");
        let a = curl(
            &s,
            "--http2",
            host,
            "/private/team/t.txt",
            &["Cookie: session=good"],
            None,
        );
        assert_eq!(a.status, 401, "{host}: {a:?}");
        let a = curl(
            &s,
            "--http2",
            host,
            "/private/team/t.txt",
            &["Cookie: session=good", creds],
            None,
        );
        assert_eq!((a.status, a.body.as_str()), (200, "team\n"), "{host}: {a:?}");
        let wrong = "Authorization: Basic Y2Fyb2w6d3Jvbmc=";
        let a = curl(
            &s,
            "--http1.1",
            host,
            "/private/team/t.txt",
            &["Cookie: session=good", wrong],
            None,
        );
        assert_eq!(a.status, 401, "{host}: {a:?}");
    }
}

/// The service silent past the route's `timeout` (1 s; it answers after
/// 4 s, within the default 10 s): 504, the engine's page.
#[test]
fn a_silent_service_is_a_504() {
    let s = start("fwd-silent");
    for version in PROTOCOLS {
        let a = curl(&s, version, "localhost", "/slow/x.txt", &["Cookie: session=slow"], None);
        assert_eq!((a.status, a.body.as_str()), (504, "504 Gateway Timeout\n"), "{version}");
    }
    s.wait_counted([0, 0, 2]);
}

/// The service down: 502, the engine's page, nothing of the service's.
#[test]
fn the_service_down_is_a_502_with_no_upstream_text() {
    let s = start("fwd-down");
    for version in PROTOCOLS {
        for host in HOSTS {
            let a = curl(&s, version, host, "/down/x.txt", &["Cookie: session=good"], None);
            assert_eq!(
                (a.status, a.body.as_str()),
                (502, "502 Bad Gateway\n"),
                "{version} {host}"
            );
        }
    }
    s.wait_counted([0, 0, 4]);
}

/// The same over HTTP/3 (aioquic): allowed, refused, files.
#[test]
fn forward_auth_holds_over_http3() {
    let s = start("fwd-h3");
    for host in HOSTS {
        let answers = common::h3(
            s.port,
            host,
            &[
                (
                    "GET",
                    "/api/h3?x=1",
                    &[("cookie", "session=good"), ("remote-user", "mallory")],
                ),
                ("GET", "/api/h3-refused", &[]),
                ("GET", "/private/secret.txt", &[("cookie", "session=good")]),
                ("GET", "/private/secret.txt", &[]),
            ],
        );
        let (status, fields, body) = &answers[0];
        assert_eq!(*status, 200, "{host}: {body}");
        assert!(body.starts_with("backend saw:\nGET /api/h3?x=1 HTTP/1.1\r\n"), "{body}");
        assert!(
            body.contains("\nRemote-User: alice\r\n") && !body.contains("mallory"),
            "{body}"
        );
        assert!(
            fields.contains(&("cache-control".into(), "private".into())),
            "{fields:?}"
        );
        let (status, fields, _) = &answers[1];
        assert_eq!(*status, 302, "{host}");
        assert!(fields.contains(&("location".into(), "https://login.test/?rd=/api/h3-refused".into())));
        assert!(fields.contains(&("set-cookie".into(), "csrf=1; Path=/; HttpOnly".into())));
        assert_eq!((answers[2].0, answers[2].2.as_str()), (200, "secret\n"), "{host}");
        assert_eq!(answers[3].0, 302, "{host}");
    }
    // Many checks in flight at once on one connection, allowed and
    // refused in turn: each verdict reaches its own request.
    let paths: Vec<String> = (0..24).map(|i| format!("/api/many-{i}")).collect();
    let good: &[(&str, &str)] = &[("cookie", "session=good")];
    let reqs: Vec<common::H3Request<'_>> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| ("GET", p.as_str(), if i % 2 == 0 { good } else { &[] }))
        .collect();
    let answers = common::h3(s.port, "localhost", &reqs);
    for (i, (status, fields, body)) in answers.iter().enumerate() {
        let path = &paths[i];
        if i % 2 == 0 {
            assert_eq!(*status, 200, "{path}: {body}");
            assert!(
                body.starts_with(&format!("backend saw:\nGET {path} HTTP/1.1\r\n")),
                "{path}: {body}"
            );
        } else {
            assert_eq!(*status, 302, "{path}");
            let location = format!("https://login.test/?rd={path}");
            assert!(fields.contains(&("location".into(), location)), "{path}: {fields:?}");
        }
    }
    let seen = s.seen.lock().unwrap();
    assert!(seen.iter().all(|l| !l.contains("refused")), "{seen:?}");
    for (i, path) in paths.iter().enumerate() {
        let reached = seen.iter().any(|l| l.starts_with(&format!("GET {path} ")));
        assert_eq!(reached, i % 2 == 0, "{path}: {seen:?}");
    }
}

/// `forward-auth` with `basic-auth` on one route, or a field the server
/// writes itself among `copy-headers`, is refused at its line.
#[test]
fn forward_auth_settings_that_cannot_work_are_refused_at_start() {
    let t = Scratch::new("fwd-refusals");
    t.write("site/index.html", "home\n");
    let hash = bcrypt::hash("wonderland", 4).unwrap();
    let config = t.write(
        "auth.toml",
        format!(
            "version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/a/*\"\nbasic-auth = {{ users = [\"alice:{hash}\"] }}\n\
             forward-auth = {{ url = \"http://127.0.0.1:9/verify\" }}\n\
             [[site.route]]\npath = \"/b/*\"\n\
             forward-auth = {{ url = \"http://127.0.0.1:9/verify\", copy-headers = [\"Content-Length\"] }}\n\
             [[site.route]]\npath = \"/c/*\"\nforward-auth = {{ copy-headers = [\"Remote-User\"] }}\n"
        ),
    );
    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let f = config.display();
    for line in [
        format!("{f}:8: forward-auth: a route has basic-auth or forward-auth, not both"),
        format!("{f}:11: forward-auth: copy-headers: Content-Length is written by the server itself"),
        format!("{f}:14: forward-auth: no url"),
    ] {
        assert!(err.contains(&line), "{line} in {err}");
    }
}

/// The start says what it says of `basic-auth` routes of `forward-auth`
/// ones: a `public` dropped from their answers, and a `--proxy` prefix
/// that takes their paths before the check.
#[test]
fn the_start_warns_of_what_goes_around_a_forward_auth_route() {
    let t = Scratch::new("fwd-notes");
    t.write("site/index.html", "home\n");
    let (backend, _) = backend();
    let config = t.write(
        "peregrine.toml",
        "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
         [[site.route]]\npath = \"/api/*\"\nforward-auth = { url = \"http://127.0.0.1:9/verify\" }\n\
         headers = { Cache-Control = \"public, max-age=60\" }\n",
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--proxy")
            .arg(format!("/api/=http://{backend}")),
    );
    let said = server.lines(&[
        "site a.test, route /api/*: its forward-auth does not protect paths under --proxy /api/: the proxy sends \
         them upstream first, unchecked",
        "site a.test, route /api/*: has forward-auth, so `public` is dropped from its Cache-Control",
    ]);
    assert!(!said.is_empty());
}

/// A service on a Unix socket (`unix:PATH`, the path of the subrequest in
/// `uri`), as the proxy takes upstreams, under the sandbox.
#[test]
fn a_unix_socket_service_is_asked_with_its_uri() {
    let t = Scratch::new("fwd-unix");
    t.write("site/private/a.txt", "a\n");
    let script = t.write("auth.py", AUTH_SERVICE);
    let socket = t.dir().join("auth.sock");
    let auth = Process::spawn_stdout(Command::new("python3").arg(script).arg(&socket));
    assert_eq!(auth.first_line().trim(), "0");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/private/*\"\n\
             forward-auth = {{ url = \"unix:{}\", uri = \"/verify\" }}\n",
            socket.display()
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = test_support::process::last_addr(&server.listening());
    let ask = |cookie: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(common::PATIENCE)).unwrap();
        write!(
            s,
            "GET /private/a.txt HTTP/1.1\r\nHost: a.test\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let allowed = ask("session=good");
    assert!(
        allowed.starts_with("HTTP/1.1 200") && allowed.ends_with("\r\n\r\na\n"),
        "{allowed}"
    );
    let refused = ask("session=none");
    assert!(refused.starts_with("HTTP/1.1 302"), "{refused}");
    assert!(refused.contains("x-forwarded-uri: /private/a.txt\n"), "{refused}");
    drop(auth);
}
