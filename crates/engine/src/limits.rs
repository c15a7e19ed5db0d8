//! Every limit the engine enforces, in one place, with its default and why.
//!
//! Names carry their unit (`_bytes_max`, `_timeout`). The CLI exposes each one
//! as a flag, and [`crate::Server::limits`] takes the whole set.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The limits one server applies to every connection and request.
///
/// Each connection's timeouts are kept in its worker's timer set and fire
/// on time (to the poll's millisecond); housekeeping (flushing the access
/// log, retrying accepts after running out of descriptors, the shutdown
/// deadline) runs once per [`Limits::sweep_interval`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request head (request line and fields), in bytes; longer → 431.
    /// nginx allows at most 4 × 8 KiB; 32 KiB keeps big cookies working.
    pub head_bytes_max: usize,
    /// Longest request target, in bytes; longer → 414. nginx's line limit is 8 KiB.
    pub uri_bytes_max: usize,
    /// Most header fields in one request; more → 431. Values above 256 act
    /// as 256 (the size of the parser's stack array).
    pub n_headers_max: usize,
    /// Largest request body, in bytes (decoded, for chunked); larger → 413.
    /// nginx's `client_max_body_size` default is 1 MiB.
    pub body_bytes_max: u64,
    /// Most bytes of a request body that nobody reads (a handler that
    /// answers from the head: a 405, a file for a GET carrying a body)
    /// are read and thrown away after the answer, within
    /// `DISCARD_TIMEOUT`, to keep the connection alive. A body declared
    /// larger gets its answer with `Connection: close`, then the lingering
    /// close; so does one that is not all there in time. nginx discards
    /// any amount; 1 MiB bounds the time one client can make us read.
    pub discard_bytes_max: u64,
    /// Time allowed for a whole request head once its first byte has arrived,
    /// extended by a second per `min_rate_bytes_per_sec` bytes of it that
    /// have come, up to `head_timeout_max` (Apache's `mod_reqtimeout`
    /// `header=10-40,MinRate=500`); past it → 408 and close. Defends
    /// against slowloris. On a TLS listener it also bounds the handshake,
    /// counted from accept (past it: close, as no 408 can be sent before
    /// the handshake). An HTTP/2 header block begun (HEADERS, then its
    /// CONTINUATIONs) must be complete within it too.
    pub head_timeout: Duration,
    /// The most `head_timeout` is extended to for a head arriving steadily.
    pub head_timeout_max: Duration,
    /// On a listener that requires the PROXY protocol, time allowed from
    /// accept for the whole PROXY header; past it the connection is
    /// closed unanswered. nginx's `proxy_protocol_timeout` and HAProxy's
    /// `timeout client` during `accept-proxy` play this part; nginx's
    /// default is 30 s, but a load balancer writes its header at once
    /// (in the connection's first segment), so 5 s is ample and makes a
    /// silent connection from a trusted address cost little. Then
    /// `head_timeout` runs for the request (or the TLS handshake).
    pub proxy_header_timeout: Duration,
    /// Grace given to a request body once its head is complete: past it,
    /// the body must keep arriving at `min_rate_bytes_per_sec` averaged
    /// over 5 s, else → 408 and close (HTTP/2 and HTTP/3: 408 on that
    /// stream alone). Not restarted by each read: a client sending a byte
    /// now and then is ended at the grace's end. No rate is asked while
    /// the server itself does not read (a streamed body's reader is
    /// behind). Over HTTP/2, a body streamed to its reader (which the
    /// server does not hold: at most the reader's pipe) is ended only by a
    /// silence longer than this, so that a gRPC client stream may send a
    /// small message now and then.
    pub body_timeout: Duration,
    /// The slowest a request head may grow past `head_timeout`, and a body
    /// arrive past `body_timeout`, in bytes per second; 0 asks no rate.
    pub min_rate_bytes_per_sec: u64,
    /// How long an idle keep-alive connection is kept open: 75 s, nginx's,
    /// above the 60 s of the commonest load balancers (AWS ALB, GCP's),
    /// which would otherwise send a request on a connection the server is
    /// closing at that moment and report the client a 502.
    pub idle_timeout: Duration,
    /// Time allowed between two writes that make progress; a client that stops
    /// reading longer than this is dropped (nginx's `send_timeout`: 60 s).
    ///
    /// A deferred request (see [`crate::Request::defer`]) has no timeout:
    /// the application owns its deadline and must answer or drop the
    /// `Responder` (which answers 500).
    pub send_timeout: Duration,
    /// Most open connections per worker; further connections are refused
    /// with a best-effort 503 and closed at once. 4,096 keeps the worst
    /// case (`worst_case_bytes_per_worker`) under 1 GiB; nginx's default
    /// `worker_connections` is 512.
    pub n_conns_max: usize,
    /// Most open connections per client address and worker (an IPv6
    /// client counts per /64), as nginx's `limit_conn`; past it, a new
    /// connection is closed at accept. 0 is no cap. A reverse proxy or
    /// load balancer in front connects from few addresses: raise it, or
    /// set 0, there (the benchmarks, one client address with up to 4,096
    /// connections, set 0).
    pub conns_per_ip_max: usize,
    /// Bytes of request bodies a worker may hold buffered at once (for
    /// handlers that take the body whole: HTTP/1.1 read buffers grown
    /// past their pooled size, HTTP/2 streams' bodies, WebSocket messages
    /// assembled from fragments or frames that came in pieces; a whole
    /// frame in one read is handed out where it lies). A body that would
    /// pass it is refused with 503 and `Retry-After`, so that many clients
    /// each sending up to `body_bytes_max` cannot take the worker's memory
    /// (128 HTTP/2 streams of 1 MiB each were 133 MB); a WebSocket message
    /// that would is refused with 1013 (try again later).
    pub body_budget_bytes: usize,
    /// Bytes of answers a worker may hold queued for clients (output
    /// buffers held by connections, and the reverse proxy's answers read
    /// ahead of their clients). Past it, a connection with anything
    /// queued is not read (nor its pipelined requests answered) until its
    /// client has taken it: 50 clients pipelining 20,000 requests each
    /// without reading then cost 8 MB, not 17.5.
    pub output_budget_bytes: usize,
    /// Pending response bytes above which the engine stops answering pipelined
    /// requests until the client has read what it was sent.
    pub write_buffer_bytes_max: usize,
    /// On shutdown, how long requests in flight are given to finish.
    pub shutdown_timeout: Duration,
    /// How often the worker's housekeeping runs (the access log's flush,
    /// accepting again after EMFILE, the shutdown deadline); kept between
    /// 1 ms and 60 s. Timeouts do not wait for it.
    pub sweep_interval: Duration,
    /// Most concurrent streams one HTTP/2 connection may open
    /// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with
    /// RST_STREAM(REFUSED_STREAM). nginx and h2o: 128 and 100.
    pub h2_streams_max: u32,
    /// Most concurrent request streams one HTTP/3 connection may open
    /// (QUIC's initial_max_streams_bidi); the client waits for more credit
    /// past it. quic-go (Caddy) and nginx: 100 and 128.
    pub h3_streams_max: u32,
    /// How long an HTTP/3 connection may stay without a packet from the
    /// client before it is dropped (QUIC's max_idle_timeout), and without
    /// a request open, whatever packets (PINGs, ACKs) come meanwhile.
    /// Caddy's and quic-go's: 30 s; nginx's `quic_timeout`: 60 s.
    pub h3_idle_timeout: Duration,
    /// Largest UDP payload we send or announce (max_udp_payload_size, and
    /// the ceiling of path MTU discovery): 1452 fits a 1500-byte Ethernet
    /// MTU under IPv6 and UDP headers, as quinn's default probe does.
    pub h3_udp_payload_bytes_max: u16,
    /// QUIC handshakes a worker may have in progress before it asks new
    /// clients to prove their address first (a Retry, RFC 9000 §8.1): a
    /// flood of Initials from forged addresses then costs a stateless
    /// packet each, not a connection's state and a handshake's crypto.
    /// 0 asks every client.
    pub h3_handshakes_before_retry: usize,
    /// Most HTTP/1.1 connections a worker keeps open to all its reverse
    /// proxy upstreams together (busy or idle; each upstream's own
    /// `max_conns` applies as well). Past it a request waits in its
    /// upstream's queue, an idle connection to another upstream being
    /// closed to make room. It bounds what the pool may read past the
    /// output budget: an answer whose channel is empty reads once more
    /// while the budget is spent (`UPSTREAM_READ_BYTES`), or nothing
    /// would wake it. 1,024 is four upstreams at their default 256,
    /// 64 MiB at worst; nginx has no such cap (its `keepalive` bounds
    /// idle connections only).
    pub upstream_conns_max: usize,
    /// The reverse proxy's response caches per worker: the sum of
    /// [`Cache::bytes_max`](crate::proxy::Cache::bytes_max) over the
    /// routes that have one (0, the default: none). Not a limit the
    /// engine applies (each cache bounds itself) but a term of
    /// [`Limits::worst_case_bytes_per_worker`]: whoever gives routes
    /// their caches says it here (the CLI does).
    pub proxy_cache_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_bytes_max: 32 * 1024,
            uri_bytes_max: 8 * 1024,
            n_headers_max: 100,
            body_bytes_max: 1024 * 1024,
            discard_bytes_max: 1024 * 1024,
            head_timeout: Duration::from_secs(10),
            head_timeout_max: Duration::from_secs(40),
            proxy_header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(20),
            min_rate_bytes_per_sec: 500,
            idle_timeout: Duration::from_secs(75),
            send_timeout: Duration::from_secs(30),
            n_conns_max: 4 * 1024,
            conns_per_ip_max: 256,
            body_budget_bytes: 64 * 1024 * 1024,
            output_budget_bytes: 64 * 1024 * 1024,
            write_buffer_bytes_max: 64 * 1024,
            shutdown_timeout: Duration::from_secs(10),
            sweep_interval: Duration::from_millis(250),
            h2_streams_max: 128,
            h3_streams_max: 100,
            h3_idle_timeout: Duration::from_secs(30),
            h3_udp_payload_bytes_max: 1452,
            h3_handshakes_before_retry: 64,
            upstream_conns_max: 1024,
            proxy_cache_bytes: 0,
        }
    }
}

