//! QUIC for HTTP/3: per worker, one UDP socket per TLS address (the same
//! port, in an SO_REUSEPORT group with the other workers' sockets) and one
//! quinn-proto `Endpoint`, driven from the worker's own mio loop. No async
//! runtime: quinn-proto is a state machine (datagrams in, `poll_transmit`
//! and `poll_timeout` out), quinn-udp does the system calls (recvmmsg,
//! sendmsg with GSO, GRO and ECN where the kernel has them; plain
//! recvmsg/sendmsg where it does not).
//!
//! Which worker gets a datagram: a BPF filter on the group reads the
//! destination connection ID, whose first byte names the worker for every
//! ID our workers issue (`steer`), so a connection stays on its worker
//! when the client's address changes, and migration is allowed. Where the
//! filter cannot be attached, the kernel hashes the addresses instead (a
//! client keeps its worker while its address stays the same) and
//! migration is turned off.
//!
//! Reloads and shared sockets: every datagram goes to the endpoint that
//! issued its connection ID, which the ID names (`handover`): the newest
//! generation reads the sockets and passes an older one's datagrams on.
//!
//! Timers: each connection's `poll_timeout` is kept in an ordered set, so
//! the worker sleeps until the earliest (`Endpoint::next_timeout`). A
//! connection with a request open (a streamed body whose producer is
//! silent, a deferred answer) also pings every `keepalive_interval`, so
//! that it does not reach its idle timeout while it waits; one with none
//! open is closed at the idle timeout after its last request, whatever
//! packets (a client's PINGs, ACKs) come meanwhile, and one whose answer
//! waits on a window the client never opens, at `send_timeout`
//! (`conn.rs`).
//!
//! Defences: address validation with Retry once `h3_handshakes_before_retry`
//! handshakes are in progress (a flood of Initials from forged addresses
//! costs a stateless packet each); the anti-amplification limit, stateless
//! reset and the connection IDs are quinn-proto's; at most `n_conns_max`
//! connections per worker (more are refused with CONNECTION_REFUSED).

mod conn;
mod handover;
mod steer;

use std::collections::{BTreeSet, VecDeque};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, DatagramEvent, VarInt};

use crate::conn::Ctx;
use crate::error::Error;
use crate::limits::{Limits, H3_CONN_RECV_WINDOW_BYTES, H3_SEND_WINDOW_BYTES, H3_STREAM_RECV_WINDOW_BYTES};
use crate::tls::TlsListener;

use crate::sources::Source;
use conn::QuicConn;
use handover::{Forwarded, Inbox, Routes};
pub(crate) use handover::{Generations, Member};

/// Receive calls (each up to quinn-udp's batch of 32 datagrams) one
/// readiness event may make before the worker's other work gets a turn.
const RECV_BATCHES_PER_TURN: usize = 16;

/// Datagrams per GSO send at most: 10 full-size datagrams leave in one
/// system call (quinn's own cap is 10 too), and a burst stays short
/// enough not to overflow a client's receive buffer.
const GSO_SEGMENTS_MAX: usize = 10;

/// Buffers a received datagram (or GRO batch) is copied into for
/// quinn-proto, used in turn (see `Endpoint::rx`).
const RX_BUFFERS: usize = 64;

/// How long a draining connection's client has, after the first GOAWAY
/// (which names no request: it only stops new ones), for requests already
/// on their way to arrive before the second, which refuses those not seen
/// (RFC 9114 §5.2; h2o waits as long). A connection accepted just before
/// a reload, whose requests were not in yet, is answered rather than
/// closed in its handshake.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// The longest time between keep-alive PINGs on a connection with a
/// request open: below the idle timeouts clients ask for (Chromium's and
/// aioquic's are 30 s and 60 s), since the effective one is the smaller
/// of the two sides' (RFC 9000 §10.1).
const KEEPALIVE_INTERVAL_MAX: Duration = Duration::from_secs(5);

/// How often a connection with a request open pings: a third of our idle
/// timeout, at most `KEEPALIVE_INTERVAL_MAX`.
fn keepalive_interval(limits: &Limits) -> Duration {
    (limits.h3_idle_timeout / 3).clamp(Duration::from_millis(10), KEEPALIVE_INTERVAL_MAX)
}

