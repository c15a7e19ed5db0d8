//! The request a handler sees: a zero-copy view into the connection's read
//! buffer, valid for the duration of the handler call.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::body::BodyReader;
use crate::client_addr::{self, ClientAddr, Trust, Via};
use crate::codec::{FieldNames, Version};
use crate::message::trailers::Trailers;
use crate::responder::{Mailbox, Responder};

/// An HTTP request. Everything it returns borrows the connection's buffer;
/// copy what must outlive the handler call.
pub struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: Option<&'a str>,
    pub(crate) version: Version,
    pub(crate) headers: &'a [httparse::Header<'a>],
    /// The names among `FieldNames`' that `headers` may hold: the
    /// HTTP/1.1 codec's note, else all ([`Request::may_carry`]).
    pub(crate) field_names: FieldNames,
    /// The host, as bytes that are valid UTF-8 (from a `str`, or checked
    /// as ASCII by the HTTP/1.1 codec): made a `str` when asked for.
    pub(crate) host: Option<&'a [u8]>,
    pub(crate) body: &'a [u8],
    /// The trailer fields the body ended with, if it had some (a body read
    /// whole; a streamed one's come with its reader's end).
    pub(crate) trailers: Option<&'a Trailers>,
    /// Who sent it: what `peer_addr` and `client_addr` answer from. By
    /// reference: the connection's, built once per read, where a copy
    /// into each request was 72 bytes.
    pub(crate) origin: &'a Origin<'a>,
    pub(crate) params: &'a [(&'a str, &'a str)],
    pub(crate) defer: Option<&'a DeferSlot<'a>>,
    /// The body, to be read as it arrives (a `body::streamed` handler).
    pub(crate) reader: Option<&'a RefCell<Option<BodyReader>>>,
    /// Over TLS: `Some`, with the name the client gave in SNI (in normal
    /// form) if it gave one. `None` in cleartext.
    pub(crate) tls: Option<Option<&'a str>>,
    /// The site the request went to (`sites.rs`), for the log and metrics.
    pub(crate) site: crate::sites::Chosen,
    /// Extended CONNECT's `:protocol` (RFC 8441, HTTP/2): `websocket`.
    pub(crate) protocol: Option<&'a str>,
    /// The method is in IANA's registry, or is CONNECT
    /// (`codec::head::check_method`); else only a handler that takes it
    /// sees it (`Handler::takes_unknown_method`), and the others' 501 is
    /// the engine's.
    pub(crate) method_registered: bool,
    /// This thread's count of requests when this one was made: with the
    /// thread's random prefix, the request's id unless a trusted proxy
    /// gave one ([`Request::request_id`]).
    pub(crate) serial: u64,
    /// Over TLS, the version and resumption, for the access log.
    pub(crate) tls_facts: Option<crate::access_log::TlsFacts>,
}

/// The longest `X-Request-ID` kept from a trusted proxy; a longer one
/// (or one with bytes that are not visible ASCII) is replaced.
const REQUEST_ID_BYTES_MAX: usize = 200;

thread_local! {
    /// The requests this thread has made (`Request::serial`).
    static SERIAL: Cell<u64> = const { Cell::new(0) };
    /// Drawn once per thread: ids unique across threads and processes
    /// without a system call per request.
    /// Kept in hex, as every id writes it.
    static ID_PREFIX: [u8; 16] = {
        use aws_lc_rs::rand::SecureRandom;
        let mut b = [0u8; 8];
        // The system's generator does not fail on Linux; zeros would only
        // make ids of two processes alike, not wrong.
        let _ = aws_lc_rs::rand::SystemRandom::new().fill(&mut b);
        hex16(u64::from_be_bytes(b))
    };
}

/// The id made for the request numbered `serial`: the thread's prefix
/// and `serial`, in lowercase hex.
#[inline]
fn made_id(serial: u64) -> [u8; 32] {
    let mut id = [0u8; 32];
    id[..16].copy_from_slice(&ID_PREFIX.with(|p| *p));
    id[16..].copy_from_slice(&hex16(serial));
    id
}

