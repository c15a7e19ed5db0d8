//! Compression of proxied answers on the fly (Caddy's `encode`, nginx's
//! `gzip on` for proxied content): which answers are compressed, how
//! their fields change, and the per-stream compressors.
//!
//! A route opts in ([`Proxy::encode`](super::Proxy::encode)); off by
//! default, as in Caddy (no `encode`, no compression) and nginx (`gzip
//! off`). The handler negotiates the coding from the client's
//! `Accept-Encoding` ([`plan`]) and the pool decides when the upstream's
//! head is read ([`decide`]): an answer is compressed when it has a body
//! (not 1xx, 204, 304, nor a HEAD's), is not partial (206,
//! `Content-Range`), carries no `Content-Encoding` field (not even
//! `identity`: nginx's `gzip` leaves any such answer alone, and ours
//! beside it would read `identity, gzip`), its `Content-Type` is one the file server compresses
//! (`text/*`, JSON, XML, JavaScript, wasm, icons, uncompressed fonts),
//! its `Cache-Control` does not say `no-transform` (RFC 9110 §7.7), its
//! `Content-Length`, when it has one, is at least [`Encode::min_bytes`],
//! and it sets no cookie unless the route allows that (BREACH: a secret
//! compressed beside what an attacker reflects leaks through the length).
//! Such an answer gets `Vary: Accept-Encoding` whether or not this client
//! accepted a coding (a cache must not give the identity answer to
//! another client, nor the reverse); a compressed one loses its
//! `Content-Length` (the engine frames it: chunked over HTTP/1.1) and
//! `Accept-Ranges`, and its strong `ETag` becomes weak (`W/"..."`), as
//! nginx's gzip filter does: the bytes differ from the upstream's, and a
//! conditional request still matches at the upstream (If-None-Match
//! compares weakly).
//!
//! Streaming: what one read from the upstream brought is compressed and
//! flushed (gzip's sync flush, zstd's `ZSTD_e_flush`) as one chunk, so
//! Server-Sent Events still arrive event by event; the end of the body
//! ends the stream.
//!
//! Codings: zstd and gzip. Not brotli: its streaming encoder held 832 KB
//! at quality 3 (838 KB at 2, 1.6 MB at 4; a 64 KiB window) and
//! compressed text less than gzip at level 5 did, measured on the same
//! 256 KiB of text; `pack` and `serve DIR` still serve brotli files made
//! ahead of time.
//!
//! Memory: a compressing stream holds its compressor, bounded by small
//! windows and levels: gzip level 5 with zlib's 32 KiB window (380,032
//! bytes held, zlib-rs on the Rust heap), zstd level 3 with a 32 KiB
//! window and 8 Ki-entry tables (312,521 bytes, `ZSTD_sizeof_CCtx`), so
//! at most [`ENCODER_BYTES_MAX`] each; and a worker compresses at most
//! [`STREAMS_MAX`] answers at once: past that, answers go uncompressed
//! (still with `Vary`), which is always a valid answer. The chunks a
//! compressed answer queues are counted by length in its channel like
//! any other (`proxy_buffer_bytes`).

use std::cell::Cell;
use std::io;

use flate2::{Compress, Compression, FlushCompress, Status};
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

use crate::codec::accept;
use crate::codec::client::ResponseHead;
use crate::codec::head::{list_elements, trim_ows};

/// A compressing stream's memory at most, measured after 64 KiB reads,
/// each flushed: gzip 380,032 bytes (a counting allocator), zstd 312,521
/// (`ZSTD_sizeof_CCtx`: its own `malloc`'s); rounded up.
pub const ENCODER_BYTES_MAX: usize = 384 * 1024;

/// Answers a worker compresses at once at most: with
/// [`ENCODER_BYTES_MAX`], 12 MiB of compressors per worker at worst.
pub const STREAMS_MAX: usize = 32;

/// Whether answers of at least this many bytes (when the upstream says
/// its length) are compressed: Caddy's `minimum_length` default.
pub const MIN_BYTES_DEFAULT: u64 = 512;

