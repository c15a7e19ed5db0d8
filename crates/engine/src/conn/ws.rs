//! The WebSocket side of a connection: drives `ws::session::Session` over
//! the read buffer after an HTTP/1.1 upgrade, calls the application's
//! callbacks for each message (catching panics: 1011), sends what they
//! and other threads queue, and fans out published messages.
//!
//! The input is read only while what waits for the client is under the
//! route's `backpressure_bytes_max`: a client that sends without reading
//! is not read either (TCP's window closes), so it cannot make the worker
//! hold more than that and one message.

use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use super::{Conn, Ctx, Next, Phase, Proto, Stop};
use crate::body::Next as Chunk;
use crate::buffers::ensure_output;
use crate::ws::hub::Subscriber;
use crate::ws::session::{Config, Event, Kind, Session, TimedOut};
use crate::ws::{Accepted, Message, Socket, WebSocket};

/// A WebSocket in the connection's protocol slot: inline, as HTTP/1.1's
/// machine, whose room it takes (no larger, `conn/mod.rs` checks), so an
/// idle WebSocket costs the connection's slot and nothing else.
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
    pub(super) fn new(accepted: Accepted, token: usize, ctx: &Ctx<'_>) -> Self {
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
        };
        Ws {
            session: Session::new(config, ctx.now),
            app: Some(app),
            protocol: handshake.protocol.map(String::into_boxed_str),
            limit: options.backpressure_bytes_max,
            close_on_backpressure: options.close_on_backpressure,
            sub: Subscriber::new(token),
            drain_at: None,
            opening: true,
        }
    }
}

/// What a callback is given besides its socket.
enum Call<'m> {
    Open,
    Message(Message<'m>),
}

impl Conn {
    /// Switches the connection to the WebSocket its handler accepted
    /// (the 101 is queued; the input's unread bytes are the WebSocket's).
    pub(super) fn start_ws(&mut self, ctx: &mut Ctx<'_>, accepted: Accepted) {
        let ws = Ws::new(accepted, self.token, ctx);
        self.switch(Proto::Ws(ws));
        if let Some(m) = ctx.metrics {
            m.ws_opened.add(1);
        }
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
        if ws.opening {
            ws.opening = false;
            if !call(ctx, ws, output, Call::Open) {
                return closing(phase);
            }
        }
        pump_outbox(ctx, ws, output, ctx.now);
        loop {
            if ws.session.is_closed() {
                return closing(phase);
            }
            if output.queued() > ws.limit {
                return Stop::Output;
            }
            if *work_left == 0 {
                return Stop::Turn;
            }
            let data = &mut input.buf[input.start..input.end];
            let Ws {
                session,
                app,
                sub,
                protocol,
                limit,
                close_on_backpressure,
                ..
            } = ws;
            let (used, event) = session.poll(data, &mut output.buf, ctx.now);
            match event {
                Event::Input => {
                    input.start += used;
                    return Stop::Input;
                }
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
                        limit: *limit,
                        close_on_backpressure: *close_on_backpressure,
                        // Messages are handed out only while open.
                        open: true,
                    };
                    let called = call_with(ctx, parts, output, Call::Message(msg));
                    input.start += used;
                    settle_call(ctx, ws, output, called);
                }
                Event::Closed { code, reason } => {
                    let reason = reason.to_owned();
                    input.start += used;
                    said_closed(ctx, ws, code, &reason);
                    return closing(phase);
                }
                Event::Done => {
                    input.start += used;
                    return closing(phase);
                }
            }
        }
    }

    /// Sets the WebSocket's deadline (a ping, a message's end, the peer's
    /// Close, a drain's 1001) once the connection waits, and gives back
    /// the message buffer of one left idle.
    pub(super) fn ws_wait(&mut self) {
        let Proto::Ws(ws) = &mut self.proto else { return };
        let deadline = match (ws.session.poll_timeout(), ws.drain_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // An idle WebSocket holds no buffer (thousands may be open).
        if self.input.is_empty() {
            ws.session.release();
        }
        self.state_deadline = deadline;
    }

    /// A WebSocket deadline passed: a ping, the 1001 of a draining
    /// server, or the end of a wait.
    pub(super) fn ws_time_out(&mut self, ctx: &mut Ctx<'_>) -> Next {
        ensure_output(&mut self.output, ctx.pool);
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Close;
        };
        if ws.drain_at.is_some_and(|at| ctx.now >= at) {
            ws.drain_at = None;
            ws.session
                .close(&mut self.output.buf, 1001, "the server is going away", ctx.now);
        }
        match ws.session.handle_timeout(&mut self.output.buf, ctx.now) {
            TimedOut::Keep => {}
            TimedOut::Closed { code, reason } => said_closed(ctx, ws, code, reason),
            TimedOut::Done => {
                said_closed(ctx, ws, 1006, "");
                return Next::Close;
            }
        }
        self.drive(ctx)
    }

    /// Shutdown began: the 1001 goes at a random moment within the first
    /// half of the shutdown timeout, so that clients do not all reconnect
    /// at once.
    pub(super) fn ws_drain(&mut self, ctx: &mut Ctx<'_>) -> Next {
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Keep;
        };
        if ws.drain_at.is_none() && ws.session.is_open() {
            let half = ctx.limits.shutdown_timeout / 2;
            let delay = half.mul_f64(random_fraction(self.token));
            ws.drain_at = Some(ctx.now.checked_add(delay).unwrap_or(ctx.now));
            if let Some(at) = ws.drain_at {
                if self.deadline.is_none_or(|d| at < d) {
                    self.deadline = Some(at);
                }
                self.state_deadline = self.deadline;
            }
        }
        Next::Keep
    }

    /// A message published to a topic this connection subscribes to: its
    /// frame is queued, unless the client's queue is full (then dropped,
    /// or the connection closed with 1008 if the route says so).
    pub(crate) fn on_publish(&mut self, ctx: &mut Ctx<'_>, frame: &[u8]) -> Next {
        let Proto::Ws(ws) = &mut self.proto else {
            return Next::Keep;
        };
        if !ws.session.is_open() {
            return Next::Keep;
        }
        ensure_output(&mut self.output, ctx.pool);
        if self.output.queued() > ws.limit {
            if let Some(m) = ctx.metrics {
                m.ws_dropped.add(1);
            }
            if !ws.close_on_backpressure {
                return Next::Keep;
            }
            ws.session
                .close(&mut self.output.buf, 1008, "the client reads too slowly", ctx.now);
        } else {
            self.output.buf.extend_from_slice(frame);
            if let Some(m) = ctx.metrics {
                m.ws_messages_out.add(1);
                m.ws_bytes_out.add(frame.len() as u64);
            }
        }
        self.drive(ctx)
    }

    /// The connection is being dropped: the WebSocket leaves its topics,
    /// and the application hears of the end if it has not (1006: no Close).
    pub(crate) fn end_ws(&mut self, ctx: &mut Ctx<'_>) {
        if let Proto::Ws(ws) = &mut self.proto {
            said_closed(ctx, ws, 1006, "");
            ctx.ws.leave_all(&mut ws.sub);
            ws.sub.outbox = None;
            if let Some(m) = ctx.metrics {
                m.ws_closed.add(1);
            }
        }
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
    limit: usize,
    close_on_backpressure: bool,
    /// Messages may be sent (no Close sent or received).
    open: bool,
}

