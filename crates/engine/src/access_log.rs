//! The access log: one line per request, Combined Log Format, JSON or a
//! template of `$variables`, buffered per worker and written in large
//! pieces (not a syscall per request). A log file is reopened on request (SIGUSR1, for logrotate):
//! workers pick the new file up at their next flush, so the request path
//! never looks at it.
//!
//! `127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "GET / HTTP/1.1" 200 13 "-" "curl/8.0"`
//!
//! `{"time":"1994-11-06T08:49:37Z","remote":"127.0.0.1","host":"example.org","method":"GET","target":"/","version":"HTTP/1.1","protocol":"HTTP/1.1","status":200,"bytes":13,"duration_us":84,"referer":null,"user_agent":"curl/8.0"}`
//!
//! The duration runs from the start of the worker's turn that read the
//! request (the clock the latency metrics use) to the response being queued
//! for writing, or for a deferred request to its answer being queued.
//!
//! A request the reverse proxy passed on also has nginx's `$upstream_*`
//! figures ([`UpstreamLog`]): the proxy's pool makes them and hands them to
//! the worker with the answer, and the worker to the line of the request
//! it answers (`Ctx::upstream_log`), so a request that was not proxied
//! carries nothing more than a `None`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where access log lines go.
#[derive(Clone, Debug)]
pub enum AccessLog {
    /// Standard output.
    Stdout,
    /// A file, opened for appending (created if missing).
    File(PathBuf),
}

impl AccessLog {
    /// `-` means standard output; anything else is a file path.
    pub fn from_arg(arg: &str) -> Self {
        if arg == "-" {
            AccessLog::Stdout
        } else {
            AccessLog::File(PathBuf::from(arg))
        }
    }

    pub(crate) fn open(&self) -> io::Result<Sink> {
        Ok(match self {
            AccessLog::Stdout => Sink::Stdout,
            AccessLog::File(path) => Sink::File(Arc::new(LogFile {
                path: path.clone(),
                file: Mutex::new(Arc::new(open_append(path)?)),
                generation: AtomicU64::new(0),
            })),
        })
    }
}

/// How each access log line is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Combined Log Format, as Apache and nginx write it: exactly that
    /// (log analysers parse it), so without the site: give sites their own
    /// logs, or use `json` or a template with `$site`.
    #[default]
    Combined,
    /// One JSON object per line: time (RFC 3339, UTC), remote, host,
    /// method, target, version, protocol (the same as version: the name
    /// nginx gives it), status, bytes, duration_us (to the answer's last
    /// byte sent), ttfb_us (to its head queued), referer, user_agent
    /// (null when absent), site (the label of the site the request went
    /// to, null on a server of one handler), request_id, traceparent
    /// (null when absent; see [`Template`]), tls_version (`TLSv1.3`, null
    /// in cleartext), tls_resumed (true, false, or null in cleartext and
    /// over HTTP/3), reason (the limit or rule behind a 4xx/5xx Peregrine
    /// made itself, [`Reason`]; null for a handler's answer), and the
    /// reverse proxy's
    /// upstream_addr, upstream_status, upstream_connect_time,
    /// upstream_header_time, upstream_response_time (seconds, as numbers
    /// with milliseconds; all null for a request that was not proxied; see
    /// [`Template`]). Bytes that are not UTF-8 are written as `\u00XX`.
    Json,
    /// A line of text with `$variables` (nginx's `log_format`): see
    /// [`Template`].
    Template(Template),
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    /// `combined`, `json`, or a template: anything with a `$`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "combined" => Ok(LogFormat::Combined),
            "json" => Ok(LogFormat::Json),
            _ if s.contains('$') => Template::parse(s).map(LogFormat::Template),
            _ => Err(format!(
                "unknown log format {s:?} (expected combined, json, or a template such as \
                 \"$remote_addr $request $status\")"
            )),
        }
    }
}

/// A custom access log line: text with `$name` or `${name}` variables,
/// nginx's names where nginx has one. A value that is absent is `-`;
/// bytes outside printable ASCII, `"` and `\\` are escaped as in the
/// Combined Log Format, so a client cannot forge or break a line.
///
/// | variable | value |
/// |---|---|
/// | `$remote_addr`, `$remote_port` | the client's address and port ([`crate::Request::client_addr`]; the port empty when a proxy gave none) |
/// | `$time_local` | `06/Nov/1994:08:49:37 +0000` |
/// | `$time_iso8601` | `1994-11-06T08:49:37Z` |
/// | `$request` | `GET /index.html HTTP/1.1` |
/// | `$request_method`, `$request_uri` | `GET`, `/index.html` |
/// | `$protocol`, `$server_protocol` | `HTTP/1.1` |
/// | `$host` | the request's host (its Host field), `-` without one |
/// | `$status` | `200` |
/// | `$body_bytes_sent` | body bytes, `0` for none |
/// | `$request_time_us` | microseconds from the read to the answer's last byte sent (nginx's `$request_time`: a slow download logs its whole duration) |
/// | `$request_time` | the same in seconds, with milliseconds: `0.012` |
/// | `$ttfb_us`, `$ttfb` | the same to the answer's head queued for writing (its first byte), in microseconds or seconds |
/// | `$http_referer`, `$http_user_agent` | those fields |
/// | `$site`, `$server_name` | the site's label (its first name), `-` without sites or for a host no site takes |
/// | `$upstream_addr` | where the reverse proxy sent the request: `127.0.0.1:9000`, `unix:/run/app.sock`; `-` when it was not proxied |
/// | `$upstream_status` | the upstream's status code; the proxy's own 502 or 504 when the upstream failed to answer |
/// | `$upstream_connect_time` | seconds to connect, with milliseconds (`0.000` on a kept-alive connection) |
/// | `$upstream_header_time` | seconds from the start of the exchange (connecting, or writing on a kept-alive connection) to the answer's head |
/// | `$request_id` | the request's id: the `X-Request-ID` a trusted proxy sent, else 32 hex digits made here; the reverse proxy sends the same upstream ([`crate::Request::request_id`]) |
/// | `$http_traceparent` | the W3C Trace Context `traceparent` field as sent (passed upstream unchanged by the reverse proxy) |
/// | `$ssl_protocol` | `TLSv1.2` or `TLSv1.3`; `-` in cleartext |
/// | `$ssl_session_reused` | `r` for a resumed TLS session, `.` for a full handshake, `-` in cleartext or where unknown (HTTP/3) |
/// | `$reason` | the limit or rule behind a 4xx/5xx Peregrine made itself ([`Reason`]: `head_timeout`, `body_too_large`, `rate_limited`, `upstream_connect`, ...); `-` for a handler's answer |
/// | `$upstream_response_time` | the same to the upstream's last byte (for an answer that streams, the line waits for the client's last byte, which comes after it); `-` for one that ended broken |
///
/// The upstream variables are `-` for a request the proxy did not pass
/// on, and each is `-` where the exchange did not get that far. When a
/// request was sent again on a fresh connection (a kept-alive one that
/// the upstream had closed), each lists every attempt, as nginx's do:
/// `127.0.0.1:9000, 127.0.0.1:9000`, `502, 200`, `0.000, 0.001`. In the
/// JSON format `upstream_addr` lists them; the numbers are the last
/// attempt's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// A template's variables (see [`Template`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    RemotePort,
    TimeLocal,
    TimeIso8601,
    Request,
    Method,
    Uri,
    Protocol,
    Host,
    Status,
    BodyBytes,
    TimeUs,
    TimeSecs,
    TtfbUs,
    TtfbSecs,
    Referer,
    UserAgent,
    Site,
    UpstreamAddr,
    UpstreamStatus,
    UpstreamConnectTime,
    UpstreamHeaderTime,
    UpstreamResponseTime,
    RequestId,
    Traceparent,
    SslProtocol,
    SslSessionReused,
    Reason,
}

