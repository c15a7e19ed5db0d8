//! `serve --proxy PREFIX=URL` and `[[site.route]] proxy = "URL"` as a user
//! runs them: a static site and its API behind one Peregrine, sandboxed
//! (the serving process may connect to the upstream's port only), from a
//! directory and from its archive alike.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;

use common::{Scratch, PATIENCE};
use test_support::http::dead_addr;
use test_support::process::Process;

/// An upstream that answers every request with its request line and the
/// X-Forwarded-For it got, kept alive.
fn upstream() -> SocketAddr {
    upstream_answering(|head| {
        let xff = head
            .iter()
            .find_map(|l| l.strip_prefix("X-Forwarded-For: "))
            .unwrap_or("-");
        format!("{} xff={xff}", head[0])
    })
}

/// An upstream that answers every request, kept alive, with the text
/// `body_of` makes from its head's lines (the request line first).
fn upstream_answering(body_of: fn(&[String]) -> String) -> SocketAddr {
    common::answering_upstream(move |head| {
        let body = body_of(head);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

fn get(addr: &str, host: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn addr_of(server: &Process) -> String {
    common::last_addr(&server.listening())
}

#[test]
fn serve_proxy_sends_a_prefix_to_the_upstream_and_the_rest_to_the_files() {
    let t = Scratch::new("proxy-flag");
    t.write("site/index.html", "home\n");
    let up = upstream();
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}/v1/")),
    );
    let addr = addr_of(&server);
    let api = get(&addr, "x", "/api/items?id=3");
    assert!(api.starts_with("HTTP/1.1 200"), "{api}");
    assert!(api.ends_with("GET /v1/items?id=3 HTTP/1.1 xff=127.0.0.1"), "{api}");
    let home = get(&addr, "x", "/");
    assert!(home.starts_with("HTTP/1.1 200") && home.ends_with("home\n"), "{home}");
    // `/apix` is not under `/api/`.
    assert!(get(&addr, "x", "/apix").starts_with("HTTP/1.1 404"));
}

#[test]
fn a_site_route_proxies_from_a_directory_and_from_an_archive_alike() {
    let t = Scratch::new("proxy-route");
    common::packed(t.dir(), &[("index.html", "home\n")], &[]);
    let up = upstream();
    let route = format!("[[site.route]]\npath = \"/api/*\"\nproxy = \"http://{up}\"\n");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"dir.test\"]\nroot = \"site\"\n{route}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{route}"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = addr_of(&server);
    for host in ["dir.test", "arc.test"] {
        let api = get(&addr, host, "/api/x");
        assert!(api.ends_with("GET /api/x HTTP/1.1 xff=127.0.0.1"), "{host}: {api}");
        let home = get(&addr, host, "/");
        assert!(home.ends_with("home\n"), "{host}: {home}");
    }
}

#[test]
fn bad_proxy_settings_are_refused_at_start_naming_them() {
    let t = Scratch::new("proxy-bad");
    t.write("site/index.html", "home\n");
    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["serve", "site", "--proxy", "/api/=ftp://x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--proxy") && err.contains("expected http[s]://"), "{err}");

    let config = t.write(
        "bad.toml",
        "version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
         [[site.route]]\npath = \"/api/*\"\nhandler = \"proxy\"\n",
    );
    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("a proxy needs `proxy`"), "{err}");
}

/// A route's `basic-auth` makes its answer before the password is proven
/// and sends it after; a proxy's answer is the request sent upstream. So
/// `basic-auth` on a proxy route is refused at its line, by check-config
/// and by serve, which never starts.
#[test]
fn basic_auth_on_a_proxy_route_is_refused_at_its_line() {
    let t = Scratch::new("proxy-basic-auth");
    t.write("site/index.html", "home\n");
    let hash = bcrypt::hash("wonderland", 4).unwrap();
    let config = t.write(
        "auth.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://127.0.0.1:9\"\n\
             basic-auth = {{ users = [\"alice:{hash}\"] }}\n"
        ),
    );
    let line = format!(
        "{}:9: basic-auth: basic-auth on a proxy route is not supported yet",
        config.display()
    );
    for command in ["check-config", "serve"] {
        let mut cmd = common::peregrine();
        cmd.current_dir(t.dir());
        if command == "check-config" {
            cmd.args(["check-config", "serve"]);
        } else {
            cmd.arg("serve");
        }
        let out = cmd.arg("--config").arg(&config).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {err}");
        assert!(err.contains(&line), "{command}: {err}");
    }
}

