//! One QUIC connection carrying HTTP/3: quinn-proto's `Connection` (the
//! transport) and `h3::Session` (the protocol), and the handler calls
//! between them. The handler calls are `conn/streams.rs`'s, as HTTP/2's
//! are: the same access log lines, metrics and deferred answers, per
//! stream. A WebSocket (RFC 9220's extended CONNECT, accepted) runs on
//! its request stream: `conn::H3Ws`, the machine HTTP/1.1 and HTTP/2 run,
//! fed from the stream as far as its input has room; or, through the
//! reverse proxy, `conn::H3Tunnel`, the bytes copied between the stream
//! and the upstream socket (`conn/tunnel.rs`).

use std::net::SocketAddr;
use std::time::Instant;

use quinn_proto::{Dir, Event, ReadError, StreamEvent, StreamId, VarInt, WriteError};

use super::Shared;
use crate::body::BodySink;
use crate::codec::Version;
use crate::conn::dispatch::{Deferral, Held};
use crate::conn::streams::{self, Client, Streams};
use crate::conn::{Ctx, H3Opened, H3Ran, H3Tunnel, H3Ws};
use crate::h3::frame::Code;
use crate::h3::{Action, Session};
use crate::limits::HEADERS_ARRAY_MAX;
use crate::message::{Parts, Sent};
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
    /// While no request is open: since when, and the session's count of
    /// requests opened then (`Session::quiet_mark`). The connection is
    /// closed `h3_idle_timeout` later: QUIC's own idle timer restarts on
    /// every packet, a client's PING or ACK too, so it alone would let a
    /// client that only PINGs hold a connection (and one of `n_conns_max`)
    /// forever, which HTTP/2 refuses (`h2/timeout.rs`).
    idle: Option<(Instant, u64)>,
    idle_timeout: std::time::Duration,
    /// Answer bytes QUIC has taken from us, and whether the last `pump`
    /// left some it would not take (the client's stream or connection
    /// credit spent). While that lasts with no byte taken, since when
    /// and the count then: `send_timeout` later the connection is closed,
    /// as HTTP/2's is (`h2/timeout.rs`), since its PINGs (sent while a
    /// request is open) and the client's ACKs would keep it forever.
    sent: u64,
    write_blocked: bool,
    blocked: Option<(Instant, u64)>,
    send_timeout: std::time::Duration,
    pub(super) handshaken: bool,
    /// The client's address when the connection was accepted (for the
    /// debug log; requests take the current one, `remote_address`).
    peer: SocketAddr,
    /// This connection's token in the worker's mailbox.
    token: usize,
    deferred: Vec<Deferral>,
    /// Answers whose bodies are being sent: their log lines and metrics
    /// wait for their streams' last bytes to be written to QUIC.
    held: Held,
    /// Scratch: streams with bytes to send.
    sending: Vec<u64>,
    closed: bool,
    /// Packets sent and lost already added to the metrics.
    counted_sent: u64,
    counted_lost: u64,
    /// Once the first request came: the SNI name in normal form, if any.
    server_name: Option<Option<Box<str>>>,
    /// The WebSockets on this connection's request streams, by stream.
    websockets: Vec<(u64, H3Ws)>,
    /// The reverse proxy's WebSocket tunnels on its request streams, by
    /// stream.
    proxied: Vec<(u64, H3Tunnel)>,
}

/// Messages the WebSockets of one connection are handed per drive at
/// most (as a TCP connection's turn, `conn::TURN_WORK`): past it, the
/// connection wakes itself through the mailbox to go on, so that a
/// client sending without pause cannot starve the worker's others.
const WS_WORK_PER_DRIVE: u32 = 1024;

/// The work the reverse proxy's tunnels of one connection may do per
/// drive, in the units of a TCP connection's turn (`conn::TURN_WORK`: a
/// read or write of an upstream socket costs 16); past it, the
/// connection wakes itself to go on, as for `WS_WORK_PER_DRIVE`.
const TUNNEL_WORK_PER_DRIVE: u32 = 1024;

