//! A 10 MiB file sent over TLS is encrypted as the client reads it, not all
//! at once: the server's heap never grows by more than rustls' outgoing
//! bound (`TLS_SEND_BYTES_MAX`, 64 KiB) and a few buffers. The peak of the
//! server threads' live heap is tracked by a global allocator that ignores
//! the test's own thread (the client).

mod common;

use common::Client;
use peregrine::{Body, FileRange, Request, Response, Server, TlsConfig};
use test_support::alloc::{leave_this_thread_out, live_bytes, peak_bytes, reset_peak, Counting};
use test_support::pki::{self, Pki};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_large_file_is_encrypted_as_the_client_reads_it() {
    leave_this_thread_out();
    let pki = Pki::new("tls-backpressure");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let big: Vec<u8> = (0..10u32 << 20).map(|i| (i % 253) as u8).collect();
    let file = test_support::Scratch::new("peregrine-tls-backpressure");
    let path = file.write("big.bin", &big);
    let tls = TlsConfig::from_pem_files(cert, key).unwrap();
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .start(move |_: &Request<'_>| {
            let range = FileRange::whole(std::fs::File::open(&path).unwrap()).unwrap();
            Response::bytes("application/octet-stream", Body::File(range))
        })
        .unwrap();
    let mut c = Client::over(pki::connect(server.local_addr(), &pki.client(), "localhost"));
    // Warm: handshake, pools, caches.
    assert_eq!(
        c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .response()
            .body
            .len(),
        big.len()
    );
    let base = live_bytes();
    reset_peak();
    let r = c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
    assert!(r.body == big, "the body differs");
    let growth = peak_bytes() - base;
    println!("server heap grew by at most {growth} bytes while sending 10 MiB");
    // 64 KiB of records, a 16 KiB read buffer, a response head: far from
    // the 10 MiB an unbounded encryption would hold.
    assert!(growth < 512 * 1024, "the server held {growth} bytes");
}