/// `--proxy` prefixes come before the files, and a proxy route before the
/// site's root: `_headers`' `Basic-Auth` rules that cover paths under them
/// are never asked there, and the start says so for each (and for no
/// other rule).
#[test]
fn basic_auth_rules_a_proxy_goes_around_are_warned_of_at_start() {
    let t = Scratch::new("proxy-bypassed");
    t.write("site/index.html", "home\n");
    t.write("site/team/t.txt", "team\n");
    t.write(
        "site/_headers",
        "/api/*\n  Basic-Auth: carol:hunter2\n/team/*\n  Basic-Auth: carol:hunter2\n",
    );
    let up = upstream();
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}")),
    );
    let said = until_listening(&server);
    let warned = "site: _headers' Basic-Auth for /api/* does not protect paths under --proxy /api/: the proxy \
                  sends them upstream first";
    assert!(said.iter().any(|l| l.contains(warned)), "{said:?}");
    assert!(!said.iter().any(|l| l.contains("/team/*")), "{said:?}");
    let addr = common::last_addr(said.last().unwrap());
    // As warned: the upstream answers, and /team/ is still protected.
    assert!(get(&addr, "x", "/api/x").ends_with("GET /api/x HTTP/1.1 xff=127.0.0.1"));
    assert!(get(&addr, "x", "/team/t.txt").starts_with("HTTP/1.1 401"));
    server.terminate();

    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{up}\"\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let said = until_listening(&server);
    let warned = "site a.test: _headers' Basic-Auth for /api/* does not protect paths under route /api/* (proxy)";
    assert!(said.iter().any(|l| l.contains(warned)), "{said:?}");
    assert!(!said.iter().any(|l| l.contains("/team/*")), "{said:?}");
    server.terminate();

    // A route's `ip` list and `rate-limit` are gone around by a `--proxy`
    // prefix as its `basic-auth` is: said too.
    let config = t.write(
        "peregrine.toml",
        "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
         [[site.route]]\npath = \"/api/admin/*\"\nip = { allow = [\"127.0.0.2\"] }\n\
         rate-limit = { rate = \"10/s\", burst = 20 }\n",
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--proxy")
            .arg(format!("/api/=http://{up}")),
    );
    let said = until_listening(&server);
    for rule in ["ip allow/deny list", "rate-limit"] {
        let warned = format!(
            "site a.test, route /api/admin/*: its {rule} does not protect paths under --proxy /api/: the proxy \
             sends them upstream first"
        );
        assert!(said.iter().any(|l| l.contains(&warned)), "{rule}: {said:?}");
    }
    server.terminate();
}

/// What the server says up to the line saying where it listens (the
/// last).
fn until_listening(server: &Process) -> Vec<String> {
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut said = Vec::new();
    while let Some(line) = server.next_line_before(deadline) {
        let done = line.contains("://");
        said.push(line);
        if done {
            return said;
        }
    }
    panic!("no line saying where it listens: {said:?}");
}

