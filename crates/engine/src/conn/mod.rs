//! One connection: its buffers, its state machine, and the read → parse →
//! answer → write cycle that the worker drives on every readiness event.
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
//! Transport: a connection is plain TCP or TLS (`Transport`, an enum: the
//! plain path pays one branch). Under TLS the buffers hold plaintext as
//! they do for TCP; reads go through `TlsSession::read`, and `flush_tls`
//! encrypts the output buffer and tail while rustls has room, then writes
//! the records. Files are read with `pread` into a pooled buffer instead of
//! `sendfile`.

use std::cell::Cell;
use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, SocketAddr};
use std::os::unix::fs::FileExt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Token};

mod h2;

use crate::access_log::{Line, LogRequest, LogWriter};
use crate::codec::write::{self as wire, BodyFraming, ConnField};
use crate::codec::{parse_head, ChunkedDecoder, Framing, Head, HeadError, Parsed, Version};
use crate::date::DateCache;
use crate::handler::{Handler, Reply};
use crate::limits::{Limits, BUFFER_BYTES, H2_READ_BYTES, INLINE_BODY_BYTES_MAX, POOL_BUFFERS_MAX};
use crate::metrics::WorkerMetrics;
use crate::request::{DeferSlot, Request};
use crate::responder::Mailbox;
use crate::response::{Body, FileRange, Response, SharedBytes};
use crate::tls::session::TlsSession;

/// Header fields parsed per request at most: the stack array's size.
/// `Limits::n_headers_max` above this is treated as this.
pub(crate) const HEADERS_ARRAY_MAX: usize = 256;

/// How long a lingering close waits for the client to finish sending.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many bytes a lingering close reads and discards at most.
const LINGER_BYTES_MAX: usize = 1024 * 1024;

/// What the worker lends a connection while it handles an event.
pub(crate) struct Ctx<'w> {
    pub(crate) handler: &'w dyn Handler,
    /// The handler of plain listeners that redirect to HTTPS.
    pub(crate) redirect: Option<&'w dyn Handler>,
    pub(crate) limits: &'w Limits,
    pub(crate) date: &'w DateCache,
    pub(crate) pool: &'w mut BufPool,
    pub(crate) log: Option<&'w mut LogWriter>,
    pub(crate) registry: &'w mio::Registry,
    pub(crate) mailbox: &'w Arc<Mailbox>,
    pub(crate) next_defer_id: &'w Cell<u64>,
    pub(crate) now: Instant,
    /// Shutting down: answer what is in flight with `Connection: close`.
    pub(crate) draining: bool,
    /// This worker's counters, when the server keeps metrics.
    pub(crate) metrics: Option<&'w WorkerMetrics>,
    /// HTTP/2's settings, unless the server speaks HTTP/1.1 only.
    pub(crate) h2: Option<crate::h2::Config>,
}

/// A worker's spare buffers. Read buffers keep their full length (their
/// bytes are initialised, with whatever the last connection left in them)
/// so reads need no `unsafe`; write buffers are kept empty.
#[derive(Default)]
pub(crate) struct BufPool {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
    /// Read buffers of HTTP/2 connections (`H2_READ_BYTES`).
    h2_read: Vec<Vec<u8>>,
}

impl BufPool {
    fn take_read(&mut self) -> Vec<u8> {
        self.read.pop().unwrap_or_else(|| vec![0; BUFFER_BYTES])
    }

