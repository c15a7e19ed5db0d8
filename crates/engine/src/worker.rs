//! A worker: one thread, one `mio::Poll`, its own listeners (SO_REUSEPORT),
//! connections, buffer pool, Date cache and log buffer. Workers share
//! nothing on the request path: no lock, no atomic.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::access_log::LogWriter;
use crate::conn::{BufPool, Conn, Ctx, Next, Transport};
use crate::date::DateCache;
use crate::handler::Handler;
use crate::limits::Limits;
use crate::metrics::WorkerMetrics;
use crate::responder::{Mailbox, Post};
use crate::sys::stream::{ListenSocket, Stream};
use crate::tls::session::TlsSession;
use crate::tls::TlsListener;

/// Tokens at or above this are listeners; below, connections (slab keys).
const LISTENER_BASE: usize = usize::MAX / 2;
/// Tokens from here are the QUIC endpoints' UDP sockets (HTTP/3).
const UDP_BASE: usize = LISTENER_BASE + (1 << 24);
pub(crate) const WAKER: Token = Token(usize::MAX - 1);
/// The precise timer for QUIC's deadlines (only with HTTP/3).
const TIMER: Token = Token(usize::MAX - 2);

/// Sent to a client refused at the connection cap, best effort.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// One listening socket and what its connections speak.
pub(crate) struct Listener {
    pub(crate) socket: ListenSocket,
    pub(crate) kind: ListenerKind,
}

pub(crate) enum ListenerKind {
    Plain,
    Tls(Arc<TlsListener>),
    /// Plain HTTP answered by `Worker::redirect` (to HTTPS).
    Redirect,
}

pub(crate) struct Worker {
    pub(crate) poll: Poll,
    pub(crate) listeners: Vec<Listener>,
    /// HTTP/3: one QUIC endpoint per TLS address.
    pub(crate) quic: Vec<crate::quic::Endpoint>,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) redirect: Option<Arc<dyn Handler>>,
    pub(crate) limits: Limits,
    /// Speak HTTP/2 besides HTTP/1.1.
    pub(crate) http2: bool,
    pub(crate) log: Option<LogWriter>,
    pub(crate) mailbox: Arc<Mailbox>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Read when shutdown begins: keep idle connections (a hand-over).
    pub(crate) keep_idle: Arc<AtomicBool>,
    pub(crate) metrics: Option<Arc<WorkerMetrics>>,
}

