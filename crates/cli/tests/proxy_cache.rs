//! The proxy's response cache (`--proxy-cache`, `peregrine::proxy::cache`)
//! in front of a Python backend that counts the requests it gets: a
//! second GET does not reach it, `Vary` keeps clients' variants apart,
//! `private`, `no-store`, `Set-Cookie` and credentials are not served
//! from the cache, a stale answer stands in for a dead backend only with
//! `stale-if-error`, 50 concurrent misses make one request, the size
//! bound evicts the least recently used, a purge empties it, and an
//! HTTP/2 client gets hits too; a hit answers If-None-Match and
//! If-Modified-Since with 304 and one range with 206, and so does a miss
//! (from the whole answer it stored); a weak If-Range gets the whole
//! answer; behind forward-auth one user's answer never reaches another;
//! an unsafe method's success invalidates; SIGWINCH purges.
//!
//! The backend is Python's `http.server` (the standard library only);
//! without `python3` on the PATH these tests say so and pass nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{Scratch, PATIENCE};
use test_support::process::Process;

/// Answers by path (the query is part of what it counts); `/count?PATH`
/// says how many requests PATH got.
const BACKEND: &str = r#"
import sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {}
LOCK = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.unsafe()

    def do_DELETE(self):
        self.unsafe()

    def unsafe(self):
        # Counted with the path's GETs; `X-Fail` makes it a 500.
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        with LOCK:
            COUNTS[self.path] = COUNTS.get(self.path, 0) + 1
        status = 500 if self.headers.get("X-Fail") else 200
        self.answer(status, [("Cache-Control", "no-store")], b"done")

    def do_GET(self):
        path = self.path
        if path.startswith("/auth"):
            # The forward-auth service: `X-Key` names the user.
            user = {"k-alice": "alice", "k-bob": "bob"}.get(self.headers.get("X-Key", ""))
            if user is None:
                return self.answer(401, [], b"who?")
            return self.answer(200, [("Remote-User", user)], b"")
        if path.startswith("/count?"):
            with LOCK:
                n = COUNTS.get(path[len("/count?"):], 0)
            return self.answer(200, [("Cache-Control", "no-store")], str(n).encode())
        with LOCK:
            COUNTS[path] = COUNTS.get(path, 0) + 1
            n = COUNTS[path]
        lang = self.headers.get("Accept-Language", "-")
        body = ("n=%d" % n).encode()
        fields = [("Cache-Control", "max-age=60")]
        dated = True
        if path.startswith("/api/vary"):
            fields.append(("Vary", "Accept-Language"))
            body = ("lang=%s n=%d" % (lang, n)).encode()
        elif path.startswith("/api/private"):
            fields = [("Cache-Control", "private, max-age=60")]
        elif path.startswith("/api/nostore"):
            fields = [("Cache-Control", "no-store, max-age=60")]
        elif path.startswith("/api/cookie"):
            fields.append(("Set-Cookie", "session=%d" % n))
        elif path.startswith("/api/public"):
            fields = [("Cache-Control", "public, max-age=60")]
        elif path.startswith("/api/sie"):
            # No Date: its age starts at 0 here, stale after a second.
            fields = [("Cache-Control", "max-age=1, stale-if-error=600")]
            dated = False
        elif path.startswith("/api/nosie"):
            fields = [("Cache-Control", "max-age=1")]
            dated = False
        elif path.startswith("/api/swr"):
            fields = [("Cache-Control", "max-age=1, stale-while-revalidate=600")]
            dated = False
            if n > 1:
                time.sleep(1)
        elif path.startswith("/api/slow"):
            time.sleep(0.5)
        elif path.startswith("/api/validated"):
            if self.headers.get("If-None-Match") == '"v1"' or self.headers.get("Range"):
                # What the cache must not be given on a miss: it could
                # store neither.
                return self.answer(412, [("Cache-Control", "no-store")], b"conditional upstream")
            fields.append(("ETag", '"v1"'))
            fields.append(("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT"))
            body = b"0123456789abcdefghij"
        elif path.startswith("/fa/"):
            # Behind forward-auth: made for the user the service named.
            body = ("user=%s n=%d" % (self.headers.get("Remote-User", "-"), n)).encode()
            if "/public" in path:
                fields = [("Cache-Control", "public, max-age=60")]
            if "/vary" in path or "/public" in path:
                fields.append(("Vary", "Remote-User"))
        elif path.startswith("/api/weak"):
            fields.append(("ETag", 'W/"w1"'))
            body = b"0123456789abcdefghij"
        elif path.startswith("/api/big"):
            body = body + b" " + b"x" * 6000
        elif path.startswith("/gz/"):
            fields.append(("Content-Type", "text/plain"))
            body = body + b" " + b"compressible text " * 200
        self.answer(200, fields, body, dated)

    def answer(self, status, fields, body, dated=True):
        if dated:
            self.send_response(status)
        else:
            self.send_response_only(status)
        for name, value in fields:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

