//! The WebSocket side of a connection: drives `ws::session::Session`,
//! calls the application's callbacks for each message (catching panics:
//! 1011), sends what they and other threads queue, and fans out published
//! messages. One machine, two carriers:
//! - after an HTTP/1.1 upgrade the connection is the WebSocket (`Ws` in
//!   the protocol slot, reading the connection's input, writing its
//!   output);
//! - over HTTP/2 (RFC 8441's extended CONNECT) each WebSocket is a
//!   stream of the connection (`Http2::tunnels`), reading the DATA its
//!   stream received and writing frames that leave as DATA under the
//!   stream's flow control (`h2::Tunnel`);
//! - over HTTP/3 (RFC 9220) likewise, a request stream of a QUIC
//!   connection (`H3Ws`, driven by `quic::conn`), its bytes lent by
//!   `h3::Session::with_tunnel`, its frames written as DATA frames that
//!   QUIC's flow control takes.
//!
//! The input is read only while what waits for the client is under the
//! route's `backpressure_bytes_max`: a client that sends without reading
//! is not read either (TCP's window closes, or the stream's), so it
//! cannot make the worker hold more than that and one message. The
//! WebSockets of one HTTP/2 connection share that limit: one client
//! reads them all, at one speed.

use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use super::{Conn, Ctx, Next, Phase, Proto, Stop};
use crate::body::Next as Chunk;
use crate::buffers::ensure_output;
use crate::ws::deflate::Params;
use crate::ws::hub::Subscriber;
use crate::ws::session::{Config, Event, Kind, Session, TimedOut};
use crate::ws::{Accepted, Message, Socket, WebSocket};

/// A WebSocket: inline in the connection's protocol slot after an
/// HTTP/1.1 upgrade, as HTTP/1.1's machine, whose room it takes (no
/// larger, `conn/mod.rs` checks), so an idle WebSocket costs the
/// connection's slot and nothing else; or one of an HTTP/2 connection's
/// streams.
pub(super) struct Ws {
    session: Session,
    /// `None` once `on_close` has been called (or a callback panicked).
    app: Option<Box<dyn WebSocket>>,
    protocol: Option<Box<str>>,
    limit: usize,
    close_on_backpressure: bool,
    sub: Subscriber,
    /// When a draining server sends this WebSocket its 1001.
    drain_at: Option<Instant>,
    /// `on_open` is yet to be called.
    opening: bool,
}

impl Ws {
    /// The WebSocket `accepted` on connection `token`, on its HTTP/2 or
    /// HTTP/3 `stream` (0 over HTTP/1.1: the connection itself).
    pub(super) fn new(accepted: Accepted, token: usize, stream: u64, ctx: &Ctx<'_>) -> Self {
        let Accepted {
            handshake,
            options,
            app,
        } = accepted;
        let config = Config {
            message_bytes_max: options.message_bytes_max,
            fragments_max: options.fragments_max,
            ping_interval: options.ping_interval,
            message_timeout: ctx.limits.body_timeout,
            deflate: handshake.deflate,
        };
        if let Some(m) = ctx.metrics {
            m.ws_opened.add(1);
        }
        Ws {
            session: Session::new(config, ctx.now),
            app: Some(app),
            protocol: handshake.protocol.map(String::into_boxed_str),
            limit: options.backpressure_bytes_max,
            close_on_backpressure: options.close_on_backpressure,
            sub: Subscriber::new(token, stream),
            drain_at: None,
            opening: true,
        }
    }

