//! An upstream: where a proxy route sends its requests, how the path and
//! Host are rewritten on the way, and the limits of its connections.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::resolve::Resolved;
use super::tls::UpstreamTls;
use crate::response::{Response, SharedBytes};

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// What the upstream's `Host` field says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HostHeader {
    /// The client's Host, as Caddy's `reverse_proxy` passes it (the
    /// default: a backend that builds absolute URLs sees the site's name).
    #[default]
    Preserve,
    /// The upstream's own `host:port`, as nginx's `proxy_pass` sends by
    /// default (a backend behind name-based virtual hosting needs it).
    Upstream,
}

/// Where an upstream listens.
#[derive(Clone, Debug)]
pub(crate) enum Addr {
    /// Every address its name resolves to (at start, then every 30 s:
    /// `resolve.rs`), tried in order.
    Tcp(Arc<Resolved>),
    Unix(PathBuf),
}

/// One upstream server and how requests are rewritten for it. Made with
/// [`Upstream::parse`]; the builder methods set the rest.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// Names the upstream's connection pool in every worker.
    pub(crate) id: usize,
    pub(crate) addr: Addr,
    /// What the configuration said (`http://api:9000/v1/`), for logs and
    /// errors; never sent to a client.
    url: String,
    /// `host[:port]`, the Host field when it is rewritten.
    authority: String,
    /// ` HTTP/1.1\r\nHost: {authority}\r\n`, the end of the request
    /// line and the Host line of every request that names `authority`
    /// (`head::start_routed`), made with the route so that a reload's new
    /// route has its own; `None` if `authority` is no valid Host (each
    /// such request is refused, as when it was checked per request).
    host_line: Option<Box<[u8]>>,
    /// The URL's path, if it had one: it replaces the route's prefix.
    path: Option<String>,
    /// Whether `path` is all `PLAIN` bytes (its own encoding), so
    /// written as it is before a plain rest of the request's path.
    path_plain: bool,
    /// The route's prefix, as matched (`/api/`).
    prefix: String,
    host_header: HostHeader,
    /// Whether the client's `Proxy-Authorization` goes on (off: Caddy's
    /// choice; RFC 9110 §11.7.2, it is for the proxy that asked, and
    /// this one asks none).
    proxy_authorization: bool,
    pub(crate) max_conns: usize,
    pub(crate) queue_max: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) continue_wait: Duration,
    pub(crate) buffer_bytes: usize,
    /// How an `https://` upstream's TLS is set up (`tls.rs`).
    pub(crate) tls: Option<UpstreamTls>,
    /// An `h2c://` upstream: HTTP/2 by prior knowledge (`h2up`).
    h2: bool,
    /// The body of the proxy's own 502, 503 and 504 (HTML), in place of
    /// the engine's plain text.
    error_page: Option<Arc<Vec<u8>>>,
    /// The addresses it may be connected to, checked at each connect
    /// (`guard.rs`); `None`: any (the operator named it).
    pub(crate) guard: Option<Arc<super::guard::AddressGuard>>,
}

/// Why an upstream URL was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamError(String);

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UpstreamError {}

impl UpstreamError {
    pub(crate) fn new(why: String) -> UpstreamError {
        UpstreamError(why)
    }
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// Bytes written as they are in a canonical path: RFC 3986's unreserved
/// characters, sub-delims, `:`, `@` and `/`; everything else
/// percent-encoded.
pub(super) const PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The bytes `PATH` writes as they are: visible ASCII but `PATH`'s. A
/// path of these only is its own decoding and its own encoding
/// (`upstream_path_to`'s short way).
pub(super) const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut b = 0x21;
    while b < 0x7f {
        plain[b] = !matches!(
            b as u8,
            b'"' | b'#' | b'%' | b'<' | b'>' | b'?' | b'[' | b'\\' | b']' | b'^' | b'`' | b'{' | b'|' | b'}'
        );
        b += 1;
    }
    plain
};

