//! What a proxied exchange makes the server hold, whatever its size: a
//! 1 GiB upload and a 1 GiB download through the reverse proxy, each
//! measured by the server's peak heap (a counting allocator; the test's
//! client and upstream threads are left out). Both directions are bounded
//! by the proxy's buffers, not by the body: the answer's channel
//! (`Upstream::BUFFER_BYTES`, 1 MiB) and the chunk it refused, the request
//! body's pipe (256 KiB), the worker's 64 KiB read scratch and the
//! connections' pooled buffers. `PROXIED_BYTES_MAX` is that sum with room
//! to spare; a proxy that buffered either body would hold 1 GiB.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use peregrine::proxy::{Encode, Proxy, Upstream, ENCODER_BYTES_MAX};
use peregrine::{Limits, Router, Running, Server};
use test_support::alloc::{leave_this_thread_out, live_bytes, peak_bytes, reset_peak, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

const GIB: u64 = 1 << 30;

/// The documented bound of one proxied exchange (1 MiB of answer channel,
/// a 64 KiB chunk waiting for it, the 256 KiB request pipe, a 64 KiB read
/// scratch, the client connection's buffers), rounded up to 4 MiB.
const PROXIED_BYTES_MAX: isize = 4 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

/// Bytes of 1 GiB answers the upstreams have written so far.
static UPSTREAM_WRITTEN: AtomicU64 = AtomicU64::new(0);

/// An upstream that, for `POST`, reads the body (Content-Length) and
/// answers its length; for `GET /big`, sends 1 GiB with its length.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        leave_this_thread_out();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || {
                leave_this_thread_out();
                serve(stream);
            });
        }
    });
    addr
}

fn serve(stream: TcpStream) {
    let mut r = BufReader::with_capacity(256 * 1024, stream.try_clone().unwrap());
    let mut w = stream;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        if head.starts_with("POST") {
            let len: u64 = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap();
            let n = std::io::copy(&mut (&mut r).take(len), &mut std::io::sink()).unwrap();
            let text = n.to_string();
            write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}", text.len()).unwrap();
        } else if head.starts_with("GET /text") {
            // Text that compresses about 4 to 1, so that the compressed
            // stream is long enough to fill the client's channel.
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {TEXT_BYTES}\r\n\r\n"
            )
            .unwrap();
            let block = text_block();
            for _ in 0..TEXT_BYTES / block.len() as u64 {
                if w.write_all(&block).is_err() {
                    return;
                }
            }
        } else {
            write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n").unwrap();
            let block = vec![b'x'; 256 * 1024];
            for _ in 0..GIB / block.len() as u64 {
                if w.write_all(&block).is_err() {
                    return;
                }
                UPSTREAM_WRITTEN.fetch_add(block.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

/// The compressed downloads' length.
const TEXT_BYTES: u64 = 32 << 20;

/// 256 KiB of words in a pseudo-random order.
fn text_block() -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
        "mike", "november", "oscar", "papa",
    ];
    let mut x: u32 = 12345;
    let mut out = Vec::with_capacity(256 * 1024 + 16);
    while out.len() < 256 * 1024 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        out.extend_from_slice(WORDS[(x >> 16) as usize % 16].as_bytes());
        out.push(if x % 7 == 0 { b'\n' } else { b' ' });
    }
    out.truncate(256 * 1024);
    out
}

/// Counts what a decoder writes.
struct Count(u64);

impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a chunked body from `r` into `out`.
fn read_chunked(r: &mut impl BufRead, out: &mut impl Write) {
    let mut chunk = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        chunk.resize(n + 2, 0);
        r.read_exact(&mut chunk).unwrap();
        if n == 0 {
            return;
        }
        out.write_all(&chunk[..n]).unwrap();
    }
}

fn proxy_server(up: SocketAddr) -> Running {
    proxy_server_with(
        up,
        Limits {
            body_bytes_max: 2 * GIB,
            ..Limits::default()
        },
    )
}

fn proxy_server_with(up: SocketAddr, limits: Limits) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap()).encode(Encode::new());
    let router = Router::new()
        .route("GET", "/*rest", proxy.clone())
        .route("POST", "/*rest", proxy);
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(router)
        .expect("server starts")
}

/// Reads a response head from `r`; returns it.
fn read_head(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "closed after {head:?}");
        head.push_str(&line);
        if line == "\r\n" {
            return head;
        }
    }
}

/// The server's heap growth at its peak during `exchange`, after one
/// small exchange warmed the pools.
fn peak_during(addr: SocketAddr, exchange: impl FnOnce(SocketAddr)) -> isize {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"POST /warm HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
        .unwrap();
    let mut r = BufReader::new(c);
    assert!(read_head(&mut r).starts_with("HTTP/1.1 200"));
    let before = live_bytes();
    reset_peak();
    exchange(addr);
    peak_bytes() - before
}

