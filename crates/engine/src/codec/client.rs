//! The client role of the HTTP/1.1 codec: request heads written for an
//! upstream server, and its response heads and bodies read back (RFC 9112
//! §4, §6), for a reverse proxy to drive. hyper's `proto/h1/role.rs`
//! `Client` is the model.
//!
//! A proxy stands between two parties that must frame every message the
//! same way, so this side is as strict as the server side (`head.rs`):
//! anything whose length could be read two ways (a bare LF, Content-Length
//! beside Transfer-Encoding, differing lengths) is an error that the proxy
//! answers with a 502 and a closed upstream connection, never a guess.
//! Like the server side, parsing allocates nothing: the head borrows the
//! read buffer and fills the caller's field array.

use std::mem::MaybeUninit;

use super::chunked::{ChunkedDecoder, ChunkedError, Step};
use super::head::{
    connection_options, content_length_digits, is_tchar, is_token, is_valid_host, list_elements, trim_ows, Framing,
    Version,
};

/// Longest response head accepted from an upstream, in bytes (status line,
/// fields and the empty line). The same 32 KiB as a request head's default
/// `head_bytes_max`: a response carries as many cookies as a request, and
/// nginx's one-page `proxy_buffer_size` (4 or 8 KiB) is its most common
/// "upstream sent too big header" error. Past it: `HeadTooLarge`.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 32 * 1024;

/// Longest trailer section of an answer's chunked body, in bytes: the
/// head's limit (a trailer section is a second field block, and gRPC's
/// `grpc-message` may be long). Past it the body is refused
/// (`ChunkedError::Trailer`): the proxy resets the client's answer
/// rather than cut the trailers short.
pub const RESPONSE_TRAILER_BYTES_MAX: usize = RESPONSE_HEAD_BYTES_MAX;

// ---------------------------------------------------------------------------
// Request heads
// ---------------------------------------------------------------------------

/// Why a request head was not written. Each names the argument that would
/// have changed the message's meaning on the wire (a CR or LF in a value
/// starts a new field line, or a new request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestHeadError {
    /// The method is not a token (RFC 9110 §9.1).
    Method,
    /// The target is empty, or holds a byte outside visible ASCII, or `#`.
    Target,
    /// The host holds a byte that a Host field may not (RFC 9110 §7.2).
    Host,
    /// A field name is not a token (RFC 9110 §5.1).
    FieldName,
    /// A field value holds CR, LF, NUL or another control byte (RFC 9110 §5.5).
    FieldValue,
}

impl RequestHeadError {
    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            RequestHeadError::Method => "invalid method",
            RequestHeadError::Target => "invalid request target",
            RequestHeadError::Host => "invalid Host",
            RequestHeadError::FieldName => "invalid field name",
            RequestHeadError::FieldValue => "invalid field value",
        }
    }
}

/// Appends a request head: `METHOD target HTTP/1.1`, Host, the caller's
/// fields, then the framing (`Content-Length: n`, `Transfer-Encoding:
/// chunked`, or nothing), then the empty line.
///
/// The caller's fields are forwarded in order, except:
/// - the hop-by-hop ones (RFC 9110 §7.6.1): Connection, Keep-Alive,
///   Proxy-Connection, TE, Transfer-Encoding, Upgrade, and every field a
///   Connection field names;
/// - Host and Content-Length, which this function spells from `host` and
///   `framing`, so that the upstream never sees two of either.
///
/// A chunked body goes after the head with `write::write_chunk_start`,
/// `CHUNK_END` and `LAST_CHUNK`. On error nothing is appended: `out` is
/// as it was, so a half head is never sent.
pub fn write_request_head<I, N, V>(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    host: &str,
    fields: I,
    framing: Framing,
) -> Result<(), RequestHeadError>
where
    I: IntoIterator<Item = (N, V)>,
    I::IntoIter: Clone,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let start = out.len();
    let written = write_request_head_into(out, method, target, host, fields.into_iter(), framing);
    if written.is_err() {
        out.truncate(start);
    }
    written
}

/// RFC 9112 §3.2: every form of request-target is visible ASCII, and "a
/// client MUST NOT send [a fragment] in the request-target".
pub(crate) fn target_ok(target: &str) -> bool {
    !target.is_empty() && target.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'#')
}

/// The request line and Host, checked by the caller (a token method,
/// [`target_ok`], a valid host). RFC 9110 §7.2: "A user agent that sends
/// Host SHOULD send it as the first field line in the header section of a
/// request." An empty Host is allowed (RFC 9112 §3.2).
///
/// One reservation, and the common methods and the line's fixed pieces
/// as constants (a few moves each, not a call to `memcpy`): the proxy
/// writes every request's line with it, where the call, the method's
/// copy and six capacity checks were 131 instructions of a proxied GET
/// (callgrind `proxy-c50`, bench/runs/2026-11-28-proxy8). Inlined into
/// both callers for that reason.
#[inline(always)]
pub(crate) fn request_line_and_host(out: &mut Vec<u8>, method: &str, target: &str, host: &[u8]) {
    out.reserve(method.len() + target.len() + host.len() + 24);
    method_and_space(out, method);
    out.extend_from_slice(target.as_bytes());
    version_and_host(out, host);
}

/// The request line's method and the space after it, the common methods
/// as constants ([`request_line_and_host`]'s first piece).
#[inline(always)]
pub(crate) fn method_and_space(out: &mut Vec<u8>, method: &str) {
    match method {
        "GET" => out.extend_from_slice(b"GET "),
        "HEAD" => out.extend_from_slice(b"HEAD "),
        "POST" => out.extend_from_slice(b"POST "),
        _ => {
            out.extend_from_slice(method.as_bytes());
            out.push(b' ');
        }
    }
}

/// The request line's end after its target, and the Host line
/// ([`request_line_and_host`]'s last piece): `host` checked by the caller.
#[inline(always)]
pub(crate) fn version_and_host(out: &mut Vec<u8>, host: &[u8]) {
    if host.is_empty() {
        out.extend_from_slice(b" HTTP/1.1\r\nHost:\r\n");
    } else {
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host);
        out.extend_from_slice(b"\r\n");
    }
}

