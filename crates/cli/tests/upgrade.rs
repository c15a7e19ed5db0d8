//! Binary upgrade on SIGUSR2: the program is replaced on disk by another
//! build, SIGUSR2 starts it on the same listening sockets, and the old
//! process drains and exits once the new one says it serves; HTTP/1.1
//! (our client), HTTP/2 (curl) and HTTP/3 (aioquic) clients keep asking
//! throughout and none of their requests fails. A new binary that fails
//! to start (a script that exits 1, a file that is not executable, one in
//! a directory anyone may write to) leaves the old process serving, with
//! a line saying why.
//!
//! The second build: the binary under test, copied, with the bytes of
//! its revision in `--version` changed (same length, so nothing else
//! moves). A second `cargo build` with a build-time marker would cost CI
//! another compile and link of the whole program for a difference the
//! upgrade cannot see: it passes sockets to whatever file is at the path.
//! What the test checks is that the path is executed anew (the old
//! process's file is replaced by rename, as a package manager does, so
//! the old inode is gone from the path) and that the process that serves
//! afterwards runs the new bytes: its `/proc/PID/exe --version` says the
//! patched revision.
//!
//! What the tests need is installed by them when missing: aioquic into a
//! virtual environment under the target directory, curl with apt.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use test_support::process::{Process, SIGTERM};
use test_support::{wait_until, Scratch};

/// What `--version` says of the revision in the second build.
const NEW_REVISION: &[u8] = b"UPGRADE-TEST";

/// A directory holding the program as installed (`bin/peregrine`, owned
/// by us, mode 755), a root to serve and a certificate.
struct Site {
    scratch: Scratch,
    cert: PathBuf,
    key: PathBuf,
    client: Arc<rustls::ClientConfig>,
    _pki: test_support::pki::Pki,
}

impl Site {
    fn new(name: &str) -> Site {
        let scratch = Scratch::new(name);
        std::fs::set_permissions(scratch.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        scratch.write("root/index.html", "hello\n");
        let bin = scratch.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A hard link, not a 170 MB copy, where the file system allows:
        // the old file is replaced by rename, never written in place.
        let exe = scratch.path("bin/peregrine");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_peregrine"), &exe).is_err() {
            install(&exe, &std::fs::read(env!("CARGO_BIN_EXE_peregrine")).unwrap());
        }
        let pki = test_support::pki::Pki::new(name);
        let (cert, key, _) = pki.issue("site", &["localhost"]);
        let client = pki.client();
        Site {
            scratch,
            cert,
            key,
            client,
            _pki: pki,
        }
    }

    fn exe(&self) -> PathBuf {
        self.scratch.path("bin/peregrine")
    }

    /// `serve root` over TLS (HTTP/1.1, HTTP/2, HTTP/3) on a port of its
    /// choosing and on a Unix socket in cleartext is refused with TLS, so
    /// TLS on 127.0.0.1 and the metrics listener beside it.
    fn serve(&self) -> (Process, u16, u16) {
        self.serve_as(&self.exe())
    }

    /// As `serve`, the program started by the path `exe`.
    fn serve_as(&self, exe: &Path) -> (Process, u16, u16) {
        let mut cmd = Command::new(exe);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PEREGRINE_") {
                cmd.env_remove(name);
            }
        }
        if test_support::process::is_root() {
            cmd.env("PEREGRINE_ALLOW_ROOT", "1");
        }
        cmd.current_dir(self.scratch.dir())
            .args(["serve", "root", "--bind", "127.0.0.1:0", "--workers", "2"])
            .args(["--metrics", "127.0.0.1:0"])
            .arg("--tls-cert")
            .arg(&self.cert)
            .arg("--tls-key")
            .arg(&self.key);
        let server = Process::spawn(&mut cmd);
        // "metrics on http://ADDR/metrics", then "... on https://ADDR/".
        let port_of = |line: &str| {
            let addr = common::last_addr(line);
            addr.split('/')
                .next()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let metrics_port = port_of(&server.line("metrics on http://"));
        let port = port_of(&server.line("https://"));
        test_support::process::wait_catching(server.pid(), 12);
        (server, port, metrics_port)
    }
}

