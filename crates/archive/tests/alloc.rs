//! An archive entry costs no heap allocation once its worker has prepared
//! it: the response is the stored header block and a slice of the map.
//! Counted with a global counting allocator (the only test in this binary).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};

use peregrine::Server;
use peregrine_archive::{pack, ArchiveServer, Mode, PackOptions};

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
fn archive_hits_are_served_without_allocating() {
    let dir = std::env::temp_dir().join(format!("peregrine-archive-alloc-{}", std::process::id()));
    let root = dir.join("src");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "seventeen bytes!\n").unwrap();
    std::fs::write(root.join("four.bin"), vec![b'x'; 4096]).unwrap();
    let archive = dir.join("a.prg");
    pack(&PackOptions::new(&root, &archive)).unwrap();
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    let mut stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 65536];
    let small = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let four = b"GET /four.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let mut exchange = |req: &[u8], body_len: usize| {
        stream.write_all(req).unwrap();
        let mut got = 0;
        loop {
            got += stream.read(&mut buf[got..]).unwrap();
            if let Some(end) = buf[..got].windows(4).position(|w| w == b"\r\n\r\n") {
                if got >= end + 4 + body_len {
                    assert_eq!(got, end + 4 + body_len);
                    assert!(buf.starts_with(b"HTTP/1.1 200 OK\r\n"));
                    return;
                }
            }
        }
    };
    for _ in 0..100 {
        exchange(small, 17);
        exchange(four, 4096);
    }
    let before = N_ALLOCS.load(Ordering::SeqCst);
    for _ in 0..1000 {
        exchange(small, 17);
        exchange(four, 4096);
    }
    let after = N_ALLOCS.load(Ordering::SeqCst);
    assert_eq!(after - before, 0, "allocations during 2,000 archive requests");
    h2_archive_hits_allocate_nothing(server.local_addr());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same two files over HTTP/2 (cleartext, prior knowledge), one stream
/// at a time and 16 at once, on one warm connection. (The client writes
/// its frames by hand into buffers it reuses, so that it allocates nothing
/// either.)
fn h2_archive_hits_allocate_nothing(addr: std::net::SocketAddr) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let head = |path: &str| {
        let mut h = Vec::new();
        for (index, value) in [(2u8, "GET"), (6, "http"), (4, path), (1, "t")] {
            h.push(index);
            h.push(value.len() as u8);
            h.extend_from_slice(value.as_bytes());
        }
        h
    };
    let heads = [head("/small.txt"), head("/four.bin")];
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS: a stream window of 2^31-1; then the connection's raised.
    hello.extend_from_slice(&[0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]);
    hello.extend_from_slice(&[0, 0, 4, 0x8, 0, 0, 0, 0, 0, 0x7f, 0xff, 0, 0]);
    stream.write_all(&hello).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut pending: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut batch: Vec<u8> = Vec::with_capacity(16 * 64);
    let mut next_id = 1u32;
    let mut exchange = |n: usize| {
        batch.clear();
        for i in 0..n {
            let h = &heads[i % 2];
            batch.extend_from_slice(&[0, 0, h.len() as u8, 0x1, 0x5]);
            batch.extend_from_slice(&next_id.to_be_bytes());
            batch.extend_from_slice(h);
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
                assert!(
                    kind != 0x7 && kind != 0x3,
                    "GOAWAY or RST_STREAM: {:?}",
                    &pending[..9 + len]
                );
                if kind <= 1 && flags & 1 != 0 {
                    ended += 1;
                }
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
    for _ in 0..1000 {
        exchange(1);
    }
    for _ in 0..100 {
        exchange(16);
    }
    let after = N_ALLOCS.load(Ordering::SeqCst);
    assert_eq!(
        after - before,
        0,
        "allocations during 2,600 warm HTTP/2 archive streams"
    );
}
