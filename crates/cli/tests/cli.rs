//! The `peregrine` binary, run as a user would.

mod common;

use std::process::Stdio;

use common::{get, peregrine, served_addr, terminate};

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
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers must be at least 1"));
    let out = peregrine().args(["hello", "--idle-timeout=0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idle-timeout"));
}

/// The cause once: the library's error no longer repeats its source in its
/// own message, which the CLI prints as a chain.
#[test]
fn an_address_in_use_is_reported_once_and_exits_non_zero() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let out = peregrine().args(["hello", "--bind", &addr]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}
