//! The client side of the reverse proxy's WebSocket tunnels: once an
//! upstream answered a WebSocket opening with a good 101
//! (`proxy/tunnel.rs`), its socket comes here, to the connection whose
//! request it answered, and bytes are copied both ways unchanged (no
//! frame is read). One copier, two carriers, as `conn/ws.rs` has them:
//! - after an HTTP/1.1 upgrade the connection is the tunnel (`Tunnel` in
//!   the protocol slot, inline in HTTP/1.1's room): the client's bytes
//!   are the connection's input, the upstream's go into its output, TLS
//!   or not;
//! - over HTTP/2 (an extended CONNECT, RFC 8441) each tunnel is a stream
//!   (`Http2::proxied`), whose DATA are written to the upstream and whose
//!   upstream bytes leave as DATA (`h2::Tunnel`, as a WebSocket's frames).
//!
//! The upstream socket is registered under `Source::Tunnel` (the
//! connection and its stream), so its readiness wakes this connection.
//!
//! Bounds (`limits::PROXY_TUNNEL_BYTES`): the upstream is not read while
//! 64 KiB of its bytes wait for the client (an HTTP/2 connection's tunnels
//! share that), and the client is not read while `BUFFER_BYTES` of its
//! bytes wait for the upstream (HTTP/2: its stream's window is given back
//! only as the upstream takes them). Either side that stops reading stops
//! the other's sender at TCP's window. The upstream also waits while the
//! worker's queued output is over `output_budget_bytes`, and a client that
//! takes nothing for `send_timeout` is closed, as any.
//!
//! Ends: no byte either way for the upstream's `read_timeout` (60 s by
//! default, nginx's `proxy_read_timeout`) closes the tunnel (HTTP/2:
//! RST_STREAM with CANCEL); a client's
//! FIN (END_STREAM) is passed on as a FIN to the upstream, whose answer
//! may still come (within `PROXY_TUNNEL_FIN_TIMEOUT`, 5 s, of the last
//! byte; a client's reset reads as its FIN, and the next write to it
//! fails); the upstream's FIN ends the tunnel once the client has
//! what came before it (HTTP/1.1: then a lingering close; HTTP/2:
//! END_STREAM); an error or reset on either side closes both (HTTP/2:
//! RST_STREAM with CONNECT_ERROR, RFC 9113 §8.5). A draining server keeps
//! its tunnels until the shutdown timeout cuts them, as it keeps any
//! connection still busy: it cannot speak inside frames it does not read
//! (its own WebSockets get a 1001 instead).

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Interest;

use super::{dispatch, take_syscall, Conn, Ctx, Next, Phase, Proto, Stop, SYSCALL_WORK};
use crate::buffers::ensure_output;
use crate::limits::{BUFFER_BYTES, PROXY_TUNNEL_BYTES, PROXY_TUNNEL_FIN_TIMEOUT};
use crate::proxy::{Handoff, Sock};
use crate::response::{HeaderBlock, Response, SharedBytes};
use crate::sources::Source;

/// Bytes read from an upstream per `read`.
const READ_BYTES: usize = 16 * 1024;

/// One tunnel's upstream side.
pub(super) struct Tunnel {
    up: Sock,
    /// No EAGAIN from the socket since its last readiness event: a read
    /// (write) may find something (room).
    readable: bool,
    writable: bool,
    /// The upstream ended its side (a read gave 0).
    up_done: bool,
    /// The client ended its side and the upstream was told (FIN).
    up_shut: bool,
    idle_timeout: Duration,
    /// When a byte last went either way.
    last: Instant,
}

// The tunnel takes HTTP/1.1's room and makes no connection larger.
const _: () = assert!(std::mem::size_of::<Tunnel>() <= std::mem::size_of::<super::h1::Http1>());

impl Tunnel {
    /// The tunnel of `handoff`'s socket, registered for connection
    /// `token`'s `stream` (0: the connection itself). `None` if the poll
    /// refuses it.
    fn open(ctx: &Ctx<'_>, sock: Sock, idle_timeout: Duration, token: usize, stream: u32) -> Option<Tunnel> {
        let mut t = Tunnel {
            up: sock,
            readable: true,
            writable: true,
            up_done: false,
            up_shut: false,
            idle_timeout,
            last: ctx.now,
        };
        let source = Source::Tunnel { conn: token, stream }.mio();
        ctx.registry
            .register(t.up.mio_source(), source, Interest::READABLE | Interest::WRITABLE)
            .ok()?;
        if let Some(m) = ctx.metrics {
            m.proxy_tunnels_opened.add(1);
        }
        Some(t)
    }

