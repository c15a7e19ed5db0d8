//! Request bodies read as they arrive (`body::streamed`) over HTTP/1.1:
//! uploads far larger than the server's memory use, with Content-Length
//! and chunked, 100-continue, the body limit (413 and close, the reader
//! failing), a client that leaves (the reader gets UnexpectedEof), and
//! keep-alive after. Memory is watched with a counting allocator: the
//! server's peak heap during a 64 MiB upload stays within a few MiB.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::sync::mpsc::{self, Sender};
use std::sync::Mutex;

use common::{start_with, Client, PATIENCE};
use peregrine::{body, Limits, Reply, Request, Response, Router};
use test_support::alloc::{leave_this_thread_out, live_bytes, peak_bytes, reset_peak, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

const MIB: usize = 1024 * 1024;

/// The tests run one at a time: the peak heap counts every thread.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// FNV-1a 64: the reader's work, and the check that every byte came in
/// order.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash = (*hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// The body the clients send: 64 KiB blocks of a pattern, `n` bytes.
fn block(i: usize) -> Vec<u8> {
    (0..64 * 1024).map(|j| (i * 31 + j * 7) as u8).collect()
}

fn expected(n: usize) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325;
    let mut left = n;
    let mut i = 0;
    while left > 0 {
        let b = block(i);
        let k = left.min(b.len());
        fnv(&mut h, &b[..k]);
        left -= k;
        i += 1;
    }
    format!("{n} {h:016x}")
}

/// `/upload` reads the body on a thread and answers its length and hash,
/// or the reader's error kind (also sent to `errors`); `/small` buffers.
fn server(body_bytes_max: u64, errors: Sender<ErrorKind>) -> peregrine::Running {
    let errors = Mutex::new(errors);
    let app = Router::new()
        .post(
            "/upload",
            body::streamed(move |req: &Request<'_>| -> Reply {
                assert!(req.body().is_empty());
                let mut reader = req.body_reader().expect("a reader");
                assert!(req.body_reader().is_none(), "one reader per request");
                let responder = req.defer();
                let errors = errors.lock().unwrap().clone();
                std::thread::spawn(move || {
                    let mut h = 0xcbf2_9ce4_8422_2325;
                    let mut n = 0;
                    let mut buf = vec![0; 64 * 1024];
                    loop {
                        match reader.read(&mut buf) {
                            Ok(0) => break responder.send(Response::text(format!("{n} {h:016x}"))),
                            Ok(got) => {
                                fnv(&mut h, &buf[..got]);
                                n += got;
                            }
                            Err(e) => {
                                let _ = errors.send(e.kind());
                                break responder.send(Response::text(format!("{:?}", e.kind())));
                            }
                        }
                    }
                });
                Reply::Later
            }),
        )
        .post("/small", |req: &Request<'_>| {
            Response::text(format!("{} buffered", req.body().len()))
        });
    start_with(
        Limits {
            body_bytes_max,
            ..Limits::default()
        },
        app,
    )
}

/// Sends `n` bytes of the pattern, chunked or not.
fn send_body(c: &mut Client, n: usize, chunked: bool) {
    let mut left = n;
    let mut i = 0;
    while left > 0 {
        let b = block(i);
        let k = left.min(b.len());
        if chunked {
            c.send(format!("{k:x}\r\n").as_bytes());
            c.send(&b[..k]);
            c.send(b"\r\n");
        } else {
            c.send(&b[..k]);
        }
        left -= k;
        i += 1;
    }
    if chunked {
        c.send(b"0\r\n\r\n");
    }
}

#[test]
fn uploads_larger_than_memory_are_read_as_they_arrive() {
    let _serial = serial();
    let (tx, _errors) = mpsc::channel();
    let server = server(1 << 30, tx);
    leave_this_thread_out();
    let mut c = Client::connect(server.local_addr());
    // Warm: the worker's buffers and the first reader thread.
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(c.response().text(), expected_of(b"abc"));
    let n = 64 * MIB;
    for chunked in [false, true] {
        let before = live_bytes();
        reset_peak();
        let head = if chunked {
            "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned()
        } else {
            format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n")
        };
        c.send(head.as_bytes());
        send_body(&mut c, n, chunked);
        assert_eq!(c.response().text(), expected(n), "chunked: {chunked}");
        // The reader's buffer (256 KiB), a read buffer, the reader
        // thread's 64 KiB and its stack's bookkeeping: far below 64 MiB.
        let peak = peak_bytes() - before;
        assert!(
            peak < 4 * MIB as isize,
            "peak {peak} bytes during a 64 MiB upload (chunked: {chunked})"
        );
    }
    // Keep-alive goes on, and ordinary handlers still buffer.
    c.send(b"POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(c.response().text(), "5 buffered");
}

fn expected_of(bytes: &[u8]) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, bytes);
    format!("{} {h:016x}", bytes.len())
}

#[test]
fn expect_100_continue_gets_its_interim_answer_before_the_body() {
    let _serial = serial();
    let (tx, _errors) = mpsc::channel();
    let server = server(1 << 20, tx);
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.response();
    assert_eq!(interim.status, 100);
    c.send(b"hello");
    assert_eq!(c.response().text(), expected_of(b"hello"));
}

#[test]
fn a_chunked_body_over_the_limit_is_413_and_fails_the_reader() {
    let _serial = serial();
    let (tx, errors) = mpsc::channel();
    let server = server(100_000, tx);
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut stream = c.stream.try_clone().unwrap();
    // The server may close before all of it is sent: write on a thread.
    let writer = std::thread::spawn(move || {
        for _ in 0..40 {
            let chunk = [b'x'; 4096];
            if stream.write_all(b"1000\r\n").is_err()
                || stream.write_all(&chunk).is_err()
                || stream.write_all(b"\r\n").is_err()
            {
                break;
            }
        }
    });
    assert_eq!(errors.recv_timeout(PATIENCE).unwrap(), ErrorKind::InvalidData);
    let all = String::from_utf8_lossy(&c.read_to_close()).into_owned();
    assert!(all.starts_with("HTTP/1.1 413 "), "{all}");
    assert!(all.contains("Connection: close"), "{all}");
    writer.join().unwrap();
}

#[test]
fn a_content_length_over_the_limit_is_413_before_the_handler() {
    let _serial = serial();
    let (tx, errors) = mpsc::channel();
    let server = server(1000, tx);
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n");
    let all = String::from_utf8_lossy(&c.read_to_close()).into_owned();
    assert!(all.starts_with("HTTP/1.1 413 "), "{all}");
    assert!(errors.try_recv().is_err(), "no reader was made");
}

#[test]
fn a_client_gone_mid_body_fails_the_reader_with_unexpected_eof() {
    let _serial = serial();
    let (tx, errors) = mpsc::channel();
    let server = server(1 << 20, tx);
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    c.send(&[b'x'; 1000]);
    drop(c);
    assert_eq!(errors.recv_timeout(PATIENCE).unwrap(), ErrorKind::UnexpectedEof);
    // The worker goes on.
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response().text(), "2 buffered");
}

#[test]
fn pipelined_requests_after_a_streamed_upload_are_answered() {
    let _serial = serial();
    let (tx, _errors) = mpsc::channel();
    let server = server(1 << 20, tx);
    let mut c = Client::connect(server.local_addr());
    c.send(
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi\
POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nyo",
    );
    assert_eq!(c.response().text(), expected_of(b"abc"));
    assert_eq!(c.response().text(), "2 buffered");
    assert_eq!(c.response().text(), expected_of(b"yo"));
}