/// Where a draining endpoint's connections are: the first GOAWAY (`Soon`),
/// then the second, after which each closes once idle (`Now`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drain {
    No,
    Soon,
    Now,
}

/// Socket buffer sizes asked for: a burst of a congestion window's
/// datagrams (several hundred KiB at loopback speeds) without drops.
pub(crate) const UDP_BUFFER_BYTES: usize = 2 << 20;

/// The QUIC configuration every worker's endpoint for one address shares.
pub(crate) struct Shared {
    server: Arc<quinn_proto::ServerConfig>,
    endpoint: Arc<quinn_proto::EndpointConfig>,
    /// HSTS and Alt-Svc lines for responses (as on the TLS listener).
    pub(crate) tls: Arc<TlsListener>,
}

impl Shared {
    /// `migration`: whether a client may change its address (only when
    /// packets are steered to workers by connection ID, see `steer`).
    pub(crate) fn new(
        crypto: quinn_proto::crypto::rustls::QuicServerConfig,
        tls: Arc<TlsListener>,
        limits: &Limits,
        migration: bool,
    ) -> Result<Self, Error> {
        let mut transport = quinn_proto::TransportConfig::default();
        let idle = quinn_proto::IdleTimeout::try_from(limits.h3_idle_timeout.min(Duration::from_secs(3600)))
            .map_err(|e| Error::setup(io::Error::other(format!("h3 idle timeout: {e}"))))?;
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(limits.h3_streams_max))
            // The client's control and two QPACK streams, and room for
            // GREASE streams we read and drop (RFC 9114 §6.2 asks for 3).
            .max_concurrent_uni_streams(VarInt::from_u32(crate::h3::UNI_STREAMS_MAX as u32))
            .max_idle_timeout(Some(idle))
            .stream_receive_window(VarInt::from_u32(H3_STREAM_RECV_WINDOW_BYTES))
            .receive_window(VarInt::from_u32(H3_CONN_RECV_WINDOW_BYTES))
            .send_window(H3_SEND_WINDOW_BYTES)
            .datagram_receive_buffer_size(None);
        let mut mtud = quinn_proto::MtuDiscoveryConfig::default();
        mtud.upper_bound(limits.h3_udp_payload_bytes_max.max(1200));
        transport.mtu_discovery_config(Some(mtud));
        let mut server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(Arc::new(transport));
        // Without steering by connection ID, a client's new address would
        // hash to another worker's socket, which does not know it.
        server.migration(migration);
        let mut endpoint = quinn_proto::EndpointConfig::default();
        endpoint
            .max_udp_payload_size(limits.h3_udp_payload_bytes_max.max(1200))
            .map_err(|e| Error::setup(io::Error::other(format!("h3 UDP payload size: {e}"))))?;
        Ok(Shared {
            server: Arc::new(server),
            endpoint: Arc::new(endpoint),
            tls,
        })
    }
}

/// One worker's QUIC endpoint on one UDP socket.
pub(crate) struct Endpoint {
    socket: mio::net::UdpSocket,
    udp: quinn_udp::UdpSocketState,
    endpoint: quinn_proto::Endpoint,
    shared: Arc<Shared>,
    /// By quinn-proto's connection handle.
    conns: Vec<Option<Box<QuicConn>>>,
    n_conns: usize,
    /// Each connection's next timeout, by time.
    timers: BTreeSet<(Instant, usize)>,
    recv_buf: Box<[u8]>,
    /// quinn-proto takes each datagram as a `BytesMut` of its own and
    /// keeps slices of it (stream data) until they are read, counting
    /// each as holding the datagram's size (it compacts what it holds
    /// when that grows). So each datagram (or GRO batch, as before) is
    /// copied into a buffer of its own size, split off one of these, used
    /// in turn: `reserve` reclaims it without allocating once quinn-proto
    /// has dropped the slices, and allocates a new one when it has not.
    rx: Vec<BytesMut>,
    rx_next: usize,
    send_buf: Vec<u8>,
    touched: Vec<usize>,
    /// This endpoint's place among the worker's, for mailbox tokens.
    index: usize,
    draining: bool,
    /// While draining, when the second GOAWAY goes (`GOAWAY_GRACE`);
    /// None once it has.
    goaway_at: Option<Instant>,
    /// Connections whose handshake has not completed.
    n_handshaking: usize,
    /// The socket's token in the worker's poll.
    socket_token: usize,
    /// The socket's send buffer was full: the datagrams that did not go,
    /// and the connections that wait to transmit until it drains.
    blocked: Option<Blocked>,
    /// This endpoint's index among its address's endpoints (the first
    /// byte of its connection IDs), and its generation.
    cid_index: u8,
    member: Member,
    /// Where datagrams for other endpoints go.
    routes: Routes,
    /// Reading the socket (the newest generation does).
    reading: bool,
    /// The socket is in the worker's poll.
    registered: bool,
    /// Inboxes given datagrams since their workers were last woken.
    to_wake: Vec<Arc<Inbox>>,
    /// Scratch for what the inbox held.
    inbox_buf: VecDeque<Forwarded>,
    /// Datagrams passed to other endpoints, and received from them.
    n_forwarded: u64,
    n_received: u64,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.n_forwarded + self.n_received > 0 {
            crate::log::debug(format_args!(
                "QUIC endpoint {} of generation {}: {} datagrams passed to other endpoints, {} received from them",
                self.cid_index, self.member.tag, self.n_forwarded, self.n_received
            ));
        }
    }
}