impl Worker {
    /// Runs the event loop until shutdown has been asked for and the
    /// connections in flight have finished (or the shutdown timeout passed).
    pub(crate) fn run(self) -> io::Result<()> {
        let Worker {
            mut poll,
            mut listeners,
            mut quic,
            handler,
            redirect,
            mut limits,
            http2,
            mut log,
            mailbox,
            shutdown,
            keep_idle,
            metrics,
        } = self;
        // Timeouts are only noticed at sweeps; a sweep at least every minute
        // keeps them meaningful and the deadline arithmetic in range.
        limits.sweep_interval = limits
            .sweep_interval
            .clamp(Duration::from_millis(1), Duration::from_secs(60));
        for (i, listener) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(&mut listener.socket, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        for (i, endpoint) in quic.iter_mut().enumerate() {
            endpoint.register(poll.registry(), UDP_BASE + i, &mailbox)?;
        }
        // QUIC's timers (acknowledgments, loss detection, pacing) need
        // microseconds, not the poll timeout's milliseconds.
        let timer = if quic.is_empty() {
            None
        } else {
            let mut t = crate::sys::timer::Timer::new()?;
            poll.registry().register(&mut t, TIMER, Interest::READABLE)?;
            Some(t)
        };
        let mut timer_armed: Option<Instant> = None;
        let h2 = http2.then(|| crate::h2::Config {
            streams_max: limits.h2_streams_max,
            head_bytes_max: limits.head_bytes_max,
            n_headers_max: limits.n_headers_max.min(crate::limits::HEADERS_ARRAY_MAX),
            body_bytes_max: limits.body_bytes_max,
            discard_bytes_max: limits.discard_bytes_max,
        });
        let mut conns: Slab<Conn> = Slab::with_capacity(1024);
        let mut per_address = PerAddress::default();
        let mut events = Events::with_capacity(1024);
        let mut pool = BufPool::default();
        let mut date = DateCache::new();
        let next_defer_id = Cell::new(0);
        let mut expired: Vec<usize> = Vec::new();
        let mut next_sweep = Instant::now() + limits.sweep_interval;
        let mut drain_deadline: Option<Instant> = None;
        // Draining with idle connections kept (a hand-over), until a plain
        // shutdown asks for them to be closed too.
        let mut idle_kept = false;
        let mut accept_paused = false;
        // Connections that used up their turn with work left, and the list
        // being worked through (swapped, so a connection can requeue).
        let mut ready: Vec<usize> = Vec::new();
        let mut ready_now: Vec<usize> = Vec::new();
        // QUIC endpoints that stopped reading with datagrams perhaps left.
        let mut quic_ready: Vec<usize> = Vec::new();

        loop {
            // With connections waiting for another turn, only look for new
            // events; do not sleep.
            let mut timeout = if ready.is_empty() && quic_ready.is_empty() {
                limits.sweep_interval
            } else {
                Duration::ZERO
            };
            if let Some(at) = quic.iter().filter_map(|e| e.next_timeout()).min() {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    timeout = Duration::ZERO;
                } else if timer_armed != Some(at) {
                    if let Some(t) = &timer {
                        t.set(left)?;
                        timer_armed = Some(at);
                    }
                }
            }
            match poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            date.tick(now);
            crate::date::set_now(now);
            let mut ctx = Ctx {
                handler: &*handler,
                redirect: redirect.as_deref(),
                limits: &limits,
                date: &date,
                pool: &mut pool,
                log: log.as_mut(),
                registry: poll.registry(),
                mailbox: &mailbox,
                next_defer_id: &next_defer_id,
                now,
                draining: drain_deadline.is_some(),
                metrics: metrics.as_deref(),
                h2,
            };
            // Those left with datagrams last time get their turn after this
            // time's events (one turn per loop, like `ready` below).
            let mut quic_again = std::mem::take(&mut quic_ready);
            for event in events.iter() {
                match event.token() {
                    TIMER => {
                        // Fired: the endpoints' timers run below.
                        if let Some(t) = &timer {
                            t.clear();
                        }
                        timer_armed = None;
                    }
                    WAKER => {
                        for post in mailbox.take() {
                            let token = match &post {
                                Post::Answer(answer) => answer.token,
                                Post::Wake { token } => *token,
                            };
                            if token >= crate::quic::CONN_TOKEN_BASE {
                                for endpoint in quic.iter_mut() {
                                    if let Some(ch) = endpoint.conn_of_token(token) {
                                        match post {
                                            Post::Answer(a) => endpoint.on_answer(&mut ctx, ch, a.id, a.response),
                                            Post::Wake { .. } => endpoint.on_wake(&mut ctx, ch),
                                        }
                                        break;
                                    }
                                }
                                continue;
                            }
                            // A token may have been closed and reused since;
                            // an answer carries its id, and a spurious wake
                            // is harmless.
                            if let Some(conn) = conns.get_mut(token) {
                                let next = match post {
                                    Post::Answer(a) => conn.on_answer(&mut ctx, a.id, a.response),
                                    Post::Wake { .. } => conn.on_wake(&mut ctx),
                                };
                                settle(
                                    &mut conns,
                                    &mut per_address,
                                    token,
                                    next,
                                    &mut ready,
                                    ctx.pool,
                                    ctx.metrics,
                                );
                            }
                        }
                        // QUIC datagrams other endpoints read for ours (a
                        // reload's older generation, or a shared socket).
                        for (i, endpoint) in quic.iter_mut().enumerate() {
                            if endpoint.on_inbox(&mut ctx) && !quic_ready.contains(&i) {
                                quic_ready.push(i);
                            }
                        }
                    }
                    Token(t) if t >= UDP_BASE => {
                        if let Some(endpoint) = quic.get_mut(t - UDP_BASE) {
                            if event.is_writable() {
                                endpoint.on_writable(&mut ctx);
                            }
                            if event.is_readable()
                                && endpoint.on_readable(&mut ctx)
                                && !quic_ready.contains(&(t - UDP_BASE))
                            {
                                quic_ready.push(t - UDP_BASE);
                            }
                        }
                    }
                    Token(t) if t >= LISTENER_BASE => {
                        if let Some(listener) = listeners.get(t - LISTENER_BASE) {
                            accept_paused |= !accept(listener, &mut conns, &mut per_address, &ctx);
                        }
                    }
                    Token(t) => {
                        if let Some(conn) = conns.get_mut(t) {
                            let next = conn.on_ready(&mut ctx, event.is_read_closed());
                            settle(&mut conns, &mut per_address, t, next, &mut ready, ctx.pool, ctx.metrics);
                        }
                    }
                }
            }
            // Another turn for endpoints with datagrams left (edge-triggered:
            // no new event comes for them until their socket is drained).
            for i in quic_again.drain(..) {
                if let Some(endpoint) = quic.get_mut(i) {
                    if endpoint.on_readable(&mut ctx) {
                        quic_ready.push(i);
                    }
                }
            }
            for endpoint in quic.iter_mut() {
                endpoint.on_timers(&mut ctx);
            }
            // Another turn for those that had more to do. A token may have
            // been closed and reused since; a spurious turn is harmless.
            std::mem::swap(&mut ready, &mut ready_now);
            for t in ready_now.drain(..) {
                if let Some(conn) = conns.get_mut(t) {
                    conn.queued = false;
                    let next = conn.on_turn(&mut ctx);
                    settle(&mut conns, &mut per_address, t, next, &mut ready, ctx.pool, ctx.metrics);
                }
            }

            if now >= next_sweep {
                next_sweep = now + limits.sweep_interval;
                expired.extend(
                    conns
                        .iter()
                        .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
                        .map(|(t, _)| t),
                );
                for t in expired.drain(..) {
                    let next = conns[t].on_timeout(&mut ctx);
                    settle(&mut conns, &mut per_address, t, next, &mut ready, ctx.pool, ctx.metrics);
                }
                if accept_paused {
                    accept_paused = false;
                    for listener in &listeners {
                        accept_paused |= !accept(listener, &mut conns, &mut per_address, &ctx);
                    }
                }
                if let Some(log) = ctx.log.as_deref_mut() {
                    log.flush();
                }
            }

            if drain_deadline.is_none() && shutdown.load(Ordering::Acquire) {
                // Stop accepting; close what is idle; let the rest finish.
                // Dropping a listener closes only this worker's descriptor:
                // a server taking over (a reload) accepts from its own.
                for mut listener in listeners.drain(..) {
                    let _ = poll.registry().deregister(&mut listener.socket);
                }
                // A timeout too large to add means: no deadline (far future).
                drain_deadline = Some(
                    now.checked_add(limits.shutdown_timeout)
                        .unwrap_or(now + Duration::from_secs(1 << 32)),
                );
                ctx.draining = true;
                idle_kept = keep_idle.load(Ordering::Acquire);
                let tokens: Vec<usize> = conns.iter().map(|(t, _)| t).collect();
                for t in tokens {
                    let next = conns[t].on_drain(&mut ctx, idle_kept);
                    settle(&mut conns, &mut per_address, t, next, &mut ready, ctx.pool, ctx.metrics);
                }
                // HTTP/3: GOAWAY, each connection closing once its requests
                // are answered (a hand-over alike: a QUIC client reconnects
                // on its own).
                for endpoint in quic.iter_mut() {
                    endpoint.drain(&mut ctx);
                }
            } else if idle_kept && !keep_idle.load(Ordering::Acquire) {
                idle_kept = false;
                let tokens: Vec<usize> = conns.iter().map(|(t, _)| t).collect();
                for t in tokens {
                    let next = conns[t].on_drain(&mut ctx, false);
                    settle(&mut conns, &mut per_address, t, next, &mut ready, ctx.pool, ctx.metrics);
                }
            }
            if let Some(deadline) = drain_deadline {
                let quic_done = quic.iter().all(|e| e.n_conns() == 0);
                if conns.is_empty() && quic_done {
                    break;
                }
                if now >= deadline {
                    // Cut what is left, counted closed (and the deferred
                    // answers it waits for, abandoned) like any other close:
                    // the gauges of open connections and requests in flight
                    // come back down.
                    for endpoint in quic.iter_mut() {
                        endpoint.close_all(&mut ctx);
                    }
                    let tokens: Vec<usize> = conns.iter().map(|(t, _)| t).collect();
                    for t in tokens {
                        close(&mut conns, &mut per_address, t, ctx.pool, ctx.metrics);
                    }
                    break;
                }
            }
        }
        if let Some(log) = log.as_mut() {
            log.flush();
        }
        Ok(())
    }
}

