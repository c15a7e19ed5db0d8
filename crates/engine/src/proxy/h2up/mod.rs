//! HTTP/2 upstreams (`h2c://HOST:PORT`: cleartext, prior knowledge, RFC
//! 9113 §3.3; `h2s://HOST:PORT`: over TLS, ALPN `h2` and nothing else,
//! §3.2, verified as an `https://` upstream is), so that gRPC services
//! can sit behind the proxy: requests
//! multiplexed as streams over a few connections per upstream and worker,
//! driven from the worker's loop as `pool.rs` drives HTTP/1.1 ones
//! (readiness events, a deadline in the worker's timer set, wakes through
//! the mailbox), never a thread or a runtime. `session.rs` is the
//! protocol, sans I/O; this file owns the sockets, the jobs and the
//! channels the answers go through.
//!
//! A job's request is the one the handler wrote for HTTP/1.1 (`build_as`:
//! re-framed, forwarding fields written), read back here into a HEADERS
//! frame: the request line's method and target become `:method` and
//! `:path`, Host `:authority`; the connection-specific fields are left
//! out (RFC 9113 §8.2.2) and `te: trailers` is always sent (gRPC servers
//! require it). A body read whole goes as DATA at once; a streamed one
//! (`BodyReader::try_take`, as the HTTP/1.1 path) chunk by chunk as the
//! client sends it and the upstream's windows allow, so client-streaming
//! and bidirectional gRPC calls flow both ways at once.
//!
//! The answer: its head through the job's `Responder` as soon as it
//! comes; a head with END_STREAM (gRPC's "trailers-only" answer, its
//! `grpc-status` among the fields) as a whole answer without a body;
//! otherwise a `body::channel_held` of the upstream's `buffer_bytes`,
//! ended with the upstream's trailer fields (`Trailers::relayed`: the
//! ones that may be trailers). Back-pressure: a stream's window is given
//! back only as its channel takes the bytes (`Session::consumed`), so a
//! slow client holds its upstream stream, not the connection's others.
//!
//! Failures: a connection error (bad frames or HPACK, the upstream's
//! close) answers each stream not yet answered 502 and breaks the others'
//! bodies (the client gets RST_STREAM, or a close); a malformed answer or
//! the upstream's RST_STREAM does the same to its stream alone. GOAWAY:
//! streams above its last id were never processed, and a REFUSED_STREAM
//! was not either (RFC 9113 §8.7): such a request is sent once more on a
//! new connection if no byte of a streamed body was taken yet, else 502
//! (a connection that refused a stream takes no new one and closes once
//! idle; the jobs to send again survive the connection's end met in the
//! same read, as a GOAWAY followed at once by the close is).
//! A client that goes away (its channel closed) gets its stream reset
//! with CANCEL; a request body the client cuts short too (and a 400).
//!
//! Deadlines: `read_timeout` runs from the stream's last frame, so a long
//! server-streaming call that makes progress is never cut; a request with
//! `grpc-timeout` (passed on as is) gets at least that long (at most an
//! hour), so a call that may wait longer than `read_timeout` for its
//! answer is not cut before the upstream's own deadline answers it.

mod session;

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Interest;
use slab::Slab;

use super::pool::{Answer, Interim, Sock};
use super::{Job, Upstream};
use crate::access_log::{UpstreamAddr, UpstreamLog};
use crate::body::{self, BodyReader, Sender, Take, TrySendError};
use crate::conn::Ctx;
use crate::h2::frame::Code;
use crate::message::trailers::Trailers;
use crate::metrics::{UpstreamFailure, UpstreamMetrics};
use crate::response::{HeaderBlock, Response, SharedBytes};
use crate::sources::{Source, Timers};
pub(crate) use session::{ConnError, Event, Session};

/// `Upstreams`' connection keys from here on are HTTP/2 connections
/// (this key space's, less it); below, HTTP/1.1 ones (`pool.rs`).
pub(crate) const KEY_BASE: usize = 1 << 40;

/// Connections one worker opens to one HTTP/2 upstream at most: each
/// carries up to `session::STREAMS_MAX` streams (or the upstream's
/// SETTINGS_MAX_CONCURRENT_STREAMS); past them requests queue (the
/// upstream's `queue_max`, then 503).
const CONNS_MAX: usize = 4;
/// Frames waiting for the socket past which no more request body is
/// framed (what the upstream does not read stays in the client's pipe).
const OUT_HIGH: usize = 64 * 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 * 1024;
/// A `grpc-timeout` longer than this counts as this much.
const GRPC_TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// The connection key of `Upstreams`' key `k`, if it is an HTTP/2 one.
pub(crate) fn key(k: usize) -> Option<usize> {
    k.checked_sub(KEY_BASE)
}

