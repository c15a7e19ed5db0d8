//! Build information for `peregrine --version`: git revision, rustc, target, profile.
//!
//! Every probe is allowed to fail (a source tarball has no `.git`, a build
//! machine may have no `git`): the binary then says "unknown" rather than
//! failing to build.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let revision = match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(rev), Some(date)) => format!("{rev} ({date})"),
        (Some(rev), None) => rev,
        _ => "unknown (built outside a git checkout)".to_owned(),
    };
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=PEREGRINE_GIT_REVISION={revision}");
    println!("cargo:rustc-env=PEREGRINE_RUSTC_VERSION={rustc_version}");
    println!("cargo:rustc-env=PEREGRINE_TARGET={}", env("TARGET"));
    println!("cargo:rustc-env=PEREGRINE_PROFILE={}", env("PROFILE"));

    // Rebuild when HEAD moves: HEAD itself (a checkout), its reflog (every
    // commit and checkout, even when the branch's ref lives only in
    // packed-refs), the branch's ref and packed-refs. `--git-path` finds
    // them in a worktree too, where `.git` is a file. Without any of these
    // lines cargo would rerun this script on every change in the package.
    println!("cargo:rerun-if-changed=build.rs");
    let mut watched = vec!["HEAD".to_owned(), "logs/HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}
