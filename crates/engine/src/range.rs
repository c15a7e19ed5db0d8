//! The `Range` header (RFC 9110 §14.1.2, §14.2): which byte ranges of a
//! representation of known length a client asked for. Pure and fuzzed.
//!
//! ```text
//! Range          = ranges-specifier
//! ranges-specifier = range-unit "=" range-set
//! range-set      = 1#range-spec
//! range-spec     = int-range / suffix-range / other-range
//! int-range      = first-pos "-" [ last-pos ]
//! suffix-range   = "-" suffix-length
//! ```
//!
//! Defences against amplification (RFC 9110 §14.2 "Security
//! Considerations"): ranges are sorted and overlapping or adjacent ones
//! merged, so no byte is sent twice; more than `PARTS_MAX` ranges after that,
//! or a header with more than `SPECS_MAX` specs, and the header is ignored
//! (a full 200, which RFC 9110 allows).

use crate::codec::head::trim_ows;
use std::ops::Range;

/// Range specs read from one header, at most; more and the header is ignored.
pub const SPECS_MAX: usize = 256;
/// Distinct parts sent in one `multipart/byteranges` answer, at most.
pub const PARTS_MAX: usize = 32;

/// What to send for a `Range` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// Ignore the header: send the whole representation (200). Used for a
    /// unit other than `bytes`, bad syntax, and lists too long to honour.
    Full,
    /// Send these ranges (206): sorted, disjoint, non-adjacent, non-empty.
    Partial(Vec<Range<u64>>),
    /// No range overlaps the representation (416).
    Unsatisfiable,
}

/// Evaluates a `Range` header value against a representation of `len` bytes.
pub fn parse(value: &[u8], len: u64) -> Ranges {
    let Some(set) = strip_unit(value) else {
        return Ranges::Full;
    };
    let mut ranges: Vec<Range<u64>> = Vec::new();
    let mut n_specs = 0;
    // A suffix of a zero-length representation: satisfiable, but no bytes.
    let mut satisfiable_empty = false;
    for spec in set.split(|&b| b == b',') {
        let spec = trim_ows(spec);
        if spec.is_empty() {
            // RFC 9110 §5.6.1: empty list elements are allowed and ignored.
            continue;
        }
        n_specs += 1;
        if n_specs > SPECS_MAX {
            return Ranges::Full;
        }
        let Some(range) = parse_spec(spec) else {
            // One malformed spec makes the whole header invalid.
            return Ranges::Full;
        };
        match satisfy(range, len) {
            Some(r) if r.is_empty() => satisfiable_empty = true,
            Some(r) => ranges.push(r),
            None => {}
        }
    }
    if n_specs == 0 {
        return Ranges::Full;
    }
    if ranges.is_empty() {
        // §14.1.1: "If the selected representation has zero length, the
        // only satisfiable form of range-spec is a suffix-range with a
        // non-zero suffix-length." It has no bytes to send in a 206, so
        // the header is ignored (§14.2 allows it): a 200, as nginx
        // answers, not a 416.
        return if satisfiable_empty {
            Ranges::Full
        } else {
            Ranges::Unsatisfiable
        };
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    if merged.len() > PARTS_MAX {
        return Ranges::Full;
    }
    Ranges::Partial(merged)
}

/// A spec as written: `a-b`, `a-` or `-n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    FromTo(u64, u64),
    From(u64),
    Suffix(u64),
}

fn strip_unit(value: &[u8]) -> Option<&[u8]> {
    let value = trim_ows(value);
    let (unit, set) = value.split_at(value.iter().position(|&b| b == b'=')?);
    // Range units are case-insensitive (RFC 9110 §14.1).
    unit.eq_ignore_ascii_case(b"bytes").then_some(&set[1..])
}

fn parse_spec(spec: &[u8]) -> Option<Spec> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(Spec::Suffix(number(last)?)),
        (false, true) => Some(Spec::From(number(first)?)),
        (false, false) => {
            let (a, b) = (number(first)?, number(last)?);
            // "A client MUST NOT generate an int-range with a last-pos
            // smaller than its first-pos": invalid, which voids the header.
            (a <= b).then_some(Spec::FromTo(a, b))
        }
    }
}