/// A port nothing listens on now, for a server to bind: bound, then closed.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn request(addr: &str, head: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The root's `_50x.html` (a directory's file, or the archive's) is the
/// body of the proxy's 502, with its status; a route's `error-page`
/// names another page; none of them holds the upstream's address.
#[test]
fn the_roots_50x_page_or_a_routes_error_page_answers_for_an_upstream_that_is_down() {
    let t = Scratch::new("proxy-50x");
    let page = "<h1>Back in a minute</h1>\n";
    common::packed(t.dir(), &[("index.html", "home\n"), ("_50x.html", page)], &[]);
    let (dead, _held) = dead_addr();
    for root in ["site", "site.prg"] {
        let server = Process::spawn(
            common::peregrine()
                .current_dir(t.dir())
                .args(["serve", root, "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
                .arg(format!("/api/=http://{dead}")),
        );
        let answer = get(&addr_of(&server), "x", "/api/items");
        assert!(answer.starts_with("HTTP/1.1 502"), "{root}: {answer}");
        assert!(answer.contains("Content-Type: text/html"), "{root}: {answer}");
        assert!(answer.ends_with(page), "{root}: {answer}");
        assert!(!answer.contains(&dead.port().to_string()), "{root}: {answer}");
        server.terminate();
    }
    t.write("down.html", "<p>the API rests</p>\n");
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{dead}\"\nerror-page = \"down.html\"\n\
             [[site.route]]\npath = \"/other/*\"\nproxy = \"http://{dead}\"\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = addr_of(&server);
    let answer = get(&addr, "a.test", "/api/x");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.ends_with("<p>the API rests</p>\n"), "{answer}");
    // A route without its own page has the site's.
    let answer = get(&addr, "a.test", "/other/x");
    assert!(answer.starts_with("HTTP/1.1 502") && answer.ends_with(page), "{answer}");
}

/// `files-first = true`: a file that is there answers a GET or HEAD; a
/// path no file answers, and any other method, goes upstream (nginx's
/// `try_files $uri @backend`), from a directory and from an archive alike.
#[test]
fn files_first_serves_a_file_that_is_there_and_sends_the_rest_upstream() {
    let t = Scratch::new("proxy-files-first");
    common::packed(t.dir(), &[("index.html", "home\n"), ("app.js", "js\n")], &[]);
    let up = upstream();
    for root in ["site", "site.prg"] {
        let config = t.write(
            "peregrine.toml",
            format!(
                "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\n\
                 root = \"{root}\"\n[[site.route]]\npath = \"/*\"\nproxy = \"http://{up}\"\nfiles-first = true\n"
            ),
        );
        let server = Process::spawn(
            common::peregrine()
                .current_dir(t.dir())
                .args(["serve", "--config"])
                .arg(&config),
        );
        let addr = addr_of(&server);
        let file = get(&addr, "a.test", "/app.js");
        assert!(
            file.starts_with("HTTP/1.1 200") && file.ends_with("\r\n\r\njs\n"),
            "{root}: {file}"
        );
        let home = get(&addr, "a.test", "/");
        assert!(home.ends_with("\r\n\r\nhome\n"), "{root}: {home}");
        let missing = get(&addr, "a.test", "/users/7");
        assert!(
            missing.ends_with("GET /users/7 HTTP/1.1 xff=127.0.0.1"),
            "{root}: {missing}"
        );
        let post = request(
            &addr,
            "POST /app.js HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        assert!(post.ends_with("POST /app.js HTTP/1.1 xff=127.0.0.1"), "{root}: {post}");
        server.terminate();
    }
}

/// With files first, a missing file is the upstream's: a route's own
/// `fallback` or `404` would answer it instead, so the pair is refused at
/// its line; `files-first` and `error-page` belong to proxy routes only.
#[test]
fn ambiguous_files_first_routes_are_refused_at_their_line() {
    let t = Scratch::new("proxy-files-first-bad");
    t.write("site/index.html", "home\n");
    let check = |route: &str| {
        let config = t.write(
            "bad.toml",
            format!("version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n[[site.route]]\n{route}"),
        );
        let out = common::peregrine()
            .current_dir(t.dir())
            .args(["check-config", "serve", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{route}");
        (String::from_utf8_lossy(&out.stderr).into_owned(), config)
    };
    let (err, config) =
        check("path = \"/*\"\nproxy = \"http://127.0.0.1:9\"\nfiles-first = true\nfallback = \"index.html\"\n");
    let line = format!("{}:9: fallback: ambiguous with files-first = true", config.display());
    assert!(err.contains(&line), "{err}");
    let (err, _) = check("path = \"/*\"\nfiles-first = true\n");
    assert!(
        err.contains("only a proxy route has `files-first` (this route's handler is files)"),
        "{err}"
    );
    let (err, _) = check("path = \"/*\"\nproxy = \"http://127.0.0.1:9\"\nroot = \"site\"\n");
    assert!(err.contains("unless files-first = true"), "{err}");
}

/// An upstream that is one of the server's own listeners would send every
/// request back to the proxy: refused at start, naming the route and the
/// listener.
#[test]
fn an_upstream_that_is_one_of_our_listeners_is_refused_at_start() {
    let t = Scratch::new("proxy-self");
    t.write("site/index.html", "home\n");
    let port = free_port();
    let err = refused_at_start(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", &format!("127.0.0.1:{port}"), "--proxy"])
            .arg(format!("/api/=http://127.0.0.1:{port}")),
    );
    assert!(
        err.contains(&format!(
            "--proxy /api/: the upstream http://127.0.0.1:{port} is this server's own listener 127.0.0.1:{port}"
        )),
        "{err}"
    );
    // Listening on every address, a loopback upstream on the port is ours.
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"0.0.0.0:{port}\"]\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://localhost:{port}\"\n"
        ),
    );
    let err = refused_at_start(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    assert!(
        err.contains(&format!("site a.test, route /api/* (file {}:6)", config.display()))
            && err.contains(&format!("is this server's own listener 0.0.0.0:{port}")),
        "{err}"
    );
}

/// What a server that must not start says, up to its exit; fails as soon
/// as it says where it listens (it started), and kills it then.
fn refused_at_start(cmd: &mut std::process::Command) -> String {
    let server = Process::spawn(cmd);
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut said = String::new();
    while let Some(line) = server.next_line_before(deadline) {
        assert!(!line.contains(" on http"), "it started: {said}{line}");
        said.push_str(&line);
        said.push('\n');
    }
    said
}

/// `--proxy-files-first PREFIX=URL`: under PREFIX the site answers a GET
/// or HEAD first, the upstream what the site has not and every other
/// method; with a fallback (which would answer every missing path) it is
/// refused at start.
#[test]
fn proxy_files_first_puts_the_site_before_the_upstream() {
    let t = Scratch::new("proxy-files-first-flag");
    t.write("site/index.html", "home\n");
    t.write("site/app.js", "js\n");
    let up = upstream();
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args([
                "serve",
                "site",
                "--bind",
                "127.0.0.1:0",
                "--workers",
                "1",
                "--proxy-files-first",
            ])
            .arg(format!("/=http://{up}")),
    );
    let addr = addr_of(&server);
    let file = get(&addr, "x", "/app.js");
    assert!(
        file.starts_with("HTTP/1.1 200") && file.ends_with("\r\n\r\njs\n"),
        "{file}"
    );
    let missing = get(&addr, "x", "/users/7");
    assert!(missing.ends_with("GET /users/7 HTTP/1.1 xff=127.0.0.1"), "{missing}");
    let post = request(
        &addr,
        "POST /app.js HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(post.ends_with("POST /app.js HTTP/1.1 xff=127.0.0.1"), "{post}");
    server.terminate();

    let err = refused_at_start(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--fallback", "index.html"])
            .arg("--proxy-files-first")
            .arg(format!("/=http://{up}")),
    );
    assert!(
        err.contains("--proxy-files-first /=http://") && err.contains("ambiguous"),
        "{err}"
    );
}

/// The SETTINGS an HTTP/2 client (prior knowledge) gets first: each
/// identifier with its value.
fn h2_settings(addr: &str) -> Vec<(u16, u32)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let mut head = [0u8; 9];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 0x4, "the server's first frame is SETTINGS");
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).unwrap();
    payload
        .chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect()
}

