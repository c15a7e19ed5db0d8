//! `_redirects` proxy rules (Netlify's status 200 to a URL) behind the
//! operator's `--proxy-allow` list: refused at `pack` and at `serve` for
//! an origin not listed and, listed or not, for loopback (unless the
//! operator allows the network) and the cloud metadata service (never);
//! an allowed rule proxied end to end from a directory and from an
//! archive, its captures unable to move the origin, the upstream's
//! redirect relayed, not followed; an archive checked against the
//! serving operator's list at start and at a swap, not the packer's.
//!
//! The backend is Python's `http.server` on 127.0.0.1 (allowed with
//! `--proxy-allow-network 127.0.0.0/8`); without `python3` on the PATH
//! the end-to-end tests say so and pass nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};

use common::{Scratch, PATIENCE};
use test_support::process::Process;

/// Answers every GET with what it saw (path, Host, Via,
/// X-Forwarded-For, X-Forwarded-Host), and `/v1/redirect` with a 302 to
/// the metadata service, which a proxy that followed redirects would
/// fetch; `/seen` lists the paths asked so far.
const BACKEND: &str = r#"
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN = []

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/seen":
            body = " ".join(SEEN).encode()
        else:
            SEEN.append(self.path)
            if self.path == "/v1/redirect":
                self.send_response(302)
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            h = self.headers
            body = ("path=%s host=%s via=%s xff=%s xfh=%s" % (
                self.path, h.get("Host"), h.get("Via"), h.get("X-Forwarded-For"), h.get("X-Forwarded-Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

fn backend(t: &Scratch) -> (Process, u16) {
    let script = t.write("backend.py", BACKEND);
    let p = Process::spawn_stdout(Command::new("python3").arg(script));
    let port = p.first_line().trim().parse().unwrap();
    (p, port)
}

/// One GET to `addr` with `Connection: close`: status, head, body.
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_owned(), body.to_owned())
}

fn pack(t: &Scratch, out: &str, flags: &[String]) -> Output {
    common::peregrine()
        .current_dir(t.dir())
        .args(["pack", "site", "-o", out])
        .args(flags)
        .output()
        .unwrap()
}

/// A `serve` that must refuse to start: its exit status and stderr (one
/// that started anyway is killed after PATIENCE, and the test fails).
fn serve_refused(t: &Scratch, root: &str, flags: &[String]) -> String {
    let mut serve = common::peregrine()
        .current_dir(t.dir())
        .args(["serve", root, "--bind", "127.0.0.1:0"])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = serve.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = serve.kill();
            let _ = serve.wait();
            panic!("serve {root} {flags:?}: still running after {PATIENCE:?}: it took the rule");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut err = String::new();
    serve.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!status.success(), "serve {root} {flags:?}: {err}");
    err
}

fn flags(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn listed_origins_at_never_addresses_are_refused_at_pack_and_at_serve() {
    let t = Scratch::new("proxy-rules-never");
    for (rule, allow, why) in [
        // On the list, but loopback without --proxy-allow-network.
        (
            "/api/* http://127.0.0.1:9000/:splat 200",
            flags(&["--proxy-allow", "http://127.0.0.1:9000"]),
            "a loopback address",
        ),
        (
            "/api/* http://localhost:9000/:splat 200",
            flags(&[
                "--proxy-allow",
                "http://localhost:9000",
                "--proxy-allow-network",
                "10.0.0.0/8",
            ]),
            "a loopback address",
        ),
        // On the list, its network allowed: the metadata service stays shut.
        (
            "/meta http://169.254.169.254/latest/meta-data/ 200",
            flags(&[
                "--proxy-allow",
                "http://169.254.169.254",
                "--proxy-allow-network",
                "169.254.0.0/16",
            ]),
            "the cloud metadata service",
        ),
        // Listed origins are IP literals (TEST-NET-1): `serve` resolves
        // every listed name at start, and this machine may have no DNS.
        (
            "/api/* https://api.example.com/:splat 200",
            flags(&["--proxy-allow", "https://192.0.2.10"]),
            "another origin (api.example.com)",
        ),
        (
            "/api/* https://192.0.2.10:8443/:splat 200",
            flags(&["--proxy-allow", "https://192.0.2.10"]),
            "another origin (192.0.2.10)",
        ),
    ] {
        let _ = std::fs::remove_dir_all(t.dir().join("site"));
        t.write("site/index.html", "home\n");
        t.write("site/_redirects", format!("{rule}\n"));
        let named = format!("line 1: \"{rule}\": refused");
        let out = pack(&t, "site.prg", &allow);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "pack {rule} {allow:?}: {err}");
        assert!(
            err.contains(&named) && err.contains(why),
            "pack {rule} {allow:?}: {err}"
        );
        let err = serve_refused(&t, "site", &allow);
        assert!(
            err.contains(&named) && err.contains(why),
            "serve {rule} {allow:?}: {err}"
        );
    }
}