fn token(key: usize) -> usize {
    Source::Upstream(KEY_BASE + key).token()
}

/// Where the answers go: `Upstreams`' lists, handed over at the turn's end.
pub(crate) struct Out<'a> {
    pub(crate) answers: &'a mut Vec<Answer>,
    pub(crate) interims: &'a mut Vec<Interim>,
}

/// The worker's HTTP/2 upstream connections and their pools.
#[derive(Default)]
pub(crate) struct H2Upstreams {
    conns: Slab<H2Conn>,
    pools: HashMap<usize, H2Pool>,
    scratch: Vec<u8>,
}

struct H2Pool {
    up: Arc<Upstream>,
    metrics: Option<Arc<UpstreamMetrics>>,
    conns: Vec<usize>,
    /// Jobs waiting for a stream.
    queue: VecDeque<Job>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    Open,
}

struct H2Conn {
    sock: Sock,
    up: Arc<Upstream>,
    state: State,
    session: Session,
    /// Bytes read and not yet whole frames.
    input: Vec<u8>,
    /// Bytes of `session.out` already written.
    written: usize,
    exchanges: HashMap<u32, Exchange>,
    peer: Option<SocketAddr>,
    opened: Instant,
    connect_time: Option<Duration>,
    /// When the last stream ended (idle since).
    idle_since: Option<Instant>,
    armed: Option<Instant>,
    /// The upstream refused a stream (REFUSED_STREAM): no new stream
    /// goes on it, so the refused one is sent again on another
    /// connection (RFC 9113 §8.7 allows either; an upstream that refuses
    /// is often about to close); it closes once idle.
    retiring: bool,
}

/// One request and its answer on a stream.
struct Exchange {
    /// The job until its head is relayed (its responder), kept whole for
    /// a retry.
    job: Option<Job>,
    tx: Option<Sender>,
    /// Body bytes the client's channel had no room for yet (at most the
    /// stream's window: its window is given back as they go).
    pending: VecDeque<Vec<u8>>,
    /// The upstream's end came (with its trailers, if the client takes
    /// them), to pass on after `pending`.
    ended: Option<Option<Trailers>>,
    /// The request's body: what is left of the bytes to send, and the
    /// client's pipe for a streamed one.
    out: Vec<u8>,
    out_at: usize,
    body: Option<BodyReader>,
    local_done: bool,
    /// A byte of a streamed body was taken: the request cannot be sent
    /// again.
    streamed: bool,
    /// Waits for the client's body (the client's own timeouts bound it).
    waits_body: bool,
    timeout: Duration,
    deadline: Option<Instant>,
    started: Instant,
    figures: UpstreamLog,
    head_method: bool,
    trailers: bool,
    /// The client's trailer fields to end the request with (a trailing
    /// HEADERS with END_STREAM, RFC 9113 §8.1), once its body is sent:
    /// a body read whole's from the start (`More::body_trailers`), a
    /// streamed one's when its end is taken.
    request_trailers: Option<Trailers>,
    /// A streamed body's trailers may go on, less these fields (the
    /// client's `Connection` named them; `More::forward_trailers`).
    forward_named: Option<Vec<Vec<u8>>>,
}

/// What became of a stream after an event.
enum Fate {
    Goes,
    /// Done with (answered and ended, or failed and answered).
    Done,
}

impl H2Upstreams {
    /// Takes `job` for its HTTP/2 upstream: a stream on an open
    /// connection, or a place in the queue (a new connection opened for
    /// it), or 503.
    pub(crate) fn place(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, job: Job, out: &mut Out<'_>) {
        if job.more().is_some_and(|m| m.tunnel.is_some()) {
            // RFC 8441 to an upstream is not built: say so rather than
            // send an upgrade HTTP/2 forbids.
            log::warn!(
                "proxy: {}: a WebSocket to an h2c upstream is not passed: 502",
                job.up.url()
            );
            let answer = job.up.error_answer(502, crate::Reason::UpstreamInvalid);
            out.answers.push((job.responder, answer, Some(UpstreamLog::default())));
            return;
        }
        let up_id = job.up.id;
        let pool = self.pools.entry(up_id).or_insert_with(|| H2Pool {
            metrics: ctx.metrics.map(|m| m.upstream(job.up.url())),
            up: job.up.clone(),
            conns: Vec::new(),
            queue: VecDeque::new(),
        });
        if let Some(m) = &pool.metrics {
            m.requests.add(1);
        }
        if pool.queue.len() >= pool.up.queue_max {
            let answer = super::pool::queue_full(&pool.up, pool.queue.len(), pool.metrics.as_deref(), job);
            out.answers.push(answer);
            return;
        }
        pool.queue.push_back(job);
        self.dispatch(ctx, timers, up_id, out);
    }