/// A WebSocket through `serve --proxy` (sandboxed): the upstream's 101
/// with the key's accept value opens a tunnel whose bytes come back; and
/// with a proxy configured, HTTP/2 clients are told they may open
/// WebSockets with extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL),
/// which a server without one does not say.
#[test]
fn a_websocket_passes_through_serve_proxy_and_http2_clients_are_told_they_may() {
    const KEY: &str = common::WS_KEY;
    let up = common::switching_echo_upstream();
    let t = Scratch::new("proxy-ws");
    t.write("site/index.html", "home\n");
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/ws/=http://{up}")),
    );
    let addr = addr_of(&server);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /ws/chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "{}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains(&format!("Sec-WebSocket-Accept: {}\r\n", common::WS_ACCEPT)),
        "{head}"
    );
    s.write_all(b"through the sandbox").unwrap();
    let mut echo = [0u8; 19];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"through the sandbox");
    assert!(
        h2_settings(&addr).contains(&(0x8, 1)),
        "no SETTINGS_ENABLE_CONNECT_PROTOCOL with a proxy"
    );
    drop(server);

    let plain = Process::spawn(common::peregrine().current_dir(t.dir()).args([
        "serve",
        "site",
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]));
    let settings = h2_settings(&addr_of(&plain));
    assert!(!settings.iter().any(|&(id, _)| id == 0x8), "{settings:?}");
}

