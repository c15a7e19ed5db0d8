//! The client role as byte tables: request heads spelled exactly, response
//! heads (well-formed and hostile) parsed whole and at every split, bodies
//! decoded to their end and no further.

use std::mem::MaybeUninit;

use super::*;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{parse_head, Parsed};
use crate::codec::write::{write_chunk_start, CHUNK_END, LAST_CHUNK};
use crate::limits::Limits;

/// What a parsed head says, owned, so that two parses can be compared.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Got {
    version: Version,
    status: u16,
    reason: String,
    head_len: usize,
    framing: ResponseFraming,
    transfer_coded: bool,
    keep_alive: bool,
    fields: Vec<(String, Vec<u8>)>,
}

fn parse_with(bytes: &[u8], method: &str, n_fields: usize) -> Result<Option<Got>, ResponseError> {
    let mut headers = [const { MaybeUninit::uninit() }; 64];
    match parse_response_head(bytes, &mut headers[..n_fields], method)? {
        ParsedResponse::Complete(h) => Ok(Some(Got {
            version: h.version,
            status: h.status,
            reason: h.reason.to_owned(),
            head_len: h.head_len,
            framing: h.framing,
            transfer_coded: h.transfer_coded,
            keep_alive: h.keep_alive,
            fields: h
                .headers
                .iter()
                .map(|f| (f.name.to_owned(), f.value.to_vec()))
                .collect(),
        })),
        ParsedResponse::Partial => Ok(None),
    }
}

/// Parses `input` whole, then each of its prefixes, as bytes arriving in
/// two reads would be: a prefix shorter than a complete head is `Partial`,
/// and a prefix of an erroneous input is `Partial` or the same error.
fn parse_every_split_with(input: &[u8], method: &str, n_fields: usize) -> Result<Option<Got>, ResponseError> {
    let whole = parse_with(input, method, n_fields);
    for at in 0..input.len() {
        let prefix = parse_with(&input[..at], method, n_fields);
        let ok = match &whole {
            Ok(Some(g)) if at < g.head_len => prefix == Ok(None),
            Ok(Some(_)) => prefix == whole,
            Ok(None) => prefix == Ok(None),
            Err(_) => prefix == Ok(None) || prefix == whole,
        };
        assert!(
            ok,
            "{:?} split at {at}: prefix {prefix:?}, whole {whole:?}",
            String::from_utf8_lossy(input)
        );
    }
    whole
}

fn parse_every_split(input: &[u8], method: &str) -> Result<Option<Got>, ResponseError> {
    parse_every_split_with(input, method, 64)
}

