//! Access control per route (issue 27) end to end: IP rules, rate limits
//! and CORS on `peregrine serve --config`, from distinct source addresses
//! (127.0.0.2, 127.0.0.3, ... bound before connecting, and ::1), for a
//! directory site and an archive site with the same routes (the rules wrap
//! either handler), over HTTP/1.1 with raw requests and over HTTP/2 with
//! curl (`--http2-prior-knowledge --interface`); and the refusal at start
//! of IP rules on a `unix:` listener.

mod common;

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use common::Scratch;
use socket2::{Domain, Socket, Type};
use test_support::process::Process;

/// The routes both sites have.
const ROUTES: &str = "\
[[site.route]]
path = \"/private/*\"
ip = { allow = [\"127.0.0.2\", \"::1\"] }
[[site.route]]
path = \"/limited/*\"
rate-limit = { rate = \"1/h\", burst = 2 }
[[site.route]]
path = \"/api/*\"
cors = { origins = [\"https://app.test\"], headers = [\"X-Token\"], expose = [\"ETag\"], credentials = true, max-age = 600 }
[[site.route]]
path = \"/open/*\"
cors = { origins = [\"*\"] }
";

/// The files both sites serve.
const FILES: &[(&str, &str)] = &[
    ("index.html", "home\n"),
    ("private/secret.txt", "0123456789\n"),
    ("limited/a.txt", "limited\n"),
    ("api/data.json", "{\"ok\":true}\n"),
    ("open/x.txt", "open\n"),
];

/// A directory site (`dir.test`, the default) and its archive
/// (`arc.test`), each with [`ROUTES`], on 127.0.0.1 and ::1; the server
/// and its IPv4 and IPv6 addresses.
fn start(t: &Scratch) -> (Process, SocketAddr, SocketAddr) {
    common::packed(t.dir(), FILES, &[]);
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\", \"[::1]:0\"]\nworkers = 2\n\
             [[site]]\nnames = [\"dir.test\"]\nroot = \"site\"\ndefault = true\n{ROUTES}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{ROUTES}"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .arg("serve")
            .arg("--config")
            .arg(&config),
    );
    let urls = test_support::process::urls(&server.listening());
    let addr =
        |url: &String| -> SocketAddr { url.trim_start_matches("http://").trim_end_matches('/').parse().unwrap() };
    let v4 = urls.iter().map(addr).find(SocketAddr::is_ipv4).unwrap();
    let v6 = urls.iter().map(addr).find(SocketAddr::is_ipv6).unwrap();
    (server, v4, v6)
}

/// An answer: status, head (lowercase names), body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// Every value of field `name`, joined with ", ".
    fn field(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }
}

/// One HTTP/1.1 request from source address `from` to `to`, for `host`,
/// with `extra` head lines; the connection closed after it.
fn ask(from: &str, to: SocketAddr, method: &str, host: &str, path: &str, extra: &[&str]) -> Answer {
    let from: IpAddr = from.parse().unwrap();
    let socket = Socket::new(Domain::for_address(to), Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(from, 0).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let s: std::net::TcpStream = socket.into();
    let (status, head, body) = common::exchange(s, method, host, path, extra);
    Answer { status, head, body }
}

const HOSTS: [&str; 2] = ["dir.test", "arc.test"];

/// The allowed addresses get the file (a range, a 304); every other gets
/// 403 whatever it asks: a file that exists or not, a range, a condition.
#[test]
fn ip_rules_refuse_other_addresses_before_lookup_and_conditionals() {
    let t = Scratch::new("peregrine-access-ip");
    let (_server, v4, v6) = start(&t);
    for host in HOSTS {
        let ok = ask("127.0.0.2", v4, "GET", host, "/private/secret.txt", &[]);
        assert_eq!((ok.status, ok.body.as_str()), (200, "0123456789\n"), "{host}");
        let etag = ok.field("etag").unwrap();
        let range = ask(
            "127.0.0.2",
            v4,
            "GET",
            host,
            "/private/secret.txt",
            &["Range: bytes=0-3"],
        );
        assert_eq!((range.status, range.body.as_str()), (206, "0123"), "{host}");
        let inm = format!("If-None-Match: {etag}");
        assert_eq!(
            ask("127.0.0.2", v4, "GET", host, "/private/secret.txt", &[&inm]).status,
            304
        );
        assert_eq!(ask("::1", v6, "GET", host, "/private/secret.txt", &[]).status, 200);
        assert_eq!(ask("127.0.0.2", v4, "GET", host, "/private/missing", &[]).status, 404);

        for from in ["127.0.0.1", "127.0.0.3"] {
            for (path, extra) in [
                ("/private/secret.txt", None),
                ("/private/missing", None),
                ("/private/secret.txt", Some("Range: bytes=0-3")),
                ("/private/secret.txt", Some(inm.as_str())),
                // Spelt another way, the path is still the route's.
                ("/x/../private/secret.txt", None),
                ("/%70rivate/secret.txt", None),
            ] {
                let a = ask(from, v4, "GET", host, path, extra.as_slice());
                assert_eq!(a.status, 403, "{host} {from} {path} {extra:?}: {}", a.head);
                assert!(!a.body.contains("0123"), "{}", a.body);
            }
        }
        // Other routes, and the site's root, have no rule.
        assert_eq!(ask("127.0.0.3", v4, "GET", host, "/", &[]).status, 200);
        assert_eq!(ask("127.0.0.3", v4, "GET", host, "/open/x.txt", &[]).status, 200);
    }
}

/// Two requests per client from a full bucket of 2 (1 an hour), then
/// 429 with `Retry-After`, for a missing file too; each address (IPv6 by
/// its /64) and each route's site has its own bucket, whichever worker
/// takes the connection.
#[test]
fn rate_limits_refuse_a_client_past_its_burst_with_429() {
    let t = Scratch::new("peregrine-access-rate");
    let (_server, v4, v6) = start(&t);
    for host in HOSTS {
        for (from, to) in [("127.0.0.3", v4), ("127.0.0.4", v4), ("::1", v6)] {
            for _ in 0..2 {
                let a = ask(from, to, "GET", host, "/limited/a.txt", &[]);
                assert_eq!((a.status, a.body.as_str()), (200, "limited\n"), "{host} {from}");
            }
            for path in ["/limited/a.txt", "/limited/missing"] {
                let a = ask(from, to, "GET", host, path, &[]);
                assert_eq!(a.status, 429, "{host} {from} {path}: {}", a.head);
                // The next token is an hour away (rounded up to a second).
                let secs: u64 = a.field("retry-after").unwrap().parse().unwrap();
                assert!((3590..=3600).contains(&secs), "{secs}");
            }
        }
        // The rest of the site is not limited.
        for _ in 0..5 {
            assert_eq!(ask("127.0.0.3", v4, "GET", host, "/", &[]).status, 200);
        }
    }
}

/// A preflight from an allowed origin gets 204 with the `Access-Control-*`
/// fields (not the handler's bare 204); another origin's gets 403; a
/// simple request from an allowed origin gets the fields, every answer
/// (a 304 and a 404 included) `Vary: Origin`; `*` never matches `null`.
#[test]
fn cors_answers_preflights_and_marks_allowed_answers() {
    let t = Scratch::new("peregrine-access-cors");
    let (_server, v4, _) = start(&t);
    let origin = "Origin: https://app.test";
    for host in HOSTS {
        let pre = ask(
            "127.0.0.1",
            v4,
            "OPTIONS",
            host,
            "/api/data.json",
            &[
                origin,
                "Access-Control-Request-Method: POST",
                "Access-Control-Request-Headers: x-token",
            ],
        );
        assert_eq!(pre.status, 204, "{host}: {}", pre.head);
        assert_eq!(
            pre.field("access-control-allow-origin").as_deref(),
            Some("https://app.test")
        );
        assert_eq!(
            pre.field("access-control-allow-methods").as_deref(),
            Some("GET, HEAD, POST")
        );
        assert_eq!(pre.field("access-control-allow-headers").as_deref(), Some("x-token"));
        assert_eq!(pre.field("access-control-allow-credentials").as_deref(), Some("true"));
        assert_eq!(pre.field("access-control-max-age").as_deref(), Some("600"));
        assert!(pre.field("vary").unwrap().contains("Origin"));
        // A path with no file is preflighted the same: the preflight is
        // about the route, not the file.
        let pre = ask(
            "127.0.0.1",
            v4,
            "OPTIONS",
            host,
            "/api/nothing",
            &[origin, "Access-Control-Request-Method: GET"],
        );
        assert_eq!(pre.status, 204);

        for (from_origin, method) in [("Origin: https://evil.test", "GET"), (origin, "DELETE")] {
            let refused = ask(
                "127.0.0.1",
                v4,
                "OPTIONS",
                host,
                "/api/data.json",
                &[from_origin, &format!("Access-Control-Request-Method: {method}")],
            );
            assert_eq!(refused.status, 403, "{from_origin} {method}");
            assert_eq!(refused.field("access-control-allow-origin"), None);
            assert!(refused.field("vary").unwrap().contains("Origin"));
        }

        let get = ask("127.0.0.1", v4, "GET", host, "/api/data.json", &[origin]);
        assert_eq!((get.status, get.body.as_str()), (200, "{\"ok\":true}\n"));
        assert_eq!(
            get.field("access-control-allow-origin").as_deref(),
            Some("https://app.test")
        );
        assert_eq!(get.field("access-control-allow-credentials").as_deref(), Some("true"));
        assert_eq!(get.field("access-control-expose-headers").as_deref(), Some("ETag"));
        assert!(get.field("vary").unwrap().contains("Origin"), "{}", get.head);
        let inm = format!("If-None-Match: {}", get.field("etag").unwrap());
        let not_modified = ask("127.0.0.1", v4, "GET", host, "/api/data.json", &[origin, &inm]);
        assert_eq!(not_modified.status, 304);
        assert!(
            not_modified.field("vary").unwrap().contains("Origin"),
            "{}",
            not_modified.head
        );
        assert_eq!(
            not_modified.field("access-control-allow-origin").as_deref(),
            Some("https://app.test")
        );
        let missing = ask("127.0.0.1", v4, "GET", host, "/api/missing", &[origin]);
        assert_eq!(missing.status, 404);
        assert!(missing.field("vary").unwrap().contains("Origin"));
        // No Origin, or another one: the answer, without the fields, but
        // varying on Origin all the same.
        for extra in [&[][..], &["Origin: https://evil.test"][..]] {
            let plain = ask("127.0.0.1", v4, "GET", host, "/api/data.json", extra);
            assert_eq!(plain.status, 200);
            assert_eq!(plain.field("access-control-allow-origin"), None);
            assert!(plain.field("vary").unwrap().contains("Origin"));
        }
        // An OPTIONS that is no preflight is the handler's (its Allow).
        let options = ask("127.0.0.1", v4, "OPTIONS", host, "/api/data.json", &[origin]);
        assert_eq!(options.status, 204);
        assert!(options.field("allow").is_some(), "{}", options.head);

        let any = ask("127.0.0.1", v4, "GET", host, "/open/x.txt", &["Origin: https://x.test"]);
        assert_eq!(any.field("access-control-allow-origin").as_deref(), Some("*"));
        let null = ask("127.0.0.1", v4, "GET", host, "/open/x.txt", &["Origin: null"]);
        assert_eq!(null.status, 200);
        assert_eq!(null.field("access-control-allow-origin"), None);
        // A route without CORS has no wrapper: no Vary: Origin there.
        let root = ask("127.0.0.1", v4, "GET", host, "/", &[origin]);
        assert!(
            !root.field("vary").unwrap_or_default().contains("Origin"),
            "{}",
            root.head
        );
    }
}

/// The same rules over HTTP/2 (h2c, prior knowledge), by curl bound to a
/// source address: a refused address, a preflight, an allowed origin.
#[test]
fn access_rules_hold_over_http2() {
    let t = Scratch::new("peregrine-access-h2");
    let (_server, v4, _) = start(&t);
    let curl = |from: &str, host: &str, args: &[&str], path: &str| -> (u16, String) {
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
            .args(["--interface", from, "-H", &format!("Host: {host}")])
            .args(args)
            .arg(format!("http://{v4}{path}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let head = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(head.starts_with("HTTP/2 "), "{head}");
        (head[7..10].parse().unwrap(), head.to_ascii_lowercase())
    };
    for host in HOSTS {
        assert_eq!(curl("127.0.0.1", host, &[], "/private/secret.txt").0, 403);
        assert_eq!(curl("127.0.0.2", host, &[], "/private/secret.txt").0, 200);
        let (status, head) = curl(
            "127.0.0.1",
            host,
            &[
                "-X",
                "OPTIONS",
                "-H",
                "Origin: https://app.test",
                "-H",
                "Access-Control-Request-Method: POST",
            ],
            "/api/data.json",
        );
        assert_eq!(status, 204);
        assert!(head.contains("access-control-allow-origin: https://app.test"), "{head}");
        assert!(head.contains("access-control-allow-methods: get, head, post"), "{head}");
        let (status, head) = curl("127.0.0.1", host, &["-H", "Origin: https://app.test"], "/api/data.json");
        assert_eq!(status, 200);
        assert!(head.contains("access-control-allow-origin: https://app.test"), "{head}");
        assert!(head.contains("vary: origin"), "{head}");
        for _ in 0..2 {
            assert_eq!(curl("127.0.0.5", host, &[], "/limited/a.txt").0, 200);
        }
        let (status, head) = curl("127.0.0.5", host, &[], "/limited/a.txt");
        assert_eq!(status, 429);
        assert!(head.contains("retry-after: "), "{head}");
    }
}

/// A `unix:` listener gives no client address: a route with IP rules (or
/// a rate limit) is refused at start, named, and nothing is served.
#[test]
fn ip_rules_with_a_unix_listener_are_refused_at_start() {
    let t = Scratch::new("peregrine-access-unix");
    t.write("site/index.html", "home\n");
    for rule in ["ip = { deny = [\"10.0.0.0/8\"] }", "rate-limit = { rate = \"5/s\" }"] {
        let config = t.write(
            "peregrine.toml",
            format!(
                "version = 1\nbind = [\"127.0.0.1:0\", \"unix:{}\"]\nworkers = 1\n\
                 [[site]]\nnames = [\"dir.test\"]\nroot = \"site\"\n\
                 [[site.route]]\npath = \"/admin/*\"\n{rule}\n",
                t.path("p.sock").display()
            ),
        );
        let mut child = common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--no-sandbox", "--config"])
            .arg(&config)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = test_support::wait_for("serve to give up", || child.try_wait().unwrap());
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(!status.success(), "{err}");
        assert!(err.contains("site dir.test, route /admin/*"), "{err}");
        assert!(
            err.contains(&format!("unix:{} gives none", t.path("p.sock").display())),
            "{err}"
        );
    }
}