/// 1*DIGIT, no sign, no spaces; None on overflow.
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The bytes of a spec within `len`, if it is satisfiable (RFC 9110
/// §14.1.1); empty only for a suffix of a zero-length representation.
fn satisfy(spec: Spec, len: u64) -> Option<Range<u64>> {
    match spec {
        Spec::FromTo(a, _) | Spec::From(a) if a >= len => None,
        Spec::FromTo(a, b) => Some(a..b.min(len - 1) + 1),
        Spec::From(a) => Some(a..len),
        Spec::Suffix(0) => None,
        Spec::Suffix(n) => Some(len.saturating_sub(n)..len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(v: &[(u64, u64)]) -> Ranges {
        Ranges::Partial(v.iter().map(|&(a, b)| a..b).collect())
    }

    #[test]
    fn ranges_follow_rfc_9110_examples() {
        // RFC 9110 §14.1.2's examples, for a 10,000-byte representation.
        let len = 10_000;
        let table: &[(&str, Ranges)] = &[
            ("bytes=0-499", partial(&[(0, 500)])),
            ("bytes=500-999", partial(&[(500, 1000)])),
            ("bytes=-500", partial(&[(9500, 10_000)])),
            ("bytes=9500-", partial(&[(9500, 10_000)])),
            ("bytes=0-0,-1", partial(&[(0, 1), (9999, 10_000)])),
            (
                "bytes= 0-999, 4500-5499, -1000",
                partial(&[(0, 1000), (4500, 5500), (9000, 10_000)]),
            ),
            ("bytes=500-600,601-999", partial(&[(500, 1000)])),
            ("bytes=500-700,601-999", partial(&[(500, 1000)])),
            // Clamped to the end; a suffix longer than the whole is the whole.
            ("bytes=9000-20000", partial(&[(9000, 10_000)])),
            ("bytes=-20000", partial(&[(0, 10_000)])),
            ("BYTES=0-1", partial(&[(0, 2)])),
            ("bytes=0-1,,", partial(&[(0, 2)])),
            // Unsatisfiable: every range starts past the end.
            ("bytes=10000-", Ranges::Unsatisfiable),
            ("bytes=10000-10001, 20000-", Ranges::Unsatisfiable),
            ("bytes=-0", Ranges::Unsatisfiable),
            // Ignored: other units, bad syntax.
            ("items=0-1", Ranges::Full),
            ("bytes", Ranges::Full),
            ("bytes=", Ranges::Full),
            ("bytes=5-1", Ranges::Full),
            ("bytes=a-b", Ranges::Full),
            ("bytes=-", Ranges::Full),
            ("bytes=1-2-3", Ranges::Full),
            ("bytes=+1-2", Ranges::Full),
            ("bytes=0-1;x", Ranges::Full),
            ("bytes=99999999999999999999-", Ranges::Full),
        ];
        for (value, want) in table {
            assert_eq!(&parse(value.as_bytes(), len), want, "{value}");
        }
    }

    #[test]
    fn empty_representations_satisfy_only_suffixes() {
        assert_eq!(parse(b"bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(parse(b"bytes=0-0", 0), Ranges::Unsatisfiable);
        assert_eq!(parse(b"bytes=-0", 0), Ranges::Unsatisfiable);
        // RFC 9110 §14.1.1: a non-zero suffix is satisfiable; it has no
        // bytes for a 206, so the whole (empty) representation, 200.
        assert_eq!(parse(b"bytes=-5", 0), Ranges::Full);
        assert_eq!(parse(b"bytes=0-0,-5", 0), Ranges::Full);
    }

    #[test]
    fn absurd_lists_do_not_amplify() {
        // A thousand overlapping ranges are one part.
        let many = format!("bytes={}", vec!["0-9999"; 200].join(","));
        assert_eq!(parse(many.as_bytes(), 10_000), partial(&[(0, 10_000)]));
        // Too many distinct parts: the whole file, once.
        let spread: Vec<String> = (0..40).map(|i| format!("{}-{}", i * 10, i * 10 + 1)).collect();
        let spread = format!("bytes={}", spread.join(","));
        assert_eq!(parse(spread.as_bytes(), 10_000), Ranges::Full);
        // Too many specs to read.
        let long = format!("bytes={}", vec!["0-0"; SPECS_MAX + 1].join(","));
        assert_eq!(parse(long.as_bytes(), 10_000), Ranges::Full);
    }
}
