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

use mio::{Events, Interest, Poll};
use slab::Slab;

use crate::access_log::LogWriter;
use crate::client_addr::{Trust, TrustedProxies};
use crate::conn::{BufPool, Conn, Ctx, Next, Transport};
use crate::date::DateCache;
use crate::handler::Handler;
use crate::limits::Limits;
use crate::metrics::WorkerMetrics;
use crate::responder::{Mailbox, Post};
use crate::sites::Sites;
use crate::sources::{Source, Timers};
use crate::sys::stream::{ListenSocket, Stream};
use crate::tls::session::TlsSession;
use crate::tls::TlsListener;

/// Sent to a client refused at the connection cap, best effort.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// One listening socket and what its connections speak.
pub(crate) struct Listener {
    pub(crate) socket: ListenSocket,
    pub(crate) kind: ListenerKind,
    /// Requires a PROXY header on every connection (`conn/proxy.rs`),
    /// accepted only from these sources.
    pub(crate) proxy: Option<Arc<TrustedProxies>>,
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
    pub(crate) sites: Arc<Sites>,
    pub(crate) redirect: Option<Arc<dyn Handler>>,
    pub(crate) limits: Limits,
    /// Speak HTTP/2 besides HTTP/1.1.
    pub(crate) http2: bool,
    /// HTTP/2 clients may open WebSockets (RFC 8441's extended CONNECT).
    pub(crate) websockets: bool,
    /// Every answer carries its request's `X-Request-ID`.
    pub(crate) request_id_header: bool,
    pub(crate) log: Option<LogWriter>,
    /// The sites' own access logs, by site index (`None`: the server's).
    pub(crate) site_logs: Vec<Option<LogWriter>>,
    pub(crate) mailbox: Arc<Mailbox>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Read when shutdown begins: keep idle connections (a hand-over).
    pub(crate) keep_idle: Arc<AtomicBool>,
    pub(crate) metrics: Option<Arc<WorkerMetrics>>,
    /// Whom the server trusts to say who the client is, if anyone.
    pub(crate) trust: Option<Arc<Trust>>,
    /// The server's workers, for WebSocket publishing.
    pub(crate) hub: Arc<crate::ws::hub::Hub>,
    /// Stamped every turn, for the liveness check (`health.rs`).
    pub(crate) heartbeat: Arc<crate::health::Heartbeat>,
}

