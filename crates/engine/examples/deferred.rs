//! Answers from a thread pool: `/slow` waits 500 ms on a pool thread (as a
//! database call would) while the same event loop keeps serving `/fast`.
//!
//! ```text
//! cargo run -p peregrine --example deferred   # -- --bind ADDR, or PEREGRINE_BIND=ADDR
//! curl localhost:8080/slow &  curl localhost:8080/fast   # fast answers first
//! ```

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use peregrine::{Reply, Request, Responder, Response, Server};

/// A minimal fixed-size pool: jobs go down a channel to N threads.
struct Pool {
    jobs: Mutex<mpsc::Sender<(String, Responder)>>,
}

impl Pool {
    fn new(n_threads: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<(String, Responder)>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..n_threads {
            let rx = rx.clone();
            std::thread::spawn(move || loop {
                let job = rx.lock().unwrap().recv();
                let Ok((what, responder)) = job else { return };
                std::thread::sleep(Duration::from_millis(500)); // the slow work
                responder.send(Response::text(format!("{what} done after 500 ms\n")));
            });
        }
        Pool { jobs: Mutex::new(tx) }
    }
}

fn main() -> Result<(), peregrine::Error> {
    let pool = Pool::new(4);
    common::run(Server::new().workers(1), move |req: &Request<'_>| -> Reply {
        if req.path() == "/slow" {
            let responder = req.defer();
            let _ = pool.jobs.lock().unwrap().send((req.path().to_owned(), responder));
            return Reply::Later;
        }
        Response::text("fast\n").into()
    })
}
