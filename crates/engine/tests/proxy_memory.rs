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
use std::sync::Mutex;
use std::thread;

use peregrine::proxy::{Proxy, Upstream};
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
        } else {
            write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n").unwrap();
            let block = vec![b'x'; 256 * 1024];
            for _ in 0..GIB / block.len() as u64 {
                if w.write_all(&block).is_err() {
                    return;
                }
            }
        }
    }
}

fn proxy_server(up: SocketAddr) -> Running {
    let proxy = Proxy::new(Upstream::parse(&format!("http://{up}")).unwrap());
    let router = Router::new()
        .route("GET", "/*rest", proxy.clone())
        .route("POST", "/*rest", proxy);
    let limits = Limits {
        body_bytes_max: 2 * GIB,
        ..Limits::default()
    };
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