impl Worker {
    /// Runs the event loop until shutdown has been asked for and the
    /// connections in flight have finished (or the shutdown timeout passed).
    pub(crate) fn run(self) -> io::Result<()> {
        let Worker {
            mut poll,
            listeners,
            quic,
            sites,
            redirect,
            mut limits,
            http2,
            websockets,
            request_id_header,
            mut log,
            mut site_logs,
            mailbox,
            shutdown,
            keep_idle,
            metrics,
            trust,
            hub,
            heartbeat,
        } = self;
        // The proxy's responders, made and answered on this thread, reach
        // the mailbox through it only when one is dropped unsent.
        crate::responder::set_here(&mailbox);
        let mut ws = crate::ws::hub::Local::new(hub, mailbox.clone());
        // Housekeeping (the log's flush, accepting again after EMFILE, the
        // shutdown deadline) runs at least every minute.
        limits.sweep_interval = limits
            .sweep_interval
            .clamp(Duration::from_millis(1), Duration::from_secs(60));
        let mut hosted = Hosted::new(listeners, quic);
        let timer = hosted.register(&poll, &mailbox)?;
        let h2 = http2.then(|| crate::h2::Config {
            streams_max: limits.h2_streams_max,
            head_bytes_max: limits.head_bytes_max,
            n_headers_max: limits.n_headers_max.min(crate::limits::HEADERS_ARRAY_MAX),
            body_bytes_max: limits.body_bytes_max,
            discard_bytes_max: limits.discard_bytes_max,
            connect_protocol: websockets,
        });
        let mut events = Events::with_capacity(1024);
        let mut pool = BufPool::default();
        let mut date = DateCache::new();
        let next_defer_id = Cell::new(0);
        let outbox = crate::proxy::Outbox::default();
        let mut next_housekeeping = Instant::now() + limits.sweep_interval;
        let mut drain_deadline: Option<Instant> = None;
        // Draining with idle connections kept (a hand-over), until a plain
        // shutdown asks for them to be closed too.
        let mut idle_kept = false;

        loop {
            let timeout = hosted.poll_timeout(timer.as_ref(), next_housekeeping)?;
            // Idle is alive: the stamp says "waiting" while epoll waits.
            heartbeat.wait();
            match poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            heartbeat.beat(now);
            date.tick(now);
            crate::date::set_now(now);
            // Shutdown first: a request read in this turn, after shutdown
            // began (a reload logged as done), is answered as draining,
            // with `Connection: close`, whatever order the wake-up and the
            // request arrived in.
            let drain_begins = drain_deadline.is_none() && shutdown.load(Ordering::Acquire);
            if drain_begins {
                // A timeout too large to add means: no deadline (far future).
                drain_deadline = Some(
                    now.checked_add(limits.shutdown_timeout)
                        .unwrap_or(now + Duration::from_secs(1 << 32)),
                );
                idle_kept = keep_idle.load(Ordering::Acquire);
            }
            let idle_until = now.checked_add(limits.idle_timeout);
            let draining = drain_deadline.is_some();
            let h1_env = crate::h1::Env {
                limits: &limits,
                date: &date.http()[..],
                now,
                idle_until,
                draining,
                h2_allowed: h2.is_some(),
            };
            let mut ctx = Ctx {
                sites: &sites,
                redirect: redirect.as_deref(),
                limits: &limits,
                date: &date,
                pool: &mut pool,
                log: log.as_mut(),
                site_logs: &mut site_logs,
                registry: poll.registry(),
                mailbox: &mailbox,
                next_defer_id: &next_defer_id,
                now,
                idle_until,
                draining,
                h1: &h1_env,
                metrics: metrics.as_deref(),
                h2,
                websockets,
                trust: trust.as_deref(),
                ws: &mut ws,
                outbox: &outbox,
                upstream_log: None,
                batch_now: None,
                request_id_header,
            };
            if drain_begins {
                hosted.begin_drain(&mut ctx, idle_kept);
            } else if idle_kept && !keep_idle.load(Ordering::Acquire) {
                idle_kept = false;
                hosted.drain_conns(&mut ctx, false);
            }
            hosted.on_events(&mut ctx, &events, timer.as_ref(), &mailbox);
            hosted.give_turns(&mut ctx);
            hosted.run_timers(&mut ctx);
            // Requests the handlers left for upstreams this turn, written
            // now, and the answers upstreams gave, handed over now: before
            // the loop sleeps.
            hosted.run_upstreams(&mut ctx);
            if now >= next_housekeeping {
                next_housekeeping = now + limits.sweep_interval;
                hosted.accept_again(&ctx);
                if let Some(log) = ctx.log.as_deref_mut() {
                    log.flush();
                }
                for log in ctx.site_logs.iter_mut().flatten() {
                    log.flush();
                }
            }

            if let Some(deadline) = drain_deadline {
                if hosted.is_empty() {
                    break;
                }
                if now >= deadline {
                    hosted.cut(&mut ctx);
                    break;
                }
            }
        }
        if let Some(log) = log.as_mut() {
            log.flush();
        }
        for log in site_logs.iter_mut().flatten() {
            log.flush();
        }
        // Done: `/livez` must not count this loop as stuck while the
        // other workers drain.
        heartbeat.exit();
        Ok(())
    }
}