    /// The next deadline: a ping, a message's end, the peer's Close, a
    /// drain's 1001.
    fn deadline(&self) -> Option<Instant> {
        match (self.session.poll_timeout(), self.drain_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Where a WebSocket's frames go: the connection's output buffer, or its
/// HTTP/2 stream's; `sent` of `buf`'s bytes have left, and at most
/// `limit` may wait.
struct Out<'o> {
    buf: &'o mut Vec<u8>,
    sent: usize,
    limit: usize,
}

impl<'o> Out<'o> {
    /// An HTTP/2 or HTTP/3 stream's output (`buf`, `sent` of it gone):
    /// the route's `limit` less what the connection's other WebSockets
    /// have waiting (`total` is all of theirs and this one's), one client
    /// reading them all. (Over HTTP/3 `own` also holds the DATA frame
    /// header opened for this run, which `total` was counted without.)
    fn tunnel(buf: &'o mut Vec<u8>, sent: usize, limit: usize, total: usize) -> Self {
        let own = buf.len() - sent;
        Out {
            limit: limit.saturating_sub(total.saturating_sub(own)),
            sent,
            buf,
        }
    }

    fn queued(&self) -> usize {
        self.buf.len().saturating_sub(self.sent)
    }
}

/// Why `run` stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ran {
    /// It read all it could: more input is needed.
    Input,
    /// What waits for the client is over the limit: not read until sent.
    Output,
    /// The connection's turn is used up.
    Turn,
    /// The WebSocket is over: its last frames are queued.
    Closed,
}

/// What a callback is given besides its socket.
enum Call<'m> {
    Open,
    Message(Message<'m>),
}

/// Runs `ws` over `input`: `on_open` first, what other threads queued,
/// then each message to the application. Returns the bytes of `input`
/// used and why it stopped.
fn run(ctx: &mut Ctx<'_>, ws: &mut Ws, input: &mut [u8], out: &mut Out<'_>, work_left: &mut u32) -> (usize, Ran) {
    // The message buffer is held against the worker's budget for bodies
    // (`Limits::body_budget_bytes`); it changes only here, so what it
    // holds now is what was charged. A message to assemble may take what
    // the budget leaves.
    let held = ws.session.held();
    let others = ctx.pool.bodies - held;
    ws.session.set_room(ctx.limits.body_budget_bytes.saturating_sub(others));
    let (used, ran) = run_session(ctx, ws, input, out, work_left);
    if ran == Ran::Input && used == input.len() {
        // Nothing waits: an idle WebSocket holds no buffer (thousands
        // may be open).
        ws.session.release();
    }
    ctx.pool.bodies = others + ws.session.held();
    (used, ran)
}

/// `run`'s work, within the room the budget leaves.
fn run_session(
    ctx: &mut Ctx<'_>,
    ws: &mut Ws,
    input: &mut [u8],
    out: &mut Out<'_>,
    work_left: &mut u32,
) -> (usize, Ran) {
    if ws.opening {
        ws.opening = false;
        if !call(ctx, ws, out, Call::Open) {
            return (0, Ran::Closed);
        }
    }
    pump_outbox(ctx, ws, out, ctx.now);
    let mut used = 0;
    loop {
        if ws.session.is_closed() {
            return (used, Ran::Closed);
        }
        if out.queued() > out.limit {
            return (used, Ran::Output);
        }
        if *work_left == 0 {
            return (used, Ran::Turn);
        }
        let Ws {
            session,
            app,
            sub,
            protocol,
            close_on_backpressure,
            ..
        } = ws;
        let deflate = session.deflate();
        let (n, event) = session.poll(&mut input[used..], out.buf, ctx.now);
        match event {
            Event::Input => return (used + n, Ran::Input),
            Event::Message(kind, bytes) => {
                *work_left -= 1;
                if let Some(m) = ctx.metrics {
                    m.ws_messages_in.add(1);
                    m.ws_bytes_in.add(bytes.len() as u64);
                }
                // The session checked text as UTF-8.
                let msg = match kind {
                    Kind::Text => Message::Text(std::str::from_utf8(bytes).unwrap_or_default()),
                    Kind::Binary => Message::Binary(bytes),
                };
                // The message borrows the session or the input: the
                // callback gets a socket that needs neither.
                let parts = Parts {
                    app,
                    sub,
                    protocol: protocol.as_deref(),
                    close_on_backpressure: *close_on_backpressure,
                    deflate,
                    // Messages are handed out only while open.
                    open: true,
                };
                let called = call_with(ctx, parts, out, Call::Message(msg));
                used += n;
                settle_call(ctx, ws, out, called);
            }
            Event::Closed { code, reason } => {
                let reason = reason.to_owned();
                said_closed(ctx, ws, code, &reason);
                return (used + n, Ran::Closed);
            }
            Event::Done => return (used + n, Ran::Closed),
        }
    }
}

/// A deadline of `ws` may have passed: the 1001 of a draining server, a
/// ping, the end of a wait. False if the WebSocket must end now (its
/// Close went unanswered).
fn time_out(ctx: &mut Ctx<'_>, ws: &mut Ws, out: &mut Vec<u8>) -> bool {
    if ws.drain_at.is_some_and(|at| ctx.now >= at) {
        ws.drain_at = None;
        ws.session.close(out, 1001, "the server is going away", ctx.now);
    }
    match ws.session.handle_timeout(out, ctx.now) {
        TimedOut::Keep => true,
        TimedOut::Closed { code, reason } => {
            said_closed(ctx, ws, code, reason);
            true
        }
        TimedOut::Done => {
            said_closed(ctx, ws, 1006, "");
            false
        }
    }
}

/// Shutdown began: the 1001 goes at a random moment within the first
/// half of the shutdown timeout, so that clients do not all reconnect at
/// once. Returns when.
fn drain(ctx: &Ctx<'_>, ws: &mut Ws) -> Option<Instant> {
    if ws.drain_at.is_none() && ws.session.is_open() {
        let half = ctx.limits.shutdown_timeout / 2;
        let delay = half.mul_f64(random_fraction(ws.sub.token, ws.sub.stream));
        ws.drain_at = Some(ctx.now.checked_add(delay).unwrap_or(ctx.now));
    }
    ws.drain_at
}

/// A published frame for `ws`: queued, unless the client's queue is full
/// (then dropped, or the WebSocket closed with 1008 if the route says
/// so).
fn publish(ctx: &mut Ctx<'_>, ws: &mut Ws, out: &mut Out<'_>, frame: &[u8]) {
    if !ws.session.is_open() {
        return;
    }
    if out.queued() > out.limit {
        if let Some(m) = ctx.metrics {
            m.ws_dropped.add(1);
        }
        if ws.close_on_backpressure {
            ws.session.close(out.buf, 1008, "the client reads too slowly", ctx.now);
        }
    } else {
        out.buf.extend_from_slice(frame);
        if let Some(m) = ctx.metrics {
            m.ws_messages_out.add(1);
            m.ws_bytes_out.add(frame.len() as u64);
        }
    }
}

/// `ws` is gone: it leaves its topics, and the application hears of the
/// end if it has not (1006: no Close).
fn end(ctx: &mut Ctx<'_>, ws: &mut Ws) {
    said_closed(ctx, ws, 1006, "");
    ctx.pool.bodies -= ws.session.held();
    ws.session.free();
    ctx.ws.leave_all(&mut ws.sub);
    ws.sub.outbox = None;
    if let Some(m) = ctx.metrics {
        m.ws_closed.add(1);
    }
}

impl Conn {
    /// Switches the connection to the WebSocket its handler accepted
    /// (the 101 is queued; the input's unread bytes are the WebSocket's).
    pub(super) fn start_ws(&mut self, ctx: &mut Ctx<'_>, accepted: Accepted) {
        let ws = Ws::new(accepted, self.token, 0, ctx);
        self.switch(Proto::Ws(ws));
    }

