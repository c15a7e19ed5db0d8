//! Child processes under test (`peregrine`, the examples): spawned with one
//! output stream read line by line on a thread (so that a missing line
//! fails the test after `PATIENCE` instead of hanging it, and the child
//! never blocks on a full pipe), signalled by PID, and killed when the
//! test ends however it ends.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use crate::PATIENCE;

/// The lines of a child's output stream, read on a thread.
pub struct Lines(Receiver<String>);

impl Lines {
    /// Starts reading `stream` (a child's piped stdout or stderr).
    pub fn of(stream: impl Read + Send + 'static) -> Lines {
        let mut reader = BufReader::new(stream);
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || tx.send(line).is_err() {
                return;
            }
        });
        Lines(lines)
    }

    /// The next line, if one comes before `deadline`.
    pub fn next_before(&self, deadline: Instant) -> Option<String> {
        self.0
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
    }

    /// Waits (up to `PATIENCE`) for a line containing `needle`, skipping
    /// others, and returns it.
    pub fn line(&self, needle: &str) -> String {
        self.lines(&[needle])
    }

    /// Waits (up to `PATIENCE`) for lines containing each of `needles`, in
    /// any order, skipping others; returns the first that matched.
    pub fn lines(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        let mut missing: Vec<&str> = needles.to_vec();
        let mut first = None;
        while !missing.is_empty() {
            let Some(line) = self.next_before(deadline) else {
                panic!("no line with {missing:?} within {PATIENCE:?}");
            };
            if let Some(i) = missing.iter().position(|n| line.contains(n)) {
                missing.remove(i);
                first.get_or_insert(line);
            }
        }
        first.unwrap_or_default()
    }
}

/// A running child, killed (and reaped) when dropped.
pub struct Process {
    child: Option<Child>,
    /// The stream it was started with, line by line.
    pub output: Lines,
}

impl Process {
    /// Spawns `cmd` with its stderr piped and read line by line.
    pub fn spawn(cmd: &mut Command) -> Process {
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("the program starts");
        let lines = Lines::of(child.stderr.take().unwrap());
        Process {
            child: Some(child),
            output: lines,
        }
    }

    /// Spawns `cmd` with its stdout piped and read line by line.
    pub fn spawn_stdout(cmd: &mut Command) -> Process {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("the program starts");
        let lines = Lines::of(child.stdout.take().unwrap());
        Process {
            child: Some(child),
            output: lines,
        }
    }

    /// Waits for a line containing `needle`, and returns it.
    pub fn line(&self, needle: &str) -> String {
        self.output.line(needle)
    }

    /// Waits for lines containing each of `needles`, in any order; returns
    /// the first that matched.
    pub fn lines(&self, needles: &[&str]) -> String {
        self.output.lines(needles)
    }

    /// The next line, if one comes before `deadline`.
    pub fn next_line_before(&self, deadline: Instant) -> Option<String> {
        self.output.next_before(deadline)
    }

    /// The first line, if one comes within `PATIENCE`.
    pub fn first_line(&self) -> String {
        self.next_line_before(Instant::now() + PATIENCE)
            .expect("a first line within PATIENCE")
    }

    /// Waits for the line saying where the child listens (the first with
    /// a URL, ` on http://...` or ` on https://...`) and returns it.
    pub fn listening(&self) -> String {
        self.line("://")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends signal `name` (`TERM`, `HUP`, ...) with kill(1).
    pub fn signal(&self, name: &str) {
        signal(self.pid(), name);
    }

    /// Waits for the child to exit, and returns how it did.
    pub fn wait(mut self) -> ExitStatus {
        self.child.take().unwrap().wait().unwrap()
    }

    /// SIGTERM once the child catches it, then the exit status must be 0
    /// (a graceful shutdown).
    pub fn terminate(self) {
        wait_catching(self.pid(), SIGTERM);
        self.signal("TERM");
        assert_eq!(self.wait().code(), Some(0), "a graceful exit after SIGTERM");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// SIGTERM's number (the same on every Linux architecture).
pub const SIGTERM: u32 = 15;

/// Waits (up to `PATIENCE`) until process `pid` catches signal `number`
/// (its bit in `SigCgt` of `/proc/PID/status`). A program may print that
/// it listens before it installs its handlers (the examples do: they
/// start, print, then `Running::wait`); a signal sent in between would
/// kill it by the default action, which says nothing about its shutdown.
pub fn wait_catching(pid: u32, number: u32) {
    crate::wait_until(&format!("process {pid} catching signal {number}"), || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (number - 1)) != 0)
    });
}