/// `write_request_head`, leaving what it wrote before an error.
fn write_request_head_into<F, N, V>(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    host: &str,
    fields: F,
    framing: Framing,
) -> Result<(), RequestHeadError>
where
    F: Iterator<Item = (N, V)> + Clone,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    if !is_token(method.as_bytes()) {
        return Err(RequestHeadError::Method);
    }
    if !target_ok(target) {
        return Err(RequestHeadError::Target);
    }
    // RFC 9112 §3.2: "If the authority component is missing or undefined
    // for the target URI, then a client MUST send a Host header field with
    // an empty field value." So an empty host is allowed.
    if !is_valid_host(host.as_bytes()) {
        return Err(RequestHeadError::Host);
    }
    request_line_and_host(out, method, target, host.as_bytes());

    // Most requests have no Connection field, or one naming only `close`
    // or `keep-alive`: only then is each field looked up in it (a second
    // pass over the fields per field, a few dozen at most).
    let connection = |name: &[u8]| name.eq_ignore_ascii_case(b"connection");
    let has_connection = fields.clone().any(|(n, _)| connection(n.as_ref()));
    for (name, value) in fields.clone() {
        let (name, value) = (name.as_ref(), value.as_ref());
        if !is_token(name) {
            return Err(RequestHeadError::FieldName);
        }
        // RFC 9110 §5.5: "Field values containing CR, LF, or NUL characters
        // are invalid and dangerous, due to the varying ways that
        // implementations might parse and interpret those characters". The
        // other control bytes are outside field-value's grammar too.
        if !value.iter().all(|&b| is_field_value_byte(b)) {
            return Err(RequestHeadError::FieldValue);
        }
        if is_hop_by_hop(name) || is_spelled_here(name) {
            continue;
        }
        // RFC 9110 §7.6.1: "Intermediaries MUST parse a received Connection
        // header field before a message is forwarded and, for each
        // connection-option in this field, remove any header or trailer
        // field(s) from the message with the same name as the
        // connection-option, and then remove the Connection header field
        // itself".
        if has_connection
            && fields.clone().any(|(n, v)| {
                connection(n.as_ref()) && list_elements(v.as_ref()).any(|opt| opt.eq_ignore_ascii_case(name))
            })
        {
            continue;
        }
        super::write::push_field(out, name, value);
    }

    match framing {
        Framing::Length(n) => write_content_length(out, n),
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        // RFC 9110 §8.6: "a user agent normally sends Content-Length in a
        // POST request even when the value is 0 (indicating empty
        // content)". Some servers answer 411 without it; hyper does the
        // same for the methods that define a body.
        Framing::Empty if matches!(method, "POST" | "PUT" | "PATCH") => write_content_length(out, 0),
        Framing::Empty => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn write_content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// field-value bytes: HTAB, SP, VCHAR and obs-text (RFC 9110 §5.5).
fn is_field_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// RFC 9110 §7.6.1: "intermediaries SHOULD remove or replace fields that
/// are known to require removal before forwarding, whether or not they
/// appear as a connection-option, after applying those fields' semantics.
/// This includes but is not limited to: Proxy-Connection, Keep-Alive, TE,
/// Transfer-Encoding, Upgrade" (their section references left out).
/// Connection itself goes too.
fn is_hop_by_hop(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// Fields `write_request_head` writes from its own arguments.
fn is_spelled_here(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"host") || name.eq_ignore_ascii_case(b"content-length")
}

// ---------------------------------------------------------------------------
// Response heads
// ---------------------------------------------------------------------------

/// How a response's body is delimited, and what follows its head on the
/// connection (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFraming {
    /// A 1xx other than 101: an interim response with no body. The final
    /// response to the same request follows on the connection.
    Informational,
    /// 101 Switching Protocols: after the head, the connection speaks the
    /// protocol named in the response's Upgrade field.
    Upgrade,
    /// A 2xx to CONNECT: after the head the connection is a tunnel.
    Tunnel,
    /// No body: 204, 304, any answer to HEAD, or `Content-Length: 0`.
    Empty,
    /// `Content-Length: n` with n > 0.
    Length(u64),
    /// Chunked is the last transfer coding.
    Chunked,
    /// The body ends when the server closes the connection.
    Close,
}

/// Why a response head was refused. Each is a 502 for the proxy's client
/// and a closed upstream connection: after a bad head, where the next
/// response starts cannot be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseError {
    /// The status line does not start with `HTTP/1.0` or `HTTP/1.1`.
    NotHttp1,
    /// An empty line before the status line.
    LeadingEmptyLine,
    /// A status line not shaped `HTTP/1.x DDD reason`.
    StatusLine,
    /// A status code below 100 (RFC 9110 §15: 100 to 599, and three digits).
    StatusOutOfRange,
    /// A line ended by LF alone.
    BareLf,
    /// A CR not followed by LF where a line ends.
    BareCr,
    /// A field line that starts with whitespace (obs-fold).
    ObsFold,
    /// A field name that is not a token, or a field line without a colon.
    FieldName,
    /// A field value with NUL, a bare CR, or another control byte.
    FieldValue,
    /// The head is longer than [`RESPONSE_HEAD_BYTES_MAX`].
    HeadTooLarge,
    /// More fields than the caller's array holds.
    TooManyFields,
    /// A Content-Length that is not 1*DIGIT, or overflows.
    ContentLength,
    /// Content-Length values that differ.
    DifferingContentLengths,
    /// Both Transfer-Encoding and Content-Length.
    LengthAndTransferEncoding,
    /// An empty or malformed Transfer-Encoding, or chunked applied twice.
    TransferEncoding,
    /// Transfer-Encoding in an HTTP/1.0 response.
    TransferEncodingInHttp10,
}

impl ResponseError {
    /// A short human-readable reason, for the log and the 502's body.
    pub fn reason(self) -> &'static str {
        match self {
            ResponseError::NotHttp1 => "upstream does not speak HTTP/1.x",
            ResponseError::LeadingEmptyLine => "empty line before the status line",
            ResponseError::StatusLine => "malformed status line",
            ResponseError::StatusOutOfRange => "status code out of range",
            ResponseError::BareLf => "bare LF in response head",
            ResponseError::BareCr => "CR without LF in response head",
            ResponseError::ObsFold => "folded field line in response head",
            ResponseError::FieldName => "invalid field name in response",
            ResponseError::FieldValue => "invalid field value in response",
            ResponseError::HeadTooLarge => "response head too large",
            ResponseError::TooManyFields => "too many fields in response",
            ResponseError::ContentLength => "invalid Content-Length in response",
            ResponseError::DifferingContentLengths => "differing Content-Length values in response",
            ResponseError::LengthAndTransferEncoding => "both Transfer-Encoding and Content-Length in response",
            ResponseError::TransferEncoding => "malformed Transfer-Encoding in response",
            ResponseError::TransferEncodingInHttp10 => "Transfer-Encoding in an HTTP/1.0 response",
        }
    }
}

