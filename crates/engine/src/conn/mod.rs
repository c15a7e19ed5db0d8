//! One connection: the I/O driver under the protocol state machines
//! (`h1::H1`, `h2::Session`), and the read → parse → answer → write cycle
//! that the worker drives on every readiness event.
//!
//! The cycle, for a keep-alive client sending one request at a time, is one
//! `read`, one handler call and one `write`. For a pipelining client, every
//! complete request already in the read buffer is answered into one output
//! buffer, which leaves in one `write`: answers are never split across writes
//! unless they outgrow `write_buffer_bytes_max` or carry a large body.
//!
//! Invariants:
//! - Responses leave in the order requests arrived. A deferred request, or a
//!   response with a large body still being sent, holds back the requests
//!   after it (they wait in the read buffer).
//! - A connection holds no buffer while idle: both go back to the worker's
//!   pool, so an idle keep-alive connection costs only this struct.
//! - After an error response the connection is half-closed and drained
//!   ("lingering close", as nginx does) so the client reads the error rather
//!   than a reset.
//!
//! Files, by concern:
//! - `mod.rs`: the driver — readiness events, reading, deadlines, the turn
//!   budget, closing and lingering — shared by both protocols.
//! - `h1.rs`: drives the HTTP/1.1 machine (`crate::h1`).
//! - `h2.rs`: drives the HTTP/2 session (`crate::h2`).
//! - `dispatch.rs`: the handler call and deferred answers, for both.
//! - `buffers.rs`: the input, the output queue and the worker's pool.
//! - `flush.rs`: writing what is queued (write, writev, sendfile with
//!   TCP_CORK, or TLS records) and the lingering close.
//!
//! Transport: a connection is plain TCP or TLS (`Transport`, an enum: the
//! plain path pays one branch). Under TLS the buffers hold plaintext as
//! they do for TCP; reads go through `TlsSession::read`, and `flush_tls`
//! encrypts the output buffer and tail while rustls has room, then writes
//! the records. Files are read with `pread` into a pooled buffer instead of
//! `sendfile`.

use std::cell::Cell;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sys::stream::Stream;
use mio::Interest;

use crate::sources::Source;

pub(crate) mod dispatch;
mod flush;
mod h1;
mod h2;
mod interim;
mod proxy;
pub(crate) mod streams;
mod tunnel;
mod ws;

pub(crate) use crate::buffers::BufPool;
use crate::buffers::{ensure_output, Input, Output, Tail};
pub(crate) use tunnel::{H3Opened, H3Tunnel};
pub(crate) use ws::{H3Ran, H3Ws};

use crate::access_log::{Line, LogWriter};
use crate::date::DateCache;
use crate::h1::H1;
use crate::handler::Handler;
use crate::limits::{Limits, H2_READ_BYTES};
use crate::metrics::WorkerMetrics;
use crate::responder::Mailbox;
use crate::response::Response;
use crate::sites::Sites;
use crate::tls::session::{PlainHttp, TlsSession};

/// How long a lingering close waits for the client to finish sending.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many bytes a lingering close reads and discards at most.
const LINGER_BYTES_MAX: usize = 1024 * 1024;

/// What the worker lends a connection while it handles an event.
pub(crate) struct Ctx<'w> {
    /// The sites, which choose the handler of each request.
    pub(crate) sites: &'w Sites,
    /// The handler of plain listeners that redirect to HTTPS.
    pub(crate) redirect: Option<&'w dyn Handler>,
    pub(crate) limits: &'w Limits,
    pub(crate) date: &'w DateCache,
    pub(crate) pool: &'w mut BufPool,
    pub(crate) log: Option<&'w mut LogWriter>,
    /// The sites' own access logs, by site index (`None`: `log`).
    pub(crate) site_logs: &'w mut [Option<LogWriter>],
    pub(crate) registry: &'w mio::Registry,
    pub(crate) mailbox: &'w Arc<Mailbox>,
    pub(crate) next_defer_id: &'w Cell<u64>,
    pub(crate) now: Instant,
    /// `now` plus `limits.idle_timeout`, the deadline of every HTTP/1.1
    /// connection that waits for its next request in this turn: one sum
    /// per turn, not one per request (`h1::Env::idle_until`).
    pub(crate) idle_until: Option<Instant>,
    /// Shutting down: answer what is in flight with `Connection: close`.
    pub(crate) draining: bool,
    /// What the HTTP/1.1 machine needs from the worker, built once per
    /// turn from the fields above (the same `now`, `idle_until` and
    /// `draining`): built per `process_h1` call, its stores were about 20
    /// instructions of each hello at c50 (callgrind, loop9's NOTES).
    pub(crate) h1: &'w crate::h1::Env<'w>,
    /// This worker's counters, when the server keeps metrics.
    pub(crate) metrics: Option<&'w WorkerMetrics>,
    /// HTTP/2's settings, unless the server speaks HTTP/1.1 only.
    pub(crate) h2: Option<crate::h2::Config>,
    /// The server has WebSocket routes (`Server::websockets`): HTTP/3
    /// sends SETTINGS_ENABLE_CONNECT_PROTOCOL (HTTP/2's is in `h2`).
    pub(crate) websockets: bool,
    /// Whom the server trusts to say who the client is, if anyone.
    pub(crate) trust: Option<&'w crate::client_addr::Trust>,
    /// WebSocket topics of this worker's connections, and the server's
    /// workers to publish to.
    pub(crate) ws: &'w mut crate::ws::hub::Local,
    /// Requests for upstreams the handlers left this turn (`proxy`).
    pub(crate) outbox: &'w crate::proxy::Outbox,
    /// The upstream figures of the proxy's answer the worker is handing
    /// over, for its access log line (`dispatch::finish` takes them).
    pub(crate) upstream_log: Option<crate::access_log::UpstreamLog>,
    /// The time the answers queued in this write batch are logged and
    /// counted at (`Ctx::batch_now`): read by the first answer that asks,
    /// reused by the rest, cleared at each write.
    pub(crate) batch_now: Option<Instant>,
    /// Answers carry their request's `X-Request-ID`
    /// (`Server::request_id_header`).
    pub(crate) request_id_header: bool,
}