#[test]
fn a_gib_up_and_a_gib_down_through_the_proxy_stay_within_its_buffers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    leave_this_thread_out();
    let server = proxy_server(upstream());
    let addr = server.local_addr();

    let up = peak_during(addr, |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        write!(c, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: {GIB}\r\n\r\n").unwrap();
        let block = vec![b'y'; 256 * 1024];
        for _ in 0..GIB / block.len() as u64 {
            c.write_all(&block).unwrap();
        }
        let mut r = BufReader::new(c);
        let head = read_head(&mut r);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut body = vec![0; GIB.to_string().len()];
        r.read_exact(&mut body).unwrap();
        assert_eq!(body, GIB.to_string().as_bytes(), "the upstream got every byte");
    });
    println!("1 GiB upload through the proxy: peak heap +{} KiB", up >> 10);

    let down = peak_during(addr, |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let mut r = BufReader::with_capacity(256 * 1024, c);
        let head = read_head(&mut r);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains(&format!("\r\nContent-Length: {GIB}\r\n")), "{head}");
        let n = std::io::copy(&mut (&mut r).take(GIB), &mut std::io::sink()).unwrap();
        assert_eq!(n, GIB);
    });
    println!("1 GiB download through the proxy: peak heap +{} KiB", down >> 10);

    assert!(up < PROXIED_BYTES_MAX, "upload: peak heap +{up} bytes");
    assert!(down < PROXIED_BYTES_MAX, "download: peak heap +{down} bytes");
    assert!(up > 0 && down > 0, "the figures count the server's heap");
}

/// A compressed answer holds its compressor besides the proxy's buffers:
/// 32 MiB of text compressed on the fly, in each coding, stays within
/// `PROXIED_BYTES_MAX` and one `ENCODER_BYTES_MAX` (zstd's context is its
/// own `malloc`'s, not counted here: `encode.rs` measures it apart).
#[test]
fn a_compressed_download_holds_one_compressor_more_and_no_more() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    leave_this_thread_out();
    let server = proxy_server(upstream());
    let addr = server.local_addr();
    let plain = peak_during(addr, |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /text HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let mut r = BufReader::with_capacity(256 * 1024, c);
        let head = read_head(&mut r);
        assert!(!head.to_ascii_lowercase().contains("content-encoding"), "{head}");
        let n = std::io::copy(&mut (&mut r).take(TEXT_BYTES), &mut std::io::sink()).unwrap();
        assert_eq!(n, TEXT_BYTES);
    });
    println!("32 MiB of text, identity: peak heap +{} KiB", plain >> 10);
    for coding in ["gzip", "zstd"] {
        let peak = peak_during(addr, |addr| {
            let mut c = TcpStream::connect(addr).unwrap();
            write!(c, "GET /text HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {coding}\r\n\r\n").unwrap();
            let mut r = BufReader::with_capacity(256 * 1024, c);
            let head = read_head(&mut r).to_ascii_lowercase();
            assert!(head.contains(&format!("content-encoding: {coding}")), "{head}");
            assert!(head.contains("transfer-encoding: chunked"), "{head}");
            let n = match coding {
                "gzip" => {
                    let mut d = flate2::write::GzDecoder::new(Count(0));
                    read_chunked(&mut r, &mut d);
                    d.finish().unwrap().0
                }
                _ => {
                    let mut d = zstd::stream::write::Decoder::new(Count(0)).unwrap();
                    read_chunked(&mut r, &mut d);
                    d.flush().unwrap();
                    d.into_inner().0
                }
            };
            assert_eq!(n, TEXT_BYTES, "{coding}: every byte decoded");
        });
        println!(
            "32 MiB of text, {coding}: peak heap +{} KiB ({:+} KiB against identity)",
            peak >> 10,
            (peak - plain) >> 10
        );
        assert!(
            peak < PROXIED_BYTES_MAX + ENCODER_BYTES_MAX as isize,
            "{coding}: peak heap +{peak} bytes"
        );
    }
}

/// The answers' channels count in the worker's output budget
/// (`Limits::output_budget_bytes`): 8 clients that ask for 1 GiB each and
/// read nothing make the server hold about the budget (1 MiB here) and
/// a few upstream reads (64 KiB) per answer, not 8 channels of 1 MiB each
/// (measured: +3,049 KiB of peak heap; +10,615 KiB without the count).
/// The upstreams stall on full
/// socket buffers; the heap is measured once they have written nothing
/// for a second.
#[test]
fn clients_that_read_nothing_hold_the_output_budget_of_read_ahead_not_a_channel_each() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    leave_this_thread_out();
    const N_CLIENTS: usize = 8;
    const BUDGET: usize = 1 << 20;
    let limits = Limits {
        output_budget_bytes: BUDGET,
        ..Limits::default()
    };
    let server = proxy_server_with(upstream(), limits);
    let peak = peak_during(server.local_addr(), |addr| {
        let clients: Vec<TcpStream> = (0..N_CLIENTS)
            .map(|_| {
                let mut c = TcpStream::connect(addr).unwrap();
                c.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                c
            })
            .collect();
        // No event says "stalled": the upstreams' count stops moving.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut last, mut still) = (u64::MAX, 0);
        while still < 5 {
            assert!(Instant::now() < deadline, "the upstreams never stalled");
            thread::sleep(Duration::from_millis(200));
            let now = UPSTREAM_WRITTEN.load(Ordering::Relaxed);
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        drop(clients);
    });
    println!(
        "{N_CLIENTS} clients reading nothing, output budget {} KiB: peak heap +{} KiB",
        BUDGET >> 10,
        peak >> 10
    );
    // The budget; per answer a 64 KiB read, the chunk the channel
    // refused and the one its client connection is sending, and the
    // connections' buffers: within 4 MiB. Channels of 1 MiB each are
    // 8 MiB and more.
    let bound = (BUDGET + N_CLIENTS * 384 * 1024) as isize;
    assert!(peak < bound, "peak heap +{peak} bytes, over {bound}");
}
