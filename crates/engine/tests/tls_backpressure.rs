//! A 10 MiB file sent over TLS is encrypted as the client reads it, not all
//! at once: the server's heap never grows by more than rustls' outgoing
//! bound (`TLS_SEND_BYTES_MAX`, 64 KiB) and a few buffers. The peak of the
//! server threads' live heap is tracked by a global allocator that ignores
//! the test's own thread (the client).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::TcpStream;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use common::{Client, PATIENCE};
use peregrine::{Body, FileRange, Request, Response, Server, TlsConfig};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

struct Peak;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// False on the client's thread: its allocations are not the server's.
    static COUNTED: Cell<bool> = const { Cell::new(true) };
}

fn add(delta: isize) {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        let now = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

#[test]
fn a_large_file_is_encrypted_as_the_client_reads_it() {
    COUNTED.with(|c| c.set(false));
    let dir = std::env::temp_dir().join(format!("peregrine-tls-backpressure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
    let big: Vec<u8> = (0..10u32 << 20).map(|i| (i % 253) as u8).collect();
    let file = dir.join("big.bin");
    std::fs::write(&file, &big).unwrap();
    let tls = TlsConfig::from_pem_files(dir.join("c.pem"), dir.join("k.pem")).unwrap();
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .start(move |_: &Request<'_>| {
            let range = FileRange::whole(std::fs::File::open(&file).unwrap()).unwrap();
            Response::bytes("application/octet-stream", Body::File(range))
        })
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(server.local_addr()).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let conn = ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut c = Client::over(StreamOwned::new(conn, tcp));
    // Warm: handshake, pools, caches.
    assert_eq!(
        c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .response()
            .body
            .len(),
        big.len()
    );
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let r = c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
    assert!(r.body == big, "the body differs");
    let growth = PEAK.load(Ordering::SeqCst) - base;
    println!("server heap grew by at most {growth} bytes while sending 10 MiB");
    // 64 KiB of records, a 16 KiB read buffer, a response head: far from
    // the 10 MiB an unbounded encryption would hold.
    assert!(growth < 512 * 1024, "the server held {growth} bytes");
    std::fs::remove_dir_all(&dir).unwrap();
}