/// Every variable by name.
const VARS: [(&str, Var); 31] = [
    ("remote_addr", Var::RemoteAddr),
    ("remote_port", Var::RemotePort),
    ("time_local", Var::TimeLocal),
    ("time_iso8601", Var::TimeIso8601),
    ("request", Var::Request),
    ("request_method", Var::Method),
    ("request_uri", Var::Uri),
    ("protocol", Var::Protocol),
    ("server_protocol", Var::Protocol),
    ("host", Var::Host),
    ("status", Var::Status),
    ("body_bytes_sent", Var::BodyBytes),
    ("request_time_us", Var::TimeUs),
    ("request_time", Var::TimeSecs),
    ("ttfb_us", Var::TtfbUs),
    ("ttfb", Var::TtfbSecs),
    ("http_referer", Var::Referer),
    ("http_user_agent", Var::UserAgent),
    ("http_host", Var::Host),
    ("site", Var::Site),
    ("server_name", Var::Site),
    ("upstream_addr", Var::UpstreamAddr),
    ("upstream_status", Var::UpstreamStatus),
    ("upstream_connect_time", Var::UpstreamConnectTime),
    ("upstream_header_time", Var::UpstreamHeaderTime),
    ("upstream_response_time", Var::UpstreamResponseTime),
    ("request_id", Var::RequestId),
    ("http_traceparent", Var::Traceparent),
    ("ssl_protocol", Var::SslProtocol),
    ("ssl_session_reused", Var::SslSessionReused),
    ("reason", Var::Reason),
];

impl Template {
    /// Parses `$name` and `${name}` variables; an unknown name, or a `$`
    /// with no name, is refused with a message naming it.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = s;
        while let Some(at) = rest.find('$') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, next) = match after.strip_prefix('{') {
                Some(braced) => match braced.find('}') {
                    Some(end) => (&braced[..end], &braced[end + 1..]),
                    None => return Err(format!("unclosed ${{ in the access log format {s:?}")),
                },
                None => {
                    let end = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            if name.is_empty() {
                return Err(format!("a $ with no variable name in the access log format {s:?}"));
            }
            let Some(&(_, var)) = VARS.iter().find(|(n, _)| *n == name) else {
                let known: Vec<String> = VARS.iter().map(|(n, _)| format!("${n}")).collect();
                return Err(format!(
                    "unknown variable ${name} in the access log format (known: {})",
                    known.join(" ")
                ));
            };
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Var(var));
            rest = next;
        }
        text.push_str(rest);
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template { pieces })
    }
}

/// A log file that can be reopened under its path while workers write to
/// it: each worker keeps the old file until its next flush.
pub(crate) struct LogFile {
    path: PathBuf,
    file: Mutex<Arc<File>>,
    /// Bumped by each reopen; a worker compares it with its own at flush.
    generation: AtomicU64,
}

impl LogFile {
    /// Opens the path again (after logrotate moved the old file away).
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let file = open_append(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(file);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn current(&self) -> (u64, Arc<File>) {
        // The generation first: a reopen between the two reads is seen
        // again at the next flush, never missed.
        let generation = self.generation.load(Ordering::Acquire);
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (generation, file)
    }
}

/// Reopens the access log file, if the log is a file.
pub(crate) fn reopen(sink: Option<&Sink>) -> io::Result<()> {
    match sink {
        Some(Sink::File(f)) => f.reopen(),
        _ => Ok(()),
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open access log {}: {e}", path.display())))
}

/// An opened log destination, shared by the workers.
#[derive(Clone)]
pub(crate) enum Sink {
    Stdout,
    File(Arc<LogFile>),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Stdout => f.write_str("Stdout"),
            Sink::File(file) => f.debug_tuple("File").field(&file.path).finish(),
        }
    }
}

/// Buffered bytes beyond which a worker writes its log out at once.
const FLUSH_BYTES: usize = 64 * 1024;

