//! The PROXY protocol phase of a connection accepted on a listener that
//! requires it (`Server::proxy_protocol`): the header (`codec::proxy`,
//! HAProxy's v1 or v2) is read before any protocol sees a byte, then the
//! connection goes on as any other, its header's source kept for
//! `Request::client_addr`.
//!
//! Required, never guessed: a listener that requires the header refuses a
//! connection without one, and one that does not never looks for it
//! (nginx's `listen ... proxy_protocol`, HAProxy's `accept-proxy`; a
//! client able to reach the port could otherwise claim any address).
//! The peer was checked against the listener's trusted sources at accept
//! (`worker.rs`), before any byte was read.
//!
//! The header is looked at with MSG_PEEK and only its own bytes are then
//! read (HAProxy's `conn_recv_proxy`, nginx's TLS path): what follows it
//! stays in the socket for TLS (the ClientHello comes after the header) or
//! for HTTP, read as on any connection. A header split over several
//! segments is peeked again, whole, at each one; the 4 KiB bound
//! (`PROXY_HEADER_BYTES_MAX`) and `Limits::proxy_header_timeout` bound what
//! that costs, and the parser refuses at the first byte that cannot begin
//! a header, so garbage is refused at once, not after the timeout.
//!
//! A refusal closes the connection unanswered, with a debug line and the
//! `peregrine_proxy_protocol_refusals_total` counter. HAProxy and nginx do
//! the same whatever is wrong (HAProxy: "the receiver must abort the
//! connection", §2.1 of its specification; nginx logs "broken header" and
//! closes): the peer is a proxy, not a browser, and an HTTP error written
//! into what may be a TLS stream would help nobody.

use std::io::{self, Read};

use super::{Conn, Ctx, Next, Phase, Proto};
use crate::codec::proxy::{self, Parsed, PROXY_HEADER_BYTES_MAX};

impl Conn {
    /// Reads the PROXY header if it has all arrived. `None`: it has, the
    /// connection now serves (its head timeout starting now); else what
    /// the worker should do (wait for more, or close a refused one).
    pub(super) fn read_proxy_header(&mut self, ctx: &mut Ctx<'_>) -> Option<Next> {
        // The whole header fits; nothing after it is taken.
        let mut buf = [0u8; PROXY_HEADER_BYTES_MAX];
        let n = loop {
            match self.stream.peek(&mut buf) {
                Ok(0) => return Some(self.refuse_proxy(ctx, "closed before its PROXY header")),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(Next::Keep),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(Next::Close),
            }
        };
        let (header, len) = match proxy::parse(&buf[..n]) {
            Ok(Parsed::Complete { header, len }) => (header, len),
            // Never with `n` at the bound: the parser refuses a header
            // that would pass it (`TooLarge`, `LineTooLong`) first.
            Ok(Parsed::Partial) => return Some(Next::Keep),
            Err(e) => return Some(self.refuse_proxy(ctx, e.reason())),
        };
        // The header's bytes are in the socket (just peeked): take them.
        let mut taken = 0;
        while taken < len {
            match self.stream.read(&mut buf[taken..len]) {
                Ok(0) => return Some(Next::Close),
                Ok(k) => taken += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(Next::Close),
            }
        }
        self.proxy_source = header.source;
        self.phase = Phase::Open;
        // The request (or the TLS handshake) gets its own time from here.
        let deadline = ctx.now.checked_add(ctx.limits.head_timeout);
        self.proto = Proto::H1(super::h1::Http1::new(deadline));
        self.state_deadline = deadline;
        self.deadline = deadline;
        // Nothing after the header yet: no read would find anything until
        // the next readiness event (which its arrival raises).
        self.drained = n == len;
        None
    }

    /// Closes a connection whose PROXY header is missing, malformed or
    /// late, saying why at debug level.
    pub(super) fn refuse_proxy(&mut self, ctx: &Ctx<'_>, why: &str) -> Next {
        crate::log::debug(format_args!(
            "PROXY protocol: connection from {} closed: {why}",
            self.peer
        ));
        if let Some(m) = ctx.metrics {
            m.proxy_refusals.add(1);
        }
        Next::Close
    }
}
