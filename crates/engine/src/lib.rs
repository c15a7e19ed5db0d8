//! Peregrine: a non-blocking HTTP/1.1, HTTP/2 and HTTP/3 server engine.
//!
//! One event loop per worker thread, each with its own SO_REUSEPORT
//! listener; keep-alive and pipelining with one write per batch of answers;
//! HTTP/2 by ALPN or prior knowledge, HTTP/3 over QUIC on every TLS port,
//! all to the same handlers; a handler is one function from a [`Request`]
//! to a [`Response`], and says what it does with request bodies
//! ([`Handler::body_use`]: buffered, read as they arrive, or ignored).
//!
//! ```no_run
//! use peregrine::{Request, Response, Router, Server};
//!
//! let app = Router::new()
//!     .get("/", |_: &Request<'_>| Response::text("Hello, World!"))
//!     .get("/users/:id", |req: &Request<'_>| {
//!         Response::text(format!("user {}", req.param("id").unwrap_or("?")))
//!     });
//! Server::new().bind("127.0.0.1:8080").serve(app).unwrap();
//! ```
//!
//! A handler that must wait answers later from any thread:
//!
//! ```no_run
//! use peregrine::{Reply, Request, Response, Server};
//!
//! Server::new().bind("127.0.0.1:8080").serve(|req: &Request<'_>| {
//!     let responder = req.defer();
//!     std::thread::spawn(move || responder.send(Response::text("later")));
//!     Reply::Later
//! }).unwrap();
//! ```
//!
//! HTTPS is a property of a listener, below handlers:
//! [`Server::bind_tls`] with a [`TlsConfig`] (rustls, TLS 1.2 and 1.3).
//!
//! Module map: [`codec`] is the sans-I/O HTTP/1.1 codec; `h1`, `h2` and
//! `h3` are the sans-I/O protocol state machines; `conn` (the TCP
//! connections' I/O driver), `quic` (QUIC's) and `worker` are the event
//! loop; `tls` holds certificates and each connection's rustls state;
//! [`host`] puts Host, `:authority` and SNI in one normal form and finds
//! a site by it;
//! [`outbound`] is the channel over which a sandboxed server asks its
//! unsandboxed parent for upstream connections; `sys` is the only place
//! that calls libc.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod access_log;
pub mod body;
mod budget;
mod buffers;
pub mod client_addr;
pub mod codec;
pub mod conditional;
mod conn;
mod date;
mod error;
/// The fuzz targets' entry points (`fuzz/`): test hooks, compiled only
/// for the tests and with the `fuzzing` feature, never into the product.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod h1;
mod h2;
mod h3;
mod handler;
mod health;
pub mod host;
mod limits;
pub mod log;
mod message;
mod metrics;
mod min_rate;
pub mod outbound;
pub mod pattern;
pub mod proxy;
mod quic;
pub mod range;
mod request;
mod responder;
mod response;
mod router;
mod server;
mod sites;
mod sources;
#[allow(unsafe_code)]
mod sys;
mod tls;
mod worker;
pub mod ws;

pub use access_log::{AccessLog, LogFormat, Reason};
pub use codec::{FieldNames, Version};
pub use date::now;
pub use error::Error;
pub use handler::{BodyUse, Handler, Reply};
pub use health::Health;
pub use limits::Limits;
pub use message::trailers::Trailers;
pub use metrics::Metrics;
pub use request::{percent_decode, Request, RequestId};
pub use responder::Responder;
pub use response::{Beside, Body, FileRange, HeaderBlock, Response, SharedBytes};
pub use router::Router;
pub use server::{Listening, Running, Server, ShutdownHandle};
pub use sites::{Site, SitesError, SITES_MAX};
pub use sys::privileges::Identity;
pub use sys::raise_open_files_limit;
pub use sys::stream::{remove_stale_socket, SOCKET_MODE, UNIX_PEER};
pub use tls::ktls::{status as kernel_tls_status, KernelTls};
pub use tls::{TicketKeys, TlsConfig};

/// A binary upgrade's system calls: listening sockets passed to the process
/// that starts the new executable and taken by the new one, and who sent a
/// signal.
pub mod upgrade {
    pub use crate::sys::upgrade::{
        pair, parent_pid, recv, send, set_inheritable, socket_kind, take_inherited, track_sender, uid, SignalSender,
        SocketKind, FDS_MAX, MESSAGE_BYTES_MAX,
    };
}

/// systemd: socket activation and readiness notification.
pub mod systemd {
    pub use crate::sys::systemd::{listen_fds, notify, notify_reloading};
}