impl Upstream {
    /// Connections to one upstream a worker keeps open at most (nginx's
    /// `max_conns`, per worker as nginx's is without a shared zone).
    pub const MAX_CONNS: usize = 256;
    /// Requests that wait for a connection, per worker; past it, 503.
    pub const QUEUE_MAX: usize = 1024;
    /// A kept-alive connection idle longer is closed: below Node's 5 s
    /// keep-alive, so the upstream never closes one as it is reused.
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
    /// Connecting longer is a 504 (nginx's `proxy_connect_timeout` is
    /// 60 s; a dead upstream should not hold a client that long).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Waiting longer between two reads of an answer is a 504 (nginx's
    /// `proxy_read_timeout`).
    pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
    /// Bytes of an answer read ahead of the client (`proxy_buffer_bytes`).
    pub const BUFFER_BYTES: usize = 1024 * 1024;
    /// How long a client's `Expect: 100-continue`, forwarded with the
    /// head, waits for the upstream's 100 (or its answer) before the
    /// proxy sends the client its own: an upstream that ignores the
    /// expectation and reads the body (gunicorn's sync workers, many
    /// frameworks) would otherwise keep the client waiting for its own
    /// timeout (curl: 1 s; a client that waits for the 100, as RFC 9110
    /// §10.1.1 allows, until the body deadline's 408). Go's transport
    /// waits 1 s the same way upstream (`ExpectContinueTimeout`); this is
    /// below curl's second, so curl never waits it out.
    pub const CONTINUE_WAIT: Duration = Duration::from_millis(250);

