//! What an idle TLS keep-alive connection costs the server: its rustls
//! state, with no request buffers (those go back to the worker's pool).
//! Live heap bytes are counted with a global allocator that ignores the
//! test's own thread (the client), so only the server's threads count.

mod common;

use common::Client;
use peregrine::{Request, Response, Server, TlsConfig};
use test_support::alloc::{leave_this_thread_out, live_bytes, Counting};
use test_support::pki::{self, Pki};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn an_idle_tls_connection_holds_only_the_rustls_state() {
    leave_this_thread_out();
    let pki = Pki::new("tls-memory");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let tls = TlsConfig::from_pem_files(cert, key).unwrap();
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        // 500 connections from one address.
        .limits(peregrine::Limits {
            conns_per_ip_max: 0,
            ..peregrine::Limits::default()
        })
        .start(|_: &Request<'_>| Response::text("Hello, World!"))
        .unwrap();
    let config = pki.client();
    let connect = || {
        let mut c = Client::over(pki::connect(server.local_addr(), &config, "localhost"));
        let r = c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
        assert_eq!(r.status, 200);
        c
    };
    // Warm up: the pool's buffers, the session cache, the Date cache.
    let mut warm: Vec<_> = (0..300).map(|_| connect()).collect();
    let before = live_bytes();
    const N: usize = 200;
    let mut idle: Vec<_> = (0..N).map(|_| connect()).collect();
    // One more answer on the first connection: by then the single worker
    // has finished with every connection before it.
    let r = warm[0].send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
    assert_eq!(r.status, 200);
    let after = live_bytes();
    let per_conn = (after - before) / N as isize;
    println!("an idle TLS 1.3 connection holds {per_conn} bytes of heap");
    // rustls' state (ServerConnection, keys) and its 4 KiB read buffer;
    // no 16 KiB request buffers.
    assert!(per_conn < 12 * 1024, "{per_conn} bytes per idle TLS connection");
    idle.clear();
    warm.clear();
}
