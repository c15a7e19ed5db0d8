//! No heap allocation per request on a warm keep-alive connection, counted
//! with a global counting allocator (the only test in this binary, so the
//! harness itself is quiet while it runs).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::sync::Arc;

use peregrine::{Metrics, Request, Response, Server};

struct Counting;

static N_ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        N_ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        N_ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_keep_alive_requests_allocate_nothing() {
    // Without metrics, then with them: counting a request allocates nothing.
    for metrics in [None, Some(Arc::new(Metrics::new()))] {
        let with_metrics = metrics.is_some();
        let mut server = Server::new().bind("127.0.0.1:0").workers(1);
        if let Some(m) = metrics {
            server = server.metrics(m);
        }
        let server = server.start(|_: &Request<'_>| Response::text("Hello, World!")).unwrap();
        warm_requests_allocate_nothing(server.local_addr(), with_metrics);
        warm_h2_streams_allocate_nothing(server.local_addr(), with_metrics);
        server.shutdown();
        server.join().unwrap();
    }
}

fn warm_requests_allocate_nothing(addr: std::net::SocketAddr, with_metrics: bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let request = b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\nUser-Agent: alloc-test\r\nAccept: */*\r\n\r\n";
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
    for _ in 0..200 {
        exchange(request, 1, &mut len);
        exchange(&pipelined, 16, &mut len);
    }
    let before = N_ALLOCS.load(Ordering::SeqCst);
    for _ in 0..2000 {
        exchange(request, 1, &mut len);
    }
    for _ in 0..200 {
        exchange(&pipelined, 16, &mut len);
    }
    let after = N_ALLOCS.load(Ordering::SeqCst);
    assert_eq!(
        after - before,
        0,
        "allocations during 5,200 warm requests (metrics: {with_metrics})"
    );
}

/// The same over HTTP/2 (cleartext, prior knowledge): streams one at a
/// time, then 16 at once, on one warm connection.
fn warm_h2_streams_allocate_nothing(addr: std::net::SocketAddr, with_metrics: bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let frame = |kind: u8, flags: u8, id: u32, payload: &[u8]| {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    // :method GET, :scheme http, :path /plaintext, :authority localhost
    // as literals without indexing (static-table names).
    let mut head = Vec::new();
    for (index, value) in [(2u8, "GET"), (6, "http"), (4, "/plaintext"), (1, "localhost")] {
        head.push(index);
        head.push(value.len() as u8);
        head.extend_from_slice(value.as_bytes());
    }
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // A window large enough that the test never needs WINDOW_UPDATE for
    // the stream windows; the connection's is raised below.
    hello.extend(frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    hello.extend(frame(0x8, 0, 0, &0x7fff_0000u32.to_be_bytes()));
    stream.write_all(&hello).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut pending: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut next_id = 1u32;
    // Sends `n` requests and reads until `n` streams have ended.
    let mut batch: Vec<u8> = Vec::with_capacity(16 * (9 + head.len()));
    let mut exchange = |n: usize| {
        // Written in place: the client must not allocate either.
        batch.clear();
        for _ in 0..n {
            let len = head.len();
            batch.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, 0x1, 0x5]);
            batch.extend_from_slice(&next_id.to_be_bytes());
            batch.extend_from_slice(&head);
            next_id += 2;
        }
        stream.write_all(&batch).unwrap();
        let mut ended = 0;
        while ended < n {
            while pending.len() >= 9 {
                let len = (usize::from(pending[0]) << 16) | (usize::from(pending[1]) << 8) | usize::from(pending[2]);
                if pending.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (pending[3], pending[4]);
                if kind <= 1 && flags & 1 != 0 {
                    ended += 1;
                }
                assert_ne!(kind, 0x7, "GOAWAY: {:?}", &pending[..9 + len]);
                pending.drain(..9 + len);
            }
            if ended < n {
                let got = stream.read(&mut buf).unwrap();
                assert!(got > 0, "closed");
                pending.extend_from_slice(&buf[..got]);
            }
        }
    };
    for _ in 0..200 {
        exchange(1);
        exchange(16);
    }
    let before = N_ALLOCS.load(Ordering::SeqCst);
    for _ in 0..2000 {
        exchange(1);
    }
    for _ in 0..200 {
        exchange(16);
    }
    let after = N_ALLOCS.load(Ordering::SeqCst);
    // The client's own Vecs above are warm too (same sizes each time).
    assert_eq!(
        after - before,
        0,
        "allocations during 5,200 warm HTTP/2 streams (metrics: {with_metrics})"
    );
}