    /// `http://HOST[:PORT][/PATH]`, `https://HOST[:PORT][/PATH]`,
    /// `h2c://HOST[:PORT][/PATH]` (cleartext HTTP/2 by prior knowledge,
    /// RFC 9113 §3.3: a gRPC server's port), `h2s://HOST[:PORT][/PATH]`
    /// (HTTP/2 over TLS, ALPN `h2`, port 443 unless given; verified as
    /// `https://` is) or `unix:PATH`. A host name is resolved now (at start: never on an
    /// event loop). A path replaces the route's prefix, as nginx's
    /// `proxy_pass` with a URI does; without one the request's path goes
    /// unchanged. An `https://` upstream's certificate is verified against
    /// the system's roots (loaded now) as HOST, sent as SNI unless it is
    /// an IP address (then the certificate needs that IP address);
    /// [`Upstream::ca_file`] and [`Upstream::insecure_skip_verify`] change
    /// that.
    pub fn parse(url: &str) -> Result<Upstream, UpstreamError> {
        let err = |why: &str| UpstreamError(format!("upstream {url:?}: {why}"));
        let mut tls = None;
        let h2 = url.starts_with("h2c://") || url.starts_with("h2s://");
        let (addr, authority, path) = if let Some(path) = url.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(err("a unix: upstream needs a socket path"));
            }
            (Addr::Unix(PathBuf::from(path)), "localhost".to_owned(), None)
        } else if let Some((rest, default_port)) = url
            .strip_prefix("http://")
            .map(|r| (r, 80))
            .or_else(|| url.strip_prefix("https://").map(|r| (r, 443)))
            .or_else(|| url.strip_prefix("h2c://").map(|r| (r, 80)))
            .or_else(|| url.strip_prefix("h2s://").map(|r| (r, 443)))
        {
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], Some(&rest[i..])),
                None => (rest, None),
            };
            if authority.is_empty() || authority.contains('@') {
                return Err(err("expected http[s]://HOST[:PORT][/PATH]"));
            }
            let (host, port) = split_host_port(authority, default_port).ok_or_else(|| err("bad host or port"))?;
            if default_port == 443 {
                let made = if h2 {
                    UpstreamTls::new_h2(host)
                } else {
                    UpstreamTls::new(host)
                };
                tls = Some(made.map_err(|e| err(&e))?);
            }
            if let Some(p) = path {
                if p.contains(['?', '#']) || p.split('/').any(|s| s == "." || s == "..") {
                    return Err(err("the path may not hold a query, a fragment or dot segments"));
                }
            }
            let addrs = Resolved::new(host, port).map_err(|e| err(&format!("cannot resolve {host}: {e}")))?;
            (Addr::Tcp(addrs), authority.to_owned(), path.map(str::to_owned))
        } else {
            return Err(err(
                "expected http[s]://HOST[:PORT][/PATH], h2[cs]://HOST[:PORT][/PATH] or unix:PATH",
            ));
        };
        let host_line = crate::codec::head::is_valid_host(authority.as_bytes()).then(|| {
            let mut line = Vec::new();
            crate::codec::client::version_and_host(&mut line, authority.as_bytes());
            line.into_boxed_slice()
        });
        let path_plain = path
            .as_deref()
            .is_some_and(|p: &str| p.bytes().all(|b| PLAIN[usize::from(b)]));
        Ok(Upstream {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            addr,
            url: url.to_owned(),
            host_line,
            authority,
            path_plain,
            path,
            prefix: "/".to_owned(),
            host_header: HostHeader::Preserve,
            proxy_authorization: false,
            tls,
            h2,
            max_conns: Upstream::MAX_CONNS,
            queue_max: Upstream::QUEUE_MAX,
            idle_timeout: Upstream::IDLE_TIMEOUT,
            connect_timeout: Upstream::CONNECT_TIMEOUT,
            read_timeout: Upstream::READ_TIMEOUT,
            continue_wait: Upstream::CONTINUE_WAIT,
            buffer_bytes: Upstream::BUFFER_BYTES,
            error_page: None,
            guard: None,
        })
    }

    /// The route's prefix (`/api/`): with an upstream path, it is what
    /// that path replaces.
    pub fn prefix(mut self, prefix: &str) -> Upstream {
        self.prefix = if prefix.starts_with('/') {
            prefix.to_owned()
        } else {
            format!("/{prefix}")
        };
        self
    }

    /// What the upstream's `Host` says.
    pub fn host_header(mut self, host: HostHeader) -> Upstream {
        self.host_header = host;
        self
    }

    /// Passes the client's `Proxy-Authorization` on to the upstream
    /// (nginx's default: an upstream that is itself a proxy asking for
    /// credentials). Off by default, as in Caddy: RFC 9110 §11.7.2 says
    /// the field is consumed by the proxy that asked for it, and this
    /// one asks none, so credentials meant for a proxy do not reach an
    /// application and its logs.
    pub fn proxy_authorization(mut self, pass: bool) -> Upstream {
        self.proxy_authorization = pass;
        self
    }

    /// Whether the client's `Proxy-Authorization` goes on.
    pub fn passes_proxy_authorization(&self) -> bool {
        self.proxy_authorization
    }

    /// Connections kept open at most, per worker.
    pub fn max_conns(mut self, n: usize) -> Upstream {
        self.max_conns = n.max(1);
        self
    }

    /// Requests that may wait for a connection, per worker, when
    /// `max_conns` are busy; past it, 503 with `Retry-After: 1`.
    pub fn queue_max(mut self, n: usize) -> Upstream {
        self.queue_max = n;
        self
    }

    /// An HTML page answered, with the status, in place of the engine's
    /// plain `502 Bad Gateway`, `503 Service Unavailable` or `504 Gateway
    /// Timeout` (nginx's `error_page 502 503 504 /50x.html`). Whatever the
    /// page says, the upstream's own text and address never reach the
    /// client: they go to the error log.
    pub fn error_page(mut self, html: Vec<u8>) -> Upstream {
        self.error_page = Some(Arc::new(html));
        self
    }

    /// The proxy's answer of `status` (502, 503 or 504): the error page
    /// if there is one, else the engine's plain one; `reason` for the
    /// access log.
    pub(crate) fn error_answer(&self, status: u16, reason: crate::Reason) -> Response {
        let answer = match &self.error_page {
            Some(page) => Response::html(crate::Body::Shared(SharedBytes::new(page.clone()))).with_status(status),
            None => Response::error(status),
        };
        let answer = answer.with_reason(reason);
        if status == 503 {
            answer.with_header("Retry-After", "1")
        } else {
            answer
        }
    }

    /// Connects only to addresses `guard` lets through, checked at each
    /// connect against the addresses of the moment (a name that comes to
    /// resolve to a refused address gets 502, never a connection): for
    /// upstreams named by untrusted content (`_redirects` proxy rules).
    pub fn address_guard(mut self, guard: super::guard::AddressGuard) -> Upstream {
        self.guard = Some(Arc::new(guard));
        self
    }

    /// Kept-alive connections idle longer are closed.
    pub fn idle_timeout(mut self, t: Duration) -> Upstream {
        self.idle_timeout = t;
        self
    }

    /// Connecting longer answers 504.
    pub fn connect_timeout(mut self, t: Duration) -> Upstream {
        self.connect_timeout = t;
        self
    }

    /// Silence longer while an answer is read answers 504 (or cuts a body
    /// already begun).
    pub fn read_timeout(mut self, t: Duration) -> Upstream {
        self.read_timeout = t;
        self
    }

    /// How long a client's forwarded `Expect: 100-continue` waits for
    /// the upstream's 100 before the proxy sends its own
    /// ([`Upstream::CONTINUE_WAIT`]).
    pub fn continue_wait(mut self, t: Duration) -> Upstream {
        self.continue_wait = t;
        self
    }

    /// Bytes of an answer read ahead of a slow client.
    pub fn buffer_bytes(mut self, n: usize) -> Upstream {
        self.buffer_bytes = n.max(1);
        self
    }

    /// An `https://` upstream's certificate verified against the CA
    /// certificates of a PEM file (read now, before any sandbox) in place
    /// of the system's roots (nginx's `proxy_ssl_trusted_certificate`).
    /// An error for a `http://` or `unix:` upstream.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Result<Upstream, UpstreamError> {
        let Some(tls) = &self.tls else {
            return Err(UpstreamError(format!(
                "upstream {:?}: a CA file is for https:// upstreams",
                self.url
            )));
        };
        self.tls = Some(
            tls.with_ca_file(path.as_ref())
                .map_err(|e| UpstreamError(format!("upstream {:?}: {e}", self.url)))?,
        );
        Ok(self)
    }

    /// An `https://` upstream's certificate is not verified at all: an
    /// explicit choice, which `check-config` and the start line flag. An
    /// error for a `http://` or `unix:` upstream.
    pub fn insecure_skip_verify(mut self) -> Result<Upstream, UpstreamError> {
        let Some(tls) = &self.tls else {
            return Err(UpstreamError(format!(
                "upstream {:?}: skipping verification is for https:// upstreams",
                self.url
            )));
        };
        self.tls = Some(
            tls.skip_verify()
                .map_err(|e| UpstreamError(format!("upstream {:?}: {e}", self.url)))?,
        );
        Ok(self)
    }

    /// Whether the upstream speaks HTTP/2 (`h2c://`, `h2s://`).
    pub fn is_h2(&self) -> bool {
        self.h2
    }

    /// Whether the upstream is `https://`.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether the upstream's certificate goes unverified
    /// ([`Upstream::insecure_skip_verify`]).
    pub fn skips_verify(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.insecure)
    }

    /// The URL it was made from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The TCP ports it connects to (none for `unix:`): what the sandbox
    /// lets the process connect to.
    pub fn tcp_ports(&self) -> Vec<u16> {
        match &self.addr {
            Addr::Tcp(addrs) => {
                let mut ports: Vec<u16> = addrs.current().iter().map(SocketAddr::port).collect();
                ports.dedup();
                ports
            }
            Addr::Unix(_) => Vec::new(),
        }
    }

    /// The addresses it connects to now (TCP), for refusing an upstream
    /// that is one of the server's own listeners.
    pub fn socket_addrs(&self) -> Vec<SocketAddr> {
        match &self.addr {
            Addr::Tcp(addrs) => addrs.current().to_vec(),
            Addr::Unix(_) => Vec::new(),
        }
    }

    /// A `unix:` upstream's socket path.
    pub(crate) fn unix_path(&self) -> Option<&Path> {
        match &self.addr {
            Addr::Unix(path) => Some(path),
            Addr::Tcp(_) => None,
        }
    }

    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    /// The end of the request line and the Host line for `authority`
    /// (`host_line`).
    pub(crate) fn host_line(&self) -> Option<&[u8]> {
        self.host_line.as_deref()
    }

    /// The URL's path, which replaces the route's prefix (a balance's
    /// members must agree on it: `balance.rs`).
    pub(crate) fn path_part(&self) -> Option<&str> {
        self.path.as_deref()
    }

    pub(crate) fn prefix_part(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn host_header_mode(&self) -> HostHeader {
        self.host_header
    }

    /// The upstream request's path for a request's raw (encoded) path, or
    /// `None` for one refused: `%2F`, `%5C` or `%00` (a slash or NUL the
    /// route did not see), a dot segment (the route matched the path as
    /// written; the upstream would resolve it elsewhere), or a `%` without
    /// two hex digits. In its canonical spelling (`canonical_path`).
    #[cfg(test)]
    pub(crate) fn upstream_path(&self, raw: &str) -> Option<String> {
        // One allocation of about the right size, not `to_string`'s
        // growth through `core::fmt`; room left for a query.
        let mut out = Vec::with_capacity(raw.len() + 32);
        let made = self.upstream_path_to(raw, &mut out);
        made.map(|_| String::from_utf8(out).expect("percent-encoded ASCII"))
    }

    /// `upstream_path`, appended to `out` (the job's buffer: no
    /// allocation per request), `None` where that is `None` (`out` then
    /// as it was or longer); else which way the path was written:
    /// `Some(true)` the short way, `PLAIN` bytes only (visible ASCII
    /// without `#`: a request target's bytes, not to be checked again),
    /// `Some(false)` the long way.
    pub(crate) fn upstream_path_to(&self, raw: &str, out: &mut Vec<u8>) -> Option<bool> {
        let bytes = raw.as_bytes();
        // The short way, for a path of `PLAIN` bytes (no `%`: nothing to
        // decode, nothing to encode) to a route whose own path, if any,
        // is plain too: the same bytes as the long way, without its
        // passes and its `String` (about 40 instructions of a proxied
        // GET, callgrind `proxy-c50`). Its bytes and its segments are
        // looked at in one pass (`plain_segments`).
        if bytes.first() == Some(&b'/') && (self.path.is_none() || self.path_plain) {
            if let Some(dot_segment) = plain_segments(bytes) {
                if dot_segment {
                    return None;
                }
                self.write_plain(raw, out);
                return Some(true);
            }
        }
        self.write_long(raw, out).map(|()| false)
    }

    /// The short way's bytes: `raw`, its prefix kept or replaced.
    #[inline(always)]
    fn write_plain(&self, raw: &str, out: &mut Vec<u8>) {
        match &self.path {
            None => out.extend_from_slice(raw.as_bytes()),
            Some(replacement) => {
                let rest = self.rest_of(raw);
                out.extend_from_slice(replacement.as_bytes());
                if !replacement.ends_with('/') && !rest.is_empty() && self.prefix.ends_with('/') {
                    out.push(b'/');
                }
                out.extend_from_slice(rest.as_bytes());
            }
        }
    }

    /// The long way: normalised (`canonical_path`), checked, its prefix
    /// kept or replaced; `None` where the path is refused.
    fn write_long(&self, raw: &str, out: &mut Vec<u8>) -> Option<()> {
        let normal = canonical_path(raw.as_bytes())?;
        // Segments split as bytes (`/` is ASCII): `str::split`'s char
        // searcher was 145 instructions of a proxied GET (callgrind).
        if !normal.starts_with('/') || normal.as_bytes().split(|&b| b == b'/').any(|s| s == b"." || s == b"..") {
            return None;
        }
        match &self.path {
            None => out.extend_from_slice(normal.as_bytes()),
            Some(replacement) => {
                // The prefix in the same spelling as the path.
                let prefix = utf8_percent_encode(&self.prefix, PATH).to_string();
                let rest = rest_of(&prefix, &normal);
                for piece in utf8_percent_encode(replacement, PATH) {
                    out.extend_from_slice(piece.as_bytes());
                }
                if !replacement.ends_with('/') && !rest.is_empty() && self.prefix.ends_with('/') {
                    out.push(b'/');
                }
                out.extend_from_slice(rest.as_bytes());
            }
        }
        Some(())
    }

    /// What of a path follows the route's prefix, for the URL's path to
    /// replace it.
    fn rest_of<'p>(&self, path: &'p str) -> &'p str {
        rest_of(&self.prefix, path)
    }
}

