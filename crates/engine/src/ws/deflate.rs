//! permessage-deflate (RFC 7692): the offer a client makes in
//! `Sec-WebSocket-Extensions`, what the server answers, and the per-worker
//! compressor and decompressor that every WebSocket of the worker shares.
//!
//! zlib keeps hundreds of KiB per stream (a deflate stream with a 32 KiB
//! window and zlib's default memory level: about 270 KiB; an inflate
//! stream: 7 KiB and its 32 KiB window). Kept per connection, that is
//! what 10,000 idle WebSockets would cost. So, as uWebSockets does with
//! its `SHARED_COMPRESSOR` and `SHARED_DECOMPRESSOR`, no connection keeps
//! a stream: the server always answers with `server_no_context_takeover`
//! and `client_no_context_takeover` (RFC 7692 §7.1.1.1 and §7.1.1.2 let a
//! server add both to any offer it accepts), each message is compressed
//! and inflated whole by the worker's one stream, reset between messages,
//! and an idle WebSocket with compression costs what one without does.
//!
//! Bounds: a message is inflated into its session's buffer, which may
//! grow to the route's `message_bytes_max` and no further: a message that
//! inflates past it (a deflate bomb: 1 MiB of zeros is 1 KiB compressed)
//! fails the connection with 1009 once that many bytes are out, whatever
//! the rest would have been. The compressed bytes of a message that comes
//! in pieces are held until it is whole (a shared stream cannot keep one
//! client's half message while it inflates another's), within the same
//! bound and the worker's body budget.

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::frame::{self, Op};

/// What was agreed for one WebSocket: the window its messages are
/// compressed with, and whether the client asked for that window (then
/// the answer names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// `server_max_window_bits`: 9 to 15.
    pub(crate) window_bits: u8,
    /// The offer named `server_max_window_bits`: the answer must too.
    pub(crate) window_asked: bool,
}

/// The window the server compresses with when the client sets none:
/// zlib's largest, since the stream is the worker's, not the
/// connection's (its memory does not grow with the connections).
const WINDOW_BITS_DEFAULT: u8 = 15;

/// The smallest window a raw deflate stream can be made with (zlib
/// refuses 8 for raw streams): an offer asking for 8 is declined.
const WINDOW_BITS_MIN: u8 = 9;

/// Messages shorter than this go uncompressed: deflate's block header
/// and Huffman tables cost more than such a message can save.
pub(crate) const COMPRESS_BYTES_MIN: usize = 32;

/// The 4 bytes every message's compressed form ends with before the
/// sender removes them (RFC 7692 §7.2.1: an empty stored block, what a
/// sync flush writes); the receiver puts them back (§7.2.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// What the worker's shared streams hold at most: the compressors (one
/// per window asked for, 9 to 15 bits, made when first needed; 15 bits
/// with the decompressor and a first message's buffers measured 418 KiB,
/// `tests/ws_memory.rs`), the decompressor, and the spare message buffer.
/// For `Limits::worst_case_bytes_per_worker`.
pub(crate) const SHARED_BYTES_MAX: usize = 7 * 400 * 1024 + 64 * 1024 + SPARE_BYTES_MAX;

/// The largest message buffer the worker keeps between messages for the
/// next compressed one (`take_buffer`).
const SPARE_BYTES_MAX: usize = 64 * 1024;

/// Reads the client's `Sec-WebSocket-Extensions` offers (`values`, each
/// field's value) and picks the first permessage-deflate offer the server
/// can take (RFC 7692 §5: an offer with a parameter unknown, repeated or
/// out of range is declined, not the handshake). `None`: no compression.
pub(crate) fn negotiate<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Params> {
    values.flat_map(|v| v.split(|&b| b == b',')).find_map(|offer| {
        let mut parts = offer.split(|&b| b == b';');
        let name = parts.next()?.trim_ascii();
        if !name.eq_ignore_ascii_case(b"permessage-deflate") {
            return None;
        }
        accept(parts)
    })
}