/// A worker's log buffer. Lines are only ever written whole, so lines of
/// different workers never interleave (O_APPEND writes are atomic).
pub(crate) struct LogWriter {
    sink: Sink,
    format: LogFormat,
    /// The file this worker writes to and the reopen generation it is of.
    file: Option<(u64, Arc<File>)>,
    buf: Vec<u8>,
}

/// The parts of a request a log line needs, owned, for answers that come
/// after the request buffer has moved on (deferred handlers).
#[derive(Clone, Debug, Default)]
pub(crate) struct LogRequest {
    pub(crate) request_line: Vec<u8>,
    pub(crate) referer: Option<Vec<u8>>,
    pub(crate) user_agent: Option<Vec<u8>>,
    pub(crate) host: Option<Vec<u8>>,
    /// The client's address, decided when the request was read (its
    /// fields are gone by the answer); else the connection's peer.
    pub(crate) client: Option<SocketAddr>,
    /// `request_line` ends with the request's id, this long, then its
    /// traceparent, if it had one, this long.
    pub(crate) id_len: u8,
    pub(crate) traceparent_len: Option<u8>,
    pub(crate) tls: Option<TlsFacts>,
}

impl LogRequest {
    /// The request's id (stored after the request line).
    pub(crate) fn id(&self) -> &[u8] {
        let n_trace = self.traceparent_len.map_or(0, usize::from);
        let end = self.request_line.len().saturating_sub(n_trace);
        &self.request_line[end.saturating_sub(usize::from(self.id_len))..end]
    }
}

/// The longest `traceparent` written: W3C Trace Context's is 55 bytes;
/// past 255 it is not one.
const TRACEPARENT_BYTES_MAX: usize = 255;

/// The request's `traceparent` field, if it has one of a sane length.
pub(crate) fn traceparent<'a>(req: &crate::Request<'a>) -> Option<&'a [u8]> {
    req.header_bytes("traceparent")
        .filter(|t| t.len() <= TRACEPARENT_BYTES_MAX)
}

/// What the reverse proxy learned of the upstream exchange behind an
/// answer (nginx's `$upstream_*` variables): made by the proxy's pool, on
/// the proxied path only.
#[derive(Clone, Debug, Default)]
pub(crate) struct UpstreamLog {
    /// Where the request was sent, if it was.
    pub(crate) addr: Option<UpstreamAddr>,
    /// The upstream's status, or the proxy's 502/504 when it gave none.
    pub(crate) status: Option<u16>,
    pub(crate) connect: Option<Duration>,
    pub(crate) header: Option<Duration>,
    /// Up to the answer's last byte: for an answer read whole before its
    /// head was relayed, at once; for one that streams, when the access
    /// log writes its line (the channel's end, `started` to it).
    pub(crate) response: Option<Duration>,
    /// When the exchange began (connecting, or writing on a kept-alive
    /// connection): what a streamed answer's response time runs from.
    pub(crate) started: Option<std::time::Instant>,
    /// The attempts before this one, when the request was sent again
    /// (a kept-alive connection the upstream had closed): written first,
    /// each variable a list as nginx's (`10.0.0.2:9000, 10.0.0.2:9000`,
    /// `502, 200`). `None` for nearly every request: no allocation.
    pub(crate) earlier: Option<Box<UpstreamLog>>,
}

/// Why Peregrine made a 4xx or 5xx answer itself: the limit or rule behind
/// it, for the access log's `reason` (`$reason`). One byte, carried by the
/// answer ([`crate::Response::with_reason`]); a handler's own answers have
/// none (`-`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// A malformed request (400): its head, its framing, a chunk.
    BadRequest,
    /// The head did not arrive within `head_timeout` (408).
    HeadTimeout,
    /// The body stopped coming within `body_timeout` (408).
    BodyTimeout,
    /// The body came slower than `min_rate_bytes_per_sec` (408).
    BodyMinRate,
    /// The head, or its fields, over `head_bytes_max` (431).
    HeaderTooLarge,
    /// The target over `uri_bytes_max` (414).
    UriTooLong,
    /// The body over `body_bytes_max` (413).
    BodyTooLarge,
    /// An `Expect` other than `100-continue` (417).
    Expectation,
    /// A method or transfer coding the engine does not implement (501).
    NotImplemented,
    /// An HTTP version other than 1.0 and 1.1 (505).
    Version,
    /// The worker's memory budget for bodies or heads is spent (503).
    MemoryBudget,
    /// A rate limit refused the client (429).
    RateLimited,
    /// Authentication failed or is missing (401), or the client is barred
    /// after failing it (429).
    Auth,
    /// An access rule refused the client (403).
    Forbidden,
    /// The proxy could not connect to the upstream (502).
    UpstreamConnect,
    /// The upstream did not connect or answer in time (504).
    UpstreamTimeout,
    /// The upstream closed or reset the connection before its answer (502).
    UpstreamClosed,
    /// The upstream's answer broke HTTP/1.1's rules (502).
    UpstreamInvalid,
    /// Every connection to the upstream was busy and its queue full (503).
    UpstreamBusy,
    /// Every upstream of the route is out (503).
    UpstreamDown,
    /// The handler panicked, or gave no answer (500).
    HandlerPanic,
    /// The handler's response was invalid (500).
    InvalidResponse,
}