    /// Starts queued jobs on connections with room; opens a connection
    /// when none has and none is on its way.
    fn dispatch(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, up_id: usize, out: &mut Out<'_>) {
        let mut touched = Vec::new();
        loop {
            let Some(pool) = self.pools.get_mut(&up_id) else { return };
            if pool.queue.is_empty() {
                break;
            }
            let ready = pool
                .conns
                .iter()
                .copied()
                .find(|&k| self.conns[k].session.can_open() && !self.conns[k].retiring);
            if let Some(k) = ready {
                let job = pool.queue.pop_front().expect("not empty");
                self.conns[k].start(ctx, job, out);
                if !touched.contains(&k) {
                    touched.push(k);
                }
                continue;
            }
            let warming = pool.conns.iter().any(|&k| !self.conns[k].session.is_ready());
            // Queued jobs are requests taken already: a draining worker
            // still opens a connection for them (one sent again after a
            // GOAWAY included), else they would wait for the drain's end
            // and get the 500 of a responder dropped at exit.
            if warming || pool.conns.len() >= CONNS_MAX {
                break;
            }
            if !self.connect(ctx, timers, up_id, out) {
                break;
            }
        }
        for k in touched {
            self.drive(ctx, timers, k, out);
        }
    }

    /// Opens a connection for `up_id`'s pool: `false` when it cannot be
    /// (the queued jobs were answered 502).
    fn connect(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, up_id: usize, out: &mut Out<'_>) -> bool {
        let pool = self.pools.get_mut(&up_id).expect("a pool");
        let up = pool.up.clone();
        let made = Sock::connect(&up.addr, up.guard.as_deref(), up.tls.as_ref()).and_then(|(mut sock, peer)| {
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            ctx.registry.register(
                sock.source(),
                Source::Upstream(KEY_BASE + key).mio(),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            entry.insert(H2Conn {
                sock,
                up: up.clone(),
                state: State::Connecting,
                session: Session::new(),
                input: Vec::new(),
                written: 0,
                exchanges: HashMap::new(),
                peer,
                opened: ctx.now,
                connect_time: None,
                idle_since: None,
                armed: None,
                retiring: false,
            });
            Ok(key)
        });
        match made {
            Ok(key) => {
                pool.conns.push(key);
                if let Some(m) = &pool.metrics {
                    m.fresh.add(1);
                    m.open.set(pool.conns.len() as u64);
                }
                let c = &mut self.conns[key];
                timers.arm(token(key), Some(ctx.now + up.connect_timeout), &mut c.armed);
                true
            }
            Err(e) => {
                log::warn!("proxy: {}: connect: {e}", up.url());
                if let Some(m) = &pool.metrics {
                    m.fail(UpstreamFailure::Connect);
                }
                for job in pool.queue.drain(..) {
                    Exchange::failed(job).fail(502, UpstreamFailure::Connect, out);
                }
                false
            }
        }
    }

    /// A readiness event, or a wake (a client's channel has room, its
    /// body has bytes), of connection `key`.
    pub(crate) fn on_event(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, out: &mut Out<'_>) {
        if self.conns.contains(key) {
            self.drive(ctx, timers, key, out);
        }
    }

    /// Connection `key`'s timer fired: a connection that did not open
    /// (or whose SETTINGS did not come) in `connect_timeout` fails its
    /// queue with 504; a stream silent past its timeout is reset (504 if
    /// unanswered); a connection idle past `idle_timeout` is closed.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, out: &mut Out<'_>) {
        let Some(c) = self.conns.get_mut(key) else { return };
        c.armed = None;
        let now = ctx.now;
        if !c.session.is_ready() && now >= c.opened + c.up.connect_timeout {
            log::warn!("proxy: {}: connect timed out", c.up.url());
            let up_id = c.up.id;
            self.close(ctx, timers, key, 504, UpstreamFailure::Timeout, out);
            self.fail_queue(up_id, 504, UpstreamFailure::Timeout, out);
            return;
        }
        let late: Vec<u32> = c
            .exchanges
            .iter()
            .filter(|(_, x)| x.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            log::warn!("proxy: {}: stream {id} timed out", c.up.url());
            c.session.reset(id, Code::Cancel);
            if let Some(x) = c.exchanges.remove(&id) {
                x.fail(504, UpstreamFailure::Timeout, out);
            }
        }
        if c.exchanges.is_empty() && c.idle_since.is_some_and(|t| now >= t + c.up.idle_timeout) {
            c.session.go_away();
            let _ = c.flush();
            self.close(ctx, timers, key, 502, UpstreamFailure::Closed, out);
            return;
        }
        self.drive(ctx, timers, key, out);
    }