struct Setup {
    /// Dropped: killed.
    backend: Option<Process>,
    backend_addr: String,
    server: Process,
    addr: String,
    metrics: String,
    _t: Scratch,
}

/// A backend, and a server with one worker whose site `a.test` sends
/// `/api/*` and `/gz/*` (compressed: `encode`) to it, with a cache of
/// `size` per worker and metrics.
fn setup(name: &str, size: &str) -> Setup {
    let t = Scratch::new(name);
    let script = t.write("backend.py", BACKEND);
    let backend = Process::spawn_stdout(Command::new("python3").arg(script));
    let port: u16 = backend.first_line().trim().parse().unwrap();
    let backend_addr = format!("127.0.0.1:{port}");
    t.write("site/index.html", "home\n");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{backend_addr}\"\n\
             [[site.route]]\npath = \"/gz/*\"\nproxy = \"http://{backend_addr}\"\nencode = true\n\
             [[site.route]]\npath = \"/fa/*\"\nproxy = \"http://{backend_addr}\"\n\
             forward-auth = {{ url = \"http://{backend_addr}/auth\", copy-headers = [\"Remote-User\"] }}\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--proxy-cache", size, "--metrics", "127.0.0.1:0"]),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let addr = common::last_addr(&server.listening());
    Setup {
        backend: Some(backend),
        backend_addr,
        server,
        addr,
        metrics,
        _t: t,
    }
}

/// One request; the status, the head (lower case) and the body.
fn request(addr: &str, method: &str, path: &str, fields: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: a.test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&out[..at]).to_ascii_lowercase();
    let body = String::from_utf8_lossy(&out[at..]).into_owned();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, body)
}

fn get(addr: &str, path: &str, fields: &str) -> (u16, String, String) {
    request(addr, "GET", path, fields)
}

/// How many requests the backend got for `path`.
fn count(s: &Setup, path: &str) -> u32 {
    get(&s.backend_addr, &format!("/count?{path}"), "")
        .2
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_second_get_is_answered_without_the_backend_with_an_age_and_a_head_too() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-fresh", "1M");
    let (status, head, body) = get(&s.addr, "/api/fresh", "");
    assert_eq!((status, body.as_str()), (200, "n=1"), "{head}");
    let (status, head, body) = get(&s.addr, "/api/fresh", "");
    assert_eq!((status, body.as_str()), (200, "n=1"), "{head}");
    assert!(head.contains("\r\nage: "), "{head}");
    assert!(head.contains("cache-control: max-age=60"), "{head}");
    // A HEAD from the GET's entry: its length, no body.
    let (status, head, body) = request(&s.addr, "HEAD", "/api/fresh", "");
    assert_eq!((status, body.as_str()), (200, ""), "{head}");
    assert!(head.contains("content-length: 3"), "{head}");
    // Another query is another key.
    assert_eq!(get(&s.addr, "/api/fresh?x=1", "").2, "n=1");
    assert_eq!(count(&s, "/api/fresh"), 1);
    assert_eq!(count(&s, "/api/fresh?x=1"), 1);
    let m = get(&s.metrics, "/metrics", "").2;
    assert!(m.contains("peregrine_proxy_cache_total{result=\"hit\"} 2"), "{m}");
    assert!(m.contains("peregrine_proxy_cache_total{result=\"miss\"} 2"), "{m}");
    assert!(m.contains("peregrine_proxy_cache_entries 2"), "{m}");
}

