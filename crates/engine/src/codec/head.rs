//! Request heads: the request line, the header fields, and the framing of the
//! body that follows (RFC 9112 §2–§7).
//!
//! httparse does the tokenising (it rejects bare CR, control bytes, whitespace
//! before a colon and obs-fold, but accepts a bare LF as a line ending, which
//! this module refuses); this module adds the rules of RFC 9112 that
//! decide how long the body is and whether the connection persists. It never
//! guesses: anything ambiguous is an error that the engine turns into a 4xx
//! or 5xx and a close.

use std::mem::MaybeUninit;

use crate::limits::Limits;

/// The protocol version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: connections close unless the client asks for keep-alive.
    Http10,
    /// HTTP/1.1: connections persist unless either side says `close`.
    Http11,
    /// HTTP/2: one stream of a multiplexed connection (RFC 9113).
    Http2,
    /// HTTP/3: one stream of a QUIC connection (RFC 9114).
    Http3,
}

impl Version {
    /// The version as it appears on the wire, e.g. `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
            Version::Http3 => "HTTP/3.0",
        }
    }
}

/// How the body of a request is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: neither Content-Length nor Transfer-Encoding.
    Empty,
    /// `Content-Length: n` with n > 0.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a request head was refused. Each maps to one status code, and each
/// closes the connection: after a bad head, the framing of what follows
/// cannot be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// 400, with a short reason for the log and the error page.
    BadRequest(&'static str),
    /// 414: the request target is longer than `uri_bytes_max`.
    UriTooLong,
    /// 431: the head is longer than `head_bytes_max` or has too many fields.
    HeadTooLarge,
    /// 413: the declared body is longer than `body_bytes_max`.
    BodyTooLarge,
    /// 417: an `Expect` other than `100-continue`.
    ExpectationFailed,
    /// 501: a transfer coding other than `chunked`.
    NotImplemented,
    /// 501: `CONNECT`, which the engine cannot tunnel. (A method not in
    /// IANA's HTTP Method Registry is no error of the head's: the engine
    /// answers it 501 unless its handler takes it.)
    MethodNotImplemented,
    /// 505: an HTTP version other than 1.0 and 1.1.
    VersionNotSupported,
    /// 400: the request line's last word is not an HTTP version at all:
    /// the client may not speak HTTP/1 (on a listener that also takes
    /// HTTP/2 with prior knowledge, it is an invalid connection preface).
    NotHttp,
}

impl HeadError {
    /// The status code this error is answered with.
    pub fn status(self) -> u16 {
        match self {
            HeadError::BadRequest(_) | HeadError::NotHttp => 400,
            HeadError::UriTooLong => 414,
            HeadError::HeadTooLarge => 431,
            HeadError::BodyTooLarge => 413,
            HeadError::ExpectationFailed => 417,
            HeadError::NotImplemented | HeadError::MethodNotImplemented => 501,
            HeadError::VersionNotSupported => 505,
        }
    }

    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            HeadError::BadRequest(why) => why,
            HeadError::UriTooLong => "request target too long",
            HeadError::HeadTooLarge => "request head too large",
            HeadError::BodyTooLarge => "request body too large",
            HeadError::ExpectationFailed => "unsupported expectation",
            HeadError::NotImplemented => "unsupported transfer coding",
            HeadError::MethodNotImplemented => "method not implemented",
            HeadError::VersionNotSupported => "unsupported HTTP version",
            HeadError::NotHttp => "malformed HTTP version",
        }
    }
}

/// A complete, validated request head. Borrows the read buffer.
#[derive(Clone, Copy, Debug)]
pub struct Head<'b, 'h> {
    /// The method token, e.g. `GET`.
    pub method: &'b str,
    /// The request target exactly as sent.
    pub target: &'b str,
    /// The target's path, without the query (`Request::path`).
    pub path: &'b str,
    /// The target's query, after `?` (`Request::query`).
    pub query: Option<&'b str>,
    /// The protocol version.
    pub version: Version,
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may persist after this exchange (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// The client sent `Expect: 100-continue`.
    pub expect_continue: bool,
    /// The client said it takes trailer fields (`TE: trailers`, RFC 9110
    /// §10.1.4): a chunked answer may end with them.
    pub te_trailers: bool,
    /// An HTTP/1.1 request offers to switch protocols: a non-empty
    /// Upgrade field, named by its Connection field (RFC 9110 §7.8).
    /// [`Head::upgrade_offer`] gives what it offers. A flag, not the
    /// value: the head is built for every request, and a wider one cost
    /// 2 % of a pipelined hello (`bench/ab-cpu.sh`).
    pub upgrade: bool,
    /// The method is in IANA's HTTP Method Registry (`check_method`): a
    /// method that is not (PURGE, a custom token) reaches only a handler
    /// that takes it (`Handler::takes_unknown_method`), else 501.
    pub method_registered: bool,
    /// Which of the fields a file or archive handler reads the head may
    /// carry, noted where `Fields::scan` classifies each name anyway
    /// (see [`FieldNames`]).
    pub field_names: FieldNames,
    /// The authority: from an absolute-form target if there is one (RFC 9112
    /// §3.2.2: it replaces Host), else the Host field. ASCII only (both are
    /// checked byte by byte); bytes, so that a request whose handler never
    /// asks for the host does not pay for a UTF-8 check (`from_utf8` was
    /// 2 % of a pipelined archive profile, half of it this field's).
    pub host: Option<&'b [u8]>,
    /// The header fields, in order.
    pub headers: &'h [httparse::Header<'b>],
}

/// A set of request field names a handler may look for: what a request
/// carries, as far as its codec noted, so that a handler can skip a pass
/// over the fields when none it reads can be there
/// ([`crate::Request::may_carry`]).
///
/// A superset: a name the request carries is in it, in any case and
/// however often repeated; a name it does not carry may be too. The
/// HTTP/1.1 codec sets a name's bit from the field's length and first
/// letter (`If-Match` and `If-Range`, both 8 bytes, set each other's), in
/// the pass over the names its own rules make; a request that came some
/// other way (HTTP/2, HTTP/3, a test) carries [`FieldNames::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldNames(u8);

impl FieldNames {
    /// No name.
    pub const NONE: FieldNames = FieldNames(0);
    /// `Accept-Encoding` (RFC 9110 §12.5.3).
    pub const ACCEPT_ENCODING: FieldNames = FieldNames(1);
    /// `Range` (RFC 9110 §14.2).
    pub const RANGE: FieldNames = FieldNames(1 << 1);
    /// `If-Range` (RFC 9110 §13.1.5).
    pub const IF_RANGE: FieldNames = FieldNames(1 << 2);
    /// `If-Match` (RFC 9110 §13.1.1).
    pub const IF_MATCH: FieldNames = FieldNames(1 << 3);
    /// `If-None-Match` (RFC 9110 §13.1.2).
    pub const IF_NONE_MATCH: FieldNames = FieldNames(1 << 4);
    /// `If-Modified-Since` (RFC 9110 §13.1.3).
    pub const IF_MODIFIED_SINCE: FieldNames = FieldNames(1 << 5);
    /// `If-Unmodified-Since` (RFC 9110 §13.1.4).
    pub const IF_UNMODIFIED_SINCE: FieldNames = FieldNames(1 << 6);
    /// Every name above: what a request not from the HTTP/1.1 codec
    /// carries, as far as anyone noted.
    pub const ALL: FieldNames = FieldNames(0x7f);

    /// The names of both sets.
    pub const fn union(self, other: FieldNames) -> FieldNames {
        FieldNames(self.0 | other.0)
    }

    /// Whether the two sets share a name.
    pub const fn intersects(self, other: FieldNames) -> bool {
        self.0 & other.0 != 0
    }
}

impl<'b> Head<'b, '_> {
    /// The protocols an upgrade offers (the first non-empty Upgrade
    /// field's value, e.g. `websocket`: several lines are one list, RFC
    /// 9110 §5.3), if the request offers one ([`Head::upgrade`]).
    pub fn upgrade_offer(&self) -> Option<&'b [u8]> {
        if !self.upgrade {
            return None;
        }
        self.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("upgrade"))
            .map(|h| trim_ows(h.value))
            .find(|v| !v.is_empty())
    }
}