    /// Shutdown: connections without streams close now; busy ones finish.
    pub(crate) fn close_idle(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, out: &mut Out<'_>) {
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.exchanges.is_empty())
            .map(|(k, _)| k)
            .collect();
        for k in idle {
            let c = &mut self.conns[k];
            c.session.go_away();
            let _ = c.flush();
            self.close(ctx, timers, k, 502, UpstreamFailure::Closed, out);
        }
    }

    fn drive(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, out: &mut Out<'_>) {
        if self.scratch.is_empty() {
            self.scratch = vec![0; READ_CHUNK];
        }
        let c = &mut self.conns[key];
        // The jobs to send again come back even when the same call then
        // met the connection's end: a GOAWAY (or REFUSED_STREAM) and the
        // upstream's close are often read at once, and dropping them there
        // answered their clients 500 (the responder's drop).
        let mut again = Vec::new();
        let result = c.advance(ctx, key, &mut self.scratch, out, &mut again);
        let up_id = c.up.id;
        match result {
            Ok(()) => {}
            Err((status, kind, why)) => {
                if c.exchanges.is_empty() {
                    // An idle connection the upstream closed: nothing lost.
                    log::debug!("proxy: {}: {why}", c.up.url());
                } else {
                    log::warn!("proxy: {}: {why}", c.up.url());
                }
                let never_ready = !c.session.is_ready();
                self.close(ctx, timers, key, status, kind, out);
                if never_ready {
                    // The jobs waiting for it would wait for the next
                    // one, and the next: they get its failure.
                    self.fail_queue(up_id, status, kind, out);
                }
            }
        }
        if let Some(c) = self.conns.get_mut(key) {
            if c.exchanges.is_empty() && c.session.is_ready() {
                c.idle_since.get_or_insert(ctx.now);
                if ctx.draining || c.session.is_closing() || c.retiring {
                    c.session.go_away();
                    let _ = c.flush();
                    self.close(ctx, timers, key, 502, UpstreamFailure::Closed, out);
                }
            } else {
                c.idle_since = None;
            }
        }
        if let Some(c) = self.conns.get_mut(key) {
            let deadline = c.deadline();
            timers.arm(token(key), deadline, &mut c.armed);
        }
        match self.pools.get_mut(&up_id) {
            Some(pool) => {
                for job in again.into_iter().rev() {
                    pool.queue.push_front(job);
                }
                if !pool.queue.is_empty() {
                    self.dispatch(ctx, timers, up_id, out);
                }
            }
            None => {
                // No pool to send them through (never so: pools stay):
                // a 502, not the responder's 500.
                for job in again {
                    Exchange::failed(job).fail(502, UpstreamFailure::Closed, out);
                }
            }
        }
    }

    /// The jobs queued for `up_id` get `status`, unless a connection
    /// that works is left to take them.
    fn fail_queue(&mut self, up_id: usize, status: u16, kind: UpstreamFailure, out: &mut Out<'_>) {
        let Some(pool) = self.pools.get_mut(&up_id) else { return };
        if pool.conns.iter().any(|&k| self.conns[k].session.is_ready()) {
            return;
        }
        for job in pool.queue.drain(..) {
            let x = Exchange::failed(job);
            x.fail(status, kind, out);
        }
    }

    /// Closes connection `key`: its streams not yet answered get `status`,
    /// the others' bodies break.
    fn close(
        &mut self,
        ctx: &mut Ctx<'_>,
        timers: &mut Timers,
        key: usize,
        status: u16,
        kind: UpstreamFailure,
        out: &mut Out<'_>,
    ) {
        let mut c = self.conns.remove(key);
        timers.disarm(token(key), &mut c.armed);
        let _ = ctx.registry.deregister(c.sock.source());
        let failed = !c.exchanges.is_empty();
        for (_, x) in c.exchanges.drain() {
            x.fail(status, kind, out);
        }
        if let Some(pool) = self.pools.get_mut(&c.up.id) {
            pool.conns.retain(|&k| k != key);
            if let Some(m) = &pool.metrics {
                m.open.set(pool.conns.len() as u64);
                if failed {
                    m.fail(kind);
                }
            }
        }
    }
}

impl H2Conn {
    /// The earliest of its deadlines: opening, a stream's, idleness.
    fn deadline(&self) -> Option<Instant> {
        let opening = (!self.session.is_ready()).then(|| self.opened + self.up.connect_timeout);
        let idle = self.idle_since.map(|t| t + self.up.idle_timeout);
        self.exchanges
            .values()
            .filter_map(|x| x.deadline)
            .chain(opening)
            .chain(idle)
            .min()
    }

