//! A chat room on WebSocket publish/subscribe: each line a member sends
//! goes to every member, whichever worker holds their connection (framed
//! once, fanned out through the workers' mailboxes); `/` is the page.
//!
//! `cargo run --release -p peregrine --example chat`, then open
//! `http://localhost:8080/` in two windows. `--bind ADDR` listens elsewhere.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use peregrine::ws::{self, Message, Publisher, Socket, WebSocket};
use peregrine::{Reply, Request, Response, Server};

const PAGE: &str = include_str!("chat.html");
const ROOM: &str = "room";

/// One member: its name, and a publisher to say it left (`on_close` has
/// no socket).
struct Member {
    name: String,
    publisher: Option<Publisher>,
}

impl WebSocket for Member {
    fn on_open(&mut self, ws: &mut Socket<'_>) {
        ws.subscribe(ROOM);
        let line = format!("* {} joined", self.name);
        ws.publish(ROOM, Message::Text(&line));
        let _ = ws.send_text(&format!("* you are {}", self.name));
        self.publisher = Some(ws.publisher());
    }

    fn on_message(&mut self, ws: &mut Socket<'_>, msg: Message<'_>) {
        let Message::Text(text) = msg else {
            ws.close(1003, "text only");
            return;
        };
        let line = format!("{}: {}", self.name, text.trim());
        // To the others, and back to the sender.
        ws.publish(ROOM, Message::Text(&line));
        let _ = ws.send_text(&line);
    }

    fn on_close(&mut self, _code: u16, _reason: &str) {
        if let Some(p) = &self.publisher {
            p.publish(ROOM, Message::Text(&format!("* {} left", self.name)));
        }
    }
}

/// `?name=...`, letters, digits, `-` and `_` kept, at most 24; else guest-N.
fn name_of(req: &Request<'_>) -> String {
    static GUESTS: AtomicUsize = AtomicUsize::new(1);
    let given: String = req
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("name="))
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(24)
        .collect();
    if given.is_empty() {
        format!("guest-{}", GUESTS.fetch_add(1, Ordering::Relaxed))
    } else {
        given
    }
}

fn main() -> Result<(), peregrine::Error> {
    // Chat lines are short: 4 KiB each at most.
    let options = ws::Options::new().message_bytes_max(4096);
    common::run(Server::new().websockets(true), move |req: &Request<'_>| -> Reply {
        match req.path() {
            "/ws" => ws::upgrade(
                req,
                &options,
                Member {
                    name: name_of(req),
                    publisher: None,
                },
            ),
            "/" => Response::html(PAGE).into(),
            _ => Response::error(404).into(),
        }
    })
}
