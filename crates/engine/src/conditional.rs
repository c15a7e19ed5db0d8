//! Conditional requests (RFC 9110 §13): validators in, a verdict out.
//! Pure; the order of evaluation is §13.2.2's.

use crate::codec::head::trim_ows;
use std::time::SystemTime;

/// The request's precondition fields (raw values; absent when `None`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Preconditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
}

/// What to answer, given the selected representation's validators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on: answer normally (200 or 206).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates the preconditions of a GET or HEAD against a representation
/// with strong entity tag `etag` (quotes included) and `last_modified`.
pub fn evaluate(pre: &Preconditions<'_>, etag: &str, last_modified: SystemTime) -> Verdict {
    // Step 1: If-Match, strong comparison (§13.1.1).
    if let Some(value) = pre.if_match {
        if !matches_any(value, etag, Comparison::Strong) {
            return Verdict::PreconditionFailed;
        }
    } else if let Some(date) = pre.if_unmodified_since.and_then(parse_date) {
        // Step 2: If-Unmodified-Since, only without If-Match; an invalid
        // date is ignored (§13.1.4).
        if seconds(last_modified) > seconds(date) {
            return Verdict::PreconditionFailed;
        }
    }
    // Step 3: If-None-Match, weak comparison (§13.1.2).
    if let Some(value) = pre.if_none_match {
        if matches_any(value, etag, Comparison::Weak) {
            return Verdict::NotModified;
        }
    } else if let Some(date) = pre.if_modified_since.and_then(parse_date) {
        // Step 4: If-Modified-Since, only without If-None-Match.
        if seconds(last_modified) <= seconds(date) {
            return Verdict::NotModified;
        }
    }
    Verdict::Proceed
}

/// Whether a Range request may be honoured given its `If-Range` value
/// (§13.1.5): the entity tag must match strongly, or the date must equal
/// Last-Modified exactly. No `If-Range` means yes.
pub fn if_range_holds(value: Option<&[u8]>, etag: &str, last_modified: SystemTime) -> bool {
    if_range_holds_for(value, Some(etag), Some(last_modified))
}

/// [`if_range_holds`] for a representation that may lack either
/// validator (a stored answer: the proxy's cache): a tag or a date it
/// has not never holds. The one test of `If-Range` for every handler
/// (files, archives, the proxy's cache).
pub fn if_range_holds_for(value: Option<&[u8]>, etag: Option<&str>, last_modified: Option<SystemTime>) -> bool {
    let Some(value) = value else { return true };
    let value = trim_ows(value);
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        // §13.1.5: "A server MUST use a strong comparison", and in a
        // strong comparison (§8.8.3.2) a weak tag, the client's or the
        // representation's (a compressed answer's), matches nothing.
        return etag.is_some_and(|t| same_tag(value, t.as_bytes(), Comparison::Strong));
    }
    match (parse_date(value), last_modified) {
        (Some(d), Some(lm)) => seconds(d) == seconds(lm),
        _ => false,
    }
}

/// Steps 3 and 4 of §13.2.2 only, for a cache answering from a stored
/// response whose `ETag` or `Last-Modified` may be absent (RFC 9111
/// §4.3.2: a cache evaluates `If-None-Match` and `If-Modified-Since`;
/// `If-Match` and `If-Unmodified-Since` are the origin's): whether the
/// answer is a 304. `If-None-Match` decides when present (`*` matches
/// any stored answer); else `If-Modified-Since` against Last-Modified,
/// not evaluated without one.
pub fn not_modified(
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: Option<&str>,
    last_modified: Option<SystemTime>,
) -> bool {
    if let Some(value) = if_none_match {
        return match etag {
            Some(t) => matches_any(value, t, Comparison::Weak),
            None => trim_ows(value) == b"*",
        };
    }
    match (if_modified_since.and_then(parse_date), last_modified) {
        (Some(date), Some(lm)) => seconds(lm) <= seconds(date),
        _ => false,
    }
}

