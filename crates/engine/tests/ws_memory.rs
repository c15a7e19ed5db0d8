//! What a WebSocket costs the server's heap, counted with a global
//! counting allocator (the only test in this binary, so nothing else
//! allocates meanwhile): no allocation per message on a warm connection,
//! and at most 1 KiB per idle WebSocket, 10,000 of them open; the same
//! with permessage-deflate agreed (its streams are the worker's).

mod ws;

use peregrine::ws::{Message, Options, Socket};
use peregrine::{Limits, Reply, Request, Server};
use test_support::alloc::{
    allocations_after_warming, first_allocation_seen, leave_this_thread_out, live_bytes, Counting,
};
use ws::Ws;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn websockets_allocate_nothing_per_message_and_little_when_idle() {
    // Each pass on a thread of its own, whose bytes (the clients') are
    // left out of the server's.
    let n = open_files_for(10_000);
    let plain = std::thread::spawn(move || measure(n, false)).join().unwrap();
    let deflate = std::thread::spawn(move || measure(n, true)).join().unwrap();
    println!(
        "per idle WebSocket ({n} open): {} heap bytes, {} resident bytes; with permessage-deflate \
         {} and {}",
        plain.0, plain.1, deflate.0, deflate.1
    );
}

/// One server, without or with permessage-deflate agreed: no allocation
/// per message on a warm connection, then `n` idle WebSockets; returns the
/// heap and resident bytes each costs.
fn measure(n: usize, deflate: bool) -> (isize, isize) {
    leave_this_thread_out();
    let options = Options::new().permessage_deflate(deflate);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(Limits {
            n_conns_max: 20_000,
            conns_per_ip_max: 0,
            ..Limits::default()
        })
        .start(move |req: &Request<'_>| -> Reply {
            peregrine::ws::upgrade(req, &options, |ws: &mut Socket<'_>, msg: Message<'_>| {
                let _ = ws.send(msg);
            })
        })
        .unwrap();
    let addr = server.local_addr();
    let extensions = if deflate {
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    } else {
        ""
    };

    // Messages on a warm connection: text and binary, one at a time and
    // eight in one write, and a ping; with deflate, the text and one of
    // the binary messages come compressed, and the echoes go compressed.
    let (mut c, head) = Ws::open_with(addr, &ws::request("/", extensions), b"");
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(head.contains("permessage-deflate"), deflate, "{head}");
    let text = "a message of some length, as a chat line would be".repeat(2);
    let mut round = if deflate {
        compressed(0x81, text.as_bytes())
    } else {
        ws::masked(0x81, text.as_bytes())
    };
    for i in 0..8 {
        if deflate && i == 0 {
            round.extend(compressed(0x82, &[9u8; 300]));
        } else {
            round.extend(ws::masked(0x82, &[9u8; 300]));
        }
    }
    round.extend(ws::masked(0x89, b"p"));
    use std::io::{Read, Write};
    // The worker's shared streams, made by its first compressed message.
    let heap_before_streams = live_bytes();
    c.stream.write_all(&round).unwrap();
    let expect = read_round(&mut c, deflate);
    if deflate {
        println!(
            "the worker's permessage-deflate streams, and the connection's buffers: {} heap bytes",
            live_bytes() - heap_before_streams
        );
    }
    // The same answers every round (the streams start afresh each
    // message), read without allocating.
    let mut answers = vec![0u8; expect];
    let n_allocs = allocations_after_warming(100, 100, || {
        c.stream.write_all(&round).unwrap();
        c.stream.read_exact(&mut answers).unwrap();
        assert_eq!(answers[expect - 3], 0x8A);
    });
    assert_eq!(
        n_allocs,
        0,
        "allocations during 1,000 warm messages (deflate: {deflate}); the first: {}",
        first_allocation_seen()
    );

    // Idle WebSockets: what the server holds for each. Two figures: the
    // heap bytes the server's threads allocated (this thread, the
    // clients', left out), which counts the connection table's spare
    // capacity (a `Vec` doubled, untouched), and the process's resident
    // memory, which does not: the memory a host gives the server.
    let mut idle: Vec<std::net::TcpStream> = Vec::with_capacity(n);
    let request = ws::request("/", extensions);
    let mut head = [0u8; 512];
    let (heap_before, rss_before) = (live_bytes(), resident_bytes());
    for _ in 0..n {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let got = s.read(&mut head).unwrap();
        assert!(head[..got].starts_with(b"HTTP/1.1 101 "));
        idle.push(s);
    }
    // One more round trip on the last: every handshake has been handled.
    let mut last = Ws::open(addr, "/");
    last.send_text("x");
    assert_eq!(last.read_text(), "x");
    let heap = (live_bytes() - heap_before) / n as isize;
    let rss = (resident_bytes() - rss_before) / n as isize;
    println!(
        "an idle WebSocket (deflate: {deflate}) holds {heap} bytes of the server's heap and {rss} resident \
         bytes ({n} open)"
    );
    assert!(
        rss <= 1024,
        "{rss} resident bytes per idle WebSocket (deflate: {deflate})"
    );
    assert!(
        heap <= 2048,
        "{heap} bytes of heap per idle WebSocket (deflate: {deflate})"
    );
    drop(idle);
    server.shutdown();
    server.join().unwrap();
    (heap, rss)
}

/// Reads one round's ten answers: nine echoes (compressed, with deflate,
/// since that makes them shorter: the text and the repeated bytes) and
/// the pong. Returns their bytes.
fn read_round(c: &mut Ws, deflate: bool) -> usize {
    let mut total = 0;
    for i in 0..10 {
        let (b0, payload) = c.read_frame().unwrap();
        if i < 9 {
            assert_eq!(b0 & 0x40 != 0, deflate, "echo {i}: {b0:#x}");
        } else {
            assert_eq!(b0, 0x8A, "the pong");
        }
        total += payload.len()
            + match payload.len() {
                0..=125 => 2,
                126..=65535 => 4,
                _ => 10,
            };
    }
    total
}

/// A client's compressed message: `payload` deflated, the tail removed,
/// RSV1 set.
fn compressed(b0: u8, payload: &[u8]) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut c = Compress::new(Compression::default(), false);
    let mut out = Vec::with_capacity(payload.len() + 64);
    c.compress_vec(payload, &mut out, FlushCompress::Sync).unwrap();
    out.truncate(out.len() - 4);
    ws::masked(b0 | 0x40, &out)
}

/// The process's resident memory (/proc/self/statm), in bytes.
fn resident_bytes() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: isize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Raises the descriptor limit for `want` connections, each two
/// descriptors here (client and server in one process), if the hard
/// limit allows or can be raised; else as many as it allows (said).
fn open_files_for(want: usize) -> usize {
    let need = (2 * want + 256) as libc::rlim_t;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_max < need {
            let raised = libc::rlimit {
                rlim_cur: need,
                rlim_max: need,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let n = want.min((lim.rlim_max as usize).saturating_sub(256) / 2);
    if n < want {
        println!(
            "{want} WebSockets need {need} descriptors; the hard limit is {}: measuring {n}",
            lim.rlim_max
        );
    }
    n
}
