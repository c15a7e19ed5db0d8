//! Heap allocations per proxied request on warm keep-alive connections
//! (client to proxy, proxy to upstream), counted with a global counting
//! allocator: evidence for issue 26's relay cost, and a guard against
//! its growing. The client and the upstream are loops over fixed buffers
//! that allocate nothing, so every allocation counted is the server's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Router, Server};
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

#[test]
fn a_warm_proxied_request_makes_few_allocations() {
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
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(Router::new().route("GET", "/*rest", proxy))
        .expect("server starts");
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_nodelay(true).unwrap();
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
    println!("proxied GET: {per:.2} allocations per request ({n} in {N})");
    // Half an allocation of slack: a pool's growth now and then is no
    // regression; one more allocation a request is.
    assert!(
        per < ALLOCS_PER_REQUEST_MAX as f64 + 0.5,
        "{per:.2} allocations per request, over {ALLOCS_PER_REQUEST_MAX}"
    );
}