#[test]
fn vary_keeps_each_clients_variant_and_never_crosses_them() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-vary", "1M");
    let en = "Accept-Language: en\r\n";
    let de = "Accept-Language: de\r\n";
    assert_eq!(get(&s.addr, "/api/vary", en).2, "lang=en n=1");
    assert_eq!(get(&s.addr, "/api/vary", de).2, "lang=de n=2");
    assert_eq!(get(&s.addr, "/api/vary", en).2, "lang=en n=1");
    assert_eq!(get(&s.addr, "/api/vary", de).2, "lang=de n=2");
    // No Accept-Language is a third variant.
    assert_eq!(get(&s.addr, "/api/vary", "").2, "lang=- n=3");
    assert_eq!(count(&s, "/api/vary"), 3);
}

#[test]
fn a_gzip_client_and_an_identity_client_never_get_each_others_bytes() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-encode", "1M");
    let gzip = "Accept-Encoding: gzip\r\n";
    let (_, head, _) = get(&s.addr, "/gz/a", gzip);
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let (_, head, body) = get(&s.addr, "/gz/a", "");
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(body.starts_with("n=2 compressible"), "{head}{body}");
    let (_, head, _) = get(&s.addr, "/gz/a", "Accept-Encoding:  gzip \r\n");
    assert!(
        head.contains("content-encoding: gzip") && head.contains("\r\nage: "),
        "{head}"
    );
    let (_, head, body) = get(&s.addr, "/gz/a", "");
    assert!(
        !head.contains("content-encoding") && head.contains("\r\nage: "),
        "{head}"
    );
    assert!(body.starts_with("n=2 compressible"), "{head}{body}");
    assert_eq!(count(&s, "/gz/a"), 2);
}

#[test]
fn private_no_store_set_cookie_and_credentials_are_not_served_from_the_cache() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-never", "1M");
    for path in ["/api/private", "/api/nostore", "/api/cookie"] {
        get(&s.addr, path, "");
        get(&s.addr, path, "");
        assert_eq!(count(&s, path), 2, "{path}");
    }
    // An answer to a request with credentials is not stored, nor is a
    // stored one given to it, unless it says `public`.
    let auth = "Authorization: Bearer x\r\n";
    get(&s.addr, "/api/fresh", auth);
    get(&s.addr, "/api/fresh", auth);
    assert_eq!(count(&s, "/api/fresh"), 2);
    get(&s.addr, "/api/fresh", "");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=3");
    assert_eq!(get(&s.addr, "/api/fresh", "Cookie: a=b\r\n").2, "n=4");
    assert_eq!(get(&s.addr, "/api/fresh", auth).2, "n=5");
    assert_eq!(count(&s, "/api/fresh"), 5);
    assert_eq!(get(&s.addr, "/api/public", auth).2, "n=1");
    assert_eq!(get(&s.addr, "/api/public", auth).2, "n=1");
    assert_eq!(get(&s.addr, "/api/public", "Cookie: a=b\r\n").2, "n=1");
    assert_eq!(count(&s, "/api/public"), 1);
}

#[test]
fn a_stale_answer_stands_in_for_a_dead_backend_only_with_stale_if_error() {
    if !common::have_python() {
        return;
    }
    let mut s = setup("cache-stale", "1M");
    assert_eq!(get(&s.addr, "/api/sie", "").2, "n=1");
    assert_eq!(get(&s.addr, "/api/nosie", "").2, "n=1");
    drop(s.backend.take());
    // max-age=1: stale a second later (whole seconds, as Age counts).
    std::thread::sleep(Duration::from_millis(2100));
    let (status, head, body) = get(&s.addr, "/api/sie", "");
    assert_eq!((status, body.as_str()), (200, "n=1"), "{head}");
    let (status, _, _) = get(&s.addr, "/api/nosie", "");
    assert_eq!(status, 502);
    let m = get(&s.metrics, "/metrics", "").2;
    assert!(m.contains("peregrine_proxy_cache_total{result=\"stale\"} 1"), "{m}");
}

