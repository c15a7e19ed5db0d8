//! A proxy route's `cors` and `headers` on every answer it sends, as a
//! user runs them (`peregrine serve --config`): the upstream's answers
//! relayed over HTTP/1.1 (raw requests) and HTTP/2 (curl, prior
//! knowledge), the proxy's own 502 for an upstream that is down, a cache
//! hit, and the upstream's answer after a forward-auth check; the route's
//! fields in place of an upstream's of the same names (one
//! `Access-Control-Allow-Origin`, the route's, or none for an origin it
//! does not allow), `Origin` joined to the upstream's `Vary`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

use common::{Scratch, PATIENCE};
use test_support::http::dead_addr;
use test_support::process::Process;

/// The origin the routes allow, and one they do not.
const ALLOWED: &str = "https://app.test";
const OTHER: &str = "https://evil.test";

/// An upstream that answers every request, kept alive: its path as the
/// body, and for a path with `star` in it the fields a server with CORS
/// of its own sends (`Access-Control-Allow-Origin: *`, its own
/// `X-Route`, `Vary: Accept-Encoding`); for one with `cached`, a
/// `Cache-Control` that lets the proxy keep it.
fn upstream() -> SocketAddr {
    common::answering_upstream(|head| {
        let path = head[0].split(' ').nth(1).unwrap_or("/").to_owned();
        let mut fields = String::new();
        if path.contains("star") {
            fields.push_str(
                "Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: X-Up\r\n\
                 X-Route: upstream\r\nVary: Accept-Encoding\r\n",
            );
        }
        if path.contains("cached") {
            fields.push_str("Cache-Control: public, max-age=600\r\n");
        }
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{fields}Content-Length: {}\r\n\r\n{path}",
            path.len()
        )
        .into_bytes()
    })
}

/// An auth service, kept alive, that lets every request through (204)
/// but those for a path with `deny` in it, which get a 401 with CORS of
/// its own (`Access-Control-Allow-Origin: *`).
fn auth_service() -> SocketAddr {
    common::answering_upstream(|head| {
        let deny = head
            .iter()
            .any(|line| line.starts_with("X-Forwarded-Uri:") && line.contains("deny"));
        match deny {
            true => b"HTTP/1.1 401 Unauthorized\r\nAccess-Control-Allow-Origin: *\r\n\
                      WWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
            false => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        }
    })
}

/// The route's rules, the same on each proxy route.
const RULES: &str = "cors = { origins = [\"https://app.test\"], expose = [\"ETag\"], credentials = true }\n\
                     headers = { X-Route = \"1\" }\n";

/// A server with proxy routes to `up` (`/api/*`), to an address nothing
/// listens on (`/down/*`), with a cache (`/cache/*`) and behind
/// forward-auth (`/fa/*`), each with [`RULES`].
fn start(t: &Scratch) -> (Process, String, socket2::Socket) {
    t.write("site/index.html", "home\n");
    let up = upstream();
    let auth = auth_service();
    let (dead, held) = dead_addr();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\ndefault = true\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{up}\"\n{RULES}\
             [[site.route]]\npath = \"/down/*\"\nproxy = \"http://{dead}\"\n{RULES}\
             [[site.route]]\npath = \"/cache/*\"\nproxy = \"http://{up}\"\ncache = \"1M\"\n{RULES}\
             [[site.route]]\npath = \"/fa/*\"\nproxy = \"http://{up}\"\n\
             forward-auth = {{ url = \"http://{auth}/verify\" }}\n{RULES}"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = common::last_addr(&server.listening());
    (server, addr, held)
}

/// An answer's status and its head's field lines, names lowercase.
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
}

