//! The plain request head in one pass: the strictly formed head nearly
//! every client sends (`GET /a HTTP/1.1`, CRLF line ends, visible ASCII),
//! tokenised without httparse; and the same for the response heads the
//! reverse proxy reads from upstreams (`HTTP/1.1 200 OK`,
//! `parse_response`, which `codec::client::parse_response_head` asks
//! first, under the same rules).
//!
//! A subset parser, not a second grammar: it accepts only heads that
//! httparse (with the default configuration `parse_head` uses) parses
//! complete, and for those it returns exactly what httparse returns (the
//! same method, target, version, field names and values as the same
//! slices of the buffer, the same length). Anything else (a partial head,
//! a bare LF, obs-text, a space or tab where httparse decides, more
//! fields than the slots) is an `Err`, and `parse_head` asks httparse,
//! whose answer (complete, partial or an error) stands. So the rules of
//! RFC 9112 that `parse_head` checks after tokenising apply to both
//! alike, and the `request_head` fuzz target compares the two on every
//! input.
//!
//! Why: httparse's work on h2load's 76-byte head was about 700
//! instructions of a pipelined hello's 1,836 (callgrind: self cost of
//! `parse_headers_iter_uninit`, the request line, its SIMD dispatch and
//! the target's `from_utf8`); this tokeniser's own cost on it is 452
//! (576 before its field names were found a byte at a time and the
//! version compared as words; callgrind, hello-pipe16 at 0bf167b and
//! b24965e). The two `unsafe` blocks below are the ones
//! httparse has (`from_utf8_unchecked` on bytes checked to be ASCII, the
//! written slots viewed as initialised); each says why it holds. On
//! x86_64 the runs go 16 bytes a step with SSE2 (module `sse2`, whose
//! blocks are a load and the intrinsics), the 8-byte words the portable
//! path and the tail: with the field loop's other cuts, h2load's request
//! 389 to 335 instructions and limit.c's answer 745 to 549 (the
//! tokeniser alone, bench/runs/2026-11-28-parse8).

use std::mem::MaybeUninit;

use httparse::Header;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use sse2::{vectors, Vectors};

/// No vectors where the 16-byte steps are not compiled.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) struct Vectors;

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(crate) fn vectors() -> Vectors {
    Vectors
}

/// A plain head's request line and length; its fields are the slice
/// [`parse`] returns beside it.
pub(crate) struct Plain<'b> {
    pub(crate) method: &'b str,
    pub(crate) target: &'b str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor: u8,
    /// The request line's length to its LF (as `parse_head` measures it).
    pub(crate) line_len: usize,
    /// Bytes of the head, including the empty line that ends it.
    pub(crate) head_len: usize,
}

