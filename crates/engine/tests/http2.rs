//! HTTP/2 end to end, over cleartext with prior knowledge: a scripted
//! client writes frames byte by byte as an attacker would, and reads what
//! the server answers. Each defence of RFC 9113's security section (and of
//! the CVEs since) is performed here against a running server, followed by
//! a request on another connection that must still be answered.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use common::PATIENCE;
use peregrine::{Limits, Reply, Request, Responder, Response, Server};
use test_support::h2::{
    frame, take_frame, Frame, ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, GOAWAY, HEADERS,
    NO_ERROR, PING, PREFACE, REFUSED_STREAM, RST_STREAM, SETTINGS, WINDOW_UPDATE,
};

/// A request head as HPACK literals without indexing, names from the
/// static table (no Huffman: the server must take both).
fn head(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    let mut indexed_name = |index: u8, value: &str| {
        b.push(index);
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    };
    indexed_name(2, method);
    indexed_name(6, "http");
    indexed_name(4, path);
    indexed_name(1, "localhost");
    for (name, value) in extra {
        b.push(0);
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    }
    b
}

struct H2 {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl H2 {
    /// Connects, sends the preface and SETTINGS (`settings` pairs), and
    /// reads the server's SETTINGS.
    fn connect_with(addr: SocketAddr, settings: &[(u16, u32)]) -> H2 {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut c = H2 {
            stream,
            buf: Vec::new(),
        };
        let mut payload = Vec::new();
        for (id, value) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &payload));
        c.send(&hello);
        let first = c.next().expect("the server's SETTINGS");
        assert_eq!(first.kind, SETTINGS, "{first:?}");
        c.send(&frame(SETTINGS, 1, 0, &[]));
        c
    }

    fn connect(addr: SocketAddr) -> H2 {
        H2::connect_with(addr, &[])
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends bytes, ignoring a reset (the server may close mid-flood).
    fn send_lossy(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    fn get(&mut self, id: u32, path: &str) {
        self.send(&frame(HEADERS, END_STREAM | END_HEADERS, id, &head("GET", path, &[])));
    }

    /// The next frame, or `None` once the server has closed.
    fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = take_frame(&mut self.buf) {
                return Some(f);
            }
            let mut chunk = [0; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("no frame within {PATIENCE:?}: {e}"),
            }
        }
    }

    /// Reads until a frame matches; panics if the connection ends first.
    fn until(&mut self, what: &str, pred: impl Fn(&Frame) -> bool) -> Frame {
        loop {
            match self.next() {
                Some(f) if pred(&f) => return f,
                Some(_) => {}
                None => panic!("connection closed before {what}"),
            }
        }
    }

    /// A whole response on `id`: its status and body.
    fn response(&mut self, id: u32) -> (u16, Vec<u8>) {
        let h = self.until("a response HEADERS", |f| f.kind == HEADERS && f.stream == id);
        let status = h.status();
        let mut body = Vec::new();
        if h.flags & END_STREAM == 0 {
            loop {
                let f = self.until("DATA", |f| f.kind == DATA && f.stream == id);
                body.extend_from_slice(&f.payload);
                if !f.payload.is_empty() {
                    // Give the window back as a browser does.
                    let inc = (f.payload.len() as u32).to_be_bytes();
                    self.send(&frame(WINDOW_UPDATE, 0, 0, &inc));
                    self.send(&frame(WINDOW_UPDATE, 0, id, &inc));
                }
                if f.flags & END_STREAM != 0 {
                    break;
                }
            }
        }
        (status, body)
    }

    /// Reads to the end: the GOAWAY seen on the way (if any), and whether
    /// the server closed the connection.
    fn goaway(&mut self) -> Option<Frame> {
        let mut seen = None;
        while let Some(f) = self.next() {
            if f.kind == GOAWAY {
                seen = Some(f);
            }
        }
        seen
    }
}