#[test]
fn well_formed_responses_frame_their_bodies() {
    use ResponseFraming::*;
    let table: &[(&[u8], &str, u16, ResponseFraming, bool)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            "GET",
            200,
            Length(5),
            true,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "GET", 200, Empty, true),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "GET",
            200,
            Length(5),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length:5 \r\n\r\n",
            "GET",
            200,
            Length(5),
            true,
        ),
        // Digits alone (`Fields::scan`'s short way) beside a list.
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 5\r\n\r\n",
            "GET",
            200,
            Length(5),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5 , 5\r\nContent-Length: 5\r\n\r\n",
            "GET",
            200,
            Length(5),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            200,
            Chunked,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED \r\n\r\n",
            "GET",
            200,
            Chunked,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            200,
            Chunked,
            true,
        ),
        // Chunked not last, or absent: the body runs to the close.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "GET",
            200,
            Close,
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "GET",
            200,
            Close,
            false,
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n", "GET", 200, Close, false),
        (
            b"HTTP/1.1 500 Internal Server Error\r\nServer: x\r\n\r\n",
            "POST",
            500,
            Close,
            false,
        ),
        // Persistence: HTTP/1.0 closes unless it says keep-alive.
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
            "GET",
            200,
            Length(2),
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n",
            "GET",
            200,
            Length(2),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\n",
            "GET",
            200,
            Length(2),
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: Close\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            200,
            Chunked,
            false,
        ),
        // No body, whatever the fields say.
        (b"HTTP/1.1 204 No Content\r\n\r\n", "DELETE", 204, Empty, true),
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            "GET",
            204,
            Empty,
            true,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
            "GET",
            304,
            Empty,
            true,
        ),
        (b"HTTP/1.1 304 Not Modified\r\n\r\n", "GET", 304, Empty, true),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
            "HEAD",
            200,
            Empty,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HEAD",
            200,
            Empty,
            true,
        ),
        (b"HTTP/1.1 404 Not Found\r\n\r\n", "HEAD", 404, Empty, true),
        // Interim, upgrade, tunnel.
        (b"HTTP/1.1 100 Continue\r\n\r\n", "POST", 100, Informational, true),
        (
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
            "GET",
            103,
            Informational,
            true,
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n", "HEAD", 100, Informational, true),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET",
            101,
            Upgrade,
            false,
        ),
        (
            b"HTTP/1.1 200 Connection Established\r\n\r\n",
            "CONNECT",
            200,
            Tunnel,
            false,
        ),
        // RFC 9110 §9.3.6: a client ignores the framing fields of a 2xx to
        // CONNECT, even malformed or conflicting ones.
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n",
            "CONNECT",
            200,
            Tunnel,
            false,
        ),
        (
            b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 5\r\n\r\n",
            "CONNECT",
            407,
            Length(5),
            true,
        ),
        // Status lines: no reason, an empty one, an unregistered code.
        (
            b"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\n",
            "GET",
            200,
            Length(1),
            true,
        ),
        (
            b"HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\n",
            "GET",
            200,
            Length(1),
            true,
        ),
        (
            b"HTTP/1.1 999 Whatever\r\nContent-Length: 1\r\n\r\n",
            "GET",
            999,
            Length(1),
            true,
        ),
        (b"HTTP/1.1 600 X\r\n\r\n", "GET", 600, Close, false),
        // Empty values, blanks around values, obs-text in a value.
        (
            b"HTTP/1.1 200 OK\r\nX:\r\nY: \t\r\nZ: \xe9t\xe9\r\nContent-Length: 1\r\n\r\n",
            "GET",
            200,
            Length(1),
            true,
        ),
    ];
    for (input, method, status, framing, keep_alive) in table {
        let got = parse_every_split(input, method)
            .unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(input)))
            .expect("complete");
        assert_eq!(
            (got.status, got.framing, got.keep_alive, got.head_len),
            (*status, *framing, *keep_alive, input.len()),
            "{:?} to {method}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn heads_give_their_parts() {
    let input = b"HTTP/1.0 404 Not Found\r\nServer: up\r\nX-Empty:\r\nContent-Length: 3\r\n\r\nabc";
    let got = parse_every_split(input, "GET").unwrap().unwrap();
    assert_eq!(got.version, Version::Http10);
    assert_eq!((got.status, got.reason.as_str()), (404, "Not Found"));
    assert_eq!(got.head_len, input.len() - 3);
    assert_eq!(
        got.fields,
        [
            ("Server".to_owned(), b"up".to_vec()),
            ("X-Empty".to_owned(), Vec::new()),
            ("Content-Length".to_owned(), b"3".to_vec()),
        ]
    );
    // A coding beyond chunked is reported, so that the body is not
    // forwarded as if it were the representation.
    let coded = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "GET");
    assert!(coded.unwrap().unwrap().transfer_coded);
    let plain = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET");
    assert!(!plain.unwrap().unwrap().transfer_coded);
    // obs-text in a reason phrase: httparse gives it as empty.
    let got = parse(b"HTTP/1.1 200 \xc3\xa9\r\n\r\n", "GET").unwrap().unwrap();
    assert_eq!(got.reason, "");
}

fn parse(bytes: &[u8], method: &str) -> Result<Option<Got>, ResponseError> {
    parse_with(bytes, method, 64)
}