/// The result of [`parse_head`] on bytes that are not (yet) an error.
#[derive(Debug)]
pub enum Parsed<'b, 'h> {
    /// A whole head was found.
    Complete(Head<'b, 'h>),
    /// More bytes are needed; not an error.
    Partial,
}

/// Parses one request head at the start of `buf`.
///
/// `headers` receives the fields; at most `limits.n_headers_max` of them are
/// used. It need not be initialised, so a large array on the stack costs
/// nothing. Bytes after the head are not looked at.
pub fn parse_head<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
) -> Result<Parsed<'b, 'h>, HeadError> {
    parse_head_with(buf, headers, limits, true)
}

/// [`parse_head`], with the plain parser (`plain`) or httparse alone: the
/// fuzz target `request_head` compares the two.
pub(crate) fn parse_head_with<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
    plain: bool,
) -> Result<Parsed<'b, 'h>, HeadError> {
    let mut head = None;
    let framed = parse_head_into(buf, headers, limits, plain, &mut head, |h| *h)?;
    Ok(match (framed, head) {
        (Some(_), Some(head)) => Parsed::Complete(head),
        _ => Parsed::Partial,
    })
}

/// What the HTTP/1.1 machine reads of a head once its request is made
/// (`parse_head_into`): how long it is, how its body is framed and what
/// its answer must honour. Small and `Copy`, returned in registers on
/// the common path; the rest of the head goes where the handler reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Framed {
    /// [`Head::head_len`].
    pub(crate) head_len: usize,
    /// [`Head::framing`].
    pub(crate) framing: Framing,
    /// [`Head::version`].
    pub(crate) version: Version,
    /// The method is `HEAD`: the answer carries no body (RFC 9110 §9.3.2).
    pub(crate) head_only: bool,
    /// [`Head::keep_alive`].
    pub(crate) keep_alive: bool,
    /// [`Head::expect_continue`].
    pub(crate) expect_continue: bool,
    /// [`Head::te_trailers`].
    pub(crate) te_trailers: bool,
    /// [`Head::upgrade`].
    pub(crate) upgrade: bool,
}

impl Framed {
    /// The facts of `head`.
    #[inline(always)]
    pub(crate) fn of(head: &Head<'_, '_>) -> Framed {
        Framed {
            head_len: head.head_len,
            framing: head.framing,
            version: head.version,
            head_only: head.method == "HEAD",
            keep_alive: head.keep_alive,
            expect_continue: head.expect_continue,
            te_trailers: head.te_trailers,
            upgrade: head.upgrade,
        }
    }
}

/// [`parse_head_with`] writing what the head is made into where its
/// reader keeps it: if a whole head was found, `make` turns it into what
/// the caller keeps (the HTTP/1.1 driver: the handler's `Request`), that
/// is put in `out`, and the facts the machine reads are returned
/// (`Ok(None)`: more bytes are needed, and `out` is as it was).
///
/// The HTTP/1.1 machine passes the place its driver reads the request
/// from (its common path takes the two halves apart: [`parse_head_plain`],
/// then [`parse_head_httparse`]; a buffered body's head is parsed again
/// here). Returned as a value, the head was built in one temporary where
/// the plain path and httparse's met, then copied out (seven 16-byte
/// moves, bench/runs/2026-11-28-loop9); each path stores to `out`
/// itself. Written to an `Option<Head>` and copied from there into the
/// `Request`, it was stored twice (about 50 instructions a request,
/// callgrind hello-c50, bench/runs/2026-11-28-hreq): `make` builds the
/// request from the head's values where they are computed, and the head
/// itself is never stored.
#[inline(always)]
pub(crate) fn parse_head_into<'b, 'h, R>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
    plain: bool,
    out: &mut Option<R>,
    make: impl FnOnce(&Head<'b, 'h>) -> R,
) -> Result<Option<Framed>, HeadError> {
    let n_headers_max = headers.len().min(limits.n_headers_max);
    let mut headers = &mut headers[..n_headers_max];
    // The plain head first (`codec::plain`): a strictly formed head is
    // tokenised in one pass; any other is httparse's, whose answer
    // stands. The result is the same either way; only the cost differs.
    if plain {
        headers = match super::plain::parse(buf, headers) {
            Ok((p, fields)) => {
                // Every line ends in CRLF: the plain parser takes no other.
                return checked(
                    p.method, p.target, p.minor, p.head_len, p.line_len, true, fields, limits, out, make,
                )
                .map(Some);
            }
            Err(headers) => headers,
        };
    }
    parse_head_httparse(buf, headers, limits, out, make)
}

/// What the plain parser made of a head ([`parse_head_plain`]).
pub(crate) enum Plain<'b, 'h> {
    /// It took the head: the rules' verdict on it (what is made of it
    /// is in `out`).
    Taken(Result<Framed, HeadError>),
    /// It did not (a head in pieces, or not strictly formed): httparse's
    /// turn ([`parse_head_httparse`]), with the field slots back.
    Declined(&'h mut [MaybeUninit<httparse::Header<'b>>]),
}

/// [`parse_head_into`]'s plain half alone, for the HTTP/1.1 machine's
/// common path: the facts stay in registers up to where they are used.
/// Merged with httparse's in one returned value (`parse_head_into`),
/// they met the out-of-line path's return slot, and the plain path
/// stored them there to read them back (10 instructions a request,
/// callgrind hello-c50, bench/runs/2026-11-28-hreq); the machine goes on
/// from each half apart instead.
#[inline(always)]
pub(crate) fn parse_head_plain<'b, 'h, R>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
    out: &mut Option<R>,
    make: impl FnOnce(&Head<'b, 'h>) -> R,
) -> Plain<'b, 'h> {
    let n_headers_max = headers.len().min(limits.n_headers_max);
    let headers = &mut headers[..n_headers_max];
    match super::plain::parse(buf, headers) {
        Ok((p, fields)) => Plain::Taken(checked(
            p.method, p.target, p.minor, p.head_len, p.line_len, true, fields, limits, out, make,
        )),
        Err(headers) => Plain::Declined(headers),
    }
}

/// [`parse_head_with`] for a head the plain parser did not take:
/// httparse's tokens, then the same rules. Out of line: inlined, this
/// path and its own copy of the rules lay between the plain path's hot
/// blocks in the driver's code, whose 763 instructions a hello request
/// runs were spread over 105 cache lines of a 43 KB function
/// (bench/runs/2026-11-27-req6).
#[cold]
#[inline(never)]
pub(crate) fn parse_head_httparse<'b, 'h, R>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
    out: &mut Option<R>,
    make: impl FnOnce(&Head<'b, 'h>) -> R,
) -> Result<Option<Framed>, HeadError> {
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, headers) {
        Ok(httparse::Status::Complete(n)) => n,
        other => return incomplete(buf, other.map(|_| ()), limits),
    };
    // httparse fills every field on Complete.
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::BadRequest("incomplete request line"));
    };
    // The request line's length, to its LF (`incomplete` says why),
    // found from where httparse put the target: `HTTP/1.x` follows it
    // after one space, then CRLF or a bare LF (refused below). Empty lines
    // before the request line are rare: searched for.
    let headers: &'h [httparse::Header<'b>] = req.headers;
    let in_head = |s: &str| {
        let at = (s.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        (at < head_len).then_some(at)
    };
    let (line_len, crlf) = match (in_head(method), in_head(target)) {
        (Some(skipped), Some(target_at)) => {
            let version_end = target_at + target.len() + 1 + "HTTP/1.1".len();
            let line_len = match (skipped, buf.get(version_end)) {
                (0, Some(b'\r')) => version_end + 1,
                (0, _) => version_end,
                _ => memchr::memchr(b'\n', buf).unwrap_or(buf.len()),
            };
            (
                line_len,
                lines_end_in_crlf(buf, head_len, skipped, version_end, headers),
            )
        }
        // httparse's slices lie in `buf`; were one not to, the slow way.
        _ => (
            memchr::memchr(b'\n', buf).unwrap_or(buf.len()),
            !has_bare_lf(&buf[..head_len]),
        ),
    };
    checked(
        method, target, minor, head_len, line_len, crlf, headers, limits, out, make,
    )
    .map(Some)
}

