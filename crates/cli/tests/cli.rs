//! The `peregrine` binary, run as a user would.

mod common;

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{get, packed, peregrine, served, served_addr, terminate};
use test_support::process::BoundedOutput;

#[test]
fn hello_answers_and_exits_cleanly_on_sigterm() {
    let mut child = peregrine()
        .args(["hello", "--bind", "127.0.0.1:0", "--workers", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "peregrine: hello on http://127.0.0.1:PORT/"
    let addr = served_addr(&mut child);
    let out = get(&addr, "/anything");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nHello, World!"), "{out}");
    terminate(child);
}

#[test]
fn bad_arguments_are_named_in_the_error() {
    let out = peregrine()
        .args(["hello", "--workers", "0", "--bind", "127.0.0.1:0"])
        .bounded_output();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers <N>': 0 is out of range: from 1 to 1024"));
    let out = peregrine().args(["hello", "--idle-timeout=0"]).bounded_output();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idle-timeout"));
}

/// Issue 33: Caddy's `--listen :9000` got "a similar argument exists:
/// '--list-dirs'". It is `--bind` under Caddy's name.
#[test]
fn listen_is_bind_under_caddys_name() {
    let mut child = peregrine()
        .args(["hello", "--listen", "127.0.0.1:0", "--workers", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = served_addr(&mut child);
    assert!(get(&addr, "/").starts_with("HTTP/1.1 200 OK\r\n"));
    terminate(child);
}

/// Issue 33: `--port` and `--root`, which other servers take, are answered
/// with what says it here.
#[test]
fn port_and_root_are_answered_with_the_flag_that_says_it() {
    for (args, says) in [
        (
            &["serve", "site", "--port", "9000"][..],
            "--bind :9000 for every interface",
        ),
        (&["hello", "--port=9000"], "--bind 127.0.0.1:9000 for this machine only"),
        (&["serve", "--root", "public"], "peregrine serve public"),
        (&["serve", "--root=public", "--port", "80"], "peregrine serve public"),
    ] {
        let out = peregrine().args(args).bounded_output();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("--list-dirs"), "{args:?}: {err}");
    }
}

/// The cause once: the library's error no longer repeats its source in its
/// own message, which the CLI prints as a chain.
#[test]
fn an_address_in_use_is_reported_once_and_exits_non_zero() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let out = peregrine().args(["hello", "--bind", &addr]).bounded_output();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
    // The redirecting listener's address is named with its flag.
    let pki = test_support::pki::SelfSigned::new("cli-redirect-in-use", &["localhost"]);
    let out = peregrine()
        .args(["hello", "--bind", "127.0.0.1:0", "--redirect-http", &addr])
        .arg("--tls-cert")
        .arg(&pki.cert)
        .arg("--tls-key")
        .arg(&pki.key)
        .bounded_output();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("peregrine: --redirect-http {addr}: cannot listen on {addr}: ")),
        "{err}"
    );
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}

/// A scratch directory for one test, empty.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the binary with `args`; it must exit with `code` (2: clap refused
/// a value; 1: the value was read and found wrong). Returns its stderr.
fn refused(code: i32, args: &[&OsStr]) -> String {
    let out = peregrine().args(args).bounded_output();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    err
}

