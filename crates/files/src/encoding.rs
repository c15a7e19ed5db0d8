//! Content negotiation on `Accept-Encoding` (RFC 9110 §12.5.3) among the
//! pre-compressed siblings a file has (`x.br`, `x.zst`, `x.gz`). Pure but
//! for one memo per thread: the last value read (`accepted`).

use std::cell::RefCell;

use peregrine::codec::head::trim_ows;

/// A content coding Peregrine can serve from a pre-compressed sibling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `br`, from `NAME.br`.
    Brotli,
    /// `zstd`, from `NAME.zst`.
    Zstd,
    /// `gzip`, from `NAME.gz`.
    Gzip,
}

impl Encoding {
    /// In order of preference when the client likes several equally: the
    /// smallest output first.
    pub const ALL: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

    /// The coding's name in `Content-Encoding` (IANA registry).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file name suffix of a sibling in this coding.
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Brotli => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Picks the coding to send, among `available`, for an `Accept-Encoding`
/// value (`None`: the field is absent, so identity). `None` means identity.
///
/// The highest q-value wins, ties going to the order of [`Encoding::ALL`];
/// a coding with q=0 is never chosen; `*` gives its q-value to the codings
/// the field does not name. When the client refuses identity too
/// (`identity;q=0`) and offers nothing available, identity is sent anyway,
/// as nginx and Caddy do (RFC 9110 §12.5.3 allows disregarding the field).
pub fn negotiate(accept: Option<&[u8]>, available: &[Encoding]) -> Option<Encoding> {
    // Nothing to choose (a file without compressed siblings: an image):
    // the value is not read (about 400 instructions for a browser's).
    if available.is_empty() {
        return None;
    }
    accepted(accept).choose(available)
}

/// What an `Accept-Encoding` value accepts, read once: then asked which
/// coding to send ([`Accepted::choose`], what [`negotiate`] answers) or
/// whether one coding is acceptable ([`Accepted::contains`]) as often as
/// needed. A revalidation asks about each coding in turn (the variant the
/// client holds), where a `negotiate` per coding read the value each time
/// (about 450 instructions each for `gzip, deflate, br, zstd`).
///
/// The last value read on this thread is remembered with what it accepts
/// (up to `MEMO_BYTES`): a browser sends the same value with every request,
/// and comparing it costs a fraction of reading it (`LAST`).
pub fn accepted(accept: Option<&[u8]>) -> Accepted {
    let Some(accept) = accept else {
        return Accepted(Weights::Absent);
    };
    let n = accept.len();
    if n > MEMO_BYTES {
        return accepted_afresh(accept);
    }
    LAST.with(|last| {
        // Never borrowed twice: nothing here calls back into `accepted`.
        let mut memo = last.borrow_mut();
        if usize::from(memo.len) == n && same_bytes(&memo.bytes, accept) {
            return memo.accepted;
        }
        let accepted = accepted_afresh(accept);
        memo.len = n as u8;
        memo.bytes[..n].copy_from_slice(accept);
        memo.accepted = accepted;
        accepted
    })
}

/// Whether `value` is the first `value.len()` bytes of `kept`, eight
/// bytes at a time, the last word the last eight bytes (read again in
/// part): a slice compare was a call of `memcmp` (about 50 instructions
/// with its setup, for 23 bytes).
#[inline(always)]
fn same_bytes(kept: &[u8; MEMO_BYTES], value: &[u8]) -> bool {
    let n = value.len();
    if n < 8 {
        return kept.iter().zip(value).all(|(a, b)| a == b);
    }
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let mut at = 0;
    while at + 8 < n {
        if word(kept, at) != word(value, at) {
            return false;
        }
        at += 8;
    }
    word(kept, n - 8) == word(value, n - 8)
}

/// The longest value [`accepted`] remembers: every browser's fits
/// (Chrome's and Firefox's `gzip, deflate, br, zstd` is 23 bytes).
const MEMO_BYTES: usize = 48;

/// A value [`accepted`] read and what it accepts.
struct Memo {
    /// The value's length; `u8::MAX` (longer than `MEMO_BYTES`) while none
    /// is remembered.
    len: u8,
    bytes: [u8; MEMO_BYTES],
    accepted: Accepted,
}

thread_local! {
    /// The last `Accept-Encoding` value [`accepted`] read on this thread
    /// (a worker: its connections' requests in turn). Read afresh, Chrome's
    /// value cost `accepted` 368 instructions; found here, 60 (a browser's
    /// archive answer 2,688 -> 2,367, callgrind c50,
    /// bench/runs/2026-11-28-host8c). One entry, not a table: a worker's
    /// clients are mostly of one browser family or two, and a miss costs
    /// the compare and the copy beside the read.
    static LAST: RefCell<Memo> = const {
        RefCell::new(Memo { len: u8::MAX, bytes: [0; MEMO_BYTES], accepted: Accepted(Weights::Absent) })
    };
}

/// [`accepted`] without its memo: the value read, every time (the model
/// its memo is checked against, in tests and the `accept_encoding` fuzz
/// target).
#[doc(hidden)]
pub fn accepted_afresh(accept: &[u8]) -> Accepted {
    // A value without parameters, as every browser sends (`gzip, deflate,
    // br, zstd`): eight bytes at a time, no q-values. The general scan
    // cost 597 instructions for that value, this about 500; a browser's
    // archive answer 2,887 -> 2,793 (callgrind c50, GET / of the bundled
    // archive, bench/runs/2026-11-28-arch12); with the choice by sets
    // (`choose_plainly`) 368 and 2,707 (bench/runs/2026-11-28-arch13).
    match named_plainly(accept) {
        Some(named) => Accepted(Weights::Plain(named)),
        None => {
            let (named, star) = q_values(accept);
            Accepted(Weights::Weighted(named, star))
        }
    }
}

/// An `Accept-Encoding` value as read by [`accepted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted(Weights);

/// The q-values a value gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weights {
    /// No field: identity only.
    Absent,
    /// No parameters: the codings named (and `STAR`), each at q=1.
    Plain(u8),
    /// Each coding's q-value in thousandths (`None`: not named), `*`'s.
    Weighted([Option<u16>; 3], Option<u16>),
}