/// The rules of RFC 9112 on a tokenised head (`line_len`: the request
/// line's, to its LF; `crlf`: every line ends in CRLF), whichever parser
/// tokenised it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn checked<'b, 'h, R>(
    method: &'b str,
    target: &'b str,
    minor: u8,
    head_len: usize,
    line_len: usize,
    crlf: bool,
    headers: &'h [httparse::Header<'b>],
    limits: &Limits,
    out: &mut Option<R>,
    make: impl FnOnce(&Head<'b, 'h>) -> R,
) -> Result<Framed, HeadError> {
    if line_len > limits.uri_bytes_max.saturating_add(LINE_OVERHEAD_MAX) {
        return Err(HeadError::UriTooLong);
    }
    if head_len > limits.head_bytes_max {
        return Err(HeadError::HeadTooLarge);
    }
    if !crlf {
        return Err(HeadError::BadRequest("bare LF in request head"));
    }
    if target.len() > limits.uri_bytes_max {
        return Err(HeadError::UriTooLong);
    }
    // RFC 9112 §3.2: no form of request-target has a fragment; a client
    // must not send one. Refuse rather than let `#` reach a path. The same
    // pass finds where the query starts.
    let bytes = target.as_bytes();
    let query_at = match find_query_or_fragment(bytes) {
        Some(i) if bytes[i] == b'#' || memchr::memchr(b'#', &bytes[i + 1..]).is_some() => {
            return Err(HeadError::BadRequest("fragment in request target"))
        }
        found => found,
    };
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let mut fields = Fields::default();
    fields.scan(headers, version)?;

    // RFC 9112 §3.2: origin-form, absolute-form, authority-form (CONNECT) or
    // asterisk-form (OPTIONS). Anything else is not a request target. The
    // common request, `GET /…`, passes both checks: it skips them (the two
    // calls were 58 instructions of a pipelined hello's 2,068, callgrind).
    let (authority, method_registered) = if method == "GET" && bytes.first() == Some(&b'/') {
        (None, true)
    } else {
        let authority = target_authority(method, target)?;
        (authority, check_method(method)?)
    };

    // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status
    // code to any HTTP/1.1 request message that lacks a Host header field and
    // to any request message that contains more than one Host header field
    // line or a Host header field with an invalid field value."
    if fields.n_hosts > 1 {
        return Err(HeadError::BadRequest("more than one Host field"));
    }
    if version == Version::Http11 && fields.n_hosts == 0 {
        return Err(HeadError::BadRequest("missing Host field"));
    }
    let host = match (authority, fields.host) {
        (Some(authority), _) => Some(authority.as_bytes()),
        (None, Some(host)) => Some(host),
        (None, None) => None,
    };
    // Origin-form (`/…`): split where the search above found `?`.
    let (path, query) = match (bytes.first(), query_at) {
        (Some(b'/'), Some(q)) => (&target[..q], Some(&target[q + 1..])),
        (Some(b'/'), None) => (target, None),
        _ => crate::request::split_target(target),
    };

    let framing = fields.framing(version, limits)?;
    let keep_alive = match version {
        Version::Http11 | Version::Http2 | Version::Http3 => !fields.conn_close,
        Version::Http10 => fields.conn_keep_alive && !fields.conn_close,
    };
    // RFC 9110 §7.8: an Upgrade field not named by Connection, or in an
    // HTTP/1.0 request, is ignored; an empty one offers nothing.
    let upgrade = version == Version::Http11 && fields.conn_upgrade && fields.upgrade;
    let head = Head {
        method,
        target,
        path,
        query,
        version,
        head_len,
        framing,
        keep_alive,
        expect_continue: fields.expect_continue,
        te_trailers: fields.te_trailers,
        upgrade,
        method_registered,
        field_names: fields.names,
        host,
        headers,
    };
    *out = Some(make(&head));
    Ok(Framed::of(&head))
}

/// `parse_head` on what httparse did not find complete: more bytes are
/// needed, or the bytes are wrong. Out of line: not the common case.
#[inline(never)]
#[cold]
fn incomplete(buf: &[u8], parsed: Result<(), httparse::Error>, limits: &Limits) -> Result<Option<Framed>, HeadError> {
    // RFC 9112 §2.2: "a server that is expecting to receive and parse a
    // request-line SHOULD ignore at least one empty line (CRLF) received prior
    // to the request-line". httparse skips them; they count toward the limit.
    // The first check of all, so that a request line too long gets its 414
    // however its bytes arrive.
    let line_len = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    if line_len > limits.uri_bytes_max.saturating_add(LINE_OVERHEAD_MAX) {
        return Err(HeadError::UriTooLong);
    }
    match parsed {
        // Partial (a complete head does not come here).
        Ok(()) => {
            if buf.len() > limits.head_bytes_max {
                return Err(HeadError::HeadTooLarge);
            }
            Ok(None)
        }
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::HeadTooLarge),
        // A request line cut inside its version (`HTTP/2.`) may still end
        // as a 505's `HTTP/2.0` or a 400's `HTTP/2.x`: wait for the line's
        // end, so that how the bytes were split never changes the answer
        // (found by splitting scripted requests at every offset). The line
        // is bounded by the check above.
        Err(httparse::Error::Version) if line_len == buf.len() && buf.len() <= limits.head_bytes_max => Ok(None),
        Err(httparse::Error::Version) => Err(version_error(buf)),
        Err(e) => Err(HeadError::BadRequest(httparse_reason(e))),
    }
}

