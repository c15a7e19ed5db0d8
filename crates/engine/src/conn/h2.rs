//! The HTTP/2 side of a connection: bytes read go to the `h2::Session`
//! (the protocol, which does no I/O), each complete stream goes to the
//! same handler HTTP/1.1 requests go to, and the frames the session
//! produces leave through the connection's own output buffer and flush
//! (plain or TLS). No sendfile: file bodies are read into DATA frames as
//! the flow-control windows allow. On cleartext connections the payloads
//! of lasting bodies (static, shared) are not copied: they leave from where
//! they live, by `writev` with the frames around them (`h2/splice.rs`,
//! `flush_h2`), at most `WRITE_BYTES_MAX` a call.
//!
//! A connection becomes HTTP/2 before its first request: when TLS
//! negotiated `h2` by ALPN, or when a cleartext client opens with the
//! HTTP/2 preface (h2c with prior knowledge, RFC 9113 §3.3). `Upgrade:
//! h2c` is not honoured (RFC 9113 §3.1 deprecates it): such a request is
//! answered over HTTP/1.1.
//!
//! Timeouts are the session's (`h2/timeout.rs`): the driver arms the
//! deadline `Session::poll_timeout` gives, and calls `handle_timeout` when
//! it passes.
//!
//! A stream whose head is complete and whose body is coming is offered to
//! its handler first (`start_upload_h2`): one wrapped in `body::streamed`
//! is called then, and the stream's window is given back only as its
//! reader takes the body.

use std::io::{self, IoSlice, Write};

use super::dispatch::{Deferral, Held};
use super::streams::{self, Client, Streams};
use super::{take_syscall, Conn, Ctx, Flushed, Phase, Proto, Stop, Transport};
use crate::body::BodySink;
use crate::codec::Version;
use crate::h2::{Expired, Session, Timeouts, PREFACE};
use crate::message::{Parts, Sent};
use crate::response::Response;

/// Bytes per `writev` on a cleartext HTTP/2 connection. Larger writes
/// cost the kernel more per byte: h2load -c 50 -m 32 on a 4 KiB file over
/// loopback, server and client on one CPU, server CPU µs per answer by
/// bytes per write (two rounds): 16 KiB 1.60, 1.66; 32 KiB 1.74, 1.78;
/// 48 KiB 1.23, 1.32; 64 KiB 1.35, 1.29; 128 KiB 1.64, 2.04; uncapped
/// (the whole batch, 32 answers, 128 KiB and more) 2.13, 2.22. h2o's
/// writes averaged 68 KiB under the same load.
const WRITE_BYTES_MAX: usize = 64 * 1024;

/// HTTP/2 in the connection's protocol slot: the session (the machine),
/// and the streams whose answers deferred handlers owe (as `Http1`).
pub(super) struct Http2 {
    pub(super) session: Session,
    /// Streams waiting for a deferred answer, with what the log and the
    /// metrics need when it comes.
    pub(super) deferred: Vec<Deferral>,
    /// The WebSockets on this connection's streams (RFC 8441), by stream.
    pub(super) tunnels: Vec<(u32, super::ws::Ws)>,
    /// The proxied WebSockets on its streams (`conn/tunnel.rs`), by stream.
    pub(super) proxied: Vec<(u32, super::tunnel::Tunnel)>,
    /// Answers whose bodies are being sent: their log lines and metrics
    /// wait for their streams' last DATA to be written.
    pub(super) held: Held,
}

impl Http2 {
    /// The streams' deferred answers still owed.
    pub(super) fn n_deferred(&self) -> usize {
        self.deferred.len()
    }
}

/// What the first bytes of a connection say about HTTP/2.
pub(super) enum Preface {
    /// The HTTP/2 preface: switch.
    Yes,
    /// A prefix of it: wait for more bytes.
    Maybe,
    No,
}

pub(super) fn preface(data: &[u8]) -> Preface {
    if data.starts_with(PREFACE) {
        Preface::Yes
    } else if PREFACE.starts_with(data) {
        Preface::Maybe
    } else {
        Preface::No
    }
}

/// `h2::Session` as the request path sees it: with the output buffer its
/// frames go into.
struct H2Streams<'c> {
    session: &'c mut Session,
    out: &'c mut Vec<u8>,
    extra_fields: &'c [u8],
    budget: usize,
}