const GZIP_LEVEL: u32 = 5;
const GZIP_WINDOW_BITS: u8 = 15;
const ZSTD_LEVEL: i32 = 3;
const ZSTD_WINDOW_LOG: u32 = 15;
const ZSTD_TABLE_LOG: u32 = 13;

thread_local! {
    /// This worker's compressing streams (`Encoder`s alive).
    static STREAMS: Cell<usize> = const { Cell::new(0) };
}

/// A proxy route's compression settings ([`super::Proxy::encode`]).
#[derive(Clone, Debug)]
pub struct Encode {
    min_bytes: u64,
    set_cookie: bool,
}

impl Default for Encode {
    fn default() -> Self {
        Encode::new()
    }
}

impl Encode {
    /// zstd and gzip, the client's preference first (ties: zstd), answers of at least [`MIN_BYTES_DEFAULT`] bytes, none that
    /// sets a cookie.
    pub fn new() -> Encode {
        Encode {
            min_bytes: MIN_BYTES_DEFAULT,
            set_cookie: false,
        }
    }

    /// Answers whose Content-Length is below `n` go uncompressed (those
    /// of unknown length are compressed).
    pub fn min_bytes(mut self, n: u64) -> Encode {
        self.min_bytes = n;
        self
    }

    /// Compresses answers that carry `Set-Cookie` too (off by default:
    /// BREACH).
    pub fn set_cookie(mut self, on: bool) -> Encode {
        self.set_cookie = on;
        self
    }

    /// The minimum length compressed.
    pub fn min_len(&self) -> u64 {
        self.min_bytes
    }

    /// Whether answers with `Set-Cookie` are compressed.
    pub fn compresses_set_cookie(&self) -> bool {
        self.set_cookie
    }
}

/// A content coding the proxy compresses with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coding {
    Zstd,
    Gzip,
}

impl Coding {
    /// Ties go to the first: the smallest output for the CPU spent.
    const ALL: [Coding; 2] = [Coding::Zstd, Coding::Gzip];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The coding's index in [`accept::Weights`].
    fn index(self) -> usize {
        match self {
            Coding::Zstd => accept::ZSTD,
            Coding::Gzip => accept::GZIP,
        }
    }
}

/// What a request's answer may become: the coding the client accepts
/// (`None`: identity, but a compressible answer still gets `Vary`), and
/// the route's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) coding: Option<Coding>,
    min_bytes: u64,
    set_cookie: bool,
}

/// The plan for a request with `Accept-Encoding` `accept` on a route with
/// `encode`.
pub(crate) fn plan(encode: &Encode, accept: Option<&[u8]>) -> Plan {
    Plan {
        coding: negotiate(accept),
        min_bytes: encode.min_bytes,
        set_cookie: encode.set_cookie,
    }
}

/// The coding for an `Accept-Encoding` value (RFC 9110 §12.5.3, read by
/// [`accept::weights`], as the files crate reads it for pre-compressed
/// siblings): the highest q-value among those the proxy has, ties in
/// [`Coding::ALL`]'s order; `*` gives its q-value to those not named; q=0
/// is never chosen. `None`: identity (absent field, or nothing
/// acceptable).
pub(crate) fn negotiate(accept: Option<&[u8]>) -> Option<Coding> {
    let weights = accept::weights(accept);
    let mut best: Option<(u16, Coding)> = None;
    for coding in Coding::ALL {
        let q = weights.q(coding.index());
        if q > 0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, coding));
        }
    }
    best.map(|(_, c)| c)
}

/// What becomes of one answer: `vary` (it is compressible: `Vary:
/// Accept-Encoding`), and the coding it is compressed with, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) vary: bool,
    pub(crate) coding: Option<Coding>,
}