/// One permessage-deflate offer's parameters, accepted or not.
fn accept<'a>(params: impl Iterator<Item = &'a [u8]>) -> Option<Params> {
    let (mut server_nct, mut client_nct, mut client_bits) = (false, false, false);
    let mut server_bits: Option<u8> = None;
    for param in params {
        let (name, value) = match param.iter().position(|&b| b == b'=') {
            Some(i) => (param[..i].trim_ascii(), Some(unquote(param[i + 1..].trim_ascii())?)),
            None => (param.trim_ascii(), None),
        };
        let seen = match name.to_ascii_lowercase().as_slice() {
            b"server_no_context_takeover" if value.is_none() => std::mem::replace(&mut server_nct, true),
            b"client_no_context_takeover" if value.is_none() => std::mem::replace(&mut client_nct, true),
            b"server_max_window_bits" => server_bits.replace(window_bits(value?)?).is_some(),
            b"client_max_window_bits" => {
                if let Some(v) = value {
                    window_bits(v)?;
                }
                std::mem::replace(&mut client_bits, true)
            }
            _ => return None,
        };
        if seen {
            return None;
        }
    }
    // The client's window is its own business: it takes no context over,
    // so what it compresses with costs the server one shared window.
    match server_bits {
        Some(bits) if bits < WINDOW_BITS_MIN => None,
        Some(bits) => Some(Params {
            window_bits: bits,
            window_asked: true,
        }),
        None => Some(Params {
            window_bits: WINDOW_BITS_DEFAULT,
            window_asked: false,
        }),
    }
}

/// A parameter's value without its quotes (RFC 7692 §5.1 allows a
/// quoted string whose content is a token).
fn unquote(v: &[u8]) -> Option<&[u8]> {
    match v {
        [b'"', inner @ .., b'"'] => Some(inner),
        [b'"', ..] | [.., b'"'] => None,
        _ => Some(v),
    }
}

/// A window size in bits: 8 to 15, one or two digits, no leading zero
/// (RFC 7692 §7.1.2.1).
fn window_bits(v: &[u8]) -> Option<u8> {
    match v {
        [d @ b'8'..=b'9'] => Some(d - b'0'),
        [b'1', d @ b'0'..=b'5'] => Some(10 + d - b'0'),
        _ => None,
    }
}

/// The answer's `Sec-WebSocket-Extensions` value for `params`.
pub(crate) fn response(params: Params) -> String {
    let mut v = String::from("permessage-deflate; server_no_context_takeover; client_no_context_takeover");
    if params.window_asked {
        v.push_str("; server_max_window_bits=");
        v.push_str(itoa::Buffer::new().format(params.window_bits));
    }
    v
}

/// The worker's streams: one compressor per window size asked for, one
/// decompressor (a client's window is at most 15 bits).
struct Shared {
    compressors: [Option<Compress>; 7],
    decompressor: Option<Decompress>,
}

thread_local! {
    static SHARED: RefCell<Shared> = const {
        RefCell::new(Shared {
            compressors: [None, None, None, None, None, None, None],
            decompressor: None,
        })
    };
    /// A message buffer given back by a WebSocket gone idle, for the next
    /// compressed message (which, unlike a whole plain frame, cannot be
    /// handed out where it lies), so a warm worker allocates none.
    static SPARE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The worker's spare message buffer (empty), or a new one.
pub(crate) fn take_buffer() -> Vec<u8> {
    SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// A message buffer no longer needed: kept as the worker's spare if it
/// is not too large and larger than the one kept.
pub(crate) fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > SPARE_BYTES_MAX {
        return;
    }
    buf.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.capacity() < buf.capacity() {
            *s = buf;
        }
    });
}

/// Frames `payload` as one message into `out`: compressed (RSV1 set) by
/// the worker's stream if that makes it shorter, as it is otherwise.
pub(crate) fn write_message(out: &mut Vec<u8>, op: Op, payload: &[u8], params: Params) {
    if payload.len() < COMPRESS_BYTES_MIN {
        frame::write(out, op, payload);
        return;
    }
    // The head's room is kept at its longest, the compressed bytes
    // written after it, then moved back once their length is known.
    let start = out.len();
    out.resize(start + frame::HEAD_BYTES_MAX, 0);
    let body = out.len();
    let compressed = SHARED.with(|shared| {
        let mut shared = shared.borrow_mut();
        let bits = params.window_bits.clamp(WINDOW_BITS_MIN, 15);
        let c = shared.compressors[usize::from(bits - WINDOW_BITS_MIN)]
            .get_or_insert_with(|| Compress::new_with_window_bits(Compression::fast(), false, bits));
        c.reset();
        compress(c, payload, out)
    });
    let len = out.len() - body;
    if !compressed || len >= payload.len() {
        out.truncate(start);
        frame::write(out, op, payload);
        return;
    }
    let (head, n) = frame::head_rsv1(op, len);
    let at = body - n;
    out[at..body].copy_from_slice(&head[..n]);
    out.copy_within(at.., start);
    out.truncate(start + n + len);
}