impl Ctx<'_> {
    /// The time of the write batch being queued: one clock read per batch
    /// (the first answer's), shared by every answer queued before the
    /// write and by the metrics. An answer written whole leaves with its
    /// batch, so this is its last byte's time, short of the write itself.
    #[inline]
    pub(crate) fn batch_now(&mut self) -> Instant {
        *self.batch_now.get_or_insert_with(Instant::now)
    }

    /// Microseconds from `since` to the batch's time.
    #[inline]
    pub(crate) fn batch_us(&mut self, since: Instant) -> u64 {
        micros_between(since, self.batch_now())
    }
}

/// What the worker should do with a connection after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Wait for the next readiness event or deadline.
    Keep,
    /// Close the connection now.
    Close,
    /// The connection used up its turn with work left: call `on_ready`
    /// again after the other ready connections have had theirs.
    Again,
}

/// Work one connection may do per turn, so that a client that pipelines
/// without pause cannot starve the worker's other connections: 1,024
/// requests, or 64 reads and writes, or a mix (a request costs 1, a system
/// call `SYSCALL_WORK`). A pipelined batch of 16 is far inside one turn.
const TURN_WORK: u32 = 1024;
/// What a read or write costs out of `TURN_WORK`.
const SYSCALL_WORK: u32 = 16;

/// Takes one system call's work from a turn's budget (`work_left`); false
/// when the turn is spent.
fn take_syscall(work_left: &mut u32) -> bool {
    if *work_left < SYSCALL_WORK {
        return false;
    }
    *work_left -= SYSCALL_WORK;
    true
}

/// Why processing of buffered input stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Need more bytes from the client.
    Input,
    /// Output must drain first (large body or backpressure).
    Output,
    /// Waiting for a deferred answer.
    Deferred,
    /// The connection is closing.
    Closing,
    /// HTTP/1.1 queued a 101: the WebSocket the handler accepted takes
    /// the connection (`Http1::upgrade`).
    Switched,
    /// The connection used up its turn (`TURN_WORK`).
    Turn,
    /// TLS failed (a bad record, a failed handshake): close at once.
    Broken,
}

enum Flushed {
    All,
    /// The socket is full. `progress`: some bytes left in this call.
    Blocked {
        progress: bool,
    },
    /// The connection used up its turn with output left to send.
    Turn,
    /// All is written; the body being sent waits for the thread that
    /// writes it (`body::channel`), which wakes the connection.
    Parked,
    Failed,
}

/// What carries the bytes: the socket itself, or TLS over it.
pub(crate) enum Transport {
    Plain,
    /// Boxed: rustls' state is large, and a plain connection should not
    /// carry its size.
    Tls(Box<TlsSession>),
}

impl Transport {
    fn wants_write(&self) -> bool {
        match self {
            Transport::Plain => false,
            Transport::Tls(tls) => tls.wants_write(),
        }
    }

    /// What a request on this transport knows of it (`Request::tls`).
    #[inline]
    fn request_tls(&self) -> Option<Option<&str>> {
        match self {
            Transport::Plain => None,
            Transport::Tls(tls) => tls.request_tls(),
        }
    }

    fn tls_facts(&self) -> Option<crate::access_log::TlsFacts> {
        match self {
            Transport::Plain => None,
            Transport::Tls(tls) => Some(tls.facts()),
        }
    }

    /// Header fields added to every response on this transport (HSTS, Alt-Svc).
    fn extra_fields(&self) -> &[u8] {
        match self {
            Transport::Tls(tls) => tls.listener.extra_fields.as_deref().unwrap_or(&[]),
            Transport::Plain => &[],
        }
    }
}