impl Accepted {
    /// The coding to send among `available` ([`negotiate`]'s answer).
    #[inline]
    pub fn choose(&self, available: &[Encoding]) -> Option<Encoding> {
        match &self.0 {
            Weights::Absent => None,
            Weights::Plain(named) => choose_plainly(*named, available),
            Weights::Weighted(named, star) => choose(named, *star, available),
        }
    }

    /// Whether `e` is acceptable (q > 0, by name or by `*`): exactly
    /// when `choose(&[e])` is `Some(e)`.
    #[inline]
    pub fn contains(&self, e: Encoding) -> bool {
        match &self.0 {
            Weights::Absent => false,
            Weights::Plain(named) => named & (STAR | 1 << e.index()) != 0,
            Weights::Weighted(named, star) => named[e.index()].or(*star).unwrap_or(0) > 0,
        }
    }
}

/// `named_plainly`'s bit for `*` (the codings' bits are `1 << index`).
const STAR: u8 = 1 << 3;
/// Every coding's bit.
const ALL_CODINGS: u8 = 0b111;

/// Each coding's q-value in thousandths (`None`: not named), and `*`'s,
/// for a value with parameters (a `;`).
#[inline(always)]
fn q_values(accept: &[u8]) -> ([Option<u16>; 3], Option<u16>) {
    // q-values in thousandths, per coding; None: not named.
    let mut named: [Option<u16>; 3] = [None; 3];
    let mut star: Option<u16> = None;
    // One pass over the bytes, element by element (up to a comma), each
    // a coding and its parameters (after semicolons). Split into
    // elements, then parameters, with each coding compared to the four
    // names in turn, it cost 348 instructions for `gzip,br` (callgrind
    // c50, GET / of the bundled archive).
    let n = accept.len();
    let mut at = 0;
    while at <= n {
        let end = stop(accept, at);
        let coding = trim_ows(&accept[at..end]);
        let mut q = 1000;
        let mut next = end;
        while next < n && accept[next] == b';' {
            let param_end = stop(accept, next + 1);
            let param = trim_ows(&accept[next + 1..param_end]);
            if let [b'q' | b'Q', b'=', v @ ..] = param {
                q = qvalue(v).unwrap_or(0);
            }
            next = param_end;
        }
        // `next` is at a comma or the end.
        at = next + 1;
        match coding_named(coding) {
            Named::Coding(e) => named[e.index()] = Some(q),
            Named::Star => star = Some(q),
            Named::Other => {}
        }
    }
    (named, star)
}