fn hello(req: &Request<'_>) -> Reply {
    match req.path() {
        "/big" => Response::bytes("application/octet-stream", vec![b'x'; 200_000]).into(),
        "/echo" => Response::text(format!("{} bytes\n", req.body().len())).into(),
        "/version" => Response::text(req.version().as_str()).into(),
        "/may-carry-range" => Response::text(req.may_carry(peregrine::FieldNames::RANGE).to_string()).into(),
        _ => Response::text("hello\n").into(),
    }
}

fn start(limits: Limits) -> peregrine::Running {
    common::start_with(limits, hello)
}

/// Another connection of the same worker is still answered.
fn still_served(addr: SocketAddr) {
    let mut c = H2::connect(addr);
    c.get(1, "/");
    assert_eq!(c.response(1), (200, b"hello\n".to_vec()));
}

#[test]
fn get_over_h2c_with_prior_knowledge() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/version");
    assert_eq!(c.response(1), (200, b"HTTP/2.0".to_vec()));
    c.get(3, "/big");
    let (status, body) = c.response(3);
    assert_eq!((status, body.len()), (200, 200_000));
    // HTTP/1.1 on another connection of the same listener still works.
    let raw = common::exchange(
        server.local_addr(),
        b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.ends_with(b"HTTP/1.1"), "{}", String::from_utf8_lossy(&raw));
}

/// HPACK notes no field names for handlers: a request over HTTP/2 may
/// carry every name, so a file handler always reads its fields (a
/// `Range` here is seen, with or without the codec's note).
#[test]
fn an_h2_request_may_carry_every_field_a_handler_looks_for() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    for (id, extra) in [(1, &[][..]), (3, &[("range", "bytes=0-1")][..])] {
        let block = head("GET", "/may-carry-range", extra);
        c.send(&frame(HEADERS, END_STREAM | END_HEADERS, id, &block));
        assert_eq!(c.response(id), (200, b"true".to_vec()), "{extra:?}");
    }
}

/// A method the server does not recognise is a 501 before any handler
/// runs, as over HTTP/1.1 (RFC 9110 §9.1): the handler here would answer
/// 200 to anything. Lowercase `get` is another method (methods are
/// case-sensitive).
#[test]
fn unrecognised_methods_get_501_without_reaching_the_handler() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    for (id, method) in [(1, "FOO"), (3, "get"), (5, "ANNOUNCE")] {
        c.send(&frame(HEADERS, END_STREAM | END_HEADERS, id, &head(method, "/", &[])));
        let (status, _) = c.response(id);
        assert_eq!(status, 501, "{method}");
    }
    // Registered methods still reach it.
    c.send(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        7,
        &head("PROPFIND", "/", &[]),
    ));
    assert_eq!(c.response(7), (200, b"hello\n".to_vec()));
}

/// A plain CONNECT (no `:protocol`) is answered 501 at its head, as over
/// HTTP/1.1 and HTTP/3, and its stream then reset with NO_ERROR (RFC 9113
/// §8.1): its "body", a tunnel's bytes, may never end, and waiting for it
/// held the stream unanswered until the body's timeout ended the whole
/// connection. That timeout is short here, so a wrong answer shows at
/// once.
#[test]
fn a_plain_connect_is_answered_501_at_its_head() {
    let limits = Limits {
        body_timeout: Duration::from_millis(300),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    // :method CONNECT, :authority example.com:443, and nothing else
    // (RFC 9113 §8.5).
    let mut block = vec![2, 7];
    block.extend_from_slice(b"CONNECT");
    block.extend_from_slice(&[1, 15]);
    block.extend_from_slice(b"example.com:443");
    c.send(&frame(HEADERS, END_HEADERS, 1, &block));
    let f = c.until("an answer", |f| matches!(f.kind, HEADERS | RST_STREAM | GOAWAY));
    assert_eq!((f.kind, f.stream), (HEADERS, 1), "{f:?}");
    assert_eq!(f.status(), 501);
    let f = c.until("the reset", |f| matches!(f.kind, RST_STREAM | GOAWAY));
    assert_eq!((f.kind, f.stream, f.code()), (RST_STREAM, 1, NO_ERROR), "{f:?}");
    // Bytes the client sent meanwhile are ignored; the connection goes on.
    c.send(&frame(DATA, 0, 1, b"tunnel bytes"));
    c.get(3, "/");
    assert_eq!(c.response(3), (200, b"hello\n".to_vec()));
}

#[test]
fn request_body_respects_flow_control() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    let body = vec![7u8; 300_000];
    let len = body.len().to_string();
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        1,
        &head("POST", "/echo", &[("content-length", &len)]),
    ));
    // The stream's window starts at 65,535: send within it and wait for
    // WINDOW_UPDATE before going on, as a client must.
    let mut window: i64 = 65_535;
    let mut sent = 0;
    while sent < body.len() {
        if window == 0 {
            let f = c.until("WINDOW_UPDATE for the stream", |f| {
                f.kind == WINDOW_UPDATE && f.stream == 1
            });
            window += i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
            continue;
        }
        let n = (window as usize).min(16_384).min(body.len() - sent);
        let last = sent + n == body.len();
        c.send(&frame(
            DATA,
            if last { END_STREAM } else { 0 },
            1,
            &body[sent..sent + n],
        ));
        sent += n;
        window -= n as i64;
    }
    assert_eq!(c.response(1), (200, b"300000 bytes\n".to_vec()));
}