/// In C's order, hot first (`#[repr(C)]`): a keep-alive request that
/// waits for its client between answers finds its connection's lines out
/// of the cache, so what every request reads is packed into the first
/// lines, and the protocol slot, whose deferred answer's record and
/// tail are touched only when they are used, comes last.
#[repr(C)]
pub(crate) struct Conn {
    stream: Stream,
    transport: Transport,
    token: usize,
    peer: SocketAddr,
    /// Closing or lingering, for both protocols.
    phase: Phase,
    /// Work left in this turn (see `TURN_WORK`).
    work_left: u32,
    /// Accepted on a redirecting listener: answered by `Ctx::redirect`.
    redirect: bool,
    /// In the worker's list of connections waiting for another turn.
    pub(crate) queued: bool,
    writable_interest: bool,
    /// The client has sent FIN: answer what is complete, then close.
    peer_closed: bool,
    /// epoll said the peer hung up: read to the end, short reads included.
    read_closed_hint: bool,
    /// The last read found the socket empty (a short read or EAGAIN) and
    /// no readiness event came since: under edge-triggered epoll a read now
    /// could only say EAGAIN. Saves that read after every large response
    /// (strace of f64k: one `recvfrom` → EAGAIN per request without it).
    drained: bool,
    /// TLS: the handshake's end has been counted in the metrics.
    handshake_counted: bool,
    /// No byte of a request has arrived yet: the client has just
    /// connected, and its first request is presumably on its way. A
    /// shutdown answers it rather than closing the connection as idle.
    fresh: bool,
    input: Input,
    /// When the connection times out, if it can: the send deadline while
    /// output is blocked, otherwise `state_deadline`. The worker reads this.
    pub(crate) deadline: Option<Instant>,
    /// The deadline of the request/idle state (head, body, idle timeouts),
    /// kept apart so that a blocked send does not move it.
    state_deadline: Option<Instant>,
    /// When the worker's timer set fires for this connection (`sources.rs`:
    /// it may be earlier than `deadline`, never later).
    pub(crate) armed: Option<Instant>,
    /// Bytes written since the metrics last counted them.
    bytes_out: u64,
    /// Bytes read (plaintext) since the connection began: a request's
    /// progress, for the minimum rates.
    bytes_in: u64,
    /// What this connection holds against the worker's budgets: its read
    /// buffer's growth (HTTP/1.1 bodies and heads), its write buffer.
    input_charge: usize,
    output_charge: usize,
    /// The source address the connection's PROXY header gave (a listener
    /// that requires one: `conn/proxy.rs`); `None` otherwise, and for a
    /// LOCAL or UNKNOWN header.
    proxy_source: Option<SocketAddr>,
    output: Output,
    /// Set while output is blocked: `send_timeout` after the last byte left.
    send_deadline: Option<Instant>,
    /// The protocol the connection speaks, with its machine.
    proto: Proto,
}

/// The slot a connection's protocol machine lives in, with the driver's
/// state beside it. Every connection starts as HTTP/1.1 and may be
/// switched once (`Conn::switch`): to HTTP/2 before its first request
/// (ALPN, or the prior-knowledge preface); later arms (WebSocket, after an
/// upgrade's 101) take over the same way. The read buffer stays with the
/// connection, so the bytes the old machine left unread are the new one's
/// first (hyper's `Conn::into_inner`, h2o's `h2o_http1_upgrade`).
// HTTP/1.1 inline on purpose: every connection starts with it, and boxing
// it would cost an allocation per connection and a pointer chase per
// request on the hot path; HTTP/2's box is 8 bytes.
#[allow(clippy::large_enum_variant)]
enum Proto {
    H1(h1::Http1),
    /// Boxed: the session is large, and most connections never speak it.
    H2(Box<h2::Http2>),
    /// After an upgrade's 101 (`conn/ws.rs`): inline, in the room
    /// HTTP/1.1's machine leaves (an idle WebSocket then costs nothing
    /// beyond its connection).
    Ws(ws::Ws),
    /// After a proxied WebSocket's 101 (`conn/tunnel.rs`): bytes copied
    /// to and from the upstream; inline, as `Ws`.
    Tunnel(tunnel::Tunnel),
}

// What a keep-alive request reads of its connection ends where the
// HTTP/1.1 slot's deferred record begins: within the first 9 of the
// struct's 64-byte lines (it was spread over all 12 of 712 bytes before
// `Conn` was laid out hot first).
const _: () = assert!(std::mem::offset_of!(Conn, proto) + std::mem::offset_of!(h1::Http1, deferral) <= 9 * 64);

// The WebSocket takes HTTP/1.1's room and makes no connection larger.
const _: () = assert!(std::mem::size_of::<ws::Ws>() <= std::mem::size_of::<h1::Http1>());

impl Proto {
    fn is_h2(&self) -> bool {
        matches!(self, Proto::H2(_))
    }

    fn h2(&self) -> Option<&h2::Http2> {
        match self {
            Proto::H2(h2) => Some(h2),
            Proto::H1(_) | Proto::Ws(_) | Proto::Tunnel(_) => None,
        }
    }

    fn h2_mut(&mut self) -> Option<&mut h2::Http2> {
        match self {
            Proto::H2(h2) => Some(h2),
            Proto::H1(_) | Proto::Ws(_) | Proto::Tunnel(_) => None,
        }
    }

    fn h1(&self) -> Option<&H1> {
        match self {
            Proto::H1(h1) => Some(&h1.machine),
            Proto::H2(_) | Proto::Ws(_) | Proto::Tunnel(_) => None,
        }
    }

    fn is_ws(&self) -> bool {
        matches!(self, Proto::Ws(_))
    }

    fn is_tunnel(&self) -> bool {
        matches!(self, Proto::Tunnel(_))
    }
}

/// The driver's side of closing, for both protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the PROXY header a listener requires, before any
    /// protocol sees a byte (`conn/proxy.rs`); until
    /// `proxy_header_timeout`.
    ProxyHeader,
    /// Serving (the protocol may still be closing: `H1::is_closing`).
    Open,
    /// The last bytes are queued; half-close once they are sent.
    Closing,
    /// Half-closed; reading and discarding until the client closes.
    Lingering { discarded: usize },
}