/// Header fields parsed per request at most: the stack array's size.
/// `Limits::n_headers_max` above this is treated as this.
pub(crate) const HEADERS_ARRAY_MAX: usize = 256;

/// What one connection may hold at most, beside the budgets: a read
/// buffer (HTTP/2's is the largest), the answers of one turn queued in its
/// write buffer, what rustls may hold encrypted, and its state (the
/// connection, TLS and HTTP/2 session: an idle TLS connection measured
/// 12 KiB, `tests/tls_memory.rs`).
pub(crate) const CONN_STATE_BYTES: usize = 16 * 1024;

impl Limits {
    /// What permessage-deflate's streams take per worker at most (made
    /// when first used, whatever the number of WebSockets: one
    /// compressor per window size asked for, one decompressor, a spare
    /// message buffer).
    pub const WS_DEFLATE_BYTES: u64 = crate::ws::deflate::SHARED_BYTES_MAX as u64;

    /// The request buffers the reverse proxy keeps on a worker's thread
    /// for the next requests' heads (`proxy::give_bytes`: 64 of at most
    /// 1 KiB).
    pub const PROXY_SPARE_BYTES: u64 = crate::proxy::SPARES_BYTES_MAX as u64;

    /// The most memory one worker's connections can hold, in bytes:
    ///
    /// ```text
    /// body_budget_bytes + output_budget_bytes + WS_DEFLATE_BYTES
    ///   + PROXY_SPARE_BYTES
    ///   + n_conns_max × (H2_READ_BYTES + write_buffer_bytes_max
    ///                    + INLINE_BODY_BYTES_MAX + TLS_SEND_BYTES_MAX
    ///                    + CONN_STATE_BYTES)
    ///   + upstream_conns_max × (UPSTREAM_READ_BYTES + UPSTREAM_KEPT_BYTES)
    /// ```
    ///
    /// Buffered request bodies never pass their budget (503 past it) and
    /// queued answers pass theirs by at most one turn's per connection
    /// (no connection with output queued is read while it is spent). An
    /// answer body held in memory and not yet sent (a handler's bytes, a
    /// multipart range answer, at most 1 MiB from the file server) counts
    /// as queued output on every protocol: HTTP/2 and HTTP/3 take no new
    /// stream's request while a connection's exceed its share
    /// (`write_buffer_bytes_max`), as HTTP/1.1 does not read a pipelining
    /// one; each connection may still hold the one answer its first
    /// request gets, a term the handlers' answer sizes bound, not this
    /// figure. The
    /// reverse proxy's answers read ahead of their clients (each
    /// upstream's `proxy_buffer_bytes`, 1 MiB, a channel per answer) are
    /// queued answers too: counted in `output_budget_bytes`, and while it
    /// is spent an upstream whose channel holds bytes is not read (one
    /// whose channel is empty may add one read, `UPSTREAM_READ_BYTES`,
    /// or nothing would wake it: that overshoot is the last term, each
    /// upstream connection's); without that, 256 connections to one
    /// upstream could hold 256 MiB beside the figure (`proxy_memory.rs`).
    /// The rest is each connection's own; permessage-deflate's streams are
    /// the worker's, not a connection's (`WS_DEFLATE_BYTES`, under 3 MiB,
    /// made when first used). With the defaults: 64 + 64 MiB, 4,096 ×
    /// 192 KiB, under 3 MiB and 1,024 × 64 KiB: 964 MiB, rounded up. HTTP/2 upstreams
    /// (`h2c://`) are not in the last term: their streams' windows stay
    /// shut while the budget is spent. HTTP/3 connections are not in it: QUIC's
    /// flow control bounds what each reads and sends
    /// (`H3_SEND_WINDOW_BYTES`, `H3_CONN_RECV_WINDOW_BYTES`), their
    /// answers held unsent count in `output_budget_bytes` as above, and
    /// Retry bounds their handshakes.
    /// The proxy's response caches add [`Limits::proxy_cache_memory`].
    pub fn worst_case_bytes_per_worker(&self) -> u64 {
        let per_conn =
            H2_READ_BYTES + self.write_buffer_bytes_max + INLINE_BODY_BYTES_MAX + TLS_SEND_BYTES_MAX + CONN_STATE_BYTES;
        (self.body_budget_bytes as u64)
            .saturating_add(self.output_budget_bytes as u64)
            .saturating_add(Self::WS_DEFLATE_BYTES)
            .saturating_add(Self::PROXY_SPARE_BYTES)
            .saturating_add((self.n_conns_max as u64).saturating_mul(per_conn as u64))
            .saturating_add(
                (self.upstream_conns_max as u64).saturating_mul((UPSTREAM_READ_BYTES + UPSTREAM_KEPT_BYTES) as u64),
            )
            .saturating_add(self.proxy_cache_memory())
    }

