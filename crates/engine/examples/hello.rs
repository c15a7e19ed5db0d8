//! The smallest server: `Hello, World!` on every path.
//!
//! `cargo run --release -p peregrine --example hello` then `curl localhost:8080`.

use peregrine::{Request, Response, Server};

fn main() -> Result<(), peregrine::Error> {
    Server::new()
        .bind("127.0.0.1:8080")
        .serve(|_req: &Request<'_>| Response::text("Hello, World!"))
}