/// The codings a value without parameters names, each at q=1, as a set
/// (`1 << index`, and `STAR` for `*`; `None` if the value has a `;`: the
/// general scan reads it). Eight bytes at a
/// time: a word's commas and semicolons found at once (`bytes_equal`),
/// each element between commas trimmed and named (`name_plainly`).
/// A byte at a time, looking for either separator, it cost 572
/// instructions for `gzip, deflate, br, zstd` (callgrind c50, GET / of
/// the bundled archive), against the general scan's 597
/// (bench/runs/2026-11-28-arch12).
#[inline(always)]
fn named_plainly(accept: &[u8]) -> Option<u8> {
    let mut named = 0u8;
    let n = accept.len();
    // Where the element being read starts.
    let mut start = 0;
    let mut at = 0;
    while at < n {
        let word = match accept.get(at..at + 8) {
            Some(eight) => u64::from_le_bytes(eight.try_into().unwrap_or_default()),
            // The last bytes, zeros after them (a zero is neither
            // separator): the value's last eight, those already read
            // shifted out (copied into a zeroed word instead, they were
            // a call of memcpy, 14 instructions).
            None if n >= 8 => {
                let last = u64::from_le_bytes(accept[n - 8..].try_into().unwrap_or_default());
                last >> (8 * (at + 8 - n))
            }
            None => {
                let mut last = 0u64;
                for (i, &b) in accept[at..].iter().enumerate() {
                    last |= u64::from(b) << (8 * i);
                }
                last
            }
        };
        if bytes_equal(word, b';') != 0 {
            return None;
        }
        let mut commas = bytes_equal(word, b',');
        while commas != 0 {
            let comma = at + (commas.trailing_zeros() / 8) as usize;
            named |= name_plainly(&accept[start..comma]);
            start = comma + 1;
            commas &= commas - 1;
        }
        at += 8;
    }
    named |= name_plainly(&accept[start..]);
    Some(named)
}

/// The bytes of `word` equal to `b`: their high bits set, every other bit
/// clear. Exact (no carry crosses a byte: a byte's low seven bits plus
/// 0x7f is at most 0xfe), unlike the usual zero-byte test.
#[inline(always)]
fn bytes_equal(word: u64, b: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (0x0101_0101_0101_0101 * u64::from(b));
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// What one element of a value without parameters names, as
/// `named_plainly`'s bit (0 for another coding): `trim_ows` and
/// `coding_named` of it (`trim_ows`, across crates, was not inlined).
#[inline(always)]
fn name_plainly(element: &[u8]) -> u8 {
    let mut coding = element;
    while let [b' ' | b'\t', rest @ ..] = coding {
        coding = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = coding {
        coding = rest;
    }
    match coding_named(coding) {
        Named::Coding(e) => 1 << e.index(),
        Named::Star => STAR,
        Named::Other => 0,
    }
}

/// `choose` for a value without parameters, every coding it names (and
/// `*`) at q=1: the first of [`Encoding::ALL`] available and named (or
/// any available, with `*`). Sets, not q-values compared per coding
/// (`choose`'s loop with `available.contains`: about 90 instructions).
#[inline(always)]
fn choose_plainly(named: u8, available: &[Encoding]) -> Option<Encoding> {
    let mut offered = 0u8;
    for e in available {
        offered |= 1 << e.index();
    }
    let wanted = if named & STAR != 0 { ALL_CODINGS } else { named };
    match offered & wanted {
        0 => None,
        both => Some(Encoding::ALL[both.trailing_zeros() as usize]),
    }
}

/// The coding of the highest q-value among `available` (`named`: each
/// coding's q-value in thousandths if the field named it; `star`: `*`'s),
/// ties to the order of [`Encoding::ALL`], never one of q=0.
fn choose(named: &[Option<u16>; 3], star: Option<u16>, available: &[Encoding]) -> Option<Encoding> {
    let mut best: Option<(u16, Encoding)> = None;
    for e in Encoding::ALL {
        if !available.contains(&e) {
            continue;
        }
        let q = named[e.index()].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, e));
        }
    }
    best.map(|(_, e)| e)
}

/// Where the element or parameter that starts at `from` ends: the next
/// comma or semicolon, or the end.
#[inline(always)]
fn stop(accept: &[u8], from: usize) -> usize {
    accept
        .get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == b',' || b == b';'))
        .map_or(accept.len(), |i| from + i)
}

/// What an element's coding names.
enum Named {
    Coding(Encoding),
    Star,
    /// Another coding (`deflate`, `identity`, an unknown one), or none.
    Other,
}

