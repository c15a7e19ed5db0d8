//! Request bodies read as they arrive (`body::streamed`) over HTTP/1.1:
//! uploads far larger than the server's memory use, with Content-Length
//! and chunked, 100-continue, the body limit (413 and close, the reader
//! failing), a client that leaves (the reader gets UnexpectedEof), and
//! keep-alive after. Memory is watched with a counting allocator: the
//! server's peak heap during a 64 MiB upload stays within a few MiB.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender};
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
fn server(body_bytes_max: u64, errors: Sender<ErrorKind>) -> (peregrine::Running, Receiver<()>) {
    let errors = Mutex::new(errors);
    let (called_tx, called) = mpsc::channel();
    let called_tx = Mutex::new(called_tx);
    let app = Router::new()
        .post(
            "/upload",
            body::streamed(move |req: &Request<'_>| -> Reply {
                assert!(req.body().is_empty());
                let _ = called_tx.lock().unwrap().send(());
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
    let server = start_with(
        Limits {
            body_bytes_max,
            ..Limits::default()
        },
        app,
    );
    (server, called)
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
    let (server, _called) = server(1 << 30, tx);
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
    let (server, _called) = server(1 << 20, tx);
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
    let (server, _called) = server(100_000, tx);
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
    let (server, _called) = server(1000, tx);
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
    let (server, _called) = server(1 << 20, tx);
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
    let (server, _called) = server(1 << 20, tx);
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

// HTTP/2: a client that sends DATA as the windows allow.

mod h2c {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};

    pub use test_support::h2::{frame, Frame};
    use test_support::h2::{
        take_frame, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
    };

    pub struct Conn {
        pub stream: TcpStream,
        buf: Vec<u8>,
        pub conn_window: i64,
        pub stream_window: i64,
    }

    impl Conn {
        pub fn connect(addr: SocketAddr) -> Conn {
            let stream = TcpStream::connect(addr).unwrap();
            stream.set_read_timeout(Some(super::PATIENCE)).unwrap();
            stream.set_nodelay(true).unwrap();
            let mut c = Conn {
                stream,
                buf: Vec::new(),
                conn_window: 65_535,
                stream_window: 65_535,
            };
            c.send(&[PREFACE, &frame(SETTINGS, 0, 0, &[]), &frame(SETTINGS, 1, 0, &[])].concat());
            c
        }

        pub fn send(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).unwrap();
        }

        /// A POST head on stream 1, its body to follow.
        pub fn post(&mut self, path: &str) {
            self.post_with(path, &[]);
        }

        /// A POST head on stream 1 with `extra` fields (literals with new
        /// names), its body to follow.
        pub fn post_with(&mut self, path: &str, extra: &[(&str, &str)]) {
            let mut head = Vec::new();
            for (index, value) in [(2u8, "POST"), (6, "http"), (4, path), (1, "localhost")] {
                head.push(index);
                head.push(value.len() as u8);
                head.extend_from_slice(value.as_bytes());
            }
            for (name, value) in extra {
                head.push(0);
                head.push(name.len() as u8);
                head.extend_from_slice(name.as_bytes());
                head.push(value.len() as u8);
                head.extend_from_slice(value.as_bytes());
            }
            self.send(&frame(HEADERS, END_HEADERS, 1, &head));
        }

        pub fn next(&mut self) -> Option<Frame> {
            loop {
                if let Some(f) = take_frame(&mut self.buf) {
                    if f.kind == WINDOW_UPDATE {
                        let inc = i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
                        if f.stream == 0 {
                            self.conn_window += inc;
                        } else {
                            self.stream_window += inc;
                        }
                    }
                    return Some(f);
                }
                let mut chunk = [0; 65536];
                match self.stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        }

        /// Sends `body` on stream 1 as the windows allow, then END_STREAM;
        /// `Err` with the frame that ended it first (a response HEADERS,
        /// RST_STREAM), or `None` if the connection closed.
        pub fn upload(&mut self, mut body: impl FnMut(&mut Vec<u8>, usize) -> bool) -> Result<(), Option<Frame>> {
            let mut chunk = Vec::new();
            loop {
                let room = self.conn_window.min(self.stream_window).min(16_384);
                if room <= 0 {
                    match self.next() {
                        Some(f) if (f.kind == RST_STREAM || f.kind == HEADERS) && f.stream == 1 => return Err(Some(f)),
                        Some(_) => continue,
                        None => return Err(None),
                    }
                }
                chunk.clear();
                let more = body(&mut chunk, room as usize);
                let flags = if more { 0 } else { END_STREAM };
                self.send(&frame(DATA, flags, 1, &chunk));
                self.conn_window -= chunk.len() as i64;
                self.stream_window -= chunk.len() as i64;
                if !more {
                    return Ok(());
                }
            }
        }

        /// The response on stream 1: its body (the status is 200).
        pub fn response(&mut self) -> Vec<u8> {
            let mut body = Vec::new();
            while let Some(f) = self.next() {
                // A WINDOW_UPDATE sent before our END_STREAM arrived is
                // legal (RFC 9113 §6.9): skipped with the other streams'.
                if f.stream != 1 || f.kind == WINDOW_UPDATE {
                    continue;
                }
                assert!(f.kind == HEADERS || f.kind == DATA, "frame {} on the stream", f.kind);
                if f.kind == HEADERS {
                    assert_eq!(f.payload[0], 0x88, "status 200");
                }
                if f.kind == DATA {
                    body.extend_from_slice(&f.payload);
                }
                if f.flags & END_STREAM != 0 {
                    return body;
                }
            }
            panic!("the connection closed before the response");
        }
    }
}

#[test]
fn http2_uploads_are_read_as_they_arrive_with_the_window_following_the_reader() {
    let _serial = serial();
    let (tx, _errors) = mpsc::channel();
    let (server, _called) = server(1 << 30, tx);
    leave_this_thread_out();
    let n = 32 * MIB;
    // Warm the worker first.
    let mut c = h2c::Conn::connect(server.local_addr());
    c.post("/upload");
    assert!(c
        .upload(|out, _| {
            out.extend_from_slice(b"abc");
            false
        })
        .is_ok());
    assert_eq!(c.response(), expected_of(b"abc").as_bytes());
    let before = live_bytes();
    reset_peak();
    let mut c = h2c::Conn::connect(server.local_addr());
    c.post("/upload");
    let (mut sent, mut i) = (0, 0);
    let mut current = block(0);
    let mut at = 0;
    assert!(c
        .upload(|out, room| {
            while out.len() < room && sent < n {
                if at == current.len() {
                    i += 1;
                    current = block(i);
                    at = 0;
                }
                let k = (room - out.len()).min(current.len() - at).min(n - sent);
                out.extend_from_slice(&current[at..at + k]);
                at += k;
                sent += k;
            }
            sent < n
        })
        .is_ok());
    assert_eq!(String::from_utf8(c.response()).unwrap(), expected(n));
    let peak = peak_bytes() - before;
    assert!(peak < 4 * MIB as isize, "peak {peak} bytes during a 32 MiB upload");
}

/// RFC 9113 §8.1 with RFC 9110 §10.1.1: a client that waits for 100
/// Continue before its body gets the interim HEADERS once the handler
/// takes the reader (streamed) or the body is to be collected (buffered).
#[test]
fn http2_expect_100_continue_gets_an_interim_head_before_the_body() {
    let _serial = serial();
    let (tx, _errors) = mpsc::channel();
    let (server, _called) = server(1 << 20, tx);
    for (path, answer) in [("/upload", expected_of(b"hello")), ("/small", "5 buffered".to_string())] {
        let mut c = h2c::Conn::connect(server.local_addr());
        c.post_with(path, &[("expect", "100-continue"), ("content-length", "5")]);
        let interim = loop {
            match c.next() {
                Some(f) if f.stream == 1 => break f,
                Some(_) => {}
                None => panic!("{path}: the connection closed before the interim answer"),
            }
        };
        assert_eq!(interim.kind, test_support::h2::HEADERS, "{path}");
        assert_eq!(&interim.payload[..5], b"\x08\x03100", "{path}: status 100");
        assert_eq!(
            interim.flags & test_support::h2::END_STREAM,
            0,
            "{path}: an interim head leaves the stream open"
        );
        c.send(&h2c::frame(
            test_support::h2::DATA,
            test_support::h2::END_STREAM,
            1,
            b"hello",
        ));
        assert_eq!(c.response(), answer.as_bytes(), "{path}");
    }
}

#[test]
fn http2_upload_over_the_limit_is_413_and_fails_the_reader() {
    let _serial = serial();
    let (tx, errors) = mpsc::channel();
    let (server, _called) = server(100_000, tx);
    let mut c = h2c::Conn::connect(server.local_addr());
    c.post("/upload");
    let mut sent = 0;
    // The server answers 413 (then resets the stream) once the body is
    // past the limit, and gives no more window meanwhile.
    let ended = c.upload(|out, room| {
        out.resize(room, b'x');
        sent += room;
        sent < 1_000_000
    });
    assert_eq!(errors.recv_timeout(PATIENCE).unwrap(), ErrorKind::InvalidData);
    let head = match ended {
        Err(Some(f)) if f.kind == test_support::h2::HEADERS => f,
        other => panic!(
            "the upload was not ended by the answer: {:?}",
            other.map_err(|f| f.map(|f| f.kind))
        ),
    };
    assert_eq!(&head.payload[..5], b"\x08\x03413", "status 413");
}

#[test]
fn http2_upload_reset_by_the_client_fails_the_reader() {
    let _serial = serial();
    let (tx, errors) = mpsc::channel();
    let (server, called) = server(1 << 20, tx);
    let mut c = h2c::Conn::connect(server.local_addr());
    c.post("/upload");
    c.send(&h2c::frame(test_support::h2::DATA, 0, 1, b"some"));
    called
        .recv_timeout(PATIENCE)
        .expect("the handler is called at the head");
    c.send(&h2c::frame(test_support::h2::RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    assert_eq!(errors.recv_timeout(PATIENCE).unwrap(), ErrorKind::UnexpectedEof);
}

/// Issue 33: the README's `body::streamed` example answered 413 past 1 MiB
/// without saying so. Its code shows the limit and passes it to the server.
#[test]
fn readme_streamed_example_shows_the_body_limit() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let example = readme
        .split("```")
        .find(|block| block.starts_with("rust") && block.contains("body::streamed("))
        .expect("a rust block with body::streamed in README.md");
    assert!(example.contains("body_bytes_max:"), "{example}");
    assert!(example.contains(".limits(limits)"), "{example}");
}
