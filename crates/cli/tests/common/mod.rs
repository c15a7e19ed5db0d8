//! Helpers for tests that run the `peregrine` binary as a user would:
//! start it, learn where it listens, ask it for a page, stop it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long an expected line or effect is waited for before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The binary under test, with no PEREGRINE_* variable inherited from
/// whoever runs the tests (each is a setting).
pub fn peregrine() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_peregrine"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PEREGRINE_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// One GET with `Connection: close`; the whole answer, head and body.
pub fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Reads the "... on http://ADDR/" line the server prints once serving
/// (its stderr must be piped) and returns ADDR.
pub fn served_addr(child: &mut Child) -> String {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    last_addr(&line)
}

/// `host:port` of the last URL of a line such as "peregrine: ... on
/// http://127.0.0.1:8080/".
pub fn last_addr(line: &str) -> String {
    assert!(line.contains("http://"), "{line}");
    line.trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned()
}

/// A fresh scratch directory, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `NAME-PID` in the system's temporary directory, emptied.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child's standard error (piped), read line by line on a thread.
pub struct Stderr(Receiver<String>);

impl Stderr {
    pub fn of(child: &mut Child) -> Stderr {
        let mut reader = BufReader::new(child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || tx.send(line).is_err() {
                return;
            }
        });
        Stderr(lines)
    }

    /// The next line, if one comes before `deadline`.
    pub fn next_before(&self, deadline: Instant) -> Option<String> {
        self.0
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
    }

    /// Waits (up to `PATIENCE`) for a line containing `needle`, and
    /// returns it.
    pub fn line(&self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.next_before(deadline) {
                Some(line) if line.contains(needle) => return line,
                Some(_) => {}
                None => panic!("no line with {needle:?} on stderr"),
            }
        }
    }
}

/// SIGTERM, then the exit status must be 0 (a graceful shutdown).
pub fn terminate(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
