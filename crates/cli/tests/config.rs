//! Configuration as a user meets it: a TOML file, PEREGRINE_* variables and
//! flags, checked through `peregrine check-config` and one real start; and
//! the completions, man pages and `--version` made from the same definition.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{get, packed, peregrine, terminate};
use test_support::process::BoundedOutput;
use test_support::Scratch;

fn scratch() -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    Scratch::new(&format!("peregrine-config-test-{}", N.fetch_add(1, Ordering::Relaxed)))
}

/// `text` written as `peregrine.toml` in a fresh directory (removed when
/// dropped).
struct ConfigFile {
    path: PathBuf,
    _dir: Scratch,
}

impl std::ops::Deref for ConfigFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for ConfigFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

fn config(text: &str) -> ConfigFile {
    let dir = scratch();
    let path = dir.join("peregrine.toml");
    std::fs::write(&path, text).unwrap();
    ConfigFile { path, _dir: dir }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `check-config` output as key -> (value, source); unset keys are absent.
fn settings(out: &Output) -> BTreeMap<String, (String, String)> {
    assert!(out.status.success(), "check-config failed: {}", stderr(out));
    stdout(out)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (kv, source) = l.rsplit_once("  # ").expect(l);
            let (k, v) = kv.split_once(" = ").expect(l);
            (k.to_owned(), (v.to_owned(), source.to_owned()))
        })
        .collect()
}

/// `peregrine check-config COMMAND --config FILE`, run.
fn check_config(command: &str, file: &ConfigFile) -> Output {
    peregrine()
        .args(["check-config", command, "--config"])
        .arg(file)
        .bounded_output()
}

/// Asserts a failed run whose error contains every one of `parts`.
fn assert_error(out: &Output, parts: &[&str]) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let err = stderr(out);
    for p in parts {
        assert!(err.contains(p), "{p:?} not in:\n{err}");
    }
}

#[test]
fn precedence_is_flag_over_env_over_file_over_default() {
    let file = config(
        "# comment\n\
         workers = 2\n\
         uri-bytes-max = 2000\n\
         head-bytes-max = 4000\n\
         idle-timeout = 1.5\n",
    );
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "hello", "--config", &f, "--workers", "4"])
        .env("PEREGRINE_WORKERS", "3")
        .env("PEREGRINE_URI_BYTES_MAX", "3000")
        .env("PEREGRINE_N_CONNS_MAX", "77")
        .bounded_output();
    let s = settings(&out);
    // Flag beats variable and file.
    assert_eq!(s["workers"], ("4".into(), "flag".into()));
    // Variable beats file.
    assert_eq!(
        s["uri-bytes-max"],
        ("3000".into(), "env PEREGRINE_URI_BYTES_MAX".into())
    );
    // Variable beats default.
    assert_eq!(s["n-conns-max"], ("77".into(), "env PEREGRINE_N_CONNS_MAX".into()));
    // File beats default, with the line.
    assert_eq!(s["head-bytes-max"], ("4000".into(), format!("file {f}:4")));
    assert_eq!(s["idle-timeout"], ("1.5".into(), format!("file {f}:5")));
    // Not set when nobody says: the built-in default (127.0.0.1:8080, or
    // the sockets systemd passes) applies.
    assert!(!s.contains_key("bind"));
    assert!(stdout(&out).contains("# bind is not set, so the built-in default applies: 127.0.0.1:8080, unless systemd"));
    // A default that depends on the machine says what it comes to here.
    let cores = std::thread::available_parallelism().unwrap().get();
    let bare = peregrine()
        .args(["check-config", "hello"])
        .env_remove("PEREGRINE_WORKERS")
        .env_remove("PEREGRINE_CONFIG")
        .bounded_output();
    assert!(
        stdout(&bare).contains(&format!(
            "# workers is not set, so the built-in default applies: one per core ({cores} here)\n"
        )),
        "{}",
        stdout(&bare)
    );
    // The engine's own default, shown.
    let body_bytes_max = peregrine::Limits::default().body_bytes_max;
    assert_eq!(s["body-bytes-max"], (body_bytes_max.to_string(), "default".into()));
    assert!(!s.contains_key("access-log"));
    assert!(stdout(&out).contains("# access-log is not set"));
}