/// A complete, validated response head. Borrows the read buffer.
#[derive(Debug)]
pub struct ResponseHead<'b, 'h> {
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The status code, 100 to 999; 600 and above are not HTTP's, and RFC
    /// 9110 §15 asks a client to treat them as a 5xx.
    pub status: u16,
    /// The reason phrase, possibly empty; empty too if it had bytes
    /// outside ASCII (httparse's choice). RFC 9112 §4: "A client SHOULD
    /// ignore the reason-phrase content".
    pub reason: &'b str,
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// How the body is delimited and what follows it.
    pub framing: ResponseFraming,
    /// A transfer coding other than chunked was applied (`gzip, chunked`,
    /// or `gzip` alone, read until close): the body bytes, dechunked, are
    /// still coded, and must not be forwarded without saying so.
    pub transfer_coded: bool,
    /// Whether the connection may carry another request once this
    /// response's body has been read (RFC 9112 §9.3). False when the body
    /// ends at the close, and after an upgrade or a tunnel.
    pub keep_alive: bool,
    /// The header fields, in order.
    pub headers: &'h [httparse::Header<'b>],
}

/// The result of [`parse_response_head`] on bytes that are not (yet) an error.
#[derive(Debug)]
pub enum ParsedResponse<'b, 'h> {
    /// A whole head was found.
    Complete(ResponseHead<'b, 'h>),
    /// More bytes are needed; not an error.
    Partial,
}

/// Parses one response head at the start of `buf`, the answer to a
/// request whose method was `request_method` (HEAD and CONNECT change the
/// framing).
///
/// `headers` receives the fields; a response with more than its length is
/// `TooManyFields`. It need not be initialised. Bytes after the head are
/// not looked at. An interim (1xx) response is returned like any other,
/// framed `Informational`: the caller consumes `head_len` bytes and parses
/// again for the final one.
///
/// How the bytes are split never changes the answer: a prefix of a buffer
/// parses as `Partial` or as the whole buffer does.
pub fn parse_response_head<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    request_method: &str,
) -> Result<ParsedResponse<'b, 'h>, ResponseError> {
    parse_response_head_with(buf, headers, request_method, true)
}

/// [`parse_response_head`], with the plain parser first (`plain`: the
/// strictly formed head nearly every server sends, `codec::plain`) or
/// httparse alone: the fuzz target `h1_client` compares the two
/// (`fuzzing::response_head_plain`).
#[inline(always)]
pub(crate) fn parse_response_head_with<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    request_method: &str,
    plain: bool,
) -> Result<ParsedResponse<'b, 'h>, ResponseError> {
    // httparse skips empty lines before a status line, as RFC 9112 §2.2
    // allows a server to before a request line. Nothing allows it before a
    // response: a stray CRLF there means the previous response's framing
    // and the server's disagree, which is exactly what a proxy must not
    // paper over.
    if let Some(b'\r' | b'\n') = buf.first() {
        return Err(ResponseError::LeadingEmptyLine);
    }
    // Only the first RESPONSE_HEAD_BYTES_MAX bytes are parsed, so that a
    // head too large is refused however its bytes arrived, and before an
    // error httparse would find past the limit (which a shorter read
    // would not have seen).
    let window = &buf[..buf.len().min(RESPONSE_HEAD_BYTES_MAX)];
    // The plain head first: what it takes, httparse takes alike (the same
    // status line and fields, every line ended by CRLF); anything else is
    // httparse's, whose answer stands.
    let mut headers = headers;
    if plain {
        headers = match super::plain::parse_response(window, headers) {
            Ok((p, fields)) => return framed(p.minor, p.status, p.reason, p.head_len, fields, request_method),
            Err(headers) => headers,
        };
    }
    let mut resp = httparse::Response::new(&mut []);
    let head_len =
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, window, headers) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if window.len() < buf.len() => return Err(ResponseError::HeadTooLarge),
            Ok(httparse::Status::Partial) => return Ok(ParsedResponse::Partial),
            Err(e) => return Err(httparse_error(window, e)),
        };
    // httparse fills every part of the status line on Complete.
    let (Some(minor), Some(status), Some(reason)) = (resp.version, resp.code, resp.reason) else {
        return Err(ResponseError::StatusLine);
    };
    let headers: &'h [httparse::Header<'b>] = resp.headers;
    if !lines_end_in_crlf(buf, head_len, headers) {
        return Err(ResponseError::BareLf);
    }
    framed(minor, status, reason, head_len, headers, request_method)
}

/// Most fields an upstream's answer may have: the slots `UpConn::head`
/// parses into. One more is `TooManyFields`, a 502.
pub(crate) const RESPONSE_FIELDS_MAX: usize = 128;

/// What the one pass (`relay_plain_whole`) read of the answer whose fields it relayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlainAnswer {
    pub(crate) status: u16,
    /// Bytes of the head, including the empty line that ends it.
    pub(crate) head_len: usize,
    /// Its Content-Length (0: `ResponseFraming::Empty`).
    pub(crate) length: u64,
    /// `ResponseHead::keep_alive`: no `close` option.
    pub(crate) keep_alive: bool,
}

/// The common upstream answer read and relayed in one pass: an
/// `HTTP/1.1` status line of 200 to 599 but 204 and 304, then field lines
/// of visible ASCII (token names, values of visible ASCII, SP and HTAB,
/// each line ended by CRLF) within `RESPONSE_HEAD_BYTES_MAX` bytes and
/// `RESPONSE_FIELDS_MAX` fields, one Content-Length of digits, no
/// Transfer-Encoding, and a Connection field (if any) of `close` and
/// `keep-alive` only. The fields the proxy passes on are appended to
/// `lines` as `relayed_lines` writes them (`name: value` CRLF, the value
/// without its OWS; a line already spelled so is copied as it is, with
/// the lines next to it); those it drops are not (hop-by-hop, Date,
/// Server, the framing).
///
/// `None` (and `lines` as it was): not such an answer, or not all of its
/// head here. Nothing is decided then: the caller parses it as any other
/// (`parse_response_head`), whose rules find every malformed head (a CR,
/// LF or NUL where it may not be, Content-Length beside
/// Transfer-Encoding, differing lengths, a head too large) and refuse
/// it. What this takes, that parser takes alike, to the same status,
/// head length, framing and persistence, and the relay writes the same
/// lines of it (the test `plain_relay_is_the_general_relay` and the
/// `h1_client` fuzz target, `fuzzing::relay_plain_agrees`): the
/// tokeniser's slots, `Fields::scan` and the relay's pass over the slots
/// were about 950 instructions of a proxied GET's 6,796 (callgrind,
/// `proxy-c50`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn relay_plain(buf: &[u8], lines: &mut Vec<u8>) -> Option<PlainAnswer> {
    relay_plain_upto(buf, lines, None)
}