/// The coding `coding` names, compared without regard to case (RFC 9110
/// §8.4.1: "All content codings are case-insensitive"): by length first,
/// then the short names as one word, each byte's case bit set (every
/// byte of `br`, `gzip` and `zstd` is a letter, so a byte matches only
/// as itself or its capital).
#[inline(always)]
fn coding_named(coding: &[u8]) -> Named {
    match *coding {
        [a, b] if (u16::from_le_bytes([a, b]) | 0x2020) == u16::from_le_bytes(*b"br") => {
            Named::Coding(Encoding::Brotli)
        }
        [a, b, c, d] => match u32::from_le_bytes([a, b, c, d]) | 0x2020_2020 {
            w if w == u32::from_le_bytes(*b"gzip") => Named::Coding(Encoding::Gzip),
            w if w == u32::from_le_bytes(*b"zstd") => Named::Coding(Encoding::Zstd),
            _ => Named::Other,
        },
        [b'*'] => Named::Star,
        _ if coding.eq_ignore_ascii_case(b"x-gzip") => Named::Coding(Encoding::Gzip),
        _ => Named::Other,
    }
}

/// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in
/// thousandths. Invalid → None (treated as 0: not acceptable).
fn qvalue(v: &[u8]) -> Option<u16> {
    let v = trim_ows(v);
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Encoding::*;

    #[test]
    fn the_best_acceptable_sibling_is_chosen() {
        let all = &[Brotli, Zstd, Gzip][..];
        let gz = &[Gzip][..];
        let table: &[(Option<&str>, &[Encoding], Option<Encoding>)] = &[
            (None, all, None),
            (Some(""), all, None),
            (Some("gzip, deflate, br, zstd"), all, Some(Brotli)),
            (Some("gzip, deflate, br"), &[Zstd, Gzip], Some(Gzip)),
            (Some("gzip;q=1.0, br;q=0.5"), all, Some(Gzip)),
            (Some("br;q=0, gzip"), all, Some(Gzip)),
            (Some("BR"), all, Some(Brotli)),
            (Some("zstd"), all, Some(Zstd)),
            // `zst` is the file suffix, not the coding's name.
            (Some("zst"), all, None),
            (Some("x-gzip"), gz, Some(Gzip)),
            (Some("*"), all, Some(Brotli)),
            (Some("*;q=0.5, br;q=0"), all, Some(Zstd)),
            (Some("*;q=0"), all, None),
            (Some("identity;q=0"), gz, None),
            (Some("identity;q=0, gzip"), gz, Some(Gzip)),
            (Some("gzip;q=0.001"), gz, Some(Gzip)),
            (Some("gzip;q=0.000"), gz, None),
            (Some("gzip;q=2"), gz, None),
            (Some("gzip;q=0.5, br;q=0.501"), all, Some(Brotli)),
            (Some("gzip ; q=0.5 , deflate"), gz, Some(Gzip)),
            (Some("deflate"), gz, None),
            (Some("gzip"), &[], None),
        ];
        for (accept, available, want) in table {
            assert_eq!(
                negotiate(accept.map(str::as_bytes), available),
                *want,
                "{accept:?} among {available:?}"
            );
        }
    }

    /// `bytes_equal` marks exactly the bytes equal to the one asked for,
    /// whatever their neighbours (a carry or borrow from one byte into
    /// the next would mark or miss one).
    #[test]
    fn bytes_equal_marks_exactly_the_equal_bytes() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..100_000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bytes = seed.to_le_bytes();
            let b = [b',', b';', 0, 0xff, 0x80, 0x7f, (seed >> 3) as u8][i as usize % 7];
            // Put the byte, and its neighbours in value, in some places.
            for (j, to) in bytes.iter_mut().enumerate() {
                match (seed >> (8 + 3 * j)) % 5 {
                    0 => *to = b,
                    1 => *to = b.wrapping_add(1),
                    2 => *to = b.wrapping_sub(1),
                    _ => {}
                }
            }
            let want = bytes
                .iter()
                .enumerate()
                .fold(0u64, |m, (j, &x)| if x == b { m | 0x80 << (8 * j) } else { m });
            assert_eq!(bytes_equal(u64::from_le_bytes(bytes), b), want, "{bytes:?} {b}");
        }
    }

    /// The negotiation as first written (split into elements, then
    /// parameters; each coding compared by name): the model the one-pass
    /// scan must agree with.
    fn negotiate_split(accept: &[u8], available: &[Encoding]) -> Option<Encoding> {
        let mut named: [Option<u16>; 3] = [None; 3];
        let mut star: Option<u16> = None;
        for element in accept.split(|&b| b == b',') {
            let mut params = element.split(|&b| b == b';');
            let coding = trim_ows(params.next().unwrap_or_default());
            if coding.is_empty() {
                continue;
            }
            let mut q = 1000;
            for param in params {
                let param = trim_ows(param);
                if let Some(v) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                    q = qvalue(v).unwrap_or(0);
                }
            }
            let slot = if coding.eq_ignore_ascii_case(b"br") {
                Some(Brotli)
            } else if coding.eq_ignore_ascii_case(b"zstd") {
                Some(Zstd)
            } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
                Some(Gzip)
            } else if coding == b"*" {
                star = Some(q);
                None
            } else {
                None
            };
            if let Some(e) = slot {
                named[e.index()] = Some(q);
            }
        }
        // The choice among the q-values is the code's own (`choose`):
        // what this model checks is the scan that finds them.
        choose(&named, star, available)
    }

    /// Random values over the bytes that matter (the names in both cases,
    /// their neighbours in the case-bit sense, separators, blanks,
    /// q-values) and any byte: the one-pass scan chooses as the split did,
    /// for every set of codings available.
    #[test]
    fn the_one_pass_scan_chooses_as_the_split_did() {
        const PIECES: &[&[u8]] = &[
            b"br",
            b"BR",
            b"bR",
            b"gzip",
            b"GZIP",
            b"gZiP",
            b"zstd",
            b"ZSTD",
            b"x-gzip",
            b"X-GZIP",
            b"x\rgzip",
            b"deflate",
            b"identity",
            b"*",
            b",",
            b",",
            b";",
            b";",
            b" ",
            b"\t",
            b"q=",
            b"Q=",
            b"q =",
            b"0",
            b"1",
            b".",
            b"5",
            b"000",
            b"0.5",
            b"1.0",
            b"1.001",
            b"b",
            b"r",
            b"gzi",
            b"zst",
            b"\x02r",
            b"B\x12",
            b"",
        ];
        let sets: [&[Encoding]; 8] = [
            &[],
            &[Brotli],
            &[Zstd],
            &[Gzip],
            &[Brotli, Zstd],
            &[Brotli, Gzip],
            &[Zstd, Gzip],
            &[Brotli, Zstd, Gzip],
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..200_000 {
            let mut value = Vec::new();
            for _ in 0..next() % 12 {
                let r = next();
                if r % 9 == 0 {
                    value.push((r >> 8) as u8);
                } else {
                    value.extend_from_slice(PIECES[(r >> 8) as usize % PIECES.len()]);
                }
            }
            let available = sets[i % sets.len()];
            // Half the values without parameters, for the plain scan.
            if i % 2 == 0 {
                value.retain(|&b| b != b';');
            }
            assert_eq!(
                negotiate(Some(&value), available),
                negotiate_split(&value, available),
                "{:?} among {available:?}",
                String::from_utf8_lossy(&value)
            );
            // `accepted` holds a coding exactly when it alone is chosen.
            let set = accepted(Some(&value));
            for e in Encoding::ALL {
                assert_eq!(
                    set.contains(e),
                    negotiate_split(&value, &[e]) == Some(e),
                    "{:?} {e:?}",
                    String::from_utf8_lossy(&value)
                );
            }
        }
        assert!(Encoding::ALL.iter().all(|&e| !accepted(None).contains(e)));
    }

    /// The memo answers as a fresh read, whatever came before: values of
    /// the same length that differ in one byte, a value after a longer
    /// one, the empty value, values longer than the memo, each repeated
    /// and interleaved.
    #[test]
    fn the_remembered_value_answers_as_a_fresh_read() {
        let values: &[&[u8]] = &[
            b"gzip, deflate, br, zstd",
            b"gzip, deflate, br, zstx",
            b"gzip, deflate, br, zst",
            b"xzip, deflate, br, zstd",
            b"gzip, deflate, br",
            b"",
            b"br;q=0, gzip",
            b"br;q=0, gzix",
            b"*",
            b"*;q=0",
            b"identity",
            b"gzip;q=0.5, br;q=0.9, zstd;q=0.1, deflate, identity;q=0",
            b"gzip;q=0.5, br;q=0.9, zstd;q=0.1, deflate, identity;q=1",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let v = values[(seed >> 32) as usize % values.len()];
            for _ in 0..1 + seed % 3 {
                assert_eq!(
                    accepted(Some(v)),
                    accepted_afresh(v),
                    "{:?}",
                    String::from_utf8_lossy(v)
                );
            }
        }
        // A value that differs from the remembered one only past its
        // length is not taken for it.
        assert_eq!(accepted(Some(b"gzip, br")), accepted_afresh(b"gzip, br"));
        assert_eq!(accepted(Some(b"gzip")), accepted_afresh(b"gzip"));
        assert_ne!(accepted(Some(b"br")), accepted(Some(b"gzip")));
    }
}