/// Compresses `input` whole after `out`'s bytes, with the sync flush's
/// empty block removed. False if the stream failed (the message then
/// goes uncompressed).
fn compress(c: &mut Compress, input: &[u8], out: &mut Vec<u8>) -> bool {
    let before = out.len();
    // Deflate's worst case is a few bytes per 16 KiB stored block.
    out.reserve(input.len() + input.len() / 64 + 64);
    let start_in = c.total_in();
    loop {
        if out.len() == out.capacity() {
            out.reserve(input.len() / 8 + 64);
        }
        let read = (c.total_in() - start_in) as usize;
        if c.compress_vec(&input[read..], out, FlushCompress::Sync).is_err() {
            out.truncate(before);
            return false;
        }
        // zlib's rule: a flush is done when it left room in the output.
        let read = (c.total_in() - start_in) as usize;
        if read == input.len() && out.len() < out.capacity() {
            break;
        }
    }
    if out.len() < before + TAIL.len() || out[out.len() - TAIL.len()..] != TAIL {
        out.truncate(before);
        return false;
    }
    out.truncate(out.len() - TAIL.len());
    true
}

/// Why a message could not be inflated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InflateError {
    /// It inflates past the limit given.
    TooLarge,
    /// It is not a raw deflate stream.
    Invalid,
}

/// Inflates one whole message's compressed bytes (`input`, without the
/// tail) into `out`, which is cleared first and never grows past `limit`
/// + 1 bytes.
pub(crate) fn inflate(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), InflateError> {
    out.clear();
    SHARED.with(|shared| {
        let mut shared = shared.borrow_mut();
        let d = shared.decompressor.get_or_insert_with(|| Decompress::new(false));
        d.reset(false);
        let r = inflate_part(d, input, out, limit).and_then(|()| inflate_part(d, &TAIL, out, limit));
        // The stream keeps nothing of this client between messages.
        d.reset(false);
        r
    })
}

