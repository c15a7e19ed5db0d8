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
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(after - before, 0, "allocations during 2,000 archive requests");
}