    /// Reads messages from the input and calls the application for each.
    /// Out of line, for the same reason as `switch_to_ws`.
    #[inline(never)]
    pub(super) fn process_ws(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let Conn {
            input,
            output,
            proto,
            phase,
            work_left,
            ..
        } = self;
        let Proto::Ws(ws) = proto else {
            return Stop::Closing;
        };
        ensure_output(output, ctx.pool);
        let mut out = Out {
            buf: &mut output.buf,
            sent: output.pos,
            limit: ws.limit,
        };
        let (used, ran) = run(ctx, ws, &mut input.buf[input.start..input.end], &mut out, work_left);
        input.start += used;
        match ran {
            Ran::Input => Stop::Input,
            Ran::Output => Stop::Output,
            Ran::Turn => Stop::Turn,
            Ran::Closed => closing(phase),
        }
    }

    /// Sets the WebSocket's deadline once the connection waits.
    pub(super) fn ws_wait(&mut self) {
        let Proto::Ws(ws) = &mut self.proto else { return };
        self.state_deadline = ws.deadline();
    }

    /// A WebSocket deadline passed: a ping, the 1001 of a draining
    /// server, or the end of a wait.
    pub(super) fn ws_time_out(&mut self, ctx: &mut Ctx<'_>) -> Next {
        ensure_output(&mut self.output, ctx.pool);
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Close;
        };
        if !time_out(ctx, ws, &mut self.output.buf) {
            return Next::Close;
        }
        self.drive(ctx)
    }