/// An HTTPS upstream whose certificate (for `localhost`) the test CA
/// `pki` signed, answering every request with its request line and the
/// SNI it got.
fn tls_upstream(pki: &test_support::pki::Pki) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    let (cert, key, _) = pki.issue("up", &["localhost"]);
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let config = config.clone();
            thread::spawn(move || {
                tcp.set_read_timeout(Some(PATIENCE)).unwrap();
                let mut stream = rustls::StreamOwned::new(rustls::ServerConnection::new(config).unwrap(), tcp);
                while stream.conn.is_handshaking() {
                    if stream.conn.complete_io(&mut stream.sock).is_err() {
                        return;
                    }
                }
                let sni = stream.conn.server_name().unwrap_or("-").to_owned();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut first = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if first.is_empty() {
                            first = line.trim_end().to_owned();
                        }
                    }
                    let body = format!("{first} sni={sni}");
                    let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    if reader.get_mut().write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// `proxy = "https://..."` with `proxy-ca`: verified against that CA (its
/// file read under the sandbox at a reload too), SNI the upstream's host;
/// `insecure-skip-verify = true` takes a certificate no CA vouches for,
/// and says so at start and in `check-config`; either on an `http://`
/// upstream is refused at its line.
#[test]
fn an_https_upstream_is_verified_against_the_routes_proxy_ca_and_skipping_verification_is_flagged() {
    let t = Scratch::new("proxy-https");
    t.write("site/index.html", "home\n");
    let pki = test_support::pki::Pki::new("cli-proxy-https");
    t.write("ca.pem", pki.ca_pem());
    let other = test_support::pki::Pki::new("cli-proxy-https-other");
    t.write("other-ca.pem", other.ca_pem());
    let up = tls_upstream(&pki);
    let port = up.port();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"https://localhost:{port}\"\nproxy-ca = \"ca.pem\"\n\
             [[site.route]]\npath = \"/wrong/*\"\nproxy = \"https://localhost:{port}\"\nproxy-ca = \"other-ca.pem\"\n\
             [[site.route]]\npath = \"/blind/*\"\nproxy = \"https://localhost:{port}\"\nproxy-ca = \"other-ca.pem\"\n\
             insecure-skip-verify = true\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let said = until_listening(&server).join("\n");
    assert!(said.contains("/blind/*") && said.contains("NOT verified"), "{said}");
    assert!(!said.contains("/api/*: proxy"), "{said}");
    let addr = addr_of(&server);
    let answer = get(&addr, "a.test", "/api/x");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("GET /api/x HTTP/1.1 sni=localhost"), "{answer}");
    let answer = get(&addr, "a.test", "/wrong/x");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(!answer.contains("sni="), "{answer}");
    let answer = get(&addr, "a.test", "/blind/x");
    assert!(answer.ends_with("GET /blind/x HTTP/1.1 sni=localhost"), "{answer}");
    server.terminate();

    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("insecure-skip-verify") && err.contains("NOT verified"),
        "{err}"
    );

    let bad = t.write(
        "bad.toml",
        "version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
         [[site.route]]\npath = \"/api/*\"\nproxy = \"http://127.0.0.1:9\"\ninsecure-skip-verify = true\n",
    );
    let out = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("insecure-skip-verify") && err.contains("only an https:// upstream"),
        "{err}"
    );
}

