//! What an upstream's answer says about its own caching, as a shared
//! cache reads it: `Cache-Control` (RFC 9111 §5.2.2), `Expires`, `Date`
//! and `Age` (§5.1, §5.3), and the freshness arithmetic of §4.2. No I/O,
//! no clock: the caller gives the times.

use crate::codec::head::{list_elements, trim_ows};

/// RFC 9111 §1.2.2: "If a cache receives a delta-seconds value greater
/// than the greatest integer it can represent, or if any of its
/// subsequent calculations overflows, the cache MUST consider the value
/// to be 2147483648 (2^31) or the greatest positive integer it can
/// conveniently represent."
pub(crate) const DELTA_MAX: u64 = 1 << 31;

/// The response directives a shared cache acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Directives {
    pub(crate) no_store: bool,
    /// `no-cache` (with or without field names): this cache never
    /// revalidates, so such an answer is not stored at all.
    pub(crate) no_cache: bool,
    /// `private` (with or without field names): never in a shared cache.
    pub(crate) private: bool,
    pub(crate) public: bool,
    /// `must-revalidate` or `proxy-revalidate`: never served stale
    /// (RFC 9111 §5.2.2.2, §5.2.2.8), whatever RFC 5861 would allow.
    pub(crate) must_revalidate: bool,
    pub(crate) max_age: Option<u64>,
    pub(crate) s_maxage: Option<u64>,
    /// RFC 5861's extensions, seconds past freshness.
    pub(crate) stale_while_revalidate: Option<u64>,
    pub(crate) stale_if_error: Option<u64>,
    /// A directive this cache must understand came twice with different
    /// values, or with a value that is not delta-seconds: the answer is
    /// taken as stale (RFC 9111 §4.2.1: "either the first occurrence
    /// should be used or the response should be considered stale"; the
    /// safer of the two).
    pub(crate) conflicting: bool,
}

/// Adds the elements of one `Cache-Control` field value to `d`.
pub(crate) fn parse_into(d: &mut Directives, value: &[u8]) {
    for element in list_elements(value) {
        let (name, arg) = match element.iter().position(|&b| b == b'=') {
            Some(eq) => (trim_ows(&element[..eq]), Some(unquote(trim_ows(&element[eq + 1..])))),
            None => (element, None),
        };
        let seconds = |slot: &mut Option<u64>, conflicting: &mut bool| match arg.and_then(delta_seconds) {
            Some(n) if slot.is_none_or(|old| old == n) => *slot = Some(n),
            _ => *conflicting = true,
        };
        if name.eq_ignore_ascii_case(b"no-store") {
            d.no_store = true;
        } else if name.eq_ignore_ascii_case(b"no-cache") {
            d.no_cache = true;
        } else if name.eq_ignore_ascii_case(b"private") {
            d.private = true;
        } else if name.eq_ignore_ascii_case(b"public") {
            d.public = true;
        } else if name.eq_ignore_ascii_case(b"must-revalidate") || name.eq_ignore_ascii_case(b"proxy-revalidate") {
            d.must_revalidate = true;
        } else if name.eq_ignore_ascii_case(b"max-age") {
            seconds(&mut d.max_age, &mut d.conflicting);
        } else if name.eq_ignore_ascii_case(b"s-maxage") {
            seconds(&mut d.s_maxage, &mut d.conflicting);
        } else if name.eq_ignore_ascii_case(b"stale-while-revalidate") {
            // An extension: one we cannot read is ignored, not fatal.
            let mut ignored = false;
            seconds(&mut d.stale_while_revalidate, &mut ignored);
        } else if name.eq_ignore_ascii_case(b"stale-if-error") {
            let mut ignored = false;
            seconds(&mut d.stale_if_error, &mut ignored);
        }
        // Others (no-transform, immutable, extensions) change nothing here.
    }
}

/// A quoted-string's inside (RFC 9110 §5.6.4: `max-age="5"` is
/// tolerated, §5.2 of RFC 9111 says senders should not, recipients may).
fn unquote(v: &[u8]) -> &[u8] {
    match v {
        [b'"', inner @ .., b'"'] => inner,
        _ => v,
    }
}

/// `delta-seconds = 1*DIGIT` (RFC 9111 §1.2.2), capped at [`DELTA_MAX`].
pub(crate) fn delta_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
        if n >= DELTA_MAX {
            return Some(DELTA_MAX);
        }
    }
    Some(n)
}

/// An HTTP-date (RFC 9110 §5.6.7) as seconds since the epoch; `None` when
/// it is not one (RFC 9111 §5.3: an invalid `Expires` "represents a time
/// in the past (i.e., 'already expired')").
pub(crate) fn http_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(trim_ows(v)).ok()?;
    let t = httpdate::parse_http_date(s).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

/// What the answer's fields say of its freshness, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Freshness {
    /// How long it is fresh from its generation (RFC 9111 §4.2.1).
    pub(crate) lifetime: u64,
    /// Its age when received (§4.2.3's `corrected_initial_age`, without
    /// the request's round trip: the upstream is near).
    pub(crate) initial_age: u64,
}