#[test]
fn an_allowed_proxy_rule_is_proxied_from_a_directory_and_from_an_archive() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("proxy-rules-e2e");
    let (_backend, port) = backend(&t);
    let origin = format!("http://127.0.0.1:{port}");
    t.write("site/index.html", "home\n");
    t.write("site/local.txt", "a file\n");
    t.write(
        "site/_redirects",
        format!("/api/* {origin}/v1/:splat 200\n/go {origin}/v1/redirect 200\n/local.txt {origin}/v1/shadowed 200\n"),
    );
    let allow = flags(&["--proxy-allow", &origin, "--proxy-allow-network", "127.0.0.0/8"]);
    let out = pack(&t, "site.prg", &allow);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for root in ["site", "site.prg"] {
        let server = Process::spawn(
            common::peregrine()
                .current_dir(t.dir())
                .args(["serve", root, "--bind", "127.0.0.1:0", "--workers", "1"])
                .args(&allow),
        );
        let addr = common::last_addr(&server.listening());
        let (status, _, body) = get(&addr, "/api/hello/world?q=1");
        assert_eq!(status, 200, "{root}: {body}");
        // The origin's own Host; the forwarding fields as a --proxy route's.
        assert!(
            body.starts_with(&format!(
                "path=/v1/hello/world?q=1 host=127.0.0.1:{port} via=1.1 peregrine-"
            )),
            "{root}: {body}"
        );
        assert!(
            body.contains("xff=127.0.0.1") && body.contains("xfh=site.test"),
            "{root}: {body}"
        );
        // A file is served before a rule without `!`.
        let (status, _, body) = get(&addr, "/local.txt");
        assert_eq!((status, body.as_str()), (200, "a file\n"), "{root}");
        // Captures cannot move the origin or climb out of /v1/.
        for (path, want) in [
            ("/api/%40evil.example/x", "path=/v1/%40evil.example/x "),
            ("/api/a%3A%2F%2Fevil.example", ""),
            ("/api/..%2F..%2Fadmin", ""),
        ] {
            let (status, _, body) = get(&addr, path);
            if want.is_empty() {
                // Refused (400), resolved out of the rule's reach by the
                // path's normalisation (404), or sent canonical: never a
                // dot segment, never above /v1/.
                assert!(
                    matches!(status, 400 | 404)
                        || (status == 200 && body.starts_with("path=/v1/") && !body.contains("..")),
                    "{root} {path}: {status} {body}"
                );
            } else {
                assert_eq!(status, 200, "{root} {path}: {body}");
                assert!(body.starts_with(want), "{root} {path}: {body}");
            }
            assert!(
                status != 200 || body.contains(&format!("host=127.0.0.1:{port}")),
                "{root} {path}: {body}"
            );
        }
        // The upstream's redirect is relayed, never followed.
        let (status, head, _) = get(&addr, "/go");
        assert_eq!(status, 302, "{root}: {head}");
        assert!(
            head.contains("\r\nlocation: http://169.254.169.254/latest/meta-data/")
                || head.contains("\r\nLocation: http://169.254.169.254/latest/meta-data/"),
            "{root}: {head}"
        );
        drop(server);
    }
    let (_, _, seen) = get(&format!("127.0.0.1:{port}"), "/seen");
    assert_eq!(
        seen.matches("/v1/redirect").count(),
        2,
        "one per server, none followed: {seen}"
    );
    assert!(!seen.contains("meta-data") && !seen.contains("shadowed"), "{seen}");

    // The archive is checked against the serving operator's list, not
    // the packer's: without it, or with another origin, it is refused.
    for serving in [
        flags(&[]),
        flags(&[
            "--proxy-allow",
            "http://127.0.0.1:1",
            "--proxy-allow-network",
            "127.0.0.0/8",
        ]),
    ] {
        let err = serve_refused(&t, "site.prg", &serving);
        assert!(
            err.contains("_redirects rule") && err.contains("refused") && err.contains(&origin),
            "{serving:?}: {err}"
        );
    }
}

#[test]
fn a_swapped_in_archive_with_a_proxy_rule_the_server_does_not_allow_is_refused() {
    let t = Scratch::new("proxy-rules-swap");
    t.write("site/index.html", "first\n");
    let out = pack(&t, "site.prg", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let server = Process::spawn(common::peregrine().current_dir(t.dir()).args([
        "serve",
        "site.prg",
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]));
    let addr = common::last_addr(&server.listening());
    assert_eq!(get(&addr, "/").2, "first\n");
    // Packed where the list allowed it; this server's list is empty.
    t.write("site/index.html", "second\n");
    t.write("site/_redirects", "/api/* https://api.example.com/:splat 200\n");
    let out = pack(&t, "next.prg", &flags(&["--proxy-allow", "https://api.example.com"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(t.dir().join("next.prg"), t.dir().join("site.prg")).unwrap();
    let line = server.line("refusing the new archive");
    assert!(line.contains("another origin (api.example.com)"), "{line}");
    assert_eq!(get(&addr, "/").2, "first\n");
    let (status, _, _) = get(&addr, "/api/x");
    assert_eq!(status, 404);
}

#[test]
fn check_config_lists_the_allowed_proxy_rules_and_refuses_the_others() {
    let t = Scratch::new("proxy-rules-check");
    t.write("site/index.html", "home\n");
    t.write("site/_redirects", "/api/* http://127.0.0.1:9/v1/:splat 200\n");
    let allow = flags(&[
        "--proxy-allow",
        "http://127.0.0.1:9",
        "--proxy-allow-network",
        "127.0.0.0/8",
    ]);
    let out = pack(&t, "site.prg", &allow);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for root in ["site", "site.prg"] {
        let check = |flags: &[String]| {
            common::peregrine()
                .current_dir(t.dir())
                .args(["check-config", "serve", root])
                .args(flags)
                .output()
                .unwrap()
        };
        let out = check(&allow);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{root}: {err}");
        assert!(
            err.contains("proxy rule /api/* -> http://127.0.0.1:9/v1/:splat: allowed (proxy-allow)"),
            "{root}: {err}"
        );
        let out = check(&[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{root}: {err}");
        assert!(
            err.contains("refused") && err.contains("a loopback address"),
            "{root}: {err}"
        );
    }
}