    /// What the proxy's response caches may hold per worker: twice
    /// [`Limits::proxy_cache_bytes`], the entries plus as much again in
    /// answers being read in (`proxy/cache.rs`: a fill reserves its bytes
    /// against the same bound, apart from the entries).
    pub fn proxy_cache_memory(&self) -> u64 {
        self.proxy_cache_bytes.saturating_mul(2)
    }
}

/// The values a configuration may give each limit; the command line refuses
/// others, naming the range. Wide enough for any real deployment, narrow
/// enough to catch a slip of the keyboard (`--idle-timeout 1e9`,
/// `--head-bytes-max 10`) before it takes a server down or holds every
/// connection forever. The library itself takes any value.
impl Limits {
    /// Below 1 KiB an ordinary browser's request (cookies, user agent,
    /// `Accept-*`) gets 431; above 1 MiB a head is an attack, not a request.
    pub const HEAD_BYTES_MAX_RANGE: RangeInclusive<usize> = 1024..=1024 * 1024;
    /// A request target needs room for a path; none is longer than a head.
    pub const URI_BYTES_MAX_RANGE: RangeInclusive<usize> = 64..=1024 * 1024;
    /// Browsers send 10 to 20 fields; the parser's stack array holds 256,
    /// so a larger value would only pretend.
    pub const N_HEADERS_MAX_RANGE: RangeInclusive<usize> = 16..=256;
    /// 0 refuses every body (a static site takes none); 1 TiB is more than
    /// any upload that one request should carry.
    pub const BODY_BYTES_MAX_RANGE: RangeInclusive<u64> = 0..=1 << 40;
    /// 0 closes after every answer given before its body; past 1 GiB a
    /// discard is a download the client imposes on us.
    pub const DISCARD_BYTES_MAX_RANGE: RangeInclusive<u64> = 0..=1 << 30;
    /// Every timeout: not below 250 ms (a timeout shorter than a slow
    /// network's round trips would cut honest clients); not above a day,
    /// past which a timeout is no timeout.
    pub const TIMEOUT_RANGE: RangeInclusive<Duration> = Duration::from_millis(250)..=Duration::from_secs(24 * 3600);
    /// 0 asks no rate; past 1 MB/s a slow mobile client would be cut.
    pub const MIN_RATE_BYTES_PER_SEC_RANGE: RangeInclusive<u64> = 0..=1_000_000;
    /// At least one connection; at most the kernel's ceiling on open
    /// descriptors (`fs.nr_open`, 1,048,576 by default), which no worker
    /// can exceed.
    pub const N_CONNS_MAX_RANGE: RangeInclusive<usize> = 1..=1024 * 1024;
    /// 0 (no cap) up to `N_CONNS_MAX_RANGE`'s end.
    pub const CONNS_PER_IP_MAX_RANGE: RangeInclusive<usize> = 0..=1024 * 1024;
    /// The budgets: at least 1 MiB (one body, one answer), at most 1 TiB.
    pub const BUDGET_BYTES_RANGE: RangeInclusive<usize> = 1024 * 1024..=1 << 40;
    /// At least one pooled buffer (`BUFFER_BYTES`), at most 64 MiB of
    /// answers queued for a client that does not read.
    pub const WRITE_BUFFER_BYTES_MAX_RANGE: RangeInclusive<usize> = BUFFER_BYTES..=64 * 1024 * 1024;
    /// Worker threads (`Server::workers`): one per core is the default; a
    /// thousand is far beyond any machine's cores, each worker costing a
    /// thread and a listening socket per address.
    pub const N_WORKERS_RANGE: RangeInclusive<usize> = 1..=1024;
    /// `Strict-Transport-Security` max-age: up to two years, the longest
    /// the HSTS preload list asks for.
    pub const HSTS_SECS_RANGE: RangeInclusive<u64> = 0..=2 * 365 * 24 * 3600;
    /// HTTP/2 streams per connection: RFC 9113 §6.5.2 advises at least
    /// 100; beyond 1,024 one client holds a worker's attention too long.
    pub const H2_STREAMS_MAX_RANGE: RangeInclusive<u32> = 1..=1024;
    /// HTTP/3 streams per connection: as for HTTP/2.
    pub const H3_STREAMS_MAX_RANGE: RangeInclusive<u32> = 1..=1024;
    /// QUIC needs 1200 bytes (RFC 9000 §14); 65527 is UDP's ceiling
    /// (quinn-proto's too).
    pub const H3_UDP_PAYLOAD_BYTES_MAX_RANGE: RangeInclusive<u16> = 1200..=65527;
    /// 0 (always Retry) to a number no worker reaches honestly.
    pub const H3_HANDSHAKES_BEFORE_RETRY_RANGE: RangeInclusive<usize> = 0..=100_000;
    /// At least one upstream connection; at most `N_CONNS_MAX_RANGE`'s end.
    pub const UPSTREAM_CONNS_MAX_RANGE: RangeInclusive<usize> = 1..=1024 * 1024;
}

