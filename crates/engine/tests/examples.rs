//! The examples listen where `--bind` or `PEREGRINE_BIND` says, and say
//! where on their first line. `cargo test` builds them beside the tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// An example's binary: `target/<profile>/examples/NAME`, next to `deps/`
/// where this test runs from.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().parent().unwrap().join("examples");
    let mut cmd = Command::new(dir.join(name));
    cmd.env_remove("PEREGRINE_BIND").stdout(Stdio::piped());
    cmd
}

/// The address on the example's first line (`listening on http://ADDR/`).
fn listening(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_owned()
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// SIGTERM, then a graceful exit (0).
fn stop(mut child: Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn examples_listen_where_bind_says_and_print_it() {
    let mut hello = example("hello").args(["--bind", "127.0.0.1:0"]).spawn().unwrap();
    let addr = listening(&mut hello);
    assert!(addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"), "{addr}");
    assert!(get(&addr, "/").ends_with("Hello, World!"));
    stop(hello);

    let mut router = example("router").env("PEREGRINE_BIND", "127.0.0.1:0").spawn().unwrap();
    let addr = listening(&mut router);
    assert!(get(&addr, "/users/%E2%9C%93").ends_with("user \u{2713}\n"));
    stop(router);

    let mut deferred = example("deferred")
        .arg("--bind=127.0.0.1:0")
        .env("PEREGRINE_BIND", "not an address: the flag wins")
        .spawn()
        .unwrap();
    let addr = listening(&mut deferred);
    assert!(get(&addr, "/fast").ends_with("fast\n"));
    stop(deferred);
}

#[test]
fn an_example_refuses_what_it_does_not_understand() {
    let out = example("hello").arg("--port").stderr(Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument \"--port\""));
}
