//! Helpers for tests that run the `peregrine` binary as a user would:
//! start it, learn where it listens, ask it for a page, stop it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};

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
    assert!(line.contains("http://"), "{line}");
    line.trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned()
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