/// A reload (SIGHUP) while requests wait for a slow upstream loses none:
/// the old generation's connections finish their exchanges, each answer
/// whole. The upstream holds every request until the test lets it answer,
/// which it does only once the reload is done.
#[test]
fn a_reload_with_requests_in_flight_to_a_slow_upstream_loses_none() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    const N: usize = 4;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let arrived = Arc::new(AtomicUsize::new(0));
    let (release, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    {
        let arrived = arrived.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (arrived, gate) = (arrived.clone(), gate.clone());
                thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut out = stream;
                    loop {
                        let mut first = String::new();
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if first.is_empty() {
                                first = line.trim_end().to_owned();
                            }
                        }
                        arrived.fetch_add(1, Ordering::SeqCst);
                        // Held until the test says (one release per request).
                        if gate.lock().unwrap().recv_timeout(PATIENCE).is_err() {
                            return;
                        }
                        let body = format!("{first} done");
                        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                        if out.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
    let t = Scratch::new("proxy-reload");
    t.write("site/index.html", "home\n");
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "site", "--bind", "127.0.0.1:0", "--workers", "1", "--proxy"])
            .arg(format!("/api/=http://{up}")),
    );
    let addr = addr_of(&server);
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let addr = addr.clone();
            thread::spawn(move || get(&addr, "x", &format!("/api/slow/{i}")))
        })
        .collect();
    let deadline = std::time::Instant::now() + PATIENCE;
    while arrived.load(Ordering::SeqCst) < N {
        assert!(
            std::time::Instant::now() < deadline,
            "the requests did not all reach the upstream"
        );
        thread::sleep(std::time::Duration::from_millis(10));
    }
    server.signal("HUP");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let line = server.next_line_before(deadline).expect("a line about the reload");
        assert!(!line.contains("not reloaded"), "{line}");
        if line.contains("configuration reloaded") {
            break;
        }
    }
    for _ in 0..N {
        release.send(()).unwrap();
    }
    for (i, client) in clients.into_iter().enumerate() {
        let answer = client.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i}: {answer}");
        assert!(
            answer.ends_with(&format!("GET /api/slow/{i} HTTP/1.1 done")),
            "request {i}: {answer}"
        );
    }
    // The new generation proxies too.
    release.send(()).unwrap();
    let answer = get(&addr, "x", "/api/after");
    assert!(answer.ends_with("GET /api/after HTTP/1.1 done"), "{answer}");
    server.terminate();
}

/// `--proxy PREFIX=https://...` is verified against the system's roots,
/// or `--proxy-ca`'s CA file (read under the sandbox; `check-config` reads
/// it too).
#[test]
fn serve_proxy_https_is_verified_against_proxy_ca() {
    let t = Scratch::new("proxy-https-flag");
    t.write("site/index.html", "home\n");
    let pki = test_support::pki::Pki::new("cli-proxy-https-flag");
    t.write("ca.pem", pki.ca_pem());
    let up = tls_upstream(&pki);
    let flag = format!("/api/=https://localhost:{}", up.port());
    for (ca, status) in [(Some("ca.pem"), "200"), (None, "502")] {
        let mut cmd = common::peregrine();
        cmd.current_dir(t.dir()).args([
            "serve",
            "site",
            "--bind",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--proxy",
            &flag,
        ]);
        if let Some(ca) = ca {
            cmd.args(["--proxy-ca", ca]);
        }
        let server = Process::spawn(&mut cmd);
        let answer = get(&addr_of(&server), "x", "/api/x");
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{ca:?}: {answer}");
        if ca.is_some() {
            assert!(answer.ends_with("GET /api/x HTTP/1.1 sni=localhost"), "{answer}");
        } else {
            assert!(!answer.contains("sni="), "{answer}");
        }
        server.terminate();
    }
    let out = common::peregrine()
        .current_dir(t.dir())
        .args([
            "check-config",
            "serve",
            "site",
            "--proxy",
            &flag,
            "--proxy-ca",
            "missing.pem",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("missing.pem"), "{err}");
}

/// A proxy route's `encode` (Caddy's `encode`, nginx's `gzip on`): off
/// unless given; `true` compresses answers of at least 512 bytes, a table
/// sets the minimum; check-config shows it, and refuses it elsewhere.
#[test]
fn a_routes_encode_compresses_its_upstreams_answers_and_only_a_proxy_route_has_it() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipped: no curl");
        return;
    }
    let t = Scratch::new("proxy-encode");
    t.write("site/index.html", "home\n");
    let up = upstream();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n\
             [[site.route]]\npath = \"/small/*\"\nproxy = \"http://{up}\"\nencode = {{ min-length = 0 }}\n\
             [[site.route]]\npath = \"/default/*\"\nproxy = \"http://{up}\"\nencode = true\n\
             [[site.route]]\npath = \"/off/*\"\nproxy = \"http://{up}\"\n"
        ),
    );
    let shown = common::peregrine()
        .current_dir(t.dir())
        .args(["check-config", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.contains("encode = { min-length = 0, set-cookie = false }"),
        "{text}"
    );
    assert!(
        text.contains("encode = { min-length = 512, set-cookie = false }"),
        "{text}"
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config),
    );
    let addr = addr_of(&server);
    for (path, coded) in [("/small/x", true), ("/default/x", false), ("/off/x", false)] {
        for version in ["--http1.1", "--http2-prior-knowledge"] {
            let out = std::process::Command::new("curl")
                .args(["-s", "--compressed", "-D", "/dev/stderr", version, "-H", "Host: a.test"])
                .arg(format!("http://{addr}{path}"))
                .output()
                .unwrap();
            let head = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
            let body = String::from_utf8_lossy(&out.stdout);
            assert!(
                body.starts_with(&format!("GET {path} HTTP/1.1")),
                "{path} {version}: {head}{body}"
            );
            assert_eq!(
                head.contains("content-encoding: zstd"),
                coded,
                "{path} {version}: {head}"
            );
            assert_eq!(
                head.contains("vary: accept-encoding"),
                coded,
                "{path} {version}: {head}"
            );
        }
    }
    for (route, why) in [
        ("path = \"/*\"\nencode = true\n", "only a proxy route has `encode`"),
        (
            "path = \"/*\"\nproxy = \"http://127.0.0.1:9\"\nencode = { level = 9 }\n",
            "level",
        ),
        (
            "path = \"/*\"\nproxy = \"http://127.0.0.1:9\"\nencode = \"gzip\"\n",
            "encode",
        ),
    ] {
        let bad = t.write(
            "bad.toml",
            format!("version = 1\n[[site]]\nnames = [\"a.test\"]\nroot = \"site\"\n[[site.route]]\n{route}"),
        );
        let out = common::peregrine()
            .current_dir(t.dir())
            .args(["check-config", "serve", "--config"])
            .arg(&bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{route}");
        let line = 5 + route.lines().position(|l| l.starts_with("encode")).unwrap() + 1;
        assert!(
            err.contains(&format!("{}:{line}: encode", bad.display())) && err.contains(why),
            "{route}: {err}"
        );
    }
}