/// Writes `bytes` as the program at `path` the way a package manager
/// does: a new file beside it, renamed over it (the running process keeps
/// the old inode; the path names the new one).
fn install(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The binary under test with its revision's first bytes in `--version`
/// replaced by `NEW_REVISION`.
fn second_build() -> Vec<u8> {
    let mut bytes = std::fs::read(env!("CARGO_BIN_EXE_peregrine")).unwrap();
    let needle = b"\nrevision: ";
    let mut n = 0;
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(needle.len()).position(|w| w == needle) {
        let start = at + i + needle.len();
        bytes[start..start + NEW_REVISION.len()].copy_from_slice(NEW_REVISION);
        at = start;
        n += 1;
    }
    assert!(n > 0, "the binary holds its --version text");
    bytes
}

fn version_of(exe: &Path) -> String {
    let out = Command::new(exe).arg("--version").output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pid in "upgrade: process PID serves now".
fn new_pid(line: &str) -> u32 {
    line.split("process ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Ends a process this test did not start as a child (the new server,
/// adopted by init once the old one exited): SIGTERM, then its end.
fn terminate_pid(pid: u32) {
    test_support::process::signal(pid, "TERM");
    wait_until(&format!("process {pid} exits"), || !is_alive(pid));
}

/// The new server, which is not this test's child: killed if the test
/// ends before it was terminated (a failed assertion), so that no server
/// outlives the test.
struct Adopted(u32);

impl Drop for Adopted {
    fn drop(&mut self) {
        if is_alive(self.0) {
            test_support::process::signal(self.0, "KILL");
        }
    }
}

/// Clients that ask until told to stop, each request's outcome counted.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn new() -> Load {
        Load {
            stop: Arc::default(),
            done: Arc::default(),
            failures: Arc::default(),
            threads: Vec::new(),
        }
    }

    /// Runs `round` (a batch of requests: how many succeeded, or why one
    /// failed) until stopped.
    fn run(&mut self, name: &'static str, round: impl Fn() -> Result<usize, String> + Send + 'static) {
        let (stop, done, failures) = (self.stop.clone(), self.done.clone(), self.failures.clone());
        self.threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&round))
                    .unwrap_or_else(|_| Err("the client panicked".to_owned()));
                match outcome {
                    Ok(n) => {
                        done.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(why) => failures.lock().unwrap().push(format!("{name}: {why}")),
                }
            }
        }));
    }

    fn n_done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        Arc::try_unwrap(self.failures).unwrap().into_inner().unwrap()
    }
}

/// HTTP/1.1 over TLS with keep-alive: 20 GETs on one connection (a
/// `Connection: close` from a draining server ends it early, and the next
/// round connects again).
fn h1_round(client: &Arc<rustls::ClientConfig>, port: u16) -> Result<usize, String> {
    let mut tls = test_support::pki::handshake(("127.0.0.1", port), client, "localhost")
        .map_err(|e| format!("handshake: {e}"))?;
    let mut n = 0;
    for _ in 0..20 {
        use std::io::{Read, Write};
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .map_err(|e| format!("write after {n}: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let resp = loop {
            if let Some((resp, _)) = test_support::http::parse(&buf, "GET") {
                break resp;
            }
            match tls.read(&mut chunk) {
                Ok(0) => return Err(format!("closed with no answer after {n}")),
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) => return Err(format!("read after {n}: {e}")),
            }
        };
        if resp.status != 200 || resp.body != b"hello\n" {
            return Err(format!("status {}", resp.status));
        }
        n += 1;
        if resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            break;
        }
    }
    Ok(n)
}

