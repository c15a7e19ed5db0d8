//! A file served from the worker's cache costs no heap allocation: the
//! response is a pre-built header block and a shared body. Counted with a
//! global counting allocator (the only test in this binary).

use peregrine::Server;
use peregrine_files::{FileServer, Options};
use test_support::alloc::{allocations_after_warming, first_allocation_seen, Counting};
use test_support::http::InPlace;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn cached_files_are_served_without_allocating() {
    let root = std::env::temp_dir().join(format!("peregrine-files-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "seventeen bytes!\n").unwrap();
    std::fs::write(root.join("four.bin"), vec![b'x'; 4096]).unwrap();
    let mut options = Options::new(&root);
    // Long enough that no re-stat falls inside the counted window.
    options.revalidate_interval = std::time::Duration::from_secs(3600);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(options).unwrap())
        .unwrap();
    let mut client = InPlace::connect(server.local_addr());
    let small = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let four = b"GET /four.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let n_allocs = allocations_after_warming(100, 1000, || {
        client.exchange(small, 17);
        client.exchange(four, 4096);
    });
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(
        n_allocs,
        0,
        "allocations during 2,000 cached file requests; the first: {}",
        first_allocation_seen()
    );
}