#[test]
fn a_repeated_flag_replaces_the_files_list_and_switches_come_from_anywhere() {
    let site = scratch();
    let file = config(&format!(
        "root = {:?}\nbind = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nlist-dirs = true\nno-precompressed = true\n",
        site.display().to_string()
    ));
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "serve", "--config", &f, "--bind", "127.0.0.1:3"])
        .env("PEREGRINE_FOLLOW_SYMLINKS", "yes")
        .env("PEREGRINE_NO_PRECOMPRESSED", "false")
        .bounded_output();
    let s = settings(&out);
    // A variable turns off what the file turned on.
    assert_eq!(
        s["no-precompressed"],
        ("false".into(), "env PEREGRINE_NO_PRECOMPRESSED".into())
    );
    assert_eq!(s["bind"], ("[\"127.0.0.1:3\"]".into(), "flag".into()));
    assert_eq!(s["list-dirs"], ("true".into(), format!("file {f}:3")));
    assert_eq!(
        s["follow-symlinks"],
        ("true".into(), "env PEREGRINE_FOLLOW_SYMLINKS".into())
    );
    assert_eq!(s["root"].1, format!("file {f}:1"));
    // A root on the command line beats the file's.
    let other = scratch();
    let out = peregrine()
        .args(["check-config", "serve", "--config", &f])
        .arg(&other)
        .bounded_output();
    assert_eq!(
        settings(&out)["root"],
        (format!("{:?}", other.display().to_string()), "flag".into())
    );
}

#[test]
fn check_config_output_is_itself_a_configuration() {
    let site = scratch();
    std::fs::write(site.join("missing \"page\".html"), "gone").unwrap();
    let file = config(&format!(
        "root = {:?}\nbind = [\"127.0.0.1:8081\"]\ncache-control = [\"/a/**=public, max-age=60\", \"no-cache\"]\n\
         index = [\"index.html\", \"index.htm\"]\nhead-timeout = 2.5\nno-precompressed = true\n",
        site.display().to_string()
    ));
    let first = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&file)
        .args(["--workers", "3", "--404", "missing \"page\".html"])
        .bounded_output();
    let again = config(&stdout(&first));
    let second = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&again)
        .bounded_output();
    let values =
        |out: &Output| -> BTreeMap<String, String> { settings(out).into_iter().map(|(k, (v, _))| (k, v)).collect() };
    assert_eq!(values(&first), values(&second));
    assert_eq!(values(&second)["404"], r#""missing \"page\".html""#);
}

#[test]
fn serve_from_a_config_file_answers_on_every_listener() {
    let site = scratch();
    std::fs::write(site.join("index.html"), "<p>configured</p>").unwrap();
    // IPv6 loopback is tried only where the machine has it.
    let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    // Two ports on IPv4 (port 0: each address gets its own free port).
    let binds = if ipv6 {
        r#"["127.0.0.1:0", "127.0.0.1:0", "[::1]:0"]"#
    } else {
        eprintln!("no IPv6 loopback here: testing 127.0.0.1 only");
        r#"["127.0.0.1:0", "127.0.0.1:0"]"#
    };
    let file = config(&format!(
        "root = {:?}\nbind = {binds}\nworkers = 2\n",
        site.display().to_string()
    ));
    let mut child = peregrine()
        .args(["serve", "--config"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "peregrine: serving ROOT on http://127.0.0.1:P/, http://127.0.0.1:Q/, http://[::1]:R/"
    let addrs: Vec<String> = line
        .split("http://")
        .skip(1)
        .map(|a| a.trim().trim_end_matches(',').trim_end_matches('/').to_owned())
        .collect();
    assert_eq!(addrs.len(), if ipv6 { 3 } else { 2 }, "{line}");
    assert!(
        addrs[0].starts_with("127.0.0.1:") && addrs[1].starts_with("127.0.0.1:"),
        "{line}"
    );
    assert_ne!(addrs[0], addrs[1], "{line}");
    if ipv6 {
        assert!(addrs[2].starts_with("[::1]:"), "{line}");
    }
    for addr in &addrs {
        let out = get(addr, "/");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{addr}: {out}");
        assert!(out.ends_with("<p>configured</p>"), "{addr}: {out}");
    }
    terminate(child);
}

#[test]
fn unknown_keys_name_file_line_and_a_suggestion() {
    let file = config("workers = 2\n\nwrokers = 3\nhead_bytes_max = 10\n[limits]\nx = 1\n");
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "hello", "--config", &f])
        .bounded_output();
    assert_error(
        &out,
        &[
            &format!("{f}:3: unknown key \"wrokers\" for `hello` (did you mean \"workers\"?)"),
            &format!("{f}:4: unknown key \"head_bytes_max\" for `hello` (did you mean \"head-bytes-max\"?)"),
            &format!("{f}:5: unknown table \"limits\""),
        ],
    );
    // A key of `serve` given to `hello` is named as such.
    let file = config("workers = 2\nlist-dirs = true\n");
    let out = peregrine().args(["hello", "--config"]).arg(&file).bounded_output();
    assert_error(
        &out,
        &[&format!(
            "{}:2: unknown key \"list-dirs\" for `hello` (a setting of `serve` only)",
            file.display()
        )],
    );
}

