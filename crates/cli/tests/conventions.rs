//! Issue 27's conventions through the binary: `peregrine serve DIR` and
//! `peregrine pack DIR` then `serve ARCHIVE` give the same answers (status,
//! `Location`, body) over HTTP/1.1 and HTTP/2 (curl, prior knowledge: a
//! client we did not write), for 404.html pages, clean URLs with
//! `--clean-urls redirect`, `_redirects` rewrites, 404 rules and query
//! conditions; a directory's listing as JSON over HTTP/2; and `pack`,
//! `check-config` and `serve` refuse a loop between `_redirects` and clean
//! URLs' 301. The engine hands every protocol the same handler, so HTTP/3
//! takes the same path (`tests/http3.rs` checks that path for files).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::process::{last_addr, Process};

/// A running `peregrine serve`, killed when dropped.
struct Running {
    _process: Process,
    addr: String,
}

fn start(args: &[&str]) -> Running {
    let mut cmd = common::peregrine();
    cmd.arg("serve").args(args).args(["--bind", "127.0.0.1:0"]);
    let process = Process::spawn(&mut cmd);
    let addr = last_addr(&process.listening());
    Running {
        _process: process,
        addr,
    }
}

/// What an answer says of the site: status, `Location`, body.
type Answer = (u16, Option<String>, String);

/// Splits a whole answer (head, blank line, body) into an [`Answer`].
fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let location = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case("location").then(|| v.trim().to_owned())
    });
    (status, location, body.to_owned())
}

/// One GET over HTTP/1.1 (our raw client).
fn h1(addr: &str, target: &str) -> Answer {
    parse(common::get(addr, target).as_bytes())
}

/// One GET over HTTP/2 by curl (prior knowledge), head and body.
fn h2(addr: &str, target: &str, accept: &str) -> Answer {
    let out = Command::new(common::curl())
        .args(["-sS", "--http2-prior-knowledge", "-D", "-", "-H"])
        .arg(format!("Accept: {accept}"))
        .arg(format!("http://{addr}{target}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.stdout.starts_with(b"HTTP/2 "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    parse(&out.stdout)
}

/// A site with each convention, in DIR/site, and the answers it gives
/// with `--clean-urls redirect`.
fn site(dir: &common::Scratch) -> (PathBuf, Vec<(&'static str, Answer)>) {
    let root = dir.path("site");
    for (path, body) in [
        ("index.html", "home"),
        ("about.html", "about"),
        ("guide.html", "guide page"),
        ("guide/index.html", "guide folder"),
        ("_404.html", "root not found"),
        ("shop/404.html", "shop not found"),
        ("spa/shell.html", "spa shell"),
        ("list/a.txt", "a"),
        ("list/a.txt.gz", "a sibling"),
        (
            "_redirects",
            "/app/* /spa/shell.html 200\n/old /about.html 404\n/store id=:id /blog/:id 301\n/q u=:u /:u 302\n",
        ),
    ] {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    let expected = vec![
        ("/about", (200, None, "about".to_owned())),
        (
            "/about.html?x=1",
            (301, Some("/about?x=1".to_owned()), "301 Moved Permanently\n".to_owned()),
        ),
        ("/guide", (200, None, "guide page".to_owned())),
        ("/guide/", (200, None, "guide folder".to_owned())),
        (
            "/guide/index.html",
            (301, Some("/guide/".to_owned()), "301 Moved Permanently\n".to_owned()),
        ),
        ("/shop/nothing", (404, None, "shop not found".to_owned())),
        ("/nothing", (404, None, "root not found".to_owned())),
        ("/app/a/b", (200, None, "spa shell".to_owned())),
        ("/old", (404, None, "about".to_owned())),
        (
            "/store?id=7",
            (301, Some("/blog/7".to_owned()), "301 Moved Permanently\n".to_owned()),
        ),
        ("/q?u=%2Fevil.example", (400, None, String::new())),
    ];
    (root, expected)
}

#[test]
fn a_directory_and_its_archive_answer_conventions_alike_over_http1_and_http2() {
    let scratch = common::Scratch::new("peregrine-conventions-parity");
    let (root, expected) = site(&scratch);
    let archive = root.with_extension("prg");
    let out = common::peregrine()
        .arg("pack")
        .arg(&root)
        .arg("-o")
        .arg(&archive)
        .args(["--clean-urls", "redirect"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = start(&[root.to_str().unwrap(), "--clean-urls", "redirect", "--list-dirs"]);
    let packed = start(&[archive.to_str().unwrap()]);
    for (target, want) in &expected {
        for server in [&dir, &packed] {
            for (protocol, got) in [
                ("h1", h1(&server.addr, target)),
                ("h2", h2(&server.addr, target, "*/*")),
            ] {
                if want.0 == 400 {
                    // The 400's body names the reason; the status is the point.
                    assert_eq!((got.0, &got.1), (400, &None), "{protocol} {target}");
                    assert!(got.2.contains("another host"), "{protocol} {target}: {}", got.2);
                } else {
                    assert_eq!(&got, want, "{protocol} {target}");
                }
            }
        }
    }
    // A listing for programs, over HTTP/2: JSON, siblings left out.
    let (status, _, json) = h2(&dir.addr, "/list/", "application/json");
    assert_eq!(status, 200);
    assert_eq!(
        json,
        "[\n{\"name\":\"a.txt\",\"url\":\"./a.txt\",\"is_dir\":false,\"size\":1,\"mod_time\":\"".to_owned()
            + json.split("\"mod_time\":\"").nth(1).unwrap_or_default()
    );
    assert!(!json.contains("a.txt.gz"), "{json}");
    // An archive has no listings: the path is missing there.
    assert_eq!(h1(&packed.addr, "/list/").0, 404);
}

/// `check-config`'s or `pack`'s stderr, which must have failed.
fn refused(args: &[&std::ffi::OsStr]) -> String {
    let out = common::peregrine().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    err
}

/// `/about /about.html 301!` with clean URLs' 301 from `/about.html` to
/// `/about` never ends: `pack` and `check-config` refuse it, naming the
/// loop (`serve DIR` checks it where `check-config` does, in
/// `FileServer::new`); with `--clean-urls on` (no 301) there is none.
#[test]
fn pack_check_config_and_serve_refuse_a_redirect_loop_with_clean_urls() {
    let dir = common::Scratch::new("peregrine-conventions-loop");
    dir.write("site/about.html", "about");
    dir.write("site/_redirects", "/about /about.html 301!\n");
    let root = dir.path("site");
    let out = dir.path("site.prg");
    let loop_named = "a redirect loop (/about -> /about.html -> /about)";
    let os = |s: &str| std::ffi::OsString::from(s);
    let pack = |mode: &str| {
        vec![
            os("pack"),
            root.clone().into(),
            os("-o"),
            out.clone().into(),
            os("--clean-urls"),
            os(mode),
        ]
    };
    let args = pack("redirect");
    let err = refused(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    assert!(err.contains(loop_named), "{err}");
    assert!(!out.exists());
    let args = [
        os("check-config"),
        os("serve"),
        root.clone().into(),
        os("--clean-urls"),
        os("redirect"),
    ];
    let err = refused(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    assert!(err.contains(loop_named), "check-config: {err}");
    let args = pack("on");
    let done = common::peregrine().args(&args).output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(Path::new(&out).exists());
}