/// Accepts every pending connection. Returns false if accepting must be
/// retried later (out of file descriptors).
fn accept(listener: &Listener, conns: &mut Slab<Conn>, per_address: &mut PerAddress, ctx: &Ctx<'_>) -> bool {
    loop {
        let (mut stream, peer) = match listener.socket.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => continue,
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS: the connection stays queued;
                // retry at the next sweep rather than spin.
                crate::log::warn(format_args!("accept failed: {e}"));
                return false;
            }
        };
        if conns.len() >= ctx.limits.n_conns_max {
            // A TLS client could not read a plaintext 503: just close.
            if !matches!(listener.kind, ListenerKind::Tls(_)) {
                refuse(&mut stream);
            }
            continue;
        }
        if !per_address.open(peer, ctx.limits.conns_per_ip_max) {
            // nginx's `limit_conn` answers 503; a close costs less and
            // tells an attacker as much.
            if let Some(m) = ctx.metrics {
                m.conns_refused_per_address.add(1);
            }
            continue;
        }
        let transport = match &listener.kind {
            ListenerKind::Plain | ListenerKind::Redirect => Transport::Plain,
            ListenerKind::Tls(tls) => match TlsSession::new(tls) {
                Some(session) => Transport::Tls(Box::new(session)),
                None => continue,
            },
        };
        let redirect = matches!(listener.kind, ListenerKind::Redirect);
        let _ = stream.set_nodelay(true);
        let entry = conns.vacant_entry();
        let token = entry.key();
        if ctx
            .registry
            .register(&mut stream, Token(token), Interest::READABLE)
            .is_err()
        {
            per_address.close(peer);
            continue;
        }
        if let Some(m) = ctx.metrics {
            m.conns_accepted.add(1);
        }
        entry.insert(Conn::new(
            stream,
            transport,
            redirect,
            peer,
            token,
            ctx.now.checked_add(ctx.limits.head_timeout),
        ));
    }
}

