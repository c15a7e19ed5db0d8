//! One QUIC connection carrying HTTP/3: quinn-proto's `Connection` (the
//! transport) and `h3::Session` (the protocol), and the handler calls
//! between them. Mirrors `conn/h2.rs`: the same handler, access log lines,
//! metrics and deferred answers, per stream.

use std::net::SocketAddr;
use std::time::Instant;

use quinn_proto::{Dir, Event, ReadError, StreamEvent, StreamId, VarInt, WriteError};

use super::Shared;
use crate::access_log::Line;
use crate::codec::Version;
use crate::conn::dispatch::{self, Called, Deferral};
use crate::conn::{micros_since, Ctx};
use crate::limits::HEADERS_ARRAY_MAX;
use crate::message::head::FieldArray;
use crate::message::Sent;
use crate::h3::frame::Code;
use crate::h3::{Action, Session};
use crate::request::Request;
use crate::response::Response;

pub(super) struct QuicConn {
    pub(super) conn: quinn_proto::Connection,
    session: Session,
    /// Our control stream, once the handshake is done.
    control: Option<StreamId>,
    pub(super) timer: Option<Instant>,
    /// While a request is open (a streamed body whose producer is silent,
    /// a deferred answer): when to send the next PING, so that the
    /// connection does not reach its idle timeout meanwhile.
    pub(super) keepalive_at: Option<Instant>,
    pub(super) handshaken: bool,
    peer: SocketAddr,
    /// This connection's token in the worker's mailbox.
    token: usize,
    deferred: Vec<Deferral>,
    /// Scratch: streams with bytes to send.
    sending: Vec<u64>,
    closed: bool,
    /// Packets sent and lost already added to the metrics.
    counted_sent: u64,
    counted_lost: u64,
}

fn code(c: Code) -> VarInt {
    VarInt::from_u32(c as u32)
}

impl QuicConn {
    pub(super) fn new(conn: quinn_proto::Connection, peer: SocketAddr, token: usize, ctx: &Ctx<'_>) -> Self {
        let cfg = crate::h3::Config {
            head_bytes_max: ctx.limits.head_bytes_max,
            n_headers_max: ctx.limits.n_headers_max.min(HEADERS_ARRAY_MAX),
            body_bytes_max: ctx.limits.body_bytes_max,
        };
        let mut session = Session::new(cfg);
        session.set_timeouts(crate::h3::Timeouts {
            head: ctx.limits.head_timeout,
            body_grace: ctx.limits.body_timeout,
            min_rate: ctx.limits.min_rate_bytes_per_sec,
        });
        session.set_now(ctx.now);
        QuicConn {
            conn,
            session,
            control: None,
            timer: None,
            keepalive_at: None,
            handshaken: false,
            peer,
            token,
            deferred: Vec::new(),
            sending: Vec::new(),
            closed: false,
            counted_sent: 0,
            counted_lost: 0,
        }
    }