/// Parses a plain head at the start of `buf`, its fields into `slots`
/// (at most as many as there are slots), or says it is not one (`Err`,
/// with the slots back: ask httparse). See the module's comment.
#[inline(always)]
pub(crate) fn parse<'b, 'h>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
) -> Result<(Plain<'b>, &'h [Header<'b>]), &'h mut [MaybeUninit<Header<'b>>]> {
    match tokenise(buf, slots) {
        Some((plain, n_fields)) => Ok((plain, written(slots, n_fields))),
        None => Err(slots),
    }
}

/// The work of [`parse`]: the head, and how many slots it wrote (the
/// first ones). Out of line: inlined into `H1::poll`, its loops' code
/// moved with whatever else `poll` holds (the request trailers' merge
/// cost a plain GET 2.4 to 4.3 % more instructions, none of them work a
/// GET does); apart, that cost fell to 1.0 to 3.0 % (callgrind,
/// `bench/instructions.sh`).
#[inline(never)]
fn tokenise<'b>(buf: &'b [u8], slots: &mut [MaybeUninit<Header<'b>>]) -> Option<(Plain<'b>, usize)> {
    let k = &vectors();
    // method SP: a token (httparse's `parse_method`: any token byte).
    let method_end = if buf.starts_with(b"GET ") {
        3
    } else {
        let n = buf.iter().take_while(|&&b| is_token(b)).count();
        if n == 0 || buf.get(n) != Some(&b' ') {
            return None;
        }
        n
    };
    // request-target SP: one or more visible ASCII bytes (httparse also
    // takes obs-text here, then checks UTF-8: left to it).
    let target_at = method_end + 1;
    let target_end = run_of(buf, target_at, 0x21, k);
    if target_end == target_at {
        return None;
    }
    // SP HTTP-version CRLF, the version 1.0 or 1.1 (httparse's
    // `parse_version` takes no other): compared as two words.
    // Two words that overlap by a byte: ` HTTP/1.`, then `.1` CRLF.
    let version: &[u8; 11] = buf.get(target_end..target_end + 11)?.try_into().ok()?;
    if u64::from_le_bytes(*version.first_chunk::<8>()?) != SP_HTTP_1_DOT {
        return None;
    }
    let minor = match u32::from_le_bytes(*version.last_chunk::<4>()?) {
        DOT_1_CRLF => 1,
        DOT_0_CRLF => 0,
        _ => return None,
    };
    let line_len = target_end + 10;
    let (head_len, n_fields) = fields(buf, line_len + 1, slots, k)?;
    // Byte slices made `str` each (a `str`'s `get` tests char boundaries).
    let plain = Plain {
        method: ascii_str(&buf[..method_end]),
        target: ascii_str(&buf[target_at..target_end]),
        minor,
        line_len,
        head_len,
    };
    Some((plain, n_fields))
}

/// A plain response head's status line and length; its fields are the
/// slice [`parse_response`] returns beside it.
pub(crate) struct PlainStatus<'b> {
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor: u8,
    /// Three digits, as sent (the caller judges the range).
    pub(crate) status: u16,
    pub(crate) reason: &'b str,
    /// Bytes of the head, including the empty line that ends it.
    pub(crate) head_len: usize,
}

/// Parses a plain response head at the start of `buf` (`HTTP/1.1 200
/// OK`, CRLF line ends, visible ASCII), its fields into `slots`, or says
/// it is not one (`Err`, with the slots back: ask httparse, whose answer
/// stands). The same subset of httparse's grammar as [`parse`]'s, for
/// the reverse proxy's upstream answers: httparse's work on a 5-field
/// answer was 1,190 instructions of a proxied GET's 12,700 (callgrind,
/// `proxy-c50`). The `h1_client` fuzz target compares the two
/// (`fuzzing::response_head_plain`).
#[inline(always)]
pub(crate) fn parse_response<'b, 'h>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
) -> Result<(PlainStatus<'b>, &'h [Header<'b>]), &'h mut [MaybeUninit<Header<'b>>]> {
    match tokenise_response(buf, slots) {
        Some((status, n_fields)) => Ok((status, written(slots, n_fields))),
        None => Err(slots),
    }
}

/// The work of [`parse_response`]: the head, and how many slots it wrote.
#[inline(never)]
fn tokenise_response<'b>(buf: &'b [u8], slots: &mut [MaybeUninit<Header<'b>>]) -> Option<(PlainStatus<'b>, usize)> {
    let k = &vectors();
    // HTTP-version SP 3DIGIT (httparse's `parse_version`, `parse_code`).
    let line: &[u8; 12] = buf.get(..12)?.try_into().ok()?;
    // The version compared as one word, then the space.
    let minor = match u64::from_le_bytes(*line.first_chunk::<8>()?) {
        HTTP_1_1 => 1,
        HTTP_1_0 => 0,
        _ => return None,
    };
    if line[8] != b' ' {
        return None;
    }
    let [h, t, o] = [line[9], line[10], line[11]];
    if ![h, t, o].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let status = u16::from(h - b'0') * 100 + u16::from(t - b'0') * 10 + u16::from(o - b'0');
    // Then CRLF (no reason), or SP and a reason of visible ASCII and SP
    // to CRLF (httparse also takes HTAB and obs-text there: left to it).
    let (reason_at, reason_end) = match buf.get(12)? {
        b'\r' => (12, 12),
        b' ' => (13, run_of(buf, 13, 0x20, k)),
        _ => return None,
    };
    if buf.get(reason_end..reason_end + 2)? != b"\r\n" {
        return None;
    }
    let (head_len, n_fields) = fields(buf, reason_end + 2, slots, k)?;
    let status = PlainStatus {
        minor,
        status,
        reason: ascii_str(&buf[reason_at..reason_end]),
        head_len,
    };
    Some((status, n_fields))
}

/// The field lines from `at` and the empty line after them: the head's
/// length and how many slots were written. Inlined into each tokeniser.
#[inline(always)]
fn fields<'b>(
    buf: &'b [u8],
    mut at: usize,
    slots: &mut [MaybeUninit<Header<'b>>],
    k: &Vectors,
) -> Option<(usize, usize)> {
    // Field lines: token ":" OWS value CRLF, the value visible ASCII, SP
    // and HTAB, trailing blanks not part of it (as httparse trims them).
    let mut n_fields = 0;
    let head_len = loop {
        // An empty line ends the head.
        if buf.get(at) == Some(&b'\r') {
            if buf.get(at + 1) == Some(&b'\n') {
                break at + 2;
            }
            return None;
        }
        // The name: token bytes, up to a ':' (`token_run`: a table look a
        // byte; names found by 8-byte word arithmetic and then checked
        // cost 62 instructions more for h2load's `host` and `user-agent`,
        // callgrind on the tokeniser alone). A name that runs to the end
        // of the bytes is partial: httparse's.
        let name_at = at;
        let colon = token_run(buf, name_at, k);
        if buf.get(colon) != Some(&b':') || colon == name_at {
            return None;
        }
        let name = &buf[name_at..colon];
        at = colon + 1;
        // OWS: nearly always one space.
        if buf.get(at) == Some(&b' ') {
            at += 1;
        }
        // More blanks are rare: one compare finds a byte at or below SP
        // (a CR of an empty value too), and `skip_blanks` looks closer.
        if buf.get(at).is_some_and(|&b| b <= b' ') {
            at = skip_blanks(buf, at);
        }
        let value_at = at;
        // The value runs to CRLF; a tab inside it is taken a byte at a
        // time. The run's stop is tested alone, then the LF after a CR:
        // one test less than a 2-byte slice's compare (tok7).
        loop {
            at = run_of(buf, at, 0x20, k);
            match buf.get(at) {
                Some(b'\r') => break,
                Some(b'\t') => at += 1,
                _ => return None,
            }
        }
        if buf.get(at + 1) != Some(&b'\n') {
            return None;
        }
        // Trailing blanks: every byte of the value is SP, HTAB or above SP,
        // so one compare of its last byte finds a blank (`last`, not the
        // byte before the CR, which needed a bounds test of its own: 4
        // instructions less for limit.c's answer, the tokeniser alone).
        let mut value = &buf[value_at..at];
        if value.last().is_some_and(|&b| b <= b' ') {
            value = trim_end(value);
        }
        slots.get_mut(n_fields)?.write(Header {
            name: ascii_str(name),
            value,
        });
        n_fields += 1;
        at += 2;
    };
    Some((head_len, n_fields))
}

const SP_HTTP_1_DOT: u64 = u64::from_le_bytes(*b" HTTP/1.");
const DOT_1_CRLF: u32 = u32::from_le_bytes(*b".1\r\n");
const DOT_0_CRLF: u32 = u32::from_le_bytes(*b".0\r\n");
const HTTP_1_1: u64 = u64::from_le_bytes(*b"HTTP/1.1");
const HTTP_1_0: u64 = u64::from_le_bytes(*b"HTTP/1.0");

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Where the blanks (SP, HTAB) from `at` end.
#[cold]
#[inline(never)]
fn skip_blanks(buf: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t') = buf.get(at) {
        at += 1;
    }
    at
}

/// `value` without its trailing blanks (SP, HTAB), as httparse trims.
#[cold]
#[inline(never)]
fn trim_end(mut value: &[u8]) -> &[u8] {
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// Bytes checked to be ASCII (token bytes, or visible ASCII in the
/// request target) as `str`, without `from_utf8`: its call cost about 80
/// instructions for each name and the request line (callgrind, 245 of a
/// pipelined hello's 1,943 with three calls), more than tokenising them.
#[allow(unsafe_code)]
#[inline(always)]
fn ascii_str(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every caller passes bytes it has checked against `TOKEN`
    // or `sse2::outside_name` (letters, digits, `-`; no byte at or above
    // 0x80), compared with `GET ` (the method), or found by `run_of(_, _,
    // 0x21)` (0x21 to 0x7E; a response's reason `run_of(_, _, 0x20)`, 0x20
    // to 0x7E): ASCII, which is UTF-8.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// The first `n` slots as fields.
#[allow(unsafe_code)]
#[inline(always)]
fn written<'b, 'h>(slots: &'h [MaybeUninit<Header<'b>>], n: usize) -> &'h [Header<'b>] {
    let slots = &slots[..n];
    // SAFETY: `tokenise` or `tokenise_response` wrote the first `n`
    // slots (`fields`' `n_fields` counts each `write`), and `MaybeUninit<T>` has the layout of `T` (as
    // httparse's own `assume_init_slice` relies on).
    unsafe { &*(std::ptr::from_ref(slots) as *const [Header<'b>]) }
}

/// Where the run of bytes in `low..=0x7E` that starts at `at` ends (`low`
/// 0x21 for a target, 0x20 for a field value): 8 bytes a step while 8
/// are left, then byte by byte. The step's bound is one slice `get`
/// (`get(at..)` then `first_chunk` were two tests: 18 instructions more
/// for h2load's request, 2 more for limit.c's answer, callgrind on the
/// tokeniser alone, tok7).
#[inline(always)]
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(unused_variables) // `k`: the 16-byte steps' only
)]
pub(crate) fn run_of(buf: &[u8], mut at: usize, low: u8, k: &Vectors) -> usize {
    // 16 bytes a step while 16 are left (x86_64: SSE2, which every
    // x86_64 has), then the portable 8-byte steps.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(c) = buf.get(at..at + 16) {
        let outside = sse2::outside_run(c.try_into().expect("16 bytes"), low, k);
        if outside != 0 {
            return at + outside.trailing_zeros() as usize;
        }
        at += 16;
    }
    while let Some(c) = buf.get(at..at + 8) {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        // High bit set in each byte below `low`, equal to 0x7F (adding
        // one sets it) or above it: exact for the lowest such byte, which
        // is all this needs (the bytes before it neither borrow nor
        // carry). One subtraction and one addition where a compare with
        // 0x7F took four operations.
        let below = w.wrapping_sub(ONES * low as u64) & !w;
        let out = (below | w.wrapping_add(ONES) | w) & HIGHS;
        if out != 0 {
            return at + (out.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&b) = buf.get(at) {
        if !(low..=0x7E).contains(&b) {
            break;
        }
        at += 1;
    }
    at
}

/// Where the run of token bytes that starts at `at` ends (`buf.len()`
/// if it runs to the end). A table look a byte, unrolled 8 to a step
/// under one bound test, then byte by byte: the iterator's `position`
/// tested the bound and moved a pointer at each byte. h2load's request
/// 428 to 389 instructions, limit.c's 4-field answer 799 to 745
/// (callgrind, the tokeniser alone over each, tok7).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexes a fixed array: unrolled
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(unused_variables) // `k`: the 16-byte steps' only
)]
pub(crate) fn token_run(buf: &[u8], mut at: usize, k: &Vectors) -> usize {
    // x86_64: 16 bytes a step (SSE2) while 16 are left, judged against
    // the bytes nearly every name is made of (letters, digits, `-`); the
    // first other byte is looked up in the table, and a token byte there
    // (`_`, `.`, ...) lets the run go on after it.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(c) = buf.get(at..at + 16) {
        let other = sse2::outside_name(c.try_into().expect("16 bytes"), k);
        if other == 0 {
            at += 16;
            continue;
        }
        at += other.trailing_zeros() as usize;
        let stop = buf[at];
        if stop == b':' || !is_token(stop) {
            return at;
        }
        at += 1;
    }
    while let Some(c) = buf.get(at..at + 8) {
        let c: &[u8; 8] = c.try_into().expect("8 bytes");
        for i in 0..8 {
            if !is_token(c[i]) {
                return at + i;
            }
        }
        at += 8;
    }
    while let Some(&b) = buf.get(at) {
        if !is_token(b) {
            break;
        }
        at += 1;
    }
    at
}