/// Whether every line of a head httparse found complete ends in CRLF:
/// RFC 9112 §2.2 allows a recipient to take a bare LF as a line's end; we
/// do not (see `has_bare_lf`, which says why, and which this replaces on
/// the common path: that pass over every byte was a quarter of
/// `parse_head`'s own samples). httparse has checked that a CR is
/// followed by LF, and takes an LF, bare or not, as the end of a line
/// only; so a bare LF can only be a line's end, and this looks at each
/// line's end: the empty lines before the request line (`skipped` bytes
/// of them), the request line's (after its version, at `version_end`),
/// each field line's (after its value and the blanks httparse trimmed
/// off it; an empty value points at its line's end), and the empty line's.
fn lines_end_in_crlf(
    buf: &[u8],
    head_len: usize,
    skipped: usize,
    version_end: usize,
    headers: &[httparse::Header<'_>],
) -> bool {
    if skipped > 0 && !buf[..skipped].chunks(2).all(|l| l == b"\r\n") {
        return false;
    }
    if buf.get(version_end) != Some(&b'\r') {
        return false;
    }
    if !field_lines_end_in_cr(buf, headers) {
        return false;
    }
    head_len >= 2 && buf.get(head_len - 2) == Some(&b'\r')
}

/// Whether each field line httparse found in `buf` has CR after its value
/// and the blanks httparse trimmed off it (an empty value points at its
/// line's end): the field lines' half of `lines_end_in_crlf`, shared with
/// the client role's check of a response head.
#[inline(always)]
pub(crate) fn field_lines_end_in_cr(buf: &[u8], headers: &[httparse::Header<'_>]) -> bool {
    for h in headers {
        let mut at = (h.value.as_ptr() as usize)
            .wrapping_sub(buf.as_ptr() as usize)
            .wrapping_add(h.value.len());
        while let Some(b' ' | b'\t') = buf.get(at) {
            at += 1;
        }
        if buf.get(at) != Some(&b'\r') {
            return false;
        }
    }
    true
}

/// Whether a line of `head` ends in LF without CR before it.
///
/// RFC 9112 §2.2: "a recipient MAY recognize a single LF as a line terminator
/// and ignore any preceding CR". We do not: a front end that reads the LF as
/// part of a field value (`Dummy: x\nContent-Length: 23`) frames the message
/// differently from us, and that difference smuggles requests. So, as a
/// server that may sit behind a proxy, we refuse a bare LF anywhere in the
/// head (a 400 and a close).
///
/// A branch-free pass the compiler vectorises (8-13 ns on a 395-byte,
/// 13-line browser head); `lines_end_in_crlf` now does the same from the
/// lines' ends alone, and this pass is the tests' reference and the
/// fallback should httparse's slices not lie in the buffer.
#[cold]
fn has_bare_lf(head: &[u8]) -> bool {
    let Some(&first) = head.first() else {
        return false;
    };
    let mut bare = first == b'\n';
    for (&prev, &b) in head.iter().zip(&head[1..]) {
        bare |= (b == b'\n') & (prev != b'\r');
    }
    bare
}

/// Room for the method, spaces and version around the target in a request line.
const LINE_OVERHEAD_MAX: usize = 64;

/// Where a request target's first `?` or `#` is. Targets up to
/// `SHORT_TARGET_BYTES` are looked at eight bytes a step (`marks`):
/// memchr2's set-up cost 49 instructions on h2load's one-byte `/`
/// (callgrind, hello pipelined), and a loop byte by byte cost about eight a
/// byte (62 instructions for `/17.txt`, bench/runs/2026-11-28-archive10).
#[inline(always)]
fn find_query_or_fragment(target: &[u8]) -> Option<usize> {
    let n = target.len();
    if n < 4 {
        return target.iter().position(|&b| b == b'?' || b == b'#');
    }
    if n <= 8 {
        // Two four-byte loads that overlap when n < 8: a mark in the
        // second half is at n - 4 + its lane there, and the overlap was seen
        // in the first half.
        let lo = u32::from_le_bytes(*target.first_chunk::<4>()?);
        let hi = u32::from_le_bytes(*target.last_chunk::<4>()?);
        let m = marks(u64::from(lo) | (u64::from(hi) << 32));
        if m == 0 {
            return None;
        }
        let lane = (m.trailing_zeros() / 8) as usize;
        return Some(if lane < 4 { lane } else { n - 4 + (lane - 4) });
    }
    if n > SHORT_TARGET_BYTES {
        return memchr::memchr2(b'?', b'#', target);
    }
    let mut at = 0;
    while let Some(w) = target.get(at..at + 8) {
        let m = marks(u64::from_le_bytes(w.try_into().ok()?));
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    if at == n {
        return None;
    }
    // The last eight bytes, overlapping what was seen.
    let m = marks(u64::from_le_bytes(*target.last_chunk::<8>()?));
    (m != 0).then(|| n - 8 + (m.trailing_zeros() / 8) as usize)
}

/// The high bit of each byte lane of `w` that holds `?` or `#`, exact in
/// the lowest marked lane (a borrow can mark lanes above a true one, never
/// below), so `trailing_zeros() / 8` is the first one's place.
#[inline(always)]
fn marks(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let q = w ^ (ONES * u64::from(b'?'));
    let h = w ^ (ONES * u64::from(b'#'));
    ((q.wrapping_sub(ONES) & !q) | (h.wrapping_sub(ONES) & !h)) & HIGHS
}

/// Targets up to this long are searched eight bytes a step, longer ones
/// with memchr2 (see above).
const SHORT_TARGET_BYTES: usize = 32;

/// httparse refuses every version but 1.0 and 1.1. `HTTP/2.0` or `HTTP/3`
/// gets a 505, as RFC 9110 §15.6.6 asks; a version that is not even shaped
/// like one is a plain 400.
fn version_error(buf: &[u8]) -> HeadError {
    let line = match memchr::memchr(b'\n', buf) {
        Some(end) => &buf[..end],
        None => buf,
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // request-line = method SP request-target SP HTTP-version
    if memchr::memchr_iter(b' ', line).count() != 2 {
        return HeadError::BadRequest("malformed request line");
    }
    let version = match memchr::memrchr(b' ', line) {
        Some(space) => &line[space + 1..],
        None => return HeadError::BadRequest("malformed request line"),
    };
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit() => {
            HeadError::VersionNotSupported
        }
        [b'H', b'T', b'T', b'P', b'/', major] if major.is_ascii_digit() => HeadError::VersionNotSupported,
        _ => HeadError::NotHttp,
    }
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header field name",
        httparse::Error::HeaderValue => "invalid header field value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token in request line",
        httparse::Error::TooManyHeaders => "too many header fields",
        httparse::Error::Version => "invalid HTTP version",
    }
}

/// Returns the authority of an absolute-form target, checks the other forms.
fn target_authority<'b>(method: &str, target: &'b str) -> Result<Option<&'b str>, HeadError> {
    if method == "CONNECT" {
        // RFC 9112 §3.2.3: authority-form = uri-host ":" port, and only for
        // CONNECT. A malformed one is a 400; a good one still gets a 501
        // (`check_method`).
        return match target.rsplit_once(':') {
            Some((host, port))
                if !host.is_empty()
                    && is_valid_host(host.as_bytes())
                    && !port.is_empty()
                    && port.len() <= 5
                    && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Ok(None)
            }
            _ => Err(HeadError::BadRequest("invalid authority-form target")),
        };
    }
    let bytes = target.as_bytes();
    match bytes.first() {
        Some(b'/') => return Ok(None),
        Some(b'*') if bytes.len() == 1 && method == "OPTIONS" => return Ok(None),
        _ => {}
    }
    let rest = strip_prefix_ignore_case(target, "http://")
        .or_else(|| strip_prefix_ignore_case(target, "https://"))
        .ok_or(HeadError::BadRequest("invalid request target"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || !is_valid_host(authority.as_bytes()) {
        return Err(HeadError::BadRequest("invalid authority in request target"));
    }
    Ok(Some(authority))
}

/// Whether `method` is in IANA's HTTP Method Registry (RFC 9110's, PATCH,
/// WebDAV's and the rest): `Ok(true)`; `Ok(false)` for any other token
/// (RFC 9110 §9.1: "method = token"; PURGE, BAN, a custom one).
///
/// RFC 9110 §9.1: "An origin server that receives a request method that is
/// unrecognized or not implemented SHOULD respond with the 501 (Not
/// Implemented) status code", and a proxy forwards what it does not know.
/// So an unregistered method is no error here: it reaches a handler that
/// says it takes it (`Handler::takes_unknown_method`: the reverse proxy, a
/// `Router` route for that method), and every other handler, a plain
/// closure included, never sees one it could mistake for GET: the engine
/// answers it 501 (`conn/dispatch.rs`). A handler answers 405 for a
/// registered method it does not allow. `CONNECT` is registered but asks
/// for a tunnel, which the engine cannot open, and a 2xx to it would tell
/// the client the tunnel is up: 501 here.
pub(crate) fn check_method(method: &str) -> Result<bool, HeadError> {
    match method {
        "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "OPTIONS" | "TRACE" | "PATCH" => Ok(true),
        "CONNECT" => Err(HeadError::MethodNotImplemented),
        _ if REGISTERED_METHODS.contains(&method) => Ok(true),
        // Both HTTP/1.1 parsers, and HTTP/2's and HTTP/3's `:method`
        // check, take tokens only: looked at again for any other caller.
        _ if is_token(method.as_bytes()) => Ok(false),
        _ => Err(HeadError::MethodNotImplemented),
    }
}

/// IANA's HTTP Method Registry beyond the common methods above (WebDAV,
/// versioning, CalDAV, binding, QUERY), as of 2025. `PRI` is left out: it is
/// the HTTP/2 preface, never a request.
const REGISTERED_METHODS: [&str; 30] = [
    "ACL",
    "BASELINE-CONTROL",
    "BIND",
    "CHECKIN",
    "CHECKOUT",
    "COPY",
    "LABEL",
    "LINK",
    "LOCK",
    "MERGE",
    "MKACTIVITY",
    "MKCALENDAR",
    "MKCOL",
    "MKREDIRECTREF",
    "MKWORKSPACE",
    "MOVE",
    "ORDERPATCH",
    "PROPFIND",
    "PROPPATCH",
    "QUERY",
    "REBIND",
    "REPORT",
    "SEARCH",
    "UNBIND",
    "UNCHECKOUT",
    "UNLINK",
    "UNLOCK",
    "UPDATE",
    "UPDATEREDIRECTREF",
    "VERSION-CONTROL",
];

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

/// Host = uri-host [ ":" port ] (RFC 9110 §7.2), uri-host being a reg-name,
/// an IPv4 address or a bracketed IP literal. No userinfo, no path.
#[inline]
pub(crate) fn is_valid_host(host: &[u8]) -> bool {
    // The common host first: 8 to 16 bytes of lowercase letters, digits,
    // `-`, `.` and `:` (`127.0.0.1:8080`, `www.example.com`), judged as
    // two 8-byte arrays that may overlap, which LLVM compares as vectors:
    // 27 instructions for a 15-byte `127.0.0.1:port` against 50 for the
    // table below (callgrind, the function alone). Any other host, or a
    // byte outside that set, is judged by the table.
    if is_common_host(host) {
        return true;
    }
    // A table lookup per byte, without a branch per byte: this runs on
    // every request, and the early exit of `all` made a loop whose
    // every step waited on the last (half of `Fields::scan`'s samples).
    // Eight bytes a step, unrolled, and the last eight again (a check of
    // a byte twice changes nothing): a 15-byte `127.0.0.1:port` cost about
    // 80 instructions a byte at a time (callgrind, hello pipelined).
    if host.len() < 8 {
        return host.iter().fold(true, |ok, &b| ok & HOST_BYTES[usize::from(b)]);
    }
    let eight = |c: &[u8]| c.iter().fold(true, |ok, &b| ok & HOST_BYTES[usize::from(b)]);
    let mut chunks = host.chunks_exact(8);
    let mut ok = eight(&host[host.len() - 8..]);
    for chunk in &mut chunks {
        ok &= eight(chunk);
    }
    ok
}

/// Whether `host` is 8 to 16 bytes of the common host's set (see
/// [`is_valid_host`]): inlined where the request's Host field is judged,
/// so that the common host costs no call (`Fields::scan`), with
/// `is_valid_host` called only for any other.
#[inline(always)]
fn is_common_host(host: &[u8]) -> bool {
    match (host.first_chunk::<8>(), host.last_chunk::<8>()) {
        (Some(first), Some(last)) => host.len() <= 16 && is_common_host8(first) & is_common_host8(last),
        _ => false,
    }
}

/// Whether all eight bytes are digits, `:`, lowercase letters, `-` or
/// `.` (a subset of `HOST_BYTES`). Ranges tested with `|`, not `||`, and
/// no early exit, so that the loop becomes vector compares: written with
/// `||` and `is_ascii_digit`, the check above cost 113 instructions.
#[inline(always)]
fn is_common_host8(bytes: &[u8; 8]) -> bool {
    let mut other = 0u8;
    for &b in bytes {
        let common = (b.wrapping_sub(b'0') <= b':' - b'0')
            | (b.wrapping_sub(b'a') <= b'z' - b'a')
            | (b.wrapping_sub(b'-') <= b'.' - b'-');
        other |= u8::from(!common);
    }
    other == 0
}

const HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'%'
                    | b'['
                    | b']'
            );
        b += 1;
    }
    table
};

