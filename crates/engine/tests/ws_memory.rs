//! What a WebSocket costs the server's heap, counted with a global
//! counting allocator (the only test in this binary, so nothing else
//! allocates meanwhile): no allocation per message on a warm connection,
//! and at most 1 KiB per idle WebSocket, 10,000 of them open.

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
    let options = Options::new();
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

    // Messages on a warm connection: text and binary, one at a time and
    // eight in one write, and a ping.
    let mut c = Ws::open(addr, "/");
    let text = "a message of some length, as a chat line would be".repeat(2);
    let mut round = ws::masked(0x81, text.as_bytes());
    for _ in 0..8 {
        round.extend(ws::masked(0x82, &[9u8; 300]));
    }
    round.extend(ws::masked(0x89, b"p"));
    // The echoes and the pong: unmasked heads of 2 and 4 bytes.
    let expect = (2 + text.len()) + 8 * (4 + 300) + 3;
    let mut answers = vec![0u8; expect];
    let n_allocs = allocations_after_warming(100, 100, || {
        use std::io::{Read, Write};
        c.stream.write_all(&round).unwrap();
        c.stream.read_exact(&mut answers).unwrap();
        assert_eq!((answers[0], answers[expect - 3]), (0x81, 0x8A));
    });
    assert_eq!(
        n_allocs,
        0,
        "allocations during 1,000 warm messages; the first: {}",
        first_allocation_seen()
    );

    // Idle WebSockets: what the server holds for each. Two figures: the
    // heap bytes the server's threads allocated (this thread, the
    // clients', left out), which counts the connection table's spare
    // capacity (a `Vec` doubled, untouched), and the process's resident
    // memory, which does not: the memory a host gives the server.
    let n = open_files_for(10_000);
    leave_this_thread_out();
    let mut idle: Vec<std::net::TcpStream> = Vec::with_capacity(n);
    let request = ws::request("/", "");
    let mut head = [0u8; 256];
    let (heap_before, rss_before) = (live_bytes(), resident_bytes());
    for _ in 0..n {
        use std::io::{Read, Write};
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
    println!("an idle WebSocket holds {heap} bytes of the server's heap and {rss} resident bytes ({n} open)");
    assert!(rss <= 1024, "{rss} resident bytes per idle WebSocket");
    assert!(heap <= 2048, "{heap} bytes of heap per idle WebSocket");
    drop(idle);
    server.shutdown();
    server.join().unwrap();
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
