//! Server-Sent Events: `/events` is an event stream (`text/event-stream`)
//! that a ticker thread writes to every 500 ms for each subscriber, through
//! `peregrine::body::channel`, while the same event loop keeps answering
//! `/` (a page that subscribes) and `/now`. A subscriber that reads too
//! slowly misses ticks (the ticker never waits for one); one that leaves
//! is dropped at the next tick, when its `try_send` fails.
//!
//! ```text
//! cargo run -p peregrine --example sse   # -- --bind ADDR, or PEREGRINE_BIND=ADDR
//! curl -N localhost:8080/events &  curl localhost:8080/now   # both answer
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use peregrine::body::{self, Sender, TrySendError};
use peregrine::{Request, Response, Server};

const PAGE: &str = "<!doctype html><title>ticks</title><pre id=log></pre>\n\
<script>new EventSource('/events').onmessage = e => log.textContent += e.data + '\\n'</script>\n";

/// Bytes queued per subscriber at most: a few events.
const QUEUE_BYTES: usize = 4096;

fn main() -> Result<(), peregrine::Error> {
    let subscribers: Arc<Mutex<Vec<Sender>>> = Arc::default();
    let ticker = subscribers.clone();
    std::thread::spawn(move || {
        for n in 1u64.. {
            std::thread::sleep(Duration::from_millis(500));
            let event = format!("id: {n}\ndata: tick {n}\n\n");
            ticker.lock().unwrap().retain(|tx| match tx.try_send(event.clone()) {
                Ok(()) | Err(TrySendError::Full(_)) => true,
                Err(TrySendError::Closed(_)) => false,
            });
        }
    });
    common::run(Server::new().workers(1), move |req: &Request<'_>| match req.path() {
        "/events" => {
            let (events, tx) = body::channel(QUEUE_BYTES);
            // A comment line at once, so the client knows it is subscribed.
            let _ = tx.try_send(": subscribed\n\n");
            subscribers.lock().unwrap().push(tx);
            Response::new(200)
                .with_content_type("text/event-stream")
                .with_header("Cache-Control", "no-store")
                .with_body(events)
        }
        "/now" => {
            let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            Response::text(format!("{secs}\n"))
        }
        "/" => Response::html(PAGE),
        _ => Response::error(404),
    })
}