impl Reason {
    /// The name the access log writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "bad_request",
            Reason::HeadTimeout => "head_timeout",
            Reason::BodyTimeout => "body_timeout",
            Reason::BodyMinRate => "body_min_rate",
            Reason::HeaderTooLarge => "header_too_large",
            Reason::UriTooLong => "uri_too_long",
            Reason::BodyTooLarge => "body_too_large",
            Reason::Expectation => "expectation",
            Reason::NotImplemented => "not_implemented",
            Reason::Version => "version",
            Reason::MemoryBudget => "memory_budget",
            Reason::RateLimited => "rate_limited",
            Reason::Auth => "auth",
            Reason::Forbidden => "forbidden",
            Reason::UpstreamConnect => "upstream_connect",
            Reason::UpstreamTimeout => "upstream_timeout",
            Reason::UpstreamClosed => "upstream_closed",
            Reason::UpstreamInvalid => "upstream_invalid",
            Reason::UpstreamBusy => "upstream_busy",
            Reason::UpstreamDown => "upstream_down",
            Reason::HandlerPanic => "handler_panic",
            Reason::InvalidResponse => "invalid_response",
        }
    }

    /// The reason of an error a request head's codec found.
    pub(crate) fn of_head(e: crate::codec::head::HeadError) -> Reason {
        use crate::codec::head::HeadError;
        match e {
            HeadError::BadRequest(_) | HeadError::NotHttp => Reason::BadRequest,
            HeadError::UriTooLong => Reason::UriTooLong,
            HeadError::HeadTooLarge => Reason::HeaderTooLarge,
            HeadError::BodyTooLarge => Reason::BodyTooLarge,
            HeadError::ExpectationFailed => Reason::Expectation,
            HeadError::NotImplemented | HeadError::MethodNotImplemented => Reason::NotImplemented,
            HeadError::VersionNotSupported => Reason::Version,
        }
    }

    /// The reason of a refusal known only by its status (an HTTP/2 or
    /// HTTP/3 stream refused by its session).
    pub(crate) fn of_refusal(status: u16) -> Reason {
        match status {
            413 => Reason::BodyTooLarge,
            414 => Reason::UriTooLong,
            431 => Reason::HeaderTooLarge,
            408 => Reason::BodyTimeout,
            501 => Reason::NotImplemented,
            503 => Reason::MemoryBudget,
            _ => Reason::BadRequest,
        }
    }
}

/// An upstream's address as `$upstream_addr` writes it.
#[derive(Clone, Debug)]
pub(crate) enum UpstreamAddr {
    Tcp(SocketAddr),
    /// `unix:` and the path (the upstream keeps it).
    Unix(Arc<crate::proxy::Upstream>),
}

impl UpstreamLog {
    /// Writes `one` of every attempt, earliest first, separated by `, `.
    fn write_each(&self, b: &mut Vec<u8>, one: &mut impl FnMut(&UpstreamLog, &mut Vec<u8>)) {
        if let Some(earlier) = &self.earlier {
            earlier.write_each(b, one);
            b.extend_from_slice(b", ");
        }
        one(self, b);
    }

    /// Every attempt's address, as a list (`-` for one that has none);
    /// false, with nothing written, when no attempt had one.
    fn write_addrs(&self, b: &mut Vec<u8>) -> bool {
        if self.earlier.is_none() {
            return self.write_addr(b);
        }
        self.write_each(b, &mut |u, b| {
            if !u.write_addr(b) {
                b.push(b'-');
            }
        });
        true
    }

    fn write_addr(&self, b: &mut Vec<u8>) -> bool {
        match &self.addr {
            Some(UpstreamAddr::Tcp(a)) => {
                let _ = write!(b, "{a}");
            }
            Some(UpstreamAddr::Unix(up)) => {
                b.extend_from_slice(b"unix:");
                escape(b, up.unix_path().map_or(&b""[..], |p| p.as_os_str().as_encoded_bytes()));
            }
            None => return false,
        }
        true
    }
}

/// Seconds with milliseconds, as nginx writes its times: `0.012`.
fn seconds_ms(b: &mut Vec<u8>, us: u64) {
    let ms = us / 1000;
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(n.format(ms / 1000).as_bytes());
    let _ = write!(b, ".{:03}", ms % 1000);
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One access log line's values.
pub(crate) struct Line<'a> {
    pub(crate) clf_time: &'a [u8],
    /// The client's address (`Request::client_addr`: the peer unless
    /// trusted proxies say otherwise); port 0 when unknown.
    pub(crate) peer: SocketAddr,
    pub(crate) method: &'a [u8],
    pub(crate) target: &'a [u8],
    pub(crate) version: &'a [u8],
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) referer: Option<&'a [u8]>,
    pub(crate) user_agent: Option<&'a [u8]>,
    pub(crate) host: Option<&'a [u8]>,
    /// The site's label (its first name), when the server has sites.
    pub(crate) site: Option<&'a str>,
    /// From the request's read to its answer's last byte sent.
    pub(crate) duration_us: Option<u64>,
    /// From the request's read to its answer's head queued (the first
    /// byte: it leaves with the batch it was queued in).
    pub(crate) ttfb_us: Option<u64>,
    /// The reverse proxy's figures, for a request it passed on.
    pub(crate) upstream: Option<&'a UpstreamLog>,
    /// `Request::request_id`; `None` for a request refused before it was
    /// one.
    pub(crate) request_id: Option<&'a [u8]>,
    /// The W3C `traceparent` field as the client sent it.
    pub(crate) traceparent: Option<&'a [u8]>,
    /// Over TLS: its version and whether the session was resumed.
    pub(crate) tls: Option<TlsFacts>,
    /// Why Peregrine made this 4xx/5xx itself; `None` for a handler's.
    pub(crate) reason: Option<Reason>,
}

/// What the access log says of a request's TLS connection (2 bytes: it
/// rides on every request and deferred record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFacts {
    pub(crate) version: Option<TlsVersion>,
    /// Whether the handshake resumed a session; `None` where the TLS
    /// library does not say (HTTP/3).
    pub(crate) resumed: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    /// nginx's `$ssl_protocol` spelling.
    fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
        }
    }
}

impl LogWriter {
    pub(crate) fn new(sink: Sink, format: LogFormat) -> Self {
        let file = match &sink {
            Sink::File(f) => Some(f.current()),
            Sink::Stdout => None,
        };
        LogWriter {
            sink,
            format,
            file,
            buf: Vec::with_capacity(FLUSH_BYTES + 4096),
        }
    }

    /// Appends one line, for the request just handled (or refused before
    /// a handler saw it).
    pub(crate) fn record(&mut self, line: &Line<'_>) {
        self.write(line);
    }