impl Conn {
    pub(crate) fn new(
        stream: Stream,
        transport: Transport,
        redirect: bool,
        peer: SocketAddr,
        token: usize,
        deadline: Option<Instant>,
        proxied: bool,
    ) -> Self {
        Conn {
            stream,
            transport,
            redirect,
            peer,
            proxy_source: None,
            token,
            input: Input::default(),
            output: Output::default(),
            proto: Proto::H1(h1::Http1::new(deadline)),
            phase: if proxied { Phase::ProxyHeader } else { Phase::Open },
            deadline,
            state_deadline: deadline,
            send_deadline: None,
            work_left: TURN_WORK,
            queued: false,
            armed: None,
            writable_interest: false,
            peer_closed: false,
            read_closed_hint: false,
            drained: false,
            bytes_out: 0,
            bytes_in: 0,
            input_charge: 0,
            output_charge: 0,
            handshake_counted: false,
            fresh: true,
        }
    }

    /// The socket's peer (a proxy, behind one).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The client's address as far as the connection tells (the PROXY
    /// header's source, else the peer): for the log line of a request
    /// refused before its fields were read.
    fn connection_addr(&self) -> SocketAddr {
        self.proxy_source.unwrap_or(self.peer)
    }

    /// Handles a readiness event.
    pub(crate) fn on_ready(&mut self, ctx: &mut Ctx<'_>, read_closed: bool) -> Next {
        self.read_closed_hint |= read_closed;
        self.drained = false;
        self.drive(ctx)
    }

    /// Gives the connection another turn (it used up its last one with
    /// work left); no new readiness is known.
    pub(crate) fn on_turn(&mut self, ctx: &mut Ctx<'_>) -> Next {
        self.drive(ctx)
    }

    /// Handles a deferred answer addressed to this connection.
    pub(crate) fn on_answer(&mut self, ctx: &mut Ctx<'_>, id: u64, response: Response) -> Next {
        let answered = match self.proto {
            Proto::H1(_) => self.on_answer_h1(ctx, id, response),
            Proto::H2(_) => self.on_answer_h2(ctx, id, response),
            Proto::Ws(_) | Proto::Tunnel(_) => false,
        };
        if answered {
            let quiet = self.answered_quietly(ctx);
            self.drive_from(ctx, quiet)
        } else {
            Next::Keep
        }
    }

    /// After a deferred HTTP/1.1 answer was queued: true if the read
    /// pass of `drive` could only say `Stop::Input`. Nothing is unread,
    /// the machine waits for its next request (no body being read, not
    /// closing), no body tail waits to be written, the worker's output
    /// budget is not exceeded, and the socket needs no read: it was
    /// drained by the last read (a short read, or `WouldBlock`, and no
    /// readiness event since: `on_ready` clears `drained`) or the peer
    /// closed its side. A pipelined request read while the answer was
    /// awaited, or a read event that came meanwhile, takes the full pass.
    /// Saves the pass's call, its `Env` and the machine's checks after
    /// every proxied GET.
    fn answered_quietly(&mut self, ctx: &Ctx<'_>) -> bool {
        let Proto::H1(h1) = &mut self.proto else {
            return false;
        };
        if !(self.drained || self.peer_closed)
            || !self.input.is_empty()
            || self.output.tail.is_some()
            || !h1.machine.is_between_requests()
            || Self::over_output_budget(ctx, self.output.queued())
        {
            return false;
        }
        // As `process_h1` does when it stops for input: a chunked
        // request's trailers are not held by a waiting connection.
        h1.trailers = None;
        true
    }

    /// A body written by another thread has something new for this
    /// connection (a chunk, its end, its abort).
    pub(crate) fn on_wake(&mut self, ctx: &mut Ctx<'_>) -> Next {
        self.drive(ctx)
    }

