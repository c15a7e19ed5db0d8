//! The Debian package (`dist/debian/`, `[package.metadata.deb]` in
//! crates/cli/Cargo.toml): its unit passes `systemd-analyze verify` and
//! runs as the `peregrine` user with only CAP_NET_BIND_SERVICE, its
//! configuration is one `serve` accepts, and, when asked (`--ignored`), the
//! package itself is built and unpacked into a scratch root, where its
//! files, conffile, maintainer scripts and unit are checked.
//!
//! Building the package is ignored by default: it needs a release build
//! (fat LTO: minutes on 2 cores) and cargo-deb, which the test installs
//! with `cargo install --locked` when it is missing (minutes again;
//! RELEASING.md has the figures). Run it with
//! `cargo test -p peregrine-cli --test debian -- --ignored`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::Scratch;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `systemd-analyze verify` of `unit` with its ExecStart's binary taken
/// from `root` (a copy of the unit names it there: `--root` would want
/// systemd's own units under `root` too); `None` where systemd-analyze is
/// missing.
fn verify_unit(root: &Path, unit: &Path) -> Option<(bool, String)> {
    verify_unit_of(root, unit, "/usr/bin/peregrine")
}

/// As `verify_unit`, for a unit whose ExecStart names `exe`.
fn verify_unit_of(root: &Path, unit: &Path, exe: &str) -> Option<(bool, String)> {
    let analyze = test_support::install::find_on_path(&["systemd-analyze"])?;
    let text = std::fs::read_to_string(unit).unwrap();
    let bin = root.join(exe.trim_start_matches('/'));
    let copy = root.join("peregrine.service");
    std::fs::write(&copy, text.replace(&format!("{exe} "), &format!("{} ", bin.display()))).unwrap();
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success() && !said.contains("peregrine.service:"), said))
}

fn check_unit_text(unit: &str) {
    for line in [
        "User=peregrine",
        "Group=peregrine",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "StateDirectory=peregrine",
        "LogsDirectory=peregrine",
        "ExecStart=/usr/bin/peregrine serve --config /etc/peregrine/peregrine.toml",
        "Type=notify",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} not in the unit:\n{unit}");
    }
}

#[test]
fn the_packaged_unit_runs_as_peregrine_and_passes_systemd_analyze() {
    check_unit_text(&read("dist/debian/peregrine.service"));
    // A root holding what ExecStart names: this test's own binary.
    let root = Scratch::new("peregrine-deb-unit");
    let bin = root.dir().join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_peregrine"), bin.join("peregrine")).unwrap();
    let unit = repo().join("dist/debian/peregrine.service");
    match verify_unit(root.dir(), &unit) {
        Some((ok, text)) => assert!(ok, "{text}"),
        None => eprintln!("debian.rs: systemd-analyze is not installed: the unit's text was checked, not verified"),
    }
}

/// The example unit for a hand install (`dist/systemd/`) serves what its
/// header says under its hardening: ACME's default state directory
/// (`/var/lib/peregrine`) writable under `ProtectSystem=strict`
/// (`StateDirectory=`; the review found it read-only), HTTPS on 443 when
/// the header names it (the review found ExecStart binding :80 only);
/// ExecStart's command line is one `check-config` accepts (its root and
/// log replaced by scratch ones); `systemd-analyze verify` passes where
/// present.
#[test]
fn the_example_unit_can_write_what_it_serves_and_passes_systemd_analyze() {
    let unit = read("dist/systemd/peregrine.service");
    let exec: String = (unit.lines())
        .skip_while(|l| !l.starts_with("ExecStart="))
        .scan(true, |more, l| {
            let line = (*more).then(|| l.trim_end_matches('\\').to_owned());
            *more = l.ends_with('\\');
            line
        })
        .collect::<Vec<_>>()
        .join(" ");
    let args: Vec<&str> = exec.trim_start_matches("ExecStart=").split_whitespace().collect();
    assert_eq!(args[0], "/usr/local/bin/peregrine", "{exec}");
    assert!(unit.lines().any(|l| l == "ProtectSystem=strict"));
    // ACME's default state directory, writable (also for an `--acme-ca`
    // added to ExecStart later).
    assert!(
        unit.lines().any(|l| l == "StateDirectory=peregrine"),
        "ACME's state directory /var/lib/peregrine is read-only under ProtectSystem=strict:\n{unit}"
    );
    // HTTPS on 443: bound, or an ACME site's default listeners (no --bind).
    let header: String = (unit.lines()).take_while(|l| l.starts_with('#')).collect();
    let https = (args.contains(&"--acme-ca") && !args.contains(&"--bind")) || args.iter().any(|a| a.ends_with(":443"));
    assert_eq!(
        header.contains("443"),
        https,
        "the header's ports and ExecStart's:\n{unit}"
    );
    let site = Scratch::new("peregrine-example-unit");
    let root = site.dir().to_string_lossy().into_owned();
    let log = site.dir().join("access.log").to_string_lossy().into_owned();
    let args: Vec<String> = (args[1..].iter())
        .map(|a| {
            a.replace("/srv/www", &root)
                .replace("/var/log/peregrine/access.log", &log)
        })
        .collect();
    let out = common::peregrine().arg("check-config").args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = site.dir().join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    if std::fs::hard_link(env!("CARGO_BIN_EXE_peregrine"), bin.join("peregrine")).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_peregrine"), bin.join("peregrine")).unwrap();
    }
    let unit = repo().join("dist/systemd/peregrine.service");
    match verify_unit_of(site.dir(), &unit, "/usr/local/bin/peregrine") {
        Some((ok, text)) => assert!(ok, "{text}"),
        None => eprintln!("debian.rs: systemd-analyze is not installed: the unit's text was checked, not verified"),
    }
}

