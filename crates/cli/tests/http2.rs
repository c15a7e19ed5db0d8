//! HTTP/2 judged by third parties: h2spec's 145 conformance cases, over TLS
//! (ALPN) and cleartext (prior knowledge), against `hello`, `serve DIR` and
//! `serve ARCHIVE`; then curl, nghttp and h2load fetching real files.
//!
//! What the tests need is installed by them when missing: h2spec with
//! `go install` (through the Go module proxy; Debian's golang-go if there is
//! no Go), curl and nghttp2-client with apt (under `common::APT_LOCK`).
//! `PEREGRINE_H2SPEC` names another h2spec binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::Program;
use test_support::pki::SelfSigned;
use test_support::process::{last_addr, Process};

/// A running `peregrine`, killed when dropped.
struct Running {
    _process: Process,
    addr: String,
}

fn start(args: &[&str], tls: Option<&SelfSigned>) -> Running {
    let mut cmd = common::peregrine();
    cmd.args(args).args(["--bind", "127.0.0.1:0"]);
    if let Some(pki) = tls {
        cmd.arg("--tls-cert").arg(&pki.cert).arg("--tls-key").arg(&pki.key);
    }
    // Its stderr is read to the end on a thread: the server never blocks
    // on it.
    let process = Process::spawn(&mut cmd);
    let addr = last_addr(&process.listening());
    Running {
        _process: process,
        addr,
    }
}

/// A certificate for the server (the clients are told not to check it).
fn pki(tag: &str) -> SelfSigned {
    SelfSigned::new(&format!("h2-{tag}"), &["localhost", "127.0.0.1"])
}

/// A site with a small page and files of 1 MiB and 5 MB (bodies larger than
/// every flow-control window), in DIR/site, packed into DIR/site.prg.
fn site(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("peregrine-h2-site-{tag}-{}", std::process::id()));
    let root = dir.join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<!doctype html><title>h2</title><p>hello\n").unwrap();
    std::fs::write(root.join("1m.bin"), pattern(1 << 20)).unwrap();
    std::fs::write(root.join("5m.bin"), pattern(5_000_000)).unwrap();
    let archive = dir.join("site.prg");
    let out = common::peregrine()
        .arg("pack")
        .arg(&root)
        .arg("-o")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (root, archive)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// h2spec: found, or installed with `go install` once per test binary.
fn h2spec() -> &'static Path {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        if let Some(p) = std::env::var_os("PEREGRINE_H2SPEC") {
            return Ok(p.into());
        }
        let gobin = home().join("go/bin");
        let find = || common::find_on_path(&["h2spec"]).or_else(|| Some(gobin.join("h2spec")).filter(|p| p.is_file()));
        if let Some(p) = find() {
            return Ok(p);
        }
        let go = match common::find_on_path(&["go"])
            .or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file()))
        {
            Some(go) => go,
            None => common::find_or_install(&[Program {
                var: "PEREGRINE_GO",
                names: &["go"],
                package: "golang-go",
            }])?
            .remove(0),
        };
        test_support::install::go_install(&go, "github.com/summerwind/h2spec/cmd/h2spec@latest", &gobin)?;
        find().ok_or_else(|| format!("go install put no h2spec in {}", gobin.display()))
    });
    match found {
        Ok(p) => p,
        Err(e) => panic!("h2spec is needed: {e}"),
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

/// Runs every h2spec case against `server`; fails naming each failed case.
fn conformance(server: &Running, tls: bool) {
    let (host, port) = server.addr.rsplit_once(':').unwrap();
    let mut cmd = Command::new(h2spec());
    cmd.args(["-h", host, "-p", port, "-o", "5"]);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let out = cmd.output().expect("h2spec runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" tests, "))
        .unwrap_or_else(|| panic!("h2spec printed no summary:\n{stdout}"));
    println!("h2spec against {} (tls: {tls}): {summary}", server.addr);
    let failures = stdout.split("Failures:").nth(1).unwrap_or("");
    assert!(
        summary.contains(" 0 failed") && summary.contains(" 0 skipped") && out.status.success(),
        "h2spec: {summary}\n{failures}"
    );
    let total: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(total >= 145, "h2spec ran only {total} cases: {summary}");
}

#[test]
fn h2spec_hello_over_tls_and_h2c() {
    let pki = pki("hello");
    conformance(&start(&["hello"], Some(&pki)), true);
    conformance(&start(&["hello"], None), false);
}

#[test]
fn h2spec_serve_dir_over_tls_and_h2c() {
    let pki = pki("dir");
    let (root, _) = site("spec-dir");
    let root = root.to_str().unwrap();
    conformance(&start(&["serve", root], Some(&pki)), true);
    conformance(&start(&["serve", root], None), false);
}

#[test]
fn h2spec_serve_archive_over_tls_and_h2c() {
    let pki = pki("archive");
    let (_, archive) = site("spec-archive");
    let archive = archive.to_str().unwrap();
    conformance(&start(&["serve", archive], Some(&pki)), true);
    conformance(&start(&["serve", archive], None), false);
}

fn clients() -> &'static (PathBuf, PathBuf, PathBuf) {
    static FOUND: OnceLock<Result<(PathBuf, PathBuf, PathBuf), String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let p = common::find_or_install(&[
            Program {
                var: "PEREGRINE_CURL",
                names: &["curl"],
                package: "curl",
            },
            Program {
                var: "PEREGRINE_NGHTTP",
                names: &["nghttp"],
                package: "nghttp2-client",
            },
            Program {
                var: "PEREGRINE_H2LOAD",
                names: &["h2load"],
                package: "nghttp2-client",
            },
        ])?;
        Ok((p[0].clone(), p[1].clone(), p[2].clone()))
    });
    match found {
        Ok(p) => p,
        Err(e) => panic!("curl and nghttp2-client are needed: {e}"),
    }
}