#[test]
fn body_over_the_limit_is_413_and_connection_survives() {
    let limits = Limits {
        body_bytes_max: 1000,
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    c.send(&frame(HEADERS, END_HEADERS, 1, &head("POST", "/echo", &[])));
    c.send(&frame(DATA, END_STREAM, 1, &[0; 2000]));
    assert_eq!(c.response(1).0, 413);
    c.get(3, "/");
    assert_eq!(c.response(3), (200, b"hello\n".to_vec()));
}

/// `expect: 100-continue` (RFC 9110 §10.1.1): an interim 100 while the
/// server waits for the body; a length over the limit gets the final 413
/// instead, and the connection goes on.
#[test]
fn expect_100_continue_gets_100_or_the_final_answer() {
    let limits = Limits {
        body_bytes_max: 1000,
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    let expect = ("expect", "100-continue");
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        1,
        &head("POST", "/echo", &[expect, ("content-length", "4")]),
    ));
    let interim = c.until("the interim HEADERS", |f| f.stream == 1);
    assert_eq!((interim.kind, interim.status()), (HEADERS, 100));
    assert_eq!(interim.flags & END_STREAM, 0);
    c.send(&frame(DATA, END_STREAM, 1, b"abcd"));
    assert_eq!(c.response(1), (200, b"4 bytes\n".to_vec()));
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        3,
        &head("POST", "/echo", &[expect, ("content-length", "2000")]),
    ));
    let first = c.until("the answer", |f| f.stream == 3);
    assert_eq!((first.kind, first.status()), (HEADERS, 413));
    let reset = c.until("RST_STREAM", |f| f.stream == 3 && f.kind == RST_STREAM);
    assert_eq!((reset.kind, reset.code()), (RST_STREAM, NO_ERROR));
    c.get(5, "/");
    assert_eq!(c.response(5), (200, b"hello\n".to_vec()));
}

/// A deferred answer holds only its own stream: the connection's other
/// streams are answered meanwhile.
#[test]
fn deferred_stream_does_not_hold_the_others() {
    let (tx, rx) = mpsc::channel::<Responder>();
    let tx = Mutex::new(tx);
    let server = common::start(move |req: &Request<'_>| -> Reply {
        if req.path() == "/slow" {
            let _ = tx.lock().unwrap().send(req.defer());
            return Reply::Later;
        }
        Response::text("fast").into()
    });
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/slow");
    c.get(3, "/fast");
    assert_eq!(c.response(3), (200, b"fast".to_vec()));
    let responder = rx.recv_timeout(PATIENCE).unwrap();
    responder.send(Response::text("slow"));
    assert_eq!(c.response(1), (200, b"slow".to_vec()));
}