    /// Shutdown began: the WebSocket's 1001 is scheduled (`drain`).
    pub(super) fn ws_drain(&mut self, ctx: &mut Ctx<'_>) -> Next {
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Keep;
        };
        if let Some(at) = drain(ctx, ws) {
            if self.deadline.is_none_or(|d| at < d) {
                self.deadline = Some(at);
            }
            self.state_deadline = self.deadline;
        }
        Next::Keep
    }

    /// A message published to a topic the WebSocket on `stream` (0: the
    /// connection itself) subscribes to.
    pub(crate) fn on_publish(&mut self, ctx: &mut Ctx<'_>, stream: u64, frame: &[u8]) -> Next {
        if stream != 0 {
            return self.publish_to_stream(ctx, stream, frame);
        }
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Keep;
        };
        ensure_output(&mut self.output, ctx.pool);
        let mut out = Out {
            buf: &mut self.output.buf,
            sent: self.output.pos,
            limit: ws.limit,
        };
        publish(ctx, ws, &mut out, frame);
        self.drive(ctx)
    }

    /// The connection is being dropped: its WebSockets end.
    pub(crate) fn end_ws(&mut self, ctx: &mut Ctx<'_>) {
        self.end_tunnels(ctx);
        match &mut self.proto {
            Proto::Ws(ws) => end(ctx, ws),
            Proto::H2(h2) => {
                for (_, ws) in &mut h2.tunnels {
                    end(ctx, ws);
                }
                h2.tunnels.clear();
            }
            Proto::H1(_) | Proto::Tunnel(_) => {}
        }
    }

    /// Stream `id` of this HTTP/2 connection was accepted as a WebSocket.
    #[cold]
    #[inline(never)]
    pub(super) fn start_tunnel(&mut self, ctx: &mut Ctx<'_>, id: u32, accepted: Accepted) {
        let ws = Ws::new(accepted, self.token, u64::from(id), ctx);
        if let Some(h2) = self.proto.h2_mut() {
            h2.tunnels.push((id, ws));
        }
    }

    /// Runs this HTTP/2 connection's WebSockets over what their streams
    /// received, and gives their streams window for what was read.
    #[cold]
    #[inline(never)]
    pub(super) fn process_tunnels(&mut self, ctx: &mut Ctx<'_>) {
        let Conn {
            proto,
            output,
            work_left,
            ..
        } = self;
        let Some(h2) = proto.h2_mut() else { return };
        let mut i = 0;
        while i < h2.tunnels.len() {
            let total = h2.session.tunnels_queued();
            let (id, ws) = &mut h2.tunnels[i];
            let ended = h2.session.with_tunnel(*id, |t, peer_done| {
                let mut out = Out::tunnel(&mut t.output, t.sent, ws.limit, total);
                let (used, ran) = run(ctx, ws, &mut t.input, &mut out, work_left);
                t.input.drain(..used);
                if ran != Ran::Closed && peer_done && t.input.is_empty() && !ws.session.is_closed() {
                    // The client ended the stream without a Close: as a
                    // TCP connection closed without one.
                    said_closed(ctx, ws, 1006, "");
                    return true;
                }
                ran == Ran::Closed
            });
            match ended {
                // The stream is gone: reset by the client, or ended.
                None => {
                    end(ctx, ws);
                    h2.tunnels.swap_remove(i);
                    continue;
                }
                Some(true) => h2.session.end_tunnel(*id),
                Some(false) => {}
            }
            i += 1;
        }
        h2.session.grant_tunnels(&mut output.buf);
    }

    /// The earliest deadline of this HTTP/2 connection's WebSockets.
    #[cold]
    #[inline(never)]
    pub(super) fn tunnels_deadline(&self) -> Option<Instant> {
        let h2 = self.proto.h2()?;
        let mut earliest: Option<Instant> = None;
        for (_, ws) in &h2.tunnels {
            if let Some(at) = ws.deadline() {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        earliest
    }

    /// A deadline passed on an HTTP/2 connection: its WebSockets' that
    /// are due. True if any was.
    #[cold]
    #[inline(never)]
    pub(super) fn tunnels_time_out(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let Some(h2) = self.proto.h2_mut() else { return false };
        let mut any = false;
        for (id, ws) in &mut h2.tunnels {
            if ws.deadline().is_none_or(|at| at > ctx.now) {
                continue;
            }
            any = true;
            let keep = h2.session.with_tunnel(*id, |t, _| time_out(ctx, ws, &mut t.output));
            if keep == Some(false) || ws.session.is_closed() {
                h2.session.end_tunnel(*id);
            }
        }
        any
    }

    /// Shutdown began on an HTTP/2 connection: each WebSocket's 1001 is
    /// scheduled (`drain`).
    pub(super) fn tunnels_drain(&mut self, ctx: &mut Ctx<'_>) {
        let Some(h2) = self.proto.h2_mut() else { return };
        for (_, ws) in &mut h2.tunnels {
            drain(ctx, ws);
        }
    }

    /// `on_publish` for the WebSocket on HTTP/2 stream `id`.
    #[cold]
    #[inline(never)]
    fn publish_to_stream(&mut self, ctx: &mut Ctx<'_>, id: u64, frame: &[u8]) -> Next {
        let (Some(h2), Ok(id)) = (self.proto.h2_mut(), u32::try_from(id)) else {
            return Next::Keep;
        };
        let total = h2.session.tunnels_queued();
        let Some((_, ws)) = h2.tunnels.iter_mut().find(|(s, _)| *s == id) else {
            return Next::Keep;
        };
        h2.session.with_tunnel(id, |t, _| {
            let mut out = Out::tunnel(&mut t.output, t.sent, ws.limit, total);
            publish(ctx, ws, &mut out, frame);
        });
        self.drive(ctx)
    }
}

/// A WebSocket on an HTTP/3 request stream (RFC 9220), for `quic::conn`:
/// the same machine as over HTTP/1.1 and HTTP/2, run over the bytes the
/// stream lends (`h3::TunnelIo`: its DATA payloads in, its frames out as
/// one DATA frame per run). The WebSockets of one QUIC connection share
/// the backpressure limit, as HTTP/2's do.
pub(crate) struct H3Ws(Ws);

/// Where an HTTP/3 WebSocket is after a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum H3Ran {
    /// It waits for input, or for the client to take what waits.
    Waits,
    /// The work budget ran out with input left: run it again soon.
    More,
    /// It is over: its last frames are queued, FIN follows.
    Over,
}