    /// Acts on the transport's events: streams opened, readable, writable,
    /// stopped; answers complete requests; writes what flow control takes.
    pub(super) fn process(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, drain: super::Drain) {
        self.session.set_now(ctx.now);
        while let Some(event) = self.conn.poll() {
            match event {
                Event::Connected => {
                    self.handshaken = true;
                    if let Some(m) = ctx.metrics {
                        m.quic_handshakes.add(1);
                    }
                    // §6.2.1: each side opens its control stream first.
                    self.control = self.conn.streams().open(Dir::Uni);
                }
                Event::Stream(StreamEvent::Opened { dir }) => {
                    while let Some(id) = self.conn.streams().accept(dir) {
                        self.read(ctx, id);
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => self.read(ctx, id),
                Event::Stream(StreamEvent::Stopped { id, .. }) if Some(id) == self.control => {
                    // §6.2.1: the receiver of a control stream must not
                    // ask for it to be closed.
                    let why = "the client stopped our control stream";
                    self.act(ctx, id, Action::Close(Code::ClosedCriticalStream, why));
                }
                Event::Stream(StreamEvent::Stopped { id, .. }) => {
                    // The client no longer wants the response.
                    let _ = self.conn.send_stream(id).reset(code(Code::RequestCancelled));
                    self.session.remove(id.into());
                }
                Event::ConnectionLost { reason } => {
                    crate::log::debug(format_args!("QUIC: connection from {} ended: {reason}", self.peer));
                    self.closed = true;
                }
                _ => {}
            }
        }
        if self.closed {
            return;
        }
        match drain {
            super::Drain::No => {}
            super::Drain::Soon => self.session.go_away_soon(),
            super::Drain::Now => self.session.go_away(),
        }
        // Heads whose body is coming: a handler that reads bodies as they
        // arrive is called now; then those bodies are read as far as their
        // readers have room (after a reader's wake, too).
        while let Some(id) = self.session.take_head() {
            self.start_upload(ctx, shared, id);
        }
        let mut uploads = std::mem::take(&mut self.sending);
        uploads.clear();
        self.session.uploads(&mut uploads);
        for &sid in &uploads {
            if let Ok(id) = VarInt::from_u64(sid) {
                self.read(ctx, StreamId::from(id));
            }
        }
        self.sending = uploads;
        while let Some(id) = self.session.take_ready() {
            self.answer(ctx, shared, id);
        }
        self.pump();
        // Answered streams let their bodies go.
        self.charge_bodies(ctx);
        // Closed once every answer is delivered: `close` discards what the
        // client has not acknowledged yet (the last send window of a
        // download; the client would see its response cut short).
        // Requests open: pings keep the connection from idling out while
        // they wait (an SSE stream's producer may be silent for minutes).
        if self.session.is_idle() || self.conn.is_closed() {
            self.keepalive_at = None;
        } else if self.keepalive_at.is_none() {
            self.keepalive_at = Some(ctx.now + super::keepalive_interval(ctx.limits));
        }
        let unacked = self.conn.streams().send_streams() - usize::from(self.control.is_some());
        if self.session.is_going_away() && self.session.is_idle() && unacked == 0 && !self.conn.is_closed() {
            self.flush_control();
            self.conn.close(ctx.now, code(Code::NoError), "going away".into());
        }
    }

    /// Its timer: quinn-proto's, or the next keep-alive PING if sooner.
    pub(super) fn next_timeout(&mut self) -> Option<Instant> {
        [self.conn.poll_timeout(), self.keepalive_at, self.session.deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Its timer fired: quinn-proto's timers, and the keep-alive PING if
    /// due.
    pub(super) fn on_timeout(&mut self, ctx: &Ctx<'_>) {
        self.session.set_now(ctx.now);
        let ended = self.session.time_out();
        if let (true, Some(m)) = (ended > 0, ctx.metrics) {
            m.slow_requests.add(ended as u64);
        }
        self.conn.handle_timeout(ctx.now);
        if self.keepalive_at.is_some_and(|k| k <= ctx.now) {
            self.conn.ping();
            self.keepalive_at = Some(ctx.now + super::keepalive_interval(ctx.limits));
        }
    }

    /// Reads what stream `id` has and feeds it to the session.
    fn read(&mut self, ctx: &mut Ctx<'_>, id: StreamId) {
        let sid: u64 = id.into();
        // A body read as it arrives: no more than its reader has room for
        // (what is not read here is not credited to the client).
        let mut room = self.session.recv_room(sid);
        if room == 0 {
            return;
        }
        self.session.bodies().set_room(ctx.pool, ctx.limits.body_budget_bytes);
        let mut recv = self.conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return };
        let mut action = Action::None;
        loop {
            if room == 0 {
                break;
            }
            match chunks.next(room) {
                Ok(Some(chunk)) => {
                    if room != usize::MAX {
                        room -= chunk.bytes.len();
                    }
                    action = self.session.recv(sid, &chunk.bytes, false);
                }
                Ok(None) => {
                    action = self.session.recv(sid, &[], true);
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(_)) => {
                    action = self.session.on_reset(sid);
                    if action == Action::None && crate::h3::is_request_stream(sid) {
                        // The client abandoned the request (§4.1.1): so
                        // do we, its answer included.
                        action = Action::Reset(Code::RequestCancelled);
                    }
                    break;
                }
            }
            if action != Action::None {
                break;
            }
        }
        let _ = chunks.finalize();
        self.charge_bodies(ctx);
        self.act(ctx, id, action);
    }

    /// Holds the streams' buffered bodies against the worker's budget.
    fn charge_bodies(&mut self, ctx: &mut Ctx<'_>) {
        self.session.bodies().charge(ctx.pool, ctx.metrics);
    }

    fn act(&mut self, ctx: &mut Ctx<'_>, id: StreamId, action: Action) {
        match action {
            Action::None => {}
            Action::StopSending(c) => {
                let _ = self.conn.recv_stream(id).stop(code(c));
            }
            Action::Reset(c) => {
                let _ = self.conn.recv_stream(id).stop(code(c));
                let _ = self.conn.send_stream(id).reset(code(c));
            }
            Action::Close(c, why) => {
                crate::log::debug(format_args!("QUIC: closing the connection from {}: {why}", self.peer));
                self.conn.close(ctx.now, code(c), why.as_bytes().to_vec().into());
            }
        }
    }

    /// Calls the handler for stream `id` and queues its answer.
    fn answer(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64) {
        let extra_fields = shared.tls.extra_fields.as_deref().unwrap_or(&[]);
        let date = &ctx.date.http()[..];
        if let Some((status, _why, stop)) = self.session.refused(id) {
            let done = self.session.recv_done(id);
            let sent = self
                .session
                .respond(id, Response::error(status), false, date, extra_fields);
            if !done {
                // Answered before the request ended: the rest is not read.
                let _ = self
                    .conn
                    .recv_stream(StreamId::from(VarInt::from_u64(id).unwrap_or_default()))
                    .stop(code(stop));
            }
            if let (Some(log), Some(sent)) = (ctx.log.as_deref_mut(), sent) {
                log.record(&Line {
                    clf_time: ctx.date.clf(),
                    peer: self.peer,
                    method: b"-",
                    target: b"-",
                    version: b"HTTP/3.0",
                    status: sent.status,
                    body_bytes: sent.body_bytes,
                    referer: None,
                    user_agent: None,
                    host: None,
                    duration_us: Some(micros_since(ctx.now)),
                });
            }
            if let Some(m) = ctx.metrics {
                m.record(b"-", status, ctx.now);
            }
            return;
        }
        let Some(parts) = self.session.parts(id) else {
            // No :method or :path passed the checks only as CONNECT.
            let sent = self
                .session
                .respond(id, Response::error(400), false, date, extra_fields);
            if let (Some(m), Some(sent)) = (ctx.metrics, sent) {
                m.record(b"-", sent.status, ctx.now);
            }
            return;
        };
        let mut fields = FieldArray::new();
        let headers = fields.fill(parts.head);
        let slot = dispatch::slot(ctx, self.token);
        let mut req = Request::new(
            parts.method,
            parts.target,
            Version::Http3,
            headers,
            parts.host,
            parts.body,
            self.peer,
        );
        req.defer = Some(&slot);
        let head_only = parts.method == "HEAD";
        let mut handled = dispatch::call_stream(ctx, false, &req);
        let response = match dispatch::settle(ctx, &slot, &req, &mut handled) {
            Called::Now(response) => std::mem::replace(response, Response::new(200)),
            Called::Later(deferral) => {
                self.session.defer(id, deferral.id);
                self.deferred.push(deferral);
                return;
            }
        };
        let sent = Sent::of(&response, head_only);
        dispatch::record(ctx, &req, sent.status, sent.body_bytes);
        self.session.respond(id, response, head_only, date, extra_fields);
    }

    /// Stream `id`'s head is complete and its body is coming: if its
    /// handler reads bodies as they arrive (`body::streamed`), calls it
    /// now with a reader.
    fn start_upload(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64) {
        let Some(parts) = self.session.parts(id) else { return };
        let mut fields = FieldArray::new();
        let headers = fields.fill(parts.head);
        let mut req = Request::new(
            parts.method,
            parts.target,
            Version::Http3,
            headers,
            parts.host,
            &[],
            self.peer,
        );
        let used = dispatch::body_use(ctx, false, &req);
        if used == crate::handler::BodyUse::Buffer {
            // The body is collected, then the handler called: a client
            // waiting for 100 Continue may send it.
            self.session.send_continue(id);
            return;
        }
        // Read as it arrives, or not at all: the handler is called now.
        let (reader, sink) = if used == crate::handler::BodyUse::Stream {
            let (reader, sink) = crate::body::pipe(crate::limits::BODY_READER_BYTES);
            sink.bind(ctx.mailbox, self.token);
            (Some(reader), sink)
        } else {
            if let Some(m) = ctx.metrics {
                m.bodies_ignored.add(1);
            }
            (None, crate::body::BodySink::discard())
        };
        let offered = reader.is_some();
        let reader = std::cell::RefCell::new(reader);
        if offered {
            req.reader = Some(&reader);
        }
        let slot = dispatch::slot(ctx, self.token);
        req.defer = Some(&slot);
        let head_only = parts.method == "HEAD";
        let mut handled = dispatch::call_stream(ctx, false, &req);
        // A reader not taken is dropped: the body is discarded.
        let taken = offered && reader.borrow_mut().take().is_none();
        let response = match dispatch::settle(ctx, &slot, &req, &mut handled) {
            Called::Now(response) => std::mem::replace(response, Response::new(200)),
            Called::Later(deferral) => {
                if taken {
                    // The handler reads the body: a client waiting for
                    // 100 Continue may send it.
                    self.session.send_continue(id);
                }
                self.session.stream_body(id, sink);
                self.session.defer(id, deferral.id);
                self.deferred.push(deferral);
                return;
            }
        };
        let sent = Sent::of(&response, head_only);
        dispatch::record(ctx, &req, sent.status, sent.body_bytes);
        if taken {
            // As above, before the final answer.
            self.session.send_continue(id);
        }
        self.session.stream_body(id, sink);
        let extra_fields = shared.tls.extra_fields.as_deref().unwrap_or(&[]);
        self.session
            .respond(id, response, head_only, &ctx.date.http()[..], extra_fields);
        // Answered before the body's end: the rest is not read.
        if !self.session.recv_done(id) {
            let _ = self
                .conn
                .recv_stream(StreamId::from(VarInt::from_u64(id).unwrap_or_default()))
                .stop(code(Code::NoError));
        }
    }

    /// A deferred answer arrived from another thread.
    pub(super) fn on_answer(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64, response: Response) {
        let Some(at) = self.deferred.iter().position(|d| d.id == id) else {
            return;
        };
        let wait = self.deferred.swap_remove(at);
        // The client may have reset the stream meanwhile.
        let Some(stream) = self.session.deferred_stream(id) else {
            dispatch::finish(ctx, self.peer, &wait, None);
            return;
        };
        let extra_fields = shared.tls.extra_fields.as_deref().unwrap_or(&[]);
        let sent = self
            .session
            .respond(stream, response, wait.head_only, &ctx.date.http()[..], extra_fields);
        dispatch::finish(ctx, self.peer, &wait, sent.map(|s| (s.status, s.body_bytes)));
    }

    /// Adds the packets sent and lost since the last call to the metrics
    /// (quinn-proto's counts only grow), so that they move while the
    /// connection lives.
    pub(super) fn count_packets(&mut self, ctx: &Ctx<'_>) {
        if let Some(m) = ctx.metrics {
            let path = self.conn.stats().path;
            m.quic_packets_sent
                .add(path.sent_packets.saturating_sub(self.counted_sent));
            m.quic_packets_lost
                .add(path.lost_packets.saturating_sub(self.counted_lost));
            self.counted_sent = self.counted_sent.max(path.sent_packets);
            self.counted_lost = self.counted_lost.max(path.lost_packets);
        }
    }

    /// The connection is gone: deferred answers still out are abandoned.
    pub(super) fn abandon(&mut self, ctx: &mut Ctx<'_>) {
        self.session.bodies().release(ctx.pool);
        if let Some(m) = ctx.metrics {
            m.deferred_ended.add(self.deferred.len() as u64);
        }
        self.deferred.clear();
    }

    /// Writes our control stream's bytes and each answered stream's, as
    /// far as quinn-proto's flow control and send buffer take them.
    fn pump(&mut self) {
        self.flush_control();
        self.sending.clear();
        self.session.sending(&mut self.sending);
        for i in 0..self.sending.len() {
            let sid = self.sending[i];
            let Some(id) = VarInt::from_u64(sid).ok().map(StreamId::from) else {
                continue;
            };
            loop {
                let (bytes, last) = match self.session.output(sid) {
                    Ok(out) => out,
                    Err(()) => {
                        // The body could not be read (a file that shrank):
                        // the length was promised, so reset the stream.
                        let _ = self.conn.send_stream(id).reset(code(Code::InternalError));
                        self.session.remove(sid);
                        break;
                    }
                };
                if bytes.is_empty() {
                    if last {
                        let _ = self.conn.send_stream(id).finish();
                        self.session.remove(sid);
                    }
                    break;
                }
                match self.conn.send_stream(id).write(bytes) {
                    Ok(n) => {
                        let all = n == bytes.len();
                        self.session.consumed(sid, n);
                        if !all {
                            break; // wait for Writable
                        }
                    }
                    Err(WriteError::Blocked) => break,
                    Err(_) => {
                        // Stopped or closed by the client.
                        self.session.remove(sid);
                        break;
                    }
                }
            }
        }
    }

    fn flush_control(&mut self) {
        let Some(id) = self.control else { return };
        let out = self.session.control_output();
        if out.is_empty() {
            return;
        }
        if let Ok(n) = self.conn.send_stream(id).write(out) {
            out.drain(..n);
        }
    }
}