/// What the header fields say about framing and the connection, gathered in
/// one pass.
#[derive(Default)]
struct Fields<'b> {
    n_hosts: usize,
    host: Option<&'b [u8]>,
    content_length: Option<u64>,
    chunked: bool,
    transfer_encoding: bool,
    unknown_coding: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    conn_upgrade: bool,
    /// A non-empty Upgrade field was seen.
    upgrade: bool,
    expect_continue: bool,
    te_trailers: bool,
    /// The names handlers look for that the head may carry.
    names: FieldNames,
}

impl<'b> Fields<'b> {
    /// Inlined into `parse_head`, with the fields a request rarely sends
    /// out of line (`other`): returned from a call, the gathered fields
    /// were written out and read back, about 45 of the 233 instructions
    /// the scan cost a pipelined hello (callgrind). Gathered into the
    /// caller's `Fields`, not returned in an `Ok`: `other`'s `&mut self`
    /// keeps them in memory, and the `Ok` was a copy of them read back
    /// flag by flag (bench/runs/2026-11-28-head8).
    #[inline(always)]
    fn scan(&mut self, headers: &[httparse::Header<'b>], version: Version) -> Result<(), HeadError> {
        let f = self;
        for h in headers {
            let name = h.name.as_bytes();
            // Dispatch on length and first letter first: most fields (a
            // browser's User-Agent, Accept, Cookie) are none of these.
            // httparse gives no empty name (a token is one byte or more).
            let first = name.first().map_or(0, |b| b | 0x20);
            match (name.len(), first) {
                (4, b'h') if is_field_name(name, b"host") => {
                    f.n_hosts += 1;
                    // httparse has trimmed the blanks around the value
                    // (were one left, it would fail the check: a 400).
                    if !is_common_host(h.value) && !is_valid_host(h.value) {
                        return Err(HeadError::BadRequest("invalid Host field"));
                    }
                    // is_valid_host admits ASCII only: `Request::host`
                    // makes it a `str` if a handler asks.
                    f.host = Some(h.value);
                }
                (2, b't') | (6, b'e') | (7, b'u') | (10, b'c') | (14, b'c') | (17, b't') => f.other(h, version)?,
                // The names a file or archive handler reads: noted here,
                // in the same match (one dispatch a field), so that a
                // request with none of them skips the handler's own pass.
                (5, b'r') => f.names.0 |= FieldNames::RANGE.0,
                (8, b'i') => f.names.0 |= FieldNames::IF_MATCH.0 | FieldNames::IF_RANGE.0,
                (13, b'i') => f.names.0 |= FieldNames::IF_NONE_MATCH.0,
                (15, b'a') => f.names.0 |= FieldNames::ACCEPT_ENCODING.0,
                (17, b'i') => f.names.0 |= FieldNames::IF_MODIFIED_SINCE.0,
                (19, b'i') => f.names.0 |= FieldNames::IF_UNMODIFIED_SINCE.0,
                _ => {}
            }
        }
        Ok(())
    }

    /// The fields `scan` acts on besides Host.
    #[inline(never)]
    fn other(&mut self, h: &httparse::Header<'b>, version: Version) -> Result<(), HeadError> {
        let f = self;
        let name = h.name.as_bytes();
        match name.len() {
            2 if name.eq_ignore_ascii_case(b"te") => {
                f.te_trailers |= list_elements(h.value).any(|e| e.eq_ignore_ascii_case(b"trailers"));
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                let value = trim_ows(h.value);
                if value.eq_ignore_ascii_case(b"100-continue") {
                    f.expect_continue = version == Version::Http11;
                } else {
                    return Err(HeadError::ExpectationFailed);
                }
            }
            7 if name.eq_ignore_ascii_case(b"upgrade") => {
                f.upgrade |= !trim_ows(h.value).is_empty();
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                let options = connection_options(h.value);
                f.conn_close |= options.close;
                f.conn_keep_alive |= options.keep_alive;
                f.conn_upgrade |= options.upgrade;
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                // RFC 9110 §8.6: a list of identical values may be taken as
                // one; differing values are an unrecoverable error.
                for element in h.value.split(|&b| b == b',') {
                    let n = parse_content_length(trim_ows(element))?;
                    match f.content_length {
                        Some(prev) if prev != n => {
                            return Err(HeadError::BadRequest("differing Content-Length values"))
                        }
                        _ => f.content_length = Some(n),
                    }
                }
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                f.transfer_encoding = true;
                for coding in list_elements(h.value) {
                    // RFC 9112 §6.1: "A sender MUST NOT apply the chunked
                    // transfer coding more than once to a message body."
                    if f.chunked {
                        return Err(HeadError::BadRequest("chunked is not the final transfer coding"));
                    }
                    if coding.eq_ignore_ascii_case(b"chunked") {
                        f.chunked = true;
                    } else if is_token(coding) {
                        f.unknown_coding = true;
                    } else {
                        return Err(HeadError::BadRequest("malformed Transfer-Encoding"));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// RFC 9112 §6.3, the message body length rules, for requests.
    fn framing(&self, version: Version, limits: &Limits) -> Result<Framing, HeadError> {
        if self.transfer_encoding {
            // §6.1: "A server or client that receives an HTTP/1.0 message
            // containing a Transfer-Encoding header field MUST treat the
            // message as if the framing is faulty".
            if version == Version::Http10 {
                return Err(HeadError::BadRequest("Transfer-Encoding in an HTTP/1.0 request"));
            }
            // §6.3: a message with both "ought to be handled as an error";
            // we refuse it rather than guess (request smuggling).
            if self.content_length.is_some() {
                return Err(HeadError::BadRequest("both Transfer-Encoding and Content-Length"));
            }
            if self.unknown_coding && self.chunked {
                return Err(HeadError::NotImplemented);
            }
            // §6.3: "If a Transfer-Encoding header field is present in a
            // request and the chunked transfer coding is not the final
            // encoding, the message body length cannot be determined reliably;
            // the server MUST respond with the 400 (Bad Request) status code".
            if !self.chunked {
                return Err(if self.unknown_coding {
                    HeadError::NotImplemented
                } else {
                    HeadError::BadRequest("empty Transfer-Encoding")
                });
            }
            return Ok(Framing::Chunked);
        }
        match self.content_length {
            None | Some(0) => Ok(Framing::Empty),
            Some(n) if n > limits.body_bytes_max => Err(HeadError::BodyTooLarge),
            Some(n) => Ok(Framing::Length(n)),
        }
    }
}

/// Whether a four-byte field `name` is `lower` (lowercase letters) in any
/// case, in one compare: a letter and its capital differ in bit 5 only,
/// so setting it in each byte of `name` leaves `lower` exactly when each
/// byte is that letter or its capital.
#[inline(always)]
fn is_field_name(name: &[u8], lower: &[u8; 4]) -> bool {
    debug_assert!(lower.iter().all(u8::is_ascii_lowercase));
    match name {
        [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]) | 0x2020_2020 == u32::from_le_bytes(*lower),
        _ => false,
    }
}

/// Content-Length = 1*DIGIT. No sign, no spaces inside, no overflow.
fn parse_content_length(digits: &[u8]) -> Result<u64, HeadError> {
    content_length_digits(digits).ok_or(HeadError::BadRequest("invalid Content-Length"))
}

/// A Content-Length value's digits as a number: 1 to 19 ASCII digits
/// (so no overflow), nothing else. The server's and the client's parse.
pub(crate) fn content_length_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(d - b'0');
    }
    Some(n)
}

/// The `close` and `keep-alive` options of a Connection field's value
/// (RFC 9112 §9.3, §9.6): whether each is present.
pub(crate) fn connection_options(value: &[u8]) -> ConnectionOptions {
    let mut options = ConnectionOptions::default();
    for option in list_elements(value) {
        options.close |= option.eq_ignore_ascii_case(b"close");
        options.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
        options.upgrade |= option.eq_ignore_ascii_case(b"upgrade");
    }
    options
}

/// The Connection field's options the codec acts on (RFC 9110 §7.6.1).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionOptions {
    pub(crate) close: bool,
    pub(crate) keep_alive: bool,
    /// RFC 9110 §7.8: a sender of Upgrade lists `upgrade` here, and a
    /// recipient ignores an Upgrade field it does not name.
    pub(crate) upgrade: bool,
}

/// The non-empty elements of a comma-separated list (RFC 9110 §5.6.1),
/// with optional whitespace (SP and HTAB only) trimmed.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows).filter(|e| !e.is_empty())
}

/// Trims OWS = *( SP / HTAB ). Other whitespace, like VT or FF, is kept so
/// that it makes the value invalid rather than being silently ignored. The
/// one OWS trim of the workspace: `peregrine_files` parses its fields with it.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// token = 1*tchar (RFC 9110 §5.6.2).
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// tchar (RFC 9110 §5.6.2), one table look: the proxy checks every field
/// name it forwards byte by byte, where the comparisons cost about 1,000
/// instructions a request (callgrind, `proxy-c50`).
#[inline]
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

static TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchar_table_is_rfc_9110_tchar() {
        let spelled = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        for b in 0..=255u8 {
            assert_eq!(is_tchar(b), spelled.contains(&b), "byte {b:#04x}");
        }
    }