/// The event sources a worker hosts (`sources.rs` names them): its
/// listeners, QUIC endpoints and connections, the one timer set their
/// deadlines go into, and the connections waiting for another turn. The
/// loop lends each call the worker's context (`Ctx`).
struct Hosted {
    listeners: Vec<Listener>,
    /// HTTP/3: one QUIC endpoint per TLS address.
    quic: Vec<crate::quic::Endpoint>,
    conns: Slab<Conn>,
    per_address: PerAddress,
    /// The connections' deadlines (QUIC's are the endpoints', armed on
    /// the timerfd: they need microseconds).
    timers: Timers,
    /// Connections that used up their turn with work left, and the list
    /// being worked through (swapped, so a connection can requeue).
    ready: Vec<usize>,
    ready_now: Vec<usize>,
    /// QUIC endpoints that stopped reading with datagrams perhaps left.
    quic_ready: Vec<usize>,
    /// Accepting failed (out of descriptors): retried at housekeeping.
    accept_paused: bool,
    /// When the timerfd is set to fire, if it is.
    timer_armed: Option<Instant>,
    /// The subscribers of a published message (kept for its capacity).
    subscribers: Vec<crate::ws::hub::Member>,
    /// The reverse proxy's connections to upstreams.
    upstreams: crate::proxy::Upstreams,
}

impl Hosted {
    fn new(listeners: Vec<Listener>, quic: Vec<crate::quic::Endpoint>) -> Self {
        Hosted {
            listeners,
            quic,
            conns: Slab::with_capacity(1024),
            per_address: PerAddress::default(),
            timers: Timers::default(),
            ready: Vec::new(),
            ready_now: Vec::new(),
            quic_ready: Vec::new(),
            accept_paused: false,
            timer_armed: None,
            subscribers: Vec::new(),
            upstreams: crate::proxy::Upstreams::default(),
        }
    }

    /// Registers the listeners and UDP sockets in `poll`, and QUIC's
    /// precise timer if there is an endpoint.
    fn register(&mut self, poll: &Poll, mailbox: &Arc<Mailbox>) -> io::Result<Option<crate::sys::timer::Timer>> {
        for (i, listener) in self.listeners.iter_mut().enumerate() {
            poll.registry()
                .register(&mut listener.socket, Source::Listener(i).mio(), Interest::READABLE)?;
        }
        for (i, endpoint) in self.quic.iter_mut().enumerate() {
            endpoint.register(poll.registry(), Source::Udp(i).token(), mailbox)?;
        }
        // QUIC's timers (acknowledgments, loss detection, pacing) need
        // microseconds, not the poll timeout's milliseconds.
        if self.quic.is_empty() {
            return Ok(None);
        }
        // Elsewhere than Linux, no timerfd: the poll timeout says when
        // (kqueue takes a timespec, as precise).
        #[cfg(not(target_os = "linux"))]
        return Ok(None);
        #[cfg(target_os = "linux")]
        {
            let mut t = crate::sys::timer::Timer::new()?;
            poll.registry()
                .register(&mut t, Source::Timer.mio(), Interest::READABLE)?;
            Ok(Some(t))
        }
    }

    /// How long the loop may sleep: not at all with turns owed; else until
    /// the earliest connection deadline or housekeeping. QUIC's deadline
    /// is armed on the timerfd where there is one (Linux), else it bounds
    /// the timeout.
    fn poll_timeout(
        &mut self,
        timer: Option<&crate::sys::timer::Timer>,
        housekeeping: Instant,
    ) -> io::Result<Duration> {
        if !self.ready.is_empty() || !self.quic_ready.is_empty() {
            return Ok(Duration::ZERO);
        }
        let now = Instant::now();
        let next = self.timers.next().map_or(housekeeping, |t| t.min(housekeeping));
        let mut timeout = next.saturating_duration_since(now);
        if let Some(at) = self.quic.iter().filter_map(|e| e.next_timeout()).min() {
            let left = at.saturating_duration_since(now);
            if left.is_zero() {
                timeout = Duration::ZERO;
            } else if let Some(t) = timer {
                if self.timer_armed != Some(at) {
                    t.set(left)?;
                    self.timer_armed = Some(at);
                }
            } else {
                timeout = timeout.min(left);
            }
        }
        Ok(timeout)
    }

