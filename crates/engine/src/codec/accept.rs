//! Reading `Accept-Encoding` (RFC 9110 §12.5.3): what q-value a value gives
//! each content coding Peregrine sends (`br`, `zstd`, `gzip`, by
//! [`BROTLI`], [`ZSTD`], [`GZIP`]) and `*`. One reader for the files
//! crate's pre-compressed siblings and the proxy's compression, so a value
//! means the same to both; the choice among the codings a sender has is
//! each one's own.
//!
//! A coding named twice keeps its highest q-value (`gzip, gzip;q=0`
//! accepts gzip), as Caddy (every element with q > 0 is a candidate) and
//! nginx (the first `gzip` found) read it; RFC 9110 does not say.

use super::head::trim_ows;

/// [`Weights`]' index of `br`.
pub const BROTLI: usize = 0;
/// [`Weights`]' index of `zstd`.
pub const ZSTD: usize = 1;
/// [`Weights`]' index of `gzip` (and `x-gzip`, RFC 9110 §8.4.1.3).
pub const GZIP: usize = 2;
/// [`Weights::Plain`]'s bit for `*` (a coding's bit is `1 << index`).
pub const STAR: u8 = 1 << 3;

/// The q-values an `Accept-Encoding` value gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// No field: identity only.
    Absent,
    /// No parameters: the codings named (`1 << index`, and [`STAR`]),
    /// each at q=1.
    Plain(u8),
    /// Each coding's q-value in thousandths (`None`: not named), by
    /// index, and `*`'s.
    Weighted([Option<u16>; 3], Option<u16>),
}

impl Weights {
    /// The q-value in thousandths the value gives coding `index`, by
    /// name or by `*`; 0 when neither (not acceptable).
    #[inline]
    pub fn q(&self, index: usize) -> u16 {
        match *self {
            Weights::Absent => 0,
            Weights::Plain(named) => {
                if named & (STAR | 1 << index) != 0 {
                    1000
                } else {
                    0
                }
            }
            Weights::Weighted(named, star) => named[index].or(star).unwrap_or(0),
        }
    }
}

/// What `accept` (a field's value, `None` when absent) gives each coding.
#[inline]
pub fn weights(accept: Option<&[u8]>) -> Weights {
    let Some(accept) = accept else {
        return Weights::Absent;
    };
    // A value without parameters, as every browser sends (`gzip, deflate,
    // br, zstd`): eight bytes at a time, no q-values. The general scan
    // cost 597 instructions for that value, this about 500; a browser's
    // archive answer 2,887 -> 2,793 (callgrind c50, GET / of the bundled
    // archive, bench/runs/2026-11-28-arch12); with the files crate's choice
    // by sets 368 and 2,707 (bench/runs/2026-11-28-arch13).
    match named_plainly(accept) {
        Some(named) => Weights::Plain(named),
        None => {
            let (named, star) = q_values(accept);
            Weights::Weighted(named, star)
        }
    }
}

/// Each coding's q-value in thousandths (`None`: not named), and `*`'s,
/// for a value with parameters (a `;`).
#[inline(always)]
fn q_values(accept: &[u8]) -> ([Option<u16>; 3], Option<u16>) {
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
        let slot = match coding_named(coding) {
            Named::Coding(i) => &mut named[i],
            Named::Star => &mut star,
            Named::Other => continue,
        };
        // Named twice: the highest q-value.
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
    (named, star)
}

/// The codings a value without parameters names, each at q=1, as a set
/// (`1 << index`, and [`STAR`] for `*`; `None` if the value has a `;`:
/// the general scan reads it). Eight bytes at a time: a word's commas and
/// semicolons found at once (`bytes_equal`), each element between commas
/// trimmed and named (`name_plainly`). A byte at a time, looking for
/// either separator, it cost 572 instructions for `gzip, deflate, br,
/// zstd` (callgrind c50, GET / of the bundled archive), against the
/// general scan's 597 (bench/runs/2026-11-28-arch12).
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
/// `coding_named` of it (`trim_ows` was not inlined here when this was
/// the files crate's).
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
        Named::Coding(i) => 1 << i,
        Named::Star => STAR,
        Named::Other => 0,
    }
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
    /// A coding's index.
    Coding(usize),
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
        [a, b] if (u16::from_le_bytes([a, b]) | 0x2020) == u16::from_le_bytes(*b"br") => Named::Coding(BROTLI),
        [a, b, c, d] => match u32::from_le_bytes([a, b, c, d]) | 0x2020_2020 {
            w if w == u32::from_le_bytes(*b"gzip") => Named::Coding(GZIP),
            w if w == u32::from_le_bytes(*b"zstd") => Named::Coding(ZSTD),
            _ => Named::Other,
        },
        [b'*'] => Named::Star,
        _ if coding.eq_ignore_ascii_case(b"x-gzip") => Named::Coding(GZIP),
        _ => Named::Other,
    }
}

/// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
/// (RFC 9110 §12.4.2), in thousandths. Invalid: `None` (taken as 0, not
/// acceptable, by the readers here).
pub fn qvalue(v: &[u8]) -> Option<u16> {
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

    #[test]
    fn each_coding_gets_its_q_value() {
        let q = |v: &str| {
            let w = weights(Some(v.as_bytes()));
            [w.q(BROTLI), w.q(ZSTD), w.q(GZIP)]
        };
        assert_eq!([0, 0, 0], {
            let w = weights(None);
            [w.q(BROTLI), w.q(ZSTD), w.q(GZIP)]
        });
        for (value, want) in [
            ("", [0, 0, 0]),
            ("gzip, deflate, br, zstd", [1000, 1000, 1000]),
            ("GZIP;Q=0.8", [0, 0, 800]),
            ("x-gzip", [0, 0, 1000]),
            ("zst", [0, 0, 0]),
            ("*;q=0.5, br;q=0", [0, 500, 500]),
            ("gzip;q=2", [0, 0, 0]),
            ("gzip;q=0.0001", [0, 0, 0]),
            ("gzip ; q=0.5 , deflate", [0, 0, 500]),
            // Named twice: the highest q-value, in either order.
            ("gzip, gzip;q=0", [0, 0, 1000]),
            ("gzip;q=0, gzip", [0, 0, 1000]),
            ("br;q=0.5, br;q=0.9, br;q=0.2", [900, 0, 0]),
            ("*;q=0, *", [1000, 1000, 1000]),
            ("x-gzip;q=0.3, gzip;q=0.2", [0, 0, 300]),
        ] {
            assert_eq!(q(value), want, "{value:?}");
        }
    }
}