    /// Writes what the session has for the socket: `Ok(true)` when all
    /// of it went.
    fn flush(&mut self) -> io::Result<bool> {
        let out = &mut self.session.out;
        while self.written < out.len() {
            match self.sock.write(&out[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        out.clear();
        self.written = 0;
        // Over TLS, the records rustls still holds (a socket that takes
        // none now says so by its next writable event).
        self.sock.flush()?;
        Ok(true)
    }

    /// Opens a stream for `job`.
    fn start(&mut self, ctx: &Ctx<'_>, mut job: Job, out: &mut Out<'_>) {
        let mut fields = vec![httparse::EMPTY_HEADER; 256];
        let mut req = httparse::Request::new(&mut fields);
        let head_len = match req.parse(&job.bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            _ => {
                // `build_as` wrote it: it cannot be wrong, but is no
                // reason to panic.
                log::error!("proxy: {}: the request could not be read back", self.up.url());
                let answer = job.up.error_answer(502, crate::Reason::UpstreamInvalid);
                out.answers.push((job.responder, answer, Some(UpstreamLog::default())));
                return;
            }
        };
        let method = req.method.unwrap_or("GET");
        let path = req.path.unwrap_or("/");
        let mut authority: &[u8] = b"";
        let mut grpc_timeout = None;
        let mut regular: Vec<(&[u8], &[u8])> = Vec::with_capacity(req.headers.len() + 1);
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"host") {
                authority = h.value;
                continue;
            }
            if HOP_BY_HOP.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            if name.eq_ignore_ascii_case(b"grpc-timeout") {
                grpc_timeout = parse_grpc_timeout(h.value);
            }
            regular.push((name, h.value));
        }
        // RFC 9113 §8.2.2: "trailers" is TE's only value in HTTP/2; gRPC
        // servers refuse a request without it.
        regular.push((b"te", b"trailers"));
        let body = job.bytes[head_len..].to_vec();
        let reader = job.more.as_mut().and_then(|m| m.body.take());
        // Cloned, not taken: the job stays whole for a retry.
        let request_trailers = job.more().and_then(|m| m.body_trailers.clone());
        let forward_named = job.more().and_then(|m| m.forward_trailers.clone());
        let end = body.is_empty() && reader.is_none() && request_trailers.is_none();
        let authority = String::from_utf8_lossy(authority);
        let scheme = if self.up.is_tls() { "https" } else { "http" };
        let id = self.session.open(
            method,
            scheme,
            &authority,
            path,
            regular.iter().map(|&(n, v)| (n, v)),
            end,
        );
        let read_timeout = job.up.read_timeout;
        let timeout = grpc_timeout.map_or(read_timeout, |t| t.min(GRPC_TIMEOUT_MAX).max(read_timeout));
        let figures = UpstreamLog {
            addr: Some(match self.peer {
                Some(a) => UpstreamAddr::Tcp(a),
                None => UpstreamAddr::Unix(job.up.clone()),
            }),
            connect: Some(self.connect_time.unwrap_or_default()),
            earlier: job.tried.take(),
            ..UpstreamLog::default()
        };
        let head_method = job.head_method;
        let trailers = job.trailers;
        self.exchanges.insert(
            id,
            Exchange {
                job: Some(job),
                tx: None,
                pending: VecDeque::new(),
                ended: None,
                out: body,
                out_at: 0,
                body: reader,
                local_done: end,
                streamed: false,
                waits_body: false,
                timeout,
                deadline: Some(ctx.now + timeout),
                started: ctx.now,
                figures,
                head_method,
                trailers,
                request_trailers,
                forward_named,
            },
        );
        self.idle_since = None;
    }

    /// Moves everything it can: connecting, writing, reading frames and
    /// acting on them, the request bodies, the answers' bodies. The jobs
    /// to send again on another connection go to `again` (whether or not
    /// the connection then failed); the error says why it failed.
    #[allow(clippy::type_complexity)]
    fn advance(
        &mut self,
        ctx: &Ctx<'_>,
        key: usize,
        scratch: &mut [u8],
        out: &mut Out<'_>,
        again: &mut Vec<Job>,
    ) -> Result<(), (u16, UpstreamFailure, String)> {
        if self.state == State::Connecting {
            match self.sock.connected() {
                Ok(true) => {
                    if let Sock::Tls(tls) = &self.sock {
                        // RFC 9113 §3.2: HTTP/2 over TLS only once the
                        // upstream chose "h2".
                        if tls.alpn() != Some(b"h2") {
                            return Err((
                                502,
                                UpstreamFailure::Connect,
                                "TLS: the upstream did not agree to h2 (ALPN)".into(),
                            ));
                        }
                    }
                    self.state = State::Open;
                    self.connect_time = Some(ctx.now.saturating_duration_since(self.opened));
                }
                Ok(false) => return Ok(()),
                Err(e) => return Err((502, UpstreamFailure::Connect, format!("connect: {e}"))),
            }
        }
        let mut events = Vec::new();
        loop {
            self.flush()
                .map_err(|e| (502, UpstreamFailure::Closed, format!("write: {e}")))?;
            let mut progress = false;
            let mut eof = false;
            loop {
                match self.sock.read(scratch) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        self.input.extend_from_slice(&scratch[..n]);
                        progress = true;
                        let used = self.session.recv(&self.input, &mut events).map_err(|e: ConnError| {
                            (
                                502,
                                UpstreamFailure::BadAnswer,
                                format!("bad answer: {} ({:?})", e.why, e.code),
                            )
                        });
                        match used {
                            Ok(n) => {
                                self.input.drain(..n);
                            }
                            Err(e) => {
                                // Its GOAWAY goes if it can.
                                let _ = self.flush();
                                return Err(e);
                            }
                        }
                        for ev in events.drain(..) {
                            self.on_frame_event(ctx, ev, out, again);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err((502, UpstreamFailure::Closed, format!("read: {e}"))),
                }
            }
            // The streams: answers' bodies to their channels, request
            // bodies to the upstream.
            let before = self.session.out.len();
            let ids: Vec<u32> = self.exchanges.keys().copied().collect();
            for id in ids {
                let Some(x) = self.exchanges.get_mut(&id) else { continue };
                let fate = x.step(ctx, key, id, &mut self.session, out);
                match fate {
                    Fate::Goes => {}
                    Fate::Done => {
                        self.exchanges.remove(&id);
                    }
                }
            }
            if eof {
                let _ = self.flush();
                return Err((502, UpstreamFailure::Closed, "upstream closed the connection".into()));
            }
            if self.session.out.len() > before {
                progress = true;
            }
            if !progress || self.written > 0 {
                // Nothing new, or the socket is full: readiness will say.
                self.flush()
                    .map_err(|e| (502, UpstreamFailure::Closed, format!("write: {e}")))?;
                if self.session.out.is_empty() || self.written > 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Acts on what the session read for one stream; a job the upstream
    /// never processed goes to `again`.
    fn on_frame_event(&mut self, ctx: &Ctx<'_>, ev: Event, out: &mut Out<'_>, again: &mut Vec<Job>) {
        let _ = self.on_event(ctx, ev, out, again);
    }

    fn on_event(&mut self, ctx: &Ctx<'_>, ev: Event, out: &mut Out<'_>, again: &mut Vec<Job>) -> Option<()> {
        match ev {
            Event::GoAway { last, code } => {
                log::debug!("proxy: {}: GOAWAY (last stream {last}, code {code})", self.up.url());
                let mut above: Vec<u32> = self.exchanges.keys().copied().filter(|&id| id > last).collect();
                above.sort_unstable();
                for id in above {
                    let mut x = self.exchanges.remove(&id).expect("listed");
                    match x.again() {
                        Some(job) => again.push(job),
                        None => x.fail(502, UpstreamFailure::Closed, out),
                    }
                }
                None
            }
            Event::Interim { stream, status, lines } => {
                let x = self.exchanges.get_mut(&stream)?;
                let job = x.job.as_ref()?;
                x.deadline = Some(ctx.now + x.timeout);
                let relay = match status {
                    100 => job.expect_continue,
                    103 => true,
                    _ => false,
                };
                if relay {
                    let (token, id) = job.responder.key();
                    let fields = if status == 103 { lines } else { Vec::new() };
                    out.interims.push((token, id, status, fields));
                }
                Some(())
            }
            Event::Head {
                stream,
                status,
                lines,
                content_length,
                end,
            } => {
                let x = self.exchanges.get_mut(&stream)?;
                let job = x.job.take()?;
                let took = ctx.now.saturating_duration_since(x.started);
                x.figures.status = Some(status);
                x.figures.header = Some(took);
                x.figures.started = Some(x.started);
                x.deadline = Some(ctx.now + x.timeout);
                let block = match HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines))) {
                    Ok(b) => b,
                    Err(_) => {
                        self.session.reset(stream, Code::Protocol);
                        x.job = Some(job);
                        let x = self.exchanges.remove(&stream).expect("present");
                        x.fail(502, UpstreamFailure::BadAnswer, out);
                        return None;
                    }
                };
                let body: crate::Body = if end {
                    x.figures.response = Some(took);
                    x.local_done = true;
                    x.body = None;
                    match content_length {
                        // A HEAD's answer keeps the GET's length (RFC 9110
                        // §9.3.2): an ended body of that length.
                        Some(n) if x.head_method => body::channel_sized(1, n).0,
                        _ => Vec::new().into(),
                    }
                } else {
                    let length = content_length.filter(|_| !x.head_method);
                    let (body, tx) = body::channel_held(job.up.buffer_bytes, length, ctx.pool.read_ahead.clone());
                    x.tx = Some(tx);
                    body
                };
                out.answers.push((
                    job.responder,
                    Response::prepared(status, block, body),
                    Some(x.figures.clone()),
                ));
                if end {
                    self.exchanges.remove(&stream);
                }
                None
            }
            Event::Data { stream, data, end } => {
                let x = self.exchanges.get_mut(&stream)?;
                x.deadline = Some(ctx.now + x.timeout);
                if !data.is_empty() {
                    x.pending.push_back(data);
                }
                if end {
                    x.ended = Some(None);
                }
                None
            }
            Event::Trailers { stream, lines } => {
                let x = self.exchanges.get_mut(&stream)?;
                let t = x.trailers.then(|| Trailers::relayed(&lines, &[]));
                x.ended = Some(t);
                None
            }
            Event::Reset { stream, code } => {
                let mut x = self.exchanges.remove(&stream)?;
                log::warn!("proxy: {}: stream reset by the upstream (code {code})", self.up.url());
                if code == Code::RefusedStream as u32 {
                    // RFC 9113 §8.7: not processed; safe to send again,
                    // on another connection (`retiring`).
                    self.retiring = true;
                    match x.again() {
                        Some(job) => again.push(job),
                        None => x.fail(502, UpstreamFailure::Closed, out),
                    }
                } else {
                    x.fail(502, UpstreamFailure::Closed, out);
                }
                None
            }
            Event::Malformed { stream, why } => {
                let x = self.exchanges.remove(&stream)?;
                log::warn!("proxy: {}: bad answer: {why}", self.up.url());
                x.fail(502, UpstreamFailure::BadAnswer, out);
                None
            }
        }
    }
}

impl Exchange {
    /// The job back, if the request may be sent again (none of it can
    /// have had an effect and it was not sent again already).
    fn again(&mut self) -> Option<Job> {
        let ok = !self.streamed && self.job.as_ref().is_some_and(|j| !j.retried);
        if !ok {
            return None;
        }
        let mut job = self.job.take()?;
        job.retried = true;
        job.set_body(self.body.take());
        Some(job)
    }