/// `relay_plain` (which only the tests and the fuzz target call) for an
/// answer whose body is all of the rest of `buf` and shorter than
/// `body_bytes_max` (else `None`, `lines` as it was), with the blank line
/// and the body written into `lines` after the fields: the proxy's one
/// pass (`UpConn::relay_plain`). The last run of fields, the blank line
/// and the body go in one copy (they lie together in `buf`), where the
/// proxy made two.
pub(crate) fn relay_plain_whole(buf: &[u8], lines: &mut Vec<u8>, body_bytes_max: u64) -> Option<PlainAnswer> {
    relay_plain_upto(buf, lines, Some(body_bytes_max))
}

/// `relay_plain` (`whole` `None`) or [`relay_plain_whole`].
#[inline(always)]
fn relay_plain_upto(buf: &[u8], lines: &mut Vec<u8>, whole: Option<u64>) -> Option<PlainAnswer> {
    let mut cuts = [Cut::default(); CUTS_MAX];
    let (plain, fields_at, n_cuts) = scan_plain(buf, &mut cuts)?;
    let fields_end = plain.head_len - 2;
    let end = match whole {
        None => fields_end,
        Some(body_bytes_max) => {
            if plain.length >= body_bytes_max || buf.len() as u64 != plain.head_len as u64 + plain.length {
                return None;
            }
            buf.len()
        }
    };
    // The field lines but the cut ones, in runs between the cuts, and
    // each rewritten line as the relay writes it.
    let mut run_at = fields_at;
    for cut in &cuts[..n_cuts] {
        let (at, end) = (usize::from(cut.at), usize::from(cut.end));
        // Each copy only when there is something to copy: an empty one
        // was still a call of about 25 instructions, three of them for
        // limit.c's answer (callgrind `proxy-c50`).
        if run_at != at {
            lines.extend_from_slice(&buf[run_at..at]);
        }
        if cut.name_len != 0 {
            let colon = at + usize::from(cut.name_len);
            super::write::push_field(lines, &buf[at..colon], trim_ows(&buf[colon + 1..end - 2]));
        }
        run_at = end;
    }
    if run_at != end {
        lines.extend_from_slice(&buf[run_at..end]);
    }
    Some(plain)
}

/// Most field lines of one answer the one pass drops or rewrites (a
/// `Cut` each); an answer with more is left to the general path. Real
/// answers drop a handful (Date, Server, Content-Length, Connection,
/// Keep-Alive).
const CUTS_MAX: usize = 16;
const _: () = assert!(RESPONSE_HEAD_BYTES_MAX <= u16::MAX as usize);

/// A field line [`scan_plain`] found that does not go on as it is: the
/// bytes `at..end` (its CRLF included; positions fit in 16 bits, the head
/// being at most `RESPONSE_HEAD_BYTES_MAX`), dropped (`name_len` 0) or
/// rewritten as `name: value` (its name the first `name_len` bytes, its
/// value what follows the colon without OWS).
#[derive(Clone, Copy, Default)]
struct Cut {
    at: u16,
    end: u16,
    name_len: u16,
}

