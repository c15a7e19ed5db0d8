//! No heap allocation per request on a warm keep-alive connection, counted
//! with a global counting allocator (the only test in this binary, so the
//! harness itself is quiet while it runs).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use peregrine::client_addr::{AddrField, TrustedProxies};
use peregrine::{Metrics, Request, Response, Server};
use test_support::alloc::{allocations_after_warming, first_allocation_seen, Counting};
use test_support::h2;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_keep_alive_requests_allocate_nothing() {
    // Without metrics, then with them: counting a request allocates
    // nothing. Then behind trusted proxies, the handler asking who the
    // client is (the walk of X-Forwarded-For allocates nothing either).
    let trusted: TrustedProxies = "127.0.0.1, 10.0.0.0/8".parse().unwrap();
    for (metrics, trust) in [
        (None, None),
        (Some(Arc::new(Metrics::new())), None),
        (None, Some(trusted)),
    ] {
        let with_metrics = metrics.is_some();
        let mut server = Server::new().bind("127.0.0.1:0").workers(1);
        if let Some(m) = metrics {
            server = server.metrics(m);
        }
        if let Some(t) = trust {
            server = server.trusted_proxies(t, AddrField::XForwardedFor);
        }
        let server = server
            .start(|req: &Request<'_>| {
                std::hint::black_box(req.client_addr());
                Response::text("Hello, World!")
            })
            .unwrap();
        warm_requests_allocate_nothing(server.local_addr(), with_metrics);
        warm_h2_streams_allocate_nothing(server.local_addr(), with_metrics);
        server.shutdown();
        server.join().unwrap();
    }
}

fn warm_requests_allocate_nothing(addr: std::net::SocketAddr, with_metrics: bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let request = b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\nUser-Agent: alloc-test\r\nAccept: */*\r\nX-Forwarded-For: 1.2.3.4, 10.0.0.1\r\n\r\n";
    let pipelined = request.repeat(16);
    let mut buf = [0u8; 16384];
    // Every response has the same length (the Date is fixed-width).
    let mut exchange = |bytes: &[u8], n_responses: usize, expect_len: &mut usize| {
        stream.write_all(bytes).unwrap();
        let mut got = 0;
        loop {
            got += stream.read(&mut buf[got..]).unwrap();
            if *expect_len == 0 {
                if let Some(end) = buf[..got].windows(17).position(|w| w == b"\r\n\r\nHello, World!") {
                    *expect_len = end + 17;
                }
            }
            if *expect_len != 0 && got >= *expect_len * n_responses {
                assert_eq!(got, *expect_len * n_responses);
                return;
            }
        }
    };
    let mut len = 0;
    // Per round: ten requests one at a time, then 16 pipelined.
    let n_allocs = allocations_after_warming(200, 200, || {
        for _ in 0..10 {
            exchange(request, 1, &mut len);
        }
        exchange(&pipelined, 16, &mut len);
    });
    assert_eq!(
        n_allocs,
        0,
        "allocations during 5,200 warm requests (metrics: {with_metrics}); the first: {}",
        first_allocation_seen()
    );
}

/// The same over HTTP/2 (cleartext, prior knowledge): streams one at a
/// time, then 16 at once, on one warm connection.
fn warm_h2_streams_allocate_nothing(addr: std::net::SocketAddr, with_metrics: bool) {
    let mut head = h2::get_head("/plaintext", "localhost");
    // x-forwarded-for, an HPACK literal with a new name, not indexed.
    let (name, value) = (&b"x-forwarded-for"[..], &b"1.2.3.4, 10.0.0.1"[..]);
    head.extend_from_slice(&[0x00, name.len() as u8]);
    head.extend_from_slice(name);
    head.push(value.len() as u8);
    head.extend_from_slice(value);
    let heads = [head];
    let mut client = h2::Client::connect(addr);
    // Per round: ten streams one at a time, then 16 at once. Warmed five
    // times longer than HTTP/1.1: the connection's output buffer reaches
    // its largest size only when a batch of 16 answers meets a socket the
    // client is slow to drain, rare on an idle machine and common under a
    // loaded CI (a 58-byte realloc of it failed one run); it grows once,
    // never per request.
    let n_allocs = allocations_after_warming(1000, 200, || {
        for _ in 0..10 {
            client.exchange(&heads, 1);
        }
        client.exchange(&heads, 16);
    });
    // The client's own Vecs are warm too (same sizes each time).
    assert_eq!(
        n_allocs,
        0,
        "allocations during 5,200 warm HTTP/2 streams (metrics: {with_metrics}); the first: {}",
        first_allocation_seen()
    );
}
