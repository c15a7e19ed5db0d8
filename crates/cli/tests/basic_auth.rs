//! Basic authentication (issue 27) end to end: a route's `basic-auth`
//! setting (bcrypt and argon2 hashes) and `_headers`' Netlify `Basic-Auth`
//! line (plain passwords, hashed when read), for a directory site and its
//! archive with the same routes (`serve DIR` and the archive answer
//! alike), over HTTP/1.1 with raw requests and over HTTP/2 with curl, from
//! distinct source addresses (each has its own failure count); what an
//! archive holds of the passwords, and what `archive ls`, `cat` and
//! `diff` show of them. (This replaces the refusal of the `Basic-Auth`
//! line that stood until protection was built.)
//!
//! Test hashes are made here at the lowest costs the algorithms take
//! (bcrypt 4, argon2 m=8 KiB t=1): a check costs a millisecond, so a
//! test waits on the verifier threads, not on bcrypt.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;

use base64::Engine as _;
use common::{Scratch, PATIENCE};
use socket2::{Domain, Socket, Type};
use test_support::process::Process;

/// The files both sites serve; `/team/*` is protected by `_headers`
/// (plain passwords, as Netlify takes them), with a `public` the server
/// must drop.
const FILES: &[(&str, &str)] = &[
    ("index.html", "home\n"),
    ("admin/secret.txt", "0123456789\n"),
    ("team/page.txt", "team page\n"),
    (
        "_headers",
        "/team/*\n  Basic-Auth: carol:hunter2 dave:correct-horse\n  Cache-Control: public, max-age=60\n",
    ),
];

fn bcrypt(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

fn argon2(password: &str) -> String {
    use argon2::PasswordHasher;
    let params = argon2::Params::new(8, 1, 1, None).unwrap();
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    a.hash_password(password.as_bytes()).unwrap().to_string()
}

/// `/admin/*` for alice (bcrypt) and bob (argon2), realm "Admins".
fn routes() -> String {
    format!(
        "[[site.route]]\npath = \"/admin/*\"\n\
         basic-auth = {{ users = [\"alice:{}\", \"bob:{}\"], realm = \"Admins\" }}\n",
        bcrypt("wonderland"),
        argon2("builder")
    )
}

/// A directory site (`dir.test`, the default) and its archive
/// (`arc.test`), with [`routes`], on 127.0.0.1, an access log beside;
/// the server, its address, and pack's standard error.
fn start(t: &Scratch) -> (Process, SocketAddr, String) {
    let (_, packed) = common::packed(t.dir(), FILES, &[]);
    let routes = routes();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 2\naccess-log = \"access.log\"\n\
             [[site]]\nnames = [\"dir.test\"]\nroot = \"site\"\ndefault = true\n{routes}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{routes}"
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
    let addr = urls[0]
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    (server, addr, packed)
}

/// An answer: status, head, body.
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

/// `Authorization: Basic ...` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {token}")
}