    /// Handles the deadline having passed.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) -> Next {
        if self.phase == Phase::ProxyHeader {
            return self.refuse_proxy(ctx, "no PROXY header within proxy_header_timeout");
        }
        if self.has_output() {
            // send_timeout: the client stopped reading.
            return Next::Close;
        }
        if self.proto.is_h2() {
            if self.phase != Phase::Open {
                return Next::Close;
            }
            if !self.time_out_h2(ctx) {
                // The connection goes on: its WebSockets' deadlines.
                if self.proto.h2().is_some_and(|h2| !h2.tunnels.is_empty()) && self.tunnels_time_out(ctx) {
                    return self.drive(ctx);
                }
                if self.proto.h2().is_some_and(|h2| !h2.proxied.is_empty()) && self.proxied_time_out(ctx) {
                    return self.drive(ctx);
                }
                self.deadline = self.state_deadline;
                return Next::Keep;
            }
            return self.drive(ctx);
        }
        if self.phase != Phase::Open {
            return Next::Close;
        }
        if self.proto.is_ws() {
            return self.ws_time_out(ctx);
        }
        if self.proto.is_tunnel() {
            return self.tunnel_time_out(ctx);
        }
        self.h1_time_out(ctx)
    }

    /// How many answers deferred handlers still owe this connection
    /// (HTTP/2: one per stream waiting).
    pub(crate) fn n_deferred(&self) -> usize {
        match &self.proto {
            Proto::H1(h1) => usize::from(h1.deferral.is_some()),
            Proto::H2(h2) => h2.n_deferred(),
            Proto::Ws(_) | Proto::Tunnel(_) => 0,
        }
    }

    /// Shutdown has begun (`ctx.draining`): closes the connection if
    /// nothing would be lost. A lingering connection has sent everything.
    /// An idle one is read once more first, since a request may have
    /// arrived that no event has announced yet: it is answered (with
    /// `Connection: close`) instead of being cut off. With `keep_idle` (a
    /// hand-over to another server), an idle connection is kept until its
    /// idle timeout for one more request. A connection that has not
    /// received its first request yet is kept for it, within
    /// `head_timeout`; the rest finish what they are doing.
    pub(crate) fn on_drain(&mut self, ctx: &mut Ctx<'_>, keep_idle: bool) -> Next {
        if self.proto.is_ws() {
            return match self.phase {
                Phase::Lingering { .. } => Next::Close,
                _ => self.ws_drain(ctx),
            };
        }
        if self.proto.is_tunnel() {
            // Kept until the shutdown timeout cuts it (`conn/tunnel.rs`).
            return match self.phase {
                Phase::Lingering { .. } => Next::Close,
                _ => Next::Keep,
            };
        }
        if self.proto.is_h2() {
            // GOAWAY: the streams in flight finish, the client opens no
            // more (process_h2 sends it while draining); WebSockets get
            // their 1001 (`ws::drain`).
            self.tunnels_drain(ctx);
            return match self.phase {
                Phase::Lingering { .. } => Next::Close,
                _ => self.drive(ctx),
            };
        }
        match self.phase {
            Phase::Lingering { .. } => Next::Close,
            Phase::Open
                if self.proto.h1().is_some_and(H1::is_idle)
                    && !self.fresh
                    && !keep_idle
                    && self.input.is_empty()
                    && !self.has_output() =>
            {
                self.drained = false;
                self.drive(ctx)
            }
            _ => Next::Keep,
        }
    }

    /// Puts another protocol's machine in the connection's slot (HTTP/2
    /// after ALPN or the preface; later, what an upgrade's 101 hands the
    /// connection to). The read buffer is left as it is: its unread bytes
    /// are the new machine's first. Only an HTTP/1.1 machine with nothing
    /// in flight, or one that has queued its 101 (`H1::upgrade`), is
    /// replaced.
    fn switch(&mut self, to: Proto) {
        debug_assert!(
            matches!(&self.proto, Proto::H1(h1) if h1.deferral.is_none()
                && (h1.machine.is_idle() || h1.machine.is_upgraded())),
            "only an idle or upgraded HTTP/1.1 connection switches protocols"
        );
        self.proto = to;
    }

    /// Gives the buffers back to the pool before the connection is dropped,
    /// and ends a TLS session with close_notify (best effort).
    pub(crate) fn release(&mut self, pool: &mut BufPool) {
        if let Transport::Tls(tls) = &mut self.transport {
            tls.close(&mut self.stream);
        }
        self.give_input(pool);
        self.give_output(pool);
        self.release_h2(pool);
    }

    /// Gives the read buffer back to the pool, and what it grew by back
    /// to the worker's body budget.
    fn give_input(&mut self, pool: &mut BufPool) {
        pool.bodies -= std::mem::take(&mut self.input_charge);
        self.input.start = 0;
        self.input.end = 0;
        pool.give_read(std::mem::take(&mut self.input.buf));
    }

    /// Gives the write buffer back to the pool, and its size back to the
    /// worker's output budget.
    fn give_output(&mut self, pool: &mut BufPool) {
        pool.output -= std::mem::take(&mut self.output_charge);
        self.output.pos = 0;
        pool.give_write(std::mem::take(&mut self.output.buf));
    }

    /// Holds the write buffer's size against the worker's output budget.
    fn charge_output(&mut self, pool: &mut BufPool) {
        let held = self.output.held_bytes();
        pool.output = pool.output - self.output_charge + held;
        self.output_charge = held;
    }

    /// The worker holds its budget of queued answers and this connection
    /// more than its share: it is not read (nor its pipelined requests
    /// answered) until its client takes some.
    fn over_output_budget(ctx: &Ctx<'_>, queued: usize) -> bool {
        queued > 0 && ctx.pool.output_held() > ctx.limits.output_budget_bytes
    }

    /// Stops waking up for writability (nothing is left to write). False
    /// if the registration failed: the connection must close.
    #[inline(always)]
    fn stop_writable_interest(&mut self, ctx: &Ctx<'_>) -> bool {
        // The flag tested in the caller's code: nearly every answer left
        // whole, and a call to test it cost 14 instructions a request
        // (callgrind, hello-c50).
        !self.writable_interest || self.drop_writable_interest(ctx)
    }

    /// `stop_writable_interest` when the connection has it.
    #[inline(never)]
    fn drop_writable_interest(&mut self, ctx: &Ctx<'_>) -> bool {
        let interest = Interest::READABLE;
        if ctx
            .registry
            .reregister(&mut self.stream, Source::Conn(self.token).mio(), interest)
            .is_err()
        {
            return false;
        }
        self.writable_interest = false;
        true
    }

    fn has_output(&self) -> bool {
        self.output.pos < self.output.buf.len()
            || self.output.tail.is_some()
            || self.transport.wants_write()
            || self.h2_spliced()
    }

    /// Reads, answers and writes until the connection must wait.
    #[inline(always)]
    fn drive(&mut self, ctx: &mut Ctx<'_>) -> Next {
        self.drive_from(ctx, false)
    }

    /// `drive`; with `quiet` (`answered_quietly`), the first read pass is
    /// known to find nothing and is skipped: the output is written and
    /// the connection waits.
    fn drive_from(&mut self, ctx: &mut Ctx<'_>, quiet: bool) -> Next {
        // One compare on the plain path.
        if !matches!(self.phase, Phase::Open) {
            if let Some(next) = self.drive_phase(ctx) {
                return next;
            }
        }
        self.work_left = TURN_WORK;
        // `read_and_process` has this one call, inlined: called from two
        // places it was a function of its own, its prologue and epilogue
        // paid on every wakeup.
        let mut skip_read = quiet;
        loop {
            let stop = if skip_read {
                Stop::Input
            } else {
                self.read_and_process(ctx)
            };
            skip_read = false;
            if stop == Stop::Broken {
                return self.broken(ctx);
            }
            let flushed = self.flush(ctx.pool);
            // The next batch reads the clock again.
            ctx.batch_now = None;
            // HTTP/1.1's one held record waits for the output to be all
            // written. HTTP/2's are ended once their streams have queued
            // their last DATA, within the output buffer's bytes of the
            // socket (`write_buffer_bytes_max`): a client that never lets
            // the output drain cannot make the records pile up.
            if self.is_sending() && (self.proto.is_h2() || !self.has_output()) {
                self.end_sending(ctx, false);
            }
            if let Some(m) = ctx.metrics {
                self.count_sent(m);
            }
            // The write buffer is held against the output budget
            // (`charge_output`) wherever the connection keeps it past this
            // point; a turn that ends with all written gives it back below
            // (`give_output`), and charging it first only to take the
            // charge back was 15 instructions a request (callgrind,
            // hello-c50). A connection closed (`Failed`) gives back what
            // it was charged when released.
            match flushed {
                Flushed::All => self.send_deadline = None,
                Flushed::Turn => {
                    self.charge_output(ctx.pool);
                    return Next::Again;
                }
                Flushed::Blocked { progress } => {
                    self.charge_output(ctx.pool);
                    return self.blocked(ctx, progress);
                }
                Flushed::Failed => return Next::Close,
                Flushed::Parked => {
                    self.charge_output(ctx.pool);
                    return self.park(ctx);
                }
            }
            if self.is_closing() {
                self.charge_output(ctx.pool);
                return self.start_lingering(ctx);
            }
            match stop {
                Stop::Output => self.charge_output(ctx.pool),
                Stop::Turn => {
                    self.charge_output(ctx.pool);
                    return Next::Again;
                }
                Stop::Input | Stop::Deferred | Stop::Closing | Stop::Switched | Stop::Broken => break,
            }
        }
        if !self.stop_writable_interest(ctx) {
            return Next::Close;
        }
        let input_empty = self.input.start == self.input.end;
        if !matches!(self.proto, Proto::H1(_)) {
            if let Some(next) = self.wait_other(ctx) {
                return next;
            }
        } else if let Some(next) = self.h1_wait(ctx) {
            return next;
        }
        self.deadline = self.state_deadline;
        // An idle connection holds no buffers.
        if input_empty && !self.input.buf.is_empty() {
            self.give_input(ctx.pool);
        }
        if !self.output.buf.is_empty() || self.output.buf.capacity() != 0 {
            self.give_output(ctx.pool);
        }
        Next::Keep
    }

    /// `drive` in a phase other than `Open`: lingering (its next), the
    /// PROXY header (its next until read, then `None`: serve), closing
    /// (`None`). Out of line: the plain path's one compare stays.
    #[cold]
    #[inline(never)]
    fn drive_phase(&mut self, ctx: &mut Ctx<'_>) -> Option<Next> {
        match self.phase {
            Phase::Lingering { .. } => Some(self.linger(ctx)),
            Phase::ProxyHeader => self.read_proxy_header(ctx),
            Phase::Open | Phase::Closing => None,
        }
    }

    /// The deadline of a connection that is not HTTP/1.1's, once it
    /// waits, or `Some(Close)`. Out of line: HTTP/1.1's wait is inlined
    /// in `drive`, and these sat among its hot blocks.
    #[inline(never)]
    fn wait_other(&mut self, ctx: &Ctx<'_>) -> Option<Next> {
        if self.proto.is_h2() {
            if self.peer_closed {
                return Some(Next::Close);
            }
            self.h2_deadline(ctx);
        } else if self.proto.is_ws() {
            if self.peer_closed {
                return Some(Next::Close);
            }
            self.ws_wait();
        } else if self.proto.is_tunnel() {
            // A half-closed client waits for the upstream's end.
            self.tunnel_wait();
        }
        None
    }

    /// The connection broke (a TLS record that cannot be read): the
    /// alert is sent if the socket takes it; nothing else.
    #[cold]
    #[inline(never)]
    fn broken(&mut self, ctx: &Ctx<'_>) -> Next {
        if let Transport::Tls(tls) = &mut self.transport {
            if let (Some(m), true) = (ctx.metrics, tls.is_handshaking()) {
                m.tls_handshake_failures.add(1);
            }
            tls.close(&mut self.stream);
        }
        Next::Close
    }

    /// The metrics of a batch written: its bytes, and a TLS handshake
    /// once finished. Out of line, as `blocked`: only with metrics on.
    #[inline(never)]
    fn count_sent(&mut self, m: &WorkerMetrics) {
        m.bytes_sent.add(std::mem::take(&mut self.bytes_out));
        if let Transport::Tls(tls) = &self.transport {
            if !self.handshake_counted && !tls.is_handshaking() {
                self.handshake_counted = true;
                m.tls_handshakes.add(1);
                if tls.is_resumed() {
                    m.tls_resumed.add(1);
                }
            }
        }
    }

    /// The socket took less than the output: wait for it to be writable,
    /// until the send deadline. Out of line: a client that reads as fast
    /// as it asks never comes here, and inlined it sat among the hot
    /// blocks of `drive`.
    #[inline(never)]
    fn blocked(&mut self, ctx: &mut Ctx<'_>, progress: bool) -> Next {
        if !self.writable_interest {
            let interest = Interest::READABLE | Interest::WRITABLE;
            if ctx
                .registry
                .reregister(&mut self.stream, Source::Conn(self.token).mio(), interest)
                .is_err()
            {
                return Next::Close;
            }
            self.writable_interest = true;
        }
        // The send timeout runs from the last byte that left, so a client
        // that reads slowly but steadily is kept, and one that wakes us
        // without reading is not.
        if progress || self.send_deadline.is_none() {
            self.send_deadline = ctx.now.checked_add(ctx.limits.send_timeout);
        }
        self.deadline = self.send_deadline;
        Next::Keep
    }

    /// HTTP/1.1 waits for the thread writing the body being sent. No
    /// deadline meanwhile: as for a deferred answer, the producer owns it
    /// (it ends the body, or aborts it; a client gone fails its `send`).
    /// Whatever arrives meanwhile waits behind the response, as pipelined
    /// requests do; a client that closes its side is taken as gone, as
    /// nginx does for a response it is still receiving, and the
    /// connection closes, so the producer's next `send` fails.
    fn park(&mut self, ctx: &mut Ctx<'_>) -> Next {
        self.send_deadline = None;
        if self.read_closed_hint || self.peer_closed {
            return Next::Close;
        }
        if !self.stop_writable_interest(ctx) {
            return Next::Close;
        }
        self.state_deadline = None;
        self.deadline = None;
        // A parked connection holds no buffers, as an idle one (there may
        // be thousands: one per subscriber of an event stream).
        if self.input.is_empty() && !self.input.buf.is_empty() {
            self.give_input(ctx.pool);
        }
        if self.output.buf.capacity() != 0 && !self.proto.is_h2() {
            self.give_output(ctx.pool);
        }
        Next::Keep
    }

    /// Answers complete requests in the buffer, reading more while the socket
    /// has some, until something must wait.
    #[inline(always)]
    fn read_and_process(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let mut may_read = !self.peer_closed && !self.drained;
        // Between keep-alive requests, with nothing read or queued,
        // processing could only say `Stop::Input`: read first (a call of
        // `process` per request saved, and its `Env`).
        let mut read_first = may_read && self.waits_for_input();
        loop {
            if !read_first {
                let stop = self.process(ctx);
                if stop != Stop::Input || !may_read {
                    return stop;
                }
            }
            read_first = false;
            if self.work_left < SYSCALL_WORK {
                return Stop::Turn;
            }
            self.work_left -= SYSCALL_WORK;
            if !self.make_room(ctx) {
                return Stop::Closing;
            }
            let room = self.input.buf.len() - self.input.end;
            let into = &mut self.input.buf[self.input.end..];
            let result = match &mut self.transport {
                Transport::Plain => self.stream.read(into),
                Transport::Tls(tls) => read_tls(tls, &mut self.stream, into, self.peer, self.read_closed_hint),
            };
            match result {
                Ok(0) => {
                    self.peer_closed = true;
                    may_read = false;
                }
                Ok(n) => {
                    self.input.end += n;
                    self.bytes_in += n as u64;
                    self.fresh = false;
                    // A short read drained the socket: under edge-triggered
                    // epoll, new bytes will raise a new event. Saves a read
                    // that would only say EAGAIN. Under TLS, what counts is
                    // the socket read behind the plaintext (`drained`), and
                    // that rustls had no more plaintext than `into` took.
                    let drained = match &self.transport {
                        Transport::Plain => true,
                        Transport::Tls(tls) => tls.drained(),
                    };
                    if n < room && !self.read_closed_hint && drained {
                        may_read = false;
                        self.drained = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    may_read = false;
                    self.drained = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Some(stop) = self.read_failed(ctx, &e) {
                        return stop;
                    }
                    self.peer_closed = true;
                    may_read = false;
                }
            }
        }
    }

    /// A read failed otherwise than by `WouldBlock` or `Interrupted`:
    /// the stop for a TLS port spoken to in plain HTTP (its 400 written)
    /// or a broken TLS record; `None` for any other error, which the
    /// caller takes as the client gone. Out of line with its cold arms:
    /// inlined, they lay between the request path's hot blocks.
    #[cold]
    #[inline(never)]
    fn read_failed(&mut self, ctx: &mut Ctx<'_>, e: &io::Error) -> Option<Stop> {
        if PlainHttp::is(e) {
            // Best effort, one write: then the lingering close
            // (without TLS) lets the client read it.
            let _ = self.stream.write(PlainHttp::ANSWER);
            self.transport = Transport::Plain;
            if let Proto::H1(h1) = &mut self.proto {
                h1.machine.close();
            }
            self.phase = Phase::Closing;
            if let Some(m) = ctx.metrics {
                m.tls_handshake_failures.add(1);
                m.record(b"-", 400, ctx.batch_us(ctx.now));
            }
            return Some(Stop::Closing);
        }
        if e.kind() == io::ErrorKind::InvalidData && matches!(self.transport, Transport::Tls(_)) {
            return Some(Stop::Broken);
        }
        None
    }

    /// HTTP/1.1 between two requests (not before its first: ALPN may
    /// still switch it to HTTP/2), nothing unread, nothing to write: what
    /// `process` would find is that it needs input.
    fn waits_for_input(&self) -> bool {
        self.input.is_empty()
            && self.output.queued() == 0
            && self.output.tail.is_none()
            && matches!(&self.proto, Proto::H1(h1) if h1.machine.is_between_requests())
    }

    /// Makes sure there is room to read into. False if the request in the
    /// buffer cannot grow further (the error response is then queued).
    fn make_room(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let input = &mut self.input;
        // Tested by capacity: a buffer with none needs no drop before the
        // one taken replaces it. No buffer, no bytes: `give_input` left
        // `start` and `end` at 0 (their stores here were 3 instructions a
        // wakeup).
        if input.buf.capacity() == 0 {
            debug_assert!(input.start == 0 && input.end == 0);
            input.buf = if self.proto.is_h2() {
                ctx.pool.take_h2_read()
            } else {
                ctx.pool.take_read()
            };
        }
        if input.end < input.buf.len() {
            return true;
        }
        if self.proto.is_h2() || self.proto.is_ws() || self.proto.is_tunnel() {
            // The session keeps only a partial frame; a frame fits
            // (WebSocket: a head, or a control frame of 139 bytes at most;
            // data frames are taken as they come).
            if input.start > 0 {
                input.buf.copy_within(input.start..input.end, 0);
                input.end -= input.start;
                input.start = 0;
            }
            if input.buf.len() < H2_READ_BYTES {
                input.buf.resize(H2_READ_BYTES, 0);
            }
            return input.end < input.buf.len();
        }
        self.h1_make_room(ctx)
    }

    /// Answers the complete requests in the read buffer. In its one
    /// caller's code: a call of its own cost every wakeup its prologue
    /// and epilogue, 20 instructions (callgrind, hello-c50).
    #[inline(always)]
    fn process(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let first = match &self.proto {
            Proto::H2(_) => return self.process_h2(ctx),
            Proto::Ws(_) => return self.process_ws(ctx),
            Proto::Tunnel(_) => return self.process_tunnel(ctx),
            Proto::H1(h1) => h1.machine.is_first() && h1.machine.is_idle(),
        };
        if first && ctx.h2.is_some() {
            if let Some(stop) = self.switch_to_h2(ctx) {
                return stop;
            }
        }
        let stop = self.process_h1(ctx);
        if stop == Stop::Switched {
            return self.switch_to_ws(ctx);
        }
        stop
    }

    /// Before the first request of a listener that also takes HTTP/2:
    /// HTTP/2 takes the connection if ALPN chose it or the client's first
    /// bytes are its preface (then its stop), else `None`, HTTP/1.1 goes
    /// on. Out of line: once a connection, and its code lay among the
    /// request path's.
    #[inline(never)]
    fn switch_to_h2(&mut self, ctx: &mut Ctx<'_>) -> Option<Stop> {
        if self.alpn_h2() {
            self.start_h2(ctx);
            return Some(self.process_h2(ctx));
        }
        // Prior knowledge is for cleartext only (RFC 9113 §3.3): over
        // TLS, HTTP/2 is what ALPN chose or nothing.
        let cleartext = matches!(self.transport, Transport::Plain);
        match h2::preface(&self.input.buf[self.input.start..self.input.end]) {
            h2::Preface::Yes if cleartext => {
                self.start_h2(ctx);
                Some(self.process_h2(ctx))
            }
            h2::Preface::Maybe if cleartext && self.input.start < self.input.end => Some(Stop::Input),
            _ => None,
        }
    }

    /// HTTP/1.1 queued a 101: the WebSocket takes the connection and reads
    /// what follows the request. Out of line: the request path of every
    /// other connection must not carry it (inlined, it cost a pipelined
    /// archive answer 5 %: `process_h1` stopped being inlined).
    #[cold]
    #[inline(never)]
    fn switch_to_ws(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let Proto::H1(h1) = &mut self.proto else {
            return Stop::Closing;
        };
        match h1.upgrade.take() {
            Some(accepted) => {
                self.start_ws(ctx, *accepted.0);
                self.process_ws(ctx)
            }
            None => Stop::Closing,
        }
    }

    /// The last answer is queued: half-close once it is sent.
    fn is_closing(&self) -> bool {
        self.phase == Phase::Closing || self.proto.h1().is_some_and(H1::is_closing)
    }

    fn ensure_output(&mut self, pool: &mut BufPool) {
        if self.proto.is_h2() && self.output.buf.capacity() == 0 {
            self.output.buf = pool.take_write_large();
            self.output.pos = 0;
        }
        ensure_output(&mut self.output, pool);
    }
}

/// A TLS connection's read, out of line: rustls' read path inlined into
/// `read_and_process` was 6 KB between the plain request path's blocks.
#[inline(never)]
fn read_tls(
    tls: &mut TlsSession,
    stream: &mut Stream,
    into: &mut [u8],
    peer: SocketAddr,
    read_closed_hint: bool,
) -> io::Result<usize> {
    tls.read(stream, into, peer, read_closed_hint)
}

/// The log line of a request refused before a handler saw it.
fn refused_line<'a>(
    clf_time: &'a [u8],
    peer: SocketAddr,
    version: &'a [u8],
    status: u16,
    body_bytes: u64,
    duration_us: u64,
    reason: crate::Reason,
) -> Line<'a> {
    Line {
        clf_time,
        peer,
        method: b"-",
        target: b"-",
        version,
        status,
        body_bytes,
        referer: None,
        user_agent: None,
        host: None,
        site: None,
        duration_us: Some(duration_us),
        ttfb_us: Some(duration_us),
        upstream: None,
        request_id: None,
        traceparent: None,
        tls: None,
        reason: Some(reason),
    }
}

/// Microseconds from `start` to `end` (0 if `end` is earlier).
pub(crate) fn micros_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_micros()).unwrap_or(u64::MAX)
}
