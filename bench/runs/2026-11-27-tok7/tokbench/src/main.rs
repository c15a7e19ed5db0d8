//! The plain tokeniser alone over h2load's request (`req`) or limit.c's
//! answer (`resp`), 10,000 times: run under callgrind with
//! `--toggle-collect='*plain::tokenise*'` for its exact count (see NOTES.md).
#![allow(dead_code)]
use std::hint::black_box;
use std::mem::MaybeUninit;
// The engine's tokeniser itself, compiled alone.
#[path = "../../../../../crates/engine/src/codec/plain.rs"]
mod plain;
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let req: &[u8] = b"GET / HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nuser-agent: h2load nghttp2/1.59.0\r\n\r\n";
    let resp: &[u8] = b"HTTP/1.1 200 OK\r\nServer: limit\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
    let mut n = 0usize;
    for _ in 0..10000 {
        let mut slots = [const { MaybeUninit::uninit() }; 256];
        if which == "resp" {
            if let Ok((p, f)) = plain::parse_response(black_box(resp), &mut slots) {
                n += p.head_len + f.len();
            }
        } else if let Ok((p, f)) = plain::parse(black_box(req), &mut slots) {
            n += p.head_len + f.len();
        }
        black_box(&slots);
    }
    println!("{n}");
}