/// `n` as 16 lowercase hex digits, most significant first, with no
/// table: each nibble spread to a byte of its own, then `0`-`9` or `a`-`f`
/// added to all sixteen at once.
fn hex16(n: u64) -> [u8; 16] {
    // The nibbles of each 32-bit half spread to the 8 bytes of a u64,
    // the most significant nibble in the lowest byte (big-endian text).
    fn spread(x: u32) -> u64 {
        let x = u64::from(x);
        // x = abcdefgh (nibbles); to 0a0b0c0d0e0f0g0h in byte order.
        let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        x.swap_bytes()
    }
    fn digits(nibbles: u64) -> u64 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        // 0x06 + nibble sets 0x10 in a byte exactly when the nibble is
        // 10 or more; those bytes get 'a' - '0' - 10 = 39 more.
        let letters = ((nibbles + ONES * 6) >> 4) & ONES;
        nibbles + ONES * u64::from(b'0') + letters * 39
    }
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&digits(spread((n >> 32) as u32)).to_le_bytes());
    out[8..].copy_from_slice(&digits(spread(n as u32)).to_le_bytes());
    out
}

fn next_serial() -> u64 {
    SERIAL.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    })
}

/// A request's id (`X-Request-ID`): the one a trusted proxy sent, or 32
/// hex digits made here (this thread's random prefix, then its count).
/// Ids name requests; they are not secrets.
#[derive(Clone, Copy, Debug)]
pub struct RequestId<'a>(IdBytes<'a>);

#[derive(Clone, Copy, Debug)]
enum IdBytes<'a> {
    Kept(&'a [u8]),
    Made([u8; 32]),
}

impl<'a> RequestId<'a> {
    /// The thread's prefix and `serial`, in lowercase hex (the prefix's
    /// made once: a byte at a time, both halves were 343 instructions of
    /// a proxied GET, callgrind `proxy-c50`).
    fn made(serial: u64) -> Self {
        RequestId(IdBytes::Made(made_id(serial)))
    }

    /// The id's bytes: visible ASCII.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            IdBytes::Kept(b) => b,
            IdBytes::Made(b) => b,
        }
    }

    /// Whether it is the one a trusted proxy sent.
    pub fn is_kept(&self) -> bool {
        matches!(self.0, IdBytes::Kept(_))
    }
}

/// Where a request came from: the socket's peer, the source the
/// connection's PROXY header gave, and the server's rule for believing
/// proxies. Built once per read of a connection and lent to each of its
/// requests (a copy into each was 72 bytes); the client's address is
/// decided from it only when asked ([`Request::client_addr`]). The
/// PROXY source by reference too: the connection's two addresses copied
/// at each read were 10 instructions a hello at c50 (callgrind,
/// bench/runs/2026-11-28-loop8); the peer stays a value, as the proxy
/// reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin<'a> {
    /// The socket's peer ([`crate::UNIX_PEER`] for a Unix-domain client;
    /// QUIC: the connection's current path, which migration may change).
    pub(crate) peer: SocketAddr,
    /// The source address of the connection's PROXY header: `None`
    /// without one, or for LOCAL and UNKNOWN headers.
    pub(crate) proxy_source: &'a Option<SocketAddr>,
    /// The server's trusted proxies and the field it reads behind them;
    /// `None` if it trusts nobody.
    pub(crate) trust: Option<&'a Trust>,
}

impl Origin<'_> {
    /// Of a connection without a PROXY header, on a server that trusts
    /// nobody.
    #[cfg(test)]
    pub(crate) fn peer(peer: SocketAddr) -> Origin<'static> {
        Origin {
            peer,
            proxy_source: &None,
            trust: None,
        }
    }

    /// The client's address as far as the connection tells, without a
    /// request's fields: the PROXY header's source, else the peer (for
    /// the log line of a request refused before its fields were read).
    pub(crate) fn connection_addr(&self) -> SocketAddr {
        self.proxy_source.unwrap_or(self.peer)
    }
}

/// The origin of the requests tests build (`127.0.0.1:1`, nobody
/// trusted).
#[cfg(test)]
pub(crate) static LOOPBACK_ORIGIN: Origin<'static> = Origin {
    peer: SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 1)),
    proxy_source: &None,
    trust: None,
};

