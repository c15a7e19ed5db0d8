//! One server taking over another's listening sockets, as a configuration
//! reload does: new connections go to the new server, whatever its worker
//! count; connections the old one holds finish there.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{Client, PATIENCE};
use peregrine::{Metrics, Request, Response, Server};

/// Connections open now, from the metrics.
fn conns_open(metrics: &Metrics) -> u64 {
    let text = metrics.render();
    text.lines()
        .find_map(|l| l.strip_prefix("peregrine_connections_open "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_server_taking_over_the_sockets_gets_new_connections_and_the_old_finishes_its_own() {
    for n_workers in [1, 3] {
        let metrics = Arc::new(Metrics::new());
        let old = Server::new()
            .bind("127.0.0.1:0")
            .workers(2)
            .metrics(metrics.clone())
            .start(|_: &Request<'_>| Response::text("old"))
            .unwrap();
        let addr = old.local_addr();
        // An idle keep-alive connection, and one accepted that has not
        // sent its request yet.
        let mut idle = Client::connect(addr);
        idle.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(idle.response().text(), "old");
        let mut fresh = Client::connect(addr);
        let deadline = Instant::now() + PATIENCE;
        while conns_open(&metrics) < 2 {
            assert!(Instant::now() < deadline, "the second connection was never accepted");
            std::thread::yield_now();
        }

        let listening = old.listeners().unwrap();
        assert_eq!(listening.len(), 1);
        assert_eq!(listening[0].local_addr().unwrap(), addr);
        let mut next = Server::new().workers(n_workers);
        for l in listening {
            next = next.listener(l);
        }
        let new = next.start(|_: &Request<'_>| Response::text("new")).unwrap();
        assert_eq!(new.local_addr(), addr);
        old.hand_over();
        assert!(old.listeners().is_err(), "a server handing over lends no sockets");

        // Both connections the old server holds are answered there; once
        // its workers have seen the hand-over, with Connection: close.
        for c in [&mut fresh, &mut idle] {
            loop {
                c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                let r = c.response();
                assert_eq!(r.text(), "old");
                if r.header("connection") == Some("close") {
                    break;
                }
                assert!(Instant::now() < deadline, "never Connection: close");
            }
            assert!(c.is_closed());
        }
        // Closed on our side too: the old server stops lingering and ends.
        drop((fresh, idle));
        old.join().unwrap();

        // Every socket of the old SO_REUSEPORT group is accepted from: no
        // connection waits for nobody, with fewer workers or more.
        for _ in 0..64 {
            let mut c = Client::connect(addr);
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            assert_eq!(c.response().text(), "new", "{n_workers} workers");
        }
        new.shutdown();
        new.join().unwrap();
    }
}

#[test]
fn at_shutdown_a_connection_that_has_not_sent_its_request_yet_is_answered() {
    let metrics = Arc::new(Metrics::new());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .metrics(metrics.clone())
        .start(|_: &Request<'_>| Response::text("hello"))
        .unwrap();
    let mut c = Client::connect(server.local_addr());
    let deadline = Instant::now() + PATIENCE;
    while conns_open(&metrics) < 1 {
        assert!(Instant::now() < deadline, "the connection was never accepted");
        std::thread::yield_now();
    }
    server.shutdown();
    // The worker has begun shutting down once the port refuses.
    while std::net::TcpStream::connect(server.local_addr()).is_ok() {
        assert!(Instant::now() < deadline, "the port never closed");
        std::thread::yield_now();
    }
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    drop(c);
    server.join().unwrap();
}

#[test]
fn a_shutdown_after_a_hand_over_closes_the_idle_connections_kept() {
    // Timeouts far beyond the test's patience: only the shutdown can close.
    let limits = peregrine::Limits {
        idle_timeout: std::time::Duration::from_secs(600),
        shutdown_timeout: std::time::Duration::from_secs(600),
        ..peregrine::Limits::default()
    };
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(|_: &Request<'_>| Response::text("hello"))
        .unwrap();
    let addr = server.local_addr();
    let mut a = Client::connect(addr);
    let mut b = Client::connect(addr);
    for c in [&mut a, &mut b] {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response().status, 200);
    }
    server.hand_over();
    // No server took the socket over: the port refuses once the worker has
    // seen the hand-over.
    let deadline = Instant::now() + PATIENCE;
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the port never closed");
        std::thread::yield_now();
    }
    // Idle connections are kept for one more request...
    a.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = a.response();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    // ...until a shutdown closes them.
    server.shutdown_handle().shutdown();
    assert!(b.is_closed());
    drop((a, b));
    server.join().unwrap();
}