/// The checks of `relay_plain`, with no write: the answer, where its
/// field lines start, and how many of `cuts` it filled. The loop makes
/// no call (the copies and rewrites come after it, a Connection list is
/// read after it): the eight vector constants are volatile loads
/// (`codec::plain`'s `splat`), which the compiler cannot make again, so
/// a call in the loop (`append_elements`, or even a cold one) had it
/// store and reload all eight, at each field cut, about 110 of the one
/// pass's 800 instructions for limit.c's answer (callgrind
/// `--dump-instr=yes`, `proxy-c50`, bench/runs/2026-11-28-pxone). The runs
/// of name and value bytes are the plain tokeniser's (`codec::plain`: 16
/// bytes a step on x86_64); a name is compared with those the relay acts
/// on only when its length is one of theirs, a word at a time with bit 5
/// set (`same_name`).
#[inline(always)]
fn scan_plain(buf: &[u8], cuts: &mut [Cut; CUTS_MAX]) -> Option<(PlainAnswer, usize, usize)> {
    let buf = &buf[..buf.len().min(RESPONSE_HEAD_BYTES_MAX)];
    let k = &super::plain::vectors();
    let line: &[u8; 13] = buf.get(..13)?.try_into().ok()?;
    if u64::from_le_bytes(*line.first_chunk::<8>()?) != u64::from_le_bytes(*b"HTTP/1.1") || line[8] != b' ' {
        return None;
    }
    let [h, t, o] = [line[9], line[10], line[11]];
    if !(h.is_ascii_digit() && t.is_ascii_digit() && o.is_ascii_digit()) {
        return None;
    }
    let status = u16::from(h - b'0') * 100 + u16::from(t - b'0') * 10 + u16::from(o - b'0');
    if !(200..600).contains(&status) || status == 204 || status == 304 {
        return None;
    }
    // No reason, or SP and a reason of visible ASCII and SP; `OK`, the
    // commonest, compared whole with its CRLF (the run and the CRLF's
    // test were about 25 instructions, callgrind `proxy-c50`, pxone).
    let mut at = if buf.get(12..17) == Some(b" OK\r\n") {
        17
    } else {
        let reason_end = match line[12] {
            b'\r' => 12,
            b' ' => super::plain::run_of(buf, 13, 0x20, k),
            _ => return None,
        };
        if buf.get(reason_end..reason_end + 2)? != b"\r\n" {
            return None;
        }
        reason_end + 2
    };
    let mut length = None;
    let mut close = false;
    let mut n_fields = 0;
    let mut n_cuts = 0;
    // A Connection field's list of options, read after the loop.
    let mut conn_list = None;
    let fields_at = at;
    loop {
        if *buf.get(at)? == b'\r' {
            if *buf.get(at + 1)? != b'\n' {
                return None;
            }
            at += 2;
            break;
        }
        n_fields += 1;
        if n_fields > RESPONSE_FIELDS_MAX {
            return None;
        }
        // token ":" OWS value OWS CRLF
        let name_at = at;
        let kind = match known_name(buf, at) {
            Some((kind, name_len)) => {
                at += name_len;
                kind
            }
            None => {
                at = super::plain::token_run(buf, at, k);
                if *buf.get(at)? != b':' || at == name_at {
                    return None;
                }
                let name = &buf[name_at..at];
                let is = |lower: &[u8]| same_name(name, lower);
                match name.len() {
                    2 if is(b"te") => Kind::Dropped,
                    4 if is(b"date") => Kind::Dropped,
                    // A field named `close` goes when a Connection field
                    // names it, which may come after it: the general
                    // relay's.
                    5 if is(b"close") => return None,
                    6 if is(b"server") => Kind::Dropped,
                    7 if is(b"upgrade") || is(b"trailer") => Kind::Dropped,
                    10 if is(b"connection") => Kind::Connection,
                    10 if is(b"keep-alive") => Kind::Dropped,
                    14 if is(b"content-length") => Kind::Length,
                    16 if is(b"proxy-connection") => Kind::Dropped,
                    17 if is(b"transfer-encoding") => return None,
                    _ => Kind::Relayed,
                }
            }
        };
        let name_len = at - name_at;
        at += 1;
        // OWS: nearly always one space.
        let mut spelled = false;
        if buf.get(at) == Some(&b' ') {
            at += 1;
            spelled = true;
        }
        if *buf.get(at)? <= b' ' {
            spelled = false;
            while let Some(b' ' | b'\t') = buf.get(at) {
                at += 1;
            }
        }
        let value_at = at;
        loop {
            at = super::plain::run_of(buf, at, 0x20, k);
            match *buf.get(at)? {
                b'\r' => break,
                b'\t' => at += 1,
                _ => return None,
            }
        }
        if *buf.get(at + 1)? != b'\n' {
            return None;
        }
        let mut value = &buf[value_at..at];
        if value.last().is_some_and(|&b| b <= b' ') {
            value = trim_ows(value);
            spelled = false;
        }
        let line_end = at + 2;
        at = line_end;
        let relayed = match kind {
            Kind::Relayed => true,
            Kind::Dropped => false,
            Kind::Connection => {
                // One option, as nearly every answer with the field has
                // it, compared here (the value's bytes are visible ASCII,
                // SP and HTAB, none of which bit 5 makes a letter or `-`
                // but the letter's other case: `same_name`'s rule); a list
                // is read by a call, which only this rare path makes.
                match value.len() {
                    10 if same_name(value, b"keep-alive") => {}
                    5 if same_name(value, b"close") => close = true,
                    // A list, read after the loop (a second one: the
                    // general path's).
                    _ if conn_list.is_none() => conn_list = Some((value_at, value_at + value.len())),
                    _ => return None,
                }
                false
            }
            Kind::Length => {
                if length.is_some() {
                    return None;
                }
                length = Some(content_length_digits(value)?);
                false
            }
        };
        if relayed && spelled {
            continue;
        }
        // `buf` is at most `RESPONSE_HEAD_BYTES_MAX` (32 KiB) long: every
        // position fits in 16 bits.
        *cuts.get_mut(n_cuts)? = Cut {
            at: name_at as u16,
            end: line_end as u16,
            name_len: if relayed { name_len as u16 } else { 0 },
        };
        n_cuts += 1;
    }
    if let Some((list_at, list_end)) = conn_list {
        close |= connection_closes(&buf[list_at..list_end])?;
    }
    let plain = PlainAnswer {
        status,
        head_len: at,
        length: length?,
        keep_alive: !close,
    };
    Some((plain, fields_at, n_cuts))
}

/// Whether a Connection field's `value` says `close` (`Some(true)`),
/// `None` if it has an option other than `close` and `keep-alive`:
/// those may name fields to drop, which may have come before, and the
/// general relay drops them. Called after `scan_plain`'s loop (see
/// there why not in it), out of line: rare.
#[cold]
#[inline(never)]
fn connection_closes(value: &[u8]) -> Option<bool> {
    let mut close = false;
    for option in list_elements(value) {
        if option.eq_ignore_ascii_case(b"close") {
            close = true;
        } else if !option.eq_ignore_ascii_case(b"keep-alive") {
            return None;
        }
    }
    Some(close)
}

/// What the one pass does with a field, by its name.
#[derive(Clone, Copy)]
enum Kind {
    /// Goes on (as it is, or rewritten without its OWS).
    Relayed,
    /// Dropped: hop-by-hop, Date, Server.
    Dropped,
    /// Content-Length: read, and dropped (the relay writes its own).
    Length,
    /// Connection: its options read, and dropped.
    Connection,
}

/// The names most answers carry that the one pass drops or reads (and
/// Content-Type, which it relays), found
/// at `at` with their colon without the name's token run: the kind and
/// the name's length, or `None` (any other name, fewer than 16 bytes
/// left, or one of these spelled otherwise: the token run and the
/// length's `match` look then). Each is compared a word at a time with
/// bit 5 set only where the name has a letter (so `A` and `a` match
/// alike, and `-` and `:` only themselves), the first byte choosing the
/// words. An upstream's Date, Server and Content-Length were a token run
/// and a length's match each, about 45 instructions a field (callgrind
/// `proxy-c50`, pxone). What this finds, the token run finds alike: the
/// name's bytes are token bytes and the colon ends it.
#[inline(always)]
fn known_name(buf: &[u8], at: usize) -> Option<(Kind, usize)> {
    let c: &[u8; 16] = buf.get(at..at + 16)?.try_into().ok()?;
    let w0 = u64::from_le_bytes(*c.first_chunk::<8>()?);
    let w1 = u64::from_le_bytes(*c.last_chunk::<8>()?);
    // `name` as a word: its bytes, and 0x20 where it has a letter.
    const fn word(name: &[u8]) -> (u64, u64) {
        let mut w = 0u64;
        let mut letters = 0u64;
        let mut i = 0;
        while i < name.len() {
            w |= (name[i] as u64) << (8 * i);
            if name[i].is_ascii_lowercase() {
                letters |= 0x20 << (8 * i);
            }
            i += 1;
        }
        (w, letters)
    }
    // The first `n` bytes of `w` are `name` (n = name.len() <= 8).
    #[inline(always)]
    fn starts(w: u64, (name, letters): (u64, u64), n: u32) -> bool {
        let kept = if n == 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 };
        (w & kept) | letters == name
    }
    const DATE: (u64, u64) = word(b"date:");
    const SERVER: (u64, u64) = word(b"server:");
    const CONTENT_: (u64, u64) = word(b"content-");
    const LENGTH: (u64, u64) = word(b"length:");
    const TYPE: (u64, u64) = word(b"type:");
    const CONNECTI: (u64, u64) = word(b"connecti");
    const ON: (u64, u64) = word(b"on:");
    const KEEP_ALI: (u64, u64) = word(b"keep-ali");
    const VE: (u64, u64) = word(b"ve:");
    match c[0] | 0x20 {
        b'd' if starts(w0, DATE, 5) => Some((Kind::Dropped, 4)),
        b's' if starts(w0, SERVER, 7) => Some((Kind::Dropped, 6)),
        b'c' if starts(w0, CONTENT_, 8) => match () {
            _ if starts(w1, LENGTH, 7) => Some((Kind::Length, 14)),
            // Relayed, but in nearly every answer: its token run saved.
            _ if starts(w1, TYPE, 5) => Some((Kind::Relayed, 12)),
            _ => None,
        },
        b'c' if starts(w0, CONNECTI, 8) && starts(w1, ON, 3) => Some((Kind::Connection, 10)),
        b'k' if starts(w0, KEEP_ALI, 8) && starts(w1, VE, 3) => Some((Kind::Dropped, 10)),
        _ => None,
    }
}