/// What waits for the socket to become writable again.
struct Blocked {
    /// One transmit (a GSO batch, perhaps) that the kernel refused.
    bytes: Vec<u8>,
    destination: SocketAddr,
    ecn: Option<quinn_udp::EcnCodepoint>,
    segment_size: Option<usize>,
    src_ip: Option<std::net::IpAddr>,
    conns: Vec<usize>,
}

impl Endpoint {
    /// `cid_index`: the first byte of the connection IDs this endpoint
    /// issues (its index among the address's endpoints, see `steer`);
    /// `member`: its generation's tag and inbox (`handover`).
    pub(crate) fn new(
        socket: std::net::UdpSocket,
        shared: Arc<Shared>,
        index: usize,
        cid_index: u8,
        member: Member,
    ) -> io::Result<Self> {
        let udp = quinn_udp::UdpSocketState::new((&socket).into())?;
        // Room for bursts (best effort: the kernel caps both at its
        // net.core.[rw]mem_max).
        let _ = udp.set_send_buffer_size((&socket).into(), UDP_BUFFER_BYTES);
        let _ = udp.set_recv_buffer_size((&socket).into(), UDP_BUFFER_BYTES);
        let mut config = (*shared.endpoint).clone();
        let tag = member.tag;
        config.cid_generator(move || Box::new(steer::EndpointCids::new(cid_index, tag)));
        let config = Arc::new(config);
        let endpoint = quinn_proto::Endpoint::new(config, Some(shared.server.clone()), true, None);
        let datagram = usize::from(shared.endpoint.get_max_udp_payload_size().min(65527) as u16);
        let recv_bytes = datagram.max(1500) * udp.gro_segments().max(1) * quinn_udp::BATCH_SIZE;
        Ok(Endpoint {
            socket: mio::net::UdpSocket::from_std(socket),
            udp,
            endpoint,
            shared,
            conns: Vec::new(),
            n_conns: 0,
            timers: BTreeSet::new(),
            recv_buf: vec![0; recv_bytes.min(4 << 20)].into_boxed_slice(),
            rx: (0..RX_BUFFERS).map(|_| BytesMut::new()).collect(),
            rx_next: 0,
            send_buf: Vec::with_capacity(64 * 1024),
            touched: Vec::new(),
            index,
            draining: false,
            goaway_at: None,
            n_handshaking: 0,
            socket_token: 0,
            blocked: None,
            cid_index,
            member,
            routes: Routes::new(),
            reading: false,
            registered: false,
            to_wake: Vec::new(),
            inbox_buf: VecDeque::new(),
            n_forwarded: 0,
            n_received: 0,
        })
    }

    /// Registers the socket in the worker's poll under `token`, and the
    /// worker to wake for datagrams other endpoints read for this one.
    pub(crate) fn register(
        &mut self,
        registry: &mio::Registry,
        token: usize,
        mailbox: &Arc<crate::responder::Mailbox>,
    ) -> io::Result<()> {
        self.socket_token = token;
        self.member.inbox.bind(mailbox.clone());
        registry.register(&mut self.socket, mio::Token(token), mio::Interest::READABLE)?;
        self.reading = true;
        self.registered = true;
        Ok(())
    }

