//! The example site in a real browser: `peregrine serve site` loaded in
//! headless Chromium, then reloaded.
//!
//! Chromium is driven by `tests/browser/check.mjs` over the DevTools protocol
//! (`--remote-debugging-pipe`), with Node.js and nothing from npm. What the
//! test needs and does not find it installs from Debian's packages
//! (`chromium`, `nodejs`), so `cargo test --workspace` runs it on a fresh
//! Debian machine as root: once per run, whichever test asks first, under a
//! lock that other test binaries and runs take too (`common::find_or_install`). `PEREGRINE_CHROMIUM` and `PEREGRINE_NODE` name
//! other binaries.

mod common;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::Program;
use test_support::pki::SelfSigned;
use test_support::process::{urls, Process};

fn example_site() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../site")
}

/// Starts `peregrine serve WHAT` (a directory or an archive) on a free port
/// and returns it (killed when the test ends however it ends) with its URL,
/// read from the line it prints once it listens.
fn serve(what: &Path, tls: Option<&SelfSigned>) -> (Process, String) {
    let mut cmd = common::peregrine();
    cmd.arg("serve").arg(what).args(["--bind", "127.0.0.1:0"]);
    if let Some(pki) = tls {
        cmd.arg("--tls-cert").arg(&pki.cert).arg("--tls-key").arg(&pki.key);
    }
    let server = Process::spawn(&mut cmd);
    // "peregrine: ...; serving SITE on http://127.0.0.1:PORT/" (https://)
    let url = urls(&server.listening()).pop().unwrap();
    (server, url)
}

/// Chromium and Node.js, found or installed once per test binary: both
/// tests ask, the first installs (under `common::APT_LOCK`, so that no other
/// binary or run installs at the same time) and the second waits for it.
/// An installation that failed fails every test that needs it, saying why.
fn browser() -> &'static (PathBuf, PathBuf) {
    static BROWSER: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    let found = BROWSER.get_or_init(|| {
        let programs = common::find_or_install(&[
            Program {
                var: "PEREGRINE_CHROMIUM",
                names: &["chromium", "chromium-browser"],
                package: "chromium",
            },
            Program {
                var: "PEREGRINE_NODE",
                names: &["node", "nodejs"],
                package: "nodejs",
            },
        ])?;
        Ok((programs[0].clone(), programs[1].clone()))
    });
    match found {
        Ok(found) => found,
        Err(why) => {
            panic!("the browser test needs Chromium and Node.js (or PEREGRINE_CHROMIUM / PEREGRINE_NODE): {why}")
        }
    }
}

#[test]
fn example_site_loads_in_chromium_and_a_reload_is_answered_not_modified() {
    check_in_chromium(&example_site(), "dir", None);
}

#[test]
fn packed_example_site_loads_in_chromium_with_brotli_and_a_reload_is_answered_not_modified() {
    let archive = env::temp_dir().join(format!("peregrine-browser-{}.prg", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .arg("pack")
        .arg(example_site())
        .arg("-o")
        .arg(&archive)
        .output()
        .expect("cannot run peregrine pack");
    assert!(
        out.status.success(),
        "pack failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_in_chromium(&archive, "archive", None);
    let _ = std::fs::remove_file(&archive);
}

/// Over HTTPS, Chromium must negotiate HTTP/2 (check.mjs checks each
/// response's protocol): the site loads over h2 as it does over HTTP/1.1.
#[test]
fn example_site_loads_in_chromium_over_https_with_http2() {
    let pki = SelfSigned::new("browser", &["127.0.0.1", "localhost"]);
    check_in_chromium(&example_site(), "dir", Some(&pki));
}

/// Serves `what` and runs check.mjs on it (`served`: dir or archive, which
/// says what encodings to expect).
fn check_in_chromium(what: &Path, served: &str, tls: Option<&SelfSigned>) {
    let (chromium, node) = browser();
    let (_server, url) = serve(what, tls);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check.mjs");
    // check.mjs checks, on the first load: the title; that app.js ran (#status);
    // that style.css applied (body background); that falcon.svg rendered; that
    // the page and each asset were answered 200 by the server, with a strong
    // ETag, and with Content-Encoding br where a .br sibling exists (dir); that no
    // request failed and the page logged no error. On a reload: the same page
    // state; that the document went back with If-None-Match and was answered
    // 304 with the same ETag; that every asset came from a cache or a 304 with
    // its ETag and, where negotiated, Vary: Accept-Encoding (RFC 9110 §15.4.5).
    let out = Command::new(node)
        .arg(&script)
        .arg(chromium)
        .arg(&url)
        .arg(served)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} (served on {url}) failed in headless Chromium ({}):\n{stdout}{stderr}",
        what.display(),
        chromium.display(),
    );
    println!("{stdout}");
}