/// One HTTP/1.1 request from source address `from` to `to`, for `host`,
/// with `extra` head lines; the connection closed after it.
fn ask(from: &str, to: SocketAddr, host: &str, path: &str, extra: &[&str]) -> Answer {
    let from: IpAddr = from.parse().unwrap();
    let socket = Socket::new(Domain::for_address(to), Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(from, 0).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let s: std::net::TcpStream = socket.into();
    let (status, head, body) = common::exchange(s, "GET", host, path, extra);
    Answer { status, head, body }
}

const HOSTS: [&str; 2] = ["dir.test", "arc.test"];

/// Each protected path (the route's setting, `_headers`' line), from
/// `serve DIR` and from the archive alike: 401 with the realm without
/// credentials or with wrong ones, whatever the request (a file that
/// exists or not, a range, a condition, a path spelt another way); the
/// file, private, with right ones (bcrypt, argon2, a `_headers` plain
/// password), and then its 206 and 304.
#[test]
fn protected_paths_answer_401_until_credentials_are_proven() {
    let t = Scratch::new("peregrine-basic-auth");
    let (_server, addr, _) = start(&t);
    let cases = [
        (
            "/admin/secret.txt",
            "0123456789\n",
            "Admins",
            [("alice", "wonderland"), ("bob", "builder")],
        ),
        (
            "/team/page.txt",
            "team page\n",
            "",
            [("carol", "hunter2"), ("dave", "correct-horse")],
        ),
    ];
    // Each case's failures come from an address of its own: four fit in
    // one address's ten.
    let mut n_failing = 0;
    for host in HOSTS {
        for (path, body, realm, users) in cases {
            n_failing += 1;
            let failing = format!("127.0.1.{n_failing}");
            // The route names its realm; `_headers` rules get the site's name.
            let realm = if realm.is_empty() { host } else { realm };
            let folder = &path[..path.rfind('/').unwrap()];
            let (user, password) = users[0];
            let right = basic(user, password);
            let ok = ask("127.0.0.1", addr, host, path, &[&right]);
            assert_eq!((ok.status, ok.body.as_str()), (200, body), "{host} {path}: {}", ok.head);
            let cc = ok.field("cache-control").unwrap();
            assert!(
                cc.starts_with("private") && !cc.contains("public"),
                "{host} {path}: {cc}"
            );
            let etag = ok.field("etag").unwrap();
            let inm = format!("If-None-Match: {etag}");
            let other = basic(users[1].0, users[1].1);
            assert_eq!(
                ask("127.0.0.1", addr, host, path, &[&other]).status,
                200,
                "{host} {path}"
            );
            let range = ask("127.0.0.1", addr, host, path, &[&right, "Range: bytes=0-3"]);
            assert_eq!((range.status, range.body.as_str()), (206, &body[..4]), "{host} {path}");
            let not_modified = ask("127.0.0.1", addr, host, path, &[&right, &inm]);
            assert_eq!(not_modified.status, 304, "{host} {path}");
            assert!(not_modified.field("cache-control").unwrap().starts_with("private"));
            let missing = format!("{folder}/missing");
            assert_eq!(ask("127.0.0.1", addr, host, &missing, &[&right]).status, 404);

            let wrong = basic(user, "guess");
            let stranger = basic("mallory", password);
            let encoded = format!("/%{:02X}{}", folder.as_bytes()[1], &path[2..]);
            let dotted = format!("/x/..{path}");
            for (from, at, extra) in [
                ("127.0.0.2", path, vec![]),
                ("127.0.0.2", missing.as_str(), vec![]),
                ("127.0.0.2", path, vec!["Range: bytes=0-3"]),
                ("127.0.0.2", path, vec![inm.as_str()]),
                ("127.0.0.2", encoded.as_str(), vec![]),
                ("127.0.0.2", dotted.as_str(), vec![]),
                ("127.0.0.2", path, vec!["Authorization: Bearer x"]),
                (failing.as_str(), path, vec![wrong.as_str()]),
                (failing.as_str(), path, vec![wrong.as_str(), inm.as_str()]),
                (failing.as_str(), missing.as_str(), vec![wrong.as_str()]),
                (failing.as_str(), path, vec![stranger.as_str()]),
            ] {
                let a = ask(from, addr, host, at, &extra);
                assert_eq!(a.status, 401, "{host} {at} {extra:?}: {}", a.head);
                assert_eq!(
                    a.field("www-authenticate").as_deref(),
                    Some(format!("Basic realm=\"{realm}\", charset=\"UTF-8\"").as_str()),
                    "{host} {at}"
                );
                assert!(!a.body.contains(&body[..4]), "{}", a.body);
                assert!(a.field("etag").is_none() && a.field("content-range").is_none());
            }
        }
        // The rest of the site is open, and not made private.
        let home = ask("127.0.0.2", addr, host, "/", &[]);
        assert_eq!((home.status, home.body.as_str()), (200, "home\n"));
        assert!(!home.field("cache-control").unwrap().contains("private"));
    }
    // No credential reaches the access log.
    let log = std::fs::read_to_string(t.path("access.log")).unwrap();
    assert!(log.contains("/admin/secret.txt"), "{log}");
    for secret in ["wonderland", "hunter2", &basic("alice", "wonderland")[21..]] {
        assert!(!log.contains(secret), "{secret} in {log}");
    }
}

/// Ten failures from one address, then 429 with `Retry-After` without a
/// check, right credentials included (they are not known yet); another
/// address is not held back, and a user proven before is let in from the
/// barred address (the success is remembered, no hash is computed).
#[test]
fn failures_are_limited_per_client_address_with_429() {
    let t = Scratch::new("peregrine-basic-auth-limit");
    let (_server, addr, _) = start(&t);
    let right = basic("alice", "wonderland");
    assert_eq!(
        ask("127.0.0.9", addr, "dir.test", "/admin/secret.txt", &[&right]).status,
        200
    );
    let wrong = basic("alice", "guess");
    for i in 0..10 {
        let a = ask("127.0.0.9", addr, "dir.test", "/admin/secret.txt", &[&wrong]);
        assert_eq!(a.status, 401, "failure {i}");
    }
    for extra in [&wrong, &basic("bob", "builder")] {
        let a = ask("127.0.0.9", addr, "arc.test", "/admin/secret.txt", &[extra]);
        assert_eq!(a.status, 429, "{}", a.head);
        let secs: u64 = a.field("retry-after").unwrap().parse().unwrap();
        assert!((1..=6).contains(&secs), "{secs}");
    }
    // The cached success needs no check, so the bar does not hold it.
    assert_eq!(
        ask("127.0.0.9", addr, "dir.test", "/admin/secret.txt", &[&right]).status,
        200
    );
    // Without credentials: still the 401 that asks for them.
    assert_eq!(ask("127.0.0.9", addr, "dir.test", "/admin/secret.txt", &[]).status, 401);
    let bob = basic("bob", "builder");
    assert_eq!(
        ask("127.0.0.10", addr, "dir.test", "/admin/secret.txt", &[&bob]).status,
        200
    );
}

/// The same over HTTP/2 (h2c, prior knowledge) with curl's `-u`.
#[test]
fn basic_auth_holds_over_http2() {
    let t = Scratch::new("peregrine-basic-auth-h2");
    let (_server, addr, _) = start(&t);
    let curl = |host: &str, args: &[&str], path: &str| -> (u16, String, String) {
        let out = Command::new(common::curl())
            .args(["-sS", "--max-time", "20", "--http2-prior-knowledge", "-D", "-"])
            .args(["-H", &format!("Host: {host}")])
            .args(args)
            .arg(format!("http://{addr}{path}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/2 "), "{head}");
        (head[7..10].parse().unwrap(), head.to_ascii_lowercase(), body.to_owned())
    };
    for host in HOSTS {
        for (path, user) in [
            ("/admin/secret.txt", "alice:wonderland"),
            ("/team/page.txt", "carol:hunter2"),
        ] {
            let (status, head, _) = curl(host, &[], path);
            assert_eq!(status, 401, "{host} {path}");
            assert!(head.contains("www-authenticate: basic realm="), "{head}");
            assert_eq!(curl(host, &["-u", "carol:wrong"], path).0, 401);
            let (status, head, body) = curl(host, &["-u", user], path);
            assert_eq!(status, 200, "{host} {path}: {head}");
            assert!(head.contains("cache-control: private"), "{head}");
            assert!(!body.is_empty());
        }
    }
}

/// `pack` writes hashes only: the archive's bytes hold no password
/// `_headers` gave in the clear; `archive ls` and `cat` show the rule as
/// its count of users, `diff` a change of users as counts; neither shows
/// a hash. `pack` says that `public` is dropped.
#[test]
fn an_archive_holds_no_plain_password_and_shows_users_as_a_count() {
    let t = Scratch::new("peregrine-basic-auth-archive");
    let (archive, packed) = common::packed(t.dir(), FILES, &[]);
    assert!(packed.contains("/team/* is protected by Basic-Auth"), "{packed}");
    let bytes = std::fs::read(&archive).unwrap();
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(
        !has(b"hunter2") && !has(b"correct-horse"),
        "a plain password in the archive"
    );
    assert!(has(b"carol:$2b$10$"), "the hash is there");

    let run = |args: &[&std::ffi::OsStr]| -> String {
        let out = common::peregrine().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("$2b$") && !text.contains("hunter2"), "{args:?}: {text}");
        text
    };
    let ls = run(&["archive".as_ref(), "ls".as_ref(), archive.as_os_str()]);
    let line = ls
        .lines()
        .find(|l| l.contains("/team/* (Basic-Auth)"))
        .unwrap_or_else(|| panic!("{ls}"));
    assert!(
        line.contains("401") && line.ends_with("Basic-Auth: <2 users>"),
        "{line}"
    );
    let cat = run(&[
        "archive".as_ref(),
        "cat".as_ref(),
        archive.as_os_str(),
        "/team/*".as_ref(),
    ]);
    assert_eq!(cat, "/team/*\n  Basic-Auth: <2 users>\n");
    let page = run(&[
        "archive".as_ref(),
        "cat".as_ref(),
        archive.as_os_str(),
        "/team/page.txt".as_ref(),
    ]);
    assert!(
        page.starts_with("team page\n") && page.contains("is protected (Basic-Auth: <2 users>)"),
        "{page}"
    );

    // Another deploy: dave leaves, erin comes, carol's password changes.
    let old = t.path("old.prg");
    std::fs::rename(&archive, &old).unwrap();
    t.write("site/_headers", "/team/*\n  Basic-Auth: carol:new-one erin:pw\n");
    common::packed(t.dir(), &[], &[]);
    let diff = run(&[
        "archive".as_ref(),
        "diff".as_ref(),
        old.as_os_str(),
        archive.as_os_str(),
    ]);
    assert!(
        diff.contains(
            "changed  default /team/* (Basic-Auth) [-]: Basic-Auth: <2 users> -> <2 users> (1 added, 1 removed, 1 with another password)"
        ),
        "{diff}"
    );
}