    /// Dispatches one poll's events to their sources, then gives QUIC
    /// endpoints with datagrams left their next turn and runs QUIC's
    /// timers.
    fn on_events(
        &mut self,
        ctx: &mut Ctx<'_>,
        events: &Events,
        timer: Option<&crate::sys::timer::Timer>,
        mailbox: &Mailbox,
    ) {
        // Those left with datagrams last time get their turn after this
        // time's events (one turn per loop, like `ready`).
        let mut quic_again = std::mem::take(&mut self.quic_ready);
        for event in events.iter() {
            match Source::of(event.token().0) {
                Source::Timer => {
                    // Fired: the endpoints' timers run below.
                    if let Some(t) = timer {
                        t.clear();
                    }
                    self.timer_armed = None;
                }
                Source::Waker => self.on_mailbox(ctx, mailbox),
                Source::Udp(i) => {
                    if let Some(endpoint) = self.quic.get_mut(i) {
                        if event.is_writable() {
                            endpoint.on_writable(ctx);
                        }
                        if event.is_readable() && endpoint.on_readable(ctx) && !self.quic_ready.contains(&i) {
                            self.quic_ready.push(i);
                        }
                    }
                }
                Source::Listener(i) => {
                    if let Some(listener) = self.listeners.get(i) {
                        self.accept_paused |=
                            !accept(listener, &mut self.conns, &mut self.per_address, &mut self.timers, ctx);
                    }
                }
                Source::Conn(t) => {
                    if let Some(conn) = self.conns.get_mut(t) {
                        let next = conn.on_ready(ctx, event.is_read_closed());
                        // The common case, a connection waiting again,
                        // armed through the entry in hand: `settle` would
                        // look it up in the slab a second time.
                        if next == Next::Keep {
                            self.timers.arm(t, conn.deadline, &mut conn.armed);
                        } else {
                            self.settle(ctx, t, next);
                        }
                    }
                }
                Source::Upstream(k) => {
                    self.upstreams.on_event(ctx, &mut self.timers, k);
                    // A lone relayed answer (a proxied GET's) first: then
                    // nothing else waits, and `has_answers`' look at every
                    // list is not needed (`hand_over` would ask again).
                    if !self.hand_relayed(ctx) && self.upstreams.has_answers() {
                        // Handed over at once, not after every event of
                        // the turn: the answer's buffers go back to the
                        // allocator before the next upstream's are taken
                        // (a turn of 50 answers of 64 KiB held 3.2 MiB at
                        // once, and glibc's trim made each 16 page faults
                        // again).
                        self.hand_over(ctx);
                    }
                }
                Source::Tunnel { conn: t, stream } => {
                    if let Some(conn) = self.conns.get_mut(t) {
                        let next = conn.on_tunnel_event(ctx, stream);
                        self.settle(ctx, t, next);
                    }
                }
                // A tunnel's upstream socket on an HTTP/3 stream.
                Source::QuicTunnel { quic, stream } => {
                    for endpoint in self.quic.iter_mut() {
                        if let Some(ch) = endpoint.conn_of_token(quic) {
                            endpoint.on_tunnel_event(ctx, ch, stream);
                            break;
                        }
                    }
                }
                // Not registered in the poll: its endpoint's socket is.
                Source::Quic { .. } => {}
            }
        }
        // Another turn for endpoints with datagrams left (edge-triggered:
        // no new event comes for them until their socket is drained).
        for i in quic_again.drain(..) {
            if let Some(endpoint) = self.quic.get_mut(i) {
                if endpoint.on_readable(ctx) {
                    self.quic_ready.push(i);
                }
            }
        }
        for endpoint in self.quic.iter_mut() {
            endpoint.on_timers(ctx);
        }
    }

