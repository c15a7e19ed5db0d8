//! The smallest server: `Hello, World!` on every path.
//!
//! `cargo run --release -p peregrine --example hello` then `curl localhost:8080`;
//! `-- --bind 0.0.0.0:3000` (or `PEREGRINE_BIND=0.0.0.0:3000`) listens elsewhere.

mod common;

use peregrine::{Request, Response, Server};

fn main() -> Result<(), peregrine::Error> {
    common::run(Server::new(), |_req: &Request<'_>| Response::text("Hello, World!"))
}
