//! Response heads, chunk framing and canned error responses, appended to an
//! output buffer. The engine decides framing; this module only spells it.

use crate::date::DATE_LEN;
use crate::response::Response;

/// How the body after a head is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No length; the body ends when the connection closes (HTTP/1.0 streams).
    Close,
    /// No body and no Content-Length: 1xx, 204 and 304 (RFC 9110 §8.6).
    Bodiless,
}

/// What the `Connection` field says, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnField {
    /// Nothing: HTTP/1.1 persists by default.
    Omit,
    /// `Connection: close`.
    Close,
    /// `Connection: keep-alive`, for an HTTP/1.0 client that asked for it.
    KeepAlive,
}

/// Room for the lines of a head that are not the response's own: the
/// longest status line (`HTTP/1.1 431 Request Header Fields Too Large`,
/// 46 bytes), `Server`, `Date` (a worker's is 29 bytes), the framing
/// (`Content-Length` with 20 digits, 38 bytes), `Connection` (24) and the
/// blank line, rounded up. Only a hint: a longer date still fits.
const HEAD_FIXED_BYTES: usize = 192;

/// Appends the head of `resp`. A head the answer-head cache
/// (`h1/respond.rs`) does not have: the room for all of it is reserved
/// once, and every fixed piece is copied with a length known when
/// compiling (a few moves, where a slice chosen at run time is a call to
/// memcpy); a 200's status line, `Server` and `Date` name are one piece.
pub fn write_head(out: &mut Vec<u8>, resp: &Response, date: &[u8], framing: BodyFraming, conn: ConnField) {
    let block = resp.block.as_ref().map_or(&[][..], |b| b.as_bytes());
    let ct = resp.content_type.as_deref().unwrap_or("");
    let mut own = block.len() + ct.len();
    for (name, value) in &resp.headers {
        own += name.len() + value.len() + 4;
    }
    out.reserve(HEAD_FIXED_BYTES + own);
    let server_given = !resp.headers.is_empty() && resp.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("server"));
    match (resp.status, server_given) {
        (200, false) => out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: peregrine\r\nDate: "),
        (status, false) => {
            write_status_line(out, status);
            out.extend_from_slice(b"Server: peregrine\r\nDate: ");
        }
        (status, true) => {
            write_status_line(out, status);
            out.extend_from_slice(b"Date: ");
        }
    }
    write_date(out, date);
    out.extend_from_slice(b"\r\n");
    if resp.content_type.is_some() {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    write_framing(out, framing);
    write_conn(out, conn);
    for (name, value) in &resp.headers {
        push_field(out, name.as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(block);
    out.extend_from_slice(b"\r\n");
}

/// Appends a whole plain-text error response that closes the connection,
/// its body naming the problem, e.g. `400 Bad Request: invalid chunk size`.
/// Returns the body's length in bytes as sent (none for a HEAD), for the
/// access log.
pub fn write_error(out: &mut Vec<u8>, status: u16, detail: &str, date: &[u8], head_only: bool) -> u64 {
    let reason = reason(status);
    let body_len = 3 + 1 + reason.len() + if detail.is_empty() { 0 } else { 2 + detail.len() } + 1;
    write_status_line(out, status);
    out.extend_from_slice(b"Server: peregrine\r\nDate: ");
    write_date(out, date);
    out.extend_from_slice(b"\r\nContent-Type: text/plain; charset=utf-8\r\n");
    write_framing(out, BodyFraming::Length(body_len as u64));
    write_conn(out, ConnField::Close);
    out.extend_from_slice(b"\r\n");
    if head_only {
        return 0;
    }
    write_u64(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    if !detail.is_empty() {
        out.extend_from_slice(b": ");
        out.extend_from_slice(detail.as_bytes());
    }
    out.push(b'\n');
    body_len as u64
}

/// Appends a `101 Switching Protocols` head (RFC 9110 §15.2.2, §7.8):
/// `Upgrade` names the one protocol switched to and `Connection: upgrade`
/// marks it hop-by-hop; `fields` (complete `Name: value\r\n` lines, the
/// new protocol's, e.g. `Sec-WebSocket-Accept`) follow. No body, no
/// framing: the bytes after the head are the new protocol's.
pub fn write_switching(out: &mut Vec<u8>, protocol: &str, fields: &[u8], date: &[u8]) {
    write_status_line(out, 101);
    out.extend_from_slice(b"Server: peregrine\r\nDate: ");
    write_date(out, date);
    out.extend_from_slice(b"\r\nConnection: upgrade\r\nUpgrade: ");
    out.extend_from_slice(protocol.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(fields);
    out.extend_from_slice(b"\r\n");
}

/// `HTTP/1.1 100 Continue`, sent before reading a body the client is
/// holding back (RFC 9110 §10.1.1).
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Appends the framing of one chunk's start: `size-in-hex CRLF`.
pub fn write_chunk_start(out: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// The end of a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";
/// The last chunk and an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// One field line, `name: value` CRLF, as every writer of a head spells
/// it (the caller has checked both). Inlined where it is written: the
/// proxy's and the answer's passes over their fields are hot.
#[inline(always)]
pub(crate) fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn write_status_line(out: &mut Vec<u8>, status: u16) {
    // The most common lines in one piece (one copy instead of five), each
    // arm its own copy: a copy of a length known when compiling is a few
    // moves, where one of a slice chosen at run time was a call to memcpy.
    match status {
        200 => out.extend_from_slice(b"HTTP/1.1 200 OK\r\n"),
        204 => out.extend_from_slice(b"HTTP/1.1 204 No Content\r\n"),
        206 => out.extend_from_slice(b"HTTP/1.1 206 Partial Content\r\n"),
        304 => out.extend_from_slice(b"HTTP/1.1 304 Not Modified\r\n"),
        404 => out.extend_from_slice(b"HTTP/1.1 404 Not Found\r\n"),
        _ => write_status_line_spelled(out, status),
    }
}

/// Appends the `Date` value: the worker's is always `DATE_LEN` bytes, and
/// copied as such it is a few moves, not a call to memcpy.
#[inline]
fn write_date(out: &mut Vec<u8>, date: &[u8]) {
    match <&[u8; DATE_LEN]>::try_from(date) {
        Ok(date) => out.extend_from_slice(date),
        Err(_) => out.extend_from_slice(date),
    }
}

fn write_status_line_spelled(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    write_u64(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[inline]
fn write_framing(out: &mut Vec<u8>, framing: BodyFraming) {
    match framing {
        BodyFraming::Length(n) => write_length(out, n),
        BodyFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyFraming::Close | BodyFraming::Bodiless => {}
    }
}

/// Appends `Content-Length: n` and its line end. The line is copied at
/// its longest (20 digits, a length known when compiling: a few moves),
/// its digits written in place two at a time and the rest cut off. The
/// number written into a buffer of its own and copied from there
/// (itoa's way, the digits by a call to memcpy) was 98 instructions a
/// head, this 78 (callgrind, two archive entries in turn).
#[inline]
pub(crate) fn write_length(out: &mut Vec<u8>, n: u64) {
    let digits = length_digits(n);
    let at = out.len();
    out.extend_from_slice(LENGTH_LINE);
    let line: &mut [u8; 38] = (&mut out[at..at + 38]).try_into().expect("38 bytes");
    put_length(line, n, digits);
    out.truncate(at + 18 + digits);
}

/// Writes `Content-Length: n` and its line end at the start of `line`,
/// as `write_length` appends it (for a head put together on the stack,
/// `h1/respond.rs`'s `write_relayed_whole`): its length.
#[inline]
pub(crate) fn length_line(line: &mut [u8; 38], n: u64) -> usize {
    let digits = length_digits(n);
    line.copy_from_slice(LENGTH_LINE);
    put_length(line, n, digits);
    18 + digits
}

/// `Content-Length` with room for 20 digits.
const LENGTH_LINE: &[u8; 38] = b"Content-Length: 00000000000000000000\r\n";

#[inline(always)]
fn length_digits(n: u64) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1_000..=9_999 => 4,
        10_000..=99_999 => 5,
        _ => n.ilog10() as usize + 1,
    }
}

/// `n`'s `digits` digits and the line end, written over `LENGTH_LINE`'s.
#[inline(always)]
fn put_length(line: &mut [u8; 38], n: u64, digits: usize) {
    let mut end = 16 + digits;
    line[end..end + 2].copy_from_slice(b"\r\n");
    let mut rest = n;
    while rest >= 100 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        end -= 2;
        line[end..end + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if rest >= 10 {
        let pair = rest as usize * 2;
        line[end - 2..end].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        line[end - 1] = b'0' + rest as u8;
    }
}

/// `00` to `99`, for writing numbers two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

pub(crate) fn write_conn(out: &mut Vec<u8>, conn: ConnField) {
    match conn {
        ConnField::Omit => {}
        ConnField::Close => out.extend_from_slice(b"Connection: close\r\n"),
        ConnField::KeepAlive => out.extend_from_slice(b"Connection: keep-alive\r\n"),
    }
}

fn write_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(n).as_bytes());
}

/// The reason phrase for a status code (RFC 9110 §15), or `Unknown`.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::Body;

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn status_lines_in_one_piece_are_the_spelled_ones() {
        for status in 100..1000 {
            let (mut fast, mut spelled) = (Vec::new(), Vec::new());
            write_status_line(&mut fast, status);
            write_status_line_spelled(&mut spelled, status);
            assert_eq!(fast, spelled, "{status}");
        }
    }

    #[test]
    fn heads_are_spelled_exactly() {
        let mut out = Vec::new();
        let resp = Response::text("Hello").with_header("X-A", "1");
        write_head(&mut out, &resp, DATE, BodyFraming::Length(5), ConnField::Omit);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nServer: peregrine\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n"
        );
        let mut out = Vec::new();
        let resp = Response::new(204).with_header("Server", "custom");
        write_head(&mut out, &resp, DATE, BodyFraming::Bodiless, ConnField::Close);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 204 No Content\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nConnection: close\r\nServer: custom\r\n\r\n"
        );
        let block = crate::response::HeaderBlock::new(&[("ETag", "\"x\""), ("Cache-Control", "no-cache")]).unwrap();
        for (status, line) in [(200, "200 OK"), (404, "404 Not Found"), (299, "299 Unknown")] {
            let mut out = b"before".to_vec();
            let resp = Response::prepared(status, block.clone(), Body::Empty);
            write_head(&mut out, &resp, DATE, BodyFraming::Length(1234), ConnField::KeepAlive);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!(
                    "beforeHTTP/1.1 {line}\r\nServer: peregrine\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
                     Content-Length: 1234\r\nConnection: keep-alive\r\nETag: \"x\"\r\nCache-Control: no-cache\r\n\r\n"
                )
            );
        }
    }

    #[test]
    fn content_lengths_are_the_decimal_numbers() {
        let mut ns: Vec<u64> = vec![0, 1, 9, 10, 99, 100, 956, 65_535, u64::MAX - 1, u64::MAX];
        for p in 1..20 {
            let ten = 10u64.pow(p);
            ns.extend([ten - 1, ten, ten + 1]);
        }
        for n in ns {
            let mut out = b"x".to_vec();
            write_length(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), format!("xContent-Length: {n}\r\n"));
        }
    }

    #[test]
    fn error_responses_name_the_problem_and_close() {
        let mut out = Vec::new();
        write_error(&mut out, 400, "invalid chunk size", DATE, false);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(head.contains("\r\nConnection: close"));
        assert_eq!(body, "400 Bad Request: invalid chunk size\n");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn chunk_sizes_are_lowercase_hex() {
        for (n, want) in [(0, "0\r\n"), (10, "a\r\n"), (255, "ff\r\n"), (4096, "1000\r\n")] {
            let mut out = Vec::new();
            write_chunk_start(&mut out, n);
            assert_eq!(out, want.as_bytes());
        }
    }
}