/// HTTP/2 over TLS with curl: 20 GETs on one connection (curl moves the
/// requests a GOAWAY refused to a new one).
fn h2_round(curl: &Path, port: u16) -> Result<usize, String> {
    let url = format!("https://localhost:{port}/");
    let out = Command::new(curl)
        .args([
            "-sk",
            "--http2",
            "--connect-to",
            &format!("localhost:{port}:127.0.0.1:{port}"),
        ])
        .args(["-w", "%{http_code} %{http_version}\\n"])
        .args((0..20).flat_map(|_| [url.as_str(), "-o", "/dev/null"]))
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().filter(|l| *l == "200 2").count();
    if !out.status.success() || ok != 20 {
        return Err(format!(
            "curl {}: {text:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(ok)
}

/// HTTP/3 with aioquic: 10 GETs on one connection.
fn h3_round(port: u16) -> Result<usize, String> {
    let reqs = [("GET", "/", &[][..]); 10];
    let answers = std::panic::catch_unwind(|| common::h3(port, "localhost", &reqs))
        .map_err(|_| "the aioquic client failed".to_owned())?;
    for (status, _, body) in &answers {
        if *status != 200 || body != "hello\n" {
            return Err(format!("status {status}"));
        }
    }
    Ok(answers.len())
}

#[test]
fn sigusr2_starts_the_new_binary_and_no_request_fails_over_http1_http2_or_http3() {
    let site = Site::new("upgrade-load");
    let curl = common::curl().to_owned();
    let old_version = version_of(&site.exe());
    let (server, port, metrics_port) = site.serve();
    // Warm the HTTP/3 client (aioquic's install) before the load.
    h3_round(port).unwrap();
    let mut load = Load::new();
    let client = site.client.clone();
    load.run("HTTP/1.1", move || h1_round(&client, port));
    load.run("HTTP/2", move || h2_round(&curl, port));
    load.run("HTTP/3", move || h3_round(port));
    let before = load.n_done();
    wait_until("requests before the upgrade", || load.n_done() > before + 50);

    install(&site.exe(), &second_build());
    let new_version = version_of(&site.exe());
    assert_ne!(old_version, new_version, "the second build says another --version");
    assert!(new_version.contains("UPGRADE-TEST"), "{new_version}");
    server.signal("USR2");
    let pid = new_pid(&server.line("upgrade: process "));
    let _adopted = Adopted(pid);
    // The new process runs the new file, the old one still the old one.
    let running = version_of(Path::new(&format!("/proc/{pid}/exe")));
    assert_eq!(running, new_version);
    let old_pid = server.pid();
    let at_switch = load.n_done();
    // The old process drains (within the shutdown timeout, 10 s) and
    // exits, with its status for a graceful end.
    wait_until("the old process exits", || !is_alive(old_pid));
    assert_eq!(server.wait().code(), Some(0), "the old process ends gracefully");
    // Served by the new process only from here on.
    let after_exit = load.n_done();
    wait_until("requests to the new process", || load.n_done() > after_exit + 100);
    let failures = load.finish();
    assert!(at_switch > before, "requests were made before the upgrade");
    assert!(failures.is_empty(), "failed requests: {failures:#?}");
    // The metrics listener came along.
    let metrics = test_support::http::get(("127.0.0.1", metrics_port), "/metrics");
    assert_eq!(metrics.status, 200);
    terminate_pid(pid);
}

/// Starts the server, replaces its file by `bytes` with `mode` (and the
/// directory's mode by `dir_mode`), sends SIGUSR2 and returns the line
/// saying why the upgrade failed; the old process must still serve.
fn failed_upgrade(name: &str, bytes: &[u8], mode: u32, dir_mode: u32) -> String {
    let site = Site::new(name);
    let (server, port, _) = site.serve();
    let exe = site.exe();
    install(&exe, bytes);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::set_permissions(exe.parent().unwrap(), std::fs::Permissions::from_mode(dir_mode)).unwrap();
    server.signal("USR2");
    let why = server.line("upgrade failed, still serving");
    // Still serving, on every protocol.
    assert_eq!(h1_round(&site.client, port), Ok(20));
    assert_eq!(h3_round(port), Ok(10));
    std::fs::set_permissions(exe.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    test_support::process::wait_catching(server.pid(), SIGTERM);
    server.terminate();
    why
}

/// A stand-in for a new binary that the checks refuse before it runs: the
/// refusal's line says which check it was (a file that ran would fail
/// otherwise: "exited before serving"), so the 170 MB program need not be
/// copied for each test.
const STAND_IN: &[u8] = b"#!/bin/sh\nexit 0\n";

#[test]
fn a_new_binary_that_exits_leaves_the_old_one_serving() {
    let why = failed_upgrade("upgrade-exit", b"#!/bin/sh\nexit 1\n", 0o755, 0o755);
    assert!(why.contains("exited before serving (exit status: 1)"), "{why}");
}

#[test]
fn a_new_binary_that_is_not_executable_leaves_the_old_one_serving() {
    let why = failed_upgrade("upgrade-noexec", STAND_IN, 0o644, 0o755);
    assert!(why.contains("is not executable"), "{why}");
}

#[test]
fn a_new_binary_others_may_replace_is_refused() {
    let why = failed_upgrade("upgrade-writable-dir", STAND_IN, 0o755, 0o777);
    assert!(why.contains("writable by its group or by everyone"), "{why}");
    let why = failed_upgrade("upgrade-writable-file", STAND_IN, 0o775, 0o755);
    assert!(why.contains("writable by its group or by everyone"), "{why}");
}

/// An install that keeps each release in its own directory and a
/// `current` link to the one in use (Capistrano's, many packages'): the
/// program started as `DIR/current/peregrine`, the link moved to a new
/// release, SIGUSR2 runs the new release's file, as nginx runs its
/// `argv[0]` again; not the old file the link pointed at when it started
/// (`/proc/self/exe`). The new release is a stand-in that exits 1, so the
/// line says which file ran: the old release would have served.
#[test]
fn sigusr2_runs_the_path_it_started_from_through_a_moved_link() {
    let site = Site::new("upgrade-link");
    for release in ["r1", "r2"] {
        let dir = site.scratch.path(release);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::hard_link(site.exe(), site.scratch.path("r1/peregrine")).unwrap();
    install(&site.scratch.path("r2/peregrine"), b"#!/bin/sh\nexit 1\n");
    std::os::unix::fs::symlink("r1", site.scratch.path("current")).unwrap();
    let started_as = site.scratch.path("current/peregrine");
    let (server, port, _) = site.serve_as(&started_as);
    // The new release goes in as a link renamed over the old one.
    std::os::unix::fs::symlink("r2", site.scratch.path("current.new")).unwrap();
    std::fs::rename(site.scratch.path("current.new"), site.scratch.path("current")).unwrap();
    server.signal("USR2");
    let starting = server.line("upgrade: starting ");
    assert!(
        starting.contains(&format!("starting {} on", started_as.display())),
        "the path as started, link kept: {starting}"
    );
    // Which ran: r2 fails; r1 (the file the link led to at start) would
    // serve, and is then ended with the test.
    let outcome = test_support::wait_for("the upgrade's outcome", || {
        let line = server.next_line_before(std::time::Instant::now() + common::PATIENCE)?;
        (line.contains("upgrade failed") || line.contains("serves now; this process")).then_some(line)
    });
    let _adopted = outcome.contains("serves now").then(|| Adopted(new_pid(&outcome)));
    assert!(
        outcome.contains("exited before serving (exit status: 1)"),
        "r2 must have run: {outcome}"
    );
    assert_eq!(h1_round(&site.client, port), Ok(20));
    server.terminate();
}

/// A new binary that never says it serves (it hangs): SIGTERM during the
/// upgrade (which waits up to a minute for it) is acted on at once, as
/// systemd's stop (TimeoutStopSec=40) needs: the new process is killed,
/// and the old one shuts down gracefully.
#[test]
fn sigterm_during_an_upgrade_stops_the_new_process_and_shuts_down_at_once() {
    let site = Site::new("upgrade-hang");
    let (server, _, _) = site.serve();
    let pid_file = site.scratch.path("new.pid");
    let script = format!("#!/bin/sh\necho $$ > {}\nexec sleep 300\n", pid_file.display());
    install(&site.exe(), script.as_bytes());
    server.signal("USR2");
    server.line("upgrade: starting ");
    let new_pid: u32 = test_support::wait_for("the new process starts", || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    let _adopted = Adopted(new_pid);
    let asked = std::time::Instant::now();
    server.signal("TERM");
    let said = server.line("SIGTERM during the upgrade");
    assert!(said.contains("stopping the new process, then shutting down"), "{said}");
    let old_pid = server.pid();
    wait_until("the old process exits", || !is_alive(old_pid));
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(10),
        "the stop took {:?}",
        asked.elapsed()
    );
    assert_eq!(server.wait().code(), Some(0), "a graceful end");
    assert!(!is_alive(new_pid), "the new process was killed");
}

#[test]
fn sigusr2_from_another_user_is_ignored() {
    if !test_support::process::is_root() {
        eprintln!("skipped: needs root, to start the server as root and signal it as another user");
        return;
    }
    let site = Site::new("upgrade-uid");
    // Started as root, serving as nobody: nobody may signal it, but only
    // root may have it upgraded.
    let mut cmd = Command::new(site.exe());
    cmd.current_dir(site.scratch.dir())
        .env_remove("PEREGRINE_ALLOW_ROOT")
        .args(["serve", "root", "--bind", "127.0.0.1:0", "--user", "nobody"]);
    // The root must be readable by nobody.
    let server = Process::spawn(&mut cmd);
    let addr = common::last_addr(&server.line("http://"));
    test_support::process::wait_catching(server.pid(), 12);
    let python = "import os,sys; os.setgid(65534); os.setuid(65534); os.kill(int(sys.argv[1]), 12)";
    let status = Command::new("python3")
        .args(["-c", python, &server.pid().to_string()])
        .status()
        .expect("python3");
    assert!(status.success(), "nobody may signal the server");
    let line = server.line("SIGUSR2 from uid");
    assert!(line.contains("uid 65534 ignored"), "{line}");
    assert!(common::get(&addr, "/").starts_with("HTTP/1.1 200"));
    server.terminate();
}

#[test]
fn a_unix_socket_is_passed_its_file_kept_and_systemd_told_the_new_main_pid() {
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixDatagram, UnixStream};
    let site = Site::new("upgrade-unix");
    let notify = UnixDatagram::bind(site.scratch.path("notify.sock")).unwrap();
    notify.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let sock = site.scratch.path("s.sock");
    let mut cmd = Command::new(site.exe());
    cmd.current_dir(site.scratch.dir())
        .env("PEREGRINE_ALLOW_ROOT", "1")
        .env("NOTIFY_SOCKET", site.scratch.path("notify.sock"))
        .args(["serve", "root", "--bind", "127.0.0.1:0", "--bind"])
        .arg(format!("unix:{}", sock.display()));
    let server = Process::spawn(&mut cmd);
    server.line("unix:");
    test_support::process::wait_catching(server.pid(), 12);
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    // The same file, started again: what matters here is the socket.
    server.signal("USR2");
    let pid = new_pid(&server.line("upgrade: process "));
    let _adopted = Adopted(pid);
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        format!("MAINPID={pid}\nREADY=1"),
        "the new process says it is the main one before the old one exits"
    );
    let old_pid = server.pid();
    wait_until("the old process exits", || !is_alive(old_pid));
    assert_eq!(server.wait().code(), Some(0));
    // The old process left the file to the new one, which answers on it.
    let mut s = UnixStream::connect(&sock).expect("the socket file is still there");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    terminate_pid(pid);
    // The new process removes it at its shutdown.
    assert!(!sock.exists());
}

/// Connects with `client` (its session cache kept between calls), asks
/// once and reads the answer (after which a TLS 1.3 ticket has arrived);
/// whether the handshake resumed a session.
fn resumes(client: &Arc<rustls::ClientConfig>, port: u16) -> bool {
    use std::io::{Read, Write};
    let mut tls = test_support::pki::connect(("127.0.0.1", port), client, "localhost");
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// Session tickets (issue 29) outlive a reload and a binary upgrade: the
/// keys are the process's (every worker's: two here, either may answer),
/// a reload keeps them and an upgrade hands them to the new process, so a
/// client's ticket resumes throughout. Before the keys were handed over,
/// the new process's tickets were another key's: a full handshake.
#[test]
fn session_tickets_resume_across_workers_a_reload_and_a_binary_upgrade() {
    let site = Site::new("upgrade-tickets");
    let (server, port, _) = site.serve();
    let mut config = site._pki.client_config(&[&rustls::version::TLS13]);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = Arc::new(config);
    assert!(!resumes(&client, port), "the first handshake is a full one");
    for _ in 0..4 {
        assert!(resumes(&client, port), "resumed on whichever worker");
    }
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    assert!(resumes(&client, port), "resumed after the reload");
    // The same program: the upgrade executes whatever file is there.
    server.signal("USR2");
    let pid = new_pid(&server.line("upgrade: process "));
    let _adopted = Adopted(pid);
    let old_pid = server.pid();
    wait_until("the old process exits", || !is_alive(old_pid));
    assert_eq!(server.wait().code(), Some(0));
    assert!(resumes(&client, port), "the new process resumes the old one's ticket");
    terminate_pid(pid);
}
