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
//!   upstream bytes leave as DATA (`h2::Tunnel`, as a WebSocket's frames);
//! - over HTTP/3 (RFC 9220) likewise a request stream (`H3Tunnel`, kept
//!   and driven by `quic::conn` as it does its WebSockets): its DATA
//!   payloads come from `h3::Session::with_tunnel` as input, read from
//!   quinn-proto only while under 64 KiB wait unread (QUIC credits the
//!   client only as the upstream takes them), and the upstream's bytes
//!   leave as one DATA frame per pass.
//!
//! The stream carriers share one pass (`Tunnel::pump_stream`).
//!
//! The upstream socket is registered under `Source::Tunnel` (the
//! connection and its HTTP/2 stream) or `Source::QuicTunnel` (the QUIC
//! connection and its stream), so its readiness wakes this connection.
//!
//! Bounds (`limits::PROXY_TUNNEL_BYTES`): the upstream is not read while
//! 64 KiB of its bytes wait for the client (an HTTP/2 or HTTP/3
//! connection's tunnels share that, its WebSockets' frames included over
//! HTTP/3), and the client is not read while `BUFFER_BYTES` of its bytes
//! wait for the upstream (HTTP/2: its stream's window is given back only
//! as the upstream takes them; HTTP/3: 64 KiB, as above). Either side
//! that stops reading stops the other's sender at TCP's window (or
//! QUIC's). The upstream also waits while the worker's queued output is
//! over `output_budget_bytes` (TCP connections), and a client that takes
//! nothing for `send_timeout` is closed, as any.
//!
//! Ends: no byte either way for the upstream's `read_timeout` (60 s by
//! default, nginx's `proxy_read_timeout`) closes the tunnel (HTTP/2:
//! RST_STREAM with CANCEL; HTTP/3: the stream reset with
//! H3_REQUEST_CANCELLED); a client's FIN (END_STREAM, a QUIC stream's
//! FIN) is passed on as a FIN to the upstream, whose answer may still
//! come (within `PROXY_TUNNEL_FIN_TIMEOUT`, 5 s, of the last byte; over
//! TCP a client's reset reads as its FIN, and the next write to it
//! fails); the upstream's FIN ends the tunnel once the client has what
//! came before it (HTTP/1.1: then a lingering close; HTTP/2: END_STREAM;
//! HTTP/3: the stream's FIN); an error or reset on either side closes
//! both (HTTP/2: RST_STREAM with CONNECT_ERROR, RFC 9113 §8.5; HTTP/3:
//! a reset with H3_CONNECT_ERROR, RFC 9114 §4.4; a stream the client
//! resets or stops closes the upstream socket). A draining server keeps
//! its tunnels until the shutdown timeout cuts them, as it keeps any
//! connection still busy: it cannot speak inside frames it does not read
//! (its own WebSockets get a 1001 instead).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
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
    /// The tunnel of `handoff`'s socket, registered as `source` (the
    /// connection and its stream). `None` if the poll refuses it.
    fn open(ctx: &Ctx<'_>, sock: Sock, idle_timeout: Duration, source: Source) -> Option<Tunnel> {
        let mut t = Tunnel {
            up: sock,
            readable: true,
            writable: true,
            up_done: false,
            up_shut: false,
            idle_timeout,
            last: ctx.now,
        };
        ctx.registry
            .register(t.up.mio_source(), source.mio(), Interest::READABLE | Interest::WRITABLE)
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

    /// One pass over a stream tunnel's bytes (HTTP/2's or HTTP/3's): the
    /// client's DATA payloads (`input`) written to the upstream as far as
    /// it takes them, the client's end passed on once all went
    /// (`peer_done`), and the upstream read into `output` while fewer
    /// than `room` of its bytes wait there past `sent`. Whether the
    /// upstream is done (its FIN read), or `Err` if it failed.
    fn pump_stream(
        &mut self,
        input: &mut Vec<u8>,
        peer_done: bool,
        (output, sent): (&mut Vec<u8>, usize),
        room: usize,
        now: Instant,
        work_left: &mut u32,
    ) -> Result<bool, ()> {
        let mut moved = 0;
        if !input.is_empty() {
            let n = self.send_up(input, work_left)?;
            input.drain(..n);
            moved += n;
        }
        if peer_done && input.is_empty() {
            self.client_done(now);
        }
        moved += self.recv_up(output, sent, room, work_left)?;
        if moved > 0 {
            self.last = now;
        }
        Ok(self.up_done)
    }

    /// Says that it is closed for idling past its timeout.
    fn said_idle(&self) {
        crate::log::debug(format_args!(
            "proxy: a WebSocket tunnel idle for {:?}: closed",
            self.idle_timeout
        ));
    }

    /// Its socket is ready: a read (write) may find something (room).
    fn on_ready(&mut self) {
        self.readable = true;
        self.writable = true;
        // An `https://` upstream's records rustls could not send before
        // (the socket was full) go now; an error shows at the next
        // write or read.
        let _ = self.up.flush();
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

/// The 200 that accepts a proxied extended CONNECT (HTTP/2, HTTP/3), with
/// the upstream's `fields` (complete lines, `proxy::tunnel::switched`).
fn accepted(fields: &[u8]) -> Response {
    let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(fields.to_vec())))
        .unwrap_or_else(|_| HeaderBlock::engine_lines(b""));
    Response::prepared(200, block, Vec::new())
}