/// Decides for an answer's head (see the module's documentation);
/// `head_method`: the request was HEAD (its answer's fields change as the
/// GET's would, and it has no body to compress).
pub(crate) fn decide(plan: Option<&Plan>, head: &ResponseHead<'_, '_>) -> Verdict {
    let Some(plan) = plan else { return Verdict::default() };
    if matches!(head.status, 100..=199 | 204 | 206 | 304) {
        return Verdict::default();
    }
    let mut typed = false;
    for h in head.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim_ows(h.value);
        if name.eq_ignore_ascii_case(b"content-encoding") {
            // Any Content-Encoding field, `identity` too (nginx's `gzip`
            // and Caddy's `encode` leave such answers alone): one kept
            // beside ours would say `identity, gzip`.
            return Verdict::default();
        } else if name.eq_ignore_ascii_case(b"content-range") {
            return Verdict::default();
        } else if name.eq_ignore_ascii_case(b"cache-control") {
            if list_elements(value).any(|d| d.eq_ignore_ascii_case(b"no-transform")) {
                return Verdict::default();
            }
        } else if name.eq_ignore_ascii_case(b"set-cookie") {
            if !plan.set_cookie {
                return Verdict::default();
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok());
            if n.is_some_and(|n| n < plan.min_bytes) {
                return Verdict::default();
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            typed = std::str::from_utf8(value).is_ok_and(|t| compressible(&t.trim().to_ascii_lowercase()));
        }
    }
    if !typed {
        return Verdict::default();
    }
    Verdict {
        vary: true,
        coding: plan.coding,
    }
}

/// Whether a content type is worth compressing: the file server's list
/// (`peregrine_files::compress::compressible`), kept alike, less gRPC
/// and gRPC-Web (`application/grpc-web+json` would match `+json`): their
/// bodies are length-prefixed frames the client reads itself, gRPC-Web
/// clients outside browsers do not all decode `Content-Encoding`, and
/// gRPC compresses per message (`grpc-encoding`) already. Caddy's default
/// `encode` types and nginx's `gzip_types` leave them alone too.
pub(crate) fn compressible(content_type: &str) -> bool {
    let t = content_type.split(';').next().unwrap_or_default().trim();
    if t.starts_with("application/grpc") {
        return false;
    }
    t.starts_with("text/")
        || t.ends_with("+json")
        || t.ends_with("+xml")
        || matches!(
            t,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/wasm"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "application/vnd.ms-fontobject"
                | "font/ttf"
                | "font/otf"
        )
}

/// Whether a relayed field is left out of a compressed answer:
/// `Accept-Ranges` (a range of the compressed bytes is not offered).
pub(crate) fn drops(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"accept-ranges")
}

/// Writes an `ETag` value as a compressed answer carries it: weak.
pub(crate) fn push_etag(lines: &mut Vec<u8>, value: &[u8]) {
    if !value.starts_with(b"W/") && !value.starts_with(b"w/") {
        lines.extend_from_slice(b"W/");
    }
    lines.extend_from_slice(value);
}