/// How long a request body nobody reads may take to arrive after its
/// answer was queued (see `Limits::discard_bytes_max`); then the
/// connection closes. nginx's `lingering_timeout` is 5 s.
pub(crate) const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the outbound broker (`outbound::Broker`) may spend connecting
/// to an upstream for one request, over all the addresses its name
/// resolves to; then the worker gets ETIMEDOUT. The broker answers one
/// request at a time, so this bounds how long one dead upstream delays
/// the others' connections. nginx's `proxy_connect_timeout` is 60 s, a
/// wait no client sits through; HAProxy's examples use 5 s, several
/// times a SYN's first retransmission (1 s).
pub(crate) const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes a WebSocket tunnel of the reverse proxy reads from its upstream
/// ahead of the client (`conn/tunnel.rs`; for HTTP/2, what the tunnels of
/// one connection hold together): past it the upstream is not read until
/// the client takes some, so a client that stops reading holds its
/// upstream back (nginx's upgraded connections use one `proxy_buffer_size`
/// buffer each way, 4 or 8 KiB; 64 KiB fills a loopback write). The other
/// way, the client is not read while `BUFFER_BYTES` of its bytes wait for
/// the upstream (HTTP/2: while its stream's window is spent).
pub(crate) const PROXY_TUNNEL_BYTES: usize = 64 * 1024;