/// Where a handler's [`Request::defer`] records that it will answer later.
pub(crate) struct DeferSlot<'w> {
    pub(crate) mailbox: &'w Arc<Mailbox>,
    pub(crate) token: usize,
    /// The worker's counter of deferred requests, so ids never repeat.
    pub(crate) next_id: &'w Cell<u64>,
    /// Set by `defer`: the id the answer must carry.
    pub(crate) id: Cell<Option<u64>>,
    /// The worker's queue of requests for upstreams (`proxy`).
    pub(crate) outbox: &'w crate::proxy::Outbox,
}

impl<'a> Request<'a> {
    /// Builds a request from parsed parts (used by the engine and by tests).
    pub(crate) fn new(
        method: &'a str,
        target: &'a str,
        version: Version,
        headers: &'a [httparse::Header<'a>],
        host: Option<&'a str>,
        body: &'a [u8],
        origin: &'a Origin<'a>,
    ) -> Self {
        let (path, query) = split_target(target);
        Request {
            method,
            target,
            path,
            query,
            version,
            headers,
            // HTTP/2 and HTTP/3 fields come from HPACK and QPACK, which
            // note nothing: a handler looks at them all.
            field_names: FieldNames::ALL,
            host: host.map(str::as_bytes),
            body,
            trailers: None,
            origin,
            params: &[],
            defer: None,
            reader: None,
            tls: None,
            site: crate::sites::Chosen::new(None),
            protocol: None,
            method_registered: !matches!(crate::codec::head::check_method(method), Ok(false)),
            serial: next_serial(),
            tls_facts: None,
        }
    }

    /// A request from an HTTP/1.1 head (which has split its target).
    #[inline]
    pub(crate) fn of_head(head: &crate::codec::Head<'a, 'a>, body: &'a [u8], origin: &'a Origin<'a>) -> Self {
        Request {
            method: head.method,
            target: head.target,
            path: head.path,
            query: head.query,
            version: head.version,
            headers: head.headers,
            field_names: head.field_names,
            host: head.host,
            body,
            trailers: None,
            origin,
            params: &[],
            defer: None,
            reader: None,
            tls: None,
            site: crate::sites::Chosen::new(None),
            protocol: None,
            method_registered: head.method_registered,
            serial: next_serial(),
            tls_facts: None,
        }
    }

    /// The method, e.g. `GET`. Methods are case-sensitive (RFC 9110 §9.1).
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request target exactly as sent, e.g. `/a%20b?x=1`.
    pub fn target(&self) -> &'a str {
        self.target
    }

    /// The path of the target, still percent-encoded, without the query.
    /// For an absolute-form target (`http://host/p`), the path part (`/p`).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The path, percent-decoded. Invalid UTF-8 after decoding is replaced
    /// with U+FFFD; use [`percent_decode`] on [`Request::path`] for the bytes.
    pub fn path_decoded(&self) -> Cow<'a, str> {
        match percent_decode(self.path.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(self.path),
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }

    /// The query string after `?`, still percent-encoded.
    pub fn query(&self) -> Option<&'a str> {
        self.query
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The value of the first header field named `name` (case-insensitive),
    /// if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.header_bytes(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The raw value of the first header field named `name` (case-insensitive).
    pub fn header_bytes(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Whether the request may carry a field named in `names`. `false`
    /// means it carries none of them, so a handler that reads only those
    /// fields may skip its pass over the head; `true` means it may (ask
    /// [`Request::headers`]). Exact for no name: an HTTP/1.1 request's set
    /// is noted by length and first letter, other requests' holds every
    /// name (see [`FieldNames`]).
    #[inline]
    pub fn may_carry(&self, names: FieldNames) -> bool {
        self.field_names.intersects(names)
    }

    /// All header fields in order, as (name, raw value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        self.headers.iter().map(|h| (h.name, h.value))
    }

    /// The host the request is for: the authority of an absolute-form
    /// target, else the `Host` field. `None` for HTTP/1.0 without Host.
    pub fn host(&self) -> Option<&'a str> {
        // Never fails (see the field): a check of a few ASCII bytes, done
        // only for handlers that ask.
        self.host.and_then(|h| std::str::from_utf8(h).ok())
    }

    /// The request body, complete (de-chunked if it was chunked). Empty
    /// for a handler that reads bodies as they arrive
    /// ([`crate::body::streamed`]): see [`Request::body_reader`].
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The trailer fields the client sent after the body (RFC 9110 §6.5:
    /// an HTTP/1.1 chunked body's trailer section, HTTP/2's and HTTP/3's
    /// trailing HEADERS), for a body read whole ([`Request::body`]);
    /// `None` if it sent none. A handler reading the body as it arrives
    /// finds them on its reader once the body has ended
    /// ([`BodyReader::trailers`]). The fields that may never be trailers
    /// (`Content-Length`, `Host`, `TE`, `Authorization`, ... RFC 9110
    /// §6.5.1) are dropped; names are lowercase. They are not header
    /// fields: [`Request::header`] does not see them.
    ///
    /// ```no_run
    /// use peregrine::{Request, Response, Router, Server};
    ///
    /// let app = Router::new().post("/sum", |req: &Request<'_>| {
    ///     let sum = req.trailers().and_then(|t| t.field("x-checksum")).unwrap_or("none");
    ///     Response::text(format!("{} bytes, checksum {sum}\n", req.body().len()))
    /// });
    /// Server::new().bind("127.0.0.1:8080").serve(app).unwrap();
    /// ```
    pub fn trailers(&self) -> Option<&'a Trailers> {
        self.trailers
    }

    /// The body as it arrives, for a handler wrapped in
    /// [`crate::body::streamed`]: a blocking reader to move to another
    /// thread (the handler then answers with [`Request::defer`]). `Some`
    /// once per request with a body; `None` for a request without one, for
    /// ordinary handlers (their body is [`Request::body`]) and after the
    /// first call.
    pub fn body_reader(&self) -> Option<BodyReader> {
        self.reader.and_then(|r| r.borrow_mut().take())
    }

    /// The address of the socket's other end: the client, or the proxy
    /// or load balancer in front of the server ([`crate::UNIX_PEER`] for
    /// a Unix-domain client). For HTTP/3, the connection's address when
    /// the request arrived (a client may migrate). For who the client
    /// is, behind trusted proxies, see [`Request::client_addr`].
    pub fn peer_addr(&self) -> SocketAddr {
        self.origin.peer
    }

    /// The client's address, decided by [`client_addr::client_addr`]'s
    /// rule: the socket's peer, unless the server trusts it as a proxy
    /// ([`crate::Server::trusted_proxies`]), in which case the right-most
    /// address of `X-Forwarded-For` (or `Forwarded`) that is not a trusted
    /// proxy. On a listener that requires the PROXY protocol
    /// ([`crate::Server::proxy_protocol`]), the header's source takes the
    /// peer's place (the peer was checked against the listener's trusted
    /// sources at accept), and the fields are read behind it only if the
    /// source too is a trusted proxy. The access log writes this address.
    ///
    /// Computed at each call, allocating nothing; free when the server
    /// trusts nobody (the peer, or the PROXY source, at once).
    pub fn client_addr(&self) -> ClientAddr {
        let Origin {
            peer,
            proxy_source,
            trust,
        } = *self.origin;
        let (from, via) = match *proxy_source {
            Some(source) => (source, Via::ProxyProtocol),
            None => (peer, Via::Peer),
        };
        let Some(trust) = trust else {
            return ClientAddr {
                ip: from.ip(),
                port: Some(from.port()),
                via,
            };
        };
        let mut client = client_addr::client_addr(from, None, self.headers(), trust.field, &trust.proxies);
        if client.via == Via::Peer {
            client.via = via;
        }
        client
    }

    /// The value captured by the router for `:name` or `*name`,
    /// percent-decoded (`/users/%E2%9C%93` gives `✓` for `/users/:id`).
    pub fn param(&self, name: &str) -> Option<&'a str> {
        self.params.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// Promises an answer from elsewhere: returns a [`Responder`] that may be
    /// sent to any thread, and the handler must then return [`crate::Reply::Later`].
    /// The event loop goes on serving other connections meanwhile; this
    /// connection's next pipelined requests wait, so answers stay in order.
    ///
    /// Outside a running server (e.g. a request built in a test) the
    /// responder's answer goes nowhere.
    pub fn defer(&self) -> Responder {
        match self.defer {
            Some(slot) => {
                let id = slot.next_id.get();
                slot.next_id.set(id + 1);
                slot.id.set(Some(id));
                Responder::new(Some(slot.mailbox.clone()), slot.token, id)
            }
            None => Responder::new(None, 0, 0),
        }
    }

    /// `defer`, for an answer made and handed over on this worker's own
    /// thread (the proxy's): the responder holds no count on the
    /// worker's mailbox (`Responder::here`), and must not leave the
    /// thread.
    pub(crate) fn defer_here(&self) -> Responder {
        match self.defer {
            Some(slot) => {
                let id = slot.next_id.get();
                slot.next_id.set(id + 1);
                slot.id.set(Some(id));
                Responder::here(slot.token, id)
            }
            None => Responder::new(None, 0, 0),
        }
    }

    /// The worker's queue of requests for upstreams, inside a running
    /// server.
    pub(crate) fn outbox(&self) -> Option<&'a crate::proxy::Outbox> {
        self.defer.map(|slot| slot.outbox)
    }

    /// Whether the socket's peer (or the PROXY header's source) is one of
    /// the server's trusted proxies: what it says about the client may be
    /// passed on.
    pub(crate) fn is_from_trusted_proxy(&self) -> bool {
        let from = self.origin.proxy_source.unwrap_or(self.origin.peer);
        self.origin
            .trust
            .is_some_and(|t| from != crate::UNIX_PEER && t.proxies.contains(from.ip()))
    }

    /// The request's id: its `X-Request-ID` when it came from a trusted
    /// proxy (as [`crate::Server::trusted_proxies`] decides for the
    /// client's address; 1 to 200 bytes of visible ASCII), else one made
    /// here, the same however often it is asked. The access log writes it
    /// and the reverse proxy sends it upstream.
    pub fn request_id(&self) -> RequestId<'a> {
        match self.kept_request_id() {
            Some(v) => RequestId(IdBytes::Kept(v)),
            None => RequestId::made(self.serial),
        }
    }

    /// `request_id`'s bytes when it is made here (`kept_request_id` is
    /// `None`), for the caller to write in place: making a `RequestId`
    /// and copying its bytes out (the call, the 40-byte id, its copy)
    /// was about 30 of a proxied GET's instructions (callgrind
    /// `proxy-c50`).
    #[inline]
    pub(crate) fn made_request_id(&self) -> [u8; 32] {
        made_id(self.serial)
    }

    /// A trusted proxy's `X-Request-ID`, if it is one to keep: then it
    /// is `request_id`.
    #[inline]
    pub(crate) fn kept_request_id(&self) -> Option<&'a [u8]> {
        if self.origin.trust.is_none() || !self.is_from_trusted_proxy() {
            return None;
        }
        self.header_bytes("x-request-id")
            .filter(|v| (1..=REQUEST_ID_BYTES_MAX).contains(&v.len()) && v.iter().all(|b| (0x21..0x7f).contains(b)))
    }

    /// Whether the request came over TLS (HTTPS, and every HTTP/3 request).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The server name the client asked for in its TLS handshake (SNI), in
    /// normal form (`host::normalize`); `None` in cleartext or when the
    /// client sent none (it connected by address).
    pub fn tls_server_name(&self) -> Option<&'a str> {
        self.tls.flatten()
    }

    /// The protocol an HTTP/2 extended CONNECT asks for (`:protocol`,
    /// RFC 8441): `websocket` when a browser opens a WebSocket over
    /// HTTP/2. `None` for every other request.
    pub fn protocol(&self) -> Option<&'a str> {
        self.protocol
    }

    /// A copy of this request with router captures attached.
    pub(crate) fn with_params<'b>(&'b self, params: &'b [(&'b str, &'b str)]) -> Request<'b>
    where
        'a: 'b,
    {
        Request {
            params,
            site: crate::sites::Chosen::new(self.site.get()),
            ..*self
        }
    }
}

