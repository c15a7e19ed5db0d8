//! The example site in a real browser: `peregrine serve site` loaded in
//! headless Chromium, then reloaded.
//!
//! Chromium is driven by `tests/browser/check.mjs` over the DevTools protocol
//! (`--remote-debugging-pipe`), with Node.js and nothing from npm. What the
//! test needs and does not find it installs from Debian's packages
//! (`chromium`, `nodejs`), so `cargo test --workspace` runs it on a fresh
//! Debian machine as root. `PEREGRINE_CHROMIUM` and `PEREGRINE_NODE` name
//! other binaries.

use std::env;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

/// The server, killed when the test ends however it ends. Its stderr stays
/// open so that a late message does not fail on a closed pipe.
struct Server {
    child: Child,
    stderr: BufReader<ChildStderr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example_site() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../site")
}

/// Starts `peregrine serve WHAT` (a directory or an archive) on a free port
/// and returns it with its URL, read from the line it prints once it listens.
fn serve(what: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .arg("serve")
        .arg(what)
        .args(["--bind", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start peregrine");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut server = Server { child, stderr };
    let mut printed = String::new();
    loop {
        let mut line = String::new();
        if server.stderr.read_line(&mut line).unwrap() == 0 {
            panic!("peregrine serve exited without saying where it listens; it printed: {printed:?}");
        }
        // "peregrine: serving SITE on http://127.0.0.1:PORT/"
        if let Some((_, url)) = line.trim().rsplit_once(" on http://") {
            let url = format!("http://{url}");
            return (server, url);
        }
        printed.push_str(&line);
    }
}

/// The first of `names` found on PATH.
fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The program `var` names, else the first of `names` on PATH, else the one
/// Debian's `package` installs (as root, which the test command runs as on a
/// fresh machine).
fn program(var: &str, names: &[&str], package: &str) -> PathBuf {
    if let Some(path) = env::var_os(var) {
        return path.into();
    }
    if let Some(path) = find_on_path(names) {
        return path;
    }
    apt_install(package);
    find_on_path(names).unwrap_or_else(|| panic!("Debian's {package} is installed but none of {names:?} is on PATH"))
}

fn apt_install(package: &str) {
    let script = format!(
        "apt-get update -q && apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 {package}"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|e| panic!("cannot run apt-get to install {package}: {e}"));
    assert!(
        out.status.success(),
        "the browser test needs {package} and could not install it (`{script}` needs root and Debian's \
         package repositories; or set PEREGRINE_CHROMIUM / PEREGRINE_NODE):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

#[test]
fn example_site_loads_in_chromium_and_a_reload_is_answered_not_modified() {
    check_in_chromium(&example_site(), "dir");
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
    check_in_chromium(&archive, "archive");
    let _ = std::fs::remove_file(&archive);
}

/// Serves `what` and runs check.mjs on it (`served`: dir or archive, which
/// says what encodings to expect).
fn check_in_chromium(what: &Path, served: &str) {
    let chromium = program("PEREGRINE_CHROMIUM", &["chromium", "chromium-browser"], "chromium");
    let node = program("PEREGRINE_NODE", &["node", "nodejs"], "nodejs");
    let (_server, url) = serve(what);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check.mjs");
    // check.mjs checks, on the first load: the title; that app.js ran (#status);
    // that style.css applied (body background); that falcon.svg rendered; that
    // the page and each asset were answered 200 by the server, with a strong
    // ETag, and with Content-Encoding zstd where a .zst sibling exists; that no
    // request failed and the page logged no error. On a reload: the same page
    // state; that the document went back with If-None-Match and was answered
    // 304 with the same ETag; that every asset came from a cache or a 304 with
    // its ETag and, where negotiated, Vary: Accept-Encoding (RFC 9110 §15.4.5).
    let out = Command::new(&node)
        .arg(&script)
        .arg(&chromium)
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