#[test]
fn incomplete_heads_are_partial_not_errors() {
    for input in [
        &b""[..],
        b"H",
        b"HTTP/1.",
        b"HTTP/1.1",
        b"HTTP/1.1 2",
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK\r",
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r",
    ] {
        assert_eq!(parse(input, "GET"), Ok(None), "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn bad_responses_name_the_problem() {
    use ResponseError::*;
    let table: &[(&[u8], &str, ResponseError)] = &[
        // Not HTTP/1.x at all.
        (b"HTTP/2.0 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"HTTP/2 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"HTTP/1.2 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"HTTP/0.9 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"http/1.1 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"ICY 200 OK\r\n\r\n", "GET", NotHttp1),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "GET", NotHttp1),
        (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00", "GET", NotHttp1),
        (b"<html>hello</html>", "GET", NotHttp1),
        (b"\r\nHTTP/1.1 200 OK\r\n\r\n", "GET", LeadingEmptyLine),
        (b"\nHTTP/1.1 200 OK\r\n\r\n", "GET", LeadingEmptyLine),
        // Status lines.
        (b"HTTP/1.1 099 Low\r\n\r\n", "GET", StatusOutOfRange),
        (b"HTTP/1.1 000 Zero\r\n\r\n", "GET", StatusOutOfRange),
        (b"HTTP/1.1 20 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1 -200 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1  200 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1\t200 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.10 200 OK\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1 200 O\x00K\r\n\r\n", "GET", StatusLine),
        (b"HTTP/1.1 200 OK\rX: y\r\n\r\n", "GET", StatusLine),
        // Bare LF anywhere a line ends: the status line, a field line, the
        // empty line.
        (b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "GET", BareLf),
        (b"HTTP/1.1 200\nContent-Length: 0\r\n\r\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\r\nX:\nContent-Length: 0\r\n\r\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\r\nX: a \t\n\r\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\n\n", "GET", BareLf),
        (b"HTTP/1.1 200 OK\r\n\rX", "GET", BareCr),
        // Fields.
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "GET", ObsFold),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n", "GET", ObsFold),
        (b"HTTP/1.1 200 OK\r\n X: a\r\n\r\n", "GET", ObsFold),
        (b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n", "GET", FieldName),
        (b"HTTP/1.1 200 OK\r\nX\r\n\r\n", "GET", FieldName),
        (b"HTTP/1.1 200 OK\r\n: a\r\n\r\n", "GET", FieldName),
        (b"HTTP/1.1 200 OK\r\nX\x00Y: a\r\n\r\n", "GET", FieldName),
        (b"HTTP/1.1 200 OK\r\nX(: a\r\n\r\n", "GET", FieldName),
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "GET", FieldValue),
        (b"HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n", "GET", FieldValue),
        (b"HTTP/1.1 200 OK\r\nX: a\x7fb\r\n\r\n", "GET", FieldValue),
        (b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "GET", FieldValue),
        // Lengths that cannot be trusted.
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "GET",
            DifferingContentLengths,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "GET",
            DifferingContentLengths,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 6\r\n\r\n",
            "GET",
            DifferingContentLengths,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nContent-Length: 6\r\n\r\n",
            "GET",
            DifferingContentLengths,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5,\r\n\r\n",
            "GET",
            ContentLength,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", "GET", ContentLength),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "GET", ContentLength),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n", "GET", ContentLength),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\n", "GET", ContentLength),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5,\r\n\r\n", "GET", ContentLength),
        (b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "GET", ContentLength),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "GET",
            ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            LengthAndTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "GET",
            LengthAndTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n",
            "GET",
            LengthAndTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip, chunked\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chun ked\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \"chunked\"\r\n\r\n",
            "GET",
            TransferEncoding,
        ),
        // VT is no whitespace: httparse refuses it in any value.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
            "GET",
            FieldValue,
        ),
        (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            TransferEncodingInHttp10,
        ),
        // Strict even where the length does not frame the body: these heads
        // are forwarded with their fields.
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5, 6\r\n\r\n",
            "GET",
            DifferingContentLengths,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "HEAD", ContentLength),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HEAD",
            LengthAndTransferEncoding,
        ),
        // Not a 2xx: CONNECT's answer is framed like any other.
        (
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "CONNECT",
            DifferingContentLengths,
        ),
    ];
    for (input, method, want) in table {
        assert_eq!(
            parse_every_split(input, method),
            Err(*want),
            "{:?} to {method}",
            String::from_utf8_lossy(input)
        );
        assert!(!want.reason().is_empty());
    }
}

