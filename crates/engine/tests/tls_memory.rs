//! What an idle TLS keep-alive connection costs the server: its rustls
//! state, with no request buffers (those go back to the worker's pool).
//! Live heap bytes are counted with a global allocator that ignores the
//! test's own thread (the client), so only the server's threads count.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::TcpStream;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use common::{Client, PATIENCE};
use peregrine::{Request, Response, Server, TlsConfig};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

struct Live;

static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// False on the client's thread: its allocations are not the server's.
    static COUNTED: Cell<bool> = const { Cell::new(true) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted() {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

#[test]
fn an_idle_tls_connection_holds_only_the_rustls_state() {
    COUNTED.with(|c| c.set(false));
    let dir = std::env::temp_dir().join(format!("peregrine-tls-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
    let tls = TlsConfig::from_pem_files(dir.join("c.pem"), dir.join("k.pem")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let server = Server::new()
        .bind_tls("127.0.0.1:0", tls)
        .workers(1)
        .start(|_: &Request<'_>| Response::text("Hello, World!"))
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(config);
    let connect = || {
        let tcp = TcpStream::connect(server.local_addr()).unwrap();
        tcp.set_read_timeout(Some(PATIENCE)).unwrap();
        let conn = ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
        let mut c = Client::over(StreamOwned::new(conn, tcp));
        let r = c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
        assert_eq!(r.status, 200);
        c
    };
    // Warm up: the pool's buffers, the session cache, the Date cache.
    let mut warm: Vec<_> = (0..300).map(|_| connect()).collect();
    let before = LIVE.load(Ordering::SeqCst);
    const N: usize = 200;
    let mut idle: Vec<_> = (0..N).map(|_| connect()).collect();
    // One more answer on the first connection: by then the single worker
    // has finished with every connection before it.
    let r = warm[0].send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").response();
    assert_eq!(r.status, 200);
    let after = LIVE.load(Ordering::SeqCst);
    let per_conn = (after - before) / N as isize;
    println!("an idle TLS 1.3 connection holds {per_conn} bytes of heap");
    // rustls' state (ServerConnection, keys) and its 4 KiB read buffer;
    // no 16 KiB request buffers.
    assert!(per_conn < 12 * 1024, "{per_conn} bytes per idle TLS connection");
    idle.clear();
    warm.clear();
}
