//! Response bodies written by another thread over time
//! (`peregrine::body::channel`), over HTTP/1.1 and HTTP/2 (HTTP/3 is in
//! `http3.rs`): chunks arrive as they are sent while the worker serves
//! others, the end and an abort reach the client, a slow client holds the
//! producer back (bounded memory), and a client that leaves makes `send`
//! fail. The test holds the `Sender` itself, so nothing here waits on time.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;

use common::PATIENCE;
use peregrine::body::{self, Sender, TrySendError};
use peregrine::{Request, Response, Running};
use test_support::h2::{
    frame, take_frame, Frame, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, RST_STREAM, SETTINGS,
};

/// A server whose `/stream` answers with a channel of `capacity` bytes and
/// hands its sender to the test; `/fast` answers at once.
fn server(capacity: usize) -> (Running, Receiver<Sender>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = common::start(move |req: &Request<'_>| match req.path() {
        "/stream" => {
            let (body, sender) = body::channel(capacity);
            tx.lock().unwrap().send(sender).unwrap();
            Response::new(200)
                .with_content_type("text/event-stream")
                .with_body(body)
        }
        _ => Response::text("fast"),
    });
    (server, rx)
}

fn sender(rx: &Receiver<Sender>) -> Sender {
    rx.recv_timeout(PATIENCE).expect("the handler ran")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Reads into `buf` until it holds `needle`; what is after it stays.
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) {
    loop {
        if let Some(at) = buf.windows(needle.len()).position(|w| w == needle) {
            buf.drain(..at + needle.len());
            return;
        }
        let mut chunk = [0; 65536];
        match s.read(&mut chunk) {
            Ok(0) => panic!("closed before {:?}", String::from_utf8_lossy(needle)),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("no {:?} within {PATIENCE:?}: {e}", String::from_utf8_lossy(needle)),
        }
    }
}

fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    match s.read_to_end(&mut all) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("not closed within {PATIENCE:?}: {e}"),
    }
    all
}

const GET_STREAM: &[u8] = b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n";
const GET_FAST: &[u8] = b"GET /fast HTTP/1.1\r\nHost: t\r\n\r\n";

#[test]
fn http1_chunks_arrive_as_sent_while_the_worker_serves_others_then_keep_alive_goes_on() {
    let (server, senders) = server(1024);
    let mut a = connect(server.local_addr());
    a.write_all(GET_STREAM).unwrap();
    let tx = sender(&senders);
    let mut buf = Vec::new();
    read_until(&mut a, &mut buf, b"Transfer-Encoding: chunked\r\n");
    tx.send("data: one\n\n").unwrap();
    read_until(&mut a, &mut buf, b"b\r\ndata: one\n\n\r\n");
    // The worker (there is one) answers another connection meanwhile.
    let fast = test_support::http::get(server.local_addr(), "/fast");
    assert_eq!(fast.text(), "fast");
    tx.send("data: two\n\n").unwrap();
    read_until(&mut a, &mut buf, b"b\r\ndata: two\n\n\r\n");
    drop(tx);
    read_until(&mut a, &mut buf, b"0\r\n\r\n");
    assert!(buf.is_empty(), "{buf:?}");
    // The connection is kept and answers the next request.
    a.write_all(GET_FAST).unwrap();
    read_until(&mut a, &mut buf, b"\r\n\r\nfast");
}

#[test]
fn http1_pipelined_requests_wait_behind_a_streamed_response() {
    let (server, senders) = server(1024);
    let mut c = common::Client::connect(server.local_addr());
    c.send(&[GET_STREAM, GET_FAST, GET_STREAM].concat());
    let tx = sender(&senders);
    tx.send("x").unwrap();
    tx.send("yz").unwrap();
    drop(tx);
    let first = c.response();
    assert_eq!((first.status, first.text().as_str()), (200, "xyz"));
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    assert_eq!(c.response().text(), "fast");
    let tx = sender(&senders);
    drop(tx);
    assert_eq!(c.response().text(), "");
}

#[test]
fn http1_0_gets_the_body_delimited_by_the_close() {
    let (server, senders) = server(1024);
    let mut a = connect(server.local_addr());
    a.write_all(b"GET /stream HTTP/1.0\r\n\r\n").unwrap();
    let tx = sender(&senders);
    tx.send("abc").unwrap();
    drop(tx);
    let all = String::from_utf8(read_to_close(&mut a)).unwrap();
    assert!(!all.contains("Transfer-Encoding"), "{all}");
    assert!(all.ends_with("\r\n\r\nabc"), "{all}");
}

