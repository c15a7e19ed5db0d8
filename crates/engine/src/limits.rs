//! Every limit the engine enforces, in one place, with its default and why.
//!
//! Names carry their unit (`_bytes_max`, `_timeout`). The CLI exposes each one
//! as a flag, and [`crate::Server::limits`] takes the whole set.

use std::time::Duration;

/// The limits one server applies to every connection and request.
///
/// Timeouts are checked by a sweep that runs once per
/// [`Limits::sweep_interval`], so each fires up to that much late.
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
    /// Time allowed for a whole request head once its first byte has arrived;
    /// past it → 408 and close. Defends against slowloris. On a TLS
    /// listener it also bounds the handshake, counted from accept (past
    /// it: close, as no 408 can be sent before the handshake).
    pub head_timeout: Duration,
    /// Longest wait for more bytes of a request body once its head is
    /// complete (restarted by every read that brings some); past it → 408
    /// and close.
    pub body_timeout: Duration,
    /// How long an idle keep-alive connection is kept open (nginx: 75 s).
    pub idle_timeout: Duration,
    /// Time allowed between two writes that make progress; a client that stops
    /// reading longer than this is dropped (nginx's `send_timeout`: 60 s).
    ///
    /// A deferred request (see [`crate::Request::defer`]) has no timeout:
    /// the application owns its deadline and must answer or drop the
    /// `Responder` (which answers 500).
    pub send_timeout: Duration,
    /// Most open connections per worker; further connections are refused
    /// with a best-effort 503 and closed at once.
    pub n_conns_max: usize,
    /// Pending response bytes above which the engine stops answering pipelined
    /// requests until the client has read what it was sent.
    pub write_buffer_bytes_max: usize,
    /// On shutdown, how long requests in flight are given to finish.
    pub shutdown_timeout: Duration,
    /// How often timeouts are checked; kept between 1 ms and 60 s.
    pub sweep_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_bytes_max: 32 * 1024,
            uri_bytes_max: 8 * 1024,
            n_headers_max: 100,
            body_bytes_max: 1024 * 1024,
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(30),
            n_conns_max: 16 * 1024,
            write_buffer_bytes_max: 256 * 1024,
            shutdown_timeout: Duration::from_secs(10),
            sweep_interval: Duration::from_millis(250),
        }
    }
}

/// Size of the pooled read and write buffers a busy connection borrows.
/// A request head or pipelined batch that does not fit grows its buffer
/// (up to the limits above); grown buffers are not returned to the pool.
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