#[test]
fn graceful_shutdown_sends_goaway_and_finishes_streams_in_flight() {
    let (tx, rx) = mpsc::channel::<Responder>();
    let tx = Mutex::new(tx);
    let server = common::start(move |req: &Request<'_>| -> Reply {
        let _ = tx.lock().unwrap().send(req.defer());
        Reply::Later
    });
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/");
    let responder = rx.recv_timeout(PATIENCE).unwrap();
    let handle = server.shutdown_handle();
    handle.shutdown();
    // RFC 9113 §6.8: a first GOAWAY naming 2^31-1 and a PING; the final
    // one, naming the last stream answered, once the PING's ACK is back.
    let g = c.until("GOAWAY", |f| f.kind == GOAWAY);
    assert_eq!(g.code(), NO_ERROR);
    let last = |g: &Frame| u32::from_be_bytes(g.payload[..4].try_into().unwrap());
    assert_eq!(last(&g), (1 << 31) - 1, "no new streams, please");
    let ping = c.until("PING", |f| f.kind == PING && f.flags & ACK == 0);
    c.get(3, "/");
    c.send(&frame(PING, ACK, 0, &ping.payload));
    let g = c.until("the final GOAWAY", |f| f.kind == GOAWAY);
    assert_eq!(g.code(), NO_ERROR);
    assert_eq!(last(&g), 3, "last stream id: the request sent before the ACK");
    let responder3 = rx.recv_timeout(PATIENCE).unwrap();
    responder3.send(Response::text("late too"));
    assert_eq!(c.response(3), (200, b"late too".to_vec()));
    responder.send(Response::text("late"));
    assert_eq!(c.response(1), (200, b"late".to_vec()));
    assert!(c.next().is_none(), "closed once the last stream is done");
    server.join().unwrap();
}

#[test]
fn rapid_reset_is_answered_with_enhance_your_calm() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    let mut burst = Vec::new();
    for i in 0..5000u32 {
        let id = 1 + 2 * i;
        burst.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &head("GET", "/", &[])));
        burst.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    c.send_lossy(&burst);
    let g = c.goaway().expect("GOAWAY");
    assert_eq!(g.code(), ENHANCE_YOUR_CALM);
    still_served(server.local_addr());
}

#[test]
fn continuation_flood_is_cut_off() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    c.send(&frame(HEADERS, 0, 1, &head("GET", "/", &[])));
    // Endless CONTINUATION without END_HEADERS (the 2024 CVE class): the
    // block is bounded by head_bytes_max (32 KiB).
    let filler = vec![0x40; 16_000];
    for _ in 0..100 {
        if !c.send_lossy(&frame(CONTINUATION, 0, 1, &filler)) {
            break;
        }
    }
    let g = c.goaway().expect("GOAWAY");
    assert_eq!(g.code(), ENHANCE_YOUR_CALM);
    still_served(server.local_addr());
}

#[test]
fn hpack_bomb_gets_431_and_the_connection_survives() {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    // One 4,000-byte field added to the dynamic table, then referred to
    // 200 times with one byte each: 800 KB decoded from 4 KB sent.
    let mut block = head("GET", "/", &[]);
    block.push(0x40); // literal with incremental indexing, new name
    block.push(1);
    block.push(b'x');
    block.extend_from_slice(&[0x7f, 0x81, 0x1e]); // length 4000 (127 + 3873)
    block.extend(std::iter::repeat_n(b'a', 4000));
    block.extend(std::iter::repeat_n(0xbe, 200)); // indexed: dynamic entry 62
    c.send(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
    assert_eq!(c.response(1).0, 431);
    c.get(3, "/");
    assert_eq!(c.response(3), (200, b"hello\n".to_vec()));
}

/// Control frames that cost the server work and ask nothing of it.
fn flood(control: impl Fn(u32) -> Vec<u8>) {
    let server = start(Limits::default());
    let mut c = H2::connect(server.local_addr());
    let mut burst = Vec::new();
    for i in 0..20_000 {
        burst.extend(control(i));
    }
    c.send_lossy(&burst);
    let g = c.goaway().expect("GOAWAY");
    assert_eq!(g.code(), ENHANCE_YOUR_CALM);
    still_served(server.local_addr());
}

#[test]
fn settings_flood() {
    flood(|_| frame(SETTINGS, 0, 0, &[]));
}

#[test]
fn ping_flood() {
    flood(|i| frame(PING, 0, 0, &u64::from(i).to_be_bytes()));
}

#[test]
fn window_update_flood() {
    flood(|_| frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()));
}

