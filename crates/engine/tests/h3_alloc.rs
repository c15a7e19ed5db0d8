//! Heap allocations per HTTP/3 request on a warm connection, counted with
//! a global counting allocator (the only test in this binary, so the
//! harness is quiet while it counts). HTTP/1.1 and HTTP/2 make none
//! (`tests/alloc.rs`); HTTP/3 makes about 5, quinn-proto's (see
//! `ALLOCS_PER_REQUEST_MAX`): this test holds the count to what it is, so
//! that a change that adds allocations per request shows.
//!
//! The client is aioquic in another process (its allocations are not
//! counted), as in `tests/http3.rs`: one connection asking `/` 100 times,
//! then one asking it 700 times; what the second allocates more, over 600,
//! is the cost of a request (the handshake, the connection's state and the
//! client process's start cost the same in both).

use std::path::{Path, PathBuf};

use peregrine::{Request, Response, Server, TlsConfig};
use test_support::alloc::{n_allocs, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations per request at most: 5.0 and 5.1 measured (2026-11-23),
/// all quinn-proto's (its send state's `Box`, its queue of unacknowledged
/// writes, the copy of each write, a node of its acknowledged ranges),
/// with room for the variation between runs (how requests share
/// datagrams and acknowledgments depends on timing). 10.6-11.6 before the
/// session kept as many finished requests as a client may have open.
const ALLOCS_PER_REQUEST_MAX: f64 = 6.5;

fn python() -> PathBuf {
    test_support::install::aioquic_python(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("aioquic-venv"))
        .unwrap_or_else(|e| panic!("aioquic is needed: {e}"))
}

/// Runs the aioquic client with `n` GETs of `/` on one connection; returns
/// the allocations the server made meanwhile, and the answers' directory.
fn count(python: &Path, port: u16, n: usize, out: &Path) -> usize {
    std::fs::create_dir_all(out).unwrap();
    let requests = vec!["{\"path\": \"/\"}"; n].join(", ");
    let spec = format!(
        "{{\"host\": \"127.0.0.1\", \"port\": {port}, \"out\": \"{}\", \"timeout\": 60, \"requests\": [{requests}]}}",
        out.display()
    );
    let before = n_allocs();
    let mut child = test_support::process::spawn_h3_client(python, spec.as_str(), 120, false);
    let status = child.wait().unwrap();
    let n_allocs = n_allocs() - before;
    assert!(status.success(), "the aioquic client failed");
    n_allocs
}

#[test]
fn warm_http3_requests_allocate_a_bounded_few() {
    let pki = test_support::pki::Pki::new("h3-alloc");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let config = TlsConfig::from_pem_files(&cert, &key).unwrap();
    let python = python();
    let server = Server::new()
        .bind_tls("127.0.0.1:0", config)
        .workers(1)
        .start(|_: &Request<'_>| Response::text("Hello, World!"))
        .unwrap();
    let port = server.local_addr().port();
    let out = pki.dir().join("out");
    count(&python, port, 100, &out); // warm: the worker's buffers and pools
    let (mut few, mut many) = (usize::MAX, usize::MAX);
    // The least of three of each: a stray allocation (a log line, a
    // retransmission) adds to a run, never takes away.
    for _ in 0..3 {
        few = few.min(count(&python, port, 100, &out));
        many = many.min(count(&python, port, 700, &out));
    }
    for i in [0, 699] {
        let head = std::fs::read_to_string(out.join(format!("{i}.head"))).unwrap();
        assert_eq!(head.lines().next(), Some("200"));
        assert_eq!(std::fs::read(out.join(format!("{i}.body"))).unwrap(), b"Hello, World!");
    }
    let per_request = many.saturating_sub(few) as f64 / 600.0;
    println!("HTTP/3: {few} allocations for 100 GETs, {many} for 700: {per_request:.1} per request");
    assert!(
        per_request <= ALLOCS_PER_REQUEST_MAX,
        "{per_request:.1} allocations per HTTP/3 request ({few} for 100 GETs, {many} for 700)"
    );
    server.shutdown();
    server.join().unwrap();
}