/// Feeds `input` to `d`, the output into `out` within `limit` + 1 bytes.
fn inflate_part(d: &mut Decompress, input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), InflateError> {
    let start_in = d.total_in();
    loop {
        if out.len() == out.capacity() {
            // Double, from 4 KiB, up to the limit and one byte past it
            // (that byte says the message is too large).
            let want = (out.capacity() * 2).max(4096).max(input.len()).min(limit + 1);
            out.reserve_exact(want - out.len());
        }
        let (read, written) = ((d.total_in() - start_in) as usize, out.len());
        let status = d
            .decompress_vec(&input[read..], out, FlushDecompress::Sync)
            .map_err(|_| InflateError::Invalid)?;
        if out.len() > limit {
            return Err(InflateError::TooLarge);
        }
        if status == Status::StreamEnd {
            // A final block ended the stream; nothing after it is this
            // message's (the stream is reset before the next).
            return Ok(());
        }
        let read_all = (d.total_in() - start_in) as usize == input.len();
        // Inflate stops early only when the output is full.
        if read_all && out.len() < out.capacity() {
            return Ok(());
        }
        let moved = d.total_in() - start_in != read as u64 || out.len() != written;
        if !moved && out.len() < out.capacity() {
            return Err(InflateError::Invalid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(s: &str) -> Option<Params> {
        negotiate(std::iter::once(s.as_bytes()))
    }

    #[test]
    fn offers_are_accepted_or_declined_by_rfc_7692s_rules() {
        let default = Params {
            window_bits: 15,
            window_asked: false,
        };
        let asked = |bits| Params {
            window_bits: bits,
            window_asked: true,
        };
        for (value, want) in [
            ("permessage-deflate", Some(default)),
            ("PerMessage-Deflate ; client_max_window_bits", Some(default)),
            ("permessage-deflate; client_max_window_bits=10", Some(default)),
            (
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
                Some(default),
            ),
            ("permessage-deflate; server_max_window_bits=9", Some(asked(9))),
            ("permessage-deflate; server_max_window_bits=\"12\"", Some(asked(12))),
            ("permessage-deflate; server_max_window_bits=15", Some(asked(15))),
            // zlib has no raw stream with a 256-byte window.
            ("permessage-deflate; server_max_window_bits=8", None),
            ("permessage-deflate; server_max_window_bits", None),
            ("permessage-deflate; server_max_window_bits=16", None),
            ("permessage-deflate; server_max_window_bits=09", None),
            ("permessage-deflate; client_max_window_bits=7", None),
            ("permessage-deflate; server_no_context_takeover=1", None),
            (
                "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
                None,
            ),
            ("permessage-deflate; unknown", None),
            ("x-webkit-deflate-frame", None),
            ("", None),
            // The first offer the server takes wins.
            (
                "permessage-deflate; server_max_window_bits=8, permessage-deflate; server_max_window_bits=10",
                Some(asked(10)),
            ),
            ("foo, permessage-deflate", Some(default)),
        ] {
            assert_eq!(offer(value), want, "{value:?}");
        }
        assert_eq!(
            response(asked(10)),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10"
        );
    }

    /// What a client sends: `payload` compressed by another stream, the
    /// tail removed.
    fn client_compress(payload: &[u8], bits: u8) -> Vec<u8> {
        let mut c = Compress::new_with_window_bits(Compression::default(), false, bits);
        let mut out = Vec::with_capacity(payload.len() + 1024);
        c.compress_vec(payload, &mut out, FlushCompress::Sync).unwrap();
        assert_eq!(out[out.len() - 4..], TAIL);
        out.truncate(out.len() - 4);
        out
    }

    #[test]
    fn a_message_compressed_by_the_server_inflates_to_itself() {
        let text: Vec<u8> = b"The quick brown fox jumps over the lazy dog. ".repeat(500);
        // xorshift64: bytes deflate cannot shrink.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let random: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        for bits in [9u8, 12, 15] {
            let params = Params {
                window_bits: bits,
                window_asked: true,
            };
            for payload in [&text[..], &random[..], &text[..40], &[7u8; 200_000][..]] {
                let mut out = b"xy".to_vec();
                write_message(&mut out, Op::Text, payload, params);
                assert_eq!(&out[..2], b"xy");
                let framed = &out[2..];
                let compressed = framed[0] & 0x40 != 0;
                let len = match framed[1] {
                    126 => u16::from_be_bytes([framed[2], framed[3]]) as usize,
                    127 => u64::from_be_bytes(framed[2..10].try_into().unwrap()) as usize,
                    n => n as usize,
                };
                let body = &framed[framed.len() - len..];
                assert_eq!(framed.len(), frame::head_len(len) + len, "bits {bits}");
                if compressed {
                    let mut back = Vec::new();
                    inflate(body, &mut back, 1 << 20).unwrap();
                    assert_eq!(back, payload, "bits {bits}");
                    // The window asked for was kept: a stream of that
                    // window inflates it.
                    let mut d = Decompress::new_with_window_bits(false, bits);
                    let mut back = Vec::with_capacity(payload.len() + 16);
                    d.decompress_vec(&[body, &TAIL[..]].concat(), &mut back, FlushDecompress::Sync)
                        .unwrap();
                    assert_eq!(back, payload, "bits {bits}");
                } else {
                    assert_eq!(body, payload);
                }
            }
            let mut out = Vec::new();
            write_message(&mut out, Op::Binary, &random, params);
            assert_eq!(out[0] & 0x40, 0, "random bytes go uncompressed");
            let mut out = Vec::new();
            write_message(&mut out, Op::Text, &text, params);
            assert!(
                out[0] & 0x40 != 0 && out.len() < text.len() / 4,
                "text shrinks: {} bytes, {:#x}, bits {bits}",
                out.len(),
                out[0]
            );
        }
    }

    #[test]
    fn inflating_stops_at_the_limit_whatever_the_stream_would_give() {
        let zeros = vec![0u8; 4 << 20];
        let bomb = client_compress(&zeros, 15);
        assert!(bomb.len() < 8 * 1024, "{}", bomb.len());
        let mut out = Vec::new();
        assert_eq!(inflate(&bomb, &mut out, 1 << 20), Err(InflateError::TooLarge));
        assert!(out.capacity() <= (1 << 20) + 1, "{}", out.capacity());
        // The limit itself is allowed.
        let exact = client_compress(&zeros[..1 << 20], 15);
        inflate(&exact, &mut out, 1 << 20).unwrap();
        assert_eq!(out.len(), 1 << 20);
        // The shared stream was reset: the next message inflates.
        let hello = client_compress(b"hello hello hello", 10);
        inflate(&hello, &mut out, 100).unwrap();
        assert_eq!(out, b"hello hello hello");
        assert_eq!(inflate(b"\xff\xff\xff", &mut out, 100), Err(InflateError::Invalid));
        inflate(&hello, &mut out, 100).unwrap();
        assert_eq!(out, b"hello hello hello");
        // An empty message: no bytes, or the one byte RFC 7692 §7.2.3.6
        // shows.
        inflate(b"", &mut out, 100).unwrap();
        assert!(out.is_empty());
        inflate(b"\x00", &mut out, 100).unwrap();
        assert!(out.is_empty());
    }
}