    /// Deferred answers and wakes from other threads.
    fn on_mailbox(&mut self, ctx: &mut Ctx<'_>, mailbox: &Mailbox) {
        for post in mailbox.take() {
            let token = match &post {
                Post::Answer(answer) => answer.token,
                Post::Wake { token } => *token,
                Post::Publish(published) => {
                    self.fan_out(ctx, published);
                    continue;
                }
            };
            if let Post::Answer(a) = post {
                self.deliver(ctx, a.token, a.id, a.response);
                continue;
            }
            match Source::of(token) {
                Source::Quic { .. } => {
                    for endpoint in self.quic.iter_mut() {
                        if let Some(ch) = endpoint.conn_of_token(token) {
                            endpoint.on_wake(ctx, ch);
                            break;
                        }
                    }
                }
                // A token may have been closed and reused since; an
                // answer carries its id, and a spurious wake is harmless.
                Source::Conn(t) => {
                    if let Some(conn) = self.conns.get_mut(t) {
                        let next = conn.on_wake(ctx);
                        self.settle(ctx, t, next);
                    }
                }
                Source::Upstream(k) => self.upstreams.on_wake(ctx, &mut self.timers, k),
                _ => {}
            }
        }
        // QUIC datagrams other endpoints read for ours (a reload's older
        // generation, or a shared socket).
        for (i, endpoint) in self.quic.iter_mut().enumerate() {
            if endpoint.on_inbox(ctx) && !self.quic_ready.contains(&i) {
                self.quic_ready.push(i);
            }
        }
    }

    /// Hands a deferred answer to its connection (a token closed and
    /// reused since gets nothing: the answer carries its request's id).
    fn deliver(&mut self, ctx: &mut Ctx<'_>, token: usize, id: u64, response: crate::Response) {
        match Source::of(token) {
            Source::Quic { .. } => {
                for endpoint in self.quic.iter_mut() {
                    if let Some(ch) = endpoint.conn_of_token(token) {
                        endpoint.on_answer(ctx, ch, id, response);
                        break;
                    }
                }
            }
            Source::Conn(t) => {
                if let Some(conn) = self.conns.get_mut(t) {
                    let next = conn.on_answer(ctx, id, response);
                    self.settle(ctx, t, next);
                }
            }
            _ => {}
        }
    }

