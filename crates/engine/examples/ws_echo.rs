//! WebSocket echo: every message sent to `/echo` comes back as it came
//! (text as text, binary as binary); `/` is a page that tries it from the
//! browser.
//!
//! `cargo run --release -p peregrine --example ws_echo`, then open
//! `http://localhost:8080/`, or `websocat ws://localhost:8080/echo`.
//! `--bind ADDR` listens elsewhere; `--max-message BYTES` raises the
//! largest message (1 MiB by default; Autobahn's 9.x cases send 16 MiB).

mod common;

use peregrine::{ws, Reply, Request, Response, Server};

const PAGE: &str = include_str!("ws_echo.html");

fn main() -> Result<(), peregrine::Error> {
    let max = common::value_of("--max-message").map(|v| {
        v.parse()
            .unwrap_or_else(|_| common::usage(&format!("--max-message takes a number of bytes, not {v:?}")))
    });
    let mut options = ws::Options::new();
    if let Some(max) = max {
        options = options.message_bytes_max(max);
    }
    common::run(Server::new(), move |req: &Request<'_>| -> Reply {
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
