//! Hostile clients against a running server, each attack measured by the
//! server's peak heap (a counting allocator; the clients' threads are left
//! out) while honest clients keep being answered: bodies nobody reads over
//! HTTP/1.1 and h2c, bodies that are read but withheld past the worker's
//! budget, a client that pipelines without reading, and h2c streams whose
//! in-memory answers wait for a window the client keeps shut. Each must cost at
//! most `ATTACK_BYTES_MAX` of heap, where before this file they cost 30 to
//! 200 MB. The attacks run one at a time (`serial`): the peak counts every
//! server thread.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use common::{start_with, Client, PATIENCE};
use peregrine::{Limits, Request, Response, Router};
use test_support::alloc::{leave_this_thread_out, peak_bytes, reset_peak, Counting};
use test_support::h2::{
    frame, get_head, take_frame, ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING, PREFACE, RST_STREAM,
    SETTINGS, WINDOW_UPDATE,
};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The most heap one attack may cost the server (the target).
const ATTACK_BYTES_MAX: isize = 16 << 20;

const MIB: usize = 1 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    leave_this_thread_out();
    guard
}

/// Routes that take no body, and one that buffers it.
fn app() -> Router {
    Router::new()
        .get("/", |_: &Request<'_>| Response::text("home"))
        .post("/buffer", |req: &Request<'_>| {
            Response::text(format!("{} bytes", req.body().len()))
        })
}

fn limits() -> Limits {
    Limits {
        // Every attacker connection comes from 127.0.0.1.
        conns_per_ip_max: 0,
        body_budget_bytes: 8 * MIB,
        ..Limits::default()
    }
}

/// The server's heap growth at its peak during `attack`, from a warm
/// start (one honest exchange first).
fn peak_during(addr: SocketAddr, attack: impl FnOnce()) -> isize {
    honest(addr);
    let before = test_support::alloc::live_bytes();
    reset_peak();
    attack();
    peak_bytes() - before
}

/// An honest client is answered meanwhile.
fn honest(addr: SocketAddr) {
    let mut c = Client::connect(addr);
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "home");
}

#[test]
fn http1_bodies_nobody_reads_cost_nothing_and_are_answered_at_once() {
    let _serial = serial();
    let server = start_with(limits(), app());
    let addr = server.local_addr();
    let body = vec![b'x'; MIB - 1];
    let peak = peak_during(addr, || {
        // 200 connections each announce 1 MiB and withhold its last byte.
        let mut conns: Vec<Client> = (0..200).map(|_| Client::connect(addr)).collect();
        for c in &mut conns {
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
        }
        for c in &mut conns {
            assert_eq!(c.response().status, 405, "answered at the head");
        }
        for c in &mut conns {
            c.send(&body);
        }
        honest(addr);
    });
    println!("200 unread 1 MiB bodies over HTTP/1.1: peak heap +{} KiB", peak >> 10);
    assert!(peak < ATTACK_BYTES_MAX, "peak heap +{peak} bytes");
}

