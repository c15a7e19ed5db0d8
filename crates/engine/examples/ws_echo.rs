//! WebSocket echo: every message sent to `/echo` comes back as it came
//! (text as text, binary as binary); `/` is a page that tries it from the
//! browser.
//!
//! `cargo run --release -p peregrine --example ws_echo`, then open
//! `http://localhost:8080/`, or `websocat ws://localhost:8080/echo`.
//! `--bind ADDR` listens elsewhere; `--max-message BYTES` raises the
//! largest message (1 MiB by default; Autobahn's 9.x cases send 16 MiB),
//! `--max-fragments N` the most frames per message (1,024; its 9.3 and
//! 9.4 cases send 4 MiB in 64-byte frames); `--deflate` accepts
//! permessage-deflate (its 12.x and 13.x cases). `--n-conns-max N` and
//! `--conns-per-ip-max N` set those limits (4,096 and 256 by default; 0
//! is no cap per address): bench/run's idle WebSocket scenario opens
//! 10,000 from one address, as its hello scenarios do with `peregrine
//! hello`.

mod common;

use peregrine::{ws, Reply, Request, Response, Server};

const PAGE: &str = include_str!("ws_echo.html");

fn main() -> Result<(), peregrine::Error> {
    let number = |flag: &str| {
        common::value_of(flag).map(|v| {
            v.parse::<u32>()
                .unwrap_or_else(|_| common::usage(&format!("{flag} takes a number, not {v:?}")))
        })
    };
    let mut options = ws::Options::new();
    if let Some(max) = number("--max-message") {
        options = options.message_bytes_max(max as usize);
    }
    if let Some(max) = number("--max-fragments") {
        options = options.fragments_max(max);
    }
    if std::env::args().any(|a| a == "--deflate") {
        options = options.permessage_deflate(true);
    }
    let mut limits = peregrine::Limits::default();
    if let Some(max) = number("--n-conns-max") {
        limits.n_conns_max = max as usize;
    }
    if let Some(max) = number("--conns-per-ip-max") {
        limits.conns_per_ip_max = max as usize;
    }
    let server = Server::new().websockets(true).limits(limits);
    common::run(server, move |req: &Request<'_>| -> Reply {
        match req.path() {
            "/echo" => ws::upgrade(req, &options, |ws: &mut ws::Socket<'_>, msg: ws::Message<'_>| {
                // Full only while the client reads nothing back: dropped.
                let _ = ws.send(msg);
            }),
            "/" => Response::html(PAGE).into(),
            _ => Response::error(404).into(),
        }
    })
}