/// A proxied WebSocket tunnel whose client has ended its side (FIN, or
/// a reset, which reads the same; HTTP/2: END_STREAM) waits at most this
/// long, from its last byte, for the upstream to end its own (HAProxy's
/// `timeout client-fin`): a WebSocket server closes at once, and an
/// upstream that does not must not hold the connection for the whole
/// idle timeout.
pub(crate) const PROXY_TUNNEL_FIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes the reverse proxy reads from an HTTP/1.1 upstream at a time
/// (`proxy/pool.rs`): a loopback write fills it. Also what one upstream
/// connection may read past the output budget (see
/// `Limits::worst_case_bytes_per_worker`).
pub(crate) const UPSTREAM_READ_BYTES: usize = 64 * 1024;

/// What an upstream connection keeps between answers beside its read
/// buffer: the buffer its short answers' fields and body are written into
/// (`proxy/pool.rs`, `UpConn::lines`), at most 1 KiB of capacity.
pub(crate) const UPSTREAM_KEPT_BYTES: usize = crate::proxy::pool::IDLE_BUF_BYTES_MAX;

/// Read buffers of `UPSTREAM_READ_BYTES` a worker keeps for the reverse
/// proxy once their chunk has been written to its client
/// (`buffers::BufPool::give_chunk`): a long answer's reads are moved
/// whole into its channel and written from there, so each read needs a
/// buffer of its own. An upstream is read until its channel is full
/// (`proxy_buffer_bytes`, 1 MiB: 16 reads) before its client drains it,
/// so 16 cover one such burst; a buffer made afresh is zeroed (`vec!`),
/// which with 8 kept was 2.7 to 2.9 % of the worker's CPU under proxy-1m
/// (perf; with 16 it fell below 0.5 %).
/// 16 × 64 KiB per worker at most; while kept they count in the output
/// budget (`Limits::output_budget_bytes`), as the answers they held did.
pub(crate) const UPSTREAM_CHUNKS_KEPT: usize = 16;