/// Whether the token `name` is `lower` (of lowercase letters and `-`,
/// as long) in any case: each word with bit 5 set in every byte, which
/// makes a letter lowercase and leaves `-` as it is, and makes no other
/// token byte a letter or `-` (CR, the one byte bit 5 makes `-`, is not
/// a token byte).
#[inline(always)]
fn same_name(name: &[u8], lower: &[u8]) -> bool {
    debug_assert_eq!(name.len(), lower.len());
    let n = name.len();
    let low = |b: &[u8], at: usize| u32_at(b, at) | 0x2020_2020;
    match n {
        0..4 => name.eq_ignore_ascii_case(lower),
        4..=8 => low(name, 0) == u32_at(lower, 0) && low(name, n - 4) == u32_at(lower, n - 4),
        _ => {
            let mut at = 0;
            while at + 8 < n {
                if u64_at(name, at) | 0x2020_2020_2020_2020 != u64_at(lower, at) {
                    return false;
                }
                at += 8;
            }
            u64_at(name, n - 8) | 0x2020_2020_2020_2020 == u64_at(lower, n - 8)
        }
    }
}

/// The rules after tokenising, one code path for both parsers: the
/// status's range, the framing, whether the connection persists.
#[inline(always)]
fn framed<'b, 'h>(
    minor: u8,
    status: u16,
    reason: &'b str,
    head_len: usize,
    headers: &'h [httparse::Header<'b>],
    request_method: &str,
) -> Result<ParsedResponse<'b, 'h>, ResponseError> {
    // RFC 9110 §15: "Values outside the range 100..599 are invalid. Implementations
    // often use three-digit integer values outside of that range (i.e., 600..999)
    // for internal communication of non-HTTP status ... A client that
    // receives a response with an invalid status code SHOULD process the
    // response as if it had a 5xx (Server Error) status code." That is the
    // proxy's to do; httparse reads three digits, and below 100 is not a
    // status at all.
    if status < 100 {
        return Err(ResponseError::StatusOutOfRange);
    }
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let fields = Fields::scan(headers);
    let framing = fields.framing(status, request_method, version)?;
    // RFC 9112 §9.3: HTTP/1.1 persists unless "close" is a connection
    // option; HTTP/1.0 only if "keep-alive" is.
    let persists = match version {
        Version::Http10 => fields.conn_keep_alive && !fields.conn_close,
        _ => !fields.conn_close,
    };
    let keep_alive = persists
        && matches!(
            framing,
            ResponseFraming::Informational
                | ResponseFraming::Empty
                | ResponseFraming::Length(_)
                | ResponseFraming::Chunked
        );
    Ok(ParsedResponse::Complete(ResponseHead {
        version,
        status,
        reason,
        head_len,
        framing,
        transfer_coded: fields.other_coding && !matches!(framing, ResponseFraming::Tunnel),
        keep_alive,
        headers,
    }))
}

/// Names what httparse refused. Out of line: not the common case.
#[cold]
fn httparse_error(window: &[u8], e: httparse::Error) -> ResponseError {
    match e {
        // httparse reports what follows the version (`HTTP/1.1\t200`)
        // as a version error too.
        httparse::Error::Version if window.starts_with(b"HTTP/1.1") || window.starts_with(b"HTTP/1.0") => {
            ResponseError::StatusLine
        }
        httparse::Error::Version => ResponseError::NotHttp1,
        httparse::Error::Status | httparse::Error::Token => ResponseError::StatusLine,
        httparse::Error::HeaderName if starts_folded_line(window) => ResponseError::ObsFold,
        httparse::Error::HeaderName => ResponseError::FieldName,
        httparse::Error::HeaderValue => ResponseError::FieldValue,
        httparse::Error::NewLine => ResponseError::BareCr,
        httparse::Error::TooManyHeaders => ResponseError::TooManyFields,
    }
}

/// Whether the field line httparse refused starts with whitespace.
///
/// RFC 9112 §5.2: "A proxy or gateway that receives an obs-fold in a
/// response message that is not within a "message/http" container MUST
/// either discard the message and replace it with a 502 (Bad Gateway)
/// response, preferably with a representation explaining that
/// unacceptable line folding was received, or replace each received
/// obs-fold with one or more SP octets". We discard; this tells the 502
/// why. httparse accepted every line before the one it refused, so that
/// one is the first field line that does not start `token:`.
fn starts_folded_line(window: &[u8]) -> bool {
    for line in window.split(|&b| b == b'\n').skip(1) {
        if let Some(b' ' | b'\t') = line.first() {
            return true;
        }
        let name_len = line.iter().position(|&b| !is_tchar(b)).unwrap_or(line.len());
        if name_len == 0 || line.get(name_len) != Some(&b':') {
            return false;
        }
    }
    false
}