/// The fields the verdict adds after the relayed ones.
pub(crate) fn push_fields(lines: &mut Vec<u8>, head: &ResponseHead<'_, '_>, verdict: Verdict) {
    if !verdict.vary {
        // Not compressible (or no `encode`): nothing to add, and no pass
        // over the fields.
        return;
    }
    if let Some(coding) = verdict.coding {
        lines.extend_from_slice(b"Content-Encoding: ");
        lines.extend_from_slice(coding.name().as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    let varies = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("vary"))
        .flat_map(|h| list_elements(h.value))
        .any(|v| v == b"*" || v.eq_ignore_ascii_case(b"accept-encoding"));
    if !varies {
        lines.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
}

/// One answer's compressor. Holds one of the worker's [`STREAMS_MAX`]
/// places while it lives.
pub(crate) struct Encoder {
    kind: Kind,
}

enum Kind {
    Gzip(Box<Compress>),
    Zstd(CCtx<'static>),
}

impl Drop for Encoder {
    fn drop(&mut self) {
        STREAMS.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

fn zstd_error(code: usize) -> io::Error {
    io::Error::other(zstd_safe::get_error_name(code))
}

impl Encoder {
    /// A compressor for `coding`, or `None` when the worker compresses
    /// [`STREAMS_MAX`] answers already (or zstd could not make one).
    pub(crate) fn new(coding: Coding) -> Option<Encoder> {
        if STREAMS.with(Cell::get) >= STREAMS_MAX {
            return None;
        }
        let kind = match coding {
            Coding::Gzip => Kind::Gzip(Box::new(Compress::new_gzip(
                Compression::new(GZIP_LEVEL),
                GZIP_WINDOW_BITS,
            ))),
            Coding::Zstd => {
                let mut c = CCtx::try_create()?;
                for p in [
                    CParameter::CompressionLevel(ZSTD_LEVEL),
                    CParameter::WindowLog(ZSTD_WINDOW_LOG),
                    CParameter::HashLog(ZSTD_TABLE_LOG),
                    CParameter::ChainLog(ZSTD_TABLE_LOG),
                    CParameter::ChecksumFlag(false),
                ] {
                    c.set_parameter(p).ok()?;
                }
                Kind::Zstd(c)
            }
        };
        STREAMS.with(|n| n.set(n.get() + 1));
        Some(Encoder { kind })
    }

    /// This worker's compressing streams.
    #[cfg(test)]
    pub(crate) fn streams() -> usize {
        STREAMS.with(Cell::get)
    }

    /// Compresses `input` onto `out` (the compressor may keep some until
    /// a flush).
    pub(crate) fn write(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(c) => {
                let mut at = 0;
                while at < input.len() {
                    out.reserve(input.len() - at + 64);
                    let before = c.total_in();
                    c.compress_vec(&input[at..], out, FlushCompress::None)
                        .map_err(io::Error::other)?;
                    at += (c.total_in() - before) as usize;
                }
                Ok(())
            }
            Kind::Zstd(c) => {
                let mut src = InBuffer::around(input);
                while src.pos() < input.len() {
                    out.reserve(input.len() - src.pos() + 64);
                    let at = out.len();
                    let mut dst = OutBuffer::around_pos(out, at);
                    c.compress_stream2(
                        &mut dst,
                        &mut src,
                        zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_continue,
                    )
                    .map_err(zstd_error)?;
                }
                Ok(())
            }
        }
    }

    /// Makes everything written so far decodable by the client now.
    pub(crate) fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(c) => loop {
                out.reserve(256);
                c.compress_vec(&[], out, FlushCompress::Sync)
                    .map_err(io::Error::other)?;
                if out.len() < out.capacity() {
                    return Ok(());
                }
            },
            Kind::Zstd(c) => loop {
                out.reserve(256);
                let at = out.len();
                let mut dst = OutBuffer::around_pos(out, at);
                let left = c
                    .compress_stream2(
                        &mut dst,
                        &mut InBuffer::around(&[]),
                        zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush,
                    )
                    .map_err(zstd_error)?;
                if left == 0 {
                    return Ok(());
                }
            },
        }
    }

    /// Ends the stream onto `out`.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(c) => loop {
                out.reserve(256);
                if c.compress_vec(&[], out, FlushCompress::Finish)
                    .map_err(io::Error::other)?
                    == Status::StreamEnd
                {
                    return Ok(());
                }
            },
            Kind::Zstd(c) => loop {
                out.reserve(256);
                let at = out.len();
                let mut dst = OutBuffer::around_pos(out, at);
                let left = c
                    .compress_stream2(
                        &mut dst,
                        &mut InBuffer::around(&[]),
                        zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end,
                    )
                    .map_err(zstd_error)?;
                if left == 0 {
                    return Ok(());
                }
            },
        }
    }

    /// What the compressor holds now (zstd's own `malloc`; gzip's is on
    /// the Rust heap, counted by a counting allocator).
    #[cfg(test)]
    pub(crate) fn zstd_bytes(&self) -> usize {
        match &self.kind {
            Kind::Zstd(c) => c.sizeof(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_takes_the_highest_q_and_breaks_ties_by_size() {
        for (accept, want) in [
            (None, None),
            (Some(&b""[..]), None),
            (Some(b"gzip"), Some(Coding::Gzip)),
            (Some(b"deflate, gzip, br, zstd"), Some(Coding::Zstd)),
            (Some(b"gzip, br"), Some(Coding::Gzip)),
            (Some(b"br"), None),
            (Some(b"gzip;q=1, zstd;q=0.5"), Some(Coding::Gzip)),
            (Some(b"zstd;q=0, *"), Some(Coding::Gzip)),
            (Some(b"gzip;q=0.5, gzip;q=0.9, zstd;q=0.8"), Some(Coding::Gzip)),
            (Some(b"*;q=0"), None),
            (Some(b"identity"), None),
            (Some(b"GZIP;Q=0.8"), Some(Coding::Gzip)),
            (Some(b"gzip;q=2"), None),
            (Some(b"gzip;q=0.0001"), None),
            (Some(b"x-gzip"), Some(Coding::Gzip)),
            // Named twice: the highest q-value, as the files crate reads it.
            (Some(b"gzip, gzip;q=0"), Some(Coding::Gzip)),
            (Some(b"br, zstd;q=0, gzip;q=0"), None),
        ] {
            assert_eq!(negotiate(accept), want, "{:?}", accept.map(String::from_utf8_lossy));
        }
    }

    fn roundtrip(coding: Coding, pieces: &[&[u8]]) -> Vec<u8> {
        let mut e = Encoder::new(coding).unwrap();
        let mut out = Vec::new();
        let mut seen = 0;
        for p in pieces {
            e.write(p, &mut out).unwrap();
            e.flush(&mut out).unwrap();
            // Flushed: what came so far decodes already.
            seen += p.len();
            assert_eq!(decode_prefix(coding, &out).len(), seen, "{coding:?}");
        }
        e.finish(&mut out).unwrap();
        out
    }

    /// What a client decodes of a stream that may not have ended yet.
    fn decode_prefix(coding: Coding, data: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        match coding {
            Coding::Gzip => {
                let mut d = flate2::read::GzDecoder::new(data);
                while let Ok(n) = d.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            }
            Coding::Zstd => {
                let mut d = zstd::stream::read::Decoder::new(data).unwrap();
                while let Ok(n) = d.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            }
        }
        got
    }

    #[test]
    fn each_coding_round_trips_and_each_flush_decodes_what_came() {
        let text = b"data: {\"event\": 1, \"text\": \"hello hello hello\"}\n\n".repeat(100);
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for coding in Coding::ALL {
            let out = roundtrip(coding, &[&text[..50], &text[50..], &big]);
            let mut whole = text.clone();
            whole.extend_from_slice(&big);
            assert_eq!(decode_prefix(coding, &out), whole, "{coding:?}");
            assert!(out.len() < whole.len(), "{coding:?}");
        }
    }

    #[test]
    fn a_worker_compresses_at_most_streams_max_answers_at_once() {
        let held: Vec<Encoder> = (0..STREAMS_MAX).map(|_| Encoder::new(Coding::Gzip).unwrap()).collect();
        assert_eq!(Encoder::streams(), STREAMS_MAX);
        assert!(Encoder::new(Coding::Gzip).is_none());
        drop(held);
        assert_eq!(Encoder::streams(), 0);
        assert!(Encoder::new(Coding::Zstd).is_some());
    }

    /// zstd's context is its own `malloc`'s: measured here after a 64 KiB
    /// read (the Rust-heap coders are measured by the engine's counting
    /// allocator tests).
    #[test]
    fn zstd_stays_within_its_bound() {
        let mut e = Encoder::new(Coding::Zstd).unwrap();
        let mut out = Vec::new();
        let input: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 256) as u8).collect();
        for _ in 0..4 {
            e.write(&input, &mut out).unwrap();
            e.flush(&mut out).unwrap();
        }
        let bytes = e.zstd_bytes();
        eprintln!("zstd context: {bytes} bytes");
        assert!(bytes <= ENCODER_BYTES_MAX, "{bytes}");
    }

    /// gRPC and gRPC-Web are never compressed, `+json` and text forms
    /// included; ordinary `+json` still is.
    #[test]
    fn grpc_types_are_not_compressible() {
        for t in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web+json",
            "application/grpc-web-text",
            "application/grpc-web-text+proto; charset=utf-8",
        ] {
            assert!(!compressible(t), "{t}");
        }
        assert!(compressible("application/problem+json"));
    }
}