    #[test]
    fn a_complete_request_line_is_measured_to_its_lf() {
        // uri_bytes_max 100: the line may be 164 bytes up to its LF.
        let target = format!("/{}", "a".repeat(99));
        // Within the limit, the line is a head (its method one the
        // engine answers 501 unless a handler takes it).
        let cases = [
            (53, "\n", Err(400)),
            (54, "\r\n", Err(414)),
            (54, "\n", Err(400)),
            (55, "\n", Err(414)),
            (53, "\r\n", Ok(())),
        ];
        for (n, eol, want) in cases {
            let head = format!("{} {target} HTTP/1.1{eol}Host: x\r\n\r\n", "X".repeat(n));
            let mut headers = [const { MaybeUninit::uninit() }; 100];
            let limits = Limits {
                uri_bytes_max: 100,
                ..Limits::default()
            };
            let got = parse_head(head.as_bytes(), &mut headers, &limits).map(|_| ());
            assert_eq!(got.map_err(HeadError::status), want, "method of {n}, {eol:?}");
        }
    }

    /// `lines_end_in_crlf` (the lines' ends only) refuses exactly the
    /// heads `has_bare_lf` (every byte) finds a bare LF in, over heads
    /// built from every mix of line ends, blanks around values, empty
    /// values and empty lines before the request line.
    #[test]
    fn line_ends_agree_with_the_byte_by_byte_pass() {
        let eols: [&[u8]; 2] = [b"\r\n", b"\n"];
        let values: [&[u8]; 6] = [b"a", b"", b" ", b" a b \t", b"\ta", b"a\t \t"];
        let mut n = 0;
        for lead in [&b""[..], b"\r\n", b"\n", b"\r\n\r\n", b"\n\r\n"] {
            for line_eol in eols {
                for (v1, v2) in values.iter().flat_map(|a| values.iter().map(move |b| (a, b))) {
                    for e1 in eols {
                        for e2 in eols {
                            for end in eols {
                                for n_fields in 0..=2 {
                                    let mut head = lead.to_vec();
                                    head.extend_from_slice(b"GET /a?b HTTP/1.0");
                                    head.extend_from_slice(line_eol);
                                    for (i, (v, e)) in [(v1, e1), (v2, e2)].into_iter().take(n_fields).enumerate() {
                                        head.extend_from_slice(if i == 0 { b"X:" } else { b"Yy: " });
                                        head.extend_from_slice(v);
                                        head.extend_from_slice(e);
                                    }
                                    head.extend_from_slice(end);
                                    let mut headers = [const { MaybeUninit::uninit() }; 8];
                                    let mut req = httparse::Request::new(&mut []);
                                    let Ok(httparse::Status::Complete(len)) =
                                        req.parse_with_uninit_headers(&head, &mut headers)
                                    else {
                                        continue;
                                    };
                                    let (method, target) = (req.method.unwrap(), req.path.unwrap());
                                    let skipped = method.as_ptr() as usize - head.as_ptr() as usize;
                                    let at = target.as_ptr() as usize - head.as_ptr() as usize;
                                    let version_end = at + target.len() + 9;
                                    assert_eq!(
                                        lines_end_in_crlf(&head, len, skipped, version_end, req.headers),
                                        !has_bare_lf(&head[..len]),
                                        "{:?}",
                                        String::from_utf8_lossy(&head)
                                    );
                                    n += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(n > 1000, "{n} heads");
    }

    #[test]
    fn the_target_is_split_as_requests_split_it() {
        let targets = [
            "/",
            "/a",
            "/a?b",
            "/a?",
            "/?",
            "/a?b?c",
            "/a/b?x=1&y",
            "http://h/p?q",
            "http://h",
            "http://h?q",
            "*",
        ];
        for target in targets {
            let method = if target == "*" { "OPTIONS" } else { "GET" };
            let head = format!("{method} {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            let mut headers = [const { MaybeUninit::uninit() }; 8];
            let Ok(Parsed::Complete(h)) = parse_head(head.as_bytes(), &mut headers, &Limits::default()) else {
                panic!("{target}");
            };
            assert_eq!((h.path, h.query), crate::request::split_target(target), "{target}");
        }
    }

    #[test]
    fn host_bytes_are_rfc_3986s() {
        for b in 0..=255u8 {
            let spec = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:%[]".contains(&b);
            assert_eq!(HOST_BYTES[usize::from(b)], spec, "byte {b:#04x}");
        }
    }

    /// The unrolled host check (eight bytes a step, the last eight again)
    /// says what one byte at a time says: every length to 40, with one
    /// byte of each kind at each place.
    #[test]
    fn the_unrolled_host_check_is_the_byte_by_byte_one() {
        let one_by_one = |h: &[u8]| h.iter().all(|&b| HOST_BYTES[usize::from(b)]);
        for len in 0..=40 {
            let good = vec![b'a'; len];
            assert!(is_valid_host(&good));
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut host = good.clone();
                    host[at] = b;
                    assert_eq!(is_valid_host(&host), one_by_one(&host), "{len} bytes, {b:#04x} at {at}");
                }
            }
        }
    }

    /// The word-wide check of the common host is the set it names, for
    /// every byte at every place and every pair of neighbours (where a
    /// carry could cross).
    #[test]
    fn the_common_host_word_check_is_its_set() {
        let common = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || matches!(b, b':' | b'-' | b'.');
        for base in [*b"aaaaaaaa", *b"09:.-zz0"] {
            for at in 0..8 {
                for b in 0..=255u8 {
                    let mut w = base;
                    w[at] = b;
                    assert_eq!(is_common_host8(&w), w.iter().all(|&b| common(b)), "{w:?}");
                    if at < 7 {
                        for c in 0..=255u8 {
                            w[at + 1] = c;
                            assert_eq!(is_common_host8(&w), w.iter().all(|&b| common(b)), "{w:?}");
                        }
                    }
                }
            }
        }
    }

    /// The one-compare name check is `eq_ignore_ascii_case`, for every
    /// byte at every place of a four-byte name.
    #[test]
    fn a_field_name_compared_as_a_word_is_compared_ignoring_case() {
        for at in 0..4 {
            for b in 0..=255u8 {
                for base in [*b"host", *b"HOST", *b"hOsT"] {
                    let mut name = base;
                    name[at] = b;
                    assert_eq!(
                        is_field_name(&name, b"host"),
                        name.eq_ignore_ascii_case(b"host"),
                        "{name:?}"
                    );
                }
            }
        }
        assert!(!is_field_name(b"hos", b"host"));
        assert!(!is_field_name(b"hostt", b"host"));
    }

    /// Short targets are searched eight bytes a step: the same answer as
    /// memchr2 for every length around each threshold, every place of
    /// `?` and `#`, a second mark after the first, and fill bytes beside
    /// the marks' values (a borrow from one lane must not mark a lower one).
    #[test]
    fn a_short_target_finds_its_query_as_memchr2_does() {
        let fills = [b'a', 0x00, 0x01, b'"', b'$', b'>', b'@', 0x7f, 0x80, 0xa3, 0xbf, 0xff];
        for len in 0..=SHORT_TARGET_BYTES + 4 {
            for &fill in &fills {
                for at in 0..=len {
                    for mark in [b'?', b'#'] {
                        for second in [None, Some(b'?'), Some(b'#')] {
                            let mut target = vec![fill; len];
                            if at < len {
                                target[at] = mark;
                            }
                            if let Some(s) = second {
                                if let Some(b) = target.get_mut(at + 1 + (len - at) / 2) {
                                    *b = s;
                                }
                            }
                            assert_eq!(
                                find_query_or_fragment(&target),
                                memchr::memchr2(b'?', b'#', &target),
                                "{target:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The `GET /…` fast path refuses what the full checks refuse: a
    /// fragment, and (not taken) a lowercase method or another form.
    #[test]
    fn get_in_origin_form_skips_no_refusal() {
        let cases: [(&[u8], Result<(), u16>); 7] = [
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(())),
            (b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", Err(400)),
            (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(())),
            (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", Err(400)),
            (b"GET a HTTP/1.1\r\nHost: a\r\n\r\n", Err(400)),
            (b"GET http://b/ HTTP/1.1\r\nHost: a\r\n\r\n", Ok(())),
            (b"GETS / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(())),
        ];
        for (head, want) in cases {
            let got = parse(head).map(|_| ()).map_err(HeadError::status);
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    /// A method outside IANA's registry is a head like any other (RFC
    /// 9110 §9.1: a proxy forwards it), marked so that only a handler
    /// that takes it sees it; a registered one, the `GET /` fast path's
    /// included, is marked registered; CONNECT is still 501.
    #[test]
    fn unregistered_methods_are_heads_marked_so() {
        let cases: [(&[u8], Result<bool, u16>); 9] = [
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(true)),
            (b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", Ok(true)),
            (b"PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(true)),
            (b"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(true)),
            (b"PURGE /x HTTP/1.1\r\nHost: a\r\n\r\n", Ok(false)),
            (b"BAN / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(false)),
            (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(false)),
            (b"X-MY_METHOD! / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(false)),
            (b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", Err(501)),
        ];
        for (bytes, want) in cases {
            let mut headers = [const { MaybeUninit::uninit() }; 16];
            let got = match parse_head(bytes, &mut headers, &Limits::default()) {
                Ok(Parsed::Complete(h)) => Ok(h.method_registered),
                Ok(Parsed::Partial) => panic!("partial"),
                Err(e) => Err(e.status()),
            };
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(bytes));
        }
        // A method that is no token never gets this far (the parsers),
        // and is refused if asked.
        assert!(check_method("A B").is_err());
    }

    /// httparse trims the blanks around a value, so the Host check (which
    /// no longer trims) takes `Host:  a  ` as `a`.
    #[test]
    fn host_with_blanks_around_is_its_name() {
        for head in [
            &b"GET / HTTP/1.1\r\nHost:  a.b \t \r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHOST:\ta.b\r\n\r\n",
        ] {
            let (_, _, host) = parse(head).unwrap().unwrap();
            assert_eq!(host.as_deref(), Some("a.b"));
        }
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n").map(|_| ()),
            Err(HeadError::BadRequest("invalid Host field"))
        );
    }

    /// The names a head may carry, as parsed with the plain tokeniser
    /// first and by httparse alone (the two must agree).
    fn names_of(bytes: &[u8]) -> FieldNames {
        let names = [true, false].map(|plain| {
            let mut headers = [const { MaybeUninit::uninit() }; 100];
            match parse_head_with(bytes, &mut headers, &Limits::default(), plain) {
                Ok(Parsed::Complete(h)) => h.field_names,
                other => panic!("{other:?}: {:?}", String::from_utf8_lossy(bytes)),
            }
        });
        assert_eq!(names[0], names[1], "{:?}", String::from_utf8_lossy(bytes));
        names[0]
    }

    /// A handler skips its pass over the fields only when the head has
    /// none it reads: each name sets its bit, in any case, repeated or
    /// not, first or last, over either tokeniser (a value with obs-text
    /// goes to httparse); a head with none of them sets none.
    #[test]
    fn each_field_a_file_handler_reads_is_noted_in_any_case() {
        type N = FieldNames;
        let if_8 = N::IF_MATCH.union(N::IF_RANGE);
        let cases: [(&[u8], FieldNames); 14] = [
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", N::NONE),
            (
                b"GET / HTTP/1.1\r\nhost: a\r\nuser-agent: h2load\r\nAccept: */*\r\nCookie: x=1\r\n\r\n",
                N::NONE,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n",
                N::ACCEPT_ENCODING,
            ),
            (
                b"GET / HTTP/1.1\r\naCCEPT-eNCODING: br\r\nHost: a\r\n\r\n",
                N::ACCEPT_ENCODING,
            ),
            (b"GET / HTTP/1.1\r\nHost: a\r\nRANGE: bytes=0-1\r\n\r\n", N::RANGE),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nrange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n",
                N::RANGE,
            ),
            (b"GET / HTTP/1.1\r\nHost: a\r\nIf-Match: \"x\"\r\n\r\n", if_8),
            (b"GET / HTTP/1.1\r\nHost: a\r\nif-range: \"x\"\r\n\r\n", if_8),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\n\r\n",
                N::IF_NONE_MATCH,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nIF-MODIFIED-SINCE: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
                N::IF_MODIFIED_SINCE,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nIf-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
                N::IF_UNMODIFIED_SINCE,
            ),
            // httparse's: obs-text in a value.
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX: \xff\r\nrange: bytes=0-1\r\n\r\n",
                N::RANGE,
            ),
            // Two together; and HTTP/1.0 without Host.
            (
                b"GET / HTTP/1.0\r\nAccept-Encoding: gzip\r\nIf-None-Match: *\r\n\r\n",
                N::ACCEPT_ENCODING.union(N::IF_NONE_MATCH),
            ),
            // Names of the same length: another first letter notes
            // nothing, the same one the name's bit (a superset).
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: b\r\nAccept-Language: c\r\n\r\n",
                N::ACCEPT_ENCODING,
            ),
        ];
        for (head, want) in cases {
            assert_eq!(names_of(head), want, "{:?}", String::from_utf8_lossy(head));
        }
        // Each name alone, lowercase and uppercase: its own bit (If-Match
        // and If-Range: both).
        let names = [
            ("accept-encoding", N::ACCEPT_ENCODING),
            ("range", N::RANGE),
            ("if-range", if_8),
            ("if-match", if_8),
            ("if-none-match", N::IF_NONE_MATCH),
            ("if-modified-since", N::IF_MODIFIED_SINCE),
            ("if-unmodified-since", N::IF_UNMODIFIED_SINCE),
        ];
        for (name, want) in names {
            for name in [name.to_owned(), name.to_ascii_uppercase()] {
                let head = format!("GET / HTTP/1.1\r\nHost: a\r\n{name}: 1\r\n\r\n");
                assert_eq!(names_of(head.as_bytes()), want, "{name}");
            }
        }
    }

    fn parse(bytes: &[u8]) -> Result<Option<(Framing, bool, Option<String>)>, HeadError> {
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        match parse_head(bytes, &mut headers, &Limits::default())? {
            Parsed::Complete(h) => Ok(Some((
                h.framing,
                h.keep_alive,
                h.host.map(|h| String::from_utf8_lossy(h).into_owned()),
            ))),
            Parsed::Partial => Ok(None),
        }
    }

    /// What a head offers to upgrade to, as `parse_head` reads it.
    fn upgrade_of(bytes: &[u8]) -> Option<String> {
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        match parse_head(bytes, &mut headers, &Limits::default()) {
            Ok(Parsed::Complete(h)) => h.upgrade_offer().map(|u| String::from_utf8_lossy(u).into_owned()),
            other => panic!("{other:?}"),
        }
    }

    /// RFC 9110 §7.8: an upgrade is offered by an HTTP/1.1 request whose
    /// Connection field names `upgrade` beside a non-empty Upgrade field;
    /// otherwise the Upgrade field is ignored.
    #[test]
    fn an_upgrade_is_offered_only_with_connection_upgrade_over_http11() {
        let offered: &[(&str, Option<&str>)] = &[
            (
                "GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                Some("websocket"),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, UPGRADE\r\nupgrade:  h2c, foo/2 \r\n\r\n",
                Some("h2c, foo/2"),
            ),
            // Not named by Connection: ignored.
            ("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", None),
            // Named, but nothing offered.
            ("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", None),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade:\r\n\r\n",
                None,
            ),
            // HTTP/1.0: ignored (§7.8 "MUST ignore").
            (
                "GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                None,
            ),
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", None),
        ];
        for (head, want) in offered {
            assert_eq!(upgrade_of(head.as_bytes()).as_deref(), *want, "{head:?}");
        }
    }

    fn status(bytes: &[u8]) -> u16 {
        match parse(bytes) {
            Ok(Some(_)) => 200,
            Ok(None) => 0,
            Err(e) => e.status(),
        }
    }

    #[test]
    fn well_formed_heads_parse() {
        let ok: &[(&[u8], Framing, bool)] = &[
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty, true),
            (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty, true),
            (b"GET / HTTP/1.0\r\n\r\n", Framing::Empty, false),
            (
                b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                Framing::Empty,
                true,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                Framing::Empty,
                false,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n",
                Framing::Empty,
                false,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
                Framing::Length(5),
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                Framing::Empty,
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
                Framing::Length(5),
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                Framing::Length(5),
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                Framing::Chunked,
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED \r\n\r\n",
                Framing::Chunked,
                true,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked\r\n\r\n",
                Framing::Chunked,
                true,
            ),
            (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty, true),
            (
                b"GET http://example.com/x HTTP/1.1\r\nHost: other\r\n\r\n",
                Framing::Empty,
                true,
            ),
        ];
        for (bytes, framing, keep_alive) in ok {
            let got = parse(bytes).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(bytes)));
            let (f, k, _) = got.expect("complete");
            assert_eq!((f, k), (*framing, *keep_alive), "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn absolute_form_authority_replaces_host() {
        let got = parse(b"GET http://Example.com:8080/x?y HTTP/1.1\r\nHost: other\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(got.2.as_deref(), Some("Example.com:8080"));
        let got = parse(b"GET / HTTP/1.1\r\nHost:  site.test \r\n\r\n").unwrap().unwrap();
        assert_eq!(got.2.as_deref(), Some("site.test"));
    }

    #[test]
    fn incomplete_heads_are_partial_not_errors() {
        for bytes in [
            &b""[..],
            b"G",
            b"GET / HTTP/1.1\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r",
        ] {
            assert_eq!(status(bytes), 0, "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn bad_heads_get_the_right_status() {
        let table: &[(&[u8], u16)] = &[
            // Framing that cannot be trusted.
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                400,
            ),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chun ked\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n",
                400,
            ),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                501,
            ),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
            // Syntax.
            (b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", 400),
            (b"GET / HTTP/1.1\rHost: a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\n X: y\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", 400),
            (b"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET http://a/#b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET http://a@b/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            // A bare LF ends no line: the request line, a field line, the
            // empty line, an empty line before the request line.
            (b"GET / HTTP/1.1\nHost: a\n\n", 400),
            (b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\n\n", 400),
            (b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (
                b"GET / HTTP/1.1\r\nHost: localhost\r\nDummy: x\nContent-Length: 23\r\n\r\n\
                  GET / HTTP/1.1\r\nDummy: GET /admin HTTP/1.1\r\nHost: localhost\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nx:x\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n", 400),
            // Host.
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
            // Versions.
            (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
            (b"GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
            (b"GET / HTTP/3\r\nHost: a\r\n\r\n", 505),
            (b"GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET / http/1.1\r\nHost: a\r\n\r\n", 400),
            // Expectations.
            (b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417),
            // Methods: CONNECT is 501, a bad CONNECT target 400; the
            // others are no error of the head's
            // (`unregistered_methods_are_heads_marked_so`).
            (
                b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
                501,
            ),
            (b"CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT example.com:https HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT :443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT a@b:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", 200),
            (b"PATCH / HTTP/1.1\r\nHost: a\r\n\r\n", 200),
            (b"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", 200),
            (b"VERSION-CONTROL / HTTP/1.1\r\nHost: a\r\n\r\n", 200),
        ];
        for (bytes, want) in table {
            assert_eq!(status(bytes), *want, "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn limits_give_414_431_and_413() {
        let limits = Limits {
            uri_bytes_max: 100,
            head_bytes_max: 300,
            n_headers_max: 4,
            ..Limits::default()
        };
        let check = |bytes: &[u8]| -> u16 {
            let mut headers = [const { MaybeUninit::uninit() }; 100];
            match parse_head(bytes, &mut headers, &limits) {
                Ok(Parsed::Complete(_)) => 200,
                Ok(Parsed::Partial) => 0,
                Err(e) => e.status(),
            }
        };
        let long_target = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(150));
        assert_eq!(check(long_target.as_bytes()), 414);
        // Still arriving, already too long: 414 without waiting for the end.
        assert_eq!(check(&long_target.as_bytes()[..170]), 414);
        let big_head = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(300));
        assert_eq!(check(big_head.as_bytes()), 431);
        assert_eq!(check(&big_head.as_bytes()[..320]), 431);
        assert_eq!(
            check(b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n"),
            431
        );
        assert_eq!(
            check(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048577\r\n\r\n"),
            413
        );
        // Empty lines before the request line count toward the head limit.
        let blank = b"\r\n".repeat(200);
        assert_eq!(check(&blank), 431);
    }
}