/// The name the client asked for in its handshake (SNI), in normal form.
fn server_name(conn: &quinn_proto::Connection) -> Option<Box<str>> {
    let data = conn.crypto_session().handshake_data()?;
    let data = data.downcast_ref::<quinn_proto::crypto::rustls::HandshakeData>()?;
    let mut buf = crate::host::HostBuf::new();
    let name = crate::host::normalize_name(data.server_name.as_deref()?.as_bytes(), &mut buf).ok()?;
    Some(name.as_str().into())
}

fn code(c: Code) -> VarInt {
    VarInt::from_u32(c as u32)
}

/// `h3::Session` as the request path sees it: with the QUIC connection
/// whose streams it writes to.
struct H3Streams<'c> {
    session: &'c mut Session,
    conn: &'c mut quinn_proto::Connection,
    extra_fields: &'c [u8],
}

impl Streams for H3Streams<'_> {
    const VERSION: Version = Version::Http3;
    const IGNORED_BODY_ANSWERED_AT_HEAD: bool = true;

    fn refused(&self, id: u64) -> Option<u16> {
        self.session.refused(id).map(|(status, _, _)| status)
    }

    fn parts(&self, id: u64) -> Option<Parts<'_>> {
        self.session.parts(id)
    }

    #[inline]
    fn respond(&mut self, id: u64, resp: &mut Response, head_only: bool, date: &[u8]) -> Option<Sent> {
        self.session.respond(id, resp, head_only, date, self.extra_fields)
    }

    fn send_continue(&mut self, id: u64) {
        self.session.send_continue(id);
    }

    fn stream_body(&mut self, id: u64, sink: BodySink) {
        self.session.stream_body(id, sink);
    }

    /// Never called: HTTP/3 answers an ignored body at its head.
    fn ignore_body(&mut self, _id: u64) {}

    fn defer(&mut self, id: u64, defer_id: u64) {
        self.session.defer(id, defer_id);
    }

    fn deferred_stream(&self, defer_id: u64) -> Option<u64> {
        self.session.deferred_stream(defer_id)
    }

    fn tunnel(&mut self, id: u64, resp: &Response, date: &[u8]) -> bool {
        self.session.accept_tunnel(id, resp, date, self.extra_fields)
    }

    /// STOP_SENDING with the refusal's code (or H3_NO_ERROR: RFC 9114
    /// §4.1, a response before the request's end), unless the request
    /// has ended.
    fn stop_reading(&mut self, id: u64) {
        if self.session.recv_done(id) {
            return;
        }
        let stop = self.session.refused(id).map_or(Code::NoError, |(_, _, stop)| stop);
        let Ok(id) = VarInt::from_u64(id) else { return };
        let _ = self.conn.recv_stream(StreamId::from(id)).stop(code(stop));
    }
}