/// Sends signal `name` to `pid` with kill(1); it must be delivered.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// The URLs of a line such as "peregrine: ... on https://127.0.0.1:8443/,
/// http://127.0.0.1:8080/".
pub fn urls(line: &str) -> Vec<String> {
    line.trim()
        .rsplit_once(" on ")
        .unwrap_or_else(|| panic!("no addresses in {line:?}"))
        .1
        .split(", ")
        .map(str::to_owned)
        .collect()
}

/// `host:port` of the last URL of such a line.
pub fn last_addr(line: &str) -> String {
    let url = urls(line).pop().unwrap();
    let (_, rest) = url.split_once("://").unwrap_or_else(|| panic!("no URL in {line:?}"));
    rest.trim_end_matches('/').to_owned()
}

/// Whether this process runs as root (its effective uid is 0), from
/// `/proc/self/status`: some behaviour (dropping root) can be checked
/// only then.
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("a Uid: line in /proc/self/status");
    euid == "0"
}

/// [`Command::output`] with a deadline: a command expected to finish (a
/// refusal, `check-config`, `man`) that starts serving instead fails the
/// test after `PATIENCE`, with what it printed, rather than hanging it.
pub trait BoundedOutput {
    /// Runs the command to its end (stdin null, stdout and stderr
    /// captured), killing it and failing if it runs past `PATIENCE`.
    fn bounded_output(&mut self) -> std::process::Output;
}

impl BoundedOutput for Command {
    fn bounded_output(&mut self) -> std::process::Output {
        let mut child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{self:?} starts: {e}"));
        let drain = |mut stream: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = stream.read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let err = stderr.join().unwrap_or_default();
                panic!(
                    "{self:?} still ran after {PATIENCE:?}; its stderr: {}",
                    String::from_utf8_lossy(&err)
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        std::process::Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        }
    }
}

/// Starts the aioquic HTTP/3 test client (crates/cli/tests/h3/client.py)
/// with `python` (from `install::aioquic_python`) on `spec` (JSON, written
/// to its stdin, which is then closed), killed after `limit_s` seconds.
/// Its stdout and stderr are piped if `piped`, else discarded.
pub fn spawn_h3_client(python: &std::path::Path, spec: &str, limit_s: u32, piped: bool) -> Child {
    use std::io::Write;
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/h3/client.py");
    let out = || if piped { Stdio::piped() } else { Stdio::null() };
    let mut child = Command::new("timeout")
        .args(["--kill-after=5", &limit_s.to_string()])
        .arg(python)
        .arg(client)
        .stdin(Stdio::piped())
        .stdout(out())
        .stderr(out())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(spec.as_bytes()).unwrap();
    child
}

/// Runs a scripted client (the WebSocket tests' Python, Node and Go
/// clients) to its end, killed after `limit_s` seconds (a bound for a hung
/// client, never a pass condition): it must exit 0 having printed `ok:
/// CHECK` (or `ok: CHECK (details)`) for each of `checks`. Returns what it
/// printed.
pub fn run_checks(name: &str, cmd: &Command, checks: &[&str], limit_s: u32) -> String {
    let out = Command::new("timeout")
        .args(["--kill-after=5", &limit_s.to_string()])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap_or_else(|e| panic!("cannot run timeout(1) for the {name} client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!("--- stdout\n{stdout}--- stderr\n{stderr}");
    assert!(
        out.status.success(),
        "the {name} client failed ({}):\n{said}",
        out.status
    );
    for check in checks {
        let line = format!("ok: {check}");
        assert!(
            stdout.lines().any(|l| l == line || l.starts_with(&format!("{line} ("))),
            "the {name} client passed without {line:?}:\n{said}"
        );
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_start_line() {
        let line = "peregrine: sandbox off; serving /srv/a on b on https://127.0.0.1:8443/, http://[::1]:8080/\n";
        assert_eq!(urls(line), ["https://127.0.0.1:8443/", "http://[::1]:8080/"]);
        assert_eq!(last_addr(line), "[::1]:8080");
        assert_eq!(last_addr("listening on http://127.0.0.1:3000/"), "127.0.0.1:3000");
    }

    #[test]
    fn bounded_output_captures_both_streams_and_the_status() {
        let out = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .bounded_output();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }
}