/// `serve DIR` with a plain `_headers` password on a cleartext listener
/// that is not loopback warns at start, and says `public` is dropped; on
/// loopback only the latter.
#[test]
fn plain_passwords_on_a_cleartext_public_listener_warn_at_start() {
    let t = Scratch::new("peregrine-basic-auth-warn");
    for (path, contents) in FILES {
        t.write(&format!("site/{path}"), contents);
    }
    for (bind, warned) in [("0.0.0.0:0", true), ("127.0.0.1:0", false)] {
        let server = Process::spawn(
            common::peregrine()
                .current_dir(t.dir())
                .args(["serve", "site", "--bind", bind]),
        );
        // The warnings come before the line that says where it listens.
        let deadline = std::time::Instant::now() + PATIENCE;
        let mut seen = String::new();
        while !seen.contains("://") {
            seen.push_str(&server.next_line_before(deadline).unwrap_or_else(|| panic!("{seen}")));
        }
        assert!(seen.contains("site: /team/* is protected"), "{seen}");
        assert!(seen.contains("`Cache-Control: public` is dropped"), "{seen}");
        assert_eq!(
            seen.contains("a password written in the clear protects it"),
            warned,
            "{bind}: {seen}"
        );
        assert!(!seen.contains("hunter2"), "{seen}");
    }
}