/// Size of the pooled read and write buffers a busy connection borrows.
/// A request head or pipelined batch that does not fit grows its buffer
/// (up to the limits above); of grown buffers, only write buffers are
/// kept, a few per worker (`buffers::BufPool::give_write`).
pub(crate) const BUFFER_BYTES: usize = 16 * 1024;

/// Spare buffers a worker keeps for the next busy connection; beyond this,
/// released buffers are freed so an idle server gives memory back.
pub(crate) const POOL_BUFFERS_MAX: usize = 256;

/// Responses whose body is at most this many bytes are copied into the
/// output buffer next to their head, so head and body leave in one write.
/// Larger shared bodies are written from where they live with `writev`.
pub(crate) const INLINE_BODY_BYTES_MAX: usize = 16 * 1024;

/// Encrypted bytes rustls may hold for one TLS connection before we stop
/// encrypting more (`set_buffer_limit`): a slow reader of a 10 MiB file
/// costs this much, not the file. 64 KiB is rustls' own default, four full
/// records, enough to fill a loopback `writev` in one call.
pub(crate) const TLS_SEND_BYTES_MAX: usize = 64 * 1024;

/// How much request data an HTTP/2 client may send on a connection before
/// we return window (WINDOW_UPDATE once half of it is used). Each stream
/// keeps the protocol's default, 64 KiB (SETTINGS_INITIAL_WINDOW_SIZE is
/// never raised); 1 MiB lets many streams upload at once without a round
/// trip per 64 KiB. Window past a stream's first 64 KiB goes only to a
/// stream whose handler takes its body (buffered, or read as it arrives
/// while its reader has room), or to one whose ignored body has no
/// content-length and is dropped as it comes. The worst case per
/// connection: the 1 MiB in flight is parsed a frame at a time from a
/// 32 KiB read buffer, so what stays is only what handlers buffer (held
/// against `body_budget_bytes`) and what readers queue (256 KiB each,
/// `BODY_READER_BYTES`).
pub(crate) const H2_CONN_WINDOW: i64 = 1024 * 1024;