#[test]
fn within_stale_while_revalidate_one_request_refreshes_while_the_others_get_the_stale_answer() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-swr", "1M");
    assert_eq!(get(&s.addr, "/api/swr", "").2, "n=1");
    std::thread::sleep(Duration::from_millis(2100));
    let addr = s.addr.clone();
    let refresh = std::thread::spawn(move || get(&addr, "/api/swr", "").2);
    // The refresh has reached the backend (which takes a second on it).
    test_support::wait_until("the refresh at the backend", || count(&s, "/api/swr") == 2);
    let (_, head, body) = get(&s.addr, "/api/swr", "");
    assert_eq!(body, "n=1", "{head}");
    assert_eq!(refresh.join().unwrap(), "n=2");
    assert_eq!(get(&s.addr, "/api/swr", "").2, "n=2");
    assert_eq!(count(&s, "/api/swr"), 2);
    let m = get(&s.metrics, "/metrics", "").2;
    assert!(m.contains("peregrine_proxy_cache_total{result=\"stale\"} 1"), "{m}");
}

#[test]
fn fifty_concurrent_misses_make_one_upstream_request() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-collapse", "1M");
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let addr = s.addr.clone();
            std::thread::spawn(move || get(&addr, "/api/slow", "").2)
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), "n=1");
    }
    assert_eq!(count(&s, "/api/slow"), 1);
    let m = get(&s.metrics, "/metrics", "").2;
    assert!(!m.contains("peregrine_proxy_cache_collapsed_total 0"), "{m}");
}

#[test]
fn the_size_bound_evicts_the_least_recently_used() {
    if !common::have_python() {
        return;
    }
    // 64 KiB: entries of about 6.4 KB, ten at most.
    let s = setup("cache-lru", "64K");
    for i in 0..10 {
        get(&s.addr, &format!("/api/big/{i}"), "");
    }
    // /big/0 used again: /big/1 is now the least recently used.
    assert!(get(&s.addr, "/api/big/0", "").2.starts_with("n=1 "));
    for i in 10..12 {
        get(&s.addr, &format!("/api/big/{i}"), "");
    }
    assert!(get(&s.addr, "/api/big/0", "").2.starts_with("n=1 "));
    assert!(get(&s.addr, "/api/big/1", "").2.starts_with("n=2 "));
    let m = get(&s.metrics, "/metrics", "").2;
    let bytes: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("peregrine_proxy_cache_bytes ")?.parse().ok())
        .unwrap();
    assert!(bytes <= 64 * 1024, "{m}");
    assert!(!m.contains("peregrine_proxy_cache_evictions_total 0"), "{m}");
}

#[test]
fn a_purge_on_the_metrics_listener_empties_the_cache() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-purge", "1M");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=1");
    assert_eq!(get(&s.addr, "/api/other", "").2, "n=1");
    let (status, _, body) = request(
        &s.metrics,
        "POST",
        "/purge?host=a.test&path=/api/f",
        "Content-Length: 0\r\n",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=2");
    assert_eq!(get(&s.addr, "/api/other", "").2, "n=1");
    request(&s.metrics, "POST", "/purge", "Content-Length: 0\r\n");
    assert_eq!(get(&s.addr, "/api/other", "").2, "n=2");
}

/// A cache given only by a route (`cache = "1M"`, no `--proxy-cache`)
/// has its metrics too.
#[test]
fn a_routes_own_cache_has_its_metrics() {
    if !common::have_python() {
        return;
    }
    let t = Scratch::new("cache-route-metrics");
    let script = t.write("backend.py", BACKEND);
    let backend = Process::spawn_stdout(Command::new("python3").arg(script));
    let port: u16 = backend.first_line().trim().parse().unwrap();
    t.write("site/index.html", "home\n");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://127.0.0.1:{port}\"\ncache = \"1M\"\n"
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
    assert_eq!(get(&addr, "/api/fresh", "").2, "n=1");
    assert_eq!(get(&addr, "/api/fresh", "").2, "n=1");
    let m = get(&metrics, "/metrics", "").2;
    assert!(m.contains("peregrine_proxy_cache_total{result=\"hit\"} 1"), "{m}");
    assert!(m.contains("peregrine_proxy_cache_total{result=\"miss\"} 1"), "{m}");
    assert!(m.contains("peregrine_proxy_cache_entries 1"), "{m}");
    drop(backend);
}