#[test]
fn values_of_the_wrong_type_name_file_line_and_key() {
    let file =
        config("workers = \"2\"\nlist-dirs = 1\nidle-timeout = \"5s\"\nbind = [\"127.0.0.1:1\", 8080]\n404 = 404\n");
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "serve", "/", "--config", &f])
        .bounded_output();
    assert_error(
        &out,
        &[
            &format!("{f}:1: workers: expected a whole number, found a string"),
            &format!("{f}:2: list-dirs: expected true or false, found an integer"),
            &format!("{f}:3: idle-timeout: expected a number, found a string"),
            &format!("{f}:4: bind: expected a string (or a list of them), found an integer"),
            &format!("{f}:5: 404: expected a string, found an integer"),
        ],
    );
}

#[test]
fn bad_values_name_file_line_and_key() {
    let file = config("bind = [\n  \"127.0.0.1:8080\",\n  \"localhost:eighty\",\n]\nn-conns-max = -5\nworkers = 0\n");
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "hello", "--config", &f])
        .bounded_output();
    assert_error(
        &out,
        &[
            // The line of the bad item, not of the key.
            &format!("{f}:3: bind: bad value \"localhost:eighty\": \"eighty\" is not a port"),
            &format!("{f}:5: n-conns-max: -5: must not be negative"),
        ],
    );
}

/// Every value has bounds (limits.rs says why), checked where the value is
/// read, so a file's value out of range is named with its line.
#[test]
fn values_out_of_range_are_refused_with_their_range_and_line() {
    let file =
        config("workers = 99999\nhead-bytes-max = 10\nidle-timeout = 1e9\nshutdown-timeout = 0\nhsts = 99999999999\n");
    let f = file.display().to_string();
    let out = check_config("hello", &file);
    assert_error(
        &out,
        &[
            &format!("{f}:1: workers: bad value \"99999\": 99999 is out of range: from 1 to 1024"),
            &format!("{f}:2: head-bytes-max: bad value \"10\": 10 is out of range: from 1024 to 1048576"),
            &format!("{f}:3: idle-timeout: bad value \"1e9\": 1000000000 is out of range: from 0.25 to 86400 seconds"),
            &format!("{f}:4: shutdown-timeout: bad value \"0\": 0 is out of range"),
        ],
    );
    // A negative value is a value out of range, not an unknown flag `-5`;
    // a number too large for the type is out of range too.
    for (flag, value) in [
        ("--n-headers-max", "1000"),
        ("--n-conns-max", "0"),
        ("--write-buffer-bytes-max", "1"),
        ("--workers", "-5"),
        ("--idle-timeout", "-1"),
        ("--body-bytes-max", "99999999999999999999"),
    ] {
        let out = peregrine()
            .args(["check-config", "hello", flag, value])
            .bounded_output();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{value} is out of range")),
            "{}",
            stderr(&out)
        );
    }
    let out = peregrine()
        .args(["check-config", "hello", "--workers", "1.5"])
        .bounded_output();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("\"1.5\" is not a whole number"),
        "{}",
        stderr(&out)
    );
}