#[cfg(test)]
impl<'a> Request<'a> {
    /// An HTTP/1.1 request with no fields and no body from 127.0.0.1:1, for
    /// unit tests of what reads requests (the router, the accessors).
    pub(crate) fn bare(method: &'a str, target: &'a str) -> Request<'a> {
        Request::new(method, target, Version::Http11, &[], None, b"", &LOOPBACK_ORIGIN)
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("version", &self.version)
            .field("n_headers", &self.headers.len())
            .field("body_len", &self.body.len())
            .field("peer", &self.origin.peer)
            .finish()
    }
}

/// `SCHEME://HOST[:PORT]` and the path and query of `target` (its
/// origin form): where a redirect sends the same request on another
/// scheme or name.
pub(crate) fn absolute_url(scheme: &str, host: &str, port: Option<&str>, target: &str) -> String {
    let path = origin_form(target);
    let port_len = port.map_or(0, |p| p.len() + 1);
    let mut url = String::with_capacity(scheme.len() + 3 + host.len() + port_len + path.len() + 1);
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(host);
    if let Some(port) = port {
        url.push(':');
        url.push_str(port);
    }
    if !path.starts_with('/') {
        url.push('/');
    }
    url.push_str(path);
    url
}

/// The path and query of a request target: itself in origin-form, the part
/// after the authority in absolute-form (`?q` when the path is empty: the
/// caller puts `/` before it), `/` otherwise (`*`, authority-form).
pub(crate) fn origin_form(target: &str) -> &str {
    if target.starts_with('/') {
        return target;
    }
    if let Some((_, rest)) = target.split_once("://") {
        if let Some(i) = rest.find(['/', '?']) {
            return &rest[i..];
        }
    }
    "/"
}