impl H3Ws {
    /// The WebSocket `upgrade` accepted on QUIC connection `token`'s
    /// request stream `stream`.
    pub(crate) fn new(upgrade: crate::ws::Upgrade, token: usize, stream: u64, ctx: &Ctx<'_>) -> Self {
        H3Ws(Ws::new(*upgrade.0, token, stream, ctx))
    }

    /// Runs the machine over what its stream received; `total` is what
    /// all of the connection's WebSockets have waiting for the client.
    /// A stream the client ended (FIN) with no Close read is the TCP
    /// close of RFC 6455 without one: 1006 to the application.
    pub(crate) fn run(
        &mut self,
        ctx: &mut Ctx<'_>,
        io: &mut crate::h3::TunnelIo<'_>,
        total: usize,
        work_left: &mut u32,
    ) -> H3Ran {
        let ws = &mut self.0;
        let mut out = Out::tunnel(&mut *io.output, io.sent, ws.limit, total);
        let (used, ran) = run(ctx, ws, &mut io.input[..], &mut out, work_left);
        io.input.drain(..used);
        if ran != Ran::Closed && io.peer_done && io.input.is_empty() && !ws.session.is_closed() {
            said_closed(ctx, ws, 1006, "");
            return H3Ran::Over;
        }
        match ran {
            Ran::Closed => H3Ran::Over,
            Ran::Turn => H3Ran::More,
            Ran::Input | Ran::Output => H3Ran::Waits,
        }
    }

