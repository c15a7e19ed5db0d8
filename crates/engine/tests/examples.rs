//! The examples listen where `--bind` or `PEREGRINE_BIND` says, and say
//! where on their first line. `cargo test` builds them beside the tests.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use test_support::http;
use test_support::process::{last_addr, Process};

/// An example's binary: `target/<profile>/examples/NAME`, next to `deps/`
/// where this test runs from.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().parent().unwrap().join("examples");
    let mut cmd = Command::new(dir.join(name));
    cmd.env_remove("PEREGRINE_BIND");
    cmd
}

/// Starts the example; returns it with the address on its first line
/// (`listening on http://ADDR/`).
fn start(cmd: &mut Command) -> (Process, String) {
    let example = Process::spawn_stdout(cmd);
    let line = example.first_line();
    assert!(line.starts_with("listening on http://"), "first line: {line:?}");
    (example, last_addr(&line))
}

fn get(addr: &str, path: &str) -> String {
    http::get(addr, path).text()
}

#[test]
fn examples_listen_where_bind_says_and_print_it() {
    let (hello, addr) = start(example("hello").args(["--bind", "127.0.0.1:0"]));
    assert!(addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"), "{addr}");
    assert!(get(&addr, "/").ends_with("Hello, World!"));
    hello.terminate();

    let (router, addr) = start(example("router").env("PEREGRINE_BIND", "127.0.0.1:0"));
    assert!(get(&addr, "/users/%E2%9C%93").ends_with("user \u{2713}\n"));
    router.terminate();

    let (deferred, addr) = start(
        example("deferred")
            .arg("--bind=127.0.0.1:0")
            .env("PEREGRINE_BIND", "not an address: the flag wins"),
    );
    assert!(get(&addr, "/fast").ends_with("fast\n"));
    deferred.terminate();
}

#[test]
fn an_example_refuses_what_it_does_not_understand() {
    let out = example("hello").arg("--port").stderr(Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument \"--port\""));
}

#[test]
fn an_example_that_cannot_start_says_why_in_a_sentence() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = example("hello")
        .args(["--bind", &addr])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with(&format!("cannot listen on {addr}: ")), "{err}");
    assert!(
        !err.contains("Error {") && !err.contains("kind:"),
        "Debug, not a sentence: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