    /// Puts the socket in the worker's poll for what this endpoint waits
    /// for: datagrams (while it reads), room to send (while blocked).
    fn update_interest(&mut self, registry: &mio::Registry) {
        set_interest(
            registry,
            &mut self.socket,
            mio::Token(self.socket_token),
            &mut self.registered,
            self.reading,
            self.blocked.is_some(),
        );
    }

    /// The worker was woken: handles the datagrams other endpoints read
    /// for this one. Returns true if this endpoint has just become the
    /// reader of its socket (the newer generation ended): the worker
    /// reads it then.
    pub(crate) fn on_inbox(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if !self.member.inbox.take_told() {
            return false;
        }
        self.member.generations.refresh(&mut self.routes);
        let mut queued = std::mem::take(&mut self.inbox_buf);
        self.member.inbox.take(&mut queued);
        self.n_received += queued.len() as u64;
        for f in queued.drain(..) {
            self.on_datagram(ctx, f.from, f.dst_ip, f.ecn, f.data);
        }
        self.inbox_buf = queued;
        self.drive_touched(ctx);
        self.wake_inboxes();
        if !self.reading && self.member.generations.is_newest(self.member.tag) {
            self.reading = true;
            self.update_interest(ctx.registry);
            return true;
        }
        false
    }

    /// The endpoint that issued the datagram's connection ID, if another
    /// live one: its inbox.
    fn forward_to(&self, datagram: &[u8]) -> Option<Arc<Inbox>> {
        let cid = handover::dcid(datagram, steer::CID_BYTES)?;
        if cid[0] == self.cid_index && cid[1] == self.member.tag {
            return None;
        }
        let inbox = self.routes.inbox(cid)?;
        (!Arc::ptr_eq(inbox, &self.member.inbox) && !inbox.is_closed()).then(|| inbox.clone())
    }

    fn forward(&mut self, inbox: Arc<Inbox>, datagram: Forwarded) {
        if inbox.push(datagram) {
            self.n_forwarded += 1;
        }
        if !self.to_wake.iter().any(|w| Arc::ptr_eq(w, &inbox)) {
            self.to_wake.push(inbox);
        }
    }

    fn wake_inboxes(&mut self) {
        for inbox in self.to_wake.drain(..) {
            inbox.wake();
        }
    }

    /// The socket has room again: send what it refused, then let the
    /// connections that waited transmit.
    pub(crate) fn on_writable(&mut self, ctx: &mut Ctx<'_>) {
        let Some(blocked) = &self.blocked else { return };
        let transmit = quinn_udp::Transmit {
            destination: blocked.destination,
            ecn: blocked.ecn,
            contents: &blocked.bytes,
            segment_size: blocked.segment_size,
            src_ip: blocked.src_ip,
        };
        if send_udp(&self.udp, &self.socket, &transmit, ctx) == Sent::Blocked {
            return;
        }
        let Some(blocked) = self.blocked.take() else { return };
        self.update_interest(ctx.registry);
        self.touched.extend_from_slice(&blocked.conns);
        self.drive_touched(ctx);
    }

    /// Whether a mailbox token names one of this endpoint's connections,
    /// and which.
    pub(crate) fn conn_of_token(&self, token: usize) -> Option<usize> {
        match Source::of(token) {
            Source::Quic { endpoint, conn } if endpoint == self.index => Some(conn),
            _ => None,
        }
    }

    fn token_of(&self, ch: usize) -> usize {
        Source::Quic {
            endpoint: self.index,
            conn: ch,
        }
        .token()
    }

    /// Connections open (including those closing).
    pub(crate) fn n_conns(&self) -> usize {
        self.n_conns
    }