fn refuse(stream: &mut Stream) {
    let _ = stream.write(REFUSAL);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Acts on what a connection asked for after an event.
fn settle(
    conns: &mut Slab<Conn>,
    per_address: &mut PerAddress,
    token: usize,
    next: Next,
    ready: &mut Vec<usize>,
    pool: &mut BufPool,
    metrics: Option<&WorkerMetrics>,
) {
    match next {
        Next::Keep => {}
        Next::Again => {
            // At most once in the list, however many events arrive meanwhile.
            if let Some(conn) = conns.get_mut(token) {
                if !conn.queued {
                    conn.queued = true;
                    ready.push(token);
                }
            }
        }
        Next::Close => close(conns, per_address, token, pool, metrics),
    }
}

fn close(
    conns: &mut Slab<Conn>,
    per_address: &mut PerAddress,
    token: usize,
    pool: &mut BufPool,
    metrics: Option<&WorkerMetrics>,
) {
    if let Some(mut conn) = conns.try_remove(token) {
        per_address.close(conn.peer());
        if let Some(m) = metrics {
            m.conns_closed.add(1);
            // Abandoned: their answers will be dropped.
            m.deferred_ended.add(conn.n_deferred() as u64);
        }
        conn.release(pool);
        // Dropping the connection closes the socket, which also removes it
        // from the epoll set: no deregister call needed.
    }
}

/// Connections open per client address, for `Limits::conns_per_ip_max`
/// (nginx's `limit_conn`): an IPv6 client counts per /64, the block one
/// subscriber is usually given, so that an attacker cannot dodge the cap
/// by rotating addresses within it. Unix-domain clients have no address
/// and are not counted.
#[derive(Default)]
struct PerAddress(HashMap<u128, u32>);

impl PerAddress {
    /// Counts a new connection from `peer`; false (not counted) if its
    /// address already has `max` open. `max` 0 is no cap.
    fn open(&mut self, peer: SocketAddr, max: usize) -> bool {
        let Some(key) = address_key(peer) else { return true };
        let n = self.0.entry(key).or_insert(0);
        if max != 0 && *n as usize >= max {
            if *n == 0 {
                self.0.remove(&key);
            }
            return false;
        }
        *n += 1;
        true
    }

    fn close(&mut self, peer: SocketAddr) {
        let Some(key) = address_key(peer) else { return };
        if let Some(n) = self.0.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(&key);
            }
        }
    }
}

/// The key a client's connections are counted under: its IPv4 address
/// (also when mapped into IPv6), or its IPv6 address's /64.
fn address_key(peer: SocketAddr) -> Option<u128> {
    if crate::sys::stream::is_unix(peer) {
        return None;
    }
    Some(match peer.ip() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => u128::from(v6) & !u128::from(u64::MAX),
        },
    })
}