#[test]
fn an_http2_client_gets_hits_too() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-h2", "1M");
    let curl = |path: &str| {
        let out = Command::new(common::curl())
            .args([
                "-s",
                "-D",
                "/dev/stderr",
                "--http2-prior-knowledge",
                "-H",
                "Host: a.test",
            ])
            .arg(format!("http://{}{path}", s.addr))
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stderr).to_ascii_lowercase(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (head, body) = curl("/api/h2");
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_eq!(body, "n=1");
    let (head, body) = curl("/api/h2");
    assert!(head.contains("\r\nage: "), "{head}");
    assert_eq!(body, "n=1");
    // And an HTTP/1.1 client the same entry.
    assert_eq!(get(&s.addr, "/api/h2", "").2, "n=1");
    assert_eq!(count(&s, "/api/h2"), 1);
    let _ = &s.server;
}

#[test]
fn a_hit_answers_conditionals_with_304_and_one_range_with_206() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-conditional", "1M");
    const LM: &str = "Wed, 21 Oct 2015 07:28:00 GMT";
    let (status, head, body) = get(&s.addr, "/api/validated", "");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"), "{head}");
    // If-None-Match (weak comparison, RFC 9110 §13.1.2): a 304 with the
    // validator, no body, from the entry.
    for inm in ["\"v1\"", "W/\"v1\"", "\"x\", \"v1\"", "*"] {
        let (status, head, body) = get(&s.addr, "/api/validated", &format!("If-None-Match: {inm}\r\n"));
        assert_eq!((status, body.as_str()), (304, ""), "{inm}: {head}");
        assert!(head.contains("etag: \"v1\""), "{head}");
        assert!(head.contains("\r\nage: "), "{head}");
        assert!(!head.contains("content-type"), "{head}");
    }
    // Another tag: the whole answer; and If-None-Match decides over
    // If-Modified-Since (§13.2.2, step 3 before 4).
    let (status, _, body) = get(&s.addr, "/api/validated", "If-None-Match: \"v2\"\r\n");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"));
    let both = format!("If-None-Match: \"v2\"\r\nIf-Modified-Since: {LM}\r\n");
    assert_eq!(get(&s.addr, "/api/validated", &both).0, 200);
    // If-Modified-Since against Last-Modified.
    let (status, _, body) = get(&s.addr, "/api/validated", &format!("If-Modified-Since: {LM}\r\n"));
    assert_eq!((status, body.as_str()), (304, ""));
    let earlier = "If-Modified-Since: Tue, 20 Oct 2015 07:28:00 GMT\r\n";
    assert_eq!(get(&s.addr, "/api/validated", earlier).0, 200);
    // One range: 206 of the stored body.
    let (status, head, body) = get(&s.addr, "/api/validated", "Range: bytes=2-5\r\n");
    assert_eq!((status, body.as_str()), (206, "2345"), "{head}");
    assert!(head.contains("content-range: bytes 2-5/20"), "{head}");
    assert!(head.contains("content-length: 4"), "{head}");
    // If-Range holds (the tag, the date) or not (the whole answer).
    let (status, _, body) = get(&s.addr, "/api/validated", "Range: bytes=-3\r\nIf-Range: \"v1\"\r\n");
    assert_eq!((status, body.as_str()), (206, "hij"));
    let dated = format!("Range: bytes=0-0\r\nIf-Range: {LM}\r\n");
    assert_eq!(get(&s.addr, "/api/validated", &dated).0, 206);
    let (status, _, body) = get(&s.addr, "/api/validated", "Range: bytes=2-5\r\nIf-Range: \"v0\"\r\n");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"));
    // Several ranges: the whole answer (200); none satisfiable: 416.
    let (status, _, body) = get(&s.addr, "/api/validated", "Range: bytes=0-1,4-5\r\n");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"));
    let (status, head, _) = get(&s.addr, "/api/validated", "Range: bytes=100-\r\n");
    assert_eq!(status, 416, "{head}");
    assert!(head.contains("content-range: bytes */20"), "{head}");
    // A HEAD ignores Range (§14.2: GET only).
    assert_eq!(
        request(&s.addr, "HEAD", "/api/validated", "Range: bytes=2-5\r\n").0,
        200
    );
    // All of that from the entry; If-Match is the origin's to judge
    // (RFC 9111 §4.3.2): that request goes upstream.
    assert_eq!(count(&s, "/api/validated"), 1);
    let (status, _, _) = get(&s.addr, "/api/validated", "If-Match: \"v1\"\r\n");
    assert_eq!(status, 200);
    assert_eq!(count(&s, "/api/validated"), 2);
}

