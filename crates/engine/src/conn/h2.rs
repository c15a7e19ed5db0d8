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
//! Timeouts, each ending the connection with GOAWAY: with no stream open,
//! `idle_timeout` since the last request frame (HEADERS, CONTINUATION,
//! DATA) or stream: PING, SETTINGS, WINDOW_UPDATE and PRIORITY never
//! restart it, else a client could hold a connection for hours within its
//! control-frame budget; a header block (or any frame but DATA) begun must
//! be complete within `head_timeout`; while a request's body is arriving,
//! the minimum rate of `Limits::body_timeout` and
//! `min_rate_bytes_per_sec` over the request frames (`min_rate.rs`); while
//! responses wait only for the client's window, `send_timeout` since the
//! last DATA byte left. Deferred answers have no timeout, as on HTTP/1.1,
//! nor do a body whose producer has nothing yet (`body::channel`) and an
//! upload whose reader is behind (`body::streamed`).
//!
//! A stream whose head is complete and whose body is coming is offered to
//! its handler first (`start_upload_h2`): one wrapped in `body::streamed`
//! is called then, and the stream's window is given back only as its
//! reader takes the body.

use std::cell::RefCell;
use std::io::{self, IoSlice, Write};
use std::time::Instant;

use super::dispatch::{self, Called, Deferral};
use super::{take_syscall, Conn, Ctx, Flushed, Phase, Stop, Transport};
use crate::codec::Version;
use crate::message::head::FieldArray;
use crate::message::Sent;
use crate::h2::{Session, PREFACE};
use crate::handler::BodyUse;
use crate::limits::BODY_READER_BYTES;
use crate::min_rate::{MinRate, Rate};
use crate::request::Request;
use crate::response::Response;

/// Bytes per `writev` on a cleartext HTTP/2 connection. Larger writes
/// cost the kernel more per byte: h2load -c 50 -m 32 on a 4 KiB file over
/// loopback, server and client on one CPU, server CPU µs per answer by
/// bytes per write (two rounds): 16 KiB 1.60, 1.66; 32 KiB 1.74, 1.78;
/// 48 KiB 1.23, 1.32; 64 KiB 1.35, 1.29; 128 KiB 1.64, 2.04; uncapped
/// (the whole batch, 32 answers, 128 KiB and more) 2.13, 2.22. h2o's
/// writes averaged 68 KiB under the same load.
const WRITE_BYTES_MAX: usize = 64 * 1024;