/// Calls the application's `on_open`; false if the WebSocket ended.
fn call(ctx: &mut Ctx<'_>, ws: &mut Ws, output: &mut crate::buffers::Output, what: Call<'_>) -> bool {
    let parts = Parts {
        app: &mut ws.app,
        sub: &mut ws.sub,
        protocol: ws.protocol.as_deref(),
        limit: ws.limit,
        close_on_backpressure: ws.close_on_backpressure,
        open: ws.session.is_open(),
    };
    let called = call_with(ctx, parts, output, what);
    settle_call(ctx, ws, output, called);
    !ws.session.is_closed()
}

/// Applies what a callback left: the close it asked for, or, if it
/// panicked, a close with 1011 (its application is dropped unheard).
fn settle_call(ctx: &mut Ctx<'_>, ws: &mut Ws, output: &mut crate::buffers::Output, called: Called) {
    match called {
        Called::Done(None) => {}
        Called::Done(Some((code, reason))) => {
            ws.session.close(&mut output.buf, code, &reason, ctx.now);
        }
        Called::Panicked => {
            ws.app = None;
            ctx.ws.leave_all(&mut ws.sub);
            ws.session.close(&mut output.buf, 1011, "the server failed", ctx.now);
        }
    }
}

/// What a callback did.
enum Called {
    /// It returned, perhaps asking to close.
    Done(Option<(u16, String)>),
    Panicked,
}

/// Calls the application with a socket over `output`.
fn call_with(ctx: &mut Ctx<'_>, parts: Parts<'_>, output: &mut crate::buffers::Output, what: Call<'_>) -> Called {
    let Some(app) = parts.app.as_mut() else {
        return Called::Done(None);
    };
    let mut close = None;
    let before = output.buf.len();
    let mut socket = Socket {
        out: &mut output.buf,
        sent: output.pos,
        open: parts.open,
        limit: parts.limit,
        close_on_backpressure: parts.close_on_backpressure,
        close: &mut close,
        conn: parts.sub,
        local: &mut *ctx.ws,
        protocol: parts.protocol,
        messages_out: 0,
    };
    let called = panic::catch_unwind(AssertUnwindSafe(|| match what {
        Call::Open => app.on_open(&mut socket),
        Call::Message(msg) => app.on_message(&mut socket, msg),
    }));
    let sent = socket.messages_out;
    if let Some(m) = ctx.metrics {
        m.ws_messages_out.add(sent);
        m.ws_bytes_out.add((output.buf.len() - before) as u64);
    }
    match called {
        Ok(()) => Called::Done(close),
        Err(_) => Called::Panicked,
    }
}

/// Takes what other threads queued (`ws::Sender`) while the client's
/// queue has room.
fn pump_outbox(ctx: &Ctx<'_>, ws: &mut Ws, output: &mut crate::buffers::Output, now: Instant) {
    let Some(outbox) = &mut ws.sub.outbox else { return };
    let (rx, _) = &mut **outbox;
    while output.queued() <= ws.limit {
        if rx.is_parked() {
            return;
        }
        match rx.next() {
            Chunk::Chunk(frame) => {
                // Each chunk is one whole frame `ws::Sender` made: a Close
                // among them starts the closing handshake.
                if frame.first() == Some(&0x88) {
                    ws.session.close_queued(&mut output.buf, &frame, now);
                } else if ws.session.is_open() {
                    output.buf.extend_from_slice(&frame);
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

/// A fraction in [0, 1) that differs between connections and runs.
fn random_fraction(token: usize) -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(token);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