    /// When the earliest connection timer fires (or the second GOAWAY is
    /// due).
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        let first = self.timers.first().map(|&(t, _)| t);
        match (first, self.goaway_at) {
            (Some(t), Some(g)) => Some(t.min(g)),
            (t, g) => t.or(g),
        }
    }

    fn drain_state(&self) -> Drain {
        match (self.draining, self.goaway_at) {
            (false, _) => Drain::No,
            (true, Some(_)) => Drain::Soon,
            (true, None) => Drain::Now,
        }
    }

    /// Reads every datagram waiting on the socket and acts on them.
    /// At most `RECV_BATCHES_PER_TURN` receive calls, so that a flood on
    /// this socket cannot starve the worker's other sockets and
    /// connections: returns true if the socket may have more (the worker
    /// calls again after the others have had their turn).
    pub(crate) fn on_readable(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if !self.reading {
            return false;
        }
        self.member.generations.refresh(&mut self.routes);
        let mut metas = [quinn_udp::RecvMeta::default(); quinn_udp::BATCH_SIZE];
        let mut more = true;
        for _ in 0..RECV_BATCHES_PER_TURN {
            let n = {
                let chunk = self.recv_buf.len() / quinn_udp::BATCH_SIZE;
                let mut chunks = self.recv_buf.chunks_mut(chunk);
                let mut bufs: [IoSliceMut<'_>; quinn_udp::BATCH_SIZE] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
                match self.udp.recv((&self.socket).into(), &mut bufs, &mut metas) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        more = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // ICMP errors surface here (ECONNREFUSED from a
                        // client gone): not ours to act on.
                        crate::log::debug(format_args!("QUIC: recv: {e}"));
                        continue;
                    }
                }
            };
            let chunk = self.recv_buf.len() / quinn_udp::BATCH_SIZE;
            for (i, meta) in metas.iter().take(n).enumerate() {
                let start = i * chunk;
                let rx = &mut self.rx[self.rx_next];
                self.rx_next = (self.rx_next + 1) % RX_BUFFERS;
                rx.reserve(meta.len);
                if rx.capacity() > 2 * meta.len.max(1500) {
                    // Reclaimed from a larger datagram (a GRO batch): a
                    // small one would pin all of it.
                    *rx = BytesMut::with_capacity(meta.len);
                }
                rx.extend_from_slice(&self.recv_buf[start..start + meta.len]);
                let mut data = rx.split();
                let stride = meta.stride.max(1);
                while !data.is_empty() {
                    let datagram = data.split_to(stride.min(data.len()));
                    if let Some(m) = ctx.metrics {
                        m.quic_packets_received.add(1);
                    }
                    if let Some(inbox) = self.forward_to(&datagram) {
                        let datagram = Forwarded {
                            from: meta.addr,
                            dst_ip: meta.dst_ip,
                            ecn: meta.ecn,
                            data: datagram,
                        };
                        self.forward(inbox, datagram);
                        continue;
                    }
                    self.on_datagram(ctx, meta.addr, meta.dst_ip, meta.ecn, datagram);
                }
            }
        }
        self.drive_touched(ctx);
        self.wake_inboxes();
        more
    }

    fn on_datagram(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: SocketAddr,
        dst_ip: Option<std::net::IpAddr>,
        ecn: Option<quinn_udp::EcnCodepoint>,
        data: BytesMut,
    ) {
        // A long header while draining may be a new client's Initial, to
        // be passed to the newest generation: a copy, then (rare).
        let bounce = (self.draining && data.first().is_some_and(|b| b & 0x80 != 0)).then(|| Forwarded {
            from,
            dst_ip,
            ecn,
            data: data.clone(),
        });
        let ecn = ecn.and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
        self.send_buf.clear();
        let event = self
            .endpoint
            .handle(ctx.now, from, dst_ip, ecn, data, &mut self.send_buf);
        match event {
            None => {}
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                    c.conn.handle_event(event);
                    self.touched.push(ch.0);
                }
            }
            Some(DatagramEvent::Response(transmit)) => {
                self.send(&transmit, ctx);
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.on_incoming(ctx, incoming, bounce),
        }
    }

    /// A client's first Initial: accept it, ask it to prove its address
    /// (Retry), or refuse it.
    fn on_incoming(&mut self, ctx: &mut Ctx<'_>, incoming: quinn_proto::Incoming, datagram: Option<Forwarded>) {
        if self.draining {
            // Not refused: the client would give up on HTTP/3 instead of
            // retrying. After a reload, the newest generation takes it (it
            // came here because the client's own ID looked like one of
            // ours); otherwise the client tries again, in vain until the
            // shutdown ends.
            self.endpoint.ignore(incoming);
            let newest = self.routes.newest_but(self.member.tag, usize::from(self.cid_index));
            if let (Some(inbox), Some(datagram)) = (newest.cloned(), datagram) {
                self.forward(inbox, datagram);
            }
            return;
        }
        if self.n_conns >= ctx.limits.n_conns_max {
            self.send_buf.clear();
            let transmit = self.endpoint.refuse(incoming, &mut self.send_buf);
            self.send(&transmit, ctx);
            return;
        }
        if !incoming.remote_address_validated() && self.n_handshaking >= ctx.limits.h3_handshakes_before_retry {
            self.send_buf.clear();
            match self.endpoint.retry(incoming, &mut self.send_buf) {
                Ok(transmit) => {
                    if let Some(m) = ctx.metrics {
                        m.quic_retries.add(1);
                    }
                    self.send(&transmit, ctx);
                }
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return;
        }
        self.send_buf.clear();
        let peer = incoming.remote_address();
        match self.endpoint.accept(incoming, ctx.now, &mut self.send_buf, None) {
            Ok((ch, conn)) => {
                if let Some(m) = ctx.metrics {
                    m.quic_conns_accepted.add(1);
                }
                if self.conns.len() <= ch.0 {
                    self.conns.resize_with(ch.0 + 1, || None);
                }
                let token = self.token_of(ch.0);
                self.conns[ch.0] = Some(Box::new(QuicConn::new(conn, peer, token, ctx)));
                self.n_conns += 1;
                self.n_handshaking += 1;
                self.touched.push(ch.0);
            }
            Err(e) => {
                crate::log::debug(format_args!("QUIC: connection from {peer} not accepted: {}", e.cause));
                if let Some(transmit) = e.response {
                    self.send(&transmit, ctx);
                }
            }
        }
    }

    /// Drives every connection an event touched.
    fn drive_touched(&mut self, ctx: &mut Ctx<'_>) {
        self.touched.sort_unstable();
        self.touched.dedup();
        let touched = std::mem::take(&mut self.touched);
        for &ch in &touched {
            self.drive(ctx, ch);
        }
        self.touched = touched;
        self.touched.clear();
    }

    /// Lets connection `ch` act on what it received, answer, send, and
    /// set its timer; removes it once drained.
    fn drive(&mut self, ctx: &mut Ctx<'_>, ch: usize) {
        let drain = self.drain_state();
        let Some(Some(c)) = self.conns.get_mut(ch) else { return };
        let old_timer = c.timer;
        // Events for the endpoint (retired connection IDs, drained), and
        // back.
        loop {
            let mut progressed = false;
            while let Some(event) = c.conn.poll_endpoint_events() {
                progressed = true;
                if let Some(back) = self.endpoint.handle_event(ConnectionHandle(ch), event) {
                    c.conn.handle_event(back);
                }
            }
            let handshaken = c.handshaken;
            c.process(ctx, &self.shared, drain);
            if c.handshaken && !handshaken {
                self.n_handshaking -= 1;
            }
            if !progressed {
                break;
            }
        }
        // Transmit what the connection has, GSO batches where allowed,
        // unless the socket is full: then wait for it to drain.
        let max_segments = max_segments(&self.udp, &self.shared);
        match &mut self.blocked {
            Some(blocked) => {
                if !blocked.conns.contains(&ch) {
                    blocked.conns.push(ch);
                }
            }
            None => loop {
                self.send_buf.clear();
                let Some(t) = c.conn.poll_transmit(ctx.now, max_segments, &mut self.send_buf) else {
                    break;
                };
                let transmit = udp_transmit(&t, &self.send_buf);
                if send_udp(&self.udp, &self.socket, &transmit, ctx) == Sent::Blocked {
                    self.blocked = Some(Blocked {
                        bytes: self.send_buf[..t.size].to_vec(),
                        destination: t.destination,
                        ecn: transmit.ecn,
                        segment_size: t.segment_size,
                        src_ip: t.src_ip,
                        conns: vec![ch],
                    });
                    set_interest(
                        ctx.registry,
                        &mut self.socket,
                        mio::Token(self.socket_token),
                        &mut self.registered,
                        self.reading,
                        true,
                    );
                    break;
                }
            },
        }
        let timer = c.next_timeout();
        if timer != old_timer {
            if let Some(t) = old_timer {
                self.timers.remove(&(t, ch));
            }
            if let Some(t) = timer {
                self.timers.insert((t, ch));
            }
            c.timer = timer;
        }
        c.count_packets(ctx);
        if c.conn.is_drained() {
            self.retire(ctx, ch);
        }
    }

    /// Forgets connection `ch` (drained, or cut at the shutdown deadline):
    /// its timer, its count among the open, its deferred answers.
    fn retire(&mut self, ctx: &mut Ctx<'_>, ch: usize) {
        let Some(Some(mut c)) = self.conns.get_mut(ch).map(Option::take) else {
            return;
        };
        if let Some(t) = c.timer {
            self.timers.remove(&(t, ch));
        }
        c.count_packets(ctx);
        if let Some(m) = ctx.metrics {
            m.quic_conns_closed.add(1);
        }
        c.abandon(ctx);
        if !c.handshaken {
            self.n_handshaking -= 1;
        }
        self.n_conns -= 1;
    }

    /// Fires the timers that are due.
    pub(crate) fn on_timers(&mut self, ctx: &mut Ctx<'_>) {
        if self.goaway_at.is_some_and(|g| g <= ctx.now) {
            // The second GOAWAY, on every connection.
            self.goaway_at = None;
            self.touch_all();
        }
        while let Some(&(t, ch)) = self.timers.first() {
            if t > ctx.now {
                break;
            }
            self.timers.remove(&(t, ch));
            if let Some(Some(c)) = self.conns.get_mut(ch) {
                c.timer = None;
                c.on_timeout(ctx);
                self.touched.push(ch);
            }
        }
        self.drive_touched(ctx);
    }

    /// A deferred answer for one of this endpoint's connections.
    pub(crate) fn on_answer(&mut self, ctx: &mut Ctx<'_>, ch: usize, id: u64, response: crate::Response) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            c.on_answer(ctx, &self.shared, id, response);
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// An interim answer for connection `ch`'s deferred request `id`.
    pub(crate) fn on_interim(&mut self, ctx: &mut Ctx<'_>, ch: usize, id: u64, status: u16, fields: &[u8]) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            c.on_interim(id, status, fields);
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// An upstream switched to WebSocket for connection `ch`'s deferred
    /// request `id` (the reverse proxy's tunnel, `conn/tunnel.rs`).
    pub(crate) fn on_tunnel(&mut self, ctx: &mut Ctx<'_>, ch: usize, id: u64, handoff: crate::proxy::Handoff) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            c.on_tunnel(ctx, &self.shared, id, handoff);
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// The upstream socket of the tunnel on connection `ch`'s `stream` is
    /// ready.
    pub(crate) fn on_tunnel_event(&mut self, ctx: &mut Ctx<'_>, ch: usize, stream: u64) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            c.on_tunnel_event(stream);
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// A message published to a topic a WebSocket on connection `ch`'s
    /// `stream` subscribes to.
    pub(crate) fn on_publish(&mut self, ctx: &mut Ctx<'_>, ch: usize, stream: u64, frame: &[u8]) {
        if let Some(Some(c)) = self.conns.get_mut(ch) {
            c.on_publish(ctx, stream, frame);
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// A streamed body of connection `ch` has something new (a chunk, its
    /// end): send what its streams can.
    pub(crate) fn on_wake(&mut self, ctx: &mut Ctx<'_>, ch: usize) {
        if let Some(Some(_)) = self.conns.get(ch) {
            self.touched.push(ch);
            self.drive_touched(ctx);
        }
    }

    /// Shutdown or hand-over: GOAWAY on every connection, twice (see
    /// `GOAWAY_GRACE`); after the second each closes once its requests are
    /// answered and acknowledged. New connections are ignored (their
    /// Initials, that is: the client sends them again). After a reload
    /// the next generation reads the sockets and passes this one its
    /// datagrams, so this one stops reading.
    pub(crate) fn drain(&mut self, ctx: &mut Ctx<'_>) {
        self.draining = true;
        self.goaway_at = Some(ctx.now + GOAWAY_GRACE);
        if self.reading && !self.member.generations.is_newest(self.member.tag) {
            self.reading = false;
            self.update_interest(ctx.registry);
        }
        self.touch_all();
        self.drive_touched(ctx);
    }

    fn touch_all(&mut self) {
        for ch in 0..self.conns.len() {
            if self.conns[ch].is_some() {
                self.touched.push(ch);
            }
        }
    }

    /// The shutdown timeout passed: close what is left at once (the
    /// CONNECTION_CLOSE goes out now), and forget every connection, as
    /// the worker stops: counted closed, their deferred answers abandoned.
    pub(crate) fn close_all(&mut self, ctx: &mut Ctx<'_>) {
        for c in self.conns.iter_mut().flatten() {
            c.conn.close(
                ctx.now,
                VarInt::from_u32(crate::h3::frame::Code::NoError as u32),
                "shutting down".into(),
            );
        }
        for ch in 0..self.conns.len() {
            self.touched.push(ch);
        }
        self.drive_touched(ctx);
        for ch in 0..self.conns.len() {
            self.retire(ctx, ch);
        }
    }

    fn send(&self, t: &quinn_proto::Transmit, ctx: &Ctx<'_>) {
        let transmit = udp_transmit(t, &self.send_buf);
        // Stateless answers (Retry, version negotiation, reset) are not
        // kept when the socket is full: the client sends again.
        let _ = send_udp(&self.udp, &self.socket, &transmit, ctx);
    }
}

/// Registers `socket` for `reading` and `blocked` (room to send), or
/// removes it from the poll when it waits for neither.
fn set_interest(
    registry: &mio::Registry,
    socket: &mut mio::net::UdpSocket,
    token: mio::Token,
    registered: &mut bool,
    reading: bool,
    blocked: bool,
) {
    let interest = match (reading, blocked) {
        (true, true) => Some(mio::Interest::READABLE | mio::Interest::WRITABLE),
        (true, false) => Some(mio::Interest::READABLE),
        (false, true) => Some(mio::Interest::WRITABLE),
        (false, false) => None,
    };
    let done = match (interest, *registered) {
        (Some(i), true) => registry.reregister(socket, token, i),
        (Some(i), false) => registry.register(socket, token, i),
        (None, true) => registry.deregister(socket),
        (None, false) => Ok(()),
    };
    match done {
        Ok(()) => *registered = interest.is_some(),
        Err(e) => crate::log::debug(format_args!("QUIC: poll registration: {e}")),
    }
}

/// Datagrams one GSO send may carry: what the kernel allows, and no more
/// than fit in one UDP send of 64 KiB at the largest datagram size
/// (quinn-proto fills up to the limit it is given; past 65,535 bytes the
/// kernel refuses the whole batch with EMSGSIZE, which cost 15% of the
/// packets of a 10 MiB download before this cap), and at most
/// `GSO_SEGMENTS_MAX`.
fn max_segments(udp: &quinn_udp::UdpSocketState, shared: &Shared) -> usize {
    let datagram = usize::try_from(shared.endpoint.get_max_udp_payload_size()).unwrap_or(usize::MAX);
    let fit = 65_535 / datagram.max(1);
    udp.max_gso_segments().min(fit).clamp(1, GSO_SEGMENTS_MAX)
}

/// What became of a transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// Sent, or dropped for good (an error other than a full buffer:
    /// QUIC takes it as loss, as it would a drop on the path).
    Done,
    /// The socket's send buffer is full: try again once it is writable.
    Blocked,
}

/// quinn-proto's transmit of the first bytes of `buf`, as quinn-udp sends it.
fn udp_transmit<'b>(t: &quinn_proto::Transmit, buf: &'b [u8]) -> quinn_udp::Transmit<'b> {
    quinn_udp::Transmit {
        destination: t.destination,
        ecn: t.ecn.and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
        contents: &buf[..t.size],
        segment_size: t.segment_size,
        src_ip: t.src_ip,
    }
}

/// Sends one transmit.
fn send_udp(
    udp: &quinn_udp::UdpSocketState,
    socket: &mio::net::UdpSocket,
    t: &quinn_udp::Transmit<'_>,
    ctx: &Ctx<'_>,
) -> Sent {
    match udp.try_send(socket.into(), t) {
        Ok(()) => {
            if let Some(m) = ctx.metrics {
                m.bytes_sent.add(t.contents.len() as u64);
            }
            Sent::Done
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Sent::Blocked,
        Err(e) => {
            // EMSGSIZE is expected for a path MTU probe larger than the
            // path; QUIC takes any of these as loss.
            crate::log::debug(format_args!("QUIC: send to {}: {e}", t.destination));
            Sent::Done
        }
    }
}
