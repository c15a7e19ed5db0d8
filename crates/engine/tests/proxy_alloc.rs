//! Heap allocations per proxied request on warm keep-alive connections
//! (client to proxy, proxy to upstream), counted with a global counting
//! allocator: evidence for issue 26's relay cost, and a guard against
//! its growing. The client and the upstream are loops over fixed buffers
//! that allocate nothing, so every allocation counted is the server's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Running, Server};
use test_support::alloc::{n_allocs, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

/// The most allocations a proxied GET may make: measured 0.00 a request
/// once a short answer's fields and body went into one buffer the upstream
/// connection keeps (`UpConn::lines`) and the request's bytes and path
/// into buffers kept per thread (`proxy::take_bytes`, `TARGET`); 5.00
/// once the outbox's list of jobs was kept between turns and an idle
/// upstream connection kept a short answer's buffer (`settle`'s
/// `IDLE_BUF_BYTES_MAX`); 7.00 once the worker's list of upstream answers was kept between turns
/// (`Upstreams::give_answers`), not made again for each answer; 8.00
/// once `build_as` wrote the upstream head and this hop's fields straight
/// into the request's buffer (`proxy/head.rs`: no field list, no buffer
/// of values); 10.00 once `build_as` wrote the values it adds into one buffer, sized its
/// field list once and encoded the path without `core::fmt`; 17.00
/// before, and 24.00 before `build_as` stopped copying its own fields and
/// formatting the client's address into Strings of their own (`cargo test
/// -p peregrine --test proxy_alloc -- --nocapture`, a debug build; the
/// count does not depend on the optimisation level).
const ALLOCS_PER_REQUEST_MAX: usize = 0;

/// An upstream that answers `ANSWER` to each request head, one at a time,
/// on the first connection it accepts; its address.
fn upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 8192];
        let mut have = 0;
        loop {
            match s.read(&mut buf[have..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
            // One request at a time: the client waits for each answer.
            if buf[..have].ends_with(b"\r\n\r\n") {
                have = 0;
                if s.write_all(ANSWER).is_err() {
                    return;
                }
            }
        }
    });
    up
}

/// A proxy with one worker in front of `upstream()`.
fn proxy() -> Running {
    let up = upstream();
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(Router::new().route("GET", "/*rest", proxy))
        .expect("server starts")
}

/// Held by each test from its start: the allocator's count is the
/// process's, so the tests of this file take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn, a proxy in front of `upstream()`, and a client
/// connection to it.
fn connected() -> (std::sync::MutexGuard<'static, ()>, Running, TcpStream) {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = proxy();
    let c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_nodelay(true).unwrap();
    (turn, server, c)
}

/// Heap allocations per call of `round` over `N` warm rounds, printed as
/// `what`'s, and at most `ALLOCS_PER_REQUEST_MAX`.
fn assert_few_allocations(what: &str, mut round: impl FnMut()) {
    const N: usize = 2000;
    // Not `allocations_after_warming`: the backtrace it records of the
    // first allocation (there are some here) allocates far more itself.
    for _ in 0..500 {
        round();
    }
    let before = n_allocs();
    for _ in 0..N {
        round();
    }
    let n = n_allocs() - before;
    let per = n as f64 / N as f64;
    println!("{what}: {per:.2} allocations per request ({n} in {N})");
    // Half an allocation of slack: a pool's growth now and then is no
    // regression; one more allocation a request is.
    assert!(
        per < ALLOCS_PER_REQUEST_MAX as f64 + 0.5,
        "{what}: {per:.2} allocations per request, over {ALLOCS_PER_REQUEST_MAX}"
    );
}

#[test]
fn a_warm_proxied_request_makes_few_allocations() {
    let (_turn, _server, mut c) = connected();
    let mut buf = [0u8; 8192];
    let mut round = || {
        c.write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\nUser-Agent: bench\r\n\r\n")
            .unwrap();
        let mut have = 0;
        while !buf[..have].ends_with(b"\r\n\r\nHello, World!") {
            let n = c.read(&mut buf[have..]).unwrap();
            assert!(n > 0, "closed");
            have += n;
        }
    };
    assert_few_allocations("proxied GET", &mut round);
}

/// The same over HTTP/2 (prior knowledge, one stream after another on one
/// connection): the HTTP/2 writer's head cache must not hold the proxy's
/// header block, whose buffer the upstream connection refills in place
/// (measured 2.00 allocations a request while it held a clone of it).
#[test]
fn a_warm_proxied_h2_request_makes_few_allocations() {
    let (_turn, _server, mut c) = connected();
    // The preface, empty SETTINGS, and a large connection window so that no
    // WINDOW_UPDATE is needed along the way.
    let mut hello = Vec::from(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..]);
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0]);
    c.write_all(&hello).unwrap();
    let mut buf = [0u8; 16384];
    let mut have = 0;
    let mut stream: u32 = 1;
    let mut round = || {
        // HEADERS, END_STREAM | END_HEADERS: :method GET, :scheme http
        // (static 2 and 6), :path /hello and :authority a (literal values,
        // static names 4 and 1).
        let block = b"\x82\x86\x04\x06/hello\x01\x01a";
        let mut frame = [0u8; 9 + 13];
        frame[2] = block.len() as u8;
        frame[3] = 1;
        frame[4] = 5;
        frame[5..9].copy_from_slice(&stream.to_be_bytes());
        frame[9..].copy_from_slice(block);
        c.write_all(&frame).unwrap();
        // Frames until this stream's DATA with END_STREAM; SETTINGS acked.
        loop {
            while have >= 9 {
                let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                if have < 9 + len {
                    break;
                }
                let (kind, flags) = (buf[3], buf[4]);
                let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                assert_ne!(kind, 7, "GOAWAY");
                assert_ne!(kind, 3, "RST_STREAM");
                if kind == 4 && flags & 1 == 0 {
                    c.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).unwrap();
                }
                let done = kind == 0 && flags & 1 == 1 && id == stream;
                if done {
                    assert_eq!(&buf[9..9 + len], b"Hello, World!");
                }
                buf.copy_within(9 + len..have, 0);
                have -= 9 + len;
                if done {
                    stream += 2;
                    return;
                }
            }
            let n = c.read(&mut buf[have..]).unwrap();
            assert!(n > 0, "closed");
            have += n;
        }
    };
    assert_few_allocations("proxied GET over HTTP/2", &mut round);
}