/// How long an edited file may be served as it was is a setting: 1 s by
/// default, 0 to 3600, from a flag, a variable or the file; meaningless
/// (so refused) for an archive.
#[test]
fn the_file_cache_trust_interval_is_a_bounded_setting() {
    let dir = scratch();
    let (archive, _) = packed(&dir, &[("index.html", "hi")], &[]);
    let site = dir.join("site").display().to_string();
    let file = config(&format!(
        "root = {site:?}
"
    ));
    let s = settings(&check_config("serve", &file));
    assert_eq!(s["revalidate-interval"], ("1".to_owned(), "default".to_owned()));
    let file = config(&format!(
        "root = {site:?}
revalidate-interval = 0.5
"
    ));
    let s = settings(&check_config("serve", &file));
    assert_eq!(s["revalidate-interval"].0, "0.5");
    let file = config(&format!(
        "root = {site:?}
revalidate-interval = 4000
"
    ));
    let f = file.display().to_string();
    assert_error(
        &check_config("serve", &file),
        &[&format!(
            "{f}:2: revalidate-interval: bad value \"4000\": 4000 is out of range: from 0 to 3600 seconds"
        )],
    );
    let out = peregrine()
        .args(["check-config", "serve"])
        .arg(&archive)
        .env("PEREGRINE_REVALIDATE_INTERVAL", "5")
        .bounded_output();
    assert_error(
        &out,
        &["--revalidate-interval (env PEREGRINE_REVALIDATE_INTERVAL) (an archive is swapped whole"],
    );
}

/// Settings that go together, and the root, say which line (or file) to
/// fix when the file is where they were (not) given.
#[test]
fn a_missing_partner_or_root_names_the_file_and_line() {
    let file = config("workers = 2\ntls-cert = [\"cert.pem\"]\n");
    let out = check_config("hello", &file);
    let f = file.display().to_string();
    assert_error(
        &out,
        &[&format!(
            "one --tls-key per --tls-cert (1 certificate (file {f}:2), 0 keys)"
        )],
    );
    // A root that is not there: its line, and why, said once.
    let file = config("workers = 2\nroot = \"/nonexistent/site\"\n");
    let out = check_config("serve", &file);
    let f = file.display().to_string();
    assert_error(
        &out,
        &[&format!(
            "peregrine: cannot serve /nonexistent/site (file {f}:2): No such file or directory (os error 2)\n"
        )],
    );
    let file = config("hsts = 60\n");
    let out = check_config("hello", &file);
    let f = file.display().to_string();
    assert_error(&out, &[&format!("--hsts (file {f}:1) needs --tls-cert and --tls-key")]);
    let out = check_config("serve", &file);
    assert_error(&out, &[&format!("as `root` in {f} (which has no `root` line)")]);
}

/// A directory's setting given with an archive is refused, naming the line
/// it came from; an archive's given with a directory, the variable.
#[test]
fn settings_that_do_not_apply_to_the_root_name_where_they_came_from() {
    let dir = scratch();
    let (archive, _) = packed(&dir, &[("index.html", "hi")], &[]);
    let file = config(&format!(
        "root = {:?}\nlist-dirs = true\n",
        archive.display().to_string()
    ));
    let f = file.display().to_string();
    let out = check_config("serve", &file);
    assert_error(
        &out,
        &[&format!("--list-dirs (file {f}:2) (an archive has no listings)")],
    );
    let out = peregrine()
        .args(["check-config", "serve"])
        .arg(dir.join("site"))
        .env("PEREGRINE_PREFAULT", "yes")
        .bounded_output();
    assert_error(&out, &["--prefault (env PEREGRINE_PREFAULT) applies to an archive"]);
}

