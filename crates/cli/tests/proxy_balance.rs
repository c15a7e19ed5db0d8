//! Several upstreams behind one proxy route (`proxy = [...]` and its
//! `balance` table), with two Python backends on 127.0.0.1: requests
//! spread evenly, a backend killed loses no idempotent GET, a backend's
//! own 5xx takes no backend out unless `fail-status` lists it, and the
//! active check takes a dead backend out and brings it back.
//!
//! The backends are Python's `http.server` (the standard library only);
//! without `python3` on the PATH these tests say so and pass nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use common::{Scratch, PATIENCE};
use test_support::process::Process;

/// A backend that answers every path with its name, and `/health` with
/// 200; prints its port first. Given a port, it binds that one (a
/// backend brought back where it was).
const BACKEND: &str = r#"
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = ("health ok" if self.path == "/health" else "from " + NAME).encode()
        if self.path.startswith("/api/status/"):
            # An error page of that status, the connection kept.
            self.send_response(int(self.path[len("/api/status/"):]))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// Starts backend `name` (on `port`, or any); the process and its port.
fn backend(t: &Scratch, name: &str, port: Option<u16>) -> (Process, u16) {
    let script = t.write("backend.py", BACKEND);
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(name);
    if let Some(port) = port {
        cmd.arg(port.to_string());
    }
    let p = Process::spawn_stdout(&mut cmd);
    let port = p.first_line().trim().parse().unwrap();
    (p, port)
}

/// Serves a site whose `/api/` route has the `balance` table `balance`
/// over the backends on `ports`, with one worker and metrics; the server,
/// its address and its metrics address.
fn serve(t: &Scratch, ports: &[u16], balance: &str) -> (Process, String, String) {
    t.write("site/index.html", "home\n");
    let urls: Vec<String> = ports.iter().map(|p| format!("\"http://127.0.0.1:{p}\"")).collect();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = [{}]\n{balance}",
            urls.join(", ")
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--metrics", "127.0.0.1:0"]),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let addr = common::last_addr(&server.listening());
    (server, addr, metrics)
}