/// Issue 32's "one client's answer never reaches another's" behind
/// forward-auth: the service names the user (`X-Key` → `Remote-User`,
/// copied onto the upstream request), which the client's own fields do
/// not show. An answer is stored only when `public`, and looked up only
/// once the check let the request through, Vary matched against the
/// fields the upstream gets (the copied `Remote-User`, not the client's).
#[test]
fn behind_forward_auth_one_users_answer_never_reaches_another() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-forward-auth", "1M");
    let alice = "X-Key: k-alice\r\n";
    let bob = "X-Key: k-bob\r\n";
    // Not public (with or without `Vary: Remote-User`): never stored.
    for path in ["/fa/plain", "/fa/vary"] {
        assert_eq!(get(&s.addr, path, alice).2, "user=alice n=1", "{path}");
        let (status, head, body) = get(&s.addr, path, bob);
        assert_eq!((status, body.as_str()), (200, "user=bob n=2"), "{path}: {head}");
        assert!(head.contains("cache-control: private"), "{head}");
        assert_eq!(get(&s.addr, path, alice).2, "user=alice n=3", "{path}");
        assert_eq!(count(&s, path), 3, "{path}");
    }
    // `public` with `Vary: Remote-User`: each user's own entry, matched
    // on the service's name, whatever the client says it is.
    let path = "/fa/public";
    assert_eq!(get(&s.addr, path, alice).2, "user=alice n=1");
    let (status, head, body) = get(&s.addr, path, alice);
    assert_eq!((status, body.as_str()), (200, "user=alice n=1"), "{head}");
    assert!(head.contains("\r\nage: "), "{head}");
    assert!(head.contains("cache-control: private"), "{head}");
    let forged = format!("{bob}Remote-User: alice\r\n");
    assert_eq!(get(&s.addr, path, &forged).2, "user=bob n=2");
    assert_eq!(get(&s.addr, path, bob).2, "user=bob n=2");
    assert_eq!(count(&s, path), 2);
    // Refused: the service's answer, nothing from the cache.
    let (status, _, body) = get(&s.addr, path, "Remote-User: alice\r\n");
    assert_eq!((status, body.as_str()), (401, "who?"));
}

/// A miss with `If-None-Match` or `Range` asks the upstream for the whole
/// answer (nginx's `proxy_cache` drops the conditional fields on a
/// miss), stores it, and answers the client from the entry: the backend
/// here answers 412 to a request that still carries them.
#[test]
fn a_conditional_or_ranged_miss_is_stored_whole_and_answered_from_the_entry() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-conditional-miss", "1M");
    let (status, head, body) = get(&s.addr, "/api/validated/i", "If-None-Match: \"v1\"\r\n");
    assert_eq!((status, body.as_str()), (304, ""), "{head}");
    assert!(head.contains("etag: \"v1\""), "{head}");
    let (status, _, body) = get(&s.addr, "/api/validated/i", "");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"));
    assert_eq!(count(&s, "/api/validated/i"), 1);
    let (status, head, body) = get(&s.addr, "/api/validated/r", "Range: bytes=2-5\r\n");
    assert_eq!((status, body.as_str()), (206, "2345"), "{head}");
    assert!(head.contains("content-range: bytes 2-5/20"), "{head}");
    assert_eq!(get(&s.addr, "/api/validated/r", "").2, "0123456789abcdefghij");
    assert_eq!(count(&s, "/api/validated/r"), 1);
    // A request with credentials keeps its fields (its answer is stored
    // only if `public`): the origin judges them.
    let (status, _, _) = get(&s.addr, "/api/validated/c", "Cookie: a=b\r\nIf-None-Match: \"v1\"\r\n");
    assert_eq!(status, 412);
}

/// RFC 9110 §13.1.5: `If-Range` needs a strong match; a weak tag (the
/// stored answer's own) never holds, so the whole answer is sent.
#[test]
fn if_range_with_a_weak_tag_gets_the_whole_answer() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-weak-if-range", "1M");
    assert_eq!(get(&s.addr, "/api/weak", "").0, 200);
    let (status, head, body) = get(&s.addr, "/api/weak", "Range: bytes=0-1\r\nIf-Range: W/\"w1\"\r\n");
    assert_eq!((status, body.as_str()), (200, "0123456789abcdefghij"), "{head}");
    // Without If-Range the range is served from the same entry.
    assert_eq!(get(&s.addr, "/api/weak", "Range: bytes=0-1\r\n").0, 206);
    assert_eq!(count(&s, "/api/weak"), 1);
}