/// An HTTP/2 connection's state beside the session.
pub(super) struct H2 {
    pub(super) session: Session,
    /// Streams waiting for a deferred answer, with what the log and the
    /// metrics need when it comes.
    deferred: Vec<Deferral>,
    /// Body bytes sent when the send timeout was last restarted.
    sent_mark: u64,
    /// While responses wait for the client's window: since when.
    blocked_since: Option<Instant>,
    /// The minimum rate of request frames while some stream is receiving.
    rate: Option<MinRate>,
    /// When the connection last had a stream open or received a request
    /// frame (HEADERS, CONTINUATION, DATA), and the count of those bytes
    /// then: the idle timeout runs from it, so PING, SETTINGS,
    /// WINDOW_UPDATE and PRIORITY never keep a connection alive.
    active_since: Instant,
    active_mark: u64,
    /// Since when a header block (or a frame other than DATA) has been
    /// begun and not finished: it must be within `head_timeout`.
    block_since: Option<Instant>,
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
        self.ensure_output(ctx.pool);
        session.start(&mut self.output.buf);
        self.h2 = Some(Box::new(H2 {
            session,
            deferred: Vec::new(),
            sent_mark: 0,
            blocked_since: None,
            rate: None,
            active_since: ctx.now,
            active_mark: 0,
            block_since: None,
        }));
    }

    /// Feeds the read bytes to the session, answers the streams that are
    /// complete, and queues DATA while the windows and the output budget
    /// allow.
    pub(super) fn process_h2(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let budget = ctx.limits.write_buffer_bytes_max;
        self.ensure_output(ctx.pool);
        let Some(h2) = self.h2.as_mut() else {
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
                .recv(&input.buf[input.start..input.end], &mut self.output.buf);
            input.start += used;
            if input.start == input.end {
                input.start = 0;
                input.end = 0;
            }
        }
        h2.session.bodies().charge(ctx.pool, ctx.metrics);
        // Heads whose body is coming: a handler that reads bodies as they
        // arrive is called now.
        while let Some(id) = self.h2.as_mut().and_then(|h2| h2.session.take_head()) {
            self.start_upload_h2(ctx, id);
        }
        if let Some(h2) = self.h2.as_mut() {
            h2.session.grant_uploads(&mut self.output.buf);
        }
        loop {
            if self.work_left == 0 {
                return Stop::Turn;
            }
            let Some(h2) = self.h2.as_mut() else {
                return Stop::Closing;
            };
            let Some(id) = h2.session.take_ready() else { break };
            self.work_left -= 1;
            self.answer_h2(ctx, id);
            if self.h2_queued() > budget {
                return Stop::Output;
            }
        }
        let Some(h2) = self.h2.as_mut() else {
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
        Stop::Input
    }

    /// The connection is closing: what its streams held goes back to the
    /// worker's body budget.
    pub(super) fn release_h2(&mut self, pool: &mut crate::conn::BufPool) {
        if let Some(h2) = self.h2.as_mut() {
            h2.session.bodies().release(pool);
        }
    }

    /// Bytes queued for the client: the output buffer's and the slices'.
    fn h2_queued(&self) -> usize {
        let spliced = self.h2.as_ref().map_or(0, |h2| h2.session.splices.bytes());
        self.output.buf.len() - self.output.pos + spliced
    }

    /// Some DATA payloads wait as slices beside the output buffer.
    pub(super) fn h2_spliced(&self) -> bool {
        self.h2.as_ref().is_some_and(|h2| !h2.session.splices.is_empty())
    }

    /// Writes what a cleartext HTTP/2 connection queued, until done or the
    /// socket is full: the output buffer with the slices queued between its
    /// bytes, by `writev`, at most `WRITE_BYTES_MAX` a call.
    pub(super) fn flush_h2(&mut self) -> Flushed {
        /// iovecs per `writev`: a frame run and a slice per response, 16
        /// responses of 4 KiB in a 64 KiB write (the kernel allows 1024).
        const IOV: usize = 128;
        let mut progress = false;
        let Some(h2) = self.h2.as_mut() else {
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

    /// Calls the handler for stream `id` and queues its answer.
    fn answer_h2(&mut self, ctx: &mut Ctx<'_>, id: u32) {
        let Conn {
            h2,
            output,
            transport,
            token,
            peer,
            redirect,
            ..
        } = self;
        let Some(h2) = h2.as_mut() else { return };
        let extra_fields = transport.extra_fields();
        let budget = ctx.limits.write_buffer_bytes_max;
        let dates = ctx.date;
        let date = &dates.http()[..];
        if let Some((status, _why)) = h2.session.refused(id) {
            let mut resp = Response::error(status);
            let sent = h2
                .session
                .respond(id, &mut resp, false, date, extra_fields, &mut output.buf, budget);
            if let (Some(log), Some(sent)) = (ctx.log.as_deref_mut(), sent) {
                log.record(&super::refused_line(
                    ctx.date.clf(),
                    *peer,
                    b"HTTP/2.0",
                    sent.status,
                    ctx.now,
                ));
            }
            if let Some(m) = ctx.metrics {
                m.record(b"-", status, ctx.now);
            }
            return;
        }
        let Some(parts) = h2.session.parts(id) else {
            // A stream without :method or :path passed the checks only as
            // CONNECT; answer what a malformed request gets.
            let sent = h2.session.respond(
                id,
                &mut Response::error(400),
                false,
                date,
                extra_fields,
                &mut output.buf,
                budget,
            );
            if let (Some(m), Some(sent)) = (ctx.metrics, sent) {
                m.record(b"-", sent.status, ctx.now);
            }
            return;
        };
        let mut fields = FieldArray::new();
        let headers = fields.fill(parts.head);
        let slot = dispatch::slot(ctx, *token);
        let mut req = Request::new(
            parts.method,
            parts.target,
            Version::Http2,
            headers,
            parts.host,
            parts.body,
            *peer,
        );
        req.defer = Some(&slot);
        let head_only = parts.method == "HEAD";
        let mut handled = dispatch::call_stream(ctx, *redirect, &req);
        // Answered where the handler left it: moving the large struct out
        // was a memcpy per request (about 1% of h2load's profile).
        let response = match dispatch::settle(ctx, &slot, &req, &mut handled) {
            Called::Now(response) => response,
            Called::Later(deferral) => {
                h2.session.defer(id, deferral.id);
                h2.deferred.push(deferral);
                return;
            }
        };
        let sent = Sent::of(response, head_only);
        dispatch::record(ctx, &req, sent.status, sent.body_bytes);
        h2.session
            .respond(id, response, head_only, date, extra_fields, &mut output.buf, budget);
    }

    /// Stream `id`'s head is complete and its body is coming: if its
    /// handler reads bodies as they arrive (`body::streamed`), calls it
    /// now with a reader, and the body goes to it as DATA arrives.
    fn start_upload_h2(&mut self, ctx: &mut Ctx<'_>, id: u32) {
        let Conn {
            h2,
            output,
            transport,
            token,
            peer,
            redirect,
            ..
        } = self;
        let Some(h2) = h2.as_mut() else { return };
        if h2.session.refused(id).is_some() {
            return; // answered without the handler (413 already, 431)
        }
        let Some(parts) = h2.session.parts(id) else { return };
        let mut fields = FieldArray::new();
        let headers = fields.fill(parts.head);
        let mut req = Request::new(
            parts.method,
            parts.target,
            Version::Http2,
            headers,
            parts.host,
            &[],
            *peer,
        );
        match dispatch::body_use(ctx, *redirect, &req) {
            BodyUse::Stream => {}
            BodyUse::Ignore => {
                // Dropped as it comes; the stream answered with an empty
                // body (`Session::ignore_body` says when).
                if let Some(m) = ctx.metrics {
                    m.bodies_ignored.add(1);
                }
                h2.session.ignore_body(id);
                return;
            }
            _ => {
                // The body is collected, then the handler called: a client
                // waiting for 100 Continue may send it.
                h2.session.send_continue(id, &mut output.buf);
                return;
            }
        }
        // Read as it arrives: the handler is called now.
        let (reader, sink) = crate::body::pipe(BODY_READER_BYTES);
        sink.bind(ctx.mailbox, *token);
        let reader = RefCell::new(Some(reader));
        req.reader = Some(&reader);
        let slot = dispatch::slot(ctx, *token);
        req.defer = Some(&slot);
        let head_only = parts.method == "HEAD";
        let mut handled = dispatch::call(ctx, *redirect, &req);
        // A reader not taken is dropped: the body is discarded.
        let taken = reader.borrow_mut().take().is_none();
        let answer = match dispatch::settle(ctx, &slot, &req, &mut handled) {
            Called::Now(response) => {
                let response = std::mem::replace(response, Response::new(200));
                let sent = Sent::of(&response, head_only);
                dispatch::record(ctx, &req, sent.status, sent.body_bytes);
                Ok(response)
            }
            Called::Later(deferral) => Err(deferral),
        };
        if taken {
            // The handler reads the body: a client waiting for 100
            // Continue may send it (before any final answer below).
            h2.session.send_continue(id, &mut output.buf);
        }
        let mut response = match answer {
            Ok(response) => response,
            Err(deferral) => {
                h2.session.stream_body(id, sink);
                h2.session.defer(id, deferral.id);
                h2.deferred.push(deferral);
                return;
            }
        };
        h2.session.stream_body(id, sink);
        let date = &ctx.date.http()[..];
        h2.session.respond(
            id,
            &mut response,
            head_only,
            date,
            transport.extra_fields(),
            &mut output.buf,
            ctx.limits.write_buffer_bytes_max,
        );
    }

    /// A deferred answer for this HTTP/2 connection.
    pub(super) fn on_answer_h2(&mut self, ctx: &mut Ctx<'_>, id: u64, mut response: Response) -> bool {
        let Some(h2) = self.h2.as_mut() else { return false };
        let Some(at) = h2.deferred.iter().position(|d| d.id == id) else {
            return false;
        };
        let wait = h2.deferred.swap_remove(at);
        // The client may have reset the stream meanwhile.
        let Some(stream) = h2.session.deferred_stream(id) else {
            dispatch::finish(ctx, self.peer, &wait, None);
            return true;
        };
        self.ensure_output(ctx.pool);
        let Some(h2) = self.h2.as_mut() else { return false };
        let sent = h2.session.respond(
            stream,
            &mut response,
            wait.head_only,
            &ctx.date.http()[..],
            self.transport.extra_fields(),
            &mut self.output.buf,
            ctx.limits.write_buffer_bytes_max,
        );
        dispatch::finish(ctx, self.peer, &wait, sent.map(|s| (s.status, s.body_bytes)));
        true
    }

    pub(super) fn h2_n_deferred(&self) -> usize {
        self.h2.as_ref().map_or(0, |h2| h2.deferred.len())
    }

    /// A deadline passed: ends the connection (GOAWAY, then close) if one
    /// of its timeouts has, and returns true; else (a body keeping its
    /// rate) sets the next deadline.
    pub(super) fn time_out_h2(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.ensure_output(ctx.pool);
        let limits = ctx.limits;
        let now = ctx.now;
        let Some(h2) = self.h2.as_mut() else { return true };
        let s = &h2.session;
        let why = if h2.block_since.is_some_and(|t| t + limits.head_timeout <= now) {
            Some("request header block not received in time")
        } else if h2.rate.is_some_and(|r| r.deadline() <= now) {
            let progress = s.request_progress();
            match h2
                .rate
                .as_mut()
                .map(|r| r.check(now, progress, limits.min_rate_bytes_per_sec))
            {
                Some(Rate::TooSlow) => Some("request not received in time"),
                _ => None,
            }
        } else if s.is_idle() && h2.active_since + limits.idle_timeout <= now {
            Some("idle timeout")
        } else if h2.blocked_since.is_some_and(|t| t + limits.send_timeout <= now) {
            Some("client did not open its flow-control window in time")
        } else {
            None
        };
        let Some(why) = why else {
            self.h2_deadline(ctx);
            return false;
        };
        if why != "idle timeout" && !why.starts_with("client") {
            if let Some(m) = ctx.metrics {
                m.slow_requests.add(1);
            }
        }
        if let Some(h2) = self.h2.as_mut() {
            h2.session.time_out(&mut self.output.buf, why);
        }
        self.phase = Phase::Closing;
        true
    }

    /// Sets the deadline for what the connection waits for: the earliest
    /// of its timeouts that run (see the module's documentation).
    pub(super) fn h2_deadline(&mut self, ctx: &Ctx<'_>) {
        let now = ctx.now;
        let limits = ctx.limits;
        // A frame begun and not finished: its type is the fourth byte.
        let partial = &self.input.buf[self.input.start..self.input.end.max(self.input.start)];
        let Some(h2) = self.h2.as_mut() else { return };
        let s = &h2.session;
        if s.is_flow_blocked() {
            if h2.blocked_since.is_none() || h2.sent_mark != s.bytes_sent() {
                h2.blocked_since = Some(now);
                h2.sent_mark = s.bytes_sent();
            }
        } else {
            h2.blocked_since = None;
        }
        let progress = s.request_progress();
        if !s.is_idle() || progress != h2.active_mark {
            h2.active_since = now;
            h2.active_mark = progress;
        }
        let frame_begun = !partial.is_empty() && partial.get(3) != Some(&crate::h2::DATA_FRAME);
        if s.in_header_block() || frame_begun {
            h2.block_since.get_or_insert(now);
        } else {
            h2.block_since = None;
        }
        if s.is_receiving() {
            h2.rate
                .get_or_insert_with(|| MinRate::start(now, progress, limits.body_timeout));
        } else {
            h2.rate = None;
        }
        let deadlines = [
            s.is_idle().then(|| h2.active_since + limits.idle_timeout),
            h2.block_since.map(|t| t + limits.head_timeout),
            h2.rate.map(|r| r.deadline()),
            h2.blocked_since.map(|t| t + limits.send_timeout),
        ];
        self.state_deadline = deadlines.into_iter().flatten().min();
    }
}