    /// Its next deadline: a ping, a message's end, the peer's Close, a
    /// drain's 1001.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.0.deadline()
    }

    /// A deadline may have passed (see `time_out`): false if the
    /// WebSocket must end now.
    pub(crate) fn time_out(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<u8>) -> bool {
        time_out(ctx, &mut self.0, out) && !self.0.session.is_closed()
    }

    /// Shutdown began: its 1001 is scheduled (`drain`).
    pub(crate) fn drain(&mut self, ctx: &Ctx<'_>) {
        drain(ctx, &mut self.0);
    }

    /// A frame published to a topic it subscribes to.
    pub(crate) fn publish(&mut self, ctx: &mut Ctx<'_>, io: &mut crate::h3::TunnelIo<'_>, total: usize, frame: &[u8]) {
        let ws = &mut self.0;
        let mut out = Out::tunnel(&mut *io.output, io.sent, ws.limit, total);
        publish(ctx, ws, &mut out, frame);
    }

    /// Its stream is gone (reset or stopped by the client, or the
    /// connection closed): an abrupt close, 1006 if it had no Close.
    pub(crate) fn end(&mut self, ctx: &mut Ctx<'_>) {
        end(ctx, &mut self.0);
    }
}

/// The WebSocket is over: the last frames are sent, then the connection
/// half-closes (the server closes TCP first, RFC 6455 §7.1.1).
fn closing(phase: &mut Phase) -> Stop {
    if *phase == Phase::Open {
        *phase = Phase::Closing;
    }
    Stop::Closing
}

/// Calls `on_close` once.
fn said_closed(ctx: &mut Ctx<'_>, ws: &mut Ws, code: u16, reason: &str) {
    if let Some(mut app) = ws.app.take() {
        ctx.ws.leave_all(&mut ws.sub);
        let _ = panic::catch_unwind(AssertUnwindSafe(|| app.on_close(code, reason)));
    }
}

/// What a callback needs of the WebSocket besides the session (which the
/// message being handed out may borrow).
struct Parts<'w> {
    app: &'w mut Option<Box<dyn WebSocket>>,
    sub: &'w mut Subscriber,
    protocol: Option<&'w str>,
    close_on_backpressure: bool,
    deflate: Option<Params>,
    /// Messages may be sent (no Close sent or received).
    open: bool,
}