#[test]
fn http1_bodies_withheld_past_the_budget_are_refused_with_503() {
    let _serial = serial();
    let server = start_with(limits(), app());
    let addr = server.local_addr();
    let body = vec![b'x'; MIB - 1];
    let peak = peak_during(addr, || {
        // 40 buffered bodies of 1 MiB, each withheld by a byte: 40 MiB
        // against a budget of 8.
        let mut conns: Vec<Client> = (0..40).map(|_| Client::connect(addr)).collect();
        for c in &mut conns {
            c.send(b"POST /buffer HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
            let _ = c.stream.write_all(&body);
        }
        honest(addr);
        // Those refused were answered 503 and closed; the others wait.
        let mut refused = 0;
        for c in &mut conns {
            c.stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            let mut buf = [0; 12];
            if let Ok(12) = c.stream.read(&mut buf) {
                assert_eq!(&buf, b"HTTP/1.1 503");
                refused += 1;
            }
        }
        assert!((20..40).contains(&refused), "{refused} of 40 refused");
    });
    println!(
        "40 withheld 1 MiB bodies over HTTP/1.1, budget 8 MiB: peak heap +{} KiB",
        peak >> 10
    );
    assert!(peak < ATTACK_BYTES_MAX, "peak heap +{peak} bytes");
}

#[test]
fn a_client_that_pipelines_and_never_reads_holds_a_bounded_output() {
    let _serial = serial();
    let server = start_with(limits(), app());
    let addr = server.local_addr();
    let requests = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20_000);
    let peak = peak_during(addr, || {
        let mut conns: Vec<TcpStream> = Vec::new();
        for _ in 0..50 {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            conns.push(s);
        }
        // Write what the sockets take, for a while, never reading.
        let mut sent = vec![0; conns.len()];
        for _ in 0..50 {
            for (s, at) in conns.iter_mut().zip(sent.iter_mut()) {
                match s.write(&requests[*at..]) {
                    Ok(n) => *at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        honest(addr);
    });
    println!(
        "50 connections pipelining without reading: peak heap +{} KiB",
        peak >> 10
    );
    assert!(peak < ATTACK_BYTES_MAX, "peak heap +{peak} bytes");
}

/// An h2c connection that has sent its preface and SETTINGS.
fn h2c(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    s.write_all(&hello).unwrap();
    s
}

/// A POST head announcing `length` bytes, as HPACK literals.
fn post_head(path: &str, length: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for (index, value) in [(2u8, "POST"), (6, "http"), (4, path), (1, "x")] {
        b.push(index);
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    }
    let n = length.to_string();
    b.extend_from_slice(&[0x0f, 0x0d, n.len() as u8]); // content-length (28)
    b.extend_from_slice(n.as_bytes());
    b
}

/// 4 h2c connections × 128 streams, each announcing 1 MiB and sending
/// the stream's first window (64 KiB): to a route that reads no body, and
/// to one that buffers it (against the worker's budget).
#[test]
fn h2c_streams_of_bodies_cost_at_most_the_budget() {
    let _serial = serial();
    let server = start_with(limits(), app());
    let addr = server.local_addr();
    let chunk = vec![0u8; 16_384];
    for path in ["/", "/buffer"] {
        let peak = peak_during(addr, || {
            let mut conns: Vec<(TcpStream, Vec<u8>)> = (0..4).map(|_| (h2c(addr), Vec::new())).collect();
            for (s, _) in &mut conns {
                let mut batch = Vec::new();
                for i in 0..128u32 {
                    batch.extend(frame(HEADERS, END_HEADERS, 1 + 2 * i, &post_head(path, MIB)));
                }
                s.write_all(&batch).unwrap();
            }
            for (s, _) in &mut conns {
                // 64 KiB per stream, the window every stream starts with.
                // The server gives the connection's window (1 MiB) back as
                // it reads, a few frames a read, so on its side these
                // sends stay within it.
                let mut batch = Vec::new();
                for _ in 0..4 {
                    for i in 0..128u32 {
                        batch.extend(frame(DATA, 0, 1 + 2 * i, &chunk));
                    }
                }
                s.set_nonblocking(true).unwrap();
                let mut at = 0;
                for _ in 0..2000 {
                    match s.write(&batch[at..]) {
                        Ok(n) => at += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
                        Err(e) => panic!("{e}"),
                    }
                    if at == batch.len() {
                        break;
                    }
                }
                s.set_nonblocking(false).unwrap();
            }
            // Every stream that reads no body is answered 405 at its head;
            // of those that buffer, all past the budget are answered 503
            // (the rest wait for their bodies).
            let want = if path == "/" {
                4 * 128
            } else {
                4 * 128 - (8 * MIB) / (64 << 10)
            };
            let mut answered = 0;
            for _ in 0..PATIENCE.as_millis() / 50 {
                for (s, buf) in &mut conns {
                    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
                    let mut chunk = vec![0; 1 << 16];
                    if let Ok(n) = s.read(&mut chunk) {
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    while let Some(f) = take_frame(buf) {
                        if f.kind == HEADERS {
                            assert!(matches!(f.status(), 405 | 503), "{f:?}");
                            answered += 1;
                        }
                    }
                }
                if answered >= want {
                    break;
                }
            }
            assert!(answered >= want, "{answered} of {want} answered");
            honest(addr);
        });
        println!(
            "4 h2c connections x 128 streams of 1 MiB to {path}: peak heap +{} KiB",
            peak >> 10
        );
        assert!(peak < ATTACK_BYTES_MAX, "{path}: peak heap +{peak} bytes");
    }
}

/// h2c connections whose streams' windows are one byte
/// (SETTINGS_INITIAL_WINDOW_SIZE 1, as the review's repro) ask 12 times
/// each for a route answering 4 MiB of owned bytes, then PING: when the
/// ACK comes, the server has read every request and answered what it
/// will. Each connection may hold its share of queued output
/// (`write_buffer_bytes_max`, 64 KiB) and one answer, so the server's
/// heap grows by 2 × (4 MiB + 64 KiB) and its buffers: under 10 MiB.
/// Before, every stream's answer was built, each waiting for window:
/// 96 MiB. Then the windows open, and every stream gets its whole answer:
/// the requests that waited are answered as the bodies before them go.
#[test]
fn h2c_answers_waiting_for_window_hold_one_answer_per_connection() {
    const BODY: usize = 4 * MIB;
    const CONNS: usize = 2;
    const STREAMS: u32 = 12;
    let _serial = serial();
    let app = app().get("/big", |_: &Request<'_>| Response::new(200).with_body(vec![b'x'; BODY]));
    let server = start_with(limits(), app);
    let addr = server.local_addr();
    // Each connection, what it has read and not looked at, and the body
    // bytes each stream has had.
    let mut conns: Vec<(TcpStream, Vec<u8>, Vec<usize>)> = Vec::new();
    let peak = peak_during(addr, || {
        for _ in 0..CONNS {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut hello = PREFACE.to_vec();
            hello.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 1]));
            for i in 0..STREAMS {
                hello.extend(frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1 + 2 * i,
                    &get_head("/big", "x"),
                ));
            }
            hello.extend(frame(PING, 0, 0, b"answered"));
            s.write_all(&hello).unwrap();
            let mut buf = Vec::new();
            let mut got = vec![0; STREAMS as usize];
            let mut acked = false;
            while !acked {
                let mut chunk = vec![0; 1 << 16];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
                while let Some(f) = take_frame(&mut buf) {
                    assert!(f.kind != GOAWAY && f.kind != RST_STREAM, "{f:?}");
                    if f.kind == DATA {
                        got[(f.stream / 2) as usize] += f.payload.len();
                    }
                    acked |= f.kind == PING && f.flags & ACK != 0 && f.payload == b"answered";
                }
            }
            conns.push((s, buf, got));
        }
        honest(addr);
    });
    println!(
        "{CONNS} h2c connections x {STREAMS} answers of 4 MiB, windows of 1 byte: peak heap +{} KiB",
        peak >> 10
    );
    let bound = (CONNS * (BODY + (64 << 10)) + 1536 * 1024) as isize;
    assert!(peak < bound, "peak heap +{peak} bytes, over {bound}");
    // The client opens its windows: every answer comes whole.
    for (s, buf, got) in &mut conns {
        let mut open = frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
        open.extend(frame(WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
        s.write_all(&open).unwrap();
        let mut ended = 0;
        let mut chunk = vec![0; 1 << 16];
        while ended < STREAMS {
            while let Some(f) = take_frame(buf) {
                assert!(f.kind != GOAWAY && f.kind != RST_STREAM, "{f:?}");
                if f.kind == DATA {
                    got[(f.stream / 2) as usize] += f.payload.len();
                }
                if f.kind <= HEADERS && f.flags & END_STREAM != 0 {
                    ended += 1;
                }
            }
            if ended < STREAMS {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        assert_eq!(*got, vec![BODY; STREAMS as usize]);
    }
}