/// The 16-byte steps of [`run_of`] and [`token_run`] (SSE2 is part of
/// x86_64). Each answers a mask, bit `i` set when byte `i` stops the run.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
    };

    /// The steps' constant vectors, each a byte repeated, loaded once
    /// per tokenising call from two cache lines ([`BYTES`]).
    pub(crate) struct Vectors {
        one: __m128i,
        sp: __m128i,
        bang: __m128i,
        a_to_min: __m128i,
        letters_end: __m128i,
        zero_to_min: __m128i,
        digits_end: __m128i,
        dash: __m128i,
    }

    /// The vectors' bytes, eight of 16 together in two cache lines.
    /// Written as `_mm_set1_epi8`, LLVM put each in the binary's pool of
    /// 16-byte constants, where they lay on about six lines: D1 read
    /// misses per hello at 50 connections rose 50 to 57 with the 16-byte
    /// steps (callgrind's cache simulation, a 4 KiB D1,
    /// bench/runs/2026-11-28-parse8). Here `tokenise`'s own D1 read misses
    /// fell 6.9 to 3.0 a request and hello-c50's 59.3 to 53.3, its
    /// instructions 1,677 to 1,680 (bench/runs/2026-11-28-parse9).
    #[repr(C, align(64))]
    struct Bytes([[u8; 16]; 8]);

    static BYTES: Bytes = Bytes([
        [1; 16],
        [b' '; 16],
        [b'!'; 16],
        [0x80u8.wrapping_sub(b'a'); 16],
        [(-128i8 + 26) as u8; 16],
        [0x80u8.wrapping_sub(b'0'); 16],
        [(-128i8 + 10) as u8; 16],
        [b'-'; 16],
    ]);

    /// The vectors, loaded once per tokenising call, into registers.
    #[inline(always)]
    pub(crate) fn vectors() -> Vectors {
        let [one, sp, bang, a_to_min, letters_end, zero_to_min, digits_end, dash] = &BYTES.0;
        Vectors {
            one: splat(one),
            sp: splat(sp),
            bang: splat(bang),
            a_to_min: splat(a_to_min),
            letters_end: splat(letters_end),
            zero_to_min: splat(zero_to_min),
            digits_end: splat(digits_end),
            dash: splat(dash),
        }
    }

    /// `c` as a vector. SSE2 intrinsics are `unsafe` to call from a
    /// function without `#[target_feature]`, even where the target has
    /// the feature: every block below holds because SSE2 is part of
    /// x86_64 (the module is compiled only where `target_feature =
    /// "sse2"`).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn load(c: &[u8; 16]) -> __m128i {
        // SAFETY: `c` is 16 readable bytes, `loadu` needs no alignment,
        // and SSE2 is there (see above).
        unsafe { _mm_loadu_si128(c.as_ptr().cast()) }
    }

    /// An array of `BYTES` as a vector, by a volatile load: LLVM sees a
    /// `static`'s bytes, and would make a plain load a constant of its
    /// pool again (through `black_box`, 3 instructions more a call).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn splat(c: &'static [u8; 16]) -> __m128i {
        debug_assert_eq!(c.as_ptr() as usize % 16, 0);
        // SAFETY: `c` is 16 readable bytes at a multiple of 16 (an array
        // of 16 bytes in a `repr(C, align(64))` struct), which is
        // `__m128i`'s size and alignment; any bytes are an `__m128i`.
        unsafe { std::ptr::read_volatile(c.as_ptr().cast::<__m128i>()) }
    }

    /// Bytes outside `low..=0x7E` (`low` 0x20 or 0x21). Adding one moves
    /// 0x7F to 0x80 and the bytes from 0x80 to 0x81..=0xFF or 0x00, all of
    /// them negative or below `low` as signed bytes, and `low..=0x7E` to
    /// `low + 1..=0x7F`: one signed compare with `low` (`low` below 0x7F)
    /// tells them apart.
    #[allow(unsafe_code)]
    #[inline(always)]
    pub(super) fn outside_run(c: &[u8; 16], low: u8, k: &Vectors) -> u32 {
        let low = match low {
            b' ' => k.sp,
            b'!' => k.bang,
            _ => unreachable!("run_of's callers pass SP or '!'"),
        };
        // SAFETY: arithmetic on values, and SSE2 is there (see `load`).
        let inside = unsafe {
            let v = _mm_add_epi8(load(c), k.one);
            _mm_movemask_epi8(_mm_cmpgt_epi8(v, low))
        };
        (inside as u32) ^ 0xFFFF
    }

    /// Bytes that are not an ASCII letter, digit or `-`. A range test
    /// `b - first < n` (unsigned) is a signed compare after moving `first`
    /// to -128; a letter of either case is one range once bit 5 is set.
    #[allow(unsafe_code)]
    #[inline(always)]
    pub(super) fn outside_name(c: &[u8; 16], k: &Vectors) -> u32 {
        let v = load(c);
        // SAFETY: arithmetic on values, and SSE2 is there (see `load`).
        let name = unsafe {
            // Bit 5 (0x20) is SP's byte.
            let lower = _mm_or_si128(v, k.sp);
            let letter = _mm_cmpgt_epi8(k.letters_end, _mm_add_epi8(lower, k.a_to_min));
            let digit = _mm_cmpgt_epi8(k.digits_end, _mm_add_epi8(v, k.zero_to_min));
            let dash = _mm_cmpeq_epi8(v, k.dash);
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(letter, digit), dash))
        };
        (name as u32) ^ 0xFFFF
    }
}