/// Whether every line of a head httparse found complete ends in CRLF.
///
/// RFC 9112 §2.2 lets a recipient take a bare LF as a line's end; we do
/// not, for the reason `head.rs`'s `has_bare_lf` gives: a front end that
/// reads the LF as part of a value frames the message differently (here,
/// a downstream cache or client reading a forwarded head). As there,
/// httparse has refused a CR not followed by LF, and takes LF only as a
/// line's end, so only lines' ends are looked at: the status line's (the
/// first LF: nothing comes before the status line), each field line's
/// (after its value and the blanks httparse trimmed off it; an empty
/// value points at its line's end), and the empty line's.
fn lines_end_in_crlf(buf: &[u8], head_len: usize, headers: &[httparse::Header<'_>]) -> bool {
    match memchr::memchr(b'\n', &buf[..head_len]) {
        Some(lf) if lf > 0 && buf[lf - 1] == b'\r' => {}
        _ => return false,
    }
    if !super::head::field_lines_end_in_cr(buf, headers) {
        return false;
    }
    head_len >= 2 && buf[head_len - 2] == b'\r'
}

/// Whether `name` is `lower` (lower case ASCII) but for the case of its
/// letters: `eq_ignore_ascii_case`, eight bytes at a time. A byte at a
/// time, the names an answer's fields were compared with (`Date`,
/// `Server`, `Content-Length`: `Fields::scan` and the proxy's relaying)
/// cost about 270 of a proxied GET's instructions (callgrind,
/// `proxy-c50`). Exact for any bytes: only `A`..=`Z` are folded.
#[inline(always)]
pub(crate) fn eq_lower(name: &[u8], lower: &[u8]) -> bool {
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 4 {
        return name.eq_ignore_ascii_case(lower);
    }
    if n < 8 {
        // Two words of four, overlapping when `n` < 8, as one.
        let pair = |b: &[u8]| u64::from(u32_at(b, 0)) | u64::from(u32_at(b, n - 4)) << 32;
        return fold(pair(name)) == pair(lower);
    }
    // Words of eight from the start, the last ending at the end
    // (overlapping the one before it when `n` is not a multiple of 8).
    let mut at = 0;
    while at + 8 < n {
        if fold(u64_at(name, at)) != u64_at(lower, at) {
            return false;
        }
        at += 8;
    }
    fold(u64_at(name, n - 8)) == u64_at(lower, n - 8)
}

#[inline(always)]
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}

/// `w`'s bytes `A`..=`Z` made lower case, the others unchanged.
#[inline(always)]
fn fold(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Each byte's low seven bits plus a constant sets its high bit from
    // `A` (0x41) on, or from past `Z` (0x5B) on; no sum carries into the
    // next byte (0x7F + 0x3F < 0x100). Bytes of 0x80 and above are not
    // letters (`!w`).
    let x = w & !HIGHS;
    let from_a = x.wrapping_add(ONES * (0x80 - 0x41));
    let past_z = x.wrapping_add(ONES * (0x80 - 0x5B));
    let upper = from_a & !past_z & !w & HIGHS;
    // 0x80 >> 2 = 0x20, the bit that makes a letter lower case.
    w | upper >> 2
}

/// What a response's fields say about framing and the connection,
/// gathered in one pass. Framing errors are kept, not returned, because a
/// 2xx to CONNECT must ignore the fields they come from.
#[derive(Default)]
struct Fields {
    content_length: Option<u64>,
    transfer_encoding: bool,
    /// Chunked was listed.
    chunked_seen: bool,
    /// Chunked is the last transfer coding so far.
    chunked_last: bool,
    /// A coding other than chunked was listed.
    other_coding: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    /// The first Content-Length or Transfer-Encoding problem found.
    error: Option<ResponseError>,
}

impl Fields {
    fn scan(headers: &[httparse::Header<'_>]) -> Fields {
        let mut f = Fields::default();
        for h in headers {
            let name = h.name.as_bytes();
            match name.len() {
                10 if eq_lower(name, b"connection") => {
                    let options = connection_options(h.value);
                    f.conn_close |= options.close;
                    f.conn_keep_alive |= options.keep_alive;
                }
                14 if eq_lower(name, b"content-length") => {
                    // Nearly always digits alone: one element, nothing to
                    // trim, what the loop below makes of it (`scan` 204
                    // → 184 instructions of a proxied GET, callgrind
                    // `proxy-c50`).
                    if let Some(n) = content_length_digits(h.value) {
                        match f.content_length {
                            Some(prev) if n != prev => f.fail(ResponseError::DifferingContentLengths),
                            _ => f.content_length = Some(n),
                        }
                        continue;
                    }
                    // RFC 9110 §8.6: "a recipient ... MAY either reject the
                    // message as invalid or replace that invalid field value
                    // with a single instance of the decimal value" when the
                    // values are identical; differing ones are an error.
                    for element in h.value.split(|&b| b == b',') {
                        match (content_length_digits(trim_ows(element)), f.content_length) {
                            (None, _) => f.fail(ResponseError::ContentLength),
                            (Some(n), Some(prev)) if n != prev => f.fail(ResponseError::DifferingContentLengths),
                            (Some(n), _) => f.content_length = Some(n),
                        }
                    }
                }
                17 if eq_lower(name, b"transfer-encoding") => {
                    // Several fields make one list (RFC 9110 §5.3).
                    f.transfer_encoding = true;
                    let mut n_codings = 0;
                    for coding in list_elements(h.value) {
                        n_codings += 1;
                        if coding.eq_ignore_ascii_case(b"chunked") {
                            // RFC 9112 §6.1: "A sender MUST NOT apply the
                            // chunked transfer coding more than once to a
                            // message body" (`chunked, gzip, chunked` too).
                            if f.chunked_seen {
                                f.fail(ResponseError::TransferEncoding);
                            }
                            f.chunked_seen = true;
                            f.chunked_last = true;
                        } else if is_token(coding) {
                            f.chunked_last = false;
                            f.other_coding = true;
                        } else {
                            f.fail(ResponseError::TransferEncoding);
                        }
                    }
                    // transfer-coding is a token: an empty list names none.
                    if n_codings == 0 {
                        f.fail(ResponseError::TransferEncoding);
                    }
                }
                _ => {}
            }
        }
        f
    }

    fn fail(&mut self, e: ResponseError) {
        self.error.get_or_insert(e);
    }

    /// RFC 9112 §6.3, the message body length rules, for a response.
    fn framing(&self, status: u16, method: &str, version: Version) -> Result<ResponseFraming, ResponseError> {
        match status {
            // RFC 9110 §15.2.2 and §7.8: after the empty line ending a
            // 101, the connection speaks the protocol its Upgrade names.
            101 => return Ok(ResponseFraming::Upgrade),
            // §6.3 rule 1: "any response with a 1xx ... status code is
            // always terminated by the first empty line after the header
            // fields". RFC 9110 §15.2: "A client MUST be able to parse one
            // or more 1xx responses received prior to a final response".
            100..=199 => return Ok(ResponseFraming::Informational),
            _ => {}
        }
        // §6.3 rule 2: "Any 2xx (Successful) response to a CONNECT request
        // implies that the connection will become a tunnel immediately
        // after the empty line that concludes the header fields. A client
        // MUST ignore any Content-Length or Transfer-Encoding header fields
        // received in such a message." Ignored, errors included.
        if method == "CONNECT" && (200..300).contains(&status) {
            return Ok(ResponseFraming::Tunnel);
        }
        // Everywhere else a malformed or ambiguous length is refused, even
        // where rule 1 says the body's length does not depend on it (204,
        // 304, HEAD): those heads are forwarded with their fields, and a
        // cache reads a 304's or a HEAD answer's Content-Length as the
        // representation's. Being strict costs only broken upstreams.
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.transfer_encoding {
            // RFC 9112 §6.1: "A server or client that receives an HTTP/1.0
            // message containing a Transfer-Encoding header field MUST treat
            // the message as if the framing is faulty".
            if version == Version::Http10 {
                return Err(ResponseError::TransferEncodingInHttp10);
            }
            // §6.3 rule 3: "If a message is received with both a
            // Transfer-Encoding and a Content-Length header field, the
            // Transfer-Encoding overrides the Content-Length. Such a message
            // might indicate an attempt to perform request smuggling ... or
            // response splitting ... and ought to be handled as an error."
            // A proxy that forwarded it, even with Content-Length removed,
            // would vouch for a framing its upstream left in doubt. Refused.
            if self.content_length.is_some() {
                return Err(ResponseError::LengthAndTransferEncoding);
            }
        }
        // §6.3 rule 1: "Any response to a HEAD request and any response
        // with a 1xx (Informational), 204 (No Content), or 304 (Not
        // Modified) status code is always terminated by the first empty line
        // after the header fields, regardless of the header fields present".
        if method == "HEAD" || status == 204 || status == 304 {
            return Ok(ResponseFraming::Empty);
        }
        if self.transfer_encoding {
            // §6.3 rule 4: "If a Transfer-Encoding header field is present in
            // a response and the chunked transfer coding is not the final
            // encoding, the message body length is determined by reading the
            // connection until it is closed by the server."
            return Ok(if self.chunked_last {
                ResponseFraming::Chunked
            } else {
                ResponseFraming::Close
            });
        }
        // §6.3 rule 6 (a valid Content-Length), then rule 8: "Otherwise,
        // this is a response message without a declared message body
        // length, so the message body length is determined by the number of
        // octets received prior to the server closing the connection."
        Ok(match self.content_length {
            Some(0) => ResponseFraming::Empty,
            Some(n) => ResponseFraming::Length(n),
            None => ResponseFraming::Close,
        })
    }
}

// ---------------------------------------------------------------------------
// Response bodies
// ---------------------------------------------------------------------------

/// Why a response body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseBodyError {
    /// The chunked coding was malformed.
    Chunked(ChunkedError),
    /// The server closed the connection before the body's declared end.
    /// RFC 9112 §8: "A message that uses a valid Content-Length is
    /// incomplete if the size of the message body received ... is less
    /// than the value given by Content-Length. A response that has
    /// neither chunked transfer coding nor Content-Length is terminated by
    /// closure of the connection and, if the header fields were received
    /// intact, is considered complete".
    Truncated,
}