    /// When the tunnel times out if nothing moves.
    fn deadline(&self) -> Instant {
        self.last + self.idle_timeout
    }

    /// Writes the client's `bytes` to the upstream while it takes them;
    /// how many it took, or `Err` if the upstream failed.
    fn send_up(&mut self, bytes: &[u8], work_left: &mut u32) -> Result<usize, ()> {
        let mut sent = 0;
        while sent < bytes.len() && self.writable && !self.up_shut && take_syscall(work_left) {
            match self.up.write(&bytes[sent..]) {
                Ok(0) => return Err(()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
        Ok(sent)
    }

    /// Reads the upstream into `out` while fewer than `room` of its bytes
    /// (those after `sent`) wait for the client; how many it read, or
    /// `Err` if the upstream failed.
    fn recv_up(&mut self, out: &mut Vec<u8>, sent: usize, room: usize, work_left: &mut u32) -> Result<usize, ()> {
        let mut read = 0;
        while self.readable && !self.up_done && out.len() - sent < room && take_syscall(work_left) {
            let at = out.len();
            let want = (room - (at - sent)).min(READ_BYTES);
            out.resize(at + want, 0);
            let result = self.up.read(&mut out[at..]);
            out.truncate(at + *result.as_ref().unwrap_or(&0));
            match result {
                Ok(0) => self.up_done = true,
                Ok(n) => read += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
        Ok(read)
    }

    /// The client ended its side and every byte it sent is written: the
    /// upstream is told, and may still answer, within
    /// `PROXY_TUNNEL_FIN_TIMEOUT` of the last byte.
    fn client_done(&mut self, now: Instant) {
        if !self.up_shut {
            self.up_shut = true;
            let _ = self.up.shutdown_write();
            self.idle_timeout = self.idle_timeout.min(PROXY_TUNNEL_FIN_TIMEOUT);
            self.last = now;
        }
    }
}

/// Counts a tunnel's end.
fn ended(ctx: &Ctx<'_>) {
    if let Some(m) = ctx.metrics {
        m.proxy_tunnels_closed.add(1);
    }
}

impl Conn {
    /// An upstream switched to WebSocket for this connection's deferred
    /// request `id`: the client gets its 101 (HTTP/1.1) or 200 (HTTP/2)
    /// and the tunnel opens. A connection that no longer waits for `id`
    /// drops it (the upstream socket closes).
    #[cold]
    #[inline(never)]
    pub(crate) fn on_tunnel(&mut self, ctx: &mut Ctx<'_>, id: u64, handoff: Handoff) -> Next {
        match self.proto {
            Proto::H1(_) => self.open_tunnel_h1(ctx, id, handoff),
            Proto::H2(_) => self.open_tunnel_h2(ctx, id, handoff),
            Proto::Ws(_) | Proto::Tunnel(_) => Next::Keep,
        }
    }

    fn open_tunnel_h1(&mut self, ctx: &mut Ctx<'_>, id: u64, handoff: Handoff) -> Next {
        let Proto::H1(h1) = &mut self.proto else {
            return Next::Keep;
        };
        let Some(deferral) = h1.deferral.take_if(|d| d.id == id) else {
            return Next::Keep;
        };
        ensure_output(&mut self.output, ctx.pool);
        let env = ctx.h1;
        let Some(sent) = h1.machine.upgrade(&mut self.output, "websocket", &handoff.fields, env) else {
            // The request cannot switch (`tunnel::offer` saw to it that it
            // can): only a bug gets here.
            let mut refused = Response::error(502).with_close();
            let sent = h1
                .machine
                .answer(&mut self.output, &mut refused, env, self.transport.extra_fields());
            dispatch::finish(
                ctx,
                self.peer,
                deferral,
                sent.map(|s| (s.status, s.body_bytes, None)),
                None,
            );
            return self.drive(ctx);
        };
        dispatch::finish(
            ctx,
            self.peer,
            deferral,
            Some((sent.status, sent.body_bytes, None)),
            None,
        );
        let Some(t) = Tunnel::open(ctx, handoff.sock, handoff.idle_timeout, self.token, 0) else {
            return Next::Close;
        };
        // What the upstream sent after its 101 follows ours.
        self.output.buf.extend_from_slice(&handoff.early);
        self.switch(Proto::Tunnel(t));
        self.drive(ctx)
    }

    fn open_tunnel_h2(&mut self, ctx: &mut Ctx<'_>, id: u64, handoff: Handoff) -> Next {
        self.ensure_output(ctx.pool);
        let Conn {
            proto,
            output,
            transport,
            token,
            peer,
            ..
        } = self;
        let Some(h2) = proto.h2_mut() else { return Next::Keep };
        let Some(at) = h2.deferred.iter().position(|d| d.id == id) else {
            return Next::Keep;
        };
        let deferral = h2.deferred.swap_remove(at);
        // The client may have reset the stream meanwhile.
        let accepted = h2.session.deferred_stream(id).filter(|&stream| {
            let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(handoff.fields.clone())))
                .unwrap_or_else(|_| HeaderBlock::engine_lines(b""));
            let response = Response::prepared(200, block, Vec::new());
            let date = &ctx.date.http()[..];
            h2.session
                .accept_tunnel(stream, &response, date, transport.extra_fields(), &mut output.buf)
        });
        let Some(stream) = accepted else {
            dispatch::finish(ctx, *peer, deferral, None, None);
            return Next::Keep;
        };
        // RFC 8441 §5: the extended CONNECT's 200, logged as such.
        dispatch::finish(ctx, *peer, deferral, Some((200, 0, None)), None);
        match Tunnel::open(ctx, handoff.sock, handoff.idle_timeout, *token, stream) {
            Some(t) => {
                h2.session
                    .with_tunnel(stream, |st, _| st.output.extend_from_slice(&handoff.early));
                h2.proxied.push((stream, t));
            }
            None => h2.session.reset_tunnel(stream, &mut output.buf),
        }
        self.drive(ctx)
    }

    /// The upstream socket of the tunnel on `stream` (0: the connection
    /// itself) is ready.
    pub(crate) fn on_tunnel_event(&mut self, ctx: &mut Ctx<'_>, stream: u32) -> Next {
        let t = match &mut self.proto {
            Proto::Tunnel(t) if stream == 0 => t,
            Proto::H2(h2) => match h2.proxied.iter_mut().find(|(id, _)| *id == stream) {
                Some((_, t)) => t,
                None => return Next::Keep,
            },
            _ => return Next::Keep,
        };
        t.readable = true;
        t.writable = true;
        // An `https://` upstream's records rustls could not send before
        // (the socket was full) go now; an error shows at the next
        // write or read.
        let _ = t.up.flush();
        self.drive(ctx)
    }

    /// Copies what the client sent to the upstream and what the upstream
    /// sent into the output, until both wait. Out of line: the request
    /// path of every other connection must not carry it.
    #[inline(never)]
    pub(super) fn process_tunnel(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let Conn {
            input,
            output,
            proto,
            phase,
            peer_closed,
            work_left,
            ..
        } = self;
        let Proto::Tunnel(t) = proto else {
            return Stop::Closing;
        };
        ensure_output(output, ctx.pool);
        loop {
            let mut moved = 0;
            if input.start < input.end {
                match t.send_up(&input.buf[input.start..input.end], work_left) {
                    Ok(n) => {
                        input.start += n;
                        moved += n;
                    }
                    Err(()) => return Stop::Broken,
                }
            }
            if input.start == input.end {
                input.start = 0;
                input.end = 0;
                if *peer_closed {
                    t.client_done(ctx.now);
                }
            }
            if output.tail.is_none() && output.pos > 0 {
                // What was sent goes, so the buffer holds only what waits.
                output.buf.drain(..output.pos);
                output.pos = 0;
            }
            // The worker's queued answers past their budget: the upstream
            // waits too (`Limits::output_budget_bytes`).
            let room = if Conn::over_output_budget(ctx, output.buf.len() - output.pos) {
                0
            } else {
                PROXY_TUNNEL_BYTES
            };
            match t.recv_up(&mut output.buf, output.pos, room, work_left) {
                Ok(n) => moved += n,
                Err(()) => return Stop::Broken,
            }
            if moved == 0 {
                break;
            }
            t.last = ctx.now;
        }
        if t.up_done {
            // The upstream is done: the client gets what came before its
            // FIN, then the connection closes.
            t.client_done(ctx.now);
            if *phase == Phase::Open {
                *phase = Phase::Closing;
            }
            return Stop::Closing;
        }
        if output.buf.len() - output.pos >= PROXY_TUNNEL_BYTES {
            return Stop::Output;
        }
        if *work_left < SYSCALL_WORK {
            return Stop::Turn;
        }
        if input.end - input.start >= BUFFER_BYTES {
            // The upstream is not taking the client's bytes: the client is
            // not read until it does (its event wakes the connection).
            return Stop::Deferred;
        }
        Stop::Input
    }

    /// Sets the tunnel's idle deadline once the connection waits.
    pub(super) fn tunnel_wait(&mut self) {
        if let Proto::Tunnel(t) = &self.proto {
            self.state_deadline = Some(t.deadline());
        }
    }

    /// The tunnel's deadline passed: closed if nothing moved since.
    pub(super) fn tunnel_time_out(&mut self, ctx: &mut Ctx<'_>) -> Next {
        let Proto::Tunnel(t) = &self.proto else {
            return Next::Close;
        };
        if t.deadline() <= ctx.now {
            crate::log::debug(format_args!(
                "proxy: a WebSocket tunnel idle for {:?}: closed",
                t.idle_timeout
            ));
            return Next::Close;
        }
        self.state_deadline = Some(t.deadline());
        self.deadline = self.state_deadline;
        Next::Keep
    }

    /// Copies the bytes of this HTTP/2 connection's tunnels both ways,
    /// and gives their streams window for what the upstreams took.
    #[cold]
    #[inline(never)]
    pub(super) fn process_proxied(&mut self, ctx: &mut Ctx<'_>) {
        let Conn {
            proto,
            output,
            work_left,
            ..
        } = self;
        let Some(h2) = proto.h2_mut() else { return };
        let mut i = 0;
        while i < h2.proxied.len() {
            let total = h2.session.tunnels_queued();
            let (id, t) = &mut h2.proxied[i];
            let pumped = h2.session.with_tunnel(*id, |st, peer_done| {
                // The connection's tunnels share the bound: one client
                // reads them all.
                let room = PROXY_TUNNEL_BYTES.saturating_sub(total - st.queued());
                let mut moved = 0;
                if !st.input.is_empty() {
                    let n = t.send_up(&st.input, work_left)?;
                    st.input.drain(..n);
                    moved += n;
                }
                if peer_done && st.input.is_empty() {
                    t.client_done(ctx.now);
                }
                if st.sent > 0 {
                    st.output.drain(..st.sent);
                    st.sent = 0;
                }
                moved += t.recv_up(&mut st.output, 0, room, work_left)?;
                if moved > 0 {
                    t.last = ctx.now;
                }
                Ok::<bool, ()>(t.up_done)
            });
            match pumped {
                // The stream is gone (reset by the client, or over both
                // ways): its upstream closes.
                None => {
                    ended(ctx);
                    h2.proxied.swap_remove(i);
                    continue;
                }
                Some(Err(())) => {
                    h2.session.reset_tunnel(*id, &mut output.buf);
                    ended(ctx);
                    h2.proxied.swap_remove(i);
                    continue;
                }
                // END_STREAM after what the upstream sent.
                Some(Ok(true)) => h2.session.end_tunnel(*id),
                Some(Ok(false)) => {}
            }
            i += 1;
        }
        h2.session.grant_tunnels(&mut output.buf);
    }

    /// The earliest idle deadline of this HTTP/2 connection's tunnels.
    #[cold]
    #[inline(never)]
    pub(super) fn proxied_deadline(&self) -> Option<Instant> {
        let h2 = self.proto.h2()?;
        h2.proxied.iter().map(|(_, t)| t.deadline()).min()
    }

    /// A deadline passed on an HTTP/2 connection: its tunnels idle past
    /// theirs are reset (CANCEL) and closed. True if any was.
    #[cold]
    #[inline(never)]
    pub(super) fn proxied_time_out(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.ensure_output(ctx.pool);
        let Some(h2) = self.proto.h2_mut() else { return false };
        let before = h2.proxied.len();
        let (session, out) = (&mut h2.session, &mut self.output.buf);
        h2.proxied.retain(|(id, t)| {
            if t.deadline() > ctx.now {
                return true;
            }
            session.cancel_tunnel(*id, out);
            ended(ctx);
            false
        });
        h2.proxied.len() != before
    }

    /// The connection is being dropped: its tunnels end (their upstream
    /// sockets close with it).
    pub(super) fn end_tunnels(&mut self, ctx: &Ctx<'_>) {
        match &mut self.proto {
            Proto::Tunnel(_) => ended(ctx),
            Proto::H2(h2) => {
                for _ in h2.proxied.drain(..) {
                    ended(ctx);
                }
            }
            Proto::H1(_) | Proto::Ws(_) => {}
        }
    }
}