/// The end of the request line and the Host line a route sends when the
/// Host is its upstream's authority are made once with the route
/// (`Upstream::host_line`): a reload that names the upstream otherwise
/// (the same address, another name) makes a new route whose requests
/// carry the new name. A request without a Host (HTTP/1.0) gets the
/// upstream's authority, as one with a Host gets that Host (preserved).
#[test]
fn a_reload_that_renames_the_upstream_changes_the_host_it_gets() {
    // Answers with its request line and the Host it got.
    let port = upstream_answering(|head| {
        let host = head.iter().skip(1).filter(|l| l.starts_with("Host:"));
        head.iter().take(1).chain(host).cloned().collect::<Vec<_>>().join(" | ")
    })
    .port();
    let t = Scratch::new("proxy-reload-host");
    t.write("site/index.html", "home\n");
    let config_for = |name: &str| {
        format!(
            "version = 1\n[[site]]\nnames = [\"site.test\"]\nroot = \"site\"\ndefault = true\n\
             [[site.route]]\npath = \"/api/*\"\nproxy = \"http://{name}:{port}\"\n"
        )
    };
    let config = t.write("peregrine.toml", config_for("127.0.0.1"));
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--bind", "127.0.0.1:0", "--workers", "1", "--config"])
            .arg(&config),
    );
    let addr = addr_of(&server);
    let no_host = |path: &str| request(&addr, &format!("GET {path} HTTP/1.0\r\n\r\n"));
    let answer = no_host("/api/a");
    assert!(
        answer.ends_with(&format!("GET /api/a HTTP/1.1 | Host: 127.0.0.1:{port}")),
        "{answer}"
    );
    let answer = get(&addr, "site.test", "/api/b");
    assert!(answer.ends_with("GET /api/b HTTP/1.1 | Host: site.test"), "{answer}");

    t.write("peregrine.toml", config_for("localhost"));
    server.signal("HUP");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let line = server.next_line_before(deadline).expect("a line about the reload");
        assert!(!line.contains("not reloaded"), "{line}");
        if line.contains("configuration reloaded") {
            break;
        }
    }
    let answer = no_host("/api/c");
    assert!(
        answer.ends_with(&format!("GET /api/c HTTP/1.1 | Host: localhost:{port}")),
        "{answer}"
    );
    let answer = get(&addr, "site.test", "/api/d");
    assert!(answer.ends_with("GET /api/d HTTP/1.1 | Host: site.test"), "{answer}");
    server.terminate();
}