#[test]
fn empty_data_flood() {
    flood(|i| {
        if i == 0 {
            frame(HEADERS, END_HEADERS, 1, &head("POST", "/echo", &[]))
        } else {
            frame(DATA, 0, 1, &[])
        }
    });
}

#[test]
fn streams_beyond_the_limit_are_refused() {
    let (tx, rx) = mpsc::channel::<Responder>();
    let tx = Mutex::new(tx);
    let limits = Limits {
        h2_streams_max: 2,
        ..Limits::default()
    };
    let server = common::start_with(limits, move |req: &Request<'_>| -> Reply {
        let _ = tx.lock().unwrap().send(req.defer());
        Reply::Later
    });
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/");
    c.get(3, "/");
    c.get(5, "/");
    let r = c.until("RST_STREAM", |f| f.kind == RST_STREAM);
    assert_eq!((r.stream, r.code()), (5, REFUSED_STREAM));
    for _ in 0..2 {
        rx.recv_timeout(PATIENCE).unwrap().send(Response::text("ok"));
    }
    assert_eq!(c.response(1).0, 200);
    assert_eq!(c.response(3).0, 200);
}

/// A client that opens no window holds a response: the send timeout ends
/// the connection, and memory stays bounded meanwhile.
#[test]
fn zero_window_reader_is_dropped_after_the_send_timeout() {
    let limits = Limits {
        send_timeout: Duration::from_millis(500),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no DATA may be sent at all.
    let mut c = H2::connect_with(server.local_addr(), &[(0x4, 0)]);
    c.get(1, "/big");
    let h = c.until("HEADERS", |f| f.kind == HEADERS);
    assert_eq!(h.stream, 1);
    // A stream abandoned: not NO_ERROR, which says every stream up to
    // the last was seen through.
    let g = c.goaway().expect("GOAWAY before close");
    assert_eq!(g.code(), ENHANCE_YOUR_CALM);
    still_served(server.local_addr());
}

/// A request whose body stops arriving is timed out even while the client
/// keeps the connection busy with PINGs (which cost it nothing but its
/// control-frame budget, far from spent here): its stream gets 408, and
/// the connection goes on (one slow stream once ended them all, healthy
/// downloads included, with GOAWAY(NO_ERROR)).
#[test]
fn a_stalled_body_gets_408_though_pings_keep_coming_and_the_connection_goes_on() {
    let limits = Limits {
        body_timeout: Duration::from_millis(500),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        1,
        &head("POST", "/echo", &[("content-length", "10")]),
    ));
    c.send(&frame(DATA, 0, 1, b"12345"));
    c.stream.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    // A PING every 100 ms for up to PATIENCE: 100 pings at most.
    let mut answer = None;
    for i in 0..PATIENCE.as_millis() / 100 {
        std::thread::sleep(Duration::from_millis(100));
        if !c.send_lossy(&frame(PING, 0, 0, &(i as u64).to_be_bytes())) {
            break;
        }
        let mut chunk = [0; 4096];
        match c.stream.read(&mut chunk) {
            Ok(0) => panic!("closed without an answer after {i} pings"),
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e} after {i} pings"),
        }
        while let Some(f) = take_frame(&mut c.buf) {
            assert_ne!(f.kind, GOAWAY, "{f:?}");
            if f.kind == HEADERS && f.stream == 1 {
                answer = Some(f.status());
            }
        }
        if answer.is_some() {
            break;
        }
    }
    assert_eq!(answer, Some(408), "no 408 while the body stalled and PINGs kept coming");
    c.stream.set_read_timeout(Some(PATIENCE)).unwrap();
    c.get(3, "/big");
    let (status, body) = c.response(3);
    assert_eq!((status, body.len()), (200, 200_000));
}