#[test]
fn bad_variables_are_named() {
    let out = peregrine()
        .args(["check-config", "hello"])
        .env("PEREGRINE_WORKERS", "many")
        .bounded_output();
    assert_error(&out, &["PEREGRINE_WORKERS=\"many\"", "invalid digit"]);
    let out = peregrine()
        .args(["hello"])
        .env("PEREGRINE_BIND", "127.0.0.1")
        .bounded_output();
    assert_error(
        &out,
        &[
            "PEREGRINE_BIND=\"127.0.0.1\"",
            "127.0.0.1 has no port: give 127.0.0.1:8080",
        ],
    );
    let out = peregrine()
        .args(["check-config", "serve", "/"])
        .env("PEREGRINE_LIST_DIRS", "maybe")
        .bounded_output();
    assert_error(&out, &["PEREGRINE_LIST_DIRS=\"maybe\""]);
    let out = peregrine()
        .args(["check-config", "hello"])
        .env("PEREGRINE_CONFIG", "/nonexistent/peregrine.toml")
        .bounded_output();
    assert_error(&out, &["cannot read config file /nonexistent/peregrine.toml"]);
}

#[test]
fn a_missing_file_and_bad_toml_are_named() {
    let out = peregrine()
        .args(["serve", "--config", "/nonexistent/peregrine.toml"])
        .bounded_output();
    assert_error(
        &out,
        &["cannot read config file /nonexistent/peregrine.toml", "No such file"],
    );
    let file = config("workers = 2\nbind = [\"127.0.0.1:1\"\nidle-timeout = 3\n");
    let out = peregrine().args(["hello", "--config"]).arg(&file).bounded_output();
    assert_error(&out, &[&format!("{}:3: TOML syntax error", file.display())]);
    let file = config("workers = 2\nworkers = 3\n");
    let out = peregrine().args(["hello", "--config"]).arg(&file).bounded_output();
    assert_error(
        &out,
        &[&format!("{}:2: TOML syntax error: duplicate key", file.display())],
    );
}

#[test]
fn serve_without_a_root_anywhere_says_where_one_can_go() {
    let file = config("workers = 2\n");
    let out = peregrine().args(["serve", "--config"]).arg(&file).bounded_output();
    assert_error(&out, &["`serve` needs DIR|ARCHIVE", "`root`", "PEREGRINE_ROOT"]);
    let root = scratch();
    let out = peregrine()
        .args(["check-config", "serve"])
        .env("PEREGRINE_ROOT", &root)
        .bounded_output();
    assert_eq!(settings(&out)["root"].1, "env PEREGRINE_ROOT");
}

#[test]
fn the_example_config_loads_and_mentions_every_key() {
    let out = peregrine()
        .current_dir(workspace_root())
        .args(["check-config", "serve", "--config", "peregrine.example.toml"])
        .bounded_output();
    let shown = stdout(&out);
    let s = settings(&out);
    assert_eq!(s["root"].0, "\"site\"");
    let example = std::fs::read_to_string(workspace_root().join("peregrine.example.toml")).unwrap();
    // Every key check-config knows, set or not, appears in the example (set,
    // or commented out with its default).
    let keys = shown
        .lines()
        .filter(|l| !l.starts_with("# ") || l.contains(" is not set"));
    for line in keys {
        let key = line.trim_start_matches("# ").split([' ', '=']).next().unwrap();
        assert!(
            example.contains(&format!("\n{key} = ")) || example.contains(&format!("\n# {key} = ")),
            "peregrine.example.toml does not show `{key}`: add it (set, or commented out)"
        );
    }
}

/// The flags `--help` lists, with their variables: every one has a file key
/// (check-config prints it) and a variable, so the mirror cannot drift.
#[test]
fn every_flag_of_serve_and_hello_has_a_key_and_a_variable() {
    for (name, extra) in [("serve", Some("/")), ("hello", None)] {
        let help = peregrine().args([name, "--help"]).bounded_output();
        let help = stdout(&help);
        let mut check = peregrine();
        check.args(["check-config", name]).args(extra);
        let shown = stdout(&check.bounded_output());
        let flags: Vec<&str> = help
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("--"))
            .map(|l| l.split([' ', '<', '[']).next().unwrap())
            .filter(|f| !["help", "config"].contains(f))
            .collect();
        assert!(flags.len() >= 14, "{name}: {flags:?}");
        for flag in flags {
            let var = format!("PEREGRINE_{}", flag.to_uppercase().replace('-', "_"));
            assert!(help.contains(&format!("[env: {var}=")), "{name} --{flag}: no {var}");
            assert!(
                shown.contains(&format!("\n{flag} = ")) || shown.contains(&format!("\n# {flag} is not set")),
                "{name} --{flag}: no file key in\n{shown}"
            );
        }
    }
}