/// One GET; the status and the body.
fn get(addr: &str, path: &str, fields: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: a.test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn metrics(addr: &str) -> String {
    get(addr, "/metrics", "").1
}

/// The value of the series `name{upstream="URL"}`.
fn series(text: &str, name: &str, url: &str) -> Option<u64> {
    let prefix = format!("{name}{{upstream=\"{url}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[test]
fn requests_balance_within_ten_percent_with_one_worker() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-even");
    let (_a, a) = backend(&t, "a", None);
    let (_b, b) = backend(&t, "b", None);
    for policy in ["round-robin", "least-conn"] {
        let (_server, addr, _) = serve(&t, &[a, b], &format!("balance = {{ policy = \"{policy}\" }}\n"));
        let (mut n_a, mut n_b) = (0, 0);
        for _ in 0..200 {
            let (status, body) = get(&addr, "/api/x", "");
            assert_eq!(status, 200, "{policy}: {body}");
            match body.as_str() {
                "from a" => n_a += 1,
                "from b" => n_b += 1,
                other => panic!("{policy}: {other}"),
            }
        }
        // ±10 % of 100 each.
        assert!(
            (90..=110).contains(&n_a) && n_a + n_b == 200,
            "{policy}: a {n_a}, b {n_b}"
        );
    }
}

#[test]
fn a_header_hash_keeps_each_value_on_one_backend() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-header");
    let (_a, a) = backend(&t, "a", None);
    let (_b, b) = backend(&t, "b", None);
    let (_server, addr, _) = serve(&t, &[a, b], "balance = { policy = \"header X-User\" }\n");
    let mut seen = std::collections::HashSet::new();
    for user in 0..20 {
        let field = format!("X-User: user{user}\r\n");
        let first = get(&addr, "/api/x", &field).1;
        for _ in 0..3 {
            assert_eq!(get(&addr, "/api/x", &field).1, first, "user{user}");
        }
        seen.insert(first);
    }
    // Twenty users do not all land on one of two backends.
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[test]
fn killing_one_backend_loses_no_idempotent_get() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-kill");
    let (_a, a) = backend(&t, "a", None);
    let (b_process, b) = backend(&t, "b", None);
    // Out for an hour once out: the gauge below cannot move back meanwhile.
    let (_server, addr, metrics_addr) = serve(&t, &[a, b], "balance = { fail-timeout = 3600 }\n");
    for _ in 0..20 {
        assert_eq!(get(&addr, "/api/x", "").0, 200);
    }
    // Killed (and reaped): its kept-alive connections close, new ones are
    // refused.
    drop(b_process);
    for i in 0..40 {
        let (status, body) = get(&addr, "/api/x", "");
        assert_eq!((status, body.as_str()), (200, "from a"), "GET {i} after the kill");
    }
    // The failures were counted, and passive health took it out.
    let m = metrics(&metrics_addr);
    let b_url = format!("http://127.0.0.1:{b}");
    assert!(
        series(&m, "peregrine_upstream_ejections_total", &b_url).is_some_and(|n| n >= 1),
        "{m}"
    );
    assert_eq!(series(&m, "peregrine_upstream_out_workers", &b_url), Some(1), "{m}");
}

/// One request of `method` to `path`; the status.
fn status_of(addr: &str, method: &str, path: &str) -> u16 {
    let s = TcpStream::connect(addr).unwrap();
    common::exchange(s, method, "a.test", path, &[]).0
}

#[test]
fn a_backends_own_5xx_takes_no_backend_out_unless_fail_status_lists_it() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-5xx");
    let (_a, a) = backend(&t, "a", None);
    let (_b, b) = backend(&t, "b", None);
    // The defaults (max-fails 3, fail-timeout 10): six 500s from one URL
    // and six 501s (http.server implements no OPTIONS) are answers, not
    // failures; every other URL still gets its backends.
    let (_server, addr, metrics_addr) = serve(&t, &[a, b], "");
    for _ in 0..6 {
        assert_eq!(status_of(&addr, "GET", "/api/status/500"), 500);
        assert_eq!(status_of(&addr, "OPTIONS", "/api/x"), 501);
    }
    for i in 0..4 {
        let (status, body) = get(&addr, "/api/x", "");
        assert_eq!(status, 200, "GET {i} after the 5xx: {body}");
    }
    let m = metrics(&metrics_addr);
    for port in [a, b] {
        let url = format!("http://127.0.0.1:{port}");
        assert_eq!(series(&m, "peregrine_upstream_out_workers", &url), Some(0), "{m}");
    }
    // Listed, a status counts: three 503s from each take both out (503
    // with Retry-After for every URL), a 500 still counts for nothing.
    let (_server, addr, _) = serve(
        &t,
        &[a, b],
        "balance = { fail-status = [502, 503, 504] }
",
    );
    for _ in 0..6 {
        assert_eq!(status_of(&addr, "GET", "/api/status/500"), 500);
    }
    assert_eq!(get(&addr, "/api/x", "").0, 200);
    for _ in 0..6 {
        assert_eq!(status_of(&addr, "GET", "/api/status/503"), 503);
    }
    let (status, body) = get(&addr, "/api/x", "");
    assert_eq!(status, 503, "every backend out: {body}");
    assert!(!body.starts_with("from "), "{body}");
}