/// Calls the application's `on_open`; false if the WebSocket ended.
fn call(ctx: &mut Ctx<'_>, ws: &mut Ws, out: &mut Out<'_>, what: Call<'_>) -> bool {
    let parts = Parts {
        app: &mut ws.app,
        sub: &mut ws.sub,
        protocol: ws.protocol.as_deref(),
        close_on_backpressure: ws.close_on_backpressure,
        deflate: ws.session.deflate(),
        open: ws.session.is_open(),
    };
    let called = call_with(ctx, parts, out, what);
    settle_call(ctx, ws, out, called);
    !ws.session.is_closed()
}

/// Applies what a callback left: the close it asked for, or, if it
/// panicked, a close with 1011 (its application is dropped unheard).
fn settle_call(ctx: &mut Ctx<'_>, ws: &mut Ws, out: &mut Out<'_>, called: Called) {
    match called {
        Called::Done(None) => {}
        Called::Done(Some((code, reason))) => {
            ws.session.close(out.buf, code, &reason, ctx.now);
        }
        Called::Panicked => {
            ws.app = None;
            ctx.ws.leave_all(&mut ws.sub);
            ws.session.close(out.buf, 1011, "the server failed", ctx.now);
        }
    }
}

/// What a callback did.
enum Called {
    /// It returned, perhaps asking to close.
    Done(Option<(u16, String)>),
    Panicked,
}

/// Calls the application with a socket over `out`.
fn call_with(ctx: &mut Ctx<'_>, parts: Parts<'_>, out: &mut Out<'_>, what: Call<'_>) -> Called {
    let Some(app) = parts.app.as_mut() else {
        return Called::Done(None);
    };
    let mut close = None;
    let before = out.buf.len();
    let mut socket = Socket {
        out: out.buf,
        sent: out.sent,
        open: parts.open,
        limit: out.limit,
        close_on_backpressure: parts.close_on_backpressure,
        close: &mut close,
        conn: parts.sub,
        local: &mut *ctx.ws,
        protocol: parts.protocol,
        messages_out: 0,
        deflate: parts.deflate,
    };
    let called = panic::catch_unwind(AssertUnwindSafe(|| match what {
        Call::Open => app.on_open(&mut socket),
        Call::Message(msg) => app.on_message(&mut socket, msg),
    }));
    let sent = socket.messages_out;
    if let Some(m) = ctx.metrics {
        m.ws_messages_out.add(sent);
        m.ws_bytes_out.add((out.buf.len() - before) as u64);
    }
    match called {
        Ok(()) => Called::Done(close),
        Err(_) => Called::Panicked,
    }
}

/// Takes what other threads queued (`ws::Sender`) while the client's
/// queue has room.
fn pump_outbox(ctx: &Ctx<'_>, ws: &mut Ws, out: &mut Out<'_>, now: Instant) {
    let Some(outbox) = &mut ws.sub.outbox else { return };
    let (rx, _) = &mut **outbox;
    while out.queued() <= out.limit {
        if rx.is_parked() {
            return;
        }
        match rx.next() {
            Chunk::Chunk(frame) => {
                // Each chunk is one whole frame `ws::Sender` made: a Close
                // among them starts the closing handshake.
                if frame.first() == Some(&0x88) {
                    ws.session.close_queued(out.buf, &frame, now);
                } else if ws.session.is_open() {
                    out.buf.extend_from_slice(&frame);
                    if let Some(m) = ctx.metrics {
                        m.ws_messages_out.add(1);
                        m.ws_bytes_out.add(frame.len() as u64);
                    }
                }
            }
            Chunk::Wait => return,
            Chunk::End | Chunk::Failed => return,
        }
    }
}

/// A fraction in [0, 1) that differs between WebSockets and runs.
fn random_fraction(token: usize, stream: u64) -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(token);
    h.write_u64(stream);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