/// An HTTP date (`Last-Modified`, `If-Modified-Since`), `None` if it is
/// not one.
pub fn parse_http_date(value: &[u8]) -> Option<SystemTime> {
    parse_date(value)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// `*` or a list of entity tags, one of which matches `etag`.
fn matches_any(value: &[u8], etag: &str, how: Comparison) -> bool {
    let value = trim_ows(value);
    let ours = etag.as_bytes();
    // One tag, what a browser sends back (the ETag it was given): compared
    // at once, its inner bytes searched for a quote eight at a time.
    // Through `tags`' iterator a 22-byte tag cost about 226 instructions,
    // this about 140, with `memchr` (a call through its dispatch pointer)
    // 159 (callgrind c50, a revalidation of the bundled archive's GET /,
    // which compares tags twice or three times: bench/runs/2026-11-28-arch13).
    if let Some(tag) = one_tag(value) {
        return same_tag(tag, ours, how);
    }
    if value == b"*" {
        return true;
    }
    tags(value).any(|tag| same_tag(tag, ours, how))
}

/// `value` if it is exactly one entity tag (`"..."` or `W/"..."`, no
/// other quote, nothing around it): the only tag `tags` would give.
#[inline(always)]
fn one_tag(value: &[u8]) -> Option<&[u8]> {
    match value.strip_prefix(b"W/").unwrap_or(value) {
        [b'"', inner @ .., b'"'] if !has_quote(inner) => Some(value),
        _ => None,
    }
}

/// Whether `s` holds a `"`: eight bytes at a time, the last word the
/// last eight bytes (read again in part), a byte at a time under eight.
#[inline(always)]
fn has_quote(s: &[u8]) -> bool {
    let n = s.len();
    if n < 8 {
        return s.contains(&b'"');
    }
    let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let mut at = 0;
    while at + 8 < n {
        if quote_bytes(word(at)) != 0 {
            return true;
        }
        at += 8;
    }
    quote_bytes(word(n - 8)) != 0
}

/// The bytes of `word` that are `"`: their high bits set, every other bit
/// clear. Exact (no carry crosses a byte: a byte's low seven bits plus
/// 0x7f is at most 0xfe).
#[inline(always)]
fn quote_bytes(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (0x0101_0101_0101_0101 * u64::from(b'"'));
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Whether a tag of the request's list matches ours.
#[inline(always)]
fn same_tag(tag: &[u8], ours: &[u8], how: Comparison) -> bool {
    match how {
        // Strong: both strong and identical.
        Comparison::Strong => !tag.starts_with(b"W/") && !ours.starts_with(b"W/") && tag == ours,
        // Weak: opaque tags identical, weakness ignored.
        Comparison::Weak => tag.strip_prefix(b"W/").unwrap_or(tag) == ours.strip_prefix(b"W/").unwrap_or(ours),
    }
}

/// The entity tags of a list, quotes included; commas inside quotes are
/// part of the tag (an entity tag may hold any byte but `"`).
fn tags(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = list;
    std::iter::from_fn(move || loop {
        rest = trim_start(rest);
        while let [b',', tail @ ..] = rest {
            rest = trim_start(tail);
        }
        if rest.is_empty() {
            return None;
        }
        let start = rest;
        let body = rest.strip_prefix(b"W/").unwrap_or(rest);
        let prefix = start.len() - body.len();
        if body.first() == Some(&b'"') {
            if let Some(close) = body[1..].iter().position(|&b| b == b'"') {
                let len = prefix + close + 2;
                rest = &start[len..];
                return Some(&start[..len]);
            }
        }
        // Not an entity tag: skip to the next comma.
        let end = start.iter().position(|&b| b == b',').unwrap_or(start.len());
        rest = &start[end..];
        if rest.is_empty() {
            return None;
        }
    })
}

fn parse_date(value: &[u8]) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(trim_ows(value)).ok()?).ok()
}

