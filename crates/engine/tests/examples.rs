//! The examples listen where `--bind` or `PEREGRINE_BIND` says, and say
//! where on their first line. `cargo test` builds them beside the tests.

use std::path::PathBuf;
use std::process::{Command, Stdio};

mod ws;

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

/// The event stream's ticks arrive while the same worker answers `/now`.
#[test]
fn the_sse_example_streams_ticks_while_answering_others() {
    use std::io::{Read, Write};
    let (sse, addr) = start(example("sse").args(["--bind", "127.0.0.1:0"]));
    let mut events = std::net::TcpStream::connect(&addr).unwrap();
    events.set_read_timeout(Some(test_support::PATIENCE)).unwrap();
    events.write_all(b"GET /events HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut read_until = |needle: &str| {
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let mut buf = [0; 4096];
            // A stop and continue (a debugger, ^Z, a benchmark pausing
            // the machine's other work) ends a read that has a timeout
            // with EINTR: read again.
            let n = match events.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => r.expect("an event in time"),
            };
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
    };
    read_until(": subscribed\n\n");
    let now = get(&addr, "/now");
    assert!(now.trim().parse::<u64>().is_ok(), "{now:?}");
    read_until("data: tick ");
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.contains("Content-Type: text/event-stream\r\n"), "{text}");
    assert!(text.contains("Cache-Control: no-store\r\n"), "{text}");
    // Gone before the shutdown, which would wait for the stream in flight.
    drop(events);
    sse.terminate();
}

/// The upload example counts and hashes a chunked body.
#[test]
fn the_upload_example_counts_and_hashes_a_body() {
    let (upload, addr) = start(example("upload").args(["--bind", "127.0.0.1:0"]));
    let mut c = http::Client::connect(&addr);
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    for _ in 0..64 {
        c.send(b"4000\r\n");
        c.send(&[b'a'; 0x4000]);
        c.send(b"\r\n");
    }
    c.send(b"0\r\n\r\n");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..64 * 0x4000 {
        hash = (hash ^ u64::from(b'a')).wrapping_mul(0x0000_0100_0000_01b3);
    }
    assert_eq!(c.response().text(), format!("1048576 bytes, fnv1a64 {hash:016x}\n"));
    upload.terminate();
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

/// Two members of the chat: each line reaches both, and a departure is
/// announced.
#[test]
fn the_chat_example_relays_lines_between_members() {
    let (chat, addr) = start(example("chat").args(["--bind", "127.0.0.1:0"]));
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut ann = ws::Ws::open(addr, "/ws?name=ann");
    assert_eq!(ann.read_text(), "* you are ann");
    let mut bob = ws::Ws::open(addr, "/ws?name=bob");
    assert_eq!(bob.read_text(), "* you are bob");
    assert_eq!(ann.read_text(), "* bob joined");
    bob.send_text("hello");
    assert_eq!(bob.read_text(), "bob: hello");
    assert_eq!(ann.read_text(), "bob: hello");
    bob.send_frame(0x88, &1000u16.to_be_bytes());
    assert_eq!(bob.read_close(), 1000);
    assert_eq!(ann.read_text(), "* bob left");
    assert!(get(&addr.to_string(), "/").contains("<title>Peregrine chat</title>"));
    chat.terminate();
}
