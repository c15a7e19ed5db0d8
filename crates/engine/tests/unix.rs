//! `Server::bind_unix`: a Unix-domain listener in the library, with the
//! client's address as handlers see it, and the socket file's life.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use peregrine::{Request, Response, Server, UNIX_PEER};
use test_support::Scratch;

#[test]
fn a_unix_listener_serves_every_worker_and_its_file_goes_at_shutdown() {
    let dir = Scratch::new("peregrine-engine-unix");
    let sock = dir.path("s.sock");
    let running = Server::new()
        .bind_unix(&sock)
        .bind("127.0.0.1:0")
        .workers(2)
        .start(|req: &Request<'_>| Response::text(format!("peer {}", req.peer_addr())))
        .unwrap();
    assert_eq!(running.local_addrs()[0], UNIX_PEER);
    assert_eq!(running.unix_paths()[0].as_deref(), Some(sock.as_path()));
    assert_eq!(running.unix_paths()[1], None);
    // Several connections: whichever worker accepts each, all are served.
    for _ in 0..8 {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(test_support::PATIENCE)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with(&format!("peer {UNIX_PEER}")), "{out}");
    }
    // A second server on the same live socket is refused, naming it.
    let err = Server::new()
        .bind_unix(&sock)
        .start(|_: &Request<'_>| Response::text("no"))
        .unwrap_err();
    assert!(err.is_bind());
    assert_eq!(err.to_string(), format!("cannot listen on unix:{}", sock.display()));
    assert!(sock.exists());
    running.shutdown();
    running.join().unwrap();
    assert!(!sock.exists(), "removed at shutdown");
}

#[test]
fn tls_on_a_unix_socket_is_refused() {
    let dir = Scratch::new("peregrine-engine-unix-tls");
    let sock = dir.path("s.sock");
    let first = Server::new()
        .bind_unix(&sock)
        .start(|_: &Request<'_>| Response::text("x"))
        .unwrap();
    let taken = first.listeners().unwrap().remove(0);
    assert_eq!(taken.unix_path(), Some(sock.as_path()));
    let pki = test_support::pki::Pki::new("peregrine-engine-unix-pki");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let err = Server::new()
        .listener_tls(taken, peregrine::TlsConfig::from_pem_files(&cert, &key).unwrap())
        .start(|_: &Request<'_>| Response::text("x"))
        .unwrap_err();
    assert!(err.to_string().contains("cannot start"), "{err}");
    let cause = err.io_error().to_string();
    assert!(cause.contains("a Unix-domain socket speaks plain HTTP only"), "{cause}");
    first.shutdown();
    first.join().unwrap();
}