    fn write(&mut self, line: &Line<'_>) {
        match &self.format {
            LogFormat::Combined => combined_line(&mut self.buf, line),
            LogFormat::Json => json_line(&mut self.buf, line),
            LogFormat::Template(t) => template_line(&mut self.buf, t, line),
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// A line for a request whose parts were copied earlier: its answer's
    /// status and body bytes, and the reverse proxy's figures if it was
    /// proxied.
    pub(crate) fn record_owned(
        &mut self,
        clf_time: &[u8],
        peer: SocketAddr,
        req: &LogRequest,
        site: Option<&str>,
        (status, body_bytes, reason, upstream): (u16, u64, Option<Reason>, Option<&UpstreamLog>),
        (duration_us, ttfb_us): (u64, u64),
    ) {
        // The request line was stored whole and raw (`record` escapes it),
        // the id and traceparent after it; split it back into its parts.
        let line = &req.request_line;
        let n_trace = req.traceparent_len.map_or(0, usize::from);
        let n_tail = usize::from(req.id_len) + n_trace;
        let (line, tail) = line.split_at(line.len().saturating_sub(n_tail));
        let (id, trace) = tail.split_at(usize::from(req.id_len).min(tail.len()));
        let mut parts = line.splitn(3, |&b| b == b' ');
        let (m, t, v) = (
            parts.next().unwrap_or(b"-"),
            parts.next().unwrap_or(b"-"),
            parts.next().unwrap_or(b"-"),
        );
        self.write(&Line {
            clf_time,
            peer: req.client.unwrap_or(peer),
            method: m,
            target: t,
            version: v,
            status,
            body_bytes,
            referer: req.referer.as_deref(),
            user_agent: req.user_agent.as_deref(),
            host: req.host.as_deref(),
            site,
            duration_us: Some(duration_us),
            ttfb_us: Some(ttfb_us),
            upstream,
            request_id: Some(id).filter(|id| !id.is_empty()),
            traceparent: req.traceparent_len.map(|_| trace),
            tls: req.tls,
            reason,
        });
    }

    /// Writes out what is buffered. Errors are reported once per flush on
    /// stderr; a full disk must not stop the server.
    pub(crate) fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let result = match &self.sink {
            Sink::Stdout => io::stdout().lock().write_all(&self.buf),
            Sink::File(shared) => {
                // One atomic load per flush (every 64 KiB, and at each
                // sweep), not per request: a reopened file is picked up here.
                let seen = self.file.as_ref().map_or(u64::MAX, |(g, _)| *g);
                if shared.generation.load(Ordering::Acquire) != seen {
                    self.file = Some(shared.current());
                }
                match &self.file {
                    Some((_, f)) => (&**f).write_all(&self.buf),
                    None => Ok(()),
                }
            }
        };
        if let Err(e) = result {
            crate::log::error(format_args!("access log write failed: {e}"));
        }
        self.buf.clear();
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The client's IP address, or `unix:` for a Unix-domain client (as
/// nginx's `$remote_addr`).
fn remote_addr(b: &mut Vec<u8>, peer: SocketAddr) {
    if crate::sys::stream::is_unix(peer) {
        b.extend_from_slice(b"unix:");
    } else {
        // Formatting an IP address into a Vec does not allocate beyond it.
        let _ = write!(b, "{}", peer.ip());
    }
}

/// `ip - - [time] "method target version" status bytes "referer" "agent"`.
fn combined_line(b: &mut Vec<u8>, line: &Line<'_>) {
    remote_addr(b, line.peer);
    b.extend_from_slice(b" - - [");
    b.extend_from_slice(line.clf_time);
    b.extend_from_slice(b"] \"");
    request(b, line);
    b.extend_from_slice(b"\" ");
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(n.format(line.status).as_bytes());
    b.push(b' ');
    if line.body_bytes == 0 {
        b.push(b'-');
    } else {
        b.extend_from_slice(n.format(line.body_bytes).as_bytes());
    }
    for field in [line.referer, line.user_agent] {
        b.extend_from_slice(b" \"");
        match field {
            Some(v) => escape(b, v),
            None => b.push(b'-'),
        }
        b.push(b'"');
    }
    b.push(b'\n');
}

/// `method target version`, escaped.
fn request(b: &mut Vec<u8>, line: &Line<'_>) {
    escape(b, line.method);
    b.push(b' ');
    escape(b, line.target);
    b.push(b' ');
    escape(b, line.version);
}

/// One JSON object on one line (see [`LogFormat::Json`]).
fn json_line(b: &mut Vec<u8>, line: &Line<'_>) {
    b.extend_from_slice(b"{\"time\":\"");
    rfc3339_from_clf(b, line.clf_time);
    b.extend_from_slice(b"\",\"remote\":\"");
    remote_addr(b, line.peer);
    b.extend_from_slice(b"\",\"host\":");
    json_string(b, line.host);
    b.extend_from_slice(b",\"method\":");
    json_string(b, Some(line.method));
    b.extend_from_slice(b",\"target\":");
    json_string(b, Some(line.target));
    b.extend_from_slice(b",\"version\":");
    json_string(b, Some(line.version));
    b.extend_from_slice(b",\"protocol\":");
    json_string(b, Some(line.version));
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(b",\"status\":");
    b.extend_from_slice(n.format(line.status).as_bytes());
    b.extend_from_slice(b",\"bytes\":");
    b.extend_from_slice(n.format(line.body_bytes).as_bytes());
    for (name, us) in [
        (&b",\"duration_us\":"[..], line.duration_us),
        (b",\"ttfb_us\":", line.ttfb_us),
    ] {
        b.extend_from_slice(name);
        match us {
            Some(us) => b.extend_from_slice(n.format(us).as_bytes()),
            None => b.extend_from_slice(b"null"),
        }
    }
    b.extend_from_slice(b",\"referer\":");
    json_string(b, line.referer);
    b.extend_from_slice(b",\"user_agent\":");
    json_string(b, line.user_agent);
    b.extend_from_slice(b",\"site\":");
    json_string(b, line.site.map(str::as_bytes));
    b.extend_from_slice(b",\"request_id\":");
    json_string(b, line.request_id);
    b.extend_from_slice(b",\"traceparent\":");
    json_string(b, line.traceparent);
    b.extend_from_slice(b",\"tls_version\":");
    json_string(b, line.tls.and_then(|t| t.version).map(|v| v.as_str().as_bytes()));
    b.extend_from_slice(match line.tls.and_then(|t| t.resumed) {
        Some(true) => b",\"tls_resumed\":true",
        Some(false) => b",\"tls_resumed\":false",
        None => b",\"tls_resumed\":null",
    });
    b.extend_from_slice(b",\"reason\":");
    json_string(b, line.reason.map(|r| r.as_str().as_bytes()));
    let up = line.upstream;
    b.extend_from_slice(b",\"upstream_addr\":");
    let at = b.len();
    b.push(b'"');
    if up.is_some_and(|u| u.write_addrs(b)) {
        b.push(b'"');
    } else {
        b.truncate(at);
        b.extend_from_slice(b"null");
    }
    b.extend_from_slice(b",\"upstream_status\":");
    match up.and_then(|u| u.status) {
        Some(s) => b.extend_from_slice(n.format(s).as_bytes()),
        None => b.extend_from_slice(b"null"),
    }
    for (name, time) in [
        (&b",\"upstream_connect_time\":"[..], up.and_then(|u| u.connect)),
        (b",\"upstream_header_time\":", up.and_then(|u| u.header)),
        (b",\"upstream_response_time\":", up.and_then(|u| u.response)),
    ] {
        b.extend_from_slice(name);
        match time {
            Some(t) => seconds_ms(b, micros(t)),
            None => b.extend_from_slice(b"null"),
        }
    }
    b.extend_from_slice(b"}\n");
}

/// A [`Template`]'s line.
fn template_line(b: &mut Vec<u8>, template: &Template, line: &Line<'_>) {
    let mut n = itoa::Buffer::new();
    let or_dash = |b: &mut Vec<u8>, v: Option<&[u8]>| match v {
        Some(v) => escape(b, v),
        None => b.push(b'-'),
    };
    for piece in &template.pieces {
        let var = match piece {
            Piece::Text(text) => {
                b.extend_from_slice(text.as_bytes());
                continue;
            }
            Piece::Var(var) => *var,
        };
        match var {
            Var::RemoteAddr => remote_addr(b, line.peer),
            // A Unix client has no port, nor one a proxy did not give:
            // empty, as nginx writes it.
            Var::RemotePort if line.peer.port() == 0 => {}
            Var::RemotePort => b.extend_from_slice(n.format(line.peer.port()).as_bytes()),
            Var::TimeLocal => b.extend_from_slice(line.clf_time),
            Var::TimeIso8601 => rfc3339_from_clf(b, line.clf_time),
            Var::Request => request(b, line),
            Var::Method => escape(b, line.method),
            Var::Uri => escape(b, line.target),
            Var::RequestId => or_dash(b, line.request_id),
            Var::Traceparent => or_dash(b, line.traceparent),
            Var::SslProtocol => or_dash(b, line.tls.and_then(|t| t.version).map(|v| v.as_str().as_bytes())),
            // nginx's: `r` resumed, `.` not; `-` in cleartext or unknown.
            Var::SslSessionReused => b.push(match line.tls.and_then(|t| t.resumed) {
                Some(true) => b'r',
                Some(false) => b'.',
                None => b'-',
            }),
            Var::Reason => or_dash(b, line.reason.map(|r| r.as_str().as_bytes())),
            Var::Protocol => escape(b, line.version),
            Var::Host => or_dash(b, line.host),
            Var::Status => b.extend_from_slice(n.format(line.status).as_bytes()),
            Var::BodyBytes => b.extend_from_slice(n.format(line.body_bytes).as_bytes()),
            Var::TimeUs => match line.duration_us {
                Some(us) => b.extend_from_slice(n.format(us).as_bytes()),
                None => b.push(b'-'),
            },
            Var::TimeSecs => match line.duration_us {
                Some(us) => seconds_ms(b, us),
                None => b.push(b'-'),
            },
            Var::TtfbUs => match line.ttfb_us {
                Some(us) => b.extend_from_slice(n.format(us).as_bytes()),
                None => b.push(b'-'),
            },
            Var::TtfbSecs => match line.ttfb_us {
                Some(us) => seconds_ms(b, us),
                None => b.push(b'-'),
            },
            Var::Referer => or_dash(b, line.referer),
            Var::UserAgent => or_dash(b, line.user_agent),
            Var::Site => or_dash(b, line.site.map(str::as_bytes)),
            Var::UpstreamAddr => {
                if !line.upstream.is_some_and(|u| u.write_addrs(b)) {
                    b.push(b'-');
                }
            }
            Var::UpstreamStatus => match line.upstream {
                Some(up) => up.write_each(b, &mut |u, b| match u.status {
                    Some(s) => b.extend_from_slice(itoa::Buffer::new().format(s).as_bytes()),
                    None => b.push(b'-'),
                }),
                None => b.push(b'-'),
            },
            Var::UpstreamConnectTime | Var::UpstreamHeaderTime | Var::UpstreamResponseTime => match line.upstream {
                Some(up) => up.write_each(b, &mut |u, b| {
                    let time = match var {
                        Var::UpstreamConnectTime => u.connect,
                        Var::UpstreamHeaderTime => u.header,
                        _ => u.response,
                    };
                    match time {
                        Some(t) => seconds_ms(b, micros(t)),
                        None => b.push(b'-'),
                    }
                }),
                None => b.push(b'-'),
            },
        }
    }
    b.push(b'\n');
}

/// `06/Nov/1994:08:49:37 +0000` → `1994-11-06T08:49:37Z` (the cache keeps
/// CLF's form; the log's times are UTC).
fn rfc3339_from_clf(b: &mut Vec<u8>, clf: &[u8]) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
    ];
    if clf.len() < 20 {
        b.extend_from_slice(clf);
        return;
    }
    let month = MONTHS.iter().position(|m| &clf[3..6] == *m).map_or(0, |i| i + 1);
    b.extend_from_slice(&clf[7..11]);
    b.push(b'-');
    b.push(b'0' + (month / 10) as u8);
    b.push(b'0' + (month % 10) as u8);
    b.push(b'-');
    b.extend_from_slice(&clf[0..2]);
    b.push(b'T');
    b.extend_from_slice(&clf[12..20]);
    b.push(b'Z');
}

/// A JSON string (or `null`). Valid UTF-8 is kept, with `"`, `\\` and
/// control characters escaped; each byte of invalid UTF-8 becomes
/// `\u00XX`, so a line is always valid JSON and cannot be forged.
fn json_string(b: &mut Vec<u8>, s: Option<&[u8]>) {
    let Some(mut s) = s else {
        b.extend_from_slice(b"null");
        return;
    };
    b.push(b'"');
    loop {
        let (valid, bad) = match std::str::from_utf8(s) {
            Ok(all) => (all, &[][..]),
            Err(e) => {
                let (ok, rest) = s.split_at(e.valid_up_to());
                let n_bad = e.error_len().unwrap_or(rest.len());
                // `ok` is valid UTF-8: from_utf8 said so up to here.
                (std::str::from_utf8(ok).unwrap_or_default(), &rest[..n_bad])
            }
        };
        for c in valid.bytes() {
            match c {
                b'"' | b'\\' => {
                    b.push(b'\\');
                    b.push(c);
                }
                0x00..=0x1f | 0x7f => hex_escape(b, c),
                _ => b.push(c),
            }
        }
        for &c in bad {
            hex_escape(b, c);
        }
        let used = valid.len() + bad.len();
        if used >= s.len() {
            break;
        }
        s = &s[used..];
    }
    b.push(b'"');
}

fn hex_escape(b: &mut Vec<u8>, c: u8) {
    b.extend_from_slice(b"\\u00");
    b.push(b"0123456789abcdef"[usize::from(c >> 4)]);
    b.push(b"0123456789abcdef"[usize::from(c & 0xf)]);
}

/// Copies `s`, escaping `"`, `\` and bytes outside printable ASCII as
/// `\xHH`, so a log line cannot be forged or broken by a client.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    for &c in s {
        match c {
            b'"' | b'\\' => {
                out.push(b'\\');
                out.push(c);
            }
            0x20..=0x7e => out.push(c),
            _ => {
                out.extend_from_slice(b"\\x");
                out.push(b"0123456789abcdef"[usize::from(c >> 4)]);
                out.push(b"0123456789abcdef"[usize::from(c & 0xf)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line `format` writes for a GET through `record`, as the
    /// connection calls it for a request without a host or a duration.
    fn recorded(format: LogFormat, peer: &str, target: &[u8], status: u16, body_bytes: u64, ua: &[u8]) -> String {
        let mut w = LogWriter::new(Sink::Stdout, format);
        let (time, peer) = (b"06/Nov/1994:08:49:37 +0000", peer.parse().unwrap());
        w.record(&Line {
            clf_time: time,
            peer,
            method: b"GET",
            target,
            version: b"HTTP/1.1",
            status,
            body_bytes,
            referer: None,
            user_agent: Some(ua),
            host: None,
            site: None,
            duration_us: None,
            ttfb_us: None,
            upstream: None,
            request_id: None,
            traceparent: None,
            tls: None,
            reason: None,
        });
        String::from_utf8(std::mem::take(&mut w.buf)).unwrap()
    }

    #[test]
    fn lines_are_combined_log_format_and_escaped() {
        let line = recorded(LogFormat::Combined, "10.0.0.1:5555", b"/a\"b", 200, 13, b"ua\n\xff");
        assert_eq!(
            line,
            "10.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a\\\"b HTTP/1.1\" 200 13 \"-\" \"ua\\x0a\\xff\"\n"
        );
    }

    /// A Unix-domain client is `unix:`, as nginx's `$remote_addr`, in
    /// every format; its `$remote_port` is empty.
    #[test]
    fn a_unix_client_is_logged_as_unix() {
        let peer = crate::UNIX_PEER.to_string();
        let line = recorded(LogFormat::Combined, &peer, b"/", 200, 1, b"ua");
        assert!(line.starts_with("unix: - - [06/Nov/1994"), "{line}");
        let line = recorded(LogFormat::Json, &peer, b"/", 200, 1, b"ua");
        assert!(line.contains("\"remote\":\"unix:\""), "{line}");
        let format: LogFormat = "[$remote_addr][$remote_port] $status".parse().unwrap();
        assert_eq!(recorded(format, &peer, b"/", 200, 1, b"ua"), "[unix:][] 200\n");
        let format: LogFormat = "$remote_addr $remote_port".parse().unwrap();
        assert_eq!(
            recorded(format, "10.0.0.1:5555", b"/", 200, 1, b"ua"),
            "10.0.0.1 5555\n"
        );
    }

    #[test]
    fn json_lines_are_valid_json_whatever_the_bytes() {
        let line = recorded(
            LogFormat::Json,
            "[::1]:5555",
            b"/caf\xc3\xa9\"\\",
            304,
            0,
            b"ua\n\xff\x7f",
        );
        assert_eq!(
            line,
            "{\"time\":\"1994-11-06T08:49:37Z\",\"remote\":\"::1\",\"host\":null,\"method\":\"GET\",\
             \"target\":\"/caf\u{e9}\\\"\\\\\",\"version\":\"HTTP/1.1\",\"protocol\":\"HTTP/1.1\",\
             \"status\":304,\"bytes\":0,\"duration_us\":null,\"ttfb_us\":null,\
             \"referer\":null,\"user_agent\":\"ua\\u000a\\u00ff\\u007f\",\"site\":null,\
             \"request_id\":null,\"traceparent\":null,\"tls_version\":null,\"tls_resumed\":null,\"reason\":null,\
             \"upstream_addr\":null,\"upstream_status\":null,\"upstream_connect_time\":null,\
             \"upstream_header_time\":null,\"upstream_response_time\":null}\n"
        );
    }

    #[test]
    fn templates_write_every_variable_escaped() {
        let format: LogFormat = "$remote_addr:$remote_port [$time_local] $time_iso8601 \"$request\" \
                                 $request_method ${request_uri}? $protocol $server_protocol $host $http_host \
                                 $status $body_bytes_sent $request_time_us $request_time $ttfb_us $ttfb \
                                 \"$http_referer\" \"$http_user_agent\" $site $server_name $request_id \
                                 $http_traceparent $ssl_protocol $ssl_session_reused $reason"
            .parse()
            .unwrap();
        let mut w = LogWriter::new(Sink::Stdout, format);
        w.write(&Line {
            clf_time: b"06/Nov/1994:08:49:37 +0000",
            peer: "10.0.0.1:5555".parse().unwrap(),
            method: b"GET",
            target: b"/a\"b",
            version: b"HTTP/1.1",
            status: 200,
            body_bytes: 0,
            referer: None,
            user_agent: Some(b"ua\n"),
            host: Some(b"example.org"),
            site: Some("example.org"),
            duration_us: Some(12_345),
            ttfb_us: Some(2_345),
            upstream: None,
            request_id: Some(b"id-1"),
            traceparent: Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            tls: Some(TlsFacts {
                version: Some(TlsVersion::Tls13),
                resumed: Some(true),
            }),
            reason: Some(Reason::BodyMinRate),
        });
        let line = String::from_utf8(std::mem::take(&mut w.buf)).unwrap();
        assert_eq!(
            line,
            "10.0.0.1:5555 [06/Nov/1994:08:49:37 +0000] 1994-11-06T08:49:37Z \"GET /a\\\"b HTTP/1.1\" \
             GET /a\\\"b? HTTP/1.1 HTTP/1.1 example.org example.org 200 0 12345 0.012 2345 0.002 \"-\" \"ua\\x0a\" \
             example.org example.org id-1 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 TLSv1.3 r body_min_rate\n"
        );
    }

    /// nginx's `$upstream_*`: the address (`unix:` and the path for a
    /// socket), the status, seconds with milliseconds, `-` where absent.
    #[test]
    fn templates_write_the_upstream_figures_and_dashes_without() {
        let format: LogFormat = "$upstream_addr $upstream_status $upstream_connect_time $upstream_header_time \
                                 $upstream_response_time"
            .parse()
            .unwrap();
        let line = |upstream: Option<&UpstreamLog>| {
            let mut w = LogWriter::new(Sink::Stdout, format.clone());
            w.write(&Line {
                clf_time: b"06/Nov/1994:08:49:37 +0000",
                peer: "10.0.0.1:5555".parse().unwrap(),
                method: b"GET",
                target: b"/",
                version: b"HTTP/1.1",
                status: 200,
                body_bytes: 0,
                referer: None,
                user_agent: None,
                host: None,
                site: None,
                duration_us: None,
                ttfb_us: None,
                upstream,
                request_id: None,
                traceparent: None,
                tls: None,
                reason: None,
            });
            String::from_utf8(std::mem::take(&mut w.buf)).unwrap()
        };
        let tcp = UpstreamLog {
            addr: Some(UpstreamAddr::Tcp("10.0.0.2:9000".parse().unwrap())),
            status: Some(201),
            connect: Some(Duration::ZERO),
            header: Some(Duration::from_micros(12_345)),
            response: None,
            started: None,
            earlier: None,
        };
        assert_eq!(line(Some(&tcp)), "10.0.0.2:9000 201 0.000 0.012 -\n");
        let up = Arc::new(crate::proxy::Upstream::parse("unix:/run/app.sock").unwrap());
        let unix = UpstreamLog {
            addr: Some(UpstreamAddr::Unix(up)),
            status: Some(502),
            ..UpstreamLog::default()
        };
        assert_eq!(line(Some(&unix)), "unix:/run/app.sock 502 - - -\n");
        assert_eq!(line(None), "- - - - -\n");
        // A request sent again: every attempt, earliest first.
        let retried = UpstreamLog {
            addr: Some(UpstreamAddr::Tcp("10.0.0.3:9000".parse().unwrap())),
            status: Some(200),
            connect: Some(Duration::from_millis(2)),
            header: Some(Duration::from_millis(5)),
            response: Some(Duration::from_millis(7)),
            started: None,
            earlier: Some(Box::new(UpstreamLog {
                status: Some(502),
                ..tcp.clone()
            })),
        };
        assert_eq!(
            line(Some(&retried)),
            "10.0.0.2:9000, 10.0.0.3:9000 502, 200 0.000, 0.002 0.012, 0.005 -, 0.007\n"
        );
    }

    #[test]
    fn templates_refuse_unknown_variables_by_name() {
        let refused = |s: &str| s.parse::<LogFormat>().unwrap_err();
        let e = refused("$remote_addr $bytes_sent");
        assert!(
            e.starts_with("unknown variable $bytes_sent in the access log format (known: $remote_addr"),
            "{e}"
        );
        assert!(refused("cost $ 5").contains("a $ with no variable name"));
        assert!(refused("${status").contains("unclosed ${"));
        assert!(refused("common").contains("expected combined, json, or a template"));
        assert_eq!(
            "plain $status".parse::<LogFormat>().unwrap(),
            LogFormat::Template(Template {
                pieces: vec![Piece::Text("plain ".into()), Piece::Var(Var::Status)],
            })
        );
    }
}