#[test]
fn http1_abort_closes_the_connection_before_the_last_chunk() {
    let (server, senders) = server(1024);
    let mut a = connect(server.local_addr());
    a.write_all(GET_STREAM).unwrap();
    let tx = sender(&senders);
    tx.send("abc").unwrap();
    let mut buf = Vec::new();
    read_until(&mut a, &mut buf, b"3\r\nabc\r\n");
    tx.abort();
    let rest = read_to_close(&mut a);
    assert!(buf.is_empty() && rest.is_empty(), "{buf:?} {rest:?}");
}

/// The client leaves while the producer has nothing to send: its next
/// `send` fails (the producer thread ends), and the worker goes on.
#[test]
fn http1_client_gone_makes_send_fail() {
    let (server, senders) = server(1024);
    let mut a = connect(server.local_addr());
    a.write_all(GET_STREAM).unwrap();
    let tx = sender(&senders);
    tx.send("abc").unwrap();
    let mut buf = Vec::new();
    read_until(&mut a, &mut buf, b"3\r\nabc\r\n");
    drop(a);
    test_support::wait_until("send fails once the client is gone", || tx.is_closed());
    assert!(tx.send("more").is_err());
    assert_eq!(test_support::http::get(server.local_addr(), "/fast").text(), "fast");
}

/// A client that does not read: the connection takes chunks only as the
/// socket drains, so `try_send` finds the queue full after the socket
/// buffers and the capacity are full, far below what the producer has;
/// once the client reads, a blocking `send` delivers the rest, all of it.
#[test]
fn http1_slow_reader_holds_the_producer_back() {
    const CHUNK: usize = 16 * 1024;
    const TOTAL: usize = 32 * 1024 * 1024;
    let (server, senders) = server(64 * 1024);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    socket.connect(&server.local_addr().into()).unwrap();
    let mut a: TcpStream = socket.into();
    a.set_read_timeout(Some(PATIENCE)).unwrap();
    a.write_all(GET_STREAM).unwrap();
    let tx = sender(&senders);
    let mut queued = 0;
    loop {
        match tx.try_send(vec![b'x'; CHUNK]) {
            Ok(()) => queued += CHUNK,
            Err(TrySendError::Full(_)) => break,
            Err(TrySendError::Closed(_)) => panic!("closed"),
        }
        assert!(queued < TOTAL, "no back-pressure: {queued} bytes taken");
    }
    // The capacity, the socket buffers (the kernel's send buffer grows to
    // 4 MiB at most by default: net.ipv4.tcp_wmem) and a chunk.
    assert!(queued <= 8 * 1024 * 1024, "{queued} bytes queued");
    let producer = std::thread::spawn(move || {
        let mut sent = queued;
        while sent < TOTAL {
            tx.send(vec![b'x'; CHUNK]).unwrap();
            sent += CHUNK;
        }
    });
    let mut c = common::Client::over(a);
    let resp = c.response();
    producer.join().unwrap();
    assert_eq!(resp.body.len(), TOTAL);
    assert!(resp.body.iter().all(|&b| b == b'x'));
}

// HTTP/2: a minimal client over cleartext with prior knowledge.

struct H2 {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl H2 {
    fn connect(addr: SocketAddr) -> H2 {
        let mut c = H2 {
            stream: connect(addr),
            buf: Vec::new(),
        };
        c.send(&[PREFACE, &frame(SETTINGS, 0, 0, &[])].concat());
        c.send(&frame(SETTINGS, 1, 0, &[]));
        c
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn get(&mut self, id: u32, path: &str) {
        self.send(&frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            id,
            &test_support::h2::get_head(path, "localhost"),
        ));
    }

    /// The next frame on stream `id` (others are skipped).
    fn next_on(&mut self, id: u32) -> Frame {
        loop {
            if let Some(f) = take_frame(&mut self.buf) {
                if f.stream == id {
                    return f;
                }
                continue;
            }
            let mut chunk = [0; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the server closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("no frame within {PATIENCE:?}: {e}"),
            }
        }
    }