impl ResponseBodyError {
    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            ResponseBodyError::Chunked(ChunkedError::TooLarge) => "response body too large",
            ResponseBodyError::Chunked(e) => e.reason(),
            ResponseBodyError::Truncated => "upstream closed before the end of the response body",
        }
    }
}

/// A response body's bytes, whatever its framing, for the proxy to pass
/// on: one interface over a length, the chunked coding, and the close.
/// The input is borrowed and never moved; each step says which of its
/// bytes are body data.
#[derive(Clone, Debug)]
pub struct ResponseBodyDecoder {
    state: BodyState,
}

#[derive(Clone, Debug)]
enum BodyState {
    /// Bytes left of a Content-Length body (0: done).
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Everything until the server closes.
    Close,
}

impl ResponseBodyDecoder {
    /// A decoder for a body framed `framing`, or `None` where the bytes
    /// after the head are no body of this response (`Informational`: the
    /// next response; `Upgrade`, `Tunnel`: another protocol). A chunked
    /// body longer than `body_bytes_max` decoded bytes is refused
    /// (`u64::MAX` for none: a proxy streaming through bounded buffers
    /// needs none).
    pub fn new(framing: ResponseFraming, body_bytes_max: u64) -> Option<ResponseBodyDecoder> {
        let state = match framing {
            ResponseFraming::Informational | ResponseFraming::Upgrade | ResponseFraming::Tunnel => return None,
            ResponseFraming::Empty => BodyState::Length(0),
            ResponseFraming::Length(n) => BodyState::Length(n),
            ResponseFraming::Chunked => BodyState::Chunked(ChunkedDecoder::keeping_trailers(
                body_bytes_max,
                RESPONSE_TRAILER_BYTES_MAX,
            )),
            ResponseFraming::Close => BodyState::Close,
        };
        Some(ResponseBodyDecoder { state })
    }

    /// Whether the whole body has been consumed. Bytes after it belong to
    /// the next response (a close-delimited body is never done: it ends at
    /// [`ResponseBodyDecoder::finish`]).
    pub fn is_done(&self) -> bool {
        match &self.state {
            BodyState::Length(n) => *n == 0,
            BodyState::Chunked(c) => c.is_done(),
            BodyState::Close => false,
        }
    }

    /// Consumes framing bytes up to the next run of data, or one run of
    /// data, as [`ChunkedDecoder::step`] does. Consumes nothing once done:
    /// what follows a Content-Length body is never taken for it.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ResponseBodyError> {
        match &mut self.state {
            BodyState::Length(remaining) => {
                let n = input.len().min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                *remaining -= n as u64;
                Ok(Step {
                    consumed: n,
                    data: 0..n,
                    done: *remaining == 0,
                })
            }
            BodyState::Chunked(c) => c.step(input).map_err(ResponseBodyError::Chunked),
            BodyState::Close => Ok(Step {
                consumed: input.len(),
                data: 0..input.len(),
                done: false,
            }),
        }
    }

    /// A chunked body's trailer section (`name: value\r\n` lines, checked
    /// by the decoder), once it is done; `None` without one.
    pub fn take_trailers(&mut self) -> Option<Vec<u8>> {
        match &mut self.state {
            BodyState::Chunked(c) if c.is_done() => c.take_trailers(),
            _ => None,
        }
    }

    /// The server closed the connection: whether the body is complete.
    pub fn finish(&self) -> Result<(), ResponseBodyError> {
        match &self.state {
            BodyState::Close => Ok(()),
            _ if self.is_done() => Ok(()),
            _ => Err(ResponseBodyError::Truncated),
        }
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