impl Streams for H2Streams<'_> {
    const VERSION: Version = Version::Http2;
    const IGNORED_BODY_ANSWERED_AT_HEAD: bool = false;

    fn refused(&self, id: u64) -> Option<u16> {
        self.session.refused(id as u32).map(|(status, _)| status)
    }

    fn parts(&self, id: u64) -> Option<Parts<'_>> {
        self.session.parts(id as u32)
    }

    #[inline]
    fn respond(&mut self, id: u64, resp: &mut Response, head_only: bool, date: &[u8]) -> Option<Sent> {
        self.session.respond(
            id as u32,
            resp,
            head_only,
            date,
            self.extra_fields,
            self.out,
            self.budget,
        )
    }

    fn send_continue(&mut self, id: u64) {
        self.session.send_continue(id as u32, self.out);
    }

    fn stream_body(&mut self, id: u64, sink: BodySink) {
        self.session.stream_body(id as u32, sink);
    }

    fn ignore_body(&mut self, id: u64) {
        self.session.ignore_body(id as u32);
    }

    fn defer(&mut self, id: u64, defer_id: u64) {
        self.session.defer(id as u32, defer_id);
    }

    fn deferred_stream(&self, defer_id: u64) -> Option<u64> {
        self.session.deferred_stream(defer_id).map(u64::from)
    }

    fn tunnel(&mut self, id: u64, resp: &Response, date: &[u8]) -> bool {
        self.session
            .accept_tunnel(id as u32, resp, date, self.extra_fields, self.out)
    }

    fn stop_reading(&mut self, _id: u64) {}
}

impl Conn {
    /// TLS negotiated `h2` by ALPN.
    pub(super) fn alpn_h2(&self) -> bool {
        matches!(&self.transport, Transport::Tls(tls) if tls.alpn_h2())
    }

    /// Turns this connection into an HTTP/2 one: queues the server's
    /// preface and makes room in the read buffer for a whole frame.
    pub(super) fn start_h2(&mut self, ctx: &mut Ctx<'_>) {
        let Some(cfg) = ctx.h2 else { return };
        let mut session = Session::new(cfg);
        session.set_splicing(!matches!(self.transport, Transport::Tls(_)));
        session.set_timeouts(Timeouts::of(ctx.limits));
        self.ensure_output(ctx.pool);
        session.start(&mut self.output.buf);
        self.switch(Proto::H2(Box::new(Http2 {
            session,
            deferred: Vec::new(),
            tunnels: Vec::new(),
            proxied: Vec::new(),
            held: Vec::new(),
        })));
    }
    /// Feeds the read bytes to the session, answers the streams that are
    /// complete, and queues DATA while the windows and the output budget
    /// allow; then holds what the answers' bodies hold unsent against
    /// the worker's output budget.
    pub(super) fn process_h2(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let stop = self.process_h2_pass(ctx);
        if let Some(h2) = self.proto.h2_mut() {
            h2.session.unsent().charge(ctx.pool);
        }
        stop
    }

    /// `process_h2` but the charge. Bytes queued for the socket past the
    /// connection's share (`write_buffer_bytes_max`), or any while the
    /// worker's budget is spent, stop it before it reads; bodies held
    /// unsent past that share (`over_share_h2`) only stop it taking new
    /// streams: it goes on reading, since what would let them go (the
    /// client's WINDOW_UPDATE) comes that way.
    #[inline(always)]
    fn process_h2_pass(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let budget = ctx.limits.write_buffer_bytes_max;
        self.ensure_output(ctx.pool);
        let Some(h2) = self.proto.h2_mut() else {
            return Stop::Closing;
        };
        if ctx.draining {
            h2.session.go_away(&mut self.output.buf);
        }
        let queued = self.output.buf.len() - self.output.pos + h2.session.splices.bytes();
        if queued > budget {
            return Stop::Output;
        }
        if Self::over_output_budget(ctx, queued) {
            if let Some(m) = ctx.metrics {
                m.output_budget_waits.add(1);
            }
            return Stop::Output;
        }
        let bodies = h2.session.bodies();
        bodies.charge(ctx.pool, ctx.metrics);
        bodies.set_room(ctx.pool, ctx.limits.body_budget_bytes);
        let input = &mut self.input;
        if input.start < input.end {
            let used = h2
                .session
                .handle_input(&input.buf[input.start..input.end], &mut self.output.buf);
            input.start += used;
            if input.start == input.end {
                input.start = 0;
                input.end = 0;
            }
        }
        h2.session.bodies().charge(ctx.pool, ctx.metrics);
        // Heads whose body is coming: a handler that reads bodies as they
        // arrive is called now.
        while let Some(id) = self.proto.h2_mut().and_then(|h2| h2.session.take_head()) {
            self.start_upload_h2(ctx, id);
        }
        if let Some(h2) = self.proto.h2_mut() {
            h2.session.grant_uploads(&mut self.output.buf);
        }
        // Streams whose requests wait because the bodies held are over
        // the connection's share: see the end.
        let mut held_back = false;
        loop {
            if self.work_left == 0 {
                return Stop::Turn;
            }
            let Some(h2) = self.proto.h2_mut() else {
                return Stop::Closing;
            };
            if h2.session.unsent_bytes() != 0 && h2.session.has_ready() {
                let queued = self.output.buf.len() - self.output.pos + h2.session.splices.bytes();
                if Self::over_share_h2(ctx, &mut h2.session, queued) {
                    held_back = true;
                    break;
                }
            }
            let Some(id) = h2.session.take_ready() else { break };
            self.work_left -= 1;
            self.answer_h2(ctx, id);
            if self.h2_queued() > budget {
                return Stop::Output;
            }
        }
        if self.proto.h2().is_some_and(|h2| !h2.tunnels.is_empty()) {
            self.process_tunnels(ctx);
        }
        if self.proto.h2().is_some_and(|h2| !h2.proxied.is_empty()) {
            self.process_proxied(ctx);
        }
        let Some(h2) = self.proto.h2_mut() else {
            return Stop::Closing;
        };
        if h2.session.wants_send() {
            h2.session.send(&mut self.output.buf, budget);
        }
        if h2.session.is_done() {
            self.phase = Phase::Closing;
            return Stop::Closing;
        }
        let wants_send = h2.session.wants_send();
        if self.h2_queued() > budget || wants_send {
            return Stop::Output;
        }
        // `send` may have ended the bodies that held the streams back:
        // another pass answers them, as no event from the client may come.
        if held_back {
            let Some(h2) = self.proto.h2_mut() else {
                return Stop::Closing;
            };
            let queued = self.output.buf.len() - self.output.pos + h2.session.splices.bytes();
            if h2.session.unsent_bytes() == 0 || !Self::over_share_h2(ctx, &mut h2.session, queued) {
                return Stop::Output;
            }
        }
        Stop::Input
    }