impl Answer {
    /// Every value of field `name`, one per line.
    fn values(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The elements of every `Vary` line.
    fn vary(&self) -> Vec<String> {
        self.values("vary")
            .iter()
            .flat_map(|v| v.split(','))
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect()
    }

    fn of(head: &str) -> Answer {
        let mut lines = head.lines();
        let status_line = lines.next().unwrap_or_default();
        let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let fields = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Answer { status, fields }
    }
}

/// A GET of `path` over HTTP/1.1 with `Origin: origin`.
fn get_h1(addr: &str, path: &str, origin: &str) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: a.test\r\nOrigin: {origin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let head = out.split("\r\n\r\n").next().unwrap_or_default();
    assert!(head.starts_with("HTTP/1.1 "), "{out}");
    Answer::of(head)
}

/// The same over HTTP/2 (h2c, prior knowledge), by curl.
fn get_h2(addr: &str, path: &str, origin: &str) -> Answer {
    let out = Command::new(common::curl())
        .args([
            "-sS",
            "--max-time",
            "20",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-H", "Host: a.test", "-H", &format!("Origin: {origin}")])
        .arg(format!("http://{addr}{path}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(head.starts_with("HTTP/2 "), "{head}");
    Answer::of(&head)
}

/// An allowed origin's answer: the route's CORS fields and its `X-Route`,
/// each once, `Origin` in `Vary` once.
fn assert_allowed(a: &Answer, what: &str) {
    assert_eq!(
        a.values("access-control-allow-origin"),
        [ALLOWED],
        "{what}: {:?}",
        a.fields
    );
    assert_eq!(
        a.values("access-control-allow-credentials"),
        ["true"],
        "{what}: {:?}",
        a.fields
    );
    assert_eq!(
        a.values("access-control-expose-headers"),
        ["ETag"],
        "{what}: {:?}",
        a.fields
    );
    assert_eq!(a.values("x-route"), ["1"], "{what}: {:?}", a.fields);
    assert_eq!(
        a.vary().iter().filter(|e| *e == "origin").count(),
        1,
        "{what}: {:?}",
        a.fields
    );
}

/// Another origin's: no CORS field at all (not even the upstream's), but
/// `Vary: Origin` and the route's `X-Route` all the same.
fn assert_not_allowed(a: &Answer, what: &str) {
    for name in [
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-expose-headers",
    ] {
        assert!(a.values(name).is_empty(), "{what}: {name}: {:?}", a.fields);
    }
    assert_eq!(a.values("x-route"), ["1"], "{what}: {:?}", a.fields);
    assert_eq!(
        a.vary().iter().filter(|e| *e == "origin").count(),
        1,
        "{what}: {:?}",
        a.fields
    );
}

/// A GET of a path with an `Origin`, over one protocol.
type Get = fn(&str, &str, &str) -> Answer;

/// Both protocols' GETs, each named.
const PROTOCOLS: [(&str, Get); 2] = [("h1", get_h1), ("h2", get_h2)];

/// The upstream's answer to an allowed origin, over HTTP/1.1 and HTTP/2:
/// the route's CORS fields and `headers`.
#[test]
fn an_allowed_origin_gets_the_routes_cors_fields_and_headers_on_the_upstreams_answer() {
    let t = Scratch::new("proxy-fields-allowed");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/api/x", ALLOWED);
        assert_eq!(a.status, 200, "{proto}");
        assert_allowed(&a, proto);
    }
}

/// Another origin: no `Access-Control-*`, but `Vary: Origin` (a shared
/// cache must not give it the allowed origin's answer) and the route's
/// `headers`.
#[test]
fn another_origin_gets_vary_origin_and_the_routes_headers_without_cors_fields() {
    let t = Scratch::new("proxy-fields-other");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/api/x", OTHER);
        assert_eq!(a.status, 200, "{proto}");
        assert_not_allowed(&a, proto);
    }
}

/// An upstream with CORS of its own (`Access-Control-Allow-Origin: *`,
/// its own `X-Route` and `Vary`): the route's fields replace its fields
/// of those names (one `Access-Control-Allow-Origin`, the route's; none
/// for an origin the route does not allow), and `Origin` joins its
/// `Vary`.
#[test]
fn the_routes_fields_replace_the_upstreams_of_the_same_names() {
    let t = Scratch::new("proxy-fields-star");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/api/star", ALLOWED);
        assert_eq!(a.status, 200, "{proto}");
        assert_allowed(&a, proto);
        assert!(
            a.vary().contains(&"accept-encoding".to_owned()),
            "{proto}: {:?}",
            a.fields
        );
        let a = get(&addr, "/api/star", OTHER);
        assert_not_allowed(&a, proto);
    }
}

/// The proxy's own 502, for an upstream nothing listens on.
#[test]
fn the_proxys_502_carries_the_routes_fields() {
    let t = Scratch::new("proxy-fields-502");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/down/x", ALLOWED);
        assert_eq!(a.status, 502, "{proto}");
        assert_allowed(&a, proto);
        let a = get(&addr, "/down/x", OTHER);
        assert_eq!(a.status, 502, "{proto}");
        assert_not_allowed(&a, proto);
    }
}

/// A cache hit (kept with the upstream's `Access-Control-Allow-Origin:
/// *`, never with the route's, which depend on the origin): the route's
/// fields for the origin asking now.
#[test]
fn a_cache_hit_carries_the_routes_fields_for_the_origin_asking() {
    let t = Scratch::new("proxy-fields-cache");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        // The first fills the cache, the next are hits.
        let path = format!("/cache/cached-star-{proto}");
        let a = get(&addr, &path, ALLOWED);
        assert_eq!(a.status, 200, "{proto}");
        let a = get(&addr, &path, ALLOWED);
        assert!(!a.values("age").is_empty(), "{proto}: a hit: {:?}", a.fields);
        assert_allowed(&a, proto);
        let a = get(&addr, &path, OTHER);
        assert!(!a.values("age").is_empty(), "{proto}: a hit: {:?}", a.fields);
        assert_not_allowed(&a, proto);
    }
}

/// The upstream's answer after a forward-auth check let the request
/// through: the route's fields, and private.
#[test]
fn the_upstreams_answer_after_forward_auth_carries_the_routes_fields() {
    let t = Scratch::new("proxy-fields-fa");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/fa/star", ALLOWED);
        assert_eq!(a.status, 200, "{proto}");
        assert_allowed(&a, proto);
        assert_eq!(a.values("cache-control"), ["private"], "{proto}: {:?}", a.fields);
        let a = get(&addr, "/fa/star", OTHER);
        assert_not_allowed(&a, proto);
    }
}

/// The auth service's refusal, with CORS of its own: the route's fields
/// in place of the service's (one `Access-Control-Allow-Origin`).
#[test]
fn a_forward_auth_refusal_carries_the_routes_cors_fields_in_place_of_the_services() {
    let t = Scratch::new("proxy-fields-fa-deny");
    let (_server, addr, _held) = start(&t);
    for (proto, get) in PROTOCOLS {
        let a = get(&addr, "/fa/deny", ALLOWED);
        assert_eq!(a.status, 401, "{proto}");
        assert_allowed(&a, proto);
        assert_eq!(a.values("www-authenticate"), ["Bearer"], "{proto}: {:?}", a.fields);
        let a = get(&addr, "/fa/deny", OTHER);
        assert_eq!(a.status, 401, "{proto}");
        assert_not_allowed(&a, proto);
    }
}