#[test]
fn completions_and_man_pages_come_from_the_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let out = peregrine().args(["completions", shell]).bounded_output();
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        // fish spells a long option `-l workers`.
        let workers = if shell == "fish" { "-l workers" } else { "--workers" };
        assert!(script.contains(workers), "{shell}");
        assert!(script.contains("check-config"), "{shell}");
    }
    let out = peregrine().args(["man", "serve"]).bounded_output();
    assert!(out.status.success(), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.starts_with(".ie"), "{page}");
    assert!(page.contains(".TH peregrine-serve"), "{page}");
    assert!(page.contains(r"\-\-workers"), "{page}");
    assert!(page.contains("PEREGRINE_WORKERS"), "{page}");
    // Each option with its value in the synopsis; the sections no flag carries.
    assert!(page.contains(r"[\fB\-\-bind\fR \fIADDR\fR]..."), "{page}");
    assert!(page.contains(r"[\fB\-\-workers\fR \fIN\fR]"), "{page}");
    for section in ["SIGNALS", "FILES", "ENVIRONMENT", "EXAMPLES"] {
        assert!(
            page.contains(&format!("\n.SH {section}\n")),
            "{section} missing from {page}"
        );
    }
    assert!(page.contains("SIGHUP") && page.contains("LISTEN_FDS"), "{page}");
    // The configuration's text under NOTES (not clap_mangen's "EXTRA"), and
    // a footer naming the program and its version, not the bare "serve".
    assert!(
        page.contains("\n.SH NOTES\nSettings can also come from a TOML file"),
        "{page}"
    );
    assert!(!page.contains(".SH EXTRA"), "{page}");
    let title = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
    assert!(
        title.contains(concat!("\"peregrine ", env!("CARGO_PKG_VERSION"), "\"")),
        "{title}"
    );
    let out = peregrine().args(["man", "pack"]).bounded_output();
    let page = stdout(&out);
    assert!(
        page.contains(r"\fBperegrine pack\fR \fIDIR\fR \fB\-\-output\fR \fIARCHIVE\fR"),
        "{page}"
    );
    assert!(!page.contains(".SH SIGNALS"), "{page}");
    let out = peregrine().arg("man").bounded_output();
    assert!(stdout(&out).contains(r"peregrine\-serve(1)"));
    let dir = scratch();
    let out = peregrine().args(["man", "--out-dir"]).arg(&dir).bounded_output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("peregrine.1").is_file());
    assert!(dir.join("peregrine-serve.1").is_file());
    assert!(dir.join("peregrine-archive-ls.1").is_file());
}

#[test]
fn version_shows_the_build() {
    let out = peregrine().arg("--version").bounded_output();
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("peregrine {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for field in ["revision: ", "rustc: ", "target: ", "profile: "] {
        assert!(text.contains(&format!("\n{field}")), "{field} missing from {text}");
    }
    // Built from a git checkout, the revision is known (build.rs).
    let revision = text.lines().find(|l| l.starts_with("revision: ")).unwrap();
    if workspace_root().join(".git").exists() {
        assert!(!revision.contains("unknown"), "{revision}");
    }
}

#[test]
fn check_config_looks_up_the_user_and_group_as_the_start_would() {
    let file = config("user = \"peregrine-no-such-user\"\n");
    let out = check_config("hello", &file);
    assert_error(
        &out,
        &[
            "--user peregrine-no-such-user (file ",
            "peregrine.toml:1)",
            "no user \"peregrine-no-such-user\"",
        ],
    );
    let out = peregrine()
        .args([
            "check-config",
            "hello",
            "--user",
            "nobody",
            "--group",
            "peregrine-no-such-group",
        ])
        .bounded_output();
    assert_error(
        &out,
        &[
            "--group peregrine-no-such-group",
            "no group \"peregrine-no-such-group\"",
        ],
    );
    // Users and groups that exist pass (by name, or by number).
    let out = peregrine()
        .args(["check-config", "hello", "--user", "nobody", "--group", "0"])
        .bounded_output();
    assert!(out.status.success(), "{}", stderr(&out));
}
