//! Routing by method and path pattern, with captured parameters.
//!
//! ```text
//! cargo run -p peregrine --example router   # -- --bind ADDR, or PEREGRINE_BIND=ADDR
//! curl localhost:8080/users/42          # user 42
//! curl localhost:8080/users/%E2%9C%93   # user ✓ (captures are percent-decoded)
//! curl -X POST -d hi localhost:8080/echo # hi
//! curl -X DELETE localhost:8080/echo     # 405, Allow: POST, OPTIONS
//! curl localhost:8080/static/css/a.css   # rest = css/a.css
//! ```

mod common;

use peregrine::{Request, Response, Router, Server};

fn main() -> Result<(), peregrine::Error> {
    let app = Router::new()
        .get("/", |_: &Request<'_>| Response::html("<h1>Peregrine</h1>"))
        .get("/users/:id", |req: &Request<'_>| {
            Response::text(format!("user {}\n", req.param("id").unwrap_or("?")))
        })
        .post("/echo", |req: &Request<'_>| {
            Response::bytes("application/octet-stream", req.body().to_vec())
        })
        .get("/static/*rest", |req: &Request<'_>| {
            Response::text(format!("rest = {}\n", req.param("rest").unwrap_or("")))
        });
    common::run(Server::new(), app)
}
