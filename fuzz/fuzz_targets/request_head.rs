//! The request head parser on arbitrary bytes: never panics, and a complete
//! head is consistent with the bytes it came from, ends every line in CRLF,
//! and has a registered method; the plain parser and httparse give the
//! same answer (`peregrine::fuzzing::request_head_plain`).
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use peregrine::codec::{parse_head, Framing, Parsed};
use peregrine::Limits;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::request_head_plain(data);
    let limits = Limits {
        uri_bytes_max: 512,
        head_bytes_max: 2048,
        n_headers_max: 16,
        body_bytes_max: 4096,
        ..Limits::default()
    };
    let mut headers = [const { MaybeUninit::uninit() }; 32];
    if let Ok(Parsed::Complete(head)) = parse_head(data, &mut headers, &limits) {
        assert!(head.head_len <= data.len());
        assert!(head.head_len <= limits.head_bytes_max);
        assert!(head.target.len() <= limits.uri_bytes_max);
        assert!(head.headers.len() <= limits.n_headers_max);
        if let Framing::Length(n) = head.framing {
            assert!(n > 0 && n <= limits.body_bytes_max);
        }
        // Every line of an accepted head ends in CRLF: a bare LF would let
        // a proxy in front frame it differently (smuggling).
        let bytes = &data[..head.head_len];
        for (i, &b) in bytes.iter().enumerate() {
            assert!(
                b != b'\n' || (i > 0 && bytes[i - 1] == b'\r'),
                "bare LF accepted at {i}"
            );
        }
        // A method that reaches a handler is a token (RFC 9110 §9.1: a
        // proxy route forwards PURGE or BAN), never CONNECT; one marked
        // registered is one of IANA's (capitals and '-').
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        assert!(head.method != "CONNECT" && !head.method.is_empty() && head.method.bytes().all(tchar));
        if head.method_registered {
            assert!(head.method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-'));
        }
        // Parsing a prefix never yields a different complete head.
        let mut again = [const { MaybeUninit::uninit() }; 32];
        match parse_head(&data[..head.head_len], &mut again, &limits) {
            Ok(Parsed::Complete(h)) => assert_eq!(h.head_len, head.head_len),
            other => panic!("head not complete on its own bytes: {other:?}"),
        }
    }
});