/// A stream parked on its producer (`body::channel`, nothing queued) is
/// not idle: neither the idle nor the send timeout ends the connection
/// while the producer lives, PINGs are answered meanwhile, and the body
/// goes on when the producer writes again. Once the stream is done, the
/// idle timeout applies again.
#[test]
fn a_stream_parked_on_its_producer_outlives_the_timeouts_and_pings_are_answered() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(200),
        send_timeout: Duration::from_millis(200),
        body_timeout: Duration::from_millis(200),
        sweep_interval: Duration::from_millis(20),
        ..Limits::default()
    };
    let (senders_tx, senders) = mpsc::channel();
    let senders_tx = Mutex::new(senders_tx);
    let server = common::start_with(limits, move |_: &Request<'_>| {
        let (body, tx) = peregrine::body::channel(1024);
        tx.send("first\n").unwrap();
        senders_tx.lock().unwrap().send(tx).unwrap();
        Response::new(200).with_body(body)
    });
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/events");
    let tx = senders.recv_timeout(PATIENCE).expect("the handler ran");
    let h = c.until("HEADERS", |f| f.kind == HEADERS && f.stream == 1);
    assert_eq!((h.status(), h.flags & END_STREAM), (200, 0));
    let d = c.until("the first chunk", |f| f.kind == DATA && f.stream == 1);
    assert_eq!(d.payload, b"first\n");
    // Parked and silent for three times the timeouts (a PING restarts
    // the idle timeout, so the first comes after that wait), then PINGs:
    // each answered, and no GOAWAY (checked by kind: `until` would pass
    // over it).
    std::thread::sleep(Duration::from_millis(600));
    for i in 0..3u64 {
        c.send(&frame(PING, 0, 0, &i.to_be_bytes()));
        let ack = c.until("PING ACK", |f| f.kind == PING || f.kind == GOAWAY);
        assert_eq!(ack.kind, PING, "GOAWAY while the producer lived: {ack:?}");
        assert_eq!((ack.flags & 1, ack.payload.as_slice()), (1, &i.to_be_bytes()[..]));
    }
    tx.send("second\n").unwrap();
    drop(tx);
    let mut rest = Vec::new();
    loop {
        let f = c.until("the rest of the body", |f| f.kind == DATA && f.stream == 1);
        rest.extend_from_slice(&f.payload);
        if f.flags & END_STREAM != 0 {
            break;
        }
    }
    assert_eq!(rest, b"second\n");
    // Nothing open: the idle timeout ends the connection again.
    assert_eq!(c.goaway().expect("GOAWAY once idle").code(), NO_ERROR);
}

#[test]
fn idle_connection_is_closed_with_goaway() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/");
    assert_eq!(c.response(1).0, 200);
    let g = c.goaway().expect("GOAWAY");
    assert_eq!(g.code(), NO_ERROR);
}

#[test]
fn http2_off_answers_the_preface_as_http1() {
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .http2(false)
        .start(hello)
        .unwrap();
    let raw = common::exchange(server.local_addr(), PREFACE);
    assert_eq!(common::status_of(&raw), 505, "{}", String::from_utf8_lossy(&raw));
}

/// The first bytes of a connection may arrive one at a time: the preface
/// is recognised however it is split.
#[test]
fn preface_split_byte_by_byte() {
    let server = start(Limits::default());
    let stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut c = H2 {
        stream,
        buf: Vec::new(),
    };
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &head("GET", "/", &[])));
    for b in hello {
        c.send(&[b]);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.response(1), (200, b"hello\n".to_vec()));
}

