//! A request that announces a large body costs memory as its bytes arrive,
//! not up front: the read buffer grows geometrically. Watched with a global
//! allocator that records the largest allocation (the only test in this
//! binary, so nothing else allocates meanwhile).

mod common;

use common::{start_with, Client};
use peregrine::{Limits, Request, Response};
use test_support::alloc::{largest, reset_largest, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn an_announced_body_is_not_allocated_before_it_arrives() {
    let server = start_with(
        Limits {
            body_bytes_max: 1 << 30,
            ..Limits::default()
        },
        |req: &Request<'_>| Response::text(format!("{}", req.body().len())),
    );
    static BODY: [u8; 40 << 10] = [b'a'; 40 << 10];
    let mut c = Client::connect(server.local_addr());
    // Start counting after one whole exchange: the worker is running and
    // its start-up tables and pooled buffers are allocated.
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.response().text(), "0");
    reset_largest();
    // 1 GiB announced, 40 KiB sent: more than the 16 KiB pooled buffer, so
    // the server must grow it, but only to what has come.
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");
    c.send(&BODY);
    // Then the end of the stream: the server reads everything sent before
    // it sees the end and closes, so when the close arrives it has read all
    // 40 KiB.
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = c.read_to_close();
    assert!(largest() > 16 << 10, "the server never grew its buffer");
    let largest = largest();
    assert!(
        largest < 1 << 20,
        "largest allocation {largest} bytes for 40 KiB received"
    );
}
