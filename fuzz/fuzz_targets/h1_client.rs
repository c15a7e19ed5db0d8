//! The client role on arbitrary bytes. As an upstream's answer: the
//! response head parser never panics, a prefix of the input parses as
//! `Partial` or as the whole does (so how reads split the bytes never
//! changes the answer), a complete head stays within the limit and ends
//! every line in CRLF, and its body decodes the same in two pieces as
//! whole, trailer section included: that is within its limit, and what
//! the proxy relays of it is well-formed lines of allowed fields; the
//! plain response parser and httparse alone agree
//! (`peregrine::fuzzing::response_head_plain`), and so do the proxy's
//! one-pass relay and the general one (`relay_plain_agrees`), whose
//! fields are lines a header block takes, obs-text and all
//! (`relayed_answer_fields`). As a caller's fields: a request head
//! either is refused or has every line ended by CRLF, no NUL, and one
//! empty line, its last.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use peregrine::codec::client::{
    parse_response_head, write_request_head, ParsedResponse, ResponseBodyDecoder, ResponseBodyError, ResponseError,
    ResponseFraming, RESPONSE_HEAD_BYTES_MAX, RESPONSE_TRAILER_BYTES_MAX,
};
use peregrine::codec::Framing;

/// What a parse said, comparable across parses.
type Summary = Result<Option<(u16, ResponseFraming, bool, usize, usize)>, ResponseError>;

fn parse(input: &[u8], method: &str) -> Summary {
    let mut headers = [const { MaybeUninit::uninit() }; 16];
    match parse_response_head(input, &mut headers, method)? {
        ParsedResponse::Complete(h) => {
            let bytes = &input[..h.head_len];
            for (i, &b) in bytes.iter().enumerate() {
                assert!(
                    b != b'\n' || (i > 0 && bytes[i - 1] == b'\r'),
                    "bare LF accepted at {i}"
                );
            }
            assert!(h.head_len <= RESPONSE_HEAD_BYTES_MAX);
            assert!((100..=999).contains(&h.status));
            if let ResponseFraming::Length(n) = h.framing {
                assert!(n > 0);
            }
            if matches!(
                h.framing,
                ResponseFraming::Close | ResponseFraming::Upgrade | ResponseFraming::Tunnel
            ) {
                assert!(!h.keep_alive);
            }
            Ok(Some((h.status, h.framing, h.keep_alive, h.head_len, h.headers.len())))
        }
        ParsedResponse::Partial => Ok(None),
    }
}

/// What a body decoded to: its data, the bytes consumed, whether it
/// ended well at the input's end, and its trailer section.
type Decoded = (Vec<u8>, usize, bool, Option<Vec<u8>>);

/// The body after a head, fed in pieces split at `at`.
fn body(input: &[u8], framing: ResponseFraming, at: usize) -> Result<Decoded, ResponseBodyError> {
    let Some(mut dec) = ResponseBodyDecoder::new(framing, 1 << 16) else {
        return Ok((Vec::new(), 0, true, None));
    };
    let mut data = Vec::new();
    let mut consumed = 0;
    for piece in [&input[..at], &input[at..]] {
        let mut rest = piece;
        while !rest.is_empty() && !dec.is_done() {
            let step = dec.step(rest)?;
            assert!(step.consumed > 0 || step.done);
            data.extend_from_slice(&rest[step.data.clone()]);
            consumed += step.consumed;
            rest = &rest[step.consumed..];
        }
    }
    let ended = dec.finish().is_ok();
    let trailers = dec.take_trailers();
    if let Some(t) = &trailers {
        assert!(framing == ResponseFraming::Chunked && dec.is_done());
        assert!(t.len() <= RESPONSE_TRAILER_BYTES_MAX, "{} bytes", t.len());
        assert!(t.ends_with(b"\r\n"));
        peregrine::fuzzing::relayed_trailers(t);
    }
    Ok((data, consumed, ended, trailers))
}

fn request_head(input: &[u8], seed: u8) {
    // Fields from the input's lines, split at their first colon.
    let fields: Vec<(&[u8], &[u8])> = input
        .split(|&b| b == b'|')
        .map(|line| match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], &line[colon + 1..]),
            None => (line, &b""[..]),
        })
        .collect();
    let framing = match seed % 3 {
        0 => Framing::Empty,
        1 => Framing::Length(u64::from(seed)),
        _ => Framing::Chunked,
    };
    let target = String::from_utf8_lossy(fields.first().map_or(&b"/"[..], |f| f.1));
    let mut out = b"x".to_vec();
    if write_request_head(
        &mut out,
        "POST",
        &target,
        "example.com",
        fields.iter().copied(),
        framing,
    )
    .is_err()
    {
        assert_eq!(out, b"x");
        return;
    }
    let head = &out[1..];
    assert!(head.ends_with(b"\r\n\r\n"));
    for (i, &b) in head.iter().enumerate() {
        assert!(b != 0);
        assert!(b != b'\n' || (i > 0 && head[i - 1] == b'\r'), "bare LF at {i}");
        assert!(b != b'\r' || head.get(i + 1) == Some(&b'\n'), "bare CR at {i}");
    }
    let empty_line = head.windows(4).position(|w| w == b"\r\n\r\n");
    assert_eq!(empty_line, Some(head.len() - 4), "an empty line inside the head");
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    if seed & 0x80 != 0 {
        request_head(input, seed);
        return;
    }
    // The plain parser and httparse alone give the same answer.
    peregrine::fuzzing::response_head_plain(input);
    // The proxy's one-pass relay takes only what the general parser and
    // relay take, and relays the same lines.
    peregrine::fuzzing::relay_plain_agrees(input);
    // What it relays of any head is lines a header block takes, obs-text
    // and all.
    peregrine::fuzzing::relayed_answer_fields(input);
    let method = ["GET", "HEAD", "CONNECT", "POST"][usize::from(seed & 3)];
    let at = usize::from(seed >> 2) * input.len() / 31;
    let whole = parse(input, method);
    let prefix = parse(&input[..at], method);
    match &whole {
        Ok(Some(h)) if at < h.3 => assert_eq!(prefix, Ok(None), "split at {at}"),
        Ok(Some(_)) => assert_eq!(prefix, whole, "split at {at}"),
        Ok(None) => assert_eq!(prefix, Ok(None), "split at {at}"),
        Err(_) => assert!(
            prefix == Ok(None) || prefix == whole,
            "split at {at}: {prefix:?} vs {whole:?}"
        ),
    }
    if let Ok(Some((_, framing, _, head_len, _))) = whole {
        let rest = &input[head_len..];
        let one = body(rest, framing, rest.len());
        let two = body(rest, framing, at.min(rest.len()));
        assert_eq!(one, two);
    }
});