    /// The exchange failed: `status` for a client not answered yet, a
    /// broken body for one that was.
    fn fail(mut self, status: u16, kind: UpstreamFailure, out: &mut Out<'_>) {
        if let Some(tx) = self.tx.take() {
            tx.abort();
        }
        if let Some(job) = self.job.take() {
            let reason = match kind {
                UpstreamFailure::Connect => crate::Reason::UpstreamConnect,
                UpstreamFailure::Timeout => crate::Reason::UpstreamTimeout,
                UpstreamFailure::BadAnswer => crate::Reason::UpstreamInvalid,
                UpstreamFailure::Closed => crate::Reason::UpstreamClosed,
                UpstreamFailure::QueueFull => crate::Reason::UpstreamBusy,
            };
            let answer = match status {
                502..=504 => job.up.error_answer(status, reason),
                _ => Response::error(status),
            };
            let mut figures = self.figures;
            figures.status = Some(status);
            out.answers.push((job.responder, answer, Some(figures)));
        }
    }

    /// Passes the answer's bytes on and sends the request's as the
    /// channels and windows allow.
    fn step(&mut self, ctx: &Ctx<'_>, key: usize, id: u32, session: &mut Session, out: &mut Out<'_>) -> Fate {
        // The answer's body, to the client's channel.
        if let Some(tx) = &self.tx {
            while let Some(chunk) = self.pending.pop_front() {
                // The worker's queued answers and read-ahead are past
                // their budget: a channel that still holds bytes takes no
                // more until its client has taken half (as `pool.rs`'s
                // answers), and its stream's window stays shut meanwhile,
                // so the upstream stops after it.
                let over = ctx.pool.output_held() > ctx.limits.output_budget_bytes;
                if over && tx.wait_while_holding(ctx.mailbox, token(key)) {
                    self.pending.push_front(chunk);
                    self.deadline = None;
                    break;
                }
                let n = chunk.len();
                match tx.try_send_or_wake(chunk, ctx.mailbox, token(key)) {
                    Ok(()) => session.consumed(id, n),
                    Err(TrySendError::Full(chunk)) => {
                        // The client is slow: its stream waits (no
                        // deadline: the client's connection has its own).
                        self.pending.push_front(chunk);
                        self.deadline = None;
                        break;
                    }
                    Err(TrySendError::Closed(_)) => {
                        // The client is gone.
                        session.reset(id, Code::Cancel);
                        self.tx = None;
                        return Fate::Done;
                    }
                }
            }
            if self.pending.is_empty() {
                if let Some(trailers) = self.ended.take() {
                    let tx = self.tx.take().expect("checked");
                    match trailers {
                        Some(t) if !t.is_empty() => tx.end_with_trailers(t),
                        _ => drop(tx),
                    }
                    return Fate::Done;
                }
            }
        }
        // The request's body, to the upstream.
        while !self.local_done && session.out.len() < OUT_HIGH {
            if !session.is_open(id) {
                // The upstream answered and ended the stream early.
                self.local_done = true;
                self.body = None;
                break;
            }
            if self.out_at < self.out.len() {
                let w = session.window(id);
                if w == 0 {
                    break;
                }
                let n = w.min(self.out.len() - self.out_at);
                let last = self.out_at + n == self.out.len() && self.body.is_none() && self.request_trailers.is_none();
                session.send_data(id, &self.out[self.out_at..self.out_at + n], last);
                self.out_at += n;
                if last {
                    self.local_done = true;
                }
                continue;
            }
            let Some(reader) = self.body.as_mut() else {
                self.end_request(id, session);
                break;
            };
            match reader.try_take(ctx.mailbox, token(key)) {
                Take::Chunk(chunk) => {
                    self.streamed = true;
                    self.waits_body = false;
                    self.out = chunk;
                    self.out_at = 0;
                }
                Take::Pending => {
                    self.waits_body = true;
                    break;
                }
                Take::End => {
                    // The client's trailer section, if it sent one and
                    // something of it may go on.
                    self.request_trailers = self
                        .forward_named
                        .as_ref()
                        .and_then(|named| reader.trailers()?.forwarded(named));
                    self.body = None;
                    self.waits_body = false;
                    self.end_request(id, session);
                }
                Take::Failed => {
                    // The client cut its body short: the upstream must not
                    // take the request for whole.
                    self.body = None;
                    session.reset(id, Code::Cancel);
                    let status = if self.job.is_some() { 400 } else { 502 };
                    self.fail_in_place(status, out);
                    return Fate::Done;
                }
            }
        }
        if self.job.is_some() && self.waits_body && !self.local_done {
            // Waiting for the client's body: its own timeouts bound that.
            self.deadline = None;
        } else if self.deadline.is_none() && self.pending.is_empty() {
            self.deadline = Some(ctx.now + self.timeout);
        }
        let _ = out;
        Fate::Goes
    }