#[test]
fn response_splitting_attempts_are_refused_or_contained() {
    // A value carrying a second response after a bare LF or a bare CR: a
    // reader that took either as a line's end would see a different head.
    let injected: &[(&[u8], ResponseError)] = &[
        (
            b"HTTP/1.1 200 OK\r\nSet-Cookie: a=b\nContent-Length: 0\n\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil",
            ResponseError::BareLf,
        ),
        (
            b"HTTP/1.1 302 Found\r\nLocation: /x\rContent-Length: 0\r\r\nHTTP/1.1 200 OK\r\n\r\n",
            ResponseError::FieldValue,
        ),
        (
            b"HTTP/1.1 200 OK\r\nX: y\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n",
            ResponseError::DifferingContentLengths,
        ),
    ];
    for (input, want) in injected {
        assert_eq!(parse_every_split(input, "GET"), Err(*want));
    }

    // A body that holds what looks like a response is body, and the bytes
    // after a Content-Length body are never taken for it: the decoder stops
    // at the declared end, where the next head starts.
    let first = b"HTTP/1.1 200 OK\r\nContent-Length: 38\r\n\r\n";
    let body = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let second = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(body.len(), 38);
    let stream = [&first[..], body, second].concat();
    let got = parse_every_split(&stream, "GET").unwrap().unwrap();
    assert_eq!((got.framing, got.head_len), (ResponseFraming::Length(38), first.len()));
    let (data, consumed) = decode_body(&stream[got.head_len..], got.framing, 1000).unwrap();
    assert_eq!((data.as_slice(), consumed), (&body[..], body.len()));
    let next = parse_every_split(&stream[got.head_len + consumed..], "GET")
        .unwrap()
        .unwrap();
    assert_eq!((next.status, next.framing), (204, ResponseFraming::Empty));

    // A 304 or a HEAD answer with a Content-Length has no body: what
    // follows is the next response, not 100 bytes of this one.
    for (head, method) in [
        (&b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n"[..], "GET"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", "HEAD"),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 100\r\n\r\n", "PUT"),
    ] {
        let stream = [head, &second[..]].concat();
        let got = parse_every_split(&stream, method).unwrap().unwrap();
        assert_eq!((got.framing, got.head_len), (ResponseFraming::Empty, head.len()));
        let mut dec = ResponseBodyDecoder::new(got.framing, u64::MAX).unwrap();
        assert!(dec.is_done());
        assert_eq!(dec.step(&stream[got.head_len..]).unwrap().consumed, 0);
        let next = parse(&stream[got.head_len..], "GET").unwrap().unwrap();
        assert_eq!(next.status, 204);
    }
}

#[test]
fn interim_responses_come_before_the_final_one() {
    let stream: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\
        HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n\
        HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
    let mut at = 0;
    let mut seen = Vec::new();
    loop {
        let got = parse_every_split(&stream[at..], "POST").unwrap().unwrap();
        at += got.head_len;
        seen.push((got.status, got.framing));
        if got.framing != ResponseFraming::Informational {
            assert!(ResponseBodyDecoder::new(ResponseFraming::Informational, 0).is_none());
            break;
        }
    }
    assert_eq!(
        seen,
        [
            (100, ResponseFraming::Informational),
            (103, ResponseFraming::Informational),
            (201, ResponseFraming::Length(2)),
        ]
    );
    assert_eq!(&stream[at..], b"ok");
}

#[test]
fn switching_protocols_and_tunnels_end_the_http_exchange() {
    let upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello";
    let got = parse_every_split(upgrade, "GET").unwrap().unwrap();
    assert_eq!((got.framing, got.keep_alive), (ResponseFraming::Upgrade, false));
    assert_eq!(&upgrade[got.head_len..], b"\x81\x05hello");
    assert!(ResponseBodyDecoder::new(got.framing, u64::MAX).is_none());

    let tunnel = b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x01";
    let got = parse_every_split(tunnel, "CONNECT").unwrap().unwrap();
    assert_eq!((got.framing, got.keep_alive), (ResponseFraming::Tunnel, false));
    assert!(ResponseBodyDecoder::new(got.framing, u64::MAX).is_none());
    // The same bytes answering GET are a close-delimited body.
    let got = parse(tunnel, "GET").unwrap().unwrap();
    assert_eq!(got.framing, ResponseFraming::Close);
}