/// The path and query of a target, the scheme and authority of an
/// absolute-form one removed (RFC 9112 §3.2.2). Inlined: returned from a
/// call, the pair went through memory and `Request::new` read it back at
/// once with wider loads (a store-forwarding stall, 10 % of `process_h2`'s
/// samples under h2load). Always: with the HTTP/1.1 codec's head written
/// in place (loop10), LLVM stopped inlining it into `Request::new`, and
/// hello-h2c rose by 25 instructions a request (callgrind).
#[inline(always)]
pub(crate) fn split_target(target: &str) -> (&str, Option<&str>) {
    // Origin-form (`/…`) first: looking for "://" in it built a substring
    // searcher per request (2 % of a pipelined hello's CPU, perf).
    let origin = match target.as_bytes().first() {
        Some(b'/') => target,
        _ => absolute_path(target),
    };
    let (path, query) = match memchr::memchr(b'?', origin.as_bytes()) {
        Some(q) => (&origin[..q], Some(&origin[q + 1..])),
        None => (origin, None),
    };
    // `http://host` and `http://host?q` have an empty path, which means `/`.
    (if path.is_empty() { "/" } else { path }, query)
}

/// The path and query of a target that is not in origin-form.
fn absolute_path(target: &str) -> &str {
    match target.find("://") {
        Some(scheme_end) => {
            let rest = &target[scheme_end + 3..];
            rest.find(['/', '?']).map_or("", |i| &rest[i..])
        }
        None => target,
    }
}