    /// A connection whose answers' bodies hold memory unsent
    /// (`Session::unsent`) takes no new stream while that, with `queued`
    /// (bytes for the socket), is over its share, `write_buffer_bytes_max`
    /// (what HTTP/1.1 queues before it stops answering a pipelining
    /// client), or while the worker's output budget is spent: its requests
    /// wait in the session, as an HTTP/1.1 client's pipelined requests
    /// wait in its socket. One holding nothing takes one, as an HTTP/1.1
    /// connection with nothing queued is read: a connection's memory is
    /// then its share and one answer, however small the client's windows.
    /// Charges the bodies to the worker first, so that the budget seen is
    /// this pass's.
    fn over_share_h2(ctx: &mut Ctx<'_>, session: &mut Session, queued: usize) -> bool {
        session.unsent().charge(ctx.pool);
        if session.unsent_bytes() + queued > ctx.limits.write_buffer_bytes_max {
            return true;
        }
        if ctx.pool.output_held() > ctx.limits.output_budget_bytes {
            if let Some(m) = ctx.metrics {
                m.output_budget_waits.add(1);
            }
            return true;
        }
        false
    }

    /// The connection is closing: what its streams held goes back to the
    /// worker's body budget.
    pub(super) fn release_h2(&mut self, pool: &mut crate::conn::BufPool) {
        if let Some(h2) = self.proto.h2_mut() {
            h2.session.bodies().release(pool);
            h2.session.unsent().release(pool);
        }
    }

    /// Bytes queued for the client: the output buffer's and the slices'.
    fn h2_queued(&self) -> usize {
        let spliced = self.proto.h2().map_or(0, |h2| h2.session.splices.bytes());
        self.output.buf.len() - self.output.pos + spliced
    }

    /// Some DATA payloads wait as slices beside the output buffer.
    pub(super) fn h2_spliced(&self) -> bool {
        self.proto.h2().is_some_and(|h2| !h2.session.splices.is_empty())
    }