/// Control frames (SETTINGS, PING, RST_STREAM, PRIORITY, WINDOW_UPDATE,
/// empty DATA, CONTINUATION), and RST_STREAMs its mistakes make us send,
/// an HTTP/2 client may cause beyond the work it asked for (4 per response,
/// 1 per 4 KiB of body sent); past that, GOAWAY with ENHANCE_YOUR_CALM.
/// Covers the flood attacks of 2019 (CVE-2019-9512, 9514, 9515, 9518) and
/// Rapid Reset (CVE-2023-44487).
pub(crate) const H2_CONTROL_FRAMES_BASE: u64 = 1000;

/// The read buffer of an HTTP/2 connection: room for the largest frame we
/// accept (16 KiB + 9) after a partial one.
pub(crate) const H2_READ_BYTES: usize = 2 * BUFFER_BYTES + 64;

/// An HTTP/3 response body is read in chunks of this size, one DATA frame
/// each, as quinn-proto's send buffer takes them: a file is never read
/// whole, and a frame header costs 5 bytes per 16 KiB.
pub(crate) const H3_CHUNK_BYTES: usize = 16 * 1024;

/// Bytes quinn-proto may buffer per HTTP/3 connection for sending (sent
/// and not yet acknowledged, or not yet sent): what a slow reader of a
/// large file costs us. 1 MiB covers the bandwidth-delay product of
/// 80 Mbit/s at 100 ms.
pub(crate) const H3_SEND_WINDOW_BYTES: u64 = 1024 * 1024;

/// Request bytes one HTTP/3 stream, and one connection, may have in
/// flight before the client waits for credit (QUIC flow control):
/// bodies are collected up to `body_bytes_max` anyway.
pub(crate) const H3_STREAM_RECV_WINDOW_BYTES: u32 = 256 * 1024;
pub(crate) const H3_CONN_RECV_WINDOW_BYTES: u32 = 1024 * 1024;

/// Bytes of a request body that wait for its reader (`body::streamed`)
/// before the connection stops reading from the client (HTTP/1.1) or
/// granting it flow-control window (HTTP/2, HTTP/3): a streamed upload
/// costs at most about this much memory, whatever its size. 256 KiB keeps
/// a loopback upload at full speed while the reader hashes or writes.
pub(crate) const BODY_READER_BYTES: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// Above the 60 s idle timeout of the commonest load balancers, so
    /// that they, not we, close a kept-alive connection (issue 30).
    #[test]
    fn idle_timeout_outlasts_load_balancers() {
        assert_eq!(Limits::default().idle_timeout, Duration::from_secs(75));
    }

    /// Each upstream connection may read once past the output budget
    /// (issue 26): the worst case counts that read per connection, and
    /// the defaults stay under the 1 GiB `n_conns_max` promises.
    #[test]
    fn worst_case_counts_a_read_per_upstream_connection() {
        let one = Limits {
            upstream_conns_max: 1,
            ..Limits::default()
        };
        let many = Limits {
            upstream_conns_max: 1001,
            ..Limits::default()
        };
        assert_eq!(
            many.worst_case_bytes_per_worker() - one.worst_case_bytes_per_worker(),
            1000 * (64 * 1024 + 1024)
        );
        let worst = Limits::default().worst_case_bytes_per_worker();
        assert!(worst < 1 << 30, "{worst}");
        assert!(worst >= 1024 * 64 * 1024 + 128 * 1024 * 1024, "{worst}");
    }

    /// A route's cache holds up to its size in entries and as much again
    /// in answers being read in, per worker (issue 32): both count.
    #[test]
    fn the_worst_case_counts_the_proxy_caches_twice() {
        let none = Limits::default();
        let cached = Limits {
            proxy_cache_bytes: 3 * 64 * 1024 * 1024,
            ..Limits::default()
        };
        assert_eq!(
            cached.worst_case_bytes_per_worker() - none.worst_case_bytes_per_worker(),
            2 * 3 * 64 * 1024 * 1024
        );
    }
}