    /// The next DATA payload on `id`, and whether it ended the stream.
    fn data(&mut self, id: u32) -> (Vec<u8>, bool) {
        let f = self.next_on(id);
        assert_eq!(f.kind, DATA, "a DATA frame");
        (f.payload, f.flags & END_STREAM != 0)
    }
}

#[test]
fn http2_chunks_arrive_as_sent_while_other_streams_are_answered() {
    let (server, senders) = server(1024);
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/stream");
    let tx = sender(&senders);
    let head = c.next_on(1);
    assert_eq!((head.kind, head.flags & END_STREAM), (HEADERS, 0));
    tx.send("one").unwrap();
    assert_eq!(c.data(1), (b"one".to_vec(), false));
    // Another stream of the same connection is answered meanwhile.
    c.get(3, "/fast");
    assert_eq!(c.next_on(3).kind, HEADERS);
    assert_eq!(c.data(3), (b"fast".to_vec(), true));
    tx.send("two").unwrap();
    assert_eq!(c.data(1), (b"two".to_vec(), false));
    drop(tx);
    assert_eq!(c.data(1), (Vec::new(), true));
}

#[test]
fn http2_abort_resets_the_stream_and_the_connection_goes_on() {
    let (server, senders) = server(1024);
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/stream");
    let tx = sender(&senders);
    assert_eq!(c.next_on(1).kind, HEADERS);
    tx.abort();
    let reset = c.next_on(1);
    assert_eq!(reset.kind, RST_STREAM);
    assert_eq!(reset.payload, 2u32.to_be_bytes(), "INTERNAL_ERROR");
    c.get(3, "/fast");
    assert_eq!(c.next_on(3).kind, HEADERS);
}

#[test]
fn http2_stream_reset_by_the_client_makes_send_fail() {
    let (server, senders) = server(1024);
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/stream");
    let tx = sender(&senders);
    assert_eq!(c.next_on(1).kind, HEADERS);
    c.send(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes())); // CANCEL
    test_support::wait_until("send fails once the stream is reset", || tx.is_closed());
    assert!(tx.send("more").is_err());
    c.get(3, "/fast");
    assert_eq!(c.next_on(3).kind, HEADERS);
}

/// A client that grants no window beyond the initial 65,535 bytes: the
/// producer is held at that plus the channel's capacity and a chunk.
#[test]
fn http2_flow_control_holds_the_producer_back() {
    const CHUNK: usize = 4096;
    const CAPACITY: usize = 16 * 1024;
    const WINDOW: usize = 65_535;
    let (server, senders) = server(CAPACITY);
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/stream");
    let tx = sender(&senders);
    // Fill until the window and the queue are full (the worker takes
    // chunks as it runs, so an early "full" is retried).
    let mut queued = 0;
    test_support::wait_until("the window and the queue are full", || loop {
        match tx.try_send(vec![b'x'; CHUNK]) {
            Ok(()) => queued += CHUNK,
            Err(TrySendError::Full(_)) => return queued >= WINDOW + CAPACITY,
            Err(TrySendError::Closed(_)) => panic!("closed"),
        }
        assert!(
            queued <= WINDOW + CAPACITY + CHUNK,
            "no back-pressure: {queued} bytes taken"
        );
    });
    assert_eq!(c.next_on(1).kind, HEADERS);
    let mut got = 0;
    while got < WINDOW {
        let (payload, end) = c.data(1);
        assert!(!end);
        got += payload.len();
    }
    assert_eq!(got, WINDOW);
}

/// Over TLS: a parked body waits without spinning or timing out, its
/// chunks are encrypted as they come, and the pipelined request behind it
/// is answered after its last chunk.
#[test]
fn tls_streamed_body_then_the_next_request() {
    let pki = test_support::pki::Pki::new("stream");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let (tx, senders) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = peregrine::Server::new()
        .bind_tls(
            "127.0.0.1:0",
            peregrine::TlsConfig::from_pem_files(&cert, &key).unwrap(),
        )
        .workers(1)
        .start(move |req: &Request<'_>| match req.path() {
            "/stream" => {
                let (body, sender) = body::channel(1024);
                tx.lock().unwrap().send(sender).unwrap();
                Response::new(200).with_body(body)
            }
            _ => Response::text("fast"),
        })
        .unwrap();
    let mut config = pki.client_config(&[&rustls::version::TLS13]);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = test_support::pki::connect(server.local_addr(), &std::sync::Arc::new(config), "localhost");
    let mut c = common::Client::over(tls);
    c.send(&[GET_STREAM, GET_FAST].concat());
    let tx = sender(&senders);
    for i in 0..3 {
        tx.send(format!("chunk {i};")).unwrap();
    }
    drop(tx);
    assert_eq!(c.response().text(), "chunk 0;chunk 1;chunk 2;");
    assert_eq!(c.response().text(), "fast");
}