impl QuicConn {
    pub(super) fn new(conn: quinn_proto::Connection, peer: SocketAddr, token: usize, ctx: &Ctx<'_>) -> Self {
        let cfg = crate::h3::Config {
            head_bytes_max: ctx.limits.head_bytes_max,
            n_headers_max: ctx.limits.n_headers_max.min(HEADERS_ARRAY_MAX),
            body_bytes_max: ctx.limits.body_bytes_max,
            connect_protocol: ctx.websockets,
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
            idle: None,
            idle_timeout: ctx.limits.h3_idle_timeout,
            sent: 0,
            write_blocked: false,
            blocked: None,
            send_timeout: ctx.limits.send_timeout,
            handshaken: false,
            peer,
            token,
            deferred: Vec::new(),
            held: Vec::new(),
            sending: Vec::new(),
            closed: false,
            counted_sent: 0,
            counted_lost: 0,
            server_name: None,
            websockets: Vec::new(),
            proxied: Vec::new(),
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
        self.answer_ready(ctx, shared);
        if !self.websockets.is_empty() {
            self.run_websockets(ctx, drain);
        }
        if !self.proxied.is_empty() {
            self.run_proxied(ctx);
        }
        self.pump();
        // Bodies that QUIC took whole make room for the requests that
        // waited for it (`answer_ready`): answered now, as no packet from
        // the client may come to ask again.
        while self.session.has_ready() && !self.over_share(ctx) && self.answer_ready(ctx, shared) {
            self.pump();
        }
        self.session.unsent().charge(ctx.pool);
        if !self.held.is_empty() {
            self.end_held(ctx, false);
        }
        // Answered streams let their bodies go.
        self.charge_bodies(ctx);
        // Closed once every answer is delivered: `close` discards what the
        // client has not acknowledged yet (the last send window of a
        // download; the client would see its response cut short).
        // Requests open: pings keep the connection from idling out while
        // they wait (an SSE stream's producer may be silent for minutes).
        let (no_requests, opened) = self.session.quiet_mark();
        let quiet = no_requests && self.websockets.is_empty();
        if quiet || self.conn.is_closed() {
            self.keepalive_at = None;
        } else if self.keepalive_at.is_none() {
            self.keepalive_at = Some(ctx.now + super::keepalive_interval(ctx.limits));
        }
        match self.idle {
            _ if !quiet || !self.handshaken => self.idle = None,
            Some((_, mark)) if mark == opened => {}
            _ => self.idle = Some((ctx.now, opened)),
        }
        match self.blocked {
            _ if !self.write_blocked => self.blocked = None,
            Some((_, mark)) if mark == self.sent => {}
            _ => self.blocked = Some((ctx.now, self.sent)),
        }
        let unacked = self.conn.streams().send_streams() - usize::from(self.control.is_some());
        if self.session.is_going_away() && self.session.is_idle() && unacked == 0 && !self.conn.is_closed() {
            self.flush_control();
            self.conn.close(ctx.now, code(Code::NoError), "going away".into());
        }
    }

    /// Its timer: quinn-proto's, or the next keep-alive PING if sooner.
    pub(super) fn next_timeout(&mut self) -> Option<Instant> {
        let ws = self.websockets.iter().filter_map(|(_, ws)| ws.deadline()).min();
        let proxied = self.proxied.iter().map(|(_, t)| t.deadline()).min();
        [
            self.conn.poll_timeout(),
            self.keepalive_at,
            self.session.poll_timeout(),
            ws,
            proxied,
            self.idle.map(|(since, _)| since + self.idle_timeout),
            self.blocked.map(|(since, _)| since + self.send_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Its timer fired: quinn-proto's timers, and the keep-alive PING if
    /// due.
    pub(super) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.session.set_now(ctx.now);
        for (id, ws) in &mut self.websockets {
            if ws.deadline().is_none_or(|at| at > ctx.now) {
                continue;
            }
            let keep = self.session.with_tunnel(*id, |io| ws.time_out(ctx, io.output));
            if keep == Some(false) {
                self.session.end_tunnel(*id);
            }
        }
        let mut i = 0;
        while i < self.proxied.len() {
            if self.proxied[i].1.deadline() > ctx.now {
                i += 1;
                continue;
            }
            // Idle past the upstream's `read_timeout`: cancelled.
            let (id, t) = self.proxied.swap_remove(i);
            self.reset_stream(ctx, id, Code::RequestCancelled);
            t.end(ctx);
        }
        let ended = self.session.handle_timeout();
        if let (true, Some(m)) = (ended > 0, ctx.metrics) {
            m.slow_requests.add(ended as u64);
        }
        self.conn.handle_timeout(ctx.now);
        if self.idle.is_some_and(|(since, _)| since + self.idle_timeout <= ctx.now) && !self.conn.is_closed() {
            // No request within the idle timeout (§5.2: an idle
            // connection may be closed at any time; no stream is lost).
            self.idle = None;
            self.session.go_away();
            self.flush_control();
            self.conn.close(ctx.now, code(Code::NoError), "idle timeout".into());
        }
        if self
            .blocked
            .is_some_and(|(since, _)| since + self.send_timeout <= ctx.now)
            && !self.conn.is_closed()
        {
            self.blocked = None;
            self.conn.close(
                ctx.now,
                code(Code::ExcessiveLoad),
                "client did not open its flow-control window in time".into(),
            );
        }
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
                    action = self.session.handle_input(sid, &chunk.bytes, false);
                }
                Ok(None) => {
                    action = self.session.handle_input(sid, &[], true);
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

    /// Answers the complete requests, oldest first, while the answers'
    /// bodies held unsent are within the connection's share
    /// (`over_share`). Whether it answered any.
    fn answer_ready(&mut self, ctx: &mut Ctx<'_>, shared: &Shared) -> bool {
        let mut answered = false;
        while !(self.session.unsent_bytes() != 0 && self.over_share(ctx)) {
            let Some(id) = self.session.take_ready() else { break };
            self.answer(ctx, shared, id);
            answered = true;
        }
        answered
    }

    /// The answers' bodies hold memory unsent (`Session::unsent`) past
    /// the connection's share (`write_buffer_bytes_max`, as HTTP/2's), or
    /// while the worker's output budget is spent: no new request is
    /// answered; it waits in the session, as an HTTP/1.1 client's
    /// pipelined requests wait in its socket. One holding nothing answers
    /// one. What quinn-proto buffers is bounded apart
    /// (`H3_SEND_WINDOW_BYTES`). Charges the bodies to the worker first.
    fn over_share(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.session.unsent().charge(ctx.pool);
        let held = self.session.unsent_bytes();
        if held == 0 {
            return false;
        }
        if held > ctx.limits.write_buffer_bytes_max {
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

    /// The request path's view of this connection's session
    /// (`conn/streams.rs`) and who its requests come from, beside the list
    /// of deferred answers.
    #[allow(clippy::type_complexity)]
    fn streams<'c>(
        &'c mut self,
        shared: &'c Shared,
    ) -> (H3Streams<'c>, Client<'c>, (&'c mut Vec<Deferral>, &'c mut Held)) {
        if self.server_name.is_none() {
            self.server_name = Some(server_name(&self.conn));
        }
        // The connection's current path, not the one it was accepted on:
        // a client that migrates (or is rebound by a NAT) is judged by
        // where its requests come from now (issue 24). A field read.
        let peer = self.conn.remote_address();
        let view = H3Streams {
            session: &mut self.session,
            conn: &mut self.conn,
            extra_fields: shared.tls.extra_fields.as_deref().unwrap_or(&[]),
        };
        let client = Client {
            peer,
            proxy_source: None,
            tls: Some(self.server_name.as_ref().and_then(|n| n.as_deref())),
            // QUIC is TLS 1.3; quinn-proto does not say whether the
            // session was resumed.
            tls_facts: Some(crate::access_log::TlsFacts {
                version: Some(crate::access_log::TlsVersion::Tls13),
                resumed: None,
            }),
            token: self.token,
            redirect: false,
        };
        (view, client, (&mut self.deferred, &mut self.held))
    }

    /// Calls the handler for stream `id` and queues its answer; a
    /// WebSocket it accepted starts on the stream.
    fn answer(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64) {
        let (mut view, client, deferred) = self.streams(shared);
        // The clock is read for each answer: its packets leave with the
        // endpoint's transmit, not a batch of this connection's.
        ctx.batch_now = None;
        if let Some(upgrade) = streams::answer(ctx, &mut view, client, deferred, id) {
            self.start_ws(ctx, id, upgrade);
        }
    }

    /// Stream `id`'s extended CONNECT was accepted (its 2xx is queued).
    #[cold]
    #[inline(never)]
    fn start_ws(&mut self, ctx: &Ctx<'_>, id: u64, upgrade: crate::ws::Upgrade) {
        self.websockets.push((id, H3Ws::new(upgrade, self.token, id, ctx)));
    }

    /// Runs each WebSocket over what its stream received (read from QUIC
    /// first, as far as its input has room: what is not read is not
    /// credited to the client), schedules the 1001 of a drain, and ends
    /// those whose stream is gone (reset or stopped by the client: an
    /// abrupt close).
    #[cold]
    #[inline(never)]
    fn run_websockets(&mut self, ctx: &mut Ctx<'_>, drain: super::Drain) {
        let mut work_left = WS_WORK_PER_DRIVE;
        let mut more = false;
        let mut i = 0;
        while i < self.websockets.len() {
            let id = self.websockets[i].0;
            if let Ok(v) = VarInt::from_u64(id) {
                self.read(ctx, StreamId::from(v));
            }
            let total = self.session.tunnels_queued();
            let ws = &mut self.websockets[i].1;
            if drain != super::Drain::No {
                ws.drain(ctx);
            }
            match self
                .session
                .with_tunnel(id, |io| ws.run(ctx, io, total, &mut work_left))
            {
                None => {
                    ws.end(ctx);
                    self.websockets.swap_remove(i);
                    continue;
                }
                Some(H3Ran::Over) => self.session.end_tunnel(id),
                Some(H3Ran::More) => more = true,
                Some(H3Ran::Waits) => {}
            }
            i += 1;
        }
        if more {
            ctx.mailbox.post(crate::responder::Post::Wake { token: self.token });
        }
    }

    /// An upstream switched to WebSocket for the deferred request `id`
    /// (an extended CONNECT through the reverse proxy): the stream's 200
    /// is queued and the tunnel opens, or, if the stream is gone, the
    /// upstream socket closes.
    #[cold]
    #[inline(never)]
    pub(super) fn on_tunnel(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64, handoff: crate::proxy::Handoff) {
        let Some(at) = self.deferred.iter().position(|d| d.id == id) else {
            return;
        };
        let deferral = self.deferred.swap_remove(at);
        let stream = self.session.deferred_stream(id);
        let (session, extra_fields) = (&mut self.session, shared.tls.extra_fields.as_deref().unwrap_or(&[]));
        let opened = H3Tunnel::open(
            ctx,
            (self.conn.remote_address(), deferral),
            handoff,
            (self.token, stream),
            |s, resp, date| session.accept_tunnel(s, resp, date, extra_fields),
        );
        let Some(stream) = stream else { return };
        match opened {
            H3Opened::Gone => {}
            H3Opened::Refused => self.reset_stream(ctx, stream, Code::ConnectError),
            H3Opened::Open(t, early) => {
                self.session
                    .with_tunnel(stream, |io| io.output.extend_from_slice(&early));
                self.proxied.push((stream, t));
            }
        }
    }

    /// The upstream socket of the tunnel on `stream` is ready.
    pub(super) fn on_tunnel_event(&mut self, stream: u64) {
        if let Some((_, t)) = self.proxied.iter_mut().find(|(s, _)| *s == stream) {
            t.on_ready();
        }
    }

    /// Copies each tunnel's bytes both ways: what its stream received
    /// (read from QUIC first, as far as its input has room: what is not
    /// read is not credited to the client) to its upstream, the
    /// upstream's into the stream while the connection's bound allows.
    /// A stream gone (reset or stopped by the client, or ended both ways)
    /// closes its upstream; an upstream that failed resets its stream
    /// (H3_CONNECT_ERROR, RFC 9114 §4.4); one that ended gets the
    /// stream's FIN after its last bytes.
    #[cold]
    #[inline(never)]
    fn run_proxied(&mut self, ctx: &mut Ctx<'_>) {
        let mut work_left = TUNNEL_WORK_PER_DRIVE;
        let mut i = 0;
        while i < self.proxied.len() {
            let id = self.proxied[i].0;
            let pumped = loop {
                if let Ok(v) = VarInt::from_u64(id) {
                    self.read(ctx, StreamId::from(v));
                }
                let total = self.session.tunnels_queued();
                let room = self.session.recv_room(id);
                let t = &mut self.proxied[i].1;
                let pumped = self.session.with_tunnel(id, |io| t.run(ctx, io, total, &mut work_left));
                // Again while the pass made room for more of the stream's
                // bytes, which QUIC may hold already (no event comes for
                // those).
                let again = matches!(pumped, Some(Ok(false)))
                    && self.session.recv_room(id) > room
                    && H3Tunnel::can_work(work_left);
                if !again {
                    break pumped;
                }
            };
            match pumped {
                None => {
                    let (_, t) = self.proxied.swap_remove(i);
                    t.end(ctx);
                    continue;
                }
                Some(Err(())) => {
                    let (_, t) = self.proxied.swap_remove(i);
                    self.reset_stream(ctx, id, Code::ConnectError);
                    t.end(ctx);
                    continue;
                }
                Some(Ok(true)) => self.session.end_tunnel(id),
                Some(Ok(false)) => {}
            }
            i += 1;
        }
        if !H3Tunnel::can_work(work_left) {
            ctx.mailbox.post(crate::responder::Post::Wake { token: self.token });
        }
    }

    /// Resets stream `id` both ways with `c` and forgets it.
    fn reset_stream(&mut self, ctx: &mut Ctx<'_>, id: u64, c: Code) {
        if let Ok(v) = VarInt::from_u64(id) {
            self.act(ctx, StreamId::from(v), Action::Reset(c));
        }
        self.session.remove(id);
    }

    /// A frame published to a topic the WebSocket on `stream` subscribes
    /// to.
    pub(super) fn on_publish(&mut self, ctx: &mut Ctx<'_>, stream: u64, frame: &[u8]) {
        let total = self.session.tunnels_queued();
        let Some((_, ws)) = self.websockets.iter_mut().find(|(s, _)| *s == stream) else {
            return;
        };
        self.session.with_tunnel(stream, |io| ws.publish(ctx, io, total, frame));
    }

    /// Stream `id`'s head is complete and its body is coming: see
    /// `streams::start_upload`.
    fn start_upload(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64) {
        let (mut view, client, deferred) = self.streams(shared);
        // The clock is read for each answer: its packets leave with the
        // endpoint's transmit, not a batch of this connection's.
        ctx.batch_now = None;
        streams::start_upload(ctx, &mut view, client, deferred, id);
    }

    /// An interim answer (100 or 103, `fields` complete lines) for the
    /// deferred request `id`: the reverse proxy's upstream sent it
    /// (`conn/interim.rs` for HTTP/1.1 and HTTP/2).
    pub(super) fn on_interim(&mut self, id: u64, status: u16, fields: &[u8]) {
        let Some(stream) = self.session.deferred_stream(id) else {
            return;
        };
        match status {
            100 => self.session.send_continue(stream),
            _ => self.session.send_interim(stream, status, fields),
        }
    }

    /// A deferred answer arrived from another thread.
    pub(super) fn on_answer(&mut self, ctx: &mut Ctx<'_>, shared: &Shared, id: u64, mut response: Response) {
        let (mut view, client, deferred) = self.streams(shared);
        // The clock is read for each answer: its packets leave with the
        // endpoint's transmit, not a batch of this connection's.
        ctx.batch_now = None;
        streams::on_answer(ctx, &mut view, client.peer, deferred, id, &mut response);
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

    /// Ends the held records of streams whose bodies are all written (or
    /// reset); every one with `all` (the connection is gone).
    fn end_held(&mut self, ctx: &mut Ctx<'_>, all: bool) {
        let peer = self.conn.remote_address();
        let mut i = 0;
        while i < self.held.len() {
            if all || !self.session.is_open(self.held[i].0) {
                let (_, sending) = self.held.swap_remove(i);
                sending.end(ctx, peer);
            } else {
                i += 1;
            }
        }
    }

    /// The connection is gone: deferred answers still out are abandoned.
    pub(super) fn abandon(&mut self, ctx: &mut Ctx<'_>) {
        for (_, ws) in &mut self.websockets {
            ws.end(ctx);
        }
        self.websockets.clear();
        for (_, t) in self.proxied.drain(..) {
            t.end(ctx);
        }
        self.end_held(ctx, true);
        self.session.bodies().release(ctx.pool);
        self.session.unsent().release(ctx.pool);
        if let Some(m) = ctx.metrics {
            m.deferred_ended.add(self.deferred.len() as u64);
        }
        self.deferred.clear();
    }

    /// Writes our control stream's bytes and each answered stream's, as
    /// far as quinn-proto's flow control and send buffer take them.
    fn pump(&mut self) {
        self.flush_control();
        self.write_blocked = false;
        self.sending.clear();
        self.session.sending(&mut self.sending);
        for i in 0..self.sending.len() {
            let sid = self.sending[i];
            let Some(id) = VarInt::from_u64(sid).ok().map(StreamId::from) else {
                continue;
            };
            loop {
                let (bytes, last) = match self.session.poll_output(sid) {
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
                        self.sent += n as u64;
                        if !all {
                            self.write_blocked = true;
                            break; // wait for Writable
                        }
                    }
                    Err(WriteError::Blocked) => {
                        self.write_blocked = true;
                        break;
                    }
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