    /// Ends the request once its body is sent: with the client's trailer
    /// fields, as a HEADERS frame carrying END_STREAM ("a trailer section
    /// ... after the content", RFC 9113 §8.1), or, without any, as
    /// before: an empty DATA with END_STREAM.
    fn end_request(&mut self, id: u32, session: &mut Session) {
        match self.request_trailers.take() {
            Some(t) => session.send_trailers(id, t.fields().map(|(name, value)| (name.as_bytes(), value))),
            None => session.send_data(id, &[], true),
        }
        self.local_done = true;
    }

    fn fail_in_place(&mut self, status: u16, out: &mut Out<'_>) {
        let mut x = Exchange::failed_with(self.job.take(), self.started);
        x.tx = self.tx.take();
        x.figures = std::mem::take(&mut self.figures);
        x.fail(status, UpstreamFailure::Closed, out);
    }

    /// An exchange that never began, to answer `job` with `fail`.
    fn failed(job: Job) -> Exchange {
        Exchange::failed_with(Some(job), Instant::now())
    }

    fn failed_with(job: Option<Job>, started: Instant) -> Exchange {
        Exchange {
            job,
            tx: None,
            pending: VecDeque::new(),
            ended: None,
            out: Vec::new(),
            out_at: 0,
            body: None,
            local_done: true,
            streamed: true,
            waits_body: false,
            timeout: Duration::ZERO,
            deadline: None,
            started,
            figures: UpstreamLog::default(),
            head_method: false,
            trailers: false,
            request_trailers: None,
            forward_named: None,
        }
    }
}

/// Request fields never sent over HTTP/2 (RFC 9113 §8.2.2), and those
/// the pseudo-fields carry (Host is `:authority`); `te` is sent as
/// `trailers` whatever the client said.
const HOP_BY_HOP: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
    b"te",
    b"http2-settings",
];

/// gRPC's `grpc-timeout` (PROTOCOL-HTTP2.md: 1 to 8 digits and a unit,
/// H M S m u n); `None` if it is not one.
fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_their_units() {
        assert_eq!(parse_grpc_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in [&b""[..], b"S", b"123456789S", b"10x", b"-1S", b"1 S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