    /// The proxy's jobs left by handlers and the answers its upstream
    /// connections made, until neither is left (an answer may let a
    /// connection read a pipelined request that makes another job). The
    /// answers are this worker's connections': handed over directly,
    /// without the mailbox (no lock, no wake of the loop by itself).
    fn run_upstreams(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            self.upstreams.submit_all(ctx, &mut self.timers);
            if !self.upstreams.has_answers() {
                return;
            }
            self.hand_over(ctx);
        }
    }

    /// Relays what upstreams answered: interim answers, answers and
    /// WebSocket tunnels, each to the connection whose request it is.
    fn hand_over(&mut self, ctx: &mut Ctx<'_>) {
        // The common case, one answer and nothing else: straight to its
        // connection (the list's trip below, `take_answers`, the drain
        // and `give_answers`, was about 60 instructions of a proxied
        // GET, callgrind `proxy-c50`); a proxied GET's relayed in one
        // pass, as its bytes.
        if self.hand_relayed(ctx) {
            return;
        }
        if let Some(answer) = self.upstreams.take_lone_answer() {
            self.hand_answer(ctx, answer);
            return;
        }
        for (token, id, status, fields) in self.upstreams.take_interims() {
            match Source::of(token) {
                Source::Conn(t) => {
                    if let Some(conn) = self.conns.get_mut(t) {
                        let next = conn.on_interim(ctx, id, status, &fields);
                        self.settle(ctx, t, next);
                    }
                }
                Source::Quic { .. } => {
                    for endpoint in self.quic.iter_mut() {
                        if let Some(ch) = endpoint.conn_of_token(token) {
                            endpoint.on_interim(ctx, ch, id, status, &fields);
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
        let mut answers = self.upstreams.take_answers();
        for answer in answers.drain(..) {
            self.hand_answer(ctx, answer);
        }
        self.upstreams.give_answers(answers);
        for handoff in self.upstreams.take_handoffs() {
            self.hand_tunnel(ctx, handoff);
        }
    }

    /// One upstream's answer, to the connection whose request it is.
    #[inline(always)]
    fn hand_answer(&mut self, ctx: &mut Ctx<'_>, (responder, response, figures): crate::proxy::Answer) {
        let (token, id) = responder.into_parts();
        if let crate::Body::Channel(rx) = &response.body {
            rx.bind(ctx.mailbox, token);
        }
        // For the access log line of the request it answers
        // (`dispatch::finish` takes them); cleared after, in case that
        // request is gone. Without an access log there are none
        // (`UpConn::answer_to`), and the field is not written: each write
        // of the large `Option` was a copy.
        let logged = figures.is_some();
        if logged {
            ctx.upstream_log = figures;
        }
        self.deliver(ctx, token, id, response);
        if logged {
            ctx.upstream_log = None;
        }
    }

    /// The one answer made, when it was relayed in one pass
    /// (`proxy::pool::Relayed`): copied into its HTTP/1.1 connection's
    /// output (`Conn::on_relayed`), or, for any other (HTTP/2, a HEAD, a
    /// request id to add...), made into its `Response` and handed over as
    /// any answer. False if there is no such lone answer.
    #[inline(always)]
    fn hand_relayed(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let Some(relayed) = self.upstreams.lone_relayed() else {
            return false;
        };
        if let Source::Conn(t) = Source::of(relayed.token) {
            if let Some(conn) = self.conns.get_mut(t) {
                // For the access log line of the request it answers, as
                // `hand_answer` does.
                let logged = relayed.figures.is_some();
                if logged {
                    ctx.upstream_log = relayed.figures.take();
                }
                let next = conn.on_relayed(ctx, relayed.id, relayed.status, relayed.rest(), relayed.body_len());
                if let Some(next) = next {
                    if logged {
                        ctx.upstream_log = None;
                    }
                    self.upstreams.drop_relayed();
                    // The common case, the connection waiting again, armed
                    // through the entry in hand, as `on_events` does:
                    // `settle` would look it up in the slab a second time.
                    if next == Next::Keep {
                        self.timers.arm(t, conn.deadline, &mut conn.armed);
                    } else {
                        self.settle(ctx, t, next);
                    }
                    return true;
                }
                if logged {
                    relayed.figures = ctx.upstream_log.take();
                }
            }
        }
        if let Some(answer) = self.upstreams.take_relayed_answer() {
            self.hand_answer(ctx, answer);
        }
        true
    }

    /// An upstream that switched to WebSocket, for the connection whose
    /// request it answered; dropped (closed) if that connection is gone.
    #[cold]
    #[inline(never)]
    fn hand_tunnel(&mut self, ctx: &mut Ctx<'_>, mut handoff: crate::proxy::Handoff) {
        let responder = std::mem::replace(&mut handoff.responder, crate::responder::Responder::new(None, 0, 0));
        let (token, id) = responder.into_parts();
        match Source::of(token) {
            Source::Conn(t) => {
                if let Some(conn) = self.conns.get_mut(t) {
                    // For the 101's log line (`dispatch::finish` takes them),
                    // as `hand_answer` does.
                    ctx.upstream_log = handoff.figures.take();
                    let next = conn.on_tunnel(ctx, id, handoff);
                    ctx.upstream_log = None;
                    self.settle(ctx, t, next);
                }
            }
            // An extended CONNECT over HTTP/3 (RFC 9220).
            Source::Quic { .. } => {
                let found = self
                    .quic
                    .iter_mut()
                    .find_map(|e| e.conn_of_token(token).map(|ch| (e, ch)));
                if let Some((endpoint, ch)) = found {
                    ctx.upstream_log = handoff.figures.take();
                    endpoint.on_tunnel(ctx, ch, id, handoff);
                    ctx.upstream_log = None;
                }
            }
            _ => {}
        }
    }

    /// A message published to a WebSocket topic: each of this worker's
    /// subscribers gets its frame.
    fn fan_out(&mut self, ctx: &mut Ctx<'_>, published: &crate::ws::hub::Published) {
        let mut members = std::mem::take(&mut self.subscribers);
        ctx.ws.subscribers(published, &mut members);
        for &(token, stream) in &members {
            match Source::of(token) {
                Source::Conn(t) => {
                    if let Some(conn) = self.conns.get_mut(t) {
                        let next = conn.on_publish(ctx, stream, &published.frame);
                        self.settle(ctx, t, next);
                    }
                }
                // A WebSocket over HTTP/3 (RFC 9220).
                Source::Quic { .. } => {
                    for endpoint in self.quic.iter_mut() {
                        if let Some(ch) = endpoint.conn_of_token(token) {
                            endpoint.on_publish(ctx, ch, stream, &published.frame);
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
        self.subscribers = members;
    }

    /// Another turn for the connections that had more to do. A token may
    /// have been closed and reused since; a spurious turn is harmless.
    fn give_turns(&mut self, ctx: &mut Ctx<'_>) {
        std::mem::swap(&mut self.ready, &mut self.ready_now);
        let mut turns = std::mem::take(&mut self.ready_now);
        for t in turns.drain(..) {
            if let Some(conn) = self.conns.get_mut(t) {
                conn.queued = false;
                let next = conn.on_turn(ctx);
                self.settle(ctx, t, next);
            }
        }
        self.ready_now = turns;
    }

    /// The connections whose timer fired: each whose deadline has passed
    /// times out; one whose deadline moved later is armed again for it.
    fn run_timers(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(t) = self.timers.pop_due(ctx.now) {
            if let Source::Upstream(k) = Source::of(t) {
                self.upstreams.on_timer(ctx, &mut self.timers, k);
                continue;
            }
            let Some(conn) = self.conns.get_mut(t) else { continue };
            conn.armed = None;
            match conn.deadline {
                Some(d) if d <= ctx.now => {
                    let next = conn.on_timeout(ctx);
                    self.settle(ctx, t, next);
                }
                later => self.timers.arm(t, later, &mut conn.armed),
            }
        }
    }

    /// Retries accepting after it failed (out of file descriptors).
    fn accept_again(&mut self, ctx: &Ctx<'_>) {
        if self.accept_paused {
            self.accept_paused = false;
            for listener in &self.listeners {
                self.accept_paused |= !accept(listener, &mut self.conns, &mut self.per_address, &mut self.timers, ctx);
            }
        }
    }

    /// Shutdown begins: stop accepting; close what is idle (unless
    /// `keep_idle`, a hand-over); let the rest finish. HTTP/3: GOAWAY, each
    /// connection closing once its requests are answered (a hand-over
    /// alike: a QUIC client reconnects on its own).
    fn begin_drain(&mut self, ctx: &mut Ctx<'_>, keep_idle: bool) {
        // Dropping a listener closes only this worker's descriptor: a
        // server taking over (a reload) accepts from its own.
        for mut listener in self.listeners.drain(..) {
            let _ = ctx.registry.deregister(&mut listener.socket);
        }
        self.drain_conns(ctx, keep_idle);
        for endpoint in self.quic.iter_mut() {
            endpoint.drain(ctx);
        }
        self.upstreams.close_idle(ctx, &mut self.timers);
    }

    /// Tells every connection that shutdown has begun.
    fn drain_conns(&mut self, ctx: &mut Ctx<'_>, keep_idle: bool) {
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
            let next = self.conns[t].on_drain(ctx, keep_idle);
            self.settle(ctx, t, next);
        }
    }

    /// Nothing is left to finish.
    fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.quic.iter().all(|e| e.n_conns() == 0)
    }

    /// The shutdown deadline passed: cuts what is left, counted closed
    /// (and the deferred answers it waits for, abandoned) like any other
    /// close, so the gauges of open connections and requests in flight
    /// come back down.
    fn cut(&mut self, ctx: &mut Ctx<'_>) {
        for endpoint in self.quic.iter_mut() {
            endpoint.close_all(ctx);
        }
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
            self.close(ctx, t);
        }
    }

    /// Acts on what a connection asked for after an event, and keeps its
    /// timer in step with its deadline.
    #[inline]
    fn settle(&mut self, ctx: &mut Ctx<'_>, token: usize, next: Next) {
        match next {
            Next::Keep | Next::Again => {
                let Some(conn) = self.conns.get_mut(token) else { return };
                self.timers.arm(token, conn.deadline, &mut conn.armed);
                // At most once in the list, however many events arrive
                // meanwhile.
                if next == Next::Again && !conn.queued {
                    conn.queued = true;
                    self.ready.push(token);
                }
            }
            Next::Close => self.close(ctx, token),
        }
    }

    fn close(&mut self, ctx: &mut Ctx<'_>, token: usize) {
        if let Some(mut conn) = self.conns.try_remove(token) {
            self.timers.disarm(token, &mut conn.armed);
            self.per_address.close(conn.peer());
            if let Some(m) = ctx.metrics {
                m.conns_closed.add(1);
                // Abandoned: their answers will be dropped.
                m.deferred_ended.add(conn.n_deferred() as u64);
            }
            conn.end_ws(ctx);
            if conn.is_sending() {
                // Closed before its body's last byte: logged as it ends.
                conn.end_sending(ctx, true);
            }
            conn.release(ctx.pool);
            // Dropping the connection closes the socket, which also
            // removes it from the epoll set: no deregister call needed.
        }
    }
}

/// Accepts every pending connection. Returns false if accepting must be
/// retried later (out of file descriptors).
fn accept(
    listener: &Listener,
    conns: &mut Slab<Conn>,
    per_address: &mut PerAddress,
    timers: &mut Timers,
    ctx: &Ctx<'_>,
) -> bool {
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
        if let Some(trusted) = &listener.proxy {
            // Before any byte is read: only a trusted proxy may say whose
            // connection this is (HAProxy's specification, §2). nginx
            // leaves this to `allow`/`deny`; here it is the listener's.
            if !trusted.contains(peer.ip()) {
                crate::log::debug(format_args!(
                    "PROXY protocol: connection from {peer} closed: not a trusted source"
                ));
                if let Some(m) = ctx.metrics {
                    m.proxy_refusals.add(1);
                }
                continue;
            }
        }
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
            .register(&mut stream, Source::Conn(token).mio(), Interest::READABLE)
            .is_err()
        {
            per_address.close(peer);
            continue;
        }
        if let Some(m) = ctx.metrics {
            m.conns_accepted.add(1);
        }
        // A PROXY header first, within its own time; then the request's.
        let timeout = match listener.proxy {
            Some(_) => ctx.limits.proxy_header_timeout,
            None => ctx.limits.head_timeout,
        };
        let conn = entry.insert(Conn::new(
            stream,
            transport,
            redirect,
            peer,
            token,
            ctx.now.checked_add(timeout),
            listener.proxy.is_some(),
        ));
        timers.arm(token, conn.deadline, &mut conn.armed);
    }
}

fn refuse(stream: &mut Stream) {
    let _ = stream.write(REFUSAL);
    let _ = stream.shutdown(std::net::Shutdown::Write);
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