/// A proxied WebSocket on an HTTP/3 request stream (RFC 9220), for
/// `quic::conn`, which keeps it beside its stream as it keeps its
/// WebSockets (`H3Ws`): the tunnel's upstream side, run over the bytes
/// the stream lends (`h3::TunnelIo`).
pub(crate) struct H3Tunnel(Tunnel);

/// What came of handing an upstream's switch to an HTTP/3 stream
/// (`H3Tunnel::open`).
pub(crate) enum H3Opened {
    /// The stream is gone (the client reset it): the upstream closes.
    Gone,
    /// The 200 is queued but the poll refused the upstream socket: the
    /// stream is to be reset (H3_CONNECT_ERROR).
    Refused,
    /// The tunnel, with what the upstream sent after its 101: the
    /// stream's first bytes for the client.
    Open(H3Tunnel, Vec<u8>),
}

impl H3Tunnel {
    /// Accepts the extended CONNECT on QUIC connection `quic`'s `stream`
    /// (`None`: reset by the client meanwhile) for `handoff`'s upstream:
    /// its 200 is queued through `accept` (the stream, the response and
    /// the date; false if the stream is gone), the deferral is logged as
    /// that 200, and the upstream socket is registered.
    pub(crate) fn open(
        ctx: &mut Ctx<'_>,
        (peer, deferral): (SocketAddr, dispatch::Deferral),
        handoff: Handoff,
        (quic, stream): (usize, Option<u64>),
        accept: impl FnOnce(u64, &Response, &[u8]) -> bool,
    ) -> H3Opened {
        let date = ctx.date.http();
        let Some(stream) = stream.filter(|&s| accept(s, &accepted(&handoff.fields), &date[..])) else {
            dispatch::finish(ctx, peer, deferral, None, None);
            return H3Opened::Gone;
        };
        // RFC 9220 §3 (RFC 8441 §5): the extended CONNECT's 200, logged
        // as such.
        dispatch::finish(ctx, peer, deferral, Some((200, 0, None)), None);
        // A stream id past the tokens' room (four billion requests on one
        // connection) gets no tunnel.
        if stream >= 4 * crate::sources::QUIC_TUNNEL_STRIDE as u64 {
            return H3Opened::Refused;
        }
        let source = Source::QuicTunnel { quic, stream };
        match Tunnel::open(ctx, handoff.sock, handoff.idle_timeout, source) {
            Some(t) => H3Opened::Open(H3Tunnel(t), handoff.early),
            None => H3Opened::Refused,
        }
    }

    /// Copies what the stream received to the upstream and the
    /// upstream's bytes into the stream's DATA (`io`); `total` is what all
    /// of the connection's tunnels and WebSockets have waiting for the
    /// client (one client reads them all). Whether the upstream is done,
    /// or `Err` if it failed.
    pub(crate) fn run(
        &mut self,
        ctx: &Ctx<'_>,
        io: &mut crate::h3::TunnelIo<'_>,
        total: usize,
        work_left: &mut u32,
    ) -> Result<bool, ()> {
        // This stream's own bytes waiting (with the DATA frame's header
        // opened for this run, which `total` was counted without).
        let own = io.output.len() - io.sent;
        let room = PROXY_TUNNEL_BYTES.saturating_sub(total.saturating_sub(own));
        let t = &mut self.0;
        t.pump_stream(
            io.input,
            io.peer_done,
            (&mut *io.output, io.sent),
            room,
            ctx.now,
            work_left,
        )
    }

    /// Its upstream socket is ready.
    pub(crate) fn on_ready(&mut self) {
        self.0.on_ready();
    }

    /// Whether `work_left` (what `run` counts down) still pays for a
    /// read or write of an upstream socket.
    pub(crate) fn can_work(work_left: u32) -> bool {
        work_left >= SYSCALL_WORK
    }

    /// When it times out if nothing moves.
    pub(crate) fn deadline(&self) -> Instant {
        self.0.deadline()
    }

    /// Its stream or connection is gone, or it timed out: counted ended
    /// (dropping it closes the upstream socket).
    pub(crate) fn end(self, ctx: &Ctx<'_>) {
        if self.0.deadline() <= ctx.now {
            self.0.said_idle();
        }
        ended(ctx);
    }
}

impl Conn {
    /// An upstream switched to WebSocket for this connection's deferred
    /// request `id`: the client gets its 101 (HTTP/1.1) or 200 (HTTP/2)
    /// and the tunnel opens (HTTP/3's: `QuicConn::on_tunnel`). A
    /// connection that no longer waits for `id` drops it (the upstream
    /// socket closes).
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
        let source = Source::Tunnel {
            conn: self.token,
            stream: 0,
        };
        let Some(t) = Tunnel::open(ctx, handoff.sock, handoff.idle_timeout, source) else {
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
            let response = accepted(&handoff.fields);
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
        let source = Source::Tunnel { conn: *token, stream };
        match Tunnel::open(ctx, handoff.sock, handoff.idle_timeout, source) {
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
        t.on_ready();
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
            t.said_idle();
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
                if st.sent > 0 {
                    st.output.drain(..st.sent);
                    st.sent = 0;
                }
                t.pump_stream(&mut st.input, peer_done, (&mut st.output, 0), room, ctx.now, work_left)
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