/// The packaged configuration is one `serve` accepts (its root, which
/// postinst makes, and its log directory, which systemd makes, replaced by
/// scratch ones: a flag beats the file).
#[test]
fn the_packaged_configuration_is_accepted() {
    let site = Scratch::new("peregrine-deb-config");
    let out = common::peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(repo().join("dist/debian/peregrine.toml"))
        .arg(site.dir())
        .arg("--access-log")
        .arg(site.dir().join("access.log"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("bind = [\":80\"]"), "{text}");
}

/// The workspace's target directory (where the test binary lives).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from)
}

/// cargo-deb: on PATH, else installed once into a cache under the target
/// directory (`cargo install --locked`).
fn cargo_deb() -> PathBuf {
    if let Some(found) = test_support::install::find_on_path(&["cargo-deb"]) {
        return found;
    }
    let target = target_dir();
    let root = target.join("tools");
    let bin = root.join("bin/cargo-deb");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["install", "--locked", "cargo-deb", "--root"])
            .arg(&root)
            .env("CARGO_TARGET_DIR", target.join("tools-build"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo install --locked cargo-deb failed");
    }
    bin
}

#[test]
#[ignore = "builds a release binary and needs cargo-deb (installed if missing): minutes; run with --ignored"]
fn the_debian_package_unpacks_with_its_files_conffile_user_and_unit() {
    let deb_bin = cargo_deb();
    let path = format!(
        "{}:{}",
        deb_bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out_dir = Scratch::new("peregrine-deb-out");
    // A target directory of its own: the `cargo test` running this holds
    // its own one's lock.
    let out = Command::new(repo().join("dist/debian/build-deb.sh"))
        .args(["--output"])
        .arg(out_dir.dir())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", target_dir().join("deb"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deb = std::fs::read_dir(out_dir.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb");

    let root = Scratch::new("peregrine-deb-root");
    let unpack = |args: &[&str], to: &Path| {
        let out = Command::new("dpkg-deb").args(args).arg(&deb).arg(to).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    unpack(&["-x"], root.dir());
    let control = root.dir().join("DEBIAN");
    unpack(&["-e"], &control);

    let r = root.dir();
    for file in [
        "usr/bin/peregrine",
        "usr/share/man/man1/peregrine.1.gz",
        "usr/share/man/man1/peregrine-serve.1.gz",
        "usr/share/bash-completion/completions/peregrine",
        "usr/share/zsh/vendor-completions/_peregrine",
        "usr/share/fish/vendor_completions.d/peregrine.fish",
        "etc/peregrine/peregrine.toml",
        "usr/share/doc/peregrine/peregrine.example.toml",
    ] {
        assert!(r.join(file).is_file(), "{file} is not in the package");
    }
    let unit = [
        "lib/systemd/system/peregrine.service",
        "usr/lib/systemd/system/peregrine.service",
    ]
    .iter()
    .map(|u| r.join(u))
    .find(|u| u.is_file())
    .expect("the unit in the package");
    check_unit_text(&std::fs::read_to_string(&unit).unwrap());
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert!(
        conffiles.lines().any(|l| l == "/etc/peregrine/peregrine.toml"),
        "{conffiles}"
    );
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("useradd --system --gid peregrine"), "{postinst}");
    let fields = std::fs::read_to_string(control.join("control")).unwrap();
    assert!(fields.lines().any(|l| l == "Package: peregrine"), "{fields}");
    // The packaged binary runs and says what it is.
    let version = Command::new(r.join("usr/bin/peregrine"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(version.status.success());
    if let Some((ok, text)) = verify_unit(r, &unit) {
        assert!(ok, "{text}");
    }
}