/// RFC 9110 §5.6.2: tchar, as httparse's token table.
#[inline(always)]
fn is_token(b: u8) -> bool {
    TOKEN[b as usize]
}

static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    /// What httparse makes of `buf`: (method, target, minor, length,
    /// fields as (name, value offset, value length)) when complete.
    type Parts = (String, String, u8, usize, Vec<(String, usize, usize)>);

    fn httparse_parts(buf: &[u8], n: usize) -> Option<Parts> {
        let mut headers = vec![MaybeUninit::uninit(); n];
        let mut req = httparse::Request::new(&mut []);
        let Ok(httparse::Status::Complete(len)) = req.parse_with_uninit_headers(buf, &mut headers) else {
            return None;
        };
        let fields = spans(req.headers, buf);
        Some((req.method?.to_owned(), req.path?.to_owned(), req.version?, len, fields))
    }

    /// Each field's name, and where its value lies in `buf`.
    fn spans(fields: &[Header<'_>], buf: &[u8]) -> Vec<(String, usize, usize)> {
        fields
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    h.value.as_ptr() as usize - buf.as_ptr() as usize,
                    h.value.len(),
                )
            })
            .collect()
    }

    fn plain_parts(buf: &[u8], n: usize) -> Option<Parts> {
        let mut slots = vec![MaybeUninit::uninit(); n];
        let (p, fields) = parse(buf, &mut slots).ok()?;
        let fields = spans(fields, buf);
        assert_eq!(buf[p.line_len], b'\n');
        Some((p.method.to_owned(), p.target.to_owned(), p.minor, p.head_len, fields))
    }

    /// The subset rule: whatever `parse` takes, httparse takes alike.
    fn check(buf: &[u8], n: usize) -> bool {
        let plain = plain_parts(buf, n);
        if let Some(p) = &plain {
            assert_eq!(
                Some(p),
                httparse_parts(buf, n).as_ref(),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
        plain.is_some()
    }

    #[test]
    fn common_heads_are_plain_and_agree_with_httparse() {
        let heads: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nuser-agent: h2load nghttp2/1.59.0\r\n\r\n",
            b"POST /upload?x=1 HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
            b"DELETE /a/b/c/d/e/f/g/h/i/j HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Blank:   \r\n\r\n",
            b"GET /long-target-of-more-than-eight-bytes.css HTTP/1.1\r\nA: b \t c \t \r\n\r\nnext",
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\nAccept: text/html,application/xhtml+xml;q=0.9,*/*;q=0.8\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"get /x HTTP/1.1\r\nTab:\tvalue\twith\ttabs\r\n\r\n",
            // A name of any length is found a byte at a time (one longer
            // than 64 bytes went to httparse before).
            b"GET / HTTP/1.1\r\nX-A-Name-Longer-Than-Sixty-Four-Bytes-Which-Once-Went-To-Httparse: v\r\n\r\n",
            b"GET / HTTP/1.1\r\nA:  \t two blanks, a tab\r\nB:\t\r\n\r\n",
        ];
        for head in heads {
            assert!(check(head, 16), "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn unusual_heads_go_to_httparse() {
        let heads: &[&[u8]] = &[
            b"",
            b"GET / HTTP/1.1\r\nHost: a\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r",
            b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\n",
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: \xc3\xa9\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
            b"GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n",
            b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\n: a\r\n\r\n",
            // No colon on the line, a CR or LF before it, a tab or CR
            // ending the bytes, a version of other digits.
            b"GET / HTTP/1.1\r\nHost a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost a\r\nB: c\r\n\r\n",
            b"GET / HTTP/1.1\r\nHo\rst: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHo\nst: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\t",
            b"GET / HTTP/1.1\r\nHost: a\r",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r",
            b"GET / HTTP/1.9\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\n\nHost: a\r\n\r\n",
        ];
        for head in heads {
            assert!(!check(head, 16), "{:?}", String::from_utf8_lossy(head));
        }
        // More fields than slots: httparse decides.
        assert!(!check(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 2));
        assert!(check(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", 2));
    }

    /// Names and values of every length around the 8-byte steps of
    /// `token_run` and `run_of` (the run ends inside a step, on its last
    /// byte, in the byte-at-a-time tail, or at the end of the bytes), with
    /// a stop of each kind after them, and each head cut at every length:
    /// whatever `parse` takes, httparse takes alike, and the lengths that
    /// are whole are taken.
    #[test]
    fn names_and_values_at_every_step_boundary_agree_with_httparse() {
        for name_len in 1..=19 {
            for value_len in 0..=19 {
                let name = "n".repeat(name_len);
                let value = "v".repeat(value_len);
                for (line, plain) in [
                    (format!("{name}: {value}\r\n"), true),
                    (format!("{name}:{value} \t\r\n"), true),
                    (format!("{name}: {value}\tx\r\n"), true),
                    (format!("{name} : {value}\r\n"), false),
                    (format!("{name}: {value}\n"), false),
                    (format!("{name}: {value}\x7f\r\n"), false),
                ] {
                    let head = format!("GET / HTTP/1.1\r\n{line}\r\n");
                    assert_eq!(check(head.as_bytes(), 4), plain, "{head:?}");
                    for cut in 0..head.len() {
                        assert!(!check(&head.as_bytes()[..cut], 4), "{head:?} cut at {cut}");
                    }
                }
            }
        }
    }

    /// Every byte value at every place of a 20-byte name and of a 20-byte
    /// value, so that each 16-byte step (SSE2 on x86_64) stops at it
    /// inside the step, on its last byte or in the tail after it, and
    /// the run goes on after a token byte the step does not take (`_`,
    /// `~`, ...): taken exactly when httparse takes it, and alike.
    #[test]
    fn every_byte_in_a_long_name_or_value_agrees_with_httparse() {
        for at in 0..20 {
            for b in 0..=255u8 {
                let mut name = vec![b'n'; 20];
                name[at] = b;
                let mut head = b"GET / HTTP/1.1\r\n".to_vec();
                head.extend_from_slice(&name);
                head.extend_from_slice(b": v\r\nnext: field\r\n\r\n");
                // A ':' inside ends a shorter name (the rest is value).
                let plain = is_token(b) || (b == b':' && at > 0);
                assert_eq!(check(&head, 4), plain, "name byte {b:#04x} at {at}");
                let mut value = vec![b'v'; 20];
                value[at] = b;
                let mut head = b"GET / HTTP/1.1\r\nname: ".to_vec();
                head.extend_from_slice(&value);
                head.extend_from_slice(b"\r\n\r\n");
                let plain = (0x20..=0x7e).contains(&b) || b == b'\t';
                assert_eq!(check(&head, 4), plain, "value byte {b:#04x} at {at}");
                // The target too (visible ASCII only).
                let mut target = vec![b'/'; 20];
                target[at] = b;
                let mut head = b"GET ".to_vec();
                head.extend_from_slice(&target);
                head.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
                let plain = (0x21..=0x7e).contains(&b);
                assert_eq!(check(&head, 4), plain, "target byte {b:#04x} at {at}");
            }
        }
    }

    /// Response heads (the reverse proxy's upstream answers): the common
    /// ones are plain, and cut at every length or with each byte replaced
    /// they answer alike through `parse_response_head` with and without
    /// the plain parser (the `h1_client` fuzz target's check).
    /// The 16-byte steps with the vectors from `BYTES` judge every byte
    /// value in every lane as the byte-at-a-time rules do (a wrong byte in
    /// the static would move a range).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn the_16_byte_steps_judge_every_byte_in_every_lane_as_the_byte_rules() {
        let k = &super::vectors();
        for b in 0..=255u8 {
            for lane in 0..16 {
                let mut c = [b'a'; 16];
                c[lane] = b;
                let bit = 1u32 << lane;
                let value = !(0x20..=0x7E).contains(&b);
                let target = !(0x21..=0x7E).contains(&b);
                let name = !(b.is_ascii_alphanumeric() || b == b'-');
                assert_eq!(
                    super::sse2::outside_run(&c, b' ', k),
                    if value { bit } else { 0 },
                    "{b:#x}"
                );
                assert_eq!(
                    super::sse2::outside_run(&c, b'!', k),
                    if target { bit } else { 0 },
                    "{b:#x}"
                );
                assert_eq!(super::sse2::outside_name(&c, k), if name { bit } else { 0 }, "{b:#x}");
            }
        }
    }

    #[test]
    fn response_heads_answer_alike_with_and_without_the_plain_parser() {
        let heads: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nServer: limit\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!",
            b"HTTP/1.0 404 Not Found\r\nX_Under.score~1234567890: a\tb \r\nE:\r\n\r\n",
            b"HTTP/1.1 204\r\nA-Name-Longer-Than-Sixteen-Bytes: v\r\n\r\n",
        ];
        for base in heads {
            let mut slots = [const { MaybeUninit::uninit() }; 8];
            assert!(
                parse_response(base, &mut slots).is_ok(),
                "{:?}",
                String::from_utf8_lossy(base)
            );
            for cut in 0..=base.len() {
                crate::fuzzing::response_head_plain(&base[..cut]);
            }
            for i in 0..base.len() {
                for b in [
                    0u8, b'\t', b'\n', b'\r', b' ', b'#', b'(', b'-', b'.', b'0', b'1', b'9', b':', b'A', b'H', b'_',
                    b'a', b'~', 0x7f, 0x80, 0xc3, 0xff,
                ] {
                    let mut m = base.to_vec();
                    m[i] = b;
                    crate::fuzzing::response_head_plain(&m);
                }
            }
        }
    }

    /// Every head above cut at every length, and every byte of a head
    /// replaced by each value: whatever `parse` takes, httparse takes
    /// alike (the fuzz target `request_head` does the same on any input).
    #[test]
    fn plain_is_a_subset_of_httparse_under_mutation() {
        let base: &[u8] = b"GET /a?b=c HTTP/1.1\r\nHost: x.example:80\r\nUser-Agent: t/1 (\tz)  \r\nE:\r\n\r\n";
        for cut in 0..=base.len() {
            check(&base[..cut], 8);
        }
        let mut taken = 0;
        for i in 0..base.len() {
            for b in 0..=255u8 {
                let mut m = base.to_vec();
                m[i] = b;
                taken += check(&m, 8) as usize;
            }
        }
        // Some mutations stay plain (a letter for a letter), most do not.
        assert!(taken > base.len() && taken < base.len() * 256, "{taken}");
    }

    /// The same mutations through `parse_head` both ways (the fuzz
    /// target's check): the same answer, complete, partial or an error,
    /// under small limits and the defaults.
    #[test]
    fn parse_head_answers_alike_with_and_without_the_plain_parser() {
        let heads: &[&[u8]] = &[
            b"GET /a?b=c HTTP/1.1\r\nHost: x.example:80\r\nUser-Agent: t/1 (\tz)  \r\nE:\r\n\r\n",
            b"POST /p HTTP/1.0\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nabc",
            b"GET http://h.example/x HTTP/1.1\r\nHost: h.example\r\nTransfer-Encoding: chunked\r\n\r\n",
        ];
        for base in heads {
            for cut in 0..=base.len() {
                crate::fuzzing::request_head_plain(&base[..cut]);
            }
            for i in 0..base.len() {
                for b in [
                    0u8, b'\t', b'\n', b'\r', b' ', b'#', b'(', b':', b'?', b'A', b'a', 0x7f, 0x80, 0xc3, 0xff,
                ] {
                    let mut m = base.to_vec();
                    m[i] = b;
                    crate::fuzzing::request_head_plain(&m);
                }
            }
        }
    }
}