/// What of `path` follows `prefix` (both in one spelling).
fn rest_of<'p>(prefix: &str, path: &'p str) -> &'p str {
    match path.strip_prefix(prefix) {
        Some(rest) => rest,
        // `/api` on a route for `/api/`: the prefix without its slash.
        None if prefix.ends_with('/') && *path == prefix[..prefix.len() - 1] => "",
        None => path.strip_prefix('/').unwrap_or(path),
    }
}

/// `raw` (a request's path) in its canonical spelling (RFC 3986 §6.2.2):
/// an escape of an unreserved character decoded (`%61` is `a`, `%2E` is
/// `.`), every other escape kept, its hex digits in capitals (`%3b` is
/// `%3B`: a `;` or `+` escaped is another path than one that is not, to
/// Tomcat's path parameters as to RFC 3986 §2.2), and a byte a path may not
/// hold as it is (a space, `"`, a byte above 0x7f from an HTTP/2 client)
/// escaped. `None`: refused, for `%2F`, `%5C` or `%00` (a slash,
/// backslash or NUL the route did not see as such) or a `%` not followed
/// by two hex digits. Bytes that are not UTF-8 once decoded go on escaped,
/// as nginx and Caddy pass them.
fn canonical_path(raw: &[u8]) -> Option<String> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = String::with_capacity(raw.len() + 8);
    let escape = |out: &mut String, b: u8| {
        out.push('%');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    };
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (
                raw.get(i + 1).and_then(|&d| hex(d)),
                raw.get(i + 2).and_then(|&d| hex(d)),
            ) else {
                return None;
            };
            let v = (h * 16 + l) as u8;
            match v {
                b'/' | b'\\' | 0 => return None,
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(v)),
                _ => escape(&mut out, v),
            }
            i += 3;
        } else {
            match PLAIN[usize::from(b)] {
                true => out.push(char::from(b)),
                false => escape(&mut out, b),
            }
            i += 1;
        }
    }
    Some(out)
}

/// Whether `path` is all `PLAIN` bytes (`None` if not) and, if so,
/// whether a segment of it is `.` or `..` (RFC 3986 §3.3's dot segments):
/// both in one pass, where a pass for the bytes and one splitting the
/// segments looked at every byte twice.
#[inline(always)]
fn plain_segments(path: &[u8]) -> Option<bool> {
    let is_dots = |segment: &[u8]| matches!(segment, b"." | b"..");
    let mut segment_at = 0;
    let mut dot_segment = false;
    for (i, &b) in path.iter().enumerate() {
        if !PLAIN[usize::from(b)] {
            return None;
        }
        if b == b'/' {
            dot_segment |= is_dots(&path[segment_at..i]);
            segment_at = i + 1;
        }
    }
    Some(dot_segment || is_dots(&path[segment_at..]))
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` (`default` without a port).
fn split_host_port(authority: &str, default: u16) -> Option<(&str, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        let port = match &rest[end + 1..] {
            "" => default,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        return Some((host, port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, port.parse().ok()?)),
        Some(_) => None,
        None => Some((authority, default)),
    }
    .filter(|(h, _)| !h.is_empty())
}