/// The access log over HTTP/2: the protocol is `HTTP/2.0`, the host is
/// `:authority`, and two streams deferred at once on one connection each
/// get their own line with a duration, whatever order they are answered in.
#[test]
fn access_log_lines_of_streams_deferred_at_once() {
    let dir = std::env::temp_dir().join(format!("peregrine-h2-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let (tx, rx) = mpsc::channel::<(String, Responder)>();
    let tx = Mutex::new(tx);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(peregrine::AccessLog::File(path.clone()))
        .access_log_format(peregrine::LogFormat::Json)
        .start(move |req: &Request<'_>| -> Reply {
            if req.path().starts_with("/slow") {
                let _ = tx.lock().unwrap().send((req.path().to_owned(), req.defer()));
                return Reply::Later;
            }
            Response::text("fast").into()
        })
        .unwrap();
    let mut c = H2::connect(server.local_addr());
    c.get(1, "/slow1");
    c.get(3, "/slow2");
    c.get(5, "/fast");
    assert_eq!(c.response(5), (200, b"fast".to_vec()));
    let mut deferred: Vec<(String, Responder)> = (0..2).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    deferred.sort_by(|a, b| b.0.cmp(&a.0)); // /slow2 answered first
    for (path, responder) in deferred {
        responder.send(Response::text(path));
    }
    assert_eq!(c.response(3), (200, b"/slow2".to_vec()));
    assert_eq!(c.response(1), (200, b"/slow1".to_vec()));
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    for (line, target) in lines.iter().zip(["/fast", "/slow2", "/slow1"]) {
        let expected = format!(
            "\"host\":\"localhost\",\"method\":\"GET\",\"target\":\"{target}\",\"version\":\"HTTP/2.0\",\
             \"protocol\":\"HTTP/2.0\",\"status\":200,"
        );
        assert!(line.contains(&expected), "{line}");
        let us = line
            .split("\"duration_us\":")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        us.parse::<u64>().unwrap_or_else(|_| panic!("no duration in {line}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request refused before any handler saw it (a body announced over
/// `body_bytes_max`) is logged with the bytes of the error body it was
/// sent, as any answer is, and as HTTP/3 logs it (`http3.rs`): the two
/// once logged 0 here and the body's length there.
#[test]
fn a_refused_stream_is_logged_with_its_error_body_bytes() {
    let dir = std::env::temp_dir().join(format!("peregrine-h2-refused-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let limits = Limits {
        body_bytes_max: 1000,
        ..Limits::default()
    };
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .access_log(peregrine::AccessLog::File(path.clone()))
        .access_log_format(peregrine::LogFormat::Json)
        .start(|req: &Request<'_>| Response::text(format!("{} bytes", req.body().len())))
        .unwrap();
    let mut c = H2::connect(server.local_addr());
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        1,
        &head("POST", "/echo", &[("content-length", "2000")]),
    ));
    let (status, body) = c.response(1);
    assert_eq!((status, &body[..]), (413, &b"413 Content Too Large\n"[..]));
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let expected = format!("\"protocol\":\"HTTP/2.0\",\"status\":413,\"bytes\":{},", body.len());
    assert!(log.contains(&expected), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A body nobody reads (a POST to a route table that has only GET) is
/// answered as soon as its first DATA frame has come (not once it is
/// whole), the stream reset with NO_ERROR (RFC 9113 §8.1) and given no
/// window beyond its first; DATA that still comes is credited to the
/// connection, so other streams never stall. A client waiting for
/// `100 Continue` is answered at the head.
#[test]
fn a_body_nobody_reads_is_answered_at_its_first_data_and_its_stream_reset() {
    let app = peregrine::Router::new().get("/", hello);
    let server = common::start_with(Limits::default(), app);
    let mut c = H2::connect(server.local_addr());
    let ids: Vec<u32> = (0..60).map(|i| 1 + 2 * i).collect();
    // 60 × 16 KiB = 960 KiB of 60 MiB announced, within the connection's
    // 1 MiB: the server gives the connection's window back for it.
    for &id in &ids {
        c.send(&frame(
            HEADERS,
            END_HEADERS,
            id,
            &head("POST", "/", &[("content-length", "1048576")]),
        ));
        c.send(&frame(DATA, 0, id, &[0; 16_384]));
    }
    let (mut answered, mut reset, mut credited) = (0, 0, false);
    while answered < ids.len() || reset < ids.len() || !credited {
        let f = c.next().expect("the answers");
        match f.kind {
            HEADERS => {
                assert_eq!(f.status(), 405);
                answered += 1;
            }
            RST_STREAM => {
                assert_eq!(f.code(), NO_ERROR, "{f:?}");
                reset += 1;
            }
            WINDOW_UPDATE => {
                assert_eq!(f.stream, 0, "no window for a body nobody reads: {f:?}");
                credited = true;
            }
            _ => {}
        }
    }
    c.get(201, "/");
    assert_eq!(c.response(201), (200, b"hello\n".to_vec()));
    // Waiting for 100 Continue: the final answer comes at the head.
    c.send(&frame(
        HEADERS,
        END_HEADERS,
        203,
        &head("POST", "/", &[("content-length", "10"), ("expect", "100-continue")]),
    ));
    let h = c.until("the answer", |f| f.kind == HEADERS && f.stream == 203);
    assert_eq!(h.status(), 405);
}

/// Reads until GOAWAY or the close, sending `tick()`'s bytes every 100 ms
/// meanwhile (for up to PATIENCE): the GOAWAY's code, if one came.
fn goaway_while(c: &mut H2, mut tick: impl FnMut(u64) -> Vec<u8>) -> Option<u32> {
    c.stream.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    for i in 0..(PATIENCE.as_millis() / 100) as u64 {
        std::thread::sleep(Duration::from_millis(100));
        let bytes = tick(i);
        if !bytes.is_empty() && !c.send_lossy(&bytes) {
            return None;
        }
        let mut chunk = [0; 4096];
        match c.stream.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
        while let Some(f) = take_frame(&mut c.buf) {
            if f.kind == GOAWAY {
                return Some(f.code());
            }
        }
    }
    panic!("neither GOAWAY nor a close within {PATIENCE:?}");
}

/// Only request frames (HEADERS, CONTINUATION, DATA) keep a connection
/// from being idle: a client sending PINGs, SETTINGS and WINDOW_UPDATEs
/// and nothing else is closed at its idle timeout.
#[test]
fn pings_and_settings_do_not_keep_an_idle_connection_open() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(500),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    let code = goaway_while(&mut c, |i| match i % 3 {
        0 => frame(PING, 0, 0, &i.to_be_bytes()),
        1 => frame(SETTINGS, 0, 0, &[]),
        _ => frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
    });
    assert_eq!(code, Some(NO_ERROR));
    still_served(server.local_addr());
}

/// A HEADERS frame sent a byte at a time (slowloris over HTTP/2) must be
/// complete within `head_timeout`, however steadily its bytes come.
#[test]
fn a_header_block_trickled_byte_by_byte_is_ended_at_head_timeout() {
    let limits = Limits {
        head_timeout: Duration::from_millis(500),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = start(limits);
    let mut c = H2::connect(server.local_addr());
    let mut headers = frame(
        HEADERS,
        END_HEADERS,
        1,
        &head("GET", "/", &[("x-pad", &"p".repeat(200))]),
    );
    headers.reverse();
    let code = goaway_while(&mut c, |_| headers.pop().map(|b| vec![b]).unwrap_or_default());
    assert_eq!(code, Some(NO_ERROR));
    still_served(server.local_addr());
}

/// Without a content-length, a body nobody reads is dropped as it comes,
/// with window given for it, and answered at its end (so that trailers
/// that break the request still get their stream error).
#[test]
fn a_body_nobody_reads_without_a_length_is_dropped_and_answered_at_its_end() {
    let app = peregrine::Router::new().get("/", hello);
    let server = common::start_with(Limits::default(), app);
    let mut c = H2::connect(server.local_addr());
    c.send(&frame(HEADERS, END_HEADERS, 1, &head("POST", "/", &[])));
    let mut window: i64 = 65_535;
    let mut sent = 0;
    while sent < 200_000 {
        if window < 16_384 {
            let f = c.until("window for the dropped body", |f| {
                f.kind == WINDOW_UPDATE && f.stream == 1
            });
            window += i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
            continue;
        }
        c.send(&frame(DATA, 0, 1, &[0; 16_384]));
        sent += 16_384;
        window -= 16_384;
    }
    c.send(&frame(DATA, END_STREAM, 1, b"end"));
    assert_eq!(c.response(1).0, 405);
}