#[test]
fn a_file_that_is_not_an_archive_is_named_so_with_its_first_bytes() {
    let dir = scratch("not-archive");
    let empty = dir.join("empty.prg");
    std::fs::write(&empty, b"").unwrap();
    let page = dir.join("page.html");
    std::fs::write(&page, b"<html>\x01hi</html>").unwrap();
    for prefix in [&["serve"][..], &["check-config", "serve"]] {
        let run = |file: &Path| {
            let mut args: Vec<&OsStr> = prefix.iter().map(OsStr::new).collect();
            args.extend([file.as_os_str(), OsStr::new("--bind"), OsStr::new("127.0.0.1:0")]);
            refused(1, &args)
        };
        let err = run(&empty);
        assert!(
            err.contains("empty.prg: not a Peregrine archive: the file is empty"),
            "{err}"
        );
        assert!(!err.contains("directory"), "{err}");
        let err = run(&page);
        assert!(err.contains("page.html: not a Peregrine archive"), "{err}");
        assert!(err.contains(r#"it starts with "<html>\x01hi</html>""#), "{err}");
    }
}

#[test]
fn directory_flags_are_refused_for_an_archive_and_archive_flags_for_a_directory() {
    let dir = scratch("misplaced");
    let (archive, _) = packed(&dir, &[("index.html", "hi")], &[]);
    let site = dir.join("site");
    for prefix in [&["serve"][..], &["check-config", "serve"]] {
        let with = |root: &Path, flags: &[&str]| -> String {
            let mut args: Vec<&OsStr> = prefix.iter().map(OsStr::new).collect();
            args.push(root.as_os_str());
            args.extend(["--bind", "127.0.0.1:0"].map(OsStr::new));
            args.extend(flags.iter().map(OsStr::new));
            refused(1, &args)
        };
        for flag in [
            &["--list-dirs"][..],
            &["--404", "/missing.html"],
            &["--fallback", "/index.html"],
            &["--cache-control", "max-age=60"],
            &["--no-security-headers"],
            &["--index", "home.html"],
            &["--follow-symlinks"],
            &["--no-precompressed"],
            &["--no-compress"],
            &["--revalidate-interval", "5"],
            &["--cache-entries", "100"],
        ] {
            let err = with(&archive, flag);
            assert!(err.contains("site.prg is an archive"), "{flag:?}: {err}");
            assert!(err.contains(flag[0]), "{flag:?}: {err}");
        }
        let err = with(&archive, &["--list-dirs", "--404", "/x"]);
        assert!(
            err.contains("--list-dirs (an archive has no listings), --404 (pack takes _404.html)"),
            "{err}"
        );
        let err = with(&site, &["--in-memory"]);
        assert!(err.contains("--in-memory applies to an archive, and "), "{err}");
        assert!(err.contains("site is a directory"), "{err}");
    }
}

/// `--bind HOST:PORT` binds what HOST resolves to; `:0` is every IPv4
/// interface (an ephemeral port is one family's: see the next test).
#[test]
fn bind_takes_a_host_name_and_a_bare_port() {
    for (bind, listening) in [("localhost:0", "127.0.0.1:"), (":0", "0.0.0.0:")] {
        let mut child = peregrine()
            .args(["hello", "--workers", "1", "--bind", bind])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = served_addr(&mut child);
        assert!(addr.starts_with(listening), "--bind {bind}: {addr}");
        let port = addr.rsplit(':').next().unwrap();
        let out = get(&format!("127.0.0.1:{port}"), "/");
        assert!(out.ends_with("Hello, World!"), "--bind {bind}: {out}");
        terminate(child);
    }
}

/// `--bind :PORT` is dual stack, as Caddy's: `0.0.0.0:PORT` and
/// `[::]:PORT` (IPv6-only), both answering, where the host has IPv6.
#[test]
fn a_bare_port_binds_ipv4_and_ipv6() {
    // A port free on both families, as far as one can tell beforehand: a
    // dual-stack socket (Linux's default for `[::]`) holds it on both.
    let ipv6 = std::net::TcpListener::bind("[::]:0").is_ok();
    let port = match ipv6 {
        true => std::net::TcpListener::bind("[::]:0"),
        false => std::net::TcpListener::bind("0.0.0.0:0"),
    }
    .unwrap()
    .local_addr()
    .unwrap()
    .port();
    let mut child = peregrine()
        .args(["hello", "--workers", "1", "--bind", &format!(":{port}")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains(&format!("http://0.0.0.0:{port}/")), "{line}");
    assert!(get(&format!("127.0.0.1:{port}"), "/").ends_with("Hello, World!"));
    if ipv6 {
        assert!(line.contains(&format!("http://[::]:{port}/")), "{line}");
        assert!(get(&format!("[::1]:{port}"), "/").ends_with("Hello, World!"));
    }
    terminate(child);
}

#[test]
fn bind_values_that_cannot_be_listened_on_say_why() {
    for (bind, why) in [
        ("unix:", "unix: needs the socket file's path"),
        ("localhost:http", "\"http\" is not a port"),
        ("::1", "::1 has no port: give [::1]:8080"),
        (
            "[::1",
            "expected IP:PORT, [IPv6]:PORT, HOST:PORT, :PORT, PORT or unix:PATH",
        ),
        ("no-such-host.invalid:80", "cannot resolve \"no-such-host.invalid\""),
    ] {
        let err = refused(2, &["hello", "--bind", bind].map(OsStr::new));
        assert!(err.contains(why), "--bind {bind}: {err}");
    }
    // The single-address flags take the same forms, but one address.
    let out = peregrine()
        .args(["check-config", "hello", "--metrics", ":9100"])
        .bounded_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = refused(2, &["hello", "--metrics", "unix:/run/m.sock"].map(OsStr::new));
    assert!(err.contains("a Unix-domain socket is for --bind only"), "{err}");
}

/// Starts `serve DIR` with `extra` flags; returns what it printed after its
/// first line, up to its exit after SIGTERM (one request answered first, so
/// the start is complete).
fn serve_and_stop(dir: &Path, extra: &[&str]) -> String {
    let mut child = peregrine()
        .arg("serve")
        .arg(dir)
        .args(["--bind", "127.0.0.1:0", "--workers", "1"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, mut stderr) = served(&mut child);
    get(&addr, "/");
    terminate(child);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    rest
}

#[test]
fn an_empty_root_is_warned_of_at_start_and_a_full_one_is_not() {
    let dir = scratch("empty-root");
    let err = serve_and_stop(&dir, &[]);
    assert!(
        err.contains(&format!(
            "[warn] peregrine: {} is empty: every request will be answered 404",
            dir.display()
        )),
        "{err}"
    );
    // check-config says it too, and still passes (an empty root is legal).
    let check = |dir: &Path| {
        let out = peregrine().args(["check-config", "serve"]).arg(dir).bounded_output();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = check(&dir);
    assert!(err.contains(&format!("warning: {} is empty", dir.display())), "{err}");
    std::fs::write(dir.join("index.html"), "hi").unwrap();
    let err = serve_and_stop(&dir, &[]);
    assert!(!err.contains("[warn]"), "{err}");
    assert!(!check(&dir).contains("warning"));
}

/// Only root can become another user: run as anyone else, the test checks
/// that `--user` is refused instead (the tests run as root on CI).
#[test]
fn a_root_the_dropped_user_cannot_read_is_warned_of_at_start() {
    let dir = scratch("unreadable-root");
    std::fs::write(dir.join("index.html"), "hi").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = test_support::process::is_root();
    if !root {
        let args = [
            OsStr::new("serve"),
            dir.as_os_str(),
            OsStr::new("--user"),
            OsStr::new("nobody"),
        ];
        assert!(refused(1, &args).contains("need the server to start as root"));
        return;
    }
    let err = serve_and_stop(&dir, &["--user", "nobody"]);
    assert!(
        err.contains(&format!(
            "[warn] peregrine: {} cannot be read by user nobody",
            dir.display()
        )),
        "{err}"
    );
}

/// Root reads every file whatever its mode: `serve` started as root and
/// staying root would answer with a file its owner made unreadable (mode
/// 000). So it refuses to start, saying why, unless `--user` gives root up
/// or `--allow-root` (`allow-root = true`) says serving as root is meant.
/// (The tests' `peregrine()` passes `PEREGRINE_ALLOW_ROOT` when they run as
/// root; this one takes it away.)
#[test]
fn serve_refuses_to_run_as_root_without_user_or_allow_root() {
    let dir = scratch("as-root");
    std::fs::write(dir.join("index.html"), "hi").unwrap();
    std::fs::write(dir.join("locked.txt"), "locked away").unwrap();
    std::fs::set_permissions(dir.join("locked.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
    // The directory, searchable by `nobody`.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let serve = |extra: &[&str]| {
        peregrine()
            .env_remove("PEREGRINE_ALLOW_ROOT")
            .arg("serve")
            .arg(&dir)
            .args(["--bind", "127.0.0.1:0", "--workers", "1"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The answer, and the server's stderr, kept open until it exits.
    let locked = |child: &mut std::process::Child| {
        let (addr, stderr) = served(child);
        (get(&addr, "/locked.txt"), stderr)
    };
    if !test_support::process::is_root() {
        // Nothing to refuse: the kernel keeps the file from us.
        let mut child = serve(&[]);
        let (answer, _stderr) = locked(&mut child);
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
        terminate(child);
        return;
    }
    let out = peregrine()
        .env_remove("PEREGRINE_ALLOW_ROOT")
        .arg("serve")
        .arg(&dir)
        .args(["--bind", "127.0.0.1:0"])
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refusing to run as root without --user: root reads every file"),
        "{err}"
    );
    assert!(err.contains("mode 000") && err.contains("--allow-root"), "{err}");
    // `--user root` keeps root: refused too.
    let out = peregrine()
        .env_remove("PEREGRINE_ALLOW_ROOT")
        .arg("serve")
        .arg(&dir)
        .args(["--bind", "127.0.0.1:0", "--user", "root"])
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--user root is root"), "{err}");
    // check-config warns (it does not serve, and may run as someone else).
    let out = peregrine()
        .env_remove("PEREGRINE_ALLOW_ROOT")
        .args(["check-config", "serve"])
        .arg(&dir)
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: refusing to run as root without --user"), "{err}");
    // Given up to `nobody`, the locked file stays locked.
    let mut child = serve(&["--user", "nobody"]);
    let (answer, _stderr) = locked(&mut child);
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    terminate(child);
    // Asked for, as a flag or in the file: served as root, file and all.
    let config = dir.join("peregrine.toml");
    std::fs::write(&config, "allow-root = true\n").unwrap();
    for extra in [&["--allow-root"][..], &["--config", config.to_str().unwrap()]] {
        let mut child = serve(extra);
        let (answer, _stderr) = locked(&mut child);
        assert!(answer.ends_with("\r\n\r\nlocked away"), "{extra:?}: {answer}");
        terminate(child);
    }
}

/// `pack` says which kind of symlink it did not follow, each its own way.
#[test]
fn pack_names_why_it_skipped_each_symlink() {
    let dir = scratch("pack-symlinks");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hi").unwrap();
    std::fs::write(site.join(".env"), "SECRET=1").unwrap();
    for (link, target) in [
        ("dangling", "nowhere"),
        ("loop", "loop"),
        ("passwd", "/etc/passwd"),
        ("env-link.txt", ".env"),
    ] {
        std::os::unix::fs::symlink(target, site.join(link)).unwrap();
    }
    let fifo = std::process::Command::new("mkfifo")
        .arg(site.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let out = peregrine()
        .arg("pack")
        .arg(&site)
        .arg("-o")
        .arg(dir.join("site.prg"))
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for line in [
        "peregrine: skipped /dangling: a dangling symlink (its target does not exist)",
        "peregrine: skipped /loop: a symlink loop (resolving it leads back to itself)",
        "peregrine: skipped /passwd: a symlink leading outside the tree",
        "peregrine: skipped /env-link.txt: a symlink to a dotfile (dotfiles are not served)",
        "peregrine: skipped /pipe: a FIFO (only regular files are packed)",
    ] {
        assert!(err.lines().any(|l| l == line), "{line:?} not in:\n{err}");
    }
}

/// Pack reads files in batches bounded by bytes as well as by count, and
/// a file's bytes become its identity variant without a copy: three
/// 100 MiB files are never held at once (main held all three, each twice:
/// about 600 MiB). The peak is measured by the kernel (`ru_maxrss` of the
/// pack process, read by a Python parent that runs nothing else).
#[test]
fn pack_holds_a_bounded_batch_of_file_bytes() {
    let dir = scratch("pack-memory");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    for name in ["a.bin", "b.bin", "c.bin"] {
        // Sparse: no disk is used, yet reading it fills 100 MiB of memory.
        let f = std::fs::File::create(site.join(name)).unwrap();
        f.set_len(100 << 20).unwrap();
    }
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:], capture_output=True)\n\
                  sys.stderr.write(r.stderr.decode())\n\
                  print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_peregrine"))
        .arg("pack")
        .arg(&site)
        .arg("-o")
        .arg(dir.join("site.prg"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let mut words = said.split_whitespace();
    assert_eq!(words.next(), Some("0"), "{}", String::from_utf8_lossy(&out.stderr));
    let peak_kib: u64 = words.next().unwrap().parse().unwrap();
    assert!(
        peak_kib < 250 << 10,
        "pack peaked at {} MiB for three 100 MiB files",
        peak_kib >> 10
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file nobody may read (mode 000) is refused by name, for root (who
/// could read it, and would publish what its owner withheld) as for
/// anyone else.
#[test]
fn pack_refuses_a_file_nobody_may_read() {
    let dir = scratch("pack-mode-000");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hi").unwrap();
    std::fs::write(site.join("secret.html"), "withheld").unwrap();
    std::fs::set_permissions(site.join("secret.html"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let archive = dir.join("site.prg");
    let out = peregrine()
        .arg("pack")
        .arg(&site)
        .arg("-o")
        .arg(&archive)
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "packed: {err}");
    assert!(
        err.contains(&format!(
            "{}: readable by no one (mode 000)",
            site.join("secret.html").display()
        )),
        "{err}"
    );
    assert!(!archive.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pack_reports_the_bytes_read_and_the_archive_bytes() {
    let page = "<!doctype html><title>x</title>".repeat(40);
    let (archive, err) = packed(&scratch("pack-line"), &[("index.html", &page), ("a.txt", "hello")], &[]);
    let size = std::fs::metadata(&archive).unwrap().len();
    let read = page.len() + "hello".len();
    assert!(
        err.contains(&format!(
            "packed 2 files ({read} bytes read) into {}: {size} bytes",
            archive.display()
        )),
        "{err}"
    );
}

#[test]
fn archive_ls_labels_its_columns_and_shows_convention_keys_readably() {
    let (archive, _) = packed(
        &scratch("ls"),
        &[
            ("index.html", "home"),
            ("_404.html", "gone"),
            ("app/_wildcard.html", "app"),
            ("_redirects", "/old /new 301\n"),
        ],
        &["--no-compress"],
    );
    let out = peregrine().args(["archive", "ls"]).arg(&archive).bounded_output();
    assert!(out.status.success());
    let ls = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Vec<&str>> = ls.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0][..4], ["SITE", "PATH", "STATUS", "BODY"], "{ls}");
    assert!(!ls.contains('\0'), "{ls}");
    for row in [
        &["default", "(the", "404", "page)", "404", "4", "-", "-", "-"][..],
        &["default", "/app/*", "(wildcard)", "200", "3", "-", "-", "-"],
        &["default", "/index.html", "200", "4", "-", "-", "-"],
        &["default", "/old", "301", "->", "/new"],
    ] {
        assert!(lines.iter().any(|l| l == row), "{row:?} not in:\n{ls}");
    }
}

/// Issue 33: `ls` printed `/h\xc3\xa9llo w\xc3\xb6rld.txt`.
#[test]
fn archive_ls_shows_utf8_names_as_they_are() {
    let (archive, _) = packed(
        &scratch("ls-utf8"),
        &[("héllo wörld.txt", "hi"), ("日本/索引.html", "x")],
        &["--no-compress"],
    );
    let out = peregrine().args(["archive", "ls"]).arg(&archive).bounded_output();
    assert!(out.status.success());
    let ls = String::from_utf8(out.stdout).unwrap();
    assert!(ls.contains("/héllo wörld.txt "), "{ls}");
    assert!(ls.contains("/日本/索引.html "), "{ls}");
    assert!(!ls.contains("\\x"), "{ls}");
}

#[test]
fn archive_verify_names_the_file_whose_body_is_damaged() {
    let (archive, _) = packed(
        &scratch("verify"),
        &[("index.html", "home"), ("notes.txt", "a body worth keeping intact")],
        &["--no-compress"],
    );
    let verify = || peregrine().args(["archive", "verify"]).arg(&archive).bounded_output();
    assert!(verify().status.success());
    let mut bytes = std::fs::read(&archive).unwrap();
    let at = bytes.windows(6).position(|w| w == b"intact").unwrap();
    bytes[at] = b'I';
    std::fs::write(&archive, bytes).unwrap();
    let out = verify();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: damaged: checksum mismatch in the body of /notes.txt (identity, site default)",
            archive.display()
        )),
        "{err}"
    );
}

#[test]
fn degenerate_cache_control_values_are_refused_with_the_reason() {
    let dir = scratch("cache-control");
    std::fs::write(dir.join("index.html"), "hi").unwrap();
    let cases = [
        ("", "an empty Cache-Control value"),
        ("  ", "an empty Cache-Control value"),
        ("max-age=60\r\nSet-Cookie: a=b", "'\\r' in a Cache-Control value"),
        ("max-age=60, \u{e9}", "only visible ASCII"),
        ("max-age=", "`=` must be followed by a value"),
        ("no-cache,", "expected a directive"),
        ("/assets/*=", "/assets/*=...: an empty Cache-Control value"),
    ];
    for (value, why) in cases {
        let serve = [OsStr::new("check-config"), OsStr::new("serve"), dir.as_os_str()];
        let err = refused(
            2,
            &[&serve[..], &[OsStr::new("--cache-control"), OsStr::new(value)]].concat(),
        );
        assert!(err.contains(why), "serve --cache-control {value:?}: {err}");
    }
    for (value, why) in &cases[..6] {
        let out = dir.join("site.prg");
        let pack = [OsStr::new("pack"), dir.as_os_str(), OsStr::new("-o"), out.as_os_str()];
        let err = refused(
            2,
            &[&pack[..], &[OsStr::new("--cache-control"), OsStr::new(value)]].concat(),
        );
        assert!(err.contains(why), "pack --cache-control {value:?}: {err}");
    }
    // What an operator writes is accepted.
    let ok = peregrine()
        .args(["check-config", "serve"])
        .arg(&dir)
        .args(["--cache-control", "public, max-age=60, immutable"])
        .args(["--cache-control", "/assets/*=max-age=31536000, immutable"])
        .args(["--cache-control", "no-cache=\"Set-Cookie\""])
        .bounded_output();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

#[test]
fn pack_without_an_output_says_what_it_does_and_what_it_needs() {
    let dir = scratch("pack-no-output");
    std::fs::write(dir.join("index.html"), "hi").unwrap();
    let err = refused(2, &[OsStr::new("pack"), dir.as_os_str()]);
    assert!(err.contains("--output <ARCHIVE>"), "{err}");
    assert!(err.contains("note: pack writes DIR's files"), "{err}");
    assert!(err.contains("peregrine pack site -o site.prg"), "{err}");
}

#[test]
fn man_out_dir_is_made_as_mkdir_p_would() {
    let dir = scratch("man-out-dir");
    let pages = dir.join("share/man/man1");
    let out = peregrine().args(["man", "--out-dir"]).arg(&pages).bounded_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(pages.join("peregrine-serve.1").is_file());
}

#[test]
fn a_certificate_given_as_the_key_is_named_so() {
    let pki = test_support::pki::Pki::new("cli-cert-as-key");
    let (cert, key, _) = pki.issue("live", &["localhost"]);
    let run = |cert: &Path, key: &Path| {
        let args = [
            OsStr::new("check-config"),
            OsStr::new("hello"),
            OsStr::new("--tls-cert"),
            cert.as_os_str(),
            OsStr::new("--tls-key"),
            key.as_os_str(),
        ];
        refused(1, &args)
    };
    let err = run(&cert, &cert);
    assert!(
        err.contains(&format!(
            "--tls-key {}: this file holds a certificate, not a private key",
            cert.display()
        )),
        "{err}"
    );
    let err = run(&key, &key);
    assert!(
        err.contains("this file holds a private key, not a certificate"),
        "{err}"
    );
}

#[test]
fn the_metrics_line_goes_to_the_error_log_with_the_others() {
    let dir = scratch("metrics-error-log");
    let log = dir.join("error.log");
    let stderr = dir.join("stderr");
    let mut child = peregrine()
        .args([
            "hello",
            "--bind",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--workers",
            "1",
        ])
        .arg("--error-log")
        .arg(&log)
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    test_support::wait_until("the start and metrics lines in the error log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("metrics on http://") && l.contains("hello on"))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let leaked = std::fs::read_to_string(&stderr).unwrap();
    assert!(!leaked.contains("metrics on"), "on standard error: {leaked}");
}

/// `archive diff`: identical trees pack to identical archives and an
/// empty diff; editing one file lists exactly its path, once per encoding
/// stored, and a changed cookie in `_headers` shows no value.
#[test]
fn archive_diff_lists_exactly_what_changed_and_no_credential() {
    let dir = scratch("diff");
    let notes = "a note that compresses well. ".repeat(40);
    let files = [
        ("index.html", "home"),
        ("notes.txt", notes.as_str()),
        ("_headers", "/*\n  Set-Cookie: session=old-secret-value\n"),
    ];
    let (first, _) = packed(&dir.join("v1"), &files, &[]);
    let (again, _) = packed(&dir.join("v1-again"), &files, &[]);
    let diff = |a: &std::path::Path, b: &std::path::Path, extra: &[&str]| {
        peregrine()
            .args(["archive", "diff"])
            .arg(a)
            .arg(b)
            .args(extra)
            .bounded_output()
    };
    let same = diff(&first, &again, &["--exit-code"]);
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
    assert!(same.stdout.is_empty(), "{}", String::from_utf8_lossy(&same.stdout));

    let edited = "a note that was edited. ".repeat(40);
    let (second, _) = packed(
        &dir.join("v2"),
        &[
            ("index.html", "home"),
            ("notes.txt", edited.as_str()),
            ("_headers", files[2].1),
        ],
        &[],
    );
    let out = diff(&first, &second, &["--exit-code"]);
    assert_eq!(out.status.code(), Some(1), "differs");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(line.starts_with("changed  default /notes.txt ["), "{text}");
    }
    // Stored compressed as well: one line per encoding, identity among them.
    assert!(lines.len() > 1 && text.contains("/notes.txt [identity]"), "{text}");

    let cookie = [
        ("index.html", "home"),
        ("_headers", "/*\n  Set-Cookie: session=new-secret-value\n"),
    ];
    let (third, _) = packed(&dir.join("v3"), &cookie, &["--no-compress"]);
    let (base, _) = packed(
        &dir.join("v3-base"),
        &[("index.html", "home"), ("_headers", files[2].1)],
        &["--no-compress"],
    );
    let out = diff(&base, &third, &["--json"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("secret"), "a credential in the diff:\n{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let changed = v["changed"].as_array().unwrap();
    assert!(!changed.is_empty(), "{text}");
    assert!(changed.iter().all(|c| c["changes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|ch| ch["name"] == "set-cookie" && ch["new"] == "<redacted>")));
    assert!(v["added"].as_array().unwrap().is_empty() && v["removed"].as_array().unwrap().is_empty());
}