/// Decodes `%XX` escapes (the `percent-encoding` crate). Borrows when there
/// are none; a `%` not followed by two hex digits is kept as it is.
pub fn percent_decode(input: &[u8]) -> Cow<'_, [u8]> {
    percent_encoding::percent_decode(input).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: &str) -> Request<'_> {
        Request::bare("GET", target)
    }

    #[test]
    fn hex16_writes_what_format_writes() {
        let mut n: u64 = 0x0123_4567_89ab_cdef;
        for k in [0, 1, 9, 10, 15, 16, 0xff, 0xa5a5_a5a5_5a5a_5a5a, u64::MAX - 1, u64::MAX] {
            assert_eq!(hex16(k), *format!("{k:016x}").as_bytes(), "{k:#x}");
        }
        for _ in 0..10_000 {
            // A full-period LCG: every nibble value at every place.
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            assert_eq!(hex16(n), *format!("{n:016x}").as_bytes(), "{n:#x}");
        }
        let id = RequestId::made(0x1f);
        assert_eq!(&id.as_bytes()[16..], b"000000000000001f");
        assert!(id.as_bytes()[..16].iter().all(|b| b"0123456789abcdef".contains(b)));
    }

    /// A request not made from an HTTP/1.1 head (HTTP/2, HTTP/3: HPACK
    /// and QPACK note nothing) may carry every name a handler looks for.
    #[test]
    fn a_request_not_from_the_http11_codec_may_carry_every_name() {
        let r = req("/");
        for n in [
            FieldNames::ACCEPT_ENCODING,
            FieldNames::RANGE,
            FieldNames::IF_UNMODIFIED_SINCE,
        ] {
            assert!(r.may_carry(n));
        }
        assert!(!r.may_carry(FieldNames::NONE));
    }

    #[test]
    fn path_and_query_are_split() {
        let table = [
            ("/", "/", None),
            ("/a/b?x=1&y", "/a/b", Some("x=1&y")),
            ("/a?", "/a", Some("")),
            ("http://h/p?q", "/p", Some("q")),
            ("http://h", "/", None),
            ("http://h?q", "/", Some("q")),
            ("http://h?x=1/y", "/", Some("x=1/y")),
            ("*", "*", None),
        ];
        for (target, path, query) in table {
            let r = req(target);
            assert_eq!((r.path(), r.query()), (path, query), "{target}");
        }
    }

    #[test]
    fn the_client_is_decided_from_the_origin() {
        let headers = [httparse::Header {
            name: "X-Forwarded-For",
            value: b"6.6.6.6, 1.2.3.4",
        }];
        let trust = Trust {
            proxies: "10.0.0.0/8, 198.51.100.0/24, 0.0.0.0/0".parse().unwrap(),
            field: crate::client_addr::AddrField::XForwardedFor,
        };
        let narrow = Trust {
            proxies: "10.0.0.0/8, 198.51.100.0/24".parse().unwrap(),
            ..trust.clone()
        };
        let decide = |peer: &str, source: Option<&str>, trust: Option<&Trust>| {
            let (peer, source) = (peer.parse().unwrap(), source.map(|s| s.parse().unwrap()));
            let origin = Origin {
                peer,
                proxy_source: &source,
                trust,
            };
            let req = Request::new("GET", "/", Version::Http11, &headers, None, b"", &origin);
            let c = req.client_addr();
            assert_eq!(req.peer_addr(), peer, "the peer stays the socket's");
            (c.ip.to_string(), c.port, c.via)
        };
        let client = |ip: &str, port: Option<u16>, via| (ip.to_owned(), port, via);
        // Nobody trusted: the peer, or the PROXY source; no field read.
        assert_eq!(
            decide("10.0.0.1:80", None, None),
            client("10.0.0.1", Some(80), Via::Peer)
        );
        assert_eq!(
            decide("10.0.0.1:80", Some("203.0.113.5:7"), None),
            client("203.0.113.5", Some(7), Via::ProxyProtocol)
        );
        // A trusted peer: the field, from the right.
        let t = Some(&narrow);
        assert_eq!(
            decide("10.0.0.1:80", None, t),
            client("1.2.3.4", None, Via::XForwardedFor)
        );
        assert_eq!(
            decide("203.0.113.1:80", None, t),
            client("203.0.113.1", Some(80), Via::Peer)
        );
        // A PROXY source takes the peer's place: the field is read only
        // behind a trusted source, whatever the peer (the listener vouched
        // for it).
        assert_eq!(
            decide("203.0.113.1:80", Some("198.51.100.3:9"), t),
            client("1.2.3.4", None, Via::XForwardedFor)
        );
        assert_eq!(
            decide("10.0.0.1:80", Some("203.0.113.5:7"), t),
            client("203.0.113.5", Some(7), Via::ProxyProtocol)
        );
        // A Unix-domain client is never a proxy, even under 0.0.0.0/0.
        let unix = crate::UNIX_PEER.to_string();
        assert_eq!(decide(&unix, None, Some(&trust)), client("0.0.0.0", Some(0), Via::Peer));
    }

    #[test]
    fn percent_decoding() {
        assert!(matches!(percent_decode(b"/plain"), Cow::Borrowed(_)));
        assert_eq!(&*percent_decode(b"/a%20b%2F%2e"), b"/a b/.");
        assert_eq!(&*percent_decode(b"/%zz%4"), b"/%zz%4");
        assert_eq!(&*percent_decode(b"%41"), b"A");
        assert_eq!(&*percent_decode(b"%"), b"%");
        assert_eq!(req("/caf%C3%A9").path_decoded(), "/café");
    }
}