/// RFC 9111 §4.4: a 2xx or 3xx to an unsafe method invalidates the
/// target URI's entries, every variant; an error leaves them.
#[test]
fn an_unsafe_methods_success_invalidates_the_targets_entries() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-invalidate", "1M");
    let en = "Accept-Language: en\r\n";
    let de = "Accept-Language: de\r\n";
    assert_eq!(get(&s.addr, "/api/vary/p", en).2, "lang=en n=1");
    assert_eq!(get(&s.addr, "/api/vary/p", de).2, "lang=de n=2");
    assert_eq!(get(&s.addr, "/api/vary/p", en).2, "lang=en n=1");
    // A failed POST (500) leaves the entries.
    let (status, _, _) = request(&s.addr, "POST", "/api/vary/p", "X-Fail: 1\r\nContent-Length: 0\r\n");
    assert_eq!(status, 500);
    assert_eq!(get(&s.addr, "/api/vary/p", en).2, "lang=en n=1");
    // A POST with a body that succeeds removes both variants.
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(b"POST /api/vary/p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(get(&s.addr, "/api/vary/p", en).2, "lang=en n=5");
    assert_eq!(get(&s.addr, "/api/vary/p", de).2, "lang=de n=6");
    // DELETE too; another path's entry stays.
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=1");
    assert_eq!(request(&s.addr, "DELETE", "/api/vary/p", "").0, 200);
    assert_eq!(get(&s.addr, "/api/vary/p", de).2, "lang=de n=8");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=1");
}

#[test]
fn sigwinch_from_the_servers_user_purges_the_cache() {
    if !common::have_python() {
        return;
    }
    let s = setup("cache-sigwinch", "1M");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=1");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=1");
    // kill(1) is a process of this user: the signal counts (three
    // routes, three caches).
    s.server.signal("WINCH");
    s.server.line("SIGWINCH: purged 3 response cache(s)");
    assert_eq!(get(&s.addr, "/api/fresh", "").2, "n=2");
}

/// Each cached route holds up to its size in entries and as much again
/// in answers being read in, per worker: check-config's memory line
/// counts both, for `--proxy-cache`'s routes and a route's own `cache`.
#[test]
fn check_config_counts_the_caches_in_the_memory_per_worker() {
    let t = Scratch::new("cache-check-config");
    t.write("site/index.html", "home\n");
    let routes = "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
         [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
         [[site.route]]\npath = \"/api/*\"\nproxy = \"http://127.0.0.1:9\"\n\
         [[site.route]]\npath = \"/gz/*\"\nproxy = \"http://127.0.0.1:9\"\n";
    let plain = t.write("plain.toml", routes);
    let own = t.write(
        "own.toml",
        format!("{routes}[[site.route]]\npath = \"/own/*\"\nproxy = \"http://127.0.0.1:9\"\ncache = \"4M\"\n"),
    );
    let memory = |config: &std::path::Path, cache: &[&str]| {
        let out = common::peregrine()
            .current_dir(t.dir())
            .args(["check-config", "serve", "--config"])
            .arg(config)
            .args(cache)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let line = err
            .lines()
            .find(|l| l.contains("memory per worker at most "))
            .unwrap_or_else(|| panic!("{err}"))
            .to_owned();
        let mib: u64 = line
            .split("at most ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        (mib, line)
    };
    let (none, line) = memory(&plain, &[]);
    assert!(!line.contains("response caches"), "{line}");
    // The route's own 4 MiB, twice.
    let (one, line) = memory(&own, &[]);
    assert_eq!(one - none, 8, "{line}");
    assert!(line.contains("proxy response caches 8 MiB (2 x 4 MiB)"), "{line}");
    // Two routes of --proxy-cache's 8 MiB and the route's own 4 MiB.
    let (all, line) = memory(&own, &["--proxy-cache", "8M"]);
    assert_eq!(all - none, 40, "{line}");
    assert!(line.contains("proxy response caches 40 MiB (2 x 20 MiB)"), "{line}");
}