/// HTTP dates have one-second resolution; compare at that.
fn seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TAG: &str = "\"abc\"";

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    // 1994-11-06 08:49:37 UTC, RFC 9110's example date.
    const T: u64 = 784_111_777;
    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const EARLIER: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";

    #[test]
    fn preconditions_are_evaluated_in_rfc_order() {
        use Verdict::*;
        let none = Preconditions::default();
        let table: &[(Preconditions<'_>, Verdict)] = &[
            (none, Proceed),
            // If-None-Match: weak comparison, lists, *.
            (
                Preconditions {
                    if_none_match: Some(b"\"abc\""),
                    ..none
                },
                NotModified,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"W/\"abc\""),
                    ..none
                },
                NotModified,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"\"x\", \"abc\""),
                    ..none
                },
                NotModified,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"\"x\",\"y\""),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"*"),
                    ..none
                },
                NotModified,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"\"a,bc\""),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"abc"),
                    ..none
                },
                Proceed,
            ),
            // If-Modified-Since, ignored when If-None-Match is present.
            (
                Preconditions {
                    if_modified_since: Some(DATE),
                    ..none
                },
                NotModified,
            ),
            (
                Preconditions {
                    if_modified_since: Some(EARLIER),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_modified_since: Some(b"yesterday"),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_none_match: Some(b"\"x\""),
                    if_modified_since: Some(DATE),
                    ..none
                },
                Proceed,
            ),
            // If-Match: strong comparison, and it wins over If-None-Match.
            (
                Preconditions {
                    if_match: Some(b"\"abc\""),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_match: Some(b"W/\"abc\""),
                    ..none
                },
                PreconditionFailed,
            ),
            (
                Preconditions {
                    if_match: Some(b"*"),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_match: Some(b"\"x\""),
                    ..none
                },
                PreconditionFailed,
            ),
            (
                Preconditions {
                    if_match: Some(b"\"x\""),
                    if_none_match: Some(b"\"abc\""),
                    ..none
                },
                PreconditionFailed,
            ),
            // If-Unmodified-Since, ignored when If-Match is present.
            (
                Preconditions {
                    if_unmodified_since: Some(EARLIER),
                    ..none
                },
                PreconditionFailed,
            ),
            (
                Preconditions {
                    if_unmodified_since: Some(DATE),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_match: Some(b"\"abc\""),
                    if_unmodified_since: Some(EARLIER),
                    ..none
                },
                Proceed,
            ),
            (
                Preconditions {
                    if_unmodified_since: Some(b"garbage"),
                    ..none
                },
                Proceed,
            ),
        ];
        for (pre, want) in table {
            assert_eq!(evaluate(pre, TAG, at(T)), *want, "{pre:?}");
        }
    }

    /// The list scan alone, as `matches_any` was before its one-tag path:
    /// the model that path must agree with.
    fn matches_listed(value: &[u8], etag: &str, how: Comparison) -> bool {
        let value = trim_ows(value);
        value == b"*" || tags(value).any(|tag| same_tag(tag, etag.as_bytes(), how))
    }

    /// Random values over the bytes that matter (quotes, `W/`, commas,
    /// blanks, `*`, the tag's own letters) against tags well and badly
    /// formed: `matches_any` answers as the list scan does, both ways.
    #[test]
    fn one_tag_matches_as_the_list_scan_does() {
        const PIECES: &[&[u8]] = &[
            b"\"", b"\"", b"\"ab\"", b"W/", b"w/", b"W", b"/", b",", b" ", b"\t", b"*", b"a", b"b", b"\"a", b"abcdefg",
            b"\xa2", b"#",
        ];
        const OURS: &[&str] = &[
            "\"ab\"",
            "W/\"ab\"",
            "\"a\"",
            "\"\"",
            "ab",
            "\"a\"b\"",
            "\"a,b\"",
            "W/ab",
            "\"abcdefgabcdefg\"",
            "\"ababcdefgabcdefgab\"",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut n_single = 0;
        for i in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let ours = OURS[(seed >> 40) as usize % OURS.len()];
            let mut value = Vec::new();
            match i % 4 {
                // Anything.
                0 | 1 => {
                    for k in 0..(seed % 11) {
                        value.extend_from_slice(PIECES[(seed >> (8 + 4 * k)) as usize % PIECES.len()]);
                    }
                }
                // Quotes around anything (a quote inside now and then),
                // weak or not, blanks around sometimes.
                2 => {
                    value.extend_from_slice([&b""[..], b"W/", b" ", b"\t"][(seed >> 50) as usize % 4]);
                    value.push(b'"');
                    for k in 0..(seed % 11) {
                        let piece = PIECES[(seed >> (8 + 4 * k)) as usize % PIECES.len()];
                        if (seed >> 60) % 4 == 0 || !piece.contains(&b'"') {
                            value.extend_from_slice(piece);
                        }
                    }
                    value.push(b'"');
                    value.extend_from_slice([&b""[..], b" "][(seed >> 55) as usize % 2]);
                }
                // Our own tag, weakened or not.
                _ => {
                    if seed % 2 == 0 {
                        value.extend_from_slice(b"W/");
                    }
                    value.extend_from_slice(ours.as_bytes());
                }
            }
            n_single += usize::from(one_tag(trim_ows(&value)).is_some());
            for how in [Comparison::Strong, Comparison::Weak] {
                assert_eq!(
                    matches_any(&value, ours, how),
                    matches_listed(&value, ours, how),
                    "{:?} against {ours}",
                    String::from_utf8_lossy(&value)
                );
            }
        }
        // Both paths were taken, often.
        assert!(n_single > 50_000, "{n_single}");
    }

    #[test]
    fn if_range_needs_a_strong_match_or_the_exact_date() {
        assert!(if_range_holds(None, TAG, at(T)));
        assert!(if_range_holds(Some(b"\"abc\""), TAG, at(T)));
        assert!(!if_range_holds(Some(b"W/\"abc\""), TAG, at(T)));
        assert!(!if_range_holds(Some(b"\"x\""), TAG, at(T)));
        assert!(if_range_holds(Some(DATE), TAG, at(T)));
        assert!(!if_range_holds(Some(EARLIER), TAG, at(T)));
        assert!(!if_range_holds(Some(b"nonsense"), TAG, at(T)));
    }

    /// RFC 9110 §13.1.5: a strong comparison, so a weak tag never holds,
    /// even byte for byte the representation's own weak tag.
    #[test]
    fn if_range_never_holds_for_a_weak_tag() {
        assert!(!if_range_holds_for(Some(b"W/\"e1\""), Some("W/\"e1\""), None));
        assert!(!if_range_holds_for(Some(b"\"e1\""), Some("W/\"e1\""), None));
        assert!(!if_range_holds_for(Some(b" W/\"e1\" "), Some("\"e1\""), None));
        assert!(if_range_holds_for(Some(b" \"e1\" "), Some("\"e1\""), None));
    }

    #[test]
    fn a_stored_answer_without_a_validator_matches_only_star() {
        // A cache's answer (`not_modified`): If-None-Match decides when
        // given, `*` matching any stored answer, a tag only its own.
        assert!(not_modified(Some(b"*"), None, None, None));
        assert!(!not_modified(Some(b"\"abc\""), None, None, Some(at(T))));
        assert!(not_modified(Some(b"W/\"abc\""), None, Some(TAG), None));
        // Step 3 before 4: a tag that does not match is a 200, whatever
        // the date says.
        assert!(!not_modified(Some(b"\"x\""), Some(DATE), Some(TAG), Some(at(T))));
        assert!(not_modified(None, Some(DATE), Some(TAG), Some(at(T))));
        assert!(!not_modified(None, Some(EARLIER), Some(TAG), Some(at(T))));
        // No Last-Modified: If-Modified-Since is not evaluated.
        assert!(!not_modified(None, Some(DATE), Some(TAG), None));
        // If-Range without the validator it names never holds.
        assert!(!if_range_holds_for(Some(b"\"abc\""), None, Some(at(T))));
        assert!(!if_range_holds_for(Some(DATE), Some(TAG), None));
        assert!(if_range_holds_for(Some(DATE), None, Some(at(T))));
    }
}
