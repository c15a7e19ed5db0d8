//! A file served from the worker's cache costs no heap allocation: the
//! response is a pre-built header block and a shared body. Counted with a
//! global counting allocator (the only test in this binary).

use std::net::TcpStream;

use peregrine::Server;
use peregrine_files::{FileServer, Options};
use test_support::alloc::{n_allocs, Counting};
use test_support::http::exchange_in_place;

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
    let mut stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 65536];
    let small = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let four = b"GET /four.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: alloc-test\r\n\r\n";
    let mut exchange = |req: &[u8], body_len: usize| exchange_in_place(&mut stream, &mut buf, req, body_len);
    for _ in 0..100 {
        exchange(small, 17);
        exchange(four, 4096);
    }
    let before = n_allocs();
    for _ in 0..1000 {
        exchange(small, 17);
        exchange(four, 4096);
    }
    let after = n_allocs();
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(after - before, 0, "allocations during 2,000 cached file requests");
}
