//! The sandbox `hello` and `serve` run in by default: a request cannot make
//! the process read outside what it serves, nor run a program, even
//! through a bug (a planted one: `PEREGRINE_TEST_PLANTED_BUG`, in debug
//! builds, answers `/open?PATH`, `/exec` and `/spawn` by trying), and a
//! reload must stay within it.
//!
//! On a kernel without Landlock the start line must say so, and the tests
//! check what seccomp still refuses.

mod common;

use std::path::{Path, PathBuf};

use common::{get, last_addr, peregrine, Scratch};
use test_support::process::Process;

/// EACCES and EPERM, as the planted bug reports them.
const EACCES: &str = "errno 13:";
const EPERM: &str = "errno 1:";

/// A scratch directory: `site/` to serve, `secret.txt` beside it, `conf/`
/// for a configuration file, `elsewhere/` outside all three.
fn tmp(tag: &str) -> Scratch {
    let t = Scratch::new(&format!("peregrine-sandbox-{tag}"));
    for sub in ["site/sub", "conf", "elsewhere"] {
        std::fs::create_dir_all(t.path(sub)).unwrap();
    }
    for (file, text) in [
        ("site/index.html", "site"),
        ("site/sub/index.html", "sub"),
        ("elsewhere/index.html", "elsewhere"),
        ("secret.txt", "secret"),
    ] {
        std::fs::write(t.path(file), text).unwrap();
    }
    t
}

/// A running `peregrine` with the planted bug, its stderr read line by
/// line; killed if a test fails before terminating it.
struct Server {
    process: Process,
    /// The first line: the sandbox applied and the address.
    start: String,
    addr: String,
}

impl Server {
    fn start(args: &[&str], extra_env: &[(&str, &str)]) -> Server {
        let mut cmd = peregrine();
        cmd.args(args)
            .args(["--bind", "127.0.0.1:0", "--workers", "1"])
            .env("PEREGRINE_TEST_PLANTED_BUG", "1");
        for (name, value) in extra_env {
            cmd.env(name, value);
        }
        let process = Process::spawn(&mut cmd);
        let start = process.line(" on http://");
        let addr = last_addr(&start);
        Server { process, start, addr }
    }

    /// Waits for a stderr line containing `needle`.
    fn line(&self, needle: &str) -> String {
        self.process.line(needle)
    }

    /// The body of the answer to GET `path`.
    fn body(&self, path: &str) -> String {
        let answer = get(&self.addr, path);
        answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or(answer)
    }

    fn landlock(&self) -> bool {
        self.start.contains("landlock ABI v")
    }

    fn seccomp(&self) -> bool {
        self.start.contains("seccomp ") && self.start.contains(" syscalls")
    }

    fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    fn terminate(self) {
        self.process.terminate();
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_planted_bug_cannot_read_outside_the_root() {
    let t = tmp("read");
    let server = Server::start(&["serve", s(&t.path("site"))], &[]);
    // The bug works where reading is allowed: beneath the root.
    let inside = server.body(&format!("/open?{}", s(&t.path("site/index.html"))));
    assert_eq!(inside, "done: 4 bytes", "{}", server.start);
    let outside = [t.path("secret.txt"), PathBuf::from("/etc/passwd")];
    if server.landlock() {
        for path in &outside {
            let answer = server.body(&format!("/open?{}", s(path)));
            assert!(answer.starts_with(EACCES), "{}: {answer}", path.display());
        }
    } else {
        // Without Landlock the start line must say why; nothing else stops
        // the read (seccomp cannot tell one open from another).
        assert!(server.start.contains("no landlock ("), "{}", server.start);
    }
    // Still serving: the bug's refusal is an answer, not a crash.
    assert_eq!(server.body("/"), "site");
    server.terminate();

    // Without the sandbox the same bug reads the secret: the check above
    // can fail.
    let open = Server::start(&["serve", s(&t.path("site")), "--no-sandbox"], &[]);
    assert!(
        open.start.contains("sandbox off (--no-sandbox); serving"),
        "{}",
        open.start
    );
    let answer = open.body(&format!("/open?{}", s(&t.path("secret.txt"))));
    assert_eq!(answer, "done: 6 bytes");
    open.terminate();
}

#[test]
fn exec_and_new_processes_are_refused() {
    let server = Server::start(&["hello"], &[]);
    assert!(server.seccomp() || server.landlock(), "{}", server.start);
    let exec = server.body("/exec");
    let spawn = server.body("/spawn");
    if server.seccomp() {
        // execve is not on the list; a process is a clone without
        // CLONE_THREAD, which the filter refuses.
        assert!(exec.starts_with(EPERM), "{exec}");
        assert!(spawn.starts_with(EPERM), "{spawn}");
    } else {
        // Landlock alone: no file may be executed.
        assert!(exec.starts_with(EACCES), "{exec}");
    }
    assert_eq!(server.body("/"), "Hello, World!");
    server.terminate();

    let open = Server::start(&["hello"], &[("PEREGRINE_NO_SANDBOX", "1")]);
    assert!(open.start.contains("sandbox off"), "{}", open.start);
    assert_eq!(open.body("/spawn"), "done: exit status: 0");
    open.terminate();
}

#[test]
fn the_start_line_and_check_config_say_what_was_applied() {
    let t = tmp("say");
    let server = Server::start(&["serve", s(&t.path("site"))], &[]);
    // "peregrine: sandbox: landlock ABI v7, seccomp 73 syscalls; serving ..."
    // (or "no landlock (why)", "no seccomp (why)").
    let line = &server.start;
    // After the line's time and level (a server's error log).
    assert!(line.contains(" [info] peregrine: sandbox: "), "{line}");
    assert!(server.landlock() || line.contains("no landlock ("), "{line}");
    assert!(server.seccomp() || line.contains("no seccomp ("), "{line}");
    server.terminate();

    let out = peregrine()
        .args(["check-config", "serve", s(&t.path("site"))])
        .output()
        .unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    let root = std::fs::canonicalize(t.path("site")).unwrap();
    assert!(said.starts_with("peregrine: sandbox: "), "{said}");
    assert!(said.contains(&format!("read beneath {}", root.display())), "{said}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nno-sandbox = false"));
}

/// A configuration file directly in a directory shared with the rest of
/// the system (here /tmp; /etc, a home directory alike) is granted alone:
/// granting its directory, as for one in a directory of its own, would
/// let the server read the whole of /etc (`/etc/shadow`, other services'
/// keys).
#[test]
fn a_file_in_a_shared_directory_is_granted_alone() {
    let t = tmp("shared");
    let config = std::env::temp_dir().join(format!("peregrine-sandbox-shared-{}.toml", std::process::id()));
    std::fs::write(&config, format!("root = {:?}\n", t.path("site"))).unwrap();
    let out = peregrine()
        .args(["check-config", "serve", "--config", s(&config)])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    let read = said
        .split("read beneath ")
        .nth(1)
        .expect("the read list")
        .lines()
        .next()
        .unwrap();
    let read: Vec<&str> = read.split("; ").next().unwrap().split(", ").collect();
    let tmp_dir = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    assert!(!read.contains(&tmp_dir.to_str().unwrap()), "{said}");
    assert!(read.contains(&config.to_str().unwrap()), "{said}");
}

#[test]
fn a_reload_must_stay_within_the_sandbox() {
    let t = tmp("reload");
    let config = t.path("conf/peregrine.toml");
    let set = |text: String| std::fs::write(&config, text).unwrap();
    set(format!("root = {:?}\n", t.path("site")));
    let server = Server::start(&["serve", "--config", s(&config)], &[]);
    assert_eq!(server.body("/"), "site");

    // A root outside what was readable at start: refused, with the reason.
    set(format!("root = {:?}\n", t.path("elsewhere")));
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(
        line.contains("is outside what the sandbox set at start may read"),
        "{line}"
    );
    assert!(line.contains("restart"), "{line}");
    // An access log outside where it may write: refused too.
    set(format!(
        "root = {:?}\naccess-log = {:?}\n",
        t.path("site"),
        t.path("elsewhere/access.log")
    ));
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(line.contains("may write logs"), "{line}");
    // Turning it off needs a restart.
    set(format!("root = {:?}\nno-sandbox = true\n", t.path("site")));
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(line.contains("cannot be turned off while serving"), "{line}");
    assert_eq!(server.body("/"), "site");

    // Within it: a directory beneath the root.
    set(format!("root = {:?}\n", t.path("site/sub")));
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    // The old generation may take a connection or two more until each of
    // its workers has seen the hand-over (as in reload.rs).
    test_support::wait_until("the new root served", || server.body("/") == "sub");
    server.terminate();
}

/// `--bind HOST:PORT` is resolved again at each reload: a name in
/// /etc/hosts still resolves inside the sandbox.
#[test]
fn a_reload_resolves_a_bound_host_name_again() {
    let process = Process::spawn(peregrine().args(["hello", "--bind", "localhost:0", "--workers", "1"]));
    let addr = last_addr(&process.line(" on http://"));
    let server = Server {
        process,
        start: String::new(),
        addr,
    };
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    assert_eq!(server.body("/"), "Hello, World!");
    server.terminate();
}

#[test]
fn follow_symlinks_reaches_the_targets_there_at_start_and_no_further() {
    let t = tmp("links");
    std::os::unix::fs::symlink(t.path("elsewhere/index.html"), t.path("site/away.html")).unwrap();
    let server = Server::start(&["serve", s(&t.path("site")), "--follow-symlinks"], &[]);
    assert_eq!(server.body("/away.html"), "elsewhere");
    if server.landlock() {
        let answer = server.body(&format!("/open?{}", s(&t.path("secret.txt"))));
        assert!(answer.starts_with(EACCES), "{answer}");
    }
    server.terminate();
}

#[test]
fn an_archive_renamed_into_its_directory_is_swapped_in() {
    let t = tmp("archive");
    let dir = t.path("served");
    std::fs::create_dir_all(&dir).unwrap();
    let pack = |site: &str, to: &Path| {
        let out = peregrine().args(["pack", site, "-o", s(to)]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let archive = dir.join("site.prg");
    pack(s(&t.path("site")), &archive);
    let server = Server::start(&["serve", s(&archive)], &[]);
    assert_eq!(server.body("/"), "site");
    // The archive's directory is readable, the rest is not.
    let secret = server.body(&format!("/open?{}", s(&t.path("secret.txt"))));
    assert!(!server.landlock() || secret.starts_with(EACCES), "{secret}");
    let next = dir.join("next.prg");
    pack(s(&t.path("elsewhere")), &next);
    std::fs::rename(&next, &archive).unwrap();
    server.line("loaded as generation 2");
    assert_eq!(server.body("/"), "elsewhere");
    server.terminate();
}

/// A deploy's layout: the served path a symlink to a release in another
/// directory (`srv/site.prg -> ../releases/v1.prg`), swapped to the next
/// release by replacing the link. Under the sandbox the release
/// directory is readable (before, the archive could not even be opened:
/// only the link's directory was).
#[test]
fn an_archive_behind_a_symlink_is_served_and_its_link_swapped() {
    let t = tmp("archive-link");
    let (srv, releases) = (t.path("srv"), t.path("releases"));
    std::fs::create_dir_all(&srv).unwrap();
    std::fs::create_dir_all(&releases).unwrap();
    let pack = |site: &str, to: &Path| {
        let out = peregrine().args(["pack", site, "-o", s(to)]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    pack(s(&t.path("site")), &releases.join("v1.prg"));
    pack(s(&t.path("elsewhere")), &releases.join("v2.prg"));
    let link = srv.join("site.prg");
    std::os::unix::fs::symlink("../releases/v1.prg", &link).unwrap();
    let server = Server::start(&["serve", s(&link)], &[]);
    assert_eq!(server.body("/"), "site");
    // The rest stays unreadable.
    let secret = server.body(&format!("/open?{}", s(&t.path("secret.txt"))));
    assert!(!server.landlock() || secret.starts_with(EACCES), "{secret}");
    // Swapped as deploy tools do: a new link renamed over the old one.
    let next = srv.join("next.prg");
    std::os::unix::fs::symlink("../releases/v2.prg", &next).unwrap();
    std::fs::rename(&next, &link).unwrap();
    server.line("loaded as generation 2");
    assert_eq!(server.body("/"), "elsewhere");
    server.terminate();
}

#[test]
fn connecting_out_is_refused_unless_a_proxy_asks_and_then_to_its_port_only() {
    let t = tmp("connect");
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (up, elsewhere) = (upstream.local_addr().unwrap(), other.local_addr().unwrap());

    // No proxy: seccomp refuses `connect` itself.
    let closed = Server::start(&["serve", s(&t.path("site"))], &[]);
    if closed.seccomp() {
        let answer = closed.body(&format!("/connect?{up}"));
        assert!(answer.starts_with(EPERM), "{answer}");
    }
    closed.terminate();

    // A proxy to `up`: its port, and no other.
    let proxy = format!("/api/=http://{up}");
    let open = Server::start(&["serve", s(&t.path("site")), "--proxy", &proxy], &[]);
    assert_eq!(
        open.body(&format!("/connect?{up}")),
        "done: connected",
        "{}",
        open.start
    );
    if open
        .start
        .contains(&format!("connects out to TCP port {} only", up.port()))
    {
        let answer = open.body(&format!("/connect?{elsewhere}"));
        assert!(answer.starts_with(EACCES), "{answer}");
    } else {
        assert!(open.start.contains("connects out to any port ("), "{}", open.start);
    }
    open.terminate();
}