/// curl over TLS (ALPN) and h2c (prior knowledge): every file arrives
/// whole, over HTTP/2, from a directory and from its archive.
#[test]
fn curl_fetches_files_over_http2() {
    let (curl, _, _) = clients();
    let pki = pki("curl");
    let (root, archive) = site("curl");
    for what in [&root, &archive] {
        let what = what.to_str().unwrap();
        for (server, scheme, flag) in [
            (start(&["serve", what], Some(&pki)), "https", "--http2"),
            (start(&["serve", what], None), "http", "--http2-prior-knowledge"),
        ] {
            for file in ["index.html", "1m.bin", "5m.bin"] {
                let out = Command::new(curl)
                    .args(["-sSk", flag, "-w", "%{http_version} %{http_code}", "-o", "-"])
                    .arg(format!("{scheme}://{}/{file}", server.addr))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
                let (body, tail) = out.stdout.split_at(out.stdout.len() - 5);
                assert_eq!(std::str::from_utf8(tail).unwrap(), "2 200", "{scheme} {what} {file}");
                assert!(
                    body == std::fs::read(root.join(file)).unwrap(),
                    "{scheme} {what} {file}: body differs"
                );
            }
        }
    }
}

/// nghttp (many streams on one connection) and h2load (many connections of
/// many streams): every request succeeds.
#[test]
fn nghttp_and_h2load_succeed() {
    let (_, nghttp, h2load) = clients();
    let pki = pki("nghttp");
    let (_, archive) = site("nghttp");
    let archive = archive.to_str().unwrap();
    for (server, scheme) in [
        (start(&["serve", archive], Some(&pki)), "https"),
        (start(&["serve", archive], None), "http"),
    ] {
        let base = format!("{scheme}://{}", server.addr);
        let mut cmd = Command::new(nghttp);
        cmd.args(["-n", "-s"]);
        for i in 0..20 {
            // Distinct URIs: nghttp fetches a repeated one once.
            let file = if i % 2 == 0 { "index.html" } else { "1m.bin" };
            cmd.arg(format!("{base}/{file}?n={i}"));
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "nghttp: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.matches(" 200 ").count(), 20, "{stdout}");

        let out = Command::new(h2load)
            .args(["-n", "2000", "-c", "4", "-m", "16"])
            .arg(format!("{base}/index.html"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("2000 succeeded, 0 failed, 0 errored"),
            "h2load over {scheme}: {stdout}"
        );
        assert!(stdout.contains("status codes: 2000 2xx"), "{stdout}");
        if scheme == "https" {
            assert!(stdout.contains("Application protocol: h2"), "{stdout}");
        }
    }
}