    /// Writes what a cleartext HTTP/2 connection queued, until done or the
    /// socket is full: the output buffer with the slices queued between its
    /// bytes, by `writev`, at most `WRITE_BYTES_MAX` a call.
    pub(super) fn flush_h2(&mut self) -> Flushed {
        /// iovecs per `writev`: a frame run and a slice per response, 16
        /// responses of 4 KiB in a 64 KiB write (the kernel allows 1024).
        const IOV: usize = 128;
        let mut progress = false;
        let Some(h2) = self.proto.h2_mut() else {
            return Flushed::Failed;
        };
        let splices = &mut h2.session.splices;
        let out = &mut self.output;
        debug_assert!(out.tail.is_none(), "HTTP/2 queues no tail");
        loop {
            if splices.is_empty() && out.pos >= out.buf.len() {
                out.buf.clear();
                out.pos = 0;
                return Flushed::All;
            }
            if !take_syscall(&mut self.work_left) {
                return Flushed::Turn;
            }
            let mut iov = [IoSlice::new(&[]); IOV];
            let n_iov = splices.gather(&out.buf, out.pos, &mut iov, WRITE_BYTES_MAX);
            match self.stream.write_vectored(&iov[..n_iov]) {
                Ok(0) => return Flushed::Failed,
                Ok(n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                    splices.advance(&mut out.pos, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Flushed::Failed,
            }
        }
    }

    /// The request path's view of this connection's session (`streams.rs`)
    /// and who its requests come from, beside the list of deferred answers.
    #[allow(clippy::type_complexity)]
    fn h2_streams(&mut self, ctx: &Ctx<'_>) -> Option<(H2Streams<'_>, Client<'_>, (&mut Vec<Deferral>, &mut Held))> {
        let Conn {
            proto,
            output,
            transport,
            token,
            peer,
            proxy_source,
            redirect,
            ..
        } = self;
        let h2 = proto.h2_mut()?;
        let view = H2Streams {
            session: &mut h2.session,
            out: &mut output.buf,
            extra_fields: transport.extra_fields(),
            budget: ctx.limits.write_buffer_bytes_max,
        };
        let client = Client {
            peer: *peer,
            proxy_source: *proxy_source,
            tls: transport.request_tls(),
            tls_facts: transport.tls_facts(),
            token: *token,
            redirect: *redirect,
        };
        Some((view, client, (&mut h2.deferred, &mut h2.held)))
    }

    /// Calls the handler for stream `id` and queues its answer; a
    /// WebSocket it accepted runs on the stream.
    fn answer_h2(&mut self, ctx: &mut Ctx<'_>, id: u32) {
        let Some((mut view, client, deferred)) = self.h2_streams(ctx) else {
            return;
        };
        if let Some(upgrade) = streams::answer(ctx, &mut view, client, deferred, u64::from(id)) {
            self.start_tunnel(ctx, id, *upgrade.0);
        }
    }

    /// Stream `id`'s head is complete and its body is coming: see
    /// `streams::start_upload`.
    fn start_upload_h2(&mut self, ctx: &mut Ctx<'_>, id: u32) {
        if let Some((mut view, client, deferred)) = self.h2_streams(ctx) {
            streams::start_upload(ctx, &mut view, client, deferred, u64::from(id));
        }
    }

    /// A deferred answer for this HTTP/2 connection.
    pub(super) fn on_answer_h2(&mut self, ctx: &mut Ctx<'_>, id: u64, mut response: Response) -> bool {
        if !self.proto.is_h2() {
            return false;
        }
        self.ensure_output(ctx.pool);
        let Some((mut view, client, deferred)) = self.h2_streams(ctx) else {
            return false;
        };
        streams::on_answer(ctx, &mut view, client.peer, deferred, id, &mut response)
    }

    /// A deadline passed: returns true if the connection has work (GOAWAY
    /// written and the connection closing, when one of the session's
    /// timeouts ended it; or slow streams answered 408 or reset, the
    /// others going on); else (bodies keeping their rate) sets the next
    /// deadline.
    pub(super) fn time_out_h2(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.ensure_output(ctx.pool);
        let Some(h2) = self.proto.h2_mut() else { return true };
        match h2.session.handle_timeout(ctx.now, &mut self.output.buf) {
            None => {
                self.h2_deadline(ctx);
                false
            }
            Some(expired) => {
                if let Some(m) = ctx.metrics {
                    match expired {
                        Expired::SlowRequest(_) => m.slow_requests.add(1),
                        Expired::SlowStreams(n) => m.slow_requests.add(n as u64),
                        Expired::Idle | Expired::WindowClosed => {}
                    }
                }
                if expired.ends_connection() {
                    self.phase = Phase::Closing;
                }
                true
            }
        }
    }

    /// Ends the held records of streams that have sent their last DATA
    /// (all of them with `all`: the connection closes).
    pub(super) fn end_held_h2(&mut self, ctx: &mut Ctx<'_>, all: bool) {
        let peer = self.peer;
        let Some(h2) = self.proto.h2_mut() else { return };
        let mut i = 0;
        while i < h2.held.len() {
            let id = h2.held[i].0 as u32;
            if all || !h2.session.is_sending(id) {
                let (_, sending) = h2.held.swap_remove(i);
                sending.end(ctx, peer);
            } else {
                i += 1;
            }
        }
    }

    /// Sets the deadline the session asks for (`h2/timeout.rs`).
    pub(super) fn h2_deadline(&mut self, ctx: &Ctx<'_>) {
        // A frame begun and not finished, which the session has not seen.
        let partial = &self.input.buf[self.input.start..self.input.end.max(self.input.start)];
        let Some(h2) = self.proto.h2_mut() else { return };
        let mut deadline = h2.session.poll_timeout(ctx.now, partial);
        if !h2.tunnels.is_empty() {
            if let Some(at) = self.tunnels_deadline() {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
        }
        if self.proto.h2().is_some_and(|h2| !h2.proxied.is_empty()) {
            if let Some(at) = self.proxied_deadline() {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
        }
        self.state_deadline = deadline;
    }
}