#[test]
fn huge_heads_are_refused_however_they_arrive() {
    let head_with_value = |n: usize| {
        let mut head = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        head.resize(head.len() + n, b'a');
        head.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
        head
    };
    let overhead = head_with_value(0).len();
    // Exactly at the limit: accepted; a byte more: refused.
    let at_limit = head_with_value(RESPONSE_HEAD_BYTES_MAX - overhead);
    assert_eq!(at_limit.len(), RESPONSE_HEAD_BYTES_MAX);
    let got = parse(&at_limit, "GET").unwrap().unwrap();
    assert_eq!(got.head_len, RESPONSE_HEAD_BYTES_MAX);
    let over = head_with_value(RESPONSE_HEAD_BYTES_MAX - overhead + 1);
    assert_eq!(parse(&over, "GET"), Err(ResponseError::HeadTooLarge));
    // Every prefix: Partial up to the limit, then refused before the end.
    for at in [0, 1, 100, RESPONSE_HEAD_BYTES_MAX - 1, RESPONSE_HEAD_BYTES_MAX] {
        assert_eq!(parse(&over[..at], "GET"), Ok(None), "prefix of {at}");
    }
    let far_over = head_with_value(RESPONSE_HEAD_BYTES_MAX);
    for at in [RESPONSE_HEAD_BYTES_MAX + 1, far_over.len() - 1, far_over.len()] {
        assert_eq!(
            parse(&far_over[..at], "GET"),
            Err(ResponseError::HeadTooLarge),
            "prefix of {at}"
        );
    }
    // A head that never ends, or a flood of empty-valued fields.
    let endless = vec![b'a'; 1 << 20];
    let endless = [&b"HTTP/1.1 200 OK\r\nX: "[..], &endless].concat();
    assert_eq!(parse(&endless, "GET"), Err(ResponseError::HeadTooLarge));
    let many = [&b"HTTP/1.1 200 OK\r\n"[..], &b"X:\r\n".repeat(20_000), b"\r\n"].concat();
    assert_eq!(parse(&many, "GET"), Err(ResponseError::TooManyFields));
    // An error past the limit is not looked for: the limit comes first,
    // as it would for the same bytes read in two parts.
    let bad_late = [&far_over[..RESPONSE_HEAD_BYTES_MAX + 10], b"\x00\r\n\r\n"].concat();
    assert_eq!(parse(&bad_late, "GET"), Err(ResponseError::HeadTooLarge));
    // More fields than the caller's array.
    let four = b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    assert!(parse_every_split_with(four, "GET", 4).unwrap().is_some());
    assert_eq!(
        parse_every_split_with(four, "GET", 3),
        Err(ResponseError::TooManyFields)
    );
}

/// `lines_end_in_crlf` (the lines' ends only) refuses exactly the heads a
/// byte-by-byte search finds a bare LF in, over heads built from every mix
/// of line ends, blanks around values and empty values.
#[test]
fn line_ends_agree_with_a_byte_by_byte_search() {
    let has_bare_lf = |head: &[u8]| {
        head.iter()
            .enumerate()
            .any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
    };
    let eols: [&[u8]; 2] = [b"\r\n", b"\n"];
    let values: [&[u8]; 6] = [b"a", b"", b" ", b" a b \t", b"\ta", b"a\t \t"];
    let mut n = 0;
    for status_line in [&b"HTTP/1.1 200 OK"[..], b"HTTP/1.1 200", b"HTTP/1.1 200 "] {
        for line_eol in eols {
            for (v1, v2) in values.iter().flat_map(|a| values.iter().map(move |b| (a, b))) {
                for (e1, e2, end) in (0..8).map(|i| (eols[i & 1], eols[(i >> 1) & 1], eols[i >> 2])) {
                    for n_fields in 0..=2 {
                        let mut head = status_line.to_vec();
                        head.extend_from_slice(line_eol);
                        for (i, (v, e)) in [(v1, e1), (v2, e2)].into_iter().take(n_fields).enumerate() {
                            head.extend_from_slice(if i == 0 { b"X:" } else { b"Yy: " });
                            head.extend_from_slice(v);
                            head.extend_from_slice(e);
                        }
                        head.extend_from_slice(end);
                        let got = parse(&head, "GET");
                        if has_bare_lf(&head) {
                            assert_eq!(got, Err(ResponseError::BareLf), "{:?}", String::from_utf8_lossy(&head));
                        } else {
                            assert!(
                                matches!(got, Ok(Some(_))),
                                "{:?}: {got:?}",
                                String::from_utf8_lossy(&head)
                            );
                        }
                        n += 1;
                    }
                }
            }
        }
    }
    assert!(n > 1000, "{n} heads");
}

// ---------------------------------------------------------------------------
// Request heads
// ---------------------------------------------------------------------------

/// Fields as a caller passes them: name, value.
type FieldList = &'static [(&'static str, &'static str)];