#[test]
fn active_checks_take_a_dead_backend_out_and_bring_it_back() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-active");
    let (_a, a) = backend(&t, "a", None);
    let (b_process, b) = backend(&t, "b", None);
    // Passive health off: only the check decides.
    let (_server, addr, metrics_addr) = serve(
        &t,
        &[a, b],
        "balance = { max-fails = 0, health-uri = \"/health\", health-interval = 1, health-timeout = 1 }\n",
    );
    let b_url = format!("http://127.0.0.1:{b}");
    let healthy = || {
        // The series appear with the first request (the pools are the
        // worker's, made when it first chooses).
        get(&addr, "/api/x", "");
        series(&metrics(&metrics_addr), "peregrine_upstream_healthy", &b_url)
    };
    test_support::wait_until("b checked and in", || healthy() == Some(1));
    drop(b_process);
    test_support::wait_until("b checked and out", || healthy() == Some(0));
    // Out: every GET goes to a, none is tried on b.
    let m = metrics(&metrics_addr);
    let failures_before: u64 = m
        .lines()
        .filter(|l| l.starts_with(&format!("peregrine_upstream_failures_total{{upstream=\"{b_url}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    for _ in 0..20 {
        assert_eq!(get(&addr, "/api/x", ""), (200, "from a".to_owned()));
    }
    let m = metrics(&metrics_addr);
    let failures_after: u64 = m
        .lines()
        .filter(|l| l.starts_with(&format!("peregrine_upstream_failures_total{{upstream=\"{b_url}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(failures_before, failures_after, "b was tried while out: {m}");
    // Back where it was: the check brings it in again.
    let (_b_again, port) = backend(&t, "b", Some(b));
    assert_eq!(port, b);
    test_support::wait_until("b checked and in again", || healthy() == Some(1));
    test_support::wait_until("a GET answered by b again", || get(&addr, "/api/x", "").1 == "from b");
}

#[test]
fn check_config_shows_the_balance_and_asks_each_health_check() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("balance-check");
    t.write("site/index.html", "home\n");
    let (_a, a) = backend(&t, "a", None);
    // A port nobody listens on: the check cannot connect.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{dead}\"]\n\
             balance = {{ policy = \"ip-hash\", health-uri = \"/health\", health-timeout = 2 }}\n"
        ),
    );
    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("balance = { policy = \"ip-hash\", health-uri = \"/health\", health-timeout = 2 }"),
        "{all}"
    );
    assert!(
        all.contains(&format!("proxy http://127.0.0.1:{a}: health check /health: 200, in")),
        "{all}"
    );
    assert!(
        all.contains(&format!("proxy http://127.0.0.1:{dead}: health check /health: connect")),
        "{all}"
    );
    assert!(all.contains(", OUT"), "{all}");
}

#[test]
fn bad_balance_settings_are_refused_at_their_line() {
    let t = Scratch::new("balance-bad");
    t.write("site/index.html", "home\n");
    for (route, why) in [
        (
            "proxy = [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"]\nbalance = { policy = \"random\" }\n",
            "expected \"round-robin\", \"least-conn\", \"ip-hash\" or \"header NAME\"",
        ),
        (
            "proxy = [\"http://127.0.0.1:9/v1/\", \"http://127.0.0.1:10/v2/\"]\n",
            "the upstreams of one route take the same path",
        ),
        (
            "proxy = \"http://127.0.0.1:9\"\nbalance = { policy = \"least-conn\" }\n",
            "one upstream: there is nothing to balance",
        ),
        (
            "proxy = [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"]\nbalance = { health-interval = 5 }\n",
            "need health-uri",
        ),
        (
            "proxy = [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"]\nbalance = { health-uri = \"health\" }\n",
            "a path beginning with /",
        ),
        (
            "proxy = [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"]\nbalance = { fail-status = [200] }\n",
            "fail-status: 200: a status from 400 to 599",
        ),
        (
            "proxy = [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"]\nbalance = { fail-status = 503 }\n",
            "fail-status: expected a list of statuses",
        ),
    ] {
        let config = t.write(
            "bad.toml",
            format!(
                "version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
                 [[site.route]]\npath = \"/api/*\"\n{route}"
            ),
        );
        let out = common::peregrine()
            .current_dir(t.dir())
            .args(["check-config", "serve", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{route}: {err}");
        assert!(err.contains(why), "{route}: {err}");
    }
}

/// `_redirects` rules with status 200 to a URL (Netlify's proxy rules)
/// come from site files, which anyone who may edit the content writes:
/// `pack` and `serve` both refuse them, naming the rule and why, and the
/// addresses that must never be reached from site files are named so.
#[test]
fn redirects_proxy_rules_are_refused_at_pack_and_at_serve() {
    let t = Scratch::new("redirects-proxy");
    for (rule, why) in [
        (
            "/api/* https://api.example.com/:splat 200",
            "another origin (api.example.com)",
        ),
        ("/api/* http://127.0.0.1:9000/:splat 200", "a loopback address"),
        (
            "/meta http://169.254.169.254/latest/meta-data/ 200",
            "the cloud metadata service",
        ),
        (
            "/meta6 http://[fd00:ec2::254]/latest/ 200!",
            "the cloud metadata service",
        ),
        ("/sock unix:/run/app.sock 200", "a unix: socket"),
    ] {
        let _ = std::fs::remove_dir_all(t.dir().join("site"));
        t.write("site/index.html", "home\n");
        t.write("site/_redirects", format!("/old /new 301\n{rule}\n"));
        let named = format!("line 2: \"{rule}\": refused");
        let pack = common::peregrine()
            .current_dir(t.dir())
            .args(["pack", "site", "-o", "site.prg"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&pack.stderr);
        assert!(!pack.status.success(), "pack {rule}: {err}");
        assert!(err.contains(&named) && err.contains(why), "pack {rule}: {err}");
        // A serve that started anyway would never end: it is waited for
        // PATIENCE at most, then killed.
        let mut serve = common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
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
                panic!("serve {rule}: still running after {PATIENCE:?}: it took the rule");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let mut err = String::new();
        serve.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(!status.success(), "serve {rule}: {err}");
        assert!(err.contains(&named) && err.contains(why), "serve {rule}: {err}");
    }
}
