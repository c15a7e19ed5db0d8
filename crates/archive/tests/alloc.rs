//! An archive entry costs no heap allocation once its worker has prepared
//! it: the response is the stored header block and a slice of the map.
//! Counted with a global counting allocator (the only test in this binary).

use peregrine::Server;
use peregrine_archive::{pack, ArchiveServer, Mode, PackOptions};
use test_support::alloc::{allocations_after_warming, first_allocation_seen, wait_for_thread, Counting};
use test_support::h2;
use test_support::http::InPlace;

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
    // The archive's watcher thread allocates as it starts.
    wait_for_thread("peregrine-archive-watch");
    let mut client = InPlace::connect(server.local_addr());
    let small = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let four = b"GET /four.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let n_allocs = allocations_after_warming(100, 1000, || {
        client.exchange(small, 17);
        client.exchange(four, 4096);
    });
    assert_eq!(
        n_allocs,
        0,
        "allocations during 2,000 archive requests; the first: {}",
        first_allocation_seen()
    );
    h2_archive_hits_allocate_nothing(server.local_addr());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same two files over HTTP/2 (cleartext, prior knowledge), one stream
/// at a time and 16 at once, on one warm connection. (The client writes
/// its frames by hand into buffers it reuses, so that it allocates nothing
/// either.)
fn h2_archive_hits_allocate_nothing(addr: std::net::SocketAddr) {
    let heads = [h2::get_head("/small.txt", "t"), h2::get_head("/four.bin", "t")];
    let mut client = h2::Client::connect(addr);
    // Per round: ten streams one at a time, then 16 at once.
    let n_allocs = allocations_after_warming(200, 100, || {
        for _ in 0..10 {
            client.exchange(&heads, 1);
        }
        client.exchange(&heads, 16);
    });
    assert_eq!(
        n_allocs,
        0,
        "allocations during 2,600 warm HTTP/2 archive streams; the first: {}",
        first_allocation_seen()
    );
}