fn request(
    method: &str,
    target: &str,
    host: &str,
    fields: &[(&str, &str)],
    framing: Framing,
) -> Result<String, RequestHeadError> {
    let mut out = b"before".to_vec();
    let written = write_request_head(
        &mut out,
        method,
        target,
        host,
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        framing,
    );
    match written {
        Ok(()) => Ok(String::from_utf8(out.split_off(6)).unwrap()),
        Err(e) => {
            // Nothing of a refused head is left in the buffer.
            assert_eq!(out, b"before");
            Err(e)
        }
    }
}

#[test]
fn request_heads_are_spelled_exactly() {
    let table: &[(&str, &str, &str, FieldList, Framing, &str)] = &[
        (
            "GET",
            "/",
            "example.com",
            &[],
            Framing::Empty,
            "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        ),
        (
            "GET",
            "/a?b=c",
            "example.com:8080",
            &[("Accept", "*/*"), ("X-Forwarded-For", "192.0.2.1")],
            Framing::Empty,
            "GET /a?b=c HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n",
        ),
        (
            "POST",
            "/upload",
            "h",
            &[("Content-Type", "text/plain")],
            Framing::Length(5),
            "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n",
        ),
        (
            "PUT",
            "/x",
            "h",
            &[],
            Framing::Chunked,
            "PUT /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
        ),
        // An empty POST still says its length (RFC 9110 §8.6).
        (
            "POST",
            "/",
            "h",
            &[],
            Framing::Empty,
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
        ),
        (
            "DELETE",
            "/",
            "h",
            &[],
            Framing::Empty,
            "DELETE / HTTP/1.1\r\nHost: h\r\n\r\n",
        ),
        // No authority: an empty Host (RFC 9112 §3.2).
        (
            "OPTIONS",
            "*",
            "",
            &[],
            Framing::Empty,
            "OPTIONS * HTTP/1.1\r\nHost:\r\n\r\n",
        ),
        (
            "CONNECT",
            "example.com:443",
            "example.com:443",
            &[],
            Framing::Empty,
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
        ),
        // Hop-by-hop fields go, whatever their case, and so does every
        // field the Connection fields name; Host and Content-Length are
        // spelled from the arguments, once.
        (
            "GET",
            "/",
            "h",
            &[
                ("connection", "keep-alive, X-Secret"),
                ("Keep-Alive", "timeout=5"),
                ("Proxy-Connection", "keep-alive"),
                ("TE", "trailers"),
                ("Transfer-Encoding", "chunked"),
                ("Upgrade", "websocket"),
                ("x-secret", "1"),
                ("Connection", "X-Other"),
                ("X-Other", "2"),
                ("X-Kept", "3"),
                ("HOST", "evil.example"),
                ("Content-Length", "99"),
                ("Accept", "text/html"),
            ],
            Framing::Length(1),
            "GET / HTTP/1.1\r\nHost: h\r\nX-Kept: 3\r\nAccept: text/html\r\nContent-Length: 1\r\n\r\n",
        ),
        // Obs-text and tabs are valid in values; the name's case is kept.
        (
            "GET",
            "/",
            "h",
            &[("x-Name", "a\tb \u{e9}")],
            Framing::Empty,
            "GET / HTTP/1.1\r\nHost: h\r\nx-Name: a\tb \u{e9}\r\n\r\n",
        ),
    ];
    for (method, target, host, fields, framing, want) in table {
        assert_eq!(
            request(method, target, host, fields, *framing).as_deref(),
            Ok(*want),
            "{method} {target}"
        );
    }
}

#[test]
fn request_heads_that_would_change_meaning_are_refused() {
    use RequestHeadError::*;
    let ok: FieldList = &[("X", "y")];
    let table: &[(&str, &str, &str, FieldList, RequestHeadError)] = &[
        ("GET /", "/", "h", ok, Method),
        ("", "/", "h", ok, Method),
        ("G\r\nET", "/", "h", ok, Method),
        ("GET", "", "h", ok, Target),
        ("GET", "/a b", "h", ok, Target),
        ("GET", "/a\r\nX: y", "h", ok, Target),
        ("GET", "/a\0", "h", ok, Target),
        ("GET", "/a#frag", "h", ok, Target),
        ("GET", "/\u{e9}", "h", ok, Target),
        ("GET", "/", "h\r\nX: y", ok, Host),
        ("GET", "/", "a/b", ok, Host),
        ("GET", "/", "a b", ok, Host),
        ("GET", "/", "h", &[("X: y\r\nZ", "1")], FieldName),
        ("GET", "/", "h", &[("", "1")], FieldName),
        ("GET", "/", "h", &[("X Y", "1")], FieldName),
        ("GET", "/", "h", &[(":authority", "h")], FieldName),
        ("GET", "/", "h", &[("X", "a\r\nInjected: 1")], FieldValue),
        ("GET", "/", "h", &[("X", "a\nb")], FieldValue),
        ("GET", "/", "h", &[("X", "a\rb")], FieldValue),
        ("GET", "/", "h", &[("X", "a\0b")], FieldValue),
        ("GET", "/", "h", &[("X", "a\x7fb")], FieldValue),
        ("GET", "/", "h", &[("X", "a\x1bb")], FieldValue),
        // Checked even in a field that would be dropped, and after good ones.
        (
            "GET",
            "/",
            "h",
            &[("A", "1"), ("Connection", "close\r\nX: 1")],
            FieldValue,
        ),
        ("GET", "/", "h", &[("A", "1"), ("Upgrade", "\0")], FieldValue),
    ];
    for (method, target, host, fields, want) in table {
        assert_eq!(
            request(method, target, host, fields, Framing::Length(3)),
            Err(*want),
            "{method:?} {target:?} {host:?} {fields:?}"
        );
        assert!(!want.reason().is_empty());
    }
}

/// What the client writes, the server side reads back as written: the
/// same method, target, host, fields and framing, and a chunked body
/// spelled with `write`'s chunk framing decodes to itself.
#[test]
fn request_heads_round_trip_through_the_server_parser() {
    let mut out = Vec::new();
    let fields = [
        ("Accept", "*/*"),
        ("Connection", "close, X-Hop"),
        ("X-Hop", "1"),
        ("X-End", "2"),
    ];
    write_request_head(
        &mut out,
        "PATCH",
        "/p?q=1",
        "example.com",
        fields.iter().copied(),
        Framing::Chunked,
    )
    .unwrap();
    let head_end = out.len();
    for piece in [&b"hello"[..], b" ", b"world"] {
        write_chunk_start(&mut out, piece.len());
        out.extend_from_slice(piece);
        out.extend_from_slice(CHUNK_END);
    }
    out.extend_from_slice(LAST_CHUNK);

    let mut headers = [const { MaybeUninit::uninit() }; 16];
    let Ok(Parsed::Complete(head)) = parse_head(&out, &mut headers, &Limits::default()) else {
        panic!("{:?}", String::from_utf8_lossy(&out));
    };
    assert_eq!((head.method, head.target, head.head_len), ("PATCH", "/p?q=1", head_end));
    assert_eq!(head.host, Some(&b"example.com"[..]));
    assert_eq!(head.framing, Framing::Chunked);
    assert!(head.keep_alive);
    let names: Vec<&str> = head.headers.iter().map(|h| h.name).collect();
    assert_eq!(names, ["Host", "Accept", "X-End", "Transfer-Encoding"]);

    let mut buf = out[head_end..].to_vec();
    let (mut read, mut write) = (0, 0);
    assert!(ChunkedDecoder::new(1 << 20)
        .decode_in_place(&mut buf, &mut read, &mut write)
        .unwrap());
    assert_eq!(&buf[..write], b"hello world");
    assert_eq!(read, buf.len());
}

// ---------------------------------------------------------------------------
// Response bodies
// ---------------------------------------------------------------------------

/// Decodes a body from `input` fed in pieces of `piece` bytes; returns the
/// data and the bytes consumed when done, or at the end of the input.
fn decode_body(input: &[u8], framing: ResponseFraming, piece: usize) -> Result<(Vec<u8>, usize), ResponseBodyError> {
    let mut dec = ResponseBodyDecoder::new(framing, 1 << 20).expect("a body");
    let mut data = Vec::new();
    let mut at = 0;
    while at < input.len() && !dec.is_done() {
        let end = (at + piece).min(input.len());
        let step = dec.step(&input[at..end])?;
        assert!(step.consumed > 0 || step.done, "no progress");
        data.extend_from_slice(&input[at + step.data.start..at + step.data.end]);
        at += step.consumed;
    }
    Ok((data, at))
}

#[test]
fn bodies_decode_to_their_end_and_no_further() {
    use ResponseFraming::*;
    let table: &[(&[u8], ResponseFraming, &[u8], usize)] = &[
        (b"hello", Length(5), b"hello", 5),
        (b"helloHTTP/1.1 200 OK\r\n", Length(5), b"hello", 5),
        (b"anything", Empty, b"", 0),
        (b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1", Chunked, b"hello", 15),
        (b"5\r\nhello\r\n0\r\nX: y\r\n\r\n", Chunked, b"hello", 21),
        (b"all of it, to the close", Close, b"all of it, to the close", 23),
    ];
    for (input, framing, want, consumed) in table {
        for piece in [1, 2, 3, input.len().max(1)] {
            let got = decode_body(input, *framing, piece).unwrap();
            assert_eq!(
                (got.0.as_slice(), got.1),
                (*want, *consumed),
                "{:?} as {framing:?} in pieces of {piece}",
                String::from_utf8_lossy(input)
            );
        }
    }
}

#[test]
fn a_close_before_the_end_is_a_truncated_body() {
    let mut dec = ResponseBodyDecoder::new(ResponseFraming::Length(10), u64::MAX).unwrap();
    dec.step(b"12345").unwrap();
    assert_eq!(dec.finish(), Err(ResponseBodyError::Truncated));
    dec.step(b"67890").unwrap();
    assert_eq!(dec.finish(), Ok(()));

    let mut dec = ResponseBodyDecoder::new(ResponseFraming::Chunked, u64::MAX).unwrap();
    dec.step(b"5\r\nhel").unwrap();
    assert_eq!(dec.finish(), Err(ResponseBodyError::Truncated));

    // A close-delimited body is whole at the close, however short.
    let dec = ResponseBodyDecoder::new(ResponseFraming::Close, u64::MAX).unwrap();
    assert!(!dec.is_done());
    assert_eq!(dec.finish(), Ok(()));

    assert_eq!(
        decode_body(b"5\r\nhelloX", ResponseFraming::Chunked, 4),
        Err(ResponseBodyError::Chunked(ChunkedError::LineEnding))
    );
    let mut dec = ResponseBodyDecoder::new(ResponseFraming::Chunked, 4).unwrap();
    assert_eq!(
        dec.step(b"5\r\nhello"),
        Err(ResponseBodyError::Chunked(ChunkedError::TooLarge))
    );
    assert_eq!(
        ResponseBodyError::Chunked(ChunkedError::TooLarge).reason(),
        "response body too large"
    );
}

#[test]
fn eq_lower_agrees_with_eq_ignore_ascii_case_for_every_byte() {
    let names: &[&[u8]] = &[
        b"te",
        b"via",
        b"date",
        b"server",
        b"upgrade",
        b"forwarded",
        b"connection",
        b"x-request-id",
        b"content-length",
        b"transfer-encoding",
        b"a-name-of-more-than-sixteen-bytes",
    ];
    for lower in names {
        assert!(eq_lower(lower, lower));
        assert!(eq_lower(&lower.to_ascii_uppercase(), lower));
        assert!(!eq_lower(&lower[1..], lower));
        // Every byte value at every place: the same answer as the
        // byte-at-a-time comparison (`@`, `[`, `\x0d`, `\xc1` ... too).
        for at in 0..lower.len() {
            for b in 0..=255u8 {
                let mut name = lower.to_vec();
                name[at] = b;
                assert_eq!(eq_lower(&name, lower), name.eq_ignore_ascii_case(lower), "{name:?}");
            }
        }
    }
}

#[test]
fn the_request_line_and_host_are_each_methods_bytes() {
    // Each method, the three spelled as constants and others, against the
    // line spelled out here (RFC 9112 §3: `method SP request-target SP
    // HTTP-version CRLF`; RFC 9110 §7.2: Host first, empty allowed),
    // after what the buffer held, with and without room to spare.
    for method in [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "M-SEARCH", "GETX", "G", "GE", "HEADS", "POS",
    ] {
        for host in ["", "h", "example.com:8080", "[::1]:80"] {
            for room in [0, 256] {
                let mut out = Vec::with_capacity(room);
                out.extend_from_slice(b"x");
                request_line_and_host(&mut out, method, "/a?b", host.as_bytes());
                let sp = if host.is_empty() { "" } else { " " };
                let want = format!("x{method} /a?b HTTP/1.1\r\nHost:{sp}{host}\r\n");
                assert_eq!(String::from_utf8(out).unwrap(), want, "{method} {host:?}");
            }
        }
    }
}