    fn take_write(&mut self) -> Vec<u8> {
        self.write.pop().unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES))
    }

    fn take_h2_read(&mut self) -> Vec<u8> {
        self.h2_read.pop().unwrap_or_else(|| vec![0; H2_READ_BYTES])
    }

    fn give_read(&mut self, buf: Vec<u8>) {
        if buf.len() == BUFFER_BYTES && self.read.len() < POOL_BUFFERS_MAX {
            self.read.push(buf);
        } else if buf.len() == H2_READ_BYTES && self.h2_read.len() < POOL_BUFFERS_MAX {
            self.h2_read.push(buf);
        }
    }

    fn give_write(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() == BUFFER_BYTES && self.write.len() < POOL_BUFFERS_MAX {
            buf.clear();
            self.write.push(buf);
        }
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

/// Where a connection is in its request/response cycle.
enum State {
    /// Between requests, nothing of the next one received.
    Idle,
    /// Part of a request head received.
    Head,
    /// The head is complete; the body is arriving.
    Body(Box<BodyWait>),
    /// The handler will answer through a `Responder`.
    Deferred(Box<Deferred>),
    /// The last response is queued; half-close once it is sent.
    Closing,
    /// Half-closed; reading and discarding until the client closes.
    Lingering { discarded: usize },
}

struct BodyWait {
    head_len: usize,
    /// The request is HEAD: an error answer must carry no body either.
    head_only: bool,
    kind: BodyKind,
}

enum BodyKind {
    Length(u64),
    /// Offsets are relative to the start of the request in the read buffer.
    Chunked {
        decoder: ChunkedDecoder,
        read: usize,
        write: usize,
    },
}

struct Deferred {
    id: u64,
    /// When the request was ready, and its method's metrics label.
    started: Instant,
    method_idx: usize,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    log: Option<LogRequest>,
}

/// Bytes read and not yet consumed: `buf[start..end]`. `buf` is empty while
/// the connection is idle.
#[derive(Default)]
struct Input {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// Bytes to send: `buf[pos..]`, then `tail`. `buf` is empty while idle.
#[derive(Default)]
struct Output {
    buf: Vec<u8>,
    pos: usize,
    tail: Option<Tail>,
}

/// A large body sent after the bytes in the output buffer.
enum Tail {
    Bytes {
        data: Vec<u8>,
        pos: usize,
    },
    Shared {
        bytes: SharedBytes,
        pos: usize,
    },
    File {
        range: FileRange,
        sent: u64,
    },
    Stream {
        chunks: Box<dyn Iterator<Item = Vec<u8>> + Send>,
        chunked: bool,
    },
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

    /// Header fields added to every response on this transport (HSTS).
    fn extra_fields(&self) -> &[u8] {
        match self {
            Transport::Tls(tls) => tls.listener.hsts_field.as_deref().unwrap_or(&[]),
            Transport::Plain => &[],
        }
    }
}

pub(crate) struct Conn {
    stream: TcpStream,
    transport: Transport,
    /// Accepted on a redirecting listener: answered by `Ctx::redirect`.
    redirect: bool,
    peer: SocketAddr,
    token: usize,
    input: Input,
    output: Output,
    state: State,
    /// When the connection times out, if it can: the send deadline while
    /// output is blocked, otherwise `state_deadline`. The worker reads this.
    pub(crate) deadline: Option<Instant>,
    /// The deadline of the request/idle state (head, body, idle timeouts),
    /// kept apart so that a blocked send does not move it.
    state_deadline: Option<Instant>,
    /// Set while output is blocked: `send_timeout` after the last byte left.
    send_deadline: Option<Instant>,
    /// Work left in this turn (see `TURN_WORK`).
    work_left: u32,
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
    /// Bytes written since the metrics last counted them.
    bytes_out: u64,
    /// TLS: the handshake's end has been counted in the metrics.
    handshake_counted: bool,
    /// TCP_CORK is on while a file body goes out with sendfile.
    corked: bool,
    /// No byte of a request has arrived yet: the client has just
    /// connected, and its first request is presumably on its way. A
    /// shutdown answers it rather than closing the connection as idle.
    fresh: bool,
    /// No request has been answered yet: the connection may still turn
    /// out to be HTTP/2 (its first bytes are the preface).
    first: bool,
    /// The connection speaks HTTP/2 (see `h2.rs`); `state` is then `Idle`
    /// or `Closing` only.
    h2: Option<Box<h2::H2>>,
}

impl Conn {
    pub(crate) fn new(
        stream: TcpStream,
        transport: Transport,
        redirect: bool,
        peer: SocketAddr,
        token: usize,
        deadline: Option<Instant>,
    ) -> Self {
        Conn {
            stream,
            transport,
            redirect,
            peer,
            token,
            input: Input::default(),
            output: Output::default(),
            state: State::Idle,
            deadline,
            state_deadline: deadline,
            send_deadline: None,
            work_left: TURN_WORK,
            queued: false,
            writable_interest: false,
            peer_closed: false,
            read_closed_hint: false,
            drained: false,
            bytes_out: 0,
            handshake_counted: false,
            corked: false,
            fresh: true,
            first: true,
            h2: None,
        }
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
        if self.h2.is_some() {
            return if self.on_answer_h2(ctx, id, response) {
                self.drive(ctx)
            } else {
                Next::Keep
            };
        }
        let State::Deferred(wait) = &self.state else {
            return Next::Keep;
        };
        if wait.id != id {
            return Next::Keep;
        }
        let State::Deferred(wait) = std::mem::replace(&mut self.state, State::Idle) else {
            unreachable!()
        };
        self.ensure_output(ctx.pool);
        let keep_alive = wait.keep_alive && !ctx.draining;
        let sent = write_response(
            ctx.date,
            &mut self.output,
            response,
            wait.head_only,
            wait.version,
            keep_alive,
            self.transport.extra_fields(),
        );
        if let (Some(log), Some(req)) = (ctx.log.as_deref_mut(), &wait.log) {
            log.record_owned(
                ctx.date.clf(),
                self.peer,
                req,
                sent.status,
                sent.body_bytes,
                wait.started,
            );
        }
        if let Some(m) = ctx.metrics {
            m.record_index(wait.method_idx, sent.status, wait.started);
            m.deferred_ended.add(1);
        }
        self.state = if sent.keep_alive { State::Idle } else { State::Closing };
        self.drive(ctx)
    }

    /// Handles the deadline having passed.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) -> Next {
        if self.has_output() {
            // send_timeout: the client stopped reading.
            return Next::Close;
        }
        if self.h2.is_some() {
            if let State::Closing = self.state {
                return Next::Close;
            }
            self.time_out_h2(ctx);
            return self.drive(ctx);
        }
        match self.state {
            State::Head | State::Body(_) => {
                self.fail(ctx, 408, "request not received in time");
                self.drive(ctx)
            }
            State::Deferred(_) => {
                self.deadline = None;
                self.state_deadline = None;
                Next::Keep
            }
            State::Idle | State::Closing | State::Lingering { .. } => {
                if let Transport::Tls(tls) = &self.transport {
                    if tls.is_handshaking() {
                        crate::tls::session::debug(self.peer, "handshake not finished within head_timeout");
                    }
                }
                Next::Close
            }
        }
    }

    /// Whether a deferred handler still owes this connection an answer.
    pub(crate) fn is_deferred(&self) -> bool {
        matches!(self.state, State::Deferred(_)) || self.h2_deferred()
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
        if self.h2.is_some() {
            // GOAWAY: the streams in flight finish, the client opens no
            // more (process_h2 sends it while draining).
            return match self.state {
                State::Lingering { .. } => Next::Close,
                _ => self.drive(ctx),
            };
        }
        match self.state {
            State::Lingering { .. } => Next::Close,
            State::Idle if !self.fresh && !keep_idle && self.input.start == self.input.end && !self.has_output() => {
                self.drained = false;
                self.drive(ctx)
            }
            _ => Next::Keep,
        }
    }

    /// Gives the buffers back to the pool before the connection is dropped,
    /// and ends a TLS session with close_notify (best effort).
    pub(crate) fn release(&mut self, pool: &mut BufPool) {
        if let Transport::Tls(tls) = &mut self.transport {
            tls.close(&mut self.stream);
        }
        pool.give_read(std::mem::take(&mut self.input.buf));
        pool.give_write(std::mem::take(&mut self.output.buf));
    }

    fn has_output(&self) -> bool {
        self.output.pos < self.output.buf.len() || self.output.tail.is_some() || self.transport.wants_write()
    }

    /// Reads, answers and writes until the connection must wait.
    fn drive(&mut self, ctx: &mut Ctx<'_>) -> Next {
        if let State::Lingering { .. } = self.state {
            return self.linger(ctx);
        }
        self.work_left = TURN_WORK;
        loop {
            let stop = self.read_and_process(ctx);
            if stop == Stop::Broken {
                // Send the alert if the socket takes it; nothing else.
                if let Transport::Tls(tls) = &mut self.transport {
                    if let (Some(m), true) = (ctx.metrics, tls.is_handshaking()) {
                        m.tls_handshake_failures.add(1);
                    }
                    tls.close(&mut self.stream);
                }
                return Next::Close;
            }
            let flushed = self.flush(ctx.pool);
            if let Some(m) = ctx.metrics {
                m.bytes_sent.add(std::mem::take(&mut self.bytes_out));
                if let Transport::Tls(tls) = &self.transport {
                    if !self.handshake_counted && !tls.is_handshaking() {
                        self.handshake_counted = true;
                        m.tls_handshakes.add(1);
                    }
                }
            }
            match flushed {
                Flushed::All => self.send_deadline = None,
                Flushed::Turn => return Next::Again,
                Flushed::Blocked { progress } => {
                    if !self.writable_interest {
                        let interest = Interest::READABLE | Interest::WRITABLE;
                        if ctx
                            .registry
                            .reregister(&mut self.stream, Token(self.token), interest)
                            .is_err()
                        {
                            return Next::Close;
                        }
                        self.writable_interest = true;
                    }
                    // The send timeout runs from the last byte that left, so
                    // a client that reads slowly but steadily is kept, and
                    // one that wakes us without reading is not.
                    if progress || self.send_deadline.is_none() {
                        self.send_deadline = ctx.now.checked_add(ctx.limits.send_timeout);
                    }
                    self.deadline = self.send_deadline;
                    return Next::Keep;
                }
                Flushed::Failed => return Next::Close,
            }
            if let State::Closing = self.state {
                return self.start_lingering(ctx);
            }
            match stop {
                Stop::Output => {}
                Stop::Turn => return Next::Again,
                Stop::Input | Stop::Deferred | Stop::Closing | Stop::Broken => break,
            }
        }
        if self.writable_interest {
            if ctx
                .registry
                .reregister(&mut self.stream, Token(self.token), Interest::READABLE)
                .is_err()
            {
                return Next::Close;
            }
            self.writable_interest = false;
        }
        let input_empty = self.input.start == self.input.end;
        if self.h2.is_some() {
            if self.peer_closed {
                return Next::Close;
            }
            self.h2_deadline(ctx);
        } else if let Some(next) = self.h1_deadline(ctx, input_empty) {
            return next;
        }
        self.deadline = self.state_deadline;
        // An idle connection holds no buffers.
        if input_empty && !self.input.buf.is_empty() {
            self.input.start = 0;
            self.input.end = 0;
            ctx.pool.give_read(std::mem::take(&mut self.input.buf));
        }
        if !self.output.buf.is_empty() || self.output.buf.capacity() != 0 {
            self.output.pos = 0;
            ctx.pool.give_write(std::mem::take(&mut self.output.buf));
        }
        Next::Keep
    }

    /// Sets the HTTP/1 state's deadline once the connection waits.
    fn h1_deadline(&mut self, ctx: &mut Ctx<'_>, input_empty: bool) -> Option<Next> {
        match self.state {
            State::Idle if input_empty => {
                if self.peer_closed || (ctx.draining && !self.fresh) {
                    return Some(Next::Close);
                }
                // A handshake keeps the deadline set at accept
                // (`head_timeout`): a client that never finishes one is
                // closed then (a 408 cannot be sent before it).
                let handshaking = matches!(&self.transport, Transport::Tls(tls) if tls.is_handshaking());
                if !handshaking {
                    self.state_deadline = ctx.now.checked_add(ctx.limits.idle_timeout);
                }
            }
            State::Idle | State::Head if self.peer_closed => return Some(Next::Close),
            State::Body(_) if self.peer_closed => return Some(Next::Close),
            State::Body(_) => self.state_deadline = ctx.now.checked_add(ctx.limits.body_timeout),
            State::Deferred(_) => self.state_deadline = None,
            _ => {}
        }
        None
    }

    /// Answers complete requests in the buffer, reading more while the socket
    /// has some, until something must wait.
    fn read_and_process(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let mut may_read = !self.peer_closed && !self.drained;
        loop {
            let stop = self.process(ctx);
            if stop != Stop::Input || !may_read {
                return stop;
            }
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
                Transport::Tls(tls) => tls.read(&mut self.stream, into, self.peer),
            };
            match result {
                Ok(0) => {
                    self.peer_closed = true;
                    may_read = false;
                }
                Ok(n) => {
                    self.input.end += n;
                    self.fresh = false;
                    // A short read drained the socket: under edge-triggered
                    // epoll, new bytes will raise a new event. Saves a read
                    // that would only say EAGAIN. (Not under TLS: a short
                    // read there may be the end of one record.)
                    if n < room && !self.read_closed_hint && matches!(self.transport, Transport::Plain) {
                        may_read = false;
                        self.drained = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    may_read = false;
                    self.drained = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData && matches!(self.transport, Transport::Tls(_)) => {
                    return Stop::Broken;
                }
                Err(_) => {
                    self.peer_closed = true;
                    may_read = false;
                }
            }
        }
    }

    /// Makes sure there is room to read into. False if the request in the
    /// buffer cannot grow further (the error response is then queued).
    fn make_room(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let input = &mut self.input;
        if input.buf.is_empty() {
            input.buf = if self.h2.is_some() {
                ctx.pool.take_h2_read()
            } else {
                ctx.pool.take_read()
            };
            input.start = 0;
            input.end = 0;
        }
        if input.end < input.buf.len() {
            return true;
        }
        if self.h2.is_some() {
            // The session keeps only a partial frame; a frame fits.
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
        // Reclaim the framing bytes already decoded out of a chunked body.
        if let State::Body(wait) = &mut self.state {
            if let BodyKind::Chunked { read, write, .. } = &mut wait.kind {
                if *read > *write {
                    let (from, to) = (input.start + *read, input.start + *write);
                    input.buf.copy_within(from..input.end, to);
                    input.end -= *read - *write;
                    *read = *write;
                }
            }
        }
        if input.start > 0 {
            input.buf.copy_within(input.start..input.end, 0);
            input.end -= input.start;
            input.start = 0;
        }
        if input.end < input.buf.len() {
            return true;
        }
        // Grow geometrically, never past what the request still needs (a
        // Content-Length body) or the limits allow: a client announcing a
        // large body costs memory only as its bytes arrive.
        let limits = ctx.limits;
        let max = limits
            .head_bytes_max
            .saturating_add(usize::try_from(limits.body_bytes_max).unwrap_or(usize::MAX))
            .saturating_add(BUFFER_BYTES);
        let doubled = input.buf.len().saturating_mul(2);
        let want = match &self.state {
            State::Body(wait) => match wait.kind {
                BodyKind::Length(n) => {
                    doubled.min(wait.head_len.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)))
                }
                BodyKind::Chunked { .. } => doubled,
            },
            _ => doubled,
        };
        let new_len = want.max(input.buf.len() + 1).min(max);
        if new_len <= input.buf.len() {
            let (status, why) = match self.state {
                State::Body(_) => (413, "request body too large"),
                _ => (431, "request head too large"),
            };
            self.fail(ctx, status, why);
            return false;
        }
        input.buf.resize(new_len, 0);
        true
    }

    /// Answers the complete requests in the read buffer.
    fn process(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        if self.h2.is_some() {
            return self.process_h2(ctx);
        }
        if self.first && ctx.h2.is_some() && matches!(self.state, State::Idle) {
            if self.alpn_h2() {
                self.start_h2(ctx);
                return self.process_h2(ctx);
            }
            match h2::preface(&self.input.buf[self.input.start..self.input.end]) {
                h2::Preface::Yes => {
                    self.start_h2(ctx);
                    return self.process_h2(ctx);
                }
                h2::Preface::Maybe if self.input.start < self.input.end => return Stop::Input,
                _ => {}
            }
        }
        loop {
            if self.output.tail.is_some() || self.output.buf.len() - self.output.pos > ctx.limits.write_buffer_bytes_max
            {
                return Stop::Output;
            }
            match self.state {
                State::Deferred(_) => return Stop::Deferred,
                State::Closing | State::Lingering { .. } => return Stop::Closing,
                State::Idle | State::Head | State::Body(_) => {}
            }
            if self.input.start == self.input.end {
                return Stop::Input;
            }
            if self.work_left == 0 {
                return Stop::Turn;
            }
            self.work_left -= 1;
            let stop = match self.state {
                State::Body(_) => self.continue_body(ctx),
                _ => self.start_request(ctx),
            };
            if let Some(stop) = stop {
                return stop;
            }
        }
    }

    /// Parses a head at the start of the buffer and answers the request if
    /// it has no body or its body is here. `None` means: go on.
    fn start_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Stop> {
        let Conn {
            input, output, state, ..
        } = self;
        let data = &input.buf[input.start..input.end];
        let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
        let head = match parse_head(data, &mut headers, ctx.limits) {
            Ok(Parsed::Complete(head)) => head,
            Ok(Parsed::Partial) => {
                if let State::Idle = state {
                    *state = State::Head;
                    self.state_deadline = ctx.now.checked_add(ctx.limits.head_timeout);
                }
                return Some(Stop::Input);
            }
            Err(HeadError::NotHttp) if self.first && ctx.h2.is_some() => {
                // Neither HTTP/1 nor the HTTP/2 preface: an invalid
                // connection preface, which ends the connection without an
                // answer (RFC 9113 §3.4) — an HTTP/1 400 would be read as
                // a broken frame by an HTTP/2 client.
                if let Some(m) = ctx.metrics {
                    m.record(b"-", 400, ctx.now);
                }
                self.input.start = self.input.end;
                self.state = State::Closing;
                return Some(Stop::Closing);
            }
            Err(e) => {
                self.fail(ctx, e.status(), e.reason());
                return Some(Stop::Closing);
            }
        };
        let head_len = head.head_len;
        self.first = false;
        match head.framing {
            Framing::Empty => {
                let (token, peer) = (self.token, self.peer);
                let via = Via::of(self.redirect, &self.transport);
                ensure_output(output, ctx.pool);
                dispatch(ctx, output, state, token, peer, via, &head, &[]);
                input.start += head_len;
                None
            }
            Framing::Length(n) if (data.len() - head_len) as u64 >= n => {
                let (token, peer) = (self.token, self.peer);
                let via = Via::of(self.redirect, &self.transport);
                let n = n as usize;
                ensure_output(output, ctx.pool);
                dispatch(
                    ctx,
                    output,
                    state,
                    token,
                    peer,
                    via,
                    &head,
                    &data[head_len..head_len + n],
                );
                input.start += head_len + n;
                None
            }
            framing => {
                let expect_continue = head.expect_continue && data.len() == head_len;
                let kind = match framing {
                    Framing::Length(n) => BodyKind::Length(n),
                    _ => BodyKind::Chunked {
                        decoder: ChunkedDecoder::new(ctx.limits.body_bytes_max),
                        read: head_len,
                        write: head_len,
                    },
                };
                *state = State::Body(Box::new(BodyWait {
                    head_len,
                    head_only: head.method == "HEAD",
                    kind,
                }));
                if expect_continue {
                    // RFC 9110 §10.1.1: the client waits for this before
                    // sending the body.
                    ensure_output(output, ctx.pool);
                    output.buf.extend_from_slice(wire::CONTINUE);
                }
                None
            }
        }
    }

    /// Checks whether the body being waited for is complete, and if so
    /// answers its request.
    fn continue_body(&mut self, ctx: &mut Ctx<'_>) -> Option<Stop> {
        let Conn {
            input, output, state, ..
        } = self;
        let State::Body(wait) = state else { return None };
        let head_len = wait.head_len;
        let (body, consumed) = match &mut wait.kind {
            BodyKind::Length(n) => {
                let total = head_len + *n as usize;
                if input.end - input.start < total {
                    return Some(Stop::Input);
                }
                (head_len..total, total)
            }
            BodyKind::Chunked { decoder, read, write } => {
                let buf = &mut input.buf[input.start..input.end];
                match decoder.decode_in_place(buf, read, write) {
                    Ok(true) => (head_len..*write, *read),
                    Ok(false) => return Some(Stop::Input),
                    Err(e) => {
                        self.fail(ctx, e.status(), e.reason());
                        return Some(Stop::Closing);
                    }
                }
            }
        };
        let data = &input.buf[input.start..input.end];
        let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
        // The head was valid when it arrived and its bytes have not moved
        // relative to the request start; parse it again rather than keep a
        // self-referential borrow across reads.
        let Ok(Parsed::Complete(head)) = parse_head(&data[..head_len], &mut headers, ctx.limits) else {
            self.fail(ctx, 500, "request head changed");
            return Some(Stop::Closing);
        };
        *state = State::Idle;
        let (token, peer) = (self.token, self.peer);
        let via = Via::of(self.redirect, &self.transport);
        ensure_output(output, ctx.pool);
        dispatch(ctx, output, state, token, peer, via, &head, &data[body]);
        input.start += consumed;
        None
    }

    /// Queues an error response and moves to closing. The rest of the input
    /// is dropped: its framing cannot be trusted.
    fn fail(&mut self, ctx: &mut Ctx<'_>, status: u16, why: &str) {
        self.ensure_output(ctx.pool);
        let head_only = matches!(&self.state, State::Body(wait) if wait.head_only);
        wire::write_error(&mut self.output.buf, status, why, ctx.date.http(), head_only);
        if let Some(log) = ctx.log.as_deref_mut() {
            log.record(&refused_line(ctx.date.clf(), self.peer, b"-", status, ctx.now));
        }
        if let Some(m) = ctx.metrics {
            m.record(b"-", status, ctx.now);
        }
        self.input.start = self.input.end;
        self.state = State::Closing;
    }

    fn ensure_output(&mut self, pool: &mut BufPool) {
        ensure_output(&mut self.output, pool);
    }

    /// Writes what is queued until done or the socket is full.
    fn flush(&mut self, pool: &mut BufPool) -> Flushed {
        if let Transport::Tls(_) = self.transport {
            return self.flush_tls(pool);
        }
        let out = &mut self.output;
        let mut progress = false;
        loop {
            // While a file goes out with sendfile, cork the socket (as
            // nginx's tcp_nopush does): the head and the file's pages leave
            // in full segments, and the last one when the file is done.
            let file_tail = matches!(out.tail, Some(Tail::File { .. }));
            if file_tail != self.corked {
                self.corked = file_tail;
                crate::sys::socket::set_cork(&self.stream, file_tail);
            }
            let buffered = &out.buf[out.pos.min(out.buf.len())..];
            if out.tail.is_none() && buffered.is_empty() {
                out.buf.clear();
                out.pos = 0;
                return Flushed::All;
            }
            if self.work_left < SYSCALL_WORK {
                return Flushed::Turn;
            }
            self.work_left -= SYSCALL_WORK;
            let result = match (&mut out.tail, buffered.is_empty()) {
                (None, true) => unreachable!("checked above"),
                (Some(Tail::Bytes { data, pos }), false) => self
                    .stream
                    .write_vectored(&[IoSlice::new(buffered), IoSlice::new(&data[*pos..])]),
                (Some(Tail::Shared { bytes, pos }), false) => {
                    let rest = &bytes.as_slice()[*pos..];
                    self.stream
                        .write_vectored(&[IoSlice::new(buffered), IoSlice::new(rest)])
                }
                (_, false) => self.stream.write(buffered),
                (Some(Tail::Bytes { data, pos }), true) => self.stream.write(&data[*pos..]),
                (Some(Tail::Shared { bytes, pos }), true) => self.stream.write(&bytes.as_slice()[*pos..]),
                (Some(Tail::File { range, sent }), true) => {
                    match crate::sys::sendfile::sendfile(
                        &self.stream,
                        &range.file,
                        range.offset + *sent,
                        range.len - *sent,
                    ) {
                        // The file shrank under us: the promised length can no
                        // longer be sent, so the connection must close.
                        Ok(0) => return Flushed::Failed,
                        other => other,
                    }
                }
                (Some(Tail::Stream { chunks, chunked }), true) => {
                    out.buf.clear();
                    out.pos = 0;
                    // The iterator is the application's code: a panic in it
                    // ends this response (its length can no longer be
                    // right), not the worker.
                    let Ok(next) = panic::catch_unwind(AssertUnwindSafe(|| chunks.next())) else {
                        return Flushed::Failed;
                    };
                    match next {
                        Some(chunk) if chunk.is_empty() => {}
                        Some(chunk) if *chunked => {
                            wire::write_chunk_start(&mut out.buf, chunk.len());
                            out.buf.extend_from_slice(&chunk);
                            out.buf.extend_from_slice(wire::CHUNK_END);
                        }
                        Some(chunk) => out.buf.extend_from_slice(&chunk),
                        None => {
                            if *chunked {
                                out.buf.extend_from_slice(wire::LAST_CHUNK);
                            }
                            out.tail = None;
                        }
                    }
                    continue;
                }
            };
            match result {
                Ok(0) => return Flushed::Failed,
                Ok(mut n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                    let from_buf = n.min(out.buf.len() - out.pos);
                    out.pos += from_buf;
                    n -= from_buf;
                    let done = match &mut out.tail {
                        Some(Tail::Bytes { data, pos }) => {
                            *pos += n;
                            *pos == data.len()
                        }
                        Some(Tail::Shared { bytes, pos }) => {
                            *pos += n;
                            *pos == bytes.range.len()
                        }
                        Some(Tail::File { range, sent }) => {
                            *sent += n as u64;
                            *sent == range.len
                        }
                        Some(Tail::Stream { .. }) | None => false,
                    };
                    if done {
                        out.tail = None;
                    }
                    if out.pos == out.buf.len() {
                        out.buf.clear();
                        out.pos = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Flushed::Failed,
            }
        }
    }

    /// Under TLS: encrypts queued plaintext while rustls has room
    /// (`TLS_SEND_BYTES_MAX`), writes the records, until done or the socket
    /// is full. A batch of pipelined answers is one record and one write.
    fn flush_tls(&mut self, pool: &mut BufPool) -> Flushed {
        let Transport::Tls(tls) = &mut self.transport else {
            unreachable!("called for TLS only")
        };
        let out = &mut self.output;
        let mut progress = false;
        let mut scratch: Vec<u8> = Vec::new();
        let flushed = loop {
            if !encrypt(tls, out, pool, &mut scratch) {
                break Flushed::Failed;
            }
            if !tls.wants_write() {
                if out.tail.is_none() && out.pos >= out.buf.len() {
                    out.buf.clear();
                    out.pos = 0;
                    break Flushed::All;
                }
                // rustls took nothing and has nothing to send: only while
                // a handshake waits for the client. Wait for an event.
                break Flushed::Blocked { progress };
            }
            if self.work_left < SYSCALL_WORK {
                break Flushed::Turn;
            }
            self.work_left -= SYSCALL_WORK;
            match tls.write_tls(&mut self.stream) {
                Ok(0) => break Flushed::Failed,
                Ok(n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Flushed::Failed,
            }
        };
        if !scratch.is_empty() {
            pool.give_read(scratch);
        }
        flushed
    }

    /// All output is sent after an error: half-close and drain.
    fn start_lingering(&mut self, ctx: &mut Ctx<'_>) -> Next {
        if let Transport::Tls(tls) = &mut self.transport {
            // close_notify before the FIN, as TLS asks (RFC 8446 §6.1).
            tls.close(&mut self.stream);
        }
        if self.peer_closed || self.stream.shutdown(Shutdown::Write).is_err() {
            return Next::Close;
        }
        if self.writable_interest {
            // Nothing more will be written: stop waking up for writability.
            if ctx
                .registry
                .reregister(&mut self.stream, Token(self.token), Interest::READABLE)
                .is_err()
            {
                return Next::Close;
            }
            self.writable_interest = false;
        }
        self.state = State::Lingering { discarded: 0 };
        self.deadline = Some(ctx.now + LINGER_TIMEOUT);
        self.input.start = 0;
        self.input.end = 0;
        self.linger(ctx)
    }

    fn linger(&mut self, ctx: &mut Ctx<'_>) -> Next {
        let State::Lingering { discarded } = &mut self.state else {
            return Next::Close;
        };
        if self.input.buf.is_empty() {
            self.input.buf = ctx.pool.take_read();
        }
        loop {
            match self.stream.read(&mut self.input.buf) {
                Ok(0) => return Next::Close,
                Ok(n) => {
                    *discarded += n;
                    if *discarded > LINGER_BYTES_MAX {
                        return Next::Close;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        ctx.pool.give_read(std::mem::take(&mut self.input.buf));
        Next::Keep
    }
}

/// Feeds queued plaintext (buffer, then tail) to rustls until it is all
/// taken or rustls' outgoing buffer is full. False if the response cannot
/// be completed (the file shrank or failed, the stream panicked).
fn encrypt(tls: &mut TlsSession, out: &mut Output, pool: &mut BufPool, scratch: &mut Vec<u8>) -> bool {
    loop {
        if out.pos < out.buf.len() {
            out.pos += tls.encrypt(&out.buf[out.pos..]);
            if out.pos < out.buf.len() {
                return true;
            }
        }
        out.buf.clear();
        out.pos = 0;
        let done = match &mut out.tail {
            None => return true,
            Some(Tail::Bytes { data, pos }) => {
                *pos += tls.encrypt(&data[*pos..]);
                if *pos < data.len() {
                    return true;
                }
                true
            }
            Some(Tail::Shared { bytes, pos }) => {
                *pos += tls.encrypt(&bytes.as_slice()[*pos..]);
                if *pos < bytes.range.len() {
                    return true;
                }
                true
            }
            Some(Tail::File { range, sent }) => {
                if scratch.is_empty() {
                    *scratch = pool.take_read();
                }
                let want = usize::try_from(range.len - *sent).map_or(scratch.len(), |n| n.min(scratch.len()));
                let got = match range.file.read_at(&mut scratch[..want], range.offset + *sent) {
                    // The file shrank under us: the promised length can no
                    // longer be sent, so the connection must close.
                    Ok(0) => return false,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return false,
                };
                // Bytes rustls does not take now are read again next time.
                let n = tls.encrypt(&scratch[..got]);
                *sent += n as u64;
                if n < got {
                    return true;
                }
                *sent == range.len
            }
            Some(Tail::Stream { chunks, chunked }) => {
                // As in `flush`: the application's iterator may panic.
                let Ok(next) = panic::catch_unwind(AssertUnwindSafe(|| chunks.next())) else {
                    return false;
                };
                match next {
                    Some(chunk) if chunk.is_empty() => false,
                    Some(chunk) if *chunked => {
                        wire::write_chunk_start(&mut out.buf, chunk.len());
                        out.buf.extend_from_slice(&chunk);
                        out.buf.extend_from_slice(wire::CHUNK_END);
                        false
                    }
                    Some(chunk) => {
                        out.buf.extend_from_slice(&chunk);
                        false
                    }
                    None => {
                        if *chunked {
                            out.buf.extend_from_slice(wire::LAST_CHUNK);
                        }
                        true
                    }
                }
            }
        };
        if done {
            out.tail = None;
        }
    }
}

fn ensure_output(output: &mut Output, pool: &mut BufPool) {
    if output.buf.capacity() == 0 {
        output.buf = pool.take_write();
        output.pos = 0;
    }
}

/// What a request arrived through: which handler answers it and which
/// header fields the transport adds.
#[derive(Clone, Copy)]
struct Via<'c> {
    redirect: bool,
    extra_fields: &'c [u8],
}

impl<'c> Via<'c> {
    fn of(redirect: bool, transport: &'c Transport) -> Self {
        Via {
            redirect,
            extra_fields: transport.extra_fields(),
        }
    }
}

/// Calls the handler for one request and queues its answer.
#[allow(clippy::too_many_arguments)]
fn dispatch(
    ctx: &mut Ctx<'_>,
    output: &mut Output,
    state: &mut State,
    token: usize,
    peer: SocketAddr,
    via: Via<'_>,
    head: &Head<'_, '_>,
    body: &[u8],
) {
    let slot = DeferSlot {
        mailbox: ctx.mailbox,
        token,
        next_id: ctx.next_defer_id,
        id: Cell::new(None),
    };
    let mut req = Request::new(
        head.method,
        head.target,
        head.version,
        head.headers,
        head.host,
        body,
        peer,
    );
    req.defer = Some(&slot);
    let head_only = head.method == "HEAD";
    let keep_alive = head.keep_alive && !ctx.draining;
    let handler = match (via.redirect, ctx.redirect) {
        (true, Some(redirect)) => redirect,
        _ => ctx.handler,
    };
    let reply = panic::catch_unwind(AssertUnwindSafe(|| handler.call(&req)));
    let response = match reply {
        Ok(Reply::Now(response)) => response,
        Ok(Reply::Later) => {
            if let Some(id) = slot.id.get() {
                let log = ctx.log.is_some().then(|| log_request(&req));
                if let Some(m) = ctx.metrics {
                    m.deferred_started.add(1);
                }
                *state = State::Deferred(Box::new(Deferred {
                    id,
                    started: ctx.now,
                    method_idx: crate::metrics::method_index(head.method.as_bytes()),
                    head_only,
                    version: head.version,
                    keep_alive,
                    log,
                }));
                return;
            }
            crate::log::error(format_args!(
                "handler returned Reply::Later without calling Request::defer"
            ));
            Response::error(500).with_close()
        }
        // The panic hook has already printed the message.
        Err(_) => Response::error(500).with_close(),
    };
    let sent = write_response(
        ctx.date,
        output,
        response,
        head_only,
        head.version,
        keep_alive,
        via.extra_fields,
    );
    if let Some(log) = ctx.log.as_deref_mut() {
        log.record(&Line {
            clf_time: ctx.date.clf(),
            peer,
            method: head.method.as_bytes(),
            target: head.target.as_bytes(),
            version: head.version.as_str().as_bytes(),
            status: sent.status,
            body_bytes: sent.body_bytes,
            referer: req.header_bytes("referer"),
            user_agent: req.header_bytes("user-agent"),
            host: head.host.map(str::as_bytes),
            duration_us: Some(micros_since(ctx.now)),
        });
    }
    if let Some(m) = ctx.metrics {
        m.record(head.method.as_bytes(), sent.status, ctx.now);
    }
    *state = if sent.keep_alive { State::Idle } else { State::Closing };
}

fn log_request(req: &Request<'_>) -> LogRequest {
    let mut request_line = Vec::with_capacity(req.method().len() + req.target().len() + 10);
    request_line.extend_from_slice(req.method().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.target().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.version().as_str().as_bytes());
    LogRequest {
        request_line,
        referer: req.header_bytes("referer").map(<[u8]>::to_vec),
        user_agent: req.header_bytes("user-agent").map(<[u8]>::to_vec),
        host: req.host().map(|h| h.as_bytes().to_vec()),
    }
}

/// The log line of a request refused before a handler saw it.
fn refused_line<'a>(
    clf_time: &'a [u8],
    peer: SocketAddr,
    version: &'a [u8],
    status: u16,
    started: Instant,
) -> Line<'a> {
    Line {
        clf_time,
        peer,
        method: b"-",
        target: b"-",
        version,
        status,
        body_bytes: 0,
        referer: None,
        user_agent: None,
        host: None,
        duration_us: Some(micros_since(started)),
    }
}

/// Microseconds since `start` (the access log's duration).
fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// What was sent, for the log and the connection state.
struct Sent {
    status: u16,
    body_bytes: u64,
    keep_alive: bool,
}

/// Queues a response: its head, and its body inline or as the tail.
/// `extra_fields` (complete `Name: value\r\n` lines, from the transport)
/// go at the end of the head unless the handler set the same field.
fn write_response(
    date: &DateCache,
    out: &mut Output,
    mut resp: Response,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    extra_fields: &[u8],
) -> Sent {
    if let Some(why) = resp.invalid {
        crate::log::error(format_args!(
            "handler returned an invalid response ({why}); answering 500"
        ));
        resp = Response::error(500).with_close();
    }
    let status = resp.status;
    let bodiless = status == 204 || status == 304;
    let mut keep_alive = keep_alive && !resp.close;
    let framing = match resp.body.len() {
        _ if bodiless => BodyFraming::Bodiless,
        Some(n) => BodyFraming::Length(n),
        None if version == Version::Http11 => BodyFraming::Chunked,
        None => {
            keep_alive = false;
            BodyFraming::Close
        }
    };
    let conn = match (keep_alive, version) {
        (false, _) => ConnField::Close,
        (true, Version::Http10) => ConnField::KeepAlive,
        (true, Version::Http11 | Version::Http2) => ConnField::Omit,
    };
    let head_start = out.buf.len();
    wire::write_head(&mut out.buf, &resp, date.http(), framing, conn);
    if !extra_fields.is_empty() {
        let name = extra_fields.split(|&b| b == b':').next().unwrap_or_default();
        let given = std::str::from_utf8(name).is_ok_and(|name| resp.header(name).is_some());
        if !given {
            // Before the blank line that ends the head.
            out.buf.truncate(out.buf.len() - 2);
            out.buf.extend_from_slice(extra_fields);
            out.buf.extend_from_slice(b"\r\n");
        }
    }
    let body_bytes = match framing {
        BodyFraming::Length(n) if !head_only => n,
        _ => 0,
    };
    let sent = Sent {
        status,
        body_bytes,
        keep_alive,
    };
    if head_only || bodiless {
        return sent;
    }
    match resp.body {
        Body::Empty => {}
        Body::Static(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(b),
        Body::Static(b) => {
            out.tail = Some(Tail::Shared {
                bytes: SharedBytes::new(Arc::new(b)),
                pos: 0,
            })
        }
        Body::Bytes(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(&b),
        Body::Bytes(b) => out.tail = Some(Tail::Bytes { data: b, pos: 0 }),
        Body::Shared(s) if s.range.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(s.as_slice()),
        Body::Shared(s) => out.tail = Some(Tail::Shared { bytes: s, pos: 0 }),
        Body::File(f) if f.len <= INLINE_BODY_BYTES_MAX as u64 => {
            // Small files: read them next to the head, so both leave in one
            // write instead of a write and a sendfile.
            let at = out.buf.len();
            out.buf.resize(at + f.len as usize, 0);
            if f.file.read_exact_at(&mut out.buf[at..], f.offset).is_err() {
                out.buf.truncate(head_start);
                wire::write_error(&mut out.buf, 500, "file could not be read", date.http(), false);
                return Sent {
                    status: 500,
                    body_bytes: 0,
                    keep_alive: false,
                };
            }
        }
        Body::File(f) => out.tail = Some(Tail::File { range: f, sent: 0 }),
        Body::Stream(chunks) => {
            out.tail = Some(Tail::Stream {
                chunks,
                chunked: framing == BodyFraming::Chunked,
            });
        }
    }
    sent
}
