//! Uploads of any size, read as they arrive: `POST /upload` counts and
//! hashes (FNV-1a, 64 bits) the body on a thread of its own while the
//! event loop goes on; memory stays at the reader's buffer (256 KiB) and
//! the thread's, whatever the size. The body limit still holds (here
//! 16 GiB): past it the client gets 413.
//!
//! ```text
//! cargo run -p peregrine --example upload   # -- --bind ADDR, or PEREGRINE_BIND=ADDR
//! head -c 1G /dev/urandom | curl -T - localhost:8080/upload   # chunked
//! curl --data-binary @big.iso localhost:8080/upload           # Content-Length
//! ```

use std::io::Read;

mod common;

use peregrine::{body, Limits, Reply, Request, Response, Router, Server};

/// FNV-1a, 64 bits: enough to compare an upload with its source.
struct Fnv(u64);

impl Fnv {
    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn upload(req: &Request<'_>) -> Reply {
    let Some(mut reader) = req.body_reader() else {
        return Response::text("0 bytes, fnv1a64 cbf29ce484222325\n").into();
    };
    let responder = req.defer();
    std::thread::spawn(move || {
        let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
        let mut n = 0u64;
        let mut buf = vec![0; 64 * 1024];
        let answer = loop {
            match reader.read(&mut buf) {
                Ok(0) => break Response::text(format!("{n} bytes, fnv1a64 {:016x}\n", hash.0)),
                Ok(got) => {
                    hash.update(&buf[..got]);
                    n += got as u64;
                }
                // Over the limit (the client gets 413 whatever we say),
                // or the client left.
                Err(e) => break Response::text(format!("upload failed: {e}\n")).with_status(400),
            }
        };
        responder.send(answer);
    });
    Reply::Later
}

fn main() -> Result<(), peregrine::Error> {
    let limits = Limits {
        body_bytes_max: 16 << 30,
        ..Limits::default()
    };
    // Every route here streams: a buffered one would hold up to the
    // limit in memory.
    let app = Router::new()
        .post("/upload", body::streamed(upload))
        .put("/upload", body::streamed(upload));
    common::run(Server::new().workers(1).limits(limits), app)
}