/// The explicit freshness of an answer (RFC 9111 §4.2.1): `s-maxage`,
/// else `max-age`, else `Expires` minus `Date`; `None` without any of
/// them (this cache uses no heuristic freshness, as nginx does not), or
/// with an `Expires` that is not a date. `date`, `expires` and `age` are
/// the fields' values; `now` the time received, seconds since the epoch.
pub(crate) fn freshness(
    d: &Directives,
    date: Option<&[u8]>,
    expires: Option<&[u8]>,
    age: Option<&[u8]>,
    now: u64,
) -> Option<Freshness> {
    if d.conflicting {
        return None;
    }
    // RFC 9110 §6.6.1: a recipient with a clock gives a response without
    // a Date the time it was received.
    let date_value = date.and_then(http_date).unwrap_or(now);
    let lifetime = match (d.s_maxage, d.max_age) {
        (Some(s), _) => s,
        (None, Some(m)) => m,
        (None, None) => {
            // RFC 9111 §5.3: "If a response includes a Cache-Control
            // header field with the max-age directive, a recipient MUST
            // ignore the Expires header field."
            let expires = http_date(expires?)?;
            expires.saturating_sub(date_value)
        }
    };
    // §4.2.3: apparent_age = max(0, response_time - date_value);
    // corrected_initial_age = max(apparent_age, age_value).
    let apparent_age = now.saturating_sub(date_value);
    let age_value = age.and_then(|a| delta_seconds(trim_ows(a))).unwrap_or(0);
    Some(Freshness {
        lifetime: lifetime.min(DELTA_MAX),
        initial_age: apparent_age.max(age_value).min(DELTA_MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Directives {
        let mut d = Directives::default();
        for v in values {
            parse_into(&mut d, v.as_bytes());
        }
        d
    }

    #[test]
    fn directives_are_read_case_insensitively_with_arguments() {
        let d = parse(&[
            "Public, MAX-AGE=60, s-maxage=\"30\"",
            "stale-while-revalidate=5,stale-if-error=600",
        ]);
        assert!(d.public && !d.private && !d.no_store && !d.no_cache && !d.conflicting);
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(30)));
        assert_eq!((d.stale_while_revalidate, d.stale_if_error), (Some(5), Some(600)));
    }

    #[test]
    fn qualified_private_and_no_cache_count_as_the_plain_ones() {
        let d = parse(&["private=\"Set-Cookie\", no-cache=\"x\"", "proxy-revalidate"]);
        assert!(d.private && d.no_cache && d.must_revalidate);
        assert!(parse(&["no-store"]).no_store);
    }

    #[test]
    fn conflicting_or_invalid_ages_make_the_answer_stale() {
        for v in [
            &["max-age=5, max-age=6"][..],
            &["max-age=5", "max-age=7"],
            &["max-age=-1"],
            &["max-age=1.5"],
            &["max-age"],
        ] {
            let d = parse(v);
            assert!(d.conflicting, "{v:?}");
            assert_eq!(freshness(&d, None, None, None, 1000), None, "{v:?}");
        }
        // The same value twice is not a conflict.
        assert!(!parse(&["max-age=5, max-age=5"]).conflicting);
        // An unreadable extension is ignored.
        let d = parse(&["max-age=5, stale-if-error=x"]);
        assert!(!d.conflicting && d.stale_if_error.is_none());
    }

    #[test]
    fn huge_delta_seconds_are_capped_at_two_to_the_31() {
        assert_eq!(delta_seconds(b"99999999999999999999999999"), Some(DELTA_MAX));
        assert_eq!(delta_seconds(b"2147483647"), Some(DELTA_MAX - 1));
        assert_eq!(delta_seconds(b""), None);
        assert_eq!(delta_seconds(b"+5"), None);
    }

    #[test]
    fn s_maxage_wins_over_max_age_which_wins_over_expires() {
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let expires = b"Sun, 06 Nov 1994 08:59:37 GMT"; // +600 s
        let now = http_date(date).unwrap();
        let f = |v: &[&str]| freshness(&parse(v), Some(date), Some(expires), None, now).map(|f| f.lifetime);
        assert_eq!(f(&["max-age=60, s-maxage=10"]), Some(10));
        assert_eq!(f(&["max-age=60"]), Some(60));
        assert_eq!(f(&[]), Some(600));
        // No explicit freshness at all: not fresh (no heuristics).
        assert_eq!(freshness(&parse(&[]), Some(date), None, None, now), None);
        // An Expires that is not a date is in the past (§5.3).
        assert_eq!(freshness(&parse(&[]), Some(date), Some(b"0"), None, now), None);
        // Expires before Date: lifetime 0.
        let f0 = freshness(&parse(&[]), Some(expires), Some(date), None, now).unwrap();
        assert_eq!(f0.lifetime, 0);
    }

    #[test]
    fn initial_age_is_the_larger_of_age_and_apparent_age() {
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let t = http_date(date).unwrap();
        let d = parse(&["max-age=100"]);
        let f = |age: Option<&[u8]>, now| freshness(&d, Some(date), None, age, now).unwrap().initial_age;
        assert_eq!(f(None, t), 0);
        assert_eq!(f(Some(b"30"), t), 30);
        assert_eq!(f(Some(b"30"), t + 50), 50);
        // A Date in the future (skew): apparent age 0, not negative.
        assert_eq!(f(Some(b"3"), t - 10), 3);
        // An unreadable Age counts as none.
        assert_eq!(f(Some(b"x"), t), 0);
    }
}
